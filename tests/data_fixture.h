/* Helpers shared by the data tests (test_data.c: IDX and text files, the real corpora;
 * test_data_loaders.c: per-rank loaders, determinism, positions, synthetic data). Every fixture
 * file is written by the test itself into a mkdtemp directory that the group teardown removes. */
#ifndef ONEBIT_TEST_DATA_FIXTURE_H
#define ONEBIT_TEST_DATA_FIXTURE_H

#include "onebit/data.h"

#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

/* Each test program uses a part of these. */
#define OB_TEST_HELPER static __attribute__((unused))

static char g_tmp[64]; /* the fixture directory of this run */

/* ---- Fixture helpers ------------------------------------------------------------------------ */

OB_TEST_HELPER char *tmp_path(const char *name)
{
    static char buf[8][512]; /* a few paths alive at once */
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, 512, "%s/%s", g_tmp, name);
    return p;
}

OB_TEST_HELPER void write_bytes(const char *path, const void *data, size_t len, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        if (len) assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        if (len) assert_int_equal(fwrite(data, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
    }
}

OB_TEST_HELPER void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes an IDX image file: header (magic, n, rows, cols) and n*rows*cols pixels; extra bytes
 * are appended and `cut` bytes removed from the end to fake damaged files. */
OB_TEST_HELPER void write_images(const char *path, uint32_t magic, uint32_t n, uint32_t rows,
                                 uint32_t cols, const uint8_t *pix, int gz, size_t extra,
                                 size_t cut)
{
    size_t len = 16 + (size_t)n * rows * cols + extra;
    uint8_t *buf = calloc(1, len);
    assert_non_null(buf);
    put_be32(buf, magic);
    put_be32(buf + 4, n);
    put_be32(buf + 8, rows);
    put_be32(buf + 12, cols);
    memcpy(buf + 16, pix, (size_t)n * rows * cols);
    write_bytes(path, buf, len - cut, gz);
    free(buf);
}

OB_TEST_HELPER void write_labels(const char *path, uint32_t magic, uint32_t n,
                                 const uint8_t *labels, int gz)
{
    uint8_t *buf = calloc(1, 8 + (size_t)n);
    assert_non_null(buf);
    put_be32(buf, magic);
    put_be32(buf + 4, n);
    memcpy(buf + 8, labels, n);
    write_bytes(path, buf, 8 + (size_t)n, gz);
    free(buf);
}

/* A dataset of n train (and m eval) examples whose two pixels encode their index; labels are
 * index mod 10. Eval indices are offset by 1000 so splits are told apart. Unit features. */
OB_TEST_HELPER ob_dataset *index_dataset(const char *tag, uint32_t n, uint32_t m)
{
    char ti[64], tl[64], ei[64], el[64];
    snprintf(ti, sizeof ti, "%s-ti", tag);
    snprintf(tl, sizeof tl, "%s-tl", tag);
    snprintf(ei, sizeof ei, "%s-ei", tag);
    snprintf(el, sizeof el, "%s-el", tag);
    uint32_t counts[2] = {n, m};
    const char *names[2][2] = {{ti, tl}, {ei, el}};
    for (int s = 0; s < 2; s++) {
        uint32_t k = counts[s];
        uint8_t *pix = malloc(2 * (size_t)k + 1), *lab = malloc((size_t)k + 1);
        for (uint32_t i = 0; i < k; i++) {
            uint32_t id = i + (s ? 1000 : 0);
            pix[2 * i] = (uint8_t)(id % 256);
            pix[2 * i + 1] = (uint8_t)(id / 256);
            lab[i] = (uint8_t)(id % 10);
        }
        write_images(tmp_path(names[s][0]), 0x803, k, 1, 2, pix, s, 0, 0);
        write_labels(tmp_path(names[s][1]), 0x801, k, lab, s);
        free(pix);
        free(lab);
    }
    ob_idx_options opts;
    ob_idx_options_default(&opts);
    opts.norm = OB_FEATURES_UNIT;
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    char a[4][512];
    snprintf(a[0], 512, "%s", tmp_path(ti));
    snprintf(a[1], 512, "%s", tmp_path(tl));
    snprintf(a[2], 512, "%s", tmp_path(ei));
    snprintf(a[3], 512, "%s", tmp_path(el));
    ob_status st =
        ob_dataset_open_idx(&ds, a[0], a[1], m ? a[2] : NULL, m ? a[3] : NULL, &opts, &err);
    if (st != OB_OK) fail_msg("index dataset: %s", err.msg);
    return ds;
}

/* The example index a row of an index_dataset batch holds (checking its label on the way). */
OB_TEST_HELPER long row_index(const ob_batch *b, size_t i)
{
    long id = lroundf(b->x[2 * i] * 255.0f) + 256 * lroundf(b->x[2 * i + 1] * 255.0f);
    assert_int_equal(b->y[i], id % 10);
    return id;
}

/* Asserts a failure with the given code whose message holds every needle (NULL-terminated). */
OB_TEST_HELPER void check_error(ob_status st, const ob_err *err, ob_status code, ...)
{
    if (st != code || err->code != code)
        fail_msg("expected status %d (%s), got %d: %s", code, ob_strerror(code), st, err->msg);
    va_list ap;
    va_start(ap, code);
    for (const char *needle; (needle = va_arg(ap, const char *)) != NULL;)
        if (!strstr(err->msg, needle))
            fail_msg("error message \"%s\" does not mention \"%s\"", err->msg, needle);
    va_end(ap);
}

OB_TEST_HELPER ob_loader *make_loader(const ob_dataset *ds, ob_split split, int rank, int world,
                                      size_t batch, uint64_t seed)
{
    ob_loader *ldr = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_loader_create(&ldr, ds, split, rank, world, batch, seed, &err) != OB_OK)
        fail_msg("ob_loader_create: %s", err.msg);
    return ldr;
}

OB_TEST_HELPER ob_loader *make_pass(const ob_dataset *ds, ob_split split, int rank, int world,
                                    size_t batch, size_t max)
{
    ob_loader *ldr = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_loader_create_pass(&ldr, ds, split, rank, world, batch, max, &err) != OB_OK)
        fail_msg("ob_loader_create_pass: %s", err.msg);
    return ldr;
}

OB_TEST_HELPER void next_batch(ob_loader *ldr, ob_batch *b)
{
    ob_err err;
    ob_err_clear(&err);
    if (ob_loader_next(ldr, b, &err) != OB_OK) fail_msg("ob_loader_next: %s", err.msg);
}

/* A stable digest of a batch's contents, to compare streams of batches. */
OB_TEST_HELPER uint64_t batch_hash(const ob_batch *b)
{
    uint64_t h = 1469598103934665603ull ^ b->n;
    const uint8_t *p[3] = {(const uint8_t *)b->x, (const uint8_t *)b->y, b->tokens};
    size_t len[3] = {b->x ? b->n * b->input_dim * sizeof(float) : 0,
                     b->y ? b->n * sizeof(int32_t) : 0, b->tokens ? b->n * (b->context + 1) : 0};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < len[k]; i++)
            h = (h ^ p[k][i]) * 1099511628211ull;
    return h;
}

OB_TEST_HELPER void rm_rf(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char sub[1024];
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                rm_rf(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

OB_TEST_HELPER int group_setup(void **state)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/ob_test_data.XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

OB_TEST_HELPER int group_teardown(void **state)
{
    rm_rf(g_tmp);
    return 0;
}

#endif /* ONEBIT_TEST_DATA_FIXTURE_H */
