#!/usr/bin/env bash
# Warm start on a job the borrowed variance does not fit (shortened from the robustness suite,
# docs/robustness/README.md): the source trains a Fashion-MNIST MLP 784-256-128-10 (GELU) with
# batch 512 per rank and peak learning rate 1e-3 and freezes at step 150; the new job has other
# initial parameters (params: false, seed 22), batch 16 per rank, whose gradients are noisier
# than v_Tw says, and a 3x higher peak learning rate. Taken as is with the paper's frozen step
# (refit_steps: 0, stabilizer: none) its steps are far too long and the run diverges (exit 3)
# or ends at chance (eval loss ln 10 = 2.30); the default re-estimation by Adam (for 75 steps
# here: the source ran a larger global batch) trains it, with either stabiliser (eval loss
# 0.41-0.55), and says what it did.
# The failure is the design's, not one CPU's. Each matrix kernel rounds differently (ours on
# AVX-512; OpenBLAS's elsewhere or with ONEBIT_GEMM=blas, picked per CPU), the runs part ways,
# and the test must hold on every kernel. Over seeds 22-33 on five (ours; OpenBLAS's Cooperlake,
# Haswell (what AMD Zen 1-3 runs), SkylakeX and Sandybridge kernels): taken as is, 56 of 60 runs
# diverged (at steps 69-369) and 4 ended at eval loss 2.30 or above; re-estimated, 120 of 120
# ended at 0.41-0.55. At the source's learning rate the run taken as is ended anywhere from
# 0.46 (as good as re-estimated) to divergence with the seed and the kernel (seed 22: 0.70 on
# OpenBLAS's Haswell kernels, 1.81 on ours), which no threshold survives.
# usage: test_warm_start.sh WORKER MPIEXEC
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

# Source and targets warm up in fp32 (the default is fp8), so that the refit's own exchange
# (refit_exchange, fp8) shows in the bytes against the job's.
cat > "$TMP/source.yaml" <<YAML
name: source
model: {type: mlp, hidden: [256, 128], activation: gelu}
data: {type: fashion_mnist, normalize: standardize}
optimizer: {type: onebit_adam, gradient_exchange: fp32, beta2: 0.99, freeze_step: 150}
batch_size: 512
steps: 160
lr: {schedule: warmup_step_decay, peak: 1e-3, warmup_steps: 100}
seed: 21
log_interval: 20
checkpoint: {dir: $TMP/ck, interval: 0, keep: 1}
YAML
target() { # target FILE OPTIMIZER_EXTRA WARM_EXTRA
  cat > "$1" <<YAML
name: target
model: {type: mlp, hidden: [256, 128], activation: gelu}
data: {type: fashion_mnist, normalize: standardize}
optimizer: {type: onebit_adam, gradient_exchange: fp32, beta2: 0.99, freeze_step: auto$2}
batch_size: 16
steps: 400
lr: {schedule: warmup_step_decay, peak: 3e-3, warmup_steps: 100, decay_rate: 0.99, decay_every: 50}
seed: 22
log_interval: 20
eval: {interval: 0, max_examples: 2000}
warm_start: {from: $TMP/ck/source, params: false$3}
YAML
}
target "$TMP/asis.yaml" ", stabilizer: none" ", refit_steps: 0"
target "$TMP/refit-none.yaml" ", stabilizer: none" ""
target "$TMP/default.yaml" "" ""

run() { "$MPIEXEC" --oversubscribe -np 4 "$WORKER" --spec "$1" > "$2" 2> "$2.err"; }
summary() { jq -c 'select(.event == "summary")' "$1" 2>/dev/null; }

run "$TMP/source.yaml" "$TMP/source.out"
rc=$?
check "the source job freezes and checkpoints" '[ $rc -eq 0 ] && [ -d "$TMP/ck/source/step-00000160" ]' \
  "rc=$rc $(tail -3 "$TMP/source.out.err")"

run "$TMP/asis.yaml" "$TMP/asis.out"
rc=$?
s=$(summary "$TMP/asis.out")
# Diverging (exit 3, the loss not finite) is as much a failure as ending near chance.
check "taken as is with the paper's step: the run is ruined" \
  '{ [ $rc -eq 3 ] && grep -q "training failed: step [0-9]*: the loss is not finite" "$TMP/asis.out.err"; } || { [ $rc -eq 0 ] && echo "$s" | jq -e ".eval_loss > 1.5 and .freeze_step == 0" > /dev/null; }' \
  "rc=$rc $s $(grep -m1 "training failed" "$TMP/asis.out.err")"

run "$TMP/refit-none.yaml" "$TMP/refit-none.out"
rc=$?
s=$(summary "$TMP/refit-none.out")
check "re-estimated (default refit), the paper's step: trains" \
  '[ $rc -eq 0 ] && echo "$s" | jq -e ".eval_loss < 0.6 and .freeze_step == 75" > /dev/null' "rc=$rc $s $(tail -2 "$TMP/refit-none.out.err")"

run "$TMP/default.yaml" "$TMP/default.out"
rc=$?
s=$(summary "$TMP/default.out")
check "the defaults (refit and stabiliser): trains" \
  '[ $rc -eq 0 ] && echo "$s" | jq -e ".eval_loss < 0.6 and .freeze_step == 75" > /dev/null' "rc=$rc $s"
msgs=$(jq -r 'select(.event == "notice" or .event == "warm_start") | .message' "$TMP/default.out")
outcome=$(jq -r 'select(.event == "warm_start") | .outcome' "$TMP/default.out")
check "the events say what warm start did" \
  'echo "$msgs" | grep -Eq "v_Tw taken; it is checked against the first gradients and re-estimated by Adam until step 75 \(the source.s global batch is larger than this job.s\), then frozen unscaled \(its borrowed part already errs towards longer steps\);" && echo "$msgs" | grep -Eq "^warm start check passed: [0-9.]+% of the coordinates have gradients above 10 sqrt\(v_Tw\)" && echo "$outcome" | grep -Eq "^re-estimated until step 75 \([0-9.]+% of coordinates off\)$"' \
  "$msgs / $outcome"
# 75 steps (ceil(3 Delta / 4): the source ran a larger global batch): the first, whose gradient
# the check reads, in fp32 as the source's warmup, 74 in fp8 (refit_exchange); then compressed.
w=$(echo "$s" | jq .bytes_warmup)
one=$(jq -r 'select(.event == "step" and .step == 20) | .bytes_step' "$TMP/default.out")
fp32=$(jq -r 'select(.event == "step" and .step == 20) | .bytes_step' "$TMP/source.out")
check "the refit costs one fp32 step and 74 fp8 steps (about a quarter of the bytes)" \
  '[ -n "$one" ] && [ -n "$fp32" ] && [ "$w" = $((fp32 + 74 * one)) ] && [ $((one * 10)) -lt $((fp32 * 3)) ]' \
  "warmup=$w step20=$one fp32=$fp32"

# refit_steps auto against the source's setting: the source's batch and learning rate, 20 steps
# (ceil(Delta / 5)); its batch with a 3x higher peak learning rate, 50 (ceil(Delta / 2)).
for lr in 1e-3 3e-3; do
  sed -e 's/^batch_size: 16$/batch_size: 512/' -e "s/peak: 3e-3/peak: $lr/" -e 's/^steps: 400$/steps: 55/' \
    "$TMP/default.yaml" > "$TMP/same-batch-$lr.yaml"
  run "$TMP/same-batch-$lr.yaml" "$TMP/same-batch-$lr.out"
done
# The text progress of a refit's freeze: no ratio decided it, so none is printed (it said
# "v-ratio nan").
sed -e 's/^steps: 55$/steps: 21/' "$TMP/same-batch-1e-3.yaml" > "$TMP/same-batch-text.yaml"
"$MPIEXEC" --oversubscribe -np 4 "$WORKER" --spec "$TMP/same-batch-text.yaml" --format text \
  > "$TMP/same-batch.txt" 2>&1
check "text progress: the refit's freeze line has no ratio" \
  'grep -qx "freeze @ 20: variance frozen, compression phase begins" "$TMP/same-batch.txt" && ! grep -qi nan "$TMP/same-batch.txt"' \
  "$(grep -i "freeze\|nan" "$TMP/same-batch.txt")"
s1=$(summary "$TMP/same-batch-1e-3.out")
s3=$(summary "$TMP/same-batch-3e-3.out")
m1=$(jq -r 'select(.event == "notice") | .message' "$TMP/same-batch-1e-3.out" | grep "^warm start from")
m3=$(jq -r 'select(.event == "notice") | .message' "$TMP/same-batch-3e-3.out" | grep "^warm start from")
check "refit auto: 20 steps on the source's batch and learning rate, 50 on another learning rate" \
  'echo "$s1" | jq -e ".freeze_step == 20" > /dev/null && echo "$s3" | jq -e ".freeze_step == 50" > /dev/null && ! echo "$m1" | grep -q "differs" && echo "$m3" | grep -q "until step 50 (the source.s peak learning rate differs from this job.s), then frozen"' \
  "$s1 / $s3 / $m1 / $m3"

# A borrowed v that fits the new job's first gradients as it fitted its own run (at most 0.25 %
# of coordinates off: the job starts from the source's initial parameters, its seed, or from its
# trained parameters) is frozen at the end of step 1: a refit only costs bytes there. Another
# seed's parameters (above: 20 steps) keep the refit.
sed -e 's/^seed: 22$/seed: 21/' "$TMP/same-batch-1e-3.yaml" > "$TMP/same-seed.yaml"
sed -e 's/params: false/params: true/' "$TMP/same-batch-1e-3.yaml" > "$TMP/params.yaml"
for c in same-seed params; do run "$TMP/$c.yaml" "$TMP/$c.out"; done
ss=$(summary "$TMP/same-seed.out")
sp=$(summary "$TMP/params.out")
ms=$(jq -r 'select(.event == "warm_start") | .message + " / " + .outcome' "$TMP/same-seed.out" | grep "^warm start check")
mp=$(jq -r 'select(.event == "warm_start") | .message + " / " + .outcome' "$TMP/params.out" | grep "^warm start check")
check "a borrowed v that fits as on its own run (the source's seed, its parameters) is frozen at step 1" \
  'echo "$ss" | jq -e ".freeze_step == 1" > /dev/null && echo "$sp" | jq -e ".freeze_step == 1" > /dev/null && echo "$ms" | grep -Eq "frozen at the end of step 1 instead of step 20 / fits: frozen at step 1 \([0-9.]+% of coordinates off\)$" && echo "$mp" | grep -q "frozen at the end of step 1 instead of step 20"' \
  "$ss / $sp / $ms / $mp"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
