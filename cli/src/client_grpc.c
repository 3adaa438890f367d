/* obctl_client over gRPC: JobService calls with protobuf-c messages through ob_rpc_client. */
#include "client_internal.h"
#include "onebit/job_codec.h"
#include "onebit/rpc_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNARY_TIMEOUT_MS 30000
#define WATCH_TIMEOUT_MS 3600000 /* a watch longer than this reconnects after its last event */

static ob_rpc_client *rpc(obctl_client *c)
{
    return c->impl;
}

/* A status the server sent, as an ob_status with the server's message. */
static ob_status from_grpc(obctl_client *c, const ob_rpc_result *res, ob_err *err)
{
    ob_status st;
    switch (res->code) {
    case 0:
        return OB_OK;
    case 3:
        st = OB_ERR_INVALID_ARG;
        break;
    case 5:
        st = OB_ERR_NOT_FOUND;
        break;
    case 8:
        st = OB_ERR_TOO_LARGE;
        break;
    case 9:
        st = OB_ERR_STATE;
        break;
    case 12:
        st = OB_ERR_UNSUPPORTED;
        break;
    case 15:
        st = OB_ERR_CORRUPT;
        break;
    case 16:
        st = OB_ERR_UNAUTHENTICATED;
        break;
    case 4: /* deadline */
        return obctl__unreachable(err, c, res->details);
    case 14: /* UNAVAILABLE: not reachable, or the TLS handshake failed */
        return obctl__transport_failed(err, c, res->details);
    default:
        st = OB_ERR_IO;
        break;
    }
    if (err) {
        err->code = st;
        snprintf(err->msg, sizeof err->msg, "%s", res->details);
    }
    return st;
}

/* Packs req, calls method, unpacks the answer with desc into *resp (protobuf_c free). */
static ob_status call(obctl_client *c, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp, ob_err *err)
{
    size_t len = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return OB_ERR(err, OB_ERR_NOMEM, "request");
    protobuf_c_message_pack(req, buf);
    void *out = NULL;
    size_t out_len = 0;
    ob_rpc_result res;
    /* A submit with an upload may be large: it gets as long as 128 KiB/s needs, besides. */
    int timeout = UNARY_TIMEOUT_MS + (int)(len / 131072 * 1000);
    ob_status st = ob_rpc_unary(rpc(c), method, buf, len, &out, &out_len, &res, timeout, err);
    free(buf);
    if (st != OB_OK) return obctl__unreachable(err, c, err ? err->msg : "call failed");
    if ((st = from_grpc(c, &res, err)) != OB_OK) {
        free(out);
        return st;
    }
    *resp = protobuf_c_message_unpack(desc, NULL, out_len, out);
    free(out);
    if (!*resp) return OB_ERR(err, OB_ERR_CORRUPT, "%s: the answer is not a valid message", method);
    return OB_OK;
}

static ob_status job_call(obctl_client *c, const char *method, const ProtobufCMessage *req,
                          ob_job *out, ob_err *err)
{
    ProtobufCMessage *m = NULL;
    ob_status st = call(c, method, req, &onebit__v1__job__descriptor, &m, err);
    if (st != OB_OK) return st;
    st = ob_job_from_pb((const Onebit__V1__Job *)m, out, err);
    protobuf_c_message_free_unpacked(m, NULL);
    return st;
}

static ob_status g_submit(obctl_client *c, const char *spec, size_t len, int world_size,
                          int max_restarts, const char *request_id, const char *labels,
                          const char *deadline, const obctl_file *files, size_t n_files,
                          ob_job *out, ob_err *err)
{
    Onebit__V1__SubmitJobRequest q = ONEBIT__V1__SUBMIT_JOB_REQUEST__INIT;
    char *text = strndup(spec, len);
    /* The files' messages point into the caller's; one block of them and one of pointers. */
    Onebit__V1__ProgramFile *pf = n_files ? calloc(n_files, sizeof *pf) : NULL;
    Onebit__V1__ProgramFile **pp = n_files ? calloc(n_files, sizeof *pp) : NULL;
    if (!text || (n_files && (!pf || !pp))) {
        free(text);
        free(pf);
        free(pp);
        return OB_ERR(err, OB_ERR_NOMEM, "spec");
    }
    for (size_t i = 0; i < n_files; i++) {
        onebit__v1__program_file__init(&pf[i]);
        pf[i].path = (char *)files[i].path;
        pf[i].mode = files[i].mode;
        pf[i].data.data = (uint8_t *)files[i].data;
        pf[i].data.len = files[i].len;
        pp[i] = &pf[i];
    }
    q.n_files = n_files;
    q.files = pp;
    q.spec = text;
    q.world_size = world_size;
    q.max_restarts = max_restarts;
    q.request_id = (char *)(request_id ? request_id : "");
    q.labels = (char *)(labels ? labels : "");
    q.deadline = (char *)(deadline ? deadline : "");
    ob_status st = job_call(c, "/onebit.v1.JobService/SubmitJob", &q.base, out, err);
    free(text);
    free(pf);
    free(pp);
    return st;
}

static ob_status g_get(obctl_client *c, const char *id, ob_job *out, ob_err *err)
{
    Onebit__V1__GetJobRequest q = ONEBIT__V1__GET_JOB_REQUEST__INIT;
    q.id = (char *)id;
    return job_call(c, "/onebit.v1.JobService/GetJob", &q.base, out, err);
}

static ob_status g_cancel(obctl_client *c, const char *id, ob_job *out, ob_err *err)
{
    Onebit__V1__CancelJobRequest q = ONEBIT__V1__CANCEL_JOB_REQUEST__INIT;
    q.id = (char *)id;
    return job_call(c, "/onebit.v1.JobService/CancelJob", &q.base, out, err);
}

static ob_status g_version(obctl_client *c, char version[64], char api[64], ob_err *err)
{
    Onebit__V1__GetVersionRequest q = ONEBIT__V1__GET_VERSION_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    ob_status st = call(c, "/onebit.v1.JobService/GetVersion", &q.base,
                        &onebit__v1__version__descriptor, &m, err);
    if (st != OB_OK) return st;
    const Onebit__V1__Version *v = (const Onebit__V1__Version *)m;
    ob_strlcpy(version, v->version, 64);
    ob_strlcpy(api, v->api, 64);
    protobuf_c_message_free_unpacked(m, NULL);
    return OB_OK;
}

static ob_status g_delete(obctl_client *c, const char *id, int keep_checkpoints, int *deleted,
                          ob_err *err)
{
    Onebit__V1__DeleteJobRequest q = ONEBIT__V1__DELETE_JOB_REQUEST__INIT;
    q.id = (char *)id;
    q.keep_checkpoints = keep_checkpoints;
    ProtobufCMessage *m = NULL;
    *deleted = 0;
    ob_status st = call(c, "/onebit.v1.JobService/DeleteJob", &q.base,
                        &onebit__v1__delete_job_response__descriptor, &m, err);
    if (st != OB_OK) return st;
    *deleted = ((const Onebit__V1__DeleteJobResponse *)m)->checkpoints_deleted;
    protobuf_c_message_free_unpacked(m, NULL);
    return OB_OK;
}

static ob_status g_list(obctl_client *c, ob_job_state state, const char *selector, int page_size,
                        const char *token, ob_job **jobs, size_t *n, char next[OB_PAGE_TOKEN_LEN],
                        ob_err *err)
{
    Onebit__V1__ListJobsRequest q = ONEBIT__V1__LIST_JOBS_REQUEST__INIT;
    q.state = (Onebit__V1__JobState)state;
    q.page_size = page_size;
    q.page_token = (char *)(token ? token : "");
    q.label_selector = (char *)(selector ? selector : "");
    ProtobufCMessage *m = NULL;
    *jobs = NULL;
    *n = 0;
    next[0] = '\0';
    ob_status st = call(c, "/onebit.v1.JobService/ListJobs", &q.base,
                        &onebit__v1__list_jobs_response__descriptor, &m, err);
    if (st != OB_OK) return st;
    const Onebit__V1__ListJobsResponse *r = (const Onebit__V1__ListJobsResponse *)m;
    ob_job *js = r->n_jobs ? calloc(r->n_jobs, sizeof *js) : NULL;
    if (r->n_jobs && !js) st = OB_ERR(err, OB_ERR_NOMEM, "jobs");
    size_t got = 0;
    for (; st == OB_OK && got < r->n_jobs; got++)
        st = ob_job_from_pb(r->jobs[got], &js[got], err);
    if (st == OB_OK) {
        snprintf(next, OB_PAGE_TOKEN_LEN, "%s", r->next_page_token ? r->next_page_token : "");
        *jobs = js;
        *n = got;
    } else {
        ob_job_array_free(js, got);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return st;
}

static ob_status g_checkpoints(obctl_client *c, const char *id, ob_checkpoint_info **out, size_t *n,
                               ob_err *err)
{
    Onebit__V1__ListCheckpointsRequest q = ONEBIT__V1__LIST_CHECKPOINTS_REQUEST__INIT;
    q.id = (char *)id;
    ProtobufCMessage *m = NULL;
    *out = NULL;
    *n = 0;
    ob_status st = call(c, "/onebit.v1.JobService/ListCheckpoints", &q.base,
                        &onebit__v1__list_checkpoints_response__descriptor, &m, err);
    if (st != OB_OK) return st;
    const Onebit__V1__ListCheckpointsResponse *r = (const Onebit__V1__ListCheckpointsResponse *)m;
    if (r->n_checkpoints) {
        *out = calloc(r->n_checkpoints, sizeof **out);
        if (!*out) st = OB_ERR(err, OB_ERR_NOMEM, "checkpoints");
        for (size_t i = 0; st == OB_OK && i < r->n_checkpoints; i++)
            ob_checkpoint_info_from_pb(r->checkpoints[i], &(*out)[i]);
        if (st == OB_OK) *n = r->n_checkpoints;
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return st;
}

typedef struct watch_ctx {
    obctl_on_event cb;
    void *user;
    int64_t last_seq;
    int stopped;
    int bad;
} watch_ctx;

static int on_stream_message(const void *data, size_t len, void *user)
{
    watch_ctx *w = user;
    Onebit__V1__JobEvent *m = onebit__v1__job_event__unpack(NULL, len, data);
    if (!m) {
        w->bad = 1;
        return 1;
    }
    ob_job_event ev;
    ob_job_event_from_pb(m, &ev);
    onebit__v1__job_event__free_unpacked(m, NULL);
    w->last_seq = ev.seq;
    if (w->cb(&ev, w->user)) w->stopped = 1;
    return w->stopped;
}

static ob_status g_watch(obctl_client *c, const char *id, int64_t after_seq, obctl_on_event cb,
                         void *user, ob_err *err)
{
    watch_ctx w = {cb, user, after_seq, 0, 0};
    for (;;) {
        Onebit__V1__WatchJobRequest q = ONEBIT__V1__WATCH_JOB_REQUEST__INIT;
        q.id = (char *)id;
        q.after_seq = w.last_seq;
        size_t len = protobuf_c_message_get_packed_size(&q.base);
        uint8_t buf[512];
        if (len > sizeof buf) return OB_ERR(err, OB_ERR_INVALID_ARG, "job id too long");
        protobuf_c_message_pack(&q.base, buf);
        ob_rpc_result res;
        ob_status st = ob_rpc_server_stream(rpc(c), "/onebit.v1.JobService/WatchJob", buf, len,
                                            on_stream_message, &w, &res, WATCH_TIMEOUT_MS, err);
        if (st != OB_OK) return obctl__unreachable(err, c, err ? err->msg : "stream failed");
        if (w.bad)
            return OB_ERR(err, OB_ERR_CORRUPT, "WatchJob sent a message that is not an event");
        if (w.stopped) return OB_OK;
        if (res.code == 4) continue; /* our own deadline: reconnect after the last event */
        return from_grpc(c, &res, err);
    }
}

typedef struct log_ctx {
    obctl_on_log cb;
    void *user;
    int64_t next; /* where a reconnect starts */
    int stopped;
    int bad;
} log_ctx;

static int on_log_message(const void *data, size_t len, void *user)
{
    log_ctx *w = user;
    Onebit__V1__JobLogs *m = onebit__v1__job_logs__unpack(NULL, len, data);
    if (!m) {
        w->bad = 1;
        return 1;
    }
    w->next = m->next_offset;
    if (m->data.len && w->cb((const char *)m->data.data, m->data.len, w->user)) w->stopped = 1;
    onebit__v1__job_logs__free_unpacked(m, NULL);
    return w->stopped;
}

static ob_status g_stream_logs(obctl_client *c, const char *id, int tail_lines, int64_t since_ms,
                               int follow, obctl_on_log cb, void *user, ob_err *err)
{
    log_ctx w = {cb, user, -1, 0, 0};
    for (;;) {
        Onebit__V1__StreamJobLogsRequest q = ONEBIT__V1__STREAM_JOB_LOGS_REQUEST__INIT;
        q.id = (char *)id;
        if (w.next < 0) { /* the first call; a reconnect goes on from where the last one ended */
            q.tail_lines = tail_lines;
            q.since_unix_ms = since_ms;
        } else {
            q.offset = w.next;
        }
        q.follow = follow;
        size_t len = protobuf_c_message_get_packed_size(&q.base);
        uint8_t buf[512];
        if (len > sizeof buf) return OB_ERR(err, OB_ERR_INVALID_ARG, "job id too long");
        protobuf_c_message_pack(&q.base, buf);
        ob_rpc_result res;
        ob_status st = ob_rpc_server_stream(rpc(c), "/onebit.v1.JobService/StreamJobLogs", buf, len,
                                            on_log_message, &w, &res, WATCH_TIMEOUT_MS, err);
        if (st != OB_OK) return obctl__unreachable(err, c, err ? err->msg : "stream failed");
        if (w.bad)
            return OB_ERR(err, OB_ERR_CORRUPT, "StreamJobLogs sent a message that is not JobLogs");
        if (w.stopped) return OB_OK;
        if (res.code == 4 && w.next >= 0) continue; /* our own deadline: on from where it was */
        return from_grpc(c, &res, err);
    }
}

static ob_status g_logs(obctl_client *c, const char *id, int64_t offset, int max_bytes, char **data,
                        size_t *len, int64_t *next, int64_t *size, ob_err *err)
{
    Onebit__V1__GetJobLogsRequest q = ONEBIT__V1__GET_JOB_LOGS_REQUEST__INIT;
    q.id = (char *)id;
    q.offset = offset;
    q.max_bytes = max_bytes;
    ProtobufCMessage *m = NULL;
    ob_status st = call(c, "/onebit.v1.JobService/GetJobLogs", &q.base,
                        &onebit__v1__job_logs__descriptor, &m, err);
    if (st != OB_OK) return st;
    const Onebit__V1__JobLogs *r = (const Onebit__V1__JobLogs *)m;
    if (r->data.len) {
        *data = malloc(r->data.len);
        if (!*data)
            st = OB_ERR(err, OB_ERR_NOMEM, "logs");
        else {
            memcpy(*data, r->data.data, r->data.len);
            *len = r->data.len;
        }
    }
    *next = r->next_offset;
    *size = r->size;
    protobuf_c_message_free_unpacked(m, NULL);
    return st;
}

static void g_destroy(obctl_client *c)
{
    ob_rpc_client_destroy(rpc(c));
}

static const obctl_ops grpc_ops = {
    .submit = g_submit,
    .get = g_get,
    .cancel = g_cancel,
    .del = g_delete,
    .version = g_version,
    .list = g_list,
    .checkpoints = g_checkpoints,
    .watch = g_watch,
    .logs = g_logs,
    .stream_logs = g_stream_logs,
    .destroy = g_destroy,
};

ob_status obctl_client_grpc(obctl_client **out, const char *target, const char *token,
                            const obctl_tls *tls, ob_err *err)
{
    *out = NULL;
    obctl_client *c = calloc(1, sizeof *c);
    if (!c) return OB_ERR(err, OB_ERR_NOMEM, "client");
    c->ops = &grpc_ops;
    c->tls = tls != NULL;
    snprintf(c->target, sizeof c->target, "%s", target);
    /* gRPC takes PEM text, not paths: the files are read here (and named when they fail). */
    char *ca = NULL, *cert = NULL, *key = NULL;
    ob_status st = OB_OK;
    if (tls && ((tls->ca_file && (st = obctl__read_pem("--ca", tls->ca_file, &ca, err))) ||
                (tls->cert_file && (st = obctl__read_pem("--cert", tls->cert_file, &cert, err))) ||
                (tls->key_file && (st = obctl__read_pem("--key", tls->key_file, &key, err)))))
        goto done;
    ob_rpc_tls rt = {.ca_pem = ca,
                     .server_name = tls ? tls->server_name : NULL,
                     .cert_pem = cert,
                     .key_pem = key};
    ob_rpc_client *r = NULL;
    st = ob_rpc_client_create_tls(&r, target, token, tls ? &rt : NULL, err);
    if (st == OB_OK) {
        c->impl = r;
        *out = c;
    }
done:
    free(ca);
    free(cert);
    if (key) {
        memset(key, 0, strlen(key));
        free(key);
    }
    if (st != OB_OK) free(c);
    return st;
}
