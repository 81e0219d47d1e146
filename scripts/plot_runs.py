#!/usr/bin/env python3
"""Plots the loss curves of atoll runs into one PNG, for a machine without TensorBoard.

usage: scripts/plot_runs.py RUN [RUN...] [--out FILE.png] [--x step|tokens|time]

Each RUN is a run directory (atoll train --out RUN); its metrics.jsonl gives the
training loss (a solid line), val_loss (dashed, with markers) and each --eval-data
set's val_loss_NAME (dotted), one colour per run. --x tokens multiplies the step by
RUN/summary.json's tokens_per_step; --x time is the wall clock ("time") since the run's
first step, in seconds. Needs matplotlib (Debian: python3-matplotlib). Bad input gets
one line on stderr and exit status 1.
"""
import argparse
import json
import os
import sys


def die(msg):
    print(f"plot_runs: {msg}", file=sys.stderr)
    sys.exit(1)


def read_metrics(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        die(f"{path}: no such file ({run} is not a run directory, or has no step yet)")
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                die(f"{path}:{n}: not a JSON object")
            if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                die(f"{path}:{n}: a line without a step")
            rows.append(row)
    if not rows:
        die(f"{path}: no steps")
    return rows


def x_values(run, rows, axis):
    if axis == "step":
        return [r["step"] for r in rows]
    if axis == "time":
        if any("time" not in r for r in rows):
            die(f"{run}/metrics.jsonl: --x time needs each line's time (written since atoll records it)")
        return [r["time"] - rows[0]["time"] for r in rows]
    path = os.path.join(run, "summary.json")
    try:
        with open(path, encoding="utf-8") as f:
            per_step = json.load(f)["tokens_per_step"]
    except (OSError, ValueError, KeyError, TypeError):
        die(f"{path}: --x tokens needs tokens_per_step from the run's summary.json")
    return [r["step"] * per_step for r in rows]


def main():
    ap = argparse.ArgumentParser(description="Plot the loss curves of atoll runs (their metrics.jsonl) into a PNG.")
    ap.add_argument("runs", nargs="+", metavar="RUN", help="run directories")
    ap.add_argument("--out", default="plot.png", help="the PNG to write (default plot.png)")
    ap.add_argument("--x", choices=["step", "tokens", "time"], default="step", help="the x axis (default step)")
    a = ap.parse_args()
    data = [(run, read_metrics(run)) for run in a.runs]  # every run checked before drawing
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("needs matplotlib (Debian: apt install python3-matplotlib; or pip install matplotlib)")
    names = [os.path.basename(os.path.normpath(run)) or run for run in a.runs]
    if len(set(names)) < len(names):  # runs of the same name in different places: their paths
        names = list(a.runs)
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (run, rows) in enumerate(data):
        colour = f"C{i % 10}"
        name = names[i]
        xs = x_values(run, rows, a.x)
        # (a step an island's phase skipped has no loss)
        trained = [(x, r["loss"]) for x, r in zip(xs, rows) if "loss" in r]
        ax.plot([p[0] for p in trained], [p[1] for p in trained], color=colour, linewidth=1.2, label=f"{name} loss")
        keys = sorted({k for r in rows for k in r if k == "val_loss" or k.startswith("val_loss_")})
        for k in keys:
            pts = [(x, r[k]) for x, r in zip(xs, rows) if k in r]
            style = "--" if k == "val_loss" else ":"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", markersize=3, color=colour,
                    label=f"{name} {k}")
    ax.set_xlabel({"step": "step", "tokens": "tokens", "time": "seconds since the first step"}[a.x])
    ax.set_ylabel("loss (nats per token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(a.out, format="png", dpi=100)
    except OSError as e:
        die(f"{a.out}: cannot write: {e.strerror}")


if __name__ == "__main__":
    main()
