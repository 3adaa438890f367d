/* The admin token of onebitd's APIs as a file: what the daemon generates at its first start
 * (into its state directory, readable by its owner only) and what onebitctl finds there for
 * local use. A token is the first line of the file, surrounding white space dropped. */
#ifndef ONEBIT_TOKEN_H
#define ONEBIT_TOKEN_H

#include "onebit/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OB_TOKEN_MAX 512 /* buffer size for a token, terminator included */

/* Reads the token at path (borrowed) into tok[cap]. OB_ERR_NOT_FOUND when the file does not
 * exist, OB_ERR_IO when it cannot be read, OB_ERR_INVALID_ARG when it holds no token or one that
 * does not fit. */
ob_status ob_token_read(const char *path, char *tok, size_t cap, ob_err *err);

/* The token at path, created first when there is none: 32 bytes of the kernel's randomness in
 * hex, written to a new file of mode 0600 (never over an existing one). *created says which
 * happened. A file readable by others is refused (OB_ERR_STATE): its token is no secret. */
ob_status ob_token_ensure(const char *path, char *tok, size_t cap, int *created, ob_err *err);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_TOKEN_H */
