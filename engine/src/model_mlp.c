/* Softmax regression and the multi-layer perceptron: a stack of linear layers with an
 * activation between them and a softmax cross-entropy on top. Softmax regression is the same
 * code with no hidden layer. The forward and backward pass; the layout they run on is
 * model_mlp_build.c's. */
#include "internal.h"
#include "model_internal.h"
#include "model_layers.h"

#include <math.h>

void ob__cls_forward_backward(ob_model *m, const float *params, const ob_batch *batch, float *grad,
                              ob_model_result *res)
{
    const ob_model_config *cfg = &m->cfg;
    const ob__cls_acts *a = &m->acts.cls;
    size_t nh = ob__cls_num_hidden(cfg);
    size_t n = batch->n, k = cfg->num_classes;
    const ob_model_tensor *t = m->tensors; /* weight of layer i at 2i, bias at 2i + 1 */

    const float *inp = batch->x; // (B, fan_in)
    for (size_t i = 0; i < nh; i++) {
        size_t h = cfg->hidden[i];
        ob__linear_forward(a->pre[i], inp, params + t[2 * i].offset, params + t[2 * i + 1].offset,
                           n, ob__cls_fan_in(cfg, i), h);
        ob__act_forward(cfg->activation, a->post[i], a->pre[i], n * h);
        inp = a->post[i];
    }
    ob__linear_forward(a->logits, inp, params + t[2 * nh].offset, params + t[2 * nh + 1].offset, n,
                       ob__cls_fan_in(cfg, nh), k);

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
        size_t c = ob__cls_fan_in(cfg, i), oc = i == nh ? k : cfg->hidden[i];
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
