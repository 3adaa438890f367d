/* The bucketed fp32 gradient exchange and its overlap with the backward pass, on MPI ranks:
 *   - the bucket plan: contiguous, cut at tensor boundaries, last tensors first, each bucket at
 *     least bucket_bytes;
 *   - one bucket (bucket_bytes >= the vector, or 0) is the whole-vector ring allreduce, bit for
 *     bit; several buckets are that allreduce per range (an independent Adam reference);
 *   - overlap on against off with the same buckets, through the real trainer, MLP and
 *     transformer, adam and 1-bit Adam (warmup -> freeze -> compression): identical parameters
 *     and optimizer state (memcmp), identical traffic, and the buckets (warmup) and the
 *     momentum's segments (compression phase, with and without precondition) really left during
 *     the backward pass;
 *   - a warm start's refit: fp16 gradients from its second step, and a refused warm start is
 *     the job from scratch, bit for bit;
 *   - the logged loss: the same on every rank, and no collective of its own.
 * Every case runs on every rank; any mismatch fails the process. */
#include "mpi_harness.h"

#include "onebit/comm.h"
#include "onebit/jobspec.h"
#include "onebit/model.h"
#include "onebit/optim.h"
#include "onebit/optim_kernels.h"
#include "onebit/rng.h"
#include "onebit/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the plan ------------------------------------------------------------------------------- */

/* The MLP's tensor table (input 32, hidden {64, 32}, 4 classes), as the trainer passes it. */
static ob_model *small_mlp(void)
{
    ob_model_config mc;
    ob_model_config_default(&mc, OB_MODEL_MLP);
    mc.input_dim = 32;
    mc.num_classes = 4;
    mc.hidden[0] = 64;
    mc.hidden[1] = 32;
    mc.num_hidden = 2;
    mc.max_batch = 4;
    ob_model *m = NULL;
    return ob_model_create(&m, &mc, NULL) == OB_OK ? m : NULL;
}

static size_t tensor_offsets(const ob_model *m, size_t *out)
{
    size_t n = ob_model_num_tensors(m);
    for (size_t i = 0; i < n; i++)
        out[i] = ob_model_tensor_at(m, i)->offset;
    return n;
}

/* The buckets of `opt` cover d floats from the end down to 0, each ending where the one
 * before starts and starting at a tensor of offsets[0 .. nt). */
static void check_cover(mpi_harness *h, const ob_optim *opt, const size_t *offsets, size_t nt,
                        size_t d)
{
    size_t nb = ob_optim_num_buckets(opt), expect_hi = d, expect_thi = nt;
    for (size_t k = 0; k < nb; k++) {
        size_t lo, hi, tlo, thi;
        ob_optim_bucket(opt, k, &lo, &hi, &tlo, &thi);
        MH_CHECK(h, hi == expect_hi && thi == expect_thi,
                 "bucket %zu of %zu: ends at %zu (tensor %zu), expected %zu (%zu)", k, nb, hi, thi,
                 expect_hi, expect_thi);
        MH_CHECK(h, tlo < thi && tlo < nt && lo == offsets[tlo],
                 "bucket %zu starts at %zu, not at tensor %zu", k, lo, tlo);
        expect_hi = lo;
        expect_thi = tlo;
    }
    MH_CHECK(h, expect_hi == 0 && expect_thi == 0, "the buckets do not reach offset 0");
}

/* Checks the plan of `opt` over the tensors of m (offsets) for bucket_bytes; returns the bucket
 * count. */
static size_t check_plan(mpi_harness *h, const ob_optim *opt, const ob_model *m,
                         const size_t *offsets, size_t bucket_bytes)
{
    size_t nb = ob_optim_num_buckets(opt), nt = ob_model_num_tensors(m);
    check_cover(h, opt, offsets, nt, ob_model_num_params(m));
    for (size_t k = 0; k < nb; k++) {
        size_t lo, hi, tlo, thi;
        ob_optim_bucket(opt, k, &lo, &hi, &tlo, &thi);
        size_t bytes = (hi - lo) * sizeof(float);
        MH_CHECK(h, nb == 1 || bytes >= bucket_bytes, "bucket %zu: %zu bytes < %zu", k, bytes,
                 bucket_bytes);
        /* Minimal: without its first tensor (the one it closed on) it would be short, unless
         * it is the last bucket, which may hold a short remainder's tensors too. */
        if (k + 1 < nb && tlo + 1 < thi) {
            size_t without = hi - ob_model_tensor_at(m, tlo + 1)->offset;
            MH_CHECK(h, without * sizeof(float) < bucket_bytes,
                     "bucket %zu is larger than it needs to be", k);
        }
    }
    return nb;
}

static void plan_layouts(mpi_harness *h)
{
    ob_comm *comm = NULL;
    ob_model *m = small_mlp();
    MH_CHECK(h, m && ob_comm_create_mpi(&comm, NULL) == OB_OK, "setup");
    if (!m || !comm) return;
    size_t offsets[16], nt = tensor_offsets(m, offsets), d = ob_model_num_params(m);
    float *x = calloc(d, sizeof *x);
    /* layer0.weight 2048, layer0.bias 64, layer1.weight 2048, layer1.bias 32,
     * output.weight 128, output.bias 4: d = 4324 floats. */
    MH_CHECK(h, nt == 6 && d == 4324, "the MLP's table changed: %zu tensors, %zu floats", nt, d);
    struct {
        size_t bytes, buckets;
    } cases[] = {
        {0, 1},            /* 0: one bucket */
        {4, 6},            /* one float: every tensor a bucket */
        {600, 3},          /* {output.*, layer1.bias} 164 f; layer1.weight; the rest */
        {8192, 2},         /* 2048 floats: output..layer1.weight 2212; layer0.* 2112 */
        {8800, 1},         /* 2200 f: output..layer1.weight 2212, then the remainder layer0.*
                            * (2112) is short and joins it */
        {9192, 1},         /* 2298 f: full only with tensor 0 */
        {4324 * 4, 1},     /* exactly the vector */
        {4324 * 4 - 4, 1}, /* just below: the last tensor still needed */
        {(size_t)1 << 30, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ob_optim_config cfg;
        ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
        cfg.bucket_bytes = cases[i].bytes;
        ob_optim *opt = NULL;
        ob_err err = {0};
        MH_CHECK(h, ob_optim_create(&opt, &cfg, comm, x, d, &err) == OB_OK, "create: %s", err.msg);
        if (!opt) continue;
        MH_CHECK(h, ob_optim_num_buckets(opt) == 1, "before the layout: one bucket");
        MH_CHECK(h, ob_optim_set_tensor_layout(opt, offsets, NULL, nt, &err) == OB_OK, "layout: %s",
                 err.msg);
        size_t nb = check_plan(h, opt, m, offsets, cases[i].bytes);
        MH_CHECK(h, nb == cases[i].buckets, "bucket_bytes %zu: %zu buckets, expected %zu",
                 cases[i].bytes, nb, cases[i].buckets);
        /* Once only, and offsets that do not fit are refused. */
        MH_CHECK(h, ob_optim_set_tensor_layout(opt, offsets, NULL, nt, &err) == OB_ERR_STATE,
                 "a second layout");
        ob_optim_destroy(opt);
    }
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
    ob_optim *opt = NULL;
    ob_optim_create(&opt, &cfg, comm, x, d, NULL);
    size_t bad1[] = {1, 10}, bad2[] = {0, 10, 10}, bad3[] = {0, 4324};
    ob_err err = {0};
    MH_CHECK(h, opt && ob_optim_set_tensor_layout(opt, bad1, NULL, 2, &err) == OB_ERR_INVALID_ARG,
             "first offset not 0");
    MH_CHECK(h, opt && ob_optim_set_tensor_layout(opt, bad2, NULL, 3, &err) == OB_ERR_INVALID_ARG,
             "repeated offset");
    MH_CHECK(h, opt && ob_optim_set_tensor_layout(opt, bad3, NULL, 2, &err) == OB_ERR_INVALID_ARG,
             "offset at d");
    cfg.bucket_bytes = ((size_t)1 << 30) + 1;
    MH_CHECK(h, ob_optim_config_validate(&cfg, &err) == OB_ERR_INVALID_ARG, "bucket_bytes > 1 GiB");
    ob_optim_destroy(opt);
    free(x);
    ob_model_destroy(m);
    ob_comm_destroy(comm);
}

/* The transformer's gradient parts (2 layers, d_model 32): its block tensors are stacked over
 * the layers, so each layer's slices are interleaved with the other's in the buffer. */
static ob_model *small_tf(void)
{
    ob_model_config mc;
    ob_model_config_default(&mc, OB_MODEL_TRANSFORMER);
    mc.n_layer = 2;
    mc.n_head = 2;
    mc.d_model = 32;
    mc.context = 16;
    mc.max_batch = 2;
    ob_model *m = NULL;
    return ob_model_create(&m, &mc, NULL) == OB_OK ? m : NULL;
}

/* The largest stage of parts [lo, hi). */
static size_t key_of(const ob_model *m, size_t lo, size_t hi)
{
    size_t key = 0;
    for (size_t t = lo; t < hi; t++) {
        size_t s = ob_model_grad_part_at(m, t)->stage;
        key = s > key ? s : key;
    }
    return key;
}

/* With the stages of the backward pass, the plan gives layer 1's large slices (qkvw, fcw,
 * fcprojw: at least half a bucket each) buckets of their own and exchanges them first, before
 * anything of layer 0 is final; the buckets still cover the buffer at part boundaries, the
 * exchange order is a permutation by completion stage, and without stages it is 0, 1, 2, ... */
static void plan_follows_the_backward(mpi_harness *h)
{
    ob_comm *comm = NULL;
    ob_model *m = small_tf();
    MH_CHECK(h, m && ob_comm_create_mpi(&comm, NULL) == OB_OK, "setup");
    if (!m || !comm) return;
    size_t n = ob_model_num_grad_parts(m), d = ob_model_num_params(m), L = 2;
    size_t *offsets = malloc(n * sizeof *offsets), *stages = malloc(n * sizeof *stages);
    float *x = calloc(d, sizeof *x);
    for (size_t i = 0; i < n; i++) {
        offsets[i] = ob_model_grad_part_at(m, i)->offset;
        stages[i] = ob_model_grad_part_at(m, i)->stage;
    }
    /* Parts: wte, wpe, then stacked tensor j (ln1w 0 ... fcprojw 10, fcprojb 11) of layer l at
     * 2 + j L + l. Layer 0's first part to be final: */
    size_t layer0 = SIZE_MAX;
    for (size_t j = 0; j < 12; j++)
        layer0 = stages[2 + j * L] < layer0 ? stages[2 + j * L] : layer0;
    for (int staged = 1; staged >= 0; staged--) {
        ob_optim_config cfg;
        ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
        cfg.bucket_bytes = 4096 * sizeof(float);
        ob_optim *opt = NULL;
        ob_err err = {0};
        MH_CHECK(h, ob_optim_create(&opt, &cfg, comm, x, d, &err) == OB_OK, "create: %s", err.msg);
        if (!opt) continue;
        MH_CHECK(h,
                 ob_optim_set_tensor_layout(opt, offsets, staged ? stages : NULL, n, &err) == OB_OK,
                 "layout: %s", err.msg);
        size_t nb = ob_optim_num_buckets(opt), prev = 0;
        unsigned char seen[64] = {0};
        MH_CHECK(h, nb > 3 && nb < 64, "%zu buckets", nb);
        check_cover(h, opt, offsets, n, d);
        int identity = 1;
        for (size_t i = 0; i < nb && nb < 64; i++) {
            size_t k = ob_optim_bucket_order(opt, i), tlo, thi;
            MH_CHECK(h, k < nb && !seen[k], "order[%zu] = %zu", i, k);
            if (k >= nb) break;
            seen[k] = 1;
            identity &= k == i;
            ob_optim_bucket(opt, k, NULL, NULL, &tlo, &thi);
            size_t key = staged ? key_of(m, tlo, thi) : n - 1 - tlo;
            MH_CHECK(h, key >= prev, "order[%zu] = bucket %zu complete at %zu, before %zu", i, k,
                     key, prev);
            prev = key;
            /* The first three: layer 1's qkvw, fcw and fcprojw, one each, before layer 0. */
            if (staged && i < 3) {
                MH_CHECK(h, thi == tlo + 1 && key < layer0,
                         "order[%zu]: bucket %zu of parts [%zu, %zu), complete at %zu (layer 0 "
                         "from %zu)",
                         i, k, tlo, thi, key, layer0);
                size_t j = (tlo - 2) / L;
                MH_CHECK(h, (tlo - 2) % L == 1 && (j == 2 || j == 8 || j == 10),
                         "order[%zu] is part %zu, not a large slice of layer 1", i, tlo);
            }
        }
        MH_CHECK(h, staged ? !identity : identity, "staged %d: order %s the index order", staged,
                 identity ? "is" : "is not");
        ob_optim_destroy(opt);
    }
    free(offsets), free(stages), free(x);
    ob_model_destroy(m);
    ob_comm_destroy(comm);
}

/* --- the bucketed exchange against an independent reference --------------------------------- */

/* Adam with bucket_bytes over the small MLP's tensors, three steps of per-rank random gradients,
 * against: per bucket (the whole vector when whole != 0) a ring allreduce of a copy, then the
 * Adam kernel. Bitwise. */
static void adam_against_reference(mpi_harness *h, size_t bucket_bytes, int whole)
{
    ob_comm *comm = NULL;
    ob_model *m = small_mlp();
    MH_CHECK(h, m && ob_comm_create_mpi(&comm, NULL) == OB_OK, "setup");
    if (!m || !comm) return;
    size_t offsets[16], nt = tensor_offsets(m, offsets), d = ob_model_num_params(m);
    float *x = malloc(d * sizeof *x), *xr = malloc(d * sizeof *x), *mr = calloc(d, sizeof *x);
    float *vr = calloc(d, sizeof *x), *g = malloc(d * sizeof *x), *gs = malloc(d * sizeof *x);
    ob_rng rng;
    ob_rng_seed(&rng, 7, 0);
    for (size_t i = 0; i < d; i++)
        x[i] = xr[i] = (float)ob_rng_normal(&rng);
    ob_rng_seed(&rng, 11, (uint64_t)ob_comm_rank(comm) + 1);

    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
    cfg.bucket_bytes = bucket_bytes;
    cfg.weight_decay = 0.01;
    ob_optim *opt = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_optim_create(&opt, &cfg, comm, x, d, &err) == OB_OK, "create: %s", err.msg);
    MH_CHECK(h, opt && ob_optim_set_tensor_layout(opt, offsets, NULL, nt, &err) == OB_OK, "layout");
    if (!opt) return;
    size_t nb = ob_optim_num_buckets(opt);
    MH_CHECK(h, whole ? nb == 1 : nb > 1, "%zu buckets", nb);
    int n = ob_comm_size(comm);
    for (long t = 1; t <= 3; t++) {
        for (size_t i = 0; i < d; i++)
            g[i] = (float)ob_rng_normal(&rng) * 0.1f;
        MH_CHECK(h, ob_optim_step(opt, g, 1e-3f, &err) == OB_OK, "step %ld: %s", t, err.msg);
        memcpy(gs, g, d * sizeof *g);
        if (whole) {
            ob_comm_allreduce_sum_f32(comm, gs, d, NULL);
        } else {
            for (size_t k = 0; k < nb; k++) {
                size_t lo, hi;
                ob_optim_bucket(opt, k, &lo, &hi, NULL, NULL);
                ob_comm_allreduce_sum_f32(comm, gs + lo, hi - lo, NULL);
            }
        }
        ob_adam_coeffs k;
        ob_adam_coeffs_init(&k, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay,
                            cfg.bias_correction, t, 1e-3f, n);
        ob_adam_update(xr, mr, vr, gs, d, &k);
    }
    ob_optim_state st;
    ob_optim_get_state(opt, &st);
    MH_CHECK(h, memcmp(x, xr, d * sizeof *x) == 0, "bucket_bytes %zu: parameters differ",
             bucket_bytes);
    MH_CHECK(h, memcmp(st.exp_avg, mr, d * sizeof *x) == 0, "m differs");
    MH_CHECK(h, memcmp(st.exp_avg_sq, vr, d * sizeof *x) == 0, "v differs");
    ob_optim_stats s;
    ob_optim_get_stats(opt, &s);
    MH_CHECK(h, s.buckets_exchanged == 3 * nb && s.buckets_early == 0, "%llu buckets, %llu early",
             (unsigned long long)s.buckets_exchanged, (unsigned long long)s.buckets_early);
    ob_optim_destroy(opt);
    free(x), free(xr), free(mr), free(vr), free(g), free(gs);
    ob_model_destroy(m);
    ob_comm_destroy(comm);
}

static void one_bucket_is_the_whole_vector_allreduce(mpi_harness *h)
{
    adam_against_reference(h, 4324 * 4, 1);
    adam_against_reference(h, 0, 1);
    adam_against_reference(h, (size_t)1 << 30, 1);
}

static void buckets_are_allreduces_per_range(mpi_harness *h)
{
    adam_against_reference(h, 4, 0);
    adam_against_reference(h, 600, 0);
}

/* --- overlap on against off, through the trainer ------------------------------------------ */

#define MLP_SPEC                                                                                   \
    "name: t\n"                                                                                    \
    "model: {type: mlp, hidden: [64, 48, 32]}\n"                                                   \
    "data: {type: synthetic_classification, n_train: 512, n_eval: 64, input_dim: 40, "             \
    "num_classes: 5}\n"                                                                            \
    "batch_size: 8\nseed: 5\nlog_interval: 100\neval: {interval: 0, max_examples: 16}\n"

#define TF_SPEC                                                                                    \
    "name: t\n"                                                                                    \
    "model: {type: transformer, layers: 2, heads: 2, d_model: 32, context: 16, "                   \
    "tied_output: %s}\n"                                                                           \
    "data: {type: synthetic_text, train_bytes: 4000, eval_bytes: 200}\n"                           \
    "batch_size: 2\nseed: 9\nlog_interval: 100\neval: {interval: 0, max_examples: 8}\n"

typedef struct outcome {
    size_t d;
    float *x, *m, *v, *we, *se;
    size_t D, C;
    ob_optim_stats stats;
    size_t buckets, segments;
    int overlap_active;
} outcome;

static float *dup_floats(const float *p, size_t n)
{
    if (!p || n == 0) return NULL;
    float *q = malloc(n * sizeof *q);
    if (q) memcpy(q, p, n * sizeof *q);
    return q;
}

static void outcome_free(outcome *o)
{
    free(o->x), free(o->m), free(o->v), free(o->we), free(o->se);
    memset(o, 0, sizeof *o);
}

/* Trains the spec text (YAML) plus `extra` lines and keeps the final state. */
static int train(mpi_harness *h, ob_comm *comm, const char *spec_text, const char *extra,
                 outcome *out)
{
    memset(out, 0, sizeof *out);
    char text[2048];
    snprintf(text, sizeof text, "%s%s", spec_text, extra);
    ob_jobspec spec;
    ob_err err = {0};
    ob_status st = ob_jobspec_parse(&spec, text, strlen(text), OB_SPEC_YAML, &err);
    MH_CHECK(h, st == OB_OK, "spec: %s", err.msg);
    if (st != OB_OK) return 0;
    ob_trainer *t = NULL;
    st = ob_trainer_create(&t, &spec, comm, &err);
    MH_CHECK(h, st == OB_OK, "trainer: %s", err.msg);
    if (st != OB_OK) return 0;
    ob_train_summary sum;
    st = ob_trainer_run(t, NULL, NULL, &sum, &err);
    MH_CHECK(h, st == OB_OK, "run: %s", err.msg);
    ob_optim *opt = ob_trainer_optim(t);
    ob_optim_state os;
    ob_optim_get_state(opt, &os);
    out->d = ob_trainer_num_params(t);
    out->x = dup_floats(ob_trainer_params(t), out->d);
    out->m = dup_floats(os.exp_avg, out->d);
    out->v = dup_floats(os.exp_avg_sq, out->d);
    out->D = os.padded_size;
    out->C = os.chunk_size;
    out->we = dup_floats(os.worker_error, os.padded_size);
    out->se = dup_floats(os.server_error, os.chunk_size);
    ob_optim_get_stats(opt, &out->stats);
    out->buckets = ob_optim_num_buckets(opt);
    out->segments = os.num_server_segments;
    out->overlap_active = ob_optim_overlap_active(opt);
    ob_trainer_destroy(t);
    return st == OB_OK;
}

static int same_floats(const float *a, const float *b, size_t n)
{
    if (!a || !b) return a == b;
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* Overlap off and on with the same buckets: the same bits, the same traffic; on, every bucket
 * of every fp32 step and every segment of every compression step (1-bit Adam: as many as the
 * buckets) was handed over during the backward pass. */
static void compare_overlap(mpi_harness *h, const char *what, const char *spec_text,
                            const char *optim_line, long steps, long fp32_steps, size_t min_buckets)
{
    ob_comm *comm = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&comm, NULL) == OB_OK, "comm");
    if (!comm) return;
    MH_CHECK(h, ob_comm_any_thread(comm), "MPI_THREAD_SERIALIZED was not provided");
    char off[512], on[512];
    snprintf(off, sizeof off, "steps: %ld\noptimizer: {%s, overlap: false}\n", steps, optim_line);
    snprintf(on, sizeof on, "steps: %ld\noptimizer: {%s, overlap: true}\n", steps, optim_line);
    outcome a = {0}, b = {0};
    int ok = train(h, comm, spec_text, off, &a) && train(h, comm, spec_text, on, &b);
    if (ok) {
        MH_CHECK(h, a.d == b.d && a.D == b.D && a.C == b.C, "%s: sizes differ", what);
        MH_CHECK(h, !a.overlap_active && b.overlap_active, "%s: overlap %d / %d", what,
                 a.overlap_active, b.overlap_active);
        MH_CHECK(h, a.buckets == b.buckets && a.buckets >= min_buckets,
                 "%s: %zu / %zu buckets, expected at least %zu", what, a.buckets, b.buckets,
                 min_buckets);
        MH_CHECK(h, same_floats(a.x, b.x, a.d), "%s: parameters differ", what);
        MH_CHECK(h, same_floats(a.m, b.m, a.d), "%s: m differs", what);
        MH_CHECK(h, same_floats(a.v, b.v, a.d), "%s: v differs", what);
        MH_CHECK(h, same_floats(a.we, b.we, a.D), "%s: worker error differs", what);
        MH_CHECK(h, same_floats(a.se, b.se, a.C), "%s: server error differs", what);
        MH_CHECK(h, a.stats.step == steps && b.stats.step == steps, "%s: steps", what);
        MH_CHECK(h, a.stats.freeze_step == b.stats.freeze_step, "%s: freeze at %ld / %ld", what,
                 a.stats.freeze_step, b.stats.freeze_step);
        int sends = ob_comm_size(comm) > 1;
        MH_CHECK(h, a.stats.bytes_sent == b.stats.bytes_sent && (a.stats.bytes_sent > 0) == sends,
                 "%s: bytes %llu / %llu", what, (unsigned long long)a.stats.bytes_sent,
                 (unsigned long long)b.stats.bytes_sent);
        MH_CHECK(h,
                 a.segments == b.segments &&
                     (a.D == 0 || (a.segments > 1 && a.segments <= a.buckets)),
                 "%s: %zu / %zu segments for %zu buckets", what, a.segments, b.segments, a.buckets);
        uint64_t expect =
            (uint64_t)fp32_steps * a.buckets + (uint64_t)(steps - fp32_steps) * a.segments;
        MH_CHECK(h, a.stats.buckets_exchanged == expect && b.stats.buckets_exchanged == expect,
                 "%s: %llu / %llu buckets exchanged, expected %llu", what,
                 (unsigned long long)a.stats.buckets_exchanged,
                 (unsigned long long)b.stats.buckets_exchanged, (unsigned long long)expect);
        MH_CHECK(h, a.stats.buckets_early == 0 && b.stats.buckets_early == expect,
                 "%s: %llu / %llu buckets and segments early, expected 0 / %llu", what,
                 (unsigned long long)a.stats.buckets_early,
                 (unsigned long long)b.stats.buckets_early, (unsigned long long)expect);
    }
    outcome_free(&a);
    outcome_free(&b);
    ob_comm_destroy(comm);
}

static void overlap_mlp_adam(mpi_harness *h)
{
    /* 40*64 + 64 | 64*48 + 48 | 48*32 + 32 | 32*5 + 5 floats: 2 KiB (512 floats) buckets give
     * {layer2, output}, {layer1}, {layer0}. */
    compare_overlap(h, "mlp adam", MLP_SPEC, "type: adam, bucket_mb: 0.002", 6, 6, 3);
}

static void overlap_mlp_onebit(mpi_harness *h)
{
    /* Warmup steps 1..4 exchange fp32 gradient buckets; 5..9 are compressed. */
    compare_overlap(h, "mlp onebit_adam", MLP_SPEC,
                    "type: onebit_adam, freeze_step: 4, block_size: 64, bucket_mb: 0.002", 9, 4, 3);
}

static void overlap_mlp_onebit_precondition(mpi_harness *h)
{
    /* The compression phase exchanging m / (sqrt(v) + eps) instead of m. */
    compare_overlap(h, "mlp onebit_adam precondition", MLP_SPEC,
                    "type: onebit_adam, freeze_step: 4, block_size: 64, bucket_mb: 0.002, "
                    "precondition: true",
                    9, 4, 3);
}

static void overlap_mlp_onebit_fp16(mpi_harness *h)
{
    /* The same with the warmup's gradients exchanged in fp16. */
    compare_overlap(h, "mlp onebit_adam fp16", MLP_SPEC,
                    "type: onebit_adam, freeze_step: 4, block_size: 64, bucket_mb: 0.002, "
                    "gradient_exchange: fp16",
                    9, 4, 3);
}

static void overlap_mlp_onebit_refresh(mpi_harness *h)
{
    /* Variance refreshes exchange fp32 gradient buckets inside the compression phase: warmup
     * 1..2, compressed 3..4, refresh 5..6 (frozen at 6), compressed 7..12, refresh 13..14. */
    compare_overlap(h, "mlp onebit_adam refresh", MLP_SPEC,
                    "type: onebit_adam, freeze_step: 2, refresh_steps: 2, block_size: 64, "
                    "bucket_mb: 0.002, precondition: true",
                    14, 6, 3);
}

static void overlap_transformer_adam(mpi_harness *h)
{
    char spec[1024];
    snprintf(spec, sizeof spec, TF_SPEC, "true");
    compare_overlap(h, "transformer (tied) adam", spec, "type: adam, bucket_mb: 0.01", 4, 4, 3);
    snprintf(spec, sizeof spec, TF_SPEC, "false");
    compare_overlap(h, "transformer (untied) adam", spec, "type: adam, bucket_mb: 0.01", 4, 4, 3);
}

static void overlap_transformer_onebit(mpi_harness *h)
{
    char spec[1024];
    snprintf(spec, sizeof spec, TF_SPEC, "true");
    compare_overlap(h, "transformer onebit_adam", spec,
                    "type: onebit_adam, freeze_step: 3, block_size: 64, bucket_mb: 0.01", 6, 3, 3);
}

/* --- the logged loss ------------------------------------------------------------------------ */

#define LOSS_LOG_MAX 16

typedef struct loss_log {
    double loss[LOSS_LOG_MAX];
    int n;
} loss_log;

static void on_event(const ob_train_event *ev, void *user)
{
    loss_log *l = user;
    if (ev->kind == OB_EVENT_STEP && l->n < LOSS_LOG_MAX) l->loss[l->n++] = ev->loss;
}

/* Trains MLP_SPEC for 6 Adam steps, logging every log_interval steps: the events' losses and
 * the allreduces the run made. */
static void logged_run(mpi_harness *h, ob_comm *comm, long log_interval, loss_log *log,
                       uint64_t *allreduces)
{
    char text[1024];
    snprintf(text, sizeof text, "%ssteps: 6\noptimizer: {type: adam, bucket_mb: 0.002}\n",
             MLP_SPEC);
    ob_jobspec spec;
    ob_err err = {0};
    memset(log, 0, sizeof *log);
    MH_CHECK(h, ob_jobspec_parse(&spec, text, strlen(text), OB_SPEC_YAML, &err) == OB_OK,
             "spec: %s", err.msg);
    spec.log_interval = log_interval;
    ob_comm_counters c0, c1;
    ob_comm_get_counters(comm, &c0);
    ob_trainer *t = NULL;
    ob_status st = ob_trainer_create(&t, &spec, comm, &err);
    MH_CHECK(h, st == OB_OK, "trainer: %s", err.msg);
    ob_train_summary sum;
    if (st == OB_OK) st = ob_trainer_run(t, on_event, log, &sum, &err);
    MH_CHECK(h, st == OB_OK, "run: %s", err.msg);
    ob_trainer_destroy(t);
    ob_comm_get_counters(comm, &c1);
    *allreduces = c1.op_calls[OB_COMM_ALLREDUCE] - c0.op_calls[OB_COMM_ALLREDUCE];
}

/* The loss of a step event is the mean over the ranks from the step's control reduction, not a
 * collective of its own: logging every step makes no more allreduces than logging once (on
 * shaped links an allreduce after the step waited for the gradients' last bytes to drain, some
 * 50 ms of a 2-second step at 50 Mbit/s). Every rank logs the same value, and the average of
 * six logged steps is the loss logged once for the six. */
static void logging_adds_no_collective(mpi_harness *h)
{
    ob_comm *comm = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&comm, NULL) == OB_OK, "comm");
    if (!comm) return;
    loss_log every, once; /* logged_run clears them */
    uint64_t calls_every = 0, calls_once = 0;
    logged_run(h, comm, 1, &every, &calls_every);
    logged_run(h, comm, 6, &once, &calls_once);
    MH_CHECK(h, every.n == 6 && once.n == 1, "%d and %d step events, expected 6 and 1", every.n,
             once.n);
    MH_CHECK(h, calls_every == calls_once && calls_once > 0,
             "%llu allreduces logging every step, %llu logging once",
             (unsigned long long)calls_every, (unsigned long long)calls_once);
    double sum = 0.0;
    for (int i = 0; i < every.n; i++) {
        double lo = every.loss[i], hi = every.loss[i];
        MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MH_CHECK(h, lo == hi && lo > 0.0, "step %d: logged loss %.9g to %.9g over the ranks", i + 1,
                 lo, hi);
        sum += every.loss[i];
    }
    if (every.n == 6 && once.n == 1)
        MH_CHECK(h, sum / 6.0 == once.loss[0], "six logged steps average %.12g, logged once %.12g",
                 sum / 6.0, once.loss[0]);
    ob_comm_destroy(comm);
}

/* --- a warm start's refit ------------------------------------------------------------------ */

/* Three warmup steps of onebit_adam over MPI, warm-started with v (NULL: none). */
static void refit_run(mpi_harness *h, ob_comm *comm, const float *v, size_t d, float *x,
                      uint64_t bytes[3], ob_warm_state *warm)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.freeze_step = 100;
    ob_rng rng;
    ob_rng_seed(&rng, 7, 0);
    for (size_t i = 0; i < d; i++)
        x[i] = (float)ob_rng_normal(&rng);
    ob_rng_seed(&rng, 11, (uint64_t)ob_comm_rank(comm) + 1);
    ob_optim *opt = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_optim_create(&opt, &cfg, comm, x, d, &err) == OB_OK, "create: %s", err.msg);
    if (!opt) return;
    if (v)
        MH_CHECK(h, ob_optim_warm_start(opt, v, 1.0, 1.0, 10, 0.0, &err) == OB_OK, "%s", err.msg);
    float *g = malloc(d * sizeof *g);
    for (int t = 0; t < 3 && g; t++) {
        for (size_t i = 0; i < d; i++)
            g[i] = (float)ob_rng_normal(&rng) * 0.1f;
        MH_CHECK(h, ob_optim_step(opt, g, 1e-3f, &err) == OB_OK, "step: %s", err.msg);
        ob_optim_stats s;
        ob_optim_get_stats(opt, &s);
        bytes[t] = s.bytes_last_step;
        *warm = s.warm_start;
    }
    free(g);
    ob_optim_destroy(opt);
}

/* The refit's gradients cross in fp8 (refit_exchange) from its second step; its first, on
 * which the check may refuse the borrowed v, in fp32: a refused warm start is then the job
 * from scratch, bit for bit and byte for byte. */
static void warm_refit_exchange(mpi_harness *h)
{
    ob_comm *comm = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&comm, NULL) == OB_OK, "setup");
    if (!comm) return;
    size_t d = 4324;
    float *x0 = malloc(d * sizeof *x0), *x1 = malloc(d * sizeof *x0), *x2 = malloc(d * sizeof *x0);
    float *zero = calloc(d, sizeof *zero), *big = malloc(d * sizeof *big);
    for (size_t i = 0; i < d && big; i++)
        big[i] = 1.0f;
    uint64_t b0[3], b1[3], b2[3];
    ob_warm_state w0 = OB_WARM_NONE, w1 = OB_WARM_NONE, w2 = OB_WARM_NONE;
    refit_run(h, comm, NULL, d, x0, b0, &w0);
    refit_run(h, comm, zero, d, x1, b1, &w1); /* every coordinate off: refused */
    refit_run(h, comm, big, d, x2, b2, &w2);  /* fits: re-estimated */
    MH_CHECK(h, w0 == OB_WARM_NONE && w1 == OB_WARM_REFUSED && w2 == OB_WARM_REFIT,
             "warm states %d %d %d", (int)w0, (int)w1, (int)w2);
    MH_CHECK(h, memcmp(x0, x1, d * sizeof *x0) == 0, "refused: parameters differ from scratch");
    MH_CHECK(h, memcmp(b0, b1, sizeof b0) == 0, "refused: traffic differs from scratch");
    MH_CHECK(h, b2[0] == b0[0], "refit step 1: %llu bytes, fp32 %llu", (unsigned long long)b2[0],
             (unsigned long long)b0[0]);
    if (ob_comm_size(comm) > 1)
        MH_CHECK(h, b2[1] * 10 < b0[1] * 3 && b2[2] == b2[1],
                 "refit steps 2-3: %llu bytes, fp32 %llu", (unsigned long long)b2[1],
                 (unsigned long long)b0[1]);
    free(x0), free(x1), free(x2), free(zero), free(big);
    ob_comm_destroy(comm);
}

int main(int argc, char **argv)
{
    mpi_harness h;
    mpi_harness_init(&h, &argc, &argv);
    MH_RUN(&h, plan_layouts);
    MH_RUN(&h, plan_follows_the_backward);
    MH_RUN(&h, one_bucket_is_the_whole_vector_allreduce);
    MH_RUN(&h, buckets_are_allreduces_per_range);
    MH_RUN(&h, overlap_mlp_adam);
    MH_RUN(&h, overlap_mlp_onebit);
    MH_RUN(&h, overlap_mlp_onebit_precondition);
    MH_RUN(&h, overlap_mlp_onebit_fp16);
    MH_RUN(&h, overlap_mlp_onebit_refresh);
    MH_RUN(&h, overlap_transformer_adam);
    MH_RUN(&h, overlap_transformer_onebit);
    MH_RUN(&h, warm_refit_exchange);
    MH_RUN(&h, logging_adds_no_collective);
    return mpi_harness_finish(&h);
}
