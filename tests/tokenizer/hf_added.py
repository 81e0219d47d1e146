"""Makes tokenizer.json files with added tokens through Hugging Face tokenizers, and a
text holding them; writes HF's ids and decodings for tests/cli/test_added_tokens.sh.
usage: hf_added.py CORPUS_DIR OUT_DIR"""
import json, os, sys
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

corpus, out = sys.argv[1], sys.argv[2]
docs = []
for n in ("art", "science", "computers"):
    p = os.path.join(corpus, n)
    if os.path.isfile(p):
        docs += [d for d in open(p, "rb").read().decode("utf-8", "replace").split("\n%\n") if d]

# GPT-2 style, made by tokenizers itself: <|endoftext|> a special token inside the
# vocabulary (the trainer puts it at id 0), more added past it, special or not,
# normalized or not, one spelled as a vocabulary entry
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<|endoftext|>"], show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(docs, trainer)
tok.add_special_tokens([AddedToken("<pad>", special=True, normalized=False),
                        AddedToken("<|im_start|>", special=True, normalized=False)])
tok.add_tokens([AddedToken(" the cat", normalized=True), AddedToken("naïve x", normalized=False), AddedToken("日本", normalized=True),
                AddedToken("the", normalized=True), AddedToken("<|im", normalized=True)])
tok.save(f"{out}/gpt2style.json")

# two passes: "yz" (normalized false) is matched before "xy" (normalized true)
vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
hand = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
        "added_tokens": [
            {"id": 256, "content": "xy", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
            {"id": 257, "content": "yz", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 258, "content": "xyzw", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False}]}
json.dump(hand, open(f"{out}/passes.json", "w"))

pieces = []
for i, d in enumerate(docs[:400]):
    pieces.append(d)
    pieces.append(["<|endoftext|>", "<pad><pad>", "<|im_start|>user", "<|im_start", "<|endoftext|<|endoftext|>>",
                   " naïve x the cat 日本", "\n<|endoftext|>\n", "axyzb xyzw xxyy"][i % 8])
text = "".join(pieces) + "<|endoftext|>"
open(f"{out}/text.txt", "wb").write(text.encode("utf-8"))
res = {}
for name in ("gpt2style", "passes"):
    t = Tokenizer.from_file(f"{out}/{name}.json")
    ids = t.encode(text).ids
    res[name] = {"ids": ids, "decode": t.decode(ids), "decode_keep": t.decode(ids, skip_special_tokens=False),
                 "vocab": t.get_vocab_size()}
json.dump(res, open(f"{out}/hf.json", "w"))
