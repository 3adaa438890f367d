#!/usr/bin/env bash
# Everything the GPU path needs checked on a machine with an NVIDIA GPU, in one run: builds with
# the GPU's architecture, runs the GPU tests (kernels against the CPU, the NCCL communicator,
# the optimizer and the compressed allreduce on NCCL against MPI, the GPU models against the
# CPU models), the kernel benchmark, and a 1-rank NCCL training job with the step-time split,
# then resumes that job's checkpoint on the CPU to show the files are the same.
# Environment: ARCH (default 90), BUILD_DIR (default build-gpu), OUT (a directory for the
# logs, default var/gpu-check).
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${ARCH:-90}
BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT=${OUT:-var/gpu-check}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

nvidia-smi -L | tee "$OUT/gpu.txt"
cmake -S . -B "$BUILD_DIR" -DONEBIT_CUDA=ON -DONEBIT_CUDA_ARCH="$ARCH" -DONEBIT_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/configure.log"
cmake --build "$BUILD_DIR" -j "$(nproc)" >"$OUT/build.log"

echo "== GPU tests"
ctest --test-dir "$BUILD_DIR" -R "cuda|nccl" --output-on-failure 2>&1 | tee "$OUT/tests.log"

echo "== kernel benchmark"
"$BUILD_DIR/bin/bench_compress_cuda" --n $((1 << 26)) 2>&1 | tee "$OUT/bench.log"

echo "== 1-rank NCCL job"
rm -rf var/checkpoints/gpu-check
spec="$OUT/job.yaml"
sed -e 's/^name: .*/name: gpu-check/' -e 's/^steps: .*/steps: 1000/' \
  examples/fmnist-mlp-onebit-cuda.yaml >"$spec"
mpirun -np 1 "$BUILD_DIR/bin/onebit-worker" --spec "$spec" --format text --profile \
  2>&1 | tee "$OUT/job.log"

echo "== the GPU job's checkpoint, resumed on the CPU for 100 more steps"
sed -e 's/^device: cuda/device: cpu/' -e 's/^steps: .*/steps: 1100/' "$spec" >"$OUT/job-cpu.yaml"
mpirun -np 1 "$BUILD_DIR/bin/onebit-worker" --spec "$OUT/job-cpu.yaml" --job-id gpu-check \
  --resume --format text 2>&1 | tee "$OUT/resume-cpu.log"
echo "logs in $OUT"
