#!/usr/bin/env bash
# REST read throughput of onebitd: h2load (nghttp2-client) with 16 HTTP/1.1 clients asking
# GET /v1/jobs/{id} (with the bearer token) while a 4-rank 1-bit Adam job trains, the same when
# nothing runs, and GET /healthz, all against one onebitd in one run (machines are noisy: compare
# the rows of one run). Prints a TSV row per case: case, requests, seconds, req/s, mean ms.
#
#   bench/rest/load.sh [BUILD_DIR] [REQUESTS]     (default build, 200000)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
N=${2:-200000}
command -v h2load > /dev/null || { echo "load.sh: needs h2load (apt-get install nghttp2-client)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
TMP=$(mktemp -d)
trap 'kill -TERM $PID 2>/dev/null; sleep 1; pkill -KILL -f "$TMP/" 2>/dev/null; rm -rf "$TMP"' EXIT
TOKEN=bench-token-$$
printf '%s\n' "$TOKEN" > "$TMP/token" && chmod 600 "$TMP/token"
"$BUILD/bin/onebitd" --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --state-dir "$TMP/var" \
  --ready-file "$TMP/ready" --token-file "$TMP/token" --slots 4 > "$TMP/onebitd.log" 2>&1 &
PID=$!
for _ in $(seq 100); do [ -s "$TMP/ready" ] && break; sleep 0.05; done
REST=127.0.0.1:$(sed -n 's/^rest=//p' "$TMP/ready")
auth=(-H "Authorization: Bearer $TOKEN")

# A job that trains for the whole run: the synthetic MLP with many steps, 4 ranks.
sed 's/^steps: .*/steps: 1000000/' examples/synthetic-mlp-onebit.yaml > "$TMP/job.yaml"
id=$(curl -s "${auth[@]}" -H 'Content-Type: application/json' \
  -d "$(jq -n --rawfile s "$TMP/job.yaml" '{spec: $s, worldSize: 4}')" "http://$REST/v1/jobs" | jq -r .id)
for _ in $(seq 300); do
  [ "$(curl -s "${auth[@]}" "http://$REST/v1/jobs/$id" | jq -r '.progress.step // "0"')" -gt 20 ] 2>/dev/null && break
  sleep 0.1
done

run() { # CASE PATH
  local out
  out=$(h2load --h1 -c 16 -n "$N" "${auth[@]}" "http://$REST$2" 2>&1)
  local secs rps mean ok
  # "finished in 72.05ms, 27757.35 req/s, ..." and "time for request: min max mean sd +/-sd",
  # each with its unit (us, ms, s).
  secs=$(echo "$out" | awk '$1 == "finished" {v = $3; sub(/,$/, "", v); u = v; gsub(/[0-9.]/, "", u);
    gsub(/[a-z]/, "", v); print (u == "ms" ? v / 1e3 : u == "us" ? v / 1e6 : v)}')
  rps=$(echo "$out" | awk '$1 == "finished" {print $4}')
  mean=$(echo "$out" | awk '$1 == "time" && $3 == "request:" {v = $6; u = v; gsub(/[0-9.]/, "", u);
    gsub(/[a-z]/, "", v); printf "%.3f", (u == "us" ? v / 1e3 : u == "s" ? v * 1e3 : v)}')
  ok=$(echo "$out" | sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p')
  [ "$ok" = "$N" ] || { echo "load.sh: $1: only $ok of $N answered 2xx" >&2; echo "$out" | tail -5 >&2; }
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$N" "$secs" "$rps" "$mean"
}
step() { curl -s "${auth[@]}" "http://$REST/v1/jobs/$id" | jq -r '.progress.step // "0"'; }
printf 'case\trequests\tseconds\treq_per_s\tmean_ms\n'
s0=$(step)
run "get-job-training" "/v1/jobs/$id"
echo "load.sh: the 4-rank job trained from step $s0 to step $(step) during get-job-training" >&2
run "healthz-training" "/healthz"
curl -s -X POST "${auth[@]}" -H 'Content-Type: application/json' "http://$REST/v1/jobs/$id:cancel" > /dev/null
for _ in $(seq 300); do
  [ "$(curl -s "${auth[@]}" "http://$REST/v1/jobs/$id" | jq -r .state)" = JOB_STATE_CANCELLED ] && break
  sleep 0.1
done
run "get-job-idle" "/v1/jobs/$id"
run "healthz-idle" "/healthz"
