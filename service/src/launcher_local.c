/* The local launcher: `mpirun -np N [args] onebit-worker ...` started in a new process group
 * (ob__spawn_limited: fork, limits, exec, with only async-signal-safe calls between, as gRPC's
 * threads need), its output appended to the job's log.
 *
 * The processes of an attempt are mpirun's process group plus every process with the attempt's
 * spec path among its arguments (onebit-worker --spec PATH), or, for a program job, in its
 * environment as ONEBIT_JOB_SPEC (the program the worker exec'd in its place): Open MPI starts
 * each rank in a process group of its own, and a rank outlives a coordinator that was killed.
 * SIGTERM goes to the ranks themselves, not to mpirun, so that they can finish their step, write
 * a checkpoint and exit 0 without mpirun cutting them short; SIGKILL goes to all of them. */
#include "onebit/launcher.h"
#include "exec.h"
#include "onebit/base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct local_launcher {
    ob_launcher base;
    char *mpirun;
    char *worker;
    char **mpirun_args; /* NULL-terminated */
    size_t n_mpirun_args;
    int term_via_mpirun; /* ob_local_launcher_config.term_via_mpirun */
} local_launcher;

/* Whether the NUL-separated argument list buf[0..n) holds an argument equal to arg. */
static int has_arg(const char *buf, size_t n, const char *arg)
{
    for (size_t i = 0; i < n;) {
        const char *a = buf + i;
        size_t len = strnlen(a, n - i);
        if (!strcmp(a, arg)) return 1;
        i += len + 1;
    }
    return 0;
}

/* Whether process pid's environment holds ONEBIT_JOB_SPEC=spec (engine/worker/program.c sets it
 * before it execs a program job's interpreter). Environments another user's process keeps from
 * us do not. */
static int has_spec_env(long pid, const char *spec)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/environ", pid);
    static const char key[] = "ONEBIT_JOB_SPEC=";
    char entry[sizeof key + sizeof((ob_launch_handle *)0)->spec_path];
    size_t want = strlen(spec);
    if (sizeof key - 1 + want > sizeof entry) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = 0; /* bytes of the current entry kept in entry (longer ones cannot match) */
    int c, found = 0;
    while (!found && (c = getc(f)) != EOF) {
        if (c != '\0') {
            if (n < sizeof entry) entry[n] = (char)c;
            n++;
            continue;
        }
        found = n == sizeof key - 1 + want && !memcmp(entry, key, sizeof key - 1) &&
                !memcmp(entry + sizeof key - 1, spec, want);
        n = 0;
    }
    fclose(f);
    return found;
}

/* Calls fn(pid, user) for every live process of the attempt: those in mpirun's process group
 * and those with the attempt's spec path among their arguments (the ranks, in groups of their
 * own, and whatever they started with it) or in their environment (a program job's ranks). */
static void for_each_member(const ob_launch_handle *h, void (*fn)(int pid, void *user), void *user)
{
    DIR *d = opendir("/proc");
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char path[64], buf[8192];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, 1023, f);
        fclose(f);
        buf[n] = '\0';
        /* "pid (comm) state ppid pgrp ...": comm may hold spaces, so read after the last ')'. */
        char *p = strrchr(buf, ')');
        char state;
        int ppid, pgrp;
        if (!p || sscanf(p + 1, " %c %d %d", &state, &ppid, &pgrp) != 3 || state == 'Z') continue;
        int member = h->pgid > 1 && pgrp == h->pgid;
        if (!member && h->spec_path[0]) {
            snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
            f = fopen(path, "r");
            if (!f) continue;
            n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = '\0';
            member = has_arg(buf, n, h->spec_path) || has_spec_env(pid, h->spec_path);
        }
        if (member) fn((int)pid, user);
    }
    closedir(d);
}

typedef struct sig_ctx {
    int leader; /* skipped when >0 */
    int sig;
    int sent;
} sig_ctx;

static void signal_one(int pid, void *user)
{
    sig_ctx *t = user;
    if (pid == t->leader) return;
    if (kill(pid, t->sig) == 0) t->sent++;
}

static ob_status local_signal(ob_launcher *l, const ob_launch_handle *h, int sig, ob_err *err)
{
    local_launcher *ll = (local_launcher *)l;
    (void)err;
    if (h->pid <= 0) return OB_OK;
    /* Ranks on other machines are reached through mpirun, which forwards this signal. */
    if (sig == SIGTERM && ll->term_via_mpirun > 0) {
        kill(h->pid, ll->term_via_mpirun);
        return OB_OK;
    }
    /* SIGTERM goes to the ranks only: mpirun would answer it by killing them before their
     * final checkpoint. Without ranks (not started yet, or gone), mpirun itself is told. */
    sig_ctx t = {.leader = sig == SIGTERM ? h->pid : 0, .sig = sig};
    for_each_member(h, signal_one, &t);
    if (sig != SIGTERM || t.sent == 0) {
        kill(h->pid, sig);
        if (h->pgid > 1) kill(-h->pgid, sig);
    }
    return OB_OK;
}

static void count_one(int pid, void *user)
{
    (void)pid;
    (*(int *)user)++;
}

static int local_alive(ob_launcher *l, const ob_launch_handle *h)
{
    (void)l;
    int n = 0;
    for_each_member(h, count_one, &n);
    return n > 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void local_stop_stale(ob_launcher *l, const ob_launch_handle *h, const ob_launch_req *req)
{
    /* Process group ids are reused: only processes that run this job's spec are ours, so the
     * group is left out and the spec path alone identifies them. */
    ob_launch_handle mine;
    memset(&mine, 0, sizeof mine);
    ob_strlcpy(mine.spec_path, req->spec_path, sizeof mine.spec_path);
    (void)h;
    sig_ctx t = {.sig = SIGKILL};
    for_each_member(&mine, signal_one, &t);
    for (int i = 0; i < 100 && local_alive(l, &mine); i++)
        sleep_ms(20);
}

static ob_status local_poll(ob_launcher *l, const ob_launch_handle *h, ob_launch_exit *ex,
                            ob_err *err)
{
    (void)l;
    memset(ex, 0, sizeof *ex);
    ex->exit_code = -1;
    int st = 0;
    pid_t r = waitpid(h->pid, &st, WNOHANG);
    if (r == 0) return OB_OK;
    if (r < 0) {
        if (errno == ECHILD) { /* not our child (any more): done when nothing is left */
            ex->done = !local_alive(l, h);
            return OB_OK;
        }
        return OB_ERR(err, OB_ERR_IO, "waitpid(%d): %s", h->pid, strerror(errno));
    }
    ex->done = 1;
    if (WIFEXITED(st)) ex->exit_code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) ex->term_signal = WTERMSIG(st);
    return OB_OK;
}

static ob_status local_start(ob_launcher *l, const ob_launch_req *req, ob_launch_handle *h,
                             ob_err *err)
{
    local_launcher *ll = (local_launcher *)l;
    ob_status rc = OB_OK;
    char np[16];
    snprintf(np, sizeof np, "%d", req->world_size);
    const char *argv[64];
    size_t a = 0;
    argv[a++] = ll->mpirun;
    argv[a++] = "-np";
    argv[a++] = np;
    /* Every line of the log names its rank ("[1,0]<stdout>:"), for onebitctl logs --rank. */
    argv[a++] = "--tag-output";
    for (size_t i = 0; i < ll->n_mpirun_args && a < 40; i++)
        argv[a++] = ll->mpirun_args[i];
    a = ob__worker_argv(argv, a, ll->worker, req);

    char report_var[160] = "";
    if (req->report_token && req->report_token[0] &&
        (size_t)snprintf(report_var, sizeof report_var, "ONEBIT_REPORT_TOKEN=%s",
                         req->report_token) >= sizeof report_var)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "job %s: report credential too long", req->job_id);
    char **env = ob__child_env(report_var);
    if (!env) return OB_ERR(err, OB_ERR_NOMEM, "environment for job %s", req->job_id);
    /* A process group of its own (pgid = its pid): cancel and restart signal all of it. No core
     * files, and req->memory_limit on mpirun, which every rank it starts here inherits. */
    ob__spawn_req sr = {
        .argv = argv, .env = env, .log_path = req->log_path, .memory_limit = req->memory_limit};
    pid_t pid;
    ob_err serr;
    ob_err_clear(&serr);
    if (ob__spawn_limited(&sr, &pid, &serr) != OB_OK) {
        if (err) *err = serr;
        rc = OB_WRAP(err, OB_ERR_IO, "starting %s for job %s", ll->mpirun, req->job_id);
    } else {
        h->pid = pid;
        h->pgid = pid;
        ob_strlcpy(h->spec_path, req->spec_path, sizeof h->spec_path);
    }
    free(env);
    return rc;
}

static void local_destroy(ob_launcher *l)
{
    local_launcher *ll = (local_launcher *)l;
    if (!ll) return;
    free(ll->mpirun);
    free(ll->worker);
    for (size_t i = 0; i < ll->n_mpirun_args; i++)
        free(ll->mpirun_args[i]);
    free(ll->mpirun_args);
    free(ll);
}

static const ob_launcher_ops local_ops = {
    .start = local_start,
    .poll = local_poll,
    .signal = local_signal,
    .alive = local_alive,
    .stop_stale = local_stop_stale,
    .destroy = local_destroy,
};

ob_status ob_local_launcher_create(ob_launcher **out, const ob_local_launcher_config *cfg,
                                   ob_err *err)
{
    *out = NULL;
    local_launcher *ll = calloc(1, sizeof *ll);
    if (!ll) return OB_ERR(err, OB_ERR_NOMEM, "allocating the local launcher");
    ll->base.ops = &local_ops;
    ll->term_via_mpirun = cfg->term_via_mpirun;
    size_t n = 0;
    while (cfg->mpirun_args && cfg->mpirun_args[n])
        n++;
    if (n > 32) {
        local_destroy(&ll->base);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "at most 32 extra mpirun arguments, got %zu", n);
    }
    ll->mpirun = strdup(cfg->mpirun ? cfg->mpirun : "mpirun");
    ll->worker = strdup(cfg->worker ? cfg->worker : "onebit-worker");
    ll->mpirun_args = calloc(n + 1, sizeof *ll->mpirun_args);
    if (!ll->mpirun || !ll->worker || !ll->mpirun_args) goto fail;
    for (size_t i = 0; i < n; i++) {
        if (!(ll->mpirun_args[i] = strdup(cfg->mpirun_args[i]))) goto fail;
        ll->n_mpirun_args++;
    }
    *out = &ll->base;
    return OB_OK;
fail:
    local_destroy(&ll->base);
    return OB_ERR(err, OB_ERR_NOMEM, "allocating the local launcher");
}

int ob_visible_gpus(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v) {
        if (!v[0] || !strcmp(v, "NoDevFiles")) return 0;
        int n = 0;
        for (const char *p = v; *p;) {
            size_t len = strcspn(p, ",");
            /* CUDA stops at the first invalid entry; "-1" hides every device. */
            if (len == 0 || (len == 2 && !strncmp(p, "-1", 2))) break;
            n++;
            p += len;
            if (*p == ',') p++;
        }
        return n;
    }
    int n = 0;
    DIR *d = opendir("/dev");
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        if (strncmp(name, "nvidia", 6) != 0 || !name[6]) continue;
        if (strspn(name + 6, "0123456789") == strlen(name + 6)) n++;
    }
    closedir(d);
    return n;
}

void ob_launcher_destroy(ob_launcher *l)
{
    if (l) l->ops->destroy(l);
}

ob_status ob_launcher_check_job(const ob_launcher *l, const ob_jobspec *spec, size_t n_files,
                                ob_err *err)
{
    if (!l || !l->ops->check_job) return OB_OK;
    return l->ops->check_job(l, spec, n_files, err);
}
