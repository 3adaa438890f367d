/* Byte-level text from a file or a directory tree, split into train and eval.
 *
 * The walk must give the same bytes on every machine and every run, whatever order the file
 * system lists entries in: each directory's names are sorted (strcmp) before descending. Symbolic
 * links are never followed, which rules out cycles and skips the *.u8 duplicates Debian's
 * fortunes ships beside each file. Uses only POSIX.1-2008 calls (opendir, readdir, lstat,
 * strdup), available under the project-wide _POSIX_C_SOURCE=200809L. */
#include "data_internal.h"
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TEXT_SNIFF_BYTES 4096 /* a NUL in this prefix marks a file as binary */
#define TEXT_READ_CHUNK ((size_t)1 << 16)
#define TEXT_MAX_DEPTH 64

void ob_text_options_default(ob_text_options *opts)
{
    opts->context = 128;
    opts->eval_fraction = 0.1;
    opts->eval_chunk = 4096;
    opts->max_bytes = 0;
}

/* The growing concatenation. */
typedef struct text_buf {
    uint8_t *data; /* malloc */
    size_t len, cap;
    size_t max; /* 0 = no cap */
} text_buf;

static int buf_full(const text_buf *b)
{
    return b->max != 0 && b->len >= b->max;
}

/* Makes room for `extra` more bytes. */
static ob_status buf_reserve(text_buf *b, size_t extra, const char *path, ob_err *err)
{
    if (b->cap - b->len >= extra) return OB_OK;
    size_t need = b->len + extra, ncap = b->cap ? b->cap : TEXT_READ_CHUNK;
    while (ncap < need)
        ncap *= 2;
    uint8_t *p = realloc(b->data, ncap);
    if (!p) return OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory after %zu bytes", path, b->len);
    b->data = p;
    b->cap = ncap;
    return OB_OK;
}

/* Bytes that may still be appended under the cap. */
static size_t buf_room(const text_buf *b, size_t want)
{
    if (b->max == 0) return want;
    size_t room = b->max - b->len;
    return want < room ? want : room;
}

/* Appends a file. With sniff set, a file with a NUL in its first 4 KiB is skipped. */
static ob_status read_file(text_buf *b, const char *path, int sniff, ob_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return OB_ERR(err, OB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    uint8_t head[TEXT_SNIFF_BYTES];
    size_t n = fread(head, 1, sizeof head, f);
    ob_status st = OB_OK;
    if (ferror(f)) {
        st = OB_ERR(err, OB_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        goto done;
    }
    if (sniff && memchr(head, 0, n)) goto done;
    n = buf_room(b, n);
    st = buf_reserve(b, n, path, err);
    if (st != OB_OK) goto done;
    if (n > 0) memcpy(b->data + b->len, head, n); /* b->data is still NULL before any byte */
    b->len += n;
    while (!buf_full(b) && !feof(f)) {
        size_t want = buf_room(b, TEXT_READ_CHUNK);
        st = buf_reserve(b, want, path, err);
        if (st != OB_OK) goto done;
        b->len += fread(b->data + b->len, 1, want, f);
        if (ferror(f)) {
            st = OB_ERR(err, OB_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            goto done;
        }
    }
done:
    fclose(f);
    return st;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names in dir, hidden ones left out; *out is a malloc'd array of malloc'd strings. */
static ob_status list_dir(const char *dir, char ***out, size_t *count, ob_err *err)
{
    DIR *d = opendir(dir);
    if (!d) return OB_ERR(err, OB_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    ob_status st = OB_OK;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno != 0)
                st = OB_ERR(err, OB_ERR_IO, "%s: reading the directory failed: %s", dir,
                            strerror(errno));
            break;
        }
        if (e->d_name[0] == '.') continue; /* hidden, ".", ".." */
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 32;
            char **p = realloc(names, ncap * sizeof *names);
            if (!p) {
                st = OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory listing the directory", dir);
                break;
            }
            names = p;
            cap = ncap;
        }
        if (!(names[n] = strdup(e->d_name))) {
            st = OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory listing the directory", dir);
            break;
        }
        n++;
    }
    closedir(d);
    if (st != OB_OK) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return st;
    }
    if (n > 1) qsort(names, n, sizeof *names, cmp_names);
    *out = names;
    *count = n;
    return OB_OK;
}

static ob_status walk(text_buf *b, const char *dir, int depth, ob_err *err)
{
    if (depth > TEXT_MAX_DEPTH)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: directories nested deeper than %d levels", dir,
                      TEXT_MAX_DEPTH);
    char **names = NULL;
    size_t n = 0;
    ob_status st = list_dir(dir, &names, &n, err);
    if (st != OB_OK) return st;
    for (size_t i = 0; i < n && st == OB_OK && !buf_full(b); i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(len);
        if (!path) {
            st = OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory", dir);
            break;
        }
        snprintf(path, len, "%s/%s", dir, names[i]);
        struct stat sb;
        if (lstat(path, &sb) != 0)
            st = OB_ERR(err, OB_ERR_IO, "%s: lstat failed: %s", path, strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            st = walk(b, path, depth + 1, err);
        else if (S_ISREG(sb.st_mode))
            st = read_file(b, path, 1, err);
        /* Symbolic links, sockets, devices, FIFOs: skipped. */
        free(path);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

/* Does chunk i belong to the eval split? A Bresenham-style rule: exactly floor(k * f) of the
 * first k chunks are eval, for every k, spread evenly. */
static int eval_chunk(size_t i, double f)
{
    return floor((double)(i + 1) * f) > floor((double)i * f);
}

/* Sets the dataset's splits from the concatenation (borrowed; copied). */
static ob_status split_text(ob_dataset *ds, const uint8_t *bytes, size_t len, double f,
                            size_t chunk, ob_err *err)
{
    size_t nchunks = (len + chunk - 1) / chunk, sizes[2] = {0, 0};
    for (size_t i = 0; i < nchunks; i++) {
        size_t c = i + 1 < nchunks ? chunk : len - i * chunk;
        sizes[eval_chunk(i, f) ? OB_SPLIT_EVAL : OB_SPLIT_TRAIN] += c;
    }
    for (int s = 0; s < 2; s++) {
        ds->text_len[s] = sizes[s];
        if (sizes[s] && !(ds->text[s] = malloc(sizes[s])))
            return OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory for %zu bytes", ds->source,
                          sizes[s]);
    }
    size_t at[2] = {0, 0};
    for (size_t i = 0; i < nchunks; i++) {
        size_t c = i + 1 < nchunks ? chunk : len - i * chunk;
        int s = eval_chunk(i, f) ? OB_SPLIT_EVAL : OB_SPLIT_TRAIN;
        memcpy(ds->text[s] + at[s], bytes + i * chunk, c);
        at[s] += c;
    }
    return OB_OK;
}

ob_status ob_dataset_open_text(ob_dataset **out, const char *path, const ob_text_options *opts,
                               ob_err *err)
{
    if (!out) return OB_ERR(err, OB_ERR_INVALID_ARG, "text: out is NULL");
    *out = NULL;
    if (!path) path = OB_FORTUNES_DIR;
    ob_text_options defaults;
    ob_text_options_default(&defaults);
    if (!opts) opts = &defaults;
    if (opts->context < 1)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "text: context must be at least 1");
    if (!(opts->eval_fraction >= 0.0 && opts->eval_fraction < 1.0))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "text: eval_fraction %g is not in [0, 1)",
                      opts->eval_fraction);
    if (opts->eval_chunk < 1)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "text: eval_chunk must be at least 1");

    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return OB_ERR(err, OB_ERR_NOT_FOUND, "%s: no such file or directory", path);
        return OB_ERR(err, OB_ERR_IO, "%s: stat failed: %s", path, strerror(errno));
    }
    text_buf b = {NULL, 0, 0, opts->max_bytes};
    ob_status st;
    if (S_ISDIR(sb.st_mode))
        st = walk(&b, path, 0, err);
    else if (S_ISREG(sb.st_mode))
        st = read_file(&b, path, 0, err); /* named explicitly: taken as it is */
    else
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "%s: not a regular file or directory", path);
    if (st == OB_OK && b.len == 0)
        st = OB_ERR(err, OB_ERR_NOT_FOUND, "%s: no text found (empty, or only binary files)", path);
    if (st != OB_OK) {
        free(b.data);
        return st;
    }

    ob_dataset *ds = ob__dataset_alloc(OB_DATASET_TEXT, path);
    if (!ds) {
        free(b.data);
        return OB_ERR(err, OB_ERR_NOMEM, "%s: out of memory", path);
    }
    ds->context = opts->context;
    st = split_text(ds, b.data, b.len, opts->eval_fraction, opts->eval_chunk, err);
    free(b.data);
    if (st != OB_OK) {
        ob_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return OB_OK;
}
