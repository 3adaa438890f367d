/* HDF5 primitives of the checkpoint files, shared by ckpt_h5.c (state.h5, verification) and
 * ckpt_rank.c (the rank files): error capture, attributes and datasets written and read with
 * every check a hostile file needs. Private to the checkpoint library. */
#ifndef ONEBIT_CKPT_H5IO_H
#define ONEBIT_CKPT_H5IO_H

#include "ckpt_internal.h"

#include <hdf5.h>
#include <stdint.h>

/* Chunks of at most 1 Mi elements: a checksum per 4 MiB (the small tables' Fletcher32). */
#define CHUNK_ELEMS ((hsize_t)1 << 20)

/* The attribute of an array dataset holding the XXH64 (seed 0) of its bytes. */
#define CHECKSUM_ATTR "xxh64"

/* XXH64 with seed 0 of n bytes. */
uint64_t ob__ck_sum64(const void *data, size_t n);

#define H5_FAIL(err, code, what, path)                                                             \
    ob__ck_h5_fail((err), (code), __FILE__, __LINE__, (what), (path))

/* Records a failed HDF5 call: what we were doing, on which path, and HDF5's innermost reason
 * (e.g. "data error detected by fletcher32 checksum"). */
ob_status ob__ck_h5_fail(ob_err *err, ob_status code, const char *file, int line, const char *what,
                         const char *path);

/* HDF5 prints its error stack to stderr unless told not to; the setting is per thread in a
 * thread-safe build, so every entry point says it. */
void ob__ck_h5_quiet(void);

void ob__ck_h5_close(hid_t *id, herr_t (*fn)(hid_t));

hid_t ob__ck_create_file(const char *path, ob_err *err);

ob_status ob__ck_write_attr(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                            const void *val, hsize_t count, const char *path, ob_err *err);

ob_status ob__ck_attr_i64(hid_t loc, const char *name, int64_t v, const char *path, ob_err *err);

ob_status ob__ck_attr_u64(hid_t loc, const char *name, uint64_t v, const char *path, ob_err *err);

ob_status ob__ck_attr_f64(hid_t loc, const char *name, double v, const char *path, ob_err *err);

ob_status ob__ck_attr_str(hid_t loc, const char *name, const char *s, const char *path,
                          ob_err *err);

/* A 1-D dataset of n elements, chunked, with the Fletcher32 checksum filter (the tables). */
ob_status ob__ck_write_dataset(hid_t f, const char *name, hid_t file_type, hid_t mem_type,
                               const void *data, size_t n, const char *path, ob_err *err);

/* A 1-D array of n numbers: contiguous, written in pieces from the caller's buffer, its XXH64
 * in CHECKSUM_ATTR. */
ob_status ob__ck_write_array(hid_t f, const char *name, hid_t file_type, hid_t mem_type,
                             const void *data, size_t n, const char *path, ob_err *err);

/* Closes the file (flushing it) and fsyncs it. */
ob_status ob__ck_finish_file(hid_t *f, const char *path, ob_err *err);

ob_status ob__ck_write_common_attrs(hid_t f, const ob_ckpt_meta *m, const char *path, ob_err *err);

ob_status ob__ck_open_file(const char *path, hid_t *out, ob_err *err);

/* Reads a numeric attribute of `count` elements (scalar when count is 1). */
ob_status ob__ck_read_attr(hid_t loc, const char *name, hid_t mem_type, void *val, hsize_t count,
                           const char *path, ob_err *err);

ob_status ob__ck_read_i64(hid_t loc, const char *name, int64_t *v, const char *path, ob_err *err);

ob_status ob__ck_read_u64(hid_t loc, const char *name, uint64_t *v, const char *path, ob_err *err);

ob_status ob__ck_read_f64(hid_t loc, const char *name, double *v, const char *path, ob_err *err);

/* Reads a string attribute: one fixed-length string (a scalar dataspace) of at most
 * OB_CKPT_MAX_STR bytes. Type, class, dataspace and size are checked before anything is
 * allocated or read. *out is malloc'd and terminated. */
ob_status ob__ck_read_str(hid_t loc, const char *name, char **out, const char *path, ob_err *err);

/* Reads a 1-D dataset of exactly n elements of the float class with the given element size and
 * checks it against its checksum (XXH64, or Fletcher32 in older files; a dataset with neither
 * is refused). With buf NULL it reads into scratch memory (verification). */
ob_status ob__ck_read_dataset(hid_t f, const char *name, hid_t mem_type, void *buf, size_t n,
                              const char *path, ob_err *err);

/* Attributes both kinds of file carry; checks magic and version. */
ob_status ob__ck_read_common_attrs(hid_t f, ob_ckpt_meta *m, const char *path, ob_err *err);

/* Size rules every valid checkpoint satisfies, in arithmetic that cannot wrap: d <= 2^40, a
 * block of at most 2^30 elements, D = N C exactly, C a multiple of B, and no more padding than
 * rounding d up to a multiple of N B adds. */
ob_status ob__ck_check_sizes(const ob_ckpt_meta *m, const char *path, ob_err *err);

#endif /* ONEBIT_CKPT_H5IO_H */
