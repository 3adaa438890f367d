/* Launchers: how the coordinator starts, watches and signals a job attempt's workers.
 *
 * One small interface so that the supervisor does not care where workers run. The local
 * launcher runs `mpirun -np N onebit-worker ...` with posix_spawn in a process group of its own,
 * output appended to a per-job log file; a Kubernetes launcher (Kubeflow MPIJob through the API
 * server) fits the same five calls. Launchers are called with the service lock held, from one
 * thread at a time, and never block for long. */
#ifndef ONEBIT_LAUNCHER_H
#define ONEBIT_LAUNCHER_H

#include "onebit/status.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one attempt runs. Every pointer is borrowed for the duration of the start call. */
typedef struct ob_launch_req {
    const char *job_id;
    int attempt;                /* 1, 2, ... */
    int world_size;             /* ranks */
    const char *spec_path;      /* the canonical spec, written by the service */
    const char *checkpoint_dir; /* checkpoints go to checkpoint_dir/job_id/step-XXXXXXXX/ */
    int resume;                 /* resume from the newest good checkpoint */
    const char *log_path;       /* stdout and stderr of every rank are appended here */
    const char *report_addr;    /* host:port of WorkerService, or NULL / "" for none */
    /* The attempt's own credential for ReportProgress (valid for this job and attempt only),
     * given to the workers as ONEBIT_REPORT_TOKEN; never the service's admin token. */
    const char *report_token;
} ob_launch_req;

/* A running attempt, as its launcher identifies it. Plain data: the store keeps pgid so that a
 * restarted coordinator can stop what an earlier one left behind. */
typedef struct ob_launch_handle {
    int pid;  /* the launcher process (mpirun) */
    int pgid; /* its process group */
    /* The spec path every process of the attempt carries on its command line (Open MPI puts
     * each rank in a process group of its own, so the group alone does not find them). */
    char spec_path[1024];
} ob_launch_handle;

/* How an attempt ended. */
typedef struct ob_launch_exit {
    int done;        /* 0 while it runs */
    int exit_code;   /* when it exited: its status; else -1 */
    int term_signal; /* when a signal ended it: the signal; else 0 */
} ob_launch_exit;

typedef struct ob_launcher ob_launcher;

typedef struct ob_launcher_ops {
    /* Starts an attempt; *h receives its handle. */
    ob_status (*start)(ob_launcher *l, const ob_launch_req *req, ob_launch_handle *h, ob_err *err);
    /* Non-blocking: fills *ex; once done, the attempt's launcher process is reaped. */
    ob_status (*poll)(ob_launcher *l, const ob_launch_handle *h, ob_launch_exit *ex, ob_err *err);
    /* Sends sig to every process of the attempt. Not an error when none is left. */
    ob_status (*signal)(ob_launcher *l, const ob_launch_handle *h, int sig, ob_err *err);
    /* 1 when some process of the attempt is still alive. */
    int (*alive)(ob_launcher *l, const ob_launch_handle *h);
    /* Stops (SIGKILL) whatever is left of an attempt of req->job_id that an earlier coordinator
     * started (h as the store kept it), when it can tell the processes are that job's. */
    void (*stop_stale)(ob_launcher *l, const ob_launch_handle *h, const ob_launch_req *req);
    void (*destroy)(ob_launcher *l);
} ob_launcher_ops;

struct ob_launcher {
    const ob_launcher_ops *ops;
};

/* Configuration of the local launcher. Strings are copied. */
typedef struct ob_local_launcher_config {
    const char *mpirun; /* path or name of mpirun ("mpirun") */
    const char *worker; /* path of onebit-worker */
    /* Extra arguments for mpirun before the program ("--oversubscribe"), NULL-terminated,
     * may be NULL. */
    const char *const *mpirun_args;
} ob_local_launcher_config;

/* Creates the local launcher; *out is owned by the caller (ob_launcher_destroy). Children get
 * the coordinator's environment plus, when unset, what Open MPI needs in containers
 * (OMPI_ALLOW_RUN_AS_ROOT* as root, no single-copy mechanism, yield when idle) and
 * OPENBLAS_NUM_THREADS=1. */
ob_status ob_local_launcher_create(ob_launcher **out, const ob_local_launcher_config *cfg,
                                   ob_err *err);

/* GPUs this machine's workers can see: the entries of CUDA_VISIBLE_DEVICES when it is set ("",
 * "-1" and "NoDevFiles" mean none), else the /dev/nvidiaN devices. GPU jobs get one rank per
 * visible GPU by default. */
int ob_visible_gpus(void);

/* Destroys any launcher. Accepts NULL. Running attempts are not touched. */
void ob_launcher_destroy(ob_launcher *l);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_LAUNCHER_H */
