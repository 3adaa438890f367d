#!/usr/bin/env bash
# Installs every Debian package onebit needs to build, test and run. Idempotent: packages already
# present are left alone, so running it twice costs one `apt-get update` and nothing else.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ca-certificates
  # engine: MPI collectives and launch, BLAS for the models
  libopenmpi-dev openmpi-bin libopenblas-dev
  # checkpoints
  libhdf5-dev hdf5-tools
  # service and CLI
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
  libmicrohttpd-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev libyaml-dev
  # TLS: GnuTLS checks onebitd's certificate files; openssl makes the tests' throwaway CA
  libgnutls28-dev openssl
  # tests and data; clang for the fuzz targets (libFuzzer); ninja for the images' source check
  # (tests/test_image_context.sh)
  libcmocka-dev zlib1g-dev clang ninja-build
  # data: Fashion-MNIST (IDX) and the default text corpus (fortunes)
  dataset-fashion-mnist fortunes
  # experiments: tables and plots
  jq gnuplot-nox
  # the Slurm launcher and its test (tests/test_slurm.sh starts a one-machine cluster)
  slurmctld slurmd slurm-client munge
  # the Kubernetes launcher's test (a stand-in API server, a CA made by openssl) and the
  # manifests' test (python3-yaml)
  python3 python3-yaml openssl
  # the checkpoint export test reads checkpoints and exported files with h5py and numpy
  python3-h5py python3-numpy
  # gRPC server reflection's test: a real gRPC client (tests/test_reflection.py)
  python3-grpcio python3-protobuf
  # onebitctl's completion scripts are tested in bash and zsh
  zsh
  # /metrics is checked with promtool (tests/test_onebitd.sh)
  prometheus
  # the PyTorch front end (engine/python, `import onebit`): Debian's CPU torch
  python3-torch
)
# --containers: what the opt-in image test needs (tests/test_containers.sh): podman with runc,
# and mmdebstrap to make a Debian base image without a registry.
# --browser: headless Chromium for the dashboard's browser test (tests/test_dashboard.sh browser,
# skipped without it) and for docs/dashboard.png. Only tests use it; onebitd serves the
# dashboard without it.
for opt in "$@"; do
  case $opt in
    --containers) packages+=(podman runc mmdebstrap uidmap) ;;
    --browser) packages+=(chromium) ;;
    *) echo "install-deps: unknown option '$opt' (--containers, --browser)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
