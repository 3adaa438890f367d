/* The device pass of softmax regression and the MLP (ob_model_create_cuda): the computation of
 * model_mlp.c and model_layers.c with cuBLAS GEMMs and a few CUDA kernels, enqueued on the
 * model's stream.
 *
 * One call: the batch goes through pinned staging to the device; per layer one sgemm
 * (y = x W^T) and one kernel adding the bias and applying the activation; the softmax
 * cross-entropy kernel writes the probabilities and, per row, the loss (in double) and whether
 * the argmax hit the label; logits, row losses and hits are copied back to pinned memory; the
 * backward pass runs (xent backward, then per layer dW = dY^T X, db = column sums of dY,
 * dX = dY W and the activation's derivative); one stream synchronisation; the host adds the
 * row losses in row order, as the CPU does.
 *
 * Agreement with the CPU (to float rounding, not bitwise):
 *   - cuBLAS runs in its default math mode: FP32 arithmetic, no TF32 (whose 10-bit mantissa
 *     would put the GEMMs 1e-3 away), so the GEMMs differ from OpenBLAS in summation order only;
 *   - the element-wise kernels use the CPU's formulas in the CPU's operation order, and this
 *     file is compiled with --fmad=false (engine/CMakeLists.txt) so that nvcc does not fuse
 *     a * b + c into an FMA the CPU build (ISO C, no contraction) does not do either; they
 *     differ from the CPU only where expf, tanhf and log differ by an ulp;
 *   - the argmax is the first maximum, with NaNs treated as the CPU's scan treats them;
 *   - row sums (softmax denominators, bias gradients) are float sums like the CPU's, in a
 *     different but fixed order.
 * Determinism: no atomics, every reduction has a fixed order, and cuBLAS gives bitwise the same
 * results run after run for one handle on one stream, so repeated calls give identical bits. */
#include "onebit/model.h"

#include "cuda_internal.h"
extern "C" {
#include "model_internal.h"
#include "model_math.h"
}

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The device state of one model. B = max_batch, D = input_dim, H_i = hidden[i],
 * K = num_classes; a call with n < B examples uses the first n rows of every buffer. */
struct ob__cls_cuda {
    cudaStream_t stream; /* borrowed from the caller */
    cublasHandle_t blas; /* bound to stream */
    void *dev_block;     /* the one device allocation; the device buffers below point into it */
    void *host_block;    /* the one pinned allocation; the h_ buffers below point into it */

    /* Device memory: */
    float *x;         // (B, D) the batch's inputs
    int32_t *y;       // (B) its labels
    ob__cls_acts a;   // pre, post, dpost (B, H_i); logits (B, K); probs (B, K) -> d logits
    double *row_loss; // (B) -log p[label] per row
    int32_t *row_hit; // (B) 1 where the argmax is the label

    /* Pinned host memory (device copies to and from it are truly asynchronous): */
    float *h_x;      // (B, D)
    int32_t *h_y;    // (B)
    float *h_logits; // (B, K) the model's logits as ob_model_logits returns them
    double *h_loss;  // (B)
    int32_t *h_hit;  // (B)
};

namespace
{

constexpr int kThreads = 256;                /* threads per block of the 1-D kernels */
constexpr size_t kMaxGrid = (size_t)1 << 20; /* grid-stride loops cover the rest */
constexpr int kColTile = 32;                 /* bias gradient: columns per thread block, */
constexpr int kRowLanes = 8;                 /* and threads sharing one column's rows */
constexpr int kBiasGradThreads = kColTile * kRowLanes;
constexpr unsigned kFull = 0xffffffffu;
constexpr size_t kAlign = 256; /* every buffer starts on a 256-byte boundary */
constexpr int kIdentity = -1;  /* the output layer's "activation" */

/* ---- errors ------------------------------------------------------------------------------ */

ob_status cublas_fail(ob_err *err, cublasStatus_t rc, const char *call, const char *file, int line)
{
    return ob_err_set(err, OB_ERR_CUDA, file, line, "%s failed: %s (%s)", call,
                       cublasGetStatusString(rc), cublasGetStatusName(rc));
}

#define CUBLAS_CHECK(err, call)                                                                    \
    do {                                                                                           \
        cublasStatus_t rc_ = (call);                                                               \
        if (rc_ != CUBLAS_STATUS_SUCCESS)                                                          \
            return cublas_fail((err), rc_, #call, __FILE__, __LINE__);                             \
    } while (0)

/* ---- shape helpers (ob__cls_num_hidden and ob__cls_fan_in are model_internal.h's) --------- */

/* Width coming out of layer i. */
size_t fan_out(const ob_model_config *cfg, size_t i)
{
    return i == ob__cls_num_hidden(cfg) ? cfg->num_classes : cfg->hidden[i];
}

/* ---- device code ------------------------------------------------------------------------- */

__device__ __forceinline__ size_t thread_index()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t thread_count()
{
    return (size_t)gridDim.x * blockDim.x;
}

__device__ __forceinline__ float act_forward(int act, float x)
{
    switch (act) {
    case OB_ACT_RELU:
        return x > 0.0f ? x : 0.0f;
    case OB_ACT_TANH:
        return tanhf(x);
    case OB_ACT_GELU:
        return ob__gelu(x); /* model_math.h: the CPU's arithmetic */
    }
    return x;
}

/* dy * act'(x), where y = act(x) from the forward pass (tanh' = 1 - y^2 reuses it). */
__device__ __forceinline__ float act_backward(int act, float dy, float x, float y)
{
    switch (act) {
    case OB_ACT_RELU:
        return x > 0.0f ? dy : 0.0f;
    case OB_ACT_TANH:
        return dy * (1.0f - y * y);
    case OB_ACT_GELU:
        return ob__gelu_grad(x, dy);
    }
    return dy;
}

/* pre (N, OC) += b (OC) on every row; post (N, OC) = act(pre) unless act is kIdentity. */
__global__ void __launch_bounds__(kThreads)
    bias_act_kernel(float *pre, float *post, const float *b, size_t n, size_t oc, int act)
{
    const size_t total = n * oc;
    for (size_t i = thread_index(); i < total; i += thread_count()) {
        float v = pre[i] + b[i % oc];
        pre[i] = v;
        if (act != kIdentity) post[i] = act_forward(act, v);
    }
}

/* d (count) = d * act'(pre), in place; post = act(pre). */
__global__ void __launch_bounds__(kThreads)
    act_backward_kernel(float *d, const float *pre, const float *post, size_t count, int act)
{
    for (size_t i = thread_index(); i < count; i += thread_count())
        d[i] = act_backward(act, d[i], pre[i], post[i]);
}

/* A float sum over the warp; every lane gets the same bits (a + b == b + a). */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(kFull, v, o);
    return v;
}

/* The index the CPU's scan `best = z[j] > z[best] ? j : best` (from best = 0) finds in z (K):
 * the first maximum; NaNs are never chosen, except that a NaN in z[0] stays the answer.
 * Called by a whole warp; every lane gets the answer. Each lane scans its columns in order,
 * then the lanes' candidates meet in a butterfly that prefers the larger value and, between
 * equal values, the smaller index: a total order, so all lanes agree. */
__device__ size_t row_argmax(const float *z, size_t k, unsigned lane)
{
    float bv = -INFINITY;
    unsigned long long bi = k; /* k: no candidate yet */
    for (size_t j = lane; j < k; j += 32) {
        float v = z[j];
        if (v > bv || (bi == k && v == v)) {
            bv = v;
            bi = j;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(kFull, bv, o);
        unsigned long long oi = __shfl_xor_sync(kFull, bi, o);
        if (oi < k && (bi == k || ov > bv || (ov == bv && oi < bi))) {
            bv = ov;
            bi = oi;
        }
    }
    float z0 = z[0];
    return (z0 != z0 || bi == k) ? 0 : (size_t)bi;
}

/* Softmax cross-entropy over logits (N, K), one warp per row, as ob__xent_forward: probs
 * (N, K); row_loss (N) = max + log(sum) - z[label] in double; row_hit (N) = argmax == label. */
__global__ void __launch_bounds__(kThreads)
    xent_forward_kernel(float *probs, double *row_loss, int32_t *row_hit, const float *logits,
                        const int32_t *labels, size_t n, size_t k)
{
    const unsigned lane = threadIdx.x % 32;
    const size_t warps = thread_count() / 32;
    /* r is the same for the whole warp, so every shuffle below runs with all 32 lanes. */
    for (size_t r = thread_index() / 32; r < n; r += warps) {
        const float *z = logits + r * k;
        float *p = probs + r * k;
        size_t best = row_argmax(z, k, lane);
        /* Shift by the maximum so exp never overflows. */
        float mx = z[best];
        float sum = 0.0f;
        for (size_t j = lane; j < k; j += 32) {
            p[j] = expf(z[j] - mx);
            sum += p[j];
        }
        sum = warp_sum(sum);
        float inv = 1.0f / sum;
        for (size_t j = lane; j < k; j += 32)
            p[j] *= inv;
        if (lane == 0) {
            size_t y = (size_t)labels[r];
            row_loss[r] = (double)mx + log((double)sum) - (double)z[y];
            row_hit[r] = best == y;
        }
    }
}

/* probs (N, K) -> d(scale * sum of losses) / d logits in place: (probs - onehot) * scale. */
__global__ void __launch_bounds__(kThreads)
    xent_backward_kernel(float *probs, const int32_t *labels, size_t n, size_t k, float scale)
{
    const size_t total = n * k;
    for (size_t i = thread_index(); i < total; i += thread_count()) {
        float v = probs[i];
        if (i % k == (size_t)labels[i / k]) v -= 1.0f;
        probs[i] = v * scale;
    }
}

/* db (OC) = column sums of dout (N, OC), overwritten. A block of kColTile x kRowLanes threads
 * takes kColTile adjacent columns (each row's loads are one coalesced segment); the kRowLanes
 * threads of a column add rows y, y + kRowLanes, ..., then one adds their partial sums in
 * order. A fixed order and no atomics: the same bits every run. */
__global__ void __launch_bounds__(kBiasGradThreads)
    bias_grad_kernel(float *db, const float *dout, size_t n, size_t oc)
{
    __shared__ float part[kRowLanes][kColTile];
    const size_t col = (size_t)blockIdx.x * kColTile + threadIdx.x;
    float s = 0.0f;
    if (col < oc)
        for (size_t r = threadIdx.y; r < n; r += kRowLanes)
            s += dout[r * oc + col];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < oc) {
        float t = part[0][threadIdx.x];
        for (int i = 1; i < kRowLanes; i++)
            t += part[i][threadIdx.x];
        db[col] = t;
    }
}

/* ---- host side: memory ------------------------------------------------------------------- */

/* Points *buf at the next count elements of base (when base is non-NULL) and advances *off,
 * keeping every buffer on a kAlign boundary. */
template <typename T> void place(T **buf, size_t count, char *base, size_t *off)
{
    if (base) *buf = reinterpret_cast<T *>(base + *off);
    *off += ob_round_up(count * sizeof(T), kAlign);
}

/* The device block's size table, in one place: with base == NULL it only measures, otherwise
 * it cuts base into c's device buffers. Returns the bytes the block needs. model.c bounds B and
 * every width by 2^24, so no size here comes near overflow. */
size_t layout_device(ob__cls_cuda *c, const ob_model_config *cfg, char *base)
{
    const size_t B = cfg->max_batch, K = cfg->num_classes;
    size_t off = 0;
    place(&c->x, B * cfg->input_dim, base, &off); // (B, D)
    place(&c->y, B, base, &off);                  // (B)
    for (size_t i = 0; i < ob__cls_num_hidden(cfg); i++) {
        place(&c->a.pre[i], B * cfg->hidden[i], base, &off);   // (B, H_i)
        place(&c->a.post[i], B * cfg->hidden[i], base, &off);  // (B, H_i)
        place(&c->a.dpost[i], B * cfg->hidden[i], base, &off); // (B, H_i)
    }
    place(&c->a.logits, B * K, base, &off); // (B, K)
    place(&c->a.probs, B * K, base, &off);  // (B, K)
    place(&c->row_loss, B, base, &off);     // (B)
    place(&c->row_hit, B, base, &off);      // (B)
    return off;
}

/* The same for the pinned block. */
size_t layout_host(ob__cls_cuda *c, const ob_model_config *cfg, char *base)
{
    const size_t B = cfg->max_batch;
    size_t off = 0;
    place(&c->h_x, B * cfg->input_dim, base, &off);        // (B, D)
    place(&c->h_y, B, base, &off);                         // (B)
    place(&c->h_logits, B * cfg->num_classes, base, &off); // (B, K)
    place(&c->h_loss, B, base, &off);                      // (B)
    place(&c->h_hit, B, base, &off);                       // (B)
    return off;
}

/* An allocation failure: OB_ERR_NOMEM when memory ran out, OB_ERR_CUDA otherwise. */
ob_status alloc_fail(ob_err *err, cudaError_t rc, const char *call, size_t bytes,
                     const ob_model_config *cfg, int line)
{
    (void)cudaGetLastError();
    return ob_err_set(err, rc == cudaErrorMemoryAllocation ? OB_ERR_NOMEM : OB_ERR_CUDA, __FILE__,
                       line, "%s(%zu bytes) for ob_model_config.max_batch = %zu failed: %s (%s)",
                       call, bytes, cfg->max_batch, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

ob_status alloc_blocks(ob__cls_cuda *c, const ob_model_config *cfg, ob_err *err)
{
    size_t dev_bytes = layout_device(c, cfg, NULL);
    cudaError_t rc = cudaMalloc(&c->dev_block, dev_bytes);
    if (rc != cudaSuccess) {
        c->dev_block = NULL;
        return alloc_fail(err, rc, "cudaMalloc", dev_bytes, cfg, __LINE__);
    }
    layout_device(c, cfg, (char *)c->dev_block);

    size_t host_bytes = layout_host(c, cfg, NULL);
    rc = cudaHostAlloc(&c->host_block, host_bytes, cudaHostAllocDefault);
    if (rc != cudaSuccess) {
        c->host_block = NULL;
        return alloc_fail(err, rc, "cudaHostAlloc", host_bytes, cfg, __LINE__);
    }
    layout_host(c, cfg, (char *)c->host_block);
    return OB_OK;
}

/* Says plainly that no device exists before anything is allocated. */
ob_status check_device(ob_err *err)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return ob_err_set(err, OB_ERR_CUDA, __FILE__, __LINE__,
                           "no usable CUDA device: cudaGetDeviceCount failed: %s (%s)",
                           cudaGetErrorString(rc), cudaGetErrorName(rc));
    }
    if (n < 1)
        return OB_ERR(err, OB_ERR_CUDA, "no usable CUDA device: cudaGetDeviceCount found none");
    return OB_OK;
}

ob_status create_blas(ob__cls_cuda *c, ob_err *err)
{
    CUBLAS_CHECK(err, cublasCreate(&c->blas));
    CUBLAS_CHECK(err, cublasSetStream(c->blas, c->stream));
    /* Default math: FP32 arithmetic throughout, never TF32 (see the top of this file). */
    CUBLAS_CHECK(err, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    return OB_OK;
}

/* ---- host side: the layers --------------------------------------------------------------- */

unsigned grid_for(size_t work)
{
    size_t g = (work + kThreads - 1) / kThreads;
    if (g < 1) g = 1;
    return (unsigned)(g < kMaxGrid ? g : kMaxGrid);
}

/* out = op(a) op(b) in cuBLAS's column-major terms, alpha 1 and beta 0 (out is overwritten and
 * never read). Our buffers are row-major, and a row-major (R, C) matrix is its column-major
 * transpose (C, R) with leading dimension C; the callers below spell out what that gives. */
ob_status gemm(const ob__cls_cuda *c, const char *what, cublasOperation_t ta, cublasOperation_t tb,
               size_t m, size_t n, size_t k, const float *a, size_t lda, const float *b, size_t ldb,
               float *out, size_t ldc, ob_err *err)
{
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t rc = cublasSgemm(c->blas, ta, tb, (int)m, (int)n, (int)k, &one, a, (int)lda, b,
                                    (int)ldb, &zero, out, (int)ldc);
    if (rc != CUBLAS_STATUS_SUCCESS)
        return ob_err_set(err, OB_ERR_CUDA, __FILE__, __LINE__,
                           "cublasSgemm(%s, m=%zu n=%zu k=%zu) failed: %s (%s)", what, m, n, k,
                           cublasGetStatusString(rc), cublasGetStatusName(rc));
    return OB_OK;
}

/* pre (N, OC) = inp (N, C) @ w^T + b with w (OC, C); post = act(pre) unless act is kIdentity.
 * Column-major: pre^T (OC, N) = w (OC, C) inp^T (C, N), where w's buffer is w^T (C, OC). */
ob_status linear_forward(const ob__cls_cuda *c, float *pre, float *post, const float *inp,
                         const float *w, const float *b, size_t n, size_t cin, size_t oc, int act,
                         ob_err *err)
{
    ob_status st =
        gemm(c, "y = x W^T", CUBLAS_OP_T, CUBLAS_OP_N, oc, n, cin, w, cin, inp, cin, pre, oc, err);
    if (st) return st;
    bias_act_kernel<<<grid_for(n * oc), kThreads, 0, c->stream>>>(pre, post, b, n, oc, act);
    CUDA_CHECK(err, cudaGetLastError());
    return OB_OK;
}

/* dw (OC, C) = dout^T (OC, N) @ inp (N, C) and db (OC) = column sums of dout, both overwritten;
 * then, when dinp is non-NULL, dinp (N, C) = dout @ w (OC, C).
 * Column-major: dw^T (C, OC) = inp^T (C, N) dout (N, OC), with dout's buffer dout^T (OC, N)
 * read transposed; dinp^T (C, N) = w^T (C, OC) dout^T (OC, N). */
ob_status linear_backward(const ob__cls_cuda *c, float *dinp, float *dw, float *db,
                          const float *dout, const float *inp, const float *w, size_t n, size_t cin,
                          size_t oc, ob_err *err)
{
    ob_status st = gemm(c, "dW = dY^T X", CUBLAS_OP_N, CUBLAS_OP_T, cin, oc, n, inp, cin, dout, oc,
                        dw, cin, err);
    if (st) return st;
    dim3 block(kColTile, kRowLanes);
    unsigned grid = (unsigned)((oc + kColTile - 1) / kColTile); /* oc <= 2^24 */
    bias_grad_kernel<<<grid, block, 0, c->stream>>>(db, dout, n, oc);
    CUDA_CHECK(err, cudaGetLastError());
    if (!dinp) return OB_OK;
    return gemm(c, "dX = dY W", CUBLAS_OP_N, CUBLAS_OP_N, cin, n, oc, w, cin, dout, oc, dinp, cin,
                err);
}

/* ---- host side: one call ----------------------------------------------------------------- */

/* Copies the batch's x (N, D) and y (N) through the pinned staging to the device. The previous
 * call ended with a synchronisation, so the staging is free to overwrite. */
ob_status upload_batch(ob__cls_cuda *c, const ob_batch *batch, ob_err *err)
{
    size_t x_bytes = batch->n * batch->input_dim * sizeof(float);
    size_t y_bytes = batch->n * sizeof(int32_t);
    memcpy(c->h_x, batch->x, x_bytes);
    memcpy(c->h_y, batch->y, y_bytes);
    CUDA_CHECK(err, cudaMemcpyAsync(c->x, c->h_x, x_bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(err, cudaMemcpyAsync(c->y, c->h_y, y_bytes, cudaMemcpyHostToDevice, c->stream));
    return OB_OK;
}

/* Every layer, then the softmax cross-entropy, on the first n rows; then the logits, row
 * losses and hits to the pinned staging. */
ob_status forward(const ob_model *m, const float *params, size_t n, ob_err *err)
{
    const ob_model_config *cfg = &m->cfg;
    const ob_model_tensor *t = m->tensors; /* weight of layer i at 2i, bias at 2i + 1 */
    ob__cls_cuda *c = m->cuda;
    const size_t nh = ob__cls_num_hidden(cfg), k = cfg->num_classes;

    const float *inp = c->x; // (n, fan_in)
    for (size_t i = 0; i <= nh; i++) {
        float *pre = i == nh ? c->a.logits : c->a.pre[i];
        float *post = i == nh ? NULL : c->a.post[i];
        int act = i == nh ? kIdentity : (int)cfg->activation;
        ob_status st = linear_forward(c, pre, post, inp, params + t[2 * i].offset,
                                      params + t[2 * i + 1].offset, n, ob__cls_fan_in(cfg, i),
                                      fan_out(cfg, i), act, err);
        if (st) return st;
        inp = post;
    }

    /* One warp per row. */
    unsigned grid = grid_for(n * 32);
    xent_forward_kernel<<<grid, kThreads, 0, c->stream>>>(c->a.probs, c->row_loss, c->row_hit,
                                                          c->a.logits, c->y, n, k);
    CUDA_CHECK(err, cudaGetLastError());
    CUDA_CHECK(err, cudaMemcpyAsync(c->h_logits, c->a.logits, n * k * sizeof(float),
                                    cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(err, cudaMemcpyAsync(c->h_loss, c->row_loss, n * sizeof(double),
                                    cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(err, cudaMemcpyAsync(c->h_hit, c->row_hit, n * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, c->stream));
    return OB_OK;
}

/* From the loss down, as ob__cls_forward_backward: layer i's input gradient lands in
 * dpost[i - 1] and becomes d pre[i - 1] in place. Every tensor of grad is overwritten. */
ob_status backward(const ob_model *m, const float *params, float *grad, size_t n, ob_err *err)
{
    const ob_model_config *cfg = &m->cfg;
    const ob_model_tensor *t = m->tensors;
    ob__cls_cuda *c = m->cuda;
    const size_t nh = ob__cls_num_hidden(cfg), k = cfg->num_classes;

    float scale = 1.0f / (float)n; /* d mean / d sum, rounded as the CPU rounds it */
    xent_backward_kernel<<<grid_for(n * k), kThreads, 0, c->stream>>>(c->a.probs, c->y, n, k,
                                                                      scale);
    CUDA_CHECK(err, cudaGetLastError());

    const float *dout = c->a.probs; // (n, fan_out)
    for (size_t i = nh + 1; i-- > 0;) {
        size_t cin = ob__cls_fan_in(cfg, i);
        const float *inp = i == 0 ? c->x : c->a.post[i - 1];
        float *dinp = i == 0 ? NULL : c->a.dpost[i - 1]; /* the input needs no gradient */
        ob_status st =
            linear_backward(c, dinp, grad + t[2 * i].offset, grad + t[2 * i + 1].offset, dout, inp,
                            params + t[2 * i].offset, n, cin, fan_out(cfg, i), err);
        if (st) return st;
        if (i == 0) break;
        act_backward_kernel<<<grid_for(n * cin), kThreads, 0, c->stream>>>(
            dinp, c->a.pre[i - 1], c->a.post[i - 1], n * cin, (int)cfg->activation);
        CUDA_CHECK(err, cudaGetLastError());
        dout = dinp;
    }
    return OB_OK;
}

ob_status enqueue(ob_model *m, const float *params, const ob_batch *batch, float *grad, ob_err *err)
{
    ob_status st = upload_batch(m->cuda, batch, err);
    if (st) return st;
    st = forward(m, params, batch->n, err);
    if (st || !grad) return st;
    return backward(m, params, grad, batch->n, err);
}

} // namespace

/* ---- the hooks of model_internal.h ------------------------------------------------------- */

extern "C" ob_status ob__cls_cuda_create(ob_model *m, void *stream, ob_err *err)
{
    ob_status st = check_device(err);
    if (st) return st;
    ob__cls_cuda *c = (ob__cls_cuda *)calloc(1, sizeof *c);
    if (!c) return OB_ERR(err, OB_ERR_NOMEM, "cannot allocate the model's device state");
    c->stream = (cudaStream_t)stream;
    st = alloc_blocks(c, &m->cfg, err);
    if (st) goto fail;
    st = create_blas(c, err);
    if (st) goto fail;
    m->cuda = c;
    m->logits = c->h_logits;
    return OB_OK;

fail:
    ob__cls_cuda_destroy(c);
    return st;
}

extern "C" void ob__cls_cuda_destroy(ob__cls_cuda *c)
{
    if (!c) return;
    /* Every call ends synchronised, so nothing in flight still uses these buffers. */
    if (c->blas) cublasDestroy(c->blas);
    if (c->dev_block) cudaFree(c->dev_block);
    if (c->host_block) cudaFreeHost(c->host_block);
    free(c);
}

extern "C" ob_status ob__cls_cuda_forward_backward(ob_model *m, const float *params,
                                                   const ob_batch *batch, float *grad,
                                                   ob_model_result *res, ob_err *err)
{
    ob__cls_cuda *c = m->cuda;
    ob_status st = enqueue(m, params, batch, grad, err);
    if (st) {
        /* Leave nothing in flight that reads the staging the next call overwrites. */
        (void)cudaStreamSynchronize(c->stream);
        (void)cudaGetLastError();
        return st;
    }
    CUDA_CHECK(err, cudaStreamSynchronize(c->stream));

    /* The CPU's order: row losses added one after the other in double. */
    double total = 0.0;
    size_t hits = 0;
    for (size_t i = 0; i < batch->n; i++) {
        total += c->h_loss[i];
        hits += c->h_hit[i] != 0;
    }
    res->loss = total / (double)batch->n;
    res->correct = hits;
    res->count = batch->n;
    return OB_OK;
}
