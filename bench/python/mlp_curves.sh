#!/usr/bin/env bash
# End to end, the same MLP trained twice on NP ranks from the same initial parameters and the
# same batches: onebit-worker's built-in model, and torch's nn.Linear layers
# (tests/python/mlp_curves.py) stepped by onebit.torch.OnebitAdam, which is the engine's
# optimizer. The engine also runs with ONEBIT_GEMM=blas (OpenBLAS's sgemm in place of its
# AVX-512 kernel): how far two BLAS libraries take the same job apart is the yardstick for how
# far torch's run may be from the engine's. Writes results_mlp_curves.tsv (the loss of every
# step, each run) and the tables of RESULTS-mlp-curves.md beside this script; the runs' own
# logs go to LOGDIR.
#   bench/python/mlp_curves.sh [BUILD] [SPEC] [NPS] [SEEDS] [LOGDIR]
#   (defaults: build, bench/python/mlp_curves.json, "1 4", "1 2 3 4 5", a new temporary directory;
#   each seed replaces the spec's: other parameters, other data, the same model)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
spec=${2:-$here/mlp_curves.json} nps=${3:-1 4} seeds=${4:-1 2 3 4 5} logs=${5:-$(mktemp -d)}
py=${PYTHON:-/usr/bin/python3}
for bin in onebit-worker py_engine_export; do
  [ -x "$build/bin/$bin" ] || { echo "mlp_curves.sh: no $build/bin/$bin: build the targets" \
    "onebit-worker onebit_py py_engine_export" >&2; exit 2; }
done
export PYTHONPATH=$build/python ONEBIT_PROGRESS=off OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mpi=(mpirun --oversubscribe -x PYTHONPATH -x ONEBIT_PROGRESS -x OPENBLAS_NUM_THREADS
     -x OMP_NUM_THREADS)
runs=()
for np in $nps; do
  for seed in $seeds; do
    dir=$logs/np$np-seed$seed
    mkdir -p "$dir/export"
    "$py" -c 'import json, sys; s = json.load(open(sys.argv[1])); s["seed"] = int(sys.argv[2]);
json.dump(s, open(sys.argv[3], "w"))' "$spec" "$seed" "$dir/spec.json"
    "$build/bin/py_engine_export" "$dir/spec.json" "$np" "$dir/export"
    "${mpi[@]}" -np "$np" "$build/bin/onebit-worker" --spec "$dir/spec.json" >"$dir/engine.jsonl"
    "${mpi[@]}" -np "$np" -x ONEBIT_GEMM=blas "$build/bin/onebit-worker" --spec "$dir/spec.json" \
      >"$dir/engine-blas.jsonl"
    "${mpi[@]}" -np "$np" "$py" "$root/tests/python/mlp_curves.py" "$dir/export" "$dir/torch.tsv"
    runs+=("$np:$seed:$dir/engine.jsonl:$dir/engine-blas.jsonl:$dir/torch.tsv")
  done
done
"$py" "$here/mlp_curves_report.py" "$here/results_mlp_curves.tsv" "$here/RESULTS-mlp-curves.md" \
  "${runs[@]}"
echo "logs: $logs"
