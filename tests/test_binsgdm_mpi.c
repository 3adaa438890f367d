/* BinSGDM and its quantiser, on 1 to 4 MPI ranks.
 *
 * The optimizer is held against the paper's Algorithm 1 written here with plain loops for the
 * whole world in one process (every rank simulates every rank: no communication is trusted):
 * each rank's m, b and worker error, every server's error, the stochastic quantiser Q drawn
 * from the documented draws t(key, position) (ob_usign_draw, keys ob_usign_key(seed, step,
 * 1 + rank) for workers and (seed, step, 0) for the servers), and the step with the server's
 * average. The parameters, this rank's m, b and both error buffers must agree bit for bit. */
#include "mpi_harness.h"

#include "onebit/car.h"
#include "onebit/comm.h"
#include "onebit/compress.h"
#include "onebit/optim.h"
#include "onebit/rng.h"

#include <stdint.h>
#include <string.h>

#define SEED 77u

/* Gradient of rank r at step t: normal values of a scale that changes with t, some zeros. */
static void make_grad(float *g, size_t d, int r, long t)
{
    ob_rng rng;
    ob_rng_seed(&rng, 4242u + 1000003u * (uint64_t)t, (uint64_t)r);
    for (size_t k = 0; k < d; k++) {
        float z = ob_rng_normal(&rng) * (0.01f + 0.002f * (float)(t % 7));
        g[k] = (k % 17 == 3) ? 0.0f : z + 0.003f * (float)(k % 5);
    }
}

/* Q with error feedback on n elements at position pos: e = u - Q(u), returns Q in q. */
static void ref_quantise(const float *u, float *e, float *q, size_t n, uint64_t key, size_t pos)
{
    for (size_t k = 0; k < n; k++) {
        float t = ob_usign_draw(key, pos + k);
        q[k] = t < u[k] ? 1.0f : -1.0f; /* P(+1) = (u + 1) / 2 */
        e[k] = u[k] - q[k];
    }
}

typedef struct ref {
    int n;
    size_t d, D, C;
    float *x, *m, *b; /* x (d); m, b (n, d) */
    float *ew, *es;   /* (n, D) worker errors, (n, C) server errors (row j: server j) */
} ref;

static void ref_init(ref *s, int n, size_t d, size_t B, const float *x0)
{
    s->n = n;
    s->d = d;
    size_t nb = (size_t)n * B;
    s->D = (d + nb - 1) / nb * nb;
    s->C = s->D / (size_t)n;
    s->x = malloc(d * sizeof(float));
    memcpy(s->x, x0, d * sizeof(float));
    s->m = calloc((size_t)n * d, sizeof(float));
    s->b = calloc((size_t)n * d, sizeof(float));
    s->ew = calloc((size_t)n * s->D, sizeof(float));
    s->es = calloc((size_t)n * s->C, sizeof(float));
}

static void ref_free(ref *s)
{
    free(s->x);
    free(s->m);
    free(s->b);
    free(s->ew);
    free(s->es);
}

/* Step t of Algorithm 1 (beta, 1 - beta, eps, lr, wd as the optimizer rounds them to float). */
static void ref_step(ref *s, long t, double beta1, float eps, float lr, float wd, long T0)
{
    size_t d = s->d, D = s->D, C = s->C;
    int n = s->n;
    float beta = (float)beta1, a = (float)(1.0 - beta1);
    float *u = calloc(D, sizeof(float)), *q = calloc((size_t)n * D, sizeof(float));
    float *g = malloc(d * sizeof(float)), *avg = malloc(C * sizeof(float));
    float *qs = malloc(D * sizeof(float));
    for (int i = 0; i < n; i++) {
        make_grad(g, d, i, t);
        float *m = s->m + (size_t)i * d, *b = s->b + (size_t)i * d, *ew = s->ew + (size_t)i * D;
        for (size_t k = 0; k < d; k++) {
            m[k] = beta * m[k] + a * g[k];
            float bt = beta * b[k] + a * fabsf(g[k]);
            b[k] = (T0 > 0 && t > T0 && b[k] > bt) ? b[k] : bt;
        }
        for (size_t k = 0; k < D; k++) /* u = m / (b + eps) + e, zero beyond d */
            u[k] = (k < d ? m[k] / (b[k] + eps) : 0.0f) + ew[k];
        ref_quantise(u, ew, q + (size_t)i * D, D, ob_usign_key(SEED, (uint64_t)t, 1u + (uint64_t)i),
                     0);
    }
    for (int j = 0; j < n; j++) { /* server j: positions [j C, (j+1) C) */
        for (size_t k = 0; k < C; k++) {
            float acc = 0.0f;
            for (int i = 0; i < n; i++)
                acc += q[(size_t)i * D + (size_t)j * C + k];
            avg[k] = acc / (float)n + s->es[(size_t)j * C + k];
        }
        ref_quantise(avg, s->es + (size_t)j * C, qs + (size_t)j * C, C,
                     ob_usign_key(SEED, (uint64_t)t, 0), (size_t)j * C);
    }
    for (size_t k = 0; k < d; k++)
        s->x[k] = s->x[k] - lr * (qs[k] + wd * s->x[k]);
    free(u);
    free(q);
    free(g);
    free(avg);
    free(qs);
}

static int bits_equal(const float *a, const float *b, size_t n, size_t *at)
{
    for (size_t k = 0; k < n; k++)
        if (memcmp(&a[k], &b[k], sizeof(float)) != 0) {
            *at = k;
            return 0;
        }
    return 1;
}

/* The engine's BinSGDM against the reference over `steps` steps. */
static void run_against_reference(mpi_harness *h, size_t d, long steps, long T0, double wd,
                                  size_t bucket_bytes)
{
    ob_err err = {0};
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_BINSGDM);
    cfg.seed = SEED;
    cfg.max_denominator_step = T0;
    cfg.weight_decay = wd;
    cfg.bucket_bytes = bucket_bytes;
    float *x = malloc(d * sizeof(float)), *g = malloc(d * sizeof(float));
    for (size_t k = 0; k < d; k++)
        x[k] = 0.01f * (float)((k * 37) % 101) - 0.5f;
    ref s;
    ref_init(&s, h->size, d, cfg.block_size, x);
    ob_optim *o = NULL;
    MH_CHECK(h, ob_optim_create(&o, &cfg, c, x, d, &err) == OB_OK, "%s", err.msg);
    if (bucket_bytes) { /* tensors of 100 floats: the exchange cut into segments */
        size_t nt = (d + 99) / 100, *off = malloc(nt * sizeof *off);
        for (size_t i = 0; i < nt; i++)
            off[i] = 100 * i;
        MH_CHECK(h, ob_optim_set_tensor_layout(o, off, NULL, nt, &err) == OB_OK, "%s", err.msg);
        free(off);
    }
    float lr = 1e-3f;
    for (long t = 1; t <= steps; t++) {
        make_grad(g, d, h->rank, t);
        MH_CHECK(h, ob_optim_step(o, g, lr, &err) == OB_OK, "step %ld: %s", t, err.msg);
        ref_step(&s, t, cfg.beta1, (float)cfg.eps, lr, (float)cfg.weight_decay, T0);
    }
    ob_optim_state st;
    ob_optim_get_state(o, &st);
    size_t at = 0;
    size_t r = (size_t)h->rank;
    MH_CHECK(h, st.local_moments == 1, "binsgdm's moments are per rank");
    MH_CHECK(h, bits_equal(x, s.x, d, &at), "x[%zu] %.9g vs reference %.9g", at, x[at], s.x[at]);
    MH_CHECK(h, bits_equal(st.exp_avg, s.m + r * d, d, &at), "m[%zu]", at);
    MH_CHECK(h, bits_equal(st.exp_avg_sq, s.b + r * d, d, &at), "b[%zu]", at);
    MH_CHECK(h, st.padded_size == s.D && bits_equal(st.worker_error, s.ew + r * s.D, s.D, &at),
             "worker error[%zu]", at);
    /* The server error in the car's layout: with one segment, chunk r. */
    if (st.num_server_segments == 1)
        MH_CHECK(h, bits_equal(st.server_error, s.es + r * s.C, s.C, &at), "server error[%zu]", at);
    ob_optim_stats stats;
    ob_optim_get_stats(o, &stats);
    MH_CHECK(h, stats.phase == OB_PHASE_COMPRESSION && stats.freeze_step == 0,
             "compressed from the first step (phase %d, freeze %ld)", (int)stats.phase,
             stats.freeze_step);
    /* One bit an element both ways, nothing else: 2 (N-1) C / 8 bytes a step. */
    uint64_t per_step = h->size > 1 ? 2u * (uint64_t)(h->size - 1) * (s.C / 8) : 0;
    MH_CHECK(h, stats.bytes_sent == per_step * (uint64_t)steps, "bytes %llu, expected %llu",
             (unsigned long long)stats.bytes_sent, (unsigned long long)(per_step * steps));
    ob_optim_destroy(o);
    ref_free(&s);
    free(x);
    free(g);
    ob_comm_destroy(c);
}

static void test_binsgdm_matches_algorithm1(mpi_harness *h)
{
    run_against_reference(h, 1000, 30, 0, 0.0, 0);
}

static void test_binsgdm_running_max_and_decay(mpi_harness *h)
{
    run_against_reference(h, 777, 25, 10, 0.01, 0);
}

/* Segments change which rank holds a server error, not one bit of the result. */
static void test_binsgdm_segments_same_bits(mpi_harness *h)
{
    run_against_reference(h, 3000, 12, 0, 0.0, 1600);
}

/* Q is unbiased: over 2^20 positions the mean of Q(u) is u within 5 standard deviations, and
 * it saturates outside [-1, 1]. Every rank checks a different key. */
static void test_quantiser_unbiased(mpi_harness *h)
{
    const size_t n = (size_t)1 << 20;
    const float us[] = {-1.0f, -0.9f, -0.3f, 0.0f, 0.25f, 0.99f, 1.0f, 1.5f, -7.0f};
    float *x = malloc(n * sizeof(float)), *e = malloc(n * sizeof(float));
    float *out = malloc(n * sizeof(float));
    uint32_t *bits = malloc(ob_usign_bytes(n));
    for (size_t i = 0; i < sizeof us / sizeof *us; i++) {
        for (size_t k = 0; k < n; k++) {
            x[k] = us[i];
            e[k] = 0.0f;
        }
        uint64_t key = ob_usign_key(9, (uint64_t)i, (uint64_t)h->rank);
        ob_usign_compress_ef(x, n, e, n, key, 0, bits);
        ob_usign_decode(bits, n, out);
        double sum = 0.0;
        int err_ok = 1;
        for (size_t k = 0; k < n; k++) {
            sum += out[k];
            err_ok &= e[k] == us[i] - out[k];
        }
        double mean = sum / (double)n, u = us[i] > 1.0f ? 1.0 : us[i] < -1.0f ? -1.0 : us[i];
        double sd = sqrt((1.0 - u * u) / (double)n);
        MH_CHECK(h, fabs(mean - u) <= 5.0 * sd + 1e-6, "u %g: mean %.6f (sd %.2g)", (double)us[i],
                 mean, sd);
        MH_CHECK(h, err_ok, "u %g: the error is u - Q(u)", (double)us[i]);
    }
    /* The quantiser's words take the draws of their positions, across 2^32 too. */
    {
        size_t m = 256;
        uint64_t key = ob_usign_key(3, 4, 5), pos0 = ((uint64_t)1 << 32) - 128;
        for (size_t k = 0; k < m; k++) {
            x[k] = (float)k / 128.0f - 1.0f;
            e[k] = 0.0f;
        }
        ob_usign_compress_ef(x, m, e, m, key, pos0, bits);
        ob_usign_decode(bits, m, out);
        int same = 1;
        for (size_t k = 0; k < m; k++)
            same &= out[k] == (ob_usign_draw(key, pos0 + k) < x[k] ? 1.0f : -1.0f);
        MH_CHECK(h, same, "the packed word differs from the per-position draws");
    }
    /* Draws: uniform on [-1, 1), different keys unrelated. */
    double s1 = 0.0, s2 = 0.0, cross = 0.0;
    uint64_t k1 = ob_usign_key(1, 2, 3), k2 = ob_usign_key(1, 2, 4);
    for (size_t k = 0; k < n; k++) {
        double a = ob_usign_draw(k1, k), b = ob_usign_draw(k2, k);
        MH_CHECK(h, a >= -1.0 && a < 1.0, "draw %g", a);
        s1 += a;
        s2 += a * a;
        cross += a * b;
    }
    MH_CHECK(h, fabs(s1 / (double)n) < 0.005, "mean draw %g", s1 / (double)n);
    MH_CHECK(h, fabs(s2 / (double)n - 1.0 / 3.0) < 0.005, "E t^2 %g", s2 / (double)n);
    MH_CHECK(h, fabs(cross / (double)n) < 0.005, "two keys correlate: %g", cross / (double)n);
    free(x);
    free(e);
    free(out);
    free(bits);
}

/* The unit-sign car averages +-1 messages: every rank decodes values in [-1, 1] on the grid
 * of the server's own quantiser, identical on every rank. */
static void test_unit_car_identical_everywhere(mpi_harness *h)
{
    ob_err err = {0};
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    size_t d = 5000;
    ob_car *car = NULL;
    MH_CHECK(h, ob_car_create(&car, c, d, 64, OB_SCALE_UNIT, &err) == OB_OK, "%s", err.msg);
    float *in = malloc(d * sizeof(float)), *out = malloc(d * sizeof(float));
    float *all = malloc((size_t)h->size * d * sizeof(float));
    for (size_t k = 0; k < d; k++)
        in[k] = (float)(((k + (size_t)h->rank * 31) % 200)) / 100.0f - 1.0f;
    ob_car_set_key(car, 5, 1);
    MH_CHECK(h, ob_car_allreduce(car, in, out, &err) == OB_OK, "%s", err.msg);
    int pm1 = 1;
    for (size_t k = 0; k < d; k++)
        pm1 &= out[k] == 1.0f || out[k] == -1.0f;
    MH_CHECK(h, pm1, "the server's average is re-quantised to +-1");
    MPI_Allgather(out, (int)d, MPI_FLOAT, all, (int)d, MPI_FLOAT, MPI_COMM_WORLD);
    for (int r = 1; r < h->size; r++)
        MH_CHECK(h, memcmp(all, all + (size_t)r * d, d * sizeof(float)) == 0,
                 "rank %d decoded another vector", r);
    MH_CHECK(h,
             ob_car_bytes_per_call(car) ==
                 2u * (uint64_t)(h->size - 1) * ob_usign_bytes(ob_car_chunk_size(car)),
             "one bit an element, no scales");
    ob_car_destroy(car);
    free(in);
    free(out);
    free(all);
    ob_comm_destroy(c);
}

int main(int argc, char **argv)
{
    mpi_harness h;
    mpi_harness_init(&h, &argc, &argv);
    MH_RUN(&h, test_binsgdm_matches_algorithm1);
    MH_RUN(&h, test_binsgdm_running_max_and_decay);
    MH_RUN(&h, test_binsgdm_segments_same_bits);
    MH_RUN(&h, test_quantiser_unbiased);
    MH_RUN(&h, test_unit_car_identical_everywhere);
    return mpi_harness_finish(&h);
}
