/* HDF5 primitives of the checkpoint files (ckpt_h5io.h). */
#define _GNU_SOURCE /* sync_file_range */
#include "ckpt_h5io.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>

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
ob_status ob__ck_h5_fail(ob_err *err, ob_status code, const char *file, int line, const char *what,
                         const char *path)
{
    h5_first f = {{0}, {0}, 0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_first, &f);
    H5Eclear2(H5E_DEFAULT);
    if (f.have)
        return ob_err_set(err, code, file, line, "%s: %s: %s (in %s)", path, what, f.desc, f.func);
    return ob_err_set(err, code, file, line, "%s: %s failed", path, what);
}

/* HDF5 prints its error stack to stderr unless told not to; the setting is per thread in a
 * thread-safe build, so every entry point says it. */
void ob__ck_h5_quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void ob__ck_h5_close(hid_t *id, herr_t (*fn)(hid_t))
{
    if (*id >= 0) fn(*id);
    *id = H5I_INVALID_HID;
}

/* --- checksums ------------------------------------------------------------------------------- */

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t load32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t lane(uint64_t acc, uint64_t in)
{
    return rotl64(acc + in * P2, 31) * P1;
}

static uint64_t merge(uint64_t h, uint64_t v)
{
    return (h ^ lane(0, v)) * P1 + P4;
}

/* XXH64 with seed 0, over the bytes as they lie in memory (little-endian on the hosts onebit
 * runs on): four independent lanes over 32-byte stripes, so that it runs at memory speed. It is
 * taken in pieces (sum64_init, sum64_stripes over whole stripes, sum64_final over the last
 * bytes) so that a writer can hash each piece while it is in the cache. */
typedef struct sum64 {
    uint64_t v[4];
    uint64_t total; /* bytes taken so far */
} sum64;

static void sum64_init(sum64 *s)
{
    s->v[0] = P1 + P2;
    s->v[1] = P2;
    s->v[2] = 0;
    s->v[3] = 0 - P1;
    s->total = 0;
}

/* Takes the whole 32-byte stripes of p[0 .. n); returns the bytes taken (n rounded down). */
static size_t sum64_stripes(sum64 *s, const unsigned char *p, size_t n)
{
    uint64_t v1 = s->v[0], v2 = s->v[1], v3 = s->v[2], v4 = s->v[3];
    size_t k = n / 32 * 32;
    for (const unsigned char *q = p, *end = p + k; q < end; q += 32) {
        v1 = lane(v1, load64(q));
        v2 = lane(v2, load64(q + 8));
        v3 = lane(v3, load64(q + 16));
        v4 = lane(v4, load64(q + 24));
    }
    s->v[0] = v1, s->v[1] = v2, s->v[2] = v3, s->v[3] = v4;
    s->total += k;
    return k;
}

/* The digest, given the last n (< 32) bytes at p. */
static uint64_t sum64_final(const sum64 *s, const unsigned char *p, size_t n)
{
    const unsigned char *end = p + n;
    uint64_t h, v1 = s->v[0], v2 = s->v[1], v3 = s->v[2], v4 = s->v[3];
    if (s->total >= 32) {
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = merge(merge(merge(merge(h, v1), v2), v3), v4);
    } else {
        h = P5;
    }
    h += s->total + (uint64_t)n;
    for (; p + 8 <= end; p += 8)
        h = rotl64(h ^ lane(0, load64(p)), 27) * P1 + P4;
    if (p + 4 <= end) {
        h = rotl64(h ^ ((uint64_t)load32(p) * P1), 23) * P2 + P3;
        p += 4;
    }
    for (; p < end; p++)
        h = rotl64(h ^ (*p * P5), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
}

uint64_t ob__ck_sum64(const void *data, size_t n)
{
    sum64 s;
    sum64_init(&s);
    if (n == 0) return sum64_final(&s, data, 0);
    size_t k = sum64_stripes(&s, data, n);
    return sum64_final(&s, (const unsigned char *)data + k, n - k);
}

/* --- writing ---------------------------------------------------------------------------------- */

hid_t ob__ck_create_file(const char *path, ob_err *err)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    hid_t f = H5I_INVALID_HID;
    if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) >= 0)
        f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    if (f < 0) H5_FAIL(err, OB_ERR_IO, "create", path);
    if (fapl >= 0) H5Pclose(fapl);
    return f;
}

ob_status ob__ck_write_attr(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
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

ob_status ob__ck_attr_i64(hid_t loc, const char *name, int64_t v, const char *path, ob_err *err)
{
    return ob__ck_write_attr(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, 1, path, err);
}

ob_status ob__ck_attr_u64(hid_t loc, const char *name, uint64_t v, const char *path, ob_err *err)
{
    return ob__ck_write_attr(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v, 1, path, err);
}

ob_status ob__ck_attr_f64(hid_t loc, const char *name, double v, const char *path, ob_err *err)
{
    return ob__ck_write_attr(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, 1, path, err);
}

ob_status ob__ck_attr_str(hid_t loc, const char *name, const char *s, const char *path, ob_err *err)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0 || H5Tset_size(t, strlen(s) + 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0) {
        if (t >= 0) H5Tclose(t);
        return H5_FAIL(err, OB_ERR_IO, name, path);
    }
    ob_status st = ob__ck_write_attr(loc, name, t, t, s, 1, path, err);
    H5Tclose(t);
    return st;
}

/* A 1-D dataset of n elements, chunked, with the Fletcher32 checksum filter. */
ob_status ob__ck_write_dataset(hid_t f, const char *name, hid_t file_type, hid_t mem_type,
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
    ob__ck_h5_close(&ds, H5Dclose);
    ob__ck_h5_close(&lcpl, H5Pclose);
    ob__ck_h5_close(&dcpl, H5Pclose);
    ob__ck_h5_close(&space, H5Sclose);
    if (rc < 0) return H5_FAIL(err, OB_ERR_IO, name, path);
    return OB_OK;
}

/* The piece an array is written in: small enough that it is still in the cache when the
 * write copies it out after the hash has read it, large enough that HDF5's cost per call does
 * not count. A multiple of 32 bytes (the hash's stripe). */
#define WRITE_PIECE ((size_t)1 << 20)

/* The file's descriptor (HDF5's default sec2 driver), or -1. */
static int file_fd(hid_t f)
{
    void *handle = NULL;
    if (H5Fget_vfd_handle(f, H5P_DEFAULT, &handle) < 0 || !handle) {
        H5Eclear2(H5E_DEFAULT);
        return -1;
    }
    return *(int *)handle;
}

/* Writes bytes [off, off + len) of the dataset from p. */
static herr_t write_piece(hid_t ds, hid_t file_space, hid_t mem_type, const void *p, hsize_t off,
                          hsize_t len)
{
    hid_t mem = H5Screate_simple(1, &len, NULL);
    herr_t rc = -1;
    if (mem >= 0 && H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &off, NULL, &len, NULL) >= 0)
        rc = H5Dwrite(ds, mem_type, mem, file_space, H5P_DEFAULT, p);
    if (mem >= 0) H5Sclose(mem);
    return rc;
}

/* A 1-D array of n numbers, contiguous, with the XXH64 of its bytes in the attribute
 * CHECKSUM_ATTR. It goes out in pieces straight from the caller's buffer (no filter copies),
 * each hashed just before it is written, so the array is read from memory once; after each
 * piece the kernel is told to start writing the file out (Linux), so that the disk works
 * while the next pieces are copied and the final fsync has little left. */
ob_status ob__ck_write_array(hid_t f, const char *name, hid_t file_type, hid_t mem_type,
                             const void *data, size_t n, const char *path, ob_err *err)
{
    hsize_t dims = n;
    size_t size = H5Tget_size(mem_type);
    hid_t space = H5Screate_simple(1, &dims, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t ds = H5I_INVALID_HID;
    herr_t rc = -1;
    if (space >= 0 && lcpl >= 0 && H5Pset_create_intermediate_group(lcpl, 1) >= 0)
        ds = H5Dcreate2(f, name, file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    sum64 sum;
    sum64_init(&sum);
    const unsigned char *p = data;
    size_t per = size > 0 ? WRITE_PIECE / size : 0, done = 0;
    int fd = file_fd(f);
    if (ds >= 0 && per > 0) rc = 0;
    while (rc >= 0 && done < n) {
        size_t k = n - done < per ? n - done : per;
        sum64_stripes(&sum, p + done * size, k * size);
        rc = write_piece(ds, space, mem_type, p + done * size, done, k);
#ifdef SYNC_FILE_RANGE_WRITE
        if (rc >= 0 && fd >= 0) (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
        done += k;
    }
    (void)fd;
    ob_status st = rc < 0 ? H5_FAIL(err, OB_ERR_IO, name, path) : OB_OK;
    if (st == OB_OK) {
        size_t bytes = n * size, k = (size_t)sum.total;
        st = ob__ck_attr_u64(ds, CHECKSUM_ATTR, sum64_final(&sum, k < bytes ? p + k : p, bytes - k),
                             path, err);
    }
    ob__ck_h5_close(&ds, H5Dclose);
    ob__ck_h5_close(&lcpl, H5Pclose);
    ob__ck_h5_close(&space, H5Sclose);
    return st;
}

/* Closes the file (flushing it) and fsyncs it. */
ob_status ob__ck_finish_file(hid_t *f, const char *path, ob_err *err)
{
    herr_t rc = H5Fclose(*f);
    *f = H5I_INVALID_HID;
    if (rc < 0) return H5_FAIL(err, OB_ERR_IO, "close", path);
    return ob__ckpt_fsync_path(path, 0, err);
}

ob_status ob__ck_write_common_attrs(hid_t f, const ob_ckpt_meta *m, const char *path, ob_err *err)
{
    ob_status st;
    if ((st = ob__ck_attr_str(f, "magic", OB_CKPT_MAGIC, path, err)) ||
        (st = ob__ck_attr_i64(f, "format_version", OB_CKPT_FORMAT_VERSION, path, err)) ||
        (st = ob__ck_attr_i64(f, "step", m->step, path, err)) ||
        (st = ob__ck_attr_i64(f, "world_size", m->world_size, path, err)) ||
        (st = ob__ck_attr_u64(f, "num_params", m->num_params, path, err)) ||
        (st = ob__ck_attr_u64(f, "padded_size", m->padded_size, path, err)) ||
        (st = ob__ck_attr_u64(f, "chunk_size", m->chunk_size, path, err)))
        return st;
    return OB_OK;
}

ob_status ob__ck_open_file(const char *path, hid_t *out, ob_err *err)
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
ob_status ob__ck_read_attr(hid_t loc, const char *name, hid_t mem_type, void *val, hsize_t count,
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
    ob__ck_h5_close(&type, H5Tclose);
    ob__ck_h5_close(&space, H5Sclose);
    ob__ck_h5_close(&a, H5Aclose);
    return st;
}

ob_status ob__ck_read_i64(hid_t loc, const char *name, int64_t *v, const char *path, ob_err *err)
{
    return ob__ck_read_attr(loc, name, H5T_NATIVE_INT64, v, 1, path, err);
}

ob_status ob__ck_read_u64(hid_t loc, const char *name, uint64_t *v, const char *path, ob_err *err)
{
    return ob__ck_read_attr(loc, name, H5T_NATIVE_UINT64, v, 1, path, err);
}

ob_status ob__ck_read_f64(hid_t loc, const char *name, double *v, const char *path, ob_err *err)
{
    return ob__ck_read_attr(loc, name, H5T_NATIVE_DOUBLE, v, 1, path, err);
}

/* Longest string attribute a checkpoint has reason to carry (the job spec). */
#define OB_CKPT_MAX_STR ((size_t)1 << 24)

/* Reads a string attribute: one fixed-length string (a scalar dataspace) of at most
 * OB_CKPT_MAX_STR bytes. Type, class, dataspace and size are checked before anything is
 * allocated or read. *out is malloc'd and terminated. */
ob_status ob__ck_read_str(hid_t loc, const char *name, char **out, const char *path, ob_err *err)
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
    ob__ck_h5_close(&space, H5Sclose);
    ob__ck_h5_close(&type, H5Tclose);
    ob__ck_h5_close(&a, H5Aclose);
    return st;
}

/* How the dataset's data is checked: the XXH64 in CHECKSUM_ATTR (*want), or (checkpoints
 * written before it) HDF5's Fletcher32 filter, which a read applies by itself. A dataset with
 * neither is refused: nothing would tell its damage. */
static ob_status sum_kind(hid_t ds, const char *name, int *xxh, uint64_t *want, const char *path,
                          ob_err *err)
{
    *xxh = 0;
    if (H5Aexists(ds, CHECKSUM_ATTR) > 0) {
        *xxh = 1;
        return ob__ck_read_u64(ds, CHECKSUM_ATTR, want, path, err);
    }
    H5Eclear2(H5E_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(ds);
    unsigned flags = 0;
    size_t nelem = 0;
    unsigned int cd = 0;
    int fletcher = dcpl >= 0 && H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelem,
                                                     &cd, 0, NULL, NULL) >= 0;
    H5Eclear2(H5E_DEFAULT);
    ob__ck_h5_close(&dcpl, H5Pclose);
    if (!fletcher)
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: dataset %s carries no checksum", path, name);
    return OB_OK;
}

static ob_status sum_mismatch(const char *name, uint64_t got, uint64_t want, const char *path,
                              ob_err *err)
{
    return OB_ERR(err, OB_ERR_CORRUPT,
                  "%s: %s: data error detected by its checksum (XXH64 %016" PRIx64
                  ", stored %016" PRIx64 ")",
                  path, name, got, want);
}

/* Reads the dataset's n elements of size bytes in pieces through a small buffer and checks
 * their XXH64 against want (verification: nothing is kept, nothing large is allocated). */
static ob_status verify_pieces(hid_t ds, hid_t space, hid_t mem_type, size_t n, size_t size,
                               uint64_t want, const char *name, const char *path, ob_err *err)
{
    size_t per = WRITE_PIECE / size;
    unsigned char *piece = malloc(per * size);
    if (!piece) return OB_ERR(err, OB_ERR_NOMEM, "%s: verifying %s", path, name);
    sum64 sum;
    sum64_init(&sum);
    unsigned char tail[32];
    size_t ntail = 0; /* bytes of the last piece past its whole stripes: the final piece only */
    ob_status st = OB_OK;
    for (size_t done = 0; done < n && st == OB_OK; done += per) {
        hsize_t off = done, len = n - done < per ? n - done : per;
        hid_t mem = H5Screate_simple(1, &len, NULL);
        herr_t rc =
            mem >= 0 && H5Sselect_hyperslab(space, H5S_SELECT_SET, &off, NULL, &len, NULL) >= 0
                ? H5Dread(ds, mem_type, mem, space, H5P_DEFAULT, piece)
                : -1;
        if (mem >= 0) H5Sclose(mem);
        if (rc < 0) {
            st = H5_FAIL(err, OB_ERR_CORRUPT, name, path);
            break;
        }
        size_t bytes = (size_t)len * size, k = sum64_stripes(&sum, piece, bytes);
        ntail = bytes - k; /* nonzero only in the last piece: a full piece is whole stripes */
        memcpy(tail, piece + k, ntail);
    }
    free(piece);
    if (st != OB_OK) return st;
    uint64_t got = sum64_final(&sum, tail, ntail);
    return got == want ? OB_OK : sum_mismatch(name, got, want, path, err);
}

/* Reads a 1-D dataset of exactly n elements of the float class with the given element size,
 * and checks its checksum. With buf NULL it only verifies: an XXH64 dataset is read through a
 * small buffer, an older Fletcher32 one into scratch memory. */
ob_status ob__ck_read_dataset(hid_t f, const char *name, hid_t mem_type, void *buf, size_t n,
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
    size_t size = H5Tget_size(mem_type);
    int xxh = 0;
    uint64_t want = 0;
    if (rank != 1 || dims[0] != (hsize_t)n) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: dataset %s has shape (%llu), expected (%zu)", path,
                    name, (unsigned long long)dims[0], n);
    } else if (type < 0 || H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != size) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: dataset %s has the wrong element type", path, name);
    } else if ((st = sum_kind(ds, name, &xxh, &want, path, err)) != OB_OK) {
        /* no usable checksum */
    } else if (!buf && xxh) {
        st = verify_pieces(ds, space, mem_type, n, size, want, name, path, err);
    } else {
        if (!buf) buf = scratch = malloc(n ? n * size : 1);
        if (!buf)
            st = OB_ERR(err, OB_ERR_NOMEM, "%s: reading %s", path, name);
        else if (n > 0 && H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
            st = H5_FAIL(err, OB_ERR_CORRUPT, name, path);
        else if (xxh) {
            uint64_t got = ob__ck_sum64(buf, n * size);
            if (got != want) st = sum_mismatch(name, got, want, path, err);
        }
    }
    free(scratch);
    ob__ck_h5_close(&type, H5Tclose);
    ob__ck_h5_close(&space, H5Sclose);
    ob__ck_h5_close(&ds, H5Dclose);
    return st;
}

/* Attributes both kinds of file carry; checks magic and version. */
ob_status ob__ck_read_common_attrs(hid_t f, ob_ckpt_meta *m, const char *path, ob_err *err)
{
    char *magic = NULL;
    ob_status st = ob__ck_read_str(f, "magic", &magic, path, err);
    if (st != OB_OK) return st;
    int ok = !strcmp(magic, OB_CKPT_MAGIC);
    free(magic);
    if (!ok) return OB_ERR(err, OB_ERR_CORRUPT, "%s: not a onebit checkpoint (bad magic)", path);
    int64_t version, step, world;
    if ((st = ob__ck_read_i64(f, "format_version", &version, path, err))) return st;
    if (version != OB_CKPT_FORMAT_VERSION)
        return OB_ERR(err, version > OB_CKPT_FORMAT_VERSION ? OB_ERR_UNSUPPORTED : OB_ERR_CORRUPT,
                      "%s: format version %" PRId64 ", this build reads version %d", path, version,
                      OB_CKPT_FORMAT_VERSION);
    if ((st = ob__ck_read_i64(f, "step", &step, path, err)) ||
        (st = ob__ck_read_i64(f, "world_size", &world, path, err)) ||
        (st = ob__ck_read_u64(f, "num_params", &m->num_params, path, err)) ||
        (st = ob__ck_read_u64(f, "padded_size", &m->padded_size, path, err)) ||
        (st = ob__ck_read_u64(f, "chunk_size", &m->chunk_size, path, err)))
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
ob_status ob__ck_check_sizes(const ob_ckpt_meta *m, const char *path, ob_err *err)
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
