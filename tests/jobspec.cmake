# The job spec parser and validator; test_examples loads every file in examples/.
ob_add_unit_test(test_jobspec test_jobspec.c)
target_compile_definitions(test_jobspec PRIVATE OB_EXAMPLES_DIR="${PROJECT_SOURCE_DIR}/examples")
