/* CPU kernels of the 1-bit compression (see onebit/compress.h for the layout and contracts).
 *
 * Written for speed: each block of B elements is visited twice, the second time from L1 (a
 * 2048-float block is 8 KiB), so the buffers stream through memory once. Loops are branch-free
 * and shaped for the vectoriser; the hot ones are compiled for AVX2 as well as the baseline ISA
 * and picked at load time. Block scales are accumulated in double so that the scale is the
 * correctly rounded mean for all practical purposes, independent of summation order. */
#include "onebit/compress.h"

#include "internal.h"
#include "usign_math.h"

#include <math.h>
#include <string.h>

size_t ob_packed_bytes(size_t n, size_t block)
{
    return n / 32 * sizeof(uint32_t) + n / block * sizeof(float);
}

static inline uint32_t *packed_bits(void *packed)
{
    return (uint32_t *)packed;
}

static inline float *packed_scales(void *packed, size_t n)
{
    return (float *)((char *)packed + n / 32 * sizeof(uint32_t));
}

/* Sum of |u| (or u^2) over one block, in eight double lanes: vectorisable without
 * reassociating a single accumulator. B is a multiple of 32. */
OB__CLONES("avx2", "default")
static double block_norm(const float *u, size_t B, int l2)
{
    double acc[8] = {0};
    if (l2) {
        for (size_t i = 0; i < B; i += 8)
            for (int l = 0; l < 8; l++)
                acc[l] += (double)u[i + l] * (double)u[i + l];
    } else {
        for (size_t i = 0; i < B; i += 8)
            for (int l = 0; l < 8; l++)
                acc[l] += fabs((double)u[i + l]);
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* e[i] += x[i] for the nx <= B elements of the block that lie inside x. */
OB__CLONES("avx2", "default")
static void add_into(float *e, const float *x, size_t nx)
{
    for (size_t i = 0; i < nx; i++)
        e[i] = x[i] + e[i];
}

/* Packs the signs of u (held in e) into words and replaces e by u - s*sign(u). */
OB__CLONES("avx2", "default")
static void quantize_block(float *e, size_t B, float s, uint32_t *bits)
{
    for (size_t w = 0; w < B / 32; w++) {
        float *u = e + 32 * w;
        uint32_t word = 0;
        for (uint32_t k = 0; k < 32; k++) {
            uint32_t pos = u[k] >= 0.0f; /* true for +0 and -0: sign(0) = +1 */
            word |= pos << k;
            u[k] = u[k] - (pos ? s : -s);
        }
        bits[w] = word;
    }
}

void ob_compress_ef(const float *x, size_t x_len, float *e, size_t n, size_t block,
                    ob_scale_kind kind, void *packed)
{
    uint32_t *bits = packed_bits(packed);
    float *scales = packed_scales(packed, n);
    int l2 = kind == OB_SCALE_L2;
    for (size_t b = 0; b < n / block; b++) {
        size_t off = b * block;
        size_t nx = x_len > off ? x_len - off : 0;
        if (nx > block) nx = block;
        if (nx) add_into(e + off, x + off, nx); /* u = x + e, kept in e */
        double acc = block_norm(e + off, block, l2);
        float s = l2 ? (float)sqrt(acc / (double)block) : (float)(acc / (double)block);
        scales[b] = s;
        quantize_block(e + off, block, s, bits + off / 32);
    }
}

/* out[k] = s * sign(bit k) for one block. */
OB__CLONES("avx2", "default")
static void decode_block(const uint32_t *bits, float s, size_t B, float *out)
{
    for (size_t w = 0; w < B / 32; w++) {
        uint32_t word = bits[w];
        for (uint32_t k = 0; k < 32; k++)
            out[32 * w + k] = ((word >> k) & 1u) ? s : -s;
    }
}

/* out[k] += s * sign(bit k) for one block. */
OB__CLONES("avx2", "default")
static void accumulate_decoded_block(const uint32_t *bits, float s, size_t B, float *out)
{
    for (size_t w = 0; w < B / 32; w++) {
        uint32_t word = bits[w];
        for (uint32_t k = 0; k < 32; k++)
            out[32 * w + k] += ((word >> k) & 1u) ? s : -s;
    }
}

void ob_decompress(const void *packed, size_t n, size_t block, float *out)
{
    ob_decompress_prefix(packed, n, block, out, n);
}

void ob_decompress_prefix(const void *packed, size_t n, size_t block, float *out, size_t out_len)
{
    const uint32_t *bits = packed_bits((void *)packed);
    const float *scales = packed_scales((void *)packed, n);
    if (out_len > n) out_len = n;
    size_t full = out_len / block, lo = full * block;
    for (size_t b = 0; b < full; b++)
        decode_block(bits + b * block / 32, scales[b], block, out + b * block);
    for (size_t i = lo; i < out_len; i++) /* the block that straddles out_len */
        out[i] = ((bits[i / 32] >> (i % 32)) & 1u) ? scales[full] : -scales[full];
}

OB__CLONES("avx2", "default")
static void divide_block(float *out, size_t B, float nsrc)
{
    for (size_t i = 0; i < B; i++)
        out[i] = out[i] / nsrc;
}

void ob_decompress_average(const void *packed, size_t nsrc, size_t n, size_t block, float *out)
{
    size_t msg = ob_packed_bytes(n, block);
    const char *base = packed;
    /* Block-outer so each output block stays in L1 while every source is added to it, in
     * source order. */
    for (size_t b = 0; b < n / block; b++) {
        float *ob = out + b * block;
        for (size_t i = 0; i < nsrc; i++) {
            void *p = (void *)(base + i * msg);
            const uint32_t *bits = packed_bits(p) + b * block / 32;
            float s = packed_scales(p, n)[b];
            if (i == 0)
                decode_block(bits, s, block, ob);
            else
                accumulate_decoded_block(bits, s, block, ob);
        }
        divide_block(ob, block, (float)nsrc);
    }
}

void ob_sign_pack(const float *u, size_t n, uint32_t *bits)
{
    size_t words = (n + 31) / 32;
    for (size_t w = 0; w < words; w++) {
        uint32_t word = 0;
        size_t lim = n - 32 * w < 32 ? n - 32 * w : 32;
        for (size_t k = 0; k < lim; k++)
            word |= (uint32_t)(u[32 * w + k] >= 0.0f) << k;
        bits[w] = word;
    }
}

void ob_sign_unpack(const uint32_t *bits, size_t n, float *out)
{
    for (size_t k = 0; k < n; k++)
        out[k] = ((bits[k / 32] >> (k % 32)) & 1u) ? 1.0f : -1.0f;
}

/* --- stochastic unit signs ------------------------------------------------------------------ */

size_t ob_usign_bytes(size_t n)
{
    return n / 32 * sizeof(uint32_t);
}

uint64_t ob_usign_key(uint64_t seed, uint64_t round, uint64_t stream)
{
    uint64_t k = ob__usign_mix(seed + 0x6a09e667f3bcc909ull);
    k = ob__usign_mix(k ^ round);
    return ob__usign_mix(k + stream * 0x9e3779b97f4a7c15ull);
}

float ob_usign_draw(uint64_t key, uint64_t pos)
{
    return ob__usign_draw(key, pos);
}

/* One word of 32 elements at position pos (a multiple of 32, so the high bits of pos are the
 * same for all of them): e holds x + e on entry (u), the new error on exit. The draws are
 * ob__usign_draw's, in 32-bit lanes. */
OB__CLONES("avx2", "default")
static uint32_t usign_word(float *e, uint64_t key, uint64_t pos)
{
    const uint32_t base = (uint32_t)pos + ob__usign_base(key), mask = ob__usign_mask(key, pos);
    uint32_t b[32];
    for (uint32_t k = 0; k < 32; k++) {
        float u = e[k];
        b[k] = ob__usign_hash_draw((base + k) ^ mask) < u;
        e[k] = u - (b[k] ? 1.0f : -1.0f);
    }
    uint32_t word = 0;
    for (uint32_t k = 0; k < 32; k++)
        word |= b[k] << k;
    return word;
}

void ob_usign_compress_ef(const float *x, size_t x_len, float *e, size_t n, uint64_t key,
                          uint64_t pos0, void *bits)
{
    uint32_t *words = bits;
    if (x_len > 0) add_into(e, x, x_len); /* u = x + e, kept in e */
    for (size_t w = 0; w < n / 32; w++)
        words[w] = usign_word(e + 32 * w, key, pos0 + 32 * w);
}

/* out[k] = +-1 for one word. */
OB__CLONES("avx2", "default")
static void usign_word_decode(uint32_t word, float *out)
{
    for (uint32_t k = 0; k < 32; k++)
        out[k] = ((word >> k) & 1u) ? 1.0f : -1.0f;
}

void ob_usign_decode(const void *bits, size_t n, float *out)
{
    const uint32_t *words = bits;
    for (size_t w = 0; w < n / 32; w++)
        usign_word_decode(words[w], out + 32 * w);
}

/* out[k] += +-1 for one word. */
OB__CLONES("avx2", "default")
static void usign_accumulate(uint32_t word, float *out)
{
    for (uint32_t k = 0; k < 32; k++)
        out[k] += ((word >> k) & 1u) ? 1.0f : -1.0f;
}

void ob_usign_average(const void *bits, size_t nsrc, size_t n, float *out)
{
    const uint32_t *base = bits;
    size_t words = n / 32;
    memset(out, 0, n * sizeof *out); /* then a sum of +-1: exact in any order */
    for (size_t s = 0; s < nsrc; s++)
        for (size_t w = 0; w < words; w++)
            usign_accumulate(base[s * words + w], out + 32 * w);
    divide_block(out, n, (float)nsrc);
}
