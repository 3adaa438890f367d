/* Compressed allreduce (see onebit/car.h), written once over ob_comm with the CPU kernels for
 * host communicators and the CUDA kernels for device communicators. */
#include "onebit/car.h"
#include "onebit/compress_cuda.h"
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ob_car {
    ob_comm *comm; /* borrowed */
    int device;    /* buffers and kernels on the GPU */
    int nranks, rank;
    size_t d, D, C, B;
    ob_scale_kind scale;
    size_t msg;                      /* packed bytes of one chunk */
    uint64_t key_worker, key_server; /* OB_SCALE_UNIT: this round's draws (ob_car_set_key) */
    size_t nseg;   /* segments of the server layout (1: chunk j of the whole vector) */
    size_t *bound; /* (nseg + 1) segment bounds: 0 = bound[0] < ... < bound[nseg] = D; every
                    * segment before s puts 1/N of its length in the server error, so segment
                    * s's piece starts there at bound[s] / N */

    float *worker_err;     /* (D) */
    float *server_err;     /* (C) */
    float *avg;            /* (C) server average of the received chunks (not fused_server) */
    float *tail;           /* (C, unit signs only) decode target for the chunk that straddles d */
    unsigned char *send;   /* (N, msg) this rank's compressed chunks, chunk j for rank j */
    unsigned char *recv;   /* (N, msg) chunk `rank` of every rank's message */
    unsigned char *gather; /* (N, msg) every server's recompressed chunk */

    int timing;        /* per-phase timing on (ob_car_set_timing) */
    ob_car_timing tim; /* sums while timing is on */

    /* Hierarchical (ob_car_create_hier): m ranks a node, n nodes, rank r = k m + l is local
     * rank l of node k; 0 when flat. Piece l is the chunks k m + l (k = 0 .. n-1): rank r
     * reduces its node's average of piece l and serves chunk r between nodes, as flat. */
    int m, n;
    ob_comm *intra, *inter; /* owned: the node's ranks; the ranks of the same l */
    ob_car *inner;          /* the 1-bit exchange of piece l between nodes, n C elements */
    float *isend, *irecv;   /* (m n C) the intra-node exchange of the pieces */
    unsigned char *igather; /* (m, n msg) every local rank's servers' messages */
};

/* --- memory and kernels of either kind ---------------------------------------------------- */

static ob_status buf_alloc(ob_car *car, void **p, size_t bytes, ob_err *err)
{
    return ob__mem_alloc(car->device, p, bytes, "compressed allreduce buffer", err);
}

/* Bytes of the message of n elements. */
static size_t msg_bytes(const ob_car *car, size_t n)
{
    return car->scale == OB_SCALE_UNIT ? ob_usign_bytes(n) : ob_packed_bytes(n, car->B);
}

/* Compresses n elements that sit at position pos of the padded vector; server: the server's
 * quantiser (its draws under OB_SCALE_UNIT), else this rank's worker's. */
static ob_status k_compress(ob_car *car, const float *x, size_t x_len, float *e, size_t n,
                            size_t pos, int server, void *packed, ob_err *err)
{
    if (car->scale == OB_SCALE_UNIT) {
        uint64_t key = server ? car->key_server : car->key_worker;
        if (car->device)
            return ob_cuda_usign_compress_ef(x, x_len, e, n, key, pos, packed,
                                             ob_comm_stream(car->comm), err);
        ob_usign_compress_ef(x, x_len, e, n, key, pos, packed);
        return OB_OK;
    }
    if (car->device)
        return ob_cuda_compress_ef(x, x_len, e, n, car->B, car->scale, packed,
                                   ob_comm_stream(car->comm), err);
    ob_compress_ef(x, x_len, e, n, car->B, car->scale, packed);
    return OB_OK;
}

static ob_status k_average(ob_car *car, const void *packed, size_t n, float *out, ob_err *err)
{
    if (car->scale == OB_SCALE_UNIT) {
        if (car->device)
            return ob_cuda_usign_average(packed, (size_t)car->nranks, n, out,
                                         ob_comm_stream(car->comm), err);
        ob_usign_average(packed, (size_t)car->nranks, n, out);
        return OB_OK;
    }
    if (car->device)
        return ob_cuda_decompress_average(packed, (size_t)car->nranks, n, car->B, out,
                                          ob_comm_stream(car->comm), err);
    ob_decompress_average(packed, (size_t)car->nranks, n, car->B, out);
    return OB_OK;
}

/* The server's step runs in one pass on a device (the average never written, so car->avg is
 * not allocated) where the block allows. */
static int fused_server(const ob_car *car)
{
    return car->device && car->scale != OB_SCALE_UNIT &&
           car->B <= OB_CUDA_AVERAGE_COMPRESS_MAX_BLOCK;
}

/* The server's step: the average of the n ranks' messages of its piece of L elements, plus the
 * server error, recompressed; fused, or the two kernels through car->avg. */
static ob_status k_server(ob_car *car, const void *recv, size_t L, float *e, size_t pos,
                          void *packed, ob_err *err)
{
    if (fused_server(car))
        return ob_cuda_average_compress_ef(recv, (size_t)car->nranks, e, L, car->B, car->scale,
                                           packed, ob_comm_stream(car->comm), err);
    ob_status st = k_average(car, recv, L, car->avg, err);
    return st == OB_OK ? k_compress(car, car->avg, L, e, L, pos, 1, packed, err) : st;
}

static ob_status k_copy(ob_car *car, void *dst, const void *src, size_t bytes, ob_err *err)
{
    return ob__mem_copy(car->device, dst, src, bytes, ob_comm_stream(car->comm), err);
}

/* Decodes the first `valid` of the n elements of a message into out (the part of a piece
 * inside the unpadded vector). The unit-sign message decodes whole, through car->tail. */
static ob_status k_decode(ob_car *car, const void *packed, size_t n, float *out, size_t valid,
                          ob_err *err)
{
    if (car->scale == OB_SCALE_UNIT) {
        float *dst = valid == n ? out : car->tail;
        ob_status st = OB_OK;
        if (car->device)
            st = ob_cuda_usign_decode(packed, n, dst, ob_comm_stream(car->comm), err);
        else
            ob_usign_decode(packed, n, dst);
        return st == OB_OK && dst != out ? k_copy(car, out, dst, valid * sizeof(float), err) : st;
    }
    if (car->device)
        return ob_cuda_decompress_prefix(packed, n, car->B, out, valid, ob_comm_stream(car->comm),
                                         err);
    ob_decompress_prefix(packed, n, car->B, out, valid);
    return OB_OK;
}

static ob_status k_zero(ob_car *car, void *dst, size_t bytes, ob_err *err)
{
    return ob__mem_zero(car->device, dst, bytes, ob_comm_stream(car->comm), err);
}

/* --- lifecycle ----------------------------------------------------------------------------- */

ob_status ob_car_create(ob_car **out, ob_comm *comm, size_t d, size_t block, ob_scale_kind scale,
                        ob_err *err)
{
    *out = NULL;
    if (!comm) return OB_ERR(err, OB_ERR_INVALID_ARG, "compressed allreduce: NULL communicator");
    if (d == 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "compressed allreduce: size d is 0");
    if (block == 0 || block % 32 != 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "block_size %zu: must be a positive multiple of 32",
                      block);
    if (scale != OB_SCALE_L1 && scale != OB_SCALE_L2 && scale != OB_SCALE_UNIT)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "scale kind %d: must be l1, l2 or unit", (int)scale);

    ob_car *car = calloc(1, sizeof *car);
    if (!car) return OB_ERR(err, OB_ERR_NOMEM, "compressed allreduce");
    car->comm = comm;
    car->device = ob_comm_memory(comm) == OB_MEM_DEVICE;
    car->nranks = ob_comm_size(comm);
    car->rank = ob_comm_rank(comm);
    car->d = d;
    car->B = block;
    car->scale = scale;
    car->D = ob_round_up(d, (size_t)car->nranks * block);
    car->C = car->D / (size_t)car->nranks;
    car->msg = msg_bytes(car, car->C);
    ob_car_set_key(car, 0, 0);

    size_t n = (size_t)car->nranks;
    ob_status st;
    if ((st = buf_alloc(car, (void **)&car->worker_err, car->D * sizeof(float), err)) ||
        (st = buf_alloc(car, (void **)&car->server_err, car->C * sizeof(float), err)) ||
        (!fused_server(car) &&
         (st = buf_alloc(car, (void **)&car->avg, car->C * sizeof(float), err))) ||
        (scale == OB_SCALE_UNIT &&
         (st = buf_alloc(car, (void **)&car->tail, car->C * sizeof(float), err))) ||
        (st = buf_alloc(car, (void **)&car->send, n * car->msg, err)) ||
        (st = buf_alloc(car, (void **)&car->recv, n * car->msg, err)) ||
        (st = buf_alloc(car, (void **)&car->gather, n * car->msg, err)))
        goto fail;
    car->bound = malloc(2 * sizeof *car->bound);
    if (!car->bound) {
        st = OB_ERR(err, OB_ERR_NOMEM, "compressed allreduce: segments");
        goto fail;
    }
    car->nseg = 1;
    car->bound[0] = 0;
    car->bound[1] = car->D;
    *out = car;
    return OB_OK;
fail:
    ob_car_destroy(car);
    return st;
}

ob_status ob_car_create_hier(ob_car **out, ob_comm *comm, size_t d, size_t block,
                             ob_scale_kind scale, int ranks_per_node, ob_err *err)
{
    *out = NULL;
    if (!comm) return OB_ERR(err, OB_ERR_INVALID_ARG, "compressed allreduce: NULL communicator");
    int N = ob_comm_size(comm), m = ranks_per_node;
    if (m < 0 || (m > 1 && N % m != 0))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ranks_per_node %d: must divide the %d ranks (every node the same size)", m,
                      N);
    if (m <= 1) return ob_car_create(out, comm, d, block, scale, err);
    if (ob_comm_memory(comm) == OB_MEM_DEVICE)
        return OB_ERR(err, OB_ERR_UNSUPPORTED,
                      "the hierarchical exchange runs on host communicators (MPI), not on %s",
                      ob_comm_backend(comm));
    ob_car *car = NULL;
    ob_status st = ob_car_create(&car, comm, d, block, scale, err);
    if (st != OB_OK) return st;
    car->m = m;
    car->n = N / m;
    int r = car->rank;
    size_t piece = (size_t)car->n * car->C;
    if ((st = ob_comm_split(comm, r / m, r % m, &car->intra, err)) ||
        (st = ob_comm_split(comm, r % m, r / m, &car->inter, err)) ||
        (st = ob_car_create(&car->inner, car->inter, piece, block, scale, err)))
        goto fail;
    if (ob_car_padded_size(car->inner) != piece || ob_car_chunk_size(car->inner) != car->C) {
        st = OB_ERR(err, OB_ERR_STATE, "hierarchical exchange: pieces of %zu, chunks of %zu",
                    ob_car_padded_size(car->inner), ob_car_chunk_size(car->inner));
        goto fail;
    }
    size_t floats = (size_t)m * piece * sizeof(float);
    if ((st = buf_alloc(car, (void **)&car->isend, floats, err)) ||
        (st = buf_alloc(car, (void **)&car->irecv, floats, err)) ||
        (st = buf_alloc(car, (void **)&car->igather, (size_t)m * (size_t)car->n * car->inner->msg,
                        err)))
        goto fail;
    ob_car_set_key(car, 0, 0);
    *out = car;
    return OB_OK;
fail:
    ob_car_destroy(car);
    return st;
}

int ob_car_shape_of(const int *node, int n, char *why, size_t cap)
{
    char none[1];
    if (!why || cap == 0) why = none, cap = sizeof none;
    /* Each node's ranks one run of consecutive ranks: a rank that starts a run must not be on
     * the node of an earlier one. */
    for (int r = 1; r < n; r++) {
        if (node[r] == node[r - 1]) continue;
        for (int p = 0; p < r - 1; p++)
            if (node[p] == node[r]) {
                snprintf(why, cap,
                         "ranks not numbered node by node: rank %d is on the node of rank %d, "
                         "rank %d is not",
                         r, p, r - 1);
                return 1;
            }
    }
    int m = 1; /* the first node's ranks */
    while (m < n && node[m] == node[0])
        m++;
    if (n == 1) {
        snprintf(why, cap, "a world of one rank");
        return 1;
    }
    if (m == n) {
        snprintf(why, cap, "all %d ranks on one node", n);
        return 1;
    }
    for (int first = m; first < n;) {
        int len = 1;
        while (first + len < n && node[first + len] == node[first])
            len++;
        if (len != m) {
            snprintf(why, cap,
                     "nodes of uneven size: %d ranks on the node of rank 0, %d on the node of "
                     "rank %d",
                     m, len, first);
            return 1;
        }
        first += len;
    }
    if (m == 1) {
        snprintf(why, cap, "one rank a node (%d nodes)", n);
        return 1;
    }
    snprintf(why, cap, "%d nodes of %d ranks", n / m, m);
    return m;
}

ob_status ob_car_auto_ranks_per_node(ob_comm *comm, int *ranks_per_node, char *why, size_t cap,
                                     ob_err *err)
{
    *ranks_per_node = 1;
    char none[1];
    if (!why || cap == 0) why = none, cap = sizeof none;
    if (ob_comm_memory(comm) == OB_MEM_DEVICE) {
        snprintf(why, cap, "the hierarchical exchange runs on host communicators (MPI), not on %s",
                 ob_comm_backend(comm));
        return OB_OK;
    }
    int n = ob_comm_size(comm);
    int *node = malloc((size_t)n * sizeof *node);
    if (!node) return OB_ERR(err, OB_ERR_NOMEM, "the nodes of %d ranks", n);
    const char *source = NULL;
    ob_status st = ob_comm_node_map(comm, node, &source, err);
    if (st == OB_OK) {
        char shape[160];
        *ranks_per_node = ob_car_shape_of(node, n, shape, sizeof shape);
        snprintf(why, cap, "%s (%s)", shape, source);
    }
    free(node);
    return st;
}

void ob_car_destroy(ob_car *car)
{
    if (!car) return;
    void *bufs[] = {car->worker_err, car->server_err, car->avg,   car->tail,
                    car->send,       car->recv,       car->gather};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        ob__mem_free(car->device, bufs[i]);
    free(car->bound);
    ob_car_destroy(car->inner);
    if (car->m) {
        ob__mem_free(car->device, car->isend);
        ob__mem_free(car->device, car->irecv);
        ob__mem_free(car->device, car->igather);
    }
    ob_comm_destroy(car->inter);
    ob_comm_destroy(car->intra);
    free(car);
}

size_t ob_car_size(const ob_car *car)
{
    return car->d;
}

size_t ob_car_padded_size(const ob_car *car)
{
    return car->D;
}

size_t ob_car_chunk_size(const ob_car *car)
{
    return car->C;
}

size_t ob_car_block_size(const ob_car *car)
{
    return car->B;
}

uint64_t ob_car_bytes_per_call(const ob_car *car)
{
    if (car->m) {
        uint64_t piece = (uint64_t)car->n * car->C;
        return ob_car_bytes_per_call(car->inner) +
               (uint64_t)(car->m - 1) * (piece * sizeof(float) + (uint64_t)car->n * car->msg);
    }
    return 2u * (uint64_t)(car->nranks - 1) * car->msg;
}

int ob_car_ranks_per_node(const ob_car *car)
{
    return car->m ? car->m : 1;
}

ob_status ob_car_set_segments(ob_car *car, const size_t *cuts, size_t n, ob_err *err)
{
    if (car->m) return OB_OK; /* the hierarchical exchange runs in one piece */
    size_t grid = (size_t)car->nranks * car->B;
    for (size_t i = 0; i < n; i++) {
        if (cuts[i] > car->d || (i > 0 && cuts[i] < cuts[i - 1]))
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "compressed allreduce: cut %zu at %zu (previous %zu, d = %zu): cuts "
                          "must ascend within [0, d]",
                          i, cuts[i], i ? cuts[i - 1] : 0, car->d);
    }
    /* Each cut rounded up to the grid; 0, D and repeats add nothing: at most n + 1 segments. */
    if (n > SIZE_MAX / sizeof(size_t) - 2)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "compressed allreduce: %zu cuts", n);
    size_t *bound = malloc((n + 2) * sizeof *bound);
    if (!bound) return OB_ERR(err, OB_ERR_NOMEM, "compressed allreduce: %zu segments", n + 1);
    size_t k = 0;
    bound[k++] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t c = ob_round_up(cuts[i], grid);
        if (c > bound[k - 1] && c < car->D) bound[k++] = c;
    }
    bound[k] = car->D;
    free(car->bound);
    car->bound = bound;
    car->nseg = k;
    return OB_OK;
}

void ob_car_set_key(ob_car *car, uint64_t seed, uint64_t round)
{
    car->key_worker = ob_usign_key(seed, round, 1u + (uint64_t)car->rank);
    car->key_server = ob_usign_key(seed, round, 0);
    /* Between nodes: the node's quantiser is keyed by the node, the servers by their local
     * index (every piece its own stream of server draws). */
    if (car->inner) {
        car->inner->key_worker = ob_usign_key(seed, round, 1u + (uint64_t)(car->rank / car->m));
        car->inner->key_server =
            ob_usign_key(seed, round, 1u + (uint64_t)car->nranks + (uint64_t)(car->rank % car->m));
    }
}

size_t ob_car_num_segments(const ob_car *car)
{
    return car->nseg;
}

const size_t *ob_car_segment_bounds(const ob_car *car)
{
    return car->bound;
}

float *ob_car_worker_error(ob_car *car)
{
    return car->worker_err;
}

float *ob_car_server_error(ob_car *car)
{
    return car->m ? car->inner->server_err : car->server_err;
}

ob_status ob_car_reset_errors(ob_car *car, ob_err *err)
{
    ob_status st = k_zero(car, car->worker_err, car->D * sizeof(float), err);
    if (st == OB_OK) st = k_zero(car, car->server_err, car->C * sizeof(float), err);
    if (st == OB_OK && car->inner) st = ob_car_reset_errors(car->inner, err);
    return st;
}

void ob_car_set_timing(ob_car *car, int on)
{
    car->timing = on != 0;
    memset(&car->tim, 0, sizeof car->tim);
    if (car->inner) ob_car_set_timing(car->inner, on);
}

void ob_car_get_timing(const ob_car *car, ob_car_timing *out)
{
    *out = car->tim;
    if (!car->inner) return;
    ob_car_timing in; /* the exchange between nodes, beside the node's own phases */
    ob_car_get_timing(car->inner, &in);
    out->calls = in.calls;
    out->compress_s += in.compress_s;
    out->alltoall_s += in.alltoall_s;
    out->server_s += in.server_s;
    out->allgather_s += in.allgather_s;
    out->decode_s += in.decode_s;
}

/* --- the collective ------------------------------------------------------------------------ */

static ob_status hier_allreduce(ob_car *car, const float *in, float *out, ob_err *err);

/* Ends a timed phase: adds the time since *t0 to *acc and restarts the clock. Does nothing
 * unless timing is on; on a device communicator it first waits for the phase's kernels. */
static ob_status phase_end(ob_car *car, double *t0, double *acc, ob_err *err)
{
    if (!car->timing) return OB_OK;
    if (car->device) {
        ob_status st = ob_cuda_sync(ob_comm_stream(car->comm), err);
        if (st != OB_OK) return OB_WRAP(err, st, "compressed allreduce: stream sync");
    }
    double t = ob_mono_s();
    *acc += t - *t0;
    *t0 = t;
    return OB_OK;
}

/* Elements of [lo, lo + n) that lie inside the unpadded vector. */
static size_t piece_valid(const ob_car *car, size_t lo, size_t n)
{
    if (lo >= car->d) return 0;
    return car->d - lo < n ? car->d - lo : n;
}

ob_status ob_car_scale_errors(ob_car *car, const float *r, ob_err *err)
{
    void *stream = ob_comm_stream(car->comm);
    ob_status st = ob__mem_scale_by(car->device, car->worker_err, r, car->d, stream, err);
    /* Segment s's server error is the piece this rank serves; hierarchical (one segment), the
     * exchange between nodes' chunk, which is chunk `rank` of the whole vector too. */
    float *server = ob_car_server_error(car);
    size_t n = (size_t)car->nranks;
    for (size_t s = 0; s < car->nseg && st == OB_OK; s++) {
        size_t a = car->bound[s], L = (car->bound[s + 1] - a) / n;
        size_t lo = a + (size_t)car->rank * L, valid = piece_valid(car, lo, L);
        st = ob__mem_scale_by(car->device, server + a / n, r + lo, valid, stream, err);
    }
    return st;
}

ob_status ob_car_allreduce_segment(ob_car *car, size_t s, const float *in, float *out, ob_err *err)
{
    if (car->m && s == 0) return hier_allreduce(car, in, out, err);
    if (s >= car->nseg)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "compressed allreduce: segment %zu of %zu", s,
                      car->nseg);
    size_t n = (size_t)car->nranks, a = car->bound[s];
    size_t L = (car->bound[s + 1] - a) / n, msg = msg_bytes(car, L);
    ob_car_timing *tm = &car->tim;
    double t0 = car->timing ? ob_mono_s() : 0.0;
    ob_status st;

    /* 1. Worker: compress x + e piece by piece, piece j (of this segment) addressed to rank j. */
    for (size_t j = 0; j < n; j++) {
        size_t lo = a + j * L, valid = piece_valid(car, lo, L);
        st = k_compress(car, valid ? in + lo : NULL, valid, car->worker_err + lo, L, lo, 0,
                        car->send + j * msg, err);
        if (st != OB_OK) return OB_WRAP(err, st, "compressed allreduce: worker compression");
    }
    if ((st = phase_end(car, &t0, &tm->compress_s, err))) return st;

    /* 2. Alltoall: this rank receives its piece from every rank (a world of one: its own
     * message, where it is). */
    const unsigned char *recv = car->send;
    if (n > 1) {
        st = ob_comm_alltoall(car->comm, car->send, car->recv, msg, err);
        if (st != OB_OK) return OB_WRAP(err, st, "compressed allreduce: alltoall");
        recv = car->recv;
    }
    if ((st = phase_end(car, &t0, &tm->alltoall_s, err))) return st;

    /* 3. Server: average in rank order, add the server error, recompress. */
    unsigned char *mine = car->gather + (size_t)car->rank * msg;
    st = k_server(car, recv, L, car->server_err + car->bound[s] / n, a + (size_t)car->rank * L,
                  mine, err);
    if (st != OB_OK) return OB_WRAP(err, st, "compressed allreduce: server compression");
    if ((st = phase_end(car, &t0, &tm->server_s, err))) return st;

    /* 4. Allgather the recompressed pieces; every rank decodes the same average. */
    if (n > 1) {
        st = ob_comm_allgather(car->comm, mine, car->gather, msg, err);
        if (st != OB_OK) return OB_WRAP(err, st, "compressed allreduce: allgather");
    }
    if ((st = phase_end(car, &t0, &tm->allgather_s, err))) return st;
    for (size_t j = 0; j < n; j++) {
        size_t lo = a + j * L, valid = piece_valid(car, lo, L);
        if (valid == 0) break;
        st = k_decode(car, car->gather + j * msg, L, out + lo, valid, err);
        if (st != OB_OK) return OB_WRAP(err, st, "compressed allreduce: decode");
    }
    if (car->device) {
        st = ob_cuda_sync(ob_comm_stream(car->comm), err);
        if (st != OB_OK) return OB_WRAP(err, st, "compressed allreduce: stream sync");
    }
    if ((st = phase_end(car, &t0, &tm->decode_s, err))) return st;
    if (car->timing && s == 0) tm->calls++;
    return OB_OK;
}

/* The hierarchical exchange (host memory): the node's fp32 average of piece l over its
 * ranks, the 1-bit exchange of that piece between nodes (inner), then the servers' messages
 * of every piece shared inside the node and decoded. */
static ob_status hier_allreduce(ob_car *car, const float *in, float *out, ob_err *err)
{
    size_t m = (size_t)car->m, n = (size_t)car->n, C = car->C, piece = n * C;
    size_t l = (size_t)car->rank % m, msg = car->inner->msg;
    ob_car_timing *tm = &car->tim;
    double t0 = car->timing ? ob_mono_s() : 0.0;
    /* 1. Piece l2 (chunks k m + l2) for local rank l2, zero beyond d. */
    for (size_t l2 = 0; l2 < m; l2++)
        for (size_t k = 0; k < n; k++) {
            size_t lo = (k * m + l2) * C, valid = piece_valid(car, lo, C);
            float *dst = car->isend + (l2 * n + k) * C;
            if (valid) memcpy(dst, in + lo, valid * sizeof(float));
            memset(dst + valid, 0, (C - valid) * sizeof(float));
        }
    ob_status st = ob_comm_alltoall(car->intra, car->isend, car->irecv, piece * sizeof(float), err);
    if (st != OB_OK) return OB_WRAP(err, st, "hierarchical exchange: inside the node");
    if ((st = phase_end(car, &t0, &tm->alltoall_s, err))) return st;
    /* 2. The node's average of piece l: its ranks in order, then one division. */
    float *avg = car->isend, fm = (float)m;
    for (size_t i = 0; i < piece; i++) {
        float acc = car->irecv[i];
        for (size_t l2 = 1; l2 < m; l2++)
            acc += car->irecv[l2 * piece + i];
        avg[i] = acc / fm;
    }
    /* 3. Between nodes, with the node's worker error of piece l (kept by position). */
    for (size_t k = 0; k < n; k++)
        memcpy(car->inner->worker_err + k * C, car->worker_err + (k * m + l) * C,
               C * sizeof(float));
    if ((st = phase_end(car, &t0, &tm->server_s, err))) return st;
    st = ob_car_allreduce(car->inner, avg, avg, err);
    if (st != OB_OK) return OB_WRAP(err, st, "hierarchical exchange: between nodes");
    t0 = car->timing ? ob_mono_s() : 0.0;
    for (size_t k = 0; k < n; k++)
        memcpy(car->worker_err + (k * m + l) * C, car->inner->worker_err + k * C,
               C * sizeof(float));
    /* 4. Every piece's 1-bit messages to the node's ranks, decoded by position. */
    st = ob_comm_allgather(car->intra, car->inner->gather, car->igather, n * msg, err);
    if (st != OB_OK) return OB_WRAP(err, st, "hierarchical exchange: inside the node");
    if ((st = phase_end(car, &t0, &tm->allgather_s, err))) return st;
    for (size_t l2 = 0; l2 < m; l2++)
        for (size_t k = 0; k < n; k++) {
            size_t lo = (k * m + l2) * C, valid = piece_valid(car, lo, C);
            const unsigned char *p = car->igather + (l2 * n + k) * msg;
            if (valid == 0) continue;
            st = k_decode(car, p, C, out + lo, valid, err);
            if (st != OB_OK) return OB_WRAP(err, st, "hierarchical exchange: decode");
        }
    return phase_end(car, &t0, &tm->decode_s, err);
}

ob_status ob_car_allreduce(ob_car *car, const float *in, float *out, ob_err *err)
{
    if (car->m) return hier_allreduce(car, in, out, err);
    for (size_t s = car->nseg; s-- > 0;) {
        ob_status st = ob_car_allreduce_segment(car, s, in, out, err);
        if (st != OB_OK) return car->nseg > 1 ? OB_WRAP(err, st, "segment %zu", s) : st;
    }
    return OB_OK;
}
