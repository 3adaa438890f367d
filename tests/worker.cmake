# onebit-worker as a user runs it: black-box tests of the binary under mpirun.
add_test(NAME test_worker
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_worker.sh $<TARGET_FILE:onebit-worker>
                 ${MPIEXEC_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(test_worker PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2)
