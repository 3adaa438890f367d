ob_add_unit_test(test_model_grad test_model_grad.c)
ob_add_unit_test(test_model_math test_model_math.c)
target_include_directories(test_model_math PRIVATE ${PROJECT_SOURCE_DIR}/engine/src)
