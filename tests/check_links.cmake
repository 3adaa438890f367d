# cmake -DBINARY=<program> -DLIBRARY=<static library> -DNM=<nm> -P check_links.cmake
#
# Fails when the program loads, or the library refers to, any of the engine's heavy
# dependencies: MPI, BLAS, CUDA (cudart, cuBLAS), NCCL, and for the library HDF5 too. Run on
# onebitd and onebit_jobspec (test_jobspec_standalone): the coordinator validates job specs
# without the training engine.
foreach(v BINARY LIBRARY NM)
  if(NOT ${v})
    message(FATAL_ERROR "check_links.cmake: -D${v}= is required")
  endif()
endforeach()

# What the dynamic loader resolves for the program, its libraries' dependencies included.
execute_process(COMMAND ldd ${BINARY} OUTPUT_VARIABLE libs ERROR_VARIABLE lerr
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${BINARY} failed (${rc}): ${lerr}")
endif()
string(REGEX MATCHALL "lib(openblas|blas|cblas|mpi|cudart|cublas|cublasLt|nccl)[^ \t\n]*" bad
       "${libs}")
list(REMOVE_DUPLICATES bad)
if(bad)
  message(FATAL_ERROR "${BINARY} loads ${bad}; it must link onebit_jobspec, not the engine:\n"
                      "${libs}")
endif()

# Symbols the library leaves for others to define.
execute_process(COMMAND ${NM} -u ${LIBRARY} OUTPUT_VARIABLE syms ERROR_VARIABLE nerr
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -u ${LIBRARY} failed (${rc}): ${nerr}")
endif()
string(REGEX MATCHALL "U (cblas_|sgemm_|MPI_|PMPI_|ompi_|cuda|cublas|nccl|H5)[A-Za-z0-9_]*" refs
       "${syms}")
list(REMOVE_DUPLICATES refs)
if(refs)
  message(FATAL_ERROR "${LIBRARY} refers to ${refs}: onebit_jobspec must stand without MPI, "
                      "BLAS, CUDA, NCCL and HDF5")
endif()
if(NOT syms MATCHES "U ob_|T ob_jobspec_parse")
  message(FATAL_ERROR "nm -u ${LIBRARY} printed nothing recognisable:\n${syms}")
endif()
message(STATUS "${BINARY}: no MPI, BLAS, CUDA or NCCL; ${LIBRARY}: none of them referred to")
