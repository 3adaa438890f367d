/* Prometheus text exposition of the service's state: jobs by state, slots, restarts, reports,
 * steps, bytes sent against their fp32 equivalent, and per running job its step, throughput,
 * bytes and checkpoint age. */
#include "onebit/service.h"
#include "onebit/store.h"
#include "service_internal.h"
#include "svc_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- metrics ------------------------------------------------------------------------------ */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t ncap = (b->cap + (size_t)n + 1) * 2;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
}

/* What the metrics need of a running job. */
typedef struct job_gauge {
    char id[OB_JOB_ID_LEN];
    ob_progress p;
    int64_t ckpt_ms;
} job_gauge;

static void per_job_family(sbuf *b, const char *name, const char *help, const job_gauge *g,
                           size_t n, int64_t now, int which)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (size_t i = 0; i < n; i++) {
        const ob_progress *p = &g[i].p;
        switch (which) {
        case 0:
            sb_printf(b, "%s{job=\"%s\"} %" PRId64 "\n", name, g[i].id, p->step);
            break;
        case 1:
            sb_printf(b, "%s{job=\"%s\"} %.6g\n", name, g[i].id, p->samples_per_s);
            break;
        case 2:
            sb_printf(b, "%s{job=\"%s\"} %" PRId64 "\n", name, g[i].id, p->bytes_sent);
            break;
        case 3:
            sb_printf(b, "%s{job=\"%s\"} %" PRId64 "\n", name, g[i].id, p->bytes_uncompressed);
            break;
        default:
            if (g[i].ckpt_ms > 0)
                sb_printf(b, "%s{job=\"%s\"} %.3f\n", name, g[i].id,
                          (double)(now - g[i].ckpt_ms) / 1000.0);
        }
    }
}

static void counter(sbuf *b, const char *name, const char *help, int64_t v)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %" PRId64 "\n", name, help, name, name, v);
}

ob_status ob_service_metrics(ob_service *svc, char **out, ob_err *err)
{
    *out = NULL;
    int64_t counts[OB_JOB_STATE_COUNT];
    int64_t restarts = 0, steps = 0, sent = 0, unc = 0;
    job_gauge *g = NULL;
    size_t ng = 0, capg = 0;
    int64_t now = ob_now_ms();
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_count_states(svc->store, counts, err);
    int used = ob__svc_used_slots(svc);
    int64_t reports = svc->reports;
    int64_t after = 0;
    int more = 1;
    while (rc == OB_OK && more) {
        ob_job *jobs = NULL;
        size_t n = 0;
        rc = ob_store_list_jobs(svc->store, OB_JOB_UNSPECIFIED, after, 200, &jobs, &n, &more, err);
        for (size_t i = 0; rc == OB_OK && i < n; i++) {
            const ob_job *j = &jobs[i];
            after = j->seq;
            restarts += j->restarts;
            steps += j->progress.step;
            sent += j->progress.bytes_sent;
            unc += j->progress.bytes_uncompressed;
            if (j->state != OB_JOB_RUNNING) continue;
            if (ng == capg) {
                size_t ncap = capg ? 2 * capg : 16;
                job_gauge *ngp = realloc(g, ncap * sizeof *ngp);
                if (!ngp) {
                    rc = OB_ERR(err, OB_ERR_NOMEM, "metrics");
                    break;
                }
                g = ngp;
                capg = ncap;
            }
            ob__strlcpy(g[ng].id, j->id, sizeof g[ng].id);
            g[ng].p = j->progress;
            g[ng].ckpt_ms = j->ckpt_ms;
            ng++;
        }
        ob_job_array_free(jobs, n);
    }
    pthread_mutex_unlock(&svc->mu);
    sbuf b = {.p = malloc(4096), .cap = 4096};
    if (rc || !b.p) {
        free(g);
        free(b.p);
        return rc ? rc : OB_ERR(err, OB_ERR_NOMEM, "metrics");
    }
    b.p[0] = '\0';
    sb_printf(&b, "# HELP onebit_jobs Jobs in the store by state.\n# TYPE onebit_jobs gauge\n");
    for (int s = 1; s < OB_JOB_STATE_COUNT; s++)
        sb_printf(&b, "onebit_jobs{state=\"%s\"} %" PRId64 "\n", ob_job_state_name((ob_job_state)s),
                  counts[s]);
    sb_printf(&b,
              "# HELP onebit_slots Worker slots (ranks) of this coordinator.\n"
              "# TYPE onebit_slots gauge\nonebit_slots %d\n",
              svc->cfg.slots);
    sb_printf(&b,
              "# HELP onebit_slots_used Ranks running now.\n"
              "# TYPE onebit_slots_used gauge\nonebit_slots_used %d\n",
              used);
    counter(&b, "onebit_job_restarts_total", "Restarts of every job.", restarts);
    counter(&b, "onebit_worker_reports_total",
            "Progress reports received over WorkerService since the coordinator started.", reports);
    counter(&b, "onebit_steps_total", "Training steps reached, summed over jobs.", steps);
    counter(&b, "onebit_bytes_sent_total", "Bytes sent per rank, summed over jobs.", sent);
    counter(&b, "onebit_bytes_uncompressed_total",
            "What an fp32 ring allreduce would have sent for the same steps.", unc);
    per_job_family(&b, "onebit_job_step", "Step of each running job.", g, ng, now, 0);
    per_job_family(&b, "onebit_job_samples_per_second", "Throughput of each running job.", g, ng,
                   now, 1);
    per_job_family(&b, "onebit_job_bytes_sent", "Bytes per rank sent by each running job.", g, ng,
                   now, 2);
    per_job_family(&b, "onebit_job_bytes_uncompressed",
                   "fp32 ring allreduce equivalent of onebit_job_bytes_sent.", g, ng, now, 3);
    per_job_family(&b, "onebit_job_checkpoint_age_seconds",
                   "Seconds since each running job's newest checkpoint.", g, ng, now, 4);
    free(g);
    if (b.oom) {
        free(b.p);
        return OB_ERR(err, OB_ERR_NOMEM, "metrics");
    }
    *out = b.p;
    return OB_OK;
}
