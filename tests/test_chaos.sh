#!/usr/bin/env bash
# Chaos: one job under the real onebitd and the real onebit-worker (2 ranks, synthetic 1-bit
# Adam, a checkpoint every 250 steps) while, at random moments, a rank, mpirun or onebitd itself
# is killed with SIGKILL (onebitd is started again). At least five kills land before the job
# ends; it must end SUCCEEDED with a final state byte-identical to an uninterrupted run's
# (parameters, moments, frozen variance, both error buffers of every rank).
# usage: test_chaos.sh ONEBITD OBRPC ONEBIT_CKPT EXAMPLES_DIR [SEED]
set -u
ONEBITD=$1
OBRPC=$2
CKPT=$3
EXAMPLES=$4
SEED=${5:-${ONEBIT_CHAOS_SEED:-$(date +%s)}}
RANDOM=$SEED
echo "chaos seed: $SEED (ONEBIT_CHAOS_SEED=$SEED repeats this run's choices)"
. "$(dirname "$0")/daemon_harness.sh"
state_of() { get "$1" | jq -r .state; }
step_of() { get "$1" | jq '.progress.step // 0'; }

sed 's/^steps: 200/steps: 6000/; s/^log_interval: 10/log_interval: 20/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/job.yaml"
printf 'checkpoint: {interval: 250, keep: 30}\n' >> "$TMP/job.yaml"

start_daemon
[ -n "$GRPC" ] || { echo "onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }
ref=$(rpc submit "$TMP/job.yaml" 2 0 2>/dev/null | jq -r .id)
for _ in $(seq 1200); do case $(state_of "$ref") in SUCCEEDED|FAILED|CANCELLED) break ;; esac; sleep 0.1; done
check "the uninterrupted run succeeds" '[ "$(state_of "$ref")" = SUCCEEDED ]' "$(get "$ref" | jq -c '{state, message}')"

job=$(rpc submit "$TMP/job.yaml" 2 30 2>/dev/null | jq -r .id)
kills=0
what=()
for _ in $(seq 12); do
  # Let the job run a random stretch (it must be running again after the last kill), then kill.
  target=$(( $(step_of "$job") + 150 + RANDOM % 400 ))
  for _ in $(seq 600); do
    s=$(state_of "$job")
    [ "$s" = SUCCEEDED ] || [ "$s" = FAILED ] && break 2
    [ "$s" = RUNNING ] && [ "$(step_of "$job")" -ge "$target" ] && break
    sleep 0.05
  done
  case $((RANDOM % 3)) in
    0) victim=$(procs_of "$job" onebit-worker | shuf -n 1 --random-source=<(yes "$RANDOM")); kind=rank ;;
    1) victim=$(procs_of "$job" mpirun | head -1); kind=mpirun ;;
    2) victim=$PID; kind=onebitd ;;
  esac
  [ -n "$victim" ] || continue
  at=$(step_of "$job")
  kill -KILL "$victim" 2>/dev/null || continue
  kills=$((kills + 1))
  what+=("$kind@$at")
  if [ "$kind" = onebitd ]; then wait "$PID" 2>/dev/null; start_daemon; fi
  [ $kills -ge 6 ] && break
done
echo "kills: ${what[*]}"
for _ in $(seq 1800); do case $(state_of "$job") in SUCCEEDED|FAILED|CANCELLED) break ;; esac; sleep 0.1; done
j=$(get "$job")
check "at least five kills landed while the job ran" '[ $kills -ge 5 ]' "kills=$kills ${what[*]}"
check "the job ends SUCCEEDED" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ]' "$(echo "$j" | jq -c '{state, message, restarts, attempts: [.attempts[].exit_reason]}')"
"$CKPT" diff "$TMP/var/checkpoints/$ref/step-00006000" "$TMP/var/checkpoints/$job/step-00006000" > "$TMP/diff" 2>&1; rc=$?
check "its final state is byte-identical to the uninterrupted run's" '[ $rc -eq 0 ]' "rc=$rc $(tail -3 "$TMP/diff")"
check "nothing of it is left running" '[ -z "$(procs_of "$job" onebit-worker)" ] && [ -z "$(procs_of "$job" mpirun)" ]'
kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
