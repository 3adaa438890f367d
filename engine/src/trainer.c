/* The data-parallel training loop (see onebit/trainer.h). */
#include "trainer_internal.h"
#include "onebit/compress_cuda.h"
#include "onebit/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Opens the dataset the spec names; text datasets are cut at the model's context. */
static ob_status open_data(ob_trainer *t, ob_err *err)
{
    const ob_data_spec *ds = &t->spec.data;
    const char *path = ds->path[0] ? ds->path : NULL;
    ob_status st = OB_ERR_INVALID_ARG;
    switch (ds->kind) {
    case OB_DATA_FASHION_MNIST:
    case OB_DATA_IDX: {
        ob_idx_options o;
        ob_idx_options_default(&o);
        o.norm = ds->norm;
        if (ds->kind == OB_DATA_IDX) o.num_classes = 0;
        st = ob_dataset_open_idx_dir(&t->ds, path, &o, err);
        break;
    }
    case OB_DATA_TEXT: {
        ob_text_options o;
        ob_text_options_default(&o);
        o.context = t->spec.model.context;
        o.eval_fraction = ds->eval_fraction;
        o.max_bytes = ds->max_bytes;
        st = ob_dataset_open_text(&t->ds, path, &o, err);
        break;
    }
    case OB_DATA_SYNTH_CLASSIFICATION: {
        ob_synth_classification_spec s = ds->synth_cls;
        s.seed = t->spec.seed;
        st = ob_dataset_synthetic_classification(&t->ds, &s, err);
        break;
    }
    case OB_DATA_SYNTH_TEXT: {
        ob_synth_text_spec s = ds->synth_text;
        s.seed = t->spec.seed;
        s.context = t->spec.model.context;
        st = ob_dataset_synthetic_text(&t->ds, &s, err);
        break;
    }
    }
    if (st != OB_OK) return OB_WRAP(err, st, "data");
    t->is_text = ob_dataset_get_kind(t->ds) == OB_DATASET_TEXT;
    return OB_OK;
}

/* device: cuda: the NCCL communicator on this rank's GPU. First in the setup, because it is
 * collective: every rank must reach it before any can fail on its own. */
static ob_status build_device(ob_trainer *t, ob_err *err)
{
    if (t->spec.device != OB_DEVICE_CUDA) return OB_OK;
    int device = -1;
    ob_err derr = {0};
    ob_status st = ob_comm_local_device(&device, &derr);
    if (st == OB_ERR_UNSUPPORTED) { /* a build without CUDA: derr says so */
        if (err) *err = derr;
        return st;
    }
    /* Without a device here, create still runs its collective agreement and reports why. */
    st = ob_comm_create_nccl(&t->dcomm, device < 0 ? 0 : device, err);
    if (st != OB_OK) return OB_WRAP(err, st, "device: cuda");
    t->dev = 1;
    return OB_OK;
}

/* Parameters (identical on every rank from the seed: no broadcast needed) and gradients, in
 * the optimizer communicator's memory. */
static ob_status build_params(ob_trainer *t, ob_err *err)
{
    size_t bytes = t->d * sizeof(float);
    ob_status st;
    if ((st = ob__mem_alloc(t->dev, (void **)&t->params, bytes, "parameters", err)) ||
        (st = ob__mem_alloc(t->dev, (void **)&t->grad, bytes, "gradients", err)))
        return st;
    if (!t->dev) {
        ob_model_init_params(t->model, t->params, t->spec.seed);
        return OB_OK;
    }
    ob__host_state hs;
    if ((st = ob__trainer_host_state(t, 0, &hs, err)) != OB_OK) return st;
    ob_model_init_params(t->model, hs.params, t->spec.seed);
    void *stream = ob_comm_stream(t->dcomm);
    if ((st = ob__mem_copy(1, t->params, hs.params, bytes, stream, err)) ||
        (st = ob_cuda_sync(stream, err)))
        return OB_WRAP(err, st, "parameters to the device");
    return OB_OK;
}

/* The exchanges' buckets follow the model's gradient parts and the order in which the
 * backward pass finishes them; with the overlap, the backward pass reports each finished part
 * to the optimizer. On a device the exchange stays one NCCL allreduce of the whole vector after
 * the backward pass (each NCCL collective synchronises its stream, so buckets there would only
 * add waits). */
static ob_status set_buckets(ob_trainer *t, ob_err *err)
{
    if (t->dev) return OB_OK;
    size_t n = ob_model_num_grad_parts(t->model);
    size_t *offsets = malloc(2 * n * sizeof *offsets);
    if (!offsets) return OB_ERR(err, OB_ERR_NOMEM, "gradient parts");
    size_t *stages = offsets + n;
    for (size_t i = 0; i < n; i++) {
        offsets[i] = ob_model_grad_part_at(t->model, i)->offset;
        stages[i] = ob_model_grad_part_at(t->model, i)->stage;
    }
    ob_status st = ob_optim_set_tensor_layout(t->opt, offsets, stages, n, err);
    free(offsets);
    if (st != OB_OK) return OB_WRAP(err, st, "optimizer");
    if (ob_optim_overlap_active(t->opt))
        ob_model_set_grad_hook(t->model, ob_optim_grad_hook, t->opt);
    return OB_OK;
}

static ob_status build(ob_trainer *t, ob_err *err)
{
    ob_status st = build_device(t, err);
    if (st != OB_OK) return st;
    if ((st = open_data(t, err)) != OB_OK) return st;
    int rank = ob_comm_rank(t->comm), n = ob_comm_size(t->comm);
    const ob_jobspec *s = &t->spec;

    st = ob_loader_create(&t->train, t->ds, OB_SPLIT_TRAIN, rank, n, s->batch_size, s->seed, err);
    if (st != OB_OK)
        return OB_WRAP(err, st, "train loader (batch_size %zu x %d ranks)", s->batch_size, n);
    if (ob_dataset_num_examples(t->ds, OB_SPLIT_EVAL) > 0) {
        st = ob_loader_create_pass(&t->eval, t->ds, OB_SPLIT_EVAL, rank, n, s->batch_size,
                                   s->eval_max_examples, err);
        if (st != OB_OK) return OB_WRAP(err, st, "eval loader");
    }

    ob_model_config mc = s->model;
    mc.max_batch = s->batch_size;
    if (!t->is_text) {
        mc.input_dim = ob_dataset_input_dim(t->ds);
        mc.num_classes = (size_t)ob_dataset_num_classes(t->ds);
    }
    if (t->dev)
        st = ob_model_create_cuda(&t->model, &mc, ob_comm_stream(t->dcomm), err);
    else
        st = ob_model_create(&t->model, &mc, err);
    if (st != OB_OK) return OB_WRAP(err, st, "model");
    t->d = ob_model_num_params(t->model);
    if ((st = build_params(t, err)) != OB_OK) return st;

    ob_optim_config oc = s->optim;
    oc.seed = s->seed; /* binsgdm's draws */
    st = ob_optim_create(&t->opt, &oc, t->dev ? t->dcomm : t->comm, t->params, t->d, err);
    if (st != OB_OK) return OB_WRAP(err, st, "optimizer");
    return set_buckets(t, err);
}

/* --- host views of the state (checkpoints) ------------------------------------------------- */

static ob_status mirror(float **h, size_t n, const char *what, ob_err *err)
{
    if (*h || n == 0) return OB_OK;
    return ob__mem_alloc(0, (void **)h, n * sizeof(float), what, err);
}

ob_status ob__trainer_host_state(ob_trainer *t, int download, ob__host_state *hs, ob_err *err)
{
    memset(hs, 0, sizeof *hs);
    ob_optim_state os = {0};
    if (t->opt) ob_optim_get_state(t->opt, &os);
    hs->d = t->d;
    hs->D = os.padded_size;
    hs->C = os.chunk_size;
    hs->hist = os.v_norm_history;
    hs->H = os.v_norm_history_len;
    hs->seg = os.server_segments;
    hs->nseg = os.num_server_segments;
    hs->local = os.local_moments;
    hs->ranks_per_node = os.ranks_per_node;
    hs->TS = os.track_stats_len;
    if (!t->dev) {
        hs->ts = os.track_stats;
        hs->params = t->params;
        hs->m = os.exp_avg;
        hs->v = os.exp_avg_sq;
        hs->we = os.worker_error;
        hs->se = os.server_error;
        return OB_OK;
    }
    ob_status st;
    if ((st = mirror(&t->h_params, t->d, "host copy of the parameters", err)) ||
        (st = mirror(&t->h_m, t->opt ? t->d : 0, "host copy of m", err)) ||
        (st = mirror(&t->h_v, t->opt ? t->d : 0, "host copy of v", err)) ||
        (st = mirror(&t->h_we, hs->D, "host copy of the worker error", err)) ||
        (st = mirror(&t->h_se, hs->C, "host copy of the server error", err)) ||
        (st = mirror(&t->h_ts, hs->TS, "host copy of the variance statistics", err)))
        return st;
    hs->ts = hs->TS ? t->h_ts : NULL;
    hs->params = t->h_params;
    hs->m = t->h_m;
    hs->v = t->h_v;
    hs->we = hs->D ? t->h_we : NULL;
    hs->se = hs->C ? t->h_se : NULL;
    if (!download) return OB_OK;

    void *stream = ob_comm_stream(t->dcomm);
    size_t fb = sizeof(float);
    /* Rank 0 writes the shared arrays; every rank its own moments where they are per rank. */
    int all = ob_comm_rank(t->comm) == 0, moments = all || hs->local;
    if ((all && (st = ob__mem_copy(1, hs->params, t->params, t->d * fb, stream, err))) ||
        (moments && ((st = ob__mem_copy(1, hs->m, os.exp_avg, t->d * fb, stream, err)) ||
                     (st = ob__mem_copy(1, hs->v, os.exp_avg_sq, t->d * fb, stream, err)))) ||
        (st = ob__mem_copy(1, hs->we, os.worker_error, hs->D * fb, stream, err)) ||
        (st = ob__mem_copy(1, hs->se, os.server_error, hs->C * fb, stream, err)) ||
        (st = ob__mem_copy(1, hs->ts, os.track_stats, hs->TS * fb, stream, err)) ||
        (st = ob_cuda_sync(stream, err)))
        return OB_WRAP(err, st, "state from the device");
    return OB_OK;
}

ob_status ob__trainer_upload_state(ob_trainer *t, const ob__host_state *hs, ob_err *err)
{
    if (!t->dev) return OB_OK;
    ob_optim_state os;
    ob_optim_get_state(t->opt, &os);
    void *stream = ob_comm_stream(t->dcomm);
    size_t fb = sizeof(float);
    ob_status st;
    if ((st = ob__mem_copy(1, t->params, hs->params, t->d * fb, stream, err)) ||
        (st = ob__mem_copy(1, os.exp_avg, hs->m, t->d * fb, stream, err)) ||
        (st = ob__mem_copy(1, os.exp_avg_sq, hs->v, t->d * fb, stream, err)) ||
        (st = ob__mem_copy(1, os.worker_error, hs->we, hs->D * fb, stream, err)) ||
        (st = ob__mem_copy(1, os.server_error, hs->se, hs->C * fb, stream, err)) ||
        (st = ob__mem_copy(1, os.track_stats, hs->ts, hs->TS * fb, stream, err)) ||
        (st = ob_cuda_sync(stream, err)))
        return OB_WRAP(err, st, "state to the device");
    return OB_OK;
}

ob_status ob_trainer_create(ob_trainer **out, const ob_jobspec *spec, ob_comm *comm, ob_err *err)
{
    *out = NULL;
    if (ob_jobspec_is_program(spec))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "a program job: onebit-worker runs its program, the trainer trains the "
                      "built-in models");
    ob_trainer *t = calloc(1, sizeof *t);
    if (!t) return OB_ERR(err, OB_ERR_NOMEM, "trainer");
    t->spec = *spec;
    t->comm = comm;
    t->pending_step = -1;
    t->last_ckpt_step = -1;
    t->last_loss = NAN;
    t->loss_ema = t->loss_at_freeze = t->loss_best = NAN;
    t->last_lr = NAN;
    ob_status st = ob_jobspec_to_json(spec, &t->spec_json, err);
    if (st == OB_OK) st = build(t, err);
    if (st == OB_OK) st = ob__trainer_tensor_index(t, err);

    /* Agree on the outcome, so no rank waits in a collective for one that gave up. */
    float failed = st != OB_OK ? 1.0f : 0.0f;
    ob_status ast = ob_comm_allreduce_sum_f32(comm, &failed, 1, st == OB_OK ? err : NULL);
    if (st == OB_OK && ast != OB_OK) st = OB_WRAP(err, ast, "setup agreement");
    if (st == OB_OK && failed > 0.0f)
        st = OB_ERR(err, OB_ERR_STATE, "setup failed on %d other rank(s)", (int)failed);
    if (st != OB_OK) {
        ob_trainer_destroy(t);
        return st;
    }
    *out = t;
    return OB_OK;
}

void ob_trainer_destroy(ob_trainer *t)
{
    if (!t) return;
    ob__trainer_ckpt_destroy(t);
    free(t->spec_json);
    ob_optim_destroy(t->opt);
    ob_model_destroy(t->model);
    ob_loader_destroy(t->train);
    ob_loader_destroy(t->eval);
    ob_dataset_destroy(t->ds);
    ob__mem_free(t->dev, t->params);
    ob__mem_free(t->dev, t->grad);
    float *mirrors[] = {t->h_params, t->h_m, t->h_v, t->h_we, t->h_se, t->h_ts};
    for (size_t i = 0; i < sizeof mirrors / sizeof *mirrors; i++)
        ob_aligned_free(mirrors[i]);
    ob_comm_destroy(t->dcomm);
    free(t);
}

float *ob_trainer_params(ob_trainer *t)
{
    return t->params;
}

size_t ob_trainer_num_params(const ob_trainer *t)
{
    return t->d;
}

ob_optim *ob_trainer_optim(ob_trainer *t)
{
    return t->opt;
}

ob_model *ob_trainer_model(ob_trainer *t)
{
    return t->model;
}

const ob_dataset *ob_trainer_dataset(const ob_trainer *t)
{
    return t->ds;
}

static void fill_optim_fields(ob_trainer *t, ob_train_event *ev);

/* Why the latest auto freeze is where it is (onebit/jobspec.h: max(ceil(fraction * steps),
 * floor + 2 lag), floor the LR warmup or freeze_min_steps), in words, into buf. */
static void latest_freeze_why(const ob_jobspec *s, char *buf, size_t cap)
{
    const ob_optim_config *c = &s->optim;
    long at = (long)ceil(s->freeze_max_fraction * (double)s->steps);
    int by_warmup = c->lr_warmup_steps >= c->freeze_min_steps;
    long floor = by_warmup ? c->lr_warmup_steps : c->freeze_min_steps;
    long lag = ob_optim_freeze_lag(c->beta2);
    if (at >= c->freeze_max_step)
        snprintf(buf, cap, "optimizer.freeze_max_fraction %g of %ld steps", s->freeze_max_fraction,
                 s->steps);
    else
        snprintf(buf, cap,
                 "optimizer.freeze_max_fraction %g of %ld steps is step %ld, but the freeze "
                 "comes no earlier than %s %ld steps + 2 x beta2 %g's lag of %ld steps",
                 s->freeze_max_fraction, s->steps, at,
                 by_warmup ? "the lr warmup's" : "optimizer.freeze_min_steps'", floor, c->beta2,
                 lag);
}

/* Before the first step: a 1-bit Adam job whose steps end before its variance can freeze
 * never compresses; it says so, and why, instead of leaving it to the end. */
static void freeze_plan_notice(ob_trainer *t, ob_train_callback cb, void *user)
{
    const ob_jobspec *s = &t->spec;
    const ob_optim_config *c = &s->optim;
    ob_optim_stats os;
    ob_optim_get_stats(t->opt, &os);
    if (!cb || c->kind != OB_OPTIM_ONEBIT_ADAM || c->mode == OB_ONEBIT_NAIVE ||
        os.phase != OB_PHASE_WARMUP)
        return;
    char msg[480], why[240];
    if (c->freeze_step > 0 && c->freeze_step >= s->steps)
        snprintf(msg, sizeof msg,
                 "optimizer.freeze_step %ld is not before the job's last step (steps: %ld): no "
                 "step is compressed, every step sends fp32 as Adam does",
                 c->freeze_step, s->steps);
    else if (c->freeze_step == 0 && c->freeze_max_step >= s->steps) {
        latest_freeze_why(s, why, sizeof why);
        snprintf(msg, sizeof msg,
                 "the latest auto freeze is step %ld (%s), not before the job's last step "
                 "(steps: %ld): unless v settles sooner no step is compressed; give the job more "
                 "steps or set optimizer.freeze_step",
                 c->freeze_max_step, why, s->steps);
    } else
        return;
    ob_train_event ev = {0};
    ev.kind = OB_EVENT_NOTICE;
    fill_optim_fields(t, &ev);
    ev.message = msg;
    cb(&ev, user);
}

static void fill_optim_fields(ob_trainer *t, ob_train_event *ev)
{
    ob_optim_stats os;
    ob_optim_get_stats(t->opt, &os);
    ev->step = os.step;
    ev->total_steps = t->spec.steps;
    /* A variance frozen at the job's last step leaves no step to compress: the job ran in
     * the warmup from its first step to its last. */
    ev->phase = os.phase == OB_PHASE_COMPRESSION && os.freeze_step >= t->spec.steps
                    ? OB_PHASE_WARMUP
                    : os.phase;
    ev->bytes_sent = os.bytes_sent;
    ev->bytes_step = os.bytes_last_step;
    ev->freeze_ratio = os.freeze_ratio;
    ev->freeze_step = os.freeze_step;
    ev->is_text = t->is_text;
}

ob_status ob_trainer_evaluate(ob_trainer *t, ob_train_event *out, ob_err *err)
{
    memset(out, 0, sizeof *out);
    out->kind = OB_EVENT_EVAL;
    fill_optim_fields(t, out);
    out->eval_loss = NAN;
    out->eval_accuracy = NAN;
    if (!t->eval) return OB_OK;
    ob_loader_rewind(t->eval);
    double loss_sum = 0.0, correct = 0.0, count = 0.0;
    for (;;) {
        ob_batch b;
        ob_status st = ob_loader_next(t->eval, &b, err);
        if (st != OB_OK) return OB_WRAP(err, st, "evaluation batch");
        if (b.n == 0) break;
        ob_model_result r;
        st = ob_model_forward_backward(t->model, t->params, &b, NULL, &r, err);
        if (st != OB_OK) return OB_WRAP(err, st, "evaluation at step %ld", out->step);
        loss_sum += r.loss * (double)r.count;
        correct += (double)r.correct;
        count += (double)r.count;
    }
    float sums[3] = {(float)loss_sum, (float)correct, (float)count};
    ob_status st = ob_comm_allreduce_sum_f32(t->comm, sums, 3, err);
    if (st != OB_OK) return OB_WRAP(err, st, "evaluation sums");
    out->eval_count = (size_t)sums[2];
    if (sums[2] > 0.0f) {
        out->eval_loss = (double)sums[0] / (double)sums[2];
        out->eval_accuracy = (double)sums[1] / (double)sums[2];
    }
    return OB_OK;
}

void ob_trainer_set_stop_flag(ob_trainer *t, const volatile sig_atomic_t *flag)
{
    t->stop_flag = flag;
}

void ob_trainer_set_fault_injection(ob_trainer *t, const ob_fault_injection *f)
{
    if (f)
        t->fault = *f;
    else
        memset(&t->fault, 0, sizeof t->fault);
}

/* sqrt(a / b) for squared norms: 0 when both are 0, infinite for an error without momentum
 * and when a sum overflowed (reported as null). */
static double norm_ratio(double a, double b)
{
    if (!isfinite(a) || !isfinite(b)) return INFINITY;
    if (b > 0.0) return sqrt(a / b);
    return a > 0.0 ? INFINITY : 0.0;
}

/* The compression-health numbers of a logged step (onebit/optim.h, ob_optim_health_sums_local):
 * this rank's sums, reduced over the ranks in one allreduce of four floats. Only on logging
 * steps, which every rank reaches together; the state is only read. */
static ob_status compression_health(ob_trainer *t, ob_train_event *ev, ob_err *err)
{
    ev->worker_error_ratio = ev->server_error_ratio = ev->zero_momentum_fraction = NAN;
    ob_optim_state os;
    ob_optim_get_state(t->opt, &os);
    if (os.padded_size == 0) return OB_OK; /* no error feedback */
    ob_optim_health_sums h;
    ob_status st = ob_optim_health_sums_local(t->opt, &h, err);
    if (st != OB_OK) return st;
    /* Divided by d, which leaves the ratios alone and keeps the sums well inside a float. */
    double d = (double)t->d;
    float v[4] = {(float)(h.worker_error_sq / d), (float)(h.server_error_sq / d),
                  (float)(h.momentum_sq / d), (float)(h.zero_momentum / d)};
    st = ob_comm_allreduce_sum_f32(t->comm, v, 4, err);
    if (st != OB_OK) return OB_WRAP(err, st, "compression health reduction");
    double n = (double)ob_comm_size(t->comm);
    ev->worker_error_ratio = norm_ratio((double)v[0], (double)v[2]);
    ev->server_error_ratio = norm_ratio((double)v[1] * n, (double)v[2]);
    ev->zero_momentum_fraction = (double)v[3] / n;
    return OB_OK;
}

/* The mean train loss crosses in the control reduction as a fixed-point number in units of
 * 2^-22, split in a high word (units of 2^-6) and a low word (the 16 bits below it), so that
 * both sums are exact in int32 and every rank gets the same mean whatever the order of the
 * sum. A rank's loss is clamped to [0, INT32_MAX / n high units] (1024 ranks: 32767 nats), so
 * the high sum cannot overflow; the low sum cannot for n <= 32768 (beyond, the low words are
 * dropped). Not a number counts as 0: it is flagged on its own. */
#define LOSS_HI_BITS 6
#define LOSS_LO_BITS 16

static void encode_loss(double loss, int n, int32_t *hi, int32_t *lo)
{
    int64_t cap = (int64_t)(INT32_MAX / n) << LOSS_LO_BITS;
    double q = loss * (double)(1 << (LOSS_HI_BITS + LOSS_LO_BITS));
    int64_t u = !(q > 0.0) ? 0 : q >= (double)cap ? cap : (int64_t)llround(q);
    if (u > cap) u = cap;
    *hi = (int32_t)(u >> LOSS_LO_BITS);
    *lo = n <= 32768 ? (int32_t)(u & ((1 << LOSS_LO_BITS) - 1)) : 0;
}

static double decode_loss(int32_t hi, int32_t lo, int n)
{
    double u = (double)hi * (double)(1 << LOSS_LO_BITS) + (double)lo;
    return u / (double)(1 << (LOSS_HI_BITS + LOSS_LO_BITS)) / (double)n;
}

/* The per-step control reduction: stop requests, async checkpoint completion, ranks whose loss
 * is not finite and the mean loss, so that every rank takes the same decision at the same
 * step. Six int32 through MPI's own allreduce (latency-optimal: two rounds of a 24-byte
 * message on 4 ranks), not the bandwidth-optimal ring the gradients take. Sets *stop, *nbad
 * and *mean_loss (over every rank, the non-finite ones counting 0). */
static ob_status control(ob_trainer *t, long step, int bad, double loss, int *stop, int *nbad,
                         double *mean_loss, ob_train_callback cb, void *user, ob_err *err)
{
    float ok, failed;
    ob__trainer_ckpt_local_done(t, &ok, &failed);
    int n = ob_comm_size(t->comm);
    int32_t v[6] = {t->stop_flag && *t->stop_flag ? 1 : 0, ok > 0.0f, failed > 0.0f, bad != 0};
    encode_loss(bad ? 0.0 : loss, n, &v[4], &v[5]);
    ob_status st = ob_comm_control_start(t->comm, v, 6, err);
    if (st == OB_OK) st = ob_comm_control_finish(t->comm, v, err);
    if (st != OB_OK) return OB_WRAP(err, st, "step %ld: control", step);
    *stop = v[0] > 0;
    *nbad = (int)v[3];
    *mean_loss = decode_loss(v[4], v[5], n);
    return ob__trainer_ckpt_poll(t, (float)v[1], (float)v[2], cb, user, err);
}

/* The divergence guard's test of the loss after a step (the mean over the ranks, the same on
 * every rank): updates the tracker and says whether the loss of the compression phase has
 * risen: its moving average above checkpoint.loss_rise times its lowest since the freeze,
 * above its level at the freeze, and more than LOSS_RISE_MIN above that lowest (near-zero
 * losses may double by chance). */
#define LOSS_EMA_ALPHA 0.1
#define LOSS_RISE_MIN 0.01

static int loss_rose(ob_trainer *t, double mean, ob_phase phase)
{
    t->loss_ema = isnan(t->loss_ema) ? mean : t->loss_ema + LOSS_EMA_ALPHA * (mean - t->loss_ema);
    if (phase != OB_PHASE_COMPRESSION) {
        t->loss_at_freeze = t->loss_best = NAN;
        return 0;
    }
    if (isnan(t->loss_at_freeze) || isnan(t->loss_best)) {
        t->loss_at_freeze = t->loss_best = t->loss_ema;
        return 0;
    }
    if (t->loss_ema < t->loss_best) t->loss_best = t->loss_ema;
    double f = t->spec.checkpoint_loss_rise;
    return f > 0.0 && t->loss_ema > f * t->loss_best && t->loss_ema > t->loss_at_freeze &&
           t->loss_ema > t->loss_best + LOSS_RISE_MIN;
}

void ob_trainer_set_profiling(ob_trainer *t, int on)
{
    t->profiling = on != 0;
    memset(&t->profile, 0, sizeof t->profile);
    ob_optim_set_timing(t->opt, on);
}

/* The profile so far: the trainer's own parts plus the optimizer's timing. */
static void get_profile(const ob_trainer *t, ob_train_profile *p)
{
    *p = t->profile;
    if (!t->profiling) return;
    ob_optim_timing ot;
    ob_optim_get_timing(t->opt, &ot);
    p->optim_s = ot.total_s;
    p->allreduce_s = ot.allreduce_s;
    p->compress_s = ot.car.compress_s + ot.car.server_s + ot.car.decode_s;
    p->exchange_s = ot.car.alltoall_s + ot.car.allgather_s;
    p->wait_s = ot.wait_s;
}

static void inject_fault(const ob_trainer *t, long step)
{
    if (t->fault.step > 0 && t->fault.step == step && t->fault.rank == ob_comm_rank(t->comm))
        raise(t->fault.signal);
}

/* An OB_EVENT_NOTICE of the current step with the optimizer's fields, carrying msg (borrowed
 * for the call); nothing without a callback. */
static void loop_notice(ob_trainer *t, const char *msg, ob_train_callback cb, void *user)
{
    if (!cb) return;
    ob_train_event ev = {0};
    ev.kind = OB_EVENT_NOTICE;
    fill_optim_fields(t, &ev);
    ev.message = msg;
    cb(&ev, user);
}

/* The data and the forward and backward passes of step `step` into t->grad: *r receives the
 * model's result, *bad whether its loss is not finite. */
static ob_status compute_gradient(ob_trainer *t, long step, ob_model_result *r, int *bad,
                                  ob_err *err)
{
    ob_batch b;
    double p0 = t->profiling ? ob_mono_s() : 0.0;
    ob_status st = ob_loader_next(t->train, &b, err);
    if (st != OB_OK) return OB_WRAP(err, st, "step %ld: training batch", step);
    double p1 = t->profiling ? ob_mono_s() : 0.0;
    /* The forward pass returns the loss, so on a device it has waited for its kernels.
     * With the overlap, the gradient's buckets leave while the backward pass runs (no call
     * on the communicator until the optimizer step). */
    ob_optim_backward_begin(t->opt, t->grad);
    st = ob_model_forward_backward(t->model, t->params, &b, t->grad, r, err);
    /* A loss that is not finite (the model says so, or its value does) ends the run, or,
     * with a rollback to go back to, is agreed on in the control reduction and this rank's
     * step adds nothing (the rollback discards the step anyway; with the overlap the
     * communication thread may be reading the gradient, so it is left as it is). */
    *bad = (st == OB_ERR_NUMERIC) || (st == OB_OK && !isfinite(r->loss));
    if (*bad && !ob__trainer_can_roll_back(t)) {
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld", step);
        return OB_ERR(err, OB_ERR_NUMERIC, "step %ld: the training loss is %g", step, r->loss);
    }
    if (!*bad && st != OB_OK) return OB_WRAP(err, st, "step %ld", step);
    if (t->profiling) {
        double p2 = ob_mono_s();
        t->profile.data_s += p1 - p0;
        t->profile.compute_s += p2 - p1;
        t->profile.steps++;
    }
    if (*bad && !ob_optim_overlap_active(t->opt)) {
        st = ob__mem_zero(t->dev, t->grad, t->d * sizeof(float),
                          t->dev ? ob_comm_stream(t->dcomm) : NULL, err);
        if (st != OB_OK) return OB_WRAP(err, st, "step %ld", step);
    }
    if (*bad) r->loss = 0.0;
    return OB_OK;
}

/* The events of an optimizer step that changed its phase or its freeze (before, frozen_at: as
 * they were before the step; os: the statistics after it): the warm-start check's outcome, a
 * variance refresh, a freeze (and whether it came at the latest auto freeze). */
static void phase_events(ob_trainer *t, ob_phase before, long frozen_at, const ob_optim_stats *os,
                         ob_train_callback cb, void *user)
{
    const ob_jobspec *s = &t->spec;
    if (os->step == 1 && !isnan(os->warm_check_fraction)) ob__trainer_warm_checked(t, os, cb, user);
    if (before == OB_PHASE_COMPRESSION && os->phase == OB_PHASE_COMPRESSION &&
        os->freeze_step != frozen_at && cb) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "variance refreshed: steps %ld-%ld re-estimated v (frozen at step %ld "
                 "before); the next refresh after step %ld",
                 ob_optim_next_refresh(&s->optim, frozen_at), os->freeze_step, frozen_at,
                 ob_optim_next_refresh(&s->optim, os->freeze_step) - 1);
        loop_notice(t, msg, cb, user);
    }
    if (before == OB_PHASE_WARMUP && os->phase == OB_PHASE_COMPRESSION && cb) {
        ob_train_event ev = {0};
        ev.kind = OB_EVENT_FREEZE;
        fill_optim_fields(t, &ev);
        cb(&ev, user);
        double lo = s->optim.freeze_threshold;
        if (s->optim.freeze_max_step > 0 && os->freeze_step >= s->optim.freeze_max_step &&
            !(os->freeze_ratio >= lo && os->freeze_ratio <= 1.0 / lo)) {
            char msg[480], why[240];
            latest_freeze_why(s, why, sizeof why);
            snprintf(msg, sizeof msg,
                     "v frozen at step %ld, the latest auto freeze (%s): the variance was still "
                     "changing (ratio %.4f)%s",
                     os->freeze_step, why, os->freeze_ratio,
                     os->freeze_step >= s->steps
                         ? "; it is the job's last step: no step is compressed"
                         : "");
            loop_notice(t, msg, cb, user);
        }
    }
}

#define DIVERGENCE_WHY_LEN 160

/* Whether step `step` diverged, as the divergence guard sees it after the control reduction:
 * why[0..DIVERGENCE_WHY_LEN) receives the reason (the loss not finite on nbad ranks, or a
 * rise, loss_rose), or an empty string when there is none or no rollback can answer a rise
 * (then a warning, once per run). */
static void divergence(ob_trainer *t, long step, int nbad, double mean_loss, ob_phase phase,
                       char *why, ob_train_callback cb, void *user)
{
    why[0] = 0;
    if (nbad > 0) {
        snprintf(why, DIVERGENCE_WHY_LEN, "the loss is not finite on %d rank%s", nbad,
                 nbad == 1 ? "" : "s");
    } else if (loss_rose(t, mean_loss, phase)) {
        snprintf(why, DIVERGENCE_WHY_LEN,
                 "the training loss rose to %.4g, %.3gx its lowest since the freeze (%.4g)",
                 t->loss_ema, t->loss_ema / t->loss_best, t->loss_best);
        if (!ob__trainer_can_roll_back(t)) {
            if (!t->rise_warned && cb) {
                char msg[DIVERGENCE_WHY_LEN + 160];
                snprintf(msg, sizeof msg, "warning: %s at step %ld; no rollback: %s", why, step,
                         t->job_dir[0] ? "none left (checkpoint.rollbacks)"
                                       : "the job keeps no checkpoints");
                loop_notice(t, msg, cb, user);
            }
            t->rise_warned = 1;
            why[0] = 0;
        }
    }
}

/* The training loop's logging window: the steps since the last step event, their summed mean
 * losses, and when the window's training time began (evaluations, checkpoints and the health
 * numbers are not training throughput). */
typedef struct loop_window {
    double t0, loss;
    long steps;
} loop_window;

/* The step event of a logged step (the window's mean loss and throughput, the compression
 * health); starts the next window. */
static ob_status log_step(ob_trainer *t, long step, float lr, loop_window *w, ob_train_callback cb,
                          void *user, ob_err *err)
{
    double tnow = ob_mono_s();
    ob_train_event ev = {0};
    ev.kind = OB_EVENT_STEP;
    fill_optim_fields(t, &ev);
    ev.loss = w->loss / (double)w->steps;
    ev.lr = lr;
    ev.samples_per_s = (double)w->steps * (double)t->spec.batch_size * ob_comm_size(t->comm) /
                       fmax(tnow - w->t0, 1e-9);
    t->last_loss = ev.loss;
    double h0 = ob_mono_s();
    ob_status st = compression_health(t, &ev, err);
    if (st != OB_OK) return OB_WRAP(err, st, "step %ld", step);
    /* The health numbers are logging, like the evaluation: not training throughput. */
    double health_s = ob_mono_s() - h0;
    if (cb) cb(&ev, user);
    w->t0 = tnow + health_s;
    w->loss = 0.0;
    w->steps = 0;
    return OB_OK;
}

/* The evaluation and the checkpoint due after step `step` (not after the last one: the run's
 * end has its own). */
static ob_status eval_and_checkpoint(ob_trainer *t, long step, loop_window *w, ob_train_callback cb,
                                     void *user, ob_err *err)
{
    const ob_jobspec *s = &t->spec;
    ob_status st;
    if (s->eval_interval > 0 && step % s->eval_interval == 0 && step != s->steps) {
        ob_train_event ev;
        st = ob_trainer_evaluate(t, &ev, err);
        if (st != OB_OK) return st;
        if (cb && t->eval) cb(&ev, user);
        w->t0 = ob_mono_s(); /* evaluation time is not training throughput */
    }
    if (t->job_dir[0] && s->checkpoint_interval > 0 && step % s->checkpoint_interval == 0 &&
        step != s->steps) {
        st = ob__trainer_checkpoint(t, s->checkpoint_async, cb, user, err);
        if (st != OB_OK) return st;
        w->t0 = ob_mono_s(); /* nor is checkpoint time */
    }
    return OB_OK;
}

/* Training steps first_step .. spec.steps; returns early (*stopped = 1) on a stop request. */
static ob_status train_loop(ob_trainer *t, ob_train_callback cb, void *user, int *stopped,
                            ob_err *err)
{
    const ob_jobspec *s = &t->spec;
    ob_optim_stats os;
    ob_optim_get_stats(t->opt, &os);
    loop_window w = {ob_mono_s(), 0.0, 0};
    *stopped = 0;
    for (long step = os.step + 1; step <= s->steps; step++) {
        ob_model_result r;
        int bad = 0;
        ob_status st = compute_gradient(t, step, &r, &bad, err);
        if (st != OB_OK) return st;

        ob_phase before = os.phase;
        long frozen_at = os.freeze_step;
        float lr = (float)ob_lr_at(&s->lr, step);
        st = ob_optim_step(t->opt, t->grad, lr, err);
        if (st != OB_OK) return st;
        ob_optim_get_stats(t->opt, &os);
        if (before == OB_PHASE_WARMUP)
            t->bytes_warmup += os.bytes_last_step;
        else
            t->bytes_compression += os.bytes_last_step;
        t->last_lr = lr;
        w.steps++;
        phase_events(t, before, frozen_at, &os, cb, user);

        inject_fault(t, step);
        int stop = 0, nbad = 0;
        double mean_loss = 0.0;
        st = control(t, step, bad, r.loss, &stop, &nbad, &mean_loss, cb, user, err);
        if (st != OB_OK) return st;
        w.loss += nbad > 0 ? NAN : mean_loss;
        char why[DIVERGENCE_WHY_LEN];
        divergence(t, step, nbad, mean_loss, os.phase, why, cb, user);
        if (why[0]) {
            st = ob__trainer_roll_back(t, step, why, &step, cb, user, err);
            if (st != OB_OK) return st;
            ob_optim_get_stats(t->opt, &os);
            w = (loop_window){ob_mono_s(), 0.0, 0};
            continue;
        }

        if ((s->log_interval > 0 && step % s->log_interval == 0) || step == s->steps || stop) {
            if ((st = log_step(t, step, lr, &w, cb, user, err)) != OB_OK) return st;
        }
        if (stop && step < s->steps) { /* at the last step, finishing is stopping */
            *stopped = 1;
            return OB_OK;
        }
        if ((st = eval_and_checkpoint(t, step, &w, cb, user, err)) != OB_OK) return st;
    }
    return OB_OK;
}

ob_status ob_trainer_run(ob_trainer *t, ob_train_callback cb, void *user, ob_train_summary *out,
                         ob_err *err)
{
    const ob_jobspec *s = &t->spec;
    int n = ob_comm_size(t->comm);
    ob_train_summary sum;
    memset(&sum, 0, sizeof sum);
    sum.num_params = t->d;
    ob_optim_stats os;
    ob_optim_get_stats(t->opt, &os);
    sum.first_step = os.step + 1;

    if (s->optim.overlap && !ob_optim_overlap_active(t->opt) && cb) {
        ob_train_event ev = {0};
        ev.kind = OB_EVENT_NOTICE;
        fill_optim_fields(t, &ev);
        ev.message = "optimizer.overlap: MPI runs below MPI_THREAD_SERIALIZED; the gradient's "
                     "buckets are exchanged after the backward pass (the same results)";
        cb(&ev, user);
    } else if (s->optim.overlap && ob_optim_num_buckets(t->opt) == 1 && cb) {
        /* One bucket leaves only once the whole backward pass is done: nothing overlaps. */
        char msg[200];
        snprintf(msg, sizeof msg,
                 "optimizer.overlap: the model's %zu parameters fit one bucket of "
                 "bucket_mb %g; nothing overlaps the backward pass (a smaller bucket_mb gives "
                 "the last layers a bucket of their own)",
                 t->d, (double)s->optim.bucket_bytes / (double)(1 << 20));
        ob_train_event ev = {0};
        ev.kind = OB_EVENT_NOTICE;
        fill_optim_fields(t, &ev);
        ev.message = msg;
        cb(&ev, user);
    }
    const char *shape = ob_optim_exchange_note(t->opt);
    if (shape[0] && cb) {
        /* "auto" chose the exchange's shape where the ranks run: say what it found. */
        char msg[320];
        snprintf(msg, sizeof msg, "optimizer.ranks_per_node auto: %s", shape);
        ob_train_event ev = {0};
        ev.kind = OB_EVENT_NOTICE;
        fill_optim_fields(t, &ev);
        ev.message = msg;
        cb(&ev, user);
    }
    freeze_plan_notice(t, cb, user);
    t->t_start = ob_mono_s();
    int stopped = 0;
    ob_status st = train_loop(t, cb, user, &stopped, err);
    double wall = ob_mono_s() - t->t_start;
    if (st != OB_OK) return st;

    /* A checkpoint of the last step: on a stop request, or at the end of a job that keeps
     * checkpoints (unless the last periodic one already holds it). */
    ob_optim_get_stats(t->opt, &os);
    if (t->job_dir[0]) {
        st = ob__trainer_ckpt_flush(t, cb, user, err);
        if (st == OB_OK && t->last_ckpt_step != os.step)
            st = ob__trainer_checkpoint(t, 0, cb, user, err);
        if (st != OB_OK) return st;
    } else if (stopped && cb) {
        ob_train_event ev = {0};
        ev.kind = OB_EVENT_NOTICE;
        fill_optim_fields(t, &ev);
        ev.message = "stopped without a checkpoint: no checkpoint directory was given";
        cb(&ev, user);
    }

    ob_train_event ev;
    if (!stopped) {
        st = ob_trainer_evaluate(t, &ev, err);
        if (st != OB_OK) return st;
        if (cb && t->eval) cb(&ev, user);
    } else {
        memset(&ev, 0, sizeof ev);
        ev.eval_loss = ev.eval_accuracy = NAN;
    }

    sum.steps = os.step;
    sum.freeze_step = os.freeze_step;
    sum.final_train_loss = t->last_loss;
    sum.eval_loss = ev.eval_loss;
    sum.eval_accuracy = ev.eval_accuracy;
    sum.eval_count = ev.eval_count;
    sum.bytes_sent = os.bytes_sent;
    sum.bytes_warmup = t->bytes_warmup;
    sum.bytes_compression = t->bytes_compression;
    sum.wall_seconds = wall;
    sum.stopped = stopped;
    sum.last_checkpoint = t->last_ckpt_step;
    get_profile(t, &sum.profile);
    long done = os.step - sum.first_step + 1;
    sum.samples_per_s = done > 0 ? (double)done * (double)s->batch_size * n / fmax(wall, 1e-9) : 0;
    if (out) *out = sum;
    return OB_OK;
}
