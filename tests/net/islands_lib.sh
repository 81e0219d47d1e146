# Shared by the network tests (sourced after tests/cli/common.sh): keys, a coordinator
# and islands as separate processes on loopback. Every process runs under timeout.
# free_ports N: N distinct free TCP ports on loopback (all held open until all are
# chosen, so no two are the same)
free_ports() {
  $PY -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}

# net_keys DIR K: a coordinator's keys in DIR/coord, K islands' in DIR/iK, all allowed
net_keys() {
  $ATOLL keys --out "$1/coord" >/dev/null || return 1
  i=0
  while [ $i -lt "$2" ]; do
    $ATOLL keys --out "$1/i$i" >/dev/null || return 1
    cp "$1/i$i/key.pub" "$1/coord/allowed/i$i.pub"
    i=$((i + 1))
  done
}

# start_coordinator DIR PORT MIN [extra flags]: sets COORD_PID; log in DIR/coord.log
start_coordinator() {
  dir=$1; port=$2; min=$3; shift 3
  timeout 600 $ATOLL coordinator --listen tcp://127.0.0.1:$port --keys "$dir/coord" --min-islands $min "$@" >>"$dir/coord.log" 2>&1 &
  COORD_PID=$!
}

# island_flags DIR CPORT K PORT: the flags that make island K of a job in DIR, its
# data socket on PORT
island_flags() {
  echo "--join tcp://127.0.0.1:$2 --coordinator-key $1/coord/key.pub --island-id $3 --island-key $1/i$3/key.secret --island-listen tcp://127.0.0.1:$4"
}
