/* Multi-rank tests of the MPI communicator, the compressed allreduce and the optimizer's
 * traffic. Run by ctest under mpirun with 1 to 5 ranks.
 *
 * The compressed allreduce is checked against a single-process simulation of all ranks of
 * Algorithm 1, written here from the paper's equations with plain loops (every rank simulates
 * the whole world, so no communication is trusted). */
#include "mpi_harness.h"

#include "onebit/car.h"
#include "onebit/comm.h"
#include "onebit/optim.h"
#include "onebit/rng.h"

#include <stdint.h>
#include <string.h>

/* Input of rank r at step t: normal values, every 13th exactly zero (sign(0) = +1 path). */
static void make_input(float *x, size_t d, int r, int t, uint64_t seed)
{
    ob_rng rng;
    ob_rng_seed(&rng, seed + 1000003u * (uint64_t)t, (uint64_t)r);
    for (size_t k = 0; k < d; k++) {
        float z = ob_rng_normal(&rng) * (1.0f + 0.25f * (float)t);
        x[k] = (k % 13 == 5) ? 0.0f : z;
    }
}

/* ---- the reference: Algorithm 1 for all ranks, in one process ---------------------------- */

typedef struct sim {
    int n;
    size_t d, D, C, B;
    int l2;
    float *ew;   /* (n, D) worker errors */
    float *es;   /* (n, C) server errors, row j for server j */
    float *q;    /* (n, D) compressed worker messages, decoded */
    float *mbar; /* (D) */
} sim;

static void sim_init(sim *s, int n, size_t d, size_t B, int l2)
{
    s->n = n;
    s->d = d;
    s->B = B;
    s->l2 = l2;
    size_t nb = (size_t)n * B;
    s->D = (d + nb - 1) / nb * nb;
    s->C = s->D / (size_t)n;
    s->ew = calloc((size_t)n * s->D, sizeof(float));
    s->es = calloc((size_t)n * s->C, sizeof(float));
    s->q = calloc((size_t)n * s->D, sizeof(float));
    s->mbar = calloc(s->D, sizeof(float));
}

static void sim_free(sim *s)
{
    free(s->ew);
    free(s->es);
    free(s->q);
    free(s->mbar);
}

/* C_omega with error feedback on one block: u is overwritten by the new error, q by the
 * quantised values. */
static void sim_compress_block(float *u_then_e, float *q, size_t B, int l2)
{
    double acc = 0.0;
    for (size_t k = 0; k < B; k++)
        acc += l2 ? (double)u_then_e[k] * u_then_e[k] : fabs((double)u_then_e[k]);
    float scale = l2 ? (float)sqrt(acc / (double)B) : (float)(acc / (double)B);
    for (size_t k = 0; k < B; k++) {
        float u = u_then_e[k];
        q[k] = u >= 0.0f ? scale : -scale;
        u_then_e[k] = u - q[k];
    }
}

/* One step: xs holds every rank's d-element input, rank-major. */
static void sim_step(sim *s, const float *xs)
{
    for (int i = 0; i < s->n; i++) {
        float *e = s->ew + (size_t)i * s->D, *q = s->q + (size_t)i * s->D;
        for (size_t k = 0; k < s->D; k++)
            e[k] = (k < s->d ? xs[(size_t)i * s->d + k] : 0.0f) + e[k];
        for (size_t b = 0; b < s->D; b += s->B)
            sim_compress_block(e + b, q + b, s->B, s->l2);
    }
    for (int j = 0; j < s->n; j++) {
        float *es = s->es + (size_t)j * s->C;
        for (size_t k = 0; k < s->C; k++) {
            size_t g = (size_t)j * s->C + k;
            float acc = 0.0f;
            for (int i = 0; i < s->n; i++)
                acc += s->q[(size_t)i * s->D + g];
            es[k] = acc / (float)s->n + es[k];
        }
        for (size_t b = 0; b < s->C; b += s->B)
            sim_compress_block(es + b, s->mbar + (size_t)j * s->C + b, s->B, s->l2);
    }
}

/* ---- cases --------------------------------------------------------------------------------- */

static void test_comm_collectives(mpi_harness *h)
{
    ob_comm *c = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    if (!c) return;
    int n = h->size, r = h->rank;
    MH_CHECK(h, ob_comm_rank(c) == r && ob_comm_size(c) == n, "rank/size");

    size_t counts[] = {1, 7, 1000, (size_t)n * 1000, 100003};
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        size_t cnt = counts[ci];
        float *buf = malloc(cnt * sizeof(float));
        for (size_t k = 0; k < cnt; k++)
            buf[k] = (float)((r + 1) * (int)(k % 7 + 1));
        uint64_t before = ob_comm_bytes_sent(c);
        MH_CHECK(h, ob_comm_allreduce_sum_f32(c, buf, cnt, &err) == OB_OK, "%s", err.msg);
        uint64_t sent = ob_comm_bytes_sent(c) - before;
        long bad = 0;
        for (size_t k = 0; k < cnt; k++) {
            float want = (float)(n * (n + 1) / 2 * (int)(k % 7 + 1));
            if (buf[k] != want) bad++;
        }
        MH_CHECK(h, bad == 0, "allreduce of %zu floats: %ld wrong sums", cnt, bad);
        if (cnt % (size_t)n == 0)
            MH_CHECK(h, sent == 2ull * (uint64_t)(n - 1) * (cnt / (size_t)n) * 4u,
                     "allreduce of %zu floats counted %llu bytes", cnt, (unsigned long long)sent);
        /* Over all ranks the ring sends every element 2(N-1) times. */
        unsigned long long total = 0, mine = sent;
        MPI_Allreduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        MH_CHECK(h, total == 2ull * (unsigned long long)(n - 1) * cnt * 4u,
                 "allreduce total bytes %llu for %zu floats", total, cnt);
        free(buf);
    }

    /* alltoall: block p of rank r carries (r, p); the receiver checks both. */
    size_t per = 12;
    int *send = malloc((size_t)n * per * sizeof(int)),
        *recv = malloc((size_t)n * per * sizeof(int));
    for (int p = 0; p < n; p++)
        for (size_t k = 0; k < per; k++)
            send[(size_t)p * per + k] = r * 10000 + p * 100 + (int)k;
    uint64_t before = ob_comm_bytes_sent(c);
    MH_CHECK(h, ob_comm_alltoall(c, send, recv, per * sizeof(int), &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_comm_bytes_sent(c) - before == (uint64_t)(n - 1) * per * sizeof(int),
             "alltoall bytes");
    long bad = 0;
    for (int p = 0; p < n; p++)
        for (size_t k = 0; k < per; k++)
            if (recv[(size_t)p * per + k] != p * 10000 + r * 100 + (int)k) bad++;
    MH_CHECK(h, bad == 0, "alltoall: %ld wrong values", bad);

    /* shift: one ring step, (r, k) goes to rank r+1; large enough for several TCP segments,
     * counted as the bytes sent, and a world of one gets its own block. */
    {
        size_t cnt = 100003;
        int *out = malloc(cnt * sizeof(int)), *in = malloc(cnt * sizeof(int));
        for (size_t k = 0; k < cnt; k++)
            out[k] = r * 1000003 + (int)k;
        before = ob_comm_bytes_sent(c);
        MH_CHECK(h, ob_comm_shift(c, out, in, cnt * sizeof(int), &err) == OB_OK, "%s", err.msg);
        uint64_t shifted = ob_comm_bytes_sent(c) - before;
        MH_CHECK(h, shifted == (n > 1 ? cnt * sizeof(int) : 0), "shift counted %llu bytes",
                 (unsigned long long)shifted);
        int left = (r + n - 1) % n;
        bad = 0;
        for (size_t k = 0; k < cnt; k++)
            if (in[k] != left * 1000003 + (int)k) bad++;
        MH_CHECK(h, bad == 0, "shift: %ld values not the left neighbour's", bad);
        free(out), free(in);
    }

    /* allgather, out of place and in place */
    for (int inplace = 0; inplace < 2; inplace++) {
        int mine[3] = {r, r * 2, r * 3};
        memset(recv, 0xff, (size_t)n * 3 * sizeof(int));
        const void *src = mine;
        if (inplace) {
            memcpy(recv + 3 * r, mine, sizeof mine);
            src = recv + 3 * r;
        }
        MH_CHECK(h, ob_comm_allgather(c, src, recv, sizeof mine, &err) == OB_OK, "%s", err.msg);
        bad = 0;
        for (int p = 0; p < n; p++)
            if (recv[3 * p] != p || recv[3 * p + 1] != 2 * p || recv[3 * p + 2] != 3 * p) bad++;
        MH_CHECK(h, bad == 0, "allgather (in place %d): %ld wrong blocks", inplace, bad);
    }

    double payload[2] = {r == n - 1 ? 3.25 : 0.0, r == n - 1 ? -1.5 : 0.0};
    before = ob_comm_bytes_sent(c);
    MH_CHECK(h, ob_comm_bcast(c, payload, sizeof payload, n - 1, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, payload[0] == 3.25 && payload[1] == -1.5, "bcast value");
    MH_CHECK(
        h, ob_comm_bytes_sent(c) - before == (r == n - 1 ? (uint64_t)(n - 1) * sizeof payload : 0),
        "bcast bytes");
    MH_CHECK(h, ob_comm_bcast(c, payload, sizeof payload, n, &err) == OB_ERR_INVALID_ARG,
             "bcast with root out of range must be rejected");
    MH_CHECK(h, ob_comm_barrier(c, &err) == OB_OK, "%s", err.msg);
    free(send);
    free(recv);
    ob_comm_destroy(c);
}

/* Alltoall and allgather on both sides of the size where the MPI backend switches from the
 * direct exchange to the step-by-step schedules (60 KiB per block), and far above it. */
/* Value k of rank r's input: a float with a full mantissa, so that the order of the additions
 * shows in the bits. */
static float ring_input(int r, size_t k)
{
    uint64_t z = ((uint64_t)r << 40) ^ (k * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 29;
    return (float)((double)(z >> 11) / 9007199254740992.0 - 0.5) * 3.0f;
}

/* The ring allreduce adds in a fixed order: element k of ring chunk c (count split into n
 * chunks, sizes differing by at most one, the larger first) starts at rank c, and every next
 * rank to the right adds its own value to what came from the left. The sums must be exactly
 * those of that order, on every rank, whatever the pipeline's segments (one segment and many,
 * chunks of uneven size, chunks shorter than a segment, empty chunks). */
static void test_allreduce_ring_order(mpi_harness *h)
{
    ob_comm *c = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    if (!c) return;
    int n = h->size, r = h->rank;
    size_t counts[] = {1, 3, 1000, 65536, (size_t)n * 65536 * 3 + 5, 1000003};
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        size_t cnt = counts[ci], base = cnt / (size_t)n, extra = cnt % (size_t)n;
        float *buf = malloc(cnt * sizeof(float));
        MH_CHECK(h, buf != NULL, "out of memory");
        if (!buf) break;
        for (size_t k = 0; k < cnt; k++)
            buf[k] = ring_input(r, k);
        MH_CHECK(h, ob_comm_allreduce_sum_f32(c, buf, cnt, &err) == OB_OK, "%s", err.msg);
        long bad = 0;
        size_t first = SIZE_MAX;
        for (int ch = 0, k0 = 0; ch < n; ch++) {
            size_t len = base + ((size_t)ch < extra ? 1 : 0);
            for (size_t k = (size_t)k0; k < (size_t)k0 + len; k++) {
                float acc = ring_input(ch, k);
                for (int i = 1; i < n; i++)
                    acc = ring_input((ch + i) % n, k) + acc;
                if (memcmp(&acc, &buf[k], sizeof acc) != 0) {
                    bad++;
                    if (first == SIZE_MAX) first = k;
                }
            }
            k0 += (int)len;
        }
        MH_CHECK(h, bad == 0, "allreduce of %zu floats: %ld sums differ from the ring's order "
                 "(first at %zu)", cnt, bad, first);
        free(buf);
    }
    ob_comm_destroy(c);
}

static void test_comm_block_sizes(mpi_harness *h)
{
    ob_comm *c = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    if (!c) return;
    int n = h->size, r = h->rank;
    /* ints per block: 60 KiB, just above, 156 KiB, 1 MiB + 12 bytes */
    size_t pers[] = {15360, 15361, 40000, 262147};
    for (size_t pi = 0; pi < sizeof pers / sizeof *pers; pi++) {
        size_t per = pers[pi], bytes = per * sizeof(int);
        int *send = malloc((size_t)n * bytes), *recv = malloc((size_t)n * bytes);
        for (int p = 0; p < n; p++)
            for (size_t k = 0; k < per; k++)
                send[(size_t)p * per + k] = (r * 64 + p) * 100003 + (int)k;
        uint64_t before = ob_comm_bytes_sent(c);
        MH_CHECK(h, ob_comm_alltoall(c, send, recv, bytes, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_comm_bytes_sent(c) - before == (uint64_t)(n - 1) * bytes,
                 "alltoall of %zu bytes: bytes counted", bytes);
        long bad = 0;
        for (int p = 0; p < n; p++)
            for (size_t k = 0; k < per; k++)
                if (recv[(size_t)p * per + k] != (p * 64 + r) * 100003 + (int)k) bad++;
        MH_CHECK(h, bad == 0, "alltoall of %zu bytes per block: %ld wrong values", bytes, bad);

        for (int inplace = 0; inplace < 2; inplace++) {
            memset(recv, 0xff, (size_t)n * bytes);
            const int *src = send; /* block 0 of send: this rank's contribution */
            if (inplace) {
                memcpy(recv + (size_t)r * per, send, bytes);
                src = recv + (size_t)r * per;
            }
            before = ob_comm_bytes_sent(c);
            MH_CHECK(h, ob_comm_allgather(c, src, recv, bytes, &err) == OB_OK, "%s", err.msg);
            MH_CHECK(h, ob_comm_bytes_sent(c) - before == (uint64_t)(n - 1) * bytes,
                     "allgather of %zu bytes: bytes counted", bytes);
            bad = 0;
            for (int p = 0; p < n; p++)
                for (size_t k = 0; k < per; k++)
                    if (recv[(size_t)p * per + k] != (p * 64) * 100003 + (int)k) bad++;
            MH_CHECK(h, bad == 0, "allgather of %zu bytes (in place %d): %ld wrong values", bytes,
                     inplace, bad);
        }
        free(send);
        free(recv);
    }
    ob_comm_destroy(c);
}

typedef struct car_case {
    size_t d, B;
    ob_scale_kind scale;
} car_case;

static void check_car_case(mpi_harness *h, ob_comm *c, car_case cc)
{
    int n = h->size, r = h->rank;
    ob_err err = {0};
    ob_car *car = NULL;
    MH_CHECK(h, ob_car_create(&car, c, cc.d, cc.B, cc.scale, &err) == OB_OK, "%s", err.msg);
    if (!car) return;
    sim s;
    sim_init(&s, n, cc.d, cc.B, cc.scale == OB_SCALE_L2);
    MH_CHECK(h, ob_car_padded_size(car) == s.D && ob_car_chunk_size(car) == s.C,
             "d=%zu: padded %zu chunk %zu, expected %zu %zu", cc.d, ob_car_padded_size(car),
             ob_car_chunk_size(car), s.D, s.C);

    float *xs = malloc((size_t)n * cc.d * sizeof(float));
    float *out = malloc(cc.d * sizeof(float));
    long mism = 0, err_mism = 0;
    for (int t = 0; t < 5; t++) {
        for (int i = 0; i < n; i++)
            make_input(xs + (size_t)i * cc.d, cc.d, i, t, 42 + cc.d);
        sim_step(&s, xs);
        /* in == out aliasing, as the optimizer uses it */
        memcpy(out, xs + (size_t)r * cc.d, cc.d * sizeof(float));
        MH_CHECK(h, ob_car_allreduce(car, out, out, &err) == OB_OK, "%s", err.msg);
        for (size_t k = 0; k < cc.d; k++)
            if (!mh_close(out[k], s.mbar[k], 1e-6, 1e-30)) {
                if (mism++ < 3)
                    fprintf(stderr, "[rank %d] d=%zu B=%zu step %d elem %zu: car %.9g sim %.9g\n",
                            r, cc.d, cc.B, t, k, out[k], s.mbar[k]);
            }
        const float *ew = ob_car_worker_error(car), *es = ob_car_server_error(car);
        for (size_t k = 0; k < s.D; k++)
            if (!mh_close(ew[k], s.ew[(size_t)r * s.D + k], 1e-5, 1e-6)) err_mism++;
        for (size_t k = 0; k < s.C; k++)
            if (!mh_close(es[k], s.es[(size_t)r * s.C + k], 1e-5, 1e-6)) err_mism++;
    }
    MH_CHECK(h, mism == 0, "d=%zu B=%zu %s: %ld outputs differ from the simulation", cc.d, cc.B,
             cc.scale == OB_SCALE_L2 ? "l2" : "l1", mism);
    MH_CHECK(h, err_mism == 0, "d=%zu B=%zu: %ld error-buffer elements differ", cc.d, cc.B,
             err_mism);
    free(xs);
    free(out);
    sim_free(&s);
    ob_car_destroy(car);
}

/* Global position of element k of rank r's server error under the layout bounds[0 .. nseg]. */
static size_t server_position(const size_t *bounds, size_t nseg, int n, int r, size_t k)
{
    for (size_t s = 0; s < nseg; s++) {
        size_t L = (bounds[s + 1] - bounds[s]) / (size_t)n;
        if (k < L) return bounds[s] + (size_t)r * L + k;
        k -= L;
    }
    return SIZE_MAX;
}

/* Every rank's server error laid out by global position (D floats). */
static void server_by_position(ob_comm *c, ob_car *car, float *global)
{
    int n = ob_comm_size(c);
    size_t C = ob_car_chunk_size(car), nseg = ob_car_num_segments(car);
    const size_t *bounds = ob_car_segment_bounds(car);
    float *all = malloc((size_t)n * C * sizeof *all);
    ob_comm_allgather(c, ob_car_server_error(car), all, C * sizeof(float), NULL);
    for (int r = 0; r < n; r++)
        for (size_t k = 0; k < C; k++)
            global[server_position(bounds, nseg, n, r, k)] = all[(size_t)r * C + k];
    free(all);
}

/* Segments change no bit: the same inputs through one segment and through several (run in
 * ob_car_allreduce's order and in the opposite one) give the same outputs and the same worker
 * errors bit for bit, and the same server error at every position; the bounds follow the rule
 * (cuts rounded up to N*B, 0, D and repeats dropped); bad cuts are refused. */
static void test_car_segments_change_no_bit(mpi_harness *h)
{
    ob_comm *c = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    if (!c) return;
    int n = h->size;
    const size_t B = 64, grid = (size_t)n * B;
    const size_t ds[] = {5 * grid + 17, 9 * grid, 3 * grid - 1};
    for (size_t di = 0; di < sizeof ds / sizeof *ds; di++) {
        size_t d = ds[di];
        /* 0, a repeat, one inside the first grid cell, exact grid points, one above D's last
         * cell start, d itself. */
        size_t cuts[] = {0, 1, 1, grid, 2 * grid + 5, 2 * grid + 5, d - 1, d};
        ob_car *a = NULL, *b = NULL;
        MH_CHECK(h, ob_car_create(&a, c, d, B, OB_SCALE_L1, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_car_create(&b, c, d, B, OB_SCALE_L1, &err) == OB_OK, "%s", err.msg);
        if (!a || !b) break;
        MH_CHECK(h, ob_car_set_segments(b, cuts, sizeof cuts / sizeof *cuts, &err) == OB_OK, "%s",
                 err.msg);
        size_t D = ob_car_padded_size(b), nseg = ob_car_num_segments(b);
        const size_t *bd = ob_car_segment_bounds(b);
        /* Expected bounds: 0, grid (from 1 and grid), 3 grid (from 2 grid + 5), then
         * round_up(d - 1) and round_up(d) when below D (never: d > D - grid), D. */
        size_t expect[] = {0, grid, 3 * grid, D};
        size_t ne = D > 3 * grid ? 4 : 3;
        if (ne == 3) expect[2] = D;
        MH_CHECK(h, nseg == ne - 1, "d=%zu: %zu segments, expected %zu", d, nseg, ne - 1);
        for (size_t i = 0; i < ne && i <= nseg; i++)
            MH_CHECK(h, bd[i] == expect[i], "d=%zu: bound %zu is %zu, expected %zu", d, i, bd[i],
                     expect[i]);
        float *xa = malloc(d * sizeof *xa), *xb = malloc(d * sizeof *xb);
        float *ga = malloc(D * sizeof *ga), *gb = malloc(D * sizeof *gb);
        long diff = 0;
        for (int t = 0; t < 6; t++) {
            make_input(xa, d, h->rank, t, 7 + d);
            memcpy(xb, xa, d * sizeof *xa);
            MH_CHECK(h, ob_car_allreduce(a, xa, xa, &err) == OB_OK, "%s", err.msg);
            if (t % 2 == 0) {
                MH_CHECK(h, ob_car_allreduce(b, xb, xb, &err) == OB_OK, "%s", err.msg);
            } else {
                for (size_t sg = 0; sg < nseg; sg++)
                    MH_CHECK(h, ob_car_allreduce_segment(b, sg, xb, xb, &err) == OB_OK, "%s",
                             err.msg);
            }
            diff += memcmp(xa, xb, d * sizeof *xa) != 0;
            diff += memcmp(ob_car_worker_error(a), ob_car_worker_error(b), D * sizeof(float)) != 0;
            server_by_position(c, a, ga);
            server_by_position(c, b, gb);
            diff += memcmp(ga, gb, D * sizeof *ga) != 0;
        }
        MH_CHECK(h, diff == 0, "d=%zu, %zu segments: %ld differences", d, nseg, diff);
        MH_CHECK(h, ob_car_bytes_per_call(a) == ob_car_bytes_per_call(b), "bytes");
        size_t desc[] = {grid, 1}, above[] = {d + 1};
        MH_CHECK(h, ob_car_set_segments(b, desc, 2, &err) == OB_ERR_INVALID_ARG, "descending");
        MH_CHECK(h, ob_car_set_segments(b, above, 1, &err) == OB_ERR_INVALID_ARG, "above d");
        MH_CHECK(h, ob_car_allreduce_segment(b, nseg, xb, xb, &err) == OB_ERR_INVALID_ARG,
                 "segment out of range");
        MH_CHECK(h, ob_car_set_segments(b, NULL, 0, &err) == OB_OK && ob_car_num_segments(b) == 1,
                 "no cuts: one segment");
        free(xa), free(xb), free(ga), free(gb);
        ob_car_destroy(a);
        ob_car_destroy(b);
    }
    ob_comm_destroy(c);
}

/* ob_car_scale_errors multiplies every error by r at the position it belongs to: the worker
 * error at its index, every rank's server error at the position it serves (flat in one
 * segment and in several; hierarchical, 2 ranks a node, where the servers' errors are the
 * exchange between nodes'); the padding beyond d keeps its errors. */
static void test_car_scale_errors(mpi_harness *h)
{
    ob_comm *c = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    if (!c) return;
    const size_t B = 32, grid = (size_t)h->size * B, d = 7 * grid + 13;
    size_t cuts[] = {grid, 4 * grid + 3};
    for (int shape = 0; shape < 3; shape++) {
        ob_car *car = NULL;
        if (shape == 2) {
            if (h->size % 2 != 0) break;
            MH_CHECK(h, ob_car_create_hier(&car, c, d, B, OB_SCALE_L1, 2, &err) == OB_OK, "%s",
                     err.msg);
        } else {
            MH_CHECK(h, ob_car_create(&car, c, d, B, OB_SCALE_L1, &err) == OB_OK, "%s", err.msg);
            if (car && shape == 1)
                MH_CHECK(h, ob_car_set_segments(car, cuts, 2, &err) == OB_OK, "%s", err.msg);
        }
        if (!car) break;
        size_t D = ob_car_padded_size(car);
        float *x = malloc(d * sizeof *x), *r = malloc(d * sizeof *r);
        float *w0 = malloc(D * sizeof *w0), *g0 = malloc(D * sizeof *g0);
        float *g1 = malloc(D * sizeof *g1);
        for (int t = 0; t < 3; t++) {
            make_input(x, d, h->rank, t, 91);
            MH_CHECK(h, ob_car_allreduce(car, x, x, &err) == OB_OK, "%s", err.msg);
        }
        for (size_t i = 0; i < d; i++)
            r[i] = 0.5f + 0.125f * (float)(i % 11);
        memcpy(w0, ob_car_worker_error(car), D * sizeof *w0);
        server_by_position(c, car, g0);
        MH_CHECK(h, ob_car_scale_errors(car, r, &err) == OB_OK, "%s", err.msg);
        server_by_position(c, car, g1);
        const float *w1 = ob_car_worker_error(car);
        size_t bad = 0, nw = 0, ng = 0;
        for (size_t i = 0; i < D; i++) {
            float f = i < d ? r[i] : 1.0f;
            bad += w1[i] != w0[i] * f || g1[i] != g0[i] * f;
            nw += i < d && w0[i] != 0.0f;
            ng += i < d && g0[i] != 0.0f;
        }
        MH_CHECK(h, bad == 0, "shape %d: %zu errors not scaled by their position's factor", shape,
                 bad);
        /* Something to scale: the worker errors of this rank's positions (hierarchical: of its
         * piece, half of them), the servers' wherever more than one server recompresses (one
         * server's recompression of one message is exact). */
        int servers = shape == 2 ? h->size / 2 : h->size;
        MH_CHECK(h, nw > d / 3, "shape %d: %zu nonzero worker errors", shape, nw);
        MH_CHECK(h, servers == 1 || ng > d / 3, "shape %d: %zu nonzero server errors", shape, ng);
        free(x), free(r), free(w0), free(g0), free(g1);
        ob_car_destroy(car);
    }
    ob_comm_destroy(c);
}

/* The background control reduction: sums right, overlapping other collectives, state errors. */
static void test_comm_control(mpi_harness *h)
{
    ob_comm *c = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    if (!c) return;
    int n = h->size, r = h->rank;
    int32_t sums[3];
    MH_CHECK(h, ob_comm_control_finish(c, sums, &err) == OB_ERR_STATE, "finish with none");
    for (int round = 0; round < 5; round++) {
        int32_t v[3] = {r, round, r == round % n};
        MH_CHECK(h, ob_comm_control_start(c, v, 3, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_comm_control_pending(c) == 1, "pending");
        MH_CHECK(h, ob_comm_control_start(c, v, 3, &err) == OB_ERR_STATE, "second start");
        /* Other collectives while it is in flight. */
        float x = 1.0f;
        MH_CHECK(h, ob_comm_allreduce_sum_f32(c, &x, 1, &err) == OB_OK && x == (float)n,
                 "allreduce beside a control reduction");
        MH_CHECK(h, ob_comm_control_finish(c, sums, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, sums[0] == n * (n - 1) / 2 && sums[1] == n * round && sums[2] == 1,
                 "round %d: sums %d %d %d", round, sums[0], sums[1], sums[2]);
    }
    int32_t v[OB_COMM_CONTROL_MAX + 1] = {0};
    MH_CHECK(h, ob_comm_control_start(c, v, 0, &err) == OB_ERR_INVALID_ARG, "n = 0");
    MH_CHECK(h, ob_comm_control_start(c, v, OB_COMM_CONTROL_MAX + 1, &err) == OB_ERR_INVALID_ARG,
             "n too large");
    ob_comm_counters k;
    ob_comm_get_counters(c, &k);
    MH_CHECK(h, k.op_calls[OB_COMM_CONTROL] == 5 && k.op_bytes[OB_COMM_CONTROL] == 0,
             "control counted %llu calls", (unsigned long long)k.op_calls[OB_COMM_CONTROL]);
    ob_comm_destroy(c);
}

static void test_car_matches_simulation(mpi_harness *h)
{
    ob_comm *c = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    if (!c) return;
    car_case cases[] = {
        {1, 32, OB_SCALE_L1},          {37, 32, OB_SCALE_L1},      {1000, 64, OB_SCALE_L2},
        {5003, 32, OB_SCALE_L1},       {20011, 2048, OB_SCALE_L1}, {70001, 256, OB_SCALE_L2},
        {4096 * 5, 1024, OB_SCALE_L1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_car_case(h, c, cases[i]);
    ob_comm_destroy(c);
}

static void test_car_rejects_bad_block(mpi_harness *h)
{
    ob_comm *c = NULL;
    ob_err err = {0};
    ob_comm_create_mpi(&c, &err);
    ob_car *car = NULL;
    ob_err_clear(&err);
    MH_CHECK(h, ob_car_create(&car, c, 100, 48, OB_SCALE_L1, &err) == OB_ERR_INVALID_ARG,
             "block 48 accepted");
    MH_CHECK(h, strstr(err.msg, "block_size") != NULL, "message should name block_size: %s",
             err.msg);
    MH_CHECK(h, car == NULL, "no object on failure");
    ob_comm_destroy(c);
}

/* Sum over steps of the decoded averages equals the sum of the true averages minus the final
 * errors: sum_t mbar_t = sum_t avg_i x_i,t - mean_i e_i,T - e_srv,T. */
static void test_error_feedback_telescopes(mpi_harness *h)
{
    int n = h->size, r = h->rank;
    size_t d = 10007, B = 64;
    int T = 25;
    ob_comm *c = NULL;
    ob_car *car = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_car_create(&car, c, d, B, OB_SCALE_L1, &err) == OB_OK, "%s", err.msg);
    if (!car) return;
    size_t D = ob_car_padded_size(car), C = ob_car_chunk_size(car);
    double *sum_bar = calloc(d, sizeof(double)), *sum_avg = calloc(d, sizeof(double));
    float *x = malloc(d * sizeof(float)), *out = malloc(d * sizeof(float));
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < n; i++) {
            make_input(x, d, i, t, 7);
            for (size_t k = 0; k < d; k++)
                sum_avg[k] += (double)x[k] / n;
        }
        make_input(x, d, r, t, 7);
        MH_CHECK(h, ob_car_allreduce(car, x, out, &err) == OB_OK, "%s", err.msg);
        for (size_t k = 0; k < d; k++)
            sum_bar[k] += out[k];
    }
    double *ew_sum = calloc(D, sizeof(double)), *ew_mine = calloc(D, sizeof(double));
    const float *ew = ob_car_worker_error(car);
    for (size_t k = 0; k < D; k++)
        ew_mine[k] = ew[k];
    MPI_Allreduce(ew_mine, ew_sum, (int)D, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    float *es_all = malloc(D * sizeof(float));
    MPI_Allgather(ob_car_server_error(car), (int)C, MPI_FLOAT, es_all, (int)C, MPI_FLOAT,
                  MPI_COMM_WORLD);
    long bad = 0;
    double worst = 0.0;
    for (size_t k = 0; k < d; k++) {
        double predicted = sum_avg[k] - ew_sum[k] / n - es_all[k];
        double diff = fabs(sum_bar[k] - predicted);
        if (diff > worst) worst = diff;
        if (diff > 2e-4 * (1.0 + fabs(sum_avg[k]))) bad++;
    }
    MH_CHECK(h, bad == 0, "%ld of %zu elements break the telescoping identity (worst %.3g)", bad, d,
             worst);
    /* The identity is not vacuous: the errors are of the order of the values. */
    double mag = 0.0;
    for (size_t k = 0; k < d; k++)
        mag += fabs(es_all[k]) + fabs(ew_sum[k]);
    MH_CHECK(h, mag / d > 1e-2, "error buffers suspiciously small (%g)", mag / d);
    if (r == 0) printf("  telescoping: worst |difference| %.3g over %d steps\n", worst, T);
    free(sum_bar);
    free(sum_avg);
    free(x);
    free(out);
    free(ew_sum);
    free(ew_mine);
    free(es_all);
    ob_car_destroy(car);
    ob_comm_destroy(c);
}

/* d = 1M parameters: one warmup step (fp32 allreduce) against one compression step. */
static void test_bytes_compression_vs_warmup(mpi_harness *h)
{
    int n = h->size;
    size_t d = 1000000;
    ob_comm *c = NULL;
    ob_optim *opt = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    float *x = calloc(d, sizeof(float)), *g = malloc(d * sizeof(float));
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.freeze_step = 1;
    MH_CHECK(h, ob_optim_create(&opt, &cfg, c, x, d, &err) == OB_OK, "%s", err.msg);
    if (!opt) return;
    make_input(g, d, h->rank, 0, 99);
    ob_optim_stats st1, st2;
    MH_CHECK(h, ob_optim_step(opt, g, 1e-3f, &err) == OB_OK, "%s", err.msg);
    ob_optim_get_stats(opt, &st1);
    MH_CHECK(h, st1.phase == OB_PHASE_COMPRESSION && st1.freeze_step == 1, "froze at 1");
    MH_CHECK(h, ob_optim_step(opt, g, 1e-3f, &err) == OB_OK, "%s", err.msg);
    ob_optim_get_stats(opt, &st2);
    uint64_t warm = st1.bytes_last_step, comp = st2.bytes_last_step;
    if (n == 1) {
        MH_CHECK(h, warm == 0 && comp == 0, "a world of one sends nothing");
    } else {
        double ratio = (double)warm / (double)comp;
        size_t D = (d + (size_t)n * 2048 - 1) / ((size_t)n * 2048) * ((size_t)n * 2048);
        uint64_t expect_comp =
            2ull * (uint64_t)(n - 1) * (D / (size_t)n / 8 + 4 * D / (size_t)n / 2048);
        MH_CHECK(h, comp == expect_comp, "compression step sent %llu bytes, expected %llu",
                 (unsigned long long)comp, (unsigned long long)expect_comp);
        MH_CHECK(h, ratio >= 30.0, "warmup/compression bytes ratio %.2f < 30", ratio);
        if (h->rank == 0)
            printf("  bytes per step, d=%zu, N=%d: warmup %llu, compression %llu, ratio %.2f\n", d,
                   n, (unsigned long long)warm, (unsigned long long)comp, ratio);
    }
    MH_CHECK(h, st2.bytes_sent == warm + comp, "cumulative bytes");
    free(x);
    free(g);
    ob_optim_destroy(opt);
    ob_comm_destroy(c);
}

/* Every mode keeps the replicas in lockstep: parameters are bitwise identical on all ranks. */
static void test_replicas_stay_identical(mpi_harness *h)
{
    /* the fourth entry is the compressed mode with precondition */
    ob_onebit_mode modes[] = {OB_ONEBIT_COMPRESSED, OB_ONEBIT_UNCOMPRESSED, OB_ONEBIT_NAIVE,
                              OB_ONEBIT_COMPRESSED};
    size_t d = 3001;
    for (size_t mi = 0; mi < 4; mi++) {
        ob_comm *c = NULL;
        ob_optim *opt = NULL;
        ob_err err = {0};
        ob_comm_create_mpi(&c, &err);
        float *x = malloc(d * sizeof(float)), *g = malloc(d * sizeof(float));
        for (size_t k = 0; k < d; k++)
            x[k] = (float)k * 1e-3f;
        ob_optim_config cfg;
        ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
        cfg.mode = modes[mi];
        cfg.freeze_step = modes[mi] == OB_ONEBIT_NAIVE ? 0 : 3;
        cfg.block_size = 64;
        cfg.precondition = mi == 3;
        MH_CHECK(h, ob_optim_create(&opt, &cfg, c, x, d, &err) == OB_OK, "%s", err.msg);
        for (int t = 0; t < 8 && opt; t++) {
            make_input(g, d, h->rank, t, 5);
            MH_CHECK(h, ob_optim_step(opt, g, 1e-2f, &err) == OB_OK, "%s", err.msg);
        }
        float *ref = malloc(d * sizeof(float));
        memcpy(ref, x, d * sizeof(float));
        MPI_Bcast(ref, (int)d, MPI_FLOAT, 0, MPI_COMM_WORLD);
        MH_CHECK(h, memcmp(ref, x, d * sizeof(float)) == 0, "mode %s: params differ from rank 0",
                 ob_onebit_mode_name(modes[mi]));
        int moved = 0;
        for (size_t k = 0; k < d; k++)
            moved += x[k] != (float)k * 1e-3f;
        MH_CHECK(h, moved > (int)d / 2, "mode %s: parameters did not move",
                 ob_onebit_mode_name(modes[mi]));
        free(ref);
        free(x);
        free(g);
        ob_optim_destroy(opt);
        ob_comm_destroy(c);
    }
}

/* The phase timing counts the calls made while it is on, splits their time into non-negative
 * phases, starts again from zero when turned on again, and leaves the results bit-exact. */
static void test_car_timing(mpi_harness *h)
{
    size_t d = 50003;
    ob_comm *c = NULL;
    ob_car *timed = NULL, *plain = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_car_create(&timed, c, d, 256, OB_SCALE_L1, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_car_create(&plain, c, d, 256, OB_SCALE_L1, &err) == OB_OK, "%s", err.msg);
    if (!timed || !plain) return;
    float *x = malloc(d * sizeof(float)), *a = malloc(d * sizeof(float)),
          *b = malloc(d * sizeof(float));
    ob_car_timing tm;
    ob_car_get_timing(timed, &tm);
    MH_CHECK(h, tm.calls == 0 && tm.compress_s == 0.0, "timing is off after create");
    make_input(x, d, h->rank, 0, 3);
    MH_CHECK(h, ob_car_allreduce(timed, x, a, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_car_allreduce(plain, x, b, &err) == OB_OK, "%s", err.msg);
    ob_car_get_timing(timed, &tm);
    MH_CHECK(h, tm.calls == 0, "a call with timing off was counted");

    ob_car_set_timing(timed, 1);
    long differ = 0;
    for (int t = 1; t <= 4; t++) {
        make_input(x, d, h->rank, t, 3);
        MH_CHECK(h, ob_car_allreduce(timed, x, a, &err) == OB_OK, "%s", err.msg);
        MH_CHECK(h, ob_car_allreduce(plain, x, b, &err) == OB_OK, "%s", err.msg);
        differ += memcmp(a, b, d * sizeof(float)) != 0;
    }
    MH_CHECK(h, differ == 0, "timing changed the results of %ld calls", differ);
    ob_car_get_timing(timed, &tm);
    MH_CHECK(h, tm.calls == 4, "timed calls %llu, expected 4", (unsigned long long)tm.calls);
    double ph[5] = {tm.compress_s, tm.alltoall_s, tm.server_s, tm.allgather_s, tm.decode_s};
    double sum = 0.0;
    for (int k = 0; k < 5; k++) {
        MH_CHECK(h, ph[k] >= 0.0 && ph[k] < 60.0, "phase %d: %g s", k, ph[k]);
        sum += ph[k];
    }
    MH_CHECK(h, sum > 0.0, "timed calls took no time");
    MH_CHECK(h, tm.compress_s > 0.0 && tm.decode_s > 0.0, "compress/decode not timed");

    ob_car_set_timing(timed, 1);
    ob_car_get_timing(timed, &tm);
    MH_CHECK(h, tm.calls == 0 && tm.alltoall_s == 0.0, "turning timing on clears the sums");
    ob_car_set_timing(timed, 0);
    MH_CHECK(h, ob_car_allreduce(timed, x, a, &err) == OB_OK, "%s", err.msg);
    ob_car_get_timing(timed, &tm);
    MH_CHECK(h, tm.calls == 0, "a call after timing was turned off was counted");
    free(x);
    free(a);
    free(b);
    ob_car_destroy(timed);
    ob_car_destroy(plain);
    ob_comm_destroy(c);
}

/* Host communicators have no collective timeout: a clear refusal, nothing changed; the
 * argument is checked first. The device communicator's timeout is tested in test_car_nccl. */
static void test_comm_timeout_host(mpi_harness *h)
{
    ob_comm *c = NULL, *self = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_comm_create_self(&self, &err) == OB_OK, "%s", err.msg);
    if (!c || !self) return;
    MH_CHECK(h,
             ob_comm_set_timeout(c, 10.0, &err) == OB_ERR_UNSUPPORTED &&
                 strstr(err.msg, "the mpi communicator has no collective timeout"),
             "mpi: %s", err.msg);
    MH_CHECK(h, ob_comm_set_timeout(self, 10.0, &err) == OB_ERR_UNSUPPORTED, "self");
    MH_CHECK(h,
             ob_comm_set_timeout(c, -1.0, &err) == OB_ERR_INVALID_ARG &&
                 strstr(err.msg, "must be >= 0"),
             "negative: %s", err.msg);
    MH_CHECK(h, ob_comm_barrier(c, &err) == OB_OK, "%s", err.msg);
    ob_comm_destroy(self);
    ob_comm_destroy(c);
}

/* The optimizer's timing: the parts of its steps are non-negative, add up within the total,
 * and timing leaves the results bit-exact. */
static void test_optim_timing(mpi_harness *h)
{
    size_t d = 20011;
    ob_comm *c = NULL;
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&c, &err) == OB_OK, "%s", err.msg);
    if (!c) return;
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.freeze_step = 3;
    cfg.block_size = 256;
    float *pa = calloc(d, sizeof(float)), *pb = calloc(d, sizeof(float));
    float *g = malloc(d * sizeof(float));
    ob_optim *a = NULL, *b = NULL;
    MH_CHECK(h, ob_optim_create(&a, &cfg, c, pa, d, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_optim_create(&b, &cfg, c, pb, d, &err) == OB_OK, "%s", err.msg);
    if (a && b) {
        ob_optim_set_timing(a, 1);
        for (int t = 0; t < 8; t++) {
            make_input(g, d, h->rank, t, 11);
            MH_CHECK(h, ob_optim_step(a, g, 1e-3f, &err) == OB_OK, "%s", err.msg);
            MH_CHECK(h, ob_optim_step(b, g, 1e-3f, &err) == OB_OK, "%s", err.msg);
        }
        MH_CHECK(h, memcmp(pa, pb, d * sizeof(float)) == 0, "timing changed the parameters");
        ob_optim_timing tm;
        ob_optim_get_timing(a, &tm);
        double parts = tm.allreduce_s + tm.car.compress_s + tm.car.alltoall_s + tm.car.server_s +
                       tm.car.allgather_s + tm.car.decode_s;
        MH_CHECK(h, tm.steps == 8 && tm.car.calls == 5, "steps %llu, compressed calls %llu",
                 (unsigned long long)tm.steps, (unsigned long long)tm.car.calls);
        MH_CHECK(h,
                 (tm.allreduce_s > 0.0 || h->size == 1) && tm.car.compress_s > 0.0 &&
                     parts <= tm.total_s,
                 "allreduce %g compress %g parts %g total %g", tm.allreduce_s, tm.car.compress_s,
                 parts, tm.total_s);
        ob_optim_get_timing(b, &tm);
        MH_CHECK(h, tm.steps == 0 && tm.total_s == 0.0, "timing off counts nothing");
    }
    ob_optim_destroy(a);
    ob_optim_destroy(b);
    free(pa);
    free(pb);
    free(g);
    ob_comm_destroy(c);
}

int main(int argc, char **argv)
{
    mpi_harness h;
    mpi_harness_init(&h, &argc, &argv);
    MH_RUN(&h, test_comm_collectives);
    MH_RUN(&h, test_allreduce_ring_order);
    MH_RUN(&h, test_comm_block_sizes);
    MH_RUN(&h, test_comm_control);
    MH_RUN(&h, test_car_matches_simulation);
    MH_RUN(&h, test_car_segments_change_no_bit);
    MH_RUN(&h, test_car_scale_errors);
    MH_RUN(&h, test_car_rejects_bad_block);
    MH_RUN(&h, test_error_feedback_telescopes);
    MH_RUN(&h, test_bytes_compression_vs_warmup);
    MH_RUN(&h, test_replicas_stay_identical);
    MH_RUN(&h, test_car_timing);
    MH_RUN(&h, test_comm_timeout_host);
    MH_RUN(&h, test_optim_timing);
    return mpi_harness_finish(&h);
}
