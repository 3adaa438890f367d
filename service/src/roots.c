/* Where jobs may read (service_internal.h): a job's data and the checkpoint it warm-starts from
 * must lie under the service's roots, compared after realpath(), so that neither "..", nor a
 * symbolic link, nor an absolute path leads a job to files of the coordinator's it was not given
 * (another service's state, /proc/self/environ, keys). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "onebit/base.h"
#include "onebit/store.h"
#include "service_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

ob_status ob__roots_check(const ob__roots *r, const char *field, const char *path, char *problem,
                          size_t cap)
{
    problem[0] = '\0';
    if (!path[0]) return OB_OK;
    char *abs = realpath(path, NULL);
    if (!abs) {
        snprintf(problem, cap, "%s: '%.200s': %s", field, path, strerror(errno));
        return OB_ERR_INVALID_ARG;
    }
    for (int i = 0; i < r->n; i++) {
        if (under(abs, r->path[i])) {
            free(abs);
            return OB_OK;
        }
    }
    char list[400] = "";
    size_t k = 0;
    for (int i = 0; i < r->n && k < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", r->path[i]);
    snprintf(problem, cap, "%s: '%.200s' is outside the roots this service reads from (%s)", field,
             path, r->n ? list : "none");
    free(abs);
    return OB_ERR_INVALID_ARG;
}
