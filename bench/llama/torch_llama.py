#!/usr/bin/env python3
"""PyTorch peer for bench/llama/run.sh: atoll's --arch llama, trained like atoll.

usage: PYTHON bench/llama/torch_llama.py [--threads N] [--steps S] [--layers 6] [--heads 6]
            [--kv-heads 2] [--dim 384] [--context 256] [--batch 8] [--vocab 256]
            [--multiple-of 256] [--gqa auto|enable|repeat] [--precision fp32|bf16] [--compile]

PYTHON is a PyPI venv's (torch 2.x). The model follows tests/torch/ref_llama.py and
atoll's layout (src/model/layout.c): RMSNorm (eps 1e-5), rotary embeddings in the
half-split form (theta 10000), grouped-query attention through
F.scaled_dot_product_attention(is_causal=True) (enable_gqa=True where torch offers it,
else key/value heads repeated with repeat_interleave), SwiGLU of width
multiple_of * ceil(floor(8 dim / 3) / multiple_of), no biases, an untied lm_head. Float32
weights; --precision bf16 wraps forward and loss in torch.autocast("cpu", bfloat16).
Matrices and embeddings N(0, 0.02), the two residual projections (attn.o, mlp.down)
N(0, 0.02/sqrt(2L)), norm gains 1. AdamW (lr 3e-4, weight decay 0.1 on 2-D tensors,
betas 0.9/0.95), global-norm clipping at 1.0, random byte tokens.

One timed step = zero_grad, forward, loss, backward, clip, optimizer step, loss.item().
The report is the median over the steps after the first 3. One JSON object on stdout
(torch_gpt.py's keys); progress on stderr.
"""
import argparse
import json
import math
import os
import platform
import resource
import sys
import time

# torch_gpt sets OMP/OPENBLAS/MKL_NUM_THREADS from --threads before it imports torch.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_gpt import blas_libraries, median, timed_steps  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def swiglu_width(dim, multiple_of):
    """atoll_shape_hidden (src/model/layout.c)."""
    h = 8 * dim // 3
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def flops_per_token(L, C, NH, KV, H, V, T):
    """atoll_flops_per_token for --arch llama: 6 per matrix parameter (untied head
    included) plus attention's 6 L C T."""
    kvw = KV * (C // NH)
    return 6.0 * (L * (2.0 * C * C + 2.0 * kvw * C + 3.0 * C * H) + V * C) + 6.0 * L * C * T


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Llama(torch.nn.Module):
    def __init__(self, L, NH, KV, C, T, V, H, gqa, eps=1e-5, theta=10000.0):
        super().__init__()
        self.L, self.NH, self.KV, self.C, self.V, self.gqa, self.eps = L, NH, KV, C, V, gqa, eps
        hs = C // NH
        P = torch.nn.Parameter
        self.wte = P(torch.empty(V, C))
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.attn_norm = P(torch.ones(C))
            b.q, b.k, b.v = P(torch.empty(C, C)), P(torch.empty(KV * hs, C)), P(torch.empty(KV * hs, C))
            b.o = P(torch.empty(C, C))
            b.mlp_norm = P(torch.ones(C))
            b.gate, b.up, b.down = P(torch.empty(H, C)), P(torch.empty(H, C)), P(torch.empty(C, H))
            self.blocks.append(b)
        self.norm = P(torch.ones(C))
        self.lm_head = P(torch.empty(V, C))
        inv_freq = theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        resid_std = 0.02 / math.sqrt(2 * L)
        with torch.no_grad():
            self.wte.normal_(0.0, 0.02)
            self.lm_head.normal_(0.0, 0.02)
            for b in self.blocks:
                for w in (b.q, b.k, b.v, b.gate, b.up):
                    w.normal_(0.0, 0.02)
                b.o.normal_(0.0, resid_std)
                b.down.normal_(0.0, resid_std)

    def forward(self, idx):
        B, T = idx.shape
        C, NH, KV = self.C, self.NH, self.KV
        hs = C // NH
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.wte[idx]
        for b in self.blocks:
            a = rms_norm(x, b.attn_norm, self.eps)
            q = F.linear(a, b.q).view(B, T, NH, hs).transpose(1, 2)
            k = F.linear(a, b.k).view(B, T, KV, hs).transpose(1, 2)
            v = F.linear(a, b.v).view(B, T, KV, hs).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if self.gqa == "enable":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                k = k.repeat_interleave(NH // KV, dim=1)
                v = v.repeat_interleave(NH // KV, dim=1)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            x = x + F.linear(y, b.o)
            a = rms_norm(x, b.mlp_norm, self.eps)
            x = x + F.linear(F.silu(F.linear(a, b.gate)) * F.linear(a, b.up), b.down)
        return F.linear(rms_norm(x, self.norm, self.eps), self.lm_head)


def sdpa_has_gqa():
    try:
        q = torch.zeros(1, 2, 2, 4)
        kv = torch.zeros(1, 1, 2, 4)
        F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        return True
    except (TypeError, RuntimeError):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads(N), set_num_interop_threads(1), OMP/OPENBLAS/MKL_NUM_THREADS=N")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps left out of the median")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--multiple-of", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--gqa", choices=["auto", "enable", "repeat"], default="auto",
                    help="enable: SDPA's enable_gqa; repeat: repeat_interleave the key/value heads; "
                         "auto: enable where this torch offers it")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = ap.parse_args()
    if not hasattr(F, "scaled_dot_product_attention"):
        ap.error("needs torch 2 (F.scaled_dot_product_attention); this is torch " + torch.__version__)
    if args.steps <= args.skip:
        ap.error(f"--steps must be larger than --skip ({args.skip})")
    if args.dim % args.heads or (args.dim // args.heads) % 2:
        ap.error("--heads must divide --dim into an even head size")
    if args.kv_heads < 1 or args.heads % args.kv_heads:
        ap.error("--kv-heads must divide --heads")
    gqa = args.gqa
    if gqa == "auto":
        gqa = "enable" if sdpa_has_gqa() else "repeat"
    elif gqa == "enable" and not sdpa_has_gqa():
        ap.error("--gqa enable: this torch's scaled_dot_product_attention has no enable_gqa")

    interop_note = "unchanged"
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        try:
            torch.set_num_interop_threads(1)
            interop_note = "set to 1"
        except RuntimeError as e:
            interop_note = f"not set: {e}"
    torch.manual_seed(args.seed)

    L, NH, KV, C, T, B, V = args.layers, args.heads, args.kv_heads, args.dim, args.context, args.batch, args.vocab
    H = swiglu_width(C, args.multiple_of)
    model = Llama(L, NH, KV, C, T, V, H, gqa)
    params = list(model.parameters())
    nparams = sum(p.numel() for p in params)
    print(f"torch_llama: torch {torch.__version__}, {torch.get_num_threads()} threads, {nparams} parameters, "
          f"SwiGLU width {H}, gqa {gqa}, {args.precision}{', compiled' if args.compile else ''}, "
          f"B={B} T={T}, {args.steps} steps", file=sys.stderr)

    step_s, losses = timed_steps(model, params, V, B, T, args.steps, args.seed, args.precision, args.compile,
                                 "torch_llama")
    if not math.isfinite(losses[-1]):
        return 1

    med = median(step_s[args.skip:])
    tps = B * T / med
    fpt = flops_per_token(L, C, NH, KV, H, V, T)
    print(json.dumps({
        "peer": "pytorch", "arch": "llama", "torch_version": torch.__version__,
        "python": platform.python_version(), "threads": torch.get_num_threads(),
        "threads_requested": args.threads, "interop_threads": torch.get_num_interop_threads(),
        "interop_threads_note": interop_note, "attention": "sdpa", "gqa": gqa,
        "precision": args.precision, "compiled": args.compile, "blas_libraries": blas_libraries(),
        "params": nparams, "swiglu_width": H,
        "shape": {"layers": L, "heads": NH, "kv_heads": KV, "dim": C, "context": T, "batch": B, "vocab": V},
        "steps": args.steps, "steps_skipped": args.skip, "median_step_seconds": med,
        "tokens_per_second": tps, "flops_per_token": fpt, "model_flops_per_second": tps * fpt,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "first_loss": losses[0], "last_loss": losses[-1], "step_seconds": step_s,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
