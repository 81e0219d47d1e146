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
# complete: its python runs pip, and it holds this list of requirements
complete() { [ -x "$PY" ] && cmp -s "$REQ" "$stamp" && "$PY" -m pip --version >/dev/null 2>&1; }
if ! complete; then
  # One maker at a time: a second caller waits here, then finds the venv complete. (A
  # complete venv is used without the lock: it may belong to another user.)
  mkdir -p "$(dirname "$VENV")"
  exec 9>"$VENV.lock" || { echo "venv: cannot write $VENV.lock to make the venv at $VENV" >&2; exit 1; }
  flock 9
  if ! complete; then
    echo "venv: installing scripts/venv-requirements.txt into $VENV" >&2
    command -v python3 >/dev/null || { echo "venv: python3 not found" >&2; exit 1; }
    # a venv without a working pip (an interrupted or ensurepip-less `python3 -m venv`)
    # is made again
    if [ ! -x "$PY" ] || ! "$PY" -m pip --version >/dev/null 2>&1; then
      rm -rf "$VENV"
      python3 -m venv "$VENV" >&2 || { echo "venv: python3 -m venv $VENV failed (is python3-venv installed?)" >&2; exit 1; }
    fi
    "$PY" -m pip install -q --disable-pip-version-check -r "$REQ" >&2 \
      || { echo "venv: pip install -r scripts/venv-requirements.txt failed (is PyPI reachable?)" >&2; exit 1; }
    cp "$REQ" "$stamp"
  fi
fi
echo "$PY"
