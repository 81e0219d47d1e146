"""Tokenizers of today's open model families, made by Hugging Face tokenizers with each
family's pipeline, against atoll on the same tokenizer.json.

usage: hf_families.py ATOLL CORPUS_FILE OUT_DIR
       hf_families.py --make CORPUS_FILE OUT_DIR   (the tokenizer.json files only)

The pipeline JSON (normalizer, pre_tokenizer, post_processor, decoder, the model's
options) is that of the public tokenizer.json files:
  llama3    meta-llama/Meta-Llama-3-8B and Llama-3.2-1B (the pattern is also OpenAI's
            cl100k_base): Split (Regex, Isolated) then ByteLevel use_regex false,
            ignore_merges true, ByteLevel decoder, ByteLevel + TemplateProcessing (BOS)
  qwen2     Qwen/Qwen2.5-0.5B: NFC normalizer, the same shape with \\p{N} one digit at
            a time, ByteLevel post_processor (no BOS)
  llama2    meta-llama/Llama-2-7b-hf, TinyLlama/TinyLlama-1.1B-Chat-v1.0 (transformers'
            legacy LlamaConverter): normalizers Prepend "▁" and Replace " " -> "▁", no
            pre-tokenizer, BPE with byte_fallback, decoder Replace/ByteFallback/Fuse/Strip,
            TemplateProcessing <s>
  mistral   mistralai/Mistral-7B-v0.3 (LlamaConverter, legacy false): Metaspace
            (prepend_scheme first, split false) instead of the normalizers
llama2 is trained on whole lines (its merges join other characters to ▁); llama2_sp
(Llama 2's pipeline) and mistral are trained on words cut before each ▁, as
SentencePiece trains, so that atoll merges a passage in parts (pipeline.h's space_cut).
Each is trained on CORPUS_FILE, written to OUT_DIR/<family>.json, and checked on three
texts (English prose, source code, mixed Unicode): atoll's ids (`atoll tokenizer
encode`) must equal tokenizers' encode(text).ids, atoll's decode must equal tokenizers'
decode, and give the text back (Qwen2: its NFC). Exit status 1 on any
difference."""
import json
import os
import random
import subprocess
import sys
import unicodedata

import make_text

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SP = "\u2581"


def split_seq(pat, trim):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": trim, "use_regex": False}]}


def template(tok, bos_id):
    s = {"SpecialToken": {"id": tok, "type_id": 0}}
    return {"type": "TemplateProcessing", "single": [s, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [s, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": tok, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {tok: {"id": tok, "ids": [bos_id], "tokens": [tok]}}}


SP_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def byte_level_family(lines, name, pat, bos, ignore_merges, vocab=1500):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pat), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    if name == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken(bos, special=True, normalized=False),
                            AddedToken("<|end_of_text|>", special=True, normalized=False)])
    j = json.loads(tok.to_str())
    bos_id = tok.token_to_id(bos)
    if name == "llama3":
        j["pre_tokenizer"] = split_seq(pat, True)
        j["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            template(bos, bos_id)]}
        j["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    else:
        j["pre_tokenizer"] = split_seq(pat, False)
        bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        j["post_processor"], j["decoder"] = bl, dict(bl)
    j["normalizer"] = None if name == "llama3" else {"type": "NFC"}
    j["model"]["ignore_merges"] = ignore_merges
    return j


def sp_family(lines, name, vocab=1500, sp_like=False):
    """sp_like: trained on words cut before each ▁ (as SentencePiece trains, so no token
    holds ▁ after another character: atoll's space_cut), else on whole lines"""
    specials = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if sp_like:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first", split=True)
    elif name == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(SP), normalizers.Replace(" ", SP)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first", split=False)
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab, show_progress=False, special_tokens=specials,
                                                       limit_alphabet=200))
    j = json.loads(tok.to_str())
    # the <0xNN> tokens are vocabulary entries, not added tokens, in the public files
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in ("<unk>", "<s>", "</s>")]
    for a in j["added_tokens"]:
        a["normalized"] = False
    if name.startswith("llama2"):
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SP}, {"type": "Replace", "pattern": {"String": " "}, "content": SP}]}
        j["pre_tokenizer"] = None
    else:
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False}
    j["post_processor"] = template("<s>", 1)
    j["decoder"] = SP_DECODER
    j["model"].update({"unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True, "ignore_merges": False})
    return j


def family(lines, name, vocab=1500, sp_like=None):
    """the tokenizer.json (as a dict) of family `name`, trained on lines; llama2_sp is
    llama2 with a SentencePiece-like vocabulary (as mistral's here)"""
    if name in ("llama3", "qwen2"):
        return byte_level_family(lines, name, LLAMA3_PAT if name == "llama3" else QWEN2_PAT,
                                 "<|begin_of_text|>" if name == "llama3" else "<|endoftext|>", name == "llama3", vocab)
    return sp_family(lines, name, vocab, name != "llama2" if sp_like is None else sp_like)


def run(args, data=None):
    return subprocess.run(args, input=data, capture_output=True, check=True).stdout


def main():
    atoll, corpus, out = sys.argv[1:4]
    raw = open(corpus, "rb").read().decode("utf-8", "replace")
    unicode_text = ("Café déjà vu: naïve façade, Straße ﬁne. 日本語のテキストと中文文本，한국어 텍스트。\n"
                    "Emoji 🙂🚀👩\u200d👩\u200d👧 flags 🇫🇷; combining e\u0301 a\u0308 n\u0303\u0323; "
                    "RTL: שלום עולם, مرحبا بالعالم ١٢٣\u200f.\n"
                    "Spaces:" + " " * 17 + "end\t\t tabs\u00a0nbsp\u3000ideo\n\n\n"
                    "Digits 1234567890123 3.14159 1,000,000 and 00007; She's, THEY'RE, we'VE.\n") * 40
    rng = random.Random(35)  # make_text.py's pieces: every boundary between classes, odd whitespace
    unicode_text += make_text.PROSE + "".join(rng.choice(make_text.PIECES) for _ in range(20000))
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
    code = "".join(open(os.path.join(src, p), encoding="utf-8").read()
                   for p in ("tokenizer/bpe_encode.c", "tokenizer/pipeline.c", "cli/tokenizer_cli.c"))
    prose = raw[:60000]
    texts = {"prose": prose, "code": code, "unicode": unicode_text}
    lines = raw.splitlines(keepends=True) + code.splitlines(keepends=True) + unicode_text.splitlines(keepends=True)[:4]
    bad = 0
    for name in ("llama3", "qwen2", "llama2", "llama2_sp", "mistral"):
        j = family(lines, name)
        path = f"{out}/{name}.json"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        if atoll == "--make":
            continue
        tok = Tokenizer.from_file(path)
        for tname, text in texts.items():
            tp = f"{out}/{name}_{tname}.txt"
            open(tp, "wb").write(text.encode("utf-8"))
            hf = tok.encode(text).ids
            ours = [int(x) for x in run([atoll, "tokenizer", "encode", "--tokenizer", path, "--text", tp]).split()]
            if hf != ours:
                bad += 1
                i = next((k for k, (a, b) in enumerate(zip(hf, ours)) if a != b), min(len(hf), len(ours)))
                print(f"{name} {tname}: ids differ at token {i} of {len(hf)}: HF {hf[max(0, i - 3):i + 4]} "
                      f"atoll {ours[max(0, i - 3):i + 4]} ({tok.decode(hf[max(0, i - 3):i + 4])!r})")
                continue
            back = run([atoll, "tokenizer", "decode", "--tokenizer", path], " ".join(map(str, ours)).encode())
            if back.decode("utf-8", "replace") != tok.decode(hf):
                bad += 1
                print(f"{name} {tname}: atoll's decode differs from tokenizers'")
            elif back != (unicodedata.normalize("NFC", text) if name == "qwen2" else text).encode("utf-8"):
                bad += 1
                print(f"{name} {tname}: decode does not give the text back")
            else:
                print(f"{name} {tname}: {len(text.encode())} bytes, {len(ours)} ids: equal, decoded back")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
