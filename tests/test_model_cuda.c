/* The device pass of softmax regression and the MLP (ob_model_create_cuda) against the CPU pass
 * on the same parameters and batch: loss, correct count, every gradient tensor and the logits,
 * for each activation, odd and realistic sizes, batches smaller than max_batch, a caller's
 * stream; forward-only calls; batch validation before any device work; bitwise determinism of
 * repeated calls; OB_ERR_NUMERIC on a non-finite loss.
 *
 * The two passes agree to float rounding, not bitwise (different GEMM summation orders), so
 * the comparisons are relative: loss within LOSS_RTOL; per tensor ||g_gpu - g_cpu|| within
 * GRAD_RTOL of ||g_cpu|| and max |g_gpu - g_cpu| within 10 GRAD_RTOL of max |g_cpu|; the same
 * for the logits. On the CPU, these models' float results lie within 1.5e-6 (gradients) and
 * 6e-7 (logits) of an exact (double) evaluation, so a device pass that is right passes with a
 * wide margin, while a wrong index, transpose or formula misses by orders of magnitude.
 *
 * Without a usable CUDA device the test checks what holds without one (argument errors, the
 * transformer refused with OB_ERR_UNSUPPORTED, creation failing with OB_ERR_CUDA and a message
 * naming the cause) and exits with 77, which ctest reports as skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "onebit/compress_cuda.h"
#include "onebit/model.h"
#include "onebit/rng.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_CODE 77
#define LOSS_RTOL 1e-5
#define GRAD_RTOL 1e-5    /* per tensor, in the 2-norm; the largest element difference 10x that */
#define DEEP_RTOL 1e-4    /* the same for the 8-layer MLP (see test_mlp_depths) */
#define PARAM_NOISE 0.05f /* added to the initial point so that biases are non-zero */

/* ---- device memory: every failure fails the test with the library's message ---------------- */

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    ob_err err = {0};
    if (ob_cuda_alloc(&p, bytes, &err) != OB_OK) fail_msg("ob_cuda_alloc(%zu): %s", bytes, err.msg);
    return p;
}

static void dev_upload(void *dev, const void *host, size_t bytes)
{
    ob_err err = {0};
    if (ob_cuda_memcpy(dev, host, bytes, NULL, &err) != OB_OK || ob_cuda_sync(NULL, &err) != OB_OK)
        fail_msg("upload: %s", err.msg);
}

static void dev_download(void *host, const void *dev, size_t bytes)
{
    ob_err err = {0};
    if (ob_cuda_memcpy(host, dev, bytes, NULL, &err) != OB_OK || ob_cuda_sync(NULL, &err) != OB_OK)
        fail_msg("download: %s", err.msg);
}

/* ---- fixtures ------------------------------------------------------------------------------ */

/* A classifier config; hidden is a list of nh widths (nh 0: softmax regression). */
static ob_model_config cls_config(size_t input_dim, const size_t *hidden, size_t nh, size_t classes,
                                  ob_activation act, size_t max_batch)
{
    ob_model_config cfg;
    ob_model_config_default(&cfg, nh ? OB_MODEL_MLP : OB_MODEL_SOFTMAX);
    cfg.input_dim = input_dim;
    cfg.num_classes = classes;
    cfg.num_hidden = nh;
    for (size_t i = 0; i < nh; i++)
        cfg.hidden[i] = hidden[i];
    cfg.activation = act;
    cfg.max_batch = max_batch;
    return cfg;
}

static const char *act_name(ob_activation act)
{
    return act == OB_ACT_RELU ? "relu" : act == OB_ACT_TANH ? "tanh" : "gelu";
}

/* A batch of n examples, x ~ N(0, 1), labels uniform, and the memory behind it. */
typedef struct test_batch {
    ob_batch b;
    float *x;   // (n, D)
    int32_t *y; // (n)
} test_batch;

static test_batch make_batch(const ob_model_config *cfg, size_t n, uint64_t seed)
{
    test_batch t = {0};
    ob_rng rng;
    ob_rng_seed(&rng, seed, 3);
    t.x = malloc(n * cfg->input_dim * sizeof *t.x);
    t.y = malloc(n * sizeof *t.y);
    assert_non_null(t.x);
    assert_non_null(t.y);
    for (size_t i = 0; i < n * cfg->input_dim; i++)
        t.x[i] = ob_rng_normal(&rng);
    for (size_t i = 0; i < n; i++)
        t.y[i] = (int32_t)ob_rng_below(&rng, cfg->num_classes);
    t.b.n = n;
    t.b.input_dim = cfg->input_dim;
    t.b.x = t.x;
    t.b.y = t.y;
    return t;
}

static void batch_free(test_batch *t)
{
    free(t->x);
    free(t->y);
}

/* The same model on both sides, one host parameter vector and its device copy, and a gradient
 * buffer on each side. */
typedef struct pair {
    ob_model_config cfg;
    ob_model *cpu, *gpu;
    size_t np;
    float *params;  // (np) host
    float *dparams; // (np) device copy
    float *g_cpu;   // (np) host
    float *g_gpu;   // (np) host copy of dgrad
    float *dgrad;   // (np) device
    double rtol;    /* GRAD_RTOL, or DEEP_RTOL for the deep model */
} pair;

/* Creates both models on `stream` and the default initialisation plus N(0, PARAM_NOISE). */
static pair make_pair(const ob_model_config *cfg, void *stream, uint64_t seed)
{
    pair p = {0};
    p.cfg = *cfg;
    p.rtol = GRAD_RTOL;
    ob_err err = {0};
    if (ob_model_create(&p.cpu, cfg, &err) != OB_OK) fail_msg("ob_model_create: %s", err.msg);
    if (ob_model_create_cuda(&p.gpu, cfg, stream, &err) != OB_OK)
        fail_msg("ob_model_create_cuda: %s", err.msg);
    assert_int_equal(ob_model_on_device(p.cpu), 0);
    assert_int_equal(ob_model_on_device(p.gpu), 1);
    p.np = ob_model_num_params(p.cpu);
    assert_int_equal(ob_model_num_params(p.gpu), p.np);

    p.params = malloc(p.np * sizeof *p.params);
    p.g_cpu = malloc(p.np * sizeof *p.g_cpu);
    p.g_gpu = malloc(p.np * sizeof *p.g_gpu);
    assert_non_null(p.params);
    assert_non_null(p.g_cpu);
    assert_non_null(p.g_gpu);
    ob_model_init_params(p.gpu, p.params, seed); /* host memory, even for a device model */
    ob_rng rng;
    ob_rng_seed(&rng, seed, 11);
    for (size_t i = 0; i < p.np; i++)
        p.params[i] += PARAM_NOISE * ob_rng_normal(&rng);
    p.dparams = dev_alloc(p.np * sizeof(float));
    p.dgrad = dev_alloc(p.np * sizeof(float));
    dev_upload(p.dparams, p.params, p.np * sizeof(float));
    return p;
}

static void pair_free(pair *p)
{
    ob_model_destroy(p->cpu);
    ob_model_destroy(p->gpu);
    ob_cuda_free(p->dparams);
    ob_cuda_free(p->dgrad);
    free(p->params);
    free(p->g_cpu);
    free(p->g_gpu);
}

static ob_model_result run_cpu(pair *p, const ob_batch *b, float *grad)
{
    ob_model_result r;
    ob_err err = {0};
    if (ob_model_forward_backward(p->cpu, p->params, b, grad, &r, &err) != OB_OK)
        fail_msg("CPU forward_backward: %s", err.msg);
    return r;
}

/* The device pass; with want_grad its gradient is downloaded into p->g_gpu. */
static ob_model_result run_gpu(pair *p, const ob_batch *b, int want_grad)
{
    ob_model_result r;
    ob_err err = {0};
    if (ob_model_forward_backward(p->gpu, p->dparams, b, want_grad ? p->dgrad : NULL, &r, &err) !=
        OB_OK)
        fail_msg("device forward_backward: %s", err.msg);
    if (want_grad) dev_download(p->g_gpu, p->dgrad, p->np * sizeof(float));
    return r;
}

/* ---- comparisons --------------------------------------------------------------------------- */

/* want (CPU) against got (device), n floats: the relative 2-norm of the difference within
 * rtol, the largest element difference within 10 rtol of the largest |want|. */
static void expect_close(const float *want, const float *got, size_t n, double rtol,
                         const char *what)
{
    double dd = 0.0, ww = 0.0, dmax = 0.0, wmax = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) fail_msg("%s: device value %zu is %g", what, i, got[i]);
        double d = fabs((double)got[i] - (double)want[i]);
        dd += d * d;
        ww += (double)want[i] * want[i];
        if (d > dmax) {
            dmax = d;
            worst = i;
        }
        wmax = fmax(wmax, fabs((double)want[i]));
    }
    double rel = ww > 0.0 ? sqrt(dd / ww) : sqrt(dd);
    if (rel > rtol || dmax > 10.0 * rtol * wmax) {
        print_error("%s: ||gpu - cpu|| / ||cpu|| = %.3g (limit %.1g), max |gpu - cpu| = %.3g at "
                    "%zu (cpu %.9g gpu %.9g; limit %.3g)\n",
                    what, rel, rtol, dmax, worst, want[worst], got[worst], 10.0 * rtol * wmax);
        fail();
    }
}

static void expect_same_result(ob_model_result want, ob_model_result got, const char *what)
{
    double rel = fabs(got.loss - want.loss) / fabs(want.loss);
    if (!(rel <= LOSS_RTOL) || got.correct != want.correct || got.count != want.count) {
        print_error("%s: cpu loss %.12g correct %zu count %zu; gpu loss %.12g (rel %.3g) correct "
                    "%zu count %zu\n",
                    what, want.loss, want.correct, want.count, got.loss, rel, got.correct,
                    got.count);
        fail();
    }
}

/* Every tensor of the two gradients, by name. */
static void expect_grads_close(const pair *p, const char *what)
{
    char name[192];
    for (size_t i = 0; i < ob_model_num_tensors(p->cpu); i++) {
        const ob_model_tensor *t = ob_model_tensor_at(p->cpu, i);
        snprintf(name, sizeof name, "%s: gradient of %s", what, t->name);
        expect_close(p->g_cpu + t->offset, p->g_gpu + t->offset, t->numel, p->rtol, name);
    }
}

static void expect_logits_close(const pair *p, size_t n, const char *what)
{
    char name[192];
    snprintf(name, sizeof name, "%s: logits", what);
    const float *want = ob_model_logits(p->cpu), *got = ob_model_logits(p->gpu);
    assert_non_null(want);
    assert_non_null(got);
    expect_close(want, got, n * p->cfg.num_classes, p->rtol, name);
}

/* One batch of n through both passes: result, gradient and logits close; then on the device a
 * forward-only call giving the same result and logits bit for bit, and a second training call
 * giving the same gradient bit for bit. */
static void compare_batch(pair *p, size_t n, uint64_t seed, const char *what)
{
    test_batch t = make_batch(&p->cfg, n, seed);
    ob_model_result rc = run_cpu(p, &t.b, p->g_cpu);
    ob_model_result rg = run_gpu(p, &t.b, 1);
    expect_same_result(rc, rg, what);
    expect_grads_close(p, what);
    expect_logits_close(p, n, what);

    size_t nk = n * p->cfg.num_classes;
    float *logits = malloc(nk * sizeof *logits), *g_first = malloc(p->np * sizeof *g_first);
    assert_non_null(logits);
    assert_non_null(g_first);
    memcpy(logits, ob_model_logits(p->gpu), nk * sizeof *logits);
    memcpy(g_first, p->g_gpu, p->np * sizeof *g_first);

    ob_model_result re = run_gpu(p, &t.b, 0);
    assert_memory_equal(&re.loss, &rg.loss, sizeof re.loss);
    assert_int_equal(re.correct, rg.correct);
    assert_int_equal(re.count, rg.count);
    assert_memory_equal(ob_model_logits(p->gpu), logits, nk * sizeof *logits);

    ob_model_result r2 = run_gpu(p, &t.b, 1);
    assert_memory_equal(&r2.loss, &rg.loss, sizeof r2.loss);
    if (memcmp(g_first, p->g_gpu, p->np * sizeof *g_first) != 0)
        fail_msg("%s: a repeated call gave a different gradient", what);

    free(logits);
    free(g_first);
    batch_free(&t);
}

/* A model on the default stream, compared at each batch size in ns (in this order, so that a
 * smaller batch follows a larger one and stale rows would show), with tolerance rtol. */
static void compare_model(const ob_model_config *cfg, const size_t *ns, size_t count, uint64_t seed,
                          double rtol)
{
    char what[160];
    pair p = make_pair(cfg, NULL, seed);
    p.rtol = rtol;
    for (size_t i = 0; i < count; i++) {
        snprintf(what, sizeof what, "%s %s D=%zu K=%zu hidden=%zu max_batch=%zu n=%zu",
                 ob_model_kind_name(cfg->kind), act_name(cfg->activation), cfg->input_dim,
                 cfg->num_classes, cfg->kind == OB_MODEL_MLP ? cfg->num_hidden : 0, cfg->max_batch,
                 ns[i]);
        compare_batch(&p, ns[i], seed + 100 * i, what);
    }
    pair_free(&p);
}

/* ---- the cases ----------------------------------------------------------------------------- */

static const ob_activation k_acts[3] = {OB_ACT_RELU, OB_ACT_TANH, OB_ACT_GELU};

static void test_softmax(void **state)
{
    ob_model_config cfg = cls_config(37, NULL, 0, 3, OB_ACT_RELU, 5);
    size_t ns[] = {5, 2, 5};
    compare_model(&cfg, ns, 3, 1, GRAD_RTOL);
    /* More classes than a warp has lanes, and not a multiple of 32: every lane scans several
     * columns, and the bias gradient spans a partial column tile. */
    cfg = cls_config(65, NULL, 0, 1000, OB_ACT_RELU, 9);
    size_t ns_wide[] = {9, 7};
    compare_model(&cfg, ns_wide, 2, 2, GRAD_RTOL);
}

static void test_mlp_small(void **state)
{
    const size_t hidden[] = {33, 17};
    for (int a = 0; a < 3; a++) {
        ob_model_config cfg = cls_config(37, hidden, 2, 3, k_acts[a], 8);
        size_t ns[] = {5, 8, 1};
        compare_model(&cfg, ns, 3, 10 + (uint64_t)a, GRAD_RTOL);
    }
}

static void test_mlp_mnist_shape(void **state)
{
    const size_t hidden[] = {256, 128};
    for (int a = 0; a < 3; a++) {
        ob_model_config cfg = cls_config(784, hidden, 2, 10, k_acts[a], 64);
        size_t ns[] = {64, 19};
        compare_model(&cfg, ns, 2, 20 + (uint64_t)a, GRAD_RTOL);
    }
}

/* One hidden layer; and the deepest MLP, with widths around the kernels' tile sizes. Eight
 * layers amplify rounding (and K = 2 makes the output bias gradient a small difference of
 * larger terms): on the CPU alone that model's float gradients lie up to 1.5e-5 from an exact
 * evaluation, hence DEEP_RTOL. */
static void test_mlp_depths(void **state)
{
    const size_t one[] = {300};
    ob_model_config cfg = cls_config(50, one, 1, 257, OB_ACT_TANH, 33);
    size_t ns[] = {33, 4};
    compare_model(&cfg, ns, 2, 30, GRAD_RTOL);

    const size_t deep[OB_MODEL_MAX_HIDDEN] = {31, 32, 33, 16, 64, 7, 255, 20};
    cfg = cls_config(13, deep, OB_MODEL_MAX_HIDDEN, 2, OB_ACT_GELU, 12);
    size_t ns_deep[] = {12, 3};
    compare_model(&cfg, ns_deep, 2, 31, DEEP_RTOL);
}

/* A non-blocking stream of the caller's: the work is enqueued there and the call still waits
 * for it. */
static void test_caller_stream(void **state)
{
    cudaStream_t s;
    cudaError_t rc = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (rc != cudaSuccess) fail_msg("cudaStreamCreateWithFlags: %s", cudaGetErrorString(rc));
    const size_t hidden[] = {40, 24};
    ob_model_config cfg = cls_config(30, hidden, 2, 6, OB_ACT_GELU, 16);
    pair p = make_pair(&cfg, s, 40);
    compare_batch(&p, 16, 41, "mlp gelu on a caller's stream");
    compare_batch(&p, 11, 42, "mlp gelu on a caller's stream, n=11");
    pair_free(&p);
    assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

/* The tensor table and the initial point are the CPU model's; no logits before the first call;
 * destroy accepts NULL. */
static void test_table_and_init(void **state)
{
    const size_t hidden[] = {9, 5};
    ob_model_config cfg = cls_config(7, hidden, 2, 4, OB_ACT_TANH, 3);
    pair p = make_pair(&cfg, NULL, 50);
    assert_null(ob_model_logits(p.gpu));
    assert_int_equal(ob_model_num_tensors(p.gpu), ob_model_num_tensors(p.cpu));
    for (size_t i = 0; i < ob_model_num_tensors(p.cpu); i++) {
        const ob_model_tensor *a = ob_model_tensor_at(p.cpu, i), *b = ob_model_tensor_at(p.gpu, i);
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->offset, b->offset);
        assert_int_equal(a->numel, b->numel);
    }
    float *a = malloc(p.np * sizeof *a), *b = malloc(p.np * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    ob_model_init_params(p.cpu, a, 7);
    ob_model_init_params(p.gpu, b, 7);
    assert_memory_equal(a, b, p.np * sizeof *a);
    free(a);
    free(b);
    pair_free(&p);
    ob_model_destroy(NULL);
}

/* Expects OB_ERR_INVALID_ARG naming needle, with the device gradient and the logits untouched:
 * validation runs on the host before any work is enqueued. */
static void expect_rejected(pair *p, const ob_batch *b, const float *logits, size_t nk,
                            const char *needle)
{
    const float sentinel = 7.0f;
    float *fill = malloc(p->np * sizeof *fill);
    assert_non_null(fill);
    for (size_t i = 0; i < p->np; i++)
        fill[i] = sentinel;
    dev_upload(p->dgrad, fill, p->np * sizeof *fill);

    ob_err err = {0};
    ob_model_result r;
    ob_status st = ob_model_forward_backward(p->gpu, p->dparams, b, p->dgrad, &r, &err);
    if (st != OB_ERR_INVALID_ARG || !strstr(err.msg, needle))
        fail_msg("expected OB_ERR_INVALID_ARG naming \"%s\": status %d, message \"%s\"", needle,
                 (int)st, err.msg);
    dev_download(p->g_gpu, p->dgrad, p->np * sizeof(float));
    assert_memory_equal(p->g_gpu, fill, p->np * sizeof *fill);
    assert_memory_equal(ob_model_logits(p->gpu), logits, nk * sizeof *logits);
    free(fill);
}

static void test_bad_batch_rejected(void **state)
{
    const size_t hidden[] = {12};
    ob_model_config cfg = cls_config(10, hidden, 1, 5, OB_ACT_RELU, 6);
    pair p = make_pair(&cfg, NULL, 60);
    test_batch t = make_batch(&cfg, 6, 61);
    run_gpu(&p, &t.b, 1);
    size_t nk = 6 * cfg.num_classes;
    float *logits = malloc(nk * sizeof *logits);
    assert_non_null(logits);
    memcpy(logits, ob_model_logits(p.gpu), nk * sizeof *logits);

    t.y[4] = (int32_t)cfg.num_classes;
    expect_rejected(&p, &t.b, logits, nk, "batch->y[4]");
    t.y[4] = -1;
    expect_rejected(&p, &t.b, logits, nk, "batch->y[4]");
    t.y[4] = 0;
    ob_batch b = t.b;
    b.n = cfg.max_batch + 1;
    expect_rejected(&p, &b, logits, nk, "batch->n");
    b = t.b;
    b.input_dim = cfg.input_dim - 1;
    expect_rejected(&p, &b, logits, nk, "input_dim");
    b = t.b;
    b.x = NULL;
    expect_rejected(&p, &b, logits, nk, "batch->x");

    free(logits);
    batch_free(&t);
    pair_free(&p);
}

/* An infinite output bias makes the loss NaN: OB_ERR_NUMERIC on both sides, res still filled. */
static void test_non_finite_loss(void **state)
{
    ob_model_config cfg = cls_config(8, NULL, 0, 4, OB_ACT_RELU, 4);
    pair p = make_pair(&cfg, NULL, 70);
    const ob_model_tensor *bias = ob_model_tensor_at(p.cpu, 1);
    p.params[bias->offset + 1] = INFINITY;
    dev_upload(p.dparams, p.params, p.np * sizeof(float));
    test_batch t = make_batch(&cfg, 4, 71);
    ob_model_result rc = {0}, rg = {0};
    ob_err err = {0};
    assert_int_equal(ob_model_forward_backward(p.cpu, p.params, &t.b, p.g_cpu, &rc, &err),
                     OB_ERR_NUMERIC);
    assert_int_equal(ob_model_forward_backward(p.gpu, p.dparams, &t.b, p.dgrad, &rg, &err),
                     OB_ERR_NUMERIC);
    assert_non_null(strstr(err.msg, "not finite"));
    assert_false(isfinite(rg.loss));
    assert_int_equal(rg.count, 4);
    assert_int_equal(rg.correct, rc.correct);
    batch_free(&t);
    pair_free(&p);
}

/* ---- what holds with or without a device --------------------------------------------------- */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failed++;                                                                              \
        }                                                                                          \
    } while (0)

/* A non-NULL value that ob_model_create_cuda must replace with NULL when it fails. */
static ob_model *not_null(void)
{
    static char dummy;
    return (ob_model *)(void *)&dummy;
}

/* Argument errors and the transformer are decided before any CUDA call. Returns the number of
 * failed checks (used without cmocka in the no-device path too). */
static int argument_errors(void)
{
    int failed = 0;
    ob_err err = {0};
    ob_model *m = not_null();
    ob_model_config cfg;

    ob_model_config_default(&cfg, OB_MODEL_TRANSFORMER);
    ob_status st = ob_model_create_cuda(&m, &cfg, NULL, &err);
    CHECK(st == OB_ERR_UNSUPPORTED && m == NULL && strstr(err.msg, "transformer"),
          "transformer: status %d, message '%s'", (int)st, err.msg);

    ob_model_config_default(&cfg, OB_MODEL_MLP);
    cfg.num_classes = 1;
    ob_err_clear(&err);
    m = not_null();
    st = ob_model_create_cuda(&m, &cfg, NULL, &err);
    CHECK(st == OB_ERR_INVALID_ARG && m == NULL && strstr(err.msg, "num_classes"),
          "num_classes = 1: status %d, message '%s'", (int)st, err.msg);

    ob_err_clear(&err);
    st = ob_model_create_cuda(NULL, &cfg, NULL, &err);
    CHECK(st == OB_ERR_INVALID_ARG, "NULL out: status %d, message '%s'", (int)st, err.msg);
    m = not_null();
    st = ob_model_create_cuda(&m, NULL, NULL, &err);
    CHECK(st == OB_ERR_INVALID_ARG, "NULL cfg: status %d, message '%s'", (int)st, err.msg);
    return failed;
}

static void test_argument_errors(void **state)
{
    assert_int_equal(argument_errors(), 0);
}

/* Without a device: a clean OB_ERR_CUDA that names the cause and the source line, no model. */
static int no_device_checks(void)
{
    int failed = argument_errors();
    ob_model_kind kinds[2] = {OB_MODEL_SOFTMAX, OB_MODEL_MLP};
    for (int k = 0; k < 2; k++) {
        ob_model_config cfg;
        ob_model_config_default(&cfg, kinds[k]);
        ob_model *m = not_null();
        ob_err err = {0};
        ob_status st = ob_model_create_cuda(&m, &cfg, NULL, &err);
        CHECK(st == OB_ERR_CUDA && m == NULL && strstr(err.msg, "no usable CUDA device") &&
                  strstr(err.msg, "cudaGetDeviceCount") && strstr(err.msg, "model_cuda.cu:"),
              "%s without a device: status %d, message '%s'", ob_model_kind_name(kinds[k]), (int)st,
              err.msg);
    }
    CHECK(ob_cuda_device_count() == 0, "ob_cuda_device_count() changed its answer");
    return failed;
}

int main(void)
{
    if (ob_cuda_device_count() == 0) {
        int failed = no_device_checks();
        if (failed) {
            fprintf(stderr, "%d checks failed without a CUDA device\n", failed);
            return 1;
        }
        printf("no CUDA device: device model tests skipped\n");
        return SKIP_CODE;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argument_errors), cmocka_unit_test(test_table_and_init),
        cmocka_unit_test(test_softmax),         cmocka_unit_test(test_mlp_small),
        cmocka_unit_test(test_mlp_mnist_shape), cmocka_unit_test(test_mlp_depths),
        cmocka_unit_test(test_caller_stream),   cmocka_unit_test(test_bad_batch_rejected),
        cmocka_unit_test(test_non_finite_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
