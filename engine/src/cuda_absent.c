/* The device entry points of onebit/compress_cuda.h, and the device hooks of the models
 * (model_internal.h), in a build without CUDA: each reports OB_ERR_UNSUPPORTED so that callers
 * can fall back to the host path with a clear message. */
#include "onebit/compress_cuda.h"
#include "onebit/optim_kernels.h"
#include "internal.h"
#include "model_internal.h"

#define NO_CUDA(err) OB_ERR((err), OB_ERR_UNSUPPORTED, "this build has no CUDA support")

int ob_cuda_device_count(void)
{
    return 0;
}

ob_status ob_cuda_compress_ef(const float *x, size_t x_len, float *e, size_t n, size_t block,
                              ob_scale_kind kind, void *packed, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_decompress(const void *packed, size_t n, size_t block, float *out, void *stream,
                             ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_decompress_prefix(const void *packed, size_t n, size_t block, float *out,
                                    size_t out_len, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_decompress_average(const void *packed, size_t nsrc, size_t n, size_t block,
                                     float *out, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_average_compress_ef(const void *packed, size_t nsrc, float *e, size_t n,
                                      size_t block, ob_scale_kind kind, void *out, void *stream,
                                      ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_usign_compress_ef(const float *x, size_t x_len, float *e, size_t n, uint64_t key,
                                    uint64_t pos0, void *bits, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_usign_decode(const void *bits, size_t n, float *out, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_usign_average(const void *bits, size_t nsrc, size_t n, float *out, void *stream,
                                ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_f16_encode(const float *x, size_t x_len, size_t n, size_t block, void *msg,
                             void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_f16_decode(const void *msg, size_t n, size_t block, float *out, void *stream,
                             ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_f16_decode_add(const void *msg, size_t n, size_t block, const float *x,
                                 size_t x_len, float *out, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_fcode_encode(ob_float_code code, const float *x, size_t x_len, size_t n,
                               size_t block, void *msg, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_fcode_decode_add(ob_float_code code, const void *msg, size_t n, size_t block,
                                   const float *x, size_t x_len, float *out, void *stream,
                                   ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_alloc(void **ptr, size_t bytes, ob_err *err)
{
    *ptr = NULL;
    return NO_CUDA(err);
}

void ob_cuda_free(void *ptr) {}

ob_status ob_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_memset0(void *dst, size_t bytes, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_sync(void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_stream_wait(void *waiter, void *on, ob_err *err)
{
    return NO_CUDA(err);
}

/* --- optimizer kernels (onebit/optim_kernels.h) ------------------------------------------ */

ob_status ob_cuda_adam_update(float *x, float *m, float *v, const float *g, size_t d,
                              const ob_adam_coeffs *k, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_momentum_update(float *m, const float *g, size_t d, float b1, float a1,
                                  void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_frozen_update(float *x, const float *m, const float *den, size_t d, float lr,
                                float wd, float inv_c, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_momentum_precondition(float *m, float *p, const float *g, const float *den,
                                        size_t d, float b1, float a1, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_precondition_apply(float *x, float *m, const float *p, const float *den, size_t d,
                                     float lr, float wd, float c, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_frozen_den(float *den, const float *v, size_t d, float eps, void *stream,
                             ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_refresh_update(float *x, float *m, float *v, float *den, const float *g, size_t d,
                                 const ob_adam_coeffs *k, float keep, float take, float inv_c,
                                 void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_track_update(float *u, float *a, float *b, const float *g, size_t d, float b1,
                               float a1, float b2, float a2, float cu, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_track_share(float *e, const float *a, const float *b, size_t d, float c2,
                              float alpha, float beta, float inv_n, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_track_set(float *v, float *den, const float *s, size_t d, float f, float eps,
                            void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_track_set_ratio(float *v, float *den, float *s, size_t d, float f, float eps,
                                  void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_scale_by(float *x, const float *r, size_t d, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_binsgdm_local(float *m, float *b, float *u, const float *g, size_t d, float b1,
                                float a1, float eps, int keep_max, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_direct_update(float *x, const float *s, size_t d, float lr, float wd,
                                void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_softsign_update(float *x, float *m, float *b, const float *g, size_t d,
                                  const ob_adam_coeffs *k, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_scale(float *x, size_t d, float s, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

ob_status ob_cuda_l1_norm(const float *v, size_t d, double *out, void *stream, ob_err *err)
{
    *out = 0.0;
    return NO_CUDA(err);
}

ob_status ob_cuda_count_exceeding(const float *g, const float *v, size_t d, float gscale, float k2,
                                  size_t *out, void *stream, ob_err *err)
{
    *out = 0;
    return NO_CUDA(err);
}

ob_status ob_cuda_sum_squares(const float *v, size_t d, double *out, void *stream, ob_err *err)
{
    *out = 0.0;
    return NO_CUDA(err);
}

ob_status ob_cuda_count_zero(const float *v, size_t d, size_t *out, void *stream, ob_err *err)
{
    *out = 0;
    return NO_CUDA(err);
}

/* ---- the device pass of the models (model_cuda.cu) ----------------------------------------- */

ob_status ob__cls_cuda_create(ob_model *m, void *stream, ob_err *err)
{
    return NO_CUDA(err);
}

void ob__cls_cuda_destroy(ob__cls_cuda *c) {}

ob_status ob__cls_cuda_forward_backward(ob_model *m, const float *params, const ob_batch *batch,
                                        float *grad, ob_model_result *res, ob_err *err)
{
    return NO_CUDA(err);
}
