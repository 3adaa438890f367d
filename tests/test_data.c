/* Tests for datasets and per-rank loaders (onebit/data.h).
 *
 * Every fixture file is written by the test itself into a mkdtemp directory that the group
 * teardown removes. Examples of the loader tests carry their own index in their pixels (IDX
 * files with 1 x 2 "images" holding i mod 256 and i / 256), so a batch says exactly which
 * examples it holds. The real Fashion-MNIST and fortunes corpora are checked when installed and
 * skipped, with a message, when not. */
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

static char g_tmp[64]; /* the fixture directory of this run */

/* ---- Fixture helpers ------------------------------------------------------------------------ */

static char *tmp_path(const char *name)
{
    static char buf[8][512]; /* a few paths alive at once */
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, 512, "%s/%s", g_tmp, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t len, int gz)
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

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes an IDX image file: header (magic, n, rows, cols) and n*rows*cols pixels; extra bytes
 * are appended and `cut` bytes removed from the end to fake damaged files. */
static void write_images(const char *path, uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols,
                         const uint8_t *pix, int gz, size_t extra, size_t cut)
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

static void write_labels(const char *path, uint32_t magic, uint32_t n, const uint8_t *labels,
                         int gz)
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
static ob_dataset *index_dataset(const char *tag, uint32_t n, uint32_t m)
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
static long row_index(const ob_batch *b, size_t i)
{
    long id = lroundf(b->x[2 * i] * 255.0f) + 256 * lroundf(b->x[2 * i + 1] * 255.0f);
    assert_int_equal(b->y[i], id % 10);
    return id;
}

/* Asserts a failure with the given code whose message holds every needle (NULL-terminated). */
static void check_error(ob_status st, const ob_err *err, ob_status code, ...)
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

static ob_loader *make_loader(const ob_dataset *ds, ob_split split, int rank, int world,
                              size_t batch, uint64_t seed)
{
    ob_loader *ldr = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_loader_create(&ldr, ds, split, rank, world, batch, seed, &err) != OB_OK)
        fail_msg("ob_loader_create: %s", err.msg);
    return ldr;
}

static ob_loader *make_pass(const ob_dataset *ds, ob_split split, int rank, int world, size_t batch,
                            size_t max)
{
    ob_loader *ldr = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_loader_create_pass(&ldr, ds, split, rank, world, batch, max, &err) != OB_OK)
        fail_msg("ob_loader_create_pass: %s", err.msg);
    return ldr;
}

static void next_batch(ob_loader *ldr, ob_batch *b)
{
    ob_err err;
    ob_err_clear(&err);
    if (ob_loader_next(ldr, b, &err) != OB_OK) fail_msg("ob_loader_next: %s", err.msg);
}

/* A stable digest of a batch's contents, to compare streams of batches. */
static uint64_t batch_hash(const ob_batch *b)
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

static void rm_rf(const char *path)
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

static int group_setup(void **state)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/ob_test_data.XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int group_teardown(void **state)
{
    rm_rf(g_tmp);
    return 0;
}

/* ---- IDX files ------------------------------------------------------------------------------ */

static const uint8_t small_labels[3] = {3, 0, 9};
static const uint8_t small_eval_labels[2] = {1, 2};

static void small_pixels(uint8_t *train, uint8_t *eval)
{
    for (int i = 0; i < 18; i++)
        train[i] = (uint8_t)(i * 37 + 5);
    train[0] = 0;
    train[1] = 255;
    for (int i = 0; i < 12; i++)
        eval[i] = (uint8_t)(250 - i * 11);
}

/* Writes the small 2x3 dataset (3 train, 2 eval examples) under prefix; gz selects gzip. */
static void write_small(const char *prefix, int gz, char paths[4][512])
{
    uint8_t tp[18], ep[12];
    small_pixels(tp, ep);
    const char *suffix[4] = {"ti", "tl", "ei", "el"};
    for (int i = 0; i < 4; i++)
        snprintf(paths[i], 512, "%s/%s-%s", g_tmp, prefix, suffix[i]);
    write_images(paths[0], 0x803, 3, 2, 3, tp, gz, 0, 0);
    write_labels(paths[1], 0x801, 3, small_labels, gz);
    write_images(paths[2], 0x803, 2, 2, 3, ep, gz, 0, 0);
    write_labels(paths[3], 0x801, 2, small_eval_labels, gz);
}

/* Reads the whole split through a single-rank pass and checks every value against expect(). */
static void check_small_values(ob_dataset *ds, double mean, double std)
{
    uint8_t tp[18], ep[12];
    small_pixels(tp, ep);
    const uint8_t *pix[2] = {tp, ep};
    const uint8_t *lab[2] = {small_labels, small_eval_labels};
    size_t n[2] = {3, 2};
    for (int s = 0; s < 2; s++) {
        ob_loader *ldr = make_pass(ds, (ob_split)s, 0, 1, 8, 0);
        ob_batch b;
        next_batch(ldr, &b);
        assert_int_equal(b.n, n[s]);
        assert_int_equal(b.input_dim, 6);
        assert_null(b.tokens);
        for (size_t i = 0; i < n[s]; i++) {
            assert_int_equal(b.y[i], lab[s][i]);
            for (size_t j = 0; j < 6; j++) {
                double want = (pix[s][i * 6 + j] / 255.0 - mean) / std;
                if (fabs(b.x[i * 6 + j] - want) > 1e-5)
                    fail_msg("split %d example %zu feature %zu: %g, want %g", s, i, j,
                             b.x[i * 6 + j], want);
            }
        }
        next_batch(ldr, &b);
        assert_int_equal(b.n, 0); /* end of the pass */
        ob_loader_destroy(ldr);
    }
}

static void test_idx_plain_unit(void **state)
{
    char p[4][512];
    write_small("plain", 0, p);
    ob_idx_options opts;
    ob_idx_options_default(&opts);
    assert_int_equal(opts.num_classes, 10);
    assert_int_equal(opts.norm, OB_FEATURES_STANDARDIZE);
    opts.norm = OB_FEATURES_UNIT;
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    ob_status st = ob_dataset_open_idx(&ds, p[0], p[1], p[2], p[3], &opts, &err);
    if (st != OB_OK) fail_msg("%s", err.msg);
    assert_int_equal(ob_dataset_get_kind(ds), OB_DATASET_CLASSIFICATION);
    assert_int_equal(ob_dataset_num_examples(ds, OB_SPLIT_TRAIN), 3);
    assert_int_equal(ob_dataset_num_examples(ds, OB_SPLIT_EVAL), 2);
    assert_int_equal(ob_dataset_input_dim(ds), 6);
    assert_int_equal(ob_dataset_num_classes(ds), 10);
    assert_int_equal(ob_dataset_context(ds), 0);
    assert_int_equal(ob_dataset_text_length(ds, OB_SPLIT_TRAIN), 0);
    assert_null(ob_dataset_text(ds, OB_SPLIT_TRAIN));
    assert_string_equal(ob_dataset_source(ds), p[0]);
    float mean, std;
    ob_dataset_feature_stats(ds, &mean, &std);
    assert_true(mean == 0.0f && std == 1.0f);
    check_small_values(ds, 0.0, 1.0);
    ob_dataset_destroy(ds);
    ob_dataset_destroy(NULL);
}

static void test_idx_gzip_standardized(void **state)
{
    char p[4][512];
    write_small("gz", 1, p);
    /* Make sure the files really are gzip (magic 1f 8b), not plain. */
    FILE *f = fopen(p[0], "rb");
    assert_non_null(f);
    assert_int_equal(fgetc(f), 0x1f);
    assert_int_equal(fgetc(f), 0x8b);
    fclose(f);

    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_dataset_open_idx(&ds, p[0], p[1], p[2], p[3], NULL, &err) != OB_OK)
        fail_msg("%s", err.msg);
    uint8_t tp[18], ep[12];
    small_pixels(tp, ep);
    double sum = 0, sq = 0;
    for (int i = 0; i < 18; i++)
        sum += tp[i] / 255.0;
    double mean = sum / 18;
    for (int i = 0; i < 18; i++)
        sq += (tp[i] / 255.0 - mean) * (tp[i] / 255.0 - mean);
    double std = sqrt(sq / 18);
    float m, s;
    ob_dataset_feature_stats(ds, &m, &s);
    assert_true(fabs(m - mean) < 1e-6 && fabs(s - std) < 1e-6);
    /* The eval split is normalised with the train statistics, not its own. */
    check_small_values(ds, mean, std);
    ob_dataset_destroy(ds);
}

static void test_idx_auto_classes_and_no_eval(void **state)
{
    char p[4][512];
    write_small("auto", 0, p);
    ob_idx_options opts = {.num_classes = 0, .norm = OB_FEATURES_UNIT};
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    assert_int_equal(ob_dataset_open_idx(&ds, p[0], p[1], p[2], p[3], &opts, &err), OB_OK);
    assert_int_equal(ob_dataset_num_classes(ds), 10); /* max label 9 + 1 */
    ob_dataset_destroy(ds);

    /* Train only, labels 3, 0, 4, the eval pair left out: 5 classes. */
    uint8_t lab[3] = {3, 0, 4};
    write_labels(p[1], 0x801, 3, lab, 0);
    ds = NULL;
    assert_int_equal(ob_dataset_open_idx(&ds, p[0], p[1], NULL, NULL, &opts, &err), OB_OK);
    assert_int_equal(ob_dataset_num_classes(ds), 5);
    assert_int_equal(ob_dataset_num_examples(ds, OB_SPLIT_EVAL), 0);
    ob_loader *ldr = NULL;
    check_error(ob_loader_create(&ldr, ds, OB_SPLIT_EVAL, 0, 1, 1, 0, &err), &err,
                OB_ERR_INVALID_ARG, "empty", (char *)NULL);
    assert_null(ldr);
    ob_dataset_destroy(ds);
}

static void test_idx_dir(void **state)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/mnistdir", g_tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    uint8_t tp[18], ep[12];
    small_pixels(tp, ep);
    char path[600];
    /* A mix of compressed and plain files, as a user might have unpacked some. */
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    write_images(path, 0x803, 3, 2, 3, tp, 1, 0, 0);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
    write_labels(path, 0x801, 3, small_labels, 0);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", dir);
    write_images(path, 0x803, 2, 2, 3, ep, 0, 0, 0);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir);
    write_labels(path, 0x801, 2, small_eval_labels, 1);

    ob_idx_options opts = {.num_classes = 10, .norm = OB_FEATURES_UNIT};
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_dataset_open_idx_dir(&ds, dir, &opts, &err) != OB_OK) fail_msg("%s", err.msg);
    assert_string_equal(ob_dataset_source(ds), dir);
    check_small_values(ds, 0.0, 1.0);
    ob_dataset_destroy(ds);

    /* One of the four missing: not found, naming it. */
    assert_int_equal(unlink(path), 0);
    ob_err_clear(&err);
    check_error(ob_dataset_open_idx_dir(&ds, dir, &opts, &err), &err, OB_ERR_NOT_FOUND,
                "t10k-labels-idx1-ubyte", (char *)NULL);
    assert_null(ds);
    ob_err_clear(&err);
    snprintf(path, sizeof path, "%s/nonexistent", g_tmp);
    check_error(ob_dataset_open_idx_dir(&ds, path, &opts, &err), &err, OB_ERR_NOT_FOUND, path,
                (char *)NULL);
}

/* Opens the four files with one of them replaced, expecting a failure naming `bad_path`. */
static void expect_open_error(char p[4][512], ob_status code, const char *bad_path,
                              const char *word)
{
    static char sentinel;
    ob_dataset *ds = (ob_dataset *)&sentinel; /* any non-NULL: must come back NULL */
    ob_err err;
    ob_err_clear(&err);
    check_error(ob_dataset_open_idx(&ds, p[0], p[1], p[2], p[3], NULL, &err), &err, code, bad_path,
                word, (char *)NULL);
    assert_null(ds);
}

static void test_idx_errors(void **state)
{
    uint8_t tp[18], ep[12];
    small_pixels(tp, ep);
    char p[4][512];
    for (int gz = 0; gz < 2; gz++) {
        write_small(gz ? "errgz" : "err", gz, p);

        /* Truncated pixel data (the last 2 bytes missing). */
        write_images(p[0], 0x803, 3, 2, 3, tp, gz, 0, 2);
        expect_open_error(p, OB_ERR_CORRUPT, p[0], "truncated");
        /* Truncated header. */
        write_images(p[0], 0x803, 3, 2, 3, tp, gz, 0, 18 + 16 - 6);
        expect_open_error(p, OB_ERR_CORRUPT, p[0], "truncated");
        /* Bad magic: a label file where images belong, and the other way round. */
        write_images(p[0], 0x801, 3, 2, 3, tp, gz, 0, 0);
        expect_open_error(p, OB_ERR_CORRUPT, p[0], "magic");
        write_images(p[0], 0x803, 3, 2, 3, tp, gz, 0, 0);
        write_labels(p[3], 0x803, 2, small_eval_labels, gz);
        expect_open_error(p, OB_ERR_CORRUPT, p[3], "magic");
        write_labels(p[3], 0x801, 2, small_eval_labels, gz);
        /* Image and label counts that differ. */
        write_labels(p[1], 0x801, 2, small_labels, gz);
        expect_open_error(p, OB_ERR_CORRUPT, p[0], p[1]);
        write_labels(p[1], 0x801, 3, small_labels, gz);
        /* A label out of range for 10 classes. */
        uint8_t bad[2] = {1, 10};
        write_labels(p[3], 0x801, 2, bad, gz);
        expect_open_error(p, OB_ERR_CORRUPT, p[3], "out of range");
        write_labels(p[3], 0x801, 2, small_eval_labels, gz);
        /* Bytes after the declared data. */
        write_images(p[2], 0x803, 2, 2, 3, ep, gz, 5, 0);
        expect_open_error(p, OB_ERR_CORRUPT, p[2], "trailing");
        /* Eval images of another size than train. */
        write_images(p[2], 0x803, 2, 3, 2, ep, gz, 0, 0);
        expect_open_error(p, OB_ERR_CORRUPT, p[2], "3x2");
        /* A zero dimension. */
        write_images(p[2], 0x803, 2, 0, 3, ep, gz, 0, 0);
        expect_open_error(p, OB_ERR_CORRUPT, p[2], "dimension");
        write_images(p[2], 0x803, 2, 2, 3, ep, gz, 0, 0);
        /* A missing file. */
        assert_int_equal(unlink(p[1]), 0);
        expect_open_error(p, OB_ERR_NOT_FOUND, p[1], "no such file");
        write_labels(p[1], 0x801, 3, small_labels, gz);
        /* All repaired: opens again. */
        ob_dataset *ds = NULL;
        ob_err err;
        ob_err_clear(&err);
        if (ob_dataset_open_idx(&ds, p[0], p[1], p[2], p[3], NULL, &err) != OB_OK)
            fail_msg("%s", err.msg);
        ob_dataset_destroy(ds);
    }

    /* A gzip stream cut in the middle of its compressed data. */
    write_small("gzcut", 1, p);
    uint8_t big[4096];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)((i * 2654435761u) >> 13);
    write_images(p[0], 0x803, 1, 64, 64, big, 1, 0, 0);
    uint8_t lab1[1] = {0};
    write_labels(p[1], 0x801, 1, lab1, 1);
    struct stat sb;
    assert_int_equal(stat(p[0], &sb), 0);
    assert_int_equal(truncate(p[0], sb.st_size / 2), 0);
    expect_open_error(p, OB_ERR_CORRUPT, p[0], (char *)NULL);

    /* Arguments. */
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    check_error(ob_dataset_open_idx(&ds, p[0], p[1], p[2], NULL, NULL, &err), &err,
                OB_ERR_INVALID_ARG, "eval", (char *)NULL);
    ob_err_clear(&err);
    ob_idx_options opts = {.num_classes = -1, .norm = OB_FEATURES_UNIT};
    check_error(ob_dataset_open_idx(&ds, p[0], p[1], NULL, NULL, &opts, &err), &err,
                OB_ERR_INVALID_ARG, "num_classes", (char *)NULL);
}

static void test_fashion_mnist(void **state)
{
    struct stat sb;
    if (stat(OB_FASHION_MNIST_DIR, &sb) != 0) {
        fprintf(stderr, "SKIP: %s is absent (install the dataset-fashion-mnist package)\n",
                OB_FASHION_MNIST_DIR);
        skip();
    }
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_dataset_open_idx_dir(&ds, NULL, NULL, &err) != OB_OK) fail_msg("%s", err.msg);
    assert_int_equal(ob_dataset_num_examples(ds, OB_SPLIT_TRAIN), 60000);
    assert_int_equal(ob_dataset_num_examples(ds, OB_SPLIT_EVAL), 10000);
    assert_int_equal(ob_dataset_input_dim(ds), 784);
    assert_int_equal(ob_dataset_num_classes(ds), 10);
    float mean, std;
    ob_dataset_feature_stats(ds, &mean, &std);
    /* The well-known Fashion-MNIST statistics: 0.2860, 0.3530. */
    assert_true(fabsf(mean - 0.28604f) < 1e-4f && fabsf(std - 0.35302f) < 1e-4f);

    /* The first labels of each split, and features with zero mean over the train split. */
    static const int32_t train_first[6] = {9, 0, 0, 3, 0, 2};
    static const int32_t eval_first[6] = {9, 2, 1, 1, 6, 1};
    const int32_t *want[2] = {train_first, eval_first};
    for (int s = 0; s < 2; s++) {
        ob_loader *ldr = make_pass(ds, (ob_split)s, 0, 1, 1000, 0);
        ob_batch b;
        double sum = 0;
        size_t n = 0;
        for (next_batch(ldr, &b); b.n > 0; next_batch(ldr, &b)) {
            if (n == 0)
                for (int i = 0; i < 6; i++)
                    assert_int_equal(b.y[i], want[s][i]);
            for (size_t i = 0; i < b.n * 784; i++)
                sum += b.x[i];
            n += b.n;
        }
        assert_int_equal(n, s ? 10000 : 60000);
        if (s == 0) assert_true(fabs(sum / (n * 784.0)) < 1e-4);
        ob_loader_destroy(ldr);
    }
    ob_dataset_destroy(ds);
}

/* ---- Text ----------------------------------------------------------------------------------- */

static void fill_text(uint8_t *p, size_t n, uint8_t base)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(base + i % 23);
}

static void test_text_dir(void **state)
{
    char dir[512], sub[600];
    snprintf(dir, sizeof dir, "%s/textdir", g_tmp);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(mkdir(sub, 0755), 0);
    static uint8_t a[250], b[300], late[5000], c[75];
    fill_text(a, sizeof a, 'A');
    fill_text(b, sizeof b, 'a');
    fill_text(late, sizeof late, '0');
    late[4500] = 0; /* a NUL past the first 4 KiB: still text */
    fill_text(c, sizeof c, '!');
    char path[700];
    /* Created out of order: the walk must sort. */
    snprintf(path, sizeof path, "%s/c.txt", sub);
    write_bytes(path, c, sizeof c, 0);
    snprintf(path, sizeof path, "%s/b.txt", dir);
    write_bytes(path, b, sizeof b, 0);
    snprintf(path, sizeof path, "%s/late.txt", dir);
    write_bytes(path, late, sizeof late, 0);
    snprintf(path, sizeof path, "%s/a.txt", dir);
    write_bytes(path, a, sizeof a, 0);
    snprintf(path, sizeof path, "%s/0empty.txt", dir); /* first in order, adds nothing */
    write_bytes(path, "", 0, 0);
    snprintf(path, sizeof path, "%s/.hidden", dir);
    write_bytes(path, "hidden text\n", 12, 0);
    snprintf(path, sizeof path, "%s/bin.dat", dir);
    write_bytes(path, "xx\0yy", 5, 0);
    snprintf(path, sizeof path, "%s/a.u8", dir);
    assert_int_equal(symlink("a.txt", path), 0);

    size_t total = sizeof a + sizeof b + sizeof late + sizeof c; /* 5625 */
    uint8_t *want = malloc(total);
    memcpy(want, a, sizeof a);
    memcpy(want + 250, b, sizeof b);
    memcpy(want + 550, late, sizeof late);
    memcpy(want + 5550, c, sizeof c);

    ob_text_options opts;
    ob_text_options_default(&opts);
    assert_int_equal(opts.context, 128);
    assert_true(opts.eval_fraction == 0.1 && opts.eval_chunk == 4096 && opts.max_bytes == 0);
    opts.context = 4;
    opts.eval_fraction = 0.25;
    opts.eval_chunk = 100;
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_dataset_open_text(&ds, dir, &opts, &err) != OB_OK) fail_msg("%s", err.msg);
    assert_int_equal(ob_dataset_get_kind(ds), OB_DATASET_TEXT);
    assert_int_equal(ob_dataset_context(ds), 4);
    assert_int_equal(ob_dataset_num_classes(ds), 256);
    assert_int_equal(ob_dataset_input_dim(ds), 0);
    /* 57 chunks of 100 bytes (the last 25): chunks 3, 7, ..., 55 are eval: 14 x 100 bytes. */
    assert_int_equal(ob_dataset_text_length(ds, OB_SPLIT_EVAL), 1400);
    assert_int_equal(ob_dataset_text_length(ds, OB_SPLIT_TRAIN), total - 1400);
    assert_int_equal(ob_dataset_num_examples(ds, OB_SPLIT_EVAL), (1400 - 1) / 4);
    assert_int_equal(ob_dataset_num_examples(ds, OB_SPLIT_TRAIN), (total - 1400 - 1) / 4);
    const uint8_t *tr = ob_dataset_text(ds, OB_SPLIT_TRAIN),
                  *ev = ob_dataset_text(ds, OB_SPLIT_EVAL);
    size_t at[2] = {0, 0};
    for (size_t i = 0; i * 100 < total; i++) {
        size_t len = total - i * 100 < 100 ? total - i * 100 : 100;
        int s = i % 4 == 3;
        assert_memory_equal((s ? ev : tr) + at[s], want + i * 100, len);
        at[s] += len;
    }

    /* The same walk again gives the same bytes. */
    ob_dataset *again = NULL;
    assert_int_equal(ob_dataset_open_text(&again, dir, &opts, &err), OB_OK);
    assert_memory_equal(ob_dataset_text(again, OB_SPLIT_TRAIN), tr, total - 1400);
    ob_dataset_destroy(again);
    ob_dataset_destroy(ds);

    /* A cap on the bytes read: all of a.txt, then the first 10 bytes of b.txt. */
    opts.max_bytes = 260;
    opts.eval_fraction = 0.0;
    assert_int_equal(ob_dataset_open_text(&ds, dir, &opts, &err), OB_OK);
    assert_int_equal(ob_dataset_text_length(ds, OB_SPLIT_TRAIN), 260);
    assert_int_equal(ob_dataset_text_length(ds, OB_SPLIT_EVAL), 0);
    assert_null(ob_dataset_text(ds, OB_SPLIT_EVAL));
    assert_memory_equal(ob_dataset_text(ds, OB_SPLIT_TRAIN), want, 260);
    ob_dataset_destroy(ds);

    /* A file named directly is taken as it is, even binary. */
    snprintf(path, sizeof path, "%s/bin.dat", dir);
    opts.max_bytes = 0;
    opts.context = 1;
    assert_int_equal(ob_dataset_open_text(&ds, path, &opts, &err), OB_OK);
    assert_int_equal(ob_dataset_text_length(ds, OB_SPLIT_TRAIN), 5);
    assert_memory_equal(ob_dataset_text(ds, OB_SPLIT_TRAIN), "xx\0yy", 5);
    ob_dataset_destroy(ds);
    free(want);

    /* Missing path; a directory with only binary files; bad options. */
    ds = NULL;
    snprintf(path, sizeof path, "%s/missing", dir);
    ob_err_clear(&err);
    check_error(ob_dataset_open_text(&ds, path, &opts, &err), &err, OB_ERR_NOT_FOUND, path,
                (char *)NULL);
    snprintf(path, sizeof path, "%s/bindir", g_tmp);
    assert_int_equal(mkdir(path, 0755), 0);
    char binfile[800];
    snprintf(binfile, sizeof binfile, "%s/x.dat", path);
    write_bytes(binfile, "\0\1\2", 3, 0);
    ob_err_clear(&err);
    check_error(ob_dataset_open_text(&ds, path, &opts, &err), &err, OB_ERR_NOT_FOUND, path,
                "no text", (char *)NULL);
    opts.eval_fraction = 1.0;
    ob_err_clear(&err);
    check_error(ob_dataset_open_text(&ds, dir, &opts, &err), &err, OB_ERR_INVALID_ARG,
                "eval_fraction", (char *)NULL);
    assert_null(ds);
}

static void test_fortunes(void **state)
{
    DIR *d = opendir(OB_FORTUNES_DIR);
    if (!d) {
        fprintf(stderr, "SKIP: %s is absent (install the fortunes package)\n", OB_FORTUNES_DIR);
        skip();
    }
    /* Independently: the plain fortune files are the regular files not ending in .dat. */
    size_t expect = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", OB_FORTUNES_DIR, e->d_name);
        struct stat sb;
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (len > 4 && !strcmp(e->d_name + len - 4, ".dat")) continue;
        expect += (size_t)sb.st_size;
    }
    closedir(d);

    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_dataset_open_text(&ds, NULL, NULL, &err) != OB_OK) fail_msg("%s", err.msg);
    size_t tr = ob_dataset_text_length(ds, OB_SPLIT_TRAIN);
    size_t ev = ob_dataset_text_length(ds, OB_SPLIT_EVAL);
    assert_int_equal(tr + ev, expect);
    assert_true(tr + ev > 1000000);
    assert_true(ev > (tr + ev) / 11 && ev < (tr + ev) / 9);
    /* The .dat indexes (binary, full of NULs) were left out. */
    assert_null(memchr(ob_dataset_text(ds, OB_SPLIT_TRAIN), 0, tr));
    assert_null(memchr(ob_dataset_text(ds, OB_SPLIT_EVAL), 0, ev));
    ob_loader *ldr = make_loader(ds, OB_SPLIT_TRAIN, 1, 2, 16, 7);
    ob_batch b;
    next_batch(ldr, &b);
    assert_int_equal(b.n, 16);
    assert_int_equal(b.context, 128);
    assert_non_null(b.tokens);
    assert_null(b.x);
    ob_loader_destroy(ldr);
    ob_dataset_destroy(ds);
}

/* ---- Loaders -------------------------------------------------------------------------------- */

/* For W ranks with batch B over `epochs` epochs: per epoch every example appears at most once,
 * exactly `covered` distinct examples appear, and positions agree across ranks. */
static void check_shards(const ob_dataset *ds, int world, size_t batch, int epochs, size_t covered)
{
    size_t n = ob_dataset_num_examples(ds, OB_SPLIT_TRAIN);
    ob_loader *ldr[8];
    for (int r = 0; r < world; r++)
        ldr[r] = make_loader(ds, OB_SPLIT_TRAIN, r, world, batch, 42);
    assert_int_equal(ob_loader_epoch_size(ldr[0]), n);
    assert_int_equal(ob_loader_rank_examples(ldr[0]) * (size_t)world, covered);
    size_t steps = n / (batch * (size_t)world);
    int *seen = calloc(n, sizeof *seen);
    long *first_epoch = calloc(covered, sizeof *first_epoch);
    for (int ep = 0; ep < epochs; ep++) {
        memset(seen, 0, n * sizeof *seen);
        size_t k = 0, same_order = 0;
        for (size_t s = 0; s < steps; s++) {
            ob_loader_position p0 = {0};
            for (int r = 0; r < world; r++) {
                ob_batch b;
                next_batch(ldr[r], &b);
                assert_int_equal(b.n, batch);
                for (size_t i = 0; i < b.n; i++, k++) {
                    long id = row_index(&b, i);
                    assert_true(id >= 0 && (size_t)id < n);
                    if (seen[id]++) fail_msg("epoch %d: example %ld seen twice", ep, id);
                    if (ep == 0) first_epoch[k] = id;
                    same_order += first_epoch[k] == id;
                }
                ob_loader_position p;
                ob_loader_get_position(ldr[r], &p);
                assert_int_equal(p.epoch, ep);
                assert_int_equal(p.index, (s + 1) * batch * world);
                if (r == 0) p0 = p;
                assert_memory_equal(&p, &p0, sizeof p);
            }
        }
        size_t distinct = 0;
        for (size_t i = 0; i < n; i++)
            distinct += seen[i] != 0;
        assert_int_equal(distinct, covered);
        if (ep > 0) assert_true(same_order < covered / 2); /* reshuffled */
    }
    free(seen);
    free(first_epoch);
    for (int r = 0; r < world; r++)
        ob_loader_destroy(ldr[r]);
}

static void test_classification_shards(void **state)
{
    ob_dataset *ds = index_dataset("shard", 130, 0);
    check_shards(ds, 3, 8, 3, 120); /* 5 steps of 24: 10 examples left out per epoch */
    check_shards(ds, 2, 5, 3, 130); /* 13 steps of 10: the whole epoch */
    check_shards(ds, 1, 13, 2, 130);
    ob_dataset_destroy(ds);
}

/* The offset of a context+1 window in text, which must occur exactly once. */
static size_t find_window(const uint8_t *text, size_t len, const uint8_t *w, size_t wlen)
{
    size_t found = SIZE_MAX;
    for (size_t i = 0; i + wlen <= len; i++)
        if (text[i] == w[0] && !memcmp(text + i, w, wlen)) {
            if (found != SIZE_MAX) fail_msg("window occurs twice");
            found = i;
        }
    if (found == SIZE_MAX) fail_msg("window not found in the text");
    return found;
}

static void test_text_shards(void **state)
{
    ob_synth_text_spec spec = {.train_bytes = 4000,
                               .eval_bytes = 0,
                               .alphabet = 64,
                               .p_follow = 0.0,
                               .context = 16,
                               .seed = 5};
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    assert_int_equal(ob_dataset_synthetic_text(&ds, &spec, &err), OB_OK);
    const uint8_t *text = ob_dataset_text(ds, OB_SPLIT_TRAIN);
    enum { W = 3, B = 4 };
    ob_loader *ldr[W];
    for (int r = 0; r < W; r++)
        ldr[r] = make_loader(ds, OB_SPLIT_TRAIN, r, W, B, 9);
    size_t items = 4000 / 16 - 1; /* 249 windows, 20 steps of 12 */
    assert_int_equal(ob_loader_epoch_size(ldr[0]), items);
    assert_int_equal(ob_loader_rank_examples(ldr[0]), 20 * B);
    size_t phases[4];
    for (int ep = 0; ep < 4; ep++) {
        char *seen = calloc(4000, 1);
        size_t phase = SIZE_MAX;
        for (int s = 0; s < 20; s++)
            for (int r = 0; r < W; r++) {
                ob_batch b;
                next_batch(ldr[r], &b);
                assert_int_equal(b.n, B);
                assert_int_equal(b.context, 16);
                for (size_t i = 0; i < B; i++) {
                    size_t off = find_window(text, 4000, b.tokens + i * 17, 17);
                    if (phase == SIZE_MAX) phase = off % 16;
                    assert_int_equal(off % 16, phase);
                    assert_int_equal(seen[off], 0);
                    seen[off] = 1;
                }
            }
        phases[ep] = phase;
        free(seen);
    }
    assert_false(phases[0] == phases[1] && phases[1] == phases[2] && phases[2] == phases[3]);
    for (int r = 0; r < W; r++)
        ob_loader_destroy(ldr[r]);
    ob_dataset_destroy(ds);
}

static ob_dataset *synth_cls(uint64_t seed)
{
    ob_synth_classification_spec spec = {.n_train = 100,
                                         .n_eval = 37,
                                         .input_dim = 5,
                                         .num_classes = 3,
                                         .noise = 0.5f,
                                         .seed = seed};
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_dataset_synthetic_classification(&ds, &spec, &err) != OB_OK) fail_msg("%s", err.msg);
    return ds;
}

static ob_dataset *synth_text(uint64_t seed)
{
    ob_synth_text_spec spec = {.train_bytes = 3000,
                               .eval_bytes = 500,
                               .alphabet = 16,
                               .p_follow = 0.9,
                               .context = 8,
                               .seed = seed};
    ob_dataset *ds = NULL;
    ob_err err;
    ob_err_clear(&err);
    if (ob_dataset_synthetic_text(&ds, &spec, &err) != OB_OK) fail_msg("%s", err.msg);
    return ds;
}

/* Hashes of the first `steps` batches of a train loader. */
static void stream(const ob_dataset *ds, int rank, int world, size_t batch, uint64_t seed,
                   int steps, uint64_t *out)
{
    ob_loader *ldr = make_loader(ds, OB_SPLIT_TRAIN, rank, world, batch, seed);
    for (int i = 0; i < steps; i++) {
        ob_batch b;
        next_batch(ldr, &b);
        out[i] = batch_hash(&b);
    }
    ob_loader_destroy(ldr);
}

static void test_determinism(void **state)
{
    ob_dataset *ds[2] = {synth_cls(1), synth_text(1)};
    for (int k = 0; k < 2; k++) {
        uint64_t a[30], b[30], c[30], d[30];
        stream(ds[k], 1, 2, 7, 123, 30, a);
        stream(ds[k], 1, 2, 7, 123, 30, b);
        stream(ds[k], 1, 2, 7, 124, 30, c);
        stream(ds[k], 0, 2, 7, 123, 30, d);
        assert_memory_equal(a, b, sizeof a);
        int diff_seed = 0, diff_rank = 0;
        for (int i = 0; i < 30; i++) {
            diff_seed += a[i] != c[i];
            diff_rank += a[i] != d[i];
        }
        assert_true(diff_seed >= 29 && diff_rank >= 29);
    }
    ob_dataset_destroy(ds[0]);
    ob_dataset_destroy(ds[1]);
}

static void test_position_restore(void **state)
{
    ob_dataset *ds[2] = {synth_cls(2), synth_text(2)};
    for (int k = 0; k < 2; k++) {
        /* cls: 100 examples, 14 per step: 7 steps per epoch, so 11 steps cross an epoch. */
        ob_loader *a = make_loader(ds[k], OB_SPLIT_TRAIN, 1, 2, 7, 77);
        ob_batch b;
        for (int i = 0; i < 11; i++)
            next_batch(a, &b);
        ob_loader_position pos;
        ob_loader_get_position(a, &pos);
        assert_int_equal(pos.epoch, k == 0 ? 1 : 0);
        uint64_t want[20], got[20];
        for (int i = 0; i < 20; i++) {
            next_batch(a, &b);
            want[i] = batch_hash(&b);
        }
        /* A fresh loader, even from another seed, continues exactly after set_position. */
        ob_loader *c = make_loader(ds[k], OB_SPLIT_TRAIN, 1, 2, 7, 999);
        ob_err err;
        ob_err_clear(&err);
        assert_int_equal(ob_loader_set_position(c, &pos, &err), OB_OK);
        for (int i = 0; i < 20; i++) {
            next_batch(c, &b);
            got[i] = batch_hash(&b);
        }
        assert_memory_equal(want, got, sizeof want);

        /* Bad positions are refused and change nothing. */
        ob_loader_position bad = pos;
        memset(&bad.rng, 0, sizeof bad.rng);
        check_error(ob_loader_set_position(c, &bad, &err), &err, OB_ERR_INVALID_ARG, "rng",
                    (char *)NULL);
        bad = pos;
        bad.index = ob_loader_epoch_size(c) + 1;
        ob_err_clear(&err);
        check_error(ob_loader_set_position(c, &bad, &err), &err, OB_ERR_INVALID_ARG, "index",
                    (char *)NULL);
        ob_loader_destroy(a);
        ob_loader_destroy(c);
    }

    /* At another world size the rest of the epoch is re-sharded: one rank with batch 14 gets
     * what ranks 0 and 1 with batch 7 would have got, in rank order. */
    ob_loader *r0 = make_loader(ds[0], OB_SPLIT_TRAIN, 0, 2, 7, 5);
    ob_loader *r1 = make_loader(ds[0], OB_SPLIT_TRAIN, 1, 2, 7, 5);
    ob_batch b0, b1, bw;
    for (int i = 0; i < 3; i++) {
        next_batch(r0, &b0);
        next_batch(r1, &b1);
    }
    ob_loader_position pos;
    ob_loader_get_position(r0, &pos);
    ob_loader *w1 = make_loader(ds[0], OB_SPLIT_TRAIN, 0, 1, 14, 0);
    ob_err err;
    ob_err_clear(&err);
    assert_int_equal(ob_loader_set_position(w1, &pos, &err), OB_OK);
    for (int i = 0; i < 4; i++) { /* steps 4..7 of the epoch */
        next_batch(r0, &b0);
        next_batch(r1, &b1);
        next_batch(w1, &bw);
        assert_memory_equal(bw.x, b0.x, 7 * 5 * sizeof(float));
        assert_memory_equal(bw.x + 7 * 5, b1.x, 7 * 5 * sizeof(float));
        assert_memory_equal(bw.y, b0.y, 7 * sizeof(int32_t));
        assert_memory_equal(bw.y + 7, b1.y, 7 * sizeof(int32_t));
    }
    ob_loader_destroy(r0);
    ob_loader_destroy(r1);
    ob_loader_destroy(w1);
    ob_dataset_destroy(ds[0]);
    ob_dataset_destroy(ds[1]);
}

/* Runs one pass of every rank and returns how often each eval example was seen (index - 1000). */
static void eval_pass(const ob_dataset *ds, int world, size_t batch, size_t max, int *count)
{
    for (int r = 0; r < world; r++) {
        ob_loader *ldr = make_pass(ds, OB_SPLIT_EVAL, r, world, batch, max);
        uint64_t first[16];
        for (int pass = 0; pass < 2; pass++) {
            ob_batch b;
            size_t got = 0;
            int nb = 0;
            for (next_batch(ldr, &b); b.n > 0; next_batch(ldr, &b), nb++) {
                assert_true(b.n <= batch);
                assert_true(nb < 16);
                if (pass == 0) {
                    first[nb] = batch_hash(&b);
                    for (size_t i = 0; i < b.n; i++)
                        count[row_index(&b, i) - 1000]++;
                } else {
                    assert_int_equal(first[nb], batch_hash(&b)); /* passes repeat */
                }
                got += b.n;
            }
            assert_int_equal(got, ob_loader_rank_examples(ldr));
            ob_loader_position p;
            ob_loader_get_position(ldr, &p);
            assert_int_equal(p.epoch, pass + 1);
            assert_int_equal(p.index, 0);
        }
        ob_loader_destroy(ldr);
    }
}

static void test_eval_pass(void **state)
{
    ob_dataset *ds = index_dataset("eval", 30, 10);
    int count[10];
    for (int world = 1; world <= 4; world++) {
        memset(count, 0, sizeof count);
        eval_pass(ds, world, 2, 0, count);
        for (int i = 0; i < 10; i++)
            assert_int_equal(count[i], 1);
    }
    /* A fixed subset of 4 of the 10, spread out: floor(j * 10 / 4) = 0, 2, 5, 7. */
    memset(count, 0, sizeof count);
    eval_pass(ds, 3, 1, 4, count);
    int subset[10] = {1, 0, 1, 0, 0, 1, 0, 1, 0, 0};
    assert_memory_equal(count, subset, sizeof count);

    /* ob_loader_create on the eval split is the same pass (the seed plays no part). */
    ob_loader *a = make_loader(ds, OB_SPLIT_EVAL, 1, 2, 3, 11);
    ob_loader *b = make_pass(ds, OB_SPLIT_EVAL, 1, 2, 3, 0);
    ob_batch ba, bb;
    uint64_t first = 0;
    for (int i = 0; i < 4; i++) { /* 3 examples, 1, end of pass, 3 again */
        next_batch(a, &ba);
        next_batch(b, &bb);
        assert_int_equal(ba.n, bb.n);
        assert_int_equal(batch_hash(&ba), batch_hash(&bb));
        if (i == 0) first = batch_hash(&ba);
    }
    /* Rewind: back to the first batch of the pass. */
    next_batch(a, &ba);
    assert_int_equal(ba.n, 1);
    ob_loader_rewind(a);
    next_batch(a, &ba);
    assert_int_equal(batch_hash(&ba), first);
    ob_loader_destroy(a);
    ob_loader_destroy(b);

    /* A pass over the train split works too. */
    ob_loader *t = make_pass(ds, OB_SPLIT_TRAIN, 0, 1, 64, 0);
    next_batch(t, &ba);
    assert_int_equal(ba.n, 30);
    for (size_t i = 0; i < 30; i++)
        assert_int_equal(row_index(&ba, i), (long)i);
    ob_loader_destroy(t);
    ob_dataset_destroy(ds);

    /* Text: windows at 0, T, 2T, ... of the eval text, shared between two ranks. */
    ob_dataset *tx = synth_text(3); /* 500 eval bytes, T = 8: 62 windows */
    assert_int_equal(ob_dataset_num_examples(tx, OB_SPLIT_EVAL), 62);
    const uint8_t *ev = ob_dataset_text(tx, OB_SPLIT_EVAL);
    size_t total = 0;
    for (int r = 0; r < 2; r++) {
        ob_loader *ldr = make_pass(tx, OB_SPLIT_EVAL, r, 2, 5, 0);
        ob_batch bt;
        size_t step = 0;
        for (next_batch(ldr, &bt); bt.n > 0; next_batch(ldr, &bt), step++) {
            for (size_t i = 0; i < bt.n; i++) { /* item step*10 + r*5 + i starts at 8 x that */
                size_t item = step * 10 + (size_t)r * 5 + i;
                assert_true(item < 62);
                assert_memory_equal(bt.tokens + i * 9, ev + item * 8, 9);
            }
            total += bt.n;
        }
        ob_loader_destroy(ldr);
    }
    assert_int_equal(total, 62);
    ob_dataset_destroy(tx);
}

static void test_synthetic(void **state)
{
    /* Classification: same seed, same data; another seed, other data; labels in range. */
    ob_dataset *a = synth_cls(8), *b = synth_cls(8), *c = synth_cls(9);
    assert_int_equal(ob_dataset_num_examples(a, OB_SPLIT_TRAIN), 100);
    assert_int_equal(ob_dataset_num_examples(a, OB_SPLIT_EVAL), 37);
    assert_int_equal(ob_dataset_input_dim(a), 5);
    assert_int_equal(ob_dataset_num_classes(a), 3);
    for (int s = 0; s < 2; s++) {
        ob_loader *la = make_pass(a, (ob_split)s, 0, 1, 100, 0);
        ob_loader *lb = make_pass(b, (ob_split)s, 0, 1, 100, 0);
        ob_loader *lc = make_pass(c, (ob_split)s, 0, 1, 100, 0);
        ob_batch ba, bb, bc;
        next_batch(la, &ba);
        next_batch(lb, &bb);
        next_batch(lc, &bc);
        assert_memory_equal(ba.x, bb.x, ba.n * 5 * sizeof(float));
        assert_memory_equal(ba.y, bb.y, ba.n * sizeof(int32_t));
        assert_true(memcmp(ba.x, bc.x, ba.n * 5 * sizeof(float)) != 0);
        for (size_t i = 0; i < ba.n; i++)
            assert_true(ba.y[i] >= 0 && ba.y[i] < 3);
        ob_loader_destroy(la);
        ob_loader_destroy(lb);
        ob_loader_destroy(lc);
    }
    ob_dataset_destroy(a);
    ob_dataset_destroy(b);
    ob_dataset_destroy(c);

    /* The clusters are learnable: nearest class mean (from train) classifies eval well. */
    ob_synth_classification_spec cs = {.n_train = 2000,
                                       .n_eval = 500,
                                       .input_dim = 20,
                                       .num_classes = 4,
                                       .noise = 1.0f,
                                       .seed = 3};
    ob_dataset *cl = NULL;
    ob_err err;
    ob_err_clear(&err);
    assert_int_equal(ob_dataset_synthetic_classification(&cl, &cs, &err), OB_OK);
    double mean[4][20] = {{0}};
    int cnt[4] = {0};
    ob_loader *l = make_pass(cl, OB_SPLIT_TRAIN, 0, 1, 2000, 0);
    ob_batch bt;
    next_batch(l, &bt);
    for (size_t i = 0; i < bt.n; i++) {
        cnt[bt.y[i]]++;
        for (int j = 0; j < 20; j++)
            mean[bt.y[i]][j] += bt.x[i * 20 + j];
    }
    ob_loader_destroy(l);
    for (int k = 0; k < 4; k++) {
        assert_true(cnt[k] > 400); /* classes are balanced */
        for (int j = 0; j < 20; j++)
            mean[k][j] /= cnt[k];
    }
    l = make_pass(cl, OB_SPLIT_EVAL, 0, 1, 500, 0);
    next_batch(l, &bt);
    int right = 0;
    for (size_t i = 0; i < bt.n; i++) {
        int best = 0;
        double bestd = INFINITY;
        for (int k = 0; k < 4; k++) {
            double dd = 0;
            for (int j = 0; j < 20; j++)
                dd += (bt.x[i * 20 + j] - mean[k][j]) * (bt.x[i * 20 + j] - mean[k][j]);
            if (dd < bestd) bestd = dd, best = k;
        }
        right += best == bt.y[i];
    }
    assert_true(right > 450);
    ob_loader_destroy(l);
    ob_dataset_destroy(cl);

    /* Text: same seed, same bytes; another seed, others; only alphabet symbols. */
    ob_dataset *t1 = synth_text(4), *t2 = synth_text(4), *t3 = synth_text(5);
    assert_int_equal(ob_dataset_text_length(t1, OB_SPLIT_TRAIN), 3000);
    assert_int_equal(ob_dataset_text_length(t1, OB_SPLIT_EVAL), 500);
    assert_memory_equal(ob_dataset_text(t1, OB_SPLIT_TRAIN), ob_dataset_text(t2, OB_SPLIT_TRAIN),
                        3000);
    assert_memory_equal(ob_dataset_text(t1, OB_SPLIT_EVAL), ob_dataset_text(t2, OB_SPLIT_EVAL),
                        500);
    assert_true(memcmp(ob_dataset_text(t1, OB_SPLIT_TRAIN), ob_dataset_text(t3, OB_SPLIT_TRAIN),
                       3000) != 0);
    const char *alpha = "abcdefghijklmnop";
    for (size_t i = 0; i < 3000; i++)
        assert_non_null(memchr(alpha, ob_dataset_text(t1, OB_SPLIT_TRAIN)[i], 16));
    ob_dataset_destroy(t1);
    ob_dataset_destroy(t2);
    ob_dataset_destroy(t3);

    /* The source has the entropy rate it claims: the empirical conditional entropy of the next
     * byte given the previous two, over a long chain, matches the formula. */
    ob_synth_text_spec ts = {.train_bytes = 400000,
                             .eval_bytes = 0,
                             .alphabet = 8,
                             .p_follow = 0.7,
                             .context = 8,
                             .seed = 6};
    ob_dataset *big = NULL;
    assert_int_equal(ob_dataset_synthetic_text(&big, &ts, &err), OB_OK);
    const uint8_t *p = ob_dataset_text(big, OB_SPLIT_TRAIN);
    static uint32_t counts[256][256][8];
    memset(counts, 0, sizeof counts);
    for (size_t i = 2; i < 400000; i++)
        counts[p[i - 2]][p[i - 1]][p[i] - 'a']++;
    double h = 0;
    for (int x = 0; x < 256; x++)
        for (int y = 0; y < 256; y++) {
            double tot = 0;
            for (int z = 0; z < 8; z++)
                tot += counts[x][y][z];
            for (int z = 0; z < 8; z++)
                if (counts[x][y][z]) h -= counts[x][y][z] * log(counts[x][y][z] / tot);
        }
    h /= 399998.0;
    double want = ob_synth_text_entropy(&ts);
    assert_true(fabs(h - want) < 0.01);
    assert_true(want > 0.5 && want < log(8.0));
    ts.p_follow = 1.0;
    assert_true(ob_synth_text_entropy(&ts) < 1e-12);
    ob_dataset_destroy(big);
}

static void test_loader_bad_args(void **state)
{
    ob_dataset *ds = synth_cls(1); /* 100 train examples */
    ob_loader *ldr = NULL;
    ob_err err;
    ob_err_clear(&err);
    check_error(ob_loader_create(&ldr, ds, OB_SPLIT_TRAIN, 2, 2, 4, 0, &err), &err,
                OB_ERR_INVALID_ARG, "rank 2", (char *)NULL);
    ob_err_clear(&err);
    check_error(ob_loader_create(&ldr, ds, OB_SPLIT_TRAIN, 0, 0, 4, 0, &err), &err,
                OB_ERR_INVALID_ARG, "world_size", (char *)NULL);
    ob_err_clear(&err);
    check_error(ob_loader_create(&ldr, ds, OB_SPLIT_TRAIN, 0, 1, 0, 0, &err), &err,
                OB_ERR_INVALID_ARG, "batch_size", (char *)NULL);
    ob_err_clear(&err);
    check_error(ob_loader_create(&ldr, ds, OB_SPLIT_TRAIN, 0, 4, 26, 0, &err), &err,
                OB_ERR_INVALID_ARG, "100 examples", "26", (char *)NULL);
    ob_err_clear(&err);
    check_error(ob_loader_create(&ldr, NULL, OB_SPLIT_TRAIN, 0, 1, 1, 0, &err), &err,
                OB_ERR_INVALID_ARG, "NULL", (char *)NULL);
    assert_null(ldr);
    /* 4 x 25 = 100 fits exactly. */
    ldr = make_loader(ds, OB_SPLIT_TRAIN, 3, 4, 25, 0);
    ob_loader_destroy(ldr);
    ob_loader_destroy(NULL);
    ob_dataset_destroy(ds);

    ob_synth_text_spec ts = {.train_bytes = 10,
                             .eval_bytes = 0,
                             .alphabet = 4,
                             .p_follow = 0.5,
                             .context = 8,
                             .seed = 1};
    ob_dataset *tx = NULL;
    ob_err_clear(&err);
    check_error(ob_dataset_synthetic_text(&tx, &ts, &err), &err, OB_ERR_INVALID_ARG, "train_bytes",
                (char *)NULL);
    ts.train_bytes = 100; /* 100 / 8 - 1 = 11 windows per epoch */
    assert_int_equal(ob_dataset_synthetic_text(&tx, &ts, &err), OB_OK);
    ob_err_clear(&err);
    check_error(ob_loader_create(&ldr, tx, OB_SPLIT_TRAIN, 0, 2, 6, 0, &err), &err,
                OB_ERR_INVALID_ARG, "11 windows", (char *)NULL);
    ob_err_clear(&err);
    check_error(ob_loader_create(&ldr, tx, OB_SPLIT_EVAL, 0, 1, 1, 0, &err), &err,
                OB_ERR_INVALID_ARG, "eval split", "empty", (char *)NULL);
    ob_dataset_destroy(tx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_plain_unit),
        cmocka_unit_test(test_idx_gzip_standardized),
        cmocka_unit_test(test_idx_auto_classes_and_no_eval),
        cmocka_unit_test(test_idx_dir),
        cmocka_unit_test(test_idx_errors),
        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_text_dir),
        cmocka_unit_test(test_fortunes),
        cmocka_unit_test(test_classification_shards),
        cmocka_unit_test(test_text_shards),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_position_restore),
        cmocka_unit_test(test_eval_pass),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_loader_bad_args),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
