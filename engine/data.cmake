# Datasets and per-rank data loaders (onebit/data.h): IDX files through zlib, byte-level text,
# seeded synthetic data. Included from engine/CMakeLists.txt, which links zlib.
list(APPEND ONEBIT_ENGINE_SOURCES
  src/data.c
  src/data_idx.c
  src/data_text.c
  src/data_synth.c
)
