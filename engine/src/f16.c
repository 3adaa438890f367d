/* CPU codec of the fp16 and fp8 gradient messages (see onebit/compress.h for the layout): the
 * per-element arithmetic is src/f16_math.h, shared with the CUDA kernels. */
#include "onebit/compress.h"

#include "f16_math.h"

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

void ob_fcode_encode(ob_float_code code, const float *x, size_t x_len, size_t n, size_t block,
                     void *msg)
{
    uint16_t *h = msg;
    uint8_t *c = msg;
    int16_t *shifts = msg_shifts(code, msg, n);
    for (size_t b = 0; b < n / block; b++) {
        size_t lo = b * block;
        size_t valid = x_len > lo ? (x_len - lo < block ? x_len - lo : block) : 0;
        float maxabs = 0.0f;
        int nonfinite = 0;
        for (size_t k = 0; k < valid; k++) {
            float a = fabsf(x[lo + k]);
            nonfinite |= ob__f16_nonfinite(a);
            maxabs = a > maxabs ? a : maxabs;
        }
        if (code == OB_CODE_FP8) {
            int s = ob__f8_shift(maxabs, nonfinite);
            shifts[b] = (int16_t)s;
            for (size_t k = 0; k < valid; k++)
                c[lo + k] = ob__f8_encode_elem(x[lo + k], s);
            for (size_t k = valid; k < block; k++)
                c[lo + k] = 0;
        } else {
            int s = ob__f16_shift(maxabs, nonfinite);
            shifts[b] = (int16_t)s;
            for (size_t k = 0; k < valid; k++)
                h[lo + k] = ob__f16_encode_elem(x[lo + k], s);
            for (size_t k = valid; k < block; k++)
                h[lo + k] = 0;
        }
    }
}

void ob_f16_encode(const float *x, size_t x_len, size_t n, size_t block, void *msg)
{
    ob_fcode_encode(OB_CODE_FP16, x, x_len, n, block, msg);
}

void ob_fcode_decode_add(ob_float_code code, const void *msg, size_t n, size_t block,
                         const float *x, size_t x_len, float *out)
{
    const uint16_t *h = msg;
    const uint8_t *c = msg;
    const int16_t *shifts = msg_shifts(code, (void *)msg, n);
    if (code == OB_CODE_FP8) {
        for (size_t k = 0; k < n; k++) {
            float v = ob__f8_decode_elem(c[k], shifts[k / block]);
            out[k] = k < x_len ? OB__F16_ADD(v, x[k]) : v;
        }
        return;
    }
    for (size_t k = 0; k < n; k++) {
        float v = ob__f16_decode_elem(h[k], shifts[k / block]);
        out[k] = k < x_len ? OB__F16_ADD(v, x[k]) : v;
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
