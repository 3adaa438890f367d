/* The rank files of a checkpoint, one a rank (rank-00000.h5, rank-00001.h5, ...): the
 * error-feedback buffers in their server layout, a rank's own moments, and their re-sharding for
 * another world size or layout. */
#include "ckpt_h5io.h"
#include "ckpt_rank.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the server layout (onebit/checkpoint.h) -------------------------------------------------- */

#define SEGMENTS_DATASET "/optim/server_segments"
/* A rank's own moments, for optimizers that keep them per rank (ob_ckpt_meta.local_moments). */
#define LOCAL_M_DATASET "/optim/local_exp_avg"
#define LOCAL_V_DATASET "/optim/local_exp_avg_sq"
/* A rank's tracked-variance statistics u, A, B (ob_ckpt_meta.track_stats), 3 d floats. */
#define TRACK_DATASET "/optim/variance_stats"

/* n segments between bounds b[0] = 0 < b[1] < ... < b[n] = D. */
typedef struct layout {
    uint64_t *b; /* (n + 1), malloc'd */
    size_t n;
} layout;

static void layout_free(layout *l)
{
    free(l->b);
    l->b = NULL;
    l->n = 0;
}

/* The one-segment layout [0, D). */
static ob_status layout_one(layout *l, uint64_t D, ob_err *err)
{
    l->n = 1;
    l->b = malloc(2 * sizeof *l->b);
    if (!l->b) return OB_ERR(err, OB_ERR_NOMEM, "server layout");
    l->b[0] = 0;
    l->b[1] = D;
    return OB_OK;
}

static int layout_equal(const layout *x, const layout *y)
{
    return x->n == y->n && !memcmp(x->b, y->b, (x->n + 1) * sizeof *x->b);
}

/* The unit every bound is a multiple of: world * block (block 0: world), without wrapping. */
static int layout_unit(int world, uint64_t block, uint64_t *unit)
{
    if (world < 1) return 0;
    uint64_t w = (uint64_t)world, b = block ? block : 1;
    if (b > UINT64_MAX / w) return 0;
    *unit = w * b;
    return 1;
}

/* Checks a layout's bounds over D: 0 first, D last, strictly ascending, multiples of unit.
 * Its length (n <= D / unit) is the caller's to check before allocating. */
static ob_status check_layout(const layout *l, uint64_t D, uint64_t unit, const char *what,
                              ob_status code, ob_err *err)
{
    const uint64_t *b = l->b;
    if (b[0] != 0)
        return OB_ERR(err, code, "%s: the first bound is %" PRIu64 ", not 0", what, b[0]);
    if (b[l->n] != D)
        return OB_ERR(err, code, "%s: the last bound is %" PRIu64 ", not D = %" PRIu64, what,
                      b[l->n], D);
    for (size_t i = 1; i <= l->n; i++) {
        if (b[i] <= b[i - 1])
            return OB_ERR(err, code,
                          "%s: bound %zu (%" PRIu64 ") does not follow %" PRIu64
                          " (bounds strictly ascend)",
                          what, i, b[i], b[i - 1]);
        if (b[i] % unit != 0)
            return OB_ERR(err, code, "%s: bound %zu (%" PRIu64 ") is not a multiple of %" PRIu64,
                          what, i, b[i], unit);
    }
    return OB_OK;
}

/* A layout from a caller's bounds (num_segments + 1 of them; NULL with 0: one segment) over D
 * for world ranks of `block` (0: any block size), checked: OB_ERR_INVALID_ARG naming `what`
 * and the rule otherwise. */
static ob_status layout_from_args(layout *l, const size_t *bounds, size_t n, uint64_t D, int world,
                                  uint64_t block, const char *what, ob_err *err)
{
    l->b = NULL;
    l->n = 0;
    uint64_t unit;
    if ((bounds == NULL) != (n == 0))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "%s: %zu segments with %s bounds (NULL goes with 0 segments)", what, n,
                      bounds ? "non-NULL" : "NULL");
    if (n == 0) return layout_one(l, D, err);
    if (!layout_unit(world, block, &unit))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: world size %d, block size %" PRIu64, what,
                      world, block);
    if (n > D / unit)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "%s: %zu segments over D = %" PRIu64 " (1 .. %" PRIu64
                      ", each a multiple of %" PRIu64 ")",
                      what, n, D, D / unit, unit);
    l->b = malloc((n + 1) * sizeof *l->b); /* n <= D / unit: no wrap */
    if (!l->b) return OB_ERR(err, OB_ERR_NOMEM, "%s: %zu segments", what, n);
    l->n = n;
    for (size_t i = 0; i <= n; i++)
        l->b[i] = bounds[i];
    ob_status st = check_layout(l, D, unit, what, OB_ERR_INVALID_ARG, err);
    if (st != OB_OK) layout_free(l);
    return st;
}

/* Copies into out (rank `to_rank`'s server error in layout `to` of to_world ranks) what old
 * rank `from_rank`'s server error `in` (layout `from` of from_world ranks) holds at positions
 * below limit. The pieces of one rank ascend with position in both layouts, so one merge pass
 * over the two lists finds every overlap. */
static void remap_server(const float *in, const layout *from, size_t from_world, size_t from_rank,
                         float *out, const layout *to, size_t to_world, size_t to_rank,
                         uint64_t limit)
{
    size_t i = 0, k = 0;
    while (i < from->n && k < to->n) {
        uint64_t fl = (from->b[i + 1] - from->b[i]) / from_world;
        uint64_t flo = from->b[i] + from_rank * fl, fhi = flo + fl;
        uint64_t tl = (to->b[k + 1] - to->b[k]) / to_world;
        uint64_t tlo = to->b[k] + to_rank * tl, thi = tlo + tl;
        uint64_t lo = flo > tlo ? flo : tlo, hi = fhi < thi ? fhi : thi;
        if (hi > limit) hi = limit;
        /* A piece starts in its rank's buffer at b[s] / N: the pieces of the segments before. */
        if (lo < hi)
            memcpy(out + (to->b[k] / to_world + (lo - tlo)),
                   in + (from->b[i] / from_world + (lo - flo)), (size_t)(hi - lo) * sizeof *out);
        if (fhi <= thi)
            i++;
        else
            k++;
    }
}

static ob_status rank_path(char *out, const char *dir, int rank, ob_err *err)
{
    char name[32];
    snprintf(name, sizeof name, "rank-%05d.h5", rank);
    return ob__ckpt_join(out, dir, name, err);
}

ob_status ob_ckpt_write_rank(const char *dir, const ob_ckpt_meta *m, int rank,
                             const float *worker_error, const float *server_error,
                             const size_t *seg_bounds, size_t num_segments, ob_err *err)
{
    return ob_ckpt_write_rank_moments(dir, m, rank, worker_error, server_error, seg_bounds,
                                      num_segments, NULL, NULL, err);
}

ob_status ob_ckpt_write_rank_moments(const char *dir, const ob_ckpt_meta *m, int rank,
                                     const float *worker_error, const float *server_error,
                                     const size_t *seg_bounds, size_t num_segments,
                                     const float *local_m, const float *local_v, ob_err *err)
{
    ob_ckpt_rank_arrays a = {worker_error, server_error, seg_bounds, num_segments,
                             local_m,      local_v,      NULL};
    return ob_ckpt_write_rank_arrays(dir, m, rank, &a, err);
}

ob_status ob_ckpt_write_rank_arrays(const char *dir, const ob_ckpt_meta *m, int rank,
                                    const ob_ckpt_rank_arrays *a, ob_err *err)
{
    const float *worker_error = a->worker_error, *server_error = a->server_error;
    const float *local_m = a->local_m, *local_v = a->local_v;
    const size_t *seg_bounds = a->seg_bounds;
    size_t num_segments = a->num_segments;
    ob__ck_h5_quiet();
    char path[OB_CKPT_PATH_LEN];
    ob_status st = rank_path(path, dir, rank, err);
    if (st != OB_OK) return st;
    if (rank < 0 || rank >= m->world_size)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "rank %d of %d", rank, m->world_size);
    if (m->padded_size > 0 && (!worker_error || !server_error))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: missing error buffers", path);
    if (m->local_moments ? !local_m || !local_v : local_m || local_v)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: per-rank moments %s", path,
                      m->local_moments ? "missing" : "given for a checkpoint without them");
    if (m->track_stats ? !a->track_stats : a->track_stats != NULL)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: variance statistics %s", path,
                      m->track_stats ? "missing" : "given for a checkpoint without them");
    layout lay = {NULL, 0};
    if (seg_bounds || num_segments) {
        char what[OB_CKPT_PATH_LEN + 32];
        snprintf(what, sizeof what, "%s: server layout", path);
        if (m->padded_size == 0 || m->block_size == 0)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "%s: D %" PRIu64 ", B %" PRIu64 ": no layout without the compressed "
                          "allreduce",
                          what, m->padded_size, m->block_size);
        if ((st = layout_from_args(&lay, seg_bounds, num_segments, m->padded_size, m->world_size,
                                   m->block_size, what, err)))
            return st;
    }
    hid_t f = ob__ck_create_file(path, err);
    if (f < 0) {
        layout_free(&lay);
        return OB_ERR_IO;
    }
    if ((st = ob__ck_write_common_attrs(f, m, path, err)) ||
        (st = ob__ck_attr_i64(f, "rank", rank, path, err)))
        goto fail;
    if (m->padded_size > 0 &&
        ((st = ob__ck_write_array(f, "/optim/worker_error", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                                  worker_error, (size_t)m->padded_size, path, err)) ||
         (st = ob__ck_write_array(f, "/optim/server_error", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                                  server_error, (size_t)m->chunk_size, path, err))))
        goto fail;
    if (m->local_moments &&
        ((st = ob__ck_write_array(f, LOCAL_M_DATASET, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, local_m,
                                  (size_t)m->num_params, path, err)) ||
         (st = ob__ck_write_array(f, LOCAL_V_DATASET, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, local_v,
                                  (size_t)m->num_params, path, err))))
        goto fail;
    if (m->track_stats &&
        (st = ob__ck_write_array(f, TRACK_DATASET, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, a->track_stats,
                                 3 * (size_t)m->num_params, path, err)))
        goto fail;
    /* One segment is the plain layout: stored as files have always been. */
    if (lay.n > 1 && (st = ob__ck_write_dataset(f, SEGMENTS_DATASET, H5T_STD_U64LE,
                                                H5T_NATIVE_UINT64, lay.b, lay.n + 1, path, err)))
        goto fail;
    layout_free(&lay);
    return ob__ck_finish_file(&f, path, err);
fail:
    layout_free(&lay);
    ob__ck_h5_close(&f, H5Fclose);
    return st;
}

/* Opens rank file `rank` of the checkpoint and checks it belongs to it (step, sizes, rank). */
static ob_status open_rank(const char *dir, const ob_ckpt_meta *m, int rank, char *path, hid_t *out,
                           ob_err *err)
{
    hid_t f;
    ob_status st = rank_path(path, dir, rank, err);
    if (st == OB_OK) st = ob__ck_open_file(path, &f, err);
    if (st != OB_OK) return st;
    ob_ckpt_meta r;
    memset(&r, 0, sizeof r);
    int64_t file_rank = -1;
    st = ob__ck_read_common_attrs(f, &r, path, err);
    if (st == OB_OK) st = ob__ck_read_i64(f, "rank", &file_rank, path, err);
    if (st == OB_OK && (r.step != m->step || r.world_size != m->world_size || file_rank != rank ||
                        r.num_params != m->num_params || r.padded_size != m->padded_size ||
                        r.chunk_size != m->chunk_size))
        st = OB_ERR(err, OB_ERR_CORRUPT,
                    "%s: written for step %ld, rank %" PRId64 " of %d; the checkpoint is step "
                    "%ld, rank %d of %d",
                    path, r.step, file_rank, r.world_size, m->step, rank, m->world_size);
    if (st != OB_OK) {
        H5Fclose(f);
        return st;
    }
    *out = f;
    return OB_OK;
}

/* The server layout of a rank file (hostile input): absent, one segment; present, a 1-D
 * dataset of unsigned 64-bit integers, 2 .. D / (N B) + 1 long (checked before anything is
 * allocated), whose bounds pass check_layout for the checkpoint's D, N and B. */
static ob_status read_layout(hid_t f, const ob_ckpt_meta *m, layout *out, const char *path,
                             ob_err *err)
{
    out->b = NULL;
    out->n = 0;
    htri_t ex =
        H5Lexists(f, "/optim", H5P_DEFAULT) > 0 ? H5Lexists(f, SEGMENTS_DATASET, H5P_DEFAULT) : 0;
    if (ex < 0) return H5_FAIL(err, OB_ERR_CORRUPT, SEGMENTS_DATASET, path);
    if (ex == 0) return layout_one(out, m->padded_size, err);
    char what[OB_CKPT_PATH_LEN + 32];
    snprintf(what, sizeof what, "%s: %s", path, SEGMENTS_DATASET);
    uint64_t unit;
    if (!layout_unit(m->world_size, m->block_size, &unit) || m->block_size == 0)
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: world size %d, block size %" PRIu64, what,
                      m->world_size, m->block_size);
    uint64_t max_len = m->padded_size / unit + 1;
    hid_t ds = H5Dopen2(f, SEGMENTS_DATASET, H5P_DEFAULT);
    hid_t space = ds >= 0 ? H5Dget_space(ds) : H5I_INVALID_HID;
    hid_t type = ds >= 0 ? H5Dget_type(ds) : H5I_INVALID_HID;
    int ndims = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    hssize_t len = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    ob_status st = OB_OK;
    if (ds < 0 || space < 0 || type < 0) {
        st = H5_FAIL(err, OB_ERR_CORRUPT, SEGMENTS_DATASET, path);
    } else if (ndims != 1 || len < 2 || (uint64_t)len > max_len) {
        st = OB_ERR(err, OB_ERR_CORRUPT,
                    "%s: %d dimensions, %lld bounds (one dimension, 2 .. %" PRIu64 ")", what, ndims,
                    (long long)len, max_len);
    } else if (H5Tget_class(type) != H5T_INTEGER || H5Tget_size(type) != 8 ||
               H5Tget_sign(type) != H5T_SGN_NONE) {
        H5Eclear2(H5E_DEFAULT);
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: not unsigned 64-bit integers", what);
    } else if (!(out->b = malloc((size_t)len * sizeof *out->b))) {
        st = OB_ERR(err, OB_ERR_NOMEM, "%s: %lld bounds", what, (long long)len);
    } else if (H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->b) < 0) {
        st = H5_FAIL(err, OB_ERR_CORRUPT, SEGMENTS_DATASET, path);
    } else {
        out->n = (size_t)len - 1;
        st = check_layout(out, m->padded_size, unit, what, OB_ERR_CORRUPT, err);
    }
    ob__ck_h5_close(&type, H5Tclose);
    ob__ck_h5_close(&space, H5Sclose);
    ob__ck_h5_close(&ds, H5Dclose);
    if (st != OB_OK) layout_free(out);
    return st;
}

/* Reads rank file `rank`: its error buffers (into we, se; NULL reads into scratch memory) and
 * its server layout, which must equal *expect when that is non-NULL, and goes to *out (owned by
 * the caller, layout_free) when that is non-NULL. */
static ob_status read_rank_arrays(const char *dir, const ob_ckpt_meta *m, int rank, float *we,
                                  float *se, const layout *expect, layout *out, ob_err *err)
{
    char path[OB_CKPT_PATH_LEN];
    hid_t f;
    layout lay = {NULL, 0};
    ob_status st = open_rank(dir, m, rank, path, &f, err);
    if (st != OB_OK) return st;
    /* Verification (no buffers): the per-rank moments too. */
    if (!we && m->local_moments &&
        ((st = ob__ck_read_dataset(f, LOCAL_M_DATASET, H5T_NATIVE_FLOAT, NULL,
                                   (size_t)m->num_params, path, err)) ||
         (st = ob__ck_read_dataset(f, LOCAL_V_DATASET, H5T_NATIVE_FLOAT, NULL,
                                   (size_t)m->num_params, path, err)))) {
        H5Fclose(f);
        return st;
    }
    if (!we && m->track_stats &&
        (st = ob__ck_read_dataset(f, TRACK_DATASET, H5T_NATIVE_FLOAT, NULL,
                                  3 * (size_t)m->num_params, path, err))) {
        H5Fclose(f);
        return st;
    }
    if (m->padded_size > 0) {
        st = ob__ck_read_dataset(f, "/optim/worker_error", H5T_NATIVE_FLOAT, we,
                                 (size_t)m->padded_size, path, err);
        if (st == OB_OK)
            st = ob__ck_read_dataset(f, "/optim/server_error", H5T_NATIVE_FLOAT, se,
                                     (size_t)m->chunk_size, path, err);
        if (st == OB_OK) st = read_layout(f, m, &lay, path, err);
        if (st == OB_OK && expect && !layout_equal(&lay, expect))
            st = OB_ERR(err, OB_ERR_CORRUPT,
                        "%s: server layout of %zu segments differs from the other rank files' (%zu "
                        "segments)",
                        path, lay.n, expect->n);
    }
    H5Fclose(f);
    if (st == OB_OK && out)
        *out = lay;
    else
        layout_free(&lay);
    return st;
}

ob_status ob__ckpt_verify_ranks(const char *dir, const ob_ckpt_meta *m, ob_err *err)
{
    ob_status st = OB_OK;
    layout first = {NULL, 0}; /* rank 0's: the others must agree */
    for (int r = 0; st == OB_OK && r < m->world_size; r++)
        st = read_rank_arrays(dir, m, r, NULL, NULL, r > 0 ? &first : NULL, r > 0 ? NULL : &first,
                              err);
    layout_free(&first);
    return st;
}

/* Reads every old rank file: its server error goes to this rank's positions in layout `want`
 * below limit (positions beyond are the caller's), and with sum non-NULL its worker error is
 * added to sum over the d real elements. The files' layouts must agree. */
static ob_status gather_errors(const char *dir, const ob_ckpt_meta *m, int rank, int world_size,
                               const layout *want, uint64_t limit, double *sum, float *se,
                               ob_err *err)
{
    size_t d = (size_t)m->num_params, Dold = (size_t)m->padded_size;
    size_t Cold = (size_t)m->chunk_size;
    float *wbuf = malloc(Dold * sizeof *wbuf), *sbuf = malloc(Cold * sizeof *sbuf);
    layout old = {NULL, 0}; /* rank 0's: the others must agree */
    ob_status st = OB_OK;
    if (!wbuf || !sbuf) st = OB_ERR(err, OB_ERR_NOMEM, "re-shard buffers for D %zu", Dold);
    for (int r = 0; st == OB_OK && r < m->world_size; r++) {
        st = read_rank_arrays(dir, m, r, wbuf, sbuf, r > 0 ? &old : NULL, r > 0 ? NULL : &old, err);
        if (st != OB_OK) break;
        for (size_t i = 0; sum && i < d; i++)
            sum[i] += (double)wbuf[i];
        remap_server(sbuf, &old, (size_t)m->world_size, (size_t)r, se, want, (size_t)world_size,
                     (size_t)rank, limit);
    }
    layout_free(&old);
    free(wbuf);
    free(sbuf);
    return st;
}

ob_status ob_ckpt_read_errors(const char *dir, const ob_ckpt_meta *m, int rank, int world_size,
                              size_t D, size_t C, const size_t *seg_bounds, size_t num_segments,
                              float *we, float *se, ob_err *err)
{
    ob__ck_h5_quiet();
    size_t d = (size_t)m->num_params;
    if (world_size < 1 || rank < 0 || rank >= world_size || C * (size_t)world_size != D || D < d)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "re-shard: rank %d of %d with D %zu, C %zu for d %zu", rank, world_size, D, C,
                      d);
    layout want;
    ob_status st = layout_from_args(&want, seg_bounds, num_segments, D, world_size, 0,
                                    "requested server layout", err);
    if (st != OB_OK) return st;
    if (m->padded_size == 0) { /* no error feedback was running: start from zero */
        memset(we, 0, D * sizeof *we);
        memset(se, 0, C * sizeof *se);
        layout_free(&want);
        return OB_OK;
    }
    if (world_size == m->world_size && D == m->padded_size) {
        /* Own file: bit for bit in its layout; in another, the server error is gathered from
         * every rank, the padding included (it is the same D). */
        layout own = {NULL, 0};
        st = read_rank_arrays(dir, m, rank, we, se, NULL, &own, err);
        if (st == OB_OK && !layout_equal(&own, &want))
            st = gather_errors(dir, m, rank, world_size, &want, D, NULL, se, err);
        layout_free(&own);
        layout_free(&want);
        return st;
    }

    /* Another world size: mean of the old worker errors, and this rank's positions gathered
     * from the old server errors; the padding starts from zero. */
    double *sum = calloc(d, sizeof *sum);
    if (!sum) st = OB_ERR(err, OB_ERR_NOMEM, "re-shard buffers for d %zu", d);
    memset(se, 0, C * sizeof *se);
    if (st == OB_OK) st = gather_errors(dir, m, rank, world_size, &want, d, sum, se, err);
    if (st == OB_OK) {
        for (size_t i = 0; i < d; i++)
            we[i] = (float)(sum[i] / (double)m->world_size);
        memset(we + d, 0, (D - d) * sizeof *we);
    }
    free(sum);
    layout_free(&want);
    return st;
}

/* Per-rank vectors (n datasets, names[k] of lens[k] floats into outs[k]) that rank `rank` of
 * `world_size` resumes from: at the checkpoint's world size this rank's own bit for bit, at
 * another the element-wise mean of every old rank's (in rank order). */
static ob_status read_rank_vectors(const char *dir, const ob_ckpt_meta *m, int rank, int world_size,
                                   const char *const *names, const size_t *lens, float *const *outs,
                                   int n, ob_err *err)
{
    char path[OB_CKPT_PATH_LEN];
    hid_t f;
    ob_status st = OB_OK;
    if (world_size == m->world_size) {
        if ((st = open_rank(dir, m, rank, path, &f, err)) != OB_OK) return st;
        for (int k = 0; st == OB_OK && k < n; k++)
            st = ob__ck_read_dataset(f, names[k], H5T_NATIVE_FLOAT, outs[k], lens[k], path, err);
        H5Fclose(f);
        return st;
    }
    size_t most = 0;
    for (int k = 0; k < n; k++)
        most = lens[k] > most ? lens[k] : most;
    double *sum = calloc(most, sizeof *sum);
    float *buf = malloc(most * sizeof *buf);
    st = sum && buf ? OB_OK : OB_ERR(err, OB_ERR_NOMEM, "per-rank vectors of %zu", most);
    for (int k = 0; st == OB_OK && k < n; k++) {
        memset(sum, 0, most * sizeof *sum);
        for (int r = 0; st == OB_OK && r < m->world_size; r++) {
            if ((st = open_rank(dir, m, r, path, &f, err)) != OB_OK) break;
            st = ob__ck_read_dataset(f, names[k], H5T_NATIVE_FLOAT, buf, lens[k], path, err);
            H5Fclose(f);
            for (size_t i = 0; st == OB_OK && i < lens[k]; i++)
                sum[i] += (double)buf[i];
        }
        for (size_t i = 0; st == OB_OK && i < lens[k]; i++)
            outs[k][i] = (float)(sum[i] / (double)m->world_size);
    }
    free(sum);
    free(buf);
    return st;
}

ob_status ob_ckpt_read_local_moments(const char *dir, const ob_ckpt_meta *m, int rank,
                                     int world_size, float *local_m, float *local_v, ob_err *err)
{
    ob__ck_h5_quiet();
    if (!m->local_moments)
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: the checkpoint holds no per-rank moments", dir);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "per-rank moments: rank %d of %d", rank, world_size);
    /* Another world: the mean keeps |m| <= v where every rank's did. */
    const char *const names[2] = {LOCAL_M_DATASET, LOCAL_V_DATASET};
    size_t d = (size_t)m->num_params, lens[2] = {d, d};
    float *const outs[2] = {local_m, local_v};
    return read_rank_vectors(dir, m, rank, world_size, names, lens, outs, 2, err);
}

ob_status ob_ckpt_read_track_stats(const char *dir, const ob_ckpt_meta *m, int rank, int world_size,
                                   float *stats, ob_err *err)
{
    ob__ck_h5_quiet();
    if (!m->track_stats)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: the checkpoint holds no variance statistics (written without "
                      "optimizer.track_variance; to resume it as it was written, set "
                      "track_variance: 0, OnebitAdam(track_variance=0))",
                      dir);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "variance statistics: rank %d of %d", rank,
                      world_size);
    const char *const names[1] = {TRACK_DATASET};
    size_t lens[1] = {3 * (size_t)m->num_params};
    float *const outs[1] = {stats};
    return read_rank_vectors(dir, m, rank, world_size, names, lens, outs, 1, err);
}
