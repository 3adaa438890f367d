/* NCCL backend of ob_comm (device memory).
 *
 * The ranks of MPI_COMM_WORLD form one NCCL communicator: rank 0 makes the ncclUniqueId and
 * broadcasts it over MPI. Every collective is enqueued on the communicator's own non-blocking
 * CUDA stream (ob_comm_stream, which the compressed allreduce's kernels also use) and waited
 * for before returning, since the interface is blocking. While waiting we poll
 * ncclCommGetAsyncError, so that a failed peer or network turns into OB_ERR_COMM instead of a
 * hang (NCCL's recommended pattern).
 *
 * Bytes are counted as comm.h documents, with the allreduce counted as the ring that the MPI
 * backend runs (the same chunk split), so that both backends report the same traffic for the
 * same call whatever algorithm NCCL picks. */
#include "comm_internal.h"
#include "internal.h"
#include "cuda_internal.h"

#include <cuda_runtime.h>
#include <mpi.h>
/* nccl.h declares a few functions without prototypes (ncclGroupStart()); not ours to fix. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct nccl_impl {
    ncclComm_t comm; /* NULL once aborted */
    cudaStream_t stream;
    int device;
    float *scratch;    /* one device float for the barrier */
    double timeout;    /* seconds a collective may take; 0: no limit */
    char aborted[256]; /* why the communicator was aborted ("" while usable) */
} nccl_impl;

static nccl_impl *impl_of(ob_comm *c)
{
    return (nccl_impl *)c->impl;
}

/* NCCL's code string plus its last error message, which names the cause (peer, transport). A
 * CUDA failure inside NCCL is OB_ERR_CUDA, anything else a communication failure. */
static ob_status nccl_fail(ob_err *err, ncclComm_t comm, ncclResult_t rc, const char *call,
                           const char *file, int line)
{
    const char *last = ncclGetLastError(comm);
    ob_status code = rc == ncclUnhandledCudaError ? OB_ERR_CUDA : OB_ERR_COMM;
    return ob_err_set(err, code, file, line, "%s failed: %s%s%s", call, ncclGetErrorString(rc),
                      last && *last ? ": " : "", last && *last ? last : "");
}

#define NCCL_CHECK(err, comm, call)                                                                \
    do {                                                                                           \
        ncclResult_t rc_ = (call);                                                                 \
        if (rc_ != ncclSuccess) return nccl_fail((err), (comm), rc_, #call, __FILE__, __LINE__);   \
    } while (0)

/* Aborts the NCCL communicator: its pending operations are cancelled, so the stream drains,
 * and every later call fails at once with `why`. The only way out of a collective whose peer
 * is gone (NCCL's documented recovery), after which the job has to end. */
static void abort_comm(nccl_impl *m, const char *why)
{
    if (m->comm) ncclCommAbort(m->comm);
    m->comm = NULL;
    snprintf(m->aborted, sizeof m->aborted, "%.250s", why);
}

/* Waits for everything enqueued on the stream, polling ncclCommGetAsyncError: an asynchronous
 * NCCL error (a peer's connection closed, a remote failure) or a collective that outlasts the
 * timeout (a peer that hangs) aborts the communicator and fails the call, instead of leaving
 * this rank waiting forever. */
static ob_status wait_stream(nccl_impl *m, const char *what, ob_err *err)
{
    double t0 = ob_mono_s();
    for (unsigned spins = 0;; spins++) {
        cudaError_t rc = cudaStreamQuery(m->stream);
        if (rc == cudaSuccess) return OB_OK;
        if (rc != cudaErrorNotReady)
            return ob_err_set(err, OB_ERR_CUDA, __FILE__, __LINE__,
                              "%s: cudaStreamQuery failed: %s (%s)", what, cudaGetErrorString(rc),
                              cudaGetErrorName(rc));
        ncclResult_t async = ncclSuccess;
        NCCL_CHECK(err, m->comm, ncclCommGetAsyncError(m->comm, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            ob_status st = nccl_fail(err, m->comm, async, what, __FILE__, __LINE__);
            abort_comm(m, err ? err->msg : "an asynchronous NCCL error");
            return st;
        }
        if (m->timeout > 0.0 && spins % 64 == 63 && ob_mono_s() - t0 > m->timeout) {
            char why[160];
            snprintf(why, sizeof why,
                     "%s did not complete within %.0f s (a peer died or hangs); the NCCL "
                     "communicator was aborted",
                     what, m->timeout);
            abort_comm(m, why);
            return OB_ERR(err, OB_ERR_COMM, "%s", why);
        }
        sched_yield();
    }
}

/* Every collective first checks that the communicator was not aborted. */
#define NOT_ABORTED(m, err)                                                                        \
    do {                                                                                           \
        if ((m)->aborted[0])                                                                       \
            return OB_ERR((err), OB_ERR_STATE, "NCCL communicator unusable: %s", (m)->aborted);    \
    } while (0)

/* The bytes this rank sends in the MPI backend's ring: chunks r, r-1, ..., r-N+2 in the
 * reduce-scatter and r+1, r, ..., r-N+3 in the allgather. */
static uint64_t ring_bytes(size_t count, int n, int r)
{
    uint64_t sent = 0;
    for (int s = 0; s < n - 1; s++) {
        size_t lo, hi;
        ob__ring_chunk(count, n, ob__ring_rs_chunk(r, s, n), &lo, &hi);
        sent += (uint64_t)(hi - lo) * sizeof(float);
        ob__ring_chunk(count, n, ob__ring_ag_chunk(r, s, n), &lo, &hi);
        sent += (uint64_t)(hi - lo) * sizeof(float);
    }
    return sent;
}

static ob_status nccl_allreduce(ob_comm *c, float *buf, size_t count, uint64_t *sent, ob_err *err)
{
    nccl_impl *m = impl_of(c);
    NOT_ABORTED(m, err);
    NCCL_CHECK(err, m->comm,
               ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, m->comm, m->stream));
    ob_status st = wait_stream(m, "ncclAllReduce", err);
    if (st != OB_OK) return st;
    *sent += ring_bytes(count, c->size, c->rank);
    return OB_OK;
}

static ob_status nccl_alltoall(ob_comm *c, const void *send, void *recv, size_t bytes,
                               uint64_t *sent, ob_err *err)
{
    nccl_impl *m = impl_of(c);
    NOT_ABORTED(m, err);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    NCCL_CHECK(err, m->comm, ncclAlltoAll(send, recv, bytes, ncclUint8, m->comm, m->stream));
#else
    /* Older NCCL: the alltoall as one group of point-to-point calls. */
    NCCL_CHECK(err, m->comm, ncclGroupStart());
    for (int p = 0; p < c->size; p++) {
        ncclResult_t rc = ncclSend((const char *)send + (size_t)p * bytes, bytes, ncclUint8, p,
                                   m->comm, m->stream);
        if (rc == ncclSuccess)
            rc =
                ncclRecv((char *)recv + (size_t)p * bytes, bytes, ncclUint8, p, m->comm, m->stream);
        if (rc != ncclSuccess) {
            ncclGroupEnd();
            return nccl_fail(err, m->comm, rc, "ncclSend/ncclRecv", __FILE__, __LINE__);
        }
    }
    NCCL_CHECK(err, m->comm, ncclGroupEnd());
#endif
    ob_status st = wait_stream(m, "alltoall", err);
    if (st != OB_OK) return st;
    *sent += (uint64_t)(c->size - 1) * bytes;
    return OB_OK;
}

static ob_status nccl_allgather(ob_comm *c, const void *send, void *recv, size_t bytes,
                                uint64_t *sent, ob_err *err)
{
    nccl_impl *m = impl_of(c);
    NOT_ABORTED(m, err);
    /* NCCL runs in place when send == recv + rank * bytes, as comm.h allows. */
    NCCL_CHECK(err, m->comm, ncclAllGather(send, recv, bytes, ncclUint8, m->comm, m->stream));
    ob_status st = wait_stream(m, "ncclAllGather", err);
    if (st != OB_OK) return st;
    *sent += (uint64_t)(c->size - 1) * bytes;
    return OB_OK;
}

/* One ring step as a group of one send (right) and one receive (left); a world of one copies. */
static ob_status nccl_shift(ob_comm *c, const void *send, void *recv, size_t bytes, uint64_t *sent,
                            ob_err *err)
{
    nccl_impl *m = impl_of(c);
    NOT_ABORTED(m, err);
    int n = c->size, r = c->rank;
    if (n == 1) {
        CUDA_CHECK(err, cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, m->stream));
        return wait_stream(m, "shift copy", err);
    }
    NCCL_CHECK(err, m->comm, ncclGroupStart());
    ncclResult_t rc = ncclSend(send, bytes, ncclUint8, (r + 1) % n, m->comm, m->stream);
    if (rc == ncclSuccess)
        rc = ncclRecv(recv, bytes, ncclUint8, (r + n - 1) % n, m->comm, m->stream);
    if (rc != ncclSuccess) {
        ncclGroupEnd();
        return nccl_fail(err, m->comm, rc, "ncclSend/ncclRecv (shift)", __FILE__, __LINE__);
    }
    NCCL_CHECK(err, m->comm, ncclGroupEnd());
    ob_status st = wait_stream(m, "shift", err);
    if (st != OB_OK) return st;
    *sent += bytes;
    return OB_OK;
}

static ob_status nccl_bcast(ob_comm *c, void *buf, size_t bytes, int root, uint64_t *sent,
                            ob_err *err)
{
    nccl_impl *m = impl_of(c);
    NOT_ABORTED(m, err);
    NCCL_CHECK(err, m->comm, ncclBroadcast(buf, buf, bytes, ncclUint8, root, m->comm, m->stream));
    ob_status st = wait_stream(m, "ncclBroadcast", err);
    if (st != OB_OK) return st;
    if (c->rank == root) *sent += (uint64_t)(c->size - 1) * bytes;
    return OB_OK;
}

/* A one-element allreduce: no rank leaves before every rank has entered. */
static ob_status nccl_barrier(ob_comm *c, ob_err *err)
{
    nccl_impl *m = impl_of(c);
    NOT_ABORTED(m, err);
    NCCL_CHECK(err, m->comm,
               ncclAllReduce(m->scratch, m->scratch, 1, ncclFloat, ncclSum, m->comm, m->stream));
    return wait_stream(m, "barrier", err);
}

static void nccl_abort(ob_comm *c, int code)
{
    nccl_impl *m = impl_of(c);
    if (m) abort_comm(m, "aborted by ob_comm_abort");
    MPI_Abort(MPI_COMM_WORLD, code);
}

static ob_status nccl_set_timeout(ob_comm *c, double seconds, ob_err *err)
{
    impl_of(c)->timeout = seconds;
    return OB_OK;
}

static void nccl_destroy(ob_comm *c)
{
    nccl_impl *m = impl_of(c);
    if (!m) return;
    if (m->comm) ncclCommDestroy(m->comm);
    if (m->stream || m->scratch) {
        cudaSetDevice(m->device);
        if (m->stream) cudaStreamDestroy(m->stream);
        if (m->scratch) cudaFree(m->scratch);
    }
    free(m);
    c->impl = NULL;
}

static const ob__comm_ops nccl_ops = {
    .allreduce_sum_f32 = nccl_allreduce,
    .alltoall = nccl_alltoall,
    .allgather = nccl_allgather,
    .shift = nccl_shift,
    .bcast = nccl_bcast,
    .barrier = nccl_barrier,
    .set_timeout = nccl_set_timeout,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

/* This rank's device, stream and scratch. Fails on this rank only. */
static ob_status setup_local(nccl_impl *m, int device, ob_err *err)
{
    int ndev = 0;
    cudaError_t rc = cudaGetDeviceCount(&ndev);
    if (rc != cudaSuccess || ndev == 0) {
        (void)cudaGetLastError();
        return OB_ERR(err, OB_ERR_CUDA, "NCCL communicator: no usable CUDA device (%s)",
                      rc != cudaSuccess ? cudaGetErrorString(rc) : "device count is 0");
    }
    if (device < 0 || device >= ndev)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "NCCL communicator: device %d outside [0, %d)",
                      device, ndev);
    CUDA_CHECK(err, cudaSetDevice(device));
    CUDA_CHECK(err, cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    CUDA_CHECK(err, cudaMalloc((void **)&m->scratch, sizeof(float)));
    CUDA_CHECK(err, cudaMemset(m->scratch, 0, sizeof(float)));
    CUDA_CHECK(err, cudaDeviceSynchronize());
    return OB_OK;
}

/* Agrees over MPI on whether every rank set up its device, so that no rank waits forever in
 * NCCL's bootstrap for a rank that already failed. Returns this rank's own failure (already in
 * err) if it had one. */
static ob_status all_ready(MPI_Comm world, ob_status local, ob_err *err)
{
    int ok = local == OB_OK, all_ok = 0;
    int rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world);
    if (rc != MPI_SUCCESS) return ob__mpi_fail(err, rc, "MPI_Allreduce", __FILE__, __LINE__);
    if (local != OB_OK) return local;
    if (!all_ok)
        return OB_ERR(err, OB_ERR_COMM, "NCCL communicator: another rank failed to set up");
    return OB_OK;
}

/* Rank 0 makes the unique id and broadcasts it, with a flag so that the others learn when it
 * could not. */
static ob_status share_unique_id(MPI_Comm world, int rank, ncclUniqueId *id, ob_err *err)
{
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    ob_status st = OB_OK;
    if (rank == 0) {
        ncclResult_t nrc = ncclGetUniqueId(&msg.id);
        msg.ok = nrc == ncclSuccess;
        if (!msg.ok) st = nccl_fail(err, NULL, nrc, "ncclGetUniqueId", __FILE__, __LINE__);
    }
    int rc = MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, world);
    if (rc != MPI_SUCCESS)
        return ob__mpi_fail(err, rc, "MPI_Bcast of the NCCL unique id", __FILE__, __LINE__);
    if (st != OB_OK) return st;
    if (!msg.ok)
        return OB_ERR(err, OB_ERR_COMM, "NCCL communicator: rank 0 could not create the id");
    *id = msg.id;
    return OB_OK;
}

ob_status ob_comm_create_nccl(ob_comm **out, int device, ob_err *err)
{
    *out = NULL;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
        return OB_ERR(err, OB_ERR_STATE, "MPI is not initialised: call MPI_Init first");

    ob_status st = OB_OK;
    MPI_Comm world = MPI_COMM_NULL;
    ob_comm *c = ob__comm_alloc(&nccl_ops, "nccl", OB_MEM_DEVICE);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(m);
        ob_comm_destroy(c);
        return OB_ERR(err, OB_ERR_NOMEM, "NCCL communicator");
    }
    m->device = device;
    m->timeout = OB_COMM_DEFAULT_TIMEOUT;
    c->impl = m;

    /* A private duplicate with MPI_ERRORS_RETURN for the bootstrap only. */
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
    if (rc != MPI_SUCCESS) {
        st = ob__mpi_fail(err, rc, "MPI_Comm_dup", __FILE__, __LINE__);
        goto fail;
    }
    MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(world, &c->rank);
    MPI_Comm_size(world, &c->size);

    ncclUniqueId id;
    if ((st = all_ready(world, setup_local(m, device, err), err)) != OB_OK ||
        (st = share_unique_id(world, c->rank, &id, err)) != OB_OK)
        goto fail;

    ncclResult_t nrc = ncclCommInitRank(&m->comm, c->size, id, c->rank);
    if (nrc != ncclSuccess) {
        m->comm = NULL;
        st = nccl_fail(err, NULL, nrc, "ncclCommInitRank", __FILE__, __LINE__);
        goto fail;
    }
    c->stream = m->stream;
    MPI_Comm_free(&world);
    *out = c;
    return OB_OK;
fail:
    if (world != MPI_COMM_NULL) MPI_Comm_free(&world);
    ob_comm_destroy(c);
    return st;
}

ob_status ob_comm_local_device(int *device, ob_err *err)
{
    *device = -1;
    /* The collective part first, so that every rank reaches it whatever its devices. */
    MPI_Comm node = MPI_COMM_NULL;
    int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) return ob__mpi_fail(err, rc, "MPI_Comm_split_type", __FILE__, __LINE__);
    int local = 0;
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    int ndev = 0;
    cudaError_t crc = cudaGetDeviceCount(&ndev);
    if (crc != cudaSuccess || ndev == 0) {
        (void)cudaGetLastError();
        return OB_ERR(err, OB_ERR_CUDA, "no usable CUDA device on this node (%s)",
                      crc != cudaSuccess ? cudaGetErrorString(crc) : "device count is 0");
    }
    *device = local % ndev;
    return OB_OK;
}
