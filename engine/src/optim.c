/* Adam, 1-bit Adam, BinSGDM and SoftSignSGD over a flat parameter buffer (see onebit/optim.h
 * for the algorithms). */
#include "onebit/optim.h"
#include "onebit/car.h"
#include "onebit/compress_cuda.h"
#include "onebit/f16sum.h"
#include "onebit/optim_kernels.h"
#include "internal.h"
#include "overlap.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    ob_car *car;    /* compressed allreduce: onebit_adam compressed and naive modes, binsgdm */
    ob_f16sum *f16; /* the gradients' fp16 exchange (gradient_exchange fp16, 2+ ranks), or NULL */
    ob_f16sum *f8;  /* their fp8 exchange (gradient_exchange or refit_exchange fp8), or NULL */

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
    uint64_t bytes_mark;     /* the communicator's bytes when the armed exchange began */
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

void ob_optim_config_default(ob_optim_config *cfg, ob_optim_kind kind)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = kind;
    cfg->beta1 = 0.9;
    cfg->beta2 = 0.999;
    cfg->eps = 1e-8;
    cfg->weight_decay = 0.0;
    cfg->bias_correction = kind == OB_OPTIM_ADAM;
    cfg->mode = OB_ONEBIT_COMPRESSED;
    cfg->freeze_step = 0;
    cfg->freeze_threshold = 0.96;
    cfg->freeze_min_steps = 0;
    cfg->freeze_max_step = 0;
    cfg->lr_warmup_steps = 0;
    cfg->block_size = 2048;
    cfg->scale = OB_SCALE_L1;
    cfg->stabilizer = kind == OB_OPTIM_ONEBIT_ADAM ? OB_STABILIZER_ADAM_BOUND : OB_STABILIZER_NONE;
    cfg->stability_bound = 0.0;
    cfg->frozen_step_ratio = 0.0;
    cfg->bucket_bytes = 0;
    cfg->overlap = 0;
    cfg->gradient_exchange = OB_EXCHANGE_FP32;
    cfg->refit_exchange = OB_EXCHANGE_FP8;
    cfg->refresh_steps = 0;
    cfg->seed = 1;
    cfg->max_denominator_step = 0;
    if (kind == OB_OPTIM_BINSGDM) {
        /* Unit signs carry no scale: the block only rounds the padding up (to N B). */
        cfg->block_size = 256;
        cfg->scale = OB_SCALE_UNIT;
    }
}


const char *ob_stabilizer_name(ob_stabilizer s)
{
    switch (s) {
    case OB_STABILIZER_NONE:
        return "none";
    case OB_STABILIZER_ADAM_BOUND:
        return "adam_bound";
    }
    return "unknown";
}

const char *ob_gradient_exchange_name(ob_gradient_exchange x)
{
    switch (x) {
    case OB_EXCHANGE_FP32:
        return "fp32";
    case OB_EXCHANGE_FP16:
        return "fp16";
    case OB_EXCHANGE_FP8:
        return "fp8";
    }
    return "unknown";
}

double ob_optim_stability_bound(const ob_optim_config *cfg)
{
    if (cfg->stabilizer != OB_STABILIZER_ADAM_BOUND) return INFINITY;
    if (cfg->stability_bound > 0.0) return cfg->stability_bound;
    return (1.0 - cfg->beta1) / sqrt(1.0 - cfg->beta2);
}

double ob_optim_frozen_step_ratio(const ob_optim_config *cfg)
{
    if (cfg->frozen_step_ratio > 0.0) return cfg->frozen_step_ratio;
    return cfg->stabilizer == OB_STABILIZER_ADAM_BOUND ? OB_FROZEN_STEP_RATIO : INFINITY;
}

double ob_optim_freeze_raise(const ob_optim_config *cfg, long t)
{
    double r = ob_optim_frozen_step_ratio(cfg);
    if (cfg->bias_correction || isinf(r) || t < 1) return 1.0;
    double f = 1.0 / (r * r * (1.0 - pow(cfg->beta2, (double)t)));
    return f > 1.0 ? f : 1.0;
}

const char *ob_optim_kind_name(ob_optim_kind kind)
{
    switch (kind) {
    case OB_OPTIM_ADAM:
        return "adam";
    case OB_OPTIM_ONEBIT_ADAM:
        return "onebit_adam";
    case OB_OPTIM_BINSGDM:
        return "binsgdm";
    case OB_OPTIM_SOFTSIGN:
        return "softsign";
    }
    return "unknown";
}

const char *ob_onebit_mode_name(ob_onebit_mode mode)
{
    switch (mode) {
    case OB_ONEBIT_COMPRESSED:
        return "compressed";
    case OB_ONEBIT_UNCOMPRESSED:
        return "uncompressed";
    case OB_ONEBIT_NAIVE:
        return "naive";
    }
    return "unknown";
}

const char *ob_phase_name(ob_phase phase)
{
    return phase == OB_PHASE_COMPRESSION ? "compression" : "warmup";
}

long ob_optim_freeze_delta(double beta2)
{
    /* 1/(1-0.999) is 1000.0000000000009 in binary; shave a relative 1e-9 before ceil. */
    double x = 1.0 / (1.0 - beta2);
    return (long)ceil(x * (1.0 - 1e-9));
}

static int uses_car(const ob_optim_config *c);

ob_status ob_optim_config_validate(const ob_optim_config *c, ob_err *err)
{
#define BAD(...) OB_ERR(err, OB_ERR_INVALID_ARG, __VA_ARGS__)
    if (c->kind < OB_OPTIM_ADAM || c->kind > OB_OPTIM_SOFTSIGN)
        return BAD("optimizer: unknown kind %d (expected adam, onebit_adam, binsgdm or softsign)",
                   (int)c->kind);
    if (!(c->beta1 >= 0.0 && c->beta1 < 1.0)) return BAD("beta1 = %g: must be in [0, 1)", c->beta1);
    if (!(c->beta2 >= 0.0 && c->beta2 < 1.0)) return BAD("beta2 = %g: must be in [0, 1)", c->beta2);
    if (!(c->eps > 0.0 && isfinite(c->eps))) return BAD("eps = %g: must be > 0", c->eps);
    if (!(c->weight_decay >= 0.0 && isfinite(c->weight_decay)))
        return BAD("weight_decay = %g: must be >= 0", c->weight_decay);
    if (c->bias_correction != 0 && c->bias_correction != 1)
        return BAD("bias_correction = %d: must be 0 or 1", c->bias_correction);
    if (c->bucket_bytes > OB_OPTIM_MAX_BUCKET_BYTES)
        return BAD("bucket_bytes = %zu: must be at most %zu (1 GiB)", c->bucket_bytes,
                   OB_OPTIM_MAX_BUCKET_BYTES);
    if (c->overlap != 0 && c->overlap != 1) return BAD("overlap = %d: must be 0 or 1", c->overlap);
    if (c->gradient_exchange != OB_EXCHANGE_FP32 && c->gradient_exchange != OB_EXCHANGE_FP16 &&
        c->gradient_exchange != OB_EXCHANGE_FP8)
        return BAD("gradient_exchange = %d: expected fp32, fp16 or fp8", (int)c->gradient_exchange);
    if (c->refit_exchange != OB_EXCHANGE_FP32 && c->refit_exchange != OB_EXCHANGE_FP16 &&
        c->refit_exchange != OB_EXCHANGE_FP8)
        return BAD("refit_exchange = %d: expected fp32, fp16 or fp8", (int)c->refit_exchange);
    if (c->refresh_steps < 0 || c->refresh_steps > OB_OPTIM_MAX_REFRESH_STEPS)
        return BAD("refresh_steps = %ld: must be in [0, %d] (0: never)", c->refresh_steps,
                   OB_OPTIM_MAX_REFRESH_STEPS);
    if (c->ranks_per_node < 0 || c->ranks_per_node > OB_OPTIM_MAX_RANKS_PER_NODE)
        return BAD("ranks_per_node = %d: must be in [0, %d] (0: flat)", c->ranks_per_node,
                   OB_OPTIM_MAX_RANKS_PER_NODE);
    if (c->ranks_per_node > 1 && !uses_car(c))
        return BAD("ranks_per_node = %d: only a compressed exchange (onebit_adam with compression "
                   "on or naive, binsgdm) runs hierarchically",
                   c->ranks_per_node);
    if (c->max_denominator_step < 0)
        return BAD("max_denominator_step = %ld: must be >= 0 (0: never)", c->max_denominator_step);
    if (c->max_denominator_step > 0 && c->kind != OB_OPTIM_BINSGDM)
        return BAD("max_denominator_step = %ld: only binsgdm keeps a running maximum",
                   c->max_denominator_step);
    if (c->kind != OB_OPTIM_ONEBIT_ADAM && c->refresh_steps > 0)
        return BAD("refresh_steps = %ld: %s never freezes v; only onebit_adam refreshes it",
                   c->refresh_steps, ob_optim_kind_name(c->kind));
    if (c->kind == OB_OPTIM_ADAM || c->kind == OB_OPTIM_SOFTSIGN) return OB_OK;
    if (c->kind == OB_OPTIM_BINSGDM) {
        if (c->block_size == 0 || c->block_size % 32 != 0)
            return BAD("block_size = %zu: must be a positive multiple of 32", c->block_size);
        if (c->scale != OB_SCALE_UNIT)
            return BAD("scale %d: binsgdm sends unit signs (no scale)", (int)c->scale);
        if (c->gradient_exchange != OB_EXCHANGE_FP32)
            return BAD("gradient_exchange: binsgdm exchanges no gradients (only its 1-bit "
                       "update); leave it fp32");
        if (c->bias_correction)
            return BAD("bias_correction: binsgdm's m / b needs none (both start at zero with "
                       "the same beta)");
        return OB_OK;
    }

    if (c->mode != OB_ONEBIT_COMPRESSED && c->mode != OB_ONEBIT_UNCOMPRESSED &&
        c->mode != OB_ONEBIT_NAIVE)
        return BAD("mode %d: expected compressed, uncompressed or naive", (int)c->mode);
    if (c->freeze_step < 0) return BAD("freeze_step = %ld: must be >= 0 (0: auto)", c->freeze_step);
    if (c->mode == OB_ONEBIT_NAIVE && c->freeze_step > 0)
        return BAD("freeze_step = %ld: the naive mode never freezes v; leave it 0", c->freeze_step);
    if (c->mode == OB_ONEBIT_NAIVE && c->refresh_steps > 0)
        return BAD("refresh_steps = %ld: the naive mode never freezes v; leave it 0",
                   c->refresh_steps);
    if (!(c->freeze_threshold > 0.0 && c->freeze_threshold <= 1.0))
        return BAD("freeze_threshold = %g: must be in (0, 1]", c->freeze_threshold);
    if (c->freeze_min_steps < 0)
        return BAD("freeze_min_steps = %ld: must be >= 0", c->freeze_min_steps);
    if (c->freeze_max_step < 0)
        return BAD("freeze_max_step = %ld: must be >= 0", c->freeze_max_step);
    if (c->lr_warmup_steps < 0)
        return BAD("lr_warmup_steps = %ld: must be >= 0", c->lr_warmup_steps);
    if (c->block_size == 0 || c->block_size % 32 != 0)
        return BAD("block_size = %zu: must be a positive multiple of 32", c->block_size);
    if (c->scale != OB_SCALE_L1 && c->scale != OB_SCALE_L2)
        return BAD("scale %d: expected l1 or l2", (int)c->scale);
    if (c->precondition != 0 && c->precondition != 1)
        return BAD("precondition = %d: must be 0 or 1", c->precondition);
    if (c->precondition && c->mode != OB_ONEBIT_COMPRESSED)
        return BAD("precondition: only for the compressed mode");
    if (c->stabilizer != OB_STABILIZER_NONE && c->stabilizer != OB_STABILIZER_ADAM_BOUND)
        return BAD("stabilizer = %d: unknown", (int)c->stabilizer);
    if (!(c->stability_bound >= 0.0) || c->stability_bound > 1e6)
        return BAD("stability_bound = %g: must be 0 (derived from the betas) or in (0, 1e6]",
                   c->stability_bound);
    if (!(c->frozen_step_ratio == 0.0 ||
          (c->frozen_step_ratio >= 1.0 && c->frozen_step_ratio <= 1e6)))
        return BAD("frozen_step_ratio = %g: must be 0 (the default) or in [1, 1e6]",
                   c->frozen_step_ratio);
    return OB_OK;
#undef BAD
}

static int uses_car(const ob_optim_config *c)
{
    return c->kind == OB_OPTIM_BINSGDM ||
           (c->kind == OB_OPTIM_ONEBIT_ADAM &&
            (c->mode == OB_ONEBIT_COMPRESSED || c->mode == OB_ONEBIT_NAIVE));
}

/* The next exchange's draws (binsgdm): keyed by the seed and the step about to run. */
static void key_next_step(ob_optim *o)
{
    if (o->car) ob_car_set_key(o->car, o->cfg.seed, (uint64_t)(o->step + 1));
}

static int auto_freeze(const ob_optim_config *c)
{
    return c->kind == OB_OPTIM_ONEBIT_ADAM && c->mode != OB_ONEBIT_NAIVE && c->freeze_step == 0;
}

ob_status ob_optim_create(ob_optim **out, const ob_optim_config *cfg, ob_comm *comm, float *params,
                          size_t d, ob_err *err)
{
    *out = NULL;
    ob_status st = ob_optim_config_validate(cfg, err);
    if (st != OB_OK) return st;
    if (!comm || !params || d == 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "optimizer: need a communicator and d > 0 params");
    ob_optim *o = calloc(1, sizeof *o);
    if (!o) return OB_ERR(err, OB_ERR_NOMEM, "optimizer");
    o->cfg = *cfg;
    o->comm = comm;
    o->dev = ob_comm_memory(comm) == OB_MEM_DEVICE;
    o->stream = ob_comm_stream(comm);
    o->x = params;
    o->d = d;
    o->freeze_step = -1;
    o->last_ratio = NAN;
    o->warm_frac = NAN;
    o->refit_scale = 1.0;
    size_t bytes = d * sizeof(float);
    if ((st = ob__mem_alloc(o->dev, (void **)&o->m, bytes, "optimizer momentum", err)) ||
        (st = ob__mem_alloc(o->dev, (void **)&o->v, bytes, "optimizer variance", err)) ||
        (st = ob__mem_alloc(o->dev, (void **)&o->g, bytes, "optimizer exchange buffer", err)) ||
        (st = ob__mem_alloc(o->dev, (void **)&o->den, bytes, "optimizer denominator", err)))
        goto fail;
    if (auto_freeze(cfg)) {
        o->delta = ob_optim_freeze_delta(cfg->beta2);
        o->norms = calloc((size_t)o->delta, sizeof(double));
        if (!o->norms) {
            st = OB_ERR(err, OB_ERR_NOMEM, "optimizer: ring of %ld norms", o->delta);
            goto fail;
        }
    }
    if (uses_car(cfg)) {
        st = ob_car_create_hier(&o->car, comm, d, cfg->block_size, cfg->scale,
                                cfg->ranks_per_node, err);
        if (st != OB_OK) goto fail;
        key_next_step(o);
    }
    if (cfg->kind == OB_OPTIM_BINSGDM) o->freeze_step = 0; /* compressed from the first step */
    if (cfg->gradient_exchange != OB_EXCHANGE_FP32 && ob_comm_size(comm) > 1 &&
        cfg->kind != OB_OPTIM_BINSGDM &&
        !(cfg->kind == OB_OPTIM_ONEBIT_ADAM && cfg->mode == OB_ONEBIT_NAIVE)) {
        if (cfg->gradient_exchange == OB_EXCHANGE_FP8)
            st = ob_f16sum_create_code(&o->f8, comm, d, OB_CODE_FP8, err);
        else
            st = ob_f16sum_create(&o->f16, comm, d, err);
        if (st != OB_OK) goto fail;
    }
    if ((st = ob__buckets_plan(&o->plan, d, NULL, NULL, 0, cfg->bucket_bytes, err)) != OB_OK)
        goto fail;
    if (o->car &&
        (st = ob__buckets_segments(&o->cplan, d, NULL, NULL, 0, ob_car_segment_bounds(o->car),
                                   ob_car_num_segments(o->car), err)) != OB_OK)
        goto fail;
    if (cfg->overlap) {
        if (o->dev) {
            st = OB_ERR(err, OB_ERR_UNSUPPORTED,
                        "overlap: not on the %s communicator (device memory), whose exchange "
                        "follows the backward pass",
                        ob_comm_backend(comm));
            goto fail;
        }
        /* Without MPI_THREAD_SERIALIZED: the same buckets after the backward pass. */
        if (ob_comm_any_thread(comm) && (st = ob__overlap_create(&o->ov, err)) != OB_OK) goto fail;
    }
    *out = o;
    return OB_OK;
fail:
    ob_optim_destroy(o);
    return st;
}

/* The fp16 or fp8 exchange the gradients of the next step cross through, NULL for fp32: a
 * warm start's refit follows cfg.refit_exchange from its second step on, every other step (and
 * the refit's first, whose gradient the check may refuse the borrowed v on: the run is then
 * the job from scratch, bit for bit) cfg.gradient_exchange. */
static ob_f16sum *grad_f16(const ob_optim *o)
{
    int refit = o->warm == OB_WARM_REFIT && o->freeze_step < 0 && o->step >= 1;
    ob_gradient_exchange x = refit ? o->cfg.refit_exchange : o->cfg.gradient_exchange;
    return x == OB_EXCHANGE_FP16 ? o->f16 : x == OB_EXCHANGE_FP8 ? o->f8 : NULL;
}

/* Creates the exchange of a refit in fp16 or fp8 when there is none yet. */
static ob_status ensure_refit_exchange(ob_optim *o, ob_err *err)
{
    if (ob_comm_size(o->comm) < 2) return OB_OK;
    if (o->cfg.refit_exchange == OB_EXCHANGE_FP8 && !o->f8)
        return ob_f16sum_create_code(&o->f8, o->comm, o->d, OB_CODE_FP8, err);
    if (o->cfg.refit_exchange == OB_EXCHANGE_FP16 && !o->f16)
        return ob_f16sum_create(&o->f16, o->comm, o->d, err);
    return OB_OK;
}

/* Waits for an armed exchange and disarms (its outcome no longer matters). */
static void disarm(ob_optim *o)
{
    if (!ob__overlap_armed(o->ov)) return;
    ob__overlap_finish(o->ov, NULL, NULL);
    o->armed_grad = NULL;
}

void ob_optim_destroy(ob_optim *o)
{
    if (!o) return;
    if (o->ov) disarm(o);
    ob__overlap_destroy(o->ov);
    ob__buckets_free(&o->plan);
    ob__buckets_free(&o->cplan);
    ob__mem_free(o->dev, o->m);
    ob__mem_free(o->dev, o->v);
    ob__mem_free(o->dev, o->g);
    ob__mem_free(o->dev, o->den);
    free(o->norms);
    ob_car_destroy(o->car);
    ob_f16sum_destroy(o->f16);
    ob_f16sum_destroy(o->f8);
    free(o);
}

/* --- kernels on either memory ----------------------------------------------------------- */

/* Each runs the host loop or launches the device kernel (onebit/optim_kernels.h; both give the
 * same bits) on the communicator's stream. */

static ob_status k_adam(ob_optim *o, const float *g, const ob_adam_coeffs *k, ob_err *err)
{
    if (o->dev) return ob_cuda_adam_update(o->x, o->m, o->v, g, o->d, k, o->stream, err);
    ob_adam_update(o->x, o->m, o->v, g, o->d, k);
    return OB_OK;
}

/* The momentum of [lo, lo + n) only (g is the whole gradient). */
static ob_status k_momentum(ob_optim *o, const float *g, size_t lo, size_t n,
                            const ob_adam_coeffs *k, ob_err *err)
{
    if (o->dev) return ob_cuda_momentum_update(o->m + lo, g + lo, n, k->b1, k->a1, o->stream, err);
    ob_momentum_update(o->m + lo, g + lo, n, k->b1, k->a1);
    return OB_OK;
}

/* The stabiliser's bound c as the kernels take it: 1/c for the frozen step (0: none), c for the
 * preconditioned one (INFINITY: none). */
static float inv_bound(const ob_optim *o)
{
    double c = ob_optim_stability_bound(&o->cfg);
    return isinf(c) ? 0.0f : (float)(1.0 / c);
}

static ob_status k_frozen(ob_optim *o, const ob_adam_coeffs *k, ob_err *err)
{
    float inv_c = inv_bound(o);
    if (o->dev)
        return ob_cuda_frozen_update(o->x, o->m, o->den, o->d, k->lr, k->wd, inv_c, o->stream, err);
    ob_frozen_update(o->x, o->m, o->den, o->d, k->lr, k->wd, inv_c);
    return OB_OK;
}

/* The momentum and its preconditioned copy of [lo, lo + n) only (g is the whole gradient). */
static ob_status k_precondition(ob_optim *o, const float *g, size_t lo, size_t n,
                                const ob_adam_coeffs *k, ob_err *err)
{
    if (o->dev)
        return ob_cuda_momentum_precondition(o->m + lo, o->g + lo, g + lo, o->den + lo, n, k->b1,
                                             k->a1, o->stream, err);
    ob_momentum_precondition(o->m + lo, o->g + lo, g + lo, o->den + lo, n, k->b1, k->a1);
    return OB_OK;
}

static ob_status k_apply(ob_optim *o, const ob_adam_coeffs *k, ob_err *err)
{
    float c = (float)ob_optim_stability_bound(&o->cfg);
    if (o->dev)
        return ob_cuda_precondition_apply(o->x, o->m, o->g, o->den, o->d, k->lr, k->wd, c,
                                          o->stream, err);
    ob_precondition_apply(o->x, o->m, o->g, o->den, o->d, k->lr, k->wd, c);
    return OB_OK;
}

/* BinSGDM's local step on [lo, lo + n) (g is the whole gradient): m, b and u = m / (b + eps)
 * into the exchange buffer. */
static ob_status k_binsgdm_local(ob_optim *o, const float *g, size_t lo, size_t n,
                                 const ob_adam_coeffs *k, ob_err *err)
{
    long T0 = o->cfg.max_denominator_step;
    int keep_max = T0 > 0 && o->step + 1 > T0;
    if (o->dev)
        return ob_cuda_binsgdm_local(o->m + lo, o->v + lo, o->g + lo, g + lo, n, k->b1, k->a1,
                                     k->eps, keep_max, o->stream, err);
    ob_binsgdm_local(o->m + lo, o->v + lo, o->g + lo, g + lo, n, k->b1, k->a1, k->eps, keep_max);
    return OB_OK;
}

/* x -= lr (s + wd x) with the exchanged direction in the exchange buffer. */
static ob_status k_direct(ob_optim *o, const ob_adam_coeffs *k, ob_err *err)
{
    if (o->dev) return ob_cuda_direct_update(o->x, o->g, o->d, k->lr, k->wd, o->stream, err);
    ob_direct_update(o->x, o->g, o->d, k->lr, k->wd);
    return OB_OK;
}

static ob_status k_softsign(ob_optim *o, const ob_adam_coeffs *k, ob_err *err)
{
    if (o->dev) return ob_cuda_softsign_update(o->x, o->m, o->v, o->g, o->d, k, o->stream, err);
    ob_softsign_update(o->x, o->m, o->v, o->g, o->d, k);
    return OB_OK;
}

static ob_status k_scale(ob_optim *o, float *x, float s, ob_err *err)
{
    if (o->dev) return ob_cuda_scale(x, o->d, s, o->stream, err);
    ob_scale(x, o->d, s);
    return OB_OK;
}

static ob_status k_count_exceeding(ob_optim *o, const float *g, float gscale, float k2, size_t *out,
                                   ob_err *err)
{
    if (o->dev) return ob_cuda_count_exceeding(g, o->v, o->d, gscale, k2, out, o->stream, err);
    *out = ob_count_exceeding(g, o->v, o->d, gscale, k2);
    return OB_OK;
}

static ob_status k_l1(ob_optim *o, const float *v, double *out, ob_err *err)
{
    if (o->dev) return ob_cuda_l1_norm(v, o->d, out, o->stream, err);
    *out = ob_l1_norm(v, o->d);
    return OB_OK;
}

/* den = sqrt(v) + eps, once per freeze (v no longer changes). */
static ob_status compute_den(ob_optim *o, ob_err *err)
{
    float eps = (float)o->cfg.eps;
    if (o->dev) return ob_cuda_frozen_den(o->den, o->v, o->d, eps, o->stream, err);
    ob_frozen_den(o->den, o->v, o->d, eps);
    return OB_OK;
}

/* With timing on: waits for the device's queued work and returns the time. */
static ob_status timed_now(ob_optim *o, double *t, ob_err *err)
{
    *t = 0.0;
    if (!o->timing) return OB_OK;
    if (o->dev) {
        ob_status st = ob_cuda_sync(o->stream, err);
        if (st != OB_OK) return st;
    }
    *t = ob_mono_s();
    return OB_OK;
}

/* Sum of src over the ranks into dst (bucket by bucket; src == dst allowed); the caller scales.
 * Gradients (grads) cross as cfg.gradient_exchange says, anything else in fp32. When the
 * gradient's exchange is armed (ob_optim_backward_begin), src is that gradient and the
 * communication thread has run or is running the same exchanges: wait for them. */
static ob_status sum_ranks(ob_optim *o, const float *src, float *dst, int grads, ob_err *err)
{
    double t0 = 0.0, t1 = 0.0;
    ob_status st = timed_now(o, &t0, err);
    if (st != OB_OK) return st;
    if (ob__overlap_armed(o->ov) && src == o->armed_grad && dst == o->g) {
        size_t early = 0;
        o->armed_grad = NULL;
        st = ob__overlap_finish(o->ov, &early, err);
        o->buckets_early += early;
    } else {
        st = ob__buckets_exchange_all(o->comm, grads ? grad_f16(o) : NULL, o->dev, o->stream,
                                      &o->plan, src, dst, err);
    }
    if (st == OB_OK) st = timed_now(o, &t1, err);
    if (st != OB_OK) return st;
    o->tim.allreduce_s += t1 - t0; /* a failed step's time means nothing */
    o->buckets_exchanged += o->plan.n;
    return OB_OK;
}

/* --- buckets and the overlap -------------------------------------------------------------- */

/* The compressed mode's momentum exchange follows the fp32 buckets: the car is cut where they
 * start, each cut moved onto its grid of N*B towards the bucket that is complete later (so that
 * the earlier one's segment holds none of the later one's tensors, and is complete when it is);
 * *cplan is its plan over the tensors. Other modes (and a device) keep one segment. */
static ob_status segment_car(ob_optim *o, const ob__buckets *plan, const size_t *offsets,
                             const size_t *stages, size_t n, ob__buckets *cplan, ob_err *err)
{
    int compressed = o->cfg.kind == OB_OPTIM_BINSGDM ||
                     (o->cfg.kind == OB_OPTIM_ONEBIT_ADAM && o->cfg.mode == OB_ONEBIT_COMPRESSED);
    if (compressed && !o->dev && plan->n > 1) {
        size_t grid = (size_t)ob_comm_size(o->comm) * ob_car_block_size(o->car);
        size_t *cuts = malloc(plan->n * sizeof *cuts);
        if (!cuts) return OB_ERR(err, OB_ERR_NOMEM, "segments");
        /* Bucket 0 ends the buffer: cut i is where bucket n-1-i starts, above bucket n-i. */
        for (size_t i = 0; i < plan->n; i++) {
            size_t above = plan->n - 1 - i, c = plan->b[above].lo;
            if (i > 0 && plan->key[above + 1] < plan->key[above]) c -= c % grid; /* below first */
            cuts[i] = i > 0 && c < cuts[i - 1] ? cuts[i - 1] : c;
        }
        ob_status st = ob_car_set_segments(o->car, cuts, plan->n, err);
        free(cuts);
        if (st != OB_OK) return st;
    }
    return ob__buckets_segments(cplan, o->d, offsets, stages, n, ob_car_segment_bounds(o->car),
                                ob_car_num_segments(o->car), err);
}

ob_status ob_optim_set_tensor_layout(ob_optim *o, const size_t *offsets, const size_t *stages,
                                     size_t n, ob_err *err)
{
    if (o->layout_set || o->step > 0 || ob__overlap_armed(o->ov))
        return OB_ERR(err, OB_ERR_STATE,
                      "tensor layout: set once, before the first step (step %ld)", o->step);
    if (!offsets || n == 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "tensor layout: no tensors");
    ob__buckets plan, cplan;
    memset(&cplan, 0, sizeof cplan);
    ob_status st = ob__buckets_plan(&plan, o->d, offsets, stages, n, o->cfg.bucket_bytes, err);
    if (st == OB_OK && o->car) st = segment_car(o, &plan, offsets, stages, n, &cplan, err);
    if (st != OB_OK) {
        ob__buckets_free(&plan);
        ob__buckets_free(&cplan);
        return OB_WRAP(err, st, "tensor layout");
    }
    ob__buckets_free(&o->plan);
    o->plan = plan;
    if (o->car) {
        ob__buckets_free(&o->cplan);
        o->cplan = cplan;
    }
    o->layout_set = 1;
    return OB_OK;
}

size_t ob_optim_num_buckets(const ob_optim *o)
{
    return o->plan.n;
}

void ob_optim_bucket(const ob_optim *o, size_t k, size_t *lo, size_t *hi, size_t *tensor_lo,
                     size_t *tensor_hi)
{
    ob__bucket b = k < o->plan.n ? o->plan.b[k] : (ob__bucket){0, 0, 0, 0};
    if (lo) *lo = b.lo;
    if (hi) *hi = b.hi;
    if (tensor_lo) *tensor_lo = b.tensor_lo;
    if (tensor_hi) *tensor_hi = b.tensor_hi;
}

size_t ob_optim_bucket_order(const ob_optim *o, size_t i)
{
    return i < o->plan.n ? o->plan.order[i] : 0;
}

int ob_optim_overlap_active(const ob_optim *o)
{
    return o->ov != NULL;
}

/* --- variance refresh (ob_optim_config.refresh_steps) ------------------------------------ */

/* The compressed steps between a freeze at T and the refresh that follows it. */
static long refresh_gap(long T, long R)
{
    return T > R ? T : R;
}

long ob_optim_next_refresh(const ob_optim_config *cfg, long freeze_step)
{
    long R = cfg->refresh_steps, T = freeze_step;
    if (R <= 0 || T < 0 || T > (LONG_MAX - R - 1) / 2) return 0; /* none, or beyond a long */
    return T + refresh_gap(T, R) + 1;
}

/* j in 1..R when step t is the j-th step of the variance refresh that follows a freeze at T,
 * else 0. */
static long refresh_at(const ob_optim_config *cfg, long T, long t)
{
    long first = ob_optim_next_refresh(cfg, T);
    return first > 0 && t >= first && t - first < cfg->refresh_steps ? t - first + 1 : 0;
}

static long refresh_index(const ob_optim *o, long t)
{
    return refresh_at(&o->cfg, o->freeze_step, t);
}

long ob_optim_v_scaled_at(const ob_optim_config *cfg, ob_warm_state warm, long refit_end,
                          long freeze_step, long step)
{
    /* After j < R of its steps; after the R-th, the freeze step is the step itself. */
    long j = refresh_at(cfg, freeze_step, step);
    if (j >= 1 && j < cfg->refresh_steps) return step;
    int refit = (warm == OB_WARM_REFIT || warm == OB_WARM_REWARM) && freeze_step == refit_end;
    if (refit || (warm == OB_WARM_TAKEN && freeze_step == 0)) return 0;
    return freeze_step;
}

double ob_optim_frozen_scale(const ob_optim_config *c, long s)
{
    if (c->bias_correction || s <= 0) return 1.0;
    return (1.0 - pow(c->beta2, (double)s)) * ob_optim_freeze_raise(c, s);
}

/* The next step averages fp32 gradients (adam, the warmup, a variance refresh), not momentum
 * or 1-bit gradients. */
static int next_step_sums_gradients(const ob_optim *o)
{
    int naive = o->cfg.kind == OB_OPTIM_ONEBIT_ADAM && o->cfg.mode == OB_ONEBIT_NAIVE;
    if (o->cfg.kind == OB_OPTIM_BINSGDM) return 0;
    return !naive && (o->freeze_step < 0 || refresh_index(o, o->step + 1) > 0);
}

/* The next step exchanges the momentum compressed (the compression phase of the compressed
 * mode; never together with next_step_sums_gradients). */
static int next_step_compresses(const ob_optim *o)
{
    if (o->cfg.kind == OB_OPTIM_BINSGDM) return 1;
    return o->cfg.kind == OB_OPTIM_ONEBIT_ADAM && o->cfg.mode == OB_ONEBIT_COMPRESSED &&
           o->freeze_step >= 0 && refresh_index(o, o->step + 1) == 0;
}

/* The compression phase's work on bucket k of cplan (b): the momentum of its range (with
 * precondition also m / den), then the compressed allreduce of its segment. The step runs it
 * for every bucket in order, or the communication thread does during the backward pass. */
static ob_status compress_bucket(ob_optim *o, size_t k, const ob__bucket *b, const float *grad,
                                 const ob_adam_coeffs *kc, ob_err *err)
{
    size_t s = ob_car_num_segments(o->car) - 1 - k, n = b->hi - b->lo;
    int binsgdm = o->cfg.kind == OB_OPTIM_BINSGDM;
    float *x = binsgdm || o->cfg.precondition ? o->g : o->m;
    ob_status st = binsgdm               ? k_binsgdm_local(o, grad, b->lo, n, kc, err)
                   : o->cfg.precondition ? k_precondition(o, grad, b->lo, n, kc, err)
                                         : k_momentum(o, grad, b->lo, n, kc, err);
    if (st == OB_OK) st = ob_car_allreduce_segment(o->car, s, x, x, err);
    return st;
}

static ob_status compress_job_run(void *job, size_t k, const ob__bucket *b, ob_err *err)
{
    const struct compress_job *j = job;
    return compress_bucket(j->o, k, b, j->grad, &j->k, err);
}

/* The coefficients of step t with learning rate lr. */
static void step_coeffs(const ob_optim *o, long t, float lr, ob_adam_coeffs *k)
{
    const ob_optim_config *c = &o->cfg;
    int naive = c->kind == OB_OPTIM_ONEBIT_ADAM && c->mode == OB_ONEBIT_NAIVE;
    /* The naive mode's exchange already averages, binsgdm's gradient is this rank's own; the
     * warmup's allreduce sums. */
    int local = naive || c->kind == OB_OPTIM_BINSGDM;
    ob_adam_coeffs_init(k, c->beta1, c->beta2, c->eps, c->weight_decay, c->bias_correction, t, lr,
                        local ? 1 : ob_comm_size(o->comm));
}

void ob_optim_backward_begin(ob_optim *o, const float *grad)
{
    if (!o->ov || !grad) return;
    int sums = next_step_sums_gradients(o), compresses = next_step_compresses(o);
    if (!sums && !compresses) return;
    disarm(o); /* a begin without a step: finish the earlier exchange first */
    o->bytes_mark = ob_comm_bytes_sent(o->comm);
    o->armed_grad = grad;
    o->armed_compressed = compresses;
    if (sums) {
        o->sum_job = (ob__sum_job){o->comm, grad_f16(o), grad, o->g};
        ob__overlap_begin(o->ov, &o->plan, ob__sum_job_run, &o->sum_job);
        return;
    }
    /* The momentum's coefficients do not depend on the learning rate. */
    o->compress_job.o = o;
    o->compress_job.grad = grad;
    step_coeffs(o, o->step + 1, 0.0f, &o->compress_job.k);
    ob__overlap_begin(o->ov, &o->cplan, compress_job_run, &o->compress_job);
}

void ob_optim_grad_hook(void *opt, size_t tensor)
{
    ob_optim *o = opt;
    ob__overlap_tensor_final(o->ov, tensor);
}

/* --- the step ------------------------------------------------------------------------------ */

static ob_status freeze(ob_optim *o, long t, ob_err *err)
{
    o->freeze_step = t;
    if (o->cfg.bias_correction) {
        /* Keep v_hat so the first compression step uses the same scale as the last warmup. */
        float c2 = (float)(1.0 / (1.0 - pow(o->cfg.beta2, (double)t)));
        ob_status st = k_scale(o, o->v, c2, err);
        if (st != OB_OK) return st;
    } else {
        double f = ob_optim_freeze_raise(&o->cfg, t);
        if (f > 1.0) {
            ob_status st = k_scale(o, o->v, (float)f, err);
            if (st != OB_OK) return st;
        }
    }
    return compute_den(o, err);
}

/* The lag of the auto freeze's ratio: Delta, at most OB_FREEZE_MAX_LAG. */
long ob_optim_freeze_lag(double beta2)
{
    long delta = ob_optim_freeze_delta(beta2);
    return delta > OB_FREEZE_MAX_LAG ? OB_FREEZE_MAX_LAG : delta;
}

/* After warmup step t: record ||v_t||_1 (of v_hat, see freeze_on_v_hat) and decide whether to
 * freeze. */
static ob_status maybe_freeze(ob_optim *o, long t, ob_err *err)
{
    const ob_optim_config *c = &o->cfg;
    if (c->kind != OB_OPTIM_ONEBIT_ADAM || c->mode == OB_ONEBIT_NAIVE) return OB_OK;
    /* After a rollback into the warmup the freeze comes at the end of the delay, whatever the
     * rule says: the rule had passed on the path that diverged. */
    int delayed = o->warm == OB_WARM_DELAYED;
    if (c->freeze_step > 0) {
        long at = delayed ? o->refit_end : c->freeze_step;
        return t >= at ? freeze(o, t, err) : OB_OK;
    }
    double norm = 0.0;
    ob_status st = k_l1(o, o->v, &norm, err);
    if (st != OB_OK) return st;
    long delta = o->delta, lag = ob_optim_freeze_lag(c->beta2);
    size_t slot = (size_t)(t % delta);
    /* The paper's test: ||v_t|| against ||v_{t-Delta}|| (the slot this step overwrites). */
    double old = t > delta ? o->norms[slot] : 0.0;
    double ratio = old > 0.0 ? norm / old : NAN;
    /* Above beta2 0.995 also v_hat's norm against its value L steps back, from the same
     * history: (||v_t|| / (1 - b2^t)) / (||v_{t-L}|| / (1 - b2^(t-L))). */
    double ratio_hat = NAN;
    if (lag < delta && t > lag) {
        double back = o->norms[(size_t)((t - lag) % delta)];
        double b2 = c->beta2;
        if (back > 0.0)
            ratio_hat = (norm / (1.0 - pow(b2, (double)t))) /
                        (back / (1.0 - pow(b2, (double)(t - lag))));
    }
    o->norms[slot] = norm;
    o->last_norm = norm;
    o->last_ratio = lag < delta ? ratio_hat : ratio;
    if (delayed) return t >= o->refit_end ? freeze(o, t, err) : OB_OK;

    double lo = c->freeze_threshold, hi = 1.0 / c->freeze_threshold;
    long floor = c->lr_warmup_steps > c->freeze_min_steps ? c->lr_warmup_steps : c->freeze_min_steps;
    int paper = t >= floor && t > delta && ratio >= lo && ratio <= hi;
    int hat = lag < delta && t >= floor && t > lag && ratio_hat >= lo && ratio_hat <= hi;
    int latest = c->freeze_max_step > 0 && t >= c->freeze_max_step && t >= floor;
    if (paper || hat || latest) {
        if (paper || hat) o->last_ratio = paper ? ratio : ratio_hat; /* else the one in force */
        return freeze(o, t, err);
    }
    return OB_OK;
}

/* The warm-start check at step 1: the averaged gradient (o->g, a sum over the ranks, so every
 * rank counts the same) against the borrowed v. A refused v is zeroed: a warmup from scratch. */
static ob_status warm_check(ob_optim *o, const ob_adam_coeffs *k, ob_err *err)
{
    size_t n = 0;
    const float k2 = (float)(OB_WARM_CHECK_FACTOR * OB_WARM_CHECK_FACTOR);
    ob_status st = k_count_exceeding(o, o->g, k->gscale, k2, &n, err);
    if (st != OB_OK) return st;
    o->warm_frac = (double)n / (double)o->d;
    if (o->warm_fit > 0.0 && o->warm_frac <= o->warm_fit) {
        o->refit_end = 1;
        return OB_OK;
    }
    if (o->warm_frac <= OB_WARM_REFUSE_FRACTION) return OB_OK;
    o->warm = OB_WARM_REFUSED;
    o->refit_end = 0;
    o->refit_scale = 1.0;
    return k_scale(o, o->v, 0.0f, err);
}

/* Warmup step t: the fp32-averaged gradient, Adam, then the freeze rule in force (the end of a
 * warm start's refit, or freeze_step). */
static ob_status warmup_step(ob_optim *o, const float *grad, long t, ob_adam_coeffs *k, ob_err *err)
{
    ob_status st = sum_ranks(o, grad, o->g, 1, err);
    if (st == OB_OK && o->warm == OB_WARM_REFIT && t == 1) st = warm_check(o, k, err);
    if (st != OB_OK) return st;
    if (o->warm != OB_WARM_REFIT && o->warm != OB_WARM_REWARM) {
        if ((st = k_adam(o, o->g, k, err)) != OB_OK) return st;
        return maybe_freeze(o, t, err);
    }
    k->c2 = 1.0f; /* v carries on from v_Tw rather than from zero: nothing to correct */
    if ((st = k_adam(o, o->g, k, err)) != OB_OK) return st;
    if (t < o->refit_end) return OB_OK;
    o->freeze_step = t;
    /* The refit carried v on as an estimate of v_hat: frozen, it takes the source's factor. */
    if (o->warm == OB_WARM_REFIT && o->refit_scale != 1.0 &&
        (st = k_scale(o, o->v, (float)o->refit_scale, err)) != OB_OK)
        return st;
    return compute_den(o, err);
}

/* The compressed mode's exchange of a compression step, bucket by bucket: waits for the
 * armed exchange, or runs it here. */
static ob_status exchange_compressed(ob_optim *o, const float *grad, const ob_adam_coeffs *k,
                                     ob_err *err)
{
    ob_status st = OB_OK;
    if (ob__overlap_armed(o->ov)) {
        double t0 = 0.0, t1 = 0.0;
        size_t early = 0;
        if ((st = timed_now(o, &t0, err)) != OB_OK) return st;
        o->armed_grad = NULL;
        if ((st = ob__overlap_finish(o->ov, &early, err)) != OB_OK) return st;
        if ((st = timed_now(o, &t1, err)) != OB_OK) return st;
        o->tim.wait_s += t1 - t0;
        o->buckets_early += early;
    } else {
        for (size_t i = 0; i < o->cplan.n && st == OB_OK; i++) {
            size_t b = o->cplan.order[i];
            st = compress_bucket(o, b, &o->cplan.b[b], grad, k, err);
        }
        if (st != OB_OK) return st;
    }
    o->buckets_exchanged += o->cplan.n;
    return OB_OK;
}

/* Step t, the j-th of a variance refresh after the freeze at T: the averaged gradient (as in
 * the warmup), and v moved by this step's share of v_hat = w v_hat_T + (1 - w) mean(g^2),
 * w = beta2^(G + R): in units of v_hat, V_j = (1 - l_j) V_{j-1} + l_j g^2 with
 * l_j = s / (1 - (R - j) s), s = (1 - w) / R, which leaves every refresh step the weight s and
 * V_0 the weight w; v itself is V_j times frozen_scale of step t (as if frozen there), so a
 * checkpoint inside the refresh holds all of it. The step uses the new denominator; the last
 * one moves the freeze to t. */
static ob_status refresh_step(ob_optim *o, const float *grad, long t, long j,
                              const ob_adam_coeffs *k, ob_err *err)
{
    const ob_optim_config *c = &o->cfg;
    long T = o->freeze_step, R = c->refresh_steps;
    ob_status st;
    /* The residuals were errors against the old denominator's scale (with precondition) and
     * these steps exchange everything: none is left owing. */
    if (j == 1 && o->car && (st = ob_car_reset_errors(o->car, err)) != OB_OK) return st;
    if ((st = sum_ranks(o, grad, o->g, 1, err)) != OB_OK) return st;
    double w = pow(c->beta2, (double)(refresh_gap(T, R) + R));
    double share = (1.0 - w) / (double)R;
    double l = share / (1.0 - (double)(R - j) * share);
    /* v as the previous step left it: scaled as frozen at T or at step t - 1 of the refresh;
     * a v no freeze scaled counts as v_hat, times the refit's factor where one froze it. */
    long at = ob_optim_v_scaled_at(c, o->warm, o->refit_end, T, t - 1);
    double before =
        at == 0 && o->warm == OB_WARM_REFIT ? o->refit_scale : ob_optim_frozen_scale(c, at);
    double now = ob_optim_frozen_scale(c, t);
    float keep = (float)(now / before * (1.0 - l)), take = (float)(now * l);
    float inv_c = inv_bound(o);
    if (o->dev)
        st = ob_cuda_refresh_update(o->x, o->m, o->v, o->den, o->g, o->d, k, keep, take, inv_c,
                                    o->stream, err);
    else
        ob_refresh_update(o->x, o->m, o->v, o->den, o->g, o->d, k, keep, take, inv_c);
    if (st != OB_OK) return st;
    if (j == R) o->freeze_step = t;
    return OB_OK;
}

/* Compression phase: local momentum, exchanged compressed (or fp32), frozen v. */
static ob_status compression_step(ob_optim *o, const float *grad, const ob_adam_coeffs *k,
                                  ob_err *err)
{
    const ob_optim_config *c = &o->cfg;
    ob_status st;
    if (c->mode == OB_ONEBIT_COMPRESSED) {
        if ((st = exchange_compressed(o, grad, k, err)) != OB_OK) return st;
        return c->precondition ? k_apply(o, k, err) : k_frozen(o, k, err);
    }
    if ((st = k_momentum(o, grad, 0, o->d, k, err)) != OB_OK) return st;
    int n = ob_comm_size(o->comm);
    st = sum_ranks(o, o->m, o->m, 0, err);
    if (st == OB_OK && n > 1) st = k_scale(o, o->m, 1.0f / (float)n, err);
    if (st != OB_OK) return st;
    return k_frozen(o, k, err);
}

ob_status ob_optim_step(ob_optim *o, const float *grad, float lr, ob_err *err)
{
    int armed = ob__overlap_armed(o->ov);
    if (armed && grad != o->armed_grad) {
        disarm(o);
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "optimizer step: not the gradient given to ob_optim_backward_begin");
    }
    if (!grad) return OB_ERR(err, OB_ERR_INVALID_ARG, "optimizer step: NULL gradient");
    if (!isfinite(lr) || lr < 0.0f) {
        disarm(o);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "optimizer step: learning rate %g", (double)lr);
    }

    const ob_optim_config *c = &o->cfg;
    long t = o->step + 1, j;
    int naive = c->kind == OB_OPTIM_ONEBIT_ADAM && c->mode == OB_ONEBIT_NAIVE;
    /* An exchange armed for the other phase: the state changed since ob_optim_backward_begin. */
    if (armed && o->armed_compressed != next_step_compresses(o)) {
        disarm(o);
        return OB_ERR(err, OB_ERR_STATE,
                      "optimizer step %ld: the exchange armed before the backward pass was for the "
                      "other phase",
                      t);
    }
    ob_adam_coeffs k;
    step_coeffs(o, t, lr, &k);
    /* An armed exchange has been sending since ob_optim_backward_begin. */
    uint64_t before = armed ? o->bytes_mark : ob_comm_bytes_sent(o->comm);
    double t0;
    ob_status st = timed_now(o, &t0, err);
    if (st != OB_OK) return OB_WRAP(err, st, "step %ld", t);

    if (c->kind == OB_OPTIM_BINSGDM) {
        /* Local m, b; m / (b + eps) quantised to +-1 both ways; the step with the average. */
        st = exchange_compressed(o, grad, &k, err);
        if (st == OB_OK) st = k_direct(o, &k, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld (1-bit exchange)", t);
    } else if (c->kind == OB_OPTIM_SOFTSIGN) {
        st = sum_ranks(o, grad, o->g, 1, err);
        if (st == OB_OK) st = k_softsign(o, &k, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld", t);
    } else if (naive) {
        /* Error-compensated 1-bit gradient, Adam on top, v never frozen. */
        st = ob_car_allreduce(o->car, grad, o->g, err);
        if (st == OB_OK) st = k_adam(o, o->g, &k, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld (naive)", t);
    } else if (o->freeze_step < 0) {
        /* Warmup (and plain Adam): fp32 average of the gradients. */
        st = warmup_step(o, grad, t, &k, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld (warmup)", t);
    } else if ((j = refresh_index(o, t)) > 0) {
        st = refresh_step(o, grad, t, j, &k, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld (variance refresh)", t);
    } else {
        st = compression_step(o, grad, &k, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld (momentum exchange)", t);
    }
    o->step = t;
    key_next_step(o);
    o->bytes_last = ob_comm_bytes_sent(o->comm) - before;
    o->bytes_sent += o->bytes_last;
    if (o->timing) {
        double t1;
        if ((st = timed_now(o, &t1, err)) != OB_OK) return OB_WRAP(err, st, "step %ld", t);
        o->tim.total_s += t1 - t0;
        o->tim.steps++;
    }
    return OB_OK;
}

void ob_optim_set_timing(ob_optim *o, int on)
{
    o->timing = on != 0;
    memset(&o->tim, 0, sizeof o->tim);
    if (o->car) ob_car_set_timing(o->car, on);
}

void ob_optim_get_timing(const ob_optim *o, ob_optim_timing *out)
{
    *out = o->tim;
    if (o->car) ob_car_get_timing(o->car, &out->car);
}

void ob_optim_get_stats(const ob_optim *o, ob_optim_stats *s)
{
    s->step = o->step;
    s->phase = o->freeze_step >= 0 ? OB_PHASE_COMPRESSION : OB_PHASE_WARMUP;
    s->freeze_step = o->freeze_step;
    s->freeze_ratio = o->last_ratio;
    s->v_l1_norm = o->last_norm;
    s->bytes_sent = o->bytes_sent;
    s->bytes_last_step = o->bytes_last;
    s->warm_start = o->warm;
    s->refit_end = o->refit_end;
    s->warm_check_fraction = o->warm_frac;
    s->buckets_exchanged = o->buckets_exchanged;
    s->buckets_early = o->buckets_early;
}

static ob_status k_sum_squares(ob_optim *o, const float *v, size_t n, double *out, ob_err *err)
{
    if (o->dev) return ob_cuda_sum_squares(v, n, out, o->stream, err);
    *out = ob_sum_squares(v, n);
    return OB_OK;
}

ob_status ob_optim_health_sums_local(ob_optim *o, ob_optim_health_sums *out, ob_err *err)
{
    memset(out, 0, sizeof *out);
    if (!o->car)
        return OB_ERR(err, OB_ERR_UNSUPPORTED,
                      "compression health: the optimizer has no error feedback");
    size_t zeros = 0;
    ob_status st;
    if ((st = k_sum_squares(o, ob_car_worker_error(o->car), ob_car_padded_size(o->car),
                            &out->worker_error_sq, err)) ||
        (st = k_sum_squares(o, ob_car_server_error(o->car), ob_car_chunk_size(o->car),
                            &out->server_error_sq, err)) ||
        (st = k_sum_squares(o, o->m, o->d, &out->momentum_sq, err)))
        return OB_WRAP(err, st, "compression health");
    if (o->dev)
        st = ob_cuda_count_zero(o->m, o->d, &zeros, o->stream, err);
    else
        zeros = ob_count_zero(o->m, o->d);
    if (st != OB_OK) return OB_WRAP(err, st, "compression health");
    out->zero_momentum = (double)zeros;
    return OB_OK;
}

void ob_optim_get_state(ob_optim *o, ob_optim_state *s)
{
    memset(s, 0, sizeof *s);
    s->mem = o->dev ? OB_MEM_DEVICE : OB_MEM_HOST;
    s->d = o->d;
    s->exp_avg = o->m;
    s->exp_avg_sq = o->v;
    if (o->car) {
        s->padded_size = ob_car_padded_size(o->car);
        s->chunk_size = ob_car_chunk_size(o->car);
        s->worker_error = ob_car_worker_error(o->car);
        s->server_error = ob_car_server_error(o->car);
        s->num_server_segments = ob_car_num_segments(o->car);
        s->server_segments = ob_car_segment_bounds(o->car);
    }
    s->v_norm_history = o->norms;
    s->v_norm_history_len = o->norms ? (size_t)o->delta : 0;
    s->local_moments = o->cfg.kind == OB_OPTIM_BINSGDM;
    s->ranks_per_node = o->car ? ob_car_ranks_per_node(o->car) : 1;
}

void ob_optim_get_progress(const ob_optim *o, ob_optim_progress *p)
{
    p->step = o->step;
    p->freeze_step = o->freeze_step;
    p->last_ratio = o->last_ratio;
    p->last_norm = o->last_norm;
    p->bytes_sent = o->bytes_sent;
    p->warm_start = o->warm;
    p->refit_end = o->refit_end;
    p->refit_scale = o->refit_scale;
}

ob_status ob_optim_set_progress(ob_optim *o, const ob_optim_progress *p, ob_err *err)
{
    if (p->step < 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "restore: step %ld < 0", p->step);
    if (p->freeze_step > p->step)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "restore: freeze_step %ld after step %ld",
                      p->freeze_step, p->step);
    const char *kind =
        o->cfg.kind == OB_OPTIM_ONEBIT_ADAM ? "naive" : ob_optim_kind_name(o->cfg.kind);
    if (o->cfg.kind == OB_OPTIM_BINSGDM) {
        if (p->freeze_step != 0 || p->warm_start != OB_WARM_NONE)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "restore: binsgdm compresses from the first step (freeze step %ld, warm "
                          "start state %d)",
                          p->freeze_step, (int)p->warm_start);
        o->step = p->step;
        o->bytes_sent = p->bytes_sent;
        o->bytes_last = 0;
        key_next_step(o);
        return OB_OK;
    }
    if (p->freeze_step >= 0 &&
        (o->cfg.kind != OB_OPTIM_ONEBIT_ADAM || o->cfg.mode == OB_ONEBIT_NAIVE))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "restore: a %s optimizer never freezes", kind);
    if (p->warm_start < OB_WARM_NONE || p->warm_start > OB_WARM_DELAYED)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "restore: warm start state %d", (int)p->warm_start);
    if (p->warm_start != OB_WARM_NONE &&
        (o->cfg.kind != OB_OPTIM_ONEBIT_ADAM || o->cfg.mode == OB_ONEBIT_NAIVE))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "restore: a %s optimizer is never warm-started",
                      kind);
    int refitting = p->warm_start == OB_WARM_REFIT || p->warm_start == OB_WARM_REWARM;
    int delayed = p->warm_start == OB_WARM_DELAYED;
    if (delayed && p->refit_end <= 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "restore: a freeze delayed until step %ld",
                      p->refit_end);
    if (!(p->refit_scale > 0.0 && p->refit_scale <= 1.0))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "restore: a refit's scale %g outside (0, 1]",
                      p->refit_scale);
    if (refitting && p->freeze_step < 0 && p->refit_end <= p->step)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "restore: a warm start's refit ending at step %ld, not frozen at step %ld",
                      p->refit_end, p->step);
    o->step = p->step;
    o->freeze_step = p->freeze_step < 0 ? -1 : p->freeze_step;
    o->warm = p->warm_start;
    o->refit_end = refitting || delayed ? p->refit_end : 0;
    o->refit_scale = p->warm_start == OB_WARM_REFIT ? p->refit_scale : 1.0;
    o->last_ratio = p->last_ratio;
    o->last_norm = p->last_norm;
    o->bytes_sent = p->bytes_sent;
    o->bytes_last = 0;
    if (o->freeze_step < 0) {
        ob_status st = o->warm == OB_WARM_REFIT ? ensure_refit_exchange(o, err) : OB_OK;
        return st == OB_OK ? OB_OK : OB_WRAP(err, st, "restore: the refit's exchange");
    }
    ob_status st = compute_den(o, err); /* v was restored before this call */
    if (st == OB_OK && o->dev) st = ob_cuda_sync(o->stream, err);
    return st == OB_OK ? OB_OK : OB_WRAP(err, st, "restore: frozen denominator");
}

const char *ob_warm_state_name(ob_warm_state s)
{
    switch (s) {
    case OB_WARM_NONE:
        return "none";
    case OB_WARM_TAKEN:
        return "taken";
    case OB_WARM_REFIT:
        return "refit";
    case OB_WARM_REFUSED:
        return "refused";
    case OB_WARM_REWARM:
        return "rewarm";
    case OB_WARM_DELAYED:
        return "delayed";
    }
    return "?";
}

ob_status ob_optim_rewarm(ob_optim *o, long steps, long bad_step, ob_err *err)
{
    if (o->cfg.kind != OB_OPTIM_ONEBIT_ADAM || o->cfg.mode == OB_ONEBIT_NAIVE)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "rewarm needs onebit_adam in the compressed or uncompressed mode");
    if (steps <= 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "rewarm: %ld steps", steps);
    if (o->freeze_step < 0) {
        if (o->warm == OB_WARM_REFIT || bad_step + steps <= o->step) return OB_OK;
        o->warm = OB_WARM_DELAYED;
        o->refit_end = bad_step + steps;
        return OB_OK;
    }
    if (o->car) {
        ob_status st = ob_car_reset_errors(o->car, err);
        if (st != OB_OK) return OB_WRAP(err, st, "rewarm");
    }
    o->freeze_step = -1;
    o->warm = OB_WARM_REWARM;
    o->refit_end = o->step + steps;
    o->refit_scale = 1.0;
    return OB_OK;
}

long ob_optim_auto_refit_steps(double beta2, ob_warm_source source)
{
    long delta = ob_optim_freeze_delta(beta2);
    switch (source) {
    case OB_WARM_SOURCE_SAME:
        return (delta + 4) / 5;
    case OB_WARM_SOURCE_LARGER_BATCH:
        return (3 * delta + 3) / 4;
    default:
        return (delta + 1) / 2;
    }
}

ob_status ob_optim_warm_start(ob_optim *o, const float *v_frozen, double raised, double scale,
                              long refit_steps, double fit_fraction, ob_err *err)
{
    if (o->cfg.kind != OB_OPTIM_ONEBIT_ADAM || o->cfg.mode == OB_ONEBIT_NAIVE)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "warm start needs onebit_adam in the compressed or uncompressed mode");
    if (!v_frozen) return OB_ERR(err, OB_ERR_INVALID_ARG, "warm start: NULL variance");
    if (o->step != 0 || o->freeze_step >= 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "warm start: the optimizer has taken %ld steps",
                      o->step);
    if (refit_steps < 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "warm start: refit_steps %ld < 0", refit_steps);
    if (!(raised >= 1.0) || !isfinite(raised))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "warm start: raised %g (must be finite and >= 1)",
                      raised);
    if (!(scale > 0.0 && scale <= 1.0))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "warm start: scale %g (must be in (0, 1])", scale);
    if (!(fit_fraction >= 0.0 && fit_fraction <= OB_WARM_REFUSE_FRACTION))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "warm start: fit_fraction %g outside [0, %g]",
                      fit_fraction, OB_WARM_REFUSE_FRACTION);
    for (size_t i = 0; i < o->d; i++) {
        if (!(v_frozen[i] >= 0.0f) || !isfinite(v_frozen[i]))
            return OB_ERR(err, OB_ERR_CORRUPT,
                          "warm start: variance element %zu is %g (must be finite and >= 0)", i,
                          (double)v_frozen[i]);
    }
    ob_status st = refit_steps > 0 ? ensure_refit_exchange(o, err) : OB_OK;
    if (st == OB_OK)
        st = ob__mem_copy(o->dev, o->v, v_frozen, o->d * sizeof(float), o->stream, err);
    /* A refit is Adam carrying v on: from the variance the source estimated, not from the one
     * its freeze raised for its own compression phase (which v_Tw taken as is keeps). */
    if (st == OB_OK && refit_steps > 0 && raised > 1.0)
        st = k_scale(o, o->v, (float)(1.0 / raised), err);
    if (st == OB_OK && refit_steps == 0) st = compute_den(o, err);
    /* The caller may free v_frozen on return, and the state must be in place before any step. */
    if (st == OB_OK && o->dev) st = ob_cuda_sync(o->stream, err);
    if (st != OB_OK) return OB_WRAP(err, st, "warm start");
    if (refit_steps == 0) {
        o->warm = OB_WARM_TAKEN;
        o->freeze_step = o->step;
    } else {
        o->warm = OB_WARM_REFIT;
        o->refit_end = refit_steps;
        o->refit_scale = scale;
        o->warm_fit = fit_fraction;
    }
    return OB_OK;
}
