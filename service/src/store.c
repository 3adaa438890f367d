/* The job store on SQLite (WAL): one connection, one transaction per call.
 *
 * Schema: jobs (one row per job, the mutable fields updated in place), attempts (one row per
 * launch), events (a job's history, numbered per job). A `meta` row marks the file as ours and
 * records the schema version. */
#include "onebit/store.h"
#include "onebit/base.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

#define SCHEMA_VERSION 1

struct ob_store {
    sqlite3 *db;
};

static const char *const schema_sql =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS jobs("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, name TEXT NOT NULL,"
    " state INTEGER NOT NULL, spec_json TEXT NOT NULL, world_size INTEGER NOT NULL,"
    " max_restarts INTEGER NOT NULL, restarts INTEGER NOT NULL DEFAULT 0,"
    " cancel_requested INTEGER NOT NULL DEFAULT 0,"
    " created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, started_ms INTEGER NOT NULL,"
    " finished_ms INTEGER NOT NULL, next_attempt_ms INTEGER NOT NULL DEFAULT 0,"
    " message TEXT NOT NULL DEFAULT '',"
    " step INTEGER NOT NULL DEFAULT 0, total_steps INTEGER NOT NULL DEFAULT 0,"
    " loss REAL NOT NULL DEFAULT 0, phase TEXT NOT NULL DEFAULT '',"
    " freeze_step INTEGER NOT NULL DEFAULT 0, samples_per_s REAL NOT NULL DEFAULT 0,"
    " bytes_sent INTEGER NOT NULL DEFAULT 0, bytes_uncompressed INTEGER NOT NULL DEFAULT 0,"
    " lr REAL NOT NULL DEFAULT 0, freeze_ratio REAL NOT NULL DEFAULT 0,"
    " eval_step INTEGER NOT NULL DEFAULT 0, eval_loss REAL NOT NULL DEFAULT 0,"
    " eval_accuracy REAL NOT NULL DEFAULT 0,"
    " ckpt_step INTEGER NOT NULL DEFAULT 0, ckpt_ms INTEGER NOT NULL DEFAULT 0,"
    " ckpt_path TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, seq);"
    "CREATE TABLE IF NOT EXISTS attempts("
    " job_id TEXT NOT NULL, number INTEGER NOT NULL, started_ms INTEGER NOT NULL,"
    " ended_ms INTEGER NOT NULL, start_step INTEGER NOT NULL, pgid INTEGER NOT NULL,"
    " exit_code INTEGER NOT NULL, exit_reason TEXT NOT NULL, PRIMARY KEY(job_id, number));"
    "CREATE TABLE IF NOT EXISTS events("
    " job_id TEXT NOT NULL, seq INTEGER NOT NULL, time_ms INTEGER NOT NULL, kind TEXT NOT NULL,"
    " state INTEGER NOT NULL, message TEXT NOT NULL,"
    " step INTEGER, total_steps INTEGER, loss REAL, phase TEXT, freeze_step INTEGER,"
    " samples_per_s REAL, bytes_sent INTEGER, bytes_uncompressed INTEGER, lr REAL,"
    " freeze_ratio REAL, eval_step INTEGER NOT NULL DEFAULT 0, eval_loss REAL NOT NULL DEFAULT 0,"
    " eval_accuracy REAL NOT NULL DEFAULT 0, PRIMARY KEY(job_id, seq));";

/* Columns added after the first release of the store, added to older databases on open. */
static const char *const added_columns[][2] = {
    {"jobs", "eval_step INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "eval_loss REAL NOT NULL DEFAULT 0"},
    {"jobs", "eval_accuracy REAL NOT NULL DEFAULT 0"},
    {"events", "eval_step INTEGER NOT NULL DEFAULT 0"},
    {"events", "eval_loss REAL NOT NULL DEFAULT 0"},
    {"events", "eval_accuracy REAL NOT NULL DEFAULT 0"},
    {"jobs", "request_id TEXT"},
    {"jobs", "labels TEXT NOT NULL DEFAULT ''"},
    /* the launcher's id of an attempt (a Slurm job id); '' for attempts of mpirun */
    {"attempts", "ext_id TEXT NOT NULL DEFAULT ''"},
    /* what a warm start did (ob_progress.warm_start) */
    {"jobs", "warm_start TEXT NOT NULL DEFAULT ''"},
    {"events", "warm_start TEXT NOT NULL DEFAULT ''"},
    /* compression health (ob_progress.worker_error_ratio, ...) */
    {"jobs", "worker_error_ratio REAL NOT NULL DEFAULT 0"},
    {"jobs", "server_error_ratio REAL NOT NULL DEFAULT 0"},
    {"jobs", "zero_momentum_fraction REAL NOT NULL DEFAULT 0"},
    {"events", "worker_error_ratio REAL NOT NULL DEFAULT 0"},
    {"events", "server_error_ratio REAL NOT NULL DEFAULT 0"},
    {"events", "zero_momentum_fraction REAL NOT NULL DEFAULT 0"},
    /* rewarms of the job so far (ob_progress.rewarms) */
    {"jobs", "rewarms INTEGER NOT NULL DEFAULT 0"},
    {"events", "rewarms INTEGER NOT NULL DEFAULT 0"},
    /* the job's time limit from its first start (ob_job.deadline_ms); 0: none */
    {"jobs", "deadline_ms INTEGER NOT NULL DEFAULT 0"},
};

/* SQL function labels_match(labels, selector): ob_labels_match on two canonical strings. */
static void sql_labels_match(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const char *labels = (const char *)sqlite3_value_text(argv[0]);
    const char *selector = (const char *)sqlite3_value_text(argv[1]);
    sqlite3_result_int(ctx, ob_labels_match(labels ? labels : "", selector ? selector : ""));
}

/* Indexes on added columns, made once the columns exist. */
static const char *const index_sql =
    "CREATE UNIQUE INDEX IF NOT EXISTS jobs_request ON jobs(request_id)"
    " WHERE request_id IS NOT NULL;";

/* The ob_status of a SQLite result code: a full disk (or the page limit of
 * ob_store_set_page_limit) is OB_ERR_UNAVAILABLE, a state that passes when space comes back;
 * every other failure is OB_ERR_IO. */
static ob_status sql_status(int code)
{
    return (code & 0xff) == SQLITE_FULL ? OB_ERR_UNAVAILABLE : OB_ERR_IO;
}

/* Converts a SQLite failure into an ob_status with the call and the database's message. */
#define SQL_ERR(s, err, what)                                                                      \
    OB_ERR(err, (s)->db ? sql_status(sqlite3_errcode((s)->db)) : OB_ERR_IO, "sqlite %s: %s", what, \
           (s)->db ? sqlite3_errmsg((s)->db) : "no database")

static ob_status exec(ob_store *s, const char *sql, ob_err *err)
{
    char *msg = NULL;
    int code = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (code != SQLITE_OK) {
        ob_status rc = sql_status(code);
        OB_ERR(err, rc, "sqlite exec: %s", msg ? msg : sqlite3_errstr(code));
        sqlite3_free(msg);
        return rc;
    }
    return OB_OK;
}

static ob_status prepare(ob_store *s, sqlite3_stmt **st, const char *sql, ob_err *err)
{
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK)
        return SQL_ERR(s, err, "prepare");
    return OB_OK;
}

static void rollback(ob_store *s)
{
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

static ob_status check_meta(ob_store *s, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_status rc = prepare(s, &st, "SELECT value FROM meta WHERE key='format'", err);
    if (rc) return rc;
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(st, 0);
        int ok = v && !strcmp(v, "onebit-store-1");
        sqlite3_finalize(st);
        if (!ok)
            return OB_ERR(err, OB_ERR_CORRUPT, "not a onebit job store (format %s)", v ? v : "?");
        return OB_OK;
    }
    sqlite3_finalize(st);
    if (step != SQLITE_DONE) return SQL_ERR(s, err, "read meta");
    return exec(s, "INSERT INTO meta(key, value) VALUES('format', 'onebit-store-1')", err);
}

/* Adds the columns of added_columns that an older database lacks. */
static ob_status add_columns(ob_store *s, ob_err *err)
{
    for (size_t i = 0; i < sizeof added_columns / sizeof *added_columns; i++) {
        char sql[256], name[64];
        sscanf(added_columns[i][1], "%63s", name);
        snprintf(sql, sizeof sql, "SELECT %s FROM %s LIMIT 0", name, added_columns[i][0]);
        sqlite3_stmt *st = NULL;
        int have = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK;
        sqlite3_finalize(st);
        if (have) continue;
        snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s", added_columns[i][0],
                 added_columns[i][1]);
        ob_status rc = exec(s, sql, err);
        if (rc) return rc;
    }
    return OB_OK;
}

ob_status ob_store_open(ob_store **out, const char *path, ob_err *err)
{
    ob_status rc;
    *out = NULL;
    ob_store *s = calloc(1, sizeof *s);
    if (!s) return OB_ERR(err, OB_ERR_NOMEM, "allocating the store");
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
    if (sqlite3_open_v2(path, &s->db, flags, NULL) != SQLITE_OK) {
        rc = OB_ERR(err, OB_ERR_IO, "opening the job store %s: %s", path,
                    s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(s->db, 5000);
    if (sqlite3_create_function(s->db, "labels_match", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                sql_labels_match, NULL, NULL) != SQLITE_OK) {
        rc = SQL_ERR(s, err, "labels_match");
        goto fail;
    }
    /* WAL: a writer never blocks on readers, and a killed process loses at most the
     * transaction it had not committed. synchronous=FULL also survives a power cut (step
     * progress is the exception, see ob_store_update_job). */
    if ((rc = exec(s, "PRAGMA journal_mode=WAL", err))) goto fail;
    if ((rc = exec(s, "PRAGMA synchronous=FULL", err))) goto fail;
    if ((rc = exec(s, "BEGIN IMMEDIATE", err))) goto fail;
    if ((rc = exec(s, schema_sql, err)) || (rc = add_columns(s, err)) ||
        (rc = exec(s, index_sql, err)) || (rc = check_meta(s, err))) {
        rollback(s);
        goto fail;
    }
    if ((rc = exec(s, "COMMIT", err))) goto fail;
    *out = s;
    return OB_OK;
fail:
    ob_store_close(s);
    return rc;
}

void ob_store_close(ob_store *s)
{
    if (!s) return;
    sqlite3_close(s->db);
    free(s);
}

static const char *text_or_empty(sqlite3_stmt *st, int col)
{
    const char *t = (const char *)sqlite3_column_text(st, col);
    return t ? t : "";
}

static void bind_progress(sqlite3_stmt *st, int first, const ob_progress *p)
{
    sqlite3_bind_int64(st, first + 0, p->step);
    sqlite3_bind_int64(st, first + 1, p->total_steps);
    sqlite3_bind_double(st, first + 2, p->loss);
    sqlite3_bind_text(st, first + 3, p->phase, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, first + 4, p->freeze_step);
    sqlite3_bind_double(st, first + 5, p->samples_per_s);
    sqlite3_bind_int64(st, first + 6, p->bytes_sent);
    sqlite3_bind_int64(st, first + 7, p->bytes_uncompressed);
    sqlite3_bind_double(st, first + 8, p->lr);
    sqlite3_bind_double(st, first + 9, p->freeze_ratio);
    sqlite3_bind_int64(st, first + 10, p->eval_step);
    sqlite3_bind_double(st, first + 11, p->eval_loss);
    sqlite3_bind_double(st, first + 12, p->eval_accuracy);
    sqlite3_bind_text(st, first + 13, p->warm_start, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, first + 14, p->worker_error_ratio);
    sqlite3_bind_double(st, first + 15, p->server_error_ratio);
    sqlite3_bind_double(st, first + 16, p->zero_momentum_fraction);
    sqlite3_bind_int64(st, first + 17, p->rewarms);
}

static void read_progress(sqlite3_stmt *st, int first, ob_progress *p)
{
    p->step = sqlite3_column_int64(st, first + 0);
    p->total_steps = sqlite3_column_int64(st, first + 1);
    p->loss = sqlite3_column_double(st, first + 2);
    ob_strlcpy(p->phase, text_or_empty(st, first + 3), sizeof p->phase);
    p->freeze_step = sqlite3_column_int64(st, first + 4);
    p->samples_per_s = sqlite3_column_double(st, first + 5);
    p->bytes_sent = sqlite3_column_int64(st, first + 6);
    p->bytes_uncompressed = sqlite3_column_int64(st, first + 7);
    p->lr = sqlite3_column_double(st, first + 8);
    p->freeze_ratio = sqlite3_column_double(st, first + 9);
    p->eval_step = sqlite3_column_int64(st, first + 10);
    p->eval_loss = sqlite3_column_double(st, first + 11);
    p->eval_accuracy = sqlite3_column_double(st, first + 12);
    ob_strlcpy(p->warm_start, text_or_empty(st, first + 13), sizeof p->warm_start);
    p->worker_error_ratio = sqlite3_column_double(st, first + 14);
    p->server_error_ratio = sqlite3_column_double(st, first + 15);
    p->zero_momentum_fraction = sqlite3_column_double(st, first + 16);
    p->rewarms = sqlite3_column_int64(st, first + 17);
}

#define PROGRESS_COLS                                                                              \
    "step, total_steps, loss, phase, freeze_step, samples_per_s, bytes_sent, "                     \
    "bytes_uncompressed, lr, freeze_ratio, eval_step, eval_loss, eval_accuracy, warm_start, "      \
    "worker_error_ratio, server_error_ratio, zero_momentum_fraction, rewarms"

static ob_status insert_event(ob_store *s, const char *job_id, ob_job_event *ev, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_status rc =
        prepare(s, &st, "SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?", err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) {
        rc = SQL_ERR(s, err, "next event number");
        sqlite3_finalize(st);
        return rc;
    }
    ev->seq = sqlite3_column_int64(st, 0) + 1;
    sqlite3_finalize(st);
    ob_strlcpy(ev->job_id, job_id, sizeof ev->job_id);
    rc = prepare(s, &st,
                 "INSERT INTO events(job_id, seq, time_ms, kind, state, message, " PROGRESS_COLS
                 ") VALUES(?,?,?,?,?,?, ?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                 err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, ev->seq);
    sqlite3_bind_int64(st, 3, ev->time_ms);
    sqlite3_bind_text(st, 4, ev->kind, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, ev->state);
    sqlite3_bind_text(st, 6, ev->message, -1, SQLITE_STATIC);
    bind_progress(st, 7, &ev->progress);
    if (sqlite3_step(st) != SQLITE_DONE) rc = SQL_ERR(s, err, "insert event");
    sqlite3_finalize(st);
    return rc;
}

static ob_status update_job_tx(ob_store *s, const ob_job *j, ob_job_event *ev, const ob_attempt *a,
                               ob_err *err);
static ob_status write_attempt(ob_store *s, const char *job_id, const ob_attempt *a, ob_err *err);

ob_status ob_store_create_job(ob_store *s, ob_job *job, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_status rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    rc = prepare(s, &st,
                 "INSERT INTO jobs(id, name, state, spec_json, world_size, max_restarts,"
                 " created_ms, updated_ms, started_ms, finished_ms, message, request_id, labels,"
                 " deadline_ms) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                 err);
    if (rc) goto fail;
    if (job->id[0])
        sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 1);
    sqlite3_bind_text(st, 2, job->name, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, job->state);
    sqlite3_bind_text(st, 4, job->spec_json ? job->spec_json : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, job->world_size);
    sqlite3_bind_int(st, 6, job->max_restarts);
    sqlite3_bind_int64(st, 7, job->created_ms);
    sqlite3_bind_int64(st, 8, job->updated_ms);
    sqlite3_bind_int64(st, 9, job->started_ms);
    sqlite3_bind_int64(st, 10, job->finished_ms);
    sqlite3_bind_text(st, 11, job->message, -1, SQLITE_STATIC);
    if (job->request_id[0])
        sqlite3_bind_text(st, 12, job->request_id, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 12);
    sqlite3_bind_text(st, 13, job->labels, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 14, job->deadline_ms);
    int step = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (step == SQLITE_CONSTRAINT) {
        rollback(s);
        if (job->request_id[0])
            return OB_ERR(err, OB_ERR_STATE, "a job with request id '%s' or id %s already exists",
                          job->request_id, job->id[0] ? job->id : "(new)");
        return OB_ERR(err, OB_ERR_STATE, "a job with id %s already exists", job->id);
    }
    if (step != SQLITE_DONE) {
        rc = SQL_ERR(s, err, "insert job");
        goto fail;
    }
    job->seq = sqlite3_last_insert_rowid(s->db);
    if (!job->id[0]) {
        snprintf(job->id, sizeof job->id, "job-%06lld", (long long)job->seq);
        rc = prepare(s, &st, "UPDATE jobs SET id = ? WHERE seq = ?", err);
        if (rc) goto fail;
        sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, job->seq);
        step = sqlite3_step(st);
        sqlite3_finalize(st);
        st = NULL;
        if (step != SQLITE_DONE) {
            rc = SQL_ERR(s, err, "name job");
            goto fail;
        }
    }
    ob_job_event ev = {.time_ms = job->created_ms, .state = job->state};
    ob_strlcpy(ev.kind, "state", sizeof ev.kind);
    snprintf(ev.message, sizeof ev.message, "submitted: %s", ob_job_state_name(job->state));
    if ((rc = insert_event(s, job->id, &ev, err))) goto fail;
    if ((rc = exec(s, "COMMIT", err))) goto fail;
    return OB_OK;
fail:
    sqlite3_finalize(st);
    rollback(s);
    return rc;
}

#define JOB_COLS                                                                                   \
    "seq, id, name, state, spec_json, world_size, max_restarts, restarts, cancel_requested,"       \
    " created_ms, updated_ms, started_ms, finished_ms, next_attempt_ms, message, ckpt_step,"       \
    " ckpt_ms, ckpt_path, request_id, labels, deadline_ms, " PROGRESS_COLS

static ob_status read_job_row(ob_store *s, sqlite3_stmt *st, ob_job *j, ob_err *err)
{
    memset(j, 0, sizeof *j);
    j->seq = sqlite3_column_int64(st, 0);
    ob_strlcpy(j->id, text_or_empty(st, 1), sizeof j->id);
    ob_strlcpy(j->name, text_or_empty(st, 2), sizeof j->name);
    j->state = (ob_job_state)sqlite3_column_int(st, 3);
    j->spec_json = strdup(text_or_empty(st, 4));
    if (!j->spec_json) return OB_ERR(err, OB_ERR_NOMEM, "reading job %s", j->id);
    j->world_size = sqlite3_column_int(st, 5);
    j->max_restarts = sqlite3_column_int(st, 6);
    j->restarts = sqlite3_column_int(st, 7);
    j->cancel_requested = sqlite3_column_int(st, 8);
    j->created_ms = sqlite3_column_int64(st, 9);
    j->updated_ms = sqlite3_column_int64(st, 10);
    j->started_ms = sqlite3_column_int64(st, 11);
    j->finished_ms = sqlite3_column_int64(st, 12);
    j->next_attempt_ms = sqlite3_column_int64(st, 13);
    ob_strlcpy(j->message, text_or_empty(st, 14), sizeof j->message);
    j->ckpt_step = sqlite3_column_int64(st, 15);
    j->ckpt_ms = sqlite3_column_int64(st, 16);
    ob_strlcpy(j->ckpt_path, text_or_empty(st, 17), sizeof j->ckpt_path);
    ob_strlcpy(j->request_id, text_or_empty(st, 18), sizeof j->request_id);
    ob_strlcpy(j->labels, text_or_empty(st, 19), sizeof j->labels);
    j->deadline_ms = sqlite3_column_int64(st, 20);
    read_progress(st, 21, &j->progress);
    (void)s;
    return OB_OK;
}

static ob_status read_attempts(ob_store *s, ob_job *j, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_status rc = prepare(s, &st,
                           "SELECT number, started_ms, ended_ms, start_step, pgid, exit_code,"
                           " exit_reason, ext_id FROM attempts WHERE job_id = ? ORDER BY number",
                           err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, j->id, -1, SQLITE_STATIC);
    size_t cap = 0;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (j->n_attempts == cap) {
            size_t ncap = cap ? 2 * cap : 4;
            ob_attempt *a = realloc(j->attempts, ncap * sizeof *a);
            if (!a) {
                sqlite3_finalize(st);
                return OB_ERR(err, OB_ERR_NOMEM, "reading attempts of %s", j->id);
            }
            j->attempts = a;
            cap = ncap;
        }
        ob_attempt *a = &j->attempts[j->n_attempts++];
        memset(a, 0, sizeof *a);
        a->number = sqlite3_column_int(st, 0);
        a->started_ms = sqlite3_column_int64(st, 1);
        a->ended_ms = sqlite3_column_int64(st, 2);
        a->start_step = sqlite3_column_int64(st, 3);
        a->pgid = sqlite3_column_int(st, 4);
        a->exit_code = sqlite3_column_int(st, 5);
        ob_strlcpy(a->exit_reason, text_or_empty(st, 6), sizeof a->exit_reason);
        ob_strlcpy(a->ext_id, text_or_empty(st, 7), sizeof a->ext_id);
    }
    sqlite3_finalize(st);
    if (step != SQLITE_DONE) return SQL_ERR(s, err, "read attempts");
    return OB_OK;
}

ob_status ob_store_get_job(ob_store *s, const char *id, ob_job *out, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_job j;
    memset(&j, 0, sizeof j);
    ob_status rc = prepare(s, &st, "SELECT " JOB_COLS " FROM jobs WHERE id = ?", err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    if (step == SQLITE_DONE) {
        sqlite3_finalize(st);
        return OB_ERR(err, OB_ERR_NOT_FOUND, "no job with id '%.100s'", id);
    }
    if (step != SQLITE_ROW) {
        rc = SQL_ERR(s, err, "read job");
        goto fail;
    }
    if ((rc = read_job_row(s, st, &j, err))) goto fail;
    sqlite3_finalize(st);
    st = NULL;
    if ((rc = read_attempts(s, &j, err))) goto fail;
    *out = j;
    return OB_OK;
fail:
    sqlite3_finalize(st);
    ob_job_clear(&j);
    return rc;
}

ob_status ob_store_list_jobs(ob_store *s, ob_job_state state, const char *selector,
                             int64_t after_seq, int limit, ob_job **out, size_t *n, int *more,
                             ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_job *jobs = NULL;
    size_t count = 0;
    *out = NULL;
    *n = 0;
    *more = 0;
    if (limit <= 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "list limit must be positive");
    ob_status rc = prepare(s, &st,
                           "SELECT " JOB_COLS " FROM jobs WHERE seq > ? AND (? = 0 OR state = ?)"
                           " AND labels_match(labels, ?) ORDER BY seq LIMIT ?",
                           err);
    if (rc) return rc;
    sqlite3_bind_int64(st, 1, after_seq);
    sqlite3_bind_int(st, 2, state);
    sqlite3_bind_int(st, 3, state);
    sqlite3_bind_text(st, 4, selector ? selector : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, limit + 1); /* one more tells whether another page exists */
    jobs = calloc((size_t)limit, sizeof *jobs);
    if (!jobs) {
        rc = OB_ERR(err, OB_ERR_NOMEM, "listing jobs");
        goto fail;
    }
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == (size_t)limit) {
            *more = 1;
            break;
        }
        if ((rc = read_job_row(s, st, &jobs[count], err))) goto fail;
        count++;
    }
    if (step != SQLITE_ROW && step != SQLITE_DONE) {
        rc = SQL_ERR(s, err, "list jobs");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    for (size_t i = 0; i < count; i++)
        if ((rc = read_attempts(s, &jobs[i], err))) goto fail;
    *out = jobs;
    *n = count;
    return OB_OK;
fail:
    sqlite3_finalize(st);
    ob_job_array_free(jobs, count);
    *more = 0;
    return rc;
}

ob_status ob_store_update_job(ob_store *s, const ob_job *j, ob_job_event *ev, ob_err *err)
{
    return ob_store_update_job_attempt(s, j, ev, NULL, err);
}

ob_status ob_store_update_job_attempt(ob_store *s, const ob_job *j, ob_job_event *ev,
                                      const ob_attempt *a, ob_err *err)
{
    /* Step progress is frequent and cheap to lose: it is committed without an fsync (still
     * safe when the process is killed; a power cut may lose the last few, and the next
     * synchronous commit flushes them). Everything else waits for the disk. */
    int relaxed = ev && !strcmp(ev->kind, "step");
    if (relaxed &&
        (sqlite3_exec(s->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL) != SQLITE_OK))
        relaxed = 0;
    ob_status rc = update_job_tx(s, j, ev, a, err);
    if (relaxed) sqlite3_exec(s->db, "PRAGMA synchronous=FULL", NULL, NULL, NULL);
    return rc;
}

static ob_status update_job_tx(ob_store *s, const ob_job *j, ob_job_event *ev, const ob_attempt *a,
                               ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_status rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    rc = prepare(s, &st,
                 "UPDATE jobs SET state=?, restarts=?, cancel_requested=?, updated_ms=?,"
                 " started_ms=?, finished_ms=?, next_attempt_ms=?, message=?, ckpt_step=?,"
                 " ckpt_ms=?, ckpt_path=?, step=?, total_steps=?, loss=?, phase=?, freeze_step=?,"
                 " samples_per_s=?, bytes_sent=?, bytes_uncompressed=?, lr=?, freeze_ratio=?,"
                 " eval_step=?, eval_loss=?, eval_accuracy=?, warm_start=?, worker_error_ratio=?,"
                 " server_error_ratio=?, zero_momentum_fraction=?, rewarms=? WHERE id=?",
                 err);
    if (rc) goto fail;
    sqlite3_bind_int(st, 1, j->state);
    sqlite3_bind_int(st, 2, j->restarts);
    sqlite3_bind_int(st, 3, j->cancel_requested);
    sqlite3_bind_int64(st, 4, j->updated_ms);
    sqlite3_bind_int64(st, 5, j->started_ms);
    sqlite3_bind_int64(st, 6, j->finished_ms);
    sqlite3_bind_int64(st, 7, j->next_attempt_ms);
    sqlite3_bind_text(st, 8, j->message, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 9, j->ckpt_step);
    sqlite3_bind_int64(st, 10, j->ckpt_ms);
    sqlite3_bind_text(st, 11, j->ckpt_path, -1, SQLITE_STATIC);
    bind_progress(st, 12, &j->progress);
    sqlite3_bind_text(st, 30, j->id, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) {
        rc = SQL_ERR(s, err, "update job");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_changes(s->db) != 1) {
        rc = OB_ERR(err, OB_ERR_NOT_FOUND, "no job with id '%.100s'", j->id);
        goto fail;
    }
    if (ev && (rc = insert_event(s, j->id, ev, err))) goto fail;
    if (a && (rc = write_attempt(s, j->id, a, err))) goto fail;
    if ((rc = exec(s, "COMMIT", err))) goto fail;
    return OB_OK;
fail:
    sqlite3_finalize(st);
    rollback(s);
    return rc;
}

ob_status ob_store_find_request(ob_store *s, const char *request_id, char id[OB_JOB_ID_LEN],
                                ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_status rc = prepare(s, &st, "SELECT id FROM jobs WHERE request_id = ?", err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, request_id, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW)
        ob_strlcpy(id, text_or_empty(st, 0), OB_JOB_ID_LEN);
    else if (step == SQLITE_DONE)
        rc = OB_ERR(err, OB_ERR_NOT_FOUND, "no job with request id '%.128s'", request_id);
    else
        rc = SQL_ERR(s, err, "find request id");
    sqlite3_finalize(st);
    return rc;
}

ob_status ob_store_delete_job(ob_store *s, const char *id, ob_err *err)
{
    static const char *const sql[] = {"DELETE FROM events WHERE job_id=?",
                                      "DELETE FROM attempts WHERE job_id=?",
                                      "DELETE FROM jobs WHERE id=?"};
    ob_status rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    int removed = 0;
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        sqlite3_stmt *st = NULL;
        if ((rc = prepare(s, &st, sql[i], err))) goto fail;
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        int done = sqlite3_step(st) == SQLITE_DONE;
        sqlite3_finalize(st);
        if (!done) {
            rc = SQL_ERR(s, err, "delete job");
            goto fail;
        }
        removed = sqlite3_changes(s->db);
    }
    if (!removed) {
        rc = OB_ERR(err, OB_ERR_NOT_FOUND, "no job with id '%.64s'", id);
        goto fail;
    }
    if ((rc = exec(s, "COMMIT", err))) goto fail;
    return OB_OK;
fail:
    rollback(s);
    return rc;
}

ob_status ob_store_list_ended_before(ob_store *s, int64_t finished_before_ms, int limit,
                                     char (**ids)[OB_JOB_ID_LEN], size_t *n, ob_err *err)
{
    *ids = NULL;
    *n = 0;
    if (limit <= 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "job limit must be positive");
    sqlite3_stmt *st = NULL;
    ob_status rc = prepare(s, &st,
                           "SELECT id FROM jobs WHERE state IN (?,?,?) AND finished_ms > 0"
                           " AND finished_ms < ? ORDER BY finished_ms LIMIT ?",
                           err);
    if (rc) return rc;
    sqlite3_bind_int(st, 1, OB_JOB_SUCCEEDED);
    sqlite3_bind_int(st, 2, OB_JOB_FAILED);
    sqlite3_bind_int(st, 3, OB_JOB_CANCELLED);
    sqlite3_bind_int64(st, 4, finished_before_ms);
    sqlite3_bind_int(st, 5, limit);
    char(*out)[OB_JOB_ID_LEN] = calloc((size_t)limit, sizeof *out);
    if (!out) {
        sqlite3_finalize(st);
        return OB_ERR(err, OB_ERR_NOMEM, "listing ended jobs");
    }
    size_t count = 0;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW && count < (size_t)limit)
        ob_strlcpy(out[count++], text_or_empty(st, 0), OB_JOB_ID_LEN);
    if (step != SQLITE_DONE && step != SQLITE_ROW) {
        rc = SQL_ERR(s, err, "list ended jobs");
        free(out);
        out = NULL;
        count = 0;
    }
    sqlite3_finalize(st);
    *ids = out;
    *n = count;
    return rc;
}

ob_status ob_store_put_attempt(ob_store *s, const char *job_id, const ob_attempt *a, ob_err *err)
{
    return write_attempt(s, job_id, a, err);
}

/* One statement: a transaction of its own, or a part of the caller's. */
static ob_status write_attempt(ob_store *s, const char *job_id, const ob_attempt *a, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_status rc = prepare(s, &st,
                           "INSERT OR REPLACE INTO attempts(job_id, number, started_ms, ended_ms,"
                           " start_step, pgid, exit_code, exit_reason, ext_id)"
                           " VALUES(?,?,?,?,?,?,?,?,?)",
                           err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, a->number);
    sqlite3_bind_int64(st, 3, a->started_ms);
    sqlite3_bind_int64(st, 4, a->ended_ms);
    sqlite3_bind_int64(st, 5, a->start_step);
    sqlite3_bind_int(st, 6, a->pgid);
    sqlite3_bind_int(st, 7, a->exit_code);
    sqlite3_bind_text(st, 8, a->exit_reason, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 9, a->ext_id, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) rc = SQL_ERR(s, err, "write attempt");
    sqlite3_finalize(st);
    return rc;
}

ob_status ob_store_probe(ob_store *s, int64_t now_ms, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_status rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    rc = prepare(s, &st, "INSERT OR REPLACE INTO meta(key, value) VALUES('probe', ?)", err);
    if (rc) goto fail;
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)now_ms);
    sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE) {
        rc = SQL_ERR(s, err, "probe write");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    if ((rc = exec(s, "COMMIT", err))) goto fail;
    return OB_OK;
fail:
    sqlite3_finalize(st);
    rollback(s);
    return rc;
}

ob_status ob_store_set_page_limit(ob_store *s, int64_t pages, ob_err *err)
{
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA max_page_count=%lld", (long long)(pages > 0 ? pages : 0));
    if (pages <= 0) snprintf(sql, sizeof sql, "PRAGMA max_page_count=4294967294");
    return exec(s, sql, err);
}

ob_status ob_store_page_count(ob_store *s, int64_t *pages, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    ob_status rc = prepare(s, &st, "PRAGMA page_count", err);
    if (rc) return rc;
    if (sqlite3_step(st) == SQLITE_ROW)
        *pages = sqlite3_column_int64(st, 0);
    else
        rc = SQL_ERR(s, err, "page count");
    sqlite3_finalize(st);
    return rc;
}

ob_status ob_store_list_events(ob_store *s, const char *job_id, int64_t after_seq, int limit,
                               ob_job_event **out, size_t *n, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    *out = NULL;
    *n = 0;
    if (limit <= 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "event limit must be positive");
    ob_status rc = prepare(s, &st,
                           "SELECT seq, time_ms, kind, state, message, " PROGRESS_COLS
                           " FROM events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                           err);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, after_seq);
    sqlite3_bind_int(st, 3, limit);
    ob_job_event *evs = NULL;
    size_t count = 0, cap = 0;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            ob_job_event *e = realloc(evs, ncap * sizeof *e);
            if (!e) {
                rc = OB_ERR(err, OB_ERR_NOMEM, "listing events");
                goto fail;
            }
            evs = e;
            cap = ncap;
        }
        ob_job_event *e = &evs[count++];
        memset(e, 0, sizeof *e);
        e->seq = sqlite3_column_int64(st, 0);
        ob_strlcpy(e->job_id, job_id, sizeof e->job_id);
        e->time_ms = sqlite3_column_int64(st, 1);
        ob_strlcpy(e->kind, text_or_empty(st, 2), sizeof e->kind);
        e->state = (ob_job_state)sqlite3_column_int(st, 3);
        ob_strlcpy(e->message, text_or_empty(st, 4), sizeof e->message);
        read_progress(st, 5, &e->progress);
    }
    if (step != SQLITE_DONE) {
        rc = SQL_ERR(s, err, "list events");
        goto fail;
    }
    sqlite3_finalize(st);
    *out = evs;
    *n = count;
    return OB_OK;
fail:
    sqlite3_finalize(st);
    free(evs);
    return rc;
}

ob_status ob_store_count_states(ob_store *s, int64_t counts[OB_JOB_STATE_COUNT], ob_err *err)
{
    sqlite3_stmt *st = NULL;
    for (int i = 0; i < OB_JOB_STATE_COUNT; i++)
        counts[i] = 0;
    ob_status rc = prepare(s, &st, "SELECT state, COUNT(*) FROM jobs GROUP BY state", err);
    if (rc) return rc;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int k = sqlite3_column_int(st, 0);
        if (k >= 0 && k < OB_JOB_STATE_COUNT) counts[k] = sqlite3_column_int64(st, 1);
    }
    if (step != SQLITE_DONE) rc = SQL_ERR(s, err, "count jobs");
    sqlite3_finalize(st);
    return rc;
}

ob_status ob_store_count_jobs(ob_store *s, int64_t *n, ob_err *err)
{
    int64_t c[OB_JOB_STATE_COUNT];
    ob_status rc = ob_store_count_states(s, c, err);
    *n = 0;
    if (rc) return rc;
    for (int i = 0; i < OB_JOB_STATE_COUNT; i++)
        *n += c[i];
    return OB_OK;
}
