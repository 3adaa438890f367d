#!/usr/bin/env bash
# The Python front end's parity test on NP ranks: parity_record.py trains with
# onebit.torch.OnebitAdam (or Adam) and records what the engine was given; test_py_replay runs
# the engine's optimizer on the same gradients and must end with the same bits.
#   run_parity.sh PYTHON REPLAY_BIN PYTHONPATH NP KIND [STEPS]
set -euo pipefail
py=$1 replay=$2 pypath=$3 np=$4 kind=$5 steps=${6:-300}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun -np "$np" --oversubscribe -x PYTHONPATH="$pypath" -x ONEBIT_PROGRESS=off \
  "$py" "$here/parity_record.py" "$work" --steps "$steps" --kind "$kind"
mpirun -np "$np" --oversubscribe "$replay" "$work" "$kind" "$steps"
