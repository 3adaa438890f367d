/* The models onebit trains: softmax regression, a multi-layer perceptron and a decoder-only
 * byte-level transformer language model, each a CPU forward + backward pass over one flat
 * float32 parameter buffer. Softmax regression and the MLP can also run on a CUDA device
 * (ob_model_create_cuda), with parameters and gradients in device memory.
 *
 * The model object owns only its shape and its activation memory; parameters and gradients
 * live in buffers the caller owns (the optimizer and the communicators work on those flat
 * buffers directly). ob_model_num_params() gives their length, and the tensor table
 * (ob_model_num_tensors / ob_model_tensor_at) names every tensor inside them.
 *
 * A model object holds the activations of its last call, so one thread at a time may use it;
 * separate model objects are independent. */
#ifndef ONEBIT_MODEL_H
#define ONEBIT_MODEL_H

#include "onebit/batch.h"
#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque: the model's shape and its activation memory. */
typedef struct ob_model ob_model;

typedef enum ob_model_kind {
    OB_MODEL_SOFTMAX = 0,     /* softmax regression: logits = x W^T + b */
    OB_MODEL_MLP = 1,         /* hidden layers with an activation, then a softmax output layer */
    OB_MODEL_TRANSFORMER = 2, /* decoder-only byte language model (vocabulary of 256) */
} ob_model_kind;

typedef enum ob_activation {
    OB_ACT_RELU = 0,
    OB_ACT_TANH = 1,
    OB_ACT_GELU = 2, /* tanh approximation, as in GPT-2 */
} ob_activation;

#define OB_MODEL_MAX_HIDDEN 8 /* hidden layers an MLP may have */
#define OB_MODEL_VOCAB 256    /* the transformer's vocabulary: bytes */

/* Shape of a model. Fields that do not apply to the chosen kind are ignored. */
typedef struct ob_model_config {
    ob_model_kind kind;
    size_t max_batch; /* activations are sized for at most this many examples per call */

    /* Softmax regression and MLP: */
    size_t input_dim;   /* features per example */
    size_t num_classes; /* labels lie in [0, num_classes); at least 2 */

    /* MLP only: */
    size_t hidden[OB_MODEL_MAX_HIDDEN]; /* widths of the hidden layers, first to last */
    size_t num_hidden;                  /* 1 .. OB_MODEL_MAX_HIDDEN */
    ob_activation activation;           /* applied after every hidden layer */

    /* Transformer only (pre-LN blocks, MLP width 4 * d_model): */
    size_t n_layer;
    size_t n_head;   /* must divide d_model */
    size_t d_model;  /* embedding width C */
    size_t context;  /* sequence length T the model reads and the number of positions it knows */
    int tied_output; /* 1: the output projection is the token embedding; 0: a separate matrix */
} ob_model_config;

/* Fills cfg with sensible defaults for kind: max_batch 32; softmax/MLP: input_dim 784,
 * num_classes 10, MLP hidden {256, 128} with ReLU; transformer: 2 layers, 4 heads, d_model 128,
 * context 128, tied output. cfg is caller-owned. */
void ob_model_config_default(ob_model_config *cfg, ob_model_kind kind);

/* "softmax", "mlp", "transformer". */
const char *ob_model_kind_name(ob_model_kind kind);

/* Checks cfg and creates a model with activation memory for cfg->max_batch examples. Every field
 * that applies to cfg->kind is validated; on a bad value it returns OB_ERR_INVALID_ARG and
 * err->msg names the field. OB_ERR_NOMEM when the activations cannot be allocated.
 * cfg is copied; *out is owned by the caller and freed with ob_model_destroy. */
ob_status ob_model_create(ob_model **out, const ob_model_config *cfg, ob_err *err);

/* Creates a model like ob_model_create whose forward and backward passes run on the current
 * CUDA device (cuBLAS GEMMs and CUDA kernels), enqueued on `stream` (a cudaStream_t passed as
 * void *, borrowed; NULL: the default stream). Softmax regression and the MLP only
 * (OB_ERR_UNSUPPORTED for the transformer). For such a model, ob_model_forward_backward takes
 * params and grad in device memory; the batch stays in host memory and is copied to the device
 * (through pinned staging) on each call. ob_model_init_params still writes host memory.
 * OB_ERR_UNSUPPORTED in a build without CUDA, OB_ERR_CUDA when no usable device exists. */
ob_status ob_model_create_cuda(ob_model **out, const ob_model_config *cfg, void *stream,
                               ob_err *err);

/* 1 when the model runs on a CUDA device (ob_model_create_cuda), 0 for the CPU. */
int ob_model_on_device(const ob_model *m);

/* Frees a model (on a device model also its device memory, pinned staging and cuBLAS handle).
 * Accepts NULL. */
void ob_model_destroy(ob_model *m);

/* The configuration the model was created with (borrowed, valid for the model's lifetime). */
const ob_model_config *ob_model_get_config(const ob_model *m);

/* Number of float32 values in the parameter buffer (and in a gradient buffer). */
size_t ob_model_num_params(const ob_model *m);

/* Bytes of the model's activation memory (sized for cfg.max_batch examples) in host memory; 0
 * for a device model. */
size_t ob_model_activation_bytes(const ob_model *m);

/* One named tensor inside the flat parameter buffer, row-major with the given shape. */
typedef struct ob_model_tensor {
    const char *name; /* static string, e.g. "qkvw" or "layer0.weight" */
    size_t offset;    /* first float of the tensor in the parameter buffer */
    size_t numel;     /* shape[0] * ... * shape[ndim - 1] */
    size_t ndim;      /* 1 .. 3 */
    size_t shape[3];
} ob_model_tensor;

/* The tensor table, in buffer order: tensors are contiguous, they do not overlap, and together
 * they cover the whole buffer. ob_model_tensor_at returns NULL when i is out of range; the
 * entry is borrowed and valid for the model's lifetime.
 *
 * Softmax/MLP: "layer<i>.weight" (hidden[i], fan_in), "layer<i>.bias" (hidden[i]) for each
 * hidden layer, then "output.weight" (num_classes, fan_in), "output.bias" (num_classes).
 * Transformer (L layers, C = d_model, T = context, V = 256): "wte" (V, C), "wpe" (T, C),
 * "ln1w" "ln1b" (L, C), "qkvw" (L, 3C, C), "qkvb" (L, 3C), "attprojw" (L, C, C),
 * "attprojb" (L, C), "ln2w" "ln2b" (L, C), "fcw" (L, 4C, C), "fcb" (L, 4C),
 * "fcprojw" (L, C, 4C), "fcprojb" (L, C), "lnfw" "lnfb" (C), and "lm_head" (V, C) only when
 * the output is not tied. Weight matrices are (out_features, in_features): y = x W^T + b. */
size_t ob_model_num_tensors(const ob_model *m);
const ob_model_tensor *ob_model_tensor_at(const ob_model *m, size_t i);

/* The gradient's parts: the ranges of the buffer that the CPU backward pass finishes one at a
 * time, in buffer order (contiguous, not overlapping, together the whole buffer). stage is the
 * position, among the backward pass's reports, of the report that names the part (0 first;
 * parts reported together share it). Softmax/MLP: the tensors, the output layer's weight and
 * bias at stage 0, then each hidden layer's pair from the last to the first. Transformer: "wte",
 * "wpe", then each stacked block tensor cut into its L layers' slices (qkvw[0], qkvw[1], ...),
 * then lnfw, lnfb and an untied lm_head; an untied lm_head is final first, then lnfw and lnfb,
 * then layer L-1's slices pair by pair as its backward pass goes (fcproj, fc, ln2, attproj,
 * qkv, ln1: weight and bias together), then those of layer L-2, ..., then wpe, then wte (a tied
 * wte also collects the output projection's gradient, so it comes last). So a layer's gradient
 * can leave while the earlier layers are still computing. ob_model_grad_part_at returns NULL
 * when i is out of range; the entry is borrowed and valid for the model's lifetime. */
typedef struct ob_model_grad_part {
    size_t offset; /* first float of the part in the buffer */
    size_t numel;
    size_t stage;
} ob_model_grad_part;
size_t ob_model_num_grad_parts(const ob_model *m);
const ob_model_grad_part *ob_model_grad_part_at(const ob_model *m, size_t i);

/* Reports that gradient part `part` (an index of the parts table) is final for the running
 * ob_model_forward_backward call: the backward pass writes it no more. Called on the thread
 * that runs the pass, while the pass goes on; it must return quickly and must not call the
 * model. */
typedef void (*ob_model_grad_hook)(void *user, size_t part);

/* Sets (fn non-NULL) or clears the hook (user borrowed, passed back to fn). During every call
 * of ob_model_forward_backward with a gradient buffer, the CPU backward pass reports each part
 * once, as soon as it is final, in the order of the parts' stages (within a stage, in index
 * order). Not called when the loss is not finite (the backward pass is then skipped) nor by a
 * device model (ob_model_create_cuda). */
void ob_model_set_grad_hook(ob_model *m, ob_model_grad_hook fn, void *user);

/* Writes a deterministic initial point into params (caller-owned, ob_model_num_params floats):
 * the same seed gives the same values on every machine. Each tensor draws from its own stream
 * (ob_rng seeded with (seed, tensor index)).
 * MLP hidden layers: He normal (ReLU, GELU) or Xavier normal (tanh); the output layer is drawn
 * with std 0.1 / sqrt(fan_in) so the first prediction is near uniform (loss near ln K).
 * Transformer: GPT-2 style, normal(0, 0.02) for embeddings and weights, 0.02 / sqrt(2 L) for
 * the residual projections (attprojw, fcprojw). Biases 0, layer-norm gains 1. */
void ob_model_init_params(const ob_model *m, float *params, uint64_t seed);

/* What one forward pass measured. */
typedef struct ob_model_result {
    double loss;    /* mean cross-entropy in nats: per example, or per predicted token (LM) */
    size_t correct; /* predictions whose argmax equals the label / next byte */
    size_t count;   /* examples, or predicted tokens (n * context) */
} ob_model_result;

/* Runs the model on batch and, when grad is non-NULL, the backward pass.
 *
 * params (ob_model_num_params floats) and batch are borrowed and not modified. On a device
 * model (ob_model_create_cuda) params and grad are device memory and the batch host memory;
 * the call enqueues its work on the model's stream and synchronises that stream before it
 * returns, so params must be ready with respect to that stream. grad, if
 * non-NULL, is overwritten (not accumulated) with d(mean loss)/d(params); it must not overlap
 * params. res (may be NULL) receives the loss and accuracy. A grad hook (ob_model_set_grad_hook)
 * hears of every gradient part as it becomes final.
 *
 * Softmax/MLP read batch->x and batch->y; batch->input_dim must equal the config's, every label
 * must lie in [0, num_classes). The transformer reads batch->tokens; batch->context must equal
 * the config's. batch->n must be in [1, max_batch]. Violations return OB_ERR_INVALID_ARG with a
 * message, before anything is computed. OB_ERR_NUMERIC when the loss is not finite (res is still
 * filled; grad is then unspecified: zero on the CPU, where the backward pass is skipped). */
ob_status ob_model_forward_backward(ob_model *m, const float *params, const ob_batch *batch,
                                    float *grad, ob_model_result *res, ob_err *err);

/* Logits of the last forward pass that ran (a call rejected by validation leaves them as they
 * were), borrowed from the model and valid until its next call or its destruction (on a device
 * model: a host copy made after the forward pass):
 * (n, num_classes) for softmax/MLP, (n, context, 256) for the transformer, row-major, where n is
 * that call's batch->n; NULL before the first forward pass. For evaluation and sampling. */
const float *ob_model_logits(const ob_model *m);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_MODEL_H */
