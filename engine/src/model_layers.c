/* CPU layer kernels for the models (see model_layers.h for the conventions).
 *
 * The linear layers' matrix products go through ob__sgemm (gemm.h: the engine's own AVX-512
 * kernel where the CPU has it, else cblas_sgemm), the attention's small per-head products through
 * cblas_sgemm; the remaining loops are plain row loops the compiler can vectorise. The attention
 * runs one (batch, head) pair at a time with strided sgemm calls straight on the fused qkv buffer,
 * so q, k and v are never copied out. */
#include "model_layers.h"

#include "gemm.h"
#include "internal.h"
#include "model_math.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* ---- linear ------------------------------------------------------------------------------ */

static void linear(float *out, const float *inp, const float *w, const float *b, size_t n, size_t c,
                   size_t oc, int add)
{
    /* The bias goes in first so that a single sgemm with beta = 1 finishes the job. */
    if (b) {
        for (size_t i = 0; i < n; i++) {
            float *row = out + i * oc;
            if (add) {
                for (size_t o = 0; o < oc; o++)
                    row[o] += b[o];
            } else {
                memcpy(row, b, oc * sizeof *row);
            }
        }
    }
    float beta = (add || b) ? 1.0f : 0.0f;
    ob__sgemm(OB_GEMM_N, OB_GEMM_T, n, oc, c, inp, c, w, c, beta, out, oc);
}

void ob__linear_forward(float *out, const float *inp, const float *w, const float *b, size_t n,
                        size_t c, size_t oc)
{
    linear(out, inp, w, b, n, c, oc, 0);
}

void ob__linear_forward_add(float *out, const float *inp, const float *w, const float *b, size_t n,
                            size_t c, size_t oc)
{
    linear(out, inp, w, b, n, c, oc, 1);
}

void ob__linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                         const float *w, size_t n, size_t c, size_t oc)
{
    if (dinp) {
        // (N, C) = (N, OC) @ (OC, C)
        ob__sgemm(OB_GEMM_N, OB_GEMM_N, n, c, oc, dout, oc, w, c, 0.0f, dinp, c);
    }
    // (OC, C) += (OC, N) @ (N, C)
    ob__sgemm(OB_GEMM_T, OB_GEMM_N, oc, c, n, dout, oc, inp, c, 1.0f, dw, c);
    if (db) {
        for (size_t i = 0; i < n; i++) {
            const float *row = dout + i * oc;
            for (size_t o = 0; o < oc; o++)
                db[o] += row[o];
        }
    }
}

/* ---- activations ------------------------------------------------------------------------- */

OB__CLONES("avx512f", "avx2", "default")
void ob__act_forward(ob_activation act, float *out, const float *inp, size_t n)
{
    switch (act) {
    case OB_ACT_RELU:
        for (size_t i = 0; i < n; i++)
            out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
        break;
    case OB_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            out[i] = tanhf(inp[i]);
        break;
    case OB_ACT_GELU:
        for (size_t i = 0; i < n; i++)
            out[i] = ob__gelu(inp[i]);
        break;
    }
}

OB__CLONES("avx512f", "avx2", "default")
void ob__act_backward(ob_activation act, float *dinp, const float *dout, const float *inp,
                      const float *out, size_t n)
{
    switch (act) {
    case OB_ACT_RELU:
        for (size_t i = 0; i < n; i++)
            dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
        break;
    case OB_ACT_TANH:
        /* tanh' = 1 - tanh^2, and the forward pass already has tanh. */
        for (size_t i = 0; i < n; i++)
            dinp[i] = dout[i] * (1.0f - out[i] * out[i]);
        break;
    case OB_ACT_GELU:
        for (size_t i = 0; i < n; i++)
            dinp[i] = ob__gelu_grad(inp[i], dout[i]);
        break;
    }
}

/* ---- layer norm -------------------------------------------------------------------------- */

#define LN_EPS 1e-5f

void ob__layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, size_t n, size_t c)
{
    for (size_t i = 0; i < n; i++) {
        const float *x = inp + i * c;
        float *y = out + i * c;
        /* Two passes (mean, then the variance of the deviations) stay accurate when the mean is
         * large compared with the spread. */
        float m = 0.0f;
        for (size_t j = 0; j < c; j++)
            m += x[j];
        m /= (float)c;
        float v = 0.0f;
        for (size_t j = 0; j < c; j++) {
            float d = x[j] - m;
            v += d * d;
        }
        v /= (float)c;
        float s = 1.0f / sqrtf(v + LN_EPS);
        for (size_t j = 0; j < c; j++)
            y[j] = (x[j] - m) * s * w[j] + b[j];
        mean[i] = m;
        rstd[i] = s;
    }
}

void ob__layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *mean, const float *rstd, size_t n,
                            size_t c)
{
    for (size_t i = 0; i < n; i++) {
        const float *x = inp + i * c;
        const float *dy = dout + i * c;
        float *dx = dinp + i * c;
        float m = mean[i], s = rstd[i];
        /* With xhat = (x - m) * s and g = dy * w:
         * dx = s * (g - mean(g) - xhat * mean(g * xhat)). */
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (size_t j = 0; j < c; j++) {
            float xhat = (x[j] - m) * s;
            float g = dy[j] * w[j];
            g_mean += g;
            gx_mean += g * xhat;
        }
        g_mean /= (float)c;
        gx_mean /= (float)c;
        for (size_t j = 0; j < c; j++) {
            float xhat = (x[j] - m) * s;
            float g = dy[j] * w[j];
            db[j] += dy[j];
            dw[j] += dy[j] * xhat;
            dx[j] += s * (g - g_mean - xhat * gx_mean);
        }
    }
}

/* ---- causal self-attention ----------------------------------------------------------------- */

void ob__attention_forward(float *out, float *att, const float *qkv, size_t b, size_t t, size_t c,
                           size_t nh)
{
    size_t hs = c / nh;
    float scale = 1.0f / sqrtf((float)hs);
    int ld = (int)(3 * c);
    for (size_t bi = 0; bi < b; bi++) {
        for (size_t h = 0; h < nh; h++) {
            const float *q = qkv + bi * t * 3 * c + h * hs; // (T, hs), row stride 3C
            const float *k = q + c;
            const float *v = q + 2 * c;
            float *a = att + (bi * nh + h) * t * t; // (T, T)
            float *y = out + bi * t * c + h * hs;   // (T, hs), row stride C

            /* Scores for the full square; the part above the diagonal is never read and is
             * overwritten with zeros, which keeps att @ v a plain product. */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t, (int)t, (int)hs, scale, q,
                        ld, k, ld, 0.0f, a, (int)t);
            for (size_t i = 0; i < t; i++) {
                float *row = a + i * t;
                float mx = row[0];
                for (size_t j = 1; j <= i; j++)
                    mx = row[j] > mx ? row[j] : mx;
                float sum = 0.0f;
                for (size_t j = 0; j <= i; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = 1.0f / sum;
                for (size_t j = 0; j <= i; j++)
                    row[j] *= inv;
                for (size_t j = i + 1; j < t; j++)
                    row[j] = 0.0f;
            }
            // (T, hs) = (T, T) @ (T, hs)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)t, (int)hs, (int)t, 1.0f, a,
                        (int)t, v, ld, 0.0f, y, (int)c);
        }
    }
}

void ob__attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                            const float *att, size_t b, size_t t, size_t c, size_t nh)
{
    size_t hs = c / nh;
    float scale = 1.0f / sqrtf((float)hs);
    int ld = (int)(3 * c);
    for (size_t bi = 0; bi < b; bi++) {
        for (size_t h = 0; h < nh; h++) {
            size_t base = bi * t * 3 * c + h * hs;
            const float *q = qkv + base, *k = q + c, *v = q + 2 * c;
            float *dq = dqkv + base, *dk = dq + c, *dv = dq + 2 * c;
            const float *a = att + (bi * nh + h) * t * t;
            const float *dy = dout + bi * t * c + h * hs;
            float *da = scratch; // (T, T)

            // datt (T, T) = dy (T, hs) @ v^T
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t, (int)t, (int)hs, 1.0f, dy,
                        (int)c, v, ld, 0.0f, da, (int)t);
            // dv (T, hs) = att^T (T, T) @ dy (T, hs)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)t, (int)hs, (int)t, 1.0f, a,
                        (int)t, dy, (int)c, 0.0f, dv, ld);
            /* Softmax backward, in place: dpre = att * (datt - sum_j att * datt), scaled by the
             * 1/sqrt(hs) of the scores; zero above the diagonal (masked positions). */
            for (size_t i = 0; i < t; i++) {
                const float *arow = a + i * t;
                float *drow = da + i * t;
                float dot = 0.0f;
                for (size_t j = 0; j <= i; j++)
                    dot += arow[j] * drow[j];
                for (size_t j = 0; j <= i; j++)
                    drow[j] = arow[j] * (drow[j] - dot) * scale;
                for (size_t j = i + 1; j < t; j++)
                    drow[j] = 0.0f;
            }
            // dq (T, hs) = dpre (T, T) @ k (T, hs);  dk (T, hs) = dpre^T @ q
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)t, (int)hs, (int)t, 1.0f,
                        da, (int)t, k, ld, 0.0f, dq, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)t, (int)hs, (int)t, 1.0f, da,
                        (int)t, q, ld, 0.0f, dk, ld);
        }
    }
}

/* ---- embeddings -------------------------------------------------------------------------- */

void ob__embed_forward(float *out, const uint8_t *tokens, size_t stride, const float *wte,
                       const float *wpe, size_t b, size_t t, size_t c)
{
    for (size_t bi = 0; bi < b; bi++) {
        for (size_t ti = 0; ti < t; ti++) {
            float *y = out + (bi * t + ti) * c;
            const float *te = wte + (size_t)tokens[bi * stride + ti] * c;
            const float *pe = wpe + ti * c;
            for (size_t j = 0; j < c; j++)
                y[j] = te[j] + pe[j];
        }
    }
}

void ob__embed_backward(float *dwte, float *dwpe, const float *dout, const uint8_t *tokens,
                        size_t stride, size_t b, size_t t, size_t c)
{
    for (size_t bi = 0; bi < b; bi++) {
        for (size_t ti = 0; ti < t; ti++) {
            const float *dy = dout + (bi * t + ti) * c;
            float *dte = dwte + (size_t)tokens[bi * stride + ti] * c;
            float *dpe = dwpe + ti * c;
            for (size_t j = 0; j < c; j++) {
                dte[j] += dy[j];
                dpe[j] += dy[j];
            }
        }
    }
}

/* ---- softmax cross-entropy ------------------------------------------------------------------ */

void ob__xent_forward(float *probs, double *loss_sum, size_t *correct, const float *logits,
                      const int32_t *targets, size_t n, size_t v)
{
    double total = 0.0;
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        const float *z = logits + i * v;
        float *p = probs + i * v;
        size_t best = 0;
        for (size_t j = 1; j < v; j++)
            best = z[j] > z[best] ? j : best;
        /* Shift by the maximum so exp never overflows: log-sum-exp = max + log(sum e^(z-max)). */
        float mx = z[best];
        float sum = 0.0f;
        for (size_t j = 0; j < v; j++) {
            p[j] = expf(z[j] - mx);
            sum += p[j];
        }
        float inv = 1.0f / sum;
        for (size_t j = 0; j < v; j++)
            p[j] *= inv;
        size_t y = (size_t)targets[i];
        total += (double)mx + log((double)sum) - (double)z[y];
        hits += best == y;
    }
    *loss_sum += total;
    *correct += hits;
}

void ob__xent_backward(float *probs, const int32_t *targets, size_t n, size_t v, float scale)
{
    for (size_t i = 0; i < n; i++) {
        float *p = probs + i * v;
        p[targets[i]] -= 1.0f;
        for (size_t j = 0; j < v; j++)
            p[j] *= scale;
    }
}
