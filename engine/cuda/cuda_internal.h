/* CUDA errors into ob_status for the engine's CUDA sources (C and CUDA C++ alike): the failing
 * call, CUDA's message and error name, and file:line. Private to engine/cuda/. */
#ifndef ONEBIT_CUDA_INTERNAL_H
#define ONEBIT_CUDA_INTERNAL_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "internal.h"
#ifdef __cplusplus
}
#endif

/* Records rc as OB_ERR_CUDA and returns it; clears a non-sticky error so that the next CUDA
 * call starts clean. */
static inline ob_status ob__cuda_fail(ob_err *err, cudaError_t rc, const char *call,
                                      const char *file, int line)
{
    (void)cudaGetLastError();
    return ob_err_set(err, OB_ERR_CUDA, file, line, "%s failed: %s (%s)", call,
                      cudaGetErrorString(rc), cudaGetErrorName(rc));
}

/* Returns from the calling function with the error when a CUDA call fails. */
#define CUDA_CHECK(err, call)                                                                      \
    do {                                                                                           \
        cudaError_t rc_ = (call);                                                                  \
        if (rc_ != cudaSuccess) return ob__cuda_fail((err), rc_, #call, __FILE__, __LINE__);       \
    } while (0)

#endif /* ONEBIT_CUDA_INTERNAL_H */
