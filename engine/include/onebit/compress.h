/* 1-bit compression with error feedback, and the fp16 gradient message: the CPU kernels.
 *
 * A buffer of n elements (n a multiple of the block size B, B a multiple of 32) compresses to
 * a "packed" message laid out as
 *     uint32_t bits[n / 32];   sign of element 32*w + k in bit k of word w (1: >= 0, 0: < 0)
 *     float    scales[n / B];  one scale per block of B elements
 * which is ob_packed_bytes(n, B) bytes. Element k decodes to scales[k / B] * (bit ? +1 : -1).
 * sign(0) = sign(-0) = +1.
 *
 * The CUDA build provides the same kernels for device memory in onebit/compress_cuda.h; both
 * are tested against the plain loops in tests/. */
#ifndef ONEBIT_COMPRESS_H
#define ONEBIT_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How a block's scale is computed from the values u being compressed. */
typedef enum ob_scale_kind {
    OB_SCALE_L1 = 0,   /* mean |u|: the paper's ||u||_1 / ||sign(u)||_1, keeps the L1 magnitude */
    OB_SCALE_L2 = 1,   /* ||u||_2 / sqrt(B), as DeepSpeed's implementation does */
    OB_SCALE_UNIT = 2, /* no scale: u is quantised to +-1 stochastically and without bias on
                          [-1, 1] (the unit-sign message below; BinSGDM's exchange) */
} ob_scale_kind;

/* Bytes of a packed message for n elements with blocks of `block`. */
size_t ob_packed_bytes(size_t n, size_t block);

/* Error-feedback compression of one message:
 *     u = x + e;  per block: s = scale(u);  q = s * sign(u);  e = u - q
 * writing the signs and scales of q to `packed` (ob_packed_bytes(n, block) bytes) and the new
 * error back into e. x has x_len <= n elements; positions x_len..n-1 are taken as x = 0 (the
 * padding of the flat buffer). x may be NULL when x_len is 0. n must be a multiple of block,
 * block a multiple of 32. x and e are borrowed; e is updated in place. */
void ob_compress_ef(const float *x, size_t x_len, float *e, size_t n, size_t block,
                    ob_scale_kind kind, void *packed);

/* Decodes a packed message of n elements into out (n floats). */
void ob_decompress(const void *packed, size_t n, size_t block, float *out);

/* Decodes the first out_len (<= n) elements of a packed message of n elements into out
 * (out_len floats): the part of a message that lies inside the unpadded vector. */
void ob_decompress_prefix(const void *packed, size_t n, size_t block, float *out, size_t out_len);

/* out = (sum over i = 0..nsrc-1 of decode(packed[i])) / nsrc, summed in index order so that
 * every caller that averages the same messages gets bitwise the same result. The packed
 * messages are nsrc consecutive messages of ob_packed_bytes(n, block) bytes each. */
void ob_decompress_average(const void *packed, size_t nsrc, size_t n, size_t block, float *out);

/* Packs sign bits of u (n elements, any n): bit k of word k/32 set where u[k] >= 0. The unused
 * high bits of the last word are zero. */
void ob_sign_pack(const float *u, size_t n, uint32_t *bits);

/* Unpacks n signs to +1.0f / -1.0f. */
void ob_sign_unpack(const uint32_t *bits, size_t n, float *out);

/* --- stochastic unit signs: the message of BinSGDM (onebit/optim.h) ---
 *
 * n elements (n a multiple of 32) travel as their bits alone,
 *     uint32_t bits[n / 32];   bit k of word w: element 32*w + k is +1 (set) or -1
 * which is ob_usign_bytes(n) = n / 8 bytes, with no scale. The quantiser is unbiased on
 * [-1, 1]: Q(u) = +1 with probability (u + 1) / 2, else -1 (+1 above 1, -1 below -1). Its
 * randomness is a function of (key, position) alone, so a message is reproducible from the
 * key of its round and does not depend on how a vector is cut into pieces: position pos of
 * key k compares u with a draw t(k, pos) uniform on 2^24 points of [-1, 1) and sends +1 when
 * t < u. Shared with the CUDA kernels (onebit/compress_cuda.h) bit for bit. */
size_t ob_usign_bytes(size_t n);
/* The key of one stream of draws: a job's seed, the round (an optimizer step) and which
 * quantiser of that round (a worker rank, or the server side). Different arguments give
 * unrelated draws. */
uint64_t ob_usign_key(uint64_t seed, uint64_t round, uint64_t stream);
/* The draw t(key, pos) in [-1, 1) (tests hold the quantiser against it). */
float ob_usign_draw(uint64_t key, uint64_t pos);
/* Error-feedback quantisation of one message: u = x + e; q = Q(u) (draws of positions
 * pos0 .. pos0 + n - 1 under key; pos0 a multiple of 32, as every piece of the compressed
 * allreduce is); e = u - q; the bits of q to `bits` (n / 8 bytes). x has
 * x_len <= n elements, the rest taken as 0 (x may be NULL when x_len is 0); e is updated in
 * place. */
void ob_usign_compress_ef(const float *x, size_t x_len, float *e, size_t n, uint64_t key,
                          uint64_t pos0, void *bits);
/* Decodes n elements to +1.0f / -1.0f. */
void ob_usign_decode(const void *bits, size_t n, float *out);
/* out = (sum over the nsrc consecutive messages of n elements of their +-1) / nsrc: the sum
 * is exact, then one division. */
void ob_usign_average(const void *bits, size_t nsrc, size_t n, float *out);

/* --- fp16 with block shifts: the message of the fp16 gradient exchange (onebit/f16sum.h) ---
 *
 * n elements (n a multiple of the block size B) travel as
 *     uint16_t half[n];        IEEE binary16 of x * 2^shift[k / B], rounded to nearest even
 *     int16_t  shift[n / B];   per block: brings the block's largest |x| into [2^14, 2^15)
 * which is ob_f16_bytes(n, B) bytes. Element k decodes to half[k] * 2^-shift[k / B]: every value
 * down to 2^-28 of its block's largest keeps 11 significant bits, smaller ones fewer (half
 * subnormals), below 2^-39 of it they become zero. A block that holds a NaN or an infinity has
 * shift 0, so it crosses as half NaN/infinity (finite values beyond 65504 become infinite):
 * a non-finite gradient stays visible to the receiver. All-zero blocks have shift 0. The
 * arithmetic is shared with the CUDA kernels (onebit/compress_cuda.h), bit for bit. */
size_t ob_f16_bytes(size_t n, size_t block);
/* Encodes x (x_len <= n elements; positions x_len..n-1 are taken as 0; x may be NULL when
 * x_len is 0) into msg (ob_f16_bytes(n, block) bytes). */
void ob_f16_encode(const float *x, size_t x_len, size_t n, size_t block, void *msg);
/* Decodes a message of n elements into out (n floats). */
void ob_f16_decode(const void *msg, size_t n, size_t block, float *out);
/* out[k] = decode(msg)[k] + x[k] for k < x_len, decode(msg)[k] beyond (x may be NULL when x_len
 * is 0; out may be x): one hop of the fp16 exchange's ring, a partial sum plus this rank's
 * values. */
void ob_f16_decode_add(const void *msg, size_t n, size_t block, const float *x, size_t x_len,
                       float *out);

/* --- fp8 with block shifts: the same layout with one byte an element ---
 *
 * The codes of the gradient messages: OB_CODE_FP16 as above; OB_CODE_FP8 sends
 *     uint8_t  code[n];        E4M3 (sign, 4 exponent bits of bias 7, 3 mantissa bits; no
 *                              infinity, S.1111.111 is NaN) of x * 2^shift[k / B]
 *     int16_t  shift[n / B];   per block: brings the block's largest |x| into [2^7, 2^8)
 * Every value down to 2^-14 of its block's largest keeps 4 significant bits (rounded to
 * nearest even: at most 2^-4 off), smaller ones fewer, below 2^-17 of it they become zero. A
 * block with a NaN or an infinity has shift 0 and crosses as NaN (finite values beyond 448
 * saturate): a non-finite gradient stays visible. Shared with the CUDA kernels bit for bit. */
typedef enum ob_float_code {
    OB_CODE_FP16 = 0,
    OB_CODE_FP8 = 1,
} ob_float_code;

/* The three calls above for either code (ob_f16_* are these with OB_CODE_FP16). */
size_t ob_fcode_bytes(ob_float_code code, size_t n, size_t block);
void ob_fcode_encode(ob_float_code code, const float *x, size_t x_len, size_t n, size_t block,
                     void *msg);
void ob_fcode_decode_add(ob_float_code code, const void *msg, size_t n, size_t block,
                         const float *x, size_t x_len, float *out);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_COMPRESS_H */
