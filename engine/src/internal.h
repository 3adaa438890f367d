/* Private helpers shared by the engine's sources: state buffers in host or device memory. The
 * error trace (OB_ERR, OB_WRAP), clocks and aligned allocation come from onebit_base. Not
 * installed, not part of the public API. */
#ifndef ONEBIT_INTERNAL_H
#define ONEBIT_INTERNAL_H

#include "onebit/base.h"
#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

/* Buffers of the engine's state in host memory (device == 0) or on the current CUDA device
 * (device == 1), so that code running on either is written once. Allocations are zero-filled;
 * `what` names the buffer in the error. Copies and zeroing are asynchronous on `stream` for
 * device memory (cudaMemcpyDefault: either side may be host memory) and immediate for host
 * memory; ob__mem_copy allows dst == src. Without CUDA, device == 1 gives OB_ERR_UNSUPPORTED. */
ob_status ob__mem_alloc(int device, void **p, size_t bytes, const char *what, ob_err *err);
void ob__mem_free(int device, void *p); /* accepts NULL */
ob_status ob__mem_copy(int device, void *dst, const void *src, size_t bytes, void *stream,
                       ob_err *err);
ob_status ob__mem_zero(int device, void *dst, size_t bytes, void *stream, ob_err *err);
/* x *= r elementwise over n floats, both in memory of the kind `device` says. */
ob_status ob__mem_scale_by(int device, float *x, const float *r, size_t n, void *stream,
                           ob_err *err);

/* Hot loops compiled for several instruction sets and picked at load time (function
 * multiversioning): OB__CLONES("avx512f", "avx2", "default"). The C11 mode does not contract into
 * fused multiply-adds, so every version computes the same bits. Not under ThreadSanitizer: GCC's
 * TSan crashes on target_clones. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define OB__CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#else
#define OB__CLONES(...)
#endif

#endif /* ONEBIT_INTERNAL_H */
