"""A ping-style UDP probe for the emulated network (tests/net/test_wan_delay.sh); there
is no ping on the test machines.

  udp_probe.py echo ADDR PORT SECONDS    echo every datagram back, for SECONDS
  udp_probe.py ping ADDR PORT N          N probes, one at a time (each waits up to 1 s);
                                         prints each round trip in ms, or "lost"
  udp_probe.py sink ADDR PORT SECONDS    count the datagrams that arrive: stops 1 s after
                                         the last one (or after SECONDS); prints the count
  udp_probe.py send ADDR PORT N          send N datagrams, 1 ms apart
"""
import socket
import struct
import sys
import time


def echo(addr, port, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            data, peer = s.recvfrom(2048)
        except socket.timeout:
            continue
        s.sendto(data, peer)


def ping(addr, port, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for seq in range(n):
        sent = time.monotonic()
        s.sendto(struct.pack("!I", seq), (addr, port))
        rtt = None
        while rtt is None:
            left = sent + 1.0 - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                data = s.recv(2048)
            except socket.timeout:
                break
            if len(data) == 4 and struct.unpack("!I", data)[0] == seq:  # a late reply is not this one
                rtt = (time.monotonic() - sent) * 1000
        print("lost" if rtt is None else "%.3f" % rtt, flush=True)


def sink(addr, port, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    end, count = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        s.settimeout(max(0.01, min(1.0 if count else seconds, end - time.monotonic())))
        try:
            s.recv(2048)
        except socket.timeout:
            if count:
                break
            continue
        count += 1
    print(count)


def send(addr, port, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for seq in range(n):
        s.sendto(struct.pack("!I", seq), (addr, port))
        time.sleep(0.001)


if __name__ == "__main__":
    mode, addr, port, arg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    {"echo": lambda: echo(addr, port, float(arg)), "ping": lambda: ping(addr, port, int(arg)),
     "sink": lambda: sink(addr, port, float(arg)), "send": lambda: send(addr, port, int(arg))}[mode]()
