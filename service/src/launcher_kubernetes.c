/* The Kubernetes launcher (onebit/kubernetes.h): every attempt one kubeflow.org/v2beta1 MPIJob.
 *
 * Two halves meet at one mutex (kl->mu, never held across a network call):
 * - the launcher calls, made by the supervisor with the service lock held: start() builds the
 *   MPIJob and queues its creation, signal() queues a graceful or an immediate delete, poll()
 *   and alive() read the state the thread keeps; attach() asks the API server once (a bounded
 *   request) for the attempt's MPIJob by its labels;
 * - the thread: creates and deletes what was queued, lists and then watches MPIJobs and pods
 *   labelled app.kubernetes.io/managed-by=onebitd (relisting after 410 Gone, reconnecting with
 *   a backoff when a stream breaks or stays silent past the idle limit), follows the launcher
 *   pod's log and each worker pod's log into the job's worker.log, makes and deletes each
 *   attempt's report-credential Secret, and ends attempts whose pods stay unschedulable or
 *   cannot pull their image.
 * The report credential never travels in the MPIJob: the MPIJob is created first, then the
 * Secret onebit-<job>-<attempt>-report with an ownerReference to the MPIJob's uid (so that
 * Kubernetes deletes it with the MPIJob even when onebitd is not there to), which the worker
 * pods mount read-only (rank 0 reads it from the file ONEBIT_REPORT_TOKEN_FILE names; mpirun
 * forwards only that path, so the credential is in no process's environment). That order
 * needs no "patch" on Secrets (the other order would: the owner's uid is only known once the
 * MPIJob exists); a worker pod whose Secret does not exist yet waits in ContainerCreating (the
 * kubelet retries the mount), and the launcher pod is only created once the workers are ready
 * (WaitForWorkersReady).
 * Everything the API server sends is parsed with jansson under a size limit, with its types
 * checked; text taken from it is bounded and stripped of control characters. */
#define _GNU_SOURCE /* timegm */
#include "kube_api.h"
#include "onebit/base.h"
#include "onebit/kubernetes.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#define API_SECRETS "/api/v1/namespaces/%s/secrets"
#define LABEL_MANAGED "app.kubernetes.io/managed-by"
#define LABEL_JOB "onebit.dev/job-id"
#define LABEL_ATTEMPT "onebit.dev/attempt"
#define LABEL_MPIJOB "onebit.dev/mpijob"
#define LABEL_ROLE "onebit.dev/role"
/* In a query: "=" needs no escaping in a parameter's value. */
#define SELECTOR LABEL_MANAGED "=onebitd"
#define MAX_EVENT (4u << 20) /* one watch event */
#define MAX_LOG_LINE 65536
#define MAX_PODS 4096  /* pods tracked per attempt */
#define MAX_STREAMS 65 /* log streams per attempt: the launcher pod and 64 worker pods */
#define SECRET_SUFFIX "-report"
/* Where the worker pods mount the attempt's Secret. */
#define REPORT_TOKEN_DIR "/var/run/onebit/report"
#define SECRET_NAME_MAX (OB_K8S_NAME_MAX + sizeof SECRET_SUFFIX)
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
    int index; /* a worker's replica index; -1 for the launcher or when unknown */
    int64_t stuck_since_ms;
} kpod;

struct katt;

/* One pod's log followed into the job's log (pods/log?follow=true&timestamps=true). The
 * newest copied line's time is kept next to the log (a mark) so that a reconnect, or a
 * restarted coordinator, does not copy a line twice. */
typedef struct kstream {
    struct katt *att;
    int index; /* -1: the launcher pod; else the worker's replica index */
    char pod[254];
    CURL *h;
    struct curl_slist *hl;
    int fd;
    linebuf lb;
    int done, truncated, mark_loaded;
    int64_t retry_ms, sec, nsec;
    long long copied, max; /* bytes written; the limit, 0: none */
    struct kstream *next;
} kstream;

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
    kstream *streams; /* log streams, at most MAX_STREAMS */
    size_t nstreams;
    /* The report-credential Secret. */
    char uid[128];      /* the MPIJob's metadata.uid, "" until seen */
    char *report_token; /* owned, until the Secret holds it (then wiped and freed) */
    int secret_want;    /* to be created once the MPIJob's uid is known */
    int secret_made;    /* created, or may exist (attached): deleted when the attempt ends */
    int secret_gone;    /* deleted, or given up on */
    int secret_tries;
    int64_t secret_next_ms, secret_deadline_ms;
    struct katt *next;
} katt;

typedef struct watch {
    const char *what; /* "mpijobs", "pods" */
    char rv[64];
    int need_list;
    CURL *h;
    struct curl_slist *hl;
    linebuf lb;
    int gone;   /* a 410 arrived on the stream */
    int silent; /* times it was dropped for saying nothing past the idle limit */
    int64_t retry_ms;
    int failures;
} watch;

typedef struct kpurge {
    char name[OB_K8S_NAME_MAX + 1];
    struct kpurge *next;
} kpurge;

typedef struct kube_launcher {
    ob_launcher base;
    ob_kube_conn conn;
    char ns[254], image[512], pull[32], claim[254], sa[254], cpu[32], mem[32];
    int slots, grace_s, pending_s, ttl_s, timeout_ms, idle_s;
    long long worker_log_max;
    pthread_mutex_t mu;
    pthread_t thread;
    int started, stop;
    CURLM *multi;
    katt *atts;
    kpurge *purge; /* MPIJobs and Secrets of deleted jobs, to delete */
    size_t npurge;
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

static void wipe_token(katt *a)
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

static int streams_open(const katt *a)
{
    for (const kstream *st = a->streams; st; st = st->next)
        if (st->h) return 1;
    return 0;
}

static void free_att(katt *a)
{
    if (!a) return;
    free(a->body);
    free(a->pods);
    while (a->streams) {
        kstream *st = a->streams;
        a->streams = st->next;
        free_stream(st);
    }
    wipe_token(a);
    free(a);
}

/* The name of an attempt's Secret: "<MPIJob name>-report". */
static void secret_name(const katt *a, char *out, size_t cap)
{
    snprintf(out, cap, "%s" SECRET_SUFFIX, a->name);
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

/* One replica's pod template; report_secret (NULL: none) is the attempt's Secret, mounted
 * read-only at REPORT_TOKEN_DIR (the workers: rank 0 reads its credential there). */
static json_t *pod_template(const kube_launcher *kl, const ob_launch_req *req, const char *name,
                            const char *role, json_t *container, const char *report_secret)
{
    json_t *spec = json_pack("{s:i, s:{s:b, s:i, s:i}, s:[o]}", "terminationGracePeriodSeconds",
                             kl->grace_s, "securityContext", "runAsNonRoot", 1, "runAsUser", 1000,
                             "fsGroup", 1000, "containers", container);
    if (!spec) return NULL;
    if (kl->sa[0]) json_object_set_new(spec, "serviceAccountName", json_string(kl->sa));
    json_t *volumes = json_array(), *mounts = json_array();
    if (kl->claim[0]) {
        json_array_append_new(volumes, json_pack("{s:s, s:{s:s}}", "name", "checkpoints",
                                                 "persistentVolumeClaim", "claimName", kl->claim));
        json_array_append_new(mounts, json_pack("{s:s, s:s}", "name", "checkpoints", "mountPath",
                                                req->checkpoint_dir));
    }
    if (report_secret) {
        /* 0440 with the pod's fsGroup: the onebit user reads it, nobody else. */
        json_array_append_new(volumes, json_pack("{s:s, s:{s:s, s:i, s:[{s:s, s:s}]}}", "name",
                                                 "report-credential", "secret", "secretName",
                                                 report_secret, "defaultMode", 0440, "items", "key",
                                                 "token", "path", "token"));
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "report-credential",
                                                "mountPath", REPORT_TOKEN_DIR, "readOnly", 1));
    }
    if (json_array_size(volumes)) {
        json_object_set(spec, "volumes", volumes);
        json_object_set(container, "volumeMounts", mounts);
    }
    json_decref(volumes);
    json_decref(mounts);
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
    /* --tag-output: every rank's line names its rank, as with the local launcher
     * (onebitctl logs --rank). */
    json_t *args =
        json_pack("[s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s]", "-np", np, "--bind-to", "none",
                  "--tag-output", "-x", "ONEBIT_REPORT_TOKEN_FILE", "-x", "OPENBLAS_NUM_THREADS",
                  "onebit-worker", "--spec", shared_spec, "--format", "json", "--job-id",
                  req->job_id, "--checkpoint-dir", req->checkpoint_dir);
    if (!args) return NULL;
    if (req->resume) json_array_append_new(args, json_string("--resume"));
    if (req->report_addr && req->report_addr[0]) {
        json_array_append_new(args, json_string("--report"));
        json_array_append_new(args, json_string(req->report_addr));
    }
    json_t *env = json_pack("[{s:s, s:s}]", "name", "OPENBLAS_NUM_THREADS", "value", "1");
    /* The credential itself is in the attempt's Secret, never in the MPIJob nor in any
     * process's environment: the worker pods mount the Secret, and mpirun forwards only the
     * file's path to the ranks. */
    char secret[SECRET_NAME_MAX];
    const char *report_secret = NULL;
    if (req->report_token && req->report_token[0]) {
        snprintf(secret, sizeof secret, "%s" SECRET_SUFFIX, name);
        report_secret = secret;
        json_array_append_new(env, json_pack("{s:s, s:s}", "name", "ONEBIT_REPORT_TOKEN_FILE",
                                             "value", REPORT_TOKEN_DIR "/token"));
    }
    json_t *launcher =
        json_pack("{s:s, s:s, s:s, s:[s], s:o, s:o, s:{s:{s:s, s:s}}}", "name", "launcher", "image",
                  kl->image, "imagePullPolicy", kl->pull, "command", "mpirun", "args", args, "env",
                  env, "resources", "requests", "cpu", "100m", "memory", "128Mi");
    json_t *res = json_pack("{s:{s:s, s:s}}", "requests", "cpu", kl->cpu, "memory", kl->mem);
    if (cuda && res) json_object_set_new(res, "limits", json_pack("{s:s}", "nvidia.com/gpu", gpus));
    json_t *worker = json_pack("{s:s, s:s, s:s, s:o, s:[{s:s, s:i}]}", "name", "worker", "image",
                               kl->image, "imagePullPolicy", kl->pull, "resources", res, "ports",
                               "name", "ssh", "containerPort", 2222);
    json_t *lt = launcher ? pod_template(kl, req, name, "launcher", launcher, NULL) : NULL;
    json_t *wt = worker ? pod_template(kl, req, name, "worker", worker, report_secret) : NULL;
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
    const char *uid = jstr(meta, "uid");
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
    /* The operator's replica-index label, else the "-worker-<i>" its pod names end with. */
    const char *idx = jstr(labels, "training.kubeflow.org/replica-index");
    const char *tail = strstr(name, "-worker-");
    if (!idx[0] && tail) idx = tail + 8;
    size_t idigits = strspn(idx, "0123456789");
    p->index = !p->launcher && idigits > 0 && idigits < 5 && !idx[idigits] ? atoi(idx) : -1;
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

/* The mark file of a stream: next to the job's log, one per pod role and replica index. */
static void mark_path(const kstream *st, char *out, size_t cap)
{
    if (st->index < 0)
        snprintf(out, cap, "%s.k8s-mark", st->att->log_path);
    else
        snprintf(out, cap, "%s.k8s-mark.worker-%d", st->att->log_path, st->index);
}

/* The newest copied line's time, kept next to the log so that a restarted coordinator does not
 * copy it twice. */
static void save_mark(const kstream *st)
{
    char path[1200], tmp[1210];
    mark_path(st, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%" PRId64 " %" PRId64 "\n", st->sec, st->nsec);
    if (fclose(f) == 0) rename(tmp, path);
}

static void load_mark(kstream *st)
{
    char path[1200];
    mark_path(st, path, sizeof path);
    st->mark_loaded = 1;
    FILE *f = fopen(path, "r");
    if (!f) return;
    long long s = 0, ns = 0;
    if (fscanf(f, "%lld %lld", &s, &ns) == 2 && s > 0 && ns >= 0 && ns < 1000000000) {
        st->sec = s;
        st->nsec = ns;
    }
    fclose(f);
}

/* Appends one line to the job's log in one write (O_APPEND: the streams of an attempt share
 * the file, and a line is never split by another's). */
static void append_line(kstream *st, const char *text, size_t len)
{
    char prefix[32] = "";
    if (st->index >= 0) snprintf(prefix, sizeof prefix, "[worker %d] ", st->index);
    size_t plen = strlen(prefix), n = plen + len + 1;
    char *buf = malloc(n);
    if (!buf || st->fd < 0) {
        free(buf);
        return;
    }
    memcpy(buf, prefix, plen);
    memcpy(buf + plen, text, len);
    buf[n - 1] = '\n';
    for (size_t off = 0; off < n;) {
        ssize_t w = write(st->fd, buf + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    st->copied += (long long)n;
    free(buf);
}

/* One log line "TIMESTAMP text": copied to the job's log unless an earlier stream did, and
 * while the stream's limit allows. */
static void on_log_line(void *user, char *line, size_t len)
{
    kstream *st = user;
    char *sp = memchr(line, ' ', len);
    int64_t sec, nsec;
    if (!sp || st->truncated) return;
    *sp = '\0';
    if (!parse_ts(line, &sec, &nsec)) return;
    if (sec < st->sec || (sec == st->sec && nsec <= st->nsec)) return;
    st->sec = sec;
    st->nsec = nsec;
    size_t tlen = len - (size_t)(sp + 1 - line);
    if (st->max > 0 && st->copied + (long long)tlen + 16 > st->max) {
        char note[400];
        int k = snprintf(note, sizeof note,
                         "onebitd: pod %.200s wrote more than %lld bytes of log; the rest is not "
                         "copied (kubectl logs %.200s)",
                         st->pod, st->max, st->pod);
        append_line(st, note, (size_t)k < sizeof note ? (size_t)k : sizeof note - 1);
        st->truncated = 1;
        return;
    }
    append_line(st, sp + 1, tlen);
}

static size_t log_write(char *p, size_t size, size_t n, void *user)
{
    kstream *st = user;
    feed_lines(&st->lb, p, size * n, on_log_line, st);
    return st->truncated ? 0 : size * n; /* over its limit: the stream ends */
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

/* A stream that sends nothing for idle_s is dead (a watch's bookmarks and timeoutSeconds keep a
 * live one talking): curl ends it with CURLE_OPERATION_TIMEDOUT. TCP keepalive finds a peer
 * that is gone sooner where the network says so. */
static void idle_limits(const kube_launcher *kl, CURL *h)
{
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)kl->idle_s);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
}

static void start_watch(kube_launcher *kl, watch *w, watch_ctx *wc)
{
    char base[600], full[800];
    snprintf(base, sizeof base, w == &kl->w[0] ? API_MPIJOBS : API_PODS, kl->ns);
    /* The server ends the watch before the idle limit: a live stream is never taken for dead. */
    int server_s = kl->idle_s - kl->idle_s / 6;
    snprintf(full, sizeof full,
             "%s?labelSelector=" SELECTOR "&watch=1&allowWatchBookmarks=true&timeoutSeconds=%d"
             "&resourceVersion=%s",
             base, server_s > 0 ? server_s : 1, w->rv);
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
    idle_limits(kl, w->h);
    curl_multi_add_handle(kl->multi, w->h);
}

/* The stream of a pod role and index, made when missing (NULL when the attempt has its most). */
static kstream *stream_for(kube_launcher *kl, katt *a, const kpod *p)
{
    for (kstream *st = a->streams; st; st = st->next)
        if (st->index == p->index) return st;
    if (a->nstreams >= MAX_STREAMS) return NULL;
    kstream *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->att = a;
    st->index = p->index;
    st->fd = -1;
    st->max = p->index < 0 ? 0 : kl->worker_log_max;
    st->next = a->streams;
    a->streams = st;
    a->nstreams++;
    return st;
}

/* Follows pod p's log from the stream's mark. With the mutex held. */
static void start_stream(kube_launcher *kl, kstream *st, const kpod *p)
{
    katt *a = st->att;
    char path[1200], since[64] = "";
    if (!st->mark_loaded) load_mark(st);
    if (st->sec > 0) {
        struct tm tm;
        time_t t = (time_t)st->sec;
        gmtime_r(&t, &tm);
        strftime(since, sizeof since, "&sinceTime=%Y-%m-%dT%H%%3A%M%%3A%SZ", &tm);
    }
    snprintf(path, sizeof path, API_PODS "/%s/log?container=%s&follow=true&timestamps=true%s",
             kl->ns, p->name, p->launcher ? "launcher" : "worker", since);
    ob_strlcpy(st->pod, p->name, sizeof st->pod);
    st->fd = open(a->log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    st->h = ob__kube_stream(&kl->conn, path, &st->hl, NULL);
    if (!st->h) {
        if (st->fd >= 0) close(st->fd);
        st->fd = -1;
        st->retry_ms = ob_wall_ms() + 2000;
        return;
    }
    st->lb.len = 0;
    st->lb.overflow = 0;
    st->lb.max = MAX_LOG_LINE;
    curl_easy_setopt(st->h, CURLOPT_WRITEFUNCTION, log_write);
    curl_easy_setopt(st->h, CURLOPT_WRITEDATA, st);
    curl_easy_setopt(st->h, CURLOPT_PRIVATE, st);
    idle_limits(kl, st->h);
    curl_multi_add_handle(kl->multi, st->h);
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
    secret_name(a, sname, sizeof sname);
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
    ob_status rc = api(kl, "GET", path, NULL, &status, &out, NULL);
    json_t *obj =
        rc == OB_OK && status == 200 ? json_loads(out, JSON_REJECT_DUPLICATES, NULL) : NULL;
    wipe_free(out);
    if (!obj) return SEC_RETRY; /* gone meanwhile, or no answer: try again */
    json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    char attempt[16];
    snprintf(attempt, sizeof attempt, "%d", o->attempt);
    int ours = !strcmp(jstr(labels, LABEL_MANAGED), "onebitd") &&
               !strcmp(jstr(labels, LABEL_JOB), o->job_id) &&
               !strcmp(jstr(labels, LABEL_ATTEMPT), attempt);
    int same = ours && !strcmp(jstr(json_object_get(obj, "data"), "token"), o->token);
    json_decref(obj);
    if (!ours) return SEC_FOREIGN;
    if (same) return SEC_MADE;
    out = NULL;
    api(kl, "DELETE", path, NULL, &status, &out, NULL);
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
    ob_status rc = api(kl, "POST", path, o->body, &status, &out, &err);
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
    katt *a = find_att(kl, o->name);
    if (a && a->secret_want) {
        if (res == SEC_MADE) {
            a->secret_want = 0;
            a->secret_made = 1;
            wipe_token(a);
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
            wipe_token(a);
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
    ob_status rc = api(kl, "DELETE", path, NULL, &status, &out, NULL);
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
        katt *a = find_att(kl, o->name);
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
        api(kl, "DELETE", path, NULL, &status, &out, NULL);
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
            wipe_token(a);
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

/* The pod of a role and index: the launcher (index -1) or a worker. */
static const kpod *pod_of(const katt *a, int index)
{
    for (size_t i = 0; i < a->npods; i++)
        if (index < 0 ? a->pods[i].launcher : a->pods[i].index == index) return &a->pods[i];
    return NULL;
}

/* With the mutex held: follows the log of every pod of the attempt that has started (worker
 * pods' only when worker_log_max allows). */
static void follow_logs(kube_launcher *kl, katt *a, int64_t now)
{
    if (!a->log_path[0]) return;
    for (size_t i = 0; i < a->npods; i++) {
        const kpod *p = &a->pods[i];
        if (!p->launcher && (p->index < 0 || kl->worker_log_max <= 0)) continue;
        if (strcmp(p->phase, "Running") && strcmp(p->phase, "Succeeded") &&
            strcmp(p->phase, "Failed"))
            continue;
        kstream *st = stream_for(kl, a, p);
        if (st && !st->h && !st->done && now >= st->retry_ms) start_stream(kl, st, p);
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
            } else if (cc == CURLE_OPERATION_TIMEDOUT && status == 200) {
                /* Silent past the idle limit: taken for dead. What happened meanwhile is read
                 * from a fresh list, at once. */
                w->need_list = 1;
                w->retry_ms = 0;
                w->silent++;
            } else {
                w->failures++;
                w->need_list = 1; /* what happened meanwhile is read from a fresh list */
                w->retry_ms = ob_wall_ms() + (500LL << (w->failures < 6 ? w->failures : 6));
                char why[80];
                if (cc == CURLE_OK)
                    snprintf(why, sizeof why, "HTTP status %ld", status);
                else if (cc == CURLE_OPERATION_TIMEDOUT)
                    snprintf(why, sizeof why, "nothing for %d s", kl->idle_s);
                else
                    snprintf(why, sizeof why, "%s", curl_easy_strerror(cc));
                snprintf(kl->api_problem, sizeof kl->api_problem,
                         "the Kubernetes API server cannot be watched (%s): %s", w->what, why);
            }
        } else {
            kstream *st = priv;
            katt *a = st->att;
            curl_slist_free_all(st->hl);
            st->hl = NULL;
            st->h = NULL;
            if (st->fd >= 0) close(st->fd);
            st->fd = -1;
            if (st->sec) save_mark(st);
            const kpod *p = pod_of(a, st->index);
            int over = !p || !strcmp(p->phase, "Succeeded") || !strcmp(p->phase, "Failed") ||
                       !strcmp(p->phase, "Deleted");
            if ((cc == CURLE_OK && status == 200 && over) || a->deleted || status == 404 ||
                st->truncated)
                st->done = 1;
            else
                st->retry_ms = ob_wall_ms() + 1000;
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
            wipe_free(o.body);
            wipe_free(o.token);
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
            follow_logs(kl, a, now);
            /* Ended, and nobody has asked about it for long: forgotten. */
            int final = a->ended || a->succeeded || a->failed || a->deleted;
            if (final && !streams_open(a) && (!a->secret_made || a->secret_gone) &&
                a->last_poll_ms && now - a->last_poll_ms > FORGET_MS) {
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
    if (req->report_token && req->report_token[0]) {
        a->report_token = strdup(req->report_token);
        if (!a->report_token) {
            free_att(a);
            return OB_ERR(err, OB_ERR_NOMEM, "the MPIJob of job %s", req->job_id);
        }
        a->secret_want = 1;
    }
    a->create_deadline_ms = ob_wall_ms() + 60000;
    pthread_mutex_lock(&kl->mu);
    katt *old = find_att(kl, name);
    if (old) { /* an earlier start of the same attempt that was never followed up */
        katt **pp = &kl->atts;
        while (*pp != old)
            pp = &(*pp)->next;
        *pp = old->next;
        if (streams_open(old)) {
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
    if (final && !(streams_open(a) && now - a->final_ms < LOG_SETTLE_MS)) {
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
    a->secret_made = 1; /* it may exist: deleted when the attempt ends (404 when not) */
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

/* A deleted job: its spec copies go (<ckpt>/.onebit-specs/onebit-<job>-<attempt>.json, and a
 * .tmp a crash left), and the deletion of its attempts' MPIJobs and Secrets is queued (the ended
 * ones stay until ttlSecondsAfterFinished otherwise; 404 for those already gone). */
static void kube_forget(ob_launcher *l, const ob_launch_req *req)
{
    kube_launcher *kl = (kube_launcher *)l;
    char dir[1100], prefix[128], path[1400];
    if (!ob_k8s_dns_label(req->job_id)) return;
    snprintf(dir, sizeof dir, "%s/.onebit-specs", req->checkpoint_dir);
    int plen = snprintf(prefix, sizeof prefix, "onebit-%s-", req->job_id);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, prefix, (size_t)plen) != 0) continue;
        size_t digits = strspn(n + plen, "0123456789");
        const char *rest = n + plen + digits;
        /* Only this job's: "onebit-job-1-2-3.json" is job-1-2's, not job-1's. */
        if (digits == 0 || (strcmp(rest, ".json") && strcmp(rest, ".json.tmp"))) continue;
        snprintf(path, sizeof path, "%s/%s", dir, n);
        unlink(path);
    }
    if (d) closedir(d);
    pthread_mutex_lock(&kl->mu);
    for (int k = 1; k <= req->attempt && kl->npurge < 4096; k++) {
        kpurge *pg = calloc(1, sizeof *pg);
        if (!pg || ob_k8s_attempt_name(req->job_id, k, pg->name, sizeof pg->name, NULL)) {
            free(pg);
            break;
        }
        pg->next = kl->purge;
        kl->purge = pg;
        kl->npurge++;
    }
    pthread_mutex_unlock(&kl->mu);
    wake(kl);
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
        for (kstream *st = a->streams; st; st = st->next) {
            if (!st->h) continue;
            curl_multi_remove_handle(kl->multi, st->h);
            curl_easy_cleanup(st->h);
            curl_slist_free_all(st->hl);
            st->h = NULL;
            if (st->sec) save_mark(st);
        }
        free_att(a);
    }
    while (kl->purge) {
        kpurge *pg = kl->purge;
        kl->purge = pg->next;
        free(pg);
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
    .forget = kube_forget,
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
    kl->idle_s = cfg->watch_idle_s > 0 ? cfg->watch_idle_s : 90;
    kl->worker_log_max = cfg->worker_log_max > 0 ? cfg->worker_log_max : 8LL << 20;
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
