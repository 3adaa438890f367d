/* Softmax regression and the multi-layer perceptron: a stack of linear layers with an
 * activation between them and a softmax cross-entropy on top. Softmax regression is the same
 * code with no hidden layer. */
#include "internal.h"
#include "model_internal.h"
#include "model_layers.h"

#include <math.h>

/* Static tensor names, so the public table can hand out plain pointers. */
static const char *const k_weight_names[OB_MODEL_MAX_HIDDEN] = {
    "layer0.weight", "layer1.weight", "layer2.weight", "layer3.weight",
    "layer4.weight", "layer5.weight", "layer6.weight", "layer7.weight",
};
static const char *const k_bias_names[OB_MODEL_MAX_HIDDEN] = {
    "layer0.bias", "layer1.bias", "layer2.bias", "layer3.bias",
    "layer4.bias", "layer5.bias", "layer6.bias", "layer7.bias",
};

/* Hidden layers the kind really has: softmax regression ignores the MLP fields. */
static size_t num_hidden(const ob_model_config *cfg)
{
    return cfg->kind == OB_MODEL_MLP ? cfg->num_hidden : 0;
}

/* Width feeding layer i (i == num_hidden means the output layer). */
static size_t fan_in(const ob_model_config *cfg, size_t i)
{
    return i == 0 ? cfg->input_dim : cfg->hidden[i - 1];
}

/* He initialisation keeps the activations' scale through ReLU-like layers (half the units
 * pass); Xavier suits tanh, which is linear around zero. */
static float hidden_std(const ob_model_config *cfg, size_t i)
{
    double gain = cfg->activation == OB_ACT_TANH ? 1.0 : 2.0;
    double fan = cfg->activation == OB_ACT_TANH ? 0.5 * (double)(fan_in(cfg, i) + cfg->hidden[i])
                                                : (double)fan_in(cfg, i);
    return (float)sqrt(gain / fan);
}

ob_status ob__cls_build(ob_model *m, ob_err *err)
{
    const ob_model_config *cfg = &m->cfg;
    size_t nh = num_hidden(cfg);
    ob_status st;

    /* Parameters: for each hidden layer its weight (H_i, fan_in) and bias (H_i), then the output
     * layer's weight (K, fan_in) and bias (K). */
    for (size_t i = 0; i < nh; i++) {
        st = ob__model_add_tensor(m, k_weight_names[i], hidden_std(cfg, i), 0.0f, cfg->hidden[i],
                                  fan_in(cfg, i), 0, err);
        if (st) return st;
        st = ob__model_add_tensor(m, k_bias_names[i], 0.0f, 0.0f, cfg->hidden[i], 0, 0, err);
        if (st) return st;
    }
    /* A small output layer makes the first prediction nearly uniform (loss near ln K) while the
     * classes still receive different gradients. */
    float out_std = (float)(0.1 / sqrt((double)fan_in(cfg, nh)));
    st = ob__model_add_tensor(m, "output.weight", out_std, 0.0f, cfg->num_classes, fan_in(cfg, nh),
                              0, err);
    if (st) return st;
    st = ob__model_add_tensor(m, "output.bias", 0.0f, 0.0f, cfg->num_classes, 0, 0, err);
    if (st) return st;
    /* The backward pass finishes layer i's weight and bias together, the output layer first. */
    size_t stages[2 * OB_MODEL_MAX_HIDDEN + 2];
    for (size_t i = 0; i <= nh; i++)
        stages[2 * i] = stages[2 * i + 1] = nh - i;
    st = ob__model_parts_are_tensors(m, stages, err);
    if (st) return st;
    /* A device model keeps its activations on the device (model_cuda.cu). */
    if (m->cuda) return OB_OK;

    /* Activations, B = max_batch. */
    ob__cls_acts *a = &m->acts.cls;
    ob__act_slot slots[3 * OB_MODEL_MAX_HIDDEN + 2];
    size_t count = 0;
    int overflow = 0;
    for (size_t i = 0; i < nh; i++) {
        size_t bh = ob__model_prod(&overflow, cfg->max_batch, cfg->hidden[i], 1, 1);
        slots[count++] = (ob__act_slot){&a->pre[i], bh};   // (B, H_i)
        slots[count++] = (ob__act_slot){&a->post[i], bh};  // (B, H_i)
        slots[count++] = (ob__act_slot){&a->dpost[i], bh}; // (B, H_i)
    }
    size_t bk = ob__model_prod(&overflow, cfg->max_batch, cfg->num_classes, 1, 1);
    slots[count++] = (ob__act_slot){&a->logits, bk}; // (B, K)
    slots[count++] = (ob__act_slot){&a->probs, bk};  // (B, K)
    if (overflow)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "model too large: activations for ob_model_config.max_batch = %zu overflow",
                      cfg->max_batch);
    st = ob__model_alloc_acts(m, slots, count, err);
    if (st) return st;
    m->logits = a->logits;
    return OB_OK;
}

void ob__cls_forward_backward(ob_model *m, const float *params, const ob_batch *batch, float *grad,
                              ob_model_result *res)
{
    const ob_model_config *cfg = &m->cfg;
    const ob__cls_acts *a = &m->acts.cls;
    size_t nh = num_hidden(cfg);
    size_t n = batch->n, k = cfg->num_classes;
    const ob_model_tensor *t = m->tensors; /* weight of layer i at 2i, bias at 2i + 1 */

    const float *inp = batch->x; // (B, fan_in)
    for (size_t i = 0; i < nh; i++) {
        size_t h = cfg->hidden[i];
        ob__linear_forward(a->pre[i], inp, params + t[2 * i].offset, params + t[2 * i + 1].offset,
                           n, fan_in(cfg, i), h);
        ob__act_forward(cfg->activation, a->post[i], a->pre[i], n * h);
        inp = a->post[i];
    }
    ob__linear_forward(a->logits, inp, params + t[2 * nh].offset, params + t[2 * nh + 1].offset, n,
                       fan_in(cfg, nh), k);

    double loss_sum = 0.0;
    size_t correct = 0;
    ob__xent_forward(a->probs, &loss_sum, &correct, a->logits, batch->y, n, k);
    res->loss = loss_sum / (double)n;
    res->correct = correct;
    res->count = n;
    /* A loss that is not finite fails the call: no gradient to compute (it stays zero). */
    if (!grad || !isfinite(res->loss)) return;

    /* Backward, from the loss down; layer i's input gradient lands in dpost[i - 1]. Layer i's
     * weight and bias (tensors 2i, 2i + 1) are final once its linear backward is done. */
    ob__xent_backward(a->probs, batch->y, n, k, 1.0f / (float)n);
    const float *dout = a->probs;
    for (size_t i = nh + 1; i-- > 0;) {
        size_t c = fan_in(cfg, i), oc = i == nh ? k : cfg->hidden[i];
        const float *layer_inp = i == 0 ? batch->x : a->post[i - 1];
        float *dinp = i == 0 ? NULL : a->dpost[i - 1]; /* the input needs no gradient */
        ob__linear_backward(dinp, grad + t[2 * i].offset, grad + t[2 * i + 1].offset, dout,
                            layer_inp, params + t[2 * i].offset, n, c, oc);
        ob__model_grad_final(m, 2 * i, 2);
        if (i == 0) break;
        ob__act_backward(cfg->activation, dinp, dinp, a->pre[i - 1], a->post[i - 1], n * c);
        dout = dinp;
    }
}
