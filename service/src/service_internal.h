/* Private to the service module: the ob_service structure, a running attempt, and the helpers
 * service.c (API functions, creation, recovery), supervisor.c (launching, watching, progress),
 * remove.c, logs.c and metrics.c share; runs.c holds the run table and the records they all
 * write through. Everything here is used with svc->mu held unless a comment says otherwise. */
#ifndef ONEBIT_SERVICE_INTERNAL_H
#define ONEBIT_SERVICE_INTERNAL_H

#include "onebit/service.h"
#include "onebit/store.h"

#include <pthread.h>
#include <stdio.h>

#define MAX_WORLD_SIZE 1024
#define MAX_RESTARTS_LIMIT 100
#define LINE_MAX_BYTES 16384

/* One running attempt. */
typedef struct ob__run {
    struct ob__run *next;
    char job_id[OB_JOB_ID_LEN];
    int attempt;
    ob_launch_handle h;
    int64_t started_ms;
    int64_t last_progress_ms;
    int64_t kill_at_ms;     /* after SIGTERM: when to send SIGKILL; 0: not stopping */
    int64_t deadline_at_ms; /* the job's first start + its deadline; 0: none */
    int deadline_hit;       /* stopped for its deadline: the job ends FAILED, not restarted */
    int64_t log_noted_ms, log_noted_size; /* the last note of the log's size (logs.c) */
    char stop_reason[OB_JOB_MSG_LEN];     /* why we stopped it (timeout, cancel, shutdown) */
    char last_text[256];                  /* the last line of the log that was not progress */
    char worker_error[256]; /* the last line a worker or mpirun wrote about a failure */
    char platform[256];     /* what the launcher last said of the running attempt ("PENDING") */
    int64_t total_steps;
    uint64_t memory_limit; /* of each of its processes (RLIMIT_DATA), bytes; 0: none */
    int reported;          /* has used WorkerService: ignore its log lines */
    char report_token[65]; /* the attempt's ReportProgress credential (hex of 32 random bytes) */
    int world_size;
    int64_t num_params;
    int64_t start_step;
    FILE *log; /* read side of the job's log */
    char line[LINE_MAX_BYTES];
    size_t line_len;
    int line_overflow;
    /* The attempt has ended (exit) but its end is not yet in the store (a write failed): the
     * run stays on the list, holding its slots, and the supervisor records it again at
     * finish_at_ms, waiting twice as long after each failure (finish_delay_ms). */
    int exited;
    int launch_failed; /* exited without a process: the launcher could not start it */
    ob_launch_exit exit;
    int64_t finish_at_ms, finish_delay_ms;
    ob_attempt record;  /* the attempt as launch() wrote it, with its process group */
    int record_unsaved; /* that write failed: written again on a later tick */
} ob__run;

/* Directories jobs may read from (roots.c), resolved with realpath. */
#define OB_SVC_MAX_ROOTS 16
typedef struct ob__roots {
    char *path[OB_SVC_MAX_ROOTS];
    int n;
} ob__roots;

/* The roots given (a NULL-terminated list, strings borrowed), or, when roots is NULL, the
 * defaults (NULL-terminated too). A root must be absolute. */
ob_status ob__roots_init(ob__roots *r, const char *const *roots, const char *const *defaults,
                         ob_err *err);
void ob__roots_free(ob__roots *r);

/* OB_OK when path ("" is fine: nothing to read) resolves to a place under one of the roots;
 * OB_ERR_INVALID_ARG with "<field>: ..." in problem[cap] when it does not exist or lies
 * elsewhere. A path outside every root gets the same message whether it exists or not; only
 * under a root does the message say that it does not exist. With resolved non-NULL (rcap
 * bytes), the resolved path goes there on success (the path itself for ""). */
ob_status ob__roots_check(const ob__roots *r, const char *field, const char *path, char *problem,
                          size_t cap);
ob_status ob__roots_resolve(const ob__roots *r, const char *field, const char *path, char *resolved,
                            size_t rcap, char *problem, size_t cap);

/* The spec a job's attempt gets (spec_json, borrowed) with every path it names pinned: resolved
 * now (realpath) and checked against the roots again, so that a symbolic link swapped while the
 * job waited leads nowhere else; the worker opens the resolved paths. *out (malloc'd) on
 * success; OB_ERR_INVALID_ARG with the reason in problem otherwise. */
ob_status ob__svc_pin_paths(const ob_service *svc, const char *job_id, const char *spec_json,
                            char **out, char *problem, size_t cap);

/* ---- upload.c: a program job's uploaded files ------------------------------------------------ */

/* The service's limit on an upload's bytes (cfg.max_upload_bytes or its default). */
int64_t ob__upload_limit(const ob_service *svc);

/* OB_OK when the n files (borrowed) may be stored: paths, modes, count and sizes (at most
 * max_bytes in all) checked, without the lock, before anything is written; otherwise
 * OB_ERR_INVALID_ARG with "files...: why" (the limit named) in problem[cap]. */
ob_status ob__upload_check(const ob_upload_file *f, size_t n, int64_t max_bytes, char *problem,
                           size_t cap);

/* OB_OK when the state directory's file system has room for the n (checked) files besides
 * cfg.store_min_free_bytes; otherwise OB_ERR_UNAVAILABLE with both sizes. Lock not needed. */
ob_status ob__upload_room(const ob_service *svc, const ob_upload_file *f, size_t n, ob_err *err);

/* Writes the checked files into a new directory under svc->uploads_dir, its path into
 * staged[scap], and checks that entrypoint (relative) is a regular file among them. A problem of
 * the upload's (a duplicate path, a file where a directory is, a missing entrypoint):
 * OB_ERR_INVALID_ARG with problem[cap] set; a failed write: OB_ERR_IO in err. On failure
 * nothing is left and staged is "". Lock not needed. */
ob_status ob__upload_stage(const ob_service *svc, const ob_upload_file *f, size_t n,
                           const char *entrypoint, char *staged, size_t scap, char *problem,
                           size_t cap, ob_err *err);

/* Moves a staged upload to the job's directory (ob__upload_dir); lock held. */
ob_status ob__upload_commit(const ob_service *svc, const char *staged, const char *id, ob_err *err);

/* Removes a staged upload ("" or NULL: nothing). */
void ob__upload_discard(const char *staged);

/* STATE/jobs/<id>/program into out[cap]. */
void ob__upload_dir(const ob_service *svc, const char *id, char *out, size_t cap);

/* ---- job_cache.c: single-job reads served from memory while the store is unchanged ------- */

#define OB__JOB_CACHE_SLOTS 16
typedef struct ob__job_cache {
    pthread_mutex_t mu;
    uint64_t tick;
    struct ob__job_cache_slot {
        int used;
        uint64_t gen, tick; /* the store's generation when read; last use */
        ob_job job;
    } slot[OB__JOB_CACHE_SLOTS];
} ob__job_cache;

void ob__job_cache_init(ob__job_cache *c);
void ob__job_cache_free(ob__job_cache *c);

/* 1 and a copy of the job in *out (the caller clears it) when the cache holds job id as read at
 * the store's generation gen; 0 otherwise. */
int ob__job_cache_get(ob__job_cache *c, const char *id, uint64_t gen, ob_job *out);

/* Keeps a copy of j, read at the store's generation gen (read before the job was). */
void ob__job_cache_put(ob__job_cache *c, uint64_t gen, const ob_job *j);

struct ob_service {
    ob_service_config cfg;
    char *state_dir, *jobs_dir, *ckpt_dir, *report_addr;
    char *uploads_dir; /* STATE/uploads: submits' files before their job exists (upload.c) */
    ob_store *store;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t event_counter;
    int64_t reports;                  /* WorkerService reports accepted */
    struct ob__metrics_memo *metrics; /* what /metrics saw last (metrics.c); NULL before */
    ob__job_cache jobs_cache;         /* ob_service_get's recent reads (job_cache.c) */
    int stopping;
    int started;
    int lock_fd; /* holds the state directory's lock */
    pthread_t thread;
    ob__run *runs;
    ob__roots data_roots, ckpt_roots; /* where a job's data and warm-start source may be */
    /* The store cannot be written (a write failed, or the state directory's file system has
     * less than cfg.store_min_free_bytes free): health says NOT_SERVING, requests that change
     * something are refused (OB_ERR_UNAVAILABLE), and the supervisor probes the store at
     * store_probe_at_ms (backing off to 2 s) until a write succeeds with space free. */
    int store_down;
    char store_why[OB_ERR_MSG_LEN];
    int64_t store_probe_at_ms, store_probe_delay_ms;
};

/* ---- runs.c: paths, job records, the store's health, the run table, checkpoints ------------- */

/* mkdir -p. */
ob_status ob__svc_mkdirs(const char *path, ob_err *err);

/* <state>/jobs/<id>/<file> into out[cap]. */
void ob__svc_job_path(const ob_service *svc, const char *id, const char *file, char *out,
                      size_t cap);

/* Writes j (its fields already updated) and, when kind is non-NULL, an event of that kind with
 * msg and j's progress, in one transaction; wakes the watchers. */
ob_status ob__svc_commit(ob_service *svc, ob_job *j, const char *kind, const char *msg,
                         ob_err *err);

/* ob__svc_commit that also writes attempt a (NULL: none) in the same transaction. */
ob_status ob__svc_commit_attempt(ob_service *svc, ob_job *j, const char *kind, const char *msg,
                                 const ob_attempt *a, ob_err *err);

/* Moves j to state with a message, as one "state" event. */
ob_status ob__svc_transition(ob_service *svc, ob_job *j, ob_job_state state, const char *msg,
                             ob_err *err);

/* ob__svc_transition that also writes attempt a (NULL: none) in the same transaction: a job
 * never becomes RUNNING without its open attempt, nor ends with it open. */
ob_status ob__svc_transition_attempt(ob_service *svc, ob_job *j, ob_job_state state,
                                     const char *msg, const ob_attempt *a, ob_err *err);

/* ob_store_put_attempt, noting a failure in the service's store health. */
ob_status ob__svc_put_attempt(ob_service *svc, const char *job_id, const ob_attempt *a,
                              ob_err *err);

/* After a failed write (rc from the store; err may be NULL): OB_ERR_IO and OB_ERR_UNAVAILABLE
 * mark the store down (health NOT_SERVING) until a probe succeeds. Returns rc. */
ob_status ob__svc_store_failed(ob_service *svc, ob_status rc, const ob_err *err);

/* OB_OK while the store can be written; otherwise OB_ERR_UNAVAILABLE, with the reason, for a
 * request that would change something. */
ob_status ob__svc_writable(ob_service *svc, ob_err *err);

/* Bytes free to unprivileged writers on the file system of dir; -1 when unknown. */
int64_t ob__svc_free_bytes(const char *dir);

/* The supervisor's check of the store, every tick: the state directory's free space and, while
 * the store is down, a probe write on its backoff. */
void ob__svc_check_store(ob_service *svc, int64_t now);

/* The running attempt of a job, or NULL. */
ob__run *ob__svc_find_run(ob_service *svc, const char *id);

/* Frees a run that is not (or no longer) on the list. Accepts NULL. */
void ob__svc_free_run(ob__run *r);

/* Takes r off the list and frees it. */
void ob__svc_unlink_run(ob_service *svc, ob__run *r);

/* Ranks of the running attempts. */
int ob__svc_used_slots(const ob_service *svc);

/* The job's committed checkpoints, newest first, with their metadata (*out: free()). */
ob_status ob__svc_scan_checkpoints(const ob_service *svc, const char *id, ob_checkpoint_info **out,
                                   size_t *n, ob_err *err);
/* The newest checkpoint of job `id` that verifies (ob_ckpt_find_latest: damaged or foreign
 * directories with higher step numbers are passed over): its step, time and path in *out.
 * 0 when there is one, -1 (and *out zeroed) when there is none. What the service says a job
 * resumes from and what its last checkpoint is. */
int ob__svc_newest_checkpoint(const ob_service *svc, const char *id, ob_checkpoint_info *out);
/* The checkpoint of step `step` of job `id`, looked up by its directory's name rather than
 * found in a listing, if it verifies: 0 and *out, or -1 (and *out zeroed). A shared file
 * system's client can serve a directory's listing from its cache for up to a minute after
 * another host added an entry (NFS: acdirmin / acdirmax); a lookup by name asks the server. */
int ob__svc_checkpoint_at(const ob_service *svc, const char *id, int64_t step,
                          ob_checkpoint_info *out);

/* ---- supervisor.c, logs.c -------------------------------------------------------------------- */

/* Watches again an attempt of j (RUNNING, its last attempt a still open) that an earlier
 * coordinator started and the launcher has re-attached to (h): a run like launch()'s, its log
 * read from its current end, with a fresh report credential (the workers hold the old one, so
 * their progress is read from the log). */
ob_status ob__svc_adopt(ob_service *svc, const ob_job *j, const ob_attempt *a,
                        const ob_launch_handle *h, ob_err *err);

/* Notes the size of r's job log with the time now in jobs/<id>/log.index when it grew and the
 * last note is a second old (force: whatever its age), for ob_service_log_start (logs.c). Lock
 * held. */
void ob__svc_log_note(ob_service *svc, ob__run *r, int64_t now, int force);

/* Frees what the metrics remember between scrapes (metrics.c). */
void ob__metrics_free(ob_service *svc);

#endif /* ONEBIT_SERVICE_INTERNAL_H */
