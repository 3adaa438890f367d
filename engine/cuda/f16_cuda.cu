/* CUDA kernels of the fp16 and fp8 gradient messages (onebit/compress.h, declared in
 * onebit/compress_cuda.h): the per-element arithmetic is src/f16_math.h, the same code the CPU
 * codec runs, so both give the same bits. A block's shift needs its largest |x|, and a maximum
 * does not depend on the order it is taken in: the warp's shuffles here and the CPU's loop
 * agree exactly (NaN is never the maximum on either, and a non-finite value sets the flag that
 * makes the shift 0). The decoded sum adds the sources in index order with __fadd_rn. */
#include "onebit/compress_cuda.h"

#include "cuda_internal.h"

#include "f16_math.h"

#include <cuda_runtime.h>

#include <stdint.h>

namespace
{

constexpr int kThreads = 256;
constexpr size_t kMaxGrid = (size_t)1 << 30; /* grid-stride loops cover the rest */

size_t grid_for(size_t work, size_t per_cta)
{
    size_t g = (work + per_cta - 1) / per_cta;
    if (g < 1) g = 1;
    return g < kMaxGrid ? g : kMaxGrid;
}

constexpr unsigned kWarps = kThreads / 32;

/* The two element codes: their storage type and the shared per-element math. */
struct Fp16 {
    typedef uint16_t Elem;
    static __device__ int shift(float m, int flag)
    {
        return ob__f16_shift(m, flag);
    }
    static __device__ Elem encode(float x, int s)
    {
        return ob__f16_encode_elem(x, s);
    }
    static __device__ float decode(Elem c, int s)
    {
        return ob__f16_decode_elem(c, s);
    }
};

struct Fp8 {
    typedef uint8_t Elem;
    static __device__ int shift(float m, int flag)
    {
        return ob__f8_shift(m, flag);
    }
    static __device__ Elem encode(float x, int s)
    {
        return ob__f8_encode_elem(x, s);
    }
    static __device__ float decode(Elem c, int s)
    {
        return ob__f8_decode_elem(c, s);
    }
};

/* One warp per scale block (grid-stride over blocks, the loop warp-uniform): the lanes stride
 * the block, the largest |x| and the non-finite flag are combined with shuffles. */
template <class Code>
__global__ void encode_kernel(const float *x, size_t x_len, size_t nblocks, unsigned B,
                              typename Code::Elem *h, int16_t *shifts)
{
    const unsigned lane = threadIdx.x & 31u;
    for (size_t b = blockIdx.x * (size_t)kWarps + threadIdx.x / 32u; b < nblocks;
         b += (size_t)gridDim.x * kWarps) {
        size_t lo = b * (size_t)B;
        size_t valid = x_len > lo ? (x_len - lo < B ? x_len - lo : B) : 0;
        float m = 0.0f;
        int flag = 0;
        for (size_t k = lane; k < valid; k += 32) {
            float a = fabsf(x[lo + k]);
            flag |= ob__f16_nonfinite(a);
            m = a > m ? a : m;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float om = __shfl_xor_sync(0xffffffffu, m, o);
            m = om > m ? om : m;
            flag |= __shfl_xor_sync(0xffffffffu, flag, o);
        }
        int shift = Code::shift(m, flag);
        if (lane == 0) shifts[b] = (int16_t)shift;
        for (size_t k = lane; k < B; k += 32)
            h[lo + k] = k < valid ? Code::encode(x[lo + k], shift) : (typename Code::Elem)0;
    }
}

/* out = decode(msg) + x over x_len elements, decode(msg) beyond (decode alone: x_len 0). One
 * warp per scale block, so each lane reads the block's shift once and no element index is
 * divided by B. */
template <class Code>
__global__ void decode_add_kernel(const typename Code::Elem *h, const int16_t *shifts,
                                  size_t nblocks, unsigned B, const float *x, size_t x_len,
                                  float *out)
{
    const unsigned lane = threadIdx.x & 31u;
    for (size_t b = blockIdx.x * (size_t)kWarps + threadIdx.x / 32u; b < nblocks;
         b += (size_t)gridDim.x * kWarps) {
        int shift = shifts[b];
        size_t lo = b * (size_t)B;
        for (size_t k = lo + lane; k < lo + B; k += 32) {
            float v = Code::decode(h[k], shift);
            out[k] = k < x_len ? __fadd_rn(v, x[k]) : v;
        }
    }
}

ob_status check(const char *fn, size_t n, size_t block, const void *in, const void *out,
                ob_err *err)
{
    if (block == 0 || block > 32768 || n % block != 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: n = %zu, block %zu", fn, n, block);
    if (n > 0 && (!in || !out)) return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: NULL buffer", fn);
    return OB_OK;
}

template <class Code>
ob_status encode(const char *fn, const float *x, size_t x_len, size_t n, size_t block, void *msg,
                 cudaStream_t s, ob_err *err)
{
    ob_status st = check(fn, n, block, msg, msg, err);
    if (st != OB_OK) return st;
    if (x_len > n || (x_len > 0 && !x))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: x_len %zu of %zu", fn, x_len, n);
    if (n == 0) return OB_OK;
    size_t nblocks = n / block;
    typename Code::Elem *h = (typename Code::Elem *)msg;
    int16_t *shifts = (int16_t *)((unsigned char *)msg + n * sizeof(typename Code::Elem));
    encode_kernel<Code><<<(unsigned)grid_for(nblocks, kWarps), kThreads, 0, s>>>(
        x, x_len, nblocks, (unsigned)block, h, shifts);
    CUDA_CHECK(err, cudaGetLastError());
    return OB_OK;
}

template <class Code>
ob_status decode_add(const char *fn, const void *msg, size_t n, size_t block, const float *x,
                     size_t x_len, float *out, cudaStream_t s, ob_err *err)
{
    ob_status st = check(fn, n, block, msg, out, err);
    if (st != OB_OK) return st;
    if (x_len > n || (x_len > 0 && !x))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: x_len %zu of %zu", fn, x_len, n);
    if (n == 0) return OB_OK;
    const typename Code::Elem *h = (const typename Code::Elem *)msg;
    const int16_t *shifts =
        (const int16_t *)((const unsigned char *)msg + n * sizeof(typename Code::Elem));
    size_t nblocks = n / block;
    decode_add_kernel<Code><<<(unsigned)grid_for(nblocks, kWarps), kThreads, 0, s>>>(
        h, shifts, nblocks, (unsigned)block, x, x_len, out);
    CUDA_CHECK(err, cudaGetLastError());
    return OB_OK;
}

} // namespace

extern "C" ob_status ob_cuda_f16_encode(const float *x, size_t x_len, size_t n, size_t block,
                                        void *msg, void *stream, ob_err *err)
{
    return encode<Fp16>("ob_cuda_f16_encode", x, x_len, n, block, msg, (cudaStream_t)stream, err);
}

extern "C" ob_status ob_cuda_f16_decode(const void *msg, size_t n, size_t block, float *out,
                                        void *stream, ob_err *err)
{
    return decode_add<Fp16>("ob_cuda_f16_decode", msg, n, block, NULL, 0, out, (cudaStream_t)stream,
                            err);
}

extern "C" ob_status ob_cuda_f16_decode_add(const void *msg, size_t n, size_t block, const float *x,
                                            size_t x_len, float *out, void *stream, ob_err *err)
{
    return decode_add<Fp16>("ob_cuda_f16_decode_add", msg, n, block, x, x_len, out,
                            (cudaStream_t)stream, err);
}

extern "C" ob_status ob_cuda_fcode_encode(ob_float_code code, const float *x, size_t x_len,
                                          size_t n, size_t block, void *msg, void *stream,
                                          ob_err *err)
{
    const char *fn = "ob_cuda_fcode_encode";
    cudaStream_t s = (cudaStream_t)stream;
    if (code == OB_CODE_FP8) return encode<Fp8>(fn, x, x_len, n, block, msg, s, err);
    if (code == OB_CODE_FP16) return encode<Fp16>(fn, x, x_len, n, block, msg, s, err);
    return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: code %d", fn, (int)code);
}

extern "C" ob_status ob_cuda_fcode_decode_add(ob_float_code code, const void *msg, size_t n,
                                              size_t block, const float *x, size_t x_len,
                                              float *out, void *stream, ob_err *err)
{
    const char *fn = "ob_cuda_fcode_decode_add";
    cudaStream_t s = (cudaStream_t)stream;
    if (code == OB_CODE_FP8) return decode_add<Fp8>(fn, msg, n, block, x, x_len, out, s, err);
    if (code == OB_CODE_FP16) return decode_add<Fp16>(fn, msg, n, block, x, x_len, out, s, err);
    return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: code %d", fn, (int)code);
}
