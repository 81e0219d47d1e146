"""Checks of atoll's Hugging Face export with transformers, tokenizers and safetensors
(the venv of scripts/venv.sh). Used by tests/cli/test_hf.sh.

  check_hf.py logits EXPORT_DIR DUMP_DIR   transformers' logits == atoll's (hf_logits) within 1e-4
  check_hf.py tokenizer EXPORT_DIR         tokenizer.json loads; encode(x) == x's bytes, decode inverts
  check_hf.py make OUT_DIR L H C CTX V     a tiny GPT-2 made by transformers, save_pretrained
  check_hf.py same DIR_A DIR_B             model.safetensors tensor-by-tensor equal, same config shape
  check_hf.py edit SRC DST OP [ARG]        a copy of SRC changed for the refusal tests: drop NAME,
                                           extra NAME, tie (lm_head.weight = wte), untie, model_type T, bf16
"""
import json, os, sys

import numpy as np


def logits(export_dir, dump_dir):
    import torch
    from transformers import AutoModelForCausalLM
    with open(os.path.join(export_dir, "config.json")) as f:
        cfg = json.load(f)
    from safetensors import safe_open
    with safe_open(os.path.join(export_dir, "model.safetensors"), "pt") as f:
        meta = f.metadata()
    assert meta == {"format": "pt"}, f"metadata {meta}"
    model = AutoModelForCausalLM.from_pretrained(export_dir).float().eval()
    assert type(model).__name__ == "GPT2LMHeadModel", type(model).__name__
    V, T = cfg["vocab_size"], cfg["n_positions"]
    tokens = np.fromfile(os.path.join(dump_dir, "tokens.bin"), dtype=np.int32).reshape(-1, T)
    ref = np.fromfile(os.path.join(dump_dir, "logits.bin"), dtype=np.float32).reshape(tokens.shape[0], T, V)
    with torch.no_grad():
        out = model(torch.from_numpy(tokens.astype(np.int64))).logits.numpy()
    diff = float(np.abs(out - ref).max())
    print(f"logits: {out.shape}, max |transformers - atoll| = {diff:.3g} (logits up to {np.abs(ref).max():.3g})")
    assert diff < 1e-4, diff


def tokenizer(export_dir):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(export_dir, "tokenizer.json"))
    assert tok.get_vocab_size() == 256, tok.get_vocab_size()
    texts = ["Hello, world!", "  two  spaces\tand tabs\nand lines\r\n", "naïve café — ünïcödé 日本語 🙂",
             "".join(chr(c) for c in range(1, 256)), "\x00nul", ""]
    rng = np.random.default_rng(1)
    texts += ["".join(chr(int(c)) for c in rng.integers(1, 0x3000, 40)) for _ in range(20)]
    for t in texts:
        ids = tok.encode(t).ids
        want = list(t.encode("utf-8"))
        assert ids == want, (t, ids[:20], want[:20])
        assert tok.decode(ids) == t, (t, tok.decode(ids))
    print(f"tokenizer: {len(texts)} texts encode to their UTF-8 bytes and decode back")


def make(out, L, H, C, ctx, V):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(3)
    cfg = GPT2Config(n_layer=int(L), n_head=int(H), n_embd=int(C), n_positions=int(ctx), vocab_size=int(V),
                     activation_function="gelu_new", layer_norm_epsilon=1e-5, bos_token_id=None,
                     eos_token_id=None)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():  # not the default init: LayerNorms and biases away from 1 and 0
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(out)
    print(f"made {out}: {sorted(os.listdir(out))}")


def same(a, b):
    from safetensors.numpy import load_file
    ta, tb = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
    assert sorted(ta) == sorted(tb), (sorted(set(ta) ^ set(tb)))
    for k in ta:
        assert ta[k].dtype == tb[k].dtype and ta[k].shape == tb[k].shape, (k, ta[k].shape, tb[k].shape)
        assert np.array_equal(ta[k], tb[k]), k
    ca, cb = (json.load(open(os.path.join(d, "config.json"))) for d in (a, b))
    for k in ("model_type", "n_layer", "n_head", "n_embd", "n_positions", "vocab_size", "layer_norm_epsilon"):
        assert ca[k] == cb[k], (k, ca[k], cb[k])
    print(f"same: {len(ta)} tensors bit-identical")


def edit(src, dst, op, arg=None):
    import shutil
    from safetensors.numpy import load_file, save_file
    shutil.copytree(src, dst)
    t = load_file(os.path.join(src, "model.safetensors"))
    cfg = json.load(open(os.path.join(src, "config.json")))
    wte = t["transformer.wte.weight"]
    if op == "drop":
        del t[arg]
    elif op == "extra":
        t[arg] = np.zeros(3, np.float32)
    elif op == "tie":
        t["lm_head.weight"] = wte.copy()
    elif op == "untie":
        t["lm_head.weight"] = wte + 1
    elif op == "model_type":
        cfg["model_type"] = arg
    elif op == "bf16":  # keep the top 16 bits: exactly representable in bfloat16
        import torch
        t = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in t.items()}
        from safetensors.torch import save_file as save_torch
        save_torch(t, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
        return
    save_file(t, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))


def same_bf16(a, b):
    """b holds a's weights rounded to bfloat16 (what edit bf16 wrote, read back by atoll)."""
    import torch
    from safetensors.numpy import load_file
    ta, tb = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
    for k in ta:
        want = torch.from_numpy(ta[k]).to(torch.bfloat16).float().numpy()
        assert np.array_equal(want, tb[k]), k
    print(f"bf16: {len(ta)} tensors read as their bfloat16 values")


if __name__ == "__main__":
    {"logits": logits, "tokenizer": tokenizer, "make": make, "same": same, "edit": edit, "same_bf16": same_bf16}[sys.argv[1]](*sys.argv[2:])
