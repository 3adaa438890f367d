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

static void rollback(ob_store *s)
{
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* The body of a transaction: its statements, on s; arg is the caller's (borrowed). */
typedef ob_status tx_fn(ob_store *s, void *arg, ob_err *err);

/* Runs body inside BEGIN IMMEDIATE ... COMMIT: all of its writes or none of them (ROLLBACK when
 * the body or the COMMIT fails; the body's error is the one returned). */
static ob_status in_tx(ob_store *s, tx_fn *body, void *arg, ob_err *err)
{
    ob_status rc = exec(s, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    if ((rc = body(s, arg, err)) || (rc = exec(s, "COMMIT", err))) rollback(s);
    return rc;
}

/* Binds a statement's parameters from arg (borrowed: text is bound SQLITE_STATIC, so arg must
 * outlive the statement's run, which it does, run being one call). */
typedef void bind_fn(sqlite3_stmt *st, const void *arg);
/* Takes one result row into ctx: OB_OK for the next row, ROW_STOP to end the statement there
 * (not an error), a negative ob_status to fail it (err says why). */
typedef ob_status row_fn(sqlite3_stmt *st, void *ctx, ob_err *err);
#define ROW_STOP 1

/* One statement from start to end: prepares sql, binds it with bind(st, arg) (bind may be NULL),
 * steps through it, handing each row to row (NULL for a statement without rows: a row is then
 * an error), and finalizes it. A failed step is "sqlite WHAT: <SQLite's message>" (OB_ERR_IO, or
 * OB_ERR_UNAVAILABLE when the disk or the page limit is full; sqlite3_errcode still tells which
 * failure it was after the call). */
static ob_status run(ob_store *s, const char *sql, bind_fn *bind, const void *arg, row_fn *row,
                     void *ctx, const char *what, ob_err *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return SQL_ERR(s, err, "prepare");
    if (bind) bind(st, arg);
    ob_status rc = OB_OK;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW && row)
        if ((rc = row(st, ctx, err))) break;
    if (rc == ROW_STOP)
        rc = OB_OK;
    else if (!rc && step != SQLITE_DONE)
        rc = SQL_ERR(s, err, what);
    sqlite3_finalize(st);
    return rc;
}

/* A statement without rows, and one with rows: run, named for what they are. */
static ob_status write_stmt(ob_store *s, const char *sql, bind_fn *bind, const void *arg,
                            const char *what, ob_err *err)
{
    return run(s, sql, bind, arg, NULL, NULL, what, err);
}
static ob_status query(ob_store *s, const char *sql, bind_fn *bind, const void *arg, row_fn *row,
                       void *ctx, const char *what, ob_err *err)
{
    return run(s, sql, bind, arg, row, ctx, what, err);
}

/* The one text parameter of many statements: a job's id. */
static void bind_id(sqlite3_stmt *st, const void *id)
{
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
}

struct meta_row {
    int found;
};

static ob_status meta_format(sqlite3_stmt *st, void *ctx, ob_err *err)
{
    const char *v = (const char *)sqlite3_column_text(st, 0);
    ((struct meta_row *)ctx)->found = 1;
    if (!v || strcmp(v, "onebit-store-1"))
        return OB_ERR(err, OB_ERR_CORRUPT, "not a onebit job store (format %s)", v ? v : "?");
    return ROW_STOP;
}

static ob_status check_meta(ob_store *s, ob_err *err)
{
    struct meta_row m = {0};
    ob_status rc = query(s, "SELECT value FROM meta WHERE key='format'", NULL, NULL, meta_format,
                         &m, "read meta", err);
    if (rc || m.found) return rc;
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

/* The tables, the columns added since, the indexes and the format mark, in one transaction. */
static ob_status make_schema(ob_store *s, void *arg, ob_err *err)
{
    (void)arg;
    ob_status rc;
    if ((rc = exec(s, schema_sql, err)) || (rc = add_columns(s, err)) ||
        (rc = exec(s, index_sql, err)) || (rc = check_meta(s, err)))
        return rc;
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
    if ((rc = in_tx(s, make_schema, NULL, err))) goto fail;
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

static ob_status first_int64(sqlite3_stmt *st, void *ctx, ob_err *err)
{
    (void)err;
    *(int64_t *)ctx = sqlite3_column_int64(st, 0);
    return ROW_STOP;
}

static void bind_event(sqlite3_stmt *st, const void *arg)
{
    const ob_job_event *ev = arg;
    sqlite3_bind_text(st, 1, ev->job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, ev->seq);
    sqlite3_bind_int64(st, 3, ev->time_ms);
    sqlite3_bind_text(st, 4, ev->kind, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, ev->state);
    sqlite3_bind_text(st, 6, ev->message, -1, SQLITE_STATIC);
    bind_progress(st, 7, &ev->progress);
}

/* Numbers ev as the job's next event and inserts it (inside the caller's transaction). */
static ob_status insert_event(ob_store *s, const char *job_id, ob_job_event *ev, ob_err *err)
{
    int64_t last = -1;
    ob_status rc = query(s, "SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?", bind_id,
                         job_id, first_int64, &last, "next event number", err);
    if (rc) return rc;
    if (last < 0) return SQL_ERR(s, err, "next event number");
    ev->seq = last + 1;
    ob_strlcpy(ev->job_id, job_id, sizeof ev->job_id);
    return write_stmt(
        s,
        "INSERT INTO events(job_id, seq, time_ms, kind, state, message, " PROGRESS_COLS
        ") VALUES(?,?,?,?,?,?, ?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        bind_event, ev, "insert event", err);
}

static ob_status write_attempt(ob_store *s, const char *job_id, const ob_attempt *a, ob_err *err);

static void bind_new_job(sqlite3_stmt *st, const void *arg)
{
    const ob_job *job = arg;
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
}

static void bind_job_name(sqlite3_stmt *st, const void *arg)
{
    const ob_job *job = arg;
    sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, job->seq);
}

static ob_status create_job_tx(ob_store *s, void *arg, ob_err *err)
{
    ob_job *job = arg;
    ob_status rc =
        write_stmt(s,
                   "INSERT INTO jobs(id, name, state, spec_json, world_size, max_restarts,"
                   " created_ms, updated_ms, started_ms, finished_ms, message, request_id, labels,"
                   " deadline_ms) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   bind_new_job, job, "insert job", err);
    if (rc && (sqlite3_errcode(s->db) & 0xff) == SQLITE_CONSTRAINT) {
        if (job->request_id[0])
            return OB_ERR(err, OB_ERR_STATE, "a job with request id '%s' or id %s already exists",
                          job->request_id, job->id[0] ? job->id : "(new)");
        return OB_ERR(err, OB_ERR_STATE, "a job with id %s already exists", job->id);
    }
    if (rc) return rc;
    job->seq = sqlite3_last_insert_rowid(s->db);
    if (!job->id[0]) {
        snprintf(job->id, sizeof job->id, "job-%06lld", (long long)job->seq);
        rc = write_stmt(s, "UPDATE jobs SET id = ? WHERE seq = ?", bind_job_name, job, "name job",
                        err);
        if (rc) return rc;
    }
    ob_job_event ev = {.time_ms = job->created_ms, .state = job->state};
    ob_strlcpy(ev.kind, "state", sizeof ev.kind);
    snprintf(ev.message, sizeof ev.message, "submitted: %s", ob_job_state_name(job->state));
    return insert_event(s, job->id, &ev, err);
}

ob_status ob_store_create_job(ob_store *s, ob_job *job, ob_err *err)
{
    return in_tx(s, create_job_tx, job, err);
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

struct attempt_rows {
    ob_job *j;
    size_t cap;
};

static ob_status attempt_row(sqlite3_stmt *st, void *ctx, ob_err *err)
{
    struct attempt_rows *r = ctx;
    ob_job *j = r->j;
    if (j->n_attempts == r->cap) {
        size_t ncap = r->cap ? 2 * r->cap : 4;
        ob_attempt *a = realloc(j->attempts, ncap * sizeof *a);
        if (!a) return OB_ERR(err, OB_ERR_NOMEM, "reading attempts of %s", j->id);
        j->attempts = a;
        r->cap = ncap;
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
    return OB_OK;
}

static ob_status read_attempts(ob_store *s, ob_job *j, ob_err *err)
{
    struct attempt_rows r = {.j = j};
    return query(s,
                 "SELECT number, started_ms, ended_ms, start_step, pgid, exit_code,"
                 " exit_reason, ext_id FROM attempts WHERE job_id = ? ORDER BY number",
                 bind_id, j->id, attempt_row, &r, "read attempts", err);
}

struct job_row {
    ob_store *s;
    ob_job *j;
    int found;
};

static ob_status one_job_row(sqlite3_stmt *st, void *ctx, ob_err *err)
{
    struct job_row *r = ctx;
    r->found = 1;
    ob_status rc = read_job_row(r->s, st, r->j, err);
    return rc ? rc : ROW_STOP;
}

ob_status ob_store_get_job(ob_store *s, const char *id, ob_job *out, ob_err *err)
{
    ob_job j;
    memset(&j, 0, sizeof j);
    struct job_row r = {.s = s, .j = &j};
    ob_status rc = query(s, "SELECT " JOB_COLS " FROM jobs WHERE id = ?", bind_id, id, one_job_row,
                         &r, "read job", err);
    if (!rc && !r.found) return OB_ERR(err, OB_ERR_NOT_FOUND, "no job with id '%.100s'", id);
    if (rc || (rc = read_attempts(s, &j, err))) {
        ob_job_clear(&j);
        return rc;
    }
    *out = j;
    return OB_OK;
}

struct job_list {
    ob_job_state state;
    const char *selector;
    int64_t after_seq;
    int limit;
};

static void bind_job_list(sqlite3_stmt *st, const void *arg)
{
    const struct job_list *l = arg;
    sqlite3_bind_int64(st, 1, l->after_seq);
    sqlite3_bind_int(st, 2, l->state);
    sqlite3_bind_int(st, 3, l->state);
    sqlite3_bind_text(st, 4, l->selector ? l->selector : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, l->limit + 1); /* one more tells whether another page exists */
}

struct job_rows {
    ob_store *s;
    ob_job *jobs;
    size_t count, limit;
    int more;
};

static ob_status job_list_row(sqlite3_stmt *st, void *ctx, ob_err *err)
{
    struct job_rows *r = ctx;
    if (r->count == r->limit) {
        r->more = 1;
        return ROW_STOP;
    }
    ob_status rc = read_job_row(r->s, st, &r->jobs[r->count], err);
    if (rc) return rc;
    r->count++;
    return OB_OK;
}

ob_status ob_store_list_jobs(ob_store *s, ob_job_state state, const char *selector,
                             int64_t after_seq, int limit, ob_job **out, size_t *n, int *more,
                             ob_err *err)
{
    *out = NULL;
    *n = 0;
    *more = 0;
    if (limit <= 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "list limit must be positive");
    struct job_list l = {
        .state = state, .selector = selector, .after_seq = after_seq, .limit = limit};
    struct job_rows r = {.s = s, .limit = (size_t)limit};
    r.jobs = calloc((size_t)limit, sizeof *r.jobs);
    if (!r.jobs) return OB_ERR(err, OB_ERR_NOMEM, "listing jobs");
    ob_status rc = query(s,
                         "SELECT " JOB_COLS " FROM jobs WHERE seq > ? AND (? = 0 OR state = ?)"
                         " AND labels_match(labels, ?) ORDER BY seq LIMIT ?",
                         bind_job_list, &l, job_list_row, &r, "list jobs", err);
    for (size_t i = 0; !rc && i < r.count; i++)
        rc = read_attempts(s, &r.jobs[i], err);
    if (rc) {
        ob_job_array_free(r.jobs, r.count);
        return rc;
    }
    *out = r.jobs;
    *n = r.count;
    *more = r.more;
    return OB_OK;
}

static ob_status update_job_tx(ob_store *s, const ob_job *j, ob_job_event *ev, const ob_attempt *a,
                               ob_err *err);

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

static void bind_job_update(sqlite3_stmt *st, const void *arg)
{
    const ob_job *j = arg;
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
}

struct job_update {
    const ob_job *j;
    ob_job_event *ev;
    const ob_attempt *a;
};

static ob_status update_job_body(ob_store *s, void *arg, ob_err *err)
{
    struct job_update *u = arg;
    ob_status rc =
        write_stmt(s,
                   "UPDATE jobs SET state=?, restarts=?, cancel_requested=?, updated_ms=?,"
                   " started_ms=?, finished_ms=?, next_attempt_ms=?, message=?, ckpt_step=?,"
                   " ckpt_ms=?, ckpt_path=?, step=?, total_steps=?, loss=?, phase=?, freeze_step=?,"
                   " samples_per_s=?, bytes_sent=?, bytes_uncompressed=?, lr=?, freeze_ratio=?,"
                   " eval_step=?, eval_loss=?, eval_accuracy=?, warm_start=?, worker_error_ratio=?,"
                   " server_error_ratio=?, zero_momentum_fraction=?, rewarms=? WHERE id=?",
                   bind_job_update, u->j, "update job", err);
    if (rc) return rc;
    if (sqlite3_changes(s->db) != 1)
        return OB_ERR(err, OB_ERR_NOT_FOUND, "no job with id '%.100s'", u->j->id);
    if (u->ev && (rc = insert_event(s, u->j->id, u->ev, err))) return rc;
    if (u->a && (rc = write_attempt(s, u->j->id, u->a, err))) return rc;
    return OB_OK;
}

static ob_status update_job_tx(ob_store *s, const ob_job *j, ob_job_event *ev, const ob_attempt *a,
                               ob_err *err)
{
    struct job_update u = {.j = j, .ev = ev, .a = a};
    return in_tx(s, update_job_body, &u, err);
}

struct id_row {
    char *id; /* OB_JOB_ID_LEN bytes */
    int found;
};

static ob_status copy_id(sqlite3_stmt *st, void *ctx, ob_err *err)
{
    struct id_row *r = ctx;
    (void)err;
    ob_strlcpy(r->id, text_or_empty(st, 0), OB_JOB_ID_LEN);
    r->found = 1;
    return ROW_STOP;
}

ob_status ob_store_find_request(ob_store *s, const char *request_id, char id[OB_JOB_ID_LEN],
                                ob_err *err)
{
    struct id_row r = {.id = id};
    ob_status rc = query(s, "SELECT id FROM jobs WHERE request_id = ?", bind_id, request_id,
                         copy_id, &r, "find request id", err);
    if (!rc && !r.found)
        rc = OB_ERR(err, OB_ERR_NOT_FOUND, "no job with request id '%.128s'", request_id);
    return rc;
}

static ob_status delete_job_body(ob_store *s, void *arg, ob_err *err)
{
    static const char *const sql[] = {"DELETE FROM events WHERE job_id=?",
                                      "DELETE FROM attempts WHERE job_id=?",
                                      "DELETE FROM jobs WHERE id=?"};
    const char *id = arg;
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        ob_status rc = write_stmt(s, sql[i], bind_id, id, "delete job", err);
        if (rc) return rc;
    }
    if (!sqlite3_changes(s->db)) /* of the last: the job's own row */
        return OB_ERR(err, OB_ERR_NOT_FOUND, "no job with id '%.64s'", id);
    return OB_OK;
}

ob_status ob_store_delete_job(ob_store *s, const char *id, ob_err *err)
{
    return in_tx(s, delete_job_body, (void *)id, err);
}

struct ended_before {
    int64_t finished_before_ms;
    int limit;
};

static void bind_ended_before(sqlite3_stmt *st, const void *arg)
{
    const struct ended_before *e = arg;
    sqlite3_bind_int(st, 1, OB_JOB_SUCCEEDED);
    sqlite3_bind_int(st, 2, OB_JOB_FAILED);
    sqlite3_bind_int(st, 3, OB_JOB_CANCELLED);
    sqlite3_bind_int64(st, 4, e->finished_before_ms);
    sqlite3_bind_int(st, 5, e->limit);
}

struct id_rows {
    char (*ids)[OB_JOB_ID_LEN];
    size_t count, limit;
};

static ob_status id_row(sqlite3_stmt *st, void *ctx, ob_err *err)
{
    struct id_rows *r = ctx;
    (void)err;
    if (r->count == r->limit) return ROW_STOP;
    ob_strlcpy(r->ids[r->count++], text_or_empty(st, 0), OB_JOB_ID_LEN);
    return OB_OK;
}

ob_status ob_store_list_ended_before(ob_store *s, int64_t finished_before_ms, int limit,
                                     char (**ids)[OB_JOB_ID_LEN], size_t *n, ob_err *err)
{
    *ids = NULL;
    *n = 0;
    if (limit <= 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "job limit must be positive");
    struct ended_before e = {.finished_before_ms = finished_before_ms, .limit = limit};
    struct id_rows r = {.limit = (size_t)limit};
    r.ids = calloc((size_t)limit, sizeof *r.ids);
    if (!r.ids) return OB_ERR(err, OB_ERR_NOMEM, "listing ended jobs");
    ob_status rc = query(s,
                         "SELECT id FROM jobs WHERE state IN (?,?,?) AND finished_ms > 0"
                         " AND finished_ms < ? ORDER BY finished_ms LIMIT ?",
                         bind_ended_before, &e, id_row, &r, "list ended jobs", err);
    if (rc) {
        free(r.ids);
        return rc;
    }
    *ids = r.ids;
    *n = r.count;
    return OB_OK;
}

ob_status ob_store_put_attempt(ob_store *s, const char *job_id, const ob_attempt *a, ob_err *err)
{
    return write_attempt(s, job_id, a, err);
}

struct attempt_write {
    const char *job_id;
    const ob_attempt *a;
};

static void bind_attempt(sqlite3_stmt *st, const void *arg)
{
    const struct attempt_write *w = arg;
    const ob_attempt *a = w->a;
    sqlite3_bind_text(st, 1, w->job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, a->number);
    sqlite3_bind_int64(st, 3, a->started_ms);
    sqlite3_bind_int64(st, 4, a->ended_ms);
    sqlite3_bind_int64(st, 5, a->start_step);
    sqlite3_bind_int(st, 6, a->pgid);
    sqlite3_bind_int(st, 7, a->exit_code);
    sqlite3_bind_text(st, 8, a->exit_reason, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 9, a->ext_id, -1, SQLITE_STATIC);
}

/* One statement: a transaction of its own, or a part of the caller's. */
static ob_status write_attempt(ob_store *s, const char *job_id, const ob_attempt *a, ob_err *err)
{
    struct attempt_write w = {.job_id = job_id, .a = a};
    return write_stmt(s,
                      "INSERT OR REPLACE INTO attempts(job_id, number, started_ms, ended_ms,"
                      " start_step, pgid, exit_code, exit_reason, ext_id)"
                      " VALUES(?,?,?,?,?,?,?,?,?)",
                      bind_attempt, &w, "write attempt", err);
}

static void bind_transient_text(sqlite3_stmt *st, const void *text)
{
    sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
}

static ob_status probe_body(ob_store *s, void *arg, ob_err *err)
{
    return write_stmt(s, "INSERT OR REPLACE INTO meta(key, value) VALUES('probe', ?)",
                      bind_transient_text, arg, "probe write", err);
}

ob_status ob_store_probe(ob_store *s, int64_t now_ms, ob_err *err)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)now_ms);
    return in_tx(s, probe_body, text, err);
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
    int64_t v = -1;
    ob_status rc = query(s, "PRAGMA page_count", NULL, NULL, first_int64, &v, "page count", err);
    if (!rc && v < 0) rc = SQL_ERR(s, err, "page count");
    if (!rc) *pages = v;
    return rc;
}

struct event_list {
    const char *job_id;
    int64_t after_seq;
    int limit;
};

static void bind_event_list(sqlite3_stmt *st, const void *arg)
{
    const struct event_list *l = arg;
    sqlite3_bind_text(st, 1, l->job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, l->after_seq);
    sqlite3_bind_int(st, 3, l->limit);
}

struct event_rows {
    const char *job_id;
    ob_job_event *evs;
    size_t count, cap;
};

static ob_status event_row(sqlite3_stmt *st, void *ctx, ob_err *err)
{
    struct event_rows *r = ctx;
    if (r->count == r->cap) {
        size_t ncap = r->cap ? 2 * r->cap : 16;
        ob_job_event *e = realloc(r->evs, ncap * sizeof *e);
        if (!e) return OB_ERR(err, OB_ERR_NOMEM, "listing events");
        r->evs = e;
        r->cap = ncap;
    }
    ob_job_event *e = &r->evs[r->count++];
    memset(e, 0, sizeof *e);
    e->seq = sqlite3_column_int64(st, 0);
    ob_strlcpy(e->job_id, r->job_id, sizeof e->job_id);
    e->time_ms = sqlite3_column_int64(st, 1);
    ob_strlcpy(e->kind, text_or_empty(st, 2), sizeof e->kind);
    e->state = (ob_job_state)sqlite3_column_int(st, 3);
    ob_strlcpy(e->message, text_or_empty(st, 4), sizeof e->message);
    read_progress(st, 5, &e->progress);
    return OB_OK;
}

ob_status ob_store_list_events(ob_store *s, const char *job_id, int64_t after_seq, int limit,
                               ob_job_event **out, size_t *n, ob_err *err)
{
    *out = NULL;
    *n = 0;
    if (limit <= 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "event limit must be positive");
    struct event_list l = {.job_id = job_id, .after_seq = after_seq, .limit = limit};
    struct event_rows r = {.job_id = job_id};
    ob_status rc = query(s,
                         "SELECT seq, time_ms, kind, state, message, " PROGRESS_COLS
                         " FROM events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                         bind_event_list, &l, event_row, &r, "list events", err);
    if (rc) {
        free(r.evs);
        return rc;
    }
    *out = r.evs;
    *n = r.count;
    return OB_OK;
}

static ob_status state_count_row(sqlite3_stmt *st, void *ctx, ob_err *err)
{
    int64_t *counts = ctx;
    (void)err;
    int k = sqlite3_column_int(st, 0);
    if (k >= 0 && k < OB_JOB_STATE_COUNT) counts[k] = sqlite3_column_int64(st, 1);
    return OB_OK;
}

ob_status ob_store_count_states(ob_store *s, int64_t counts[OB_JOB_STATE_COUNT], ob_err *err)
{
    for (int i = 0; i < OB_JOB_STATE_COUNT; i++)
        counts[i] = 0;
    return query(s, "SELECT state, COUNT(*) FROM jobs GROUP BY state", NULL, NULL, state_count_row,
                 counts, "count jobs", err);
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

uint64_t ob_store_generation(ob_store *s)
{
    return (uint64_t)sqlite3_total_changes64(s->db);
}

int ob_store_generation_lockfree(void)
{
    return sqlite3_threadsafe() == 1;
}
