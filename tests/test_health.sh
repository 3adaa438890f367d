#!/usr/bin/env bash
# Compression health of 1-bit Adam, black-box through the real onebit-worker: the ratios
# ||e_worker||/||m||, ||e_server||/||m|| and the zero-momentum fraction of every logged step are
# recomputed from the checkpoint of the same step (check_health.py, with h5py and numpy) and
# must agree; they are 0 before the freeze and plausible after it; computing them on every step
# or only at the end leaves training bit for bit the same; they are null for plain Adam.
# usage: test_health.sh WORKER CKPT_TOOL MPIEXEC
set -u
WORKER=$1
CKPT=$2
MPIEXEC=$3
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1: $2"; }

PY=
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import h5py, numpy' 2> /dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "[ FAILED ] no python3 with h5py and numpy (scripts/install-deps.sh installs them)"
  exit 1
fi

spec() { # FILE OPTIMIZER LOG_INTERVAL CKPT_INTERVAL
  printf '{"name": "job", "model": {"type": "mlp", "hidden": [40]},
  "data": {"type": "synthetic_classification", "n_train": 2048, "n_eval": 256, "input_dim": 20, "num_classes": 4},
  "optimizer": %s, "batch_size": 16, "steps": 80, "seed": 7, "log_interval": %s,
  "checkpoint": {"interval": %s, "keep": 100}}\n' "$2" "$3" "$4" > "$1"
}
run() { # NAME SPEC
  timeout 300 "$MPIEXEC" --oversubscribe -np 3 "$WORKER" --spec "$2" --checkpoint-dir "$TMP/$1" \
    > "$TMP/$1.jsonl" 2> "$TMP/$1.err"
}
OB='{"type": "onebit_adam", "beta2": 0.99, "freeze_step": 30, "block_size": 64}'

spec "$TMP/a.json" "$OB" 10 10
run a "$TMP/a.json"; rc=$?
if [ $rc -eq 0 ] && "$PY" "$HERE/check_health.py" "$TMP/a.jsonl" "$TMP/a/job" > "$TMP/c.out" 2>&1; then
  ok "every logged step agrees with its checkpoint: $(cat "$TMP/c.out")"
else bad "health against the checkpoints" "rc=$rc $(cat "$TMP/c.out" 2>/dev/null; tail -3 "$TMP/a.err")"; fi

# A byte-level transformer on a 16-letter alphabet with an untied output: the embedding rows of
# the other 240 bytes never get a gradient, their momentum stays exactly 0 and the fraction says
# so.
printf '{"name": "job", "model": {"type": "transformer", "layers": 1, "heads": 2, "d_model": 16, "context": 16, "tied_output": false},
  "data": {"type": "synthetic_text", "train_bytes": 8192, "eval_bytes": 1024, "alphabet": 16},
  "optimizer": {"type": "onebit_adam", "beta2": 0.99, "freeze_step": 20, "block_size": 64},
  "batch_size": 8, "steps": 50, "seed": 2, "log_interval": 10,
  "checkpoint": {"interval": 10, "keep": 100}}\n' > "$TMP/t.json"
run t "$TMP/t.json"; rc=$?
if [ $rc -eq 0 ] && "$PY" "$HERE/check_health.py" "$TMP/t.jsonl" "$TMP/t/job" --zeros > "$TMP/c.out" 2>&1; then
  ok "transformer: zero-momentum coordinates counted as the checkpoint has them: $(cat "$TMP/c.out")"
else bad "transformer health" "rc=$rc $(cat "$TMP/c.out" 2>/dev/null; tail -3 "$TMP/t.err")"; fi

# Computed on every step, or only at the last: the same training, bit for bit.
spec "$TMP/b.json" "$OB" 1 0
spec "$TMP/c.json" "$OB" 1000 0
run b "$TMP/b.json"; rc1=$?
run c "$TMP/c.json"; rc2=$?
nb=$(grep -c '"event":"step"' "$TMP/b.jsonl")
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$nb" = 80 ] &&
   "$CKPT" diff "$TMP/a/job/step-00000080" "$TMP/b/job/step-00000080" > "$TMP/d1" 2>&1 &&
   "$CKPT" diff "$TMP/b/job/step-00000080" "$TMP/c/job/step-00000080" > "$TMP/d2" 2>&1; then
  ok "health on every step (80 logs), every 10th, or only the last: identical final state"
else bad "bit-exact with and without" "rc=$rc1/$rc2 n=$nb $(cat "$TMP/d1" "$TMP/d2" 2>/dev/null)"; fi
# The last step's numbers do not depend on how often they were computed before.
last() { jq -c 'select(.event=="step") | [.worker_error_ratio, .server_error_ratio, .zero_momentum_fraction]' "$1" | tail -1; }
if [ -n "$(last "$TMP/b.jsonl")" ] && [ "$(last "$TMP/b.jsonl")" = "$(last "$TMP/c.jsonl")" ] &&
   [ "$(last "$TMP/a.jsonl")" = "$(last "$TMP/c.jsonl")" ]; then
  ok "the last step's health is the same however often it was computed: $(last "$TMP/c.jsonl")"
else bad "last step's health" "$(last "$TMP/a.jsonl") / $(last "$TMP/b.jsonl") / $(last "$TMP/c.jsonl")"; fi

# Plain Adam has no error feedback: the fields are null.
spec "$TMP/e.json" '{"type": "adam"}' 40 0
run e "$TMP/e.json"; rc=$?
if [ $rc -eq 0 ] && [ "$(jq -c 'select(.event=="step") | [.worker_error_ratio, .server_error_ratio, .zero_momentum_fraction]' "$TMP/e.jsonl" | sort -u)" = "[null,null,null]" ]; then
  ok "adam: no error feedback, the health fields are null"
else bad "adam health" "rc=$rc $(grep '"step"' "$TMP/e.jsonl" | head -2)"; fi

# Text output shows them in the compression phase.
timeout 300 "$MPIEXEC" --oversubscribe -np 2 "$WORKER" --spec "$TMP/c.json" --format text > "$TMP/t.txt" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -Eq "compression .*error/\|m\| worker [0-9.e+-]+ server [0-9.e+-]+, m=0 [0-9.]+%" "$TMP/t.txt"; then
  ok "text format: $(grep -o 'error/|m|.*' "$TMP/t.txt" | tail -1)"
else bad "text format" "rc=$rc $(tail -3 "$TMP/t.txt")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
