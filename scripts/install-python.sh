#!/usr/bin/env bash
# Makes the system's python3 (Debian's, with python3-torch) import the onebit package built in
# BUILD_DIR: builds the binding if needed and writes onebit.pth into the interpreter's first
# site-packages directory, pointing at BUILD_DIR/python (the package and libonebit_py.so). Then
# `python3 -c 'import onebit'` works from any directory, under mpirun and under onebitd.
# Prints where it wrote and checks the import in a clean interpreter.
#   bash scripts/install-python.sh [BUILD_DIR]      # default: build
# Environment: PYTHON (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
[ -d "$BUILD_DIR" ] || cmake -S . -B "$BUILD_DIR" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target onebit_py >/dev/null
pkg=$(cd "$BUILD_DIR/python" && pwd)
[ -f "$pkg/onebit/libonebit_py.so" ] || { echo "install-python: no $pkg/onebit/libonebit_py.so" >&2; exit 1; }
site=$("$PYTHON" -c 'import site; print(site.getsitepackages()[0])')
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO mkdir -p "$site"
echo "$pkg" | $SUDO tee "$site/onebit.pth" >/dev/null
(cd / && env -u PYTHONPATH "$PYTHON" -c 'import onebit, onebit.torch; print("install-python: onebit", onebit.version(), "from", onebit.__file__)')
