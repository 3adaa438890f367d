# onebit-worker as a user runs it: black-box tests of the binary under mpirun.
add_test(NAME test_worker
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_worker.sh $<TARGET_FILE:onebit-worker>
                 ${MPIEXEC_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_worker PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2)

# The default stabiliser against the paper's exact form on a model where the latter diverges.
add_test(NAME test_stability
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stability.sh $<TARGET_FILE:onebit-worker>
                 ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_stability PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2 SKIP_RETURN_CODE 77)

# Warm start where the borrowed variance does not fit: ruined taken as is, trained re-estimated.
add_test(NAME test_warm_start
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_warm_start.sh $<TARGET_FILE:onebit-worker>
                 ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_warm_start PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2 SKIP_RETURN_CODE 77)

# Compression health (||e_worker||/||m||, ||e_server||/||m||, zero-momentum fraction) against the
# same numbers recomputed from checkpoints with h5py and numpy; training unchanged by them.
add_test(NAME test_health
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_health.sh $<TARGET_FILE:onebit-worker>
                 $<TARGET_FILE:onebit-ckpt> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_health PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2)

# Every program says its release with --version, the same one (onebitd's is the reference).
add_test(NAME test_versions
         COMMAND sh -c "v=$($<TARGET_FILE:onebitd> --version | cut -d' ' -f2) && [ -n \"$v\" ] && [ \"$($<TARGET_FILE:onebitctl> --version)\" = \"onebitctl $v\" ] && [ \"$($<TARGET_FILE:onebit-worker> --version)\" = \"onebit-worker $v\" ] && $<TARGET_FILE:onebit-ckpt> --version | grep -q \"^onebit-ckpt $v \" && echo '1 passed, 0 failed'")
set_tests_properties(test_versions PROPERTIES TIMEOUT 60 ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")

# onebitctl against a port where nothing listens: exit 3 and the transport's cause in full
# ("... Connection refused)", not a word cut in half).
add_test(NAME test_onebitctl_unreachable
         COMMAND sh -c "out=$($<TARGET_FILE:onebitctl> --server 127.0.0.1:1 list 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 3 ] && echo \"$out\" | grep -q 'Connection refused); is it running' && echo '1 passed, 0 failed'")
set_tests_properties(test_onebitctl_unreachable PROPERTIES TIMEOUT 60)
