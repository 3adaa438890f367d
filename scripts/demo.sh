#!/usr/bin/env bash
# The main job, end to end on CPU: builds onebit (and installs its Python package), starts the coordinator (onebitd), submits
# examples/fmnist-mlp-onebit.yaml (Fashion-MNIST MLP, 1-bit Adam) on 4 MPI ranks with onebitctl,
# follows it to the end with live progress, and prints the final summary. The coordinator is
# stopped afterwards; its state (job store, logs, checkpoints) stays under $STATE_DIR.
# Environment: RANKS (default 4), SPEC (default examples/fmnist-mlp-onebit.yaml),
# BUILD_DIR (default build), STATE_DIR (default var/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${RANKS:-4}
SPEC=${SPEC:-examples/fmnist-mlp-onebit.yaml}
BUILD_DIR=${BUILD_DIR:-build}
STATE_DIR=${STATE_DIR:-var/demo}

cmake -S . -B "$BUILD_DIR" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target onebit-worker onebitd onebitctl
# The PyTorch front end: `import onebit` in the system's python3 (engine/python/README.md).
bash scripts/install-python.sh "$BUILD_DIR"

# Open MPI (the coordinator launches the workers with mpirun): allow root (containers), shared
# memory without the cross-memory-attach mechanism containers forbid, yield when idle.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1

mkdir -p "$STATE_DIR"
rm -f "$STATE_DIR/ready"
echo "== onebitd --state-dir $STATE_DIR (gRPC and REST on free ports)"
"$BUILD_DIR/bin/onebitd" --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --state-dir "$STATE_DIR" \
  --slots "$RANKS" --ready-file "$STATE_DIR/ready" >> "$STATE_DIR/onebitd.log" 2>&1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 200); do [ -s "$STATE_DIR/ready" ] && break; sleep 0.05; done
[ -s "$STATE_DIR/ready" ] || { echo "onebitd did not start; see $STATE_DIR/onebitd.log" >&2; exit 1; }
export ONEBIT_SERVER=127.0.0.1:$(sed -n 's/^grpc=//p' "$STATE_DIR/ready")
export ONEBIT_STATE_DIR=$STATE_DIR # onebitctl reads the API token onebitd made there
echo "   serving gRPC on $ONEBIT_SERVER, REST on 127.0.0.1:$(sed -n 's/^rest=//p' "$STATE_DIR/ready")"

echo "== onebitctl submit -f $SPEC --np $RANKS --watch"
"$BUILD_DIR/bin/onebitctl" submit -f "$SPEC" --np "$RANKS" --watch
