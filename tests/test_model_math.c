/* The CPU models' arithmetic of their own.
 *
 * The matrix products (engine/src/gemm.h): the AVX-512 kernel gives exactly the bits of
 * its contract, each element of C the fused multiply-add chain over k in order, starting from
 * beta C, on every shape (edge tiles, k across several blocks, all four transpositions, leading
 * dimensions larger than the matrices); it agrees with BLAS to rounding; beta 0 ignores what C
 * held (NaN included). On a CPU without AVX-512 the bitwise checks have nothing to check and say
 * so; BLAS is then checked against the same reference to rounding.
 *
 * The GELU (engine/src/model_math.h): its exponential within 2 ulp of e^x, the activation and
 * its derivative close to double-precision references, the limits, NaN, and the vectorised
 * activation loops (model_layers.c) bit-identical to the scalar function element by element. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gemm.h"
#include "model_layers.h"
#include "model_math.h"
#include "onebit/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct operands {
    size_t m, n, k, lda, ldb, ldc;
    ob_gemm_op ta, tb;
    float *a, *b, *c0; /* c0: C before the product */
} operands;

static float *random_vec(size_t n, uint64_t seed)
{
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    ob_rng rng;
    ob_rng_seed(&rng, seed, 0);
    for (size_t i = 0; i < n; i++)
        v[i] = ob_rng_normal(&rng);
    return v;
}

static void make(operands *o, ob_gemm_op ta, ob_gemm_op tb, size_t m, size_t n, size_t k,
                 size_t pad, uint64_t seed)
{
    o->m = m, o->n = n, o->k = k, o->ta = ta, o->tb = tb;
    size_t arows = ta == OB_GEMM_N ? m : k, acols = ta == OB_GEMM_N ? k : m;
    size_t brows = tb == OB_GEMM_N ? k : n, bcols = tb == OB_GEMM_N ? n : k;
    o->lda = acols + pad, o->ldb = bcols + pad, o->ldc = n + pad;
    o->a = random_vec(arows * o->lda, seed);
    o->b = random_vec(brows * o->ldb, seed + 1);
    o->c0 = random_vec(m * o->ldc, seed + 2);
}

static void drop(operands *o)
{
    free(o->a);
    free(o->b);
    free(o->c0);
}

static float op_a(const operands *o, size_t i, size_t p)
{
    return o->ta == OB_GEMM_N ? o->a[i * o->lda + p] : o->a[p * o->lda + i];
}

static float op_b(const operands *o, size_t p, size_t j)
{
    return o->tb == OB_GEMM_N ? o->b[p * o->ldb + j] : o->b[j * o->ldb + p];
}

/* The contract, element by element. */
static float *reference(const operands *o, float beta)
{
    float *c = malloc(o->m * o->ldc * sizeof *c);
    assert_non_null(c);
    memcpy(c, o->c0, o->m * o->ldc * sizeof *c);
    for (size_t i = 0; i < o->m; i++)
        for (size_t j = 0; j < o->n; j++) {
            float s = beta == 0.0f ? 0.0f : o->c0[i * o->ldc + j];
            for (size_t p = 0; p < o->k; p++)
                s = fmaf(op_a(o, i, p), op_b(o, p, j), s);
            c[i * o->ldc + j] = s;
        }
    return c;
}

/* C after ob__sgemm_using(impl); with beta 0 the product starts from NaN in every element of C
 * it writes. The padding past n keeps c0's values: nothing outside C is touched. */
static float *run(const operands *o, ob_gemm_impl impl, float beta)
{
    float *c = malloc(o->m * o->ldc * sizeof *c);
    assert_non_null(c);
    memcpy(c, o->c0, o->m * o->ldc * sizeof *c);
    if (beta == 0.0f)
        for (size_t i = 0; i < o->m; i++)
            for (size_t j = 0; j < o->n; j++)
                c[i * o->ldc + j] = NAN;
    ob__sgemm_using(impl, o->ta, o->tb, o->m, o->n, o->k, o->a, o->lda, o->b, o->ldb, beta, c,
                    o->ldc);
    return c;
}

static size_t count_bit_differences(const operands *o, const float *x, const float *y)
{
    size_t diff = 0;
    for (size_t i = 0; i < o->m; i++)
        for (size_t j = 0; j < o->ldc; j++)
            diff += memcmp(&x[i * o->ldc + j], &y[i * o->ldc + j], sizeof *x) != 0;
    return diff;
}

/* |x - y| within a few roundings of the sum of |products|. */
static void assert_close(const operands *o, const float *x, const float *y, float beta)
{
    for (size_t i = 0; i < o->m; i++)
        for (size_t j = 0; j < o->n; j++) {
            double mag = beta == 0.0f ? 0.0 : fabs(o->c0[i * o->ldc + j]);
            for (size_t p = 0; p < o->k; p++)
                mag += fabs((double)op_a(o, i, p) * op_b(o, p, j));
            double d = fabs((double)x[i * o->ldc + j] - (double)y[i * o->ldc + j]);
            if (!(d <= 4.0 * (double)(o->k + 1) * 6e-8 * mag + 1e-30)) {
                fprintf(stderr, "(%zu, %zu) of %zu x %zu x %zu: %.9g against %.9g\n", i, j, o->m,
                        o->n, o->k, x[i * o->ldc + j], y[i * o->ldc + j]);
                fail();
            }
        }
}

static const size_t dims[] = {1, 5, 12, 13, 16, 31, 32, 33, 47, 100};
static const size_t depths[] = {1, 7, 16, 17, 255, 256, 257, 600};

static void test_contract_bitwise(void **state)
{
    (void)state;
    if (!ob__sgemm_has_avx512()) {
        printf("no AVX-512 here: the kernel cannot run, BLAS is checked in the other tests\n");
        return;
    }
    size_t cases = 0;
    uint64_t seed = 1;
    for (int t = 0; t < 4; t++)
        for (size_t mi = 0; mi < sizeof dims / sizeof *dims; mi += 2)
            for (size_t ni = 1; ni < sizeof dims / sizeof *dims; ni += 2)
                for (size_t ki = 0; ki < sizeof depths / sizeof *depths; ki++)
                    for (int bi = 0; bi < 2; bi++) {
                        operands o;
                        make(&o, (ob_gemm_op)(t & 1), (ob_gemm_op)(t >> 1), dims[mi], dims[ni],
                             depths[ki], (mi + ki) % 3, seed++);
                        float beta = (float)bi;
                        float *want = reference(&o, beta), *got = run(&o, OB_GEMM_AVX512, beta);
                        size_t diff = count_bit_differences(&o, got, want);
                        if (diff) {
                            fprintf(stderr, "ta %d tb %d m %zu n %zu k %zu beta %g: %zu elements\n",
                                    t & 1, t >> 1, o.m, o.n, o.k, beta, diff);
                            fail();
                        }
                        free(want);
                        free(got);
                        drop(&o);
                        cases++;
                    }
    printf("%zu shapes bit-identical to the fused multiply-add chain\n", cases);
}

/* The shapes the models run, whole: the transformer's (128 rows of width 256, 768, 1024) and the
 * MLP's (64 rows, 784 -> 1024 -> 10), each product of a linear layer. */
static void test_model_shapes(void **state)
{
    (void)state;
    const size_t lin[][3] = {{128, 256, 768}, {128, 1024, 256}, {64, 784, 1024}, {64, 1024, 10}};
    uint64_t seed = 1000;
    for (size_t l = 0; l < sizeof lin / sizeof *lin; l++) {
        size_t rows = lin[l][0], in = lin[l][1], out = lin[l][2];
        operands fwd, dinp, dw;
        make(&fwd, OB_GEMM_N, OB_GEMM_T, rows, out, in, 0, seed += 3);
        make(&dinp, OB_GEMM_N, OB_GEMM_N, rows, in, out, 0, seed += 3);
        make(&dw, OB_GEMM_T, OB_GEMM_N, out, in, rows, 0, seed += 3);
        operands *all[3] = {&fwd, &dinp, &dw};
        const float betas[3] = {1.0f, 0.0f, 1.0f};
        for (int i = 0; i < 3; i++) {
            float *want = reference(all[i], betas[i]);
            float *own = run(all[i], OB_GEMM_AVX512, betas[i]);
            float *blas = run(all[i], OB_GEMM_BLAS, betas[i]);
            if (ob__sgemm_has_avx512())
                assert_int_equal(count_bit_differences(all[i], own, want), 0);
            assert_close(all[i], blas, want, betas[i]);
            /* The same call twice gives the same bits. */
            float *again = run(all[i], OB_GEMM_AUTO, betas[i]);
            float *auto1 = run(all[i], OB_GEMM_AUTO, betas[i]);
            assert_int_equal(count_bit_differences(all[i], again, auto1), 0);
            free(want);
            free(own);
            free(blas);
            free(again);
            free(auto1);
            drop(all[i]);
        }
    }
}

/* BLAS, the fallback, against the same reference to rounding, on the odd shapes. */
static void test_blas_close(void **state)
{
    (void)state;
    uint64_t seed = 5000;
    for (int t = 0; t < 4; t++)
        for (size_t ki = 0; ki < sizeof depths / sizeof *depths; ki += 3) {
            operands o;
            make(&o, (ob_gemm_op)(t & 1), (ob_gemm_op)(t >> 1), 33, 47, depths[ki], 1, seed++);
            float *want = reference(&o, 1.0f), *got = run(&o, OB_GEMM_BLAS, 1.0f);
            assert_close(&o, got, want, 1.0f);
            free(want);
            free(got);
            drop(&o);
        }
}

/* k = 0: beta 0 clears C, beta 1 leaves it. */
static void test_empty_depth(void **state)
{
    (void)state;
    float c[6] = {1, 2, 3, 4, 5, 6};
    float a[1] = {0}, b[1] = {0};
    ob__sgemm(OB_GEMM_N, OB_GEMM_N, 2, 3, 0, a, 1, b, 3, 1.0f, c, 3);
    assert_true(c[0] == 1.0f && c[5] == 6.0f);
    ob__sgemm(OB_GEMM_N, OB_GEMM_N, 2, 3, 0, a, 1, b, 3, 0.0f, c, 3);
    for (int i = 0; i < 6; i++)
        assert_true(c[i] == 0.0f);
}

/* ---- GELU --------------------------------------------------------------------------------- */

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double gelu_grad_ref(double x)
{
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    double t = tanh(u);
    return 0.5 * (1.0 + t) +
           0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

static void test_exp(void **state)
{
    (void)state;
    double worst = 0.0;
    for (int i = -870000; i <= 880000; i++) {
        float x = (float)i * 1e-4f;
        double want = exp((double)x), got = ob__exp_clamped(x);
        double ulp = ldexp(1.0, ilogb(want) - 23);
        double err = fabs(got - want) / ulp;
        if (err > worst) worst = err;
    }
    printf("exp on [-87, 88]: worst %.2f ulp\n", worst);
    assert_true(worst <= 2.0);
    /* Clamped outside, finite everywhere, NaN kept. */
    assert_true(ob__exp_clamped(-1000.0f) == ob__exp_clamped(-87.0f));
    assert_true(ob__exp_clamped(1000.0f) == ob__exp_clamped(88.0f));
    assert_true(ob__exp_clamped(-INFINITY) > 0.0f && isfinite(ob__exp_clamped(INFINITY)));
    assert_true(isnan(ob__exp_clamped(NAN)));
    assert_true(ob__exp_clamped(0.0f) == 1.0f);
}

static void test_gelu(void **state)
{
    (void)state;
    for (int i = -20000; i <= 20000; i++) {
        float x = (float)i * 1e-3f;
        double want = gelu_ref(x), dwant = gelu_grad_ref(x);
        assert_true(fabs(ob__gelu(x) - want) <= 1e-6 * (1.0 + fabs(want)));
        assert_true(fabs(ob__gelu_grad(x, 1.0f) - dwant) <= 1e-5 * (1.0 + fabs(dwant)));
    }
    /* The limits: x above, 0 far below; NaN in, NaN out. */
    assert_true(ob__gelu(100.0f) == 100.0f && ob__gelu(1e30f) == 1e30f);
    assert_true(fabsf(ob__gelu(-100.0f)) < 1e-30f && ob__gelu_grad(100.0f, 1.0f) == 1.0f);
    assert_true(isnan(ob__gelu(NAN)) && isnan(ob__gelu_grad(NAN, 1.0f)));
}

/* The activation loops run vectorised (for the CPU's widest vectors): element by element the same
 * bits as the scalar function, at every length and alignment. */
static void test_activation_loops(void **state)
{
    (void)state;
    size_t n = 4099;
    float *x = random_vec(n + 1, 77), *dy = random_vec(n + 1, 78);
    float *y = malloc((n + 1) * sizeof *y), *dx = malloc((n + 1) * sizeof *dx);
    assert_non_null(y);
    assert_non_null(dx);
    for (size_t i = 0; i < n + 1; i++)
        x[i] *= 4.0f;
    x[5] = NAN, x[6] = 200.0f, x[7] = -200.0f, x[8] = 0.0f, x[9] = 1e-30f;
    for (size_t off = 0; off < 2; off++) {
        ob__act_forward(OB_ACT_GELU, y + off, x + off, n);
        ob__act_backward(OB_ACT_GELU, dx + off, dy + off, x + off, y + off, n);
        for (size_t i = off; i < n + off; i++) {
            float want = ob__gelu(x[i]), dwant = ob__gelu_grad(x[i], dy[i]);
            assert_memory_equal(&y[i], &want, sizeof want);
            assert_memory_equal(&dx[i], &dwant, sizeof dwant);
        }
    }
    free(x);
    free(dy);
    free(y);
    free(dx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contract_bitwise),
        cmocka_unit_test(test_model_shapes),
        cmocka_unit_test(test_blas_close),
        cmocka_unit_test(test_empty_depth),
        cmocka_unit_test(test_exp),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_activation_loops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
