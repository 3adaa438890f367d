/* The per-element arithmetic of the unit-sign message (onebit/compress.h, "stochastic unit
 * signs"), written once and compiled twice: by the C compiler for the CPU kernels
 * (src/compress.c) and by nvcc for the CUDA ones (cuda/usign_cuda.cu), so that both draw the
 * same numbers and quantise to the same bits. Integer arithmetic and one exact float
 * comparison: nothing here depends on rounding modes or contraction. Private to the engine. */
#ifndef ONEBIT_USIGN_MATH_H
#define ONEBIT_USIGN_MATH_H

#include <stdint.h>

#if defined(__CUDACC__)
#define OB__UHD static __host__ __device__ __forceinline__
#else
#define OB__UHD static inline
#endif

/* A 64-bit finaliser (splitmix64's): every input bit reaches every output bit. For keys. */
OB__UHD uint64_t ob__usign_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The draw of position pos under key: a float t uniform on the 2^24 points k 2^-23 - 1,
 * k = 0 .. 2^24 - 1, of [-1, 1) (exact: |k - 2^23| <= 2^23 fits a float's significand).
 * A 32-bit hash ("lowbias32": two multiplies) of ((pos mod 2^32) + base) ^ mask, where base and
 * mask come from the key and the high bits of pos (ob__usign_base, ob__usign_mask), so that
 * the CPU's loops run in 32-bit lanes; for a fixed key it is a bijection of the low 32 bits
 * of pos, so the 2^32 positions of one key never share an input. */
OB__UHD uint32_t ob__usign_base(uint64_t key)
{
    return (uint32_t)key;
}

OB__UHD uint32_t ob__usign_mask(uint64_t key, uint64_t pos)
{
    return (uint32_t)(key >> 32) ^ ((uint32_t)(pos >> 32) * 0x9e3779b9u);
}

OB__UHD float ob__usign_hash_draw(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    int32_t k = (int32_t)(x >> 8) - (1 << 23);
    return (float)k * 0x1p-23f;
}

OB__UHD float ob__usign_draw(uint64_t key, uint64_t pos)
{
    uint32_t x = ((uint32_t)pos + ob__usign_base(key)) ^ ob__usign_mask(key, pos);
    return ob__usign_hash_draw(x);
}

/* Q(u) on one element: 1 (+1) when the draw lies below u, else 0 (-1). P(+1) = (u + 1) / 2
 * within 2^-24 for u in [-1, 1], 1 above and 0 below; a NaN gives -1. */
OB__UHD uint32_t ob__usign_bit(float u, uint64_t key, uint64_t pos)
{
    return ob__usign_draw(key, pos) < u;
}

#endif /* ONEBIT_USIGN_MATH_H */
