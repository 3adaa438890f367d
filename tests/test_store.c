/* The SQLite job store: create, read, list with paging and a state filter, update with events,
 * attempts, and everything still there after the store is closed and opened again. */
#include "onebit/store.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fixture {
    char dir[64];
    char path[128];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/ob-store-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    snprintf(f->path, sizeof f->path, "%s/jobs.db", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0) return -1;
    free(f);
    return 0;
}

static ob_job make_job(const char *name, int world)
{
    ob_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.name, sizeof j.name, "%s", name);
    j.state = OB_JOB_PENDING;
    j.spec_json = strdup("{\"steps\":10}");
    j.world_size = world;
    j.max_restarts = 2;
    j.created_ms = j.updated_ms = 1000;
    return j;
}

static void test_create_get(void **state)
{
    fixture *f = *state;
    ob_store *s = NULL;
    ob_err err;
    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    ob_job j = make_job("first", 2);
    assert_int_equal(ob_store_create_job(s, &j, &err), OB_OK);
    assert_string_equal(j.id, "job-000001");
    assert_int_equal(j.seq, 1);

    ob_job got;
    assert_int_equal(ob_store_get_job(s, "job-000001", &got, &err), OB_OK);
    assert_string_equal(got.name, "first");
    assert_string_equal(got.spec_json, "{\"steps\":10}");
    assert_int_equal(got.world_size, 2);
    assert_int_equal(got.state, OB_JOB_PENDING);
    assert_int_equal(got.n_attempts, 0);
    ob_job_clear(&got);

    assert_int_equal(ob_store_get_job(s, "job-999", &got, &err), OB_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "job-999"));

    /* A chosen id is kept; the same id twice is refused and changes nothing. */
    ob_job k = make_job("second", 1);
    strcpy(k.id, "mine");
    assert_int_equal(ob_store_create_job(s, &k, &err), OB_OK);
    ob_job dup = make_job("third", 1);
    strcpy(dup.id, "mine");
    assert_int_equal(ob_store_create_job(s, &dup, &err), OB_ERR_STATE);
    int64_t n;
    assert_int_equal(ob_store_count_jobs(s, &n, &err), OB_OK);
    assert_int_equal(n, 2);
    ob_job_clear(&j);
    ob_job_clear(&k);
    ob_job_clear(&dup);
    ob_store_close(s);
}

static void test_list_paging_filter(void **state)
{
    fixture *f = *state;
    ob_store *s = NULL;
    ob_err err;
    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    for (int i = 0; i < 7; i++) {
        ob_job j = make_job("j", 1);
        assert_int_equal(ob_store_create_job(s, &j, &err), OB_OK);
        if (i % 2) {
            j.state = OB_JOB_RUNNING;
            assert_int_equal(ob_store_update_job(s, &j, NULL, &err), OB_OK);
        }
        ob_job_clear(&j);
    }
    ob_job *jobs;
    size_t n;
    int more;
    int64_t after = 0, seen = 0;
    do {
        assert_int_equal(
            ob_store_list_jobs(s, OB_JOB_UNSPECIFIED, NULL, after, 3, &jobs, &n, &more, &err),
            OB_OK);
        for (size_t i = 0; i < n; i++)
            assert_true(jobs[i].seq > after);
        seen += (int64_t)n;
        if (n) after = jobs[n - 1].seq;
        ob_job_array_free(jobs, n);
    } while (more);
    assert_int_equal(seen, 7);

    assert_int_equal(ob_store_list_jobs(s, OB_JOB_RUNNING, NULL, 0, 100, &jobs, &n, &more, &err),
                     OB_OK);
    assert_int_equal(n, 3);
    assert_int_equal(more, 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(jobs[i].state, OB_JOB_RUNNING);
    ob_job_array_free(jobs, n);

    int64_t counts[OB_JOB_STATE_COUNT];
    assert_int_equal(ob_store_count_states(s, counts, &err), OB_OK);
    assert_int_equal(counts[OB_JOB_PENDING], 4);
    assert_int_equal(counts[OB_JOB_RUNNING], 3);
    ob_store_close(s);
}

static void test_reopen_keeps_history(void **state)
{
    fixture *f = *state;
    ob_store *s = NULL;
    ob_err err;
    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    ob_job j = make_job("durable", 3);
    assert_int_equal(ob_store_create_job(s, &j, &err), OB_OK);

    ob_attempt a = {.number = 1, .started_ms = 2000, .pgid = 4242, .exit_code = 0};
    assert_int_equal(ob_store_put_attempt(s, j.id, &a, &err), OB_OK);
    j.state = OB_JOB_RUNNING;
    j.progress.step = 40;
    j.progress.total_steps = 100;
    j.progress.loss = 0.5;
    strcpy(j.progress.phase, "compression");
    j.ckpt_step = 40;
    strcpy(j.ckpt_path, "/tmp/x/step-00000040");
    ob_job_event ev = {.time_ms = 3000, .state = OB_JOB_RUNNING, .progress = j.progress};
    strcpy(ev.kind, "step");
    assert_int_equal(ob_store_update_job(s, &j, &ev, &err), OB_OK);
    assert_int_equal(ev.seq, 2); /* 1 is the submission */
    a.ended_ms = 4000;
    a.exit_code = 137;
    strcpy(a.exit_reason, "rank killed by signal 9");
    assert_int_equal(ob_store_put_attempt(s, j.id, &a, &err), OB_OK);
    ob_store_close(s);

    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    ob_job got;
    assert_int_equal(ob_store_get_job(s, j.id, &got, &err), OB_OK);
    assert_int_equal(got.state, OB_JOB_RUNNING);
    assert_int_equal(got.progress.step, 40);
    assert_string_equal(got.progress.phase, "compression");
    assert_string_equal(got.ckpt_path, "/tmp/x/step-00000040");
    assert_int_equal(got.n_attempts, 1);
    assert_int_equal(got.attempts[0].exit_code, 137);
    assert_string_equal(got.attempts[0].exit_reason, "rank killed by signal 9");
    assert_int_equal(got.attempts[0].pgid, 4242);
    ob_job_clear(&got);

    ob_job_event *evs;
    size_t n;
    assert_int_equal(ob_store_list_events(s, j.id, 0, 100, &evs, &n, &err), OB_OK);
    assert_int_equal(n, 2);
    assert_string_equal(evs[0].kind, "state");
    assert_string_equal(evs[1].kind, "step");
    assert_int_equal(evs[1].progress.step, 40);
    free(evs);
    assert_int_equal(ob_store_list_events(s, j.id, 1, 100, &evs, &n, &err), OB_OK);
    assert_int_equal(n, 1);
    free(evs);

    /* Updating an unknown job changes nothing. */
    ob_job ghost = make_job("ghost", 1);
    strcpy(ghost.id, "job-424242");
    assert_int_equal(ob_store_update_job(s, &ghost, &ev, &err), OB_ERR_NOT_FOUND);
    assert_int_equal(ob_store_list_events(s, "job-424242", 0, 100, &evs, &n, &err), OB_OK);
    assert_int_equal(n, 0);
    ob_job_clear(&ghost);
    ob_job_clear(&j);
    ob_store_close(s);
}

/* A store written before attempts had a launcher id (no ext_id column): it opens, its attempts
 * read with an empty id, and ids written from then on are kept. */
static void test_old_store_gains_ext_id(void **state)
{
    fixture *f = *state;
    ob_store *s;
    ob_err err;
    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    ob_job j = make_job("old", 2);
    assert_int_equal(ob_store_create_job(s, &j, &err), OB_OK);
    ob_attempt a = {.number = 1, .started_ms = 2000, .pgid = 77, .exit_code = 0};
    assert_int_equal(ob_store_put_attempt(s, j.id, &a, &err), OB_OK);
    ob_store_close(s);
    /* Make it the older schema. */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "ALTER TABLE attempts DROP COLUMN ext_id", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);

    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    ob_job got;
    assert_int_equal(ob_store_get_job(s, j.id, &got, &err), OB_OK);
    assert_int_equal(got.n_attempts, 1);
    assert_int_equal(got.attempts[0].pgid, 77);
    assert_string_equal(got.attempts[0].ext_id, "");
    ob_job_clear(&got);
    strcpy(a.ext_id, "123456");
    assert_int_equal(ob_store_put_attempt(s, j.id, &a, &err), OB_OK);
    ob_store_close(s);
    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    assert_int_equal(ob_store_get_job(s, j.id, &got, &err), OB_OK);
    assert_string_equal(got.attempts[0].ext_id, "123456");
    ob_job_clear(&got);
    ob_store_close(s);
    ob_job_clear(&j);
}

/* The compression health of a job's progress: kept in the job row and in its events, and a
 * store written before the columns existed opens with them added (0 for old rows). */
static void test_health_columns(void **state)
{
    fixture *f = *state;
    ob_store *s;
    ob_err err;
    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    ob_job j = make_job("old", 2);
    assert_int_equal(ob_store_create_job(s, &j, &err), OB_OK);
    ob_store_close(s);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    static const char *const drop[] = {
        "ALTER TABLE jobs DROP COLUMN worker_error_ratio",
        "ALTER TABLE jobs DROP COLUMN server_error_ratio",
        "ALTER TABLE jobs DROP COLUMN zero_momentum_fraction",
        "ALTER TABLE events DROP COLUMN worker_error_ratio",
        "ALTER TABLE events DROP COLUMN server_error_ratio",
        "ALTER TABLE events DROP COLUMN zero_momentum_fraction",
    };
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        assert_int_equal(sqlite3_exec(db, drop[i], NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    ob_job got;
    assert_int_equal(ob_store_get_job(s, j.id, &got, &err), OB_OK);
    assert_true(got.progress.worker_error_ratio == 0.0 && got.progress.server_error_ratio == 0.0 &&
                got.progress.zero_momentum_fraction == 0.0);
    ob_job_clear(&got);
    j.state = OB_JOB_RUNNING;
    strcpy(j.progress.phase, "compression");
    j.progress.worker_error_ratio = 1.25;
    j.progress.server_error_ratio = 0.5;
    j.progress.zero_momentum_fraction = 0.03125;
    ob_job_event ev;
    memset(&ev, 0, sizeof ev);
    strcpy(ev.kind, "step");
    strcpy(ev.message, "step 10");
    ev.progress = j.progress;
    assert_int_equal(ob_store_update_job(s, &j, &ev, &err), OB_OK);
    ob_store_close(s);
    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    assert_int_equal(ob_store_get_job(s, j.id, &got, &err), OB_OK);
    assert_true(got.progress.worker_error_ratio == 1.25);
    assert_true(got.progress.server_error_ratio == 0.5);
    assert_true(got.progress.zero_momentum_fraction == 0.03125);
    ob_job_clear(&got);
    ob_job_event *evs = NULL;
    size_t n = 0;
    assert_int_equal(ob_store_list_events(s, j.id, 0, 100, &evs, &n, &err), OB_OK);
    assert_true(n >= 1);
    const ob_progress *p = &evs[n - 1].progress;
    assert_true(p->worker_error_ratio == 1.25 && p->server_error_ratio == 0.5 &&
                p->zero_momentum_fraction == 0.03125);
    free(evs);
    ob_store_close(s);
    ob_job_clear(&j);
}

static void test_not_a_store(void **state)
{
    fixture *f = *state;
    FILE *fp = fopen(f->path, "w");
    fputs("this is not a database, just some text that is long enough to look at", fp);
    fclose(fp);
    ob_store *s = NULL;
    ob_err err;
    ob_status rc = ob_store_open(&s, f->path, &err);
    assert_true(rc == OB_ERR_IO || rc == OB_ERR_CORRUPT);
    assert_null(s);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/no/such/dir/jobs.db", f->dir);
    assert_int_equal(ob_store_open(&s, dir, &err), OB_ERR_IO);
    assert_non_null(strstr(err.msg, "no/such/dir"));
}

/* A full disk (SQLITE_FULL, here from the page limit): a write that does not fit fails with
 * OB_ERR_UNAVAILABLE and changes nothing, a job's transition and its attempt's end go together
 * or not at all, reads still answer, and the same write succeeds once there is room. */
static void test_full(void **state)
{
    fixture *f = *state;
    ob_store *s = NULL;
    ob_err err;
    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    ob_job j = make_job("full", 1);
    assert_int_equal(ob_store_create_job(s, &j, &err), OB_OK);
    ob_attempt a;
    memset(&a, 0, sizeof a);
    a.number = 1;
    a.started_ms = 2000;
    a.pgid = 42;
    j.state = OB_JOB_RUNNING;
    assert_int_equal(ob_store_update_job_attempt(s, &j, NULL, &a, &err), OB_OK);

    int64_t pages = 0;
    assert_int_equal(ob_store_page_count(s, &pages, &err), OB_OK);
    assert_true(pages > 0);
    assert_int_equal(ob_store_set_page_limit(s, pages, &err), OB_OK);
    ob_job_event ev;
    ob_status rc = OB_OK;
    for (int i = 0; i < 10000 && rc == OB_OK; i++) {
        memset(&ev, 0, sizeof ev);
        strcpy(ev.kind, "notice");
        memset(ev.message, 'x', 400);
        rc = ob_store_update_job(s, &j, &ev, &err);
    }
    assert_int_equal(rc, OB_ERR_UNAVAILABLE);
    assert_non_null(strstr(err.msg, "full"));

    /* The attempt's end and the job's end: refused together. */
    ob_job done = j;
    done.state = OB_JOB_SUCCEEDED;
    done.finished_ms = 5000;
    snprintf(done.message, sizeof done.message, "completed");
    ob_attempt end = a;
    end.ended_ms = 5000;
    snprintf(end.exit_reason, sizeof end.exit_reason, "completed");
    memset(&ev, 0, sizeof ev);
    strcpy(ev.kind, "state");
    memset(ev.message, 'y', 400);
    assert_int_equal(ob_store_update_job_attempt(s, &done, &ev, &end, &err), OB_ERR_UNAVAILABLE);
    ob_job got;
    assert_int_equal(ob_store_get_job(s, j.id, &got, &err), OB_OK);
    assert_int_equal(got.state, OB_JOB_RUNNING);
    assert_int_equal(got.n_attempts, 1);
    assert_int_equal(got.attempts[0].ended_ms, 0);
    int64_t events_before = 0;
    ob_job_event *evs = NULL;
    size_t n = 0;
    assert_int_equal(ob_store_list_events(s, j.id, 0, 100000, &evs, &n, &err), OB_OK);
    events_before = (int64_t)n;
    free(evs);
    ob_job_clear(&got);

    /* Room again: the same write goes through, whole. */
    assert_int_equal(ob_store_set_page_limit(s, 0, &err), OB_OK);
    assert_int_equal(ob_store_update_job_attempt(s, &done, &ev, &end, &err), OB_OK);
    assert_int_equal(ob_store_get_job(s, j.id, &got, &err), OB_OK);
    assert_int_equal(got.state, OB_JOB_SUCCEEDED);
    assert_int_equal(got.attempts[0].ended_ms, 5000);
    assert_string_equal(got.attempts[0].exit_reason, "completed");
    assert_int_equal(got.attempts[0].pgid, 42);
    ob_job_clear(&got);
    assert_int_equal(ob_store_list_events(s, j.id, 0, 100000, &evs, &n, &err), OB_OK);
    assert_int_equal((int64_t)n, events_before + 1);
    free(evs);
    assert_int_equal(ob_store_probe(s, 6000, &err), OB_OK);
    ob_job_clear(&j);
    ob_store_close(s);
}

/* The generation changes with every write (create, update, attempt, delete), not with reads,
 * and never goes back: the service's job cache (job_cache.c) serves a job read at a generation
 * while it is unchanged. */
static void test_generation(void **state)
{
    fixture *f = *state;
    ob_store *s = NULL;
    ob_err err;
    assert_int_equal(ob_store_open(&s, f->path, &err), OB_OK);
    uint64_t g0 = ob_store_generation(s);
    ob_job j = make_job("gen", 1);
    assert_int_equal(ob_store_create_job(s, &j, &err), OB_OK);
    uint64_t g1 = ob_store_generation(s);
    assert_true(g1 > g0);
    ob_job got;
    assert_int_equal(ob_store_get_job(s, j.id, &got, &err), OB_OK);
    ob_job_clear(&got);
    assert_true(ob_store_generation(s) == g1);
    j.state = OB_JOB_RUNNING;
    assert_int_equal(ob_store_update_job(s, &j, NULL, &err), OB_OK);
    uint64_t g2 = ob_store_generation(s);
    assert_true(g2 > g1);
    ob_attempt a = {.number = 1, .started_ms = 1000, .exit_code = -1};
    assert_int_equal(ob_store_put_attempt(s, j.id, &a, &err), OB_OK);
    uint64_t g3 = ob_store_generation(s);
    assert_true(g3 > g2);
    assert_int_equal(ob_store_delete_job(s, j.id, &err), OB_OK);
    assert_true(ob_store_generation(s) > g3);
    ob_job_clear(&j);
    ob_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_paging_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_keeps_history, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_old_store_gains_ext_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_health_columns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
