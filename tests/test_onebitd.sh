#!/usr/bin/env bash
# Black-box tests of onebitd: the real daemon on free ports with a temporary state directory,
# driven over gRPC (obrpc, a C client on the gRPC C core) and REST (curl), launching workers with
# the real mpirun. Workers are tests/fake_worker.sh: the worker's command line, progress lines,
# checkpoints and SIGTERM behaviour, minus the training, so that supervision is tested quickly.
# usage: test_onebitd.sh ONEBITD OBRPC FAKE_WORKER [WORKER]
# (WORKER, the real onebit-worker: its report credential read from a file, as the Kubernetes
# launcher gives it)
set -u
ONEBITD=$1
OBRPC=$2
FAKE=$3
WORKER=${4:-}
. "$(dirname "$0")/daemon_harness.sh"

# start_daemon STATE_DIR [onebitd options]: the harness's launch_daemon with the fake worker;
# without a token unless the options name one (the token's own tests are at the end).
start_daemon() {
  local state=$1; shift
  local auth=--insecure-no-auth
  case " $* " in *" --token-file "*) auth= ;; esac
  if [ "${1:-}" = --default-auth ]; then auth=; shift; fi
  launch_daemon "$state" --worker "$FAKE" --backoff 0.2 --cancel-grace 5 $auth "$@"
}
# http METHOD PATH [curl args]: prints the body, then the status on the last line.
# POSTs are JSON (the server refuses any other content type).
http() { local m=$1 p=$2; shift 2; curl -s -X "$m" -H 'Content-Type: application/json' -w '\n%{http_code}' "$@" "http://$REST$p"; }
state_of() { curl -s "http://$REST/v1/jobs/$1" | jq -r .state; }
# wait_state ID STATE SECONDS
wait_state() {
  local n=$(($3 * 20))
  for _ in $(seq $n); do
    [ "$(state_of "$1")" = "$2" ] && return 0
    sleep 0.05
  done
  return 1
}
job_count() { curl -s "http://$REST/v1/jobs?pageSize=1000" | jq '.jobs | length'; }
# Everything the store holds, as the API shows it: every job and every event of each (for jobs
# that have ended, whose event streams end by themselves).
snapshot() {
  curl -s "http://$REST/v1/jobs?pageSize=1000"
  for id in $(curl -s "http://$REST/v1/jobs?pageSize=1000" | jq -r '.jobs[].id'); do
    curl -s -N --max-time 5 "http://$REST/v1/jobs/$id/events"
  done
}

spec() { # spec FILE STEPS INTERVAL
  printf 'name: t\nmodel: {type: mlp, hidden: [8]}\ndata: {type: synthetic_classification}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: %s\nlog_interval: 5\ncheckpoint: {interval: %s}\n' "$2" "$3" > "$1"
}
spec "$TMP/short.yaml" 40 10
spec "$TMP/long.yaml" 4000 20
spec "$TMP/endless.yaml" 1000000 20
spec "$TMP/endless-nock.yaml" 1000000 0 # checkpoints only when stopped

export OMPI_MCA_rmaps_base_oversubscribe=1
# The fake workers read their behaviour from this file when they start.
export FAKE_CONTROL=$TMP/control
control() { printf '%s\n' "$@" > "$FAKE_CONTROL"; }
control "FAKE_STEP_S=0.01"
start_daemon "$TMP/var" --slots 4 --max-restarts 2
[ -n "$GRPC" ] || { echo "onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }

# --- one coordinator per state directory ---------------------------------------------------------
"$ONEBITD" --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --state-dir "$TMP/var" > "$TMP/second.out" 2>&1; rc=$?
check "a second onebitd on the same state directory is refused" '[ $rc -eq 1 ] && grep -q "is in use by another onebitd (pid $PID)" "$TMP/second.out"' "rc=$rc $(cat "$TMP/second.out")"

# --- version ---------------------------------------------------------------------------------
out=$(http GET /v1/version)
rpc raw /onebit.v1.JobService/GetVersion "" > /dev/null 2>&1; rc=$?
check "GET /v1/version and GetVersion" '[ "$(echo "$out" | tail -1)" = 200 ] && [ "$(echo "$out" | head -1 | jq -r .version)" = "$("$ONEBITD" --version | cut -d" " -f2)" ] && [ "$(echo "$out" | head -1 | jq -r .api)" = onebit.v1 ] && [ $rc -eq 0 ]' "$out rc=$rc"

# --- health ----------------------------------------------------------------------------------
out=$(rpc health 2> "$TMP/err"); rc=$?
check "gRPC Health.Check serving" '[ $rc -eq 0 ] && [ "$(echo "$out" | jq .status)" = 1 ]' "rc=$rc $out"
rpc health no.such.Service > /dev/null 2> "$TMP/err"; rc=$?
check "Health.Check of an unknown service: NOT_FOUND" '[ $rc -eq 5 ] && grep -q "unknown service" "$TMP/err"' "rc=$rc"
out=$(rpc health-watch 2> "$TMP/err")
check "Health.Watch streams SERVING" '[ "$(echo "$out" | jq .status)" = 1 ]' "$out $(cat "$TMP/err")"
out=$(http GET /healthz)
check "REST /healthz" '[ "$(echo "$out" | tail -1)" = 200 ] && echo "$out" | head -1 | jq -e ".status == \"SERVING\"" >/dev/null' "$out"

# --- submit over gRPC: runs to SUCCEEDED, progress moves ----------------------------------------
# Under a sanitizer (ONEBIT_TEST_SLOW set) each obrpc call takes longer than a few steps of
# the fake worker: slower steps, so that the polls still see the progress move.
control "FAKE_STEP_S=$([ -n "${ONEBIT_TEST_SLOW:-}" ] && echo 0.1 || echo 0.02)"
out=$(rpc submit "$TMP/short.yaml" 2 2> "$TMP/err"); rc=$?
id1=$(echo "$out" | jq -r .id)
check "SubmitJob over gRPC" '[ $rc -eq 0 ] && [ "$id1" = job-000001 ] && [ "$(echo "$out" | jq -r .state)" = PENDING ]' "rc=$rc $out $(cat "$TMP/err")"
steps=""
for _ in $(seq 200); do
  j=$(rpc get "$id1" 2>/dev/null)
  steps="$steps $(echo "$j" | jq .progress.step)"
  [ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && break
  sleep 0.02
done
distinct=$(echo $steps | tr ' ' '\n' | sort -un | wc -l)
check "gRPC job SUCCEEDED" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ]' "$j"
check "GetJob shows progress moving" '[ "$distinct" -ge 3 ]' "steps seen: $steps"
check "final progress and checkpoint" '[ "$(echo "$j" | jq .progress.step)" = 40 ] && [ "$(echo "$j" | jq .checkpoint_step)" = 40 ] && [ "$(echo "$j" | jq ".attempts | length")" = 1 ]' "$j"
# Other local users read nothing: the store, the job's directory, spec, log and checkpoints.
modes=$(stat -c '%a %n' "$TMP/var/jobs.db" "$TMP/var/jobs/$id1" "$TMP/var/jobs/$id1/spec.json" \
  "$TMP/var/jobs/$id1/worker.log" "$TMP/var/checkpoints/$id1" 2>&1 | sed "s|$TMP/var/||")
check "state files 0600, directories 0700" '[ "$(echo "$modes" | awk "{print \$1}" | tr "\n" " ")" = "600 700 600 600 700 " ]' "$modes"
out=$(rpc checkpoints "$id1" 2>/dev/null)
check "ListCheckpoints newest first" '[ "$(echo "$out" | jq -c "[.checkpoints[].step]")" = "[40,30,20,10]" ]' "$out"

# --- watch over gRPC and SSE: full history, ends at the final state ------------------------------
out=$(OBRPC_TIMEOUT_MS=5000 rpc watch "$id1" 2> "$TMP/err"); rc=$?
check "WatchJob replays the history and ends OK" '[ $rc -eq 0 ] && [ "$(echo "$out" | tail -1 | jq -r .state)" = SUCCEEDED ] && echo "$out" | jq -s -e "map(select(.kind==\"step\")) | length > 2" >/dev/null' "rc=$rc $(tail -2 <<< "$out") $(cat "$TMP/err")"
out=$(curl -s -N --max-time 5 "http://$REST/v1/jobs/$id1/events"); rc=$?
check "REST events (SSE) end at the final state" '[ $rc -eq 0 ] && echo "$out" | grep -q "^event: checkpoint" && echo "$out" | grep "^data:" | tail -1 | grep -q JOB_STATE_SUCCEEDED' "rc=$rc $(echo "$out" | tail -3)"

out=$(OBRPC_TIMEOUT_MS=5000 rpc watch "$id1" 1000 2> "$TMP/err"); rc=$?
check "WatchJob after the end returns at once" '[ $rc -eq 0 ] && [ -z "$out" ]' "rc=$rc $out $(cat "$TMP/err")"
out=$(curl -s -N --max-time 5 "http://$REST/v1/jobs/$id1/events?afterSeq=1000"); rc=$?
check "REST events after the end return at once" '[ $rc -eq 0 ] && [ -z "$out" ]' "rc=$rc $out"

out=$(curl -s -N --max-time 5 -H "Last-Event-ID: 13" "http://$REST/v1/jobs/$id1/events")
check "REST events resume after Last-Event-ID" '[ "$(echo "$out" | grep -c "^id: ")" -ge 1 ] && [ "$(echo "$out" | grep "^id: " | head -1)" = "id: 14" ]' "$out"

# --- submit over REST ------------------------------------------------------------------------
body=$(jq -n --rawfile s "$TMP/short.yaml" '{spec: $s, worldSize: 1}')
out=$(http POST /v1/jobs -d "$body")
id2=$(echo "$out" | head -1 | jq -r .id)
check "POST /v1/jobs" '[ "$(echo "$out" | tail -1)" = 200 ] && [ "$id2" = job-000002 ]' "$out"
check "REST job SUCCEEDED" 'wait_state "$id2" JOB_STATE_SUCCEEDED 20' "$(state_of "$id2")"
body=$(jq -n '{spec: {model: {type: "softmax"}, data: {type: "synthetic_classification"}, optimizer: {type: "adam"}, batch_size: 4, steps: 10}, maxRestarts: 0}')
out=$(http POST /v1/jobs -d "$body")
id3=$(echo "$out" | head -1 | jq -r .id)
check "POST /v1/jobs with the spec as an object" '[ "$(echo "$out" | tail -1)" = 200 ] && [ "$(echo "$out" | head -1 | jq .maxRestarts)" = 0 ]' "$out"
wait_state "$id3" JOB_STATE_SUCCEEDED 20

# --- list: paging and the state filter ---------------------------------------------------------
out=$(http GET '/v1/jobs?pageSize=2')
tok=$(echo "$out" | head -1 | jq -r .nextPageToken)
out2=$(http GET "/v1/jobs?pageSize=2&pageToken=$tok")
check "REST list pages" '[ "$(echo "$out" | head -1 | jq -c "[.jobs[].id]")" = "[\"job-000001\",\"job-000002\"]" ] && [ "$(echo "$out2" | head -1 | jq -c "[.jobs[].id]")" = "[\"job-000003\"]" ] && [ "$(echo "$out2" | head -1 | jq -r .nextPageToken)" = "" ]' "$out $out2"
out=$(rpc list 4 2 2>/dev/null)
tok=$(echo "$out" | jq -r .next_page_token)
out2=$(rpc list 4 2 "$tok" 2>/dev/null)
check "gRPC ListJobs pages with a state filter" '[ "$(echo "$out" | jq ".jobs | length")" = 2 ] && [ "$(echo "$out2" | jq ".jobs | length")" = 1 ] && [ "$(echo "$out2" | jq -r .next_page_token)" = "" ]' "$out $out2"
out=$(http GET '/v1/jobs?state=RUNNING')
check "REST list filtered by state" '[ "$(echo "$out" | head -1 | jq ".jobs | length")" = 0 ]' "$out"

# --- bad input: the right status, a clear message, nothing stored, still serving ----------------
before=$(job_count)
snapshot > "$TMP/snap.before"
rpc raw /onebit.v1.JobService/SubmitJob ffffffffff > /dev/null 2> "$TMP/err"; rc=$?
check "malformed protobuf: INVALID_ARGUMENT" '[ $rc -eq 3 ] && grep -q "malformed onebit.v1.SubmitJobRequest" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
rpc raw /onebit.v1.JobService/Frobnicate 00 > /dev/null 2> "$TMP/err"; rc=$?
check "unknown method: UNIMPLEMENTED" '[ $rc -eq 12 ] && grep -q "unknown method /onebit.v1.JobService/Frobnicate" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
sed 's/optimizer: {type: adam}/optimizer: {type: adam, betta1: 0.9}/' "$TMP/short.yaml" > "$TMP/typo.yaml"
rpc submit "$TMP/typo.yaml" 9 > /dev/null 2> "$TMP/err"; rc=$?
check "invalid spec fields over gRPC: every field named" '[ $rc -eq 3 ] && grep -q "spec: optimizer.betta1: unknown field" "$TMP/err" && grep -q "world_size: 9 ranks exceed" "$TMP/err" && ! grep -q "\.c:[0-9]" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
out=$(http POST /v1/jobs -d "$(jq -n --rawfile s "$TMP/typo.yaml" '{spec: $s, worldSize: -1}')")
check "invalid spec fields over REST: 400 naming them" '[ "$(echo "$out" | tail -1)" = 400 ] && echo "$out" | head -1 | jq -r .error.message | grep -q "optimizer.betta1: unknown field.*world_size: expected 1 to" && [ "$(echo "$out" | head -1 | jq -r .error.status)" = INVALID_ARGUMENT ]' "$out"
out=$(http POST /v1/jobs -d '{"spec": "x", "worldsize": 2, "maxRestarts": "many"}')
check "unknown and mistyped request fields: 400" '[ "$(echo "$out" | tail -1)" = 400 ] && echo "$out" | head -1 | grep -q "worldsize: unknown field" && echo "$out" | head -1 | grep -q "maxRestarts: expected an integer"' "$out"
out=$(http POST /v1/jobs -d '{"spec": ')
check "garbage JSON: 400" '[ "$(echo "$out" | tail -1)" = 400 ] && echo "$out" | head -1 | grep -q "malformed JSON at line 1"' "$out"
out=$(http POST /v1/jobs -d '[1,2]')
check "JSON that is not an object: 400" '[ "$(echo "$out" | tail -1)" = 400 ]' "$out"
head -c 3000000 /dev/zero | tr '\0' 'a' | sed 's/^/{"spec":"/; s/$/"}/' > "$TMP/big.json"
out=$(http POST /v1/jobs --data-binary @"$TMP/big.json" -H 'Content-Type: application/json')
check "oversized JSON: 413" '[ "$(echo "$out" | tail -1)" = 413 ] && echo "$out" | head -1 | grep -q "larger than the limit"' "$(echo "$out" | tail -c 300)"
rpc get job-424242 > /dev/null 2> "$TMP/err"; rc=$?
check "unknown job id over gRPC: NOT_FOUND" '[ $rc -eq 5 ] && grep -q "no job with id .job-424242." "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
rpc watch job-424242 > /dev/null 2> "$TMP/err"; rc=$?
check "WatchJob of an unknown job: NOT_FOUND" '[ $rc -eq 5 ]' "rc=$rc"
for p in "GET /v1/jobs/job-424242" "POST /v1/jobs/job-424242:cancel" "GET /v1/jobs/job-424242/events" "GET /v1/jobs/nope/checkpoints"; do
  out=$(http $p)
  check "unknown job id over REST: $p -> 404" '[ "$(echo "$out" | tail -1)" = 404 ] && [ "$(echo "$out" | head -1 | jq -r .error.status)" = NOT_FOUND ]' "$out"
done
out=$(http GET '/v1/jobs?state=SLEEPING')
check "bad state filter: 400" '[ "$(echo "$out" | tail -1)" = 400 ]' "$out"
out=$(http GET '/v1/jobs?pageToken=abc')
check "bad page token: 400" '[ "$(echo "$out" | tail -1)" = 400 ] && echo "$out" | grep -q pageToken\\\|page_token' "$out"
out=$(http GET /v2/nothing)
check "unknown route: 404" '[ "$(echo "$out" | tail -1)" = 404 ]' "$out"
out=$(http DELETE /v1/jobs)
check "wrong method: 405" '[ "$(echo "$out" | tail -1)" = 405 ]' "$out"
rpc cancel "$id1" > /dev/null 2> "$TMP/err"; rc=$?
check "cancel of a finished job: FAILED_PRECONDITION" '[ $rc -eq 9 ] && grep -q "already SUCCEEDED" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
snapshot > "$TMP/snap.after"
check "bad input changed nothing in the store, the service still serves" '[ "$(job_count)" = "$before" ] && [ "$(wc -c < "$TMP/snap.before")" -gt 1000 ] && cmp -s "$TMP/snap.before" "$TMP/snap.after" && rpc health > /dev/null 2>&1' "jobs $before -> $(job_count); $(diff "$TMP/snap.before" "$TMP/snap.after" | head -5)"

# --- a rank killed mid-run: restart from the checkpoint, SUCCEEDED ------------------------------
control "FAKE_STEP_S=0.01" "FAKE_CRASH_AT=25"
out=$(rpc submit "$TMP/short.yaml" 2 2>/dev/null)
idc=$(echo "$out" | jq -r .id)
wait_state "$idc" JOB_STATE_SUCCEEDED 30
j=$(rpc get "$idc" 2>/dev/null)
check "killed rank: the job restarts and succeeds" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .restarts)" = 1 ] && [ "$(echo "$j" | jq ".attempts | length")" = 2 ]' "$j"
check "killed rank: the attempt and its reason are recorded" '[ "$(echo "$j" | jq .attempts[0].exit_code)" != 0 ] && echo "$j" | jq -r .attempts[0].exit_reason | grep -q "workers failed" && [ "$(echo "$j" | jq .attempts[1].start_step)" -ge 20 ] && [ "$(echo "$j" | jq .attempts[1].start_step)" -le 25 ]' "$j"

# --- cancel: CANCELLED, a final checkpoint, no process left -----------------------------------
control "FAKE_STEP_S=0.01"
out=$(rpc submit "$TMP/endless-nock.yaml" 2 2>/dev/null)
idl=$(echo "$out" | jq -r .id)
wait_state "$idl" JOB_STATE_RUNNING 10
for _ in $(seq 100); do [ "$(rpc get "$idl" 2>/dev/null | jq .progress.step)" -ge 30 ] && break; sleep 0.05; done
out=$(http POST "/v1/jobs/$idl:cancel")
check "POST :cancel answers 200" '[ "$(echo "$out" | tail -1)" = 200 ]' "$out"
wait_state "$idl" JOB_STATE_CANCELLED 10
j=$(rpc get "$idl" 2>/dev/null)
ck=$(rpc checkpoints "$idl" 2>/dev/null | jq '.checkpoints[0].step')
check "cancel: CANCELLED with a final checkpoint" '[ "$(echo "$j" | jq -r .state)" = CANCELLED ] && [ "$ck" -ge 30 ] && [ "$(echo "$j" | jq .checkpoint_step)" = "$ck" ]' "$j ck=$ck"
check "cancel: no process of the job is left" '! pgrep -f "$TMP/var/jobs/$idl/" > /dev/null' "$(pgrep -af "$TMP/var/jobs/$idl/")"

# --- metrics -----------------------------------------------------------------------------------
out=$(curl -s "http://$REST/metrics")
check "metrics: jobs by state, restarts, bytes" 'echo "$out" | grep -q "^onebit_jobs{state=\"SUCCEEDED\"} 4$" && echo "$out" | grep -q "^onebit_jobs{state=\"CANCELLED\"} 1$" && echo "$out" | grep -q "^onebit_job_restarts_total 1$" && echo "$out" | grep -q "^onebit_sent_bytes_total [1-9]"' "$out"
if command -v promtool > /dev/null; then
  lint=$(echo "$out" | promtool check metrics 2>&1); rc=$?
  check "metrics: promtool finds nothing to say" '[ $rc = 0 ] && [ -z "$lint" ]' "$lint"
else echo "[ SKIPPED  ] metrics: promtool check (promtool not installed)"; fi

# --- SIGKILL onebitd mid-run and start it again: the job is still there and completes -----------
control "FAKE_STEP_S=0.02"
out=$(rpc submit "$TMP/long.yaml" 2 2>/dev/null)
idk=$(echo "$out" | jq -r .id)
for _ in $(seq 200); do [ "$(rpc get "$idk" 2>/dev/null | jq .checkpoint_step)" -ge 20 ] && break; sleep 0.05; done
kill -KILL "$PID"; wait "$PID" 2>/dev/null; PID=""
# A directory with a higher step number that does not verify is not what the job resumes from.
mkdir -p "$TMP/var/checkpoints/$idk/step-99999999" && echo junk > "$TMP/var/checkpoints/$idk/step-99999999/state.h5"
sed -i 's/steps: 4000/steps: 60/' "$TMP/long.yaml"
start_daemon "$TMP/var" --slots 4 --max-restarts 2
j=$(rpc get "$idk" 2>/dev/null)
check "after SIGKILL of onebitd the job is still there" '[ "$(echo "$j" | jq -r .id)" = "$idk" ] && [ "$(job_count)" = 6 ]' "$j"
wait_state "$idk" JOB_STATE_RUNNING 10
sleep $([ -n "${ONEBIT_TEST_SLOW:-}" ] && echo 2 || echo 0.3)
check "the survivors of the old attempt are stopped" '! pgrep -af "$TMP/var/jobs/$idk/" | grep -v -- --resume' "$(pgrep -af "$TMP/var/jobs/$idk/")"

j=$(rpc get "$idk" 2>/dev/null)
check "the job resumes from its checkpoint" '[ "$(echo "$j" | jq ".attempts | length")" = 2 ] && [ "$(echo "$j" | jq .attempts[1].start_step)" -ge 20 ] && [ "$(echo "$j" | jq .attempts[1].start_step)" -lt 4000 ] && echo "$j" | jq -r .attempts[0].exit_reason | grep -q "coordinator restarted"' "$j"
idk_cancel=$(rpc cancel "$idk" 2>/dev/null | jq -r .id)
wait_state "$idk" JOB_STATE_CANCELLED 15
check "and can still be driven (cancelled here)" '[ "$(state_of "$idk")" = JOB_STATE_CANCELLED ]' "$(state_of "$idk")"
metrics_before=$(curl -s "http://$REST/metrics")
out=$(http DELETE "/v1/jobs/$idk?keepCheckpoints=maybe")
check "DELETE with a bad keepCheckpoints: 400" '[ "$(echo "$out" | tail -1)" = 400 ]' "$out"
out=$(http DELETE "/v1/jobs/$idk")
check "DELETE of an ended job: 200, its record, files and checkpoints gone" '[ "$(echo "$out" | tail -1)" = 200 ] && [ "$(echo "$out" | head -1 | jq .checkpointsDeleted)" -ge 1 ] && [ ! -e "$TMP/var/checkpoints/$idk" ] && [ ! -e "$TMP/var/jobs/$idk" ] && [ "$(http GET "/v1/jobs/$idk" | tail -1)" = 404 ]' "$out"
# Every counter of the scrape after the deletion is at least what it was before (they used to
# drop by the deleted job's steps and bytes, a counter reset to rate()).
metrics_after=$(curl -s "http://$REST/metrics")
drops=$(for name in $(echo "$metrics_before" | awk '$1 == "#" && $2 == "TYPE" && $4 == "counter" {print $3}'); do
  a=$(echo "$metrics_before" | awk -v n="$name" '$1 == n {print $2}')
  b=$(echo "$metrics_after" | awk -v n="$name" '$1 == n {print $2}')
  [ -n "$a" ] && { [ -z "$b" ] || [ "$b" -lt "$a" ]; } && echo "$name $a -> $b"
done)
steps_before=$(echo "$metrics_before" | awk '$1 == "onebit_steps_total" {print $2}')
check "metrics: no counter goes down when a job is deleted" '[ -z "$drops" ] && [ "${steps_before:-0}" -gt 0 ]' "$drops"
stop_daemon

# --- SIGTERM with open streams: the streams end, the ranks checkpoint, the job resumes later ----
control "FAKE_STEP_S=0.02"
start_daemon "$TMP/var5"
e=$(rpc submit "$TMP/endless-nock.yaml" 2 2>/dev/null | jq -r .id)
for _ in $(seq 200); do [ "$(rpc get "$e" 2>/dev/null | jq .progress.step)" -ge 20 ] && break; sleep 0.05; done
OBRPC_TIMEOUT_MS=60000 rpc watch "$e" > "$TMP/watch.out" 2> "$TMP/watch.err" &
wpid=$!
curl -s -N --max-time 60 "http://$REST/v1/jobs/$e/events" > "$TMP/sse.out" &
cpid=$!
sleep 0.5
t0=$(date +%s%N)
stop_daemon
t1=$(date +%s%N)
check "SIGTERM with open streams: onebitd exits promptly" '[ $(((t1 - t0) / 1000000)) -lt 8000 ]' "$(((t1 - t0) / 1000000)) ms"
wrc=0; for _ in $(seq 100); do kill -0 $wpid 2>/dev/null || break; sleep 0.05; done
kill -0 $wpid 2>/dev/null && wrc=running
check "the WatchJob stream ended" '[ "$wrc" != running ] && grep -q "^status [0-9]" "$TMP/watch.err" && [ "$(grep -c "\"kind\":\"step\"" "$TMP/watch.out")" -ge 2 ]' "$wrc $(cat "$TMP/watch.err")"
for _ in $(seq 100); do kill -0 $cpid 2>/dev/null || break; sleep 0.05; done
check "the SSE stream ended" '! kill -0 $cpid 2>/dev/null && grep -q "^event: step" "$TMP/sse.out"' "$(tail -2 "$TMP/sse.out")"
ck=$(ls -d "$TMP/var5/checkpoints/$e"/step-???????? | tail -1); ck=$((10#${ck##*step-}))
check "SIGTERM: the ranks wrote a final checkpoint, nothing is left" '[ "$ck" -ge 20 ] && ! pgrep -f "$TMP/var5/jobs/$e/" > /dev/null' "ck=$ck $(pgrep -af "$TMP/var5/jobs/$e/")"
start_daemon "$TMP/var5"
wait_state "$e" JOB_STATE_RUNNING 10
j=$(rpc get "$e" 2>/dev/null)
check "restarted: the job resumes from that checkpoint" '[ "$(echo "$j" | jq .attempts[1].start_step)" = "$ck" ] && [ "$(echo "$j" | jq -r .attempts[0].exit_reason)" = "coordinator shut down" ] && [ "$(echo "$j" | jq .restarts)" = 0 ]' "$j"
rpc cancel "$e" > /dev/null 2>&1
wait_state "$e" JOB_STATE_CANCELLED 10

# --- random input: every call answered with an error or a result, nothing created --------------
before=$(job_count)
methods=(onebit.v1.JobService/SubmitJob onebit.v1.JobService/GetJob onebit.v1.JobService/ListJobs
         onebit.v1.JobService/CancelJob onebit.v1.JobService/WatchJob
         onebit.v1.JobService/ListCheckpoints onebit.v1.WorkerService/ReportProgress
         grpc.health.v1.Health/Check)
codes=""
for i in $(seq 48); do
  hex=$(head -c $((1 + RANDOM % 48)) /dev/urandom | od -An -tx1 | tr -d ' \n')
  OBRPC_TIMEOUT_MS=2000 rpc raw "/${methods[$((i % 8))]}" "$hex" > /dev/null 2>&1
  codes="$codes $?"
done
check "random protobuf bytes: only OK, INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION" '! echo $codes | tr " " "\n" | grep -qvE "^(0|3|5|9)$"' "$codes"
codes=""
for i in $(seq 24); do
  head -c $((1 + RANDOM % 200)) /dev/urandom > "$TMP/rand"
  codes="$codes $(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary @"$TMP/rand" "http://$REST/v1/jobs")"
done
check "random REST bodies: 400" '! echo $codes | tr " " "\n" | grep -qv "^400$"' "$codes"
# What a web page can send without asking: a text/plain or form POST. Refused from the headers.
before2=$(job_count)
out=$(curl -s -X POST -H 'Content-Type: text/plain' -w '\n%{http_code}' --data-binary "$(jq -n --rawfile s "$TMP/short.yaml" '{spec: $s}')" "http://$REST/v1/jobs")
out2=$(curl -s -X POST -w '\n%{http_code}' --data "$(jq -n --rawfile s "$TMP/short.yaml" '{spec: $s}')" "http://$REST/v1/jobs")
check "text/plain and form POSTs: 415, nothing created" '[ "$(echo "$out" | tail -1)" = 415 ] && [ "$(echo "$out2" | tail -1)" = 415 ] && echo "$out" | head -1 | jq -r .error.message | grep -q "expected application/json" && [ "$(job_count)" = "$before2" ]' "$out $out2"
# A name rebound to 127.0.0.1 by a web page's DNS: the Host header gives it away.
out=$(curl -s -H 'Host: evil.example:8080' -w '\n%{http_code}' "http://$REST/v1/jobs")
out2=$(curl -s -H "Host: localhost:${REST##*:}" -o /dev/null -w '%{http_code}' "http://$REST/v1/jobs")
check "a Host that is not loopback: 421; localhost: 200" '[ "$(echo "$out" | tail -1)" = 421 ] && [ "$out2" = 200 ]' "$out $out2"
# A declared body over the limit is refused before it is read.
out=$(curl -s -X POST -H 'Content-Type: application/json' -H 'Content-Length: 900000000' -w '\n%{http_code}' --max-time 5 -d '{}' "http://$REST/v1/jobs")
check "Content-Length over the limit: 413 at once" '[ "$(echo "$out" | tail -1)" = 413 ]' "$out"
# Streams the client gives up on at once, while the server is still setting them up (a race
# there once freed a stream that was then linked; the sanitizer build of this test catches it).
jid=$(curl -s "http://$REST/v1/jobs?pageSize=1" | jq -r '.jobs[0].id')
for _ in $(seq 40); do OBRPC_TIMEOUT_MS=1 rpc watch "$jid" > /dev/null 2>&1; done
check "forty streams abandoned as they open: the service still serves" 'rpc health > /dev/null 2>&1 && [ "$(curl -s -o /dev/null -w "%{http_code}" "http://$REST/healthz")" = 200 ]'
check "random input created nothing, the service still serves" '[ "$(job_count)" = "$before" ] && rpc health > /dev/null 2>&1' "$before -> $(job_count)"
stop_daemon

# --- slots: a job waits as PENDING while the ranks are taken ------------------------------------
control "FAKE_STEP_S=0.01"
start_daemon "$TMP/var2" --slots 2
a=$(rpc submit "$TMP/endless.yaml" 2 2>/dev/null | jq -r .id)
b=$(rpc submit "$TMP/short.yaml" 2 2>/dev/null | jq -r .id)
wait_state "$a" JOB_STATE_RUNNING 10
sleep 0.5
check "over capacity: the second job waits as PENDING" '[ "$(state_of "$b")" = JOB_STATE_PENDING ]' "$(state_of "$b")"
rpc cancel "$a" > /dev/null 2>&1
check "it runs once the slots are free" 'wait_state "$b" JOB_STATE_SUCCEEDED 20' "$(state_of "$b")"
stop_daemon

# --- no progress within the timeout ends the attempt -------------------------------------------
control "FAKE_HANG_AT=12"
start_daemon "$TMP/var3" --progress-timeout 1 --max-restarts 0 --cancel-grace 1
h=$(rpc submit "$TMP/short.yaml" 1 2>/dev/null | jq -r .id)
check "no progress: FAILED with the reason" 'wait_state "$h" JOB_STATE_FAILED 15 && rpc get "$h" 2>/dev/null | jq -r .message | grep -q "no progress report for"' "$(rpc get "$h" 2>/dev/null)"
control "FAKE_STEP_S=0.01"
stop_daemon

# --- a deadline: the job is stopped (with a checkpoint) and FAILED, not restarted ----------------
start_daemon "$TMP/var10"
body=$(jq -n --rawfile s "$TMP/endless.yaml" '{spec: $s, worldSize: 1, maxRestarts: 3, deadline: "3s"}')
d=$(http POST /v1/jobs -d "$body" | head -1 | jq -r .id)
check "deadline: accepted and shown as deadlineMs" '[ "$(curl -s "http://$REST/v1/jobs/$d" | jq -r .deadlineMs)" = 3000 ]' "$(curl -s "http://$REST/v1/jobs/$d")"
check "deadline: running before it" 'wait_state "$d" JOB_STATE_RUNNING 10 && sleep 0.5 && [ "$(state_of "$d")" = JOB_STATE_RUNNING ]'
check "deadline: FAILED after it, deadline exceeded, with a checkpoint, no restart" 'wait_state "$d" JOB_STATE_FAILED 15 && curl -s "http://$REST/v1/jobs/$d" | jq -e ".restarts == 0 and (.attempts | length) == 1 and (.message | startswith(\"deadline exceeded: not done 3s after its first start; stopped at step \")) and (.lastCheckpoint.step | tonumber) > 0"' "$(curl -s "http://$REST/v1/jobs/$d" | jq -c '{state, message, restarts, lastCheckpoint}')"
check "deadline: a notice event says it was exceeded" 'curl -s -N --max-time 5 "http://$REST/v1/jobs/$d/events" | grep -q "deadline of 3s exceeded: stopping the workers"'
out=$(http POST /v1/jobs -d "$(jq -n --rawfile s "$TMP/short.yaml" '{spec: $s, deadline: "1.5h"}')")
check "deadline: 1.5h is refused, 400, naming the field" '[ "$(echo "$out" | tail -1)" = 400 ] && echo "$out" | head -1 | jq -r .error.message | grep -q "^deadline: '"'"'1.5h'"'"': expected a unit"' "$out"
out=$(http POST /v1/jobs -d "$(jq -n --rawfile s "$TMP/short.yaml" '{spec: $s, deadline: 7200}')")
check "deadline: a number is refused, 400" '[ "$(echo "$out" | tail -1)" = 400 ] && echo "$out" | head -1 | jq -r .error.message | grep -q "^deadline: expected a string"' "$out"
stop_daemon

# --- rewarms: counted from the workers' reports, in GetJob, REST, events and /metrics -------------
control "FAKE_STEP_S=0.02" "FAKE_REWARM_AT='5 9'"
start_daemon "$TMP/var11"
w=$(rpc submit "$TMP/endless.yaml" 1 2>/dev/null | jq -r .id)
for _ in $(seq 200); do [ "$(rpc get "$w" 2>/dev/null | jq .progress.rewarms)" = 2 ] && break; sleep 0.05; done
metrics=$(curl -s "http://$REST/metrics")
check "rewarms: 2 over gRPC and REST while running, and in /metrics" '[ "$(rpc get "$w" 2>/dev/null | jq .progress.rewarms)" = 2 ] && [ "$(curl -s "http://$REST/v1/jobs/$w" | jq -r .progress.rewarms)" = 2 ] && echo "$metrics" | grep -q "^onebit_job_rewarms_total{job=\"$w\"} 2$" && echo "$metrics" | grep -q "^# TYPE onebit_job_rewarms_total counter$" && echo "$metrics" | grep -q "^# TYPE onebit_job_loss gauge$"' "$(rpc get "$w" 2>/dev/null | jq -c .progress) $(echo "$metrics" | grep -e rewarm -e job_loss)"
for _ in $(seq 100); do [ "$(rpc get "$w" 2>/dev/null | jq .progress.step)" -ge 20 ] && break; sleep 0.05; done
check "rewarms: kept by the step reports after them, and in the events" '[ "$(rpc get "$w" 2>/dev/null | jq .progress.rewarms)" = 2 ] && OBRPC_TIMEOUT_MS=1000 rpc watch "$w" 2>/dev/null | jq -s -e "map(select(.kind == \"rewarm\")) | map(.progress.rewarms) == [1, 2]" > /dev/null' "$(rpc get "$w" 2>/dev/null | jq -c .progress)"
rpc cancel "$w" > /dev/null 2>&1
control "FAKE_STEP_S=0.01"
stop_daemon

# --- launch failures: recorded as failed attempts, then FAILED with the reason -------------------
start_daemon "$TMP/var6" --mpirun "$TMP/no-such-mpirun" --max-restarts 1
f=$(rpc submit "$TMP/short.yaml" 1 2>/dev/null | jq -r .id)
check "mpirun missing: FAILED, each attempt says why" 'wait_state "$f" JOB_STATE_FAILED 10 && [ "$(rpc get "$f" 2>/dev/null | jq ".attempts | length")" = 2 ] && rpc get "$f" 2>/dev/null | jq -r .attempts[0].exit_reason | grep -q "launch failed: starting $TMP/no-such-mpirun for job $f: No such file or directory"' "$(rpc get "$f" 2>/dev/null)"
stop_daemon
launch_daemon "$TMP/var7" --insecure-no-auth --worker "$TMP/no-such-worker" --max-restarts 0
f=$(rpc submit "$TMP/short.yaml" 1 2>/dev/null | jq -r .id)
check "worker missing: FAILED with mpirun's reason" 'wait_state "$f" JOB_STATE_FAILED 15 && rpc get "$f" 2>/dev/null | jq -r .message | grep -q "workers failed (exit code [0-9]*): Executable: $TMP/no-such-worker"' "$(rpc get "$f" 2>/dev/null | jq -r .message)"
stop_daemon

# --- token: every call without it is refused on both APIs --------------------------------------
echo "s3cret-token" > "$TMP/token"
start_daemon "$TMP/var4" --token-file "$TMP/token"
ONEBIT_TOKEN= rpc list > /dev/null 2> "$TMP/err"; rc=$?
check "no token over gRPC: UNAUTHENTICATED" '[ $rc -eq 16 ]' "rc=$rc $(cat "$TMP/err")"
ONEBIT_TOKEN= rpc health > /dev/null 2> "$TMP/err"; rc=$?
out=$(curl -s -w '\n%{http_code}' "http://$REST/healthz")
check "grpc.health.v1 and /healthz answer probes without a token" '[ $rc -eq 0 ] && [ "$(echo "$out" | tail -1)" = 200 ]' "rc=$rc $(cat "$TMP/err") $out"
ONEBIT_TOKEN=wrong rpc list > /dev/null 2> "$TMP/err"; rc=$?
check "wrong token over gRPC: UNAUTHENTICATED" '[ $rc -eq 16 ]' "rc=$rc"
ONEBIT_TOKEN=s3cret-token rpc list > /dev/null 2> "$TMP/err"; rc=$?
check "the token over gRPC: OK" '[ $rc -eq 0 ]' "rc=$rc $(cat "$TMP/err")"
out=$(http POST /v1/jobs -d "$(jq -n --rawfile s "$TMP/short.yaml" '{spec: $s}')")
check "no token over REST: 401, nothing created" '[ "$(echo "$out" | tail -1)" = 401 ] && [ "$(curl -s -H "Authorization: Bearer s3cret-token" "http://$REST/v1/jobs" | jq ".jobs | length")" = 0 ]' "$out"
# The token is checked from the headers: a client without it is answered before it sends a
# byte of the body it announced.
status=$(exec 3<>"/dev/tcp/127.0.0.1/${REST##*:}"; printf 'POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2000000\r\n\r\n' >&3; timeout 3 head -1 <&3 | tr -d '\r')
check "no token: 401 before the body is sent" '[ "$status" = "HTTP/1.1 401 Unauthorized" ]' "$status"
out=$(http GET /metrics -H "Authorization: Bearer s3cret-token")
check "the token over REST: 200" '[ "$(echo "$out" | tail -1)" = 200 ]' "$(echo "$out" | tail -1)"

stop_daemon

# --- a cap on the event streams open at once, per API ------------------------------------------
start_daemon "$TMP/var10" --max-streams 2
e=$(rpc submit "$TMP/endless.yaml" 1 2>/dev/null | jq -r .id)
wait_state "$e" JOB_STATE_RUNNING 10
bg=()
for _ in 1 2; do
  OBRPC_TIMEOUT_MS=30000 "$OBRPC" "$GRPC" watch "$e" > /dev/null 2>&1 & bg+=($!)
  curl -s -N --max-time 30 "http://$REST/v1/jobs/$e/events" > /dev/null 2>&1 & bg+=($!)
done
sleep 1
OBRPC_TIMEOUT_MS=5000 rpc watch "$e" > /dev/null 2> "$TMP/third.err"; rc=$?
out=$(curl -s --max-time 5 -w '\n%{http_code}' "http://$REST/v1/jobs/$e/events")
check "a third stream is refused: RESOURCE_EXHAUSTED and 429" '[ $rc -eq 8 ] && grep -q "2 streams are open" "$TMP/third.err" && [ "$(echo "$out" | tail -1)" = 429 ]' "rc=$rc $(cat "$TMP/third.err") $out"
kill "${bg[@]}" 2>/dev/null; wait "${bg[@]}" 2>/dev/null
sleep 0.5
OBRPC_TIMEOUT_MS=1500 rpc watch "$e" > /dev/null 2>&1; rc=$?
check "once they close, streams open again" '[ $rc -eq 4 ] || [ $rc -eq 0 ]' "rc=$rc"
rpc cancel "$e" > /dev/null 2>&1
wait_state "$e" JOB_STATE_CANCELLED 10
stop_daemon

# --- by default a token, made at the first start, mode 0600; loopback only without TLS ---------
start_daemon "$TMP/var8" --default-auth
tok=$(cat "$TMP/var8/token" 2>/dev/null)
check "the first start makes a token file readable by its owner only" '[ "$(stat -c %a "$TMP/var8/token")" = 600 ] && echo "$tok" | grep -qE "^[0-9a-f]{64}$"' "$(ls -l "$TMP/var8/token") $tok"
ONEBIT_TOKEN= rpc list > /dev/null 2>&1; rc=$?
out=$(curl -s -o /dev/null -w '%{http_code}' "http://$REST/v1/jobs")
ONEBIT_TOKEN=$tok rpc list > /dev/null 2>&1; rc2=$?
check "without it: UNAUTHENTICATED and 401; with it: OK" '[ $rc -eq 16 ] && [ "$out" = 401 ] && [ $rc2 -eq 0 ]' "rc=$rc $out rc2=$rc2"
stop_daemon
start_daemon "$TMP/var8" --default-auth
check "a restart keeps the token" '[ "$(cat "$TMP/var8/token")" = "$tok" ] && ONEBIT_TOKEN=$tok rpc list > /dev/null 2>&1'
stop_daemon
chmod 644 "$TMP/var8/token"
"$ONEBITD" --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --state-dir "$TMP/var8" > "$TMP/open.out" 2>&1; rc=$?
check "a token file others can read is refused" '[ $rc -eq 2 ] && grep -q "can be read by others (mode 644)" "$TMP/open.out"' "rc=$rc $(cat "$TMP/open.out")"
"$ONEBITD" --grpc 0.0.0.0:0 --rest 127.0.0.1:0 --state-dir "$TMP/var9" > "$TMP/plain.out" 2>&1; rc=$?
check "a non-loopback address without TLS is refused" '[ $rc -eq 2 ] && grep -q "0.0.0.0:0 is not a loopback address" "$TMP/plain.out" && [ ! -e "$TMP/var9" ]' "rc=$rc $(cat "$TMP/plain.out")"
"$ONEBITD" --insecure-no-auth --token-file "$TMP/token" --state-dir "$TMP/var9" > "$TMP/both.out" 2>&1; rc=$?
check "--insecure-no-auth with --token-file: refused" '[ $rc -eq 2 ] && grep -q "choose one" "$TMP/both.out"' "rc=$rc"
start_daemon "$TMP/var4" --token-file "$TMP/token"

# --- workers report with their attempt's own credential, never with the admin token ------------
control "FAKE_STEP_S=0.01" "FAKE_ENV_FILE=$TMP/worker.env"
export ONEBIT_TOKEN=s3cret-token
e=$(rpc submit "$TMP/endless.yaml" 1 2>/dev/null | jq -r .id)
for _ in $(seq 100); do [ -s "$TMP/worker.env" ] && break; sleep 0.05; done
check "the workers get a report credential, not the admin token" 'grep -qE "^ONEBIT_REPORT_TOKEN=[0-9a-f]{64}$" "$TMP/worker.env" && ! grep -q "s3cret-token" "$TMP/worker.env"' "$(grep ONEBIT "$TMP/worker.env")"
# ReportProgressRequest {job_id: e, kind: "step"}, encoded by hand.
report_hex=$(printf '0a%02x%s120473746570' "${#e}" "$(printf '%s' "$e" | od -An -tx1 | tr -d ' \n')")
rpc raw /onebit.v1.WorkerService/ReportProgress "$report_hex" > /dev/null 2>&1; rc=$?
ONEBIT_TOKEN= rpc raw /onebit.v1.WorkerService/ReportProgress "$report_hex" > /dev/null 2>&1; rc2=$?
ONEBIT_TOKEN=$(sed -n 's/^ONEBIT_REPORT_TOKEN=//p' "$TMP/worker.env") rpc raw /onebit.v1.WorkerService/ReportProgress "$report_hex" > /dev/null 2>&1; rc3=$?
check "ReportProgress: the admin token or none: UNAUTHENTICATED; the attempt's credential: OK" '[ $rc -eq 16 ] && [ $rc2 -eq 16 ] && [ $rc3 -eq 0 ]' "rc=$rc rc2=$rc2 rc3=$rc3"
if [ -n "$WORKER" ]; then
  # The real worker reads the credential from ONEBIT_REPORT_TOKEN_FILE (no ONEBIT_REPORT_TOKEN):
  # its reports are taken; with a wrong credential in the file they are refused and it trains on.
  # Under the sanitizer stage's leak check it runs like every MPI process there: without it
  # (Open MPI keeps its allocations to the end), ASan's other checks on.
  wasan="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0"
  reports() { curl -s -H "Authorization: Bearer s3cret-token" "http://$REST/metrics" | sed -n 's/^onebit_worker_reports_total //p'; }
  printf 'model: {type: mlp, hidden: [16]}\ndata: {type: synthetic_classification, n_train: 256, n_eval: 32, input_dim: 8, num_classes: 2}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: 20\nlog_interval: 5\n' > "$TMP/tiny.yaml"
  sed -n 's/^ONEBIT_REPORT_TOKEN=//p' "$TMP/worker.env" > "$TMP/report-token"
  echo 0123456789abcdef > "$TMP/wrong-token"
  chmod 600 "$TMP/report-token" "$TMP/wrong-token"
  n0=$(reports)
  env -u ONEBIT_REPORT_TOKEN -u ONEBIT_TOKEN ASAN_OPTIONS="$wasan" ONEBIT_REPORT_TOKEN_FILE="$TMP/report-token" mpirun -np 1 "$WORKER" \
    --spec "$TMP/tiny.yaml" --job-id "$e" --report "$GRPC" > "$TMP/real.out" 2> "$TMP/real.err"; rc=$?
  n1=$(reports)
  env -u ONEBIT_REPORT_TOKEN -u ONEBIT_TOKEN ASAN_OPTIONS="$wasan" ONEBIT_REPORT_TOKEN_FILE="$TMP/wrong-token" mpirun -np 1 "$WORKER" \
    --spec "$TMP/tiny.yaml" --job-id "$e" --report "$GRPC" > "$TMP/wrong.out" 2> "$TMP/wrong.err"; rc2=$?
  n2=$(reports)
  check "the real worker reports with the credential read from ONEBIT_REPORT_TOKEN_FILE" '[ $rc -eq 0 ] && [ -n "$n0" ] && [ "$n1" -gt "$n0" ]' "rc=$rc reports $n0 -> $n1 $(cat "$TMP/real.err")"
  check "a wrong credential in the file: refused, the worker trains on" '[ $rc2 -eq 0 ] && [ "$n2" = "$n1" ] && grep -q "\"event\":\"summary\"" "$TMP/wrong.out"' "rc=$rc2 reports $n1 -> $n2"
fi
rpc cancel "$e" > /dev/null 2>&1
unset ONEBIT_TOKEN
control "FAKE_STEP_S=0.01"

t0=$(date +%s%N)
stop_daemon
t1=$(date +%s%N)
check "SIGTERM: a clean shutdown" '[ $(((t1 - t0) / 1000000)) -lt 8000 ] && grep -q "shutting down" "$TMP/onebitd.log"' "$(((t1 - t0) / 1000000)) ms"

# --- the memory estimate at submit: a job whose ranks need more than --max-job-memory ---------
start_daemon "$TMP/var9" --max-job-memory 200M
printf 'model: {type: mlp, hidden: [64]}\ndata: {type: synthetic_classification, n_train: 200000, input_dim: 256}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: 10\n' > "$TMP/big.yaml"
rpc submit "$TMP/big.yaml" 2 > /dev/null 2> "$TMP/err"; rc=$?
check "SubmitJob over the memory limit: INVALID_ARGUMENT with the estimate and the limit" '[ $rc -eq 3 ] && grep -q "memory: the job needs about [0-9]* MiB per rank (.*data [0-9]*.*) x 2 ranks = [0-9]* MiB, over the service.s limit of 200 MiB (--max-job-memory)" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
out=$(http POST /v1/jobs -d "$(jq -n --rawfile s "$TMP/big.yaml" '{spec: $s, worldSize: 2}')")
check "POST /v1/jobs over the memory limit: 400 with the estimate" '[ "$(echo "$out" | tail -1)" = 400 ] && echo "$out" | head -1 | jq -r .error.message | grep -q "over the service.s limit of 200 MiB"' "$out"
rpc submit "$TMP/short.yaml" 2 > /dev/null 2> "$TMP/err"; rc=$?
check "a job within the memory limit is taken" '[ $rc -eq 0 ]' "rc=$rc $(cat "$TMP/err")"
stop_daemon

# --- paths are checked where they are used: pinned at launch --------------------------------
# A job names a link under a data root; while it waits for slots, the link is turned to a file
# outside the roots. At launch the path is resolved again: the job fails, nothing is started.
start_daemon "$TMP/var10" --slots 2
mkdir -p "$TMP/var10/data" && echo "some text to train on" > "$TMP/var10/data/corpus.txt"
ln -s corpus.txt "$TMP/var10/data/link.txt"
printf 'model: {type: transformer, layers: 1, d_model: 16, heads: 2, context: 8}
data: {type: text, path: %s}
optimizer: {type: adam}
batch_size: 2
steps: 20
log_interval: 5
checkpoint: {interval: 10}
' "$TMP/var10/data/link.txt" > "$TMP/linked.yaml"
control "FAKE_STEP_S=0.05"
blocker=$(rpc submit "$TMP/endless.yaml" 2 2>/dev/null | jq -r .id)
wait_state "$blocker" JOB_STATE_RUNNING 10
linked=$(rpc submit "$TMP/linked.yaml" 2 2>"$TMP/err" | jq -r .id)
check "a job naming a link under a data root is taken" '[[ "$linked" == job-* ]] && [ "$(state_of "$linked")" = JOB_STATE_PENDING ]' "$linked $(cat "$TMP/err")"
ln -sfn /etc/passwd "$TMP/var10/data/link.txt"
rpc cancel "$blocker" > /dev/null 2>&1
wait_state "$linked" JOB_STATE_FAILED 20
j=$(curl -s "http://$REST/v1/jobs/$linked")
check "the link swapped while it waited: FAILED at launch, outside the roots, no attempt" '[ "$(echo "$j" | jq -r .state)" = JOB_STATE_FAILED ] && echo "$j" | jq -r .message | grep -q "not launched: spec: data.path: .* is outside the roots" && [ "$(echo "$j" | jq ".attempts | length")" = 0 ]' "$j"
# The answer for a path outside the roots does not say whether the file exists.
for f in /etc/passwd /etc/no-such-file-here "$TMP/var10/data/../../../etc/nothing"; do
  sed "s|path: .*}|path: $f}|" "$TMP/linked.yaml" > "$TMP/outside.yaml"
  rpc submit "$TMP/outside.yaml" 2 > /dev/null 2> "$TMP/err"; rc=$?
  check "data.path $f: refused as outside the roots, existing or not" '[ $rc -eq 3 ] && grep -q "is outside the roots" "$TMP/err" && ! grep -q "No such file" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
done
sed "s|path: .*}|path: $TMP/var10/data/missing.txt}|" "$TMP/linked.yaml" > "$TMP/missing.yaml"
rpc submit "$TMP/missing.yaml" 2 > /dev/null 2> "$TMP/err"; rc=$?
check "a missing file under a root is named as missing" '[ $rc -eq 3 ] && grep -q "No such file" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
control "FAKE_STEP_S=0.01"
stop_daemon

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
