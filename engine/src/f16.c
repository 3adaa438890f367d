/* CPU codec of the fp16 and fp8 gradient messages (see onebit/compress.h for the layout): the
 * per-element arithmetic is src/f16_math.h, shared with the CUDA kernels. */
#include "onebit/compress.h"

#include "f16_math.h"
#include "internal.h"

/* Bytes of one element's code. */
static size_t code_bytes(ob_float_code code)
{
    return code == OB_CODE_FP8 ? sizeof(uint8_t) : sizeof(uint16_t);
}

size_t ob_fcode_bytes(ob_float_code code, size_t n, size_t block)
{
    return n * code_bytes(code) + n / block * sizeof(int16_t);
}

size_t ob_f16_bytes(size_t n, size_t block)
{
    return ob_fcode_bytes(OB_CODE_FP16, n, block);
}

static inline int16_t *msg_shifts(ob_float_code code, void *msg, size_t n)
{
    return (int16_t *)((char *)msg + n * code_bytes(code));
}

/* The largest |x| of a block and whether it holds a NaN or an infinity. */
OB__CLONES("avx512f", "avx2", "default")
static float block_maxabs(const float *x, size_t n, int *nonfinite)
{
    float maxabs = 0.0f;
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        float a = fabsf(x[k]);
        bad |= ob__f16_nonfinite(a);
        maxabs = a > maxabs ? a : maxabs;
    }
    *nonfinite = bad;
    return maxabs;
}

/* c[k] = ob__f8_encode_elem(x[k], s) for one block: its scaling (ob__f16_scale) with the
 * block's factors taken out of the loop, so that the loop vectorises. */
OB__CLONES("avx512f", "avx2", "default")
static void f8_encode_block(uint8_t *c, const float *x, size_t n, int s)
{
    if (s > 127) {
        float f1 = ob__f16_pow2(127), f2 = ob__f16_pow2(s - 127);
        for (size_t k = 0; k < n; k++)
            c[k] = ob__f8_from_f32(OB__F16_MUL(OB__F16_MUL(x[k], f1), f2));
    } else {
        float f = ob__f16_pow2(s);
        for (size_t k = 0; k < n; k++)
            c[k] = ob__f8_from_f32(OB__F16_MUL(x[k], f));
    }
}

/* The same for fp16 (ob__f16_encode_elem). */
OB__CLONES("avx512f", "avx2", "default")
static void f16_encode_block(uint16_t *h, const float *x, size_t n, int s)
{
    if (s > 127) {
        float f1 = ob__f16_pow2(127), f2 = ob__f16_pow2(s - 127);
        for (size_t k = 0; k < n; k++)
            h[k] = ob__f16_from_f32(OB__F16_MUL(OB__F16_MUL(x[k], f1), f2));
    } else {
        float f = ob__f16_pow2(s);
        for (size_t k = 0; k < n; k++)
            h[k] = ob__f16_from_f32(OB__F16_MUL(x[k], f));
    }
}

void ob_fcode_encode(ob_float_code code, const float *x, size_t x_len, size_t n, size_t block,
                     void *msg)
{
    uint16_t *h = msg;
    uint8_t *c = msg;
    int16_t *shifts = msg_shifts(code, msg, n);
    for (size_t b = 0; b < n / block; b++) {
        size_t lo = b * block;
        size_t valid = x_len > lo ? (x_len - lo < block ? x_len - lo : block) : 0;
        int nonfinite = 0;
        float maxabs = block_maxabs(x + lo, valid, &nonfinite);
        if (code == OB_CODE_FP8) {
            int s = ob__f8_shift(maxabs, nonfinite);
            shifts[b] = (int16_t)s;
            f8_encode_block(c + lo, x + lo, valid, s);
            for (size_t k = valid; k < block; k++)
                c[lo + k] = 0;
        } else {
            int s = ob__f16_shift(maxabs, nonfinite);
            shifts[b] = (int16_t)s;
            f16_encode_block(h + lo, x + lo, valid, s);
            for (size_t k = valid; k < block; k++)
                h[lo + k] = 0;
        }
    }
}

void ob_f16_encode(const float *x, size_t x_len, size_t n, size_t block, void *msg)
{
    ob_fcode_encode(OB_CODE_FP16, x, x_len, n, block, msg);
}

/* out[k] = ob__f8_decode_elem(c[k], s) (+ x[k] for k < add) for one block; out may be x. */
OB__CLONES("avx512f", "avx2", "default")
static void f8_decode_block(float *out, const uint8_t *c, size_t n, int s, const float *value,
                            const float *x, size_t add)
{
    /* ob__f16_unscale's factors: two beyond 2^-126, one elsewhere. */
    float f1 = s > 126 ? ob__f16_pow2(126 - s) : ob__f16_pow2(-s);
    if (s > 126) {
        float f2 = ob__f16_pow2(-126);
        for (size_t k = 0; k < add; k++)
            out[k] = OB__F16_ADD(OB__F16_MUL(OB__F16_MUL(value[c[k]], f1), f2), x[k]);
        for (size_t k = add; k < n; k++)
            out[k] = OB__F16_MUL(OB__F16_MUL(value[c[k]], f1), f2);
    } else {
        for (size_t k = 0; k < add; k++)
            out[k] = OB__F16_ADD(OB__F16_MUL(value[c[k]], f1), x[k]);
        for (size_t k = add; k < n; k++)
            out[k] = OB__F16_MUL(value[c[k]], f1);
    }
}

/* The same for fp16 (ob__f16_decode_elem). */
OB__CLONES("avx512f", "avx2", "default")
static void f16_decode_block(float *out, const uint16_t *h, size_t n, int s, const float *x,
                             size_t add)
{
    float f1 = s > 126 ? ob__f16_pow2(126 - s) : ob__f16_pow2(-s);
    if (s > 126) {
        float f2 = ob__f16_pow2(-126);
        for (size_t k = 0; k < add; k++)
            out[k] = OB__F16_ADD(OB__F16_MUL(OB__F16_MUL(ob__f32_from_f16(h[k]), f1), f2), x[k]);
        for (size_t k = add; k < n; k++)
            out[k] = OB__F16_MUL(OB__F16_MUL(ob__f32_from_f16(h[k]), f1), f2);
    } else {
        for (size_t k = 0; k < add; k++)
            out[k] = OB__F16_ADD(OB__F16_MUL(ob__f32_from_f16(h[k]), f1), x[k]);
        for (size_t k = add; k < n; k++)
            out[k] = OB__F16_MUL(ob__f32_from_f16(h[k]), f1);
    }
}

void ob_fcode_decode_add(ob_float_code code, const void *msg, size_t n, size_t block,
                         const float *x, size_t x_len, float *out)
{
    const uint16_t *h = msg;
    const uint8_t *c = msg;
    const int16_t *shifts = msg_shifts(code, (void *)msg, n);
    if (code == OB_CODE_FP8) {
        /* The 256 codes' values (ob__f32_from_f8, exact), then per block the scaling of
         * ob__f8_decode_elem with its factors out of the loop. */
        float value[256];
        for (unsigned i = 0; i < 256; i++)
            value[i] = ob__f32_from_f8((uint8_t)i);
        for (size_t lo = 0; lo < n; lo += block) {
            size_t len = n - lo < block ? n - lo : block;
            size_t add = x_len > lo ? (x_len - lo < len ? x_len - lo : len) : 0;
            f8_decode_block(out + lo, c + lo, len, shifts[lo / block], value, x ? x + lo : NULL,
                            add);
        }
        return;
    }
    for (size_t lo = 0; lo < n; lo += block) {
        size_t len = n - lo < block ? n - lo : block;
        size_t add = x_len > lo ? (x_len - lo < len ? x_len - lo : len) : 0;
        f16_decode_block(out + lo, h + lo, len, shifts[lo / block], x ? x + lo : NULL, add);
    }
}

void ob_f16_decode_add(const void *msg, size_t n, size_t block, const float *x, size_t x_len,
                       float *out)
{
    ob_fcode_decode_add(OB_CODE_FP16, msg, n, block, x, x_len, out);
}

void ob_f16_decode(const void *msg, size_t n, size_t block, float *out)
{
    ob_fcode_decode_add(OB_CODE_FP16, msg, n, block, NULL, 0, out);
}
