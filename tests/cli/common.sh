# Shared helpers for the shell tests: sourced with ATOLL (the binary) and SRC set.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
PASSES=0
PY=/usr/bin/python3

fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; PASSES=$((PASSES + 1)); }

# use_venv MODULE...: VPY = the PyPI venv's python (ATOLL_PYTHON, or scripts/venv.sh,
# which makes the venv when missing; ctest's venv_setup makes it first). Where the venv
# cannot be made (no PyPI) the test skips (77) and says why; .ci/run makes the venv before
# the suite and stops if it cannot, so CI never skips these. A venv without a module fails.
use_venv() {
  VPY=${ATOLL_PYTHON:-$(bash "$SRC/scripts/venv.sh")} || {
    echo "SKIP: scripts/venv.sh could not make the PyPI venv (its reason above); this test needs $*"
    exit 77
  }
  # one interpreter for all (transformers alone takes seconds to import); by name on failure
  "$VPY" -c "import $(echo "$@" | tr ' ' ',')" 2>/dev/null && return 0
  for m in "$@"; do
    "$VPY" -c "import $m" 2>/dev/null || { echo "FAIL: $VPY lacks the module $m"; exit 1; }
  done
}

# warm_python: starts the venv's python (VPY, from use_venv) as a worker that runs the
# test's Python checks one after another (tests/hf/warm_python.py), so that torch and
# transformers are imported once, not per check. Then `py_run SCRIPT ARGS...` acts as
# `$VPY SCRIPT ARGS...` would, its stdout and stderr both on stdout. The worker ends with
# the test.
warm_python() {
  mkfifo "$TMP/py.req" "$TMP/py.rep"
  "$VPY" "$SRC/tests/hf/warm_python.py" "$TMP/py.req" "$TMP/py.rep" &
  PY_WORKER=$!
  trap 'exec 3>&- 4<&-; kill $PY_WORKER 2>/dev/null; wait $PY_WORKER 2>/dev/null; rm -rf "$TMP"' EXIT
  exec 3>"$TMP/py.req" 4<"$TMP/py.rep"
}
py_run() {
  if ! (trap '' PIPE; { echo $#; pwd; echo "$TMP/py.out"; for a in "$@"; do printf '%s\n' "$a"; done; } >&3) 2>/dev/null ||
     ! read -r py_status <&4; then
    echo "the warm python worker (tests/hf/warm_python.py) died"; return 99
  fi
  cat "$TMP/py.out"
  return "$py_status"
}

# A tiny model and a small corpus, so each run takes about a second.
TINY="--layers 2 --heads 2 --dim 32 --context 32 --batch 4 --eval-batches 2 --threads 1"
small_data() {
  [ -d "$TMP/data" ] && return 0
  "$ATOLL" prepare --text /usr/share/games/fortunes/art /usr/share/games/fortunes/science --out "$TMP/data" >/dev/null 2>&1 \
    || { echo "cannot prepare test data (is the fortunes package installed?)"; exit 1; }
}

# drop_launcher_noise FILE: removes the one line Open MPI's launcher itself may print
# when ranks exit at once ("[warn] Epoll MOD(1) on fd N failed ...", from libevent inside
# mpirun, racing the ranks' closed pipes); atoll does not write it and cannot prevent it.
drop_launcher_noise() {
  grep -v '^\[warn\] Epoll [A-Z]*([0-9]*) on fd [0-9]* failed' "$1" >"$1.clean"
  mv "$1.clean" "$1"
}

# expect_error NAME KEYWORD CMD...: CMD must exit non-zero, print exactly one line on
# stderr, and that line must contain KEYWORD.
expect_error() {
  name=$1; keyword=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  drop_launcher_noise "$TMP/err"
  lines=$(grep -c . "$TMP/err")
  if [ $rc -eq 0 ]; then fail "$name: exit status 0"; return; fi
  if [ $rc -ge 128 ]; then fail "$name: crashed (status $rc): $(cat "$TMP/err")"; return; fi
  if ! grep -q -- "$keyword" "$TMP/err"; then fail "$name: message lacks '$keyword': $(cat "$TMP/err")"; return; fi
  if [ "$lines" -ne 1 ]; then fail "$name: $lines lines on stderr: $(cat "$TMP/err")"; return; fi
  pass "$name: $(cat "$TMP/err")"
}

finish() {
  echo "$PASSES passed, $FAILS failed"
  [ $FAILS -eq 0 ] && exit 0 || exit 1
}
