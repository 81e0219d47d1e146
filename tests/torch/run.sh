#!/bin/sh
# atoll's model against PyTorch (Debian's python3-torch): torch_dump runs a tiny GPT-2
# (or, with llama, a Llama, then a Llama with Qwen2's q/k/v biases, then one with Llama
# 3.1's rope scaling and a tied head, then one whose heads are not dim / heads wide) in
# atoll and writes its weights, batches, logits, gradients and 10 AdamW steps' losses; ref_gpt.py / ref_llama.py recompute them in PyTorch and
# fail (so does this script, set -e) where any differs beyond 1e-4.
# usage: run.sh TORCH_DUMP_BINARY SOURCE_DIR [llama]
set -e
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ "$3" = llama ]; then
  "$1" "$dir" llama
  /usr/bin/python3 "$2/tests/torch/ref_llama.py" "$dir"
  rm -rf "$dir"/*
  "$1" "$dir" qwen2
  /usr/bin/python3 "$2/tests/torch/ref_llama.py" "$dir"
  rm -rf "$dir"/*
  "$1" "$dir" llama3
  /usr/bin/python3 "$2/tests/torch/ref_llama.py" "$dir"
  rm -rf "$dir"/*
  "$1" "$dir" headdim
  /usr/bin/python3 "$2/tests/torch/ref_llama.py" "$dir"
else
  "$1" "$dir"
  /usr/bin/python3 "$2/tests/torch/ref_gpt.py" "$dir"
fi
