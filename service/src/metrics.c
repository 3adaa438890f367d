/* Prometheus text exposition of the service's state: jobs by state, slots, restarts, reports,
 * steps, bytes sent against their fp32 equivalent, and per running job its step, throughput,
 * bytes, losses, rewarms, checkpoint age and, in the compression phase, its compression health.
 *
 * The process-wide counters (*_total) only go up for the life of the process, as Prometheus's
 * rate() needs: each scrape adds what every job did since the previous scrape (a job's step or
 * bytes going down, as when an attempt resumes from a checkpoint, count from there on), and a
 * deleted job's share stays in the totals. */
#include "onebit/service.h"
#include "onebit/store.h"
#include "service_internal.h"
#include "onebit/base.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A gauge family with one sample per running job. value() gives the job's sample; it returns 0
 * when the job has none to give (no checkpoint yet, say). */
typedef enum { AS_INTEGER, AS_REAL, AS_SECONDS } sample_format;

typedef struct job_family {
    const char *name, *help;
    const char *type; /* "gauge" or "counter" */
    sample_format format;
    int (*value)(const job_gauge *g, int64_t now_ms, double *v);
} job_family;

static int job_step(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = (double)g->p.step;
    return 1;
}

static int job_samples_per_s(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = g->p.samples_per_s;
    return 1;
}

static int job_loss(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = g->p.loss;
    return g->p.step > 0;
}

static int job_eval_loss(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = g->p.eval_loss;
    return g->p.eval_step > 0;
}

static int job_bytes_sent(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = (double)g->p.bytes_sent;
    return 1;
}

static int job_bytes_uncompressed(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = (double)g->p.bytes_uncompressed;
    return 1;
}

static int job_checkpoint_age(const job_gauge *g, int64_t now_ms, double *v)
{
    *v = (double)(now_ms - g->ckpt_ms) / 1000.0;
    return g->ckpt_ms > 0;
}

/* Compression health: only for jobs in the compression phase of 1-bit Adam. */
static int in_compression(const job_gauge *g)
{
    return !strcmp(g->p.phase, "compression");
}

static int job_worker_error_ratio(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = g->p.worker_error_ratio;
    return in_compression(g);
}

static int job_server_error_ratio(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = g->p.server_error_ratio;
    return in_compression(g);
}

static int job_zero_momentum_fraction(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = g->p.zero_momentum_fraction;
    return in_compression(g);
}

static int job_rewarms(const job_gauge *g, int64_t now_ms, double *v)
{
    (void)now_ms;
    *v = (double)g->p.rewarms;
    return 1;
}

static const job_family job_families[] = {
    {"onebit_job_step", "Step of each running job.", "gauge", AS_INTEGER, job_step},
    {"onebit_job_samples_per_second", "Throughput of each running job.", "gauge", AS_REAL,
     job_samples_per_s},
    {"onebit_job_loss", "Training loss of each running job at its last logged step.", "gauge",
     AS_REAL, job_loss},
    {"onebit_job_eval_loss", "Evaluation loss of each running job at its latest evaluation.",
     "gauge", AS_REAL, job_eval_loss},
    {"onebit_job_sent_bytes", "Bytes per rank sent by each running job.", "gauge", AS_INTEGER,
     job_bytes_sent},
    {"onebit_job_uncompressed_bytes", "fp32 ring allreduce equivalent of onebit_job_sent_bytes.",
     "gauge", AS_INTEGER, job_bytes_uncompressed},
    {"onebit_job_checkpoint_age_seconds", "Seconds since each running job's newest checkpoint.",
     "gauge", AS_SECONDS, job_checkpoint_age},
    {"onebit_job_worker_error_ratio",
     "||e_worker||/||m||: worker error-feedback norm over momentum norm, last logged step of each "
     "running job in the compression phase.",
     "gauge", AS_REAL, job_worker_error_ratio},
    {"onebit_job_server_error_ratio",
     "||e_server||/||m||: server error norm over momentum norm, last logged step of each running "
     "job in the compression phase.",
     "gauge", AS_REAL, job_server_error_ratio},
    {"onebit_job_zero_momentum_fraction",
     "Fraction of momentum coordinates exactly zero, last logged step of each running job in the "
     "compression phase.",
     "gauge", AS_REAL, job_zero_momentum_fraction},
    {"onebit_job_rewarms_total",
     "Rewarms of each running job (a non-finite loss after the freeze, rolled back to the newest "
     "checkpoint and re-warmed), over all its attempts.",
     "counter", AS_INTEGER, job_rewarms},
};

static void per_job_family(sbuf *b, const job_family *f, const job_gauge *g, size_t n,
                           int64_t now_ms)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
    for (size_t i = 0; i < n; i++) {
        double v;
        if (!f->value(&g[i], now_ms, &v)) continue;
        if (f->format == AS_INTEGER)
            sb_printf(b, "%s{job=\"%s\"} %" PRId64 "\n", f->name, g[i].id, (int64_t)v);
        else
            sb_printf(b, f->format == AS_REAL ? "%s{job=\"%s\"} %.6g\n" : "%s{job=\"%s\"} %.3f\n",
                      f->name, g[i].id, v);
    }
}

static void counter(sbuf *b, const char *name, const char *help, int64_t v)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %" PRId64 "\n", name, help, name, name, v);
}

/* ---- counters that only go up ------------------------------------------------------------- */

/* What a scrape saw of one job. */
typedef struct job_seen {
    int64_t seq, restarts, steps, sent, unc;
} job_seen;

/* The previous scrape's jobs (by seq, ascending: the store lists them so) and the totals. */
struct ob__metrics_memo {
    job_seen *jobs;
    size_t n;
    int64_t restarts, steps, sent, unc;
};

void ob__metrics_free(ob_service *svc)
{
    if (!svc->metrics) return;
    free(svc->metrics->jobs);
    free(svc->metrics);
    svc->metrics = NULL;
}

/* How much a job's value went up since it was `before`: all of it for a new job, nothing when
 * it went down (its next rise counts from there). */
static int64_t rise(int64_t before, int64_t now)
{
    return now > before ? now - before : 0;
}

/* Adds what the jobs in cur (ascending seq) did since the memo's scrape and keeps cur as the
 * memo (it takes cur over). With the service's mutex held. */
static void memo_advance(struct ob__metrics_memo *m, job_seen *cur, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        while (k < m->n && m->jobs[k].seq < cur[i].seq)
            k++;
        job_seen zero = {0}, *old = k < m->n && m->jobs[k].seq == cur[i].seq ? &m->jobs[k] : &zero;
        m->restarts += rise(old->restarts, cur[i].restarts);
        m->steps += rise(old->steps, cur[i].steps);
        m->sent += rise(old->sent, cur[i].sent);
        m->unc += rise(old->unc, cur[i].unc);
    }
    free(m->jobs);
    m->jobs = cur;
    m->n = n;
}

ob_status ob_service_metrics(ob_service *svc, char **out, ob_err *err)
{
    *out = NULL;
    int64_t counts[OB_JOB_STATE_COUNT];
    job_gauge *g = NULL;
    size_t ng = 0, capg = 0;
    job_seen *seen = NULL;
    size_t nseen = 0, capseen = 0;
    int64_t now = ob_wall_ms();
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_count_states(svc->store, counts, err);
    int used = ob__svc_used_slots(svc);
    int64_t reports = svc->reports;
    int64_t after = 0;
    int more = 1;
    while (rc == OB_OK && more) {
        ob_job *jobs = NULL;
        size_t n = 0;
        rc = ob_store_list_jobs(svc->store, OB_JOB_UNSPECIFIED, NULL, after, 200, &jobs, &n, &more,
                                err);
        for (size_t i = 0; rc == OB_OK && i < n; i++) {
            const ob_job *j = &jobs[i];
            after = j->seq;
            if (nseen == capseen) {
                size_t ncap = capseen ? 2 * capseen : 64;
                job_seen *np = realloc(seen, ncap * sizeof *np);
                if (!np) {
                    rc = OB_ERR(err, OB_ERR_NOMEM, "metrics");
                    break;
                }
                seen = np;
                capseen = ncap;
            }
            seen[nseen++] = (job_seen){j->seq, j->restarts, j->progress.step,
                                       j->progress.bytes_sent, j->progress.bytes_uncompressed};
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
            ob_strlcpy(g[ng].id, j->id, sizeof g[ng].id);
            g[ng].p = j->progress;
            g[ng].ckpt_ms = j->ckpt_ms;
            ng++;
        }
        ob_job_array_free(jobs, n);
    }
    if (rc == OB_OK && !svc->metrics && !(svc->metrics = calloc(1, sizeof *svc->metrics)))
        rc = OB_ERR(err, OB_ERR_NOMEM, "metrics");
    struct ob__metrics_memo totals = {0};
    if (rc == OB_OK) {
        memo_advance(svc->metrics, seen, nseen);
        seen = NULL;
        totals = *svc->metrics;
    }
    pthread_mutex_unlock(&svc->mu);
    free(seen);
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
    counter(&b, "onebit_job_restarts_total",
            "Restarts of jobs since the coordinator started (deleted jobs' included).",
            totals.restarts);
    counter(&b, "onebit_worker_reports_total",
            "Progress reports received over WorkerService since the coordinator started.", reports);
    counter(&b, "onebit_steps_total",
            "Training steps taken since the coordinator started, summed over jobs (deleted jobs' "
            "included; steps retaken after a resume count again).",
            totals.steps);
    counter(&b, "onebit_sent_bytes_total",
            "Bytes sent per rank since the coordinator started, summed over jobs.", totals.sent);
    counter(&b, "onebit_uncompressed_bytes_total",
            "What an fp32 ring allreduce would have sent for the same steps.", totals.unc);
    for (size_t i = 0; i < sizeof job_families / sizeof job_families[0]; i++)
        per_job_family(&b, &job_families[i], g, ng, now);
    free(g);
    if (b.oom) {
        free(b.p);
        return OB_ERR(err, OB_ERR_NOMEM, "metrics");
    }
    *out = b.p;
    return OB_OK;
}
