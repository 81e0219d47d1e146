#!/usr/bin/env bash
# atoll's main job on the default corpus: install what is missing, build, train a small
# GPT on Debian's fortunes (a few minutes on 2 cores), then print a generated sample.
# Extra arguments go to `atoll train` (for example --steps 2000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
rm -rf runs/quickstart   # this demo's own run directory
build/atoll train --out runs/quickstart "$@"
echo
echo "--- sample (atoll sample --ckpt runs/quickstart --prompt 'The ') ---"
build/atoll sample --ckpt runs/quickstart --prompt "The " --tokens 300
