/* The fp16 and fp8 gradient exchanges (onebit/f16sum.h) on MPI ranks, and the optimizer with
 * gradient_exchange fp16:
 *   - every rank's result is, bit for bit, a single-process simulation of all ranks (every rank
 *     simulates the whole world from the inputs all ranks can generate, so no communication is
 *     trusted), and within the rounding bound of the exact sum;
 *   - the bytes counted are 2 (N-1) chunk messages, about half of the fp32 ring's (a quarter
 *     in fp8);
 *   - a NaN on one rank reaches every rank;
 *   - Adam with fp16 gradients is Adam on the simulated sums, bit for bit, at about half the
 *     traffic of fp32, and a world of one rounds nothing. */
#include "mpi_harness.h"

#include "onebit/comm.h"
#include "onebit/compress.h"
#include "onebit/f16sum.h"
#include "onebit/optim.h"
#include "onebit/optim_kernels.h"
#include "onebit/rng.h"

#include <stdint.h>
#include <string.h>

/* Rank r's input: normal values whose magnitude changes every 100 elements over 12 decades,
 * every 17th exactly zero. */
static void make_input(float *x, size_t n, int r, uint64_t seed)
{
    ob_rng rng;
    ob_rng_seed(&rng, seed, (uint64_t)r);
    for (size_t k = 0; k < n; k++) {
        float mag = powf(10.0f, (float)((k / 100) % 13) - 6.0f);
        x[k] = (k % 17 == 3) ? 0.0f : mag * ob_rng_normal(&rng);
    }
}

/* The exchange for all ranks in one process, with the codec's plain functions: chunk j starts
 * as rank j's values, encoded; each next rank around the ring (j+1, ..., j-1 mod N) decodes the
 * partial sum, adds its values and encodes it again; every rank decodes the last one. */
static void simulate_code(ob_float_code code, float **inputs, int nr, size_t n, float *out)
{
    size_t B = OB_F16SUM_BLOCK, N = (size_t)nr;
    size_t C = (n + N - 1) / N;
    C = (C + B - 1) / B * B;
    size_t msg = ob_fcode_bytes(code, C, B);
    unsigned char *enc = malloc(msg);
    float *sum = malloc(C * sizeof(float));
    for (size_t j = 0; j < N; j++) {
        size_t lo = j * C, valid = lo < n ? (n - lo < C ? n - lo : C) : 0;
        ob_fcode_encode(code, valid ? inputs[j] + lo : NULL, valid, C, B, enc);
        for (size_t i = 1; i < N; i++) {
            ob_fcode_decode_add(code, enc, C, B, valid ? inputs[(j + i) % N] + lo : NULL, valid,
                                sum);
            ob_fcode_encode(code, sum, C, C, B, enc);
        }
        ob_fcode_decode_add(code, enc, C, B, NULL, 0, sum);
        if (valid) memcpy(out + lo, sum, valid * sizeof(float));
    }
    free(enc), free(sum);
}

/* The exchange in `code` against the simulation. The rounding bound per element: the first
 * input and each of the N-1 partial sums after it rounded to the code's significant bits
 * (u: 2^-11 in fp16, 2^-4 in fp8, relative, ties included; a partial sum exceeds the sum of
 * magnitudes by at most (1 + u)^N), values below `flush` of their block's largest flushed to
 * zero (a partial sum's block holds at most N bmax), and the fp32 additions. */
static void exchange_code_matches_simulation(mpi_harness *h, ob_float_code code)
{
    ob_comm *c = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    if (!c) return;
    int N = h->size, r = h->rank;
    size_t max_n = (size_t)N * 256 * 5 + 5;
    const double u = code == OB_CODE_FP8 ? 0x1p-4 : 0x1p-11;
    const double flush = code == OB_CODE_FP8 ? 0x1p-16 : 0x1p-39;
    ob_f16sum *f = NULL;
    MH_CHECK(h, ob_f16sum_create_code(&f, c, max_n, code, &err) == OB_OK, "%s", err.msg);
    size_t sizes[] = {1, 255, 257, 1000, (size_t)N * 256 * 3, max_n};
    float **in = malloc((size_t)N * sizeof *in);
    for (size_t si = 0; f && si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        for (int i = 0; i < N; i++) {
            in[i] = malloc(n * sizeof(float));
            make_input(in[i], n, i, 100 + si);
        }
        float *got = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
        memcpy(got, in[r], n * sizeof(float)); /* in place */
        uint64_t before = ob_comm_bytes_sent(c);
        MH_CHECK(h, ob_f16sum_run(f, got, got, n, &err) == OB_OK, "n %zu: %s", n, err.msg);
        uint64_t sent = ob_comm_bytes_sent(c) - before;
        simulate_code(code, in, N, n, want);
        MH_CHECK(h, memcmp(got, want, n * sizeof(float)) == 0 || N == 1,
                 "n %zu: not the simulation's bits", n);
        size_t C = ((n + (size_t)N - 1) / (size_t)N + 255) / 256 * 256;
        long far = 0;
        for (size_t k = 0; k < n; k++) {
            size_t j = k / C, lo = j * C + (k - j * C) / 256 * 256;
            size_t hi = lo + 256 < n ? lo + 256 : n;
            double exact = 0, absum = 0, bmax = 0, smax = 0;
            for (int i = 0; i < N; i++) {
                exact += in[i][k];
                absum += fabs(in[i][k]);
                for (size_t q = lo; q < hi; q++)
                    bmax = fmax(bmax, fabs(in[i][q]));
            }
            for (size_t q = lo; q < hi; q++) {
                double e = 0;
                for (int i = 0; i < N; i++)
                    e += in[i][q];
                smax = fmax(smax, fabs(e));
            }
            double tol = (double)N * absum * u * pow(1 + u, N) + absum * 0x1p-20 +
                         ((double)N * N * bmax + 2 * smax) * flush;
            if (!(fabs((double)got[k] - exact) <= tol)) far++;
        }
        MH_CHECK(h, far == 0, "n %zu: %ld elements beyond the rounding bound", n, far);
        if (N == 1) {
            MH_CHECK(h, memcmp(got, in[0], n * sizeof(float)) == 0, "a world of one rounds");
            MH_CHECK(h, sent == 0, "a world of one sent %llu bytes", (unsigned long long)sent);
        } else {
            MH_CHECK(h, sent == ob_f16sum_bytes_per_call(f, n), "n %zu: %llu bytes, expected %llu",
                     n, (unsigned long long)sent,
                     (unsigned long long)ob_f16sum_bytes_per_call(f, n));
        }
        if (n == (size_t)N * 256 * 3 && N > 1) {
            /* 2 (N-1) chunks of 768 codes and 3 shifts, against the ring's 2 (N-1)/N 4n. */
            uint64_t ring = 2ull * (uint64_t)(N - 1) * (n / (size_t)N) * 4u;
            uint64_t elem = code == OB_CODE_FP8 ? 1 : 2;
            MH_CHECK(h, sent == 2ull * (uint64_t)(N - 1) * (768 * elem + 3 * 2), "bytes %llu",
                     (unsigned long long)sent);
            double share = code == OB_CODE_FP8 ? 0.26 : 0.51;
            MH_CHECK(h, (double)sent <= share * (double)ring, "%llu bytes against the ring's %llu",
                     (unsigned long long)sent, (unsigned long long)ring);
        }
        /* Every rank holds rank 0's bits. */
        float *r0 = malloc(n * sizeof(float));
        memcpy(r0, got, n * sizeof(float));
        MPI_Bcast(r0, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
        MH_CHECK(h, memcmp(r0, got, n * sizeof(float)) == 0, "n %zu: ranks disagree", n);
        free(r0), free(got), free(want);
        for (int i = 0; i < N; i++)
            free(in[i]);
    }
    free(in);
    float one = 1.0f;
    MH_CHECK(h, f && ob_f16sum_run(f, &one, &one, max_n + 1, &err) == OB_ERR_INVALID_ARG,
             "a vector beyond max_n was taken");
    ob_f16sum_destroy(f);
    ob_comm_destroy(c);
}

static void exchange_matches_simulation(mpi_harness *h)
{
    exchange_code_matches_simulation(h, OB_CODE_FP16);
}

static void fp8_exchange_matches_simulation(mpi_harness *h)
{
    exchange_code_matches_simulation(h, OB_CODE_FP8);
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, NULL) == OB_OK, "comm");
    ob_f16sum *f = NULL;
    MH_CHECK(h,
             !c || ob_f16sum_create_code(&f, c, 10, (ob_float_code)7, NULL) == OB_ERR_INVALID_ARG,
             "an unknown code was taken");
    ob_f16sum_destroy(f);
    ob_comm_destroy(c);
}

static void nan_code_reaches_every_rank(mpi_harness *h, ob_float_code code)
{
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, NULL) == OB_OK, "comm");
    if (!c) return;
    size_t n = 3000;
    ob_f16sum *f = NULL;
    MH_CHECK(h, ob_f16sum_create_code(&f, c, n, code, NULL) == OB_OK, "create");
    float *x = malloc(n * sizeof(float));
    make_input(x, n, h->rank, 7);
    if (h->rank == h->size - 1) x[2999] = NAN;
    MH_CHECK(h, f && ob_f16sum_run(f, x, x, n, NULL) == OB_OK, "run");
    MH_CHECK(h, isnan(x[2999]), "the NaN was lost");
    long bad = 0;
    for (size_t k = 0; k < 2048; k++)
        bad += !isfinite(x[k]);
    MH_CHECK(h, bad == 0, "%ld non-finite values away from the NaN's block", bad);
    free(x);
    ob_f16sum_destroy(f);
    ob_comm_destroy(c);
}

static void nan_reaches_every_rank(mpi_harness *h)
{
    nan_code_reaches_every_rank(h, OB_CODE_FP16);
    nan_code_reaches_every_rank(h, OB_CODE_FP8);
}

/* Adam with fp16 (fp8) gradient exchange: bit for bit Adam on the simulated sums, at about
 * half (a quarter of) the bytes of fp32; in a world of one the fp32 bits. */
static void adam_code_against_reference(mpi_harness *h, ob_gradient_exchange ex)
{
    ob_float_code code = ex == OB_EXCHANGE_FP8 ? OB_CODE_FP8 : OB_CODE_FP16;
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, NULL) == OB_OK, "comm");
    if (!c) return;
    int N = h->size;
    size_t d = 20000;
    float *x16 = malloc(d * sizeof(float)), *x32 = malloc(d * sizeof(float));
    float *xr = malloc(d * sizeof(float)), *mr = calloc(d, sizeof(float));
    float *vr = calloc(d, sizeof(float)), *gs = malloc(d * sizeof(float));
    float **g = malloc((size_t)N * sizeof *g);
    for (int i = 0; i < N; i++)
        g[i] = malloc(d * sizeof(float));
    make_input(x16, d, 0, 1);
    memcpy(x32, x16, d * sizeof(float));
    memcpy(xr, x16, d * sizeof(float));
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
    ob_optim *o32 = NULL, *o16 = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_optim_create(&o32, &cfg, c, x32, d, &err) == OB_OK, "%s", err.msg);
    cfg.gradient_exchange = ex;
    MH_CHECK(h, ob_optim_create(&o16, &cfg, c, x16, d, &err) == OB_OK, "%s", err.msg);
    if (!o32 || !o16) goto out;
    for (long t = 1; t <= 5; t++) {
        for (int i = 0; i < N; i++)
            make_input(g[i], d, i, 50 + (uint64_t)t);
        MH_CHECK(h, ob_optim_step(o32, g[h->rank], 1e-3f, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_optim_step(o16, g[h->rank], 1e-3f, &err) == OB_OK, "%s", err.msg);
        if (N > 1)
            simulate_code(code, g, N, d, gs);
        else
            memcpy(gs, g[0], d * sizeof(float));
        ob_adam_coeffs k;
        ob_adam_coeffs_init(&k, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay,
                            cfg.bias_correction, t, 1e-3f, N);
        ob_adam_update(xr, mr, vr, gs, d, &k);
    }
    MH_CHECK(h, memcmp(x16, xr, d * sizeof(float)) == 0, "not Adam on the code %d sums", (int)code);
    ob_optim_stats s32, s16;
    ob_optim_get_stats(o32, &s32);
    ob_optim_get_stats(o16, &s16);
    if (N == 1) {
        MH_CHECK(h, memcmp(x16, x32, d * sizeof(float)) == 0, "a world of one: different bits");
    } else {
        MH_CHECK(h, memcmp(x16, x32, d * sizeof(float)) != 0, "code %d rounded nothing", (int)code);
        /* 20000 floats: chunks padded to whole blocks (2.4% at two ranks) and the shifts. */
        double share = code == OB_CODE_FP8 ? 0.28 : 0.53;
        MH_CHECK(h, (double)s16.bytes_sent < share * (double)s32.bytes_sent,
                 "code %d sent %llu bytes, fp32 %llu", (int)code,
                 (unsigned long long)s16.bytes_sent, (unsigned long long)s32.bytes_sent);
    }
out:
    ob_optim_destroy(o16);
    ob_optim_destroy(o32);
    for (int i = 0; i < N; i++)
        free(g[i]);
    free(g), free(x16), free(x32), free(xr), free(mr), free(vr), free(gs);
    ob_comm_destroy(c);
}

static void adam_fp16_against_reference(mpi_harness *h)
{
    adam_code_against_reference(h, OB_EXCHANGE_FP16);
}

static void adam_fp8_against_reference(mpi_harness *h)
{
    adam_code_against_reference(h, OB_EXCHANGE_FP8);
}

int main(int argc, char **argv)
{
    mpi_harness h;
    mpi_harness_init(&h, &argc, &argv);
    MH_RUN(&h, exchange_matches_simulation);
    MH_RUN(&h, fp8_exchange_matches_simulation);
    MH_RUN(&h, nan_reaches_every_rank);
    MH_RUN(&h, adam_fp16_against_reference);
    MH_RUN(&h, adam_fp8_against_reference);
    return mpi_harness_finish(&h);
}
