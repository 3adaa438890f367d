# Engine core: compression kernels, optimizers, communicators and the compressed allreduce.
ob_add_unit_test(test_compress test_compress.c)
# The fp16 message's conversions are private arithmetic (src/f16_math.h): tested directly.
ob_add_unit_test(test_f16 test_f16.c)
target_include_directories(test_f16 PRIVATE ${PROJECT_SOURCE_DIR}/engine/src)
ob_add_unit_test(test_adam test_adam.c)
ob_add_unit_test(test_freeze test_freeze.c)
ob_add_unit_test(test_schedule test_schedule.c)
ob_add_mpi_test(test_car_mpi test_car_mpi.c NP 1 2 3 4 5)
ob_add_mpi_test(test_f16sum_mpi test_f16sum_mpi.c NP 1 2 3 4)
# BinSGDM against the paper's Algorithm 1, and its stochastic unit-sign quantiser.
ob_add_mpi_test(test_binsgdm_mpi test_binsgdm_mpi.c NP 1 2 3 4)
ob_add_mpi_test(test_track_mpi test_track_mpi.c NP 2 4)
# The hierarchical compressed allreduce against its algorithm, every ranks_per_node.
ob_add_mpi_test(test_car_hier_mpi test_car_hier_mpi.c NP 2 4 6)
ob_add_mpi_test(test_adam_overlap test_adam_overlap.c NP 1 2 4)
# The same with the backward pass giving up the processor at most 0 and 1000 times at each
# tensor boundary (ONEBIT_OVERLAP_YIELDS, default 16): timing only, the same bits.
foreach(y 0 1000)
  add_test(NAME test_adam_overlap_yields${y}_np2
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe
                   $<TARGET_FILE:test_adam_overlap>)
  set_tests_properties(test_adam_overlap_yields${y}_np2 PROPERTIES
                       ENVIRONMENT "${OB_MPI_TEST_ENV};ONEBIT_OVERLAP_YIELDS=${y}" TIMEOUT 600
                       PROCESSORS 2)
endforeach()
ob_add_mpi_test(test_adam_overlap_fallback test_adam_overlap_fallback.c NP 2)
set_tests_properties(test_adam_overlap_fallback_np2 PROPERTIES SKIP_RETURN_CODE 77)

# The optimizer kernels: CPU kernels against the formulas everywhere, the CUDA kernels against
# the CPU kernels where a device exists (77 otherwise, after the no-device checks). Built in
# every configuration, with or without CUDA.
ob_add_unit_test(test_optim_cuda test_optim_cuda.c)
set_tests_properties(test_optim_cuda PROPERTIES SKIP_RETURN_CODE 77)
