#!/usr/bin/python3
"""Collects the runs of bench/mp/run.sh, asks `atoll plan` for the same layouts, and
writes results.json and results.md (the tables of README.md).

usage: report.py WORK OUTDIR

The prediction is `atoll plan --calibrate SUMMARY` (src/plan/calibrate.c): it reads
the run's model, layout (dp x tp x pp and virtual_stages = interleave from summary.json
"layout", ZeRO stage from "shard", micro-batch = config "batch", micro-batches per step
= "microbatches" or "accum"), puts all ranks on one node (--gpus-per-node = world), one
thread per rank (config "threads"), fp32, no recomputation, and tp_regather 0 (atoll
keeps the gathered inputs of the column-parallel products). The cpu peak and
elementwise rate given to it are the medians of `atoll plan --measure --threads 1`
taken before and after the runs (--cpu-gflops, --set elem_bw=). The equivalent
explicit `atoll plan` command is recorded per row and checked to give the same step.

Two predictions per row:
  plan       atoll plan --calibrate: ranks that oversubscribe the machine's cores get
             their share of them, cores / (ranks x threads) = 2/4 here (the calibration
             scales the cpu peak and elementwise rate by it);
  a core     the same layout planned with a whole measured core per rank (the plain
             `atoll plan` command, as for devices that do not share), for comparison.
"""
import json
import os
import statistics
import subprocess
import sys

MIB = 1024.0 * 1024.0
MB = 1e6

LABELS = {
    "dp4": "DP4 (ZeRO-0)",
    "dp4_zero3": "DP4 ZeRO-3",
    "pp4_1f1b": "PP4 1F1B, M=8",
    "pp4_gpipe": "PP4 GPipe, M=8",
    "tp2_pp2": "TP2 x PP2, M=8",
    "tp2_pp2_sp": "TP2 x PP2 + SP, M=8",
    "dp2_tp2": "DP2 x TP2",
    "dp2_pp2": "DP2 x PP2, M=4",
    "h8_dp4": "DP4 (ZeRO-0)",
    "h8_tp4": "TP4",
    "h8_tp4_sp": "TP4 + SP",
    "deep_dp4": "DP4 (ZeRO-0)",
    "deep_pp4_1f1b": "PP4 1F1B, M=8",
    "deep_pp4_v3": "PP4 1F1B interleaved V=3, M=8",
    "deep_tp2_pp2": "TP2 x PP2, M=8",
    "floor": "floor (L=1, C=8, DP4)",
}
GROUPS = [
    ("L=6, C=384, H=6 (10.8M parameters)", ["dp4", "dp4_zero3", "pp4_1f1b", "pp4_gpipe", "tp2_pp2", "tp2_pp2_sp", "dp2_tp2", "dp2_pp2"]),
    ("L=6, C=384, H=8 (same weights; --tp 4 needs heads divisible by 4)", ["h8_dp4", "h8_tp4", "h8_tp4_sp"]),
    ("L=12, C=256, H=4 (9.6M parameters, deeper)", ["deep_dp4", "deep_pp4_1f1b", "deep_pp4_v3", "deep_tp2_pp2"]),
]


def load(path):
    with open(path) as f:
        return json.load(f)


def cpu_entry(work):
    peaks, elems, notes = [], [], []
    for when in ("before", "after"):
        for i in (1, 2, 3):
            p = os.path.join(work, "cpu_%s_%d.json" % (when, i))
            if not os.path.exists(p):
                continue
            j = load(p)
            peaks.append(j["cluster"]["peak_flops"])
            elems.append(j["assumptions"]["elem_bw"]["value"])
            notes.append(j["cpu"])
    return {
        "sgemm_gflops": statistics.median(peaks) / 1e9,
        "elem_gbps": statistics.median(elems),
        "measurements": notes,
    }


def calibrate(atoll, summary_path, gflops, elem):
    cmd = [atoll, "plan", "--calibrate", summary_path, "--cpu-gflops", "%.4f" % gflops,
           "--set", "elem_bw=%.4f" % elem, "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return cmd, json.loads(out)


def explicit_plan(atoll, s, gflops, elem, regather):
    """The same layout as a plain `atoll plan` command (what --calibrate does inside)."""
    c, lay = s["config"], s["layout"]
    dp, tp, pp = lay["dp"], lay["tp"], lay["pp"]
    world = s["world_size"]
    cmd = [atoll, "plan", "--arch", "gpt2", "--layers", c["layers"], "--dim", c["dim"], "--heads", c["heads"],
           "--vocab", c["vocab"], "--context", c["context"], "--seq", c["seq"] or c["context"],
           "--accel", "cpu", "--gpus", world, "--gpus-per-node", world, "--precision", "fp32",
           "--dp", dp, "--tp", tp, "--pp", pp, "--cp", 1, "--zero", s["shard"] if dp > 1 else 0,
           "--microbatch", c["batch"], "--interleave", lay.get("virtual_stages", 1), "--recompute", "none",
           "--batch", int(s["global_batch_sequences"]), "--threads", c["threads"],
           "--cpu-gflops", "%.4f" % gflops, "--set", "elem_bw=%.4f" % elem, "--set", "tp_regather=%d" % regather,
           "--json"]
    cmd = [str(x) for x in cmd]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return cmd, json.loads(out)


def summarize_plan(j):
    L = j["layout"] if "layout" in j else j["layouts"][0]
    by = L["bytes_per_gpu_per_step"]
    mem = L["memory"]
    return {
        "step_seconds": L["step_seconds"],
        "memory_per_device_bytes": L["memory_per_gpu_bytes"],
        "memory_without_reserved_bytes": L["memory_per_gpu_bytes"] - mem["reserved"],
        "memory": mem,
        "micro_batches": L["micro_batches"],
        "bubble": L["bubble"],
        "bytes": {"dp": by["dp"]["bytes"], "tp": by["tp"]["bytes"], "pp": by["pp"]["bytes"]},
        "comm_seconds": {k: by[k]["seconds"] for k in ("dp", "tp", "pp")},
        "time_seconds": L["time_seconds"],
    }


def measured(work, name, rounds):
    runs = []
    for r in range(1, rounds + 1):
        p = os.path.join(work, "rows", name, "r%d" % r, "run", "summary.json")
        if os.path.exists(p):
            runs.append(load(p))
    if not runs:
        raise SystemExit("report.py: no summary.json for row %s" % name)
    s = runs[0]
    meds = [x["median_step_seconds"] for x in runs]
    loads = []
    for r in range(1, len(runs) + 1):
        lp = os.path.join(work, "rows", name, "r%d" % r, "load")
        loads.append(float(open(lp).read()) if os.path.exists(lp) else None)
    rss = [max(x["train_peak_rss_bytes_per_rank"]) for x in runs]
    rss_min = [min(x["train_peak_rss_bytes_per_rank"]) for x in runs]
    axes = {a: max(max(x["bytes_per_step_per_rank_by_axis"][a]) for x in runs)
            for a in ("data", "tensor", "pipeline", "embedding_tie")}
    m = {
        "step_seconds": statistics.median(meds),
        "step_seconds_rounds": meds,
        "load_average_at_start_rounds": loads,
        "tokens_per_second": s["tokens_per_step"] / statistics.median(meds),
        "train_peak_rss_max_bytes": max(rss),
        "train_peak_rss_min_bytes": min(rss_min),
        "train_peak_rss_bytes_per_rank": s["train_peak_rss_bytes_per_rank"],
        "bytes_per_step_max_rank_by_axis": axes,
        "bytes_per_step_per_rank_by_axis": s["bytes_per_step_per_rank_by_axis"],
        "comm_wait_seconds_per_step_max_rank": statistics.median(
            [x["comm_wait_seconds"] / x["steps"] for x in runs]),
        "stage_parameters_per_rank": s["layout"]["stage_parameters_per_rank"],
        "layout": s["layout"],
        "global_batch_sequences": s["global_batch_sequences"],
        "params": s["params"],
        "weights_hash": [x["weights_hash"] for x in runs],
    }
    if "pipeline" in s:
        m["bubble_measured"] = statistics.median([x["pipeline"]["bubble_measured"] for x in runs])
        m["bubble_theory"] = s["pipeline"]["bubble_theory"]
        m["bubble_per_rank"] = s["pipeline"]["bubble_per_rank"]
    return s, m


def pp_col(m, p):
    """Pipeline bytes: the busiest rank, and in brackets rank 0 (the first stage, the
    end the planner models) when it differs, against the plan."""
    per = m["bytes_per_step_per_rank_by_axis"]["pipeline"]
    mx, first = max(per), per[0]
    if mx == 0 and p["bytes"]["pp"] == 0:
        return "-"
    meas = fmt_mb(mx) if abs(mx - first) < 1 else "%s (%s)" % (fmt_mb(mx), fmt_mb(first))
    return "%s / %s" % (meas, fmt_mb(p["bytes"]["pp"]))


def fmt_mb(b):
    return "%.1f" % (b / MB)


def ratio(p, m):
    return p / m if m else None


def fr(x):
    return "-" if x is None else "%.2f" % x


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    work, outdir = sys.argv[1], sys.argv[2]
    meta = load(os.path.join(work, "meta.json"))
    rounds = meta["rounds"]
    atoll = os.path.join(work, "atoll")
    cpu = cpu_entry(work)
    share = min(1.0, meta["cores"] / (meta["ranks"] * meta["threads_per_rank"]))
    names = [l.strip() for l in open(os.path.join(work, "rows.txt")) if l.strip()]
    rows = {}
    for name in names:
        s, m = measured(work, name, rounds)
        row = {"name": name, "label": LABELS.get(name, name), "measured": m,
               "command": open(os.path.join(work, "rows", name, "r1", "cmd")).read().split(" ", 1)[1].strip()}
        if name != "floor":
            summ = os.path.join(work, "rows", name, "r1", "run", "summary.json")
            cmd, j = calibrate(atoll, summ, cpu["sgemm_gflops"], cpu["elem_gbps"])
            p = summarize_plan(j)
            row["plan_command"] = " ".join(["atoll"] + cmd[1:])
            row["plan"] = p
            row["core_share"] = j.get("core_share", 1.0)
            # the same as a plain `atoll plan` command at the calibration's share of a core
            ecmd, je = explicit_plan(atoll, s, cpu["sgemm_gflops"] * share, cpu["elem_gbps"] * share, 0)
            pe = summarize_plan(je)
            # (1e-5: the explicit command passes the rates rounded to 4 decimals)
            if abs(pe["step_seconds"] / p["step_seconds"] - 1) > 1e-5 or pe["bytes"] != p["bytes"]:
                raise SystemExit("report.py: %s: atoll plan --calibrate and the explicit plan disagree: %r vs %r"
                                 % (name, p["step_seconds"], pe["step_seconds"]))
            row["explicit_plan_command"] = " ".join(["atoll"] + ecmd[1:-1])
            # a whole core per rank (devices that do not share), and with Megatron's re-gathers
            _, jw = explicit_plan(atoll, s, cpu["sgemm_gflops"], cpu["elem_gbps"], 0)
            pc = summarize_plan(jw)
            row["plan_whole_core"] = pc
            if s["layout"]["tp"] > 1:
                _, jm = explicit_plan(atoll, s, cpu["sgemm_gflops"] * share, cpu["elem_gbps"] * share, 1)
                row["plan_megatron_regather"] = summarize_plan(jm)
            row["ratio_step"] = p["step_seconds"] / m["step_seconds"]
            row["ratio_step_whole_core"] = pc["step_seconds"] / m["step_seconds"]
            mb = m["bytes_per_step_max_rank_by_axis"]
            row["ratio_bytes"] = {"dp": ratio(p["bytes"]["dp"], mb["data"]),
                                  "tp": ratio(p["bytes"]["tp"], mb["tensor"]),
                                  "pp": ratio(p["bytes"]["pp"], mb["pipeline"])}
        rows[name] = row
    floor = rows["floor"]["measured"]["train_peak_rss_max_bytes"]
    for name, row in rows.items():
        if name == "floor":
            continue
        m = row["measured"]
        m["train_peak_rss_max_above_floor_bytes"] = m["train_peak_rss_max_bytes"] - floor
        row["ratio_memory_above_floor"] = row["plan"]["memory_without_reserved_bytes"] / m[
            "train_peak_rss_max_above_floor_bytes"]

    runtime = int(open(os.path.join(work, "runtime_s")).read()) if os.path.exists(os.path.join(work, "runtime_s")) else None
    res = {"meta": meta, "cpu_entry": cpu, "core_share": share, "runtime_seconds": runtime,
           "floor_train_peak_rss_bytes": floor,
           "rows": [rows[n] for n in names]}
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")

    md = []
    md.append("CPU entry: sgemm %.1f GFLOP/s, elementwise %.2f GB/s per rank (atoll plan --measure --threads 1, "
              "median of %d); plan: atoll plan --calibrate, which gives each rank its share of the cores (x %.2f: "
              "2 cores / 4 ranks); a core: the same layout with a whole core per rank."
              % (cpu["sgemm_gflops"], cpu["elem_gbps"], len(cpu["measurements"]), share))
    md.append("")
    loads = [x for n in names for x in rows[n]["measured"]["load_average_at_start_rounds"] if x is not None]
    md.append("Step time (s), 4 ranks x 1 thread on %d cores; measured = median over rounds of each run's median "
              "(range over rounds); ratio = predicted / measured. 1-minute load average as each run started: "
              "%s." % (meta["cores"], "%.1f to %.1f (median %.1f)" % (min(loads), max(loads), statistics.median(loads))
                       if loads else "not recorded"))
    md.append("")
    md.append("| model | layout | measured | plan | ratio | a core | ratio | tokens/s | comm wait/step | bubble meas / theory / plan |")
    md.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for title, group in GROUPS:
        for n in group:
            if n not in rows:
                continue
            r, m, p = rows[n], rows[n]["measured"], rows[n]["plan"]
            bub = "-"
            if "bubble_measured" in m:
                bub = "%.2f / %.3f / %.3f" % (m["bubble_measured"], m["bubble_theory"], p["bubble"])
            rr = m["step_seconds_rounds"]
            meas = "%.3f" % m["step_seconds"] if len(rr) < 2 else "%.3f (%.2f-%.2f)" % (m["step_seconds"], min(rr), max(rr))
            md.append("| %s | %s | %s | %.3f | %.2f | %.3f | %.2f | %.0f | %.3f | %s |" % (
                title.split(" (")[0], r["label"], meas, p["step_seconds"], r["ratio_step"],
                rows[n]["plan_whole_core"]["step_seconds"], r["ratio_step_whole_core"], m["tokens_per_second"],
                m["comm_wait_seconds_per_step_max_rank"], bub))
    md.append("")
    md.append("Memory per rank (MiB; measured = train_peak_rss, max / min over ranks; floor = %.0f MiB, the RSS "
              "of the same 4 ranks at L=1, C=8) and bytes sent per step by the busiest rank (MB, measured / plan; PP: in brackets "
              "rank 0, the first stage, which is the end the planner models):" % (floor / MIB))
    md.append("")
    md.append("| model | layout | RSS max / min | max - floor | plan (no reserve) | ratio | DP | TP | PP | tie |")
    md.append("|---|---|---|---:|---:|---:|---|---|---|---:|")
    for title, group in GROUPS:
        for n in group:
            if n not in rows:
                continue
            r, m, p = rows[n], rows[n]["measured"], rows[n]["plan"]
            a = m["bytes_per_step_max_rank_by_axis"]

            def ax(meas, pred):
                if meas == 0 and pred == 0:
                    return "-"
                return "%s / %s" % (fmt_mb(meas), fmt_mb(pred))

            md.append("| %s | %s | %.0f / %.0f | %.0f | %.0f | %.2f | %s | %s | %s | %s |" % (
                title.split(" (")[0], r["label"], m["train_peak_rss_max_bytes"] / MIB,
                m["train_peak_rss_min_bytes"] / MIB, m["train_peak_rss_max_above_floor_bytes"] / MIB,
                p["memory_without_reserved_bytes"] / MIB, r["ratio_memory_above_floor"],
                ax(a["data"], p["bytes"]["dp"]), ax(a["tensor"], p["bytes"]["tp"]),
                pp_col(m, p), fmt_mb(a["embedding_tie"]) if a["embedding_tie"] else "-"))
    md.append("")
    if runtime is not None:
        md.append("")
        md.append("Benchmark runtime: %d s (%d round(s) of %d steps per run)." % (runtime, rounds, meta["steps"]))
    text = "\n".join(md) + "\n"
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
