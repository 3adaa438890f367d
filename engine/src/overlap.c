/* Buckets of the exchanges and the communication thread that overlaps them with the backward
 * pass: the bucket plans, the fp32 exchange of one bucket, and the handoff (see overlap.h for
 * the contract). */
#include "overlap.h"
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* --- the plan ------------------------------------------------------------------------------- */

void ob__buckets_free(ob__buckets *p)
{
    if (!p) return;
    free(p->b);
    free(p->tensor_bucket);
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

/* What both plans start with: the tensor table (offsets NULL: one tensor, the whole vector;
 * *offsets and *num_tensors are replaced then) checked against d, and arrays for up to
 * max_buckets buckets. */
static ob_status plan_start(ob__buckets *out, size_t d, const size_t **offsets, size_t *num_tensors,
                            size_t max_buckets, ob_err *err)
{
    static const size_t whole = 0;
    memset(out, 0, sizeof *out);
    if (!*offsets) {
        *offsets = &whole;
        *num_tensors = 1;
    }
    if (d == 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "bucket plan: d = 0");
    ob_status st = check_offsets(d, *offsets, *num_tensors, err);
    if (st != OB_OK) return st;
    out->d = d;
    out->num_tensors = *num_tensors;
    out->b = calloc(max_buckets, sizeof *out->b);
    out->pending = calloc(max_buckets, sizeof *out->pending);
    out->tensor_bucket = calloc(*num_tensors, sizeof *out->tensor_bucket);
    out->is_final = calloc(*num_tensors, 1);
    if (!out->b || !out->pending || !out->tensor_bucket || !out->is_final)
        return OB_ERR(err, OB_ERR_NOMEM, "bucket plan of %zu tensors, %zu buckets", *num_tensors,
                      max_buckets);
    return OB_OK;
}

/* The plan holds its n buckets: each tensor learns its bucket. */
static void plan_finish(ob__buckets *out, size_t n)
{
    out->n = n;
    for (size_t k = 0; k < n; k++) {
        for (size_t t = out->b[k].tensor_lo; t < out->b[k].tensor_hi; t++)
            out->tensor_bucket[t] = k;
    }
}

ob_status ob__buckets_plan(ob__buckets *out, size_t d, const size_t *offsets, size_t num_tensors,
                           size_t bucket_bytes, ob_err *err)
{
    /* At most one bucket per tensor. */
    ob_status st = plan_start(out, d, &offsets, &num_tensors, num_tensors ? num_tensors : 1, err);
    if (st != OB_OK) return st;

    /* 0 bytes: one bucket; a request that rounds above d floats also gives one. */
    size_t min_floats = bucket_bytes == 0 ? d : (bucket_bytes + sizeof(float) - 1) / sizeof(float);
    size_t n = 0, hi = d, t_hi = num_tensors;
    for (size_t t = num_tensors; t-- > 0;) {
        size_t lo = offsets[t];
        if (hi - lo < min_floats && t > 0) continue; /* not full yet: take the next tensor too */
        out->b[n++] = (ob__bucket){lo, hi, t, t_hi};
        hi = lo;
        t_hi = t;
    }
    /* The walk closed the last bucket at offset 0; if it came out short, join it to the one
     * before (which ends where it starts), so that every bucket holds at least min_floats. */
    if (n > 1 && out->b[n - 1].hi - out->b[n - 1].lo < min_floats) {
        out->b[n - 2].lo = out->b[n - 1].lo;
        out->b[n - 2].tensor_lo = out->b[n - 1].tensor_lo;
        n--;
    }
    plan_finish(out, n);
    return OB_OK;
}

ob_status ob__buckets_segments(ob__buckets *out, size_t d, const size_t *offsets,
                               size_t num_tensors, const size_t *bounds, size_t nseg, ob_err *err)
{
    if (d == 0 || nseg == 0 || bounds[0] != 0 || bounds[nseg] < d || bounds[nseg - 1] >= d) {
        memset(out, 0, sizeof *out);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "segment plan: %zu segments for d = %zu", nseg, d);
    }
    ob_status st = plan_start(out, d, &offsets, &num_tensors, nseg, err);
    if (st != OB_OK) return st;
    /* Bucket k is segment nseg-1-k; it holds the tensors whose last element lies in it. */
    size_t t_hi = num_tensors;
    for (size_t k = 0; k < nseg; k++) {
        size_t s = nseg - 1 - k, lo = bounds[s], hi = bounds[s + 1] < d ? bounds[s + 1] : d;
        if (lo >= hi)
            return OB_ERR(err, OB_ERR_INVALID_ARG, "segment plan: segment %zu is [%zu, %zu)", s, lo,
                          hi);
        size_t t_lo = t_hi; /* tensor t ends at offsets[t + 1] (d for the last) */
        while (t_lo > 0 && (t_lo < num_tensors ? offsets[t_lo] : d) > lo)
            t_lo--;
        out->b[k] = (ob__bucket){lo, hi, t_lo, t_hi};
        t_hi = t_lo;
    }
    plan_finish(out, nseg);
    return OB_OK;
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
    for (size_t k = 0; k < p->n; k++) {
        ob_status st = ob__bucket_exchange(comm, f16, dev, stream, &p->b[k], src, dst, err);
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
    size_t published; /* buckets 0 .. published-1 are handed to the thread */
    size_t exchanged; /* buckets 0 .. exchanged-1 are done (or skipped after a failure) */
    ob_status failed; /* first failure of this step */
    ob_err fail_err;
    int stop;

    /* The main thread's alone: */
    size_t complete; /* buckets 0 .. complete-1 have every tensor final */
};

static void *comm_main(void *arg)
{
    ob__overlap *ov = arg;
    pthread_mutex_lock(&ov->mu);
    for (;;) {
        while (!ov->stop && ov->exchanged == ov->published)
            pthread_cond_wait(&ov->work, &ov->mu);
        if (ov->stop) break;
        size_t k = ov->exchanged;
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

/* Hands buckets complete .. up to the first incomplete one to the thread. */
static void publish(ob__overlap *ov)
{
    const ob__buckets *p = ov->plan;
    size_t before = ov->complete;
    while (ov->complete < p->n && p->pending[ov->complete] == 0)
        ov->complete++;
    if (ov->complete == before) return;
    pthread_mutex_lock(&ov->mu);
    ov->published = ov->complete;
    pthread_cond_signal(&ov->work);
    pthread_mutex_unlock(&ov->mu);
}

void ob__overlap_tensor_final(ob__overlap *ov, size_t t)
{
    ob__buckets *p = ov ? ov->plan : NULL;
    if (!p || t >= p->num_tensors || p->is_final[t]) return;
    p->is_final[t] = 1;
    p->pending[p->tensor_bucket[t]]--;
    publish(ov);
}

ob_status ob__overlap_finish(ob__overlap *ov, size_t *early, ob_err *err)
{
    ob__buckets *p = ov->plan;
    if (!p) return OB_ERR(err, OB_ERR_STATE, "overlap: not armed");
    if (early) *early = ov->complete;
    for (size_t t = 0; t < p->num_tensors; t++)
        ob__overlap_tensor_final(ov, t);
    pthread_mutex_lock(&ov->mu);
    while (ov->exchanged < p->n)
        pthread_cond_wait(&ov->done, &ov->mu);
    ob_status st = ov->failed;
    if (st != OB_OK && err) *err = ov->fail_err;
    ov->plan = NULL;
    pthread_mutex_unlock(&ov->mu);
    return st;
}
