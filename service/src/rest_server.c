/* The REST front end on libmicrohttpd, one thread per connection, JSON by jansson in the proto3
 * JSON mapping (lowerCamelCase names, 64-bit integers as strings, enums by name). The routes are
 * one table (`routes`, at the end), each described in docs/openapi.json, which the server also
 * serves at GET /v1/openapi.json; tests/test_openapi.py keeps the two the same.
 * The web dashboard's embedded files are served under /ui/ (ui_server.c), without the token;
 * they are no part of the API and not in the OpenAPI document.
 *
 * Errors: {"error": {"code": <HTTP status>, "status": "<gRPC code name>", "message": "..."}},
 * statuses from the one table in status_map.h. */
#include "openapi.h"
#include "rest_internal.h"
#include "onebit/job_codec.h"
#include "onebit/servers.h"
#include "onebit/status_map.h"
#include "onebit/base.h"
#include "tls_internal.h"
#include "ui_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

/* GnuTLS priorities of the REST port: TLS 1.2 and 1.3, AEAD ciphers, ECDHE key exchange. */
#define OB_REST_TLS_PRIORITIES                                                                     \
    "SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:"       \
    "+CHACHA20-POLY1305:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA"

struct ob_rest_server {
    struct MHD_Daemon *daemon;
    ob_service *svc;
    char *token;
    int loopback;          /* bound to a loopback address: only loopback Host names are served */
    int client_certs;      /* TLS with a client CA: every request needs a certificate it signed */
    atomic_int stopping;   /* read by the event streams' threads */
    atomic_int streams;    /* event streams open now */
    ob_rest_limits limits; /* every field set */
};

/* Per-request state: the body as it arrives. */
typedef struct request {
    char *body;
    size_t len, cap;
    int too_large;
    int answered; /* refused from its headers: the response is queued, the body dropped */
} request;

/* ---- JSON of the API types --------------------------------------------------------------- */

/* Jobs, events and checkpoints are encoded by job_codec (shared with the gRPC server and the
 * CLI). */

/* ---- exchanges ---------------------------------------------------------------------------- */

/* One request as the routes see it, and the answer they leave in it. The request's query
 * arguments and headers come from the libmicrohttpd connection, or (ob__rest_handle, no
 * connection) from the pairs parsed out of the caller's target and headers. The answer is sent
 * by on_request (queue_answer) or copied out by ob__rest_handle. */
typedef struct exchange {
    struct MHD_Connection *conn; /* borrowed; NULL in ob__rest_handle */
    request *rq;                 /* borrowed: the body */
    const char *const *args;     /* without conn: key, value pairs (value NULL: "key" alone) */
    size_t n_args;
    const char *const *headers; /* without conn: name, value pairs */
    size_t n_headers;
    /* the answer */
    int http;          /* 0: none yet */
    const char *type;  /* static */
    char *text;        /* owned, or NULL with fixed */
    const char *fixed; /* a static body (not freed) */
    size_t fixed_len;
    int bare;                    /* without the security headers (the OpenAPI document) */
    struct MHD_Response *stream; /* owned: an answer whose body is produced as it is read */
    int drop;                    /* no answer could be made: close the connection */
} exchange;

/* A query argument of the request (the first with that name), or NULL. Borrowed. */
static const char *arg(const exchange *ex, const char *name)
{
    if (ex->conn) return MHD_lookup_connection_value(ex->conn, MHD_GET_ARGUMENT_KIND, name);
    for (size_t i = 0; i < ex->n_args; i++)
        if (!strcmp(ex->args[2 * i], name)) return ex->args[2 * i + 1];
    return NULL;
}

/* A header of the request (the first with that name, in any case), or NULL. Borrowed. */
static const char *header(const exchange *ex, const char *name)
{
    if (ex->conn) return MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND, name);
    for (size_t i = 0; i < ex->n_headers; i++)
        if (!strcasecmp(ex->headers[2 * i], name)) return ex->headers[2 * i + 1];
    return NULL;
}

static const char oom_json[] = "{\"error\":{\"code\":503,\"status\":\"RESOURCE_EXHAUSTED\","
                               "\"message\":\"out of memory\"}}";

/* Sends the exchange's answer on its connection; frees what the answer owned. */
static enum MHD_Result queue_answer(exchange *ex)
{
    struct MHD_Response *r = ex->stream;
    ex->stream = NULL;
    if (ex->drop) return MHD_NO;
    if (!r && ex->text) {
        r = MHD_create_response_from_buffer(strlen(ex->text), ex->text, MHD_RESPMEM_MUST_FREE);
        if (!r) free(ex->text);
        ex->text = NULL;
        if (!r) return MHD_NO;
    } else if (!r) {
        r = MHD_create_response_from_buffer(ex->fixed_len, (void *)ex->fixed,
                                            MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
    }
    if (ex->type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ex->type);
    if (!ex->bare) ob__rest_security_headers(r);
    enum MHD_Result ret = MHD_queue_response(ex->conn, (unsigned)ex->http, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- responses ---------------------------------------------------------------------------- */

static enum MHD_Result send_text(exchange *ex, int http, const char *type, char *text /* taken */)
{
    free(ex->text);
    ex->text = text;
    if (!text) {
        ex->http = 503;
        ex->type = "application/json";
        ex->fixed = oom_json;
        ex->fixed_len = sizeof oom_json - 1;
        return MHD_YES;
    }
    ex->http = http;
    ex->type = type;
    return MHD_YES;
}

/* A response whose body libmicrohttpd produces as it is read (taken); headers are added by the
 * route, the security headers too. */
static enum MHD_Result send_stream(exchange *ex, int http, struct MHD_Response *r /* taken */)
{
    ex->http = http;
    ex->stream = r;
    ex->bare = 1;
    return MHD_YES;
}

static enum MHD_Result send_json(exchange *ex, int http, json_t *o /* taken */)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text) {
        size_t n = strlen(text);
        char *t = realloc(text, n + 2);
        if (t) {
            t[n] = '\n';
            t[n + 1] = '\0';
            text = t;
        }
    }
    return send_text(ex, http, "application/json", text);
}

/* The length of the valid UTF-8 sequence at s (1 to 4), or 0 when there is none: overlong
 * forms, surrogates and code points past U+10FFFF are invalid, as for jansson. */
static size_t utf8_sequence(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

/* Replaces, in place, every byte of s that is not part of valid UTF-8 with '?': an error
 * message quotes what the client sent (a path, a field name), and JSON text is UTF-8 (jansson
 * refuses any other string, which would leave the error without its message). */
static void scrub_utf8(char *s)
{
    unsigned char *u = (unsigned char *)s;
    while (*u) {
        size_t n = utf8_sequence(u);
        if (n == 0) {
            *u++ = '?';
        } else {
            u += n;
        }
    }
}

static enum MHD_Result send_error_http(exchange *ex, int http, const char *status, const char *msg)
{
    json_t *e = json_object();
    json_object_set_new(e, "code", json_integer(http));
    json_object_set_new(e, "status", json_string(status));
    char text[OB_ERR_MSG_LEN];
    ob_status_public_message(msg, text, sizeof text);
    scrub_utf8(text);
    json_object_set_new(e, "message", json_string(text));
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    return send_json(ex, http, o);
}

static enum MHD_Result send_error(exchange *ex, ob_status st, const char *msg)
{
    return send_error_http(ex, ob_status_http(st), ob_status_code_name(st), msg);
}

/* ---- request fields ----------------------------------------------------------------------- */

/* Reads an int32 query parameter; 0 when absent. */
static ob_status query_int(const exchange *ex, const char *name, long long lo, long long hi,
                           long long *out, ob_err *err)
{
    *out = 0;
    const char *v = arg(ex, name);
    if (!v || !v[0]) return OB_OK;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno || x < lo || x > hi)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "%s: expected an integer from %lld to %lld, got '%.40s'", name, lo, hi, v);
    *out = x;
    return OB_OK;
}

/* Reads an int32 JSON field: a number, or a string holding one (proto3 JSON accepts both). */
static int json_int32(const json_t *v, int *out)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < INT32_MIN || x > INT32_MAX) return -1;
        *out = (int)x;
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (!s[0] || *end || errno || x < INT32_MIN || x > INT32_MAX) return -1;
        *out = (int)x;
        return 0;
    }
    return -1;
}

static void add_problem(char *buf, size_t cap, const char *text)
{
    size_t len = strlen(buf);
    if (len && len + 2 < cap) {
        strcat(buf, "; ");
        len += 2;
    }
    ob_strlcpy(buf + len, text, cap - len);
}

/* ---- routes ------------------------------------------------------------------------------- */

static enum MHD_Result do_submit(ob_rest_server *s, exchange *ex, const char *id)
{
    (void)id;
    json_error_t jerr;
    json_t *o =
        json_loadb(ex->rq->body ? ex->rq->body : "", ex->rq->len, JSON_REJECT_DUPLICATES, &jerr);
    char msg[OB_ERR_MSG_LEN];
    if (!o) {
        snprintf(msg, sizeof msg, "body: malformed JSON at line %d column %d: %.300s", jerr.line,
                 jerr.column, jerr.text);
        return send_error(ex, OB_ERR_INVALID_ARG, msg);
    }
    if (!json_is_object(o)) {
        json_decref(o);
        return send_error(ex, OB_ERR_INVALID_ARG, "body: expected a JSON object");
    }
    char problems[OB_ERR_MSG_LEN - 16] = "";
    ob_submit_req req = {.max_restarts = -1};
    char *spec_text = NULL;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        char text[300];
        if (!strcmp(key, "spec")) {
            if (json_is_string(v)) {
                req.spec = json_string_value(v);
                req.spec_len = json_string_length(v);
            } else if (json_is_object(v)) {
                spec_text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
                req.spec = spec_text;
                req.spec_len = spec_text ? strlen(spec_text) : 0;
            } else {
                add_problem(problems, sizeof problems,
                            "spec: expected the spec as a string (JSON or YAML) or an object");
            }
        } else if (!strcmp(key, "worldSize") || !strcmp(key, "world_size")) {
            if (json_int32(v, &req.world_size) != 0) {
                snprintf(text, sizeof text, "%.40s: expected an integer", key);
                add_problem(problems, sizeof problems, text);
            }
        } else if (!strcmp(key, "labels")) {
            if (json_is_string(v)) {
                req.labels = json_string_value(v);
            } else {
                add_problem(problems, sizeof problems,
                            "labels: expected a string \"key=value,key=value\"");
            }
        } else if (!strcmp(key, "deadline")) {
            if (json_is_string(v)) {
                req.deadline = json_string_value(v);
            } else {
                add_problem(problems, sizeof problems,
                            "deadline: expected a string such as \"2h\" or \"1h30m\"");
            }
        } else if (!strcmp(key, "requestId") || !strcmp(key, "request_id")) {
            if (json_is_string(v)) {
                req.request_id = json_string_value(v);
            } else {
                snprintf(text, sizeof text, "%.40s: expected a string", key);
                add_problem(problems, sizeof problems, text);
            }
        } else if (!strcmp(key, "maxRestarts") || !strcmp(key, "max_restarts")) {
            if (json_int32(v, &req.max_restarts) != 0) {
                snprintf(text, sizeof text, "%.40s: expected an integer", key);
                add_problem(problems, sizeof problems, text);
            }
        } else {
            snprintf(text, sizeof text, "%.100s: unknown field", key);
            add_problem(problems, sizeof problems, text);
        }
    }
    enum MHD_Result ret;
    if (problems[0]) {
        ret = send_error(ex, OB_ERR_INVALID_ARG, problems);
    } else {
        ob_job j;
        ob_err err;
        ob_status rc = ob_service_submit(s->svc, &req, &j, &err);
        if (rc) {
            ret = send_error(ex, rc, err.msg);
        } else {
            ret = send_json(ex, 200, ob_job_to_json(&j));
            ob_job_clear(&j);
        }
    }
    free(spec_text);
    json_decref(o);
    return ret;
}

static enum MHD_Result do_list(ob_rest_server *s, exchange *ex, const char *id)
{
    (void)id;
    ob_err err;
    long long page_size;
    if (query_int(ex, "pageSize", 0, 1000, &page_size, &err))
        return send_error(ex, OB_ERR_INVALID_ARG, err.msg);
    ob_job_state state = OB_JOB_UNSPECIFIED;
    const char *st = arg(ex, "state");
    if (st && st[0] && ob_job_state_parse(st, &state) != OB_OK) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "state: expected PENDING, RUNNING, RESTARTING, SUCCEEDED, FAILED or CANCELLED, "
                 "got '%.40s'",
                 st);
        return send_error(ex, OB_ERR_INVALID_ARG, msg);
    }
    const char *token = arg(ex, "pageToken");
    ob_job *jobs = NULL;
    size_t n = 0;
    char next[OB_PAGE_TOKEN_LEN];
    const char *selector = arg(ex, "labelSelector");
    ob_status rc =
        ob_service_list(s->svc, state, selector, (int)page_size, token, &jobs, &n, next, &err);
    if (rc) return send_error(ex, rc, err.msg);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, ob_job_to_json(&jobs[i]));
    ob_job_array_free(jobs, n);
    json_t *o = json_object();
    json_object_set_new(o, "jobs", arr);
    json_object_set_new(o, "nextPageToken", json_string(next));
    return send_json(ex, 200, o);
}

static enum MHD_Result do_checkpoints(ob_rest_server *s, exchange *ex, const char *id)
{
    ob_checkpoint_info *ck = NULL;
    size_t n = 0;
    ob_err err;
    ob_status rc = ob_service_checkpoints(s->svc, id, &ck, &n, &err);
    if (rc) return send_error(ex, rc, err.msg);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(arr, ob_checkpoint_info_to_json(&ck[i]));
    }
    free(ck);
    json_t *o = json_object();
    json_object_set_new(o, "checkpoints", arr);
    return send_json(ex, 200, o);
}

/* An event stream outlives the request timeout. MHD counts only bytes that move as activity,
 * and checks the timeout as soon as a reader returns, however long it waited: an SSE stream
 * (a comment at least every 15 s) is closed when its client takes nothing for the stream
 * timeout (seconds); a followed log, which has nothing to write while the job is quiet, has no
 * timeout (0) and ends with its job, its client or the server. Both count against max_streams. */
static void stream_timeout(const exchange *ex, int seconds)
{
    if (ex->conn)
        MHD_set_connection_option(ex->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)seconds);
}

/* Server-sent events: the history after afterSeq, then new events as they come. */
typedef struct sse {
    ob_rest_server *srv;
    char job_id[OB_JOB_ID_LEN];
    int64_t last_seq;
    char *pending;
    size_t len, off;
    int done;
    int64_t last_write_ms;
} sse;

/* Appends text to the stream's pending bytes. */
static int sse_append(sse *e, const char *text)
{
    size_t n = strlen(text);
    char *p = realloc(e->pending, e->len + n + 1);
    if (!p) return -1;
    memcpy(p + e->len, text, n + 1);
    e->pending = p;
    e->len += n;
    return 0;
}

/* Formats the job's next events; returns how many. */
static int sse_fill(sse *e)
{
    ob_job_event *evs = NULL;
    size_t n = 0;
    ob_err err;
    free(e->pending);
    e->pending = NULL;
    e->len = e->off = 0;
    /* The state first: a job seen final has its final event stored (see the gRPC stream). */
    ob_job j;
    if (ob_service_get(e->srv->svc, e->job_id, &j, &err) != OB_OK) {
        e->done = 1;
        return 0;
    }
    int final = ob_job_state_final(j.state);
    ob_job_clear(&j);
    if (ob_service_events(e->srv->svc, e->job_id, e->last_seq, 16, &evs, &n, &err) != OB_OK) {
        e->done = 1;
        return 0;
    }
    if (n == 0 && final) e->done = 1;
    for (size_t i = 0; i < n && !e->done; i++) {
        json_t *o = ob_job_event_to_json(&evs[i]);
        char *data = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        char head[128];
        snprintf(head, sizeof head, "id: %lld\nevent: %s\ndata: ", (long long)evs[i].seq,
                 evs[i].kind);
        if (!data || sse_append(e, head) || sse_append(e, data) || sse_append(e, "\n\n")) {
            free(data);
            e->done = 1;
            break;
        }
        free(data);
        e->last_seq = evs[i].seq;
        if (!strcmp(evs[i].kind, "state") && ob_job_state_final(evs[i].state)) e->done = 1;
    }
    free(evs);
    return (int)n;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sse *e = cls;
    for (;;) {
        if (e->off < e->len) {
            size_t n = e->len - e->off;
            if (n > max) n = max;
            memcpy(buf, e->pending + e->off, n);
            e->off += n;
            e->last_write_ms = ob_wall_ms();
            return (ssize_t)n;
        }
        if (e->done || e->srv->stopping) return MHD_CONTENT_READER_END_OF_STREAM;
        int64_t seen = ob_service_event_counter(e->srv->svc);
        if (sse_fill(e) > 0) continue;
        if (e->done) continue;
        if (ob_wall_ms() - e->last_write_ms > 15000) { /* keeps proxies from closing the stream */
            if (sse_append(e, ": keepalive\n\n")) return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (ob_service_wait(e->srv->svc, seen, 500) < 0) return MHD_CONTENT_READER_END_OF_STREAM;
    }
}

static void sse_free(void *cls)
{
    sse *e = cls;
    atomic_fetch_sub(&e->srv->streams, 1);
    free(e->pending);
    free(e);
}

static enum MHD_Result do_events(ob_rest_server *s, exchange *ex, const char *id)
{
    ob_err err;
    long long after;
    if (query_int(ex, "afterSeq", 0, INT64_MAX, &after, &err))
        return send_error(ex, OB_ERR_INVALID_ARG, err.msg);
    /* A reconnecting EventSource sends the id of the last event it saw. */
    const char *last = header(ex, "Last-Event-ID");
    if (last && last[0] && !arg(ex, "afterSeq")) {
        char *end;
        errno = 0;
        long long v = strtoll(last, &end, 10);
        if (*end || errno || v < 0)
            return send_error(ex, OB_ERR_INVALID_ARG, "Last-Event-ID: expected an event number");
        after = v;
    }
    ob_job j;
    ob_status rc = ob_service_get(s->svc, id, &j, &err);
    if (rc) return send_error(ex, rc, err.msg);
    ob_job_clear(&j);
    if (atomic_fetch_add(&s->streams, 1) >= s->limits.max_streams) {
        atomic_fetch_sub(&s->streams, 1);
        char msg[128];
        snprintf(msg, sizeof msg,
                 "%d event streams are open, the most this server keeps; try "
                 "again later",
                 s->limits.max_streams);
        return send_error_http(ex, 429, "RESOURCE_EXHAUSTED", msg);
    }
    sse *e = calloc(1, sizeof *e);
    if (!e) {
        atomic_fetch_sub(&s->streams, 1);
        return send_error(ex, OB_ERR_NOMEM, "out of memory");
    }
    e->srv = s;
    ob_strlcpy(e->job_id, id, sizeof e->job_id);
    e->last_seq = after;
    e->last_write_ms = ob_wall_ms();
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, e, sse_free);
    if (!r) {
        sse_free(e);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    stream_timeout(ex, s->limits.stream_timeout_s);
    ob__rest_security_headers(r);
    return send_stream(ex, 200, r);
}

static int authorized(const ob_rest_server *s, const exchange *ex)
{
    if (!s->token) return 1;
    const char *h = header(ex, "Authorization");
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

static int screen(ob_rest_server *s, exchange *ex, const char *method, const char *url)
{
    char msg[200];
    const char *host = header(ex, MHD_HTTP_HEADER_HOST);
    const char *len = header(ex, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *type = header(ex, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (s->client_certs && !(ex->conn && client_cert_verified(ex->conn))) {
        send_error(ex, OB_ERR_UNAUTHENTICATED,
                   "a client certificate signed by onebitd's --tls-client-ca is required");
    } else if (s->loopback && !loopback_host(host)) {
        snprintf(msg, sizeof msg, "host '%.100s' is not served here", host ? host : "");
        send_error_http(ex, 421, "PERMISSION_DENIED", msg);
    } else if (strcmp(url, "/healthz") != 0 && !ob__ui_path(url) && !authorized(s, ex)) {
        /* /healthz says only "SERVING", for probes that carry no credentials; /ui/ serves only
         * the dashboard's embedded code, which asks for the token itself. */
        send_error(ex, OB_ERR_UNAUTHENTICATED, "missing or wrong bearer token");
    } else if (len && strtoull(len, NULL, 10) > OB_API_MAX_REQUEST) {
        snprintf(msg, sizeof msg, "body: larger than the limit of %zu bytes", OB_API_MAX_REQUEST);
        send_error(ex, OB_ERR_TOO_LARGE, msg);
    } else if (!strcmp(method, "POST") &&
               (!type || strncasecmp(type, "application/json", 16) != 0 ||
                (type[16] && type[16] != ';' && type[16] != ' '))) {
        snprintf(msg, sizeof msg, "Content-Type: expected application/json, got '%.80s'",
                 type ? type : "");
        send_error_http(ex, 415, "INVALID_ARGUMENT", msg);
    } else {
        return 1;
    }
    return 0;
}

static enum MHD_Result wrong_method(exchange *ex, const char *method, const char *url)
{
    char msg[300];
    snprintf(msg, sizeof msg, "method %.10s is not allowed on %.200s", method, url);
    return send_error_http(ex, 405, "UNIMPLEMENTED", msg);
}

/* DELETE /v1/jobs/{id}?keepCheckpoints=true|false: {"id", "checkpointsDeleted"}. */
static enum MHD_Result do_delete(ob_rest_server *s, exchange *ex, const char *id)
{
    ob_err err;
    const char *keep = arg(ex, "keepCheckpoints");
    if (keep && strcmp(keep, "true") && strcmp(keep, "false"))
        return send_error(ex, OB_ERR_INVALID_ARG, "keepCheckpoints: expected true or false");
    int deleted = 0;
    ob_status rc = ob_service_delete(s->svc, id, keep && !strcmp(keep, "true"), &deleted, &err);
    if (rc) return send_error(ex, rc, err.msg);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "checkpointsDeleted", json_integer(deleted));
    return send_json(ex, 200, o);
}

/* GET /v1/jobs/{id}/logs?offset=N&maxBytes=M: {"data": base64, "nextOffset", "size"}. */
static enum MHD_Result do_logs(ob_rest_server *s, exchange *ex, const char *id)
{
    ob_err err;
    long long offset, max_bytes;
    if (query_int(ex, "offset", 0, INT64_MAX, &offset, &err) ||
        query_int(ex, "maxBytes", 0, OB_LOG_READ_MAX, &max_bytes, &err))
        return send_error(ex, OB_ERR_INVALID_ARG, err.msg);
    char *data = NULL;
    size_t len = 0;
    int64_t size = 0;
    ob_status rc = ob_service_logs(s->svc, id, offset, (int)max_bytes, &data, &len, &size, &err);
    if (rc) return send_error(ex, rc, err.msg);
    char *b64 = ob_base64_encode(data, len);
    free(data);
    if (!b64) return send_error(ex, OB_ERR_NOMEM, "encoding logs");
    json_t *o = json_object();
    char num[32];
    json_object_set_new(o, "data", json_string(b64));
    snprintf(num, sizeof num, "%lld", offset + (long long)len);
    json_object_set_new(o, "nextOffset", json_string(num));
    snprintf(num, sizeof num, "%lld", (long long)size);
    json_object_set_new(o, "size", json_string(num));
    free(b64);
    return send_json(ex, 200, o);
}

/* GET /v1/jobs/{id}/logs:stream?offset=|tailLines=&sinceUnixMs=&follow=true: the log itself as
 * text/plain, chunked, from where the query says (the offset in X-Log-Offset), new bytes as they
 * are written with follow=true, until the job has ended and its log is sent. */
typedef struct log_stream {
    ob_rest_server *srv;
    char job_id[OB_JOB_ID_LEN];
    int64_t offset;
    int follow;
} log_stream;

static ssize_t log_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    log_stream *ls = cls;
    ob_service *svc = ls->srv->svc;
    for (;;) {
        if (ls->srv->stopping) return MHD_CONTENT_READER_END_OF_STREAM;
        int64_t seen = ob_service_event_counter(svc);
        ob_err err;
        ob_job j;
        /* The state first, as for the events: a job seen final has its whole log written. */
        if (ob_service_get(svc, ls->job_id, &j, &err) != OB_OK)
            return MHD_CONTENT_READER_END_WITH_ERROR; /* deleted under the stream */
        int final = ob_job_state_final(j.state);
        ob_job_clear(&j);
        char *data = NULL;
        size_t len = 0;
        int64_t size = 0;
        int want = max < (size_t)OB_LOG_READ_MAX ? (int)max : OB_LOG_READ_MAX;
        if (want <= 0) want = 1;
        if (ob_service_logs(svc, ls->job_id, ls->offset, want, &data, &len, &size, &err) != OB_OK)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (len) {
            memcpy(buf, data, len);
            free(data);
            ls->offset += (int64_t)len;
            return (ssize_t)len;
        }
        if (final || !ls->follow) return MHD_CONTENT_READER_END_OF_STREAM;
        /* Woken by the job's events; a log grows without any, so look again every 200 ms. */
        if (ob_service_wait(svc, seen, 200) < 0) return MHD_CONTENT_READER_END_OF_STREAM;
    }
}

static void log_stream_free(void *cls)
{
    log_stream *ls = cls;
    atomic_fetch_sub(&ls->srv->streams, 1);
    free(ls);
}

static enum MHD_Result do_log_stream(ob_rest_server *s, exchange *ex, const char *id)
{
    ob_err err;
    long long offset, tail, since;
    if (query_int(ex, "offset", 0, INT64_MAX, &offset, &err) ||
        query_int(ex, "tailLines", 0, OB_LOG_TAIL_MAX, &tail, &err) ||
        query_int(ex, "sinceUnixMs", 0, INT64_MAX, &since, &err))
        return send_error(ex, OB_ERR_INVALID_ARG, err.msg);
    const char *follow = arg(ex, "follow");
    if (follow && strcmp(follow, "true") && strcmp(follow, "false"))
        return send_error(ex, OB_ERR_INVALID_ARG, "follow: expected true or false");
    if (offset > 0 && (tail || since))
        return send_error(ex, OB_ERR_INVALID_ARG,
                          "offset: give an offset, or tailLines and sinceUnixMs, not both");
    int64_t start = offset;
    ob_status rc =
        tail || since ? ob_service_log_start(s->svc, id, (int)tail, since, &start, &err) : OB_OK;
    ob_job j;
    if (rc == OB_OK && (rc = ob_service_get(s->svc, id, &j, &err)) == OB_OK) ob_job_clear(&j);
    if (rc) return send_error(ex, rc, err.msg);
    if (atomic_fetch_add(&s->streams, 1) >= s->limits.max_streams) {
        atomic_fetch_sub(&s->streams, 1);
        char msg[128];
        snprintf(msg, sizeof msg,
                 "%d streams are open, the most this server keeps; try again later",
                 s->limits.max_streams);
        return send_error_http(ex, 429, "RESOURCE_EXHAUSTED", msg);
    }
    log_stream *ls = calloc(1, sizeof *ls);
    if (!ls) {
        atomic_fetch_sub(&s->streams, 1);
        return send_error(ex, OB_ERR_NOMEM, "out of memory");
    }
    ls->srv = s;
    ob_strlcpy(ls->job_id, id, sizeof ls->job_id);
    ls->offset = start;
    ls->follow = follow && !strcmp(follow, "true");
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 64 << 10, log_stream_read, ls, log_stream_free);
    if (!r) {
        log_stream_free(ls);
        return MHD_NO;
    }
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)start);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Log-Offset", num);
    stream_timeout(ex, 0);
    return send_stream(ex, 200, r);
}

/* ---- the route table -------------------------------------------------------------------- */

static enum MHD_Result do_version(ob_rest_server *s, exchange *ex, const char *id)
{
    (void)s, (void)id;
    return send_text(ex, 200, "application/json",
                     strdup("{\"version\":\"" ONEBIT_VERSION "\",\"api\":\"onebit.v1\"}\n"));
}

static enum MHD_Result do_healthz(ob_rest_server *s, exchange *ex, const char *id)
{
    (void)id;
    /* 503 NOT_SERVING while the job store cannot be written; the reason stays in the daemon's
     * log (this answer is open to callers without credentials). */
    if (!ob_service_serving(s->svc, NULL, 0))
        return send_text(ex, 503, "application/json", strdup("{\"status\":\"NOT_SERVING\"}\n"));
    return send_text(ex, 200, "application/json", strdup("{\"status\":\"SERVING\"}\n"));
}

static enum MHD_Result do_metrics(ob_rest_server *s, exchange *ex, const char *id)
{
    (void)id;
    char *text = NULL;
    ob_err err;
    ob_status rc = ob_service_metrics(s->svc, &text, &err);
    if (rc) return send_error(ex, rc, err.msg);
    return send_text(ex, 200, "text/plain; version=0.0.4", text);
}

/* GET /v1/openapi.json: this API described (docs/openapi.json, compiled in). */
static enum MHD_Result do_openapi(ob_rest_server *s, exchange *ex, const char *id)
{
    (void)s, (void)id;
    ex->http = 200;
    ex->type = "application/json";
    ex->fixed = (const char *)ob_openapi_json;
    ex->fixed_len = ob_openapi_json_len;
    ex->bare = 1; /* as it has always been served */
    return MHD_YES;
}

static enum MHD_Result do_get(ob_rest_server *s, exchange *ex, const char *id)
{
    ob_err err;
    ob_job j;
    ob_status rc = ob_service_get(s->svc, id, &j, &err);
    if (rc) return send_error(ex, rc, err.msg);
    enum MHD_Result ret = send_json(ex, 200, ob_job_to_json(&j));
    ob_job_clear(&j);
    return ret;
}

static enum MHD_Result do_cancel(ob_rest_server *s, exchange *ex, const char *id)
{
    ob_err err;
    ob_job j;
    ob_status rc = ob_service_cancel(s->svc, id, &j, &err);
    if (rc) return send_error(ex, rc, err.msg);
    enum MHD_Result ret = send_json(ex, 200, ob_job_to_json(&j));
    ob_job_clear(&j);
    return ret;
}

typedef enum MHD_Result (*route_fn)(ob_rest_server *s, exchange *ex, const char *id);

/* Every route the server has: method, path ("{id}" stands for a job id, which ends at the next
 * '/' or ':'), handler. docs/openapi.json describes each of them; tests/test_openapi.py reads
 * this table and fails when the two differ. */
static const struct route {
    const char *method;
    const char *path;
    route_fn fn;
} routes[] = {
    {"GET", "/healthz", do_healthz},
    {"GET", "/metrics", do_metrics},
    {"GET", "/v1/version", do_version},
    {"GET", "/v1/openapi.json", do_openapi},
    {"POST", "/v1/jobs", do_submit},
    {"GET", "/v1/jobs", do_list},
    {"GET", "/v1/jobs/{id}", do_get},
    {"DELETE", "/v1/jobs/{id}", do_delete},
    {"POST", "/v1/jobs/{id}:cancel", do_cancel},
    {"GET", "/v1/jobs/{id}/events", do_events},
    {"GET", "/v1/jobs/{id}/checkpoints", do_checkpoints},
    {"GET", "/v1/jobs/{id}/logs", do_logs},
    {"GET", "/v1/jobs/{id}/logs:stream", do_log_stream},
};

/* Whether url has the route's path; the job id of a "{id}" path into id. *bad_id: the path
 * matched but the id is too long to be one. */
static int path_matches(const char *pattern, const char *url, char *id, size_t cap, int *bad_id)
{
    const char *hole = strstr(pattern, "{id}");
    if (!hole) return !strcmp(pattern, url);
    size_t pre = (size_t)(hole - pattern);
    if (strncmp(pattern, url, pre) != 0) return 0;
    const char *rest = url + pre;
    size_t idlen = strcspn(rest, "/:");
    if (idlen == 0 || strcmp(rest + idlen, hole + 4) != 0) return 0;
    if (idlen >= cap) {
        *bad_id = 1;
        return 1;
    }
    memcpy(id, rest, idlen);
    id[idlen] = '\0';
    return 1;
}

static enum MHD_Result route(ob_rest_server *s, exchange *ex, const char *url, const char *method)
{
    char msg[OB_ERR_MSG_LEN];
    if (ex->rq->too_large) {
        snprintf(msg, sizeof msg, "body: larger than the limit of %zu bytes", OB_API_MAX_REQUEST);
        return send_error(ex, OB_ERR_TOO_LARGE, msg);
    }
    int path_known = 0;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        char id[OB_JOB_ID_LEN] = "";
        int bad_id = 0;
        if (!path_matches(routes[i].path, url, id, sizeof id, &bad_id)) continue;
        if (bad_id) {
            const char *rest = url + 9; /* every {id} path starts "/v1/jobs/" */
            size_t idlen = strcspn(rest, "/:");
            snprintf(msg, sizeof msg, "no job with id '%.*s'", (int)(idlen > 64 ? 64 : idlen),
                     rest);
            return send_error(ex, OB_ERR_NOT_FOUND, msg);
        }
        path_known = 1;
        if (!strcmp(routes[i].method, method)) return routes[i].fn(s, ex, id);
    }
    if (path_known) return wrong_method(ex, method, url);
    snprintf(msg, sizeof msg, "no such resource: %.10s %.300s", method, url);
    return send_error(ex, OB_ERR_NOT_FOUND, msg);
}

/* Frees what the exchange's answer still owns. */
static void exchange_clear(exchange *ex)
{
    free(ex->text);
    ex->text = NULL;
    if (ex->stream) MHD_destroy_response(ex->stream);
    ex->stream = NULL;
}

/* Sends what a route or the screening answered; closes the connection when that failed. */
static enum MHD_Result answer(exchange *ex, enum MHD_Result routed)
{
    if (routed == MHD_NO) ex->drop = 1;
    enum MHD_Result ret = queue_answer(ex);
    exchange_clear(ex);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    ob_rest_server *s = cls;
    request *rq = *con_cls;
    exchange ex = {.conn = conn, .rq = rq};
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        *con_cls = rq;
        ex.rq = rq;
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
        if (rq->too_large || rq->len + n > OB_API_MAX_REQUEST) {
            rq->too_large = 1; /* keep reading (and dropping) so that the answer can be sent */
            return MHD_YES;
        }
        if (rq->len + n + 1 > rq->cap) {
            size_t ncap = (rq->len + n + 1) * 2;
            if (ncap > OB_API_MAX_REQUEST + 1) ncap = OB_API_MAX_REQUEST + 1;
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
    if (!rq->too_large && ob__ui_path(url)) return ob__ui_serve(conn, method, url);
    return answer(&ex, route(s, &ex, url, method));
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    request *rq = *con_cls;
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
    request rq = {.len = req->len};
    if (req->len <= OB_API_MAX_REQUEST) {
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
    exchange ex = {.rq = &rq,
                   .args = pairs,
                   .n_args = q ? parse_query(q, pairs) : 0,
                   .headers = req->headers,
                   .n_headers = req->n_headers};
    ob_status rc = OB_OK;
    if (screen(s, &ex, req->method, url)) {
        if (!rq.too_large && ob__ui_path(url)) goto done; /* http 0: the dashboard's */
        if (route(s, &ex, url, req->method) == MHD_NO) ex.drop = 1;
    }
    if (ex.drop) {
        rc = OB_ERR(err, OB_ERR_NOMEM, "REST %s %.200s: no answer (out of memory)", req->method,
                    url);
        goto done;
    }
    const char *text = ex.text ? ex.text : ex.fixed;
    size_t len = ex.text ? strlen(ex.text) : ex.fixed_len;
    out->http = ex.http;
    out->type = ex.type;
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
    exchange_clear(&ex);
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
        tls_opts[n_tls++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                                    (void *)OB_REST_TLS_PRIORITIES};
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
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)lim.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)lim.max_client_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)lim.request_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        OB_REST_CONNECTION_MEMORY, MHD_OPTION_UNESCAPE_CALLBACK, ob__rest_unescape, NULL,
        MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
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
    free(s->token);
    free(s);
}
