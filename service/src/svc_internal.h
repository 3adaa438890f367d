/* Private helpers of the service module: error records with file:line (the same helpers the
 * engine uses, from libonebit), small string utilities. Not installed. */
#ifndef ONEBIT_SVC_INTERNAL_H
#define ONEBIT_SVC_INTERNAL_H

#include "onebit/status.h"

#include <stddef.h>
#include <string.h>

ob_status ob__err_set(ob_err *err, ob_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
ob_status ob__err_wrap(ob_err *err, ob_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define OB_ERR(err, code, ...) ob__err_set((err), (code), __FILE__, __LINE__, __VA_ARGS__)
#define OB_WRAP(err, code, ...) ob__err_wrap((err), (code), __VA_ARGS__)

/* Copies src into dst[cap] with truncation, always terminated. NULL src gives "". */
static inline void ob__strlcpy(char *dst, const char *src, size_t cap)
{
    if (cap == 0) return;
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, src, n);
    dst[n] = '\0';
}

#endif /* ONEBIT_SVC_INTERNAL_H */
