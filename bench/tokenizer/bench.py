"""Tokenizer benchmark: encoding MB/s on one core, atoll against Hugging Face
tokenizers and tiktoken on the same vocabulary, per family of tokenizer.json pipeline,
and training time against Hugging Face's BpeTrainer on the same text. Rounds are
interleaved (the order rotates each round) and medians reported, so that load from
other processes hits all alike.

usage: bench.py ATOLL OUT_JSON [--rounds R] [--vocab N] [--repeat K] [--families F,...] [--no-train]
The text is the default corpus (/usr/share/games/fortunes, *.dat left out),
concatenated K times (default 1: with more, the encoders' word caches see the same
words again) into one file.

Families (the vocabulary N each, trained on the corpus):
  gpt2     `atoll tokenizer train` (ByteLevel with GPT-2's regex); tiktoken with GPT-2's pattern
  llama3, qwen2, llama2, mistral   tests/tokenizer/hf_families.py's tokenizer.json (each family's
           public pipeline, trained by tokenizers); tiktoken for llama3 (its pattern is
           cl100k_base's) and qwen2 (the same with one digit a number), none for the
           SentencePiece-converted llama2 and mistral (Metaspace, byte fallback), whose
           vocabularies are trained as SentencePiece trains (words cut before each U+2581,
           so no token holds it after another character, as in the public files)."""
import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import tempfile
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # Hugging Face: one core
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tiktoken  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "tokenizer"))
import hf_families  # noqa: E402

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


TIKTOKEN_PATTERN = {"gpt2": GPT2_PATTERN, "llama3": hf_families.LLAMA3_PAT, "qwen2": hf_families.QWEN2_PAT}


def tiktoken_encoding(tok_path, pattern=GPT2_PATTERN):
    """a ByteLevel tokenizer.json's vocabulary as a tiktoken Encoding: rank = id (merge
    order), added tokens left out."""
    j = json.load(open(tok_path, encoding="utf-8"))
    added = {a["content"] for a in j.get("added_tokens") or []}
    model = j["model"]
    table = {0x100 + k: b for k, b in enumerate(b for b in range(256)
                                                   if not (0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE))}
    def to_bytes(s):
        return bytes(table.get(ord(c), ord(c)) for c in s)
    ranks = {to_bytes(s): i for s, i in model["vocab"].items() if s not in added}
    return tiktoken.Encoding(name="atoll", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})


def tiktoken_encode(tok_path, text, pattern=GPT2_PATTERN):
    enc = tiktoken_encoding(tok_path, pattern)
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


def median_ratio(a, b):
    return round(statistics.median(x / y for x, y in zip(a, b)), 2)


def family_tokenizers(a, files, text, tmp):
    """{family: tokenizer.json path}: gpt2 trained by atoll, the others by tokenizers"""
    paths = {}
    lines = text.splitlines(keepends=True)
    for fam in a.families:
        path = os.path.join(tmp, fam + ".json")
        if fam == "gpt2":
            atoll_train(a.atoll, files, a.vocab, path)
        else:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(hf_families.family(lines, fam, a.vocab, sp_like=True), f, ensure_ascii=False)
        paths[fam] = path
    return paths


def encode_rounds(a, paths, big, text, mb):
    """per family: MB/s of each encoder per round, and whether the ids agree"""
    parts = pieces(text)
    runners, same = {}, {}
    for fam, tok in paths.items():
        pat = TIKTOKEN_PATTERN.get(fam)
        r = {"atoll": lambda tok=tok: atoll_encode(a.atoll, tok, big)[0], "hf": lambda tok=tok: hf_encode(tok, text)[0]}
        if fam == "gpt2":  # the safe cuts are GPT-2 pre-tokenization's
            r["hf_batch"] = lambda tok=tok: hf_encode_batch(tok, parts)[0]
        if pat:
            r["tiktoken"] = lambda tok=tok, pat=pat: tiktoken_encode(tok, text, pat)[0]
        runners[fam] = r
        # ids: HF must equal atoll exactly; tiktoken's rank-of-concatenation rule may differ a little
        ours = [int(x) for x in subprocess.run([a.atoll, "tokenizer", "encode", "--tokenizer", tok, "--text", big],
                                               capture_output=True, check=True).stdout.split()]
        same[fam] = {"hf": hf_encode(tok, text)[1] == ours, "atoll_tokens": len(ours)}
        if fam == "gpt2":
            same[fam]["hf_batch"] = hf_encode_batch(tok, parts)[1] == ours
        if pat:  # tiktoken's encode_ordinary adds no BOS: compare without the added tokens
            tk = tiktoken_encode(tok, text, pat)[1]
            added = {t["id"] for t in json.load(open(tok, encoding="utf-8")).get("added_tokens") or []}
            plain = [i for i in ours if i not in added]
            same[fam]["tiktoken_equal_ids_fraction"] = sum(x == y for x, y in zip(tk, plain)) / max(len(plain), 1)
            same[fam]["tiktoken_tokens"] = len(tk)
    enc = {fam: {n: [] for n in r} for fam, r in runners.items()}
    for rnd in range(a.rounds):
        for fam, r in runners.items():
            names = list(r)
            for n in names[rnd % len(names):] + names[:rnd % len(names)]:
                enc[fam][n].append(mb / r[n]())
    return enc, same


def train_rounds(a, files, tmp):
    train = {"atoll": [], "hf": []}
    for r in range(a.rounds):
        for n in (["atoll", "hf"] if r % 2 == 0 else ["hf", "atoll"]):
            secs = atoll_train(a.atoll, files, a.vocab, os.path.join(tmp, "t.json")) if n == "atoll" else \
                hf_train(files, a.vocab, os.path.join(tmp, "h.json"))
            train[n].append(secs)
    return train


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("atoll")
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--families", default="gpt2,llama3,qwen2,llama2,mistral")
    ap.add_argument("--no-train", action="store_true", help="leave out the trainers' comparison")
    a = ap.parse_args()
    a.families = a.families.split(",")
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
    paths = family_tokenizers(a, files, text, tmp)
    enc, same = encode_rounds(a, paths, big, text, mb)
    med = {fam: {k: round(statistics.median(v), 3) for k, v in e.items()} for fam, e in enc.items()}
    result = {
        "machine": cpu_model(),
        "note": "one core each (RAYON_NUM_THREADS=1, OMP_NUM_THREADS=1); machine shared with other jobs: medians of "
                "interleaved rounds",
        "text_mb": mb, "vocab": a.vocab, "rounds": a.rounds, "repeat": a.repeat,
        "encode_mb_per_s": med,
        "encode_mb_per_s_all": enc,
        "encode_ratio_atoll_over": {fam: {k: median_ratio(e["atoll"], e[k]) for k in e if k != "atoll"}
                                    for fam, e in enc.items()},
        "encoders": {"atoll": "atoll tokenizer encode --stats (in-process time of one encode call, fresh tokenizer)",
                     "hf": "Tokenizer.from_file(the same file).encode(whole text)",
                     "hf_batch": "gpt2 only: encode_batch of ~4 KB pieces cut where ids do not change (one thread)",
                     "tiktoken": "tiktoken.Encoding on the same vocabulary (rank = id) and the family's pattern, "
                                 "encode_ordinary"},
        "ids": same,
    }
    if not a.no_train:
        train = train_rounds(a, files, tmp)
        train_mb = sum(os.path.getsize(p) for p in files) / 1e6
        tmed = {k: statistics.median(v) for k, v in train.items()}
        result.update({
            "train_text_mb": train_mb,
            "train_seconds": {k: round(v, 3) for k, v in tmed.items()},
            "train_seconds_all": train,
            "train_mb_per_s": {k: round(train_mb / v, 3) for k, v in tmed.items()},
            "train_ratio_hf_seconds_over_atoll": round(tmed["hf"] / tmed["atoll"], 2)})
    json.dump(result, open(a.out, "w"), indent=1)
    print(json.dumps({k: result[k] for k in result if not k.endswith("_all") and k != "encoders"}, indent=1))


if __name__ == "__main__":
    main()
