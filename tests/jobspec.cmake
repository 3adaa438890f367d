# The job spec parser and validator: specs that parse (test_examples loads every file in
# examples/), and every class of bad input.
foreach(t test_jobspec test_jobspec_errors)
  ob_add_unit_test(${t} ${t}.c)
  target_compile_definitions(${t} PRIVATE OB_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples")
endforeach()
