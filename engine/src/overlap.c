/* Buckets of the exchanges and the communication thread that overlaps them with the backward
 * pass: the bucket plans, the fp32 exchange of one bucket, and the handoff (see overlap.h for
 * the contract). */
#include "overlap.h"
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* --- the plan ------------------------------------------------------------------------------- */

void ob__buckets_free(ob__buckets *p)
{
    if (!p) return;
    free(p->b);
    free(p->key);
    free(p->order);
    free(p->tensor_first);
    free(p->tensor_last);
    free(p->pending);
    free(p->is_final);
    memset(p, 0, sizeof *p);
}

static ob_status check_offsets(size_t d, const size_t *offsets, size_t n, ob_err *err)
{
    if (n == 0 || offsets[0] != 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "bucket plan: the first tensor must start at 0");
    for (size_t i = 1; i < n; i++) {
        if (offsets[i] <= offsets[i - 1] || offsets[i] >= d)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "bucket plan: tensor %zu starts at %zu (previous %zu, d = %zu): offsets "
                          "must ascend below d",
                          i, offsets[i], offsets[i - 1], d);
    }
    return OB_OK;
}

/* The stage of tensor t: the caller's, or (stages NULL) the order of a backward pass that
 * finishes the tensors from the last to the first. */
static size_t stage_of(const size_t *stages, size_t num_tensors, size_t t)
{
    return stages ? stages[t] : num_tensors - 1 - t;
}

/* Where tensor t ends: where the next starts, d for the last. */
static size_t tensor_end(const size_t *offsets, size_t num_tensors, size_t d, size_t t)
{
    return t + 1 < num_tensors ? offsets[t + 1] : d;
}

/* What both plans start with: the tensor table (offsets NULL: one tensor, the whole vector;
 * *offsets, *stages and *num_tensors are replaced then) checked against d, and arrays for up to
 * max_buckets buckets. */
static ob_status plan_start(ob__buckets *out, size_t d, const size_t **offsets,
                            const size_t **stages, size_t *num_tensors, size_t max_buckets,
                            ob_err *err)
{
    static const size_t whole = 0;
    memset(out, 0, sizeof *out);
    if (!*offsets) {
        *offsets = &whole;
        *stages = NULL;
        *num_tensors = 1;
    }
    if (d == 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "bucket plan: d = 0");
    ob_status st = check_offsets(d, *offsets, *num_tensors, err);
    if (st != OB_OK) return st;
    out->d = d;
    out->num_tensors = *num_tensors;
    out->b = calloc(max_buckets, sizeof *out->b);
    out->key = calloc(max_buckets, sizeof *out->key);
    out->order = calloc(max_buckets, sizeof *out->order);
    out->pending = calloc(max_buckets, sizeof *out->pending);
    out->tensor_first = calloc(*num_tensors, sizeof *out->tensor_first);
    out->tensor_last = calloc(*num_tensors, sizeof *out->tensor_last);
    out->is_final = calloc(*num_tensors, 1);
    if (!out->b || !out->key || !out->order || !out->pending || !out->tensor_first ||
        !out->tensor_last || !out->is_final)
        return OB_ERR(err, OB_ERR_NOMEM, "bucket plan of %zu tensors, %zu buckets", *num_tensors,
                      max_buckets);
    return OB_OK;
}

/* Exchange order: by the stage at which a bucket is complete, ties by index (so it is the same
 * on every rank, and 0 .. n-1 for the default stages). */
typedef struct bucket_rank {
    size_t key, k;
} bucket_rank;

static int by_rank(const void *a, const void *b)
{
    const bucket_rank *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

/* The plan holds its n buckets: each tensor learns the buckets it overlaps (a contiguous range
 * of indices), each bucket the stage at which it is complete, and the exchange order. */
static ob_status plan_finish(ob__buckets *out, size_t n, const size_t *stages, ob_err *err)
{
    out->n = n;
    for (size_t t = 0; t < out->num_tensors; t++)
        out->tensor_first[t] = SIZE_MAX;
    for (size_t k = 0; k < n; k++) {
        size_t key = 0;
        for (size_t t = out->b[k].tensor_lo; t < out->b[k].tensor_hi; t++) {
            size_t s = stage_of(stages, out->num_tensors, t);
            key = s > key ? s : key;
            if (out->tensor_first[t] == SIZE_MAX) out->tensor_first[t] = k;
            out->tensor_last[t] = k;
        }
        out->key[k] = key;
    }
    bucket_rank *r = malloc(n * sizeof *r);
    if (!r) return OB_ERR(err, OB_ERR_NOMEM, "bucket plan: order of %zu buckets", n);
    for (size_t k = 0; k < n; k++)
        r[k] = (bucket_rank){out->key[k], k};
    qsort(r, n, sizeof *r, by_rank);
    for (size_t i = 0; i < n; i++)
        out->order[i] = r[i].k;
    free(r);
    return OB_OK;
}

ob_status ob__buckets_plan(ob__buckets *out, size_t d, const size_t *offsets, const size_t *stages,
                           size_t num_tensors, size_t bucket_bytes, ob_err *err)
{
    /* At most one bucket per tensor. */
    ob_status st =
        plan_start(out, d, &offsets, &stages, &num_tensors, num_tensors ? num_tensors : 1, err);
    if (st != OB_OK) return st;

    /* 0 bytes: one bucket; a request that rounds above d floats also gives one. */
    size_t min_floats = bucket_bytes == 0 ? d : (bucket_bytes + sizeof(float) - 1) / sizeof(float);
    size_t half = min_floats / 2 + min_floats % 2;
    /* The open bucket holds tensors [t + 1, t_hi), floats [offsets[t + 1], hi), and is complete
     * at stage `late`. */
    size_t n = 0, hi = d, t_hi = num_tensors, late = 0;
    for (size_t t = num_tensors; t-- > 0;) {
        size_t end = tensor_end(offsets, num_tensors, d, t), size = end - offsets[t];
        size_t s = stage_of(stages, num_tensors, t);
        if (t_hi > t + 1) {
            size_t have = hi - end;
            int cut = have >= min_floats ||
                      /* a large tensor finished before the open bucket's last one */
                      (s < late && size >= half) ||
                      /* a large tensor finished well after a large open bucket: other
                       * tensors become final in between */
                      (s > late + 1 && have >= half && size >= half);
            if (cut) {
                out->b[n++] = (ob__bucket){end, hi, t + 1, t_hi};
                hi = end;
                t_hi = t + 1;
            }
        }
        late = t_hi == t + 1 ? s : (s > late ? s : late);
    }
    out->b[n++] = (ob__bucket){0, hi, 0, t_hi};
    /* The walk closed the last bucket at offset 0; if it came out short, join it to the one
     * before (which ends where it starts), so that every bucket holds at least min_floats. */
    if (n > 1 && out->b[n - 1].hi - out->b[n - 1].lo < min_floats) {
        out->b[n - 2].lo = out->b[n - 1].lo;
        out->b[n - 2].tensor_lo = out->b[n - 1].tensor_lo;
        n--;
    }
    return plan_finish(out, n, stages, err);
}

ob_status ob__buckets_segments(ob__buckets *out, size_t d, const size_t *offsets,
                               const size_t *stages, size_t num_tensors, const size_t *bounds,
                               size_t nseg, ob_err *err)
{
    if (d == 0 || nseg == 0 || bounds[0] != 0 || bounds[nseg] < d || bounds[nseg - 1] >= d) {
        memset(out, 0, sizeof *out);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "segment plan: %zu segments for d = %zu", nseg, d);
    }
    ob_status st = plan_start(out, d, &offsets, &stages, &num_tensors, nseg, err);
    if (st != OB_OK) return st;
    /* Bucket k is segment nseg-1-k; it holds every tensor that overlaps it. */
    size_t t_hi = num_tensors; /* tensors at or above t_hi lie wholly above the segment */
    for (size_t k = 0; k < nseg; k++) {
        size_t s = nseg - 1 - k, lo = bounds[s], hi = bounds[s + 1] < d ? bounds[s + 1] : d;
        if (lo >= hi)
            return OB_ERR(err, OB_ERR_INVALID_ARG, "segment plan: segment %zu is [%zu, %zu)", s, lo,
                          hi);
        while (t_hi > 0 && offsets[t_hi - 1] >= hi)
            t_hi--;
        size_t t_lo = t_hi; /* the first tensor that ends above lo */
        while (t_lo > 0 && tensor_end(offsets, num_tensors, d, t_lo - 1) > lo)
            t_lo--;
        out->b[k] = (ob__bucket){lo, hi, t_lo, t_hi};
    }
    return plan_finish(out, nseg, stages, err);
}

/* --- the exchange --------------------------------------------------------------------------- */

ob_status ob__bucket_exchange(ob_comm *comm, ob_f16sum *f16, int dev, void *stream,
                              const ob__bucket *b, const float *src, float *dst, ob_err *err)
{
    size_t count = b->hi - b->lo;
    ob_status st;
    if (f16) {
        st = ob_f16sum_run(f16, src + b->lo, dst + b->lo, count, err);
    } else {
        st = ob__mem_copy(dev, dst + b->lo, src + b->lo, count * sizeof(float), stream, err);
        if (st == OB_OK) st = ob_comm_allreduce_sum_f32(comm, dst + b->lo, count, err);
    }
    if (st != OB_OK)
        return OB_WRAP(err, st, "bucket [%zu, %zu) of %zu floats", b->lo, b->hi, count);
    return OB_OK;
}

ob_status ob__sum_job_run(void *job, size_t k, const ob__bucket *b, ob_err *err)
{
    (void)k;
    const ob__sum_job *j = job;
    return ob__bucket_exchange(j->comm, j->f16, 0, NULL, b, j->src, j->dst, err);
}

ob_status ob__buckets_exchange_all(ob_comm *comm, ob_f16sum *f16, int dev, void *stream,
                                   const ob__buckets *p, const float *src, float *dst, ob_err *err)
{
    for (size_t i = 0; i < p->n; i++) {
        ob_status st =
            ob__bucket_exchange(comm, f16, dev, stream, &p->b[p->order[i]], src, dst, err);
        if (st != OB_OK) return st;
    }
    return OB_OK;
}

/* --- the communication thread ------------------------------------------------------------- */

struct ob__overlap {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work; /* published grew, or stop */
    pthread_cond_t done; /* exchanged grew */

    /* Under mu: */
    ob__buckets *plan; /* the armed step's plan, NULL when not armed */
    ob__bucket_fn fn;  /* the armed step's work per bucket, and its context */
    void *ctx;
    size_t published; /* buckets order[0 .. published) are handed to the thread */
    size_t exchanged; /* buckets order[0 .. exchanged) are done (or skipped after a failure) */
    ob_status failed; /* first failure of this step */
    ob_err fail_err;
    int stop;

    /* The main thread's alone: */
    size_t complete; /* buckets order[0 .. complete) have every tensor final */
    int yields;      /* the most sched_yield calls at one tensor boundary (overlap.h) */
};

static void *comm_main(void *arg)
{
    ob__overlap *ov = arg;
    pthread_mutex_lock(&ov->mu);
    for (;;) {
        while (!ov->stop && ov->exchanged == ov->published)
            pthread_cond_wait(&ov->work, &ov->mu);
        if (ov->stop) break;
        size_t k = ov->plan->order[ov->exchanged];
        const ob__bucket b = ov->plan->b[k];
        ob__bucket_fn fn = ov->fn;
        void *ctx = ov->ctx;
        int skip = ov->failed != OB_OK;
        pthread_mutex_unlock(&ov->mu);

        ob_err e = {0};
        ob_status st = skip ? OB_OK : fn(ctx, k, &b, &e);

        pthread_mutex_lock(&ov->mu);
        if (st != OB_OK && ov->failed == OB_OK) {
            ov->failed = st;
            ov->fail_err = e;
        }
        ov->exchanged++;
        pthread_cond_signal(&ov->done);
    }
    pthread_mutex_unlock(&ov->mu);
    return NULL;
}

ob_status ob__overlap_create(ob__overlap **out, ob_err *err)
{
    *out = NULL;
    ob__overlap *ov = calloc(1, sizeof *ov);
    if (!ov) return OB_ERR(err, OB_ERR_NOMEM, "overlap");
    if (pthread_mutex_init(&ov->mu, NULL) != 0) {
        free(ov);
        return OB_ERR(err, OB_ERR_NOMEM, "overlap: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&ov->work, NULL) != 0) goto fail_work;
    if (pthread_cond_init(&ov->done, NULL) != 0) goto fail_done;
    if (pthread_create(&ov->thread, NULL, comm_main, ov) != 0) goto fail_thread;
    ov->yields = OB__OVERLAP_YIELDS;
    const char *v = getenv("ONEBIT_OVERLAP_YIELDS");
    if (v && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end == '\0' && n >= 0 && n <= 1000) ov->yields = (int)n;
    }
    *out = ov;
    return OB_OK;
fail_thread:
    pthread_cond_destroy(&ov->done);
fail_done:
    pthread_cond_destroy(&ov->work);
fail_work:
    pthread_mutex_destroy(&ov->mu);
    free(ov);
    return OB_ERR(err, OB_ERR_NOMEM, "overlap: the communication thread could not be started");
}

void ob__overlap_destroy(ob__overlap *ov)
{
    if (!ov) return;
    pthread_mutex_lock(&ov->mu);
    ov->stop = 1;
    pthread_cond_signal(&ov->work);
    pthread_mutex_unlock(&ov->mu);
    pthread_join(ov->thread, NULL);
    pthread_cond_destroy(&ov->done);
    pthread_cond_destroy(&ov->work);
    pthread_mutex_destroy(&ov->mu);
    free(ov);
}

void ob__overlap_begin(ob__overlap *ov, ob__buckets *p, ob__bucket_fn fn, void *ctx)
{
    for (size_t k = 0; k < p->n; k++)
        p->pending[k] = p->b[k].tensor_hi - p->b[k].tensor_lo;
    memset(p->is_final, 0, p->num_tensors);
    ov->complete = 0;
    pthread_mutex_lock(&ov->mu);
    ov->plan = p;
    ov->fn = fn;
    ov->ctx = ctx;
    ov->published = ov->exchanged = 0;
    ov->failed = OB_OK;
    pthread_mutex_unlock(&ov->mu);
}

int ob__overlap_armed(const ob__overlap *ov)
{
    /* plan is written only by the main thread, the only caller. */
    return ov && ov->plan != NULL;
}

/* Hands the buckets of the exchange order from `complete` up to the first incomplete one to
 * the thread. */
static void publish(ob__overlap *ov)
{
    const ob__buckets *p = ov->plan;
    size_t before = ov->complete;
    while (ov->complete < p->n && p->pending[p->order[ov->complete]] == 0)
        ov->complete++;
    if (ov->complete == before) return;
    pthread_mutex_lock(&ov->mu);
    ov->published = ov->complete;
    pthread_cond_signal(&ov->work);
    pthread_mutex_unlock(&ov->mu);
}

/* Whether the thread has buckets handed to it that it has not finished. */
static int in_flight(ob__overlap *ov)
{
    pthread_mutex_lock(&ov->mu);
    int busy = ov->exchanged < ov->published;
    pthread_mutex_unlock(&ov->mu);
    return busy;
}

/* Marks tensor t final; returns 0 when it already was (or is out of range). */
static int mark_final(ob__overlap *ov, size_t t)
{
    ob__buckets *p = ov->plan;
    if (t >= p->num_tensors || p->is_final[t]) return 0;
    p->is_final[t] = 1;
    for (size_t k = p->tensor_first[t]; k <= p->tensor_last[t]; k++)
        p->pending[k]--;
    publish(ov);
    return 1;
}

void ob__overlap_tensor_final(ob__overlap *ov, size_t t)
{
    if (!ov || !ov->plan || !mark_final(ov, t)) return;
    for (int i = 0; i < ov->yields && in_flight(ov); i++)
        sched_yield();
}

ob_status ob__overlap_finish(ob__overlap *ov, size_t *early, ob_err *err)
{
    ob__buckets *p = ov->plan;
    if (!p) return OB_ERR(err, OB_ERR_STATE, "overlap: not armed");
    if (early) *early = ov->complete;
    for (size_t t = 0; t < p->num_tensors; t++)
        mark_final(ov, t);
    pthread_mutex_lock(&ov->mu);
    while (ov->exchanged < p->n)
        pthread_cond_wait(&ov->done, &ov->mu);
    ob_status st = ov->failed;
    if (st != OB_OK && err) *err = ov->fail_err;
    ov->plan = NULL;
    pthread_mutex_unlock(&ov->mu);
    return st;
}
