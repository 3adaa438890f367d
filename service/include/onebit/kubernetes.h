/* The Kubernetes launcher: every attempt of a job is one kubeflow.org/v2beta1 MPIJob.
 *
 * An attempt of N ranks becomes an MPIJob named onebit-<job id>-<attempt> (a DNS-1123 label)
 * with ceil(N / slots_per_worker) worker pods and one launcher pod that runs
 * `mpirun -np N onebit-worker --spec ... --job-id ... --checkpoint-dir ...`; backoffLimit 0
 * (onebitd owns restarts), launcherCreationPolicy WaitForWorkersReady, cleanPodPolicy Running,
 * the checkpoint claim mounted at the coordinator's checkpoint directory, GPU limits for
 * `device: cuda`, and labels tying it, and its pods, to the job and the attempt.
 *
 * The launcher talks to the API server over HTTPS (libcurl) with a bearer token, in the cluster
 * (the pod's service account) or from a kubeconfig. A thread of its own lists and then watches
 * (`?watch=1&resourceVersion=...`) the MPIJobs and the pods it labelled, relisting after 410
 * Gone and reconnecting with a backoff when the API server goes away or a stream falls silent,
 * and follows the launcher pod's log and each worker pod's log (pods/log) into the job's
 * worker.log, the worker pods' lines prefixed "[worker I] " (I: the replica index). The
 * attempt's report credential goes into a Secret of its own, onebit-<job id>-<attempt>-report,
 * owned by the MPIJob; the launcher container reads it through a secretKeyRef. The launcher calls
 * the supervisor makes (with the service lock held) only read that state or queue work for the
 * thread: creating an MPIJob, deleting one gracefully (SIGTERM: the pods get their termination
 * grace period, the ranks checkpoint) or at once (SIGKILL). A restarted coordinator re-attaches to
 * its MPIJobs by their labels (ob_launch_handle.ext_id holds the MPIJob's name). */
#ifndef ONEBIT_KUBERNETES_H
#define ONEBIT_KUBERNETES_H

#include "onebit/launcher.h"
#include "onebit/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest MPIJob name: the operator names pods and host names "<name>-worker-<i>", which must
 * stay a DNS label (63). */
#define OB_K8S_NAME_MAX 45

/* Where and how to reach the API server. */
typedef struct ob_kube_conn {
    char server[512];   /* "https://host:port", no trailing slash */
    char ca_file[1024]; /* PEM file of the CA, or "" */
    char *ca_pem;       /* PEM text of the CA (certificate-authority-data), owned, or NULL */
    size_t ca_pem_len;
    char token[8192];      /* bearer token (read at load), or "" */
    char token_file[1024]; /* re-read before every connection when set (rotated tokens) */
    char namespace_[254];  /* the context's or the pod's namespace, "" when neither says */
} ob_kube_conn;

/* Loads a connection: from the kubeconfig at path when path is non-NULL and non-empty; else in
 * the cluster (KUBERNETES_SERVICE_HOST/PORT, the service account's token, CA and namespace under
 * /var/run/secrets/kubernetes.io/serviceaccount, or sa_dir when non-NULL, for tests). Of a
 * kubeconfig only this subset is read: current-context; the context's cluster, user and
 * namespace; the cluster's server, certificate-authority and certificate-authority-data; the
 * user's token and tokenFile. Client certificates, exec and auth-provider plugins, basic auth
 * and insecure-skip-tls-verify are refused with OB_ERR_UNSUPPORTED naming the field. Release
 * with ob_kube_conn_clear. */
ob_status ob_kube_conn_load(ob_kube_conn *c, const char *kubeconfig, const char *sa_dir,
                            ob_err *err);

/* Frees what a connection owns and zeroes it. Accepts NULL. */
void ob_kube_conn_clear(ob_kube_conn *c);

/* 1 when s is a DNS-1123 label: 1 to 63 of [a-z0-9-], starting and ending with [a-z0-9]. */
int ob_k8s_dns_label(const char *s);

/* The MPIJob name of an attempt ("onebit-<job_id>-<attempt>") into out[cap]: the job id must be
 * a DNS-1123 label itself, and attempt >= 1. OB_ERR_INVALID_ARG
 * when it would not be a DNS-1123 label of at most OB_K8S_NAME_MAX characters. */
ob_status ob_k8s_attempt_name(const char *job_id, int attempt, char *out, size_t cap, ob_err *err);

/* Configuration of the Kubernetes launcher. Strings are copied; NULL means the default. */
typedef struct ob_kubernetes_launcher_config {
    const char *kubeconfig;        /* NULL or "": in-cluster */
    const char *sa_dir;            /* in-cluster credentials directory (tests) [the standard] */
    const char *namespace_;        /* [the kubeconfig's or the pod's, else "default"] */
    const char *image;             /* the worker image (required) */
    const char *image_pull_policy; /* [IfNotPresent] */
    const char *checkpoint_claim;  /* RWX PersistentVolumeClaim mounted at the checkpoint dir;
                                      NULL: none (the checkpoint dir must exist in the image) */
    const char *service_account;   /* of the MPIJob's pods; NULL: the namespace's default */
    const char *cpu;               /* each worker's CPU request ["1"] */
    const char *memory;            /* each worker's memory request ["1Gi"] */
    int slots_per_worker;          /* ranks (and, for cuda, GPUs) per worker pod [1] */
    int grace_s;                   /* pods' terminationGracePeriodSeconds [30] */
    int pending_timeout_s;         /* an attempt whose pods cannot be scheduled or cannot pull
                                      their image this long ends [300]; 0: wait forever */
    int ttl_s;                     /* runPolicy.ttlSecondsAfterFinished [86400] */
    int request_timeout_ms;        /* one API request, not a watch [10000] */
    int watch_idle_s;              /* a watch or log stream that sends nothing for this long is
                                      taken for dead: dropped, relisted and made again [90];
                                      watches ask the server to end them after 5/6 of it
                                      (timeoutSeconds) and take bookmarks, so a live one talks */
    long long worker_log_max;      /* bytes copied from each worker pod's log per attempt
                                      [8 MiB]; the launcher pod's log is copied whole */
    int image_without_python;      /* 1: the image has no python3 (--k8s-image-python no), so
                                      program jobs run by a Python interpreter are refused at
                                      submit; 0: it has, as docker/Dockerfile's worker does [0] */
} ob_kubernetes_launcher_config;

/* What the launcher refuses at submit (ob_launcher_ops.check_job): a program job with uploaded
 * files (the pods mount only the checkpoint volume, not onebitd's state directory where the files
 * are kept), and, with image_without_python, a program job whose program.interpreter is a Python
 * (its base name starts with "python"). Other program jobs run like built-in ones: the launcher
 * pod's mpirun starts onebit-worker, which execs the program on every rank; its entrypoint and
 * workdir must exist in the worker image or on the checkpoint volume. */

/* Creates the Kubernetes launcher and starts its thread. *out is owned by the caller
 * (ob_launcher_destroy, which stops the thread and leaves the MPIJobs running). */
ob_status ob_kubernetes_launcher_create(ob_launcher **out, const ob_kubernetes_launcher_config *cfg,
                                        ob_err *err);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_KUBERNETES_H */
