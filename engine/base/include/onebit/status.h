/* Status codes, error records and error traces shared by every onebit library (onebit_base).
 *
 * Functions that can fail return an ob_status (0 on success, a negative code otherwise) and,
 * when the caller passes a non-NULL ob_err, fill it with a readable message naming the failing
 * call and where it failed. The ob_err is owned by the caller; the library never allocates it,
 * never prints and never exits. */
#ifndef ONEBIT_STATUS_H
#define ONEBIT_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ob_status {
    OB_OK = 0,
    OB_ERR_INVALID_ARG = -1, /* a parameter or a field of a spec is out of range or malformed */
    OB_ERR_NOMEM = -2,       /* an allocation failed */
    OB_ERR_IO = -3,          /* reading or writing a file failed */
    OB_ERR_COMM = -4,        /* a collective or the transport under it failed */
    OB_ERR_STATE = -5,       /* the call is not valid in the object's current state */
    OB_ERR_UNSUPPORTED = -6, /* the build or the backend does not provide this */
    OB_ERR_CORRUPT = -7,     /* data failed a validity check (format, checksum, size) */
    OB_ERR_CUDA = -8,        /* a CUDA runtime or NCCL call failed */
    OB_ERR_NOT_FOUND = -9,   /* a named file, dataset or object does not exist */
    OB_ERR_NUMERIC = -10,    /* a value became NaN or infinite */
    OB_ERR_UNAUTHENTICATED = -11, /* a request came without the credentials the service needs */
    OB_ERR_TOO_LARGE = -12,       /* a request or message is larger than the limit */
    OB_ERR_UNAVAILABLE = -13,     /* a service cannot take the request now (its disk is full) */
} ob_status;

/* Static, human-readable name of a status code ("invalid argument", ...). Never NULL. */
const char *ob_strerror(ob_status status);

#define OB_ERR_MSG_LEN 1024

/* A caller-owned error record: the code of the first failure and its message. */
typedef struct ob_err {
    ob_status code;
    char msg[OB_ERR_MSG_LEN];
} ob_err;

/* Resets an error record to OB_OK with an empty message. Accepts NULL. */
void ob_err_clear(ob_err *err);

/* ---- error traces, for onebit's libraries -------------------------------------------------- */

/* Records a new failure: err (if non-NULL) gets code and "<formatted message> (file:line)",
 * replacing whatever it held. Returns code. Use through OB_ERR. */
ob_status ob_err_set(ob_err *err, ob_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Passes on a failure that an inner call already recorded in err, putting our context in
 * front ("outer: inner"), so the message reads like a trace, outermost first. Returns code. */
ob_status ob_err_wrap(ob_err *err, ob_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define OB_ERR(err, code, ...) ob_err_set((err), (code), __FILE__, __LINE__, __VA_ARGS__)
#define OB_WRAP(err, code, ...) ob_err_wrap((err), (code), __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_STATUS_H */
