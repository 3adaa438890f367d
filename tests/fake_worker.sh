#!/usr/bin/env bash
# A stand-in for onebit-worker in the coordinator's tests: the same command line, the same JSON
# progress lines from rank 0, checkpoints as step-XXXXXXXX directories, and the same reaction to
# SIGTERM (checkpoint, then exit 0), without training anything, so that supervision can be tested
# quickly and deterministically.
# Settings come from the environment or from the file named by FAKE_CONTROL (read at start):
#       FAKE_STEP_S   seconds per step [0.01]
#       FAKE_CRASH_AT step at which rank 1 (rank 0 with one rank) kills itself with SIGKILL, once
#                     per job (a marker file in the checkpoint folder remembers)
#       FAKE_HANG_AT  step at which every rank stops reporting and sleeps
#       FAKE_ENV_FILE rank 0 writes its environment there (what the launcher gave the workers)
#       FAKE_RANK_LINES  when set, every rank prints "rank R step S" at each log interval
#       FAKE_REWARM_AT   steps at which rank 0 reports a rewarm (space-separated), as the divergence
#                        guard of the real worker does
#       FAKE_CKPT_WRITER tests/fake_checkpoint.c's program, which writes checkpoints that verify
#                        (the coordinator resumes from and reports only those, and takes exit 0
#                        as done only beside the checkpoint of the last step); daemon_harness.sh
#                        points it at the one beside onebitd
set -u
if [ -n "${FAKE_CONTROL:-}" ] && [ -f "$FAKE_CONTROL" ]; then . "$FAKE_CONTROL"; fi
spec="" job="" ckdir="" resume=0
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) spec=$2; shift 2 ;;
    --job-id) job=$2; shift 2 ;;
    --checkpoint-dir) ckdir=$2; shift 2 ;;
    --resume) resume=1; shift ;;
    --format|--report) shift 2 ;;
    *) echo "fake_worker: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -z "${FAKE_CKPT_WRITER:-}" ] || [ ! -x "$FAKE_CKPT_WRITER" ]; then
  echo "fake_worker: FAKE_CKPT_WRITER must name the fake_checkpoint program" >&2
  exit 2
fi
rank=${OMPI_COMM_WORLD_RANK:-0}
size=${OMPI_COMM_WORLD_SIZE:-1}
if [ -n "${FAKE_ENV_FILE:-}" ] && [ "$rank" = 0 ]; then env > "$FAKE_ENV_FILE"; fi
steps=$(jq -r .steps "$spec")
interval=$(jq -r .checkpoint.interval "$spec")
log_interval=$(jq -r .log_interval "$spec")
dir="$ckdir/$job"
mkdir -p "$dir"
start=0
if [ "$resume" = 1 ]; then
  # The newest whose state.h5 is an HDF5 file (the real worker takes the newest that verifies).
  newest=$(for d in $(ls -d "$dir"/step-???????? 2>/dev/null | sort -r); do
    if [ "$(head -c 4 "$d/state.h5" 2>/dev/null | od -An -c | tr -d ' ')" = '211HDF' ]; then
      echo "$d"; break
    fi
  done)
  if [ -n "$newest" ]; then start=$((10#${newest##*step-})); fi
fi
say() { if [ "$rank" = 0 ]; then echo "$1"; fi; }
checkpoint() {
  if [ "$rank" = 0 ]; then
    local d; d=$(printf '%s/step-%08d' "$dir" "$1")
    "$FAKE_CKPT_WRITER" "$dir" "$1" || return
    last_ckpt=$1
    say "{\"event\":\"checkpoint\",\"step\":$1,\"path\":\"$d\"}"
  fi
}
last_ckpt=$start
term=0
trap 'term=1' TERM
say "{\"event\":\"start\",\"world_size\":$size,\"num_params\":1000,\"resumed_from\":$start}"
crasher=$(( size > 1 ? 1 : 0 ))
crashed_before=0
if [ -e "$dir/crashed" ]; then crashed_before=1; fi
for ((s = start + 1; s <= steps; s++)); do
  sleep "${FAKE_STEP_S:-0.01}"
  if [ -n "${FAKE_CRASH_AT:-}" ] && [ "$s" -eq "$FAKE_CRASH_AT" ] && [ $crashed_before = 0 ]; then
    if [ "$rank" = "$crasher" ]; then
      touch "$dir/crashed"
      kill -KILL $$
    fi
    sleep 30 # the other ranks wait in a collective until mpirun stops them
  fi
  if [ -n "${FAKE_HANG_AT:-}" ] && [ "$s" -ge "$FAKE_HANG_AT" ]; then
    while [ $term = 0 ]; do sleep 0.05; done
  fi
  for r in ${FAKE_REWARM_AT:-}; do
    if [ "$s" -eq "$r" ]; then
      say "{\"event\":\"rewarm\",\"step\":$s,\"to_step\":$((s - 1)),\"path\":\"$dir\",\"message\":\"the loss is not finite at step $s (on 1 rank): rolled back\"}"
    fi
  done
  if [ $((s % log_interval)) -eq 0 ]; then
    if [ -n "${FAKE_RANK_LINES:-}" ]; then echo "rank $rank step $s"; fi
    say "{\"event\":\"step\",\"step\":$s,\"phase\":\"warmup\",\"loss\":$(awk -v s=$s 'BEGIN{print 1/s}'),\"lr\":0.001,\"samples_per_s\":1000.0,\"bytes_sent\":$((s * 6000)),\"bytes_step\":6000,\"freeze_ratio\":null}"
  fi
  if [ "$interval" -gt 0 ] && [ $((s % interval)) -eq 0 ]; then checkpoint "$s"; fi
  if [ $term = 1 ]; then
    checkpoint "$s"
    exit 0
  fi
done
# The real worker's end: the checkpoint of the last step, unless the last periodic one is it.
if [ "$last_ckpt" != "$steps" ]; then checkpoint "$steps"; fi
say "{\"event\":\"summary\",\"steps\":$steps}"
exit 0
