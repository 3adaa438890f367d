/* The service's table of running attempts and the records every part of the service writes
 * through (service_internal.h): the paths of a job's files, a job's row and its events committed
 * in one transaction, the store's health (a failed write or a full disk refuses changes until a
 * probe succeeds), the run table, and the checkpoints a job has on disk. service.c (the API
 * functions), supervisor.c, remove.c and logs.c share these rather than one another's code.
 * Called with svc->mu held unless a comment says otherwise. */
#include "onebit/checkpoint.h"
#include "onebit/status_map.h"
#include "onebit/store.h"
#include "service_internal.h"
#include "onebit/base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

/* ---- paths ------------------------------------------------------------------------ */

ob_status ob__svc_mkdirs(const char *path, ob_err *err)
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

void ob__svc_job_path(const ob_service *svc, const char *id, const char *file, char *out,
                      size_t cap)
{
    snprintf(out, cap, "%s/%s/%s", svc->jobs_dir, id, file);
}

/* ---- job records ---------------------------------------------------------------------------- */

/* Records an event for job j (whose fields the caller has already updated) in one transaction
 * with the job's row, and wakes the watchers. Called with the lock held. */
ob_status ob__svc_commit(ob_service *svc, ob_job *j, const char *kind, const char *msg, ob_err *err)
{
    return ob__svc_commit_attempt(svc, j, kind, msg, NULL, err);
}

ob_status ob__svc_commit_attempt(ob_service *svc, ob_job *j, const char *kind, const char *msg,
                                 const ob_attempt *a, ob_err *err)
{
    j->updated_ms = ob_wall_ms();
    ob_job_event ev;
    memset(&ev, 0, sizeof ev);
    ev.time_ms = j->updated_ms;
    ob_strlcpy(ev.kind, kind ? kind : "", sizeof ev.kind);
    ev.state = j->state;
    ob_strlcpy(ev.message, msg ? msg : "", sizeof ev.message);
    ev.progress = j->progress;
    ob_err local;
    ob_err_clear(&local);
    ob_status rc = ob_store_update_job_attempt(svc->store, j, kind ? &ev : NULL, a, &local);
    if (rc) {
        ob__svc_store_failed(svc, rc, &local);
        if (err) *err = local;
        return rc;
    }
    if (kind) {
        svc->event_counter++;
        pthread_cond_broadcast(&svc->cv);
    }
    return OB_OK;
}

/* Moves j to state with a message, as one "state" event. */
ob_status ob__svc_transition(ob_service *svc, ob_job *j, ob_job_state state, const char *msg,
                             ob_err *err)
{
    return ob__svc_transition_attempt(svc, j, state, msg, NULL, err);
}

ob_status ob__svc_transition_attempt(ob_service *svc, ob_job *j, ob_job_state state,
                                     const char *msg, const ob_attempt *a, ob_err *err)
{
    j->state = state;
    ob_strlcpy(j->message, msg, sizeof j->message);
    if (ob_job_state_final(state)) j->finished_ms = ob_wall_ms();
    char text[OB_JOB_MSG_LEN + 64];
    snprintf(text, sizeof text, "%s%s%.400s", ob_job_state_name(state), msg[0] ? ": " : "", msg);
    ob_status rc = ob__svc_commit_attempt(svc, j, "state", text, a, err);
    if (rc == OB_OK && svc->cfg.on_state) svc->cfg.on_state(svc->cfg.on_state_user, j->id, text);
    return rc;
}

ob_status ob__svc_put_attempt(ob_service *svc, const char *job_id, const ob_attempt *a, ob_err *err)
{
    ob_err local;
    ob_err_clear(&local);
    ob_status rc = ob_store_put_attempt(svc->store, job_id, a, &local);
    if (rc) {
        ob__svc_store_failed(svc, rc, &local);
        if (err) *err = local;
    }
    return rc;
}

/* ---- the store's health ------------------------------------------------------------------- */

/* Marks the store down (why: what failed) or up; a change wakes the health watchers. */
static void set_store_down(ob_service *svc, int down, const char *why)
{
    if (down) {
        char clean[OB_ERR_MSG_LEN];
        ob_status_public_message(why, clean, sizeof clean);
        ob_strlcpy(svc->store_why, clean, sizeof svc->store_why);
    }
    if (svc->store_down == down) return;
    svc->store_down = down;
    if (down) {
        svc->store_probe_delay_ms = 100;
        svc->store_probe_at_ms = ob_wall_ms() + svc->store_probe_delay_ms;
    } else {
        svc->store_why[0] = '\0';
    }
    if (svc->cfg.on_state)
        svc->cfg.on_state(svc->cfg.on_state_user, "store",
                          down ? svc->store_why : "the job store can be written again: SERVING");
    svc->event_counter++;
    pthread_cond_broadcast(&svc->cv);
}

ob_status ob__svc_store_failed(ob_service *svc, ob_status rc, const ob_err *err)
{
    if (rc == OB_ERR_IO || rc == OB_ERR_UNAVAILABLE) {
        char why[OB_ERR_MSG_LEN];
        snprintf(why, sizeof why, "writing the job store failed: %.400s",
                 err && err->msg[0] ? err->msg : ob_strerror(rc));
        set_store_down(svc, 1, why);
    }
    return rc;
}

ob_status ob__svc_writable(ob_service *svc, ob_err *err)
{
    if (!svc->store_down) return OB_OK;
    return OB_ERR(err, OB_ERR_UNAVAILABLE,
                  "the job store cannot be written (%.300s); the service takes no changes until "
                  "it can: try again later",
                  svc->store_why);
}

int64_t ob__svc_free_bytes(const char *dir)
{
    struct statvfs v;
    if (statvfs(dir, &v) != 0) return -1;
    uint64_t b = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    return b > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)b;
}

void ob__svc_check_store(ob_service *svc, int64_t now)
{
    int64_t min_free = svc->cfg.store_min_free_bytes;
    int64_t have = min_free > 0 ? ob__svc_free_bytes(svc->state_dir) : -1;
    if (have >= 0 && have < min_free) {
        char why[OB_ERR_MSG_LEN];
        snprintf(why, sizeof why,
                 "%lld bytes free on the file system of %.300s, less than the %lld kept for the "
                 "job store",
                 (long long)have, svc->state_dir, (long long)min_free);
        set_store_down(svc, 1, why);
        return;
    }
    if (!svc->store_down || now < svc->store_probe_at_ms) return;
    ob_err perr;
    ob_err_clear(&perr);
    ob_status rc = ob_store_probe(svc->store, now, &perr);
    if (rc == OB_OK) {
        set_store_down(svc, 0, NULL);
        return;
    }
    char why[OB_ERR_MSG_LEN];
    snprintf(why, sizeof why, "writing the job store failed: %.400s", perr.msg);
    set_store_down(svc, 1, why);
    svc->store_probe_delay_ms =
        svc->store_probe_delay_ms < 1000 ? 2 * svc->store_probe_delay_ms : 2000;
    svc->store_probe_at_ms = now + svc->store_probe_delay_ms;
}

int ob_service_serving(ob_service *svc, char *why, size_t cap)
{
    pthread_mutex_lock(&svc->mu);
    int serving = !svc->store_down;
    if (why && cap) ob_strlcpy(why, serving ? "" : svc->store_why, cap);
    pthread_mutex_unlock(&svc->mu);
    return serving;
}

/* ---- the run table --------------------------------------------------------------------------- */

ob__run *ob__svc_find_run(ob_service *svc, const char *id)
{
    for (ob__run *r = svc->runs; r; r = r->next)
        if (!strcmp(r->job_id, id)) return r;
    return NULL;
}

void ob__svc_free_run(ob__run *r)
{
    if (!r) return;
    if (r->log) fclose(r->log);
    free(r);
}

void ob__svc_unlink_run(ob_service *svc, ob__run *r)
{
    for (ob__run **p = &svc->runs; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            break;
        }
    }
    ob__svc_free_run(r);
}

int ob__svc_used_slots(const ob_service *svc)
{
    int n = 0;
    for (const ob__run *r = svc->runs; r; r = r->next)
        n += r->world_size;
    return n;
}

/* ---- checkpoints on disk ------------------------------------------------------------------ */

/* Committed checkpoints of a job, newest first, with their metadata. */
ob_status ob__svc_scan_checkpoints(const ob_service *svc, const char *id, ob_checkpoint_info **out,
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
        ob_strlcpy(c->path, e[i].path, sizeof c->path);
        struct stat st;
        if (stat(c->path, &st) == 0)
            c->time_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
        ob_ckpt_meta meta;
        ob_err merr;
        ob_err_clear(&merr);
        if (ob_ckpt_read_meta(c->path, &meta, NULL, &merr) == OB_OK) {
            c->world_size = meta.world_size;
            ob_strlcpy(c->phase, meta.phase == 1 ? "compression" : "warmup", sizeof c->phase);
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

/* *out from a checkpoint's directory and metadata. */
static void checkpoint_info(ob_checkpoint_info *out, const char *path, const ob_ckpt_meta *meta)
{
    out->step = meta->step;
    out->world_size = meta->world_size;
    ob_strlcpy(out->path, path, sizeof out->path);
    struct stat st;
    if (stat(path, &st) == 0)
        out->time_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
}

/* The newest checkpoint that verifies (service_internal.h). */
int ob__svc_newest_checkpoint(const ob_service *svc, const char *id, ob_checkpoint_info *out)
{
    memset(out, 0, sizeof *out);
    char dir[OB_JOB_PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s", svc->ckpt_dir, id);
    char path[OB_CKPT_PATH_LEN];
    ob_ckpt_meta meta;
    if (ob_ckpt_find_latest(dir, path, &meta, NULL, NULL, NULL) != OB_OK) return -1;
    checkpoint_info(out, path, &meta);
    return 0;
}

/* The checkpoint of one step, looked up by its name (service_internal.h). */
int ob__svc_checkpoint_at(const ob_service *svc, const char *id, int64_t step,
                          ob_checkpoint_info *out)
{
    memset(out, 0, sizeof *out);
    char dir[OB_JOB_PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s", svc->ckpt_dir, id);
    char path[OB_CKPT_PATH_LEN];
    ob_ckpt_meta meta;
    if (step <= 0 || (int64_t)(long)step != step ||
        ob_ckpt_step_dir(path, dir, (long)step, 0, NULL) != OB_OK ||
        ob_ckpt_verify(path, &meta, NULL) != OB_OK || meta.step != step)
        return -1;
    checkpoint_info(out, path, &meta);
    return 0;
}
