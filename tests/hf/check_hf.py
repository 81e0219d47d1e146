"""Checks of atoll's Hugging Face export with transformers, tokenizers and safetensors
(the venv of scripts/venv.sh). Used by tests/cli/test_hf.sh.

  check_hf.py logits EXPORT_DIR DUMP_DIR   transformers' logits == atoll's (hf_logits) within 1e-4; for a
                                           Llama also: q/k rows interleaved give other logits
  check_hf.py tokenizer EXPORT_DIR         tokenizer.json loads; encode(x) == x's bytes, decode inverts
  check_hf.py tokens EXPORT_DIR TEXT IDS   a BPE tokenizer.json gives atoll's ids (IDS) for TEXT
  check_hf.py make OUT_DIR L H C CTX V     a tiny GPT-2 made by transformers, save_pretrained
  check_hf.py make_llama OUT L H KV C I CTX V TIE EPS THETA [FACTOR LOW HIGH ORIG] [head_dim=N] [save=S]
                                           the same for a tiny Llama (with the four: rope scaling llama3;
                                           head_dim: heads N wide, not C / H; save as make_qwen2's SAVE)
  check_hf.py make_qwen2 OUT L H KV C I CTX V TIE [SAVE]   a tiny Qwen2 (q/k/v biases); SAVE: fp32 (one
                                           file), shard (fp32, several shards and the index) or bf16 (sharded)
  check_hf.py loss HF_DIR WINDOWS JSON       transformers' mean loss over atoll eval's --windows-out windows
                                           (int32 [n, seq + 1]) equals the val_loss of its --json output
                                           (JSON, a file) within 1e-4 relative
  check_hf.py same DIR_A DIR_B             tensor-by-tensor equal (as float32; either may be sharded), same
                                           config shape
  check_hf.py exact DIR_A DIR_B            the same tensors in the same dtypes, bit for bit, and the same
                                           weights' files (model.safetensors, or the index and its shards)
                                           byte for byte
  check_hf.py edit SRC DST OP [ARG]        a copy of SRC changed for the refusal tests: drop NAME,
                                           extra NAME, tie (lm_head.weight = wte), untie, model_type T, bf16,
                                           set KEY=JSON... (config.json); for a sharded SRC: shard_drop NAME
                                           (gone from its shard and the index), shard_move NAME (into another shard, the index
                                           unchanged), shard_lost (the index names a shard that is not there)
"""
import json, os, sys

import numpy as np


CLASSES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
EMBEDDING = {"gpt2": "transformer.wte.weight", "llama": "model.embed_tokens.weight", "qwen2": "model.embed_tokens.weight"}
INDEX = "model.safetensors.index.json"


def load_all(d):
    """every tensor of d (model.safetensors, or the shards its index names) as float32 numpy"""
    from safetensors.torch import load_file
    files = ["model.safetensors"]
    if os.path.exists(os.path.join(d, INDEX)):
        files = sorted(set(json.load(open(os.path.join(d, INDEX)))["weight_map"].values()))
    out = {}
    for f in files:
        out.update({k: v.float().numpy() for k, v in load_file(os.path.join(d, f)).items()})
    return out


def interleave(w, heads):
    """q_proj/k_proj rows of each head reordered as for an interleaved (pairs 2i, 2i+1)
    rotary embedding: what a converter from Meta's layout would have had to undo."""
    rows, cols = w.shape
    return w.view(heads, 2, rows // heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def logits(export_dir, dump_dir):
    import torch
    from transformers import AutoModelForCausalLM
    with open(os.path.join(export_dir, "config.json")) as f:
        cfg = json.load(f)
    from safetensors import safe_open
    if not os.path.exists(os.path.join(export_dir, INDEX)):
        with safe_open(os.path.join(export_dir, "model.safetensors"), "pt") as f:
            meta = f.metadata()
        assert meta == {"format": "pt"}, f"metadata {meta}"
    model = AutoModelForCausalLM.from_pretrained(export_dir).float().eval()
    kind = cfg["model_type"]
    assert type(model).__name__ == CLASSES[kind], type(model).__name__
    V, T = cfg["vocab_size"], cfg.get("n_positions", cfg.get("max_position_embeddings"))
    tokens = np.fromfile(os.path.join(dump_dir, "tokens.bin"), dtype=np.int32).reshape(-1, T)
    ref = np.fromfile(os.path.join(dump_dir, "logits.bin"), dtype=np.float32).reshape(tokens.shape[0], T, V)
    x = torch.from_numpy(tokens.astype(np.int64))
    with torch.no_grad():
        out = model(x).logits.numpy()
    diff = float(np.abs(out - ref).max())
    what = f"{kind}, {'tied' if cfg.get('tie_word_embeddings') else 'untied'}"
    if kind != "gpt2":
        what += f", {cfg['num_attention_heads']} heads / {cfg['num_key_value_heads']} kv, head_dim {head_dim(cfg)}"
        if head_dim(cfg) != cfg["hidden_size"] // cfg["num_attention_heads"]:
            assert tuple(model.model.layers[0].self_attn.q_proj.weight.shape) == \
                (cfg["num_attention_heads"] * head_dim(cfg), cfg["hidden_size"]), "transformers did not take head_dim"
    note = ""
    if kind != "gpt2":
        # the same weights with q/k rows in the interleaved order must give other logits,
        # so an agreement above proves atoll's RoPE is Hugging Face's half-split one
        with torch.no_grad():
            for layer in model.model.layers:
                a = layer.self_attn
                a.q_proj.weight.copy_(interleave(a.q_proj.weight, cfg["num_attention_heads"]))
                a.k_proj.weight.copy_(interleave(a.k_proj.weight, cfg["num_key_value_heads"]))
            wrong = float(np.abs(model(x).logits.numpy() - ref).max())
        note = f"; q/k interleaved instead: {wrong:.3g}"
        assert wrong > 1e-3, f"permuting q/k changes the logits by only {wrong}: the test cannot see the convention"
    if kind == "qwen2":
        # without the q/k/v biases (reloaded: the weights above were permuted) the logits
        # differ, so the agreement above proves atoll adds them
        model = AutoModelForCausalLM.from_pretrained(export_dir).float().eval()
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.zero_()
            nobias = float(np.abs(model(x).logits.numpy() - ref).max())
        note += f"; q/k/v biases zeroed: {nobias:.3g}"
        assert nobias > 1e-3, f"zeroing the q/k/v biases changes the logits by only {nobias}"
    print(f"logits ({what}): {out.shape}, max |transformers - atoll| = {diff:.3g} "
          f"(logits up to {np.abs(ref).max():.3g}){note}")
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


def tokens(export_dir, text_file, ids_file):
    """The exported tokenizer.json (a BPE checkpoint's) gives atoll's ids for the text,
    covers config.json's vocabulary and decodes back to the text."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(export_dir, "tokenizer.json"))
    cfg = json.load(open(os.path.join(export_dir, "config.json")))
    text = open(text_file, encoding="utf-8").read()
    want = [int(x) for x in open(ids_file).read().split()]
    ids = tok.encode(text).ids
    assert ids == want, (ids[:20], want[:20])
    assert tok.get_vocab_size() == cfg["vocab_size"], (tok.get_vocab_size(), cfg["vocab_size"])
    assert tok.decode(ids) == text
    print(f"tokenizer.json: {len(ids)} ids for {len(text.encode())} bytes equal atoll's, "
          f"vocabulary {tok.get_vocab_size()} = config.json's vocab_size, decodes back")


def loss(hf_dir, windows_file, json_file):
    import torch
    from transformers import AutoModelForCausalLM
    got = json.load(open(json_file))
    T = got["context"]
    w = np.fromfile(windows_file, dtype=np.int32).reshape(-1, T + 1)
    assert w.shape[0] == got["windows"], (w.shape, got["windows"])
    model = AutoModelForCausalLM.from_pretrained(hf_dir).float().eval()
    x = torch.from_numpy(w.astype(np.int64))
    with torch.no_grad():  # every window is T tokens: the mean of batch means is the mean over all
        logits = model(x[:, :-1]).logits
        ref = float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                                                      x[:, 1:].reshape(-1)))
    rel = abs(got["val_loss"] - ref) / abs(ref)
    print(f"loss: transformers {ref:.7f}, atoll eval {got['val_loss']:.7f} over {w.shape[0]} windows of {T} tokens, "
          f"relative difference {rel:.2g}")
    assert rel < 1e-4, rel


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


def make_llama(out, L, H, KV, C, inter, ctx, V, tie, eps, theta, *more):
    """more: FACTOR LOW HIGH ORIGINAL_CONTEXT, Llama 3.1's rope scaling (its config.json's
    rope_scaling: {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}); head_dim=N (LlamaConfig's
    head_dim: q_proj [H N, C], k_proj and v_proj [KV N, C], o_proj [C, H N]); save=fp32 (one
    file), shard (fp32 shards of 20 KB and the index) or bf16 (bf16 shards of 20 KB)"""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(4)
    opts = dict(m.split("=", 1) for m in more if "=" in m)
    llama3 = [m for m in more if "=" not in m]
    extra = {"head_dim": int(opts["head_dim"])} if "head_dim" in opts else {}
    rope = {"rope_type": "default", "rope_theta": float(theta)}
    if llama3:
        f, lo, hi, orig = llama3
        rope = {"rope_type": "llama3", "rope_theta": float(theta), "factor": float(f), "low_freq_factor": float(lo),
                "high_freq_factor": float(hi), "original_max_position_embeddings": int(orig)}
    cfg = LlamaConfig(num_hidden_layers=int(L), num_attention_heads=int(H), num_key_value_heads=int(KV),
                      hidden_size=int(C), intermediate_size=int(inter), max_position_embeddings=int(ctx),
                      vocab_size=int(V), tie_word_embeddings=tie == "1", rms_norm_eps=float(eps),
                      rope_parameters=rope, bos_token_id=None, eos_token_id=None, **extra)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # not the default init: RMSNorm gains away from 1
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    save(model, out, opts.get("save", "fp32"))
    print(f"made {out}: {sorted(os.listdir(out))}")


def save(model, out, how):
    """save_pretrained as one fp32 file (fp32), fp32 shards (shard) or bf16 shards (bf16) of 20 KB"""
    import torch
    assert how in ("fp32", "shard", "bf16"), how
    if how == "bf16":
        model = model.to(torch.bfloat16)
    if how == "fp32":
        model.save_pretrained(out)
    else:
        model.save_pretrained(out, max_shard_size="20KB")
    print(f"made {out}: {sorted(os.listdir(out))}")


def make_qwen2(out, L, H, KV, C, inter, ctx, V, tie, save_as="fp32"):
    """A Qwen2 (Qwen2.5-0.5B's config.json: model_type qwen2, use_sliding_window false,
    rope_theta 1000000, rms_norm_eps 1e-06, tie_word_embeddings true) at a tiny size, its
    q/k/v biases and norm gains away from 0 and 1."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(5)
    cfg = Qwen2Config(num_hidden_layers=int(L), num_attention_heads=int(H), num_key_value_heads=int(KV),
                      hidden_size=int(C), intermediate_size=int(inter), max_position_embeddings=int(ctx),
                      vocab_size=int(V), tie_word_embeddings=tie == "1", rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, use_sliding_window=False,
                      bos_token_id=None, eos_token_id=None)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    save(model, out, save_as)


CONFIG_KEYS = {
    "gpt2": ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size", "layer_norm_epsilon"),
    "llama": ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "intermediate_size",
              "max_position_embeddings", "vocab_size", "rms_norm_eps", "tie_word_embeddings", "hidden_act"),
}
CONFIG_KEYS["qwen2"] = CONFIG_KEYS["llama"]


def head_dim(cfg):
    """absent or null: hidden_size / num_attention_heads, as LlamaConfig"""
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def theta(cfg):
    return (cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))


def rope_scaling(cfg):
    """the scaling type and its keys, from either form (rope_scaling wins, as in transformers)"""
    r = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return (r.get("rope_type", r.get("type", "default")),) + tuple(r.get(k) for k in keys)


def same(a, b):
    ta, tb = load_all(a), load_all(b)
    assert sorted(ta) == sorted(tb), (sorted(set(ta) ^ set(tb)))
    for k in ta:
        assert ta[k].shape == tb[k].shape, (k, ta[k].shape, tb[k].shape)
        assert np.array_equal(ta[k], tb[k]), k
    ca, cb = (json.load(open(os.path.join(d, "config.json"))) for d in (a, b))
    assert ca["model_type"] == cb["model_type"], (ca["model_type"], cb["model_type"])
    for k in CONFIG_KEYS[ca["model_type"]]:
        assert ca[k] == cb[k], (k, ca[k], cb[k])
    if ca["model_type"] != "gpt2":
        assert head_dim(ca) == head_dim(cb), ("head_dim", head_dim(ca), head_dim(cb))
        assert theta(ca) == theta(cb), ("rope_theta", theta(ca), theta(cb))
        assert rope_scaling(ca) == rope_scaling(cb), ("rope scaling", rope_scaling(ca), rope_scaling(cb))
    print(f"same: {len(ta)} tensors bit-identical, config.json the same model")


def load_raw(d):
    """every tensor of d as torch tensors in their own dtype"""
    from safetensors.torch import load_file
    files = ["model.safetensors"]
    if os.path.exists(os.path.join(d, INDEX)):
        files = sorted(set(json.load(open(os.path.join(d, INDEX)))["weight_map"].values()))
    out = {}
    for f in files:
        out.update(load_file(os.path.join(d, f)))
    return out


def exact(a, b):
    import torch
    ta, tb = load_raw(a), load_raw(b)
    assert sorted(ta) == sorted(tb), sorted(set(ta) ^ set(tb))
    for k in ta:
        assert ta[k].dtype == tb[k].dtype, (k, ta[k].dtype, tb[k].dtype)
        assert ta[k].shape == tb[k].shape, (k, ta[k].shape, tb[k].shape)
        bits = {2: torch.int16, 4: torch.int32}[ta[k].element_size()]
        assert torch.equal(ta[k].view(bits), tb[k].view(bits)), k
    sharded = [os.path.exists(os.path.join(d, INDEX)) for d in (a, b)]
    assert sharded[0] == sharded[1], f"sharded: {sharded}"
    files = sorted(set(json.load(open(os.path.join(a, INDEX)))["weight_map"].values())) + [INDEX] if sharded[0] \
        else ["model.safetensors"]
    assert sorted(f for f in os.listdir(b) if f.endswith(".safetensors") or f == INDEX) == sorted(files), \
        (sorted(os.listdir(b)), files)
    for f in files:
        assert open(os.path.join(a, f), "rb").read() == open(os.path.join(b, f), "rb").read(), f"{f} differs"
    dtypes = sorted({str(t.dtype).replace("torch.", "") for t in tb.values()})
    print(f"exact: {len(ta)} tensors, {'/'.join(dtypes)}; the weights' files ({', '.join(files[:2])}"
          f"{', ...' if len(files) > 2 else ''}: {len(files)}) byte for byte")


def edit_shards(dst, op, arg):
    """the sharded checkpoint in dst (a copy) made wrong in one way"""
    from safetensors.torch import load_file, save_file
    wmap = json.load(open(os.path.join(dst, INDEX)))["weight_map"]
    shards = sorted(set(wmap.values()))
    if op == "shard_lost":
        os.remove(os.path.join(dst, shards[-1]))
        return
    home = wmap[arg]
    other = next(f for f in shards if f != home)
    t = load_file(os.path.join(dst, home))
    moved = t.pop(arg)
    save_file(t, os.path.join(dst, home), metadata={"format": "pt"})
    if op == "shard_drop":  # from the index too: the tensor is nowhere
        index = json.load(open(os.path.join(dst, INDEX)))
        del index["weight_map"][arg]
        json.dump(index, open(os.path.join(dst, INDEX), "w"))
    if op == "shard_move":
        u = load_file(os.path.join(dst, other))
        u[arg] = moved
        save_file(u, os.path.join(dst, other), metadata={"format": "pt"})


def edit(src, dst, op, arg=None, *more):
    import shutil
    if op.startswith("shard_"):
        shutil.copytree(src, dst)
        edit_shards(dst, op, arg)
        return
    from safetensors.numpy import load_file, save_file
    shutil.copytree(src, dst)
    t = load_file(os.path.join(src, "model.safetensors"))
    cfg = json.load(open(os.path.join(src, "config.json")))
    wte = t[EMBEDDING[cfg["model_type"]]]
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
    elif op == "set":  # set KEY=JSON [KEY=JSON ...] in config.json
        for kv in (arg,) + more:
            key, value = kv.split("=", 1)
            cfg[key] = json.loads(value)
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
    {"logits": logits, "tokenizer": tokenizer, "tokens": tokens, "make": make, "loss": loss, "make_llama": make_llama, "make_qwen2": make_qwen2, "same": same, "exact": exact, "edit": edit,
     "same_bf16": same_bf16}[sys.argv[1]](*sys.argv[2:])
