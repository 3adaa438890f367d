/* Running the launchers' helper programs (sbatch, squeue, scancel, sacct) and building the
 * environment of everything the launchers start. Private to the service module.
 *
 * Programs are started with posix_spawnp and an argument vector, never through a shell, so no
 * job id, path or name is ever parsed as shell syntax. Output is collected into caller-owned
 * buffers of fixed size (longer output is cut, and says so) and a program that outlives its
 * time limit is killed: the supervisor calls these with the service lock held. */
#ifndef ONEBIT_SERVICE_EXEC_H
#define ONEBIT_SERVICE_EXEC_H

#include "onebit/launcher.h"
#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The result of one program run. */
typedef struct ob__exec_result {
    int exit_code;   /* its exit status; -1 when a signal ended it or it timed out */
    int term_signal; /* the signal that ended it; 0 */
    int timed_out;   /* killed after the time limit */
    int truncated;   /* stdout or stderr did not fit in its buffer */
} ob__exec_result;

/* Runs argv (argv[0] searched in PATH; NULL-terminated; borrowed) with env (NULL-terminated,
 * borrowed; NULL: ob__child_env's default without a report credential), stdin from /dev/null,
 * stdout into out[out_cap] and stderr into errout[err_cap] (both NUL-terminated; either may be
 * NULL with cap 0 to discard), killing it with SIGKILL after timeout_ms. OB_OK once it has run
 * (look at *res for how it ended); OB_ERR_IO when it cannot be started. */
ob_status ob__exec(const char *const *argv, char *const *env, int timeout_ms, char *out,
                   size_t out_cap, char *errout, size_t err_cap, ob__exec_result *res, ob_err *err);

/* How ob__spawn_limited starts a launcher's process. Every pointer is borrowed for the call. */
typedef struct ob__spawn_req {
    const char *const *argv; /* argv[0]: a path, or a name searched in env's PATH */
    char *const *env;        /* NULL-terminated */
    const char *log_path;    /* stdout and stderr are appended here (created 0644) */
    uint64_t memory_limit;   /* RLIMIT_DATA, soft and hard, in bytes; 0: left as it is */
} ob__spawn_req;

/* Starts req->argv in a process group of its own (pgid = its pid), stdin from /dev/null,
 * stdout and stderr appended to req->log_path, the signals a coordinator catches or blocks back
 * to their defaults and unblocked, RLIMIT_CORE 0 and RLIMIT_DATA req->memory_limit (never above
 * the hard limit it inherits). The limits are set in the child between fork and exec, so that
 * nothing it starts ever runs without them (posix_spawn has no attribute for them); the child
 * calls only async-signal-safe functions. OB_OK with *pid once the program runs; OB_ERR_IO when
 * it cannot be started, the failing step and errno in the message (which does not name
 * argv[0] unless the step does: the caller says what was started). */
ob_status ob__spawn_limited(const ob__spawn_req *req, pid_t *pid, ob_err *err);

/* The environment of what a launcher starts: ours without the admin token (and without any
 * ONEBIT_REPORT_TOKEN of our own), what Open MPI needs in containers unless already set
 * (no single-copy mechanism, yield when idle, run as root when we are root), and
 * OPENBLAS_NUM_THREADS=1; report_var ("ONEBIT_REPORT_TOKEN=...", or "" for none) is added.
 * Returns a malloc'd array (free() it, not its strings: they are borrowed from environ, from
 * static storage and from report_var), NULL when memory runs out. */
char **ob__child_env(const char *report_var);

/* The text of a program's stderr for a message: its first line, at most cap - 1 bytes, without
 * control characters. */
void ob__first_line(const char *text, char *out, size_t cap);

/* Writes text to path through a temporary file (path.tmp), fsynced, then renamed. */
ob_status ob__write_file_atomic(const char *path, const char *text, ob_err *err);

/* Appends onebit-worker's command line for req (the program, then --spec, --format json,
 * --job-id, --checkpoint-dir, --resume and --report as req says: at most 12 entries) at
 * argv[a] and a terminating NULL; returns the new count (the NULL's index). */
size_t ob__worker_argv(const char **argv, size_t a, const char *worker, const ob_launch_req *req);

#endif /* ONEBIT_SERVICE_EXEC_H */
