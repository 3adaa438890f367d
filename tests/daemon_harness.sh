# Shared by the black-box tests that run the real onebitd with the real onebit-worker
# (test_onebitd_e2e.sh, test_chaos.sh); sourced after ONEBITD and OBRPC are set.
# Gives TMP (removed at exit, with every process under it), ok/bad/check and the counters,
# start_daemon (sets PID, GRPC, REST), rpc, get, wait_state, procs_of.
TMP=$(mktemp -d)
PID=""
passed=0
failed=0
cleanup() {
  [ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null
  pkill -KILL -f "$TMP/" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1: $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi; }

# A daemon on free ports with its state in $TMP/var (kept across restarts); its arguments are
# passed on to onebitd after the harness's own.
start_daemon() {
  rm -f "$TMP/ready"
  "$ONEBITD" --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --state-dir "$TMP/var" --ready-file "$TMP/ready" \
    --insecure-no-auth --slots 4 --backoff 0.2 --cancel-grace 20 "$@" >> "$TMP/onebitd.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do [ -s "$TMP/ready" ] && break; sleep 0.05; done
  GRPC=127.0.0.1:$(sed -n 's/^grpc=//p' "$TMP/ready")
  REST=127.0.0.1:$(sed -n 's/^rest=//p' "$TMP/ready")
}
rpc() { "$OBRPC" "$GRPC" "$@"; }
get() { rpc get "$1" 2>/dev/null; }
wait_state() { # ID STATE SECONDS
  for _ in $(seq $(($3 * 10))); do
    [ "$(get "$1" | jq -r .state)" = "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
# Processes named NAME (onebit-worker, mpirun) whose command line names the job's spec, under
# this test's own state directory (other coordinators may run jobs with the same ids).
procs_of() { # ID NAME
  for p in $(pgrep -x "$2"); do
    tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -qF "$TMP/var/jobs/$1/spec.json" && echo "$p"
  done
}
