#!/usr/bin/env bash
# The frozen-variance step on a model where the paper's exact form diverges: a Fashion-MNIST
# MLP 784-1024-512-10 with ReLU, 4 ranks x batch 32, beta2 0.99, auto freeze, LR warmup 100
# steps, seed 3 (shortened to 200 steps). ReLU units that rarely fired by the freeze have a
# tiny v_Tw; once they wake up, lr m / (sqrt(v_Tw) + eps) throws them far away and the loss is
# NaN 10 steps after the freeze. The default stabiliser (adam_bound) trains through it; the
# paper's form stays selectable as stabilizer: none, and still diverges, unless the divergence
# guard can roll it back to a checkpoint.
# usage: test_stability.sh WORKER MPIEXEC
set -u
WORKER=$1
MPIEXEC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1: $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi; }

if [ ! -s /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] &&
   [ ! -s /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte ]; then
  echo "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist): skipped"
  exit 77
fi

# Under a sanitizer (ONEBIT_TEST_SANITIZED, scripts/test.sh), where each of these runs takes
# minutes, only the runs that take paths of their own: the divergence, the rollback, and the
# rollback beside the overlap's thread. The uninstrumented runs check everything.
FULL=1
case "${ONEBIT_TEST_SANITIZED:-0}" in "" | 0) ;; *) FULL=0 ;; esac

# The reproducer with its warmup in fp32 and the auto freeze, the defaults when it was found
# (now fp8, and a tracked variance frozen at the LR warmup's end).
spec() { # spec FILE [extra optimizer fields]
  cat > "$1" <<YAML
name: relu-wakeup
model: {type: mlp, hidden: [1024, 512], activation: relu}
data: {type: fashion_mnist, normalize: standardize}
optimizer: {type: onebit_adam, gradient_exchange: fp32, beta2: 0.99, freeze_step: auto, track_variance: 0, bias_correction: false$2}
batch_size: 32
steps: 200
lr: {schedule: warmup_step_decay, peak: 1e-3, warmup_steps: 100}
seed: 3
log_interval: 10
eval: {interval: 0, max_examples: 1000}
YAML
}
spec "$TMP/default.yaml" ""
spec "$TMP/none.yaml" ", stabilizer: none"

"$MPIEXEC" --oversubscribe -np 4 "$WORKER" --spec "$TMP/none.yaml" > "$TMP/none.out" 2> "$TMP/none.err"
rc=$?
freeze=$(jq -r 'select(.event == "freeze") | .step' "$TMP/none.out" 2>/dev/null)
check "stabilizer none (the paper's form): NaN a few steps after the freeze, exit 3 (diverged)" \
  '[ $rc -eq 3 ] && [ -n "$freeze" ] && grep -q "training failed: step 1[5-9][0-9]: the loss is not finite" "$TMP/none.err"' \
  "rc=$rc freeze=$freeze $(grep -m1 "training failed" "$TMP/none.err")"

if [ "$FULL" = 1 ]; then
"$MPIEXEC" --oversubscribe -np 4 "$WORKER" --spec "$TMP/default.yaml" > "$TMP/default.out" 2> "$TMP/default.err"
rc=$?
summary=$(jq -c 'select(.event == "summary")' "$TMP/default.out" 2>/dev/null)
check "the default (adam_bound) trains through the same freeze" \
  '[ $rc -eq 0 ] && [ "$(echo "$summary" | jq .steps)" = 200 ] && [ "$(echo "$summary" | jq .freeze_step)" = "$freeze" ] && echo "$summary" | jq -e ".eval_loss < 0.6 and .final_train_loss < 0.6" > /dev/null' \
  "rc=$rc $summary $(tail -2 "$TMP/default.err")"
check "the canonical spec names the stabiliser" \
  'jq -s -e "map(select(.event == \"start\"))[0].spec.optimizer.stabilizer == \"adam_bound\"" "$TMP/default.out" > /dev/null' \
  "$(head -1 "$TMP/default.out" | cut -c1-300)"
# Compression bytes are the paper's: nothing more crosses the network.
check "the same bytes per compression step as the paper's form" \
  '[ "$(jq -r "select(.event == \"step\" and .phase == \"compression\") | .bytes_step" "$TMP/default.out" | sort -u)" = "$(jq -r "select(.event == \"step\" and .phase == \"compression\") | .bytes_step" "$TMP/none.out" | sort -u)" ]'
fi

# The divergence guard: with checkpoints, the paper's form rolls back to the newest checkpoint
# (step 150), re-estimates v by Adam over Delta / 2 = 50 steps and carries on; with
# checkpoint.rollbacks 0 it exits 3 as before. By default (checkpoint.loss_rise 2) the rise of
# the loss after the freeze is caught a few steps before the loss stops being finite; with
# loss_rise 0 only the non-finite loss is.
nan_step=$(grep -m1 -o "step 1[5-9][0-9]: the loss is not finite" "$TMP/none.err" | grep -o "1[5-9][0-9]")
spec "$TMP/guard.yaml" ", stabilizer: none"
echo "checkpoint: {interval: 50, keep: 2}" >> "$TMP/guard.yaml"
"$MPIEXEC" --oversubscribe -np 4 "$WORKER" --spec "$TMP/guard.yaml" --checkpoint-dir "$TMP/ck" > "$TMP/guard.out" 2> "$TMP/guard.err"
rc=$?
notes=$(jq -r 'select(.event == "rewarm" and .to_step == 150) | .message' "$TMP/guard.out" 2>/dev/null)
rise_step=$(jq -r 'select(.event == "rewarm") | .step' "$TMP/guard.out" 2>/dev/null | head -1)
freezes=$(jq -r 'select(.event == "freeze") | .step' "$TMP/guard.out" 2>/dev/null | tr '\n' ' ')
summary=$(jq -c 'select(.event == "summary")' "$TMP/guard.out" 2>/dev/null)
check "divergence guard: the loss's rise caught before it is not finite, rolled back to step 150, v re-estimated until step 200, the run completes" \
  '[ $rc -eq 0 ] && echo "$notes" | grep -Eq "^the training loss rose to [0-9.e+]+, [0-9.]+x its lowest since the freeze \([0-9.e+-]+\) at step 1[5-9][0-9]: rolled back to .*/step-00000150 \(rollback 1 of at most 2\); v is re-estimated by Adam until step 200, then frozen again$" && [ -n "$nan_step" ] && [ "$rise_step" -lt "$nan_step" ] && [ "$freezes" = "$freeze 200 " ] && echo "$summary" | jq -e ".steps == 200 and .eval_loss < 1.0" > /dev/null' \
  "rc=$rc nan=$nan_step rise=$rise_step freezes=$freezes $notes $summary $(tail -3 "$TMP/guard.err")"
check "the canonical spec names loss_rise 2" \
  'jq -s -e "map(select(.event == \"start\"))[0].spec.checkpoint.loss_rise == 2" "$TMP/guard.out" > /dev/null'

sed -i 's/^checkpoint: {interval: 50, keep: 2}$/checkpoint: {interval: 50, keep: 2, loss_rise: 0}/' "$TMP/guard.yaml"
if [ "$FULL" = 1 ]; then
"$MPIEXEC" --oversubscribe -np 4 "$WORKER" --spec "$TMP/guard.yaml" --checkpoint-dir "$TMP/ckn" > "$TMP/gn.out" 2> "$TMP/gn.err"
rc=$?
notes=$(jq -r 'select(.event == "rewarm" and .to_step == 150) | .message' "$TMP/gn.out" 2>/dev/null)
freezes=$(jq -r 'select(.event == "freeze") | .step' "$TMP/gn.out" 2>/dev/null | tr '\n' ' ')
check "loss_rise 0: only the non-finite loss rolls back, at the step the paper's form fails" \
  '[ $rc -eq 0 ] && echo "$notes" | grep -Eq "^the loss is not finite on [1-4] ranks? at step $nan_step: rolled back to .*/step-00000150 \(rollback 1 of at most 2\); v is re-estimated by Adam until step 200, then frozen again$" && [ "$freezes" = "$freeze 200 " ]' \
  "rc=$rc nan=$nan_step freezes=$freezes $notes $(tail -3 "$TMP/gn.err")"

# A checkpoint older than the freeze (every 100 steps: the rise at step 152 goes back to step
# 100, before the freeze at step 147): the same path would freeze at 147 and diverge again, so
# the freeze moves to the bad step + 50.
sed -e 's/^checkpoint: {interval: 50, keep: 2, loss_rise: 0}$/checkpoint: {interval: 100, keep: 2}/' \
  -e 's/^steps: 200$/steps: 205/' "$TMP/guard.yaml" > "$TMP/delay.yaml"
"$MPIEXEC" --oversubscribe -np 4 "$WORKER" --spec "$TMP/delay.yaml" --checkpoint-dir "$TMP/ckd" > "$TMP/gd.out" 2> "$TMP/gd.err"
rc=$?
notes=$(jq -r 'select(.event == "rewarm") | .message' "$TMP/gd.out" 2>/dev/null)
freezes=$(jq -r 'select(.event == "freeze") | .step' "$TMP/gd.out" 2>/dev/null | tr '\n' ' ')
check "a rollback to before the freeze: the freeze moves to the bad step + Delta / 2" \
  '[ $rc -eq 0 ] && echo "$notes" | grep -Eq "^the training loss rose to .* at step $rise_step: rolled back to .*/step-00000100 \(rollback 1 of at most 2\), still in the warmup; v is frozen again at step $((rise_step + 50))$" && [ "$freezes" = "$freeze $((rise_step + 50)) " ]' \
  "rc=$rc freezes=$freezes $notes $(tail -3 "$TMP/gd.err")"
fi

# The same non-finite loss with optimizer.overlap, in 1 MiB buckets (two segments in the
# compression phase, where the loss stops being finite): the communication thread is exchanging
# the bad step's momentum while the rank learns its loss is not finite; the rollback discards
# that step, and overlap on and off (same buckets) take the same path to the same end.
ovl=true
[ "$FULL" = 1 ] && ovl="false true"
for o in $ovl; do
  sed "s/^optimizer: {type: onebit_adam, /optimizer: {type: onebit_adam, bucket_mb: 1, overlap: $o, /" \
    "$TMP/guard.yaml" > "$TMP/ovl-$o.yaml"
  "$MPIEXEC" --oversubscribe -np 4 "$WORKER" --spec "$TMP/ovl-$o.yaml" --checkpoint-dir "$TMP/cko-$o" \
    > "$TMP/ovl-$o.out" 2> "$TMP/ovl-$o.err"
  echo $? > "$TMP/ovl-$o.rc"
done
notest=$(jq -r 'select(.event == "rewarm") | .message' "$TMP/ovl-true.out" 2>/dev/null)
sumt=$(jq -c 'select(.event == "summary") | [.steps, .eval_loss, .final_train_loss, .bytes_sent]' "$TMP/ovl-true.out" 2>/dev/null)
if [ "$FULL" = 1 ]; then
  sumf=$(jq -c 'select(.event == "summary") | [.steps, .eval_loss, .final_train_loss, .bytes_sent]' "$TMP/ovl-false.out" 2>/dev/null)
  check "overlap, non-finite loss in the compression phase: rolled back, and the same end as without the overlap" \
    '[ "$(cat "$TMP/ovl-false.rc")$(cat "$TMP/ovl-true.rc")" = 00 ] && echo "$notest" | grep -Eq "^the loss is not finite on [1-4] ranks? at step 1[5-9][0-9]: rolled back to .*/step-00000150" && [ "$notest" = "$(jq -r "select(.event == \"rewarm\") | .message" "$TMP/ovl-false.out" | sed "s|/cko-false/|/cko-true/|")" ] && [ -n "$sumt" ] && [ "$sumt" = "$sumf" ]' \
    "rc=$(cat "$TMP/ovl-false.rc")/$(cat "$TMP/ovl-true.rc") $notest | $sumt | $sumf $(tail -3 "$TMP/ovl-true.err")"
else
  check "overlap, non-finite loss in the compression phase: rolled back, the run completes" \
    '[ "$(cat "$TMP/ovl-true.rc")" = 0 ] && echo "$notest" | grep -Eq "^the loss is not finite on [1-4] ranks? at step 1[5-9][0-9]: rolled back to .*/step-00000150" && echo "$sumt" | grep -q "^\[200,"' \
    "rc=$(cat "$TMP/ovl-true.rc") $notest | $sumt $(tail -3 "$TMP/ovl-true.err")"
fi

if [ "$FULL" = 1 ]; then
sed -i 's/^checkpoint: {interval: 50, keep: 2, loss_rise: 0}$/checkpoint: {interval: 50, keep: 2, rollbacks: 0}/' "$TMP/guard.yaml"
"$MPIEXEC" --oversubscribe -np 4 "$WORKER" --spec "$TMP/guard.yaml" --checkpoint-dir "$TMP/ck0" > "$TMP/g0.out" 2> "$TMP/g0.err"
rc=$?
warn=$(jq -r 'select(.event == "notice") | .message' "$TMP/g0.out" 2>/dev/null | grep "loss rose")
check "checkpoint.rollbacks 0: the rise is a warning, the divergence ends the run, exit 3" \
  '[ $rc -eq 3 ] && grep -q "the loss is not finite" "$TMP/g0.err" && echo "$warn" | grep -Eq "^warning: the training loss rose to .* at step 1[5-9][0-9]; no rollback: none left \(checkpoint.rollbacks\)$"' \
  "rc=$rc warn=$warn $(grep -m1 failed "$TMP/g0.err")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
