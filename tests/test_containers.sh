#!/usr/bin/env bash
# The images, built and run for real with podman: onebitd in one container, two workers in two
# more (sshd as the unprivileged onebit user, as in an MPIJob), and a 2-rank job that the
# coordinator launches into them (--launcher hosts: mpirun over ssh, as the MPI Operator's
# launcher does) to SUCCEEDED, its checkpoints on the volume they share. The CPU worker carries
# the Python front end for program jobs: labelled org.onebit.python=yes, onebit.torch imports.
#
# Opt-in (it builds images: minutes): ONEBIT_CONTAINER_TEST=1, else skipped (exit 77).
#   ONEBIT_CONTAINER_TEST=1 ctest --test-dir build -R test_containers --output-on-failure
# Needs podman (as root: runc, cgroupfs; the overlay storage driver where the kernel mounts it,
# else vfs, or ONEBIT_CONTAINER_STORAGE=overlay|vfs), and a base image: BASE_IMAGE
# [localhost/onebit-base:bookworm], made with mmdebstrap when it is missing. Podman's storage and
# configuration live under ONEBIT_CONTAINER_ROOT [/var/tmp/onebit-containers], kept between runs
# so that the layers are built once.
#
# ONEBIT_CONTAINER_WORKER=cuda (ctest's test_containers_cuda) uses the CUDA worker image of
# docker/worker-cuda.Dockerfile instead: on CUDA_DEVEL_BASE and CUDA_RUNTIME_BASE when both are
# set, else on bases that docker/cuda-bases.sh makes from the toolkit at CUDA_HOME
# [/usr/local/cuda]; CUDA_ARCHS [80;90]. With no GPU in the containers the job is a CPU job, and a
# `device: cuda` job must fail saying there is no usable CUDA device.
set -u
SRC=$1
OBRPC=$2
EXAMPLES=$3
if [ "${ONEBIT_CONTAINER_TEST:-0}" != 1 ]; then
  echo "SKIPPED: set ONEBIT_CONTAINER_TEST=1 to build the images and run them (minutes)"
  exit 77
fi
for p in podman ssh-keygen jq curl; do
  command -v "$p" > /dev/null || { echo "FAILED: $p is needed (apt-get install podman runc mmdebstrap openssh-client)"; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "FAILED: run as root (podman with runc and cgroupfs)"; exit 1; }

. "$(dirname "$0")/daemon_harness.sh"
R=${ONEBIT_CONTAINER_ROOT:-/var/tmp/onebit-containers}
BASE=${BASE_IMAGE:-localhost/onebit-base:bookworm}
TAG=test$$
KIND=${ONEBIT_CONTAINER_WORKER:-cpu}
case $KIND in
  cpu) WIMG=localhost/onebit/worker:$TAG WTITLE=onebit-worker ;;
  cuda) WIMG=localhost/onebit/worker-cuda:$TAG WTITLE=onebit-worker-cuda ;;
  *) echo "FAILED: ONEBIT_CONTAINER_WORKER is cpu or cuda, not '$KIND'"; exit 1 ;;
esac
NAMES=(onebit-ctest-onebitd-$$ onebit-ctest-w1-$$ onebit-ctest-w2-$$)
mkdir -p "$R"
cat > "$R/containers.conf" << 'EOF'
[containers]
default_ulimits = []
pids_limit = 0
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
EOF
# overlay where this kernel mounts it for us (a layer costs its own files), else vfs (each layer a
# full copy of the image: the CUDA images take some 50 GB that way). Each driver keeps its own
# store.
DRIVER=${ONEBIT_CONTAINER_STORAGE:-}
if [ -z "$DRIVER" ]; then
  DRIVER=vfs
  o=$(mktemp -d)
  mkdir "$o/l" "$o/u" "$o/w" "$o/m"
  unshare -m mount -t overlay overlay -o "lowerdir=$o/l,upperdir=$o/u,workdir=$o/w" "$o/m" 2> /dev/null &&
    DRIVER=overlay
  rm -rf "$o"
fi
cat > "$R/storage.conf" << EOF
[storage]
driver = "$DRIVER"
runroot = "$R/run-$DRIVER"
graphroot = "$R/storage-$DRIVER"
EOF
echo "podman storage: $DRIVER under $R"
export CONTAINERS_CONF=$R/containers.conf CONTAINERS_STORAGE_CONF=$R/storage.conf
pm() { podman "$@"; }
stop_all() {
  for n in "${NAMES[@]}"; do pm rm -f -t 2 "$n" > /dev/null 2>&1; done
}
trap 'stop_all; cleanup' EXIT
t0=$(date +%s)

# --- images ---------------------------------------------------------------------------------------
if ! pm image exists "$BASE"; then
  # base.tar is kept: a store of the other driver imports the same base.
  if [ ! -s "$R/base.tar" ]; then
    command -v mmdebstrap > /dev/null || { echo "FAILED: no $BASE and no mmdebstrap to make it"; exit 1; }
    nice -n 10 mmdebstrap --variant=minbase --include=ca-certificates bookworm "$R/base.part.tar" > "$R/mmdebstrap.log" 2>&1 &&
      mv "$R/base.part.tar" "$R/base.tar" || { echo "FAILED: making the base image"; tail -5 "$R/mmdebstrap.log"; exit 1; }
  fi
  pm import "$R/base.tar" "$BASE" > /dev/null ||
    { echo "FAILED: making the base image"; tail -5 "$R/mmdebstrap.log"; exit 1; }
fi
build() { # name log podman-build-arguments...
  local name=$1 log=$2
  shift 2
  nice -n 10 podman build --format docker --network host "$@" "$SRC" > "$log" 2>&1 ||
    { echo "FAILED: building $name"; tail -20 "$log"; exit 1; }
}
targets=(onebitd)
[ "$KIND" = cpu ] && targets+=(worker)
for t in "${targets[@]}"; do
  build "$t" "$TMP/build-$t.log" -f "$SRC/docker/Dockerfile" --target "$t" \
    --build-arg BASE="$BASE" -t "localhost/onebit/$t:$TAG"
done
if [ "$KIND" = cuda ]; then
  cargs=()
  if [ -n "${CUDA_DEVEL_BASE:-}" ] && [ -n "${CUDA_RUNTIME_BASE:-}" ]; then
    cargs=(--build-arg CUDA_DEVEL_BASE="$CUDA_DEVEL_BASE" --build-arg CUDA_RUNTIME_BASE="$CUDA_RUNTIME_BASE")
  else
    CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    [ -x "$CUDA_HOME/bin/nvcc" ] || { echo "SKIPPED: no CUDA toolkit at $CUDA_HOME and no CUDA_DEVEL_BASE/CUDA_RUNTIME_BASE"; exit 77; }
    cprefix=localhost/onebit/cuda-ctest:$TAG
    nice -n 10 bash "$SRC/docker/cuda-bases.sh" --base "$BASE" --cuda-home "$CUDA_HOME" \
      --prefix "$cprefix" --engine podman > "$TMP/cuda-bases.log" 2>&1 ||
      { echo "FAILED: docker/cuda-bases.sh"; tail -20 "$TMP/cuda-bases.log"; exit 1; }
    ok "docker/cuda-bases.sh made $cprefix-devel and -runtime from $CUDA_HOME"
    cargs=(--build-arg CUDA_DEVEL_BASE="$cprefix-devel" --build-arg CUDA_RUNTIME_BASE="$cprefix-runtime"
      --build-arg NCCL_DEV_PACKAGES= --build-arg NCCL_RUNTIME_PACKAGES=)
  fi
  build worker-cuda "$TMP/build-worker-cuda.log" -f "$SRC/docker/worker-cuda.Dockerfile" "${cargs[@]}" \
    --build-arg CUDA_ARCHS="${CUDA_ARCHS:-80;90}" -t "$WIMG"
fi
ok "built onebit/onebitd and $WIMG on $BASE ($(($(date +%s) - t0)) s)"
labels=$(pm image inspect "localhost/onebit/onebitd:$TAG" | jq -c '.[0].Config.Labels')
wtitle=$(pm image inspect "$WIMG" | jq -r '.[0].Config.Labels["org.opencontainers.image.title"]')
user=$(pm image inspect "$WIMG" | jq -r '.[0].Config.User')
hc=$(pm image inspect "localhost/onebit/onebitd:$TAG" | jq -c '.[0].Config.Healthcheck.Test // .[0].Healthcheck.Test')
whc=$(pm image inspect "$WIMG" | jq -c '.[0].Config.Healthcheck.Test // .[0].Healthcheck.Test')
check "images: labels, a non-root user, health checks" 'echo "$labels" | jq -e ".[\"org.opencontainers.image.title\"] == \"onebitd\"" > /dev/null && [ "$wtitle" = "$WTITLE" ] && [ "$user" = 1000:1000 ] && echo "$hc" | grep -q healthz && echo "$whc" | grep -q 2222' "labels=$labels title=$wtitle user=$user hc=$hc worker hc=$whc"
out=$(pm run --rm --network host "localhost/onebit/onebitd:$TAG" --version 2>&1)
check "onebitd runs in its image" 'echo "$out" | grep -q "^onebitd "' "$out"
out=$(pm run --rm --network host "$WIMG" onebit-worker --help 2>&1)
check "onebit-worker runs in its image" 'echo "$out" | grep -qi "usage"' "$out"
if [ "$KIND" = cpu ]; then
  # The Python front end for program jobs: the label onebitd's --k8s-image-python follows, and the
  # package importing with torch as the image's user from its working directory.
  py=$(pm image inspect "$WIMG" | jq -r '.[0].Config.Labels["org.onebit.python"]')
  out=$(pm run --rm --network host "$WIMG" python3 -c 'import onebit, onebit.torch, torch; print("onebit", onebit.version(), onebit.__file__, "torch", torch.__version__)' 2>&1)
  check "the CPU worker carries the Python front end: org.onebit.python=yes, onebit.torch imports as its user" '[ "$py" = yes ] && echo "$out" | grep -q "^onebit .* /usr/lib/python3/dist-packages/onebit/__init__.py torch "' "label=$py $out"
fi
if [ "$KIND" = cuda ]; then
  out=$(pm run --rm --network host "$WIMG" ldd /usr/local/bin/onebit-worker 2>&1)
  check "the CUDA worker's libraries all resolve: cudart, cuBLAS, NCCL, MPI" '! echo "$out" | grep -q "not found" && echo "$out" | grep -q "libcudart\.so" && echo "$out" | grep -q "libcublas\.so" && echo "$out" | grep -q "libnccl\.so" && echo "$out" | grep -q "libmpi\.so"' "$out"
  # No GPU reaches these containers: a device: cuda job must say so (a build without CUDA would
  # say "this build has no CUDA support" instead).
  sed -e '/^device:/d' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/cuda.yaml"
  echo 'device: cuda' >> "$TMP/cuda.yaml"
  out=$(pm run --rm --network host -v "$TMP/cuda.yaml:/tmp/cuda.yaml:ro" "$WIMG" \
    onebit-worker --spec /tmp/cuda.yaml --format text 2>&1); rc=$?
  check "a device: cuda job in the CUDA image without a GPU fails: no usable CUDA device" '[ $rc -ne 0 ] && echo "$out" | grep -q "no usable CUDA device"' "rc=$rc $out"
fi

# --- a shared volume, keys, two workers ---------------------------------------------------------
S=$TMP/shared
mkdir -p "$S/onebit" "$S/ssh" "$S/client"
ssh-keygen -q -t ed25519 -N '' -f "$S/client/id_ed25519" -C onebit-ctest
cp "$S/client/id_ed25519.pub" "$S/ssh/authorized_keys"
P1=$((22000 + RANDOM % 5000)); P2=$((P1 + 1))
GP=$((30000 + RANDOM % 5000)); RP=$((GP + 1))
cat > "$S/client/config" << EOF
Host w1
    HostName 127.0.0.1
    Port $P1
Host w2
    HostName 127.0.0.1
    Port $P2
Host *
    User onebit
    IdentityFile /etc/onebit-ssh/id_ed25519
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
    BatchMode yes
EOF
chown -R 1000:1000 "$S"
chmod 0600 "$S/client/id_ed25519"
i=0
for port in $P1 $P2; do
  i=$((i + 1))
  pm run -d --name "${NAMES[$i]}" --network host --hostname "w$i" \
    -v "$S/onebit:/var/lib/onebit" -v "$S/ssh:/home/onebit/.ssh:ro" \
    "$WIMG" onebit-sshd -p "$port" > /dev/null ||
    { echo "FAILED: starting worker container $i"; exit 1; }
done
for port in $P1 $P2; do
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.2; done
done
check "two worker containers serve ssh as the onebit user" '(exec 3<>"/dev/tcp/127.0.0.1/$P1") 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$P2") 2>/dev/null' "$(pm logs "${NAMES[1]}" 2>&1 | tail -5)"

# --- onebitd in its container -------------------------------------------------------------------
pm run -d --name "${NAMES[0]}" --network host \
  -v "$S/onebit:/var/lib/onebit" -v "$S/client:/etc/onebit-ssh:ro" \
  -e OMPI_MCA_btl=self,tcp -e OMPI_MCA_plm_rsh_no_tree_spawn=1 -e OMPI_MCA_btl_tcp_if_include=lo \
  -e OMPI_MCA_oob_tcp_if_include=lo \
  -e ONEBIT_GRPC_ADDR="127.0.0.1:$GP" -e ONEBIT_REST_ADDR="127.0.0.1:$RP" \
  "localhost/onebit/onebitd:$TAG" --insecure-no-auth \
  --launcher hosts --hosts w1:1,w2:1 --ssh-agent "ssh -F /etc/onebit-ssh/config" \
  --worker /usr/local/bin/onebit-worker --cancel-grace 20 > /dev/null ||
  { echo "FAILED: starting onebitd's container"; exit 1; }
GRPC=127.0.0.1:$GP
REST=127.0.0.1:$RP
for _ in $(seq 100); do [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$REST/healthz")" = 200 ] && break; sleep 0.1; done
check "onebitd's container serves /healthz and grpc.health.v1" '[ "$(curl -s "http://$REST/healthz" | jq -r .status)" = SERVING ] && rpc health > /dev/null 2>&1' "$(pm logs "${NAMES[0]}" 2>&1 | tail -5)"
pm healthcheck run "${NAMES[0]}" > "$TMP/hc" 2>&1; rc=$?
check "the image's HEALTHCHECK passes (podman healthcheck run)" '[ $rc -eq 0 ]' "rc=$rc $(cat "$TMP/hc") $(pm inspect "${NAMES[0]}" | jq -c '.[0].State.Health // .[0].State.Healthcheck')"

sed 's/^steps: 200/steps: 300/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$S/onebit/job.yaml"
printf 'checkpoint: {interval: 100, keep: 5}\n' >> "$S/onebit/job.yaml"
a=$(rpc submit "$S/onebit/job.yaml" 2 0 2>/dev/null | jq -r .id)
wait_state "$a" SUCCEEDED 240
j=$(get "$a")
check "a 2-rank job runs in the two worker containers to SUCCEEDED" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .progress.step)" = 300 ]' "$j $(tail -20 "$S/onebit/jobs/$a/worker.log" 2>&1) $(pm logs "${NAMES[0]}" 2>&1 | tail -10)"
check "its checkpoints are on the shared volume" '[ -d "$S/onebit/checkpoints/$a/step-00000300" ]' "$(ls "$S/onebit/checkpoints/$a" 2>&1)"
check "mpirun reached both worker containers over ssh, as the onebit user" 'pm logs "${NAMES[1]}" 2>&1 | grep -q "Accepted publickey for onebit" && pm logs "${NAMES[2]}" 2>&1 | grep -q "Accepted publickey for onebit"' "$(pm logs "${NAMES[1]}" 2>&1 | tail -3) / $(pm logs "${NAMES[2]}" 2>&1 | tail -3)"
echo "duration: $(($(date +%s) - t0)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
