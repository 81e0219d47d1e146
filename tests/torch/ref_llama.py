#!/usr/bin/python3
"""PyTorch reference for atoll's Llama block (--arch llama), run like ref_gpt.py:

usage: ref_llama.py DIR   (DIR written by `torch_dump DIR llama`)

Written from the definitions, in float64: RMSNorm x / sqrt(mean(x^2) + eps) * w; rotary
embeddings in Hugging Face's half-split form (q cos + rotate_half(q) sin, rotate_half
([x1, x2]) = [-x2, x1], frequencies theta^(-2i/hs)); grouped-query attention (query head h
reads key/value head h // (heads / kv_heads)); SwiGLU down(silu(gate(x)) * up(x)); no
biases but, with qkv_bias (Qwen2), those of the q, k and v products before the rotary
embedding; heads head_dim wide (when it is not dim / heads, q and the attention output are
heads x head_dim wide and o maps them back to dim); an untied lm_head, or with tie the embedding as the head; with rope_factor,
Llama 3.1's scaling of the frequencies, as transformers' "llama3" rope type defines it
(wavelength 2 pi / w above original / low_freq: w / factor; below original / high_freq:
w; between: (1 - s) w / factor + s w, s = (original / wavelength - low) / (high - low)).
The comparisons and tolerances are ref_gpt.py's.
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


def llama3_scaling(w, cfg):
    f, lo, hi, orig = cfg["rope_factor"], cfg["rope_low_freq"], cfg["rope_high_freq"], cfg["rope_orig_context"]
    wavelen = 2 * math.pi / w
    s = (orig / wavelen - lo) / (hi - lo)
    blended = (1 - s) * w / f + s * w
    out = torch.where(wavelen > orig / lo, w / f, w)
    medium = (wavelen >= orig / hi) & (wavelen <= orig / lo)
    assert medium.any() and (wavelen > orig / lo).any() and (wavelen < orig / hi).any(), "not every regime is used"
    return torch.where(medium, blended, out)


class Llama(ref_gpt.GPT):
    def forward(self, idx):
        cfg = self.cfg
        B, T = idx.shape
        C, NH, KV, eps = cfg["dim"], cfg["heads"], cfg["kv_heads"], cfg["norm_eps"]
        hs = cfg.get("head_dim", C // NH)  # may differ from C // NH: q is NH hs wide, o maps it to C
        inv_freq = cfg["rope_theta"] ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
        if "rope_factor" in cfg:
            inv_freq = llama3_scaling(inv_freq, cfg)
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
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, NH * hs)
            x = x + F.linear(y, h("attn.o.weight"))
            a = rms_norm(x, h("mlp_norm.weight"), eps)
            a = F.silu(F.linear(a, h("mlp.gate.weight"))) * F.linear(a, h("mlp.up.weight"))
            x = x + F.linear(a, h("mlp.down.weight"))
        x = rms_norm(x, self.w("norm.weight"), eps)
        return F.linear(x, self.w("wte.weight" if cfg.get("tie") else "lm_head.weight"))


if __name__ == "__main__":
    sys.exit(ref_gpt.main(Llama))
