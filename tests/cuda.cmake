# GPU tests: the CUDA kernels and the device pass of the models against the CPU, and the NCCL
# communicator and the compressed allreduce on it against the MPI/CPU path. Included only in a
# build with CUDA (tests/CMakeLists.txt); without a usable device (or, for NCCL, with more ranks
# than GPUs) they exit 77 and ctest reports them skipped.
ob_add_unit_test(test_compress_cuda test_compress_cuda.c)
set_tests_properties(test_compress_cuda PROPERTIES SKIP_RETURN_CODE 77)

# The device pass of the softmax/MLP models against the CPU pass.
ob_add_unit_test(test_model_cuda test_model_cuda.c)
set_tests_properties(test_model_cuda PROPERTIES SKIP_RETURN_CODE 77)

ob_add_mpi_test(test_car_nccl test_car_nccl.c NP 1 2)
set_tests_properties(test_car_nccl_np1 test_car_nccl_np2 PROPERTIES SKIP_RETURN_CODE 77)
