/* Private to the service module: the ob_service structure, a running attempt, and the helpers
 * service.c (API functions, creation, recovery), supervisor.c (launching, watching, progress)
 * and metrics.c share. Everything here is used with svc->mu held unless a comment says
 * otherwise. */
#ifndef ONEBIT_SERVICE_INTERNAL_H
#define ONEBIT_SERVICE_INTERNAL_H

#include "onebit/service.h"

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
    int reported;          /* has used WorkerService: ignore its log lines */
    char report_token[65]; /* the attempt's ReportProgress credential (hex of 32 random bytes) */
    int world_size;
    int64_t num_params;
    int64_t start_step;
    FILE *log; /* read side of the job's log */
    char line[LINE_MAX_BYTES];
    size_t line_len;
    int line_overflow;
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
 * elsewhere. */
ob_status ob__roots_check(const ob__roots *r, const char *field, const char *path, char *problem,
                          size_t cap);

struct ob_service {
    ob_service_config cfg;
    char *state_dir, *jobs_dir, *ckpt_dir, *report_addr;
    ob_store *store;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t event_counter;
    int64_t reports; /* WorkerService reports accepted */
    int stopping;
    int started;
    int lock_fd; /* holds the state directory's lock */
    pthread_t thread;
    ob__run *runs;
    ob__roots data_roots, ckpt_roots; /* where a job's data and warm-start source may be */
};

/* Notes the size of r's job log with the time now in jobs/<id>/log.index when it grew and the
 * last note is a second old (force: whatever its age), for ob_service_log_start (logs.c). Lock
 * held. */
void ob__svc_log_note(ob_service *svc, ob__run *r, int64_t now, int force);

/* mkdir -p. */
ob_status ob__svc_mkdirs(const char *path, ob_err *err);

/* <state>/jobs/<id>/<file> into out[cap]. */
void ob__svc_job_path(const ob_service *svc, const char *id, const char *file, char *out,
                      size_t cap);

/* Writes j (its fields already updated) and, when kind is non-NULL, an event of that kind with
 * msg and j's progress, in one transaction; wakes the watchers. */
ob_status ob__svc_commit(ob_service *svc, ob_job *j, const char *kind, const char *msg,
                         ob_err *err);

/* Moves j to state with a message, as one "state" event. */
ob_status ob__svc_transition(ob_service *svc, ob_job *j, ob_job_state state, const char *msg,
                             ob_err *err);

/* The running attempt of a job, or NULL. */
ob__run *ob__svc_find_run(ob_service *svc, const char *id);

/* Frees a run that is not (or no longer) on the list. Accepts NULL. */
void ob__svc_free_run(ob__run *r);

/* Takes r off the list and frees it. */
void ob__svc_unlink_run(ob_service *svc, ob__run *r);

/* Watches again an attempt of j (RUNNING, its last attempt a still open) that an earlier
 * coordinator started and the launcher has re-attached to (h): a run like launch()'s, its log
 * read from its current end, with a fresh report credential (the workers hold the old one, so
 * their progress is read from the log). */
ob_status ob__svc_adopt(ob_service *svc, const ob_job *j, const ob_attempt *a,
                        const ob_launch_handle *h, ob_err *err);

/* Ranks of the running attempts. */
int ob__svc_used_slots(const ob_service *svc);

/* The job's committed checkpoints, newest first, with their metadata (*out: free()). */
ob_status ob__svc_scan_checkpoints(const ob_service *svc, const char *id, ob_checkpoint_info **out,
                                   size_t *n, ob_err *err);

#endif /* ONEBIT_SERVICE_INTERNAL_H */
