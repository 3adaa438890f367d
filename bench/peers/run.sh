#!/usr/bin/env bash
# onebit against what users would pick instead: PyTorch DistributedDataParallel over gloo (plain
# fp32, the fp16 compression hook, the PowerSGD hook) on the same 4 network-namespace hosts and
# the same tc-shaped links as bench/net/, training the same models (bench/net/specs/) with the
# same data, batch per rank, optimizer and learning-rate schedule (bench/peers/ddp.py).
#
# 1. Compute check, one process, no network: samples/s of onebit-worker and of torch on the
#    same model and the same core (is a difference compute or communication?).
# 2. Reference: onebit's adam, unshaped, to REF steps; the target eval loss of the model is the
#    highest of that run's last 3 eval losses (every EVAL steps; one eval is too noisy).
# 3. For each bandwidth, every system trains until its eval loss reaches the target (or CAP
#    steps): onebit (1-bit Adam, freeze_step auto), adam (onebit's Adam: the fp32 ring
#    allreduce), ddp-fp32, ddp-fp16, ddp-powersgd1/4 (start iteration = the 1-bit run's freeze
#    step). Time to target = the training time of the steps up to the eval that reached it
#    (evaluation time left out, the same for every system), from the runs' own step timings.
# The raw logs go to var/peers/logs/ (var/peers/long/logs/ with --long; git-ignored, LOGS_DIR
# moves them); bench/peers/report.py --logs takes from them the TSVs of docs/peers/ (committed)
# and writes docs/peers/README.md's table and time-to-target.svg from those.
#
# usage: sudo bash bench/peers/run.sh [--rates "unshaped 1g 200m 50m"] [--models "mlp transformer"]
#                                     [--systems "onebit adam ddp-fp32 ddp-fp16 ddp-powersgd1 ddp-powersgd4"]
#                                     (also: adam-overlap, onebit-overlap: optimizer.overlap: true
#                                     with bucket_mb: 1, so that the MLP's two large layers are two
#                                     buckets: the default 4 MiB holds both in one;
#                                     adam-fp16, onebit-fp16: optimizer.gradient_exchange: fp16
#                                     (onebit-fp32: fp32, the warmup of the defaults before fp8);
#                                     onebit-warm: 1-bit Adam warm-started from an earlier run
#                                     of the model with another seed, see below;
#                                     onebit-short: a short warmup, freeze_step SHORT_FREEZE
#                                     (default 16) with its gradients in fp16 (onebit-short-fp8:
#                                     in fp8, as onebit-refresh-fp8); onebit-refresh:
#                                     the same with refresh_steps REFRESH_STEPS (default 16);
#                                     onebit-refresh-fp8-overlap: onebit-refresh-fp8 with
#                                     overlap: true and bucket_mb: 1;
#                                     onebit-track: no precondition, track_variance: 25,
#                                     frozen at the LR warmup's end (the engine's defaults
#                                     since 2026-11-28 for a transformer);
#                                     onebit-plain: no precondition, the auto freeze
#                                     (track_variance: 0);
#                                     onebit-track-pre: onebit (with precondition) and
#                                     track_variance: 25;
#                                     onebit-track16: onebit-track frozen at SHORT_FREEZE
#                                     (default 16) instead of the LR warmup's end, with
#                                     track_factor: 1.25 (the defaults of an MLP since
#                                     2026-11-28); onebit-track-overlap,
#                                     onebit-track16-overlap: the same with overlap: true,
#                                     bucket_mb: 1 (a transformer's default since
#                                     2026-12-02); onebit-track-flat: onebit-track with
#                                     overlap: false (a transformer's default before);
#                                     onebit-defaults: the optimizer names only its type and
#                                     betas, so the run gets the engine's defaults of the day
#                                     for the model, whatever they are)
#                                     [--quick] [--no-compute] [--no-ref] [--keep-targets] [--skip-runs] [--cleanup]
#   --quick      smoke run (MLP, unshaped, targets from 60 steps; about 3 minutes) into build-net/peers-quick/
#   --long       a later target: the MLP's from step 1200 of the reference (cap 1800 steps, eval
#                every 50), where the compression stage is most of the run; into docs/peers/long/
#                (default rates "200m", systems "onebit onebit-fp16 ddp-fp32 ddp-fp16")
#   --no-compute / --no-ref  keep the compute-check / reference logs of an earlier run (in the
#                raw logs' directory: a run on this machine)
#   --keep-targets  no reference run: every run goes to the target of OUT/models.tsv, the one the
#                table's other rows were timed to (a rerun of some systems stays comparable)
#   --skip-runs  only rebuild the table and the plot from the TSVs in docs/peers/
#   --cleanup    remove namespaces left by a killed run
# Environment: SHORT_FREEZE, REFRESH_STEPS (above); TRACK_K: the track_variance of the
# onebit-track systems (default 25, the engine's interval); WORKER_ARGS: more onebit-worker arguments
# for every onebit run, e.g. --profile (the split of rank 0's step time, a "profile" event at
# the end of the run's raw log).
# Needs root (ip netns, tc), Open MPI, jq, gnuplot, Debian's python3-torch (installed here if
# missing: a benchmark-only dependency). Namespaces: OBNET_PREFIX (default obpeer), OBNET_SUBNET
# (default 10.231.78).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export OBNET_PREFIX=${OBNET_PREFIX:-obpeer} OBNET_SUBNET=${OBNET_SUBNET:-10.231.78}
RATES="unshaped 1g 200m 50m"
MODELS="mlp transformer"
SYSTEMS="onebit adam ddp-fp32 ddp-fp16 ddp-powersgd1 ddp-powersgd4"
QUICK=0 LONG=0 SKIP_RUNS=0 NO_COMPUTE=0 NO_REF=0 KEEP_TARGETS=0 SET_RATES=0 SET_SYSTEMS=0
usage() {
  sed -n 's/^# usage: //p; s/^#        //p' "$0" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) RATES=$2 SET_RATES=1; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --systems) SYSTEMS=$2 SET_SYSTEMS=1; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --long) LONG=1; shift ;;
    --no-compute) NO_COMPUTE=1; shift ;;
    --no-ref) NO_REF=1; shift ;;
    --keep-targets) KEEP_TARGETS=1 NO_REF=1; shift ;;
    --skip-runs) SKIP_RUNS=1; shift ;;
    --cleanup)
      # shellcheck source=bench/net/netns.sh
      source bench/net/netns.sh
      obnet_down
      exit 0 ;;
    *) usage ;;
  esac
done
PY=/usr/bin/python3
BUILD=${BUILD_DIR:-build-net}
OUT=docs/peers
# Reference steps (the target is adam's eval loss there), eval interval, step cap, compute-check
# steps: per model. REF lies past the 1-bit run's freeze step (about 140 for the MLP and 600 for
# the transformer, bench/net), so the target is reached in its compression stage.
# EVALMAX: examples (windows) of an evaluation, 0 = the whole held-out split.
REF_mlp=300 EVAL_mlp=25 CAP_mlp=600 EVALMAX_mlp=0
REF_transformer=800 EVAL_transformer=50 CAP_transformer=1400 EVALMAX_transformer=2048
COMPUTE_STEPS=40
if [ "$QUICK" -eq 1 ]; then
  RATES=unshaped MODELS=mlp REF_mlp=60 EVAL_mlp=10 CAP_mlp=120 COMPUTE_STEPS=10
  OUT=$BUILD/peers-quick
fi
if [ "$LONG" -eq 1 ]; then
  MODELS=mlp REF_mlp=1200 EVAL_mlp=50 CAP_mlp=1800 NO_COMPUTE=1
  [ "$SET_RATES" -eq 1 ] || RATES=200m
  [ "$SET_SYSTEMS" -eq 1 ] || SYSTEMS="onebit onebit-fp16 ddp-fp32 ddp-fp16"
  OUT=docs/peers/long
fi
case "$OUT" in
  docs/*) LOGS=${LOGS_DIR:-var/${OUT#docs/}/logs} ;;
  *) LOGS=$OUT/logs ;;
esac
[ "$SKIP_RUNS" -eq 1 ] && exec "$PY" bench/peers/report.py "$OUT"
[ "$(id -u)" -eq 0 ] || { echo "bench/peers: needs root (ip netns, tc): sudo bash $0" >&2; exit 2; }
for tool in ip tc mpirun jq gnuplot cmake; do
  command -v "$tool" >/dev/null || { echo "bench/peers: '$tool' not found" >&2; exit 2; }
done
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "== installing python3-torch (benchmark only)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch >/dev/null
fi

echo "== build ($BUILD)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DONEBIT_CUDA=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target onebit-worker >/dev/null
mkdir -p "$LOGS"
WORKER=$ROOT/$BUILD/bin/onebit-worker

# shellcheck source=bench/net/netns.sh
source bench/net/netns.sh
PIDS=""
obnet_up 4
trap '[ -z "$PIDS" ] || kill $PIDS 2>/dev/null; wait; obnet_down' EXIT
trap 'exit 130' INT TERM
HOSTFILE=$BUILD/peers-hosts
for i in 0 1 2 3; do echo "$(obnet_ip "$i") slots=1"; done > "$HOSTFILE"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# reached LOG TARGET: exit 0 once rank 0's log has an eval at or below TARGET.
reached() {
  jq -se --argjson t "$2" 'any(.[]; .event=="eval" and .eval_loss <= $t)' "$1" >/dev/null 2>&1
}

# spec NAME MODEL OPTIMIZER STEPS EVAL: the model's bench/net spec plus these, in LOGS/NAME.yaml;
# SPEC_SEED replaces its seed, SPEC_EXTRA is appended.
spec() {
  { if [ -n "${SPEC_SEED:-}" ]; then sed "s/^seed: .*/seed: $SPEC_SEED/" "bench/net/specs/$2.yaml"
    else cat "bench/net/specs/$2.yaml"; fi
    echo "$3"; echo "steps: $4"; echo "log_interval: 1"
    echo "eval: {interval: $5, max_examples: ${6:-0}}"
    [ -z "${SPEC_EXTRA:-}" ] || echo "$SPEC_EXTRA"; } > "$LOGS/$1.yaml"
}

# onebit_run NAME MODEL OPTIMIZER STEPS EVAL [TARGET]: onebit-worker on the 4 hosts (MPI over
# TCP, as bench/net); with TARGET it is stopped (SIGTERM: the step finishes, the worker exits 0)
# once it reports an eval loss at or below TARGET.
onebit_run() {
  local name=$1 target=${6:-} pid rc=0 evalmax=EVALMAX_$2
  spec "$name" "$2" "$3" "$4" "$5" "${!evalmax}"
  : > "$LOGS/$name.jsonl"
  obnet_mpirun_args "$HOSTFILE"
  mpirun "${OBNET_MPIRUN_ARGS[@]}" -np 4 --mca btl tcp,self -x OPENBLAS_NUM_THREADS \
    "$WORKER" ${WORKER_ARGS:-} --spec "$LOGS/$name.yaml" > "$LOGS/$name.jsonl" 2> "$LOGS/$name.err" < /dev/null &
  pid=$!
  PIDS=$pid
  while kill -0 "$pid" 2>/dev/null; do
    if [ -n "$target" ] && reached "$LOGS/$name.jsonl" "$target"; then
      kill -TERM "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.5
  done
  wait "$pid" || rc=$?
  PIDS=""
  return "$rc"
}

# ddp_run NAME MODEL VARIANT STEPS EVAL [TARGET] [START-ITER]: bench/peers/ddp.py, one process
# per host, gloo over the hosts' eth0.
ddp_run() {
  local name=$1 i pids="" rc=0 evalmax=EVALMAX_$2
  : > "$LOGS/$name.jsonl"
  : > "$LOGS/$name.err"
  for i in 3 2 1 0; do
    ip netns exec "$(obnet_ns "$i")" env RANK=$i WORLD_SIZE=4 MASTER_ADDR="$(obnet_ip 0)" \
      MASTER_PORT=29511 GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
      "$PY" bench/peers/ddp.py --model "$2" --variant "$3" --steps "$4" --eval-interval "$5" \
      --eval-max "${!evalmax}" ${6:+--target "$6"} --start-iter "${7:-1}" \
      > "$([ "$i" = 0 ] && echo "$LOGS/$name.jsonl" || echo /dev/null)" 2>> "$LOGS/$name.err" < /dev/null &
    pids="$pids $!"
  done
  PIDS=$pids
  for i in $pids; do wait "$i" || rc=$?; done
  PIDS=""
  return "$rc"
}

summary() { # LOG: one line about a run
  jq -rs '(map(select(.event=="eval")) | last) as $e | (map(select(.event=="freeze")) | first) as $f
          | "   \(map(select(.event=="step")) | length) steps, last eval \($e.eval_loss // "-")"
            + (if $f then ", freeze \($f.step)" else "" end)' "$1"
}

ADAM="optimizer: {type: adam, beta1: 0.9, beta2: 0.99}"
ONEBIT="optimizer: {type: onebit_adam, beta1: 0.9, beta2: 0.99, precondition: true, freeze_step: auto}"
ONEBIT_SHORT="${ONEBIT/freeze_step: auto/freeze_step: ${SHORT_FREEZE:-16}, gradient_exchange: fp16}"
ONEBIT_REFRESH="${ONEBIT_SHORT%\}}, refresh_steps: ${REFRESH_STEPS:-16}}"
ONEBIT_SHORT8="${ONEBIT_SHORT/gradient_exchange: fp16/gradient_exchange: fp8}"
ONEBIT_REFRESH8="${ONEBIT_REFRESH/gradient_exchange: fp16/gradient_exchange: fp8}"
ONEBIT_TRACK="${ONEBIT/precondition: true, /}"   # the defaults since 2026-11-28
TRACK_K=${TRACK_K:-25}
ONEBIT_TRACK="${ONEBIT_TRACK%\}}, track_variance: $TRACK_K}"
ONEBIT_PLAIN="${ONEBIT_TRACK/track_variance: $TRACK_K/track_variance: 0}"
ONEBIT_TRACK_PRE="${ONEBIT%\}}, track_variance: $TRACK_K}"
ONEBIT_TRACK16="${ONEBIT_TRACK/freeze_step: auto/freeze_step: ${SHORT_FREEZE:-16}}"
ONEBIT_TRACK16="${ONEBIT_TRACK16%\}}, track_factor: 1.25}"   # the MLPs' defaults 2026-11-28 .. 12-02
ONEBIT_DEFAULTS="${ADAM/type: adam/type: onebit_adam}"   # the betas of every system, nothing else
T0=$(date +%s)

if [ "$NO_COMPUTE" -eq 0 ]; then
  for model in $MODELS; do
    echo "== compute check, $model, one process, $COMPUTE_STEPS steps"
    spec "compute-$model-onebit" "$model" "$ADAM" "$COMPUTE_STEPS" 0
    OPENBLAS_NUM_THREADS=1 taskset -c 0 "$WORKER" --spec "$LOGS/compute-$model-onebit.yaml" \
      > "$LOGS/compute-$model-onebit.jsonl" 2> "$LOGS/compute-$model-onebit.err"
    taskset -c 0 "$PY" bench/peers/ddp.py --single --model "$model" --steps "$COMPUTE_STEPS" \
      > "$LOGS/compute-$model-torch.jsonl" 2> "$LOGS/compute-$model-torch.err"
  done
fi

obnet_shape unshaped
for model in $MODELS; do
  ref=REF_$model eval=EVAL_$model
  if [ "$NO_REF" -eq 0 ]; then
    echo "== reference, $model: adam to step ${!ref}, unshaped"
    onebit_run "ref-$model" "$model" "$ADAM" "${!ref}" "${!eval}"
    summary "$LOGS/ref-$model.jsonl"
  fi
done

# onebit-warm: the user who has trained the model before. Its source is 1-bit Adam on the same
# spec with seed 1001 (other initial parameters and data order than every run of the table), REF
# steps, unshaped, checkpointed once at its end (under BUILD, not in the logs: it is a data file);
# the warm runs take its v_Tw with params: false (warm_start's defaults: checked at step 1,
# re-estimated for the auto refit, refit gradients in fp8). Made once per model and kept.
case " $SYSTEMS " in *" onebit-warm "*)
  for model in $MODELS; do
    ref=REF_$model src=$ROOT/$BUILD/peers-src-$model
    name=$(sed -n 's/^name: //p' "bench/net/specs/$model.yaml")
    if ! ls -d "$src/$name"/step-* > /dev/null 2>&1; then
      echo "== warm-start source, $model: 1-bit Adam, seed 1001, ${!ref} steps, unshaped"
      rm -rf "$src"
      SPEC_SEED=1001 SPEC_EXTRA="checkpoint: {dir: $src, interval: ${!ref}, keep: 1}" \
        onebit_run "src-$model" "$model" "$ONEBIT" "${!ref}" 0
      summary "$LOGS/src-$model.jsonl"
    fi
  done ;;
esac

for rate in $RATES; do
  obnet_shape "$rate"
  for model in $MODELS; do
    ref=REF_$model eval=EVAL_$model cap=CAP_$model
    if [ "$KEEP_TARGETS" -eq 1 ]; then
      target=$(awk -F'\t' -v m="$model" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "target") c = i }
                                          NR > 1 && $1 == m { print $c }' "$OUT/models.tsv")
      [ -n "$target" ] || { echo "bench/peers: no target for $model in $OUT/models.tsv" >&2; exit 1; }
    else
      # The highest of the reference's last 3 eval losses (report.py says why).
      target=$(jq -s 'map(select(.event=="eval")) | .[-3:] | map(.eval_loss) | max' "$LOGS/ref-$model.jsonl")
      [ "$target" != null ] || { echo "bench/peers: no eval in ref-$model.jsonl" >&2; exit 1; }
    fi
    freeze=$(jq -s 'map(select(.event=="freeze")) | first | .step // empty' \
      "$LOGS/$rate-$model-onebit.jsonl" 2>/dev/null || true)
    for sys in $SYSTEMS; do
      name=$rate-$model-$sys
      echo "== $rate, $model, $sys (target eval loss $target)"
      case "$sys" in
        onebit) onebit_run "$name" "$model" "$ONEBIT" "${!cap}" "${!eval}" "$target" || true
                freeze=$(jq -s 'map(select(.event=="freeze")) | first | .step // empty' "$LOGS/$name.jsonl") ;;
        adam) onebit_run "$name" "$model" "$ADAM" "${!cap}" "${!eval}" "$target" || true ;;
        adam-overlap) onebit_run "$name" "$model" "${ADAM%\}}, overlap: true, bucket_mb: 1}" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-overlap) onebit_run "$name" "$model" "${ONEBIT%\}}, overlap: true, bucket_mb: 1}" "${!cap}" "${!eval}" "$target" || true
                freeze=$(jq -s 'map(select(.event=="freeze")) | first | .step // empty' "$LOGS/$name.jsonl") ;;
        adam-fp16) onebit_run "$name" "$model" "${ADAM%\}}, gradient_exchange: fp16}" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-fp32) onebit_run "$name" "$model" "${ONEBIT%\}}, gradient_exchange: fp32}" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-fp16) onebit_run "$name" "$model" "${ONEBIT%\}}, gradient_exchange: fp16}" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-short) onebit_run "$name" "$model" "$ONEBIT_SHORT" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-refresh) onebit_run "$name" "$model" "$ONEBIT_REFRESH" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-short-fp8) onebit_run "$name" "$model" "$ONEBIT_SHORT8" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-refresh-fp8) onebit_run "$name" "$model" "$ONEBIT_REFRESH8" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-plain) onebit_run "$name" "$model" "$ONEBIT_PLAIN" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-track) onebit_run "$name" "$model" "$ONEBIT_TRACK" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-track-pre) onebit_run "$name" "$model" "$ONEBIT_TRACK_PRE" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-track16) onebit_run "$name" "$model" "$ONEBIT_TRACK16" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-defaults) onebit_run "$name" "$model" "$ONEBIT_DEFAULTS" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-track-overlap) onebit_run "$name" "$model" "${ONEBIT_TRACK%\}}, overlap: true, bucket_mb: 1}" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-track-flat) onebit_run "$name" "$model" "${ONEBIT_TRACK%\}}, overlap: false}" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-track16-overlap) onebit_run "$name" "$model" "${ONEBIT_TRACK16%\}}, overlap: true, bucket_mb: 1}" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-refresh-fp8-overlap) onebit_run "$name" "$model" "${ONEBIT_REFRESH8%\}}, overlap: true, bucket_mb: 1}" "${!cap}" "${!eval}" "$target" || true ;;
        onebit-warm)
          SPEC_EXTRA="warm_start: {from: $ROOT/$BUILD/peers-src-$model/$(sed -n 's/^name: //p' "bench/net/specs/$model.yaml"), params: false}" \
            onebit_run "$name" "$model" "$ONEBIT" "${!cap}" "${!eval}" "$target" || true ;;
        ddp-*) ddp_run "$name" "$model" "${sys#ddp-}" "${!cap}" "${!eval}" "$target" "${freeze:-1}" ||
                 echo "   failed: $(grep -m1 -E 'Error|error|Enforce' "$LOGS/$name.err" | cut -c1-200)" ;;
        *) echo "bench/peers: unknown system $sys" >&2; exit 2 ;;
      esac
      summary "$LOGS/$name.jsonl"
    done
  done
done
echo "RATES=\"$RATES\" MODELS=\"$MODELS\" SYSTEMS=\"$SYSTEMS\" SWEEP_SECONDS=$(($(date +%s) - T0))" >> "$LOGS/params"
echo "== runs took $(($(date +%s) - T0)) s"
KEEP=()
[ "$KEEP_TARGETS" -eq 0 ] || KEEP=(--keep-targets)
"$PY" bench/peers/report.py --logs "$LOGS" "${KEEP[@]}" "$OUT"
