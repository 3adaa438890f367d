/* The C side of the `onebit` Python package: a flat ABI over libonebit, libonebit_checkpoint and
 * the wire's progress reports that ctypes can call without a compiler, built as one shared
 * library (libonebit_py.so). Only integers, doubles, pointers and C strings cross it, so one build
 * serves every Python and every torch: torch's tensors are passed as data pointers (host memory,
 * or CUDA device memory for an NCCL communicator) and its CUDA stream as a handle.
 *
 * Conventions: every function that can fail returns an ob_status (0 ok, negative: ob_strerror)
 * and writes the message into the caller's buffer err (cap bytes, may be NULL with cap 0).
 * Handles (obpy_optim *, ob_comm *) are owned by the caller and freed by their _destroy.
 * Everything else is borrowed for the duration of the call unless its comment says otherwise.
 * This is the package's private interface: its Python modules are its only callers, and they
 * check its version (OBPY_ABI_VERSION) when they load it. */
#ifndef ONEBIT_PY_BINDING_H
#define ONEBIT_PY_BINDING_H

#include "onebit/comm.h"
#include "onebit/rpc_client.h"

#include <stddef.h>
#include <stdint.h>

#define OBPY_ABI_VERSION 4

int obpy_abi_version(void);
/* 1 in a build with the CUDA kernels and the NCCL communicator. */
int obpy_cuda_built(void);
/* Usable CUDA devices (0 without CUDA). */
int obpy_cuda_device_count(void);
const char *obpy_version(void);

/* --- the process --------------------------------------------------------------------------- */

/* Initialises MPI (MPI_THREAD_SERIALIZED requested) unless it already is, and reports this
 * process's place: rank and size in MPI_COMM_WORLD, rank and size among the ranks of its node.
 * A process started without mpirun is a world of one. Safe to call again. */
int obpy_init(int *rank, int *size, int *local_rank, int *local_size, char *err, size_t cap);
/* Finalises MPI if obpy_init initialised it and it is not finalised yet. */
void obpy_finalize(void);
/* Ends every rank of the job with `code` (MPI_Abort): a rank that failed while the others wait in
 * a collective. */
void obpy_abort(int code);

/* --- communicators ------------------------------------------------------------------------- */

/* kind: "mpi" (host memory, MPI_COMM_WORLD; obpy_init first), "self" (a world of one), "nccl"
 * (CUDA device `device`, over MPI_COMM_WORLD). */
int obpy_comm_create(ob_comm **out, const char *kind, int device, char *err, size_t cap);
void obpy_comm_destroy(ob_comm *comm);
/* Broadcasts bytes of buf (in the communicator's memory) from root. */
int obpy_comm_bcast(ob_comm *comm, void *buf, size_t bytes, int root, char *err, size_t cap);
/* Sums n doubles over the ranks of a host communicator (in place; crossed as floats, as the
 * worker's loss and health sums are). */
int obpy_comm_sum(ob_comm *comm, double *v, int n, char *err, size_t cap);
int obpy_comm_barrier(ob_comm *comm, char *err, size_t cap);

/* --- the optimizer --------------------------------------------------------------------------- */

typedef struct obpy_optim obpy_optim;

/* Validates an optimizer the way a job spec's is: spec_json is a job spec document (the binding
 * writes its `optimizer`, `lr` and `steps` from the Python arguments, and a fixed model and
 * data the optimizer never uses), so every value is checked and every default taken exactly as for
 * onebit-worker, with the same messages. total_steps 0: the run's length is unknown, so the
 * auto freeze has no latest step (optimizer.freeze_max_fraction does not apply). On success
 * the optimizer section of the canonical spec goes to canon (cap_canon bytes) when non-NULL. */
int obpy_optim_check(const char *spec_json, long total_steps, char *canon, size_t cap_canon,
                     char *err, size_t cap);

/* Creates the optimizer of spec_json (as obpy_optim_check) over `comm` (borrowed; the one whose
 * memory holds params), for the d floats at params (borrowed, updated in place by every step)
 * laid out as n tensors starting at offsets (ascending from 0, copied) named by `names` (n
 * NUL-terminated names laid end to end, copied) with shapes (ndims[i] entries each of dims,
 * laid end to end, copied): the checkpoints' tensor index. ctrl (borrowed, host memory, the
 * same ranks) carries the small sums of reports and checkpoints. */
int obpy_optim_create(obpy_optim **out, const char *spec_json, long total_steps, ob_comm *comm,
                      ob_comm *ctrl, float *params, size_t d, const size_t *offsets,
                      const char *names, const uint32_t *ndims, const uint64_t *dims, size_t n,
                      char *err, size_t cap);
void obpy_optim_destroy(obpy_optim *o);
/* Renames the n tensors of the index (n names laid end to end as in create); shapes and offsets
 * stay. OB_ERR_INVALID_ARG (nothing changed) for a wrong count or a name the index refuses. */
int obpy_optim_set_names(obpy_optim *o, const char *names, size_t n, char *err, size_t cap);

/* One step with this rank's gradient (d floats in the communicator's memory) at learning rate
 * lr. On a device, `stream` is the caller's CUDA stream (NULL: the default stream): the step
 * starts after the work enqueued there and work enqueued there afterwards sees its updates. */
int obpy_optim_step(obpy_optim *o, const float *grad, double lr, void *stream, char *err,
                    size_t cap);

/* The overlapped exchange (optimizer.overlap; onebit/optim.h, ob_optim_backward_begin):
 * overlap_active is 1 where it is in effect (a host communicator whose MPI allows a second
 * thread). backward_begin arms it for a backward pass that writes `grad` (the pointer the step
 * will be given); grad_ready reports tensor i of the layout final in it, and the exchange of a
 * bucket starts on the optimizer's thread once its tensors are final. Between the two and the
 * step, no call on the communicators and no write to a reported tensor. */
int obpy_optim_overlap_active(const obpy_optim *o);
void obpy_optim_backward_begin(obpy_optim *o, const float *grad);
void obpy_optim_grad_ready(obpy_optim *o, size_t tensor);

/* Where the optimizer stands. */
typedef struct obpy_stats {
    int64_t step, freeze_step, refit_end, bytes_sent, bytes_last_step;
    int64_t bytes_warmup, bytes_compression; /* this rank's traffic by phase, this run */
    int32_t phase, warm_start;
    double freeze_ratio;
} obpy_stats;
void obpy_optim_stats(const obpy_optim *o, obpy_stats *out);
/* What ranks_per_node "auto" chose and why (ob_optim_exchange_note; owned by o), "" otherwise. */
const char *obpy_optim_exchange_note(const obpy_optim *o);

/* The compression-health ratios over every rank (collective over ctrl): ||e_worker||/||m||,
 * ||e_server||/||m|| and the zero-momentum fraction; NaN without error feedback. */
int obpy_optim_health(obpy_optim *o, double out[3], char *err, size_t cap);

/* Copies one of the optimizer's arrays to host memory: which = "exp_avg" (d), "exp_avg_sq" (d),
 * "worker_error" (D), "server_error" (C). *len receives its length; dst (host, room for *len
 * floats) may be NULL to ask the length alone. */
int obpy_optim_read(obpy_optim *o, const char *which, float *dst, size_t *len, char *err,
                    size_t cap);

/* --- checkpoints ------------------------------------------------------------------------------ */

/* What a checkpoint carries besides the optimizer. */
typedef struct obpy_ckpt_info {
    uint64_t seed;     /* the program's seed, as the caller says */
    double lr;         /* the learning rate of the last step */
    double train_loss; /* the last reported loss, NaN when none */
    double wall_seconds;
    uint64_t loader_epoch, loader_index; /* the caller's data position (0 when it keeps none) */
} obpy_ckpt_info;

/* Saves a checkpoint of the optimizer's state after its current step under job_dir (created
 * if needed): the engine's layout (onebit/checkpoint.h), every rank's error buffers, atomic
 * commit, then the newest `keep` kept. extra_json (a JSON object, or "") is stored in the
 * spec attribute beside the optimizer's canonical spec. Collective over ctrl: every rank
 * learns the outcome, and a failure on any rank fails the save everywhere with nothing
 * committed. path (OB_CKPT_PATH_LEN bytes, may be NULL) receives the checkpoint's directory. */
int obpy_ckpt_save(obpy_optim *o, const char *job_dir, int keep, const obpy_ckpt_info *info,
                   const char *extra_json, char *path, char *err, size_t cap);

/* Loads the newest checkpoint of job_dir that verifies (or dir itself when it is a checkpoint),
 * rank 0 choosing and passing over damaged ones (each reported through `notices`, a buffer of
 * cap_notices bytes receiving newline-separated lines), into the optimizer and its
 * parameters: params, m, v, the error buffers (re-sharded for another world size), the freeze
 * detector and the step. The tensor index must name the optimizer's tensors with their shapes,
 * and the optimizer's spec must match the saved one (its hyper-parameters, not the
 * learning-rate schedule): otherwise OB_ERR_INVALID_ARG and nothing changed. *found = 0 (and
 * OB_OK) when there is none. The saved extra JSON goes to *extra_json (malloc'd: obpy_free).
 * Collective over ctrl. */
int obpy_ckpt_load(obpy_optim *o, const char *job_dir, int *found, obpy_ckpt_info *info,
                   char **extra_json, char *path, int *from_world_size, char *notices,
                   size_t cap_notices, char *err, size_t cap);

/* After a rollback: obpy_ckpt_load of the newest good checkpoint once the run diverged at step
 * bad_step, with `before` the stats taken before that load. The traffic counters keep what
 * crossed the network, the rollback is counted (checkpoints carry the count), and 1-bit Adam
 * re-estimates its variance (ob_optim_rewarm, over ob_optim_auto_refit_steps): a frozen
 * optimizer runs Adam steps until refit_end, then freezes again; one still in the warmup moves
 * its freeze past bad_step. Other optimizers go on from the checkpoint as they were. */
int obpy_optim_rolled_back(obpy_optim *o, long bad_step, const obpy_stats *before, char *err,
                           size_t cap);
/* Rollbacks taken, those of the checkpoints it resumed from included. */
int obpy_optim_rollbacks(const obpy_optim *o);

/* A warm start of a fresh optimizer (no step taken) from the frozen variance of the checkpoint
 * `from` (a checkpoint or a job directory: its newest valid one), as a job spec's warm_start:
 * refit_steps < 0 for "auto" (ob_optim_auto_refit_steps), 0: taken as is. The source must hold
 * the same tensors. Its parameters are taken too when with_params. Collective over ctrl.
 * outcome (512 bytes) says what happened, as the worker's warm-start event does. */
int obpy_ckpt_warm_start(obpy_optim *o, const char *from, long refit_steps, int with_params,
                         char *outcome, char *err, size_t cap);

void obpy_free(void *p);

/* --- progress reports ------------------------------------------------------------------------- */

/* The progress report of one event as onebit-worker prints it (onebit/report.h): a JSON line
 * without the newline into out (cap bytes; truncated reports are refused). kind is a report
 * kind's name ("start", "step", "freeze", "eval", "checkpoint", "resume", "notice", "summary");
 * nums holds the event's numbers in the order of OBPY_REPORT_* below (unused ones ignored). */
enum {
    OBPY_R_STEP = 0,
    OBPY_R_LOSS,
    OBPY_R_LR,
    OBPY_R_SAMPLES_PER_S,
    OBPY_R_BYTES_SENT,
    OBPY_R_BYTES_STEP,
    OBPY_R_FREEZE_RATIO,
    OBPY_R_WORKER_ERROR,
    OBPY_R_SERVER_ERROR,
    OBPY_R_ZERO_MOMENTUM,
    OBPY_R_WORLD_SIZE,
    OBPY_R_NUM_PARAMS,
    OBPY_R_EVAL_LOSS,
    OBPY_R_EVAL_ACCURACY,
    OBPY_R_EVAL_COUNT,
    OBPY_R_CKPT_FAILED,
    OBPY_R_FREEZE_STEP,
    OBPY_R_BYTES_WARMUP,
    OBPY_R_BYTES_COMPRESSION,
    OBPY_R_WALL_SECONDS,
    OBPY_R_FIRST_STEP,
    OBPY_R_LAST_CHECKPOINT,
    OBPY_R_STOPPED,
    OBPY_R_FROM_WORLD_SIZE,
    OBPY_R_TO_STEP, /* rewarm: the checkpoint's step (text: the message, text2: its path) */
    OBPY_R_COUNT
};
/* A reporter to onebitd's WorkerService at target (host:port) for job_id, with the attempt's
 * credential from the environment (ob_reporter_create). */
int obpy_reporter_create(const char *target, const char *job_id, ob_reporter **out, char *err,
                         size_t cap);
/* Accepts NULL. */
void obpy_reporter_destroy(ob_reporter *r);

/* obpy_report's *flags. */
#define OBPY_REPORT_SENT 1          /* the coordinator took it */
#define OBPY_REPORT_CANCEL 2        /* ... and is cancelling the job: stop as on SIGTERM */
#define OBPY_REPORT_FIRST_FAILURE 4 /* the reporter's first failed send: err says why */

/* One progress report, built once: its JSON line into out (cap bytes; out NULL: none) and, with
 * a reporter (may be NULL), sent to onebitd as onebit-worker's are. A failed send is not an
 * error (training goes on, the coordinator reads the log): *flags tells it. phase: "warmup" or
 * "compression"; text: the spec JSON (start), the checkpoint path (checkpoint, resume) or the
 * message (notice, a failed checkpoint). */
int obpy_report(ob_reporter *reporter, const char *kind, const char *phase, const double *nums,
                int n, const char *text, const char *text2, char *out, size_t cap, int *flags,
                char *err, size_t ecap);

#endif /* ONEBIT_PY_BINDING_H */
