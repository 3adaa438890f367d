#!/usr/bin/env bash
# Makes the two base images docker/worker-cuda.Dockerfile builds on, from a CUDA toolkit
# installed on this machine, for sites that cannot pull NVIDIA's CUDA images:
#
#   IMAGE_PREFIX-devel    BASE + the toolkit's compiler, headers and the libraries onebit links
#                         (cudart, cuBLAS, NCCL), at /usr/local/cuda in NVIDIA's layout
#   IMAGE_PREFIX-runtime  BASE + only those libraries' shared objects
#
# Both have NCCL already, so build the worker with empty NCCL package lists:
#
#   docker/cuda-bases.sh --base onebit-base:bookworm --prefix localhost/onebit/cuda:13.0
#   podman build --format docker --network host -f docker/worker-cuda.Dockerfile \
#       --build-arg CUDA_DEVEL_BASE=localhost/onebit/cuda:13.0-devel \
#       --build-arg CUDA_RUNTIME_BASE=localhost/onebit/cuda:13.0-runtime \
#       --build-arg NCCL_DEV_PACKAGES= --build-arg NCCL_RUNTIME_PACKAGES= \
#       -t onebit/worker-cuda:dev .
#
# usage: docker/cuda-bases.sh [--base IMAGE] [--cuda-home DIR] [--prefix NAME] [--engine podman|docker]
#   --base       a Debian 12 image (default debian:bookworm-slim)
#   --cuda-home  the toolkit (default $CUDA_HOME, else /usr/local/cuda); it must hold nvcc, NCCL
#                (nccl.h, libnccl.so.2), cudart and cuBLAS
#   --prefix     image name without the -devel/-runtime suffix (default localhost/onebit/cuda:VERSION,
#                VERSION being nvcc's release, e.g. 13.0)
#   --engine     what builds the images (default podman, else docker)
# The toolkit's licence terms apply to images made with it.
set -euo pipefail

BASE=debian:bookworm-slim
CUDA=${CUDA_HOME:-/usr/local/cuda}
PREFIX=
ENGINE=
usage() { sed -n '/^# usage:/,/^# The toolkit/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --base) BASE=${2:?}; shift 2 ;;
    --cuda-home) CUDA=${2:?}; shift 2 ;;
    --prefix) PREFIX=${2:?}; shift 2 ;;
    --engine) ENGINE=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "cuda-bases: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -z "$ENGINE" ]; then
  if command -v podman > /dev/null; then ENGINE=podman; else ENGINE=docker; fi
fi
command -v "$ENGINE" > /dev/null || { echo "cuda-bases: $ENGINE is not installed" >&2; exit 1; }

die() { echo "cuda-bases: $*" >&2; exit 1; }
[ -x "$CUDA/bin/nvcc" ] || die "no nvcc in $CUDA/bin (set --cuda-home or CUDA_HOME)"
INC=$(readlink -f "$CUDA/include")
LIB=$(readlink -f "$CUDA/lib64" 2> /dev/null || true)
[ -d "$LIB" ] || LIB=$(readlink -f "$CUDA/lib")
[ -f "$INC/cuda_runtime.h" ] || die "no cuda_runtime.h in $INC"
[ -f "$INC/nccl.h" ] || die "no nccl.h in $INC: NCCL must be installed into the toolkit"
# The shared objects onebit-worker needs at run time, and what the build links against.
RUNTIME_LIBS=(libcudart.so libcublas.so libcublasLt.so libnccl.so)
for l in "${RUNTIME_LIBS[@]}"; do
  compgen -G "$LIB/$l.[0-9]*" > /dev/null || die "no $l.N in $LIB"
done
VERSION=$("$CUDA/bin/nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
[ -n "$VERSION" ] || die "cannot read the release from $CUDA/bin/nvcc --version"
PREFIX=${PREFIX:-localhost/onebit/cuda:$VERSION}

CTX=$(mktemp -d "${TMPDIR:-/tmp}/cuda-bases.XXXXXX")
trap 'rm -rf "$CTX"' EXIT
# NVIDIA's layout: the headers and libraries under targets/x86_64-linux, include and lib64 links
# to them, so that nvcc.profile's paths hold.
T=targets/x86_64-linux
for kind in devel runtime; do
  mkdir -p "$CTX/$kind/cuda/$T/lib"
  ln -s "$T/lib" "$CTX/$kind/cuda/lib64"
  ln -s "$T/lib" "$CTX/$kind/cuda/lib"
done
for l in "${RUNTIME_LIBS[@]}"; do
  cp -a "$LIB/$l".[0-9]* "$CTX/runtime/cuda/$T/lib/"
  cp -a "$LIB/$l" "$LIB/$l".[0-9]* "$CTX/devel/cuda/$T/lib/"
done
D=$CTX/devel/cuda
cp -a "$CUDA/bin" "$CUDA/nvvm" "$D/"
cp -a "$INC" "$D/$T/include"
ln -s "$T/include" "$D/include"
for f in libcudadevrt.a libculibos.a libcudart_static.a stubs cmake; do
  [ -e "$LIB/$f" ] && cp -a "$LIB/$f" "$D/$T/lib/"
done
[ -f "$CUDA/version.json" ] && cp -a "$CUDA/version.json" "$D/"
for kind in devel runtime; do
  # The nvidia/cuda images' conventions: the libraries on the loader's path, nvcc on PATH, and the
  # variables the NVIDIA container runtime reads.
  cat > "$CTX/$kind/Containerfile" << EOF
FROM $BASE
COPY cuda /usr/local/cuda-$VERSION
RUN ln -s cuda-$VERSION /usr/local/cuda \\
    && echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/onebit-cuda.conf && ldconfig
ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    CUDA_VERSION=$VERSION NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL org.opencontainers.image.title="onebit CUDA $VERSION $kind base" \\
      org.opencontainers.image.description="$BASE with CUDA $VERSION ($kind) and NCCL from a local toolkit"
EOF
  extra=()
  [ "$ENGINE" = podman ] && extra=(--format docker)
  echo "cuda-bases: $PREFIX-$kind ($(du -sh "$CTX/$kind/cuda" | cut -f1) of CUDA $VERSION on $BASE)"
  "$ENGINE" build "${extra[@]}" --network host -t "$PREFIX-$kind" "$CTX/$kind" > "$CTX/$kind.log" 2>&1 ||
    { tail -20 "$CTX/$kind.log" >&2; die "building $PREFIX-$kind failed"; }
done
echo "cuda-bases: made $PREFIX-devel and $PREFIX-runtime"
