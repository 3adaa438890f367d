/* Host versions of the optimizer kernels (onebit/optim_kernels.h): plain loops over the shared
 * element functions of optim_math.h, which the compiler vectorises, for the widest vectors the
 * CPU has (OB__CLONES: every version computes the same bits; the sums keep their four
 * accumulators whatever the width). */
#include "internal.h"
#include "optim_math.h"

#include <math.h>

void ob_adam_coeffs_init(ob_adam_coeffs *k, double beta1, double beta2, double eps, double wd,
                         int bias_correction, long t, float lr, int nranks)
{
    k->b1 = (float)beta1;
    k->a1 = (float)(1.0 - beta1);
    k->b2 = (float)beta2;
    k->a2 = (float)(1.0 - beta2);
    k->c1 = 1.0f;
    k->c2 = 1.0f;
    if (bias_correction) {
        k->c1 = (float)(1.0 / (1.0 - pow(beta1, (double)t)));
        k->c2 = (float)(1.0 / (1.0 - pow(beta2, (double)t)));
    }
    k->lr = lr;
    k->eps = (float)eps;
    k->wd = (float)wd;
    k->gscale = nranks > 1 ? 1.0f / (float)nranks : 1.0f;
}

OB__CLONES("avx512f", "avx2", "default")
void ob_adam_update(float *restrict x, float *restrict m, float *restrict v,
                    const float *restrict g, size_t d, const ob_adam_coeffs *k)
{
    const ob_adam_coeffs kk = *k; /* a local copy: no aliasing doubts for the vectoriser */
    for (size_t i = 0; i < d; i++)
        ob__adam_elem(&x[i], &m[i], &v[i], g[i], &kk);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_momentum_update(float *restrict m, const float *restrict g, size_t d, float b1, float a1)
{
    for (size_t i = 0; i < d; i++)
        m[i] = ob__momentum_elem(m[i], g[i], b1, a1);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_frozen_update(float *restrict x, const float *restrict m, const float *restrict den,
                      size_t d, float lr, float wd, float inv_c)
{
    if (inv_c == 0.0f) { /* the paper's step: the loop the vectoriser knows best */
        for (size_t i = 0; i < d; i++)
            x[i] = ob__frozen_elem(x[i], m[i], den[i], lr, wd);
        return;
    }
    for (size_t i = 0; i < d; i++)
        x[i] = ob__bounded_elem(x[i], m[i], den[i], lr, wd, inv_c);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_momentum_precondition(float *restrict m, float *restrict p, const float *restrict g,
                              const float *restrict den, size_t d, float b1, float a1)
{
    for (size_t i = 0; i < d; i++) {
        float mi = ob__momentum_elem(m[i], g[i], b1, a1);
        m[i] = mi;
        p[i] = mi / den[i];
    }
}

OB__CLONES("avx512f", "avx2", "default")
void ob_precondition_apply(float *restrict x, float *restrict m, const float *restrict p,
                           const float *restrict den, size_t d, float lr, float wd, float c)
{
    for (size_t i = 0; i < d; i++) {
        m[i] = p[i] * den[i];
        x[i] = ob__direct_elem(x[i], ob__clip_elem(p[i], c), lr, wd);
    }
}

OB__CLONES("avx512f", "avx2", "default")
void ob_frozen_den(float *restrict den, const float *restrict v, size_t d, float eps)
{
    for (size_t i = 0; i < d; i++)
        den[i] = ob__den_elem(v[i], eps);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_refresh_update(float *restrict x, float *restrict m, float *restrict v, float *restrict den,
                       const float *restrict g, size_t d, const ob_adam_coeffs *k, float keep,
                       float take, float inv_c)
{
    ob_adam_coeffs kk = *k;
    for (size_t i = 0; i < d; i++)
        ob__refresh_elem(&x[i], &m[i], &v[i], &den[i], g[i], &kk, keep, take, inv_c);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_binsgdm_local(float *restrict m, float *restrict b, float *restrict u,
                      const float *restrict g, size_t d, float b1, float a1, float eps,
                      int keep_max)
{
    for (size_t i = 0; i < d; i++)
        u[i] = ob__binsgdm_elem(&m[i], &b[i], g[i], b1, a1, eps, keep_max);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_direct_update(float *restrict x, const float *restrict s, size_t d, float lr, float wd)
{
    for (size_t i = 0; i < d; i++)
        x[i] = ob__direct_elem(x[i], s[i], lr, wd);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_softsign_update(float *restrict x, float *restrict m, float *restrict b,
                        const float *restrict g, size_t d, const ob_adam_coeffs *k)
{
    const ob_adam_coeffs kk = *k;
    for (size_t i = 0; i < d; i++)
        ob__softsign_elem(&x[i], &m[i], &b[i], g[i], &kk);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_track_update(float *restrict u, float *restrict a, float *restrict b,
                     const float *restrict g, size_t d, float b1, float a1, float b2, float a2,
                     float cu)
{
    for (size_t i = 0; i < d; i++)
        ob__track_elem(&u[i], &a[i], &b[i], g[i], b1, a1, b2, a2, cu);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_track_share(float *restrict e, const float *restrict a, const float *restrict b, size_t d,
                    float c2, float alpha, float beta, float inv_n)
{
    for (size_t i = 0; i < d; i++)
        e[i] = ob__track_share_elem(a[i], b[i], c2, alpha, beta, inv_n);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_track_set(float *restrict v, float *restrict den, const float *restrict s, size_t d,
                  float f, float eps)
{
    for (size_t i = 0; i < d; i++)
        ob__track_set_elem(&v[i], &den[i], s[i], f, eps);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_track_set_ratio(float *restrict v, float *restrict den, float *restrict s, size_t d,
                        float f, float eps)
{
    for (size_t i = 0; i < d; i++)
        s[i] = ob__track_set_ratio_elem(&v[i], &den[i], s[i], f, eps);
}

OB__CLONES("avx512f", "avx2", "default")
void ob_scale_by(float *restrict x, const float *restrict r, size_t d)
{
    for (size_t i = 0; i < d; i++)
        x[i] *= r[i];
}

OB__CLONES("avx512f", "avx2", "default")
void ob_scale(float *x, size_t d, float s)
{
    for (size_t i = 0; i < d; i++)
        x[i] *= s;
}

OB__CLONES("avx512f", "avx2", "default")
double ob_l1_norm(const float *v, size_t d)
{
    double acc[4] = {0};
    size_t i = 0;
    for (; i + 4 <= d; i += 4)
        for (int l = 0; l < 4; l++)
            acc[l] += fabs((double)v[i + (size_t)l]);
    for (; i < d; i++)
        acc[0] += fabs((double)v[i]);
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

OB__CLONES("avx512f", "avx2", "default")
double ob_sum_squares(const float *v, size_t d)
{
    /* Sixteen independent sums: each clone adds them as vectors in the same order, where four
     * left every pass waiting on the adds' latency (2-3x slower on 1.9M floats). */
    enum { LANES = 16 };
    double acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= d; i += LANES)
        for (int l = 0; l < LANES; l++) {
            double x = (double)v[i + (size_t)l];
            acc[l] += x * x;
        }
    for (; i < d; i++)
        acc[0] += (double)v[i] * (double)v[i];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            acc[l] += acc[l + w];
    return acc[0];
}

OB__CLONES("avx512f", "avx2", "default")
size_t ob_count_zero(const float *v, size_t d)
{
    size_t n = 0;
    for (size_t i = 0; i < d; i++)
        n += v[i] == 0.0f;
    return n;
}

OB__CLONES("avx512f", "avx2", "default")
size_t ob_count_exceeding(const float *g, const float *v, size_t d, float gscale, float k2)
{
    size_t n = 0;
    for (size_t i = 0; i < d; i++)
        n += (size_t)ob__exceeds_elem(g[i], v[i], gscale, k2);
    return n;
}
