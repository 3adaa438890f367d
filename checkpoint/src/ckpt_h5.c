/* state.h5 of a checkpoint (rank 0's file: metadata, parameters, moments, the tensor index,
 * the job spec) and the verification of a whole checkpoint; the rank files are ckpt_rank.c's,
 * the HDF5 primitives ckpt_h5io.c's.
 *
 * Files use the HDF5 1.10 format (object headers with checksums, so attributes are covered),
 * and every dataset is chunked with the Fletcher32 filter, so a damaged byte fails the read
 * instead of coming back as a wrong number. Every value read is checked against what the
 * metadata promises (types, sizes, ranges) before it is trusted. */
#include "ckpt_h5io.h"

#include "ckpt_rank.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the tensor index ------------------------------------------------------------------------ */

/* The compound type of /model/tensors, in the file (file = 1: little-endian, packed) or in
 * memory (ob_ckpt_tensor). H5I_INVALID_HID when HDF5 fails. */
static hid_t tensor_type(int file)
{
    hsize_t dims = OB_CKPT_TENSOR_MAX_DIM;
    hid_t str = H5Tcopy(H5T_C_S1);
    hid_t shape = H5Tarray_create2(file ? H5T_STD_U64LE : H5T_NATIVE_UINT64, 1, &dims);
    size_t size = file ? OB_CKPT_TENSOR_NAME_LEN + 8 + 4 + 8 * OB_CKPT_TENSOR_MAX_DIM
                       : sizeof(ob_ckpt_tensor);
    hid_t t = H5Tcreate(H5T_COMPOUND, size);
    size_t o_off = file ? OB_CKPT_TENSOR_NAME_LEN : offsetof(ob_ckpt_tensor, offset);
    size_t o_ndim = file ? o_off + 8 : offsetof(ob_ckpt_tensor, ndim);
    size_t o_shape = file ? o_ndim + 4 : offsetof(ob_ckpt_tensor, shape);
    int ok = str >= 0 && shape >= 0 && t >= 0 && H5Tset_size(str, OB_CKPT_TENSOR_NAME_LEN) >= 0 &&
             H5Tset_strpad(str, H5T_STR_NULLTERM) >= 0 &&
             H5Tinsert(t, "name", offsetof(ob_ckpt_tensor, name), str) >= 0 &&
             H5Tinsert(t, "offset", o_off, file ? H5T_STD_U64LE : H5T_NATIVE_UINT64) >= 0 &&
             H5Tinsert(t, "ndim", o_ndim, file ? H5T_STD_U32LE : H5T_NATIVE_UINT32) >= 0 &&
             H5Tinsert(t, "shape", o_shape, shape) >= 0;
    if (str >= 0) H5Tclose(str);
    if (shape >= 0) H5Tclose(shape);
    if (!ok && t >= 0) {
        H5Tclose(t);
        t = H5I_INVALID_HID;
    }
    return t;
}

static int name_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

/* Checks one name: non-empty, terminated within the field, allowed characters only. */
static int name_ok(const char *name)
{
    size_t len = 0;
    while (len < OB_CKPT_TENSOR_NAME_LEN && name[len] != '\0') {
        if (!name_char_ok(name[len])) return 0;
        len++;
    }
    return len > 0 && len < OB_CKPT_TENSOR_NAME_LEN;
}

static int cmp_names(const void *a, const void *b)
{
    const ob_ckpt_tensor *x = *(const ob_ckpt_tensor *const *)a,
                         *y = *(const ob_ckpt_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Names are distinct: sorted pointers, neighbours compared. Returns the duplicate or NULL;
 * *nomem is set when the scratch array cannot be allocated. */
static const char *duplicate_name(const ob_ckpt_tensor *t, size_t n, int *nomem)
{
    const ob_ckpt_tensor **p = malloc(n * sizeof *p);
    *nomem = p == NULL;
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++)
        p[i] = &t[i];
    qsort(p, n, sizeof *p, cmp_names);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (!strcmp(p[i - 1]->name, p[i]->name)) dup = p[i]->name;
    free(p);
    return dup;
}

static ob_status check_tensors(const ob_ckpt_tensor *t, size_t n, uint64_t d, const char *what,
                               ob_status code, ob_err *err)
{
    if (n == 0 || n > OB_CKPT_MAX_TENSORS)
        return OB_ERR(err, code, "%s: tensor index of %zu entries (1 .. %d)", what, n,
                      OB_CKPT_MAX_TENSORS);
    uint64_t next = 0; /* <= d <= 2^40 below: no wrap */
    for (size_t i = 0; i < n; i++) {
        if (!name_ok(t[i].name))
            return OB_ERR(err, code,
                          "%s: tensor %zu: the name is empty, longer than %d bytes or has a "
                          "character outside [A-Za-z0-9_.-]",
                          what, i, OB_CKPT_TENSOR_NAME_LEN - 1);
        if (t[i].ndim < 1 || t[i].ndim > OB_CKPT_TENSOR_MAX_DIM)
            return OB_ERR(err, code, "%s: tensor '%s': %u dimensions (1 .. %d)", what, t[i].name,
                          t[i].ndim, OB_CKPT_TENSOR_MAX_DIM);
        uint64_t numel = 1;
        for (uint32_t k = 0; k < OB_CKPT_TENSOR_MAX_DIM; k++) {
            uint64_t dim = t[i].shape[k];
            if (k >= t[i].ndim) {
                if (dim != 0)
                    return OB_ERR(err, code, "%s: tensor '%s': dimension %u past ndim is %" PRIu64,
                                  what, t[i].name, k, dim);
                continue;
            }
            if (dim == 0 || dim > d || numel > d / dim) /* numel * dim > d, without wrapping */
                return OB_ERR(err, code,
                              "%s: tensor '%s': shape dimension %u of %" PRIu64
                              " does not fit a buffer of %" PRIu64,
                              what, t[i].name, k, dim, d);
            numel *= dim;
        }
        if (t[i].offset != next)
            return OB_ERR(err, code,
                          "%s: tensor '%s' starts at %" PRIu64 ", expected %" PRIu64
                          " (tensors are contiguous, in buffer order)",
                          what, t[i].name, t[i].offset, next);
        if (numel > d - next)
            return OB_ERR(err, code,
                          "%s: tensor '%s' [%" PRIu64 ", +%" PRIu64
                          ") runs past the buffer of %" PRIu64,
                          what, t[i].name, t[i].offset, numel, d);
        next += numel;
    }
    if (next != d)
        return OB_ERR(err, code, "%s: the tensors cover %" PRIu64 " of %" PRIu64 " elements", what,
                      next, d);
    int nomem;
    const char *dup = duplicate_name(t, n, &nomem);
    if (nomem) return OB_ERR(err, OB_ERR_NOMEM, "%s: checking %zu tensor names", what, n);
    if (dup) return OB_ERR(err, code, "%s: tensor name '%s' appears twice", what, dup);
    return OB_OK;
}

ob_status ob_ckpt_check_tensors(const ob_ckpt_tensor *t, size_t n, uint64_t d, const char *what,
                                ob_err *err)
{
    return check_tensors(t, n, d, what ? what : "tensor index", OB_ERR_CORRUPT, err);
}

static ob_status write_tensors(hid_t f, const ob_ckpt_tensor *t, size_t n, const char *path,
                               ob_err *err)
{
    hid_t ft = tensor_type(1), mt = tensor_type(0);
    ob_status st = OB_OK;
    if (ft < 0 || mt < 0)
        st = H5_FAIL(err, OB_ERR_IO, "tensor index type", path);
    else
        st = ob__ck_write_dataset(f, "/model/tensors", ft, mt, t, n, path, err);
    ob__ck_h5_close(&ft, H5Tclose);
    ob__ck_h5_close(&mt, H5Tclose);
    return st;
}

ob_status ob_ckpt_write_state(const char *dir, const ob_ckpt_meta *m, const ob_ckpt_arrays *a,
                              const char *spec_json, ob_err *err)
{
    ob__ck_h5_quiet();
    char path[OB_CKPT_PATH_LEN];
    ob_status st = ob__ckpt_join(path, dir, OB_CKPT_STATE_FILE, err);
    if (st != OB_OK) return st;
    if (!a->params || !a->exp_avg || !a->exp_avg_sq || m->num_params == 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: no parameters to write", path);
    if (!(m->refit_scale > 0.0 && m->refit_scale <= 1.0))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: refit scale %g outside (0, 1]", path,
                      m->refit_scale);
    if ((a->tensors || a->num_tensors) &&
        (st = check_tensors(a->tensors, a->tensors ? a->num_tensors : 0, m->num_params, path,
                            OB_ERR_INVALID_ARG, err)) != OB_OK)
        return st;
    hid_t f = ob__ck_create_file(path, err);
    if (f < 0) return OB_ERR_IO;
    size_t d = (size_t)m->num_params;
    if ((st = ob__ck_write_common_attrs(f, m, path, err)) ||
        (st = ob__ck_attr_i64(f, "phase", m->phase, path, err)) ||
        (st = ob__ck_attr_i64(f, "freeze_step", m->freeze_step, path, err)) ||
        (st = ob__ck_attr_u64(f, "block_size", m->block_size, path, err)) ||
        (st = ob__ck_attr_u64(f, "seed", m->seed, path, err)) ||
        (st = ob__ck_attr_f64(f, "last_ratio", m->last_ratio, path, err)) ||
        (st = ob__ck_attr_f64(f, "last_norm", m->last_norm, path, err)) ||
        (st = ob__ck_attr_u64(f, "bytes_sent", m->bytes_sent, path, err)) ||
        (st = ob__ck_attr_u64(f, "bytes_warmup", m->bytes_warmup, path, err)) ||
        (st = ob__ck_attr_u64(f, "bytes_compression", m->bytes_compression, path, err)) ||
        (st = ob__ck_attr_f64(f, "lr", m->lr, path, err)) ||
        (st = ob__ck_attr_f64(f, "train_loss", m->train_loss, path, err)) ||
        (st = ob__ck_attr_f64(f, "wall_seconds", m->wall_seconds, path, err)) ||
        (st = ob__ck_attr_i64(f, "warm_start", m->warm_start, path, err)) ||
        (st = ob__ck_attr_i64(f, "refit_end", m->refit_end, path, err)) ||
        (st = ob__ck_attr_f64(f, "refit_scale", m->refit_scale, path, err)) ||
        (st = ob__ck_attr_i64(f, "rollbacks", m->rollbacks, path, err)) ||
        (m->local_moments && (st = ob__ck_attr_i64(f, "local_moments", 1, path, err))) ||
        (m->track_stats && (st = ob__ck_attr_i64(f, "track_stats", 1, path, err))) ||
        (m->ranks_per_node > 1 &&
         (st = ob__ck_attr_i64(f, "ranks_per_node", m->ranks_per_node, path, err))) ||
        (st = ob__ck_attr_f64(f, "loss_ema", m->loss_ema, path, err)) ||
        (st = ob__ck_attr_f64(f, "loss_at_freeze", m->loss_at_freeze, path, err)) ||
        (st = ob__ck_attr_f64(f, "loss_best", m->loss_best, path, err)) ||
        (st = ob__ck_attr_u64(f, "loader_epoch", m->loader_epoch, path, err)) ||
        (st = ob__ck_attr_u64(f, "loader_index", m->loader_index, path, err)) ||
        (st = ob__ck_write_attr(f, "loader_rng", H5T_STD_U64LE, H5T_NATIVE_UINT64, m->loader_rng, 4,
                                path, err)) ||
        (st = ob__ck_attr_str(f, "spec_json", spec_json ? spec_json : "", path, err)))
        goto fail;
    if ((st = ob__ck_write_array(f, "/model/params", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, a->params, d,
                                 path, err)) ||
        (st = ob__ck_write_array(f, "/optim/exp_avg", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, a->exp_avg,
                                 d, path, err)) ||
        (st = ob__ck_write_array(f, "/optim/exp_avg_sq", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                                 a->exp_avg_sq, d, path, err)))
        goto fail;
    if (a->num_tensors > 0 && (st = write_tensors(f, a->tensors, a->num_tensors, path, err)))
        goto fail;
    if (a->v_norm_history_len > 0 &&
        (st = ob__ck_write_array(f, "/optim/v_norm_history", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                                 a->v_norm_history, a->v_norm_history_len, path, err)))
        goto fail;
    return ob__ck_finish_file(&f, path, err);
fail:
    ob__ck_h5_close(&f, H5Fclose);
    return st;
}

/* --- reading ---------------------------------------------------------------------------------- */

static ob_status history_len(hid_t f, size_t *len, const char *path, ob_err *err);

static ob_status read_meta_file(hid_t f, ob_ckpt_meta *m, char **spec_json, const char *path,
                                ob_err *err)
{
    memset(m, 0, sizeof *m);
    int64_t phase, freeze;
    ob_status st;
    if ((st = ob__ck_read_common_attrs(f, m, path, err)) ||
        (st = ob__ck_read_i64(f, "phase", &phase, path, err)) ||
        (st = ob__ck_read_i64(f, "freeze_step", &freeze, path, err)) ||
        (st = ob__ck_read_u64(f, "block_size", &m->block_size, path, err)) ||
        (st = ob__ck_read_u64(f, "seed", &m->seed, path, err)) ||
        (st = ob__ck_read_f64(f, "last_ratio", &m->last_ratio, path, err)) ||
        (st = ob__ck_read_f64(f, "last_norm", &m->last_norm, path, err)) ||
        (st = ob__ck_read_u64(f, "bytes_sent", &m->bytes_sent, path, err)) ||
        (st = ob__ck_read_u64(f, "bytes_warmup", &m->bytes_warmup, path, err)) ||
        (st = ob__ck_read_u64(f, "bytes_compression", &m->bytes_compression, path, err)) ||
        (st = ob__ck_read_f64(f, "lr", &m->lr, path, err)) ||
        (st = ob__ck_read_f64(f, "train_loss", &m->train_loss, path, err)) ||
        (st = ob__ck_read_f64(f, "wall_seconds", &m->wall_seconds, path, err)) ||
        (st = ob__ck_read_u64(f, "loader_epoch", &m->loader_epoch, path, err)) ||
        (st = ob__ck_read_u64(f, "loader_index", &m->loader_index, path, err)) ||
        (st = ob__ck_read_attr(f, "loader_rng", H5T_NATIVE_UINT64, m->loader_rng, 4, path, err)))
        return st;
    /* Optional (checkpoints written before warm starts were re-estimated have neither). */
    int64_t warm = 0, refit_end = 0, rollbacks = 0, local = 0, rpn = 1, track = 0;
    if ((H5Aexists(f, "track_stats") > 0 &&
         (st = ob__ck_read_i64(f, "track_stats", &track, path, err))) ||
        (H5Aexists(f, "ranks_per_node") > 0 &&
         (st = ob__ck_read_i64(f, "ranks_per_node", &rpn, path, err))) ||
        (H5Aexists(f, "local_moments") > 0 &&
         (st = ob__ck_read_i64(f, "local_moments", &local, path, err))) ||
        (H5Aexists(f, "warm_start") > 0 &&
         (st = ob__ck_read_i64(f, "warm_start", &warm, path, err))) ||
        (H5Aexists(f, "refit_end") > 0 &&
         (st = ob__ck_read_i64(f, "refit_end", &refit_end, path, err))) ||
        (H5Aexists(f, "rollbacks") > 0 &&
         (st = ob__ck_read_i64(f, "rollbacks", &rollbacks, path, err))))
        return st;
    if (warm < 0 || warm > 5 || refit_end < 0 || refit_end > INT32_MAX || rollbacks < 0 ||
        rollbacks > 1000 || local < 0 || local > 1 || track < 0 || track > 1 || rpn < 1 ||
        rpn > 4096 || m->world_size % rpn != 0)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: warm start state %" PRId64 " / refit end %" PRId64
                      " / rollbacks %" PRId64 " / local moments %" PRId64 " / ranks a node %" PRId64
                      " / variance statistics %" PRId64,
                      path, warm, refit_end, rollbacks, local, rpn, track);
    m->local_moments = (int)local;
    m->track_stats = (int)track;
    m->ranks_per_node = (int)rpn;
    m->rollbacks = (int)rollbacks;
    m->warm_start = (int)warm;
    /* Optional (written since a refit's freeze takes the source's factor): in (0, 1]. */
    m->refit_scale = 1.0;
    if (H5Aexists(f, "refit_scale") > 0 &&
        (st = ob__ck_read_f64(f, "refit_scale", &m->refit_scale, path, err)))
        return st;
    if (!(m->refit_scale > 0.0 && m->refit_scale <= 1.0))
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: refit scale %g outside (0, 1]", path,
                      m->refit_scale);
    /* Optional too (written since the guard watches the loss's rise): NaN or a finite loss >= 0. */
    static const char *const tracker[] = {"loss_ema", "loss_at_freeze", "loss_best"};
    double *tv[] = {&m->loss_ema, &m->loss_at_freeze, &m->loss_best};
    for (int i = 0; i < 3; i++) {
        *tv[i] = NAN;
        if (H5Aexists(f, tracker[i]) > 0 && (st = ob__ck_read_f64(f, tracker[i], tv[i], path, err)))
            return st;
        if (!isnan(*tv[i]) && !(*tv[i] >= 0.0 && isfinite(*tv[i])))
            return OB_ERR(err, OB_ERR_CORRUPT, "%s: %s %g is not a loss", path, tracker[i], *tv[i]);
    }
    m->refit_end = (long)refit_end;
    if (phase < 0 || phase > 1 || freeze < -1 || freeze > m->step)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: phase %" PRId64 " / freeze step %" PRId64 " do not fit step %ld", path,
                      phase, freeze, m->step);
    m->phase = (int)phase;
    m->freeze_step = (long)freeze;
    size_t hist;
    if ((st = ob__ck_check_sizes(m, path, err)) || (st = history_len(f, &hist, path, err)))
        return st;
    m->v_norm_history_len = hist;
    if (spec_json) return ob__ck_read_str(f, "spec_json", spec_json, path, err);
    return OB_OK;
}

ob_status ob_ckpt_read_meta(const char *dir, ob_ckpt_meta *meta, char **spec_json, ob_err *err)
{
    ob__ck_h5_quiet();
    if (spec_json) *spec_json = NULL;
    char path[OB_CKPT_PATH_LEN];
    ob_status st = ob__ckpt_join(path, dir, OB_CKPT_STATE_FILE, err);
    if (st != OB_OK) return st;
    hid_t f;
    if ((st = ob__ck_open_file(path, &f, err)) != OB_OK) return st;
    ob_ckpt_meta m;
    st = read_meta_file(f, &m, spec_json, path, err);
    H5Fclose(f);
    if (st == OB_OK) *meta = m;
    return st;
}

/* Length of the freeze-detector history stored in state.h5 (0 when absent). */
static ob_status history_len(hid_t f, size_t *len, const char *path, ob_err *err)
{
    *len = 0;
    htri_t ex = H5Lexists(f, "/optim", H5P_DEFAULT) > 0
                    ? H5Lexists(f, "/optim/v_norm_history", H5P_DEFAULT)
                    : 0;
    if (ex < 0) return H5_FAIL(err, OB_ERR_CORRUPT, "v_norm_history", path);
    if (ex == 0) return OB_OK;
    hid_t ds = H5Dopen2(f, "/optim/v_norm_history", H5P_DEFAULT);
    hid_t space = ds >= 0 ? H5Dget_space(ds) : H5I_INVALID_HID;
    hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    ob__ck_h5_close(&space, H5Sclose);
    ob__ck_h5_close(&ds, H5Dclose);
    if (n < 0 || n > (1 << 24)) return H5_FAIL(err, OB_ERR_CORRUPT, "v_norm_history", path);
    *len = (size_t)n;
    return OB_OK;
}

static ob_status read_state_arrays(hid_t f, const ob_ckpt_meta *m, const ob_ckpt_arrays *a,
                                   const char *path, ob_err *err)
{
    size_t d = (size_t)m->num_params, hist;
    ob_status st;
    if ((st = ob__ck_read_dataset(f, "/model/params", H5T_NATIVE_FLOAT, a ? a->params : NULL, d,
                                  path, err)) ||
        (st = ob__ck_read_dataset(f, "/optim/exp_avg", H5T_NATIVE_FLOAT, a ? a->exp_avg : NULL, d,
                                  path, err)) ||
        (st = ob__ck_read_dataset(f, "/optim/exp_avg_sq", H5T_NATIVE_FLOAT,
                                  a ? a->exp_avg_sq : NULL, d, path, err)) ||
        (st = history_len(f, &hist, path, err)))
        return st;
    if (a && a->v_norm_history && a->v_norm_history_len != hist)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: freeze-detector history of %zu entries, this run needs %zu", path, hist,
                      a->v_norm_history_len);
    if (hist > 0)
        st = ob__ck_read_dataset(f, "/optim/v_norm_history", H5T_NATIVE_DOUBLE,
                                 a ? a->v_norm_history : NULL, hist, path, err);
    return st;
}

ob_status ob_ckpt_read_state(const char *dir, const ob_ckpt_meta *meta, const ob_ckpt_arrays *a,
                             ob_err *err)
{
    ob__ck_h5_quiet();
    char path[OB_CKPT_PATH_LEN];
    ob_status st = ob__ckpt_join(path, dir, OB_CKPT_STATE_FILE, err);
    if (st != OB_OK) return st;
    hid_t f;
    if ((st = ob__ck_open_file(path, &f, err)) != OB_OK) return st;
    st = read_state_arrays(f, meta, a, path, err);
    H5Fclose(f);
    return st;
}

/* The stored index's type must be the compound we write, member by member: a fixed string of
 * exactly OB_CKPT_TENSOR_NAME_LEN bytes (so nothing is truncated in conversion), integers of at
 * most 8 bytes, and an array of OB_CKPT_TENSOR_MAX_DIM integers. */
static int tensor_type_ok(hid_t type)
{
    if (H5Tget_class(type) != H5T_COMPOUND || H5Tget_nmembers(type) != 4) return 0;
    static const char *const names[] = {"name", "offset", "ndim", "shape"};
    int ok = 1;
    for (int i = 0; i < 4 && ok; i++) {
        int idx = H5Tget_member_index(type, names[i]);
        hid_t mt = idx >= 0 ? H5Tget_member_type(type, (unsigned)idx) : H5I_INVALID_HID;
        if (mt < 0) return 0;
        H5T_class_t cls = H5Tget_class(mt);
        if (i == 0) {
            ok = cls == H5T_STRING && H5Tis_variable_str(mt) == 0 &&
                 H5Tget_size(mt) == OB_CKPT_TENSOR_NAME_LEN;
        } else if (i < 3) {
            ok = cls == H5T_INTEGER && H5Tget_size(mt) <= 8;
        } else {
            hsize_t dims[2] = {0, 0};
            hid_t base = cls == H5T_ARRAY ? H5Tget_super(mt) : H5I_INVALID_HID;
            ok = cls == H5T_ARRAY && H5Tget_array_ndims(mt) == 1 &&
                 H5Tget_array_dims2(mt, dims) == 1 && dims[0] == OB_CKPT_TENSOR_MAX_DIM &&
                 base >= 0 && H5Tget_class(base) == H5T_INTEGER && H5Tget_size(base) <= 8;
            if (base >= 0) H5Tclose(base);
        }
        H5Tclose(mt);
    }
    return ok;
}

static ob_status read_tensors_file(hid_t f, uint64_t d, ob_ckpt_tensor **out, size_t *n,
                                   const char *path, ob_err *err)
{
    htri_t ex =
        H5Lexists(f, "/model", H5P_DEFAULT) > 0 ? H5Lexists(f, "/model/tensors", H5P_DEFAULT) : 0;
    if (ex < 0) return H5_FAIL(err, OB_ERR_CORRUPT, "/model/tensors", path);
    if (ex == 0) return OB_OK; /* written before the index existed */
    hid_t ds = H5Dopen2(f, "/model/tensors", H5P_DEFAULT);
    hid_t space = ds >= 0 ? H5Dget_space(ds) : H5I_INVALID_HID;
    hid_t type = ds >= 0 ? H5Dget_type(ds) : H5I_INVALID_HID, mt = tensor_type(0);
    int ndims = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    hssize_t rows = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    ob_ckpt_tensor *t = NULL;
    ob_status st = OB_OK;
    if (ds < 0 || space < 0 || type < 0 || mt < 0) {
        st = H5_FAIL(err, OB_ERR_CORRUPT, "/model/tensors", path);
    } else if (ndims != 1 || rows < 1 || rows > OB_CKPT_MAX_TENSORS) {
        st = OB_ERR(err, OB_ERR_CORRUPT,
                    "%s: /model/tensors: %d dimensions, %lld entries (one dimension, 1 .. %d)",
                    path, ndims, (long long)rows, OB_CKPT_MAX_TENSORS);
    } else if (!tensor_type_ok(type)) {
        H5Eclear2(H5E_DEFAULT);
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: /model/tensors has the wrong element type", path);
    } else if (!(t = calloc((size_t)rows, sizeof *t))) {
        st = OB_ERR(err, OB_ERR_NOMEM, "%s: tensor index of %lld entries", path, (long long)rows);
    } else if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, t) < 0) {
        st = H5_FAIL(err, OB_ERR_CORRUPT, "/model/tensors", path);
    } else {
        char what[OB_CKPT_PATH_LEN + 32];
        snprintf(what, sizeof what, "%s: /model/tensors", path);
        st = check_tensors(t, (size_t)rows, d, what, OB_ERR_CORRUPT, err);
    }
    ob__ck_h5_close(&mt, H5Tclose);
    ob__ck_h5_close(&type, H5Tclose);
    ob__ck_h5_close(&space, H5Sclose);
    ob__ck_h5_close(&ds, H5Dclose);
    if (st != OB_OK) {
        free(t);
        return st;
    }
    *out = t;
    *n = (size_t)rows;
    return OB_OK;
}

ob_status ob_ckpt_read_tensors(const char *dir, const ob_ckpt_meta *meta, ob_ckpt_tensor **out,
                               size_t *n, ob_err *err)
{
    ob__ck_h5_quiet();
    *out = NULL;
    *n = 0;
    char path[OB_CKPT_PATH_LEN];
    ob_status st = ob__ckpt_join(path, dir, OB_CKPT_STATE_FILE, err);
    if (st != OB_OK) return st;
    hid_t f;
    if ((st = ob__ck_open_file(path, &f, err)) != OB_OK) return st;
    st = read_tensors_file(f, meta->num_params, out, n, path, err);
    H5Fclose(f);
    return st;
}

ob_status ob_ckpt_verify(const char *dir, ob_ckpt_meta *meta, ob_err *err)
{
    ob__ck_h5_quiet();
    ob_ckpt_meta m;
    char *spec = NULL;
    ob_status st = ob_ckpt_read_meta(dir, &m, &spec, err);
    free(spec);
    if (st == OB_OK) st = ob_ckpt_read_state(dir, &m, NULL, err);
    if (st == OB_OK) {
        ob_ckpt_tensor *t = NULL;
        size_t n = 0;
        st = ob_ckpt_read_tensors(dir, &m, &t, &n, err);
        free(t);
    }
    if (st == OB_OK) st = ob__ckpt_verify_ranks(dir, &m, err);
    if (st == OB_OK && meta) *meta = m;
    return st;
}
