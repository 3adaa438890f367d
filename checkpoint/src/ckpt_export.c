/* Export of a checkpoint's parameters as named tensors, for tools outside onebit:
 *
 *   npz          a zip archive (entries stored, not compressed) of one .npy file (format 1.0,
 *                '<f4', C order) per tensor: numpy.load(path)["layer0.weight"];
 *   safetensors  an 8-byte little-endian header size N, N bytes of JSON (padded with spaces to a
 *                multiple of 8) mapping each name to {"dtype":"F32","shape":[...],
 *                "data_offsets":[begin,end]}, then the tensors' bytes end to end.
 *
 * Names and shapes come from the checkpoint's tensor index (checked by ob_ckpt_read_tensors:
 * every slice lies inside the buffer, names are [A-Za-z0-9_.-]); they need no escaping in JSON
 * nor in zip entry names. The output is written to <out>.tmp, fsynced and renamed, then the
 * parent directory is fsynced: a reader never sees half a file. */
#include "ckpt_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One exported tensor: its name, shape, and a borrowed slice of a flat buffer. */
typedef struct xtensor {
    char name[OB_CKPT_TENSOR_NAME_LEN + 16]; /* prefix + index name */
    uint32_t ndim;
    uint64_t shape[OB_CKPT_TENSOR_MAX_DIM];
    const float *data;
    uint64_t numel;
} xtensor;

/* A file being written: the first failure is kept, later writes do nothing. */
typedef struct out_file {
    FILE *f;
    uint64_t pos; /* bytes written so far */
    int failed;
} out_file;

static void put(out_file *o, const void *p, size_t n)
{
    if (o->failed || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) o->failed = errno ? errno : EIO;
    o->pos += n;
}

static void put_u16(out_file *o, uint16_t v)
{
    unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    put(o, b, 2);
}

static void put_u32(out_file *o, uint32_t v)
{
    unsigned char b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    put(o, b, 4);
}

static void put_u64(out_file *o, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    put(o, b, 8);
}

/* --- a growable text buffer ------------------------------------------------------------------- */

typedef struct text {
    char *s;
    size_t len, cap;
    int nomem;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...)
{
    if (t->nomem) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->nomem = 1;
            return;
        }
        if (t->s && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap - t->len <= (size_t)n)
            cap *= 2;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->nomem = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

static void add_shape(text *t, const xtensor *x, const char *open, const char *close,
                      int trailing_comma)
{
    add(t, "%s", open);
    for (uint32_t k = 0; k < x->ndim; k++)
        add(t, "%s%" PRIu64, k ? ", " : "", x->shape[k]);
    if (trailing_comma && x->ndim == 1) add(t, ",");
    add(t, "%s", close);
}

/* --- npz -------------------------------------------------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

/* crc is the running value (start with 0). */
static uint32_t crc32_update(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* The .npy header (format 1.0) of x: magic, version, header length, the dict padded with spaces
 * and a newline so that the data starts at a multiple of 64 bytes. */
static ob_status npy_header(const xtensor *x, text *h, ob_err *err)
{
    text dict = {0};
    add(&dict, "{'descr': '<f4', 'fortran_order': False, 'shape': ");
    add_shape(&dict, x, "(", ")", 1);
    add(&dict, ", }");
    if (dict.nomem) {
        free(dict.s);
        return OB_ERR(err, OB_ERR_NOMEM, "npy header of %s", x->name);
    }
    size_t total = 10 + dict.len + 1; /* magic+version+len, dict, '\n' */
    size_t pad = (64 - total % 64) % 64;
    add(h, "\x93NUMPY%c%c%c%c", 1, 0, (int)((dict.len + pad + 1) & 0xff),
        (int)((dict.len + pad + 1) >> 8));
    /* %c of 0 writes a NUL: vsnprintf counts it, so the length is right. */
    add(h, "%s%*s\n", dict.s, (int)pad, "");
    free(dict.s);
    if (h->nomem) return OB_ERR(err, OB_ERR_NOMEM, "npy header of %s", x->name);
    return OB_OK;
}

static ob_status write_npz(out_file *o, const xtensor *xs, size_t n, ob_err *err)
{
    if (n > 0xffff)
        return OB_ERR(err, OB_ERR_UNSUPPORTED, "npz export of %zu tensors (at most 65535)", n);
    uint32_t *crc = calloc(n, sizeof *crc), *size = calloc(n, sizeof *size);
    uint32_t *at = calloc(n, sizeof *at);
    ob_status st = OB_OK;
    if (!crc || !size || !at) st = OB_ERR(err, OB_ERR_NOMEM, "npz directory of %zu entries", n);
    crc_init();
    for (size_t i = 0; st == OB_OK && i < n; i++) {
        text h = {0};
        char entry[sizeof xs[i].name + 8];
        snprintf(entry, sizeof entry, "%s.npy", xs[i].name);
        st = npy_header(&xs[i], &h, err);
        uint64_t bytes = h.len + xs[i].numel * sizeof(float); /* numel <= 2^40: no wrap */
        if (st == OB_OK && (bytes >= 0xffffffffu || o->pos >= 0xffffffffu - bytes - 256))
            st = OB_ERR(err, OB_ERR_UNSUPPORTED,
                        "npz export past 4 GiB (%s): use --format safetensors", xs[i].name);
        if (st == OB_OK) {
            at[i] = (uint32_t)o->pos;
            size[i] = (uint32_t)bytes;
            crc[i] = crc32_update(crc32_update(0, h.s, h.len), xs[i].data,
                                  (size_t)xs[i].numel * sizeof(float));
            put_u32(o, 0x04034b50); /* local file header */
            put_u16(o, 20);         /* version needed: 2.0 */
            put_u16(o, 0);          /* flags */
            put_u16(o, 0);          /* method: stored */
            put_u16(o, 0);          /* time 00:00 */
            put_u16(o, 0x21);       /* date 1980-01-01 */
            put_u32(o, crc[i]);
            put_u32(o, size[i]);
            put_u32(o, size[i]);
            put_u16(o, (uint16_t)strlen(entry));
            put_u16(o, 0); /* extra field */
            put(o, entry, strlen(entry));
            put(o, h.s, h.len);
            put(o, xs[i].data, (size_t)xs[i].numel * sizeof(float));
        }
        free(h.s);
    }
    uint64_t cd = o->pos;
    for (size_t i = 0; st == OB_OK && i < n; i++) {
        char entry[sizeof xs[i].name + 8];
        snprintf(entry, sizeof entry, "%s.npy", xs[i].name);
        put_u32(o, 0x02014b50); /* central directory header */
        put_u16(o, 20);         /* made by: 2.0, MS-DOS attributes */
        put_u16(o, 20);
        put_u16(o, 0);
        put_u16(o, 0);
        put_u16(o, 0);
        put_u16(o, 0x21);
        put_u32(o, crc[i]);
        put_u32(o, size[i]);
        put_u32(o, size[i]);
        put_u16(o, (uint16_t)strlen(entry));
        put_u16(o, 0); /* extra */
        put_u16(o, 0); /* comment */
        put_u16(o, 0); /* disk */
        put_u16(o, 0); /* internal attributes */
        put_u32(o, 0); /* external attributes */
        put_u32(o, at[i]);
        put(o, entry, strlen(entry));
    }
    if (st == OB_OK && o->pos >= 0xffffffffu)
        st = OB_ERR(err, OB_ERR_UNSUPPORTED, "npz export past 4 GiB: use --format safetensors");
    if (st == OB_OK) {
        uint64_t cd_size = o->pos - cd;
        put_u32(o, 0x06054b50); /* end of central directory */
        put_u16(o, 0);
        put_u16(o, 0);
        put_u16(o, (uint16_t)n);
        put_u16(o, (uint16_t)n);
        put_u32(o, (uint32_t)cd_size);
        put_u32(o, (uint32_t)cd);
        put_u16(o, 0);
    }
    free(crc);
    free(size);
    free(at);
    return st;
}

/* --- safetensors ------------------------------------------------------------------------------ */

static ob_status write_safetensors(out_file *o, const xtensor *xs, size_t n, long step, ob_err *err)
{
    text h = {0};
    add(&h, "{\"__metadata__\":{\"format\":\"onebit\",\"step\":\"%ld\"}", step);
    uint64_t begin = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t end = begin + xs[i].numel * sizeof(float); /* <= 3 * 2^42: no wrap */
        add(&h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":", xs[i].name);
        add_shape(&h, &xs[i], "[", "]", 0);
        add(&h, ",\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", begin, end);
        begin = end;
    }
    add(&h, "}");
    while (!h.nomem && h.len % 8 != 0)
        add(&h, " ");
    if (h.nomem) {
        free(h.s);
        return OB_ERR(err, OB_ERR_NOMEM, "safetensors header of %zu tensors", n);
    }
    put_u64(o, h.len);
    put(o, h.s, h.len);
    free(h.s);
    for (size_t i = 0; i < n; i++)
        put(o, xs[i].data, (size_t)xs[i].numel * sizeof(float));
    return OB_OK;
}

/* --- the export ---------------------------------------------------------------------------------
 */

/* The checkpoint's arrays and the list of tensors to write, slices of them. */
typedef struct source {
    ob_ckpt_meta meta;
    float *params, *m, *v;
    ob_ckpt_tensor *index;
    size_t nindex;
    xtensor *xs;
    size_t n;
} source;

static void source_free(source *s)
{
    free(s->params);
    free(s->m);
    free(s->v);
    free(s->index);
    free(s->xs);
}

static ob_status load_source(const char *dir, int with_optim, source *s, ob_err *err)
{
    memset(s, 0, sizeof *s);
    ob_status st = ob_ckpt_verify(dir, &s->meta, err);
    if (st != OB_OK) return st;
    size_t d = (size_t)s->meta.num_params; /* <= 2^40, checked by the reader */
    if ((st = ob_ckpt_read_tensors(dir, &s->meta, &s->index, &s->nindex, err)) != OB_OK) return st;
    static const ob_ckpt_tensor whole = {"params", 0, 1, {0, 0, 0, 0}};
    size_t ni = s->nindex ? s->nindex : 1, parts = with_optim ? 3 : 1;
    s->params = malloc(d * sizeof(float));
    s->m = malloc(d * sizeof(float));
    s->v = malloc(d * sizeof(float));
    s->xs = calloc(ni * parts, sizeof *s->xs);
    if (!s->params || !s->m || !s->v || !s->xs)
        return OB_ERR(err, OB_ERR_NOMEM, "export of %zu parameters", d);
    ob_ckpt_arrays a = {s->params, s->m, s->v, NULL, 0, NULL, 0};
    if ((st = ob_ckpt_read_state(dir, &s->meta, &a, err)) != OB_OK) return st;
    static const char *const prefix[] = {"", "exp_avg.", "exp_avg_sq."};
    const float *buf[] = {s->params, s->m, s->v};
    for (size_t p = 0; p < parts; p++) {
        for (size_t i = 0; i < ni; i++) {
            const ob_ckpt_tensor *t = s->nindex ? &s->index[i] : &whole;
            xtensor *x = &s->xs[p * ni + i];
            snprintf(x->name, sizeof x->name, "%s%s", prefix[p], t->name);
            x->ndim = t->ndim;
            memcpy(x->shape, t->shape, sizeof x->shape);
            if (!s->nindex) x->shape[0] = d;
            x->numel = 1;
            for (uint32_t k = 0; k < x->ndim; k++)
                x->numel *= x->shape[k]; /* checked: the product is <= d */
            x->data = buf[p] + t->offset;
        }
    }
    s->n = ni * parts;
    return OB_OK;
}

/* The directory holding path ("." for a bare name), for the fsync after the rename. */
static void parent_dir(char *out, size_t cap, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == path)
        snprintf(out, cap, "/");
    else
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

ob_status ob_ckpt_export(const char *dir, ob_ckpt_export_format format, int with_optim,
                         const char *out_path, size_t *count, ob_err *err)
{
    const uint32_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    if (first != 1) return OB_ERR(err, OB_ERR_UNSUPPORTED, "export needs a little-endian host");
    if (format != OB_CKPT_EXPORT_NPZ && format != OB_CKPT_EXPORT_SAFETENSORS)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "unknown export format %d", (int)format);
    char tmp[OB_CKPT_PATH_LEN], parent[OB_CKPT_PATH_LEN];
    if (!out_path || !*out_path || snprintf(tmp, sizeof tmp, "%s.tmp", out_path) >= (int)sizeof tmp)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "output path missing or too long");
    parent_dir(parent, sizeof parent, out_path);
    source s;
    ob_status st = load_source(dir, with_optim, &s, err);
    if (st != OB_OK) {
        source_free(&s);
        return st;
    }
    out_file o = {fopen(tmp, "wb"), 0, 0};
    if (!o.f) {
        st = OB_ERR(err, OB_ERR_IO, "%s: %s", tmp, strerror(errno));
        source_free(&s);
        return st;
    }
    st = format == OB_CKPT_EXPORT_NPZ ? write_npz(&o, s.xs, s.n, err)
                                      : write_safetensors(&o, s.xs, s.n, s.meta.step, err);
    if (st == OB_OK && !o.failed && (fflush(o.f) != 0 || fsync(fileno(o.f)) != 0))
        o.failed = errno ? errno : EIO;
    if (fclose(o.f) != 0 && !o.failed) o.failed = errno ? errno : EIO;
    if (st == OB_OK && o.failed) st = OB_ERR(err, OB_ERR_IO, "%s: %s", tmp, strerror(o.failed));
    if (st == OB_OK && rename(tmp, out_path) != 0)
        st = OB_ERR(err, OB_ERR_IO, "rename %s to %s: %s", tmp, out_path, strerror(errno));
    if (st == OB_OK) st = ob__ckpt_fsync_path(parent, 1, err);
    if (st != OB_OK) unlink(tmp);
    if (st == OB_OK && count) *count = s.n;
    source_free(&s);
    return st;
}
