/* Benchmark of the CPU compression kernels.
 *
 * For each size it times, on the same buffers in the same process:
 *   memcpy        copy of the n-float input (the bandwidth baseline: 8n bytes moved)
 *   compress      ob_compress_ef: read x and e, write e and the packed message (12n + n/8 bytes)
 *   decomp-avg    ob_decompress_average of N messages into n floats (N*(n/8) + 4n bytes)
 * and prints elements/s, GB/s of bytes moved, and each kernel's time relative to the memcpy.
 * Each figure is the median of R repetitions after one warm-up run.
 *
 * usage: bench_compress [--n ELEMENTS] [--block B] [--sources N] [--reps R] [--scale l1|l2] */
#include "onebit/compress.h"
#include "onebit/rng.h"

#include "bench_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *xalloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) {
        fprintf(stderr, "bench_compress: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    memset(p, 0, bytes);
    return p;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_compress [--n ELEMENTS] [--block B] [--sources N] [--reps R] "
                    "[--scale l1|l2]\n");
}

int main(int argc, char **argv)
{
    size_t n = (size_t)1 << 24, block = 2048, nsrc = 4;
    int reps = 9;
    ob_scale_kind scale = OB_SCALE_L1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--n"))
            n = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--block"))
            block = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--sources"))
            nsrc = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--scale") && (!strcmp(v, "l1") || !strcmp(v, "l2")))
            scale = !strcmp(v, "l2") ? OB_SCALE_L2 : OB_SCALE_L1;
        else {
            usage();
            return 2;
        }
        i++;
    }
    if (block == 0 || block % 32 || n == 0 || nsrc == 0 || reps < 1) {
        fprintf(stderr, "bench_compress: need block a multiple of 32, n, sources, reps > 0\n");
        return 2;
    }
    n = (n + block - 1) / block * block;

    float *x = xalloc(n * sizeof(float)), *e = xalloc(n * sizeof(float));
    float *dst = xalloc(n * sizeof(float)), *out = xalloc(n * sizeof(float));
    size_t msg = ob_packed_bytes(n, block);
    unsigned char *packed = xalloc(nsrc * msg);
    ob_rng rng;
    ob_rng_seed(&rng, 1, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = ob_rng_normal(&rng);
    for (size_t s = 0; s < nsrc; s++)
        ob_compress_ef(x, n, e, n, block, scale, packed + s * msg);

    double *t_copy = malloc((size_t)reps * sizeof(double));
    double *t_comp = malloc((size_t)reps * sizeof(double));
    double *t_avg = malloc((size_t)reps * sizeof(double));
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up, not recorded */
        double t0 = bench_now();
        memcpy(dst, x, n * sizeof(float));
        double t1 = bench_now();
        ob_compress_ef(x, n, e, n, block, scale, packed);
        double t2 = bench_now();
        ob_decompress_average(packed, nsrc, n, block, out);
        double t3 = bench_now();
        if (r >= 0) {
            t_copy[r] = t1 - t0;
            t_comp[r] = t2 - t1;
            t_avg[r] = t3 - t2;
        }
    }
    double tc = bench_median(t_copy, reps), tk = bench_median(t_comp, reps),
           ta = bench_median(t_avg, reps);
    double b_copy = 8.0 * (double)n, b_comp = 12.0 * (double)n + (double)msg;
    double b_avg = (double)nsrc * (double)msg + 4.0 * (double)n;

    printf("bench_compress: n=%zu (%.1f MiB of fp32), block=%zu, scale=%s, sources=%zu, "
           "median of %d\n",
           n, 4.0 * (double)n / (1 << 20), block, scale == OB_SCALE_L2 ? "l2" : "l1", nsrc, reps);
    printf("%-12s %12s %14s %10s %14s\n", "kernel", "time [ms]", "elements/s", "GB/s",
           "time / memcpy");
    printf("%-12s %12.3f %14.3e %10.2f %14.2f\n", "memcpy", tc * 1e3, (double)n / tc,
           b_copy / tc * 1e-9, 1.0);
    printf("%-12s %12.3f %14.3e %10.2f %14.2f\n", "compress", tk * 1e3, (double)n / tk,
           b_comp / tk * 1e-9, tk / tc);
    printf("%-12s %12.3f %14.3e %10.2f %14.2f\n", "decomp-avg", ta * 1e3, (double)n / ta,
           b_avg / ta * 1e-9, ta / tc);
    /* Keep the results observable so the work cannot be optimised away. */
    volatile float sink = dst[n / 2] + e[n / 3] + out[n / 5];
    (void)sink;
    free(x);
    free(e);
    free(dst);
    free(out);
    free(packed);
    free(t_copy);
    free(t_comp);
    free(t_avg);
    return 0;
}
