/* The coordinator's service functions: what both APIs (gRPC and REST) call, and the supervisor
 * that launches, watches and restarts jobs.
 *
 * An ob_service owns the job store, the running attempts and the launcher; all of its state is
 * guarded by one lock, taken by each function below and by the supervisor thread's ticks. Every
 * function validates its input completely before it changes anything, so a rejected request
 * leaves the store as it was. Results are copies owned by the caller. */
#ifndef ONEBIT_SERVICE_H
#define ONEBIT_SERVICE_H

#include "onebit/job.h"
#include "onebit/launcher.h"
#include "onebit/report.h"
#include "onebit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_service ob_service;

typedef struct ob_service_config {
    const char *state_dir; /* jobs.db, jobs/<id>/ (spec, log), checkpoints/ (created) */
    int slots;             /* ranks that may run at once; jobs beyond wait as PENDING */
    int default_max_restarts;
    int default_world_size;      /* ranks of a job that does not say (0: one) */
    int64_t progress_timeout_ms; /* an attempt with no progress for this long ends; 0: never */
    int64_t backoff_ms;          /* first restart delay; doubles per restart */
    int64_t backoff_max_ms;
    int64_t cancel_grace_ms; /* SIGTERM, then SIGKILL after this long */
    int64_t tick_ms;         /* supervisor period */
    const char *report_addr; /* host:port workers report to; NULL or "": they do not */
    ob_launcher *launcher;   /* borrowed; outlives the service */
    /* Where jobs may read, each a NULL-terminated list of absolute directories (borrowed; copied
     * by create). A spec's data.path must lie under a data root and its warm_start.from under a
     * checkpoint root, after symbolic links and ".." are resolved. NULL: the defaults, data
     * from /usr/share/datasets and /usr/share/games/fortunes (Debian's packages of the built-in
     * datasets) and <state>/data, warm starts from <state>/checkpoints. {"/", NULL} allows
     * everything. */
    const char *const *data_roots;
    const char *const *checkpoint_roots;
    /* Called (with the service lock held: it must not call back) for every change of a job's
     * state, with the job id and "STATE: why"; the daemon writes these to its log. NULL: none. */
    void (*on_state)(void *user, const char *job_id, const char *text);
    void *on_state_user;
    /* The store counts as unwritable (health NOT_SERVING, changes refused) while the file
     * system of state_dir has less than this many bytes free for unprivileged writers, so that
     * the running jobs' transitions still have room; 0: only failed writes count. */
    int64_t store_min_free_bytes;
    /* Jobs whose ranks would need more memory than this in all (world_size times
     * ob_jobspec_memory_estimate per rank) are refused at submit; 0: no limit. */
    int64_t max_job_memory;
    /* Jobs that ended longer ago than this are deleted with their events, logs and checkpoints
     * (ob_service_prune, run by the supervisor every minute); 0: kept until DeleteJob. */
    int64_t retention_ms;
    /* The memory limit of each worker process (ob_launch_req.memory_limit, RLIMIT_DATA): bytes,
     * 0 for none, or OB_WORKER_MEMORY_AUTO for twice the job's per-rank estimate plus 1 GiB
     * (ob_worker_memory_limit_for). An attempt that runs out of it is not retried. Only for
     * launchers that apply it (local, hosts); 0 for the others. */
    int64_t worker_memory_limit;
    /* The most bytes a submit may upload with a program job (ob_submit_req.files, in all);
     * 0: OB_UPLOAD_DEFAULT_MAX. At most OB_UPLOAD_MAX_LIMIT. */
    int64_t max_upload_bytes;
} ob_service_config;

/* Defaults: state "./var", 4 slots, 3 restarts, no progress timeout, 1 s backoff up to 60 s,
 * 10 s grace, 100 ms ticks, 16 MiB kept free for the store, no job memory limit, no worker
 * memory limit. */
void ob_service_config_default(ob_service_config *cfg);

/* Opens the store under cfg->state_dir (strings copied) and recovers what an earlier
 * coordinator left: jobs that were RUNNING or RESTARTING have their old processes stopped and
 * are queued to resume from their newest checkpoint. *out is owned by the caller. */
ob_status ob_service_create(ob_service **out, const ob_service_config *cfg, ob_err *err);

/* Sets the host:port (copied) that workers report progress to; before ob_service_start. */
ob_status ob_service_set_report_addr(ob_service *svc, const char *addr, ob_err *err);

/* Starts the supervisor thread. */
ob_status ob_service_start(ob_service *svc, ob_err *err);

/* Stops the supervisor: running attempts get SIGTERM (they checkpoint and exit), SIGKILL after
 * the grace period; their jobs stay RUNNING in the store and resume at the next start. */
void ob_service_stop(ob_service *svc);

/* Stops (if started) and frees. Accepts NULL. */
void ob_service_destroy(ob_service *svc);

/* A program's upload: files of a submit (ob_submit_req.files), stored with the job. */
#define OB_UPLOAD_DEFAULT_MAX ((int64_t)64 << 20) /* bytes in all, unless configured */
#define OB_UPLOAD_MAX_LIMIT ((int64_t)1 << 30)    /* the largest max_upload_bytes */
#define OB_UPLOAD_MAX_FILES 1000                  /* files of one upload */
#define OB_UPLOAD_PATH_MAX 1024                   /* bytes of one file's path */

/* One file of an upload; everything borrowed. */
typedef struct ob_upload_file {
    const char *path;    /* relative, "/"-separated, no ".", ".." or empty part */
    uint32_t mode;       /* permission bits (at most 0777); 0100 makes the stored copy 0700 */
    const uint8_t *data; /* len bytes (NULL with len 0) */
    size_t len;
} ob_upload_file;

typedef struct ob_submit_req {
    const char *spec; /* JSON or YAML text, borrowed */
    size_t spec_len;
    int world_size;   /* 0: the service's default_world_size */
    int max_restarts; /* -1: the service default */
    /* NULL or "": none. Otherwise 1 to 128 characters of [A-Za-z0-9._:-] that make the submit
     * idempotent: a second submit with the same request id, spec (canonically equal), world size
     * and restarts answers the job the first made; anything different is OB_ERR_STATE. */
    const char *request_id;
    const char *labels; /* NULL or "": none; else "k=v,k=v" (ob_labels_parse) */
    /* NULL or "": none; else the job's time limit from its first start (ob_duration_parse):
     * past it the supervisor stops the job like a cancel and it ends FAILED, "deadline
     * exceeded: ...", without a restart. */
    const char *deadline;
    /* A program job's files (n_files of them, borrowed; NULL with 0: none). The spec's
     * program.entrypoint names one of them (a relative path) and it has no program.workdir:
     * the service stores them under the job's directory and runs the program there, whatever
     * its data roots. Each path, mode and size is checked (ob__upload_check in upload.c) and
     * the job refused with the limit named; a repeated request id does not compare them. */
    const ob_upload_file *files;
    size_t n_files;
} ob_submit_req;

/* The largest request body (REST) or message (gRPC) a submit to svc may have: a spec and
 * envelope of OB_API_MAX_REQUEST-like size plus the largest upload, base64-encoded when base64
 * is 1 (REST's JSON) and the files' paths and framing. */
size_t ob_service_max_submit_bytes(const ob_service *svc, int base64);

/* The most bytes one submit may upload (cfg.max_upload_bytes, or its default). */
int64_t ob_service_max_upload_bytes(const ob_service *svc);

/* Validates the spec and the request (every invalid field named, "; "-separated) and stores a
 * PENDING job; *out (caller-owned, ob_job_clear) receives it. OB_ERR_INVALID_ARG changes
 * nothing. */
ob_status ob_service_submit(ob_service *svc, const ob_submit_req *req, ob_job *out, ob_err *err);

/* The job with this id into *out (caller-owned). OB_ERR_NOT_FOUND. */
ob_status ob_service_get(ob_service *svc, const char *id, ob_job *out, ob_err *err);

/* One page of jobs in submission order: at most page_size (0: 50; at most 1000), only those in
 * state (OB_JOB_UNSPECIFIED: all) whose labels hold every pair of label_selector ("k=v,k=v";
 * NULL or "": all), after page_token ("" or NULL: the first page; otherwise a
 * token from an earlier call). *jobs is owned by the caller (ob_job_array_free); next_token is
 * "" on the last page. A malformed token or page size is OB_ERR_INVALID_ARG. */
ob_status ob_service_list(ob_service *svc, ob_job_state state, const char *label_selector,
                          int page_size, const char *page_token, ob_job **jobs, size_t *n,
                          char next_token[OB_PAGE_TOKEN_LEN], ob_err *err);

/* Cancels a job: PENDING and RESTARTING jobs become CANCELLED at once; a RUNNING job's workers
 * get SIGTERM (they checkpoint and exit), SIGKILL after the grace period, and the job becomes
 * CANCELLED when they are gone. *out gets the job as it is after the request. A job already in
 * a final state: OB_ERR_STATE. */
ob_status ob_service_cancel(ob_service *svc, const char *id, ob_job *out, ob_err *err);

/* Deletes a job that has ended (SUCCEEDED, FAILED, CANCELLED): its record, events and attempts,
 * its spec and log, and its checkpoints unless keep_checkpoints (another job may warm-start from
 * them); *checkpoints_deleted counts the checkpoints removed. OB_ERR_NOT_FOUND for an unknown
 * job, OB_ERR_STATE for one that has not ended (cancel it first). */
ob_status ob_service_delete(ob_service *svc, const char *id, int keep_checkpoints,
                            int *checkpoints_deleted, ob_err *err);

/* Retention: deletes, as ob_service_delete does (checkpoints included), every job that ended
 * more than cfg.retention_ms before now_ms (the caller's clock, so that tests can choose it);
 * *deleted counts them. Nothing when retention_ms is 0. Takes the lock per job, so that the
 * APIs are served between deletions. */
ob_status ob_service_prune(ob_service *svc, int64_t now_ms, int *deleted, ob_err *err);

/* Events of a job after after_seq (at most limit), oldest first. *evs is malloc'd (free()).
 * OB_ERR_NOT_FOUND for an unknown job. */
ob_status ob_service_events(ob_service *svc, const char *id, int64_t after_seq, int limit,
                            ob_job_event **evs, size_t *n, ob_err *err);

/* Waits until the event counter exceeds seen (some job has a new event), the service stops, or
 * timeout_ms passes.
 * Returns 1 when there may be new events, 0 on timeout, -1 when the service is stopping. */
int ob_service_wait(ob_service *svc, int64_t seen, int timeout_ms);

/* A counter that grows with every event of any job; pass it to ob_service_wait. */
int64_t ob_service_event_counter(ob_service *svc);

/* Applies a report to the job's current attempt. credential (borrowed) is what the reporting
 * workers presented: it must be the current attempt's report credential (each attempt gets its
 * own, ob_launch_req.report_token), so a client cannot speak for a job and an old attempt's
 * workers cannot speak for a new one (OB_ERR_UNAUTHENTICATED). NULL is for the service's own
 * callers in this process (the log reader), which need none. *cancel_requested (may be NULL)
 * is set when the job is being cancelled. OB_ERR_NOT_FOUND for an unknown job, OB_ERR_STATE
 * when the job has no running attempt. */
ob_status ob_service_report(ob_service *svc, const ob_report *r, const char *credential,
                            int *cancel_requested, ob_err *err);

/* The job's committed checkpoints (renamed step-XXXXXXXX directories, listed by the checkpoint
 * library), newest first, each with its metadata (only that is read: the arrays are verified by
 * the worker that resumes). *out is malloc'd (free()), NULL when there are none.
 * OB_ERR_NOT_FOUND for an unknown job. */
ob_status ob_service_checkpoints(ob_service *svc, const char *id, ob_checkpoint_info **out,
                                 size_t *n, ob_err *err);

#define OB_LOG_READ_DEFAULT (64 << 10)
#define OB_LOG_READ_MAX (1 << 20)

/* Up to max_bytes (0: OB_LOG_READ_DEFAULT; at most OB_LOG_READ_MAX) of the job's worker log from
 * byte offset on: every rank's output, each line tagged "[<mpi job>,<rank>]<stdout>:" by mpirun.
 * *data is malloc'd (free(); NULL when *len is 0); *size is the log's size now (0 before the
 * first attempt). OB_ERR_NOT_FOUND for an unknown job, OB_ERR_INVALID_ARG for a negative
 * offset or max_bytes out of range. */
ob_status ob_service_logs(ob_service *svc, const char *id, int64_t offset, int max_bytes,
                          char **data, size_t *len, int64_t *size, ob_err *err);

/* Most lines a log stream's tail may ask for, and the most bytes scanned from the end to find
 * them (a tail that reaches further starts that far from the end). */
#define OB_LOG_TAIL_MAX 100000
#define OB_LOG_TAIL_SCAN_MAX ((int64_t)64 << 20)

/* Where a read of the job's log starts that wants its last tail_lines lines (0: all) written at
 * or after since_ms (Unix ms; 0: any time): the later of the two, at the start of a line, into
 * *offset. When the log was written is known from the notes the supervisor keeps of its size
 * (about one a second, in jobs/<id>/log.index), so to within about a second; without notes the
 * log counts as written after since_ms. OB_ERR_NOT_FOUND for an unknown job,
 * OB_ERR_INVALID_ARG for tail_lines outside [0, OB_LOG_TAIL_MAX] or a negative since_ms. */
ob_status ob_service_log_start(ob_service *svc, const char *id, int tail_lines, int64_t since_ms,
                               int64_t *offset, ob_err *err);

/* 1 while the service can take changes (its store can be written), 0 when it cannot, with the
 * reason in why[cap] (may be NULL). Health answers NOT_SERVING, and submit, cancel and delete
 * OB_ERR_UNAVAILABLE, while it is 0; it comes back by itself when a write succeeds again. */
int ob_service_serving(ob_service *svc, char *why, size_t cap);

/* Prometheus text exposition of the service's metrics. *out is malloc'd (free()). */
ob_status ob_service_metrics(ob_service *svc, char **out, ob_err *err);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_SERVICE_H */
