#!/usr/bin/env bash
# Everything the GPU path needs checked on a machine with an NVIDIA GPU, in one run: builds with
# the GPU's architecture, runs the GPU tests (kernels against the CPU, the NCCL communicator,
# the optimizer and the compressed allreduce on NCCL against MPI, the GPU models against the
# CPU models), the kernel benchmark, a 1-rank NCCL training job with the step-time split, the
# same job again (a GPU run must give the same bits), the job killed before and after its
# freeze and resumed (the same bits as uninterrupted), and the GPU job's checkpoint resumed on
# the CPU; then the PyTorch front end on the GPU (tests/python: OnebitAdam on NCCL against the
# engine's CPU optimizer, a GPU checkpoint loaded on the CPU, the optimizer's share of a bf16
# GPT step). Prints a summary and exits 1 if any check failed.
# Environment: ARCH (default 90), BUILD_DIR (default build-gpu), OUT (a directory for the
# logs, default var/gpu-check). docs/GPU.md has the results of a run on an H100.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
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
if [ -n "${BUNDLE:-}" ]; then
  # shellcheck source=/dev/null
  source "$BUNDLE/env.sh" || exit 1
  BIN=$BUNDLE/bin
  gpu_tests() { # what ctest -R "cuda|nccl" runs, from the bundle
    local t rc=0
    for t in test_compress_cuda test_model_cuda test_optim_cuda; do
      echo "-- $t"; "$BIN/$t" || rc=1
    done
    echo "-- test_car_nccl (1 rank)"; mpirun -np 1 "$BIN/test_car_nccl" || rc=1
    return $rc
  }
else
  cmake -S . -B "$BUILD_DIR" -DONEBIT_CUDA=ON -DONEBIT_CUDA_ARCH="$ARCH" -DONEBIT_WERROR=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/configure.log" || exit 1
  cmake --build "$BUILD_DIR" -j "$(nproc)" >"$OUT/build.log" || { tail -20 "$OUT/build.log"; exit 1; }
  BIN=$BUILD_DIR/bin
  # With one GPU, test_car_nccl_np2 is skipped: NCCL allows one rank per GPU.
  gpu_tests() { ctest --test-dir "$BUILD_DIR" -R "cuda|nccl" --output-on-failure; }
fi
W=$BIN/onebit-worker
CKPT=$BIN/onebit-ckpt

check "GPU tests" gpu_tests
check "kernel benchmark" "$BIN/bench_compress_cuda" --n $((1 << 26))

# The example on the GPU, 1000 steps, a checkpoint every 100 (eval every 250), written
# synchronously: a GPU step takes under a millisecond, so an asynchronous write is still in
# flight when the kill comes, and the resume would start from an older checkpoint or step 0.
C=$OUT/checkpoints
rm -rf "$C"
spec=$OUT/job.yaml
sed -e 's/^name: .*/name: gpu-check/' -e 's/^steps: .*/steps: 1000/' \
  -e '0,/interval: 500/s//interval: 250/' -e 's/interval: 500/interval: 100/' \
  -e 's/keep: 2/keep: 20/' -e 's/async: true/async: false/' examples/fmnist-mlp-onebit-cuda.yaml >"$spec"
if [ -n "${DATA:-}" ]; then
  sed -i "s|^  type: fashion_mnist|  type: idx\n  path: $DATA|" "$spec"
fi
run_spec() { # SPEC ARGS...: one rank of the worker on it
  local f=$1; shift
  mpirun -np 1 "$W" --spec "$f" --checkpoint-dir "$C" --format text "$@"
}
job() { run_spec "$spec" "$@"; }
same_bits() { "$CKPT" diff "$C/run1/step-00001000" "$C/$1/step-00001000"; }
again() { job --job-id run2 && same_bits run2; }
resumed() { # LOG STEP: the resume continued after that step's checkpoint
  grep -q "resume: continuing after step $2 " "$1" || { echo "did not resume from step $2"; return 1; }
}
kill_resume() { # STEP FROM: killed after STEP, resumed from FROM's checkpoint
  ONEBIT_FAULT_INJECT=KILL:$1:0 job --job-id "kill$1"
  job --job-id "kill$1" --resume | tee "$OUT/kill$1.log" && resumed "$OUT/kill$1.log" "$2" &&
    same_bits "kill$1"
}
check "1-rank NCCL job" job --job-id run1 --profile
check "the same job again: the same bits" again
check "killed at step 130, before the freeze (137), resumed: the same bits" kill_resume 130 100
check "killed at step 620, after the freeze, resumed: the same bits" kill_resume 620 600

# Freeze at 16, refreshes of 16 steps (33-48, 97-112, ...), fp16 (then fp8) gradients: killed
# at step 105, inside the second refresh, resumed from step 100's checkpoint.
refresh_resume() { # CODE: fp16 or fp8
  local x=$1 rspec=$OUT/job-refresh-$1.yaml
  sed -e "s/^name: .*/name: gpu-check-refresh-$x/" -e 's/^steps: .*/steps: 300/' \
    -e "s/freeze_step: auto/freeze_step: 16\n  refresh_steps: 16\n  gradient_exchange: $x/" \
    "$spec" >"$rspec"
  run_spec "$rspec" --job-id "refresh1-$x" | tee "$OUT/refresh1-$x.log" &&
    grep -q "variance refreshed" "$OUT/refresh1-$x.log" &&
    { ONEBIT_FAULT_INJECT=KILL:105:0 run_spec "$rspec" --job-id "refresh2-$x"
      run_spec "$rspec" --job-id "refresh2-$x" --resume; } |
    tee "$OUT/refresh2-$x.log" && resumed "$OUT/refresh2-$x.log" 100 &&
    "$CKPT" diff "$C/refresh1-$x/step-00000300" "$C/refresh2-$x/step-00000300"
}
check "refreshes and fp16 gradients, killed inside a refresh and resumed: the same bits" \
  refresh_resume fp16
check "refreshes and fp8 gradients, killed inside a refresh and resumed: the same bits" \
  refresh_resume fp8

sed -e 's/^device: cuda/device: cpu/' -e 's/^steps: .*/steps: 1100/' "$spec" >"$OUT/job-cpu.yaml"
check "the GPU checkpoint resumed on the CPU for 100 steps" \
  run_spec "$OUT/job-cpu.yaml" --job-id run1 --resume

# The PyTorch front end (engine/python), with the first python3 here whose torch has CUDA
# (PYTHON overrides): OnebitAdam on a CUDA model (NCCL, the engine's kernels on torch's stream)
# must end bit for bit where the engine's CPU optimizer ends on the same gradients; a checkpoint
# it writes on the GPU loads on the CPU with the same bytes and trains on; and the optimizer's
# share of a bf16 GPT step against torch's fused Adam (a benchmark: it prints, it does not fail).
if [ -n "${BUNDLE:-}" ]; then export PYTHONPATH=$BUNDLE/python; else export PYTHONPATH=$PWD/$BUILD_DIR/python; fi
export ONEBIT_PROGRESS=off
PY=
for p in ${PYTHON:-} python3 python3.12 /usr/local/bin/python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    PY=$p; break
  fi
done
if [ -n "$PY" ]; then
  echo "== python: $("$PY" -c 'import sys, torch; print(sys.executable, sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)')"
  pyrun() { mpirun -np 1 -x PYTHONPATH -x ONEBIT_PROGRESS "$PY" "$@"; }
  py_parity() {
    rm -rf "$OUT/py-parity"
    pyrun tests/python/parity_record.py "$OUT/py-parity" --device cuda &&
      mpirun -np 1 "$BIN/test_py_replay" "$OUT/py-parity" onebit_adam 300
  }
  py_gpu_to_cpu() {
    rm -rf "$OUT/py-ckpt"
    pyrun tests/python/gpu_to_cpu.py "$OUT/py-ckpt" save &&
      pyrun tests/python/gpu_to_cpu.py "$OUT/py-ckpt" load
  }
  check "python: OnebitAdam on CUDA equals the engine's CPU optimizer on the same gradients" py_parity
  check "python: a checkpoint written on the GPU loads on the CPU (the same bytes) and trains on" \
    py_gpu_to_cpu
  check "python: the optimizer's share of a bf16 GPT step" pyrun bench/python/optim_share.py
else
  echo "== python: no python3 with a CUDA torch here: the front end's GPU checks did not run"
  failed+=("python: no torch with CUDA")
fi

echo "logs in $OUT"
if [ ${#failed[@]} -gt 0 ]; then printf 'FAILED: %s\n' "${failed[@]}"; exit 1; fi
echo "all GPU checks passed"
