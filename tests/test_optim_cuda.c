/* The CUDA optimizer kernels (onebit/optim_kernels.h) against their CPU versions: the updated
 * parameters, moments and outputs must be bitwise identical for every kernel, over several
 * successive steps, for odd sizes (1, 31, 1000003, ...) and inputs with zeros, -0.0,
 * subnormals and large values; the L1 norm agrees to 1e-12 relative and is the same on every
 * run. Also the CPU kernels against the plain formulas of the paper, written here
 * independently in double where they are exact.
 *
 * Without a usable CUDA device the CPU checks still run, the device kernels must fail cleanly
 * with OB_ERR_CUDA naming the kernel, and the test exits 77 (ctest: skipped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "onebit/compress_cuda.h"
#include "onebit/optim_kernels.h"
#include "onebit/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_CODE 77

/* --- inputs and device helpers ------------------------------------------------------------- */

static void fill(float *v, size_t n, uint64_t seed, float scale, int positive)
{
    ob_rng rng;
    ob_rng_seed(&rng, seed, 29);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = ob_rng_below(&rng, 64);
        float z = scale * ob_rng_normal(&rng);
        if (r == 0)
            z = 0.0f;
        else if (r == 1)
            z = -0.0f;
        else if (r == 2)
            z = 1e-40f; /* subnormal */
        else if (r == 3)
            z *= 1e3f;
        v[i] = positive ? fabsf(z) : z;
    }
}

static float *host(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}

static float *dev_copy(const float *h, size_t n)
{
    void *p = NULL;
    ob_err err = {0};
    if (ob_cuda_alloc(&p, n * sizeof(float), &err) != OB_OK) fail_msg("alloc: %s", err.msg);
    if (ob_cuda_memcpy(p, h, n * sizeof(float), NULL, &err) != OB_OK ||
        ob_cuda_sync(NULL, &err) != OB_OK)
        fail_msg("upload: %s", err.msg);
    return p;
}

static void download(float *h, const float *d, size_t n)
{
    ob_err err = {0};
    if (ob_cuda_memcpy(h, d, n * sizeof(float), NULL, &err) != OB_OK ||
        ob_cuda_sync(NULL, &err) != OB_OK)
        fail_msg("download: %s", err.msg);
}

/* Bitwise, NaN equal to NaN. */
static void expect_equal(const float *want, const float *got, size_t n, const char *what)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&want[i], &got[i], sizeof(float)) == 0) continue;
        if (isnan(want[i]) && isnan(got[i])) continue;
        if (bad++ == 0) first = i;
    }
    if (bad)
        fail_msg("%s: %zu of %zu elements differ (first %zu: cpu %.9g gpu %.9g)", what, bad, n,
                 first, (double)want[first], (double)got[first]);
}

static void expect_ok(ob_status st, const ob_err *err, const char *what)
{
    if (st != OB_OK) fail_msg("%s: %s", what, err->msg);
}

static const size_t k_sizes[] = {1, 31, 32, 33, 1000, 4097, 1000003};

/* --- CPU kernels against the formulas ------------------------------------------------------ */

/* One Adam step by the textbook, in float with the same operation order as the paper's
 * Algorithm 1 (m, v, then x -= lr (m_hat / (sqrt(v_hat) + eps) + wd x)). */
static void test_cpu_adam_formula(void **state)
{
    (void)state;
    size_t n = 1000;
    float *x = host(n), *m = host(n), *v = host(n), *g = host(n);
    fill(x, n, 1, 1.0f, 0);
    fill(m, n, 2, 0.1f, 0);
    fill(v, n, 3, 0.01f, 1);
    fill(g, n, 4, 1.0f, 0);
    float *x0 = host(n), *m0 = host(n), *v0 = host(n);
    memcpy(x0, x, n * 4), memcpy(m0, m, n * 4), memcpy(v0, v, n * 4);
    ob_adam_coeffs k;
    ob_adam_coeffs_init(&k, 0.9, 0.999, 1e-8, 0.01, 1, 7, 1e-3f, 4);
    assert_true(k.gscale == 0.25f);
    assert_true(k.c1 == (float)(1.0 / (1.0 - pow(0.9, 7))));
    ob_adam_update(x, m, v, g, n, &k);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * 0.25f;
        float mi = 0.9f * m0[i] + (float)(1.0 - 0.9) * gi;
        float vi = 0.999f * v0[i] + (float)(1.0 - 0.999) * (gi * gi);
        float xi = x0[i] - 1e-3f * ((mi * k.c1) / (sqrtf(vi * k.c2) + 1e-8f) + 0.01f * x0[i]);
        assert_true(memcmp(&mi, &m[i], 4) == 0);
        assert_true(memcmp(&vi, &v[i], 4) == 0);
        assert_true(memcmp(&xi, &x[i], 4) == 0);
    }
    /* No bias correction, one rank: the coefficients are exactly 1. */
    ob_adam_coeffs_init(&k, 0.9, 0.999, 1e-8, 0.0, 0, 7, 1e-3f, 1);
    assert_true(k.c1 == 1.0f && k.c2 == 1.0f && k.gscale == 1.0f);
    double l1 = ob_l1_norm(v, n), want = 0.0;
    for (size_t i = 0; i < n; i++)
        want += fabs((double)v[i]);
    assert_true(fabs(l1 - want) <= 1e-12 * want);
    free(x), free(m), free(v), free(g), free(x0), free(m0), free(v0);
}

/* The fused preconditioned kernels equal the unfused sequence. */
static void test_cpu_fused_precondition(void **state)
{
    (void)state;
    size_t n = 777;
    float *m = host(n), *p = host(n), *g = host(n), *den = host(n), *x = host(n);
    fill(m, n, 5, 0.1f, 0);
    fill(g, n, 6, 1.0f, 0);
    fill(den, n, 7, 0.1f, 1);
    for (size_t i = 0; i < n; i++)
        den[i] += 1e-8f;
    fill(x, n, 8, 1.0f, 0);
    float *m2 = host(n), *x2 = host(n), *p2 = host(n);
    memcpy(m2, m, n * 4), memcpy(x2, x, n * 4);
    ob_momentum_precondition(m, p, g, den, n, 0.9f, 0.1f);
    ob_momentum_update(m2, g, n, 0.9f, 0.1f);
    for (size_t i = 0; i < n; i++)
        p2[i] = m2[i] / den[i];
    expect_equal(m2, m, n, "momentum");
    expect_equal(p2, p, n, "p = m / den");
    ob_precondition_apply(x, m, p, den, n, 1e-3f, 0.01f, INFINITY);
    for (size_t i = 0; i < n; i++) {
        m2[i] = p2[i] * den[i];
        x2[i] = x2[i] - 1e-3f * (p2[i] + 0.01f * x2[i]);
    }
    expect_equal(m2, m, n, "m = p * den");
    expect_equal(x2, x, n, "x");
    free(m), free(p), free(g), free(den), free(x), free(m2), free(x2), free(p2);
}

/* The stabiliser: with no bound the frozen step is the paper's, bit for bit; with a bound c no
 * coordinate moves more than c lr (weight decay aside), coordinates within the bound take the
 * paper's step exactly, and the preconditioned direction is clipped to [-c, c]. */
/* The warm-start check counts elements with (gscale g)^2 > k2 v, strictly. */
static void test_cpu_count_exceeding(void **state)
{
    (void)state;
    const float g[] = {2.0f, -2.0f, 1.0f, 0.0f, 4.0f, -40.0f};
    const float v[] = {0.0f, 1.0f, 0.25f, 0.0f, 1.0f, 1.0f};
    /* (g/2)^2 = 1, 1, 0.25, 0, 4, 400 against 0.25 v = 0, 0.25, 0.0625, 0, 0.25, 0.25 */
    assert_int_equal(ob_count_exceeding(g, v, 6, 0.5f, 0.25f), 5);
    /* against 4 v = 0, 4, 1, 0, 4, 4: only 1 > 0 and 400 > 4 (4 > 4 is not) */
    assert_int_equal(ob_count_exceeding(g, v, 6, 0.5f, 4.0f), 2);
    assert_int_equal(ob_count_exceeding(g, v, 0, 1.0f, 1.0f), 0);
}

/* The compression-health kernels: ||v||^2 against a plain double loop, and an exact count of
 * zeros in which -0 is a zero and the smallest denormal is not. */
static void test_cpu_health_kernels(void **state)
{
    (void)state;
    size_t n = 1003;
    float *v = host(n);
    fill(v, n, 77, 3.0f, 0);
    double want = 0.0;
    for (size_t i = 0; i < n; i++)
        want += (double)v[i] * (double)v[i];
    double got = ob_sum_squares(v, n);
    assert_true(fabs(got - want) <= 1e-12 * want);
    assert_true(ob_sum_squares(v, 0) == 0.0);
    const float z[] = {0.0f, -0.0f, 1e-45f, 1.0f, 0.0f, -2.0f, 0.0f};
    assert_int_equal(ob_count_zero(z, 7), 4);
    assert_int_equal(ob_count_zero(z, 0), 0);
    assert_true(ob_sum_squares(z, 7) == 1.0 + 4.0 + (double)1e-45f * (double)1e-45f);
    free(v);
}

/* The refresh step: m as Adam's, v = keep v + take (g gscale)^2, den = sqrt(v) + eps, and x
 * the stabilised step with that den, element by element in that order. */
static void test_cpu_refresh(void **state)
{
    (void)state;
    size_t n = 1031;
    float *x = host(n), *m = host(n), *v = host(n), *den = host(n), *g = host(n);
    float *x0 = host(n), *m0 = host(n), *v0 = host(n);
    fill(x, n, 31, 1.0f, 0);
    fill(m, n, 32, 0.1f, 0);
    fill(v, n, 33, 0.01f, 1);
    fill(g, n, 34, 0.5f, 0);
    memcpy(x0, x, n * 4), memcpy(m0, m, n * 4), memcpy(v0, v, n * 4);
    ob_adam_coeffs k;
    ob_adam_coeffs_init(&k, 0.9, 0.99, 1e-8, 0.01, 0, 9, 1e-3f, 4);
    const float keep = 0.8f, take = 0.05f, inv_c = 1.0f / 0.5f;
    ob_refresh_update(x, m, v, den, g, n, &k, keep, take, inv_c);
    size_t bounded = 0;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * k.gscale;
        float mi = k.b1 * m0[i] + k.a1 * gi;
        float vi = keep * v0[i] + take * (gi * gi);
        float di = sqrtf(vi) + k.eps;
        float a = fabsf(mi) * inv_c, dd = di > a ? di : a;
        float xi = x0[i] - k.lr * (mi / dd + k.wd * x0[i]);
        bounded += a > di;
        assert_true(memcmp(&mi, &m[i], 4) == 0);
        assert_true(memcmp(&vi, &v[i], 4) == 0);
        assert_true(memcmp(&di, &den[i], 4) == 0);
        assert_true(memcmp(&xi, &x[i], 4) == 0);
    }
    assert_true(bounded > 0 && bounded < n); /* both branches of the bound were taken */
    free(x), free(m), free(v), free(den), free(g), free(x0), free(m0), free(v0);
}

static void test_cpu_stabilizer(void **state)
{
    (void)state;
    size_t n = 4097;
    float *m = host(n), *den = host(n), *x = host(n), *x0 = host(n), *y = host(n), *p = host(n);
    fill(m, n, 21, 0.1f, 0);
    fill(den, n, 22, 0.1f, 1);
    for (size_t i = 0; i < n; i++)
        den[i] += 1e-8f; /* sqrt(v) + eps */
    for (size_t i = 0; i < n; i += 7)
        den[i] = 1e-8f; /* v_Tw = 0: the coordinates the paper's step blows up */
    fill(x, n, 23, 1.0f, 0);
    memcpy(x0, x, n * 4);
    const float lr = 1e-3f, wd = 0.0f, c = 1.0f;
    ob_frozen_update(x, m, den, n, lr, wd, 0.0f);
    for (size_t i = 0; i < n; i++) {
        float want = x0[i] - lr * (m[i] / den[i] + wd * x0[i]);
        assert_true(memcmp(&want, &x[i], 4) == 0);
    }
    memcpy(y, x0, n * 4);
    ob_frozen_update(y, m, den, n, lr, wd, 1.0f / c);
    size_t bounded = 0;
    for (size_t i = 0; i < n; i++) {
        float step = x0[i] - y[i];
        /* The subtraction itself rounds to a unit in the last place of x. */
        if (!(fabsf(step) <= lr * c + fabsf(x0[i]) * 2.4e-7f))
            fail_msg("coordinate %zu moved %g", i, step);
        if (fabsf(m[i] / den[i]) <= c)
            assert_true(memcmp(&x[i], &y[i], 4) == 0);
        else
            bounded++;
    }
    assert_true(bounded >= n / 7); /* at least the v_Tw = 0 coordinates */
    for (size_t i = 0; i < n; i++)
        p[i] = m[i] / den[i];
    float *q = host(n), *mq = host(n);
    memcpy(x, x0, n * 4), memcpy(y, x0, n * 4);
    ob_precondition_apply(x, mq, p, den, n, lr, wd, INFINITY);
    ob_precondition_apply(y, q, p, den, n, lr, wd, c);
    expect_equal(mq, q, n, "m = p * den, clipped or not");
    for (size_t i = 0; i < n; i++) {
        float pc = p[i] > c ? c : (p[i] < -c ? -c : p[i]);
        float want = x0[i] - lr * (pc + wd * x0[i]);
        assert_true(memcmp(&want, &y[i], 4) == 0);
        float raw = x0[i] - lr * (p[i] + wd * x0[i]);
        assert_true(memcmp(&raw, &x[i], 4) == 0);
    }
    free(m), free(den), free(x), free(x0), free(y), free(p), free(q), free(mq);
}

/* --- device against CPU -------------------------------------------------------------------- */

/* Three successive Adam steps with different coefficients, then the freeze (v *= c2, den), then
 * three compression steps in each form. */
static void compare_all(size_t n)
{
    ob_err err = {0};
    float *x = host(n), *m = host(n), *v = host(n), *g = host(n), *den = host(n), *p = host(n);
    fill(x, n, 11 + n, 1.0f, 0);
    fill(g, n, 12 + n, 1.0f, 0);
    float *dx = dev_copy(x, n), *dm = dev_copy(m, n), *dv = dev_copy(v, n), *dg = dev_copy(g, n);
    float *dden = dev_copy(den, n), *dp = dev_copy(p, n);
    float *got = host(n);

    for (int t = 1; t <= 3; t++) {
        fill(g, n, 100 * (uint64_t)t + n, 1.0f + (float)t, 0);
        expect_ok(ob_cuda_memcpy(dg, g, n * 4, NULL, &err), &err, "upload g");
        ob_adam_coeffs k;
        ob_adam_coeffs_init(&k, 0.9, 0.999, 1e-8, t == 2 ? 0.01 : 0.0, t != 3, t, 1e-3f, t);
        ob_adam_update(x, m, v, g, n, &k);
        expect_ok(ob_cuda_adam_update(dx, dm, dv, dg, n, &k, NULL, &err), &err, "adam");
        download(got, dx, n), expect_equal(x, got, n, "adam: x");
        download(got, dm, n), expect_equal(m, got, n, "adam: m");
        download(got, dv, n), expect_equal(v, got, n, "adam: v");
    }
    double cpu_l1 = ob_l1_norm(v, n), gpu_l1 = 0.0, again = 0.0;
    expect_ok(ob_cuda_l1_norm(dv, n, &gpu_l1, NULL, &err), &err, "l1");
    expect_ok(ob_cuda_l1_norm(dv, n, &again, NULL, &err), &err, "l1 again");
    if (!(fabs(cpu_l1 - gpu_l1) <= 1e-12 * cpu_l1))
        fail_msg("l1: cpu %.17g gpu %.17g", cpu_l1, gpu_l1);
    if (memcmp(&gpu_l1, &again, sizeof again) != 0) fail_msg("l1 differs between two runs");
    /* The warm-start check's count, at a factor where some but not all elements pass. */
    size_t cpu_count = ob_count_exceeding(g, v, n, 0.25f, 4.0f), gpu_count = 0;
    expect_ok(ob_cuda_count_exceeding(dg, dv, n, 0.25f, 4.0f, &gpu_count, NULL, &err), &err,
              "count");
    if (cpu_count != gpu_count) fail_msg("count: cpu %zu gpu %zu", cpu_count, gpu_count);
    /* The compression-health kernels on m, with some coordinates set to exactly zero. */
    for (size_t i = 0; i < n; i += 7)
        m[i] = i % 2 ? -0.0f : 0.0f;
    expect_ok(ob_cuda_memcpy(dm, m, n * 4, NULL, &err), &err, "upload m");
    double cpu_sq = ob_sum_squares(m, n), gpu_sq = 0.0, sq_again = 0.0;
    expect_ok(ob_cuda_sum_squares(dm, n, &gpu_sq, NULL, &err), &err, "sum_squares");
    expect_ok(ob_cuda_sum_squares(dm, n, &sq_again, NULL, &err), &err, "sum_squares again");
    if (!(fabs(cpu_sq - gpu_sq) <= 1e-12 * cpu_sq))
        fail_msg("sum_squares: cpu %.17g gpu %.17g", cpu_sq, gpu_sq);
    if (memcmp(&gpu_sq, &sq_again, sizeof sq_again) != 0)
        fail_msg("sum_squares differs between two runs");
    size_t cpu_zero = ob_count_zero(m, n), gpu_zero = 0;
    expect_ok(ob_cuda_count_zero(dm, n, &gpu_zero, NULL, &err), &err, "count_zero");
    if (cpu_zero != gpu_zero || cpu_zero < (n + 6) / 7)
        fail_msg("count_zero: cpu %zu gpu %zu", cpu_zero, gpu_zero);

    ob_scale(v, n, 1.0009f);
    expect_ok(ob_cuda_scale(dv, n, 1.0009f, NULL, &err), &err, "scale");
    ob_frozen_den(den, v, n, 1e-8f);
    expect_ok(ob_cuda_frozen_den(dden, dv, n, 1e-8f, NULL, &err), &err, "den");
    download(got, dv, n), expect_equal(v, got, n, "scale: v");
    download(got, dden, n), expect_equal(den, got, n, "den");

    for (int t = 4; t <= 6; t++) {
        fill(g, n, 100 * (uint64_t)t + n, 1.0f, 0);
        expect_ok(ob_cuda_memcpy(dg, g, n * 4, NULL, &err), &err, "upload g");
        float lr = 1e-3f / (float)t, wd = t == 5 ? 0.01f : 0.0f;
        /* No bound (the paper's step), then the stabiliser's bound at two strengths. */
        float inv_c = t == 4 ? 0.0f : (t == 5 ? 1.0f : 3.0f), c = t == 4 ? INFINITY : 1 / inv_c;
        ob_momentum_update(m, g, n, 0.9f, 0.1f);
        ob_frozen_update(x, m, den, n, lr, wd, inv_c);
        expect_ok(ob_cuda_momentum_update(dm, dg, n, 0.9f, 0.1f, NULL, &err), &err, "momentum");
        expect_ok(ob_cuda_frozen_update(dx, dm, dden, n, lr, wd, inv_c, NULL, &err), &err,
                  "frozen");
        download(got, dm, n), expect_equal(m, got, n, "momentum: m");
        download(got, dx, n), expect_equal(x, got, n, "frozen: x");

        ob_momentum_precondition(m, p, g, den, n, 0.9f, 0.1f);
        ob_precondition_apply(x, m, p, den, n, lr, wd, c);
        expect_ok(ob_cuda_momentum_precondition(dm, dp, dg, dden, n, 0.9f, 0.1f, NULL, &err), &err,
                  "momentum_precondition");
        expect_ok(ob_cuda_precondition_apply(dx, dm, dp, dden, n, lr, wd, c, NULL, &err), &err,
                  "precondition_apply");
        download(got, dp, n), expect_equal(p, got, n, "precondition: p");
        download(got, dm, n), expect_equal(m, got, n, "precondition: m");
        download(got, dx, n), expect_equal(x, got, n, "precondition: x");
    }
    /* Two steps of a variance refresh: m, v, den and x in one pass, bounded and not. */
    for (int t = 7; t <= 8; t++) {
        fill(g, n, 100 * (uint64_t)t + n, 1.0f, 0);
        expect_ok(ob_cuda_memcpy(dg, g, n * 4, NULL, &err), &err, "upload g");
        ob_adam_coeffs k;
        ob_adam_coeffs_init(&k, 0.9, 0.999, 1e-8, t == 7 ? 0.01 : 0.0, 0, t, 1e-3f, 4);
        float keep = t == 7 ? 0.93f : 0.5f, take = t == 7 ? 0.07f : 0.31f;
        float inv_c = t == 7 ? 0.0f : 2.0f;
        ob_refresh_update(x, m, v, den, g, n, &k, keep, take, inv_c);
        expect_ok(
            ob_cuda_refresh_update(dx, dm, dv, dden, dg, n, &k, keep, take, inv_c, NULL, &err),
            &err, "refresh");
        download(got, dm, n), expect_equal(m, got, n, "refresh: m");
        download(got, dv, n), expect_equal(v, got, n, "refresh: v");
        download(got, dden, n), expect_equal(den, got, n, "refresh: den");
        download(got, dx, n), expect_equal(x, got, n, "refresh: x");
    }
    /* BinSGDM's local step (b a running maximum at t 10) and its direct step; SoftSignSGD. */
    for (int t = 9; t <= 11; t++) {
        fill(g, n, 100 * (uint64_t)t + n, 1.0f, 0);
        expect_ok(ob_cuda_memcpy(dg, g, n * 4, NULL, &err), &err, "upload g");
        int keep_max = t == 10;
        ob_binsgdm_local(m, v, p, g, n, 0.9f, 0.1f, 1e-8f, keep_max);
        expect_ok(ob_cuda_binsgdm_local(dm, dv, dp, dg, n, 0.9f, 0.1f, 1e-8f, keep_max, NULL, &err),
                  &err, "binsgdm_local");
        download(got, dm, n), expect_equal(m, got, n, "binsgdm: m");
        download(got, dv, n), expect_equal(v, got, n, "binsgdm: b");
        download(got, dp, n), expect_equal(p, got, n, "binsgdm: m / (b + eps)");
        ob_direct_update(x, p, n, 1e-3f, t == 11 ? 0.01f : 0.0f);
        expect_ok(ob_cuda_direct_update(dx, dp, n, 1e-3f, t == 11 ? 0.01f : 0.0f, NULL, &err),
                  &err, "direct_update");
        download(got, dx, n), expect_equal(x, got, n, "direct: x");
        ob_adam_coeffs k;
        ob_adam_coeffs_init(&k, 0.95, 0.999, 1e-8, t == 9 ? 0.01 : 0.0, 0, t, 1e-3f, 3);
        ob_softsign_update(x, m, v, g, n, &k);
        expect_ok(ob_cuda_softsign_update(dx, dm, dv, dg, n, &k, NULL, &err), &err, "softsign");
        download(got, dm, n), expect_equal(m, got, n, "softsign: m");
        download(got, dv, n), expect_equal(v, got, n, "softsign: b");
        download(got, dx, n), expect_equal(x, got, n, "softsign: x");
    }
    /* The tracked variance: the statistics (m, v, p standing for u, A, B), a rank's share of
     * the estimate (into x) and the estimate set from it, where a zero keeps v. */
    for (int t = 12; t <= 13; t++) {
        fill(g, n, 100 * (uint64_t)t + n, 1.0f, 0);
        expect_ok(ob_cuda_memcpy(dg, g, n * 4, NULL, &err), &err, "upload g");
        float cu = 1.0f / (1.0f - powf(0.9f, (float)t));
        ob_track_update(m, v, p, g, n, 0.9f, 0.1f, 0.999f, 0.001f, cu);
        expect_ok(
            ob_cuda_track_update(dm, dv, dp, dg, n, 0.9f, 0.1f, 0.999f, 0.001f, cu, NULL, &err),
            &err, "track_update");
        download(got, dm, n), expect_equal(m, got, n, "track: u");
        download(got, dv, n), expect_equal(v, got, n, "track: A");
        download(got, dp, n), expect_equal(p, got, n, "track: B");
    }
    ob_track_share(x, v, p, n, 40.0f, 0.2f, 0.8f, 0.25f);
    expect_ok(ob_cuda_track_share(dx, dv, dp, n, 40.0f, 0.2f, 0.8f, 0.25f, NULL, &err), &err,
              "track_share");
    download(got, dx, n), expect_equal(x, got, n, "track: share");
    for (size_t k = 0; k < n; k += 9)
        x[k] = 0.0f; /* nothing arrived: v kept */
    expect_ok(ob_cuda_memcpy(dx, x, n * 4, NULL, &err), &err, "upload the sums");
    ob_track_set(m, den, x, n, 0.3125f, 1e-8f);
    expect_ok(ob_cuda_track_set(dm, dden, dx, n, 0.3125f, 1e-8f, NULL, &err), &err, "track_set");
    download(got, dm, n), expect_equal(m, got, n, "track: v");
    download(got, dden, n), expect_equal(den, got, n, "track: den");
    /* With precondition: the estimate leaves den_old / den_new in the sums' buffer, and the
     * error buffers are scaled by it. */
    for (size_t k = 0; k < n; k++)
        x[k] = k % 9 == 4 ? 0.0f : 1.5f * x[k] + 1e-6f;
    expect_ok(ob_cuda_memcpy(dx, x, n * 4, NULL, &err), &err, "upload the sums");
    ob_track_set_ratio(m, den, x, n, 0.3125f, 1e-8f);
    expect_ok(ob_cuda_track_set_ratio(dm, dden, dx, n, 0.3125f, 1e-8f, NULL, &err), &err,
              "track_set_ratio");
    download(got, dm, n), expect_equal(m, got, n, "track ratio: v");
    download(got, dden, n), expect_equal(den, got, n, "track ratio: den");
    download(got, dx, n), expect_equal(x, got, n, "track ratio: den_old / den_new");
    ob_scale_by(v, x, n);
    expect_ok(ob_cuda_scale_by(dv, dx, n, NULL, &err), &err, "scale_by");
    download(got, dv, n), expect_equal(v, got, n, "scale_by");
    float *all[] = {dx, dm, dv, dg, dden, dp};
    for (size_t i = 0; i < 6; i++)
        ob_cuda_free(all[i]);
    free(x), free(m), free(v), free(g), free(den), free(p), free(got);
}

static void test_device_matches_cpu(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_sizes / sizeof *k_sizes; i++)
        compare_all(k_sizes[i]);
}

static void test_device_empty_and_null(void **state)
{
    (void)state;
    ob_err err = {0};
    ob_adam_coeffs k;
    ob_adam_coeffs_init(&k, 0.9, 0.999, 1e-8, 0.0, 0, 1, 1e-3f, 1);
    assert_int_equal(ob_cuda_adam_update(NULL, NULL, NULL, NULL, 0, &k, NULL, &err), OB_OK);
    assert_int_equal(ob_cuda_adam_update(NULL, NULL, NULL, NULL, 5, &k, NULL, &err),
                     OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "ob_cuda_adam_update: NULL buffer"));
    double l1 = 1.0;
    assert_int_equal(ob_cuda_l1_norm(NULL, 0, &l1, NULL, &err), OB_OK);
    assert_true(l1 == 0.0);
    double sq = 1.0;
    size_t zeros = 3;
    assert_int_equal(ob_cuda_sum_squares(NULL, 0, &sq, NULL, &err), OB_OK);
    assert_true(sq == 0.0);
    assert_int_equal(ob_cuda_sum_squares(NULL, 5, &sq, NULL, &err), OB_ERR_INVALID_ARG);
    assert_int_equal(ob_cuda_count_zero(NULL, 0, &zeros, NULL, &err), OB_OK);
    assert_int_equal(zeros, 0);
    assert_int_equal(ob_cuda_count_zero(NULL, 5, &zeros, NULL, &err), OB_ERR_INVALID_ARG);
}

/* --- without a device ----------------------------------------------------------------------- */

static int no_device_checks(void)
{
    int failed = 0;
    float dummy[4] = {0};
    ob_adam_coeffs k;
    ob_adam_coeffs_init(&k, 0.9, 0.999, 1e-8, 0.0, 0, 1, 1e-3f, 1);
    ob_err err = {0};
    ob_status st = ob_cuda_adam_update(dummy, dummy, dummy, dummy, 4, &k, NULL, &err);
    if (st != OB_ERR_CUDA && st != OB_ERR_UNSUPPORTED) {
        fprintf(stderr, "adam kernel without a device: status %d (%s)\n", (int)st, err.msg);
        failed++;
    }
    double l1 = 5.0;
    st = ob_cuda_l1_norm(dummy, 4, &l1, NULL, &err);
    if ((st != OB_ERR_CUDA && st != OB_ERR_UNSUPPORTED) || l1 != 0.0) {
        fprintf(stderr, "l1 norm without a device: status %d, %g (%s)\n", (int)st, l1, err.msg);
        failed++;
    }
    double sq = 5.0;
    size_t zeros = 5;
    st = ob_cuda_sum_squares(dummy, 4, &sq, NULL, &err);
    ob_status zst = ob_cuda_count_zero(dummy, 4, &zeros, NULL, &err);
    if ((st != OB_ERR_CUDA && st != OB_ERR_UNSUPPORTED) || sq != 0.0 ||
        (zst != OB_ERR_CUDA && zst != OB_ERR_UNSUPPORTED) || zeros != 0) {
        fprintf(stderr, "health kernels without a device: status %d/%d (%s)\n", (int)st, (int)zst,
                err.msg);
        failed++;
    }
    return failed;
}

int main(void)
{
    const struct CMUnitTest cpu_tests[] = {
        cmocka_unit_test(test_cpu_adam_formula),   cmocka_unit_test(test_cpu_fused_precondition),
        cmocka_unit_test(test_cpu_stabilizer),     cmocka_unit_test(test_cpu_count_exceeding),
        cmocka_unit_test(test_cpu_health_kernels), cmocka_unit_test(test_cpu_refresh),
    };
    int failed = cmocka_run_group_tests_name("cpu kernels", cpu_tests, NULL, NULL);
    if (failed) return 1;
    if (ob_cuda_device_count() == 0) {
        if (no_device_checks()) return 1;
        printf("no CUDA device: device kernel comparisons skipped\n");
        return SKIP_CODE;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_matches_cpu),
        cmocka_unit_test(test_device_empty_and_null),
    };
    return cmocka_run_group_tests_name("device kernels", tests, NULL, NULL);
}
