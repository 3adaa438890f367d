/* CPU codec of the fp16 gradient message (see onebit/compress.h for the layout): the per-element
 * arithmetic is src/f16_math.h, shared with the CUDA kernels. */
#include "onebit/compress.h"

#include "f16_math.h"

size_t ob_f16_bytes(size_t n, size_t block)
{
    return n * sizeof(uint16_t) + n / block * sizeof(int16_t);
}

static inline int16_t *msg_shifts(void *msg, size_t n)
{
    return (int16_t *)((char *)msg + n * sizeof(uint16_t));
}

void ob_f16_encode(const float *x, size_t x_len, size_t n, size_t block, void *msg)
{
    uint16_t *h = msg;
    int16_t *shifts = msg_shifts(msg, n);
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
        int s = ob__f16_shift(maxabs, nonfinite);
        shifts[b] = (int16_t)s;
        for (size_t k = 0; k < valid; k++)
            h[lo + k] = ob__f16_encode_elem(x[lo + k], s);
        for (size_t k = valid; k < block; k++)
            h[lo + k] = 0;
    }
}

void ob_f16_decode_add(const void *msg, size_t n, size_t block, const float *x, size_t x_len,
                       float *out)
{
    const uint16_t *h = msg;
    const int16_t *shifts = msg_shifts((void *)msg, n);
    for (size_t k = 0; k < n; k++) {
        float v = ob__f16_decode_elem(h[k], shifts[k / block]);
        out[k] = k < x_len ? OB__F16_ADD(v, x[k]) : v;
    }
}

void ob_f16_decode(const void *msg, size_t n, size_t block, float *out)
{
    ob_f16_decode_add(msg, n, block, NULL, 0, out);
}
