#!/usr/bin/env bash
# Prints the path of a Python that has the PyPI packages in scripts/venv-requirements.txt
# (PyTorch 2.x, transformers, tokenizers, safetensors, tiktoken), for reference checks and
# benchmarks. Uses $ATOLL_VENV when set, else ROOT/.venv, and creates it from PyPI when it
# is missing or lacks a package (about 1-2 minutes and 5.6 GB on a fresh machine).
# Progress goes to stderr; stdout is only the path.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${ATOLL_VENV:-$ROOT/.venv}
REQ="$ROOT/scripts/venv-requirements.txt"
PY="$VENV/bin/python"
stamp="$VENV/.atoll-requirements"
# One maker at a time: a second caller waits here, then finds the venv complete.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [ ! -x "$PY" ] || ! cmp -s "$REQ" "$stamp"; then
  echo "venv: installing scripts/venv-requirements.txt into $VENV" >&2
  command -v python3 >/dev/null || { echo "venv: python3 not found" >&2; exit 1; }
  [ -x "$PY" ] || python3 -m venv "$VENV" >&2
  "$PY" -m pip install -q --disable-pip-version-check -r "$REQ" >&2
  cp "$REQ" "$stamp"
fi
echo "$PY"
