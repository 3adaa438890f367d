/* ob_reporter: a worker's progress lines sent to the coordinator's WorkerService. */
#include "onebit/report.h"
#include "onebit/rpc_client.h"
#include "onebit/v1/worker.pb-c.h"
#include "svc_internal.h"

#include <stdlib.h>

struct ob_reporter {
    ob_rpc_client *client;
    char job_id[OB_JOB_ID_LEN];
    int failures;
};

ob_status ob_reporter_create(ob_reporter **out, const char *target, const char *job_id,
                             const char *token, ob_err *err)
{
    *out = NULL;
    if (!job_id || !job_id[0] || strlen(job_id) >= OB_JOB_ID_LEN)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "reporter: a job id of 1 to %d characters",
                      OB_JOB_ID_LEN - 1);
    ob_reporter *r = calloc(1, sizeof *r);
    if (!r) return OB_ERR(err, OB_ERR_NOMEM, "allocating a reporter");
    ob__strlcpy(r->job_id, job_id, sizeof r->job_id);
    if (!token) token = getenv("ONEBIT_TOKEN");
    ob_status rc = ob_rpc_client_create(&r->client, target, token, err);
    if (rc) {
        free(r);
        return rc;
    }
    *out = r;
    return OB_OK;
}

void ob_reporter_destroy(ob_reporter *r)
{
    if (!r) return;
    ob_rpc_client_destroy(r->client);
    free(r);
}

int ob_reporter_failures(const ob_reporter *r)
{
    return r->failures;
}

ob_status ob_reporter_send_line(ob_reporter *r, const char *json_line, int *cancel_requested,
                                ob_err *err)
{
    if (cancel_requested) *cancel_requested = 0;
    ob_report rep;
    if (!ob_report_parse_line(json_line, strlen(json_line), &rep)) return OB_OK;
    Onebit__V1__Progress p = ONEBIT__V1__PROGRESS__INIT;
    p.step = rep.progress.step;
    p.loss = rep.progress.loss;
    p.phase = rep.progress.phase;
    p.freeze_step = rep.progress.freeze_step;
    p.samples_per_s = rep.progress.samples_per_s;
    p.bytes_sent = rep.progress.bytes_sent;
    p.lr = rep.progress.lr;
    p.freeze_ratio = rep.progress.freeze_ratio;
    Onebit__V1__Checkpoint ck = ONEBIT__V1__CHECKPOINT__INIT;
    ck.step = rep.ckpt_step;
    ck.path = rep.ckpt_path;
    Onebit__V1__ReportProgressRequest req = ONEBIT__V1__REPORT_PROGRESS_REQUEST__INIT;
    req.job_id = r->job_id;
    req.kind = rep.kind;
    req.progress = &p;
    req.checkpoint = &ck;
    req.num_params = rep.num_params;
    req.world_size = rep.world_size;
    req.eval_loss = rep.eval_loss;
    req.eval_accuracy = rep.eval_accuracy;
    req.message = rep.message;
    req.checkpoint_failed = rep.ckpt_failed;
    size_t len = onebit__v1__report_progress_request__get_packed_size(&req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return OB_ERR(err, OB_ERR_NOMEM, "packing a progress report");
    onebit__v1__report_progress_request__pack(&req, buf);
    void *resp = NULL;
    size_t resp_len = 0;
    ob_rpc_result res;
    ob_status rc = ob_rpc_unary(r->client, "/onebit.v1.WorkerService/ReportProgress", buf, len,
                                &resp, &resp_len, &res, 1000, err);
    free(buf);
    if (rc == OB_OK && res.code != 0)
        rc = OB_ERR(err, OB_ERR_COMM, "ReportProgress: status %d: %s", res.code, res.details);
    if (rc == OB_OK && cancel_requested) {
        Onebit__V1__ReportProgressResponse *a =
            onebit__v1__report_progress_response__unpack(NULL, resp_len, resp);
        if (a) {
            *cancel_requested = a->cancel_requested;
            onebit__v1__report_progress_response__free_unpacked(a, NULL);
        }
    }
    free(resp);
    if (rc) r->failures++;
    return rc;
}
