#!/usr/bin/env bash
# Program jobs: onebitd runs a PyTorch program (tests/python/train_small.py, on onebit.torch)
# under mpirun through the real onebit-worker, with the same supervision as built-in jobs.
#   - onebitctl submit --program: SUCCEEDED, progress, freeze and checkpoints in the status, the
#     progress sent over WorkerService;
#   - a rank SIGKILLed mid-run: restarted from the newest checkpoint, the same final parameters
#     as the uninterrupted run;
#   - onebitd shut down during a program job (SIGTERM): the ranks stop together, save where they
#     stopped and exit 0; the next onebitd resumes there, not from an older checkpoint, to the
#     same final parameters;
#   - a cancel: the ranks take it from onebitd's answer to their progress reports (they ignore
#     SIGTERM here), stop together and save;
#   - a program that raises before its first step: FAILED, not retried, its exception the reason;
#   - the same exception at the same step on two attempts: FAILED after one restart;
#   - an entrypoint outside the data roots (--no-upload: a path on onebitd's machine): refused at
#     submit. (Uploaded programs: test_program_upload.sh.)
# usage: test_program_jobs.sh ONEBITD OBRPC ONEBITCTL PYTHONPATH
set -u
ONEBITD=$1 OBRPC=$2 CTL=$3 PYPATH=$4
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../daemon_harness.sh
. "$HERE/../daemon_harness.sh"
# The workers' python3 is Debian's, with python3-torch, and finds this build's package.
export PATH=/usr/bin:$PATH PYTHONPATH=$PYPATH ONEBIT_PROGRESS=json OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader
start_daemon --data-root "$HERE" --data-root "$TMP/progs" --max-restarts 2
mkdir -p "$TMP/progs"
ctl() { "$CTL" --server "$GRPC" "$@"; }
field() { get "$1" | jq -r "$2"; }

# --- a program job through onebitctl, to SUCCEEDED --------------------------------------------
id=$(ctl submit --program "$HERE/train_small.py" --np 2 --steps 120 -- --out "$TMP/a.f32" 2>"$TMP/err")
check "onebitctl submit --program: a job id" '[[ "$id" == job-* ]]' "$id $(cat "$TMP/err")"
wait_state "$id" SUCCEEDED 120
j=$(get "$id")
check "the program job SUCCEEDED" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ]' "$j $(tail -5 "$TMP/var/jobs/$id/worker.log")"
check "its progress: step 120 of 120, frozen at 40, checkpoints up to 100" '[ "$(echo "$j" | jq .progress.step)" = 120 ] && [ "$(echo "$j" | jq .progress.total_steps)" = 120 ] && [ "$(echo "$j" | jq .progress.freeze_step)" = 40 ] && [ "$(echo "$j" | jq .checkpoint_step)" -ge 100 ]' "$j"
out=$(ctl status "$id" 2>&1)
check "onebitctl status shows it" 'echo "$out" | grep -q SUCCEEDED' "$out"
metrics=$(curl -s "http://$REST/metrics")
check "/metrics counts its steps" 'echo "$metrics" | grep -q "^onebit_steps_total 120$"' "$(echo "$metrics" | grep steps_total)"
# Rank 0 reports over WorkerService as onebit-worker does: start, 12 logged steps, the freeze,
# evaluations, checkpoints and the summary; none of it only from the log.
reports=$(echo "$metrics" | sed -n 's/^onebit_worker_reports_total //p')
check "its progress came over WorkerService (onebit_worker_reports_total >= 15)" '[ "${reports:-0}" -ge 15 ] && ! grep -q "ONEBIT_REPORT_ADDR" "$TMP/var/jobs/$id/worker.log"' "reports=$reports $(grep ONEBIT_REPORT_ADDR "$TMP/var/jobs/$id/worker.log")"

# --- a rank killed mid-run: restarted from its checkpoint, the same parameters ---------------
printf '{"name":"killed","program":{"entrypoint":"train_small.py","workdir":"%s","args":["--out","%s"],"env":{"TRAIN_SMALL_KILL":"70 1"}},"steps":120}\n' "$HERE" "$TMP/b.f32" > "$TMP/killed.json"
id2=$(ctl submit -f "$TMP/killed.json" --np 2 2>"$TMP/err")
wait_state "$id2" SUCCEEDED 180
j=$(get "$id2")
check "killed rank: SUCCEEDED after one restart, resumed from step 50" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .restarts)" = 1 ] && [ "$(echo "$j" | jq .attempts[1].start_step)" = 50 ]' "$j"
check "killed rank: final parameters identical to the uninterrupted run's" 'cmp -s "$TMP/a.f32" "$TMP/b.f32"' "$(ls -l "$TMP"/*.f32)"

# --- onebitd shut down mid-run: the ranks save where they stop, the next onebitd goes on there --
# No interval checkpoints (every 1000 steps of 120): only the stop's checkpoint can be resumed.
id5=$(ctl submit --program "$HERE/train_small.py" --np 2 --steps 120 -- --interval 1000 \
  --step-seconds 0.05 --out "$TMP/e.f32" 2>"$TMP/err")
for _ in $(seq 600); do
  [ "$(field "$id5" '.progress.step // 0')" -ge 30 ] 2>/dev/null && break
  sleep 0.1
done
stop_daemon
ck=$(ls -d "$TMP/var/checkpoints/$id5"/step-* 2>/dev/null)
stop_step=$((10#$(basename "${ck:-step-0}" | sed 's/^step-//')))
check "onebitd's shutdown: the ranks saved one checkpoint where they stopped (a logged step >= 30)" \
  '[ "$(echo "$ck" | wc -w)" = 1 ] && [ "$stop_step" -ge 30 ] && [ $((stop_step % 10)) = 0 ] && grep -q "stopped after step $stop_step (SIGTERM): saved" "$TMP/var/jobs/$id5/worker.log"' \
  "$ck $(tail -5 "$TMP/var/jobs/$id5/worker.log")"
start_daemon --data-root "$HERE" --data-root "$TMP/progs" --max-restarts 2
wait_state "$id5" SUCCEEDED 180
j=$(get "$id5")
check "the next onebitd resumed from the stop's step and the job SUCCEEDED" \
  '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .attempts[-1].start_step)" = "$stop_step" ]' \
  "$(echo "$j" | jq -c '{state, message, attempts: [.attempts[] | {start_step, exit_reason}]}')"
check "stopped and resumed: final parameters identical to the uninterrupted run's" \
  'cmp -s "$TMP/a.f32" "$TMP/e.f32"' "$(ls -l "$TMP"/*.f32)"

# --- cancelled: the cancel reaches the ranks in onebitd's answer to rank 0's reports ----------
# The ranks ignore SIGTERM here (TRAIN_SMALL_IGNORE_TERM), so the answer is the only way the
# cancel reaches them before the grace period's SIGKILL (10 s): they stop together at a logged
# step and save there.
printf '{"name":"cancelled","program":{"entrypoint":"train_small.py","workdir":"%s","args":["--interval","1000","--step-seconds","0.05"],"env":{"TRAIN_SMALL_IGNORE_TERM":"1"}},"steps":600}\n' "$HERE" > "$TMP/cancel.json"
id6=$(ctl submit -f "$TMP/cancel.json" --np 2 2>"$TMP/err")
for _ in $(seq 600); do
  [ "$(field "$id6" '.progress.step // 0')" -ge 20 ] 2>/dev/null && break
  sleep 0.1
done
t0=$(date +%s)
ctl cancel "$id6" > /dev/null 2>&1
wait_state "$id6" CANCELLED 60
j=$(get "$id6")
ck=$(ls -d "$TMP/var/checkpoints/$id6"/step-* 2>/dev/null)
check "cancelled through the reports' answers: CANCELLED within the grace period, a checkpoint where the ranks stopped" \
  '[ "$(echo "$j" | jq -r .state)" = CANCELLED ] && [ $(($(date +%s) - t0)) -lt 10 ] && [ "$(echo "$ck" | wc -w)" = 1 ] && grep -q "stopped after step [0-9]* (SIGTERM): saved" "$TMP/var/jobs/$id6/worker.log"' \
  "$(echo "$j" | jq -c '{state, message}') after $(($(date +%s) - t0)) s; $ck; $(tail -3 "$TMP/var/jobs/$id6/worker.log")"

# --- deterministic failures are not retried -----------------------------------------------------
id3=$(ctl submit --program "$HERE/train_small.py" --np 2 -- --raise-at 0 2>"$TMP/err")
wait_state "$id3" FAILED 60
j=$(get "$id3")
check "raises before its first step: FAILED, no restart, the exception is the reason" '[ "$(echo "$j" | jq -r .state)" = FAILED ] && [ "$(echo "$j" | jq .restarts)" = 0 ] && echo "$j" | jq -r .message | grep -q "before its first step: ValueError: boom at step 0"' "$j"
id4=$(ctl submit --program "$HERE/train_small.py" --np 2 -- --raise-at 60 2>"$TMP/err")
wait_state "$id4" FAILED 120
j=$(get "$id4")
check "the same exception at the same step twice: FAILED after one restart" '[ "$(echo "$j" | jq -r .state)" = FAILED ] && [ "$(echo "$j" | jq .restarts)" = 1 ] && echo "$j" | jq -r .message | grep -q "at step 60, as on the attempt before: ValueError: boom at step 60"' "$j"

# --- refused at submit ---------------------------------------------------------------------
cp "$HERE/train_small.py" "$TMP/outside.py"
out=$(ctl submit --program "$TMP/outside.py" --no-upload --np 1 2>&1); rc=$?
check "an entrypoint outside the data roots (--no-upload: the server's path): refused" '[ $rc -ne 0 ] && echo "$out" | grep -q "program.entrypoint.*outside the roots"' "rc=$rc $out"
out=$(ctl submit --program "$HERE/no-such.py" --np 1 2>&1); rc=$?
check "a missing entrypoint: refused" '[ $rc -ne 0 ] && echo "$out" | grep -q "no-such.py"' "rc=$rc $out"
printf '{"program":{"entrypoint":"x.py","workdir":"%s","env":{"LD_PRELOAD":"/x.so"}}}\n' "$HERE" > "$TMP/env.json"
out=$(ctl submit -f "$TMP/env.json" --np 1 2>&1); rc=$?
check "a spec that sets LD_PRELOAD: refused" '[ $rc -ne 0 ] && echo "$out" | grep -q "program.env.LD_PRELOAD: set by the launcher"' "rc=$rc $out"

kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""
[ "$failed" -eq 0 ] || tail -40 "$TMP/onebitd.log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
