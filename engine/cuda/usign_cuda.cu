/* CUDA kernels of the stochastic unit-sign message (onebit/compress.h), bitwise as the CPU's:
 * the draws and the quantiser are the element functions of src/usign_math.h (integer
 * arithmetic and one exact comparison), u = x + e is one IEEE single addition as on the CPU,
 * and the average is an exact sum of +-1 divided once by (float)nsrc.
 *
 * One warp per 32-element word: lane k holds element 32*w + k, so __ballot_sync of the
 * quantised bits is the packed word. n is a multiple of 32, so every warp is whole. */
#include "onebit/compress_cuda.h"

#include "cuda_internal.h"
#include "usign_math.h"

#include <cuda_runtime.h>

#include <stdint.h>

namespace
{

constexpr int kThreads = 256;
constexpr size_t kMaxGrid = (size_t)1 << 20; /* grid-stride loops cover the rest */
constexpr unsigned kFull = 0xffffffffu;

unsigned grid_for(size_t work, size_t per_block)
{
    size_t g = (work + per_block - 1) / per_block;
    if (g < 1) g = 1;
    return (unsigned)(g < kMaxGrid ? g : kMaxGrid);
}

__global__ void __launch_bounds__(kThreads)
    usign_compress_kernel(const float *x, size_t x_len, float *e, size_t n, uint64_t key,
                          uint64_t pos0, uint32_t *bits)
{
    const size_t words = n / 32, warps = (size_t)gridDim.x * (kThreads / 32);
    const unsigned lane = threadIdx.x % 32;
    for (size_t w = (size_t)blockIdx.x * (kThreads / 32) + threadIdx.x / 32; w < words;
         w += warps) {
        size_t i = 32 * w + lane;
        float ev = e[i];
        float u = i < x_len ? __fadd_rn(x[i], ev) : ev;
        uint32_t pos = ob__usign_bit(u, key, pos0 + i);
        uint32_t word = __ballot_sync(kFull, pos != 0);
        e[i] = __fsub_rn(u, pos ? 1.0f : -1.0f);
        if (lane == 0) bits[w] = word;
    }
}

/* out[i] = (sum over sources of +-1) / nsrc (divide) or the single source's +-1. */
__global__ void __launch_bounds__(kThreads)
    usign_average_kernel(const uint32_t *bits, size_t nsrc, size_t n, int divide, float fnsrc,
                         float *out)
{
    const size_t words = n / 32, stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        const size_t w = i / 32;
        const unsigned k = (unsigned)(i % 32);
        float acc = 0.0f;
        for (size_t s = 0; s < nsrc; s++)
            acc = __fadd_rn(acc, ((__ldg(bits + s * words + w) >> k) & 1u) ? 1.0f : -1.0f);
        out[i] = divide ? __fdiv_rn(acc, fnsrc) : acc;
    }
}

ob_status check_n(const char *fn, size_t n, ob_err *err)
{
    if (n % 32 != 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: n = %zu is not a multiple of 32", fn, n);
    return OB_OK;
}

} // namespace

extern "C" ob_status ob_cuda_usign_compress_ef(const float *x, size_t x_len, float *e, size_t n,
                                               uint64_t key, uint64_t pos0, void *bits,
                                               void *stream, ob_err *err)
{
    ob_status st = check_n("ob_cuda_usign_compress_ef", n, err);
    if (st != OB_OK) return st;
    if (x_len > n)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_usign_compress_ef: x_len %zu > n %zu",
                      x_len, n);
    if (n == 0) return OB_OK;
    if ((x_len > 0 && !x) || !e || !bits)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_usign_compress_ef: NULL buffer");
    unsigned grid = grid_for(n / 32, kThreads / 32);
    usign_compress_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(x, x_len, e, n, key, pos0,
                                                                       (uint32_t *)bits);
    CUDA_CHECK(err, cudaGetLastError());
    return OB_OK;
}

static ob_status launch_average(const char *fn, const void *bits, size_t nsrc, size_t n, int divide,
                                float *out, void *stream, ob_err *err)
{
    ob_status st = check_n(fn, n, err);
    if (st != OB_OK) return st;
    if (n == 0) return OB_OK;
    if (!bits || !out) return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: NULL buffer", fn);
    float fnsrc = (float)nsrc; /* the CPU's conversion, on the host */
    usign_average_kernel<<<grid_for(n, kThreads), kThreads, 0, (cudaStream_t)stream>>>(
        (const uint32_t *)bits, nsrc, n, divide, fnsrc, out);
    CUDA_CHECK(err, cudaGetLastError());
    return OB_OK;
}

extern "C" ob_status ob_cuda_usign_decode(const void *bits, size_t n, float *out, void *stream,
                                          ob_err *err)
{
    return launch_average("ob_cuda_usign_decode", bits, 1, n, 0, out, stream, err);
}

extern "C" ob_status ob_cuda_usign_average(const void *bits, size_t nsrc, size_t n, float *out,
                                           void *stream, ob_err *err)
{
    if (nsrc == 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_usign_average: no source messages");
    return launch_average("ob_cuda_usign_average", bits, nsrc, n, 1, out, stream, err);
}
