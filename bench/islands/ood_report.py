"""usage: ood_report.py WORK [WORK2 ...]: bench/islands/ood.sh's rows (WORK/dp/run,
WORK/sync/run, WORK/async/n0: each summary.json) into WORK/ood.json and WORK/ood.md:
the final validation loss of each row's model on the training corpus (kernel-docs) and
on the other domains (fortunes, code), and each against data parallel's of the same
seed. Given several WORK directories (one per seed), the table gives the mean loss over
them and the paired differences to data parallel (mean, and each seed's)."""
import json, os, statistics, sys

works = sys.argv[1:]
ROWS = [("dp", "dp/run"), ("sync", "sync/run"), ("async", "async/n0")]


def losses(work, path):
    p = os.path.join(work, path, "summary.json")
    if not os.path.exists(p):
        return None
    s = json.load(open(p))
    return {"kernel-docs": s["final_val_loss"], **s.get("final_val_losses", {})}


machines = [open(os.path.join(w, "machine")).read().split("\n") for w in works]
runs = {w: {name: losses(w, path) for name, path in ROWS} for w in works}
sets = list(next(v for r in runs.values() for v in r.values() if v))
out = [f"CPU: {machines[0][0]}; commit {machines[0][2]}; " + "; ".join(f"{m[3]} (load at start {m[1]})" for m in machines), "",
       "| row | " + " | ".join(f"{k} (own)" if k == "kernel-docs" else k for k in sets) + " |", "|---|" + "---:|" * len(sets)]
table = []
for name, _ in ROWS:
    have = [w for w in works if runs[w][name]]
    if not have:
        continue
    cells, entry = [], {"row": name, "seeds": len(have), "loss_mean": {}, "vs_dp_percent": {}}
    for k in sets:
        vals = [runs[w][name][k] for w in have]
        entry["loss_mean"][k] = statistics.mean(vals)
        cell = f"{statistics.mean(vals):.4f}"
        if name != "dp":
            rel = [(runs[w][name][k] / runs[w]["dp"][k] - 1) * 100 for w in have if runs[w]["dp"]]
            entry["vs_dp_percent"][k] = rel
            if rel:
                each = "" if len(rel) == 1 else " [" + ", ".join(f"{x:+.1f}" for x in rel) + "]"
                cell += f" ({statistics.mean(rel):+.1f}%{each})"
        cells.append(cell)
    table.append(entry)
    out.append(f"| {name} | " + " | ".join(cells) + " |")
json.dump({"machines": machines, "works": works, "rows": table, "runs": runs}, open(os.path.join(works[0], "ood.json"), "w"), indent=1)
open(os.path.join(works[0], "ood.md"), "w").write("\n".join(out) + "\n")
print("\n".join(out))
