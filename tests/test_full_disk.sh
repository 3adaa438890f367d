#!/usr/bin/env bash
# onebitd on a full disk: its state directory on a small tmpfs, filled by a file while a job runs
# (tests/fake_worker.sh under the real mpirun). While the store cannot be written, health says
# NOT_SERVING (gRPC grpc.health.v1 and GET /healthz 503) and submits and cancels are refused with
# UNAVAILABLE / 503 and a message that says why; the job's workers finish meanwhile, their
# checkpoints on another file system (bound at STATE/checkpoints: a job is done only beside the
# checkpoint of its last step). When the filler is deleted, health returns to SERVING by itself,
# the job ends SUCCEEDED with its attempt closed (no RUNNING job without a process), and a submit
# is taken again.
# Needs root to mount the tmpfs: without it the test says so and exits 77 (skipped).
# usage: test_full_disk.sh ONEBITD OBRPC FAKE_WORKER
set -u
ONEBITD=$1
OBRPC=$2
FAKE=$3
. "$(dirname "$0")/daemon_harness.sh"
MNT=$TMP/var
mkdir -p "$MNT"
if ! out=$(mount -t tmpfs -o size=24m onebit-test "$MNT" 2>&1); then
  echo "SKIP: cannot mount a tmpfs for the state directory (needs root): $out"
  exit 77
fi
full_disk_cleanup() {
  [ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null
  PID=""
  pkill -KILL -f "$TMP/" 2>/dev/null
  sleep 0.2
  umount "$MNT/checkpoints" 2>/dev/null || umount -l "$MNT/checkpoints" 2>/dev/null
  umount "$MNT" 2>/dev/null || umount -l "$MNT"
  cleanup
}
trap full_disk_cleanup EXIT
mkdir -p "$MNT/checkpoints" "$TMP/checkpoints"
mount --bind "$TMP/checkpoints" "$MNT/checkpoints" ||
  { echo "FAILED: cannot bind the checkpoint directory"; exit 1; }

export OMPI_MCA_rmaps_base_oversubscribe=1
export FAKE_STEP_S=0.03
"$ONEBITD" --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --state-dir "$MNT" --ready-file "$TMP/ready" \
  --insecure-no-auth --worker "$FAKE" --slots 2 --backoff 0.2 --cancel-grace 5 \
  --store-min-free 1M >> "$TMP/onebitd.log" 2>&1 &
PID=$!
for _ in $(seq 100); do [ -s "$TMP/ready" ] && break; sleep 0.05; done
GRPC=127.0.0.1:$(sed -n 's/^grpc=//p' "$TMP/ready")
REST=127.0.0.1:$(sed -n 's/^rest=//p' "$TMP/ready")
[ -s "$TMP/ready" ] || { echo "onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }

http() { local m=$1 p=$2; shift 2; curl -s -X "$m" -H 'Content-Type: application/json' -w '\n%{http_code}' "$@" "http://$REST$p"; }
health() { rpc health 2>/dev/null | jq -r .status; } # 1 SERVING, 2 NOT_SERVING
wait_health() { # STATUS SECONDS
  for _ in $(seq $(($2 * 10))); do [ "$(health)" = "$1" ] && return 0; sleep 0.1; done
  return 1
}
printf 'name: t\nmodel: {type: mlp, hidden: [8]}\ndata: {type: synthetic_classification}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: 200\nlog_interval: 5\ncheckpoint: {interval: 50}\n' > "$TMP/job.yaml"

check "SERVING before the disk fills" '[ "$(health)" = 1 ] && [ "$(http GET /healthz | tail -1)" = 200 ]'
id=$(rpc submit "$TMP/job.yaml" 1 0 2>/dev/null | jq -r .id)
# The fake worker is a bash script: its processes are "bash" with the job's spec path.
workers() { procs_of "$id" bash; }
for _ in $(seq 100); do [ -n "$(workers)" ] && [ "$(get "$id" | jq .progress.step)" -gt 0 ] && break; sleep 0.1; done
check "the job runs" '[ "$(get "$id" | jq -r .state)" = RUNNING ] && [ -n "$(workers)" ]' "$(get "$id")"

# Fill the file system: dd stops at ENOSPC.
dd if=/dev/zero of="$MNT/filler" bs=64k > /dev/null 2>&1
avail=$(df -k --output=avail "$MNT" | tail -1 | tr -d ' ')
check "the state directory's file system is full" '[ "$avail" -lt 1024 ]' "avail=${avail}K"
check "gRPC health NOT_SERVING while full" 'wait_health 2 5' "health=$(health)"
out=$(http GET /healthz)
check "/healthz 503 NOT_SERVING while full" '[ "$(echo "$out" | tail -1)" = 503 ] && echo "$out" | head -1 | jq -e ".status == \"NOT_SERVING\"" > /dev/null' "$out"
# The reason is whichever the service saw first: a write that failed or too little free space.
rpc submit "$TMP/job.yaml" 1 0 > /dev/null 2> "$TMP/err"; rc=$?
check "SubmitJob refused: UNAVAILABLE with the reason" '[ $rc -eq 14 ] && grep -q "the job store cannot be written (.*); the service takes no changes until it can: try again later" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
out=$(http POST /v1/jobs -d "$(jq -n --rawfile s "$TMP/job.yaml" '{spec: $s}')")
check "POST /v1/jobs refused: 503 UNAVAILABLE" '[ "$(echo "$out" | tail -1)" = 503 ] && echo "$out" | head -1 | jq -r .error.message | grep -q "the job store cannot be written"' "$out"
rpc cancel "$id" > /dev/null 2> "$TMP/err"; rc=$?
check "CancelJob refused: UNAVAILABLE" '[ $rc -eq 14 ] && grep -q "the job store cannot be written" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
check "reads still answer while full" '[ "$(get "$id" | jq -r .id)" = "$id" ]'

# The workers finish their steps while the disk is full.
for _ in $(seq 200); do [ -z "$(workers)" ] && break; sleep 0.1; done
check "the workers ended while the disk was full" '[ -z "$(workers)" ]'
sleep 1
check "still NOT_SERVING while full" '[ "$(health)" = 2 ]'

rm -f "$MNT/filler"
check "SERVING again once space is back" 'wait_health 1 10' "health=$(health)"
check "/healthz 200 again" '[ "$(http GET /healthz | tail -1)" = 200 ]'
check "the job ends SUCCEEDED" 'wait_state "$id" SUCCEEDED 10' "$(get "$id")"
j=$(get "$id")
check "its attempt is closed: exit 0, completed, no restart" '[ "$(echo "$j" | jq ".attempts | length")" = 1 ] && [ "$(echo "$j" | jq -r ".attempts[0].exit_reason")" = completed ] && [ "$(echo "$j" | jq ".attempts[0].exit_code")" = 0 ] && [ "$(echo "$j" | jq ".attempts[0].ended")" = true ] && [ "$(echo "$j" | jq ".restarts")" = 0 ]' "$j"
running=$(rpc list 2>/dev/null | jq '[.jobs[] | select(.state == "RUNNING")] | length')
check "no RUNNING job left in the store" '[ "$running" = 0 ]' "running=$running"
out=$(rpc submit "$TMP/job.yaml" 1 0 2> "$TMP/err"); rc=$?
id2=$(echo "$out" | jq -r .id)
check "a submit is taken again and runs" '[ $rc -eq 0 ] && wait_state "$id2" SUCCEEDED 20' "rc=$rc $(cat "$TMP/err") $(get "$id2")"
# As for the refusals above, the log names whichever reason came first: the free-space poll or a
# write that SQLite refused for the full disk.
check "the daemon's log names the full store and its return" 'grep -Eq "store .*(bytes free on the file system|writing the job store failed: .*disk is full)" "$TMP/onebitd.log" && grep -q "the job store can be written again: SERVING" "$TMP/onebitd.log"' "$(tail -5 "$TMP/onebitd.log")"

if [ "$failed" -ne 0 ] || [ -n "${FULL_DISK_VERBOSE:-}" ]; then tail -30 "$TMP/onebitd.log"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
