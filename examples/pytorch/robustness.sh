#!/usr/bin/env bash
# The robustness suite's stability group (bench/robustness/suite.py, stability_cases) through the
# Python front end: three Fashion-MNIST MLPs x seeds 3-6, OnebitAdam (the engine's defaults) and
# the engine's Adam, 4 ranks, one run after the other. Settings as suite.py's mlp() sets them:
# beta2 0.99, no bias correction, lr 1e-3 with 100 warmup steps then x0.99 every 50 steps,
# eval at the end on the whole test set.
#
#   bash examples/pytorch/robustness.sh [OUT.tsv]     (default examples/pytorch/robustness.tsv)
#
# Runs already in OUT.tsv are skipped, so an interrupted measurement carries on. DEADLINE
# (seconds since the epoch): no run starts after it. Logs go to $LOGS (default
# var/pytorch-robustness). A run that raises onebit.Diverged or exits non-zero is recorded as
# diverged.
set -u
cd "$(dirname "$0")/../.."
out=${1:-examples/pytorch/robustness.tsv}
logs=${LOGS:-var/pytorch-robustness}
mkdir -p "$logs"
export PYTHONPATH=${PYTHONPATH:-$PWD/build/python} OPENBLAS_NUM_THREADS=1 ONEBIT_PROGRESS=json
python=${PYTHON:-/usr/bin/python3}

# name|steps|batch|hidden|activation
cases="mlp1024-relu-b32|1300|32|1024,512|relu
mlp256-gelu|1500|64|256,128|gelu
mlp512-tanh|1500|64|512,256|tanh"

[ -s "$out" ] || printf 'case\toptimizer\tseed\tstatus\trc\tsteps\teval_loss\teval_accuracy\tfreeze_step\tbytes_sent\twall_s\n' >"$out"
for seed in 3 4 5 6; do
    while IFS='|' read -r name steps batch hidden act; do
        for opt in onebit adam; do
            if grep -q "^$name	$opt	$seed	" "$out"; then
                continue
            fi
            if [ -n "${DEADLINE:-}" ] && [ "$(date +%s)" -ge "$DEADLINE" ]; then
                echo "deadline reached: not starting $name-s$seed $opt" >&2
                exit 0
            fi
            log=$logs/$name-s$seed-$opt.log
            t0=$(date +%s)
            mpirun --oversubscribe -np 4 -x PYTHONPATH -x OPENBLAS_NUM_THREADS -x ONEBIT_PROGRESS \
                "$python" examples/pytorch/fmnist.py --optimizer "$opt" --seed "$seed" \
                --steps "$steps" --batch-size "$batch" --hidden "$hidden" --activation "$act" \
                --lr 1e-3 --beta2 0.99 --schedule step --warmup-steps 100 --no-bias-correction \
                --eval-interval "$steps" </dev/null >"$log" 2>&1  # mpirun would eat $cases
            rc=$?
            wall=$(($(date +%s) - t0))
            "$python" - "$log" "$rc" "$name" "$opt" "$seed" "$wall" >>"$out" <<'EOF'
import json, sys
log, rc, name, opt, seed, wall = sys.argv[1:]
summary = None
for line in open(log, errors="replace"):
    if line.startswith('{"event":"summary"'):
        summary = json.loads(line)
diverged = rc != "0" or summary is None or "Diverged" in open(log, errors="replace").read()
s = summary or {}
get = lambda k: "" if s.get(k) is None else str(s[k])
print("\t".join([name, opt, seed, "diverged" if diverged else "finished", rc, get("steps"),
                 get("eval_loss"), get("eval_accuracy"), get("freeze_step"), get("bytes_sent"),
                 wall]))
EOF
            tail -n 1 "$out"
        done
    done <<<"$cases"
done
