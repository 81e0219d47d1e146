#!/usr/bin/python3
"""Collects the rows of bench/diloco/run.sh (issue 15) into results.json, results.md
and diloco.png.

usage: report.py WORK OUTDIR

Conventions (stated again in the Markdown):
  * Rows are compared at equal steps (equal per-island compute): every K = 4 row,
    DP with 4 ranks (a 4x batch) and the single island take S steps of BATCH x SEQ
    tokens per island; a warm row's S - W DiLoCo steps follow the W steps of DP whose
    checkpoint it starts from. K = 2 rows take the same steps (half the tokens).
  * Loss gap = (row - reference DP row) / reference, final validation loss. The
    reference is the DP run of the same seed (whose checkpoint a warm row starts from).
  * DiLoCo bytes are atoll's counted inter_island_bytes (summary.json, per rank);
    "total" sums them over ranks. DP(K)'s cross-island bytes are its all-reduce:
    S steps x K ranks x 2 (K-1)/K x 4 B x params (a ring all-reduce), which for K = 4
    equals the dp4 row's counted intra_island_bytes (checked below).
  * bytes ratio = DP(K) over the whole run / the row's counted bytes. For a warm row
    that assumes its first W steps of DP ran inside one site; "ratio incl. DP phase"
    adds the W steps of DP all-reduce to the row's bytes, i.e. the warm-up also
    crossed the WAN.
"""
import json
import os
import re
import statistics
import sys

WAN_GBPS, WAN_LATENCY_MS = 1.0, 50.0


def load_row(work, name):
    d = os.path.join(work, "rows", name)
    s = json.load(open(os.path.join(d, "run", "summary.json")))
    metrics = [json.loads(l) for l in open(os.path.join(d, "run", "metrics.jsonl")) if l.strip()]
    wall = float(open(os.path.join(d, "wall_s")).read()) if os.path.exists(os.path.join(d, "wall_s")) else None
    key = open(os.path.join(d, "cmd")).read().strip().split(" ")
    sha, np_ = key[0], key[1]
    cmd = [x for x in key[2:] if not x.startswith("src=")]
    cmd = " ".join(cmd)
    cmd = f"nice -n 19 {cmd}" if np_ == "1" else f"nice -n 19 mpirun -q --oversubscribe -np {np_} {cmd}"
    return s, metrics, wall, cmd, sha


COMMON_BATCH = 8  # sequences per island step in meta.json's common flags (main() reads it)


# one-rank rows of the second round: the same tokens with another batch (the batch-scaling premise)
SINGLE_LABELS = {"single_b4k": "one rank, 4096-token steps, 1/4 of the steps (the tokens of `single`)",
                 "single_x4": "one rank, 1024-token steps, 4x the steps (the tokens of `dp4`)"}


def describe(name, cfg, ranks):
    K = cfg["islands"]
    seq = cfg["seq"] or cfg["context"]
    b = "" if cfg["batch"] == COMMON_BATCH else f", {cfg['batch'] * seq}-token steps per {'rank' if K == 1 else 'island'}"
    if name.startswith("tune_"):
        return f"single island, inner lr {cfg['lr']:.2g}", 1
    if K == 1:
        if re.sub(r"_lr[0-9.e-]+$", "", name) in SINGLE_LABELS:
            return SINGLE_LABELS[re.sub(r"_lr[0-9.e-]+$", "", name)], 1
        if ranks == 1:
            return "single island (1 rank, same steps)", 1
        txt = f"data parallel, {ranks} ranks ({ranks}x batch){b}"
        if cfg.get("init-from") and cfg.get("init-step"):
            txt += ", continued exactly from its own checkpoint"
        elif cfg.get("init-from"):
            txt += ", continued from its own 20% checkpoint with the warm rows' schedule"
        return txt, ranks
    txt = f"DiLoCo K={K}, H={cfg['sync-every']}"
    if cfg["fragments"] > 1:
        txt = f"streaming DiLoCo K={K}, H={cfg['sync-every']}, {cfg['fragments']} fragments, overlap {cfg['overlap']}"
    if cfg["outer-dtype"] != "fp32":
        txt += f", {cfg['outer-dtype']}"
    txt += f", outer lr {cfg['outer-lr']:.2g}{b}"
    if cfg["island-data"] == "files":
        txt += ", non-i.i.d. (topic quarters)" if cfg["data"].endswith("-quarters") else ", non-i.i.d. (round-robin files)"
    if cfg["island-data"] == "blocks":
        txt += ", non-i.i.d. (contiguous blocks of the path-sorted files)"
    txt += ", warm (DP 20%)" if cfg.get("init-from") else ", from scratch"
    return txt, K


def dp_bytes(K, steps, params):
    """Cross-island bytes of DP with K ranks over `steps` steps: ring all-reduce of fp32."""
    return steps * K * 2 * (K - 1) / K * 4 * params


def main():
    global COMMON_BATCH
    work, outdir = sys.argv[1], sys.argv[2]
    meta = json.load(open(os.path.join(work, "meta.json")))
    m = re.search(r"--batch (\d+)", meta.get("common_flags", ""))
    COMMON_BATCH = int(m.group(1)) if m else COMMON_BATCH
    refs = {}
    for line in open(os.path.join(work, "rows.txt")):
        parts = line.split()
        if parts:
            refs[parts[0]] = parts[1] if len(parts) > 1 else None
    # finished rows only: run.sh writes wall_s when a row's command succeeded (an
    # interrupted atoll also leaves a summary.json, at the step where it stopped)
    order = [n for n in refs if os.path.exists(os.path.join(work, "rows", n, "wall_s"))]

    rows = []
    for n in order:
        s, metrics, wall, cmd, sha = load_row(work, n)
        cfg = s["config"]
        ranks = s["world_size"]
        what, K = describe(n, cfg, ranks)
        # --init-step 1 (fifth round): the run goes on at its checkpoint's step; its metrics
        # and summary count steps from DP's step 0
        cont = bool(cfg.get("init-step"))
        if cfg.get("init-from") and K > 1:
            w = re.search(r"step_(\d+)$", cfg["init-from"])
            if w:
                total = s["steps"] if cont else int(w.group(1)) + s["steps"]
                what = what.replace("warm (DP 20%)", f"warm (DP {100 * int(w.group(1)) // total}%)")
            if cont:
                what += ", DP's schedule and seed continued (--init-step 1)"
        if cfg["seed"] not in ("1337", "1437"):
            what += f", seed {int(cfg['seed']) % 100}"
        # the third round: N x the steps (run.sh --long N); the fourth round's knobs follow the tag
        len_tag = re.search(r"_len(\d+)(?:$|_(?!to\d))", n)
        if len_tag:
            what += f", {len_tag.group(1)}x the steps"
        to_tag = re.search(r"_len(\d+)_to(\d+)$", n)  # its first steps again, stopped for the control's warm start
        if to_tag:
            what += f", {to_tag.group(1)}x the steps' schedule, stopped after step {to_tag.group(2)} (the control's warm start)"
        from_tag = re.search(r"_v5_from(\d+)_to(\d+)$", n)  # the sixth round's 25% split checkpoint
        if from_tag:
            what += f", the fifth round's binary, steps {int(from_tag.group(1)) + 1}..{from_tag.group(2)} (the 25% split's checkpoint)"
        v5_tag = re.search(r"_v5(?:_to(\d+))?$", n)  # the fifth round's binary (run.sh --round5)
        if v5_tag:
            what += ", the fifth round's binary" + (f", stopped after step {v5_tag.group(1)} (sanity check)" if v5_tag.group(1) else "")
        lr_tag = re.search(r"_lr([0-9.e-]+)$", n)
        if lr_tag and not n.startswith("tune_"):  # a row of another (peak) inner lr than the tuned one
            what += f", inner lr {lr_tag.group(1)}"
        init = cfg.get("init-from") or ""
        m = re.search(r"step_(\d+)$", init)
        offset = int(m.group(1)) if m else 0  # steps of DP before this row's step 0
        steps_here = s["steps"] - offset if cont else s["steps"]  # the steps this run took
        shift = 0 if cont else offset  # added to the row's own step numbers
        tps = s["tokens_per_step"]
        step_seconds = [tps / x["tokens_per_s"] for x in metrics if x.get("tokens_per_s")]
        r = {
            "name": n, "what": what, "ranks": ranks, "islands": cfg["islands"], "K": K,
            "H": cfg["sync-every"] if cfg["islands"] > 1 else None,
            "outer_lr": cfg["outer-lr"] if cfg["islands"] > 1 else None,
            "fragments": cfg["fragments"] if cfg["islands"] > 1 else None,
            "outer_dtype": cfg["outer-dtype"] if cfg["islands"] > 1 else None,
            "island_data": cfg["island-data"] if cfg["islands"] > 1 else None,
            "inner_lr": cfg["lr"], "seed": cfg["seed"],
            "warm_from": init or None, "warm_offset_steps": offset,
            "steps": steps_here, "steps_total": offset + steps_here, "init_step": cont,
            "batch_per_island": cfg["batch"] * (1 if cfg["islands"] > 1 else 1), "seq": cfg["seq"] or cfg["context"],
            "tokens_per_step": tps, "tokens_total_this_run": steps_here * tps,
            "params": s["params"],
            "final_val_loss": s["final_val_loss"], "final_train_loss": s["final_train_loss"],
            # the curve against the whole run's steps (a warm row's after its DP steps)
            "val_curve": [[shift + x["step"], x["val_loss"]] for x in metrics if "val_loss" in x],
            "train_curve": [[shift + x["step"], x["loss"]] for x in metrics if "loss" in x],
            "wall_seconds": wall, "command": cmd, "atoll_sha256": sha,
            "tuning": n.startswith("tune_"), "reference": refs.get(n),
        }
        if cfg["islands"] > 1:
            per_rank = s["inter_island_bytes"]
            r["outer_syncs"] = s["outer_syncs"]
            r["inter_island_bytes_per_rank"] = per_rank
            r["inter_island_bytes_total"] = sum(per_rank)
            r["bytes_per_sync_per_rank"] = max(per_rank) / s["outer_syncs"] if s["outer_syncs"] else 0
            r["wan_link_seconds"] = max(s["wan_exposed_seconds"])
            r["wan_link_seconds_all"] = max(s["wan_seconds"])
        elif ranks > 1:
            per_rank = s["intra_island_bytes"]
            r["outer_syncs"] = s["steps"]
            r["inter_island_bytes_per_rank"] = per_rank
            r["inter_island_bytes_total"] = sum(per_rank)
            r["bytes_per_sync_per_rank"] = max(s["bytes_sent_per_step_per_rank"])
            link = s["steps"] * (2 * WAN_LATENCY_MS * 1e-3 + r["bytes_per_sync_per_rank"] * 8 / (WAN_GBPS * 1e9))
            r["wan_link_seconds"] = r["wan_link_seconds_all"] = link
            r["traffic_note"] = "DDP all-reduce bytes (intra_island_bytes of the K-rank DDP run)"
        else:
            r["outer_syncs"] = 0
            r["inter_island_bytes_total"] = 0
            r["wan_link_seconds"] = r["wan_link_seconds_all"] = 0.0
        r["compute_seconds_sum_of_steps"] = sum(step_seconds)
        rows.append(r)

    by = {r["name"]: r for r in rows}
    # a warm row's curve starts where its DP source was at the checkpoint's step
    for r in rows:
        src = by.get(r["reference"] or "")
        if r["warm_offset_steps"] and src and not src["warm_from"]:
            at = dict((s, v) for s, v in src["val_curve"]).get(r["warm_offset_steps"])
            if at is not None:
                r["val_curve"].insert(0, [r["warm_offset_steps"], at])
    checks = []
    for name in ["dp4", "dp4_b4k"] + sorted(n for n in by if re.fullmatch(r"dp4_len\d+", n)):
        dp = by.get(name)
        if dp:
            want = dp_bytes(4, dp["steps"], dp["params"])
            checks.append(f"{name} counted all-reduce bytes {dp['inter_island_bytes_total']:.0f}, formula {want:.0f}")
    for n in sorted(by):  # a DP run stopped early must repeat its long run's first steps bit for bit
        m = re.fullmatch(r"(dp4_len\d+)_to\d+", n)
        if m and m.group(1) in by:
            a, b = dict(by[n]["val_curve"]), dict(by[m.group(1)]["val_curve"])
            same = [s for s in a if s in b]
            checks.append(f"{n} repeats {m.group(1)}'s validation losses at steps {min(same)}..{max(same)} bit for bit: "
                          f"{all(a[s] == b[s] for s in same)}")
    for n in sorted(by):  # the fifth round's new binary against the old one's DP run, step for step
        m = re.fullmatch(r"(dp4_len\d+)_v5_to(\d+)", n)
        if m and m.group(1) in by:
            for kind in ("train", "val"):
                a, b = dict(by[n][kind + "_curve"]), dict(by[m.group(1)][kind + "_curve"])
                same = sorted(st for st in a if st in b)
                diff = max(abs(a[st] - b[st]) for st in same)
                checks.append(f"{n} (new binary) against {m.group(1)}: {kind} losses at steps {same[0]}..{same[-1]} "
                              f"bit for bit: {all(a[st] == b[st] for st in same)} (largest difference {diff:.2g})")
    for n in sorted(by):  # the sixth round: DP continued exactly (--init-step 1) from its checkpoint, new binary
        m = re.fullmatch(r"(dp4_len\d+)_v5_from(\d+)_to(\d+)", n)
        if m and m.group(1) in by:
            for kind in ("train", "val"):
                a, b = dict(by[n][kind + "_curve"]), dict(by[m.group(1)][kind + "_curve"])
                same = sorted(st for st in a if st in b and st > int(m.group(2)))
                diff = max(abs(a[st] - b[st]) for st in same)
                checks.append(f"{n} (new binary, --init-step 1) against {m.group(1)}: {kind} losses at steps {same[0]}..{same[-1]} "
                              f"bit for bit: {all(a[st] == b[st] for st in same)} (largest difference {diff:.2g}, "
                              f"{sum(a[st] != b[st] for st in same)} of {len(same)} differ)")
    for r in rows:
        ref = by.get(r["reference"] or "dp4")
        if ref and r is not ref:
            r["dp_reference"] = ref["name"]
            r["loss_gap_vs_dp_pct"] = 100.0 * (r["final_val_loss"] - ref["final_val_loss"]) / ref["final_val_loss"]
        if r["islands"] > 1 and r["inter_island_bytes_total"] > 0:
            K, total_steps = r["islands"], r["steps_total"]
            dp_all = dp_bytes(K, total_steps, r["params"])
            r["dp_bytes_same_run"] = dp_all
            r["bytes_ratio_vs_dp"] = dp_all / r["inter_island_bytes_total"]
            dp_step_rank = 2 * (K - 1) / K * 4 * r["params"]
            r["peak_ratio_vs_dp"] = dp_step_rank / r["bytes_per_sync_per_rank"]
            if r["warm_offset_steps"]:
                # the DP phase's all-reduce, with as many ranks as the DP run it came from
                src = by.get(r["reference"] or "dp4")
                phase = dp_bytes(src["ranks"] if src else 4, r["warm_offset_steps"], r["params"])
                r["bytes_ratio_incl_dp_phase"] = dp_all / (r["inter_island_bytes_total"] + phase)

    # seeds: the headline pair at every seed
    seeds = []
    for dp_name, k_name in (("dp4", "k4_h100_warm"), ("dp4_seed2", "k4_h100_warm_seed2"), ("dp4_seed3", "k4_h100_warm_seed3")):
        if dp_name in by:
            seeds.append({"dp": dp_name, "dp_loss": by[dp_name]["final_val_loss"],
                          "k4": k_name if k_name in by else None,
                          "k4_loss": by[k_name]["final_val_loss"] if k_name in by else None,
                          "gap_pct": by[k_name]["loss_gap_vs_dp_pct"] if k_name in by else None})

    out = {"meta": meta, "wan_model": {"gbps": WAN_GBPS, "latency_ms": WAN_LATENCY_MS},
           "conventions": __doc__.split("Conventions (stated again in the Markdown):")[1].strip(),
           "checks": checks, "rows": rows, "targets": targets(by), "seeds": seeds,
           "gap_over_run": gap_curves(by), "outer_lr_by_h": outer_lr_grid(by), "island_batch": island_batch(by),
           "batch_scaling": batch_scaling(by), "run_length": run_length(by), "round4": round4(by),
           "round5": round5(by), "round6": round6(by)}
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    md = markdown(rows, out)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(md)
    print(md)
    plot(by, out, os.path.join(outdir, "diloco.png"))


def targets(by):
    T = []

    def loss(n):
        return by[n]["final_val_loss"] if n in by else None

    def order(label, names, note=""):
        have = [n for n in names if n in by]
        if len(have) < 2:
            return
        vals = [loss(n) for n in have]
        ok = all(a < b for a, b in zip(vals, vals[1:]))
        T.append({"target": label, "rows": have, "values": vals, "met": ok, "note": note})

    def margin(label, better, worse, pct):
        if better in by and worse in by:
            d = 100.0 * (loss(worse) - loss(better)) / loss(worse)
            T.append({"target": label, "rows": [better, worse], "values": [loss(better), loss(worse)],
                      "margin_pct": d, "met": d >= pct})

    margin("K=4, H=100 from scratch beats one island at the same steps by >= 2%", "k4_h100", "single", 2.0)
    margin("K=4, H=100 warm beats one island at the same steps by >= 2%", "k4_h100_warm", "single", 2.0)
    order("smaller H is better (warm K=4, outer lr 0.7): H=25 < 100 < 250",
          ["k4_h25_warm", "k4_h100_warm", "k4_h250_warm"])
    margin("more islands help at fixed steps: K=4 < K=2 (warm, H=100)", "k4_h100_warm", "k2_h100_warm", 0.0)
    if "k4_h100_warm_noniid" in by and "k4_h100_warm" in by:
        d = 100.0 * (loss("k4_h100_warm_noniid") - loss("k4_h100_warm")) / loss("k4_h100_warm")
        T.append({"target": "non-i.i.d. (topic quarters) costs little: <= 1% above i.i.d.",
                  "rows": ["k4_h100_warm_noniid", "k4_h100_warm"], "margin_pct": d, "met": d <= 1.0})
    for n, gap, ratio, label in (("k4_h100_warm", 2.0, 100.0, "warm K=4, H=100: within 2% of DP, >= 100x fewer bytes"),
                                 ("k4_h100_warm_stream_fp4", 3.0, 1000.0, "warm streaming fp4: within 3% of DP, >= 1000x fewer bytes"),
                                 ("k4_h250_warm_stream_fp4", 3.0, 1000.0, "warm streaming fp4 at H=250 (extension)")) + tuple(
            # the third and fourth rounds: the same targets at 3x the steps (H = 25 rows: another knob than H = 100)
            (n, 3.0 if "stream" in n else 2.0, 1000.0 if "stream" in n else 100.0,
             f"long (3x steps) {'streaming fp4' if 'stream' in n else 'warm K=4'}: H={by[n]['H']}, outer lr {by[n]['outer_lr']:.2g}"
             + (f", {by[n]['outer_dtype']}" if by[n]["outer_dtype"] != "fp32" and "stream" not in n else "")
             + f", split at step {by[n]['warm_offset_steps']}"
             + (", DP's schedule continued" if by[n]["init_step"] else "")
             + (f", island data {by[n]['island_data']}" if by[n]["island_data"] != "iid" else "")
             + (f", seed {int(by[n]['seed']) % 100}" if by[n]["seed"] not in ("1337", "1437") else "") + f"; within {3 if 'stream' in n else 2}% of DP, >= {1000 if 'stream' in n else 100}x fewer bytes")
            # (fifth and sixth rounds: the rows continuing DP's schedule, k4_hH_contS_lenN)
            for n in sorted(by) if re.fullmatch(r"k4_h\d+_(?:warm|cont)\d*_len\d+(_.+)?", n) and not re.search(r"_to\d+$", n)):
        r = by.get(n)
        if r and "loss_gap_vs_dp_pct" in r:
            T.append({"target": label, "rows": [n], "loss_gap_pct": r["loss_gap_vs_dp_pct"],
                      "bytes_ratio": r["bytes_ratio_vs_dp"], "bytes_ratio_incl_dp_phase": r.get("bytes_ratio_incl_dp_phase"),
                      "loss_met": r["loss_gap_vs_dp_pct"] <= gap, "bytes_met": r["bytes_ratio_vs_dp"] >= ratio,
                      "met": r["loss_gap_vs_dp_pct"] <= gap and r["bytes_ratio_vs_dp"] >= ratio})
    return T


def outer_lr_grid(by):
    """Warm K = 4 rows (1024-token island steps, i.i.d., fp32, one fragment) by H and
    outer lr: final validation loss per seed; the best outer lr of each H and seed."""
    G = {}
    for r in by.values():
        if (r["islands"] == 4 and r["warm_offset_steps"] and r["fragments"] == 1 and r["outer_dtype"] == "fp32"
                and r["island_data"] == "iid" and r["batch_per_island"] == COMMON_BATCH
                and r["name"].startswith(f"k4_h{r['H']}_warm") and "warm40" not in r["name"] and "_len" not in r["name"]):
            seed = str(int(r["seed"]) % 100 if r["seed"] not in ("1337", "1437") else 1)
            G.setdefault(str(r["H"]), {}).setdefault(seed, {})[f"{r['outer_lr']:.3g}"] = [r["name"], r["final_val_loss"]]
    out = []
    for H in sorted(G, key=int):
        for seed in sorted(G[H]):
            cells = G[H][seed]
            best = min(cells, key=lambda o: cells[o][1])
            out.append({"H": int(H), "seed": int(seed), "losses": {o: v[1] for o, v in cells.items()},
                        "rows": {o: v[0] for o, v in cells.items()}, "best_outer_lr": float(best) if len(cells) > 1 else None})
    return out


def island_batch(by):
    """The same tokens with 4x the island batch and 1/4 of the steps: each pair is
    (1024-token islands, 4096-token islands) with the same syncs and bytes."""
    pairs = [("dp4", "dp4_b4k", "DP, 4 ranks (4x the island batch)"),
             ("k4_h100_warm", "k4_h25_warm_b4k", "warm K=4, 8 syncs (100k tokens per island between syncs)"),
             ("k4_h250_warm", "k4_h50_warm_b4k", "warm K=4, 4 syncs (b1k: H=250; b4k: H=50, 200k tokens per island between syncs)"),
             ("dp4", "dp4_b4k_lr0.006", "DP, 4 ranks; 4096-token rows at 2x the inner lr (0.006)"),
             ("k4_h100_warm", "k4_h25_warm_b4k_lr0.006", "warm K=4, 8 syncs; 4096-token rows at 2x the inner lr (0.006)")]
    out = []
    for a, b, label in pairs:
        if a in by and b in by:
            ra, rb = by[a], by[b]
            out.append({"what": label, "b1k": a, "b4k": b, "b1k_loss": ra["final_val_loss"], "b4k_loss": rb["final_val_loss"],
                        "b1k_gap_pct": ra.get("loss_gap_vs_dp_pct"), "b4k_gap_pct": rb.get("loss_gap_vs_dp_pct"),
                        "b1k_syncs": ra["outer_syncs"], "b4k_syncs": rb["outer_syncs"],
                        "b1k_tokens": ra["tokens_total_this_run"] + ra["warm_offset_steps"] * by[ra.get("dp_reference") or a]["tokens_per_step"],
                        "b4k_tokens": rb["tokens_total_this_run"] + rb["warm_offset_steps"] * by[rb.get("dp_reference") or b]["tokens_per_step"]})
    return out


def batch_scaling(by):
    """Final loss at a fixed number of tokens with the batch (tokens per optimizer step)
    and the steps traded against each other: equal losses mean the larger batch is
    still far below the critical batch (it is worth as many more steps)."""
    out = []
    for n in ("single", "single_b4k", "single_b4k_lr0.006", "single_x4", "dp4", "dp4_b4k", "dp4_b4k_lr0.006"):
        if n in by:
            r = by[n]
            out.append({"row": n, "tokens": r["steps"] * r["tokens_per_step"], "tokens_per_step": r["tokens_per_step"],
                        "steps": r["steps"], "inner_lr": r["inner_lr"], "final_val_loss": r["final_val_loss"]})
    return sorted(out, key=lambda x: (x["tokens"], x["tokens_per_step"], x["inner_lr"]))


def at(curve, step):
    """The curve's value at `step`, linear between its evaluations (None outside them):
    the b4k rows evaluate at other steps than their DP row."""
    for (s0, v0), (s1, v1) in zip(curve, curve[1:]):
        if s0 <= step <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return curve[-1][1] if curve and curve[-1][0] == step else None


def gap_curves(by):
    """(row - DP) / DP at every evaluation of the row (DP's curve interpolated linearly
    between its evaluations where they fall at other steps)."""
    G = {}
    for dp_name, names in ([("dp4", ["k4_h100_warm", "k4_h100", "dp4_warm", "single"]),
                           ("dp4_seed2", ["k4_h100_warm_seed2"]), ("dp4_seed3", ["k4_h100_warm_seed3"]),
                           ("dp4_b4k", ["k4_h25_warm_b4k", "k4_h50_warm_b4k"]),
                           ("dp4_b4k_lr0.006", ["k4_h25_warm_b4k_lr0.006"])] +
                          [(d, [f"k4_h100_warm{d[3:]}", f"k4_h25_warm{d[3:]}"] + sorted(n for n in by if re.fullmatch(r"k4_h100_warm_at\d+" + d[3:], n)))
                           for d in sorted(by) if re.fullmatch(r"dp4_len\d+", d)]):
        if dp_name not in by:
            continue
        ref = by[dp_name]["val_curve"]
        for n in names:
            if n in by:
                G[n] = [[s, 100.0 * (v - at(ref, s)) / at(ref, s)] for s, v in by[n]["val_curve"] if at(ref, s) is not None]
    return G


def run_length(by):
    """The third round: each short row (S steps) beside its run at N x the steps
    (`_lenN`, the same model, batch, inner lr, schedule shape and 20% warm start),
    final loss and gap to the DP row of its length, and the gap at the same fraction
    of the run (the short row at step s, the long one at step N s)."""
    out = {"pairs": [], "by_fraction": []}
    longs = sorted(n for n in by if re.fullmatch(r"dp4_len\d+", n))
    for dl in longs:
        N = int(dl[len("dp4_len"):])
        # the control (k4_h100_warm_atW_lenN): split from the long DP run at the short rows' step W
        at = [("k4_h100_warm", n) for n in sorted(by) if re.fullmatch(r"k4_h100_warm_at\d+" + dl[3:], n)]
        for short, long_ in [(x, x + dl[3:]) for x in ("dp4", "k4_h100_warm", "k4_h25_warm")] + at:
            if short not in by or long_ not in by:
                continue
            a, b = by[short], by[long_]
            tok = lambda r: r["tokens_total_this_run"] + r["warm_offset_steps"] * by[r.get("dp_reference") or r["name"]]["tokens_per_step"]
            out["pairs"].append({"short": short, "long": long_, "N": N, "short_loss": a["final_val_loss"], "long_loss": b["final_val_loss"],
                                 "short_gap_pct": a.get("loss_gap_vs_dp_pct"), "long_gap_pct": b.get("loss_gap_vs_dp_pct"),
                                 "short_tokens": tok(a), "long_tokens": tok(b), "params": a["params"],
                                 "short_syncs": a["outer_syncs"] if a["islands"] > 1 else None,
                                 "long_syncs": b["outer_syncs"] if b["islands"] > 1 else None})
        S = by["dp4"]["steps"] if "dp4" in by else None
        curves = {}
        for short in ("k4_h100_warm", "k4_h25_warm"):
            long_ = short + dl[3:]
            if short in by and long_ in by and S:
                ca = {s: v for s, v in by[short]["val_curve"]}
                cb = {s: v for s, v in by[long_]["val_curve"]}
                da = {s: v for s, v in by["dp4"]["val_curve"]}
                db = {s: v for s, v in by[dl]["val_curve"]}
                curves[short] = {s: (100 * (ca[s] - da[s]) / da[s] if s in da else None,
                                     100 * (cb[N * s] - db[N * s]) / db[N * s] if N * s in cb and N * s in db else None) for s in ca}
        for s in sorted({s for c in curves.values() for s in c}):
            row = {"fraction": s / S, "short_step": s, "long_step": N * s, "N": N}
            for short, c in curves.items():
                if s in c:
                    row[short] = {"short_gap_pct": c[s][0], "long_gap_pct": c[s][1]}
            out["by_fraction"].append(row)
    return out


ROUND4_STEPS = (600, 900, 1200, 1500, 1800, 2100, 2400, 2700, 3000)  # sync points of every H = 25/100/150 row


def round4(by):
    """The fourth round (run.sh --long N --round4): the knobs on the long warm rows, each
    beside the third round's k4_h100_warm_lenN / k4_h25_warm_lenN: final gap to the DP
    row of its length, counted bytes ratio, and the gap at steps that are sync points of
    every row (multiples of 300 from the split; streaming rows sync one fragment there)."""
    out = []
    for dl in sorted(n for n in by if re.fullmatch(r"dp4_len\d+", n)):
        tag = dl[3:]
        names = [f"k4_h100_warm{tag}", f"k4_h25_warm{tag}"]
        names += sorted(n for n in by if re.fullmatch(r"k4_h\d+_warm\d*" + tag + r"_.+", n) and not re.search(r"_to\d+$", n))
        names += sorted(n for n in by if re.fullmatch(r"k4_h\d+_warm\d+" + tag + r"(_.+)?", n) and n not in names)
        for n in names:
            if n not in by:
                continue
            r = by[n]
            d = r.get("dp_reference") or dl  # a row of another seed: against the DP run of its seed
            ref = by[d]["val_curve"]
            c = dict((int(a), v) for a, v in r["val_curve"])
            gaps = {st: 100.0 * (c[st] - at(ref, st)) / at(ref, st) for st in ROUND4_STEPS if st in c and at(ref, st)}
            out.append({"row": n, "dp": d, "H": r["H"], "outer_lr": r["outer_lr"], "fragments": r["fragments"],
                        "outer_dtype": r["outer_dtype"], "split_step": r["warm_offset_steps"],
                        "final_val_loss": r["final_val_loss"], "gap_pct": r.get("loss_gap_vs_dp_pct"),
                        "bytes_total": r["inter_island_bytes_total"], "bytes_ratio": r.get("bytes_ratio_vs_dp"),
                        "syncs": r["outer_syncs"], "gap_at_steps": gaps, "third_round": n in names[:2]})
    return out


ROUND5_PAIRS = (("k4_h100_cont_len3", "k4_h100_warm_len3"), ("k4_h100_cont40_len3", "k4_h100_warm40_len3"),
                ("k4_h100_cont_len3_blocks", "k4_h100_cont_len3"))


def round5(by):
    """The fifth round (run.sh --round5): the long warm rows continuing DP's schedule and
    seed exactly (--init-step 1), each beside the row it is compared with: the fourth
    round's restarted-schedule row, or (blocks) the i.i.d. continued row. Gaps at every
    sync point (multiples of 100) are in results.json; the Markdown shows every 300th."""
    out = []
    for n, old in ROUND5_PAIRS:
        if n not in by:
            continue
        r = by[n]
        ref = by[r.get("dp_reference") or "dp4_len3"]["val_curve"]
        e = {"row": n, "against": old, "split_step": r["warm_offset_steps"], "final_val_loss": r["final_val_loss"],
             "gap_pct": r.get("loss_gap_vs_dp_pct"), "bytes_ratio": r.get("bytes_ratio_vs_dp"), "syncs": r["outer_syncs"]}
        for key, name in (("gap_at_syncs", n), ("against_gap_at_syncs", old)):
            if name in by:
                c = dict((int(a), v) for a, v in by[name]["val_curve"])
                e[key] = {st: 100.0 * (c[st] - at(ref, st)) / at(ref, st)
                          for st in range(100, 3001, 100) if st in c and st > r["warm_offset_steps"] and at(ref, st)}
        e["against_gap_pct"] = by[old].get("loss_gap_vs_dp_pct") if old in by else None
        out.append(e)
    return out


# (row, the row it changes one knob of, the knob)
ROUND6_ROWS = (("k4_h100_cont40_len3_stream_fp4", "k4_h100_cont40_len3", "streaming fp4 (4 fragments, overlap 1, merge 0.5)"),
               ("k4_h150_cont40_len3_stream_fp4", "k4_h100_cont40_len3_stream_fp4", "H = 150"),
               ("k4_h100_cont_len3_olr0.4", "k4_h100_cont_len3", "outer lr 0.4"),
               ("k4_h100_cont25_len3", "k4_h100_cont_len3", "split at 25% (step 750)"),
               ("k4_h150_cont_len3_fp4", "k4_h100_cont_len3", "H = 150 and fp4 outer gradients, no streaming"),
               ("k4_h100_cont40_len3_stream_fp4_seed2", "k4_h100_warm40_len3_seed2", "streaming fp4 from the 40% split, seed 2"))


def round6(by):
    """The sixth round (run.sh --round6): one knob on the fifth round's continued rows
    (--init-step 1). Gap to dp4_len3 and to dp4_len3_v5 (the new binary's DP), counted
    bytes ratio against DP's whole run, the targets, and the gap at every sync point
    (multiples of 100 after the split) in results.json; the Markdown shows every 300th."""
    out = []
    for n, other, knob in ROUND6_ROWS:
        if n not in by:
            continue
        r = by[n]
        stream = (r["fragments"] or 1) > 1
        e = {"row": n, "against": other, "knob": knob, "split_step": r["warm_offset_steps"], "H": r["H"],
             "outer_lr": r["outer_lr"], "fragments": r["fragments"], "outer_dtype": r["outer_dtype"],
             "final_val_loss": r["final_val_loss"], "gap_pct": r.get("loss_gap_vs_dp_pct"),
             "bytes_ratio": r.get("bytes_ratio_vs_dp"), "bytes_ratio_incl_dp_phase": r.get("bytes_ratio_incl_dp_phase"),
             "peak_ratio": r.get("peak_ratio_vs_dp"), "syncs": r["outer_syncs"],
             "against_gap_pct": by[other].get("loss_gap_vs_dp_pct") if other in by else None}
        dref = r.get("dp_reference") or "dp4_len3"  # seed 2: dp4_len3_seed2
        e["dp"] = dref
        if "dp4_len3_v5" in by and dref == "dp4_len3":
            v5 = by["dp4_len3_v5"]["final_val_loss"]
            e["gap_vs_v5_pct"] = 100.0 * (r["final_val_loss"] - v5) / v5
        gap, ratio = (3.0, 1000.0) if stream else (2.0, 100.0)
        e["target"] = f"within {gap:g}% of DP at >= {ratio:g}x fewer bytes"
        e["target_met"] = e["gap_pct"] is not None and e["gap_pct"] <= gap and (e["bytes_ratio"] or 0) >= ratio
        ref = by[dref]["val_curve"]
        for key, name in (("gap_at_syncs", n), ("against_gap_at_syncs", other)):
            if name in by:
                c = dict((int(a), v) for a, v in by[name]["val_curve"])
                e[key] = {st: 100.0 * (c[st] - at(ref, st)) / at(ref, st)
                          for st in range(100, 3001, 100) if st in c and st > r["warm_offset_steps"] and at(ref, st)}
        out.append(e)
    return out


def fmt_bytes(b):
    if not b:
        return "0"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= k:
            return f"{b / k:.3g} {unit}"
    return f"{b:.0f} B"


def markdown(rows, out):
    L = ["Inner learning-rate grid (single island, the full row; the best is the `single` row and every row's lr):", "",
         "| inner lr | final val loss |", "|---:|---:|"]
    # the best first, then by lr (rows.txt lists the three concurrent tuning rows in the order they started)
    tune = [r for r in rows if r["tuning"]]
    for r in sorted(tune, key=lambda r: (r["final_val_loss"] != min(t["final_val_loss"] for t in tune), r["inner_lr"])):
        L.append(f"| {r['inner_lr']:.3g} | {r['final_val_loss']:.4f} |")
    L += ["", "| row | ranks | steps (DP + this run) | syncs | final val loss | gap vs DP | cross-island bytes (total) | bytes per sync per rank | ratio vs DP (total) | ratio incl. DP phase | ratio vs DP (peak) | link s over WAN (exposed / all) |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["tuning"]:
            continue
        is_dp = r["islands"] == 1 and r["ranks"] > 1 and not r["warm_from"]
        gap = "reference" if is_dp else (f"{r['loss_gap_vs_dp_pct']:+.2f}% ({r['dp_reference']})" if "loss_gap_vs_dp_pct" in r else "")
        ratio = f"{r['bytes_ratio_vs_dp']:.0f}x" if "bytes_ratio_vs_dp" in r else ("1x" if is_dp else "n/a")
        incl = f"{r['bytes_ratio_incl_dp_phase']:.1f}x" if "bytes_ratio_incl_dp_phase" in r else ""
        peak = f"{r['peak_ratio_vs_dp']:.1f}x" if "peak_ratio_vs_dp" in r else ("1x" if is_dp else "n/a")
        st = f"{r['warm_offset_steps']} + {r['steps']}" if r["warm_offset_steps"] else f"{r['steps']}"
        L.append(f"| `{r['name']}`: {r['what']} | {r['ranks']} | {st} | {r['outer_syncs']} | {r['final_val_loss']:.4f} | {gap} | "
                 f"{fmt_bytes(r['inter_island_bytes_total'])} | {fmt_bytes(r.get('bytes_per_sync_per_rank', 0))} | {ratio} | {incl} | {peak} | "
                 f"{r['wan_link_seconds']:.1f} / {r['wan_link_seconds_all']:.1f} |")
    if out["seeds"]:
        L += ["", "Seeds (the headline pair; a warm row starts from the DP run of its seed):", "",
              "| DP row | DP loss | warm K=4 H=100 row | its loss | gap |", "|---|---:|---|---:|---:|"]
        for s in out["seeds"]:
            k = f"{s['k4_loss']:.4f}" if s["k4_loss"] is not None else ""
            g = f"{s['gap_pct']:+.2f}%" if s["gap_pct"] is not None else ""
            L.append(f"| {s['dp']} | {s['dp_loss']:.4f} | {s['k4'] or ''} | {k} | {g} |")
        gaps = [s["gap_pct"] for s in out["seeds"] if s["gap_pct"] is not None]
        dps = [s["dp_loss"] for s in out["seeds"]]
        if len(gaps) > 1:
            L.append(f"| mean (sd) over {len(gaps)} seeds | {statistics.mean(dps):.4f} ({statistics.stdev(dps):.4f}) | | | "
                     f"{statistics.mean(gaps):+.2f}% ({statistics.stdev(gaps):.2f}) |")
    L += ["", "| target | rows | result | met? |", "|---|---|---|---|"]
    for t in out["targets"]:
        if "loss_gap_pct" in t:
            res = f"gap {t['loss_gap_pct']:+.2f}%, {t['bytes_ratio']:.0f}x fewer bytes"
            if t.get("bytes_ratio_incl_dp_phase"):
                res += f" ({t['bytes_ratio_incl_dp_phase']:.1f}x if the DP phase crossed the WAN)"
            missed = [x for x, ok in (("loss", t["loss_met"]), ("bytes", t["bytes_met"])) if not ok]
            met = "yes" if t["met"] else "no (" + " and ".join(missed) + " missed)"
        elif "margin_pct" in t:
            res = f"{t['margin_pct']:+.2f}%" + (f" ({t['values'][0]:.4f} vs {t['values'][1]:.4f})" if "values" in t else "")
            met = "yes" if t["met"] else "no"
        else:
            res = " < ".join(f"{v:.4f}" for v in t["values"]) if t["met"] else ", ".join(f"{v:.4f}" for v in t["values"])
            met = "yes" if t["met"] else "no"
        L.append(f"| {t['target']} | {', '.join(t['rows'])} | {res} | {met} |")
    if out["outer_lr_by_h"]:
        lrs = sorted({o for g in out["outer_lr_by_h"] for o in g["losses"]}, key=float)
        L += ["", "Outer lr by H (warm K=4, 1024-token island steps; final validation loss, **best** of the row in bold; "
              "seed 1 is the DP run `dp4`, seed 2 `dp4_seed2`):", "",
              "| H | seed | " + " | ".join(f"outer lr {o}" for o in lrs) + " | best |", "|---:|---:|" + "---:|" * (len(lrs) + 1)]
        for g in out["outer_lr_by_h"]:
            cells = []
            for o in lrs:
                v = g["losses"].get(o)
                cells.append("" if v is None else (f"**{v:.4f}**" if g["best_outer_lr"] is not None and float(o) == g["best_outer_lr"] else f"{v:.4f}"))
            best = "" if g["best_outer_lr"] is None else f"{g['best_outer_lr']:g}"
            L.append(f"| {g['H']} | {g['seed']} | " + " | ".join(cells) + f" | {best} |")
    if out["island_batch"]:
        L += ["", "Island batch at the same tokens (1024-token steps vs 4096-token steps, 1/4 of the steps; gap against the DP row of the same batch):", "",
              "| setting | 1024-token row | loss | gap | syncs | 4096-token row | loss | gap | syncs | tokens |", "|---|---|---:|---:|---:|---|---:|---:|---:|---:|"]
        for p in out["island_batch"]:
            ga = "reference" if p["b1k_gap_pct"] is None else f"{p['b1k_gap_pct']:+.2f}%"
            gb = "reference" if p["b4k_gap_pct"] is None else f"{p['b4k_gap_pct']:+.2f}%"
            L.append(f"| {p['what']} | `{p['b1k']}` | {p['b1k_loss']:.4f} | {ga} | {p['b1k_syncs']} | `{p['b4k']}` | {p['b4k_loss']:.4f} | {gb} | "
                     f"{p['b4k_syncs']} | {p['b1k_tokens'] / 1e6:.2f}M / {p['b4k_tokens'] / 1e6:.2f}M |")
    if len(out["batch_scaling"]) > 2:
        L += ["", "Batch against steps at a fixed number of tokens (no islands; the same schedule shape: 5% warm-up, cosine to 0.1 x the peak lr):", "",
              "| tokens | tokens per step | steps | peak inner lr | row | final val loss |", "|---:|---:|---:|---:|---|---:|"]
        for b in out["batch_scaling"]:
            L.append(f"| {b['tokens'] / 1e6:.2f}M | {b['tokens_per_step']} | {b['steps']} | {b['inner_lr']:.3g} | `{b['row']}` | {b['final_val_loss']:.4f} |")
    b4k = [n for n in out["gap_over_run"] if "_b4k" in n]
    lng = [n for n in out["gap_over_run"] if "_len" in n]
    for names, title in (([n for n in out["gap_over_run"] if n not in b4k and n not in lng], "Compute-equal gap over the run, (row - DP) / DP in % at the same step:"),
                         (b4k, "The same for the 4096-token islands, against the DP row of their lr (`dp4_b4k`, `dp4_b4k_lr0.006`: 250 steps of 16384 tokens; step 50 = 20%):"),
                         (lng, "The same for the third round's long rows, against the DP row of their length (`dp4_len3`: 3000 steps of 4096 tokens; "
                               "step 600 = 20%; H = 100 syncs at every step that is a multiple of 100):")):
        if not names:
            continue
        L += ["", title, ""]
        steps = sorted({s for n in names for s, _ in out["gap_over_run"][n]})
        L.append("| step | " + " | ".join(f"`{n}`" for n in names) + " |")
        L.append("|---:|" + "---:|" * len(names))
        for st in steps:
            cells = []
            for n in names:
                v = dict((int(a), b) for a, b in out["gap_over_run"][n]).get(st)
                cells.append("" if v is None else f"{v:+.2f}%")
            L.append(f"| {st} | " + " | ".join(cells) + " |")
    rl = out.get("run_length") or {}
    if rl.get("pairs"):
        L += ["", "Run length (third round): each short row beside its run at N x the steps, the same model, batch, inner lr, "
              "schedule shape and warm start at 20%; gap against the DP row of its length:", "",
              "| short row | tokens | tokens per param | syncs | final val loss | gap | long row | tokens | tokens per param | syncs | final val loss | gap |",
              "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
        for p in rl["pairs"]:
            g = lambda x: "reference" if x is None else f"{x:+.2f}%"
            y = lambda x: "" if x is None else str(x)
            L.append(f"| `{p['short']}` | {p['short_tokens'] / 1e6:.2f}M | {p['short_tokens'] / p['params']:.1f} | {y(p['short_syncs'])} | "
                     f"{p['short_loss']:.4f} | {g(p['short_gap_pct'])} | `{p['long']}` | {p['long_tokens'] / 1e6:.2f}M | "
                     f"{p['long_tokens'] / p['params']:.1f} | {y(p['long_syncs'])} | {p['long_loss']:.4f} | {g(p['long_gap_pct'])} |")
    if rl.get("by_fraction"):
        names = [n for n in ("k4_h100_warm", "k4_h25_warm") if any(n in r for r in rl["by_fraction"])]
        N = rl["by_fraction"][0]["N"]
        L += ["", f"The gap at the same fraction of the run (short row at step s, long row at step {N} s; rows from 20% on are after the warm start):", "",
              "| fraction | short step | long step | " + " | ".join(f"`{n}` short | long" for n in names) + " |",
              "|---:|---:|---:|" + "---:|---:|" * len(names)]
        for r in rl["by_fraction"]:
            cells = []
            for n in names:
                c = r.get(n) or {}
                cells += ["" if c.get(k) is None else f"{c[k]:+.2f}%" for k in ("short_gap_pct", "long_gap_pct")]
            L.append(f"| {r['fraction']:.2f} | {r['short_step']} | {r['long_step']} | " + " | ".join(cells) + " |")
    r4 = [r for r in out.get("round4") or [] if not r["third_round"]]
    if r4:
        L += ["", "Fourth round: the knobs on the long warm rows (3x the steps; gap against `dp4_len3`; bytes ratio counted, "
              "DP's whole run over the row's bytes; the gap at steps that are sync points of every row; third-round rows first):", "",
              "| row | split | H | outer lr | fragments | outer dtype | syncs | final val loss | gap | bytes ratio | " +
              " | ".join(str(st) for st in ROUND4_STEPS) + " |", "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|" + "---:|" * len(ROUND4_STEPS)]
        for r in out["round4"]:
            g = " | ".join("" if st not in r["gap_at_steps"] else f"{r['gap_at_steps'][st]:+.2f}" for st in ROUND4_STEPS)
            vs = "" if re.fullmatch(r"dp4_len\d+", r["dp"]) else f" (vs `{r['dp']}`)"
            L.append(f"| `{r['row']}`{vs} | {r['split_step']} | {r['H']} | {r['outer_lr']:.2g} | {r['fragments']} | {r['outer_dtype']} | {r['syncs']} | "
                     f"{r['final_val_loss']:.4f} | {r['gap_pct']:+.2f}% | {r['bytes_ratio']:.0f}x | {g} |")
    def sync_cells(e, cols):
        """a continued row's gap at each sync column, the compared row's in brackets"""
        mine, other = e.get("gap_at_syncs", {}), e.get("against_gap_at_syncs", {})
        return " | ".join("" if st not in mine else f"{mine[st]:+.2f} ({other[st]:+.2f})" if st in other else
                          f"{mine[st]:+.2f}" for st in cols)

    r5 = out.get("round5") or []
    if r5:
        cols = list(range(900, 3001, 300))
        L += ["", "Fifth round: the long warm K = 4, H = 100 rows continuing DP's schedule and seed exactly (--init-step 1; "
              "a second binary, see the rows' atoll_sha256), each beside the row it is compared with (gap against `dp4_len3`, "
              "at sync points):", "",
              "| row | against | split | syncs | final val loss | gap | gap of the other | bytes ratio | " + " | ".join(map(str, cols)) + " |",
              "|---|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(cols)]
        for e in r5:
            g = sync_cells(e, cols)
            og = "" if e["against_gap_pct"] is None else f"{e['against_gap_pct']:+.2f}%"
            L.append(f"| `{e['row']}` | `{e['against']}` | {e['split_step']} | {e['syncs']} | {e['final_val_loss']:.4f} | "
                     f"{e['gap_pct']:+.2f}% | {og} | {e['bytes_ratio']:.0f}x | {g} |")
        L += ["", "(in the step columns: this row's gap, and in brackets the other row's)"]
    r6 = out.get("round6") or []
    if r6:
        cols = list(range(900, 3001, 300))
        L += ["", "Sixth round: one knob on the fifth round's continued rows (--init-step 1, the fifth round's binary); gap against "
              "`dp4_len3` (and `dp4_len3_v5`, the same binary's DP); bytes ratio counted, DP's whole run over the row's bytes; "
              "target: 3% at 1000x for streaming rows, 2% at 100x otherwise:", "",
              "| row | knob | against | split | H | syncs | final val loss | gap | gap vs v5 DP | gap of the other | bytes ratio | target met | "
              + " | ".join(map(str, cols)) + " |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|" + "---:|" * len(cols)]
        for e in r6:
            g = sync_cells(e, cols)
            og = "" if e["against_gap_pct"] is None else f"{e['against_gap_pct']:+.2f}%"
            v5 = "" if e.get("gap_vs_v5_pct") is None else f"{e['gap_vs_v5_pct']:+.2f}%"
            vs = "" if e["dp"] == "dp4_len3" else f" (vs `{e['dp']}`)"
            L.append(f"| `{e['row']}`{vs} | {e['knob']} | `{e['against']}` | {e['split_step']} | {e['H']} | {e['syncs']} | {e['final_val_loss']:.4f} | "
                     f"{e['gap_pct']:+.2f}% | {v5} | {og} | {e['bytes_ratio']:.0f}x | {'yes' if e['target_met'] else 'no'} | {g} |")
        L += ["", "(in the step columns: this row's gap, and in brackets the other row's)"]
    if out["checks"]:
        L += ["", "Checks: " + "; ".join(out["checks"])]
    return "\n".join(L) + "\n"


def plot(by, out, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(20, 6.4))
    rows = [r for r in by.values() if not r["tuning"]]
    single = by.get("single")
    if single:
        ax.axhline(single["final_val_loss"], color="gray", ls="--", lw=1, label="single island (no traffic)")
    for r in rows:
        if r["inter_island_bytes_total"] <= 0 or r["warm_from"] and r["islands"] == 1 or re.search(r"_to\d+$", r["name"]):
            continue  # (a DP run stopped early for a warm start is no result)
        if r["islands"] == 1:
            ax.scatter(r["inter_island_bytes_total"], r["final_val_loss"], marker="*", s=260, color="k",
                       zorder=3, alpha=1 if r["name"] == "dp4" else 0.4)
            continue
        c = {2: "tab:blue", 4: "tab:orange"}.get(r["K"], "k")
        stream = (r["fragments"] or 1) > 1
        marker = "^" if stream else "o"
        noniid = r["island_data"] == "files"
        warm = bool(r["warm_from"])
        ax.scatter(r["inter_island_bytes_total"], r["final_val_loss"], marker=marker, s=80,
                   facecolor="none" if noniid or not warm else c, edgecolor=c, linewidth=2, zorder=3)
        ax.annotate(r["name"], (r["inter_island_bytes_total"], r["final_val_loss"]), textcoords="offset points",
                    xytext=(6, 3), fontsize=7, color=c)
    from matplotlib.lines import Line2D
    handles, _ = ax.get_legend_handles_labels()
    handles += [Line2D([], [], marker="*", ls="", color="k", markersize=12, label="data parallel, 4 ranks (faint: other seeds, 4096-token steps, 3x the steps)"),
                Line2D([], [], marker="o", ls="", color="tab:orange", label="DiLoCo K=4, warm (hollow: scratch or non-i.i.d.)"),
                Line2D([], [], marker="o", ls="", color="tab:blue", label="DiLoCo K=2, warm"),
                Line2D([], [], marker="^", ls="", color="k", label="streaming, 4 fragments, fp4")]
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    ax.set_xscale("log")
    ax.set_xlabel("cross-island bytes, total over ranks (DP: its all-reduce; warm rows: DiLoCo phase)")
    ax.set_ylabel("final validation loss")
    ax.set_title("Final validation loss vs cross-island traffic")
    ax.grid(True, which="both", alpha=0.3)

    show = [("dp4", "k", "-", "data parallel, 4 ranks"), ("k4_h100_warm", "tab:orange", "-", "K=4 H=100 warm (from DP at 20%)"),
            ("k4_h100", "tab:orange", ":", "K=4 H=100 from scratch"), ("single", "gray", "--", "single island"),
            ("k4_h25_warm", "tab:green", "-", "K=4 H=25 warm"), ("k4_h250_warm", "tab:red", "-", "K=4 H=250 warm"),
            ("k2_h100_warm", "tab:blue", "-", "K=2 H=100 warm")]
    lo = None
    for n, c, ls, label in show:
        if n in by:
            xs = [p[0] for p in by[n]["val_curve"]]
            ys = [p[1] for p in by[n]["val_curve"]]
            bx.plot(xs, ys, color=c, ls=ls, lw=2 if n in ("dp4", "k4_h100_warm") else 1.2, marker=".", label=label)
            lo = min(ys) if lo is None else min(lo, min(ys))
    if lo is not None:
        bx.set_ylim(lo - 0.05, lo + 1.0)
    bx.set_xlabel("step (= per-island compute; warm rows: DP steps + DiLoCo steps)")
    bx.set_ylabel("validation loss (global model)")
    bx.set_title("Validation loss during training")
    bx.grid(True, alpha=0.3)
    bx.legend(fontsize=8, loc="upper right")

    styles = {"k4_h100_warm": ("tab:orange", "-"), "k4_h100_warm_seed2": ("tab:orange", "--"),
              "k4_h100_warm_seed3": ("tab:orange", ":"), "k4_h100": ("tab:purple", ":"), "dp4_warm": ("k", "--"),
              "single": ("gray", "--"), "k4_h25_warm_b4k": ("tab:green", "-"), "k4_h50_warm_b4k": ("tab:cyan", "-"),
              "k4_h25_warm_b4k_lr0.006": ("tab:green", "--"), "k4_h100_warm_len3": ("tab:brown", "-"),
              "k4_h25_warm_len3": ("tab:olive", "-"), "k4_h100_warm_at200_len3": ("tab:brown", ":")}
    for n, pts in out["gap_over_run"].items():
        c, ls = styles.get(n, ("k", "-"))
        # x: tokens DP had seen at that step (b4k rows take 4x the tokens per step)
        tps = by[by[n].get("dp_reference") or "dp4"]["tokens_per_step"]
        cx.plot([p[0] * tps / 1e6 for p in pts], [p[1] for p in pts], color=c, ls=ls, marker=".",
                label=f"{n} vs {by[n].get('dp_reference') or 'DP'}")
    # the fourth round's knobs on the long rows, against dp4_len3 (full curves)
    r4c = iter(["tab:red", "tab:pink", "tab:cyan", "tab:gray", "tab:purple", "tab:blue"])
    for r4 in out.get("round4") or []:
        if r4["third_round"]:
            continue
        ref, tps = by[r4["dp"]]["val_curve"], by[r4["dp"]]["tokens_per_step"]
        pts = [(st, 100.0 * (v - at(ref, st)) / at(ref, st)) for st, v in by[r4["row"]]["val_curve"] if at(ref, st)]
        cx.plot([p[0] * tps / 1e6 for p in pts], [p[1] for p in pts], color=next(r4c, "k"), ls="-.", marker=".", ms=3,
                label=f"{r4['row']} vs {r4['dp']}")
    # the fifth round: the same rows continuing DP's schedule exactly (--init-step 1)
    r5c = iter(["darkgreen", "lime", "navy"])
    for e in out.get("round5") or []:
        ref, tps = by["dp4_len3"]["val_curve"], by["dp4_len3"]["tokens_per_step"]
        pts = [(st, 100.0 * (v - at(ref, st)) / at(ref, st)) for st, v in by[e["row"]]["val_curve"] if at(ref, st)]
        cx.plot([p[0] * tps / 1e6 for p in pts], [p[1] for p in pts], color=next(r5c, "k"), ls="-", lw=2, marker=".", ms=3,
                label=f"{e['row']} vs dp4_len3")
    # the sixth round: one knob on the continued rows
    r6c = iter(["darkorange", "gold", "crimson", "teal", "magenta"])
    for e in out.get("round6") or []:
        ref, tps = by[e["dp"]]["val_curve"], by[e["dp"]]["tokens_per_step"]
        pts = [(st, 100.0 * (v - at(ref, st)) / at(ref, st)) for st, v in by[e["row"]]["val_curve"] if at(ref, st)]
        cx.plot([p[0] * tps / 1e6 for p in pts], [p[1] for p in pts], color=next(r6c, "k"), ls="--", lw=1.5, marker=".", ms=3,
                label=f"{e['row']} vs {e['dp']}")
    cx.axhline(0, color="k", lw=0.8)
    cx.axhline(2, color="tab:red", lw=0.8, ls=":", label="+2% (target)")
    cx.set_ylim(-5, 40)
    cx.set_xlabel("tokens of the DP run at the same step (M; = per-island compute x 4)")
    cx.set_ylabel("(row - DP) / DP, validation loss, %")
    cx.set_title("Compute-equal gap to data parallel over the run")
    cx.grid(True, alpha=0.3)
    cx.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
