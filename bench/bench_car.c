/* Benchmark of the compressed allreduce against the fp32 ring allreduce, on model-sized
 * buffers, with the compressed allreduce's time split into its phases. Run under mpirun with
 * any number of ranks, over any network (bench/net/run.sh runs it across network namespaces
 * with shaped links).
 *
 * For a vector of d floats (random normal values, a new draw on every call) it times:
 *   fp32    ob_comm_allreduce_sum_f32: the ring allreduce that Adam's warmup uses
 *   fp16    ob_f16sum_run: the warmup's fp16 exchange (gradient_exchange: fp16), a ring of
 *           fp16 partial sums, then an allgather of halves
 *   fp8     the same exchange with one byte an element (gradient_exchange: fp8, the default
 *           warmup of onebit_adam)
 *   1-bit   ob_car_allreduce, with ob_car_set_timing on: compress, alltoall, server
 *           (decompress-average + recompress), allgather, decode
 * Every timed call starts after a barrier; its time is the slowest rank's. Figures are the
 * median over the timed calls (min and max beside it); the phase split is the mean over calls
 * and ranks. Bytes are the communicator's counters for one call of this rank, next to the
 * formulas of onebit/comm.h and onebit/car.h; "link" is those bytes over the median time, the
 * rate each rank's link carried.
 *
 * usage: bench_car [--d ELEMENTS] [--block B] [--iters K] [--warmup W] [--format text|json]
 *                  [--skip-fp32]   (only the compressed allreduce; fp32, fp16 and fp8 print as 0)
 *                  [--ranks-per-node M]  the hierarchical exchange, M ranks a node (0: flat;
 *                                        auto: found where the ranks run, said on stderr)
 *                  [--scale l1|unit]     1-bit Adam's signs and scales, or BinSGDM's unit signs
 *                                        (values then uniform in [-1, 1)) */
#include "onebit/car.h"
#include "onebit/comm.h"
#include "onebit/f16sum.h"
#include "onebit/rng.h"

#include "bench_util.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_opts {
    size_t d, block;
    int iters, warmup, json, skip_fp32, ranks_per_node, unit;
} bench_opts;

typedef struct op_result {
    double median, min, max; /* seconds per call, slowest rank */
    uint64_t bytes;          /* bytes this rank sent per call (counters) */
    uint64_t theory;         /* the same by the formulas of onebit/comm.h and onebit/car.h */
} op_result;

static int parse_args(int argc, char **argv, bench_opts *o)
{
    o->d = 2000000;
    o->block = 2048;
    o->iters = 20;
    o->warmup = 3;
    o->json = 0;
    o->skip_fp32 = 0;
    o->ranks_per_node = 0;
    o->unit = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--skip-fp32")) {
            o->skip_fp32 = 1;
            continue;
        }
        if (!v) return -1;
        if (!strcmp(a, "--d"))
            o->d = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--block"))
            o->block = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--iters"))
            o->iters = atoi(v);
        else if (!strcmp(a, "--warmup"))
            o->warmup = atoi(v);
        else if (!strcmp(a, "--ranks-per-node"))
            o->ranks_per_node = !strcmp(v, "auto") ? -1 : atoi(v);
        else if (!strcmp(a, "--scale") && (!strcmp(v, "l1") || !strcmp(v, "unit")))
            o->unit = !strcmp(v, "unit");
        else if (!strcmp(a, "--format") && (!strcmp(v, "json") || !strcmp(v, "text")))
            o->json = !strcmp(v, "json");
        else
            return -1;
        i++;
    }
    if (o->d == 0 || o->block == 0 || o->block % 32 || o->iters < 1 || o->warmup < 0) return -1;
    return 0;
}

static void fill(float *x, size_t d, ob_rng *rng, int unit)
{
    for (size_t k = 0; k < d; k++)
        x[k] = unit ? 2.0f * ob_rng_uniform(rng) - 1.0f : ob_rng_normal(rng);
}

/* Times warmup + iters calls of one collective: the compressed allreduce (car), the fp16 or
 * fp8 exchange (f16), else the fp32 ring allreduce. */
static int time_op(ob_comm *c, ob_car *car, ob_f16sum *f16, const bench_opts *o, float *x,
                   ob_rng *rng, op_result *res)
{
    double *t = malloc((size_t)o->iters * sizeof(double));
    if (!t) return -1;
    ob_err err = {0};
    uint64_t bytes0 = 0;
    for (int i = -o->warmup; i < o->iters; i++) {
        if (i == 0) {
            bytes0 = ob_comm_bytes_sent(c);
            if (car) ob_car_set_timing(car, 1);
        }
        fill(x, o->d, rng, car && o->unit);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now();
        ob_status st = car   ? ob_car_allreduce(car, x, x, &err)
                       : f16 ? ob_f16sum_run(f16, x, x, o->d, &err)
                             : ob_comm_allreduce_sum_f32(c, x, o->d, &err);
        double dt = bench_now() - t0;
        if (st != OB_OK) {
            fprintf(stderr, "bench_car: %s\n", err.msg);
            free(t);
            return -1;
        }
        double slowest = 0.0;
        MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (i >= 0) t[i] = slowest;
    }
    res->bytes = (ob_comm_bytes_sent(c) - bytes0) / (uint64_t)o->iters;
    res->median = bench_median(t, o->iters); /* sorts t */
    res->min = t[0];
    res->max = t[o->iters - 1];
    free(t);
    return 0;
}

/* Per-call phase times, averaged over the timed calls and over the ranks. */
static void mean_phases(ob_car *car, int nranks, double ph[5])
{
    ob_car_timing tm;
    ob_car_get_timing(car, &tm);
    double calls = tm.calls ? (double)tm.calls : 1.0;
    double mine[5] = {tm.compress_s / calls, tm.alltoall_s / calls, tm.server_s / calls,
                      tm.allgather_s / calls, tm.decode_s / calls};
    MPI_Allreduce(mine, ph, 5, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int k = 0; k < 5; k++)
        ph[k] /= nranks;
}

static double link_mbit(const op_result *r)
{
    return r->median > 0 ? 8.0 * (double)r->bytes / r->median * 1e-6 : 0.0;
}

/* One collective's fields of the JSON line, each named KEY_...; a leading comma. */
static void json_op(const char *key, const op_result *r)
{
    printf(",\"%s_s\":%.6g,\"%s_min_s\":%.6g,\"%s_max_s\":%.6g,\"%s_bytes\":%llu,"
           "\"%s_bytes_theory\":%llu,\"%s_link_mbit\":%.4g",
           key, r->median, key, r->min, key, r->max, key, (unsigned long long)r->bytes, key,
           (unsigned long long)r->theory, key, link_mbit(r));
}

/* One collective's row of the text table. */
static void text_row(const char *name, const op_result *r)
{
    printf("%-10s %12.3f %12.3f %12.3f %14llu %14llu %12.1f\n", name, r->median * 1e3,
           r->min * 1e3, r->max * 1e3, (unsigned long long)r->bytes,
           (unsigned long long)r->theory, link_mbit(r));
}

static void report(const bench_opts *o, int n, size_t D, const op_result *f, const op_result *h,
                   const op_result *e, const op_result *q, const double ph[5])
{
    static const char *names[5] = {"compress", "alltoall", "server", "allgather", "decode"};
    double speedup = f->median > 0 ? f->median / q->median : 0.0; /* 0: fp32 skipped */
    if (o->json) {
        printf("{\"bench\":\"car\",\"ranks_per_node\":%d,\"scale\":\"%s\",",
               o->ranks_per_node > 1 ? o->ranks_per_node : 1, o->unit ? "unit" : "l1");
        printf("\"ranks\":%d,\"d\":%zu,\"padded\":%zu,\"block\":%zu,\"iters\":%d", n, o->d, D,
               o->block, o->iters);
        json_op("fp32", f);
        json_op("car", q);
        printf(",\"speedup\":%.4g", speedup);
        json_op("fp16", h);
        json_op("fp8", e);
        for (int k = 0; k < 5; k++)
            printf(",\"%s_s\":%.6g", names[k], ph[k]);
        printf("}\n");
        return;
    }
    printf("bench_car: %d ranks, d=%zu (padded %zu), block %zu, median of %d calls after %d\n", n,
           o->d, D, o->block, o->iters, o->warmup);
    printf("%-10s %12s %12s %12s %14s %14s %12s\n", "op", "median [ms]", "min [ms]", "max [ms]",
           "bytes/rank", "theory", "link Mbit/s");
    text_row("fp32", f);
    text_row("fp16", h);
    text_row("fp8", e);
    text_row("1-bit", q);
    if (speedup > 0) printf("speedup of the collective (fp32 / 1-bit): %.2fx\n", speedup);
    double sum = ph[0] + ph[1] + ph[2] + ph[3] + ph[4];
    printf("1-bit phases (mean per call over ranks):");
    for (int k = 0; k < 5; k++)
        printf(" %s %.3f ms (%.0f%%)", names[k], ph[k] * 1e3, 100.0 * ph[k] / sum);
    printf("\n");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, n = 1, rc = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    bench_opts o;
    if (parse_args(argc, argv, &o) != 0) {
        if (rank == 0)
            fprintf(stderr, "usage: bench_car [--d ELEMENTS] [--block B (multiple of 32)] "
                            "[--iters K] [--warmup W] [--format text|json] [--skip-fp32]\n"
                            "                 [--ranks-per-node M|auto] [--scale l1|unit]\n");
        MPI_Finalize();
        return 2;
    }
    ob_comm *c = NULL;
    ob_car *car = NULL;
    ob_f16sum *f16 = NULL, *f8 = NULL;
    ob_err err = {0};
    float *x = malloc(o.d * sizeof(float));
    ob_rng rng;
    ob_rng_seed(&rng, 17, (uint64_t)rank);
    op_result f, h, e, q;
    double ph[5];
    char why[200] = "";
    if (!x || ob_comm_create_mpi(&c, &err) != OB_OK ||
        (o.ranks_per_node < 0 &&
         ob_car_auto_ranks_per_node(c, &o.ranks_per_node, why, sizeof why, &err) != OB_OK) ||
        ob_car_create_hier(&car, c, o.d, o.block, o.unit ? OB_SCALE_UNIT : OB_SCALE_L1,
                           o.ranks_per_node, &err) != OB_OK ||
        ob_f16sum_create(&f16, c, o.d, &err) != OB_OK ||
        ob_f16sum_create_code(&f8, c, o.d, OB_CODE_FP8, &err) != OB_OK) {
        fprintf(stderr, "bench_car: setup failed: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    if (why[0] && rank == 0) fprintf(stderr, "bench_car: --ranks-per-node auto: %s\n", why);
    memset(&f, 0, sizeof f);
    memset(&h, 0, sizeof h);
    memset(&e, 0, sizeof e);
    if ((!o.skip_fp32 && (time_op(c, NULL, NULL, &o, x, &rng, &f) != 0 ||
                          time_op(c, NULL, f16, &o, x, &rng, &h) != 0 ||
                          time_op(c, NULL, f8, &o, x, &rng, &e) != 0)) ||
        time_op(c, car, NULL, &o, x, &rng, &q) != 0)
        goto done;
    mean_phases(car, n, ph);
    /* The formulas: the ring sends 2(N-1)/N * 4d bytes per rank (exact when N divides d, the
     * mean over ranks otherwise); the car 2(N-1) packed chunks. */
    f.theory = (uint64_t)(2.0 * (n - 1) / n * 4.0 * (double)o.d + 0.5);
    h.theory = ob_f16sum_bytes_per_call(f16, o.d);
    e.theory = ob_f16sum_bytes_per_call(f8, o.d);
    q.theory = ob_car_bytes_per_call(car);
    if (rank == 0) report(&o, n, ob_car_padded_size(car), &f, &h, &e, &q, ph);
    rc = 0;
done:
    ob_f16sum_destroy(f16);
    ob_f16sum_destroy(f8);
    ob_car_destroy(car);
    ob_comm_destroy(c);
    free(x);
    MPI_Finalize();
    return rc;
}
