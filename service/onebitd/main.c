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
 * Every option also reads an environment variable (flags win); see usage(). Exit status: 0
 * after a clean shutdown, 1 when the service cannot start, 2 for a bad command line. */
#define _GNU_SOURCE /* getopt_long */
#include "onebit/kubernetes.h"
#include "onebit/launcher.h"
#include "onebit/servers.h"
#include "onebit/service.h"
#include "onebit/token.h"

#include <sys/stat.h>
#include <sys/utsname.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct opts {
    const char *grpc_addr, *rest_addr, *state_dir, *token_file, *worker, *mpirun, *ready_file;
    int slots, max_restarts, threads, gpus, max_streams;
    int max_connections, max_client_connections, request_timeout_s;
    double progress_timeout_s, backoff_s, backoff_max_s, grace_s;
    double retention_days; /* --retention-days: 0 keeps jobs until DeleteJob */
    /* --data-root and --checkpoint-root, NULL-terminated; empty: the service's defaults */
    const char *data_roots[17], *checkpoint_roots[17];
    int n_data_roots, n_checkpoint_roots;
    int insecure_no_auth;    /* --insecure-no-auth: serve without a token */
    int allow_plaintext;     /* --allow-plaintext: non-loopback addresses without TLS */
    /* --tls-cert, --tls-key, --tls-client-ca; --report-listen: the workers' plaintext port */
    const char *tls_cert, *tls_key, *tls_client_ca, *report_listen;
    int slots_given;         /* --slots or ONEBIT_SLOTS */
    const char *launcher;    /* local, hosts, slurm */
    const char *report_addr; /* --report-addr: where workers reach the gRPC port */
    const char *hosts, *ssh_agent, *mpi_net;
    const char *slurm_partition, *slurm_mpi, *slurm_bin;
    const char *slurm_args[33]; /* --slurm-arg, NULL-terminated */
    int n_slurm_args;
    double slurm_poll_s;
    /* --launcher kubernetes */
    const char *kubeconfig, *k8s_namespace, *k8s_image, *k8s_pull, *k8s_claim, *k8s_sa, *k8s_cpu,
        *k8s_memory;
    int k8s_slots_per_worker, k8s_pending_s, k8s_ttl_s, k8s_watch_idle_s, k8s_worker_log_max,
        k8s_given;
    int64_t store_min_free; /* --store-min-free */
    int64_t max_job_memory; /* --max-job-memory; -1: the default */
    int64_t worker_memory_limit; /* --worker-memory-limit; OB_WORKER_MEMORY_AUTO by default */
    int worker_memory_given;
} opts;

static void usage(FILE *f)
{
    fprintf(f, "usage: onebitd [options]\n"
               "  --grpc HOST:PORT        gRPC address [127.0.0.1:50051] (ONEBIT_GRPC_ADDR)\n"
               "  --rest HOST:PORT        REST address [127.0.0.1:8080] (ONEBIT_REST_ADDR)\n"
               "  --state-dir DIR         job store, logs, checkpoints [./var] (ONEBIT_STATE_DIR)\n"
               "  --token-file FILE       require the bearer token in FILE on every call\n"
               "                          (ONEBIT_TOKEN gives the token itself) [STATE/token,\n"
               "                          made at the first start, mode 0600]\n"
               "  --insecure-no-auth      serve without any token\n"
               "  --tls-cert FILE         serve both APIs over TLS with this PEM certificate\n"
               "                          (then any intermediates) (ONEBIT_TLS_CERT)\n"
               "  --tls-key FILE          its unencrypted PEM private key, not readable by\n"
               "                          others (ONEBIT_TLS_KEY)\n"
               "  --tls-client-ca FILE    require client certificates signed by this PEM CA\n"
               "                          (mutual TLS) (ONEBIT_TLS_CLIENT_CA)\n"
               "  --report-listen HOST:PORT with TLS: the plaintext gRPC port workers report\n"
               "                          to (onebit-worker has no TLS) [127.0.0.1:0]\n"
               "  --allow-plaintext       allow addresses other than loopback without TLS\n"
               "                          (behind a TLS proxy or on a private network)\n"
               "  --slots N               ranks that may run at once [4, or the visible GPUs]\n"
               "                          (ONEBIT_SLOTS)\n"
               "  --max-restarts N        default restarts per job [3]\n"
               "  --progress-timeout SEC  end an attempt with no progress for SEC [0: never]\n"
               "  --backoff SEC           first restart delay, doubled per restart [1]\n"
               "  --backoff-max SEC       longest restart delay [60]\n"
               "  --cancel-grace SEC      SIGTERM, then SIGKILL after SEC [10]\n"
               "  --worker PATH           onebit-worker [next to onebitd] (ONEBIT_WORKER)\n"
               "  --mpirun PATH           mpirun [mpirun] (ONEBIT_MPIRUN)\n"
               "  --threads N             gRPC handler threads [4]\n"
               "  --max-streams N         event streams open at once, per API [256]\n"
               "  --max-connections N     REST connections open at once [256]\n"
               "  --max-client-connections N\n"
               "                          REST connections from one IP address [32]\n"
               "  --request-timeout SEC   close a REST connection that sends nothing for SEC\n"
               "                          while its request arrives or between requests [10]\n"
               "  --retention-days D      delete jobs that ended more than D days ago, with\n"
               "                          their events, logs and checkpoints [0: keep them]\n"
               "  --ready-file FILE       write the bound ports here once serving\n"
               "  --store-min-free SIZE   below SIZE free on the state directory's file system\n"
               "                          the store counts as full: health NOT_SERVING, submit,\n"
               "                          cancel and delete refused (UNAVAILABLE / 503) until\n"
               "                          there is room again [16M; 0: only failed writes]\n"
               "  --max-job-memory SIZE   refuse at submit a job whose ranks would need more than\n"
               "                          SIZE in all (ranks x the spec's memory estimate)\n"
               "                          [local: half of MemTotal; other launchers: 0, none]\n"
               "  --worker-memory-limit SIZE|auto|0\n"
               "                          the most private memory (RLIMIT_DATA) mpirun and each\n"
               "                          rank on this machine may map; a job that runs out of it\n"
               "                          FAILS without restarts ('out of memory'). auto: twice\n"
               "                          the job's per-rank estimate + 1 GiB; 0: none; at least\n"
               "                          1G [auto; local and hosts launchers only]. Workers\n"
               "                          never write core files\n"
               "  --version               print the release and exit\n"
               "  --data-root DIR         jobs may read data only under DIR (repeatable)\n"
               "                          [/usr/share/datasets, /usr/share/games/fortunes,\n"
               "                          STATE/data; / for anywhere]\n"
               "  --checkpoint-root DIR   jobs may warm-start only from under DIR (repeatable)\n"
               "                          [STATE/checkpoints]\n"
               "  --launcher KIND         local (mpirun here), hosts (mpirun across --hosts) or\n"
               "                          slurm (a batch job per attempt) [local]\n"
               "                          (ONEBIT_LAUNCHER)\n"
               "  --report-addr HOST:PORT where workers reach this gRPC server\n"
               "                          [127.0.0.1:<gRPC port>]\n"
               "  --hosts NAME:SLOTS,...  hosts: the machines and their ranks (ONEBIT_HOSTS);\n"
               "                          --slots defaults to their sum\n"
               "  --ssh-agent CMD         hosts: how mpirun reaches them (plm_rsh_agent) [ssh]\n"
               "  --mpi-net NET,...       hosts: the network MPI uses between them, CIDRs or\n"
               "                          interfaces (btl_tcp_if_include, oob_tcp_if_include)\n"
               "                          [every interface but loopback] (ONEBIT_MPI_NET)\n"
               "  --slurm-partition P     slurm: sbatch --partition [the cluster's default]\n"
               "  --slurm-arg ARG         slurm: one more sbatch option, e.g. --time=4:00:00\n"
               "                          (repeatable)\n"
               "  --slurm-mpi TYPE        slurm: srun --mpi=TYPE [pmix]\n"
               "  --slurm-bin DIR         slurm: where sbatch, squeue, scancel, sacct, srun are\n"
               "                          [PATH]\n"
               "  --slurm-poll SEC        slurm: ask squeue about a job at most this often [1]\n"
               "  --kubeconfig FILE       kubernetes: API server and token from FILE (ONEBIT_\n"
               "                          KUBECONFIG) [in the cluster: the service account]\n"
               "  --k8s-namespace NS      kubernetes: where the MPIJobs go [the kubeconfig's\n"
               "                          or the pod's namespace, else default]\n"
               "  --k8s-image IMAGE       kubernetes: the worker image (ONEBIT_K8S_IMAGE)\n"
               "  --k8s-pull-policy P     kubernetes: IfNotPresent, Always or Never [IfNotPresent]\n"
               "  --k8s-checkpoint-claim C kubernetes: the ReadWriteMany claim mounted at the\n"
               "                          checkpoint directory in every pod\n"
               "                          (ONEBIT_K8S_CHECKPOINT_CLAIM)\n"
               "  --k8s-service-account SA kubernetes: the service account of the MPIJobs' pods\n"
               "  --k8s-slots-per-worker N kubernetes: ranks (and GPUs) per worker pod [1]\n"
               "  --k8s-cpu Q             kubernetes: CPU request per worker pod [1]\n"
               "  --k8s-memory Q          kubernetes: memory request per worker pod [1Gi]\n"
               "  --k8s-pending-timeout SEC kubernetes: end an attempt whose pods cannot be\n"
               "                          scheduled or pull their image for SEC [300; 0: never]\n"
               "  --k8s-ttl SEC           kubernetes: keep ended MPIJobs this long [86400]\n"
               "  --k8s-watch-idle SEC    kubernetes: a watch or pod log that sends nothing this\n"
               "                          long is taken for dead and made again [90]\n"
               "  --k8s-worker-log-max BYTES kubernetes: copied from each worker pod's log per\n"
               "                          attempt [8388608]\n");
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && v[0] ? v : def;
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!v[0] || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "onebitd: %s: expected an integer from %d to %d, got '%s'\n", flag, lo, hi,
                v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_secs(const char *flag, const char *v, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!v[0] || *end || errno || !(x >= 0) || x > 1e6) {
        fprintf(stderr, "onebitd: %s: expected seconds >= 0, got '%s'\n", flag, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* A size in bytes: digits with an optional K, M, G or T (binary multiples). */
static int parse_size(const char *flag, const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10;
    if (*end == 'M' || *end == 'm') shift = 20;
    if (*end == 'G' || *end == 'g') shift = 30;
    if (*end == 'T' || *end == 't') shift = 40;
    if (shift) end++;
    if (!v[0] || *end || errno || x < 0 || x > (INT64_MAX >> shift)) {
        fprintf(stderr, "onebitd: %s: expected a size in bytes (e.g. 512M, 8G), got '%s'\n", flag,
                v);
        return -1;
    }
    *out = (int64_t)x << shift;
    return 0;
}

/* 1 for "127.x.x.x:PORT", "localhost:PORT" and "[::1]:PORT". */
static int loopback_addr(const char *addr)
{
    if (!strncmp(addr, "127.", 4) || !strncmp(addr, "localhost:", 10) ||
        !strncmp(addr, "[::1]:", 6))
        return 1;
    return 0;
}

/* TLS needs both files; without TLS (or on its plaintext workers' port) an address other than
 * loopback needs --allow-plaintext. Returns 0, or 2 with a message. */
static int check_tls_args(opts *o)
{
    int tls = o->tls_cert || o->tls_key;
    if (tls && (!o->tls_cert || !o->tls_key)) {
        fprintf(stderr, "onebitd: %s needs %s too: TLS takes a certificate and its key\n",
                o->tls_cert ? "--tls-cert" : "--tls-key", o->tls_cert ? "--tls-key" : "--tls-cert");
        return 2;
    }
    if (!tls && (o->tls_client_ca || o->report_listen)) {
        fprintf(stderr, "onebitd: %s is for TLS: give --tls-cert and --tls-key too\n",
                o->tls_client_ca ? "--tls-client-ca" : "--report-listen");
        return 2;
    }
    if (tls && !o->report_listen) o->report_listen = "127.0.0.1:0";
    const char *addrs[] = {o->grpc_addr, o->rest_addr, o->report_listen};
    for (int i = tls ? 2 : 0; i < 3 && addrs[i] && !o->allow_plaintext; i++) {
        if (loopback_addr(addrs[i])) continue;
        if (tls)
            fprintf(stderr,
                    "onebitd: --report-listen %s is not a loopback address, and the workers' port "
                    "is plaintext. Bind it to 127.0.0.1, or pass --allow-plaintext on a private "
                    "network\n",
                    addrs[i]);
        else
            fprintf(stderr,
                    "onebitd: %s is not a loopback address, and the APIs have no TLS: the token "
                    "and every request would cross the network in clear. Serve TLS "
                    "(--tls-cert, --tls-key), bind to 127.0.0.1, or pass --allow-plaintext behind "
                    "a TLS-terminating proxy or on a private network\n",
                    addrs[i]);
        return 2;
    }
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    o->grpc_addr = env_or("ONEBIT_GRPC_ADDR", "127.0.0.1:50051");
    o->rest_addr = env_or("ONEBIT_REST_ADDR", "127.0.0.1:8080");
    o->state_dir = env_or("ONEBIT_STATE_DIR", "./var");
    o->worker = env_or("ONEBIT_WORKER", NULL);
    o->mpirun = env_or("ONEBIT_MPIRUN", "mpirun");
    /* GPU jobs get one rank per visible GPU: that many slots at least. */
    o->gpus = ob_visible_gpus();
    o->slots = o->gpus > 4 ? o->gpus : 4;
    o->max_restarts = 3;
    o->threads = 4;
    o->backoff_s = 1;
    o->backoff_max_s = 60;
    o->grace_s = 10;
    if (getenv("ONEBIT_SLOTS") &&
        parse_int("ONEBIT_SLOTS", getenv("ONEBIT_SLOTS"), 1, 100000, &o->slots))
        return 2;
    o->slots_given = getenv("ONEBIT_SLOTS") != NULL;
    o->launcher = env_or("ONEBIT_LAUNCHER", "local");
    o->hosts = env_or("ONEBIT_HOSTS", NULL);
    o->mpi_net = env_or("ONEBIT_MPI_NET", NULL);
    o->slurm_poll_s = 1;
    o->kubeconfig = env_or("ONEBIT_KUBECONFIG", NULL);
    o->k8s_image = env_or("ONEBIT_K8S_IMAGE", NULL);
    o->k8s_claim = env_or("ONEBIT_K8S_CHECKPOINT_CLAIM", NULL);
    o->k8s_pending_s = 300;
    o->tls_cert = env_or("ONEBIT_TLS_CERT", NULL);
    o->tls_key = env_or("ONEBIT_TLS_KEY", NULL);
    o->tls_client_ca = env_or("ONEBIT_TLS_CLIENT_CA", NULL);
    o->store_min_free = (int64_t)16 << 20;
    o->max_job_memory = -1;
    o->worker_memory_limit = OB_WORKER_MEMORY_AUTO;
    enum {
        O_GRPC = 256,
        O_REST,
        O_STATE,
        O_TOKEN,
        O_WORKER,
        O_MPIRUN,
        O_READY,
        O_SLOTS,
        O_RESTARTS,
        O_THREADS,
        O_TIMEOUT,
        O_BACKOFF,
        O_BACKOFF_MAX,
        O_GRACE,
        O_DATA_ROOT,
        O_CKPT_ROOT,
        O_NO_AUTH,
        O_PLAINTEXT,
        O_MAX_STREAMS,
        O_MAX_CONNECTIONS,
        O_MAX_CLIENT_CONNECTIONS,
        O_REQUEST_TIMEOUT,
        O_RETENTION,
        O_LAUNCHER,
        O_REPORT_ADDR,
        O_HOSTS,
        O_SSH_AGENT,
        O_MPI_NET,
        O_SLURM_PARTITION,
        O_SLURM_ARG,
        O_SLURM_MPI,
        O_SLURM_BIN,
        O_SLURM_POLL,
        O_KUBECONFIG,
        O_K8S_NAMESPACE,
        O_K8S_IMAGE,
        O_K8S_PULL,
        O_K8S_CLAIM,
        O_K8S_SA,
        O_K8S_SLOTS,
        O_K8S_CPU,
        O_K8S_MEMORY,
        O_K8S_PENDING,
        O_K8S_TTL,
        O_K8S_WATCH_IDLE,
        O_K8S_WORKER_LOG_MAX,
        O_TLS_CERT,
        O_TLS_KEY,
        O_TLS_CLIENT_CA,
        O_REPORT_LISTEN,
        O_STORE_MIN_FREE,
        O_MAX_JOB_MEMORY,
        O_WORKER_MEMORY,
    };
    static const struct option options[] = {
        {"grpc", required_argument, NULL, O_GRPC},
        {"rest", required_argument, NULL, O_REST},
        {"state-dir", required_argument, NULL, O_STATE},
        {"token-file", required_argument, NULL, O_TOKEN},
        {"worker", required_argument, NULL, O_WORKER},
        {"mpirun", required_argument, NULL, O_MPIRUN},
        {"ready-file", required_argument, NULL, O_READY},
        {"slots", required_argument, NULL, O_SLOTS},
        {"max-restarts", required_argument, NULL, O_RESTARTS},
        {"threads", required_argument, NULL, O_THREADS},
        {"progress-timeout", required_argument, NULL, O_TIMEOUT},
        {"backoff", required_argument, NULL, O_BACKOFF},
        {"backoff-max", required_argument, NULL, O_BACKOFF_MAX},
        {"cancel-grace", required_argument, NULL, O_GRACE},
        {"data-root", required_argument, NULL, O_DATA_ROOT},
        {"checkpoint-root", required_argument, NULL, O_CKPT_ROOT},
        {"insecure-no-auth", no_argument, NULL, O_NO_AUTH},
        {"allow-plaintext", no_argument, NULL, O_PLAINTEXT},
        {"max-streams", required_argument, NULL, O_MAX_STREAMS},
        {"max-connections", required_argument, NULL, O_MAX_CONNECTIONS},
        {"max-client-connections", required_argument, NULL, O_MAX_CLIENT_CONNECTIONS},
        {"request-timeout", required_argument, NULL, O_REQUEST_TIMEOUT},
        {"retention-days", required_argument, NULL, O_RETENTION},
        {"launcher", required_argument, NULL, O_LAUNCHER},
        {"report-addr", required_argument, NULL, O_REPORT_ADDR},
        {"hosts", required_argument, NULL, O_HOSTS},
        {"ssh-agent", required_argument, NULL, O_SSH_AGENT},
        {"mpi-net", required_argument, NULL, O_MPI_NET},
        {"slurm-partition", required_argument, NULL, O_SLURM_PARTITION},
        {"slurm-arg", required_argument, NULL, O_SLURM_ARG},
        {"slurm-mpi", required_argument, NULL, O_SLURM_MPI},
        {"slurm-bin", required_argument, NULL, O_SLURM_BIN},
        {"slurm-poll", required_argument, NULL, O_SLURM_POLL},
        {"kubeconfig", required_argument, NULL, O_KUBECONFIG},
        {"k8s-namespace", required_argument, NULL, O_K8S_NAMESPACE},
        {"k8s-image", required_argument, NULL, O_K8S_IMAGE},
        {"k8s-pull-policy", required_argument, NULL, O_K8S_PULL},
        {"k8s-checkpoint-claim", required_argument, NULL, O_K8S_CLAIM},
        {"k8s-service-account", required_argument, NULL, O_K8S_SA},
        {"k8s-slots-per-worker", required_argument, NULL, O_K8S_SLOTS},
        {"k8s-cpu", required_argument, NULL, O_K8S_CPU},
        {"k8s-memory", required_argument, NULL, O_K8S_MEMORY},
        {"k8s-pending-timeout", required_argument, NULL, O_K8S_PENDING},
        {"k8s-ttl", required_argument, NULL, O_K8S_TTL},
        {"k8s-watch-idle", required_argument, NULL, O_K8S_WATCH_IDLE},
        {"k8s-worker-log-max", required_argument, NULL, O_K8S_WORKER_LOG_MAX},
        {"tls-cert", required_argument, NULL, O_TLS_CERT},
        {"tls-key", required_argument, NULL, O_TLS_KEY},
        {"tls-client-ca", required_argument, NULL, O_TLS_CLIENT_CA},
        {"report-listen", required_argument, NULL, O_REPORT_LISTEN},
        {"store-min-free", required_argument, NULL, O_STORE_MIN_FREE},
        {"max-job-memory", required_argument, NULL, O_MAX_JOB_MEMORY},
        {"worker-memory-limit", required_argument, NULL, O_WORKER_MEMORY},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0; /* our own messages */
    int c, idx = -1;
    while ((c = getopt_long(argc, argv, ":h", options, &idx)) != -1) {
        const char *flag = idx >= 0 ? options[idx].name : "";
        char name[40];
        snprintf(name, sizeof name, "--%s", flag);
        idx = -1;
        int bad = 0;
        switch (c) {
        case O_GRPC:
            o->grpc_addr = optarg;
            break;
        case O_REST:
            o->rest_addr = optarg;
            break;
        case O_STATE:
            o->state_dir = optarg;
            break;
        case O_TOKEN:
            o->token_file = optarg;
            break;
        case O_WORKER:
            o->worker = optarg;
            break;
        case O_MPIRUN:
            o->mpirun = optarg;
            break;
        case O_READY:
            o->ready_file = optarg;
            break;
        case O_SLOTS:
            bad = parse_int(name, optarg, 1, 100000, &o->slots);
            o->slots_given = 1;
            break;
        case O_LAUNCHER:
            o->launcher = optarg;
            break;
        case O_STORE_MIN_FREE:
            bad = parse_size(name, optarg, &o->store_min_free);
            break;
        case O_MAX_JOB_MEMORY:
            bad = parse_size(name, optarg, &o->max_job_memory);
            break;
        case O_WORKER_MEMORY: {
            ob_err perr;
            ob_err_clear(&perr);
            bad = ob_worker_memory_limit_parse(optarg, &o->worker_memory_limit, &perr) ? -1 : 0;
            if (bad) fprintf(stderr, "onebitd: %s\n", perr.msg);
            o->worker_memory_given = 1;
            break;
        }
        case O_REPORT_ADDR:
            o->report_addr = optarg;
            break;
        case O_HOSTS:
            o->hosts = optarg;
            break;
        case O_SSH_AGENT:
            o->ssh_agent = optarg;
            break;
        case O_MPI_NET:
            o->mpi_net = optarg;
            break;
        case O_SLURM_PARTITION:
            o->slurm_partition = optarg;
            break;
        case O_SLURM_ARG:
            if (o->n_slurm_args >= 32) {
                fprintf(stderr, "onebitd: %s: at most 32 of them\n", name);
                return 2;
            }
            o->slurm_args[o->n_slurm_args++] = optarg;
            o->slurm_args[o->n_slurm_args] = NULL;
            break;
        case O_SLURM_MPI:
            o->slurm_mpi = optarg;
            break;
        case O_SLURM_BIN:
            o->slurm_bin = optarg;
            break;
        case O_SLURM_POLL:
            bad = parse_secs(name, optarg, &o->slurm_poll_s);
            break;
        case O_KUBECONFIG:
            o->kubeconfig = optarg;
            break;
        case O_K8S_NAMESPACE:
            o->k8s_namespace = optarg;
            o->k8s_given = 1;
            break;
        case O_K8S_IMAGE:
            o->k8s_image = optarg;
            break;
        case O_K8S_PULL:
            o->k8s_pull = optarg;
            o->k8s_given = 1;
            break;
        case O_K8S_CLAIM:
            o->k8s_claim = optarg;
            break;
        case O_K8S_SA:
            o->k8s_sa = optarg;
            o->k8s_given = 1;
            break;
        case O_K8S_SLOTS:
            bad = parse_int(name, optarg, 1, 1024, &o->k8s_slots_per_worker);
            o->k8s_given = 1;
            break;
        case O_K8S_CPU:
            o->k8s_cpu = optarg;
            o->k8s_given = 1;
            break;
        case O_K8S_MEMORY:
            o->k8s_memory = optarg;
            o->k8s_given = 1;
            break;
        case O_K8S_PENDING:
            bad = parse_int(name, optarg, 0, 1000000, &o->k8s_pending_s);
            o->k8s_given = 1;
            break;
        case O_K8S_WATCH_IDLE:
            bad = parse_int(name, optarg, 2, 3600, &o->k8s_watch_idle_s);
            o->k8s_given = 1;
            break;
        case O_K8S_WORKER_LOG_MAX:
            bad = parse_int(name, optarg, 1024, 1 << 30, &o->k8s_worker_log_max);
            o->k8s_given = 1;
            break;
        case O_K8S_TTL:
            bad = parse_int(name, optarg, 1, 100000000, &o->k8s_ttl_s);
            o->k8s_given = 1;
            break;
        case O_RESTARTS:
            bad = parse_int(name, optarg, 0, 100, &o->max_restarts);
            break;
        case O_THREADS:
            bad = parse_int(name, optarg, 1, 256, &o->threads);
            break;
        case O_TIMEOUT:
            bad = parse_secs(name, optarg, &o->progress_timeout_s);
            break;
        case O_BACKOFF:
            bad = parse_secs(name, optarg, &o->backoff_s);
            break;
        case O_BACKOFF_MAX:
            bad = parse_secs(name, optarg, &o->backoff_max_s);
            break;
        case O_GRACE:
            bad = parse_secs(name, optarg, &o->grace_s);
            break;
        case O_DATA_ROOT:
        case O_CKPT_ROOT: {
            const char **list = c == O_DATA_ROOT ? o->data_roots : o->checkpoint_roots;
            int *n = c == O_DATA_ROOT ? &o->n_data_roots : &o->n_checkpoint_roots;
            if (*n >= 16) {
                fprintf(stderr, "onebitd: %s: at most 16 of them\n", name);
                return 2;
            }
            list[(*n)++] = optarg;
            list[*n] = NULL;
            break;
        }
        case O_MAX_STREAMS:
            bad = parse_int(name, optarg, 1, 100000, &o->max_streams);
            break;
        case O_MAX_CONNECTIONS:
            bad = parse_int(name, optarg, 1, 100000, &o->max_connections);
            break;
        case O_MAX_CLIENT_CONNECTIONS:
            bad = parse_int(name, optarg, 1, 100000, &o->max_client_connections);
            break;
        case O_REQUEST_TIMEOUT:
            bad = parse_int(name, optarg, 1, 3600, &o->request_timeout_s);
            break;
        case O_RETENTION: {
            char *end;
            errno = 0;
            double d = strtod(optarg, &end);
            if (!optarg[0] || *end || errno || !(d >= 0) || d > 36500) {
                fprintf(stderr, "onebitd: %s: expected days from 0 to 36500, got '%s'\n", name,
                        optarg);
                bad = -1;
            } else {
                o->retention_days = d;
            }
            break;
        }
        case O_NO_AUTH:
            o->insecure_no_auth = 1;
            break;
        case O_PLAINTEXT:
            o->allow_plaintext = 1;
            break;
        case O_TLS_CERT:
            o->tls_cert = optarg;
            break;
        case O_TLS_KEY:
            o->tls_key = optarg;
            break;
        case O_TLS_CLIENT_CA:
            o->tls_client_ca = optarg;
            break;
        case O_REPORT_LISTEN:
            o->report_listen = optarg;
            break;
        case 'h':
            usage(stdout);
            return 1;
        case 'V':
            printf("onebitd %s (api onebit.v1)\n", ONEBIT_VERSION);
            return 1;
        case ':':
            fprintf(stderr, "onebitd: %s needs a value\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            fprintf(stderr, "onebitd: unknown argument '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
        if (bad) return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "onebitd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    int local = !strcmp(o->launcher, "local"), hosts = !strcmp(o->launcher, "hosts"),
        slurm = !strcmp(o->launcher, "slurm"), k8s = !strcmp(o->launcher, "kubernetes");
    if (!local && !hosts && !slurm && !k8s) {
        fprintf(stderr,
                "onebitd: --launcher: expected local, hosts, slurm or kubernetes, got '%s'\n",
                o->launcher);
        return 2;
    }
    if (k8s && (!o->k8s_image || !o->k8s_image[0])) {
        fprintf(stderr, "onebitd: --launcher kubernetes needs --k8s-image (the worker image)\n");
        return 2;
    }
    if (!k8s && o->k8s_given) {
        fprintf(stderr, "onebitd: the --k8s-* options are for --launcher kubernetes\n");
        return 2;
    }
    if (hosts != (o->hosts != NULL)) {
        fprintf(stderr, hosts ? "onebitd: --launcher hosts needs --hosts NAME:SLOTS,...\n"
                              : "onebitd: --hosts is for --launcher hosts\n");
        return 2;
    }
    if ((o->ssh_agent || o->mpi_net) && !hosts) {
        fprintf(stderr, "onebitd: --ssh-agent and --mpi-net are for --launcher hosts\n");
        return 2;
    }
    if (!slurm && (o->slurm_partition || o->n_slurm_args || o->slurm_mpi || o->slurm_bin)) {
        fprintf(stderr, "onebitd: the --slurm-* options are for --launcher slurm\n");
        return 2;
    }
    if (o->report_addr && (!o->report_addr[0] || strlen(o->report_addr) > 255 ||
                           !strchr(o->report_addr, ':') || strpbrk(o->report_addr, " \t\n"))) {
        fprintf(stderr, "onebitd: --report-addr: expected HOST:PORT, got '%s'\n", o->report_addr);
        return 2;
    }
    if (o->insecure_no_auth && o->token_file) {
        fprintf(stderr, "onebitd: --insecure-no-auth and --token-file: choose one\n");
        return 2;
    }
    return check_tls_args(o);
}

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
        fprintf(stderr, "onebitd: worker memory limit: %d x each job's per-rank estimate + %d "
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

int main(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int prc = parse_args(argc, argv, &o);
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
    ob_service_config_default(&cfg);
    cfg.state_dir = o.state_dir;
    cfg.slots = o.slots;
    cfg.default_max_restarts = o.max_restarts;
    cfg.default_world_size = o.gpus > 0 ? o.gpus : 1;
    cfg.progress_timeout_ms = (int64_t)(o.progress_timeout_s * 1000);
    cfg.backoff_ms = (int64_t)(o.backoff_s * 1000);
    cfg.backoff_max_ms = (int64_t)(o.backoff_max_s * 1000);
    cfg.cancel_grace_ms = (int64_t)(o.grace_s * 1000);
    cfg.launcher = launcher;
    if (o.n_data_roots) cfg.data_roots = o.data_roots;
    if (o.n_checkpoint_roots) cfg.checkpoint_roots = o.checkpoint_roots;
    cfg.on_state = log_state;
    cfg.store_min_free_bytes = o.store_min_free;
    /* All ranks of a local job share this machine: by default they may take half its memory.
     * Other launchers' ranks run elsewhere; no default limit there. */
    cfg.max_job_memory = o.max_job_memory >= 0          ? o.max_job_memory
                         : !strcmp(o.launcher, "local") ? mem_total() / 2
                                                        : 0;
    cfg.retention_ms = (int64_t)(o.retention_days * 86400.0 * 1000.0);
    cfg.worker_memory_limit = worker_memory_setting(&o);
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
            !tls                                       ? " (plaintext)"
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
