/* Running a model: creation on a CUDA device, deterministic initialisation, and the checks on a
 * batch before a kind's forward and backward pass (model_mlp.c, model_transformer.c, or the
 * device's model_cuda.cu) runs; the grad hook and the logits. The plan these work on (the
 * configuration, tensor table and activation layout) is model.c's, in onebit_jobspec. */
#include "internal.h"
#include "model_internal.h"
#include "onebit/rng.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

ob_status ob_model_create_cuda(ob_model **out, const ob_model_config *cfg, void *stream,
                               ob_err *err)
{
    if (!out || !cfg)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ob_model_create_cuda: out and cfg must not be NULL");
    *out = NULL;
    ob_status st = ob__model_check_config(cfg, err);
    if (st) return st;
    /* Decided before any CUDA call, so the answer does not depend on the machine. */
    if (cfg->kind == OB_MODEL_TRANSFORMER)
        return OB_ERR(err, OB_ERR_UNSUPPORTED,
                      "ob_model_create_cuda: the transformer has no CUDA implementation (softmax "
                      "regression and the MLP have)");

    ob_model *m = calloc(1, sizeof *m);
    if (!m) return OB_ERR(err, OB_ERR_NOMEM, "cannot allocate the model object");
    m->cfg = *cfg;
    m->free_device = ob__cls_cuda_destroy;
    /* The device side first: ob__cls_build then leaves out the host activations. */
    st = ob__cls_cuda_create(m, stream, err);
    if (st) {
        OB_WRAP(err, st, "ob_model_create_cuda");
        goto fail;
    }
    st = ob__cls_build(m, err);
    if (st) goto fail;
    *out = m;
    return OB_OK;

fail:
    ob_model_destroy(m);
    return st;
}

void ob_model_init_params(const ob_model *m, float *params, uint64_t seed)
{
    for (size_t i = 0; i < m->num_tensors; i++) {
        const ob_model_tensor *t = &m->tensors[i];
        float *p = params + t->offset;
        /* One stream per tensor: reshaping one tensor leaves the others' values unchanged. */
        ob_rng rng;
        ob_rng_seed(&rng, seed, (uint64_t)i);
        if (m->init_std[i] > 0.0f) {
            for (size_t j = 0; j < t->numel; j++)
                p[j] = m->init_std[i] * ob_rng_normal(&rng);
        } else {
            for (size_t j = 0; j < t->numel; j++)
                p[j] = m->init_value[i];
        }
    }
}

static ob_status check_cls_batch(const ob_model *m, const ob_batch *batch, ob_err *err)
{
    if (batch->input_dim != m->cfg.input_dim)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "batch->input_dim = %zu does not match the model's input_dim = %zu",
                      batch->input_dim, m->cfg.input_dim);
    if (!batch->x || !batch->y)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "batch->x and batch->y must not be NULL");
    for (size_t i = 0; i < batch->n; i++) {
        int32_t y = batch->y[i];
        if (y < 0 || (size_t)y >= m->cfg.num_classes)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "batch->y[%zu] = %d is not a class label in [0, %zu)", i, (int)y,
                          m->cfg.num_classes);
    }
    return OB_OK;
}

static ob_status check_tf_batch(const ob_model *m, const ob_batch *batch, ob_err *err)
{
    if (batch->context != m->cfg.context)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "batch->context = %zu does not match the model's context = %zu",
                      batch->context, m->cfg.context);
    if (!batch->tokens) return OB_ERR(err, OB_ERR_INVALID_ARG, "batch->tokens must not be NULL");
    return OB_OK;
}

ob_status ob_model_forward_backward(ob_model *m, const float *params, const ob_batch *batch,
                                    float *grad, ob_model_result *res, ob_err *err)
{
    if (!m || !params || !batch)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ob_model_forward_backward: model, params and batch must not be NULL");
    if (batch->n < 1 || batch->n > m->cfg.max_batch)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "batch->n = %zu is out of range: must be in [1, max_batch = %zu]", batch->n,
                      m->cfg.max_batch);
    ob_status st = m->cfg.kind == OB_MODEL_TRANSFORMER ? check_tf_batch(m, batch, err)
                                                       : check_cls_batch(m, batch, err);
    if (st) return st;

    ob_model_result r = {0};
    if (m->cuda) {
        /* grad is device memory, and the device pass overwrites every coordinate itself. */
        st = ob__cls_cuda_forward_backward(m, params, batch, grad, &r, err);
        if (st) return OB_WRAP(err, st, "ob_model_forward_backward on the device");
    } else {
        /* The kernels accumulate parameter gradients, so every step starts from zero. */
        if (grad) memset(grad, 0, m->num_params * sizeof *grad);
        if (m->cfg.kind == OB_MODEL_TRANSFORMER)
            ob__tf_forward_backward(m, params, batch, grad, &r);
        else
            ob__cls_forward_backward(m, params, batch, grad, &r);
    }
    m->have_logits = 1;
    if (res) *res = r;
    if (!isfinite(r.loss))
        return OB_ERR(err, OB_ERR_NUMERIC, "the loss is not finite (%g) over %zu predictions",
                      r.loss, r.count);
    return OB_OK;
}

void ob_model_set_grad_hook(ob_model *m, ob_model_grad_hook fn, void *user)
{
    m->grad_hook = fn;
    m->grad_hook_user = fn ? user : NULL;
}

void ob__model_grad_final(const ob_model *m, size_t first, size_t count)
{
    if (!m->grad_hook) return;
    for (size_t i = first; i < first + count; i++)
        m->grad_hook(m->grad_hook_user, i);
}

const float *ob_model_logits(const ob_model *m)
{
    return m->have_logits ? m->logits : NULL;
}
