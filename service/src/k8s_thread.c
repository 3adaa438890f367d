/* The Kubernetes launcher's thread (k8s_internal.h): the requests the launcher calls queued
 * (create and delete MPIJobs, make and delete the report-credential Secrets, purge a deleted
 * job's), made without the mutex; attempts whose pods stay stuck end; the watches and log
 * streams run on one curl multi handle. */
#include "k8s_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the thread ------------------------------------------------------------------------------ */

ob_status ob__k8s_api(kube_launcher *kl, const char *method, const char *path, const char *body,
                      long *status, char **out, ob_err *err)
{
    return ob__kube_request(&kl->conn, method, path, body, kl->timeout_ms, status, out, err);
}

/* After a 409 on create: the MPIJob of that name is this attempt's (its labels say so) or the
 * attempt ends. Called without the mutex. */
static void resolve_conflict(kube_launcher *kl, const char *name)
{
    char path[600];
    snprintf(path, sizeof path, API_MPIJOBS "/%s", kl->ns, name);
    long status = 0;
    char *out = NULL;
    ob_status rc = ob__k8s_api(kl, "GET", path, NULL, &status, &out, NULL);
    json_t *obj =
        rc == OB_OK && status == 200 ? json_loads(out, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(out);
    pthread_mutex_lock(&kl->mu);
    katt *a = ob__k8s_find_att(kl, name);
    if (a && a->conflict) {
        a->conflict = 0;
        /* Not asked (gone meanwhile, or no answer): the watch will tell. */
        if (obj && ob__k8s_apply_mpijob(kl, obj, 0) != a) {
            json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
            char owner[160];
            snprintf(owner, sizeof owner, "%.60s attempt %.10s", ob__k8s_jstr(labels, LABEL_JOB),
                     ob__k8s_jstr(labels, LABEL_ATTEMPT));
            ob__k8s_clean_text(owner, sizeof owner, owner);
            snprintf(a->end_reason, sizeof a->end_reason,
                     "an MPIJob named %s exists already and is not this attempt's (labels: job "
                     "%.100s); delete it or use another namespace",
                     a->name, owner);
            a->ended = 1;
            a->final_ms = ob_wall_ms();
        }
    }
    pthread_mutex_unlock(&kl->mu);
    json_decref(obj);
}

/* A queued request, made without the mutex. */
typedef struct op {
    enum { OP_CREATE, OP_TERM, OP_KILL, OP_DROP, OP_SECRET, OP_SECRET_DEL, OP_PURGE } kind;
    char name[OB_K8S_NAME_MAX + 1];
    char *body;  /* OP_CREATE: the MPIJob; OP_SECRET: the Secret (wiped after) */
    char *token; /* OP_SECRET: the token as base64, as the Secret's data holds it (wiped) */
    char job_id[OB_JOB_ID_LEN];
    int attempt;
    char pods[8][254]; /* pods to force-delete (OP_KILL), at most 8 per round */
    size_t npods;
} op;

static void wipe_free(char *p)
{
    if (!p) return;
    for (volatile char *q = p; *q; q++)
        *q = '\0';
    free(p);
}

static char *b64_encode(const char *in)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in), k = 0;
    char *o = malloc((n + 2) / 3 * 4 + 1);
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < n) v |= (uint32_t)(unsigned char)in[i + 1] << 8;
        if (i + 2 < n) v |= (uint32_t)(unsigned char)in[i + 2];
        o[k++] = tbl[(v >> 18) & 63];
        o[k++] = tbl[(v >> 12) & 63];
        o[k++] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        o[k++] = i + 2 < n ? tbl[v & 63] : '=';
    }
    o[k] = '\0';
    return o;
}

/* The attempt's Secret (with the mutex held): labels tying it to the job and the attempt, owned
 * by the MPIJob (uid) so that Kubernetes' garbage collector deletes it with it; immutable. */
static ob_status secret_op(kube_launcher *kl, katt *a, op *o)
{
    char sname[SECRET_NAME_MAX], attempt[16];
    ob__k8s_secret_name(a, sname, sizeof sname);
    snprintf(attempt, sizeof attempt, "%d", a->attempt);
    o->token = b64_encode(a->report_token);
    json_t *sec =
        o->token
            ? json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s, s:s, s:s}, s:[{s:s, s:s, "
                        "s:s, s:s}]}, s:s, s:b, s:{s:s}}",
                        "apiVersion", "v1", "kind", "Secret", "metadata", "name", sname,
                        "namespace", kl->ns, "labels", LABEL_MANAGED, "onebitd", LABEL_JOB,
                        a->job_id, LABEL_ATTEMPT, attempt, LABEL_MPIJOB, a->name, "ownerReferences",
                        "apiVersion", "kubeflow.org/v2beta1", "kind", "MPIJob", "name", a->name,
                        "uid", a->uid, "type", "Opaque", "immutable", 1, "data", "token", o->token)
            : NULL;
    o->body = sec ? json_dumps(sec, JSON_COMPACT) : NULL;
    json_decref(sec); /* jansson copied the token: its tree is freed, not wiped (its heap) */
    if (!o->body) {
        wipe_free(o->token);
        o->token = NULL;
        return OB_ERR_NOMEM;
    }
    o->kind = OP_SECRET;
    ob_strlcpy(o->job_id, a->job_id, sizeof o->job_id);
    o->attempt = a->attempt;
    return OB_OK;
}

typedef enum { SEC_MADE, SEC_RETRY, SEC_REFUSED, SEC_FOREIGN } sec_result;

/* After a 409 on the Secret: one of this attempt's with this token is made already (an answer
 * that was lost); one of this attempt's with another token is left from an earlier start and is
 * deleted, to be made again; any other is someone else's. Called without the mutex. */
static sec_result secret_conflict(kube_launcher *kl, const op *o, const char *sname)
{
    char path[800];
    snprintf(path, sizeof path, API_SECRETS "/%s", kl->ns, sname);
    long status = 0;
    char *out = NULL;
    ob_status rc = ob__k8s_api(kl, "GET", path, NULL, &status, &out, NULL);
    json_t *obj =
        rc == OB_OK && status == 200 ? json_loads(out, JSON_REJECT_DUPLICATES, NULL) : NULL;
    wipe_free(out);
    if (!obj) return SEC_RETRY; /* gone meanwhile, or no answer: try again */
    json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    char attempt[16];
    snprintf(attempt, sizeof attempt, "%d", o->attempt);
    int ours = !strcmp(ob__k8s_jstr(labels, LABEL_MANAGED), "onebitd") &&
               !strcmp(ob__k8s_jstr(labels, LABEL_JOB), o->job_id) &&
               !strcmp(ob__k8s_jstr(labels, LABEL_ATTEMPT), attempt);
    int same = ours && !strcmp(ob__k8s_jstr(json_object_get(obj, "data"), "token"), o->token);
    json_decref(obj);
    if (!ours) return SEC_FOREIGN;
    if (same) return SEC_MADE;
    out = NULL;
    ob__k8s_api(kl, "DELETE", path, NULL, &status, &out, NULL);
    free(out);
    return SEC_RETRY;
}

/* POST of the attempt's Secret, and what its answer means for the attempt. */
static void run_secret(kube_launcher *kl, op *o)
{
    char path[800], sname[SECRET_NAME_MAX], msg[TEXT] = "";
    snprintf(sname, sizeof sname, "%s" SECRET_SUFFIX, o->name);
    snprintf(path, sizeof path, API_SECRETS, kl->ns);
    long status = 0;
    char *out = NULL;
    ob_err err;
    ob_err_clear(&err);
    ob_status rc = ob__k8s_api(kl, "POST", path, o->body, &status, &out, &err);
    if (rc)
        ob_strlcpy(msg, err.msg, sizeof msg);
    else
        ob__kube_status_message(out, msg, sizeof msg);
    wipe_free(out);
    sec_result res = SEC_RETRY;
    if (rc == OB_OK && (status == 201 || status == 200))
        res = SEC_MADE;
    else if (rc == OB_OK && status == 409)
        res = secret_conflict(kl, o, sname);
    else if (rc == OB_OK && status >= 400 && status < 500 && status != 429)
        res = SEC_REFUSED;
    int64_t now = ob_wall_ms();
    pthread_mutex_lock(&kl->mu);
    katt *a = ob__k8s_find_att(kl, o->name);
    if (a && a->secret_want) {
        if (res == SEC_MADE) {
            a->secret_want = 0;
            a->secret_made = 1;
            ob__k8s_wipe_token(a);
        } else if (res == SEC_RETRY && now < a->secret_deadline_ms) {
            a->secret_next_ms = status == 409 ? now : now + 1000;
        } else {
            if (res == SEC_FOREIGN)
                snprintf(a->end_reason, sizeof a->end_reason,
                         "a Secret named %s exists already and is not this attempt's; delete it "
                         "or use another namespace",
                         sname);
            else if (res == SEC_REFUSED)
                snprintf(a->end_reason, sizeof a->end_reason,
                         "the API server refused Secret %s (HTTP %ld): %.150s", sname, status, msg);
            else
                snprintf(a->end_reason, sizeof a->end_reason,
                         "the report credential's Secret %s could not be created: %.150s", sname,
                         msg[0] ? msg : "no answer");
            a->permanent = res != SEC_RETRY;
            a->ended = 1;
            a->final_ms = now;
            a->drop_wanted = 1; /* its MPIJob goes: its launcher could not report */
            a->secret_want = 0;
            ob__k8s_wipe_token(a);
        }
    }
    pthread_mutex_unlock(&kl->mu);
}

/* DELETE of an attempt's Secret once the attempt has ended (its pods have the credential
 * already, and nothing else needs it), or of what a deleted job left (OP_PURGE). 1 when it is
 * gone. */
static int delete_secret(kube_launcher *kl, const char *mpijob)
{
    char path[800];
    long status = 0;
    char *out = NULL;
    snprintf(path, sizeof path, API_SECRETS "/%s" SECRET_SUFFIX, kl->ns, mpijob);
    ob_status rc = ob__k8s_api(kl, "DELETE", path, NULL, &status, &out, NULL);
    free(out);
    return rc == OB_OK && (status < 300 || status == 404);
}

static void run_op(kube_launcher *kl, op *o)
{
    if (o->kind == OP_SECRET) {
        run_secret(kl, o);
        return;
    }
    if (o->kind == OP_SECRET_DEL) {
        int gone = delete_secret(kl, o->name);
        pthread_mutex_lock(&kl->mu);
        katt *a = ob__k8s_find_att(kl, o->name);
        if (a) {
            /* Given up after a few tries: the ownerReference has it deleted with the MPIJob. */
            a->secret_gone = gone || ++a->secret_tries >= 5;
            a->secret_next_ms = ob_wall_ms() + 2000;
        }
        pthread_mutex_unlock(&kl->mu);
        return;
    }
    if (o->kind == OP_PURGE) {
        char path[800];
        long status = 0;
        char *out = NULL;
        snprintf(path, sizeof path, API_MPIJOBS "/%s?propagationPolicy=Background", kl->ns,
                 o->name);
        ob__k8s_api(kl, "DELETE", path, NULL, &status, &out, NULL);
        free(out);
        delete_secret(kl, o->name);
        return;
    }
    char path[800];
    long status = 0;
    char *out = NULL;
    ob_err err;
    ob_err_clear(&err);
    ob_status rc;
    if (o->kind == OP_CREATE) {
        snprintf(path, sizeof path, API_MPIJOBS, kl->ns);
        rc = ob__k8s_api(kl, "POST", path, o->body, &status, &out, &err);
        pthread_mutex_lock(&kl->mu);
        katt *a = ob__k8s_find_att(kl, o->name);
        if (a && a->phase == K_TO_CREATE) {
            if (rc == OB_OK && (status == 201 || status == 200 || status == 202)) {
                json_t *obj = json_loads(out ? out : "", JSON_REJECT_DUPLICATES, NULL);
                a->phase = K_LIVE;
                if (obj) ob__k8s_apply_mpijob(kl, obj, 0);
                json_decref(obj);
            } else if (rc == OB_OK && status == 409) {
                /* It exists: ours when it carries this attempt's labels (a creation whose
                 * answer was lost), else someone else's. */
                a->phase = K_LIVE;
                a->conflict = 1;
            } else if (rc == OB_OK && status >= 400 && status < 500 && status != 429) {
                char msg[TEXT];
                ob__kube_status_message(out, msg, sizeof msg);
                snprintf(a->end_reason, sizeof a->end_reason,
                         "the API server refused MPIJob %s (HTTP %ld): %.150s", a->name, status,
                         msg);
                a->ended = 1;
                a->permanent = 1;
                a->final_ms = ob_wall_ms();
            } else if (ob_wall_ms() > a->create_deadline_ms) {
                char msg[TEXT];
                if (rc)
                    ob_strlcpy(msg, err.msg, sizeof msg);
                else
                    ob__kube_status_message(out, msg, sizeof msg);
                snprintf(a->end_reason, sizeof a->end_reason,
                         "MPIJob %s could not be created: %.150s", a->name, msg);
                a->ended = 1;
                a->final_ms = ob_wall_ms();
            } else {
                a->next_try_ms = ob_wall_ms() + 1000;
            }
            if (a->phase == K_LIVE || a->ended) {
                free(a->body);
                a->body = NULL;
            }
        }
        int conflict = a && a->conflict;
        pthread_mutex_unlock(&kl->mu);
        free(out);
        if (conflict) resolve_conflict(kl, o->name);
        return;
    }
    /* Deletes. TERM: the pods get their grace period (SIGTERM first, the ranks checkpoint) and
     * the MPIJob goes once they are gone (foreground). KILL and DROP: at once. */
    const char *q = o->kind == OP_TERM ? "?propagationPolicy=Foreground"
                                       : "?propagationPolicy=Background&gracePeriodSeconds=0";
    snprintf(path, sizeof path, API_MPIJOBS "/%s%s", kl->ns, o->name, q);
    rc = ob__k8s_api(kl, "DELETE", path, NULL, &status, &out, &err);
    free(out);
    int done = rc == OB_OK && (status < 300 || status == 404);
    for (size_t i = 0; i < o->npods; i++) {
        snprintf(path, sizeof path, API_PODS "/%s?gracePeriodSeconds=0", kl->ns, o->pods[i]);
        out = NULL;
        ob__k8s_api(kl, "DELETE", path, NULL, &status, &out, NULL);
        free(out);
    }
    pthread_mutex_lock(&kl->mu);
    katt *a = ob__k8s_find_att(kl, o->name);
    if (a && done) {
        if (o->kind == OP_TERM) a->term_sent = 1;
        if (o->kind == OP_KILL) a->kill_sent = 1;
        if (o->kind == OP_DROP) a->drop_sent = 1;
    }
    pthread_mutex_unlock(&kl->mu);
}

/* With the mutex held: the next request to make, if any. */
static int next_op(kube_launcher *kl, op *o, int64_t now)
{
    memset(o, 0, sizeof *o);
    if (kl->purge) {
        kpurge *pg = kl->purge;
        kl->purge = pg->next;
        kl->npurge--;
        o->kind = OP_PURGE;
        ob_strlcpy(o->name, pg->name, sizeof o->name);
        free(pg);
        return 1;
    }
    for (katt *a = kl->atts; a; a = a->next) {
        if (!a->name[0]) continue; /* a replaced start, finishing its log */
        ob_strlcpy(o->name, a->name, sizeof o->name);
        int final = a->ended || a->succeeded || a->failed || a->deleted;
        if (final && a->secret_want) { /* never made: nothing to make any more */
            a->secret_want = 0;
            ob__k8s_wipe_token(a);
        }
        if (a->secret_want && a->phase == K_LIVE && a->uid[0] && now >= a->secret_next_ms) {
            if (!a->secret_deadline_ms) a->secret_deadline_ms = now + 60000;
            a->secret_next_ms = now + 1000; /* not again while this one runs */
            if (secret_op(kl, a, o) == OB_OK) return 1;
            memset(o, 0, sizeof *o);
            continue;
        }
        if (final && a->secret_made && !a->secret_gone && now >= a->secret_next_ms) {
            o->kind = OP_SECRET_DEL;
            a->secret_next_ms = now + 2000;
            return 1;
        }
        if (a->phase == K_TO_CREATE && !a->ended && !a->kill_wanted && !a->term_wanted &&
            now >= a->next_try_ms && a->body) {
            o->kind = OP_CREATE;
            o->body = strdup(a->body);
            if (!o->body) continue;
            a->next_try_ms = now + 1000; /* not again while this one runs */
            return 1;
        }
        if (a->phase != K_LIVE || a->deleted) continue;
        if (a->kill_wanted && !a->kill_sent) {
            o->kind = OP_KILL;
            for (size_t i = 0; i < a->npods && o->npods < 8; i++)
                if (strcmp(a->pods[i].phase, "Deleted") && strcmp(a->pods[i].phase, "Succeeded") &&
                    strcmp(a->pods[i].phase, "Failed"))
                    ob_strlcpy(o->pods[o->npods++], a->pods[i].name, sizeof o->pods[0]);
            a->kill_sent = 1; /* one try per signal; the supervisor signals again if needed */
            return 1;
        }
        if (a->term_wanted && !a->term_sent && !a->deleting) {
            o->kind = OP_TERM;
            a->term_sent = 1;
            return 1;
        }
        if (a->drop_wanted && !a->drop_sent) {
            o->kind = OP_DROP;
            a->drop_sent = 1;
            return 1;
        }
    }
    return 0;
}

/* With the mutex held: attempts whose pods stay unschedulable or without their image end. */
static void check_stuck(kube_launcher *kl, int64_t now)
{
    for (katt *a = kl->atts; a; a = a->next) {
        if (a->ended || a->succeeded || a->failed || a->deleted) continue;
        const kpod *p = ob__k8s_stuck_pod(a);
        if (!p) continue;
        int invalid = !strcmp(p->waiting, "InvalidImageName");
        if (!invalid && (kl->pending_s <= 0 || now - p->stuck_since_ms < kl->pending_s * 1000LL))
            continue;
        char text[TEXT];
        ob__k8s_stuck_text(p, text, sizeof text);
        snprintf(a->end_reason, sizeof a->end_reason, "%.200s (for %d s)", text,
                 (int)((now - p->stuck_since_ms) / 1000));
        a->ended = 1;
        a->permanent = p->unschedulable[0] ? 0 : 1; /* the same image fails the same way */
        a->final_ms = now;
        a->drop_wanted = 1;
    }
}

void *ob__k8s_thread(void *arg)
{
    kube_launcher *kl = arg;
    kwatch_ctx wc[2] = {{kl, &kl->w[0]}, {kl, &kl->w[1]}};
    pthread_mutex_lock(&kl->mu);
    while (!kl->stop) {
        int64_t now = ob_wall_ms();
        op o;
        if (next_op(kl, &o, now)) {
            pthread_mutex_unlock(&kl->mu);
            run_op(kl, &o);
            wipe_free(o.body);
            wipe_free(o.token);
            pthread_mutex_lock(&kl->mu);
            continue;
        }
        for (int i = 0; i < 2; i++) {
            kwatch *w = &kl->w[i];
            if (w->h || now < w->retry_ms) continue;
            if (w->need_list) {
                pthread_mutex_unlock(&kl->mu);
                ob__k8s_relist(kl, w);
                pthread_mutex_lock(&kl->mu);
                if (w->need_list) continue;
            }
            ob__k8s_start_watch(kl, w, &wc[i]);
        }
        check_stuck(kl, now);
        katt **pp = &kl->atts;
        while (*pp) {
            katt *a = *pp;
            ob__k8s_follow_logs(kl, a, now);
            /* Ended, and nobody has asked about it for long: forgotten. */
            int final = a->ended || a->succeeded || a->failed || a->deleted;
            if (final && !ob__k8s_streams_open(a) && (!a->secret_made || a->secret_gone) &&
                a->last_poll_ms && now - a->last_poll_ms > FORGET_MS) {
                *pp = a->next;
                ob__k8s_free_att(a);
                continue;
            }
            pp = &a->next;
        }
        pthread_mutex_unlock(&kl->mu);
        int running = 0;
        curl_multi_perform(kl->multi, &running);
        ob__k8s_reap_transfers(kl);
        curl_multi_poll(kl->multi, NULL, 0, 200, NULL);
        curl_multi_perform(kl->multi, &running);
        ob__k8s_reap_transfers(kl);
        pthread_mutex_lock(&kl->mu);
    }
    pthread_mutex_unlock(&kl->mu);
    return NULL;
}

void ob__k8s_wake(kube_launcher *kl)
{
    if (kl->multi) curl_multi_wakeup(kl->multi);
}
