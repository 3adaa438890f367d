#!/usr/bin/env bash
# Everything the GPU path needs checked on a machine with an NVIDIA GPU, in one run: builds with
# the GPU's architecture, runs the GPU tests (kernels against the CPU, the NCCL communicator,
# the optimizer and the compressed allreduce on NCCL against MPI, the GPU models against the
# CPU models), the kernel benchmark, a 1-rank NCCL training job with the step-time split, the
# same job again (a GPU run must give the same bits), the job killed before and after its
# freeze and resumed (the same bits as uninterrupted), and the GPU job's checkpoint resumed on
# the CPU. Prints a summary and exits 1 if any check failed.
# Environment: ARCH (default 90), BUILD_DIR (default build-gpu), OUT (a directory for the
# logs, default var/gpu-check). docs/GPU.md has the results of a run on an H100.
set -uo pipefail
cd "$(dirname "$0")/.."
ARCH=${ARCH:-90}
BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT=${OUT:-var/gpu-check}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
failed=()
check() { # NAME COMMAND...: runs it, logs it, remembers a failure
  local name=$1; shift
  echo "== $name"
  if "$@"; then echo "-- $name: ok"; else echo "-- $name: FAILED"; failed+=("$name"); fi
}

nvidia-smi -L | tee "$OUT/gpu.txt" || exit 1
cmake -S . -B "$BUILD_DIR" -DONEBIT_CUDA=ON -DONEBIT_CUDA_ARCH="$ARCH" -DONEBIT_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/configure.log" || exit 1
cmake --build "$BUILD_DIR" -j "$(nproc)" >"$OUT/build.log" || { tail -20 "$OUT/build.log"; exit 1; }
W=$BUILD_DIR/bin/onebit-worker
CKPT=$BUILD_DIR/bin/onebit-ckpt

# With one GPU, test_car_nccl_np2 is skipped: NCCL allows one rank per GPU.
check "GPU tests" ctest --test-dir "$BUILD_DIR" -R "cuda|nccl" --output-on-failure
check "kernel benchmark" "$BUILD_DIR/bin/bench_compress_cuda" --n $((1 << 26))

# The example on the GPU, 1000 steps, a checkpoint every 100 (eval every 250).
C=$OUT/checkpoints
rm -rf "$C"
spec=$OUT/job.yaml
sed -e 's/^name: .*/name: gpu-check/' -e 's/^steps: .*/steps: 1000/' \
  -e '0,/interval: 500/s//interval: 250/' -e 's/interval: 500/interval: 100/' \
  -e 's/keep: 2/keep: 20/' examples/fmnist-mlp-onebit-cuda.yaml >"$spec"
job() { mpirun -np 1 "$W" --spec "$spec" --checkpoint-dir "$C" --format text "$@"; }
same_bits() { "$CKPT" diff "$C/run1/step-00001000" "$C/$1/step-00001000"; }
again() { job --job-id run2 && same_bits run2; }
kill_resume() { # STEP: killed after it, resumed
  ONEBIT_FAULT_INJECT=KILL:$1:0 job --job-id "kill$1"
  job --job-id "kill$1" --resume && same_bits "kill$1"
}
check "1-rank NCCL job" job --job-id run1 --profile
check "the same job again: the same bits" again
for step in 130 620; do # before the freeze (137) and after it
  check "killed at step $step and resumed: the same bits" kill_resume "$step"
done

sed -e 's/^device: cuda/device: cpu/' -e 's/^steps: .*/steps: 1100/' "$spec" >"$OUT/job-cpu.yaml"
check "the GPU checkpoint resumed on the CPU for 100 steps" \
  mpirun -np 1 "$W" --spec "$OUT/job-cpu.yaml" --checkpoint-dir "$C" --job-id run1 --resume --format text

echo "logs in $OUT"
if [ ${#failed[@]} -gt 0 ]; then printf 'FAILED: %s\n' "${failed[@]}"; exit 1; fi
echo "all GPU checks passed"
