/* Decoder-only byte-level transformer language model (GPT-2 architecture, after llm.c):
 * token + learned position embeddings, n_layer pre-LN blocks (layer norm -> causal multi-head
 * self-attention with a fused qkv projection -> output projection -> residual; layer norm ->
 * 4x MLP with tanh-GELU -> residual), a final layer norm and an output projection that is
 * either the token embedding (tied) or a matrix of its own. The loss is the mean cross-entropy
 * of the next byte over all B * T positions. The forward and backward pass; the tensor table,
 * gradient parts and activations they run on are model_transformer_build.c's. */
#include "internal.h"
#include "model_internal.h"
#include "model_layers.h"

#include <math.h>
#include <string.h>

#define V OB_MODEL_VOCAB

/* Pointers to every tensor of a flat buffer (parameters or gradients alike). */
typedef struct tf_tensors {
    float *wte;      // (V, C)
    float *wpe;      // (T, C)
    float *ln1w;     // (L, C)
    float *ln1b;     // (L, C)
    float *qkvw;     // (L, 3C, C)
    float *qkvb;     // (L, 3C)
    float *attprojw; // (L, C, C)
    float *attprojb; // (L, C)
    float *ln2w;     // (L, C)
    float *ln2b;     // (L, C)
    float *fcw;      // (L, 4C, C)
    float *fcb;      // (L, 4C)
    float *fcprojw;  // (L, C, 4C)
    float *fcprojb;  // (L, C)
    float *lnfw;     // (C)
    float *lnfb;     // (C)
    float *lm_head;  // (V, C): wte itself when the output is tied
} tf_tensors;

/* The pair (weight, bias) of layer l is final. */
static void final_pair(const ob_model *m, size_t weight, size_t l)
{
    size_t L = m->cfg.n_layer;
    ob__model_grad_final(m, ob__tf_part_of(weight, l, L), 1);
    ob__model_grad_final(m, ob__tf_part_of(weight + 1, l, L), 1);
}

/* Points every field of out at its tensor inside the flat buffer base. */
static void tf_tensors_at(const ob_model *m, float *base, tf_tensors *out)
{
    const ob_model_tensor *t = m->tensors;
    float **const fields[] = {
        &out->wte,      &out->wpe,      &out->ln1w, &out->ln1b, &out->qkvw, &out->qkvb,
        &out->attprojw, &out->attprojb, &out->ln2w, &out->ln2b, &out->fcw,  &out->fcb,
        &out->fcprojw,  &out->fcprojb,  &out->lnfw, &out->lnfb,
    };
    for (size_t i = 0; i <= OB__TF_LNFB; i++)
        *fields[i] = base + t[i].offset;
    out->lm_head = m->cfg.tied_output ? out->wte : base + t[OB__TF_LM_HEAD].offset;
}

static void tf_forward(ob_model *m, const tf_tensors *p, const ob_batch *batch, size_t B)
{
    const ob_model_config *cfg = &m->cfg;
    const ob__tf_acts *a = &m->acts.tf;
    size_t L = cfg->n_layer, C = cfg->d_model, T = cfg->context, NH = cfg->n_head;
    size_t BT = B * T;

    ob__embed_forward(a->encoded, batch->tokens, T + 1, p->wte, p->wpe, B, T, C);
    for (size_t l = 0; l < L; l++) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;
        float *ln1 = a->ln1 + l * BT * C;
        float *qkv = a->qkv + l * BT * 3 * C;
        float *atty = a->atty + l * BT * C;
        float *residual2 = a->residual2 + l * BT * C;
        float *ln2 = a->ln2 + l * BT * C;
        float *fch = a->fch + l * BT * 4 * C;
        float *fch_gelu = a->fch_gelu + l * BT * 4 * C;
        float *residual3 = a->residual3 + l * BT * C;

        ob__layernorm_forward(ln1, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, residual,
                              p->ln1w + l * C, p->ln1b + l * C, BT, C);
        ob__linear_forward(qkv, ln1, p->qkvw + l * 3 * C * C, p->qkvb + l * 3 * C, BT, C, 3 * C);
        ob__attention_forward(atty, a->att + l * B * NH * T * T, qkv, B, T, C, NH);
        memcpy(residual2, residual, BT * C * sizeof(float));
        ob__linear_forward_add(residual2, atty, p->attprojw + l * C * C, p->attprojb + l * C, BT, C,
                               C);
        ob__layernorm_forward(ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, residual2,
                              p->ln2w + l * C, p->ln2b + l * C, BT, C);
        ob__linear_forward(fch, ln2, p->fcw + l * 4 * C * C, p->fcb + l * 4 * C, BT, C, 4 * C);
        ob__act_forward(OB_ACT_GELU, fch_gelu, fch, BT * 4 * C);
        memcpy(residual3, residual2, BT * C * sizeof(float));
        ob__linear_forward_add(residual3, fch_gelu, p->fcprojw + l * C * 4 * C, p->fcprojb + l * C,
                               BT, 4 * C, C);
    }
    ob__layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (L - 1) * BT * C,
                          p->lnfw, p->lnfb, BT, C);
    ob__linear_forward(a->logits, a->lnf, p->lm_head, NULL, BT, C, V);
}

static void tf_backward(ob_model *m, const tf_tensors *p, const tf_tensors *g,
                        const ob_batch *batch, size_t B)
{
    const ob_model_config *cfg = &m->cfg;
    const ob__tf_acts *a = &m->acts.tf;
    size_t L = cfg->n_layer, C = cfg->d_model, T = cfg->context, NH = cfg->n_head;
    size_t BT = B * T;

    /* a->probs already holds d loss / d logits. For a tied output, g->lm_head is g->wte and the
     * embedding gradient below adds to it. */
    ob__linear_backward(a->dbtc, g->lm_head, NULL, a->probs, a->lnf, p->lm_head, BT, C, V);
    if (!cfg->tied_output) ob__model_grad_final(m, ob__tf_part_of(OB__TF_LM_HEAD, 0, L), 1);
    memset(a->dres, 0, BT * C * sizeof(float));
    ob__layernorm_backward(a->dres, g->lnfw, g->lnfb, a->dbtc, a->residual3 + (L - 1) * BT * C,
                           p->lnfw, a->lnf_mean, a->lnf_rstd, BT, C);
    ob__model_grad_final(m, ob__tf_part_of(OB__TF_LNFW, 0, L), 2);

    /* dres is d loss / d residual3[l] on entry to each block and d loss / d residual3[l - 1]
     * (the block's input) on exit: the skip connections pass it through unchanged and each
     * branch adds its share through the layer norm's backward. */
    for (size_t l = L; l-- > 0;) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;
        const float *ln1 = a->ln1 + l * BT * C;
        const float *qkv = a->qkv + l * BT * 3 * C;
        const float *atty = a->atty + l * BT * C;
        const float *residual2 = a->residual2 + l * BT * C;
        const float *ln2 = a->ln2 + l * BT * C;
        const float *fch = a->fch + l * BT * 4 * C;
        const float *fch_gelu = a->fch_gelu + l * BT * 4 * C;

        /* MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))). */
        ob__linear_backward(a->dfch, g->fcprojw + l * C * 4 * C, g->fcprojb + l * C, a->dres,
                            fch_gelu, p->fcprojw + l * C * 4 * C, BT, 4 * C, C);
        final_pair(m, OB__TF_FCPROJW, l);
        ob__act_backward(OB_ACT_GELU, a->dfch, a->dfch, fch, fch_gelu, BT * 4 * C);
        ob__linear_backward(a->dbtc, g->fcw + l * 4 * C * C, g->fcb + l * 4 * C, a->dfch, ln2,
                            p->fcw + l * 4 * C * C, BT, C, 4 * C);
        final_pair(m, OB__TF_FCW, l);
        ob__layernorm_backward(a->dres, g->ln2w + l * C, g->ln2b + l * C, a->dbtc, residual2,
                               p->ln2w + l * C, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, BT, C);
        final_pair(m, OB__TF_LN2W, l);

        /* Attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual)))). */
        ob__linear_backward(a->dbtc, g->attprojw + l * C * C, g->attprojb + l * C, a->dres, atty,
                            p->attprojw + l * C * C, BT, C, C);
        final_pair(m, OB__TF_ATTPROJW, l);
        ob__attention_backward(a->dqkv, a->datt, a->dbtc, qkv, a->att + l * B * NH * T * T, B, T, C,
                               NH);
        ob__linear_backward(a->dbtc, g->qkvw + l * 3 * C * C, g->qkvb + l * 3 * C, a->dqkv, ln1,
                            p->qkvw + l * 3 * C * C, BT, C, 3 * C);
        final_pair(m, OB__TF_QKVW, l);
        ob__layernorm_backward(a->dres, g->ln1w + l * C, g->ln1b + l * C, a->dbtc, residual,
                               p->ln1w + l * C, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, BT, C);
        final_pair(m, OB__TF_LN1W, l);
    }
    ob__embed_backward(g->wte, g->wpe, a->dres, batch->tokens, T + 1, B, T, C);
    ob__model_grad_final(m, ob__tf_part_of(OB__TF_WPE, 0, L), 1);
    ob__model_grad_final(m, ob__tf_part_of(OB__TF_WTE, 0, L), 1);
}

void ob__tf_forward_backward(ob_model *m, const float *params, const ob_batch *batch, float *grad,
                             ob_model_result *res)
{
    const ob__tf_acts *a = &m->acts.tf;
    size_t B = batch->n, T = m->cfg.context;
    size_t BT = B * T;

    /* The parameters are only read; the struct of pointers is shared with the gradients. */
    tf_tensors p;
    tf_tensors_at(m, (float *)(uintptr_t)params, &p);

    /* Position t predicts byte t + 1 of the row. */
    for (size_t b = 0; b < B; b++) {
        for (size_t t = 0; t < T; t++)
            a->targets[b * T + t] = batch->tokens[b * (T + 1) + t + 1];
    }
    tf_forward(m, &p, batch, B);

    double loss_sum = 0.0;
    size_t correct = 0;
    ob__xent_forward(a->probs, &loss_sum, &correct, a->logits, a->targets, BT, V);
    res->loss = loss_sum / (double)BT;
    res->correct = correct;
    res->count = BT;
    /* A loss that is not finite fails the call: no gradient to compute (it stays zero). */
    if (!grad || !isfinite(res->loss)) return;

    tf_tensors g;
    tf_tensors_at(m, grad, &g);
    ob__xent_backward(a->probs, a->targets, BT, V, 1.0f / (float)BT);
    tf_backward(m, &p, &g, batch, B);
}
