/* The model's plan: configuration defaults and validation, the parameter tensor table, the
 * gradient parts and the activation layout (the kinds' builds, model_mlp_build.c and
 * model_transformer_build.c), creation and destruction. No arithmetic on parameters lives here,
 * so this half of the model belongs to onebit_jobspec, where the memory estimate creates the
 * very model a worker would; running a model (model_run.c, model_mlp.c, model_transformer.c)
 * stays in the engine. */
#include "internal.h"
#include "model_internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds that keep every sgemm dimension and leading dimension within an int and every
 * size product far from overflow; all are far beyond what fits in memory anyway. */
#define MAX_BATCH ((size_t)1 << 24)
#define MAX_FEATURES ((size_t)1 << 24) /* input_dim, num_classes, hidden widths */
#define MAX_LAYERS ((size_t)1024)
#define MAX_D_MODEL ((size_t)1 << 16)
#define MAX_CONTEXT ((size_t)1 << 16)

const char *ob_model_kind_name(ob_model_kind kind)
{
    switch (kind) {
    case OB_MODEL_SOFTMAX:
        return "softmax";
    case OB_MODEL_MLP:
        return "mlp";
    case OB_MODEL_TRANSFORMER:
        return "transformer";
    }
    return "unknown";
}

void ob_model_config_default(ob_model_config *cfg, ob_model_kind kind)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = kind;
    cfg->max_batch = 32;
    cfg->input_dim = 784;
    cfg->num_classes = 10;
    if (kind == OB_MODEL_MLP) {
        cfg->hidden[0] = 256;
        cfg->hidden[1] = 128;
        cfg->num_hidden = 2;
    }
    cfg->activation = OB_ACT_RELU;
    cfg->n_layer = 2;
    cfg->n_head = 4;
    cfg->d_model = 128;
    cfg->context = 128;
    cfg->tied_output = 1;
}

/* ---- validation -------------------------------------------------------------------------- */

/* Fails with a message naming the field when v is outside [lo, hi]. */
static ob_status check_range(const char *field, size_t v, size_t lo, size_t hi, ob_err *err)
{
    if (v < lo || v > hi)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ob_model_config.%s = %zu is out of range: must be in [%zu, %zu]", field, v,
                      lo, hi);
    return OB_OK;
}

static ob_status check_cls_config(const ob_model_config *cfg, ob_err *err)
{
    ob_status st;
    if ((st = check_range("input_dim", cfg->input_dim, 1, MAX_FEATURES, err))) return st;
    if ((st = check_range("num_classes", cfg->num_classes, 2, MAX_FEATURES, err))) return st;
    if (cfg->kind != OB_MODEL_MLP) return OB_OK;

    if (cfg->num_hidden < 1 || cfg->num_hidden > OB_MODEL_MAX_HIDDEN)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ob_model_config.num_hidden = %zu is out of range: an MLP needs 1 to %d "
                      "hidden layers (OB_MODEL_SOFTMAX has none)",
                      cfg->num_hidden, OB_MODEL_MAX_HIDDEN);
    for (size_t i = 0; i < cfg->num_hidden; i++) {
        if (cfg->hidden[i] < 1 || cfg->hidden[i] > MAX_FEATURES)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "ob_model_config.hidden[%zu] = %zu is out of range: must be in [1, %zu]",
                          i, cfg->hidden[i], MAX_FEATURES);
    }
    if (cfg->activation != OB_ACT_RELU && cfg->activation != OB_ACT_TANH &&
        cfg->activation != OB_ACT_GELU)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ob_model_config.activation = %d is not an ob_activation (RELU, TANH, GELU)",
                      (int)cfg->activation);
    return OB_OK;
}

static ob_status check_tf_config(const ob_model_config *cfg, ob_err *err)
{
    ob_status st;
    if ((st = check_range("n_layer", cfg->n_layer, 1, MAX_LAYERS, err))) return st;
    if ((st = check_range("d_model", cfg->d_model, 1, MAX_D_MODEL, err))) return st;
    if ((st = check_range("n_head", cfg->n_head, 1, cfg->d_model, err))) return st;
    if (cfg->d_model % cfg->n_head != 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ob_model_config.d_model = %zu is not a multiple of n_head = %zu",
                      cfg->d_model, cfg->n_head);
    if ((st = check_range("context", cfg->context, 1, MAX_CONTEXT, err))) return st;
    /* B * T is the row count of every sgemm, which takes an int. */
    if (cfg->max_batch > (size_t)INT_MAX / cfg->context)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ob_model_config.max_batch = %zu is too large: max_batch * context (%zu) "
                      "must not exceed %d tokens",
                      cfg->max_batch, cfg->context, INT_MAX);
    if (cfg->tied_output != 0 && cfg->tied_output != 1)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_model_config.tied_output = %d must be 0 or 1",
                      cfg->tied_output);
    return OB_OK;
}

ob_status ob__model_check_config(const ob_model_config *cfg, ob_err *err)
{
    if (cfg->kind != OB_MODEL_SOFTMAX && cfg->kind != OB_MODEL_MLP &&
        cfg->kind != OB_MODEL_TRANSFORMER)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ob_model_config.kind = %d is not an ob_model_kind (SOFTMAX, MLP, "
                      "TRANSFORMER)",
                      (int)cfg->kind);
    ob_status st = check_range("max_batch", cfg->max_batch, 1, MAX_BATCH, err);
    if (st) return st;
    return cfg->kind == OB_MODEL_TRANSFORMER ? check_tf_config(cfg, err)
                                             : check_cls_config(cfg, err);
}

/* ---- layout helpers shared by the kinds ----------------------------------------------------- */

size_t ob__model_prod(int *overflow, size_t a, size_t b, size_t c, size_t d)
{
    size_t f[3] = {b, c, d};
    size_t p = a;
    for (int i = 0; i < 3; i++) {
        if (f[i] != 0 && p > SIZE_MAX / f[i]) {
            *overflow = 1;
            return 0;
        }
        p *= f[i];
    }
    return p;
}

size_t ob__model_numel(int *overflow, size_t d0, size_t d1, size_t d2)
{
    return ob__model_prod(overflow, d0, d1 ? d1 : 1, d2 ? d2 : 1, 1);
}

ob_status ob__model_add_tensor(ob_model *m, const char *name, float init_std, float init_value,
                               size_t d0, size_t d1, size_t d2, ob_err *err)
{
    int overflow = 0;
    size_t numel = ob__model_numel(&overflow, d0, d1, d2);
    /* The caller's buffer is indexed in floats and its byte size must fit a size_t too. */
    if (overflow || numel > SIZE_MAX / sizeof(float) - m->num_params)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "model too large: tensor %s does not fit in a parameter buffer", name);
    if (m->num_tensors >= OB__MODEL_MAX_TENSORS)
        return OB_ERR(err, OB_ERR_STATE, "model tensor table is full at %s", name);

    size_t i = m->num_tensors++;
    ob_model_tensor *t = &m->tensors[i];
    t->name = name;
    t->offset = m->num_params;
    t->numel = numel;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
    t->ndim = d2 ? 3 : d1 ? 2 : 1;
    m->init_std[i] = init_std;
    m->init_value[i] = init_value;
    m->num_params += numel;
    return OB_OK;
}

ob_status ob__model_alloc_acts(ob_model *m, const ob__act_slot *slots, size_t count, ob_err *err)
{
    const size_t line = 64 / sizeof(float); /* each buffer starts on a cache line */
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        if (slots[i].floats > SIZE_MAX / sizeof(float) - line - total)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "model too large: activations for ob_model_config.max_batch = %zu do "
                          "not fit in memory",
                          m->cfg.max_batch);
        total += ob_round_up(slots[i].floats, line);
    }
    float *block = ob_calloc_aligned(total * sizeof(float));
    if (!block)
        return OB_ERR(err, OB_ERR_NOMEM,
                      "cannot allocate %zu bytes of activations (ob_model_config.max_batch = %zu)",
                      total * sizeof(float), m->cfg.max_batch);
    size_t off = 0;
    for (size_t i = 0; i < count; i++) {
        *slots[i].ptr = block + off;
        off += ob_round_up(slots[i].floats, line);
    }
    m->acts_block = block;
    m->acts_bytes = total * sizeof(float);
    return OB_OK;
}

/* ---- public API -------------------------------------------------------------------------- */

ob_status ob_model_create(ob_model **out, const ob_model_config *cfg, ob_err *err)
{
    if (!out || !cfg)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_model_create: out and cfg must not be NULL");
    *out = NULL;
    ob_status st = ob__model_check_config(cfg, err);
    if (st) return st;

    ob_model *m = calloc(1, sizeof *m);
    if (!m) return OB_ERR(err, OB_ERR_NOMEM, "cannot allocate the model object");
    m->cfg = *cfg;
    st = cfg->kind == OB_MODEL_TRANSFORMER ? ob__tf_build(m, err) : ob__cls_build(m, err);
    if (st) goto fail;
    *out = m;
    return OB_OK;

fail:
    ob_model_destroy(m);
    return st;
}

int ob_model_on_device(const ob_model *m)
{
    return m->cuda != NULL;
}

void ob_model_destroy(ob_model *m)
{
    if (!m) return;
    free(m->parts);
    if (m->free_device) m->free_device(m->cuda);
    ob_aligned_free(m->acts_block);
    free(m);
}

const ob_model_config *ob_model_get_config(const ob_model *m)
{
    return &m->cfg;
}

size_t ob_model_activation_bytes(const ob_model *m)
{
    return m ? m->acts_bytes : 0;
}

size_t ob_model_num_params(const ob_model *m)
{
    return m->num_params;
}

size_t ob_model_num_tensors(const ob_model *m)
{
    return m->num_tensors;
}

const ob_model_tensor *ob_model_tensor_at(const ob_model *m, size_t i)
{
    return i < m->num_tensors ? &m->tensors[i] : NULL;
}

ob_status ob__model_set_parts(ob_model *m, size_t n, ob_err *err)
{
    free(m->parts);
    m->num_parts = 0;
    m->parts = calloc(n, sizeof *m->parts);
    if (!m->parts) return OB_ERR(err, OB_ERR_NOMEM, "%zu gradient parts", n);
    m->num_parts = n;
    return OB_OK;
}

ob_status ob__model_parts_are_tensors(ob_model *m, const size_t *stages, ob_err *err)
{
    ob_status st = ob__model_set_parts(m, m->num_tensors, err);
    if (st) return st;
    for (size_t i = 0; i < m->num_tensors; i++)
        m->parts[i] = (ob_model_grad_part){m->tensors[i].offset, m->tensors[i].numel, stages[i]};
    return OB_OK;
}

size_t ob_model_num_grad_parts(const ob_model *m)
{
    return m->num_parts;
}

const ob_model_grad_part *ob_model_grad_part_at(const ob_model *m, size_t i)
{
    return i < m->num_parts ? &m->parts[i] : NULL;
}
