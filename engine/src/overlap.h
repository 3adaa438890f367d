/* Buckets of the optimizer's exchanges, and their overlap with the backward pass (private to
 * the optimizer).
 *
 * Tensors and stages. The flat gradient of d floats is a table of contiguous tensors (the
 * optimizer's tensor layout: the model's gradient parts), each with the stage at which the
 * backward pass finishes it (stages may repeat; by default the backward pass finishes the
 * tensors from the last to the first).
 *
 * Buckets. The gradient is cut into contiguous ranges at tensor boundaries. The plan walks the
 * tensors from the last to the first and closes a bucket as soon as it holds at least
 * bucket_bytes; a remainder smaller than that joins the bucket before it. It also closes one
 * early where the next tensor would hold a large part of it back, or be held back: before a
 * tensor of at least half of bucket_bytes that is final at an earlier stage than the bucket, and
 * before such a tensor final more than one stage after a bucket of that size (so a model whose
 * layers are interleaved in the buffer, as the transformer's stacked block tensors are, still
 * gets its late layers' large tensors into buckets of their own). For stages in buffer order
 * backwards those two rules never apply. Bucket 0 ends the buffer. A bucket is complete at the
 * latest stage of its tensors (its key), and buckets are exchanged in the order of their keys
 * (ties by index): 0, 1, 2, ... for the default stages. bucket_bytes 0 (or >= 4 d) gives one
 * bucket: the whole vector. ob__buckets_plan is the only place the layout is computed.
 *
 * Exchange of bucket k (ob__bucket_exchange): copy src[lo, hi) to dst[lo, hi), then the ring
 * allreduce (ob_comm_allreduce_sum_f32) of dst[lo, hi); or, with an fp16 exchange (f16 not
 * NULL: optimizer.gradient_exchange fp16), ob_f16sum_run of src[lo, hi) into dst[lo, hi). Each
 * bucket's exchange depends on no other's. The reference path runs them in the exchange order
 * on the caller's thread after the backward pass (ob__buckets_exchange_all); the overlapped path
 * runs the same function, in the same order, on a communication thread while the backward pass
 * goes on. Both give the same bits by construction.
 *
 * Segments (ob__buckets_segments). The compression phase's buckets are the compressed
 * allreduce's segments (onebit/car.h: ranges of the padded vector cut on its N*B grid), taken
 * from the last to the first; a segment holds every tensor that overlaps it, so it is complete
 * when they all are final. The work of such a bucket is the optimizer's (the momentum of its
 * range, then the segment's compressed allreduce), and it too depends on no other bucket's.
 *
 * Overlap (ob__overlap). One communication thread per optimizer, created with it and joined at
 * its destruction. It runs whatever work the step was armed with, bucket by bucket: the fp32
 * exchange (ob__sum_job_run) or the compression phase's. A step: the main thread arms it
 * (ob__overlap_begin) before the backward pass;
 * the backward pass reports each tensor whose gradient is final (ob__overlap_tensor_final);
 * when every tensor of the next bucket of the exchange order is final, that bucket is handed
 * to the thread (a queue over the exchange order: `published` under the mutex, the condition
 * variable `work`). The order is the plan's, fixed before the step, so every rank exchanges the
 * same buckets in the same order whatever order its tensors were reported in.
 * ob__overlap_finish marks what is left final, waits until every
 * bucket is exchanged (condition `done`) and returns the first failure. Between begin and
 * finish the main thread must make no call on the communicator: with MPI initialised at
 * MPI_THREAD_SERIALIZED, only one thread may be inside MPI at a time, and the ring allreduce's
 * scratch buffer belongs to whoever runs it.
 *
 * Yielding at tensor boundaries. After reporting a tensor, while the thread holds buckets it has
 * not finished, the backward pass gives up the processor (sched_yield) up to
 * OB__OVERLAP_YIELDS times (ONEBIT_OVERLAP_YIELDS in the environment: 0 .. 1000). MPI makes
 * progress only inside MPI calls, so a communication thread that gets no processor sends and
 * receives nothing. With a core of its own it is running anyway, nothing else waits on the main
 * thread's core, and each yield returns at once (a system call); where ranks share cores (more
 * ranks than cores, as bench/net's four hosts on two cores), the communication thread's MPI
 * poll loop (mpi_yield_when_idle) and these yields take turns, so buckets cross during the
 * backward pass instead of after it (bench/peers' transformer at 200 Mbit/s, interleaved runs:
 * the compressed step's median 30.5-33.8 ms without, 27.1-30.3 ms with; docs/peers/README.md).
 * Timing only: no bit of the result depends on it. */
#ifndef ONEBIT_OVERLAP_H
#define ONEBIT_OVERLAP_H

#include "onebit/comm.h"
#include "onebit/f16sum.h"
#include "onebit/status.h"

#include <stddef.h>

/* The default of the yields at one tensor boundary (see above). */
#define OB__OVERLAP_YIELDS 16

typedef struct ob__bucket {
    size_t lo, hi;               /* floats [lo, hi) of the flat buffer */
    size_t tensor_lo, tensor_hi; /* tensors [tensor_lo, tensor_hi) that overlap it */
} ob__bucket;

/* A bucket plan and the per-step bookkeeping of the thread that runs the backward pass. */
typedef struct ob__buckets {
    size_t d;
    size_t n;                /* buckets */
    ob__bucket *b;           /* (n) b[0] ends the buffer */
    size_t *key;             /* (n) the stage at which each bucket is complete */
    size_t *order;           /* (n) the exchange order: bucket indices by key, then index */
    size_t num_tensors;      /* tensors (1 when no table was given: the whole vector) */
    size_t *tensor_first;    /* (num_tensors) the buckets a tensor overlaps: indices */
    size_t *tensor_last;     /*   tensor_first[t] .. tensor_last[t] */
    size_t *pending;         /* (n) tensors of each bucket not yet final in this step */
    unsigned char *is_final; /* (num_tensors) reported final in this step */
} ob__buckets;

/* Computes the plan for d floats whose tensors start at offsets[0 .. num_tensors) (ascending,
 * offsets[0] == 0, each < d; borrowed, read only here) and are final at stages[0 ..
 * num_tensors) (borrowed; NULL: num_tensors - 1 - t, the last tensor first). offsets NULL: one
 * tensor, the whole vector. OB_ERR_INVALID_ARG for a table that does not fit d; OB_ERR_NOMEM.
 * out is caller-owned; free its arrays with ob__buckets_free (also after a failure). */
ob_status ob__buckets_plan(ob__buckets *out, size_t d, const size_t *offsets, const size_t *stages,
                           size_t num_tensors, size_t bucket_bytes, ob_err *err);
void ob__buckets_free(ob__buckets *p);

/* The plan of the compression phase: bucket k is segment nseg-1-k of bounds[0 .. nseg] (0 =
 * bounds[0] < ... < bounds[nseg], every segment starting below d and the last ending at or
 * above it), covering [bounds[s], min(bounds[s + 1], d)) and the tensors (offsets and stages as
 * for ob__buckets_plan) that overlap it. OB_ERR_INVALID_ARG for bounds or offsets that do not
 * fit d; OB_ERR_NOMEM. Free with ob__buckets_free (also after a failure). */
ob_status ob__buckets_segments(ob__buckets *out, size_t d, const size_t *offsets,
                               const size_t *stages, size_t num_tensors, const size_t *bounds,
                               size_t nseg, ob_err *err);

/* Exchange of one bucket: dst[lo, hi) = sum over the ranks of src[lo, hi), in fp32 (f16
 * NULL) or through the fp16 exchange f16 (borrowed, over comm). src and dst are d floats in the
 * communicator's memory (borrowed; src == dst allowed); on a device communicator the copy is
 * queued on `stream`. */
ob_status ob__bucket_exchange(ob_comm *comm, ob_f16sum *f16, int dev, void *stream,
                              const ob__bucket *b, const float *src, float *dst, ob_err *err);

/* The reference path: every bucket in the exchange order (p->order) on the calling thread. */
ob_status ob__buckets_exchange_all(ob_comm *comm, ob_f16sum *f16, int dev, void *stream,
                                   const ob__buckets *p, const float *src, float *dst, ob_err *err);

/* The work of bucket k (b: its range and tensors) on the communication thread; ctx is the
 * armed step's. A failure skips the later buckets of the step. */
typedef ob_status (*ob__bucket_fn)(void *ctx, size_t k, const ob__bucket *b, ob_err *err);

/* The fp32 (or fp16) sum of ob__bucket_exchange as bucket work, on host memory. */
typedef struct ob__sum_job {
    ob_comm *comm;  /* borrowed */
    ob_f16sum *f16; /* the fp16 exchange (borrowed), NULL: fp32 */
    const float *src;
    float *dst;
} ob__sum_job;
ob_status ob__sum_job_run(void *job, size_t k, const ob__bucket *b, ob_err *err);

typedef struct ob__overlap ob__overlap;

/* Starts the communication thread. Whatever it runs calls a host-memory communicator whose
 * collectives are callable from another thread (ob_comm_any_thread). OB_ERR_NOMEM when the
 * thread or its lock cannot be created. */
ob_status ob__overlap_create(ob__overlap **out, ob_err *err);

/* Stops the thread (after the bucket it may be exchanging) and joins it. Accepts NULL. */
void ob__overlap_destroy(ob__overlap *ov);

/* Arms the overlap for one backward pass over plan p (borrowed until ob__overlap_finish): the
 * thread runs fn(ctx, k, &p->b[k]) for k = p->order[0], p->order[1], ..., bucket k only after
 * every tensor of it and of the buckets before it in that order was reported final. ctx and what fn
 * touches are the thread's until ob__overlap_finish returns. Main thread; none armed. */
void ob__overlap_begin(ob__overlap *ov, ob__buckets *p, ob__bucket_fn fn, void *ctx);

/* 1 between ob__overlap_begin and ob__overlap_finish. */
int ob__overlap_armed(const ob__overlap *ov);

/* The gradient of tensor t is final: the backward pass writes it no more. Hands over every
 * bucket that became complete, in the exchange order, then yields while the thread has work (see
 * above). Ignored when not armed, for a tensor out of range, or reported twice. Main thread. */
void ob__overlap_tensor_final(ob__overlap *ov, size_t t);

/* Marks every tensor final, waits until every bucket is exchanged and disarms. *early (may be
 * NULL) receives how many buckets were handed over before this call (during the backward
 * pass). Returns the first failure of an exchange (later buckets are then skipped). */
ob_status ob__overlap_finish(ob__overlap *ov, size_t *early, ob_err *err);

#endif /* ONEBIT_OVERLAP_H */
