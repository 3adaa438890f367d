/* The Kubernetes launcher (onebit/kubernetes.h): every attempt one kubeflow.org/v2beta1 MPIJob.
 *
 * Two halves meet at one mutex (kl->mu, never held across a network call):
 * - the launcher calls, made by the supervisor with the service lock held: start() builds the
 *   MPIJob and queues its creation, signal() queues a graceful or an immediate delete, poll()
 *   and alive() read the state the thread keeps; attach() asks the API server once (a bounded
 *   request) for the attempt's MPIJob by its labels;
 * - the thread: creates and deletes what was queued, lists and then watches MPIJobs and pods
 *   labelled app.kubernetes.io/managed-by=onebitd (relisting after 410 Gone, reconnecting with
 *   a backoff when a stream breaks), follows each launcher pod's log into the job's worker.log,
 *   and ends attempts whose pods stay unschedulable or cannot pull their image.
 * Everything the API server sends is parsed with jansson under a size limit, with its types
 * checked; text taken from it is bounded and stripped of control characters. */
#define _GNU_SOURCE /* timegm */
#include "kube_api.h"
#include "onebit/base.h"
#include "onebit/kubernetes.h"

#include <jansson.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define API_MPIJOBS "/apis/kubeflow.org/v2beta1/namespaces/%s/mpijobs"
#define API_PODS "/api/v1/namespaces/%s/pods"
#define LABEL_MANAGED "app.kubernetes.io/managed-by"
#define LABEL_JOB "onebit.dev/job-id"
#define LABEL_ATTEMPT "onebit.dev/attempt"
#define LABEL_MPIJOB "onebit.dev/mpijob"
#define LABEL_ROLE "onebit.dev/role"
/* In a query: "=" needs no escaping in a parameter's value. */
#define SELECTOR LABEL_MANAGED "=onebitd"
#define MAX_EVENT (4u << 20) /* one watch event */
#define MAX_LOG_LINE 65536
#define MAX_PODS 4096      /* pods tracked per attempt */
#define LOG_SETTLE_MS 5000 /* how long an ended attempt waits for the rest of its log */
#define FORGET_MS 600000   /* an ended attempt nobody polls is forgotten after this */
#define TEXT 320

/* ---- state ---------------------------------------------------------------------------------- */

typedef struct linebuf {
    char *buf;
    size_t len, cap, max;
    int overflow;
} linebuf;

typedef struct kpod {
    char name[254];
    int launcher;
    char phase[16];
    int terminated, exit_code;
    char term_reason[64];
    char waiting[64], waiting_msg[TEXT];
    char unschedulable[TEXT];
    char reason[64], message[TEXT]; /* status.reason (Evicted, DeadlineExceeded) */
    int64_t stuck_since_ms;
} kpod;

typedef enum { K_TO_CREATE, K_LIVE } kphase;

typedef struct katt {
    char name[OB_K8S_NAME_MAX + 1];
    char job_id[OB_JOB_ID_LEN];
    int attempt;
    char log_path[1024];
    kphase phase;
    char *body; /* the MPIJob to create (K_TO_CREATE) */
    int64_t next_try_ms, create_deadline_ms;
    int64_t rv; /* the newest resourceVersion seen of the MPIJob, 0: never seen */
    int succeeded, failed, running, deleting, deleted;
    char restarting[TEXT]; /* the Restarting condition's reason and message while it holds */
    char cond[TEXT];       /* the Failed condition's reason and message */
    int term_wanted, term_sent, kill_wanted, kill_sent, drop_wanted, drop_sent;
    int ended;    /* ended by the launcher: create failed, or stuck */
    int conflict; /* creation answered 409: whose the MPIJob is, is still to be asked */
    int permanent;
    char end_reason[TEXT];
    int64_t final_ms, last_poll_ms;
    kpod *pods;
    size_t npods, cap;
    /* the launcher pod's log */
    CURL *log_h;
    struct curl_slist *log_hl;
    FILE *log_f;
    linebuf log_lb;
    int log_done;
    int64_t log_retry_ms, log_sec, log_nsec; /* the newest line copied */
    struct katt *next;
} katt;

typedef struct watch {
    const char *what; /* "mpijobs", "pods" */
    char rv[64];
    int need_list;
    CURL *h;
    struct curl_slist *hl;
    linebuf lb;
    int gone; /* a 410 arrived on the stream */
    int64_t retry_ms;
    int failures;
} watch;

typedef struct kube_launcher {
    ob_launcher base;
    ob_kube_conn conn;
    char ns[254], image[512], pull[32], claim[254], sa[254], cpu[32], mem[32];
    int slots, grace_s, pending_s, ttl_s, timeout_ms;
    pthread_mutex_t mu;
    pthread_t thread;
    int started, stop;
    CURLM *multi;
    katt *atts;
    watch w[2];
    char api_problem[TEXT]; /* why the API server cannot be watched now; "" when it can */
} kube_launcher;

static void clean_text(char *dst, size_t cap, const char *src)
{
    size_t k = 0;
    for (; src && *src && k + 1 < cap; src++)
        dst[k++] = (unsigned char)*src < 0x20 || *src == 0x7f ? ' ' : *src;
    if (cap) dst[k] = '\0';
}

static const char *jstr(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static katt *find_att(kube_launcher *kl, const char *name)
{
    for (katt *a = kl->atts; a; a = a->next)
        if (!strcmp(a->name, name)) return a;
    return NULL;
}

static void free_att(katt *a)
{
    if (!a) return;
    free(a->body);
    free(a->pods);
    free(a->log_lb.buf);
    if (a->log_f) fclose(a->log_f);
    free(a);
}

static int64_t parse_rv(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return s[0] && !*end && !errno && v > 0 ? (int64_t)v : 0;
}

/* ---- building the MPIJob ------------------------------------------------------------------ */

/* 1 when the spec at path asks for device: cuda (the service wrote it: canonical JSON). */
static int spec_wants_cuda(const char *path)
{
    json_error_t je;
    json_t *s = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    int cuda = !strcmp(jstr(s, "device"), "cuda");
    json_decref(s);
    return cuda;
}

/* Copies the spec where every pod can read it: the checkpoint directory (the shared volume),
 * <ckpt>/.onebit-specs/<name>.json, written atomically. */
static ob_status share_spec(const ob_launch_req *req, const char *name, char *out, size_t cap,
                            ob_err *err)
{
    char dir[1024], tmp[1300];
    snprintf(dir, sizeof dir, "%s/.onebit-specs", req->checkpoint_dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return OB_ERR(err, OB_ERR_IO, "creating %s: %s", dir, strerror(errno));
    if ((size_t)snprintf(out, cap, "%s/%s.json", dir, name) >= cap)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "checkpoint directory path too long");
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *in = fopen(req->spec_path, "rb");
    if (!in) return OB_ERR(err, OB_ERR_IO, "opening %s: %s", req->spec_path, strerror(errno));
    FILE *o = fopen(tmp, "wb");
    if (!o) {
        fclose(in);
        return OB_ERR(err, OB_ERR_IO, "creating %s: %s", tmp, strerror(errno));
    }
    char buf[8192];
    size_t n;
    int bad = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        bad |= fwrite(buf, 1, n, o) != n;
    bad |= ferror(in);
    fclose(in);
    bad |= fflush(o) != 0 || fsync(fileno(o)) != 0;
    bad |= fclose(o) != 0;
    if (bad || rename(tmp, out) != 0) {
        unlink(tmp);
        return OB_ERR(err, OB_ERR_IO, "writing %s", out);
    }
    return OB_OK;
}

static json_t *labels_for(const ob_launch_req *req, const char *name, const char *role)
{
    char attempt[16];
    snprintf(attempt, sizeof attempt, "%d", req->attempt);
    json_t *l = json_pack("{s:s, s:s, s:s, s:s}", LABEL_MANAGED, "onebitd", LABEL_JOB, req->job_id,
                          LABEL_ATTEMPT, attempt, LABEL_MPIJOB, name);
    if (l && role) json_object_set_new(l, LABEL_ROLE, json_string(role));
    return l;
}

/* One replica's pod template. */
static json_t *pod_template(const kube_launcher *kl, const ob_launch_req *req, const char *name,
                            const char *role, json_t *container)
{
    json_t *spec = json_pack("{s:i, s:{s:b, s:i, s:i}, s:[o]}", "terminationGracePeriodSeconds",
                             kl->grace_s, "securityContext", "runAsNonRoot", 1, "runAsUser", 1000,
                             "fsGroup", 1000, "containers", container);
    if (!spec) return NULL;
    if (kl->sa[0]) json_object_set_new(spec, "serviceAccountName", json_string(kl->sa));
    if (kl->claim[0]) {
        json_object_set_new(spec, "volumes",
                            json_pack("[{s:s, s:{s:s}}]", "name", "checkpoints",
                                      "persistentVolumeClaim", "claimName", kl->claim));
        json_object_set_new(
            container, "volumeMounts",
            json_pack("[{s:s, s:s}]", "name", "checkpoints", "mountPath", req->checkpoint_dir));
    }
    return json_pack("{s:{s:o}, s:o}", "metadata", "labels", labels_for(req, name, role), "spec",
                     spec);
}

static json_t *build_mpijob(const kube_launcher *kl, const ob_launch_req *req, const char *name,
                            const char *shared_spec, int cuda)
{
    int slots = kl->slots;
    int workers = (req->world_size + slots - 1) / slots;
    char np[16], gpus[16];
    snprintf(np, sizeof np, "%d", req->world_size);
    snprintf(gpus, sizeof gpus, "%d", slots);
    json_t *args = json_pack("[s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s]", "-np", np, "--bind-to", "none",
                             "-x", "ONEBIT_REPORT_TOKEN", "-x", "OPENBLAS_NUM_THREADS",
                             "onebit-worker", "--spec", shared_spec, "--format", "json", "--job-id",
                             req->job_id, "--checkpoint-dir", req->checkpoint_dir);
    if (!args) return NULL;
    if (req->resume) json_array_append_new(args, json_string("--resume"));
    if (req->report_addr && req->report_addr[0]) {
        json_array_append_new(args, json_string("--report"));
        json_array_append_new(args, json_string(req->report_addr));
    }
    json_t *env = json_pack("[{s:s, s:s}]", "name", "OPENBLAS_NUM_THREADS", "value", "1");
    if (req->report_token && req->report_token[0])
        json_array_append_new(env, json_pack("{s:s, s:s}", "name", "ONEBIT_REPORT_TOKEN", "value",
                                             req->report_token));
    json_t *launcher =
        json_pack("{s:s, s:s, s:s, s:[s], s:o, s:o, s:{s:{s:s, s:s}}}", "name", "launcher", "image",
                  kl->image, "imagePullPolicy", kl->pull, "command", "mpirun", "args", args, "env",
                  env, "resources", "requests", "cpu", "100m", "memory", "128Mi");
    json_t *res = json_pack("{s:{s:s, s:s}}", "requests", "cpu", kl->cpu, "memory", kl->mem);
    if (cuda && res) json_object_set_new(res, "limits", json_pack("{s:s}", "nvidia.com/gpu", gpus));
    json_t *worker = json_pack("{s:s, s:s, s:s, s:o, s:[{s:s, s:i}]}", "name", "worker", "image",
                               kl->image, "imagePullPolicy", kl->pull, "resources", res, "ports",
                               "name", "ssh", "containerPort", 2222);
    json_t *lt = launcher ? pod_template(kl, req, name, "launcher", launcher) : NULL;
    json_t *wt = worker ? pod_template(kl, req, name, "worker", worker) : NULL;
    if (!lt || !wt) {
        json_decref(lt);
        json_decref(wt);
        return NULL;
    }
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:o}, s:{s:i, s:s, s:s, s:s, s:{s:s, s:i, s:i}, "
                     "s:{s:{s:i, s:s, s:o}, s:{s:i, s:s, s:o}}}}",
                     "apiVersion", "kubeflow.org/v2beta1", "kind", "MPIJob", "metadata", "name",
                     name, "namespace", kl->ns, "labels", labels_for(req, name, NULL), "spec",
                     "slotsPerWorker", slots, "launcherCreationPolicy", "WaitForWorkersReady",
                     "mpiImplementation", "OpenMPI", "sshAuthMountPath", "/home/onebit/.ssh",
                     "runPolicy", "cleanPodPolicy", "Running", "backoffLimit", 0,
                     "ttlSecondsAfterFinished", kl->ttl_s, "mpiReplicaSpecs", "Launcher",
                     "replicas", 1, "restartPolicy", "Never", "template", lt, "Worker", "replicas",
                     workers, "restartPolicy", "Never", "template", wt);
}

/* ---- what the API server says ------------------------------------------------------------- */

/* Applies an MPIJob object (from a list, a watch event or a GET). Returns its att or NULL. */
static katt *apply_mpijob(kube_launcher *kl, json_t *obj, int deleted)
{
    json_t *meta = json_object_get(obj, "metadata");
    const char *name = jstr(meta, "name");
    katt *a = name[0] ? find_att(kl, name) : NULL;
    if (!a) return NULL;
    json_t *labels = json_object_get(meta, "labels");
    char attempt[16];
    snprintf(attempt, sizeof attempt, "%d", a->attempt);
    /* An MPIJob of that name that is not this attempt's is not ours to follow. */
    if (strcmp(jstr(labels, LABEL_JOB), a->job_id) || strcmp(jstr(labels, LABEL_ATTEMPT), attempt))
        return NULL;
    int64_t rv = parse_rv(jstr(meta, "resourceVersion"));
    if (rv && rv > a->rv) a->rv = rv;
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
            if (strcmp(jstr(c, "status"), "True") != 0) continue;
            const char *t = jstr(c, "type");
            if (!strcmp(t, "Restarting")) {
                /* backoffLimit 0 should keep the operator from it; said if it happens. */
                char text[TEXT * 2];
                snprintf(text, sizeof text, "MPIJob %s is restarting pods: %.60s: %.200s", a->name,
                         jstr(c, "reason"), jstr(c, "message"));
                clean_text(a->restarting, sizeof a->restarting, text);
            }
            if (!strcmp(t, "Succeeded")) a->succeeded = 1;
            if (!strcmp(t, "Running")) a->running = 1;
            if (!strcmp(t, "Failed") && !a->failed) {
                a->failed = 1;
                char text[TEXT * 2];
                snprintf(text, sizeof text, "%.60s: %.300s", jstr(c, "reason"), jstr(c, "message"));
                clean_text(a->cond, sizeof a->cond, text);
            }
        }
    if ((a->succeeded || a->failed || a->deleted) && !a->final_ms) a->final_ms = ob_wall_ms();
    return a;
}

static const char *const stuck_reasons[] = {"ErrImagePull",         "ImagePullBackOff",
                                            "InvalidImageName",     "CreateContainerConfigError",
                                            "CreateContainerError", "ErrImageNeverPull"};

/* Applies a pod object. */
static void apply_pod(kube_launcher *kl, json_t *obj, int deleted)
{
    json_t *meta = json_object_get(obj, "metadata");
    const char *name = jstr(meta, "name");
    json_t *labels = json_object_get(meta, "labels");
    katt *a = find_att(kl, jstr(labels, LABEL_MPIJOB));
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
    p->launcher = !strcmp(jstr(labels, LABEL_ROLE), "launcher") ||
                  !strcmp(jstr(labels, "training.kubeflow.org/job-role"), "launcher");
    json_t *st = json_object_get(obj, "status");
    clean_text(p->phase, sizeof p->phase, jstr(st, "phase"));
    clean_text(p->reason, sizeof p->reason, jstr(st, "reason"));
    clean_text(p->message, sizeof p->message, jstr(st, "message"));
    p->unschedulable[0] = '\0';
    size_t i;
    json_t *c;
    json_t *conds = json_object_get(st, "conditions");
    if (json_is_array(conds)) json_array_foreach(conds, i, c)
        {
            if (!strcmp(jstr(c, "type"), "PodScheduled") && !strcmp(jstr(c, "status"), "False") &&
                !strcmp(jstr(c, "reason"), "Unschedulable"))
                clean_text(p->unschedulable, sizeof p->unschedulable, jstr(c, "message"));
        }
    p->waiting[0] = p->waiting_msg[0] = '\0';
    json_t *cs = json_object_get(st, "containerStatuses");
    json_t *main = json_is_array(cs) ? json_array_get(cs, 0) : NULL;
    json_t *state = json_object_get(main, "state");
    json_t *w = json_object_get(state, "waiting"), *t = json_object_get(state, "terminated");
    if (json_is_object(w)) {
        clean_text(p->waiting, sizeof p->waiting, jstr(w, "reason"));
        clean_text(p->waiting_msg, sizeof p->waiting_msg, jstr(w, "message"));
    }
    if (json_is_object(t) && json_is_integer(json_object_get(t, "exitCode"))) {
        json_int_t code = json_integer_value(json_object_get(t, "exitCode"));
        p->terminated = 1;
        p->exit_code = code >= 0 && code <= 255 ? (int)code : 255;
        clean_text(p->term_reason, sizeof p->term_reason, jstr(t, "reason"));
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
static void diagnose(const katt *a, char *out, size_t cap, int *permanent)
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
static const kpod *stuck_pod(const katt *a)
{
    const kpod *worst = NULL;
    for (size_t i = 0; i < a->npods; i++)
        if (a->pods[i].stuck_since_ms &&
            (!worst || a->pods[i].stuck_since_ms < worst->stuck_since_ms))
            worst = &a->pods[i];
    return worst;
}

static void stuck_text(const kpod *p, char *out, size_t cap)
{
    if (p->unschedulable[0])
        snprintf(out, cap, "pod %.100s cannot be scheduled: %.120s", p->name, p->unschedulable);
    else
        snprintf(out, cap, "pod %.100s: %.40s: %.100s", p->name, p->waiting, p->waiting_msg);
}

static const kpod *launcher_pod(const katt *a)
{
    for (size_t i = 0; i < a->npods; i++)
        if (a->pods[i].launcher) return &a->pods[i];
    return NULL;
}

/* ---- line streams --------------------------------------------------------------------------- */

/* Appends data to lb and calls fn for each complete line (overlong lines are dropped whole). */
static void feed_lines(linebuf *lb, const char *data, size_t n, void (*fn)(void *, char *, size_t),
                       void *user)
{
    for (size_t i = 0; i < n; i++) {
        char ch = data[i];
        if (ch == '\n') {
            if (!lb->overflow && lb->buf) {
                lb->buf[lb->len] = '\0';
                fn(user, lb->buf, lb->len);
            }
            lb->len = 0;
            lb->overflow = 0;
            continue;
        }
        if (lb->overflow) continue;
        if (lb->len + 2 > lb->cap) {
            size_t nc = lb->cap ? lb->cap * 2 : 4096;
            if (nc > lb->max + 2) nc = lb->max + 2;
            if (lb->len + 2 > nc) {
                lb->overflow = 1;
                continue;
            }
            char *nb = realloc(lb->buf, nc);
            if (!nb) {
                lb->overflow = 1;
                continue;
            }
            lb->buf = nb;
            lb->cap = nc;
        }
        lb->buf[lb->len++] = ch;
    }
}

typedef struct watch_ctx {
    kube_launcher *kl;
    watch *w;
} watch_ctx;

/* One watch event line: {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}. */
static void on_event(void *user, char *line, size_t len)
{
    watch_ctx *wc = user;
    kube_launcher *kl = wc->kl;
    watch *w = wc->w;
    json_error_t je;
    json_t *ev = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    const char *type = jstr(ev, "type");
    json_t *obj = json_object_get(ev, "object");
    if (!json_is_object(obj)) {
        json_decref(ev);
        return;
    }
    pthread_mutex_lock(&kl->mu);
    if (!strcmp(type, "ERROR")) {
        json_t *code = json_object_get(obj, "code");
        if (json_is_integer(code) && json_integer_value(code) == 410) {
            w->gone = 1;
            w->need_list = 1;
        }
    } else {
        const char *rv = jstr(json_object_get(obj, "metadata"), "resourceVersion");
        if (rv[0] && strlen(rv) < sizeof w->rv) ob_strlcpy(w->rv, rv, sizeof w->rv);
        int deleted = !strcmp(type, "DELETED");
        if (!strcmp(type, "BOOKMARK")) {
        } else if (w == &kl->w[0]) {
            apply_mpijob(kl, obj, deleted);
        } else {
            apply_pod(kl, obj, deleted);
        }
    }
    pthread_mutex_unlock(&kl->mu);
    json_decref(ev);
}

static size_t watch_write(char *p, size_t size, size_t n, void *user)
{
    watch_ctx *wc = user;
    feed_lines(&wc->w->lb, p, size * n, on_event, wc);
    return wc->w->gone ? 0 : size * n; /* after a 410, end the stream: relist */
}

/* "2024-05-01T12:34:56.123456789Z" into seconds and nanoseconds; 0 when it is not one. */
static int parse_ts(const char *s, int64_t *sec, int64_t *nsec)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int used = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &used) != 6 ||
        used != 19)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    int64_t ns = 0;
    const char *p = s + 19;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 9) ns = ns * 10 + (*p - '0');
        for (; digits < 9; digits++)
            ns *= 10;
    }
    if (*p != 'Z') return 0;
    *sec = (int64_t)timegm(&tm);
    *nsec = ns;
    return 1;
}

/* One log line "TIMESTAMP text": copied to the job's log unless an earlier stream did. */
static void on_log_line(void *user, char *line, size_t len)
{
    katt *a = user;
    char *sp = memchr(line, ' ', len);
    int64_t sec, nsec;
    if (!sp) return;
    *sp = '\0';
    if (!parse_ts(line, &sec, &nsec)) return;
    if (sec < a->log_sec || (sec == a->log_sec && nsec <= a->log_nsec)) return;
    a->log_sec = sec;
    a->log_nsec = nsec;
    if (a->log_f) {
        fwrite(sp + 1, 1, len - (size_t)(sp + 1 - line), a->log_f);
        fputc('\n', a->log_f);
    }
}

static size_t log_write(char *p, size_t size, size_t n, void *user)
{
    katt *a = user;
    feed_lines(&a->log_lb, p, size * n, on_log_line, a);
    if (a->log_f) fflush(a->log_f);
    return size * n;
}

/* The newest copied line's time, kept next to the log so that a restarted coordinator does not
 * copy it twice. */
static void save_log_mark(const katt *a)
{
    char path[1100], tmp[1110];
    snprintf(path, sizeof path, "%s.k8s-mark", a->log_path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%" PRId64 " %" PRId64 "\n", a->log_sec, a->log_nsec);
    if (fclose(f) == 0) rename(tmp, path);
}

static void load_log_mark(katt *a)
{
    char path[1100];
    snprintf(path, sizeof path, "%s.k8s-mark", a->log_path);
    FILE *f = fopen(path, "r");
    if (!f) return;
    long long s = 0, ns = 0;
    if (fscanf(f, "%lld %lld", &s, &ns) == 2 && s > 0 && ns >= 0 && ns < 1000000000) {
        a->log_sec = s;
        a->log_nsec = ns;
    }
    fclose(f);
}

/* ---- the thread ------------------------------------------------------------------------------ */

static ob_status api(kube_launcher *kl, const char *method, const char *path, const char *body,
                     long *status, char **out, ob_err *err)
{
    return ob__kube_request(&kl->conn, method, path, body, kl->timeout_ms, status, out, err);
}

/* LIST of a watch's kind: replaces what is known, and gives the resourceVersion to watch from.
 * Called without the mutex. */
static void relist(kube_launcher *kl, watch *w)
{
    char path[600];
    int jobs = w == &kl->w[0];
    snprintf(path, sizeof path,
             jobs ? API_MPIJOBS "?labelSelector=" SELECTOR : API_PODS "?labelSelector=" SELECTOR,
             kl->ns);
    long status;
    char *body = NULL;
    ob_err err;
    ob_err_clear(&err);
    ob_status rc = api(kl, "GET", path, NULL, &status, &body, &err);
    json_error_t je;
    json_t *list =
        rc == OB_OK && status == 200 ? json_loads(body, JSON_REJECT_DUPLICATES, &je) : NULL;
    json_t *items = json_object_get(list, "items");
    const char *rv = jstr(json_object_get(list, "metadata"), "resourceVersion");
    pthread_mutex_lock(&kl->mu);
    if (!json_is_array(items) || !rv[0] || strlen(rv) >= sizeof w->rv) {
        char msg[TEXT];
        if (rc)
            ob_strlcpy(msg, err.msg, sizeof msg);
        else
            ob__kube_status_message(body, msg, sizeof msg);
        snprintf(kl->api_problem, sizeof kl->api_problem,
                 "the Kubernetes API server cannot be watched (listing %s%s%ld): %.150s", w->what,
                 rc ? "" : ", HTTP ", rc ? 0L : status, msg);
        w->failures++;
        int64_t backoff = 500LL << (w->failures < 6 ? w->failures : 6);
        w->retry_ms = ob_wall_ms() + backoff;
    } else {
        int64_t list_rv = parse_rv(rv);
        size_t i;
        json_t *it;
        /* Attempts the list no longer has are gone (deleted while nobody watched). */
        for (katt *a = kl->atts; a && jobs; a = a->next) {
            int present = 0;
            json_array_foreach(items, i, it)
            {
                present |= !strcmp(jstr(json_object_get(it, "metadata"), "name"), a->name);
            }
            if (!present && a->phase == K_LIVE && (!list_rv || list_rv > a->rv)) {
                a->deleted = 1;
                if (!a->final_ms) a->final_ms = ob_wall_ms();
            }
        }
        json_array_foreach(items, i, it)
        {
            if (jobs)
                apply_mpijob(kl, it, 0);
            else
                apply_pod(kl, it, 0);
        }
        ob_strlcpy(w->rv, rv, sizeof w->rv);
        w->need_list = 0;
        w->failures = 0;
        w->retry_ms = 0;
        kl->api_problem[0] = '\0'; /* it answers again */
    }
    pthread_mutex_unlock(&kl->mu);
    json_decref(list);
    free(body);
}

static void start_watch(kube_launcher *kl, watch *w, watch_ctx *wc)
{
    char base[600], full[800];
    snprintf(base, sizeof base, w == &kl->w[0] ? API_MPIJOBS : API_PODS, kl->ns);
    snprintf(full, sizeof full,
             "%s?labelSelector=" SELECTOR "&watch=1&allowWatchBookmarks=true&timeoutSeconds=300"
             "&resourceVersion=%s",
             base, w->rv);
    ob_err err;
    ob_err_clear(&err);
    w->h = ob__kube_stream(&kl->conn, full, &w->hl, &err);
    if (!w->h) {
        w->retry_ms = ob_wall_ms() + 2000;
        snprintf(kl->api_problem, sizeof kl->api_problem, "watching %s: %.200s", w->what, err.msg);
        return;
    }
    w->gone = 0;
    w->lb.len = 0;
    w->lb.overflow = 0;
    curl_easy_setopt(w->h, CURLOPT_WRITEFUNCTION, watch_write);
    curl_easy_setopt(w->h, CURLOPT_WRITEDATA, wc);
    curl_easy_setopt(w->h, CURLOPT_PRIVATE, w);
    /* A stream that sends nothing for long is dead (bookmarks and timeoutSeconds keep a live
     * one talking). */
    curl_easy_setopt(w->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(w->h, CURLOPT_LOW_SPEED_TIME, 330L);
    curl_multi_add_handle(kl->multi, w->h);
}

static void start_log(kube_launcher *kl, katt *a, const kpod *p)
{
    char path[1200], since[64] = "";
    if (a->log_sec > 0) {
        struct tm tm;
        time_t t = (time_t)a->log_sec;
        gmtime_r(&t, &tm);
        strftime(since, sizeof since, "&sinceTime=%Y-%m-%dT%H%%3A%M%%3A%SZ", &tm);
    }
    snprintf(path, sizeof path, API_PODS "/%s/log?container=launcher&follow=true&timestamps=true%s",
             kl->ns, p->name, since);
    a->log_f = fopen(a->log_path, "a");
    a->log_h = ob__kube_stream(&kl->conn, path, &a->log_hl, NULL);
    if (!a->log_h) {
        if (a->log_f) fclose(a->log_f);
        a->log_f = NULL;
        a->log_retry_ms = ob_wall_ms() + 2000;
        return;
    }
    a->log_lb.len = 0;
    a->log_lb.overflow = 0;
    a->log_lb.max = MAX_LOG_LINE;
    curl_easy_setopt(a->log_h, CURLOPT_WRITEFUNCTION, log_write);
    curl_easy_setopt(a->log_h, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(a->log_h, CURLOPT_PRIVATE, a);
    curl_multi_add_handle(kl->multi, a->log_h);
}

/* After a 409 on create: the MPIJob of that name is this attempt's (its labels say so) or the
 * attempt ends. Called without the mutex. */
static void resolve_conflict(kube_launcher *kl, const char *name)
{
    char path[600];
    snprintf(path, sizeof path, API_MPIJOBS "/%s", kl->ns, name);
    long status = 0;
    char *out = NULL;
    ob_status rc = api(kl, "GET", path, NULL, &status, &out, NULL);
    json_t *obj =
        rc == OB_OK && status == 200 ? json_loads(out, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(out);
    pthread_mutex_lock(&kl->mu);
    katt *a = find_att(kl, name);
    if (a && a->conflict) {
        a->conflict = 0;
        /* Not asked (gone meanwhile, or no answer): the watch will tell. */
        if (obj && apply_mpijob(kl, obj, 0) != a) {
            json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
            char owner[160];
            snprintf(owner, sizeof owner, "%.60s attempt %.10s", jstr(labels, LABEL_JOB),
                     jstr(labels, LABEL_ATTEMPT));
            clean_text(owner, sizeof owner, owner);
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
    enum { OP_CREATE, OP_TERM, OP_KILL, OP_DROP } kind;
    char name[OB_K8S_NAME_MAX + 1];
    char *body;
    char pods[8][254]; /* pods to force-delete (OP_KILL), at most 8 per round */
    size_t npods;
} op;

static void run_op(kube_launcher *kl, op *o)
{
    char path[800];
    long status = 0;
    char *out = NULL;
    ob_err err;
    ob_err_clear(&err);
    ob_status rc;
    if (o->kind == OP_CREATE) {
        snprintf(path, sizeof path, API_MPIJOBS, kl->ns);
        rc = api(kl, "POST", path, o->body, &status, &out, &err);
        pthread_mutex_lock(&kl->mu);
        katt *a = find_att(kl, o->name);
        if (a && a->phase == K_TO_CREATE) {
            if (rc == OB_OK && (status == 201 || status == 200 || status == 202)) {
                json_t *obj = json_loads(out ? out : "", JSON_REJECT_DUPLICATES, NULL);
                a->phase = K_LIVE;
                if (obj) apply_mpijob(kl, obj, 0);
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
    rc = api(kl, "DELETE", path, NULL, &status, &out, &err);
    free(out);
    int done = rc == OB_OK && (status < 300 || status == 404);
    for (size_t i = 0; i < o->npods; i++) {
        snprintf(path, sizeof path, API_PODS "/%s?gracePeriodSeconds=0", kl->ns, o->pods[i]);
        out = NULL;
        api(kl, "DELETE", path, NULL, &status, &out, NULL);
        free(out);
    }
    pthread_mutex_lock(&kl->mu);
    katt *a = find_att(kl, o->name);
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
    for (katt *a = kl->atts; a; a = a->next) {
        ob_strlcpy(o->name, a->name, sizeof o->name);
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
        const kpod *p = stuck_pod(a);
        if (!p) continue;
        int invalid = !strcmp(p->waiting, "InvalidImageName");
        if (!invalid && (kl->pending_s <= 0 || now - p->stuck_since_ms < kl->pending_s * 1000LL))
            continue;
        char text[TEXT];
        stuck_text(p, text, sizeof text);
        snprintf(a->end_reason, sizeof a->end_reason, "%.200s (for %d s)", text,
                 (int)((now - p->stuck_since_ms) / 1000));
        a->ended = 1;
        a->permanent = p->unschedulable[0] ? 0 : 1; /* the same image fails the same way */
        a->final_ms = now;
        a->drop_wanted = 1;
    }
}

static void reap_transfers(kube_launcher *kl)
{
    int left;
    CURLMsg *m;
    while ((m = curl_multi_info_read(kl->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL *h = m->easy_handle;
        CURLcode cc = m->data.result;
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        void *priv = NULL;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, &priv);
        curl_multi_remove_handle(kl->multi, h);
        pthread_mutex_lock(&kl->mu);
        int is_watch = priv == &kl->w[0] || priv == &kl->w[1];
        if (is_watch) {
            watch *w = priv;
            curl_slist_free_all(w->hl);
            w->hl = NULL;
            w->h = NULL;
            if (w->gone || status == 410) {
                w->need_list = 1;
                w->retry_ms = 0;
            } else if (cc == CURLE_OK && status == 200) {
                w->retry_ms = 0; /* the server ended the watch (timeoutSeconds): resume */
                w->failures = 0;
                kl->api_problem[0] = '\0';
            } else {
                w->failures++;
                w->need_list = 1; /* what happened meanwhile is read from a fresh list */
                w->retry_ms = ob_wall_ms() + (500LL << (w->failures < 6 ? w->failures : 6));
                char why[80];
                if (cc == CURLE_OK)
                    snprintf(why, sizeof why, "HTTP status %ld", status);
                else
                    snprintf(why, sizeof why, "%s", curl_easy_strerror(cc));
                snprintf(kl->api_problem, sizeof kl->api_problem,
                         "the Kubernetes API server cannot be watched (%s): %s", w->what, why);
            }
        } else {
            katt *a = priv;
            curl_slist_free_all(a->log_hl);
            a->log_hl = NULL;
            a->log_h = NULL;
            if (a->log_f) fclose(a->log_f);
            a->log_f = NULL;
            if (a->log_sec) save_log_mark(a);
            const kpod *lp = launcher_pod(a);
            int over = lp && (!strcmp(lp->phase, "Succeeded") || !strcmp(lp->phase, "Failed") ||
                              !strcmp(lp->phase, "Deleted"));
            if ((cc == CURLE_OK && status == 200 && over) || a->deleted || status == 404)
                a->log_done = 1;
            else
                a->log_retry_ms = ob_wall_ms() + 1000;
        }
        pthread_mutex_unlock(&kl->mu);
        curl_easy_cleanup(h);
    }
}

static void *kube_thread(void *arg)
{
    kube_launcher *kl = arg;
    watch_ctx wc[2] = {{kl, &kl->w[0]}, {kl, &kl->w[1]}};
    pthread_mutex_lock(&kl->mu);
    while (!kl->stop) {
        int64_t now = ob_wall_ms();
        op o;
        if (next_op(kl, &o, now)) {
            pthread_mutex_unlock(&kl->mu);
            run_op(kl, &o);
            free(o.body);
            pthread_mutex_lock(&kl->mu);
            continue;
        }
        for (int i = 0; i < 2; i++) {
            watch *w = &kl->w[i];
            if (w->h || now < w->retry_ms) continue;
            if (w->need_list) {
                pthread_mutex_unlock(&kl->mu);
                relist(kl, w);
                pthread_mutex_lock(&kl->mu);
                if (w->need_list) continue;
            }
            start_watch(kl, w, &wc[i]);
        }
        check_stuck(kl, now);
        katt **pp = &kl->atts;
        while (*pp) {
            katt *a = *pp;
            const kpod *lp = launcher_pod(a);
            if (!a->log_h && !a->log_done && lp && now >= a->log_retry_ms && a->log_path[0] &&
                (!strcmp(lp->phase, "Running") || !strcmp(lp->phase, "Succeeded") ||
                 !strcmp(lp->phase, "Failed")))
                start_log(kl, a, lp);
            /* Ended, and nobody has asked about it for long: forgotten. */
            int final = a->ended || a->succeeded || a->failed || a->deleted;
            if (final && !a->log_h && a->last_poll_ms && now - a->last_poll_ms > FORGET_MS) {
                *pp = a->next;
                free_att(a);
                continue;
            }
            pp = &a->next;
        }
        pthread_mutex_unlock(&kl->mu);
        int running = 0;
        curl_multi_perform(kl->multi, &running);
        reap_transfers(kl);
        curl_multi_poll(kl->multi, NULL, 0, 200, NULL);
        curl_multi_perform(kl->multi, &running);
        reap_transfers(kl);
        pthread_mutex_lock(&kl->mu);
    }
    pthread_mutex_unlock(&kl->mu);
    return NULL;
}

static void wake(kube_launcher *kl)
{
    if (kl->multi) curl_multi_wakeup(kl->multi);
}

/* ---- the launcher interface ------------------------------------------------------------------ */

static katt *new_att(const ob_launch_req *req, const char *name)
{
    katt *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    ob_strlcpy(a->name, name, sizeof a->name);
    ob_strlcpy(a->job_id, req->job_id, sizeof a->job_id);
    a->attempt = req->attempt;
    if (req->log_path) ob_strlcpy(a->log_path, req->log_path, sizeof a->log_path);
    a->log_lb.max = MAX_LOG_LINE;
    return a;
}

static ob_status kube_start(ob_launcher *l, const ob_launch_req *req, ob_launch_handle *h,
                            ob_err *err)
{
    kube_launcher *kl = (kube_launcher *)l;
    char name[OB_K8S_NAME_MAX + 1], shared[1200];
    ob_status rc = ob_k8s_attempt_name(req->job_id, req->attempt, name, sizeof name, err);
    if (rc) return rc;
    if (req->world_size < 1)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "job %s: world size %d", req->job_id,
                      req->world_size);
    if ((rc = share_spec(req, name, shared, sizeof shared, err)))
        return OB_WRAP(err, rc, "job %s: sharing its spec with the pods", req->job_id);
    json_t *job = build_mpijob(kl, req, name, shared, spec_wants_cuda(req->spec_path));
    char *body = job ? json_dumps(job, JSON_COMPACT) : NULL;
    json_decref(job);
    katt *a = body ? new_att(req, name) : NULL;
    if (!a) {
        free(body);
        return OB_ERR(err, OB_ERR_NOMEM, "the MPIJob of job %s", req->job_id);
    }
    a->body = body;
    a->phase = K_TO_CREATE;
    a->create_deadline_ms = ob_wall_ms() + 60000;
    pthread_mutex_lock(&kl->mu);
    katt *old = find_att(kl, name);
    if (old) { /* an earlier start of the same attempt that was never followed up */
        katt **pp = &kl->atts;
        while (*pp != old)
            pp = &(*pp)->next;
        *pp = old->next;
        if (old->log_h) {
            /* still streaming: keep it, renamed out of the way, for the thread to finish */
            old->name[0] = '\0';
            old->ended = 1;
            old->last_poll_ms = ob_wall_ms();
            old->next = kl->atts;
            kl->atts = old;
        } else {
            free_att(old);
        }
    }
    a->next = kl->atts;
    kl->atts = a;
    pthread_mutex_unlock(&kl->mu);
    wake(kl);
    memset(h, 0, sizeof *h);
    ob_strlcpy(h->spec_path, req->spec_path, sizeof h->spec_path);
    ob_strlcpy(h->ext_id, name, sizeof h->ext_id);
    return OB_OK;
}

static ob_status kube_poll(ob_launcher *l, const ob_launch_handle *h, ob_launch_exit *ex,
                           ob_err *err)
{
    kube_launcher *kl = (kube_launcher *)l;
    (void)err;
    memset(ex, 0, sizeof *ex);
    ex->exit_code = -1;
    int64_t now = ob_wall_ms();
    pthread_mutex_lock(&kl->mu);
    katt *a = h->ext_id[0] ? find_att(kl, h->ext_id) : NULL;
    if (!a) {
        pthread_mutex_unlock(&kl->mu);
        ex->done = 1;
        snprintf(ex->reason, sizeof ex->reason, "onebitd does not follow MPIJob '%s'", h->ext_id);
        return OB_OK;
    }
    a->last_poll_ms = now;
    int final = a->ended || a->succeeded || a->failed || a->deleted;
    /* An ended attempt waits a little for the rest of its log, which may say why. */
    if (final && !(a->log_h && now - a->final_ms < LOG_SETTLE_MS)) {
        ex->done = 1;
        const kpod *lp = launcher_pod(a);
        int lcode = lp && lp->terminated ? lp->exit_code : -1;
        char why[TEXT] = "";
        if (a->ended) {
            ob_strlcpy(ex->reason, a->end_reason, sizeof ex->reason);
            ex->permanent = a->permanent;
        } else if (a->succeeded) {
            ex->exit_code = 0;
        } else if (a->failed) {
            diagnose(a, why, sizeof why, &ex->permanent);
            ex->exit_code = lcode > 0 ? lcode : 1;
            /* What the pods say first: that is what people act on. */
            if (why[0])
                snprintf(ex->reason, sizeof ex->reason, "%.150s; MPIJob %.45s failed (%.40s)", why,
                         a->name, a->cond);
            else
                snprintf(ex->reason, sizeof ex->reason, "MPIJob %s failed (%.150s)", a->name,
                         a->cond);
        } else if (a->term_wanted || a->kill_wanted || a->drop_wanted) {
            ex->exit_code = lcode;
            if (lcode < 0) ex->term_signal = a->kill_wanted ? SIGKILL : SIGTERM;
            snprintf(ex->reason, sizeof ex->reason, "MPIJob %s deleted by onebitd", a->name);
        } else if (a->rv == 0) {
            /* Never seen: gone before this coordinator could look (an attach while the API
             * server could not be asked). A new MPIJob can resume the job. */
            snprintf(ex->reason, sizeof ex->reason, "MPIJob %s does not exist (any more)", a->name);
        } else {
            diagnose(a, why, sizeof why, &ex->permanent);
            snprintf(ex->reason, sizeof ex->reason, "MPIJob %s was deleted outside onebitd%s%.150s",
                     a->name, why[0] ? "; " : "", why);
            ex->permanent = 1;
        }
    } else if (!final) {
        const kpod *p = stuck_pod(a);
        if (kl->api_problem[0])
            ob_strlcpy(ex->reason, kl->api_problem, sizeof ex->reason);
        else if (p)
            stuck_text(p, ex->reason, sizeof ex->reason);
        else if (a->restarting[0])
            ob_strlcpy(ex->reason, a->restarting, sizeof ex->reason);
        else if (a->phase == K_TO_CREATE)
            snprintf(ex->reason, sizeof ex->reason, "creating MPIJob %s", a->name);
    }
    pthread_mutex_unlock(&kl->mu);
    return OB_OK;
}

static ob_status kube_signal(ob_launcher *l, const ob_launch_handle *h, int sig, ob_err *err)
{
    kube_launcher *kl = (kube_launcher *)l;
    (void)err;
    if (sig != SIGTERM && sig != SIGKILL) return OB_OK; /* nothing else reaches pods */
    pthread_mutex_lock(&kl->mu);
    katt *a = h->ext_id[0] ? find_att(kl, h->ext_id) : NULL;
    if (a) {
        if (a->phase == K_TO_CREATE) {
            /* Never created: nothing to stop, and nothing will be. */
            a->ended = 1;
            a->final_ms = ob_wall_ms();
            snprintf(a->end_reason, sizeof a->end_reason, "stopped before MPIJob %s was created",
                     a->name);
        }
        if (sig == SIGKILL) {
            a->kill_wanted = 1;
            a->kill_sent = 0;
        } else {
            a->term_wanted = 1;
        }
    }
    pthread_mutex_unlock(&kl->mu);
    wake(kl);
    return OB_OK;
}

static int kube_alive(ob_launcher *l, const ob_launch_handle *h)
{
    kube_launcher *kl = (kube_launcher *)l;
    pthread_mutex_lock(&kl->mu);
    katt *a = h->ext_id[0] ? find_att(kl, h->ext_id) : NULL;
    int alive = a && !a->ended && !a->succeeded && !a->failed && !a->deleted;
    pthread_mutex_unlock(&kl->mu);
    return alive;
}

static ob_status kube_attach(ob_launcher *l, ob_launch_handle *h, const ob_launch_req *req,
                             ob_err *err)
{
    kube_launcher *kl = (kube_launcher *)l;
    char name[OB_K8S_NAME_MAX + 1];
    ob_status rc = ob_k8s_attempt_name(req->job_id, req->attempt, name, sizeof name, err);
    if (rc) return OB_ERR(err, OB_ERR_NOT_FOUND, "no MPIJob can belong to job %s", req->job_id);
    if (h->ext_id[0] && strcmp(h->ext_id, name) != 0)
        return OB_ERR(err, OB_ERR_NOT_FOUND, "MPIJob %s is not attempt %d of job %s", h->ext_id,
                      req->attempt, req->job_id);
    /* By its labels: this job's attempt, made by onebitd. */
    char path[800], sel[300];
    snprintf(sel, sizeof sel, LABEL_MANAGED "=onebitd," LABEL_JOB "=%s," LABEL_ATTEMPT "=%d",
             req->job_id, req->attempt);
    char q[400] = "";
    ob__kube_query_escape(sel, q, sizeof q);
    snprintf(path, sizeof path, API_MPIJOBS "?labelSelector=%s", kl->ns, q);
    long status;
    char *body = NULL;
    ob_err aerr;
    ob_err_clear(&aerr);
    rc = api(kl, "GET", path, NULL, &status, &body, &aerr);
    json_t *list =
        rc == OB_OK && status == 200 ? json_loads(body, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(body);
    json_t *items = json_object_get(list, "items");
    if (rc == OB_OK && status == 200 && !json_is_array(items)) {
        json_decref(list);
        return OB_ERR(err, OB_ERR_CORRUPT, "the API server's MPIJob list does not parse");
    }
    json_t *found = NULL;
    size_t i;
    json_t *it;
    if (json_is_array(items)) json_array_foreach(items, i, it)
        {
            if (!strcmp(jstr(json_object_get(it, "metadata"), "name"), name)) found = it;
        }
    if (json_is_array(items) && !found) {
        json_decref(list);
        return OB_ERR(err, OB_ERR_NOT_FOUND, "no MPIJob %s labelled for job %s attempt %d", name,
                      req->job_id, req->attempt);
    }
    katt *a = new_att(req, name);
    if (!a) {
        json_decref(list);
        return OB_ERR(err, OB_ERR_NOMEM, "following MPIJob %s", name);
    }
    a->phase = K_LIVE;
    load_log_mark(a);
    pthread_mutex_lock(&kl->mu);
    if (!find_att(kl, name)) {
        a->next = kl->atts;
        kl->atts = a;
        if (found) apply_mpijob(kl, found, 0);
        /* Pods and the newest state come with the next list. */
        kl->w[0].need_list = kl->w[1].need_list = 1;
        a = NULL;
    }
    pthread_mutex_unlock(&kl->mu);
    free_att(a);
    json_decref(list);
    wake(kl);
    /* When the API server cannot be asked now, the MPIJob is followed anyway: the next list
     * says whether it is there. */
    h->pid = h->pgid = 0;
    if (req->spec_path) ob_strlcpy(h->spec_path, req->spec_path, sizeof h->spec_path);
    ob_strlcpy(h->ext_id, name, sizeof h->ext_id);
    return OB_OK;
}

static void kube_stop_stale(ob_launcher *l, const ob_launch_handle *h, const ob_launch_req *req)
{
    ob_launch_handle mine = *h;
    if (kube_attach(l, &mine, req, NULL) != OB_OK) return;
    kube_signal(l, &mine, SIGKILL, NULL);
}

static void kube_destroy(ob_launcher *l)
{
    kube_launcher *kl = (kube_launcher *)l;
    if (!kl) return;
    if (kl->started) {
        pthread_mutex_lock(&kl->mu);
        kl->stop = 1;
        pthread_mutex_unlock(&kl->mu);
        wake(kl);
        pthread_join(kl->thread, NULL);
    }
    for (int i = 0; i < 2; i++) {
        if (kl->w[i].h) {
            curl_multi_remove_handle(kl->multi, kl->w[i].h);
            curl_easy_cleanup(kl->w[i].h);
        }
        curl_slist_free_all(kl->w[i].hl);
        free(kl->w[i].lb.buf);
    }
    while (kl->atts) {
        katt *a = kl->atts;
        kl->atts = a->next;
        if (a->log_h) {
            curl_multi_remove_handle(kl->multi, a->log_h);
            curl_easy_cleanup(a->log_h);
            curl_slist_free_all(a->log_hl);
            if (a->log_sec) save_log_mark(a);
        }
        free_att(a);
    }
    if (kl->multi) curl_multi_cleanup(kl->multi);
    pthread_mutex_destroy(&kl->mu);
    ob_kube_conn_clear(&kl->conn);
    free(kl);
}

static const ob_launcher_ops kube_ops = {
    .ext_id_kind = "MPIJob",
    .start = kube_start,
    .poll = kube_poll,
    .signal = kube_signal,
    .alive = kube_alive,
    .stop_stale = kube_stop_stale,
    .attach = kube_attach,
    .destroy = kube_destroy,
};

/* Kubernetes quantities as we accept them: digits, an optional fraction and a suffix. */
static int quantity(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n < 32 && strspn(s, "0123456789.") > 0 &&
           strspn(s, "0123456789.mkKMGTPEi") == n;
}

ob_status ob_kubernetes_launcher_create(ob_launcher **out, const ob_kubernetes_launcher_config *cfg,
                                        ob_err *err)
{
    *out = NULL;
    if (!cfg->image || !cfg->image[0] || strlen(cfg->image) >= 512 ||
        strpbrk(cfg->image, " \t\r\n\"\\"))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "--k8s-image: the worker image is required");
    const char *pull = cfg->image_pull_policy ? cfg->image_pull_policy : "IfNotPresent";
    if (strcmp(pull, "IfNotPresent") && strcmp(pull, "Always") && strcmp(pull, "Never"))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "image pull policy '%.40s': expected IfNotPresent, Always or Never", pull);
    const char *labels[][2] = {{"namespace", cfg->namespace_},
                               {"checkpoint claim", cfg->checkpoint_claim},
                               {"service account", cfg->service_account}};
    for (size_t i = 0; i < 3; i++)
        if (labels[i][1] && !ob_k8s_dns_label(labels[i][1]) &&
            !(i > 0 && strlen(labels[i][1]) < 254 &&
              strspn(labels[i][1], "abcdefghijklmnopqrstuvwxyz0123456789-.") ==
                  strlen(labels[i][1])))
            return OB_ERR(err, OB_ERR_INVALID_ARG, "%s '%.80s' is not a DNS-1123 name",
                          labels[i][0], labels[i][1]);
    const char *cpu = cfg->cpu ? cfg->cpu : "1", *mem = cfg->memory ? cfg->memory : "1Gi";
    if (!quantity(cpu) || !quantity(mem))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "worker requests cpu '%.40s', memory '%.40s': not "
                      "Kubernetes quantities",
                      cpu, mem);
    if (cfg->slots_per_worker < 0 || cfg->slots_per_worker > 1024)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "slots per worker %d: expected 1 to 1024",
                      cfg->slots_per_worker);
    kube_launcher *kl = calloc(1, sizeof *kl);
    if (!kl) return OB_ERR(err, OB_ERR_NOMEM, "allocating the Kubernetes launcher");
    kl->base.ops = &kube_ops;
    pthread_mutex_init(&kl->mu, NULL);
    ob_status rc = ob_kube_conn_load(&kl->conn, cfg->kubeconfig, cfg->sa_dir, err);
    if (rc) {
        kube_destroy(&kl->base);
        return rc;
    }
    ob_strlcpy(kl->ns,
               cfg->namespace_ ? cfg->namespace_
                               : (kl->conn.namespace_[0] ? kl->conn.namespace_ : "default"),
               sizeof kl->ns);
    ob_strlcpy(kl->image, cfg->image, sizeof kl->image);
    ob_strlcpy(kl->pull, pull, sizeof kl->pull);
    if (cfg->checkpoint_claim) ob_strlcpy(kl->claim, cfg->checkpoint_claim, sizeof kl->claim);
    if (cfg->service_account) ob_strlcpy(kl->sa, cfg->service_account, sizeof kl->sa);
    ob_strlcpy(kl->cpu, cpu, sizeof kl->cpu);
    ob_strlcpy(kl->mem, mem, sizeof kl->mem);
    kl->slots = cfg->slots_per_worker > 0 ? cfg->slots_per_worker : 1;
    kl->grace_s = cfg->grace_s > 0 ? cfg->grace_s : 30;
    kl->pending_s = cfg->pending_timeout_s >= 0 ? cfg->pending_timeout_s : 300;
    kl->ttl_s = cfg->ttl_s > 0 ? cfg->ttl_s : 86400;
    kl->timeout_ms = cfg->request_timeout_ms > 0 ? cfg->request_timeout_ms : 10000;
    kl->w[0].what = "mpijobs";
    kl->w[1].what = "pods";
    for (int i = 0; i < 2; i++) {
        kl->w[i].need_list = 1;
        kl->w[i].lb.max = MAX_EVENT;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(kl->multi = curl_multi_init())) {
        kube_destroy(&kl->base);
        return OB_ERR(err, OB_ERR_NOMEM, "initialising libcurl");
    }
    int e = pthread_create(&kl->thread, NULL, kube_thread, kl);
    if (e) {
        kube_destroy(&kl->base);
        return OB_ERR(err, OB_ERR_IO, "starting the Kubernetes watch thread: %s", strerror(e));
    }
    kl->started = 1;
    *out = &kl->base;
    return OB_OK;
}
