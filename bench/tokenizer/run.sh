#!/bin/sh
# Tokenizer benchmark (bench/tokenizer/bench.py): atoll's encoder against Hugging Face
# tokenizers and tiktoken (same vocabulary) for each family's pipeline (gpt2, llama3,
# qwen2, llama2, mistral), atoll's trainer against HF's BpeTrainer.
# usage: bench/tokenizer/run.sh [BUILD_DIR] [extra bench.py flags]
# Writes bench/tokenizer/results.json.
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
[ $# -gt 0 ] && shift
PY=${ATOLL_PYTHON:-$(bash "$ROOT/scripts/venv.sh")}
exec "$PY" "$ROOT/bench/tokenizer/bench.py" "$BUILD/atoll" "$ROOT/bench/tokenizer/results.json" "$@"
