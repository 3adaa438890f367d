/* onebitd: the onebit coordinator. Serves JobService/WorkerService/Health over gRPC and the same
 * operations over REST, keeps jobs in a SQLite store under the state directory, launches their
 * workers with mpirun and supervises them. Stops cleanly on SIGTERM or SIGINT.
 *
 *   onebitd [--grpc HOST:PORT] [--rest HOST:PORT] [--state-dir DIR] [--slots N] ...
 *
 * Every option also reads an environment variable (flags win); see usage(). Exit status: 0
 * after a clean shutdown, 1 when the service cannot start, 2 for a bad command line. */
#include "onebit/launcher.h"
#include "onebit/servers.h"
#include "onebit/service.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct opts {
    const char *grpc_addr, *rest_addr, *state_dir, *token_file, *worker, *mpirun, *ready_file;
    int slots, max_restarts, threads, gpus;
    double progress_timeout_s, backoff_s, backoff_max_s, grace_s;
} opts;

static void usage(FILE *f)
{
    fprintf(f, "usage: onebitd [options]\n"
               "  --grpc HOST:PORT        gRPC address [127.0.0.1:50051] (ONEBIT_GRPC_ADDR)\n"
               "  --rest HOST:PORT        REST address [127.0.0.1:8080] (ONEBIT_REST_ADDR)\n"
               "  --state-dir DIR         job store, logs, checkpoints [./var] (ONEBIT_STATE_DIR)\n"
               "  --token-file FILE       require this bearer token on every call\n"
               "                          (ONEBIT_TOKEN gives the token itself)\n"
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
               "  --ready-file FILE       write the bound ports here once serving\n");
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
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!v || strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "onebitd: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        int bad = 0;
        if (!strcmp(a, "--grpc"))
            o->grpc_addr = v;
        else if (!strcmp(a, "--rest"))
            o->rest_addr = v;
        else if (!strcmp(a, "--state-dir"))
            o->state_dir = v;
        else if (!strcmp(a, "--token-file"))
            o->token_file = v;
        else if (!strcmp(a, "--worker"))
            o->worker = v;
        else if (!strcmp(a, "--mpirun"))
            o->mpirun = v;
        else if (!strcmp(a, "--ready-file"))
            o->ready_file = v;
        else if (!strcmp(a, "--slots"))
            bad = parse_int(a, v, 1, 100000, &o->slots);
        else if (!strcmp(a, "--max-restarts"))
            bad = parse_int(a, v, 0, 100, &o->max_restarts);
        else if (!strcmp(a, "--threads"))
            bad = parse_int(a, v, 1, 256, &o->threads);
        else if (!strcmp(a, "--progress-timeout"))
            bad = parse_secs(a, v, &o->progress_timeout_s);
        else if (!strcmp(a, "--backoff"))
            bad = parse_secs(a, v, &o->backoff_s);
        else if (!strcmp(a, "--backoff-max"))
            bad = parse_secs(a, v, &o->backoff_max_s);
        else if (!strcmp(a, "--cancel-grace"))
            bad = parse_secs(a, v, &o->grace_s);
        else {
            fprintf(stderr, "onebitd: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (bad) return 2;
    }
    return 0;
}

/* The token from --token-file (first line, surrounding white space dropped) or ONEBIT_TOKEN. */
static int load_token(const opts *o, char *tok, size_t cap)
{
    tok[0] = '\0';
    if (o->token_file) {
        FILE *f = fopen(o->token_file, "r");
        if (!f) {
            fprintf(stderr, "onebitd: --token-file %s: %s\n", o->token_file, strerror(errno));
            return -1;
        }
        if (!fgets(tok, (int)cap, f)) tok[0] = '\0';
        fclose(f);
        size_t n = strlen(tok);
        while (n && (tok[n - 1] == '\n' || tok[n - 1] == '\r' || tok[n - 1] == ' '))
            tok[--n] = 0;
        if (!n) {
            fprintf(stderr, "onebitd: --token-file %s: the file holds no token\n", o->token_file);
            return -1;
        }
        return 0;
    }
    const char *e = getenv("ONEBIT_TOKEN");
    if (e) snprintf(tok, cap, "%s", e);
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

int main(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;
    char token[512];
    if (load_token(&o, token, sizeof token) != 0) return 2;
    /* Workers report with the same token. */
    if (token[0]) setenv("ONEBIT_TOKEN", token, 1);
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
    static const char *const mpi_args[] = {"--oversubscribe", NULL};
    ob_local_launcher_config lc = {.mpirun = o.mpirun, .worker = worker, .mpirun_args = mpi_args};
    if (ob_local_launcher_create(&launcher, &lc, &err)) goto fail;
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
    cfg.on_state = log_state;
    if (ob_service_create(&svc, &cfg, &err)) goto fail;
    int grpc_port = 0, rest_port = 0;
    if (ob_grpc_server_start(&grpc, svc, o.grpc_addr, token, o.threads, &grpc_port, &err))
        goto fail;
    if (ob_rest_server_start(&rest, svc, o.rest_addr, token, &rest_port, &err)) goto fail;
    /* Workers run on this machine: they reach the gRPC port over loopback. */
    char report[64];
    snprintf(report, sizeof report, "127.0.0.1:%d", grpc_port);
    if (ob_service_set_report_addr(svc, report, &err)) goto fail;
    if (ob_service_start(svc, &err)) goto fail;
    fprintf(stderr,
            "onebitd: serving gRPC on port %d, REST on port %d, state in %s, %d slots, "
            "default ranks per job: %d\n",
            grpc_port, rest_port, o.state_dir, o.slots, cfg.default_world_size);
    if (o.ready_file) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s.tmp", o.ready_file);
        FILE *f = fopen(tmp, "w");
        if (f) {
            fprintf(f, "grpc=%d\nrest=%d\npid=%d\n", grpc_port, rest_port, (int)getpid());
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
    return rc;
}
