/* The training job spec: what one data-parallel job trains (model, data, optimizer, batch size,
 * steps, learning-rate schedule, seed, evaluation, logging, checkpoints), written as JSON or as
 * YAML.
 *
 * Both formats map onto the same tree: YAML is read into the JSON data model (plain scalars
 * typed by the YAML 1.2 core schema: null/~, true/false, integers, finite floats such as 1e-3;
 * quoted scalars are strings; .inf/.nan, anchors, aliases, tags and multi-document streams are
 * rejected), and one validator walks that tree. The validator is strict: an unknown or
 * misspelled field, a field of another model/data/optimizer type, a value of the wrong type or
 * out of range, a missing required field, and a model that does not fit the data are rejected
 * with a message that names the field by its path ("optimizer.betta1: unknown field",
 * "batch_size: expected a positive integer, got \"64\""). Syntax errors name the line and
 * column. Duplicate keys are rejected in both formats. A rejected spec changes nothing: the
 * output struct is written only on success.
 *
 * Schema (defaults in brackets, ? marks an optional field):
 *
 *   name?          string [""]: at most 127 characters from [A-Za-z0-9._-]
 *   model:
 *     type         softmax | mlp | transformer                                     (required)
 *     hidden?      mlp: list of 1..8 widths > 0 [[256, 128]]
 *     activation?  mlp: relu | tanh | gelu [relu]
 *     layers?      transformer [2]        heads?   transformer [4] (must divide d_model)
 *     d_model?     transformer [128]      context? transformer [128]
 *     tied_output? transformer, bool [true]
 *   data:
 *     type         fashion_mnist | idx | text | synthetic_classification | synthetic_text
 *                                                                                  (required)
 *     path?        fashion_mnist: directory [OB_FASHION_MNIST_DIR]; idx: directory holding the
 *                  four standard IDX names (required); text: file or directory [OB_FORTUNES_DIR]
 *     normalize?   fashion_mnist, idx: standardize | unit [standardize]
 *     eval_fraction? text, in (0, 1) [0.1]          max_bytes? text, 0 = no cap [0]
 *     n_train? [4096] n_eval? [1024] input_dim? [32] num_classes? [4] noise? [1.0]
 *                  synthetic_classification
 *     train_bytes? [200000] eval_bytes? [20000] alphabet? [16] p_follow? [0.8]
 *                  synthetic_text (train_bytes >= 2 * model.context, eval_bytes > model.context)
 *     softmax and mlp need fashion_mnist, idx or synthetic_classification; the transformer
 *     needs text or synthetic_text. Synthetic data is drawn from the job's seed.
 *   optimizer:
 *     type         adam | onebit_adam | binsgdm | softsign                         (required)
 *     beta1? eps? weight_decay?  [ob_optim_config_default]
 *     beta2? bias_correction? (bool)  adam and onebit_adam only
 *     gradient_exchange? fp32 | fp16 | fp8 [fp8 for onebit_adam, else fp32]  every type but binsgdm
 *     bucket_mb?   MiB in [0, 1024] [4 with overlap, else 0; a transformer's onebit_adam
 *                  naming neither: ob_optim_default_transformer_overlap]: the gradient
 *                  exchange (adam, the warmup) runs in
 *                  buckets of whole tensors of at least this size, last layers first; 0: one
 *                  bucket (optim.bucket_bytes); device: cuda keeps one NCCL allreduce
 *     overlap?     bool [false; true, in buckets of OB_OVERLAP_TRANSFORMER_BUCKET_BYTES, for a
 *                  transformer's onebit_adam naming neither overlap nor bucket_mb whose
 *                  parameters fill two: ob_optim_default_transformer_overlap]: exchange each
 *                  bucket on a communication thread as soon as the backward pass has finished
 *                  it (same bits as false); device: cpu only
 *     binsgdm only (1 bit from the first step: onebit/optim.h):
 *       block_size?       multiple of 32 [256]: rounds the padding up to ranks x block_size
 *       max_denominator_step? integer >= 0 [0: never]: b a running maximum after this step
 *                         (the job's seed draws the quantisers' signs)
 *     onebit_adam only:
 *       compression?      on | off | naive [on] (OB_ONEBIT_COMPRESSED, _UNCOMPRESSED, _NAIVE)
 *       freeze_step?      "auto" | integer > 0 ["auto", stored as 0; OB_TRACK_MLP_FREEZE for
 *                         a softmax or mlp model, whatever its LR warmup:
 *                         ob_optim_default_mlp_tracking]
 *       freeze_threshold? [0.96]   freeze_min_steps? [0]   block_size? [2048]
 *       freeze_max_fraction? in [0, 1] [OB_FREEZE_MAX_FRACTION; 0 with stabilizer none]: an
 *                         auto freeze comes at the latest at step max(ceil(fraction * steps),
 *                         max(lr.warmup_steps, freeze_min_steps) + 2 lags); 0: no limit
 *       scale?            l1 | l2 [l1]
 *       precondition?     bool [false]
 *       stabilizer?       adam_bound | none [adam_bound] (OB_STABILIZER_*): none is the paper's
 *                         exact frozen step, which diverges where v_Tw is tiny
 *       stability_bound?  c > 0, or 0 [0]: (1 - beta1) / sqrt(1 - beta2)
 *       frozen_step_ratio? r in [1, 1e6], or 0 [0]: OB_FROZEN_STEP_RATIO (none with stabilizer
 *                         none): the frozen steps at most r times those of v_hat at the freeze
 *       refresh_steps?    [0]: re-estimates of v after the freeze (ob_optim_config)
 *       track_variance?   K in [0, OB_OPTIM_MAX_TRACK_INTERVAL] [ob_optim_default_track_variance:
 *                         OB_TRACK_DEFAULT_INTERVAL with an LR warmup of at least
 *                         OB_TRACK_DEFAULT_MIN_WARMUP steps and neither precondition,
 *                         refresh_steps, a fixed freeze_step, stabilizer none nor a
 *                         warm_start (a softmax or mlp model: whatever the LR warmup, below);
 *                         else 0, off]: v re-estimated every
 *                         K compression steps from every rank's own statistics, the auto
 *                         freeze at max(lr.warmup_steps, freeze_min_steps, K) (ob_optim_config)
 *       track_factor?     (0, 100], or 0 [0]: OB_TRACK_FACTOR, the estimate's factor
 *                         [OB_TRACK_MLP_FACTOR for a softmax or mlp model]
 *     A softmax or mlp model whose optimizer names none of freeze_step, track_variance and
 *     track_factor, where the tracked default applies but for the LR warmup (any length, none
 *     included): tracked every OB_TRACK_DEFAULT_INTERVAL steps, frozen at OB_TRACK_MLP_FREEZE
 *     with the factor OB_TRACK_MLP_FACTOR (ob_optim_default_mlp_tracking); the canonical spec
 *     names all three.
 *     optim.lr_warmup_steps is set from lr.warmup_steps (the auto-freeze guard).
 *   batch_size     per-rank examples per step, 1 .. 2^24                           (required)
 *   steps          optimizer steps, > 0                                            (required)
 *   lr?:
 *     schedule?    constant | warmup_step_decay | cosine [constant]
 *     peak? [1e-3]  warmup_steps? [0]
 *     decay_rate? [0.99]  decay_every? [520]   warmup_step_decay only
 *     min_lr? [0]                              cosine only
 *     lr.total_steps is set from steps.
 *   seed?          integer in [0, 2^63 - 1] [1]
 *   eval?:         { interval? [0: only at the end], max_examples? [0: the whole eval split] }
 *   log_interval?  steps between progress logs, > 0 [10]
 *   checkpoint?:   { dir? [""], interval? [0: none], keep? [3], >= 1, async? [false],
 *                  rollbacks? 0..100 [2], loss_rise? 0 or 1.5..1000 [2] }
 *                  dir is the root: the worker writes under <dir>/<job id>/ (onebit/checkpoint.h);
 *                  with a directory the worker also saves at the end and when stopped by
 *                  SIGTERM; async writes in a background thread while training goes on;
 *                  rollbacks: when the loss stops being finite, the ranks go back to the newest
 *                  checkpoint, re-estimate v by Adam (onebit_adam: ob_optim_rewarm, ceil(Delta
 *                  / 2) steps) and carry on, at most this many times in the job (0: exit 3);
 *                  loss_rise: in the compression phase a rise of the train loss counts as a
 *                  divergence too: its moving average (the mean over the ranks, about the
 *                  last 10 steps) above loss_rise times its lowest since the freeze and above
 *                  its level at the freeze (0: only a loss that is not finite counts; without
 *                  a rollback left, a rise is a warning)
 *   warm_start?:   { from (required): a checkpoint directory (step-XXXXXXXX) or a job's
 *                  checkpoint directory (its newest valid checkpoint), params? [false],
 *                  refit_steps? auto | 0..1000000 [auto], refit_exchange? fp16 | fp32 [fp16] }
 *                  onebit_adam (compression on or off) only: the job takes the checkpoint's
 *                  frozen variance v_Tw (and with params: true its parameters), re-estimates
 *                  it with refit_steps Adam steps (auto: ceil(Delta / 5), 20 at beta2 0.99;
 *                  ceil(Delta / 2) when the source ran another global batch or peak
 *                  learning rate; their
 *                  gradients cross as refit_exchange says, whatever gradient_exchange says),
 *                  or none with 0, and then compresses; a v_Tw that does not fit the job's
 *                  first gradients is refused and the job warms up as from scratch
 *                  (onebit/optim.h, ob_optim_warm_start)
 *   device?        cpu | cuda [cpu]: where the model and the optimizer run. cuda: each rank
 *                  trains on the GPU of its node-local rank (modulo the node's GPUs), keeps
 *                  parameters, gradients and optimizer state on it and exchanges gradients
 *                  and momentum over NCCL; softmax and mlp only. A job may resume on the
 *                  other device: device is not part of what a checkpoint must match.
 *
 * A program job instead of a built-in model: the user's own training script (a PyTorch program
 * on `import onebit`, engine/python), run by onebit-worker on every rank, which execs it in
 * place of itself before MPI starts, so that it joins the job's MPI world:
 *
 *   name?          as above
 *   program:
 *     entrypoint   the script, relative to workdir or absolute                       (required)
 *     args?        list of at most 256 strings [[]] (at most 16 KiB in all)
 *     workdir?     absolute directory the script runs in [the worker's]
 *     env?         mapping of at most 64 variables [A-Za-z_][A-Za-z0-9_]* to strings (8 KiB in
 *                  all); not ONEBIT_*, OMPI_*, PMIX_*, LD_* nor PATH, which are the launcher's
 *     interpreter? the program that runs the entrypoint ["python3"]
 *   steps?         the program's steps, for progress [0: unknown]
 *   seed?          as above, passed as ONEBIT_SEED
 *
 * No other field: the model, data, optimizer and checkpoints are the program's own
 * (onebit.torch.save/load under $ONEBIT_CHECKPOINT_DIR).
 *
 * Fields the spec does not set: model.input_dim and model.num_classes come from the dataset
 * and model.max_batch from batch_size; the worker fills them in (a parsed spec holds 0 there).
 * Fields that do not apply to the chosen kinds hold the defaults of ob_model_config_default,
 * ob_optim_config_default and ob_lr_schedule_default for the chosen kind, or 0 in ob_data_spec,
 * so that equal specs are memcmp-equal structs. */
#ifndef ONEBIT_JOBSPEC_H
#define ONEBIT_JOBSPEC_H

#include "onebit/data.h"
#include "onebit/model.h"
#include "onebit/optim.h"
#include "onebit/schedule.h"
#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OB_JOBSPEC_MAX_BYTES ((size_t)1 << 20) /* largest spec text accepted: 1 MiB */
#define OB_JOBSPEC_NAME_LEN 128                /* name buffer, terminator included */
#define OB_JOBSPEC_PATH_LEN 4096               /* path buffers, terminator included */
#define OB_JOBSPEC_MAX_REFIT 1000000L          /* warm_start.refit_steps */

typedef enum ob_data_kind {
    OB_DATA_FASHION_MNIST = 0,        /* IDX files in a directory, default OB_FASHION_MNIST_DIR */
    OB_DATA_IDX = 1,                  /* IDX files in a named directory */
    OB_DATA_TEXT = 2,                 /* bytes of a file or directory, default OB_FORTUNES_DIR */
    OB_DATA_SYNTH_CLASSIFICATION = 3, /* ob_dataset_synthetic_classification */
    OB_DATA_SYNTH_TEXT = 4,           /* ob_dataset_synthetic_text */
} ob_data_kind;

/* Where the job's data comes from. Fields that do not apply to `kind` are 0. */
typedef struct ob_data_spec {
    ob_data_kind kind;
    char path[OB_JOBSPEC_PATH_LEN]; /* fashion_mnist, idx, text */
    ob_feature_norm norm;           /* fashion_mnist, idx */
    double eval_fraction;           /* text */
    size_t max_bytes;               /* text, 0 = no cap */
    /* synthetic_classification: every field; seed = the job's seed. */
    ob_synth_classification_spec synth_cls;
    /* synthetic_text: every field; context = model.context, seed = the job's seed. */
    ob_synth_text_spec synth_text;
} ob_data_spec;

typedef enum ob_device {
    OB_DEVICE_CPU = 0,
    OB_DEVICE_CUDA = 1,
} ob_device;

#define OB_PROGRAM_MAX_ARGS 256
#define OB_PROGRAM_MAX_ENV 64
#define OB_PROGRAM_ARGS_LEN 16384 /* program.args as canonical JSON, terminator included */
#define OB_PROGRAM_ENV_LEN 8192   /* program.env likewise */
#define OB_PROGRAM_INTERPRETER "python3"

/* A program job's program (entrypoint "" for a built-in model's job). */
typedef struct ob_program_spec {
    char entrypoint[OB_JOBSPEC_PATH_LEN];
    char workdir[OB_JOBSPEC_PATH_LEN];     /* "": the worker's working directory */
    char interpreter[OB_JOBSPEC_PATH_LEN]; /* OB_PROGRAM_INTERPRETER unless given */
    char args_json[OB_PROGRAM_ARGS_LEN];   /* a JSON array of strings, compact: "[]" for none */
    char env_json[OB_PROGRAM_ENV_LEN];     /* a JSON object of strings, compact: "{}" for none */
} ob_program_spec;

typedef struct ob_jobspec {
    char name[OB_JOBSPEC_NAME_LEN];
    /* A program job (program.entrypoint non-empty): only name, steps (0: unknown), seed and
     * program mean anything; the other fields hold their defaults. */
    ob_program_spec program;
    ob_model_config model; /* kind and architecture; input_dim, num_classes, max_batch are 0 */
    ob_data_spec data;
    ob_optim_config optim; /* lr_warmup_steps = lr.warmup_steps */
    ob_lr_schedule lr;     /* total_steps = steps */
    size_t batch_size;     /* per rank */
    long steps;
    uint64_t seed;
    long eval_interval;       /* 0: evaluate only at the end */
    size_t eval_max_examples; /* 0: the whole eval split */
    long log_interval;
    char checkpoint_dir[OB_JOBSPEC_PATH_LEN]; /* "" : the coordinator decides */
    long checkpoint_interval;                 /* 0: no checkpoints */
    int checkpoint_keep;
    int checkpoint_async;                      /* write in a background thread */
    int checkpoint_rollbacks;                  /* after a divergence, at most this many */
    double checkpoint_loss_rise;               /* a rise of the loss by this factor: 0 off */
    char warm_start_from[OB_JOBSPEC_PATH_LEN]; /* "" : no warm start */
    int warm_start_params;                     /* also take the parameters */
    long warm_start_refit_steps;               /* -1: auto (ob_optim_auto_refit_steps) */
    double freeze_max_fraction; /* onebit_adam: sets optim.freeze_max_step (the auto freeze) */
    ob_device device;
} ob_jobspec;

/* The spec before any field is read: every optional field at its default (model mlp, data
 * fashion_mnist, optimizer adam, the kinds' defaults), batch_size and steps 0 (required, so a
 * defaulted spec alone is not valid). s is caller-owned; padding bytes are zeroed. */
void ob_jobspec_default(ob_jobspec *s);

typedef enum ob_spec_format {
    OB_SPEC_AUTO = 0, /* JSON if the first character other than white space is '{', else YAML */
    OB_SPEC_JSON = 1,
    OB_SPEC_YAML = 2,
} ob_spec_format;

/* Parses and validates a spec of len bytes at text (borrowed; need not be NUL-terminated; at most
 * OB_JOBSPEC_MAX_BYTES). On success *out (caller-owned) receives the spec with every default
 * filled in. On failure returns OB_ERR_INVALID_ARG (OB_ERR_NOMEM when memory runs out), err
 * names the field or the line and column, and *out is not touched. err may be NULL. */
ob_status ob_jobspec_parse(ob_jobspec *out, const char *text, size_t len, ob_spec_format fmt,
                           ob_err *err);

/* Reads the file at path (borrowed) and parses it: JSON for a ".json" name, YAML for ".yaml" or
 * ".yml", else OB_SPEC_AUTO. Errors as ob_jobspec_parse, with the path in front of the message,
 * plus OB_ERR_NOT_FOUND (no such file), OB_ERR_IO (unreadable, not a regular file) and
 * OB_ERR_INVALID_ARG (larger than OB_JOBSPEC_MAX_BYTES). *out is written only on success. */
ob_status ob_jobspec_load(ob_jobspec *out, const char *path, ob_err *err);

/* Canonical JSON of a spec: one line, every field of the chosen kinds with its value (defaults
 * filled in), keys in schema order, numbers in the fewest digits that read back exactly. For a
 * struct from ob_jobspec_parse, parsing the text back gives a memcmp-identical struct.
 * On success *out is a NUL-terminated string from malloc, owned by the caller (free()).
 * OB_ERR_INVALID_ARG when s is not a valid spec (the output is checked by the same validator),
 * OB_ERR_NOMEM; *out is then NULL. */
ob_status ob_jobspec_to_json(const ob_jobspec *s, char **out, ob_err *err);

/* 1 for a program job's spec (program.entrypoint set). */
static inline int ob_jobspec_is_program(const ob_jobspec *s)
{
    return s->program.entrypoint[0] != 0;
}

/* Spec names of the kinds ("fashion_mnist", ..., "synthetic_text"); "unknown" otherwise. */
const char *ob_data_kind_name(ob_data_kind kind);

/* What one rank of a job needs in host memory, in bytes, by category (ob_jobspec_memory_estimate).
 * d is the model's parameter count, N the ranks, B the per-rank batch size. */
typedef struct ob_memory_estimate {
    uint64_t params;      /* parameters and gradients: 2 d floats */
    uint64_t optimizer;   /* m, v, the exchange buffer, the denominator: 4 d floats; onebit_adam
                           * compressed adds the worker error (d), the server error chunk (d/N)
                           * and the packed signs and scales of the messages (about d/4 bytes) */
    uint64_t activations; /* B times the model's activations for one example (the transformer's
                           * grow with context and layers) */
    uint64_t data;        /* the data set as the worker holds it: features as floats, text bytes */
    uint64_t base;        /* the worker process itself: libraries, MPI, buffers
                           * (OB_MEMORY_BASE_BYTES) */
    uint64_t total;       /* the sum, saturating at UINT64_MAX */
} ob_memory_estimate;

#define OB_MEMORY_BASE_BYTES ((uint64_t)64 << 20)

/* Estimates a rank's memory for spec (borrowed, as ob_jobspec_parse made it) on world_size ranks,
 * from the model's real sizes (a model is created for one example to read its parameter count
 * and activations) and the data set's (synthetic data from its spec; fashion_mnist 70000 images
 * of 784 features; idx and text from the sizes of their files, text capped at max_bytes);
 * OB_ERR_UNSUPPORTED for a program job, whose memory is its program's. A
 * stated estimate, not a bound: allocator slack and MPI's own buffers are in base. Within 25 %
 * of the measured growth of a process that builds the same buffers (test_jobspec). */
ob_status ob_jobspec_memory_estimate(const ob_jobspec *spec, int world_size,
                                     ob_memory_estimate *out, ob_err *err);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_JOBSPEC_H */
