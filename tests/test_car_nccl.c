/* The NCCL communicator, the compressed allreduce and the fp16 exchange on it (device buffers)
 * against the MPI communicator and the CPU path, fed the same inputs on the same ranks. The
 * CUDA kernels are bitwise equal to the CPU kernels and the collectives only move bytes, so
 * outputs and error buffers must agree bit for bit, and both communicators must count the same
 * bytes.
 *
 * Rank r uses device r % device_count. NCCL refuses two ranks on one GPU, so with more ranks
 * than devices (or no device at all) every rank exits with 77, which ctest reports as
 * skipped. */
#include "mpi_harness.h"

#include "onebit/car.h"
#include "onebit/comm.h"
#include "onebit/optim.h"
#include "onebit/compress_cuda.h"
#include "onebit/f16sum.h"
#include "onebit/rng.h"

#include <stdint.h>
#include <string.h>

#define SKIP_CODE 77

static ob_comm *g_mpi, *g_nccl;

/* Input of rank r at step t: normal values, every 13th exactly zero, every 29th -0.0. */
static void make_input(float *x, size_t d, int r, int t, uint64_t seed)
{
    ob_rng rng;
    ob_rng_seed(&rng, seed + 1000003u * (uint64_t)t, (uint64_t)r);
    for (size_t k = 0; k < d; k++) {
        float z = ob_rng_normal(&rng) * (1.0f + 0.25f * (float)t);
        x[k] = (k % 13 == 5) ? 0.0f : (k % 29 == 3) ? -0.0f : z;
    }
}

/* Copies host bytes into device memory and waits for the copy (dev NULL: nothing). */
static void upload(mpi_harness *h, void *dev, const void *host, size_t bytes)
{
    ob_err err = {0};
    if (!dev) return;
    MH_CHECK(h, ob_cuda_memcpy(dev, host, bytes, NULL, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_cuda_sync(NULL, &err) == OB_OK, "%s", err.msg);
}

/* Device copies; a failure is recorded and leaves NULL (the caller skips the case's checks
 * but keeps calling the collectives, so that no rank hangs). */
static void *to_device(mpi_harness *h, const void *host, size_t bytes)
{
    void *p = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_cuda_alloc(&p, bytes, &err) == OB_OK, "%s", err.msg);
    if (host) upload(h, p, host, bytes);
    return p;
}

static void to_host(mpi_harness *h, void *host, const void *dev, size_t bytes)
{
    ob_err err = {0};
    MH_CHECK(h, ob_cuda_memcpy(host, dev, bytes, NULL, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_cuda_sync(NULL, &err) == OB_OK, "%s", err.msg);
}

static long count_diff(const void *a, const void *b, size_t n, size_t elem)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem) != 0) bad++;
    return bad;
}

/* ---- cases ----------------------------------------------------------------------------- */

static void test_nccl_properties(mpi_harness *h)
{
    MH_CHECK(h, ob_comm_rank(g_nccl) == h->rank && ob_comm_size(g_nccl) == h->size, "rank/size");
    MH_CHECK(h, strcmp(ob_comm_backend(g_nccl), "nccl") == 0, "backend %s",
             ob_comm_backend(g_nccl));
    MH_CHECK(h, ob_comm_memory(g_nccl) == OB_MEM_DEVICE, "memory kind");
    MH_CHECK(h, ob_comm_stream(g_nccl) != NULL, "the NCCL backend has its own stream");
}

/* Allreduce of integer-valued floats (exact in any order) on both communicators: same sums,
 * same bytes counted. */
static void test_nccl_allreduce(mpi_harness *h)
{
    int n = h->size, r = h->rank;
    ob_err err = {0};
    size_t counts[] = {1, 7, 1000, (size_t)n * 1000, 100003, ((size_t)1 << 22) + 3};
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        size_t cnt = counts[ci];
        float *host = malloc(cnt * sizeof(float)), *back = malloc(cnt * sizeof(float));
        for (size_t k = 0; k < cnt; k++)
            host[k] = (float)((r + 1) * (int)(k % 7 + 1));
        float *dev = to_device(h, host, cnt * sizeof(float));
        uint64_t b0 = ob_comm_bytes_sent(g_nccl), m0 = ob_comm_bytes_sent(g_mpi);
        MH_CHECK(h, ob_comm_allreduce_sum_f32(g_nccl, dev, cnt, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_comm_allreduce_sum_f32(g_mpi, host, cnt, &err) == OB_OK, "%s", err.msg);
        uint64_t nb = ob_comm_bytes_sent(g_nccl) - b0, mb = ob_comm_bytes_sent(g_mpi) - m0;
        if (dev) to_host(h, back, dev, cnt * sizeof(float));
        long bad = 0;
        for (size_t k = 0; k < cnt && dev; k++)
            if (back[k] != (float)(n * (n + 1) / 2 * (int)(k % 7 + 1)) || back[k] != host[k]) bad++;
        MH_CHECK(h, bad == 0, "allreduce of %zu floats: %ld wrong sums", cnt, bad);
        MH_CHECK(h, nb == mb, "allreduce of %zu floats: NCCL counted %llu bytes, MPI %llu", cnt,
                 (unsigned long long)nb, (unsigned long long)mb);
        ob_cuda_free(dev);
        free(host);
        free(back);
    }
}

static void test_nccl_alltoall_allgather_bcast(mpi_harness *h)
{
    int n = h->size, r = h->rank;
    ob_err err = {0};
    size_t per = 4099; /* ints per peer: an odd byte count */
    size_t total = (size_t)n * per * sizeof(int);
    int *send = malloc(total), *recv = malloc(total);
    for (int p = 0; p < n; p++)
        for (size_t k = 0; k < per; k++)
            send[(size_t)p * per + k] = r * 1000000 + p * 10000 + (int)k;
    int *dsend = to_device(h, send, total), *drecv = to_device(h, NULL, total);
    uint64_t before = ob_comm_bytes_sent(g_nccl);
    MH_CHECK(h, ob_comm_alltoall(g_nccl, dsend, drecv, per * sizeof(int), &err) == OB_OK, "%s",
             err.msg);
    MH_CHECK(h, ob_comm_bytes_sent(g_nccl) - before == (uint64_t)(n - 1) * per * sizeof(int),
             "alltoall bytes");
    if (drecv) to_host(h, recv, drecv, total);
    long bad = 0;
    for (int p = 0; p < n && drecv; p++)
        for (size_t k = 0; k < per; k++)
            if (recv[(size_t)p * per + k] != p * 1000000 + r * 10000 + (int)k) bad++;
    MH_CHECK(h, bad == 0, "alltoall: %ld wrong values", bad);

    /* allgather, out of place and in place (send is this rank's block of recv) */
    for (int inplace = 0; inplace < 2; inplace++) {
        int *mine = send; /* per ints */
        for (size_t k = 0; k < per; k++)
            mine[k] = r * 7 + (int)k;
        int *dmine = inplace ? drecv + (size_t)r * per : dsend;
        ob_err e2 = {0};
        if (drecv) MH_CHECK(h, ob_cuda_memset0(drecv, total, NULL, &e2) == OB_OK, "%s", e2.msg);
        upload(h, dmine, mine, per * sizeof(int));
        before = ob_comm_bytes_sent(g_nccl);
        MH_CHECK(h, ob_comm_allgather(g_nccl, dmine, drecv, per * sizeof(int), &err) == OB_OK, "%s",
                 err.msg);
        MH_CHECK(h, ob_comm_bytes_sent(g_nccl) - before == (uint64_t)(n - 1) * per * sizeof(int),
                 "allgather bytes");
        if (drecv) to_host(h, recv, drecv, total);
        bad = 0;
        for (int p = 0; p < n && drecv; p++)
            for (size_t k = 0; k < per; k++)
                if (recv[(size_t)p * per + k] != p * 7 + (int)k) bad++;
        MH_CHECK(h, bad == 0, "allgather (in place %d): %ld wrong values", inplace, bad);
    }

    /* shift: the left neighbour's block arrives, counted as one block sent */
    for (size_t k = 0; k < per; k++)
        send[k] = r * 1000000 + (int)k;
    upload(h, dsend, send, per * sizeof(int));
    before = ob_comm_bytes_sent(g_nccl);
    MH_CHECK(h, ob_comm_shift(g_nccl, dsend, drecv, per * sizeof(int), &err) == OB_OK, "%s",
             err.msg);
    MH_CHECK(h, ob_comm_bytes_sent(g_nccl) - before == (n > 1 ? per * sizeof(int) : 0),
             "shift bytes");
    if (drecv) to_host(h, recv, drecv, per * sizeof(int));
    bad = 0;
    for (size_t k = 0; k < per && drecv; k++)
        if (recv[k] != ((r + n - 1) % n) * 1000000 + (int)k) bad++;
    MH_CHECK(h, bad == 0, "shift: %ld wrong values", bad);

    double payload[3] = {0, 0, 0};
    if (r == n - 1) payload[0] = 3.25, payload[1] = -1.5, payload[2] = 1e300;
    double *dp = to_device(h, payload, sizeof payload);
    before = ob_comm_bytes_sent(g_nccl);
    MH_CHECK(h, ob_comm_bcast(g_nccl, dp, sizeof payload, n - 1, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h,
             ob_comm_bytes_sent(g_nccl) - before ==
                 (r == n - 1 ? (uint64_t)(n - 1) * sizeof payload : 0),
             "bcast bytes");
    if (dp) to_host(h, payload, dp, sizeof payload);
    MH_CHECK(h, payload[0] == 3.25 && payload[1] == -1.5 && payload[2] == 1e300, "bcast value");
    MH_CHECK(h, ob_comm_barrier(g_nccl, &err) == OB_OK, "%s", err.msg);
    ob_cuda_free(dp);
    ob_cuda_free(dsend);
    ob_cuda_free(drecv);
    free(send);
    free(recv);
}

/* The fp16 (and fp8) exchange on both communicators (CUDA codec over NCCL, CPU codec over
 * MPI): the same sums bit for bit and the same bytes, for sizes that fill the chunks and sizes
 * that leave the last chunks short or empty. */
static void f16sum_code_matches_cpu(mpi_harness *h, ob_float_code code)
{
    size_t sizes[] = {1, 1000, (size_t)h->size * 256 * 3, 123457};
    size_t max_n = 123457;
    ob_err err = {0};
    ob_f16sum *fc = NULL, *fg = NULL;
    MH_CHECK(h, ob_f16sum_create_code(&fc, g_mpi, max_n, code, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_f16sum_create_code(&fg, g_nccl, max_n, code, &err) == OB_OK, "%s", err.msg);
    float *x = malloc(max_n * sizeof(float)), *want = malloc(max_n * sizeof(float));
    float *got = malloc(max_n * sizeof(float));
    float *dx = to_device(h, NULL, max_n * sizeof(float));
    for (size_t si = 0; fc && fg && dx && si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        make_input(x, n, h->rank, (int)si, 91);
        uint64_t b0 = ob_comm_bytes_sent(g_mpi), g0 = ob_comm_bytes_sent(g_nccl);
        MH_CHECK(h, ob_f16sum_run(fc, x, want, n, &err) == OB_OK, "%s", err.msg);
        upload(h, dx, x, n * sizeof(float));
        MH_CHECK(h, ob_f16sum_run(fg, dx, dx, n, &err) == OB_OK, "%s", err.msg);
        to_host(h, got, dx, n * sizeof(float));
        MH_CHECK(h, count_diff(want, got, n, sizeof(float)) == 0,
                 "code %d exchange of %zu: %ld differ", (int)code, n,
                 count_diff(want, got, n, sizeof(float)));
        MH_CHECK(h, ob_comm_bytes_sent(g_mpi) - b0 == ob_comm_bytes_sent(g_nccl) - g0,
                 "code %d exchange of %zu: bytes differ", (int)code, n);
    }
    ob_cuda_free(dx);
    free(x), free(want), free(got);
    ob_f16sum_destroy(fg);
    ob_f16sum_destroy(fc);
}

static void test_f16sum_matches_cpu(mpi_harness *h)
{
    f16sum_code_matches_cpu(h, OB_CODE_FP16);
    f16sum_code_matches_cpu(h, OB_CODE_FP8);
}

typedef struct car_case {
    size_t d, B;
    ob_scale_kind scale;
    int steps;
} car_case;

/* The same compressed allreduce on both communicators: outputs after every step, worker and
 * server errors at the end, and the bytes of each call must agree bitwise. */
static void check_car_case(mpi_harness *h, car_case cc)
{
    int r = h->rank;
    ob_err err = {0};
    ob_car *cpu = NULL, *gpu = NULL;
    MH_CHECK(h, ob_car_create(&cpu, g_mpi, cc.d, cc.B, cc.scale, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_car_create(&gpu, g_nccl, cc.d, cc.B, cc.scale, &err) == OB_OK, "%s", err.msg);
    if (!cpu || !gpu) {
        ob_car_destroy(cpu);
        ob_car_destroy(gpu);
        return;
    }
    size_t D = ob_car_padded_size(cpu), C = ob_car_chunk_size(cpu);
    MH_CHECK(h, ob_car_padded_size(gpu) == D && ob_car_chunk_size(gpu) == C, "sizes");
    float *x = malloc(cc.d * sizeof(float)), *out = malloc(cc.d * sizeof(float));
    float *got = malloc(D * sizeof(float));
    float *din = to_device(h, NULL, cc.d * sizeof(float));
    float *dout = to_device(h, NULL, cc.d * sizeof(float));
    long mism = 0;
    for (int t = 0; t < cc.steps; t++) {
        make_input(x, cc.d, r, t, 42 + cc.d);
        if (din) {
            MH_CHECK(h, ob_cuda_memcpy(din, x, cc.d * sizeof(float), NULL, &err) == OB_OK, "%s",
                     err.msg);
            MH_CHECK(h, ob_cuda_sync(NULL, &err) == OB_OK, "%s", err.msg);
        }
        uint64_t m0 = ob_comm_bytes_sent(g_mpi), n0 = ob_comm_bytes_sent(g_nccl);
        MH_CHECK(h, ob_car_allreduce(cpu, x, out, &err) == OB_OK, "%s", err.msg);
        /* odd steps in place (in == out), as the optimizer calls it */
        float *dst = (t % 2) ? din : dout;
        MH_CHECK(h, ob_car_allreduce(gpu, din, dst, &err) == OB_OK, "%s", err.msg);
        uint64_t mb = ob_comm_bytes_sent(g_mpi) - m0, nb = ob_comm_bytes_sent(g_nccl) - n0;
        MH_CHECK(h, mb == nb && nb == ob_car_bytes_per_call(gpu),
                 "d=%zu: bytes MPI %llu NCCL %llu expected %llu", cc.d, (unsigned long long)mb,
                 (unsigned long long)nb, (unsigned long long)ob_car_bytes_per_call(gpu));
        if (dst) {
            to_host(h, got, dst, cc.d * sizeof(float));
            long bad = count_diff(out, got, cc.d, sizeof(float));
            if (bad && mism == 0) {
                for (size_t k = 0; k < cc.d; k++)
                    if (memcmp(&out[k], &got[k], sizeof(float)) != 0) {
                        fprintf(stderr,
                                "[rank %d] d=%zu B=%zu step %d elem %zu: cpu %.9g gpu %.9g\n", r,
                                cc.d, cc.B, t, k, out[k], got[k]);
                        break;
                    }
            }
            mism += bad;
        }
    }
    MH_CHECK(h, mism == 0, "d=%zu B=%zu %s: %ld output elements differ from the CPU path", cc.d,
             cc.B, cc.scale == OB_SCALE_L2 ? "l2" : "l1", mism);

    to_host(h, got, ob_car_worker_error(gpu), D * sizeof(float));
    long bad = count_diff(ob_car_worker_error(cpu), got, D, sizeof(float));
    MH_CHECK(h, bad == 0, "d=%zu B=%zu: %ld worker-error elements differ", cc.d, cc.B, bad);
    to_host(h, got, ob_car_server_error(gpu), C * sizeof(float));
    bad = count_diff(ob_car_server_error(cpu), got, C, sizeof(float));
    MH_CHECK(h, bad == 0, "d=%zu B=%zu: %ld server-error elements differ", cc.d, cc.B, bad);

    /* reset on the device */
    MH_CHECK(h, ob_car_reset_errors(gpu, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_cuda_sync(ob_comm_stream(g_nccl), &err) == OB_OK, "%s", err.msg);
    to_host(h, got, ob_car_worker_error(gpu), D * sizeof(float));
    long nonzero = 0;
    for (size_t k = 0; k < D; k++)
        nonzero += got[k] != 0.0f;
    MH_CHECK(h, nonzero == 0, "reset left %ld non-zero worker-error elements", nonzero);

    ob_cuda_free(din);
    ob_cuda_free(dout);
    free(x);
    free(out);
    free(got);
    ob_car_destroy(cpu);
    ob_car_destroy(gpu);
}

static void test_car_matches_cpu(mpi_harness *h)
{
    car_case cases[] = {
        {1, 32, OB_SCALE_L1, 3},          {37, 32, OB_SCALE_L1, 3},
        {1000, 64, OB_SCALE_L2, 4},       {5003, 32, OB_SCALE_L1, 4},
        {20011, 2048, OB_SCALE_L1, 4},    {70001, 256, OB_SCALE_L2, 4},
        {4096 * 5, 1024, OB_SCALE_L1, 4}, {(1u << 22) + 17, 2048, OB_SCALE_L1, 3},
        {3000017, 8192, OB_SCALE_L2, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_car_case(h, cases[i]);
}

typedef struct optim_case {
    const char *name;
    ob_optim_kind kind;
    ob_onebit_mode mode;
    long freeze_step; /* 0: auto */
    int precondition, bias_correction;
    size_t d;
    int steps;
} optim_case;

/* The same optimizer on both communicators, fed the same gradients: parameters, m, v and both
 * error buffers must agree bit for bit after every step, through the warmup, the freeze and
 * the compression phase, and both must count the same bytes. With auto freeze the GPU sums
 * ||v||_1 in another order, so the freeze step may only differ if a ratio lies within 1e-12
 * of the threshold; these inputs keep well away from that, and the test demands equality. */
static void check_optim_case(mpi_harness *h, optim_case oc)
{
    ob_err err = {0};
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, oc.kind);
    cfg.mode = oc.mode;
    cfg.freeze_step = oc.freeze_step;
    cfg.precondition = oc.precondition;
    cfg.bias_correction = oc.bias_correction;
    cfg.block_size = 64;
    cfg.beta2 = 0.9; /* Delta = 10: the auto freeze happens within the run */
    cfg.weight_decay = 0.01;
    if (oc.kind == OB_OPTIM_BINSGDM) cfg.max_denominator_step = 5; /* b a running max after 5 */
    size_t d = oc.d, fb = d * sizeof(float);
    float *params = malloc(fb), *g = malloc(fb), *got = malloc(fb);
    make_input(params, d, 0, 99, 7); /* identical on every rank */
    float *dparams = to_device(h, params, fb), *dg = to_device(h, NULL, fb);
    ob_optim *cpu = NULL, *gpu = NULL;
    MH_CHECK(h, ob_optim_create(&cpu, &cfg, g_mpi, params, d, &err) == OB_OK, "%s", err.msg);
    if (dparams)
        MH_CHECK(h, ob_optim_create(&gpu, &cfg, g_nccl, dparams, d, &err) == OB_OK, "%s", err.msg);
    long mism = 0;
    for (int t = 0; t < oc.steps && cpu && gpu && dg; t++) {
        make_input(g, d, h->rank, t, 1234);
        MH_CHECK(h, ob_cuda_memcpy(dg, g, fb, NULL, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_cuda_sync(NULL, &err) == OB_OK, "%s", err.msg);
        float lr = 1e-2f / (1.0f + (float)t);
        MH_CHECK(h, ob_optim_step(cpu, g, lr, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_optim_step(gpu, dg, lr, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_cuda_sync(ob_comm_stream(g_nccl), &err) == OB_OK, "%s", err.msg);
        to_host(h, got, dparams, fb);
        mism += count_diff(params, got, d, sizeof(float));
        ob_optim_stats sc, sg;
        ob_optim_get_stats(cpu, &sc);
        ob_optim_get_stats(gpu, &sg);
        MH_CHECK(h, sc.freeze_step == sg.freeze_step && sc.bytes_sent == sg.bytes_sent,
                 "%s step %d: freeze %ld vs %ld, bytes %llu vs %llu", oc.name, t + 1,
                 sc.freeze_step, sg.freeze_step, (unsigned long long)sc.bytes_sent,
                 (unsigned long long)sg.bytes_sent);
    }
    MH_CHECK(h, mism == 0, "%s: %ld parameter elements differ over %d steps", oc.name, mism,
             oc.steps);
    if (cpu && gpu) {
        ob_optim_state a, b;
        ob_optim_get_state(cpu, &a);
        ob_optim_get_state(gpu, &b);
        MH_CHECK(h, a.mem == OB_MEM_HOST && b.mem == OB_MEM_DEVICE, "state memory kinds");
        to_host(h, got, b.exp_avg, fb);
        MH_CHECK(h, count_diff(a.exp_avg, got, d, 4) == 0, "%s: m differs", oc.name);
        to_host(h, got, b.exp_avg_sq, fb);
        MH_CHECK(h, count_diff(a.exp_avg_sq, got, d, 4) == 0, "%s: v differs", oc.name);
        MH_CHECK(h, a.padded_size == b.padded_size, "%s: D", oc.name);
        if (a.worker_error) {
            float *e = malloc(a.padded_size * sizeof(float));
            to_host(h, e, b.worker_error, a.padded_size * sizeof(float));
            MH_CHECK(h, count_diff(a.worker_error, e, a.padded_size, 4) == 0,
                     "%s: worker error differs", oc.name);
            to_host(h, e, b.server_error, a.chunk_size * sizeof(float));
            MH_CHECK(h, count_diff(a.server_error, e, a.chunk_size, 4) == 0,
                     "%s: server error differs", oc.name);
            free(e);
        }
    }
    ob_optim_destroy(cpu);
    ob_optim_destroy(gpu);
    ob_cuda_free(dparams);
    ob_cuda_free(dg);
    free(params);
    free(g);
    free(got);
}

static void test_optim_matches_cpu(mpi_harness *h)
{
    optim_case cases[] = {
        {"adam", OB_OPTIM_ADAM, OB_ONEBIT_COMPRESSED, 0, 0, 1, 1003, 6},
        {"onebit fixed freeze", OB_OPTIM_ONEBIT_ADAM, OB_ONEBIT_COMPRESSED, 4, 0, 0, 5003, 12},
        {"onebit auto freeze", OB_OPTIM_ONEBIT_ADAM, OB_ONEBIT_COMPRESSED, 0, 0, 1, 777, 40},
        {"onebit precondition", OB_OPTIM_ONEBIT_ADAM, OB_ONEBIT_COMPRESSED, 3, 1, 0, 4099, 10},
        {"onebit uncompressed", OB_OPTIM_ONEBIT_ADAM, OB_ONEBIT_UNCOMPRESSED, 3, 0, 0, 999, 8},
        {"onebit naive", OB_OPTIM_ONEBIT_ADAM, OB_ONEBIT_NAIVE, 0, 0, 0, 2048, 6},
        {"binsgdm", OB_OPTIM_BINSGDM, OB_ONEBIT_COMPRESSED, 0, 0, 0, 3001, 12},
        {"softsign", OB_OPTIM_SOFTSIGN, OB_ONEBIT_COMPRESSED, 0, 0, 0, 1001, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_optim_case(h, cases[i]);
}

/* The collective timeout: settable on NCCL, refused with a clear status on MPI. */
static void test_timeout_setting(mpi_harness *h)
{
    ob_err err = {0};
    MH_CHECK(h, ob_comm_set_timeout(g_nccl, 30.0, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_comm_set_timeout(g_nccl, -1.0, &err) == OB_ERR_INVALID_ARG, "negative");
    MH_CHECK(h, ob_comm_set_timeout(g_mpi, 30.0, &err) == OB_ERR_UNSUPPORTED, "mpi");
    MH_CHECK(h, ob_comm_set_timeout(g_nccl, OB_COMM_DEFAULT_TIMEOUT, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_comm_barrier(g_nccl, &err) == OB_OK, "%s", err.msg);
}

int main(int argc, char **argv)
{
    mpi_harness h;
    mpi_harness_init(&h, &argc, &argv);
    int ndev = ob_cuda_device_count(), min_dev = 0;
    MPI_Allreduce(&ndev, &min_dev, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (min_dev == 0 || h.size > min_dev) {
        if (h.rank == 0) {
            if (min_dev == 0)
                printf("no CUDA device: NCCL tests skipped\n");
            else
                printf("%d ranks but %d CUDA device(s), and NCCL allows one rank per GPU: "
                       "NCCL tests skipped\n",
                       h.size, min_dev);
        }
        MPI_Finalize();
        return SKIP_CODE;
    }

    ob_err err = {0};
    int ok = ob_comm_create_mpi(&g_mpi, &err) == OB_OK;
    if (!ok) fprintf(stderr, "[rank %d] MPI communicator: %s\n", h.rank, err.msg);
    if (ok && ob_comm_create_nccl(&g_nccl, h.rank % ndev, &err) != OB_OK) {
        fprintf(stderr, "[rank %d] NCCL communicator on device %d: %s\n", h.rank, h.rank % ndev,
                err.msg);
        ok = 0;
    }
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_ok) {
        MH_RUN(&h, test_nccl_properties);
        MH_RUN(&h, test_nccl_allreduce);
        MH_RUN(&h, test_nccl_alltoall_allgather_bcast);
        MH_RUN(&h, test_car_matches_cpu);
        MH_RUN(&h, test_f16sum_matches_cpu);
        MH_RUN(&h, test_optim_matches_cpu);
        MH_RUN(&h, test_timeout_setting);
    } else {
        h.cases_failed++;
    }
    ob_comm_destroy(g_nccl);
    ob_comm_destroy(g_mpi);
    return mpi_harness_finish(&h);
}
