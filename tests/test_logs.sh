#!/usr/bin/env bash
# Streamed logs through the real programs: onebitd supervising real mpirun processes running
# tests/fake_worker.sh (every rank prints a line per step), onebitctl over gRPC
# (StreamJobLogs) and REST (GET /v1/jobs/{id}/logs:stream), and curl on the REST stream.
# Checks that `logs -f` gets lines while the job runs and ends by itself when it ends, that both
# transports and the old GetJobLogs give the same bytes, --tail, --since (a duration and a time),
# their combination with --rank, and every kind of bad input. Exits non-zero on any mismatch.
# usage: test_logs.sh ONEBITCTL ONEBITD FAKE_WORKER
set -u
CTL=$1
ONEBITD=$2
FAKE=$3
. "$(dirname "$0")/daemon_harness.sh"

export OMPI_MCA_rmaps_base_oversubscribe=1
echo 'FAKE_STEP_S=0.05; FAKE_RANK_LINES=1' > "$TMP/control"
FAKE_CONTROL=$TMP/control launch_daemon "$TMP/var" --worker "$FAKE" --insecure-no-auth
g() { "$CTL" --server "$GRPC" "$@"; }
r() { "$CTL" --rest "http://$REST" "$@"; }
state_of() { curl -s "http://$REST/v1/jobs/$1" | jq -r .state; }
spec() { printf 'name: t\nmodel: {type: mlp, hidden: [8]}\ndata: {type: synthetic_classification}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: %s\nlog_interval: 1\n' "$2" > "$1"; }
# stamp: each line of standard input with the time it arrived (ms), then a space.
stamp() { while IFS= read -r l; do echo "$(date +%s%3N) $l"; done; }
# whole_log ID: the log through the old, polled GetJobLogs (REST, every piece).
whole_log() {
  local off=0 out
  while :; do
    out=$(curl -s "http://$REST/v1/jobs/$1/logs?offset=$off&maxBytes=1048576")
    echo "$out" | jq -r .data | base64 -d
    local next size
    next=$(echo "$out" | jq -r .nextOffset); size=$(echo "$out" | jq -r .size)
    [ "$next" -ge "$size" ] && break
    off=$next
  done
}

spec "$TMP/a.yaml" 80
A=$(g submit -f "$TMP/a.yaml" --np 2)
# Three followers at once, started before the job runs: onebitctl over each transport (one with
# --rank), and curl on the REST stream with every line's arrival time.
timeout 60 "$CTL" --server "$GRPC" logs "$A" -f > "$TMP/grpc.out" 2> "$TMP/grpc.err" &
F1=$!
timeout 60 "$CTL" --rest "http://$REST" logs "$A" -f --rank 1 > "$TMP/rest1.out" 2> "$TMP/rest1.err" &
F2=$!
timeout 60 curl -s -N "http://$REST/v1/jobs/$A/logs:stream?follow=true" | stamp > "$TMP/curl.out" &
F3=$!
for _ in $(seq 400); do [ "$(state_of "$A")" = JOB_STATE_SUCCEEDED ] && break; sleep 0.05; done
end_ms=$(date +%s%3N)
wait $F1; rc1=$?
wait $F2; rc2=$?
wait $F3
done_ms=$(date +%s%3N)
check "the job ran to SUCCEEDED" '[ "$(state_of "$A")" = JOB_STATE_SUCCEEDED ]'
check "logs -f over gRPC ends by itself with the job, exit 0" '[ $rc1 -eq 0 ]' "rc=$rc1 $(cat "$TMP/grpc.err")"
check "logs -f --rank 1 over REST ends by itself with the job, exit 0" '[ $rc2 -eq 0 ]' "rc=$rc2 $(cat "$TMP/rest1.err")"
check "  ... and soon after it" '[ $((done_ms - end_ms)) -lt 5000 ]' "$((done_ms - end_ms)) ms"
whole_log "$A" > "$TMP/whole"
check "the whole log has every step of both ranks" 'grep -c "rank [01] step" "$TMP/whole" | grep -qx 160'
check "logs -f over gRPC: exactly the log" 'cmp -s "$TMP/grpc.out" "$TMP/whole"' "$(diff "$TMP/grpc.out" "$TMP/whole" | head -5)"
check "the REST stream: exactly the log" 'cut -d" " -f2- "$TMP/curl.out" | cmp -s - "$TMP/whole"' "$(cut -d' ' -f2- "$TMP/curl.out" | diff - "$TMP/whole" | head -5)"
check "logs -f --rank 1: rank 1's lines, untagged" '[ "$(cat "$TMP/rest1.out")" = "$(seq 1 80 | sed "s/^/rank 1 step /")" ]' "$(head -3 "$TMP/rest1.out")"
# Streamed: the first step arrived well before the last (the job takes 4 s), and the last line
# within a second of being written (the job ended right after it).
first=$(grep -m1 'rank 0 step 1$' "$TMP/curl.out" | cut -d' ' -f1)
last=$(grep 'rank 0 step 80$' "$TMP/curl.out" | cut -d' ' -f1)
check "lines arrive as they are written" '[ -n "$first" ] && [ -n "$last" ] && [ $((last - first)) -gt 2500 ]' "first=$first last=$last"
check "  ... not long after" '[ $((end_ms - last)) -lt 1500 ]' "last line at $last, job ended by $end_ms"

# --tail, after the job: the last lines of the log, every rank's.
check "--tail 5 over gRPC" '[ "$(g logs "$A" --tail 5)" = "$(tail -n 5 "$TMP/whole")" ]' "$(g logs "$A" --tail 5)"
check "--tail 5 over REST" '[ "$(r logs "$A" --tail 5)" = "$(tail -n 5 "$TMP/whole")" ]'
check "--tail 1 is the last line" '[ "$(g logs "$A" --tail 1)" = "$(tail -n 1 "$TMP/whole")" ]'
check "--tail beyond the log: all of it" '[ "$(g logs "$A" --tail 100000)" = "$(cat "$TMP/whole")" ]'
check "--tail 20 --rank 0: rank 0's lines among the last 20, untagged" \
  '[ "$(g logs "$A" --tail 20 --rank 0)" = "$(tail -n 20 "$TMP/whole" | sed -n "s/^\[[0-9]*,0\]<stdout>://p")" ]'
check "logs without -f: the whole log, once" '[ "$(r logs "$A")" = "$(cat "$TMP/whole")" ]'
check "REST tailLines=3" '[ "$(curl -s "http://$REST/v1/jobs/$A/logs:stream?tailLines=3")" = "$(tail -n 3 "$TMP/whole")" ]'
hdr=$(curl -s -D - -o /dev/null "http://$REST/v1/jobs/$A/logs:stream?tailLines=3" | tr -d '\r')
size=$(stat -c %s "$TMP/whole")
check "REST: X-Log-Offset is where the tail starts" 'echo "$hdr" | grep -qx "X-Log-Offset: $((size - $(tail -n 3 "$TMP/whole" | wc -c)))" && echo "$hdr" | grep -qi "^content-type: text/plain"' "$hdr"

# --since: a job whose lines come over 5 s; a time taken as step 50 was written.
spec "$TMP/b.yaml" 100
B=$(g submit -f "$TMP/b.yaml" --np 1)
timeout 60 curl -s -N "http://$REST/v1/jobs/$B/logs:stream?follow=true" | stamp > "$TMP/b.stamped"
check "job B SUCCEEDED" '[ "$(state_of "$B")" = JOB_STATE_SUCCEEDED ]'
mid_ms=$(grep 'rank 0 step 50$' "$TMP/b.stamped" | cut -d' ' -f1)
mid=$(date -u -d "@$((mid_ms / 1000)).$(printf %03d $((mid_ms % 1000)))" +%Y-%m-%dT%H:%M:%S.%3NZ)
g logs "$B" --since "$mid" > "$TMP/b.since"
r logs "$B" --since "$mid" > "$TMP/b.since.rest"
first_step=$(sed -n 's/.*rank 0 step \([0-9]*\)$/\1/p' "$TMP/b.since" | head -1)
# The log's size is noted about once a second (20 steps here) and a line may wait a moment in
# mpirun: lines from a little before the time may come too, none from well before it. The time
# is when step 50 reached this stream, which looks for new lines every 200 ms: a line that
# reached it a second later was written after the time, and the answer starts at or before it
# (not at step 50 itself, which was written up to a poll before the time).
late=$(awk -v t=$((mid_ms + 1000)) '$1 >= t && /rank 0 step [0-9]+$/ { print $NF; exit }' "$TMP/b.stamped")
check "--since TIME: from about that time on" '[ -n "$first_step" ] && [ -n "$late" ] && [ "$first_step" -ge 20 ] && [ "$first_step" -le "$late" ]' "first step $first_step (time $mid; step $late came a second later)"
check "  ... to the end of the log" '[ "$(tail -n 1 "$TMP/b.since")" = "$(whole_log "$B" | tail -n 1)" ] && whole_log "$B" | tail -c "$(stat -c %s "$TMP/b.since")" | cmp -s - "$TMP/b.since"'
check "  ... the same over REST" 'cmp -s "$TMP/b.since" "$TMP/b.since.rest"'
check "--since with a zone offset" '[ "$(g logs "$B" --since "$(date -u -d "@$((mid_ms / 1000))" +%Y-%m-%dT%H:%M:%S+00:00)" | head -1)" != "" ]'
check "--since 1h: the whole log" '[ "$(g logs "$B" --since 1h)" = "$(whole_log "$B")" ]'
sleep 1.5
check "--since 1s after the job: nothing" '[ -z "$(g logs "$B" --since 1s)" ]' "$(g logs "$B" --since 1s | head -3)"
check "--since 1h --tail 3: the last 3 lines" '[ "$(r logs "$B" --since 1h --tail 3)" = "$(whole_log "$B" | tail -n 3)" ]'
check "--since TIME --tail 2000: from the time (the later start)" '[ "$(g logs "$B" --since "$mid" --tail 2000)" = "$(cat "$TMP/b.since")" ]'

# Bad input.
g logs "$A" --since yesterday > /dev/null 2> "$TMP/err"; rc=$?
check "--since yesterday: usage error" '[ $rc -eq 2 ] && grep -q "expected a duration (10m, 1h30m) or a time" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
g logs "$A" --since 2026-13-01T00:00:00Z > /dev/null 2>&1; rc=$?
check "--since with month 13: usage error" '[ $rc -eq 2 ]' "rc=$rc"
g logs "$A" --tail 0 > /dev/null 2>&1; rc=$?
check "--tail 0: usage error" '[ $rc -eq 2 ]' "rc=$rc"
g logs "$A" --tail 100001 > /dev/null 2>&1; rc=$?
check "--tail 100001: usage error" '[ $rc -eq 2 ]' "rc=$rc"
g logs job-999999 -f > /dev/null 2> "$TMP/err"; rc=$?
check "unknown job over gRPC: exit 1, named" '[ $rc -eq 1 ] && grep -q "no job with id .job-999999." "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
r logs job-999999 -f > /dev/null 2> "$TMP/err"; rc=$?
check "unknown job over REST: exit 1, named" '[ $rc -eq 1 ] && grep -q "no job with id .job-999999." "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
for q in "tailLines=100001" "tailLines=-1" "sinceUnixMs=-5" "follow=maybe" "offset=5&tailLines=3" "offset=x"; do
  out=$(curl -s -w '\n%{http_code}' "http://$REST/v1/jobs/$A/logs:stream?$q")
  check "REST $q: 400" '[ "$(echo "$out" | tail -1)" = 400 ] && echo "$out" | head -1 | jq -e .error.message > /dev/null' "$out"
done
check "REST offset past the end: nothing" '[ -z "$(curl -s "http://$REST/v1/jobs/$A/logs:stream?offset=999999999")" ]'
check "onebitd still running" 'kill -0 $PID'

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
