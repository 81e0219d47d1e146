#!/bin/bash
# The real coordinator under load (issue 37, part 3): build/coord_load's light clients
# (bench/coord_load.c) against build/atoll coordinator on loopback, at N = 50, 100, 200,
# 256 (the coordinator's MAX_MEMBERS) and 300 clients (beyond it: 44 refused, one ERROR
# each). Each figure is the median of REPS runs, each against a fresh coordinator:
#   run A  --min-islands above N: (a) N HELLOs at once, admission time; (b) STEADY s of
#          heartbeats and one READY a second per client, answered by WAIT (round trip)
#   run B  --min-islands min(N, 256): (a) again; (b) HELLO_S s of one HELLO a second per
#          client, answered by WELCOME (a heartbeat's path plus the probe); (c) one
#          exchange of every member, READY -> COMMITTED (merge latency)
# Then the state file's cost: run A's registration at 256 members with and without
# --state (the coordinator rewrites and fsyncs the file at every registration).
# Prints a table with the CPU model and the machine's load; the runs' JSON lines stay in
# WORK. Both processes share this machine's cores: the clients' CURVE work competes with
# the coordinator's.
#
# usage: bench/coord_load.sh [--reps R] [--steady S] [--work DIR]
#   --reps    runs per figure (default 3; the median is shown)
#   --steady  seconds of run A's phase b (default 10; run B's HELLO phase is half)
#   --work    work directory (default /tmp/atoll-coord-load)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
REPS=3 STEADY=10 WORK=/tmp/atoll-coord-load
while [ $# -gt 0 ]; do
  case $1 in
    --reps) REPS=$2; shift ;;
    --steady) STEADY=$2; shift ;;
    --work) WORK=$2; shift ;;
    -h|--help) sed -n 2,21p "$0"; exit 0 ;;
    *) echo "coord_load.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $REPS in ''|*[!0-9]*|0) echo "coord_load.sh: --reps $REPS: expected a whole number from 1" >&2; exit 2 ;; esac
case $STEADY in ''|*[!0-9]*|0) echo "coord_load.sh: --steady $STEADY: expected a whole number of seconds from 1" >&2; exit 2 ;; esac
for b in atoll coord_load; do
  [ -x "$ROOT/build/$b" ] || { echo "coord_load.sh: build/$b is missing (make -C build atoll coord_load)" >&2; exit 1; }
done
PY=/usr/bin/python3
rm -rf "$WORK"; mkdir -p "$WORK/runs"
cp "$ROOT/build/atoll" "$ROOT/build/coord_load" "$WORK/" # (a snapshot: rebuilds meanwhile do not mix in)
ATOLL="$WORK/atoll" LOAD="$WORK/coord_load"
"$LOAD" --setup "$WORK/keys" --clients 300 >/dev/null
CPU="$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') (family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model[[:space:]]' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores)"
uptime >"$WORK/load_at_start"

port() { $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# one NAME MIN STATE LOAD_FLAGS...: a fresh coordinator (--min-islands MIN; STATE 1: with
# --state), one coord_load run; its JSON line in runs/NAME.json, the coordinator's log
# and state file beside it
one() {
  local name=$1 min=$2 state=$3; shift 3
  local p; p=$(port)
  local sflag=()
  [ "$state" = 1 ] && sflag=(--state "$WORK/runs/$name.state")
  : >"$WORK/runs/$name.log" # (exists before the wait below reads it)
  "$ATOLL" coordinator --listen tcp://127.0.0.1:$p --keys "$WORK/keys" --min-islands "$min" "${sflag[@]}" \
    >"$WORK/runs/$name.log" 2>&1 &
  local cpid=$!
  for _ in $(seq 50); do grep -q "listening on" "$WORK/runs/$name.log" && break; sleep 0.1; done
  timeout 300 "$LOAD" --endpoint tcp://127.0.0.1:$p --keys "$WORK/keys" --coordinator-pid $cpid "$@" \
    >"$WORK/runs/$name.json" 2>"$WORK/runs/$name.err" || echo "coord_load.sh: $name failed: $(head -2 "$WORK/runs/$name.err")" >&2
  kill $cpid 2>/dev/null || true; wait $cpid 2>/dev/null || true
}

for n in 50 100 200 256 300; do
  m=$((n < 256 ? n : 256))
  for r in $(seq "$REPS"); do
    echo "N=$n run $r/$REPS" >&2
    one "a_${n}_$r" $((n + 1)) 1 --clients $n --seconds "$STEADY" --rtt ready
    one "b_${n}_$r" $m 1 --clients $n --seconds $((STEADY / 2)) --rtt hello --exchange 1
  done
done
for r in $(seq "$REPS"); do # heartbeats alone at 256; the state file's cost at 256 members: registration only
  one "beats_$r" 257 1 --clients 256 --seconds "$STEADY" --rtt none
  one "nostate_$r" 257 0 --clients 256 --seconds 0 --rtt none
  one "state_$r" 257 1 --clients 256 --seconds 0 --rtt none
done
uptime >"$WORK/load_at_end"

$PY - "$WORK" "$REPS" "$CPU" <<'EOF'
import json, os, statistics, sys
work, reps, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def runs(prefix):
    out = []
    for r in range(1, reps + 1):
        p = os.path.join(work, "runs", "%s_%d.json" % (prefix, r))
        try:
            out.append(json.loads(open(p).read()))
        except (OSError, ValueError):
            pass
    return out
def med(rs, *path):
    vals = []
    for j in rs:
        v = j
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            vals.append(v)
    return statistics.median(vals) if vals else float("nan")
print("coordinator under load, %s (build/atoll coordinator and build/coord_load on loopback); medians of %d runs" % (cpu, reps))
print("load average at start: %s; at end: %s" % (open(os.path.join(work, "load_at_start")).read().split("average:")[-1].strip(),
                                                  open(os.path.join(work, "load_at_end")).read().split("average:")[-1].strip()))
hdr = ("N", "admitted", "refused", "1 ERROR", "admit p50", "p99", "max ms", "READY rtt p50", "p99 ms",
       "HELLO rtt p50", "p99 ms", "cpu steady %", "cpu admit s", "merge ms", "VmHWM MiB")
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
for n in (50, 100, 200, 256, 300):
    a, b = runs("a_%d" % n), runs("b_%d" % n)
    row = [n, med(a, "admitted"), med(a, "refused"), med(a, "refused_one_error"),
           med(a, "admit_ms", "p50"), med(a, "admit_ms", "p99"), med(a, "admit_ms", "max"),
           med(a, "rtt_ms", "p50"), med(a, "rtt_ms", "p99"), med(b, "rtt_ms", "p50"), med(b, "rtt_ms", "p99"),
           med(a, "steady_cpu_pct"), med(a, "register_cpu_s"), med(b, "merge_ms"),
           max(med(a, "vmhwm_kb"), med(b, "vmhwm_kb")) / 1024]
    print("| " + " | ".join(("%d" if i < 4 else "%.1f") % v if v == v else "-" for i, v in enumerate(row)) + " |")
ns, st = runs("nostate"), runs("state")
size = os.path.getsize(os.path.join(work, "runs", "state_1.state")) if os.path.exists(os.path.join(work, "runs", "state_1.state")) else 0
print("state file at 256 members (%d bytes, rewritten and fsynced at each registration): 256 admitted in %.2f s, "
      "admission p50 / max %.0f / %.0f ms, coordinator CPU %.2f s with --state; %.2f s, %.0f / %.0f ms, %.2f s without" %
      (size, med(st, "register_s"), med(st, "admit_ms", "p50"), med(st, "admit_ms", "max"), med(st, "register_cpu_s"),
       med(ns, "register_s"), med(ns, "admit_ms", "p50"), med(ns, "admit_ms", "max"), med(ns, "register_cpu_s")))
hb = runs("beats")
print("heartbeats alone at 256 members (256 messages/s): coordinator CPU %.1f%% of a core; with one READY a second each too: %.1f%%"
      % (med(hb, "steady_cpu_pct"), med(runs("a_256"), "steady_cpu_pct")))
print("coord_load's own CPU (its clients' CURVE work, on the same cores) at 256, run A: %.2f s" % med(runs("a_256"), "self_cpu_s"))
print("QUORUM at 256 members: %d bytes (of ATOLL_WIRE_MAX_CONTROL 65536)" % med(runs("b_256"), "x_quorum_bytes"))
EOF
