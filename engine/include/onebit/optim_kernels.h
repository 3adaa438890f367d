/* The optimizer's element-wise kernels, for host memory (ob_*) and for device memory
 * (ob_cuda_*, launched asynchronously on a CUDA stream passed as void *, NULL for the default
 * stream). The two versions give bitwise identical results: they share one definition of the
 * per-element arithmetic. ob_optim (onebit/optim.h) calls the host or the device versions
 * according to its communicator's memory; they are public so that tests and benchmarks can hold
 * each device kernel against its CPU reference.
 *
 * Every pointer is borrowed; arrays hold d floats unless said otherwise. Outputs may alias
 * inputs only where a comment says so. In a build without CUDA every ob_cuda_* function
 * returns OB_ERR_UNSUPPORTED. */
#ifndef ONEBIT_OPTIM_KERNELS_H
#define ONEBIT_OPTIM_KERNELS_H

#include "onebit/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The coefficients of one Adam update, rounded to float once from the double configuration. */
typedef struct ob_adam_coeffs {
    float b1, a1; /* beta1 and 1 - beta1 (formed in double: 1 - 0.999f is off by 1e-5) */
    float b2, a2; /* beta2 and 1 - beta2 */
    float c1, c2; /* bias corrections 1/(1 - beta^t); 1 when disabled */
    float lr, eps, wd;
    float gscale; /* the gradient is multiplied by this first (1/N after a sum allreduce) */
} ob_adam_coeffs;

/* Coefficients of step t (1-based) with learning rate lr; gscale = 1/nranks. */
void ob_adam_coeffs_init(ob_adam_coeffs *k, double beta1, double beta2, double eps, double wd,
                         int bias_correction, long t, float lr, int nranks);

/* --- host memory --------------------------------------------------------------------------- */

/* Fused Adam: m, v from g * gscale, then x (one pass over x, m, v, g). */
void ob_adam_update(float *x, float *m, float *v, const float *g, size_t d,
                    const ob_adam_coeffs *k);
/* m = b1 m + a1 g. */
void ob_momentum_update(float *m, const float *g, size_t d, float b1, float a1);
/* x -= lr (m / max(den, |m| inv_c) + wd x), den = sqrt(v_Tw) + eps: every coordinate moves at
 * most lr / inv_c; inv_c = 0 gives the paper's x -= lr (m / den + wd x) exactly. */
void ob_frozen_update(float *x, const float *m, const float *den, size_t d, float lr, float wd,
                      float inv_c);
/* Preconditioned compression, before the exchange: m = b1 m + a1 g, p = m / den (fused). */
void ob_momentum_precondition(float *m, float *p, const float *g, const float *den, size_t d,
                              float b1, float a1);
/* Preconditioned compression, after the exchange: m = p * den, x -= lr (clip(p, c) + wd x)
 * (fused; c = INFINITY: no clipping). */
void ob_precondition_apply(float *x, float *m, const float *p, const float *den, size_t d, float lr,
                           float wd, float c);
/* den = sqrt(v) + eps. */
void ob_frozen_den(float *den, const float *v, size_t d, float eps);
/* A variance refresh's step (fused): m from g * gscale, v = keep v + take (g gscale)^2,
 * den = sqrt(v) + eps, then x as ob_frozen_update with that den (k's lr, wd, eps). */
void ob_refresh_update(float *x, float *m, float *v, float *den, const float *g, size_t d,
                       const ob_adam_coeffs *k, float keep, float take, float inv_c);
/* x *= s in place. */
void ob_scale(float *x, size_t d, float s);
/* BinSGDM's local step: m, b from this rank's gradient g, u = m / (b + eps) (d floats,
 * may not alias); b a running maximum when keep_max. */
void ob_binsgdm_local(float *m, float *b, float *u, const float *g, size_t d, float b1, float a1,
                      float eps, int keep_max);
/* x -= lr (s + wd x): a step along an already scaled direction s (BinSGDM's averaged signs). */
void ob_direct_update(float *x, const float *s, size_t d, float lr, float wd);
/* SoftSignSGD's step (fused): m, b from g * gscale, x -= lr (m / (b + eps) + wd x) (k's b1,
 * a1, eps, lr, wd, gscale). */
void ob_softsign_update(float *x, float *m, float *b, const float *g, size_t d,
                        const ob_adam_coeffs *k);
/* The tracked variance (ob_optim_config.track_variance). Statistics from this rank's gradient:
 * u = b1 u + a1 g, A = b2 A + a2 g^2, B = b2 B + a2 (cu u)^2 with the new u. */
void ob_track_update(float *u, float *a, float *b, const float *g, size_t d, float b1, float a1,
                     float b2, float a2, float cu);
/* This rank's share of the estimate: e = max(alpha c2 A + beta c2 B, c2 A inv_n) (e may not
 * alias). */
void ob_track_share(float *e, const float *a, const float *b, size_t d, float c2, float alpha,
                    float beta, float inv_n);
/* The estimate from the ranks' summed shares s: v = f s where s > 0 (v kept where s is 0),
 * den = sqrt(v) + eps. */
void ob_track_set(float *v, float *den, const float *s, size_t d, float f, float eps);
/* ob_track_set that leaves den_old / den_new in s (the precondition's error buffers are moved
 * to the new denominator by it: ob_car_scale_errors). */
void ob_track_set_ratio(float *v, float *den, float *s, size_t d, float f, float eps);
/* x *= r elementwise (may not alias). */
void ob_scale_by(float *x, const float *r, size_t d);
/* ||v||_1 in double: four lanes in a fixed order (the freeze detector's norm). */
double ob_l1_norm(const float *v, size_t d);
/* How many i have (gscale g[i])^2 > k2 v[i]: the warm-start check (an exact count). */
size_t ob_count_exceeding(const float *g, const float *v, size_t d, float gscale, float k2);
/* ||v||_2^2 in double: sixteen lanes in a fixed order (the compression-health norms). */
double ob_sum_squares(const float *v, size_t d);
/* How many i have v[i] == 0 exactly (-0 included; an exact count). */
size_t ob_count_zero(const float *v, size_t d);

/* --- device memory (the same contracts) --------------------------------------------------------
 */

ob_status ob_cuda_adam_update(float *x, float *m, float *v, const float *g, size_t d,
                              const ob_adam_coeffs *k, void *stream, ob_err *err);
ob_status ob_cuda_momentum_update(float *m, const float *g, size_t d, float b1, float a1,
                                  void *stream, ob_err *err);
ob_status ob_cuda_frozen_update(float *x, const float *m, const float *den, size_t d, float lr,
                                float wd, float inv_c, void *stream, ob_err *err);
ob_status ob_cuda_momentum_precondition(float *m, float *p, const float *g, const float *den,
                                        size_t d, float b1, float a1, void *stream, ob_err *err);
ob_status ob_cuda_precondition_apply(float *x, float *m, const float *p, const float *den, size_t d,
                                     float lr, float wd, float c, void *stream, ob_err *err);
ob_status ob_cuda_frozen_den(float *den, const float *v, size_t d, float eps, void *stream,
                             ob_err *err);
ob_status ob_cuda_refresh_update(float *x, float *m, float *v, float *den, const float *g, size_t d,
                                 const ob_adam_coeffs *k, float keep, float take, float inv_c,
                                 void *stream, ob_err *err);
ob_status ob_cuda_binsgdm_local(float *m, float *b, float *u, const float *g, size_t d, float b1,
                                float a1, float eps, int keep_max, void *stream, ob_err *err);
ob_status ob_cuda_direct_update(float *x, const float *s, size_t d, float lr, float wd,
                                void *stream, ob_err *err);
ob_status ob_cuda_softsign_update(float *x, float *m, float *b, const float *g, size_t d,
                                  const ob_adam_coeffs *k, void *stream, ob_err *err);
ob_status ob_cuda_track_update(float *u, float *a, float *b, const float *g, size_t d, float b1,
                               float a1, float b2, float a2, float cu, void *stream, ob_err *err);
ob_status ob_cuda_track_share(float *e, const float *a, const float *b, size_t d, float c2,
                              float alpha, float beta, float inv_n, void *stream, ob_err *err);
ob_status ob_cuda_track_set_ratio(float *v, float *den, float *s, size_t d, float f, float eps,
                                  void *stream, ob_err *err);
ob_status ob_cuda_scale_by(float *x, const float *r, size_t d, void *stream, ob_err *err);
ob_status ob_cuda_track_set(float *v, float *den, const float *s, size_t d, float f, float eps,
                            void *stream, ob_err *err);
ob_status ob_cuda_scale(float *x, size_t d, float s, void *stream, ob_err *err);
/* ||v||_1 in double, summed in a tree (so it may differ from ob_l1_norm in the last bits: at
 * most about d * 2^-53 relative). Waits for the stream and writes *out on the host. */
ob_status ob_cuda_l1_norm(const float *v, size_t d, double *out, void *stream, ob_err *err);
/* ob_count_exceeding on the device. Waits for the stream and writes *out on the host. */
ob_status ob_cuda_count_exceeding(const float *g, const float *v, size_t d, float gscale, float k2,
                                  size_t *out, void *stream, ob_err *err);
/* ||v||_2^2 in double, summed in a tree like ob_cuda_l1_norm (it may differ from ob_sum_squares
 * in the last bits). Waits for the stream and writes *out on the host. */
ob_status ob_cuda_sum_squares(const float *v, size_t d, double *out, void *stream, ob_err *err);
/* ob_count_zero on the device. Waits for the stream and writes *out on the host. */
ob_status ob_cuda_count_zero(const float *v, size_t d, size_t *out, void *stream, ob_err *err);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_OPTIM_KERNELS_H */
