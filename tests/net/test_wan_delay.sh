#!/bin/sh
# Delay, jitter and loss on the emulated network (tests/net/netns_lib.sh, wan_delay, with
# tests/net/delayer.c: a TUN delay line in the switch namespace, since this kernel has no
# netem). Two islands in network namespaces; a UDP ping-style probe (tests/net/udp_probe.py)
# from island 0 to an echo on island 1, 20 probes a case. Proves:
#   - without the delayer the median round trip is under 10 ms;
#   - with 50 ms each way the median is within 10% of 100 ms and no probe is under 99 ms;
#   - with 50 +- 20 ms the spread appears (standard deviation >= 8 ms, range >= 30 ms;
#     two uniform draws give 16 ms and about 60 ms) and every probe is in [59, 160] ms;
#   - with --loss 0.3, of 200 datagrams sent one way 20-40% are lost;
#   - iperf3 (one TCP stream, 3 s) through tbf 100 Mbit/s and 50 ms each way carries at
#     least 20 Mbit/s (slow start over a 100 ms round trip; about 70 measured);
#   - wan_delay_stop brings the round trip back under 10 ms; the delayer's bad flags get
#     one line each.
# Skips (77) without root, network namespaces or /dev/net/tun; fails without iperf3.
#   usage: test_wan_delay.sh DELAYER SRC
DELAYER=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/net/netns_lib.sh"
WAN_DELAYER=$DELAYER
PROBE="$SRC/tests/net/udp_probe.py"
cleanup() {
  wan_watchdog_stop
  wan_down
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
wan_watchdog 75 # (ctest's TIMEOUT is 90 s)

expect_error "delayer: a delay that is not a number" "--delay-ms" "$DELAYER" --dev dl0 --delay-ms abc
expect_error "delayer: a loss above 1" "--loss" "$DELAYER" --dev dl0 --loss 1.5
expect_error "delayer: an unknown flag" "--speed" "$DELAYER" --dev dl0 --speed 3
expect_error "delayer: no --dev" "--dev" "$DELAYER" --delay-ms 5
expect_error "delayer: a flag without its value" "--seed" "$DELAYER" --dev dl0 --seed

[ "$(id -u)" -eq 0 ] || { echo "SKIP: network namespaces need root (running as uid $(id -u))"; exit 77; }
[ -c /dev/net/tun ] || { echo "SKIP: /dev/net/tun is missing (no TUN devices for the delayer)"; exit 77; }
why=$(ip netns add "${WAN}probe" 2>&1) || { echo "SKIP: cannot create a network namespace: ip netns add: $why"; exit 77; }
ip netns del "${WAN}probe"
command -v iperf3 >/dev/null || { echo "FAIL: iperf3 is not installed (scripts/setup.sh installs it)"; exit 1; }
wan_up 2 || { echo "FAIL: cannot build the emulated network (above)"; exit 1; }

# probe NAME PORT: 20 probes from island 0 to an echo on island 1; the round trips in
# $TMP/NAME, one a line ("lost" for none)
probe() {
  timeout 15 ip netns exec "${WAN}1" $PY "$PROBE" echo "$(wan_ip 1)" "$2" 10 &
  echo_pid=$!
  sleep 0.3
  timeout 15 ip netns exec "${WAN}0" $PY "$PROBE" ping "$(wan_ip 1)" "$2" 20 >"$TMP/$1"
  kill "$echo_pid" 2>/dev/null; wait "$echo_pid" 2>/dev/null
}

# judge NAME CONDITION: CONDITION is a Python expression over med, lo, hi, sd (ms) and
# lost (probes); prints the statistics; status 0 when it holds
judge() {
  $PY - "$TMP/$1" "$2" <<'PYEOF'
import statistics, sys
lines = open(sys.argv[1]).read().split()
rtt = sorted(float(x) for x in lines if x != "lost")
lost = len(lines) - len(rtt)
if len(rtt) < 2:
    print("%d probes, %d answered" % (len(lines), len(rtt))); sys.exit(1)
med, lo, hi, sd = statistics.median(rtt), rtt[0], rtt[-1], statistics.stdev(rtt)
print("%d probes, %d lost: median %.1f ms, min %.1f, max %.1f, sd %.1f" % (len(lines), lost, med, lo, hi, sd))
sys.exit(0 if len(lines) == 20 and eval(sys.argv[2]) else 1)
PYEOF
}

# check NAME CONDITION WHAT: judge, then pass or fail with WHAT and the statistics
check() {
  if out=$(judge "$1" "$2"); then pass "$3: $out"; else fail "$3 ($2): $out"; fi
}

probe plain 7001
check plain "lost == 0 and med < 10" "no delayer: round trip under 10 ms"

wan_delay 50 || { fail "wan_delay 50 failed (above)"; finish; }
probe d50 7002
check d50 "lost == 0 and abs(med - 100) <= 10 and lo >= 99" "50 ms each way: median within 10% of 100 ms"

wan_delay 50 20 || { fail "wan_delay 50 20 failed (above)"; finish; }
probe j20 7003
check j20 "lost == 0 and sd >= 8 and hi - lo >= 30 and lo >= 59 and hi <= 160" "50 +- 20 ms each way: the spread appears"

# loss: 200 datagrams one way, counted where they arrive
wan_delay 50 0 0.3 || { fail "wan_delay 50 0 0.3 failed (above)"; finish; }
timeout 15 ip netns exec "${WAN}1" $PY "$PROBE" sink "$(wan_ip 1)" 7004 10 >"$TMP/sink" &
sink_pid=$!
sleep 0.3
timeout 15 ip netns exec "${WAN}0" $PY "$PROBE" send "$(wan_ip 1)" 7004 200
wait "$sink_pid"
got=$(cat "$TMP/sink")
if [ -n "$got" ] && [ "$got" -ge 120 ] && [ "$got" -le 160 ]; then
  pass "--loss 0.3: $got of 200 datagrams arrived ($((200 - got)) lost; 60 expected)"
else
  fail "--loss 0.3: '$got' of 200 datagrams arrived (expected 120-160)"
fi

# TCP through tbf and the delay
wan_rate 100mbit || { fail "tc tbf refused"; finish; }
wan_delay 50 || { fail "wan_delay 50 failed (above)"; finish; }
rate=$(wan_iperf 0 1 3)
if [ -n "$rate" ] && [ "$rate" -ge 20000000 ]; then
  pass "iperf3 through tbf 100 Mbit/s and 100 ms round trip: $((rate / 1000000)) Mbit/s"
else
  fail "iperf3 through tbf 100 Mbit/s and 100 ms round trip: '$rate' bit/s (expected >= 20 Mbit/s)"
fi

wan_delay_stop
probe after 7005
check after "lost == 0 and med < 10" "wan_delay_stop: round trip under 10 ms again"
finish
