/* The step of the optimizer (see onebit/optim.h): the kernels on either memory, the sum over
 * the ranks, the variance refresh's schedule, the work armed before the backward pass, and the
 * phases a step runs (warmup Adam and the freeze, the warm-start check, the compression phase,
 * BinSGDM, SoftSignSGD, the naive mode, the variance refresh). */
#include "optim_internal.h"
#include "onebit/compress_cuda.h"

#include <limits.h>
#include <math.h>
#include <string.h>

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

/* What sum_ranks sends: fp32, or through the gradients' exchange (gradient_exchange). */
enum { SUM_FP32 = 0, SUM_GRADS = 1 };
static ob_status sum_ranks(ob_optim *o, const float *src, float *dst, int what, ob_err *err);

/* --- tracked variance (ob_optim_config.track_variance) ----------------------------------- */

/* Step t's statistics from this rank's own gradient. */
static ob_status track_update(ob_optim *o, const float *g, long t, ob_err *err)
{
    const ob_optim_config *c = &o->cfg;
    float *u = o->ts, *a = o->ts + o->d, *b = o->ts + 2 * o->d;
    float b1 = (float)c->beta1, a1 = (float)(1.0 - c->beta1);
    float b2 = (float)c->beta2, a2 = (float)(1.0 - c->beta2);
    float cu = (float)(1.0 / (1.0 - pow(c->beta1, (double)t)));
    if (o->dev) return ob_cuda_track_update(u, a, b, g, o->d, b1, a1, b2, a2, cu, o->stream, err);
    ob_track_update(u, a, b, g, o->d, b1, a1, b2, a2, cu);
    return OB_OK;
}

/* At step t (t - T_w a multiple of K): every rank's share of the estimate summed through the
 * gradients' exchange into the scratch buffer (fp8 by default: on the GPT of docs/peers/gpt
 * fp16 reached the target at the same step, 5 s later at 50 Mbit/s), then
 * v = factor * scale * sum / N and its denominator, the same bits on every rank. The sum
 * estimates the bias-corrected v_hat; scale puts it in the scale of the warmup's own v: 1 with
 * bias_correction, else 1 - beta2^t, the v Adam without bias correction has at step t. (In
 * v_hat's scale, with beta2 0.999 and a freeze at 200, the tracked steps were 2.6x (step 200)
 * to 1.3x (step 1500) smaller than Adam's, and the suite's transformers ended 8-12 % behind the
 * default: docs/research/variance-tracking.md, "The warmup's scale".) */
static ob_status track_estimate(ob_optim *o, long t, ob_err *err)
{
    const ob_optim_config *c = &o->cfg;
    int n = ob_comm_size(o->comm);
    double k = (1.0 - c->beta1) / (1.0 + c->beta1);
    double beta = (1.0 - 1.0 / (double)n) / (1.0 - k), alpha = 1.0 - beta;
    float c2 = (float)(1.0 / (1.0 - pow(c->beta2, (double)t)));
    float inv_n = (float)(1.0 / (double)n);
    double sc = c->bias_correction ? 1.0 : 1.0 - pow(c->beta2, (double)t);
    float f = (float)(ob_optim_track_factor(c) * sc / (double)n);
    const float *a = o->ts + o->d, *b = o->ts + 2 * o->d;
    ob_status st;
    if (o->dev)
        st = ob_cuda_track_share(o->g, a, b, o->d, c2, (float)alpha, (float)beta, inv_n, o->stream,
                                 err);
    else {
        ob_track_share(o->g, a, b, o->d, c2, (float)alpha, (float)beta, inv_n);
        st = OB_OK;
    }
    if (st == OB_OK) st = sum_ranks(o, o->g, o->g, SUM_GRADS, err);
    if (st != OB_OK) return st;
    float eps = (float)c->eps;
    if (!c->precondition) {
        if (o->dev) return ob_cuda_track_set(o->v, o->den, o->g, o->d, f, eps, o->stream, err);
        ob_track_set(o->v, o->den, o->g, o->d, f, eps);
        return OB_OK;
    }
    /* With precondition the error buffers hold residuals of m / den: den_old / den_new (left
     * in the scratch buffer) carries them into the new denominator's units. */
    if (o->dev)
        st = ob_cuda_track_set_ratio(o->v, o->den, o->g, o->d, f, eps, o->stream, err);
    else
        ob_track_set_ratio(o->v, o->den, o->g, o->d, f, eps);
    return st == OB_OK ? ob_car_scale_errors(o->car, o->g, err) : st;
}

/* The tracked variance's work of compressed step t: this rank's statistics, and at every K-th
 * step the estimate. */
static ob_status track_step(ob_optim *o, const float *grad, long t, ob_err *err)
{
    ob_status st = track_update(o, grad, t, err);
    if (st == OB_OK && (t - o->freeze_step) % o->cfg.track_variance == 0 &&
        (st = track_estimate(o, t, err)) != OB_OK)
        return OB_WRAP(err, st, "variance estimate");
    return st;
}

ob_status ob__optim_scale(ob_optim *o, float *x, float s, ob_err *err)
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
ob_status ob__optim_compute_den(ob_optim *o, ob_err *err)
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
 * Gradients and the tracked variance's estimate (SUM_GRADS) cross as cfg.gradient_exchange
 * says, anything else (SUM_FP32) in fp32. When the
 * gradient's exchange is armed (ob_optim_backward_begin), src is that gradient and the
 * communication thread has run or is running the same exchanges: wait for them. */
static ob_status sum_ranks(ob_optim *o, const float *src, float *dst, int what, ob_err *err)
{
    ob_f16sum *code = what == SUM_GRADS ? grad_f16(o) : NULL;
    double t0 = 0.0, t1 = 0.0;
    ob_status st = timed_now(o, &t0, err);
    if (st != OB_OK) return st;
    if (ob__overlap_armed(o->ov) && src == o->armed_grad && dst == o->g) {
        size_t early = 0;
        o->armed_grad = NULL;
        st = ob__overlap_finish(o->ov, &early, err);
        o->buckets_early += early;
    } else {
        st = ob__buckets_exchange_all(o->comm, code, o->dev, o->stream, &o->plan, src, dst, err);
    }
    if (st == OB_OK) st = timed_now(o, &t1, err);
    if (st != OB_OK) return st;
    o->tim.allreduce_s += t1 - t0; /* a failed step's time means nothing */
    o->buckets_exchanged += o->plan.n;
    return OB_OK;
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
    ob__optim_disarm(o); /* a begin without a step: finish the earlier exchange first */
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
        ob_status st = ob__optim_scale(o, o->v, c2, err);
        if (st != OB_OK) return st;
    } else {
        double f = ob_optim_freeze_raise(&o->cfg, t);
        if (f > 1.0) {
            ob_status st = ob__optim_scale(o, o->v, (float)f, err);
            if (st != OB_OK) return st;
        }
    }
    return ob__optim_compute_den(o, err);
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
            ratio_hat =
                (norm / (1.0 - pow(b2, (double)t))) / (back / (1.0 - pow(b2, (double)(t - lag))));
    }
    o->norms[slot] = norm;
    o->last_norm = norm;
    o->last_ratio = lag < delta ? ratio_hat : ratio;
    if (delayed) return t >= o->refit_end ? freeze(o, t, err) : OB_OK;
    /* A tracked variance: the estimate describes the later gradients, not the warmup. */
    if (c->track_variance > 0)
        return t >= ob_optim_track_freeze_step(c) ? freeze(o, t, err) : OB_OK;

    double lo = c->freeze_threshold, hi = 1.0 / c->freeze_threshold;
    long floor =
        c->lr_warmup_steps > c->freeze_min_steps ? c->lr_warmup_steps : c->freeze_min_steps;
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
    return ob__optim_scale(o, o->v, 0.0f, err);
}

/* Warmup step t: the fp32-averaged gradient, Adam, then the freeze rule in force (the end of a
 * warm start's refit, or freeze_step). */
static ob_status warmup_step(ob_optim *o, const float *grad, long t, ob_adam_coeffs *k, ob_err *err)
{
    ob_status st = sum_ranks(o, grad, o->g, SUM_GRADS, err);
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
        (st = ob__optim_scale(o, o->v, (float)o->refit_scale, err)) != OB_OK)
        return st;
    return ob__optim_compute_den(o, err);
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
    if ((st = sum_ranks(o, grad, o->g, SUM_GRADS, err)) != OB_OK) return st;
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
static ob_status compression_step(ob_optim *o, const float *grad, long t, const ob_adam_coeffs *k,
                                  ob_err *err)
{
    const ob_optim_config *c = &o->cfg;
    ob_status st;
    if (c->mode == OB_ONEBIT_COMPRESSED) {
        if ((st = exchange_compressed(o, grad, k, err)) != OB_OK) return st;
        /* The tracked variance after the exchange (the communication thread is done with the
         * communicator): before the step without precondition, so that an estimate's v
         * applies at once; with it after the step, which needs the average of m / den that
         * the estimate's scratch buffer holds, so that the next step uses the new den. */
        if (c->precondition) {
            if ((st = k_apply(o, k, err)) != OB_OK) return st;
            return o->ts ? track_step(o, grad, t, err) : OB_OK;
        }
        if (o->ts && (st = track_step(o, grad, t, err)) != OB_OK) return st;
        return k_frozen(o, k, err);
    }
    if ((st = k_momentum(o, grad, 0, o->d, k, err)) != OB_OK) return st;
    int n = ob_comm_size(o->comm);
    st = sum_ranks(o, o->m, o->m, SUM_FP32, err);
    if (st == OB_OK && n > 1) st = ob__optim_scale(o, o->m, 1.0f / (float)n, err);
    if (st != OB_OK) return st;
    return k_frozen(o, k, err);
}

ob_status ob_optim_step(ob_optim *o, const float *grad, float lr, ob_err *err)
{
    int armed = ob__overlap_armed(o->ov);
    if (armed && grad != o->armed_grad) {
        ob__optim_disarm(o);
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "optimizer step: not the gradient given to ob_optim_backward_begin");
    }
    if (!grad) return OB_ERR(err, OB_ERR_INVALID_ARG, "optimizer step: NULL gradient");
    if (!isfinite(lr) || lr < 0.0f) {
        ob__optim_disarm(o);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "optimizer step: learning rate %g", (double)lr);
    }

    const ob_optim_config *c = &o->cfg;
    long t = o->step + 1, j;
    int naive = c->kind == OB_OPTIM_ONEBIT_ADAM && c->mode == OB_ONEBIT_NAIVE;
    /* An exchange armed for the other phase: the state changed since ob_optim_backward_begin. */
    if (armed && o->armed_compressed != next_step_compresses(o)) {
        ob__optim_disarm(o);
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
        st = sum_ranks(o, grad, o->g, SUM_GRADS, err);
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
        if (st == OB_OK && o->ts) st = track_update(o, grad, t, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld (warmup)", t);
    } else if ((j = refresh_index(o, t)) > 0) {
        st = refresh_step(o, grad, t, j, &k, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld (variance refresh)", t);
    } else {
        st = compression_step(o, grad, t, &k, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld (momentum exchange)", t);
    }
    o->step = t;
    ob__optim_key_next_step(o);
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
