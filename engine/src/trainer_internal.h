/* The trainer's state, shared by trainer.c (setup and the training loop), trainer_ckpt.c
 * (writing checkpoints) and trainer_resume.c (resume, rollback, warm start). Private to the
 * engine. */
#ifndef ONEBIT_TRAINER_INTERNAL_H
#define ONEBIT_TRAINER_INTERNAL_H

#include "onebit/checkpoint.h"
#include "onebit/trainer.h"
#include "internal.h"

#include <signal.h>

typedef struct ob__ckpt_writer ob__ckpt_writer;

struct ob_trainer {
    ob_jobspec spec;
    char *spec_json; /* canonical JSON of spec, saved in every checkpoint */
    /* warm start: how the source ran against this job (sets refit_steps auto), and why its
     * v_Tw fits this job less than a rerun's would (a static string for the notice, NULL on the
     * source's own setting) */
    ob_warm_source warm_source;
    const char *warm_differs;
    int rollbacks; /* after divergences, in this job (kept in checkpoints) */
    /* The divergence guard's view of the loss, the same on every rank (from the sums of the
     * step's control reduction) and kept in checkpoints: the moving average of the mean train
     * loss, its value at the freeze and its lowest since (NaN while in the warmup). */
    double loss_ema, loss_at_freeze, loss_best;
    int rise_warned; /* a rise was reported with no rollback possible */
    ob_comm *comm;   /* borrowed: control, evaluation and loss sums (host memory) */
    ob_comm *dcomm;  /* device: cuda: the NCCL communicator of the optimizer (owned), else NULL */
    int dev;         /* params, grad and the optimizer state live on the GPU */
    ob_dataset *ds;
    ob_loader *train;
    ob_loader *eval; /* NULL when the data has no held-out split */
    ob_model *model;
    float *params; /* (d) in the optimizer communicator's memory */
    float *grad;   /* (d) likewise */
    /* device: host copies of what a checkpoint holds, allocated on first use (ob__host_state) */
    float *h_params, *h_m, *h_v, *h_we, *h_se, *h_ts;
    size_t d;
    ob_optim *opt;
    int is_text;

    /* Totals carried across attempts (restored from a checkpoint). */
    uint64_t bytes_warmup, bytes_compression;
    double wall_before; /* training seconds of earlier attempts */
    double last_loss;   /* mean train loss of the last logged window */
    double last_lr;
    double t_start; /* when this attempt's training began */

    /* Checkpoints: job_dir[0] == 0 when disabled. */
    char job_dir[OB_CKPT_PATH_LEN];
    ob__ckpt_writer *writer;  /* background writer, created on the first async checkpoint */
    ob_ckpt_written *written; /* rank 0: the checkpoints it committed (retention reads none) */
    ob_ckpt_tensor *tensors;  /* the model's tensor table as checkpoints index it (owned) */
    size_t num_tensors;
    long pending_step;    /* step of an async checkpoint still being written, or -1 */
    double pending_stall; /* seconds the loop stood still for it */
    long last_ckpt_step;  /* newest committed (or pending) checkpoint, -1 none */
    const volatile sig_atomic_t *stop_flag; /* borrowed; non-zero: checkpoint and stop */
    ob_fault_injection fault;
    int profiling;            /* ob_trainer_set_profiling */
    ob_train_profile profile; /* data and compute parts; the optimizer's come from it */
};

/* Fills t->tensors from the model's tensor table (ob_model_tensor_at), the index every
 * checkpoint's state.h5 carries. */
ob_status ob__trainer_tensor_index(ob_trainer *t, ob_err *err);

/* What a checkpoint holds, in host memory: on the CPU the live buffers, on a device the
 * trainer's host copies. */
typedef struct ob__host_state {
    float *params, *m, *v; /* (d) */
    float *we, *se;        /* (D), (C), or NULL without a compressed allreduce */
    double *hist;          /* (H) freeze detector history, or NULL */
    size_t d, D, C, H;
    const size_t *seg; /* the server layout: nseg segments, bounds seg[0 .. nseg] (the car's) */
    size_t nseg;
    int local; /* m and v are this rank's own (ob_optim_state.local_moments) */
    float *ts; /* (TS) this rank's variance statistics (track_variance), or NULL */
    size_t TS;
    int ranks_per_node; /* the compressed exchange's (ob_optim_state.ranks_per_node) */
} ob__host_state;

/* Host views of the state. With `download` on a device, the state is first copied from the
 * device (after the work queued on the stream; params, m and v on rank 0 only, the one rank
 * that writes them). */
ob_status ob__trainer_host_state(ob_trainer *t, int download, ob__host_state *hs, ob_err *err);

/* After hs (from ob__trainer_host_state) was written: on a device, copies it to the device and
 * waits; on the CPU there is nothing to do. */
ob_status ob__trainer_upload_state(ob_trainer *t, const ob__host_state *hs, ob_err *err);

/* Called after every step with the values of the step's control reduction: stop requests and
 * how many ranks finished their part of the pending async checkpoint (ok / failed). Commits
 * the pending checkpoint once every rank is done. */
ob_status ob__trainer_ckpt_poll(ob_trainer *t, float done_ok, float done_failed,
                                ob_train_callback cb, void *user, ob_err *err);

/* This rank's contribution to the control reduction: (done ok, done failed) of its part of the
 * pending async checkpoint; (0, 0) while writing or when none is pending. */
void ob__trainer_ckpt_local_done(ob_trainer *t, float *ok, float *failed);

/* Writes and commits a checkpoint of the current step now (after any pending one). Collective.
 * Emits OB_EVENT_CHECKPOINT. `async` hands the write to the background thread. */
ob_status ob__trainer_checkpoint(ob_trainer *t, int async, ob_train_callback cb, void *user,
                                 ob_err *err);

/* Waits for a pending async checkpoint and commits it. Collective. */
ob_status ob__trainer_ckpt_flush(ob_trainer *t, ob_train_callback cb, void *user, ob_err *err);

void ob__trainer_ckpt_destroy(ob_trainer *t);

/* Sums a failure flag over the ranks: *nfail ranks failed. Collective. */
ob_status ob__trainer_agree(ob_trainer *t, int failed, int *nfail, ob_err *err);

/* Completes ev with the optimizer's phase, freeze and traffic and hands it to cb (borrowed; a
 * NULL cb drops it). */
void ob__trainer_emit(ob_trainer *t, ob_train_event *ev, ob_train_callback cb, void *user);

/* Emits an OB_EVENT_NOTICE of the current step carrying msg (borrowed for the call). */
void ob__trainer_notice(ob_trainer *t, const char *msg, ob_train_callback cb, void *user);

/* Whether a divergence can be answered with a rollback (the same on every rank). */
int ob__trainer_can_roll_back(const ob_trainer *t);

/* After a step that diverged (`why` says how: a loss not finite, or one that rose): back to
 * the newest checkpoint, v re-estimated (ob_optim_rewarm), a notice. Collective. *step
 * receives the restored step. */
ob_status ob__trainer_roll_back(ob_trainer *t, long bad_step, const char *why, long *step,
                                ob_train_callback cb, void *user, ob_err *err);

/* After step 1 of a warm-started run: a notice of the warm-start check's outcome. */
void ob__trainer_warm_checked(ob_trainer *t, const ob_optim_stats *os, ob_train_callback cb,
                              void *user);

#endif /* ONEBIT_TRAINER_INTERNAL_H */
