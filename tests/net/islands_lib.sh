# Shared by the network tests (sourced after tests/cli/common.sh): keys, a coordinator
# and islands as separate processes on loopback. Every process runs under timeout.
# free_ports N: N distinct free TCP ports on loopback, below the kernel's ephemeral
# range (so that no outgoing connection takes one meanwhile), held open until all are
# chosen
free_ports() {
  $PY -c 'import random, socket, sys
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
got = []
while len(got) < int(sys.argv[1]):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randrange(10000, lo)))
        got.append(s)
    except OSError:
        s.close()
print(" ".join(str(x.getsockname()[1]) for x in got))' "$1"
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

# start_coordinator DIR PORT MIN [extra flags]: sets COORD_PID; log in DIR/coord.log,
# state in DIR/coord/coordinator.json (a later --state in the flags wins)
start_coordinator() {
  dir=$1; port=$2; min=$3; shift 3
  # the log exists before this returns: a background job's redirection is made in the
  # child, later, and a caller counting lines in a missing file read "" (not 0)
  : >>"$dir/coord.log"
  timeout -k 5 600 $ATOLL coordinator --listen tcp://127.0.0.1:$port --keys "$dir/coord" --min-islands $min \
    --state "$dir/coord/coordinator.json" "$@" >>"$dir/coord.log" 2>&1 &
  COORD_PID=$!
}

# island_flags DIR CPORT K PORT: the flags that make island K of a job in DIR, its
# data socket on PORT
island_flags() {
  echo "--join tcp://127.0.0.1:$2 --coordinator-key $1/coord/key.pub --island-id $3 --island-key $1/i$3/key.secret --island-listen tcp://127.0.0.1:$4"
}

# kill9 PID: SIGKILL the program a `timeout` wrapper (PID) runs, then the wrapper: the
# program dies as from a crash (no chance to say goodbye)
kill9() {
  for c in $(pgrep -P "$1"); do kill -9 "$c" 2>/dev/null; done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

# pair_port: a free port P with P + 1 free too (rank r of an island listens on P + r)
pair_port() {
  $PY -c 'import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
while True:
    p = random.randrange(10000, lo - 2)
    s = [socket.socket(), socket.socket()]
    try:
        s[0].bind(("127.0.0.1", p)); s[1].bind(("127.0.0.1", p + 1))
        print(p); break
    except OSError:
        pass
    finally:
        for x in s: x.close()'
}
