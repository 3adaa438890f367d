# Fast clients stay served under load from slow or greedy ones, measured against the real onebitd:
# slow REST clients from several addresses (the connection budget, service/src/rest_conns.c), and
# 256 replaying WatchJob streams beside unary GetJob calls (grpc_streams.c's watchers).
add_test(NAME test_slow_clients
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_slow_clients.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc>)
set_tests_properties(test_slow_clients PROPERTIES TIMEOUT 120 PROCESSORS 2)
add_test(NAME test_grpc_streams
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_grpc_streams.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> ${CMAKE_CURRENT_SOURCE_DIR}/fake_worker.sh)
set_tests_properties(test_grpc_streams PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 180
                     PROCESSORS 2)
