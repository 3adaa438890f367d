/* CPU codec of the fp16 and fp8 gradient messages (see onebit/compress.h for the layout): the
 * per-element arithmetic is src/f16_math.h, shared with the CUDA kernels. */
#include "onebit/compress.h"

#include "f16_math.h"
#include "internal.h"

#include <string.h>

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

/* One block's codes: ob__f8_encode_elem or ob__f16_encode_elem of x[k] with shift s. */
OB__CLONES("avx512f", "avx2", "default")
static void encode_block(ob_float_code code, void *dst, const float *x, size_t n, int s)
{
    float f[2];
    ob__f16_scale_factors(s, f);
    if (code == OB_CODE_FP8) {
        uint8_t *c = dst;
        for (size_t k = 0; k < n; k++)
            c[k] = ob__f8_from_f32(OB__F16_MUL(OB__F16_MUL(x[k], f[0]), f[1]));
    } else {
        uint16_t *h = dst;
        for (size_t k = 0; k < n; k++)
            h[k] = ob__f16_from_f32(OB__F16_MUL(OB__F16_MUL(x[k], f[0]), f[1]));
    }
}

void ob_fcode_encode(ob_float_code code, const float *x, size_t x_len, size_t n, size_t block,
                     void *msg)
{
    size_t bytes = code_bytes(code);
    int16_t *shifts = msg_shifts(code, msg, n);
    for (size_t b = 0; b < n / block; b++) {
        size_t lo = b * block;
        size_t valid = x_len > lo ? (x_len - lo < block ? x_len - lo : block) : 0;
        int nonfinite = 0;
        float maxabs = block_maxabs(x + lo, valid, &nonfinite);
        int s = code == OB_CODE_FP8 ? ob__f8_shift(maxabs, nonfinite)
                                    : ob__f16_shift(maxabs, nonfinite);
        shifts[b] = (int16_t)s;
        unsigned char *codes = (unsigned char *)msg + lo * bytes;
        encode_block(code, codes, x + lo, valid, s);
        memset(codes + valid * bytes, 0, (block - valid) * bytes);
    }
}

void ob_f16_encode(const float *x, size_t x_len, size_t n, size_t block, void *msg)
{
    ob_fcode_encode(OB_CODE_FP16, x, x_len, n, block, msg);
}

/* One block: out[k] = ob__f8_decode_elem or ob__f16_decode_elem of code k with shift s, plus
 * x[k] for k < add; out may be x. fp8 codes are looked up in value (the 256 codes' values). */
OB__CLONES("avx512f", "avx2", "default")
static void decode_block(ob_float_code code, float *out, const void *codes, size_t n, int s,
                         const float *value, const float *x, size_t add)
{
    float f[2];
    ob__f16_unscale_factors(s, f);
    if (code == OB_CODE_FP8) {
        const uint8_t *c = codes;
        for (size_t k = 0; k < add; k++)
            out[k] = OB__F16_ADD(OB__F16_MUL(OB__F16_MUL(value[c[k]], f[0]), f[1]), x[k]);
        for (size_t k = add; k < n; k++)
            out[k] = OB__F16_MUL(OB__F16_MUL(value[c[k]], f[0]), f[1]);
    } else {
        const uint16_t *h = codes;
        for (size_t k = 0; k < add; k++)
            out[k] =
                OB__F16_ADD(OB__F16_MUL(OB__F16_MUL(ob__f32_from_f16(h[k]), f[0]), f[1]), x[k]);
        for (size_t k = add; k < n; k++)
            out[k] = OB__F16_MUL(OB__F16_MUL(ob__f32_from_f16(h[k]), f[0]), f[1]);
    }
}

void ob_fcode_decode_add(ob_float_code code, const void *msg, size_t n, size_t block,
                         const float *x, size_t x_len, float *out)
{
    size_t bytes = code_bytes(code);
    const int16_t *shifts = msg_shifts(code, (void *)msg, n);
    float value[256]; /* the fp8 codes' values (ob__f32_from_f8, exact) */
    if (code == OB_CODE_FP8)
        for (unsigned i = 0; i < 256; i++)
            value[i] = ob__f32_from_f8((uint8_t)i);
    for (size_t lo = 0; lo < n; lo += block) {
        size_t len = n - lo < block ? n - lo : block;
        size_t add = x_len > lo ? (x_len - lo < len ? x_len - lo : len) : 0;
        decode_block(code, out + lo, (const unsigned char *)msg + lo * bytes, len,
                     shifts[lo / block], value, x ? x + lo : NULL, add);
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
