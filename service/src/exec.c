/* Running helper programs with an argument vector and bounded output (exec.h), and the
 * environment every launcher gives what it starts. */
#define _GNU_SOURCE /* pipe2 */
#include "exec.h"
#include "onebit/base.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Variables of ours the children must not inherit: the admin token gives every right over every
 * job, and a worker needs only its attempt's report credential. */
static int withheld(const char *var)
{
    static const char *const names[] = {"ONEBIT_TOKEN=", "ONEBIT_REPORT_TOKEN="};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strncmp(var, names[i], strlen(names[i]))) return 1;
    return 0;
}

char **ob__child_env(const char *report_var)
{
    static const char *const extra[] = {
        "OMPI_MCA_btl_vader_single_copy_mechanism=none",
        "OMPI_MCA_mpi_yield_when_idle=1",
        "OPENBLAS_NUM_THREADS=1",
        "OMPI_ALLOW_RUN_AS_ROOT=1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
    };
    size_t n_extra = sizeof extra / sizeof extra[0];
    if (geteuid() != 0) n_extra -= 2;
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + n_extra + 2, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!withheld(environ[i])) env[k++] = environ[i];
    for (size_t i = 0; i < n_extra; i++) {
        size_t keylen = (size_t)(strchr(extra[i], '=') - extra[i]);
        int present = 0;
        for (size_t j = 0; j < n && !present; j++)
            present = !strncmp(environ[j], extra[i], keylen + 1);
        if (!present) env[k++] = (char *)extra[i];
    }
    if (report_var && report_var[0]) env[k++] = (char *)report_var;
    env[k] = NULL;
    return env;
}

void ob__first_line(const char *text, char *out, size_t cap)
{
    size_t k = 0;
    if (cap == 0) return;
    while (*text == '\n' || *text == ' ')
        text++;
    for (; *text && *text != '\n' && k + 1 < cap; text++)
        out[k++] = (unsigned char)*text < 0x20 || *text == 0x7f ? ' ' : *text;
    out[k] = '\0';
}

/* Appends what fd has to buf (keeping room for the NUL); 0 at end of file. */
static int drain(int fd, char *buf, size_t cap, size_t *len, int *truncated)
{
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0) return errno == EINTR || errno == EAGAIN ? 1 : 0;
    if (n == 0) return 0;
    size_t room = cap > *len + 1 ? cap - *len - 1 : 0;
    size_t take = (size_t)n < room ? (size_t)n : room;
    if (take) memcpy(buf + *len, tmp, take);
    *len += take;
    if (take < (size_t)n) *truncated = 1;
    return 1;
}

ob_status ob__exec(const char *const *argv, char *const *env, int timeout_ms, char *out,
                   size_t out_cap, char *errout, size_t err_cap, ob__exec_result *res, ob_err *err)
{
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    if (out_cap) out[0] = '\0';
    if (err_cap) errout[0] = '\0';
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
        int e = errno;
        for (int i = 0; i < 2; i++) {
            if (po[i] >= 0) close(po[i]);
            if (pe[i] >= 0) close(pe[i]);
        }
        return OB_ERR(err, OB_ERR_IO, "pipe for %s: %s", argv[0], strerror(e));
    }
    char **own_env = env ? NULL : ob__child_env("");
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    /* The coordinator's blocked signals and ignored dispositions are not passed on. */
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGCHLD};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaddset(&dfl, sigs[i]);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int e = (env || own_env)
                ? posix_spawnp(&pid, argv[0], &fa, &at, (char *const *)argv, env ? env : own_env)
                : ENOMEM;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(own_env);
    close(po[1]);
    close(pe[1]);
    if (e != 0) {
        close(po[0]);
        close(pe[0]);
        return OB_ERR(err, OB_ERR_IO, "starting %s: %s", argv[0], strerror(e));
    }
    size_t olen = 0, elen = 0;
    char discard[1];
    int ignored = 0; /* output nobody asked for is not "truncated" */
    int open_fds = 2;
    struct pollfd pf[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
    int64_t deadline = ob_wall_ms() + (timeout_ms > 0 ? timeout_ms : 30000);
    while (open_fds > 0) {
        int64_t left = deadline - ob_wall_ms();
        if (left <= 0) {
            res->timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        int n = poll(pf, 2, (int)(left < 1000 ? left : 1000));
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < 2 && n > 0; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int more = i == 0 ? drain(pf[i].fd, out_cap ? out : discard, out_cap ? out_cap : 1,
                                      &olen, out_cap ? &res->truncated : &ignored)
                              : drain(pf[i].fd, err_cap ? errout : discard, err_cap ? err_cap : 1,
                                      &elen, err_cap ? &res->truncated : &ignored);
            if (!more) {
                close(pf[i].fd);
                pf[i].fd = -1;
                open_fds--;
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (pf[i].fd >= 0) close(pf[i].fd);
    if (out_cap) out[olen < out_cap ? olen : out_cap - 1] = '\0';
    if (err_cap) errout[elen < err_cap ? elen : err_cap - 1] = '\0';
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR)
            return OB_ERR(err, OB_ERR_IO, "waitpid(%s): %s", argv[0], strerror(errno));
    }
    if (WIFEXITED(st) && !res->timed_out) res->exit_code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) res->term_signal = WTERMSIG(st);
    return OB_OK;
}

/* The program file for name (a path when it holds '/', else the first executable entry of
 * the PATH in env) into out[cap]; found in the parent so that the child only calls execve. */
static int find_program(const char *name, char *const *env, char *out, size_t cap)
{
    if (strchr(name, '/')) return (size_t)snprintf(out, cap, "%s", name) < cap ? 0 : ENAMETOOLONG;
    const char *path = "/usr/local/bin:/usr/bin:/bin";
    for (size_t i = 0; env[i]; i++)
        if (!strncmp(env[i], "PATH=", 5)) path = env[i] + 5;
    for (const char *p = path;;) {
        size_t len = strcspn(p, ":");
        int n = len ? snprintf(out, cap, "%.*s/%s", (int)len, p, name)
                    : snprintf(out, cap, "./%s", name);
        struct stat st;
        if (n > 0 && (size_t)n < cap && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
            access(out, X_OK) == 0)
            return 0;
        if (!p[len]) return ENOENT;
        p += len + 1;
    }
}

/* Which step of the child failed, for the parent's message. */
static const char *const spawn_steps[] = {"",
                                          "setpgid",
                                          "opening /dev/null",
                                          "opening the log",
                                          "dup2",
                                          "setrlimit(RLIMIT_CORE)",
                                          "setrlimit(RLIMIT_DATA)",
                                          "execve"};

/* The child's side of ob__spawn_limited: only async-signal-safe calls. Reports the failing step
 * and errno on fd (close-on-exec: nothing arrives when execve succeeds). */
static void spawn_child(const ob__spawn_req *req, const char *file, int fd)
{
    int step = 1;
    struct rlimit rl;
    if (setpgid(0, 0) != 0) goto fail;
    const int dfl[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGCHLD};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (size_t i = 0; i < sizeof dfl / sizeof dfl[0]; i++)
        sigaction(dfl[i], &sa, NULL);
    step = 2;
    int in = open("/dev/null", O_RDONLY);
    if (in < 0) goto fail;
    step = 3;
    int out = open(req->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (out < 0) goto fail;
    step = 4;
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) goto fail;
    if (in > 2) close(in);
    if (out > 2) close(out);
    step = 5;
    rl.rlim_cur = rl.rlim_max = 0;
    if (setrlimit(RLIMIT_CORE, &rl) != 0) goto fail;
    step = 6;
    if (req->memory_limit && getrlimit(RLIMIT_DATA, &rl) == 0) {
        rlim_t want = (rlim_t)req->memory_limit;
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) want = rl.rlim_max;
        rl.rlim_cur = rl.rlim_max = want; /* hard too: the ranks cannot raise it */
        if (setrlimit(RLIMIT_DATA, &rl) != 0) goto fail;
    }
    step = 7;
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(file, (char *const *)req->argv, req->env);
fail:;
    int report[2] = {step, errno};
    ssize_t w = write(fd, report, sizeof report);
    (void)w;
    _exit(127);
}

ob_status ob__spawn_limited(const ob__spawn_req *req, pid_t *pid, ob_err *err)
{
    char file[PATH_MAX];
    int e = find_program(req->argv[0], req->env, file, sizeof file);
    if (e) return OB_ERR(err, OB_ERR_IO, "%s", strerror(e));
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return OB_ERR(err, OB_ERR_IO, "pipe: %s", strerror(errno));
    /* Every signal blocked across fork: no handler of the coordinator runs in the child. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t p = fork();
    if (p == 0) {
        close(fds[0]);
        spawn_child(req, file, fds[1]);
    }
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(fds[1]);
    if (p < 0) {
        close(fds[0]);
        return OB_ERR(err, OB_ERR_IO, "fork: %s", strerror(e));
    }
    int report[2] = {0, 0};
    ssize_t n;
    do
        n = read(fds[0], report, sizeof report);
    while (n < 0 && errno == EINTR);
    close(fds[0]);
    if (n == (ssize_t)sizeof report) {
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
            ;
        int step = report[0] > 0 && report[0] < 8 ? report[0] : 7;
        /* execve's error reads as the program's ("No such file or directory"); the others name
         * their step. */
        if (step == 7) return OB_ERR(err, OB_ERR_IO, "%s", strerror(report[1]));
        return OB_ERR(err, OB_ERR_IO, "%s: %s", spawn_steps[step], strerror(report[1]));
    }
    *pid = p;
    return OB_OK;
}

ob_status ob__write_file_atomic(const char *path, const char *text, ob_err *err)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "path too long: %s", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return OB_ERR(err, OB_ERR_IO, "creating %s: %s", tmp, strerror(errno));
    int bad = fputs(text, f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return OB_ERR(err, OB_ERR_IO, "writing %s: %s", path, strerror(e));
    }
    return OB_OK;
}

size_t ob__worker_argv(const char **argv, size_t a, const char *worker, const ob_launch_req *req)
{
    argv[a++] = worker;
    argv[a++] = "--spec";
    argv[a++] = req->spec_path;
    argv[a++] = "--format";
    argv[a++] = "json";
    argv[a++] = "--job-id";
    argv[a++] = req->job_id;
    argv[a++] = "--checkpoint-dir";
    argv[a++] = req->checkpoint_dir;
    if (req->resume) argv[a++] = "--resume";
    if (req->report_addr && req->report_addr[0]) {
        argv[a++] = "--report";
        argv[a++] = req->report_addr;
    }
    argv[a] = NULL;
    return a;
}
