#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, run and test atoll.
# Idempotent; uses sudo when not root. Called first by .ci/run.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(
  build-essential cmake pkg-config
  libopenblas-dev libopenblas-openmp-dev  # CBLAS sgemm; the OpenMP build shares atoll's threads
  libomp-dev               # OpenMP runtime for clang builds (gcc brings libgomp)
  libcjson-dev             # JSON headers, configs, metrics
  libpcre2-dev             # tokenizer.json Split regexes (Llama 3, Qwen2): PCRE2 with Unicode and JIT
  libicu-dev               # tokenizer.json's NFC normalizer (Qwen2)
  libdnnl-dev              # oneDNN: fp32 engine on AVX-512, bf16 products (AMX, AVX512_BF16)
  libzmq3-dev libsodium-dev iperf3 iproute2  # islands over a network: ZeroMQ CURVE, BLAKE2b, WAN test
  libopenmpi-dev openmpi-bin  # MPI between ranks (MPICH works too)
  fortunes                 # default corpus: /usr/share/games/fortunes
  zlib1g-dev linux-doc-6.1 # gzip input for atoll prepare; the larger corpus (scripts/corpus.sh, tested)
  clang libclang-rt-14-dev # libFuzzer targets
  python3-torch python3-numpy  # PyTorch reference check and benchmark (/usr/bin/python3)
  python3-matplotlib       # scripts/plot_runs.py: loss curves of runs as a PNG
  python3-venv             # scripts/venv.sh: PyTorch 2.x, transformers, tokenizers from PyPI
  libmicrohttpd-dev        # the coordinator's status page and metrics (--status-listen)
  chromium                 # test_status_http: the status page loaded headless, its screenshot
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
