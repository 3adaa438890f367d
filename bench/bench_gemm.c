/* The models' matrix products: the engine's AVX-512 kernel against cblas_sgemm, in one process,
 * on the shapes the bench models run (bench/net/specs: the transformer's 4 x 32 tokens of width
 * 256, the MLP's batch of 64 through 784-1024-1024-10). Each linear layer takes three products a
 * step: the forward pass (N, T), the input's gradient (N, N) and the weights' gradient (T, N).
 *
 *   bench_gemm [REPS]     (median of REPS timed rounds, default 50)
 *
 * Prints per shape the milliseconds per call of each and the ratio, then the sums over a step of
 * each model. On a CPU without AVX-512 both columns are BLAS. The operands stay in cache from
 * call to call, which a model's do not: a step gains less than these ratios (docs/peers). */
#include "../engine/src/gemm.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char *model, *what;
    ob_gemm_op ta, tb;
    size_t m, n, k;
    float beta;
} shape;

static double time_one(ob_gemm_impl impl, const shape *s, const float *a, const float *b, float *c,
                       int reps)
{
    size_t lda = s->ta == OB_GEMM_N ? s->k : s->m, ldb = s->tb == OB_GEMM_N ? s->n : s->k;
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t) return -1.0;
    for (int i = 0; i < 3; i++) /* warm the caches and the allocator */
        ob__sgemm_using(impl, s->ta, s->tb, s->m, s->n, s->k, a, lda, b, ldb, s->beta, c, s->n);
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        for (int i = 0; i < 10; i++)
            ob__sgemm_using(impl, s->ta, s->tb, s->m, s->n, s->k, a, lda, b, ldb, s->beta, c, s->n);
        t[r] = (bench_now() - t0) / 10.0;
    }
    double med = bench_median(t, reps);
    free(t);
    return med;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 1) reps = 1;
    /* (m, n, k) of C = op(A) op(B): forward (rows, out, in), dinp (rows, in, out), dW (out, in,
     * rows). */
    enum { T_ROWS = 128, C = 256, M_ROWS = 64 };
    const size_t lin[][3] = {{T_ROWS, C, 3 * C},   {T_ROWS, C, C},    {T_ROWS, C, 4 * C},
                             {T_ROWS, 4 * C, C},   {T_ROWS, C, 256},  {M_ROWS, 784, 1024},
                             {M_ROWS, 1024, 1024}, {M_ROWS, 1024, 10}};
    const char *names[] = {"tf qkv",     "tf attproj",   "tf fc",         "tf fcproj",
                           "tf lm_head", "mlp 784-1024", "mlp 1024-1024", "mlp 1024-10"};
    shape shapes[3 * 8];
    size_t ns = 0, maxf = 0;
    for (size_t l = 0; l < 8; l++) {
        size_t rows = lin[l][0], in = lin[l][1], out = lin[l][2];
        const char *model = names[l][0] == 't' ? "transformer" : "mlp";
        shapes[ns++] = (shape){model, "forward", OB_GEMM_N, OB_GEMM_T, rows, out, in, 1.0f};
        shapes[ns++] = (shape){model, "dinp", OB_GEMM_N, OB_GEMM_N, rows, in, out, 0.0f};
        shapes[ns++] = (shape){model, "dW", OB_GEMM_T, OB_GEMM_N, out, in, rows, 1.0f};
        size_t f = (in > out ? in : out) * (in > rows ? in : rows);
        if (f > maxf) maxf = f;
    }
    float *a = malloc(maxf * sizeof *a), *b = malloc(maxf * sizeof *b),
          *c = malloc(maxf * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < maxf; i++) {
        a[i] = (float)((i * 7919u) % 1000u) / 1000.0f - 0.5f;
        b[i] = (float)((i * 104729u) % 1000u) / 1000.0f - 0.5f;
        c[i] = 0.0f;
    }
    printf("bench_gemm: kernel %s (AVX-512 %s), median of %d rounds\n",
           ob__sgemm_has_avx512() ? "avx512" : "blas", ob__sgemm_has_avx512() ? "yes" : "no", reps);
    printf("%-14s %-8s %5s %5s %5s %11s %11s %7s %8s\n", "layer", "product", "m", "n", "k",
           "blas [ms]", "avx512 [ms]", "ratio", "GFLOP/s");
    /* A step: the transformer's 2 layers run each block product twice, its head once; the MLP
     * runs each of its three layers once. */
    double step_blas[2] = {0, 0}, step_own[2] = {0, 0};
    for (size_t i = 0; i < ns; i++) {
        const shape *s = &shapes[i];
        double tb = time_one(OB_GEMM_BLAS, s, a, b, c, reps);
        double to = time_one(OB_GEMM_AVX512, s, a, b, c, reps);
        int mi = s->model[0] == 'm';
        double times = !mi && i < 12 ? 2.0 : 1.0;
        step_blas[mi] += times * tb;
        step_own[mi] += times * to;
        printf("%-14s %-8s %5zu %5zu %5zu %11.4f %11.4f %6.2fx %8.1f\n", names[i / 3], s->what,
               s->m, s->n, s->k, 1e3 * tb, 1e3 * to, tb / to,
               2.0 * (double)s->m * (double)s->n * (double)s->k / to * 1e-9);
    }
    printf("a step's products: transformer %.3f ms blas, %.3f ms avx512 (%.2fx); mlp %.3f ms "
           "blas, %.3f ms avx512 (%.2fx)\n",
           1e3 * step_blas[0], 1e3 * step_own[0], step_blas[0] / step_own[0], 1e3 * step_blas[1],
           1e3 * step_own[1], step_blas[1] / step_own[1]);
    free(a);
    free(b);
    free(c);
    return 0;
}
