#!/usr/bin/env bash
# OnebitAdam against the engine's Adam on gpt.py: NP ranks, the same steps, several seeds, one run
# at a time. Prints a TSV (seed, optimizer, eval loss, bytes sent by rank 0, freeze step, wall
# seconds) from each run's summary line; the runs' own logs go to LOGDIR.
#   examples/pytorch/measure_gpt.sh [STEPS] [SEEDS] [NP] [LOGDIR] > results_gpt.tsv
#   (defaults: 1000 "1 2 3" 4 a new temporary directory; extra gpt.py flags in GPT_FLAGS)
set -euo pipefail
steps=${1:-1000} seeds=${2:-1 2 3} np=${3:-4} logs=${4:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$logs"
export ONEBIT_PROGRESS=json OPENBLAS_NUM_THREADS=1
printf 'seed\toptimizer\teval_loss\tbytes_sent\tfreeze_step\twall_s\n'
for seed in $seeds; do
  for opt in onebit adam; do
    log=$logs/gpt-$opt-seed$seed.log
    # shellcheck disable=SC2086
    mpirun --oversubscribe -np "$np" -x PYTHONPATH -x ONEBIT_PROGRESS -x OPENBLAS_NUM_THREADS \
      "$py" "$here/gpt.py" --steps "$steps" --seed "$seed" --optimizer "$opt" \
      --eval-interval "$steps" ${GPT_FLAGS:-} >"$log" 2>&1
    # The last summary line: {"event":"summary",...,"eval_loss":X,"bytes_sent":N,...}
    "$py" - "$log" "$seed" "$opt" <<'EOF'
import json, sys
log, seed, opt = sys.argv[1:]
s = [json.loads(l) for l in open(log) if l.startswith('{"event":"summary"')][-1]
print("%s\t%s\t%.6f\t%d\t%s\t%.1f" % (seed, opt, s["eval_loss"], s["bytes_sent"],
                                       s["freeze_step"] if s["freeze_step"] is not None else "-",
                                       s["wall_seconds"]))
EOF
  done
done
