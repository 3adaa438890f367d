/* The service functions and the supervisor.
 *
 * One lock (svc->mu) guards the store, the list of running attempts and the event counter.
 * API handlers call the ob_service_* functions from their own threads; the supervisor thread
 * runs tick() every cfg.tick_ms: it reads the workers' progress from their logs (when they do
 * not report over WorkerService), reaps ended attempts, enforces the progress timeout and the
 * cancel grace period, and starts PENDING and RESTARTING jobs while slots are free. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "onebit/service.h"
#include "onebit/checkpoint.h"
#include "onebit/jobspec.h"
#include "onebit/status_map.h"
#include "onebit/store.h"
#include "svc_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORLD_SIZE 1024
#define MAX_RESTARTS_LIMIT 100
#define LINE_MAX_BYTES 16384

/* One running attempt. */
typedef struct run {
    struct run *next;
    char job_id[OB_JOB_ID_LEN];
    int attempt;
    ob_launch_handle h;
    int64_t started_ms;
    int64_t last_progress_ms;
    int64_t kill_at_ms;               /* after SIGTERM: when to send SIGKILL; 0: not stopping */
    char stop_reason[OB_JOB_MSG_LEN]; /* why we stopped it (timeout, cancel, shutdown) */
    char last_text[256];              /* the last line of the log that was not progress */
    char worker_error[256];           /* the last line a worker or mpirun wrote about a failure */
    int64_t total_steps;
    int reported; /* has used WorkerService: ignore its log lines */
    int world_size;
    int64_t num_params;
    int64_t start_step;
    FILE *log; /* read side of the job's log */
    char line[LINE_MAX_BYTES];
    size_t line_len;
    int line_overflow;
} run;

struct ob_service {
    ob_service_config cfg;
    char *state_dir, *jobs_dir, *ckpt_dir, *report_addr;
    ob_store *store;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t event_counter;
    int64_t reports; /* WorkerService reports accepted */
    int stopping;
    int started;
    int lock_fd; /* holds the state directory's lock */
    pthread_t thread;
    run *runs;
};

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
}

/* ---- small helpers ------------------------------------------------------------------------ */

static ob_status mkdirs(const char *path, ob_err *err)
{
    char tmp[OB_JOB_PATH_LEN];
    if (strlen(path) >= sizeof tmp)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "path too long: %s", path);
    strcpy(tmp, path);
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return OB_ERR(err, OB_ERR_IO, "mkdir %s: %s", tmp, strerror(errno));
            *p = c;
            if (c == '\0') break;
        }
    }
    return OB_OK;
}

static char *path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

static void job_path(const ob_service *svc, const char *id, const char *file, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s/%s", svc->jobs_dir, id, file);
}

/* Records an event for job j (whose fields the caller has already updated) in one transaction
 * with the job's row, and wakes the watchers. Called with the lock held. */
static ob_status commit(ob_service *svc, ob_job *j, const char *kind, const char *msg, ob_err *err)
{
    j->updated_ms = ob_now_ms();
    ob_job_event ev;
    memset(&ev, 0, sizeof ev);
    ev.time_ms = j->updated_ms;
    ob__strlcpy(ev.kind, kind, sizeof ev.kind);
    ev.state = j->state;
    ob__strlcpy(ev.message, msg, sizeof ev.message);
    ev.progress = j->progress;
    ob_status rc = ob_store_update_job(svc->store, j, kind ? &ev : NULL, err);
    if (rc == OB_OK && kind) {
        svc->event_counter++;
        pthread_cond_broadcast(&svc->cv);
    }
    return rc;
}

/* Moves j to state with a message, as one "state" event. */
static ob_status transition(ob_service *svc, ob_job *j, ob_job_state state, const char *msg,
                            ob_err *err)
{
    j->state = state;
    ob__strlcpy(j->message, msg, sizeof j->message);
    if (ob_job_state_final(state)) j->finished_ms = ob_now_ms();
    char text[OB_JOB_MSG_LEN + 64];
    snprintf(text, sizeof text, "%s%s%.400s", ob_job_state_name(state), msg[0] ? ": " : "", msg);
    return commit(svc, j, "state", text, err);
}

static run *find_run(ob_service *svc, const char *id)
{
    for (run *r = svc->runs; r; r = r->next)
        if (!strcmp(r->job_id, id)) return r;
    return NULL;
}

static void free_run(run *r)
{
    if (!r) return;
    if (r->log) fclose(r->log);
    free(r);
}

static void unlink_run(ob_service *svc, run *r)
{
    for (run **p = &svc->runs; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            break;
        }
    }
    free_run(r);
}

static int used_slots(const ob_service *svc)
{
    int n = 0;
    for (const run *r = svc->runs; r; r = r->next)
        n += r->world_size;
    return n;
}

/* ---- checkpoints on disk ------------------------------------------------------------------ */

/* Committed checkpoints of a job, newest first, with their metadata. */
static ob_status scan_checkpoints(const ob_service *svc, const char *id, ob_checkpoint_info **out,
                                  size_t *n, ob_err *err)
{
    *out = NULL;
    *n = 0;
    char dir[OB_JOB_PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s", svc->ckpt_dir, id);
    ob_ckpt_entry *e = NULL;
    size_t ne = 0;
    ob_status rc = ob_ckpt_list(dir, &e, &ne, err);
    if (rc) return rc;
    ob_checkpoint_info *v = ne ? calloc(ne, sizeof *v) : NULL;
    if (ne && !v) {
        free(e);
        return OB_ERR(err, OB_ERR_NOMEM, "listing checkpoints of %s", id);
    }
    size_t count = 0;
    for (size_t i = 0; i < ne; i++) {
        if (!e[i].committed) continue;
        ob_checkpoint_info *c = &v[count++];
        c->step = e[i].step;
        ob__strlcpy(c->path, e[i].path, sizeof c->path);
        struct stat st;
        if (stat(c->path, &st) == 0)
            c->time_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
        ob_ckpt_meta meta;
        ob_err merr;
        ob_err_clear(&merr);
        if (ob_ckpt_read_meta(c->path, &meta, NULL, &merr) == OB_OK) {
            c->world_size = meta.world_size;
            ob__strlcpy(c->phase, meta.phase == 1 ? "compression" : "warmup", sizeof c->phase);
            c->freeze_step = meta.freeze_step > 0 ? meta.freeze_step : 0;
        } else {
            ob_status_public_message(merr.msg, c->problem, sizeof c->problem);
        }
    }
    free(e);
    if (!count) {
        free(v);
        v = NULL;
    }
    *out = v;
    *n = count;
    return OB_OK;
}

/* ---- create, recover, destroy ------------------------------------------------------------- */

/* Jobs an earlier coordinator left RUNNING or RESTARTING: stop what is left of their last
 * attempt, close that attempt, and queue them to resume now (a coordinator restart does not
 * use up one of the job's restarts). */
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
                ob_store_list_jobs(svc->store, states[s], after, 100, &jobs, &n, &more, err);
            if (rc) return rc;
            for (size_t i = 0; i < n && rc == OB_OK; i++) {
                ob_job *j = &jobs[i];
                after = j->seq;
                ob_attempt *a = j->n_attempts ? &j->attempts[j->n_attempts - 1] : NULL;
                if (a && a->ended_ms == 0) {
                    ob_launch_handle h = {.pid = a->pgid, .pgid = a->pgid};
                    char spec_path[OB_JOB_PATH_LEN];
                    job_path(svc, j->id, "spec.json", spec_path, sizeof spec_path);
                    ob_launch_req req = {.job_id = j->id, .spec_path = spec_path};
                    svc->cfg.launcher->ops->stop_stale(svc->cfg.launcher, &h, &req);
                    a->ended_ms = ob_now_ms();
                    a->exit_code = -1;
                    ob__strlcpy(a->exit_reason, "coordinator restarted", sizeof a->exit_reason);
                    rc = ob_store_put_attempt(svc->store, j->id, a, err);
                }
                if (rc == OB_OK && states[s] == OB_JOB_RUNNING)
                    rc = transition(svc, j, OB_JOB_RESTARTING,
                                    "coordinator restarted; resuming from the newest checkpoint",
                                    err);
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
    if ((rc = mkdirs(svc->state_dir, err))) goto fail;
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
    char *db = path_join(svc->state_dir, "jobs.db");
    if (!svc->jobs_dir || !svc->ckpt_dir || !db) {
        free(db);
        rc = OB_ERR(err, OB_ERR_NOMEM, "allocating the service");
        goto fail;
    }
    if ((rc = mkdirs(svc->jobs_dir, err)) || (rc = mkdirs(svc->ckpt_dir, err))) {
        free(db);
        goto fail;
    }
    rc = ob_store_open(&svc->store, db, err);
    free(db);
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
        unlink_run(svc, svc->runs);
    ob_store_close(svc->store);
    if (svc->lock_fd >= 0) close(svc->lock_fd);
    free(svc->state_dir);
    free(svc->jobs_dir);
    free(svc->ckpt_dir);
    free(svc->report_addr);
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
    ob__strlcpy(buf + len, text, cap - len);
}

/* The spec parser's message without the trailing " (file.c:123)" it adds for developers. */
static void strip_location(char *msg)
{
    size_t n = strlen(msg);
    if (n && msg[n - 1] == ')') {
        char *open = strrchr(msg, '(');
        if (open && open > msg && open[-1] == ' ' && strchr(open, ':') && strstr(open, ".c:"))
            open[-1] = '\0';
    }
}

ob_status ob_service_submit(ob_service *svc, const ob_submit_req *req, ob_job *out, ob_err *err)
{
    char problems[OB_ERR_MSG_LEN - 40] = "";
    char text[OB_ERR_MSG_LEN];
    memset(out, 0, sizeof *out);
    ob_jobspec *spec = malloc(sizeof *spec);
    if (!spec) return OB_ERR(err, OB_ERR_NOMEM, "allocating a job spec");
    ob_err perr;
    ob_err_clear(&perr);
    int spec_ok = 0;
    if (!req->spec || req->spec_len == 0) {
        append_problem(problems, sizeof problems, "spec: missing required field");
    } else if (ob_jobspec_parse(spec, req->spec, req->spec_len, OB_SPEC_AUTO, &perr) != OB_OK) {
        strip_location(perr.msg);
        snprintf(text, sizeof text, "spec: %s", perr.msg);
        append_problem(problems, sizeof problems, text);
    } else {
        spec_ok = 1;
    }
    int default_world = svc->cfg.default_world_size > 0 ? svc->cfg.default_world_size : 1;
    int world = req->world_size ? req->world_size : default_world;
    if (req->world_size < 0 || req->world_size > MAX_WORLD_SIZE) {
        snprintf(text, sizeof text, "world_size: expected 1 to %d, got %d", MAX_WORLD_SIZE,
                 req->world_size);
        append_problem(problems, sizeof problems, text);
    } else if (world > svc->cfg.slots) {
        snprintf(text, sizeof text, "world_size: %d ranks exceed the service's %d slots", world,
                 svc->cfg.slots);
        append_problem(problems, sizeof problems, text);
    }
    int restarts = req->max_restarts < 0 ? svc->cfg.default_max_restarts : req->max_restarts;
    if (req->max_restarts < -1 || req->max_restarts > MAX_RESTARTS_LIMIT) {
        snprintf(text, sizeof text, "max_restarts: expected 0 to %d (or -1: the default), got %d",
                 MAX_RESTARTS_LIMIT, req->max_restarts);
        append_problem(problems, sizeof problems, text);
    }
    if (problems[0]) {
        free(spec);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s", problems);
    }
    (void)spec_ok;
    char *json = NULL;
    ob_status rc = ob_jobspec_to_json(spec, &json, err);
    if (rc) {
        free(spec);
        return rc;
    }
    ob_job j;
    memset(&j, 0, sizeof j);
    ob__strlcpy(j.name, spec->name, sizeof j.name);
    free(spec);
    j.state = OB_JOB_PENDING;
    j.spec_json = json;
    j.world_size = world;
    j.max_restarts = restarts;
    j.created_ms = j.updated_ms = ob_now_ms();
    ob__strlcpy(j.message, "waiting for worker slots", sizeof j.message);
    pthread_mutex_lock(&svc->mu);
    rc = ob_store_create_job(svc->store, &j, err);
    if (rc == OB_OK) {
        svc->event_counter++;
        pthread_cond_broadcast(&svc->cv);
    }
    pthread_mutex_unlock(&svc->mu);
    if (rc) {
        ob_job_clear(&j);
        return rc;
    }
    *out = j;
    return OB_OK;
}

ob_status ob_service_get(ob_service *svc, const char *id, ob_job *out, ob_err *err)
{
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_get_job(svc->store, id, out, err);
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

ob_status ob_service_list(ob_service *svc, ob_job_state state, int page_size,
                          const char *page_token, ob_job **jobs, size_t *n,
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
    int more = 0;
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_list_jobs(svc->store, state, after, page_size ? page_size : 50, jobs, n,
                                      &more, err);
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
    run *r = find_run(svc, j.id);
    j.cancel_requested = 1;
    if (r) {
        /* The workers checkpoint and exit; tick() finishes the job when they are gone. */
        svc->cfg.launcher->ops->signal(svc->cfg.launcher, &r->h, SIGTERM, NULL);
        if (!r->kill_at_ms) r->kill_at_ms = ob_now_ms() + svc->cfg.cancel_grace_ms;
        ob__strlcpy(r->stop_reason, "cancelled", sizeof r->stop_reason);
        rc = commit(svc, &j, "state", "cancel requested: stopping the workers", err);
    } else {
        rc = transition(svc, &j, OB_JOB_CANCELLED, "cancelled", err);
    }
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
        rc = scan_checkpoints(svc, id, out, n, err);
    }
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

/* ---- progress --------------------------------------------------------------------------- */

static int64_t jint(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_integer(v)) return json_integer_value(v);
    return json_is_number(v) ? (int64_t)json_number_value(v) : 0;
}

/* Applies one progress report to its job. Called with the lock held. */
static ob_status apply_report(ob_service *svc, run *r, const ob_report *rep, ob_err *err)
{
    r->last_progress_ms = ob_now_ms();
    if (!strcmp(rep->kind, "start")) {
        if (rep->num_params > 0) r->num_params = rep->num_params;
        return OB_OK;
    }
    if (!strcmp(rep->kind, "summary")) return OB_OK;
    ob_job j;
    ob_status rc = ob_store_get_job(svc->store, r->job_id, &j, err);
    if (rc) return rc;
    char msg[OB_JOB_MSG_LEN] = "";
    ob_progress *p = &j.progress;
    if (!strcmp(rep->kind, "step")) {
        int64_t freeze_step = p->freeze_step;
        *p = rep->progress;
        p->freeze_step = freeze_step;
        p->total_steps = r->total_steps;
        /* The worker's own count: it carries on from the checkpoint after a resume. What an
         * fp32 ring allreduce would have sent for as many steps: 2 (N-1)/N * 4 d per step. */
        int n = r->world_size;
        double per_step = n > 1 ? 2.0 * (n - 1) / n * 4.0 * (double)r->num_params : 0.0;
        p->bytes_uncompressed = (int64_t)(per_step * (double)p->step);
        snprintf(msg, sizeof msg, "step %" PRId64 "/%" PRId64 " loss %.6g", p->step, p->total_steps,
                 p->loss);
    } else if (!strcmp(rep->kind, "freeze")) {
        p->freeze_step = rep->progress.freeze_step;
        snprintf(msg, sizeof msg, "variance frozen at step %" PRId64 "; compression phase begins",
                 p->freeze_step);
    } else if (!strcmp(rep->kind, "eval")) {
        snprintf(msg, sizeof msg, "eval at step %" PRId64 ": loss %.6g, accuracy %.4f",
                 rep->progress.step, rep->eval_loss, rep->eval_accuracy);
    } else if (!strcmp(rep->kind, "checkpoint") && rep->ckpt_failed) {
        snprintf(msg, sizeof msg, "checkpoint of step %" PRId64 " failed: %.400s", rep->ckpt_step,
                 rep->message);
    } else if (!strcmp(rep->kind, "notice")) {
        snprintf(msg, sizeof msg, "%.500s", rep->message);
    } else if (!strcmp(rep->kind, "resume")) {
        /* The worker says which checkpoint it took (it skips ones that do not verify). */
        r->start_step = rep->ckpt_step;
        p->step = rep->ckpt_step;
        for (size_t i = 0; i < j.n_attempts; i++) {
            if (j.attempts[i].number != r->attempt) continue;
            j.attempts[i].start_step = rep->ckpt_step;
            ob_store_put_attempt(svc->store, j.id, &j.attempts[i], NULL);
        }
        snprintf(msg, sizeof msg, "resumed from step %" PRId64 ": %.400s", rep->ckpt_step,
                 rep->ckpt_path);
    } else if (!strcmp(rep->kind, "checkpoint")) {
        j.ckpt_step = rep->ckpt_step;
        j.ckpt_ms = ob_now_ms();
        ob__strlcpy(j.ckpt_path, rep->ckpt_path, sizeof j.ckpt_path);
        snprintf(msg, sizeof msg, "checkpoint at step %" PRId64 ": %.400s", j.ckpt_step,
                 j.ckpt_path);
    } else {
        ob_job_clear(&j);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "kind: unknown progress kind '%.32s'", rep->kind);
    }
    rc = commit(svc, &j, rep->kind, msg, err);
    ob_job_clear(&j);
    return rc;
}

ob_status ob_service_report(ob_service *svc, const ob_report *rep, int *cancel_requested,
                            ob_err *err)
{
    if (cancel_requested) *cancel_requested = 0;
    ob_job j;
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_get_job(svc->store, rep->job_id, &j, err);
    if (rc) goto done;
    if (cancel_requested) *cancel_requested = j.cancel_requested;
    ob_job_clear(&j);
    run *r = find_run(svc, rep->job_id);
    if (!r) {
        rc = OB_ERR(err, OB_ERR_STATE, "job %s has no running attempt", rep->job_id);
        goto done;
    }
    r->reported = 1;
    rc = apply_report(svc, r, rep, err);
    if (rc == OB_OK) svc->reports++;
done:
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

/* Remembers the lines that best explain a failure: the workers' own messages and mpirun's
 * account of a rank that died, rather than the banners around them. */
static void note_text_line(run *r)
{
    const char *l = r->line;
    if (!strncmp(l, "onebit-worker", 13) || strstr(l, "mpirun noticed") || strstr(l, "rror"))
        ob__strlcpy(r->worker_error, l, sizeof r->worker_error);
    if (strspn(l, "-= ") != strlen(l)) ob__strlcpy(r->last_text, l, sizeof r->last_text);
}

/* Reads what the workers appended to the log since the last tick; progress lines are applied
 * unless the workers report over WorkerService. */
static void read_log(ob_service *svc, run *r)
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
                    ob__strlcpy(rep.job_id, r->job_id, sizeof rep.job_id);
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

static int64_t spec_steps(const char *spec_json)
{
    json_t *o = json_loads(spec_json, 0, NULL);
    int64_t steps = o ? jint(o, "steps") : 0;
    json_decref(o);
    return steps;
}

static int64_t backoff_ms(const ob_service *svc, int restarts)
{
    int64_t d = svc->cfg.backoff_ms;
    for (int i = 1; i < restarts && d < svc->cfg.backoff_max_ms; i++)
        d *= 2;
    return d < svc->cfg.backoff_max_ms ? d : svc->cfg.backoff_max_ms;
}

/* Ends a failed attempt's job: restart after a backoff while restarts are left, else FAILED. */
static ob_status retry_or_fail(ob_service *svc, ob_job *j, const char *reason, ob_err *err)
{
    char msg[OB_JOB_MSG_LEN];
    if (j->restarts < j->max_restarts) {
        j->restarts++;
        int64_t delay = backoff_ms(svc, j->restarts);
        j->next_attempt_ms = ob_now_ms() + delay;
        snprintf(msg, sizeof msg, "%.300s; restart %d of %d in %.1f s from the newest checkpoint",
                 reason, j->restarts, j->max_restarts, (double)delay / 1000.0);
        return transition(svc, j, OB_JOB_RESTARTING, msg, err);
    }
    snprintf(msg, sizeof msg, "%.400s; no restarts left", reason);
    return transition(svc, j, OB_JOB_FAILED, msg, err);
}

static ob_status launch(ob_service *svc, ob_job *j, ob_err *err)
{
    char dir[OB_JOB_PATH_LEN], spec_path[OB_JOB_PATH_LEN], log_path[OB_JOB_PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s", svc->jobs_dir, j->id);
    job_path(svc, j->id, "spec.json", spec_path, sizeof spec_path);
    job_path(svc, j->id, "worker.log", log_path, sizeof log_path);
    ob_status rc = mkdirs(dir, err);
    if (rc == OB_OK) rc = write_file_atomic(spec_path, j->spec_json, err);
    if (rc) return rc;

    ob_checkpoint_info *ck = NULL;
    size_t nck = 0;
    scan_checkpoints(svc, j->id, &ck, &nck, NULL);
    int64_t start_step = nck ? ck[0].step : 0;
    free(ck);
    int number = (int)j->n_attempts + 1;
    int resume = j->n_attempts > 0;

    run *r = calloc(1, sizeof *r);
    if (!r) return OB_ERR(err, OB_ERR_NOMEM, "allocating an attempt");
    ob__strlcpy(r->job_id, j->id, sizeof r->job_id);
    r->attempt = number;
    r->world_size = j->world_size;
    r->start_step = resume ? start_step : 0;
    r->total_steps = spec_steps(j->spec_json);
    r->started_ms = r->last_progress_ms = ob_now_ms();
    FILE *lf = fopen(log_path, "a");
    if (lf) {
        fprintf(lf, "== onebitd: attempt %d of job %s: %d ranks%s\n", number, j->id, j->world_size,
                resume ? ", resuming" : "");
        fclose(lf);
    }
    r->log = fopen(log_path, "re"); /* not inherited by the workers */
    if (r->log) fseek(r->log, 0, SEEK_END);

    ob_launch_req req = {
        .job_id = j->id,
        .attempt = number,
        .world_size = j->world_size,
        .spec_path = spec_path,
        .checkpoint_dir = svc->ckpt_dir,
        .resume = resume,
        .log_path = log_path,
        .report_addr = svc->report_addr,
    };
    ob_attempt a = {.number = number, .started_ms = r->started_ms, .start_step = r->start_step};
    ob_err lerr;
    ob_err_clear(&lerr);
    rc = svc->cfg.launcher->ops->start(svc->cfg.launcher, &req, &r->h, &lerr);
    if (rc) {
        /* Counts as a failed attempt: recorded, then the restart policy decides. */
        a.ended_ms = ob_now_ms();
        a.exit_code = -1;
        snprintf(a.exit_reason, sizeof a.exit_reason, "launch failed: %.400s", lerr.msg);
        free_run(r);
        rc = ob_store_put_attempt(svc->store, j->id, &a, err);
        if (rc == OB_OK) rc = retry_or_fail(svc, j, a.exit_reason, err);
        return rc;
    }
    a.pgid = r->h.pgid;
    rc = ob_store_put_attempt(svc->store, j->id, &a, err);
    if (j->started_ms == 0) j->started_ms = r->started_ms;
    char msg[OB_JOB_MSG_LEN];
    if (resume)
        snprintf(msg, sizeof msg, "attempt %d: %d ranks, resuming from step %" PRId64, number,
                 j->world_size, r->start_step);
    else
        snprintf(msg, sizeof msg, "attempt %d: %d ranks", number, j->world_size);
    if (rc == OB_OK) rc = transition(svc, j, OB_JOB_RUNNING, msg, err);
    r->next = svc->runs;
    svc->runs = r;
    return rc;
}

/* The attempt of r has ended: record why, then finish, restart or fail its job. */
static void finish_attempt(ob_service *svc, run *r, const ob_launch_exit *ex)
{
    ob_launcher *l = svc->cfg.launcher;
    read_log(svc, r);
    /* mpirun is gone; no rank of the attempt may outlive it. */
    if (l->ops->alive(l, &r->h)) l->ops->signal(l, &r->h, SIGKILL, NULL);
    ob_job j;
    if (ob_store_get_job(svc->store, r->job_id, &j, NULL) != OB_OK) {
        unlink_run(svc, r);
        return;
    }
    char status[64], reason[OB_JOB_MSG_LEN];
    if (ex->term_signal)
        snprintf(status, sizeof status, "killed by signal %d", ex->term_signal);
    else
        snprintf(status, sizeof status, "exit code %d", ex->exit_code);
    int success = ex->exit_code == 0 && !r->stop_reason[0];
    if (success)
        snprintf(reason, sizeof reason, "completed");
    else if (r->stop_reason[0])
        snprintf(reason, sizeof reason, "%.200s (%s)", r->stop_reason, status);
    else if (r->worker_error[0] || r->last_text[0])
        snprintf(reason, sizeof reason, "workers failed (%s): %.250s", status,
                 r->worker_error[0] ? r->worker_error : r->last_text);
    else
        snprintf(reason, sizeof reason, "workers failed (%s)", status);

    ob_attempt *a = j.n_attempts ? &j.attempts[j.n_attempts - 1] : NULL;
    if (a && a->number == r->attempt) {
        a->ended_ms = ob_now_ms();
        a->exit_code = ex->term_signal ? -1 : ex->exit_code;
        ob__strlcpy(a->exit_reason, reason, sizeof a->exit_reason);
        ob_store_put_attempt(svc->store, j.id, a, NULL);
    }
    ob_checkpoint_info *ck = NULL;
    size_t nck = 0;
    scan_checkpoints(svc, j.id, &ck, &nck, NULL);
    if (nck && ck[0].step >= j.ckpt_step) {
        j.ckpt_step = ck[0].step;
        j.ckpt_ms = ck[0].time_ms;
        ob__strlcpy(j.ckpt_path, ck[0].path, sizeof j.ckpt_path);
    }
    free(ck);

    char msg[OB_JOB_MSG_LEN];
    if (j.cancel_requested) {
        if (j.ckpt_step > 0)
            snprintf(msg, sizeof msg,
                     "cancelled at step %" PRId64 "; last checkpoint: step %" PRId64,
                     j.progress.step, j.ckpt_step);
        else
            snprintf(msg, sizeof msg, "cancelled at step %" PRId64, j.progress.step);
        transition(svc, &j, OB_JOB_CANCELLED, msg, NULL);
    } else if (success) {
        if (j.progress.total_steps) j.progress.step = j.progress.total_steps;
        transition(svc, &j, OB_JOB_SUCCEEDED, "completed", NULL);
    } else {
        snprintf(msg, sizeof msg, "attempt %d ended: %.400s", r->attempt, reason);
        retry_or_fail(svc, &j, msg, NULL);
    }
    ob_job_clear(&j);
    unlink_run(svc, r);
}

/* Starts waiting jobs in submission order while their ranks fit in the free slots; a job that
 * does not fit holds back those behind it, so that large jobs are not starved. */
static void schedule(ob_service *svc)
{
    int free_slots = svc->cfg.slots - used_slots(svc);
    const ob_job_state order[] = {OB_JOB_RESTARTING, OB_JOB_PENDING};
    int64_t now = ob_now_ms();
    for (size_t s = 0; s < 2 && free_slots > 0; s++) {
        ob_job *jobs = NULL;
        size_t n = 0;
        int more = 0;
        if (ob_store_list_jobs(svc->store, order[s], 0, 50, &jobs, &n, &more, NULL)) return;
        for (size_t i = 0; i < n; i++) {
            ob_job *j = &jobs[i];
            if (j->state == OB_JOB_RESTARTING && j->next_attempt_ms > now) continue;
            if (find_run(svc, j->id)) continue;
            if (j->world_size > free_slots) break;
            if (launch(svc, j, NULL) == OB_OK && j->state == OB_JOB_RUNNING)
                free_slots -= j->world_size;
        }
        ob_job_array_free(jobs, n);
    }
}

static void tick(ob_service *svc)
{
    ob_launcher *l = svc->cfg.launcher;
    int64_t now = ob_now_ms();
    run *next;
    for (run *r = svc->runs; r; r = next) {
        next = r->next;
        if (!r->reported) read_log(svc, r);
        ob_launch_exit ex;
        if (l->ops->poll(l, &r->h, &ex, NULL) == OB_OK && ex.done) {
            finish_attempt(svc, r, &ex);
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

static void *supervisor_main(void *arg)
{
    ob_service *svc = arg;
    pthread_mutex_lock(&svc->mu);
    while (!svc->stopping) {
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

    /* Ask every attempt to checkpoint and stop; whatever is left after the grace is killed. */
    ob_launcher *l = svc->cfg.launcher;
    pthread_mutex_lock(&svc->mu);
    int64_t deadline = ob_now_ms() + svc->cfg.cancel_grace_ms;
    for (run *r = svc->runs; r; r = r->next)
        l->ops->signal(l, &r->h, SIGTERM, NULL);
    while (svc->runs) {
        int64_t now = ob_now_ms();
        run *next;
        for (run *r = svc->runs; r; r = next) {
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
                    a->ended_ms = ob_now_ms();
                    a->exit_code = ex.term_signal ? -1 : ex.exit_code;
                    ob__strlcpy(a->exit_reason, "coordinator shut down", sizeof a->exit_reason);
                    ob_store_put_attempt(svc->store, j.id, a, NULL);
                }
                /* Stays RUNNING: the next coordinator resumes it from its checkpoint. */
                commit(svc, &j, "attempt", "coordinator shutting down: workers stopped", NULL);
                ob_job_clear(&j);
            }
            unlink_run(svc, r);
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
    int used = used_slots(svc);
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
