# The models (onebit/model.h). Their plan (configuration checks, tensor tables, gradient parts,
# activation layouts, create/destroy: model.c, model_*_build.c) goes into onebit_jobspec
# (jobspec.cmake), whose memory estimate creates the very model a worker would; running them
# (the passes, the layers, gemm with OpenBLAS, the CUDA model's creation) stays in the engine.
set(ONEBIT_MODEL_PLAN_SOURCES src/model.c src/model_mlp_build.c src/model_transformer_build.c)
list(APPEND ONEBIT_ENGINE_SOURCES src/model_run.c src/model_layers.c src/gemm.c src/model_mlp.c
     src/model_transformer.c)
