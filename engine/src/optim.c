/* Adam, 1-bit Adam, BinSGDM and SoftSignSGD over a flat parameter buffer (see onebit/optim.h
 * for the algorithms): the optimizer's creation and destruction, its tensor layout and buckets,
 * statistics, state access for checkpoints, rewarm and warm start. The phases of a step are in
 * optim_step.c, the configuration in optim_config.c. */
#include "optim_internal.h"
#include "onebit/compress_cuda.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next exchange's draws (binsgdm): keyed by the seed and the step about to run. */
void ob__optim_key_next_step(ob_optim *o)
{
    if (o->car) ob_car_set_key(o->car, o->cfg.seed, (uint64_t)(o->step + 1));
}
static int auto_freeze(const ob_optim_config *c)
{
    return c->kind == OB_OPTIM_ONEBIT_ADAM && c->mode != OB_ONEBIT_NAIVE && c->freeze_step == 0;
}

/* ranks_per_node "auto": the shape where the ranks run, said in o->car_note. */
static ob_status auto_shape(ob_optim *o, int *m, ob_err *err)
{
    char why[200];
    ob_status st = ob_car_auto_ranks_per_node(o->comm, m, why, sizeof why, err);
    if (st != OB_OK) return OB_WRAP(err, st, "optimizer.ranks_per_node \"auto\"");
    if (*m > 1)
        snprintf(o->car_note, sizeof o->car_note, "%s: hierarchical, ranks_per_node %d", why, *m);
    else
        snprintf(o->car_note, sizeof o->car_note, "%s: flat", why);
    return OB_OK;
}

const char *ob_optim_exchange_note(const ob_optim *opt)
{
    return opt->car_note;
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
    if (d > SIZE_MAX / (3 * sizeof(float))) { /* the largest buffer: track_variance's 3 d */
        st = OB_ERR(err, OB_ERR_NOMEM, "optimizer: %zu parameters", d);
        goto fail;
    }
    size_t bytes = d * sizeof(float);
    if ((st = ob__mem_alloc(o->dev, (void **)&o->m, bytes, "optimizer momentum", err)) ||
        (st = ob__mem_alloc(o->dev, (void **)&o->v, bytes, "optimizer variance", err)) ||
        (st = ob__mem_alloc(o->dev, (void **)&o->g, bytes, "optimizer exchange buffer", err)) ||
        (st = ob__mem_alloc(o->dev, (void **)&o->den, bytes, "optimizer denominator", err)))
        goto fail;
    if (cfg->track_variance > 0 &&
        (st = ob__mem_alloc(o->dev, (void **)&o->ts, 3 * bytes, "optimizer variance statistics",
                            err)) != OB_OK)
        goto fail;
    if (auto_freeze(cfg)) {
        o->delta = ob_optim_freeze_delta(cfg->beta2);
        o->norms = calloc((size_t)o->delta, sizeof(double));
        if (!o->norms) {
            st = OB_ERR(err, OB_ERR_NOMEM, "optimizer: ring of %ld norms", o->delta);
            goto fail;
        }
    }
    if (ob__optim_uses_car(cfg)) {
        int m = cfg->ranks_per_node;
        if (m == OB_OPTIM_RANKS_PER_NODE_AUTO && (st = auto_shape(o, &m, err)) != OB_OK) goto fail;
        st = ob_car_create_hier(&o->car, comm, d, cfg->block_size, cfg->scale, m, err);
        if (st != OB_OK) goto fail;
        ob__optim_key_next_step(o);
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
void ob__optim_disarm(ob_optim *o)
{
    if (!ob__overlap_armed(o->ov)) return;
    ob__overlap_finish(o->ov, NULL, NULL);
    o->armed_grad = NULL;
}

void ob_optim_destroy(ob_optim *o)
{
    if (!o) return;
    if (o->ov) ob__optim_disarm(o);
    ob__overlap_destroy(o->ov);
    ob__buckets_free(&o->plan);
    ob__buckets_free(&o->cplan);
    ob__mem_free(o->dev, o->m);
    ob__mem_free(o->dev, o->v);
    ob__mem_free(o->dev, o->g);
    ob__mem_free(o->dev, o->den);
    ob__mem_free(o->dev, o->ts);
    free(o->norms);
    ob_car_destroy(o->car);
    ob_f16sum_destroy(o->f16);
    ob_f16sum_destroy(o->f8);
    free(o);
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
    s->track_stats = o->ts;
    s->track_stats_len = o->ts ? 3 * o->d : 0;
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
        ob__optim_key_next_step(o);
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
    ob_status st = ob__optim_compute_den(o, err); /* v was restored before this call */
    if (st == OB_OK && o->dev) st = ob_cuda_sync(o->stream, err);
    return st == OB_OK ? OB_OK : OB_WRAP(err, st, "restore: frozen denominator");
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
        st = ob__optim_scale(o, o->v, (float)(1.0 / raised), err);
    if (st == OB_OK && refit_steps == 0) st = ob__optim_compute_den(o, err);
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
