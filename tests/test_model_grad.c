/* Model tests: every analytic gradient against central finite differences, on tiny models where
 * every parameter coordinate can be checked; a check that the gradient check itself notices a
 * 2% error in any single tensor; causality of the transformer; the loss at initialisation;
 * config and batch validation; evaluation (grad == NULL) agreeing with training.
 *
 * Finite differences use a 4-point central stencil on the loss (accumulated in double by the
 * model), at step h and at h/2. The h estimate n1 is compared with the analytic value a:
 * |a - n1| <= RTOL * max(|a|, |n1|) + ATOL + |n1 - n2|, the last term being the stencil's own
 * error estimate (truncation plus float32 rounding noise). Where n1 and n2 disagree grossly the
 * loss has a kink inside the stencil (ReLU): the coordinate is skipped and counted; skips must
 * stay rare for ReLU and are not allowed at all for smooth models. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "onebit/model.h"
#include "onebit/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RTOL 1e-2
#define ATOL 2e-5          /* float32 rounding noise of the stencil is about 1e-5 on these models */
#define FD_STEP 1.5625e-2f /* 2^-6: a power of two keeps p +- h (nearly) exact */
#define KINK_RTOL 0.02     /* n1 and n2 this far apart: the loss has a kink inside the stencil */
#define KINK_ATOL 1e-4

/* ---- fixtures ------------------------------------------------------------------------------ */

/* A batch plus the memory behind it. */
typedef struct test_data {
    ob_batch batch;
    float *x;
    int32_t *y;
    uint8_t *tokens;
} test_data;

static void data_free(test_data *d)
{
    free(d->x);
    free(d->y);
    free(d->tokens);
}

/* Random examples; bytes are drawn from the first `alphabet` letters from 'a' on (wrapping), and
 * a small alphabet makes tokens repeat so embedding rows collect several gradients. */
static test_data make_data_alphabet(const ob_model_config *cfg, size_t n, uint64_t seed,
                                    unsigned alphabet)
{
    test_data d = {0};
    ob_rng rng;
    ob_rng_seed(&rng, seed, 99);
    d.batch.n = n;
    if (cfg->kind == OB_MODEL_TRANSFORMER) {
        size_t len = n * (cfg->context + 1);
        d.tokens = malloc(len);
        assert_non_null(d.tokens);
        for (size_t i = 0; i < len; i++)
            d.tokens[i] = (uint8_t)(97 + ob_rng_below(&rng, alphabet));
        d.batch.context = cfg->context;
        d.batch.tokens = d.tokens;
    } else {
        d.x = malloc(n * cfg->input_dim * sizeof *d.x);
        d.y = malloc(n * sizeof *d.y);
        assert_non_null(d.x);
        assert_non_null(d.y);
        for (size_t i = 0; i < n * cfg->input_dim; i++)
            d.x[i] = ob_rng_normal(&rng);
        for (size_t i = 0; i < n; i++)
            d.y[i] = (int32_t)ob_rng_below(&rng, cfg->num_classes);
        d.batch.input_dim = cfg->input_dim;
        d.batch.x = d.x;
        d.batch.y = d.y;
    }
    return d;
}

static test_data make_data(const ob_model_config *cfg, size_t n, uint64_t seed)
{
    return make_data_alphabet(cfg, n, seed, 6);
}

static ob_model *make_model(const ob_model_config *cfg)
{
    ob_model *m = NULL;
    ob_err err;
    ob_err_clear(&err);
    ob_status st = ob_model_create(&m, cfg, &err);
    if (st != OB_OK) fail_msg("ob_model_create: %s", err.msg);
    return m;
}

/* The default initialisation plus N(0, 0.3) noise on every coordinate, so that gains, biases and
 * attention patterns are all far from their special initial values and every path carries
 * gradient. */
static float *make_params(const ob_model *m, uint64_t seed)
{
    size_t np = ob_model_num_params(m);
    float *p = malloc(np * sizeof *p);
    assert_non_null(p);
    ob_model_init_params(m, p, seed);
    ob_rng rng;
    ob_rng_seed(&rng, seed, 7);
    for (size_t i = 0; i < np; i++)
        p[i] += 0.3f * ob_rng_normal(&rng);
    return p;
}

static double eval_loss(ob_model *m, const float *params, const ob_batch *b)
{
    ob_model_result res;
    ob_err err;
    ob_err_clear(&err);
    ob_status st = ob_model_forward_backward(m, params, b, NULL, &res, &err);
    if (st != OB_OK) fail_msg("forward: %s", err.msg);
    return res.loss;
}

static float *compute_grad(ob_model *m, const float *params, const ob_batch *b)
{
    float *g = malloc(ob_model_num_params(m) * sizeof *g);
    assert_non_null(g);
    ob_model_result res;
    ob_err err;
    ob_err_clear(&err);
    ob_status st = ob_model_forward_backward(m, params, b, g, &res, &err);
    if (st != OB_OK) fail_msg("forward_backward: %s", err.msg);
    return g;
}

/* ---- the gradient checker ------------------------------------------------------------------ */

/* d loss / d params[i] by the 4-point stencil with step h; params is restored. */
static double fd_coord(ob_model *m, float *params, const ob_batch *b, size_t i, float h)
{
    float p0 = params[i];
    double f[4];
    const float steps[4] = {h, -h, 2 * h, -2 * h};
    for (int k = 0; k < 4; k++) {
        params[i] = p0 + steps[k];
        f[k] = eval_loss(m, params, b);
    }
    params[i] = p0;
    return (8.0 * (f[0] - f[1]) - (f[2] - f[3])) / (12.0 * (double)h);
}

typedef struct check_stats {
    size_t checked, failed, skipped;
    double worst; /* largest |error| / tolerance seen: below 1 passes */
} check_stats;

/* Checks grad against finite differences at the given coordinates of one tensor.
 *
 * n1 (step h) is the estimate; n2 (step h/2) estimates its error: |n1 - n2| is about the
 * truncation error of n1 plus rounding noise, and it is added to the tolerance. Where the two
 * disagree grossly the loss is not smooth within the stencil (a ReLU kink) and the coordinate
 * is skipped and counted instead. */
static check_stats check_coords(ob_model *m, float *params, const float *grad, const ob_batch *b,
                                const size_t *coords, size_t count, int verbose, const char *name)
{
    check_stats s = {0};
    for (size_t c = 0; c < count; c++) {
        size_t i = coords[c];
        double a = grad[i];
        double n1 = fd_coord(m, params, b, i, FD_STEP);
        double n2 = fd_coord(m, params, b, i, FD_STEP / 2);
        double fd_err = fabs(n1 - n2);
        double scale = fmax(fabs(a), fabs(n1));
        if (fd_err > KINK_RTOL * fmax(fabs(n1), fabs(n2)) + KINK_ATOL) {
            s.skipped++;
            continue;
        }
        double tol = RTOL * scale + ATOL + fd_err;
        double ratio = fabs(a - n1) / tol;
        s.worst = fmax(s.worst, ratio);
        s.checked++;
        if (ratio > 1.0) {
            s.failed++;
            if (verbose && s.failed <= 3)
                print_error("  %s: parameter %zu: analytic %.8g, numeric %.8g (h/2: %.8g)\n", name,
                            i, a, n1, n2);
        }
    }
    return s;
}

/* Checks every coordinate of every tensor (or at most max_per_tensor random ones per tensor).
 * max_skip_frac bounds the share of coordinates skipped as non-smooth. */
static void check_model_grad(const ob_model_config *cfg, size_t n, size_t max_per_tensor,
                             double max_skip_frac, uint64_t seed)
{
    ob_model *m = make_model(cfg);
    test_data d = make_data(cfg, n, seed);
    float *params = make_params(m, seed);
    float *grad = compute_grad(m, params, &d.batch);
    size_t *coords = NULL;
    size_t total_checked = 0, total_skipped = 0, total_failed = 0;
    ob_rng rng;
    ob_rng_seed(&rng, seed, 3);

    for (size_t ti = 0; ti < ob_model_num_tensors(m); ti++) {
        const ob_model_tensor *t = ob_model_tensor_at(m, ti);
        size_t count = t->numel < max_per_tensor ? t->numel : max_per_tensor;
        coords = realloc(coords, count * sizeof *coords);
        assert_non_null(coords);
        for (size_t c = 0; c < count; c++)
            coords[c] = t->offset + (count == t->numel ? c : ob_rng_below(&rng, t->numel));
        check_stats s = check_coords(m, params, grad, &d.batch, coords, count, 1, t->name);
        print_message("  %-14s %6zu checked, %3zu skipped, %3zu failed, worst %.3f of tolerance\n",
                      t->name, s.checked, s.skipped, s.failed, s.worst);
        total_checked += s.checked;
        total_skipped += s.skipped;
        total_failed += s.failed;
    }
    assert_int_equal(total_failed, 0);
    assert_true((double)total_skipped <= max_skip_frac * (double)(total_checked + total_skipped));
    assert_true(total_checked > 0);

    free(coords);
    free(grad);
    free(params);
    data_free(&d);
    ob_model_destroy(m);
}

static ob_model_config tiny_cls(ob_model_kind kind, ob_activation act)
{
    ob_model_config cfg;
    ob_model_config_default(&cfg, kind);
    cfg.max_batch = 6;
    cfg.input_dim = 6;
    cfg.num_classes = 4;
    if (kind == OB_MODEL_MLP) {
        cfg.num_hidden = 2;
        cfg.hidden[0] = 7;
        cfg.hidden[1] = 5;
        cfg.activation = act;
    }
    return cfg;
}

static ob_model_config tiny_tf(int tied)
{
    ob_model_config cfg;
    ob_model_config_default(&cfg, OB_MODEL_TRANSFORMER);
    cfg.max_batch = 3; /* the checks run with n = 2: a batch smaller than the activations */
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.d_model = 8;
    cfg.context = 5;
    cfg.tied_output = tied;
    return cfg;
}

/* ---- gradient checks, one per layer type ---------------------------------------------------- */

/* Linear layer + softmax cross-entropy. */
static void test_grad_softmax(void **state)
{
    ob_model_config cfg = tiny_cls(OB_MODEL_SOFTMAX, OB_ACT_RELU);
    check_model_grad(&cfg, 5, SIZE_MAX, 0.0, 11);
}

static void test_grad_mlp_relu(void **state)
{
    ob_model_config cfg = tiny_cls(OB_MODEL_MLP, OB_ACT_RELU);
    check_model_grad(&cfg, 5, SIZE_MAX, 0.03, 12);
}

static void test_grad_mlp_tanh(void **state)
{
    ob_model_config cfg = tiny_cls(OB_MODEL_MLP, OB_ACT_TANH);
    check_model_grad(&cfg, 5, SIZE_MAX, 0.0, 13);
}

static void test_grad_mlp_gelu(void **state)
{
    ob_model_config cfg = tiny_cls(OB_MODEL_MLP, OB_ACT_GELU);
    check_model_grad(&cfg, 5, SIZE_MAX, 0.0, 14);
}

/* Embeddings, layer norms, causal attention, GELU MLP, residuals, tied output: every
 * coordinate of a 2-layer, 2-head, d_model 8, context 5 model on a batch of 2. */
static void test_grad_transformer_tied(void **state)
{
    ob_model_config cfg = tiny_tf(1);
    check_model_grad(&cfg, 2, SIZE_MAX, 0.0, 21);
}

static void test_grad_transformer_untied(void **state)
{
    ob_model_config cfg = tiny_tf(0);
    check_model_grad(&cfg, 2, SIZE_MAX, 0.0, 22);
}

/* A single-layer, single-head model with a longer context and a full batch: different shapes
 * through the attention kernels than the 2-head check. */
static void test_grad_transformer_one_head(void **state)
{
    ob_model_config cfg = tiny_tf(1);
    cfg.n_layer = 1;
    cfg.n_head = 1;
    cfg.d_model = 6;
    cfg.context = 9;
    check_model_grad(&cfg, 3, 400, 0.0, 23);
}

/* ---- the checker is sensitive --------------------------------------------------------------- */

/* For every tensor, a copy of the true gradient with only that tensor's values off by 2% -- what
 * a subtly wrong backward in one layer would produce -- must fail the check. */
static void check_sensitivity(const ob_model_config *cfg, size_t n, uint64_t seed)
{
    ob_model *m = make_model(cfg);
    test_data d = make_data(cfg, n, seed);
    float *params = make_params(m, seed);
    float *grad = compute_grad(m, params, &d.batch);
    size_t np = ob_model_num_params(m);
    float *bad = malloc(np * sizeof *bad);
    assert_non_null(bad);

    for (size_t ti = 0; ti < ob_model_num_tensors(m); ti++) {
        const ob_model_tensor *t = ob_model_tensor_at(m, ti);
        /* Check the tensor's 8 largest gradient entries: a real layer bug shows up there. */
        size_t coords[8], count = 0;
        for (size_t k = 0; k < 8 && k < t->numel; k++) {
            size_t best = SIZE_MAX;
            for (size_t j = t->offset; j < t->offset + t->numel; j++) {
                int taken = 0;
                for (size_t c = 0; c < count; c++)
                    taken |= coords[c] == j;
                if (!taken && (best == SIZE_MAX || fabsf(grad[j]) > fabsf(grad[best]))) best = j;
            }
            coords[count++] = best;
        }
        check_stats good = check_coords(m, params, grad, &d.batch, coords, count, 1, t->name);
        memcpy(bad, grad, np * sizeof *bad);
        for (size_t j = t->offset; j < t->offset + t->numel; j++)
            bad[j] *= 1.02f;
        check_stats wrong = check_coords(m, params, bad, &d.batch, coords, count, 0, t->name);
        if (good.failed != 0 || wrong.failed == 0)
            fail_msg("tensor %s: true gradient failed %zu, 2%% off gradient failed %zu of %zu",
                     t->name, good.failed, wrong.failed, wrong.checked);
    }
    free(bad);
    free(grad);
    free(params);
    data_free(&d);
    ob_model_destroy(m);
}

static void test_checker_sensitive(void **state)
{
    ob_model_config tf = tiny_tf(0);
    check_sensitivity(&tf, 2, 31);
    ob_model_config mlp = tiny_cls(OB_MODEL_MLP, OB_ACT_GELU);
    check_sensitivity(&mlp, 5, 32);
}

/* ---- causality ---------------------------------------------------------------------------- */

/* Changing the input byte at position s changes no logit at a position before s, in any row,
 * and does change the logits at s. */
static void test_causality(void **state)
{
    ob_model_config cfg = tiny_tf(1);
    cfg.context = 7;
    ob_model *m = make_model(&cfg);
    test_data d = make_data(&cfg, 2, 41);
    float *params = make_params(m, 41);
    size_t T = cfg.context, V = OB_MODEL_VOCAB, rowlen = T * V;
    size_t nlogits = 2 * rowlen;
    float *base = malloc(nlogits * sizeof *base);
    assert_non_null(base);

    eval_loss(m, params, &d.batch);
    memcpy(base, ob_model_logits(m), nlogits * sizeof *base);
    for (size_t b = 0; b < 2; b++) {
        for (size_t s = 1; s < T; s++) {
            uint8_t saved = d.tokens[b * (T + 1) + s];
            d.tokens[b * (T + 1) + s] = (uint8_t)(saved + 17);
            eval_loss(m, params, &d.batch);
            const float *now = ob_model_logits(m);
            /* Positions before s in the changed row, and all of the other row, bit for bit. */
            assert_memory_equal(now + b * rowlen, base + b * rowlen, s * V * sizeof(float));
            size_t other = 1 - b;
            assert_memory_equal(now + other * rowlen, base + other * rowlen,
                                rowlen * sizeof(float));
            assert_memory_not_equal(now + b * rowlen + s * V, base + b * rowlen + s * V,
                                    V * sizeof(float));
            d.tokens[b * (T + 1) + s] = saved;
        }
    }
    free(base);
    free(params);
    data_free(&d);
    ob_model_destroy(m);
}

/* ---- initialisation ------------------------------------------------------------------------ */

static double init_loss(const ob_model_config *cfg, size_t n, uint64_t seed)
{
    ob_model *m = make_model(cfg);
    test_data d = make_data_alphabet(cfg, n, seed, 256);
    float *params = malloc(ob_model_num_params(m) * sizeof *params);
    assert_non_null(params);
    ob_model_init_params(m, params, seed);
    double loss = eval_loss(m, params, &d.batch);
    free(params);
    data_free(&d);
    ob_model_destroy(m);
    return loss;
}

static void test_init_loss(void **state)
{
    ob_model_config cfg;
    ob_model_config_default(&cfg, OB_MODEL_SOFTMAX);
    assert_true(fabs(init_loss(&cfg, 32, 1) - log(10.0)) < 0.05);

    const ob_activation acts[] = {OB_ACT_RELU, OB_ACT_TANH, OB_ACT_GELU};
    for (size_t i = 0; i < 3; i++) {
        ob_model_config_default(&cfg, OB_MODEL_MLP);
        cfg.activation = acts[i];
        double loss = init_loss(&cfg, 32, 2);
        if (fabs(loss - log(10.0)) > 0.05) fail_msg("MLP act %zu: init loss %g", i, loss);
    }
    for (int tied = 0; tied <= 1; tied++) {
        ob_model_config_default(&cfg, OB_MODEL_TRANSFORMER);
        cfg.max_batch = 4;
        cfg.context = 32;
        cfg.tied_output = tied;
        double loss = init_loss(&cfg, 4, 3);
        if (fabs(loss - log(256.0)) > 0.05)
            fail_msg("transformer tied=%d: init loss %g", tied, loss);
    }
}

/* Same seed, same values; another seed, other values; gains 1 and biases 0. */
static void test_init_deterministic(void **state)
{
    ob_model_config cfg = tiny_tf(0);
    ob_model *m = make_model(&cfg);
    size_t np = ob_model_num_params(m);
    float *a = malloc(np * sizeof *a), *b = malloc(np * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    ob_model_init_params(m, a, 5);
    ob_model_init_params(m, b, 5);
    assert_memory_equal(a, b, np * sizeof *a);
    ob_model_init_params(m, b, 6);
    assert_memory_not_equal(a, b, np * sizeof *a);
    for (size_t ti = 0; ti < ob_model_num_tensors(m); ti++) {
        const ob_model_tensor *t = ob_model_tensor_at(m, ti);
        const float *p = a + t->offset;
        if (strcmp(t->name, "ln1w") == 0 || strcmp(t->name, "lnfw") == 0) {
            for (size_t j = 0; j < t->numel; j++)
                assert_true(p[j] == 1.0f);
        } else if (strcmp(t->name, "qkvb") == 0 || strcmp(t->name, "lnfb") == 0) {
            for (size_t j = 0; j < t->numel; j++)
                assert_true(p[j] == 0.0f);
        }
    }
    free(a);
    free(b);
    ob_model_destroy(m);
}

/* ---- the tensor table ---------------------------------------------------------------------- */

static void test_tensor_table(void **state)
{
    ob_model_config cfg;
    ob_model_config_default(&cfg, OB_MODEL_TRANSFORMER); /* 2 layers, 4 heads, 128, 128, tied */
    ob_model *m = make_model(&cfg);
    /* wte 256*128 + wpe 128*128 + 2 * (12 C^2 + 13 C) + 2 C */
    assert_int_equal(ob_model_num_params(m), 445952);
    assert_int_equal(ob_model_num_tensors(m), 16);
    size_t next = 0;
    for (size_t ti = 0; ti < ob_model_num_tensors(m); ti++) {
        const ob_model_tensor *t = ob_model_tensor_at(m, ti);
        assert_int_equal(t->offset, next);
        size_t numel = 1;
        for (size_t k = 0; k < t->ndim; k++)
            numel *= t->shape[k];
        assert_int_equal(numel, t->numel);
        next += t->numel;
    }
    assert_int_equal(next, ob_model_num_params(m));
    assert_null(ob_model_tensor_at(m, ob_model_num_tensors(m)));
    const ob_model_tensor *qkvw = ob_model_tensor_at(m, 4);
    assert_string_equal(qkvw->name, "qkvw");
    assert_int_equal(qkvw->ndim, 3);
    assert_int_equal(qkvw->shape[0], 2);
    assert_int_equal(qkvw->shape[1], 384);
    assert_int_equal(qkvw->shape[2], 128);
    ob_model_destroy(m);

    cfg.tied_output = 0;
    m = make_model(&cfg);
    assert_int_equal(ob_model_num_params(m), 445952 + 256 * 128);
    assert_string_equal(ob_model_tensor_at(m, 16)->name, "lm_head");
    ob_model_destroy(m);

    ob_model_config_default(&cfg, OB_MODEL_MLP); /* 784 -> 256 -> 128 -> 10 */
    m = make_model(&cfg);
    assert_int_equal(ob_model_num_params(m), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    assert_string_equal(ob_model_tensor_at(m, 0)->name, "layer0.weight");
    assert_string_equal(ob_model_tensor_at(m, 5)->name, "output.bias");
    ob_model_destroy(m);
}

/* ---- the gradient parts and the grad hook --------------------------------------------------- */

/* What the hook saw: the parts in report order, and each part's gradient as it was then. */
typedef struct hook_log {
    const ob_model *m;
    const float *grad;
    float *seen;         /* (num_params) each part's values at its report */
    size_t *order;       /* parts in report order */
    unsigned char *hits; /* reports per part */
    size_t n;
} hook_log;

static void record_part(void *user, size_t part)
{
    hook_log *h = user;
    const ob_model_grad_part *p = ob_model_grad_part_at(h->m, part);
    assert_non_null(p);
    h->hits[part]++;
    h->order[h->n++] = part;
    memcpy(h->seen + p->offset, h->grad + p->offset, p->numel * sizeof(float));
}

/* The parts cover the buffer in order; the backward pass reports each once, in the order of
 * their stages (index order within one), and no part's gradient changes after its report. */
static void check_grad_parts(const ob_model_config *cfg, size_t expect_parts)
{
    ob_model *m = make_model(cfg);
    size_t np = ob_model_num_params(m), nparts = ob_model_num_grad_parts(m);
    assert_int_equal(nparts, expect_parts);
    size_t next = 0;
    for (size_t i = 0; i < nparts; i++) {
        const ob_model_grad_part *p = ob_model_grad_part_at(m, i);
        assert_int_equal(p->offset, next);
        assert_true(p->numel > 0);
        next += p->numel;
    }
    assert_int_equal(next, np);
    assert_null(ob_model_grad_part_at(m, nparts));

    test_data d = make_data(cfg, 2, 3);
    float *params = make_params(m, 3), *g = malloc(np * sizeof *g);
    hook_log h = {
        m, g, calloc(np, sizeof(float)), calloc(nparts, sizeof(size_t)), calloc(nparts, 1), 0};
    assert_non_null(g);
    assert_non_null(h.seen);
    assert_non_null(h.order);
    assert_non_null(h.hits);
    ob_model_set_grad_hook(m, record_part, &h);
    assert_int_equal(ob_model_forward_backward(m, params, &d.batch, g, NULL, NULL), OB_OK);
    assert_int_equal(h.n, nparts);
    for (size_t i = 0; i < nparts; i++)
        assert_int_equal(h.hits[i], 1);
    for (size_t i = 1; i < nparts; i++) {
        const ob_model_grad_part *a = ob_model_grad_part_at(m, h.order[i - 1]);
        const ob_model_grad_part *b = ob_model_grad_part_at(m, h.order[i]);
        assert_true(a->stage < b->stage || (a->stage == b->stage && h.order[i - 1] < h.order[i]));
    }
    /* Final when reported: the values then are the values at the end, bit for bit. */
    assert_memory_equal(h.seen, g, np * sizeof *g);
    /* Without a hook nothing is reported. */
    ob_model_set_grad_hook(m, NULL, NULL);
    h.n = 0;
    assert_int_equal(ob_model_forward_backward(m, params, &d.batch, g, NULL, NULL), OB_OK);
    assert_int_equal(h.n, 0);
    free(h.seen), free(h.order), free(h.hits), free(g), free(params);
    data_free(&d);
    ob_model_destroy(m);
}

static void test_grad_parts(void **state)
{
    (void)state;
    ob_model_config cfg;
    ob_model_config_default(&cfg, OB_MODEL_MLP);
    cfg.input_dim = 6;
    cfg.hidden[0] = 5;
    cfg.hidden[1] = 4;
    cfg.num_hidden = 2;
    cfg.num_classes = 3;
    cfg.max_batch = 2;
    check_grad_parts(&cfg, 6); /* the tensors */
    for (int tied = 0; tied <= 1; tied++) {
        cfg = tiny_tf(tied);
        cfg.n_layer = 3;
        /* wte, wpe, 12 stacked tensors in 3 slices, lnfw, lnfb, an untied lm_head */
        check_grad_parts(&cfg, 2 + 12 * 3 + 2 + (tied ? 0 : 1));
        /* Layer 2's slices are final before layer 1's, and those before layer 0's: the
         * fcprojw slice of layer l (tensor 12 of the table, parts 2 + 10 * 3 + l) */
        ob_model *m = make_model(&cfg);
        const ob_model_grad_part *f2 = ob_model_grad_part_at(m, 2 + 10 * 3 + 2);
        const ob_model_grad_part *f1 = ob_model_grad_part_at(m, 2 + 10 * 3 + 1);
        const ob_model_grad_part *f0 = ob_model_grad_part_at(m, 2 + 10 * 3 + 0);
        const ob_model_tensor *t = ob_model_tensor_at(m, 12);
        assert_string_equal(t->name, "fcprojw");
        assert_int_equal(f0->offset, t->offset);
        assert_int_equal(f1->offset, t->offset + t->numel / 3);
        assert_true(f2->stage < f1->stage && f1->stage < f0->stage);
        /* wte last */
        for (size_t i = 1; i < ob_model_num_grad_parts(m); i++)
            assert_true(ob_model_grad_part_at(m, i)->stage <= ob_model_grad_part_at(m, 0)->stage);
        ob_model_destroy(m);
    }
}

/* ---- validation ---------------------------------------------------------------------------- */

typedef struct bad_config {
    const char *field; /* must appear in err.msg */
    ob_model_kind kind;
    void (*mutate)(ob_model_config *cfg);
} bad_config;

static void zero_batch(ob_model_config *c)
{
    c->max_batch = 0;
}
static void huge_batch(ob_model_config *c)
{
    c->max_batch = SIZE_MAX;
}
static void zero_input(ob_model_config *c)
{
    c->input_dim = 0;
}
static void one_class(ob_model_config *c)
{
    c->num_classes = 1;
}
static void no_hidden(ob_model_config *c)
{
    c->num_hidden = 0;
}
static void many_hidden(ob_model_config *c)
{
    c->num_hidden = OB_MODEL_MAX_HIDDEN + 1;
}
static void zero_width(ob_model_config *c)
{
    c->hidden[1] = 0;
}
static void bad_act(ob_model_config *c)
{
    c->activation = (ob_activation)7;
}
static void bad_kind(ob_model_config *c)
{
    c->kind = (ob_model_kind)9;
}
static void zero_layers(ob_model_config *c)
{
    c->n_layer = 0;
}
static void zero_heads(ob_model_config *c)
{
    c->n_head = 0;
}
static void odd_heads(ob_model_config *c)
{
    c->n_head = 3;
}
static void zero_dmodel(ob_model_config *c)
{
    c->d_model = 0;
}
static void zero_context(ob_model_config *c)
{
    c->context = 0;
}
static void bad_tied(ob_model_config *c)
{
    c->tied_output = 2;
}
static void huge_tokens(ob_model_config *c)
{
    c->max_batch = (size_t)1 << 20;
    c->context = 1 << 16;
}

static void test_invalid_config(void **state)
{
    const bad_config cases[] = {
        {"max_batch", OB_MODEL_SOFTMAX, zero_batch},
        {"max_batch", OB_MODEL_MLP, huge_batch},
        {"input_dim", OB_MODEL_SOFTMAX, zero_input},
        {"num_classes", OB_MODEL_MLP, one_class},
        {"num_hidden", OB_MODEL_MLP, no_hidden},
        {"num_hidden", OB_MODEL_MLP, many_hidden},
        {"hidden[1]", OB_MODEL_MLP, zero_width},
        {"activation", OB_MODEL_MLP, bad_act},
        {"kind", OB_MODEL_MLP, bad_kind},
        {"n_layer", OB_MODEL_TRANSFORMER, zero_layers},
        {"n_head", OB_MODEL_TRANSFORMER, zero_heads},
        {"n_head", OB_MODEL_TRANSFORMER, odd_heads},
        {"d_model", OB_MODEL_TRANSFORMER, zero_dmodel},
        {"context", OB_MODEL_TRANSFORMER, zero_context},
        {"tied_output", OB_MODEL_TRANSFORMER, bad_tied},
        {"max_batch", OB_MODEL_TRANSFORMER, huge_tokens},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ob_model_config cfg;
        ob_model_config_default(&cfg, cases[i].kind);
        cases[i].mutate(&cfg);
        static char sentinel;
        ob_model *m = (ob_model *)(void *)&sentinel; /* must be reset to NULL on failure */
        ob_err err;
        ob_err_clear(&err);
        ob_status st = ob_model_create(&m, &cfg, &err);
        if (st != OB_ERR_INVALID_ARG || m != NULL || err.code != OB_ERR_INVALID_ARG ||
            !strstr(err.msg, cases[i].field))
            fail_msg("case %zu (%s): status %d, message \"%s\"", i, cases[i].field, (int)st,
                     err.msg);
    }
    /* Softmax regression ignores the MLP and transformer fields. */
    ob_model_config cfg;
    ob_model_config_default(&cfg, OB_MODEL_SOFTMAX);
    cfg.num_hidden = 99;
    cfg.n_head = 3;
    ob_model_destroy(make_model(&cfg));
    ob_model_destroy(NULL);
    assert_int_equal(ob_model_create(NULL, &cfg, NULL), OB_ERR_INVALID_ARG);
}

static void expect_batch_error(ob_model *m, const float *params, const ob_batch *b,
                               const char *needle)
{
    ob_err err;
    ob_err_clear(&err);
    ob_model_result res;
    ob_status st = ob_model_forward_backward(m, params, b, NULL, &res, &err);
    if (st != OB_ERR_INVALID_ARG || !strstr(err.msg, needle))
        fail_msg("expected \"%s\": status %d, message \"%s\"", needle, (int)st, err.msg);
}

static void test_invalid_batch(void **state)
{
    ob_model_config cfg = tiny_cls(OB_MODEL_MLP, OB_ACT_TANH);
    ob_model *m = make_model(&cfg);
    test_data d = make_data(&cfg, cfg.max_batch, 51);
    float *params = make_params(m, 51);
    ob_batch b = d.batch;

    b.n = 0;
    expect_batch_error(m, params, &b, "batch->n");
    b.n = cfg.max_batch + 1;
    expect_batch_error(m, params, &b, "batch->n");
    b = d.batch;
    b.input_dim = cfg.input_dim + 1;
    expect_batch_error(m, params, &b, "input_dim");
    b = d.batch;
    d.y[3] = (int32_t)cfg.num_classes;
    expect_batch_error(m, params, &b, "batch->y[3]");
    d.y[3] = -1;
    expect_batch_error(m, params, &b, "batch->y[3]");
    d.y[3] = 0;
    b.y = NULL;
    expect_batch_error(m, params, &b, "batch->x");
    expect_batch_error(m, params, NULL, "must not be NULL");
    free(params);
    data_free(&d);
    ob_model_destroy(m);

    cfg = tiny_tf(1);
    m = make_model(&cfg);
    d = make_data(&cfg, 2, 52);
    params = make_params(m, 52);
    b = d.batch;
    b.context = cfg.context - 1;
    expect_batch_error(m, params, &b, "context");
    b = d.batch;
    b.tokens = NULL;
    expect_batch_error(m, params, &b, "tokens");
    b = d.batch;
    b.n = 4;
    expect_batch_error(m, params, &b, "max_batch");
    free(params);
    data_free(&d);
    ob_model_destroy(m);
}

/* ---- evaluation versus training ------------------------------------------------------------ */

/* grad == NULL gives the same result; grad is overwritten, not accumulated; logits are exposed. */
static void check_eval_matches(const ob_model_config *cfg, size_t n, uint64_t seed)
{
    ob_model *m = make_model(cfg);
    assert_null(ob_model_logits(m));
    test_data d = make_data(cfg, n, seed);
    float *params = make_params(m, seed);
    size_t np = ob_model_num_params(m);
    float *g1 = malloc(np * sizeof *g1), *g2 = malloc(np * sizeof *g2);
    assert_non_null(g1);
    assert_non_null(g2);
    ob_model_result r_train, r_eval;
    assert_int_equal(ob_model_forward_backward(m, params, &d.batch, g1, &r_train, NULL), OB_OK);
    assert_int_equal(ob_model_forward_backward(m, params, &d.batch, NULL, &r_eval, NULL), OB_OK);
    assert_true(r_train.loss == r_eval.loss);
    assert_int_equal(r_train.correct, r_eval.correct);
    assert_int_equal(r_train.count, r_eval.count);
    assert_non_null(ob_model_logits(m));
    for (size_t i = 0; i < np; i++)
        g2[i] = 1e6f; /* garbage that must be overwritten */
    assert_int_equal(ob_model_forward_backward(m, params, &d.batch, g2, NULL, NULL), OB_OK);
    assert_memory_equal(g1, g2, np * sizeof *g1);
    free(g1);
    free(g2);
    free(params);
    data_free(&d);
    ob_model_destroy(m);
}

static void test_eval_matches_train(void **state)
{
    ob_model_config tf = tiny_tf(1);
    check_eval_matches(&tf, 3, 61);
    ob_model_config mlp = tiny_cls(OB_MODEL_MLP, OB_ACT_RELU);
    check_eval_matches(&mlp, 6, 62);
    ob_model_config sm = tiny_cls(OB_MODEL_SOFTMAX, OB_ACT_RELU);
    check_eval_matches(&sm, 1, 63);
}

/* Correct counts and count: logits that favour one class make every example with that label a
 * hit. */
static void test_accuracy_count(void **state)
{
    ob_model_config cfg = tiny_cls(OB_MODEL_SOFTMAX, OB_ACT_RELU);
    ob_model *m = make_model(&cfg);
    test_data d = make_data(&cfg, 6, 71);
    float *params = calloc(ob_model_num_params(m), sizeof *params);
    assert_non_null(params);
    const ob_model_tensor *bias = ob_model_tensor_at(m, 1);
    params[bias->offset + 2] = 1.0f; /* zero weights: every prediction is class 2 */
    size_t expect = 0;
    for (size_t i = 0; i < 6; i++)
        expect += d.y[i] == 2;
    ob_model_result res;
    assert_int_equal(ob_model_forward_backward(m, params, &d.batch, NULL, &res, NULL), OB_OK);
    assert_int_equal(res.count, 6);
    assert_int_equal(res.correct, expect);
    /* Cross-entropy of logits (0, 0, 1, 0) by hand. */
    double lse = log(3.0 + exp(1.0));
    double want = 0.0;
    for (size_t i = 0; i < 6; i++)
        want += lse - (d.y[i] == 2 ? 1.0 : 0.0);
    assert_true(fabs(res.loss - want / 6.0) < 1e-6);
    free(params);
    data_free(&d);
    ob_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_softmax),
        cmocka_unit_test(test_grad_mlp_relu),
        cmocka_unit_test(test_grad_mlp_tanh),
        cmocka_unit_test(test_grad_mlp_gelu),
        cmocka_unit_test(test_grad_transformer_tied),
        cmocka_unit_test(test_grad_transformer_untied),
        cmocka_unit_test(test_grad_transformer_one_head),
        cmocka_unit_test(test_checker_sensitive),
        cmocka_unit_test(test_causality),
        cmocka_unit_test(test_init_loss),
        cmocka_unit_test(test_init_deterministic),
        cmocka_unit_test(test_tensor_table),
        cmocka_unit_test(test_grad_parts),
        cmocka_unit_test(test_invalid_config),
        cmocka_unit_test(test_invalid_batch),
        cmocka_unit_test(test_eval_matches_train),
        cmocka_unit_test(test_accuracy_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
