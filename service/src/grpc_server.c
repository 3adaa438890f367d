/* The gRPC front end on the gRPC C core.
 *
 * One completion queue, `threads` handler threads blocked in grpc_completion_queue_next. Every
 * method is registered (its request message read with the call); one more generic request
 * catches unknown methods and answers UNIMPLEMENTED. A call is a call_ctx; the tags handed to
 * the core point at small `tag` records inside it, which say which operation completed.
 *
 * Unary calls are answered in the handler thread that received them: decode, call the service
 * function, one batch with the answer and the status. Server-streaming calls (WatchJob,
 * StreamJobLogs, Health.Watch) are kept on a watch list: a watcher thread, woken by new job
 * events and every 200 ms (a log grows without events), starts the next send when the previous
 * one has completed (one send in flight per call), reading the store without the server's lock
 * (a stream is pinned while it is read; see stream_pump); the stream ends with OK after the event
 * that puts the job in a final state (StreamJobLogs: once the log of a job that has ended is sent).
 * Server reflection (grpc.reflection.v1 and v1alpha) is a bidirectional stream answered from the
 * compiled-in descriptor set (reflection.h): receive a request, send its answer, until the client
 * half-closes; it counts against the same limit of open streams. Shutdown: the server stops
 * accepting, every call is cancelled, the queue is shut down once the last call is freed. */
#include "grpc_internal.h"
#include "reflection.h"
#include "tls_internal.h"
#include "onebit/job_codec.h"
#include "onebit/protoset.h"
#include "onebit/servers.h"
#include "onebit/status_map.h"
#include "onebit/v1/jobs.pb-c.h"
#include "onebit/v1/worker.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "onebit/base.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum tag_kind {
    TAG_NEW,
    TAG_DONE,
    TAG_SEND,
    TAG_RECV,
    TAG_STATUS,
    TAG_CLOSE,
    TAG_SHUTDOWN
} tag_kind;

struct call_ctx;
typedef struct tag {
    tag_kind kind;
    struct call_ctx *ctx;
} tag;

/* ThreadSanitizer cannot see the order the completion queue gives: the thread that hands a tag
 * to gRPC (a batch, a requested call, the shutdown) and the handler thread that takes it back
 * from grpc_completion_queue_next synchronise inside gRPC, which is not instrumented. So a tag
 * is released as it is handed over and acquired as it comes back, which is exactly the order
 * gRPC guarantees; no-ops in any other build. */
#if defined(__SANITIZE_THREAD__)
#define OB_TSAN_HANDOFF 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OB_TSAN_HANDOFF 1
#endif
#endif
#ifdef OB_TSAN_HANDOFF
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static void *tag_handed(void *t)
{
    __tsan_release(t);
    return t;
}
static void tag_taken(void *t)
{
    __tsan_acquire(t);
}
#else
static void *tag_handed(void *t)
{
    return t;
}
static void tag_taken(void *t)
{
    (void)t;
}
#endif

typedef struct call_ctx {
    ob_grpc_server *srv;
    method_id method;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* unknown methods */
    tag t_new, t_done, t_send, t_recv, t_status, t_close;
    int cancelled;
    grpc_slice status_msg;
    int has_status_msg;
    grpc_byte_buffer *send_bb;
    /* streams */
    struct call_ctx *wnext;
    char job_id[OB_JOB_ID_LEN];
    int64_t last_seq;
    int sent_initial, in_flight, finish_after_send, status_started, status_done, closed, broken;
    int health_sent;    /* the last status a Health.Watch sent + 1; 0: none yet */
    /* The store is read without the lock: a stream being pumped (pumping) or about to be
     * (pins, the watcher's list) is neither freed nor pumped by another thread; pump_again
     * asks the pumping thread to look once more. */
    int pumping, pump_again, pins;
    int64_t log_offset; /* StreamJobLogs: where the next piece starts */
    int log_follow;
    /* reflection (a bidirectional stream) */
    int reflecting;
    grpc_byte_buffer *recv_bb;
} call_ctx;

struct ob_grpc_server {
    ob_service *svc;
    char *token;
    ob__reflection *reflection; /* the answers of server reflection */
    grpc_server *server;
    grpc_completion_queue *cq;
    void *registered[M_COUNT];
    pthread_t *threads;
    int n_threads;
    pthread_t watcher;
    int watcher_started;
    pthread_mutex_t mu; /* everything below, and every call_ctx's stream fields; never held
                         * while the store is read */
    int outstanding;    /* call_ctx objects alive */
    int shutting_down, server_shutdown_done, cq_shut, watch_stop;
    call_ctx *watches;
    call_ctx **pinned;          /* the watcher's: max_streams of them (pump_watches) */
    int n_watches, max_streams; /* n_watches counts the reflection streams too */
    tag t_shutdown;
};

/* ---- call lifetime ------------------------------------------------------------------------- */

static void request_next(ob_grpc_server *s, method_id m);

/* Starts a batch on the call with tag t: c is read before the tag is handed over, since a
 * handler thread may take t back (and free c) before grpc_call_start_batch returns. */
static grpc_call_error start_batch(call_ctx *c, const grpc_op *ops, size_t n, tag *t)
{
    grpc_call *call = c->call;
    return grpc_call_start_batch(call, ops, n, tag_handed(t), NULL);
}

/* The methods whose requests arrive on the stream rather than with the call. */
static int is_bidi(method_id m)
{
    return m == M_REFLECTION || m == M_REFLECTION_ALPHA;
}

/* Shuts the queue down once the server has shut down and no call is left. Lock held. */
static void maybe_shutdown_cq(ob_grpc_server *s)
{
    if (s->server_shutdown_done && s->outstanding == 0 && !s->cq_shut) {
        s->cq_shut = 1;
        grpc_completion_queue_shutdown(s->cq);
    }
}

static void ctx_free(call_ctx *c)
{
    ob_grpc_server *s = c->srv;
    if (c->call) grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    grpc_call_details_destroy(&c->details);
    if (c->payload) grpc_byte_buffer_destroy(c->payload);
    if (c->send_bb) grpc_byte_buffer_destroy(c->send_bb);
    if (c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
    if (c->has_status_msg) grpc_slice_unref(c->status_msg);
    free(c);
    pthread_mutex_lock(&s->mu);
    s->outstanding--;
    maybe_shutdown_cq(s);
    pthread_mutex_unlock(&s->mu);
}

static void request_next(ob_grpc_server *s, method_id m)
{
    call_ctx *c = calloc(1, sizeof *c);
    if (!c) return; /* this method then waits for the next re-arm; nothing else to do */
    c->srv = s;
    c->method = m;
    grpc_metadata_array_init(&c->md);
    grpc_call_details_init(&c->details);
    c->t_new = (tag){TAG_NEW, c};
    c->t_done = (tag){TAG_DONE, c};
    c->t_send = (tag){TAG_SEND, c};
    c->t_recv = (tag){TAG_RECV, c};
    c->t_status = (tag){TAG_STATUS, c};
    c->t_close = (tag){TAG_CLOSE, c};
    pthread_mutex_lock(&s->mu);
    if (s->shutting_down) {
        pthread_mutex_unlock(&s->mu);
        grpc_metadata_array_destroy(&c->md);
        grpc_call_details_destroy(&c->details);
        free(c);
        return;
    }
    s->outstanding++;
    pthread_mutex_unlock(&s->mu);
    grpc_call_error e;
    if (m == M_UNKNOWN)
        e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq,
                                     tag_handed(&c->t_new));
    else
        e = grpc_server_request_registered_call(s->server, s->registered[m], &c->call, &c->deadline,
                                                &c->md, is_bidi(m) ? NULL : &c->payload, s->cq,
                                                s->cq, tag_handed(&c->t_new));
    if (e != GRPC_CALL_OK) ctx_free(c);
}

/* Answers a call with its status (and the answer on success) in one batch. */
static void finish_unary(call_ctx *c, ob_status status, const char *msg, grpc_byte_buffer *bb)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (status == OB_OK && bb) {
        c->send_bb = bb;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
    } else if (bb) {
        grpc_byte_buffer_destroy(bb);
    }
    char text[OB_ERR_MSG_LEN];
    ob_status_public_message(status == OB_OK ? "" : msg, text, sizeof text);
    c->status_msg = grpc_slice_from_copied_string(text);
    c->has_status_msg = 1;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)ob_status_grpc_code(status);
    ops[n++].data.send_status_from_server.status_details = &c->status_msg;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    if (start_batch(c, ops, n, &c->t_done) != GRPC_CALL_OK) ctx_free(c);
}

/* The token of the call's "authorization: Bearer TOKEN" header into out ("" when there is
 * none or it does not fit). */
static void bearer_of(const grpc_metadata_array *md, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < md->count; i++) {
        if (grpc_slice_str_cmp(md->metadata[i].key, "authorization") != 0) continue;
        const grpc_slice v = md->metadata[i].value;
        size_t n = GRPC_SLICE_LENGTH(v);
        const char *p = (const char *)GRPC_SLICE_START_PTR(v);
        if (n < 7 || memcmp(p, "Bearer ", 7) != 0 || n - 7 >= cap) return;
        memcpy(out, p + 7, n - 7);
        out[n - 7] = '\0';
        return;
    }
}

static int authorized(const ob_grpc_server *s, const char *bearer)
{
    return !s->token || ob_secret_equal(bearer, s->token);
}

/* ---- streams ------------------------------------------------------------------------------ */

/* Frees a stream once nothing of it is in flight and the call is over. Lock held; the lock
 * is released around ctx_free's own locking, so the caller must not use c afterwards. */
static int stream_maybe_free(ob_grpc_server *s, call_ctx *c)
{
    if (!c->closed || c->in_flight || c->pumping || c->pins ||
        (c->status_started && !c->status_done))
        return 0;
    for (call_ctx **p = &s->watches; *p; p = &(*p)->wnext) {
        if (*p == c) {
            *p = c->wnext;
            s->n_watches--;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    ctx_free(c);
    pthread_mutex_lock(&s->mu);
    return 1;
}

static void stream_send(call_ctx *c, grpc_byte_buffer *bb)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (!c->sent_initial) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->sent_initial = 1;
    }
    if (c->send_bb) grpc_byte_buffer_destroy(c->send_bb);
    c->send_bb = bb;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    if (start_batch(c, ops, n, &c->t_send) == GRPC_CALL_OK)
        c->in_flight = 1;
    else
        c->broken = 1;
}

static void stream_status(call_ctx *c, ob_status st, const char *msg)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (!c->sent_initial) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->sent_initial = 1;
    }
    if (c->has_status_msg) grpc_slice_unref(c->status_msg);
    char text[OB_ERR_MSG_LEN];
    ob_status_public_message(msg, text, sizeof text);
    c->status_msg = grpc_slice_from_copied_string(text);
    c->has_status_msg = 1;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)ob_status_grpc_code(st);
    ops[n++].data.send_status_from_server.status_details = &c->status_msg;
    c->status_started = 1;
    if (start_batch(c, ops, n, &c->t_status) != GRPC_CALL_OK) {
        c->status_done = 1;
        c->broken = 1;
    }
}

/* What a stream sends next, found without the lock: a message, or the status that ends it, or
 * nothing yet. */
typedef struct piece {
    grpc_byte_buffer *bb; /* taken by whoever sends it */
    int end;              /* end the stream with st and msg */
    ob_status st;
    char msg[OB_ERR_MSG_LEN];
} piece;

static void piece_end(piece *p, ob_status st, const char *msg)
{
    p->end = 1;
    p->st = st;
    ob_strlcpy(p->msg, msg, sizeof p->msg);
}

/* The next piece of a StreamJobLogs stream: what the log holds past the stream's offset, or
 * its end. The state is read first, as for WatchJob: a job seen final has its whole log
 * written, so nothing more to read means the stream is complete. Lock not held; c is the
 * caller's (pumping). */
static void stream_next_logs(ob_grpc_server *s, call_ctx *c, piece *p)
{
    ob_err err;
    ob_err_clear(&err);
    ob_job j;
    ob_status rc = ob_service_get(s->svc, c->job_id, &j, &err);
    if (rc) {
        piece_end(p, rc, err.msg);
        return;
    }
    int final = ob_job_state_final(j.state);
    ob_job_clear(&j);
    char *data = NULL;
    size_t len = 0;
    int64_t size = 0;
    rc = ob_service_logs(s->svc, c->job_id, c->log_offset, OB_LOG_READ_DEFAULT, &data, &len, &size,
                         &err);
    if (rc) {
        piece_end(p, rc, err.msg);
        return;
    }
    if (len == 0) {
        if (final || !c->log_follow) piece_end(p, OB_OK, "");
        return;
    }
    Onebit__V1__JobLogs logs = ONEBIT__V1__JOB_LOGS__INIT;
    logs.data.data = (uint8_t *)data;
    logs.data.len = len;
    logs.next_offset = c->log_offset + (int64_t)len;
    logs.size = size;
    p->bb = ob__grpc_pack(&logs.base);
    free(data);
    if (!p->bb) {
        piece_end(p, OB_ERR_NOMEM, "encoding logs");
        return;
    }
    c->log_offset = logs.next_offset;
}

/* The next piece of a stream, read from the store. Lock not held; c is the caller's (pumping):
 * no other thread reads or writes its cursor (last_seq, log_offset, health_sent,
 * finish_after_send) meanwhile. */
static void stream_next(ob_grpc_server *s, call_ctx *c, piece *p)
{
    if (c->method == M_HEALTH_WATCH) {
        /* The status now, and again whenever it changes (the service bumps its event counter
         * when the store goes down or comes back, which wakes the watcher). */
        Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        resp.status = ob_service_serving(s->svc, NULL, 0)
                          ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                          : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        if (c->health_sent == (int)resp.status + 1) return;
        p->bb = ob__grpc_pack(&resp.base);
        c->health_sent = (int)resp.status + 1;
        return;
    }
    if (c->method == M_STREAM_LOGS) {
        stream_next_logs(s, c, p);
        return;
    }
    ob_job_event *evs = NULL;
    size_t n = 0;
    ob_err err;
    /* The state first: a job seen final has its final event stored, so no events after it
     * means the stream is complete (a watch that starts after the end does not hang). */
    ob_job j;
    ob_status rc = ob_service_get(s->svc, c->job_id, &j, &err);
    int final = rc == OB_OK && ob_job_state_final(j.state);
    if (rc == OB_OK) {
        ob_job_clear(&j);
        rc = ob_service_events(s->svc, c->job_id, c->last_seq, 1, &evs, &n, &err);
    }
    if (rc) {
        piece_end(p, rc, err.msg);
        return;
    }
    if (n == 0) {
        if (final) piece_end(p, OB_OK, "");
        return;
    }
    const ob_job_event *e = &evs[0];
    Onebit__V1__Progress prog;
    ob_progress_to_pb(&e->progress, &prog);
    Onebit__V1__JobEvent ev = ONEBIT__V1__JOB_EVENT__INIT;
    ev.seq = e->seq;
    ev.job_id = (char *)e->job_id;
    ev.time_unix_ms = e->time_ms;
    ev.kind = (char *)e->kind;
    ev.state = (Onebit__V1__JobState)e->state;
    ev.message = (char *)e->message;
    ev.progress = &prog;
    p->bb = ob__grpc_pack(&ev.base);
    c->last_seq = e->seq;
    if (!strcmp(e->kind, "state") && ob_job_state_final(e->state)) c->finish_after_send = 1;
    free(evs);
    if (!p->bb) piece_end(p, OB_ERR_NOMEM, "encoding an event");
}

/* Starts the next send of a stream when it has something to send and nothing in flight. Lock
 * held on entry and on return, released while the store is read; the stream is pinned
 * (pumping) meanwhile, so the caller must call stream_maybe_free afterwards (its close may
 * have completed). One thread pumps a stream at a time; another that wants it to look again
 * (a new event, a send completed) sets pump_again. */
static void stream_pump(ob_grpc_server *s, call_ctx *c)
{
    if (c->pumping) {
        c->pump_again = 1;
        return;
    }
    while (!(c->closed || c->broken || c->in_flight || c->status_started)) {
        c->pumping = 1;
        c->pump_again = 0;
        pthread_mutex_unlock(&s->mu);
        piece p = {0};
        stream_next(s, c, &p);
        pthread_mutex_lock(&s->mu);
        c->pumping = 0;
        if (c->closed || c->broken || c->status_started) {
            if (p.bb) grpc_byte_buffer_destroy(p.bb);
            return;
        }
        if (p.bb) {
            stream_send(c, p.bb);
            return;
        }
        if (p.end) {
            stream_status(c, p.st, p.msg);
            return;
        }
        if (!c->pump_again) return;
    }
}

/* The stream is on the watch list before its close can complete: the completion (handled by any
 * thread, under the lock) then always finds it there, and cannot free it while this thread
 * still links it. */
/* Admits a server stream under the limit of open streams and starts waiting for its close.
 * A watch (reflecting == 0) is linked on the watch list first; a reflection stream is marked
 * before its close can complete. Returns 1 with s->mu held, or 0 (lock released, the call
 * answered or freed). */
static int stream_admit(ob_grpc_server *s, call_ctx *c, int reflecting)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    pthread_mutex_lock(&s->mu);
    if (s->n_watches >= s->max_streams) {
        pthread_mutex_unlock(&s->mu);
        char msg[128];
        snprintf(msg, sizeof msg,
                 "%d streams are open, the most this server keeps; try again later",
                 s->max_streams);
        finish_unary(c, OB_ERR_TOO_LARGE, msg, NULL);
        return 0;
    }
    if (reflecting) {
        c->reflecting = 1;
    } else {
        c->wnext = s->watches;
        s->watches = c;
    }
    s->n_watches++;
    if (start_batch(c, &op, 1, &c->t_close) != GRPC_CALL_OK) {
        if (!reflecting) s->watches = c->wnext; /* nothing else saw it: it is still the head */
        s->n_watches--;
        pthread_mutex_unlock(&s->mu);
        ctx_free(c);
        return 0;
    }
    return 1;
}

static void stream_begin(ob_grpc_server *s, call_ctx *c)
{
    if (!stream_admit(s, c, 0)) return;
    stream_pump(s, c);
    stream_maybe_free(s, c);
    pthread_mutex_unlock(&s->mu);
}

/* A stream's send, status or close completed. */
static void stream_event(ob_grpc_server *s, call_ctx *c, tag_kind kind, int success)
{
    pthread_mutex_lock(&s->mu);
    if (kind == TAG_SEND) {
        c->in_flight = 0;
        if (!success) c->broken = 1;
        if (c->finish_after_send && !c->broken && !c->status_started)
            stream_status(c, OB_OK, "");
        else
            stream_pump(s, c);
    } else if (kind == TAG_STATUS) {
        c->status_done = 1;
    } else {
        c->closed = 1;
    }
    stream_maybe_free(s, c);
    pthread_mutex_unlock(&s->mu);
}

/* Pumps every stream on the watch list. The list is not walked while the lock is released:
 * the streams that can send are pinned under the lock into an array (of max_streams, made by
 * the caller), then pumped one at a time. Lock held. */
static void pump_watches(ob_grpc_server *s, call_ctx **pinned, int cap)
{
    int n = 0;
    for (call_ctx *c = s->watches; c && n < cap; c = c->wnext) {
        if (c->closed || c->broken || c->in_flight || c->status_started) continue;
        c->pins++;
        pinned[n++] = c;
    }
    for (int i = 0; i < n; i++) {
        call_ctx *c = pinned[i];
        c->pins--;
        stream_pump(s, c);
        stream_maybe_free(s, c);
    }
}

static void *watcher_main(void *arg)
{
    ob_grpc_server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->watch_stop) {
        int64_t seen = ob_service_event_counter(s->svc);
        pump_watches(s, s->pinned, s->max_streams);
        pthread_mutex_unlock(&s->mu);
        if (ob_service_wait(s->svc, seen, 200) < 0) {
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- reflection: a bidirectional stream ---------------------------------------------------- */

/* One operation of a reflection stream is in flight at a time besides the close: receive a
 * request, send its answer, receive the next. The client's half-close ends the stream with OK;
 * a request that is not a ServerReflectionRequest ends it with INVALID_ARGUMENT. The lock is
 * held in every function of this section. */

static void reflect_recv(call_ctx *c)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (!c->sent_initial) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->sent_initial = 1;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &c->recv_bb;
    if (start_batch(c, ops, n, &c->t_recv) == GRPC_CALL_OK) {
        c->in_flight = 1;
    } else {
        c->broken = 1;
        grpc_call_cancel(c->call, NULL); /* so that the close completes and frees it */
    }
}

static void reflect_maybe_free(ob_grpc_server *s, call_ctx *c)
{
    if (!c->closed || c->in_flight || (c->status_started && !c->status_done)) return;
    s->n_watches--;
    pthread_mutex_unlock(&s->mu);
    ctx_free(c);
    pthread_mutex_lock(&s->mu);
}

/* Answers the request in bb (borrowed), or ends the stream with the reason it cannot. */
static void reflect_answer(ob_grpc_server *s, call_ctx *c, grpc_byte_buffer *bb)
{
    ob_err err;
    ob_err_clear(&err);
    size_t len = grpc_byte_buffer_length(bb);
    if (len > OB_REFLECTION_MAX_REQUEST) { /* refused before it is copied */
        OB_ERR(&err, OB_ERR_INVALID_ARG,
               "ServerReflectionRequest: %zu bytes, larger than the limit of %zu", len,
               OB_REFLECTION_MAX_REQUEST);
        stream_status(c, OB_ERR_INVALID_ARG, err.msg);
        return;
    }
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) {
        stream_status(c, OB_ERR_INVALID_ARG, "ServerReflectionRequest: unreadable message");
        return;
    }
    grpc_slice in = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    uint8_t *out = NULL;
    size_t out_len = 0;
    ob_status rc = ob__reflection_answer(s->reflection, GRPC_SLICE_START_PTR(in),
                                         GRPC_SLICE_LENGTH(in), &out, &out_len, &err);
    grpc_slice_unref(in);
    if (rc) {
        stream_status(c, rc, err.msg);
        return;
    }
    grpc_slice answer = grpc_slice_new(out, out_len, free); /* takes out */
    grpc_byte_buffer *ob = grpc_raw_byte_buffer_create(&answer, 1);
    grpc_slice_unref(answer);
    stream_send(c, ob);
}

static void reflect_begin(ob_grpc_server *s, call_ctx *c)
{
    if (!stream_admit(s, c, 1)) return;
    reflect_recv(c);
    pthread_mutex_unlock(&s->mu);
}

/* A reflection stream's receive, send, status or close completed. */
static void reflect_event(ob_grpc_server *s, call_ctx *c, tag_kind kind, int success)
{
    pthread_mutex_lock(&s->mu);
    if (kind == TAG_RECV) {
        c->in_flight = 0;
        grpc_byte_buffer *bb = c->recv_bb;
        c->recv_bb = NULL;
        if (!success)
            c->broken = 1;
        else if (!bb)
            stream_status(c, OB_OK, ""); /* the client is done asking */
        else
            reflect_answer(s, c, bb);
        if (bb) grpc_byte_buffer_destroy(bb);
    } else if (kind == TAG_SEND) {
        c->in_flight = 0;
        if (!success)
            c->broken = 1;
        else if (!c->status_started)
            reflect_recv(c);
    } else if (kind == TAG_STATUS) {
        c->status_done = 1;
    } else {
        c->closed = 1;
    }
    reflect_maybe_free(s, c);
    pthread_mutex_unlock(&s->mu);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static void handle_new(ob_grpc_server *s, call_ctx *c)
{
    char msg[OB_ERR_MSG_LEN + 64];
    char bearer[512];
    bearer_of(&c->md, bearer, sizeof bearer);
    /* Workers report with their attempt's credential, which the service checks: the admin
     * token is neither needed nor given to them. grpc.health.v1 says only SERVING or NOT_SERVING
     * and is open to all, so that probes (Kubernetes' gRPC probe sends no credentials) can ask it.
     */
    int open_method =
        c->method == M_REPORT || c->method == M_HEALTH_CHECK || c->method == M_HEALTH_WATCH;
    if (!open_method && !authorized(s, bearer)) {
        finish_unary(c, OB_ERR_UNAUTHENTICATED, "missing or wrong bearer token", NULL);
        return;
    }
    if (c->method == M_UNKNOWN) {
        char path[256];
        size_t n = GRPC_SLICE_LENGTH(c->details.method);
        if (n >= sizeof path) n = sizeof path - 1;
        memcpy(path, GRPC_SLICE_START_PTR(c->details.method), n);
        path[n] = '\0';
        snprintf(msg, sizeof msg, "unknown method %s", path);
        finish_unary(c, OB_ERR_UNSUPPORTED, msg, NULL);
        return;
    }
    if (is_bidi(c->method)) {
        reflect_begin(s, c);
        return;
    }
    const ProtobufCMessageDescriptor *d = ob__grpc_methods[c->method].request;
    if (!c->payload) {
        snprintf(msg, sizeof msg, "missing %s message", d->name);
        finish_unary(c, OB_ERR_INVALID_ARG, msg, NULL);
        return;
    }
    const char *why = NULL;
    ProtobufCMessage *m = ob__grpc_unpack(c->payload, d, &why);
    if (!m) {
        snprintf(msg, sizeof msg, "malformed %s message: %s", d->name, why);
        finish_unary(c, OB_ERR_INVALID_ARG, msg, NULL);
        return;
    }
    if (ob__grpc_methods[c->method].fn) {
        ob__grpc_reply r;
        memset(&r, 0, sizeof r);
        ob_status rc = ob__grpc_methods[c->method].fn(s->svc, m, bearer, &r);
        protobuf_c_message_free_unpacked(m, NULL);
        finish_unary(c, rc, r.err.msg, r.bb);
        return;
    }
    if (c->method == M_WATCH) {
        const Onebit__V1__WatchJobRequest *q = (const Onebit__V1__WatchJobRequest *)m;
        ob_job j;
        memset(&j, 0, sizeof j);
        ob_err err;
        ob_status rc = ob_service_get(s->svc, q->id, &j, &err);
        if (rc == OB_OK && q->after_seq < 0)
            rc = OB_ERR(&err, OB_ERR_INVALID_ARG, "after_seq: expected >= 0, got %lld",
                        (long long)q->after_seq);
        if (rc == OB_OK) {
            ob_strlcpy(c->job_id, j.id, sizeof c->job_id);
            c->last_seq = q->after_seq;
        }
        ob_job_clear(&j);
        protobuf_c_message_free_unpacked(m, NULL);
        if (rc)
            finish_unary(c, rc, err.msg, NULL);
        else
            stream_begin(s, c);
        return;
    }
    if (c->method == M_STREAM_LOGS) {
        const Onebit__V1__StreamJobLogsRequest *q = (const Onebit__V1__StreamJobLogsRequest *)m;
        ob_err err;
        ob_err_clear(&err);
        int64_t start = q->offset;
        ob_status rc = OB_OK;
        if (q->offset < 0)
            rc = OB_ERR(&err, OB_ERR_INVALID_ARG, "offset: expected >= 0, got %lld",
                        (long long)q->offset);
        else if (q->offset > 0 && (q->tail_lines || q->since_unix_ms))
            rc = OB_ERR(&err, OB_ERR_INVALID_ARG,
                        "offset: give an offset, or tail_lines and since_unix_ms, not both");
        else if (q->tail_lines || q->since_unix_ms)
            rc = ob_service_log_start(s->svc, q->id, q->tail_lines, q->since_unix_ms, &start, &err);
        ob_job j;
        if (rc == OB_OK && (rc = ob_service_get(s->svc, q->id, &j, &err)) == OB_OK) {
            ob_strlcpy(c->job_id, j.id, sizeof c->job_id);
            ob_job_clear(&j);
            c->log_offset = start;
            c->log_follow = q->follow;
        }
        protobuf_c_message_free_unpacked(m, NULL);
        if (rc)
            finish_unary(c, rc, err.msg, NULL);
        else
            stream_begin(s, c);
        return;
    }
    /* Health.Watch */
    const Grpc__Health__V1__HealthCheckRequest *q = (const Grpc__Health__V1__HealthCheckRequest *)m;
    int known = ob__grpc_known_service(q->service);
    snprintf(msg, sizeof msg, "unknown service '%.100s'", q->service);
    protobuf_c_message_free_unpacked(m, NULL);
    if (!known)
        finish_unary(c, OB_ERR_NOT_FOUND, msg, NULL);
    else
        stream_begin(s, c);
}

static void *handler_main(void *arg)
{
    ob_grpc_server *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        tag *t = ev.tag;
        tag_taken(t);
        call_ctx *c = t->ctx;
        switch (t->kind) {
        case TAG_SHUTDOWN:
            pthread_mutex_lock(&s->mu);
            s->server_shutdown_done = 1;
            maybe_shutdown_cq(s);
            pthread_mutex_unlock(&s->mu);
            break;
        case TAG_NEW:
            if (!ev.success) {
                ctx_free(c);
                break;
            }
            request_next(s, c->method); /* keep one request armed per method */
            handle_new(s, c);
            break;
        case TAG_DONE:
            ctx_free(c);
            break;
        default:
            if (c->reflecting)
                reflect_event(s, c, t->kind, ev.success);
            else
                stream_event(s, c, t->kind, ev.success);
        }
    }
    return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------ */

/* The credentials of the main port: TLS with cfg->tls (and client certificates when it has a
 * client CA), else plaintext. NULL when gRPC cannot make them. */
static grpc_server_credentials *server_credentials(const ob_tls_config *tls)
{
    if (!tls) return grpc_insecure_server_credentials_create();
    grpc_ssl_pem_key_cert_pair pair = {tls->key_pem, tls->cert_pem};
    grpc_ssl_server_certificate_config *config =
        grpc_ssl_server_certificate_config_create(tls->client_ca_pem, &pair, 1);
    if (!config) return NULL;
    grpc_ssl_server_credentials_options *options =
        grpc_ssl_server_credentials_create_options_using_config(
            tls->client_ca_pem ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            config); /* takes config */
    return options ? grpc_ssl_server_credentials_create_with_options(options) : NULL;
}

/* Adds addr with creds (taken) to the server; the port, or 0 with err set. */
static int add_port(grpc_server *server, const char *addr, grpc_server_credentials *creds,
                    const char *what, ob_err *err)
{
    if (!creds) {
        OB_ERR(err, OB_ERR_IO, "gRPC: cannot make the %s credentials", what);
        return 0;
    }
    int port = grpc_server_add_http2_port(server, addr, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) OB_ERR(err, OB_ERR_IO, "gRPC: cannot listen on %s (%s)", addr, what);
    return port;
}

ob_status ob_grpc_server_start(ob_grpc_server **out, ob_service *svc,
                               const ob_grpc_server_config *cfg, int *bound_port, int *plain_port,
                               ob_err *err)
{
    *out = NULL;
    const char *addr = cfg->addr, *token = cfg->token;
    int threads = cfg->threads > 0 ? cfg->threads : 4, max_streams = cfg->max_streams;
    ob_grpc_server *s = calloc(1, sizeof *s);
    if (!s) return OB_ERR(err, OB_ERR_NOMEM, "allocating the gRPC server");
    grpc_init();
    pthread_mutex_init(&s->mu, NULL);
    s->svc = svc;
    s->max_streams = max_streams > 0 ? max_streams : OB_SERVERS_MAX_STREAMS;
    s->t_shutdown = (tag){TAG_SHUTDOWN, NULL};
    if (token && token[0] && !(s->token = strdup(token))) goto oom;
    s->threads = calloc((size_t)threads, sizeof *s->threads);
    s->pinned = calloc((size_t)s->max_streams, sizeof *s->pinned);
    if (!s->threads || !s->pinned) goto oom;
    ob_status rrc = ob__reflection_create(&s->reflection, ob_protoset, ob_protoset_len, err);
    if (rrc != OB_OK) {
        free(s->threads);
        free(s->pinned);
        free(s->token);
        pthread_mutex_destroy(&s->mu);
        free(s);
        grpc_shutdown();
        return OB_WRAP(err, rrc, "gRPC: the compiled-in descriptor set");
    }

    grpc_arg args[2];
    memset(args, 0, sizeof args);
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)OB_API_MAX_REQUEST;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[1].value.integer = 0;
    grpc_channel_args ch_args = {2, args};
    s->server = grpc_server_create(&ch_args, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    for (int m = 0; m < M_COUNT; m++) {
        s->registered[m] = grpc_server_register_method(
            s->server, ob__grpc_method_paths[m], NULL,
            is_bidi((method_id)m) ? GRPC_SRM_PAYLOAD_NONE
                                  : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
        if (!s->registered[m]) {
            OB_ERR(err, OB_ERR_IO, "registering %s", ob__grpc_method_paths[m]);
            goto fail_server;
        }
    }
    int port = add_port(s->server, addr, server_credentials(cfg->tls),
                        cfg->tls ? "TLS" : "plaintext", err);
    if (port == 0) goto fail_server;
    if (bound_port) *bound_port = port;
    if (cfg->tls && cfg->plain_addr) {
        int p2 = add_port(s->server, cfg->plain_addr, grpc_insecure_server_credentials_create(),
                          "plaintext, for workers", err);
        if (p2 == 0) goto fail_server;
        if (plain_port) *plain_port = p2;
    }
    grpc_server_start(s->server);
    for (int m = 0; m < M_COUNT; m++)
        request_next(s, (method_id)m);
    request_next(s, M_UNKNOWN);
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&s->threads[i], NULL, handler_main, s) != 0) break;
        s->n_threads++;
    }
    if (pthread_create(&s->watcher, NULL, watcher_main, s) == 0) s->watcher_started = 1;
    if (s->n_threads == 0 || !s->watcher_started) {
        ob_grpc_server_stop(s);
        return OB_ERR(err, OB_ERR_IO, "gRPC: cannot start the handler threads");
    }
    *out = s;
    return OB_OK;
fail_server:
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
    grpc_completion_queue_pluck(s->cq, &s->t_shutdown, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->cq);
    ob__reflection_destroy(s->reflection);
    free(s->threads);
    free(s->pinned);
    free(s->token);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
    return err ? err->code : OB_ERR_IO;
oom:
    free(s->threads);
    free(s->pinned);
    free(s->token);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
    return OB_ERR(err, OB_ERR_NOMEM, "allocating the gRPC server");
}

void ob_grpc_server_stop(ob_grpc_server *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->shutting_down = 1;
    s->watch_stop = 1;
    pthread_mutex_unlock(&s->mu);
    if (s->watcher_started) pthread_join(s->watcher, NULL);
    grpc_server_shutdown_and_notify(s->server, s->cq, tag_handed(&s->t_shutdown));
    grpc_server_cancel_all_calls(s->server);
    for (int i = 0; i < s->n_threads; i++)
        pthread_join(s->threads[i], NULL);
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    ob__reflection_destroy(s->reflection);
    free(s->threads);
    free(s->pinned);
    free(s->token);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
}
