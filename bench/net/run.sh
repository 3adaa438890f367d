#!/usr/bin/env bash
# Speed of 1-bit Adam under limited bandwidth (the paper's Figure 9) on real processes and a
# real network: 4 ranks, each in its own network namespace ("host"), joined by a bridge, every
# host's link shaped with tc (tbf) to 50 Mbit/s, 200 Mbit/s, 1 Gbit/s, or left unshaped; MPI
# over TCP between them (Open MPI starts each rank in its namespace through bench/net/rsh-agent.sh).
#
# For each bandwidth and model (bench/net/specs/): onebit-worker runs of adam (fp32 ring
# allreduce) and of onebit_adam with a fixed early freeze; step times come from the step events
# (log_interval 1), per phase. bench_car times the two collectives alone, phase by phase. Once,
# unshaped: onebit_adam with freeze_step auto (the freeze step it chooses is the same at every
# bandwidth: training is deterministic) and adam for as many steps, whose wall times check the
# end-to-end estimate. The raw logs go to var/bandwidth/logs/ (git-ignored; LOGS_DIR moves them);
# bench/net/summarize.sh takes from them the TSVs of docs/bandwidth/ (committed), from which
# bench/net/report.sh writes docs/bandwidth/results.md and the plots.
#
# usage: sudo bash bench/net/run.sh [--quick] [--repeats R] [--rates "50m 200m 1g unshaped"]
#                                   [--models "mlp transformer"] [--no-auto] [--skip-runs]
#                                   [--cleanup]
#        sudo bash bench/net/run.sh --car-only --car-bin PATH --car-tag NAME
#        sudo bash bench/net/run.sh --car-ab BEFORE-BIN [--repeats R]
#   --quick      a smoke run (200m and unshaped, MLP, 1 repeat, few steps; about 1 minute),
#                written to build-net/quick/ instead of docs/bandwidth/
#   --skip-runs  rebuild table and plots from the TSVs in docs/bandwidth/ (after a sweep's raw
#                logs were changed by hand: bench/net/summarize.sh var/bandwidth/logs docs/bandwidth)
#   --car-only   only the bench_car sweep, with another bench_car binary (e.g. one built from an
#                older commit), logged as car-NAME-RATE-MODEL.json: the before/after table
#   --car-ab     before/after of the compressed allreduce alone: for every bandwidth and model, R
#                rounds of BEFORE-BIN (a bench_car built from an older commit) then this tree's
#                bench_car, one right after the other (carab-{before,after}-RATE-MODEL-rK.json)
#   --no-auto    keep the auto-freeze logs of an earlier run (to redo some rates or models)
#   --cleanup    remove namespaces and bridge left by a run that was killed
# Needs root (ip netns, tc), Open MPI, jq, gnuplot. Environment: BUILD_DIR (default build-net),
# OBNET_PREFIX / OBNET_SUBNET (names and /24 of the namespaces, default obnet / 10.231.77).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RATES="50m 200m 1g unshaped"
MODELS="mlp transformer"
REPEATS=3
QUICK=0
SKIP_RUNS=0
CAR_ONLY=0
CAR_BIN=""
CAR_TAG=""
NO_AUTO=0
CAR_AB=""
usage() {
  sed -n 's/^# usage: //p; s/^#        //p' "$0" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --skip-runs) SKIP_RUNS=1; shift ;;
    --no-auto) NO_AUTO=1; shift ;;
    --car-ab) CAR_AB=$2; shift 2 ;;
    --car-only) CAR_ONLY=1; shift ;;
    --car-bin) CAR_BIN=$2; shift 2 ;;
    --car-tag) CAR_TAG=$2; shift 2 ;;
    --cleanup)
      # shellcheck source=bench/net/netns.sh
      source bench/net/netns.sh
      obnet_down
      exit 0 ;;
    *) usage ;;
  esac
done

BUILD=${BUILD_DIR:-build-net}
OUT=docs/bandwidth
# Steps of one measurement: SETUP steps skipped (connections open lazily, caches warm), then
# MEAS steps per phase. The warmup of the 1-bit runs is FREEZE steps, SETUP of them skipped.
SETUP=3
MEAS=20
FREEZE=8
AUTO_STEPS_mlp=300 # long enough for the auto freeze (lr warmup 100, Delta = 100)
AUTO_STEPS_transformer=1000 # the whole run: at 400 steps it had not frozen
CAR_ITERS=15
if [ "$QUICK" -eq 1 ]; then
  RATES="200m unshaped"
  MODELS="mlp"
  REPEATS=1
  MEAS=6
  FREEZE=5
  AUTO_STEPS_mlp=150
  CAR_ITERS=5
  OUT=$BUILD/quick
fi
LOGS=${LOGS_DIR:-var/bandwidth/logs}
[ "$QUICK" -eq 0 ] || LOGS=$OUT/logs

if [ "$SKIP_RUNS" -eq 1 ]; then
  exec bash bench/net/report.sh "$OUT"
fi
[ "$(id -u)" -eq 0 ] || { echo "bench/net: needs root (ip netns, tc): sudo bash $0" >&2; exit 2; }
for tool in ip tc mpirun jq gnuplot cmake; do
  command -v "$tool" >/dev/null || { echo "bench/net: '$tool' not found" >&2; exit 2; }
done
if [ "$CAR_ONLY" -eq 1 ] && { [ -z "$CAR_BIN" ] || [ -z "$CAR_TAG" ]; }; then
  echo "bench/net: --car-only needs --car-bin PATH and --car-tag NAME" >&2
  exit 2
fi

echo "== build ($BUILD)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DONEBIT_CUDA=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target onebit-worker bench_car >/dev/null
mkdir -p "$LOGS"
[ -n "$CAR_BIN" ] || CAR_BIN=$ROOT/$BUILD/bin/bench_car
CAR_BIN=$(realpath "$CAR_BIN")

# shellcheck source=bench/net/netns.sh
source bench/net/netns.sh
# mpirun runs in the background (netrun waits for it), so that a signal reaches this script at
# once and the trap can end the job before the namespaces go.
# The traps are set once the namespaces are ours: a second run that finds them taken must not
# remove them.
MPIRUN_PID=""
obnet_up 4
trap '[ -z "$MPIRUN_PID" ] || kill "$MPIRUN_PID" 2>/dev/null; wait; obnet_down' EXIT
trap 'exit 130' INT TERM
HOSTFILE=$BUILD/net-hosts
for i in 0 1 2 3; do echo "$(obnet_ip "$i") slots=1"; done > "$HOSTFILE"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1 OBNET_PREFIX OBNET_SUBNET
# One rank per namespace, TCP only (no shared memory between "hosts").
netrun() {
  local rc=0
  obnet_mpirun_args "$HOSTFILE"
  mpirun "${OBNET_MPIRUN_ARGS[@]}" -np 4 --mca btl tcp,self -x OPENBLAS_NUM_THREADS "$@" &
  MPIRUN_PID=$!
  wait "$MPIRUN_PID" || rc=$?
  MPIRUN_PID=""
  return "$rc"
}

# run_worker NAME MODEL OPTIMIZER-BLOCK STEPS [PEAK-LR]: the spec in LOGS/NAME.yaml (the
# model's base spec plus optimizer, steps, log_interval 1, and the peak learning rate if given),
# the worker's JSON lines in NAME.jsonl, stderr in NAME.err, bytes every host's eth0 sent during
# the run in NAME.wire. A run whose launch fails (Open MPI's TCP wire-up now and then gives up
# on a connection) is tried once more; one that started and failed is not.
run_worker() {
  local name=$1 spec=$LOGS/$1.yaml try
  { if [ -n "${5:-}" ]; then sed "s/^  peak: .*/  peak: $5/" "bench/net/specs/$2.yaml"; else cat "bench/net/specs/$2.yaml"; fi
    echo "$3"; echo "steps: $4"; echo "log_interval: 1"; } > "$spec"
  for try in 1 2; do
    local before after
    before=$(obnet_tx_bytes)
    if netrun "$ROOT/$BUILD/bin/onebit-worker" --spec "$spec" \
      > "$LOGS/$name.jsonl" 2> "$LOGS/$name.err" < /dev/null; then
      after=$(obnet_tx_bytes)
      echo "$before" "$after" > "$LOGS/$name.wire"
      jq -r 'select(.event=="summary") | "   \(.steps) steps, \(.wall_seconds*10|round/10) s, freeze \(.freeze_step // "-")"' \
        "$LOGS/$name.jsonl"
      return 0
    fi
    echo "   attempt $try failed: $(grep -v setpgid "$LOGS/$name.err" | grep -m1 -i -E 'error|fail|unable' || tail -n1 "$LOGS/$name.err")"
    grep -q '"event":"start"' "$LOGS/$name.jsonl" && break
  done
  return 1
}

ADAM="optimizer: {type: adam, beta1: 0.9, beta2: 0.99}"
# The timing runs freeze at step FREEZE, far earlier than a real run would, and the MLP then
# diverges within some 30 steps even at a tenth of its learning rate (the frozen variance is
# still tiny). So the timing runs of both optimizers train with a peak learning rate of 1e-7:
# a step costs the same whatever the values, as long as they stay finite. The auto-freeze runs
# keep the spec's schedule.
TIMING_LR=1.0e-7
# precondition: true, the variant the MLP needs (docs/experiments/results.md); the compressed
# step costs the same either way.
onebit() { echo "optimizer: {type: onebit_adam, beta1: 0.9, beta2: 0.99, precondition: true, freeze_step: $1}"; }

params() { # number of parameters of a model, from a worker's start event
  jq -r 'select(.event=="start") | .num_params' "$LOGS/$1"
}
# the model's number of parameters from the unshaped adam run: its raw log if this machine has
# it, else the committed summary
model_params() {
  if [ -f "$LOGS/unshaped-$1-adam-r1.jsonl" ]; then params "unshaped-$1-adam-r1.jsonl"
  else awk -F'\t' -v n="unshaped-$1-adam-r1" '$1 == n { print $2 }' "$OUT/runs.tsv"; fi
}

run_car() { # TAG RATE MODEL D
  local tag=$1 rate=$2 model=$3 d=$4 iters=$CAR_ITERS try
  [ "$rate" = 50m ] && iters=5
  for try in 1 2; do
    if netrun "$CAR_BIN" --d "$d" --iters "$iters" --warmup 2 --format json \
      > "$LOGS/car-$tag-$rate-$model.json" 2> "$LOGS/car-$tag-$rate-$model.err" < /dev/null; then
      jq -r '"   bench_car \(.d): fp32 \(.fp32_s*1000|round) ms, 1-bit \(.car_s*10000|round/10) ms"' \
        "$LOGS/car-$tag-$rate-$model.json"
      return 0
    fi
    echo "   bench_car attempt $try failed"
  done
  return 1
}

T0=$(date +%s)
if [ -n "$CAR_AB" ]; then
  CAR_AB=$(realpath "$CAR_AB")
  for rate in $RATES; do
    obnet_shape "$rate"
    for model in $MODELS; do
      d=$(model_params "$model")
      for ((r = 1; r <= REPEATS; r++)); do
        for side in before after; do
          bin=$CAR_BIN
          [ "$side" = before ] && bin=$CAR_AB
          netrun "$bin" --d "$d" --iters 30 --warmup 3 --skip-fp32 --format json \
            > "$LOGS/carab-$side-$rate-$model-r$r.json" 2> /dev/null < /dev/null ||
            netrun "$bin" --d "$d" --iters 30 --warmup 3 --skip-fp32 --format json \
              > "$LOGS/carab-$side-$rate-$model-r$r.json" 2> /dev/null < /dev/null || true
        done
      done
      echo "== $rate, $model: before $(cat "$LOGS"/carab-before-"$rate-$model"-r*.json | jq -r '.car_s*10000|round/10' | paste -sd' ') ms," \
        "after $(cat "$LOGS"/carab-after-"$rate-$model"-r*.json | jq -r '.car_s*10000|round/10' | paste -sd' ') ms"
    done
  done
  echo "== runs took $(($(date +%s) - T0)) s"
  bash bench/net/summarize.sh "$LOGS" "$OUT"
  bash bench/net/report.sh "$OUT"
  exit 0
fi
if [ "$CAR_ONLY" -eq 0 ] && [ "$NO_AUTO" -eq 0 ]; then
  # The freeze step each model's run chooses (auto), and adam over the same steps: unshaped.
  obnet_shape unshaped
  for model in $MODELS; do
    steps_var=AUTO_STEPS_$model
    echo "== auto freeze, $model, ${!steps_var} steps, unshaped"
    run_worker "auto-$model-onebit" "$model" "$(onebit auto)" "${!steps_var}" || true
    run_worker "auto-$model-adam" "$model" "$ADAM" "${!steps_var}" || true
  done
fi

for rate in $RATES; do
  obnet_shape "$rate"
  for model in $MODELS; do
    echo "== $rate, $model"
    if [ "$CAR_ONLY" -eq 0 ]; then
      for ((r = 1; r <= REPEATS; r++)); do
        run_worker "$rate-$model-adam-r$r" "$model" "$ADAM" $((SETUP + MEAS)) $TIMING_LR || true
        run_worker "$rate-$model-onebit-r$r" "$model" "$(onebit "$FREEZE")" $((FREEZE + 2 + MEAS)) \
          $TIMING_LR || true
      done
      d=$(params "$rate-$model-adam-r1.jsonl")
      run_car after "$rate" "$model" "$d" || true
    else
      d=$(model_params "$model")
      run_car "$CAR_TAG" "$rate" "$model" "$d" || true
    fi
  done
done
echo "== runs took $(($(date +%s) - T0)) s"
[ "$CAR_ONLY" -eq 1 ] || echo "SETUP=$SETUP MEAS=$MEAS FREEZE=$FREEZE REPEATS=$REPEATS RATES=\"$RATES\" MODELS=\"$MODELS\" SWEEP_SECONDS=$(($(date +%s) - T0))" > "$LOGS/params"
bash bench/net/summarize.sh "$LOGS" "$OUT"
bash bench/net/report.sh "$OUT"
