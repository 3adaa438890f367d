/* onebitctl's verbs but logs (logs.c): each reads the parsed command line (ctl.h), calls the
 * client and prints for people (tables, a progress bar) or scripts (-o json). Each returns the
 * process's exit status. */
#define _GNU_SOURCE /* realpath */
#include "ctl.h"
#include "onebit/base.h"
#include "onebit/checkpoint.h"
#include "render.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* ---- outcomes -------------------------------------------------------------------------------- */

int obctl_usage_error(const char *verb_name, const char *fmt, const char *arg)
{
    fprintf(stderr, "onebitctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nsee 'onebitctl %s%s--help'\n", verb_name ? verb_name : "",
            verb_name ? " " : "");
    return EXIT_USAGE;
}

int obctl_fail(const ob_err *err)
{
    fprintf(stderr, "onebitctl: %s\n", err->msg);
    return err->code == OB_ERR_COMM ? EXIT_UNREACHABLE : EXIT_FAIL;
}

int obctl_need_job(const opts *o, const char *verb_name)
{
    if (o->npos != 1) {
        fprintf(stderr, "onebitctl: %s: expected one JOB id\nsee 'onebitctl %s --help'\n",
                verb_name, verb_name);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* ---- watching -------------------------------------------------------------------------------- */

volatile sig_atomic_t obctl_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    obctl_interrupted = 1;
}

void obctl_catch_sigint(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
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
    if (obctl_interrupted) return 1;
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
    obctl_catch_sigint();

    ob_err err = {0};
    ob_status st = obctl_watch(c, id, 0, on_event, &w, &err);
    if (w.drawn) fprintf(stdout, "\n");
    if (obctl_interrupted) {
        fprintf(stderr,
                "onebitctl: stopped watching; the job goes on (onebitctl cancel %s to "
                "stop it)\n",
                id);
        return EXIT_FAIL;
    }
    if (st != OB_OK) return obctl_fail(&err);
    ob_job j;
    if (obctl_get(c, id, &j, &err) != OB_OK) return obctl_fail(&err);
    if (!o->json) obctl_print_summary(stdout, &j);
    int rc = j.state == OB_JOB_SUCCEEDED ? EXIT_OK : EXIT_FAIL;
    ob_job_clear(&j);
    return rc;
}

/* ---- verbs ----------------------------------------------------------------------------------- */

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

/* A program job's spec and the arguments after --, as JSON. Uploaded (the default; up non-NULL):
 * the files are read into *up and the entrypoint is the script's path among them, with no
 * workdir (onebitd runs it in its stored copy). With --no-upload: FILE's absolute path, run in
 * its own directory; the path is the server's, under one of its data roots. */
static int spec_from_program(const opts *o, obctl_upload *up, char **out, size_t *len)
{
    char entry[PATH_MAX], dir[PATH_MAX] = "";
    if (up) {
        int rc = obctl_upload_pack(o->program, o->program_dir, up, entry, sizeof entry);
        if (rc != EXIT_OK) return rc;
    } else {
        char *abs = realpath(o->program, NULL);
        if (!abs) {
            fprintf(stderr, "onebitctl: --program %s: %s\n", o->program, strerror(errno));
            return EXIT_USAGE;
        }
        snprintf(entry, sizeof entry, "%s", abs);
        snprintf(dir, sizeof dir, "%s", abs);
        free(abs);
        char *slash = strrchr(dir, '/');
        if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    }
    json_t *args = json_array();
    for (int i = 0; args && i < o->nprog_args; i++)
        json_array_append_new(args, json_string(o->prog_args[i]));
    json_t *spec = json_pack("{s:{s:s, s:o}}", "program", "entrypoint", entry, "args", args);
    if (spec && dir[0])
        json_object_set_new(json_object_get(spec, "program"), "workdir", json_string(dir));
    if (spec && o->name) json_object_set_new(spec, "name", json_string(o->name));
    if (spec && o->steps > 0) json_object_set_new(spec, "steps", json_integer(o->steps));
    *out = spec ? json_dumps(spec, JSON_COMPACT) : NULL;
    json_decref(spec);
    if (!*out) {
        if (up) obctl_upload_free(up);
        return EXIT_FAIL;
    }
    *len = strlen(*out);
    return EXIT_OK;
}

int obctl_v_submit(obctl_client *c, const opts *o)
{
    char *spec = NULL;
    size_t len = 0;
    int rc;
    if (o->file && (o->model || o->data || o->optimizer || o->steps || o->batch_size))
        return obctl_usage_error("submit", "%s", "-f FILE and the spec flags exclude each other");
    if (o->program && (o->file || o->model || o->data || o->optimizer || o->batch_size))
        return obctl_usage_error("submit", "%s",
                                 "--program and -f FILE or the model's flags exclude each other");
    if ((o->program_dir || o->no_upload) && !o->program)
        return obctl_usage_error("submit", "%s", "--program-dir and --no-upload go with --program");
    if (o->program_dir && o->no_upload)
        return obctl_usage_error("submit", "%s",
                                 "--program-dir and --no-upload exclude each other");
    obctl_upload up = {0};
    rc = o->program ? spec_from_program(o, o->no_upload ? NULL : &up, &spec, &len)
         : o->file  ? read_file(o->file, &spec, &len)
                    : spec_from_flags(o, &spec, &len);
    if (rc != EXIT_OK) return rc;
    ob_job j;
    ob_err err = {0};
    ob_status st = obctl_submit(c, spec, len, o->np, o->max_restarts, o->request_id, o->labels,
                                o->deadline, up.files, up.n, &j, &err);
    free(spec);
    obctl_upload_free(&up);
    if (st != OB_OK) return obctl_fail(&err);
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

int obctl_v_status(obctl_client *c, const opts *o)
{
    int rc = obctl_need_job(o, "status");
    if (rc) return rc;
    ob_job j;
    ob_err err = {0};
    if (obctl_get(c, o->positional[0], &j, &err) != OB_OK) return obctl_fail(&err);
    if (o->json)
        obctl_print_job_json(stdout, &j);
    else
        obctl_print_job(stdout, &j);
    ob_job_clear(&j);
    return EXIT_OK;
}

int obctl_v_list(obctl_client *c, const opts *o)
{
    ob_job_state state = OB_JOB_UNSPECIFIED;
    if (o->state && ob_job_state_parse(o->state, &state) != OB_OK)
        return obctl_usage_error("list",
                                 "--state %s: expected PENDING, RUNNING, RESTARTING, "
                                 "SUCCEEDED, FAILED or CANCELLED",
                                 o->state);
    if (o->npos) return obctl_usage_error("list", "unexpected argument '%s'", o->positional[0]);
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
            return obctl_fail(&err);
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

int obctl_v_watch(obctl_client *c, const opts *o)
{
    int rc = obctl_need_job(o, "watch");
    return rc ? rc : follow(c, o, o->positional[0]);
}

int obctl_v_cancel(obctl_client *c, const opts *o)
{
    int rc = obctl_need_job(o, "cancel");
    if (rc) return rc;
    ob_job j;
    ob_err err = {0};
    if (obctl_cancel(c, o->positional[0], &j, &err) != OB_OK) return obctl_fail(&err);
    if (o->json)
        obctl_print_job_json(stdout, &j);
    else if (ob_job_state_final(j.state))
        printf("%s %s\n", j.id, ob_job_state_name(j.state));
    else
        printf("%s cancelling: its workers checkpoint and stop (onebitctl watch %s)\n", j.id, j.id);
    ob_job_clear(&j);
    return EXIT_OK;
}

int obctl_v_version(obctl_client *c, const opts *o)
{
    (void)o;
    printf("onebitctl %s\n", ONEBIT_VERSION);
    char version[64], api[64];
    ob_err err = {0};
    if (obctl_version(c, version, api, &err) != OB_OK) return obctl_fail(&err);
    printf("onebitd %s (api %s) at %s\n", version, api, obctl_client_target(c));
    return EXIT_OK;
}

int obctl_v_delete(obctl_client *c, const opts *o)
{
    int rc = obctl_need_job(o, "delete");
    if (rc) return rc;
    int deleted = 0;
    ob_err err = {0};
    if (obctl_delete(c, o->positional[0], o->keep_checkpoints, &deleted, &err) != OB_OK)
        return obctl_fail(&err);
    if (o->keep_checkpoints)
        printf("%s deleted; its checkpoints are kept\n", o->positional[0]);
    else
        printf("%s deleted with its %d checkpoint%s\n", o->positional[0], deleted,
               deleted == 1 ? "" : "s");
    return EXIT_OK;
}

int obctl_v_checkpoints(obctl_client *c, const opts *o)
{
    int rc = obctl_need_job(o, "checkpoints");
    if (rc) return rc;
    ob_checkpoint_info *ck;
    size_t n;
    ob_err err = {0};
    if (obctl_checkpoints(c, o->positional[0], &ck, &n, &err) != OB_OK) return obctl_fail(&err);
    if (o->json)
        obctl_print_checkpoints_json(stdout, ck, n);
    else if (n == 0)
        printf("%s has no checkpoints yet\n", o->positional[0]);
    else
        obctl_print_checkpoints(stdout, ck, n);
    free(ck);
    return EXIT_OK;
}

int obctl_v_inspect(obctl_client *c, const opts *o)
{
    (void)c;
    if (o->npos != 1) return obctl_usage_error("inspect", "%s", "expected one CHECKPOINT_DIR");
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
