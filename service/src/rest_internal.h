/* The REST server without a socket: one request through the same screening (Host, bearer
 * token, declared size, content type) and the same route table as a request that arrived on a
 * connection, the answer handed back instead of sent. For white-box tests and the REST fuzz
 * target (tests/fuzz/fuzz_rest.c); onebitd serves only through ob_rest_server_start. */
#ifndef ONEBIT_REST_INTERNAL_H
#define ONEBIT_REST_INTERNAL_H

#include "onebit/servers.h"

#include <stddef.h>

/* A server that listens nowhere: svc borrowed, token copied (NULL or "": none), loopback as if
 * bound to a loopback address (only loopback Host names served). Free with
 * ob_rest_server_stop. */
ob_status ob__rest_server_create(ob_rest_server **out, ob_service *svc, const char *token,
                                 int loopback, int max_streams, ob_err *err);

/* One request. target: the request line's target, "/path?query", escaped as sent (the path and
 * each query argument are unescaped as libmicrohttpd does, with the server's own unescaping);
 * headers: n_headers name, value pairs (borrowed); body: len bytes (borrowed, may be NULL). */
typedef struct ob__rest_request {
    const char *method;
    const char *target;
    const char *const *headers;
    size_t n_headers;
    const char *body;
    size_t len;
} ob__rest_request;

/* What the server answered. */
typedef struct ob__rest_answer {
    int http;         /* the status; 0 for a dashboard path (/ui), not served here */
    const char *type; /* Content-Type (static), NULL when none */
    char *body;       /* NUL-terminated copy, owned; NULL for a stream */
    size_t len;
    int stream; /* an event or log stream: answered 200 and closed before a byte was read */
} ob__rest_answer;

/* Handles req on s into *out (cleared first; free with ob__rest_answer_clear). OB_ERR_NOMEM
 * when the request cannot be copied or the answer was dropped (out of memory). */
ob_status ob__rest_handle(ob_rest_server *s, const ob__rest_request *req, ob__rest_answer *out,
                          ob_err *err);

/* Frees the answer's body; accepts a cleared answer. */
void ob__rest_answer_clear(ob__rest_answer *a);

#endif /* ONEBIT_REST_INTERNAL_H */
