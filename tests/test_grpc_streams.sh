#!/usr/bin/env bash
# Unary calls out of reach of replaying streams on the gRPC port: 256 WatchJob streams replay a
# finished job's history of about 300 events over and over (grpc_streams.py) while another job
# reports its steps; GetJob of the reporting job is answered every time, its 99th percentile
# under 100 ms (1 s under the sanitizers).
# usage: test_grpc_streams.sh ONEBITD OBRPC FAKE_WORKER
set -u
ONEBITD=$1
OBRPC=$2
FAKE=$3
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/daemon_harness.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
export FAKE_CONTROL=$TMP/control

start_daemon --worker "$FAKE" --max-streams 300
check "onebitd serves" '[ -n "${GRPC#127.0.0.1:}" ] && rpc health > /dev/null 2>&1' "$(tail -3 "$TMP/onebitd.log")"
job() { # STEPS: a job of the fake worker that logs every step
  printf 'name: t\nmodel: {type: mlp, hidden: [8]}\ndata: {type: synthetic_classification}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: %s\nlog_interval: 1\ncheckpoint: {interval: 0}\n' "$1" > "$TMP/job$1.yaml"
  rpc submit "$TMP/job$1.yaml" 1 2>/dev/null | jq -r .id
}
printf '%s\n' "FAKE_STEP_S=0" > "$FAKE_CONTROL"
t0=$SECONDS
done_id=$(job 300)
wait_state "$done_id" SUCCEEDED 60
events=$(OBRPC_TIMEOUT_MS=10000 rpc watch "$done_id" 2>/dev/null | wc -l)
echo "the finished job: $events events, $((SECONDS - t0)) s"
check "a finished job with a long history" '[ "$events" -ge 300 ]' "$events events"
printf '%s\n' "FAKE_STEP_S=0.01" > "$FAKE_CONTROL"
busy=$(job 1000000)
for _ in $(seq 100); do [ "$(get "$busy" | jq -r .state)" = RUNNING ] && break; sleep 0.1; done
limit=100
case "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" in ?*) limit=1000 ;; esac
out=$(/usr/bin/python3 "$HERE/grpc_streams.py" "$GRPC" "$done_id" --streams 256 --calls 200 \
  --seconds 15 --limit-ms "$limit" 2>&1); rc=$?
echo "$out"
check "256 replaying WatchJob streams: every GetJob answered, p99 under $limit ms" '[ $rc = 0 ]' "$out"
s1=$(get "$busy" | jq .progress.step); sleep 1; s2=$(get "$busy" | jq .progress.step)
check "the reporting job still reports, onebitd still serves" '[ "$s2" -gt "$s1" ] && rpc health > /dev/null 2>&1' "steps $s1 -> $s2"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
