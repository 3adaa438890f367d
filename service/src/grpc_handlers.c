/* The gRPC methods' handlers (grpc_internal.h): decode, call the service, encode. Thin on
 * purpose: every decision is the service's, every error code comes from the status map. */
#include "grpc_internal.h"
#include "onebit/base.h"
#include "onebit/job_codec.h"
#include "onebit/report.h"
#include "onebit/v1/jobs.pb-c.h"
#include "onebit/v1/worker.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <stdlib.h>
#include <string.h>

const char *const ob__grpc_method_paths[M_COUNT] = {
    [M_SUBMIT] = "/onebit.v1.JobService/SubmitJob",
    [M_GET] = "/onebit.v1.JobService/GetJob",
    [M_LIST] = "/onebit.v1.JobService/ListJobs",
    [M_CANCEL] = "/onebit.v1.JobService/CancelJob",
    [M_WATCH] = "/onebit.v1.JobService/WatchJob",
    [M_CHECKPOINTS] = "/onebit.v1.JobService/ListCheckpoints",
    [M_LOGS] = "/onebit.v1.JobService/GetJobLogs",
    [M_STREAM_LOGS] = "/onebit.v1.JobService/StreamJobLogs",
    [M_DELETE] = "/onebit.v1.JobService/DeleteJob",
    [M_VERSION] = "/onebit.v1.JobService/GetVersion",
    [M_REPORT] = "/onebit.v1.WorkerService/ReportProgress",
    [M_HEALTH_CHECK] = "/grpc.health.v1.Health/Check",
    [M_HEALTH_WATCH] = "/grpc.health.v1.Health/Watch",
    [M_REFLECTION] = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    [M_REFLECTION_ALPHA] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
};

/* ---- messages ------------------------------------------------------------------------------ */

grpc_byte_buffer *ob__grpc_pack(const ProtobufCMessage *m)
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

/* Reads a varint at p[*i..len); 0 when it runs past the end or past 10 bytes. */
static int read_varint(const uint8_t *p, size_t len, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 70 && *i < len; shift += 7) {
        uint8_t b = p[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 1;
    }
    return 0;
}

/* 1 when no string field of message d encoded in p[0..len) holds a NUL byte, nested messages
 * (map entries are messages) included down to 32 levels; 0 otherwise or when the encoding
 * does not walk (it decoded already, so that does not happen). */
static int strings_clean(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len,
                         int depth)
{
    size_t i = 0;
    uint64_t key, n;
    while (i < len) {
        if (!read_varint(p, len, &i, &key)) return 0;
        switch (key & 7) {
        case 0:
            if (!read_varint(p, len, &i, &n)) return 0;
            break;
        case 1:
            if (len - i < 8) return 0;
            i += 8;
            break;
        case 5:
            if (len - i < 4) return 0;
            i += 4;
            break;
        case 2: {
            if (!read_varint(p, len, &i, &n) || n > len - i) return 0;
            const ProtobufCFieldDescriptor *f =
                key >> 3 <= UINT32_MAX
                    ? protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3))
                    : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + i, 0, n)) return 0;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
                (depth >= 32 || !strings_clean(f->descriptor, p + i, n, depth + 1)))
                return 0;
            i += n;
            break;
        }
        default:
            return 0;
        }
    }
    return 1;
}

ProtobufCMessage *ob__grpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
                                  const char **why)
{
    if (why) *why = "not valid protobuf";
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) return NULL;
    grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    const uint8_t *p = GRPC_SLICE_START_PTR(s);
    size_t len = GRPC_SLICE_LENGTH(s);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, p);
    if (m && !strings_clean(d, p, len, 0)) {
        protobuf_c_message_free_unpacked(m, NULL);
        m = NULL;
        if (why) *why = "a string field holds a NUL byte";
    }
    grpc_slice_unref(s);
    return m;
}

/* ---- handlers: decode, call the service, encode ------------------------------------------ */

/* The answer of a call that returns a job: rc of the service function that filled *j (which
 * is cleared here when it succeeded), or the encoded job. */
static ob_status reply_job(ob__grpc_reply *r, ob_status rc, ob_job *j)
{
    if (rc != OB_OK) return rc;
    ob_job_pb pb;
    if (ob_job_to_pb(j, &pb, NULL) != OB_OK || !(r->bb = ob__grpc_pack(&pb.job.base)))
        rc = OB_ERR(&r->err, OB_ERR_NOMEM, "encoding job %s", j->id);
    ob_job_pb_release(&pb);
    ob_job_clear(j);
    return rc;
}

static ob_status h_submit(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                          ob__grpc_reply *r)
{
    const Onebit__V1__SubmitJobRequest *q = (const Onebit__V1__SubmitJobRequest *)m;
    ob_submit_req req = {.spec = q->spec,
                         .spec_len = strlen(q->spec),
                         .world_size = q->world_size,
                         .max_restarts = q->max_restarts,
                         .request_id = q->request_id,
                         .labels = q->labels,
                         .deadline = q->deadline};
    if (q->n_files > OB_UPLOAD_MAX_FILES) /* before an array is allocated for them */
        return OB_ERR(&r->err, OB_ERR_INVALID_ARG,
                      "files: %zu files, more than the limit of %d in one upload", q->n_files,
                      OB_UPLOAD_MAX_FILES);
    ob_upload_file *files = q->n_files ? calloc(q->n_files, sizeof *files) : NULL;
    if (q->n_files && !files) return OB_ERR(&r->err, OB_ERR_NOMEM, "the upload's files");
    for (size_t i = 0; i < q->n_files; i++) {
        const Onebit__V1__ProgramFile *f = q->files[i];
        files[i] = (ob_upload_file){
            .path = f->path, .mode = f->mode, .data = f->data.data, .len = f->data.len};
    }
    req.files = files;
    req.n_files = q->n_files;
    ob_job j;
    ob_status rc = reply_job(r, ob_service_submit(svc, &req, &j, &r->err), &j);
    free(files);
    return rc;
}

static ob_status h_get(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                       ob__grpc_reply *r)
{
    const Onebit__V1__GetJobRequest *q = (const Onebit__V1__GetJobRequest *)m;
    ob_job j;
    return reply_job(r, ob_service_get(svc, q->id, &j, &r->err), &j);
}

static ob_status h_cancel(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                          ob__grpc_reply *r)
{
    const Onebit__V1__CancelJobRequest *q = (const Onebit__V1__CancelJobRequest *)m;
    ob_job j;
    return reply_job(r, ob_service_cancel(svc, q->id, &j, &r->err), &j);
}

static ob_status h_delete(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                          ob__grpc_reply *r)
{
    const Onebit__V1__DeleteJobRequest *q = (const Onebit__V1__DeleteJobRequest *)m;
    int deleted = 0;
    ob_status rc = ob_service_delete(svc, q->id, q->keep_checkpoints, &deleted, &r->err);
    if (rc) return rc;
    Onebit__V1__DeleteJobResponse resp = ONEBIT__V1__DELETE_JOB_RESPONSE__INIT;
    resp.id = q->id;
    resp.checkpoints_deleted = deleted;
    if (!(r->bb = ob__grpc_pack(&resp.base)))
        return OB_ERR(&r->err, OB_ERR_NOMEM, "encoding a delete answer");
    return OB_OK;
}

static ob_status h_version(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                           ob__grpc_reply *r)
{
    (void)svc;
    Onebit__V1__Version v = ONEBIT__V1__VERSION__INIT;
    v.version = (char *)ONEBIT_VERSION;
    v.api = (char *)"onebit.v1";
    if (!(r->bb = ob__grpc_pack(&v.base)))
        return OB_ERR(&r->err, OB_ERR_NOMEM, "encoding the version");
    return OB_OK;
}

static ob_status h_list(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                        ob__grpc_reply *r)
{
    const Onebit__V1__ListJobsRequest *q = (const Onebit__V1__ListJobsRequest *)m;
    ob_job *jobs = NULL;
    size_t n = 0;
    char next[OB_PAGE_TOKEN_LEN];
    ob_status rc = ob_service_list(svc, (ob_job_state)q->state, q->label_selector, q->page_size,
                                   q->page_token, &jobs, &n, next, &r->err);
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
    if (!(r->bb = ob__grpc_pack(&resp.base))) rc = OB_ERR(&r->err, OB_ERR_NOMEM, "encoding jobs");
out:
    for (size_t i = 0; pbs && i < done; i++)
        ob_job_pb_release(&pbs[i]);
    free(pbs);
    free(ptrs);
    ob_job_array_free(jobs, n);
    return rc;
}

static ob_status h_checkpoints(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                               ob__grpc_reply *r)
{
    const Onebit__V1__ListCheckpointsRequest *q = (const Onebit__V1__ListCheckpointsRequest *)m;
    ob_checkpoint_info *ck = NULL;
    size_t n = 0;
    ob_status rc = ob_service_checkpoints(svc, q->id, &ck, &n, &r->err);
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
        r->bb = ob__grpc_pack(&resp.base);
    }
    if (!r->bb) rc = OB_ERR(&r->err, OB_ERR_NOMEM, "encoding checkpoints");
    free(v);
    free(p);
    free(ck);
    return rc;
}

static ob_status h_report(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                          ob__grpc_reply *r)
{
    const Onebit__V1__ReportProgressRequest *q = (const Onebit__V1__ReportProgressRequest *)m;
    ob_report rep;
    ob_status rc = ob_report_from_pb(q, &rep, &r->err);
    if (rc) return rc;
    int cancel = 0;
    rc = ob_service_report(svc, &rep, bearer, &cancel, &r->err);
    if (rc) return rc;
    Onebit__V1__ReportProgressResponse resp = ONEBIT__V1__REPORT_PROGRESS_RESPONSE__INIT;
    resp.cancel_requested = cancel;
    if (!(r->bb = ob__grpc_pack(&resp.base)))
        return OB_ERR(&r->err, OB_ERR_NOMEM, "encoding a report answer");
    return OB_OK;
}

/* Health: "" (the server), and each service onebitd implements. */
static ob_status h_logs(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                        ob__grpc_reply *r)
{
    const Onebit__V1__GetJobLogsRequest *q = (const Onebit__V1__GetJobLogsRequest *)m;
    char *data = NULL;
    size_t len = 0;
    int64_t size = 0;
    ob_status rc =
        ob_service_logs(svc, q->id, q->offset, q->max_bytes, &data, &len, &size, &r->err);
    if (rc) return rc;
    Onebit__V1__JobLogs resp = ONEBIT__V1__JOB_LOGS__INIT;
    resp.data.data = (uint8_t *)data;
    resp.data.len = len;
    resp.next_offset = q->offset + (int64_t)len;
    resp.size = size;
    r->bb = ob__grpc_pack(&resp.base);
    free(data);
    if (!r->bb) return OB_ERR(&r->err, OB_ERR_NOMEM, "encoding logs");
    return OB_OK;
}

int ob__grpc_known_service(const char *name)
{
    return !name[0] || !strcmp(name, "onebit.v1.JobService") ||
           !strcmp(name, "onebit.v1.WorkerService") || !strcmp(name, "grpc.health.v1.Health") ||
           !strcmp(name, "grpc.reflection.v1.ServerReflection") ||
           !strcmp(name, "grpc.reflection.v1alpha.ServerReflection");
}

static ob_status h_health(ob_service *svc, const ProtobufCMessage *m, const char *bearer,
                          ob__grpc_reply *r)
{
    const Grpc__Health__V1__HealthCheckRequest *q = (const Grpc__Health__V1__HealthCheckRequest *)m;
    if (!ob__grpc_known_service(q->service))
        return OB_ERR(&r->err, OB_ERR_NOT_FOUND, "unknown service '%.100s'", q->service);
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    /* NOT_SERVING while the job store cannot be written (a full disk): no changes are taken. */
    resp.status = ob_service_serving(svc, NULL, 0)
                      ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                      : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    if (!(r->bb = ob__grpc_pack(&resp.base)))
        return OB_ERR(&r->err, OB_ERR_NOMEM, "encoding a health answer");
    return OB_OK;
}

const ob__grpc_method ob__grpc_methods[M_COUNT] = {
    [M_SUBMIT] = {&onebit__v1__submit_job_request__descriptor, h_submit},
    [M_GET] = {&onebit__v1__get_job_request__descriptor, h_get},
    [M_LIST] = {&onebit__v1__list_jobs_request__descriptor, h_list},
    [M_CANCEL] = {&onebit__v1__cancel_job_request__descriptor, h_cancel},
    [M_WATCH] = {&onebit__v1__watch_job_request__descriptor, NULL},
    [M_CHECKPOINTS] = {&onebit__v1__list_checkpoints_request__descriptor, h_checkpoints},
    [M_LOGS] = {&onebit__v1__get_job_logs_request__descriptor, h_logs},
    [M_STREAM_LOGS] = {&onebit__v1__stream_job_logs_request__descriptor, NULL},
    [M_DELETE] = {&onebit__v1__delete_job_request__descriptor, h_delete},
    [M_VERSION] = {&onebit__v1__get_version_request__descriptor, h_version},
    [M_REPORT] = {&onebit__v1__report_progress_request__descriptor, h_report},
    [M_HEALTH_CHECK] = {&grpc__health__v1__health_check_request__descriptor, h_health},
    [M_HEALTH_WATCH] = {&grpc__health__v1__health_check_request__descriptor, NULL},
    [M_REFLECTION] = {NULL, NULL},
    [M_REFLECTION_ALPHA] = {NULL, NULL},
};
