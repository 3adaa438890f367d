/* The optimizer's state, shared by optim.c (creation, layout, state access, warm start),
 * optim_config.c (configuration defaults, validation and names) and optim_step.c (the kernels on
 * either memory and the phases of a step). Private to the engine. */
#ifndef ONEBIT_OPTIM_INTERNAL_H
#define ONEBIT_OPTIM_INTERNAL_H

#include "onebit/car.h"
#include "onebit/f16sum.h"
#include "onebit/optim.h"
#include "onebit/optim_kernels.h"
#include "internal.h"
#include "overlap.h"

#include <stddef.h>
#include <stdint.h>

struct ob_optim {
    ob_optim_config cfg;
    ob_comm *comm; /* borrowed */
    int dev;       /* state and kernels on the GPU (a device-memory communicator) */
    void *stream;  /* the communicator's CUDA stream when dev */
    float *x;      /* (d) parameters, borrowed, in the communicator's memory */
    size_t d;

    float *m;       /* (d) exp_avg */
    float *v;       /* (d) exp_avg_sq, v_Tw after the freeze */
    float *g;       /* (d) scratch: averaged gradient or momentum to exchange */
    float *den;     /* (d) sqrt(v_Tw) + eps, computed when v is frozen; NULL before */
    float *ts;      /* (3 d) track_variance's u, A, B of this rank; NULL without it */
    ob_car *car;    /* compressed allreduce: onebit_adam compressed and naive modes, binsgdm */
    ob_f16sum *f16; /* the gradients' fp16 exchange (gradient_exchange fp16, 2+ ranks), or NULL */
    ob_f16sum *f8;  /* their fp8 exchange (gradient_exchange or refit_exchange fp8), or NULL */
    /* ob_optim_exchange_note: what ranks_per_node "auto" chose, "" otherwise */
    char car_note[256];

    ob__buckets plan;        /* the fp32 exchange's buckets */
    ob__buckets cplan;       /* the compression phase's: the car's segments, last first */
    int layout_set;          /* ob_optim_set_tensor_layout was called */
    ob__overlap *ov;         /* communication thread (cfg.overlap, when possible), else NULL */
    const float *armed_grad; /* the gradient of ob_optim_backward_begin while armed */
    int armed_compressed;    /* armed with the compression phase's work, not a sum */
    ob__sum_job sum_job;     /* the armed sum's arguments (the thread's while armed) */
    struct compress_job {    /* the armed compression's (likewise) */
        ob_optim *o;
        const float *grad;
        ob_adam_coeffs k;
    } compress_job;
    uint64_t bytes_mark; /* the communicator's bytes when the armed exchange began */
    uint64_t buckets_exchanged, buckets_early;

    long step;        /* completed steps */
    long freeze_step; /* -1 until frozen */
    long delta;       /* auto freeze: Delta */
    double *norms;    /* (delta) ring of ||v_t||_1 at slot t % delta */
    double last_ratio, last_norm;
    ob_warm_state warm; /* ob_optim_warm_start */
    long refit_end;     /* OB_WARM_REFIT: freeze at the end of this step */
    double refit_scale; /* OB_WARM_REFIT: v is multiplied by it at that freeze */
    double warm_frac;   /* the warm-start check's fraction, NaN until it ran */
    double warm_fit;    /* at most this fraction off at the check: the refit ends at step 1 */
    uint64_t bytes_sent, bytes_last;
    int timing;          /* ob_optim_set_timing */
    ob_optim_timing tim; /* sums while timing is on (car part read from the car) */
};

/* Whether the configuration exchanges through the compressed allreduce (onebit_adam compressed
 * and naive modes, binsgdm). */
int ob__optim_uses_car(const ob_optim_config *c);

/* The next exchange's draws (binsgdm): keyed by the seed and the step about to run. */
void ob__optim_key_next_step(ob_optim *o);

/* Waits for an armed exchange and disarms (its outcome no longer matters). */
void ob__optim_disarm(ob_optim *o);

/* x *= s over the d elements of a state buffer (host loop or device kernel, the same bits). */
ob_status ob__optim_scale(ob_optim *o, float *x, float s, ob_err *err);

/* den = sqrt(v) + eps, once per freeze (v no longer changes). */
ob_status ob__optim_compute_den(ob_optim *o, ob_err *err);

#endif /* ONEBIT_OPTIM_INTERNAL_H */
