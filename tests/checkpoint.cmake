# Checkpoint library: real HDF5 files in a temporary directory.
add_executable(test_checkpoint test_checkpoint.c)
target_link_libraries(test_checkpoint PRIVATE onebit_checkpoint PkgConfig::CMOCKA ${HDF5_C_LIBRARIES} m)
target_include_directories(test_checkpoint SYSTEM PRIVATE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
# Paths are built from a short temporary root; truncation cannot happen there.
target_compile_options(test_checkpoint PRIVATE -Wno-format-truncation)
add_test(NAME test_checkpoint COMMAND test_checkpoint)
set_tests_properties(test_checkpoint PROPERTIES TIMEOUT 300)

# Checkpoints through the real worker under mpirun: resume after kills, SIGTERM, async, damage,
# warm start, resize.
add_test(NAME test_resume
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_resume.sh $<TARGET_FILE:onebit-worker>
                 $<TARGET_FILE:onebit-ckpt> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_resume PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 900
                     PROCESSORS 2)

# optimizer.ranks_per_node "auto" through the real worker: 2 "nodes" of 2 ranks from
# ONEBIT_RANKS_PER_NODE against ranks_per_node 2, one node and uneven nodes against flat, bit for
# bit; an auto job resumed under another shape.
add_test(NAME test_ranks_auto
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_ranks_auto.sh $<TARGET_FILE:onebit-worker>
                 $<TARGET_FILE:onebit-ckpt> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_ranks_auto PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2)

# Named tensors: a trained job's checkpoint read with h5py, exported to npz and safetensors and
# read back with numpy; a hostile tensor index refused (python3-h5py, python3-numpy).
add_test(NAME test_export
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_export.sh $<TARGET_FILE:onebit-worker>
                 $<TARGET_FILE:onebit-ckpt> ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_export PROPERTIES ENVIRONMENT "${OB_MPI_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2)
