/* onebitd's command line: one option table (name, kind, field, bounds, metavar, help,
 * environment variable) that parse_args reads with, and that --help and the man page
 * (onebitd --man, onebitd(8)) are written from. Flags win over the environment, which wins over
 * the defaults; then the combinations are checked (launcher options, TLS, plaintext). */
#define _GNU_SOURCE /* getopt_long */
#include "onebit/launcher.h"
#include "onebitd.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F(x) offsetof(opts, x)
#define N(t) (sizeof t / sizeof *t)

/* The options onebitd converts itself (ob_opt.id). */
enum { OPT_HELP = 1, OPT_VERSION, OPT_MAN, OPT_RETENTION, OPT_WORKER_MEMORY };

/* ---- the table ---------------------------------------------------------------------------------
 */

static const ob_opt table[] = {
    {"grpc", 0, OB_OPT_STRING, F(grpc_addr), 0, 0, "HOST:PORT", "gRPC address [127.0.0.1:50051]",
     "ONEBIT_GRPC_ADDR", 0, 0, 0},
    {"rest", 0, OB_OPT_STRING, F(rest_addr), 0, 0, "HOST:PORT", "REST address [127.0.0.1:8080]",
     "ONEBIT_REST_ADDR", 0, 0, 0},
    {"state-dir", 0, OB_OPT_STRING, F(state_dir), 0, 0, "DIR",
     "job store, logs, checkpoints [./var]", "ONEBIT_STATE_DIR", 0, 0, 0},
    {"token-file", 0, OB_OPT_STRING, F(token_file), 0, 0, "FILE",
     "require the bearer token in FILE on every call\n"
     "(ONEBIT_TOKEN gives the token itself) [STATE/token,\n"
     "made at the first start, mode 0600]",
     NULL, 0, 0, 0},
    {"insecure-no-auth", 0, OB_OPT_FLAG, F(insecure_no_auth), 0, 0, NULL, "serve without any token",
     NULL, 0, 0, 0},
    {"tls-cert", 0, OB_OPT_STRING, F(tls_cert), 0, 0, "FILE",
     "serve both APIs over TLS with this PEM certificate\n(then any intermediates)",
     "ONEBIT_TLS_CERT", 0, 0, 0},
    {"tls-key", 0, OB_OPT_STRING, F(tls_key), 0, 0, "FILE",
     "its unencrypted PEM private key, not readable by\nothers", "ONEBIT_TLS_KEY", 0, 0, 0},
    {"tls-client-ca", 0, OB_OPT_STRING, F(tls_client_ca), 0, 0, "FILE",
     "require client certificates signed by this PEM CA\n(mutual TLS)", "ONEBIT_TLS_CLIENT_CA", 0,
     0, 0},
    {"report-listen", 0, OB_OPT_STRING, F(report_listen), 0, 0, "HOST:PORT",
     "with TLS: the plaintext gRPC port workers report\nto (onebit-worker has no TLS) "
     "[127.0.0.1:0]",
     NULL, 0, 0, 0},
    {"allow-plaintext", 0, OB_OPT_FLAG, F(allow_plaintext), 0, 0, NULL,
     "allow addresses other than loopback without TLS\n(behind a TLS proxy or on a private "
     "network)",
     NULL, 0, 0, 0},
    {"slots", 0, OB_OPT_INT, F(slots), 1, 100000, "N",
     "ranks that may run at once [4, or the visible GPUs]", "ONEBIT_SLOTS", 0, F(slots_given), 0},
    {"max-restarts", 0, OB_OPT_INT, F(max_restarts), 0, 100, "N", "default restarts per job [3]",
     NULL, 0, 0, 0},
    {"progress-timeout", 0, OB_OPT_SECONDS, F(progress_timeout_s), 0, 1000000, "SEC",
     "end an attempt with no progress for SEC [0: never]", NULL, 0, 0, 0},
    {"backoff", 0, OB_OPT_SECONDS, F(backoff_s), 0, 1000000, "SEC",
     "first restart delay, doubled per restart [1]", NULL, 0, 0, 0},
    {"backoff-max", 0, OB_OPT_SECONDS, F(backoff_max_s), 0, 1000000, "SEC",
     "longest restart delay [60]", NULL, 0, 0, 0},
    {"cancel-grace", 0, OB_OPT_SECONDS, F(grace_s), 0, 1000000, "SEC",
     "SIGTERM, then SIGKILL after SEC [10]", NULL, 0, 0, 0},
    {"worker", 0, OB_OPT_STRING, F(worker), 0, 0, "PATH", "onebit-worker [next to onebitd]",
     "ONEBIT_WORKER", 0, 0, 0},
    {"mpirun", 0, OB_OPT_STRING, F(mpirun), 0, 0, "PATH", "mpirun [mpirun]", "ONEBIT_MPIRUN", 0, 0,
     0},
    {"threads", 0, OB_OPT_INT, F(threads), 1, 256, "N", "gRPC handler threads [4]", NULL, 0, 0, 0},
    {"max-streams", 0, OB_OPT_INT, F(max_streams), 1, 100000, "N",
     "event streams open at once, per API [256]", NULL, 0, 0, 0},
    {"max-connections", 0, OB_OPT_INT, F(max_connections), 1, 100000, "N",
     "REST connections open at once [256]", NULL, 0, 0, 0},
    {"max-client-connections", 0, OB_OPT_INT, F(max_client_connections), 1, 100000, "N",
     "REST connections from one IP address [32]", NULL, 0, 0, 0},
    {"request-timeout", 0, OB_OPT_INT, F(request_timeout_s), 1, 3600, "SEC",
     "a REST connection has SEC to send its request's headers\n(from its start or its previous "
     "request's end) and 3 x SEC\nfor the body, however slowly it sends; half the\nconnections "
     "at most wait for their request at once [10]",
     NULL, 0, 0, 0},
    {"retention-days", 0, OB_OPT_CUSTOM, F(retention_days), 0, 36500, "D",
     "delete jobs that ended more than D days ago, with\ntheir events, logs and checkpoints "
     "[0: keep them]",
     NULL, OPT_RETENTION, 0, 0},
    {"ready-file", 0, OB_OPT_STRING, F(ready_file), 0, 0, "FILE",
     "write the bound ports here once serving", NULL, 0, 0, 0},
    {"store-min-free", 0, OB_OPT_SIZE, F(store_min_free), 0, 0, "SIZE",
     "below SIZE free on the state directory's file system\nthe store counts as full: health "
     "NOT_SERVING, submit,\ncancel and delete refused (UNAVAILABLE / 503) until\nthere is room "
     "again [16M; 0: only failed writes]",
     NULL, 0, 0, 0},
    {"max-job-memory", 0, OB_OPT_SIZE, F(max_job_memory), 0, 0, "SIZE",
     "refuse at submit a job whose ranks would need more than\nSIZE in all (ranks x the spec's "
     "memory estimate)\n[local: half of MemTotal; other launchers: 0, none]",
     NULL, 0, 0, 0},
    {"max-upload-size", 0, OB_OPT_SIZE, F(max_upload), 1 << 10, 1 << 30, "SIZE",
     "the most bytes a submit may upload with a program job\n(onebitctl submit --program), its "
     "files in all; one\nmore is refused at submit, the limit named. The\nfiles are kept with "
     "the job until it is deleted\n[64M; 1K to 1G]",
     NULL, 0, 0, 0},
    {"worker-memory-limit", 0, OB_OPT_CUSTOM, F(worker_memory_limit), 0, 0, "SIZE|auto|0",
     "the most private memory (RLIMIT_DATA) mpirun and each\nrank on this machine may map; a job "
     "that runs out of it\nFAILS without restarts ('out of memory'). auto: twice\nthe job's "
     "per-rank estimate + 1 GiB; 0: none; at least\n1G [auto; local and hosts launchers only]. "
     "Workers\nnever write core files",
     NULL, OPT_WORKER_MEMORY, F(worker_memory_given), 0},
    {"help", 'h', OB_OPT_ACTION, 0, 0, 0, NULL, "print this help and exit", NULL, OPT_HELP, 0, 0},
    {"version", 0, OB_OPT_ACTION, 0, 0, 0, NULL, "print the release and exit", NULL, OPT_VERSION, 0,
     0},
    {"man", 0, OB_OPT_ACTION, 0, 0, 0, NULL, "print the man page, onebitd(8), in roff", NULL,
     OPT_MAN, 0, 1},
    {"data-root", 0, OB_OPT_LIST, F(data_roots), 0, 16, "DIR",
     "jobs may read data only under DIR (repeatable)\n[/usr/share/datasets, "
     "/usr/share/games/fortunes,\nSTATE/data; / for anywhere]",
     NULL, 0, F(n_data_roots), 0},
    {"checkpoint-root", 0, OB_OPT_LIST, F(checkpoint_roots), 0, 16, "DIR",
     "jobs may warm-start only from under DIR (repeatable)\n[STATE/checkpoints]", NULL, 0,
     F(n_checkpoint_roots), 0},
    {"launcher", 0, OB_OPT_STRING, F(launcher), 0, 0, "KIND",
     "local (mpirun here), hosts (mpirun across --hosts),\nslurm (a batch job per attempt) or "
     "kubernetes\n(an MPIJob per attempt) [local]",
     "ONEBIT_LAUNCHER", 0, 0, 0},
    {"report-addr", 0, OB_OPT_STRING, F(report_addr), 0, 0, "HOST:PORT",
     "where workers reach this gRPC server\n[127.0.0.1:<gRPC port>]", NULL, 0, 0, 0},
    {"hosts", 0, OB_OPT_STRING, F(hosts), 0, 0, "NAME:SLOTS,...",
     "hosts: the machines and their ranks;\n--slots defaults to their sum", "ONEBIT_HOSTS", 0, 0,
     0},
    {"ssh-agent", 0, OB_OPT_STRING, F(ssh_agent), 0, 0, "CMD",
     "hosts: how mpirun reaches them (plm_rsh_agent) [ssh]", NULL, 0, 0, 0},
    {"mpi-net", 0, OB_OPT_STRING, F(mpi_net), 0, 0, "NET,...",
     "hosts: the network MPI uses between them, CIDRs or\ninterfaces (btl_tcp_if_include, "
     "oob_tcp_if_include)\n[every interface but loopback]",
     "ONEBIT_MPI_NET", 0, 0, 0},
    {"slurm-partition", 0, OB_OPT_STRING, F(slurm_partition), 0, 0, "P",
     "slurm: sbatch --partition [the cluster's default]", NULL, 0, 0, 0},
    {"slurm-arg", 0, OB_OPT_LIST, F(slurm_args), 0, 32, "ARG",
     "slurm: one more sbatch option, e.g. --time=4:00:00\n(repeatable)", NULL, 0, F(n_slurm_args),
     0},
    {"slurm-mpi", 0, OB_OPT_STRING, F(slurm_mpi), 0, 0, "TYPE", "slurm: srun --mpi=TYPE [pmix]",
     NULL, 0, 0, 0},
    {"slurm-bin", 0, OB_OPT_STRING, F(slurm_bin), 0, 0, "DIR",
     "slurm: where sbatch, squeue, scancel, sacct, srun are\n[PATH]", NULL, 0, 0, 0},
    {"slurm-poll", 0, OB_OPT_SECONDS, F(slurm_poll_s), 0, 1000000, "SEC",
     "slurm: ask squeue about a job at most this often [1]", NULL, 0, 0, 0},
    {"kubeconfig", 0, OB_OPT_STRING, F(kubeconfig), 0, 0, "FILE",
     "kubernetes: API server and token from FILE\n[in the cluster: the service account]",
     "ONEBIT_KUBECONFIG", 0, 0, 0},
    {"k8s-namespace", 0, OB_OPT_STRING, F(k8s_namespace), 0, 0, "NS",
     "kubernetes: where the MPIJobs go [the kubeconfig's\nor the pod's namespace, else default]",
     NULL, 0, F(k8s_given), 0},
    {"k8s-image", 0, OB_OPT_STRING, F(k8s_image), 0, 0, "IMAGE", "kubernetes: the worker image",
     "ONEBIT_K8S_IMAGE", 0, 0, 0},
    {"k8s-image-python", 0, OB_OPT_STRING, F(k8s_image_python), 0, 0, "yes|no",
     "kubernetes: whether the worker image has python3 for\nprogram jobs (docker/Dockerfile's "
     "has) [yes]",
     NULL, 0, F(k8s_given), 0},
    {"k8s-pull-policy", 0, OB_OPT_STRING, F(k8s_pull), 0, 0, "P",
     "kubernetes: IfNotPresent, Always or Never [IfNotPresent]", NULL, 0, F(k8s_given), 0},
    {"k8s-checkpoint-claim", 0, OB_OPT_STRING, F(k8s_claim), 0, 0, "C",
     "kubernetes: the ReadWriteMany claim mounted at the\ncheckpoint directory in every pod",
     "ONEBIT_K8S_CHECKPOINT_CLAIM", 0, 0, 0},
    {"k8s-service-account", 0, OB_OPT_STRING, F(k8s_sa), 0, 0, "SA",
     "kubernetes: the service account of the MPIJobs' pods", NULL, 0, F(k8s_given), 0},
    {"k8s-slots-per-worker", 0, OB_OPT_INT, F(k8s_slots_per_worker), 1, 1024, "N",
     "kubernetes: ranks (and GPUs) per worker pod [1]", NULL, 0, F(k8s_given), 0},
    {"k8s-cpu", 0, OB_OPT_STRING, F(k8s_cpu), 0, 0, "Q",
     "kubernetes: CPU request per worker pod [1]", NULL, 0, F(k8s_given), 0},
    {"k8s-memory", 0, OB_OPT_STRING, F(k8s_memory), 0, 0, "Q",
     "kubernetes: memory request per worker pod [1Gi]", NULL, 0, F(k8s_given), 0},
    {"k8s-pending-timeout", 0, OB_OPT_INT, F(k8s_pending_s), 0, 1000000, "SEC",
     "kubernetes: end an attempt whose pods cannot be\nscheduled or pull their image for SEC "
     "[300; 0: never]",
     NULL, 0, F(k8s_given), 0},
    {"k8s-ttl", 0, OB_OPT_INT, F(k8s_ttl_s), 1, 100000000, "SEC",
     "kubernetes: keep ended MPIJobs this long [86400]", NULL, 0, F(k8s_given), 0},
    {"k8s-watch-idle", 0, OB_OPT_INT, F(k8s_watch_idle_s), 2, 3600, "SEC",
     "kubernetes: a watch or pod log that sends nothing this\nlong is taken for dead and made "
     "again [90]",
     NULL, 0, F(k8s_given), 0},
    {"k8s-worker-log-max", 0, OB_OPT_INT, F(k8s_worker_log_max), 1024, 1 << 30, "BYTES",
     "kubernetes: copied from each worker pod's log per\nattempt [8388608]", NULL, 0, F(k8s_given),
     0},
};

/* ---- help and man page -------------------------------------------------------------------------
 */

static void usage(FILE *f)
{
    fprintf(f, "usage: onebitd [options]\n");
    ob_opt_print_help(f, table, N(table), 26);
}

static void print_man(FILE *f)
{
    fprintf(f, ".TH ONEBITD 8 \"\" \"onebit %s\" \"System Administration\"\n", ONEBIT_VERSION);
    fputs(".SH NAME\nonebitd \\- the onebit training service's coordinator\n"
          ".SH SYNOPSIS\n.B onebitd\n[\\fIOPTIONS\\fR]\n"
          ".SH DESCRIPTION\n.B onebitd\nserves JobService, WorkerService and Health over gRPC and "
          "the same operations over REST, keeps jobs in a SQLite store under the state "
          "directory, launches their workers (\\fBonebit\\-worker\\fR(1) under mpirun on this "
          "machine or across \\fB\\-\\-hosts\\fR, Slurm batch jobs or Kubernetes MPIJobs: "
          "\\fB\\-\\-launcher\\fR) and supervises them. It stops cleanly on SIGTERM or SIGINT. "
          "Every option given as a flag wins over its environment variable.\n"
          ".SH OPTIONS\n",
          f);
    ob_opt_print_man(f, table, N(table));
    fputs(".SH ENVIRONMENT\n", f);
    for (size_t i = 0; i < N(table); i++) {
        if (!table[i].env) continue;
        fprintf(f, ".TP\n.B %s\nas \\fB\\-\\-", table[i].env);
        ob_opt_roff(f, table[i].name);
        fputs("\\fR when it is not given\n", f);
    }
    fputs(".TP\n.B ONEBIT_TOKEN\nthe API token itself, when \\fB\\-\\-token\\-file\\fR is not "
          "given\n"
          ".SH EXIT STATUS\n0 after a clean shutdown, 1 when the service cannot start, 2 for a "
          "bad command line.\n"
          ".SH SEE ALSO\n\\fBonebitctl\\fR(1), \\fBonebit\\-worker\\fR(1), "
          "\\fBonebit\\-ckpt\\fR(1)\n",
          f);
}

/* ---- values ------------------------------------------------------------------------------------
 */

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

static int parse_secs(const char *flag, const char *v, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!v[0] || *end || errno || !(x >= 0) || x > hi) {
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

/* The options onebitd converts itself: --retention-days and --worker-memory-limit. */
static int set_custom(const ob_opt *r, const char *name, const char *v, opts *o)
{
    if (r->id == OPT_WORKER_MEMORY) {
        ob_err perr;
        ob_err_clear(&perr);
        if (ob_worker_memory_limit_parse(v, &o->worker_memory_limit, &perr) == OB_OK) return 0;
        fprintf(stderr, "onebitd: %s\n", perr.msg);
        return -1;
    }
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!v[0] || *end || errno || !(d >= 0) || d > (double)r->hi) {
        fprintf(stderr, "onebitd: %s: expected days from 0 to %lld, got '%s'\n", name, r->hi, v);
        return -1;
    }
    o->retention_days = d;
    return 0;
}

/* Converts v, the value of r given as name (--flag or the environment variable), into o.
 * Returns 0, or -1 with a message. */
static int set_option(const ob_opt *r, const char *name, const char *v, opts *o)
{
    void *dest = ob_opt_dest(r, o);
    int bad = 0;
    switch (r->kind) {
    case OB_OPT_FLAG:
        *(int *)dest = 1;
        break;
    case OB_OPT_STRING:
    case OB_OPT_DURATION:
        *(const char **)dest = v;
        break;
    case OB_OPT_INT:
        bad = parse_int(name, v, (int)r->lo, (int)r->hi, dest);
        break;
    case OB_OPT_SECONDS:
        bad = parse_secs(name, v, (double)r->hi, dest);
        break;
    case OB_OPT_SIZE:
        bad = parse_size(name, v, dest);
        if (!bad && r->hi && (*(int64_t *)dest < r->lo || *(int64_t *)dest > r->hi)) {
            fprintf(stderr, "onebitd: %s: expected %lld to %lld bytes, got %s\n", name, r->lo,
                    r->hi, v);
            bad = -1;
        }
        break;
    case OB_OPT_LIST: {
        const char **list = dest;
        int *n = (int *)((char *)o + r->aux);
        if (*n >= r->hi) {
            fprintf(stderr, "onebitd: %s: at most %lld of them\n", name, r->hi);
            return -1;
        }
        list[(*n)++] = v;
        list[*n] = NULL;
        return 0;
    }
    default:
        bad = set_custom(r, name, v, o);
    }
    if (r->aux) *(int *)((char *)o + r->aux) = 1; /* given */
    return bad;
}

/* ---- defaults and the environment -------------------------------------------------------------
 */

/* The defaults, then the environment's values. Returns 0, or 2 with a message. */
static int set_defaults(opts *o)
{
    o->mpirun = "mpirun";
    o->grpc_addr = "127.0.0.1:50051";
    o->rest_addr = "127.0.0.1:8080";
    o->state_dir = "./var";
    /* GPU jobs get one rank per visible GPU: that many slots at least. */
    o->gpus = ob_visible_gpus();
    o->slots = o->gpus > 4 ? o->gpus : 4;
    o->max_restarts = 3;
    o->threads = 4;
    o->backoff_s = 1;
    o->backoff_max_s = 60;
    o->grace_s = 10;
    o->launcher = "local";
    o->slurm_poll_s = 1;
    o->k8s_pending_s = 300;
    o->store_min_free = (int64_t)16 << 20;
    o->max_job_memory = -1;
    o->worker_memory_limit = OB_WORKER_MEMORY_AUTO;
    for (size_t i = 0; i < N(table); i++) {
        const ob_opt *r = &table[i];
        if (!r->env) continue;
        if (r->kind == OB_OPT_STRING) { /* an empty variable counts as unset */
            const char **dest = ob_opt_dest(r, o);
            *dest = env_or(r->env, *dest);
        } else if (getenv(r->env) && set_option(r, r->env, getenv(r->env), o)) {
            return 2;
        }
    }
    return 0;
}

/* ---- checks ------------------------------------------------------------------------------------
 */

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

/* The launcher's options go with their launcher; --report-addr is HOST:PORT; TLS and the
 * plaintext rules (check_tls_args). Returns 0, or 2 with a message. */
static int check_args(opts *o)
{
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
    if (o->k8s_image_python && strcmp(o->k8s_image_python, "yes") &&
        strcmp(o->k8s_image_python, "no")) {
        fprintf(stderr, "onebitd: --k8s-image-python: expected yes or no, got '%s'\n",
                o->k8s_image_python);
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

/* Reads the options into o, after the defaults and the environment. Returns -1 to go on, 1
 * after --help, --version or --man, 2 after a mistake (message printed). */
static int read_options(int argc, char **argv, opts *o)
{
    struct option longopts[N(table) + 1];
    char shortopts[16] = ":";
    size_t nlong = 0;
    longopts[0] = (struct option){0};
    ob_opt_getopt(longopts, &nlong, N(table) + 1, shortopts, sizeof shortopts, table, N(table),
                  256);
    opterr = 0; /* our own messages */
    int c;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const ob_opt *r = c >= 256   ? &table[c - 256]
                          : c == 'h' ? ob_opt_find(table, N(table), "h")
                                     : NULL;
        if (!r) {
            if (c == ':')
                fprintf(stderr, "onebitd: %s needs a value\n", argv[optind - 1]);
            else
                fprintf(stderr, "onebitd: unknown argument '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
        if (r->kind == OB_OPT_ACTION) {
            if (r->id == OPT_HELP)
                usage(stdout);
            else if (r->id == OPT_VERSION)
                printf("onebitd %s (api onebit.v1)\n", ONEBIT_VERSION);
            else
                print_man(stdout);
            return 1;
        }
        char name[64];
        snprintf(name, sizeof name, "--%s", r->name);
        if (set_option(r, name, optarg, o)) return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "onebitd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    return -1;
}

int onebitd_parse_args(int argc, char **argv, opts *o)
{
    if (set_defaults(o)) return 2;
    int rc = read_options(argc, argv, o);
    return rc >= 0 ? rc : check_args(o);
}
