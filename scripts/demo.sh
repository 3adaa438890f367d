#!/usr/bin/env bash
# The main job, end to end on CPU: builds onebit and trains examples/fmnist-mlp-onebit.yaml
# (Fashion-MNIST MLP, 1-bit Adam) on 4 MPI ranks, printing progress as it goes.
# Environment: RANKS (default 4), SPEC (default examples/fmnist-mlp-onebit.yaml),
# FORMAT (text or json, default text), BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${RANKS:-4}
SPEC=${SPEC:-examples/fmnist-mlp-onebit.yaml}
FORMAT=${FORMAT:-text}
BUILD_DIR=${BUILD_DIR:-build}

cmake -S . -B "$BUILD_DIR" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target onebit-worker

# Open MPI: allow root (containers), more ranks than cores, shared memory without the
# cross-memory-attach mechanism containers forbid, and yield instead of spinning when idle.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1

echo "== mpirun -np $RANKS onebit-worker --spec $SPEC"
exec mpirun --oversubscribe -np "$RANKS" "$BUILD_DIR/bin/onebit-worker" --spec "$SPEC" --format "$FORMAT"
