# Help, parser, completion and man pages of onebitctl and onebitd cannot drift (all are written
# from the option tables): tests/test_cli_help.sh, with the man pages of the build (cmake/man.cmake).
if(ONEBIT_MAN)
  add_test(NAME test_cli_help
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_help.sh $<TARGET_FILE:onebitctl>
                   $<TARGET_FILE:onebitd> ${CMAKE_BINARY_DIR}/man)
  set_tests_properties(test_cli_help PROPERTIES TIMEOUT 120)
endif()
