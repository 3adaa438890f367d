/* IDX image/label files (the MNIST format) into a classification dataset.
 *
 * zlib's gz* functions read gzip-compressed and plain files alike, so one path serves both.
 * Every header field comes from an untrusted file and is checked before it sizes anything;
 * pixel data is read into a buffer that grows as bytes arrive, so a forged or truncated header
 * fails as "truncated" instead of first allocating what it claims. Pixels stay bytes in memory
 * (a quarter of the floats) and become features through a 256-entry table when a loader copies
 * them into a batch. */
#include "data_internal.h"
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_IMAGES_MAGIC 0x00000803u /* unsigned bytes, 3 dimensions */
#define IDX_LABELS_MAGIC 0x00000801u /* unsigned bytes, 1 dimension */
/* rows * cols at most: far beyond any image set, far below any overflow. */
#define IDX_MAX_FEATURES (1u << 24)
#define IDX_READ_MAX (1u << 30) /* gzread takes an unsigned int length */
#define IDX_FIRST_CHUNK ((size_t)16 << 20)

void ob_idx_options_default(ob_idx_options *opts)
{
    opts->num_classes = 10;
    opts->norm = OB_FEATURES_STANDARDIZE;
}

/* Opens path for reading, telling a missing file (OB_ERR_NOT_FOUND) from an unreadable one. */
static ob_status idx_open(const char *path, gzFile *out, ob_err *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return OB_ERR(err, OB_ERR_NOT_FOUND, "%s: no such file", path);
        return OB_ERR(err, OB_ERR_IO, "%s: stat failed: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) return OB_ERR(err, OB_ERR_IO, "%s: not a regular file", path);
    gzFile gz = gzopen(path, "rb");
    if (!gz) return OB_ERR(err, OB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    gzbuffer(gz, 1u << 17); /* fewer, larger reads than the 8 KiB default */
    *out = gz;
    return OB_OK;
}

/* Reads exactly n bytes into buf. `what` names the part for messages; `total` and `before` (the
 * part's full size and the bytes of it already read) make a truncation message exact. */
static ob_status read_into(gzFile gz, const char *path, const char *what, uint8_t *buf, size_t n,
                           size_t total, size_t before, ob_err *err)
{
    size_t done = 0;
    while (done < n) {
        size_t want = n - done < IDX_READ_MAX ? n - done : IDX_READ_MAX;
        int r = gzread(gz, buf + done, (unsigned)want);
        if (r < 0) {
            int zerr = Z_OK;
            const char *msg = gzerror(gz, &zerr);
            if (zerr == Z_ERRNO)
                return OB_ERR(err, OB_ERR_IO, "%s: reading %s failed: %s", path, what,
                              strerror(errno));
            return OB_ERR(err, OB_ERR_CORRUPT, "%s: bad compressed data in %s: %s", path, what,
                          msg);
        }
        if (r == 0)
            return OB_ERR(err, OB_ERR_CORRUPT,
                          "%s: truncated: %s should be %zu bytes but the file ends after %zu", path,
                          what, total, before + done);
        done += (size_t)r;
    }
    return OB_OK;
}

/* Reads a len-byte payload into a new malloc'd buffer (*out, owned by the caller). */
static ob_status read_payload(gzFile gz, const char *path, const char *what, size_t len,
                              uint8_t **out, ob_err *err)
{
    size_t cap = len < IDX_FIRST_CHUNK ? len : IDX_FIRST_CHUNK;
    uint8_t *buf = malloc(cap);
    if (!buf) return OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory for %s", path, what);
    size_t done = 0;
    while (done < len) {
        if (done == cap) {
            size_t ncap = cap > len / 2 ? len : cap * 2;
            uint8_t *nbuf = realloc(buf, ncap);
            if (!nbuf) {
                free(buf);
                return OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory for %s (%zu bytes)", path, what,
                              len);
            }
            buf = nbuf;
            cap = ncap;
        }
        ob_status st = read_into(gz, path, what, buf + done, cap - done, len, done, err);
        if (st != OB_OK) {
            free(buf);
            return st;
        }
        done = cap;
    }
    /* The header says how much data there is; anything after it means the header is wrong. */
    if (gzgetc(gz) != -1) {
        free(buf);
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: trailing bytes after the %zu-byte %s", path, len,
                      what);
    }
    *out = buf;
    return OB_OK;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads the magic and the ndims dimensions of an IDX header into dims. */
static ob_status read_header(gzFile gz, const char *path, uint32_t magic, int ndims, uint32_t *dims,
                             ob_err *err)
{
    uint8_t h[16];
    size_t size = 4 + 4 * (size_t)ndims;
    ob_status st = read_into(gz, path, "the IDX header", h, 4, size, 0, err);
    if (st != OB_OK) return st;
    if (be32(h) != magic)
        return OB_ERR(err, OB_ERR_CORRUPT,
                      "%s: bad IDX magic 0x%08x, expected 0x%08x (unsigned-byte %s)", path, be32(h),
                      magic, ndims == 3 ? "images, 3 dimensions" : "labels, 1 dimension");
    st = read_into(gz, path, "the IDX header", h + 4, size - 4, size, 4, err);
    if (st != OB_OK) return st;
    for (int i = 0; i < ndims; i++) {
        dims[i] = be32(h + 4 + 4 * i);
        if (dims[i] == 0) return OB_ERR(err, OB_ERR_CORRUPT, "%s: dimension %d is 0", path, i);
    }
    return OB_OK;
}

/* One split: images and labels, checked against each other. On success *pix and *labels are
 * new malloc'd buffers owned by the caller. */
typedef struct idx_split {
    uint32_t n, rows, cols;
    uint8_t *pix;    /* (n, rows * cols) */
    uint8_t *labels; /* (n) */
} idx_split;

static ob_status load_split(const char *images, const char *labels, idx_split *out, ob_err *err)
{
    gzFile gi = NULL, gl = NULL;
    uint32_t dims[3] = {0, 0, 0}, nl = 0;
    ob_status st = idx_open(images, &gi, err);
    if (st != OB_OK) goto fail;
    st = idx_open(labels, &gl, err);
    if (st != OB_OK) goto fail;

    /* Both headers first: a count mismatch is reported before megabytes are read. */
    st = read_header(gi, images, IDX_IMAGES_MAGIC, 3, dims, err);
    if (st != OB_OK) goto fail;
    st = read_header(gl, labels, IDX_LABELS_MAGIC, 1, &nl, err);
    if (st != OB_OK) goto fail;
    if (nl != dims[0]) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s has %u images but %s has %u labels", images, dims[0],
                    labels, nl);
        goto fail;
    }
    uint64_t feat = (uint64_t)dims[1] * dims[2];
    if (feat > IDX_MAX_FEATURES || (uint64_t)dims[0] > SIZE_MAX / feat) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: implausible image size %u x %u x %u", images, dims[0],
                    dims[1], dims[2]);
        goto fail;
    }
    out->n = dims[0];
    out->rows = dims[1];
    out->cols = dims[2];
    st = read_payload(gi, images, "pixel data", (size_t)dims[0] * (size_t)feat, &out->pix, err);
    if (st != OB_OK) goto fail;
    st = read_payload(gl, labels, "label data", nl, &out->labels, err);
    if (st != OB_OK) goto fail;
    /* Closing a file opened for reading cannot lose data; its status carries nothing. */
    gzclose(gi);
    gzclose(gl);
    return OB_OK;

fail:
    free(out->pix);
    out->pix = NULL;
    if (gi) gzclose(gi);
    if (gl) gzclose(gl);
    return st;
}

/* Checks labels against num_classes (> 0) and widens them into a new int32 array. */
static ob_status take_labels(ob_dataset *ds, ob_split s, const uint8_t *labels, const char *path,
                             ob_err *err)
{
    for (size_t i = 0; i < ds->n[s]; i++)
        if (labels[i] >= ds->num_classes)
            return OB_ERR(err, OB_ERR_CORRUPT,
                          "%s: label %u of example %zu is out of range (num_classes = %d)", path,
                          labels[i], i, ds->num_classes);
    ds->label[s] = malloc(ds->n[s] * sizeof(int32_t));
    if (!ds->label[s]) return OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory for labels", path);
    for (size_t i = 0; i < ds->n[s]; i++)
        ds->label[s][i] = labels[i];
    return OB_OK;
}

/* Mean and standard deviation of pixel/255 over the train split, from a byte histogram (exact
 * sums, one pass), and the byte -> feature table. */
static void set_normalisation(ob_dataset *ds, ob_feature_norm norm)
{
    if (norm == OB_FEATURES_UNIT) {
        ds->mean = 0.0f;
        ds->std = 1.0f;
        for (int v = 0; v < 256; v++)
            ds->lut[v] = (float)(v / 255.0);
        return;
    }
    uint64_t hist[256] = {0};
    size_t count = ds->n[OB_SPLIT_TRAIN] * ds->input_dim;
    const uint8_t *p = ds->pix[OB_SPLIT_TRAIN];
    for (size_t i = 0; i < count; i++)
        hist[p[i]]++;
    double sum = 0.0;
    for (int v = 0; v < 256; v++)
        sum += (double)hist[v] * (v / 255.0);
    double mean = sum / (double)count, var = 0.0;
    for (int v = 0; v < 256; v++)
        var += (double)hist[v] * (v / 255.0 - mean) * (v / 255.0 - mean);
    double std = sqrt(var / (double)count);
    if (!(std > 1e-12)) std = 1.0; /* constant images: centre them, do not divide by 0 */
    ds->mean = (float)mean;
    ds->std = (float)std;
    for (int v = 0; v < 256; v++)
        ds->lut[v] = (float)((v / 255.0 - mean) / std);
}

static ob_status open_idx(ob_dataset **out, const char *source, const char *paths[4],
                          const ob_idx_options *opts, ob_err *err)
{
    idx_split sp[2];
    memset(sp, 0, sizeof sp);
    ob_status st;
    ob_dataset *ds = ob__dataset_alloc(OB_DATASET_CLASSIFICATION, source);
    if (!ds) return OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory", source);

    int nsplits = paths[2] ? 2 : 1;
    for (int s = 0; s < nsplits; s++) {
        st = load_split(paths[2 * s], paths[2 * s + 1], &sp[s], err);
        if (st != OB_OK) goto fail;
    }
    if (nsplits == 2 && (sp[1].rows != sp[0].rows || sp[1].cols != sp[0].cols)) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: images are %ux%u but the train images (%s) are %ux%u",
                    paths[2], sp[1].rows, sp[1].cols, paths[0], sp[0].rows, sp[0].cols);
        goto fail;
    }

    ds->input_dim = (size_t)sp[0].rows * sp[0].cols;
    ds->num_classes = opts->num_classes;
    if (ds->num_classes == 0) {
        int max = 0;
        for (int s = 0; s < nsplits; s++)
            for (size_t i = 0; i < sp[s].n; i++)
                if (sp[s].labels[i] > max) max = sp[s].labels[i];
        ds->num_classes = max + 1;
    }
    for (int s = 0; s < nsplits; s++) {
        ds->n[s] = sp[s].n;
        ds->pix[s] = sp[s].pix; /* taken */
        sp[s].pix = NULL;
        st = take_labels(ds, (ob_split)s, sp[s].labels, paths[2 * s + 1], err);
        if (st != OB_OK) goto fail;
    }
    set_normalisation(ds, opts->norm);
    for (int s = 0; s < 2; s++)
        free(sp[s].labels);
    *out = ds;
    return OB_OK;

fail:
    for (int s = 0; s < 2; s++) {
        free(sp[s].pix);
        free(sp[s].labels);
    }
    ob_dataset_destroy(ds);
    return st;
}

static ob_status check_options(const ob_idx_options *opts, ob_err *err)
{
    if (opts->num_classes < 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "idx: num_classes %d is negative",
                      opts->num_classes);
    if (opts->norm != OB_FEATURES_STANDARDIZE && opts->norm != OB_FEATURES_UNIT)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "idx: bad feature normalisation %d", opts->norm);
    return OB_OK;
}

ob_status ob_dataset_open_idx(ob_dataset **out, const char *train_images, const char *train_labels,
                              const char *eval_images, const char *eval_labels,
                              const ob_idx_options *opts, ob_err *err)
{
    if (!out) return OB_ERR(err, OB_ERR_INVALID_ARG, "idx: out is NULL");
    *out = NULL;
    if (!train_images || !train_labels)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "idx: the train image and label paths are required");
    if (!eval_images != !eval_labels)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "idx: give both eval paths (images and labels) or neither");
    ob_idx_options defaults;
    ob_idx_options_default(&defaults);
    if (!opts) opts = &defaults;
    ob_status st = check_options(opts, err);
    if (st != OB_OK) return st;
    const char *paths[4] = {train_images, train_labels, eval_images, eval_labels};
    return open_idx(out, train_images, paths, opts, err);
}

/* dir/name.gz when it exists, else dir/name when that exists (malloc'd into *out). */
static ob_status pick_path(const char *dir, const char *name, char **out, ob_err *err)
{
    size_t len = strlen(dir) + strlen(name) + 5;
    char *p = malloc(len);
    if (!p) return OB_ERR(err, OB_ERR_NOMEM, "idx: out of memory");
    struct stat sb;
    snprintf(p, len, "%s/%s.gz", dir, name);
    if (stat(p, &sb) != 0) {
        snprintf(p, len, "%s/%s", dir, name);
        if (stat(p, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
            ob_status st = OB_ERR(err, OB_ERR_NOT_FOUND, "%s: no such file (nor %s.gz)", p, name);
            free(p);
            return st;
        }
    }
    *out = p;
    return OB_OK;
}

ob_status ob_dataset_open_idx_dir(ob_dataset **out, const char *dir, const ob_idx_options *opts,
                                  ob_err *err)
{
    static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    if (!out) return OB_ERR(err, OB_ERR_INVALID_ARG, "idx: out is NULL");
    *out = NULL;
    if (!dir) dir = OB_FASHION_MNIST_DIR;
    ob_idx_options defaults;
    ob_idx_options_default(&defaults);
    if (!opts) opts = &defaults;
    ob_status st = check_options(opts, err);
    if (st != OB_OK) return st;

    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return OB_ERR(err, OB_ERR_NOT_FOUND, "%s: no such directory", dir);
    char *paths[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4 && st == OB_OK; i++)
        st = pick_path(dir, names[i], &paths[i], err);
    if (st == OB_OK) st = open_idx(out, dir, (const char **)paths, opts, err);
    for (int i = 0; i < 4; i++)
        free(paths[i]);
    return st;
}
