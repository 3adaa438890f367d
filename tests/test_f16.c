/* The fp16 and fp8 gradient messages (onebit/compress.h): the conversions against IEEE
 * binary16 and E4M3 as defined (nearest code, ties to even), and the block codecs against their
 * contracts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "f16_math.h"
#include "onebit/compress.h"
#include "onebit/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A half's value from its fields, in double (the definition, not the code under test). */
static double half_value(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -24);
    else
        v = ldexp(1024.0 + m, e - 25);
    return sign ? -v : v;
}

/* An E4M3 code's value from its fields, in double (the definition). */
static double f8_value(uint16_t c)
{
    int sign = (c >> 7) & 1, e = (c >> 3) & 0xf, m = c & 0x7;
    double v;
    if ((c & 0x7f) == 0x7f)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, -9);
    else
        v = ldexp(8.0 + m, e - 10);
    return sign ? -v : v;
}

static uint16_t f16_encode(float x)
{
    return ob__f16_from_f32(x);
}

static uint16_t f8_encode(float x)
{
    return ob__f8_from_f32(x);
}

static float f16_decode(uint16_t h)
{
    return ob__f32_from_f16(h);
}

static float f8_decode(uint16_t c)
{
    return ob__f32_from_f8((uint8_t)c);
}

/* A code under test: its definition (value), the conversions, its width, its largest finite
 * magnitude and what a value beyond it becomes. */
typedef struct code_def {
    double (*value)(uint16_t);
    uint16_t (*encode)(float);
    float (*decode)(uint16_t);
    unsigned bits;
    uint16_t top;    /* the largest finite magnitude's code */
    double overflow; /* |x| at or beyond: infinity (fp16) or top (fp8, saturating) */
    int saturates;
} code_def;

static const code_def FP16 = {half_value, f16_encode, f16_decode, 16, 0x7bff, 65520.0, 0};
static const code_def FP8 = {f8_value, f8_encode, f8_decode, 8, 0x7e, 448.0, 1};

/* Every code decodes to its definition; the sign of zero survives. */
static void decode_every_code(const code_def *c)
{
    for (uint32_t h = 0; h < (1u << c->bits); h++) {
        float f = c->decode((uint16_t)h);
        double want = c->value((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(f));
            continue;
        }
        assert_true((double)f == want);
        assert_int_equal(signbit(f) != 0, (h >> (c->bits - 1)) != 0); /* -0 stays -0 */
    }
}

static void test_decode_every_half(void **state)
{
    (void)state;
    decode_every_code(&FP16);
}

/* Encoding x gives the nearest code, ties to the even one; at or beyond the overflow
 * threshold infinity (fp16) or the largest finite (fp8); NaN stays NaN (fp8: and infinity). */
static void check_code(const code_def *c, float x)
{
    uint16_t h = c->encode(x);
    uint16_t sign = (uint16_t)(1u << (c->bits - 1)), mag = h & (uint16_t)(sign - 1);
    if (isnan(x) || (c->saturates && isinf(x))) {
        assert_true(isnan(c->value(h)));
        return;
    }
    assert_int_equal((h & sign) != 0, signbit(x) ? 1 : 0);
    double ax = fabs((double)x), v = fabs(c->value(h));
    if (ax >= c->overflow) {
        if (c->saturates)
            assert_int_equal(mag, c->top);
        else
            assert_true(isinf(v));
        return;
    }
    assert_true(mag <= c->top);
    double dist = fabs(v - ax);
    if (mag > 0) { /* the code below is not nearer, nor as near and even */
        double below = fabs(c->value((uint16_t)(mag - 1)));
        assert_true(fabs(below - ax) > dist || (fabs(below - ax) == dist && !(mag & 1)));
    }
    if (mag < c->top) {
        double above = fabs(c->value((uint16_t)(mag + 1)));
        assert_true(fabs(above - ax) > dist || (fabs(above - ax) == dist && !(mag & 1)));
    }
}

/* Every 4099th float bit pattern (a million values over all exponents and signs), every code,
 * the midpoints between neighbours and the floats next to them, and the specials. */
static void sweep_code(const code_def *c, const float *specials, size_t n)
{
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
        float x;
        uint32_t b = (uint32_t)u;
        memcpy(&x, &b, sizeof x);
        check_code(c, x);
    }
    for (uint32_t h = 0; h < c->top; h++) {
        double v = c->value((uint16_t)h), next = c->value((uint16_t)(h + 1));
        float mid = (float)((v + next) / 2); /* exact: a midpoint has one bit more */
        check_code(c, (float)v);
        check_code(c, -(float)v);
        check_code(c, mid);
        check_code(c, nextafterf(mid, 0.0f));
        check_code(c, nextafterf(mid, INFINITY));
    }
    for (size_t i = 0; i < n; i++)
        check_code(c, specials[i]);
}

static void test_encode_nearest_even(void **state)
{
    (void)state;
    const float specials[] = {0.0f,
                              -0.0f,
                              65504.0f,
                              65519.996f,
                              65520.0f,
                              1e30f,
                              INFINITY,
                              -INFINITY,
                              NAN,
                              5.960464477539063e-08f,
                              2.98023223876953125e-08f,
                              2.9802326e-08f,
                              1.4e-45f,
                              6.1035156e-05f,
                              6.1035152e-05f};
    sweep_code(&FP16, specials, sizeof specials / sizeof *specials);
    assert_int_equal(ob__f16_from_f32(65504.0f), 0x7bff);
    assert_int_equal(ob__f16_from_f32(65520.0f), 0x7c00);
    assert_int_equal(ob__f16_from_f32(2.98023223876953125e-08f), 0x0000); /* 2^-25: tie to 0 */
    assert_int_equal(ob__f16_from_f32(-1.0f), 0xbc00);
}

/* Blocks of B = 256 in `code`: block b holds values of magnitude 10^(6b - 24) (1e-24 .. 1e18),
 * half of them `small` times smaller, with 0, -0.0 and the smallest subnormal float, the last
 * block short. Every element decodes within `rel` of itself or `flush` of its block's largest,
 * -0.0 stays -0.0, and `exact` (one block whose values have no more bits than the code keeps)
 * comes back bit for bit. */
static void round_trip(ob_float_code code, double small, double rel, double flush,
                       const float *exact)
{
    const size_t B = 256, n = 8 * B, x_len = 7 * B + 100;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    void *msg = malloc(ob_fcode_bytes(code, n, B));
    ob_rng rng;
    ob_rng_seed(&rng, 7, 0);
    for (size_t k = 0; k < n; k++) {
        double mag = pow(10.0, 6.0 * (double)(k / B) - 24.0);
        x[k] = (float)(mag * ob_rng_normal(&rng) * ((k % 2) ? small : 1.0));
    }
    x[3] = 0.0f;
    x[4] = -0.0f;
    x[B + 5] = 1.4e-45f; /* the smallest subnormal float */
    ob_fcode_encode(code, x, x_len, n, B, msg);
    ob_fcode_decode_add(code, msg, n, B, NULL, 0, y);
    for (size_t b = 0; b < n / B; b++) {
        double maxabs = 0;
        for (size_t k = b * B; k < (b + 1) * B && k < x_len; k++)
            maxabs = fmax(maxabs, fabs(x[k]));
        for (size_t k = b * B; k < (b + 1) * B; k++) {
            double want = k < x_len ? x[k] : 0.0;
            double tol = fabs(want) * rel + maxabs * flush;
            assert_true(fabs((double)y[k] - want) <= tol);
        }
    }
    assert_true(y[4] == 0.0f && signbit(y[4]));
    ob_fcode_encode(code, exact, B, B, B, msg);
    ob_fcode_decode_add(code, msg, B, B, NULL, 0, y);
    assert_memory_equal(exact, y, B * sizeof(float));
    free(x);
    free(y);
    free(msg);
}

/* Every element decodes within half a unit of the half it became: 2^-11 of itself, or of
 * the block's largest scaled to 2^-24 for the smallest ones; two bytes an element. */
static void test_block_round_trip(void **state)
{
    (void)state;
    assert_int_equal(ob_f16_bytes(2048, 256), 2 * 2048 + 2 * 8);
    float exact[256]; /* the largest element of a block keeps 11 bits exactly */
    for (size_t k = 0; k < 256; k++)
        exact[k] = (float)((int)k - 128) * 0.0078125f; /* multiples of 2^-7 below 1 */
    round_trip(OB_CODE_FP16, 1e-6, 0x1p-11, 0x1p-39, exact);
}

/* A block with a NaN or an infinity crosses with shift 0: the non-finite value survives, other
 * blocks are untouched; an all-zero block decodes to zeros. */
static void test_nonfinite_blocks(void **state)
{
    (void)state;
    const size_t B = 32, n = 4 * B;
    float x[128] = {0}, y[128];
    unsigned char msg[4 * 32 * 2 + 8];
    for (size_t k = 0; k < n; k++)
        x[k] = 1e-3f * (float)(k + 1);
    x[B + 2] = NAN;
    x[2 * B + 7] = -INFINITY;
    x[2 * B + 8] = 1e6f; /* beyond 65504 in a shift-0 block: infinite */
    memset(x + 3 * B, 0, B * sizeof(float));
    ob_f16_encode(x, n, n, B, msg);
    const int16_t *shifts = (const int16_t *)(msg + 2 * n);
    assert_int_equal(shifts[1], 0);
    assert_int_equal(shifts[2], 0);
    assert_int_equal(shifts[3], 0);
    assert_true(shifts[0] > 0);
    ob_f16_decode(msg, n, B, y);
    assert_true(isnan(y[B + 2]));
    assert_true(isinf(y[2 * B + 7]) && y[2 * B + 7] < 0);
    assert_true(isinf(y[2 * B + 8]) && y[2 * B + 8] > 0);
    for (size_t k = 0; k < B; k++)
        assert_true(fabsf(y[k] - x[k]) <= fabsf(x[k]) * 0x1p-11f);
    for (size_t k = 3 * B; k < n; k++)
        assert_true(y[k] == 0.0f);
}

/* decode_add: the decoded message plus x over x_len elements (a partial sum plus a rank's
 * values), the decoded value alone beyond; in place on x too. */
static void test_decode_add(void **state)
{
    (void)state;
    const size_t B = 256, n = 3 * B, x_len = 2 * B + 17;
    unsigned char *msg = malloc(ob_f16_bytes(n, B));
    float *p = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
    float *dec = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    ob_rng rng;
    ob_rng_seed(&rng, 12, 0);
    for (size_t k = 0; k < n; k++) {
        p[k] = ob_rng_normal(&rng) * 1e-3f;
        x[k] = ob_rng_normal(&rng);
    }
    ob_f16_encode(p, n, n, B, msg);
    ob_f16_decode(msg, n, B, dec);
    ob_f16_decode_add(msg, n, B, x, x_len, got);
    long bad = 0;
    for (size_t k = 0; k < n; k++) {
        float want = k < x_len ? dec[k] + x[k] : dec[k];
        bad += memcmp(&want, &got[k], sizeof want) != 0;
    }
    assert_int_equal(bad, 0);
    ob_f16_decode_add(msg, n, B, x, x_len, x); /* in place */
    assert_memory_equal(got, x, n * sizeof(float));
    ob_f16_decode_add(msg, n, B, NULL, 0, got);
    assert_memory_equal(dec, got, n * sizeof(float));
    free(msg), free(p), free(x), free(dec), free(got);
}

static void test_f8_decode_every_code(void **state)
{
    (void)state;
    decode_every_code(&FP8);
    assert_true(f8_value(0x7e) == 448.0 && f8_value(0x08) == 0x1p-6 && f8_value(0x01) == 0x1p-9);
}

static void test_f8_encode_nearest_even(void **state)
{
    (void)state;
    const float specials[] = {0.0f,      -0.0f, 448.0f,  464.0f,   1e30f,           INFINITY,
                              -INFINITY, NAN,   0x1p-9f, 0x1p-10f, 0x1.000002p-10f, 1.4e-45f,
                              0x1p-6f,   240.0f};
    sweep_code(&FP8, specials, sizeof specials / sizeof *specials);
    assert_int_equal(ob__f8_from_f32(0x1p-10f), 0x00); /* half the smallest subnormal: to 0 */
    assert_int_equal(ob__f8_from_f32(0x1.000002p-10f), 0x01);
    assert_int_equal(ob__f8_from_f32(-1.0f), 0xb8);
    assert_int_equal(ob__f8_from_f32(1e30f), 0x7e);
    assert_int_equal(ob__f8_from_f32(NAN) & 0x7f, 0x7f);
}

/* fp8 blocks: every element within 2^-4 of itself (half a unit of 4 significant bits), or
 * 2^-17 of its block's largest for the smallest; the largest of a block keeps 4 bits exactly
 * when it has no more; one byte an element. */
static void test_f8_block_round_trip(void **state)
{
    (void)state;
    assert_int_equal(ob_fcode_bytes(OB_CODE_FP8, 2048, 256), 2048 + 2 * 8);
    assert_int_equal(ob_fcode_bytes(OB_CODE_FP16, 2048, 256), ob_f16_bytes(2048, 256));
    float exact[256];
    for (size_t k = 0; k < 256; k++)
        exact[k] = (float)((int)(k % 16) - 8) * 0.125f; /* 4-bit multiples of 2^-3 */
    round_trip(OB_CODE_FP8, 1e-3, 0x1p-4, 0x1p-17, exact);
}

/* An fp8 block with a NaN or an infinity crosses with shift 0 as NaN; others are untouched. */
static void test_f8_nonfinite_blocks(void **state)
{
    (void)state;
    const size_t B = 32, n = 4 * B;
    float x[128] = {0}, y[128];
    unsigned char msg[4 * 32 + 8];
    for (size_t k = 0; k < n; k++)
        x[k] = 1e-3f * (float)(k + 1);
    x[B + 2] = NAN;
    x[2 * B + 7] = -INFINITY;
    memset(x + 3 * B, 0, B * sizeof(float));
    ob_fcode_encode(OB_CODE_FP8, x, n, n, B, msg);
    const int16_t *shifts = (const int16_t *)(msg + n);
    assert_int_equal(shifts[1], 0);
    assert_int_equal(shifts[2], 0);
    assert_int_equal(shifts[3], 0);
    assert_true(shifts[0] > 0);
    ob_fcode_decode_add(OB_CODE_FP8, msg, n, B, NULL, 0, y);
    assert_true(isnan(y[B + 2]));
    assert_true(isnan(y[2 * B + 7]));
    for (size_t k = 0; k < B; k++)
        assert_true(fabsf(y[k] - x[k]) <= fabsf(x[k]) * 0x1p-4f);
    for (size_t k = 3 * B; k < n; k++)
        assert_true(y[k] == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_every_half),
        cmocka_unit_test(test_encode_nearest_even),
        cmocka_unit_test(test_block_round_trip),
        cmocka_unit_test(test_nonfinite_blocks),
        cmocka_unit_test(test_decode_add),
        cmocka_unit_test(test_f8_decode_every_code),
        cmocka_unit_test(test_f8_encode_nearest_even),
        cmocka_unit_test(test_f8_block_round_trip),
        cmocka_unit_test(test_f8_nonfinite_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
