# The job spec (onebit/jobspec.h): one parser for JSON (jansson) and YAML (libyaml), both
# already linked into libonebit by engine/CMakeLists.txt.
list(APPEND ONEBIT_ENGINE_SOURCES src/jobspec.c)
