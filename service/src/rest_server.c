/* The REST front end on libmicrohttpd, one thread per connection, JSON by jansson in the proto3
 * JSON mapping (lowerCamelCase names, 64-bit integers as strings, enums by name). This file is
 * the server: its connections (the body as it arrives), the screening of every request from
 * its headers (Host, token, size, content type), the seam that answers a request without a
 * socket (ob__rest_handle), start and stop. The routes are one table in rest_routes.c; the
 * answers and the request's fields are made and read in rest_exchange.c.
 * The web dashboard's embedded files are served under /ui/ (ui_server.c), without the token;
 * they are no part of the API and not in the OpenAPI document. */
#include "rest_internal.h"
#include "onebit/base.h"
#include "onebit/servers.h"
#include "tls_internal.h"
#include "ui_server.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* GnuTLS priorities of the REST port: TLS 1.2 and 1.3, AEAD ciphers, ECDHE key exchange. */
#define OB_REST_TLS_PRIORITIES                                                                     \
    "SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:"         \
    "+CHACHA20-POLY1305:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA"

/* ---- screening ------------------------------------------------------------------------- */

static int authorized(const ob_rest_server *s, const ob__rest_exchange *ex)
{
    if (!s->token) return 1;
    const char *h = ob__rest_header(ex, "Authorization");
    return h && !strncmp(h, "Bearer ", 7) && ob_secret_equal(h + 7, s->token);
}

/* 1 for a Host header that names a loopback address ("localhost", "127.0.0.1:8080",
 * "[::1]:8080"): a server bound to loopback answers nothing else, so that a web page whose
 * name was rebound to 127.0.0.1 cannot talk to it. */
static int loopback_host(const char *host)
{
    if (!host) return 0;
    char name[256];
    size_t n;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        if (!close) return 0;
        n = (size_t)(close - host) + 1;
    } else {
        n = strcspn(host, ":");
    }
    if (n == 0 || n >= sizeof name) return 0;
    memcpy(name, host, n);
    name[n] = '\0';
    if (!strcasecmp(name, "localhost") || !strcmp(name, "[::1]")) return 1;
    struct in_addr a;
    return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* 1 when the connection's TLS peer sent a certificate that the client CA (the trust list
 * libmicrohttpd was given) verifies. */
static int client_cert_verified(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!ci || !ci->tls_session) return 0;
    unsigned status = 0;
    gnutls_session_t tls = (gnutls_session_t)ci->tls_session;
    return gnutls_certificate_verify_peers2(tls, &status) == 0 && status == 0;
}

/* The first look at a request, from its headers alone: the Host (on a loopback bind), the
 * bearer token, the declared body size, and the content type of a POST (JSON only: a browser
 * sends text/plain and form posts to any site without asking, JSON only after a CORS preflight
 * this server never grants). Returns 1 when the request may go on, 0 after queueing the
 * refusal in the exchange. */

size_t ob__rest_body_limit(const ob_rest_server *s, const char *method, const char *path)
{
    if (!strcmp(method, "POST") && !strcmp(path, "/v1/jobs"))
        return ob_service_max_submit_bytes(s->svc, 1);
    return OB_API_MAX_REQUEST;
}

static int screen(ob_rest_server *s, ob__rest_exchange *ex, const char *method, const char *url)
{
    size_t limit = ex->rq->limit;
    char msg[200];
    const char *host = ob__rest_header(ex, MHD_HTTP_HEADER_HOST);
    const char *len = ob__rest_header(ex, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *type = ob__rest_header(ex, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (s->client_certs && !(ex->conn && client_cert_verified(ex->conn))) {
        ob__rest_send_error(ex, OB_ERR_UNAUTHENTICATED,
                            "a client certificate signed by onebitd's --tls-client-ca is required");
    } else if (s->loopback && !loopback_host(host)) {
        snprintf(msg, sizeof msg, "host '%.100s' is not served here", host ? host : "");
        ob__rest_send_error_http(ex, 421, "PERMISSION_DENIED", msg);
    } else if (strcmp(url, "/healthz") != 0 && !ob__ui_path(url) && !authorized(s, ex)) {
        /* /healthz says only "SERVING", for probes that carry no credentials; /ui/ serves only
         * the dashboard's embedded code, which asks for the token itself. */
        ob__rest_send_error(ex, OB_ERR_UNAUTHENTICATED, "missing or wrong bearer token");
    } else if (len && strtoull(len, NULL, 10) > limit) {
        snprintf(msg, sizeof msg, "body: larger than the limit of %zu bytes", limit);
        ob__rest_send_error(ex, OB_ERR_TOO_LARGE, msg);
    } else if (!strcmp(method, "POST") &&
               (!type || strncasecmp(type, "application/json", 16) != 0 ||
                (type[16] && type[16] != ';' && type[16] != ' '))) {
        snprintf(msg, sizeof msg, "Content-Type: expected application/json, got '%.80s'",
                 type ? type : "");
        ob__rest_send_error_http(ex, 415, "INVALID_ARGUMENT", msg);
    } else {
        return 1;
    }
    return 0;
}
/* ---- connections --------------------------------------------------------------------------- */

/* Sends what a route or the screening answered; closes the connection when that failed. */
static enum MHD_Result answer(ob__rest_exchange *ex, enum MHD_Result routed)
{
    if (routed == MHD_NO) ex->drop = 1;
    enum MHD_Result ret = ob__rest_queue_answer(ex);
    ob__rest_exchange_clear(ex);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    ob_rest_server *s = cls;
    ob__rest_body *rq = *con_cls;
    ob__rest_exchange ex = {.conn = conn, .rq = rq};
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        *con_cls = rq;
        ex.rq = rq;
        rq->limit = ob__rest_body_limit(s, method, url);
        /* The headers are in: a body has the budget's body deadline, an answer none. */
        int body = strcmp(method, "GET") && strcmp(method, "HEAD") && strcmp(method, "DELETE");
        ob__rest_conns_phase(s->conns, conn,
                             body ? OB__REST_CONN_UPLOADING : OB__REST_CONN_ANSWERING);
        /* Everything that can refuse a request is decided here, from the headers, before a
         * byte of the body is read or buffered. */
        if (screen(s, &ex, method, url)) return MHD_YES;
        rq->answered = 1;
        return answer(&ex, MHD_YES);
    }
    if (rq->answered) {
        *upload_size = 0; /* refused already: the body is dropped as it arrives */
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (rq->too_large || n > rq->limit - rq->len) {
            rq->too_large = 1; /* keep reading (and dropping) so that the answer can be sent */
            return MHD_YES;
        }
        if (rq->len + n + 1 > rq->cap) {
            size_t ncap = (rq->len + n + 1) * 2;
            if (ncap > rq->limit + 1) ncap = rq->limit + 1;
            char *b = realloc(rq->body, ncap);
            if (!b) return MHD_NO;
            rq->body = b;
            rq->cap = ncap;
        }
        memcpy(rq->body + rq->len, upload, n);
        rq->len += n;
        rq->body[rq->len] = '\0';
        return MHD_YES;
    }
    ob__rest_conns_phase(s->conns, conn, OB__REST_CONN_ANSWERING);
    if (!rq->too_large && ob__ui_path(url)) return ob__ui_serve(conn, method, url);
    return answer(&ex, ob__rest_route_request(s, &ex, url, method));
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    ob_rest_server *s = cls;
    (void)toe;
    /* Kept alive: the next request's headers have the header deadline from now. */
    ob__rest_conns_phase(s->conns, conn, OB__REST_CONN_WAITING);
    ob__rest_body *rq = *con_cls;
    if (rq) {
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
}

ob_status ob__rest_server_create(ob_rest_server **out, ob_service *svc, const char *token,
                                 int loopback, int max_streams, ob_err *err)
{
    *out = NULL;
    ob_rest_server *s = calloc(1, sizeof *s);
    if (!s || (token && token[0] && !(s->token = strdup(token)))) {
        free(s);
        return OB_ERR(err, OB_ERR_NOMEM, "allocating the REST server");
    }
    s->svc = svc;
    s->loopback = loopback;
    s->limits.max_streams = max_streams > 0 ? max_streams : OB_SERVERS_MAX_STREAMS;
    s->limits.max_connections = OB_REST_MAX_CONNECTIONS;
    s->limits.max_client_connections = OB_REST_MAX_CLIENT_CONNECTIONS;
    s->limits.request_timeout_s = OB_REST_REQUEST_TIMEOUT_S;
    s->limits.stream_timeout_s = OB_REST_STREAM_TIMEOUT_S;
    *out = s;
    return OB_OK;
}

/* libmicrohttpd's '+' to ' ' in query arguments, before the unescaping. */
static void unescape_plus(char *t)
{
    for (; *t; t++)
        if (*t == '+') *t = ' ';
}

/* Cuts query (a copy, modified in place) into its key, value pairs, as libmicrohttpd does:
 * '&' between arguments, the first '=' between key and value (none: the value is NULL), each
 * unescaped. pairs has room for 2 * (the number of '&' + 1). Returns the number of pairs. */
static size_t parse_query(char *query, const char **pairs)
{
    size_t n = 0;
    for (char *p = query; p;) {
        char *amp = strchr(p, '&');
        if (amp) *amp = '\0';
        if (*p) {
            char *eq = strchr(p, '=');
            if (eq) {
                *eq = '\0';
                unescape_plus(eq + 1);
                ob__rest_unescape(NULL, NULL, eq + 1);
            }
            unescape_plus(p);
            ob__rest_unescape(NULL, NULL, p);
            pairs[2 * n] = p;
            pairs[2 * n + 1] = eq ? eq + 1 : NULL;
            n++;
        }
        p = amp ? amp + 1 : NULL;
    }
    return n;
}

void ob__rest_answer_clear(ob__rest_answer *a)
{
    free(a->body);
    memset(a, 0, sizeof *a);
}

ob_status ob__rest_handle(ob_rest_server *s, const ob__rest_request *req, ob__rest_answer *out,
                          ob_err *err)
{
    memset(out, 0, sizeof *out);
    size_t tlen = strlen(req->target), n_amp = 0;
    for (const char *c = req->target; *c; c++)
        n_amp += *c == '&';
    char *url = malloc(tlen + 1);
    const char **pairs = malloc(2 * (n_amp + 1) * sizeof *pairs);
    ob__rest_body rq = {.len = req->len};
    if (url) { /* the limit of the target's path */
        memcpy(url, req->target, tlen + 1);
        url[strcspn(url, "?")] = '\0';
        rq.limit = ob__rest_body_limit(s, req->method, url);
    }
    if (req->len <= rq.limit) {
        rq.body = req->len ? malloc(req->len + 1) : NULL;
        if (rq.body) {
            memcpy(rq.body, req->body, req->len);
            rq.body[req->len] = '\0';
        }
    } else {
        rq.too_large = 1;
        rq.len = 0;
    }
    if (!url || !pairs || (rq.len && !rq.body)) {
        free(url);
        free(pairs);
        free(rq.body);
        return OB_ERR(err, OB_ERR_NOMEM, "copying a REST request");
    }
    memcpy(url, req->target, tlen + 1);
    char *q = strchr(url, '?');
    if (q) *q++ = '\0';
    ob__rest_unescape(NULL, NULL, url);
    ob__rest_exchange ex = {.rq = &rq,
                            .args = pairs,
                            .n_args = q ? parse_query(q, pairs) : 0,
                            .headers = req->headers,
                            .n_headers = req->n_headers};
    ob_status rc = OB_OK;
    if (screen(s, &ex, req->method, url)) {
        if (!rq.too_large && ob__ui_path(url)) goto done; /* http 0: the dashboard's */
        if (ob__rest_route_request(s, &ex, url, req->method) == MHD_NO) ex.drop = 1;
    }
    if (ex.drop) {
        rc = OB_ERR(err, OB_ERR_NOMEM, "REST %s %.200s: no answer (out of memory)", req->method,
                    url);
        goto done;
    }
    const char *text = ex.text ? ex.text : ex.fixed;
    size_t len = ex.text ? ex.text_len : ex.fixed_len;
    out->http = ex.http;
    out->type = ex.type;
    memcpy(out->headers, ex.extra, sizeof out->headers);
    out->stream = ex.stream != NULL;
    if (!out->stream) {
        out->body = malloc(len + 1);
        if (!out->body) {
            rc = OB_ERR(err, OB_ERR_NOMEM, "copying a REST answer");
            goto done;
        }
        memcpy(out->body, text ? text : "", len);
        out->body[len] = '\0';
        out->len = len;
    }
done:
    ob__rest_exchange_clear(&ex);
    free(rq.body);
    free(pairs);
    free(url);
    return rc;
}

ob_status ob_rest_server_start(ob_rest_server **out, ob_service *svc, const char *addr,
                               const char *token, const ob_rest_limits *limits,
                               const ob_tls_config *tls, int *bound_port, ob_err *err)
{
    *out = NULL;
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return OB_ERR(err, OB_ERR_UNSUPPORTED,
                      "REST: this libmicrohttpd was built without TLS (GnuTLS); it cannot serve "
                      "HTTPS");
    ob_rest_limits lim = {0};
    if (limits) lim = *limits;
    if (lim.max_streams <= 0) lim.max_streams = OB_SERVERS_MAX_STREAMS;
    if (lim.max_connections <= 0) lim.max_connections = OB_REST_MAX_CONNECTIONS;
    if (lim.max_client_connections <= 0)
        lim.max_client_connections = OB_REST_MAX_CLIENT_CONNECTIONS;
    if (lim.request_timeout_s <= 0) lim.request_timeout_s = OB_REST_REQUEST_TIMEOUT_S;
    if (lim.stream_timeout_s <= 0) lim.stream_timeout_s = OB_REST_STREAM_TIMEOUT_S;
    if (lim.max_client_connections > lim.max_connections)
        lim.max_client_connections = lim.max_connections;
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host || !colon[1])
        return OB_ERR(err, OB_ERR_INVALID_ARG, "REST address '%s': expected HOST:PORT", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    char *h = host;
    if (h[0] == '[' && h[strlen(h) - 1] == ']') { /* [::1]:8080 */
        h[strlen(h) - 1] = '\0';
        h++;
    }
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int g = getaddrinfo(h, colon + 1, &hints, &ai);
    if (g != 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "REST address '%s': %s", addr, gai_strerror(g));
    ob_rest_server *s;
    ob_status rc = ob__rest_server_create(&s, svc, token, 0, lim.max_streams, err);
    if (rc) {
        freeaddrinfo(ai);
        return rc;
    }
    s->limits = lim;
    /* Half the connections may wait for their request at once; the request's headers have the
     * request timeout from the connection's start (or its previous request's end), its body
     * three times that. */
    rc = ob__rest_conns_create(&s->conns, lim.max_connections,
                               lim.max_connections > 1 ? lim.max_connections / 2 : 1,
                               (double)lim.request_timeout_s, 3.0 * lim.request_timeout_s, err);
    if (rc) {
        freeaddrinfo(ai);
        free(s->token);
        free(s);
        return rc;
    }
    if (ai->ai_family == AF_INET)
        s->loopback =
            (ntohl(((const struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    else if (ai->ai_family == AF_INET6)
        s->loopback = IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    /* A thread per connection: the event streams' readers block between events, which a
     * thread pool could only afford with suspend and resume. The threads are bounded by the
     * connection limits: one client (one IP address) cannot hold them all, and a connection
     * that stops sending its request is closed after the request timeout. */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* TLS: the key and certificate chain in memory (libmicrohttpd copies them); a client CA
     * makes GnuTLS ask for a client certificate, which screen() then requires verified. The
     * options are an array so that the plaintext server passes none of them. */
    struct MHD_OptionItem tls_opts[5];
    int n_tls = 0;
    if (tls) {
        flags |= MHD_USE_TLS;
        /* TLS 1.2 and 1.3 only, AEAD ciphers only, forward-secret key exchange only: what the
         * gRPC port (the C core's defaults) accepts too. */
        tls_opts[n_tls++] =
            (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)OB_REST_TLS_PRIORITIES};
        tls_opts[n_tls++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, tls->key_pem};
        tls_opts[n_tls++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, tls->cert_pem};
        if (tls->client_ca_pem) {
            tls_opts[n_tls++] =
                (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, tls->client_ca_pem};
            s->client_certs = 1;
        }
    }
    tls_opts[n_tls] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
        ob__rest_conns_notify, s->conns, MHD_OPTION_CONNECTION_LIMIT, (unsigned)lim.max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)lim.max_client_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)lim.request_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, OB_REST_CONNECTION_MEMORY, MHD_OPTION_UNESCAPE_CALLBACK,
        ob__rest_unescape, NULL, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        ob__rest_conns_destroy(s->conns);
        free(s->token);
        free(s);
        return OB_ERR(err, OB_ERR_IO, "REST: cannot listen on %s%s", addr,
                      tls ? " (or the TLS certificate and key were refused)" : "");
    }
    if (bound_port) {
        const union MHD_DaemonInfo *info =
            MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
        *bound_port = info ? info->port : 0;
    }
    *out = s;
    return OB_OK;
}

void ob_rest_server_stop(ob_rest_server *s)
{
    if (!s) return;
    s->stopping = 1;
    if (s->daemon) MHD_stop_daemon(s->daemon);
    ob__rest_conns_destroy(s->conns);
    free(s->token);
    free(s);
}
