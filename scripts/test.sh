#!/usr/bin/env bash
# Configures, builds (warnings are errors) and runs the whole test suite with ctest, the
# numerics tests again on the matrix kernels a CPU without AVX-512 runs (ONEBIT_BLAS_CORES=0
# skips that stage), every test again under AddressSanitizer + UndefinedBehaviorSanitizer
# (ONEBIT_SANITIZERS=0 skips), the concurrency tests under ThreadSanitizer (ONEBIT_TSAN=0 skips)
# and each fuzz target briefly.
# Also checks that a CPU-only configuration builds when the CUDA toolkit is present (the sanitizer
# build is that check; with ONEBIT_SANITIZERS=0, a build of its own).
# Environment: BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

cmake -S . -B "$BUILD_DIR" -DONEBIT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "$JOBS"
# The Python package of this build for the system's python3 (test_py_install checks it).
bash scripts/install-python.sh "$BUILD_DIR"

# The sanitizer builds below are CPU-only builds with warnings as errors: they are this check
# when they run.
if [ "${ONEBIT_SANITIZERS:-1}" = 0 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  echo "== CPU-only build check (ONEBIT_CUDA=OFF)"
  cmake -S . -B "$BUILD_DIR-cpu" -DONEBIT_WERROR=ON -DONEBIT_CUDA=OFF >/dev/null
  cmake --build "$BUILD_DIR-cpu" -j "$JOBS" >/dev/null
  echo "== CPU-only build: ok"
fi

ctest --test-dir "$BUILD_DIR" --output-on-failure -j 1

# The other matrix kernels: the models' products run the engine's AVX-512 kernel where the CPU
# has AVX-512 and OpenBLAS elsewhere (engine/src/gemm.h), whose kernels OpenBLAS picks for the
# CPU; each rounds differently, and a training run takes another path on each. The tests whose
# outcomes pass through those products (the models, the optimizer's overlap, training, resume,
# stability, warm start, compression health) run again with ONEBIT_GEMM=blas and OpenBLAS told
# to run the kernels of each core in ONEBIT_BLAS_CORES (default Haswell: the AVX2 kernels it
# runs on Intel Haswell and later and AMD Zen 1-3 without AVX-512; `native`: its own choice for
# this CPU; Sandybridge and SkylakeX also work where the CPU has AVX or AVX-512), so a CPU
# without AVX-512 is covered on every run. OPENBLAS_CORETYPE needs an OpenBLAS built with
# DYNAMIC_ARCH, as Debian's is. About 2.6 minutes a core on 2 cores. ONEBIT_BLAS_CORES=0 skips.
BLAS_TESTS='^test_(model_grad|model_math|adam_overlap_.*|worker|resume|stability|warm_start|health)$'
BLAS_CORES=${ONEBIT_BLAS_CORES:-Haswell}
if [ "$BLAS_CORES" != 0 ]; then
  for core in $BLAS_CORES; do
    need=
    case "$core" in
      Haswell | Zen) need=avx2 ;;
      SkylakeX | Cooperlake) need=avx512f ;;
      Sandybridge) need=avx ;;
    esac
    if [ -n "$need" ] && ! grep -qw "$need" /proc/cpuinfo; then
      echo "== OpenBLAS $core kernels: skipped (this CPU has no $need)"
      continue
    fi
    coretype=()
    [ "$core" = native ] || coretype=("OPENBLAS_CORETYPE=$core")
    echo "== the numerics tests on OpenBLAS ($core kernels, ONEBIT_GEMM=blas)"
    env "${coretype[@]}" ONEBIT_GEMM=blas \
      ctest --test-dir "$BUILD_DIR" --output-on-failure -j 1 -R "$BLAS_TESTS"
  done
fi

# Sanitizers: every test again in a CPU-only build instrumented with AddressSanitizer and
# UndefinedBehaviorSanitizer; any report from any process (tests, onebitd, workers, tools) lands
# in a file under $SAN_DIR/reports and fails the run. Leaks are checked too, in the tests that
# run no MPI processes (Open MPI's own allocations live to the end of the process); what is
# not ours is listed in tests/sanitizers/lsan.supp. Each test runs once: those with leak checks,
# the others without. ONEBIT_TEST_SANITIZED tells the tests that only the uninstrumented run
# must repeat (a sweep of every 7th byte of a checkpoint, the numerics of a long divergence):
# they keep every code path and check less of the same. ONEBIT_SANITIZERS=0 skips this stage.
if [ "${ONEBIT_SANITIZERS:-1}" != 0 ]; then
  SAN_DIR="$BUILD_DIR-asan"
  echo "== ASan + UBSan build ($SAN_DIR, also the check that a CPU-only build works)"
  cmake -S . -B "$SAN_DIR" -DONEBIT_WERROR=ON -DONEBIT_CUDA=OFF -DONEBIT_SANITIZE=address,undefined \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$SAN_DIR" -j "$JOBS" >/dev/null
  case "$SAN_DIR" in /*) reports="$SAN_DIR/reports" ;; *) reports="$PWD/$SAN_DIR/reports" ;; esac
  rm -rf "$reports" && mkdir -p "$reports"
  ubsan="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
  leak_tests='^test_(compress|adam|freeze|schedule|model_grad|data|data_loaders|jobspec|jobspec_errors|checkpoint|store|status_map|service|rest|onebitd|report)$'
  echo "== every test under ASan + UBSan: those without MPI processes with leak checks"
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$reports/asan" UBSAN_OPTIONS="$ubsan" \
    LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0" \
    ONEBIT_TEST_SANITIZED=1 ctest --test-dir "$SAN_DIR" --output-on-failure -j 1 -R "$leak_tests"
  echo "== every test under ASan + UBSan: the others"
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$reports/asan" UBSAN_OPTIONS="$ubsan" \
    ONEBIT_TEST_SANITIZED=1 ctest --test-dir "$SAN_DIR" --output-on-failure -j 1 -E "$leak_tests"
  if [ -n "$(ls -A "$reports")" ]; then
    echo "== sanitizer reports:" >&2
    cat "$reports"/* >&2
    exit 1
  fi
  echo "== sanitizers: no reports"
fi

# ThreadSanitizer: the tests where onebitd's threads meet (the gRPC handler threads and the
# stream watcher, the REST server's thread per connection, the supervisor, the store's lock) in
# a CPU-only build instrumented with TSan: test_service and test_rest in process, test_onebitd
# (fake workers under mpirun) and test_onebitctl (real onebit-worker jobs under mpirun) against
# the real daemon over the wire. gRPC, abseil and Open MPI are not instrumented: TSan sees none
# of their own synchronisation, and tests/sanitizers/tsan.supp ignores only the calls they make
# through its interceptors (gRPC and abseil; nothing of ours). Any report fails the run.
# ONEBIT_TSAN=0 skips this stage.
if [ "${ONEBIT_TSAN:-1}" != 0 ]; then
  TSAN_DIR="$BUILD_DIR-tsan"
  echo "== TSan build ($TSAN_DIR)"
  cmake -S . -B "$TSAN_DIR" -DONEBIT_WERROR=ON -DONEBIT_CUDA=OFF -DONEBIT_SANITIZE=thread \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$TSAN_DIR" -j "$JOBS" \
    --target onebitd onebitctl onebit-worker obrpc test_service test_rest >/dev/null
  case "$TSAN_DIR" in /*) reports="$TSAN_DIR/reports" ;; *) reports="$PWD/$TSAN_DIR/reports" ;; esac
  rm -rf "$reports" && mkdir -p "$reports"
  echo "== the concurrency tests under TSan"
  TSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/tsan.supp:log_path=$reports/tsan:second_deadlock_stack=1" \
    ONEBIT_TEST_SLOW=1 \
    ctest --test-dir "$TSAN_DIR" --output-on-failure -j 1 -R '^test_(service|rest|onebitd|onebitctl)$'
  if [ -n "$(ls -A "$reports")" ]; then
    echo "== ThreadSanitizer reports:" >&2
    cat "$reports"/* >&2
    exit 1
  fi
  echo "== TSan: no reports"
fi

# Fuzzing smoke run: each libFuzzer target for ONEBIT_FUZZ_SECONDS (default 30) on its seeds, in
# a clang build instrumented with ASan + UBSan. Long runs: tests/fuzz/README.md.
FUZZ_SECONDS=${ONEBIT_FUZZ_SECONDS:-30}
if [ "$FUZZ_SECONDS" != 0 ] && command -v clang >/dev/null 2>&1; then
  FUZZ_DIR="$BUILD_DIR-fuzz"
  echo "== fuzz targets ($FUZZ_DIR), ${FUZZ_SECONDS} s each"
  CC=clang cmake -S . -B "$FUZZ_DIR" -DONEBIT_CUDA=OFF -DONEBIT_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$FUZZ_DIR" -j "$JOBS" \
    --target fuzz_jobspec fuzz_wire fuzz_checkpoint fuzz_grpc fuzz_rest >/dev/null
  case "$FUZZ_DIR" in /*) fuzz_bin="$FUZZ_DIR/bin" ;; *) fuzz_bin="$PWD/$FUZZ_DIR/bin" ;; esac
  supp="$PWD/tests/sanitizers/lsan.supp"
  work=$(mktemp -d)
  for t in jobspec wire checkpoint grpc rest; do
    mkdir -p "$work/$t"
    cp tests/fuzz/corpus/$t/* "$work/$t/"
    (cd "$work" && LSAN_OPTIONS="suppressions=$supp:print_suppressions=0" \
      "$fuzz_bin/fuzz_$t" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 \
      -print_final_stats=1 "$work/$t" > "$work/$t.log" 2>&1) || {
      tail -40 "$work/$t.log" >&2
      echo "fuzz_$t: failed (its input is under $work)" >&2
      exit 1
    }
    echo "   fuzz_$t: $(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log") runs, no crash"
  done
  rm -rf "$work"
fi
