# The coordinator: unit tests of the store and the status table, and black-box tests of the
# real onebitd driven over gRPC and REST.

# ob_add_service_test(<name> <source>...): a cmocka test linked against libonebit_service.
function(ob_add_service_test name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE onebit_service PkgConfig::CMOCKA m)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT 120)
endfunction()

# ob_add_script_test(<name> TIMEOUT <seconds> [MPI] [PROCESSORS <n>] [SKIPPABLE]
#                    [ENVIRONMENT <var=value>...] [SCRIPT <file>] [RUNNER <program>]
#                    [ARGS <argument>...]): a black-box test, tests/<SCRIPT> (default <name>.sh)
# run by RUNNER (default bash for a .sh, python3 for a .py) with ARGS. MPI: Open MPI's
# environment for these machines (OB_MPI_TEST_ENV, before any ENVIRONMENT); SKIPPABLE: exit
# status 77 is a skip.
function(ob_add_script_test name)
  cmake_parse_arguments(T "MPI;SKIPPABLE" "TIMEOUT;PROCESSORS;SCRIPT;RUNNER" "ENVIRONMENT;ARGS"
                        ${ARGN})
  if(NOT T_TIMEOUT)
    message(FATAL_ERROR "ob_add_script_test(${name}): TIMEOUT is required")
  endif()
  if(T_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "ob_add_script_test(${name}): unknown arguments ${T_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT T_SCRIPT)
    set(T_SCRIPT ${name}.sh)
  endif()
  if(NOT T_RUNNER)
    if(T_SCRIPT MATCHES "\\.py$")
      set(T_RUNNER python3)
    else()
      set(T_RUNNER bash)
    endif()
  endif()
  add_test(NAME ${name} COMMAND ${T_RUNNER} ${CMAKE_CURRENT_SOURCE_DIR}/${T_SCRIPT} ${T_ARGS})
  set(env)
  if(T_MPI)
    list(APPEND env ${OB_MPI_TEST_ENV})
  endif()
  list(APPEND env ${T_ENVIRONMENT})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT})
  if(env)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}")
  endif()
  if(T_PROCESSORS)
    set_tests_properties(${name} PROPERTIES PROCESSORS ${T_PROCESSORS})
  endif()
  if(T_SKIPPABLE)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()

ob_add_service_test(test_store test_store.c)
ob_add_service_test(test_status_map test_status_map.c)
ob_add_service_test(test_service test_service.c)
# (its mock attempts write real checkpoints: fake_checkpoint.h; its readdir can leave out an
# entry, as a shared file system's cached listing does: test_exit_zero_listing_lags)
target_link_libraries(test_service PRIVATE onebit_checkpoint)
target_link_options(test_service PRIVATE -Wl,--wrap=readdir)
# The cluster launchers' parsers (sbatch, squeue, sacct, --hosts, log tags) on hostile text.
ob_add_service_test(test_cluster test_cluster.c)
# The Kubernetes launcher's names and connection: DNS-1123 labels, the kubeconfig subset (and what
# it refuses), in-cluster credentials.
ob_add_service_test(test_kube_config test_kube_config.c)

# Server reflection's answers in process against hostile requests and descriptor sets (white
# box: reflection.h is private to the service).
ob_add_service_test(test_reflection_index test_reflection_index.c)
target_include_directories(test_reflection_index PRIVATE ${PROJECT_SOURCE_DIR}/service/src)

# The REST routes in process through ob__rest_handle (white box: rest_internal.h is private to
# the service); regressions from fuzz_rest.
pkg_check_modules(OB_TEST_JANSSON REQUIRED IMPORTED_TARGET jansson)
ob_add_service_test(test_rest test_rest.c)
target_include_directories(test_rest PRIVATE ${PROJECT_SOURCE_DIR}/service/src)
target_link_libraries(test_rest PRIVATE PkgConfig::OB_TEST_JANSSON)

# obrpc: the gRPC client the black-box tests drive onebitd with.
add_executable(obrpc obrpc.c)
target_link_libraries(obrpc PRIVATE onebit_rpc PkgConfig::OB_TEST_JANSSON)
# fake_checkpoint: the checkpoints of tests/fake_worker.sh, small but real (they verify), beside
# obrpc in bin/ (the tests point FAKE_CKPT_WRITER at it).
add_executable(fake_checkpoint fake_checkpoint.c)
target_link_libraries(fake_checkpoint PRIVATE onebit_checkpoint m)
add_dependencies(obrpc fake_checkpoint)

# The real onebitd over the wire (gRPC and REST), supervising real mpirun processes.
ob_add_script_test(test_onebitd TIMEOUT 300 MPI PROCESSORS 2 ARGS $<TARGET_FILE:onebitd>
                   $<TARGET_FILE:obrpc> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh
                   $<TARGET_FILE:onebit-worker>)

# TLS on both APIs: a throwaway CA (openssl), onebitctl, curl and openssl s_client against
# onebitd with --tls-cert/--tls-key (and --tls-client-ca), the refusals and flag errors.
ob_add_script_test(test_tls TIMEOUT 300 MPI PROCESSORS 2 ARGS $<TARGET_FILE:onebitd>
                   $<TARGET_FILE:onebitctl> $<TARGET_FILE:obrpc>
                   ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)

# What one client can hold of the REST server: 300 half-open connections from one address while
# another is served, the request timeout, event streams that outlive it, oversized headers.
ob_add_script_test(test_limits TIMEOUT 180 MPI PROCESSORS 2 ARGS $<TARGET_FILE:onebitd>
                   $<TARGET_FILE:obrpc> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)

# End to end with the real onebit-worker: REST and gRPC submits, a killed rank, a cancel and a
# killed coordinator, with bit-exact final parameters.
ob_add_script_test(test_onebitd_e2e TIMEOUT 600 MPI PROCESSORS 2 ARGS $<TARGET_FILE:onebitd>
                   $<TARGET_FILE:obrpc> $<TARGET_FILE:onebit-ckpt> ${PROJECT_SOURCE_DIR}/examples)

# Worker resource limits with the real onebit-worker: RLIMIT_DATA and RLIMIT_CORE read from the
# running ranks, a job over --worker-memory-limit FAILED for memory without restarts, the same job
# under the default limit SUCCEEDED.
ob_add_script_test(test_worker_limits TIMEOUT 600 MPI PROCESSORS 2 SKIPPABLE ARGS
                   $<TARGET_FILE:onebitd> $<TARGET_FILE:obrpc> $<TARGET_FILE:onebitctl>
                   ${PROJECT_SOURCE_DIR}/examples)

# The web dashboard (/ui/): its embedded files, headers and refused paths over curl; and the page
# in headless Chromium while the real onebit-worker trains (skipped, 77, without Chromium:
# scripts/install-deps.sh --browser).
ob_add_script_test(test_dashboard_routes SCRIPT test_dashboard.sh TIMEOUT 120 ARGS routes
                   $<TARGET_FILE:onebitd> ${PROJECT_SOURCE_DIR}/service/ui
                   ${PROJECT_SOURCE_DIR}/examples)
ob_add_script_test(test_dashboard_browser SCRIPT test_dashboard.sh TIMEOUT 600 MPI PROCESSORS 2
                   SKIPPABLE ARGS browser $<TARGET_FILE:onebitd> ${PROJECT_SOURCE_DIR}/service/ui
                   ${PROJECT_SOURCE_DIR}/examples)

# onebitctl against a real onebitd running real workers, over gRPC and REST.
ob_add_script_test(test_onebitctl TIMEOUT 600 MPI PROCESSORS 2 ARGS $<TARGET_FILE:onebitctl>
                   $<TARGET_FILE:onebitd> ${PROJECT_SOURCE_DIR}/examples)

# docs/openapi.json against the REST server: the route table of rest_server.c and the query
# parameters it reads, the document's structure, and the running onebitd (the document served at
# /v1/openapi.json, every operation reaching its handler, every other method 405).
ob_add_script_test(test_openapi SCRIPT test_openapi.py TIMEOUT 120 ARGS
                   ${PROJECT_SOURCE_DIR}/service/src/rest_server.c
                   ${PROJECT_SOURCE_DIR}/docs/openapi.json $<TARGET_FILE:onebitd>)

# onebitctl completion bash|zsh: sourced into bash (and zsh when installed), completing verbs,
# flags, values and a real onebitd's job ids.
ob_add_script_test(test_completion TIMEOUT 120 MPI ARGS $<TARGET_FILE:onebitctl>
                   $<TARGET_FILE:onebitd> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)

# Streamed logs (StreamJobLogs, GET /v1/jobs/{id}/logs:stream, onebitctl logs --tail --since -f)
# through the real onebitd, onebitctl and curl, supervising fake workers under mpirun.
ob_add_script_test(test_logs TIMEOUT 180 MPI PROCESSORS 2 ARGS $<TARGET_FILE:onebitctl>
                   $<TARGET_FILE:onebitd> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)

# The wire layer's progress report: JSON lines and ReportProgress requests.
add_executable(test_report test_report.c)
target_link_libraries(test_report PRIVATE onebit_wire onebit_rpc PkgConfig::CMOCKA m)
add_test(NAME test_report COMMAND test_report)
set_tests_properties(test_report PROPERTIES TIMEOUT 60)

# Chaos: random SIGKILLs of ranks, mpirun and onebitd during one job; bit-exact at the end.
ob_add_script_test(test_chaos TIMEOUT 600 MPI PROCESSORS 2 ARGS $<TARGET_FILE:onebitd>
                   $<TARGET_FILE:obrpc> $<TARGET_FILE:onebit-ckpt> ${PROJECT_SOURCE_DIR}/examples)

# onebitd --launcher slurm on a one-machine Slurm cluster the test starts itself (munged,
# slurmctld, slurmd as root, private state): success, a killed rank resumed in a new batch job,
# cancel, and a killed coordinator re-attaching to its running batch job. Fails without Slurm
# unless ONEBIT_SKIP_SLURM=1 (then skipped).
ob_add_script_test(test_slurm TIMEOUT 400 MPI PROCESSORS 2 SKIPPABLE ARGS $<TARGET_FILE:onebitd>
                   $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples)

# onebitd --launcher hosts on this machine (its own name and localhost in the host list): the
# hostfile, --hosts validation, a job to SUCCEEDED and a cancel through mpirun's SIGUSR1.
ob_add_script_test(test_hosts TIMEOUT 300 MPI PROCESSORS 2 ARGS $<TARGET_FILE:onebitd>
                   $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples)

# onebitd --launcher hosts across two network namespaces playing hosts (bench/net/netns.sh,
# mpirun reaching them through bench/net/rsh-agent.sh): 4 ranks, 2 per host, to SUCCEEDED with
# each rank seen in its host's namespace; a cancel through mpirun's SIGUSR1 with a checkpoint
# from every rank; a rank SIGKILLed on the second host, resumed. Needs root and ip netns:
# skipped (77) without them.
ob_add_script_test(test_hosts_netns TIMEOUT 300 MPI PROCESSORS 2 SKIPPABLE ARGS
                   $<TARGET_FILE:onebitd> $<TARGET_FILE:obrpc> $<TARGET_FILE:onebitctl>
                   ${PROJECT_SOURCE_DIR}/examples)

# onebitd --launcher kubernetes against a stand-in API server (tests/k8s_standin.py: HTTPS with a
# CA made by the test, a bearer token, MPIJob v2beta1 and Pod JSON, chunked watches, 404/409/410):
# the MPIJob it creates, success, a failed worker, OOMKilled, unschedulable pods, cancel, a
# restarted coordinator re-attaching, the API server going away, 410 Gone, hostile events; program
# jobs: the MPIJob of one on the checkpoint volume, uploads (and, with --k8s-image-python no,
# Python programs) refused at submit over REST, gRPC and onebitctl.
ob_add_script_test(test_kubernetes_standin TIMEOUT 300 ARGS $<TARGET_FILE:onebitd>
                   $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples
                   ${CMAKE_CURRENT_SOURCE_DIR}/k8s_standin.py $<TARGET_FILE:onebitctl>)

# What each Dockerfile copies into its build stage is enough to build its targets (a configure
# and a ninja dry run of that view of the tree: seconds, no image built).
ob_add_script_test(test_image_context TIMEOUT 300 ARGS ${PROJECT_SOURCE_DIR})

# The images (docker/Dockerfile) built and run with podman: onebitd in a container launching a
# 2-rank job into two worker containers over ssh, to SUCCEEDED. Opt-in, it builds images:
#   ONEBIT_CONTAINER_TEST=1 ctest --test-dir build -R test_containers --output-on-failure
ob_add_script_test(test_containers TIMEOUT 1800 SKIPPABLE ARGS ${PROJECT_SOURCE_DIR}
                   $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples)
# The same with the CUDA worker image (docker/worker-cuda.Dockerfile on bases made by
# docker/cuda-bases.sh from the toolkit at CUDA_HOME): a CPU job runs in it to SUCCEEDED and a
# device: cuda job fails with no GPU in the containers. Opt-in, as above.
ob_add_script_test(test_containers_cuda SCRIPT test_containers.sh TIMEOUT 3600 SKIPPABLE
                   ENVIRONMENT ONEBIT_CONTAINER_WORKER=cuda ARGS ${PROJECT_SOURCE_DIR}
                   $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples)

# The CPU worker image's runtime without a container engine: a Debian root made by mmdebstrap
# with the packages docker/Dockerfile's worker stage installs, this build's onebit-worker and
# onebit package where the stage puts them; python3 imports onebit.torch as the onebit user and
# mpirun -np 2 onebit-worker runs a program job in it. Opt-in (root, mmdebstrap, a Debian mirror):
#   ONEBIT_ROOTFS_TEST=1 ctest --test-dir build -R test_worker_rootfs --output-on-failure
if(TARGET onebit_py)
  ob_add_script_test(test_worker_rootfs TIMEOUT 1200 SKIPPABLE ARGS ${PROJECT_SOURCE_DIR}
                     $<TARGET_FILE:onebit-worker> ${CMAKE_BINARY_DIR}/python)
endif()

# docker/kubernetes/: YAML syntax, kustomization references, the Role, onebitd's probes, claims
# and flags (python3-yaml).
ob_add_script_test(test_manifests SCRIPT test_manifests.py TIMEOUT 60 ARGS ${PROJECT_SOURCE_DIR}
                   $<TARGET_FILE:onebitd>)

# gRPC server reflection (grpc.reflection.v1 and v1alpha) of the real onebitd through a real
# client (python3-grpcio; the reflection messages compiled by protoc at test time): the services
# listed, descriptors that load and declare SubmitJob, NOT_FOUND answers, hostile requests, the
# token, and the shipped onebit.protoset. Debian's grpcio lives in the system Python.
find_program(OB_SYSTEM_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
ob_add_script_test(test_reflection SCRIPT test_reflection.py RUNNER ${OB_SYSTEM_PYTHON} TIMEOUT 120
                   ARGS $<TARGET_FILE:onebitd> ${PROJECT_SOURCE_DIR}/proto
                   ${CMAKE_BINARY_DIR}/share/onebit/onebit.protoset)

# onebitd with its state directory on a small tmpfs that a file fills while a job runs: health
# NOT_SERVING (gRPC and /healthz 503), submits and cancels refused with UNAVAILABLE, then SERVING
# again and the job SUCCEEDED with its attempt closed once the file is deleted. Needs root to
# mount: skipped (77) without it.
ob_add_script_test(test_full_disk TIMEOUT 180 MPI PROCESSORS 2 SKIPPABLE ARGS
                   $<TARGET_FILE:onebitd> $<TARGET_FILE:obrpc>
                   ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)
