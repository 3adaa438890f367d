# Slow clients from several addresses against the REST port while fast ones are served: the
# connection budget's deadlines and waiting cap (service/src/rest_conns.c).
add_test(NAME test_slow_clients
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_slow_clients.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc>)
set_tests_properties(test_slow_clients PROPERTIES TIMEOUT 120 PROCESSORS 2)
