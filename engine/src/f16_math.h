/* The per-element arithmetic of the fp16 gradient message (onebit/compress.h, "fp16 with block
 * shifts"), written once and compiled twice: by the C compiler for the CPU codec
 * (src/compress.c) and by nvcc for the CUDA kernels (cuda/compress_cuda.cu), so that both
 * encode, decode and sum bitwise alike. The conversions are integer operations on the IEEE
 * encodings (no dependence on a compiler's half type or the hardware's conversion
 * instructions); the scaling multiplies by powers of two, exact wherever the result is a
 * normal float and rounded once (IEEE, on both) elsewhere. Private to the engine. */
#ifndef ONEBIT_F16_MATH_H
#define ONEBIT_F16_MATH_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define OB__F16 static __host__ __device__ __forceinline__
#else
#define OB__F16 static inline
#endif

OB__F16 uint32_t ob__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

OB__F16 float ob__f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f as IEEE binary16, rounded to nearest, ties to even: values from 65520 up become infinity,
 * NaN stays NaN (the quiet NaN 0x7e00 with f's sign), subnormal halves are produced exactly. */
OB__F16 uint16_t ob__f16_from_f32(float f)
{
    uint32_t x = ob__f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: rounds to infinity */
    if (ax >= 0x38800000u) {                                  /* >= 2^-14: a normal half */
        uint32_t m = ax & 0x7fffffu;
        uint32_t h = ((((ax >> 23) - 112u) << 10) | (m >> 13));
        uint32_t rem = m & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry moves the exponent */
        return (uint16_t)(sign | h);
    }
    if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25: to (signed) zero */
    /* A subnormal half: the value in units of 2^-24 is m * 2^(e - 126), e the biased exponent. */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14 .. 24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++; /* 1024 is the smallest normal half */
    return (uint16_t)(sign | h);
}

/* The binary16 h as a float (exact). */
OB__F16 float ob__f32_from_f16(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t m = (uint32_t)h & 0x3ffu;
    if (e == 0x1fu) return ob__f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e != 0u) return ob__f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0u) return ob__f32_from_bits(sign);
    /* Subnormal: m * 2^-24, normalised into a float. */
    uint32_t k = 0;
    while (!(m & 0x400u)) {
        m <<= 1;
        k++;
    }
    return ob__f32_from_bits(sign | ((113u - k) << 23) | ((m & 0x3ffu) << 13));
}

/* The shift of a block whose largest |x| is maxabs: the power of two that brings maxabs into
 * [2^14, 2^15), so that every element of the block is a finite half after scaling and the
 * largest keeps 11 significant bits. 0 for an all-zero block; 0 too when the block holds a
 * NaN or an infinity (nonfinite != 0): it then crosses as half NaN/infinity and the receiver
 * sees it. */
OB__F16 int ob__f16_shift(float maxabs, int nonfinite)
{
    if (nonfinite || !(maxabs > 0.0f)) return 0;
    int e = 0;
    (void)frexpf(maxabs, &e); /* maxabs = f 2^e, f in [0.5, 1) */
    return 15 - e;
}

/* Products that nvcc must not fuse into a neighbouring addition (the sum of decoded values),
 * and 2^s as a float for s in [-126, 127]. */
#if defined(__CUDA_ARCH__)
#define OB__F16_MUL(a, b) __fmul_rn((a), (b))
#define OB__F16_ADD(a, b) __fadd_rn((a), (b))
#else
#define OB__F16_MUL(a, b) ((a) * (b))
#define OB__F16_ADD(a, b) ((a) + (b))
#endif

OB__F16 float ob__f16_pow2(int s)
{
    return ob__f32_from_bits((uint32_t)(s + 127) << 23);
}

/* One element: x 2^shift rounded to a half. shift is at most 163 (the smallest subnormal
 * float's block) and at least -113: 2^shift in one factor when it is a float, else 2^127 first
 * (exact: x < 2^-112 in such a block) and the rest after, so the product is rounded once. */
OB__F16 uint16_t ob__f16_encode_elem(float x, int shift)
{
    float y = shift > 127
                  ? OB__F16_MUL(OB__F16_MUL(x, ob__f16_pow2(127)), ob__f16_pow2(shift - 127))
                  : OB__F16_MUL(x, ob__f16_pow2(shift));
    return ob__f16_from_f32(y);
}

/* h 2^-shift, rounded once: beyond 2^-126 the first factor (exact: h has 11 significant bits
 * and h 2^(126 - shift) >= 2^-62) and then 2^-126. */
OB__F16 float ob__f16_decode_elem(uint16_t h, int shift)
{
    float f = ob__f32_from_f16(h);
    if (shift > 126)
        return OB__F16_MUL(OB__F16_MUL(f, ob__f16_pow2(126 - shift)), ob__f16_pow2(-126));
    return OB__F16_MUL(f, ob__f16_pow2(-shift));
}

/* |x| and whether x is NaN or infinite, for the block maximum. */
OB__F16 int ob__f16_nonfinite(float x)
{
    return !(fabsf(x) <= FLT_MAX);
}

#endif /* ONEBIT_F16_MATH_H */
