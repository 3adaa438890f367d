/* Launchers: how the coordinator starts, watches and signals a job attempt's workers.
 *
 * One small interface so that the supervisor does not care where workers run:
 * - local: `mpirun -np N onebit-worker ...` on the coordinator's machine, started with
 *   posix_spawn in a process group of its own, output appended to the job's log;
 * - hosts: the same mpirun across a list of hosts (a generated hostfile and a remote agent,
 *   ssh by default), for machines without a resource manager;
 * - slurm: every attempt one batch job (sbatch), its ranks started by srun inside the
 *   allocation, watched with squeue (sacct once the controller has forgotten the job),
 *   signalled and cancelled with scancel. A restarted coordinator re-attaches to the batch job
 *   through the Slurm job id the store keeps (ob_launch_handle.ext_id, ob_attempt.ext_id);
 * - kubernetes: every attempt one Kubeflow MPIJob, watched through the API server by a thread
 *   of the launcher (onebit/kubernetes.h); ext_id is the MPIJob's name.
 * Launchers are called with the service lock held, from one thread at a time, and never block
 * for long (a Slurm command is bounded by a time limit; the Kubernetes launcher only queues work
 * for its thread and reads what it has seen). */
#ifndef ONEBIT_LAUNCHER_H
#define ONEBIT_LAUNCHER_H

#include "onebit/job.h"
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
    /* The most private writable memory (RLIMIT_DATA) each process of the attempt may map, in
     * bytes; 0: no limit. The local and hosts launchers set it on mpirun before it runs, and
     * the ranks on this machine inherit it; the other launchers leave it to their platform's
     * own limits (sbatch --mem, the pod's resources). See ob_worker_memory_limit_for. */
    uint64_t memory_limit;
} ob_launch_req;

/* A running attempt, as its launcher identifies it. Plain data: the store keeps pgid and ext_id
 * so that a restarted coordinator can stop, or re-attach to, what an earlier one started. */
typedef struct ob_launch_handle {
    int pid;  /* the launcher process (mpirun); 0 when the attempt runs elsewhere (Slurm) */
    int pgid; /* its process group; 0 likewise */
    /* The spec path every process of the attempt carries on its command line (Open MPI puts
     * each rank in a process group of its own, so the group alone does not find them). */
    char spec_path[1024];
    /* The launcher's own id of the attempt (the Slurm job id, the MPIJob's name), "" when it
     * has none. */
    char ext_id[OB_ATTEMPT_EXT_ID_LEN];
} ob_launch_handle;

/* How an attempt ended. */
typedef struct ob_launch_exit {
    int done;        /* 0 while it runs */
    int exit_code;   /* when it exited: its status; else -1 */
    int term_signal; /* when a signal ended it: the signal; else 0 */
    /* The platform's account of the end when it has one, for people to act on ("Slurm job 42
     * NODE_FAIL: a node of the allocation failed"); "" when the exit status says it all. */
    char reason[256];
    /* 1 when the platform's account says a restart cannot help (the job ran out of its memory
     * allocation, was cancelled outside onebitd, passed its deadline); reason says why. The
     * worker's own exit statuses 2, 3 and 4 are judged by the supervisor. */
    int permanent;
} ob_launch_exit;

typedef struct ob_launcher ob_launcher;
typedef struct ob_jobspec ob_jobspec; /* onebit/jobspec.h (the engine's) */

typedef struct ob_launcher_ops {
    /* What the launcher's external ids are, for messages ("Slurm job"); NULL when it has none. */
    const char *ext_id_kind;
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
    /* Optional (NULL: the launcher cannot re-attach, and recovery stops and relaunches). Takes
     * over an attempt of req (job_id, attempt, spec_path, log_path) that an earlier coordinator
     * started, h as the store kept it; h->ext_id may be "" when that coordinator died before
     * it learnt the id, and the launcher may then find the attempt by what it knows and fill
     * it in. OB_OK: *h is watched again, running or not (poll says how it ended);
     * OB_ERR_NOT_FOUND: the platform has nothing of it that is this job's; other errors: the
     * platform cannot be asked now. */
    ob_status (*attach)(ob_launcher *l, ob_launch_handle *h, const ob_launch_req *req, ob_err *err);
    /* Optional (NULL: the launcher keeps nothing of a job outside the job's directory). The job
     * req->job_id, whose attempts were 1 to req->attempt and whose checkpoints are under
     * req->checkpoint_dir, has been deleted (it had ended): removes what the launcher wrote for
     * it elsewhere (the Kubernetes launcher: the spec copies on the checkpoint volume, and its
     * MPIJobs and Secrets, whose deletion is queued). Never blocks for long; best effort. */
    void (*forget)(ob_launcher *l, const ob_launch_req *req);
    /* Optional (NULL: the launcher runs every valid spec, uploaded programs included, as the
     * local, hosts and Slurm launchers do: their workers run where the state directory is).
     * Whether the launcher can run the job spec asks for (parsed and valid), submitted with
     * n_files uploaded files (a program's upload, stored under the state directory): OB_OK, or
     * OB_ERR_INVALID_ARG with a message for the person submitting that names the launcher, why
     * not, and what to do instead. Called at submit, before the job exists, without the service
     * lock and from any thread: it reads only the launcher's configuration. */
    ob_status (*check_job)(const ob_launcher *l, const ob_jobspec *spec, size_t n_files,
                           ob_err *err);
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
    /* 0: SIGTERM goes to the attempt's ranks on this machine (the default). A signal number:
     * SIGTERM is sent as that signal to mpirun instead, which forwards it to every rank on
     * every host (the hosts launcher uses SIGUSR1). */
    int term_via_mpirun;
} ob_local_launcher_config;

/* Creates the local launcher; *out is owned by the caller (ob_launcher_destroy). Children get
 * the coordinator's environment plus, when unset, what Open MPI needs in containers
 * (OMPI_ALLOW_RUN_AS_ROOT* as root, no single-copy mechanism, yield when idle) and
 * OPENBLAS_NUM_THREADS=1. */
ob_status ob_local_launcher_create(ob_launcher **out, const ob_local_launcher_config *cfg,
                                   ob_err *err);

/* ---- worker resource limits ------------------------------------------------------------------
 *
 * Every process the local and hosts launchers start (mpirun, and through it the ranks on this
 * machine) runs with RLIMIT_CORE 0 (no core files of training state) and, unless switched off,
 * an RLIMIT_DATA per process: since Linux 4.7 it counts every private writable mapping (the
 * heap, anonymous mmap, thread stacks), so a rank that maps more than the limit sees its
 * allocation fail, reports OB_ERR_NOMEM and exits with status 5. RLIMIT_AS is not used: it also
 * counts shared libraries, MPI's shared-memory segments, reserved but inaccessible ranges and
 * the GPU driver's address space, none of which is memory the rank uses. */

#define OB_WORKER_MEMORY_AUTO (-1) /* ob_worker_memory_limit_parse: "auto" */
/* The smallest limit accepted: a rank's libraries alone map about 150 MiB (OpenBLAS reserves
 * a 128 MiB buffer and retries forever when it cannot), so less would hang it, not stop it. */
#define OB_WORKER_MEMORY_MIN ((int64_t)1 << 30)
/* "auto": the job's per-rank estimate times OB_WORKER_MEMORY_FACTOR plus OB_WORKER_MEMORY_MARGIN
 * (room for the allocator's slack, MPI's buffers and the libraries' reservations). */
#define OB_WORKER_MEMORY_FACTOR 2
#define OB_WORKER_MEMORY_MARGIN ((uint64_t)1 << 30)

/* Parses --worker-memory-limit: "auto" (OB_WORKER_MEMORY_AUTO), "0" (no limit) or a size, a
 * decimal number of bytes with an optional binary suffix K, M, G or T (either case), at least
 * OB_WORKER_MEMORY_MIN and at most INT64_MAX bytes. Anything else (signs, spaces, other
 * suffixes, a value that overflows) is OB_ERR_INVALID_ARG with a message; *out is unchanged. */
ob_status ob_worker_memory_limit_parse(const char *text, int64_t *out, ob_err *err);

/* The limit for one attempt: setting's bytes as they are (0: none), or for
 * OB_WORKER_MEMORY_AUTO the per-rank estimate times OB_WORKER_MEMORY_FACTOR plus
 * OB_WORKER_MEMORY_MARGIN, at least OB_WORKER_MEMORY_MIN; 0 when estimate is 0 (unknown).
 * Saturates at INT64_MAX rather than overflowing. */
uint64_t ob_worker_memory_limit_for(int64_t setting, uint64_t estimate);

/* What an attempt's exit says (onebit-worker's exit statuses, see its main.c). */
typedef struct ob_exit_verdict {
    int permanent;   /* 1: a restart with the same request would end the same way */
    char cause[200]; /* what the status means when it says more than a number, else "" */
    char why[200];   /* when permanent: why a restart cannot help */
} ob_exit_verdict;

/* Judges an attempt that ended with exit_code (or the signal term_signal) and ran under
 * memory_limit bytes per process (0: none). Status 5, memory, is permanent under a limit (the
 * same job needs the same memory) and retryable without one (the machine was short of memory
 * for a while); 2, 3 and 4 are permanent, and so is 6 (a program job's program fails the same
 * way on every attempt: onebit's Python package says so); anything else, signals included, is
 * retryable. */
void ob_worker_exit_judge(int exit_code, int term_signal, uint64_t memory_limit,
                          ob_exit_verdict *v);

/* ---- hosts: mpirun over a list of machines ----------------------------------------------- */

#define OB_HOSTS_MAX 1024      /* hosts in one list */
#define OB_HOST_NAME_MAX 253   /* a DNS name's longest text form */
#define OB_HOST_SLOTS_MAX 4096 /* ranks on one host */

/* A validated host list: "a:4,b:4" is two hosts of four slots each. */
typedef struct ob_host {
    char name[OB_HOST_NAME_MAX + 1];
    int slots;
} ob_host;

typedef struct ob_host_list {
    ob_host *hosts; /* owned (ob_host_list_clear) */
    size_t n;
    int total_slots;
} ob_host_list;

/* Parses "NAME:SLOTS[,NAME:SLOTS...]" strictly: a NAME is a host name (labels of letters,
 * digits and '-', 1 to 63 characters, not starting or ending with '-', joined by '.'; at most
 * 253 characters) or an IPv4 address; SLOTS is a decimal integer from 1 to OB_HOST_SLOTS_MAX
 * without sign or leading zeros; no name twice; at most OB_HOSTS_MAX hosts, and the slots' sum
 * must fit in an int. Nothing else is accepted (no spaces, no empty entries). OB_ERR_INVALID_ARG
 * names the offending entry. *out is zeroed on failure. */
ob_status ob_host_list_parse(ob_host_list *out, const char *text, ob_err *err);

/* Frees what a host list owns and zeroes it. Accepts NULL. */
void ob_host_list_clear(ob_host_list *l);

/* The list as an Open MPI hostfile ("NAME slots=N\n" per host) into out[cap]. OB_ERR_TOO_LARGE
 * when it does not fit. */
ob_status ob_host_list_hostfile(const ob_host_list *l, char *out, size_t cap, ob_err *err);

/* Configuration of the hosts launcher. Strings are copied. */
typedef struct ob_hosts_launcher_config {
    const char *mpirun;             /* [mpirun] */
    const char *worker;             /* onebit-worker's path, the same on every host */
    const ob_host_list *hosts;      /* borrowed for the call */
    const char *hostfile_path;      /* written (atomically) by create */
    const char *rsh_agent;          /* --mca plm_rsh_agent, e.g. "ssh -o BatchMode=yes"; NULL:
                                       Open MPI's default (ssh) */
    const char *net;                /* the network MPI uses between hosts: CIDRs or interface
                                       names, comma-separated ("10.0.0.0/24", "eth1"), given to
                                       both btl_tcp_if_include and oob_tcp_if_include; NULL:
                                       Open MPI's choice (every interface but loopback) */
    const char *const *mpirun_args; /* more mpirun arguments, NULL-terminated, may be NULL */
} ob_hosts_launcher_config;

/* Checks a network for ob_hosts_launcher_config.net (--mpi-net): comma-separated entries, each
 * an IPv4 CIDR ("10.0.0.0/24") or a Linux interface name (1 to 15 of [A-Za-z0-9._-], not
 * starting with '-'), 255 characters in all. OB_ERR_INVALID_ARG names the first bad entry. */
ob_status ob_hosts_net_check(const char *net, ob_err *err);

/* Creates the hosts launcher: the local launcher with `--hostfile FILE [--mca plm_rsh_agent
 * AGENT] [--mca btl_tcp_if_include NET --mca oob_tcp_if_include NET]` on mpirun's command line,
 * and the hostfile written. A net that is not a comma-separated list of CIDRs or interface
 * names is refused (OB_ERR_INVALID_ARG). Ranks on other hosts get SIGTERM
 * through mpirun, which forwards it. *out is owned by the caller (ob_launcher_destroy). */
ob_status ob_hosts_launcher_create(ob_launcher **out, const ob_hosts_launcher_config *cfg,
                                   ob_err *err);

/* ---- slurm ---------------------------------------------------------------------------------- */

/* Configuration of the Slurm launcher. Strings are copied; NULL means the default. */
typedef struct ob_slurm_launcher_config {
    const char *worker;    /* onebit-worker's path, the same on every node */
    const char *sbatch;    /* [sbatch] */
    const char *squeue;    /* [squeue] */
    const char *scancel;   /* [scancel] */
    const char *sacct;     /* [sacct]; "" never asks it (no accounting) */
    const char *srun;      /* [srun] */
    const char *mpi;       /* srun --mpi=TYPE [pmix] */
    const char *partition; /* sbatch --partition; NULL: the cluster's default */
    /* More sbatch arguments (--time=..., --mem=..., --account=...), NULL-terminated, may be
     * NULL; each must start with "--". */
    const char *const *sbatch_args;
    int poll_interval_ms;   /* squeue at most this often per attempt [1000] */
    int command_timeout_ms; /* any one Slurm command [20000] */
} ob_slurm_launcher_config;

/* Creates the Slurm launcher. *out is owned by the caller (ob_launcher_destroy). Paths the
 * launcher hands to sbatch (the log, the batch script) must not contain '%' or '\\' (sbatch
 * would read them as file name patterns): start refuses such an attempt. */
ob_status ob_slurm_launcher_create(ob_launcher **out, const ob_slurm_launcher_config *cfg,
                                   ob_err *err);

/* GPUs this machine's workers can see: the entries of CUDA_VISIBLE_DEVICES when it is set ("",
 * "-1" and "NoDevFiles" mean none), else the /dev/nvidiaN devices. GPU jobs get one rank per
 * visible GPU by default. */
int ob_visible_gpus(void);

/* The launcher's check_job when it has one (see ob_launcher_ops), else OB_OK. */
ob_status ob_launcher_check_job(const ob_launcher *l, const ob_jobspec *spec, size_t n_files,
                                ob_err *err);

/* Destroys any launcher. Accepts NULL. Running attempts are not touched. */
void ob_launcher_destroy(ob_launcher *l);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_LAUNCHER_H */
