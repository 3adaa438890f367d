/* The model object as the model sources share it: the configuration, the parameter tensor table
 * (offsets into the caller's flat buffer, computed in one place), and the one activation
 * allocation cut into named buffers. model.c owns the plan (validation, creation, the generic
 * layout) and model_mlp_build.c and model_transformer_build.c lay out each kind; these are in
 * onebit_jobspec and touch no BLAS, CUDA or MPI. model_run.c, model_mlp.c and
 * model_transformer.c run the model (the engine). Private to the engine. */
#ifndef ONEBIT_MODEL_INTERNAL_H
#define ONEBIT_MODEL_INTERNAL_H

#include "onebit/model.h"

#include <stddef.h>
#include <stdint.h>

/* Largest tensor table: an MLP with OB_MODEL_MAX_HIDDEN hidden layers has 2 * (8 + 1). */
#define OB__MODEL_MAX_TENSORS 20

/* Transformer tensors in buffer order; TF_LM_HEAD exists only when the output is not tied. */
enum {
    OB__TF_WTE,
    OB__TF_WPE,
    OB__TF_LN1W,
    OB__TF_LN1B,
    OB__TF_QKVW,
    OB__TF_QKVB,
    OB__TF_ATTPROJW,
    OB__TF_ATTPROJB,
    OB__TF_LN2W,
    OB__TF_LN2B,
    OB__TF_FCW,
    OB__TF_FCB,
    OB__TF_FCPROJW,
    OB__TF_FCPROJB,
    OB__TF_LNFW,
    OB__TF_LNFB,
    OB__TF_LM_HEAD,
};

/* Transformer activations for max_batch sequences (B, T, C = d_model, L = n_layer, NH heads,
 * V = 256). Per-layer buffers are indexed with the batch size of the current call, so a smaller
 * batch uses a prefix of each. */
typedef struct ob__tf_acts {
    float *encoded;   // (B, T, C) token + position embeddings
    float *ln1;       // (L, B, T, C)
    float *ln1_mean;  // (L, B, T)
    float *ln1_rstd;  // (L, B, T)
    float *qkv;       // (L, B, T, 3C)
    float *atty;      // (L, B, T, C) attention output, heads concatenated
    float *att;       // (L, B, NH, T, T) attention probabilities
    float *residual2; // (L, B, T, C) residual + attention projection
    float *ln2;       // (L, B, T, C)
    float *ln2_mean;  // (L, B, T)
    float *ln2_rstd;  // (L, B, T)
    float *fch;       // (L, B, T, 4C)
    float *fch_gelu;  // (L, B, T, 4C)
    float *residual3; // (L, B, T, C) residual2 + MLP projection: the block's output
    float *lnf;       // (B, T, C)
    float *lnf_mean;  // (B, T)
    float *lnf_rstd;  // (B, T)
    float *logits;    // (B, T, V)
    float *probs;     // (B, T, V); the backward pass turns it into d loss / d logits
    /* Backward scratch: the blocks are differentiated one at a time, so one layer's worth of
     * activation gradients is enough. */
    float *dres;      // (B, T, C) gradient of the residual stream at the current point
    float *dbtc;      // (B, T, C) gradient of a layer-norm output or of the attention output
    float *dqkv;      // (B, T, 3C)
    float *dfch;      // (B, T, 4C)
    float *datt;      // (T, T)
    int32_t *targets; // (B, T) next-byte targets as ints, for the cross-entropy kernels
} ob__tf_acts;

/* Softmax-regression / MLP activations for max_batch examples; H_i = hidden[i], K classes. */
typedef struct ob__cls_acts {
    float *pre[OB_MODEL_MAX_HIDDEN];   // (B, H_i) before the activation
    float *post[OB_MODEL_MAX_HIDDEN];  // (B, H_i) after the activation
    float *dpost[OB_MODEL_MAX_HIDDEN]; // (B, H_i) gradient, turned in place into d pre
    float *logits;                     // (B, K)
    float *probs;                      // (B, K); the backward pass turns it into d logits
} ob__cls_acts;

/* The device side of a softmax/MLP model created by ob_model_create_cuda (model_cuda.cu). */
typedef struct ob__cls_cuda ob__cls_cuda;

struct ob_model {
    ob_model_config cfg;
    size_t num_params;
    size_t num_tensors;
    ob_model_tensor tensors[OB__MODEL_MAX_TENSORS];
    /* How ob_model_init_params fills each tensor: normal(0, init_std) when init_std > 0,
     * otherwise the constant init_value. */
    float init_std[OB__MODEL_MAX_TENSORS];
    float init_value[OB__MODEL_MAX_TENSORS];

    float *acts_block;   /* the one activation allocation; every buffer below points into it */
    size_t acts_bytes;   /* its size */
    int have_logits;     /* a forward pass has completed since creation */
    const float *logits; /* the kind's logits buffer (host memory) */
    /* Non-NULL for a device model: its activations live on the device, acts_block stays NULL
     * and logits points at the pinned host copy the device pass fills. */
    ob__cls_cuda *cuda;
    /* Frees cuda (accepting NULL); set by ob_model_create_cuda, so that ob_model_destroy needs
     * no CUDA code of its own. NULL for a host model. */
    void (*free_device)(ob__cls_cuda *c);
    /* The gradient's parts as the backward pass reports them final (ob_model_grad_part_at),
     * in buffer order; allocated by ob__model_set_parts. */
    ob_model_grad_part *parts;
    size_t num_parts;
    ob_model_grad_hook grad_hook; /* ob_model_set_grad_hook; NULL: none */
    void *grad_hook_user;
    union {
        ob__cls_acts cls;
        ob__tf_acts tf;
    } acts;
};

/* ob_model_create's checks of a configuration: OB_ERR_INVALID_ARG naming the field. */
ob_status ob__model_check_config(const ob_model_config *cfg, ob_err *err);

/* Hidden layers a softmax/MLP configuration really has: softmax regression ignores the MLP
 * fields. */
static inline size_t ob__cls_num_hidden(const ob_model_config *cfg)
{
    return cfg->kind == OB_MODEL_MLP ? cfg->num_hidden : 0;
}

/* Width feeding layer i of a softmax/MLP model (i == num_hidden means the output layer). */
static inline size_t ob__cls_fan_in(const ob_model_config *cfg, size_t i)
{
    return i == 0 ? cfg->input_dim : cfg->hidden[i - 1];
}

/* The transformer's gradient parts (ob_model_grad_part_at): wte, wpe, each stacked block tensor
 * cut into its layers' slices, lnfw, lnfb, an untied lm_head. ob__tf_part_of is the index of
 * layer `layer`'s slice of `tensor` (an OB__TF_* index) for L layers. */
#define OB__TF_STACKED (OB__TF_LNFW - OB__TF_LN1W) /* block tensors stacked over the layers */
static inline size_t ob__tf_part_of(size_t tensor, size_t layer, size_t L)
{
    if (tensor < OB__TF_LN1W) return tensor;
    if (tensor < OB__TF_LNFW) return 2 + (tensor - OB__TF_LN1W) * L + layer;
    return 2 + OB__TF_STACKED * L + (tensor - OB__TF_LNFW);
}

/* Allocates the table of n gradient parts (m->parts, zeroed) for the kind's build to fill. */
ob_status ob__model_set_parts(ob_model *m, size_t n, ob_err *err);

/* The parts are the tensors, tensor i final at stages[i]. */
ob_status ob__model_parts_are_tensors(ob_model *m, const size_t *stages, ob_err *err);

/* Reports gradient parts [first, first + count) final to the grad hook, if one is set. */
void ob__model_grad_final(const ob_model *m, size_t first, size_t count);

/* Checked size arithmetic for the layout tables: returns a * b * c * d, or sets *overflow and
 * returns 0 when the product does not fit a size_t. */
size_t ob__model_prod(int *overflow, size_t a, size_t b, size_t c, size_t d);

/* The elements of a tensor of shape d0 x d1 x d2 (a 0 in d1 or d2: that dimension absent), as
 * ob__model_add_tensor counts them; *overflow set as by ob__model_prod. */
size_t ob__model_numel(int *overflow, size_t d0, size_t d1, size_t d2);

/* Appends a tensor to m's table right after the previous one and grows num_params; ndim is the
 * number of leading non-zero entries in d0, d1, d2. name must be a static string. Returns
 * OB_ERR_INVALID_ARG when the model would not fit in memory indices. */
ob_status ob__model_add_tensor(ob_model *m, const char *name, float init_std, float init_value,
                               size_t d0, size_t d1, size_t d2, ob_err *err);

/* One named slice of the activation block: where to store its address, and its size. */
typedef struct ob__act_slot {
    float **ptr;
    size_t floats;
} ob__act_slot;

/* Makes the one activation allocation: a buffer of slots[i].floats floats for each slot, every
 * buffer starting on a 64-byte line, and points *slots[i].ptr at it. The block belongs to m. */
ob_status ob__model_alloc_acts(ob_model *m, const ob__act_slot *slots, size_t count, ob_err *err);

/* Per kind: build the tensor table and the activations (cfg already validated; a device model,
 * whose m->cuda is already set, gets no host activations: model_*_build.c), and run one forward
 * (+ backward when grad is non-NULL) pass on a batch model_run.c has validated; grad has been
 * zeroed. Each fills all of res. */
ob_status ob__cls_build(ob_model *m, ob_err *err);
void ob__cls_forward_backward(ob_model *m, const float *params, const ob_batch *batch, float *grad,
                              ob_model_result *res);
ob_status ob__tf_build(ob_model *m, ob_err *err);
/* The parameters a transformer of cfg has (SIZE_MAX where the count overflows), from the same
 * table ob__tf_build lays out. */
size_t ob__tf_num_params(const ob_model_config *cfg);
void ob__tf_forward_backward(ob_model *m, const float *params, const ob_batch *batch, float *grad,
                             ob_model_result *res);

/* The device pass of softmax regression and the MLP (model_cuda.cu; stubs returning
 * OB_ERR_UNSUPPORTED in cuda_absent.c for builds without CUDA); only model_run.c calls them.
 *
 * ob__cls_cuda_create: m->cfg is validated and of a classifier kind; allocates the device
 * activations, the pinned staging and a cuBLAS handle bound to stream (borrowed), then sets
 * m->cuda and points m->logits at the pinned logits. OB_ERR_CUDA when no usable device exists.
 * On failure m is left untouched.
 * ob__cls_cuda_destroy: frees everything create made. Accepts NULL.
 * ob__cls_cuda_forward_backward: the device counterpart of ob__cls_forward_backward on a batch
 * model_run.c has validated; params and grad (may be NULL) are device memory, grad is overwritten
 * (no zeroing needed). Fills all of res after synchronising the stream. */
ob_status ob__cls_cuda_create(ob_model *m, void *stream, ob_err *err);
void ob__cls_cuda_destroy(ob__cls_cuda *c);
ob_status ob__cls_cuda_forward_backward(ob_model *m, const float *params, const ob_batch *batch,
                                        float *grad, ob_model_result *res, ob_err *err);

#endif /* ONEBIT_MODEL_INTERNAL_H */
