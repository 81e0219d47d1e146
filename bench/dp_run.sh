#!/usr/bin/env bash
# Data-parallel benchmark of issue 3 (b, c, d) in one run (see bench/README.md).
#
#   bench/dp_run.sh [--quick] [--rounds N] [--steps N] [--mem-rounds N] [--no-single]
#                   [--no-torch2] [--no-grad-bf16] [--results FILE] [--keep]
#
# (b) 2-rank DDP throughput: atoll (mpirun -np 2) against PyTorch DDP (gloo), one thread
#     per rank, same global batch, interleaved rounds, medians; plus both peers as one
#     process (scaling reference) unless --no-single. Debian's PyTorch 1.13 is the
#     reference of the ratio; PyTorch 2.x from the PyPI venv (scripts/venv.sh or
#     ATOLL_PYTHON; SDPA attention) runs as a further peer unless --no-torch2, and
#     unless --no-grad-bf16 atoll --grad-dtype bf16 and PyTorch 2.x with DDP's
#     bf16_compress_hook run as extra rows (gradients in bf16 on the wire).
# (c) peak memory per rank at N = 4 for ZeRO stages 0-3 against the formula.
# (d) fraction of gradient communication hidden behind backward: atoll DDP with 4 MiB
#     buckets (overlapped) against one bucket sent after backward.
# Writes bench/dp_results.json and prints Markdown tables on stdout (progress on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

ROUNDS=3
STEPS=10
MEM_ROUNDS=3
MEM_STEPS=4
SINGLE=1
TORCH2=1
GRAD_BF16=1
RESULTS="$ROOT/bench/dp_results.json"
KEEP=0
QUICK=0
PY=/usr/bin/python3
# (b)/(d): the issue's model, batch 8 per rank, 2 ranks (fixed: the tables compare this only)
L=6 H=6 C=384 T=256 B=8 V=256 NP=2
# (c): a model whose parameters dominate its memory, at 4 ranks, and the tiny baseline
ML=8 MH=4 MC=256 MT=16 MB=1 MNP=4
BL=1 BH=1 BC=8
OVERLAP_MB=4       # atoll's default bucket
NO_OVERLAP_MB=4096 # larger than the whole gradient (the flag's maximum): one bucket, after backward
SMALL_SEG=16384 SMALL_WINDOW=1  # (c): ring segments of 64 KiB, one in flight (src/comm/comm.c)

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; ROUNDS=1; STEPS=5; MEM_ROUNDS=1; MEM_STEPS=3 ;;
    --rounds) ROUNDS="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    --mem-rounds) MEM_ROUNDS="$2"; shift ;;
    --no-single) SINGLE=0 ;;
    --no-torch2) TORCH2=0 ;;
    --no-grad-bf16) GRAD_BF16=0 ;;
    --results) RESULTS="$2"; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "dp_run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
for v in "$ROUNDS" "$STEPS" "$MEM_ROUNDS"; do
  case "$v" in *[!0-9]*|"") echo "dp_run.sh: --rounds, --steps and --mem-rounds take integers" >&2; exit 2 ;; esac
done
if [ "$ROUNDS" -lt 1 ] || [ "$MEM_ROUNDS" -lt 1 ] || [ "$STEPS" -lt 5 ]; then
  echo "dp_run.sh: need --rounds >= 1, --mem-rounds >= 1 and --steps >= 5" >&2; exit 2
fi
# Warm-up steps left out of each run's median: atoll's rule (src/train/train_report.c),
# applied to PyTorch too.
if [ "$STEPS" -gt 6 ]; then SKIP=3; else SKIP=1; fi
[ -x "$PY" ] || { echo "dp_run.sh: $PY not found (Debian's python3 with python3-torch)" >&2; exit 1; }
"$PY" -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null \
  || { echo "dp_run.sh: $PY cannot import torch with gloo (apt install python3-torch)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "dp_run.sh: mpirun not found (apt install openmpi-bin)" >&2; exit 1; }

log() { echo "[dp-bench $(date +%H:%M:%S)] $*" >&2; }

# PyTorch 2.x from the PyPI venv: a further peer; left out with a note when missing.
PY2=""
if [ "$TORCH2" = 1 ]; then
  PY2=${ATOLL_PYTHON:-}
  if [ -z "$PY2" ] && [ -f scripts/venv.sh ]; then PY2=$(bash scripts/venv.sh 2>/dev/null || true); fi
  if [ -z "$PY2" ] || ! "$PY2" -c "import torch, torch.distributed as d; assert int(torch.__version__.split('.')[0]) >= 2 and d.is_gloo_available()" 2>/dev/null; then
    log "no PyTorch 2 with gloo (set ATOLL_PYTHON or provide scripts/venv.sh): its rows left out"
    TORCH2=0
  fi
fi

# Open MPI: -q keeps banners out of the logs, --oversubscribe allows 4 ranks on 2 cores.
# MPICH's mpirun needs neither.
MPI_VERSION=$(mpirun --version 2>&1 | head -1)
if echo "$MPI_VERSION" | grep -q "Open MPI"; then
  MPIRUN=(mpirun -q --oversubscribe)
  [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
else
  MPIRUN=(mpirun)
fi

log "building atoll"
[ -f build/CMakeCache.txt ] || cmake -S . -B build >/dev/null
cmake --build build --target atoll -j"$(nproc)" >/dev/null

TMP=$(mktemp -d "${TMPDIR:-/tmp}/atoll-dp-bench.XXXXXX")
cleanup() { if [ "$KEEP" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi; }
trap cleanup EXIT
log "work directory $TMP"
# Every round runs this one copy, so a rebuild elsewhere during the run changes nothing.
cp build/atoll "$TMP/atoll"
ATOLL="$TMP/atoll"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

log "preparing the default corpus (/usr/share/games/fortunes)"
"$ATOLL" prepare --text /usr/share/games/fortunes --out "$TMP/data" >"$TMP/prepare.log" 2>&1 \
  || { cat "$TMP/prepare.log" >&2; exit 1; }

# atoll train; $1: run name, $2: ranks (0: no launcher), the rest: flags. Keeps summary.json
# and metrics.jsonl. RUN_ENV (an array of VAR=value) goes into the ranks' environment.
RUN_ENV=()
atoll_run() {
  local name=$1 np=$2; shift 2
  local launch=()
  [ "$np" -gt 0 ] && launch=("${MPIRUN[@]}" -np "$np")
  timeout 1200 env "${RUN_ENV[@]}" "${launch[@]}" "$ATOLL" train "$@" --eval-every 0 --save-every 0 --eval-batches 1 \
    --data "$TMP/data" --out "$TMP/$name" >"$TMP/$name.log" 2>&1 \
    || { log "atoll run $name failed:"; tail -20 "$TMP/$name.log" >&2; exit 1; }
  cp "$TMP/$name/summary.json" "$TMP/$name.json"
  cp "$TMP/$name/metrics.jsonl" "$TMP/$name.metrics.jsonl"
  rm -rf "${TMP:?}/$name"
}
BIG=(--layers "$L" --heads "$H" --dim "$C" --context "$T" --vocab "$V" --batch "$B" --threads 1 --steps "$STEPS" --warmup 2)
TORCH_SHAPE=(--threads 1 --steps "$STEPS" --skip "$SKIP" --layers "$L" --heads "$H" --dim "$C" --context "$T" --batch "$B" --vocab "$V")
torch2_ddp() { # name, then torch_ddp.py flags
  local name=$1; shift
  "$PY2" bench/torch_ddp.py --world $NP "${TORCH_SHAPE[@]}" --attention sdpa "$@" >"$TMP/$name.json" 2>"$TMP/$name.log" \
    || { tail -20 "$TMP/$name.log" >&2; exit 1; }
}

log "(b)+(d): $ROUNDS round(s) of $STEPS steps per run (median over steps $((SKIP + 1))..$STEPS)"
for r in $(seq 1 "$ROUNDS"); do
  log "round $r/$ROUNDS: atoll DDP, $NP ranks, --bucket-mb $OVERLAP_MB (overlapped)"
  atoll_run "atoll_ddp_$r" $NP "${BIG[@]}" --bucket-mb $OVERLAP_MB
  log "round $r/$ROUNDS: PyTorch DDP (gloo), $NP ranks"
  "$PY" bench/torch_ddp.py --world $NP "${TORCH_SHAPE[@]}" >"$TMP/torch_ddp_$r.json" 2>"$TMP/torch_ddp_$r.log" \
    || { tail -20 "$TMP/torch_ddp_$r.log" >&2; exit 1; }
  if [ "$GRAD_BF16" = 1 ]; then
    log "round $r/$ROUNDS: atoll DDP, $NP ranks, --grad-dtype bf16"
    atoll_run "atoll_bf16_$r" $NP "${BIG[@]}" --bucket-mb $OVERLAP_MB --grad-dtype bf16
  fi
  if [ "$TORCH2" = 1 ]; then
    log "round $r/$ROUNDS: PyTorch 2 DDP (gloo), $NP ranks"
    torch2_ddp "torch2_ddp_$r"
    if [ "$GRAD_BF16" = 1 ]; then
      log "round $r/$ROUNDS: PyTorch 2 DDP (gloo), $NP ranks, bf16_compress_hook"
      torch2_ddp "torch2_bf16_$r" --grad-dtype bf16
    fi
  fi
  log "round $r/$ROUNDS: atoll DDP, $NP ranks, --bucket-mb $NO_OVERLAP_MB (one bucket after backward)"
  atoll_run "atoll_noovl_$r" $NP "${BIG[@]}" --bucket-mb $NO_OVERLAP_MB
  if [ "$SINGLE" = 1 ]; then
    log "round $r/$ROUNDS: atoll, one process"
    atoll_run "atoll_single_$r" 0 "${BIG[@]}"
    log "round $r/$ROUNDS: PyTorch, one process"
    "$PY" bench/torch_gpt.py "${TORCH_SHAPE[@]}" >"$TMP/torch_single_$r.json" 2>"$TMP/torch_single_$r.log" \
      || { tail -20 "$TMP/torch_single_$r.log" >&2; exit 1; }
  fi
done

log "(c): $MEM_ROUNDS round(s) of memory runs at $MNP ranks ($MEM_STEPS steps each)"
MEM=(--heads "$MH" --context "$MT" --vocab "$V" --batch "$MB" --threads 1 --steps "$MEM_STEPS" --warmup 1)
for r in $(seq 1 "$MEM_ROUNDS"); do
  log "round $r/$MEM_ROUNDS: baseline (L=$BL, C=$BC), stages 0-3 (L=$ML, C=$MC), again with small ring segments"
  atoll_run "mem_base_$r" $MNP "${MEM[@]}" --layers $BL --dim $BC --heads $BH
  for st in 0 1 2 3; do
    atoll_run "mem_s${st}_$r" $MNP "${MEM[@]}" --layers $ML --dim $MC --shard $st
  done
  # the same with the comm layer's ring receive scratch made small: 64 KiB segments, one
  # in flight, so (window + 1) x segment = 128 KiB per reduction instead of up to 12 MiB
  RUN_ENV=("ATOLL_COMM_SEGMENT=$SMALL_SEG" "ATOLL_COMM_WINDOW=$SMALL_WINDOW")
  for st in 0 1 2 3; do
    atoll_run "mem_small_s${st}_$r" $MNP "${MEM[@]}" --layers $ML --dim $MC --shard $st
  done
  RUN_ENV=()
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

CPU_MODEL=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
GIT_REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
GIT_MODIFIED=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -c . || true)
TORCH_PKG=$(dpkg-query -W -f='${Version}' python3-torch 2>/dev/null || true)
"$PY" - "$TMP" "$RESULTS" rounds="$ROUNDS" steps="$STEPS" skip="$SKIP" mem_rounds="$MEM_ROUNDS" \
  mem_steps="$MEM_STEPS" quick="$QUICK" single="$SINGLE" torch2="$TORCH2" grad_bf16="$GRAD_BF16" L=$L H=$H C=$C T=$T B=$B V=$V NP=$NP \
  ML=$ML MH=$MH MC=$MC MT=$MT MB=$MB MNP=$MNP BL=$BL BH=$BH BC=$BC overlap_mb=$OVERLAP_MB \
  no_overlap_mb=$NO_OVERLAP_MB small_seg=$SMALL_SEG small_window=$SMALL_WINDOW cpu="$CPU_MODEL" cores="$(nproc)" mpi="$MPI_VERSION" git="$GIT_REV" \
  git_modified="$GIT_MODIFIED" load_start="$LOAD_START" load_end="$LOAD_END" torch_pkg="$TORCH_PKG" <<'EOF'
import datetime, json, math, os, statistics, sys

tmp, results = sys.argv[1:3]
kv = dict(a.split("=", 1) for a in sys.argv[3:])
n = {k: int(v) for k, v in kv.items() if v.lstrip("-").isdigit()}
rounds, steps, skip, mem_rounds, mem_steps = n["rounds"], n["steps"], n["skip"], n["mem_rounds"], n["mem_steps"]
quick, single = n["quick"] == 1, n["single"] == 1
torch2, grad_bf16 = n["torch2"] == 1, n["grad_bf16"] == 1
L, H, C, T, B, V, NP = (n[k] for k in ("L", "H", "C", "T", "B", "V", "NP"))
ML, MH, MC, MT, MB, MNP = (n[k] for k in ("ML", "MH", "MC", "MT", "MB", "MNP"))
BL, BH, BC = n["BL"], n["BH"], n["BC"]
MiB = float(1 << 20)
med = statistics.median
PAGE = os.sysconf("SC_PAGE_SIZE")


def load(name):
    with open(os.path.join(tmp, name)) as f:
        return json.load(f)


R = range(1, rounds + 1)
MR = range(1, mem_rounds + 1)

# ---------------------------------------------------------------- (b) throughput ---
ad = [load(f"atoll_ddp_{r}.json") for r in R]
an = [load(f"atoll_noovl_{r}.json") for r in R]
td = [load(f"torch_ddp_{r}.json") for r in R]
aS = [load(f"atoll_single_{r}.json") for r in R] if single else []
tS = [load(f"torch_single_{r}.json") for r in R] if single else []
for x in ad + an:
    assert x["world_size"] == NP and x["tokens_per_step"] == B * T * NP, "atoll DDP run has the wrong shape"
for x in td:
    assert x["world_size"] == NP and x["tokens_per_step"] == B * T * NP and x["weights_identical"]
assert ad[0]["params"] == td[0]["params"], ("parameter counts differ", ad[0]["params"], td[0]["params"])


def step_seconds(name):
    """Every step's seconds from atoll's metrics.jsonl (tokens per step / tokens_per_s)."""
    s = load(name + ".json")
    with open(os.path.join(tmp, name + ".metrics.jsonl")) as f:
        return [s["tokens_per_step"] / json.loads(line)["tokens_per_s"] for line in f if line.strip()]


def atoll_row(runs, label, ranks, name):
    row = {
        "step_seconds_rounds": [step_seconds(f"{name}_{r}") for r in R],
        "peer": label, "ranks": ranks, "threads_per_rank": 1,
        "tokens_per_step": runs[0]["tokens_per_step"],
        "tokens_per_second": med([x["tokens_per_second"] for x in runs]),
        "tokens_per_second_rounds": [x["tokens_per_second"] for x in runs],
        "median_step_seconds": med([x["median_step_seconds"] for x in runs]),
        "comm_wait_seconds_per_step": med([x["comm_wait_seconds"] / x["steps"] for x in runs]),
        "peak_rss_bytes_per_rank": med([x["peak_rss_bytes"] for x in runs]),
    }
    row["fastest_step_tokens_per_second"] = med([row["tokens_per_step"] / min(st[skip:])
                                                for st in row["step_seconds_rounds"]])
    return row


def torch_row(runs, label, ranks):
    row = {
        "step_seconds_rounds": [x["step_seconds"] for x in runs],
        "peer": label, "ranks": ranks, "threads_per_rank": runs[0]["threads"],
        "tokens_per_step": B * T * ranks,
        "tokens_per_second": med([x["tokens_per_second"] for x in runs]),
        "tokens_per_second_rounds": [x["tokens_per_second"] for x in runs],
        "median_step_seconds": med([x["median_step_seconds"] for x in runs]),
        "comm_wait_seconds_per_step": None,
        "peak_rss_bytes_per_rank": med([x["peak_rss_bytes"] for x in runs]),
    }
    row["fastest_step_tokens_per_second"] = med([row["tokens_per_step"] / min(st[skip:])
                                                for st in row["step_seconds_rounds"]])
    return row


rows = {"atoll_ddp": atoll_row(ad, "atoll DDP", NP, "atoll_ddp"), "torch_ddp": torch_row(td, "PyTorch DDP (gloo)", NP)}
rows["torch_ddp"]["bucket_cap_mb"] = td[0]["bucket_cap_mb"]
rows["atoll_ddp"]["bucket_mb"] = n["overlap_mb"]
if single:
    rows["atoll_single"] = atoll_row(aS, "atoll, one process", 1, "atoll_single")
    rows["torch_single"] = torch_row(tS, "PyTorch, one process", 1)
    rows["atoll_ddp"]["scaling_efficiency"] = rows["atoll_ddp"]["tokens_per_second"] / (NP * rows["atoll_single"]["tokens_per_second"])
    rows["torch_ddp"]["scaling_efficiency"] = rows["torch_ddp"]["tokens_per_second"] / (NP * rows["torch_single"]["tokens_per_second"])
# extra rows: atoll with bf16 gradients on the wire, PyTorch 2.x DDP (fp32, bf16 hook)
ab = [load(f"atoll_bf16_{r}.json") for r in R] if grad_bf16 else []
t2 = [load(f"torch2_ddp_{r}.json") for r in R] if torch2 else []
t2b = [load(f"torch2_bf16_{r}.json") for r in R] if torch2 and grad_bf16 else []
for x in ab:
    assert x["world_size"] == NP and x["config"]["grad-dtype"] == "bf16"
for x in t2 + t2b:
    assert x["world_size"] == NP and x["weights_identical"] and x["params"] == ad[0]["params"]
if ab:
    rows["atoll_ddp_bf16"] = atoll_row(ab, "atoll DDP, --grad-dtype bf16", NP, "atoll_bf16")
    rows["atoll_ddp_bf16"]["bytes_sent_per_step_per_rank"] = max(ab[0]["bytes_sent_per_step_per_rank"])
    rows["atoll_ddp"]["bytes_sent_per_step_per_rank"] = max(ad[0]["bytes_sent_per_step_per_rank"])
if t2:
    v2 = t2[0]["torch_version"]
    rows["torch2_ddp"] = torch_row(t2, f"PyTorch {v2} DDP (gloo, SDPA)", NP)
    rows["torch2_ddp"]["bucket_cap_mb"] = t2[0]["bucket_cap_mb"]
if t2b:
    rows["torch2_ddp_bf16"] = torch_row(t2b, f"PyTorch {t2b[0]['torch_version']} DDP (gloo, SDPA), bf16_compress_hook", NP)
tdb = rows["torch_ddp"]["tokens_per_second"]
for row in rows.values():
    row["ratio_vs_pytorch_ddp"] = row["tokens_per_second"] / tdb
    if t2:
        row["ratio_vs_pytorch2_ddp"] = row["tokens_per_second"] / rows["torch2_ddp"]["tokens_per_second"]
ratio = rows["atoll_ddp"]["ratio_vs_pytorch_ddp"]
ratio_rounds = [a["tokens_per_second"] / t["tokens_per_second"] for a, t in zip(ad, td)]
ratio_fastest = rows["atoll_ddp"]["fastest_step_tokens_per_second"] / rows["torch_ddp"]["fastest_step_tokens_per_second"]

# ------------------------------------------------------------------ (d) overlap ---
def wait_stats(runs):
    return {
        "median_step_seconds": med([x["median_step_seconds"] for x in runs]),
        "comm_wait_seconds_per_step_largest_rank": med([x["comm_wait_seconds"] / x["steps"] for x in runs]),
        "comm_wait_seconds_per_step_smallest_rank": med([min(x["comm_wait_seconds_per_rank"]) / x["steps"] for x in runs]),
        "comm_wait_seconds_rounds": [x["comm_wait_seconds"] for x in runs],
        "comm_wait_seconds_per_rank_rounds": [x["comm_wait_seconds_per_rank"] for x in runs],
        "allreduce_calls_per_step": runs[0]["calls"]["allreduce"] / runs[0]["steps"],
        "bytes_sent_per_step_per_rank": max(runs[0]["bytes_sent_per_step_per_rank"]),
        "tokens_per_second": med([x["tokens_per_second"] for x in runs]),
    }


ov, no = wait_stats(ad), wait_stats(an)
no["step_seconds_rounds"] = [step_seconds(f"atoll_noovl_{r}") for r in R]
ov["step_seconds_rounds"] = rows["atoll_ddp"]["step_seconds_rounds"]
for x in (ov, no):
    x["fastest_step_seconds"] = med([min(st[skip:]) for st in x["step_seconds_rounds"]])
ov["bucket_mb"], no["bucket_mb"] = n["overlap_mb"], n["no_overlap_mb"]


def hidden(a, b):
    return 1.0 - a / b if b > 0 else None


overlap = {
    "overlapped": ov,
    "not_overlapped": no,
    "hidden_fraction": hidden(ov["comm_wait_seconds_per_step_largest_rank"], no["comm_wait_seconds_per_step_largest_rank"]),
    "hidden_fraction_smallest_rank": hidden(ov["comm_wait_seconds_per_step_smallest_rank"], no["comm_wait_seconds_per_step_smallest_rank"]),
    "hidden_fraction_rounds": [hidden(a["comm_wait_seconds"], b["comm_wait_seconds"]) for a, b in zip(ad, an)],
    "definition": "1 - comm_wait_seconds(--bucket-mb 4) / comm_wait_seconds(one bucket after backward); "
                  "comm_wait_seconds is the largest rank's time blocked in waits over all steps (per step here)",
}

# ------------------------------------------------------------------- (c) memory ---
base = [load(f"mem_base_{r}.json") for r in MR]
mem = {st: [load(f"mem_s{st}_{r}.json") for r in MR] for st in range(4)}
mem_small = {st: [load(f"mem_small_s{st}_{r}.json") for r in MR] for st in range(4)}


def per_rank_median(runs, key="train_peak_rss_bytes_per_rank"):
    return [med([x[key][i] for x in runs]) for i in range(len(runs[0][key]))]


def act_bytes(Lx, Cx, Hx, Bx, Tx, Vx):
    """Activation and work buffers as src/model/gpt_create.c allocates them: each its own
    mapping of one header page plus its data rounded up to pages."""
    Nt = Bx * Tx
    pages = lambda floats: PAGE * (1 + math.ceil(4 * floats / PAGE))
    block = [Nt * Cx, Nt, Nt, 3 * Nt * Cx, Nt * Cx, Bx * Hx * Tx, Nt * Cx, Nt * Cx, Nt, Nt,
             4 * Nt * Cx, 4 * Nt * Cx, Nt * Cx]
    rest = [Nt * Cx, Nt * Cx, Nt, Nt, Nt * Vx, Nt, Nt, Nt * Cx, Nt * Cx, 3 * Nt * Cx, 4 * Nt * Cx, Nt, Nt]
    return Lx * sum(pages(f) for f in block) + sum(pages(f) for f in rest) + 2 * PAGE  # + params/grads headers


P = mem[0][0]["params"]
Pb = base[0]["params"]
blk = 12 * MC * MC + 13 * MC
emb = V * MC + MT * MC
lnf = 2 * MC
assert P == emb + ML * blk + lnf, ("layout differs from the formula", P, emb + ML * blk + lnf)
S = -(-P // MNP)  # shard: ceil(P / N)
act = act_bytes(ML, MC, MH, MB, MT, V)
act_base = act_bytes(BL, BC, BH, MB, MT, V)
base_ranks = per_rank_median(base)
base_measured = max(base_ranks)
baseline = base_measured - 16 * Pb - act_base  # the process without model state
state = {0: 16 * P, 1: 8 * P + 8 * S, 2: 4 * P + 12 * S, 3: 16 * S}
state_text = {0: "16 P", 1: "4P + 4P + 8P/N", 2: "4P + 4P/N + 8P/N", 3: "16P/N"}
transient = {0: 0, 1: 0, 2: 2 * 4 * blk + 4 * emb, 3: 2 * 8 * blk + 8 * (emb + lnf)}
transient_text = {0: "-", 1: "-", 2: "2 blocks' grads + embedding grads",
                  3: "2 blocks' weights + grads, embeddings + ln_f weights + grads"}
memory = {"params": P, "ranks": MNP, "shard_params": S, "block_params": blk, "embedding_params": emb,
          "ln_f_params": lnf, "activation_bytes": act, "baseline_model_params": Pb,
          "baseline_measured_bytes_per_rank": base_ranks, "baseline_bytes": baseline, "stages": {}}
for st in range(4):
    ranks = per_rank_median(mem[st])
    small = per_rank_median(mem_small[st])
    formula = baseline + state[st] + transient[st] + act
    memory["stages"][str(st)] = {
        "small_ring_scratch_measured_bytes_per_rank": small,
        "small_ring_scratch_measured_bytes_largest_rank": max(small),
        "small_ring_scratch_difference_bytes": max(small) - formula,
        "measured_bytes_per_rank": ranks,
        "measured_bytes_largest_rank": max(ranks),
        "model_state_bytes": state[st],
        "transient_bytes": transient[st],
        "formula_bytes": formula,
        "difference_bytes": max(ranks) - formula,
        "measured_rounds": [x["train_peak_rss_bytes_per_rank"] for x in mem[st]],
    }

# ----------------------------------------------------------------------- output ---
info = {
    "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    "cpu_model": kv["cpu"], "cores": n["cores"], "mpi": kv["mpi"],
    "torch_version": td[0]["torch_version"], "torch_package": kv["torch_pkg"],
    "atoll_commit": kv["git"], "atoll_tracked_files_modified": n["git_modified"],
    "load_average_start": kv["load_start"], "load_average_end": kv["load_end"],
}
noise = "QUICK SMOKE RUN, not a benchmark result. " if quick else ""
md = []
md.append(f"**(b) 2-rank DDP throughput.** {noise}Model L={L}, H={H}, C={C}, T={T}, V={V}, {ad[0]['params'] / 1e6:.1f} M "
          f"parameters; batch {B} per rank, global batch {B * NP} x {T} = {B * T * NP} tokens per step; AdamW, clip 1.0; "
          f"one thread per rank. {steps} steps per run, median over steps {skip + 1}..{steps}, then median over "
          f"{rounds} interleaved round(s).")
md.append("")
md.append("| peer | ranks x threads | tokens/s | ratio vs PyTorch DDP | median step s | comm wait / step s | scaling vs 1 process | tokens/s, fastest step | peak RSS / rank MiB |")
md.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for key in ("atoll_ddp", "torch_ddp", "atoll_ddp_bf16", "torch2_ddp", "torch2_ddp_bf16", "atoll_single", "torch_single"):
    if key not in rows:
        continue
    x = rows[key]
    cw = "-" if x["comm_wait_seconds_per_step"] is None or x["ranks"] == 1 else f"{x['comm_wait_seconds_per_step']:.3f}"
    sc = f"{100 * x['scaling_efficiency']:.0f}%" if "scaling_efficiency" in x else "-"
    md.append(f"| {x['peer']} | {x['ranks']} x {x['threads_per_rank']} | {x['tokens_per_second']:.0f} | "
              f"{x['ratio_vs_pytorch_ddp']:.2f}x | {x['median_step_seconds']:.3f} | {cw} | {sc} | "
              f"{x['fastest_step_tokens_per_second']:.0f} | "
              f"{x['peak_rss_bytes_per_rank'] / MiB:.0f} |")
md.append("")
md.append(f"atoll / PyTorch DDP: **{ratio:.2f}x** (target >= 1.5x: {'met' if ratio >= 1.5 else 'NOT met'}); per round: "
          + ", ".join(f"{x:.2f}x" for x in ratio_rounds) + f"; at each run's fastest step: {ratio_fastest:.2f}x. "
          "atoll buckets 4 MiB, PyTorch "
          f"bucket_cap_mb {td[0]['bucket_cap_mb']:g} (its default). Scaling = DDP tokens/s / ({NP} x one process's).")
extra = []
if t2:
    extra.append(f"atoll DDP / PyTorch {rows['torch2_ddp']['peer'].split()[1]} DDP: "
                 f"**{rows['atoll_ddp']['ratio_vs_pytorch2_ddp']:.2f}x** (per round: "
                 + ", ".join(f"{a['tokens_per_second'] / t['tokens_per_second']:.2f}x" for a, t in zip(ad, t2)) + ")")
if ab:
    extra.append(f"--grad-dtype bf16 sends {rows['atoll_ddp_bf16']['bytes_sent_per_step_per_rank'] / 1e6:.1f} MB per step "
                 f"per rank against fp32's {rows['atoll_ddp']['bytes_sent_per_step_per_rank'] / 1e6:.1f} MB; its tokens/s "
                 f"over fp32 gradients: {rows['atoll_ddp_bf16']['tokens_per_second'] / rows['atoll_ddp']['tokens_per_second']:.2f}x")
if ab and t2b:
    extra.append(f"bf16 gradients, atoll / PyTorch 2 with bf16_compress_hook: "
                 f"**{rows['atoll_ddp_bf16']['tokens_per_second'] / rows['torch2_ddp_bf16']['tokens_per_second']:.2f}x**")
if extra:
    md.append("")
    md.append("; ".join(extra) + ".")
md.append("")
md.append(f"**(c) Peak memory per rank, ZeRO stages 0-3 at N = {MNP}.** {noise}Model L={ML}, H={MH}, C={MC}, T={MT}, batch {MB}: "
          f"P = {P} parameters (16 P = {16 * P / MiB:.1f} MiB); {mem_steps} steps; `train_peak_rss_bytes_per_rank` "
          f"(VmHWM over the training steps), median over {mem_rounds} round(s) per rank, largest rank shown. "
          f"Formula = baseline {baseline / MiB:.1f} MiB (measured {base_measured / MiB:.1f} MiB with L={BL}, C={BC}, "
          f"same batch and sequence, less its own {(16 * Pb + act_base) / MiB:.2f} MiB of model) + model state + units in flight "
          f"+ activations {act / MiB:.1f} MiB. One block = {blk} parameters ({4 * blk / MiB:.2f} MiB per fp32 copy). "
          f"\"Small ring scratch\": the same runs with ATOLL_COMM_SEGMENT={n['small_seg']} ATOLL_COMM_WINDOW={n['small_window']} "
          f"(the comm layer's receive scratch, (window + 1) segments per reduction in flight, "
          f"cut to {(n['small_window'] + 1) * n['small_seg'] * 4 // 1024} KiB).")
md.append("")
md.append("| stage | model state (formula) | in flight | formula MiB | measured MiB (largest rank) | ranks' range MiB | measured - formula MiB | measured, small ring scratch MiB | its - formula MiB |")
md.append("|---|---|---|---:|---:|---:|---:|---:|---:|")
for st in range(4):
    m = memory["stages"][str(st)]
    rk = m["measured_bytes_per_rank"]
    diff = m["difference_bytes"]
    md.append(f"| {st}{' (DDP)' if st == 0 else ''} | {state_text[st]} = {state[st] / MiB:.1f} MiB | "
              f"{transient_text[st]}{'' if not transient[st] else f' = {transient[st] / MiB:.1f} MiB'} | "
              f"{m['formula_bytes'] / MiB:.1f} | {max(rk) / MiB:.1f} | {min(rk) / MiB:.1f}-{max(rk) / MiB:.1f} | "
              f"{diff / MiB:+.1f} ({100 * diff / m['formula_bytes']:+.0f}%) | "
              f"{m['small_ring_scratch_measured_bytes_largest_rank'] / MiB:.1f} | "
              f"{m['small_ring_scratch_difference_bytes'] / MiB:+.1f} |")
md.append("")
md.append(f"**(d) Gradient communication hidden behind backward.** {noise}The (b) model at {NP} ranks, same rounds "
          f"(the overlapped runs are (b)'s atoll DDP runs).")
md.append("")
md.append("| gradient buckets | all-reduce calls / step | median step s | fastest step s | tokens/s | comm wait / step, largest rank s | comm wait / step, smallest rank s |")
md.append("|---|---:|---:|---:|---:|---:|---:|")
for label, x in ((f"{n['overlap_mb']} MiB, started during backward", ov),
                 (f"one bucket after backward (--bucket-mb {n['no_overlap_mb']})", no)):
    md.append(f"| {label} | {x['allreduce_calls_per_step']:.0f} | {x['median_step_seconds']:.3f} | "
              f"{x['fastest_step_seconds']:.3f} | {x['tokens_per_second']:.0f} | "
              f"{x['comm_wait_seconds_per_step_largest_rank']:.3f} | {x['comm_wait_seconds_per_step_smallest_rank']:.3f} |")
md.append("")
hf, hs = overlap["hidden_fraction"], overlap["hidden_fraction_smallest_rank"]
pct = lambda v: "n/a" if v is None else f"{100 * v:.0f}%"
md.append(f"Hidden fraction = 1 - wait(overlapped) / wait(after backward): **{pct(hf)}** (largest rank's "
          f"comm_wait_seconds); {pct(hs)} by the smallest rank's wait; per round: "
          + ", ".join(pct(v) for v in overlap["hidden_fraction_rounds"])
          + f". Step time, overlapped vs not: {ov['median_step_seconds']:.3f} s vs {no['median_step_seconds']:.3f} s. "
          f"Each rank sends {ov['bytes_sent_per_step_per_rank'] / 1e6:.1f} MB per step.")
md.append("")
md.append(f"Run {info['date']} on {info['cpu_model']}, {info['cores']} cores, {info['mpi']}, torch {info['torch_version']} "
          f"(Debian python3-torch {info['torch_package']}); atoll {info['atoll_commit']}"
          + (f" with {info['atoll_tracked_files_modified']} tracked file(s) modified" if info['atoll_tracked_files_modified'] else "")
          + f". Load average at start {info['load_average_start']}, at end {info['load_average_end']} "
          "(a shared machine: numbers are noisy; rounds are interleaved and medians taken).")
markdown = "\n".join(md)

out = {
    "quick": quick,
    "rounds": rounds, "steps": steps, "steps_skipped": skip, "mem_rounds": mem_rounds, "mem_steps": mem_steps,
    "machine": info,
    "throughput": {"model": {"layers": L, "heads": H, "dim": C, "context": T, "batch_per_rank": B, "vocab": V,
                             "ranks": NP, "params": ad[0]["params"]},
                   "rows": rows, "ratio_atoll_vs_pytorch_ddp": ratio, "ratio_rounds": ratio_rounds,
                   "ratio_fastest_step": ratio_fastest,
                   "ratio_atoll_vs_pytorch2_ddp": rows["atoll_ddp"].get("ratio_vs_pytorch2_ddp"),
                   "target_ratio_at_least_1.5": ratio >= 1.5},
    "memory": {"model": {"layers": ML, "heads": MH, "dim": MC, "context": MT, "batch": MB, "vocab": V},
               "baseline_model": {"layers": BL, "heads": BH, "dim": BC}, **memory},
    "overlap": overlap,
    "markdown": markdown,
}
os.makedirs(os.path.dirname(os.path.abspath(results)), exist_ok=True)
with open(results + ".tmp", "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
os.replace(results + ".tmp", results)
print(markdown)
EOF
log "wrote $RESULTS"
