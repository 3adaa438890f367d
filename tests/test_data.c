/* Tests for datasets (onebit/data.h), part one: IDX files (plain and gzip, directories, every
 * kind of damage) and text corpora. The real Fashion-MNIST and fortunes corpora are checked when
 * installed and skipped, with a message, when not. Loaders are test_data_loaders.c's. */
#include "data_fixture.h"

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
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
