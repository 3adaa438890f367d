#!/usr/bin/env bash
# Packs a CUDA build into one directory that runs on a GPU host which has the NVIDIA driver,
# the CUDA runtime libraries and NCCL, but none of the project's other dependencies (no HDF5,
# gRPC, OpenBLAS or Open MPI packages): the worker, onebit-ckpt, the GPU tests and the kernel
# benchmark, every shared library they load except the C library, the C++ runtime and the
# CUDA/NCCL libraries, and a relocatable Open MPI (mpirun, orted, their components).
#
#   bash scripts/gpu-bundle.sh [BUILD_DIR] [DEST]     # defaults: build-gpu, var/gpu-bundle
#   # copy DEST to the GPU host, then there:
#   BUNDLE=DEST bash scripts/gpu-check.sh             # gpu-check.sh sources DEST/env.sh
#
# DEST/env.sh puts the bundle first on PATH and LD_LIBRARY_PATH, points Open MPI and PMIx at
# their relocated components, and finds the CUDA runtime, cuBLAS and NCCL on the host (the
# dynamic linker's cache, /usr/local/cuda*, or the nvidia-* Python packages), so it fails
# early, naming what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-gpu}
DEST=${2:-var/gpu-bundle}
[ -x "$BUILD_DIR/bin/onebit-worker" ] || { echo "no $BUILD_DIR/bin/onebit-worker: build first" >&2; exit 1; }
[ -x "$BUILD_DIR/bin/test_optim_cuda" ] || { echo "$BUILD_DIR has no GPU tests: configure with -DONEBIT_CUDA=ON" >&2; exit 1; }
command -v orterun >/dev/null || { echo "no orterun: the bundle relocates Open MPI 4" >&2; exit 1; }

MPI_PKGLIB=$(ompi_info --path pkglibdir --parsable | sed 's/.*://')
MPI_PREFIX=$(ompi_info --path prefix --parsable | sed 's/.*://')
MPI_DATA=$(ompi_info --path pkgdatadir --parsable | sed 's/.*://')
PMIX_LIB=$(ldconfig -p | awk '/libpmix.so.2 / && !p {print $NF; p = 1}')
PMIX_PREFIX=$(dirname "$(dirname "$(readlink -f "$PMIX_LIB")")")

rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
bins=(onebit-worker onebit-ckpt test_compress_cuda test_model_cuda test_optim_cuda test_car_nccl
  bench_compress_cuda test_py_replay)
for b in "${bins[@]}"; do install -m 755 "$BUILD_DIR/bin/$b" "$DEST/bin/"; done
# The Python package (engine/python) with its binding: PYTHONPATH=$DEST/python.
mkdir -p "$DEST/python/onebit"
install -m 644 "$BUILD_DIR"/python/onebit/*.py "$DEST/python/onebit/"
install -m 755 "$BUILD_DIR/python/onebit/libonebit_py.so" "$DEST/python/onebit/"
install -m 755 "$(readlink -f "$(command -v orterun)")" "$DEST/bin/orterun"
install -m 755 "$(readlink -f "$(command -v orted)")" "$DEST/bin/orted"
ln -s orterun "$DEST/bin/mpirun"
ln -s orterun "$DEST/bin/mpiexec"

# Open MPI's components at the place OPAL_PREFIX=$DEST makes it look, with its help texts;
# the components for fabrics a single GPU host does not use (and whose libraries are large)
# are left out.
rel_pkglib=${MPI_PKGLIB#"$MPI_PREFIX"/}
mkdir -p "$DEST/$rel_pkglib" "$DEST/${MPI_DATA#"$MPI_PREFIX"/}"
for so in "$MPI_PKGLIB"/mca_*.so; do
  case $(basename "$so") in *ucx* | *ofi* | *psm* | *openib* | *uct* | *usnic* | *verbs*) continue ;; esac
  install -m 644 "$so" "$DEST/$rel_pkglib/"
done
cp -r "$MPI_DATA"/. "$DEST/${MPI_DATA#"$MPI_PREFIX"/}/"
mkdir -p "$DEST/pmix/lib/pmix"
cp "$PMIX_PREFIX"/lib/pmix/*.so "$DEST/pmix/lib/pmix/" 2>/dev/null || true

# Every shared library those load, but the C library's, the C++ runtime's and the GPU stack's,
# which the host provides.
host_lib() {
  case $1 in
    linux-vdso* | ld-linux* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | \
      libresolv.so* | libutil.so* | libstdc++.so* | libgcc_s.so* | libcuda.so* | libcudart.so* | \
      libcublas.so* | libcublasLt.so* | libnccl.so*) return 0 ;;
  esac
  return 1
}
for f in "$DEST"/bin/* "$DEST/$rel_pkglib"/*.so "$DEST"/pmix/lib/pmix/*.so \
  "$DEST"/python/onebit/*.so; do
  [ -L "$f" ] && continue
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  host_lib "$name" || install -m 644 "$path" "$DEST/lib/$name"
done
strip --strip-unneeded "$DEST"/bin/* "$DEST"/lib/* "$DEST/$rel_pkglib"/*.so \
  "$DEST"/python/onebit/*.so 2>/dev/null || true

cat >"$DEST/env.sh" <<EOF
# Sourced by gpu-check.sh (BUNDLE=dir): the bundle's programs and libraries first, Open MPI and
# PMIx relocated here, the host's CUDA runtime, cuBLAS and NCCL found.
B=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
export PATH=\$B/bin:\$PATH OPAL_PREFIX=\$B PMIX_MCA_mca_base_component_path=\$B/pmix/lib/pmix
export PYTHONPATH=\$B/python\${PYTHONPATH:+:\$PYTHONPATH}
export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi OMPI_MCA_osc=^ucx,pt2pt PMIX_MCA_pcompress_base_silence_warning=1
gpu_dirs=
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  p=\$(ldconfig -p 2>/dev/null | awk -v l="\$lib" '\$1 == l {print \$NF; exit}')
  [ -n "\$p" ] || p=\$(find /usr/local/cuda*/ /opt /usr/lib /usr/local/lib -name "\$lib" 2>/dev/null | head -1)
  if [ -z "\$p" ]; then echo "gpu bundle: \$lib not found on this host" >&2; return 1; fi
  gpu_dirs=\$gpu_dirs:\$(dirname "\$p")
done
export LD_LIBRARY_PATH=\$B/lib\$gpu_dirs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
EOF
du -sh "$DEST"
