/* The service functions and the supervisor, in process, against a scripted launcher: admission
 * and validation, scheduling under a slot limit, restarts with backoff, retries running out,
 * cancel (pending, running, with and without a cooperative SIGTERM), the progress timeout,
 * progress reports, recovery of jobs a killed coordinator left RUNNING, and the progress-line
 * parser. */
#include "onebit/service.h"
#include "onebit/status_map.h"
#include "onebit/store.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- a scripted launcher ------------------------------------------------------------------ */

#define MAX_LAUNCHES 32

typedef struct launch {
    char job_id[OB_JOB_ID_LEN];
    int attempt, world, resume;
    int done, exit_code, got_term, got_kill;
} launch;

typedef struct mock {
    ob_launcher base;
    pthread_mutex_t mu;
    launch l[MAX_LAUNCHES];
    int n;
    int honor_term; /* SIGTERM ends the attempt with exit 0 */
    int stale_calls;
    char stale_job[OB_JOB_ID_LEN];
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
    h->pid = h->pgid = 1000 + m->n; /* the index into l, offset */
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
    ex->done = x->done;
    ex->exit_code = x->exit_code;
    ex->term_signal = 0;
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

static void m_destroy(ob_launcher *lb)
{
    (void)lb;
}

static const ob_launcher_ops mock_ops = {m_start, m_poll,       m_signal,
                                         m_alive, m_stop_stale, m_destroy};

/* Ends launch i with an exit code, as if the workers had exited. */
static void finish(mock *m, int i, int code)
{
    pthread_mutex_lock(&m->mu);
    m->l[i].exit_code = code;
    m->l[i].done = 1;
    pthread_mutex_unlock(&m->mu);
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
    ob_submit_req req = {good_spec, strlen(good_spec), world, max_restarts};
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

static void test_invalid_submit_changes_nothing(void **state)
{
    fx *f = *state;
    start(f);
    const char *bad = "model: {type: mlp}\ndata: {type: synthetic_classification}\n"
                      "optimizer: {type: adam, betta1: 0.9}\nbatch_size: 8\nsteps: 10\n";
    ob_submit_req req = {bad, strlen(bad), 9, 500};
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "spec: optimizer.betta1: unknown field"));
    assert_non_null(strstr(err.msg, "world_size: 9 ranks exceed the service's 4 slots"));
    assert_non_null(strstr(err.msg, "max_restarts: expected 0 to 100"));
    ob_submit_req empty = {"", 0, 1, -1};
    assert_int_equal(ob_service_submit(f->svc, &empty, &j, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "spec: missing"));
    ob_job *jobs;
    size_t n;
    char next[OB_PAGE_TOKEN_LEN];
    assert_int_equal(ob_service_list(f->svc, OB_JOB_UNSPECIFIED, 0, NULL, &jobs, &n, next, &err),
                     OB_OK);
    assert_int_equal(n, 0);
    ob_job_array_free(jobs, n);
    assert_int_equal(ob_service_list(f->svc, OB_JOB_UNSPECIFIED, 0, "x1", &jobs, &n, next, &err),
                     OB_ERR_INVALID_ARG);
    assert_int_equal(ob_service_list(f->svc, (ob_job_state)42, 0, NULL, &jobs, &n, next, &err),
                     OB_ERR_INVALID_ARG);
    assert_int_equal(launches(&f->m), 0);
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
    finish(&f->m, 1, 0);
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

static void test_restarts_run_out(void **state)
{
    fx *f = *state;
    start(f);
    char id[OB_JOB_ID_LEN];
    submit(f, 1, 1, id);
    assert_true(wait_launches(f, 1));
    finish(&f->m, 0, 3);
    assert_true(wait_launches(f, 2));
    finish(&f->m, 1, 3);
    assert_true(wait_state(f, id, OB_JOB_FAILED));
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_get(f->svc, id, &j, &err), OB_OK);
    assert_non_null(strstr(j.message, "attempt 2 ended: workers failed (exit code 3)"));
    assert_non_null(strstr(j.message, "no restarts left"));
    ob_job_clear(&j);
    sleep_ms(100);
    assert_int_equal(launches(&f->m), 2);
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
    strcpy(r.kind, "step");
    ob_err err;
    for (int i = 1; i <= 5; i++) {
        r.progress.step = i * 10;
        int cancel = -1;
        assert_int_equal(ob_service_report(f->svc, &r, &cancel, &err), OB_OK);
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
    strcpy(r.kind, "step");
    assert_int_equal(ob_service_report(f->svc, &r, NULL, &err), OB_ERR_NOT_FOUND);
    assert_true(wait_state(f, a, OB_JOB_RUNNING));
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
        assert_int_equal(ob_service_report(f->svc, &r, NULL, &err), OB_OK);
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
    strcpy(r.kind, "summary");
    assert_int_equal(ob_service_report(f->svc, &r, &cancel, &err), OB_OK);
    assert_int_equal(cancel, 1);
    char *metrics = NULL;
    assert_int_equal(ob_service_metrics(f->svc, &metrics, &err), OB_OK);
    assert_non_null(strstr(metrics, "onebit_jobs{state=\"RUNNING\"} 1\n"));
    assert_non_null(strstr(metrics, "onebit_job_step{job=\"job-000001\"} 20\n"));
    assert_non_null(strstr(metrics, "onebit_worker_reports_total 6\n"));
    free(metrics);
}

static void test_recovery(void **state)
{
    fx *f = *state;
    /* What a coordinator killed mid-run leaves: a RUNNING job with an attempt still open. */
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
    j.max_restarts = 0;
    j.created_ms = j.updated_ms = 1;
    assert_int_equal(ob_store_create_job(st, &j, &err), OB_OK);
    j.state = OB_JOB_RUNNING;
    assert_int_equal(ob_store_update_job(st, &j, NULL, &err), OB_OK);
    ob_attempt a = {.number = 1, .started_ms = 2, .pgid = 4321};
    assert_int_equal(ob_store_put_attempt(st, j.id, &a, &err), OB_OK);
    ob_store_close(st);

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

static void test_default_world_size(void **state)
{
    fx *f = *state;
    f->cfg.default_world_size = 3;
    start(f);
    ob_submit_req req = {good_spec, strlen(good_spec), 0, -1};
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
    assert_string_equal(r.kind, "resume");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_invalid_submit_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_then_succeed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restarts_run_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_grace_then_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recovery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_default_world_size, setup, teardown),
        cmocka_unit_test(test_visible_gpus),
        cmocka_unit_test(test_parse_lines),
        cmocka_unit_test(test_public_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
