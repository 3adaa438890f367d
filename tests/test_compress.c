/* The CPU compression kernels against plain reference loops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "onebit/compress.h"
#include "onebit/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *random_vec(size_t n, uint64_t seed, float scale)
{
    float *v = malloc(n * sizeof(float));
    ob_rng rng;
    ob_rng_seed(&rng, seed, 0);
    for (size_t i = 0; i < n; i++)
        v[i] = scale * ob_rng_normal(&rng);
    return v;
}

static uint32_t bit_of(const void *packed, size_t k)
{
    return (((const uint32_t *)packed)[k / 32] >> (k % 32)) & 1u;
}

static float scale_of(const void *packed, size_t n, size_t b)
{
    return ((const float *)((const char *)packed + n / 8))[b];
}

/* Compression keeps the invariant u = q + e: e is exactly fl(u - q) for any input, and when
 * every |u| of a block lies within a factor two of its scale, q + e reproduces u bit for bit
 * (the subtraction is then exact). */
static void test_error_feedback_invariant(void **state)
{
    size_t n = 4096, B = 256;
    float *x = random_vec(n, 1, 1.0f), *e = random_vec(n, 2, 0.1f);
    float *u = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        u[i] = x[i] + e[i];
    void *packed = malloc(ob_packed_bytes(n, B));
    ob_compress_ef(x, n, e, n, B, OB_SCALE_L1, packed);
    for (size_t i = 0; i < n; i++) {
        float s = scale_of(packed, n, i / B);
        float q = bit_of(packed, i) ? s : -s;
        float want_e = u[i] - q;
        assert_memory_equal(&e[i], &want_e, sizeof(float));
        /* q + e = u to within rounding of the subtraction */
        assert_true(fabsf((q + e[i]) - u[i]) <= 1e-7f * fmaxf(fabsf(u[i]), s));
    }

    /* Magnitudes in [0.75, 1.25]: every |u| within 2x of the mean, subtraction exact. */
    ob_rng rng;
    ob_rng_seed(&rng, 3, 0);
    memset(e, 0, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float mag = 0.75f + 0.5f * ob_rng_uniform(&rng);
        x[i] = (ob_rng_next(&rng) & 1) ? mag : -mag;
        u[i] = x[i];
    }
    ob_compress_ef(x, n, e, n, B, OB_SCALE_L1, packed);
    for (size_t i = 0; i < n; i++) {
        float s = scale_of(packed, n, i / B);
        float q = bit_of(packed, i) ? s : -s;
        float back = q + e[i];
        assert_memory_equal(&back, &u[i], sizeof(float));
    }
    free(x);
    free(e);
    free(u);
    free(packed);
}

static void check_scales(ob_scale_kind kind)
{
    size_t n = 2048 * 3, B = 2048;
    float *x = random_vec(n, 11, 3.0f), *e = calloc(n, sizeof(float));
    void *packed = malloc(ob_packed_bytes(n, B));
    ob_compress_ef(x, n, e, n, B, kind, packed);
    for (size_t b = 0; b < n / B; b++) {
        double acc = 0.0;
        for (size_t i = b * B; i < (b + 1) * B; i++)
            acc += kind == OB_SCALE_L1 ? fabs((double)x[i]) : (double)x[i] * x[i];
        double want = kind == OB_SCALE_L1 ? acc / B : sqrt(acc) / sqrt((double)B);
        double got = scale_of(packed, n, b);
        assert_true(fabs(got - want) <= 1e-6 * want);
    }
    free(x);
    free(e);
    free(packed);
}

static void test_scale_l1_is_mean_abs(void **state)
{
    check_scales(OB_SCALE_L1);
}

static void test_scale_l2(void **state)
{
    check_scales(OB_SCALE_L2);
}

/* The L1 scale preserves the block's L1 norm: sum |q| == sum |u|. */
static void test_l1_scale_preserves_magnitude(void **state)
{
    size_t n = 1024, B = 1024;
    float *x = random_vec(n, 5, 1.0f), *e = calloc(n, sizeof(float));
    void *packed = malloc(ob_packed_bytes(n, B));
    double l1 = 0.0;
    for (size_t i = 0; i < n; i++)
        l1 += fabs((double)x[i]);
    ob_compress_ef(x, n, e, n, B, OB_SCALE_L1, packed);
    double q1 = (double)scale_of(packed, n, 0) * (double)n;
    assert_true(fabs(q1 - l1) <= 1e-6 * l1);
    free(x);
    free(e);
    free(packed);
}

static void test_sign_of_zero_is_plus(void **state)
{
    size_t n = 64, B = 32;
    float x[64], e[64];
    for (size_t i = 0; i < n; i++) {
        x[i] = (i % 3 == 0) ? 0.0f : (i % 3 == 1 ? -0.0f : -2.0f);
        e[i] = 0.0f;
    }
    void *packed = malloc(ob_packed_bytes(n, B));
    ob_compress_ef(x, n, e, n, B, OB_SCALE_L1, packed);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bit_of(packed, i), i % 3 == 2 ? 0u : 1u);

    uint32_t bits[1];
    float z[3] = {0.0f, -0.0f, -1e-30f};
    ob_sign_pack(z, 3, bits);
    assert_int_equal(bits[0], 0x3u);
    free(packed);
}

static void test_pack_unpack_ragged(void **state)
{
    size_t sizes[] = {1, 5, 31, 32, 33, 63, 64, 65, 1000, 1031};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si], words = (n + 31) / 32;
        float *u = random_vec(n, 100 + n, 1.0f), *back = malloc(n * sizeof(float));
        uint32_t *bits = malloc((words + 1) * sizeof(uint32_t));
        bits[words] = 0xdeadbeefu; /* guard word must survive */
        ob_sign_pack(u, n, bits);
        ob_sign_unpack(bits, n, back);
        for (size_t i = 0; i < n; i++)
            assert_true(back[i] == (u[i] >= 0.0f ? 1.0f : -1.0f));
        if (n % 32) assert_int_equal(bits[words - 1] >> (n % 32), 0u); /* unused bits zero */
        assert_int_equal(bits[words], 0xdeadbeefu);
        free(u);
        free(back);
        free(bits);
    }
}

/* x shorter than n: the tail compresses as x = 0 (the zero padding of the flat buffer). */
static void test_padding_tail(void **state)
{
    size_t n = 128, B = 64, xl = 70;
    float *x = random_vec(xl, 9, 1.0f), *e = random_vec(n, 10, 0.5f);
    float *u = malloc(n * sizeof(float)), *e_ref = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        u[i] = (i < xl ? x[i] : 0.0f) + e[i];
    void *packed = malloc(ob_packed_bytes(n, B));
    ob_compress_ef(x, xl, e, n, B, OB_SCALE_L1, packed);
    for (size_t b = 0; b < n / B; b++) {
        double acc = 0.0;
        for (size_t i = b * B; i < (b + 1) * B; i++)
            acc += fabs((double)u[i]);
        float s = (float)(acc / B);
        assert_true(scale_of(packed, n, b) == s);
        for (size_t i = b * B; i < (b + 1) * B; i++) {
            float q = u[i] >= 0.0f ? s : -s;
            e_ref[i] = u[i] - q;
            assert_true(e[i] == e_ref[i]);
        }
    }
    free(x);
    free(e);
    free(u);
    free(e_ref);
    free(packed);
}

static void test_decompress_and_average(void **state)
{
    size_t n = 512, B = 128, nsrc = 5;
    size_t msg = ob_packed_bytes(n, B);
    unsigned char *packed = malloc(nsrc * msg);
    float *dec = malloc(n * sizeof(float)), *avg = malloc(n * sizeof(float));
    float *ref = calloc(n, sizeof(float));
    for (size_t i = 0; i < nsrc; i++) {
        float *x = random_vec(n, 200 + i, 1.0f + (float)i), *e = calloc(n, sizeof(float));
        ob_compress_ef(x, n, e, n, B, OB_SCALE_L1, packed + i * msg);
        ob_decompress(packed + i * msg, n, B, dec);
        for (size_t k = 0; k < n; k++) {
            float s = scale_of(packed + i * msg, n, k / B);
            float want = x[k] >= 0.0f ? s : -s;
            assert_true(dec[k] == want);
            assert_true(dec[k] == x[k] - e[k] || fabsf(dec[k] - (x[k] - e[k])) < 1e-6f * s);
            ref[k] += dec[k]; /* source order, as the kernel must */
        }
        free(x);
        free(e);
    }
    ob_decompress_average(packed, nsrc, n, B, avg);
    for (size_t k = 0; k < n; k++) {
        float want = ref[k] / (float)nsrc;
        assert_memory_equal(&avg[k], &want, sizeof(float));
    }
    free(packed);
    free(dec);
    free(avg);
    free(ref);
}

/* A prefix of a message decodes to the same values as the whole, and writes nothing past
 * out_len (the piece of the compressed allreduce that straddles the end of the vector). */
static void test_decompress_prefix(void **state)
{
    size_t n = 640, B = 128, msg = ob_packed_bytes(n, B);
    unsigned char *packed = malloc(msg);
    float *x = random_vec(n, 77, 2.0f), *e = calloc(n, sizeof(float));
    float *whole = malloc(n * sizeof(float)), *part = malloc((n + 1) * sizeof(float));
    ob_compress_ef(x, n, e, n, B, OB_SCALE_L2, packed);
    ob_decompress(packed, n, B, whole);
    size_t lens[] = {0, 1, 31, 32, 33, 127, 128, 129, 300, 639, 640};
    for (size_t t = 0; t < sizeof lens / sizeof *lens; t++) {
        const float sentinel = 12345.0f;
        for (size_t k = 0; k <= n; k++)
            part[k] = sentinel;
        ob_decompress_prefix(packed, n, B, part, lens[t]);
        assert_memory_equal(part, whole, lens[t] * sizeof(float));
        for (size_t k = lens[t]; k <= n; k++)
            assert_true(part[k] == sentinel);
    }
    free(packed);
    free(x);
    free(e);
    free(whole);
    free(part);
}

static void test_packed_bytes(void **state)
{
    assert_int_equal(ob_packed_bytes(2048, 2048), 2048 / 8 + 4);
    assert_int_equal(ob_packed_bytes(1 << 20, 2048), (1 << 20) / 8 + 4 * 512);
    assert_int_equal(ob_packed_bytes(64, 32), 8 + 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_feedback_invariant),
        cmocka_unit_test(test_scale_l1_is_mean_abs),
        cmocka_unit_test(test_scale_l2),
        cmocka_unit_test(test_l1_scale_preserves_magnitude),
        cmocka_unit_test(test_sign_of_zero_is_plus),
        cmocka_unit_test(test_pack_unpack_ragged),
        cmocka_unit_test(test_padding_tail),
        cmocka_unit_test(test_decompress_and_average),
        cmocka_unit_test(test_decompress_prefix),
        cmocka_unit_test(test_packed_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
