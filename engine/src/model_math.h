/* Per-element arithmetic of the models that the CPU layers (model_layers.c) and the CUDA model
 * (cuda/model_cuda.cu) share, written once and compiled by both, in IEEE single precision
 * without contraction into fused multiply-adds, so that both round alike. Private to the
 * engine. */
#ifndef ONEBIT_MODEL_MATH_H
#define ONEBIT_MODEL_MATH_H

#include "f16_math.h" /* ob__f32_from_bits, OB__F16 (inline on the host and the device) */

#include <stdint.h>

#define OB_GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define OB_GELU_CUBE 0.044715f

/* e^x for x in [-87, 88], x clamped into it: n = round(x / ln 2), r = x - n ln 2 (in two parts,
 * n ln2_hi exact), e^r by its Taylor polynomial of degree 7 (|r| <= ln 2 / 2, truncation below
 * 6e-9 relative) and 2^n from the exponent bits. Within 2 ulp of e^x; no branch, no table, no
 * library call, so a loop of it vectorises. The clamp keeps 2^n a normal number: e^-87 is
 * 1.6e-38, e^88 1.7e38. NaN gives NaN. */
OB__F16 float ob__exp_clamped(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* 1.5 2^23 rounds */
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.98412698412698413e-4f; /* 1/7! */
    p = p * r + 1.38888888888888889e-3f;
    p = p * r + 8.33333333333333333e-3f;
    p = p * r + 4.16666666666666667e-2f;
    p = p * r + 1.66666666666666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    n = n == n ? n : 0.0f; /* NaN: p carries it; the exponent needs a number */
    return p * ob__f32_from_bits((uint32_t)((int32_t)n + 127) << 23);
}

/* GELU (tanh approximation) is 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3).
 * Since 0.5 (1 + tanh(u)) = sigmoid(2u), it is x * sigmoid(2u): one exponential instead of a
 * tanh. Past the clamp of ob__exp_clamped the sigmoid is 1 exactly (2u > 87) or below 6e-39. */
OB__F16 float ob__gelu_sigmoid(float x)
{
    float u = OB_GELU_SCALE * (x + OB_GELU_CUBE * x * x * x);
    return 1.0f / (1.0f + ob__exp_clamped(-2.0f * u));
}

OB__F16 float ob__gelu(float x)
{
    return x * ob__gelu_sigmoid(x);
}

/* d/dx [x s(x)] = s + x s (1 - s) * 2 u'(x), with u' = sqrt(2/pi) (1 + 3 c x^2). */
OB__F16 float ob__gelu_grad(float x, float dout)
{
    float s = ob__gelu_sigmoid(x);
    float du = OB_GELU_SCALE * (1.0f + 3.0f * OB_GELU_CUBE * x * x);
    return dout * (s + 2.0f * x * s * (1.0f - s) * du);
}

#endif
