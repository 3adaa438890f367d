/* The layout of softmax regression and the multi-layer perceptron (ob__cls_build): the tensor
 * table with each tensor's initialisation, the gradient parts and the activation buffers.
 * Part of onebit_jobspec with model.c; the passes over it are model_mlp.c's. */
#include "internal.h"
#include "model_internal.h"

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

/* He initialisation keeps the activations' scale through ReLU-like layers (half the units
 * pass); Xavier suits tanh, which is linear around zero. */
static float hidden_std(const ob_model_config *cfg, size_t i)
{
    double gain = cfg->activation == OB_ACT_TANH ? 1.0 : 2.0;
    double fan = cfg->activation == OB_ACT_TANH
                     ? 0.5 * (double)(ob__cls_fan_in(cfg, i) + cfg->hidden[i])
                     : (double)ob__cls_fan_in(cfg, i);
    return (float)sqrt(gain / fan);
}

ob_status ob__cls_build(ob_model *m, ob_err *err)
{
    const ob_model_config *cfg = &m->cfg;
    size_t nh = ob__cls_num_hidden(cfg);
    ob_status st;

    /* Parameters: for each hidden layer its weight (H_i, fan_in) and bias (H_i), then the output
     * layer's weight (K, fan_in) and bias (K). */
    for (size_t i = 0; i < nh; i++) {
        st = ob__model_add_tensor(m, k_weight_names[i], hidden_std(cfg, i), 0.0f, cfg->hidden[i],
                                  ob__cls_fan_in(cfg, i), 0, err);
        if (st) return st;
        st = ob__model_add_tensor(m, k_bias_names[i], 0.0f, 0.0f, cfg->hidden[i], 0, 0, err);
        if (st) return st;
    }
    /* A small output layer makes the first prediction nearly uniform (loss near ln K) while the
     * classes still receive different gradients. */
    float out_std = (float)(0.1 / sqrt((double)ob__cls_fan_in(cfg, nh)));
    st = ob__model_add_tensor(m, "output.weight", out_std, 0.0f, cfg->num_classes,
                              ob__cls_fan_in(cfg, nh), 0, err);
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
