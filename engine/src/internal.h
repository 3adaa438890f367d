/* Private helpers shared by the engine's sources: error reporting with file:line, checked
 * allocation, and small numeric utilities. Not installed, not part of the public API. */
#ifndef ONEBIT_INTERNAL_H
#define ONEBIT_INTERNAL_H

#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Records a new failure: err (if non-NULL) gets code and "<formatted message> (file:line)",
 * replacing whatever it held. Returns code. */
ob_status ob__err_set(ob_err *err, ob_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Passes on a failure that an inner call already recorded in err, putting our context in
 * front ("outer: inner"), so the message reads like a trace, outermost first. Returns code. */
ob_status ob__err_wrap(ob_err *err, ob_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define OB_ERR(err, code, ...) ob__err_set((err), (code), __FILE__, __LINE__, __VA_ARGS__)
#define OB_WRAP(err, code, ...) ob__err_wrap((err), (code), __VA_ARGS__)

/* Cache-line aligned, zero-filled allocation; free with ob__free. Returns NULL on failure or
 * when bytes is 0. */
void *ob__calloc_aligned(size_t bytes);
void ob__free(void *p);

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

/* Monotonic wall clock in seconds, for the timings and throughput figures. */
static inline double ob__now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rounds n up to a multiple of m (m > 0). */
static inline size_t ob__round_up(size_t n, size_t m)
{
    return (n + m - 1) / m * m;
}

#endif /* ONEBIT_INTERNAL_H */
