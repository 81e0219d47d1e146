# A small emulated network for islands (sourced; needs root, iproute2, tc): one
# namespace per island and one for the coordinator, each joined by a veth pair to a
# bridge in a "switch" namespace. Each island's access link is limited by a token
# bucket (tc tbf) in both directions: on its own veth end (egress) and on the switch's
# end (what it receives). This kernel has no netem, so delay and loss are not emulated.
#
#   wan_up K          namespaces ${WAN}c, ${WAN}0 .. ${WAN}K-1, ${WAN}sw; addresses
#                     10.231.0.254 (coordinator) and 10.231.0.(i+1) (island i)
#   wan_rate RATE     tbf RATE (tc units: 100mbit, 1gbit) on every island's link
#   wan_ip i          island i's address; wan_exec NS CMD...: CMD inside namespace NS
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
  for ns in $WAN_NS; do ip netns del "$ns" 2>/dev/null; done
  WAN_NS=""
}

# wan_iperf A B SECONDS: iperf3's rate (bits/s, as the receiver counted it) from island
# A to island B, one TCP stream
wan_iperf() {
  timeout 30 ip netns exec "$WAN$2" iperf3 -s -1 -B "$(wan_ip $2)" >/dev/null 2>&1 &
  srv=$!
  sleep 0.5
  timeout 30 ip netns exec "$WAN$1" iperf3 -c "$(wan_ip $2)" -t "$3" -J 2>/dev/null \
    | $PY -c 'import json, sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]))'
  rc=$?
  wait $srv 2>/dev/null
  return $rc
}
