/* The HDF5 files of a checkpoint: state.h5 (rank 0) and rank-XXXXX.h5 (every rank).
 *
 * Files use the HDF5 1.10 format (object headers with checksums, so attributes are covered),
 * and every dataset is chunked with the Fletcher32 filter, so a damaged byte fails the read
 * instead of coming back as a wrong number. Every value read is checked against what the
 * metadata promises (types, sizes, ranges) before it is trusted. */
#include "ckpt_internal.h"

#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Chunks of at most 1 Mi elements: a checksum per 4 MiB of floats. */
#define CHUNK_ELEMS ((hsize_t)1 << 20)

/* --- HDF5 errors ------------------------------------------------------------------------------ */

typedef struct h5_first {
    char desc[160];
    char func[64];
    int have;
} h5_first;

static herr_t walk_first(unsigned n, const H5E_error2_t *e, void *data)
{
    h5_first *f = data;
    if (n == 0 && e) {
        snprintf(f->desc, sizeof f->desc, "%s", e->desc ? e->desc : "");
        snprintf(f->func, sizeof f->func, "%s", e->func_name ? e->func_name : "");
        f->have = 1;
    }
    return 0;
}

/* Records a failed HDF5 call: what we were doing, on which path, and HDF5's innermost reason
 * (e.g. "data error detected by fletcher32 checksum"). */
static ob_status h5_fail(ob_err *err, ob_status code, const char *file, int line, const char *what,
                         const char *path)
{
    h5_first f = {{0}, {0}, 0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_first, &f);
    H5Eclear2(H5E_DEFAULT);
    if (f.have)
        return ob_err_set(err, code, file, line, "%s: %s: %s (in %s)", path, what, f.desc, f.func);
    return ob_err_set(err, code, file, line, "%s: %s failed", path, what);
}
#define H5_FAIL(err, code, what, path) h5_fail((err), (code), __FILE__, __LINE__, (what), (path))

/* HDF5 prints its error stack to stderr unless told not to; the setting is per thread in a
 * thread-safe build, so every entry point says it. */
static void h5_quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void h5_close(hid_t *id, herr_t (*fn)(hid_t))
{
    if (*id >= 0) fn(*id);
    *id = H5I_INVALID_HID;
}

/* --- writing ---------------------------------------------------------------------------------- */

static hid_t create_file(const char *path, ob_err *err)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    hid_t f = H5I_INVALID_HID;
    if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) >= 0)
        f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    if (f < 0) H5_FAIL(err, OB_ERR_IO, "create", path);
    if (fapl >= 0) H5Pclose(fapl);
    return f;
}

static ob_status write_attr(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                            const void *val, hsize_t count, const char *path, ob_err *err)
{
    hid_t space = count == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, NULL);
    hid_t a = space >= 0 ? H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT)
                         : H5I_INVALID_HID;
    herr_t rc = a >= 0 ? H5Awrite(a, mem_type, val) : -1;
    if (a >= 0) H5Aclose(a);
    if (space >= 0) H5Sclose(space);
    if (rc < 0) return H5_FAIL(err, OB_ERR_IO, name, path);
    return OB_OK;
}

static ob_status attr_i64(hid_t loc, const char *name, int64_t v, const char *path, ob_err *err)
{
    return write_attr(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, 1, path, err);
}

static ob_status attr_u64(hid_t loc, const char *name, uint64_t v, const char *path, ob_err *err)
{
    return write_attr(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v, 1, path, err);
}

static ob_status attr_f64(hid_t loc, const char *name, double v, const char *path, ob_err *err)
{
    return write_attr(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, 1, path, err);
}

static ob_status attr_str(hid_t loc, const char *name, const char *s, const char *path, ob_err *err)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0 || H5Tset_size(t, strlen(s) + 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0) {
        if (t >= 0) H5Tclose(t);
        return H5_FAIL(err, OB_ERR_IO, name, path);
    }
    ob_status st = write_attr(loc, name, t, t, s, 1, path, err);
    H5Tclose(t);
    return st;
}

/* A 1-D dataset of n elements, chunked, with the Fletcher32 checksum filter. */
static ob_status write_dataset(hid_t f, const char *name, hid_t file_type, hid_t mem_type,
                               const void *data, size_t n, const char *path, ob_err *err)
{
    hsize_t dims = n, chunk = n < CHUNK_ELEMS ? n : CHUNK_ELEMS;
    hid_t space = H5Screate_simple(1, &dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t ds = H5I_INVALID_HID;
    herr_t rc = -1;
    if (space >= 0 && dcpl >= 0 && lcpl >= 0 && H5Pset_chunk(dcpl, 1, &chunk) >= 0 &&
        H5Pset_fletcher32(dcpl) >= 0 && H5Pset_create_intermediate_group(lcpl, 1) >= 0)
        ds = H5Dcreate2(f, name, file_type, space, lcpl, dcpl, H5P_DEFAULT);
    if (ds >= 0) rc = H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    h5_close(&ds, H5Dclose);
    h5_close(&lcpl, H5Pclose);
    h5_close(&dcpl, H5Pclose);
    h5_close(&space, H5Sclose);
    if (rc < 0) return H5_FAIL(err, OB_ERR_IO, name, path);
    return OB_OK;
}

/* Closes the file (flushing it) and fsyncs it. */
static ob_status finish_file(hid_t *f, const char *path, ob_err *err)
{
    herr_t rc = H5Fclose(*f);
    *f = H5I_INVALID_HID;
    if (rc < 0) return H5_FAIL(err, OB_ERR_IO, "close", path);
    return ob__ckpt_fsync_path(path, 0, err);
}

static ob_status write_common_attrs(hid_t f, const ob_ckpt_meta *m, const char *path, ob_err *err)
{
    ob_status st;
    if ((st = attr_str(f, "magic", OB_CKPT_MAGIC, path, err)) ||
        (st = attr_i64(f, "format_version", OB_CKPT_FORMAT_VERSION, path, err)) ||
        (st = attr_i64(f, "step", m->step, path, err)) ||
        (st = attr_i64(f, "world_size", m->world_size, path, err)) ||
        (st = attr_u64(f, "num_params", m->num_params, path, err)) ||
        (st = attr_u64(f, "padded_size", m->padded_size, path, err)) ||
        (st = attr_u64(f, "chunk_size", m->chunk_size, path, err)))
        return st;
    return OB_OK;
}

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
        st = write_dataset(f, "/model/tensors", ft, mt, t, n, path, err);
    h5_close(&ft, H5Tclose);
    h5_close(&mt, H5Tclose);
    return st;
}

ob_status ob_ckpt_write_state(const char *dir, const ob_ckpt_meta *m, const ob_ckpt_arrays *a,
                              const char *spec_json, ob_err *err)
{
    h5_quiet();
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
    hid_t f = create_file(path, err);
    if (f < 0) return OB_ERR_IO;
    size_t d = (size_t)m->num_params;
    if ((st = write_common_attrs(f, m, path, err)) ||
        (st = attr_i64(f, "phase", m->phase, path, err)) ||
        (st = attr_i64(f, "freeze_step", m->freeze_step, path, err)) ||
        (st = attr_u64(f, "block_size", m->block_size, path, err)) ||
        (st = attr_u64(f, "seed", m->seed, path, err)) ||
        (st = attr_f64(f, "last_ratio", m->last_ratio, path, err)) ||
        (st = attr_f64(f, "last_norm", m->last_norm, path, err)) ||
        (st = attr_u64(f, "bytes_sent", m->bytes_sent, path, err)) ||
        (st = attr_u64(f, "bytes_warmup", m->bytes_warmup, path, err)) ||
        (st = attr_u64(f, "bytes_compression", m->bytes_compression, path, err)) ||
        (st = attr_f64(f, "lr", m->lr, path, err)) ||
        (st = attr_f64(f, "train_loss", m->train_loss, path, err)) ||
        (st = attr_f64(f, "wall_seconds", m->wall_seconds, path, err)) ||
        (st = attr_i64(f, "warm_start", m->warm_start, path, err)) ||
        (st = attr_i64(f, "refit_end", m->refit_end, path, err)) ||
        (st = attr_f64(f, "refit_scale", m->refit_scale, path, err)) ||
        (st = attr_i64(f, "rollbacks", m->rollbacks, path, err)) ||
        (m->local_moments && (st = attr_i64(f, "local_moments", 1, path, err))) ||
        (m->ranks_per_node > 1 &&
         (st = attr_i64(f, "ranks_per_node", m->ranks_per_node, path, err))) ||
        (st = attr_f64(f, "loss_ema", m->loss_ema, path, err)) ||
        (st = attr_f64(f, "loss_at_freeze", m->loss_at_freeze, path, err)) ||
        (st = attr_f64(f, "loss_best", m->loss_best, path, err)) ||
        (st = attr_u64(f, "loader_epoch", m->loader_epoch, path, err)) ||
        (st = attr_u64(f, "loader_index", m->loader_index, path, err)) ||
        (st = write_attr(f, "loader_rng", H5T_STD_U64LE, H5T_NATIVE_UINT64, m->loader_rng, 4, path,
                         err)) ||
        (st = attr_str(f, "spec_json", spec_json ? spec_json : "", path, err)))
        goto fail;
    if ((st = write_dataset(f, "/model/params", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, a->params, d,
                            path, err)) ||
        (st = write_dataset(f, "/optim/exp_avg", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, a->exp_avg, d,
                            path, err)) ||
        (st = write_dataset(f, "/optim/exp_avg_sq", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, a->exp_avg_sq,
                            d, path, err)))
        goto fail;
    if (a->num_tensors > 0 && (st = write_tensors(f, a->tensors, a->num_tensors, path, err)))
        goto fail;
    if (a->v_norm_history_len > 0 &&
        (st = write_dataset(f, "/optim/v_norm_history", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                            a->v_norm_history, a->v_norm_history_len, path, err)))
        goto fail;
    return finish_file(&f, path, err);
fail:
    h5_close(&f, H5Fclose);
    return st;
}

/* --- the server layout (onebit/checkpoint.h) -------------------------------------------------- */

#define SEGMENTS_DATASET "/optim/server_segments"
/* A rank's own moments, for optimizers that keep them per rank (ob_ckpt_meta.local_moments). */
#define LOCAL_M_DATASET "/optim/local_exp_avg"
#define LOCAL_V_DATASET "/optim/local_exp_avg_sq"

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
    h5_quiet();
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
    hid_t f = create_file(path, err);
    if (f < 0) {
        layout_free(&lay);
        return OB_ERR_IO;
    }
    if ((st = write_common_attrs(f, m, path, err)) || (st = attr_i64(f, "rank", rank, path, err)))
        goto fail;
    if (m->padded_size > 0 &&
        ((st = write_dataset(f, "/optim/worker_error", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                             worker_error, (size_t)m->padded_size, path, err)) ||
         (st = write_dataset(f, "/optim/server_error", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                             server_error, (size_t)m->chunk_size, path, err))))
        goto fail;
    if (m->local_moments &&
        ((st = write_dataset(f, LOCAL_M_DATASET, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, local_m,
                             (size_t)m->num_params, path, err)) ||
         (st = write_dataset(f, LOCAL_V_DATASET, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, local_v,
                             (size_t)m->num_params, path, err))))
        goto fail;
    /* One segment is the plain layout: stored as files have always been. */
    if (lay.n > 1 && (st = write_dataset(f, SEGMENTS_DATASET, H5T_STD_U64LE, H5T_NATIVE_UINT64,
                                         lay.b, lay.n + 1, path, err)))
        goto fail;
    layout_free(&lay);
    return finish_file(&f, path, err);
fail:
    layout_free(&lay);
    h5_close(&f, H5Fclose);
    return st;
}

/* --- reading ---------------------------------------------------------------------------------- */

static ob_status open_file(const char *path, hid_t *out, ob_err *err)
{
    *out = H5I_INVALID_HID;
    FILE *probe = fopen(path, "rb");
    if (!probe) return OB_ERR(err, OB_ERR_NOT_FOUND, "%s: missing", path);
    fclose(probe);
    *out = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (*out < 0) return H5_FAIL(err, OB_ERR_CORRUPT, "not a readable HDF5 file", path);
    return OB_OK;
}

/* Reads a numeric attribute of `count` elements (scalar when count is 1). */
static ob_status read_attr(hid_t loc, const char *name, hid_t mem_type, void *val, hsize_t count,
                           const char *path, ob_err *err)
{
    if (H5Aexists(loc, name) <= 0)
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: attribute '%s' is missing", path, name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t space = a >= 0 ? H5Aget_space(a) : H5I_INVALID_HID;
    hssize_t npoints = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    hid_t type = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
    H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    H5T_class_t want = H5Tget_class(mem_type);
    ob_status st = OB_OK;
    if (a < 0 || space < 0 || type < 0)
        st = H5_FAIL(err, OB_ERR_CORRUPT, name, path);
    else if (npoints != (hssize_t)count || cls != want)
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: attribute '%s' has the wrong type or size", path,
                    name);
    else if (H5Aread(a, mem_type, val) < 0)
        st = H5_FAIL(err, OB_ERR_CORRUPT, name, path);
    h5_close(&type, H5Tclose);
    h5_close(&space, H5Sclose);
    h5_close(&a, H5Aclose);
    return st;
}

static ob_status read_i64(hid_t loc, const char *name, int64_t *v, const char *path, ob_err *err)
{
    return read_attr(loc, name, H5T_NATIVE_INT64, v, 1, path, err);
}

static ob_status read_u64(hid_t loc, const char *name, uint64_t *v, const char *path, ob_err *err)
{
    return read_attr(loc, name, H5T_NATIVE_UINT64, v, 1, path, err);
}

static ob_status read_f64(hid_t loc, const char *name, double *v, const char *path, ob_err *err)
{
    return read_attr(loc, name, H5T_NATIVE_DOUBLE, v, 1, path, err);
}

/* Longest string attribute a checkpoint has reason to carry (the job spec). */
#define OB_CKPT_MAX_STR ((size_t)1 << 24)

/* Reads a string attribute: one fixed-length string (a scalar dataspace) of at most
 * OB_CKPT_MAX_STR bytes. Type, class, dataspace and size are checked before anything is
 * allocated or read. *out is malloc'd and terminated. */
static ob_status read_str(hid_t loc, const char *name, char **out, const char *path, ob_err *err)
{
    *out = NULL;
    if (H5Aexists(loc, name) <= 0)
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: attribute '%s' is missing", path, name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t type = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
    hid_t space = a >= 0 ? H5Aget_space(a) : H5I_INVALID_HID;
    H5S_class_t shape = space >= 0 ? H5Sget_simple_extent_type(space) : H5S_NO_CLASS;
    size_t n = type >= 0 ? H5Tget_size(type) : 0;
    ob_status st = OB_OK;
    if (type < 0 || H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) != 0) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: attribute '%s' is not a fixed-length string", path,
                    name);
    } else if (shape != H5S_SCALAR) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: attribute '%s' is not a single string", path, name);
    } else if (n == 0 || n > OB_CKPT_MAX_STR) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: attribute '%s' of %zu bytes", path, name, n);
    } else {
        char *s = calloc(1, n + 1);
        if (!s)
            st = OB_ERR(err, OB_ERR_NOMEM, "%s: attribute '%s' of %zu bytes", path, name, n);
        else if (H5Aread(a, type, s) < 0) {
            free(s);
            st = H5_FAIL(err, OB_ERR_CORRUPT, name, path);
        } else {
            *out = s;
        }
    }
    h5_close(&space, H5Sclose);
    h5_close(&type, H5Tclose);
    h5_close(&a, H5Aclose);
    return st;
}

/* Reads a 1-D dataset of exactly n elements of the float class with the given element size.
 * With buf NULL it reads into scratch memory (verification). */
static ob_status read_dataset(hid_t f, const char *name, hid_t mem_type, void *buf, size_t n,
                              const char *path, ob_err *err)
{
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) {
        H5Eclear2(H5E_DEFAULT);
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: dataset %s is missing or unreadable", path, name);
    }
    hid_t space = H5Dget_space(ds), type = H5Dget_type(ds);
    hsize_t dims[2] = {0, 0};
    int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    if (rank == 1) H5Sget_simple_extent_dims(space, dims, NULL);
    ob_status st = OB_OK;
    void *scratch = NULL;
    if (rank != 1 || dims[0] != (hsize_t)n) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: dataset %s has shape (%llu), expected (%zu)", path,
                    name, (unsigned long long)dims[0], n);
    } else if (type < 0 || H5Tget_class(type) != H5T_FLOAT ||
               H5Tget_size(type) != H5Tget_size(mem_type)) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: dataset %s has the wrong element type", path, name);
    } else {
        if (!buf) buf = scratch = malloc(n * H5Tget_size(mem_type));
        if (!buf)
            st = OB_ERR(err, OB_ERR_NOMEM, "%s: reading %s", path, name);
        else if (H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
            st = H5_FAIL(err, OB_ERR_CORRUPT, name, path);
    }
    free(scratch);
    h5_close(&type, H5Tclose);
    h5_close(&space, H5Sclose);
    h5_close(&ds, H5Dclose);
    return st;
}

/* Attributes both kinds of file carry; checks magic and version. */
static ob_status read_common_attrs(hid_t f, ob_ckpt_meta *m, const char *path, ob_err *err)
{
    char *magic = NULL;
    ob_status st = read_str(f, "magic", &magic, path, err);
    if (st != OB_OK) return st;
    int ok = !strcmp(magic, OB_CKPT_MAGIC);
    free(magic);
    if (!ok) return OB_ERR(err, OB_ERR_CORRUPT, "%s: not a onebit checkpoint (bad magic)", path);
    int64_t version, step, world;
    if ((st = read_i64(f, "format_version", &version, path, err))) return st;
    if (version != OB_CKPT_FORMAT_VERSION)
        return OB_ERR(err, version > OB_CKPT_FORMAT_VERSION ? OB_ERR_UNSUPPORTED : OB_ERR_CORRUPT,
                      "%s: format version %" PRId64 ", this build reads version %d", path, version,
                      OB_CKPT_FORMAT_VERSION);
    if ((st = read_i64(f, "step", &step, path, err)) ||
        (st = read_i64(f, "world_size", &world, path, err)) ||
        (st = read_u64(f, "num_params", &m->num_params, path, err)) ||
        (st = read_u64(f, "padded_size", &m->padded_size, path, err)) ||
        (st = read_u64(f, "chunk_size", &m->chunk_size, path, err)))
        return st;
    if (step < 0 || step > 999999999 || world < 1 || world > 1000000)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: step %" PRId64 " or world size %" PRId64 " out of range", path, step,
                      world);
    m->format_version = (uint32_t)version;
    m->step = (long)step;
    m->world_size = (int)world;
    return OB_OK;
}

/* Size rules every valid checkpoint satisfies, in arithmetic that cannot wrap: d <= 2^40, a
 * block of at most 2^30 elements, D = N C exactly, C a multiple of B, and no more padding than
 * rounding d up to a multiple of N B adds. */
static ob_status check_sizes(const ob_ckpt_meta *m, const char *path, ob_err *err)
{
    if (m->num_params == 0 || m->num_params > ((uint64_t)1 << 40))
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: num_params %" PRIu64 " out of range", path,
                      m->num_params);
    if (m->padded_size == 0) {
        if (m->chunk_size != 0)
            return OB_ERR(err, OB_ERR_CORRUPT, "%s: chunk_size without padded_size", path);
        return OB_OK;
    }
    uint64_t world = (uint64_t)m->world_size; /* 1 .. 10^6, checked by the caller */
    int ok = m->padded_size >= m->num_params && m->block_size > 0 &&
             m->block_size <= ((uint64_t)1 << 30) && m->padded_size % world == 0 &&
             m->padded_size / world == m->chunk_size && m->chunk_size % m->block_size == 0 &&
             m->padded_size - m->num_params < world * m->block_size; /* < 2^50: no wrap */
    if (!ok)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: inconsistent sizes d %" PRIu64 ", D %" PRIu64 ", C %" PRIu64
                      ", B %" PRIu64 ", world %d",
                      path, m->num_params, m->padded_size, m->chunk_size, m->block_size,
                      m->world_size);
    return OB_OK;
}

static ob_status history_len(hid_t f, size_t *len, const char *path, ob_err *err);

static ob_status read_meta_file(hid_t f, ob_ckpt_meta *m, char **spec_json, const char *path,
                                ob_err *err)
{
    memset(m, 0, sizeof *m);
    int64_t phase, freeze;
    ob_status st;
    if ((st = read_common_attrs(f, m, path, err)) ||
        (st = read_i64(f, "phase", &phase, path, err)) ||
        (st = read_i64(f, "freeze_step", &freeze, path, err)) ||
        (st = read_u64(f, "block_size", &m->block_size, path, err)) ||
        (st = read_u64(f, "seed", &m->seed, path, err)) ||
        (st = read_f64(f, "last_ratio", &m->last_ratio, path, err)) ||
        (st = read_f64(f, "last_norm", &m->last_norm, path, err)) ||
        (st = read_u64(f, "bytes_sent", &m->bytes_sent, path, err)) ||
        (st = read_u64(f, "bytes_warmup", &m->bytes_warmup, path, err)) ||
        (st = read_u64(f, "bytes_compression", &m->bytes_compression, path, err)) ||
        (st = read_f64(f, "lr", &m->lr, path, err)) ||
        (st = read_f64(f, "train_loss", &m->train_loss, path, err)) ||
        (st = read_f64(f, "wall_seconds", &m->wall_seconds, path, err)) ||
        (st = read_u64(f, "loader_epoch", &m->loader_epoch, path, err)) ||
        (st = read_u64(f, "loader_index", &m->loader_index, path, err)) ||
        (st = read_attr(f, "loader_rng", H5T_NATIVE_UINT64, m->loader_rng, 4, path, err)))
        return st;
    /* Optional (checkpoints written before warm starts were re-estimated have neither). */
    int64_t warm = 0, refit_end = 0, rollbacks = 0, local = 0, rpn = 1;
    if ((H5Aexists(f, "ranks_per_node") > 0 &&
         (st = read_i64(f, "ranks_per_node", &rpn, path, err))) ||
        (H5Aexists(f, "local_moments") > 0 &&
         (st = read_i64(f, "local_moments", &local, path, err))) ||
        (H5Aexists(f, "warm_start") > 0 && (st = read_i64(f, "warm_start", &warm, path, err))) ||
        (H5Aexists(f, "refit_end") > 0 && (st = read_i64(f, "refit_end", &refit_end, path, err))) ||
        (H5Aexists(f, "rollbacks") > 0 && (st = read_i64(f, "rollbacks", &rollbacks, path, err))))
        return st;
    if (warm < 0 || warm > 5 || refit_end < 0 || refit_end > INT32_MAX || rollbacks < 0 ||
        rollbacks > 1000 || local < 0 || local > 1 || rpn < 1 || rpn > 4096 ||
        m->world_size % rpn != 0)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: warm start state %" PRId64 " / refit end %" PRId64
                      " / rollbacks %" PRId64 " / local moments %" PRId64
                      " / ranks a node %" PRId64,
                      path, warm, refit_end, rollbacks, local, rpn);
    m->local_moments = (int)local;
    m->ranks_per_node = (int)rpn;
    m->rollbacks = (int)rollbacks;
    m->warm_start = (int)warm;
    /* Optional (written since a refit's freeze takes the source's factor): in (0, 1]. */
    m->refit_scale = 1.0;
    if (H5Aexists(f, "refit_scale") > 0 &&
        (st = read_f64(f, "refit_scale", &m->refit_scale, path, err)))
        return st;
    if (!(m->refit_scale > 0.0 && m->refit_scale <= 1.0))
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: refit scale %g outside (0, 1]", path,
                      m->refit_scale);
    /* Optional too (written since the guard watches the loss's rise): NaN or a finite loss >= 0. */
    static const char *const tracker[] = {"loss_ema", "loss_at_freeze", "loss_best"};
    double *tv[] = {&m->loss_ema, &m->loss_at_freeze, &m->loss_best};
    for (int i = 0; i < 3; i++) {
        *tv[i] = NAN;
        if (H5Aexists(f, tracker[i]) > 0 && (st = read_f64(f, tracker[i], tv[i], path, err)))
            return st;
        if (!isnan(*tv[i]) && !(*tv[i] >= 0.0 && isfinite(*tv[i])))
            return OB_ERR(err, OB_ERR_CORRUPT, "%s: %s %g is not a loss", path, tracker[i],
                          *tv[i]);
    }
    m->refit_end = (long)refit_end;
    if (phase < 0 || phase > 1 || freeze < -1 || freeze > m->step)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: phase %" PRId64 " / freeze step %" PRId64 " do not fit step %ld", path,
                      phase, freeze, m->step);
    m->phase = (int)phase;
    m->freeze_step = (long)freeze;
    size_t hist;
    if ((st = check_sizes(m, path, err)) || (st = history_len(f, &hist, path, err))) return st;
    m->v_norm_history_len = hist;
    if (spec_json) return read_str(f, "spec_json", spec_json, path, err);
    return OB_OK;
}

ob_status ob_ckpt_read_meta(const char *dir, ob_ckpt_meta *meta, char **spec_json, ob_err *err)
{
    h5_quiet();
    if (spec_json) *spec_json = NULL;
    char path[OB_CKPT_PATH_LEN];
    ob_status st = ob__ckpt_join(path, dir, OB_CKPT_STATE_FILE, err);
    if (st != OB_OK) return st;
    hid_t f;
    if ((st = open_file(path, &f, err)) != OB_OK) return st;
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
    h5_close(&space, H5Sclose);
    h5_close(&ds, H5Dclose);
    if (n < 0 || n > (1 << 24)) return H5_FAIL(err, OB_ERR_CORRUPT, "v_norm_history", path);
    *len = (size_t)n;
    return OB_OK;
}

static ob_status read_state_arrays(hid_t f, const ob_ckpt_meta *m, const ob_ckpt_arrays *a,
                                   const char *path, ob_err *err)
{
    size_t d = (size_t)m->num_params, hist;
    ob_status st;
    if ((st = read_dataset(f, "/model/params", H5T_NATIVE_FLOAT, a ? a->params : NULL, d, path,
                           err)) ||
        (st = read_dataset(f, "/optim/exp_avg", H5T_NATIVE_FLOAT, a ? a->exp_avg : NULL, d, path,
                           err)) ||
        (st = read_dataset(f, "/optim/exp_avg_sq", H5T_NATIVE_FLOAT, a ? a->exp_avg_sq : NULL, d,
                           path, err)) ||
        (st = history_len(f, &hist, path, err)))
        return st;
    if (a && a->v_norm_history && a->v_norm_history_len != hist)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: freeze-detector history of %zu entries, this run needs %zu", path, hist,
                      a->v_norm_history_len);
    if (hist > 0)
        st = read_dataset(f, "/optim/v_norm_history", H5T_NATIVE_DOUBLE,
                          a ? a->v_norm_history : NULL, hist, path, err);
    return st;
}

ob_status ob_ckpt_read_state(const char *dir, const ob_ckpt_meta *meta, const ob_ckpt_arrays *a,
                             ob_err *err)
{
    h5_quiet();
    char path[OB_CKPT_PATH_LEN];
    ob_status st = ob__ckpt_join(path, dir, OB_CKPT_STATE_FILE, err);
    if (st != OB_OK) return st;
    hid_t f;
    if ((st = open_file(path, &f, err)) != OB_OK) return st;
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
    h5_close(&mt, H5Tclose);
    h5_close(&type, H5Tclose);
    h5_close(&space, H5Sclose);
    h5_close(&ds, H5Dclose);
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
    h5_quiet();
    *out = NULL;
    *n = 0;
    char path[OB_CKPT_PATH_LEN];
    ob_status st = ob__ckpt_join(path, dir, OB_CKPT_STATE_FILE, err);
    if (st != OB_OK) return st;
    hid_t f;
    if ((st = open_file(path, &f, err)) != OB_OK) return st;
    st = read_tensors_file(f, meta->num_params, out, n, path, err);
    H5Fclose(f);
    return st;
}

/* Opens rank file `rank` of the checkpoint and checks it belongs to it (step, sizes, rank). */
static ob_status open_rank(const char *dir, const ob_ckpt_meta *m, int rank, char *path, hid_t *out,
                           ob_err *err)
{
    hid_t f;
    ob_status st = rank_path(path, dir, rank, err);
    if (st == OB_OK) st = open_file(path, &f, err);
    if (st != OB_OK) return st;
    ob_ckpt_meta r;
    memset(&r, 0, sizeof r);
    int64_t file_rank = -1;
    st = read_common_attrs(f, &r, path, err);
    if (st == OB_OK) st = read_i64(f, "rank", &file_rank, path, err);
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
    h5_close(&type, H5Tclose);
    h5_close(&space, H5Sclose);
    h5_close(&ds, H5Dclose);
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
        ((st = read_dataset(f, LOCAL_M_DATASET, H5T_NATIVE_FLOAT, NULL, (size_t)m->num_params,
                            path, err)) ||
         (st = read_dataset(f, LOCAL_V_DATASET, H5T_NATIVE_FLOAT, NULL, (size_t)m->num_params,
                            path, err)))) {
        H5Fclose(f);
        return st;
    }
    if (m->padded_size > 0) {
        st = read_dataset(f, "/optim/worker_error", H5T_NATIVE_FLOAT, we, (size_t)m->padded_size,
                          path, err);
        if (st == OB_OK)
            st = read_dataset(f, "/optim/server_error", H5T_NATIVE_FLOAT, se, (size_t)m->chunk_size,
                              path, err);
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

ob_status ob_ckpt_verify(const char *dir, ob_ckpt_meta *meta, ob_err *err)
{
    h5_quiet();
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
    layout first = {NULL, 0}; /* rank 0's: the others must agree */
    for (int r = 0; st == OB_OK && r < m.world_size; r++)
        st = read_rank_arrays(dir, &m, r, NULL, NULL, r > 0 ? &first : NULL, r > 0 ? NULL : &first,
                              err);
    layout_free(&first);
    if (st == OB_OK && meta) *meta = m;
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
    h5_quiet();
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

ob_status ob_ckpt_read_local_moments(const char *dir, const ob_ckpt_meta *m, int rank,
                                     int world_size, float *local_m, float *local_v, ob_err *err)
{
    h5_quiet();
    if (!m->local_moments)
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: the checkpoint holds no per-rank moments", dir);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "per-rank moments: rank %d of %d", rank,
                      world_size);
    size_t d = (size_t)m->num_params;
    char path[OB_CKPT_PATH_LEN];
    hid_t f;
    ob_status st;
    if (world_size == m->world_size) { /* this rank's own, bit for bit */
        if ((st = open_rank(dir, m, rank, path, &f, err)) != OB_OK) return st;
        st = read_dataset(f, LOCAL_M_DATASET, H5T_NATIVE_FLOAT, local_m, d, path, err);
        if (st == OB_OK)
            st = read_dataset(f, LOCAL_V_DATASET, H5T_NATIVE_FLOAT, local_v, d, path, err);
        H5Fclose(f);
        return st;
    }
    /* Another world: the mean of the old ranks' (in rank order), which keeps |m| <= v where
     * every rank's did. */
    double *sum = calloc(2 * d, sizeof *sum);
    float *bm = malloc(d * sizeof *bm), *bv = malloc(d * sizeof *bv);
    st = sum && bm && bv ? OB_OK : OB_ERR(err, OB_ERR_NOMEM, "per-rank moments of %zu", d);
    for (int r = 0; st == OB_OK && r < m->world_size; r++) {
        if ((st = open_rank(dir, m, r, path, &f, err)) != OB_OK) break;
        st = read_dataset(f, LOCAL_M_DATASET, H5T_NATIVE_FLOAT, bm, d, path, err);
        if (st == OB_OK) st = read_dataset(f, LOCAL_V_DATASET, H5T_NATIVE_FLOAT, bv, d, path, err);
        H5Fclose(f);
        for (size_t i = 0; st == OB_OK && i < d; i++) {
            sum[i] += (double)bm[i];
            sum[d + i] += (double)bv[i];
        }
    }
    for (size_t i = 0; st == OB_OK && i < d; i++) {
        local_m[i] = (float)(sum[i] / (double)m->world_size);
        local_v[i] = (float)(sum[d + i] / (double)m->world_size);
    }
    free(sum);
    free(bm);
    free(bv);
    return st;
}
