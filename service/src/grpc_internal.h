/* Private to the gRPC front end: the methods onebitd serves and their handlers (decode the
 * request, call the service function, encode the answer), apart from the call machinery of
 * grpc_server.c (completion queue, streams, shutdown). */
#ifndef ONEBIT_GRPC_INTERNAL_H
#define ONEBIT_GRPC_INTERNAL_H

#include "onebit/service.h"

#include <grpc/byte_buffer.h>
#include <protobuf-c/protobuf-c.h>

typedef enum method_id {
    M_SUBMIT,
    M_GET,
    M_LIST,
    M_CANCEL,
    M_WATCH,
    M_CHECKPOINTS,
    M_LOGS,
    M_STREAM_LOGS,
    M_DELETE,
    M_VERSION,
    M_REPORT,
    M_HEALTH_CHECK,
    M_HEALTH_WATCH,
    M_REFLECTION,       /* grpc.reflection.v1: a bidirectional stream (reflection.h) */
    M_REFLECTION_ALPHA, /* grpc.reflection.v1alpha: the same protocol, the same code */
    M_COUNT,
    M_UNKNOWN = -1,
} method_id;

extern const char *const ob__grpc_method_paths[M_COUNT];

/* What a unary handler answers: the encoded message on success, else the error. */
typedef struct ob__grpc_reply {
    grpc_byte_buffer *bb;
    ob_err err;
} ob__grpc_reply;

/* bearer: the token the call presented ("" for none). Every method but ReportProgress has
 * been checked against the admin token already; ReportProgress takes an attempt's credential,
 * which only the service can check. */
typedef ob_status (*ob__grpc_handler)(ob_service *svc, const ProtobufCMessage *m,
                                      const char *bearer, ob__grpc_reply *r);

/* Per method: its request message and its unary handler (NULL: a server stream). The
 * reflection methods have neither: their requests arrive on the stream. */
typedef struct ob__grpc_method {
    const ProtobufCMessageDescriptor *request;
    ob__grpc_handler fn;
} ob__grpc_method;

extern const ob__grpc_method ob__grpc_methods[M_COUNT];

/* A message as a byte buffer (NULL when memory runs out); the caller unrefs it. */
grpc_byte_buffer *ob__grpc_pack(const ProtobufCMessage *m);

/* Decodes a request of type d; NULL when it does not decode, or when a string field anywhere
 * in it (nested messages and map entries included) holds a NUL byte: C strings would cut it
 * there, and "job-000002\0x" must not name job-000002. *why (may be NULL) says which. */
ProtobufCMessage *ob__grpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
                                  const char **why);

/* "" (the server) and each service onebitd implements: what Health answers SERVING for. */
int ob__grpc_known_service(const char *name);

#endif /* ONEBIT_GRPC_INTERNAL_H */
