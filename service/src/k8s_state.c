/* The Kubernetes launcher's state as the API server describes it (k8s_internal.h): small
 * helpers on the attempts, and what an MPIJob or a pod object says, applied to its attempt;
 * what the pods say about an attempt that failed or cannot start. */
#include "k8s_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- state ---------------------------------------------------------------------------------- */

void ob__k8s_clean_text(char *dst, size_t cap, const char *src)
{
    size_t k = 0;
    for (; src && *src && k + 1 < cap; src++)
        dst[k++] = (unsigned char)*src < 0x20 || *src == 0x7f ? ' ' : *src;
    if (cap) dst[k] = '\0';
}

const char *ob__k8s_jstr(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

katt *ob__k8s_find_att(kube_launcher *kl, const char *name)
{
    for (katt *a = kl->atts; a; a = a->next)
        if (!strcmp(a->name, name)) return a;
    return NULL;
}

void ob__k8s_wipe_token(katt *a)
{
    if (!a->report_token) return;
    volatile char *p = a->report_token;
    while (*p)
        *p++ = '\0';
    free(a->report_token);
    a->report_token = NULL;
}

/* Frees a stream whose transfer is over (h == NULL). */
static void free_stream(kstream *st)
{
    if (st->fd >= 0) close(st->fd);
    free(st->lb.buf);
    free(st);
}

int ob__k8s_streams_open(const katt *a)
{
    for (const kstream *st = a->streams; st; st = st->next)
        if (st->h) return 1;
    return 0;
}

void ob__k8s_free_att(katt *a)
{
    if (!a) return;
    free(a->body);
    free(a->pods);
    while (a->streams) {
        kstream *st = a->streams;
        a->streams = st->next;
        free_stream(st);
    }
    ob__k8s_wipe_token(a);
    free(a);
}

/* The name of an attempt's Secret: "<MPIJob name>-report". */
void ob__k8s_secret_name(const katt *a, char *out, size_t cap)
{
    snprintf(out, cap, "%s" SECRET_SUFFIX, a->name);
}

int64_t ob__k8s_parse_rv(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return s[0] && !*end && !errno && v > 0 ? (int64_t)v : 0;
}

/* ---- what the API server says ------------------------------------------------------------- */

/* Applies an MPIJob object (from a list, a watch event or a GET). Returns its att or NULL. */
katt *ob__k8s_apply_mpijob(kube_launcher *kl, json_t *obj, int deleted)
{
    json_t *meta = json_object_get(obj, "metadata");
    const char *name = ob__k8s_jstr(meta, "name");
    katt *a = name[0] ? ob__k8s_find_att(kl, name) : NULL;
    if (!a) return NULL;
    json_t *labels = json_object_get(meta, "labels");
    char attempt[16];
    snprintf(attempt, sizeof attempt, "%d", a->attempt);
    /* An MPIJob of that name that is not this attempt's is not ours to follow. */
    if (strcmp(ob__k8s_jstr(labels, LABEL_JOB), a->job_id) ||
        strcmp(ob__k8s_jstr(labels, LABEL_ATTEMPT), attempt))
        return NULL;
    int64_t rv = ob__k8s_parse_rv(ob__k8s_jstr(meta, "resourceVersion"));
    if (rv && rv > a->rv) a->rv = rv;
    const char *uid = ob__k8s_jstr(meta, "uid");
    if (!a->uid[0] && uid[0] && strlen(uid) < sizeof a->uid &&
        strspn(uid, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") ==
            strlen(uid))
        ob_strlcpy(a->uid, uid, sizeof a->uid);
    if (a->phase == K_TO_CREATE) {
        a->phase = K_LIVE;
        free(a->body);
        a->body = NULL;
    }
    if (deleted) a->deleted = 1;
    if (json_object_get(meta, "deletionTimestamp")) a->deleting = 1;
    json_t *conds = json_object_get(json_object_get(obj, "status"), "conditions");
    size_t i;
    json_t *c;
    a->restarting[0] = '\0';
    if (json_is_array(conds)) json_array_foreach(conds, i, c)
        {
            if (strcmp(ob__k8s_jstr(c, "status"), "True") != 0) continue;
            const char *t = ob__k8s_jstr(c, "type");
            if (!strcmp(t, "Restarting")) {
                /* backoffLimit 0 should keep the operator from it; said if it happens. */
                char text[TEXT * 2];
                snprintf(text, sizeof text, "MPIJob %s is restarting pods: %.60s: %.200s", a->name,
                         ob__k8s_jstr(c, "reason"), ob__k8s_jstr(c, "message"));
                ob__k8s_clean_text(a->restarting, sizeof a->restarting, text);
            }
            if (!strcmp(t, "Succeeded")) a->succeeded = 1;
            if (!strcmp(t, "Running")) a->running = 1;
            if (!strcmp(t, "Failed") && !a->failed) {
                a->failed = 1;
                char text[TEXT * 2];
                snprintf(text, sizeof text, "%.60s: %.300s", ob__k8s_jstr(c, "reason"),
                         ob__k8s_jstr(c, "message"));
                ob__k8s_clean_text(a->cond, sizeof a->cond, text);
            }
        }
    if ((a->succeeded || a->failed || a->deleted) && !a->final_ms) a->final_ms = ob_wall_ms();
    return a;
}

static const char *const stuck_reasons[] = {"ErrImagePull",         "ImagePullBackOff",
                                            "InvalidImageName",     "CreateContainerConfigError",
                                            "CreateContainerError", "ErrImageNeverPull"};

/* Applies a pod object. */
void ob__k8s_apply_pod(kube_launcher *kl, json_t *obj, int deleted)
{
    json_t *meta = json_object_get(obj, "metadata");
    const char *name = ob__k8s_jstr(meta, "name");
    json_t *labels = json_object_get(meta, "labels");
    katt *a = ob__k8s_find_att(kl, ob__k8s_jstr(labels, LABEL_MPIJOB));
    if (!a || !name[0] || strlen(name) >= sizeof a->pods[0].name) return;
    kpod *p = NULL;
    for (size_t i = 0; i < a->npods && !p; i++)
        if (!strcmp(a->pods[i].name, name)) p = &a->pods[i];
    if (!p) {
        if (deleted || a->npods >= MAX_PODS) return;
        if (a->npods == a->cap) {
            size_t nc = a->cap ? a->cap * 2 : 8;
            kpod *np = realloc(a->pods, nc * sizeof *np);
            if (!np) return;
            a->pods = np;
            a->cap = nc;
        }
        p = &a->pods[a->npods++];
        memset(p, 0, sizeof *p);
        ob_strlcpy(p->name, name, sizeof p->name);
    }
    p->launcher = !strcmp(ob__k8s_jstr(labels, LABEL_ROLE), "launcher") ||
                  !strcmp(ob__k8s_jstr(labels, "training.kubeflow.org/job-role"), "launcher");
    /* The operator's replica-index label, else the "-worker-<i>" its pod names end with. */
    const char *idx = ob__k8s_jstr(labels, "training.kubeflow.org/replica-index");
    const char *tail = strstr(name, "-worker-");
    if (!idx[0] && tail) idx = tail + 8;
    size_t idigits = strspn(idx, "0123456789");
    p->index = !p->launcher && idigits > 0 && idigits < 5 && !idx[idigits] ? atoi(idx) : -1;
    json_t *st = json_object_get(obj, "status");
    ob__k8s_clean_text(p->phase, sizeof p->phase, ob__k8s_jstr(st, "phase"));
    ob__k8s_clean_text(p->reason, sizeof p->reason, ob__k8s_jstr(st, "reason"));
    ob__k8s_clean_text(p->message, sizeof p->message, ob__k8s_jstr(st, "message"));
    p->unschedulable[0] = '\0';
    size_t i;
    json_t *c;
    json_t *conds = json_object_get(st, "conditions");
    if (json_is_array(conds)) json_array_foreach(conds, i, c)
        {
            if (!strcmp(ob__k8s_jstr(c, "type"), "PodScheduled") &&
                !strcmp(ob__k8s_jstr(c, "status"), "False") &&
                !strcmp(ob__k8s_jstr(c, "reason"), "Unschedulable"))
                ob__k8s_clean_text(p->unschedulable, sizeof p->unschedulable,
                                   ob__k8s_jstr(c, "message"));
        }
    p->waiting[0] = p->waiting_msg[0] = '\0';
    json_t *cs = json_object_get(st, "containerStatuses");
    json_t *main = json_is_array(cs) ? json_array_get(cs, 0) : NULL;
    json_t *state = json_object_get(main, "state");
    json_t *w = json_object_get(state, "waiting"), *t = json_object_get(state, "terminated");
    if (json_is_object(w)) {
        ob__k8s_clean_text(p->waiting, sizeof p->waiting, ob__k8s_jstr(w, "reason"));
        ob__k8s_clean_text(p->waiting_msg, sizeof p->waiting_msg, ob__k8s_jstr(w, "message"));
    }
    if (json_is_object(t) && json_is_integer(json_object_get(t, "exitCode"))) {
        json_int_t code = json_integer_value(json_object_get(t, "exitCode"));
        p->terminated = 1;
        p->exit_code = code >= 0 && code <= 255 ? (int)code : 255;
        ob__k8s_clean_text(p->term_reason, sizeof p->term_reason, ob__k8s_jstr(t, "reason"));
    }
    int stuck = p->unschedulable[0] != '\0';
    for (size_t k = 0; k < sizeof stuck_reasons / sizeof stuck_reasons[0]; k++)
        stuck |= !strcmp(p->waiting, stuck_reasons[k]);
    if (!stuck)
        p->stuck_since_ms = 0;
    else if (!p->stuck_since_ms)
        p->stuck_since_ms = ob_wall_ms();
    if (deleted) {
        /* Kept: its last state may explain the end. */
        if (!strcmp(p->phase, "Pending") || !strcmp(p->phase, "Running"))
            ob_strlcpy(p->phase, "Deleted", sizeof p->phase);
        p->stuck_since_ms = 0;
    }
}

/* What the pods say about an attempt that failed, for people to act on; *permanent when a
 * restart cannot help. */
void ob__k8s_diagnose(const katt *a, char *out, size_t cap, int *permanent)
{
    out[0] = '\0';
    const kpod *worker_exit = NULL, *launcher = NULL;
    for (size_t i = 0; i < a->npods; i++) {
        const kpod *p = &a->pods[i];
        const char *role = p->launcher ? "launcher" : "worker";
        if (!strcmp(p->term_reason, "OOMKilled")) {
            snprintf(out, cap,
                     "%s pod %.100s was OOMKilled: it needs more memory than its limit (raise the "
                     "memory request/limit, or use more ranks)",
                     role, p->name);
            *permanent = 1;
            return;
        }
        if (!strcmp(p->reason, "Evicted")) {
            snprintf(out, cap, "%s pod %.100s was evicted: %.120s", role, p->name, p->message);
            return;
        }
        if (!strcmp(p->reason, "DeadlineExceeded")) {
            snprintf(out, cap, "%s pod %.100s passed its deadline: %.120s", role, p->name,
                     p->message);
            *permanent = 1;
            return;
        }
        if (p->launcher) launcher = p;
        if (!p->launcher && p->terminated && p->exit_code != 0 && !worker_exit) worker_exit = p;
    }
    if (worker_exit)
        snprintf(out, cap, "worker pod %.100s exited with code %d%s%.40s%s", worker_exit->name,
                 worker_exit->exit_code, worker_exit->term_reason[0] ? " (" : "",
                 worker_exit->term_reason, worker_exit->term_reason[0] ? ")" : "");
    else if (launcher && launcher->terminated && launcher->exit_code != 0)
        snprintf(out, cap, "launcher pod %.100s (mpirun) exited with code %d", launcher->name,
                 launcher->exit_code);
}

/* A pod that keeps the attempt from running, as a notice; NULL when none. */
const kpod *ob__k8s_stuck_pod(const katt *a)
{
    const kpod *worst = NULL;
    for (size_t i = 0; i < a->npods; i++)
        if (a->pods[i].stuck_since_ms &&
            (!worst || a->pods[i].stuck_since_ms < worst->stuck_since_ms))
            worst = &a->pods[i];
    return worst;
}

void ob__k8s_stuck_text(const kpod *p, char *out, size_t cap)
{
    if (p->unschedulable[0])
        snprintf(out, cap, "pod %.100s cannot be scheduled: %.120s", p->name, p->unschedulable);
    else
        snprintf(out, cap, "pod %.100s: %.40s: %.100s", p->name, p->waiting, p->waiting_msg);
}

const kpod *ob__k8s_launcher_pod(const katt *a)
{
    for (size_t i = 0; i < a->npods; i++)
        if (a->pods[i].launcher) return &a->pods[i];
    return NULL;
}

/* The pod of a role and index: the launcher (index -1) or a worker. */
const kpod *ob__k8s_pod_of(const katt *a, int index)
{
    for (size_t i = 0; i < a->npods; i++)
        if (index < 0 ? a->pods[i].launcher : a->pods[i].index == index) return &a->pods[i];
    return NULL;
}
