"""Hugging Face tokenizers against atoll on the same tokenizer.json.

usage: hf_compare.py ATOLL TOKENIZER_JSON FILE...

For each file (valid UTF-8): Tokenizer.from_file's ids must equal `atoll tokenizer
encode`'s, and both decoders must give the file back. Prints one line per
difference and a summary; exit status 1 on any difference."""
import subprocess
import sys

from tokenizers import Tokenizer


def atoll_ids(atoll, tok, path):
    out = subprocess.run([atoll, "tokenizer", "encode", "--tokenizer", tok, "--text", path],
                         capture_output=True, check=True).stdout
    return [int(x) for x in out.split()]


def atoll_decode(atoll, tok, ids):
    return subprocess.run([atoll, "tokenizer", "decode", "--tokenizer", tok],
                          input=" ".join(map(str, ids)).encode(), capture_output=True, check=True).stdout


def main():
    atoll, tok_path, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    tok = Tokenizer.from_file(tok_path)
    bad = total_bytes = total_tokens = 0
    for path in files:
        raw = open(path, "rb").read()
        text = raw.decode("utf-8")
        hf = tok.encode(text).ids
        ours = atoll_ids(atoll, tok_path, path)
        total_bytes += len(raw)
        total_tokens += len(ours)
        if hf != ours:
            bad += 1
            i = next((k for k, (a, b) in enumerate(zip(hf, ours)) if a != b), min(len(hf), len(ours)))
            print(f"{path}: ids differ at token {i}: HF {hf[max(0, i - 2):i + 4]} atoll {ours[max(0, i - 2):i + 4]}")
            continue
        if tok.decode(hf).encode("utf-8") != raw:
            bad += 1
            print(f"{path}: Hugging Face's decode does not give the text back")
        if atoll_decode(atoll, tok_path, ours) != raw:
            bad += 1
            print(f"{path}: atoll's decode does not give the text back")
    print(f"{len(files)} files, {total_bytes} bytes, {total_tokens} tokens "
          f"({total_bytes / max(total_tokens, 1):.2f} bytes/token): {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
