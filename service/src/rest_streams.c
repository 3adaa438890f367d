/* The REST routes that stream: a job's events as server-sent events (GET
 * /v1/jobs/{id}/events) and its log as text/plain, followed as it grows (GET
 * /v1/jobs/{id}/logs:stream). Each stream's body is produced by libmicrohttpd's reader
 * callbacks on the connection's thread; every open stream counts against the server's
 * max_streams. Rows of the route table in rest_routes.c. */
#include "rest_internal.h"
#include "onebit/base.h"
#include "onebit/job_codec.h"
#include "ui_server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An event stream outlives the request timeout. MHD counts only bytes that move as activity,
 * and checks the timeout as soon as a reader returns, however long it waited: an SSE stream
 * (a comment at least every 15 s) is closed when its client takes nothing for the stream
 * timeout (seconds); a followed log, which has nothing to write while the job is quiet, has no
 * timeout (0) and ends with its job, its client or the server. Both count against max_streams. */
static void stream_timeout(const ob__rest_exchange *ex, int seconds)
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

enum MHD_Result ob__rest_do_events(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    ob_err err;
    long long after;
    if (ob__rest_query_int(ex, "afterSeq", 0, INT64_MAX, &after, &err))
        return ob__rest_send_error(ex, OB_ERR_INVALID_ARG, err.msg);
    /* A reconnecting EventSource sends the id of the last event it saw. */
    const char *last = ob__rest_header(ex, "Last-Event-ID");
    if (last && last[0] && !ob__rest_arg(ex, "afterSeq")) {
        char *end;
        errno = 0;
        long long v = strtoll(last, &end, 10);
        if (*end || errno || v < 0)
            return ob__rest_send_error(ex, OB_ERR_INVALID_ARG,
                                       "Last-Event-ID: expected an event number");
        after = v;
    }
    ob_job j;
    ob_status rc = ob_service_get(s->svc, id, &j, &err);
    if (rc) return ob__rest_send_error(ex, rc, err.msg);
    ob_job_clear(&j);
    if (atomic_fetch_add(&s->streams, 1) >= s->limits.max_streams) {
        atomic_fetch_sub(&s->streams, 1);
        char msg[128];
        snprintf(msg, sizeof msg,
                 "%d event streams are open, the most this server keeps; try "
                 "again later",
                 s->limits.max_streams);
        return ob__rest_send_error_http(ex, 429, "RESOURCE_EXHAUSTED", msg);
    }
    sse *e = calloc(1, sizeof *e);
    if (!e) {
        atomic_fetch_sub(&s->streams, 1);
        return ob__rest_send_error(ex, OB_ERR_NOMEM, "out of memory");
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
    return ob__rest_send_stream(ex, 200, r);
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

enum MHD_Result ob__rest_do_log_stream(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    ob_err err;
    long long offset, tail, since;
    if (ob__rest_query_int(ex, "offset", 0, INT64_MAX, &offset, &err) ||
        ob__rest_query_int(ex, "tailLines", 0, OB_LOG_TAIL_MAX, &tail, &err) ||
        ob__rest_query_int(ex, "sinceUnixMs", 0, INT64_MAX, &since, &err))
        return ob__rest_send_error(ex, OB_ERR_INVALID_ARG, err.msg);
    const char *follow = ob__rest_arg(ex, "follow");
    if (follow && strcmp(follow, "true") && strcmp(follow, "false"))
        return ob__rest_send_error(ex, OB_ERR_INVALID_ARG, "follow: expected true or false");
    if (offset > 0 && (tail || since))
        return ob__rest_send_error(
            ex, OB_ERR_INVALID_ARG,
            "offset: give an offset, or tailLines and sinceUnixMs, not both");
    int64_t start = offset;
    ob_status rc =
        tail || since ? ob_service_log_start(s->svc, id, (int)tail, since, &start, &err) : OB_OK;
    ob_job j;
    if (rc == OB_OK && (rc = ob_service_get(s->svc, id, &j, &err)) == OB_OK) ob_job_clear(&j);
    if (rc) return ob__rest_send_error(ex, rc, err.msg);
    if (atomic_fetch_add(&s->streams, 1) >= s->limits.max_streams) {
        atomic_fetch_sub(&s->streams, 1);
        char msg[128];
        snprintf(msg, sizeof msg,
                 "%d streams are open, the most this server keeps; try again later",
                 s->limits.max_streams);
        return ob__rest_send_error_http(ex, 429, "RESOURCE_EXHAUSTED", msg);
    }
    log_stream *ls = calloc(1, sizeof *ls);
    if (!ls) {
        atomic_fetch_sub(&s->streams, 1);
        return ob__rest_send_error(ex, OB_ERR_NOMEM, "out of memory");
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
    return ob__rest_send_stream(ex, 200, r);
}
