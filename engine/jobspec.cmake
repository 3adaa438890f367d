# onebit_jobspec: the job spec (onebit/jobspec.h), one parser for JSON (jansson) and YAML
# (libyaml), with exactly what it needs of the engine: the optimizer's configuration
# (optim_config.c), the LR schedules' (schedule.c) and the models' plan (models.cmake's
# ONEBIT_MODEL_PLAN_SOURCES) for the memory estimate. No MPI, BLAS, CUDA, NCCL or HDF5: the
# coordinator validates specs with it alone, and libonebit links it for everyone else.
# jobspec.c holds the defaults, the validator and parse/load; the field reader, the YAML
# converter, the JSON writer, the memory estimate and program jobs are files of their own.
add_library(onebit_jobspec STATIC
  src/jobspec.c
  src/jobspec_fields.c
  src/jobspec_yaml.c
  src/jobspec_json.c
  src/jobspec_memory.c
  src/jobspec_program.c
  src/optim_config.c
  src/schedule.c
  ${ONEBIT_MODEL_PLAN_SOURCES}
)
target_include_directories(onebit_jobspec PUBLIC include PRIVATE src)
target_link_libraries(onebit_jobspec PUBLIC onebit_base m PRIVATE PkgConfig::JANSSON PkgConfig::YAML)
