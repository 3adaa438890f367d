/* Private to the gRPC front end: the answers of gRPC server reflection (grpc.reflection.v1 and
 * v1alpha, one protocol under two names), computed from the descriptor set compiled into onebitd
 * (onebit/protoset.h). grpc_streams.c runs the bidirectional stream; this file turns one
 * ServerReflectionRequest into one ServerReflectionResponse.
 *
 * The index is built once from the set: every file (its serialized FileDescriptorProto, borrowed
 * from the set, and its imports), every fully-qualified symbol a client may ask for (messages and
 * enums at any nesting, services, methods) and the services. A file is answered with its
 * transitive imports, the file asked for first. Requests are hostile: at most
 * OB_REFLECTION_MAX_REQUEST bytes, anything that is not a ServerReflectionRequest is refused,
 * names that are not known are answered with an ErrorResponse (NOT_FOUND) on the same stream. */
#ifndef ONEBIT_REFLECTION_H
#define ONEBIT_REFLECTION_H

#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

/* Largest ServerReflectionRequest answered: names are short; a larger request ends the stream
 * with INVALID_ARGUMENT rather than being echoed back. */
#define OB_REFLECTION_MAX_REQUEST ((size_t)16 * 1024)

typedef struct ob__reflection ob__reflection;

/* Indexes the serialized FileDescriptorSet set[0..len) (borrowed: it must outlive the index;
 * the compiled-in ob_protoset does). OB_ERR_CORRUPT when the set cannot be read. */
ob_status ob__reflection_create(ob__reflection **out, const uint8_t *set, size_t len, ob_err *err);

/* Accepts NULL. */
void ob__reflection_destroy(ob__reflection *r);

/* Answers the ServerReflectionRequest req[0..len): *out (malloc'd, owned by the caller) is the
 * serialized ServerReflectionResponse, an ErrorResponse inside it for a name that is not known.
 * OB_ERR_INVALID_ARG for a request that is too large or not a ServerReflectionRequest (the
 * stream then ends with that status), OB_ERR_NOMEM. */
ob_status ob__reflection_answer(const ob__reflection *r, const uint8_t *req, size_t len,
                                uint8_t **out, size_t *out_len, ob_err *err);

/* The number of services the set declares and the i-th one's full name (borrowed). */
size_t ob__reflection_service_count(const ob__reflection *r);
const char *ob__reflection_service(const ob__reflection *r, size_t i);

#endif /* ONEBIT_REFLECTION_H */
