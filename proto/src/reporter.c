/* ob_reporter: a worker's progress reports sent to the coordinator's WorkerService. */
#include "onebit/report.h"
#include "onebit/rpc_client.h"
#include "onebit/v1/worker.pb-c.h"
#include "onebit/base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ob_reporter {
    ob_rpc_client *client;
    char job_id[OB_JOB_ID_LEN];
    int failures;
};

ob_status ob_report_token_read(const char *path, char *out, size_t cap, ob_err *err)
{
    if (cap < 2) return OB_ERR(err, OB_ERR_INVALID_ARG, "report credential: no room");
    out[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return OB_ERR(err, OB_ERR_IO, "report credential %s: %s", path, strerror(errno));
    size_t n = fread(out, 1, cap - 1, f);
    int more = fgetc(f) != EOF, bad = ferror(f);
    fclose(f);
    if (bad) return OB_ERR(err, OB_ERR_IO, "report credential %s: read error", path);
    if (n > 0 && out[n - 1] == '\n') n--;
    out[n] = '\0';
    int ok = n > 0 && !more;
    for (size_t i = 0; ok && i < n; i++)
        ok = out[i] > ' ' && out[i] < 0x7f;
    if (!ok) {
        memset(out, 0, cap);
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "report credential %s: expected 1 to %zu printable characters", path,
                      cap - 2);
    }
    return OB_OK;
}

ob_status ob_reporter_create(ob_reporter **out, const char *target, const char *job_id,
                             const char *token, ob_err *err)
{
    *out = NULL;
    if (!job_id || !job_id[0] || strlen(job_id) >= OB_JOB_ID_LEN)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "reporter: a job id of 1 to %d characters",
                      OB_JOB_ID_LEN - 1);
    ob_reporter *r = calloc(1, sizeof *r);
    if (!r) return OB_ERR(err, OB_ERR_NOMEM, "allocating a reporter");
    ob_strlcpy(r->job_id, job_id, sizeof r->job_id);
    char from_file[512];
    const char *file = getenv("ONEBIT_REPORT_TOKEN_FILE");
    if (!token) token = getenv("ONEBIT_REPORT_TOKEN");
    if (!token && file && file[0]) {
        ob_status rc = ob_report_token_read(file, from_file, sizeof from_file, err);
        if (rc) {
            free(r);
            return rc;
        }
        token = from_file;
    }
    ob_status rc = ob_rpc_client_create(&r->client, target, token, err);
    memset(from_file, 0, sizeof from_file);
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

ob_status ob_reporter_send(ob_reporter *r, const ob_report *rep, int *cancel_requested, ob_err *err)
{
    if (cancel_requested) *cancel_requested = 0;
    ob_report mine = *rep;
    ob_strlcpy(mine.job_id, r->job_id, sizeof mine.job_id);
    uint8_t *buf = NULL;
    size_t len = 0;
    ob_status rc = ob_report_pack(&mine, &buf, &len, err);
    if (rc) {
        r->failures++;
        return rc;
    }
    void *resp = NULL;
    size_t resp_len = 0;
    ob_rpc_result res;
    rc = ob_rpc_unary(r->client, "/onebit.v1.WorkerService/ReportProgress", buf, len, &resp,
                      &resp_len, &res, 1000, err);
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
