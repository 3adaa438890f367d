/* The one table that turns an ob_status into what the two APIs answer: a gRPC status code and
 * an HTTP status. Both servers use it, so one failure reads the same over gRPC and REST. */
#ifndef ONEBIT_STATUS_MAP_H
#define ONEBIT_STATUS_MAP_H

#include "onebit/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The gRPC status code (grpc_status_code numbering: 3 INVALID_ARGUMENT, 5 NOT_FOUND, ...). */
int ob_status_grpc_code(ob_status s);

/* The HTTP status (400, 404, ...). */
int ob_status_http(ob_status s);

/* The gRPC code name ("INVALID_ARGUMENT"), used as the "code" of REST error bodies. */
const char *ob_status_code_name(ob_status s);

/* An error message as the APIs show it: msg (borrowed, may be NULL) without the trailing
 * " (file.c:123)" that error records carry for developers. Writes into out[cap]. */
void ob_status_public_message(const char *msg, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_STATUS_MAP_H */
