#!/bin/sh
# The watchdog (src/comm/comm.c): rank 1 never joins an all-reduce of 1 Mi floats that
# rank 0 waits on with a 2 s timeout. The job must end on its own, within seconds, with
# a non-zero status and exactly one line naming the rank, the operation, its size and
# the communicator.
#   usage: watchdog.sh TEST_COMM MPIEXEC LAUNCHER_ARGS...   (args include "-np 2")
set -u
bin=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
timeout 90 "$@" "$bin" --watchdog >"$out" 2>&1
status=$?
elapsed=$(($(date +%s) - start))
cat "$out"
fail=0
expect="atoll: error: rank 0: allreduce of 4.0 MiB on communicator 'world' (2 ranks) did not finish within 2 s; a peer has stopped or died"
if [ "$status" -eq 0 ]; then
  echo "FAIL: the launcher exited with status 0"
  fail=1
fi
if [ "$status" -eq 124 ]; then
  echo "FAIL: still running after 90 s: the watchdog never ended the job"
  fail=1
fi
n=$(grep -cxF "$expect" "$out")
if [ "$n" -ne 1 ]; then
  echo "FAIL: expected the watchdog's line exactly once, found it $n times:"
  echo "  $expect"
  fail=1
fi
if [ "$elapsed" -gt 30 ]; then
  echo "FAIL: the job took ${elapsed} s to end (timeout 2 s)"
  fail=1
fi
echo "watchdog: status $status after ${elapsed} s"
[ "$fail" -eq 0 ] && echo "watchdog: 1 passed, 0 failed" || echo "watchdog: 0 passed, 1 failed"
exit "$fail"
