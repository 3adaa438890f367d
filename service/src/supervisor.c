/* The supervisor: a thread that every cfg.tick_ms reads the workers' progress from their logs
 * (when they do not report over WorkerService), reaps ended attempts, enforces the progress
 * timeout and the cancel grace period, and starts PENDING and RESTARTING jobs while slots are
 * free; and the progress reports themselves. All of it with svc->mu held. */
#include "onebit/jobspec.h"
#include "onebit/service.h"
#include "onebit/store.h"
#include "service_internal.h"
#include "onebit/base.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* ---- progress --------------------------------------------------------------------------- */

/* A ratio or fraction from a worker: what is not a finite number >= 0 (a report is input like
 * any other) is kept as 0, and a fraction is at most 1. */
static double health_value(double v, double max)
{
    if (!(v >= 0.0) || !isfinite(v)) return 0.0;
    return v > max ? max : v;
}

/* Applies one progress report to its job. Called with the lock held. */
static ob_status apply_report(ob_service *svc, ob__run *r, const ob_report *rep, ob_err *err)
{
    r->last_progress_ms = ob_wall_ms();
    if (rep->kind == OB_REPORT_START) {
        if (rep->num_params > 0) r->num_params = rep->num_params;
        return OB_OK;
    }
    if (rep->kind == OB_REPORT_SUMMARY || rep->kind == OB_REPORT_PROFILE) return OB_OK;
    ob_job j;
    ob_status rc = ob_store_get_job(svc->store, r->job_id, &j, err);
    if (rc) return rc;
    char msg[OB_JOB_MSG_LEN] = "";
    ob_progress *p = &j.progress;
    if (rep->kind == OB_REPORT_STEP) {
        ob_progress kept = *p;
        *p = rep->progress;
        p->freeze_step = kept.freeze_step;
        p->eval_step = kept.eval_step;
        p->eval_loss = kept.eval_loss;
        p->eval_accuracy = kept.eval_accuracy;
        memcpy(p->warm_start, kept.warm_start, sizeof p->warm_start);
        p->rewarms = kept.rewarms; /* counted here, from the rewarm reports */
        p->worker_error_ratio = health_value(p->worker_error_ratio, INFINITY);
        p->server_error_ratio = health_value(p->server_error_ratio, INFINITY);
        p->zero_momentum_fraction = health_value(p->zero_momentum_fraction, 1.0);
        p->total_steps = r->total_steps;
        /* The worker's own count: it carries on from the checkpoint after a resume. What an
         * fp32 ring allreduce would have sent for as many steps: 2 (N-1)/N * 4 d per step. */
        int n = r->world_size;
        double per_step = n > 1 ? 2.0 * (n - 1) / n * 4.0 * (double)r->num_params : 0.0;
        p->bytes_uncompressed = (int64_t)(per_step * (double)p->step);
        snprintf(msg, sizeof msg, "step %" PRId64 "/%" PRId64 " loss %.6g", p->step, p->total_steps,
                 p->loss);
    } else if (rep->kind == OB_REPORT_FREEZE) {
        p->freeze_step = rep->progress.freeze_step;
        if (p->total_steps > 0 && p->freeze_step >= p->total_steps)
            snprintf(msg, sizeof msg,
                     "variance frozen at step %" PRId64 ", the job's last: no step is compressed",
                     p->freeze_step);
        else
            snprintf(msg, sizeof msg,
                     "variance frozen at step %" PRId64 "; compression phase begins",
                     p->freeze_step);
    } else if (rep->kind == OB_REPORT_EVAL) {
        p->eval_step = rep->progress.step;
        p->eval_loss = rep->eval_loss;
        p->eval_accuracy = rep->eval_accuracy;
        snprintf(msg, sizeof msg, "eval at step %" PRId64 ": loss %.6g, accuracy %.4f",
                 rep->progress.step, rep->eval_loss, rep->eval_accuracy);
    } else if (rep->kind == OB_REPORT_CHECKPOINT && rep->ckpt_failed) {
        snprintf(msg, sizeof msg, "checkpoint of step %" PRId64 " failed: %.400s", rep->ckpt_step,
                 rep->message);
    } else if (rep->kind == OB_REPORT_NOTICE) {
        snprintf(msg, sizeof msg, "%.500s", rep->message);
    } else if (rep->kind == OB_REPORT_REWARM) {
        p->rewarms++;
        snprintf(msg, sizeof msg, "%.500s", rep->message);
    } else if (rep->kind == OB_REPORT_WARM_START) {
        ob_strlcpy(p->warm_start, rep->progress.warm_start, sizeof p->warm_start);
        snprintf(msg, sizeof msg, "%.500s", rep->message);
    } else if (rep->kind == OB_REPORT_RESUME) {
        /* The worker says which checkpoint it took (it skips ones that do not verify). */
        r->start_step = rep->ckpt_step;
        p->step = rep->ckpt_step;
        for (size_t i = 0; i < j.n_attempts; i++) {
            if (j.attempts[i].number != r->attempt) continue;
            j.attempts[i].start_step = rep->ckpt_step;
            ob__svc_put_attempt(svc, j.id, &j.attempts[i], NULL);
        }
        snprintf(msg, sizeof msg, "resumed from step %" PRId64 ": %.400s", rep->ckpt_step,
                 rep->ckpt_path);
    } else if (rep->kind == OB_REPORT_CHECKPOINT) {
        j.ckpt_step = rep->ckpt_step;
        j.ckpt_ms = ob_wall_ms();
        ob_strlcpy(j.ckpt_path, rep->ckpt_path, sizeof j.ckpt_path);
        snprintf(msg, sizeof msg, "checkpoint at step %" PRId64 ": %.400s", j.ckpt_step,
                 j.ckpt_path);
    } else {
        ob_job_clear(&j);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "kind: unknown progress kind %d", (int)rep->kind);
    }
    rc = ob__svc_commit(svc, &j, ob_report_kind_name(rep->kind), msg, err);
    ob_job_clear(&j);
    return rc;
}

ob_status ob_service_report(ob_service *svc, const ob_report *rep, const char *credential,
                            int *cancel_requested, ob_err *err)
{
    if (cancel_requested) *cancel_requested = 0;
    ob_job j;
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_get_job(svc->store, rep->job_id, &j, err);
    if (rc) goto done;
    int cancelling = j.cancel_requested;
    ob_job_clear(&j);
    ob__run *r = ob__svc_find_run(svc, rep->job_id);
    if (!r) {
        rc = OB_ERR(err, OB_ERR_STATE, "job %s has no running attempt", rep->job_id);
        goto done;
    }
    if (credential && !ob_secret_equal(credential, r->report_token)) {
        rc = OB_ERR(err, OB_ERR_UNAUTHENTICATED,
                    "job %s: not the report credential of its current attempt", rep->job_id);
        goto done;
    }
    r->reported = 1;
    if (cancel_requested) *cancel_requested = cancelling;
    rc = apply_report(svc, r, rep, err);
    if (rc == OB_OK) svc->reports++;
done:
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

/* The text of a log line without its rank tag ("[1,0]<stderr>:", "1: "). */
static const char *untagged(const char *l)
{
    return l + ob_log_tag(l, strlen(l), NULL, NULL);
}

/* Remembers the lines that best explain a failure: the workers' own messages (every one starts
 * with "onebit-worker", or "onebit: " from a program; not their warnings, which they carry on
 * after) and mpirun's account of
 * a rank that died or could not start, rather than the banners around them. Progress travels
 * as reports; this is only for the reason an attempt ended. */
static void note_text_line(ob__run *r)
{
    const char *l = untagged(r->line);
    /* A program job's program says why it failed as "onebit: <script> failed ...: <the
     * exception's last line>" (engine/python). */
    int worker = (!strncmp(l, "onebit-worker", 13) && strncmp(l, "onebit-worker: warning:", 23)) ||
                 !strncmp(l, "onebit: ", 8);
    if (worker || strstr(l, "mpirun noticed") || strstr(l, "Executable:") ||
        strstr(l, "No such file"))
        ob_strlcpy(r->worker_error, l, sizeof r->worker_error);
    if (strspn(l, "-= ") != strlen(l)) ob_strlcpy(r->last_text, l, sizeof r->last_text);
}

/* Reads what the workers appended to the log since the last tick; progress lines are applied
 * unless the workers report over WorkerService. */
static void read_log(ob_service *svc, ob__run *r)
{
    if (!r->log) return;
    char buf[8192];
    size_t n;
    clearerr(r->log);
    while ((n = fread(buf, 1, sizeof buf, r->log)) > 0) {
        for (size_t i = 0; i < n; i++) {
            char c = buf[i];
            if (c != '\n') {
                if (r->line_len + 1 < sizeof r->line)
                    r->line[r->line_len++] = c;
                else
                    r->line_overflow = 1;
                continue;
            }
            r->line[r->line_len] = '\0';
            ob_report rep;
            if (!r->line_overflow && ob_report_parse_line(r->line, r->line_len, &rep)) {
                if (!r->reported) {
                    ob_strlcpy(rep.job_id, r->job_id, sizeof rep.job_id);
                    apply_report(svc, r, &rep, NULL);
                }
            } else if (r->line_len > 0) {
                note_text_line(r);
            }
            r->line_len = 0;
            r->line_overflow = 0;
        }
    }
}

/* ---- launching and reaping ---------------------------------------------------------------- */

static ob_status write_file_atomic(const char *path, const char *text, ob_err *err)
{
    char tmp[OB_JOB_PATH_LEN + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return OB_ERR(err, OB_ERR_IO, "creating %s: %s", tmp, strerror(errno));
    int bad = fputs(text, f) < 0 || fputc('\n', f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return OB_ERR(err, OB_ERR_IO, "writing %s: %s", path, strerror(errno));
    }
    return OB_OK;
}

/* The steps of a stored spec: the canonical JSON that submit validated, read by the one spec
 * parser (0 if it no longer parses, which only a damaged store can cause). With engine_only, 0
 * for a program job too: its checkpoints are its own. */
static int64_t spec_steps(const char *spec_json, int engine_only)
{
    ob_jobspec spec;
    if (ob_jobspec_parse(&spec, spec_json, strlen(spec_json), OB_SPEC_JSON, NULL) != OB_OK ||
        (engine_only && ob_jobspec_is_program(&spec)))
        return 0;
    return spec.steps;
}

/* The memory limit of each process of an attempt of j (ob_worker_memory_limit_for), from the
 * service's setting and, for "auto", the job's per-rank estimate (0 when the estimate cannot be
 * made: its data file is gone, which the attempt itself will report; and 0 for device: cuda,
 * whose driver maps host memory the estimate does not know of). */
static uint64_t attempt_memory_limit(const ob_service *svc, const ob_job *j)
{
    int64_t setting = svc->cfg.worker_memory_limit;
    uint64_t estimate = 0;
    if (setting == OB_WORKER_MEMORY_AUTO) {
        ob_jobspec spec;
        ob_memory_estimate est;
        if (ob_jobspec_parse(&spec, j->spec_json, strlen(j->spec_json), OB_SPEC_JSON, NULL) ==
                OB_OK &&
            spec.device != OB_DEVICE_CUDA &&
            ob_jobspec_memory_estimate(&spec, j->world_size, &est, NULL) == OB_OK)
            estimate = est.total;
    }
    return ob_worker_memory_limit_for(setting, estimate);
}

static int64_t backoff_ms(const ob_service *svc, int restarts)
{
    int64_t d = svc->cfg.backoff_ms;
    for (int i = 1; i < restarts && d < svc->cfg.backoff_max_ms; i++)
        d *= 2;
    return d < svc->cfg.backoff_max_ms ? d : svc->cfg.backoff_max_ms;
}

/* When a job's deadline passes: its first start plus its limit; 0 for none (or not started). */
static int64_t deadline_at(const ob_job *j)
{
    return j->deadline_ms > 0 && j->started_ms > 0 ? j->started_ms + j->deadline_ms : 0;
}

/* The message of a job ended by its deadline. */
static void deadline_message(const ob_job *j, char *msg, size_t cap)
{
    char limit[32];
    ob_duration_format(j->deadline_ms, limit, sizeof limit);
    if (j->ckpt_step > 0)
        snprintf(msg, cap,
                 "deadline exceeded: not done %s after its first start; stopped at step %" PRId64
                 "; last checkpoint: step %" PRId64,
                 limit, j->progress.step, j->ckpt_step);
    else
        snprintf(msg, cap,
                 "deadline exceeded: not done %s after its first start; stopped at step %" PRId64,
                 limit, j->progress.step);
}

/* Ends a failed attempt's job: restart after a backoff while restarts are left, else FAILED;
 * with the attempt's record a (NULL: none) in the same transaction. */
static ob_status retry_or_fail(ob_service *svc, ob_job *j, const char *reason, const ob_attempt *a,
                               ob_err *err)
{
    char msg[OB_JOB_MSG_LEN];
    if (j->restarts < j->max_restarts) {
        j->restarts++;
        int64_t delay = backoff_ms(svc, j->restarts);
        j->next_attempt_ms = ob_wall_ms() + delay;
        snprintf(msg, sizeof msg, "%.300s; restart %d of %d in %.1f s from the newest checkpoint",
                 reason, j->restarts, j->max_restarts, (double)delay / 1000.0);
        return ob__svc_transition_attempt(svc, j, OB_JOB_RESTARTING, msg, a, err);
    }
    snprintf(msg, sizeof msg, "%.400s; no restarts left", reason);
    return ob__svc_transition_attempt(svc, j, OB_JOB_FAILED, msg, a, err);
}

static void finish_attempt(ob_service *svc, ob__run *r, const ob_launch_exit *ex);

static ob_status launch(ob_service *svc, ob_job *j, ob_err *err)
{
    char dir[OB_JOB_PATH_LEN], spec_path[OB_JOB_PATH_LEN], log_path[OB_JOB_PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s", svc->jobs_dir, j->id);
    ob__svc_job_path(svc, j->id, "spec.json", spec_path, sizeof spec_path);
    ob__svc_job_path(svc, j->id, "worker.log", log_path, sizeof log_path);
    /* The paths the spec names, checked again now and pinned: a link swapped while the job
     * waited must not lead its workers elsewhere. A path that no longer passes fails the job. */
    char problem[OB_JOB_MSG_LEN - 64], why[OB_JOB_MSG_LEN];
    char *pinned = NULL;
    if (ob__svc_pin_paths(svc, j->id, j->spec_json, &pinned, problem, sizeof problem) != OB_OK) {
        if (!problem[0]) return OB_ERR(err, OB_ERR_NOMEM, "pinning the spec's paths");
        snprintf(why, sizeof why, "not launched: %s", problem);
        return ob__svc_transition(svc, j, OB_JOB_FAILED, why, err);
    }
    ob_status rc = ob__svc_mkdirs(dir, err);
    if (rc == OB_OK) rc = write_file_atomic(spec_path, pinned, err);
    free(pinned);
    if (rc) return rc;

    ob_checkpoint_info ck;
    int64_t start_step = ob__svc_newest_checkpoint(svc, j->id, &ck) == 0 ? ck.step : 0;
    int number = (int)j->n_attempts + 1;
    int resume = j->n_attempts > 0;

    ob__run *r = calloc(1, sizeof *r);
    if (!r) return OB_ERR(err, OB_ERR_NOMEM, "allocating an attempt");
    ob_strlcpy(r->job_id, j->id, sizeof r->job_id);
    r->attempt = number;
    r->world_size = j->world_size;
    r->start_step = resume ? start_step : 0;
    r->total_steps = spec_steps(j->spec_json, 0);
    r->memory_limit = attempt_memory_limit(svc, j);
    r->started_ms = r->last_progress_ms = ob_wall_ms();
    FILE *lf = fopen(log_path, "a");
    if (lf) {
        char mem[64] = "";
        if (r->memory_limit)
            snprintf(mem, sizeof mem, ", memory limit %llu MiB per process",
                     (unsigned long long)(r->memory_limit >> 20));
        fprintf(lf, "== onebitd: attempt %d of job %s: %d ranks%s%s\n", number, j->id,
                j->world_size, resume ? ", resuming" : "", mem);
        fclose(lf);
    }
    r->log = fopen(log_path, "re"); /* not inherited by the workers */
    if (r->log) fseek(r->log, 0, SEEK_END);

    if ((rc = ob_random_hex(r->report_token, 32, err))) {
        OB_WRAP(err, rc, "an attempt credential");
        ob__svc_free_run(r);
        return rc;
    }
    ob_launch_req req = {
        .report_token = r->report_token,
        .job_id = j->id,
        .attempt = number,
        .world_size = j->world_size,
        .spec_path = spec_path,
        .checkpoint_dir = svc->ckpt_dir,
        .resume = resume,
        .log_path = log_path,
        .report_addr = svc->report_addr,
        .memory_limit = r->memory_limit,
    };
    ob_attempt a = {.number = number, .started_ms = r->started_ms, .start_step = r->start_step};
    /* Write ahead: the job is RUNNING with this attempt open in the store before any process
     * exists. A coordinator killed from here on finds the attempt open when it starts again and
     * stops whatever was started (by spec path) before it launches the next one; killed before
     * the transition, nothing was started. */
    if (j->started_ms == 0) j->started_ms = r->started_ms;
    r->deadline_at_ms = deadline_at(j);
    char msg[OB_JOB_MSG_LEN];
    if (resume)
        snprintf(msg, sizeof msg, "attempt %d: %d ranks, resuming from step %" PRId64, number,
                 j->world_size, r->start_step);
    else
        snprintf(msg, sizeof msg, "attempt %d: %d ranks", number, j->world_size);
    /* The job and its open attempt in one commit, or nothing (and no process). */
    rc = ob__svc_transition_attempt(svc, j, OB_JOB_RUNNING, msg, &a, err);
    if (rc) {
        ob__svc_free_run(r);
        return rc;
    }
    ob_err lerr;
    ob_err_clear(&lerr);
    rc = svc->cfg.launcher->ops->start(svc->cfg.launcher, &req, &r->h, &lerr);
    r->next = svc->runs;
    svc->runs = r;
    if (rc) {
        /* Counts as a failed attempt: recorded, then the restart policy decides; the run stays
         * (ended, no process) until the store holds that. */
        memset(&r->h, 0, sizeof r->h);
        ob_launch_exit ex;
        memset(&ex, 0, sizeof ex);
        ex.done = 1;
        ex.exit_code = -1;
        snprintf(ex.reason, sizeof ex.reason, "launch failed: %.240s", lerr.msg);
        r->launch_failed = 1;
        r->exited = 1;
        r->exit = ex;
        finish_attempt(svc, r, &ex);
        return OB_OK;
    }
    a.pgid = r->h.pgid;
    ob_strlcpy(a.ext_id, r->h.ext_id, sizeof a.ext_id);
    r->record = a;
    rc = ob__svc_put_attempt(svc, j->id, &a, err);
    /* Without its process group in the store a restarted coordinator still finds the workers
     * by their spec path; the supervisor writes it again when it can. */
    r->record_unsaved = rc != OB_OK;
    if (rc == OB_OK && a.ext_id[0]) {
        const char *kind = svc->cfg.launcher->ops->ext_id_kind;
        snprintf(msg, sizeof msg, "attempt %d: %s %s", number, kind ? kind : "id", a.ext_id);
        rc = ob__svc_commit(svc, j, "attempt", msg, err);
    }
    return rc;
}

ob_status ob__svc_adopt(ob_service *svc, const ob_job *j, const ob_attempt *a,
                        const ob_launch_handle *h, ob_err *err)
{
    char log_path[OB_JOB_PATH_LEN];
    ob__svc_job_path(svc, j->id, "worker.log", log_path, sizeof log_path);
    ob__run *r = calloc(1, sizeof *r);
    if (!r) return OB_ERR(err, OB_ERR_NOMEM, "allocating an attempt");
    ob_strlcpy(r->job_id, j->id, sizeof r->job_id);
    r->attempt = a->number;
    r->world_size = j->world_size;
    r->start_step = a->start_step;
    r->total_steps = spec_steps(j->spec_json, 0);
    r->started_ms = a->started_ms;
    r->last_progress_ms = ob_wall_ms();
    r->deadline_at_ms = deadline_at(j);
    r->h = *h;
    r->log = fopen(log_path, "re");
    if (r->log) fseek(r->log, 0, SEEK_END);
    ob_status rc = ob_random_hex(r->report_token, 32, err);
    if (rc) {
        ob__svc_free_run(r);
        return OB_WRAP(err, rc, "an attempt credential");
    }
    r->next = svc->runs;
    svc->runs = r;
    return OB_OK;
}

/* The attempt of r has ended: record why, then finish, restart or fail its job, the attempt's
 * end and the job's transition in one commit. When the store cannot take it, r stays on the list
 * (ended, holding its slots) and the next try comes after a backoff (100 ms doubling to 5 s):
 * a job never stays RUNNING in the store once its processes are gone. */
static void finish_attempt(ob_service *svc, ob__run *r, const ob_launch_exit *ex)
{
    ob_launcher *l = svc->cfg.launcher;
    if (!r->exited) {
        read_log(svc, r);
        ob__svc_log_note(svc, r, ob_wall_ms(), 1);
        /* mpirun is gone; no rank of the attempt may outlive it. */
        if (l->ops->alive(l, &r->h)) l->ops->signal(l, &r->h, SIGKILL, NULL);
        r->exited = 1;
        r->exit = *ex;
    }
    ob_job j;
    ob_err ferr;
    ob_err_clear(&ferr);
    ob_status rc = ob_store_get_job(svc->store, r->job_id, &j, &ferr);
    if (rc == OB_ERR_NOT_FOUND) {
        ob__svc_unlink_run(svc, r);
        return;
    }
    if (rc) goto retry;
    char status[64], reason[OB_JOB_MSG_LEN];
    if (ex->term_signal)
        snprintf(status, sizeof status, "killed by signal %d", ex->term_signal);
    else
        snprintf(status, sizeof status, "exit code %d", ex->exit_code);
    int success = !r->launch_failed && ex->exit_code == 0 && !r->stop_reason[0];
    /* The last checkpoint is the newest that verifies: a higher-numbered directory that does
     * not (damaged, or put there) is not what the job would resume from. */
    ob_checkpoint_info ck;
    int have_ck = ob__svc_newest_checkpoint(svc, j.id, &ck) == 0;
    /* Exit code 0 is not proof that a built-in model's job is done: srun exits 0 when its step
     * fails to launch, and ranks stopped by a signal the service did not send checkpoint and exit
     * 0. Such a job has written the checkpoint of its last step; without it the attempt failed. */
    int64_t last_step = success && !j.cancel_requested ? spec_steps(j.spec_json, 1) : 0;
    int unfinished = last_step > 0 && (!have_ck || ck.step < last_step);
    /* The listing may lag the directory on a shared file system (service_internal.h): the last
     * step's checkpoint is looked up by name before the attempt is called unfinished. */
    ob_checkpoint_info last;
    if (unfinished && ob__svc_checkpoint_at(svc, j.id, last_step, &last) == 0) {
        ck = last;
        have_ck = 1;
        unfinished = 0;
    }
    if (unfinished) success = 0;
    char newest[32] = "none";
    if (have_ck) snprintf(newest, sizeof newest, "step %" PRId64, ck.step);
    /* The worker's deterministic statuses (2, 3, 4; 5 under a memory limit): the same spec,
     * data and checkpoint give the same failure again. */
    ob_exit_verdict v;
    ob_worker_exit_judge(ex->exit_code, ex->term_signal, r->memory_limit, &v);
    if (r->launch_failed)
        ob_strlcpy(reason, ex->reason, sizeof reason);
    else if (success)
        snprintf(reason, sizeof reason, "completed");
    else if (unfinished)
        snprintf(reason, sizeof reason,
                 "the workers exited with code 0 without the checkpoint of their last step, "
                 "%" PRId64 " (newest: %s); the launch may have failed: %.200s",
                 last_step, newest, r->last_text[0] ? r->last_text : "no output");
    else if (r->stop_reason[0])
        snprintf(reason, sizeof reason, "%.200s (%s)", r->stop_reason, status);
    else if (ex->reason[0])
        /* The platform's account (a lost node, a time limit) says more than the exit status. */
        snprintf(reason, sizeof reason, "%.300s (%s)", ex->reason, status);
    else if (v.cause[0])
        snprintf(reason, sizeof reason, "%.180s (%s): %.240s", v.cause, status,
                 r->worker_error[0] ? r->worker_error : r->last_text);
    else if (r->worker_error[0] || r->last_text[0])
        snprintf(reason, sizeof reason, "workers failed (%s): %.250s", status,
                 r->worker_error[0] ? r->worker_error : r->last_text);
    else
        snprintf(reason, sizeof reason, "workers failed (%s)", status);
    const char *permanent = success || r->stop_reason[0] || r->launch_failed ? NULL
                            : ex->permanent
                                ? "a restart with the same request would end the same way"
                            : v.permanent ? v.why
                                          : NULL;

    ob_attempt *a = j.n_attempts ? &j.attempts[j.n_attempts - 1] : NULL;
    if (a && a->number == r->attempt) {
        if (r->record_unsaved) *a = r->record;
        a->ended_ms = ob_wall_ms();
        a->exit_code = ex->term_signal ? -1 : ex->exit_code;
        ob_strlcpy(a->exit_reason, reason, sizeof a->exit_reason);
    } else {
        a = NULL;
    }
    if (have_ck) {
        j.ckpt_step = ck.step;
        j.ckpt_ms = ck.time_ms;
        ob_strlcpy(j.ckpt_path, ck.path, sizeof j.ckpt_path);
    }

    char msg[OB_JOB_MSG_LEN];
    if (j.cancel_requested) {
        if (j.ckpt_step > 0)
            snprintf(msg, sizeof msg,
                     "cancelled at step %" PRId64 "; last checkpoint: step %" PRId64,
                     j.progress.step, j.ckpt_step);
        else
            snprintf(msg, sizeof msg, "cancelled at step %" PRId64, j.progress.step);
        rc = ob__svc_transition_attempt(svc, &j, OB_JOB_CANCELLED, msg, a, &ferr);
    } else if (r->deadline_hit &&
               !(ex->exit_code == 0 && !ex->term_signal && j.progress.total_steps > 0 &&
                 j.progress.step >= j.progress.total_steps)) {
        deadline_message(&j, msg, sizeof msg);
        rc = ob__svc_transition_attempt(svc, &j, OB_JOB_FAILED, msg, a, &ferr);
    } else if (success || (r->deadline_hit && !r->launch_failed)) {
        /* done all its steps as the deadline came */
        if (j.progress.total_steps) j.progress.step = j.progress.total_steps;
        rc = ob__svc_transition_attempt(svc, &j, OB_JOB_SUCCEEDED, "completed", a, &ferr);
    } else if (permanent) {
        snprintf(msg, sizeof msg, "attempt %d ended: %.250s; not retried: %.200s", r->attempt,
                 reason, permanent);
        rc = ob__svc_transition_attempt(svc, &j, OB_JOB_FAILED, msg, a, &ferr);
    } else if (r->launch_failed) {
        rc = retry_or_fail(svc, &j, reason, a, &ferr);
    } else {
        snprintf(msg, sizeof msg, "attempt %d ended: %.400s", r->attempt, reason);
        rc = retry_or_fail(svc, &j, msg, a, &ferr);
    }
    ob_job_clear(&j);
    if (rc == OB_OK) {
        ob__svc_unlink_run(svc, r);
        return;
    }
retry:
    ob__svc_store_failed(svc, rc, &ferr);
    r->finish_delay_ms = r->finish_delay_ms ? r->finish_delay_ms * 2 : 100;
    if (r->finish_delay_ms > 5000) r->finish_delay_ms = 5000;
    r->finish_at_ms = ob_wall_ms() + r->finish_delay_ms;
}

/* Jobs waiting to restart whose deadline has passed end FAILED now, not after their backoff. */
static void expire_waiting(ob_service *svc)
{
    ob_job *jobs = NULL;
    size_t n = 0;
    int more = 0;
    int64_t now = ob_wall_ms();
    if (ob_store_list_jobs(svc->store, OB_JOB_RESTARTING, NULL, 0, 200, &jobs, &n, &more, NULL))
        return;
    for (size_t i = 0; i < n; i++) {
        int64_t at = deadline_at(&jobs[i]);
        if (!at || now < at || ob__svc_find_run(svc, jobs[i].id)) continue;
        char msg[OB_JOB_MSG_LEN];
        deadline_message(&jobs[i], msg, sizeof msg);
        ob__svc_transition(svc, &jobs[i], OB_JOB_FAILED, msg, NULL);
    }
    ob_job_array_free(jobs, n);
}

/* Starts waiting jobs in submission order while their ranks fit in the free slots; a job that
 * does not fit holds back those behind it, so that large jobs are not starved. */
static void schedule(ob_service *svc)
{
    if (svc->store_down) return;
    expire_waiting(svc);
    int free_slots = svc->cfg.slots - ob__svc_used_slots(svc);
    const ob_job_state order[] = {OB_JOB_RESTARTING, OB_JOB_PENDING};
    int64_t now = ob_wall_ms();
    for (size_t s = 0; s < 2 && free_slots > 0; s++) {
        ob_job *jobs = NULL;
        size_t n = 0;
        int more = 0;
        if (ob_store_list_jobs(svc->store, order[s], NULL, 0, 50, &jobs, &n, &more, NULL)) return;
        for (size_t i = 0; i < n; i++) {
            ob_job *j = &jobs[i];
            if (j->state == OB_JOB_RESTARTING && j->next_attempt_ms > now) continue;
            if (ob__svc_find_run(svc, j->id)) continue;
            if (j->world_size > free_slots) break;
            launch(svc, j, NULL);
            if (ob__svc_find_run(svc, j->id)) free_slots -= j->world_size;
            if (svc->store_down) break; /* nothing is launched that the store cannot record */
        }
        ob_job_array_free(jobs, n);
    }
}

static void tick(ob_service *svc)
{
    ob_launcher *l = svc->cfg.launcher;
    int64_t now = ob_wall_ms();
    ob__run *next;
    ob__svc_check_store(svc, now);
    for (ob__run *r = svc->runs; r; r = next) {
        next = r->next;
        if (r->exited) { /* ended, its end not yet recorded */
            if (now >= r->finish_at_ms) finish_attempt(svc, r, &r->exit);
            continue;
        }
        if (r->record_unsaved && !svc->store_down)
            r->record_unsaved = ob__svc_put_attempt(svc, r->job_id, &r->record, NULL) != OB_OK;
        if (!r->reported) read_log(svc, r);
        ob__svc_log_note(svc, r, now, 0);
        ob_launch_exit ex;
        memset(&ex, 0, sizeof ex);
        if (l->ops->poll(l, &r->h, &ex, NULL) == OB_OK && ex.done) {
            finish_attempt(svc, r, &ex);
            continue;
        }
        if (strcmp(ex.reason, r->platform) != 0) {
            /* What the platform says of a running attempt, when it changes ("PENDING
             * (Resources)"): one event each, so that a job that does not start says why. */
            ob_strlcpy(r->platform, ex.reason, sizeof r->platform);
            ob_job j;
            if (ex.reason[0] && ob_store_get_job(svc->store, r->job_id, &j, NULL) == OB_OK) {
                ob__svc_commit(svc, &j, "notice", ex.reason, NULL);
                ob_job_clear(&j);
            }
        }
        if (r->deadline_at_ms && !r->deadline_hit && now >= r->deadline_at_ms) {
            /* Stopped as a cancel stops it: the workers checkpoint the step they are in. */
            r->deadline_hit = 1;
            if (!r->stop_reason[0])
                ob_strlcpy(r->stop_reason, "deadline exceeded", sizeof r->stop_reason);
            ob_job j;
            if (ob_store_get_job(svc->store, r->job_id, &j, NULL) == OB_OK) {
                char limit[32], msg[96];
                ob_duration_format(j.deadline_ms, limit, sizeof limit);
                snprintf(msg, sizeof msg, "deadline of %s exceeded: stopping the workers", limit);
                ob__svc_commit(svc, &j, "notice", msg, NULL);
                ob_job_clear(&j);
            }
            if (!r->kill_at_ms) {
                l->ops->signal(l, &r->h, SIGTERM, NULL);
                r->kill_at_ms = now + svc->cfg.cancel_grace_ms;
            }
            continue;
        }
        int64_t quiet = now - r->last_progress_ms;
        if (svc->cfg.progress_timeout_ms > 0 && !r->kill_at_ms &&
            quiet > svc->cfg.progress_timeout_ms) {
            snprintf(r->stop_reason, sizeof r->stop_reason, "no progress report for %.1f s",
                     (double)quiet / 1000.0);
            l->ops->signal(l, &r->h, SIGTERM, NULL);
            r->kill_at_ms = now + svc->cfg.cancel_grace_ms;
        } else if (r->kill_at_ms && now >= r->kill_at_ms) {
            l->ops->signal(l, &r->h, SIGKILL, NULL);
            r->kill_at_ms = INT64_MAX; /* once */
        }
    }
    if (!svc->stopping) schedule(svc);
}

/* Retention, once a minute: the jobs that ended before the retention period are deleted. Lock
 * held on entry and return, released meanwhile (deleting takes it per job). */
static void retention(ob_service *svc, int64_t *next_ms)
{
    int64_t now = ob_wall_ms();
    if (svc->cfg.retention_ms <= 0 || now < *next_ms) return;
    *next_ms = now + 60000;
    pthread_mutex_unlock(&svc->mu);
    int deleted = 0;
    ob_err err;
    ob_err_clear(&err);
    ob_status rc = ob_service_prune(svc, now, &deleted, &err);
    pthread_mutex_lock(&svc->mu);
    /* (The deleted jobs are logged by ob_service_prune; a failure is logged here, and tried
     * again at the next round.) */
    if (rc && svc->cfg.on_state) svc->cfg.on_state(svc->cfg.on_state_user, "retention:", err.msg);
}

static void *supervisor_main(void *arg)
{
    ob_service *svc = arg;
    int64_t next_retention_ms = 0;
    pthread_mutex_lock(&svc->mu);
    while (!svc->stopping) {
        retention(svc, &next_retention_ms);
        if (svc->stopping) break;
        tick(svc);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)(svc->cfg.tick_ms % 1000) * 1000000L;
        until.tv_sec += svc->cfg.tick_ms / 1000 + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        /* Woken early by stop; events from other threads do not need a tick. */
        while (!svc->stopping && pthread_cond_timedwait(&svc->cv, &svc->mu, &until) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&svc->mu);
    return NULL;
}

ob_status ob_service_set_report_addr(ob_service *svc, const char *addr, ob_err *err)
{
    char *copy = strdup(addr ? addr : "");
    if (!copy) return OB_ERR(err, OB_ERR_NOMEM, "copying the report address");
    pthread_mutex_lock(&svc->mu);
    free(svc->report_addr);
    svc->report_addr = copy;
    pthread_mutex_unlock(&svc->mu);
    return OB_OK;
}

ob_status ob_service_start(ob_service *svc, ob_err *err)
{
    if (svc->started) return OB_ERR(err, OB_ERR_STATE, "the service is already started");
    int e = pthread_create(&svc->thread, NULL, supervisor_main, svc);
    if (e) return OB_ERR(err, OB_ERR_IO, "starting the supervisor: %s", strerror(e));
    svc->started = 1;
    return OB_OK;
}

void ob_service_stop(ob_service *svc)
{
    if (!svc || !svc->started) return;
    pthread_mutex_lock(&svc->mu);
    svc->stopping = 1;
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
    pthread_join(svc->thread, NULL);
    svc->started = 0;

    /* Ask every attempt to checkpoint and stop; whatever is left after the grace is killed.
     * Attempts a launcher can re-attach to (Slurm jobs) run on: the next coordinator takes
     * them over. */
    ob_launcher *l = svc->cfg.launcher;
    pthread_mutex_lock(&svc->mu);
    ob__run *next;
    for (ob__run *r = svc->runs; r && l->ops->attach; r = next) {
        next = r->next;
        if (!r->h.ext_id[0]) continue;
        ob_job j;
        if (ob_store_get_job(svc->store, r->job_id, &j, NULL) == OB_OK) {
            char msg[OB_JOB_MSG_LEN];
            snprintf(msg, sizeof msg,
                     "coordinator shutting down: %s %s runs on; the next coordinator "
                     "re-attaches to it",
                     l->ops->ext_id_kind ? l->ops->ext_id_kind : "attempt", r->h.ext_id);
            ob__svc_commit(svc, &j, "attempt", msg, NULL);
            ob_job_clear(&j);
        }
        ob__svc_unlink_run(svc, r);
    }
    /* Ended attempts whose end the store did not take yet: one more try, then the next
     * coordinator's recovery closes them. */
    for (ob__run *r = svc->runs; r; r = next) {
        next = r->next;
        if (!r->exited) continue;
        char id[OB_JOB_ID_LEN];
        ob_strlcpy(id, r->job_id, sizeof id);
        finish_attempt(svc, r, &r->exit); /* frees r when it succeeds */
        ob__run *left = ob__svc_find_run(svc, id);
        if (left) ob__svc_unlink_run(svc, left);
    }
    int64_t deadline = ob_wall_ms() + svc->cfg.cancel_grace_ms;
    for (ob__run *r = svc->runs; r; r = r->next)
        l->ops->signal(l, &r->h, SIGTERM, NULL);
    while (svc->runs) {
        int64_t now = ob_wall_ms();
        for (ob__run *r = svc->runs; r; r = next) {
            next = r->next;
            ob_launch_exit ex;
            if (now >= deadline) l->ops->signal(l, &r->h, SIGKILL, NULL);
            if (l->ops->poll(l, &r->h, &ex, NULL) != OB_OK || !ex.done) continue;
            read_log(svc, r);
            if (l->ops->alive(l, &r->h)) l->ops->signal(l, &r->h, SIGKILL, NULL);
            ob_job j;
            if (ob_store_get_job(svc->store, r->job_id, &j, NULL) == OB_OK) {
                ob_attempt *a = j.n_attempts ? &j.attempts[j.n_attempts - 1] : NULL;
                if (a && a->number == r->attempt) {
                    a->ended_ms = ob_wall_ms();
                    a->exit_code = ex.term_signal ? -1 : ex.exit_code;
                    ob_strlcpy(a->exit_reason, "coordinator shut down", sizeof a->exit_reason);
                    ob__svc_put_attempt(svc, j.id, a, NULL);
                }
                /* Stays RUNNING: the next coordinator resumes it from its checkpoint. */
                ob__svc_commit(svc, &j, "attempt", "coordinator shutting down: workers stopped",
                               NULL);
                ob_job_clear(&j);
            }
            ob__svc_unlink_run(svc, r);
        }
        if (svc->runs) {
            pthread_mutex_unlock(&svc->mu);
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&svc->mu);
        }
    }
    pthread_mutex_unlock(&svc->mu);
}
