/* The coordinator's picture of a training job: its state machine, progress, attempts, events and
 * checkpoints (part of the wire layer, onebit_wire).
 *
 * These are plain value structs shared by the store, the service functions, the two APIs and
 * onebitctl.
 * Fixed-size strings keep them copyable; the only heap members are ob_job.spec_json and
 * ob_job.attempts, released by ob_job_clear. The numbers of ob_job_state are those of
 * onebit.v1.JobState. */
#ifndef ONEBIT_JOB_H
#define ONEBIT_JOB_H

#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ob_job_state {
    OB_JOB_UNSPECIFIED = 0,
    OB_JOB_PENDING = 1,    /* accepted; waits for worker slots */
    OB_JOB_RUNNING = 2,    /* an attempt runs */
    OB_JOB_RESTARTING = 3, /* an attempt ended; the next starts after a backoff */
    OB_JOB_SUCCEEDED = 4,
    OB_JOB_FAILED = 5,
    OB_JOB_CANCELLED = 6,
} ob_job_state;

#define OB_JOB_STATE_COUNT 7
#define OB_JOB_ID_LEN 64
#define OB_JOB_MSG_LEN 512
#define OB_ATTEMPT_EXT_ID_LEN 64
#define OB_JOB_PATH_LEN 1024
#define OB_PROGRESS_WARM_LEN 128 /* ob_progress.warm_start, terminator included */
#define OB_REQUEST_ID_LEN 129    /* a submit's request id, terminator included */
#define OB_LABELS_LEN 1100       /* a job's labels as "k=v,k=v", terminator included */
#define OB_LABELS_MAX 16         /* labels per job */

/* "PENDING", "RUNNING", ... ("UNSPECIFIED" for anything else). Static string. */
const char *ob_job_state_name(ob_job_state s);

/* Reads "RUNNING" or "JOB_STATE_RUNNING" (any case) into *out. OB_ERR_INVALID_ARG otherwise. */
ob_status ob_job_state_parse(const char *text, ob_job_state *out);

/* Labels: up to OB_LABELS_MAX pairs "key=value", comma-separated, keys of 1 to 63 characters
 * of [a-z0-9._/-] starting with a letter or digit, values of 0 to 63 of [A-Za-z0-9._-], no key
 * twice. Writes the canonical form (sorted by key) into out; "" for "". OB_ERR_INVALID_ARG names
 * the offending pair. Also reads a selector: the pairs a job's labels must all hold. */
ob_status ob_labels_parse(const char *text, char out[OB_LABELS_LEN], ob_err *err);

/* 1 when every pair of the canonical selector is among the canonical labels ("" selects all). */
int ob_labels_match(const char *labels, const char *selector);

/* Longest duration ob_duration_parse accepts: 366 days. */
#define OB_DURATION_MAX_MS ((int64_t)366 * 24 * 3600 * 1000)

/* A duration as numbers with units d, h, m, s, largest first and each at most once: "90s",
 * "10m", "2h", "1h30m", "1d12h". 1 s to OB_DURATION_MAX_MS, into *ms. OB_ERR_INVALID_ARG (with
 * what is wrong) for anything else: "", "0s", "2", "1.5h", "-1h", "1m1h", "30m30m". */
ob_status ob_duration_parse(const char *text, int64_t *ms, ob_err *err);

/* ms (>= 0) as ob_duration_parse reads it, largest units first ("1h30m", "45s"; "0s" below a
 * second: the rest of a second is dropped), into out[cap] (truncated to fit). */
void ob_duration_format(int64_t ms, char *out, size_t cap);

/* 1 for SUCCEEDED, FAILED and CANCELLED: the job will not change again. */
int ob_job_state_final(ob_job_state s);

typedef struct ob_progress {
    int64_t step, total_steps;
    double loss;
    char phase[16]; /* "warmup", "compression" or "" */
    int64_t freeze_step;
    double samples_per_s;
    int64_t bytes_sent;         /* per rank */
    int64_t bytes_uncompressed; /* what an fp32 ring allreduce would have sent */
    double lr;
    double freeze_ratio;
    int64_t eval_step; /* step of the latest evaluation; 0: none yet */
    double eval_loss, eval_accuracy;
    /* What a warm start did with the borrowed variance, in short; "" without one. */
    char warm_start[OB_PROGRESS_WARM_LEN];
    /* Compression health at the last logged step (1-bit Adam with error feedback; 0 otherwise
     * and before the freeze): ||e_worker||/||m||, ||e_server||/||m|| and the fraction of
     * momentum coordinates that are exactly 0 (onebit/optim.h, ob_optim_health_sums_local). */
    double worker_error_ratio, server_error_ratio, zero_momentum_fraction;
    /* Rewarm reports of the job so far, over all its attempts (divergence guard, optim.h). */
    int64_t rewarms;
} ob_progress;

typedef struct ob_attempt {
    int number; /* 1, 2, ... */
    int64_t started_ms, ended_ms;
    int64_t start_step;
    int pgid; /* process group of the attempt's processes; 0 when none */
    /* The launcher's own id of the attempt, e.g. the Slurm job id; "" when it has none (local
     * mpirun). A restarted coordinator re-attaches to the attempt through it. */
    char ext_id[OB_ATTEMPT_EXT_ID_LEN];
    int exit_code; /* of the launcher's process; -1 when it did not exit normally */
    char exit_reason[OB_JOB_MSG_LEN]; /* "" while it runs */
} ob_attempt;

typedef struct ob_job {
    int64_t seq; /* store order: 1, 2, ... */
    char id[OB_JOB_ID_LEN];
    char name[128];
    char request_id[OB_REQUEST_ID_LEN]; /* the client's id of the submit that made it; "" none */
    char labels[OB_LABELS_LEN];         /* "k=v,k=v", sorted by key (ob_labels_parse); "" none */
    int64_t deadline_ms;                /* time limit from the first start (started_ms); 0: none */
    ob_job_state state;
    char *spec_json; /* canonical spec (owned, malloc) */
    int world_size;
    int max_restarts;
    int restarts;
    int cancel_requested;
    int64_t created_ms, updated_ms, started_ms, finished_ms;
    int64_t next_attempt_ms; /* RESTARTING: when the next attempt may start */
    char message[OB_JOB_MSG_LEN];
    ob_progress progress;
    int64_t ckpt_step, ckpt_ms; /* newest checkpoint; step 0 when none */
    char ckpt_path[OB_JOB_PATH_LEN];
    ob_attempt *attempts; /* owned, malloc; oldest first */
    size_t n_attempts;
} ob_job;

/* Frees what a job owns (spec_json, attempts) and zeroes it. Accepts NULL. */
void ob_job_clear(ob_job *job);

/* Deep copy: dst (caller-owned, its previous contents ignored) gets its own spec and attempts.
 * OB_ERR_NOMEM leaves dst zeroed. */
ob_status ob_job_copy(ob_job *dst, const ob_job *src, ob_err *err);

/* Frees an array of n jobs from the store (each cleared, then the array). Accepts NULL. */
void ob_job_array_free(ob_job *jobs, size_t n);

/* One entry of a job's history. */
typedef struct ob_job_event {
    int64_t seq; /* 1, 2, ... per job */
    char job_id[OB_JOB_ID_LEN];
    int64_t time_ms;
    char kind[16]; /* "state", "attempt", "step", "freeze", "eval", "checkpoint" */
    ob_job_state state;
    char message[OB_JOB_MSG_LEN];
    ob_progress progress;
} ob_job_event;

/* A committed checkpoint of a job, as the APIs list it. */
typedef struct ob_checkpoint_info {
    int64_t step;
    int64_t time_ms;
    char path[OB_JOB_PATH_LEN];
    int world_size;      /* from its metadata; 0 when that cannot be read */
    char phase[16];      /* of the next step: "warmup" or "compression" */
    int64_t freeze_step; /* 0 before the freeze */
    char problem[256];   /* why its metadata cannot be read; "" when it can */
} ob_checkpoint_info;

/* Length of a ListJobs page token, terminator included. */
#define OB_PAGE_TOKEN_LEN 32

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_JOB_H */
