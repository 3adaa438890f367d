# The Python front end (engine/python): the package from the build tree under Debian's system
# python3 with its python3-torch. test_py_parity_*: onebit.torch's optimizers against the engine's
# own on the same gradients, bit for bit, on 1, 2 and 4 ranks; test_py_frontend: validation,
# bad input, checkpoints; test_py_mlp_curves_*: torch's MLP against the engine's, end to end;
# test_py_resume: a rank killed mid-run, resumed, the same bits as an
# uninterrupted run; test_py_install: `import onebit` in a clean python3 after
# scripts/install-python.sh.
if(NOT TARGET onebit_py)
  return() # sanitizer and fuzz builds make no Python binding
endif()
find_program(OB_TORCH_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH REQUIRED)
set(OB_PY_PATH ${CMAKE_BINARY_DIR}/python)
set(OB_PY_TEST_ENV ${OB_MPI_TEST_ENV} "PYTHONPATH=${OB_PY_PATH}" "ONEBIT_PROGRESS=off")

add_executable(test_py_replay test_py_replay.c)
target_link_libraries(test_py_replay PRIVATE onebit m)
target_include_directories(test_py_replay PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
# The engine's initial parameters and every rank's batches of a classification job, for a torch
# model to train from the same place (tests/python/mlp_curves.py, bench/python/mlp_curves.sh).
add_executable(py_engine_export py_engine_export.c)
target_link_libraries(py_engine_export PRIVATE onebit)

foreach(kind onebit_adam adam)
  foreach(np 1 2 4)
    if(kind STREQUAL "adam" AND NOT np EQUAL 2)
      continue()
    endif()
    add_test(NAME test_py_parity_${kind}_np${np}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/run_parity.sh ${OB_TORCH_PYTHON}
                     $<TARGET_FILE:test_py_replay> ${OB_PY_PATH} ${np} ${kind})
    set_tests_properties(test_py_parity_${kind}_np${np} PROPERTIES ENVIRONMENT "${OB_PY_TEST_ENV}"
                         TIMEOUT 600 PROCESSORS 2)
  endforeach()
endforeach()

# End to end: torch's MLP (nn.Linear layers) from the engine's initial parameters on the
# engine's batches, stepped by onebit.torch.OnebitAdam, against onebit-worker's built-in MLP on
# the same spec: the loss curves agree to rounding before the 1-bit freeze and closely after it
# (bench/python/mlp_curves.sh measures how closely, against the engine's own two GEMM kernels).
foreach(np 1 2)
  add_test(NAME test_py_mlp_curves_np${np}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/run_mlp_curves.sh ${OB_TORCH_PYTHON}
                   $<TARGET_FILE:py_engine_export> $<TARGET_FILE:onebit-worker> ${OB_PY_PATH}
                   ${np})
  set_tests_properties(test_py_mlp_curves_np${np} PROPERTIES ENVIRONMENT "${OB_PY_TEST_ENV}"
                       TIMEOUT 120 PROCESSORS 2)
endforeach()

add_test(NAME test_py_frontend
         COMMAND ${OB_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_frontend.py
                 ${CMAKE_BINARY_DIR})
set_tests_properties(test_py_frontend PROPERTIES ENVIRONMENT "${OB_PY_TEST_ENV}" TIMEOUT 300)

# optimizer.overlap from the front end: hooks on the gradients' accumulation start the exchange
# during the backward pass; OnebitAdam, Adam and BinSGDM end with the same bits as exchanging the
# same buckets in step(), with no_sync() accumulation and gradients torch allocated itself.
add_test(NAME test_py_overlap_np2
         COMMAND ${MPIEXEC_EXECUTABLE} -np 2 --oversubscribe -x PYTHONPATH -x ONEBIT_PROGRESS
                 ${OB_TORCH_PYTHON}
                 ${CMAKE_CURRENT_SOURCE_DIR}/python/overlap_check.py)
set_tests_properties(test_py_overlap_np2 PROPERTIES ENVIRONMENT "${OB_PY_TEST_ENV}" TIMEOUT 300
                     PROCESSORS 2)

add_test(NAME test_py_resume_np2
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/test_resume.sh ${OB_TORCH_PYTHON} ${OB_PY_PATH} 2)
set_tests_properties(test_py_resume_np2 PROPERTIES ENVIRONMENT "${OB_PY_TEST_ENV}" TIMEOUT 600
                     PROCESSORS 2)

# examples/pytorch/gpt.py's comparison modes (bench/peers/program.sh): DDP over gloo (fp32, the
# fp16 hook) and OnebitAdam with --option, stopped by --target-loss; the closing lines the
# benchmark reads; bad --option values refused.
add_test(NAME test_py_gpt_example
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/test_gpt_example.sh ${OB_TORCH_PYTHON}
                 ${OB_PY_PATH})
set_tests_properties(test_py_gpt_example PROPERTIES ENVIRONMENT "${OB_PY_TEST_ENV}" TIMEOUT 300
                     PROCESSORS 2)

# The README's install step (scripts/install-python.sh) made the system's python3 import this
# build's package from any directory, without PYTHONPATH.
add_test(NAME test_py_install
         COMMAND sh -c "cd / && env -u PYTHONPATH ${OB_TORCH_PYTHON} -c \"import onebit, onebit.torch, sys; f = onebit.__file__; sys.exit(0 if f.startswith('${OB_PY_PATH}/') else 'onebit imports from ' + f + ', not this build: run scripts/install-python.sh')\"")
set_tests_properties(test_py_install PROPERTIES TIMEOUT 120)

# Program jobs: onebitd runs tests/python/train_small.py through the real worker under mpirun
# (onebitctl submit --program), restarts a killed rank from its checkpoint to the same bits, and
# does not retry a program that fails deterministically.
add_test(NAME test_program_jobs
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/test_program_jobs.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> $<TARGET_FILE:onebitctl> ${OB_PY_PATH})
set_tests_properties(test_program_jobs PROPERTIES TIMEOUT 600 PROCESSORS 2)
# Chaos for program jobs: train_small.py on 4 ranks, once uninterrupted, then with five ranks
# (their python processes) and onebitd SIGKILLed at random moments (ONEBIT_CHAOS_SEED repeats
# a run's choices): SUCCEEDED, a restart per killed rank, the lost attempt's ranks stopped by
# the restarted onebitd, and a final checkpoint byte-identical to the uninterrupted run's.
add_test(NAME test_program_chaos
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/test_program_chaos.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> $<TARGET_FILE:onebitctl> $<TARGET_FILE:onebit-ckpt>
                 ${OB_PY_PATH})
set_tests_properties(test_program_chaos PROPERTIES TIMEOUT 600 PROCESSORS 2)
# Uploaded program jobs: onebitctl submit --program / --program-dir sends the files with the
# job from a directory outside every data root; stored with the job, run and restarted from the
# stored copy, removed with it; hostile uploads refused at submit over gRPC and REST.
add_test(NAME test_program_upload
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/test_program_upload.sh $<TARGET_FILE:onebitd>
                 $<TARGET_FILE:obrpc> $<TARGET_FILE:onebitctl> ${OB_PY_PATH})
set_tests_properties(test_program_upload PROPERTIES TIMEOUT 600 PROCESSORS 2)
