#!/usr/bin/python3
"""PyTorch DDP peer for bench/dp_run.sh: bench/torch_gpt.py's model on N processes (gloo).

usage: PYTHON bench/torch_ddp.py [--world 2] [--threads 1] [--steps S] [--layers 6]
           [--heads 6] [--dim 384] [--context 256] [--batch 8] [--vocab 256]
           [--bucket-cap-mb 25] [--timeout 600] [--attention manual|sdpa]
           [--grad-dtype fp32|bf16]

PYTHON is Debian's /usr/bin/python3 (torch 1.13) or a PyPI venv's (torch 2.x,
scripts/venv.sh). --attention sdpa (F.scaled_dot_product_attention) needs torch 2.
--grad-dtype bf16 registers DDP's bf16_compress_hook (gradient buckets cast to bfloat16,
all-reduced, cast back and divided by the world size; PyTorch's counterpart of atoll's
--grad-dtype bf16); torch 1.13 refuses it on gloo (it asks for CUDA and NCCL), 2.x runs it.

Launches --world processes on this machine itself (subprocesses of this script, joined
through torch.distributed's TCP store on 127.0.0.1 and a free port) and trains
bench/torch_gpt.py's GPT (imported, not copied: the same architecture, float32,
initialization and AdamW settings as the single-process peer) wrapped in
torch.nn.parallel.DistributedDataParallel with the gloo backend. Each rank draws its own
--batch random sequences per step (so the global batch is world x batch), and every step
is: zero_grad, forward, loss, backward (DDP all-reduces gradient buckets while backward
runs), clip_grad_norm_(1.0), AdamW step, loss.item().

--threads N (default 1) sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS
before torch loads and calls torch.set_num_threads(N) in every rank; 0 leaves torch's
defaults. Prints one JSON object on stdout: rank 0's median step time over the steps after
the first 3, global tokens/s from it, each rank's median and peak RSS. Progress on stderr.
"""
import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # importing torch_gpt must leave no __pycache__ in bench/
HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2, help="number of processes (ranks)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per rank (torch.set_num_threads and OMP/OPENBLAS/MKL_NUM_THREADS); "
                         "0: torch's default")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps left out of the median")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0,
                    help="DDP gradient bucket size in MiB (25 is torch's default)")
    ap.add_argument("--attention", choices=("manual", "sdpa"), default="manual",
                    help="attention: masked softmax (manual) or F.scaled_dot_product_attention (torch 2)")
    ap.add_argument("--grad-dtype", choices=("fp32", "bf16"), default="fp32",
                    help="gradients on the wire: fp32, or bf16 (DDP's bf16_compress_hook)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds before the launcher ends a run that has not finished")
    # internal: set by the launcher for each worker
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--result", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps <= args.skip:
        ap.error(f"--steps must be larger than --skip ({args.skip})")
    if args.dim % args.heads:
        ap.error("--heads must divide --dim")
    if args.world < 1:
        ap.error("--world must be at least 1")
    return args


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(args):
    """One rank: the environment is already set (by the launcher) before torch loads."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    sys.path.insert(0, HERE)
    from torch_gpt import GPT  # bench/torch_gpt.py's model

    if args.threads > 0:
        torch.set_num_threads(args.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
    rank, world = args.rank, args.world
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=rank, world_size=world)
    torch.manual_seed(args.seed)  # same weights on every rank (DDP broadcasts rank 0's anyway)
    L, NH, C, T, B, V = args.layers, args.heads, args.dim, args.context, args.batch, args.vocab
    model = GPT(L, NH, C, T, V, attention=args.attention)
    # The only buffer is the constant causal mask (bool, which gloo cannot broadcast), the
    # same on every rank: DDP leaves it out of its initial sync and of every forward.
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, ["mask"])
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb,
                                                    broadcast_buffers=False)
    if args.grad_dtype == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    nparams = sum(p.numel() for p in params)
    if rank == 0:
        print(f"torch_ddp: torch {torch.__version__}, gloo, {args.grad_dtype} gradients, {args.attention} attention, {world} ranks x {torch.get_num_threads()} "
              f"thread(s), {nparams} parameters, B={B} per rank, T={T}, {args.steps} steps",
              file=sys.stderr)

    gen = torch.Generator().manual_seed(args.seed + 1000 * rank)  # a different slice per rank
    step_s, losses = [], []
    dist.barrier()
    for step in range(args.steps):
        tok = torch.randint(0, V, (B, T + 1), generator=gen)
        idx, tgt = tok[:, :-1], tok[:, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = ddp(idx)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        step_s.append(dt)
        losses.append(lv)
        if rank == 0:
            print(f"  step {step + 1}/{args.steps}: loss {lv:.4f}, {B * T * world / dt:.0f} tok/s",
                  file=sys.stderr)
    # every rank must end with the same weights: compare a checksum across ranks
    with torch.no_grad():
        check = torch.tensor([sum(float(p.double().sum()) for p in params)], dtype=torch.float64)
    checks = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(checks, check)
    out = {
        "rank": rank,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "params": nparams,
        "step_seconds": step_s,
        "median_step_seconds": median(step_s[args.skip:]),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "weights_identical": len({float(c.item()) for c in checks}) == 1,
    }
    dist.destroy_process_group()
    with open(args.result, "w") as f:
        json.dump(out, f)
    return 0


def launch(args):
    env = dict(os.environ)
    if args.threads > 0:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(args.threads)
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="atoll-torch-ddp.")
    base = [sys.executable, os.path.abspath(__file__)] + [a for a in sys.argv[1:]]
    procs, results = [], []
    for r in range(args.world):
        res = os.path.join(tmp, f"rank{r}.json")
        results.append(res)
        procs.append(subprocess.Popen(base + ["--rank", str(r), "--port", str(port), "--result", res],
                                      env=env))
    deadline = time.monotonic() + args.timeout
    failed = None
    while any(p.poll() is None for p in procs):
        for r, p in enumerate(procs):
            if p.poll() not in (None, 0) and failed is None:
                failed = f"rank {r} exited with status {p.returncode}"
        if failed is None and time.monotonic() > deadline:
            failed = f"not finished within {args.timeout:.0f} s"
        if failed:
            for p in procs:  # only the workers this launcher started
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            break
        time.sleep(0.05)
    for r, p in enumerate(procs):
        if failed is None and p.returncode != 0:
            failed = f"rank {r} exited with status {p.returncode}"
    if failed:
        print(f"torch_ddp.py: {failed}", file=sys.stderr)
        return 1
    ranks = []
    for res in results:
        with open(res) as f:
            ranks.append(json.load(f))
        os.remove(res)
    os.rmdir(tmp)
    r0 = ranks[0]
    tokens_per_step = args.batch * args.context * args.world
    out = {
        "peer": "pytorch-ddp",
        "backend": "gloo",
        "torch_version": r0["torch_version"],
        "world_size": args.world,
        "threads": r0["threads"],
        "threads_requested": args.threads,
        "interop_threads": r0["interop_threads"],
        "bucket_cap_mb": args.bucket_cap_mb,
        "grad_dtype": args.grad_dtype,
        "attention": args.attention,
        "params": r0["params"],
        "shape": {"layers": args.layers, "heads": args.heads, "dim": args.dim,
                  "context": args.context, "batch": args.batch, "vocab": args.vocab},
        "steps": args.steps,
        "steps_skipped": args.skip,
        "tokens_per_step": tokens_per_step,
        "median_step_seconds": r0["median_step_seconds"],
        "tokens_per_second": tokens_per_step / r0["median_step_seconds"],
        "median_step_seconds_per_rank": [x["median_step_seconds"] for x in ranks],
        "peak_rss_bytes": max(x["peak_rss_bytes"] for x in ranks),
        "peak_rss_bytes_per_rank": [x["peak_rss_bytes"] for x in ranks],
        "weights_identical": all(x["weights_identical"] for x in ranks),
        "first_loss": r0["first_loss"],
        "last_loss": r0["last_loss"],
        "step_seconds": r0["step_seconds"],
    }
    print(json.dumps(out, indent=2))
    return 0 if out["weights_identical"] else 1


if __name__ == "__main__":
    a = parse()
    sys.exit(worker(a) if a.rank >= 0 else launch(a))
