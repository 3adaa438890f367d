/* Where jobs may read (service_internal.h): a job's data and the checkpoint it warm-starts from
 * must lie under the service's roots, compared after realpath(), so that neither "..", nor a
 * symbolic link, nor an absolute path leads a job to files of the coordinator's it was not given
 * (another service's state, /proc/self/environ, keys). Checked at submit, and again at each
 * launch, which hands the workers the resolved paths (ob__svc_pin_paths). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "onebit/base.h"
#include "onebit/store.h"
#include "service_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Adds root (borrowed) to the list: resolved when it exists, else kept as given (nothing
 * resolved can lie under a root that does not exist, so it only appears in messages). */
static ob_status add_root(ob__roots *r, const char *root, ob_err *err)
{
    if (!root || !root[0]) return OB_OK;
    if (root[0] != '/')
        return OB_ERR(err, OB_ERR_INVALID_ARG, "root '%s': not an absolute path", root);
    if (r->n >= OB_SVC_MAX_ROOTS)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "at most %d roots of each kind", OB_SVC_MAX_ROOTS);
    char *abs = realpath(root, NULL);
    r->path[r->n] = abs ? abs : strdup(root);
    if (!r->path[r->n]) return OB_ERR(err, OB_ERR_NOMEM, "root '%s'", root);
    r->n++;
    return OB_OK;
}

ob_status ob__roots_init(ob__roots *r, const char *const *roots, const char *const *defaults,
                         ob_err *err)
{
    memset(r, 0, sizeof *r);
    const char *const *list = roots ? roots : defaults;
    ob_status rc = OB_OK;
    for (size_t i = 0; list && list[i] && rc == OB_OK; i++)
        rc = add_root(r, list[i], err);
    if (rc) ob__roots_free(r);
    return rc;
}

void ob__roots_free(ob__roots *r)
{
    for (int i = 0; i < r->n; i++)
        free(r->path[i]);
    memset(r, 0, sizeof *r);
}

/* 1 when path equals root or lies below it ("/data" holds "/data/x", not "/database"). */
static int under(const char *path, const char *root)
{
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/') return 1;
    return !strncmp(path, root, n) && (path[n] == '\0' || path[n] == '/');
}

/* The absolute form of path with ".", ".." and repeated slashes removed, without looking at the
 * file system (for a path that does not resolve). 0 when it does not fit. */
static int lexical(const char *path, char *out, size_t cap)
{
    char buf[4096];
    if (path[0] == '/') {
        if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return 0;
    } else {
        char cwd[2048];
        if (!getcwd(cwd, sizeof cwd)) return 0;
        if (snprintf(buf, sizeof buf, "%s/%s", cwd, path) >= (int)sizeof buf) return 0;
    }
    size_t n = 0;
    out[0] = '\0';
    for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, ".")) continue;
        if (!strcmp(c, "..")) {
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0) n--;
            out[n] = '\0';
            continue;
        }
        size_t len = strlen(c);
        if (n + 1 + len + 1 > cap) return 0;
        out[n++] = '/';
        memcpy(out + n, c, len + 1);
        n += len;
    }
    if (n == 0) {
        if (cap < 2) return 0;
        out[0] = '/', out[1] = '\0';
    }
    return 1;
}

static void outside(const ob__roots *r, const char *field, const char *path, char *problem,
                    size_t cap)
{
    char list[400] = "";
    size_t k = 0;
    for (int i = 0; i < r->n && k < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", r->path[i]);
    snprintf(problem, cap, "%s: '%.200s' is outside the roots this service reads from (%s)", field,
             path, r->n ? list : "none");
}

static int under_any(const ob__roots *r, const char *abs)
{
    for (int i = 0; i < r->n; i++)
        if (under(abs, r->path[i])) return 1;
    return 0;
}

ob_status ob__roots_resolve(const ob__roots *r, const char *field, const char *path, char *resolved,
                            size_t rcap, char *problem, size_t cap)
{
    problem[0] = '\0';
    if (!path[0]) {
        if (resolved && rcap) resolved[0] = '\0';
        return OB_OK;
    }
    char *abs = realpath(path, NULL);
    if (!abs) {
        /* Whether a file outside the roots exists is none of the caller's business: the same
         * answer as for one that does. */
        int e = errno;
        char lex[4096];
        if (lexical(path, lex, sizeof lex) && under_any(r, lex))
            snprintf(problem, cap, "%s: '%.200s': %s", field, path, strerror(e));
        else
            outside(r, field, path, problem, cap);
        return OB_ERR_INVALID_ARG;
    }
    int ok = under_any(r, abs);
    if (!ok) outside(r, field, path, problem, cap);
    if (ok && resolved && snprintf(resolved, rcap, "%s", abs) >= (int)rcap) {
        snprintf(problem, cap, "%s: '%.200s' resolves to a path too long", field, path);
        ok = 0;
    }
    free(abs);
    return ok ? OB_OK : OB_ERR_INVALID_ARG;
}

ob_status ob__roots_check(const ob__roots *r, const char *field, const char *path, char *problem,
                          size_t cap)
{
    return ob__roots_resolve(r, field, path, NULL, 0, problem, cap);
}

/* One path field of the spec: resolved and checked, written back resolved. */
static ob_status pin(const ob__roots *r, json_t *obj, const char *key, const char *field,
                     char *problem, size_t cap)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!json_is_string(v) || !json_string_value(v)[0]) return OB_OK;
    char resolved[4096];
    ob_status rc =
        ob__roots_resolve(r, field, json_string_value(v), resolved, sizeof resolved, problem, cap);
    if (rc == OB_OK && json_object_set_new(obj, key, json_string(resolved)) != 0) rc = OB_ERR_NOMEM;
    return rc;
}

/* A program's working directory and entrypoint, resolved under roots r; the entrypoint pinned on
 * its own, relative to the directory it was named from. */
static ob_status pin_program(const ob__roots *r, json_t *prog, char *problem, size_t cap)
{
    json_t *wd = json_object_get(prog, "workdir"), *ep = json_object_get(prog, "entrypoint");
    if (json_is_string(ep) && json_string_value(ep)[0] != '/' && json_is_string(wd)) {
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", json_string_value(wd), json_string_value(ep));
        json_object_set_new(prog, "entrypoint", json_string(full));
    }
    ob_status rc = pin(r, prog, "workdir", "spec: program.workdir", problem, cap);
    if (rc == OB_OK) rc = pin(r, prog, "entrypoint", "spec: program.entrypoint", problem, cap);
    return rc;
}

/* An uploaded program's paths (its spec has a relative entrypoint and no workdir: the submit
 * carried its files): its working directory is the job's stored copy, and its entrypoint must
 * resolve inside it. The data roots play no part; the copy is the service's own. */
static ob_status pin_upload(const ob_service *svc, const char *job_id, json_t *prog, char *problem,
                            size_t cap)
{
    char dir[OB_JOB_PATH_LEN];
    ob__upload_dir(svc, job_id, dir, sizeof dir);
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(problem, cap,
                 "spec: program: the job's uploaded files are gone (%.200s); submit it again", dir);
        return OB_ERR_INVALID_ARG;
    }
    const char *only[] = {dir, NULL};
    ob__roots upload;
    ob_err rerr;
    if (ob__roots_init(&upload, only, NULL, &rerr) != OB_OK) {
        snprintf(problem, cap, "spec: program: %.200s", rerr.msg);
        return rerr.code == OB_ERR_NOMEM ? OB_ERR_NOMEM : OB_ERR_INVALID_ARG;
    }
    ob_status rc = OB_OK;
    if (json_object_set_new(prog, "workdir", json_string(dir)) != 0) rc = OB_ERR_NOMEM;
    if (rc == OB_OK) rc = pin_program(&upload, prog, problem, cap);
    ob__roots_free(&upload);
    return rc;
}

ob_status ob__svc_pin_paths(const ob_service *svc, const char *job_id, const char *spec_json,
                            char **out, char *problem, size_t cap)
{
    *out = NULL;
    problem[0] = '\0';
    json_error_t je;
    json_t *root = json_loads(spec_json, 0, &je);
    if (!root) {
        snprintf(problem, cap, "spec: not JSON (%s)", je.text);
        return OB_ERR_INVALID_ARG;
    }
    ob_status rc = pin(&svc->data_roots, json_object_get(root, "data"), "path", "spec: data.path",
                       problem, cap);
    if (rc == OB_OK)
        rc = pin(&svc->ckpt_roots, json_object_get(root, "warm_start"), "from",
                 "spec: warm_start.from", problem, cap);
    json_t *prog = json_object_get(root, "program");
    if (rc == OB_OK && prog) {
        json_t *wd = json_object_get(prog, "workdir"), *ep = json_object_get(prog, "entrypoint");
        int uploaded = json_is_string(ep) && json_string_value(ep)[0] != '/' &&
                       !(json_is_string(wd) && json_string_value(wd)[0]);
        rc = uploaded ? pin_upload(svc, job_id, prog, problem, cap)
                      : pin_program(&svc->data_roots, prog, problem, cap);
    }
    if (rc == OB_OK) {
        *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!*out) rc = OB_ERR_NOMEM;
    }
    json_decref(root);
    return rc;
}
