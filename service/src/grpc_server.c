/* The gRPC front end on the gRPC C core.
 *
 * One completion queue, `threads` handler threads blocked in grpc_completion_queue_next. Every
 * method is registered (its request message read with the call); one more generic request
 * catches unknown methods and answers UNIMPLEMENTED. A call is a call_ctx; the tags handed to
 * the core point at small `tag` records inside it, which say which operation completed.
 *
 * Unary calls are answered in the handler thread that received them: decode, call the service
 * function, one batch with the answer and the status. Server-streaming calls (WatchJob,
 * Health.Watch) are kept on a watch list: a watcher thread, woken by new job events, starts the
 * next send when the previous one has completed (one send in flight per call); the stream ends
 * with OK after the event that puts the job in a final state. Shutdown: the server stops
 * accepting, every call is cancelled, the queue is shut down once the last call is freed. */
#include "onebit/job_codec.h"
#include "onebit/servers.h"
#include "onebit/status_map.h"
#include "onebit/v1/jobs.pb-c.h"
#include "onebit/v1/worker.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "svc_internal.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum method_id {
    M_SUBMIT,
    M_GET,
    M_LIST,
    M_CANCEL,
    M_WATCH,
    M_CHECKPOINTS,
    M_LOGS,
    M_REPORT,
    M_HEALTH_CHECK,
    M_HEALTH_WATCH,
    M_COUNT,
    M_UNKNOWN = -1,
} method_id;

static const char *const method_paths[M_COUNT] = {
    "/onebit.v1.JobService/SubmitJob",  "/onebit.v1.JobService/GetJob",
    "/onebit.v1.JobService/ListJobs",   "/onebit.v1.JobService/CancelJob",
    "/onebit.v1.JobService/WatchJob",   "/onebit.v1.JobService/ListCheckpoints",
    "/onebit.v1.JobService/GetJobLogs", "/onebit.v1.WorkerService/ReportProgress",
    "/grpc.health.v1.Health/Check",     "/grpc.health.v1.Health/Watch",
};

typedef enum tag_kind { TAG_NEW, TAG_DONE, TAG_SEND, TAG_STATUS, TAG_CLOSE, TAG_SHUTDOWN } tag_kind;

struct call_ctx;
typedef struct tag {
    tag_kind kind;
    struct call_ctx *ctx;
} tag;

typedef struct call_ctx {
    ob_grpc_server *srv;
    method_id method;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* unknown methods */
    tag t_new, t_done, t_send, t_status, t_close;
    int cancelled;
    grpc_slice status_msg;
    int has_status_msg;
    grpc_byte_buffer *send_bb;
    /* streams */
    struct call_ctx *wnext;
    char job_id[OB_JOB_ID_LEN];
    int64_t last_seq;
    int sent_initial, in_flight, finish_after_send, status_started, status_done, closed, broken;
    int health_sent;
} call_ctx;

struct ob_grpc_server {
    ob_service *svc;
    char *token;
    grpc_server *server;
    grpc_completion_queue *cq;
    void *registered[M_COUNT];
    pthread_t *threads;
    int n_threads;
    pthread_t watcher;
    int watcher_started;
    pthread_mutex_t mu; /* everything below, and every call_ctx's stream fields */
    int outstanding;    /* call_ctx objects alive */
    int shutting_down, server_shutdown_done, cq_shut, watch_stop;
    call_ctx *watches;
    tag t_shutdown;
};

/* ---- messages ------------------------------------------------------------------------------ */

static grpc_byte_buffer *pack_message(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return NULL;
    protobuf_c_message_pack(m, buf);
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, n);
    free(buf);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static ProtobufCMessage *unpack_payload(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d)
{
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) return NULL;
    grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

/* ---- handlers: decode, call the service, encode ------------------------------------------ */

typedef struct reply {
    grpc_byte_buffer *bb; /* the answer on success */
    ob_err err;
} reply;

/* The answer of a call that returns a job: rc of the service function that filled *j (which
 * is cleared here when it succeeded), or the encoded job. */
static ob_status reply_job(reply *r, ob_status rc, ob_job *j)
{
    if (rc != OB_OK) return rc;
    ob_job_pb pb;
    if (ob_job_to_pb(j, &pb, NULL) != OB_OK || !(r->bb = pack_message(&pb.job.base)))
        rc = OB_ERR(&r->err, OB_ERR_NOMEM, "encoding job %s", j->id);
    ob_job_pb_release(&pb);
    ob_job_clear(j);
    return rc;
}

static ob_status h_submit(ob_grpc_server *s, const ProtobufCMessage *m, reply *r)
{
    const Onebit__V1__SubmitJobRequest *q = (const Onebit__V1__SubmitJobRequest *)m;
    ob_submit_req req = {.spec = q->spec,
                         .spec_len = strlen(q->spec),
                         .world_size = q->world_size,
                         .max_restarts = q->max_restarts};
    ob_job j;
    return reply_job(r, ob_service_submit(s->svc, &req, &j, &r->err), &j);
}

static ob_status h_get(ob_grpc_server *s, const ProtobufCMessage *m, reply *r)
{
    const Onebit__V1__GetJobRequest *q = (const Onebit__V1__GetJobRequest *)m;
    ob_job j;
    return reply_job(r, ob_service_get(s->svc, q->id, &j, &r->err), &j);
}

static ob_status h_cancel(ob_grpc_server *s, const ProtobufCMessage *m, reply *r)
{
    const Onebit__V1__CancelJobRequest *q = (const Onebit__V1__CancelJobRequest *)m;
    ob_job j;
    return reply_job(r, ob_service_cancel(s->svc, q->id, &j, &r->err), &j);
}

static ob_status h_list(ob_grpc_server *s, const ProtobufCMessage *m, reply *r)
{
    const Onebit__V1__ListJobsRequest *q = (const Onebit__V1__ListJobsRequest *)m;
    ob_job *jobs = NULL;
    size_t n = 0;
    char next[OB_PAGE_TOKEN_LEN];
    ob_status rc = ob_service_list(s->svc, (ob_job_state)q->state, q->page_size, q->page_token,
                                   &jobs, &n, next, &r->err);
    if (rc) return rc;
    ob_job_pb *pbs = calloc(n ? n : 1, sizeof *pbs);
    Onebit__V1__Job **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    size_t done = 0;
    if (!pbs || !ptrs) {
        rc = OB_ERR(&r->err, OB_ERR_NOMEM, "encoding %zu jobs", n);
        goto out;
    }
    for (; done < n; done++) {
        if (ob_job_to_pb(&jobs[done], &pbs[done], NULL) != OB_OK) {
            rc = OB_ERR(&r->err, OB_ERR_NOMEM, "encoding %zu jobs", n);
            done++;
            goto out;
        }
        ptrs[done] = &pbs[done].job;
    }
    Onebit__V1__ListJobsResponse resp = ONEBIT__V1__LIST_JOBS_RESPONSE__INIT;
    resp.n_jobs = n;
    resp.jobs = ptrs;
    resp.next_page_token = next;
    if (!(r->bb = pack_message(&resp.base))) rc = OB_ERR(&r->err, OB_ERR_NOMEM, "encoding jobs");
out:
    for (size_t i = 0; pbs && i < done; i++)
        ob_job_pb_release(&pbs[i]);
    free(pbs);
    free(ptrs);
    ob_job_array_free(jobs, n);
    return rc;
}

static ob_status h_checkpoints(ob_grpc_server *s, const ProtobufCMessage *m, reply *r)
{
    const Onebit__V1__ListCheckpointsRequest *q = (const Onebit__V1__ListCheckpointsRequest *)m;
    ob_checkpoint_info *ck = NULL;
    size_t n = 0;
    ob_status rc = ob_service_checkpoints(s->svc, q->id, &ck, &n, &r->err);
    if (rc) return rc;
    Onebit__V1__Checkpoint *v = calloc(n ? n : 1, sizeof *v);
    Onebit__V1__Checkpoint **p = calloc(n ? n : 1, sizeof *p);
    if (v && p) {
        for (size_t i = 0; i < n; i++) {
            onebit__v1__checkpoint__init(&v[i]);
            v[i].step = ck[i].step;
            v[i].path = ck[i].path;
            v[i].time_unix_ms = ck[i].time_ms;
            v[i].world_size = ck[i].world_size;
            v[i].phase = ck[i].phase;
            v[i].freeze_step = ck[i].freeze_step;
            v[i].problem = ck[i].problem;
            p[i] = &v[i];
        }
        Onebit__V1__ListCheckpointsResponse resp = ONEBIT__V1__LIST_CHECKPOINTS_RESPONSE__INIT;
        resp.n_checkpoints = n;
        resp.checkpoints = p;
        r->bb = pack_message(&resp.base);
    }
    if (!r->bb) rc = OB_ERR(&r->err, OB_ERR_NOMEM, "encoding checkpoints");
    free(v);
    free(p);
    free(ck);
    return rc;
}

static ob_status h_report(ob_grpc_server *s, const ProtobufCMessage *m, reply *r)
{
    const Onebit__V1__ReportProgressRequest *q = (const Onebit__V1__ReportProgressRequest *)m;
    ob_report rep;
    memset(&rep, 0, sizeof rep);
    if (strlen(q->job_id) >= sizeof rep.job_id)
        return OB_ERR(&r->err, OB_ERR_NOT_FOUND, "no job with id '%.64s...'", q->job_id);
    ob__strlcpy(rep.job_id, q->job_id, sizeof rep.job_id);
    ob__strlcpy(rep.kind, q->kind, sizeof rep.kind);
    if (q->progress) {
        const Onebit__V1__Progress *p = q->progress;
        rep.progress.step = p->step;
        rep.progress.loss = p->loss;
        ob__strlcpy(rep.progress.phase, p->phase, sizeof rep.progress.phase);
        rep.progress.freeze_step = p->freeze_step;
        rep.progress.samples_per_s = p->samples_per_s;
        rep.progress.bytes_sent = p->bytes_sent;
        rep.progress.lr = p->lr;
        rep.progress.freeze_ratio = p->freeze_ratio;
    }
    if (q->checkpoint) {
        rep.ckpt_step = q->checkpoint->step;
        ob__strlcpy(rep.ckpt_path, q->checkpoint->path, sizeof rep.ckpt_path);
    }
    rep.num_params = q->num_params;
    rep.world_size = q->world_size;
    rep.eval_loss = q->eval_loss;
    rep.eval_accuracy = q->eval_accuracy;
    ob__strlcpy(rep.message, q->message, sizeof rep.message);
    rep.ckpt_failed = q->checkpoint_failed;
    int cancel = 0;
    ob_status rc = ob_service_report(s->svc, &rep, &cancel, &r->err);
    if (rc) return rc;
    Onebit__V1__ReportProgressResponse resp = ONEBIT__V1__REPORT_PROGRESS_RESPONSE__INIT;
    resp.cancel_requested = cancel;
    if (!(r->bb = pack_message(&resp.base)))
        return OB_ERR(&r->err, OB_ERR_NOMEM, "encoding a report answer");
    return OB_OK;
}

/* Health: "" (the server), and each service onebitd implements. */
static ob_status h_logs(ob_grpc_server *s, const ProtobufCMessage *m, reply *r)
{
    const Onebit__V1__GetJobLogsRequest *q = (const Onebit__V1__GetJobLogsRequest *)m;
    char *data = NULL;
    size_t len = 0;
    int64_t size = 0;
    ob_status rc =
        ob_service_logs(s->svc, q->id, q->offset, q->max_bytes, &data, &len, &size, &r->err);
    if (rc) return rc;
    Onebit__V1__JobLogs resp = ONEBIT__V1__JOB_LOGS__INIT;
    resp.data.data = (uint8_t *)data;
    resp.data.len = len;
    resp.next_offset = q->offset + (int64_t)len;
    resp.size = size;
    r->bb = pack_message(&resp.base);
    free(data);
    if (!r->bb) return OB_ERR(&r->err, OB_ERR_NOMEM, "encoding logs");
    return OB_OK;
}

static int known_service(const char *name)
{
    return !name[0] || !strcmp(name, "onebit.v1.JobService") ||
           !strcmp(name, "onebit.v1.WorkerService") || !strcmp(name, "grpc.health.v1.Health");
}

static ob_status h_health(ob_grpc_server *s, const ProtobufCMessage *m, reply *r)
{
    (void)s;
    const Grpc__Health__V1__HealthCheckRequest *q = (const Grpc__Health__V1__HealthCheckRequest *)m;
    if (!known_service(q->service))
        return OB_ERR(&r->err, OB_ERR_NOT_FOUND, "unknown service '%.100s'", q->service);
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    if (!(r->bb = pack_message(&resp.base)))
        return OB_ERR(&r->err, OB_ERR_NOMEM, "encoding a health answer");
    return OB_OK;
}

typedef ob_status (*handler_fn)(ob_grpc_server *s, const ProtobufCMessage *m, reply *r);

static const struct {
    const ProtobufCMessageDescriptor *request;
    handler_fn fn; /* NULL: a stream */
} handlers[M_COUNT] = {
    [M_SUBMIT] = {&onebit__v1__submit_job_request__descriptor, h_submit},
    [M_GET] = {&onebit__v1__get_job_request__descriptor, h_get},
    [M_LIST] = {&onebit__v1__list_jobs_request__descriptor, h_list},
    [M_CANCEL] = {&onebit__v1__cancel_job_request__descriptor, h_cancel},
    [M_WATCH] = {&onebit__v1__watch_job_request__descriptor, NULL},
    [M_CHECKPOINTS] = {&onebit__v1__list_checkpoints_request__descriptor, h_checkpoints},
    [M_LOGS] = {&onebit__v1__get_job_logs_request__descriptor, h_logs},
    [M_REPORT] = {&onebit__v1__report_progress_request__descriptor, h_report},
    [M_HEALTH_CHECK] = {&grpc__health__v1__health_check_request__descriptor, h_health},
    [M_HEALTH_WATCH] = {&grpc__health__v1__health_check_request__descriptor, NULL},
};

/* ---- call lifetime ------------------------------------------------------------------------- */

static void request_next(ob_grpc_server *s, method_id m);

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
                                     &c->t_new);
    else
        e = grpc_server_request_registered_call(s->server, s->registered[m], &c->call, &c->deadline,
                                                &c->md, &c->payload, s->cq, s->cq, &c->t_new);
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
    if (grpc_call_start_batch(c->call, ops, n, &c->t_done, NULL) != GRPC_CALL_OK) ctx_free(c);
}

static int authorized(const ob_grpc_server *s, const grpc_metadata_array *md)
{
    if (!s->token) return 1;
    for (size_t i = 0; i < md->count; i++) {
        if (grpc_slice_str_cmp(md->metadata[i].key, "authorization") != 0) continue;
        const grpc_slice v = md->metadata[i].value;
        size_t tl = strlen(s->token);
        if (GRPC_SLICE_LENGTH(v) != tl + 7) return 0;
        const char *p = (const char *)GRPC_SLICE_START_PTR(v);
        if (memcmp(p, "Bearer ", 7) != 0) return 0;
        unsigned diff = 0; /* compare every byte: the time does not tell how much matched */
        for (size_t k = 0; k < tl; k++)
            diff |= (unsigned)(p[7 + k] ^ s->token[k]);
        return diff == 0;
    }
    return 0;
}

/* ---- streams ------------------------------------------------------------------------------ */

/* Frees a stream once nothing of it is in flight and the call is over. Lock held; the lock
 * is released around ctx_free's own locking, so the caller must not use c afterwards. */
static int stream_maybe_free(ob_grpc_server *s, call_ctx *c)
{
    if (!c->closed || c->in_flight || (c->status_started && !c->status_done)) return 0;
    for (call_ctx **p = &s->watches; *p; p = &(*p)->wnext) {
        if (*p == c) {
            *p = c->wnext;
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
    if (grpc_call_start_batch(c->call, ops, n, &c->t_send, NULL) == GRPC_CALL_OK)
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
    if (grpc_call_start_batch(c->call, ops, n, &c->t_status, NULL) != GRPC_CALL_OK) {
        c->status_done = 1;
        c->broken = 1;
    }
}

/* Starts the next send of a stream when it has something to send and nothing in flight. */
static void stream_pump(ob_grpc_server *s, call_ctx *c)
{
    if (c->closed || c->broken || c->in_flight || c->status_started) return;
    if (c->method == M_HEALTH_WATCH) {
        if (c->health_sent) return;
        Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        resp.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        grpc_byte_buffer *bb = pack_message(&resp.base);
        if (bb) stream_send(c, bb);
        c->health_sent = 1;
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
        stream_status(c, rc, err.msg);
        return;
    }
    if (n == 0) {
        if (final) stream_status(c, OB_OK, "");
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
    grpc_byte_buffer *bb = pack_message(&ev.base);
    c->last_seq = e->seq;
    if (!strcmp(e->kind, "state") && ob_job_state_final(e->state)) c->finish_after_send = 1;
    free(evs);
    if (bb)
        stream_send(c, bb);
    else
        stream_status(c, OB_ERR_NOMEM, "encoding an event");
}

static void stream_begin(ob_grpc_server *s, call_ctx *c)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) != GRPC_CALL_OK) {
        ctx_free(c);
        return;
    }
    pthread_mutex_lock(&s->mu);
    c->wnext = s->watches;
    s->watches = c;
    stream_pump(s, c);
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

static void *watcher_main(void *arg)
{
    ob_grpc_server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->watch_stop) {
        int64_t seen = ob_service_event_counter(s->svc);
        for (call_ctx *c = s->watches; c; c = c->wnext)
            stream_pump(s, c);
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

/* ---- dispatch ----------------------------------------------------------------------------- */

static void handle_new(ob_grpc_server *s, call_ctx *c)
{
    char msg[OB_ERR_MSG_LEN + 64];
    if (!authorized(s, &c->md)) {
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
    const ProtobufCMessageDescriptor *d = handlers[c->method].request;
    if (!c->payload) {
        snprintf(msg, sizeof msg, "missing %s message", d->name);
        finish_unary(c, OB_ERR_INVALID_ARG, msg, NULL);
        return;
    }
    ProtobufCMessage *m = unpack_payload(c->payload, d);
    if (!m) {
        snprintf(msg, sizeof msg, "malformed %s message: not valid protobuf", d->name);
        finish_unary(c, OB_ERR_INVALID_ARG, msg, NULL);
        return;
    }
    if (handlers[c->method].fn) {
        reply r;
        memset(&r, 0, sizeof r);
        ob_status rc = handlers[c->method].fn(s, m, &r);
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
            ob__strlcpy(c->job_id, j.id, sizeof c->job_id);
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
    /* Health.Watch */
    const Grpc__Health__V1__HealthCheckRequest *q = (const Grpc__Health__V1__HealthCheckRequest *)m;
    int known = known_service(q->service);
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
            stream_event(s, c, t->kind, ev.success);
        }
    }
    return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------ */

ob_status ob_grpc_server_start(ob_grpc_server **out, ob_service *svc, const char *addr,
                               const char *token, int threads, int *bound_port, ob_err *err)
{
    *out = NULL;
    if (threads <= 0) threads = 4;
    ob_grpc_server *s = calloc(1, sizeof *s);
    if (!s) return OB_ERR(err, OB_ERR_NOMEM, "allocating the gRPC server");
    grpc_init();
    pthread_mutex_init(&s->mu, NULL);
    s->svc = svc;
    s->t_shutdown = (tag){TAG_SHUTDOWN, NULL};
    if (token && token[0] && !(s->token = strdup(token))) goto oom;
    s->threads = calloc((size_t)threads, sizeof *s->threads);
    if (!s->threads) goto oom;

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
            s->server, method_paths[m], NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (!s->registered[m]) {
            OB_ERR(err, OB_ERR_IO, "registering %s", method_paths[m]);
            goto fail_server;
        }
    }
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        OB_ERR(err, OB_ERR_IO, "gRPC: cannot listen on %s", addr);
        goto fail_server;
    }
    if (bound_port) *bound_port = port;
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
    free(s->threads);
    free(s->token);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
    return err ? err->code : OB_ERR_IO;
oom:
    free(s->threads);
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
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
    grpc_server_cancel_all_calls(s->server);
    for (int i = 0; i < s->n_threads; i++)
        pthread_join(s->threads[i], NULL);
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    free(s->threads);
    free(s->token);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
}
