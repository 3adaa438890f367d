#!/usr/bin/env bash
# examples/pytorch/gpt.py as bench/peers/program.sh runs it, on 2 ranks over shared memory with
# a small model: PyTorch DDP over gloo (fp32 and the fp16 hook) and OnebitAdam with --option,
# each stopped by --target-loss at its first evaluation at or below the target; the closing
# lines the benchmark reads (training time, target reached) and DDP's counted bytes; bad
# --option values refused before any step; a DDP run ended by SIGTERM at once.
#   test_gpt_example.sh PYTHON PYTHONPATH
set -u
py=$1 pypath=$2
here=$(cd "$(dirname "$0")" && pwd)
gpt=$here/../../examples/pytorch/gpt.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "[ PASSED ] $1"; else
  failed=$((failed + 1)); echo "[ FAILED ] $1"; fi; }
run() { # NAME ARGS...: 2 ranks, 40 steps at most, an evaluation every 10
  local name=$1
  shift
  MASTER_PORT=$((29600 + RANDOM % 300)) mpirun -np 2 --oversubscribe -x PYTHONPATH="$pypath" \
    -x ONEBIT_PROGRESS=json -x MASTER_PORT "$py" "$gpt" --layers 1 --d-model 32 --heads 2 \
    --context 16 --batch-size 4 --eval-batches 4 --steps 40 --eval-interval 10 "$@" \
    > "$work/$name.log" 2> "$work/$name.err"
}
summary() { # NAME FIELD: the summary line's field
  "$py" -c 'import json, sys
print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{\"event\":\"summary\"")][-1][sys.argv[2]])' \
    "$work/$1.log" "$2"
}

for opt in ddp-fp32 ddp-fp16; do
  run "$opt" --optimizer "$opt" --target-loss 100
  check "$opt: stopped at the first evaluation (step 10)" \
    "grep -q '^target eval loss 100.000000 reached at step 10 after [0-9.]* s of training' $work/$opt.log"
  check "$opt: the training time of 10 steps" \
    "grep -q '^training time [0-9.]* s over 10 steps' $work/$opt.log"
done
# DDP's ring allreduce: 2 (n-1)/n of the gradient from each rank a step, 4 or 2 bytes a value.
n=$(summary ddp-fp32 num_params)
check "ddp-fp32 counts 10 steps of fp32 allreduce ($n parameters)" \
  "[ \"\$(summary ddp-fp32 bytes_sent)\" = $((10 * 4 * n)) ]"
check "ddp-fp16 counts half of that" "[ \"\$(summary ddp-fp16 bytes_sent)\" = $((10 * 2 * n)) ]"

run unreached --optimizer onebit --freeze-step 5 --option refresh_steps=8 \
  --option 'gradient_exchange="fp8"' --target-loss 0.01
check "onebit with --option: runs its 40 steps, the target not reached" \
  "grep -q '^target eval loss 0.010000 not reached in 40 steps' $work/unreached.log"
check "onebit with --option: froze at step 5 (the first freeze line; refreshes freeze again)" \
  "grep -m1 '\"event\":\"freeze\"' $work/unreached.log | grep -q '\"step\":5,'"

run badjson --optimizer onebit --option refresh_steps=x
rc=$?
check "an --option value that is not JSON is refused" \
  "[ $rc -ne 0 ] && grep -q 'the value is not JSON' $work/badjson.err"
run ddpopt --optimizer ddp-fp32 --option refresh_steps=8
check "--option with a ddp optimizer is refused" \
  "grep -q 'only for the engine' $work/ddpopt.err && [ ! -s $work/ddpopt.log ]"
# torch's own runs keep SIGTERM's default (onebit.init(stop_signals=False)): they end at once, as
# any PyTorch program, instead of waiting for an engine optimizer that would never stop them.
MASTER_PORT=$((29600 + RANDOM % 300)) mpirun -np 2 --oversubscribe -x PYTHONPATH="$pypath" \
  -x ONEBIT_PROGRESS=json -x MASTER_PORT "$py" "$gpt" --layers 1 --d-model 32 --heads 2 \
  --context 16 --batch-size 4 --steps 1000000 --eval-interval 1000000 --optimizer ddp-fp32 \
  > "$work/term.log" 2> "$work/term.err" &
mp=$!
started=0
for _ in $(seq 600); do grep -q '"event":"step"' "$work/term.log" && { started=1; break; }; sleep 0.1; done
pkill -TERM -f "^$py $gpt"
for _ in $(seq 100); do kill -0 "$mp" 2>/dev/null || break; sleep 0.1; done
check "ddp-fp32: SIGTERM to its running ranks ends the run within 10 s" \
  "[ $started = 1 ] && ! kill -0 $mp 2>/dev/null"
kill -KILL "$mp" 2>/dev/null
pkill -KILL -f "^$py $gpt"
wait "$mp" 2>/dev/null
[ "$failed" -eq 0 ] || tail -n 30 "$work"/*.err
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
