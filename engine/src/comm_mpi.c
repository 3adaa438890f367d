/* MPI backend of ob_comm (host memory).
 *
 * The allreduce is our own ring (reduce-scatter, then allgather) over MPI_Sendrecv, so that the
 * bytes counted are the bytes sent and every rank ends with bitwise identical sums. Alltoall,
 * allgather, bcast and barrier map onto the MPI collectives of the same name. The communicator
 * is a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so MPI failures come back as
 * OB_ERR_COMM with MPI's own message instead of killing the process. */
#include "comm_internal.h"
#include "internal.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest piece sent by one MPI call: MPI counts are ints. */
#define OB_MPI_MAX_PIECE ((size_t)1 << 30)

typedef struct mpi_impl {
    MPI_Comm comm;
    float *scratch; /* receive buffer for one ring chunk, grown on demand */
    size_t scratch_len;
} mpi_impl;

ob_status ob__mpi_fail(ob_err *err, int rc, const char *call, const char *file, int line)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    return ob__err_set(err, OB_ERR_COMM, file, line, "%s failed: %s", call, text);
}

#define MPI_CHECK(err, call)                                                                       \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) return ob__mpi_fail((err), rc_, #call, __FILE__, __LINE__);            \
    } while (0)

static mpi_impl *impl_of(ob_comm *c)
{
    return (mpi_impl *)c->impl;
}

/* Sends `send_n` floats to `to` while receiving `recv_n` floats from `from`, in pieces that fit
 * an int count. Nonblocking pairs, so that a rank with nothing to send still receives (and the
 * piece counts of the two directions need not agree); an empty side posts nothing, which its
 * partner, computing the same chunk size, mirrors. */
static ob_status sendrecv_f32(mpi_impl *m, const float *send, size_t send_n, int to, float *recv,
                              size_t recv_n, int from, ob_err *err)
{
    size_t piece = OB_MPI_MAX_PIECE / sizeof(float);
    size_t ps = (send_n + piece - 1) / piece, pr = (recv_n + piece - 1) / piece;
    for (size_t i = 0; i < ps || i < pr; i++) {
        MPI_Request req[2];
        int nreq = 0;
        if (i < pr) {
            size_t nr = recv_n - i * piece < piece ? recv_n - i * piece : piece;
            MPI_CHECK(err, MPI_Irecv(recv + i * piece, (int)nr, MPI_FLOAT, from, 17, m->comm,
                                     &req[nreq++]));
        }
        if (i < ps) {
            size_t ns = send_n - i * piece < piece ? send_n - i * piece : piece;
            MPI_CHECK(err, MPI_Isend(send + i * piece, (int)ns, MPI_FLOAT, to, 17, m->comm,
                                     &req[nreq++]));
        }
        MPI_CHECK(err, MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE));
    }
    return OB_OK;
}

static ob_status mpi_allreduce(ob_comm *c, float *buf, size_t count, uint64_t *sent, ob_err *err)
{
    mpi_impl *m = impl_of(c);
    int n = c->size, r = c->rank;
    if (n == 1) return OB_OK;
    int right = (r + 1) % n, left = (r + n - 1) % n;

    size_t need = count / (size_t)n + 1;
    if (m->scratch_len < need) {
        float *p = ob__calloc_aligned(need * sizeof(float));
        if (!p) return OB_ERR(err, OB_ERR_NOMEM, "allreduce scratch of %zu floats", need);
        ob__free(m->scratch);
        m->scratch = p;
        m->scratch_len = need;
    }

    /* Reduce-scatter: after step s, chunk (r - s - 1) holds the sum of s + 2 ranks' values. */
    for (int s = 0; s < n - 1; s++) {
        /* we receive what the left neighbour sends: its reduce-scatter chunk of this step */
        size_t slo, shi, rlo, rhi;
        ob__ring_chunk(count, n, ob__ring_rs_chunk(r, s, n), &slo, &shi);
        ob__ring_chunk(count, n, ob__ring_rs_chunk(left, s, n), &rlo, &rhi);
        ob_status st =
            sendrecv_f32(m, buf + slo, shi - slo, right, m->scratch, rhi - rlo, left, err);
        if (st != OB_OK) return st;
        float *dst = buf + rlo;
        const float *src = m->scratch;
        for (size_t i = 0; i < rhi - rlo; i++)
            dst[i] += src[i];
        *sent += (uint64_t)(shi - slo) * sizeof(float);
    }
    /* Allgather: rank r now owns the finished chunk (r + 1) mod n; pass finished chunks on. */
    for (int s = 0; s < n - 1; s++) {
        size_t slo, shi, rlo, rhi;
        ob__ring_chunk(count, n, ob__ring_ag_chunk(r, s, n), &slo, &shi);
        ob__ring_chunk(count, n, ob__ring_ag_chunk(left, s, n), &rlo, &rhi);
        ob_status st =
            sendrecv_f32(m, buf + slo, shi - slo, right, buf + rlo, rhi - rlo, left, err);
        if (st != OB_OK) return st;
        *sent += (uint64_t)(shi - slo) * sizeof(float);
    }
    return OB_OK;
}

static ob_status check_int_count(size_t bytes, const char *what, ob_err *err)
{
    if (bytes > (size_t)INT_MAX)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: %zu bytes per peer exceeds the MPI limit", what,
                      bytes);
    return OB_OK;
}

static ob_status mpi_alltoall(ob_comm *c, const void *send, void *recv, size_t bytes,
                              uint64_t *sent, ob_err *err)
{
    ob_status st = check_int_count(bytes, "alltoall", err);
    if (st != OB_OK) return st;
    MPI_CHECK(err, MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                                impl_of(c)->comm));
    *sent += (uint64_t)(c->size - 1) * bytes;
    return OB_OK;
}

static ob_status mpi_allgather(ob_comm *c, const void *send, void *recv, size_t bytes,
                               uint64_t *sent, ob_err *err)
{
    ob_status st = check_int_count(bytes, "allgather", err);
    if (st != OB_OK) return st;
    const char *own = (const char *)recv + (size_t)c->rank * bytes;
    const void *src = (send == own) ? MPI_IN_PLACE : send;
    MPI_CHECK(err, MPI_Allgather(src, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                                 impl_of(c)->comm));
    *sent += (uint64_t)(c->size - 1) * bytes;
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

static void mpi_destroy(ob_comm *c)
{
    mpi_impl *m = impl_of(c);
    if (!m) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    ob__free(m->scratch);
    free(m);
}

static const ob__comm_ops mpi_ops = {
    .allreduce_sum_f32 = mpi_allreduce,
    .alltoall = mpi_alltoall,
    .allgather = mpi_allgather,
    .bcast = mpi_bcast,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

ob_status ob_comm_create_mpi(ob_comm **out, ob_err *err)
{
    *out = NULL;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
        return OB_ERR(err, OB_ERR_STATE, "MPI is not initialised: call MPI_Init first");

    ob_status st = OB_OK;
    ob_comm *c = ob__comm_alloc(&mpi_ops, "mpi", OB_MEM_HOST);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        st = OB_ERR(err, OB_ERR_NOMEM, "MPI communicator");
        goto fail;
    }
    m->comm = MPI_COMM_NULL;
    c->impl = m;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    if (rc != MPI_SUCCESS) {
        st = ob__mpi_fail(err, rc, "MPI_Comm_dup", __FILE__, __LINE__);
        goto fail;
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &c->rank);
    MPI_Comm_size(m->comm, &c->size);
    *out = c;
    return OB_OK;
fail:
    if (c && !c->impl) free(m);
    ob_comm_destroy(c);
    return st;
}
