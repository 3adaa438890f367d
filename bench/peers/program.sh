#!/usr/bin/env bash
# onebit against PyTorch DDP on a user's own program: examples/pytorch/gpt.py, the byte-level
# GPT of the front end, run unchanged but for its --optimizer on the same 4 network-namespace
# hosts and tc-shaped links as bench/peers/run.sh (bench/net/netns.sh). Every system is the same
# script, model, data, batches, schedule and evaluation:
#
#   onebit          onebit.torch.OnebitAdam with the example's settings, the auto freeze
#                   (track_variance=0) and the fp32 warmup (the defaults until 2026-11-27)
#   onebit-fp16     the same with the warmup's gradients in fp16
#   onebit-fp8      the same in fp8 (the defaults from 2026-11-27 until the tracked variance)
#   onebit-short8   the same with the opt-in settings of docs/peers: freeze_step 16, gradients of
#                   the warmup in fp8, refresh_steps 16
#   onebit-track8   track_variance=25 and the fp8 warmup, what a user gets without tuning since
#                   2026-11-28: frozen at the LR warmup's end (75), v re-estimated every 25
#                   steps from every rank's own statistics;
#                   onebit-track8-kK[-fF] with track_variance K and track_factor F
#   onebit-overlap, onebit-fp8-overlap
#                   onebit and onebit-fp8 (auto freeze) with overlap=True: the exchange starts in the backward
#                   pass (hooks on the gradients' accumulation), in buckets of 4 MiB
#   binsgdm         onebit.torch.BinSGDM (1 bit from the first step), Adam's learning rate
#   adam            onebit.torch.Adam (the engine's fp32 ring allreduce)
#   ddp-fp32        torch.optim.AdamW under DistributedDataParallel over gloo
#   ddp-fp16        the same with the fp16 compression hook
#   ddp-powersgd    the same with the PowerSGD hook (rank 1; its first compressed step is the
#                   onebit run's freeze step at that rate, as bench/peers/run.sh does)
#
# 1. Reference: adam, unshaped, CAP steps (the cosine schedule is over CAP steps for every run);
#    the target eval loss is the highest of its evaluations at REF-2*EVAL, REF-EVAL and REF.
# 2. For each rate, each system trains with --target-loss (it stops at the first evaluation at
#    or below the target, or at CAP steps). Time to target: the seconds of the training steps up
#    to that evaluation, as gpt.py prints them (evaluations left out: the same for every system).
#
# The launch is mpirun over the hosts for every system (gloo meets at host 0 for the ddp ones).
# Raw logs go to var/peers/gpt/logs/ (git-ignored); bench/peers/program_report.py makes from them
# docs/peers/gpt/runs.tsv, sweeps.txt (committed) and results.md, the table.
#
# usage: sudo bash bench/peers/program.sh [--rates "unshaped 200m 50m"] [--systems "..."]
#                                         [--quick] [--no-ref] [--target LOSS] [--cleanup]
#   --quick   smoke run: unshaped, 150 steps, into build-net/peers-gpt-quick/
#   --no-ref  keep the reference of an earlier run (its log in the logs' directory)
#   --target LOSS  no reference: this target eval loss (an earlier sweep's, from its params)
# Model flags: GPT_FLAGS (default "--layers 2 --d-model 128 --heads 4 --context 32
# --batch-size 4 --eval-batches 128"); REF, CAP, EVAL (default 1000, 1500, 50); STALL (default
# 180): seconds without a line in a run's log after which it is stopped as hung. OUT_DIR
# (default docs/peers/gpt) and LOGS_DIR (default var/peers/gpt/logs): where the tables and the
# raw logs go (a sweep of a few systems beside the full one: both elsewhere).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export OBNET_PREFIX=${OBNET_PREFIX:-obpeer} OBNET_SUBNET=${OBNET_SUBNET:-10.231.78}
RATES="unshaped 200m 50m"
SYSTEMS="onebit onebit-fp16 onebit-fp8 onebit-short8 binsgdm ddp-fp32 ddp-fp16 ddp-powersgd"
QUICK=0 NO_REF=0 TARGET=""
usage() {
  sed -n 's/^# usage: //p; s/^#   //p' "$0" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) RATES=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --no-ref) NO_REF=1; shift ;;
    --target) TARGET=$2; NO_REF=1; shift 2 ;;
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
GPT_FLAGS=${GPT_FLAGS:---layers 2 --d-model 128 --heads 4 --context 32 --batch-size 4 --eval-batches 128}
REF=${REF:-1000} CAP=${CAP:-1500} EVAL=${EVAL:-50} STALL=${STALL:-180}
OUT=${OUT_DIR:-docs/peers/gpt} LOGS=${LOGS_DIR:-var/peers/gpt/logs}
if [ "$QUICK" -eq 1 ]; then
  RATES=unshaped REF=100 CAP=150 EVAL=25 STALL=60 OUT=$BUILD/peers-gpt-quick LOGS=$BUILD/peers-gpt-quick/logs
fi
[ "$(id -u)" -eq 0 ] || { echo "bench/peers: needs root (ip netns, tc): sudo bash $0" >&2; exit 2; }
for tool in ip tc mpirun jq cmake; do
  command -v "$tool" >/dev/null || { echo "bench/peers: '$tool' not found" >&2; exit 2; }
done
"$PY" -c 'import torch' 2>/dev/null || { echo "bench/peers: needs python3-torch" >&2; exit 2; }

echo "== build ($BUILD)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DONEBIT_CUDA=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target onebit_py >/dev/null
mkdir -p "$LOGS"

# shellcheck source=bench/net/netns.sh
source bench/net/netns.sh
PID=""
obnet_up 4
trap '[ -z "$PID" ] || kill "$PID" 2>/dev/null; wait; obnet_down' EXIT
trap 'exit 130' INT TERM
HOSTFILE=$BUILD/peers-gpt-hosts
for i in 0 1 2 3; do echo "$(obnet_ip "$i") slots=1"; done > "$HOSTFILE"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ONEBIT_PROGRESS=json
export PYTHONPATH=$ROOT/$BUILD/python MASTER_ADDR MASTER_PORT=29512 GLOO_SOCKET_IFNAME=eth0
MASTER_ADDR=$(obnet_ip 0)

# gpt NAME ARGS...: gpt.py on the 4 hosts (MPI over TCP between them), CAP steps, logs in
# LOGS/NAME.log (stdout: rank 0's JSON lines and its closing lines), LOGS/NAME.err and
# LOGS/NAME.rc (mpirun's exit status; a failed run is a row of the table, not the sweep's end).
gpt() {
  local name=$1 rc=0 status=0
  shift
  echo "   $*" > "$LOGS/$name.args"
  # shellcheck disable=SC2086
  obnet_mpirun_args "$HOSTFILE"
  mpirun "${OBNET_MPIRUN_ARGS[@]}" -np 4 --mca btl tcp,self -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS -x ONEBIT_PROGRESS -x PYTHONPATH \
    -x MASTER_ADDR -x MASTER_PORT -x GLOO_SOCKET_IFNAME \
    "$PY" "$ROOT/examples/pytorch/gpt.py" $GPT_FLAGS --steps "$CAP" --eval-interval "$EVAL" "$@" \
    > "$LOGS/$name.log" 2> "$LOGS/$name.err" < /dev/null &
  PID=$!
  # A run that reports nothing for STALL seconds is hung (PowerSGD over gloo does, at its first
  # compressed step, in torch 1.13): stopped, and its exit status is 124.
  while kill -0 "$PID" 2>/dev/null; do
    sleep 2
    if [ $(($(date +%s) - $(stat -c %Y "$LOGS/$name.log"))) -gt "$STALL" ]; then
      echo "no report for $STALL s: stopped as hung" >> "$LOGS/$name.err"
      kill -TERM "$PID" 2>/dev/null || true
      sleep 5
      kill -KILL "$PID" 2>/dev/null || true
      rc=124
      break
    fi
  done
  wait "$PID" || status=$?
  [ "$rc" != 0 ] || rc=${status:-0}
  PID=""
  echo "$rc" > "$LOGS/$name.rc"
  grep -E '^(target|training time)' "$LOGS/$name.log" | sed 's/^/   /' || true
  [ "$rc" = 0 ] || echo "   exit $rc: $(grep -m1 -iE 'error|abort|enforce' "$LOGS/$name.err" | cut -c1-200)"
}

T0=$(date +%s)
obnet_shape unshaped
if [ "$NO_REF" -eq 0 ] && [ -z "$TARGET" ]; then
  echo "== reference: adam, unshaped, $CAP steps"
  gpt ref --optimizer adam
fi
# The highest of the reference's evaluations at REF-2*EVAL .. REF (one evaluation is noisy).
[ -n "$TARGET" ] || TARGET=$(jq -Rs --argjson lo $((REF - 2 * EVAL)) --argjson hi "$REF" \
  '[split("\n")[] | fromjson? | select(.event=="eval" and .step >= $lo and .step <= $hi)
    | .eval_loss] | max' "$LOGS/ref.log")
[ "$TARGET" != null ] || { echo "bench/peers: no evaluation at steps $((REF - 2 * EVAL))..$REF in $LOGS/ref.log" >&2; exit 1; }
echo "== target eval loss $TARGET"

# The systems named after the auto freeze keep it now that the defaults track the variance.
AUTO="--option track_variance=0"
for rate in $RATES; do
  obnet_shape "$rate"
  freeze=""
  for sys in $SYSTEMS; do
    name=$rate-$sys
    echo "== $rate, $sys"
    case "$sys" in
      onebit) gpt "$name" --optimizer onebit --gradient-exchange fp32 $AUTO --target-loss "$TARGET"
              freeze=$(jq -Rs '[split("\n")[] | fromjson? | select(.event=="summary")
                               | .freeze_step] | last // empty' "$LOGS/$name.log") ;;
      onebit-fp16|onebit-fp8) gpt "$name" --optimizer onebit --gradient-exchange "${sys#onebit-}" \
                                $AUTO --target-loss "$TARGET" ;;
      onebit-overlap) gpt "$name" --optimizer onebit --gradient-exchange fp32 --option overlap=true \
                        $AUTO --target-loss "$TARGET" ;;
      onebit-fp8-overlap) gpt "$name" --optimizer onebit --gradient-exchange fp8 \
                            --option overlap=true $AUTO --target-loss "$TARGET" ;;
      onebit-track8|onebit-track8-*|onebit-track16*|onebit-track32*)
        # onebit-trackX-kK[-fF]: the warmup's gradients and the estimates in fpX,
        # track_variance K, track_factor F (default 25 and the default)
        k=25 f="" x=${sys#onebit-track}
        x=${x%%-*}
        case "$sys" in *-k[0-9]*) k=${sys#*-k}; k=${k%%-*} ;; esac
        case "$sys" in *-f[0-9]*) f=${sys#*-f} ;; esac
        gpt "$name" --optimizer onebit --gradient-exchange "fp$x" --option "track_variance=$k" \
          ${f:+--option "track_factor=$f"} --target-loss "$TARGET" ;;
      onebit-short8) gpt "$name" --optimizer onebit --freeze-step 16 --gradient-exchange fp8 \
                       --option refresh_steps=16 --target-loss "$TARGET" ;;
      binsgdm) gpt "$name" --optimizer binsgdm --target-loss "$TARGET" ;;
      adam) gpt "$name" --optimizer adam --target-loss "$TARGET" ;;
      ddp-fp32|ddp-fp16) gpt "$name" --optimizer "$sys" --target-loss "$TARGET" ;;
      ddp-powersgd)
        # Once it has failed, not again at the other rates (a hang costs STALL seconds).
        if [ -n "${POWERSGD_FAILED:-}" ]; then
          echo "   skipped: failed at $POWERSGD_FAILED"
          continue
        fi
        gpt "$name" --optimizer ddp-powersgd --powersgd-start "${freeze:-10}" \
          --target-loss "$TARGET"
        [ "$(cat "$LOGS/$name.rc")" = 0 ] || POWERSGD_FAILED=$rate ;;
      *) echo "bench/peers: unknown system $sys" >&2; exit 2 ;;
    esac
  done
done
{ echo "REF=$REF CAP=$CAP EVAL=$EVAL TARGET=$TARGET GPT_FLAGS=\"$GPT_FLAGS\""
  echo "RATES=\"$RATES\" SYSTEMS=\"$SYSTEMS\" SWEEP_SECONDS=$(($(date +%s) - T0))"; } >> "$LOGS/params"
echo "== runs took $(($(date +%s) - T0)) s"
"$PY" bench/peers/program_report.py "$LOGS" "$OUT"
