"""Reads atoll's TensorBoard event files back with TensorBoard's own readers and compares
them with the run's metrics.jsonl (tests/cli/test_tensorboard.sh).

usage: tb_events_check.py TBDIR RUN FILES [TAG...] [-- TBDIR RUN FILES [TAG...] ...]

For each case: TBDIR holds FILES event files; each file read alone (EventFileLoader)
starts with file_version "brain.Event:2" and holds every record its CRCs let through
(the reader stops at a bad CRC); the directory as TensorBoard shows it
(EventAccumulator: a resume's SessionLog START drops the earlier file's later steps)
has exactly metrics.jsonl's numbers, each rounded to float32, at the same steps, one
tag per key but step and time, with wall_time the line's time; each TAG is among them.
"""
import glob
import json
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(tbdir, run, nfiles, tags):
    bad = []
    files = sorted(glob.glob(os.path.join(tbdir, "*tfevents*")))
    if len(files) != nfiles:
        return [f"{tbdir}: {len(files)} event files, expected {nfiles}"]
    records = 0
    for f in files:
        events = list(EventFileLoader(f).Load())
        records += len(events)
        if not events or events[0].file_version != "brain.Event:2":
            bad.append(f"{f}: the first record is not file_version brain.Event:2")
        if len(events) < 2 or events[1].session_log.status != 1:  # START
            bad.append(f"{f}: the second record is not a SessionLog START")
        # every record read whole: the file's size is the sum of the framed records
        size = os.path.getsize(f)
        with open(f, "rb") as fh:
            data = fh.read()
        pos = n = 0
        while pos + 12 <= size:
            (length,) = struct.unpack_from("<Q", data, pos)
            pos += 12 + length + 4
            n += 1
        if pos != size or n != len(events):
            bad.append(f"{f}: {n} framed records in {size} bytes, the reader gave {len(events)}")
    rows = [json.loads(x) for x in open(os.path.join(run, "metrics.jsonl"))]
    acc = event_accumulator.EventAccumulator(tbdir)
    acc.Reload()
    keys = sorted({k for r in rows for k in r} - {"step", "time"})
    got_tags = sorted(acc.Tags()["scalars"])
    if got_tags != keys:
        bad.append(f"tags {got_tags} != metrics.jsonl keys {keys}")
    for t in tags:
        if t not in got_tags:
            bad.append(f"no tag {t}")
    values = 0
    for k in keys:
        if k not in got_tags:
            continue
        want = [(r["step"], f32(r[k])) for r in rows if k in r]
        got = [(s.step, s.value) for s in acc.Scalars(k)]
        if got != want:
            bad.append(f"{k}: event file {got} != metrics.jsonl {want}")
        times = {r["step"]: r["time"] for r in rows}
        for s in acc.Scalars(k):
            if abs(s.wall_time - times.get(s.step, -1)) > 6e-4:
                bad.append(f"{k} step {s.step}: wall_time {s.wall_time} != time {times.get(s.step)}")
                break
        values += len(got)
    if not bad:
        print(f"{tbdir}: {nfiles} files, {records} records; {values} scalars of {len(keys)} tags == metrics.jsonl")
    return bad


def main():
    args = sys.argv[1:]
    bad = []
    while args:
        case = args[: args.index("--")] if "--" in args else args
        args = args[len(case) + 1 :]
        bad += check(case[0], case[1], int(case[2]), case[3:])
    for b in bad:
        print(b)
    sys.exit(1 if bad else 0)


main()
