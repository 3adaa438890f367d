/* The data-parallel training loop: one job spec, one rank's view.
 *
 * A trainer loads this rank's shard of the data, builds the model (parameters initialised
 * identically on every rank from the job seed), the optimizer over the communicator, and runs
 * the steps of the spec, reporting progress through a callback (called on every rank; the
 * worker prints rank 0's). Everything is deterministic for a given spec and world size.
 *
 * Checkpoints (onebit/checkpoint.h): with ob_trainer_enable_checkpoints the trainer saves every
 * checkpoint.interval steps, at the end, and when the stop flag is raised (it finishes the
 * step, saves and returns). ob_trainer_resume continues from the newest checkpoint that
 * verifies, bit-exact at the same world size; ob_trainer_warm_start starts the compression
 * phase from an earlier run's frozen variance. */
#ifndef ONEBIT_TRAINER_H
#define ONEBIT_TRAINER_H

#include "onebit/comm.h"
#include "onebit/data.h"
#include "onebit/jobspec.h"
#include "onebit/model.h"
#include "onebit/optim.h"

#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_trainer ob_trainer;

typedef enum ob_train_event_kind {
    OB_EVENT_STEP = 0,       /* a logged training step */
    OB_EVENT_EVAL = 1,       /* an evaluation on the held-out split */
    OB_EVENT_FREEZE = 2,     /* the variance was frozen at this step (1-bit Adam) */
    OB_EVENT_CHECKPOINT = 3, /* a checkpoint of `step` was committed at `path` (or failed) */
    OB_EVENT_RESUME = 4,     /* training continues from the checkpoint at `path` */
    OB_EVENT_NOTICE = 5,     /* something the user should know: `message` */
    OB_EVENT_WARM_START = 6, /* what a warm start did: `warm_start` in short, `message` */
    OB_EVENT_REWARM = 7,     /* a divergence at `step` rolled back to `to_step` (`path`) */
} ob_train_event_kind;

typedef struct ob_train_event {
    ob_train_event_kind kind;
    long step; /* completed steps */
    long total_steps;
    ob_phase phase;       /* phase of the next step */
    double loss;          /* STEP: mean train loss over ranks and the steps since the last log */
    double lr;            /* STEP: learning rate of this step */
    double samples_per_s; /* STEP: all ranks, since the last log */
    uint64_t bytes_sent;  /* optimizer traffic of this rank so far */
    uint64_t bytes_step;  /* optimizer traffic of this rank in this step */
    double freeze_ratio;  /* ||v_t||_1/||v_{t-Delta}||_1 (NaN when not computed) */
    long freeze_step;     /* -1 until frozen */
    double eval_loss;     /* EVAL: mean loss per example / per predicted byte (nats) */
    double eval_accuracy; /* EVAL: argmax accuracy (examples or bytes) */
    size_t eval_count;    /* EVAL: examples or predicted bytes evaluated */
    int is_text;          /* loss is per byte: bits per byte = loss / ln 2 */
    /* CHECKPOINT and RESUME; the strings are borrowed for the duration of the callback. */
    const char *path;       /* checkpoint directory */
    const char *message;    /* NOTICE: the text; CHECKPOINT: NULL on success, else why it failed */
    int ckpt_ok;            /* CHECKPOINT: committed */
    int ckpt_async;         /* CHECKPOINT: written by the background thread */
    double stall_seconds;   /* CHECKPOINT: time the training loop stood still for it */
    double write_seconds;   /* CHECKPOINT: rank 0's time writing and syncing its files */
    uint64_t ckpt_bytes;    /* CHECKPOINT: array bytes in the checkpoint, all ranks */
    int from_world_size;    /* RESUME: world size that wrote the checkpoint */
    const char *warm_start; /* WARM_START: "taken as is", "re-estimated until step N (...)", or
                             * "refused (...)" */
    long to_step;           /* REWARM: the checkpoint's step training continues after */
    /* STEP: compression health of the state after this step (ob_optim_health_sums_local over
     * all ranks): ||e_worker||/||m|| and ||e_server||/||m|| (0 before the freeze), and the
     * fraction of momentum coordinates that are exactly 0. NaN when the optimizer has no error
     * feedback (adam, onebit_adam uncompressed). */
    double worker_error_ratio, server_error_ratio, zero_momentum_fraction;
} ob_train_event;

typedef void (*ob_train_callback)(const ob_train_event *ev, void *user);

/* Where this rank's training time went (ob_trainer_set_profiling), summed over the steps. */
typedef struct ob_train_profile {
    long steps;         /* steps timed; 0 when profiling was off */
    double data_s;      /* loading batches */
    double compute_s;   /* forward + backward (on a device, the batch upload included) */
    double optim_s;     /* optimizer steps in all, which include: */
    double allreduce_s; /*   fp32 allreduces (the warmup's gradients); with optimizer.overlap
                         *   the time the step still waited for them after the backward pass */
    double compress_s;  /*   1-bit compression: worker, server, decode */
    double exchange_s;  /*   the compressed allreduce's alltoall and allgather */
    double wait_s;      /* with optimizer.overlap, compression steps: the time the step still
                         * waited for segments after the backward pass; compress_s and
                         * exchange_s then ran on the communication thread, beside the
                         * compute, and are not part of optim_s */
} ob_train_profile;

typedef struct ob_train_summary {
    long steps;
    long freeze_step;
    double final_train_loss; /* mean over the last log interval */
    double eval_loss, eval_accuracy;
    size_t eval_count;
    uint64_t bytes_sent, bytes_warmup, bytes_compression; /* this rank, optimizer traffic */
    double wall_seconds;
    double samples_per_s;
    size_t num_params;
    int stopped;          /* 1: the stop flag ended the run early (after a checkpoint) */
    long first_step;      /* first step this run trained (> 1 after a resume) */
    long last_checkpoint; /* step of the newest committed checkpoint, -1 none */
    ob_train_profile profile;
} ob_train_summary;

/* Fault injection for tests: after completing step `step`, rank `rank` raises `signal` (e.g.
 * SIGKILL: the rank dies there; SIGTERM: the stop path). step 0 disables. */
typedef struct ob_fault_injection {
    long step;
    int rank;
    int signal;
} ob_fault_injection;

/* Creates a trainer for `spec` (copied) on `comm` (borrowed, host memory: MPI, or self for one
 * process on the CPU). With spec.device == OB_DEVICE_CUDA it also creates the NCCL
 * communicator (MPI initialised, one GPU per rank: onebit/comm.h ob_comm_local_device) for the
 * optimizer, and the model, parameters, gradients and optimizer state live on the GPU; comm
 * still carries the small control, loss and evaluation sums. Collective: it checks that every
 * rank set up successfully, so that a failure on one rank (a missing file, no GPU, say) fails
 * all of them with the message of the rank that failed. */
ob_status ob_trainer_create(ob_trainer **out, const ob_jobspec *spec, ob_comm *comm, ob_err *err);
void ob_trainer_destroy(ob_trainer *t); /* accepts NULL */

/* Runs the remaining steps of the spec, evaluating every eval.interval steps and at the end.
 * cb may be NULL. Collective. */
ob_status ob_trainer_run(ob_trainer *t, ob_train_callback cb, void *user, ob_train_summary *out,
                         ob_err *err);

/* Evaluates on the held-out split (eval.max_examples of it, sharded over the ranks): mean loss
 * and accuracy summed over every rank. Collective. */
ob_status ob_trainer_evaluate(ob_trainer *t, ob_train_event *out, ob_err *err);

/* Enables checkpoints under job_dir (copied; created when first needed): every
 * spec.checkpoint_interval steps (0: none), at the end, and on a stop request, keeping the
 * newest spec.checkpoint_keep, written in a background thread when spec.checkpoint_async. */
ob_status ob_trainer_enable_checkpoints(ob_trainer *t, const char *job_dir, ob_err *err);

/* A flag (borrowed; typically set by a SIGTERM handler) polled after every step: once any rank
 * sees it non-zero, all ranks finish the step, checkpoint and return from ob_trainer_run with
 * summary.stopped = 1. NULL: none. */
void ob_trainer_set_stop_flag(ob_trainer *t, const volatile sig_atomic_t *flag);

void ob_trainer_set_fault_injection(ob_trainer *t, const ob_fault_injection *f);

/* Profiling on: the summary's profile splits this rank's step time into data, compute, fp32
 * allreduce, compression, exchange and the rest of the optimizer (updates). On a GPU it
 * synchronises the stream between the parts, which costs a little time per step. */
void ob_trainer_set_profiling(ob_trainer *t, int on);

/* Continues from the newest checkpoint of job_dir that verifies (rank 0 chooses; passed-over
 * checkpoints are reported as NOTICE events with the reason). Restores parameters, m, v, the
 * error-feedback buffers (re-sharded when the world size differs), the freeze detector, the
 * step, the data position and the counters, and emits RESUME. *resumed = 0 (and OB_OK) when
 * there is no usable checkpoint: the run starts from step 0. A checkpoint written by a spec
 * that differs in anything but steps, eval, log_interval, checkpoint and name is refused
 * (OB_ERR_INVALID_ARG). Collective; on failure every rank returns the error. */
ob_status ob_trainer_resume(ob_trainer *t, const char *job_dir, ob_train_callback cb, void *user,
                            int *resumed, ob_err *err);

/* Applies the spec's warm_start: takes v_Tw (and, with warm_start.params, the parameters) of
 * the named checkpoint and enters the compression phase with zero errors. Call before
 * training, instead of resuming. Collective. */
ob_status ob_trainer_warm_start(ob_trainer *t, ob_train_callback cb, void *user, ob_err *err);

/* Borrowed views for inspection and checkpointing. The parameters are device memory when the
 * job runs on CUDA. */
float *ob_trainer_params(ob_trainer *t);
size_t ob_trainer_num_params(const ob_trainer *t);
ob_optim *ob_trainer_optim(ob_trainer *t);
ob_model *ob_trainer_model(ob_trainer *t);
const ob_dataset *ob_trainer_dataset(const ob_trainer *t);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_TRAINER_H */
