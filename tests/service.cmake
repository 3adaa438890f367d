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

ob_add_service_test(test_store test_store.c)
ob_add_service_test(test_status_map test_status_map.c)
ob_add_service_test(test_service test_service.c)
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
add_test(NAME test_onebitd
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_onebitd.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh
                 $<TARGET_FILE:onebit-worker>)
set_tests_properties(test_onebitd PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 300
                     PROCESSORS 2)

# TLS on both APIs: a throwaway CA (openssl), onebitctl, curl and openssl s_client against
# onebitd with --tls-cert/--tls-key (and --tls-client-ca), the refusals and flag errors.
add_test(NAME test_tls
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_tls.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:onebitctl> $<TARGET_FILE:obrpc>
                 ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)
set_tests_properties(test_tls PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 300
                     PROCESSORS 2)

# What one client can hold of the REST server: 300 half-open connections from one address while
# another is served, the request timeout, event streams that outlive it, oversized headers.
add_test(NAME test_limits
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_limits.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)
set_tests_properties(test_limits PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 180
                     PROCESSORS 2)

# End to end with the real onebit-worker: REST and gRPC submits, a killed rank, a cancel and a
# killed coordinator, with bit-exact final parameters.
add_test(NAME test_onebitd_e2e
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_onebitd_e2e.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> $<TARGET_FILE:onebit-ckpt> ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_onebitd_e2e PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2)

# Worker resource limits with the real onebit-worker: RLIMIT_DATA and RLIMIT_CORE read from the
# running ranks, a job over --worker-memory-limit FAILED for memory without restarts, the same job
# under the default limit SUCCEEDED.
add_test(NAME test_worker_limits
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_worker_limits.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> $<TARGET_FILE:onebitctl> ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_worker_limits PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2 SKIP_RETURN_CODE 77)

# The web dashboard (/ui/): its embedded files, headers and refused paths over curl; and the page
# in headless Chromium while the real onebit-worker trains (skipped, 77, without Chromium:
# scripts/install-deps.sh --browser).
add_test(NAME test_dashboard_routes
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_dashboard.sh routes $<TARGET_FILE:onebitd>
                 ${PROJECT_SOURCE_DIR}/service/ui ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_dashboard_routes PROPERTIES TIMEOUT 120)
add_test(NAME test_dashboard_browser
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_dashboard.sh browser $<TARGET_FILE:onebitd>
                 ${PROJECT_SOURCE_DIR}/service/ui ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_dashboard_browser PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2 SKIP_RETURN_CODE 77)

# onebitctl against a real onebitd running real workers, over gRPC and REST.
add_test(NAME test_onebitctl
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_onebitctl.sh $<TARGET_FILE:onebitctl>
                 $<TARGET_FILE:onebitd> ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_onebitctl PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2)

# docs/openapi.json against the REST server: the route table of rest_server.c and the query
# parameters it reads, the document's structure, and the running onebitd (the document served at
# /v1/openapi.json, every operation reaching its handler, every other method 405).
add_test(NAME test_openapi
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_openapi.py
                 ${PROJECT_SOURCE_DIR}/service/src/rest_server.c ${PROJECT_SOURCE_DIR}/docs/openapi.json
                 $<TARGET_FILE:onebitd>)
set_tests_properties(test_openapi PROPERTIES TIMEOUT 120)

# onebitctl completion bash|zsh: sourced into bash (and zsh when installed), completing verbs,
# flags, values and a real onebitd's job ids.
add_test(NAME test_completion
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_completion.sh $<TARGET_FILE:onebitctl>
                 $<TARGET_FILE:onebitd> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)
set_tests_properties(test_completion PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 120)

# Streamed logs (StreamJobLogs, GET /v1/jobs/{id}/logs:stream, onebitctl logs --tail --since -f)
# through the real onebitd, onebitctl and curl, supervising fake workers under mpirun.
add_test(NAME test_logs
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_logs.sh $<TARGET_FILE:onebitctl>
                 $<TARGET_FILE:onebitd> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)
set_tests_properties(test_logs PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 180
                     PROCESSORS 2)

# The wire layer's progress report: JSON lines and ReportProgress requests.
add_executable(test_report test_report.c)
target_link_libraries(test_report PRIVATE onebit_wire onebit_rpc PkgConfig::CMOCKA m)
add_test(NAME test_report COMMAND test_report)
set_tests_properties(test_report PROPERTIES TIMEOUT 60)

# Chaos: random SIGKILLs of ranks, mpirun and onebitd during one job; bit-exact at the end.
add_test(NAME test_chaos
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_chaos.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> $<TARGET_FILE:onebit-ckpt> ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_chaos PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2)

# onebitd --launcher slurm on a one-machine Slurm cluster the test starts itself (munged,
# slurmctld, slurmd as root, private state): success, a killed rank resumed in a new batch job,
# cancel, and a killed coordinator re-attaching to its running batch job. Fails without Slurm
# unless ONEBIT_SKIP_SLURM=1 (then skipped).
add_test(NAME test_slurm
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_slurm.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_slurm PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 400
                     PROCESSORS 2 SKIP_RETURN_CODE 77)

# onebitd --launcher hosts on this machine (its own name and localhost in the host list): the
# hostfile, --hosts validation, a job to SUCCEEDED and a cancel through mpirun's SIGUSR1.
add_test(NAME test_hosts
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_hosts.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_hosts PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 300
                     PROCESSORS 2)

# onebitd --launcher hosts across two network namespaces playing hosts (bench/net/netns.sh,
# mpirun reaching them through bench/net/rsh-agent.sh): 4 ranks, 2 per host, to SUCCEEDED with
# each rank seen in its host's namespace; a cancel through mpirun's SIGUSR1 with a checkpoint
# from every rank; a rank SIGKILLed on the second host, resumed. Needs root and ip netns:
# skipped (77) without them.
add_test(NAME test_hosts_netns
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_hosts_netns.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> $<TARGET_FILE:onebitctl> ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_hosts_netns PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 300
                     PROCESSORS 2 SKIP_RETURN_CODE 77)

# onebitd --launcher kubernetes against a stand-in API server (tests/k8s_standin.py: HTTPS with a
# CA made by the test, a bearer token, MPIJob v2beta1 and Pod JSON, chunked watches, 404/409/410):
# the MPIJob it creates, success, a failed worker, OOMKilled, unschedulable pods, cancel, a
# restarted coordinator re-attaching, the API server going away, 410 Gone, hostile events.
add_test(NAME test_kubernetes_standin
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_kubernetes_standin.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples
                 ${CMAKE_CURRENT_SOURCE_DIR}/k8s_standin.py)
set_tests_properties(test_kubernetes_standin PROPERTIES TIMEOUT 300)

# What each Dockerfile copies into its build stage is enough to build its targets (a configure
# and a ninja dry run of that view of the tree: seconds, no image built).
add_test(NAME test_image_context
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_image_context.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(test_image_context PROPERTIES TIMEOUT 300)

# The images (docker/Dockerfile) built and run with podman: onebitd in a container launching a
# 2-rank job into two worker containers over ssh, to SUCCEEDED. Opt-in, it builds images:
#   ONEBIT_CONTAINER_TEST=1 ctest --test-dir build -R test_containers --output-on-failure
add_test(NAME test_containers
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_containers.sh ${PROJECT_SOURCE_DIR}
                 $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_containers PROPERTIES TIMEOUT 1800 SKIP_RETURN_CODE 77)
# The same with the CUDA worker image (docker/worker-cuda.Dockerfile on bases made by
# docker/cuda-bases.sh from the toolkit at CUDA_HOME): a CPU job runs in it to SUCCEEDED and a
# device: cuda job fails with no GPU in the containers. Opt-in, as above.
add_test(NAME test_containers_cuda
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_containers.sh ${PROJECT_SOURCE_DIR}
                 $<TARGET_FILE:obrpc> ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_containers_cuda PROPERTIES TIMEOUT 3600 SKIP_RETURN_CODE 77
                     ENVIRONMENT ONEBIT_CONTAINER_WORKER=cuda)

# docker/kubernetes/: YAML syntax, kustomization references, the Role, onebitd's probes, claims
# and flags (python3-yaml).
add_test(NAME test_manifests
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_manifests.py ${PROJECT_SOURCE_DIR}
                 $<TARGET_FILE:onebitd>)
set_tests_properties(test_manifests PROPERTIES TIMEOUT 60)

# gRPC server reflection (grpc.reflection.v1 and v1alpha) of the real onebitd through a real
# client (python3-grpcio; the reflection messages compiled by protoc at test time): the services
# listed, descriptors that load and declare SubmitJob, NOT_FOUND answers, hostile requests, the
# token, and the shipped onebit.protoset. Debian's grpcio lives in the system Python.
find_program(OB_SYSTEM_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
add_test(NAME test_reflection
         COMMAND ${OB_SYSTEM_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_reflection.py
                 $<TARGET_FILE:onebitd> ${PROJECT_SOURCE_DIR}/proto
                 ${CMAKE_BINARY_DIR}/share/onebit/onebit.protoset)
set_tests_properties(test_reflection PROPERTIES TIMEOUT 120)

# onebitd with its state directory on a small tmpfs that a file fills while a job runs: health
# NOT_SERVING (gRPC and /healthz 503), submits and cancels refused with UNAVAILABLE, then SERVING
# again and the job SUCCEEDED with its attempt closed once the file is deleted. Needs root to
# mount: skipped (77) without it.
add_test(NAME test_full_disk
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_full_disk.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)
set_tests_properties(test_full_disk PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 180
                     PROCESSORS 2 SKIP_RETURN_CODE 77)
