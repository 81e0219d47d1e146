#!/usr/bin/python3
"""PyTorch reference for atoll's GPT-2 model (run with Debian's /usr/bin/python3).

usage: ref_gpt.py DIR   (DIR written by torch_dump)

Loads the same safetensors weights and batches, then compares with what atoll
computed: logits, loss and every parameter's gradient on the first batch, then the
losses of 10 AdamW steps (warm-up + cosine schedule, weight decay on matrices and
embeddings only, global-norm clipping). Prints the worst errors; exit status 1 if any
exceeds its tolerance.
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

TOL_LOGITS = 1e-4   # max |diff| / max |ref|
TOL_GRAD = 1e-4     # per tensor: max |diff| / max |ref grad|
TOL_LOSS = 1e-4     # relative, per step


def read_safetensors(path):
    """A minimal independent reader: 8-byte length, JSON header, raw data."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        tensors[name] = (np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"]).copy(), b // 4)
    return tensors


class GPT(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.names = sorted(weights, key=lambda k: weights[k][1])  # layout order
        self.p = torch.nn.ParameterDict()
        for name in self.names:
            self.p[name.replace(".", "_")] = torch.nn.Parameter(torch.tensor(weights[name][0], dtype=torch.float64))

    def w(self, name):
        return self.p[name.replace(".", "_")]

    def forward(self, idx):
        B, T = idx.shape
        C, NH = self.cfg["dim"], self.cfg["heads"]
        hs = C // NH
        x = self.w("wte.weight")[idx] + self.w("wpe.weight")[:T]
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        for l in range(self.cfg["layers"]):
            h = lambda n: self.w(f"h.{l}.{n}")
            a = F.layer_norm(x, (C,), h("ln_1.weight"), h("ln_1.bias"), eps=1e-5)
            qkv = F.linear(a, h("attn.qkv.weight"), h("attn.qkv.bias"))
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)
            k = k.view(B, T, NH, hs).transpose(1, 2)
            v = v.view(B, T, NH, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + F.linear(y, h("attn.proj.weight"), h("attn.proj.bias"))
            a = F.layer_norm(x, (C,), h("ln_2.weight"), h("ln_2.bias"), eps=1e-5)
            a = F.gelu(F.linear(a, h("mlp.fc.weight"), h("mlp.fc.bias")), approximate="tanh")
            x = x + F.linear(a, h("mlp.proj.weight"), h("mlp.proj.bias"))
        x = F.layer_norm(x, (C,), self.w("ln_f.weight"), self.w("ln_f.bias"), eps=1e-5)
        return F.linear(x, self.w("wte.weight"))


def lr_at(cfg, step):
    lr, warm, total = cfg["lr"], cfg["warmup"], cfg["steps"]
    if warm > 0 and step < warm:
        return lr * (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, total - warm))
    min_lr = lr * cfg["min_lr_ratio"]
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def main(model_class=None):
    """model_class(cfg, weights): GPT here, Llama in ref_llama.py."""
    model_class = model_class or GPT
    d = sys.argv[1]
    cfg = json.load(open(f"{d}/config.json"))
    weights = read_safetensors(f"{d}/weights.safetensors")
    B, T, V, S = cfg["batch"], cfg["seq"], cfg["vocab"], cfg["steps"]
    batches = np.fromfile(f"{d}/batches.bin", dtype="<i4").reshape(S, 2, B, T)
    c_logits = np.fromfile(f"{d}/logits.bin", dtype="<f4").reshape(B, T, V)
    c_grads = np.fromfile(f"{d}/grads.bin", dtype="<f4")
    c_losses = np.fromfile(f"{d}/losses.bin", dtype="<f4")

    torch.manual_seed(0)
    model = model_class(cfg, weights)
    failures = 0

    # 1. logits, loss and gradients at the initial weights (reference in float64)
    idx = torch.tensor(batches[0, 0], dtype=torch.long)
    tgt = torch.tensor(batches[0, 1], dtype=torch.long)
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, V), tgt.view(-1))
    loss.backward()
    ref = logits.detach().numpy()
    err = np.abs(ref - c_logits).max() / np.abs(ref).max()
    print(f"logits: max rel error {err:.2e}")
    failures += err > TOL_LOGITS
    err = abs(loss.item() - c_losses[0]) / abs(loss.item())
    print(f"loss: torch {loss.item():.7f} atoll {c_losses[0]:.7f} rel error {err:.2e}")
    failures += err > TOL_LOSS
    worst = (0.0, "")
    for name in model.names:
        w, off = weights[name]
        g_ref = model.w(name).grad.numpy().ravel()
        g_c = c_grads[off:off + w.size]
        e = np.abs(g_ref - g_c).max() / max(np.abs(g_ref).max(), 1e-12)
        if e > worst[0]:
            worst = (e, name)
        if e > TOL_GRAD:
            print(f"gradient {name}: max rel error {e:.2e} FAIL")
            failures += 1
    print(f"gradients: {len(model.names)} tensors, worst max rel error {worst[0]:.2e} ({worst[1]})")

    # 2. the losses of 10 AdamW steps
    decay = [model.w(n) for n in model.names if len(weights[n][0].shape) == 2]
    no_decay = [model.w(n) for n in model.names if len(weights[n][0].shape) != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    model.zero_grad()
    worst_loss = 0.0
    for step in range(S):
        idx = torch.tensor(batches[step, 0], dtype=torch.long)
        tgt = torch.tensor(batches[step, 1], dtype=torch.long)
        opt.zero_grad()
        loss = F.cross_entropy(model(idx).view(-1, V), tgt.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(decay + no_decay, cfg["grad_clip"])
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        opt.step()
        e = abs(loss.item() - c_losses[step]) / abs(loss.item())
        worst_loss = max(worst_loss, e)
        print(f"step {step + 1:2d}: torch {loss.item():.6f} atoll {c_losses[step]:.6f} rel error {e:.1e}")
        failures += e > TOL_LOSS
    if c_losses[-1] > c_losses[0] - 0.1:
        print("losses did not fall: the comparison would be weak")
        failures += 1
    print(f"{'FAIL' if failures else 'OK'}: {failures} comparison(s) out of tolerance")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
