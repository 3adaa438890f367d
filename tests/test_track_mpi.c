/* The tracked variance of 1-bit Adam (optimizer.track_variance) on 2 and 4 MPI ranks.
 *
 * Every rank simulates every rank's statistics in double from the documented gradients (no
 * communication is trusted): u_i, A_i = EMA(g_i^2), B_i = EMA(u_hat_i^2), and at every K-th
 * compression step v = factor (1 - b2^t) / N * sum_i max(alpha A_hat_i + beta B_hat_i, A_hat_i / N)
 * (1 - b2^t: the warmup's scale, without bias correction).
 * With the fp32 exchange the optimizer's v must match it to float rounding; with fp8 (the
 * job spec's default) to the exchange's precision; either way v is the same bits on every
 * rank, which is what keeps the ranks' parameters identical. */
#include "mpi_harness.h"

#include "onebit/comm.h"
#include "onebit/optim.h"
#include "onebit/rng.h"

#include <stdint.h>
#include <string.h>

/* Gradient of rank r at step t: a mean shared by the ranks plus each rank's own noise. */
static void make_grad(float *g, size_t d, int r, long t)
{
    ob_rng rng;
    ob_rng_seed(&rng, 991u + 1000003u * (uint64_t)t, (uint64_t)r);
    for (size_t k = 0; k < d; k++) {
        float mean = 0.02f * (float)((int)(k % 13) - 6) / (1.0f + 0.01f * (float)t);
        g[k] = mean + ob_rng_normal(&rng) * (0.005f + 0.001f * (float)(k % 5));
    }
}

/* 1 when every rank holds the same bits in v (d floats). */
static int same_everywhere(const float *v, size_t d)
{
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    float *all = malloc((size_t)n * d * sizeof(float));
    MPI_Allgather(v, (int)d, MPI_FLOAT, all, (int)d, MPI_FLOAT, MPI_COMM_WORLD);
    int same = 1;
    for (int r = 1; r < n; r++)
        same &= memcmp(all, all + (size_t)r * d, d * sizeof(float)) == 0;
    free(all);
    return same;
}

static void run_tracked(mpi_harness *h, ob_gradient_exchange x, double rel, int precondition)
{
    const size_t d = 700;
    const long K = 5, steps = 26;
    const int n = h->size;
    ob_err err = {0};
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.track_variance = K;
    cfg.block_size = 32;
    cfg.gradient_exchange = x;
    cfg.precondition = precondition;
    float *xs = malloc(d * sizeof(float)), *g = malloc(d * sizeof(float));
    float *v_before = malloc(d * sizeof(float));
    double *U = calloc((size_t)n * d, sizeof(double)), *A = calloc((size_t)n * d, sizeof(double));
    double *B = calloc((size_t)n * d, sizeof(double));
    for (size_t k = 0; k < d; k++)
        xs[k] = 0.01f * (float)((k * 37) % 101) - 0.5f;
    ob_optim *o = NULL;
    MH_CHECK(h, ob_optim_create(&o, &cfg, c, xs, d, &err) == OB_OK, "%s", err.msg);
    ob_optim_state st;
    ob_optim_get_state(o, &st);
    double b1 = cfg.beta1, b2 = cfg.beta2, kk = (1.0 - b1) / (1.0 + b1);
    double beta = (1.0 - 1.0 / n) / (1.0 - kk), alpha = 1.0 - beta;
    int estimates = 0;
    for (long t = 1; t <= steps; t++) {
        double cu = 1.0 / (1.0 - pow(b1, (double)t)), c2 = 1.0 / (1.0 - pow(b2, (double)t));
        for (int r = 0; r < n; r++) {
            make_grad(g, d, r, t);
            for (size_t k = 0; k < d; k++) {
                size_t i = (size_t)r * d + k;
                U[i] = b1 * U[i] + (1.0 - b1) * g[k];
                A[i] = b2 * A[i] + (1.0 - b2) * (double)g[k] * g[k];
                B[i] = b2 * B[i] + (1.0 - b2) * (U[i] * cu) * (U[i] * cu);
            }
        }
        make_grad(g, d, h->rank, t);
        memcpy(v_before, st.exp_avg_sq, d * sizeof(float));
        MH_CHECK(h, ob_optim_step(o, g, 1e-3f, &err) == OB_OK, "step %ld: %s", t, err.msg);
        ob_optim_stats s;
        ob_optim_get_stats(o, &s);
        MH_CHECK(h, s.freeze_step == (t < K ? -1 : K), "step %ld: freeze %ld", t, s.freeze_step);
        if (t <= K) continue;
        if ((t - K) % K != 0) {
            MH_CHECK(h, memcmp(v_before, st.exp_avg_sq, d * sizeof(float)) == 0,
                     "step %ld: v moved between estimates", t);
            continue;
        }
        estimates++;
        size_t bad = d;
        for (size_t k = 0; k < d && bad == d; k++) {
            double sum = 0.0;
            for (int r = 0; r < n; r++) {
                double ah = A[(size_t)r * d + k] * c2, bh = B[(size_t)r * d + k] * c2;
                double e = alpha * ah + beta * bh;
                sum += e > ah / n ? e : ah / n;
            }
            /* In the warmup's scale (no bias correction): times 1 - b2^t. */
            double want = OB_TRACK_FACTOR * (1.0 - pow(b2, (double)t)) * sum / n;
            if (!mh_close(st.exp_avg_sq[k], want, rel, 0.0)) bad = k;
        }
        MH_CHECK(h, bad == d, "step %ld: v[%zu] = %.9g off the reference", t, bad,
                 bad < d ? (double)st.exp_avg_sq[bad] : 0.0);
        MH_CHECK(h, same_everywhere(st.exp_avg_sq, d), "step %ld: v differs between ranks", t);
    }
    MH_CHECK(h, estimates == 4, "%d estimates (steps 10, 15, 20, 25)", estimates);
    MH_CHECK(h, same_everywhere(xs, d), "the parameters differ between ranks");
    ob_optim_destroy(o);
    free(xs);
    free(g);
    free(v_before);
    free(U);
    free(A);
    free(B);
    ob_comm_destroy(c);
}

static void test_track_fp32_matches_reference(mpi_harness *h)
{
    run_tracked(h, OB_EXCHANGE_FP32, 2e-5, 0);
}

/* fp8 rounds each partial sum to 4 significant bits per hop: within N 2^-4 and the same bits
 * on every rank. */
static void test_track_fp8_close_and_identical(mpi_harness *h)
{
    run_tracked(h, OB_EXCHANGE_FP8, 0.0625 * h->size, 0);
}

/* With precondition (the estimate after the step, the error buffers moved to each new
 * denominator): the same v, the same bits on every rank, identical replicas. */
static void test_track_precondition(mpi_harness *h)
{
    run_tracked(h, OB_EXCHANGE_FP32, 2e-5, 1);
}

int main(int argc, char **argv)
{
    mpi_harness h;
    mpi_harness_init(&h, &argc, &argv);
    MH_RUN(&h, test_track_fp32_matches_reference);
    MH_RUN(&h, test_track_fp8_close_and_identical);
    MH_RUN(&h, test_track_precondition);
    return mpi_harness_finish(&h);
}
