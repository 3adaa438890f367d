/* The hierarchical compressed allreduce (ob_car_create_hier) on 2 to 6 MPI ranks, every
 * ranks_per_node that divides the world.
 *
 * Held against the algorithm written here with plain loops for the whole world in one process
 * (every rank simulates every rank): each node's fp32 average of its ranks' vectors, the 1-bit
 * exchange of every piece between the nodes with the node's worker error and every server's
 * error (1-bit Adam's sign and L1 scale per block), and the decoded average every rank must
 * hold. Output and both error buffers must agree bit for bit over several calls. Also: with
 * the same vector on every rank the hierarchical exchange is the flat one bit for bit, and only
 * the 1-bit messages cross between nodes. */
#include "mpi_harness.h"

#include "onebit/car.h"
#include "onebit/comm.h"
#include "onebit/compress.h"
#include "onebit/rng.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void make_input(float *x, size_t d, int r, int t)
{
    ob_rng rng;
    ob_rng_seed(&rng, 77 + 1000003u * (uint64_t)t, (uint64_t)r);
    for (size_t k = 0; k < d; k++)
        x[k] = (k % 11 == 4) ? 0.0f : ob_rng_normal(&rng) * (1.0f + 0.5f * (float)r);
}

/* Sign and L1 scale with error feedback on one block of u (overwritten by the error). */
static void ref_block(float *u, float *q, size_t B)
{
    double acc = 0.0;
    for (size_t k = 0; k < B; k++)
        acc += fabs((double)u[k]);
    float s = (float)(acc / (double)B);
    for (size_t k = 0; k < B; k++) {
        q[k] = u[k] >= 0.0f ? s : -s;
        u[k] = u[k] - q[k];
    }
}

typedef struct sim {
    int N, m, n;
    size_t d, D, C, B;
    float *we; /* (n, D) node worker errors by position */
    float *se; /* (N, C) server errors, row r: chunk r */
} sim;

static void sim_init(sim *s, int N, int m, size_t d, size_t B)
{
    s->N = N;
    s->m = m;
    s->n = N / m;
    s->d = d;
    s->B = B;
    size_t grid = (size_t)N * B;
    s->D = (d + grid - 1) / grid * grid;
    s->C = s->D / (size_t)N;
    s->we = calloc((size_t)s->n * s->D, sizeof(float));
    s->se = calloc((size_t)N * s->C, sizeof(float));
}

/* One call: xs (N, d) every rank's input, out (D) the average every rank decodes. */
static void sim_call(sim *s, const float *xs, float *out)
{
    size_t D = s->D, C = s->C, B = s->B, m = (size_t)s->m, n = (size_t)s->n;
    float *q = calloc(n * D, sizeof(float)), *u = malloc(C * sizeof(float));
    for (size_t k = 0; k < n; k++) {
        float *e = s->we + k * D;
        for (size_t i = 0; i < D; i++) {
            float acc = 0.0f;
            for (size_t l = 0; l < m; l++)
                acc += i < s->d ? xs[(k * m + l) * s->d + i] : 0.0f;
            e[i] = acc / (float)m + e[i]; /* u = avg + e, then the error in place */
        }
        for (size_t b = 0; b < D / B; b++)
            ref_block(e + b * B, q + k * D + b * B, B);
    }
    for (size_t r = 0; r < (size_t)s->N; r++) { /* server r: chunk r, the n nodes' messages */
        for (size_t i = 0; i < C; i++) {
            float acc = 0.0f;
            for (size_t k = 0; k < n; k++)
                acc += q[k * D + r * C + i];
            u[i] = acc / (float)n + s->se[r * C + i];
        }
        for (size_t b = 0; b < C / B; b++) {
            memcpy(s->se + r * C + b * B, u + b * B, B * sizeof(float));
            ref_block(s->se + r * C + b * B, out + r * C + b * B, B);
        }
    }
    free(q);
    free(u);
}

static void check_against_simulation(mpi_harness *h, int m, size_t d, size_t B)
{
    ob_err err = {0};
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    ob_car *car = NULL;
    ob_status st = ob_car_create_hier(&car, c, d, B, OB_SCALE_L1, m, &err);
    MH_CHECK(h, st == OB_OK, "m %d: %s", m, err.msg);
    if (st != OB_OK) {
        ob_comm_destroy(c);
        return;
    }
    int N = h->size, r = h->rank;
    sim s;
    sim_init(&s, N, m, d, B);
    MH_CHECK(h, ob_car_padded_size(car) == s.D && ob_car_chunk_size(car) == s.C, "sizes");
    MH_CHECK(h, ob_car_ranks_per_node(car) == (m > 1 ? m : 1), "ranks a node");
    float *xs = malloc((size_t)N * d * sizeof(float)), *out = malloc(d * sizeof(float));
    float *want = malloc(s.D * sizeof(float));
    for (int t = 0; t < 4; t++) {
        for (int q = 0; q < N; q++)
            make_input(xs + (size_t)q * d, d, q, t);
        MH_CHECK(h, ob_car_allreduce(car, xs + (size_t)r * d, out, &err) == OB_OK, "%s", err.msg);
        sim_call(&s, xs, want);
        MH_CHECK(h, memcmp(out, want, d * sizeof(float)) == 0, "m %d call %d: output differs", m,
                 t);
    }
    /* This rank's errors: its node's on its piece (zero elsewhere), its server chunk. */
    const float *we = ob_car_worker_error(car), *se = ob_car_server_error(car);
    size_t l = (size_t)(r % (m > 1 ? m : 1)), k = (size_t)(r / (m > 1 ? m : 1)), mm = m > 1 ? m : 1;
    int ok = 1;
    for (size_t i = 0; i < s.D; i++) {
        size_t chunk = i / s.C;
        float want_e = mm == 1 || chunk % mm == l ? s.we[k * s.D + i] : 0.0f;
        if (mm == 1) want_e = s.we[(size_t)r * s.D + i];
        ok &= memcmp(&we[i], &want_e, sizeof(float)) == 0;
    }
    MH_CHECK(h, ok, "m %d: worker error", m);
    MH_CHECK(h, memcmp(se, s.se + (size_t)r * s.C, s.C * sizeof(float)) == 0, "m %d: server error",
             m);
    ob_car_destroy(car);
    free(xs);
    free(out);
    free(want);
    free(s.we);
    free(s.se);
    ob_comm_destroy(c);
}

static void test_hier_matches_simulation(mpi_harness *h)
{
    for (int m = 2; m <= h->size; m++)
        if (h->size % m == 0) check_against_simulation(h, m, 3000, 64);
}

/* The simulation with m = 1 is the flat exchange: the flat car matches it too (the reference
 * itself is checked). */
static void test_flat_matches_simulation_m1(mpi_harness *h)
{
    check_against_simulation(h, 1, 1000, 32);
}

/* The same vector on every rank, of values k/8 (so that every scale and every sum of equal
 * messages is exact, 3 s and 6 s included): a node's average is that vector exactly (m a power
 * of two), and the hierarchical exchange decodes the flat one's bits. */
static void test_hier_equals_flat_on_equal_inputs(mpi_harness *h)
{
    if (h->size % 2 != 0) return;
    ob_err err = {0};
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    size_t d = 2500;
    ob_car *flat = NULL, *hier = NULL;
    MH_CHECK(h, ob_car_create(&flat, c, d, 32, OB_SCALE_L1, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_car_create_hier(&hier, c, d, 32, OB_SCALE_L1, 2, &err) == OB_OK, "%s", err.msg);
    float *x = malloc(d * sizeof(float)), *a = malloc(d * sizeof(float));
    float *b = malloc(d * sizeof(float));
    for (int t = 0; t < 3; t++) {
        for (size_t k = 0; k < d; k++)
            x[k] = (float)((int)((k * 7 + (size_t)t * 3) % 17) - 8) / 8.0f;
        MH_CHECK(h, ob_car_allreduce(flat, x, a, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_car_allreduce(hier, x, b, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, memcmp(a, b, d * sizeof(float)) == 0, "call %d: flat and hierarchical differ",
                 t);
    }
    /* Between nodes only 1-bit messages: 2 (n - 1) of them a call; inside a node the pieces in
     * fp32 and the messages. */
    size_t C = ob_car_chunk_size(hier), n = (size_t)h->size / 2;
    uint64_t msg = ob_packed_bytes(C, 32);
    uint64_t want = 2u * (n - 1) * msg + (n * C * sizeof(float) + n * msg);
    MH_CHECK(h, ob_car_bytes_per_call(hier) == want, "bytes %llu, expected %llu",
             (unsigned long long)ob_car_bytes_per_call(hier), (unsigned long long)want);
    ob_car_destroy(flat);
    ob_car_destroy(hier);
    free(x);
    free(a);
    free(b);
    ob_comm_destroy(c);
}

static void test_hier_refuses(mpi_harness *h)
{
    ob_err err = {0};
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    ob_car *car = NULL;
    if (h->size % 4 != 0) {
        MH_CHECK(h,
                 ob_car_create_hier(&car, c, 100, 32, OB_SCALE_L1, 4, &err) == OB_ERR_INVALID_ARG &&
                     strstr(err.msg, "must divide"),
                 "4 ranks a node on %d ranks: %s", h->size, err.msg);
        MH_CHECK(h, car == NULL, "nothing created");
    }
    ob_comm_destroy(c);
}

/* A split communicator counts its traffic on its source too. */
static void test_split_counts_on_source(mpi_harness *h)
{
    ob_err err = {0};
    ob_comm *c = NULL, *half = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_comm_split(c, h->rank % 2, h->rank, &half, &err) == OB_OK, "%s", err.msg);
    int expect = (h->size + 1 - h->rank % 2) / 2;
    MH_CHECK(h, ob_comm_size(half) == expect && ob_comm_rank(half) == h->rank / 2,
             "split: rank %d of %d", ob_comm_rank(half), ob_comm_size(half));
    float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t before = ob_comm_bytes_sent(c);
    MH_CHECK(h, ob_comm_allreduce_sum_f32(half, buf, 8, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, buf[0] == (float)expect, "sum over the half: %g", (double)buf[0]);
    MH_CHECK(h, ob_comm_bytes_sent(c) - before == ob_comm_bytes_sent(half),
             "the source counts the split's bytes");
    ob_comm_destroy(half);
    ob_comm_destroy(c);
}

/* The shapes a placement allows, from node arrays as ob_comm_node_map gives them (the lowest
 * rank of each node), whatever the world: every case the rules name. */
static void test_shape_of(mpi_harness *h)
{
    static const struct {
        int n, node[8], want;
        const char *why;
    } cases[] = {
        {4, {0, 0, 2, 2}, 2, "2 nodes of 2 ranks"},
        {6, {0, 0, 0, 3, 3, 3}, 3, "2 nodes of 3 ranks"},
        {6, {0, 0, 2, 2, 4, 4}, 2, "3 nodes of 2 ranks"},
        {4, {0, 0, 0, 0}, 1, "all 4 ranks on one node"},
        {1, {0}, 1, "a world of one rank"},
        {4, {0, 1, 2, 3}, 1, "one rank a node (4 nodes)"},
        {4,
         {0, 0, 0, 3},
         1,
         "nodes of uneven size: 3 ranks on the node of rank 0, 1 on the node "
         "of rank 3"},
        {5,
         {0, 0, 2, 2, 2},
         1,
         "nodes of uneven size: 2 ranks on the node of rank 0, 3 on the "
         "node of rank 2"},
        {4,
         {0, 1, 0, 1},
         1,
         "ranks not numbered node by node: rank 2 is on the node of rank 0, "
         "rank 1 is not"},
        {6,
         {0, 0, 2, 2, 0, 0},
         1,
         "ranks not numbered node by node: rank 4 is on the node of "
         "rank 0, rank 3 is not"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[200];
        int m = ob_car_shape_of(cases[i].node, cases[i].n, why, sizeof why);
        MH_CHECK(h, m == cases[i].want && strcmp(why, cases[i].why) == 0,
                 "case %zu: %d, '%s'; expected %d, '%s'", i, m, why, cases[i].want, cases[i].why);
    }
    MH_CHECK(h, ob_car_shape_of(cases[0].node, 4, NULL, 0) == 2, "no buffer for the reason");
}

/* ob_comm_node_map: one node under mpirun on one machine (MPI_COMM_TYPE_SHARED); the
 * launcher's layout from OB_COMM_NODES_ENV, "M" or one size per node; malformed values. */
static void test_node_map(mpi_harness *h)
{
    ob_err err = {0};
    ob_comm *c = NULL, *self = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_comm_create_self(&self, &err) == OB_OK, "%s", err.msg);
    int N = h->size, node[8] = {0}, one = -1;
    const char *src = NULL;
    unsetenv(OB_COMM_NODES_ENV);
    MH_CHECK(h, ob_comm_node_map(c, node, &src, &err) == OB_OK, "%s", err.msg);
    for (int r = 0; r < N; r++)
        MH_CHECK(h, node[r] == 0, "one machine: rank %d on the node of %d", r, node[r]);
    MH_CHECK(h, src && strcmp(src, "MPI_COMM_TYPE_SHARED") == 0, "source %s", src);
    MH_CHECK(h,
             ob_comm_node_map(self, &one, &src, &err) == OB_OK && one == 0 &&
                 strcmp(src, "self") == 0,
             "self: %d %s", one, src);

    setenv(OB_COMM_NODES_ENV, "2", 1);
    MH_CHECK(h, ob_comm_node_map(c, node, &src, &err) == OB_OK, "%s", err.msg);
    for (int r = 0; r < N; r++)
        MH_CHECK(h, node[r] == r / 2 * 2, "\"2\": rank %d on the node of %d", r, node[r]);
    MH_CHECK(h, strcmp(src, OB_COMM_NODES_ENV) == 0, "source %s", src);
    if (N == 4) {
        setenv(OB_COMM_NODES_ENV, "3,1", 1);
        MH_CHECK(h, ob_comm_node_map(c, node, NULL, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, node[0] == 0 && node[1] == 0 && node[2] == 0 && node[3] == 3,
                 "\"3,1\": %d %d %d %d", node[0], node[1], node[2], node[3]);
        setenv(OB_COMM_NODES_ENV, "2,2,2", 1);
        MH_CHECK(h,
                 ob_comm_node_map(c, node, NULL, &err) == OB_ERR_INVALID_ARG &&
                     strstr(err.msg, "ONEBIT_RANKS_PER_NODE=2,2,2: nodes of 6 ranks in all, "
                                     "not the 4 ranks of the job"),
                 "sizes that do not sum to the world: %s", err.msg);
    }
    static const char *const bad[] = {"0", "x", "2,", ",2", "2;2", "-2", "999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv(OB_COMM_NODES_ENV, bad[i], 1);
        MH_CHECK(h,
                 ob_comm_node_map(c, node, NULL, &err) == OB_ERR_INVALID_ARG &&
                     strstr(err.msg, "expected the ranks a node"),
                 "'%s': %s", bad[i], err.msg);
    }
    unsetenv(OB_COMM_NODES_ENV);
    ob_comm_destroy(self);
    ob_comm_destroy(c);
}

/* ob_car_auto_ranks_per_node, and a car built with what it chose: the launcher's 2 nodes of
 * N/2 ranks give ranks_per_node N/2 and the explicit hierarchical car's bits; one machine gives
 * the flat car's bits; uneven nodes fall back to flat and say why. */
static void test_auto_shape(mpi_harness *h)
{
    int N = h->size;
    if (N % 2 != 0) return;
    ob_err err = {0};
    ob_comm *c = NULL;
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    char why[200], want[200];
    int m = 0, half = N / 2;
    size_t d = 2000;
    float *x = malloc(d * sizeof(float)), *a = malloc(d * sizeof(float));
    float *b = malloc(d * sizeof(float));
    static const char *const envs[] = {NULL, "half", "uneven"};
    for (size_t e = 0; e < 3; e++) {
        char val[32];
        int expect = 1;
        if (e == 2 && N == 2) continue; /* "1,1" is one rank a node, not uneven */
        if (!envs[e]) {
            unsetenv(OB_COMM_NODES_ENV);
            snprintf(want, sizeof want, "all %d ranks on one node (MPI_COMM_TYPE_SHARED)", N);
        } else if (strcmp(envs[e], "half") == 0) {
            snprintf(val, sizeof val, "%d", half);
            setenv(OB_COMM_NODES_ENV, val, 1);
            expect = half > 1 ? half : 1;
            if (half > 1)
                snprintf(want, sizeof want, "2 nodes of %d ranks (ONEBIT_RANKS_PER_NODE)", half);
            else
                snprintf(want, sizeof want, "one rank a node (2 nodes) (ONEBIT_RANKS_PER_NODE)");
        } else {
            snprintf(val, sizeof val, "%d,1", N - 1);
            setenv(OB_COMM_NODES_ENV, val, 1);
            snprintf(want, sizeof want,
                     "nodes of uneven size: %d ranks on the node of rank 0, 1 on the node of "
                     "rank %d (ONEBIT_RANKS_PER_NODE)",
                     N - 1, N - 1);
        }
        MH_CHECK(h, ob_car_auto_ranks_per_node(c, &m, why, sizeof why, &err) == OB_OK, "%s",
                 err.msg);
        MH_CHECK(h, m == expect && strcmp(why, want) == 0, "%s: %d '%s', expected %d '%s'",
                 envs[e] ? envs[e] : "one machine", m, why, expect, want);
        ob_car *chosen = NULL, *explicit = NULL;
        MH_CHECK(h, ob_car_create_hier(&chosen, c, d, 32, OB_SCALE_L1, m, &err) == OB_OK, "%s",
                 err.msg);
        MH_CHECK(h, ob_car_create_hier(&explicit, c, d, 32, OB_SCALE_L1, expect, &err) == OB_OK,
                 "%s", err.msg);
        for (int t = 0; t < 3 && chosen && explicit; t++) {
            make_input(x, d, h->rank, t);
            MH_CHECK(h, ob_car_allreduce(chosen, x, a, &err) == OB_OK, "%s", err.msg);
            MH_CHECK(h, ob_car_allreduce(explicit, x, b, &err) == OB_OK, "%s", err.msg);
            MH_CHECK(h, memcmp(a, b, d * sizeof(float)) == 0, "%s call %d: bits differ",
                     envs[e] ? envs[e] : "one machine", t);
        }
        ob_car_destroy(chosen);
        ob_car_destroy(explicit);
    }
    unsetenv(OB_COMM_NODES_ENV);
    /* A malformed variable is an error, the same on every rank. */
    setenv(OB_COMM_NODES_ENV, "two", 1);
    MH_CHECK(h, ob_car_auto_ranks_per_node(c, &m, why, sizeof why, &err) == OB_ERR_INVALID_ARG,
             "malformed: %s", err.msg);
    unsetenv(OB_COMM_NODES_ENV);
    free(x);
    free(a);
    free(b);
    ob_comm_destroy(c);
}

int main(int argc, char **argv)
{
    mpi_harness h;
    mpi_harness_init(&h, &argc, &argv);
    MH_RUN(&h, test_split_counts_on_source);
    MH_RUN(&h, test_flat_matches_simulation_m1);
    MH_RUN(&h, test_hier_matches_simulation);
    MH_RUN(&h, test_hier_equals_flat_on_equal_inputs);
    MH_RUN(&h, test_hier_refuses);
    MH_RUN(&h, test_shape_of);
    MH_RUN(&h, test_node_map);
    MH_RUN(&h, test_auto_shape);
    return mpi_harness_finish(&h);
}
