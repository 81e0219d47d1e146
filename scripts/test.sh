#!/usr/bin/env bash
# Builds atoll and runs the whole test suite (ctest). .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure -j2 "$@"
