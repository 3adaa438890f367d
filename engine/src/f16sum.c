/* The fp16 (and fp8) gradient exchange (see onebit/f16sum.h), over ob_comm with the CPU codec for
 * host communicators and the CUDA kernels for device communicators. */
#include "onebit/f16sum.h"

#include "onebit/compress.h"
#include "onebit/compress_cuda.h"
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>

struct ob_f16sum {
    ob_comm *comm; /* borrowed */
    int device;
    int nranks, rank;
    ob_float_code code; /* the elements' code: fp16 or fp8 */
    size_t max_n, B;
    unsigned char *send;   /* (msg) the partial sum this rank passes on */
    unsigned char *recv;   /* (msg) the partial sum from the left neighbour */
    unsigned char *gather; /* (N, msg) every rank's finished chunk */
    float *sum;            /* (C) the received partial sum plus this rank's values */
    float *tail;           /* (C) decode target of the chunk that straddles n */
};

/* "fp16" or "fp8", for messages. */
static const char *code_name(ob_float_code code)
{
    return code == OB_CODE_FP8 ? "fp8" : "fp16";
}

/* Chunk size for a vector of n elements: ceil(n / N) rounded up to whole blocks. */
static size_t chunk_for(const ob_f16sum *f, size_t n)
{
    size_t per = n / (size_t)f->nranks + (n % (size_t)f->nranks != 0);
    return ob_round_up(per, f->B);
}

ob_status ob_f16sum_create(ob_f16sum **out, ob_comm *comm, size_t max_n, ob_err *err)
{
    return ob_f16sum_create_code(out, comm, max_n, OB_CODE_FP16, err);
}

ob_status ob_f16sum_create_code(ob_f16sum **out, ob_comm *comm, size_t max_n, ob_float_code code,
                                ob_err *err)
{
    *out = NULL;
    if (!comm)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s exchange: NULL communicator", code_name(code));
    if (max_n == 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "%s exchange: size 0", code_name(code));
    if (code != OB_CODE_FP16 && code != OB_CODE_FP8)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "gradient exchange: code %d", (int)code);
    ob_f16sum *f = calloc(1, sizeof *f);
    if (!f) return OB_ERR(err, OB_ERR_NOMEM, "%s exchange", code_name(code));
    f->comm = comm;
    f->device = ob_comm_memory(comm) == OB_MEM_DEVICE;
    f->nranks = ob_comm_size(comm);
    f->rank = ob_comm_rank(comm);
    f->code = code;
    f->max_n = max_n;
    f->B = OB_F16SUM_BLOCK;
    size_t n = (size_t)f->nranks, C = chunk_for(f, max_n);
    size_t msg = ob_fcode_bytes(f->code, C, f->B);
    if (C > SIZE_MAX / 8 || SIZE_MAX / n < msg) {
        free(f);
        return OB_ERR(err, OB_ERR_NOMEM, "%s exchange: %zu elements over %zu ranks",
                      code_name(code), max_n, n);
    }
    ob_status st;
    const char *what = code == OB_CODE_FP8 ? "fp8 exchange buffer" : "fp16 exchange buffer";
    if ((st = ob__mem_alloc(f->device, (void **)&f->send, msg, what, err)) ||
        (st = ob__mem_alloc(f->device, (void **)&f->recv, msg, what, err)) ||
        (st = ob__mem_alloc(f->device, (void **)&f->gather, n * msg, what, err)) ||
        (st = ob__mem_alloc(f->device, (void **)&f->sum, C * sizeof(float), what, err)) ||
        (st = ob__mem_alloc(f->device, (void **)&f->tail, C * sizeof(float), what, err))) {
        ob_f16sum_destroy(f);
        return st;
    }
    *out = f;
    return OB_OK;
}

void ob_f16sum_destroy(ob_f16sum *f)
{
    if (!f) return;
    void *bufs[] = {f->send, f->recv, f->gather, f->sum, f->tail};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        ob__mem_free(f->device, bufs[i]);
    free(f);
}

uint64_t ob_f16sum_bytes_per_call(const ob_f16sum *f, size_t n)
{
    if (f->nranks < 2 || n == 0) return 0;
    return 2u * (uint64_t)(f->nranks - 1) * ob_fcode_bytes(f->code, chunk_for(f, n), f->B);
}

/* --- kernels of either kind --------------------------------------------------------------- */

static ob_status k_encode(ob_f16sum *f, const float *x, size_t x_len, size_t C, void *msg,
                          ob_err *err)
{
    if (f->device)
        return ob_cuda_fcode_encode(f->code, x, x_len, C, f->B, msg, ob_comm_stream(f->comm), err);
    ob_fcode_encode(f->code, x, x_len, C, f->B, msg);
    return OB_OK;
}

static ob_status k_decode(ob_f16sum *f, const void *msg, size_t C, float *out, ob_err *err)
{
    if (f->device)
        return ob_cuda_fcode_decode_add(f->code, msg, C, f->B, NULL, 0, out,
                                        ob_comm_stream(f->comm), err);
    ob_fcode_decode_add(f->code, msg, C, f->B, NULL, 0, out);
    return OB_OK;
}

static ob_status k_decode_add(ob_f16sum *f, const void *msg, size_t C, const float *x, size_t x_len,
                              float *out, ob_err *err)
{
    if (f->device)
        return ob_cuda_fcode_decode_add(f->code, msg, C, f->B, x, x_len, out,
                                        ob_comm_stream(f->comm), err);
    ob_fcode_decode_add(f->code, msg, C, f->B, x, x_len, out);
    return OB_OK;
}

/* --- the collective ------------------------------------------------------------------------ */

/* Elements of chunk j that lie inside a vector of n. */
static size_t chunk_valid(size_t j, size_t C, size_t n)
{
    size_t lo = j * C;
    return lo < n ? (n - lo < C ? n - lo : C) : 0;
}

ob_status ob_f16sum_run(ob_f16sum *f, const float *in, float *out, size_t n, ob_err *err)
{
    if (n == 0 || n > f->max_n)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s exchange: %zu elements (1 .. %zu)",
                      code_name(f->code), n, f->max_n);
    void *stream = ob_comm_stream(f->comm);
    if (f->nranks == 1) return ob__mem_copy(f->device, out, in, n * sizeof(float), stream, err);
    size_t N = (size_t)f->nranks, r = (size_t)f->rank, C = chunk_for(f, n);
    size_t msg = ob_fcode_bytes(f->code, C, f->B);
    /* Reduce-scatter around the ring: in step s rank r passes on the partial sum of chunk
     * (r - s) mod N and receives that of chunk (r - s - 1) mod N, to which it adds its own
     * values. Step 0 passes this rank's own chunk r; after N-1 steps rank r holds chunk
     * (r + 1) mod N summed over every rank. (in is only read here: in == out is safe.) */
    size_t valid = chunk_valid(r, C, n);
    ob_status st = k_encode(f, valid ? in + r * C : NULL, valid, C, f->send, err);
    if (st != OB_OK) return OB_WRAP(err, st, "%s exchange: encode", code_name(f->code));
    unsigned char *mine = f->gather + r * msg;
    for (size_t s = 0; s + 1 < N; s++) {
        if ((st = ob_comm_shift(f->comm, f->send, f->recv, msg, err)))
            return OB_WRAP(err, st, "%s exchange: ring step %zu", code_name(f->code), s);
        size_t j = (r + N - s - 1) % N;
        valid = chunk_valid(j, C, n);
        if ((st = k_decode_add(f, f->recv, C, valid ? in + j * C : NULL, valid, f->sum, err)) ||
            (st = k_encode(f, f->sum, C, C, s + 2 == N ? mine : f->send, err)))
            return OB_WRAP(err, st, "%s exchange: sum", code_name(f->code));
    }
    if ((st = ob_comm_allgather(f->comm, mine, f->gather, msg, err)))
        return OB_WRAP(err, st, "%s exchange: allgather", code_name(f->code));
    /* Rank p's block is chunk (p + 1) mod N. */
    for (size_t p = 0; p < N; p++) {
        size_t j = (p + 1) % N;
        valid = chunk_valid(j, C, n);
        if (!valid) continue;
        if (valid == C) {
            st = k_decode(f, f->gather + p * msg, C, out + j * C, err);
        } else {
            st = k_decode(f, f->gather + p * msg, C, f->tail, err);
            if (st == OB_OK)
                st = ob__mem_copy(f->device, out + j * C, f->tail, valid * sizeof(float), stream,
                                  err);
        }
        if (st != OB_OK) return OB_WRAP(err, st, "%s exchange: decode", code_name(f->code));
    }
    if (f->device) {
        st = ob_cuda_sync(stream, err);
        if (st != OB_OK) return OB_WRAP(err, st, "%s exchange: stream sync", code_name(f->code));
    }
    return OB_OK;
}
