# The CUDA worker: onebit-worker built with CUDA and NCCL, for MPIJobs of jobs with
# `device: cuda` (docker/kubernetes/overlays/gpu). Same layout as the CPU worker of
# docker/Dockerfile (user onebit, sshd on 2222, mpirun), on a CUDA base image.
#
# On NVIDIA's CUDA images (NCCL comes from their apt repository):
#
#   docker build -f docker/worker-cuda.Dockerfile \
#       --build-arg CUDA_DEVEL_BASE=nvidia/cuda:12.4.1-devel-ubuntu22.04 \
#       --build-arg CUDA_RUNTIME_BASE=nvidia/cuda:12.4.1-runtime-ubuntu22.04 \
#       --build-arg CUDA_ARCHS="80;90" -t onebit/worker-cuda:dev .
#
# Without a registry, on bases made from a CUDA toolkit installed here (NCCL already in them):
#
#   docker/cuda-bases.sh --base onebit-base:bookworm --prefix localhost/onebit/cuda:13.0
#   podman build --format docker --network host -f docker/worker-cuda.Dockerfile \
#       --build-arg CUDA_DEVEL_BASE=localhost/onebit/cuda:13.0-devel \
#       --build-arg CUDA_RUNTIME_BASE=localhost/onebit/cuda:13.0-runtime \
#       --build-arg NCCL_DEV_PACKAGES= --build-arg NCCL_RUNTIME_PACKAGES= -t onebit/worker-cuda:dev .
#
# Both bases must be the same distribution and CUDA release. tests/test_containers.sh builds this
# file the second way (ONEBIT_CONTAINER_CUDA=1) and runs a job in it.
#
# No Python front end (label org.onebit.python=no): unlike the CPU worker of docker/Dockerfile,
# which takes Debian's python3-torch, a CUDA torch is not in the distributions these bases come
# from. It would be PyTorch's own wheel for the base's CUDA release (pip, from download.pytorch.org
# or a mirror, with the wheel's Python: 3.12 and torch 2.x with CUDA on our GPU machine) plus the
# onebit package built with -DONEBIT_CUDA=ON (target onebit_py); until that is built and tested,
# an onebitd that launches this image runs with --k8s-image-python no
# (docker/kubernetes/overlays/gpu), which refuses program jobs at submit with the reason.
ARG CUDA_DEVEL_BASE=nvidia/cuda:12.4.1-devel-ubuntu22.04
ARG CUDA_RUNTIME_BASE=nvidia/cuda:12.4.1-runtime-ubuntu22.04

FROM ${CUDA_DEVEL_BASE} AS build
ARG CUDA_ARCHS="80;90"
# NCCL's packages; empty when the base has NCCL already.
ARG NCCL_DEV_PACKAGES="libnccl-dev libnccl2"
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      build-essential cmake pkg-config ca-certificates python3 \
      libopenmpi-dev openmpi-bin libopenblas-dev libhdf5-dev \
      libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler \
      libmicrohttpd-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev libyaml-dev \
      libcmocka-dev zlib1g-dev ${NCCL_DEV_PACKAGES} \
    && rm -rf /var/lib/apt/lists/*
# (python3: the configure step finds it for the Python tests; nothing of it is compiled.)
# Only what the build reads: documentation and manifests do not invalidate the compile layer.
COPY CMakeLists.txt .clang-format /src/
COPY cmake /src/cmake
COPY docs/openapi.json /src/docs/openapi.json
COPY engine /src/engine
COPY proto /src/proto
COPY checkpoint /src/checkpoint
COPY service /src/service
COPY cli /src/cli
COPY bench /src/bench
COPY tests /src/tests
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DONEBIT_CUDA=ON \
      -DONEBIT_CUDA_ARCH="${CUDA_ARCHS}" \
    && cmake --build /build -j"$(nproc)" --target onebit-worker \
    && mkdir -p /out/bin && cp /build/bin/onebit-worker /out/bin/ && strip /out/bin/* \
    && ldd /out/bin/onebit-worker | awk '/=> \//{print $3}' | grep -v -e libcuda -e /cuda/ -e libnccl \
       | sort -u | xargs -r -n1 readlink -f | xargs -r dpkg -S 2>/dev/null | cut -d: -f1 | sort -u \
       > /out/runtime-packages.txt

FROM ${CUDA_RUNTIME_BASE} AS worker-cuda
ARG NCCL_RUNTIME_PACKAGES="libnccl2"
LABEL org.opencontainers.image.title="onebit-worker-cuda" \
      org.opencontainers.image.description="onebit training worker (CUDA, NCCL, Open MPI) for MPIJobs" \
      org.opencontainers.image.source="https://example.invalid/onebit" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.onebit.python="no"
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $(cat /tmp/runtime-packages.txt) ${NCCL_RUNTIME_PACKAGES} openmpi-bin openssh-server openssh-client ca-certificates \
    && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt /etc/ssh/ssh_host_* \
    && useradd --uid 1000 --create-home --shell /bin/bash onebit \
    && mkdir -p /home/onebit/.ssh /var/lib/onebit/checkpoints /run/sshd \
    && chown -R onebit:onebit /home/onebit /var/lib/onebit
COPY --from=build /out/bin/onebit-worker /usr/local/bin/
COPY docker/worker/sshd_config docker/worker/ssh_config /etc/onebit/
COPY docker/worker/onebit-sshd /usr/local/bin/
RUN cat /etc/onebit/ssh_config >> /etc/ssh/ssh_config && chmod 0755 /usr/local/bin/onebit-sshd
USER 1000:1000
ENV OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
EXPOSE 2222
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD bash -c 'exec 3<>/dev/tcp/127.0.0.1/2222' || exit 1
CMD ["onebit-sshd"]
