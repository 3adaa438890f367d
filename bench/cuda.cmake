# GPU benchmark: compression kernels against a device-to-device copy of the same bytes, and
# the compressed allreduce against ncclAllReduce. Built only with CUDA.
if(ONEBIT_HAVE_CUDA)
  add_executable(bench_compress_cuda bench_compress_cuda.c)
  target_link_libraries(bench_compress_cuda PRIVATE onebit)
endif()
