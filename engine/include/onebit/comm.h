/* Communicators: the collectives data-parallel training needs, behind one interface.
 *
 * Backends:
 *   - MPI  (host memory): ranks of MPI_COMM_WORLD; the CPU path and the rank bootstrap.
 *   - self (host memory): a world of one process, no MPI needed (tools and unit tests).
 *   - NCCL (device memory, builds with CUDA only): collectives on a CUDA stream; the NCCL
 *     unique id is broadcast over MPI.
 *
 * Every call counts the bytes this rank sends, so communication volume is measured rather than
 * assumed. What is counted per call, with N ranks:
 *   allreduce_sum_f32(count):  the ring algorithm's 2*(N-1)/N * 4*count bytes (the MPI backend
 *                              runs exactly that ring: a reduce-scatter then an allgather);
 *   alltoall(bytes_per_peer):  (N-1) * bytes_per_peer (the block for itself is a local copy);
 *   allgather(bytes_per_peer): (N-1) * bytes_per_peer;
 *   bcast(bytes):              (N-1) * bytes at the root, 0 elsewhere;
 *   barrier:                   0.
 * A world of one sends nothing.
 *
 * The counters are guarded by a lock, so they stay exact when another thread communicates
 * (ob_comm_any_thread).
 *
 * All collectives are blocking from the caller's point of view (the NCCL backend synchronises
 * its stream before returning) and must be called by every rank in the same order. */
#ifndef ONEBIT_COMM_H
#define ONEBIT_COMM_H

#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_comm ob_comm;

/* Where a communicator's buffers must live. */
typedef enum ob_mem_kind {
    OB_MEM_HOST = 0,
    OB_MEM_DEVICE = 1,
} ob_mem_kind;

/* Collective kinds, to index the per-kind counters. */
typedef enum ob_comm_op {
    OB_COMM_ALLREDUCE = 0,
    OB_COMM_ALLTOALL,
    OB_COMM_ALLGATHER,
    OB_COMM_BCAST,
    OB_COMM_BARRIER,
    OB_COMM_CONTROL, /* ob_comm_control_start: calls counted; its few bytes are not */
    OB_COMM_SHIFT,
    OB_COMM_NUM_OPS
} ob_comm_op;

typedef struct ob_comm_counters {
    uint64_t bytes_sent;                /* total over every collective */
    uint64_t op_bytes[OB_COMM_NUM_OPS]; /* per collective kind */
    uint64_t op_calls[OB_COMM_NUM_OPS];
} ob_comm_counters;

/* Creates an MPI communicator over a duplicate of MPI_COMM_WORLD. MPI must be initialised by
 * the caller (MPI_Init, or MPI_Init_thread with MPI_THREAD_SERIALIZED or more for
 * ob_comm_any_thread) and finalised after ob_comm_destroy. Errors of MPI calls are returned,
 * not fatal. */
ob_status ob_comm_create_mpi(ob_comm **out, ob_err *err);

/* The MPI transport settings onebit's exchanges want, put into the environment before the
 * caller's MPI_Init (each only where the environment, or an mpirun --mca, sets none): Open
 * MPI's TCP eager limit at 2 MiB (btl_tcp_eager_limit, btl_tcp_rndv_eager_limit; 64 KiB by
 * default), so that the rings' chunks go without the rendezvous handshake. Other MPI libraries
 * ignore these variables. Not thread-safe (setenv): call it first thing in main or before
 * starting MPI. */
void ob_comm_mpi_env_defaults(void);

/* Creates a world of one: rank 0 of size 1, host memory, no MPI calls. */
ob_status ob_comm_create_self(ob_comm **out, ob_err *err);

/* Creates an NCCL communicator on CUDA device `device` over the ranks of MPI_COMM_WORLD (MPI
 * initialised by the caller). Buffers passed to it must be device memory. Returns
 * OB_ERR_UNSUPPORTED in a build without CUDA, OB_ERR_CUDA when no usable device exists. */
ob_status ob_comm_create_nccl(ob_comm **out, int device, ob_err *err);

/* The CUDA device for this rank when every node runs one rank per GPU: its rank among the
 * ranks of MPI_COMM_WORLD on the same node (MPI_COMM_TYPE_SHARED) modulo the node's device
 * count. Collective over MPI_COMM_WORLD. OB_ERR_CUDA when there is no usable device,
 * OB_ERR_UNSUPPORTED in a build without CUDA. */
ob_status ob_comm_local_device(int *device, ob_err *err);

/* Splits comm: the ranks that pass the same color (>= 0) form one new communicator, ranked by
 * key (ties by rank in comm), of the same backend; its bytes are counted on it and on comm
 * (so comm's counters keep the whole traffic of the rank). Collective
 * over comm. The new communicator must be destroyed before the one it came from. MPI and self
 * only (OB_ERR_UNSUPPORTED for nccl). */
ob_status ob_comm_split(ob_comm *comm, int color, int key, ob_comm **out, ob_err *err);

/* The environment variable through which a launcher may say where the ranks run
 * (ob_comm_node_map). */
#define OB_COMM_NODES_ENV "ONEBIT_RANKS_PER_NODE"

/* Which node every rank of comm runs on: node[r] for r = 0 .. ob_comm_size - 1 (a caller's
 * array of that many ints), the lowest rank of comm on rank r's node, the same on every rank.
 * Each rank finds its own node and the answers are allgathered (4 (N - 1) bytes counted as an
 * allgather). Collective over comm.
 *
 * A rank finds its node from OB_COMM_NODES_ENV when it is set and comm was not split from
 * another (it speaks of the world's ranks): "M", M ranks a node in rank order (the last node
 * may hold fewer), or "M1,M2,...", the ranks of each node in rank order, summing to the
 * ranks of comm. That is for a launcher that knows better than the machine: the network
 * namespaces of bench/net are "hosts" in one kernel, where MPI sees one node. Otherwise the
 * backend says: MPI groups the ranks that share memory (MPI_Comm_split_type with
 * MPI_COMM_TYPE_SHARED); self is one node. *source (may be NULL) is set to a static string
 * naming which: OB_COMM_NODES_ENV, "MPI_COMM_TYPE_SHARED" or "self". OB_ERR_INVALID_ARG for a
 * malformed variable, OB_ERR_UNSUPPORTED for nccl. */
ob_status ob_comm_node_map(ob_comm *comm, int *node, const char **source, ob_err *err);

/* Frees the communicator (not MPI itself). Accepts NULL. */
void ob_comm_destroy(ob_comm *comm);

int ob_comm_rank(const ob_comm *comm);
int ob_comm_size(const ob_comm *comm);
const char *ob_comm_backend(const ob_comm *comm); /* "mpi", "self" or "nccl" */
ob_mem_kind ob_comm_memory(const ob_comm *comm);
/* The CUDA stream (a cudaStream_t) the NCCL backend runs on; NULL for host backends. */
void *ob_comm_stream(const ob_comm *comm);

/* 1 when the collectives may be called from a thread other than the one that created the
 * communicator, one thread at a time (the caller guarantees that no two threads are inside
 * this communicator, or MPI, at once): MPI initialised with MPI_THREAD_SERIALIZED or more
 * (MPI_Query_thread at creation); always for self, which makes no MPI calls; 0 for nccl.
 * The byte counters are safe to read from any thread at any time. */
int ob_comm_any_thread(const ob_comm *comm);

/* In-place sum of `count` floats over all ranks; every rank ends with bitwise identical values. */
ob_status ob_comm_allreduce_sum_f32(ob_comm *comm, float *buf, size_t count, ob_err *err);

/* Rank r sends bytes [p*bytes_per_peer, (p+1)*bytes_per_peer) of `send` to rank p and receives
 * rank p's block for it at the same offset of `recv`. send and recv must not overlap. */
ob_status ob_comm_alltoall(ob_comm *comm, const void *send, void *recv, size_t bytes_per_peer,
                           ob_err *err);

/* Every rank contributes `bytes_per_peer` bytes; recv receives rank p's block at offset
 * p*bytes_per_peer. send may point at this rank's own block inside recv. */
ob_status ob_comm_allgather(ob_comm *comm, const void *send, void *recv, size_t bytes_per_peer,
                            ob_err *err);

/* One step of a ring: rank r sends `bytes` bytes of `send` to rank (r + 1) mod N and receives
 * rank (r - 1) mod N's into `recv` (send and recv must not overlap). Every link carries one
 * message, in one direction: the schedule a bandwidth-limited network wants (the fp16
 * exchange's reduce-scatter, onebit/f16sum.h). */
ob_status ob_comm_shift(ob_comm *comm, const void *send, void *recv, size_t bytes, ob_err *err);

/* Broadcasts `bytes` bytes of buf from rank `root` to every rank. */
ob_status ob_comm_bcast(ob_comm *comm, void *buf, size_t bytes, int root, ob_err *err);

ob_status ob_comm_barrier(ob_comm *comm, ob_err *err);

#define OB_COMM_CONTROL_MAX 8

/* A control reduction that does not hold the caller up: starts summing n (1 ..
 * OB_COMM_CONTROL_MAX) int32 values (copied) over the ranks in the background;
 * ob_comm_control_finish waits for it and writes the n sums. For small flags every rank must
 * agree on (a stop request, checkpoint progress) without paying a collective's latency every
 * step: start one at the end of a step, finish it at the end of the next. At most one is in
 * flight per communicator; like every collective, all ranks start them in the same order
 * relative to their other collectives. Host-memory backends only (OB_ERR_UNSUPPORTED for
 * nccl); OB_ERR_STATE when one is already in flight (start) or none is (finish). */
ob_status ob_comm_control_start(ob_comm *comm, const int32_t *values, int n, ob_err *err);
ob_status ob_comm_control_finish(ob_comm *comm, int32_t *sums, ob_err *err);

/* 1 while a control reduction is in flight. */
int ob_comm_control_pending(const ob_comm *comm);

/* Snapshot of the byte and call counters since creation. */
void ob_comm_get_counters(const ob_comm *comm, ob_comm_counters *out);
/* Bytes sent since creation (the same as counters.bytes_sent). */
uint64_t ob_comm_bytes_sent(const ob_comm *comm);

/* Seconds a collective on a device communicator may wait before the communicator is aborted
 * and the call fails with OB_ERR_COMM (later calls then fail with OB_ERR_STATE): a peer that
 * died or hangs ends the job instead of blocking it. Asynchronous NCCL errors abort it the same
 * way at once. 0: no limit. The default is OB_COMM_DEFAULT_TIMEOUT. Host backends return
 * OB_ERR_UNSUPPORTED: MPI has no such limit, and a dead MPI rank ends the job through mpirun
 * and the coordinator's supervision. */
#define OB_COMM_DEFAULT_TIMEOUT 300.0
ob_status ob_comm_set_timeout(ob_comm *comm, double seconds, ob_err *err);

/* Ends every rank of the job (MPI_Abort for MPI-based backends) with `code`. For a rank that
 * hit an unrecoverable error while the others wait in a collective. Does not return for MPI. */
void ob_comm_abort(ob_comm *comm, int code);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_COMM_H */
