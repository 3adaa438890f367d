#!/usr/bin/env bash
# optimizer.ranks_per_node: "auto" through the real onebit-worker under mpirun, 4 ranks on this
# machine: with the launcher's ONEBIT_RANKS_PER_NODE=2 (2 "nodes" of 2 ranks) it runs the
# hierarchical exchange and ends bit-identical to ranks_per_node: 2; on the one node MPI sees
# (MPI_COMM_TYPE_SHARED) and on uneven nodes it runs flat, bit-identical to ranks_per_node: 0;
# every run says what it chose; a checkpoint of an auto run resumes under another shape.
# usage: test_ranks_auto.sh WORKER CKPT_TOOL MPIEXEC
set -u
WORKER=$1
CKPT=$2
MPIEXEC=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1: $2"; }
# run OUT ARGS...: the worker on 4 ranks, JSON lines to OUT, stderr to OUT.err
run() {
  local out=$1
  shift
  timeout 120 "$MPIEXEC" --oversubscribe -np 4 "$WORKER" "$@" > "$out" 2> "$out.err"
}
notice() { jq -r 'select(.event=="notice") | .message' "$1" | grep -F "optimizer.ranks_per_node auto"; }
# same A B NAME: the two checkpoint directories hold bit-identical training state
same() {
  if "$CKPT" diff "$1" "$2" > "$TMP/diff" 2>&1; then ok "$3"; else bad "$3" "$(cat "$TMP/diff")"; fi
}
# spec FILE OPTIMIZER-FIELDS: a small job, 60 steps, one checkpoint at the end
spec() {
  {
    printf 'name: job\n'
    printf 'model: {type: mlp, hidden: [48]}\n'
    printf 'data: {type: synthetic_classification, n_train: 2048, n_eval: 512, input_dim: 24, num_classes: 4}\n'
    printf 'optimizer: {%s}\n' "$2"
    printf 'batch_size: 16\nsteps: 60\nlog_interval: 10\nseed: 3\n'
    printf 'checkpoint: {interval: 30, keep: 4}\n'
  } > "$1"
}

for opt in adam bin; do
  case $opt in
    adam) fields='type: onebit_adam, beta2: 0.99, freeze_step: 20, block_size: 64' ;;
    bin) fields='type: binsgdm, block_size: 64' ;;
  esac
  for rpn in 0 2 auto; do spec "$TMP/$opt-$rpn.yaml" "$fields, ranks_per_node: $rpn"; done
  run "$TMP/$opt-flat.jsonl" --spec "$TMP/$opt-0.yaml" --checkpoint-dir "$TMP/$opt-flat"; rc1=$?
  run "$TMP/$opt-hier.jsonl" --spec "$TMP/$opt-2.yaml" --checkpoint-dir "$TMP/$opt-hier"; rc2=$?
  FLAT=$TMP/$opt-flat/job/step-00000060
  HIER=$TMP/$opt-hier/job/step-00000060
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -z "$(notice "$TMP/$opt-flat.jsonl")" ] &&
     ! "$CKPT" diff "$FLAT" "$HIER" > /dev/null 2>&1; then
    ok "$opt: ranks_per_node 0 and 2 trained, end apart, no auto notice"
  else bad "$opt: explicit shapes" "rc=$rc1/$rc2 $(cat "$TMP/$opt-flat.jsonl.err" "$TMP/$opt-hier.jsonl.err")"; fi

  # 2 nodes of 2 ranks from the launcher: hierarchical, the bits of ranks_per_node 2.
  ONEBIT_RANKS_PER_NODE=2 run "$TMP/$opt-a2.jsonl" --spec "$TMP/$opt-auto.yaml" --checkpoint-dir "$TMP/$opt-a2"; rc=$?
  want="optimizer.ranks_per_node auto: 2 nodes of 2 ranks (ONEBIT_RANKS_PER_NODE): hierarchical, ranks_per_node 2"
  if [ $rc -eq 0 ] && [ "$(notice "$TMP/$opt-a2.jsonl")" = "$want" ] &&
     "$CKPT" info "$TMP/$opt-a2/job/step-00000060" | grep -q 'ranks a node    2'; then
    ok "$opt: auto with ONEBIT_RANKS_PER_NODE=2 runs hierarchically and says so"
  else bad "$opt: auto 2x2" "rc=$rc notice='$(notice "$TMP/$opt-a2.jsonl")' $(cat "$TMP/$opt-a2.jsonl.err")"; fi
  same "$HIER" "$TMP/$opt-a2/job/step-00000060" "$opt: auto on 2 nodes of 2 = ranks_per_node 2, bit for bit"

  # One node (what MPI sees on this machine): flat, the bits of ranks_per_node 0.
  (unset ONEBIT_RANKS_PER_NODE; run "$TMP/$opt-a1.jsonl" --spec "$TMP/$opt-auto.yaml" --checkpoint-dir "$TMP/$opt-a1"); rc=$?
  want="optimizer.ranks_per_node auto: all 4 ranks on one node (MPI_COMM_TYPE_SHARED): flat"
  if [ $rc -eq 0 ] && [ "$(notice "$TMP/$opt-a1.jsonl")" = "$want" ] &&
     ! "$CKPT" info "$TMP/$opt-a1/job/step-00000060" | grep -q 'ranks a node'; then
    ok "$opt: auto on one node runs flat and says why"
  else bad "$opt: auto on one node" "rc=$rc notice='$(notice "$TMP/$opt-a1.jsonl")' $(cat "$TMP/$opt-a1.jsonl.err")"; fi
  same "$FLAT" "$TMP/$opt-a1/job/step-00000060" "$opt: auto on one node = ranks_per_node 0, bit for bit"

  # Uneven nodes (3 ranks and 1): flat, with the reason.
  ONEBIT_RANKS_PER_NODE=3,1 run "$TMP/$opt-a31.jsonl" --spec "$TMP/$opt-auto.yaml" --checkpoint-dir "$TMP/$opt-a31"; rc=$?
  want="optimizer.ranks_per_node auto: nodes of uneven size: 3 ranks on the node of rank 0, 1 on the node of rank 3 (ONEBIT_RANKS_PER_NODE): flat"
  if [ $rc -eq 0 ] && [ "$(notice "$TMP/$opt-a31.jsonl")" = "$want" ]; then
    ok "$opt: auto on uneven nodes falls back to flat and says why"
  else bad "$opt: auto on uneven nodes" "rc=$rc notice='$(notice "$TMP/$opt-a31.jsonl")' $(cat "$TMP/$opt-a31.jsonl.err")"; fi
  same "$FLAT" "$TMP/$opt-a31/job/step-00000060" "$opt: auto on uneven nodes = ranks_per_node 0, bit for bit"
done

# An auto job stopped on 2 nodes of 2 (hierarchical) resumes where MPI sees one node (flat),
# and the reverse: the checkpoint's errors are carried across the shapes.
ONEBIT_FAULT_INJECT=TERM:30:0 ONEBIT_RANKS_PER_NODE=2 run "$TMP/hf1.jsonl" --spec "$TMP/adam-auto.yaml" --checkpoint-dir "$TMP/hf"; rc1=$?
(unset ONEBIT_RANKS_PER_NODE; run "$TMP/hf2.jsonl" --spec "$TMP/adam-auto.yaml" --checkpoint-dir "$TMP/hf" --resume); rc2=$?
(unset ONEBIT_RANKS_PER_NODE; ONEBIT_FAULT_INJECT=TERM:30:0 run "$TMP/fh1.jsonl" --spec "$TMP/adam-auto.yaml" --checkpoint-dir "$TMP/fh"); rc3=$?
ONEBIT_RANKS_PER_NODE=2 run "$TMP/fh2.jsonl" --spec "$TMP/adam-auto.yaml" --checkpoint-dir "$TMP/fh" --resume; rc4=$?
field() { jq -r "select(.event==\"$2\") | $3" "$1" | tail -1; }
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] &&
   [ "$(field "$TMP/hf2.jsonl" resume .step)" = 30 ] && [ "$(field "$TMP/fh2.jsonl" resume .step)" = 30 ] &&
   "$CKPT" info "$TMP/hf/job/step-00000030" | grep -q 'ranks a node    2' &&
   ! "$CKPT" info "$TMP/hf/job/step-00000060" | grep -q 'ranks a node' &&
   "$CKPT" info "$TMP/fh/job/step-00000060" | grep -q 'ranks a node    2'; then
  ok "an auto job resumed under another shape (hierarchical -> flat, flat -> hierarchical) finishes"
else bad "auto resumed across shapes" "rc=$rc1/$rc2/$rc3/$rc4 $(cat "$TMP/hf2.jsonl.err" "$TMP/fh2.jsonl.err")"; fi

# A malformed variable stops the job at setup, every rank the same way.
ONEBIT_RANKS_PER_NODE=two run "$TMP/bad.jsonl" --spec "$TMP/adam-auto.yaml" --checkpoint-dir "$TMP/bad"; rc=$?
if [ $rc -ne 0 ] && grep -q 'ONEBIT_RANKS_PER_NODE=two: expected the ranks a node' "$TMP/bad.jsonl.err"; then
  ok "ONEBIT_RANKS_PER_NODE=two: setup fails and names the variable (rc=$rc)"
else bad "malformed ONEBIT_RANKS_PER_NODE" "rc=$rc $(cat "$TMP/bad.jsonl.err")"; fi
# The variable changes nothing for an explicit shape.
ONEBIT_RANKS_PER_NODE=3,1 run "$TMP/ex.jsonl" --spec "$TMP/adam-2.yaml" --checkpoint-dir "$TMP/ex"; rc=$?
if [ $rc -eq 0 ]; then same "$TMP/adam-hier/job/step-00000060" "$TMP/ex/job/step-00000060" \
  "ranks_per_node 2 ignores ONEBIT_RANKS_PER_NODE"
else bad "explicit shape with the variable" "rc=$rc $(cat "$TMP/ex.jsonl.err")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
