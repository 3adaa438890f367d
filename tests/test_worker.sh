#!/usr/bin/env bash
# Black-box tests of onebit-worker: the real binary under mpirun, asserting exit codes, the
# messages users see, and the JSON progress stream.
# usage: test_worker.sh WORKER MPIEXEC EXAMPLES_DIR
set -u
WORKER=$1
MPIEXEC=$2
EXAMPLES=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1: $2"; }
run() { "$MPIEXEC" --oversubscribe -np "$1" "$WORKER" "${@:2}"; }

# --- a misspelled field: exit 2, the path named, nothing started -----------------------------
sed 's/  beta2: 0.99/  betta2: 0.99/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/typo.yaml"
run 2 --spec "$TMP/typo.yaml" > "$TMP/out" 2> "$TMP/err"; rc=$?
if [ $rc -eq 2 ] && grep -q 'optimizer.betta2: unknown field' "$TMP/err" && [ ! -s "$TMP/out" ]; then
  ok "misspelled field rejected"
else bad "misspelled field rejected" "rc=$rc $(cat "$TMP/err")"; fi

# --- a job that ends before its variance may freeze says so first, and never shows compression --
sed -e 's/freeze_step: 50/freeze_step: 40/' -e 's/^steps: 200/steps: 40/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/f40.yaml"
run 2 --spec "$TMP/f40.yaml" > "$TMP/f40.jsonl" 2> "$TMP/err"; rc=$?
first=$(jq -r 'select(.event=="notice") | .message' "$TMP/f40.jsonl" | head -1)
ncomp=$(jq -r 'select(.event=="step" and .phase=="compression") | .step' "$TMP/f40.jsonl" | wc -l)
if [ $rc -eq 0 ] && echo "$first" | grep -q "freeze_step 40 is not before the job's last step (steps: 40): no step is compressed" &&
   [ "$ncomp" = 0 ] && [ "$(jq -r 'select(.event=="freeze") | .step' "$TMP/f40.jsonl")" = 40 ]; then
  ok "a freeze at the last step: said before the first step, no step shown as compression"
else bad "a freeze at the last step" "rc=$rc notice '$first', $ncomp compression steps $(cat "$TMP/err")"; fi
sed -e 's/freeze_step: 50/freeze_step: auto/' -e 's/^steps: 200/steps: 40/' -e 's/^  peak: 1e-3/  peak: 1e-3\n  warmup_steps: 20/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/fa.yaml"
run 2 --spec "$TMP/fa.yaml" --format text > "$TMP/fa.txt" 2> "$TMP/err"; rc=$?
if [ $rc -eq 0 ] && grep -q "note: the latest auto freeze is step 220 (optimizer.freeze_max_fraction 0.15 of 40 steps is step 6, but the freeze comes no earlier than the lr warmup's 20 steps + 2 x beta2 0.99's lag of 100 steps), not before the job's last step" "$TMP/fa.txt" &&
   grep -q "variance not frozen; bytes sent" "$TMP/fa.txt"; then
  ok "a latest auto freeze past the last step: the notice says where it is and why"
else bad "a latest auto freeze past the last step" "rc=$rc $(grep -e note -e freeze "$TMP/fa.txt") $(cat "$TMP/err")"; fi

# --- a missing spec file: exit 2 ----------------------------------------------------------------
run 1 --spec "$TMP/none.yaml" > /dev/null 2> "$TMP/err"; rc=$?
if [ $rc -eq 2 ] && grep -q 'none.yaml' "$TMP/err"; then ok "missing spec file"
else bad "missing spec file" "rc=$rc $(cat "$TMP/err")"; fi

# --- bad command line: exit 2 with usage -------------------------------------------------------
run 1 --frobnicate > /dev/null 2> "$TMP/err"; rc=$?
if [ $rc -eq 2 ] && grep -q 'usage:' "$TMP/err"; then ok "bad command line"
else bad "bad command line" "rc=$rc"; fi

# --- data that does not exist: every rank stops at setup, exit 1, the path named ---------------
printf 'model: {type: mlp}\ndata: {type: idx, path: %s/nodata}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: 5\n' "$TMP" > "$TMP/nodata.yaml"
timeout 60 "$MPIEXEC" --oversubscribe -np 2 "$WORKER" --spec "$TMP/nodata.yaml" > /dev/null 2> "$TMP/err"; rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "nodata" "$TMP/err"; then ok "missing data fails cleanly"
else bad "missing data fails cleanly" "rc=$rc $(cat "$TMP/err")"; fi

# --- --check prints the spec with defaults filled ------------------------------------------------
run 1 --spec "$EXAMPLES/synthetic-mlp-onebit.yaml" --check > "$TMP/check.json" 2> "$TMP/err"; rc=$?
if [ $rc -eq 0 ] && [ "$(jq -r '.optimizer.freeze_threshold' "$TMP/check.json")" = "0.96" ] &&
   [ "$(jq -r '.optimizer.block_size' "$TMP/check.json")" = "256" ]; then ok "--check"
else bad "--check" "rc=$rc $(cat "$TMP/check.json" "$TMP/err")"; fi

# --- a real 1-bit Adam job on 3 ranks: both phases, bytes, learning ------------------------------
run 3 --spec "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/a.jsonl" 2> "$TMP/err"; rc=$?
if [ $rc -ne 0 ]; then
  bad "1-bit Adam job runs" "rc=$rc $(cat "$TMP/err")"
else
  ok "1-bit Adam job runs"
  if jq -e . "$TMP/a.jsonl" > /dev/null 2>&1; then ok "every line is JSON"; else bad "every line is JSON" "$(head -3 "$TMP/a.jsonl")"; fi
  events=$(jq -r .event "$TMP/a.jsonl" | sort -u | tr '\n' ' ')
  if [ "$events" = "eval freeze start step summary " ]; then ok "event kinds"; else bad "event kinds" "$events"; fi
  fs=$(jq -r 'select(.event=="summary") | .freeze_step' "$TMP/a.jsonl")
  fe=$(jq -r 'select(.event=="freeze") | .step' "$TMP/a.jsonl")
  if [ "$fs" = 50 ] && [ "$fe" = 50 ]; then ok "freeze at the fixed step"; else bad "freeze at the fixed step" "$fs/$fe"; fi
  warm=$(jq -r 'select(.event=="step" and .phase=="warmup") | .bytes_step' "$TMP/a.jsonl" | head -1)
  comp=$(jq -r 'select(.event=="step" and .phase=="compression") | .bytes_step' "$TMP/a.jsonl" | tail -1)
  # the warmup's gradients cross in fp8 (the default), one byte an element: 1 bit is under a fifth
  if [ -n "$warm" ] && [ -n "$comp" ] && [ "$comp" -gt 0 ] && [ $((comp * 5)) -lt "$warm" ]; then
    ok "compression steps send far fewer bytes ($warm -> $comp)"
  else bad "compression steps send far fewer bytes" "$warm -> $comp"; fi
  first=$(jq -r 'select(.event=="step") | .loss' "$TMP/a.jsonl" | head -1)
  last_eval=$(jq -r 'select(.event=="summary") | .eval_loss' "$TMP/a.jsonl")
  acc=$(jq -r 'select(.event=="summary") | .eval_accuracy' "$TMP/a.jsonl")
  if awk -v a="$first" -v b="$last_eval" -v c="$acc" 'BEGIN { exit !(b < 0.5 * a && c > 0.8) }'; then
    ok "it learns (train loss $first -> eval loss $last_eval, accuracy $acc)"
  else bad "it learns" "train loss $first -> eval loss $last_eval, accuracy $acc"; fi

  # Same spec and world size: the same numbers, bit for bit.
  run 3 --spec "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/b.jsonl" 2>/dev/null
  strip() { jq -c 'del(.samples_per_s, .wall_seconds)' "$1"; }
  if [ "$(strip "$TMP/a.jsonl")" = "$(strip "$TMP/b.jsonl")" ]; then ok "deterministic"
  else bad "deterministic" "runs differ"; fi
fi

# --- the transformer on synthetic text, text progress format -------------------------------------
run 2 --spec "$EXAMPLES/synthetic-transformer-adam.json" --format text > "$TMP/t.txt" 2> "$TMP/err"; rc=$?
if [ $rc -eq 0 ] && grep -q 'bits/byte' "$TMP/t.txt" && grep -q '^done:' "$TMP/t.txt"; then
  ok "transformer job, text format"
else bad "transformer job, text format" "rc=$rc $(tail -3 "$TMP/err")"; fi

# --- device: cuda where it cannot run (no GPU here, or a build without CUDA): every rank stops
# at setup with the reason, exit 1, within the timeout (no rank left waiting in a collective).
# On a machine with a GPU the same job must train: scripts/gpu-check.sh runs it there.
sed -e 's/^name: .*/name: on-cuda/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/cuda.yaml"
echo "device: cuda" >> "$TMP/cuda.yaml"
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  echo "[ SKIPPED ] device: cuda without a GPU (this machine has one)"
else
  timeout 120 "$MPIEXEC" --oversubscribe -np 2 "$WORKER" --spec "$TMP/cuda.yaml" > "$TMP/out" 2> "$TMP/err"; rc=$?
  # No device on this node: worth a restart elsewhere (1); a build without CUDA: never (4).
  if { { [ $rc -eq 1 ] && grep -q 'no usable CUDA device' "$TMP/err"; } ||
       { [ $rc -eq 4 ] && grep -q 'needs a build with CUDA' "$TMP/err"; }; } &&
     grep -q 'setup failed' "$TMP/err" && ! grep -q '"event":"step"' "$TMP/out"; then
    ok "device: cuda without a GPU fails cleanly"
  else bad "device: cuda without a GPU fails cleanly" "rc=$rc $(cat "$TMP/err")"; fi
fi

# --- --profile: the step time split, parts adding up to the whole -----------------------------
run 2 --spec "$EXAMPLES/synthetic-mlp-onebit.yaml" --profile > "$TMP/p.jsonl" 2> "$TMP/err"; rc=$?
prof=$(grep '"event":"profile"' "$TMP/p.jsonl")
if [ $rc -eq 0 ] && [ -n "$prof" ] &&
   echo "$prof" | jq -e '.steps > 0 and .compute_ms > 0 and .allreduce_ms > 0 and .compress_ms > 0
       and .exchange_ms > 0 and .update_ms >= 0 and
       ((.data_ms + .compute_ms + .allreduce_ms + .compress_ms + .exchange_ms + .update_ms
         - .ms_per_step) | fabs) < 1e-6 * .ms_per_step + 1e-9' > /dev/null; then
  ok "--profile"
else bad "--profile" "rc=$rc $prof $(tail -3 "$TMP/err")"; fi
run 1 --spec "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/np.jsonl" 2> /dev/null
if ! grep -q '"event":"profile"' "$TMP/np.jsonl"; then ok "no profile without --profile"
else bad "no profile without --profile" "profile printed"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
