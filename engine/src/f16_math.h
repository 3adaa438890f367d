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
 * NaN stays NaN (the quiet NaN 0x7e00 with f's sign), subnormal halves are produced exactly.
 * Without branches, as ob__f8_from_f32 (identical to the branching form on all 2^32 inputs). */
OB__F16 uint16_t ob__f16_from_f32(float f)
{
    uint32_t x = ob__f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    uint32_t m = ax & 0x7fffffu;
    uint32_t e = ax >> 23;
    /* [2^-14, 65520): a normal half (unsigned wrap-around below, where it is not selected). */
    uint32_t hn = ((e - 112u) << 10) | (m >> 13);
    uint32_t rn = m & 0x1fffu;
    hn += (uint32_t)(rn > 0x1000u) | ((uint32_t)(rn == 0x1000u) & hn); /* carries into e */
    /* (2^-25, 2^-14): a subnormal, the value in units of 2^-24 is m * 2^(e - 126); the shift is
     * 14 .. 24 there and clamped into that range elsewhere. */
    uint32_t sh = e > 112u ? 14u : e < 102u ? 24u : 126u - e;
    uint32_t ms = m | 0x800000u;
    uint32_t hs = ms >> sh;
    uint32_t rs = ms & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    hs += (uint32_t)(rs > half) | ((uint32_t)(rs == half) & hs); /* 1024 is the smallest normal */
    uint32_t special = ax > 0x7f800000u ? 0x7e00u : 0x7c00u;     /* NaN; infinity, or >= 65520 */
    uint32_t h = ax >= 0x477ff000u ? special : ax >= 0x38800000u ? hn : ax <= 0x33000000u ? 0u : hs;
    return (uint16_t)(sign | h);
}

/* The binary16 h as a float (exact); a subnormal half m 2^-24 through the exact product of m
 * and 2^-24. Without branches. */
OB__F16 float ob__f32_from_f16(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t m = (uint32_t)h & 0x3ffu;
    uint32_t normal = ((e + 112u) << 23) | (m << 13);
    uint32_t special = 0x7f800000u | (m << 13);
    uint32_t sub = ob__f32_bits((float)m * 5.9604644775390625e-8f); /* 2^-24: exact */
    return ob__f32_from_bits(sign | (e == 0x1fu ? special : e != 0u ? normal : sub));
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
 * (exact: x < 2^-112 in such a block) and the rest after, so the product is rounded once. The
 * factors come as a pair whose second is 1 (an exact product) in the first case, so that the CPU
 * codec takes them out of a block's loop and the loop vectorises. */
OB__F16 void ob__f16_scale_factors(int shift, float f[2])
{
    f[0] = ob__f16_pow2(shift > 127 ? 127 : shift);
    f[1] = shift > 127 ? ob__f16_pow2(shift - 127) : 1.0f;
}

OB__F16 float ob__f16_scale(float x, int shift)
{
    float f[2];
    ob__f16_scale_factors(shift, f);
    return OB__F16_MUL(OB__F16_MUL(x, f[0]), f[1]);
}

OB__F16 uint16_t ob__f16_encode_elem(float x, int shift)
{
    return ob__f16_from_f32(ob__f16_scale(x, shift));
}

/* h 2^-shift, rounded once: beyond 2^-126 the first factor (exact: h has 11 significant bits
 * and h 2^(126 - shift) >= 2^-62) and then 2^-126. The factors as a pair, as above. */
OB__F16 void ob__f16_unscale_factors(int shift, float f[2])
{
    f[0] = ob__f16_pow2(shift > 126 ? 126 - shift : -shift);
    f[1] = shift > 126 ? ob__f16_pow2(-126) : 1.0f;
}

OB__F16 float ob__f16_unscale(float f, int shift)
{
    float k[2];
    ob__f16_unscale_factors(shift, k);
    return OB__F16_MUL(OB__F16_MUL(f, k[0]), k[1]);
}

OB__F16 float ob__f16_decode_elem(uint16_t h, int shift)
{
    return ob__f16_unscale(ob__f32_from_f16(h), shift);
}

/* --- fp8 (E4M3): one sign bit, four exponent bits (bias 7), three mantissa bits, no infinity;
 * S.1111.111 is NaN. The largest finite value is 448, the smallest normal 2^-6, subnormals go
 * down to 2^-9. */

/* f as E4M3, rounded to nearest, ties to even: finite values beyond 448 saturate to 448 (only
 * a block that holds a non-finite value, whose shift is 0, has any), NaN and infinity become
 * NaN with f's sign. Written without branches (every case computed, one selected), so that the
 * CPU codec's loops vectorise; an exhaustive comparison over all 2^32 inputs with the branching
 * form it replaced found no difference (docs/peers/README.md, 2026-11-26). */
OB__F16 uint8_t ob__f8_from_f32(float f)
{
    uint32_t x = ob__f32_bits(f);
    uint32_t sign = (x >> 24) & 0x80u;
    uint32_t ax = x & 0x7fffffffu;
    uint32_t m = ax & 0x7fffffu;
    uint32_t e = ax >> 23;
    /* >= 2^-6: a normal E4M3 (unsigned wrap-around below, where it is not selected). */
    uint32_t hn = ((e - 120u) << 3) | (m >> 20);
    uint32_t rn = m & 0xfffffu;
    hn += (uint32_t)(rn > 0x80000u) | ((uint32_t)(rn == 0x80000u) & hn); /* carries into e */
    hn = hn > 0x7eu ? 0x7eu : hn;
    /* (2^-10, 2^-6): a subnormal, the value in units of 2^-9 is m * 2^(e - 141); the shift is
     * 21 .. 24 there and clamped into that range elsewhere. */
    uint32_t sh = e > 120u ? 21u : e < 117u ? 24u : 141u - e;
    uint32_t ms = m | 0x800000u;
    uint32_t hs = ms >> sh;
    uint32_t rs = ms & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    hs += (uint32_t)(rs > half) | ((uint32_t)(rs == half) & hs); /* 8 is the smallest normal */
    uint32_t h = ax >= 0x7f800000u ? 0x7fu : ax >= 0x3c800000u ? hn : ax <= 0x3a800000u ? 0u : hs;
    return (uint8_t)(sign | h);
}

/* The E4M3 code c as a float (exact). */
OB__F16 float ob__f32_from_f8(uint8_t c)
{
    uint32_t sign = ((uint32_t)c & 0x80u) << 24;
    uint32_t e = ((uint32_t)c >> 3) & 0xfu;
    uint32_t m = (uint32_t)c & 0x7u;
    if ((c & 0x7fu) == 0x7fu) return ob__f32_from_bits(sign | 0x7fc00000u);
    if (e != 0u) return ob__f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
    if (m == 0u) return ob__f32_from_bits(sign);
    /* Subnormal: m * 2^-9, normalised into a float. */
    uint32_t k = 0;
    while (!(m & 0x8u)) {
        m <<= 1;
        k++;
    }
    return ob__f32_from_bits(sign | ((121u - k) << 23) | ((m & 0x7u) << 20));
}

/* The shift of an fp8 block whose largest |x| is maxabs: brings it into [2^7, 2^8), so that the
 * largest keeps 4 significant bits and values down to 2^-14 of it stay normal. 0 for an
 * all-zero or non-finite block, as for fp16. */
OB__F16 int ob__f8_shift(float maxabs, int nonfinite)
{
    if (nonfinite || !(maxabs > 0.0f)) return 0;
    int e = 0;
    (void)frexpf(maxabs, &e);
    return 8 - e;
}

/* x 2^shift rounded to E4M3 (the scaling of ob__f16_encode_elem; shift at most 156 here). */
OB__F16 uint8_t ob__f8_encode_elem(float x, int shift)
{
    return ob__f8_from_f32(ob__f16_scale(x, shift));
}

/* c 2^-shift, rounded once (as ob__f16_decode_elem: c has 4 significant bits and is at least
 * 2^-9, so the first factor is exact). */
OB__F16 float ob__f8_decode_elem(uint8_t c, int shift)
{
    return ob__f16_unscale(ob__f32_from_f8(c), shift);
}

/* |x| and whether x is NaN or infinite, for the block maximum. */
OB__F16 int ob__f16_nonfinite(float x)
{
    return !(fabsf(x) <= FLT_MAX);
}

#endif /* ONEBIT_F16_MATH_H */
