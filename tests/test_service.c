/* The service functions and the supervisor, in process, against a scripted launcher: admission
 * and validation, scheduling under a slot limit, restarts with backoff, retries running out,
 * cancel (pending, running, with and without a cooperative SIGTERM), the progress timeout,
 * progress reports, recovery of jobs a killed coordinator left RUNNING, and the progress-line
 * parser. */
#include "fake_checkpoint.h"
#include "onebit/service.h"
#include "onebit/status_map.h"
#include "onebit/store.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- a directory listing that lags ---------------------------------------------------------- */

/* The binary is linked with --wrap=readdir (tests/service.cmake): every readdir of the service
 * and the checkpoint library comes here, and leaves out the entry named `hidden_entry`, as an
 * NFS client serves a directory's listing from its cache for up to a minute after another host
 * added an entry, while a lookup by that name already finds it. */
struct dirent *__real_readdir(DIR *d);
struct dirent *__wrap_readdir(DIR *d);
static pthread_mutex_t hidden_mu = PTHREAD_MUTEX_INITIALIZER;
static char hidden_entry[64];

struct dirent *__wrap_readdir(DIR *d)
{
    for (;;) {
        struct dirent *e = __real_readdir(d);
        if (!e) return NULL;
        pthread_mutex_lock(&hidden_mu);
        int hide = hidden_entry[0] && strcmp(e->d_name, hidden_entry) == 0;
        pthread_mutex_unlock(&hidden_mu);
        if (!hide) return e;
    }
}

static void hide_entry(const char *name)
{
    pthread_mutex_lock(&hidden_mu);
    snprintf(hidden_entry, sizeof hidden_entry, "%s", name ? name : "");
    pthread_mutex_unlock(&hidden_mu);
}

/* ---- a scripted launcher ------------------------------------------------------------------ */

#define MAX_LAUNCHES 32

typedef struct launch {
    char job_id[OB_JOB_ID_LEN];
    int attempt, world, resume;
    int done, exit_code, got_term, got_kill;
    /* What the store held when the workers were started (written ahead of them?) */
    ob_job_state stored_state;
    size_t stored_attempts;
    int stored_open; /* the newest stored attempt is this one, not yet ended */
    char report_token[128];
    char reason[128]; /* the platform's account of the end (ob_launch_exit.reason) */
    int permanent;
    int adopted; /* made by attach, not start */
    char log_path[OB_JOB_PATH_LEN];
    char ckpt_dir[OB_JOB_PATH_LEN]; /* where the attempt's checkpoints go (checkpoint_dir/job) */
    uint64_t memory_limit;          /* ob_launch_req.memory_limit */
} launch;

typedef struct mock {
    ob_launcher base;
    pthread_mutex_t mu;
    launch l[MAX_LAUNCHES];
    int n;
    int honor_term; /* SIGTERM ends the attempt with exit 0 */
    int stale_calls;
    char stale_job[OB_JOB_ID_LEN];
    int can_attach; /* attach succeeds (a launcher whose attempts outlive the coordinator) */
    int attach_calls;
    char attach_ext[OB_ATTEMPT_EXT_ID_LEN]; /* the ext_id attach was given */
    char db[256];       /* the service's store, read (by a connection of our own) at every start */
    int refuse_uploads; /* check_job refuses a submit with files */
    int check_calls;    /* check_job's calls */
    size_t checked_files; /* the n_files check_job was last given */
} mock;

static ob_status m_start(ob_launcher *lb, const ob_launch_req *req, ob_launch_handle *h,
                         ob_err *err)
{
    (void)err;
    mock *m = (mock *)lb;
    pthread_mutex_lock(&m->mu);
    launch *x = &m->l[m->n];
    memset(x, 0, sizeof *x);
    snprintf(x->job_id, sizeof x->job_id, "%s", req->job_id);
    x->attempt = req->attempt;
    x->world = req->world_size;
    x->resume = req->resume;
    x->memory_limit = req->memory_limit;
    snprintf(x->log_path, sizeof x->log_path, "%s", req->log_path ? req->log_path : "");
    snprintf(x->ckpt_dir, sizeof x->ckpt_dir, "%s/%s", req->checkpoint_dir, req->job_id);
    snprintf(x->report_token, sizeof x->report_token, "%s",
             req->report_token ? req->report_token : "");
    ob_store *st = NULL;
    ob_job j;
    if (m->db[0] && ob_store_open(&st, m->db, NULL) == OB_OK &&
        ob_store_get_job(st, req->job_id, &j, NULL) == OB_OK) {
        x->stored_state = j.state;
        x->stored_attempts = j.n_attempts;
        const ob_attempt *last = j.n_attempts ? &j.attempts[j.n_attempts - 1] : NULL;
        x->stored_open = last && last->number == req->attempt && last->ended_ms == 0;
        ob_job_clear(&j);
    }
    ob_store_close(st);
    h->pid = h->pgid = 1000 + m->n; /* the index into l, offset */
    if (m->can_attach) snprintf(h->ext_id, sizeof h->ext_id, "ext-%d", m->n);
    m->n++;
    pthread_mutex_unlock(&m->mu);
    return OB_OK;
}

static ob_status m_attach(ob_launcher *lb, ob_launch_handle *h, const ob_launch_req *req,
                          ob_err *err)
{
    mock *m = (mock *)lb;
    pthread_mutex_lock(&m->mu);
    m->attach_calls++;
    snprintf(m->attach_ext, sizeof m->attach_ext, "%s", h->ext_id);
    if (!m->can_attach) {
        pthread_mutex_unlock(&m->mu);
        return OB_ERR(err, OB_ERR_NOT_FOUND, "nothing of %s", req->job_id);
    }
    launch *x = &m->l[m->n];
    memset(x, 0, sizeof *x);
    snprintf(x->job_id, sizeof x->job_id, "%s", req->job_id);
    x->attempt = req->attempt;
    x->world = req->world_size;
    x->adopted = 1;
    h->pid = h->pgid = 1000 + m->n;
    m->n++;
    pthread_mutex_unlock(&m->mu);
    return OB_OK;
}

static ob_status m_poll(ob_launcher *lb, const ob_launch_handle *h, ob_launch_exit *ex, ob_err *err)
{
    (void)err;
    mock *m = (mock *)lb;
    pthread_mutex_lock(&m->mu);
    launch *x = &m->l[h->pid - 1000];
    memset(ex, 0, sizeof *ex);
    ex->done = x->done;
    ex->exit_code = x->exit_code;
    ex->term_signal = 0;
    snprintf(ex->reason, sizeof ex->reason, "%s", x->reason);
    ex->permanent = x->permanent;
    pthread_mutex_unlock(&m->mu);
    return OB_OK;
}

static ob_status m_signal(ob_launcher *lb, const ob_launch_handle *h, int sig, ob_err *err)
{
    (void)err;
    mock *m = (mock *)lb;
    pthread_mutex_lock(&m->mu);
    launch *x = &m->l[h->pid - 1000];
    if (sig == SIGTERM) {
        x->got_term++;
        if (m->honor_term) x->done = 1;
    } else if (sig == SIGKILL) {
        x->got_kill++;
        if (!x->done) {
            x->done = 1;
            x->exit_code = 137;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return OB_OK;
}

static int m_alive(ob_launcher *lb, const ob_launch_handle *h)
{
    mock *m = (mock *)lb;
    pthread_mutex_lock(&m->mu);
    int alive = !m->l[h->pid - 1000].done;
    pthread_mutex_unlock(&m->mu);
    return alive;
}

static void m_stop_stale(ob_launcher *lb, const ob_launch_handle *h, const ob_launch_req *req)
{
    (void)h;
    mock *m = (mock *)lb;
    m->stale_calls++;
    snprintf(m->stale_job, sizeof m->stale_job, "%s", req->job_id);
}

/* As a launcher whose workers cannot see the state directory (Kubernetes) refuses uploads. */
static ob_status m_check_job(const ob_launcher *lb, const ob_jobspec *spec, size_t n_files,
                             ob_err *err)
{
    (void)spec;
    mock *m = (mock *)lb;
    m->check_calls++;
    m->checked_files = n_files;
    if (m->refuse_uploads && n_files > 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "files: the mock launcher runs no uploads");
    return OB_OK;
}

static void m_destroy(ob_launcher *lb)
{
    (void)lb;
}

static const ob_launcher_ops mock_ops = {
    .ext_id_kind = "mock job",
    .start = m_start,
    .poll = m_poll,
    .signal = m_signal,
    .alive = m_alive,
    .stop_stale = m_stop_stale,
    .attach = m_attach,
    .check_job = m_check_job,
    .destroy = m_destroy,
};

/* Ends launch i with an exit code, as if the workers had exited. */
static void finish(mock *m, int i, int code)
{
    pthread_mutex_lock(&m->mu);
    m->l[i].exit_code = code;
    m->l[i].done = 1;
    pthread_mutex_unlock(&m->mu);
}

/* Attempt i ends as the real worker's does after its last step: the checkpoint of that step
 * written (good_spec: step 100), then exit 0. */
static void complete(mock *m, int i, long last_step)
{
    pthread_mutex_lock(&m->mu);
    char dir[OB_JOB_PATH_LEN];
    snprintf(dir, sizeof dir, "%s", m->l[i].ckpt_dir);
    pthread_mutex_unlock(&m->mu);
    ob_err err = {0};
    if (fake_checkpoint_write(dir, last_step, &err) != OB_OK) fail_msg("%s", err.msg);
    finish(m, i, 0);
}

static int launches(mock *m)
{
    pthread_mutex_lock(&m->mu);
    int n = m->n;
    pthread_mutex_unlock(&m->mu);
    return n;
}

/* ---- fixture ------------------------------------------------------------------------------ */

typedef struct fx {
    char dir[64];
    mock m;
    ob_service_config cfg;
    ob_service *svc;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/ob-svc-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    f->m.base.ops = &mock_ops;
    pthread_mutex_init(&f->m.mu, NULL);
    f->m.honor_term = 1;
    snprintf(f->m.db, sizeof f->m.db, "%s/jobs.db", f->dir);
    ob_service_config_default(&f->cfg);
    f->cfg.state_dir = f->dir;
    f->cfg.slots = 4;
    f->cfg.default_max_restarts = 2;
    f->cfg.backoff_ms = 50;
    f->cfg.backoff_max_ms = 200;
    f->cfg.cancel_grace_ms = 200;
    f->cfg.tick_ms = 10;
    f->cfg.launcher = &f->m.base;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    ob_service_destroy(f->svc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    int rc = system(cmd);
    pthread_mutex_destroy(&f->m.mu);
    free(f);
    return rc == 0 ? 0 : -1;
}

static void start(fx *f)
{
    ob_err err;
    assert_int_equal(ob_service_create(&f->svc, &f->cfg, &err), OB_OK);
    assert_int_equal(ob_service_start(f->svc, &err), OB_OK);
}

static const char *good_spec = "model: {type: mlp}\n"
                               "data: {type: synthetic_classification}\n"
                               "optimizer: {type: adam}\n"
                               "batch_size: 8\nsteps: 100\n";

static void submit(fx *f, int world, int max_restarts, char id[OB_JOB_ID_LEN])
{
    ob_submit_req req = {good_spec, strlen(good_spec), world, max_restarts, NULL, NULL, NULL, NULL,
                         0};
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_OK);
    assert_int_equal(j.state, OB_JOB_PENDING);
    snprintf(id, OB_JOB_ID_LEN, "%s", j.id);
    ob_job_clear(&j);
}

static ob_job_state state_of(fx *f, const char *id)
{
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    ob_job_state s = j.state;
    ob_job_clear(&j);
    return s;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits up to 3 s for the job to reach state. */
static int wait_state(fx *f, const char *id, ob_job_state want)
{
    for (int i = 0; i < 300; i++) {
        if (state_of(f, id) == want) return 1;
        sleep_ms(10);
    }
    return 0;
}

static int wait_launches(fx *f, int n)
{
    for (int i = 0; i < 300 && launches(&f->m) < n; i++)
        sleep_ms(10);
    return launches(&f->m) >= n;
}

/* ---- tests -------------------------------------------------------------------------------- */

/* A program's upload: sizes bounded before anything is read (a length of SIZE_MAX does not wrap
 * around), the limit named; one at the limit stored under the job; nothing left staged. */
static void test_upload_limits(void **state)
{
    fx *f = *state;
    f->cfg.max_upload_bytes = 100;
    start(f);
    static const char spec[] = "{\"program\": {\"entrypoint\": \"t.py\"}}";
    static uint8_t bytes[100];
    ob_upload_file huge[] = {{"t.py", 0644, NULL, SIZE_MAX}};
    ob_upload_file two[] = {{"t.py", 0644, bytes, 60}, {"u.py", 0644, bytes, 60}};
    ob_upload_file wraps[] = {{"t.py", 0644, bytes, 60}, {"u.py", 0644, NULL, SIZE_MAX - 30}};
    ob_upload_file missing[] = {{"u.py", 0644, bytes, 10}};
    ob_upload_file full[] = {{"t.py", 0755, bytes, 100}, {"lib/e.py", 0, NULL, 0}};
    struct {
        ob_upload_file *files;
        size_t n;
        const char *why;
    } bad[] = {
        {huge, 1, "more than the limit of 100 bytes (0.0 MiB) in all at files[0]"},
        {two, 2, "more than the limit of 100 bytes (0.0 MiB) in all at files[1] 'u.py'"},
        {wraps, 2, "more than the limit of 100 bytes"},
        {missing, 1, "program.entrypoint 't.py' is not one of the uploaded files"},
    };
    ob_job j;
    ob_err err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ob_submit_req req = {.spec = spec,
                             .spec_len = sizeof spec - 1,
                             .world_size = 1,
                             .max_restarts = -1,
                             .files = bad[i].files,
                             .n_files = bad[i].n};
        assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_ERR_INVALID_ARG);
        if (!strstr(err.msg, bad[i].why)) fail_msg("case %zu: %s", i, err.msg);
    }
    ob_submit_req req = {.spec = spec,
                         .spec_len = sizeof spec - 1,
                         .world_size = 1,
                         .max_restarts = -1,
                         .files = full,
                         .n_files = 2};
    assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_OK);
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, "%s/jobs/%s/program/t.py", f->dir, j.id);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 100);
    assert_int_equal(st.st_mode & 0777, 0700);
    snprintf(path, sizeof path, "%s/jobs/%s/program/lib/e.py", f->dir, j.id);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    ob_job_clear(&j);
    snprintf(path, sizeof path, "%s/uploads", f->dir); /* the refused ones left nothing */
    DIR *d = opendir(path);
    assert_non_null(d);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    assert_int_equal(entries, 0);
}

/* The launcher's check_job at submit: its refusal is the submit's INVALID_ARG, with its message
 * as people see it (no source location), before anything is staged; a spec that does not parse
 * never reaches it; what it lets through is submitted as usual. */
static void test_launcher_refuses_at_submit(void **state)
{
    fx *f = *state;
    f->m.refuse_uploads = 1;
    start(f);
    static const char spec[] = "{\"program\": {\"entrypoint\": \"t.py\"}}";
    static uint8_t bytes[10];
    ob_upload_file files[] = {{"t.py", 0644, bytes, 10}};
    ob_submit_req req = {.spec = spec,
                         .spec_len = sizeof spec - 1,
                         .world_size = 1,
                         .max_restarts = -1,
                         .files = files,
                         .n_files = 1};
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_ERR_INVALID_ARG);
    if (!strstr(err.msg, "files: the mock launcher runs no uploads") ||
        strstr(err.msg, "test_service.c"))
        fail_msg("%s", err.msg);
    assert_int_equal(f->m.check_calls, 1);
    assert_int_equal(f->m.checked_files, 1);
    req.spec = "{\"program\": 1}";
    req.spec_len = strlen(req.spec);
    assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_ERR_INVALID_ARG);
    assert_int_equal(f->m.check_calls, 1);
    char path[600];
    snprintf(path, sizeof path, "%s/uploads", f->dir);
    DIR *d = opendir(path); /* absent, or empty */
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    assert_int_equal(entries, 0);
    ob_job *jobs;
    size_t n;
    char next[OB_PAGE_TOKEN_LEN];
    assert_int_equal(
        ob_service_list(f->svc, OB_JOB_UNSPECIFIED, NULL, 0, NULL, &jobs, &n, next, &err), OB_OK);
    assert_int_equal(n, 0);
    ob_job_array_free(jobs, n);
    char id[OB_JOB_ID_LEN];
    submit(f, 1, 0, id); /* a built-in job, no files: let through */
    assert_int_equal(f->m.check_calls, 2);
    assert_int_equal(f->m.checked_files, 0);
}

static void test_invalid_submit_changes_nothing(void **state)
{
    fx *f = *state;
    start(f);
    const char *bad = "model: {type: mlp}\ndata: {type: synthetic_classification}\n"
                      "optimizer: {type: adam, betta1: 0.9}\nbatch_size: 8\nsteps: 10\n";
    ob_submit_req req = {bad, strlen(bad), 9, 500, NULL, NULL, NULL, NULL, 0};
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "spec: optimizer.betta1: unknown field"));
    assert_non_null(strstr(err.msg, "world_size: 9 ranks exceed the service's 4 slots"));
    assert_non_null(strstr(err.msg, "max_restarts: expected 0 to 100"));
    ob_submit_req empty = {"", 0, 1, -1, NULL, NULL, NULL, NULL, 0};
    assert_int_equal(ob_service_submit(f->svc, &empty, &j, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "spec: missing"));
    ob_job *jobs;
    size_t n;
    char next[OB_PAGE_TOKEN_LEN];
    assert_int_equal(
        ob_service_list(f->svc, OB_JOB_UNSPECIFIED, NULL, 0, NULL, &jobs, &n, next, &err), OB_OK);
    assert_int_equal(n, 0);
    ob_job_array_free(jobs, n);
    assert_int_equal(
        ob_service_list(f->svc, OB_JOB_UNSPECIFIED, NULL, 0, "x1", &jobs, &n, next, &err),
        OB_ERR_INVALID_ARG);
    assert_int_equal(
        ob_service_list(f->svc, (ob_job_state)42, NULL, 0, NULL, &jobs, &n, next, &err),
        OB_ERR_INVALID_ARG);
    assert_int_equal(launches(&f->m), 0);
}

/* Appends lines to the log of launch i as its workers would (rank-tagged by mpirun). */
static void worker_says(mock *m, int i, const char *text)
{
    pthread_mutex_lock(&m->mu);
    FILE *f = fopen(m->l[i].log_path, "a");
    pthread_mutex_unlock(&m->mu);
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The reason an attempt ended is the workers' error, not a warning they printed after it. */
static void test_failure_reason_skips_warnings(void **state)
{
    fx *f = *state;
    start(f);
    char id[OB_JOB_ID_LEN];
    submit(f, 2, 0, id);
    assert_true(wait_launches(f, 1));
    assert_true(wait_state(f, id, OB_JOB_RUNNING));
    worker_says(&f->m, 0,
                "[1,0]<stderr>:onebit-worker: training failed: step 12: out of memory\n"
                "[1,1]<stderr>:onebit-worker: warning: --report: unauthenticated (continuing; "
                "progress stays in the log)\n");
    finish(&f->m, 0, 1);
    assert_true(wait_state(f, id, OB_JOB_FAILED));
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    if (!strstr(j.attempts[0].exit_reason, "training failed: step 12: out of memory"))
        fail_msg("exit reason: %s", j.attempts[0].exit_reason);
    ob_job_clear(&j);
}

static void test_restart_then_succeed(void **state)
{
    fx *f = *state;
    start(f);
    char id[OB_JOB_ID_LEN];
    submit(f, 2, -1, id);
    assert_true(wait_launches(f, 1));
    assert_true(wait_state(f, id, OB_JOB_RUNNING));
    assert_int_equal(f->m.l[0].world, 2);
    assert_int_equal(f->m.l[0].resume, 0);
    finish(&f->m, 0, 1); /* the workers fail */
    assert_true(wait_launches(f, 2));
    assert_int_equal(f->m.l[1].attempt, 2);
    assert_int_equal(f->m.l[1].resume, 1);
    complete(&f->m, 1, 100);
    assert_true(wait_state(f, id, OB_JOB_SUCCEEDED));
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    assert_int_equal(j.restarts, 1);
    assert_int_equal(j.n_attempts, 2);
    assert_int_equal(j.attempts[0].exit_code, 1);
    assert_non_null(strstr(j.attempts[0].exit_reason, "workers failed (exit code 1)"));
    assert_string_equal(j.attempts[1].exit_reason, "completed");
    ob_job_clear(&j);
    /* The history tells the story in order. */
    ob_job_event *evs;
    size_t n;
    assert_int_equal(ob_service_events(f->svc, id, 0, 100, &evs, &n, &err), OB_OK);
    const ob_job_state want[] = {OB_JOB_PENDING, OB_JOB_RUNNING, OB_JOB_RESTARTING, OB_JOB_RUNNING,
                                 OB_JOB_SUCCEEDED};
    assert_int_equal(n, 5);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(evs[i].state, want[i]);
    free(evs);
}

/* Exit code 0 without the checkpoint of the last step is a failed attempt, not a finished job:
 * srun exits 0 when its step fails to launch, and ranks stopped by a signal the service did not
 * send checkpoint and exit 0. The job restarts from its newest checkpoint, then succeeds. */
static void test_exit_zero_before_the_last_step(void **state)
{
    fx *f = *state;
    start(f);
    char id[OB_JOB_ID_LEN];
    submit(f, 1, -1, id);
    assert_true(wait_launches(f, 1));
    assert_true(wait_state(f, id, OB_JOB_RUNNING));
    ob_err err = {0};
    assert_int_equal(fake_checkpoint_write(f->m.l[0].ckpt_dir, 40, &err), OB_OK);
    finish(&f->m, 0, 0); /* exits 0 at step 40 of 100 */
    assert_true(wait_launches(f, 2));
    assert_int_equal(f->m.l[1].resume, 1);
    ob_job j;
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    assert_int_equal(j.restarts, 1);
    assert_int_equal(j.ckpt_step, 40);
    if (!strstr(
            j.attempts[0].exit_reason,
            "exited with code 0 without the checkpoint of their last step, 100 (newest: step 40)"))
        fail_msg("exit reason: %s", j.attempts[0].exit_reason);
    ob_job_clear(&j);
    finish(&f->m, 1, 0); /* no checkpoint at all past step 40 again */
    assert_true(wait_launches(f, 3));
    complete(&f->m, 2, 100);
    assert_true(wait_state(f, id, OB_JOB_SUCCEEDED));
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    assert_int_equal(j.restarts, 2);
    assert_int_equal(j.ckpt_step, 100);
    ob_job_clear(&j);
}

/* The attempt exits 0 after writing the checkpoint of its last step, which the directory's
 * listing does not show yet (a shared file system's cache, stood in for by the wrapped
 * readdir): found by its name, the job is done, not restarted. */
static void test_exit_zero_listing_lags(void **state)
{
    fx *f = *state;
    start(f);
    char id[OB_JOB_ID_LEN];
    submit(f, 1, 2, id);
    assert_true(wait_launches(f, 1));
    assert_true(wait_state(f, id, OB_JOB_RUNNING));
    ob_err err = {0};
    assert_int_equal(fake_checkpoint_write(f->m.l[0].ckpt_dir, 40, &err), OB_OK);
    hide_entry("step-00000100");
    DIR *d = opendir(f->m.l[0].ckpt_dir);
    assert_non_null(d);
    complete(&f->m, 0, 100);
    int listed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        listed += strcmp(e->d_name, "step-00000100") == 0;
    closedir(d);
    assert_int_equal(listed, 0); /* the stand-in hides it */
    assert_true(wait_state(f, id, OB_JOB_SUCCEEDED));
    hide_entry(NULL);
    ob_job j;
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    assert_int_equal(j.restarts, 0);
    assert_int_equal(j.ckpt_step, 100);
    assert_non_null(strstr(j.ckpt_path, "step-00000100"));
    ob_job_clear(&j);
    assert_int_equal(launches(&f->m), 1);
}

static void test_restarts_run_out(void **state)
{
    fx *f = *state;
    start(f);
    char id[OB_JOB_ID_LEN];
    submit(f, 1, 1, id);
    assert_true(wait_launches(f, 1));
    finish(&f->m, 0, 1);
    assert_true(wait_launches(f, 2));
    finish(&f->m, 1, 137);
    assert_true(wait_state(f, id, OB_JOB_FAILED));
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    assert_non_null(strstr(j.message, "attempt 2 ended: workers failed (exit code 137)"));
    assert_non_null(strstr(j.message, "no restarts left"));
    ob_job_clear(&j);
    sleep_ms(100);
    assert_int_equal(launches(&f->m), 2);
}

/* The worker's deterministic failures (a bad spec, a diverged run, unusable input) end the job
 * at once, restarts left or not, and say why; the others are retried. */
static void test_permanent_failures(void **state)
{
    fx *f = *state;
    start(f);
    const struct {
        int code;
        const char *why;
    } cases[] = {
        {2, "not retried: the job spec or the worker's command line is invalid"},
        {3, "not retried: the training diverged (the loss is not finite)"},
        {4, "not retried: its data, checkpoint or warm-start source cannot be used"},
    };
    for (int i = 0; i < 3; i++) {
        char id[OB_JOB_ID_LEN];
        submit(f, 1, 2, id);
        assert_true(wait_launches(f, i + 1));
        finish(&f->m, i, cases[i].code);
        assert_true(wait_state(f, id, OB_JOB_FAILED));
        ob_job j;
        ob_err err;
        assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
        if (!strstr(j.message, cases[i].why)) fail_msg("exit %d: %s", cases[i].code, j.message);
        assert_int_equal(j.restarts, 0);
        assert_int_equal(j.n_attempts, 1);
        ob_job_clear(&j);
    }
    sleep_ms(100);
    assert_int_equal(launches(&f->m), 3);
}

static void test_slots(void **state)
{
    fx *f = *state;
    f->cfg.slots = 2;
    start(f);
    char a[OB_JOB_ID_LEN], b[OB_JOB_ID_LEN];
    submit(f, 2, 0, a);
    submit(f, 2, 0, b);
    assert_true(wait_state(f, a, OB_JOB_RUNNING));
    sleep_ms(100);
    assert_int_equal(state_of(f, b), OB_JOB_PENDING);
    assert_int_equal(launches(&f->m), 1);
    finish(&f->m, 0, 0);
    assert_true(wait_state(f, b, OB_JOB_RUNNING));
    assert_string_equal(f->m.l[1].job_id, b);
}

static void test_cancel(void **state)
{
    fx *f = *state;
    f->cfg.slots = 1;
    start(f);
    char a[OB_JOB_ID_LEN], b[OB_JOB_ID_LEN];
    submit(f, 1, 0, a);
    submit(f, 1, 0, b);
    assert_true(wait_state(f, a, OB_JOB_RUNNING));
    ob_job j;
    ob_err err;
    /* Pending: cancelled at once, never launched. */
    assert_int_equal(ob_service_cancel(f->svc, b, &j, &err), OB_OK);
    assert_int_equal(j.state, OB_JOB_CANCELLED);
    ob_job_clear(&j);
    /* Running: SIGTERM, the workers checkpoint and exit, CANCELLED. */
    assert_int_equal(ob_service_cancel(f->svc, a, &j, &err), OB_OK);
    assert_int_equal(j.cancel_requested, 1);
    ob_job_clear(&j);
    assert_true(wait_state(f, a, OB_JOB_CANCELLED));
    assert_int_equal(f->m.l[0].got_term, 1);
    assert_int_equal(f->m.l[0].got_kill, 0);
    assert_int_equal(ob_service_cancel(f->svc, a, &j, &err), OB_ERR_STATE);
    assert_non_null(strstr(err.msg, "already CANCELLED"));
    assert_int_equal(ob_service_cancel(f->svc, "job-999999", &j, &err), OB_ERR_NOT_FOUND);
    assert_int_equal(launches(&f->m), 1);
}

static void test_cancel_grace_then_kill(void **state)
{
    fx *f = *state;
    f->m.honor_term = 0; /* the workers ignore SIGTERM */
    start(f);
    char a[OB_JOB_ID_LEN];
    submit(f, 1, 3, a);
    assert_true(wait_state(f, a, OB_JOB_RUNNING));
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_cancel(f->svc, a, &j, &err), OB_OK);
    ob_job_clear(&j);
    sleep_ms(100);
    assert_int_equal(state_of(f, a), OB_JOB_RUNNING); /* within the grace period */
    assert_true(wait_state(f, a, OB_JOB_CANCELLED));
    assert_int_equal(f->m.l[0].got_kill, 1);
    assert_int_equal(launches(&f->m), 1); /* a cancelled job is not restarted */
}

static void test_progress_timeout(void **state)
{
    fx *f = *state;
    f->cfg.progress_timeout_ms = 150;
    start(f);
    char a[OB_JOB_ID_LEN];
    submit(f, 1, 0, a);
    assert_true(wait_state(f, a, OB_JOB_RUNNING));
    /* Reports keep it alive... */
    ob_report r;
    memset(&r, 0, sizeof r);
    snprintf(r.job_id, sizeof r.job_id, "%s", a);
    r.kind = OB_REPORT_STEP;
    ob_err err;
    for (int i = 1; i <= 5; i++) {
        r.progress.step = i * 10;
        int cancel = -1;
        assert_int_equal(ob_service_report(f->svc, &r, NULL, &cancel, &err), OB_OK);
        assert_int_equal(cancel, 0);
        sleep_ms(60);
    }
    assert_int_equal(state_of(f, a), OB_JOB_RUNNING);
    /* ...silence ends the attempt. */
    assert_true(wait_state(f, a, OB_JOB_FAILED));
    ob_job j;
    assert_int_equal(ob_service_get(f->svc, a, &j, &err), OB_OK);
    assert_non_null(strstr(j.message, "no progress report for"));
    assert_int_equal(j.progress.step, 50);
    ob_job_clear(&j);
}

static void test_reports(void **state)
{
    fx *f = *state;
    start(f);
    char a[OB_JOB_ID_LEN];
    submit(f, 2, 0, a);
    ob_report r;
    memset(&r, 0, sizeof r);
    ob_err err;
    snprintf(r.job_id, sizeof r.job_id, "job-777777");
    r.kind = OB_REPORT_STEP;
    assert_int_equal(ob_service_report(f->svc, &r, NULL, NULL, &err), OB_ERR_NOT_FOUND);
    assert_true(wait_state(f, a, OB_JOB_RUNNING));
    /* Read twice before the reports (the second read is the service's cached copy): the reads
     * after them must see them. */
    ob_job before;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(ob_service_get(f->svc, a, &before, &err), OB_OK);
        assert_int_equal(before.progress.step, 0);
        ob_job_clear(&before);
    }
    const char *lines[] = {
        "{\"event\":\"start\",\"world_size\":2,\"num_params\":1000}",
        "{\"event\":\"step\",\"step\":20,\"phase\":\"warmup\",\"loss\":0.5,\"lr\":0.001,"
        "\"samples_per_s\":900.5,\"bytes_sent\":4242,\"bytes_step\":10,\"freeze_ratio\":null}",
        "{\"event\":\"freeze\",\"step\":25,\"freeze_ratio\":0.98}",
        "{\"event\":\"checkpoint\",\"step\":30,\"ok\":true,\"path\":\"/ck/step-00000030\"}",
        "{\"event\":\"checkpoint\",\"step\":40,\"ok\":false,\"error\":\"disk full\"}",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        assert_int_equal(ob_report_parse_line(lines[i], strlen(lines[i]), &r), 1);
        snprintf(r.job_id, sizeof r.job_id, "%s", a);
        assert_int_equal(ob_service_report(f->svc, &r, NULL, NULL, &err), OB_OK);
    }
    ob_job j;
    assert_int_equal(ob_service_get(f->svc, a, &j, &err), OB_OK);
    assert_int_equal(j.progress.step, 20);
    assert_int_equal(j.progress.total_steps, 100);
    assert_string_equal(j.progress.phase, "warmup");
    assert_int_equal(j.progress.freeze_step, 25);
    assert_int_equal(j.progress.bytes_sent, 4242);
    /* fp32 ring allreduce, 2 ranks, 1000 parameters: 2 * 1/2 * 4 * 1000 bytes a step. */
    assert_int_equal(j.progress.bytes_uncompressed, 20 * 4000);
    assert_int_equal(j.ckpt_step, 30); /* the failed one does not count */
    assert_string_equal(j.ckpt_path, "/ck/step-00000030");
    ob_job_clear(&j);
    ob_job_event *evs;
    size_t n;
    assert_int_equal(ob_service_events(f->svc, a, 0, 100, &evs, &n, &err), OB_OK);
    assert_string_equal(evs[n - 1].kind, "checkpoint");
    assert_non_null(strstr(evs[n - 1].message, "failed: disk full"));
    free(evs);
    /* Cancel is visible to the reporting workers. */
    f->m.honor_term = 0;
    assert_int_equal(ob_service_cancel(f->svc, a, &j, &err), OB_OK);
    ob_job_clear(&j);
    int cancel = 0;
    memset(&r, 0, sizeof r);
    snprintf(r.job_id, sizeof r.job_id, "%s", a);
    r.kind = OB_REPORT_SUMMARY;
    assert_int_equal(ob_service_report(f->svc, &r, NULL, &cancel, &err), OB_OK);
    assert_int_equal(cancel, 1);
    char *metrics = NULL;
    assert_int_equal(ob_service_metrics(f->svc, &metrics, &err), OB_OK);
    assert_non_null(strstr(metrics, "onebit_jobs{state=\"RUNNING\"} 1\n"));
    assert_non_null(strstr(metrics, "onebit_job_step{job=\"job-000001\"} 20\n"));
    assert_non_null(strstr(metrics, "onebit_worker_reports_total 6\n"));
    free(metrics);
}

/* What a coordinator killed mid-run leaves in its store (written before the service opens it):
 * a job in `state` (cancel requested or not) whose attempt 1 is still open unless ended_ms. */
static void stored_job(fx *f, ob_job_state state, int cancel_requested, int max_restarts,
                       int64_t ended_ms, int pgid, char id[OB_JOB_ID_LEN])
{
    char db[128];
    snprintf(db, sizeof db, "%s/jobs.db", f->dir);
    ob_store *st;
    ob_err err;
    assert_int_equal(ob_store_open(&st, db, &err), OB_OK);
    ob_job j;
    memset(&j, 0, sizeof j);
    j.state = OB_JOB_PENDING;
    j.spec_json = strdup("{\"steps\":100}");
    j.world_size = 2;
    j.max_restarts = max_restarts;
    j.created_ms = j.updated_ms = 1;
    assert_int_equal(ob_store_create_job(st, &j, &err), OB_OK);
    j.state = state;
    j.cancel_requested = cancel_requested;
    assert_int_equal(ob_store_update_job(st, &j, NULL, &err), OB_OK);
    ob_attempt a = {.number = 1, .started_ms = 2, .ended_ms = ended_ms, .pgid = pgid};
    assert_int_equal(ob_store_put_attempt(st, j.id, &a, &err), OB_OK);
    snprintf(id, OB_JOB_ID_LEN, "%s", j.id);
    ob_job_clear(&j);
    ob_store_close(st);
}

/* A job in `state` that ended at finished_ms (0: not ended), with a "step" and a "state"
 * event, a log under jobs/<id>/ and a checkpoint under checkpoints/<id>/, as the store and the
 * state directory hold them. */
static void ended_job(fx *f, ob_job_state state, int64_t finished_ms, char id[OB_JOB_ID_LEN])
{
    char path[512];
    snprintf(path, sizeof path, "%s/jobs.db", f->dir);
    ob_store *st;
    ob_err err;
    assert_int_equal(ob_store_open(&st, path, &err), OB_OK);
    ob_job j;
    memset(&j, 0, sizeof j);
    j.state = OB_JOB_PENDING;
    j.spec_json = strdup("{\"steps\":100}");
    j.world_size = 1;
    j.created_ms = j.updated_ms = 1;
    assert_int_equal(ob_store_create_job(st, &j, &err), OB_OK);
    ob_job_event ev = {.time_ms = 2, .kind = "step", .state = OB_JOB_RUNNING};
    assert_int_equal(ob_store_update_job(st, &j, &ev, &err), OB_OK);
    j.state = state;
    j.finished_ms = j.updated_ms = finished_ms ? finished_ms : 3;
    ob_job_event end = {.time_ms = j.updated_ms, .kind = "state", .state = state};
    assert_int_equal(ob_store_update_job(st, &j, &end, &err), OB_OK);
    snprintf(id, OB_JOB_ID_LEN, "%s", j.id);
    ob_job_clear(&j);
    ob_store_close(st);
    snprintf(path, sizeof path,
             "mkdir -p '%s/jobs/%s' '%s/checkpoints/%s/step-00000010' && "
             "echo log > '%s/jobs/%s/log' && echo 10 > '%s/checkpoints/%s/step-00000010/state.h5'",
             f->dir, id, f->dir, id, f->dir, id, f->dir, id);
    assert_int_equal(system(path), 0);
}

static int exists(fx *f, const char *sub, const char *id)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", f->dir, sub, id);
    return access(path, F_OK) == 0;
}

/* Retention: jobs that ended before the period are deleted with their events, log and
 * checkpoints; later ones, and jobs that have not ended, are kept. The clock is the caller's. */
static void test_retention(void **state)
{
    fx *f = *state;
    const int64_t day = 86400000;
    char a[OB_JOB_ID_LEN], b[OB_JOB_ID_LEN], c[OB_JOB_ID_LEN];
    ended_job(f, OB_JOB_SUCCEEDED, 1000, a);
    ended_job(f, OB_JOB_CANCELLED, 2 * day, b);
    ended_job(f, OB_JOB_PENDING, 0, c); /* waits to run: never pruned */
    f->cfg.retention_ms = day;
    ob_err err;
    /* Created, not started: the supervisor's own rounds (on the real clock) stay out of it. */
    assert_int_equal(ob_service_create(&f->svc, &f->cfg, &err), OB_OK);
    int deleted = -1;
    assert_int_equal(ob_service_prune(f->svc, 1000 + day, &deleted, &err), OB_OK);
    assert_int_equal(deleted, 0); /* a is exactly one period old: kept */
    assert_int_equal(ob_service_prune(f->svc, 1001 + day, &deleted, &err), OB_OK);
    assert_int_equal(deleted, 1);
    ob_job j;
    assert_int_equal(ob_service_get(f->svc, a, &j, &err), OB_ERR_NOT_FOUND);
    ob_job_event *evs = NULL;
    size_t n = 0;
    assert_int_not_equal(ob_service_events(f->svc, a, 0, 10, &evs, &n, &err), OB_OK);
    free(evs);
    assert_false(exists(f, "jobs", a));
    assert_false(exists(f, "checkpoints", a));
    assert_true(exists(f, "jobs", b) && exists(f, "checkpoints", b));
    assert_int_equal(ob_service_events(f->svc, b, 0, 10, &evs, &n, &err), OB_OK);
    assert_int_equal(n, 3); /* submitted, a step, the end */
    free(evs);
    /* Later: b's turn; c, which has not ended, stays whatever its age. */
    assert_int_equal(ob_service_prune(f->svc, 3 * day + 1, &deleted, &err), OB_OK);
    assert_int_equal(deleted, 1);
    assert_int_equal(ob_service_get(f->svc, b, &j, &err), OB_ERR_NOT_FOUND);
    assert_false(exists(f, "checkpoints", b));
    assert_int_equal(ob_service_prune(f->svc, 1000 * day, &deleted, &err), OB_OK);
    assert_int_equal(deleted, 0);
    assert_int_equal(ob_service_get(f->svc, c, &j, &err), OB_OK);
    ob_job_clear(&j);
    assert_true(exists(f, "jobs", c));
}

/* Without a retention period nothing is pruned, however old. */
static void test_retention_off(void **state)
{
    fx *f = *state;
    char a[OB_JOB_ID_LEN];
    ended_job(f, OB_JOB_FAILED, 1000, a);
    ob_err err;
    assert_int_equal(ob_service_create(&f->svc, &f->cfg, &err), OB_OK);
    int deleted = -1;
    assert_int_equal(ob_service_prune(f->svc, 1000000 * (int64_t)86400000, &deleted, &err), OB_OK);
    assert_int_equal(deleted, 0);
    ob_job j;
    assert_int_equal(ob_service_get(f->svc, a, &j, &err), OB_OK);
    ob_job_clear(&j);
    assert_true(exists(f, "checkpoints", a));
}

static void test_recovery(void **state)
{
    fx *f = *state;
    /* What a coordinator killed mid-run leaves: a RUNNING job with an attempt still open. */
    ob_err err;
    ob_job j;
    memset(&j, 0, sizeof j);
    stored_job(f, OB_JOB_RUNNING, 0, 0, 0, 4321, j.id);

    start(f);
    assert_int_equal(f->m.stale_calls, 1);
    assert_string_equal(f->m.stale_job, j.id);
    assert_true(wait_launches(f, 1));
    assert_int_equal(f->m.l[0].resume, 1);
    assert_int_equal(f->m.l[0].attempt, 2);
    finish(&f->m, 0, 0);
    assert_true(wait_state(f, j.id, OB_JOB_SUCCEEDED));
    ob_job got;
    assert_int_equal(ob_service_get(f->svc, j.id, &got, &err), OB_OK);
    assert_string_equal(got.attempts[0].exit_reason, "coordinator restarted");
    assert_int_equal(got.restarts, 0); /* not the job's fault: no restart used up */
    ob_job_clear(&got);
    ob_job_clear(&j);
}

/* Gives attempt 1 of job id in the service's store (not open yet) the launcher id ext. */
static void set_ext_id(fx *f, const char *id, const char *ext)
{
    char db[128];
    snprintf(db, sizeof db, "%s/jobs.db", f->dir);
    ob_store *st;
    ob_job j;
    ob_err err;
    assert_int_equal(ob_store_open(&st, db, &err), OB_OK);
    assert_int_equal(ob_store_get_job(st, id, &j, &err), OB_OK);
    assert_int_equal(j.n_attempts, 1);
    snprintf(j.attempts[0].ext_id, sizeof j.attempts[0].ext_id, "%s", ext);
    assert_int_equal(ob_store_put_attempt(st, id, &j.attempts[0], &err), OB_OK);
    ob_job_clear(&j);
    ob_store_close(st);
}

/* A launcher whose attempts outlive the coordinator (Slurm): the restarted coordinator takes
 * the running attempt over by its id instead of stopping it and launching another. */
static void test_recovery_reattaches(void **state)
{
    fx *f = *state;
    char id[OB_JOB_ID_LEN];
    stored_job(f, OB_JOB_RUNNING, 0, 3, 0, 0, id);
    set_ext_id(f, id, "777");
    f->m.can_attach = 1;
    start(f);
    assert_int_equal(f->m.attach_calls, 1);
    assert_string_equal(f->m.attach_ext, "777");
    assert_int_equal(f->m.stale_calls, 0);
    assert_true(wait_launches(f, 1));
    assert_int_equal(f->m.l[0].adopted, 1);
    assert_int_equal(f->m.l[0].attempt, 1);
    assert_int_equal(state_of(f, id), OB_JOB_RUNNING);
    finish(&f->m, 0, 0);
    assert_true(wait_state(f, id, OB_JOB_SUCCEEDED));
    ob_job got;
    ob_err err;
    assert_int_equal(ob_service_get(f->svc, id, &got, &err), OB_OK);
    assert_int_equal(got.n_attempts, 1); /* no second attempt */
    assert_string_equal(got.attempts[0].ext_id, "777");
    assert_string_equal(got.attempts[0].exit_reason, "completed");
    assert_int_equal(got.restarts, 0);
    ob_job_clear(&got);
    assert_int_equal(launches(&f->m), 1);
}

/* A launcher that cannot find the attempt any more: stopped and relaunched, as before. */
static void test_recovery_attach_not_found(void **state)
{
    fx *f = *state;
    char id[OB_JOB_ID_LEN];
    stored_job(f, OB_JOB_RUNNING, 0, 3, 0, 0, id);
    set_ext_id(f, id, "778");
    start(f);
    assert_int_equal(f->m.attach_calls, 1);
    assert_int_equal(f->m.stale_calls, 1);
    assert_true(wait_launches(f, 1));
    assert_int_equal(f->m.l[0].adopted, 0);
    assert_int_equal(f->m.l[0].attempt, 2);
    assert_int_equal(f->m.l[0].resume, 1);
    finish(&f->m, 0, 0);
    assert_true(wait_state(f, id, OB_JOB_SUCCEEDED));
}

/* The platform's account of an end: a lost node is retried and named in the attempt's reason;
 * one the platform calls permanent (out of memory) fails the job at once, restarts left or not;
 * the id of each attempt is kept. */
static void test_platform_reasons(void **state)
{
    fx *f = *state;
    f->m.can_attach = 1;
    start(f);
    char id[OB_JOB_ID_LEN];
    submit(f, 2, 3, id);
    assert_true(wait_launches(f, 1));
    pthread_mutex_lock(&f->m.mu);
    snprintf(f->m.l[0].reason, sizeof f->m.l[0].reason, "mock job ext-0 NODE_FAIL: a node died");
    pthread_mutex_unlock(&f->m.mu);
    finish(&f->m, 0, -1);
    assert_true(wait_launches(f, 2));
    pthread_mutex_lock(&f->m.mu);
    snprintf(f->m.l[1].reason, sizeof f->m.l[1].reason, "mock job ext-1 OUT_OF_MEMORY: more");
    f->m.l[1].permanent = 1;
    pthread_mutex_unlock(&f->m.mu);
    finish(&f->m, 1, -1);
    assert_true(wait_state(f, id, OB_JOB_FAILED));
    ob_job got;
    ob_err err;
    assert_int_equal(ob_service_get(f->svc, id, &got, &err), OB_OK);
    assert_int_equal(got.n_attempts, 2);
    assert_int_equal(got.restarts, 1);
    assert_string_equal(got.attempts[0].ext_id, "ext-0");
    assert_string_equal(got.attempts[1].ext_id, "ext-1");
    assert_non_null(strstr(got.attempts[0].exit_reason, "NODE_FAIL: a node died"));
    assert_non_null(strstr(got.attempts[1].exit_reason, "OUT_OF_MEMORY"));
    assert_non_null(strstr(got.message, "not retried"));
    ob_job_clear(&got);
    assert_int_equal(launches(&f->m), 2);
}

/* A coordinator killed while a cancelled job's workers were stopping: the restarted one stops
 * what is left of them and ends the job CANCELLED instead of launching it again. */
/* The attempt is committed before its workers exist: a coordinator killed right after the
 * launch finds it open and stops the workers instead of leaving orphans beside a second
 * attempt on the same checkpoint folder. */
static void test_attempt_written_ahead(void **state)
{
    fx *f = *state;
    start(f);
    char a[OB_JOB_ID_LEN];
    submit(f, 2, 1, a);
    assert_true(wait_launches(f, 1));
    assert_int_equal(f->m.l[0].stored_state, OB_JOB_RUNNING);
    assert_int_equal(f->m.l[0].stored_attempts, 1);
    assert_int_equal(f->m.l[0].stored_open, 1);
    finish(&f->m, 0, 1); /* fails: restarted */
    assert_true(wait_launches(f, 2));
    assert_int_equal(f->m.l[1].stored_state, OB_JOB_RUNNING);
    assert_int_equal(f->m.l[1].stored_attempts, 2);
    assert_int_equal(f->m.l[1].stored_open, 1);
    complete(&f->m, 1, 100);
    assert_true(wait_state(f, a, OB_JOB_SUCCEEDED));
}

/* Each attempt has its own report credential: a report without it, with another's, or with an
 * earlier attempt's is refused; the in-process log reader (NULL) needs none. */
static void test_report_credentials(void **state)
{
    fx *f = *state;
    start(f);
    char a[OB_JOB_ID_LEN], b[OB_JOB_ID_LEN];
    submit(f, 2, 1, a);
    submit(f, 1, 0, b);
    assert_true(wait_launches(f, 2));
    int ia = strcmp(f->m.l[0].job_id, a) == 0 ? 0 : 1, ib = 1 - ia;
    char first[128];
    snprintf(first, sizeof first, "%s", f->m.l[ia].report_token);
    assert_int_equal(strlen(first), 64);
    assert_string_not_equal(first, f->m.l[ib].report_token);
    ob_report r;
    memset(&r, 0, sizeof r);
    snprintf(r.job_id, sizeof r.job_id, "%s", a);
    r.kind = OB_REPORT_STEP;
    r.progress.step = 5;
    ob_err err;
    int cancel = -1;
    assert_int_equal(ob_service_report(f->svc, &r, "", &cancel, &err), OB_ERR_UNAUTHENTICATED);
    assert_int_equal(cancel, 0); /* nothing told to a caller without the credential */
    assert_non_null(strstr(err.msg, "not the report credential of its current attempt"));
    assert_int_equal(ob_service_report(f->svc, &r, "0123", NULL, &err), OB_ERR_UNAUTHENTICATED);
    assert_int_equal(ob_service_report(f->svc, &r, f->m.l[ib].report_token, NULL, &err),
                     OB_ERR_UNAUTHENTICATED); /* another job's */
    assert_int_equal(ob_service_report(f->svc, &r, first, NULL, &err), OB_OK);
    assert_int_equal(ob_service_report(f->svc, &r, NULL, NULL, &err), OB_OK);
    /* The attempt fails; the next one has a credential of its own. */
    finish(&f->m, ia, 1);
    assert_true(wait_launches(f, 3));
    assert_string_equal(f->m.l[2].job_id, a);
    assert_string_not_equal(f->m.l[2].report_token, first);
    assert_int_equal(ob_service_report(f->svc, &r, first, NULL, &err), OB_ERR_UNAUTHENTICATED);
    assert_int_equal(ob_service_report(f->svc, &r, f->m.l[2].report_token, NULL, &err), OB_OK);
    ob_job j;
    assert_int_equal(ob_service_get(f->svc, a, &j, &err), OB_OK);
    assert_int_equal(j.progress.step, 5);
    ob_job_clear(&j);
}

/* Submits a spec reading data from data_path (and warm-starting from `from`, if not NULL);
 * returns the status, the message in msg. */
static ob_status submit_paths(fx *f, const char *data_path, const char *from, char *msg, size_t cap)
{
    char spec[2048];
    snprintf(spec, sizeof spec,
             "model: {type: mlp}\ndata: {type: idx, path: '%s'}\n"
             "optimizer: {type: %s}\nbatch_size: 8\nsteps: 10\n%s%s%s",
             data_path, from ? "onebit_adam" : "adam", from ? "warm_start: {from: '" : "",
             from ? from : "", from ? "'}\n" : "");
    ob_submit_req req = {spec, strlen(spec), 1, 0, NULL, NULL, NULL, NULL, 0};
    ob_job j;
    ob_err err;
    ob_err_clear(&err);
    ob_status st = ob_service_submit(f->svc, &req, &j, &err);
    if (st == OB_OK) ob_job_clear(&j);
    snprintf(msg, cap, "%s", err.msg);
    return st;
}

/* A job reads its data only under the data roots and warm-starts only from under the checkpoint
 * roots, after symbolic links and ".." are resolved. */
static void test_read_roots(void **state)
{
    fx *f = *state;
    start(f);
    char data[256], inside[300], link[300], dotdot[300], ck[300], msg[OB_ERR_MSG_LEN];
    snprintf(data, sizeof data, "%s/data", f->dir);
    snprintf(inside, sizeof inside, "%s/mnist", data);
    snprintf(link, sizeof link, "%s/escape", data);
    snprintf(dotdot, sizeof dotdot, "%s/mnist/../..", data);
    snprintf(ck, sizeof ck, "%s/checkpoints/old-job", f->dir);
    assert_int_equal(mkdir(data, 0755), 0);
    assert_int_equal(mkdir(inside, 0755), 0);
    assert_int_equal(mkdir(ck, 0755), 0);
    assert_int_equal(symlink("/etc", link), 0);

    assert_int_equal(submit_paths(f, inside, NULL, msg, sizeof msg), OB_OK);
    assert_int_equal(submit_paths(f, inside, ck, msg, sizeof msg), OB_OK);
    const char *outside[] = {"/", "/etc", link, dotdot};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
        assert_int_equal(submit_paths(f, outside[i], NULL, msg, sizeof msg), OB_ERR_INVALID_ARG);
        assert_non_null(strstr(msg, "spec: data.path: '"));
        assert_non_null(strstr(msg, "is outside the roots this service reads from"));
        assert_non_null(strstr(msg, "/usr/share/datasets"));
    }
    /* Outside the roots, a missing path gets the answer an existing one gets (whether a file
     * exists there is not the caller's business); under a root, it is named as missing. */
    assert_int_equal(submit_paths(f, "/no/such/dir", NULL, msg, sizeof msg), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(msg, "is outside the roots this service reads from"));
    assert_null(strstr(msg, "No such file or directory"));
    char missing[sizeof inside + 16];
    snprintf(missing, sizeof missing, "%s/nothing", inside);
    assert_int_equal(submit_paths(f, missing, NULL, msg, sizeof msg), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(msg, "No such file or directory"));
    /* Another service's checkpoints, or the coordinator's own environment. */
    assert_int_equal(submit_paths(f, inside, "/proc/self", msg, sizeof msg), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(msg, "spec: warm_start.from: '/proc/self' is outside the roots"));
    assert_int_equal(submit_paths(f, inside, data, msg, sizeof msg), OB_ERR_INVALID_ARG);
    ob_service_destroy(f->svc);
    f->svc = NULL;

    /* Roots of one's own; "/" allows everything. */
    const char *everything[] = {"/", NULL};
    f->cfg.data_roots = everything;
    start(f);
    assert_int_equal(submit_paths(f, "/etc", NULL, msg, sizeof msg), OB_OK);
    ob_service_destroy(f->svc);
    f->svc = NULL;
    const char *relative[] = {"data", NULL};
    f->cfg.data_roots = relative;
    ob_err err;
    assert_int_equal(ob_service_create(&f->svc, &f->cfg, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "not an absolute path"));
    f->cfg.data_roots = NULL;
}

/* A request id makes a submit idempotent, across a restart of the service too; the same id with
 * another spec or size is refused. */
static void test_idempotent_submit(void **state)
{
    fx *f = *state;
    start(f);
    ob_submit_req req = {good_spec, strlen(good_spec), 1, 0, "retry-me:1", NULL, NULL, NULL, 0};
    ob_job a, b;
    ob_err err;
    assert_int_equal(ob_service_submit(f->svc, &req, &a, &err), OB_OK);
    assert_string_equal(a.request_id, "retry-me:1");
    assert_int_equal(ob_service_submit(f->svc, &req, &b, &err), OB_OK);
    assert_string_equal(a.id, b.id);
    ob_job_clear(&b);
    ob_submit_req other = req;
    other.world_size = 2;
    assert_int_equal(ob_service_submit(f->svc, &other, &b, &err), OB_ERR_STATE);
    assert_non_null(strstr(err.msg, "request_id 'retry-me:1' already made job"));
    ob_submit_req bad = req;
    bad.request_id = "no spaces please";
    assert_int_equal(ob_service_submit(f->svc, &bad, &b, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "request_id: 1 to 128 characters"));
    ob_job *jobs = NULL;
    size_t n = 0;
    char next[OB_PAGE_TOKEN_LEN];
    assert_int_equal(
        ob_service_list(f->svc, OB_JOB_UNSPECIFIED, NULL, 0, "", &jobs, &n, next, &err), OB_OK);
    assert_int_equal(n, 1);
    ob_job_array_free(jobs, n);
    ob_service_destroy(f->svc);
    f->svc = NULL;
    start(f);
    assert_int_equal(ob_service_submit(f->svc, &req, &b, &err), OB_OK);
    assert_string_equal(a.id, b.id);
    ob_job_clear(&a);
    ob_job_clear(&b);
}

/* Labels are canonical (sorted by key) and select jobs in a list; bad ones are refused. */
static void test_labels(void **state)
{
    fx *f = *state;
    start(f);
    const char *sets[] = {"team=nlp,run=7", "team=vision", "", "run=7,team=nlp,owner=ana"};
    ob_err err;
    for (int i = 0; i < 4; i++) {
        ob_submit_req req = {good_spec, strlen(good_spec), 1, 0, NULL, sets[i], NULL, NULL, 0};
        ob_job j;
        assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_OK);
        if (i == 0) assert_string_equal(j.labels, "run=7,team=nlp");
        ob_job_clear(&j);
    }
    const struct {
        const char *selector;
        size_t n;
    } cases[] = {{"team=nlp", 2},    {"run=7,team=nlp", 2}, {"team=nlp,owner=ana", 1},
                 {"team=vision", 1}, {"team=nl", 0},        {"", 4}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ob_job *jobs = NULL;
        size_t n = 0;
        char next[OB_PAGE_TOKEN_LEN];
        assert_int_equal(ob_service_list(f->svc, OB_JOB_UNSPECIFIED, cases[c].selector, 0, "",
                                         &jobs, &n, next, &err),
                         OB_OK);
        if (n != cases[c].n) fail_msg("selector '%s': %zu jobs", cases[c].selector, n);
        ob_job_array_free(jobs, n);
    }
    const char *bad[] = {"Team=x", "team", "team=a,team=b", "=x", "team=a b", "a=1,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ob_submit_req req = {good_spec, strlen(good_spec), 1, 0, NULL, bad[i], NULL, NULL, 0};
        ob_job j;
        if (ob_service_submit(f->svc, &req, &j, &err) != OB_ERR_INVALID_ARG)
            fail_msg("labels '%s' accepted", bad[i]);
        assert_non_null(strstr(err.msg, "labels: "));
    }
    ob_job *jobs = NULL;
    size_t n = 0;
    char next[OB_PAGE_TOKEN_LEN];
    assert_int_equal(
        ob_service_list(f->svc, OB_JOB_UNSPECIFIED, "bad selector", 0, "", &jobs, &n, next, &err),
        OB_ERR_INVALID_ARG);
}

/* A job past its deadline is stopped like a cancel (SIGTERM, a checkpoint) and ends FAILED,
 * "deadline exceeded", without a restart; deadlines are validated strictly. */
static void test_deadline(void **state)
{
    fx *f = *state;
    start(f);
    ob_err err;
    const char *bad[] = {"0s", "2",   "1.5h", "-1h",  "1m1h",        "30m30m",
                         "h",  "2hh", "1 h",  "367d", "9999999999s", "1h30"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ob_submit_req req = {good_spec, strlen(good_spec), 1, 0, NULL, NULL, bad[i], NULL, 0};
        ob_job j;
        if (ob_service_submit(f->svc, &req, &j, &err) != OB_ERR_INVALID_ARG)
            fail_msg("deadline '%s' accepted", bad[i]);
        assert_non_null(strstr(err.msg, "deadline: "));
    }
    ob_submit_req req = {good_spec, strlen(good_spec), 1, 3, NULL, NULL, "1s", NULL, 0};
    ob_job j;
    assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_OK);
    assert_int_equal(j.deadline_ms, 1000);
    char a[OB_JOB_ID_LEN];
    snprintf(a, sizeof a, "%s", j.id);
    ob_job_clear(&j);
    char b[OB_JOB_ID_LEN];
    submit(f, 1, 3, b); /* no deadline: runs on */
    assert_true(wait_state(f, a, OB_JOB_RUNNING));
    sleep_ms(500);
    assert_int_equal(state_of(f, a), OB_JOB_RUNNING);
    for (int i = 0; i < 300 && state_of(f, a) == OB_JOB_RUNNING; i++)
        sleep_ms(10);
    assert_int_equal(state_of(f, a), OB_JOB_FAILED);
    assert_int_equal(ob_service_get(f->svc, a, &j, &err), OB_OK);
    if (strncmp(j.message, "deadline exceeded: not done 1s after its first start", 52) != 0)
        fail_msg("message: %s", j.message);
    assert_int_equal(j.restarts, 0);
    assert_int_equal(j.n_attempts, 1);
    assert_true(j.finished_ms - j.started_ms >= 1000);
    ob_job_clear(&j);
    assert_int_equal(launches(&f->m), 2); /* a and b, no restart of a */
    int term = 0;
    for (int i = 0; i < 2; i++)
        if (!strcmp(f->m.l[i].job_id, a)) term = f->m.l[i].got_term;
    assert_int_equal(term, 1);
    assert_int_equal(state_of(f, b), OB_JOB_RUNNING);
}

static void test_durations(void **state)
{
    (void)state;
    const struct {
        const char *text;
        int64_t ms;
    } good[] = {{"1s", 1000},           {"90s", 90000},
                {"10m", 600000},        {"2h", 7200000},
                {"1h30m", 5400000},     {"1d12h", 129600000},
                {"1d2h3m4s", 93784000}, {"366d", OB_DURATION_MAX_MS},
                {"000000001s", 1000}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t ms = -1;
        ob_err err;
        if (ob_duration_parse(good[i].text, &ms, &err) != OB_OK || ms != good[i].ms)
            fail_msg("'%s': %lld", good[i].text, (long long)ms);
    }
    const char *bad[] = {"",
                         "0s",
                         "0h0m",
                         "s",
                         "1",
                         "1x",
                         "1s1s",
                         "1s1m",
                         "+1s",
                         "1.0s",
                         "366d1s",
                         "1000000000s",
                         "1h ",
                         "\xff"
                         "1s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ms = -1;
        ob_err err;
        if (ob_duration_parse(bad[i], &ms, &err) != OB_ERR_INVALID_ARG || ms != 0)
            fail_msg("'%s' accepted", bad[i]);
    }
    char out[32];
    ob_duration_format(5400000, out, sizeof out);
    assert_string_equal(out, "1h30m");
    ob_duration_format(93784999, out, sizeof out);
    assert_string_equal(out, "1d2h3m4s");
    ob_duration_format(999, out, sizeof out);
    assert_string_equal(out, "0s");
    ob_duration_format(7200000, out, 3); /* truncated, terminated */
    assert_string_equal(out, "2h");
}

/* A job that has ended can be deleted, with or without its checkpoints; one that runs cannot. */
static void test_delete(void **state)
{
    fx *f = *state;
    start(f);
    char a[OB_JOB_ID_LEN], b[OB_JOB_ID_LEN];
    submit(f, 1, 0, a);
    submit(f, 1, 0, b);
    assert_true(wait_launches(f, 2));
    ob_err err;
    int deleted = -1;
    assert_int_equal(ob_service_delete(f->svc, a, 0, &deleted, &err), OB_ERR_STATE);
    assert_non_null(strstr(err.msg, "is RUNNING: cancel it, then delete it"));
    char dir[512];
    for (int i = 0; i < 2; i++) {
        const char *id = i ? b : a;
        for (int step = 10; step <= 20; step += 10) {
            snprintf(dir, sizeof dir, "%s/checkpoints/%s/step-%08d", f->dir, id, step);
            char cmd[1200];
            snprintf(cmd, sizeof cmd, "mkdir -p '%s' && touch '%s/state.h5'", dir, dir);
            assert_int_equal(system(cmd), 0);
        }
        complete(&f->m, strcmp(f->m.l[0].job_id, id) == 0 ? 0 : 1, 100);
        assert_true(wait_state(f, id, OB_JOB_SUCCEEDED));
    }
    assert_int_equal(ob_service_delete(f->svc, a, 0, &deleted, &err), OB_OK);
    assert_int_equal(deleted, 3); /* steps 10, 20 and the last, 100 */
    ob_job j;
    assert_int_equal(ob_service_get(f->svc, a, &j, &err), OB_ERR_NOT_FOUND);
    ob_job_event *evs = NULL;
    size_t n = 0;
    assert_int_equal(ob_service_events(f->svc, a, 0, 10, &evs, &n, &err), OB_ERR_NOT_FOUND);
    struct stat st;
    snprintf(dir, sizeof dir, "%s/checkpoints/%s", f->dir, a);
    assert_int_equal(stat(dir, &st), -1);
    snprintf(dir, sizeof dir, "%s/jobs/%s", f->dir, a);
    assert_int_equal(stat(dir, &st), -1);
    /* Kept checkpoints stay where a warm start can find them. */
    assert_int_equal(ob_service_delete(f->svc, b, 1, &deleted, &err), OB_OK);
    assert_int_equal(deleted, 0);
    snprintf(dir, sizeof dir, "%s/checkpoints/%s/step-00000020", f->dir, b);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(ob_service_delete(f->svc, b, 0, &deleted, &err), OB_ERR_NOT_FOUND);
    char *metrics = NULL;
    assert_int_equal(ob_service_metrics(f->svc, &metrics, &err), OB_OK);
    assert_non_null(strstr(metrics, "onebit_jobs{state=\"SUCCEEDED\"} 0\n"));
    free(metrics);
}

static void test_recovery_honours_cancel(void **state)
{
    fx *f = *state;
    ob_err err;
    char ids[2][OB_JOB_ID_LEN];
    stored_job(f, OB_JOB_RUNNING, 1, 3, 0, 4321, ids[0]);
    stored_job(f, OB_JOB_RESTARTING, 1, 3, 3, 4322, ids[1]); /* the attempt had ended */

    start(f);
    assert_int_equal(f->m.stale_calls, 1); /* the open attempt's processes are stopped */
    for (int i = 0; i < 2; i++) {
        assert_true(wait_state(f, ids[i], OB_JOB_CANCELLED));
        ob_job got;
        assert_int_equal(ob_service_get(f->svc, ids[i], &got, &err), OB_OK);
        assert_non_null(strstr(got.message, "cancelled"));
        assert_int_equal(got.n_attempts, 1);
        ob_job_clear(&got);
    }
    sleep_ms(300); /* several supervisor ticks: nothing is launched */
    assert_int_equal(f->m.n, 0);
}

static void test_default_world_size(void **state)
{
    fx *f = *state;
    f->cfg.default_world_size = 3;
    start(f);
    ob_submit_req req = {good_spec, strlen(good_spec), 0, -1, NULL, NULL, NULL, NULL, 0};
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_OK);
    assert_int_equal(j.world_size, 3);
    assert_int_equal(j.max_restarts, 2);
    ob_job_clear(&j);
}

static void test_visible_gpus(void **state)
{
    (void)state;
    const struct {
        const char *env;
        int want;
    } cases[] = {{"0,1", 2},
                 {"3", 1},
                 {"", 0},
                 {"-1", 0},
                 {"NoDevFiles", 0},
                 {"0,-1,2", 1},
                 {"GPU-8a7f,GPU-19c2", 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("CUDA_VISIBLE_DEVICES", cases[i].env, 1);
        assert_int_equal(ob_visible_gpus(), cases[i].want);
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    assert_true(ob_visible_gpus() >= 0);
}

static void test_parse_lines(void **state)
{
    (void)state;
    ob_report r;
    const char *notprogress[] = {
        "", "hello", "{\"event\":\"party\"}", "{\"event\":", "[1]", "{\"step\":3}"};
    for (size_t i = 0; i < sizeof notprogress / sizeof notprogress[0]; i++)
        assert_int_equal(ob_report_parse_line(notprogress[i], strlen(notprogress[i]), &r), 0);
    const char *resume = "{\"event\":\"resume\",\"step\":200,\"path\":\"/x/step-00000200\"}";
    assert_int_equal(ob_report_parse_line(resume, strlen(resume), &r), 1);
    assert_int_equal(r.kind, OB_REPORT_RESUME);
    assert_int_equal(r.ckpt_step, 200);
    const char *eval = "{\"event\":\"eval\",\"step\":50,\"eval_loss\":0.25,\"eval_accuracy\":0.9}";
    assert_int_equal(ob_report_parse_line(eval, strlen(eval), &r), 1);
    assert_true(r.eval_loss == 0.25 && r.eval_accuracy == 0.9);
    /* Lines tagged by mpirun --tag-output parse the same; a broken tag is not skipped. */
    const char *tagged = "[1,3]<stdout>:{\"event\":\"resume\",\"step\":70,\"path\":\"/x\"}";
    assert_int_equal(ob_report_parse_line(tagged, strlen(tagged), &r), 1);
    assert_int_equal(r.ckpt_step, 70);
    const char *broken[] = {"[1,3]<stdout>{\"event\":\"resume\"}",
                            "[1,x]<stdout>:{\"event\":\"resume\"}",
                            "[1,3<stdout>:{\"event\":\"resume\"}"};
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++)
        assert_int_equal(ob_report_parse_line(broken[i], strlen(broken[i]), &r), 0);
}

static void test_public_message(void **state)
{
    (void)state;
    char out[128];
    ob_status_public_message("no job with id 'x' (store.c:312)", out, sizeof out);
    assert_string_equal(out, "no job with id 'x'");
    ob_status_public_message("a (parenthesis) stays", out, sizeof out);
    assert_string_equal(out, "a (parenthesis) stays");
    ob_status_public_message("ratio (1:2)", out, sizeof out);
    assert_string_equal(out, "ratio (1:2)");
    ob_status_public_message(NULL, out, sizeof out);
    assert_string_equal(out, "");
}

/* --worker-memory-limit: auto, 0 or a size of at least 1 GiB; nothing that overflows. */
static void test_worker_memory_limit_parse(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int64_t want;
    } good[] = {
        {"auto", OB_WORKER_MEMORY_AUTO},
        {"0", 0},
        {"0G", 0},
        {"1024M", (int64_t)1 << 30},
        {"1073741824", (int64_t)1 << 30},
        {"4g", (int64_t)4 << 30},
        {"1T", (int64_t)1 << 40},
        {"1048576k", (int64_t)1 << 30},
        {"8388607T", (int64_t)8388607 << 40},
        {"9223372036854775807", INT64_MAX},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t v = 12345;
        ob_err err;
        if (ob_worker_memory_limit_parse(good[i].text, &v, &err) != OB_OK)
            fail_msg("'%s' refused: %s", good[i].text, err.msg);
        if (v != good[i].want) fail_msg("'%s': got %lld", good[i].text, (long long)v);
    }
    static const char *const bad[] = {
        "",
        "M",
        "10E",
        "1E",
        "8388608T",
        "9223372036854775808",
        "18446744073709551616",
        "1180591620717411303424",
        "-1",
        "+1G",
        " 1G",
        "1G ",
        "1GB",
        "1.5G",
        "1 G",
        "Auto",
        "auto ",
        "0x10000000",
        "none",
        "100M",
        "1073741823",
        "1",
        "256M",
        "1023M",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = 12345;
        ob_err err;
        ob_err_clear(&err);
        if (ob_worker_memory_limit_parse(bad[i], &v, &err) != OB_ERR_INVALID_ARG)
            fail_msg("'%s' accepted as %lld", bad[i], (long long)v);
        assert_int_equal(v, 12345);
        if (strncmp(err.msg, "--worker-memory-limit: ", 23) != 0) fail_msg("%s", err.msg);
    }
    int64_t v;
    ob_err err;
    assert_int_equal(ob_worker_memory_limit_parse("100M", &v, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "below the smallest limit, 1024 MiB"));
    assert_int_equal(ob_worker_memory_limit_parse("10E", &v, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "expected auto, 0 or a size"));
}

/* An attempt's limit: the setting, or twice the estimate plus 1 GiB, saturating. */
static void test_worker_memory_limit_for(void **state)
{
    (void)state;
    const uint64_t mib = (uint64_t)1 << 20;
    assert_true(ob_worker_memory_limit_for(0, 100 * mib) == 0);
    assert_true(ob_worker_memory_limit_for((int64_t)512 << 20, 900 * mib) == 512 * mib);
    assert_true(ob_worker_memory_limit_for(OB_WORKER_MEMORY_AUTO, 0) == 0);
    assert_true(ob_worker_memory_limit_for(OB_WORKER_MEMORY_AUTO, 100 * mib) == 1224 * mib);
    assert_true(ob_worker_memory_limit_for(OB_WORKER_MEMORY_AUTO, 1) == 1024 * mib + 2);
    assert_true(ob_worker_memory_limit_for(OB_WORKER_MEMORY_AUTO, UINT64_MAX) ==
                (uint64_t)INT64_MAX);
    uint64_t top = ((uint64_t)INT64_MAX - 1024 * mib) / 2;
    assert_true(ob_worker_memory_limit_for(OB_WORKER_MEMORY_AUTO, top) == top * 2 + 1024 * mib);
    assert_true(ob_worker_memory_limit_for(OB_WORKER_MEMORY_AUTO, top + 1) == (uint64_t)INT64_MAX);
    assert_true(ob_worker_memory_limit_for(-2, 100 * mib) == 0);
}

/* Exit statuses: 5 is memory, permanent only under a limit; signals are always retryable. */
static void test_worker_exit_judge(void **state)
{
    (void)state;
    const uint64_t lim = (uint64_t)256 << 20;
    ob_exit_verdict v;
    ob_worker_exit_judge(5, 0, lim, &v);
    assert_int_equal(v.permanent, 1);
    assert_string_equal(v.cause, "out of memory: the ranks exceeded the worker memory limit of "
                                 "256 MiB per process (--worker-memory-limit)");
    assert_non_null(strstr(v.why, "raise --worker-memory-limit"));
    ob_worker_exit_judge(5, 0, lim + 1, &v); /* whole MiB, rounded up */
    assert_non_null(strstr(v.cause, "limit of 257 MiB"));
    ob_worker_exit_judge(5, 0, 0, &v);
    assert_int_equal(v.permanent, 0);
    assert_string_equal(v.cause, "out of memory: an allocation of a rank failed");
    ob_worker_exit_judge(5, 9, lim, &v);
    assert_int_equal(v.permanent, 0);
    assert_string_equal(v.cause, "");
    /* 6: a program job's program fails the same way on every attempt (engine/python). */
    const int permanent[] = {2, 3, 4, 6};
    for (size_t i = 0; i < sizeof permanent / sizeof permanent[0]; i++) {
        ob_worker_exit_judge(permanent[i], 0, 0, &v);
        assert_int_equal(v.permanent, 1);
        assert_true(v.why[0] != '\0');
        assert_string_equal(v.cause, "");
    }
    const int retryable[] = {0, 1, 7, 127, 137, 255};
    for (size_t i = 0; i < sizeof retryable / sizeof retryable[0]; i++) {
        ob_worker_exit_judge(retryable[i], 0, lim, &v);
        assert_int_equal(v.permanent, 0);
        assert_string_equal(v.why, "");
    }
}

/* The service gives each attempt its limit, and a memory exit under it is not retried; without
 * a limit the same exit is. */
static void test_worker_memory_limit_attempts(void **state)
{
    fx *f = *state;
    f->cfg.worker_memory_limit = OB_WORKER_MEMORY_AUTO;
    start(f);
    char id[OB_JOB_ID_LEN];
    submit(f, 2, 2, id);
    assert_true(wait_launches(f, 1));
    /* Twice an estimate (which holds at least the worker's own 64 MiB) plus 1 GiB; the
     * estimate itself is test_jobspec's. */
    const uint64_t mib = (uint64_t)1 << 20, got = f->m.l[0].memory_limit;
    if (got < 1152 * mib || got > 1792 * mib || (got - 1024 * mib) % 2)
        fail_msg("memory limit of the attempt: %llu", (unsigned long long)got);
    ob_err err;
    assert_true(wait_state(f, id, OB_JOB_RUNNING));
    worker_says(&f->m, 0, "[1,1]<stderr>:onebit-worker[1]: setup failed: data: out of memory\n");
    finish(&f->m, 0, 5);
    assert_true(wait_state(f, id, OB_JOB_FAILED));
    ob_job j;
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    assert_int_equal(j.restarts, 0);
    assert_int_equal(j.n_attempts, 1);
    assert_int_equal(j.attempts[0].exit_code, 5);
    char want[160];
    snprintf(want, sizeof want,
             "out of memory: the ranks exceeded the worker memory limit of %llu MiB per process",
             (unsigned long long)((f->m.l[0].memory_limit + ((uint64_t)1 << 20) - 1) >> 20));
    if (strncmp(j.attempts[0].exit_reason, want, strlen(want)) != 0 ||
        !strstr(j.attempts[0].exit_reason, "(exit code 5): ") ||
        !strstr(j.attempts[0].exit_reason, "setup failed: data: out of memory"))
        fail_msg("exit reason: %s", j.attempts[0].exit_reason);
    if (!strstr(j.message, "not retried: the same job needs the same memory"))
        fail_msg("message: %s", j.message);
    ob_job_clear(&j);
    sleep_ms(100);
    assert_int_equal(launches(&f->m), 1);
}

static void test_memory_exit_without_limit_is_retried(void **state)
{
    fx *f = *state;
    start(f); /* the library's default: no worker memory limit */
    char id[OB_JOB_ID_LEN];
    submit(f, 1, 1, id);
    assert_true(wait_launches(f, 1));
    assert_true(f->m.l[0].memory_limit == 0);
    finish(&f->m, 0, 5);
    assert_true(wait_launches(f, 2));
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    if (strncmp(j.attempts[0].exit_reason, "out of memory: an allocation of a rank failed", 45))
        fail_msg("exit reason: %s", j.attempts[0].exit_reason);
    ob_job_clear(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_invalid_submit_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_launcher_refuses_at_submit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upload_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_reason_skips_warnings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_then_succeed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exit_zero_before_the_last_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exit_zero_listing_lags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restarts_run_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_permanent_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_grace_then_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attempt_written_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_credentials, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_roots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idempotent_submit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_labels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
        cmocka_unit_test(test_durations),
        cmocka_unit_test_setup_teardown(test_recovery_honours_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recovery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recovery_reattaches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recovery_attach_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_platform_reasons, setup, teardown),
        cmocka_unit_test_setup_teardown(test_default_world_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_off, setup, teardown),
        cmocka_unit_test(test_visible_gpus),
        cmocka_unit_test(test_parse_lines),
        cmocka_unit_test(test_public_message),
        cmocka_unit_test(test_worker_memory_limit_parse),
        cmocka_unit_test(test_worker_memory_limit_for),
        cmocka_unit_test(test_worker_exit_judge),
        cmocka_unit_test_setup_teardown(test_worker_memory_limit_attempts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_exit_without_limit_is_retried, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
