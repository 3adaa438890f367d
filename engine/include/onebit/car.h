/* The compressed allreduce ("car"): the average of one float vector per rank, exchanged as
 * 1-bit signs plus block scales with error feedback on both sides (1-bit Adam, Algorithm 1):
 *
 *   worker i:  u = x_i + e_i;  q_i = C(u);  e_i = u - q_i        (chunk j of q_i goes to rank j)
 *   alltoall:  rank j receives chunk j of every q_i
 *   server j:  w = (1/N) sum_i q_i[j] + e_srv;  q' = C(w);  e_srv = w - q'   (sum in rank order)
 *   allgather: every rank receives every q' and decodes the same average
 *
 * The vector of d elements is padded with zeros to D, a multiple of N*B; rank j serves chunk j
 * of C = D/N elements. The worker error has D elements, the server error C. Both start at zero
 * and persist across calls: they are state to checkpoint (ob_car_worker_error/server_error).
 * Buffers live in the communicator's memory (host for MPI/self, device for NCCL).
 *
 * Segments. The exchange may be cut into segments so that it can run piece by piece (the
 * optimizer's overlap with the backward pass): bounds 0 = b_0 < b_1 < ... < b_S = D, each a
 * multiple of N*B. Segment s is an exchange of its own: with L_s = (b_{s+1} - b_s) / N, rank j
 * serves [b_s + j L_s, b_s + (j+1) L_s), and its server error is its pieces laid end to end in
 * segment order (still C elements). One segment (the default) is the layout above. Every
 * quantity is computed per block of B elements (signs, scale, error), so the decoded average
 * and the error of every position are the same bits whatever the segments, and the same bytes
 * cross; only which rank keeps a position's server error, and the number of rounds, change. */
#ifndef ONEBIT_CAR_H
#define ONEBIT_CAR_H

#include "onebit/comm.h"
#include "onebit/compress.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_car ob_car;

/* Creates a compressed allreduce for vectors of d elements over `comm` (borrowed: it must
 * outlive the car). block must be a positive multiple of 32.
 *
 * scale OB_SCALE_UNIT makes C the stochastic unit-sign quantiser of onebit/compress.h (BinSGDM:
 * values in [-1, 1], +-1 on the wire, one bit an element and no scales): the worker's and the
 * server's quantisers then draw from the keys of ob_car_set_key, by position in the padded
 * vector, so the result is the same bits whatever the segments. */
ob_status ob_car_create(ob_car **out, ob_comm *comm, size_t d, size_t block, ob_scale_kind scale,
                        ob_err *err);
/* The hierarchical exchange (Gao et al., "hierarchical 1-bit all-reduce"): ranks_per_node m
 * ranks a node (rank r is local rank r mod m of node r / m; every node the same size), n = N /
 * m nodes. Piece l is the chunks k m + l (k = 0 .. n-1) of the flat layout. Rank r = k m + l
 *   1. sends piece l2 of its vector to local rank l2 and averages its node's pieces l in fp32
 *      (an alltoall inside the node, the sum in local-rank order, one division by m);
 *   2. runs the compressed allreduce of that average between the n ranks of local index l
 *      (a car over n C elements: the node's worker error on piece l, the server error of
 *      chunk r, as the flat layout's: a checkpoint's server errors mean the same in both);
 *   3. shares the servers' 1-bit messages inside the node (an allgather) and decodes every
 *      piece. Only 2 (n - 1) C / 8 bytes (one bit a chunk element, plus scales) cross between
 *      nodes per rank, the flat exchange's 2 (N - 1) C / 8 with N - 1 nodes' worth of peers
 *      replaced by n - 1.
 * The worker error keeps D elements by position, of which this rank holds its node's error on
 * piece l (zero elsewhere). One segment always (ob_car_set_segments keeps it). ranks_per_node
 * 0 or 1: ob_car_create (flat). Host communicators only (OB_ERR_UNSUPPORTED on a device).
 * Collective: it splits comm. */
ob_status ob_car_create_hier(ob_car **out, ob_comm *comm, size_t d, size_t block,
                             ob_scale_kind scale, int ranks_per_node, ob_err *err);
/* The ranks_per_node that a placement allows ob_car_create_hier: node[r] (n ints, borrowed) is
 * the node of rank r, as ob_comm_node_map gives it. m > 1 when there is more than one node,
 * every node holds m ranks and node k holds ranks k m .. k m + m - 1 (the numbering the
 * hierarchical exchange assumes); else 1, the flat exchange. why (cap bytes, the caller's; may
 * be NULL) says which, in a phrase: "2 nodes of 2 ranks", or why flat ("all 4 ranks on one
 * node", "nodes of uneven size: 3 ranks on the node of rank 0, 1 on the node of rank 3", "one
 * rank a node", "ranks not numbered node by node: rank 1 is not on the node of rank 0"). */
int ob_car_shape_of(const int *node, int n, char *why, size_t cap);
/* ob_car_shape_of for where comm's ranks run (ob_comm_node_map; why also names how that was
 * found). A device communicator gets 1 without asking: the hierarchical exchange runs on host
 * communicators only. Collective over a host communicator. Errors of ob_comm_node_map;
 * OB_ERR_NOMEM. */
ob_status ob_car_auto_ranks_per_node(ob_comm *comm, int *ranks_per_node, char *why, size_t cap,
                                     ob_err *err);
/* m of ob_car_create_hier, 1 for a flat car. */
int ob_car_ranks_per_node(const ob_car *car);

void ob_car_destroy(ob_car *car); /* accepts NULL */

size_t ob_car_size(const ob_car *car);        /* d */
size_t ob_car_padded_size(const ob_car *car); /* D */
size_t ob_car_chunk_size(const ob_car *car);  /* C = D / N */
size_t ob_car_block_size(const ob_car *car);  /* B */
/* Bytes one rank sends per call: 2 * (N-1) * ob_packed_bytes(C, B) (ob_usign_bytes(C) under
 * OB_SCALE_UNIT); hierarchical: 2 (n-1) such messages between nodes and, inside the node,
 * (m-1) pieces of n C floats and (m-1) n messages. */
uint64_t ob_car_bytes_per_call(const ob_car *car);

/* The draws of the next exchanges under OB_SCALE_UNIT (ignored by the other scales): a job's
 * seed and the round (an optimizer step). Rank r's worker quantiser draws from
 * ob_usign_key(seed, round, 1 + r), every server from ob_usign_key(seed, round, 0). */
void ob_car_set_key(ob_car *car, uint64_t seed, uint64_t round);

/* Runs one compressed allreduce: in (d elements, this rank's vector) -> out (d elements, the
 * decoded average, identical on every rank). in and out may be the same buffer. Collective:
 * every rank must call it. Runs the segments from the last to the first. */
ob_status ob_car_allreduce(ob_car *car, const float *in, float *out, ob_err *err);

/* Cuts the exchange into segments at cuts[0 .. n) (ascending, each in [0, d]; borrowed): each
 * cut is rounded up to a multiple of N*B, and 0, D and repeats add none, so there are at most
 * n + 1 segments. n 0: one segment. It changes which positions this rank's server error holds:
 * call it while the errors are zero or before restoring them. OB_ERR_INVALID_ARG for cuts out
 * of order or range; OB_ERR_NOMEM. */
ob_status ob_car_set_segments(ob_car *car, const size_t *cuts, size_t n, ob_err *err);
size_t ob_car_num_segments(const ob_car *car);
/* The bounds b_0 .. b_S (ob_car_num_segments + 1 values), owned by the car. */
const size_t *ob_car_segment_bounds(const ob_car *car);

/* The compressed allreduce of segment s only: in and out are whole vectors (d elements, may be
 * the same buffer), of which positions [b_s, min(b_{s+1}, d)) are read and written. Running
 * every segment once, in any order, is ob_car_allreduce. Collective: every rank must run the
 * same segments in the same order. */
ob_status ob_car_allreduce_segment(ob_car *car, size_t s, const float *in, float *out, ob_err *err);

/* The error-feedback buffers, owned by the car, for checkpointing and inspection: the worker
 * error (D elements) and this rank's server error chunk (C elements). Writable so that a
 * resumed run can restore them. */
float *ob_car_worker_error(ob_car *car);
float *ob_car_server_error(ob_car *car);

/* Sets both error buffers to zero. */
ob_status ob_car_reset_errors(ob_car *car, ob_err *err);

/* Multiplies every error by r at its position in the vector: the worker error's element i by
 * r[i] and each server error element by r at the position it serves, for i < d (r: d floats in
 * the car's kind of memory; the padding keeps its errors). The tracked variance with
 * precondition moves the residuals of m / den to a new denominator this way (r = den_old /
 * den_new). Local: no communication. */
ob_status ob_car_scale_errors(ob_car *car, const float *r, ob_err *err);

/* Seconds spent in each phase of ob_car_allreduce, summed over the calls made while timing was
 * on (wall clock, CLOCK_MONOTONIC, this rank only). The communication phases include the time
 * spent waiting for slower ranks. */
typedef struct ob_car_timing {
    uint64_t calls;     /* timed calls (of segment 0: one per whole exchange) */
    double compress_s;  /* worker: u = x + e, 1-bit chunks, new worker error */
    double alltoall_s;  /* exchange of the worker chunks */
    double server_s;    /* server: average of the received chunks, + e_srv, recompress */
    double allgather_s; /* exchange of the server chunks */
    double decode_s;    /* every server chunk decoded into the output */
} ob_car_timing;

/* Turns the per-phase timing on or off (off after create) and clears the sums. Timing adds two
 * clock reads per phase; on a device communicator it also synchronises the stream after every
 * phase, so that the time lands in the phase that spent it. */
void ob_car_set_timing(ob_car *car, int on);
/* Copies the sums since timing was last turned on (all zero if it never was). */
void ob_car_get_timing(const ob_car *car, ob_car_timing *out);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_CAR_H */
