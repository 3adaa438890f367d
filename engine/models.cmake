list(APPEND ONEBIT_ENGINE_SOURCES src/model.c src/model_layers.c src/gemm.c src/model_mlp.c src/model_transformer.c)
