/* obrpc: a small gRPC client for the black-box tests of onebitd, on the gRPC C core (through
 * ob_rpc_client). It prints each answer as one JSON line on stdout, then "status CODE MESSAGE"
 * on stderr, and exits with the gRPC status code (0 OK, 3 INVALID_ARGUMENT, ...; 100 for a bad
 * command line). The token comes from ONEBIT_TOKEN.
 *
 *   obrpc ADDR health [SERVICE] | health-watch [SERVICE]
 *   obrpc ADDR submit SPECFILE [WORLD_SIZE [MAX_RESTARTS]]
 *   obrpc ADDR get ID | cancel ID | checkpoints ID | watch ID [AFTER_SEQ]
 *   obrpc ADDR list [STATE [PAGE_SIZE [PAGE_TOKEN]]]
 *   obrpc ADDR raw METHOD HEX       (send these bytes as the request, valid or not) */
#include "grpc/health/v1/health.pb-c.h"
#include "onebit/rpc_client.h"
#include "onebit/v1/jobs.pb-c.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *progress_json(const Onebit__V1__Progress *p)
{
    if (!p) return json_null();
    return json_pack("{sI sI sf ss sI sf sI sI sI}", "step", (json_int_t)p->step, "total_steps",
                     (json_int_t)p->total_steps, "loss", p->loss, "phase", p->phase, "freeze_step",
                     (json_int_t)p->freeze_step, "samples_per_s", p->samples_per_s, "bytes_sent",
                     (json_int_t)p->bytes_sent, "bytes_uncompressed",
                     (json_int_t)p->bytes_uncompressed, "rewarms", (json_int_t)p->rewarms);
}

static const char *state_name(int s)
{
    static const char *const n[] = {"UNSPECIFIED", "PENDING", "RUNNING",  "RESTARTING",
                                    "SUCCEEDED",   "FAILED",  "CANCELLED"};
    return s >= 0 && s <= 6 ? n[s] : "?";
}

static json_t *job_json(const Onebit__V1__Job *j)
{
    json_t *att = json_array();
    for (size_t i = 0; i < j->n_attempts; i++) {
        const Onebit__V1__Attempt *a = j->attempts[i];
        json_array_append_new(att, json_pack("{si sI si ss sb ss}", "number", a->number,
                                             "start_step", (json_int_t)a->start_step, "exit_code",
                                             a->exit_code, "exit_reason", a->exit_reason, "ended",
                                             a->ended_unix_ms != 0, "external_id",
                                             a->external_id ? a->external_id : ""));
    }
    json_t *o =
        json_pack("{ss ss ss si si si so so ss sI}", "id", j->id, "name", j->name, "state",
                  state_name(j->state), "world_size", j->world_size, "max_restarts",
                  j->max_restarts, "restarts", j->restarts, "progress", progress_json(j->progress),
                  "attempts", att, "message", j->message, "checkpoint_step",
                  (json_int_t)(j->last_checkpoint ? j->last_checkpoint->step : 0));
    return o;
}

static void print_json(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    if (s) puts(s);
    free(s);
    json_decref(o);
    fflush(stdout);
}

static int print_event(const void *data, size_t len, void *user)
{
    (void)user;
    Onebit__V1__JobEvent *e = onebit__v1__job_event__unpack(NULL, len, data);
    if (!e) {
        fprintf(stderr, "obrpc: undecodable event\n");
        return 1;
    }
    print_json(json_pack("{sI ss ss ss so}", "seq", (json_int_t)e->seq, "kind", e->kind, "state",
                         state_name(e->state), "message", e->message, "progress",
                         progress_json(e->progress)));
    onebit__v1__job_event__free_unpacked(e, NULL);
    return 0;
}

static int print_health(const void *data, size_t len, void *user)
{
    int *count = user;
    Grpc__Health__V1__HealthCheckResponse *h =
        grpc__health__v1__health_check_response__unpack(NULL, len, data);
    if (!h) return 1;
    print_json(json_pack("{si}", "status", h->status));
    grpc__health__v1__health_check_response__free_unpacked(h, NULL);
    return ++*count >= 1; /* one answer is enough */
}

static void print_answer(const char *cmd, const void *data, size_t len)
{
    if (!strcmp(cmd, "health")) {
        print_health(data, len, &(int){-100});
    } else if (!strcmp(cmd, "list")) {
        Onebit__V1__ListJobsResponse *r = onebit__v1__list_jobs_response__unpack(NULL, len, data);
        if (!r) return;
        json_t *arr = json_array();
        for (size_t i = 0; i < r->n_jobs; i++)
            json_array_append_new(arr, job_json(r->jobs[i]));
        print_json(json_pack("{so ss}", "jobs", arr, "next_page_token", r->next_page_token));
        onebit__v1__list_jobs_response__free_unpacked(r, NULL);
    } else if (!strcmp(cmd, "checkpoints")) {
        Onebit__V1__ListCheckpointsResponse *r =
            onebit__v1__list_checkpoints_response__unpack(NULL, len, data);
        if (!r) return;
        json_t *arr = json_array();
        for (size_t i = 0; i < r->n_checkpoints; i++)
            json_array_append_new(
                arr, json_pack("{sI ss si ss sI ss}", "step", (json_int_t)r->checkpoints[i]->step,
                               "path", r->checkpoints[i]->path, "world_size",
                               r->checkpoints[i]->world_size, "phase", r->checkpoints[i]->phase,
                               "freeze_step", (json_int_t)r->checkpoints[i]->freeze_step, "problem",
                               r->checkpoints[i]->problem));
        print_json(json_pack("{so}", "checkpoints", arr));
        onebit__v1__list_checkpoints_response__free_unpacked(r, NULL);
    } else if (!strcmp(cmd, "raw")) {
        print_json(json_pack("{sI}", "bytes", (json_int_t)len));
    } else {
        Onebit__V1__Job *j = onebit__v1__job__unpack(NULL, len, data);
        if (!j) return;
        print_json(job_json(j));
        onebit__v1__job__free_unpacked(j, NULL);
    }
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n + 4096 + 1 > cap) {
            cap = (n + 4096 + 1) * 2;
            char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        got = fread(buf + n, 1, 4096, f);
        n += got;
    } while (got > 0);
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*len ? *len : 1);
    if (b) protobuf_c_message_pack(m, b);
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: obrpc ADDR COMMAND [ARGS]\n");
        return 100;
    }
    const char *addr = argv[1], *cmd = argv[2];
    const char *method = NULL;
    uint8_t *req = NULL;
    size_t req_len = 0;
    int stream = 0;
    char *spec = NULL;
    const char *a3 = argc > 3 ? argv[3] : NULL, *a4 = argc > 4 ? argv[4] : NULL;
    const char *a5 = argc > 5 ? argv[5] : NULL;
    if (!strcmp(cmd, "health") || !strcmp(cmd, "health-watch")) {
        Grpc__Health__V1__HealthCheckRequest q = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
        q.service = (char *)(a3 ? a3 : "");
        req = pack(&q.base, &req_len);
        stream = !strcmp(cmd, "health-watch");
        method = stream ? "/grpc.health.v1.Health/Watch" : "/grpc.health.v1.Health/Check";
    } else if (!strcmp(cmd, "submit") && a3) {
        size_t n = 0;
        spec = read_file(a3, &n);
        if (!spec) {
            fprintf(stderr, "obrpc: cannot read %s\n", a3);
            return 100;
        }
        Onebit__V1__SubmitJobRequest q = ONEBIT__V1__SUBMIT_JOB_REQUEST__INIT;
        q.spec = spec;
        q.world_size = a4 ? atoi(a4) : 0;
        q.max_restarts = a5 ? atoi(a5) : -1;
        req = pack(&q.base, &req_len);
        method = "/onebit.v1.JobService/SubmitJob";
    } else if ((!strcmp(cmd, "get") || !strcmp(cmd, "cancel") || !strcmp(cmd, "checkpoints")) &&
               a3) {
        Onebit__V1__GetJobRequest q = ONEBIT__V1__GET_JOB_REQUEST__INIT; /* same layout: id = 1 */
        q.id = (char *)a3;
        req = pack(&q.base, &req_len);
        method = !strcmp(cmd, "get")      ? "/onebit.v1.JobService/GetJob"
                 : !strcmp(cmd, "cancel") ? "/onebit.v1.JobService/CancelJob"
                                          : "/onebit.v1.JobService/ListCheckpoints";
    } else if (!strcmp(cmd, "watch") && a3) {
        Onebit__V1__WatchJobRequest q = ONEBIT__V1__WATCH_JOB_REQUEST__INIT;
        q.id = (char *)a3;
        q.after_seq = a4 ? atoll(a4) : 0;
        req = pack(&q.base, &req_len);
        method = "/onebit.v1.JobService/WatchJob";
        stream = 1;
    } else if (!strcmp(cmd, "list")) {
        Onebit__V1__ListJobsRequest q = ONEBIT__V1__LIST_JOBS_REQUEST__INIT;
        q.state = a3 ? atoi(a3) : 0;
        q.page_size = a4 ? atoi(a4) : 0;
        q.page_token = (char *)(a5 ? a5 : "");
        req = pack(&q.base, &req_len);
        method = "/onebit.v1.JobService/ListJobs";
    } else if (!strcmp(cmd, "raw") && a3 && a4) {
        method = a3;
        req_len = strlen(a4) / 2;
        req = malloc(req_len + 1);
        for (size_t i = 0; i < req_len; i++) {
            unsigned v;
            sscanf(a4 + 2 * i, "%2x", &v);
            req[i] = (uint8_t)v;
        }
    } else {
        fprintf(stderr, "obrpc: unknown command or missing argument: %s\n", cmd);
        return 100;
    }
    ob_rpc_client *c = NULL;
    ob_err err;
    if (ob_rpc_client_create(&c, addr, getenv("ONEBIT_TOKEN"), &err)) {
        fprintf(stderr, "obrpc: %s\n", err.msg);
        return 100;
    }
    ob_rpc_result res;
    ob_status rc;
    int timeout = getenv("OBRPC_TIMEOUT_MS") ? atoi(getenv("OBRPC_TIMEOUT_MS")) : 10000;
    if (stream) {
        int count = 0;
        rc = ob_rpc_server_stream(c, method, req, req_len,
                                  !strcmp(cmd, "watch") ? print_event : print_health,
                                  !strcmp(cmd, "watch") ? NULL : &count, &res, timeout, &err);
    } else {
        void *resp = NULL;
        size_t resp_len = 0;
        rc = ob_rpc_unary(c, method, req, req_len, &resp, &resp_len, &res, timeout, &err);
        if (rc == OB_OK && res.code == 0) print_answer(cmd, resp, resp_len);
        free(resp);
    }
    free(req);
    free(spec);
    ob_rpc_client_destroy(c);
    if (rc) {
        fprintf(stderr, "obrpc: %s\n", err.msg);
        return 100;
    }
    fprintf(stderr, "status %d %s\n", res.code, res.details);
    return res.code;
}
