# The sixth round of issue 15 (sourced by run.sh --round6 --long N; not run on its own):
# the streaming target and the split grid's top end, on the fifth round's binary
# WORK/atoll-v5 (run --round5 first; this round never copies build/atoll). Every row is
# the fifth round's k4_h100_cont_lenN (--init-step 1: DP's own schedule, seed and AdamW
# step count go on) with one knob changed. Two rows run at once (2 cores), never more.
ATOLL5="$WORK/atoll-v5"
[ -x "$ATOLL5" ] || { echo "run.sh --round6: $ATOLL5 missing (run.sh --long $LONG --round5 makes it)" >&2; exit 2; }
ATOLL=$ATOLL5
SHA=$(sha256sum "$ATOLL" | cut -c1-64)
LR=$(cat "$WORK/inner_lr") SEED=1337
SL=$((LONG * S)) WL=$((LONG * S / 5)) EV=$((S / 20 > 0 ? S / 20 : 1))
W25=$((LONG * S / 4)) # the 25% split (step 750 at --long 3)
DPL="--steps $SL --warmup $((SL / 20)) --min-lr-ratio 0.1 --eval-every $EV --lr $LR --seed $SEED"
CKL=$(printf '%s/rows/dp4_len%s/run/checkpoints/step_%08d' "$WORK" "$LONG" "$WL")
CK40L=$(printf '%s/rows/dp4_len%s/run/checkpoints/step_%08d' "$WORK" "$LONG" $((2 * WL)))
DIL="--save-every 0 $WAN"
# flags of a continued warm row from checkpoint $1 at H = $2 and outer lr $3
cont() { echo "$DPL --init-from $1 --init-optim 1 --init-step 1 $DIL --islands 4 --sync-every $(h $2) --outer-optimizer nesterov --outer-lr $3 --outer-momentum 0.9"; }
R6ROWS="k4_h100_cont40_len${LONG}_stream_fp4 k4_h150_cont40_len${LONG}_stream_fp4 k4_h100_cont_len${LONG}_olr0.4 dp4_len${LONG}_v5_from${WL}_to$W25 k4_h100_cont25_len$LONG k4_h150_cont_len${LONG}_fp4 k4_h100_cont40_len${LONG}_stream_fp4_seed2"
round_start 6 "$R6ROWS"
# Two lanes at once (2 cores): A = 1. streaming fp4 from the 40% split, then 3a. the 25%
# split's checkpoint (DP continued exactly from its 20% checkpoint to step W25: dp4_lenN's
# flags, --init-step 1, stopped with a checkpoint; report.py compares its losses with
# dp4_lenN's) and 3. the islands from it; B = 2. the 20% split at outer lr 0.4, then
# 4. fp4 without streaming at H = 150 from the 20% split.
CK25=$(printf '%s/rows/dp4_len%s_v5_from%s_to%s/run/checkpoints/step_%08d' "$WORK" "$LONG" "$WL" "$W25" "$W25")
(
  run_row k4_h100_cont40_len${LONG}_stream_fp4 4 "$BASE $(cont "$CK40L" 100 0.7) $STREAM" dp4_len$LONG "$CK40L"
  run_row dp4_len${LONG}_v5_from${WL}_to$W25 4 "$BASE $DPL --init-from $CKL --init-optim 1 --init-step 1 --save-every $W25 --keep 6 --stop-after $W25" dp4_len$LONG "$CKL"
  run_row k4_h100_cont25_len$LONG 4 "$BASE $(cont "$CK25" 100 0.7)" dp4_len$LONG "$CK25"
) & LANE_A=$!
(
  run_row k4_h100_cont_len${LONG}_olr0.4 4 "$BASE $(cont "$CKL" 100 0.4)" dp4_len$LONG "$CKL"
  run_row k4_h150_cont_len${LONG}_fp4 4 "$BASE $(cont "$CKL" 150 0.7) --outer-dtype fp4" dp4_len$LONG "$CKL"
) & LANE_B=$!
wait $LANE_A || exit 1
wait $LANE_B || exit 1
# 1b. streaming fp4 at H = 150 from the 40% split, asked for only if row 1 stays under
# 1000x fewer bytes than DP's whole run (it does not at --long 3: see README.md)
if [ "${ROUND6_H150:-0}" = 1 ]; then
  run_row k4_h150_cont40_len${LONG}_stream_fp4 4 "$BASE $(cont "$CK40L" 150 0.7) $STREAM" dp4_len$LONG "$CK40L"
fi
# 1c. ROUND6_SEED2=1: row 1 on seed 2 (its margin to 3% is under the seed noise), from
# dp4_lenN_seed2's 40% checkpoint (the fourth round's DP run of seed 2, the earlier binary)
# with DP's seed 2 continued; compared with dp4_lenN_seed2
if [ "${ROUND6_SEED2:-0}" = 1 ]; then
  CK40L2=$(printf '%s/rows/dp4_len%s_seed2/run/checkpoints/step_%08d' "$WORK" "$LONG" $((2 * WL)))
  run_row k4_h100_cont40_len${LONG}_stream_fp4_seed2 4 "$BASE $(cont "$CK40L2" 100 0.7 | sed "s/--seed $SEED /--seed 2 /") $STREAM" dp4_len${LONG}_seed2 "$CK40L2"
fi
report
exit 0
