"""A few of atoll's training steps from a model saved by transformers, redone in PyTorch.
Used by tests/cli/test_hf_llama.sh (the venv of scripts/venv.sh).

usage: step_check.py HF_DIR RUN_DIR EXPORT_DIR

HF_DIR is the model transformers saved, RUN_DIR an `atoll train --init-from-hf HF_DIR`
run of adamw or sgd on one rank with --accum 1, EXPORT_DIR `atoll export` of its last
checkpoint. The settings (seed, batch, seq, steps, the optimizer's, the data directory)
are read from the checkpoint's state.json. The windows are drawn as src/data/dataset.c
draws them: window b of step s starts at hash64(seed, s, b, "window") modulo the number
of valid starts over the train token files laid end to end (a token file's valid starts:
its tokens - seq). transformers' LlamaForCausalLM, in float64, takes the same steps: the
mean cross-entropy over the batch, the gradient clipped by its global norm to grad-clip
(factor grad-clip / (norm + 1e-6)), then AdamW (decoupled weight decay on matrices and
embeddings only, atoll's learning-rate schedule: linear warm-up, cosine to lr x
min-lr-ratio) or SGD. Every tensor after the steps must equal atoll's within 1e-5
relative (norm-wise: |atoll - torch| / |torch|); how far that is from the change the steps
made (|atoll - torch| / |torch - start|) is printed too.
"""
import glob
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_hf import load_all  # noqa: E402

MASK = (1 << 64) - 1
WINDOW_SALT = 0x77696E646F77  # "window", src/data/dataset.c


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return x, z ^ (z >> 31)


def hash64(a, b, c, d):
    """src/core/rng.c's atoll_hash64"""
    _, h = splitmix64(a)
    _, h = splitmix64(h ^ b)
    _, h = splitmix64(h ^ c)
    _, h = splitmix64(h ^ d)
    return h


def token_file(path):
    """docs/formats.md, "Token files": a 32-byte header, then N tokens of W bytes"""
    raw = open(path, "rb").read()
    assert raw[:8] == b"ATOLLTOK", path
    n, width = int.from_bytes(raw[16:24], "little"), int.from_bytes(raw[24:28], "little")
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[width]
    return np.frombuffer(raw, dtype=dtype, count=n, offset=32).astype(np.int64)


def windows(data, seed, step, batch, seq):
    files = [token_file(f) for f in sorted(glob.glob(os.path.join(data, "train_*.bin")))]
    starts = [max(len(f) - seq, 0) for f in files]
    out = []
    for b in range(batch):
        pos = hash64(seed, step, b, WINDOW_SALT) % sum(starts)
        for f, v in zip(files, starts):
            if pos < v:
                out.append(f[pos:pos + seq + 1])
                break
            pos -= v
    return torch.from_numpy(np.stack(out))


def lr_at(c, step):
    """src/optim/adamw.c's atoll_lr_at"""
    lr, warmup, total = c["lr"], c["warmup"], c["steps"]
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    if total - warmup <= 0:
        return lr
    progress = min((step - warmup) / (total - warmup), 1.0)
    low = lr * c["min-lr-ratio"]
    return low + 0.5 * (lr - low) * (1 + math.cos(math.pi * progress))


def main(hf_dir, run_dir, export_dir):
    from transformers import AutoModelForCausalLM
    last = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "step_*")))[-1]
    c = json.load(open(os.path.join(last, "state.json")))["config"]
    assert c["accum"] == 1 and c["optimizer"] in ("adamw", "sgd"), (c["accum"], c["optimizer"])
    steps, batch, seq, seed = c["steps"], c["batch"], c["seq"] or c["context"], int(c["seed"])
    model = AutoModelForCausalLM.from_pretrained(hf_dir).double()
    model.train()
    names = dict(model.named_parameters())
    start = {k: v.detach().clone() for k, v in names.items()}
    decay = [p for p in names.values() if p.dim() == 2]  # matrices and embeddings (layout.c's decay)
    plain = [p for p in names.values() if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": c["weight-decay"]}, {"params": plain, "weight_decay": 0.0}]
    if c["optimizer"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])
    else:
        opt = torch.optim.SGD(groups, lr=c["lr"])
    losses = []
    for s in range(steps):
        w = windows(c["data"], seed, s, batch, seq)
        for g in opt.param_groups:
            g["lr"] = lr_at(c, s)
        opt.zero_grad()
        logits = model(w[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        loss.backward()
        if c["grad-clip"] > 0:
            torch.nn.utils.clip_grad_norm_(list(names.values()), c["grad-clip"])
        opt.step()
        losses.append(float(loss.detach()))
    got = load_all(export_dir)
    assert sorted(got) == sorted(names), sorted(set(got) ^ set(names))
    worst, worst_moved, where = 0.0, 0.0, ""
    for k, p in names.items():
        want = p.detach().numpy()
        diff = np.linalg.norm(got[k].astype(np.float64) - want)
        rel = diff / np.linalg.norm(want)
        moved = np.linalg.norm(want - start[k].numpy())
        if rel > worst:
            worst, where = rel, k
        worst_moved = max(worst_moved, diff / moved if moved > 0 else 0.0)
    atoll_losses = [json.loads(line)["loss"] for line in open(os.path.join(run_dir, "metrics.jsonl")) if '"loss"' in line]
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(atoll_losses, losses)) if atoll_losses else float("nan")
    print(f"{steps} {c['optimizer']} step(s) of batch {batch} x {seq} against transformers in float64: "
          f"{len(names)} tensors, worst |atoll - torch| / |torch| = {worst:.2g} ({where}), "
          f"/ |torch - start| = {worst_moved:.2g}; losses {loss_rel:.2g} relative")
    assert worst < 1e-5, (worst, where)


if __name__ == "__main__":
    main(*sys.argv[1:])
