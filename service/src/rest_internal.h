/* Private to the REST front end. Two parts:
 *
 * 1. The seam: the REST server without a socket, one request through the same screening (Host,
 *    bearer token, declared size, content type) and the same route table as a request that
 *    arrived on a connection, the answer handed back instead of sent. For white-box tests and
 *    the REST fuzz target (tests/fuzz/fuzz_rest.c); onebitd serves only through
 *    ob_rest_server_start.
 * 2. What the rest_*.c files share: the server, one exchange (a request and its answer), the
 *    answers, the request's fields and the route table.
 *      rest_server.c    the server: connections, screening, the seam, start and stop
 *      rest_exchange.c  reading a request (query arguments, headers) and making its answer
 *      rest_routes.c    the handlers of the one-shot routes and the route table
 *      rest_streams.c   the streaming routes: server-sent events and the followed log */
#ifndef ONEBIT_REST_INTERNAL_H
#define ONEBIT_REST_INTERNAL_H

#include "onebit/servers.h"
#include "onebit/service.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/socket.h>

/* ---- the seam ------------------------------------------------------------------------------ */

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

/* Headers a route adds to its answer beyond Content-Type (the log's offsets). */
#define OB__REST_EXTRA_HEADERS 2

typedef struct ob__rest_header_value {
    const char *name; /* static; NULL: unused */
    char value[32];
} ob__rest_header_value;

/* What the server answered. */
typedef struct ob__rest_answer {
    int http;         /* the status; 0 for a dashboard path (/ui), not served here */
    const char *type; /* Content-Type (static), NULL when none */
    char *body;       /* len bytes and a NUL (a text/plain log may hold NULs), owned; NULL for
                         a stream */
    size_t len;
    int stream; /* an event or log stream: answered 200 and closed before a byte was read */
    ob__rest_header_value headers[OB__REST_EXTRA_HEADERS]; /* the route's extra headers */
} ob__rest_answer;

/* Handles req on s into *out (cleared first; free with ob__rest_answer_clear). OB_ERR_NOMEM
 * when the request cannot be copied or the answer was dropped (out of memory). */
ob_status ob__rest_handle(ob_rest_server *s, const ob__rest_request *req, ob__rest_answer *out,
                          ob_err *err);

/* Frees the answer's body; accepts a cleared answer. */
void ob__rest_answer_clear(ob__rest_answer *a);

/* ---- the server ---------------------------------------------------------------------------- */

/* ---- the connection budget (rest_conns.c) ------------------------------------------------ */

/* Slots for every connection, deadlines for a request's headers and body that trickling bytes
 * do not extend, and a cap on the connections waiting for their request (the longest waiting
 * one of the client holding the most is closed to make room): see rest_conns.c. */
typedef struct ob__rest_conns ob__rest_conns;

enum { OB__REST_CONN_WAITING, OB__REST_CONN_UPLOADING, OB__REST_CONN_ANSWERING };

ob_status ob__rest_conns_create(ob__rest_conns **out, int slots, int max_waiting, double header_s,
                                double body_s, ob_err *err);
void ob__rest_conns_destroy(ob__rest_conns *c);

/* A connection from `client` (NULL: unknown) on socket fd (-1: none) starts waiting for its
 * request: its slot (the handle of ob__rest_conns_close), or NULL when every slot is taken
 * (then fd is shut down). Over the waiting budget, another connection is cut first. */
void *ob__rest_conns_open(ob__rest_conns *c, const struct sockaddr *client, int fd);

/* The connection of a slot from ob__rest_conns_open (NULL: none) is closed: the slot is free. */
void ob__rest_conns_close(ob__rest_conns *c, void *slot);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (the two above); cls is the budget. */
void ob__rest_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                           enum MHD_ConnectionNotificationCode code);

/* The connection's request moves on: waiting for the next one, its body arriving, or answered
 * (never cut). */
void ob__rest_conns_phase(ob__rest_conns *c, struct MHD_Connection *conn, int phase);

/* Connections closed so far for a deadline or the waiting budget. */
long ob__rest_conns_closed(ob__rest_conns *c);

struct ob_rest_server {
    struct MHD_Daemon *daemon;
    ob__rest_conns *conns; /* NULL in ob__rest_handle's servers (no sockets) */
    ob_service *svc;
    char *token;
    int loopback;          /* bound to a loopback address: only loopback Host names are served */
    int client_certs;      /* TLS with a client CA: every request needs a certificate it signed */
    atomic_int stopping;   /* read by the event streams' threads */
    atomic_int streams;    /* event streams open now */
    ob_rest_limits limits; /* every field set */
};

/* Per-request state: the body as it arrives. */
typedef struct ob__rest_body {
    char *body;
    size_t len, cap;
    size_t limit; /* the most bytes this request's body may have (ob__rest_body_limit) */
    int too_large;
    int answered; /* refused from its headers: the response is queued, the body dropped */
} ob__rest_body;

/* The most bytes the body of a request for path (without its query) may have: a submit's
 * (POST /v1/jobs) takes a program's upload (ob_service_max_submit_bytes), every other request
 * OB_API_MAX_REQUEST. */
size_t ob__rest_body_limit(const ob_rest_server *s, const char *method, const char *path);

/* ---- exchanges ----------------------------------------------------------------------------- */

/* One request as the routes see it, and the answer they leave in it. The request's query
 * arguments and headers come from the libmicrohttpd connection, or (ob__rest_handle, no
 * connection) from the pairs parsed out of the caller's target and headers. The answer is sent
 * by on_request (ob__rest_queue_answer) or copied out by ob__rest_handle. */
typedef struct ob__rest_exchange {
    struct MHD_Connection *conn; /* borrowed; NULL in ob__rest_handle */
    ob__rest_body *rq;           /* borrowed: the body */
    const char *const *args;     /* without conn: key, value pairs (value NULL: "key" alone) */
    size_t n_args;
    const char *const *headers; /* without conn: name, value pairs */
    size_t n_headers;
    /* the answer */
    int http;         /* 0: none yet */
    const char *type; /* static */
    char *text;       /* owned (text_len bytes and a NUL), or NULL with fixed */
    size_t text_len;
    const char *fixed; /* a static body (not freed) */
    size_t fixed_len;
    ob__rest_header_value extra[OB__REST_EXTRA_HEADERS];
    int bare;                    /* without the security headers (the OpenAPI document) */
    struct MHD_Response *stream; /* owned: an answer whose body is produced as it is read */
    int drop;                    /* no answer could be made: close the connection */
} ob__rest_exchange;

/* A query argument of the request (the first with that name), or NULL. Borrowed. */
const char *ob__rest_arg(const ob__rest_exchange *ex, const char *name);

/* A header of the request (the first with that name, in any case), or NULL. Borrowed. */
const char *ob__rest_header(const ob__rest_exchange *ex, const char *name);

/* Calls fn(cls, key, value) for every query argument in the order sent, repeats included
 * (value NULL for "key" alone), until fn returns non-zero; returns that, or 0. */
int ob__rest_each_arg(const ob__rest_exchange *ex,
                      int (*fn)(void *cls, const char *key, const char *value), void *cls);

/* Sends the exchange's answer on its connection; frees what the answer owned. */
enum MHD_Result ob__rest_queue_answer(ob__rest_exchange *ex);

/* Frees what the exchange's answer still owns. */
void ob__rest_exchange_clear(ob__rest_exchange *ex);

/* ---- answers --------------------------------------------------------------------------------
 * Each leaves the answer in the exchange and returns MHD_YES; out of memory they leave a 503
 * instead. */

/* A NUL-terminated text (taken; NULL: out of memory). */
enum MHD_Result ob__rest_send_text(ob__rest_exchange *ex, int http, const char *type, char *text);
/* len bytes (taken, from malloc; may hold NULs; NULL with len 0: an empty body). */
enum MHD_Result ob__rest_send_bytes(ob__rest_exchange *ex, int http, const char *type, char *data,
                                    size_t len);
/* A JSON value (taken), compact, with a newline. */
enum MHD_Result ob__rest_send_json(ob__rest_exchange *ex, int http, json_t *o);
/* A response whose body libmicrohttpd produces as it is read (taken); the route adds its
 * headers, the security headers too. */
enum MHD_Result ob__rest_send_stream(ob__rest_exchange *ex, int http, struct MHD_Response *r);
/* {"error": {"code": http, "status": status, "message": msg}}; msg borrowed. */
enum MHD_Result ob__rest_send_error_http(ob__rest_exchange *ex, int http, const char *status,
                                         const char *msg);
/* The same with the HTTP status and code name of st (status_map.h). */
enum MHD_Result ob__rest_send_error(ob__rest_exchange *ex, ob_status st, const char *msg);
/* Adds a header (name static, value copied) to a one-shot answer. */
void ob__rest_add_header(ob__rest_exchange *ex, const char *name, const char *value);

/* ---- request fields ------------------------------------------------------------------------ */

/* Reads an integer query parameter in [lo, hi]; 0 when absent or empty. */
ob_status ob__rest_query_int(const ob__rest_exchange *ex, const char *name, long long lo,
                             long long hi, long long *out, ob_err *err);

/* 1 when the Accept header asks for text/plain over application/json: text/plain named with
 * a q above 0 and above application/json's (wildcards count for neither). */
int ob__rest_accepts_text(const char *accept);

/* ---- routes -------------------------------------------------------------------------------- */

typedef enum MHD_Result (*ob__rest_route_fn)(ob_rest_server *s, ob__rest_exchange *ex,
                                             const char *id);

/* A route: method, path ("{id}" stands for a job id, which ends at the next '/' or ':'),
 * handler, and the query parameters it takes (names separated by spaces; "" for none). */
typedef struct ob__rest_route {
    const char *method;
    const char *path;
    ob__rest_route_fn fn;
    const char *params;
} ob__rest_route;

/* Answers the request on url with the route table (rest_routes.c): the route's handler, or
 * 404 / 405 / 400 (an unknown or repeated query parameter) / 413. */
enum MHD_Result ob__rest_route_request(ob_rest_server *s, ob__rest_exchange *ex, const char *url,
                                       const char *method);

/* Checks the request's query arguments against the route's params: each known, none given
 * twice. Returns 1 when they are, 0 after answering 400 naming the first that is not (with
 * the nearest known name, or the other route that takes it). routes: the whole table, n rows. */
int ob__rest_check_query(ob__rest_exchange *ex, const ob__rest_route *r,
                         const ob__rest_route *routes, size_t n);

/* The streaming routes (rest_streams.c). */
enum MHD_Result ob__rest_do_events(ob_rest_server *s, ob__rest_exchange *ex, const char *id);
enum MHD_Result ob__rest_do_log_stream(ob_rest_server *s, ob__rest_exchange *ex, const char *id);

#endif /* ONEBIT_REST_INTERNAL_H */
