#!/usr/bin/python3
"""Collects bench/islands/run.sh's rows into results.json, results.md and islands.png.

usage: report.py WORK OUTDIR K H

Per row (one link rate, one --outer-dtype; K islands, H inner steps per outer step),
from each island's summary.json:
  * exchange rate = net.wire_bytes x 8 / net.exchange_seconds (per island; the time
    includes waiting for the other islands' READY and the DONE/GO and COMMIT round
    trips, so it is a lower bound on what the transfer achieved);
  * seconds per outer step = (compute_seconds + net.exchange_seconds) / net.exchanges,
    the slowest island; the wall time of the row / outer steps is given beside it
    (it adds start-up, the final evaluation and the checkpoint);
  * exposed communication per inner step = net.exchange_seconds / steps (no overlap:
    all of the exchange is exposed), mean over islands;
  * wire-busy rate: from linkmon.py's samples of each island's interface counter,
    bytes sent while the interface was busy / busy seconds (mean over islands): the
    transfer's own rate, without the waits that exchange_seconds includes;
  * bytes on the wire per island per outer step = net.wire_bytes / net.exchanges;
  * data parallel over the same link for the same tokens: a ring all-reduce of the fp32
    gradient every inner step, 2 (K - 1) / K x 4 x params bytes sent per rank per step,
    so H times that per outer step; its time on the link is those bytes at iperf3's
    rate (a lower bound: no latency, no compute overlap counted either way).
"""
import glob
import json
import os
import platform
import subprocess
import sys

work, outdir, K, H = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def wire_busy(path):
    """From linkmon.py's samples: the bytes sent while the link was busy and the busy
    seconds (runs of samples at more than 1% of the link's bytes, idle gaps under 150 ms
    bridged): the rate of the transfer alone, without the waits between transfers"""
    if not os.path.exists(path):
        return None
    pts = [tuple(map(float, l.split())) for l in open(path)]
    busy_s = busy_b = 0.0
    last = None
    for (t0, b0), (t1, b1) in zip(pts, pts[1:]):
        if b1 - b0 > 2000:
            busy_s += (t1 - t0) if last is None or t0 - last > 0.15 else (t1 - last)
            busy_b += b1 - b0
            last = t1
    return (busy_b, busy_s) if busy_s > 0 else None


rows = []
for rate in ("1gbit", "100mbit"):
    for dtype in ("fp32", "int8"):
        d = f"{work}/rows/{rate}_{dtype}"
        if not os.path.isdir(d):
            continue
        isl = [json.load(open(f"{d}/n{i}/summary.json")) for i in range(K)]
        link = float(open(f"{d}/iperf_bps").read())
        wall = float(open(f"{d}/wall_seconds").read())
        params = isl[0]["params"]
        steps = isl[0]["steps"]
        ex = [s["net"]["exchanges"] for s in isl]
        exs = [s["net"]["exchange_seconds"] for s in isl]
        wire = [s["net"]["wire_bytes"] for s in isl]
        comp = [s["compute_seconds"][0] for s in isl]
        per_outer = max((c + e) / n for c, e, n in zip(comp, exs, ex))
        wire_outer = sum(w / n for w, n in zip(wire, ex)) / K
        dp_outer = H * 2 * (K - 1) / K * 4 * params
        rates = [w * 8 / e for w, e in zip(wire, exs)]
        busy = [wire_busy(f"{d}/link{i}.txt") for i in range(K)]
        busy = [b for b in busy if b]
        rows.append({
            "link": rate, "outer_dtype": dtype, "iperf3_bits_per_second": link,
            "params": params, "inner_steps": steps, "outer_steps": min(ex),
            "retries": sum(s["net"]["retries"] for s in isl),
            "aborted_attempts_in_earlier_runs": int(open(f"{d}/aborted_first_run").read()) if os.path.exists(f"{d}/aborted_first_run") else 0,
            "seconds_per_outer_step": per_outer,
            "wall_seconds_per_outer_step": wall / min(ex),
            "compute_seconds_per_inner_step": sum(comp) / K / steps,
            "exposed_comm_seconds_per_inner_step": sum(exs) / K / steps,
            "exchange_seconds_per_outer_step": sum(exs) / K / min(ex),
            "wire_bytes_per_island_per_outer_step": wire_outer,
            "exchange_bits_per_second_min": min(rates),
            "exchange_bits_per_second_max": max(rates),
            "wire_busy_bits_per_second_mean": sum(b * 8 / t for b, t in busy) / len(busy) if busy else None,
            "dp_bytes_per_rank_per_outer_step": dp_outer,
            "dp_link_seconds_per_outer_step": dp_outer * 8 / link,
            "dp_over_islands_bytes": dp_outer / wire_outer,
            "commands": [open(f"{d}/cmd{i}").read().strip() for i in range(K)],
        })


def chaos_timeline(cd):
    """members per committed outer step (coordinator log), each island's train losses and
    validation losses, and the driver's events placed at steps"""
    if not os.path.isdir(cd):
        return None
    commits, restart_at = [], None
    for line in open(f"{cd}/coord.log"):
        if line.startswith("--- restart"):
            restart_at = commits[-1][0] if commits else 0
        if " committed: revision " in line:
            w = line.split()
            commits.append((int(w[2]), int(w[6])))  # "coordinator: step S committed: revision R, M islands"
    islands = {}
    for m in sorted(glob.glob(f"{cd}/n*/metrics.jsonl")):
        name = os.path.basename(os.path.dirname(m))
        pts = [p for p in map(json.loads, open(m)) if "loss" in p]  # (a step an island's phase skipped has none)
        islands[name] = {"steps": [p["step"] for p in pts], "loss": [p["loss"] for p in pts],
                         "val": [(p["step"], p["val_loss"]) for p in pts if "val_loss" in p]}
    events = []
    for name, v in islands.items():
        if not name.endswith("_r") and os.path.isdir(f"{cd}/{name}_r"):
            events.append((v["steps"][-1], f"island {name[1:]} killed"))
            first = islands[f"{name}_r"]["steps"]
            joined = sh(f"grep -o 'joined at step [0-9]*' {cd}/{name}_r.err | head -1").split()
            events.append((int(joined[-1]) if joined else first[0], f"island {name[1:]} rejoined"))
        elif not name.endswith("_r") and v["steps"][-1] < max(max(x["steps"]) for x in islands.values()):
            events.append((v["steps"][-1], f"island {name[1:]} killed for good"))
    if restart_at is not None:
        events.append((restart_at, "coordinator killed, restarted"))
    return {"commits": commits, "islands": islands, "events": sorted(events)}


chaos = chaos_timeline(f"{work}/chaos")
meta = {
    "date": sh("date -u +%Y-%m-%dT%H:%M:%SZ"),
    "cpu": sh("lscpu | sed -n 's/^Model name: *//p'"),
    "cores": os.cpu_count(),
    "kernel": platform.release(),
    "load_average_at_start": open(f"{work}/load_at_start").read().strip() if os.path.exists(f"{work}/load_at_start") else "",
    "machine_note": "shared 2-core machine, loaded by up to 6 other helpers' builds and tests during the run",
    "git_commit": sh(f"git -C {os.path.dirname(os.path.abspath(__file__))} rev-parse HEAD"),
    "atoll_sha256": sh(f"sha256sum {work}/atoll | cut -c1-64"),
    "iperf3": sh("iperf3 --version | head -1"),
    "islands": K, "sync_every": H,
    "common_flags": open(f"{work}/common_flags").read().strip(),
    "network": "one namespace per island and one for the coordinator, veth pairs to a bridge; tc tbf on each island's link "
               "in both directions (burst 4 ms at the rate, latency 20 ms); no delay, no loss (no netem in this kernel)",
    "chaos": "tests/net/test_islands_chaos.sh, seed %s, CHAOS_COORDINATOR=1, loopback with a modelled 1 Gbit/s 150 ms link (--throttle 1)"
             % os.environ.get("ATOLL_CHAOS_SEED", "7"),
}
conv = __doc__.split("usage: report.py WORK OUTDIR K H", 1)[1].strip()
res = {"meta": meta, "conventions": conv, "rows": rows,
       "chaos": {k: v for k, v in (chaos or {}).items() if k != "islands"} if chaos else None}
os.makedirs(outdir, exist_ok=True)
json.dump(res, open(f"{outdir}/results.json", "w"), indent=1)

mb = lambda b: b / 1e6
md = [f"# Islands over an emulated network ({meta['date'][:10]})", "",
      f"{K} islands + a coordinator in network namespaces, tc tbf links; model {meta['common_flags'].split(' --threads')[0]} "
      f"({rows[0]['params'] / 1e6:.2f} M parameters), H = {H}, {rows[0]['outer_steps'] if rows else 0} outer steps per row. "
      f"CPU: {meta['cpu']}, {meta['cores']} cores, {meta['machine_note']} (load average at start: {meta['load_average_at_start']}).", "",
      "| link (iperf3) | outer dtype | s / outer step | compute / inner step | exposed comm / inner step | exchange rate (min..max island) | wire-busy rate | MB on the wire / island / outer step | data parallel MB / rank / outer step | DP / islands bytes | DP link time / outer step |",
      "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    md.append(f"| {r['link']} ({r['iperf3_bits_per_second'] / 1e6:.0f} Mbit/s) | {r['outer_dtype']} | {r['seconds_per_outer_step']:.2f} "
              f"(wall {r['wall_seconds_per_outer_step']:.2f}) | {r['compute_seconds_per_inner_step']:.3f} s | {r['exposed_comm_seconds_per_inner_step']:.3f} s | "
              f"{r['exchange_bits_per_second_min'] / 1e6:.0f}..{r['exchange_bits_per_second_max'] / 1e6:.0f} Mbit/s "
              f"({100 * r['exchange_bits_per_second_min'] / r['iperf3_bits_per_second']:.0f}%..{100 * r['exchange_bits_per_second_max'] / r['iperf3_bits_per_second']:.0f}%) | "
              + (f"{r['wire_busy_bits_per_second_mean'] / 1e6:.0f} Mbit/s | " if r['wire_busy_bits_per_second_mean'] else "- | ") +
              f"{mb(r['wire_bytes_per_island_per_outer_step']):.1f} | {mb(r['dp_bytes_per_rank_per_outer_step']):.1f} | "
              f"{r['dp_over_islands_bytes']:.1f}x | {r['dp_link_seconds_per_outer_step']:.2f} s |")
md += ["", "Conventions:", "", conv, ""]
if chaos:
    md += ["Chaos timeline (islands.png, right): " + "; ".join(f"step {s}: {e}" for s, e in chaos["events"]) +
           f"; {len(chaos['commits'])} outer steps committed, members per step {min(m for _, m in chaos['commits'])}.."
           f"{max(m for _, m in chaos['commits'])}.", ""]
md += [f"atoll sha256 {meta['atoll_sha256']}, commit {meta['git_commit']}; commands in results.json."]
open(f"{outdir}/results.md", "w").write("\n".join(md) + "\n")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("report.py: no matplotlib (apt-get install python3-matplotlib): islands.png not drawn")
    sys.exit(0)
fig, ax = plt.subplots(1, 3 if chaos else 1, figsize=(16 if chaos else 6, 4.5), squeeze=False)
a = ax[0][0]
labels = [f"{r['link']}\n{r['outer_dtype']}" for r in rows]
x = range(len(rows))
a.bar([i - 0.2 for i in x], [r["compute_seconds_per_inner_step"] * H for r in rows], 0.4, label="compute (H inner steps)")
a.bar([i - 0.2 for i in x], [r["exchange_seconds_per_outer_step"] for r in rows], 0.4,
      bottom=[r["compute_seconds_per_inner_step"] * H for r in rows], label="islands: exchange (exposed)")
a.bar([i + 0.2 for i in x], [r["compute_seconds_per_inner_step"] * H for r in rows], 0.4, color="C0", alpha=0.4)
a.bar([i + 0.2 for i in x], [r["dp_link_seconds_per_outer_step"] for r in rows], 0.4,
      bottom=[r["compute_seconds_per_inner_step"] * H for r in rows], color="C3", alpha=0.6, label="data parallel: all-reduces on the link")
a.set_xticks(list(x)), a.set_xticklabels(labels), a.set_ylabel("seconds per outer step")
a.set_title(f"{K} islands, H = {H}: islands (left bar) vs data parallel (right)"), a.legend(fontsize=7)
if chaos:
    b, c = ax[0][1], ax[0][2]
    b.step([s for s, _ in chaos["commits"]], [m for _, m in chaos["commits"]], where="post")
    b.set_ylim(0, K + 0.5), b.set_xlabel("inner step"), b.set_ylabel("members in the committed outer step")
    b.set_title("chaos run: members per outer step")
    for s, e in chaos["events"]:
        for axx in (b, c):
            axx.axvline(s, color="grey", ls=":", lw=1)
        b.text(s, 0.3 + 0.5 * (chaos["events"].index((s, e)) % 3), e, rotation=90, fontsize=7, va="bottom")
    for name, v in sorted(chaos["islands"].items()):
        c.plot(v["steps"], v["loss"], lw=0.8, label=f"island {name[1:].replace('_r', ' (restarted)')}: train loss")
        if v["val"]:
            c.plot(*zip(*v["val"]), "ko", ms=4)
    c.plot([], [], "ko", ms=4, label="validation loss")
    c.set_xlabel("inner step"), c.set_ylabel("loss"), c.set_title("chaos run: losses"), c.legend(fontsize=7)
fig.tight_layout()
fig.savefig(f"{outdir}/islands.png", dpi=110)
print(f"report.py: wrote {outdir}/results.json, results.md, islands.png")
