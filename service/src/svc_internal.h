/* Private helpers of the service module: error records with file:line (the same helpers the
 * engine uses, from libonebit), small string utilities. Not installed. */
#ifndef ONEBIT_SVC_INTERNAL_H
#define ONEBIT_SVC_INTERNAL_H

#include "internal.h" /* the engine's OB_ERR / OB_WRAP (engine/src, a private include path) */

#include <stddef.h>
#include <string.h>

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
