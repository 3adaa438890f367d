# The job spec parser and validator: specs that parse (test_examples loads every file in
# examples/), and every class of bad input.
foreach(t test_jobspec test_jobspec_errors)
  ob_add_unit_test(${t} ${t}.c)
  target_compile_definitions(${t} PRIVATE OB_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples")
endforeach()

# onebitd validates specs with onebit_jobspec alone: neither it nor the library may depend on
# MPI, BLAS, CUDA or NCCL (nor the library on HDF5).
add_test(NAME test_jobspec_standalone
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:onebitd>
                 -DLIBRARY=$<TARGET_FILE:onebit_jobspec> -DNM=${CMAKE_NM}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/check_links.cmake)
