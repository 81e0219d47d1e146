#!/bin/sh
# What a run shows outside atoll: scripts/plot_runs.py draws a PNG of a run's loss and
# val_loss (and refuses a directory without metrics.jsonl in one line); a run without
# --tensorboard writes no event file; with --tensorboard DIR, TensorBoard's own readers
# (the PyPI venv) read the event files back with exactly metrics.jsonl's numbers as
# float32 (tests/cli/tb_events_check.py): --eval-data's val_loss_NAME, a resume from an
# earlier checkpoint (a second file; TensorBoard shows the resumed steps, not the
# replaced ones; the directory carried by the checkpoint), 2 DiLoCo islands' numbers;
# a directory that cannot be made gets one line; a full disk stops the run in one line.
# usage: test_tensorboard.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/mpi/mpi_common.sh"
small_data
M="$TINY --data $TMP/data --warmup 2 --eval-every 3 --save-every 3 --log-every 1"

# plot_runs.py, on a machine without TensorBoard: /usr/bin/python3 with Debian's matplotlib
$ATOLL train $M --steps 4 --out "$TMP/p" >/dev/null 2>"$TMP/p.err" || fail "4-step run: $(tail -1 "$TMP/p.err")"
[ -z "$(find "$TMP/p" -name '*tfevents*')" ] && pass "no --tensorboard: no event file" || fail "an event file without --tensorboard"
if $PY -c "import matplotlib" 2>/dev/null; then
  $PY "$SRC/scripts/plot_runs.py" "$TMP/p" --out "$TMP/p.png" 2>"$TMP/plot.err" || fail "plot_runs.py: $(cat "$TMP/plot.err")"
  [ "$(head -c 8 "$TMP/p.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && [ "$(wc -c <"$TMP/p.png")" -gt 1000 ] \
    && pass "plot_runs.py: a PNG of $(wc -c <"$TMP/p.png") bytes" || fail "plot_runs.py wrote no PNG"
  expect_error "plot_runs.py on a directory without metrics.jsonl" "$TMP/data/metrics.jsonl" $PY "$SRC/scripts/plot_runs.py" "$TMP/data" --out "$TMP/q.png"
else
  fail "/usr/bin/python3 lacks matplotlib (scripts/setup.sh installs python3-matplotlib)"
fi
expect_error "--tensorboard under /proc" "/proc/atoll_tb" $ATOLL train $M --steps 1 --out "$TMP/bad" --tensorboard /proc/atoll_tb
# a full disk (a 4 KiB tmpfs in a mount namespace of its own): the run stops in one line
# naming the event file, as it does for metrics.jsonl
if unshare -m true 2>/dev/null; then
  mkdir "$TMP/fd"
  unshare -m sh -c "mount -t tmpfs -o size=4k tmpfs '$TMP/fd' && exec $ATOLL train $TINY --data '$TMP/data' --steps 80 \
    --eval-every 0 --save-every 0 --out '$TMP/fdrun' --tensorboard '$TMP/fd/tb'" >/dev/null 2>"$TMP/fd.err"
  rc=$?
  last=$(tail -1 "$TMP/fd.err")
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && echo "$last" | grep -q "tfevents.*: cannot write: No space left on device; stopping at step"
  then pass "a full disk under --tensorboard: $last"; else fail "a full disk under --tensorboard (status $rc): $last"; fi
else
  echo "skip: no mount namespace here (unshare -m): the full-disk case"
fi
[ $FAILS -eq 0 ] || finish # the rest needs the venv; a failure above is not a skip

use_venv tensorboard
# 6 steps with a second validation set, then resumed from step 3 (the checkpoint's own
# --tensorboard; step 6 moved aside): TensorBoard must show the resumed run's steps 4-6
$ATOLL train $M --steps 6 --eval-data same=$TMP/data --out "$TMP/a" --tensorboard "$TMP/a/tb" >/dev/null 2>"$TMP/a.err" \
  || fail "run with --tensorboard: $(tail -1 "$TMP/a.err")"
$ATOLL train --resume "$TMP/a/checkpoints/step_00000003" --move-newer "$TMP/aside" >/dev/null 2>"$TMP/r.err" \
  || fail "resume from step 3: $(tail -1 "$TMP/r.err")"
$MPIRUN -np 2 $ATOLL train $M --steps 4 --islands 2 --sync-every 2 --out "$TMP/k" --tensorboard "$TMP/k/tb" >/dev/null 2>"$TMP/k.err" \
  || fail "2 islands with --tensorboard: $(tail -1 "$TMP/k.err")"
# (TensorBoard's log of the purge at step 4 goes to tb.err)
if out=$("$VPY" "$SRC/tests/cli/tb_events_check.py" "$TMP/a/tb" "$TMP/a" 2 val_loss_same \
  -- "$TMP/k/tb" "$TMP/k" 1 outer_syncs inter_island_bytes 2>"$TMP/tb.err"); then pass "$out"
else fail "event files: $out $(tail -3 "$TMP/tb.err")"; fi
finish
