# The job spec (onebit/jobspec.h): one parser for JSON (jansson) and YAML (libyaml), both
# already linked into libonebit by engine/CMakeLists.txt. jobspec.c holds the defaults, the
# validator and parse/load; the field reader, the YAML converter and the JSON writer are files
# of their own.
list(APPEND ONEBIT_ENGINE_SOURCES src/jobspec.c src/jobspec_fields.c src/jobspec_yaml.c
     src/jobspec_json.c src/jobspec_memory.c src/jobspec_program.c)
