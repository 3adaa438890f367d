/* CUDA versions of the optimizer kernels (onebit/optim_kernels.h). Each is one grid-stride pass
 * over its arrays with the element functions of src/optim_math.h, which the CPU loops share;
 * this file is compiled with --fmad=false (engine/CMakeLists.txt) so that nvcc keeps every
 * multiply and add separately rounded, as the CPU does, and the results agree bit for bit.
 *
 * The L1 norm is reduced deterministically (the same result on every run): each thread block
 * sums its part in a fixed tree into one double, and one block then adds the partial sums in
 * block order. */
#include "cuda_internal.h"
#include "optim_math.h"

#include <cuda_runtime.h>

namespace
{

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;  /* grid-stride loops cover the rest */
constexpr int kNormBlocks = 1024; /* partial sums of the L1 norm */

unsigned blocks_for(size_t d)
{
    size_t b = (d + kThreads - 1) / kThreads;
    if (b < 1) b = 1;
    return (unsigned)(b < (size_t)kMaxBlocks ? b : (size_t)kMaxBlocks);
}

#define GRID_STRIDE(i, d)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (d);                        \
         i += (size_t)gridDim.x * blockDim.x)

__global__ void adam_kernel(float *__restrict__ x, float *__restrict__ m, float *__restrict__ v,
                            const float *__restrict__ g, size_t d, ob_adam_coeffs k)
{
    GRID_STRIDE(i, d)
    {
        float xi = x[i], mi = m[i], vi = v[i];
        ob__adam_elem(&xi, &mi, &vi, g[i], &k);
        x[i] = xi;
        m[i] = mi;
        v[i] = vi;
    }
}

__global__ void momentum_kernel(float *__restrict__ m, const float *__restrict__ g, size_t d,
                                float b1, float a1)
{
    GRID_STRIDE(i, d) m[i] = ob__momentum_elem(m[i], g[i], b1, a1);
}

__global__ void frozen_kernel(float *__restrict__ x, const float *__restrict__ m,
                              const float *__restrict__ den, size_t d, float lr, float wd)
{
    GRID_STRIDE(i, d) x[i] = ob__frozen_elem(x[i], m[i], den[i], lr, wd);
}

__global__ void bounded_kernel(float *__restrict__ x, const float *__restrict__ m,
                               const float *__restrict__ den, size_t d, float lr, float wd,
                               float inv_c)
{
    GRID_STRIDE(i, d) x[i] = ob__bounded_elem(x[i], m[i], den[i], lr, wd, inv_c);
}

__global__ void refresh_kernel(float *__restrict__ x, float *__restrict__ m, float *__restrict__ v,
                               float *__restrict__ den, const float *__restrict__ g, size_t d,
                               ob_adam_coeffs k, float keep, float take, float inv_c)
{
    GRID_STRIDE(i, d)
    {
        float xi = x[i], mi = m[i], vi = v[i], di;
        ob__refresh_elem(&xi, &mi, &vi, &di, g[i], &k, keep, take, inv_c);
        x[i] = xi;
        m[i] = mi;
        v[i] = vi;
        den[i] = di;
    }
}

__global__ void track_kernel(float *__restrict__ u, float *__restrict__ a, float *__restrict__ b,
                             const float *__restrict__ g, size_t d, float b1, float a1, float b2,
                             float a2, float cu)
{
    GRID_STRIDE(i, d)
    {
        float ui = u[i], ai = a[i], bi = b[i];
        ob__track_elem(&ui, &ai, &bi, g[i], b1, a1, b2, a2, cu);
        u[i] = ui;
        a[i] = ai;
        b[i] = bi;
    }
}

__global__ void track_share_kernel(float *__restrict__ e, const float *__restrict__ a,
                                   const float *__restrict__ b, size_t d, float c2, float alpha,
                                   float beta, float inv_n)
{
    GRID_STRIDE(i, d) e[i] = ob__track_share_elem(a[i], b[i], c2, alpha, beta, inv_n);
}

__global__ void track_set_ratio_kernel(float *__restrict__ v, float *__restrict__ den,
                                       float *__restrict__ s, size_t d, float f, float eps)
{
    GRID_STRIDE(i, d)
    {
        float vi = v[i], di = den[i];
        float r = ob__track_set_ratio_elem(&vi, &di, s[i], f, eps);
        v[i] = vi;
        den[i] = di;
        s[i] = r;
    }
}

__global__ void scale_by_kernel(float *__restrict__ x, const float *__restrict__ r, size_t d)
{
    GRID_STRIDE(i, d) x[i] *= r[i];
}

__global__ void track_set_kernel(float *__restrict__ v, float *__restrict__ den,
                                 const float *__restrict__ s, size_t d, float f, float eps)
{
    GRID_STRIDE(i, d)
    {
        float vi = v[i], di;
        ob__track_set_elem(&vi, &di, s[i], f, eps);
        v[i] = vi;
        den[i] = di;
    }
}

__global__ void momentum_precondition_kernel(float *__restrict__ m, float *__restrict__ p,
                                             const float *__restrict__ g,
                                             const float *__restrict__ den, size_t d, float b1,
                                             float a1)
{
    GRID_STRIDE(i, d)
    {
        float mi = ob__momentum_elem(m[i], g[i], b1, a1);
        m[i] = mi;
        p[i] = mi / den[i];
    }
}

__global__ void precondition_apply_kernel(float *__restrict__ x, float *__restrict__ m,
                                          const float *__restrict__ p,
                                          const float *__restrict__ den, size_t d, float lr,
                                          float wd, float c)
{
    GRID_STRIDE(i, d)
    {
        float pi = p[i];
        m[i] = pi * den[i];
        x[i] = ob__direct_elem(x[i], ob__clip_elem(pi, c), lr, wd);
    }
}

__global__ void den_kernel(float *__restrict__ den, const float *__restrict__ v, size_t d,
                           float eps)
{
    GRID_STRIDE(i, d) den[i] = ob__den_elem(v[i], eps);
}

__global__ void binsgdm_kernel(float *__restrict__ m, float *__restrict__ b,
                               float *__restrict__ u, const float *__restrict__ g, size_t d,
                               float b1, float a1, float eps, int keep_max)
{
    GRID_STRIDE(i, d)
    {
        float mi = m[i], bi = b[i];
        u[i] = ob__binsgdm_elem(&mi, &bi, g[i], b1, a1, eps, keep_max);
        m[i] = mi;
        b[i] = bi;
    }
}

__global__ void direct_kernel(float *__restrict__ x, const float *__restrict__ s, size_t d,
                              float lr, float wd)
{
    GRID_STRIDE(i, d) x[i] = ob__direct_elem(x[i], s[i], lr, wd);
}

__global__ void softsign_kernel(float *__restrict__ x, float *__restrict__ m,
                                float *__restrict__ b, const float *__restrict__ g, size_t d,
                                ob_adam_coeffs k)
{
    GRID_STRIDE(i, d)
    {
        float xi = x[i], mi = m[i], bi = b[i];
        ob__softsign_elem(&xi, &mi, &bi, g[i], &k);
        x[i] = xi;
        m[i] = mi;
        b[i] = bi;
    }
}

__global__ void scale_kernel(float *x, size_t d, float s)
{
    GRID_STRIDE(i, d) x[i] = x[i] * s;
}

/* Sum of kThreads doubles of a block in a fixed tree; the result in thread 0. */
__device__ double block_sum(double a)
{
    __shared__ double part[kThreads];
    part[threadIdx.x] = a;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) part[threadIdx.x] = part[threadIdx.x] + part[threadIdx.x + s];
        __syncthreads();
    }
    return part[0];
}

__global__ void l1_partial_kernel(const float *__restrict__ v, size_t d, double *partial)
{
    double a = 0.0;
    GRID_STRIDE(i, d) a += fabs((double)v[i]);
    double s = block_sum(a);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sumsq_partial_kernel(const float *__restrict__ v, size_t d, double *partial)
{
    double a = 0.0;
    GRID_STRIDE(i, d)
    {
        double x = (double)v[i];
        a += x * x;
    }
    double s = block_sum(a);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void count_zero_kernel(const float *__restrict__ v, size_t d, unsigned long long *out)
{
    unsigned long long n = 0;
    GRID_STRIDE(i, d) n += (unsigned long long)(v[i] == 0.0f);
    if (n) atomicAdd(out, n);
}

__global__ void l1_final_kernel(const double *partial, unsigned n, double *out)
{
    double a = 0.0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
        a += partial[i];
    double s = block_sum(a);
    if (threadIdx.x == 0) *out = s;
}

/* Each thread counts its elements; one atomic add per thread that found any (a count is exact
 * in any order). */
__global__ void count_exceeding_kernel(const float *__restrict__ g, const float *__restrict__ v,
                                       size_t d, float gscale, float k2,
                                       unsigned long long *out)
{
    unsigned long long n = 0;
    GRID_STRIDE(i, d) n += (unsigned long long)ob__exceeds_elem(g[i], v[i], gscale, k2);
    if (n) atomicAdd(out, n);
}

ob_status launched(ob_err *err)
{
    CUDA_CHECK(err, cudaGetLastError());
    return OB_OK;
}

ob_status need(ob_err *err, const char *fn, int ok)
{
    if (ok) return OB_OK;
    return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: NULL buffer", fn);
}

/* A double reduction of v over d: `partial` writes one sum per block, l1_final_kernel adds
 * them in a fixed tree. Waits for the stream and writes *out on the host. */
typedef void (*partial_kernel)(const float *, size_t, double *);
ob_status reduce_double(partial_kernel partial, const char *fn, const float *v, size_t d,
                        double *out, void *stream, ob_err *err)
{
    *out = 0.0;
    if (d == 0) return OB_OK;
    ob_status st = need(err, fn, v != NULL);
    if (st != OB_OK) return st;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned nb = blocks_for(d);
    if (nb > (unsigned)kNormBlocks) nb = kNormBlocks;
    double *scratch = NULL; /* nb partial sums, then the total */
    CUDA_CHECK(err, cudaMallocAsync((void **)&scratch, (nb + 1) * sizeof(double), s));
    partial<<<nb, kThreads, 0, s>>>(v, d, scratch);
    l1_final_kernel<<<1, kThreads, 0, s>>>(scratch, nb, scratch + nb);
    cudaError_t rc = cudaGetLastError();
    if (rc == cudaSuccess)
        rc = cudaMemcpyAsync(out, scratch + nb, sizeof(double), cudaMemcpyDeviceToHost, s);
    cudaError_t frc = cudaFreeAsync(scratch, s);
    if (rc == cudaSuccess) rc = frc;
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(s);
    if (rc != cudaSuccess) return ob__cuda_fail(err, rc, fn, __FILE__, __LINE__);
    return OB_OK;
}

} // namespace

extern "C" ob_status ob_cuda_l1_norm(const float *v, size_t d, double *out, void *stream,
                                     ob_err *err)
{
    return reduce_double(l1_partial_kernel, "ob_cuda_l1_norm", v, d, out, stream, err);
}

extern "C" ob_status ob_cuda_sum_squares(const float *v, size_t d, double *out, void *stream,
                                         ob_err *err)
{
    return reduce_double(sumsq_partial_kernel, "ob_cuda_sum_squares", v, d, out, stream, err);
}

#define LAUNCH(kernel, d, stream, ...)                                                             \
    kernel<<<blocks_for(d), kThreads, 0, (cudaStream_t)(stream)>>>(__VA_ARGS__)

extern "C" ob_status ob_cuda_adam_update(float *x, float *m, float *v, const float *g, size_t d,
                                         const ob_adam_coeffs *k, void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_adam_update", x && m && v && g && k);
    if (st != OB_OK) return st;
    LAUNCH(adam_kernel, d, stream, x, m, v, g, d, *k);
    return launched(err);
}

extern "C" ob_status ob_cuda_momentum_update(float *m, const float *g, size_t d, float b1, float a1,
                                             void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_momentum_update", m && g);
    if (st != OB_OK) return st;
    LAUNCH(momentum_kernel, d, stream, m, g, d, b1, a1);
    return launched(err);
}

extern "C" ob_status ob_cuda_frozen_update(float *x, const float *m, const float *den, size_t d,
                                           float lr, float wd, float inv_c, void *stream,
                                           ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_frozen_update", x && m && den);
    if (st != OB_OK) return st;
    if (inv_c == 0.0f)
        LAUNCH(frozen_kernel, d, stream, x, m, den, d, lr, wd);
    else
        LAUNCH(bounded_kernel, d, stream, x, m, den, d, lr, wd, inv_c);
    return launched(err);
}

extern "C" ob_status ob_cuda_momentum_precondition(float *m, float *p, const float *g,
                                                   const float *den, size_t d, float b1, float a1,
                                                   void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_momentum_precondition", m && p && g && den);
    if (st != OB_OK) return st;
    LAUNCH(momentum_precondition_kernel, d, stream, m, p, g, den, d, b1, a1);
    return launched(err);
}

extern "C" ob_status ob_cuda_precondition_apply(float *x, float *m, const float *p,
                                                const float *den, size_t d, float lr, float wd,
                                                float c, void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_precondition_apply", x && m && p && den);
    if (st != OB_OK) return st;
    LAUNCH(precondition_apply_kernel, d, stream, x, m, p, den, d, lr, wd, c);
    return launched(err);
}

extern "C" ob_status ob_cuda_frozen_den(float *den, const float *v, size_t d, float eps,
                                        void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_frozen_den", den && v);
    if (st != OB_OK) return st;
    LAUNCH(den_kernel, d, stream, den, v, d, eps);
    return launched(err);
}

extern "C" ob_status ob_cuda_refresh_update(float *x, float *m, float *v, float *den,
                                            const float *g, size_t d, const ob_adam_coeffs *k,
                                            float keep, float take, float inv_c, void *stream,
                                            ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_refresh_update", x && m && v && den && g && k);
    if (st != OB_OK) return st;
    LAUNCH(refresh_kernel, d, stream, x, m, v, den, g, d, *k, keep, take, inv_c);
    return launched(err);
}

extern "C" ob_status ob_cuda_track_update(float *u, float *a, float *b, const float *g, size_t d,
                                          float b1, float a1, float b2, float a2, float cu,
                                          void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_track_update", u && a && b && g);
    if (st != OB_OK) return st;
    LAUNCH(track_kernel, d, stream, u, a, b, g, d, b1, a1, b2, a2, cu);
    return launched(err);
}

extern "C" ob_status ob_cuda_track_share(float *e, const float *a, const float *b, size_t d,
                                         float c2, float alpha, float beta, float inv_n,
                                         void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_track_share", e && a && b);
    if (st != OB_OK) return st;
    LAUNCH(track_share_kernel, d, stream, e, a, b, d, c2, alpha, beta, inv_n);
    return launched(err);
}

extern "C" ob_status ob_cuda_track_set_ratio(float *v, float *den, float *s, size_t d, float f,
                                             float eps, void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_track_set_ratio", v && den && s);
    if (st != OB_OK) return st;
    LAUNCH(track_set_ratio_kernel, d, stream, v, den, s, d, f, eps);
    return launched(err);
}

extern "C" ob_status ob_cuda_scale_by(float *x, const float *r, size_t d, void *stream,
                                      ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_scale_by", x && r);
    if (st != OB_OK) return st;
    LAUNCH(scale_by_kernel, d, stream, x, r, d);
    return launched(err);
}

extern "C" ob_status ob_cuda_track_set(float *v, float *den, const float *s, size_t d, float f,
                                       float eps, void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_track_set", v && den && s);
    if (st != OB_OK) return st;
    LAUNCH(track_set_kernel, d, stream, v, den, s, d, f, eps);
    return launched(err);
}

extern "C" ob_status ob_cuda_binsgdm_local(float *m, float *b, float *u, const float *g, size_t d,
                                           float b1, float a1, float eps, int keep_max,
                                           void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_binsgdm_local", m && b && u && g);
    if (st != OB_OK) return st;
    LAUNCH(binsgdm_kernel, d, stream, m, b, u, g, d, b1, a1, eps, keep_max);
    return launched(err);
}

extern "C" ob_status ob_cuda_direct_update(float *x, const float *s, size_t d, float lr, float wd,
                                           void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_direct_update", x && s);
    if (st != OB_OK) return st;
    LAUNCH(direct_kernel, d, stream, x, s, d, lr, wd);
    return launched(err);
}

extern "C" ob_status ob_cuda_softsign_update(float *x, float *m, float *b, const float *g,
                                             size_t d, const ob_adam_coeffs *k, void *stream,
                                             ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_softsign_update", x && m && b && g && k);
    if (st != OB_OK) return st;
    LAUNCH(softsign_kernel, d, stream, x, m, b, g, d, *k);
    return launched(err);
}

extern "C" ob_status ob_cuda_scale(float *x, size_t d, float s, void *stream, ob_err *err)
{
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_scale", x != NULL);
    if (st != OB_OK) return st;
    LAUNCH(scale_kernel, d, stream, x, d, s);
    return launched(err);
}

extern "C" ob_status ob_cuda_count_exceeding(const float *g, const float *v, size_t d, float gscale,
                                             float k2, size_t *out, void *stream, ob_err *err)
{
    *out = 0;
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_count_exceeding", g != NULL && v != NULL);
    if (st != OB_OK) return st;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned long long *count = NULL, host = 0;
    CUDA_CHECK(err, cudaMallocAsync((void **)&count, sizeof *count, s));
    cudaError_t rc = cudaMemsetAsync(count, 0, sizeof *count, s);
    if (rc == cudaSuccess) {
        count_exceeding_kernel<<<blocks_for(d), kThreads, 0, s>>>(g, v, d, gscale, k2, count);
        rc = cudaGetLastError();
    }
    if (rc == cudaSuccess)
        rc = cudaMemcpyAsync(&host, count, sizeof host, cudaMemcpyDeviceToHost, s);
    cudaError_t frc = cudaFreeAsync(count, s);
    if (rc == cudaSuccess) rc = frc;
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(s);
    if (rc != cudaSuccess)
        return ob__cuda_fail(err, rc, "ob_cuda_count_exceeding", __FILE__, __LINE__);
    *out = (size_t)host;
    return OB_OK;
}

extern "C" ob_status ob_cuda_count_zero(const float *v, size_t d, size_t *out, void *stream,
                                        ob_err *err)
{
    *out = 0;
    if (d == 0) return OB_OK;
    ob_status st = need(err, "ob_cuda_count_zero", v != NULL);
    if (st != OB_OK) return st;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned long long *count = NULL, host = 0;
    CUDA_CHECK(err, cudaMallocAsync((void **)&count, sizeof *count, s));
    cudaError_t rc = cudaMemsetAsync(count, 0, sizeof *count, s);
    if (rc == cudaSuccess) {
        count_zero_kernel<<<blocks_for(d), kThreads, 0, s>>>(v, d, count);
        rc = cudaGetLastError();
    }
    if (rc == cudaSuccess)
        rc = cudaMemcpyAsync(&host, count, sizeof host, cudaMemcpyDeviceToHost, s);
    cudaError_t frc = cudaFreeAsync(count, s);
    if (rc == cudaSuccess) rc = frc;
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(s);
    if (rc != cudaSuccess) return ob__cuda_fail(err, rc, "ob_cuda_count_zero", __FILE__, __LINE__);
    *out = (size_t)host;
    return OB_OK;
}
