#!/usr/bin/env bash
# Black-box tests of checkpoints through the real onebit-worker under mpirun: bit-exact resume
# after SIGKILL (before and after the freeze) and after SIGTERM, async checkpoints, skipping
# damaged checkpoints, warm start, resizing, and the errors users see.
# usage: test_resume.sh WORKER CKPT_TOOL MPIEXEC
set -u
WORKER=$1
CKPT=$2
MPIEXEC=$3
TMP=$(mktemp -d)
trap 'pkill -KILL -f "$TMP/" 2>/dev/null; rm -rf "$TMP"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1: $2"; }
# run NP OUT ARGS...: the worker on NP ranks, JSON lines to OUT, stderr to OUT.err
run() {
  local np=$1 out=$2
  shift 2
  timeout 120 "$MPIEXEC" --oversubscribe -np "$np" "$WORKER" "$@" > "$out" 2> "$out.err"
}
field() { jq -r "select(.event==\"$2\") | $3" "$1" | tail -1; }
# same A B NAME: the two checkpoint directories hold bit-identical training state
same() {
  if "$CKPT" diff "$1" "$2" > "$TMP/diff" 2>&1; then ok "$3"; else bad "$3" "$(cat "$TMP/diff")"; fi
}

# A small 1-bit Adam job: 120 steps, frozen at step 60, a checkpoint every 10 steps; its warmup
# in fp32 (the default is fp8), whose sums over these ranks are the same bits in one bucket or
# in several, as the segment and resize checks below need; the fp16 and refit checks measure
# their bytes against it.
spec() { # spec FILE [extra YAML lines...]
  local f=$1
  shift
  {
    printf 'name: job\n'
    printf 'model: {type: mlp, hidden: [48]}\n'
    printf 'data: {type: synthetic_classification, n_train: 2048, n_eval: 512, input_dim: 24, num_classes: 4}\n'
    printf 'optimizer: {type: onebit_adam, gradient_exchange: fp32, beta2: 0.99, freeze_step: 60, block_size: 64}\n'
    printf 'batch_size: 16\nsteps: 120\nlog_interval: 10\nseed: 3\n'
    for l in "$@"; do printf '%s\n' "$l"; done
  } > "$f"
}
spec "$TMP/job.yaml" 'checkpoint: {interval: 10, keep: 20}'
spec "$TMP/async.yaml" 'checkpoint: {interval: 10, keep: 20, async: true}'
NP=3

# --- the uninterrupted run ---------------------------------------------------------------------
run $NP "$TMP/base.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/base"; rc=$?
BASE="$TMP/base/job/step-00000120"
n_ckpt=$(jq -s '[.[] | select(.event=="checkpoint" and .ok)] | length' "$TMP/base.jsonl")
if [ $rc -eq 0 ] && [ -d "$BASE" ] && [ "$n_ckpt" = 12 ] && "$CKPT" info "$BASE" > /dev/null; then
  ok "uninterrupted run: 12 checkpoints, the last verifies"
else bad "uninterrupted run" "rc=$rc n=$n_ckpt $(cat "$TMP/base.jsonl.err")"; fi
if [ -d "$TMP/base/job/step-00000010" ] && ! ls -d "$TMP"/base/job/*.tmp > /dev/null 2>&1; then
  ok "only committed directories remain"
else bad "only committed directories remain" "$(ls "$TMP/base/job")"; fi

# --- SIGKILL of one rank before the freeze, then resume: bit-exact -----------------------------
kill_and_resume() { # NAME SPEC STEP RANK [UNINTERRUPTED-FINAL-CHECKPOINT]
  local name=$1 sp=$2 step=$3 rank=$4 dir="$TMP/$1" base=${5:-$BASE}
  ONEBIT_FAULT_INJECT="KILL:$step:$rank" run $NP "$TMP/$name-1.jsonl" --spec "$sp" --checkpoint-dir "$dir"; rc=$?
  local last
  last=$(field "$TMP/$name-1.jsonl" checkpoint .step)
  if [ $rc -ne 0 ] && [ ! -d "$dir/job/step-00000120" ]; then ok "$name: the killed run fails (rc=$rc, last checkpoint $last)"
  else bad "$name: the killed run fails" "rc=$rc"; fi
  run $NP "$TMP/$name-2.jsonl" --spec "$sp" --checkpoint-dir "$dir" --resume; rc=$?
  local from
  from=$(field "$TMP/$name-2.jsonl" resume .step)
  if [ $rc -eq 0 ] && [ "$from" = "$last" ]; then ok "$name: resumed after step $from"
  else bad "$name: resume" "rc=$rc from=$from last=$last $(cat "$TMP/$name-2.jsonl.err")"; fi
  same "$base" "$dir/job/step-00000120" "$name: final state identical to the uninterrupted run"
}
kill_and_resume kill-warmup "$TMP/job.yaml" 35 1
kill_and_resume kill-compression "$TMP/job.yaml" 85 2

# --- variance refreshes: killed inside one, resumed from a checkpoint taken inside it ---------
# Frozen at 10, refresh_steps 6: steps 21-26 and 53-58 re-estimate v, 117-120 start a third.
sed 's/freeze_step: 60/freeze_step: 10, refresh_steps: 6/; s/^steps: 120$/steps: 120/' \
  "$TMP/job.yaml" | sed 's/interval: 10, keep: 20/interval: 5, keep: 40/' > "$TMP/refresh.yaml"
run $NP "$TMP/refresh-base.jsonl" --spec "$TMP/refresh.yaml" --checkpoint-dir "$TMP/rbase"; rc=$?
refreshed=$(jq -r 'select(.event=="notice") | .message' "$TMP/refresh-base.jsonl" |
  grep -c '^variance refreshed: steps \(21-26\|53-58\) ')
if [ $rc -eq 0 ] && [ "$refreshed" = 2 ] && [ "$(field "$TMP/refresh-base.jsonl" summary .freeze_step)" = 58 ]; then
  ok "refresh_steps: v re-estimated over steps 21-26 and 53-58, frozen at 58"
else bad "refresh_steps run" "rc=$rc refreshed=$refreshed $(tail -3 "$TMP/refresh-base.jsonl.err")"; fi
kill_and_resume kill-refresh "$TMP/refresh.yaml" 57 1 "$TMP/rbase/job/step-00000120"

# --- a tracked variance: every rank's statistics in its rank file, killed between estimates --
# Frozen at 10 (track_variance 10, no LR warmup), v estimated at 20, 30, ...; killed at 47 the
# run resumes from 40 and must re-estimate at 50 from the saved statistics.
sed 's/freeze_step: 60/track_variance: 10/' "$TMP/job.yaml" > "$TMP/track.yaml"
run $NP "$TMP/track-base.jsonl" --spec "$TMP/track.yaml" --checkpoint-dir "$TMP/tbase"; rc=$?
if [ $rc -eq 0 ] && [ "$(field "$TMP/track-base.jsonl" summary .freeze_step)" = 10 ] &&
  "$CKPT" info "$TMP/tbase/job/step-00000120" | grep -q 'u, A, B'; then
  ok "track_variance: frozen at 10, the statistics in the checkpoint"
else bad "track_variance run" "rc=$rc $(tail -3 "$TMP/track-base.jsonl.err")"; fi
kill_and_resume kill-track "$TMP/track.yaml" 47 2 "$TMP/tbase/job/step-00000120"

# --- SIGTERM: finish the step, checkpoint it, exit 0; resume bit-exact ------------------------
ONEBIT_FAULT_INJECT=TERM:47:1 run $NP "$TMP/term-1.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/term"; rc=$?
if [ $rc -eq 0 ] && [ "$(field "$TMP/term-1.jsonl" summary .stopped)" = true ] &&
   [ "$(field "$TMP/term-1.jsonl" summary .last_checkpoint)" = 47 ] &&
   "$CKPT" info "$TMP/term/job/step-00000047" > /dev/null; then
  ok "SIGTERM on one rank: every rank stops after step 47 with a checkpoint, exit 0"
else bad "SIGTERM stop" "rc=$rc $(tail -2 "$TMP/term-1.jsonl") $(cat "$TMP/term-1.jsonl.err")"; fi
run $NP "$TMP/term-2.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/term" --resume; rc=$?
if [ $rc -eq 0 ] && [ "$(field "$TMP/term-2.jsonl" summary .first_step)" = 48 ]; then ok "resumed at step 48"
else bad "resume after SIGTERM" "rc=$rc"; fi
same "$BASE" "$TMP/term/job/step-00000120" "SIGTERM + resume: final state identical"

# --- async checkpoints: the same bytes, and the same resume ----------------------------------
run $NP "$TMP/async.jsonl" --spec "$TMP/async.yaml" --checkpoint-dir "$TMP/async"; rc=$?
n_async=$(jq -s '[.[] | select(.event=="checkpoint" and .ok and .async)] | length' "$TMP/async.jsonl")
if [ $rc -eq 0 ] && [ "$n_async" = 11 ]; then ok "async: 11 background checkpoints and a final one"
else bad "async run" "rc=$rc async=$n_async $(cat "$TMP/async.jsonl.err")"; fi
for s in 00000050 00000100 00000120; do
  same "$TMP/base/job/step-$s" "$TMP/async/job/step-$s" "async checkpoint $s identical to the synchronous one"
done
kill_and_resume kill-async "$TMP/async.yaml" 93 0

# --- async retention (keep 2): pruned in the writer's thread while training goes on ----------
# Killed at step 75: the checkpoints of 10..60 (and maybe 70) were committed in the background;
# keep 2 leaves 2, or 3 where the last commit's pass had not run yet; then resume to the end.
spec "$TMP/async-keep.yaml" 'checkpoint: {interval: 10, keep: 2, async: true}'
ONEBIT_FAULT_INJECT=KILL:75:1 run $NP "$TMP/akeep-1.jsonl" --spec "$TMP/async-keep.yaml" \
  --checkpoint-dir "$TMP/akeep"; rc=$?
n_dirs=$(find "$TMP/akeep/job" -maxdepth 1 -name 'step-????????' | wc -l)
if [ $rc -ne 0 ] && [ "$n_dirs" -ge 2 ] && [ "$n_dirs" -le 3 ]; then
  ok "async keep 2: $n_dirs checkpoints left when killed at step 75"
else bad "async keep 2 before the kill" "rc=$rc dirs=$n_dirs: $(ls "$TMP/akeep/job")"; fi
run $NP "$TMP/akeep-2.jsonl" --spec "$TMP/async-keep.yaml" --checkpoint-dir "$TMP/akeep" --resume; rc=$?
left=$(cd "$TMP/akeep/job" && ls -d step-* | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$left" = "step-00000110 step-00000120 " ]; then
  ok "async keep 2: resumed to the end, the two newest remain"
else bad "async keep 2 resume" "rc=$rc left=$left $(tail -2 "$TMP/akeep-2.jsonl.err")"; fi
same "$BASE" "$TMP/akeep/job/step-00000120" "async keep 2: final state identical"

# --- optimizer.overlap: the gradient's buckets leave during the backward pass ------------------
# 0.0005 MiB buckets split the MLP (24-48-4) into {output.*} and {layer0.*}. On and off give the
# same bits; with it on, a killed rank resumes bit-exactly (warmup and compression phase); a run
# checkpointed with it off continues with it on.
spec "$TMP/ovl.yaml" 'checkpoint: {interval: 10, keep: 20}'
sed -i 's/^optimizer: {type: onebit_adam, /optimizer: {type: onebit_adam, bucket_mb: 0.0005, overlap: true, /' "$TMP/ovl.yaml"
sed 's/overlap: true/overlap: false/' "$TMP/ovl.yaml" > "$TMP/ovl-off.yaml"
OVL="$TMP/ovl/job/step-00000120"
run $NP "$TMP/ovl.jsonl" --spec "$TMP/ovl.yaml" --checkpoint-dir "$TMP/ovl"; rc=$?
run $NP "$TMP/ovl-off.jsonl" --spec "$TMP/ovl-off.yaml" --checkpoint-dir "$TMP/ovl-off"; rc2=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(field "$TMP/ovl.jsonl" freeze .step)" = 60 ] &&
   [ "$(field "$TMP/ovl.jsonl" summary .bytes_sent)" = "$(field "$TMP/ovl-off.jsonl" summary .bytes_sent)" ] &&
   ! grep -q '"event":"notice"' "$TMP/ovl.jsonl"; then
  ok "overlap on and off: both finish, freeze at step 60, the same traffic, no fallback notice"
else bad "overlap runs" "rc=$rc/$rc2 $(grep notice "$TMP/ovl.jsonl") $(cat "$TMP/ovl.jsonl.err" "$TMP/ovl-off.jsonl.err")"; fi
same "$TMP/ovl-off/job/step-00000120" "$OVL" "overlap on and off: identical final state"
# With the default 4 MiB the whole model is one bucket: nothing can overlap, and the user is told.
spec "$TMP/ovl1.yaml"
sed -i 's/^optimizer: {type: onebit_adam, /optimizer: {type: onebit_adam, overlap: true, /' "$TMP/ovl1.yaml"
run $NP "$TMP/ovl1.jsonl" --spec "$TMP/ovl1.yaml"; rc=$?
note=$(jq -r 'select(.event=="notice") | .message' "$TMP/ovl1.jsonl")
if [ $rc -eq 0 ] && [ "$note" = "optimizer.overlap: the model's 1396 parameters fit one bucket of bucket_mb 4; nothing overlaps the backward pass (a smaller bucket_mb gives the last layers a bucket of their own)" ]; then
  ok "overlap with the whole model in one bucket: a notice says nothing overlaps"
else bad "overlap in one bucket: notice" "rc=$rc note=$note"; fi
kill_and_resume ovl-kill-warmup "$TMP/ovl.yaml" 35 1 "$OVL"
kill_and_resume ovl-kill-compression "$TMP/ovl.yaml" 85 2 "$OVL"
ONEBIT_FAULT_INJECT=TERM:47:1 run $NP "$TMP/ovl-sw-1.jsonl" --spec "$TMP/ovl-off.yaml" --checkpoint-dir "$TMP/ovl-sw"; rc=$?
run $NP "$TMP/ovl-sw-2.jsonl" --spec "$TMP/ovl.yaml" --checkpoint-dir "$TMP/ovl-sw" --resume; rc2=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(field "$TMP/ovl-sw-2.jsonl" resume .step)" = 47 ]; then
  ok "overlap switched on at a resume: accepted, resumed after step 47"
else bad "overlap switched on at a resume" "rc=$rc/$rc2 $(cat "$TMP/ovl-sw-2.jsonl.err")"; fi
same "$OVL" "$TMP/ovl-sw/job/step-00000120" "overlap switched on at a resume: final state identical"

# --- optimizer.gradient_exchange fp16: the warmup's gradients in half the bytes ---------------
# No state: a rank killed in the warmup resumes bit-exactly; the warmup sends about half of the
# fp32 run's bytes; a checkpoint of an fp32 run is refused by an fp16 job (other bits).
spec "$TMP/f16.yaml" 'checkpoint: {interval: 10, keep: 20}'
sed -i 's/gradient_exchange: fp32/gradient_exchange: fp16/' "$TMP/f16.yaml"
F16="$TMP/f16/job/step-00000120"
run $NP "$TMP/f16.jsonl" --spec "$TMP/f16.yaml" --checkpoint-dir "$TMP/f16"; rc=$?
w16=$(field "$TMP/f16.jsonl" summary .bytes_warmup)
w32=$(field "$TMP/base.jsonl" summary .bytes_warmup)
if [ $rc -eq 0 ] && [ "$(field "$TMP/f16.jsonl" freeze .step)" = 60 ] && [ -n "$w16" ] && [ -n "$w32" ] &&
   awk -v a="$w16" -v b="$w32" 'BEGIN { exit !(a > 0 && a < 0.6 * b) }'; then
  ok "fp16 exchange: finishes, freezes at step 60, warmup bytes $w16 against fp32's $w32"
else bad "fp16 exchange run" "rc=$rc warmup bytes $w16 / $w32 $(cat "$TMP/f16.jsonl.err")"; fi
if ! "$CKPT" diff "$BASE" "$F16" > /dev/null 2>&1; then ok "fp16 exchange: other bits than fp32"
else bad "fp16 exchange: other bits than fp32" "identical final state"; fi
kill_and_resume f16-kill-warmup "$TMP/f16.yaml" 35 1 "$F16"
cp -r "$TMP/base" "$TMP/f16-switch"
run $NP "$TMP/f16-switch.jsonl" --spec "$TMP/f16.yaml" --checkpoint-dir "$TMP/f16-switch" --resume; rc=$?
if [ $rc -ne 0 ] && grep -q "gradient_exchange\|optimizer" "$TMP/f16-switch.jsonl.err" "$TMP/f16-switch.jsonl"; then
  ok "an fp32 run's checkpoint is refused by an fp16 job"
else bad "fp32 checkpoint, fp16 job" "rc=$rc $(cat "$TMP/f16-switch.jsonl.err")"; fi

# --- damaged checkpoints are skipped with a reason, the previous one used --------------------
damaged() { # NAME EXPECTED-REASON COMMAND-ON-DIR
  local name=$1 reason=$2 dir="$TMP/dmg-$1"
  cp -r "$TMP/base" "$dir"
  (cd "$dir/job" && eval "$3")
  run $NP "$TMP/$name.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$dir" --resume; rc=$?
  local skip from
  skip=$(jq -r 'select(.event=="notice") | .message' "$TMP/$name.jsonl" | head -1)
  from=$(field "$TMP/$name.jsonl" resume .step)
  if [ $rc -eq 0 ] && [ "$from" = 110 ] && [[ "$skip" == *"$reason"* ]]; then
    ok "$name: skipped ($reason), resumed from step 110"
  else bad "$name" "rc=$rc from=$from notice='$skip' $(cat "$TMP/$name.jsonl.err")"; fi
  same "$BASE" "$dir/job/step-00000120" "$name: final state identical"
}
# 32 bytes flipped two thirds into the file: inside the arrays.
flip='f=step-00000120/state.h5; n=$(stat -c %s $f); python3 -c "
import sys; p=sys.argv[1]; o=int(sys.argv[2])*2//3; b=bytearray(open(p,\"rb\").read())
for i in range(o, o+32): b[i]^=0x5a
open(p,\"r+b\").write(b)" $f $n'
damaged flipped-bytes "detected by its checksum" "$flip"
damaged truncated "truncated file" 'truncate -s 3000 step-00000120/state.h5'
damaged missing-rank "rank-00002.h5: missing" 'rm step-00000120/rank-00002.h5'
damaged leftover-tmp "incomplete" 'mv step-00000120 step-00000120.tmp'

# --- warm start from the frozen variance of the uninterrupted run ----------------------------
spec "$TMP/warm.yaml" 'log_interval: 1' "warm_start: {from: $TMP/base/job, refit_steps: 0}" 'checkpoint: {interval: 0}'
sed -i 's/^steps: 120/steps: 20/; /^log_interval: 10/d' "$TMP/warm.yaml"
run $NP "$TMP/warm.jsonl" --spec "$TMP/warm.yaml" --checkpoint-dir "$TMP/warm"; rc=$?
p1=$(jq -r 'select(.event=="step" and .step==1) | .phase' "$TMP/warm.jsonl")
b1=$(jq -r 'select(.event=="step" and .step==1) | .bytes_step' "$TMP/warm.jsonl")
b20=$(jq -r 'select(.event=="step" and .step==20) | .bytes_step' "$TMP/warm.jsonl")
nfreeze=$(jq -s '[.[] | select(.event=="freeze")] | length' "$TMP/warm.jsonl")
if [ $rc -eq 0 ] && [ "$p1" = compression ] && [ "$b1" = "$b20" ] && [ "$nfreeze" = 0 ] &&
   [ "$(jq -r 'select(.event=="warm_start" and .step==0) | .outcome' "$TMP/warm.jsonl")" = "taken as is" ] &&
   jq -r 'select(.event=="warm_start") | .message' "$TMP/warm.jsonl" | grep -q "warm start from $TMP/base/job/step-00000120"; then
  ok "warm start: step 1 is a compression step ($b1 bytes), no warmup"
else bad "warm start" "rc=$rc p1=$p1 b1=$b1 b20=$b20 freeze=$nfreeze $(cat "$TMP/warm.jsonl.err")"; fi
if "$CKPT" diff "$BASE" "$TMP/warm/job/step-00000020" --only exp_avg_sq > "$TMP/diff" 2>&1; then
  ok "warm start: v equals the source v_Tw bit for bit"
else bad "warm start v" "$(cat "$TMP/diff")"; fi
if ! "$CKPT" diff "$BASE" "$TMP/warm/job/step-00000020" --only exp_avg > /dev/null 2>&1; then
  ok "warm start: momentum starts fresh (differs from the source)"
else bad "warm start momentum" "m identical to the source"; fi

# The default: the borrowed v is checked at step 1 and re-estimated by Adam until step 20
# (ceil(Delta / 5) at beta2 0.99), then frozen; a rank killed during the refit resumes bit-exactly.
# Seed 4: other initial parameters than the source's (on its seed the borrowed v fits so well
# that the refit ends at step 1: tests/test_warm_start.sh).
spec "$TMP/refit.yaml" "warm_start: {from: $TMP/base/job}" 'checkpoint: {interval: 10, keep: 20}'
sed -i 's/^steps: 120/steps: 40/; s/^seed: 3$/seed: 4/' "$TMP/refit.yaml"
run $NP "$TMP/refit.jsonl" --spec "$TMP/refit.yaml" --checkpoint-dir "$TMP/refit"; rc=$?
p10=$(jq -r 'select(.event=="step" and .step==10) | .phase' "$TMP/refit.jsonl")
f=$(field "$TMP/refit.jsonl" freeze .step)
if [ $rc -eq 0 ] && [ "$p10" = warmup ] && [ "$f" = 20 ] &&
   jq -r 'select(.event=="warm_start" and .step==1) | .message' "$TMP/refit.jsonl" | grep -q "^warm start check passed: .* re-estimating v until step 20$" &&
   jq -r 'select(.event=="warm_start" and .step==1) | .outcome' "$TMP/refit.jsonl" | grep -q "^re-estimated until step 20 ("; then
  ok "warm start (default): checked at step 1, re-estimated by Adam, frozen at step 20"
else bad "warm start refit" "rc=$rc p10=$p10 freeze=$f $(grep -E 'notice|warm_start' "$TMP/refit.jsonl") $(cat "$TMP/refit.jsonl.err")"; fi
if ! "$CKPT" diff "$BASE" "$TMP/refit/job/step-00000020" --only exp_avg_sq > /dev/null 2>&1; then
  ok "warm start (default): the frozen v is re-estimated, not the source's"
else bad "warm start refit v" "v_Tw identical to the source"; fi
# Its freeze takes the source's factor between frozen v and v_hat: frozen at step 60 at beta2
# 0.99, max(1 - 0.99^60, 1 / 1.25^2) = 0.64; saved with the refit's state, named in the notice.
wi=$("$CKPT" info "$TMP/refit/job/step-00000010" | sed -n 's/^warm start *//p')
if [ "$wi" = "refit, refit until step 20, refit scale 0.64" ] &&
   jq -r 'select(.event=="notice") | .message' "$TMP/refit.jsonl" | grep -q "until step 20, then frozen at 0.64 times its estimate, as the source's freeze kept its own;"; then
  ok "warm start (default): the refit freezes v at 0.64 times its estimate, the source's factor (in the checkpoint and the notice)"
else bad "warm start refit scale" "info: '$wi' $(grep notice "$TMP/refit.jsonl")"; fi
ONEBIT_FAULT_INJECT="KILL:15:1" run $NP "$TMP/refit-1.jsonl" --spec "$TMP/refit.yaml" --checkpoint-dir "$TMP/refit-k"; rc=$?
run $NP "$TMP/refit-2.jsonl" --spec "$TMP/refit.yaml" --checkpoint-dir "$TMP/refit-k" --resume; rc2=$?
if [ $rc -ne 0 ] && [ $rc2 -eq 0 ] && [ "$(field "$TMP/refit-2.jsonl" resume .step)" = 10 ] &&
   [ "$(field "$TMP/refit-2.jsonl" freeze .step)" = 20 ]; then
  ok "warm start: a rank killed during the refit, resumed from step 10, freezes at step 20 again"
else bad "warm start refit resume" "rc=$rc/$rc2 $(cat "$TMP/refit-2.jsonl.err")"; fi
same "$TMP/refit/job/step-00000040" "$TMP/refit-k/job/step-00000040" "warm start: the resumed refit ends bit-identical to the uninterrupted one"
# The refit's gradients cross in fp8 by default (refit_exchange), in fp16 or in fp32 (as the job
# from scratch) when asked.
spec "$TMP/refit32.yaml" "warm_start: {from: $TMP/base/job, refit_exchange: fp32}"
sed -i "s/^steps: 120/steps: 10/; s/^seed: 3$/seed: 4/" "$TMP/refit32.yaml"
run $NP "$TMP/refit32.jsonl" --spec "$TMP/refit32.yaml"; rc=$?
sed 's/refit_exchange: fp32}/refit_exchange: fp16}/' "$TMP/refit32.yaml" > "$TMP/refit16.yaml"
run $NP "$TMP/refit16.jsonl" --spec "$TMP/refit16.yaml"; rc16=$?
r8=$(jq -r 'select(.event=="step" and .step==10) | .bytes_step' "$TMP/refit.jsonl")
r16=$(jq -r 'select(.event=="step" and .step==10) | .bytes_step' "$TMP/refit16.jsonl")
r32=$(jq -r 'select(.event=="step" and .step==10) | .bytes_step' "$TMP/refit32.jsonl")
s32=$(jq -r 'select(.event=="step" and .step==10) | .bytes_step' "$TMP/base.jsonl")
notice() { jq -r 'select(.event=="notice") | .message' "$1" | grep -q "the refit's gradients cross in $2$"; }
if [ $rc -eq 0 ] && [ $rc16 -eq 0 ] && [ "$r32" = "$s32" ] && [ "$r8" -gt 0 ] &&
   [ $((r8 * 10)) -lt $((r32 * 3)) ] && [ $((r16 * 10)) -lt $((r32 * 7)) ] && [ "$r8" -lt "$r16" ] &&
   notice "$TMP/refit.jsonl" fp8 && notice "$TMP/refit16.jsonl" fp16 && notice "$TMP/refit32.jsonl" fp32; then
  ok "warm start: the refit's step sends $r8 bytes in fp8 (default), $r16 in fp16, $r32 in fp32 as from scratch"
else bad "warm start refit exchange" "rc=$rc/$rc16 fp8=$r8 fp16=$r16 fp32=$r32 scratch=$s32 $(cat "$TMP/refit32.jsonl.err" "$TMP/refit16.jsonl.err")"; fi
# The overlap's thread takes the refit's fp8 exchange, then nothing (the compression phase).
sed 's/block_size: 64}/block_size: 64, overlap: true}/' "$TMP/refit.yaml" > "$TMP/refit-ov.yaml"
run $NP "$TMP/refit-ov.jsonl" --spec "$TMP/refit-ov.yaml" --checkpoint-dir "$TMP/refit-ov"; rc=$?
[ $rc -eq 0 ] || bad "warm start refit with overlap" "rc=$rc $(cat "$TMP/refit-ov.jsonl.err")"
same "$TMP/refit/job/step-00000040" "$TMP/refit-ov/job/step-00000040" "warm start: the fp8 refit with overlap: true ends bit-identical to without"

spec "$TMP/warm-early.yaml" "warm_start: {from: $TMP/base/job/step-00000030}"
run $NP "$TMP/we.jsonl" --spec "$TMP/warm-early.yaml"; rc=$?
if [ $rc -eq 4 ] && grep -q "has no frozen variance (step 30 is still in the warmup phase)" "$TMP/we.jsonl.err"; then
  ok "warm start from a warmup checkpoint refused"
else bad "warm start from warmup" "rc=$rc $(cat "$TMP/we.jsonl.err")"; fi
spec "$TMP/warm-model.yaml" "warm_start: {from: $BASE}"
sed -i 's/hidden: \[48\]/hidden: [40]/' "$TMP/warm-model.yaml"
run $NP "$TMP/wm.jsonl" --spec "$TMP/warm-model.yaml"; rc=$?
if [ $rc -eq 4 ] && grep -q "was written for another model" "$TMP/wm.jsonl.err"; then ok "warm start with another model refused"
else bad "warm start model" "rc=$rc $(cat "$TMP/wm.jsonl.err")"; fi
spec "$TMP/warm-none.yaml" "warm_start: {from: $TMP/nowhere}"
run $NP "$TMP/wn.jsonl" --spec "$TMP/warm-none.yaml"; rc=$?
if [ $rc -eq 4 ] && grep -q "no usable checkpoint in $TMP/nowhere" "$TMP/wn.jsonl.err"; then ok "warm start from nothing refused"
else bad "warm start from nothing" "rc=$rc $(cat "$TMP/wn.jsonl.err")"; fi

# --- resize: 4 ranks -> 2 -> 3, training goes on ----------------------------------------------
ONEBIT_FAULT_INJECT=TERM:70:0 run 4 "$TMP/r4.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/resize"; rc4=$?
ONEBIT_FAULT_INJECT=TERM:95:1 run 2 "$TMP/r2.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/resize" --resume; rc2=$?
run 3 "$TMP/r3.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/resize" --resume; rc3=$?
w2=$(field "$TMP/r2.jsonl" resume .from_world_size)
w3=$(field "$TMP/r3.jsonl" resume .from_world_size)
acc=$(field "$TMP/r3.jsonl" summary .eval_accuracy)
if [ $rc4 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ "$w2" = 4 ] && [ "$w3" = 2 ] &&
   [ "$(field "$TMP/r3.jsonl" summary .steps)" = 120 ] && jq -e "$acc > 0.9" <<< 1 > /dev/null; then
  ok "resize 4 -> 2 -> 3: resumed at each size, finished (eval accuracy $acc)"
else bad "resize" "rc=$rc4/$rc2/$rc3 from=$w2/$w3 acc=$acc $(cat "$TMP/r2.jsonl.err" "$TMP/r3.jsonl.err")"; fi
if [ "$("$CKPT" info "$TMP/resize/job/step-00000120" | awk '/world size/ {print $3}')" = 3 ]; then
  ok "the resized job writes checkpoints for its new world size"
else bad "resized layout" "$("$CKPT" info "$TMP/resize/job/step-00000120")"; fi

# --- the compression phase in segments: no bit changes, resize included ----------------------
# On 2 ranks the warmup's bucketed sums are the whole-vector sum's bits, and segments change no
# bit of the compressed exchange: the overlap job (2 buckets, so 2 segments) ends in exactly the
# state of the one-segment job (onebit-ckpt diff compares server errors position by position).
# Stopped in the compression phase and resumed on 3 ranks, the server errors are re-mapped from
# either layout into the new one: the two still end identical.
run 2 "$TMP/seg1.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/seg1"; rc=$?
run 2 "$TMP/seg2.jsonl" --spec "$TMP/ovl.yaml" --checkpoint-dir "$TMP/seg2"; rc2=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ]; then ok "2 ranks, one segment and two: both finish"
else bad "2 ranks, one segment and two" "rc=$rc/$rc2 $(cat "$TMP/seg1.jsonl.err" "$TMP/seg2.jsonl.err")"; fi
same "$TMP/seg1/job/step-00000120" "$TMP/seg2/job/step-00000120" \
  "2 ranks: two segments overlapped end in the one-segment job's state"
for v in 1 2; do
  sp=$TMP/job.yaml
  [ $v = 2 ] && sp=$TMP/ovl.yaml
  ONEBIT_FAULT_INJECT=TERM:70:0 run 2 "$TMP/segr$v-1.jsonl" --spec "$sp" --checkpoint-dir "$TMP/segr$v"; rc=$?
  run 3 "$TMP/segr$v-2.jsonl" --spec "$sp" --checkpoint-dir "$TMP/segr$v" --resume; rc2=$?
  if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(field "$TMP/segr$v-2.jsonl" resume .from_world_size)" = 2 ]; then
    ok "segments $v: stopped after step 70 on 2 ranks, resumed on 3"
  else bad "segments $v: resize 2 -> 3" "rc=$rc/$rc2 $(cat "$TMP/segr$v-2.jsonl.err")"; fi
done
same "$TMP/segr1/job/step-00000120" "$TMP/segr2/job/step-00000120" \
  "resized 2 -> 3 in the compression phase: one segment and two end identical"

# --- SIGTERM from outside, to the ranks of a long job ------------------------------------------
spec "$TMP/long.yaml" 'log_interval: 1000'
sed -i 's/^steps: 120/steps: 100000000/; /^log_interval: 10$/d' "$TMP/long.yaml"
"$MPIEXEC" --oversubscribe -np $NP "$WORKER" --spec "$TMP/long.yaml" --checkpoint-dir "$TMP/long" > "$TMP/long.jsonl" 2> "$TMP/long.err" &
mpid=$!
for _ in $(seq 100); do grep -q '"event":"step"' "$TMP/long.jsonl" 2> /dev/null && break; sleep 0.1; done
pkill -TERM -P $mpid -x onebit-worker # the ranks (children of mpirun), not mpirun
wait $mpid; rc=$?
stop_step=$(field "$TMP/long.jsonl" summary .last_checkpoint)
if [ $rc -eq 0 ] && [ "$(field "$TMP/long.jsonl" summary .stopped)" = true ] &&
   "$CKPT" info "$(printf '%s/long/job/step-%08d' "$TMP" "$stop_step")" > /dev/null; then
  ok "external SIGTERM: stopped at step $stop_step with a valid checkpoint, exit 0"
else bad "external SIGTERM" "rc=$rc step=$stop_step $(tail -2 "$TMP/long.jsonl") $(cat "$TMP/long.err")"; fi

# --- retention counts only checkpoints that verify ------------------------------------------
# Two directories with higher step numbers that do not verify (junk in state.h5, an empty one)
# are in the job's directory from the start; keep 2 must keep the two newest good checkpoints
# (before, it kept the bad ones and deleted every good one, and --resume started at step 0).
spec "$TMP/keep.yaml" 'checkpoint: {interval: 10, keep: 2}'
sed -i 's/^steps: 120/steps: 40/' "$TMP/keep.yaml"
mkdir -p "$TMP/keep/job/step-99999999" "$TMP/keep/job/step-99999998"
echo junk > "$TMP/keep/job/step-99999999/state.h5"
run $NP "$TMP/keep.jsonl" --spec "$TMP/keep.yaml" --checkpoint-dir "$TMP/keep"; rc=$?
left=$(cd "$TMP/keep/job" && echo step-*)
if [ $rc -eq 0 ] && [ "$left" = "step-00000030 step-00000040 step-99999998 step-99999999" ]; then
  ok "retention: the two newest good checkpoints kept beside two bad higher-numbered ones"
else bad "retention with bad directories" "rc=$rc left: $left"; fi
sed -i 's/^steps: 40/steps: 60/' "$TMP/keep.yaml"
run $NP "$TMP/keep2.jsonl" --spec "$TMP/keep.yaml" --checkpoint-dir "$TMP/keep" --resume; rc=$?
if [ $rc -eq 0 ] && [ "$(field "$TMP/keep2.jsonl" resume .step)" = 40 ]; then
  ok "retention: --resume continues from step 40, past the bad directories"
else bad "resume past bad directories" "rc=$rc $(cat "$TMP/keep2.jsonl.err")"; fi

# --- a checkpoint that verifies but cannot be resumed: the one before it is used -------------
# loader_index = loader_epoch = 2^64-1 (checksums recomputed: the file verifies); the data
# position is refused at resume, which falls back to step 110 instead of ending the job.
cp -r "$TMP/base" "$TMP/pos"
# Debian's python3, which has python3-h5py (another python3 may come first on PATH).
PY3=/usr/bin/python3
[ -x "$PY3" ] || PY3=python3
"$PY3" -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    for k in ('loader_index', 'loader_epoch'):
        f.attrs.modify(k, 2**64 - 1)" "$TMP/pos/job/step-00000120/state.h5" ||
  bad "refused checkpoint fallback" "could not rewrite the data position with h5py"
rewritten=$("$PY3" -c "
import h5py, sys
print(h5py.File(sys.argv[1], 'r').attrs['loader_index'])" "$TMP/pos/job/step-00000120/state.h5")
if [ "$rewritten" = 18446744073709551615 ] &&
   "$CKPT" verify "$TMP/pos/job/step-00000120" > /dev/null 2>&1; then
  run $NP "$TMP/pos.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/pos" --resume; rc=$?
  skip=$(jq -r 'select(.event=="notice") | .message' "$TMP/pos.jsonl" | head -1)
  if [ $rc -eq 0 ] && [ "$(field "$TMP/pos.jsonl" resume .step)" = 110 ] &&
     [[ "$skip" == *"resuming from it failed"* ]]; then
    ok "a verified checkpoint resume refuses: skipped with the reason, resumed from step 110"
  else bad "refused checkpoint fallback" "rc=$rc notice='$skip' $(cat "$TMP/pos.jsonl.err")"; fi
  same "$BASE" "$TMP/pos/job/step-00000120" "refused checkpoint fallback: final state identical"
elif "$CKPT" verify "$TMP/pos/job/step-00000120" > /dev/null 2>&1; then
  bad "refused checkpoint fallback" "the data position was not rewritten"
else
  ok "a checkpoint with an impossible data position no longer verifies"
fi

# --- BinSGDM: every rank's own m and b in its rank file; killed, resumed, resized ---------------
sed 's/^optimizer: .*/optimizer: {type: binsgdm, block_size: 64}/' "$TMP/job.yaml" > "$TMP/bin.yaml"
run $NP "$TMP/bin-base.jsonl" --spec "$TMP/bin.yaml" --checkpoint-dir "$TMP/binbase"; rc=$?
BIN="$TMP/binbase/job/step-00000120"
if [ $rc -eq 0 ] && [ "$(field "$TMP/bin-base.jsonl" summary .freeze_step)" = 0 ] &&
   "$CKPT" info "$BIN" | grep -q 'per-rank m, b'; then
  ok "binsgdm: compressed from step 1, every rank's m and b checkpointed"
else bad "binsgdm run" "rc=$rc $(cat "$TMP/bin-base.jsonl.err")"; fi
kill_and_resume kill-binsgdm "$TMP/bin.yaml" 77 2 "$BIN"
# The per-rank moments are compared: another rank's m makes the checkpoints differ.
if ! "$CKPT" diff "$BIN" "$TMP/kill-binsgdm/job/step-00000110" --only errors > /dev/null 2>&1; then
  ok "binsgdm: diff sees the per-rank state of another step"
else bad "binsgdm diff" "steps 110 and 120 compared identical"; fi
ONEBIT_FAULT_INJECT=TERM:60:0 run 3 "$TMP/binr3.jsonl" --spec "$TMP/bin.yaml" --checkpoint-dir "$TMP/binr"; rc3=$?
run 2 "$TMP/binr2.jsonl" --spec "$TMP/bin.yaml" --checkpoint-dir "$TMP/binr" --resume; rc2=$?
if [ $rc3 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(field "$TMP/binr2.jsonl" resume .step)" = 60 ] &&
   [ "$("$CKPT" info "$TMP/binr/job/step-00000120" | awk '/world size/ {print $3}')" = 2 ]; then
  ok "binsgdm: resized 3 -> 2 from the ranks' mean m and b, finished"
else bad "binsgdm resize" "rc=$rc3/$rc2 $(cat "$TMP/binr2.jsonl.err")"; fi

# --- the hierarchical exchange: 2 "nodes" of 2 ranks; killed and resumed; flat <-> hierarchical --
sed 's/^optimizer: {type: onebit_adam, /optimizer: {type: onebit_adam, ranks_per_node: 2, /' "$TMP/job.yaml" > "$TMP/hier.yaml"
sed 's/^optimizer: {type: onebit_adam, /optimizer: {type: onebit_adam, ranks_per_node: 0, /' "$TMP/job.yaml" > "$TMP/flat4.yaml"
run 4 "$TMP/hier-base.jsonl" --spec "$TMP/hier.yaml" --checkpoint-dir "$TMP/hierbase"; rc=$?
HIER="$TMP/hierbase/job/step-00000120"
if [ $rc -eq 0 ] && "$CKPT" info "$HIER" | grep -q 'ranks a node    2'; then
  ok "ranks_per_node 2 on 4 ranks: trained, the checkpoint records the shape"
else bad "hierarchical run" "rc=$rc $(cat "$TMP/hier-base.jsonl.err") $("$CKPT" info "$HIER")"; fi
NP=4 kill_and_resume kill-hier "$TMP/hier.yaml" 85 3 "$HIER"
# Flat until step 70, hierarchical after it (and the reverse): the errors are carried over.
ONEBIT_FAULT_INJECT=TERM:70:0 run 4 "$TMP/fh1.jsonl" --spec "$TMP/flat4.yaml" --checkpoint-dir "$TMP/fh"; rc1=$?
run 4 "$TMP/fh2.jsonl" --spec "$TMP/hier.yaml" --checkpoint-dir "$TMP/fh" --resume; rc2=$?
ONEBIT_FAULT_INJECT=TERM:70:0 run 4 "$TMP/hf1.jsonl" --spec "$TMP/hier.yaml" --checkpoint-dir "$TMP/hf"; rc3=$?
run 4 "$TMP/hf2.jsonl" --spec "$TMP/flat4.yaml" --checkpoint-dir "$TMP/hf" --resume; rc4=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] &&
   [ "$(field "$TMP/fh2.jsonl" resume .step)" = 70 ] && [ "$(field "$TMP/hf2.jsonl" resume .step)" = 70 ] &&
   "$CKPT" info "$TMP/fh/job/step-00000120" | grep -q 'ranks a node    2' &&
   ! "$CKPT" info "$TMP/hf/job/step-00000120" | grep -q 'ranks a node'; then
  ok "a flat checkpoint resumed hierarchically, and the reverse: both finish"
else bad "flat <-> hierarchical" "rc=$rc1/$rc2/$rc3/$rc4 $(cat "$TMP/fh2.jsonl.err" "$TMP/hf2.jsonl.err")"; fi

# --- the overlap changes no bit: binsgdm flat (in segments) and hierarchical, 1-bit Adam hierarchical
for v in bin-flat bin-hier adam-hier; do
  case $v in
    bin-flat) opt='{type: binsgdm, block_size: 64' ;;
    bin-hier) opt='{type: binsgdm, block_size: 64, ranks_per_node: 2' ;;
    adam-hier) opt='{type: onebit_adam, beta2: 0.99, freeze_step: 20, block_size: 64, ranks_per_node: 2' ;;
  esac
  for ov in true false; do
    sed "s/^optimizer: .*/optimizer: $opt, overlap: $ov, bucket_mb: 0.0005}/; s/^steps: 120$/steps: 60/" \
      "$TMP/job.yaml" | sed 's/interval: 10, keep: 20/interval: 60, keep: 1/' > "$TMP/ov-$v-$ov.yaml"
    run 4 "$TMP/ov-$v-$ov.jsonl" --spec "$TMP/ov-$v-$ov.yaml" --checkpoint-dir "$TMP/ov-$v-$ov"
  done
  same "$TMP/ov-$v-false/job/step-00000060" "$TMP/ov-$v-true/job/step-00000060" \
    "$v: overlap on and off end bit-identical"
done

# --- what users get wrong ---------------------------------------------------------------------
run 1 "$TMP/e1" --spec "$TMP/job.yaml"; rc=$?
if [ $rc -eq 2 ] && grep -q "checkpoint.interval is set but there is no checkpoint directory" "$TMP/e1.err"; then
  ok "interval without a directory: exit 2"; else bad "interval without a directory" "rc=$rc $(cat "$TMP/e1.err")"; fi
spec "$TMP/nock.yaml"
run 1 "$TMP/e2" --spec "$TMP/nock.yaml" --resume; rc=$?
if [ $rc -eq 2 ] && grep -q -- "--resume needs a checkpoint directory" "$TMP/e2.err"; then
  ok "--resume without a directory: exit 2"; else bad "--resume without a directory" "rc=$rc"; fi
run 1 "$TMP/e3" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/x" --job-id ../up; rc=$?
if [ $rc -eq 2 ] && grep -q -- "--job-id" "$TMP/e3.err"; then ok "bad job id: exit 2"; else bad "bad job id" "rc=$rc"; fi
ONEBIT_FAULT_INJECT=BOOM:3 run 1 "$TMP/e4" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/x"; rc=$?
if [ $rc -eq 2 ] && grep -q "ONEBIT_FAULT_INJECT" "$TMP/e4.err"; then ok "bad fault injection: exit 2"; else bad "bad fault injection" "rc=$rc"; fi
sed 's/beta2: 0.99/beta2: 0.999/' "$TMP/job.yaml" > "$TMP/other.yaml"
run $NP "$TMP/e5" --spec "$TMP/other.yaml" --checkpoint-dir "$TMP/base" --resume; rc=$?
if [ $rc -eq 4 ] && grep -q "was written by a different job: 'optimizer' differs" "$TMP/e5.err"; then
  ok "resume with another optimizer refused"; else bad "resume with another spec" "rc=$rc $(cat "$TMP/e5.err")"; fi
run $NP "$TMP/e6.jsonl" --spec "$TMP/job.yaml" --checkpoint-dir "$TMP/fresh" --resume; rc=$?
if [ $rc -eq 0 ] && jq -r 'select(.event=="notice") | .message' "$TMP/e6.jsonl" | grep -q "no checkpoint in $TMP/fresh/job: starting from step 0"; then
  same "$BASE" "$TMP/fresh/job/step-00000120" "--resume with no checkpoint starts fresh (and equals the uninterrupted run)"
else bad "--resume with no checkpoint" "rc=$rc $(cat "$TMP/e6.jsonl.err")"; fi
: > "$TMP/afile" # a file where the checkpoint directory should be
spec "$TMP/short.yaml" 'checkpoint: {interval: 50}'
run 1 "$TMP/e7.jsonl" --spec "$TMP/short.yaml" --checkpoint-dir "$TMP/afile"; rc=$?
nfail=$(jq -s '[.[] | select(.event=="checkpoint" and (.ok|not))] | length' "$TMP/e7.jsonl")
if [ $rc -eq 1 ] && [ "$nfail" = 3 ] && jq -r 'select(.event=="checkpoint") | .error' "$TMP/e7.jsonl" | grep -q "mkdir" &&
   grep -q "the checkpoint of step 120 could not be written" "$TMP/e7.jsonl.err"; then
  ok "unwritable checkpoint directory: every failure reported, training goes on, exit 1"
else bad "unwritable directory" "rc=$rc nfail=$nfail $(cat "$TMP/e7.jsonl.err")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
