/* MPI backend of ob_comm (host memory).
 *
 * Allreduce, alltoall and allgather are our own schedules over nonblocking point-to-point
 * calls, so that the bytes counted are the bytes sent and the traffic pattern is the one a
 * bandwidth-limited network wants:
 *   allreduce  ring: a reduce-scatter then an allgather; every rank ends with bitwise identical
 *              sums; pipelined in pieces of OB_MPI_RING_PIECE bytes (a piece is passed on as
 *              soon as it has arrived), which took the MLP's Adam step (1.86 M floats in two
 *              4 MiB buckets, 4 hosts) from 2090-2170 to 1986-2014 ms at 50 Mbit/s, 489-496 to
 *              476 ms at 200 Mbit/s and 111 to 106 ms at 1 Gbit/s, and cost 1-2 ms of 29 on
 *              unshaped links (bench/net hosts, interleaved runs);
 *   shift      one sendrecv: to the right neighbour, from the left one;
 *   alltoall, allgather of blocks up to OB_MPI_DIRECT_MAX bytes: direct, every block posted at
 *              once (one round trip instead of n-1 dependent steps);
 *   larger blocks: pairwise alltoall (step k sends to rank r+k, receives from rank r-k) and
 *              ring allgather (n-1 steps, each passing one block to the right neighbour).
 * The large-block schedules keep the two directions of a connection apart (for more than two
 * ranks, except the middle alltoall step): Open MPI's TCP transport serialises two rendezvous
 * messages that cross one connection in opposite directions, as its own recursive-doubling
 * allgather does at every step. bench/net measured, for 4 ranks and 59 KB blocks, an
 * allgather in 48.6 ms with MPI_Allgather against 30.4 ms with the ring at 50 Mbit/s, and an
 * alltoall + allgather in 21.4 ms step by step against 17.1 ms direct at 200 Mbit/s (see
 * docs/bandwidth/). Bcast and barrier map onto the MPI collectives. The communicator is a
 * duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so MPI failures come back as OB_ERR_COMM
 * with MPI's own message instead of killing the process. The ring allreduce's scratch buffer
 * and request array belong to the thread running the collective: with MPI_THREAD_SERIALIZED
 * one thread at a time, which is all ob_comm_any_thread promises. */
#include "comm_internal.h"
#include "internal.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest piece sent by one MPI call: MPI counts are ints. */
#define OB_MPI_MAX_PIECE ((size_t)1 << 30)
/* Blocks up to this size are exchanged all at once: below Open MPI's default eager limit of
 * the TCP transport (64 KiB with its header) a message needs no handshake, so a connection
 * carries both directions at once without one waiting for the other. */
#define OB_MPI_DIRECT_MAX ((size_t)60 * 1024)
/* The ring allreduce's pieces (see ring_allreduce). */
#define OB_MPI_RING_PIECE ((size_t)256 * 1024)

typedef struct mpi_impl {
    MPI_Comm comm;
    MPI_Request control; /* the control reduction in flight, MPI_REQUEST_NULL when none */
    float *scratch;      /* receive buffer for two ring chunks, grown on demand */
    size_t scratch_len;
    MPI_Request *reqs; /* the ring allreduce's requests, grown on demand */
    size_t reqs_len;
} mpi_impl;

ob_status ob__mpi_fail(ob_err *err, int rc, const char *call, const char *file, int line)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    return ob_err_set(err, OB_ERR_COMM, file, line, "%s failed: %s", call, text);
}

#define MPI_CHECK(err, call)                                                                       \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) return ob__mpi_fail((err), rc_, #call, __FILE__, __LINE__);        \
    } while (0)

static mpi_impl *impl_of(ob_comm *c)
{
    return (mpi_impl *)c->impl;
}

/* Sends `send_n` elements of `size` bytes to `to` while receiving `recv_n` from `from`, in
 * pieces that fit an int count. Nonblocking pairs, so that a rank with nothing to send still
 * receives (and the piece counts of the two directions need not agree); an empty side posts
 * nothing, which its partner, computing the same sizes, mirrors. */
static ob_status sendrecv(mpi_impl *m, MPI_Datatype type, size_t size, const void *send,
                          size_t send_n, int to, void *recv, size_t recv_n, int from, int tag,
                          ob_err *err)
{
    size_t piece = OB_MPI_MAX_PIECE / size;
    size_t ps = (send_n + piece - 1) / piece, pr = (recv_n + piece - 1) / piece;
    for (size_t i = 0; i < ps || i < pr; i++) {
        MPI_Request req[2];
        int nreq = 0;
        if (i < pr) {
            size_t nr = recv_n - i * piece < piece ? recv_n - i * piece : piece;
            MPI_CHECK(err, MPI_Irecv((char *)recv + i * piece * size, (int)nr, type, from, tag,
                                     m->comm, &req[nreq++]));
        }
        if (i < ps) {
            size_t ns = send_n - i * piece < piece ? send_n - i * piece : piece;
            MPI_CHECK(err, MPI_Isend((const char *)send + i * piece * size, (int)ns, type, to, tag,
                                     m->comm, &req[nreq++]));
        }
        MPI_CHECK(err, MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE));
    }
    return OB_OK;
}

/* Message tags, one per collective, so that no message can match another collective's. */
enum { TAG_ALLREDUCE = 17, TAG_ALLTOALL = 18, TAG_ALLGATHER = 19, TAG_SHIFT = 20 };

/* Chunk sent (send != 0) or received in step t (0 <= t < 2(n-1)) of the ring allreduce on rank
 * r: the reduce-scatter's steps, then the allgather's. What a rank receives in step t it sends
 * in step t + 1. */
static int ring_step_chunk(int r, int t, int n, int send)
{
    int who = send ? r : (r + n - 1) % n;
    return t < n - 1 ? ob__ring_rs_chunk(who, t, n) : ob__ring_ag_chunk(who, t - (n - 1), n);
}

/* The requests of one ring allreduce: pieces of every step, both directions. */
typedef struct ring_reqs {
    MPI_Request *recv, *send; /* [step * per + piece] */
    size_t per;               /* most pieces in a chunk */
} ring_reqs;

static void piece_range(size_t lo, size_t hi, size_t piece, size_t j, size_t *plo, size_t *phi)
{
    *plo = lo + j * piece;
    *phi = hi - *plo < piece ? hi : *plo + piece;
}

static size_t piece_count(size_t lo, size_t hi, size_t piece)
{
    return (hi - lo + piece - 1) / piece;
}

/* Posts the receives of step t: into the scratch half of its parity in the reduce-scatter,
 * into the chunk's place in buf in the allgather, once the reduce-scatter's send of that chunk
 * (which read the same place) has completed. */
static ob_status ring_post_recv(mpi_impl *m, ring_reqs *q, float *buf, size_t count, size_t piece,
                                size_t half, int t, int r, int n, ob_err *err)
{
    int k = ring_step_chunk(r, t, n, 0);
    size_t lo, hi;
    ob__ring_chunk(count, n, k, &lo, &hi);
    float *dst = buf + lo;
    if (t < n - 1) {
        dst = m->scratch + (size_t)(t % 2) * half;
    } else {
        int s = ((r - k) % n + n) % n; /* the reduce-scatter step that sent chunk k */
        MPI_CHECK(err, MPI_Waitall((int)q->per, q->send + (size_t)s * q->per, MPI_STATUSES_IGNORE));
    }
    size_t np = piece_count(lo, hi, piece);
    for (size_t j = 0; j < np; j++) {
        size_t plo, phi;
        piece_range(lo, hi, piece, j, &plo, &phi);
        MPI_CHECK(err, MPI_Irecv(dst + (plo - lo), (int)(phi - plo), MPI_FLOAT, (r + n - 1) % n,
                                 TAG_ALLREDUCE, m->comm, &q->recv[(size_t)t * q->per + j]));
    }
    return OB_OK;
}

static ob_status ring_post_send(mpi_impl *m, ring_reqs *q, const float *buf, size_t count,
                                size_t piece, int t, size_t j, int r, int n, uint64_t *sent,
                                ob_err *err)
{
    size_t lo, hi, plo, phi;
    ob__ring_chunk(count, n, ring_step_chunk(r, t, n, 1), &lo, &hi);
    piece_range(lo, hi, piece, j, &plo, &phi);
    MPI_CHECK(err, MPI_Isend(buf + plo, (int)(phi - plo), MPI_FLOAT, (r + 1) % n, TAG_ALLREDUCE,
                             m->comm, &q->send[(size_t)t * q->per + j]));
    *sent += (uint64_t)(phi - plo) * sizeof(float);
    return OB_OK;
}

/* The ring, pipelined by pieces: a piece is passed on (added to, in the reduce-scatter) as soon
 * as it has arrived rather than once its whole chunk has, so a late piece delays only itself,
 * and every link keeps sending across the steps' boundaries. Messages between two ranks match in
 * the order they are posted, which is (step, piece) on both sides. */
static ob_status ring_allreduce(mpi_impl *m, ring_reqs *q, float *buf, size_t count, size_t piece,
                                size_t half, int r, int n, uint64_t *sent, ob_err *err)
{
    int steps = 2 * (n - 1);
    ob_status st = ring_post_recv(m, q, buf, count, piece, half, 0, r, n, err);
    size_t lo, hi;
    ob__ring_chunk(count, n, ring_step_chunk(r, 0, n, 1), &lo, &hi);
    for (size_t j = 0; st == OB_OK && j < piece_count(lo, hi, piece); j++)
        st = ring_post_send(m, q, buf, count, piece, 0, j, r, n, sent, err);
    for (int t = 0; t < steps && st == OB_OK; t++) {
        if (t + 1 < steps) st = ring_post_recv(m, q, buf, count, piece, half, t + 1, r, n, err);
        ob__ring_chunk(count, n, ring_step_chunk(r, t, n, 0), &lo, &hi);
        const float *src = m->scratch + (size_t)(t % 2) * half;
        for (size_t j = 0; st == OB_OK && j < piece_count(lo, hi, piece); j++) {
            int rc = MPI_Wait(&q->recv[(size_t)t * q->per + j], MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return ob__mpi_fail(err, rc, "MPI_Wait", __FILE__, __LINE__);
            size_t plo, phi;
            piece_range(lo, hi, piece, j, &plo, &phi);
            if (t < n - 1) {
                float *dst = buf + plo;
                const float *add = src + (plo - lo);
                for (size_t i = 0; i < phi - plo; i++)
                    dst[i] += add[i];
            }
            if (t + 1 < steps)
                st = ring_post_send(m, q, buf, count, piece, t + 1, j, r, n, sent, err);
        }
    }
    if (st == OB_OK)
        MPI_CHECK(err, MPI_Waitall((int)((size_t)steps * q->per), q->send, MPI_STATUSES_IGNORE));
    return st;
}

static ob_status mpi_allreduce(ob_comm *c, float *buf, size_t count, uint64_t *sent, ob_err *err)
{
    mpi_impl *m = impl_of(c);
    int n = c->size, r = c->rank;
    if (n == 1) return OB_OK;
    size_t piece = OB_MPI_RING_PIECE / sizeof(float);
    size_t half = count / (size_t)n + 1, need = 2 * half;
    if (m->scratch_len < need) {
        float *p = ob_calloc_aligned(need * sizeof(float));
        if (!p) return OB_ERR(err, OB_ERR_NOMEM, "allreduce scratch of %zu floats", need);
        ob_aligned_free(m->scratch);
        m->scratch = p;
        m->scratch_len = need;
    }
    ring_reqs q = {NULL, NULL, (half + piece - 1) / piece};
    size_t nreq = (size_t)(2 * (n - 1)) * q.per;
    if (m->reqs_len < 2 * nreq) {
        MPI_Request *p = malloc(2 * nreq * sizeof *p);
        if (!p) return OB_ERR(err, OB_ERR_NOMEM, "%zu MPI requests", 2 * nreq);
        free(m->reqs);
        m->reqs = p;
        m->reqs_len = 2 * nreq;
    }
    q.recv = m->reqs;
    q.send = q.recv + nreq;
    for (size_t i = 0; i < 2 * nreq; i++)
        q.recv[i] = MPI_REQUEST_NULL;
    return ring_allreduce(m, &q, buf, count, piece, half, r, n, sent, err);
}

/* Direct exchange of small blocks: every receive, then every send, posted at once; block p of
 * `send` goes to rank p (send == NULL: the block at `own` goes to every rank), block p of
 * `recv` comes from rank p. Returns before the caller counts the bytes. */
static ob_status exchange_direct(mpi_impl *m, int n, int r, const char *send, const char *own,
                                 char *recv, size_t bytes, int tag, ob_err *err)
{
    MPI_Request stack[32], *req = stack;
    if (2 * (size_t)n > sizeof stack / sizeof *stack) {
        req = malloc(2 * (size_t)n * sizeof *req);
        if (!req) return OB_ERR(err, OB_ERR_NOMEM, "%d MPI requests", 2 * n);
    }
    int nreq = 0, rc = MPI_SUCCESS;
    const char *call = "MPI_Irecv";
    for (int k = 1; k < n && rc == MPI_SUCCESS; k++) {
        int from = (r - k + n) % n;
        rc = MPI_Irecv(recv + (size_t)from * bytes, (int)bytes, MPI_BYTE, from, tag, m->comm,
                       &req[nreq++]);
    }
    for (int k = 1; k < n && rc == MPI_SUCCESS; k++) {
        int to = (r + k) % n;
        call = "MPI_Isend";
        rc = MPI_Isend(send ? send + (size_t)to * bytes : own, (int)bytes, MPI_BYTE, to, tag,
                       m->comm, &req[nreq++]);
    }
    if (rc == MPI_SUCCESS) {
        call = "MPI_Waitall";
        rc = MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    }
    if (req != stack) free(req);
    if (rc != MPI_SUCCESS) return ob__mpi_fail(err, rc, call, __FILE__, __LINE__);
    return OB_OK;
}

/* Small blocks: direct. Large: pairwise exchange, in step k (1..n-1) rank r sends its block
 * for rank r+k and receives the block of rank r-k, one block over each rank's link in each
 * direction per step. */
static ob_status mpi_alltoall(ob_comm *c, const void *send, void *recv, size_t bytes,
                              uint64_t *sent, ob_err *err)
{
    mpi_impl *m = impl_of(c);
    int n = c->size, r = c->rank;
    const char *in = send;
    char *out = recv;
    memcpy(out + (size_t)r * bytes, in + (size_t)r * bytes, bytes);
    if (n > 1 && bytes <= OB_MPI_DIRECT_MAX) {
        ob_status st = exchange_direct(m, n, r, in, NULL, out, bytes, TAG_ALLTOALL, err);
        if (st != OB_OK) return st;
    } else {
        for (int k = 1; k < n; k++) {
            int to = (r + k) % n, from = (r - k + n) % n;
            ob_status st = sendrecv(m, MPI_BYTE, 1, in + (size_t)to * bytes, bytes, to,
                                    out + (size_t)from * bytes, bytes, from, TAG_ALLTOALL, err);
            if (st != OB_OK) return st;
        }
    }
    *sent += (uint64_t)(n - 1) * bytes;
    return OB_OK;
}

/* Small blocks: direct. Large: ring, in step s (0..n-2) rank r passes block r-s to its right
 * neighbour and receives block r-s-1 from its left one. */
static ob_status mpi_allgather(ob_comm *c, const void *send, void *recv, size_t bytes,
                               uint64_t *sent, ob_err *err)
{
    mpi_impl *m = impl_of(c);
    int n = c->size, r = c->rank;
    int right = (r + 1) % n, left = (r + n - 1) % n;
    char *out = recv, *own = out + (size_t)r * bytes;
    if (send != own) memcpy(own, send, bytes);
    if (n > 1 && bytes <= OB_MPI_DIRECT_MAX) {
        ob_status st = exchange_direct(m, n, r, NULL, own, out, bytes, TAG_ALLGATHER, err);
        if (st != OB_OK) return st;
    } else {
        for (int s = 0; s < n - 1; s++) {
            size_t sb = (size_t)((r - s + n) % n), rb = (size_t)((r - s - 1 + 2 * n) % n);
            ob_status st = sendrecv(m, MPI_BYTE, 1, out + sb * bytes, bytes, right,
                                    out + rb * bytes, bytes, left, TAG_ALLGATHER, err);
            if (st != OB_OK) return st;
        }
    }
    *sent += (uint64_t)(n - 1) * bytes;
    return OB_OK;
}

static ob_status mpi_shift(ob_comm *c, const void *send, void *recv, size_t bytes, uint64_t *sent,
                           ob_err *err)
{
    int n = c->size, r = c->rank;
    if (n == 1) {
        memcpy(recv, send, bytes);
        return OB_OK;
    }
    ob_status st = sendrecv(impl_of(c), MPI_BYTE, 1, send, bytes, (r + 1) % n, recv, bytes,
                            (r + n - 1) % n, TAG_SHIFT, err);
    if (st != OB_OK) return st;
    *sent += bytes;
    return OB_OK;
}

static ob_status mpi_bcast(ob_comm *c, void *buf, size_t bytes, int root, uint64_t *sent,
                           ob_err *err)
{
    for (size_t off = 0; off < bytes; off += OB_MPI_MAX_PIECE) {
        size_t n = bytes - off < OB_MPI_MAX_PIECE ? bytes - off : OB_MPI_MAX_PIECE;
        MPI_CHECK(err, MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, impl_of(c)->comm));
    }
    if (c->rank == root) *sent += (uint64_t)(c->size - 1) * bytes;
    return OB_OK;
}

static ob_status mpi_barrier(ob_comm *c, ob_err *err)
{
    MPI_CHECK(err, MPI_Barrier(impl_of(c)->comm));
    return OB_OK;
}

static void mpi_abort(ob_comm *c, int code)
{
    MPI_Abort(impl_of(c)->comm, code);
}

/* The control reduction: MPI's own non-blocking allreduce (a few bytes: its latency-optimal
 * algorithm beats our bandwidth-optimal ring), progressed by the MPI calls of the step. */
static ob_status mpi_control_start(ob_comm *c, ob_err *err)
{
    mpi_impl *m = impl_of(c);
    int rc = MPI_Iallreduce(MPI_IN_PLACE, c->ctl_buf, c->ctl_n, MPI_INT32_T, MPI_SUM, m->comm,
                            &m->control);
    if (rc != MPI_SUCCESS) return ob__mpi_fail(err, rc, "MPI_Iallreduce", __FILE__, __LINE__);
    return OB_OK;
}

static ob_status mpi_control_finish(ob_comm *c, ob_err *err)
{
    mpi_impl *m = impl_of(c);
    int rc = MPI_Wait(&m->control, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return ob__mpi_fail(err, rc, "MPI_Wait (control)", __FILE__, __LINE__);
    return OB_OK;
}

static void mpi_destroy(ob_comm *c)
{
    mpi_impl *m = impl_of(c);
    if (!m) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && m->control != MPI_REQUEST_NULL) MPI_Wait(&m->control, MPI_STATUS_IGNORE);
    if (!finalized && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    ob_aligned_free(m->scratch);
    free(m->reqs);
    free(m);
}

static ob_status wrap(MPI_Comm mc, ob_comm **out, ob_err *err);

static ob_status mpi_split(ob_comm *c, int color, int key, ob_comm **out, ob_err *err)
{
    mpi_impl *m = c->impl;
    MPI_Comm nc = MPI_COMM_NULL;
    int rc = MPI_Comm_split(m->comm, color, key, &nc);
    if (rc != MPI_SUCCESS) return ob__mpi_fail(err, rc, "MPI_Comm_split", __FILE__, __LINE__);
    return wrap(nc, out, err);
}

/* The ranks that share memory with this one (MPI_COMM_TYPE_SHARED, ranked as in c): the
 * first of them tells the others its rank. */
static ob_status mpi_node(ob_comm *c, int *node, const char **source, ob_err *err)
{
    mpi_impl *m = c->impl;
    MPI_Comm nc = MPI_COMM_NULL;
    int first = c->rank;
    MPI_CHECK(err, MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &nc));
    int rc = MPI_Bcast(&first, 1, MPI_INT, 0, nc);
    MPI_Comm_free(&nc);
    if (rc != MPI_SUCCESS) return ob__mpi_fail(err, rc, "MPI_Bcast", __FILE__, __LINE__);
    *node = first;
    *source = "MPI_COMM_TYPE_SHARED";
    return OB_OK;
}

static const ob__comm_ops mpi_ops = {
    .allreduce_sum_f32 = mpi_allreduce,
    .alltoall = mpi_alltoall,
    .allgather = mpi_allgather,
    .shift = mpi_shift,
    .bcast = mpi_bcast,
    .barrier = mpi_barrier,
    .control_start = mpi_control_start,
    .control_finish = mpi_control_finish,
    .split = mpi_split,
    .node = mpi_node,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

/* Open MPI's TCP transport sends a message of up to btl_tcp_eager_limit bytes without the
 * rendezvous handshake. The fp32 ring allreduce moves chunks of d/N floats (1.86 MB for the
 * 1.86 M-parameter MLP on 4 hosts); at 2 MiB they go eagerly, and that allreduce took 482-488 ms
 * instead of 502-509 ms at 200 Mbit/s, 95-98 instead of 102-107 ms at 1 Gbit/s
 * (docs/peers/README.md). The fp8 exchange of a 433,664-parameter GPT (ring steps of 109 KB)
 * took 114 ms instead of 151 ms at 50 Mbit/s, 29 instead of 37 ms at 200 Mbit/s (bench_car on
 * the bench/net hosts). It costs each rank's TCP transport buffers of that size for messages
 * that arrive before their receive is posted. */
void ob_comm_mpi_env_defaults(void)
{
    setenv("OMPI_MCA_btl_tcp_eager_limit", "2097152", 0);
    setenv("OMPI_MCA_btl_tcp_rndv_eager_limit", "2097152", 0);
}

ob_status ob_comm_create_mpi(ob_comm **out, ob_err *err)
{
    *out = NULL;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
        return OB_ERR(err, OB_ERR_STATE, "MPI is not initialised: call MPI_Init first");

    MPI_Comm mc = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &mc);
    if (rc != MPI_SUCCESS) return ob__mpi_fail(err, rc, "MPI_Comm_dup", __FILE__, __LINE__);
    return wrap(mc, out, err);
}

/* An ob_comm that owns the MPI communicator mc (freed on failure too). */
static ob_status wrap(MPI_Comm mc, ob_comm **out, ob_err *err)
{
    *out = NULL;
    ob_status st = OB_OK;
    ob_comm *c = ob__comm_alloc(&mpi_ops, "mpi", OB_MEM_HOST);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        st = OB_ERR(err, OB_ERR_NOMEM, "MPI communicator");
        MPI_Comm_free(&mc);
        goto fail;
    }
    m->comm = mc;
    m->control = MPI_REQUEST_NULL;
    c->impl = m;
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &c->rank);
    MPI_Comm_size(m->comm, &c->size);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    c->any_thread = level >= MPI_THREAD_SERIALIZED;
    *out = c;
    return OB_OK;
fail:
    if (c && !c->impl) free(m);
    ob_comm_destroy(c);
    return st;
}
