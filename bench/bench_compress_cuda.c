/* Benchmark of the CUDA compression and optimizer kernels and of the compressed allreduce on
 * NCCL.
 *
 * Part 1, one GPU: for each size, on the same device buffers in the same run, times with CUDA
 * events
 *   d2d copy     cudaMemcpyAsync of the n-float input (the bandwidth baseline: 8n bytes moved)
 *   compress     ob_cuda_compress_ef: read x and e, write e and the packed message (12n + n/8 + ..)
 *   decompress   ob_cuda_decompress of one message into n floats (n/8 + 4n/B + 4n bytes)
 *   decomp-avg   ob_cuda_decompress_average of S messages (S * msg + 4n bytes)
 *   adam         ob_cuda_adam_update: read x m v g, write x m v (28n bytes)
 *   momentum     ob_cuda_momentum_update: read m g, write m (12n)
 *   frozen       ob_cuda_frozen_update: read x m den, write x (16n)
 *   mom-precond  ob_cuda_momentum_precondition: read m g den, write m p (20n)
 *   precond-apply ob_cuda_precondition_apply: read x p den, write m x (20n)
 *   refresh      ob_cuda_refresh_update: read x m v den g, write x m v den (36n)
 *   f16-encode   ob_cuda_f16_encode, blocks of 256: read x, write the fp16 message (4n + ~2n)
 *   f16-dec-add  ob_cuda_f16_decode_add (a ring hop): read the message and x, write n floats
 *   l1-norm      ob_cuda_l1_norm, with its copy of the result to the host (4n)
 *   avg-compress ob_cuda_average_compress_ef, the server's step: the average of S messages
 *                plus e recompressed (S * msg + 8n + msg; blocks over 2048: decomp-avg into a
 *                buffer, then compress, as the compressed allreduce runs them)
 * and prints elements/s, GB/s of bytes moved, each kernel's time relative to the copy, and its
 * GB/s as a fraction of the copy's (1.0: as fast as memory allows).
 *
 * Part 2, every rank (rank r on device r % device_count; run under mpirun for more than one):
 * the compressed allreduce (ob_car_allreduce) against the fp32 allreduce (ncclAllReduce via
 * ob_comm_allreduce_sum_f32) of the same d floats, for d = 2^20 .. 2^max-log2: time (the
 * slowest rank's median), algbw = 4d / time, bytes each rank sent, and the time ratio.
 *
 * Each figure is the median of R repetitions after one warm-up run.
 *
 * usage: bench_compress_cuda [--n ELEMENTS] [--block B] [--sources S] [--reps R]
 *                            [--scale l1|l2] [--max-log2 K] [--no-allreduce] */
#include "onebit/car.h"
#include "onebit/comm.h"
#include "onebit/compress.h"
#include "onebit/compress_cuda.h"
#include "onebit/f16sum.h"
#include "onebit/optim_kernels.h"
#include "onebit/rng.h"

#include "bench_util.h"

#include <cuda_runtime.h>
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank;

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_compress_cuda [rank %d]: %s: %s\n", g_rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t rc_ = (call);                                                                  \
        if (rc_ != cudaSuccess) die(#call, cudaGetErrorString(rc_));                               \
    } while (0)

#define OB_OK_OR_DIE(call)                                                                         \
    do {                                                                                           \
        ob_err err_ = {0};                                                                         \
        (void)err_;                                                                                \
        if ((call) != OB_OK) die(#call, err_.msg);                                                 \
    } while (0)

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    ob_err err = {0};
    if (ob_cuda_alloc(&p, bytes, &err) != OB_OK) die("ob_cuda_alloc", err.msg);
    return p;
}

static float *random_host(size_t n, uint64_t seed)
{
    float *v = malloc(n * sizeof(float));
    if (!v) die("malloc", "out of host memory");
    ob_rng rng;
    ob_rng_seed(&rng, seed, (uint64_t)g_rank);
    for (size_t i = 0; i < n; i++)
        v[i] = ob_rng_normal(&rng);
    return v;
}

typedef struct opts {
    size_t n, block, nsrc;
    int reps, max_log2, allreduce;
    ob_scale_kind scale;
} opts;

/* ---- part 1: kernels against a device-to-device copy ------------------------------------ */

/* Device buffers of part 1, n floats each (packed: S messages). */
typedef struct kbufs {
    float *x, *e, *dst, *out, *m, *v, *den;
    unsigned char *packed;
} kbufs;

#define NUM_KERNELS 14

/* Times kernel `which` (see the top of the file, in that order) once with events on s. */
static double time_kernel(int which, const opts *o, const kbufs *k, cudaStream_t s, cudaEvent_t a,
                          cudaEvent_t b)
{
    size_t n = o->n;
    ob_err err = {0};
    ob_status st = OB_OK;
    float *x = k->x, *e = k->e, *dst = k->dst, *out = k->out;
    unsigned char *packed = k->packed;
    ob_adam_coeffs c;
    ob_adam_coeffs_init(&c, 0.9, 0.999, 1e-8, 0.0, 1, 10, 1e-6f, 1);
    double l1 = 0.0;
    CUDA_OK(cudaEventRecord(a, s));
    switch (which) {
    case 0:
        CUDA_OK(cudaMemcpyAsync(dst, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
        break;
    case 1:
        st = ob_cuda_compress_ef(x, n, e, n, o->block, o->scale, packed, s, &err);
        break;
    case 2:
        st = ob_cuda_decompress(packed, n, o->block, out, s, &err);
        break;
    case 3:
        st = ob_cuda_decompress_average(packed, o->nsrc, n, o->block, out, s, &err);
        break;
    case 4: /* x: dst, m: out, v: v, g: x (tiny steps keep every value finite) */
        st = ob_cuda_adam_update(dst, out, k->v, x, n, &c, s, &err);
        break;
    case 5:
        st = ob_cuda_momentum_update(k->m, x, n, 0.9f, 0.1f, s, &err);
        break;
    case 6:
        st = ob_cuda_frozen_update(dst, k->m, k->den, n, 1e-6f, 0.0f, 1.0f, s, &err);
        break;
    case 7:
        st = ob_cuda_momentum_precondition(k->m, out, x, k->den, n, 0.9f, 0.1f, s, &err);
        break;
    case 8:
        st = ob_cuda_precondition_apply(dst, k->m, out, k->den, n, 1e-6f, 0.0f, 1.0f, s, &err);
        break;
    case 9:
        st = ob_cuda_refresh_update(dst, k->m, k->v, k->den, x, n, &c, 0.99f, 0.01f, 1.0f, s, &err);
        break;
    case 10: /* the message into e, which no later kernel but the next reads */
        st = ob_cuda_f16_encode(x, n, n, OB_F16SUM_BLOCK, e, s, &err);
        break;
    case 11:
        st = ob_cuda_f16_decode_add(e, n, OB_F16SUM_BLOCK, x, n, out, s, &err);
        break;
    case 12:
        st = ob_cuda_l1_norm(k->v, n, &l1, s, &err);
        break;
    default: /* the message into dst, which only this kernel writes as bytes */
        if (o->block <= OB_CUDA_AVERAGE_COMPRESS_MAX_BLOCK) {
            st = ob_cuda_average_compress_ef(packed, o->nsrc, e, n, o->block, o->scale, dst, s,
                                             &err);
        } else {
            st = ob_cuda_decompress_average(packed, o->nsrc, n, o->block, out, s, &err);
            if (st == OB_OK)
                st = ob_cuda_compress_ef(out, n, e, n, o->block, o->scale, dst, s, &err);
        }
        break;
    }
    if (st != OB_OK) die("kernel", err.msg);
    CUDA_OK(cudaEventRecord(b, s));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0.0f;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    return 1e-3 * (double)ms;
}

static void bench_kernels(const opts *o)
{
    size_t n = o->n, msg = ob_packed_bytes(n, o->block), fb = n * sizeof(float);
    float *hx = random_host(n, 1);
    kbufs k = {dev_alloc(fb), dev_alloc(fb), dev_alloc(fb), dev_alloc(fb),
               dev_alloc(fb), dev_alloc(fb), dev_alloc(fb), dev_alloc(o->nsrc * msg)};
    cudaStream_t s;
    cudaEvent_t a, b;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    OB_OK_OR_DIE(ob_cuda_memcpy(k.x, hx, fb, s, &err_));
    for (size_t i = 0; i < o->nsrc; i++) /* S distinct messages for the average */
        OB_OK_OR_DIE(
            ob_cuda_compress_ef(k.x, n, k.e, n, o->block, o->scale, k.packed + i * msg, s, &err_));
    OB_OK_OR_DIE(ob_cuda_frozen_den(k.den, k.x, n, 1.0f, s, &err_)); /* sqrt(x) + 1: no zeros */
    OB_OK_OR_DIE(ob_cuda_sync(s, &err_));

    const char *names[NUM_KERNELS] = {"d2d copy",      "compress",    "decompress", "decomp-avg",
                                      "adam",          "momentum",    "frozen",     "mom-precond",
                                      "precond-apply", "refresh",     "f16-encode", "f16-dec-add",
                                      "l1-norm",       "avg-compress"};
    double dn = (double)n, f16 = (double)ob_f16_bytes(n, OB_F16SUM_BLOCK);
    double bytes[NUM_KERNELS] = {8.0 * dn,
                                 12.0 * dn + (double)msg,
                                 (double)msg + 4.0 * dn,
                                 (double)o->nsrc * (double)msg + 4.0 * dn,
                                 28.0 * dn,
                                 12.0 * dn,
                                 16.0 * dn,
                                 20.0 * dn,
                                 20.0 * dn,
                                 36.0 * dn,
                                 4.0 * dn + f16,
                                 f16 + 8.0 * dn,
                                 4.0 * dn,
                                 (double)o->nsrc * (double)msg + 8.0 * dn + (double)msg};
    double t[NUM_KERNELS];
    double *samples = malloc((size_t)o->reps * sizeof(double));
    for (int j = 0; j < NUM_KERNELS; j++) {
        time_kernel(j, o, &k, s, a, b); /* warm-up */
        for (int r = 0; r < o->reps; r++)
            samples[r] = time_kernel(j, o, &k, s, a, b);
        t[j] = bench_median(samples, o->reps);
    }
    printf("kernels: n=%zu (%.1f MiB of fp32), block=%zu, scale=%s, sources=%zu, median of %d\n", n,
           4.0 * dn / (1 << 20), o->block, o->scale == OB_SCALE_L2 ? "l2" : "l1", o->nsrc, o->reps);
    printf("  %-13s %12s %14s %10s %12s %14s\n", "kernel", "time [ms]", "elements/s", "GB/s",
           "time / copy", "GB/s / copy");
    double copy_bw = bytes[0] / t[0];
    for (int j = 0; j < NUM_KERNELS; j++)
        printf("  %-13s %12.4f %14.3e %10.1f %12.2f %14.2f\n", names[j], t[j] * 1e3, dn / t[j],
               bytes[j] / t[j] * 1e-9, t[j] / t[0], bytes[j] / t[j] / copy_bw);
    fflush(stdout);
    free(samples);
    free(hx);
    CUDA_OK(cudaEventDestroy(a));
    CUDA_OK(cudaEventDestroy(b));
    CUDA_OK(cudaStreamDestroy(s));
    void *bufs[] = {k.x, k.e, k.dst, k.out, k.m, k.v, k.den, k.packed};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        ob_cuda_free(bufs[i]);
}

/* ---- part 2: compressed allreduce against ncclAllReduce --------------------------------- */

/* Median over reps of the slowest rank's time for one call of `car` (or the plain allreduce
 * when car is NULL). */
static double time_allreduce(ob_comm *c, ob_car *car, float *buf, float *out, size_t d, int reps)
{
    double *samples = malloc((size_t)reps * sizeof(double));
    for (int r = -1; r < reps; r++) {
        ob_err err = {0};
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        ob_status st = car ? ob_car_allreduce(car, buf, out, &err)
                           : ob_comm_allreduce_sum_f32(c, buf, d, &err);
        double dt = MPI_Wtime() - t0, worst = 0.0;
        if (st != OB_OK) die(car ? "ob_car_allreduce" : "ob_comm_allreduce_sum_f32", err.msg);
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r >= 0) samples[r] = worst;
    }
    double t = bench_median(samples, reps);
    free(samples);
    return t;
}

static void bench_allreduce(const opts *o, int size)
{
    int ndev = ob_cuda_device_count();
    ob_comm *c = NULL;
    ob_err err = {0};
    if (ob_comm_create_nccl(&c, g_rank % ndev, &err) != OB_OK) die("ob_comm_create_nccl", err.msg);
    if (g_rank == 0) {
        printf("allreduce: %d rank(s), block=%zu, scale=%s, median of %d (slowest rank)\n", size,
               o->block, o->scale == OB_SCALE_L2 ? "l2" : "l1", o->reps);
        printf("  %12s %14s %14s %12s %12s %16s %16s %10s\n", "d", "car [ms]", "nccl [ms]",
               "car algbw", "nccl algbw", "car bytes/rank", "nccl bytes/rank", "nccl/car");
        fflush(stdout);
    }
    for (int k = 20; k <= o->max_log2; k += 2) {
        size_t d = (size_t)1 << k;
        float *hx = random_host(d, 2 + (uint64_t)k);
        float *buf = dev_alloc(d * sizeof(float)), *out = dev_alloc(d * sizeof(float));
        OB_OK_OR_DIE(ob_cuda_memcpy(buf, hx, d * sizeof(float), NULL, &err_));
        OB_OK_OR_DIE(ob_cuda_sync(NULL, &err_));
        ob_car *car = NULL;
        if (ob_car_create(&car, c, d, o->block, o->scale, &err) != OB_OK)
            die("ob_car_create", err.msg);

        uint64_t b0 = ob_comm_bytes_sent(c);
        double tc = time_allreduce(c, car, buf, out, d, o->reps);
        uint64_t car_bytes = (ob_comm_bytes_sent(c) - b0) / (uint64_t)(o->reps + 1);
        b0 = ob_comm_bytes_sent(c);
        double tn = time_allreduce(c, NULL, buf, out, d, o->reps);
        uint64_t nccl_bytes = (ob_comm_bytes_sent(c) - b0) / (uint64_t)(o->reps + 1);
        if (g_rank == 0) {
            printf("  %12zu %14.3f %14.3f %9.1f GB/s %7.1f GB/s %16llu %16llu %10.2f\n", d,
                   tc * 1e3, tn * 1e3, 4.0 * (double)d / tc * 1e-9, 4.0 * (double)d / tn * 1e-9,
                   (unsigned long long)car_bytes, (unsigned long long)nccl_bytes, tn / tc);
            fflush(stdout);
        }
        ob_car_destroy(car);
        ob_cuda_free(buf);
        ob_cuda_free(out);
        free(hx);
    }
    ob_comm_destroy(c);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_compress_cuda [--n ELEMENTS] [--block B] [--sources S] "
                    "[--reps R] [--scale l1|l2] [--max-log2 K] [--no-allreduce]\n");
}

static int parse(int argc, char **argv, opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-allreduce")) {
            o->allreduce = 0;
            continue;
        }
        if (!v) return -1;
        if (!strcmp(a, "--n"))
            o->n = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--block"))
            o->block = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--sources"))
            o->nsrc = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--reps"))
            o->reps = atoi(v);
        else if (!strcmp(a, "--max-log2"))
            o->max_log2 = atoi(v);
        else if (!strcmp(a, "--scale") && (!strcmp(v, "l1") || !strcmp(v, "l2")))
            o->scale = !strcmp(v, "l2") ? OB_SCALE_L2 : OB_SCALE_L1;
        else
            return -1;
        i++;
    }
    if (o->block == 0 || o->block % 32 || o->n == 0 || o->nsrc == 0 || o->reps < 1 ||
        o->max_log2 < 20 || o->max_log2 > 34)
        return -1;
    o->n = (o->n + o->block - 1) / o->block * o->block;
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    opts o = {.n = (size_t)1 << 28,
              .block = 2048,
              .nsrc = 4,
              .reps = 20,
              .max_log2 = 28,
              .allreduce = 1,
              .scale = OB_SCALE_L1};
    if (parse(argc, argv, &o) != 0) {
        if (g_rank == 0) usage();
        MPI_Finalize();
        return 2;
    }
    int ndev = ob_cuda_device_count();
    if (ndev == 0) {
        if (g_rank == 0) fprintf(stderr, "bench_compress_cuda: no CUDA device\n");
        MPI_Finalize();
        return 1;
    }
    CUDA_OK(cudaSetDevice(g_rank % ndev));
    if (g_rank == 0) {
        struct cudaDeviceProp prop;
        CUDA_OK(cudaGetDeviceProperties(&prop, 0));
        printf("bench_compress_cuda: %s, %d rank(s), %d device(s)\n", prop.name, size, ndev);
        bench_kernels(&o);
    }
    if (o.allreduce) {
        if (size > ndev) {
            if (g_rank == 0)
                printf("allreduce: skipped, %d ranks but %d device(s) (NCCL: one rank per GPU)\n",
                       size, ndev);
        } else {
            bench_allreduce(&o, size);
        }
    }
    MPI_Finalize();
    return 0;
}
