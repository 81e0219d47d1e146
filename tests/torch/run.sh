#!/bin/sh
# ctest entry: atoll's model against PyTorch (Debian's python3-torch).
# usage: run.sh TORCH_DUMP_BINARY SOURCE_DIR [llama]
set -e
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ "$3" = llama ]; then
  "$1" "$dir" llama
  /usr/bin/python3 "$2/tests/torch/ref_llama.py" "$dir"
else
  "$1" "$dir"
  /usr/bin/python3 "$2/tests/torch/ref_gpt.py" "$dir"
fi
