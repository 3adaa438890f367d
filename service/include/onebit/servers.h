/* The two front ends of onebitd over the same service functions: gRPC (onebit.v1.JobService,
 * onebit.v1.WorkerService, grpc.health.v1.Health) on the gRPC C core, and REST/JSON (proto3
 * JSON mapping) on libmicrohttpd. Both are thin: they decode a request, call an ob_service_*
 * function, and encode its result or its error through the one status table (status_map.h).
 * With a token set, a call without "authorization: Bearer TOKEN" is refused as
 * UNAUTHENTICATED / 401 before anything else happens.
 *
 * Both serve TLS when given an ob_tls_config (the certificate chain and key onebitd was
 * started with, checked once by ob_tls_config_load); with a client CA in it, both also require
 * a client certificate signed by that CA (mutual TLS). Without one they serve plaintext. */
#ifndef ONEBIT_SERVERS_H
#define ONEBIT_SERVERS_H

#include "onebit/service.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default cap on the event streams open at once, per server. */
#define OB_SERVERS_MAX_STREAMS 256

/* ---- TLS ---------------------------------------------------------------------------------- */

typedef struct ob_tls_config ob_tls_config;

/* Reads and checks the server's PEM files: cert_file (the certificate, then any intermediates),
 * key_file (its unencrypted private key; refused when others may read it, like the token) and
 * client_ca_file (may be NULL: no client certificates; else the CA that signs them). Every
 * failure names the file: unreadable, empty, not PEM, a key that does not belong to the
 * certificate. The paths are borrowed; *out is owned by the caller. */
ob_status ob_tls_config_load(ob_tls_config **out, const char *cert_file, const char *key_file,
                             const char *client_ca_file, ob_err *err);

/* 1 when the configuration requires client certificates (a client CA was given). */
int ob_tls_config_requires_client_cert(const ob_tls_config *t);

/* Wipes the key from memory and frees. Accepts NULL. */
void ob_tls_config_destroy(ob_tls_config *t);

/* ---- gRPC ---------------------------------------------------------------------------------- */

typedef struct ob_grpc_server ob_grpc_server;

typedef struct ob_grpc_server_config {
    const char *addr;  /* "host:port"; port 0 picks a free one */
    const char *token; /* copied; NULL or "": none */
    int threads;       /* handler threads on the one completion queue [4] */
    /* At most this many server streams (WatchJob, Health.Watch) are open at once
     * (0: OB_SERVERS_MAX_STREAMS); one more is refused with RESOURCE_EXHAUSTED. */
    int max_streams;
    const ob_tls_config *tls; /* borrowed, used only during start; NULL: plaintext */
    /* With tls: a second port serving the same calls in plaintext, for workers' progress
     * reports (onebit-worker has no TLS); NULL: none. The caller decides where it may be. */
    const char *plain_addr;
} ob_grpc_server_config;

/* Binds cfg->addr (the port bound in *bound_port) and cfg->plain_addr when set (its port in
 * *plain_port, may be NULL otherwise) and starts the handler threads. svc is borrowed and must
 * outlive the server; cfg is borrowed for the call. *out is owned by the caller. */
ob_status ob_grpc_server_start(ob_grpc_server **out, ob_service *svc,
                               const ob_grpc_server_config *cfg, int *bound_port, int *plain_port,
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
 * svc is borrowed; token copied. tls (borrowed, used only during start; NULL: plaintext)
 * makes it HTTPS only; OB_ERR_UNSUPPORTED when libmicrohttpd was built without TLS. */
ob_status ob_rest_server_start(ob_rest_server **out, ob_service *svc, const char *addr,
                               const char *token, const ob_rest_limits *limits,
                               const ob_tls_config *tls, int *bound_port, ob_err *err);

/* Ends open event streams, stops the server and frees it. Accepts NULL. */
void ob_rest_server_stop(ob_rest_server *s);

/* Largest request body or message the servers accept: a spec of OB_JOBSPEC_MAX_BYTES plus room
 * for the envelope. */
#define OB_API_MAX_REQUEST ((size_t)1 << 21)

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_SERVERS_H */
