/* Job states by name, and copying and freeing of job records. */
#include "onebit/job.h"
#include "svc_internal.h"

#include <stdlib.h>
#include <strings.h>
#include <time.h>

static const char *const state_names[OB_JOB_STATE_COUNT] = {
    "UNSPECIFIED", "PENDING", "RUNNING", "RESTARTING", "SUCCEEDED", "FAILED", "CANCELLED",
};

const char *ob_job_state_name(ob_job_state s)
{
    if ((int)s < 0 || (int)s >= OB_JOB_STATE_COUNT) return "UNSPECIFIED";
    return state_names[s];
}

ob_status ob_job_state_parse(const char *text, ob_job_state *out)
{
    if (!text) return OB_ERR_INVALID_ARG;
    if (!strncasecmp(text, "JOB_STATE_", 10)) text += 10;
    for (int i = 0; i < OB_JOB_STATE_COUNT; i++) {
        if (!strcasecmp(text, state_names[i])) {
            *out = (ob_job_state)i;
            return OB_OK;
        }
    }
    return OB_ERR_INVALID_ARG;
}

int ob_job_state_final(ob_job_state s)
{
    return s == OB_JOB_SUCCEEDED || s == OB_JOB_FAILED || s == OB_JOB_CANCELLED;
}

void ob_job_clear(ob_job *job)
{
    if (!job) return;
    free(job->spec_json);
    free(job->attempts);
    memset(job, 0, sizeof *job);
}

ob_status ob_job_copy(ob_job *dst, const ob_job *src, ob_err *err)
{
    *dst = *src;
    dst->spec_json = NULL;
    dst->attempts = NULL;
    if (src->spec_json && !(dst->spec_json = strdup(src->spec_json))) goto fail;
    if (src->n_attempts) {
        dst->attempts = malloc(src->n_attempts * sizeof *dst->attempts);
        if (!dst->attempts) goto fail;
        memcpy(dst->attempts, src->attempts, src->n_attempts * sizeof *dst->attempts);
    }
    return OB_OK;
fail:
    ob_job_clear(dst);
    return OB_ERR(err, OB_ERR_NOMEM, "copying job %s", src->id);
}

void ob_job_array_free(ob_job *jobs, size_t n)
{
    if (!jobs) return;
    for (size_t i = 0; i < n; i++)
        ob_job_clear(&jobs[i]);
    free(jobs);
}

int64_t ob_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
