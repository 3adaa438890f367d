/* Private to the Kubernetes launcher (onebit/kubernetes.h): the state its files share and the
 * functions they call in one another. launcher_kubernetes.c says how the launcher works as a
 * whole and holds the launcher calls; k8s_manifest.c builds the MPIJob; k8s_state.c reads what
 * the API server says into the attempts' state; k8s_watch.c lists and watches MPIJobs and pods
 * and follows pods' logs; k8s_thread.c is the thread that makes the queued requests and runs the
 * transfers. "With the mutex held" means kl->mu; no network call is made with it held. */
#ifndef ONEBIT_K8S_INTERNAL_H
#define ONEBIT_K8S_INTERNAL_H

#include "kube_api.h"
#include "onebit/base.h"
#include "onebit/kubernetes.h"

#include <jansson.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

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

/* ---- types --------------------------------------------------------------------------------- */

/* A line being gathered from a stream (a watch's events, a pod's log); max: the longest kept. */
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

typedef struct kwatch {
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
} kwatch;

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
    int no_python; /* the image has no python3 (--k8s-image-python no) */
    pthread_mutex_t mu;
    pthread_t thread;
    int started, stop;
    CURLM *multi;
    katt *atts;
    kpurge *purge; /* MPIJobs and Secrets of deleted jobs, to delete */
    size_t npurge;
    kwatch w[2];
    char api_problem[TEXT]; /* why the API server cannot be watched now; "" when it can */
} kube_launcher;

/* What a watch's write callback gets: the launcher and which of its watches. */
typedef struct kwatch_ctx {
    kube_launcher *kl;
    kwatch *w;
} kwatch_ctx;

/* ---- state (k8s_state.c) --------------------------------------------------------------------- */

/* Copies src (NULL: "") into dst[cap], control characters replaced by spaces. */
void ob__k8s_clean_text(char *dst, size_t cap, const char *src);

/* The string member key of o (borrowed from o); "" when o is no object or key no string. */
const char *ob__k8s_jstr(json_t *o, const char *key);

/* The attempt of that MPIJob name, or NULL. With the mutex held. */
katt *ob__k8s_find_att(kube_launcher *kl, const char *name);

/* Wipes and frees the attempt's report credential, if it still holds it. */
void ob__k8s_wipe_token(katt *a);

/* 1 while one of the attempt's log streams has a transfer running. */
int ob__k8s_streams_open(const katt *a);

/* Frees an attempt that is on no list, with its streams (their transfers over). Accepts NULL. */
void ob__k8s_free_att(katt *a);

/* The name of an attempt's Secret: "<MPIJob name>-report". */
void ob__k8s_secret_name(const katt *a, char *out, size_t cap);

/* A resourceVersion as a number; 0 when it is not a positive decimal. */
int64_t ob__k8s_parse_rv(const char *s);

/* Applies an MPIJob object (from a list, a watch event or a GET; borrowed). Returns its att or
 * NULL. With the mutex held. */
katt *ob__k8s_apply_mpijob(kube_launcher *kl, json_t *obj, int deleted);

/* Applies a pod object (borrowed). With the mutex held. */
void ob__k8s_apply_pod(kube_launcher *kl, json_t *obj, int deleted);

/* What the pods say about an attempt that failed, for people to act on; *permanent when a
 * restart cannot help. */
void ob__k8s_diagnose(const katt *a, char *out, size_t cap, int *permanent);

/* A pod that keeps the attempt from running, as a notice; NULL when none. */
const kpod *ob__k8s_stuck_pod(const katt *a);

/* Why pod p is stuck, into out[cap]. */
void ob__k8s_stuck_text(const kpod *p, char *out, size_t cap);

/* The attempt's launcher pod, or NULL. */
const kpod *ob__k8s_launcher_pod(const katt *a);

/* The pod of a role and index: the launcher (index -1) or a worker. */
const kpod *ob__k8s_pod_of(const katt *a, int index);

/* ---- building the MPIJob (k8s_manifest.c) ---------------------------------------------------- */

/* 1 when the spec at path asks for device: cuda (the service wrote it: canonical JSON). */
int ob__k8s_spec_wants_cuda(const char *path);

/* Copies the spec where every pod can read it: the checkpoint directory (the shared volume),
 * <ckpt>/.onebit-specs/<name>.json, written atomically; its path into out[cap]. */
ob_status ob__k8s_share_spec(const ob_launch_req *req, const char *name, char *out, size_t cap,
                             ob_err *err);

/* The MPIJob of attempt `name` (the caller owns it), running the spec at shared_spec; NULL when
 * memory runs out. */
json_t *ob__k8s_build_mpijob(const kube_launcher *kl, const ob_launch_req *req, const char *name,
                             const char *shared_spec, int cuda);

/* ob_launcher_ops.check_job: what the pods cannot run, refused at submit (onebit/kubernetes.h). */
ob_status ob__k8s_check_job(const ob_launcher *l, const ob_jobspec *spec, size_t n_files,
                            ob_err *err);

/* ---- watches and log streams (k8s_watch.c) --------------------------------------------------- */

/* Keeps the stream's newest copied line's time next to the log (its mark). */
void ob__k8s_save_mark(const kstream *st);

/* LIST of a watch's kind: replaces what is known, and gives the resourceVersion to watch from.
 * Called without the mutex. */
void ob__k8s_relist(kube_launcher *kl, kwatch *w);

/* Starts the watch w from its resourceVersion; wc (the thread's) is its write callback's. With
 * the mutex held. */
void ob__k8s_start_watch(kube_launcher *kl, kwatch *w, kwatch_ctx *wc);

/* With the mutex held: follows the log of every pod of the attempt that has started (worker
 * pods' only when worker_log_max allows). */
void ob__k8s_follow_logs(kube_launcher *kl, katt *a, int64_t now);

/* Takes the finished transfers (watches and log streams) off the multi handle and says what
 * their end means. Called without the mutex. */
void ob__k8s_reap_transfers(kube_launcher *kl);

/* ---- the thread (k8s_thread.c) --------------------------------------------------------------- */

/* One bounded request to the API server (ob__kube_request with the launcher's timeout). */
ob_status ob__k8s_api(kube_launcher *kl, const char *method, const char *path, const char *body,
                      long *status, char **out, ob_err *err);

/* The thread (arg: the launcher): queued requests, watches, log streams, until kl->stop. */
void *ob__k8s_thread(void *arg);

/* Wakes the thread out of its wait for transfers. */
void ob__k8s_wake(kube_launcher *kl);

#endif /* ONEBIT_K8S_INTERNAL_H */
