/* The fp16 gradient exchange ("f16sum"): the sum of one float vector per rank, sent as fp16
 * with block shifts (onebit/compress.h) instead of fp32, for half the bytes of the ring
 * allreduce:
 *
 *   every rank:  the vector of n elements, padded with zeros to D = N*C (C a multiple of B),
 *                is encoded chunk by chunk, chunk j addressed to rank j
 *   alltoall:    rank j receives chunk j of every rank
 *   rank j:      decodes them and adds them in rank order (fp32), encodes the sum
 *   allgather:   every rank receives every encoded sum and decodes the same vector
 *
 * Each element is rounded to a half twice (at its sender and after the sum), so the result is
 * the exact sum to about 2^-11 of each block's largest value (relative), and bitwise identical
 * on every rank. There is no error feedback and no state across calls: an exchange depends on
 * its inputs only. Bytes per call and rank: 2 (N-1) ob_f16_bytes(C, B), against the ring's
 * 2 (N-1)/N 4n. Buffers live in the communicator's memory (host for MPI/self, device for
 * NCCL); a world of one copies its input. */
#ifndef ONEBIT_F16SUM_H
#define ONEBIT_F16SUM_H

#include "onebit/comm.h"

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
