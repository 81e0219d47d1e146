#!/usr/bin/python3
"""PyTorch reference for atoll's Llama block (--arch llama), run like ref_gpt.py:

usage: ref_llama.py DIR   (DIR written by `torch_dump DIR llama`)

Written from the definitions, in float64: RMSNorm x / sqrt(mean(x^2) + eps) * w; rotary
embeddings in Hugging Face's half-split form (q cos + rotate_half(q) sin, rotate_half
([x1, x2]) = [-x2, x1], frequencies theta^(-2i/hs)); grouped-query attention (query head h
reads key/value head h // (heads / kv_heads)); SwiGLU down(silu(gate(x)) * up(x)); no
biases but, with qkv_bias (Qwen2), those of the q, k and v products before the rotary
embedding; an untied lm_head. The comparisons and tolerances are ref_gpt.py's.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gpt  # noqa: E402


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Llama(ref_gpt.GPT):
    def forward(self, idx):
        cfg = self.cfg
        B, T = idx.shape
        C, NH, KV, eps = cfg["dim"], cfg["heads"], cfg["kv_heads"], cfg["norm_eps"]
        hs = C // NH
        inv_freq = cfg["rope_theta"] ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
        ang = torch.cat((ang, ang), dim=-1)  # [T, hs]
        cos, sin = ang.cos(), ang.sin()
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        x = self.w("wte.weight")[idx]
        for l in range(cfg["layers"]):
            h = lambda n: self.w(f"h.{l}.{n}")
            a = rms_norm(x, h("attn_norm.weight"), eps)
            b = (lambda n: h(f"attn.{n}.bias")) if cfg.get("qkv_bias") else (lambda n: None)
            q = F.linear(a, h("attn.q.weight"), b("q")).view(B, T, NH, hs).transpose(1, 2)
            k = F.linear(a, h("attn.k.weight"), b("k")).view(B, T, KV, hs).transpose(1, 2)
            v = F.linear(a, h("attn.v.weight"), b("v")).view(B, T, KV, hs).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(NH // KV, dim=1)
            v = v.repeat_interleave(NH // KV, dim=1)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + F.linear(y, h("attn.o.weight"))
            a = rms_norm(x, h("mlp_norm.weight"), eps)
            a = F.silu(F.linear(a, h("mlp.gate.weight"))) * F.linear(a, h("mlp.up.weight"))
            x = x + F.linear(a, h("mlp.down.weight"))
        x = rms_norm(x, self.w("norm.weight"), eps)
        return F.linear(x, self.w("lm_head.weight"))


if __name__ == "__main__":
    sys.exit(ref_gpt.main(Llama))
