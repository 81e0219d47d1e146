# A small emulated network for islands (sourced; needs root, iproute2, tc): one
# namespace per island and one for the coordinator, each joined by a veth pair to a
# bridge in a "switch" namespace. Each island's access link is limited by a token
# bucket (tc tbf) in both directions: on its own veth end (egress) and on the switch's
# end (what it receives). This kernel has no netem: wan_delay (at the end of this file)
# routes the hosts' traffic through a user-space delay line (tests/net/delayer.c).
#
#   wan_up K          namespaces ${WAN}c, ${WAN}0 .. ${WAN}K-1, ${WAN}sw; addresses
#                     10.231.0.254 (coordinator) and 10.231.0.(i+1) (island i)
#   wan_rate RATE     tbf RATE (tc units: 100mbit, 1gbit) on every island's link
#   wan_ip i          island i's address; wan_exec NS CMD...: CMD inside namespace NS
#   wan_delay MS [JITTER_MS [LOSS]]  delay (+- jitter, loss) each way between hosts
#                     (WAN_DELAYER=build/tests/delayer); wan_delay_stop ends it
#   wan_down          deletes every namespace made by wan_up (also after a partial wan_up)
# WAN (the name prefix) is unique per shell: two runs at once do not meet.
WAN=${WAN:-aw$$}
WAN_K=0
WAN_NS=""

wan_ip() { echo "10.231.0.$(($1 + 1))"; }
wan_exec() { ns=$1; shift; ip netns exec "$ns" "$@"; }

# wan_link NS ADDR PEER: a veth pair: eth0 (ADDR/24) in NS, PEER on the switch's bridge
wan_link() {
  ip link add "${WAN}x" type veth peer name "$3" || return 1
  ip link set "${WAN}x" netns "$1" || return 1
  ip link set "$3" netns "${WAN}sw" || return 1
  ip -n "$1" link set "${WAN}x" name eth0 || return 1
  ip -n "$1" addr add "$2/24" dev eth0 || return 1
  ip -n "$1" link set eth0 up && ip -n "$1" link set lo up || return 1
  ip -n "${WAN}sw" link set "$3" master br0 && ip -n "${WAN}sw" link set "$3" up
}

wan_up() {
  WAN_K=$1
  for n in sw c $(seq 0 $(($1 - 1))); do
    why=$(ip netns add "$WAN$n" 2>&1) || { echo "wan: cannot create network namespace $WAN$n (root and CAP_SYS_ADMIN are needed): ip netns add: $why"; return 1; }
    WAN_NS="$WAN_NS $WAN$n"
  done
  ip -n "${WAN}sw" link add br0 type bridge && ip -n "${WAN}sw" link set br0 up \
    || { echo "wan: cannot create a bridge in ${WAN}sw"; return 1; }
  wan_link "${WAN}c" 10.231.0.254 "${WAN}pc" || { echo "wan: cannot link the coordinator's namespace"; return 1; }
  i=0
  while [ $i -lt "$1" ]; do
    wan_link "$WAN$i" "$(wan_ip $i)" "${WAN}p$i" || { echo "wan: cannot link island $i's namespace"; return 1; }
    i=$((i + 1))
  done
}

# tbf: burst = 4 ms at RATE (at least 64 KiB), so one 250 Hz kernel tick's worth of
# data can leave at once (a smaller burst cannot reach the rate); latency 20 ms bounds
# the queue (a modest router buffer: enough for TCP to keep the link busy, not so much
# that it adds a large delay)
wan_rate() {
  bits=$(echo "$1" | awk '/gbit$/ {print $0 * 1e9; next} /mbit$/ {print $0 * 1e6; next} {print $0}')
  burst=$(awk -v b="$bits" 'BEGIN { x = int(b / 8 * 0.004); if (x < 65536) x = 65536; print x }')
  i=0
  while [ $i -lt "$WAN_K" ]; do
    ip netns exec "$WAN$i" tc qdisc replace dev eth0 root tbf rate "$1" burst "$burst" latency 20ms || return 1
    ip netns exec "${WAN}sw" tc qdisc replace dev "${WAN}p$i" root tbf rate "$1" burst "$burst" latency 20ms || return 1
    i=$((i + 1))
  done
}

wan_down() {
  for h in ${WAN_DOWN_HOOKS:-}; do "$h"; done # e.g. wan_delay_kill: processes inside the namespaces
  for ns in $WAN_NS; do ip netns del "$ns" 2>/dev/null; done
  WAN_NS=""
}

# wan_iperf A B SECONDS [STREAMS]: iperf3's rate (bits/s, as the receiver counted it,
# summed over the streams) from island A to island B, STREAMS TCP streams (iperf3 -P;
# 1 unless given)
wan_iperf() {
  timeout 30 ip netns exec "$WAN$2" iperf3 -s -1 -B "$(wan_ip $2)" >/dev/null 2>&1 &
  srv=$!
  sleep 0.5
  timeout 30 ip netns exec "$WAN$1" iperf3 -c "$(wan_ip $2)" -t "$3" -P "${4:-1}" -J 2>/dev/null \
    | $PY -c 'import json, sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]))'
  rc=$?
  wait $srv 2>/dev/null
  return $rc
}

# --- Delay, jitter and loss (no netem here): tests/net/delayer.c, a delay line on a TUN
# device "dl0" in the switch namespace. wan_delay makes the switch namespace a router
# as well as a bridge: br0 gets 10.231.0.253 ($WAN_GW), every host (coordinator and
# islands) gets a /32 route to each other host via it, and a policy rule sends what
# arrives on br0 to table 231, whose one route is dl0. The delayer holds each packet
# and writes it back into dl0; arriving from dl0 it follows the main table out of br0
# to its host. So each packet between two hosts passes the delayer once per direction
# (RTT = 2 x MS) and each island's tbf still limits it on both sides. ICMP redirects
# are off (a packet leaves br0 the way it came) and so is rp_filter (a packet from
# dl0 carries a source that br0 reaches).
#   WAN_DELAYER=PATH                   the delayer binary (build/tests/delayer)
#   wan_delay MS [JITTER_MS [LOSS]]    (re)starts the delayer: MS each way, +-JITTER_MS
#                                      uniform (each flow kept in order), LOSS in [0, 1]
#                                      dropped per packet and direction; seed
#                                      $WAN_DELAY_SEED (1). Its counters go to stderr
#                                      when it stops
#   wan_delay_stop                     stops it and removes the hosts' routes: bridged again
# wan_down stops the delayer first (WAN_DOWN_HOOKS).
WAN_GW=10.231.0.253
WAN_DELAYER=${WAN_DELAYER:-}
WAN_DELAYER_PID=""
WAN_ROUTED=0

wan_host_addr() { if [ "$1" = c ]; then echo 10.231.0.254; else wan_ip "$1"; fi; }
wan_hosts() { echo c; [ "$WAN_K" -gt 0 ] && seq 0 $((WAN_K - 1)); }

# wan_host_routes add|del: every host's route to every other host via $WAN_GW
wan_host_routes() {
  for a in $(wan_hosts); do
    for b in $(wan_hosts); do
      [ "$a" = "$b" ] && continue
      if [ "$1" = add ]; then
        ip -n "$WAN$a" route replace "$(wan_host_addr "$b")/32" via $WAN_GW dev eth0 || return 1
      else
        ip -n "$WAN$a" route del "$(wan_host_addr "$b")/32" 2>/dev/null
      fi
    done
  done
  return 0
}

# wan_delay_router: the switch namespace forwards, through table 231 for what br0 brings
wan_delay_router() {
  ip -n "${WAN}sw" addr replace $WAN_GW/24 dev br0 || return 1
  ip netns exec "${WAN}sw" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward
    for d in all default br0; do echo 0 >/proc/sys/net/ipv4/conf/$d/send_redirects; echo 0 >/proc/sys/net/ipv4/conf/$d/rp_filter; done' \
    || return 1
  ip -n "${WAN}sw" rule del iif br0 lookup 231 2>/dev/null
  ip -n "${WAN}sw" rule add iif br0 lookup 231 priority 100
}

wan_delay_kill() {
  [ -n "$WAN_DELAYER_PID" ] || return 0
  kill -TERM "$WAN_DELAYER_PID" 2>/dev/null
  wait "$WAN_DELAYER_PID" 2>/dev/null
  WAN_DELAYER_PID=""
}

wan_delay_stop() {
  wan_delay_kill
  [ "$WAN_ROUTED" = 1 ] && wan_host_routes del
  WAN_ROUTED=0
}

wan_delay() {
  [ -n "$WAN_DELAYER" ] && [ -x "$WAN_DELAYER" ] \
    || { echo "wan: WAN_DELAYER='$WAN_DELAYER' is not the delayer binary (build/tests/delayer)"; return 1; }
  wan_delay_kill
  case " ${WAN_DOWN_HOOKS:-} " in *" wan_delay_kill "*) ;; *) WAN_DOWN_HOOKS="${WAN_DOWN_HOOKS:-} wan_delay_kill" ;; esac
  # ip netns exec execs the delayer: $! is its pid
  ip netns exec "${WAN}sw" "$WAN_DELAYER" --dev dl0 --delay-ms "$1" --jitter-ms "${2:-0}" --loss "${3:-0}" \
    --seed "${WAN_DELAY_SEED:-1}" &
  WAN_DELAYER_PID=$!
  n=0
  until ip -n "${WAN}sw" link show dl0 >/dev/null 2>&1; do
    kill -0 "$WAN_DELAYER_PID" 2>/dev/null && [ $n -lt 50 ] \
      || { echo "wan: the delayer did not create dl0 in ${WAN}sw (its message above)"; wan_delay_kill; return 1; }
    sleep 0.1; n=$((n + 1))
  done
  # txqueuelen: what waits for the delayer to read it (the default 500 packets is
  # 6 ms at 1 Gbit/s)
  ip -n "${WAN}sw" link set dl0 up txqueuelen 10000 \
    && ip -n "${WAN}sw" route replace 10.231.0.0/24 dev dl0 table 231 \
    || { echo "wan: cannot route through dl0 in ${WAN}sw"; wan_delay_kill; return 1; }
  if [ "$WAN_ROUTED" != 1 ]; then
    wan_delay_router && wan_host_routes add || { echo "wan: cannot route the hosts through ${WAN}sw"; return 1; }
    WAN_ROUTED=1
  fi
}

# wan_watchdog SECONDS: ctest's TIMEOUT would SIGKILL the test's shell, and no trap would
# delete its namespaces: this ends it first with SIGTERM (its traps run), saying why.
# The test's EXIT trap calls wan_watchdog_stop.
wan_watchdog() {
  (sleep "$1" && echo "FAIL: the test ran for $1 s; stopping it" && kill -TERM $$) 2>/dev/null &
  WAN_WATCH=$!
}
wan_watchdog_stop() {
  [ -n "${WAN_WATCH:-}" ] || return 0
  pkill -P "$WAN_WATCH" 2>/dev/null
  kill "$WAN_WATCH" 2>/dev/null
  WAN_WATCH=""
}
