"""usage: hetero_report.py WORK K: the table of bench/islands/hetero.sh's rows (each
WORK/ROW/nI/summary.json, WORK/ROW/wall_seconds) into WORK/hetero.json and
WORK/hetero.md: per island its compute utilisation, the tokens it trained per second of
the row's wall time, steps taken, merges, the largest staleness and the longest gap
between inner steps; per row the final validation loss of the global model and the
tokens every island trained."""
import json, os, sys

work, K = sys.argv[1], int(sys.argv[2])
rows = []
for name in ["sync", "grace", "phase", "phase_async", "phase_async_a25", "phase_async_fast", "phase_async_kill"]:
    d = os.path.join(work, name)
    if not os.path.isdir(d):
        continue
    wall = float(open(os.path.join(d, "wall_seconds")).read())
    islands = []
    for i in range(K):
        p = os.path.join(d, f"n{i}", "summary.json")
        if not os.path.exists(p):
            continue
        s = json.load(open(p))
        islands.append({"island": i, "compute_utilisation": s["compute_utilisation"],
                        "tokens": s["tokens_contributed_per_island"],
                        "tokens_per_second": s["tokens_contributed_per_island"] / wall,
                        "steps_taken": s.get("inner_steps_taken", s["steps"]), "steps": s["steps"],
                        "merges": s["merges"], "staleness_max": s["staleness_steps_max"],
                        "longest_gap_seconds": s["longest_step_gap_seconds"], "final_val_loss": s["final_val_loss"]})
    # the global model's validation loss over the row (every island evaluates it; the
    # last island's record): seconds since the row's first step, the tokens every island
    # had trained by then (each island's tokens per step x its steps taken so far)
    curve = []
    for i in range(K):
        p = os.path.join(d, f"n{i}", "metrics.jsonl")
        if os.path.exists(p):
            lines = [json.loads(l) for l in open(p)]
    t0 = lines[0]["time"]
    for l in lines:
        if "val_loss" in l:
            curve.append({"seconds": l["time"] - t0, "step": l["step"], "val_loss": l["val_loss"]})
    rows.append({"row": name, "wall_seconds": wall, "islands": islands, "val_curve": curve,
                 "final_val_loss": islands[-1]["final_val_loss"], "tokens": sum(x["tokens"] for x in islands)})
machine = open(os.path.join(work, "machine")).read().split("\n")
json.dump({"machine": machine, "rows": rows}, open(os.path.join(work, "hetero.json"), "w"), indent=1)
out = [f"CPU: {machine[0]}; load at start: {machine[1].strip()}; commit {machine[2]}", "",
       "| row | wall s | val loss | tokens (all) | island: utilisation / tokens per s / steps taken / merges / staleness / longest gap s |",
       "|---|---|---|---|---|"]
for r in rows:
    cells = "; ".join(f"{x['island']}: {x['compute_utilisation']:.3f} / {x['tokens_per_second']:.0f} / {x['steps_taken']} / "
                      f"{x['merges']} / {x['staleness_max']} / {x['longest_gap_seconds']:.2f}" for x in r["islands"])
    out.append(f"| {r['row']} | {r['wall_seconds']:.1f} | {r['final_val_loss']:.4f} | {r['tokens']:.0f} | {cells} |")
out += ["", "Validation loss of the global model over each row (seconds since its first step: loss):", ""]
for r in rows:
    out.append(f"- {r['row']}: " + ", ".join(f"{c['seconds']:.0f} s (step {c['step']}): {c['val_loss']:.3f}" for c in r["val_curve"]))
by = {r["row"]: r for r in rows}
if "phase_async" in by and "phase_async_fast" in by:
    fast = [2, 3]
    with_ = {x["island"]: x["tokens_per_second"] for x in by["phase_async"]["islands"]}
    without = {x["island"]: x["tokens_per_second"] for x in by["phase_async_fast"]["islands"]}
    ratios = ", ".join(f"island {i} {with_[i] / without[i]:.3f}" for i in fast if i in with_ and i in without)
    out += ["", f"Fast islands' tokens per second with the slow islands present / absent (phase_async): {ratios}"]
open(os.path.join(work, "hetero.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))
