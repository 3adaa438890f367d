/* The fp16 gradient exchange ("f16sum"): the sum of one float vector per rank, sent as fp16
 * with block shifts (onebit/compress.h) instead of fp32, for half the bytes of the ring
 * allreduce. A ring, like the fp32 allreduce:
 *
 *   every rank:      the vector of n elements, padded with zeros to D = N*C (C a multiple of
 *                    B), is cut into N chunks
 *   reduce-scatter:  N-1 steps (ob_comm_shift); in step s rank r passes the partial sum of
 *                    chunk (r - s) mod N to its right neighbour, decodes the one it receives,
 *                    adds its own values of that chunk (fp32) and encodes the result; step 0
 *                    passes rank r's own chunk r. Chunk j is summed in the order j, j+1, ...,
 *                    j-1 (mod N) and ends, finished, on rank j-1.
 *   allgather:       every rank receives every finished chunk and decodes the same vector
 *
 * Every link carries one message in one direction per step (an alltoall sends N-1 messages
 * to N-1 peers at once, which a shaped link carries more slowly). Each partial sum is rounded
 * to a half once per hop: the first rank's values and the N-1 partial sums after it, so the
 * result is the exact sum to about N 2^-11 of the magnitudes involved, and bitwise identical
 * on every rank (the finished chunk is decoded by all, its owner included). There is no error
 * feedback and no state across calls: an exchange depends on its inputs only. Bytes per call
 * and rank: 2 (N-1) ob_f16_bytes(C, B) (ob_fcode_bytes for fp8), against the ring's
 * 2 (N-1)/N 4n. Buffers live in the
 * communicator's memory (host for MPI/self, device for NCCL); a world of one copies its
 * input. */
#ifndef ONEBIT_F16SUM_H
#define ONEBIT_F16SUM_H

#include "onebit/comm.h"
#include "onebit/compress.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_f16sum ob_f16sum;

/* The block size of the shifts: 256 elements (one int16 per 512 bytes of halves). */
#define OB_F16SUM_BLOCK 256

/* Creates an exchange for vectors of up to max_n elements over `comm` (borrowed: it must
 * outlive the exchange), blocks of OB_F16SUM_BLOCK. OB_ERR_INVALID_ARG for max_n 0,
 * OB_ERR_NOMEM. */
ob_status ob_f16sum_create(ob_f16sum **out, ob_comm *comm, size_t max_n, ob_err *err);
/* The same exchange with the elements in `code` (onebit/compress.h): OB_CODE_FP8 sends half
 * the bytes of fp16 again, each partial sum rounded to 4 significant bits per hop (about
 * N 2^-4 of the magnitudes involved), for a warm start's refit, whose gradients only
 * re-estimate v. OB_ERR_INVALID_ARG for an unknown code. */
ob_status ob_f16sum_create_code(ob_f16sum **out, ob_comm *comm, size_t max_n, ob_float_code code,
                                ob_err *err);
void ob_f16sum_destroy(ob_f16sum *f); /* accepts NULL */

/* out[0..n) = the sum over the ranks of in[0..n) (1 <= n <= max_n; in == out allowed).
 * Collective: every rank calls it with the same n. */
ob_status ob_f16sum_run(ob_f16sum *f, const float *in, float *out, size_t n, ob_err *err);

/* Bytes one rank sends for a vector of n elements. */
uint64_t ob_f16sum_bytes_per_call(const ob_f16sum *f, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_F16SUM_H */
