#!/usr/bin/env bash
# Configures, builds (warnings are errors) and runs the whole test suite with ctest.
# Also checks that a CPU-only configuration builds when the CUDA toolkit is present.
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

cmake -S . -B "$BUILD_DIR" -DONEBIT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "$JOBS"

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "== CPU-only build check (ONEBIT_CUDA=OFF)"
  cmake -S . -B "$BUILD_DIR-cpu" -DONEBIT_WERROR=ON -DONEBIT_CUDA=OFF >/dev/null
  cmake --build "$BUILD_DIR-cpu" -j "$JOBS" >/dev/null
  echo "== CPU-only build: ok"
fi

ctest --test-dir "$BUILD_DIR" --output-on-failure -j 1
