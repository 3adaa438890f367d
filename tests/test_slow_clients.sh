#!/usr/bin/env bash
# Slow clients cannot keep others out of the REST port: 300 connections from 10 addresses that
# send a byte every 4 s (slow_clients.py) while fresh connections ask /healthz and /v1/jobs;
# every probe is answered and their 99th percentile stays under 100 ms (1 s under the
# sanitizers, whose builds run every request several times slower); a connection that trickles
# a byte a second is closed at the request timeout (3 s here) instead of being kept alive by it.
# usage: test_slow_clients.sh ONEBITD OBRPC
set -u
ONEBITD=$1
OBRPC=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/daemon_harness.sh"

start_daemon --request-timeout 3
check "onebitd serves" '[ -n "$REST" ] && curl -sf "http://$REST/healthz" > /dev/null' "$(tail -3 "$TMP/onebitd.log")"
limit=100
case "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" in ?*) limit=1000 ;; esac
out=$(/usr/bin/python3 "$HERE/slow_clients.py" "$REST" --limit-ms "$limit" --deadline-s 3); rc=$?
echo "$out"
check "300 slow connections from 10 addresses: every probe answered, p99 under $limit ms, a trickler closed at the deadline" '[ $rc = 0 ]' "$out"
check "onebitd still serves after the attack" 'curl -sf "http://$REST/healthz" > /dev/null'

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
