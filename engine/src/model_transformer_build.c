/* The layout of the decoder-only byte transformer (ob__tf_build; the model is described in
 * model_transformer.c, which runs it): the tensor table with GPT-2's initialisation, the gradient
 * parts in the order the backward pass finishes them, and the activation buffers. Part of
 * onebit_jobspec with model.c. */
#include "internal.h"
#include "model_internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define V OB_MODEL_VOCAB

/* The pairs of a block in the order its backward pass finishes them: weight, then bias. */
static const size_t k_block_pairs[] = {OB__TF_FCPROJW,  OB__TF_FCW,  OB__TF_LN2W,
                                       OB__TF_ATTPROJW, OB__TF_QKVW, OB__TF_LN1W};

/* The parts table, with the stages in the order tf_backward reports them. */
static ob_status tf_parts(ob_model *m, ob_err *err)
{
    size_t L = m->cfg.n_layer, n = 2 + OB__TF_STACKED * L + (m->cfg.tied_output ? 2 : 3);
    ob_status st = ob__model_set_parts(m, n, err);
    if (st) return st;
    for (size_t t = 0; t < m->num_tensors; t++) {
        const ob_model_tensor *x = &m->tensors[t];
        int stacked = t >= OB__TF_LN1W && t < OB__TF_LNFW;
        size_t slices = stacked ? L : 1, each = x->numel / slices;
        for (size_t l = 0; l < slices; l++)
            m->parts[ob__tf_part_of(t, l, L)] = (ob_model_grad_part){x->offset + l * each, each, 0};
    }
    size_t s = 0;
    if (!m->cfg.tied_output) m->parts[ob__tf_part_of(OB__TF_LM_HEAD, 0, L)].stage = s++;
    m->parts[ob__tf_part_of(OB__TF_LNFW, 0, L)].stage = s;
    m->parts[ob__tf_part_of(OB__TF_LNFB, 0, L)].stage = s++;
    for (size_t l = L; l-- > 0;) {
        for (size_t i = 0; i < sizeof k_block_pairs / sizeof k_block_pairs[0]; i++) {
            m->parts[ob__tf_part_of(k_block_pairs[i], l, L)].stage = s;
            m->parts[ob__tf_part_of(k_block_pairs[i] + 1, l, L)].stage = s++;
        }
    }
    m->parts[ob__tf_part_of(OB__TF_WPE, 0, L)].stage = s++;
    m->parts[ob__tf_part_of(OB__TF_WTE, 0, L)].stage = s;
    return OB_OK;
}

/* One tensor of the parameter table: its name, GPT-2 initialisation and shape (0: no such
 * dimension). */
typedef struct tf_tensor {
    const char *name;
    float std, value;
    size_t d0, d1, d2;
} tf_tensor;

/* The parameter table of cfg, in the order of the OB__TF_* indices; returns its length (the
 * lm_head only when the output is untied). */
static size_t tf_table(const ob_model_config *cfg, tf_tensor table[OB__TF_LM_HEAD + 1])
{
    size_t L = cfg->n_layer, C = cfg->d_model, T = cfg->context;
    /* GPT-2 initialisation: 0.02 everywhere, and the projections that write into the residual
     * stream scaled by 1/sqrt(2 L) so its variance does not grow with depth. */
    float std = 0.02f, res_std = (float)(0.02 / sqrt(2.0 * (double)L));
    const tf_tensor all[] = {
        {"wte", std, 0, V, C, 0},             // (V, C)
        {"wpe", std, 0, T, C, 0},             // (T, C)
        {"ln1w", 0, 1, L, C, 0},              // (L, C)
        {"ln1b", 0, 0, L, C, 0},              // (L, C)
        {"qkvw", std, 0, L, 3 * C, C},        // (L, 3C, C)
        {"qkvb", 0, 0, L, 3 * C, 0},          // (L, 3C)
        {"attprojw", res_std, 0, L, C, C},    // (L, C, C)
        {"attprojb", 0, 0, L, C, 0},          // (L, C)
        {"ln2w", 0, 1, L, C, 0},              // (L, C)
        {"ln2b", 0, 0, L, C, 0},              // (L, C)
        {"fcw", std, 0, L, 4 * C, C},         // (L, 4C, C)
        {"fcb", 0, 0, L, 4 * C, 0},           // (L, 4C)
        {"fcprojw", res_std, 0, L, C, 4 * C}, // (L, C, 4C)
        {"fcprojb", 0, 0, L, C, 0},           // (L, C)
        {"lnfw", 0, 1, C, 0, 0},              // (C)
        {"lnfb", 0, 0, C, 0, 0},              // (C)
        {"lm_head", std, 0, V, C, 0},         // (V, C), untied only
    };
    _Static_assert(sizeof all / sizeof all[0] == OB__TF_LM_HEAD + 1,
                   "the table and the OB__TF_* indices must list the same tensors");
    memcpy(table, all, sizeof all);
    return sizeof all / sizeof all[0] - (cfg->tied_output ? 1 : 0);
}

size_t ob__tf_num_params(const ob_model_config *cfg)
{
    tf_tensor table[OB__TF_LM_HEAD + 1];
    size_t num = tf_table(cfg, table), sum = 0;
    int ovf = 0;
    for (size_t i = 0; i < num && !ovf; i++) {
        const tf_tensor *x = &table[i];
        size_t n = ob__model_numel(&ovf, x->d0, x->d1, x->d2);
        if (n > SIZE_MAX - sum) ovf = 1;
        sum += n;
    }
    return ovf ? SIZE_MAX : sum;
}

ob_status ob__tf_build(ob_model *m, ob_err *err)
{
    const ob_model_config *cfg = &m->cfg;
    size_t L = cfg->n_layer, C = cfg->d_model, T = cfg->context, NH = cfg->n_head;
    size_t B = cfg->max_batch;
    tf_tensor table[OB__TF_LM_HEAD + 1];
    size_t num = tf_table(cfg, table);
    for (size_t i = 0; i < num; i++) {
        ob_status st = ob__model_add_tensor(m, table[i].name, table[i].std, table[i].value,
                                            table[i].d0, table[i].d1, table[i].d2, err);
        if (st) return st;
    }
    ob_status pst = tf_parts(m, err);
    if (pst) return pst;

    /* The activation table. */
    ob__tf_acts *a = &m->acts.tf;
    float *targets = NULL;
    int ovf = 0;
    size_t BTC = ob__model_prod(&ovf, B, T, C, 1);
    size_t LBTC = ob__model_prod(&ovf, L, B, T, C);
    size_t LBT = ob__model_prod(&ovf, L, B, T, 1);
    size_t BT = ob__model_prod(&ovf, B, T, 1, 1);
    size_t BTV = ob__model_prod(&ovf, B, T, V, 1);
    size_t att = ob__model_prod(&ovf, ob__model_prod(&ovf, L, B, NH, 1), T, T, 1);
    size_t TT = ob__model_prod(&ovf, T, T, 1, 1);
    /* 3 * LBTC and 4 * LBTC must not wrap either; ob__model_alloc_acts then refuses anything
     * that does not fit a size_t in bytes. */
    if (ovf || LBTC > SIZE_MAX / 4)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "model too large: activations for ob_model_config.max_batch = %zu overflow",
                      B);
    const ob__act_slot slots[] = {
        {&a->encoded, BTC},       // (B, T, C)
        {&a->ln1, LBTC},          // (L, B, T, C)
        {&a->ln1_mean, LBT},      // (L, B, T)
        {&a->ln1_rstd, LBT},      // (L, B, T)
        {&a->qkv, 3 * LBTC},      // (L, B, T, 3C)
        {&a->atty, LBTC},         // (L, B, T, C)
        {&a->att, att},           // (L, B, NH, T, T)
        {&a->residual2, LBTC},    // (L, B, T, C)
        {&a->ln2, LBTC},          // (L, B, T, C)
        {&a->ln2_mean, LBT},      // (L, B, T)
        {&a->ln2_rstd, LBT},      // (L, B, T)
        {&a->fch, 4 * LBTC},      // (L, B, T, 4C)
        {&a->fch_gelu, 4 * LBTC}, // (L, B, T, 4C)
        {&a->residual3, LBTC},    // (L, B, T, C)
        {&a->lnf, BTC},           // (B, T, C)
        {&a->lnf_mean, BT},       // (B, T)
        {&a->lnf_rstd, BT},       // (B, T)
        {&a->logits, BTV},        // (B, T, V)
        {&a->probs, BTV},         // (B, T, V)
        {&a->dres, BTC},          // (B, T, C)
        {&a->dbtc, BTC},          // (B, T, C)
        {&a->dqkv, 3 * BTC},      // (B, T, 3C)
        {&a->dfch, 4 * BTC},      // (B, T, 4C)
        {&a->datt, TT},           // (T, T)
        {&targets, BT},           // (B, T) int32, the size of a float
    };
    ob_status st = ob__model_alloc_acts(m, slots, sizeof slots / sizeof slots[0], err);
    if (st) return st;
    /* The block comes from calloc-style memory with no declared type, so storing int32 values
     * in this slice is well defined as long as it is only ever read back as int32. */
    a->targets = (int32_t *)(void *)targets;
    m->logits = a->logits;
    return OB_OK;
}
