/* Deleting a job that has ended (ob_service_delete): its store rows, its files under
 * STATE/jobs/<id>/, unless kept its checkpoints under STATE/checkpoints/<id>/, and what the
 * launcher keeps of it elsewhere (ob_launcher_ops.forget); and the retention that deletes the
 * jobs that ended long ago the same way (ob_service_prune). */
#include "onebit/base.h"
#include "onebit/store.h"
#include "service_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ob_status ob_service_delete(ob_service *svc, const char *id, int keep_checkpoints,
                            int *checkpoints_deleted, ob_err *err)
{
    *checkpoints_deleted = 0;
    ob_job j;
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_get_job(svc->store, id, &j, err);
    if (rc) goto done;
    if (!ob_job_state_final(j.state) || ob__svc_find_run(svc, j.id)) {
        rc = OB_ERR(err, OB_ERR_STATE, "job %s is %s: cancel it, then delete it", j.id,
                    ob_job_state_name(j.state));
        ob_job_clear(&j);
        goto done;
    }
    int attempts = 0;
    for (size_t i = 0; i < j.n_attempts; i++)
        if (j.attempts[i].number > attempts) attempts = j.attempts[i].number;
    ob_job_clear(&j);
    if ((rc = ob__svc_writable(svc, err))) goto done;
    ob_checkpoint_info *ck = NULL;
    size_t nck = 0;
    if (!keep_checkpoints) ob__svc_scan_checkpoints(svc, id, &ck, &nck, NULL);
    free(ck);
    /* The record goes first: a job that is listed keeps its files. */
    if ((rc = ob_store_delete_job(svc->store, id, err))) {
        if (rc == OB_ERR_IO || rc == OB_ERR_UNAVAILABLE) {
            ob__svc_store_failed(svc, rc, err);
            rc = ob__svc_writable(svc, err);
        }
        goto done;
    }
    char dir[OB_JOB_PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s", svc->jobs_dir, id);
    rc = ob_remove_tree(dir, err);
    if (rc == OB_OK && !keep_checkpoints) {
        snprintf(dir, sizeof dir, "%s/%s", svc->ckpt_dir, id);
        rc = ob_remove_tree(dir, err);
        if (rc == OB_OK) *checkpoints_deleted = (int)nck;
    }
    ob_launcher *l = svc->cfg.launcher;
    if (l && l->ops->forget) {
        ob_launch_req req = {.job_id = id, .attempt = attempts, .checkpoint_dir = svc->ckpt_dir};
        l->ops->forget(l, &req);
    }
    if (rc) OB_WRAP(err, rc, "job %s deleted from the store, but its files remain", id);
    svc->event_counter++; /* open streams of the job see it gone */
    pthread_cond_broadcast(&svc->cv);
done:
    pthread_mutex_unlock(&svc->mu);
    return rc;
}

ob_status ob_service_prune(ob_service *svc, int64_t now_ms, int *deleted, ob_err *err)
{
    *deleted = 0;
    if (svc->cfg.retention_ms <= 0 || now_ms <= svc->cfg.retention_ms) return OB_OK;
    int64_t before = now_ms - svc->cfg.retention_ms;
    for (;;) {
        char(*ids)[OB_JOB_ID_LEN] = NULL;
        size_t n = 0;
        pthread_mutex_lock(&svc->mu);
        ob_status rc = ob_store_list_ended_before(svc->store, before, 100, &ids, &n, err);
        pthread_mutex_unlock(&svc->mu);
        if (rc) return OB_WRAP(err, rc, "retention: listing the jobs that ended");
        int progress = 0;
        for (size_t i = 0; i < n; i++) {
            int nck = 0;
            rc = ob_service_delete(svc, ids[i], 0, &nck, err);
            if (rc == OB_OK) {
                (*deleted)++;
                progress = 1;
                if (svc->cfg.on_state) {
                    char text[128];
                    snprintf(text, sizeof text, "DELETED: ended more than %lld s ago (retention)",
                             (long long)(svc->cfg.retention_ms / 1000));
                    pthread_mutex_lock(&svc->mu);
                    svc->cfg.on_state(svc->cfg.on_state_user, ids[i], text);
                    pthread_mutex_unlock(&svc->mu);
                }
            } else if (rc != OB_ERR_NOT_FOUND && rc != OB_ERR_STATE) {
                /* (Deleted meanwhile by DeleteJob, or its attempt still being stopped: the
                 * next round sees to it.) */
                OB_WRAP(err, rc, "retention: deleting job %s", ids[i]);
                free(ids);
                return rc;
            }
        }
        free(ids);
        if (n < 100 || !progress) return OB_OK;
    }
}
