/* onebitctl: the command line for onebitd.
 *
 *   onebitctl submit -f job.yaml [--np N] [--watch]      onebitctl status JOB
 *   onebitctl list [--state S]                           onebitctl watch JOB
 *   onebitctl cancel JOB                                 onebitctl checkpoints JOB
 *   onebitctl inspect CHECKPOINT_DIR
 *
 * gRPC by default (--server / ONEBIT_SERVER, 127.0.0.1:50051); --rest URL uses the REST API.
 * --token / ONEBIT_TOKEN; -o table|json. Exit status: 0 success (watch: the job succeeded),
 * 1 the request was refused or the job did not succeed, 2 bad usage, 3 the server cannot be
 * reached. */
#define _GNU_SOURCE /* getopt_long */
#include "client.h"
#include "completion.h"
#include "onebit/base.h"
#include "onebit/checkpoint.h"
#include "onebit/report.h"
#include "onebit/token.h"
#include "render.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* logs --tail: the server's limit (OB_LOG_TAIL_MAX in service.h, not linked here). */
#define OB_LOG_TAIL_MAX_LINES 100000

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

typedef struct opts {
    const char *server, *rest, *token, *token_file, *request_id, *deadline, *since;
    /* --tls (or ONEBIT_TLS=1), --ca (ONEBIT_CA), --tls-server-name, --cert, --key */
    int tls;
    const char *ca, *tls_server_name, *cert, *key;
    long tail;                    /* logs --tail: the last N lines; 0: all */
    char token_buf[OB_TOKEN_MAX]; /* a token read from a file */
    char labels[OB_LABELS_LEN];   /* --label k=v, repeated, joined by commas */
    int json;
    /* verb arguments */
    const char *file, *state, *name;
    int np, max_restarts, watch, limit, follow, keep_checkpoints, quiet;
    long rank; /* logs --rank, -1: every rank */
    const char *model, *data, *optimizer, *lr, *freeze_step;
    long steps, batch_size;
    const char *program;    /* submit --program FILE */
    char *const *prog_args; /* submit --program FILE ... -- ARGS: the program's arguments */
    int nprog_args;
    const char *positional[4];
    int npos;
} opts;

/* ---- help ------------------------------------------------------------------------------------ */

static const char *const usage_main =
    "usage: onebitctl [--server HOST:PORT | --rest URL] [--token T] [--tls --ca FILE]\n"
    "                 [-o table|json] VERB ...\n"
    "\n"
    "Verbs:\n"
    "  submit       submit a job (-f FILE, or flags for the common fields); prints its id\n"
    "  status       a job in detail\n"
    "  list         jobs, newest last (--state S)\n"
    "  watch        follow a job to its end with a progress bar; exit 0 if it succeeds\n"
    "  cancel       cancel a job (its workers checkpoint and stop)\n"
    "  delete       remove a job that has ended, with its checkpoints unless kept\n"
    "  version      onebitctl's release and the server's\n"
    "  logs         the output of a job's workers (--rank R, -f to follow)\n"
    "  checkpoints  a job's checkpoints, newest first\n"
    "  inspect      read a checkpoint directory here and verify it (no server needed)\n"
    "  completion   print a bash or zsh completion script\n"
    "\n"
    "Options (before or after the verb):\n"
    "  --server HOST:PORT  gRPC address of onebitd [ONEBIT_SERVER, else 127.0.0.1:50051]\n"
    "  --rest URL          use the REST API at URL instead (e.g. http://127.0.0.1:8080)\n"
    "  --token T           bearer token [ONEBIT_TOKEN]\n"
    "  --token-file F      read it from F [ONEBIT_TOKEN_FILE; else the token onebitd made\n"
    "                      in its state directory, $ONEBIT_STATE_DIR/token or ./var/token]\n"
    "  --tls               talk TLS to onebitd (also: --ca, an https:// URL, ONEBIT_TLS=1)\n"
    "  --ca FILE           PEM CA to check onebitd's certificate with [ONEBIT_CA; else the\n"
    "                      system's roots]\n"
    "  --tls-server-name N gRPC: the name the certificate must carry [the --server host]\n"
    "  --cert F, --key F   a client certificate and its key, for onebitd --tls-client-ca\n"
    "  -o table|json       output for people (default) or scripts (proto3 JSON)\n"
    "  --version           onebitctl's release (the verb version asks the server too)\n"
    "\n"
    "Exit status: 0 ok, 1 refused or job not successful, 2 bad usage, 3 server unreachable.\n"
    "'onebitctl VERB --help' shows the verb's options and examples.\n";

typedef struct verb {
    const char *name;
    const char *help;
    int (*run)(obctl_client *c, const opts *o);
    int needs_server;
    /* for completion: the verb's flags ("--np=": takes a value), its argument, one line */
    const char *flags;
    obctl_arg_kind arg;
    const char *summary;
} verb;

static int usage_error(const char *verb_name, const char *fmt, const char *arg)
{
    fprintf(stderr, "onebitctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nsee 'onebitctl %s%s--help'\n", verb_name ? verb_name : "",
            verb_name ? " " : "");
    return EXIT_USAGE;
}

/* ---- outcomes -------------------------------------------------------------------------------- */

static int fail(const ob_err *err)
{
    fprintf(stderr, "onebitctl: %s\n", err->msg);
    return err->code == OB_ERR_COMM ? EXIT_UNREACHABLE : EXIT_FAIL;
}

/* ---- verbs ----------------------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct watcher {
    obctl_client *c;
    const opts *o;
    const char *id;
    int tty, width, restarts, drawn;
    ob_job_state final_state;
} watcher;

static int on_event(const ob_job_event *e, void *user)
{
    watcher *w = user;
    if (interrupted) return 1;
    if (w->o->json) {
        obctl_print_event_json(stdout, e);
    } else if (!w->tty) {
        obctl_print_event_line(stdout, e);
    } else {
        if (!strcmp(e->kind, "attempt") ||
            (!strcmp(e->kind, "state") && e->state == OB_JOB_RESTARTING))
            w->restarts += !strcmp(e->kind, "state");
        if (strcmp(e->kind, "step") != 0) {
            /* Events other than steps scroll above the bar. */
            if (w->drawn) fprintf(stdout, "\r\033[K");
            obctl_print_event_line(stdout, e);
        }
        obctl_draw_bar(stdout, e, w->id, w->restarts, w->width);
        w->drawn = 1;
    }
    if (!strcmp(e->kind, "state") && ob_job_state_final(e->state)) w->final_state = e->state;
    return 0;
}

/* Follows a job to its end; prints the summary. Returns the exit status. */
static int follow(obctl_client *c, const opts *o, const char *id)
{
    watcher w = {c, o, id, isatty(STDOUT_FILENO) && !o->json, 100, 0, 0, OB_JOB_UNSPECIFIED};
    struct winsize ws;
    if (w.tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) w.width = ws.ws_col;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);

    ob_err err = {0};
    ob_status st = obctl_watch(c, id, 0, on_event, &w, &err);
    if (w.drawn) fprintf(stdout, "\n");
    if (interrupted) {
        fprintf(stderr,
                "onebitctl: stopped watching; the job goes on (onebitctl cancel %s to "
                "stop it)\n",
                id);
        return EXIT_FAIL;
    }
    if (st != OB_OK) return fail(&err);
    ob_job j;
    if (obctl_get(c, id, &j, &err) != OB_OK) return fail(&err);
    if (!o->json) obctl_print_summary(stdout, &j);
    int rc = j.state == OB_JOB_SUCCEEDED ? EXIT_OK : EXIT_FAIL;
    ob_job_clear(&j);
    return rc;
}

/* Reads a whole file (at most 1 MiB, the spec limit) into *out (malloc'd). */
static int read_file(const char *path, char **out, size_t *len)
{
    FILE *f = !strcmp(path, "-") ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "onebitctl: %s: %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    size_t cap = (1u << 20) + 1;
    char *buf = malloc(cap + 1);
    size_t n = buf ? fread(buf, 1, cap, f) : 0;
    if (f != stdin) fclose(f);
    if (!buf || n == cap) {
        free(buf);
        fprintf(stderr, "onebitctl: %s: larger than 1 MiB\n", path);
        return EXIT_USAGE;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return EXIT_OK;
}

/* A spec from flags, as YAML. */
static int spec_from_flags(const opts *o, char **out, size_t *len)
{
    if (!o->model || !o->data || !o->optimizer || o->steps <= 0 || o->batch_size <= 0) {
        fprintf(stderr, "onebitctl: submit: give -f FILE, or at least --model, --data, "
                        "--optimizer, --steps and --batch-size\nsee 'onebitctl submit --help'\n");
        return EXIT_USAGE;
    }
    char *s = malloc(2048);
    if (!s) return EXIT_FAIL;
    int n = snprintf(s, 2048,
                     "name: %s\nmodel: {type: %s}\ndata: {type: %s}\n"
                     "optimizer: {type: %s%s%s}\nbatch_size: %ld\nsteps: %ld\n%s%s%s",
                     o->name ? o->name : "cli-job", o->model, o->data, o->optimizer,
                     o->freeze_step ? ", freeze_step: " : "", o->freeze_step ? o->freeze_step : "",
                     o->batch_size, o->steps, o->lr ? "lr: {peak: " : "", o->lr ? o->lr : "",
                     o->lr ? "}\n" : "");
    *out = s;
    *len = (size_t)n;
    return EXIT_OK;
}

/* A program job's spec for FILE (its absolute path; it runs in its own directory) and the
 * arguments after --, as JSON. The path is the server's: onebitd runs it where it lies, under
 * one of its data roots. */
static int spec_from_program(const opts *o, char **out, size_t *len)
{
    char *abs = realpath(o->program, NULL);
    if (!abs) {
        fprintf(stderr, "onebitctl: --program %s: %s\n", o->program, strerror(errno));
        return EXIT_USAGE;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", abs);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    json_t *args = json_array();
    for (int i = 0; args && i < o->nprog_args; i++)
        json_array_append_new(args, json_string(o->prog_args[i]));
    json_t *spec = json_pack("{s:{s:s, s:s, s:o}}", "program", "entrypoint", abs, "workdir", dir,
                             "args", args);
    if (spec && o->name) json_object_set_new(spec, "name", json_string(o->name));
    if (spec && o->steps > 0) json_object_set_new(spec, "steps", json_integer(o->steps));
    *out = spec ? json_dumps(spec, JSON_COMPACT) : NULL;
    json_decref(spec);
    free(abs);
    if (!*out) return EXIT_FAIL;
    *len = strlen(*out);
    return EXIT_OK;
}

static int v_submit(obctl_client *c, const opts *o)
{
    char *spec = NULL;
    size_t len = 0;
    int rc;
    if (o->file && (o->model || o->data || o->optimizer || o->steps || o->batch_size))
        return usage_error("submit", "%s", "-f FILE and the spec flags exclude each other");
    if (o->program && (o->file || o->model || o->data || o->optimizer || o->batch_size))
        return usage_error("submit", "%s",
                           "--program and -f FILE or the model's flags exclude each other");
    rc = o->program ? spec_from_program(o, &spec, &len)
         : o->file  ? read_file(o->file, &spec, &len)
                    : spec_from_flags(o, &spec, &len);
    if (rc != EXIT_OK) return rc;
    ob_job j;
    ob_err err = {0};
    ob_status st = obctl_submit(c, spec, len, o->np, o->max_restarts, o->request_id, o->labels,
                                o->deadline, &j, &err);
    free(spec);
    if (st != OB_OK) return fail(&err);
    if (o->json && !o->watch)
        obctl_print_job_json(stdout, &j);
    else
        printf("%s\n", j.id);
    fflush(stdout);
    char id[OB_JOB_ID_LEN];
    snprintf(id, sizeof id, "%s", j.id);
    ob_job_clear(&j);
    return o->watch ? follow(c, o, id) : EXIT_OK;
}

static int need_job(const opts *o, const char *verb_name)
{
    if (o->npos != 1) {
        fprintf(stderr, "onebitctl: %s: expected one JOB id\nsee 'onebitctl %s --help'\n",
                verb_name, verb_name);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

static int v_status(obctl_client *c, const opts *o)
{
    int rc = need_job(o, "status");
    if (rc) return rc;
    ob_job j;
    ob_err err = {0};
    if (obctl_get(c, o->positional[0], &j, &err) != OB_OK) return fail(&err);
    if (o->json)
        obctl_print_job_json(stdout, &j);
    else
        obctl_print_job(stdout, &j);
    ob_job_clear(&j);
    return EXIT_OK;
}

static int v_list(obctl_client *c, const opts *o)
{
    ob_job_state state = OB_JOB_UNSPECIFIED;
    if (o->state && ob_job_state_parse(o->state, &state) != OB_OK)
        return usage_error("list",
                           "--state %s: expected PENDING, RUNNING, RESTARTING, "
                           "SUCCEEDED, FAILED or CANCELLED",
                           o->state);
    if (o->npos) return usage_error("list", "unexpected argument '%s'", o->positional[0]);
    ob_job *all = NULL;
    size_t n_all = 0;
    char token[OB_PAGE_TOKEN_LEN] = "";
    ob_err err = {0};
    do { /* every page, up to --limit */
        ob_job *page;
        size_t n;
        char next[OB_PAGE_TOKEN_LEN];
        if (obctl_list(c, state, o->labels, 200, token, &page, &n, next, &err) != OB_OK) {
            ob_job_array_free(all, n_all);
            return fail(&err);
        }
        ob_job *grown = realloc(all, (n_all + n + 1) * sizeof *all);
        if (!grown) {
            ob_job_array_free(page, n);
            ob_job_array_free(all, n_all);
            fprintf(stderr, "onebitctl: out of memory\n");
            return EXIT_FAIL;
        }
        all = grown;
        if (n) memcpy(all + n_all, page, n * sizeof *page); /* page is NULL when n is 0 */
        n_all += n;
        free(page); /* the jobs moved into all */
        snprintf(token, sizeof token, "%s", next);
    } while (token[0] && (o->limit <= 0 || n_all < (size_t)o->limit));
    size_t shown = o->limit > 0 && n_all > (size_t)o->limit ? (size_t)o->limit : n_all;
    if (o->quiet)
        for (size_t i = 0; i < shown; i++)
            printf("%s\n", all[i].id);
    else if (o->json)
        obctl_print_jobs_json(stdout, all, shown);
    else if (n_all == 0)
        printf("no jobs%s%s\n", o->state ? " in state " : "", o->state ? o->state : "");
    else
        obctl_print_jobs(stdout, all, shown);
    ob_job_array_free(all, n_all);
    return EXIT_OK;
}

static int v_watch(obctl_client *c, const opts *o)
{
    int rc = need_job(o, "watch");
    return rc ? rc : follow(c, o, o->positional[0]);
}

static int v_cancel(obctl_client *c, const opts *o)
{
    int rc = need_job(o, "cancel");
    if (rc) return rc;
    ob_job j;
    ob_err err = {0};
    if (obctl_cancel(c, o->positional[0], &j, &err) != OB_OK) return fail(&err);
    if (o->json)
        obctl_print_job_json(stdout, &j);
    else if (ob_job_state_final(j.state))
        printf("%s %s\n", j.id, ob_job_state_name(j.state));
    else
        printf("%s cancelling: its workers checkpoint and stop (onebitctl watch %s)\n", j.id, j.id);
    ob_job_clear(&j);
    return EXIT_OK;
}

static int v_version(obctl_client *c, const opts *o)
{
    (void)o;
    printf("onebitctl %s\n", ONEBIT_VERSION);
    char version[64], api[64];
    ob_err err = {0};
    if (obctl_version(c, version, api, &err) != OB_OK) return fail(&err);
    printf("onebitd %s (api %s) at %s\n", version, api, obctl_client_target(c));
    return EXIT_OK;
}

static int v_delete(obctl_client *c, const opts *o)
{
    int rc = need_job(o, "delete");
    if (rc) return rc;
    int deleted = 0;
    ob_err err = {0};
    if (obctl_delete(c, o->positional[0], o->keep_checkpoints, &deleted, &err) != OB_OK)
        return fail(&err);
    if (o->keep_checkpoints)
        printf("%s deleted; its checkpoints are kept\n", o->positional[0]);
    else
        printf("%s deleted with its %d checkpoint%s\n", o->positional[0], deleted,
               deleted == 1 ? "" : "s");
    return EXIT_OK;
}

static int v_checkpoints(obctl_client *c, const opts *o)
{
    int rc = need_job(o, "checkpoints");
    if (rc) return rc;
    ob_checkpoint_info *ck;
    size_t n;
    ob_err err = {0};
    if (obctl_checkpoints(c, o->positional[0], &ck, &n, &err) != OB_OK) return fail(&err);
    if (o->json)
        obctl_print_checkpoints_json(stdout, ck, n);
    else if (n == 0)
        printf("%s has no checkpoints yet\n", o->positional[0]);
    else
        obctl_print_checkpoints(stdout, ck, n);
    free(ck);
    return EXIT_OK;
}

/* The rank of a line tagged by mpirun ("[1,3]<stdout>:...") or srun ("3: ..."), and where its
 * text starts; -1 for an untagged line (the launcher's own messages). */
static long line_rank(const char *line, const char **text)
{
    long r;
    *text = line + ob_log_tag(line, strlen(line), &r, NULL);
    return r;
}

static void print_log_line(const opts *o, const char *line)
{
    const char *text;
    long r = line_rank(line, &text);
    if (o->rank < 0)
        puts(line);
    else if (r == o->rank)
        puts(text);
}

/* --since: a duration back from now ("10m", "1h30m") or an RFC 3339 time
 * ("2026-11-23T15:04:05Z", "2026-11-23T16:04:05.5+01:00"), as Unix ms. */
static int parse_since(const char *text, int64_t *ms)
{
    int64_t d;
    if (ob_duration_parse(text, &d, NULL) == OB_OK) {
        *ms = ob_wall_ms() - d;
        return *ms > 0;
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int used = 0;
    if (sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &used) != 6 ||
        used != 19 || tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
        tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return 0;
    const char *p = text + used;
    int64_t frac_ms = 0;
    if (*p == '.') { /* a fraction of a second: its first three digits count */
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 3) frac_ms = frac_ms * 10 + (*p - '0');
        if (digits == 0 || digits > 9) return 0;
        for (; digits < 3; digits++)
            frac_ms *= 10;
    }
    int64_t offset_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, n = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &n) != 2 || n != 5 || oh > 23 || om > 59) return 0;
        offset_s = (*p == '+' ? 1 : -1) * (int64_t)(oh * 3600 + om * 60);
        p += 6;
    } else {
        return 0;
    }
    if (*p) return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    if (t == (time_t)-1) return 0;
    *ms = ((int64_t)t - offset_s) * 1000 + frac_ms;
    return *ms > 0;
}

/* Prints whole lines of a log stream as they complete (the rank filter needs whole lines). */
typedef struct log_printer {
    const opts *o;
    char *pending; /* a line not finished yet */
    size_t len;
    int failed;
} log_printer;

static int on_log(const char *data, size_t len, void *user)
{
    log_printer *lp = user;
    char *joined = realloc(lp->pending, lp->len + len + 1);
    if (!joined) {
        lp->failed = 1;
        return 1;
    }
    lp->pending = joined;
    memcpy(lp->pending + lp->len, data, len);
    lp->len += len;
    lp->pending[lp->len] = '\0';
    char *start = lp->pending, *nl;
    while ((nl = memchr(start, '\n', lp->len - (size_t)(start - lp->pending))) != NULL) {
        *nl = '\0';
        print_log_line(lp->o, start);
        start = nl + 1;
    }
    lp->len -= (size_t)(start - lp->pending);
    memmove(lp->pending, start, lp->len);
    fflush(stdout);
    return interrupted;
}

static int v_logs(obctl_client *c, const opts *o)
{
    int rc = need_job(o, "logs");
    if (rc) return rc;
    int64_t since_ms = 0;
    if (o->since && !parse_since(o->since, &since_ms))
        return usage_error("logs",
                           "--since %s: expected a duration (10m, 1h30m) or a time "
                           "(2026-11-23T15:04:05Z)",
                           o->since);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    log_printer lp = {o, NULL, 0, 0};
    ob_err err = {0};
    /* One stream: the server sends what is there, then, with -f, what is written, and ends it
     * once the job has ended. */
    ob_status st = obctl_stream_logs(c, o->positional[0], (int)o->tail, since_ms, o->follow, on_log,
                                     &lp, &err);
    if (lp.len && !lp.failed) {
        lp.pending[lp.len] = '\0';
        print_log_line(o, lp.pending);
    }
    free(lp.pending);
    if (lp.failed) {
        fprintf(stderr, "onebitctl: out of memory\n");
        return EXIT_FAIL;
    }
    if (interrupted) return EXIT_OK;
    return st == OB_OK ? EXIT_OK : fail(&err);
}

static int v_inspect(obctl_client *c, const opts *o)
{
    (void)c;
    if (o->npos != 1) return usage_error("inspect", "%s", "expected one CHECKPOINT_DIR");
    const char *dir = o->positional[0];
    ob_ckpt_meta m;
    ob_err err = {0}, verr = {0};
    if (ob_ckpt_read_meta(dir, &m, NULL, &err) != OB_OK) {
        fprintf(stderr, "onebitctl: %s\n", err.msg);
        return EXIT_FAIL;
    }
    ob_status vst = ob_ckpt_verify(dir, NULL, &verr);
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "path", json_string(dir));
        json_object_set_new(j, "step", json_integer(m.step));
        json_object_set_new(j, "phase", json_string(m.phase ? "compression" : "warmup"));
        json_object_set_new(j, "freezeStep", json_integer(m.freeze_step));
        json_object_set_new(j, "worldSize", json_integer(m.world_size));
        json_object_set_new(j, "numParams", json_integer((json_int_t)m.num_params));
        json_object_set_new(j, "paddedSize", json_integer((json_int_t)m.padded_size));
        json_object_set_new(j, "chunkSize", json_integer((json_int_t)m.chunk_size));
        json_object_set_new(j, "blockSize", json_integer((json_int_t)m.block_size));
        json_object_set_new(j, "formatVersion", json_integer(m.format_version));
        json_object_set_new(j, "verifies", json_boolean(vst == OB_OK));
        if (vst != OB_OK) json_object_set_new(j, "problem", json_string(verr.msg));
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) puts(text);
        free(text);
        json_decref(j);
    } else {
        printf("Checkpoint:  %s\n", dir);
        printf("Step:        %ld\n", m.step);
        printf("Phase:       %s (of the next step)\n", m.phase ? "compression" : "warmup");
        if (m.freeze_step >= 0)
            printf("Freeze step: %ld\n", m.freeze_step);
        else
            printf("Freeze step: - (still in the warmup)\n");
        printf("World size:  %d\n", m.world_size);
        printf("Parameters:  %llu (%.1f MB each for params, m, v)\n",
               (unsigned long long)m.num_params, 4e-6 * (double)m.num_params);
        if (m.padded_size)
            printf("Errors:      worker %llu, server chunk %llu floats per rank (block %llu)\n",
                   (unsigned long long)m.padded_size, (unsigned long long)m.chunk_size,
                   (unsigned long long)m.block_size);
        printf("Verifies:    %s\n", vst == OB_OK ? "yes" : verr.msg);
    }
    return vst == OB_OK ? EXIT_OK : EXIT_FAIL;
}

static int v_completion(obctl_client *c, const opts *o);

static const verb verbs[] = {
    {"submit",
     "usage: onebitctl submit -f FILE [--np N] [--max-restarts N] [--deadline D] [--watch]\n"
     "       onebitctl submit --model M --data D --optimizer O --steps N --batch-size B\n"
     "                        [--lr X] [--freeze-step N|auto] [--name NAME] [--np N] [--watch]\n"
     "       onebitctl submit --program SCRIPT [--steps N] [--name NAME] [--np N] -- ARGS...\n"
     "  -f FILE            job spec, YAML or JSON ('-': standard input)\n"
     "  --optimizer O      adam, onebit_adam, binsgdm (1 bit from the first step) or softsign\n"
     "  --program SCRIPT   a program job: SCRIPT (a path on onebitd's machine, under one of\n"
     "                     its data roots) runs on every rank in its directory with ARGS\n"
     "                     (engine/python: import onebit); --steps N for the progress bar\n"
     "  --np N             ranks (0: one per GPU of the service's machine, else one) [0]\n"
     "  --max-restarts N   restarts after failures (-1: the service default) [-1]\n"
     "  --watch            follow the job to its end (exit 0 when it succeeds)\n"
     "  --request-id ID    submit at most once: a retry with the same ID answers the same job\n"
     "  --label K=V        a label of the job (repeatable); onebitctl list --label selects\n"
     "  --deadline D       stop the job if it has not ended D after its first start (90m, 2h,\n"
     "                     1h30m); it ends FAILED, \"deadline exceeded\", after a checkpoint\n"
     "Examples:\n"
     "  onebitctl submit -f examples/fmnist-mlp-onebit.yaml --np 4 --watch\n"
     "  onebitctl submit --model mlp --data synthetic_classification --optimizer onebit_adam \\\n"
     "                   --steps 500 --batch-size 32 --freeze-step 100 --np 2\n"
     "  onebitctl submit --model mlp --data synthetic_classification --optimizer binsgdm \\\n"
     "                   --steps 500 --batch-size 32 --np 2\n"
     "  onebitctl submit --program examples/pytorch/gpt.py --np 4 --watch -- --steps 600\n",
     v_submit, 1,
     "-f= --file= --np= --max-restarts= --request-id= --label= --watch --model= --data= "
     "--optimizer= --steps= --batch-size= --lr= --freeze-step= --name= --deadline= --program=",
     OBCTL_ARG_NONE, "submit a job"},
    {"status",
     "usage: onebitctl status JOB\n"
     "  state, attempts, progress, loss, traffic saved, newest checkpoint\n"
     "Example:\n  onebitctl status job-000001\n  onebitctl status job-000001 -o json | jq "
     ".progress\n",
     v_status, 1, "", OBCTL_ARG_JOB, "a job in detail"},
    {"list",
     "usage: onebitctl list [--state S] [--label K=V]... [--limit N] [-q]\n"
     "  --state S   PENDING, RUNNING, RESTARTING, SUCCEEDED, FAILED or CANCELLED\n"
     "  --label K=V only jobs with this label (repeatable: all of them)\n"
     "  --limit N   at most N jobs [all]\n"
     "  -q, --quiet only the job ids, one a line\n"
     "Example:\n  onebitctl list --state RUNNING --label team=nlp\n",
     v_list, 1, "--state= --label= --limit= -q --quiet", OBCTL_ARG_NONE, "jobs, newest last"},
    {"watch",
     "usage: onebitctl watch JOB\n"
     "  a live progress bar on a terminal (plain lines otherwise, JSON lines with -o json);\n"
     "  exits 0 when the job succeeds, 1 when it fails or is cancelled. Ctrl-C stops watching,\n"
     "  not the job.\n"
     "Example:\n  onebitctl watch job-000001\n",
     v_watch, 1, "", OBCTL_ARG_JOB, "follow a job to its end"},
    {"cancel",
     "usage: onebitctl cancel JOB\n"
     "  the job's workers finish their step, checkpoint and stop\n"
     "Example:\n  onebitctl cancel job-000001\n",
     v_cancel, 1, "", OBCTL_ARG_JOB, "cancel a job"},
    {"version",
     "usage: onebitctl version\n"
     "  this program's release, then the server's release and API\n",
     v_version, 1, "", OBCTL_ARG_NONE, "the releases of onebitctl and the server"},
    {"delete",
     "usage: onebitctl delete JOB [--keep-checkpoints]\n"
     "  removes a job that has ended: its record, events, log and checkpoints\n"
     "  --keep-checkpoints  leave its checkpoints (a later job may warm-start from them)\n"
     "Example:\n  onebitctl delete job-000001\n",
     v_delete, 1, "--keep-checkpoints", OBCTL_ARG_JOB, "remove a job that has ended"},
    {"logs",
     "usage: onebitctl logs JOB [--tail N] [--since D|T] [--rank R] [-f]\n"
     "  the output of the job's workers, every attempt; lines carry their rank as [job,rank]\n"
     "  --tail N      only the last N lines of the log (every rank's lines count)\n"
     "  --since D|T   only lines written in the last D (10m, 1h30m) or since the time T\n"
     "                (2026-11-23T15:04:05Z), to within about a second\n"
     "  --rank R      only rank R's lines, without the tag\n"
     "  -f, --follow  go on with new lines as they are written, until the job ends\n"
     "Examples:\n  onebitctl logs job-000001 --tail 100 --since 10m -f\n"
     "  onebitctl logs job-000001 --rank 0 -f\n  onebitctl logs job-000001 | grep error\n",
     v_logs, 1, "--tail= --since= --rank= -f --follow", OBCTL_ARG_JOB,
     "the output of a job's workers"},
    {"checkpoints",
     "usage: onebitctl checkpoints JOB\n"
     "  the job's committed checkpoints, newest first\n"
     "Example:\n  onebitctl checkpoints job-000001\n",
     v_checkpoints, 1, "", OBCTL_ARG_JOB, "a job's checkpoints"},
    {"inspect",
     "usage: onebitctl inspect CHECKPOINT_DIR\n"
     "  reads the HDF5 files here (no server): step, phase, freeze step, sizes, world size,\n"
     "  and whether every file verifies; exit 1 when it does not\n"
     "Example:\n  onebitctl inspect var/checkpoints/job-000001/step-00001000\n",
     v_inspect, 0, "", OBCTL_ARG_DIR, "read and verify a checkpoint directory"},
    {"completion",
     "usage: onebitctl completion bash|zsh\n"
     "  prints a completion script: verbs, flags, and job ids (from onebitctl list -q with\n"
     "  the --server, --rest and --token options already typed)\n"
     "Examples:\n  source <(onebitctl completion bash)\n"
     "  onebitctl completion zsh > \"${fpath[1]}/_onebitctl\"\n",
     v_completion, 0, "", OBCTL_ARG_SHELL, "print a shell completion script"},
};

/* Every verb takes these; "=": with a value. */
static const char *const global_flags = "--server= --rest= --token= --token-file= --tls --ca= "
                                        "--tls-server-name= --cert= --key= -o= --output= --help";

static int v_completion(obctl_client *c, const opts *o)
{
    (void)c;
    if (o->npos != 1) return usage_error("completion", "%s", "expected bash or zsh");
    enum { N = sizeof verbs / sizeof *verbs };
    obctl_completion_verb cv[N];
    for (size_t i = 0; i < N; i++)
        cv[i] =
            (obctl_completion_verb){verbs[i].name, verbs[i].summary, verbs[i].flags, verbs[i].arg};
    if (obctl_completion_write(stdout, o->positional[0], cv, N, global_flags) != 0)
        return usage_error("completion", "no completion for shell '%s': expected bash or zsh",
                           o->positional[0]);
    return EXIT_OK;
}

static const verb *find_verb(const char *name)
{
    for (size_t i = 0; i < sizeof verbs / sizeof *verbs; i++)
        if (!strcmp(verbs[i].name, name)) return &verbs[i];
    return NULL;
}

/* ---- arguments ------------------------------------------------------------------------------- */

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "onebitctl: %s: expected an integer in [%ld, %ld], got '%s'\n", flag, lo,
                hi, v);
        return 0;
    }
    *out = x;
    return 1;
}

/* The token: --token, ONEBIT_TOKEN, --token-file or ONEBIT_TOKEN_FILE, else the token onebitd
 * made in its state directory ($ONEBIT_STATE_DIR, else ./var) when that file is there. Returns
 * -1 to go on, or an exit status. */
static int find_token(opts *o)
{
    if (!o->token || !o->token[0]) o->token = getenv("ONEBIT_TOKEN");
    if (o->token && o->token[0]) return -1;
    o->token = NULL;
    const char *file = o->token_file ? o->token_file : getenv("ONEBIT_TOKEN_FILE");
    char path[4096];
    if (!file || !file[0]) {
        const char *state = getenv("ONEBIT_STATE_DIR");
        snprintf(path, sizeof path, "%s/token", state && state[0] ? state : "./var");
        file = path;
        if (access(file, F_OK) != 0) return -1; /* no local daemon's token: none */
    }
    ob_err err;
    ob_err_clear(&err);
    if (ob_token_read(file, o->token_buf, sizeof o->token_buf, &err) != OB_OK) {
        fprintf(stderr, "onebitctl: %s\n", err.msg);
        return EXIT_USAGE;
    }
    o->token = o->token_buf;
    return -1;
}

/* TLS is on with --tls, ONEBIT_TLS=1, --ca, --tls-server-name, --cert or an https:// --rest
 * URL; ONEBIT_CA gives the CA when --ca does not. Returns -1 to go on, or an exit status. */
static int tls_settings(opts *o)
{
    const char *e = getenv("ONEBIT_TLS");
    if (e && !strcmp(e, "1")) o->tls = 1;
    if (o->ca || o->tls_server_name || o->cert || o->key) o->tls = 1;
    if (o->rest && !strncasecmp(o->rest, "https://", 8)) o->tls = 1;
    if (o->tls && !o->ca) {
        const char *ca = getenv("ONEBIT_CA");
        if (ca && ca[0]) o->ca = ca;
    }
    if (!o->cert != !o->key)
        return usage_error(NULL, "%s", "--cert and --key go together (a client certificate)");
    if (o->tls && o->rest && strstr(o->rest, "://") && strncasecmp(o->rest, "https://", 8))
        return usage_error(NULL, "TLS needs an https:// --rest URL, not '%s'", o->rest);
    if (o->tls_server_name && o->rest)
        return usage_error(NULL, "%s",
                           "--tls-server-name is for gRPC; over REST the URL's host is the name "
                           "checked");
    return -1;
}

/* Options may come before or after the verb (getopt_long permutes them); what is left is the
 * verb and its arguments. Returns -1 to go on, or an exit status. */
static int parse(int argc, char **argv, opts *o, const verb **v)
{
    enum {
        O_SERVER = 256,
        O_REST,
        O_TOKEN,
        O_TOKEN_FILE,
        O_STATE,
        O_NAME,
        O_MODEL,
        O_DATA,
        O_OPTIMIZER,
        O_LR,
        O_FREEZE,
        O_NP,
        O_RESTARTS,
        O_LIMIT,
        O_RANK,
        O_STEPS,
        O_BATCH,
        O_TLS,
        O_CA,
        O_TLS_NAME,
        O_CERT,
        O_KEY,
        O_VERSION,
        O_PROGRAM
    };
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, O_VERSION},
        {"program", required_argument, NULL, O_PROGRAM},
        {"server", required_argument, NULL, O_SERVER},
        {"rest", required_argument, NULL, O_REST},
        {"tls", no_argument, NULL, O_TLS},
        {"ca", required_argument, NULL, O_CA},
        {"tls-server-name", required_argument, NULL, O_TLS_NAME},
        {"cert", required_argument, NULL, O_CERT},
        {"key", required_argument, NULL, O_KEY},
        {"token", required_argument, NULL, O_TOKEN},
        {"token-file", required_argument, NULL, O_TOKEN_FILE},
        {"file", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, 'o'},
        {"watch", no_argument, NULL, 'w'},
        {"state", required_argument, NULL, O_STATE},
        {"name", required_argument, NULL, O_NAME},
        {"model", required_argument, NULL, O_MODEL},
        {"data", required_argument, NULL, O_DATA},
        {"optimizer", required_argument, NULL, O_OPTIMIZER},
        {"lr", required_argument, NULL, O_LR},
        {"freeze-step", required_argument, NULL, O_FREEZE},
        {"np", required_argument, NULL, O_NP},
        {"max-restarts", required_argument, NULL, O_RESTARTS},
        {"limit", required_argument, NULL, O_LIMIT},
        {"rank", required_argument, NULL, O_RANK},
        {"steps", required_argument, NULL, O_STEPS},
        {"batch-size", required_argument, NULL, O_BATCH},
        {"follow", no_argument, NULL, 'F'},
        {"keep-checkpoints", no_argument, NULL, 'K'},
        {"request-id", required_argument, NULL, 'R'},
        {"label", required_argument, NULL, 'L'},
        {"quiet", no_argument, NULL, 'q'},
        {"deadline", required_argument, NULL, 'D'},
        {"tail", required_argument, NULL, 'T'},
        {"since", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->max_restarts = -1;
    o->rank = -1;
    *v = NULL;
    int help = 0, c, idx = -1;
    /* The first mistake is reported once the verb is known, with a pointer to its help. */
    char problem[256] = "";
    const char *bad_arg = NULL;
    opterr = 0;
    /* -f is --file for submit and --follow for logs: a first, quiet pass over a copy of argv
     * only finds the verb, then the options are read for that verb. */
    char **scan = malloc(((size_t)argc + 1) * sizeof *scan);
    if (!scan) return usage_error(NULL, "%s", "out of memory");
    memcpy(scan, argv, ((size_t)argc + 1) * sizeof *scan);
    while (getopt_long(argc, scan, ":hf:o:wq", options, NULL) != -1)
        ;
    int logs = optind < argc && !strcmp(scan[optind], "logs");
    free(scan);
    optind = 0; /* start over (GNU getopt re-initialises on 0) */
    while ((c = getopt_long(argc, argv, logs ? ":hfo:wq" : ":hf:o:wq", options, &idx)) != -1) {
        char flag[40];
        if (idx >= 0)
            snprintf(flag, sizeof flag, "--%s", options[idx].name);
        else
            snprintf(flag, sizeof flag, "-%c", c);
        idx = -1;
        long x, lo = c == O_RESTARTS ? -1 : 0;
        switch (c) {
        case 'h':
            help = 1;
            break;
        case O_PROGRAM:
            o->program = optarg;
            break;
        case O_VERSION: /* this program's release alone; the verb version asks the server too */
            printf("onebitctl %s\n", ONEBIT_VERSION);
            return EXIT_OK;
        case O_SERVER:
            o->server = optarg;
            break;
        case O_REST:
            o->rest = optarg;
            break;
        case O_TOKEN:
            o->token = optarg;
            break;
        case O_TOKEN_FILE:
            o->token_file = optarg;
            break;
        case O_TLS:
            o->tls = 1;
            break;
        case O_CA:
            o->ca = optarg;
            break;
        case O_TLS_NAME:
            o->tls_server_name = optarg;
            break;
        case O_CERT:
            o->cert = optarg;
            break;
        case O_KEY:
            o->key = optarg;
            break;
        case 'f':
            if (logs)
                o->follow = 1;
            else
                o->file = optarg;
            break;
        case 'F':
            o->follow = 1;
            break;
        case 'K':
            o->keep_checkpoints = 1;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 'D':
            o->deadline = optarg;
            break;
        case 'S':
            o->since = optarg;
            break;
        case 'T':
            if (!parse_long(flag, optarg, 1, OB_LOG_TAIL_MAX_LINES, &o->tail)) return EXIT_USAGE;
            break;
        case 'R':
            o->request_id = optarg;
            break;
        case 'L': {
            size_t used = strlen(o->labels), add = strlen(optarg);
            if (used + add + 2 > sizeof o->labels)
                return usage_error(NULL, "%s", "--label: too many labels");
            snprintf(o->labels + used, sizeof o->labels - used, "%s%s", used ? "," : "", optarg);
            break;
        }
        case O_STATE:
            o->state = optarg;
            break;
        case O_NAME:
            o->name = optarg;
            break;
        case O_MODEL:
            o->model = optarg;
            break;
        case O_DATA:
            o->data = optarg;
            break;
        case O_OPTIMIZER:
            o->optimizer = optarg;
            break;
        case O_LR:
            o->lr = optarg;
            break;
        case O_FREEZE:
            o->freeze_step = optarg;
            break;
        case 'w':
            o->watch = 1;
            break;
        case 'o':
            if (strcmp(optarg, "json") && strcmp(optarg, "table"))
                return usage_error(NULL, "-o: expected table or json, got '%s'", optarg);
            o->json = !strcmp(optarg, "json");
            break;
        case O_NP:
        case O_RESTARTS:
        case O_LIMIT:
        case O_RANK:
        case O_STEPS:
        case O_BATCH:
            if (!parse_long(flag, optarg, lo, 1L << 30, &x)) return EXIT_USAGE;
            if (c == O_NP)
                o->np = (int)x;
            else if (c == O_RESTARTS)
                o->max_restarts = (int)x;
            else if (c == O_LIMIT)
                o->limit = (int)x;
            else if (c == O_STEPS)
                o->steps = x;
            else if (c == O_RANK)
                o->rank = x;
            else
                o->batch_size = x;
            break;
        case ':':
            if (!problem[0]) {
                snprintf(problem, sizeof problem, "%%s needs a value");
                bad_arg = argv[optind - 1];
            }
            break;
        default:
            if (!problem[0]) {
                snprintf(problem, sizeof problem, "unknown option '%%s'");
                bad_arg = argv[optind - 1];
            }
        }
    }
    if (optind < argc) {
        *v = find_verb(argv[optind]);
        if (!*v) return usage_error(NULL, "unknown verb '%s'", argv[optind]);
        optind++;
    }
    if (problem[0]) return usage_error(*v ? (*v)->name : NULL, problem, bad_arg);
    if (*v && !strcmp((*v)->name, "submit") && o->program) { /* the rest is the program's */
        o->prog_args = argv + optind;
        o->nprog_args = argc - optind;
        optind = argc;
    }
    for (; optind < argc; optind++) {
        if (o->npos >= 4)
            return usage_error((*v)->name, "too many arguments at '%s'", argv[optind]);
        o->positional[o->npos++] = argv[optind];
    }
    if (help) {
        fputs(*v ? (*v)->help : usage_main, stdout);
        return EXIT_OK;
    }
    if (!*v) {
        fputs(usage_main, stderr);
        return EXIT_USAGE;
    }
    if (!o->server) o->server = getenv("ONEBIT_SERVER");
    if (!o->server || !o->server[0]) o->server = "127.0.0.1:50051";
    int tls_rc = tls_settings(o);
    return tls_rc >= 0 ? tls_rc : find_token(o);
}

int main(int argc, char **argv)
{
    opts o;
    const verb *v;
    int rc = parse(argc, argv, &o, &v);
    if (rc >= 0) return rc;
    obctl_client *c = NULL;
    if (v->needs_server) {
        ob_err err = {0};
        obctl_tls tls = {o.ca, o.tls_server_name, o.cert, o.key};
        const obctl_tls *t = o.tls ? &tls : NULL;
        ob_status st = o.rest ? obctl_client_rest(&c, o.rest, o.token, t, &err)
                              : obctl_client_grpc(&c, o.server, o.token, t, &err);
        if (st != OB_OK) return fail(&err);
    }
    rc = v->run(c, &o);
    obctl_client_destroy(c);
    return rc;
}
