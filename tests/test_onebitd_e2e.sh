#!/usr/bin/env bash
# End to end: the real onebitd launching the real onebit-worker under mpirun (2 ranks, a small
# synthetic 1-bit Adam job), driven over REST (curl) and gRPC (obrpc). Workers report progress
# over WorkerService. A rank killed with SIGKILL, a cancel, and a coordinator killed with SIGKILL
# are each survived; the interrupted run ends with the same parameters as an uninterrupted one.
# usage: test_onebitd_e2e.sh ONEBITD OBRPC ONEBIT_CKPT EXAMPLES_DIR
set -u
ONEBITD=$1
OBRPC=$2
CKPT=$3
EXAMPLES=$4
. "$(dirname "$0")/daemon_harness.sh"

wait_step() { # ID STEP SECONDS: until the job has passed STEP
  for _ in $(seq $(($3 * 20))); do
    [ "$(get "$1" | jq '.progress.step // 0')" -ge "$2" ] && return 0
    sleep 0.05
  done
  return 1
}
ranks_of() { procs_of "$1" onebit-worker; }
submit_rest() { # SPECFILE -> id
  jq -n --rawfile s "$1" '{spec: $s, worldSize: 2, maxRestarts: 2}' |
    curl -s -X POST -H 'Content-Type: application/json' --data-binary @- "http://$REST/v1/jobs" | jq -r .id
}

sed 's/^steps: 200/steps: 3000/; s/^log_interval: 10/log_interval: 20/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/job.yaml"
printf 'checkpoint: {interval: 500, keep: 10}\n' >> "$TMP/job.yaml"
# Checkpoints only when stopped: any checkpoint it has is the one cancel asked for.
sed 's/^steps: 3000/steps: 1000000/; s/^checkpoint: .*/checkpoint: {interval: 0}/' "$TMP/job.yaml" > "$TMP/endless.yaml"

start_daemon
[ -n "$GRPC" ] || { echo "onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }

# --- an uninterrupted run, submitted over REST ---------------------------------------------------
a=$(submit_rest "$TMP/job.yaml")
steps=""
for _ in $(seq 600); do
  j=$(get "$a")
  steps="$steps $(echo "$j" | jq .progress.step)"
  case $(echo "$j" | jq -r .state) in SUCCEEDED|FAILED|CANCELLED) break ;; esac
  sleep 0.05
done
check "REST submit: the job runs to SUCCEEDED" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ]' "$j $(tail -5 "$TMP/var/jobs/$a/worker.log")"
check "GetJob shows progress moving" '[ "$(echo $steps | tr " " "\n" | sort -un | wc -l)" -ge 3 ]' "$steps"
check "bytes sent far below the fp32 equivalent" '[ "$(echo "$j" | jq .progress.bytes_sent)" -gt 0 ] && [ "$(echo "$j" | jq ".progress.bytes_sent * 4 < .progress.bytes_uncompressed")" = true ]' "$(echo "$j" | jq -c .progress)"
check "progress came over WorkerService" 'curl -s "http://$REST/metrics" | grep -q "^onebit_worker_reports_total [1-9]"' "$(curl -s "http://$REST/metrics" | grep reports)"
ck=$(rpc checkpoints "$a" 2>/dev/null)
check "the checkpoints are listed with their metadata" '[ "$(echo "$ck" | jq -c "[.checkpoints[].step]")" = "[3000,2500,2000,1500,1000,500]" ] && [ "$(echo "$ck" | jq -c ".checkpoints[0] | [.world_size, .phase, .freeze_step, .problem]")" = "[2,\"compression\",50,\"\"]" ]' "$ck"

# --- gRPC submit; SIGKILL one rank mid-run ------------------------------------------------------
b=$(rpc submit "$TMP/job.yaml" 2 2 2>/dev/null | jq -r .id)
wait_step "$b" 1200 60
victim=$(ranks_of "$b" | tail -1)
check "found a rank to kill" '[ -n "$victim" ]' "$(pgrep -af onebit-worker)"
kill -KILL "$victim"
wait_state "$b" SUCCEEDED 120
j=$(get "$b")
check "killed rank: the job restarts from its checkpoint and succeeds" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .restarts)" = 1 ] && [ "$(echo "$j" | jq .attempts[1].start_step)" -ge 1000 ]' "$j"
check "killed rank: the attempt and its reason are recorded" '[ "$(echo "$j" | jq .attempts[0].exit_code)" != 0 ] && echo "$j" | jq -r .attempts[0].exit_reason | grep -q "workers failed"' "$(echo "$j" | jq -c .attempts)"
ca="$TMP/var/checkpoints/$a/step-00003000"
cb="$TMP/var/checkpoints/$b/step-00003000"
"$CKPT" diff "$ca" "$cb" > "$TMP/diff" 2>&1; rc=$?
check "killed rank: final parameters equal the uninterrupted run's" '[ $rc -eq 0 ]' "rc=$rc $(tail -3 "$TMP/diff")"

# --- cancel: CANCELLED, a final checkpoint, no process left ------------------------------------
c=$(rpc submit "$TMP/endless.yaml" 2 2>/dev/null | jq -r .id)
wait_step "$c" 700 60
rpc cancel "$c" > /dev/null 2>&1
wait_state "$c" CANCELLED 60
j=$(get "$c")
last=$(rpc checkpoints "$c" 2>/dev/null | jq '.checkpoints[0].step')
check "cancel: CANCELLED" '[ "$(echo "$j" | jq -r .state)" = CANCELLED ]' "$j"
check "cancel: a final checkpoint of the last step" '[ -n "$last" ] && [ "$last" -gt 700 ] && "$CKPT" info "$TMP/var/checkpoints/$c/$(printf step-%08d "$last")" > /dev/null' "last=$last $(echo "$j" | jq -c .progress)"
check "cancel: no process of the job is left" '[ -z "$(ranks_of "$c")" ] && ! pgrep -f "$TMP/var/jobs/$c/" > /dev/null' "$(pgrep -af "$TMP/var/jobs/$c/")"

# --- SIGKILL onebitd mid-run, start it again: the job is still there and completes ---------------
d=$(submit_rest "$TMP/job.yaml")
wait_step "$d" 700 60
kill -KILL "$PID"; wait "$PID" 2>/dev/null
start_daemon
check "after SIGKILL of onebitd the job is still listed" '[ "$(curl -s "http://$REST/v1/jobs" | jq -r ".jobs[].id" | grep -c "^$d$")" = 1 ]' "$(curl -s "http://$REST/v1/jobs" | jq -c "[.jobs[].id]")"
wait_state "$d" SUCCEEDED 120
j=$(get "$d")
check "it resumes from its checkpoint and completes" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && echo "$j" | jq -r .attempts[0].exit_reason | grep -q "coordinator restarted" && [ "$(echo "$j" | jq .attempts[1].start_step)" -ge 500 ]' "$j"
"$CKPT" diff "$ca" "$TMP/var/checkpoints/$d/step-00003000" > "$TMP/diff" 2>&1; rc=$?
check "and ends with the uninterrupted run's parameters" '[ $rc -eq 0 ]' "rc=$rc $(tail -3 "$TMP/diff")"
kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
