/* The data-parallel training loop: one job spec, one rank's view.
 *
 * A trainer loads this rank's shard of the data, builds the model (parameters initialised
 * identically on every rank from the job seed), the optimizer over the communicator, and runs
 * the steps of the spec, reporting progress through a callback (called on every rank; the
 * worker prints rank 0's). Everything is deterministic for a given spec and world size. */
#ifndef ONEBIT_TRAINER_H
#define ONEBIT_TRAINER_H

#include "onebit/comm.h"
#include "onebit/data.h"
#include "onebit/jobspec.h"
#include "onebit/model.h"
#include "onebit/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_trainer ob_trainer;

typedef enum ob_train_event_kind {
    OB_EVENT_STEP = 0,   /* a logged training step */
    OB_EVENT_EVAL = 1,   /* an evaluation on the held-out split */
    OB_EVENT_FREEZE = 2, /* the variance was frozen at this step (1-bit Adam) */
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
} ob_train_event;

typedef void (*ob_train_callback)(const ob_train_event *ev, void *user);

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
} ob_train_summary;

/* Creates a trainer for `spec` (copied) on `comm` (borrowed, host memory). Collective: it
 * checks that every rank set up successfully, so that a failure on one rank (a missing file,
 * say) fails all of them with the message of the rank that failed. */
ob_status ob_trainer_create(ob_trainer **out, const ob_jobspec *spec, ob_comm *comm, ob_err *err);
void ob_trainer_destroy(ob_trainer *t); /* accepts NULL */

/* Runs the remaining steps of the spec, evaluating every eval.interval steps and at the end.
 * cb may be NULL. Collective. */
ob_status ob_trainer_run(ob_trainer *t, ob_train_callback cb, void *user, ob_train_summary *out,
                         ob_err *err);

/* Evaluates on the held-out split (eval.max_examples of it, sharded over the ranks): mean loss
 * and accuracy summed over every rank. Collective. */
ob_status ob_trainer_evaluate(ob_trainer *t, ob_train_event *out, ob_err *err);

/* Borrowed views for inspection and checkpointing. */
float *ob_trainer_params(ob_trainer *t);
size_t ob_trainer_num_params(const ob_trainer *t);
ob_optim *ob_trainer_optim(ob_trainer *t);
ob_model *ob_trainer_model(ob_trainer *t);
const ob_dataset *ob_trainer_dataset(const ob_trainer *t);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_TRAINER_H */
