/* 1-bit compression kernels for device memory: the same contracts and packed layout as the CPU
 * kernels in onebit/compress.h, launched asynchronously on a CUDA stream (a cudaStream_t passed
 * as void*, NULL for the default stream). Present in builds with CUDA (ONEBIT_HAVE_CUDA); in
 * other builds every function returns OB_ERR_UNSUPPORTED. Pointers are device memory. */
#ifndef ONEBIT_COMPRESS_CUDA_H
#define ONEBIT_COMPRESS_CUDA_H

#include "onebit/compress.h"
#include "onebit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 in a build without CUDA or on a machine without a GPU. */
int ob_cuda_device_count(void);

ob_status ob_cuda_compress_ef(const float *x, size_t x_len, float *e, size_t n, size_t block,
                              ob_scale_kind kind, void *packed, void *stream, ob_err *err);
ob_status ob_cuda_decompress(const void *packed, size_t n, size_t block, float *out, void *stream,
                             ob_err *err);
/* ob_decompress_prefix: the first out_len (<= n) elements of a message of n. */
ob_status ob_cuda_decompress_prefix(const void *packed, size_t n, size_t block, float *out,
                                    size_t out_len, void *stream, ob_err *err);
ob_status ob_cuda_decompress_average(const void *packed, size_t nsrc, size_t n, size_t block,
                                     float *out, void *stream, ob_err *err);

/* decompress_average of nsrc messages, then compress_ef of that average (x_len = n) with the
 * error e into out, in one pass that never writes the average: the server's step of the
 * compressed allreduce. Bitwise the two calls; nsrc >= 1, block at most
 * OB_CUDA_AVERAGE_COMPRESS_MAX_BLOCK (larger blocks: the two calls). */
#define OB_CUDA_AVERAGE_COMPRESS_MAX_BLOCK 2048
ob_status ob_cuda_average_compress_ef(const void *packed, size_t nsrc, float *e, size_t n,
                                      size_t block, ob_scale_kind kind, void *out, void *stream,
                                      ob_err *err);

/* The stochastic unit-sign message (onebit/compress.h), bitwise as the CPU kernels; nsrc of
 * the average at least 1. */
ob_status ob_cuda_usign_compress_ef(const float *x, size_t x_len, float *e, size_t n, uint64_t key,
                                    uint64_t pos0, void *bits, void *stream, ob_err *err);
ob_status ob_cuda_usign_decode(const void *bits, size_t n, float *out, void *stream, ob_err *err);
ob_status ob_cuda_usign_average(const void *bits, size_t nsrc, size_t n, float *out, void *stream,
                                ob_err *err);

/* The fp16 gradient message (onebit/compress.h), bitwise as the CPU codec. */
ob_status ob_cuda_f16_encode(const float *x, size_t x_len, size_t n, size_t block, void *msg,
                             void *stream, ob_err *err);
ob_status ob_cuda_f16_decode(const void *msg, size_t n, size_t block, float *out, void *stream,
                             ob_err *err);
ob_status ob_cuda_f16_decode_add(const void *msg, size_t n, size_t block, const float *x,
                                 size_t x_len, float *out, void *stream, ob_err *err);

/* Either code of the gradient message (onebit/compress.h), bitwise as ob_fcode_*; x_len 0 and
 * x NULL decode alone. */
ob_status ob_cuda_fcode_encode(ob_float_code code, const float *x, size_t x_len, size_t n,
                               size_t block, void *msg, void *stream, ob_err *err);
ob_status ob_cuda_fcode_decode_add(ob_float_code code, const void *msg, size_t n, size_t block,
                                   const float *x, size_t x_len, float *out, void *stream,
                                   ob_err *err);

/* Device memory helpers used by the device path of the compressed allreduce. */
ob_status ob_cuda_alloc(void **ptr, size_t bytes, ob_err *err); /* zero-filled */
void ob_cuda_free(void *ptr);
ob_status ob_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream, ob_err *err);
ob_status ob_cuda_memset0(void *dst, size_t bytes, void *stream, ob_err *err);
ob_status ob_cuda_sync(void *stream, ob_err *err);
/* Orders two streams without holding the host: work enqueued on `waiter` after this call starts
 * only once everything enqueued on `on` before it is done (an event recorded on `on`, waited for
 * on `waiter`). For callers that own their stream (a framework's current stream) and hand data
 * to a communicator's (onebit/comm.h ob_comm_stream). The same stream, or both NULL: nothing. */
ob_status ob_cuda_stream_wait(void *waiter, void *on, ob_err *err);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_COMPRESS_CUDA_H */
