# The fifth round of issue 15 (sourced by run.sh --round5 --long N; not run on its own):
# the long warm K = 4, H = 100 rows again, now continuing dp4_lenN's own schedule exactly
# (--init-step 1: the run starts at the checkpoint's step with DP's --steps/--warmup/--lr/
# --min-lr-ratio and DP's seed, so the learning rate, the data windows and AdamW's step
# count go on as DP's would). The earlier rows' binary (WORK/atoll) has no --init-step,
# so these rows run a second snapshot, WORK/atoll-v5, made once from build/atoll. Row 0
# checks that the new binary still gives the old one's DP numerics.
ATOLL5="$WORK/atoll-v5"
if [ ! -x "$ATOLL5" ]; then
  [ -x "$ROOT/build/atoll" ] || { echo "run.sh --round5: build atoll first (build/atoll missing)" >&2; exit 2; }
  cp "$ROOT/build/atoll" "$ATOLL5.new" && mv "$ATOLL5.new" "$ATOLL5"
fi
ATOLL=$ATOLL5
SHA=$(sha256sum "$ATOLL" | cut -c1-64)
LR=$(cat "$WORK/inner_lr") SEED=1337
SL=$((LONG * S)) WL=$((LONG * S / 5)) EV=$((S / 20 > 0 ? S / 20 : 1))
DPL="--steps $SL --warmup $((SL / 20)) --min-lr-ratio 0.1 --eval-every $EV --lr $LR --seed $SEED"
R5ROWS="dp4_len${LONG}_v5_to100 dp4_len${LONG}_v5 k4_h100_cont_len$LONG k4_h100_cont40_len$LONG k4_h100_cont_len${LONG}_blocks"
round_start 5 "$R5ROWS"
# 0. sanity: dp4_lenN's command (up to --save-every) with the new binary, stopped at step
# 100; report.py compares its losses with dp4_lenN's first 100 steps
run_row dp4_len${LONG}_v5_to100 4 "$BASE $DPL --save-every 0 --stop-after 100" dp4_len$LONG
CKL=$(printf '%s/rows/dp4_len%s/run/checkpoints/step_%08d' "$WORK" "$LONG" "$WL")
CK40L=$(printf '%s/rows/dp4_len%s/run/checkpoints/step_%08d' "$WORK" "$LONG" $((2 * WL)))
DIL="--save-every 0 $WAN"
cont() { echo "$DPL --init-from $1 --init-optim 1 --init-step 1 $DIL --islands 4 --sync-every $(h 100) --outer-optimizer nesterov --outer-lr 0.7 --outer-momentum 0.9"; }
# 1. from DP's 20% checkpoint (against k4_h100_warm_lenN: restarted schedule, seed + 100)
run_row k4_h100_cont_len$LONG 4 "$BASE $(cont "$CKL")" dp4_len$LONG "$CKL"
# 1b. the new binary's rounding differs from the old one's (row 0 is not bit for bit): DP's
# whole long run with the new binary, to see what that alone does to the final loss
run_row dp4_len${LONG}_v5 4 "$BASE $DPL --save-every $WL --keep 6" dp4_len$LONG
# 2. from DP's 40% checkpoint (against k4_h100_warm40_lenN)
run_row k4_h100_cont40_len$LONG 4 "$BASE $(cont "$CK40L")" dp4_len$LONG "$CK40L"
# 3. row 1 with island k on the k-th contiguous run of the path-sorted source files
run_row k4_h100_cont_len${LONG}_blocks 4 "$BASE $(cont "$CKL") --island-data blocks" dp4_len$LONG "$CKL"
report
exit 0
