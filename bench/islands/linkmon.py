"""Samples a network interface's transmitted bytes (sysfs) every few milliseconds and
writes "seconds bytes" lines when SECONDS have passed or on SIGTERM: the link's
timeline, to see when an exchange's transfer runs and where the link idles. Run it
inside the island's namespace (ip netns exec).
   usage: linkmon.py IFACE SECONDS OUT [INTERVAL_MS]"""
import signal
import sys
import time

iface, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
dt = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0.005
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
t0 = time.monotonic()
rows = []
with open(f"/sys/class/net/{iface}/statistics/tx_bytes") as f:
    while not stop and time.monotonic() - t0 < seconds:
        f.seek(0)
        rows.append((time.monotonic() - t0, int(f.read())))
        time.sleep(dt)
with open(out, "w") as o:
    o.writelines(f"{t:.4f} {b}\n" for t, b in rows)
