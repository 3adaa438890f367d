/* CUDA kernels of the 1-bit compression: the contracts and packed layout of onebit/compress.h
 * for device memory (declared in onebit/compress_cuda.h), bitwise identical to the CPU kernels.
 *
 * Compression of blocks of up to 2048 elements runs one warp per scale block
 * (compress_warp_kernel, below: the block's values in the warp's registers, no barrier);
 * larger blocks run one group of warps per scale block, one thread block each
 * (compress_kernel). Warp w of a group takes the 32-element words
 * w, w + G, w + 2G, ... of its block: lane k holds element 32*word + k, so one __ballot_sync of
 * "u >= 0" is the packed sign word (bit k = lane k) and every load and store of the warp is one
 * 128-byte line. The values stay in registers between the norm and the quantisation (for
 * B <= 8192; larger blocks read x and e twice).
 *
 * Bitwise agreement with the CPU:
 *   - every float and double operation is a _rn intrinsic, which nvcc never contracts into an
 *     FMA, so the results do not depend on --fmad;
 *   - u = x + e is added only inside x_len, as the CPU does (so a -0.0 error in the padding
 *     stays -0.0);
 *   - the block norm is a sum of B non-negative doubles. The CPU adds them in eight lanes in a
 *     fixed order, the GPU in a tree; the two sums differ by at most 2*(B-1)*2^-53 of the
 *     sum. The scale (a monotone function of the sum, rounded to float) is the CPU's whenever
 *     sum*(1 -+ B*2^-50) give the same float. In the rare block where they do not (about
 *     B * 2^-27 of blocks, or NaN/Inf), one warp recomputes the sum in the CPU's exact order
 *     (block_norm in src/compress.c: lane l sums elements l, l+8, ... sequentially, then
 *     ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7))) — keep the two in step if either changes;
 *   - decompress_average adds the sources in index order and divides by (float)nsrc, as the
 *     CPU does. */
#include "onebit/compress_cuda.h"

#include "cuda_internal.h"

#include <cuda_runtime.h>

#include <stdint.h>

namespace
{

constexpr int kWarps = 8; /* warps per thread block of the compression kernel */
constexpr unsigned kFull = 0xffffffffu;
constexpr int kDecodeThreads = 256;
constexpr size_t kMaxGrid = (size_t)1 << 30; /* grid-stride loops cover the rest */

/* How the compression kernel cuts a scale block of B elements (W = B/32 words) among warps:
 * `wpg` warps per scale block, `spc` scale blocks per thread block, `wpw` words per warp. */
struct geometry {
    unsigned B, W, wpg, spc, wpw;
};

geometry make_geometry(size_t block)
{
    geometry g;
    g.B = (unsigned)block;
    g.W = g.B / 32;
    g.wpg = g.W >= (unsigned)kWarps ? (unsigned)kWarps : g.W;
    g.spc = (unsigned)kWarps / g.wpg;
    g.wpw = (g.W + g.wpg - 1) / g.wpg;
    return g;
}

/* --- device helpers ---------------------------------------------------------------------- */

/* u = x + e inside x, e in the padding (x_len <= i), without touching memory it must not. */
__device__ __forceinline__ float load_u(const float *x, size_t x_len, const float *e, size_t i)
{
    float ev = e[i];
    return i < x_len ? __fadd_rn(x[i], ev) : ev;
}

/* |u| or u^2 as a double: both exact. */
__device__ __forceinline__ double norm_term(float v, int l2)
{
    double d = (double)v;
    return l2 ? __dmul_rn(d, d) : fabs(d);
}

/* The CPU's scale of a block from its norm sum: (float)(acc / B) or (float)sqrt(acc / B). */
__device__ __forceinline__ float block_scale(double acc, unsigned B, int l2)
{
    double m = __ddiv_rn(acc, (double)B);
    return __double2float_rn(l2 ? __dsqrt_rn(m) : m);
}

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = __dadd_rn(v, __shfl_down_sync(kFull, v, o));
    return v;
}

/* The CPU's exact summation order for one block (see the top of this file). Called by a whole
 * warp; the result is valid in lane 0. */
__device__ float serial_scale(const float *x, size_t x_len, const float *e, size_t off, unsigned B,
                              int l2, unsigned lane)
{
    double a = 0.0;
    if (lane < 8)
        for (unsigned i = lane; i < B; i += 8)
            a = __dadd_rn(a, norm_term(load_u(x, x_len, e, off + i), l2));
    /* offsets 1, 2, 4: lane 0 ends with ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)) */
    for (int o = 1; o < 8; o <<= 1)
        a = __dadd_rn(a, __shfl_down_sync(kFull, a, o));
    return block_scale(a, B, l2);
}

/* Signs of one word to the packed bits, u - q to the error. Called by a whole warp. */
__device__ __forceinline__ void quantize_word(float v, float s, float *e, uint32_t *bits,
                                              size_t off, unsigned w, unsigned lane)
{
    bool pos = v >= 0.0f; /* true for +0 and -0: sign(0) = +1 */
    uint32_t word = __ballot_sync(kFull, pos);
    e[off + 32 * (size_t)w + lane] = __fsub_rn(v, pos ? s : -s);
    if (lane == 0) bits[off / 32 + w] = word;
}

/* Error-feedback compression of nblocks scale blocks. J: words per warp kept in registers
 * (J >= g.wpw), or 0 to read x and e again for the quantisation. Thread-block wide branches
 * and loop bounds are uniform, so every __syncthreads is reached by all threads; `active`
 * and `w < g.W` are uniform per warp, so every warp primitive runs with all 32 lanes. */
template <int J>
__global__ void __launch_bounds__(kWarps * 32)
    compress_kernel(const float *x, size_t x_len, float *e, size_t nblocks, geometry g, int l2,
                    uint32_t *bits, float *scales)
{
    __shared__ double warp_part[kWarps];
    __shared__ float group_scale[kWarps];
    __shared__ int group_fallback[kWarps];

    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned grp = warp / g.wpg, gw = warp % g.wpg;
    const double margin = (double)g.B * 0x1p-50;

    for (size_t base = (size_t)blockIdx.x * g.spc; base < nblocks;
         base += (size_t)gridDim.x * g.spc) {
        const size_t b = base + grp, off = b * g.B;
        const bool active = b < nblocks;

        /* 1. u = x + e and this warp's part of the block norm */
        float u[J > 0 ? J : 1];
        double acc = 0.0;
        if (active) {
            if constexpr (J > 0) {
#pragma unroll
                for (int j = 0; j < J; j++) {
                    unsigned w = (unsigned)j * g.wpg + gw;
                    if (w < g.W) {
                        u[j] = load_u(x, x_len, e, off + 32 * (size_t)w + lane);
                        acc = __dadd_rn(acc, norm_term(u[j], l2));
                    }
                }
            } else {
                for (unsigned w = gw; w < g.W; w += g.wpg)
                    acc = __dadd_rn(
                        acc, norm_term(load_u(x, x_len, e, off + 32 * (size_t)w + lane), l2));
            }
        }
        acc = warp_sum(acc);
        if (lane == 0) warp_part[warp] = acc;
        __syncthreads();

        /* 2. the group's first thread: the scale, and whether it is certainly the CPU's */
        if (gw == 0 && lane == 0) {
            int fallback = 0;
            if (active) {
                double t = 0.0;
                for (unsigned k = 0; k < g.wpg; k++)
                    t = __dadd_rn(t, warp_part[warp + k]);
                double d = __dmul_rn(t, margin);
                float lo = block_scale(__dsub_rn(t, d), g.B, l2);
                float hi = block_scale(__dadd_rn(t, d), g.B, l2);
                group_scale[grp] = block_scale(t, g.B, l2);
                fallback = !(lo == hi); /* also for NaN */
            }
            group_fallback[grp] = fallback;
        }
        __syncthreads();
        int any = 0;
        for (unsigned k = 0; k < g.spc; k++)
            any |= group_fallback[k];
        if (any) { /* rare: recompute in the CPU's order */
            if (active && gw == 0 && group_fallback[grp]) {
                float s = serial_scale(x, x_len, e, off, g.B, l2, lane);
                if (lane == 0) group_scale[grp] = s;
            }
            __syncthreads();
        }

        /* 3. signs, error, scale */
        if (active) {
            const float s = group_scale[grp];
            if constexpr (J > 0) {
#pragma unroll
                for (int j = 0; j < J; j++) {
                    unsigned w = (unsigned)j * g.wpg + gw;
                    if (w < g.W) quantize_word(u[j], s, e, bits, off, w, lane);
                }
            } else {
                for (unsigned w = gw; w < g.W; w += g.wpg)
                    quantize_word(load_u(x, x_len, e, off + 32 * (size_t)w + lane), s, e, bits, off,
                                  w, lane);
            }
            if (gw == 0 && lane == 0) scales[b] = s;
        }
    }
}

/* --- one warp per scale block (B <= 2048) --------------------------------------------------
 * A warp owns a whole scale block: lane k holds elements 32 j + k (j < W) in registers, so the
 * block norm is a warp reduction, the scale needs no barrier and the warps of a thread block
 * never wait for each other: while one warp computes its scale, the others' loads are in
 * flight. Every lane issues all of its block's loads at once (up to 64 x and 64 e). The
 * values come from a source: x + e (plain_src), or the average of nsrc packed messages + e
 * (average_src, the server's decompress_average fused into its recompression: the average
 * is never written to memory). */

constexpr int kWarpCta = 4;            /* warps (scale blocks) per thread block */
constexpr int kWarpCtaPerSm = 3;       /* at least 12 warps an SM: at most 168 registers */
constexpr unsigned kWarpMaxWords = 64; /* B <= 2048 */
static_assert(32 * kWarpMaxWords == OB_CUDA_AVERAGE_COMPRESS_MAX_BLOCK, "the fused server step");

/* The CPU's scale of a block from its norm sum; for a power-of-two B, acc * (1/B) is the
 * quotient exactly (acc is 0 or at least 2^-298, so the product stays a normal double). */
__device__ __forceinline__ float scale_of(double acc, unsigned B, double inv_B, int l2)
{
    double m = inv_B != 0.0 ? __dmul_rn(acc, inv_B) : __ddiv_rn(acc, (double)B);
    return __double2float_rn(l2 ? __dsqrt_rn(m) : m);
}

/* Word j of a block of W words exists: always where W is the template's K (FULL), so the
 * loops below are straight-line code whose loads the compiler issues ahead of their uses. */
template <int K, bool FULL> __device__ __forceinline__ bool live(int j, unsigned W)
{
    return FULL || (unsigned)j < W;
}

/* The block's scale with its norm summed in the CPU's exact order (block_norm in
 * src/compress.c: CPU lane l adds elements l, l + 8, l + 16, ... in index order, then
 * ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))). Element 32 j + k sits in lane k's u[j],
 * so lane l < 8 takes u[j] of lanes l, l + 8, l + 16, l + 24 in turn. Called by the whole
 * warp; every lane returns the scale. */
template <int K, bool FULL>
__device__ float cpu_order_scale(const float (&u)[K], unsigned W, unsigned B, double inv_B, int l2,
                                 unsigned lane)
{
    const unsigned l = lane & 7u;
    double a = 0.0;
#pragma unroll
    for (int j = 0; j < K; j++) {
        if (!live<K, FULL>(j, W)) continue;
        const float v1 = __shfl_sync(kFull, u[j], (int)(l + 8));
        const float v2 = __shfl_sync(kFull, u[j], (int)(l + 16));
        const float v3 = __shfl_sync(kFull, u[j], (int)(l + 24));
        a = __dadd_rn(a, norm_term(u[j], l2));
        a = __dadd_rn(a, norm_term(v1, l2));
        a = __dadd_rn(a, norm_term(v2, l2));
        a = __dadd_rn(a, norm_term(v3, l2));
    }
    for (int o = 1; o < 8; o <<= 1)
        a = __dadd_rn(a, __shfl_down_sync(kFull, a, o));
    return __shfl_sync(kFull, scale_of(a, B, inv_B, l2), 0);
}

/* x + e, x inside x_len and e alone in the padding (load_u). All loads first, then the sums. */
struct plain_src {
    const float *x;
    size_t x_len;

    template <int K, bool FULL>
    __device__ __forceinline__ void load(size_t, size_t off, unsigned W, unsigned lane,
                                         const float *e, float (&u)[K]) const
    {
        float xv[K];
        const bool inside = off + 32 * (size_t)W <= x_len; /* uniform: the whole block in x */
#pragma unroll
        for (int j = 0; j < K; j++) {
            const size_t i = off + 32 * (size_t)j + lane;
            if (live<K, FULL>(j, W)) {
                u[j] = e[i];
                xv[j] = inside || i < x_len ? x[i] : 0.0f;
            }
        }
#pragma unroll
        for (int j = 0; j < K; j++) {
            const size_t i = off + 32 * (size_t)j + lane;
            if (live<K, FULL>(j, W) && (inside || i < x_len)) u[j] = __fadd_rn(xv[j], u[j]);
        }
    }
};

/* The average of nsrc packed messages of the vector (decode_kernel's arithmetic: the sources
 * added in order, then one division by nsrc) + e. Lane k loads words k, k + 32 of each
 * message (one line each) and hands word j to every lane with a shuffle. */
struct average_src {
    const unsigned char *packed;
    size_t msg, nsrc, scale_off;
    float fnsrc;

    template <int K, bool FULL>
    __device__ __forceinline__ void load(size_t b, size_t off, unsigned W, unsigned lane,
                                         const float *e, float (&u)[K]) const
    {
        constexpr int Q = (K + 31) / 32;
        float ev[K];
#pragma unroll
        for (int j = 0; j < K; j++)
            if (live<K, FULL>(j, W)) ev[j] = e[off + 32 * (size_t)j + lane];
        for (size_t src = 0; src < nsrc; src++) {
            const unsigned char *p = packed + src * msg;
            const float s = __ldg((const float *)(p + scale_off) + b);
            const uint32_t *words = (const uint32_t *)p + off / 32;
            uint32_t held[Q];
#pragma unroll
            for (int q = 0; q < Q; q++) {
                const unsigned w = 32 * (unsigned)q + lane;
                held[q] = w < W ? __ldg(words + w) : 0u; /* W < 32: lanes past W load nothing */
            }
#pragma unroll
            for (int j = 0; j < K; j++) {
                if (!live<K, FULL>(j, W)) continue;
                const uint32_t word = __shfl_sync(kFull, held[j / 32], j % 32);
                const float d = ((word >> lane) & 1u) ? s : -s;
                u[j] = src == 0 ? d : __fadd_rn(u[j], d);
            }
        }
#pragma unroll
        for (int j = 0; j < K; j++)
            if (live<K, FULL>(j, W)) u[j] = __fadd_rn(__fdiv_rn(u[j], fnsrc), ev[j]);
    }
};

/* Error-feedback compression of nblocks scale blocks of B = 32 W elements (W <= K; FULL:
 * W == K), one warp each. The loop over blocks and every branch on W or on the scale are
 * uniform per warp, so every warp primitive runs with all 32 lanes. */
template <int K, bool FULL, class Src>
__global__ void __launch_bounds__(kWarpCta * 32, kWarpCtaPerSm)
    compress_warp_kernel(Src src, float *e, size_t nblocks, unsigned B, double inv_B, int l2,
                         uint32_t *bits, float *scales)
{
    const unsigned lane = threadIdx.x % 32, W = FULL ? (unsigned)K : B / 32;
    const double margin = (double)B * 0x1p-50;
    const size_t step = (size_t)gridDim.x * kWarpCta;
    for (size_t b = (size_t)blockIdx.x * kWarpCta + threadIdx.x / 32; b < nblocks; b += step) {
        const size_t off = b * B;
        float u[K];
        src.template load<K, FULL>(b, off, W, lane, e, u);
        double acc = 0.0;
#pragma unroll
        for (int j = 0; j < K; j++)
            if (live<K, FULL>(j, W)) acc = __dadd_rn(acc, norm_term(u[j], l2));
        acc = __shfl_sync(kFull, warp_sum(acc), 0);
        /* The tree sum's scale is the CPU's unless sum * (1 -+ B 2^-50) round apart (or NaN). */
        const double d = __dmul_rn(acc, margin);
        float s = scale_of(acc, B, inv_B, l2);
        const float lo = scale_of(__dsub_rn(acc, d), B, inv_B, l2);
        const float hi = scale_of(__dadd_rn(acc, d), B, inv_B, l2);
        if (!(lo == hi)) s = cpu_order_scale<K, FULL>(u, W, B, inv_B, l2, lane);
#pragma unroll
        for (int j = 0; j < K; j++) {
            if (!live<K, FULL>(j, W)) continue;
            const bool pos = u[j] >= 0.0f; /* true for +0 and -0: sign(0) = +1 */
            const uint32_t word = __ballot_sync(kFull, pos);
            e[off + 32 * (size_t)j + lane] = __fsub_rn(u[j], pos ? s : -s);
            if (lane == ((unsigned)j & 31u)) bits[off / 32 + j] = word;
        }
        if (lane == 0) scales[b] = s;
    }
}

/* out = decode(message 0) [+ decode(message i) ...] [/ nsrc] over the first `limit` of n
 * elements, V consecutive elements per thread (V = 4: one float4 store; V divides 32, so the V
 * elements share a word and a scale). The messages are nsrc consecutive packed messages of
 * `msg` bytes. */
template <int V>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_kernel(const unsigned char *packed, size_t msg, size_t nsrc, size_t n, size_t limit,
                  unsigned B, int divide, float fnsrc, float *out)
{
    const size_t items = (limit + V - 1) / V, stride = (size_t)gridDim.x * blockDim.x;
    const size_t scale_off = n / 32 * sizeof(uint32_t);
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < items; t += stride) {
        const size_t i0 = t * V, wi = i0 / 32, blk = i0 / B;
        const unsigned shift = (unsigned)(i0 % 32);
        float acc[V];
        if (nsrc == 0) { /* as the CPU: nothing decoded, out / 0 (never with a limit) */
#pragma unroll
            for (int v = 0; v < V; v++)
                acc[v] = out[i0 + v];
        }
        for (size_t src = 0; src < nsrc; src++) {
            const unsigned char *p = packed + src * msg;
            const uint32_t word = __ldg((const uint32_t *)p + wi) >> shift;
            const float s = __ldg((const float *)(p + scale_off) + blk);
#pragma unroll
            for (int v = 0; v < V; v++) {
                float d = ((word >> v) & 1u) ? s : -s;
                acc[v] = src == 0 ? d : __fadd_rn(acc[v], d);
            }
        }
        if (divide) {
#pragma unroll
            for (int v = 0; v < V; v++)
                acc[v] = __fdiv_rn(acc[v], fnsrc);
        }
        bool whole = i0 + V <= limit;
        if constexpr (V == 4) {
            if (whole) *(float4 *)(out + i0) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        }
        if (V != 4 || !whole) {
#pragma unroll
            for (int v = 0; v < V; v++)
                if (i0 + v < limit) out[i0 + v] = acc[v];
        }
    }
}

/* --- host side --------------------------------------------------------------------------- */

ob_status check_layout(const char *fn, size_t n, size_t block, ob_err *err)
{
    if (block == 0 || block % 32 != 0 || block > ((size_t)1 << 30))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "%s: block %zu must be a positive multiple of 32 (at most 2^30)", fn, block);
    if (n % block != 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: n = %zu is not a multiple of block %zu", fn, n,
                      block);
    return OB_OK;
}

size_t grid_for(size_t work, size_t per_cta)
{
    size_t g = (work + per_cta - 1) / per_cta;
    if (g < 1) g = 1;
    return g < kMaxGrid ? g : kMaxGrid;
}

/* Launches the warp kernel for blocks of B <= 2048 with the register count their W needs. */
template <class Src>
ob_status launch_compress_warp(Src src, float *e, size_t n, unsigned B, int l2, void *packed,
                               cudaStream_t s, ob_err *err)
{
    const size_t nblocks = n / B;
    const unsigned W = B / 32;
    const double inv_B = (B & (B - 1)) == 0 ? 1.0 / (double)B : 0.0;
    uint32_t *bits = (uint32_t *)packed;
    float *scales = (float *)((char *)packed + n / 32 * sizeof(uint32_t));
    const unsigned grid = (unsigned)grid_for(nblocks, kWarpCta);
#define OB_LAUNCH_WARP(K)                                                                          \
    do {                                                                                           \
        if (W == (K))                                                                              \
            compress_warp_kernel<K, true, Src>                                                     \
                <<<grid, kWarpCta * 32, 0, s>>>(src, e, nblocks, B, inv_B, l2, bits, scales);      \
        else                                                                                       \
            compress_warp_kernel<K, false, Src>                                                    \
                <<<grid, kWarpCta * 32, 0, s>>>(src, e, nblocks, B, inv_B, l2, bits, scales);      \
    } while (0)
    if (W <= 1)
        OB_LAUNCH_WARP(1);
    else if (W <= 2)
        OB_LAUNCH_WARP(2);
    else if (W <= 4)
        OB_LAUNCH_WARP(4);
    else if (W <= 8)
        OB_LAUNCH_WARP(8);
    else if (W <= 16)
        OB_LAUNCH_WARP(16);
    else if (W <= 32)
        OB_LAUNCH_WARP(32);
    else
        OB_LAUNCH_WARP(64);
#undef OB_LAUNCH_WARP
    CUDA_CHECK(err, cudaGetLastError());
    return OB_OK;
}

ob_status launch_decode(const void *packed, size_t nsrc, size_t n, size_t limit, size_t block,
                        int divide, float *out, cudaStream_t s, ob_err *err)
{
    size_t msg = ob_packed_bytes(n, block);
    const unsigned char *p = (const unsigned char *)packed;
    unsigned B = (unsigned)block;
    float fnsrc = (float)nsrc; /* the CPU's conversion, on the host */
    if ((uintptr_t)out % 16 == 0) {
        size_t grid = grid_for((limit + 3) / 4, kDecodeThreads);
        decode_kernel<4><<<(unsigned)grid, kDecodeThreads, 0, s>>>(p, msg, nsrc, n, limit, B,
                                                                   divide, fnsrc, out);
    } else {
        size_t grid = grid_for(limit, kDecodeThreads);
        decode_kernel<1><<<(unsigned)grid, kDecodeThreads, 0, s>>>(p, msg, nsrc, n, limit, B,
                                                                   divide, fnsrc, out);
    }
    CUDA_CHECK(err, cudaGetLastError());
    return OB_OK;
}

} // namespace

/* --- the API of onebit/compress_cuda.h ------------------------------------------------------ */

extern "C" int ob_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: not an error for the caller */
        return 0;
    }
    return n;
}

extern "C" ob_status ob_cuda_compress_ef(const float *x, size_t x_len, float *e, size_t n,
                                         size_t block, ob_scale_kind kind, void *packed,
                                         void *stream, ob_err *err)
{
    ob_status st = check_layout("ob_cuda_compress_ef", n, block, err);
    if (st != OB_OK) return st;
    if (x_len > n)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_compress_ef: x_len %zu > n %zu", x_len, n);
    if (kind != OB_SCALE_L1 && kind != OB_SCALE_L2)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_compress_ef: scale kind %d", (int)kind);
    if (n == 0) return OB_OK;
    if ((x_len > 0 && !x) || !e || !packed)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_compress_ef: NULL buffer");

    if (block <= 32 * kWarpMaxWords)
        return launch_compress_warp(plain_src{x, x_len}, e, n, (unsigned)block, kind == OB_SCALE_L2,
                                    packed, (cudaStream_t)stream, err);
    geometry g = make_geometry(block);
    size_t nblocks = n / block;
    size_t grid = grid_for(nblocks, g.spc);
    unsigned threads = 32 * g.wpg * g.spc;
    int l2 = kind == OB_SCALE_L2;
    uint32_t *bits = (uint32_t *)packed;
    float *scales = (float *)((char *)packed + n / 32 * sizeof(uint32_t));
    cudaStream_t s = (cudaStream_t)stream;
#define OB_LAUNCH_COMPRESS(J)                                                                      \
    compress_kernel<J><<<(unsigned)grid, threads, 0, s>>>(x, x_len, e, nblocks, g, l2, bits, scales)
    if (g.wpw <= 1)
        OB_LAUNCH_COMPRESS(1);
    else if (g.wpw <= 2)
        OB_LAUNCH_COMPRESS(2);
    else if (g.wpw <= 4)
        OB_LAUNCH_COMPRESS(4);
    else if (g.wpw <= 8)
        OB_LAUNCH_COMPRESS(8);
    else if (g.wpw <= 16)
        OB_LAUNCH_COMPRESS(16);
    else if (g.wpw <= 32)
        OB_LAUNCH_COMPRESS(32);
    else
        OB_LAUNCH_COMPRESS(0);
#undef OB_LAUNCH_COMPRESS
    CUDA_CHECK(err, cudaGetLastError());
    return OB_OK;
}

extern "C" ob_status ob_cuda_decompress(const void *packed, size_t n, size_t block, float *out,
                                        void *stream, ob_err *err)
{
    return ob_cuda_decompress_prefix(packed, n, block, out, n, stream, err);
}

extern "C" ob_status ob_cuda_decompress_prefix(const void *packed, size_t n, size_t block,
                                               float *out, size_t out_len, void *stream,
                                               ob_err *err)
{
    ob_status st = check_layout("ob_cuda_decompress", n, block, err);
    if (st != OB_OK) return st;
    if (out_len > n)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_decompress_prefix: out_len %zu > n %zu",
                      out_len, n);
    if (out_len == 0) return OB_OK;
    if (!packed || !out) return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_decompress: NULL buffer");
    return launch_decode(packed, 1, n, out_len, block, 0, out, (cudaStream_t)stream, err);
}

extern "C" ob_status ob_cuda_decompress_average(const void *packed, size_t nsrc, size_t n,
                                                size_t block, float *out, void *stream, ob_err *err)
{
    ob_status st = check_layout("ob_cuda_decompress_average", n, block, err);
    if (st != OB_OK) return st;
    if (n == 0) return OB_OK;
    if ((nsrc > 0 && !packed) || !out)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_decompress_average: NULL buffer");
    return launch_decode(packed, nsrc, n, n, block, 1, out, (cudaStream_t)stream, err);
}

extern "C" ob_status ob_cuda_average_compress_ef(const void *packed, size_t nsrc, float *e,
                                                 size_t n, size_t block, ob_scale_kind kind,
                                                 void *out, void *stream, ob_err *err)
{
    ob_status st = check_layout("ob_cuda_average_compress_ef", n, block, err);
    if (st != OB_OK) return st;
    if (block > OB_CUDA_AVERAGE_COMPRESS_MAX_BLOCK)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ob_cuda_average_compress_ef: block %zu > %d: decompress_average, then "
                      "compress_ef",
                      block, OB_CUDA_AVERAGE_COMPRESS_MAX_BLOCK);
    if (kind != OB_SCALE_L1 && kind != OB_SCALE_L2)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_average_compress_ef: scale kind %d",
                      (int)kind);
    if (nsrc == 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_average_compress_ef: no source messages");
    if (n == 0) return OB_OK;
    if (!packed || !e || !out)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_cuda_average_compress_ef: NULL buffer");
    average_src src{(const unsigned char *)packed, ob_packed_bytes(n, block), nsrc,
                    n / 32 * sizeof(uint32_t), (float)nsrc};
    return launch_compress_warp(src, e, n, (unsigned)block, kind == OB_SCALE_L2, out,
                                (cudaStream_t)stream, err);
}

extern "C" ob_status ob_cuda_alloc(void **ptr, size_t bytes, ob_err *err)
{
    *ptr = NULL;
    if (bytes == 0) return OB_OK;
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return ob_err_set(err, rc == cudaErrorMemoryAllocation ? OB_ERR_NOMEM : OB_ERR_CUDA,
                          __FILE__, __LINE__, "cudaMalloc(%zu bytes) failed: %s (%s)", bytes,
                          cudaGetErrorString(rc), cudaGetErrorName(rc));
    }
    /* cudaMemset runs on the legacy default stream, which does not order with the
     * non-blocking streams the kernels run on: wait for it here, allocation is not hot. */
    rc = cudaMemset(p, 0, bytes);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(0);
    if (rc != cudaSuccess) {
        cudaFree(p);
        return ob__cuda_fail(err, rc, "cudaMemset", __FILE__, __LINE__);
    }
    *ptr = p;
    return OB_OK;
}

extern "C" void ob_cuda_free(void *ptr)
{
    if (ptr) cudaFree(ptr);
}

extern "C" ob_status ob_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream,
                                    ob_err *err)
{
    if (bytes == 0) return OB_OK;
    CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
    return OB_OK;
}

extern "C" ob_status ob_cuda_memset0(void *dst, size_t bytes, void *stream, ob_err *err)
{
    if (bytes == 0) return OB_OK;
    CUDA_CHECK(err, cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)stream));
    return OB_OK;
}

extern "C" ob_status ob_cuda_sync(void *stream, ob_err *err)
{
    CUDA_CHECK(err, cudaStreamSynchronize((cudaStream_t)stream));
    return OB_OK;
}

extern "C" ob_status ob_cuda_stream_wait(void *waiter, void *on, ob_err *err)
{
    if (waiter == on) return OB_OK;
    cudaEvent_t ev;
    CUDA_CHECK(err, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t rc = cudaEventRecord(ev, (cudaStream_t)on);
    if (rc == cudaSuccess) rc = cudaStreamWaitEvent((cudaStream_t)waiter, ev, 0);
    cudaEventDestroy(ev); /* released once the wait is satisfied */
    CUDA_CHECK(err, rc);
    return OB_OK;
}
