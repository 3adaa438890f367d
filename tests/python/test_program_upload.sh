#!/usr/bin/env bash
# Uploaded program jobs: onebitctl submit --program sends the script (or --program-dir's tree)
# with the job, and onebitd stores it with the job and runs it there, whatever its data roots.
#   - a program and a module of its own from a directory outside every root: SUCCEEDED, over
#     gRPC and over REST; stored under STATE/jobs/<id>/program (0700 / 0600), the spec without
#     a workdir;
#   - a rank SIGKILLed mid-run (a raw REST submit with files): restarted from the stored copy;
#   - refused at submit, by name, over both APIs: an upload over --max-upload-size, a ".." or an
#     absolute path, an entrypoint not among the files, more than 1000 files, a duplicate, files
#     with a workdir or with a built-in job; onebitctl refuses a symbolic link; nothing is left
#     staged;
#   - deleting the job removes its stored files;
#   - --no-upload: the path is the server's and keeps the data roots' check.
# usage: test_program_upload.sh ONEBITD OBRPC ONEBITCTL PYTHONPATH
set -u
ONEBITD=$1 OBRPC=$2 CTL=$3 PYPATH=$4
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../daemon_harness.sh
. "$HERE/../daemon_harness.sh"
export PATH=/usr/bin:$PATH PYTHONPATH=$PYPATH ONEBIT_PROGRESS=json OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader
mkdir -p "$TMP/roots"
start_daemon --data-root "$TMP/roots" --max-restarts 2 --max-upload-size 256K
ctl() { "$CTL" --server "$GRPC" "$@"; }
rctl() { "$CTL" --rest "$REST" "$@"; }

# The program: run.py imports a module of its own, then runs train_small.py beside it.
P=$TMP/proj
mkdir -p "$P/lib" "$P/.git" "$P/__pycache__"
cp "$HERE/train_small.py" "$P/"
echo 'VALUE = 42' > "$P/lib/marker.py"
: > "$P/lib/__init__.py"
echo 'junk' > "$P/.git/config"
echo 'junk' > "$P/__pycache__/x.pyc"
cat > "$P/run.py" <<'EOF'
import os
import runpy
import sys

from lib import marker

assert marker.VALUE == 42, marker.VALUE
assert os.path.basename(os.getcwd()) == "program", os.getcwd()
here = os.path.dirname(os.path.abspath(__file__))
sys.argv[0] = os.path.join(here, "train_small.py")
runpy.run_path(sys.argv[0], run_name="__main__")
EOF
chmod 755 "$P/run.py"

# --- uploaded from outside the roots, over gRPC: SUCCEEDED --------------------------------------
id=$(ctl submit --program "$P/run.py" --program-dir "$P" --np 2 --steps 40 -- --steps 40 --out "$TMP/a.f32" 2>"$TMP/err")
check "submit --program --program-dir (gRPC): a job id" '[[ "$id" == job-* ]]' "$id $(cat "$TMP/err")"
S=$TMP/var/jobs/$id/program
check "the files are stored with the job, .git and __pycache__ left out" '[ -f "$S/run.py" ] && [ -f "$S/lib/marker.py" ] && [ -f "$S/train_small.py" ] && [ ! -e "$S/.git" ] && [ ! -e "$S/__pycache__" ]' "$(find "$S" 2>&1)"
check "stored 0700 (directories, executables) and 0600 (other files)" '[ "$(stat -c %a "$S")" = 700 ] && [ "$(stat -c %a "$S/lib")" = 700 ] && [ "$(stat -c %a "$S/run.py")" = 700 ] && [ "$(stat -c %a "$S/lib/marker.py")" = 600 ]' "$(stat -c '%a %n' "$S" "$S/lib" "$S/run.py" "$S/lib/marker.py" 2>&1)"
spec=$(curl -s "http://$REST/v1/jobs/$id" | jq -r .specJson)
check "the job's spec: the entrypoint among the files, no workdir" '[ "$(echo "$spec" | jq -r .program.entrypoint)" = run.py ] && [ "$(echo "$spec" | jq -r .program.workdir)" = null ]' "$spec"
wait_state "$id" SUCCEEDED 120
j=$(get "$id")
check "the uploaded program SUCCEEDED (outside the data roots)" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ -s "$TMP/a.f32" ]' "$j $(tail -5 "$TMP/var/jobs/$id/worker.log")"
check "its workers ran the stored copy" 'grep -qF "\"workdir\":\"$S\"" "$TMP/var/jobs/$id/spec.json"' "$(cat "$TMP/var/jobs/$id/spec.json")"

# --- the script alone, over REST ------------------------------------------------------------------
cp "$HERE/train_small.py" "$TMP/alone.py"
id2=$(rctl submit --program "$TMP/alone.py" --np 1 --steps 10 -- --steps 10 2>"$TMP/err")
check "submit --program (REST): a job id" '[[ "$id2" == job-* ]]' "$id2 $(cat "$TMP/err")"
wait_state "$id2" SUCCEEDED 120
check "the script alone SUCCEEDED, stored as its own name" '[ "$(get "$id2" | jq -r .state)" = SUCCEEDED ] && [ -f "$TMP/var/jobs/$id2/program/alone.py" ]' "$(get "$id2") $(tail -5 "$TMP/var/jobs/$id2/worker.log")"

# --- a killed rank: restarted from the stored copy (a raw REST submit with files) ------------------
b64() { base64 -w0 < "$1"; }
jq -n --arg run "$(b64 "$P/run.py")" --arg ts "$(b64 "$P/train_small.py")" \
  --arg m "$(b64 "$P/lib/marker.py")" --arg out "$TMP/b.f32" \
  '{spec: {name: "killed", steps: 40, program: {entrypoint: "run.py", args: ["--steps", "40", "--interval", "10", "--out", $out], env: {TRAIN_SMALL_KILL: "25 1"}}},
    worldSize: 2,
    files: [{path: "run.py", mode: 493, data: $run}, {path: "train_small.py", mode: 420, data: $ts},
            {path: "lib/__init__.py", data: ""}, {path: "lib/marker.py", mode: 420, data: $m}]}' > "$TMP/killed.json"
post() { curl -s -o "$TMP/resp" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "@$1" "http://$REST/v1/jobs"; }
code=$(post "$TMP/killed.json")
id3=$(jq -r .id "$TMP/resp")
check "POST /v1/jobs with files: 200" '[ "$code" = 200 ] && [[ "$id3" == job-* ]]' "$code $(cat "$TMP/resp")"
wait_state "$id3" SUCCEEDED 180
j=$(get "$id3")
check "killed rank: SUCCEEDED after a restart that ran the stored copy" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .restarts)" = 1 ] && [ -s "$TMP/b.f32" ]' "$j $(tail -5 "$TMP/var/jobs/$id3/worker.log")"

# --- refused at submit ------------------------------------------------------------------------------
head -c 300000 /dev/urandom > "$P/big.bin"
out=$(ctl submit --program "$P/run.py" --program-dir "$P" --np 1 2>&1); rc=$?
check "an upload over --max-upload-size (gRPC): refused, the limit named" '[ $rc -ne 0 ] && echo "$out" | grep -q "more than the limit of 262144 bytes" && echo "$out" | grep -q -- "--max-upload-size"' "rc=$rc $out"
out=$(rctl submit --program "$P/run.py" --program-dir "$P" --np 1 2>&1); rc=$?
check "an upload over --max-upload-size (REST): refused, the limit named" '[ $rc -ne 0 ] && echo "$out" | grep -q "more than the limit of 262144 bytes"' "rc=$rc $out"
rm "$P/big.bin"

# Raw REST submits: one file list each, answered 400 with the reason.
refuse_rest() { # NAME FILES_JSON PATTERN [SPEC_JSON]
  local spec=${4:-'{"program":{"entrypoint":"run.py"}}'} pattern=$3
  printf '{"spec":%s,"files":%s}' "$spec" "$2" > "$TMP/req.json"
  local code
  code=$(post "$TMP/req.json")
  check "$1 (REST): 400" '[ "$code" = 400 ] && grep -q -- "$pattern" "$TMP/resp"' "$code $(head -c 400 "$TMP/resp")"
}
refuse_rest "a '..' path" '[{"path":"run.py","data":""},{"path":"../x.py","data":""}]' "files\[1\].path '../x.py': a part that is '..'"
refuse_rest "a '..' inside a path" '[{"path":"run.py","data":""},{"path":"lib/../../x.py","data":""}]' "a part that is '..'"
refuse_rest "an absolute path" '[{"path":"run.py","data":""},{"path":"/tmp/x.py","data":""}]' "files\[1\].path '/tmp/x.py': an absolute path"
refuse_rest "an empty part" '[{"path":"lib//x.py","data":""}]' "a part that is empty"
refuse_rest "an entrypoint not among the files" '[{"path":"other.py","data":""}]' "program.entrypoint 'run.py' is not one of the uploaded files"
refuse_rest "an entrypoint that is a directory of the upload" '[{"path":"run.py/x","data":""}]' "not one of the uploaded files"
refuse_rest "a path named twice" '[{"path":"run.py","data":""},{"path":"run.py","data":""}]' "named twice"
refuse_rest "a file where a directory is" '[{"path":"run.py","data":""},{"path":"run.py/x","data":""}]' "is a file of the upload, not a directory"
refuse_rest "a mode beyond 0777" '[{"path":"run.py","mode":2541,"data":""}]' "files\[0\].mode"
refuse_rest "a negative mode" '[{"path":"run.py","mode":-1,"data":""}]' "files\[0\].mode: -1"
refuse_rest "data that is not base64" '[{"path":"run.py","data":"***"}]' "files\[0\].data"
refuse_rest "an unknown field of a file" '[{"path":"run.py","data":"","owner":"root"}]' "files\[0\].owner: unknown field"
refuse_rest "files with a program.workdir" '[{"path":"run.py","data":""}]' "program.workdir: not with uploaded files" "{\"program\":{\"entrypoint\":\"run.py\",\"workdir\":\"$TMP/roots\"}}"
refuse_rest "files with a built-in job" '[{"path":"run.py","data":""}]' "only a program job" '{"model":{"type":"softmax"},"data":{"type":"synthetic_classification"},"optimizer":{"type":"adam"},"steps":1,"batch_size":4}'
many=$(python3 -c 'import json; print(json.dumps([{"path": "f%d" % i, "data": ""} for i in range(1001)]))')
refuse_rest "1001 files" "$many" "1001 files, more than the limit of 1000"
big=$(python3 -c 'import base64, json; print(json.dumps([{"path": "run.py", "data": base64.b64encode(bytes(300000)).decode()}]))')
refuse_rest "300,000 bytes over a limit of 256 KiB" "$big" "more than the limit of 262144 bytes"

# The same over gRPC, the request built by hand (submit_pb, tests/daemon_harness.sh).
refuse_grpc() { # NAME PATTERN SPEC PATH...
  local name=$1 pattern=$2
  shift 2
  rpc raw /onebit.v1.JobService/SubmitJob "$(submit_pb "$@")" > /dev/null 2> "$TMP/err"
  local rc=$?
  check "$name (gRPC): INVALID_ARGUMENT" '[ $rc -eq 3 ] && grep -q -- "$pattern" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
}
PSPEC='{"program":{"entrypoint":"run.py"}}'
refuse_grpc "a '..' path" "files\[1\].path '../x.py': a part that is '..'" "$PSPEC" run.py ../x.py
refuse_grpc "an absolute path" "files\[1\].path '/etc/x': an absolute path" "$PSPEC" run.py /etc/x
refuse_grpc "an entrypoint not among the files" "program.entrypoint 'run.py' is not one of the uploaded files" "$PSPEC" other.py
mapfile -t names < <(seq -f 'f%g' 1001)
refuse_grpc "1001 files" "1001 files, more than the limit of 1000" "$PSPEC" "${names[@]}"
rpc raw /onebit.v1.JobService/SubmitJob "$(submit_pb "$PSPEC" run.py lib/x.py)" > "$TMP/ok.json" 2> "$TMP/err"; rc=$?
id4=$(curl -s "http://$REST/v1/jobs" | jq -r '.jobs[-1].id')
check "a good upload by hand (gRPC): accepted, stored" '[ $rc -eq 0 ] && [ -f "$TMP/var/jobs/$id4/program/lib/x.py" ]' "rc=$rc $(cat "$TMP/err")"

# onebitctl's own checks, before anything is sent.
ln -s /etc/passwd "$P/link"
out=$(ctl submit --program "$P/run.py" --program-dir "$P" --np 1 2>&1); rc=$?
check "a symbolic link in --program-dir: refused by onebitctl" '[ $rc -eq 2 ] && echo "$out" | grep -q "link is a symbolic link; an upload holds regular files only"' "rc=$rc $out"
rm "$P/link"
out=$(ctl submit --program "$TMP/alone.py" --program-dir "$P" --np 1 2>&1); rc=$?
check "a --program outside --program-dir: refused" '[ $rc -eq 2 ] && echo "$out" | grep -q "not inside --program-dir"' "rc=$rc $out"
out=$(ctl submit --program "$P/no-such.py" --np 1 2>&1); rc=$?
check "a missing script: refused" '[ $rc -ne 0 ] && echo "$out" | grep -q "no-such.py"' "rc=$rc $out"
mkdir -p "$TMP/many"
for i in $(seq 1001); do : > "$TMP/many/f$i"; done
cp "$P/run.py" "$TMP/many/"
out=$(ctl submit --program "$TMP/many/run.py" --program-dir "$TMP/many" --np 1 2>&1); rc=$?
check "more than 1000 files in --program-dir: refused by onebitctl" '[ $rc -eq 2 ] && echo "$out" | grep -q "more than 1000 files"' "rc=$rc $out"
check "nothing is left staged after the refusals" '[ -z "$(ls -A "$TMP/var/uploads" 2>/dev/null)" ]' "$(ls -A "$TMP/var/uploads")"

# --- a repeated request id: the first job, the second upload dropped ----------------------------
r1=$(ctl submit --program "$TMP/alone.py" --request-id up-1 --np 1 -- --steps 1 2>&1)
r2=$(rctl submit --program "$TMP/alone.py" --request-id up-1 --np 1 -- --steps 1 2>&1)
check "a repeated request id with an upload: the same job, nothing left staged" '[[ "$r1" == job-* ]] && [ "$r1" = "$r2" ] && [ -f "$TMP/var/jobs/$r1/program/alone.py" ] && [ -z "$(ls -A "$TMP/var/uploads")" ]' "$r1 / $r2"

# --- --no-upload: the server's path, under the roots --------------------------------------------
out=$(ctl submit --program "$P/run.py" --no-upload --np 1 2>&1); rc=$?
check "--no-upload outside the data roots: refused" '[ $rc -ne 0 ] && echo "$out" | grep -q "program.entrypoint.*outside the roots"' "rc=$rc $out"

# --- deleting the job removes its files --------------------------------------------------------------
out=$(ctl delete "$id" 2>&1); rc=$?
check "delete: the stored program goes with the job" '[ $rc -eq 0 ] && [ ! -e "$TMP/var/jobs/$id" ]' "rc=$rc $out $(ls "$TMP/var/jobs/$id" 2>&1)"

kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""
[ "$failed" -eq 0 ] || tail -40 "$TMP/onebitd.log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
