/* Memory of either kind for the engine's state buffers (see internal.h): host memory is
 * cache-line aligned and zero-filled; device memory comes from ob_cuda_alloc, zero-filled too. */
#include "onebit/compress_cuda.h"
#include "onebit/optim_kernels.h"
#include "internal.h"

#include <string.h>

ob_status ob__mem_alloc(int device, void **p, size_t bytes, const char *what, ob_err *err)
{
    *p = NULL;
    if (bytes == 0) return OB_OK;
    if (device) {
        ob_status st = ob_cuda_alloc(p, bytes, err);
        return st == OB_OK ? OB_OK
                           : OB_WRAP(err, st, "%s (%zu bytes of device memory)", what, bytes);
    }
    *p = ob_calloc_aligned(bytes);
    if (!*p) return OB_ERR(err, OB_ERR_NOMEM, "%s: %zu bytes", what, bytes);
    return OB_OK;
}

void ob__mem_free(int device, void *p)
{
    if (device)
        ob_cuda_free(p);
    else
        ob_aligned_free(p);
}

ob_status ob__mem_copy(int device, void *dst, const void *src, size_t bytes, void *stream,
                       ob_err *err)
{
    if (bytes == 0 || dst == src) return OB_OK;
    if (device) return ob_cuda_memcpy(dst, src, bytes, stream, err);
    memmove(dst, src, bytes);
    return OB_OK;
}

ob_status ob__mem_zero(int device, void *dst, size_t bytes, void *stream, ob_err *err)
{
    if (bytes == 0) return OB_OK;
    if (device) return ob_cuda_memset0(dst, bytes, stream, err);
    memset(dst, 0, bytes);
    return OB_OK;
}

ob_status ob__mem_scale_by(int device, float *x, const float *r, size_t n, void *stream,
                           ob_err *err)
{
    if (n == 0) return OB_OK;
    if (device) return ob_cuda_scale_by(x, r, n, stream, err);
    ob_scale_by(x, r, n);
    return OB_OK;
}
