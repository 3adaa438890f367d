#!/usr/bin/env bash
# torch's MLP against onebit-worker's on NP ranks, end to end (test_py_mlp_curves_np*): the
# engine's initial parameters and batches exported by py_engine_export, the worker trains the
# spec, tests/python/mlp_curves.py trains torch's nn.Linear layers with onebit.torch.OnebitAdam
# from the same start and checks the loss curves against the worker's (see its --check).
#   run_mlp_curves.sh PYTHON EXPORT_BIN WORKER_BIN PYTHONPATH NP [SPEC]
set -euo pipefail
py=$1 export_bin=$2 worker=$3 pypath=$4 np=$5
here=$(cd "$(dirname "$0")" && pwd)
spec=${6:-$here/mlp_curves_small.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/export"
"$export_bin" "$spec" "$np" "$work/export"
mpirun -np "$np" --oversubscribe "$worker" --spec "$spec" >"$work/engine.jsonl"
mpirun -np "$np" --oversubscribe -x PYTHONPATH="$pypath" -x ONEBIT_PROGRESS=off \
  "$py" "$here/mlp_curves.py" "$work/export" "$work/torch.tsv" --check "$work/engine.jsonl"
