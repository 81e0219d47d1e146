#!/usr/bin/env bash
# Builds atoll and runs the test suite (ctest). .ci/run calls it without arguments: the
# full tier, every test. --quick runs the quick tier alone (label quick: the unit tests,
# the PyTorch reference check, a 2-rank DDP step, 2 islands over loopback; under two
# minutes on 2 cores). Other arguments go to ctest (e.g. -R NAME).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
if [ "${1:-}" = "--quick" ]; then tier=(-L quick); shift; fi
bash scripts/build.sh
cd build
ctest --output-on-failure -j2 "${tier[@]}" "$@"
