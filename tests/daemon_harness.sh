# Shared by the black-box tests that run the real onebitd (test_onebitd.sh, test_onebitd_e2e.sh,
# test_chaos.sh, test_onebitctl.sh, test_logs.sh, test_completion.sh, test_dashboard.sh, ...);
# sourced after ONEBITD (and OBRPC, for rpc) are set.
# Gives TMP (removed at exit, with every process under it), ok/bad/check and the counters,
# launch_daemon and start_daemon (set PID, GRPC, REST), stop_daemon, rpc, get, wait_state,
# procs_of. A test ends with
#   echo "$passed passed, $failed failed"
#   [ "$failed" -eq 0 ]
TMP=$(mktemp -d)
# tests/fake_worker.sh writes its checkpoints with the fake_checkpoint program built beside onebitd.
export FAKE_CKPT_WRITER=${FAKE_CKPT_WRITER:-$(dirname "$ONEBITD")/fake_checkpoint}
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

# launch_daemon STATE_DIR [onebitd options]: onebitd on free ports with its state in STATE_DIR
# and no other options than those given, its output appended to $TMP/onebitd.log; waits for
# its ready file (10 s at most) and sets PID, GRPC and REST (host:port). Returns 1 if it did
# not get ready.
launch_daemon() {
  local state=$1
  shift
  rm -f "$TMP/ready"
  "$ONEBITD" --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --state-dir "$state" --ready-file "$TMP/ready" \
    "$@" >> "$TMP/onebitd.log" 2>&1 &
  PID=$!
  for _ in $(seq 200); do [ -s "$TMP/ready" ] && break; sleep 0.05; done
  GRPC=127.0.0.1:$(sed -n 's/^grpc=//p' "$TMP/ready")
  REST=127.0.0.1:$(sed -n 's/^rest=//p' "$TMP/ready")
  [ -s "$TMP/ready" ]
}
# A daemon on free ports with its state in $TMP/var (kept across restarts); its arguments are
# passed on to onebitd after the harness's own.
start_daemon() {
  launch_daemon "$TMP/var" --insecure-no-auth --slots 4 --backoff 0.2 --cancel-grace 20 "$@"
}
# stop_daemon: SIGTERM to the daemon (if one runs), and wait (10 s at most) until it has ended.
stop_daemon() {
  [ -n "$PID" ] || return 0
  kill -TERM "$PID" 2>/dev/null
  for _ in $(seq 200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.05; done
  wait "$PID" 2>/dev/null
  PID=""
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
# submit_pb SPEC [PATH...]: a SubmitJobRequest in hex for `rpc raw`, built by hand so that a test
# can send what onebitctl never would: spec (1), files (7) of path (1), mode 0644 (2) and the
# data "print(1)\n" (3), one for each PATH.
submit_pb() {
  python3 - "$@" << 'PY'
import sys
def varint(n):
    out = b""
    while True:
        b = n & 0x7f
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out
def field(num, wire, payload):
    return varint(num << 3 | wire) + (varint(len(payload)) + payload if wire == 2 else payload)
msg = field(1, 2, sys.argv[1].encode())
for p in sys.argv[2:]:
    msg += field(7, 2, field(1, 2, p.encode()) + field(2, 0, varint(0o644)) + field(3, 2, b"print(1)\n"))
print(msg.hex())
PY
}
