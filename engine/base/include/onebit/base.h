/* The small helpers every onebit library shares: clocks, bounded string copies and cache-line
 * aligned allocation. Nothing here allocates behind the caller's back or keeps state. */
#ifndef ONEBIT_BASE_H
#define ONEBIT_BASE_H

#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Monotonic clock in seconds: for durations, timeouts and throughput, never for dates. */
static inline double ob_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall clock: milliseconds since the Unix epoch, for time stamps people and stores read. */
int64_t ob_wall_ms(void);

/* Copies src into dst[cap] with truncation, always terminated (cap > 0). NULL src gives "". */
static inline void ob_strlcpy(char *dst, const char *src, size_t cap)
{
    if (cap == 0) return;
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Rounds n up to a multiple of m (m > 0). */
static inline size_t ob_round_up(size_t n, size_t m)
{
    return (n + m - 1) / m * m;
}

/* 1 when a and b are the same non-empty string. The time taken does not depend on where they
 * differ: for comparing secrets (tokens, credentials). */
int ob_secret_equal(const char *a, const char *b);

/* nbytes of the kernel's randomness as lowercase hex into out (2 nbytes + 1 bytes, terminated):
 * tokens and credentials. OB_ERR_IO when /dev/urandom cannot be read. */
ob_status ob_random_hex(char *out, size_t nbytes, ob_err *err);

/* Removes path: a file, or a directory with everything under it, never following a symbolic
 * link. A missing path is fine. */
ob_status ob_remove_tree(const char *path, ob_err *err);

/* Cache-line aligned, zero-filled allocation of bytes (rounded up to 64); free with
 * ob_aligned_free. Returns NULL on failure, when bytes is 0, or when rounding would overflow. */
void *ob_calloc_aligned(size_t bytes);
void ob_aligned_free(void *p); /* accepts NULL */

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_BASE_H */
