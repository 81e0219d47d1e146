"""Tokenizer benchmark: encoding MB/s on one core, atoll against Hugging Face
tokenizers and tiktoken on the same vocabulary, and training time against Hugging
Face's BpeTrainer on the same text. Rounds are interleaved (the order rotates each
round) and medians reported, so that load from other processes hits all alike.

usage: bench.py ATOLL OUT_JSON [--rounds R] [--vocab N] [--repeat K]
The text is the default corpus (/usr/share/games/fortunes, *.dat left out),
concatenated K times (default 1: with more, the encoders' word caches see the same
words again) into one file."""
import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # Hugging Face: one core
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tiktoken  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def corpus_files():
    return sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                  if not f.endswith(".dat") and os.path.isfile(f) and not os.path.islink(f))


def atoll_encode(atoll, tok, path):
    out = subprocess.run([atoll, "tokenizer", "encode", "--tokenizer", tok, "--text", path, "--stats"],
                         capture_output=True, check=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1")).stdout.split()
    stats = dict(zip(out[0::2], out[1::2]))
    return float(stats["seconds"]), int(stats["tokens"])


def hf_encode(tok_path, text):
    tok = Tokenizer.from_file(tok_path)  # fresh: its word cache starts empty, as atoll's
    t0 = time.perf_counter()
    ids = tok.encode(text).ids
    return time.perf_counter() - t0, ids


def pieces(text, size=4096):
    """text cut where encoding apart gives the whole's ids (atoll_tokenizer_safe_cut's
    rule: before a newline that follows a printable, non-space ASCII character)."""
    out, start = [], 0
    i = size
    while i < len(text):
        if text[i] == "\n" and "!" <= text[i - 1] <= "~":
            out.append(text[start:i])
            start, i = i, i + size
        else:
            i += 1
    out.append(text[start:])
    return out


def hf_encode_batch(tok_path, parts):
    tok = Tokenizer.from_file(tok_path)
    t0 = time.perf_counter()
    enc = tok.encode_batch(parts)
    secs = time.perf_counter() - t0
    return secs, [i for e in enc for i in e.ids]


def tiktoken_encoding(tok_path):
    """atoll's vocabulary as a tiktoken Encoding: rank = id (merge order)."""
    model = json.load(open(tok_path))["model"]
    table = {0x100 + k: b for k, b in enumerate(b for b in range(256)
                                                   if not (0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE))}
    def to_bytes(s):
        return bytes(table.get(ord(c), ord(c)) for c in s)
    ranks = {to_bytes(s): i for s, i in model["vocab"].items()}
    return tiktoken.Encoding(name="atoll", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})


def tiktoken_encode(tok_path, text):
    enc = tiktoken_encoding(tok_path)
    t0 = time.perf_counter()
    ids = enc.encode_ordinary(text)
    return time.perf_counter() - t0, ids


def atoll_train(atoll, files, vocab, out):
    t0 = time.perf_counter()
    subprocess.run([atoll, "tokenizer", "train", "--text", *files, "--vocab-size", str(vocab), "--out", out],
                   capture_output=True, check=True)
    return time.perf_counter() - t0


def hf_train(files, vocab, out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t0 = time.perf_counter()
    tok.train(files, trainer)
    secs = time.perf_counter() - t0
    tok.save(out)
    return secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("atoll")
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    files = corpus_files()
    tmp = tempfile.mkdtemp(prefix="atoll_bench_tok_")
    big = os.path.join(tmp, "corpus.txt")
    with open(big, "wb") as f:
        for _ in range(a.repeat):
            for p in files:
                f.write(open(p, "rb").read())
    raw = open(big, "rb").read()
    text = raw.decode("utf-8")
    mb = len(raw) / 1e6
    tok = os.path.join(tmp, "atoll.json")
    atoll_train(a.atoll, files, a.vocab, tok)  # the tokenizer every encoder uses

    parts = pieces(text)
    enc = {"atoll": [], "hf": [], "hf_batch": [], "tiktoken": []}
    train = {"atoll": [], "hf": []}
    same = {}
    runners = {
        "atoll": lambda: atoll_encode(a.atoll, tok, big)[0],
        "hf": lambda: hf_encode(tok, text)[0],
        "hf_batch": lambda: hf_encode_batch(tok, parts)[0],
        "tiktoken": lambda: tiktoken_encode(tok, text)[0],
    }
    # ids: HF must equal atoll exactly; tiktoken's rank-of-concatenation rule may differ a little
    ours = subprocess.run([a.atoll, "tokenizer", "encode", "--tokenizer", tok, "--text", big],
                          capture_output=True, check=True).stdout.split()
    ours = [int(x) for x in ours]
    same["hf"] = hf_encode(tok, text)[1] == ours
    same["hf_batch"] = hf_encode_batch(tok, parts)[1] == ours
    tk = tiktoken_encode(tok, text)[1]
    same["tiktoken_equal_ids_fraction"] = sum(x == y for x, y in zip(tk, ours)) / max(len(ours), 1)
    same["tiktoken_tokens"], same["atoll_tokens"] = len(tk), len(ours)
    names = list(runners)
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            enc[n].append(mb / runners[n]())
        for n in (["atoll", "hf"] if r % 2 == 0 else ["hf", "atoll"]):
            secs = atoll_train(a.atoll, files, a.vocab, os.path.join(tmp, "t.json")) if n == "atoll" else \
                hf_train(files, a.vocab, os.path.join(tmp, "h.json"))
            train[n].append(secs)
    train_mb = sum(os.path.getsize(p) for p in files) / 1e6
    med = {k: statistics.median(v) for k, v in enc.items()}
    tmed = {k: statistics.median(v) for k, v in train.items()}
    result = {
        "machine": platform.processor() or platform.machine(),
        "note": "one core each (RAYON_NUM_THREADS=1); machine shared with other jobs: medians of interleaved rounds",
        "text_mb": mb, "vocab": a.vocab, "rounds": a.rounds, "repeat": a.repeat,
        "encode_mb_per_s": {k: round(v, 3) for k, v in med.items()},
        "encode_mb_per_s_all": enc,
        "encode_ratio_atoll_over": {k: round(med["atoll"] / med[k], 2) for k in ("hf", "hf_batch", "tiktoken")},
        "encoders": {"atoll": "atoll tokenizer encode --stats (in-process time of one encode call, fresh tokenizer)",
                     "hf": "Tokenizer.from_file(atoll's file).encode(whole text)",
                     "hf_batch": "encode_batch of ~4 KB pieces cut where ids do not change (one thread)",
                     "tiktoken": "tiktoken.Encoding on atoll's vocabulary (rank = id), encode_ordinary"},
        "train_text_mb": train_mb,
        "train_seconds": {k: round(v, 3) for k, v in tmed.items()},
        "train_seconds_all": train,
        "train_mb_per_s": {k: round(train_mb / v, 3) for k, v in tmed.items()},
        "train_ratio_hf_seconds_over_atoll": round(tmed["hf"] / tmed["atoll"], 2),
        "ids": same,
    }
    json.dump(result, open(a.out, "w"), indent=1)
    print(json.dumps({k: result[k] for k in ("text_mb", "vocab", "encode_mb_per_s", "encode_ratio_atoll_over",
                                             "train_text_mb", "train_seconds", "train_mb_per_s",
                                             "train_ratio_hf_seconds_over_atoll", "ids")}, indent=1))


if __name__ == "__main__":
    main()
