/* The CUDA compression kernels (onebit/compress_cuda.h) against the CPU kernels of
 * onebit/compress.h: packed bits, scales, error buffers, decompress and decompress_average must
 * be bitwise identical for every block size, scale kind and ragged x_len, including zeros,
 * -0.0, subnormals and blocks whose scale depends on the CPU's summation order; and the fp16
 * gradient message's encode, decode and ordered sum, byte for byte.
 *
 * Without a usable CUDA device the test checks that the library reports that cleanly (device
 * count 0, OB_ERR_CUDA naming the failing call) and exits with 77, which ctest reports as
 * skipped. OB_CUDA_TEST_MAX_N (elements) caps the largest cases, e.g. for a slow emulator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "onebit/compress.h"
#include "onebit/compress_cuda.h"
#include "onebit/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_CODE 77

static size_t max_n = (size_t)1 << 23;

/* --- device helpers: every failure fails the test with the library's message -------------- */

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    ob_err err = {0};
    ob_status st = ob_cuda_alloc(&p, bytes, &err);
    if (st != OB_OK) fail_msg("ob_cuda_alloc(%zu): %s", bytes, err.msg);
    return p;
}

static void *dev_upload(const void *host, size_t bytes)
{
    void *p = dev_alloc(bytes);
    ob_err err = {0};
    if (bytes &&
        (ob_cuda_memcpy(p, host, bytes, NULL, &err) != OB_OK || ob_cuda_sync(NULL, &err) != OB_OK))
        fail_msg("upload: %s", err.msg);
    return p;
}

static void dev_download(void *host, const void *dev, size_t bytes)
{
    ob_err err = {0};
    if (ob_cuda_memcpy(host, dev, bytes, NULL, &err) != OB_OK || ob_cuda_sync(NULL, &err) != OB_OK)
        fail_msg("download: %s", err.msg);
}

/* --- inputs ------------------------------------------------------------------------------- */

/* Normal values times `scale`, with exact zeros, negative zeros, subnormals and a few large
 * magnitudes sprinkled in, so that every branch of the sign and the norm is taken. */
static void fill(float *v, size_t n, uint64_t seed, float scale)
{
    ob_rng rng;
    ob_rng_seed(&rng, seed, 17);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = ob_rng_below(&rng, 64);
        float z = scale * ob_rng_normal(&rng);
        if (r == 0)
            z = 0.0f;
        else if (r == 1)
            z = -0.0f;
        else if (r == 2)
            z = (ob_rng_next(&rng) & 1) ? 1e-40f : -3e-42f; /* subnormal */
        else if (r == 3)
            z *= 1e4f;
        v[i] = z;
    }
}

static float scale_at(const void *packed, size_t n, size_t b)
{
    float s;
    memcpy(&s, (const char *)packed + n / 8 + 4 * b, sizeof s);
    return s;
}

/* --- comparisons -------------------------------------------------------------------------- */

/* Bitwise comparison of two packed messages; reports the first differing word and scale. A NaN
 * scale (a block holding an infinity, once the error feedback has subtracted it) equals a NaN
 * scale: x86 and the GPU give NaNs different payloads (seen on an H100), as in
 * expect_floats_equal below. */
static void expect_packed_equal(const void *want, const void *got, size_t n, size_t B,
                                const char *what)
{
    const uint32_t *wb = want, *gb = got;
    size_t bad_words = 0, first_word = 0;
    for (size_t w = 0; w < n / 32; w++)
        if (wb[w] != gb[w] && bad_words++ == 0) first_word = w;
    size_t bad_scales = 0, first_scale = 0, far_scales = 0;
    for (size_t b = 0; b < n / B; b++) {
        float ws = scale_at(want, n, b), gs = scale_at(got, n, b);
        if (memcmp(&ws, &gs, sizeof ws) != 0 && !(isnan(ws) && isnan(gs))) {
            if (bad_scales++ == 0) first_scale = b;
            if (!(fabsf(ws - gs) <= 1e-7f * fabsf(ws))) far_scales++;
        }
    }
    if (bad_words || bad_scales) {
        print_error("%s: %zu of %zu sign words differ (first %zu: cpu %08x gpu %08x); %zu of %zu "
                    "scales differ (%zu by more than 1e-7 relative; first block %zu: cpu %.9g "
                    "gpu %.9g)\n",
                    what, bad_words, n / 32, first_word, bad_words ? wb[first_word] : 0,
                    bad_words ? gb[first_word] : 0, bad_scales, n / B, far_scales, first_scale,
                    scale_at(want, n, first_scale), scale_at(got, n, first_scale));
        fail();
    }
}

/* Bitwise comparison of float arrays; NaNs compare equal to NaNs (their payloads differ
 * between x86 and the GPU). */
static void expect_floats_equal(const float *want, const float *got, size_t n, const char *what)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&want[i], &got[i], sizeof(float)) == 0) continue;
        if (isnan(want[i]) && isnan(got[i])) continue;
        if (bad++ == 0) first = i;
    }
    if (bad) {
        print_error("%s: %zu of %zu elements differ (first %zu: cpu %.9g gpu %.9g)\n", what, bad, n,
                    first, want[first], got[first]);
        fail();
    }
}

/* --- compression ------------------------------------------------------------------------- */

/* Compresses `steps` successive inputs of x_len elements (error feedback carried over) with
 * both kernels and compares everything after each step. x and the initial error come from
 * make_x / make_e (fill() when NULL). */
typedef void (*filler)(float *v, size_t n, size_t B, uint64_t seed);

static void compare_compress(size_t n, size_t B, size_t x_len, ob_scale_kind kind, int steps,
                             filler make_x, filler make_e, uint64_t seed)
{
    char what[160];
    size_t pb = ob_packed_bytes(n, B);
    float *x = malloc((x_len ? x_len : 1) * sizeof(float));
    float *e = malloc(n * sizeof(float)), *e_gpu = malloc(n * sizeof(float));
    void *packed = malloc(pb), *packed_gpu = malloc(pb);
    assert_non_null(x);
    assert_non_null(e);
    assert_non_null(e_gpu);
    assert_non_null(packed);
    assert_non_null(packed_gpu);
    if (make_e)
        make_e(e, n, B, seed + 1);
    else
        fill(e, n, seed + 1, 0.3f);
    float *de = dev_upload(e, n * sizeof(float));
    float *dx = dev_alloc((x_len ? x_len : 1) * sizeof(float));
    void *dpacked = dev_alloc(pb);
    ob_err err = {0};

    for (int t = 0; t < steps; t++) {
        if (make_x)
            make_x(x, x_len, B, seed + 10 + (uint64_t)t);
        else
            fill(x, x_len, seed + 10 + (uint64_t)t, 1.0f + (float)t);
        if (x_len && (ob_cuda_memcpy(dx, x, x_len * sizeof(float), NULL, &err) != OB_OK))
            fail_msg("%s", err.msg);

        ob_compress_ef(x_len ? x : NULL, x_len, e, n, B, kind, packed);
        ob_status st =
            ob_cuda_compress_ef(x_len ? dx : NULL, x_len, de, n, B, kind, dpacked, NULL, &err);
        if (st != OB_OK || ob_cuda_sync(NULL, &err) != OB_OK)
            fail_msg("ob_cuda_compress_ef(n=%zu B=%zu): %s", n, B, err.msg);
        dev_download(packed_gpu, dpacked, pb);
        dev_download(e_gpu, de, n * sizeof(float));

        snprintf(what, sizeof what, "compress n=%zu B=%zu x_len=%zu %s step %d: packed", n, B,
                 x_len, kind == OB_SCALE_L1 ? "l1" : "l2", t);
        expect_packed_equal(packed, packed_gpu, n, B, what);
        snprintf(what, sizeof what, "compress n=%zu B=%zu x_len=%zu %s step %d: error", n, B, x_len,
                 kind == OB_SCALE_L1 ? "l1" : "l2", t);
        expect_floats_equal(e, e_gpu, n, what);
    }
    ob_cuda_free(dx);
    ob_cuda_free(de);
    ob_cuda_free(dpacked);
    free(x);
    free(e);
    free(e_gpu);
    free(packed);
    free(packed_gpu);
}

/* Sizes: a handful of scale blocks, an odd count, and a few million elements (capped by
 * OB_CUDA_TEST_MAX_N). x_len: whole, one short, ragged inside a block, none. */
static void sweep(size_t B, ob_scale_kind kind)
{
    size_t big = (size_t)3 << 20;
    if (big > max_n) big = max_n;
    size_t counts[] = {1, 7, big / B > 8 ? big / B + 1 : 9};
    for (size_t ci = 0; ci < 3; ci++) {
        size_t n = counts[ci] * B;
        size_t lens[] = {n, n - 1, n > B ? n - B - 5 : n / 2 + 3, 0};
        for (size_t li = 0; li < 4; li++) {
            int steps = ci == 2 ? 2 : 3;
            compare_compress(n, B, lens[li], kind, steps, NULL, NULL, 1000 * B + 10 * ci + li);
        }
    }
}

static void test_compress_b32(void **state)
{
    sweep(32, OB_SCALE_L1);
    sweep(32, OB_SCALE_L2);
}

static void test_compress_b256(void **state)
{
    sweep(256, OB_SCALE_L1);
    sweep(256, OB_SCALE_L2);
}

static void test_compress_b2048(void **state)
{
    sweep(2048, OB_SCALE_L1);
    sweep(2048, OB_SCALE_L2);
}

static void test_compress_b8192(void **state)
{
    sweep(8192, OB_SCALE_L1);
    sweep(8192, OB_SCALE_L2);
}

/* Block sizes that exercise the other launch shapes: 3 and 9 words per block (partially used
 * warps), 33 words (an uneven split among warps) and 16384 (values not kept in registers). */
static void test_compress_odd_blocks(void **state)
{
    size_t Bs[] = {64, 96, 288, 1056, 16384};
    for (size_t i = 0; i < sizeof Bs / sizeof *Bs; i++)
        for (int k = 0; k < 2; k++) {
            ob_scale_kind kind = k ? OB_SCALE_L2 : OB_SCALE_L1;
            size_t n = Bs[i] * 37;
            compare_compress(n, Bs[i], n, kind, 2, NULL, NULL, 77 + i);
            compare_compress(n, Bs[i], n - Bs[i] / 2 - 1, kind, 2, NULL, NULL, 99 + i);
        }
}

/* Blocks whose scale sits on (or within a few double ulps of) a float rounding boundary, where
 * the GPU must fall back to the CPU's summation order. Magnitudes alternate between 2^k and
 * 2^k (1 + 2^-23), k varying per block, with random signs: the mean of |u| is then exactly the
 * midpoint 2^k (1 + 2^-24) between two floats (ties to even, whatever the order), and the
 * mean of u^2 lies 2^-48 above the square of that midpoint, closer than the rounding error of
 * the double sum. */
static void midpoint_block(float *v, size_t B, int k, ob_rng *rng)
{
    for (size_t i = 0; i < B; i++) {
        float mag = ldexpf((i % 2) ? 1.0f + 0x1p-23f : 1.0f, k);
        v[i] = (ob_rng_next(rng) & 1) ? mag : -mag;
    }
}

/* Candidates for order-sensitive blocks. l1: the midpoint pattern with a few aligned groups
 * (1, 1+2^-23, 1, 1+2^-23) replaced by (2+2^-22, 2, t1, t2) in random order: the same sum
 * plus two tiny t near the half-ulp of the block's double sum, which survive or vanish
 * depending on when they are added. l2: B/2 elements 1+2^-23 and B/2 ones at random places. */
static void candidate_block(float *v, size_t B, int l2, ob_rng *rng)
{
    int k = (int)ob_rng_below(rng, 5) - 2, lb = 0;
    while (((size_t)1 << lb) < B)
        lb++;
    if (!l2) {
        for (size_t i = 0; i < B; i++)
            v[i] = (i % 2) ? 1.0f + 0x1p-23f : 1.0f;
        size_t groups = 1 + ob_rng_below(rng, 4);
        for (size_t g = 0; g < groups; g++) {
            float grp[4] = {2.0f + 0x1p-22f, 2.0f, 0.0f, 0.0f};
            for (int q = 2; q < 4; q++)
                grp[q] = ldexpf(1.0f + ob_rng_uniform(rng), lb - 56 + (int)ob_rng_below(rng, 6));
            for (int q = 3; q > 0; q--) {
                int j = (int)ob_rng_below(rng, (uint64_t)q + 1);
                float t = grp[q];
                grp[q] = grp[j];
                grp[j] = t;
            }
            memcpy(v + ob_rng_below(rng, B / 4) * 4, grp, sizeof grp);
        }
    } else {
        for (size_t i = 0; i < B; i++)
            v[i] = (i < B / 2) ? 1.0f + 0x1p-23f : 1.0f;
        for (size_t i = B - 1; i > 0; i--) {
            size_t j = ob_rng_below(rng, i + 1);
            float t = v[i];
            v[i] = v[j];
            v[j] = t;
        }
    }
    for (size_t i = 0; i < B; i++)
        v[i] = ldexpf(v[i], k) * ((ob_rng_next(rng) & 1) ? 1.0f : -1.0f);
}

/* Other plausible summation orders of a block's norm: one accumulator, pairwise halving,
 * eight lanes over contiguous eighths, eight strided lanes combined in another order. */
static double norm_term(float v, int l2)
{
    return l2 ? (double)v * (double)v : fabs((double)v);
}

static double sum_pairwise(const float *v, size_t n, int l2)
{
    if (n == 1) return norm_term(v[0], l2);
    return sum_pairwise(v, n / 2, l2) + sum_pairwise(v + n / 2, n - n / 2, l2);
}

static int scale_depends_on_order(const float *v, size_t B, int l2, float cpu)
{
    double seq = 0.0, contig[8] = {0}, strided[8] = {0};
    for (size_t i = 0; i < B; i++) {
        seq += norm_term(v[i], l2);
        contig[i / (B / 8)] += norm_term(v[i], l2);
    }
    for (size_t i = 0; i < B; i += 8)
        for (int l = 0; l < 8; l++)
            strided[l] += norm_term(v[i + l], l2);
    double sums[4] = {seq, sum_pairwise(v, B, l2),
                      ((contig[0] + contig[1]) + (contig[2] + contig[3])) +
                          ((contig[4] + contig[5]) + (contig[6] + contig[7])),
                      ((strided[0] + strided[4]) + (strided[2] + strided[6])) +
                          ((strided[1] + strided[5]) + (strided[3] + strided[7]))};
    for (int q = 0; q < 4; q++) {
        double m = sums[q] / (double)B;
        float s = l2 ? (float)sqrt(m) : (float)m;
        if (s != cpu) return 1;
    }
    return 0;
}

/* Fills n / B blocks: even blocks with the midpoint pattern, odd blocks with the first of up
 * to 3000 candidates whose CPU scale differs from the scale of another summation order (there
 * the GPU is right only if it reproduces the CPU's order exactly). */
static size_t g_order_sensitive_blocks;

static void order_sensitive_values(float *v, size_t n, size_t B, uint64_t seed, int l2)
{
    ob_rng rng;
    ob_rng_seed(&rng, seed, 5);
    float *e = malloc(B * sizeof(float));
    void *packed = malloc(ob_packed_bytes(B, B));
    assert_non_null(e);
    assert_non_null(packed);
    for (size_t b = 0; b < n / B; b++) {
        float *blk = v + b * B;
        if (b % 2 == 0) {
            midpoint_block(blk, B, (int)(b % 5) - 2, &rng);
            continue;
        }
        for (int tries = 0; tries < 3000; tries++) {
            candidate_block(blk, B, l2, &rng);
            memset(e, 0, B * sizeof(float));
            ob_compress_ef(blk, B, e, B, B, l2 ? OB_SCALE_L2 : OB_SCALE_L1, packed);
            if (scale_depends_on_order(blk, B, l2, scale_at(packed, B, 0))) {
                g_order_sensitive_blocks++;
                break;
            }
        }
    }
    free(e);
    free(packed);
}

static void order_sensitive_l1(float *v, size_t n, size_t B, uint64_t seed)
{
    order_sensitive_values(v, n, B, seed, 0);
}

static void order_sensitive_l2(float *v, size_t n, size_t B, uint64_t seed)
{
    order_sensitive_values(v, n, B, seed, 1);
}

static void zero_values(float *v, size_t n, size_t B, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (i % 3 == 0) ? -0.0f : 0.0f;
}

static void test_compress_order_sensitive(void **state)
{
    size_t Bs[] = {32, 256, 2048, 8192};
    g_order_sensitive_blocks = 0;
    for (size_t i = 0; i < 4; i++) {
        size_t n = Bs[i] * 16;
        compare_compress(n, Bs[i], n, OB_SCALE_L1, 1, order_sensitive_l1, zero_values, 5);
        compare_compress(n, Bs[i], n, OB_SCALE_L2, 1, order_sensitive_l2, zero_values, 6);
    }
    /* L2 blocks of 32 have exact sums; every other kind finds its blocks within a few hundred
     * tries. Guard against a change that quietly makes the inputs order-insensitive. */
    print_message("order-sensitive blocks compared: %zu\n", g_order_sensitive_blocks);
    assert_true(g_order_sensitive_blocks >= 40);
}

/* All-zero blocks (scale 0, every sign +1, -0.0 errors kept) and blocks with an infinity
 * (scale inf, errors NaN) behave as on the CPU. */
static void special_values(float *v, size_t n, size_t B, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        size_t blk = i / B;
        v[i] = blk % 3 == 0 ? ((i % 2) ? -0.0f : 0.0f) : (float)((int)(i % 5) - 2);
        if (blk % 3 == 2 && i % B == 7) v[i] = (blk % 2) ? INFINITY : -INFINITY;
    }
}

static void test_compress_special_values(void **state)
{
    size_t n = 256 * 12;
    compare_compress(n, 256, n, OB_SCALE_L1, 2, special_values, zero_values, 1);
    compare_compress(n, 256, n, OB_SCALE_L2, 2, special_values, zero_values, 2);
    /* padding: the -0.0 errors beyond x_len must survive as -0.0 */
    compare_compress(n, 256, 1000, OB_SCALE_L1, 2, special_values, zero_values, 3);
}

/* --- decompression ------------------------------------------------------------------------ */

/* nsrc CPU-compressed messages; GPU decompress of message 0 and the GPU average of all, into
 * an aligned and a misaligned output (the float4 and the scalar kernel). */
static void compare_decode(size_t n, size_t B, size_t nsrc, uint64_t seed)
{
    char what[128];
    size_t pb = ob_packed_bytes(n, B);
    unsigned char *msgs = malloc(nsrc * pb);
    float *x = malloc(n * sizeof(float)), *e = malloc(n * sizeof(float));
    float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    assert_non_null(msgs);
    assert_non_null(x);
    assert_non_null(e);
    assert_non_null(want);
    assert_non_null(got);
    for (size_t i = 0; i < nsrc; i++) {
        fill(x, n, seed + i, 1.0f + (float)i);
        fill(e, n, seed + 100 + i, 0.1f);
        ob_compress_ef(x, n, e, n, B, (i % 2) ? OB_SCALE_L2 : OB_SCALE_L1, msgs + i * pb);
    }
    void *dmsgs = dev_upload(msgs, nsrc * pb);
    float *dout = dev_alloc((n + 4) * sizeof(float));
    ob_err err = {0};

    for (int misaligned = 0; misaligned < 2; misaligned++) {
        float *o = dout + misaligned;
        ob_decompress(msgs, n, B, want);
        if (ob_cuda_decompress(dmsgs, n, B, o, NULL, &err) != OB_OK)
            fail_msg("ob_cuda_decompress: %s", err.msg);
        dev_download(got, o, n * sizeof(float));
        snprintf(what, sizeof what, "decompress n=%zu B=%zu misaligned=%d", n, B, misaligned);
        expect_floats_equal(want, got, n, what);

        /* prefixes (the piece that straddles the vector's end): nothing written past them */
        size_t lens[] = {n - 1, n / 2 + 3, 5 < n ? 5 : n};
        for (size_t li = 0; li < 3; li++) {
            float *sent = malloc(n * sizeof(float));
            assert_non_null(sent);
            for (size_t k = 0; k < n; k++)
                sent[k] = 4321.0f;
            if (ob_cuda_memcpy(o, sent, n * sizeof(float), NULL, &err) != OB_OK ||
                ob_cuda_decompress_prefix(dmsgs, n, B, o, lens[li], NULL, &err) != OB_OK)
                fail_msg("ob_cuda_decompress_prefix: %s", err.msg);
            dev_download(got, o, n * sizeof(float));
            snprintf(what, sizeof what, "decompress_prefix n=%zu B=%zu len=%zu misaligned=%d", n, B,
                     lens[li], misaligned);
            expect_floats_equal(want, got, lens[li], what);
            expect_floats_equal(sent + lens[li], got + lens[li], n - lens[li], what);
            free(sent);
        }

        ob_decompress_average(msgs, nsrc, n, B, want);
        if (ob_cuda_decompress_average(dmsgs, nsrc, n, B, o, NULL, &err) != OB_OK)
            fail_msg("ob_cuda_decompress_average: %s", err.msg);
        dev_download(got, o, n * sizeof(float));
        snprintf(what, sizeof what, "decompress_average n=%zu B=%zu nsrc=%zu misaligned=%d", n, B,
                 nsrc, misaligned);
        expect_floats_equal(want, got, n, what);
    }
    ob_cuda_free(dmsgs);
    ob_cuda_free(dout);
    free(msgs);
    free(x);
    free(e);
    free(want);
    free(got);
}

static void test_decompress(void **state)
{
    size_t big = (size_t)1 << 21;
    if (big > max_n) big = max_n / 2048 * 2048;
    if (big < 2048) big = 2048;
    size_t Bs[] = {32, 256, 2048, 8192};
    for (size_t i = 0; i < 4; i++)
        compare_decode(Bs[i] * 5, Bs[i], 1, 3 + i);
    for (size_t nsrc = 1; nsrc <= 8; nsrc++)
        compare_decode(256 * 9, 256, nsrc, 40 + nsrc);
    compare_decode(big, 2048, 3, 7);
    compare_decode(big / 8192 > 0 ? big / 8192 * 8192 : 8192, 8192, 5, 8);
}

/* Averages of messages that differ in magnitude by 2^20: the sum order matters in float. */
static void test_decompress_average_order(void **state)
{
    size_t n = 1024, B = 32, nsrc = 6;
    size_t pb = ob_packed_bytes(n, B);
    unsigned char *msgs = malloc(nsrc * pb);
    float *x = malloc(n * sizeof(float)), *e = calloc(n, sizeof(float));
    float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    for (size_t i = 0; i < nsrc; i++) {
        fill(x, n, 900 + i, (i % 2) ? 1.0f : 0x1p20f);
        memset(e, 0, n * sizeof(float));
        ob_compress_ef(x, n, e, n, B, OB_SCALE_L1, msgs + i * pb);
    }
    void *dmsgs = dev_upload(msgs, nsrc * pb);
    float *dout = dev_alloc(n * sizeof(float));
    ob_err err = {0};
    ob_decompress_average(msgs, nsrc, n, B, want);
    assert_int_equal(ob_cuda_decompress_average(dmsgs, nsrc, n, B, dout, NULL, &err), OB_OK);
    dev_download(got, dout, n * sizeof(float));
    expect_floats_equal(want, got, n, "decompress_average, mixed magnitudes");
    ob_cuda_free(dmsgs);
    ob_cuda_free(dout);
    free(msgs);
    free(x);
    free(e);
    free(want);
    free(got);
}

/* The server's fused step (ob_cuda_average_compress_ef) against the CPU's two calls: the
 * average of nsrc messages into a buffer, then compress_ef of it with the server error; the
 * packed result and the error bit for bit over two rounds (the error carried). Messages from
 * make_x inputs (random when NULL), half of them l2-scaled. */
static void compare_average_compress(size_t n, size_t B, size_t nsrc, ob_scale_kind kind,
                                     filler make_x, uint64_t seed)
{
    char what[160];
    size_t pb = ob_packed_bytes(n, B);
    unsigned char *msgs = malloc(nsrc * pb), *want = malloc(pb), *got = malloc(pb);
    float *x = malloc(n * sizeof(float)), *ew = malloc(n * sizeof(float));
    float *avg = malloc(n * sizeof(float)), *e = malloc(n * sizeof(float));
    float *e_gpu = malloc(n * sizeof(float));
    assert_true(msgs && want && got && x && ew && avg && e && e_gpu);
    fill(e, n, seed + 7, 0.2f);
    float *de = dev_upload(e, n * sizeof(float));
    void *dmsgs = dev_alloc(nsrc * pb), *dout = dev_alloc(pb);
    ob_err err = {0};
    for (int t = 0; t < 2; t++) {
        for (size_t i = 0; i < nsrc; i++) {
            if (make_x)
                make_x(x, n, B, seed + 31 * (uint64_t)t + i);
            else
                fill(x, n, seed + 31 * (uint64_t)t + i, 1.0f + (float)i);
            fill(ew, n, seed + 500 + i, 0.1f);
            ob_compress_ef(x, n, ew, n, B, (i % 2) ? OB_SCALE_L2 : OB_SCALE_L1, msgs + i * pb);
        }
        if (ob_cuda_memcpy(dmsgs, msgs, nsrc * pb, NULL, &err) != OB_OK) fail_msg("%s", err.msg);
        ob_decompress_average(msgs, nsrc, n, B, avg);
        ob_compress_ef(avg, n, e, n, B, kind, want);
        if (ob_cuda_average_compress_ef(dmsgs, nsrc, de, n, B, kind, dout, NULL, &err) != OB_OK ||
            ob_cuda_sync(NULL, &err) != OB_OK)
            fail_msg("ob_cuda_average_compress_ef(n=%zu B=%zu nsrc=%zu): %s", n, B, nsrc, err.msg);
        dev_download(got, dout, pb);
        dev_download(e_gpu, de, n * sizeof(float));
        snprintf(what, sizeof what, "average_compress n=%zu B=%zu nsrc=%zu %s round %d: packed", n,
                 B, nsrc, kind == OB_SCALE_L1 ? "l1" : "l2", t);
        expect_packed_equal(want, got, n, B, what);
        snprintf(what, sizeof what, "average_compress n=%zu B=%zu nsrc=%zu %s round %d: error", n,
                 B, nsrc, kind == OB_SCALE_L1 ? "l1" : "l2", t);
        expect_floats_equal(e, e_gpu, n, what);
    }
    ob_cuda_free(de);
    ob_cuda_free(dmsgs);
    ob_cuda_free(dout);
    free(msgs);
    free(want);
    free(got);
    free(x);
    free(ew);
    free(avg);
    free(e);
    free(e_gpu);
}

static void test_average_compress(void **state)
{
    size_t Bs[] = {32, 64, 96, 256, 1056, 2048};
    size_t nsrcs[] = {1, 2, 3, 8};
    for (size_t i = 0; i < sizeof Bs / sizeof *Bs; i++)
        for (size_t k = 0; k < sizeof nsrcs / sizeof *nsrcs; k++) {
            compare_average_compress(Bs[i] * 13, Bs[i], nsrcs[k], OB_SCALE_L1, NULL, 10 * i + k);
            compare_average_compress(Bs[i] * 13, Bs[i], nsrcs[k], OB_SCALE_L2, NULL, 50 + i + k);
        }
    size_t big = (size_t)1 << 21;
    if (big > max_n) big = max_n / 2048 * 2048;
    if (big < 2048) big = 2048;
    compare_average_compress(big, 2048, 4, OB_SCALE_L1, NULL, 91);
    /* zero blocks, and infinities (a NaN or infinite average: the CPU-order fallback) */
    compare_average_compress(256 * 12, 256, 3, OB_SCALE_L1, special_values, 92);
    compare_average_compress(2048 * 6, 2048, 2, OB_SCALE_L2, special_values, 93);
}

/* The unit-sign message: error-feedback quantisation (values in and beyond [-1, 1], a NaN,
 * the padding beyond x_len), decoding and averaging, bit for bit as the CPU. */
static void compare_usign(size_t n, size_t x_len, size_t nsrc, uint64_t key, uint64_t pos0)
{
    ob_err err = {0};
    size_t nb = ob_usign_bytes(n);
    float *x = malloc(n * sizeof(float)), *e = malloc(n * sizeof(float));
    float *got = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    unsigned char *bits = malloc(nsrc * nb), *gbits = malloc(nsrc * nb);
    fill(x, n, key, 0.7f);
    fill(e, n, key + 1, 0.3f);
    if (n > 10) x[7] = NAN;
    float *dx = dev_upload(x, n * sizeof(float)), *de = dev_upload(e, n * sizeof(float));
    unsigned char *dbits = dev_alloc(nsrc * nb);
    for (size_t s = 0; s < nsrc; s++) {
        ob_usign_compress_ef(x, x_len, e, n, key + s, pos0, bits + s * nb);
        assert_int_equal(
            ob_cuda_usign_compress_ef(dx, x_len, de, n, key + s, pos0, dbits + s * nb, NULL, &err),
            OB_OK);
    }
    dev_download(gbits, dbits, nsrc * nb);
    assert_memory_equal(bits, gbits, nsrc * nb);
    dev_download(got, de, n * sizeof(float));
    expect_floats_equal(e, got, n, "usign: error");
    float *dout = dev_alloc(n * sizeof(float));
    ob_usign_average(bits, nsrc, n, want);
    assert_int_equal(ob_cuda_usign_average(dbits, nsrc, n, dout, NULL, &err), OB_OK);
    dev_download(got, dout, n * sizeof(float));
    expect_floats_equal(want, got, n, "usign: average");
    ob_usign_decode(bits, n, want);
    assert_int_equal(ob_cuda_usign_decode(dbits, n, dout, NULL, &err), OB_OK);
    dev_download(got, dout, n * sizeof(float));
    expect_floats_equal(want, got, n, "usign: decode");
    ob_cuda_free(dx);
    ob_cuda_free(de);
    ob_cuda_free(dbits);
    ob_cuda_free(dout);
    free(x), free(e), free(got), free(want), free(bits), free(gbits);
}

static void test_usign(void **state)
{
    (void)state;
    compare_usign(32, 32, 1, 1, 0);
    compare_usign(4096, 3000, 3, 2, 64);
    compare_usign(1 << 20, (1 << 20) - 5, 4, 3, ((uint64_t)1 << 32) - 4096);
}

/* --- memory helpers and argument checks ------------------------------------------------- */

static void test_memory_helpers(void **state)
{
    size_t n = 100003;
    float *host = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    fill(host, n, 1, 1.0f);
    float *a = dev_alloc(n * sizeof(float)), *b = dev_alloc(n * sizeof(float));
    /* zero-filled */
    dev_download(back, a, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        assert_true(back[i] == 0.0f && !signbit(back[i]));
    ob_err err = {0};
    assert_int_equal(ob_cuda_memcpy(a, host, n * sizeof(float), NULL, &err), OB_OK);
    assert_int_equal(ob_cuda_memcpy(b, a, n * sizeof(float), NULL, &err), OB_OK); /* d2d */
    assert_int_equal(ob_cuda_sync(NULL, &err), OB_OK);
    dev_download(back, b, n * sizeof(float));
    assert_memory_equal(back, host, n * sizeof(float));
    assert_int_equal(ob_cuda_memset0(b + 5, 10 * sizeof(float), NULL, &err), OB_OK);
    dev_download(back, b, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float want = (i >= 5 && i < 15) ? 0.0f : host[i];
        assert_memory_equal(&back[i], &want, sizeof(float));
    }
    void *z = (void *)1;
    assert_int_equal(ob_cuda_alloc(&z, 0, &err), OB_OK);
    assert_null(z);
    ob_cuda_free(NULL);
    ob_cuda_free(a);
    ob_cuda_free(b);
    free(host);
    free(back);
}

/* Argument errors are reported before any CUDA call, so they hold with or without a device.
 * Returns the number of failed checks (used without cmocka in the no-device path too). */
static int argument_errors(void)
{
    int failed = 0;
    ob_err err = {0};
    char dummy[64];
#define ARG_CHECK(call, needle)                                                                    \
    do {                                                                                           \
        ob_err_clear(&err);                                                                        \
        ob_status st_ = (call);                                                                    \
        if (st_ != OB_ERR_INVALID_ARG || !strstr(err.msg, needle)) {                               \
            fprintf(stderr,                                                                        \
                    "%s:%d: %s returned %d (%s), expected OB_ERR_INVALID_ARG naming "              \
                    "'%s'\n",                                                                      \
                    __FILE__, __LINE__, #call, (int)st_, err.msg, needle);                         \
            failed++;                                                                              \
        }                                                                                          \
    } while (0)
    ARG_CHECK(ob_cuda_compress_ef(NULL, 0, (float *)dummy, 96, 48, OB_SCALE_L1, dummy, NULL, &err),
              "block 48");
    ARG_CHECK(ob_cuda_compress_ef(NULL, 0, (float *)dummy, 100, 32, OB_SCALE_L1, dummy, NULL, &err),
              "not a multiple");
    ARG_CHECK(ob_cuda_compress_ef((float *)dummy, 65, (float *)dummy, 64, 32, OB_SCALE_L1, dummy,
                                  NULL, &err),
              "x_len");
    ARG_CHECK(ob_cuda_compress_ef(NULL, 3, (float *)dummy, 64, 32, OB_SCALE_L1, dummy, NULL, &err),
              "NULL");
    ARG_CHECK(ob_cuda_decompress(dummy, 64, 0, (float *)dummy, NULL, &err), "block 0");
    ARG_CHECK(ob_cuda_decompress_prefix(dummy, 64, 32, (float *)dummy, 65, NULL, &err), "out_len");
    ARG_CHECK(ob_cuda_decompress_average(dummy, 2, 64, 20, (float *)dummy, NULL, &err), "block 20");
    ARG_CHECK(ob_cuda_average_compress_ef(dummy, 2, (float *)dummy, 8192, 4096, OB_SCALE_L1, dummy,
                                          NULL, &err),
              "then compress_ef");
    ARG_CHECK(ob_cuda_average_compress_ef(dummy, 0, (float *)dummy, 64, 32, OB_SCALE_L1, dummy,
                                          NULL, &err),
              "no source messages");
#undef ARG_CHECK
    return failed;
}

static void test_argument_errors(void **state)
{
    assert_int_equal(argument_errors(), 0);
}

/* Without a device: no crash, a clean OB_ERR_CUDA that names the call and the source line. */
static int no_device_checks(void)
{
    int failed = argument_errors();
    void *p = (void *)1;
    ob_err err = {0};
    ob_status st = ob_cuda_alloc(&p, 1024, &err);
    if (st == OB_OK || p != NULL || !strstr(err.msg, "cudaMalloc") ||
        !strstr(err.msg, "compress_cuda.cu:")) {
        fprintf(stderr, "ob_cuda_alloc without a device: status %d, ptr %p, message '%s'\n",
                (int)st, p, err.msg);
        failed++;
    }
    if (ob_cuda_device_count() != 0) {
        fprintf(stderr, "ob_cuda_device_count() changed its answer\n");
        failed++;
    }
    return failed;
}

/* --- the fp16 and fp8 gradient messages ------------------------------------------------- */

/* Encode nsrc inputs on both, byte for byte; decode and a decoded message plus an input (the
 * ring's hop) on both, bit for bit. Inputs span 2^-149 .. 2^127 over blocks, with zeros, -0.0,
 * subnormals, and one block each holding a NaN and an infinity. fp16 through its own entry
 * points (ob_cuda_f16_*), fp8 through ob_cuda_fcode_*. */
static void compare_code(ob_float_code code, size_t n, size_t B, size_t x_len, size_t nsrc,
                         uint64_t seed)
{
    const char *name = code == OB_CODE_FP8 ? "fp8" : "fp16";
    int f16 = code == OB_CODE_FP16;
    size_t bytes = ob_fcode_bytes(code, n, B);
    float *x = malloc(nsrc * n * sizeof(float));
    unsigned char *want = malloc(nsrc * bytes), *got = malloc(nsrc * bytes);
    float *dec_w = malloc(n * sizeof(float)), *dec_g = malloc(n * sizeof(float));
    for (size_t i = 0; i < nsrc; i++) {
        float *xi = x + i * n;
        fill(xi, n, seed + i, 1.0f);
        for (size_t b = 0; b < n / B; b++) /* a magnitude per block */
            for (size_t k = b * B; k < (b + 1) * B; k++)
                xi[k] = ldexpf(xi[k], (int)((b * 37 + i * 11) % 260) - 140);
        if (n >= 4 * B) {
            xi[B + 3] = NAN;
            xi[2 * B + 5] = -INFINITY;
        }
        ob_fcode_encode(code, xi, x_len, n, B, want + i * bytes);
    }
    float *dx = dev_upload(x, nsrc * n * sizeof(float));
    unsigned char *dmsg = dev_alloc(nsrc * bytes);
    float *dout = dev_alloc(n * sizeof(float));
    ob_err err = {0};
    for (size_t i = 0; i < nsrc; i++) {
        ob_status st =
            f16 ? ob_cuda_f16_encode(dx + i * n, x_len, n, B, dmsg + i * bytes, NULL, &err)
                : ob_cuda_fcode_encode(code, dx + i * n, x_len, n, B, dmsg + i * bytes, NULL, &err);
        if (st != OB_OK) fail_msg("%s encode: %s", name, err.msg);
    }
    dev_download(got, dmsg, nsrc * bytes);
    for (size_t i = 0; i < nsrc * bytes; i++)
        if (want[i] != got[i])
            fail_msg("%s encode n=%zu B=%zu: byte %zu differs (%02x, CPU %02x)", name, n, B, i,
                     got[i], want[i]);
    ob_fcode_decode_add(code, want, n, B, NULL, 0, dec_w);
    ob_status st = f16 ? ob_cuda_f16_decode(dmsg, n, B, dout, NULL, &err)
                       : ob_cuda_fcode_decode_add(code, dmsg, n, B, NULL, 0, dout, NULL, &err);
    if (st != OB_OK) fail_msg("%s decode: %s", name, err.msg);
    dev_download(dec_g, dout, n * sizeof(float));
    expect_floats_equal(dec_w, dec_g, n, f16 ? "f16 decode" : "f8 decode");
    /* One ring hop: the last message decoded plus the first input, over x_len elements. */
    const unsigned char *last = want + (nsrc - 1) * bytes, *dlast = dmsg + (nsrc - 1) * bytes;
    ob_fcode_decode_add(code, last, n, B, x, x_len, dec_w);
    st = f16 ? ob_cuda_f16_decode_add(dlast, n, B, dx, x_len, dout, NULL, &err)
             : ob_cuda_fcode_decode_add(code, dlast, n, B, dx, x_len, dout, NULL, &err);
    if (st != OB_OK) fail_msg("%s decode_add: %s", name, err.msg);
    dev_download(dec_g, dout, n * sizeof(float));
    expect_floats_equal(dec_w, dec_g, n, f16 ? "f16 decode_add" : "f8 decode_add");
    ob_cuda_free(dx);
    ob_cuda_free(dmsg);
    ob_cuda_free(dout);
    free(x), free(want), free(got), free(dec_w), free(dec_g);
}

static void compare_codes(ob_float_code code)
{
    compare_code(code, 256, 256, 256, 1, 1);
    compare_code(code, 4096, 256, 4000, 4, 2);
    compare_code(code, 8 * 1024, 1024, 8 * 1024, 3, 3);
    compare_code(code, 64 * 256, 256, 64 * 256 - 1, 8, 4);
    if (max_n >= ((size_t)1 << 20))
        compare_code(code, (size_t)1 << 20, 256, ((size_t)1 << 20) - 77, 2, 5);
}

static void test_f16(void **state)
{
    (void)state;
    compare_codes(OB_CODE_FP16);
}

static void test_f8(void **state)
{
    (void)state;
    compare_codes(OB_CODE_FP8);
}

int main(void)
{
    const char *cap = getenv("OB_CUDA_TEST_MAX_N");
    if (cap && atol(cap) > 0) max_n = (size_t)atol(cap);

    if (ob_cuda_device_count() == 0) {
        int failed = no_device_checks();
        if (failed) {
            fprintf(stderr, "%d checks failed without a CUDA device\n", failed);
            return 1;
        }
        printf("no CUDA device: GPU kernel tests skipped\n");
        return SKIP_CODE;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test(test_memory_helpers),
        cmocka_unit_test(test_compress_b32),
        cmocka_unit_test(test_compress_b256),
        cmocka_unit_test(test_compress_b2048),
        cmocka_unit_test(test_compress_b8192),
        cmocka_unit_test(test_compress_odd_blocks),
        cmocka_unit_test(test_compress_order_sensitive),
        cmocka_unit_test(test_average_compress),
        cmocka_unit_test(test_compress_special_values),
        cmocka_unit_test(test_decompress),
        cmocka_unit_test(test_decompress_average_order),
        cmocka_unit_test(test_usign),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_f8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
