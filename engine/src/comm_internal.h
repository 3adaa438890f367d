/* The backend interface behind ob_comm: each backend fills an ops table; comm.c validates
 * arguments and keeps the byte counters so that no backend has to. */
#ifndef ONEBIT_COMM_INTERNAL_H
#define ONEBIT_COMM_INTERNAL_H

#include "onebit/comm.h"

#include <pthread.h>

/* Each collective adds the bytes this rank sent to *sent (only called with a non-empty
 * buffer; comm.c has checked the arguments). */
typedef struct ob__comm_ops {
    ob_status (*allreduce_sum_f32)(ob_comm *c, float *buf, size_t count, uint64_t *sent,
                                   ob_err *err);
    ob_status (*alltoall)(ob_comm *c, const void *send, void *recv, size_t bytes, uint64_t *sent,
                          ob_err *err);
    ob_status (*allgather)(ob_comm *c, const void *send, void *recv, size_t bytes, uint64_t *sent,
                           ob_err *err);
    ob_status (*shift)(ob_comm *c, const void *send, void *recv, size_t bytes, uint64_t *sent,
                       ob_err *err);
    ob_status (*bcast)(ob_comm *c, void *buf, size_t bytes, int root, uint64_t *sent, ob_err *err);
    ob_status (*barrier)(ob_comm *c, ob_err *err);
    /* Control reduction over c->ctl_buf[0 .. c->ctl_n): start it; finish leaves the sums
     * there. NULL: not supported. */
    ob_status (*control_start)(ob_comm *c, ob_err *err);
    ob_status (*control_finish)(ob_comm *c, ob_err *err);
    /* Limit on how long a collective may wait (ob_comm_set_timeout). NULL: not supported. */
    ob_status (*set_timeout)(ob_comm *c, double seconds, ob_err *err);
    /* A new communicator of the ranks with the same color, ordered by key (ob_comm_split).
     * NULL: not supported. */
    ob_status (*split)(ob_comm *c, int color, int key, ob_comm **out, ob_err *err);
    /* This rank's node (ob_comm_node_map): the lowest rank of c on it. *source: a static
     * string naming how it was found. NULL: not supported. */
    ob_status (*node)(ob_comm *c, int *node, const char **source, ob_err *err);
    void (*abort)(ob_comm *c, int code);
    void (*destroy)(ob_comm *c); /* frees impl only */
} ob__comm_ops;

struct ob_comm {
    const ob__comm_ops *ops;
    const char *backend;
    void *impl; /* backend state, owned */
    int rank;
    int size;
    ob_mem_kind mem;
    void *stream;
    int any_thread;           /* ob_comm_any_thread; set by the backend */
    pthread_mutex_t count_mu; /* guards counters */
    ob_comm_counters counters;
    ob_comm *parent; /* ob_comm_split's source: its counters count this one's traffic too */
    int ctl_pending, ctl_n;
    int32_t ctl_buf[OB_COMM_CONTROL_MAX];
};

/* Element range [lo, hi) of ring chunk k when `count` elements are split into n ring chunks:
 * sizes differ by at most one element, the larger chunks first. The MPI backend's ring
 * allreduce uses this split, and the NCCL backend counts its allreduce bytes with it, so that
 * both report the same traffic. */
static inline void ob__ring_chunk(size_t count, int n, int k, size_t *lo, size_t *hi)
{
    size_t base = count / (size_t)n, extra = count % (size_t)n, uk = (size_t)k;
    *lo = uk * base + (uk < extra ? uk : extra);
    *hi = *lo + base + (uk < extra ? 1 : 0);
}

/* Step s (0 <= s < n-1) of the ring allreduce on rank r sends chunk (r - s) mod n in the
 * reduce-scatter and chunk (r - s + 1) mod n in the allgather. */
static inline int ob__ring_rs_chunk(int r, int s, int n)
{
    return ((r - s) % n + n) % n;
}

static inline int ob__ring_ag_chunk(int r, int s, int n)
{
    return ((r - s + 1) % n + n) % n;
}

/* Records a failed MPI call (MPI's own message for code rc) as OB_ERR_COMM; returns it. Used
 * by every backend that talks MPI (the MPI backend, and NCCL's bootstrap). */
ob_status ob__mpi_fail(ob_err *err, int rc, const char *call, const char *file, int line);

/* Allocates an ob_comm shell with the given ops; the backend then fills rank/size/impl. */
ob_comm *ob__comm_alloc(const ob__comm_ops *ops, const char *backend, ob_mem_kind mem);

#endif /* ONEBIT_COMM_INTERNAL_H */
