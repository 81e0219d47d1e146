"""bench/islands/overlap.sh's table: per row, every island's compute utilisation and its
waits, from summary.json; medians over the islands. usage: overlap_report.py WORK K"""
import json
import os
import statistics
import sys

work, k = sys.argv[1], int(sys.argv[2])
print(open(os.path.join(work, "setup.txt")).read().splitlines()[0])
print(open(os.path.join(work, "setup.txt")).read().splitlines()[1])
print()
print("| row | wall s | compute utilisation (min..max over islands) | exchange wait s (median) | outer sync s (median) | longest gap s (max) | final val loss |")
print("|---|---|---|---|---|---|---|")
rows = sorted(d for d in os.listdir(work) if d.startswith(("sync", "overlap")))
out = {}
for r in rows:
    s = [json.load(open(os.path.join(work, r, f"n{i}", "summary.json"))) for i in range(k)]
    u = [x["compute_utilisation"] for x in s]
    wait = statistics.median(x["exchange_wait_seconds"][0] for x in s)
    sync = statistics.median(x["outer_sync_seconds"][0] for x in s)
    gap = max(x["longest_step_gap_seconds"] for x in s)
    wall = float(open(os.path.join(work, r, "wall_seconds")).read())
    loss = s[0]["final_val_loss"]
    out[r] = {"wall_seconds": wall, "utilisation": u, "exchange_wait_seconds": wait, "outer_sync_seconds": sync,
              "longest_gap_seconds": gap, "final_val_loss": loss}
    print(f"| {r} | {wall:.1f} | {min(u):.3f}..{max(u):.3f} | {wait:.2f} | {sync:.2f} | {gap:.2f} | {loss:.4f} |")
json.dump(out, open(os.path.join(work, "results.json"), "w"), indent=1)
