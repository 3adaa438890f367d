/* The gRPC front end's streams (grpc_internal.h): the server streams (WatchJob, StreamJobLogs,
 * Health.Watch), kept on a watch list and pumped with one send in flight per call, the store read
 * by the watcher threads only (never by a handler thread) and without the server's lock; and server
 * reflection's bidirectional stream, answered from the compiled-in descriptor set (reflection.h).
 * grpc_server.c says how the calls come and go. */
#include "grpc_internal.h"
#include "onebit/base.h"
#include "onebit/job_codec.h"
#include "onebit/status_map.h"
#include "onebit/v1/jobs.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- streams ------------------------------------------------------------------------------ */

/* Frees a stream once nothing of it is in flight and the call is over. Lock held; the lock
 * is released around ob__grpc_ctx_free's own locking, so the caller must not use c afterwards. */
static int stream_maybe_free(ob_grpc_server *s, call_ctx *c)
{
    if (!c->closed || c->in_flight || c->pumping || c->pins ||
        (c->status_started && !c->status_done))
        return 0;
    if (c->ready) { /* off the ready list */
        for (call_ctx **p = &s->ready_head, *prev = NULL; *p; prev = *p, p = &(*p)->rnext) {
            if (*p == c) {
                *p = c->rnext;
                if (s->ready_tail == c) s->ready_tail = prev;
                break;
            }
        }
        c->ready = 0;
        c->rnext = NULL;
    }
    for (call_ctx **p = &s->watches; *p; p = &(*p)->wnext) {
        if (*p == c) {
            *p = c->wnext;
            s->n_watches--;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    ob__grpc_ctx_free(c);
    pthread_mutex_lock(&s->mu);
    return 1;
}

/* Zeroes ops[2] and puts the initial metadata first where the stream has not sent it yet;
 * returns the ops used. */
static size_t stream_ops(call_ctx *c, grpc_op ops[2])
{
    memset(ops, 0, 2 * sizeof *ops);
    if (c->sent_initial) return 0;
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->sent_initial = 1;
    return 1;
}

static void stream_send(call_ctx *c, grpc_byte_buffer *bb)
{
    grpc_op ops[2];
    size_t n = stream_ops(c, ops);
    if (c->send_bb) grpc_byte_buffer_destroy(c->send_bb);
    c->send_bb = bb;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    if (ob__grpc_start_batch(c, ops, n, &c->t_send) == GRPC_CALL_OK)
        c->in_flight = 1;
    else
        c->broken = 1;
}

static void stream_status(call_ctx *c, ob_status st, const char *msg)
{
    grpc_op ops[2];
    size_t n = stream_ops(c, ops);
    if (c->has_status_msg) grpc_slice_unref(c->status_msg);
    char text[OB_ERR_MSG_LEN];
    ob_status_public_message(msg, text, sizeof text);
    c->status_msg = grpc_slice_from_copied_string(text);
    c->has_status_msg = 1;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)ob_status_grpc_code(st);
    ops[n++].data.send_status_from_server.status_details = &c->status_msg;
    c->status_started = 1;
    if (ob__grpc_start_batch(c, ops, n, &c->t_status) != GRPC_CALL_OK) {
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
    /* Events are read ahead, OB__GRPC_READ_AHEAD at a time (one store read for that many
     * sends); the state is looked at only when the read-ahead is used up. */
    if (c->ev_i >= c->ev_n) {
        free(c->ev_buf);
        c->ev_buf = NULL;
        c->ev_n = c->ev_i = 0;
        ob_err err;
        /* The state first: a job seen final has its final event stored, so no events after it
         * means the stream is complete (a watch that starts after the end does not hang). */
        ob_job j;
        ob_status rc = ob_service_get(s->svc, c->job_id, &j, &err);
        int final = rc == OB_OK && ob_job_state_final(j.state);
        if (rc == OB_OK) {
            ob_job_clear(&j);
            rc = ob_service_events(s->svc, c->job_id, c->last_seq, OB__GRPC_READ_AHEAD, &c->ev_buf,
                                   &c->ev_n, &err);
        }
        if (rc) {
            piece_end(p, rc, err.msg);
            return;
        }
        if (c->ev_n == 0) {
            if (final) piece_end(p, OB_OK, "");
            return;
        }
    }
    const ob_job_event *e = &c->ev_buf[c->ev_i++];
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
        ob__grpc_finish_unary(c, OB_ERR_TOO_LARGE, msg, NULL);
        return 0;
    }
    if (reflecting) {
        c->reflecting = 1;
    } else {
        c->wnext = s->watches;
        s->watches = c;
    }
    s->n_watches++;
    if (ob__grpc_start_batch(c, &op, 1, &c->t_close) != GRPC_CALL_OK) {
        if (!reflecting) s->watches = c->wnext; /* nothing else saw it: it is still the head */
        s->n_watches--;
        pthread_mutex_unlock(&s->mu);
        ob__grpc_ctx_free(c);
        return 0;
    }
    return 1;
}

/* Hands the stream to the watcher, which reads the store for it. Lock held. */
static void stream_ready(ob_grpc_server *s, call_ctx *c)
{
    if (!c->ready) {
        c->ready = 1;
        c->rnext = NULL;
        if (s->ready_tail)
            s->ready_tail->rnext = c;
        else
            s->ready_head = c;
        s->ready_tail = c;
        pthread_cond_signal(&s->watch_cv);
    }
}

static void stream_begin(ob_grpc_server *s, call_ctx *c)
{
    if (!stream_admit(s, c, 0)) return;
    stream_ready(s, c);
    pthread_mutex_unlock(&s->mu);
}

/* A stream's send, status or close completed. */
void ob__grpc_stream_event(ob_grpc_server *s, call_ctx *c, tag_kind kind, int success)
{
    pthread_mutex_lock(&s->mu);
    if (kind == TAG_SEND) {
        c->in_flight = 0;
        if (!success) c->broken = 1;
        if (c->finish_after_send && !c->broken && !c->status_started)
            stream_status(c, OB_OK, "");
        else if (!c->broken && c->ev_i < c->ev_n)
            stream_pump(s, c); /* the next event is read ahead: no store read here */
        else if (!c->broken)
            stream_ready(s, c); /* the store is read by a watcher, never by a handler */
    } else if (kind == TAG_STATUS) {
        c->status_done = 1;
    } else {
        c->closed = 1;
    }
    stream_maybe_free(s, c);
    pthread_mutex_unlock(&s->mu);
}

/* Pumps the streams on the watch list: all of them (all != 0: new job events, or a log's
 * periodic look), or those a completed send made ready. The list is not walked while the lock is
 * released: the streams to pump are pinned under the lock into an array (of max_streams, made by
 * the caller), then pumped one at a time. Lock held. */
static void pump_watches(ob_grpc_server *s, call_ctx **pinned, int cap, int all)
{
    int n = 0;
    /* The ready ones first, in the order they became ready; then, for a full pass, the rest. */
    while (s->ready_head && n < cap) {
        call_ctx *c = s->ready_head;
        s->ready_head = c->rnext;
        if (!s->ready_head) s->ready_tail = NULL;
        c->rnext = NULL;
        c->ready = 0;
        /* One that cannot send is freed by its own completions (stream_maybe_free). */
        if (c->closed || c->broken || c->in_flight || c->status_started || c->pins) continue;
        c->pins++;
        pinned[n++] = c;
    }
    for (call_ctx *c = s->watches; all && c && n < cap; c = c->wnext) {
        if (c->closed || c->broken || c->in_flight || c->status_started || c->pins) continue;
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

/* The watcher: pumps the streams that are ready as soon as they are, and every stream when the
 * service has new events or every 200 ms (a log grows without events). */
void *ob__grpc_watcher_main(void *arg)
{
    ob__grpc_pumper *me = arg;
    ob_grpc_server *s = me->s;
    call_ctx **pinned = s->pinned + (size_t)me->index * (size_t)s->max_streams;
    pthread_mutex_lock(&s->mu);
    int64_t seen = -1;
    double last_all = 0.0;
    while (!s->watch_stop) {
        int all = 0;
        if (me->index == 0) {
            int64_t now_seen = ob_service_event_counter(s->svc);
            double now = ob_mono_s();
            all = now_seen != seen || now - last_all >= 0.2;
            if (all) {
                seen = now_seen;
                last_all = now;
            }
        }
        pump_watches(s, pinned, s->max_streams, all);
        if (s->ready_head || s->watch_stop) continue;
        if (s->n_watches == 0 || me->index > 0) {
            /* Nothing open (or not the first watcher): sleep until a stream is ready. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&s->watch_cv, &s->mu, &ts);
            continue;
        }
        /* Streams open: a completed send wakes this at once; new job events are looked for
         * every 10 ms. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->watch_cv, &s->mu, &ts);
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
    if (ob__grpc_start_batch(c, ops, n, &c->t_recv) == GRPC_CALL_OK) {
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
    ob__grpc_ctx_free(c);
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

void ob__grpc_reflect_begin(ob_grpc_server *s, call_ctx *c)
{
    if (!stream_admit(s, c, 1)) return;
    reflect_recv(c);
    pthread_mutex_unlock(&s->mu);
}

/* A reflection stream's receive, send, status or close completed. */
void ob__grpc_reflect_event(ob_grpc_server *s, call_ctx *c, tag_kind kind, int success)
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

/* ---- opening a stream ----------------------------------------------------------------------- */

/* Opens the server stream of a decoded request m (taken): WatchJob, StreamJobLogs or
 * Health.Watch; a request it cannot serve is answered with the reason. */
void ob__grpc_stream_open(ob_grpc_server *s, call_ctx *c, ProtobufCMessage *m)
{
    char msg[OB_ERR_MSG_LEN + 64];
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
            ob__grpc_finish_unary(c, rc, err.msg, NULL);
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
            ob__grpc_finish_unary(c, rc, err.msg, NULL);
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
        ob__grpc_finish_unary(c, OB_ERR_NOT_FOUND, msg, NULL);
    else
        stream_begin(s, c);
}
