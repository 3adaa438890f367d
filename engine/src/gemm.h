/* Single-precision matrix products of the CPU models (internal).
 *
 * ob__sgemm computes C = op(A) op(B) + beta C for row-major matrices, op(A) M x K, op(B) K x N,
 * C M x N, with beta 0 (C is only written: it may hold anything, NaN included) or 1. On a CPU
 * with AVX-512 it runs the engine's own kernel; elsewhere, or with ONEBIT_GEMM=blas in the
 * environment, it calls cblas_sgemm.
 *
 * The kernel's arithmetic is fixed by (M, N, K) alone: each element of C is the sum of its K
 * products taken in order of k with one fused multiply-add each, in blocks of OB_GEMM_KC added to
 * C block after block. So a product gives the same bits at every call, in every process and on
 * every AVX-512 machine, whatever thread or tile it runs on; exact resume depends on that. It
 * rounds differently from a BLAS library, as libraries do among themselves. */
#ifndef ONEBIT_GEMM_H
#define ONEBIT_GEMM_H

#include <stddef.h>

typedef enum { OB_GEMM_N = 0, OB_GEMM_T = 1 } ob_gemm_op;

typedef enum {
    OB_GEMM_AUTO = 0, /* the kernel where the CPU has AVX-512 and ONEBIT_GEMM is not "blas" */
    OB_GEMM_AVX512,   /* the kernel; BLAS on a CPU without AVX-512 */
    OB_GEMM_BLAS,     /* cblas_sgemm */
} ob_gemm_impl;

#define OB_GEMM_KC 256

void ob__sgemm(ob_gemm_op ta, ob_gemm_op tb, size_t m, size_t n, size_t k, const float *a,
               size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc);

/* The same with the implementation named (benchmarks and tests compare the two). */
void ob__sgemm_using(ob_gemm_impl impl, ob_gemm_op ta, ob_gemm_op tb, size_t m, size_t n, size_t k,
                     const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                     size_t ldc);

/* What OB_GEMM_AUTO runs in this process: OB_GEMM_AVX512 or OB_GEMM_BLAS. */
ob_gemm_impl ob__sgemm_auto(void);

/* Whether this CPU runs the AVX-512 kernel at all. */
int ob__sgemm_has_avx512(void);

#endif
