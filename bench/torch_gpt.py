#!/usr/bin/python3
"""PyTorch peer for bench/run.sh: atoll's GPT-2 architecture, trained in float32.

usage: PYTHON bench/torch_gpt.py [--threads N] [--steps S] [--layers 6] [--heads 6]
                                 [--dim 384] [--context 256] [--batch 8] [--vocab 256]
                                 [--attention manual|sdpa] [--precision fp32|bf16] [--compile]

PYTHON is Debian's /usr/bin/python3 (torch 1.13) or a PyPI venv's (torch 2.x): --attention
sdpa (F.scaled_dot_product_attention), --precision bf16 (torch.autocast on the CPU: bf16
matrix products, fp32 weights and optimizer) and --compile (torch.compile of the model)
need torch 2.

The model is the one in tests/torch/ref_gpt.py (pre-LayerNorm blocks, fused qkv, causal
softmax attention, tanh-GELU MLP, final LayerNorm, LM head tied to wte), here in float32
with nn.Parameters initialized like GPT-2 and like atoll: matrices and embeddings
N(0, 0.02), the two residual projections N(0, 0.02/sqrt(2L)), LayerNorm gains 1, biases 0.
It trains on random byte tokens with AdamW (lr 3e-4, weight decay 0.1 on matrices and
embeddings only, betas 0.9/0.95) and global-norm clipping at 1.0.

One timed step = zero_grad, forward, loss, backward, clip, optimizer step (and reading the
loss). The report is the median over the steps after the first 3 (warm-up). Prints one
JSON object on stdout; progress goes to stderr.
"""
import argparse
import json
import math
import os
import platform
import resource
import sys
import time



def threads_flag(argv):
    """--threads N / --threads=N from the command line, before argparse runs (0: absent)."""
    for i, a in enumerate(argv):
        v = argv[i + 1] if a == "--threads" and i + 1 < len(argv) else (
            a.split("=", 1)[1] if a.startswith("--threads=") else None)
        if v is not None:
            try:
                return max(0, int(v))
            except ValueError:
                return 0
    return 0


# Debian's torch calls BLAS through libblas.so.3 (OpenBLAS, by default its pthreads build),
# whose thread count is read from the environment when the library loads;
# torch.set_num_threads does not reach it. So --threads also sets the environment, before
# torch is imported.
_THREADS = threads_flag(sys.argv[1:])
if _THREADS > 0:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(_THREADS)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0; not in Debian's 1.13


def flops_per_token(L, C, V, T):
    """atoll's count (src/model/layout.c atoll_flops_per_token): 6 FLOPs per matrix
    parameter per token (forward 2, backward 4) over the blocks' matrices and the tied LM
    head, plus attention's scores and weighted sum, 6*L*C*T."""
    return 6.0 * (12.0 * L * C * C + V * C) + 6.0 * L * C * T


class GPT(torch.nn.Module):
    def __init__(self, L, NH, C, T, V, attention="manual"):
        super().__init__()
        self.L, self.NH, self.C, self.T, self.V = L, NH, C, T, V
        self.attention = attention
        P = torch.nn.Parameter
        self.wte = P(torch.empty(V, C))
        self.wpe = P(torch.empty(T, C))
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln_1_w, b.ln_1_b = P(torch.ones(C)), P(torch.zeros(C))
            b.qkv_w, b.qkv_b = P(torch.empty(3 * C, C)), P(torch.zeros(3 * C))
            b.proj_w, b.proj_b = P(torch.empty(C, C)), P(torch.zeros(C))
            b.ln_2_w, b.ln_2_b = P(torch.ones(C)), P(torch.zeros(C))
            b.fc_w, b.fc_b = P(torch.empty(4 * C, C)), P(torch.zeros(4 * C))
            b.mproj_w, b.mproj_b = P(torch.empty(C, 4 * C)), P(torch.zeros(C))
            self.blocks.append(b)
        self.ln_f_w, self.ln_f_b = P(torch.ones(C)), P(torch.zeros(C))
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))
        resid_std = 0.02 / math.sqrt(2 * L)
        with torch.no_grad():
            self.wte.normal_(0.0, 0.02)
            self.wpe.normal_(0.0, 0.02)
            for b in self.blocks:
                b.qkv_w.normal_(0.0, 0.02)
                b.proj_w.normal_(0.0, resid_std)
                b.fc_w.normal_(0.0, 0.02)
                b.mproj_w.normal_(0.0, resid_std)

    def forward(self, idx):
        B, T = idx.shape
        C, NH = self.C, self.NH
        hs = C // NH
        x = self.wte[idx] + self.wpe[:T]
        mask = self.mask[:T, :T]
        for b in self.blocks:
            a = F.layer_norm(x, (C,), b.ln_1_w, b.ln_1_b, eps=1e-5)
            q, k, v = F.linear(a, b.qkv_w, b.qkv_b).split(C, dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)
            k = k.view(B, T, NH, hs).transpose(1, 2)
            v = v.view(B, T, NH, hs).transpose(1, 2)
            if self.attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
                att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            x = x + F.linear(y, b.proj_w, b.proj_b)
            a = F.layer_norm(x, (C,), b.ln_2_w, b.ln_2_b, eps=1e-5)
            a = F.gelu(F.linear(a, b.fc_w, b.fc_b), approximate="tanh")
            x = x + F.linear(a, b.mproj_w, b.mproj_b)
        x = F.layer_norm(x, (C,), self.ln_f_w, self.ln_f_b, eps=1e-5)
        return F.linear(x, self.wte)


def blas_libraries():
    """The BLAS/OpenMP shared objects this process mapped (what torch's matmuls call)."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                name = os.path.basename(path)
                if any(s in name for s in ("blas", "mkl", "gomp", "omp.so", "dnnl")):
                    libs.add(path)
    except OSError:
        pass
    return sorted(libs)


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def timed_steps(model, params, V, B, T, steps, seed, precision, compile_model, name):
    """AdamW steps on random tokens (decay on matrices only, clipping at 1.0), each timed;
    returns (seconds per step, losses). Shared with bench/llama/torch_llama.py."""
    run_model = torch.compile(model) if compile_model else model
    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(seed)
    step_s, losses = [], []
    for step in range(steps):
        tok = torch.randint(0, V, (B, T + 1), generator=gen)
        idx, tgt = tok[:, :-1], tok[:, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = run_model(idx)
            loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        step_s.append(dt)
        losses.append(lv)
        print(f"  step {step + 1}/{steps}: loss {lv:.4f}, {B * T / dt:.0f} tok/s", file=sys.stderr)
        if not math.isfinite(lv):
            print(f"{name}: step {step + 1}: loss is {lv}", file=sys.stderr)
            break
    return step_s, losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads(N), set_num_interop_threads(1) and "
                         "OMP/OPENBLAS/MKL_NUM_THREADS=N (0: leave torch's default)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps left out of the median")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--attention", choices=["manual", "sdpa"] if HAS_SDPA else ["manual"],
                    default="manual",
                    help="sdpa: F.scaled_dot_product_attention (only offered where torch has it)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast(device_type='cpu', dtype=torch.bfloat16) around forward and loss")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch 2)")
    args = ap.parse_args()
    if args.compile and not hasattr(torch, "compile"):
        ap.error("--compile needs torch 2 (this is torch " + torch.__version__ + ")")
    if args.steps <= args.skip:
        ap.error(f"--steps must be larger than --skip ({args.skip})")
    if args.dim % args.heads:
        ap.error("--heads must divide --dim")

    default_threads = torch.get_num_threads()  # already the environment's, if --threads
    interop_note = "unchanged"
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        try:
            torch.set_num_interop_threads(1)
            interop_note = "set to 1"
        except RuntimeError as e:  # only allowed before any inter-op work has started
            interop_note = f"not set: {e}"
    torch.manual_seed(args.seed)

    L, NH, C, T, B, V = args.layers, args.heads, args.dim, args.context, args.batch, args.vocab
    model = GPT(L, NH, C, T, V, args.attention)
    params = list(model.parameters())
    nparams = sum(p.numel() for p in params)
    print(f"torch_gpt: torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{nparams} parameters, B={B} T={T}, {args.steps} steps", file=sys.stderr)

    step_s, losses = timed_steps(model, params, V, B, T, args.steps, args.seed, args.precision, args.compile,
                                 "torch_gpt")

    med = median(step_s[args.skip:])
    tps = B * T / med
    fpt = flops_per_token(L, C, V, T)
    out = {
        "peer": "pytorch",
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "threads_requested": args.threads,
        "default_threads": default_threads,
        "interop_threads": torch.get_num_interop_threads(),
        "interop_threads_note": interop_note,
        "attention": args.attention,
        "precision": args.precision,
        "compiled": args.compile,
        "sdpa_available": HAS_SDPA,
        "blas_libraries": blas_libraries(),
        "params": nparams,
        "shape": {"layers": L, "heads": NH, "dim": C, "context": T, "batch": B, "vocab": V},
        "steps": args.steps,
        "steps_skipped": args.skip,
        "median_step_seconds": med,
        "tokens_per_second": tps,
        "flops_per_token": fpt,
        "model_flops_per_second": tps * fpt,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "step_seconds": step_s,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
