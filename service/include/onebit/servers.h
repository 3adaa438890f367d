/* The two front ends of onebitd over the same service functions: gRPC (onebit.v1.JobService,
 * onebit.v1.WorkerService, grpc.health.v1.Health) on the gRPC C core, and REST/JSON (proto3
 * JSON mapping) on libmicrohttpd. Both are thin: they decode a request, call an ob_service_*
 * function, and encode its result or its error through the one status table (status_map.h).
 * With a token set, a call without "authorization: Bearer TOKEN" is refused as
 * UNAUTHENTICATED / 401 before anything else happens. */
#ifndef ONEBIT_SERVERS_H
#define ONEBIT_SERVERS_H

#include "onebit/service.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default cap on the event streams open at once, per server. */
#define OB_SERVERS_MAX_STREAMS 256

typedef struct ob_grpc_server ob_grpc_server;

/* Binds addr ("host:port"; port 0 picks a free one, returned in *bound_port) and starts
 * `threads` handler threads on one completion queue. svc is borrowed and must outlive the
 * server; token (copied) may be NULL or "" for none. At most max_streams server streams
 * (WatchJob, Health.Watch) are open at once (0: OB_SERVERS_MAX_STREAMS); one more is refused
 * with RESOURCE_EXHAUSTED. *out is owned by the caller. */
ob_status ob_grpc_server_start(ob_grpc_server **out, ob_service *svc, const char *addr,
                               const char *token, int threads, int max_streams, int *bound_port,
                               ob_err *err);

/* Stops accepting calls, cancels those in progress (streams end), joins the threads and frees
 * the server. Accepts NULL. */
void ob_grpc_server_stop(ob_grpc_server *s);

typedef struct ob_rest_server ob_rest_server;

/* Defaults of ob_rest_limits. */
#define OB_REST_MAX_CONNECTIONS 256
#define OB_REST_MAX_CLIENT_CONNECTIONS 32
#define OB_REST_REQUEST_TIMEOUT_S 10
#define OB_REST_STREAM_TIMEOUT_S 60
/* Memory of one connection for its request line and headers (and the body's read buffer): a
 * request whose headers do not fit is answered 431. */
#define OB_REST_CONNECTION_MEMORY ((size_t)32 << 10)

/* What one REST server lets its clients hold; 0 in a field: its default. */
typedef struct ob_rest_limits {
    int max_streams;            /* event streams open at once [OB_SERVERS_MAX_STREAMS]; 429 */
    int max_connections;        /* connections open at once [OB_REST_MAX_CONNECTIONS] */
    int max_client_connections; /* of them from one IP address [OB_REST_MAX_CLIENT_CONNECTIONS];
                                 * one more is closed as soon as it is accepted */
    int request_timeout_s;      /* a connection that sends nothing for this long while its
                                 * request (headers or body) arrives, or between two requests,
                                 * is closed [OB_REST_REQUEST_TIMEOUT_S] */
    int stream_timeout_s;       /* an event stream whose client takes nothing for this long is
                                 * closed [OB_REST_STREAM_TIMEOUT_S]; SSE streams send a comment
                                 * every 15 s, so it must be longer than that */
} ob_rest_limits;

/* Binds addr ("host:port"; port 0 picks a free one, returned in *bound_port) and serves the
 * REST API, one thread per connection, under the limits (borrowed; NULL: every default).
 * svc is borrowed; token copied. */
ob_status ob_rest_server_start(ob_rest_server **out, ob_service *svc, const char *addr,
                               const char *token, const ob_rest_limits *limits, int *bound_port,
                               ob_err *err);

/* Ends open event streams, stops the server and frees it. Accepts NULL. */
void ob_rest_server_stop(ob_rest_server *s);

/* Largest request body or message the servers accept: a spec of OB_JOBSPEC_MAX_BYTES plus room
 * for the envelope. */
#define OB_API_MAX_REQUEST ((size_t)1 << 21)

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_SERVERS_H */
