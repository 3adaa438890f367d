#!/usr/bin/env bash
# Chaos for program jobs: tests/python/train_small.py (an MLP on onebit.torch.OnebitAdam, 4
# ranks, a checkpoint every 20 steps) through the real onebitd, onebitctl and onebit-worker,
# once uninterrupted, then again while, at random moments after its first checkpoint, the
# python process of a random rank is SIGKILLed five times and onebitd itself once (started
# again on the same state directory). The second run must end SUCCEEDED, every kill retried
# (a restart each, none judged a failure of the program), with a final checkpoint
# byte-identical to the uninterrupted run's (parameters, m, v, every rank's error buffers) and
# the same final parameters written by the script.
# usage: test_program_chaos.sh ONEBITD OBRPC ONEBITCTL ONEBIT_CKPT PYTHONPATH [SEED]
set -u
ONEBITD=$1 OBRPC=$2 CTL=$3 CKPT=$4 PYPATH=$5
SEED=${6:-${ONEBIT_CHAOS_SEED:-$(date +%s)}}
RANDOM=$SEED
echo "chaos seed: $SEED (ONEBIT_CHAOS_SEED=$SEED repeats this run's choices)"
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../daemon_harness.sh
. "$HERE/../daemon_harness.sh"
export PATH=/usr/bin:$PATH PYTHONPATH=$PYPATH ONEBIT_PROGRESS=json OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader
NP=4 STEPS=600 INTERVAL=20
# A pause of 25 ms a step keeps the job running long enough for six kills on a loaded machine;
# it changes no number.
ARGS=(--steps "$STEPS" --interval "$INTERVAL" --step-seconds 0.025)
ctl() { "$CTL" --server "$GRPC" "$@"; }
field() { get "$1" | jq -r "$2"; }
state_of() { field "$1" .state; }
step_of() { get "$1" | jq '.progress.step // 0'; }
ended() { case $(state_of "$1") in SUCCEEDED | FAILED | CANCELLED) return 0 ;; esac; return 1; }
wait_end() { # ID SECONDS
  for _ in $(seq $(($2 * 10))); do ended "$1" && return 0; sleep 0.1; done
  return 1
}
# The ranks of a job: the python processes the worker became (their command line no longer
# names the spec; their environment names the job's checkpoint directory).
ranks_of() { # ID
  grep -lzxF "ONEBIT_CHECKPOINT_DIR=$TMP/var/checkpoints/$1" /proc/[0-9]*/environ 2>/dev/null |
    cut -d/ -f3
}
# Whether process PID runs (a zombie does not: killed, not yet reaped by whoever adopted it).
proc_state() { sed -n 's/.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null; }
running() { case $(proc_state "$1") in "" | Z | X) return 1 ;; esac; }
rank_number() { tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }
final_ckpt() { printf '%s/var/checkpoints/%s/step-%08d' "$TMP" "$1" "$STEPS"; }

start_daemon --max-restarts 30 --backoff-max 1
[ -n "$GRPC" ] || { echo "onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }
t0=$SECONDS

# --- 1. uninterrupted ---------------------------------------------------------------------------
ref=$(ctl submit --program "$HERE/train_small.py" --steps $STEPS --np $NP -- "${ARGS[@]}" \
  --out "$TMP/ref.f32" 2>"$TMP/err")
check "the uninterrupted job is submitted" '[[ "$ref" == job-* ]]' "$ref $(cat "$TMP/err")"
wait_end "$ref" 300
j=$(get "$ref")
check "the uninterrupted run succeeds" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .restarts)" = 0 ] && [ -d "$(final_ckpt "$ref")" ] && [ -s "$TMP/ref.f32" ]' \
  "$(echo "$j" | jq -c '{state, message, restarts}') $(tail -5 "$TMP/var/jobs/$ref/worker.log")"
echo "uninterrupted: $((SECONDS - t0)) s"

# --- 2. five ranks and onebitd killed -------------------------------------------------------------
t1=$SECONDS
job=$(ctl submit --program "$HERE/train_small.py" --steps $STEPS --np $NP --max-restarts 30 -- \
  "${ARGS[@]}" --out "$TMP/job.f32" 2>"$TMP/err")
check "the chaos job is submitted" '[[ "$job" == job-* ]]' "$job $(cat "$TMP/err")"
daemon_at=$((RANDOM % 6)) # how many ranks are killed before onebitd is
rank_kills=0 daemon_kills=0 stale_left=""
what=()
for _ in $(seq 12); do
  [ $rank_kills -ge 5 ] && [ $daemon_kills -ge 1 ] && break
  # Let the job run on a random stretch past what it last reported and past its first
  # checkpoint (after a kill: running again, its new ranks stepping), then kill.
  target=$(($(step_of "$job") + 30 + RANDOM % 50))
  [ $target -lt $((INTERVAL + 10)) ] && target=$((INTERVAL + 10))
  reached=0
  for _ in $(seq 1800); do
    ended "$job" && break
    if [ "$(state_of "$job")" = RUNNING ] && [ "$(step_of "$job")" -ge $target ]; then
      reached=1
      break
    fi
    sleep 0.1
  done
  [ $reached = 1 ] || break
  at=$(step_of "$job")
  mapfile -t pids < <(ranks_of "$job")
  [ ${#pids[@]} -eq $NP ] || { echo "at step $at: ${#pids[@]} ranks of $NP found"; continue; }
  if [ $daemon_kills = 0 ] && [ $rank_kills -ge $daemon_at ]; then
    kill -KILL "$PID" && wait "$PID" 2>/dev/null
    daemon_kills=1
    what+=("onebitd@$at")
    start_daemon --max-restarts 30 --backoff-max 1 ||
      { echo "onebitd did not start again"; tail -20 "$TMP/onebitd.log"; exit 1; }
    # The attempt it lost is stopped before the next one starts: no rank of it steps on,
    # writing checkpoints beside the new attempt's.
    for _ in $(seq 600); do
      ended "$job" && break
      mapfile -t now < <(ranks_of "$job")
      fresh=0
      for p in "${now[@]}"; do [[ " ${pids[*]} " == *" $p "* ]] || fresh=1; done
      [ $fresh = 1 ] && break
      sleep 0.05
    done
    for p in "${pids[@]}"; do running "$p" && stale_left+=" $p($(proc_state "$p"))"; done
    continue
  fi
  victim=${pids[RANDOM % NP]}
  r=$(rank_number "$victim")
  kill -KILL "$victim" 2>/dev/null || continue
  rank_kills=$((rank_kills + 1))
  what+=("rank$r@$at")
done
echo "kills: ${what[*]}"
wait_end "$job" 400
j=$(get "$job")
summary=$(echo "$j" | jq -c '{state, message, restarts, attempts: [.attempts[] | {start_step, exit_reason}]}')
echo "chaos job: $summary"
check "five ranks and onebitd were killed while the job ran" '[ $rank_kills -eq 5 ] && [ $daemon_kills -eq 1 ]' "${what[*]}"
check "the job ends SUCCEEDED" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ]' "$summary $(tail -20 "$TMP/var/jobs/$job/worker.log")"
check "the ranks of the attempt onebitd lost were gone before the next attempt started" '[ -z "$stale_left" ]' "still running:$stale_left"
check "every kill was retried: one restart for each killed rank (killed by signal 9), one attempt more for onebitd's restart" \
  '[ "$(echo "$j" | jq .restarts)" = 5 ] && [ "$(echo "$j" | jq ".attempts | length")" = 7 ] && [ "$(echo "$j" | jq "[.attempts[].exit_reason | select(test(\"signal 9\"))] | length")" = 5 ] && [ "$(echo "$j" | jq "[.attempts[].exit_reason | select(. == \"coordinator restarted\")] | length")" = 1 ]' "$summary"
check "later attempts resumed from checkpoints" '[ "$(echo "$j" | jq "[.attempts[1:][] | select(.start_step > 0)] | length")" -ge 5 ]' "$summary"
"$CKPT" diff "$(final_ckpt "$ref")" "$(final_ckpt "$job")" > "$TMP/diff" 2>&1
rc=$?
check "its final checkpoint is byte-identical to the uninterrupted run's" '[ $rc -eq 0 ]' "rc=$rc $(tail -3 "$TMP/diff")"
check "the final parameters the script wrote are identical" 'cmp -s "$TMP/ref.f32" "$TMP/job.f32"' "$(ls -l "$TMP"/*.f32)"
check "nothing of it is left running" '[ -z "$(ranks_of "$job")" ] && [ -z "$(procs_of "$job" mpirun)" ]' "$(ranks_of "$job") $(procs_of "$job" mpirun)"
echo "chaos run: $((SECONDS - t1)) s"
stop_daemon
[ "$failed" -eq 0 ] || tail -40 "$TMP/onebitd.log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
