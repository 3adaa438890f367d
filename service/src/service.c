/* The service functions: creation (the state directory, its lock, the store) and recovery of
 * what an earlier coordinator left, then submit, get, list, cancel, events and checkpoints,
 * called by the API handlers from their own threads. One lock (svc->mu) guards the store, the
 * running attempts and the event counter; the supervisor (supervisor.c) takes it for each of
 * its ticks. The run table, the job records, the store's health and the checkpoints on disk,
 * which the rest of the service shares, are in runs.c. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "onebit/checkpoint.h"
#include "onebit/data.h"
#include "onebit/jobspec.h"
#include "onebit/status_map.h"
#include "onebit/store.h"
#include "service_internal.h"
#include "onebit/base.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void ob_service_config_default(ob_service_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->state_dir = "./var";
    cfg->slots = 4;
    cfg->default_max_restarts = 3;
    cfg->progress_timeout_ms = 0;
    cfg->backoff_ms = 1000;
    cfg->backoff_max_ms = 60000;
    cfg->cancel_grace_ms = 10000;
    cfg->tick_ms = 100;
    cfg->store_min_free_bytes = (int64_t)16 << 20;
}

/* ---- small helpers ------------------------------------------------------------------------ */

static char *path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* ---- create, recover, destroy ------------------------------------------------------------- */

/* Re-attaches to the open attempt a of a RUNNING job j through the launcher, when it can
 * (Slurm jobs run on without their coordinator). 1: watched again; 0: not (stop and relaunch). */
static int reattach(ob_service *svc, ob_job *j, ob_attempt *a, const char *spec_path)
{
    ob_launcher *l = svc->cfg.launcher;
    if (!l->ops->attach || j->cancel_requested) return 0;
    char log_path[OB_JOB_PATH_LEN];
    ob__svc_job_path(svc, j->id, "worker.log", log_path, sizeof log_path);
    ob_launch_handle h;
    memset(&h, 0, sizeof h);
    ob_strlcpy(h.ext_id, a->ext_id, sizeof h.ext_id);
    ob_launch_req req = {.job_id = j->id,
                         .attempt = a->number,
                         .world_size = j->world_size,
                         .spec_path = spec_path,
                         .log_path = log_path};
    ob_err aerr;
    ob_err_clear(&aerr);
    if (l->ops->attach(l, &h, &req, &aerr) != OB_OK) return 0;
    int learnt = !a->ext_id[0];
    ob_strlcpy(a->ext_id, h.ext_id, sizeof a->ext_id);
    if (learnt && ob_store_put_attempt(svc->store, j->id, a, NULL) != OB_OK) return 0;
    if (ob__svc_adopt(svc, j, a, &h, NULL) != OB_OK) return 0;
    char msg[OB_JOB_MSG_LEN];
    snprintf(msg, sizeof msg, "coordinator restarted; re-attached to %s %s (attempt %d)",
             l->ops->ext_id_kind ? l->ops->ext_id_kind : "attempt", h.ext_id, a->number);
    ob__svc_commit(svc, j, "attempt", msg, NULL);
    return 1;
}

/* Jobs an earlier coordinator left RUNNING or RESTARTING: re-attach to their last attempt
 * where the launcher can, else stop what is left of it, close it, and queue the job to resume
 * now (a coordinator restart does not use up one of the job's restarts). */
static ob_status recover(ob_service *svc, ob_err *err)
{
    const ob_job_state states[] = {OB_JOB_RUNNING, OB_JOB_RESTARTING};
    for (size_t s = 0; s < 2; s++) {
        int64_t after = 0;
        int more = 1;
        while (more) {
            ob_job *jobs = NULL;
            size_t n = 0;
            ob_status rc =
                ob_store_list_jobs(svc->store, states[s], NULL, after, 100, &jobs, &n, &more, err);
            if (rc) return rc;
            for (size_t i = 0; i < n && rc == OB_OK; i++) {
                ob_job *j = &jobs[i];
                after = j->seq;
                ob_attempt *a = j->n_attempts ? &j->attempts[j->n_attempts - 1] : NULL;
                char spec_path[OB_JOB_PATH_LEN];
                ob__svc_job_path(svc, j->id, "spec.json", spec_path, sizeof spec_path);
                if (a && a->ended_ms == 0 && states[s] == OB_JOB_RUNNING &&
                    reattach(svc, j, a, spec_path))
                    continue;
                if (a && a->ended_ms == 0) {
                    ob_launch_handle h = {.pid = a->pgid, .pgid = a->pgid};
                    ob_strlcpy(h.ext_id, a->ext_id, sizeof h.ext_id);
                    char log_path[OB_JOB_PATH_LEN];
                    ob__svc_job_path(svc, j->id, "worker.log", log_path, sizeof log_path);
                    ob_launch_req req = {.job_id = j->id,
                                         .attempt = a->number,
                                         .spec_path = spec_path,
                                         .log_path = log_path};
                    svc->cfg.launcher->ops->stop_stale(svc->cfg.launcher, &h, &req);
                    a->ended_ms = ob_wall_ms();
                    a->exit_code = -1;
                    ob_strlcpy(a->exit_reason, "coordinator restarted", sizeof a->exit_reason);
                    rc = ob__svc_put_attempt(svc, j->id, a, err);
                }
                if (rc == OB_OK && j->cancel_requested)
                    /* A cancel that was under way when the coordinator died: its workers are
                     * stopped above; the job ends as the user asked, not relaunched. */
                    rc = ob__svc_transition(
                        svc, j, OB_JOB_CANCELLED,
                        "cancelled (the coordinator restarted while the job was stopping)", err);
                else if (rc == OB_OK && states[s] == OB_JOB_RUNNING)
                    rc = ob__svc_transition(
                        svc, j, OB_JOB_RESTARTING,
                        "coordinator restarted; resuming from the newest checkpoint", err);
            }
            ob_job_array_free(jobs, n);
            if (rc) return rc;
        }
    }
    return OB_OK;
}

/* One coordinator per state directory: two would launch the same jobs. The lock (fcntl, so
 * that it goes away with the process, however it ends) is held until ob_service_destroy. */
static ob_status lock_state_dir(ob_service *svc, ob_err *err)
{
    char path[OB_JOB_PATH_LEN];
    snprintf(path, sizeof path, "%s/onebitd.lock", svc->state_dir);
    svc->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (svc->lock_fd < 0) return OB_ERR(err, OB_ERR_IO, "opening %s: %s", path, strerror(errno));
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fcntl(svc->lock_fd, F_SETLK, &fl) != 0) {
        int e = errno;
        struct flock who = fl;
        int pid = fcntl(svc->lock_fd, F_GETLK, &who) == 0 ? (int)who.l_pid : 0;
        if (e == EACCES || e == EAGAIN)
            return OB_ERR(err, OB_ERR_STATE,
                          "the state directory %s is in use by another onebitd (pid %d)",
                          svc->state_dir, pid);
        return OB_ERR(err, OB_ERR_IO, "locking %s: %s", path, strerror(e));
    }
    return OB_OK;
}

ob_status ob_service_create(ob_service **out, const ob_service_config *cfg, ob_err *err)
{
    ob_status rc;
    *out = NULL;
    if (!cfg->launcher) return OB_ERR(err, OB_ERR_INVALID_ARG, "the service needs a launcher");
    if (cfg->slots <= 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "slots must be positive");
    ob_service *svc = calloc(1, sizeof *svc);
    if (!svc) return OB_ERR(err, OB_ERR_NOMEM, "allocating the service");
    svc->lock_fd = -1;
    pthread_mutex_init(&svc->mu, NULL);
    ob__job_cache_init(&svc->jobs_cache);
    pthread_cond_init(&svc->cv, NULL);
    svc->cfg = *cfg;
    if (svc->cfg.tick_ms <= 0) svc->cfg.tick_ms = 100;
    svc->state_dir = strdup(cfg->state_dir ? cfg->state_dir : "./var");
    svc->report_addr = strdup(cfg->report_addr ? cfg->report_addr : "");
    if (!svc->state_dir || !svc->report_addr) {
        rc = OB_ERR(err, OB_ERR_NOMEM, "allocating the service");
        goto fail;
    }
    /* An absolute state path: the workers' command lines carry it, and a coordinator started
     * again from another directory must recognise them. */
    if ((rc = ob__svc_mkdirs(svc->state_dir, err))) goto fail;
    char *abs = realpath(svc->state_dir, NULL);
    if (!abs) {
        rc = OB_ERR(err, OB_ERR_IO, "state directory %s: %s", svc->state_dir, strerror(errno));
        goto fail;
    }
    free(svc->state_dir);
    svc->state_dir = abs;
    if ((rc = lock_state_dir(svc, err))) goto fail;
    svc->jobs_dir = path_join(svc->state_dir, "jobs");
    svc->ckpt_dir = path_join(svc->state_dir, "checkpoints");
    svc->uploads_dir = path_join(svc->state_dir, "uploads");
    char *db = path_join(svc->state_dir, "jobs.db");
    if (!svc->jobs_dir || !svc->ckpt_dir || !svc->uploads_dir || !db) {
        free(db);
        rc = OB_ERR(err, OB_ERR_NOMEM, "allocating the service");
        goto fail;
    }
    if ((rc = ob__svc_mkdirs(svc->jobs_dir, err)) || (rc = ob__svc_mkdirs(svc->ckpt_dir, err))) {
        free(db);
        goto fail;
    }
    /* Uploads staged by submits a stopped coordinator never finished belong to no job. */
    if ((rc = ob_remove_tree(svc->uploads_dir, err))) {
        free(db);
        goto fail;
    }
    rc = ob_store_open(&svc->store, db, err);
    free(db);
    if (rc) goto fail;
    char *data_dir = path_join(svc->state_dir, "data");
    if (!data_dir) {
        rc = OB_ERR(err, OB_ERR_NOMEM, "allocating the service");
        goto fail;
    }
    /* By default, the directories of the built-in datasets' defaults, and the state's own. */
    const char *data_defaults[] = {"/usr/share/datasets", OB_FORTUNES_DIR, data_dir, NULL};
    const char *ckpt_defaults[] = {svc->ckpt_dir, NULL};
    rc = ob__roots_init(&svc->data_roots, cfg->data_roots, data_defaults, err);
    free(data_dir);
    if (rc == OB_OK)
        rc = ob__roots_init(&svc->ckpt_roots, cfg->checkpoint_roots, ckpt_defaults, err);
    if (rc) goto fail;
    if ((rc = recover(svc, err))) goto fail;
    *out = svc;
    return OB_OK;
fail:
    ob_service_destroy(svc);
    return rc;
}

void ob_service_destroy(ob_service *svc)
{
    if (!svc) return;
    ob_service_stop(svc);
    while (svc->runs)
        ob__svc_unlink_run(svc, svc->runs);
    ob_store_close(svc->store);
    if (svc->lock_fd >= 0) close(svc->lock_fd);
    free(svc->state_dir);
    free(svc->jobs_dir);
    free(svc->ckpt_dir);
    free(svc->uploads_dir);
    free(svc->report_addr);
    ob__metrics_free(svc);
    ob__job_cache_free(&svc->jobs_cache);
    ob__roots_free(&svc->data_roots);
    ob__roots_free(&svc->ckpt_roots);
    pthread_cond_destroy(&svc->cv);
    pthread_mutex_destroy(&svc->mu);
    free(svc);
}

/* ---- submit, get, list, cancel ------------------------------------------------------------ */

static void append_problem(char *buf, size_t cap, const char *text)
{
    size_t len = strlen(buf);
    if (len && len + 2 < cap) {
        strcat(buf, "; ");
        len += 2;
    }
    ob_strlcpy(buf + len, text, cap - len);
}

/* A submit whose request id was seen before (lock held): *again = 1 and *out = the job it made
 * when the new one (j) asks for the same; OB_ERR_STATE when it asks for something else; *again
 * = 0 when the request id is new. */
static ob_status repeated_submit(ob_service *svc, const ob_job *j, int *again, ob_job *out,
                                 ob_err *err)
{
    *again = 0;
    char id[OB_JOB_ID_LEN];
    ob_err ferr;
    ob_err_clear(&ferr);
    ob_status rc = ob_store_find_request(svc->store, j->request_id, id, &ferr);
    if (rc == OB_ERR_NOT_FOUND) return OB_OK;
    if (rc) {
        if (err) *err = ferr;
        return rc;
    }
    ob_job first;
    if ((rc = ob_store_get_job(svc->store, id, &first, err))) return rc;
    if (strcmp(first.spec_json, j->spec_json) != 0 || first.world_size != j->world_size ||
        first.max_restarts != j->max_restarts || strcmp(first.labels, j->labels) != 0 ||
        first.deadline_ms != j->deadline_ms) {
        rc = OB_ERR(err, OB_ERR_STATE,
                    "request_id '%s' already made job %s, with another spec, world size or "
                    "restarts",
                    j->request_id, first.id);
        ob_job_clear(&first);
        return rc;
    }
    *again = 1;
    *out = first;
    return OB_OK;
}

/* Parses the submit's spec into spec; what is wrong with it goes into problems[cap].
 * OB_ERR_NOMEM (err filled) when memory runs out, else OB_OK. */
static ob_status check_spec(const ob_submit_req *req, ob_jobspec *spec, char *problems, size_t cap,
                            ob_err *err)
{
    char text[OB_ERR_MSG_LEN];
    ob_err perr;
    ob_err_clear(&perr);
    if (!req->spec || req->spec_len == 0) {
        append_problem(problems, cap, "spec: missing required field");
    } else if (ob_jobspec_parse(spec, req->spec, req->spec_len, OB_SPEC_AUTO, &perr) != OB_OK) {
        if (perr.code == OB_ERR_NOMEM) {
            if (err) *err = perr;
            return OB_ERR_NOMEM;
        }
        /* The API shows the parser's message without its developer location. */
        char clean[OB_ERR_MSG_LEN];
        ob_status_public_message(perr.msg, clean, sizeof clean);
        snprintf(text, sizeof text, "spec: %.*s", (int)sizeof text - 8, clean);
        append_problem(problems, cap, text);
    }
    return OB_OK;
}

/* Whether the launcher can run the parsed spec with the submit's uploaded files (a Kubernetes
 * launcher cannot run uploaded programs, nor Python programs on an image without Python); its
 * reason goes into problems[cap]. */
static void check_launcher(const ob_service *svc, const ob_submit_req *req, const ob_jobspec *spec,
                           char *problems, size_t cap)
{
    ob_err lerr;
    ob_err_clear(&lerr);
    if (ob_launcher_check_job(svc->cfg.launcher, spec, req->n_files, &lerr) == OB_OK) return;
    char clean[OB_ERR_MSG_LEN];
    ob_status_public_message(lerr.msg, clean, sizeof clean);
    append_problem(problems, cap, clean);
}

/* Whether what a parsed spec names lies under the roots its job may read: a program's entry
 * point and working directory, or a training job's data and warm-start source. What does not
 * goes into problems[cap]. */
static void check_spec_paths(const ob_service *svc, const ob_submit_req *req,
                             const ob_jobspec *spec, char *problems, size_t cap)
{
    char text[OB_ERR_MSG_LEN];
    if (req->n_files > 0) { /* its program is the upload, stored with the job */
        const ob_program_spec *pg = &spec->program;
        if (!ob_jobspec_is_program(spec))
            append_problem(problems, cap,
                           "files: only a program job (a spec with program:) takes uploaded "
                           "files");
        else if (pg->workdir[0])
            append_problem(problems, cap,
                           "spec: program.workdir: not with uploaded files (the program runs "
                           "in the directory onebitd stores them in)");
        else if (pg->entrypoint[0] == '/')
            append_problem(problems, cap,
                           "spec: program.entrypoint: with uploaded files, a path among them, "
                           "not an absolute path");
        if (ob__upload_check(req->files, req->n_files, ob__upload_limit(svc), text, sizeof text) !=
            OB_OK)
            append_problem(problems, cap, text);
        return;
    }
    if (ob_jobspec_is_program(spec)) { /* its program lies under a data root */
        char entry[2 * OB_JOBSPEC_PATH_LEN];
        const ob_program_spec *pg = &spec->program;
        if (pg->entrypoint[0] != '/' && !pg->workdir[0])
            append_problem(problems, cap,
                           "spec: program: a job onebitd runs needs program.workdir, an "
                           "absolute program.entrypoint, or the program's files uploaded with "
                           "the submit");
        else {
            snprintf(entry, sizeof entry, "%s%s%s", pg->entrypoint[0] == '/' ? "" : pg->workdir,
                     pg->entrypoint[0] == '/' ? "" : "/", pg->entrypoint);
            if (ob__roots_check(&svc->data_roots, "spec: program.entrypoint", entry, text,
                                sizeof text) != OB_OK)
                append_problem(problems, cap, text);
            if (ob__roots_check(&svc->data_roots, "spec: program.workdir", pg->workdir, text,
                                sizeof text) != OB_OK)
                append_problem(problems, cap, text);
        }
        return;
    }
    /* may its job read what it names? */
    if (ob__roots_check(&svc->data_roots, "spec: data.path", spec->data.path, text, sizeof text) !=
        OB_OK)
        append_problem(problems, cap, text);
    if (ob__roots_check(&svc->ckpt_roots, "spec: warm_start.from", spec->warm_start_from, text,
                        sizeof text) != OB_OK)
        append_problem(problems, cap, text);
}

/* The world size the job gets (the request's, 0: the default), checked against the slots and,
 * when nothing else is wrong, the memory its ranks would need against --max-job-memory. What is
 * wrong goes into problems[cap]. */
static int check_world(const ob_service *svc, const ob_submit_req *req, const ob_jobspec *spec,
                       char *problems, size_t cap)
{
    char text[OB_ERR_MSG_LEN];
    int default_world = svc->cfg.default_world_size > 0 ? svc->cfg.default_world_size : 1;
    int world = req->world_size ? req->world_size : default_world;
    if (req->world_size < 0 || req->world_size > MAX_WORLD_SIZE) {
        snprintf(text, sizeof text, "world_size: expected 1 to %d, got %d", MAX_WORLD_SIZE,
                 req->world_size);
        append_problem(problems, cap, text);
    } else if (world > svc->cfg.slots) {
        snprintf(text, sizeof text, "world_size: %d ranks exceed the service's %d slots", world,
                 svc->cfg.slots);
        append_problem(problems, cap, text);
    }
    if (!problems[0] && svc->cfg.max_job_memory > 0 && world >= 1 && world <= MAX_WORLD_SIZE) {
        /* Ranks that would not fit are refused now rather than killed later. */
        ob_memory_estimate est;
        if (ob_jobspec_memory_estimate(spec, world, &est, NULL) == OB_OK &&
            (est.total > (uint64_t)svc->cfg.max_job_memory / (uint64_t)world)) {
            double mib = 1024.0 * 1024.0;
            snprintf(text, sizeof text,
                     "memory: the job needs about %.0f MiB per rank (parameters and gradients "
                     "%.0f, optimizer %.0f, activations %.0f, data %.0f, process %.0f) x %d "
                     "ranks = %.0f MiB, over the service's limit of %.0f MiB (--max-job-memory)",
                     (double)est.total / mib, (double)est.params / mib, (double)est.optimizer / mib,
                     (double)est.activations / mib, (double)est.data / mib, (double)est.base / mib,
                     world, (double)est.total * world / mib, (double)svc->cfg.max_job_memory / mib);
            append_problem(problems, cap, text);
        }
    }
    return world;
}

/* The submit's other fields: max_restarts, the labels (normalised into labels[OB_LABELS_LEN]),
 * the request id and the deadline (*deadline_ms; 0: none). What is wrong goes into
 * problems[cap]. */
static void check_fields(const ob_submit_req *req, char *labels, int64_t *deadline_ms,
                         char *problems, size_t cap)
{
    char text[OB_ERR_MSG_LEN];
    if (req->max_restarts < -1 || req->max_restarts > MAX_RESTARTS_LIMIT) {
        snprintf(text, sizeof text, "max_restarts: expected 0 to %d (or -1: the default), got %d",
                 MAX_RESTARTS_LIMIT, req->max_restarts);
        append_problem(problems, cap, text);
    }
    ob_err lerr;
    ob_err_clear(&lerr);
    if (ob_labels_parse(req->labels, labels, &lerr) != OB_OK) {
        char clean[OB_ERR_MSG_LEN];
        ob_status_public_message(lerr.msg, clean, sizeof clean);
        snprintf(text, sizeof text, "labels: %.400s", clean);
        append_problem(problems, cap, text);
    }
    const char *rid = req->request_id ? req->request_id : "";
    size_t rid_len = strlen(rid);
    if (rid_len >= OB_REQUEST_ID_LEN ||
        strspn(rid, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                    "0123456789._:-") != rid_len) {
        snprintf(text, sizeof text, "request_id: 1 to %d characters of [A-Za-z0-9._:-]",
                 OB_REQUEST_ID_LEN - 1);
        append_problem(problems, cap, text);
    }
    *deadline_ms = 0;
    if (req->deadline && req->deadline[0]) {
        ob_err derr;
        ob_err_clear(&derr);
        if (ob_duration_parse(req->deadline, deadline_ms, &derr) != OB_OK) {
            char clean[OB_ERR_MSG_LEN];
            ob_status_public_message(derr.msg, clean, sizeof clean);
            snprintf(text, sizeof text, "deadline: %.400s", clean);
            append_problem(problems, cap, text);
        }
    }
}

/* Stores the new job j (its fields set; lock not held) while the store can be written, once per
 * request id: *out = j (taken) on success, or the job an earlier submit with j's request id made
 * (j cleared); on failure j is cleared. A staged upload (staged non-empty) becomes the new job's
 * before the lock is let go, and staged "" then; otherwise it is left to the caller. */
static ob_status store_new_job(ob_service *svc, ob_job *j, char *staged, ob_job *out, ob_err *err)
{
    ob_status rc;
    pthread_mutex_lock(&svc->mu);
    if ((rc = ob__svc_writable(svc, err))) {
        pthread_mutex_unlock(&svc->mu);
        ob_job_clear(j);
        return rc;
    }
    if (j->request_id[0]) {
        /* Under the lock: a retried submit racing its first try finds the job or makes it. */
        int again = 0;
        rc = repeated_submit(svc, j, &again, out, err);
        if (rc || again) {
            pthread_mutex_unlock(&svc->mu);
            ob_job_clear(j);
            return rc;
        }
    }
    rc = ob_store_create_job(svc->store, j, err);
    if (rc == OB_ERR_IO || rc == OB_ERR_UNAVAILABLE) {
        ob__svc_store_failed(svc, rc, err);
        rc = ob__svc_writable(svc, err);
    }
    if (rc == OB_OK && staged && staged[0] && (rc = ob__upload_commit(svc, staged, j->id, err))) {
        /* Under the lock still: no launch has seen the job, which goes without its files. */
        ob_err derr;
        ob_err_clear(&derr);
        (void)ob_store_delete_job(svc->store, j->id, &derr);
        OB_WRAP(err, rc, "the job was not created");
    } else if (rc == OB_OK && staged) {
        staged[0] = '\0'; /* the job's now */
    }
    if (rc == OB_OK) {
        svc->event_counter++;
        pthread_cond_broadcast(&svc->cv);
        if (svc->cfg.on_state)
            svc->cfg.on_state(svc->cfg.on_state_user, j->id, "PENDING: submitted");
    }
    pthread_mutex_unlock(&svc->mu);
    if (rc) {
        ob_job_clear(j);
        return rc;
    }
    *out = *j;
    return OB_OK;
}

ob_status ob_service_submit(ob_service *svc, const ob_submit_req *req, ob_job *out, ob_err *err)
{
    char problems[OB_ERR_MSG_LEN - 40] = "";
    memset(out, 0, sizeof *out);
    ob_jobspec *spec = malloc(sizeof *spec);
    if (!spec) return OB_ERR(err, OB_ERR_NOMEM, "allocating a job spec");
    if (check_spec(req, spec, problems, sizeof problems, err) != OB_OK) {
        free(spec);
        return OB_ERR_NOMEM;
    }
    if (!problems[0]) check_launcher(svc, req, spec, problems, sizeof problems);
    if (!problems[0]) check_spec_paths(svc, req, spec, problems, sizeof problems);
    int world = check_world(svc, req, spec, problems, sizeof problems);
    int restarts = req->max_restarts < 0 ? svc->cfg.default_max_restarts : req->max_restarts;
    char labels[OB_LABELS_LEN];
    int64_t deadline_ms;
    check_fields(req, labels, &deadline_ms, problems, sizeof problems);
    if (problems[0]) {
        free(spec);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s", problems);
    }
    char *json = NULL;
    ob_status rc = ob_jobspec_to_json(spec, &json, err);
    if (rc) {
        free(spec);
        return rc;
    }
    char staged[OB_JOB_PATH_LEN] = "";
    if (req->n_files > 0) { /* written before the job exists, moved to it when it does */
        pthread_mutex_lock(&svc->mu);
        rc = ob__svc_writable(svc, err);
        pthread_mutex_unlock(&svc->mu);
        if (rc == OB_OK) rc = ob__upload_room(svc, req->files, req->n_files, err);
        if (rc) {
            free(spec);
            free(json);
            return rc;
        }
        rc = ob__upload_stage(svc, req->files, req->n_files, spec->program.entrypoint, staged,
                              sizeof staged, problems, sizeof problems, err);
        if (rc) {
            free(spec);
            free(json);
            return rc == OB_ERR_INVALID_ARG && problems[0]
                       ? OB_ERR(err, OB_ERR_INVALID_ARG, "%s", problems)
                       : rc;
        }
    }
    ob_job j;
    memset(&j, 0, sizeof j);
    ob_strlcpy(j.name, spec->name, sizeof j.name);
    ob_strlcpy(j.request_id, req->request_id ? req->request_id : "", sizeof j.request_id);
    ob_strlcpy(j.labels, labels, sizeof j.labels);
    free(spec);
    j.state = OB_JOB_PENDING;
    j.spec_json = json;
    j.world_size = world;
    j.max_restarts = restarts;
    j.deadline_ms = deadline_ms;
    j.created_ms = j.updated_ms = ob_wall_ms();
    ob_strlcpy(j.message, "waiting for worker slots", sizeof j.message);
    rc = store_new_job(svc, &j, staged, out, err);
    /* Still staged: refused, or a repeated request id that answered its first job. */
    ob__upload_discard(staged);
    return rc;
}

ob_status ob_service_get(ob_service *svc, const char *id, ob_job *out, ob_err *err)
{
    /* Unchanged since the last read of this job: from memory, without the lock (job_cache.c).
     * Where SQLite's connections are not safe to share between threads, the generation is
     * read under the lock. */
    int lockfree = ob_store_generation_lockfree();
    if (lockfree && ob__job_cache_get(&svc->jobs_cache, id, ob_store_generation(svc->store), out))
        return OB_OK;
    pthread_mutex_lock(&svc->mu);
    uint64_t gen = ob_store_generation(svc->store);
    if (!lockfree && ob__job_cache_get(&svc->jobs_cache, id, gen, out)) {
        pthread_mutex_unlock(&svc->mu);
        return OB_OK;
    }
    ob_status rc = ob_store_get_job(svc->store, id, out, err);
    pthread_mutex_unlock(&svc->mu);
    if (rc == OB_OK) ob__job_cache_put(&svc->jobs_cache, gen, out);
    return rc;
}

ob_status ob_service_list(ob_service *svc, ob_job_state state, const char *label_selector,
                          int page_size, const char *page_token, ob_job **jobs, size_t *n,
                          char next_token[OB_PAGE_TOKEN_LEN], ob_err *err)
{
    *jobs = NULL;
    *n = 0;
    next_token[0] = '\0';
    if (page_size < 0 || page_size > 1000)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "page_size: expected 0 to 1000, got %d", page_size);
    if ((int)state < 0 || (int)state >= OB_JOB_STATE_COUNT)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "state: unknown job state %d", (int)state);
    int64_t after = 0;
    if (page_token && page_token[0]) {
        char *end;
        errno = 0;
        long long v = strtoll(page_token, &end, 10);
        if (*end || errno || v <= 0 || page_token[0] == '+' || page_token[0] == ' ')
            return OB_ERR(err, OB_ERR_INVALID_ARG, "page_token: not a token from this service");
        after = v;
    }
    char selector[OB_LABELS_LEN];
    if (ob_labels_parse(label_selector, selector, err) != OB_OK)
        return OB_WRAP(err, OB_ERR_INVALID_ARG, "label_selector");
    int more = 0;
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_list_jobs(svc->store, state, selector, after,
                                      page_size ? page_size : 50, jobs, n, &more, err);
    pthread_mutex_unlock(&svc->mu);
    if (rc == OB_OK && more && *n)
        snprintf(next_token, OB_PAGE_TOKEN_LEN, "%lld", (long long)(*jobs)[*n - 1].seq);
    return rc;
}

ob_status ob_service_cancel(ob_service *svc, const char *id, ob_job *out, ob_err *err)
{
    ob_job j;
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_get_job(svc->store, id, &j, err);
    if (rc) goto done;
    if (ob_job_state_final(j.state)) {
        rc = OB_ERR(err, OB_ERR_STATE, "job %s is already %s", j.id, ob_job_state_name(j.state));
        ob_job_clear(&j);
        goto done;
    }
    if ((rc = ob__svc_writable(svc, err))) {
        ob_job_clear(&j);
        goto done;
    }
    ob__run *r = ob__svc_find_run(svc, j.id);
    j.cancel_requested = 1;
    if (r) {
        /* Recorded first: the workers are stopped only for a cancel the store holds (else the
         * attempt's end would be taken for a failure). tick() finishes the job when they are
         * gone. */
        rc = ob__svc_commit(svc, &j, "state", "cancel requested: stopping the workers", err);
        if (rc == OB_OK) {
            svc->cfg.launcher->ops->signal(svc->cfg.launcher, &r->h, SIGTERM, NULL);
            if (!r->kill_at_ms) r->kill_at_ms = ob_wall_ms() + svc->cfg.cancel_grace_ms;
            ob_strlcpy(r->stop_reason, "cancelled", sizeof r->stop_reason);
        }
    } else {
        rc = ob__svc_transition(svc, &j, OB_JOB_CANCELLED, "cancelled", err);
    }
    if (rc == OB_ERR_IO || rc == OB_ERR_UNAVAILABLE) rc = ob__svc_writable(svc, err);
    if (rc == OB_OK) {
        ob_job_clear(&j);
        rc = ob_store_get_job(svc->store, id, &j, err);
    }
    if (rc == OB_OK)
        *out = j;
    else
        ob_job_clear(&j);
done:
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

ob_status ob_service_events(ob_service *svc, const char *id, int64_t after_seq, int limit,
                            ob_job_event **evs, size_t *n, ob_err *err)
{
    ob_job j;
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_get_job(svc->store, id, &j, err);
    if (rc == OB_OK) {
        ob_job_clear(&j);
        rc = ob_store_list_events(svc->store, id, after_seq, limit, evs, n, err);
    }
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

int64_t ob_service_event_counter(ob_service *svc)
{
    pthread_mutex_lock(&svc->mu);
    int64_t c = svc->event_counter;
    pthread_mutex_unlock(&svc->mu);
    return c;
}

int ob_service_wait(ob_service *svc, int64_t seen, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    int result = 0;
    pthread_mutex_lock(&svc->mu);
    while (!svc->stopping && svc->event_counter <= seen) {
        if (pthread_cond_timedwait(&svc->cv, &svc->mu, &until) == ETIMEDOUT) break;
    }
    if (svc->stopping)
        result = -1;
    else if (svc->event_counter > seen)
        result = 1;
    pthread_mutex_unlock(&svc->mu);
    return result;
}

ob_status ob_service_checkpoints(ob_service *svc, const char *id, ob_checkpoint_info **out,
                                 size_t *n, ob_err *err)
{
    ob_job j;
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_get_job(svc->store, id, &j, err);
    if (rc == OB_OK) {
        ob_job_clear(&j);
        rc = ob__svc_scan_checkpoints(svc, id, out, n, err);
    }
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

ob_status ob_service_logs(ob_service *svc, const char *id, int64_t offset, int max_bytes,
                          char **data, size_t *len, int64_t *size, ob_err *err)
{
    *data = NULL;
    *len = 0;
    *size = 0;
    if (offset < 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "offset: %lld < 0", (long long)offset);
    if (max_bytes < 0 || max_bytes > OB_LOG_READ_MAX)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "max_bytes: %d is not in [0, %d]", max_bytes,
                      OB_LOG_READ_MAX);
    if (max_bytes == 0) max_bytes = OB_LOG_READ_DEFAULT;
    ob_job j;
    char path[OB_JOB_PATH_LEN];
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_get_job(svc->store, id, &j, err);
    pthread_mutex_unlock(&svc->mu);
    if (rc) return rc;
    ob_job_clear(&j);
    ob__svc_job_path(svc, id, "worker.log", path, sizeof path);
    /* The log is only ever appended to: no lock is needed to read a prefix of it. */
    FILE *f = fopen(path, "rb");
    if (!f) return OB_OK; /* no attempt yet */
    if (fseeko(f, 0, SEEK_END) != 0) {
        fclose(f);
        return OB_ERR(err, OB_ERR_IO, "%s: %s", path, strerror(errno));
    }
    *size = (int64_t)ftello(f);
    if (offset >= *size) {
        fclose(f);
        return OB_OK;
    }
    size_t want =
        (size_t)(*size - offset) < (size_t)max_bytes ? (size_t)(*size - offset) : (size_t)max_bytes;
    char *buf = malloc(want);
    if (!buf) {
        fclose(f);
        return OB_ERR(err, OB_ERR_NOMEM, "reading %zu bytes of %s", want, path);
    }
    size_t got = 0;
    if (fseeko(f, (off_t)offset, SEEK_SET) == 0) got = fread(buf, 1, want, f);
    fclose(f);
    if (got == 0) {
        free(buf);
        return OB_OK;
    }
    *data = buf;
    *len = got;
    return OB_OK;
}
