/* Status names and error-record formatting. */
#include "onebit/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ob_strerror(ob_status status)
{
    switch (status) {
    case OB_OK:
        return "ok";
    case OB_ERR_INVALID_ARG:
        return "invalid argument";
    case OB_ERR_NOMEM:
        return "out of memory";
    case OB_ERR_IO:
        return "I/O error";
    case OB_ERR_COMM:
        return "communication error";
    case OB_ERR_STATE:
        return "invalid state";
    case OB_ERR_UNSUPPORTED:
        return "unsupported";
    case OB_ERR_CORRUPT:
        return "corrupt data";
    case OB_ERR_CUDA:
        return "CUDA error";
    case OB_ERR_NOT_FOUND:
        return "not found";
    case OB_ERR_NUMERIC:
        return "numeric error";
    case OB_ERR_UNAUTHENTICATED:
        return "unauthenticated";
    case OB_ERR_TOO_LARGE:
        return "too large";
    case OB_ERR_UNAVAILABLE:
        return "unavailable";
    }
    return "unknown status";
}

void ob_err_clear(ob_err *err)
{
    if (!err) return;
    err->code = OB_OK;
    err->msg[0] = '\0';
}

ob_status ob_err_set(ob_err *err, ob_status code, const char *file, int line, const char *fmt, ...)
{
    if (!err) return code;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char text[OB_ERR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    /* Bounded precisions: an over-long message is cut, never overflowed. */
    snprintf(err->msg, sizeof err->msg, "%.420s (%.64s:%d)", text, base, line);
    err->code = code;
    return code;
}

ob_status ob_err_wrap(ob_err *err, ob_status code, const char *fmt, ...)
{
    if (!err) return code;
    char text[OB_ERR_MSG_LEN], inner[OB_ERR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(inner, err->msg, sizeof inner);
    snprintf(err->msg, sizeof err->msg, "%.160s: %.340s", text, inner);
    err->code = code;
    return code;
}
