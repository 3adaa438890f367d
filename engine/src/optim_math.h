/* The per-element arithmetic of the optimizer updates, written once and compiled twice: by the
 * C compiler for the CPU loops (src/optim_kernels.c) and by nvcc for the CUDA kernels
 * (cuda/optim_cuda.cu). Both follow IEEE single precision with round-to-nearest and no
 * contraction into fused multiply-adds (C11 without FMA code generation on the host; the CUDA
 * file is compiled with --fmad=false, and sqrtf and / are IEEE-exact there by default), so the
 * CPU and the GPU produce bitwise identical parameters, moments and errors. Keep every
 * expression here in the exact order written: reassociating one changes the results.
 * Private to the engine. */
#ifndef ONEBIT_OPTIM_MATH_H
#define ONEBIT_OPTIM_MATH_H

#include "onebit/optim_kernels.h"

#include <math.h>

#if defined(__CUDACC__)
#define OB__HD static __host__ __device__ __forceinline__
#else
#define OB__HD static inline
#endif

/* Adam on one element: g scaled by k->gscale (1/N turns an allreduced sum into the mean),
 * m and v updated, then x with decoupled weight decay. */
OB__HD void ob__adam_elem(float *x, float *m, float *v, float g, const ob_adam_coeffs *k)
{
    float gi = g * k->gscale;
    float mi = k->b1 * *m + k->a1 * gi;
    float vi = k->b2 * *v + k->a2 * (gi * gi);
    *m = mi;
    *v = vi;
    *x = *x - k->lr * ((mi * k->c1) / (sqrtf(vi * k->c2) + k->eps) + k->wd * *x);
}

/* m = beta1 m + (1 - beta1) g: the local momentum of the compression phase. */
OB__HD float ob__momentum_elem(float m, float g, float b1, float a1)
{
    return b1 * m + a1 * g;
}

/* x -= lr (m / (sqrt(v_Tw) + eps) + wd x): the step with the frozen variance. */
OB__HD float ob__frozen_elem(float x, float m, float den, float lr, float wd)
{
    return x - lr * (m / den + wd * x);
}

/* The stabilised frozen step: x -= lr (m / max(den, |m| / c) + wd x), so that |step| <= c lr
 * (inv_c = 1/c). With inv_c = 0 it is ob__frozen_elem bit for bit (den > 0 = |m| * 0), the
 * paper's exact step. */
OB__HD float ob__bounded_elem(float x, float m, float den, float lr, float wd, float inv_c)
{
    float a = fabsf(m) * inv_c;
    float dd = den > a ? den : a;
    return x - lr * (m / dd + wd * x);
}

/* Whether the averaged gradient (g scaled by gscale) exceeds sqrt(k2 v): the warm-start check's
 * test of a borrowed variance against the new job's gradient, one element. */
OB__HD int ob__exceeds_elem(float g, float v, float gscale, float k2)
{
    float gi = g * gscale;
    return gi * gi > k2 * v;
}

/* x -= lr (p + wd x): the step with an already preconditioned direction p. */
OB__HD float ob__direct_elem(float x, float p, float lr, float wd)
{
    return x - lr * (p + wd * x);
}

/* p clipped to [-c, c]: the stabiliser of the preconditioned step (c = INFINITY: p itself). */
OB__HD float ob__clip_elem(float p, float c)
{
    return p > c ? c : (p < -c ? -c : p);
}

/* sqrt(v) + eps: the frozen denominator, computed once per freeze. */
OB__HD float ob__den_elem(float v, float eps)
{
    return sqrtf(v) + eps;
}

/* A step of a variance refresh (ob_optim_config.refresh_steps): m and v from the averaged
 * gradient g * gscale (v = keep v + take g^2: this step's share of the re-estimate), the
 * denominator from the new v, then the stabilised step with it. */
OB__HD void ob__refresh_elem(float *x, float *m, float *v, float *den, float g,
                             const ob_adam_coeffs *k, float keep, float take, float inv_c)
{
    float gi = g * k->gscale;
    float mi = k->b1 * *m + k->a1 * gi;
    float vi = keep * *v + take * (gi * gi);
    float di = ob__den_elem(vi, k->eps);
    *m = mi;
    *v = vi;
    *den = di;
    *x = ob__bounded_elem(*x, mi, di, k->lr, k->wd, inv_c);
}

/* BinSGDM's local step on one element (Algorithm 1, lines 5-8 before the quantiser): m and b
 * from this rank's gradient g, b kept as a running maximum when keep_max (after the
 * threshold step T0), and the ratio u = m / (b + eps) that is quantised. |m| <= b in exact
 * arithmetic, and in float too (rounding is monotone, |fl(x + y)| <= fl(|x| + |y|)), so
 * u lies in [-1, 1]. */
OB__HD float ob__binsgdm_elem(float *m, float *b, float g, float b1, float a1, float eps,
                              int keep_max)
{
    float mi = b1 * *m + a1 * g;
    float bt = b1 * *b + a1 * fabsf(g);
    float bi = keep_max && *b > bt ? *b : bt;
    *m = mi;
    *b = bi;
    return mi / (bi + eps);
}

/* SoftSignSGD (BinSGDM unquantised) on one element: m and b from the averaged gradient
 * g * gscale with the same beta, then x -= lr (m / (b + eps) + wd x). */
OB__HD void ob__softsign_elem(float *x, float *m, float *b, float g, const ob_adam_coeffs *k)
{
    float gi = g * k->gscale;
    float mi = k->b1 * *m + k->a1 * gi;
    float bi = k->b1 * *b + k->a1 * fabsf(gi);
    *m = mi;
    *b = bi;
    *x = ob__direct_elem(*x, mi / (bi + k->eps), k->lr, k->wd);
}

/* The tracked variance's statistics of one element (ob_optim_config.track_variance) from this
 * rank's own gradient g: u = b1 u + a1 g, A = b2 A + a2 g^2, and B = b2 B + a2 (u cu)^2 with
 * cu = 1 / (1 - b1^t), the bias-corrected momentum's square. */
OB__HD void ob__track_elem(float *u, float *a, float *b, float g, float b1, float a1, float b2,
                           float a2, float cu)
{
    float ui = b1 * *u + a1 * g;
    float uh = ui * cu;
    *u = ui;
    *a = b2 * *a + a2 * (g * g);
    *b = b2 * *b + a2 * (uh * uh);
}

/* This rank's share of the estimate of one element: max(alpha A_hat + beta B_hat, A_hat / N)
 * with A_hat = A c2, B_hat = B c2 (c2 = 1 / (1 - b2^t)) and inv_n = 1 / N. */
OB__HD float ob__track_share_elem(float a, float b, float c2, float alpha, float beta, float inv_n)
{
    float ah = a * c2;
    float e = alpha * ah + beta * (b * c2);
    float lo = ah * inv_n;
    return e > lo ? e : lo;
}

/* The estimate applied to one element: from the sum s of the ranks' shares, v = f s (f = the
 * factor over N) and den = sqrt(v) + eps; a sum of 0 (below what the
 * exchange could carry) keeps v. */
OB__HD void ob__track_set_elem(float *v, float *den, float s, float f, float eps)
{
    float vi = s > 0.0f ? f * s : *v;
    *v = vi;
    *den = ob__den_elem(vi, eps);
}

/* The same, returning den_old / den_new: with precondition the error buffers hold residuals of
 * m / den, which this factor carries into the new denominator's units. */
OB__HD float ob__track_set_ratio_elem(float *v, float *den, float s, float f, float eps)
{
    float d0 = *den;
    ob__track_set_elem(v, den, s, f, eps);
    return d0 / *den;
}

#endif /* ONEBIT_OPTIM_MATH_H */
