/* onebitd: the onebit coordinator. Serves JobService/WorkerService/Health over gRPC and the same
 * operations over REST, keeps jobs in a SQLite store under the state directory, launches their
 * workers (mpirun on this machine, mpirun across --hosts, or Slurm batch jobs: --launcher) and
 * supervises them. Stops cleanly on SIGTERM or SIGINT.
 *
 *   onebitd [--grpc HOST:PORT] [--rest HOST:PORT] [--state-dir DIR] [--slots N] ...
 *   onebitd --tls-cert server.pem --tls-key server.key [--tls-client-ca ca.pem] ...
 *   onebitd --launcher hosts --hosts node1:4,node2:4 [--ssh-agent CMD] ...
 *   onebitd --launcher slurm [--slurm-partition P] [--slurm-arg --time=4:00:00] ...
 *   onebitd --launcher kubernetes --k8s-image IMAGE [--kubeconfig FILE] [--k8s-namespace NS] ...
 *
 * The command line is read in options.c, from one option table (onebitd --help, onebitd(8)).
 * Many options also read an environment variable (flags win). Exit status: 0
 * after a clean shutdown, 1 when the service cannot start, 2 for a bad command line. */
#include "onebit/kubernetes.h"
#include "onebit/launcher.h"
#include "onebit/servers.h"
#include "onebit/service.h"
#include "onebit/token.h"
#include "onebitd.h"

#include <sys/stat.h>
#include <sys/utsname.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The admin token: from --token-file, else ONEBIT_TOKEN, else (unless --insecure-no-auth) the
 * state directory's token file, made at the first start. Returns 0, or 2 with a message. */
static int load_token(const opts *o, char *tok, size_t cap)
{
    tok[0] = '\0';
    ob_err err;
    ob_err_clear(&err);
    if (o->token_file) {
        if (ob_token_read(o->token_file, tok, cap, &err) == OB_OK) return 0;
        fprintf(stderr, "onebitd: --token-file: %s\n", err.msg);
        return 2;
    }
    const char *e = getenv("ONEBIT_TOKEN");
    if (e && e[0]) {
        snprintf(tok, cap, "%s", e);
        return 0;
    }
    if (o->insecure_no_auth) return 0;
    /* The service has made the state directory, and holds its lock: no other onebitd makes a
     * token there at the same time. */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/token", o->state_dir);
    int created = 0;
    if (ob_token_ensure(path, tok, cap, &created, &err) != OB_OK) {
        fprintf(stderr, "onebitd: %s\n", err.msg);
        return 2;
    }
    fprintf(stderr,
            "onebitd: %s the API token: %s (mode 0600; onebitctl finds it with "
            "ONEBIT_STATE_DIR=%s)\n",
            created ? "made" : "using", path, o->state_dir);
    return 0;
}

/* One line per change of a job's state on stderr, with a UTC time stamp. */
static void log_state(void *user, const char *job_id, const char *text)
{
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(stderr, "%s onebitd: %s %s\n", when, job_id, text);
}

/* 1 when the running kernel's RLIMIT_DATA counts private writable mappings (Linux 4.7 on),
 * not only the brk heap that malloc leaves for mmap above 128 KiB. */
static int data_limit_counts_mmap(void)
{
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2) return 0;
    return major > 4 || (major == 4 && minor >= 7);
}

/* A build instrumented with AddressSanitizer or ThreadSanitizer (ONEBIT_SANITIZE): its
 * workers, of the same build, reserve terabytes of shadow memory at start, which any
 * RLIMIT_DATA refuses (they abort before main). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define OB_SANITIZER_BUILD 1
#else
#define OB_SANITIZER_BUILD 0
#endif

/* The worker memory limit the service applies (ob_service_config.worker_memory_limit), with a
 * line on stderr saying what it is, or why none is applied. */
static int64_t worker_memory_setting(const opts *o)
{
    int64_t v = o->worker_memory_limit;
    if (OB_SANITIZER_BUILD && v != 0) {
        fprintf(stderr, "onebitd: notice: a sanitizer build: its workers reserve terabytes of "
                        "shadow memory, which a memory limit would refuse: no worker memory "
                        "limit is applied\n");
        return 0;
    }
    if (strcmp(o->launcher, "local") != 0 && strcmp(o->launcher, "hosts") != 0) {
        if (o->worker_memory_given && v != 0)
            fprintf(stderr,
                    "onebitd: notice: --worker-memory-limit is not applied by the %s launcher; "
                    "its platform's own limits apply (%s)\n",
                    o->launcher,
                    !strcmp(o->launcher, "slurm") ? "--slurm-arg=--mem=..." : "--k8s-memory");
        return 0;
    }
    if (v == 0) {
        fprintf(stderr, "onebitd: worker memory limit: none (--worker-memory-limit 0)\n");
        return 0;
    }
    if (!data_limit_counts_mmap()) {
        fprintf(stderr, "onebitd: notice: this kernel's RLIMIT_DATA counts only the heap (Linux "
                        "before 4.7): no worker memory limit is applied\n");
        return 0;
    }
    if (v == OB_WORKER_MEMORY_AUTO)
        fprintf(stderr,
                "onebitd: worker memory limit: %d x each job's per-rank estimate + %d "
                "MiB, per process (RLIMIT_DATA)%s\n",
                OB_WORKER_MEMORY_FACTOR, (int)(OB_WORKER_MEMORY_MARGIN >> 20),
                !strcmp(o->launcher, "hosts") ? "; on this machine only" : "");
    else
        fprintf(stderr, "onebitd: worker memory limit: %lld MiB per process (RLIMIT_DATA)%s\n",
                (long long)(v >> 20),
                !strcmp(o->launcher, "hosts") ? "; on this machine only" : "");
    return v;
}

/* MemTotal of /proc/meminfo in bytes; 0 when it cannot be read. */
static int64_t mem_total(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb > 0 && kb < (INT64_MAX >> 10) ? (int64_t)kb << 10 : 0;
}

/* onebit-worker next to this executable, when it is there. */
static void default_worker(char *out, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    snprintf(out, cap, "onebit-worker");
    if (n <= 0) return;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash) return;
    *slash = '\0';
    char cand[PATH_MAX + 32];
    snprintf(cand, sizeof cand, "%s/onebit-worker", self);
    if (access(cand, X_OK) == 0) snprintf(out, cap, "%s", cand);
}

/* mkdir -p of the state directory, for the hosts launcher's hostfile (the service makes it
 * too, later). */
static void make_dirs(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        mkdir(tmp, 0755);
        *p = c;
        if (!c) break;
    }
}

/* The launcher --launcher names; for hosts, hl holds the parsed --hosts. */
static ob_status make_launcher(const opts *o, const char *worker, const ob_host_list *hl,
                               ob_launcher **out, ob_err *err)
{
    if (!strcmp(o->launcher, "kubernetes")) {
        ob_kubernetes_launcher_config kc = {
            .kubeconfig = o->kubeconfig,
            .namespace_ = o->k8s_namespace,
            .image = o->k8s_image,
            .image_pull_policy = o->k8s_pull,
            .checkpoint_claim = o->k8s_claim && o->k8s_claim[0] ? o->k8s_claim : NULL,
            .service_account = o->k8s_sa,
            .cpu = o->k8s_cpu,
            .memory = o->k8s_memory,
            .slots_per_worker = o->k8s_slots_per_worker,
            .grace_s = (int)(o->grace_s + 0.999),
            .pending_timeout_s = o->k8s_pending_s,
            .ttl_s = o->k8s_ttl_s,
            .watch_idle_s = o->k8s_watch_idle_s,
            .worker_log_max = o->k8s_worker_log_max,
            .image_without_python = o->k8s_image_python && !strcmp(o->k8s_image_python, "no"),
        };
        return ob_kubernetes_launcher_create(out, &kc, err);
    }
    if (!strcmp(o->launcher, "slurm")) {
        char bin[5][PATH_MAX];
        const char *names[5] = {"sbatch", "squeue", "scancel", "sacct", "srun"};
        for (int i = 0; i < 5; i++) {
            if (o->slurm_bin)
                snprintf(bin[i], sizeof bin[i], "%s/%s", o->slurm_bin, names[i]);
            else
                snprintf(bin[i], sizeof bin[i], "%s", names[i]);
        }
        ob_slurm_launcher_config sc = {
            .worker = worker,
            .sbatch = bin[0],
            .squeue = bin[1],
            .scancel = bin[2],
            .sacct = bin[3],
            .srun = bin[4],
            .mpi = o->slurm_mpi,
            .partition = o->slurm_partition,
            .sbatch_args = o->n_slurm_args ? o->slurm_args : NULL,
            .poll_interval_ms = (int)(o->slurm_poll_s * 1000),
        };
        return ob_slurm_launcher_create(out, &sc, err);
    }
    if (!strcmp(o->launcher, "hosts")) {
        char hostfile[PATH_MAX];
        make_dirs(o->state_dir);
        snprintf(hostfile, sizeof hostfile, "%s/hostfile", o->state_dir);
        ob_hosts_launcher_config hc = {
            .mpirun = o->mpirun,
            .worker = worker,
            .hosts = hl,
            .hostfile_path = hostfile,
            .rsh_agent = o->ssh_agent,
            .net = o->mpi_net,
        };
        return ob_hosts_launcher_create(out, &hc, err);
    }
    static const char *const mpi_args[] = {"--oversubscribe", NULL};
    ob_local_launcher_config lc = {.mpirun = o->mpirun, .worker = worker, .mpirun_args = mpi_args};
    return ob_local_launcher_create(out, &lc, err);
}

/* The service's configuration from the options, with the launcher made for them (borrowed). */
static void service_config(const opts *o, ob_launcher *launcher, ob_service_config *cfg)
{
    ob_service_config_default(cfg);
    cfg->state_dir = o->state_dir;
    cfg->slots = o->slots;
    cfg->default_max_restarts = o->max_restarts;
    cfg->default_world_size = o->gpus > 0 ? o->gpus : 1;
    cfg->progress_timeout_ms = (int64_t)(o->progress_timeout_s * 1000);
    cfg->backoff_ms = (int64_t)(o->backoff_s * 1000);
    cfg->backoff_max_ms = (int64_t)(o->backoff_max_s * 1000);
    cfg->cancel_grace_ms = (int64_t)(o->grace_s * 1000);
    cfg->launcher = launcher;
    if (o->n_data_roots) cfg->data_roots = o->data_roots;
    if (o->n_checkpoint_roots) cfg->checkpoint_roots = o->checkpoint_roots;
    cfg->on_state = log_state;
    cfg->store_min_free_bytes = o->store_min_free;
    /* All ranks of a local job share this machine: by default they may take half its memory.
     * Other launchers' ranks run elsewhere; no default limit there. */
    cfg->max_job_memory = o->max_job_memory >= 0          ? o->max_job_memory
                          : !strcmp(o->launcher, "local") ? mem_total() / 2
                                                          : 0;
    cfg->retention_ms = (int64_t)(o->retention_days * 86400.0 * 1000.0);
    cfg->worker_memory_limit = worker_memory_setting(o);
    cfg->max_upload_bytes = o->max_upload;
}

int main(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int prc = onebitd_parse_args(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;
    /* Job specs, logs, the store and checkpoints are for this user only: every file onebitd or
     * its workers create is 0600, every directory 0700 (docs/SECURITY.md). */
    umask(077);
    ob_host_list hosts = {0};
    if (o.hosts) {
        ob_err herr;
        ob_err_clear(&herr);
        if (ob_host_list_parse(&hosts, o.hosts, &herr) != OB_OK) {
            fprintf(stderr, "onebitd: %s\n", herr.msg);
            return 2;
        }
        if (!o.slots_given) o.slots = hosts.total_slots;
    }
    if (o.mpi_net) {
        ob_err nerr;
        ob_err_clear(&nerr);
        if (ob_hosts_net_check(o.mpi_net, &nerr) != OB_OK) {
            fprintf(stderr, "onebitd: %s\n", nerr.msg);
            ob_host_list_clear(&hosts);
            return 2;
        }
    }
    char token[OB_TOKEN_MAX] = "";
    char worker[PATH_MAX + 32];
    if (o.worker)
        snprintf(worker, sizeof worker, "%s", o.worker);
    else
        default_worker(worker, sizeof worker);

    /* Signals are taken by sigwait in this thread only; every thread inherits the mask. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    ob_err err;
    ob_err_clear(&err);
    ob_launcher *launcher = NULL;
    ob_service *svc = NULL;
    ob_grpc_server *grpc = NULL;
    ob_rest_server *rest = NULL;
    ob_tls_config *tls = NULL;
    if (o.tls_cert && ob_tls_config_load(&tls, o.tls_cert, o.tls_key, o.tls_client_ca, &err)) {
        fprintf(stderr, "onebitd: %s\n", err.msg);
        ob_host_list_clear(&hosts);
        return 2;
    }
    if (make_launcher(&o, worker, &hosts, &launcher, &err)) goto fail;
    ob_service_config cfg;
    service_config(&o, launcher, &cfg);
    if (ob_service_create(&svc, &cfg, &err)) goto fail;
    /* Workers never see the token: each attempt reports with a credential of its own. */
    if (load_token(&o, token, sizeof token) != 0) {
        ob_service_destroy(svc);
        ob_launcher_destroy(launcher);
        ob_host_list_clear(&hosts);
        ob_tls_config_destroy(tls);
        return 2;
    }
    int grpc_port = 0, rest_port = 0, plain_port = 0;
    ob_grpc_server_config gc = {
        .addr = o.grpc_addr,
        .token = token,
        .threads = o.threads,
        .max_streams = o.max_streams,
        .tls = tls,
        .plain_addr = tls ? o.report_listen : NULL,
    };
    if (ob_grpc_server_start(&grpc, svc, &gc, &grpc_port, &plain_port, &err)) goto fail;
    ob_rest_limits limits = {.max_streams = o.max_streams,
                             .max_connections = o.max_connections,
                             .max_client_connections = o.max_client_connections,
                             .request_timeout_s = o.request_timeout_s};
    if (ob_rest_server_start(&rest, svc, o.rest_addr, token, &limits, tls, &rest_port, &err))
        goto fail;
    /* Workers on this machine reach the gRPC port over loopback (with TLS, the plaintext
     * workers' port); elsewhere, at --report-addr. */
    char report[300];
    if (o.report_addr)
        snprintf(report, sizeof report, "%s", o.report_addr);
    else
        snprintf(report, sizeof report, "127.0.0.1:%d", tls ? plain_port : grpc_port);
    if (ob_service_set_report_addr(svc, report, &err)) goto fail;
    if (ob_service_start(svc, &err)) goto fail;
    fprintf(stderr,
            "onebitd: serving gRPC on port %d, REST on port %d%s, state in %s, %d slots, "
            "default ranks per job: %d, launcher %s\n",
            grpc_port, rest_port,
            !tls                                      ? " (plaintext)"
            : ob_tls_config_requires_client_cert(tls) ? " (TLS, client certificates required)"
                                                      : " (TLS)",
            o.state_dir, o.slots, cfg.default_world_size, o.launcher);
    if (tls) fprintf(stderr, "onebitd: workers report to plaintext port %d\n", plain_port);
    if (o.ready_file) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s.tmp", o.ready_file);
        FILE *f = fopen(tmp, "w");
        if (f) {
            fprintf(f, "grpc=%d\nrest=%d\npid=%d\n", grpc_port, rest_port, (int)getpid());
            if (tls) fprintf(f, "report=%d\n", plain_port);
            fclose(f);
            rename(tmp, o.ready_file);
        }
    }
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "onebitd: signal %d: shutting down\n", sig);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "onebitd: %s\n", err.msg);
    ob_grpc_server_stop(grpc);
    ob_rest_server_stop(rest);
    ob_service_destroy(svc);
    ob_launcher_destroy(launcher);
    ob_host_list_clear(&hosts);
    ob_tls_config_destroy(tls);
    return rc;
}
