#!/usr/bin/python3
"""Collects the rows of bench/diloco/run.sh into results.json, results.md and diloco.png.

usage: report.py WORK OUTDIR

Traffic conventions (stated again in the Markdown):
  * DiLoCo rows: inter-island bytes are atoll's counted bytes (summary.json
    inter_island_bytes, one number per rank); "total" sums them over all ranks.
  * Data parallel rows (K ranks, DDP, no islands): the cross-island traffic is the
    gradient all-reduce, i.e. summary.json intra_island_bytes of the DDP run (each
    rank seen as its own island); "total" again sums over ranks.
  * bytes ratio = DP(K) total / row total, with DP(K) the data-parallel run with as
    many ranks as the row has islands.
  * WAN time: DiLoCo rows report atoll's estimated_seconds_over_wan (slowest rank's
    measured compute seconds + modelled exposed link seconds). For DP rows the same
    link model (2 x latency + bytes x 8 / bandwidth per exchange, as in
    src/parallel/diloco.c) is charged for every step's all-reduce, without overlap,
    plus the measured step seconds.
"""
import json
import os
import sys

WAN_GBPS, WAN_LATENCY_MS = 1.0, 50.0
SUP_LABELS = {
    "sup_single_quarter": "single island, 1/4 of the tokens (= one island's share in K=4)",
    "sup_k4_h1_avg": "K=4, H=1, outer SGD lr 1 momentum 0 (average every step; inner AdamW per island)",
    "sup_k4_h100_avg": "K=4, H=100, outer SGD lr 1 momentum 0 (plain periodic averaging)",
    "sup_dp4_lr1e-3": "data parallel, 4 ranks, inner lr 1e-3",
    "sup_k4_h100_lr1e-3": "DiLoCo K=4, H=100, inner lr 1e-3",
    "sup_dp4_long": "data parallel, 4 ranks, 2x tokens (1000 steps)",
    "sup_k4_h100_long": "DiLoCo K=4, H=100, 2x tokens (1000 steps)",
}


def load_row(work, name):
    d = os.path.join(work, "rows", name)
    s = json.load(open(os.path.join(d, "run", "summary.json")))
    metrics = [json.loads(l) for l in open(os.path.join(d, "run", "metrics.jsonl")) if l.strip()]
    wall = float(open(os.path.join(d, "wall_s")).read()) if os.path.exists(os.path.join(d, "wall_s")) else None
    cmd = open(os.path.join(d, "cmd")).read().strip().split(" ")
    if len(cmd[0]) == 64:  # the atoll binary's sha256, then ranks, then the command
        cmd = cmd[1:]
    np_, cmd = cmd[0], " ".join(cmd[1:])
    cmd = cmd if np_ == "1" else f"mpirun -q --oversubscribe -np {np_} {cmd}"
    return s, metrics, wall, cmd


def describe(name, cfg, ranks):
    K = cfg["islands"]
    if K == 1:
        return ("single island", 1) if ranks == 1 else (f"data parallel, {ranks} ranks (DDP, {ranks}x batch)", ranks)
    txt = f"DiLoCo K={K}, H={cfg['sync-every']}"
    if cfg["fragments"] > 1:
        txt = f"streaming DiLoCo K={K}, H={cfg['sync-every']}, {cfg['fragments']} fragments, overlap {cfg['overlap']}"
    if cfg["outer-dtype"] != "fp32":
        txt += f", {cfg['outer-dtype']}"
    txt += ", non-i.i.d." if cfg["island-data"] == "files" else ", i.i.d."
    return txt, K


def main():
    work, outdir = sys.argv[1], sys.argv[2]
    meta = json.load(open(os.path.join(work, "meta.json")))
    refs = {}
    for line in open(os.path.join(work, "rows.txt")):
        parts = line.split()
        if parts:
            refs[parts[0]] = parts[1] if len(parts) > 1 else None
    order = [n for n in refs if os.path.exists(os.path.join(work, "rows", n, "run", "summary.json"))]

    rows = []
    for n in order:
        s, metrics, wall, cmd = load_row(work, n)
        cfg = s["config"]
        ranks = s["world_size"]
        what, K = describe(n, cfg, ranks)
        if cfg["seed"] != "1337":
            what += f", seed {cfg['seed']}"
        if n in SUP_LABELS:
            what = SUP_LABELS[n]
        tokens_per_step = s["tokens_per_step"]
        step_seconds = [tokens_per_step / m["tokens_per_s"] for m in metrics if m.get("tokens_per_s")]
        curve = [[m["step"] * tokens_per_step, m["val_loss"]] for m in metrics if "val_loss" in m]
        r = {
            "name": n, "what": what, "ranks": ranks, "islands": cfg["islands"], "K": K,
            "H": cfg["sync-every"] if cfg["islands"] > 1 else None,
            "fragments": cfg["fragments"] if cfg["islands"] > 1 else None,
            "overlap": cfg["overlap"] if cfg["islands"] > 1 else None,
            "outer_dtype": cfg["outer-dtype"] if cfg["islands"] > 1 else None,
            "island_data": cfg["island-data"] if cfg["islands"] > 1 else None,
            "steps": s["steps"], "batch_per_rank": cfg["batch"], "seq": cfg["seq"] or cfg["context"],
            "tokens_total": s["steps"] * tokens_per_step,
            "params": s["params"],
            "final_val_loss": s["final_val_loss"], "final_train_loss": s["final_train_loss"],
            "val_curve": curve, "wall_seconds": wall, "command": cmd,
            "supplementary": n.startswith("sup_"), "reference": refs.get(n),
        }
        if cfg["islands"] > 1:
            per_rank = s["inter_island_bytes"]
            r["outer_syncs"] = s["outer_syncs"]
            if s["outer_syncs"] == 1:
                r["what"] += " (one sync, at the end)"
            r["inter_island_bytes_per_rank"] = per_rank
            r["inter_island_bytes_total"] = sum(per_rank)
            r["bytes_per_sync_per_rank"] = max(per_rank) / s["outer_syncs"] if s["outer_syncs"] else 0
            r["wan_link_seconds"] = max(s["wan_exposed_seconds"])
            r["wan_link_seconds_all"] = max(s["wan_seconds"])
            r["compute_seconds"] = max(s["compute_seconds"])
            r["estimated_seconds_over_wan"] = s["estimated_seconds_over_wan"]
        elif ranks > 1:
            r["wan_link_seconds_all"] = None  # set below
            per_rank = s["intra_island_bytes"]
            per_step = max(s["bytes_sent_per_step_per_rank"])
            r["outer_syncs"] = s["steps"]  # one all-reduce per step
            r["inter_island_bytes_per_rank"] = per_rank
            r["inter_island_bytes_total"] = sum(per_rank)
            r["bytes_per_sync_per_rank"] = per_step
            link = s["steps"] * (2 * WAN_LATENCY_MS * 1e-3 + per_step * 8 / (WAN_GBPS * 1e9))
            r["wan_link_seconds"] = link
            r["wan_link_seconds_all"] = link
            r["compute_seconds"] = sum(step_seconds)
            r["estimated_seconds_over_wan"] = r["compute_seconds"] + link
            r["traffic_note"] = "DDP all-reduce bytes (intra_island_bytes of the K-rank DDP run)"
        else:
            r["outer_syncs"] = 0
            r["inter_island_bytes_total"] = 0
            r["compute_seconds"] = sum(step_seconds)
            r["estimated_seconds_over_wan"] = r["compute_seconds"]
            r["wan_link_seconds"] = 0.0
            r["wan_link_seconds_all"] = 0.0
        rows.append(r)

    by = {r["name"]: r for r in rows}
    for r in rows:
        ref = by.get(r["reference"] or f"dp{r['K'] if r['K'] > 1 else 4}")
        if not ref:
            continue
        r["dp_reference"] = ref["name"]
        r["loss_gap_vs_dp_pct"] = 100.0 * (r["final_val_loss"] - ref["final_val_loss"]) / ref["final_val_loss"]
        if r["inter_island_bytes_total"] > 0 and r is not ref and r["islands"] > 1:
            r["bytes_ratio_vs_dp"] = ref["inter_island_bytes_total"] / r["inter_island_bytes_total"]
            r["peak_ratio_vs_dp"] = ref["bytes_per_sync_per_rank"] / r["bytes_per_sync_per_rank"]

    targets = []
    def target(row, max_gap, min_ratio, label):
        r = by.get(row)
        if not r:
            return
        ok_gap = r["loss_gap_vs_dp_pct"] <= max_gap
        ok_bytes = r["bytes_ratio_vs_dp"] >= min_ratio
        targets.append({"target": label, "row": row, "loss_gap_pct": r["loss_gap_vs_dp_pct"],
                        "bytes_ratio": r["bytes_ratio_vs_dp"], "loss_met": ok_gap, "bytes_met": ok_bytes,
                        "met": ok_gap and ok_bytes})
    target("k4_h100", 2.0, 100.0, "DiLoCo K=4, H=100: within 2% of DP, >= 100x fewer bytes")
    target("k4_h100_noniid", 2.0, 100.0, "same, non-i.i.d. islands")
    target("k4_h100_stream_fp4", 3.0, 1000.0, "streaming fp4: at most 3% worse, >= 1000x fewer bytes")
    target("k4_h100_stream_fp4_noniid", 3.0, 1000.0, "same, non-i.i.d. islands")
    target("k4_h250_stream_fp4", 3.0, 1000.0, "streaming fp4 at H=250 (extra row)")

    out = {"meta": meta, "wan_model": {"gbps": WAN_GBPS, "latency_ms": WAN_LATENCY_MS},
           "conventions": __doc__.split("Traffic conventions (stated again in the Markdown):")[1].strip(),
           "rows": rows, "targets": targets}
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")

    md = table(rows, targets)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(md)
    print(md)
    plot(rows, os.path.join(outdir, "diloco.png"))


def fmt_bytes(b):
    if b is None or b == 0:
        return "0"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= k:
            return f"{b / k:.3g} {unit}"
    return f"{b:.0f} B"


def table(all_rows, targets):
    L = []
    for sup in (False, True):
        rows = [r for r in all_rows if r["supplementary"] == sup]
        if sup and rows:
            L.append("")
            L.append("Supplementary rows (why the gap; see the labels for what differs):")
            L.append("")
        table_rows(L, rows)
    L.append("")
    L.append("| target | row | loss gap | bytes ratio | met? |")
    L.append("|---|---|---:|---:|---|")
    for t in targets:
        missed = [x for x, ok in (("loss", t["loss_met"]), ("bytes", t["bytes_met"])) if not ok]
        verdict = "yes" if t["met"] else "no (" + " and ".join(missed) + " missed" + (
            "; bytes met" if t["bytes_met"] else "") + ")"
        L.append(f"| {t['target']} | {t['row']} | {t['loss_gap_pct']:+.2f}% | {t['bytes_ratio']:.0f}x | {verdict} |")
    return "\n".join(L) + "\n"


def table_rows(L, rows):
    L.append("| row | ranks | steps | syncs | final val loss | gap vs DP | inter-island bytes (total, all ranks) | per rank | bytes per sync per rank | ratio vs DP (total) | ratio vs DP (per sync) | link s over WAN (exposed / all) | est. s over WAN |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        gap = f"{r['loss_gap_vs_dp_pct']:+.2f}% ({r['dp_reference']})" if "loss_gap_vs_dp_pct" in r else ""
        is_dp = r["islands"] == 1 and r["ranks"] > 1
        if is_dp:
            gap = "reference"
        if r["K"] == 1 and r["ranks"] == 1:
            gap = gap.replace("(dp4)", "(vs dp4)")
        ratio = f"{r['bytes_ratio_vs_dp']:.0f}x" if "bytes_ratio_vs_dp" in r else ("1x" if is_dp else "n/a")
        peak = f"{r['peak_ratio_vs_dp']:.1f}x" if "peak_ratio_vs_dp" in r else ("1x" if is_dp else "n/a")
        per_rank = fmt_bytes(max(r["inter_island_bytes_per_rank"])) if "inter_island_bytes_per_rank" in r else "0"
        per_sync = fmt_bytes(r.get("bytes_per_sync_per_rank", 0))
        L.append(f"| {r['what']} | {r['ranks']} | {r['steps']} | {r['outer_syncs']} | {r['final_val_loss']:.4f} | {gap} | "
                 f"{fmt_bytes(r['inter_island_bytes_total'])} | {per_rank} | {per_sync} | {ratio} | {peak} | "
                 f"{r['wan_link_seconds']:.1f} / {r['wan_link_seconds_all']:.1f} | {r['estimated_seconds_over_wan']:.0f} |")


def plot(rows, path):
    rows = [r for r in rows if not r["supplementary"]]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 6.2))
    colors = {2: "tab:blue", 4: "tab:orange"}
    single = next((r for r in rows if r["name"] == "single"), None)
    if single:
        ax.axhline(single["final_val_loss"], color="gray", ls="--", lw=1, label="single island (no traffic)")
    for r in rows:
        if r["inter_island_bytes_total"] <= 0:
            continue
        K = r["K"]
        c = colors.get(K, "k")
        seed2 = r["name"].endswith("_seed2")
        if r["name"].startswith("dp"):
            ax.scatter(r["inter_island_bytes_total"], r["final_val_loss"], marker="*", s=260, color=c,
                       edgecolor="k", zorder=3, alpha=0.5 if seed2 else 1,
                       label=f"data parallel, {K} ranks" + (", seed 2" if seed2 else ""))
            continue
        stream = (r["fragments"] or 1) > 1
        marker = "^" if stream else ("s" if r["outer_dtype"] != "fp32" else "o")
        noniid = r["island_data"] == "files"
        ax.scatter(r["inter_island_bytes_total"], r["final_val_loss"], marker=marker, s=80,
                   facecolor="none" if noniid else c, edgecolor=c, linewidth=2, zorder=3)
        label = f"H={r['H']}" + (" str.fp4" if stream else (" fp4" if r["outer_dtype"] != "fp32" else "")) + (" non-iid" if noniid else "") + (" seed 2" if seed2 else "")
        dy = -20 if seed2 else (-11 if noniid else 4)
        left = K == 2  # K=2 labels on the left of their points, K=4 on the right
        ax.annotate(label, (r["inter_island_bytes_total"], r["final_val_loss"]), textcoords="offset points",
                    xytext=(-7 if left else 7, dy), ha="right" if left else "left", fontsize=8, color=c)
    # legend entries for the marker kinds
    from matplotlib.lines import Line2D
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], marker="o", ls="", color="tab:blue", label="DiLoCo K=2 (fp32)"),
                Line2D([], [], marker="o", ls="", color="tab:orange", label="DiLoCo K=4 (fp32)"),
                Line2D([], [], marker="s", ls="", color="k", label="fp4 outer gradient"),
                Line2D([], [], marker="^", ls="", color="k", label="streaming, 4 fragments, fp4"),
                Line2D([], [], marker="o", ls="", markerfacecolor="none", color="k", label="hollow: non-i.i.d. islands")]
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    lo_y = min(r["final_val_loss"] for r in rows)
    hi_y = max(r["final_val_loss"] for r in rows)
    ax.set_ylim(lo_y - 0.05, hi_y + 0.08)
    ax.set_xscale("log")
    ax.set_xlabel("inter-island bytes, total over all ranks (DP: its all-reduce)")
    ax.set_ylabel("final validation loss (global model)")
    ax.set_title("Final validation loss vs cross-island traffic (equal tokens per row)")
    ax.grid(True, which="both", alpha=0.3)

    show = [r for r in rows if (r["K"] == 4 or r["name"] == "single") and not r["name"].endswith("_seed2")]
    styles = {"single": ("gray", "--"), "dp4": ("k", "-")}
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
               "tab:olive", "tab:cyan", "navy", "magenta"]
    k4 = [r for r in show if r["name"] not in styles]
    for i, r in enumerate(show):
        xs = [p[0] / 1e6 for p in r["val_curve"]]
        ys = [p[1] for p in r["val_curve"]]
        if r["name"] in styles:
            c, ls = styles[r["name"]]
            lw = 2.5
        else:
            j = k4.index(r)
            c, ls, lw = palette[j % len(palette)], (":" if r["island_data"] == "files" else "-"), 1.6
        label = r["what"].replace("DiLoCo ", "").replace("streaming", "str.")
        bx.plot(xs, ys, color=c, ls=ls, lw=lw, marker=".", label=label)
    lo = min(min(p[1] for p in r["val_curve"]) for r in show)
    bx.set_ylim(lo - 0.05, lo + 0.9)
    bx.set_xlabel("training tokens processed, all islands (millions)")
    bx.set_ylabel("validation loss (global model)")
    bx.set_title("Validation loss during training: K=4 rows, DP 4 ranks, single island")
    bx.grid(True, alpha=0.3)
    bx.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
