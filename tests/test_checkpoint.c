/* Checkpoint files and directories (onebit/checkpoint.h), on real HDF5 files in a temporary
 * directory: round trip, listing and pruning, the newest-valid fallback, every kind of damage
 * (a flipped byte anywhere, truncation, a missing or foreign rank file, a newer format), and
 * re-sharding the error buffers to other world sizes. */
#include "onebit/checkpoint.h"

#include <hdf5.h>
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

#include <cmocka.h>

#define D_PARAMS 1000 /* d: not a multiple of any N * B below, so there is padding */
#define BLOCK 64
#define HIST 7

static char root[256];

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* The fixture's tensor index: three tensors covering the D_PARAMS elements. */
static const ob_ckpt_tensor TABLE[] = {
    {"layer0.weight", 0, 2, {30, 30, 0, 0}},
    {"layer0.bias", 900, 1, {30, 0, 0, 0}},
    {"output.weight", 930, 3, {7, 5, 2, 0}},
};
#define NTAB (sizeof TABLE / sizeof *TABLE)

static size_t round_up(size_t n, size_t m)
{
    return (n + m - 1) / m * m;
}

/* A checkpoint's worth of data for world size n, filled with random numbers. */
typedef struct fixture {
    ob_ckpt_meta meta;
    float params[D_PARAMS], m[D_PARAMS], v[D_PARAMS];
    double hist[HIST];
    float *we, *se; /* (n, D), (n, C) */
    int n;
    const size_t *bounds; /* the server layout of se (nseg + 1 bounds), NULL: one segment */
    size_t nseg;
} fixture;

static fixture *make_fixture(int n, long step)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->n = n;
    ob_ckpt_meta *m = &f->meta;
    m->format_version = OB_CKPT_FORMAT_VERSION;
    m->step = step;
    m->phase = step >= 50;
    m->freeze_step = step >= 50 ? 50 : -1;
    m->world_size = n;
    m->num_params = D_PARAMS;
    m->padded_size = round_up(D_PARAMS, (size_t)n * BLOCK);
    m->chunk_size = m->padded_size / (size_t)n;
    m->block_size = BLOCK;
    m->seed = 42;
    m->last_ratio = NAN;
    m->last_norm = 3.5;
    m->bytes_sent = 123456789;
    m->bytes_warmup = 1000;
    m->bytes_compression = 2000;
    m->lr = 1e-3;
    m->train_loss = 0.25;
    m->loader_epoch = 3;
    m->loader_index = 96;
    m->loader_rng[0] = 1;
    m->loader_rng[1] = 2;
    m->loader_rng[2] = 3;
    m->loader_rng[3] = 0xffffffffffffffffull;
    m->wall_seconds = 12.5;
    m->loss_ema = 0.5;
    m->loss_at_freeze = 0.75;
    m->refit_scale = 0.625;
    m->loss_best = NAN;
    for (size_t i = 0; i < D_PARAMS; i++) {
        f->params[i] = frand();
        f->m[i] = frand();
        f->v[i] = fabsf(frand());
    }
    for (size_t i = 0; i < HIST; i++)
        f->hist[i] = 100.0 + (double)i;
    size_t D = (size_t)m->padded_size, C = (size_t)m->chunk_size;
    f->we = malloc((size_t)n * D * sizeof(float));
    f->se = malloc((size_t)n * C * sizeof(float));
    assert_non_null(f->we);
    assert_non_null(f->se);
    for (size_t i = 0; i < (size_t)n * D; i++)
        f->we[i] = frand() * 1e-3f; /* the padding too: it carries error in real runs */
    for (size_t i = 0; i < (size_t)n * C; i++)
        f->se[i] = frand() * 1e-3f;
    return f;
}

static void free_fixture(fixture *f)
{
    if (!f) return;
    free(f->we);
    free(f->se);
    free(f);
}

/* Writes and commits the fixture as checkpoint meta.step of job_dir. */
static void write_fixture(const char *job_dir, const fixture *f)
{
    ob_err err = {0};
    char dir[OB_CKPT_PATH_LEN];
    ob_ckpt_arrays a = {
        (float *)f->params, (float *)f->m, (float *)f->v, (double *)f->hist, HIST, TABLE, NTAB};
    size_t D = (size_t)f->meta.padded_size, C = (size_t)f->meta.chunk_size;
    assert_int_equal(ob_ckpt_prepare(job_dir, f->meta.step, dir, &err), OB_OK);
    assert_int_equal(ob_ckpt_write_state(dir, &f->meta, &a, "{\"name\":\"t\"}", &err), OB_OK);
    for (int r = 0; r < f->n; r++)
        assert_int_equal(ob_ckpt_write_rank(dir, &f->meta, r, f->we + (size_t)r * D,
                                            f->se + (size_t)r * C, f->bounds, f->nseg, &err),
                         OB_OK);
    assert_int_equal(ob_ckpt_commit(job_dir, f->meta.step, &err), OB_OK);
}

static void job_path(char *out, const char *name)
{
    snprintf(out, OB_CKPT_PATH_LEN, "%s/%s", root, name);
}

static void step_path(char *out, const char *job, long step, const char *file)
{
    char jd[OB_CKPT_PATH_LEN];
    job_path(jd, job);
    snprintf(out, OB_CKPT_PATH_LEN, "%s/step-%08ld%s%s", jd, step, file ? "/" : "",
             file ? file : "");
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

static long file_size(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (long)sb.st_size;
}

static void flip_byte(const char *path, long offset)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, offset, SEEK_SET), 0);
    int c = fgetc(f);
    assert_true(c != EOF);
    assert_int_equal(fseek(f, offset, SEEK_SET), 0);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

/* File offset of a dataset's data: the array itself (contiguous arrays) or its first chunk
 * (the chunked tables). */
static long chunk_offset(const char *path, const char *dataset)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
    assert_true(ds >= 0);
    hsize_t off[1] = {0}, size = 0;
    haddr_t addr = 0;
    unsigned mask = 0;
    hid_t space = H5Dget_space(ds), dcpl = H5Dget_create_plist(ds);
    if (H5Pget_layout(dcpl) == H5D_CONTIGUOUS)
        addr = H5Dget_offset(ds);
    else
        assert_true(H5Dget_chunk_info(ds, space, 0, off, &mask, &addr, &size) >= 0);
    assert_true(addr != HADDR_UNDEF && addr > 0);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Dclose(ds);
    H5Fclose(f);
    return (long)addr;
}

/* The positions of the padded vector (D) that rank `rank` of n holds in the server layout
 * b[0..nseg] (NULL, 0: one segment), in the order of its server error: pos gets D / n of them.
 * Written from the layout's definition in onebit/checkpoint.h, independently of the library. */
static void server_positions(const size_t *b, size_t nseg, size_t D, int n, int rank, size_t *pos)
{
    const size_t one[2] = {0, D};
    if (!b) {
        b = one;
        nseg = 1;
    }
    size_t k = 0;
    for (size_t s = 0; s < nseg; s++) {
        size_t L = (b[s + 1] - b[s]) / (size_t)n;
        for (size_t i = 0; i < L; i++)
            pos[k++] = b[s] + (size_t)rank * L + i;
    }
    assert_int_equal(k, D / (size_t)n);
}

/* The value the server-error fixtures hold at position p of the padded vector (exact in
 * float for every p used here). */
static float server_value(size_t p)
{
    return (float)p + 0.5f;
}

/* A fixture whose server errors hold server_value(p) at each position p, laid out in the
 * server layout b[0..nseg] (borrowed, NULL with 0: one segment); worker errors are random. */
static fixture *make_layout_fixture(int n, long step, const size_t *b, size_t nseg)
{
    fixture *f = make_fixture(n, step);
    size_t D = (size_t)f->meta.padded_size, C = (size_t)f->meta.chunk_size;
    size_t *pos = malloc(C * sizeof *pos);
    assert_non_null(pos);
    for (int r = 0; r < n; r++) {
        server_positions(b, nseg, D, n, r, pos);
        for (size_t k = 0; k < C; k++)
            f->se[(size_t)r * C + k] = server_value(pos[k]);
    }
    free(pos);
    f->bounds = b;
    f->nseg = nseg;
    return f;
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_round_trip(void **state)
{
    (void)state;
    fixture *f = make_fixture(3, 120);
    char jd[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
    job_path(jd, "roundtrip");
    write_fixture(jd, f);
    step_path(dir, "roundtrip", 120, NULL);

    ob_err err = {0};
    ob_ckpt_meta m;
    char *spec = NULL;
    assert_int_equal(ob_ckpt_verify(dir, NULL, &err), OB_OK);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, &spec, &err), OB_OK);
    assert_string_equal(spec, "{\"name\":\"t\"}");
    free(spec);
    assert_int_equal(m.step, 120);
    assert_int_equal(m.phase, 1);
    assert_int_equal(m.freeze_step, 50);
    assert_int_equal(m.world_size, 3);
    assert_int_equal(m.padded_size, f->meta.padded_size);
    assert_int_equal(m.chunk_size, f->meta.chunk_size);
    assert_int_equal(m.bytes_sent, 123456789);
    assert_int_equal(m.loader_index, 96);
    assert_int_equal(m.loader_rng[3], 0xffffffffffffffffull);
    assert_int_equal(m.v_norm_history_len, HIST);
    assert_true(isnan(m.last_ratio));
    assert_true(m.wall_seconds == 12.5);
    assert_true(m.loss_ema == 0.5);
    assert_true(m.refit_scale == 0.625);
    assert_true(m.loss_at_freeze == 0.75);
    assert_true(isnan(m.loss_best));

    float p[D_PARAMS], mm[D_PARAMS], v[D_PARAMS];
    double h[HIST];
    ob_ckpt_arrays a = {p, mm, v, h, HIST, NULL, 0};
    assert_int_equal(ob_ckpt_read_state(dir, &m, &a, &err), OB_OK);
    assert_memory_equal(p, f->params, sizeof p);
    assert_memory_equal(mm, f->m, sizeof mm);
    assert_memory_equal(v, f->v, sizeof v);
    assert_memory_equal(h, f->hist, sizeof h);
    ob_ckpt_tensor *tab = NULL;
    size_t ntab = 0;
    assert_int_equal(ob_ckpt_read_tensors(dir, &m, &tab, &ntab, &err), OB_OK);
    assert_int_equal(ntab, NTAB);
    for (size_t i = 0; i < NTAB; i++) {
        assert_string_equal(tab[i].name, TABLE[i].name);
        assert_int_equal(tab[i].offset, TABLE[i].offset);
        assert_int_equal(tab[i].ndim, TABLE[i].ndim);
        assert_memory_equal(tab[i].shape, TABLE[i].shape, sizeof tab[i].shape);
    }
    free(tab);

    /* A history of another length is refused (the run's freeze detector differs). */
    ob_ckpt_arrays wrong = {p, mm, v, h, HIST - 1, NULL, 0};
    assert_int_equal(ob_ckpt_read_state(dir, &m, &wrong, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "history of 7 entries"));

    /* Same world size: each rank gets its own buffers bit for bit. */
    size_t D = (size_t)m.padded_size, C = (size_t)m.chunk_size;
    float *we = malloc(D * sizeof *we), *se = malloc(C * sizeof *se);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(ob_ckpt_read_errors(dir, &m, r, 3, D, C, NULL, 0, we, se, &err), OB_OK);
        assert_memory_equal(we, f->we + (size_t)r * D, D * sizeof *we);
        assert_memory_equal(se, f->se + (size_t)r * C, C * sizeof *se);
    }
    free(we);
    free(se);
    free_fixture(f);
}

/* Retention counts only checkpoints that verify: two directories with higher step numbers that
 * do not (junk where state.h5 should be, an empty one) push no good checkpoint out, and the
 * newest verified one always stays. Before, keep 2 kept the two bad ones and removed 40..10. */
static void test_prune_counts_only_verified(void **state)
{
    (void)state;
    char jd[OB_CKPT_PATH_LEN], p[OB_CKPT_PATH_LEN];
    job_path(jd, "prune-verified");
    for (long s = 10; s <= 40; s += 10) {
        fixture *f = make_fixture(2, s);
        write_fixture(jd, f);
        free_fixture(f);
    }
    snprintf(p, sizeof p, "%s/step-99999999", jd);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/step-99999999/state.h5", jd);
    FILE *fp = fopen(p, "w");
    fputs("not a checkpoint", fp);
    fclose(fp);
    snprintf(p, sizeof p, "%s/step-99999998", jd);
    assert_int_equal(mkdir(p, 0755), 0);

    ob_err err = {0};
    int removed = -1;
    assert_int_equal(ob_ckpt_prune(jd, 2, &removed, &err), OB_OK);
    assert_int_equal(removed, 2);
    ob_ckpt_entry *list;
    size_t n;
    assert_int_equal(ob_ckpt_list(jd, &list, &n, &err), OB_OK);
    long steps[] = {99999999, 99999998, 40, 30};
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(list[i].step, steps[i]);
    free(list);
    char found[OB_CKPT_PATH_LEN];
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_find_latest(jd, found, &m, NULL, NULL, &err), OB_OK);
    assert_int_equal(m.step, 40);
    /* keep 1 again: still the newest verified one, never the bad ones in its place. */
    assert_int_equal(ob_ckpt_prune(jd, 1, &removed, &err), OB_OK);
    assert_int_equal(removed, 1);
    assert_int_equal(ob_ckpt_find_latest(jd, found, &m, NULL, NULL, &err), OB_OK);
    assert_int_equal(m.step, 40);
}

/* The steps of job_dir's checkpoints, newest first, into steps (at most 8); returns how many. */
static size_t list_steps(const char *jd, long *steps)
{
    ob_ckpt_entry *list;
    size_t n;
    ob_err err = {0};
    assert_int_equal(ob_ckpt_list(jd, &list, &n, &err), OB_OK);
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++)
        steps[i] = list[i].step;
    free(list);
    return n;
}

/* Retention with the writer's own record (ob_ckpt_prune_written): a recorded checkpoint whose
 * files are unchanged counts without being read, but one whose file was written to, replaced
 * or joined by another is verified in full like any other, so its damage still keeps it from
 * counting; removed checkpoints are forgotten. */
static void test_prune_written(void **state)
{
    (void)state;
    char jd[OB_CKPT_PATH_LEN], p[OB_CKPT_PATH_LEN], q[OB_CKPT_PATH_LEN];
    job_path(jd, "prune-written");
    ob_ckpt_written *w = NULL;
    ob_err err = {0};
    assert_int_equal(ob_ckpt_written_create(&w, &err), OB_OK);
    for (long s = 10; s <= 50; s += 10) {
        fixture *f = make_fixture(2, s);
        write_fixture(jd, f);
        free_fixture(f);
        assert_int_equal(ob_ckpt_written_add(w, jd, s, &err), OB_OK);
    }
    /* Step 50: damaged in place after it was recorded. */
    step_path(p, "prune-written", 50, "state.h5");
    flip_byte(p, chunk_offset(p, "/model/params") + 10);
    int removed = -1;
    long steps[8];
    assert_int_equal(ob_ckpt_prune_written(jd, 2, w, &removed, &err), OB_OK);
    assert_int_equal(removed, 2); /* 50 stays above, unverified; 40 and 30 kept; 20, 10 go */
    assert_int_equal(list_steps(jd, steps), 3);
    assert_true(steps[0] == 50 && steps[1] == 40 && steps[2] == 30);

    /* Step 40: a rank file replaced by a copy of the same bytes (a new inode); step 30: a file
     * added. Both verify in full and still count. */
    step_path(p, "prune-written", 40, "rank-00001.h5");
    snprintf(q, sizeof q, "%s.copy", p);
    copy_file(p, q);
    assert_int_equal(rename(q, p), 0);
    step_path(p, "prune-written", 30, "notes.txt");
    FILE *fp = fopen(p, "w");
    fputs("x", fp);
    fclose(fp);
    assert_int_equal(ob_ckpt_prune_written(jd, 2, w, &removed, &err), OB_OK);
    assert_int_equal(list_steps(jd, steps), 3);
    assert_true(steps[0] == 50 && steps[1] == 40 && steps[2] == 30);

    /* Now damage 40 in place too: it no longer counts, and 30 is the only other one kept. */
    step_path(p, "prune-written", 40, "rank-00000.h5");
    flip_byte(p, chunk_offset(p, "/optim/worker_error") + 3);
    fixture *f = make_fixture(2, 60);
    write_fixture(jd, f);
    free_fixture(f);
    assert_int_equal(ob_ckpt_written_add(w, jd, 60, &err), OB_OK);
    assert_int_equal(ob_ckpt_prune_written(jd, 2, w, &removed, &err), OB_OK);
    assert_int_equal(removed, 0);
    assert_int_equal(list_steps(jd, steps), 4); /* 60, 50 (bad), 40 (bad), 30 */
    assert_true(steps[0] == 60 && steps[3] == 30);
    ob_ckpt_written_destroy(w);
    ob_ckpt_written_destroy(NULL);
}

static void test_list_and_prune(void **state)
{
    (void)state;
    char jd[OB_CKPT_PATH_LEN], p[OB_CKPT_PATH_LEN];
    job_path(jd, "prune");
    for (long s = 10; s <= 30; s += 10) {
        fixture *f = make_fixture(2, s);
        write_fixture(jd, f);
        free_fixture(f);
    }
    ob_err err = {0};
    /* Leftovers: a newer write in progress and an old one that never finished. */
    assert_int_equal(ob_ckpt_prepare(jd, 40, p, &err), OB_OK);
    assert_int_equal(ob_ckpt_prepare(jd, 5, p, &err), OB_OK);
    /* Names that are not checkpoints are left alone. */
    snprintf(p, sizeof p, "%s/notes.txt", jd);
    FILE *fp = fopen(p, "w");
    fputs("x", fp);
    fclose(fp);
    snprintf(p, sizeof p, "%s/step-12x", jd);
    mkdir(p, 0755);

    ob_ckpt_entry *list;
    size_t n;
    assert_int_equal(ob_ckpt_list(jd, &list, &n, &err), OB_OK);
    assert_int_equal(n, 5);
    long steps[] = {40, 30, 20, 10, 5};
    int committed[] = {0, 1, 1, 1, 0};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(list[i].step, steps[i]);
        assert_int_equal(list[i].committed, committed[i]);
    }
    free(list);

    int removed = -1;
    assert_int_equal(ob_ckpt_prune(jd, 2, &removed, &err), OB_OK);
    assert_int_equal(removed, 1);
    assert_int_equal(ob_ckpt_list(jd, &list, &n, &err), OB_OK);
    assert_int_equal(n, 3); /* 40.tmp (newer: may still be written), 30, 20 */
    assert_int_equal(list[0].step, 40);
    assert_int_equal(list[1].step, 30);
    assert_int_equal(list[2].step, 20);
    free(list);
    assert_int_equal(access(p, F_OK), 0);
    assert_int_equal(ob_ckpt_prune(jd, 0, NULL, &err), OB_ERR_INVALID_ARG);

    /* A missing job directory is an empty list, not an error. */
    job_path(p, "never-created");
    assert_int_equal(ob_ckpt_list(p, &list, &n, &err), OB_OK);
    assert_int_equal(n, 0);
    assert_null(list);
}

typedef struct skips {
    int count;
    char reasons[8][OB_ERR_MSG_LEN + OB_CKPT_PATH_LEN];
} skips;

static void record_skip(const char *path, const char *reason, void *user)
{
    skips *s = user;
    if (s->count < 8) snprintf(s->reasons[s->count], sizeof s->reasons[0], "%s: %s", path, reason);
    s->count++;
}

/* Damage to the newest checkpoint: it is passed over with its reason, the previous one used. */
static void check_fallback(const char *job, const char *needle, long expect_step)
{
    char jd[OB_CKPT_PATH_LEN], out[OB_CKPT_PATH_LEN];
    job_path(jd, job);
    skips s = {0};
    ob_err err = {0};
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_find_latest(jd, out, &m, record_skip, &s, &err), OB_OK);
    assert_int_equal(m.step, expect_step);
    assert_int_equal(s.count, 1);
    if (!strstr(s.reasons[0], needle)) fail_msg("reason '%s' lacks '%s'", s.reasons[0], needle);
}

static void make_job(const char *job, int n)
{
    char jd[OB_CKPT_PATH_LEN];
    job_path(jd, job);
    for (long s = 10; s <= 20; s += 10) {
        fixture *f = make_fixture(n, s);
        write_fixture(jd, f);
        free_fixture(f);
    }
}

static void test_fallback_flipped_data(void **state)
{
    (void)state;
    make_job("flip", 2);
    char p[OB_CKPT_PATH_LEN];
    step_path(p, "flip", 20, "state.h5");
    flip_byte(p, chunk_offset(p, "/model/params") + 10);
    check_fallback("flip", "data error detected by its checksum (XXH64", 10);

    make_job("flip-rank", 3);
    step_path(p, "flip-rank", 20, "rank-00001.h5");
    flip_byte(p, chunk_offset(p, "/optim/server_error") + 3);
    check_fallback("flip-rank", "rank-00001.h5", 10);
}

/* The checkpoint library's checksum (ckpt_h5io.h): XXH64 with seed 0. */
uint64_t ob__ck_sum64(const void *data, size_t n);

/* A dataset's data and its "xxh64" attribute (0 when it has none). */
static float *read_array(const char *path, const char *name, size_t *n, uint64_t *sum)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT), space = H5Dget_space(ds);
    hsize_t dims = 0;
    H5Sget_simple_extent_dims(space, &dims, NULL);
    float *x = malloc(dims * sizeof *x + 1);
    assert_true(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0);
    *sum = 0;
    if (H5Aexists(ds, "xxh64") > 0) {
        hid_t a = H5Aopen(ds, "xxh64", H5P_DEFAULT);
        assert_true(H5Aread(a, H5T_NATIVE_UINT64, sum) >= 0);
        H5Aclose(a);
    }
    *n = dims;
    H5Sclose(space);
    H5Dclose(ds);
    H5Fclose(f);
    return x;
}

/* Arrays carry the XXH64 of their bytes (the reference algorithm's values), a dataset without a
 * checksum is refused, and a checkpoint written before (Fletcher32 chunks) still verifies and
 * still tells its damage. */
static void test_checksums(void **state)
{
    (void)state;
    unsigned char big[771];
    for (int i = 0; i < 768; i++)
        big[i] = (unsigned char)i;
    memcpy(big + 768, "xyz", 3);
    assert_true(ob__ck_sum64("", 0) == 0xef46db3751d8e999ull);
    assert_true(ob__ck_sum64("a", 1) == 0xd24ec4f1a98c6e5bull);
    assert_true(ob__ck_sum64("abc", 3) == 0x44bc2cf5ad770999ull);
    assert_true(ob__ck_sum64(big, sizeof big) == 0xe921a1b45bd779f8ull);

    make_job("sum", 2);
    char p[OB_CKPT_PATH_LEN], d[OB_CKPT_PATH_LEN];
    step_path(p, "sum", 20, "state.h5");
    step_path(d, "sum", 20, NULL);
    size_t n;
    uint64_t sum;
    float *x = read_array(p, "/model/params", &n, &sum);
    assert_true(n > 0 && sum == ob__ck_sum64(x, n * sizeof *x));
    assert_int_equal(ob_ckpt_verify(d, NULL, NULL), OB_OK);

    /* The layout of earlier releases: exp_avg in Fletcher32 chunks, no xxh64. */
    float *m = read_array(p, "/optim/exp_avg", &n, &sum);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0 && H5Ldelete(f, "/optim/exp_avg", H5P_DEFAULT) >= 0);
    hsize_t dims = n, chunk = n;
    hid_t space = H5Screate_simple(1, &dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    assert_true(H5Pset_chunk(dcpl, 1, &chunk) >= 0 && H5Pset_fletcher32(dcpl) >= 0);
    hid_t ds =
        H5Dcreate2(f, "/optim/exp_avg", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m) >= 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
    ob_err err = {0};
    assert_int_equal(ob_ckpt_verify(d, NULL, &err), OB_OK);
    flip_byte(p, chunk_offset(p, "/optim/exp_avg") + 5);
    assert_int_equal(ob_ckpt_verify(d, NULL, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "Fletcher32"));

    /* Neither checksum: refused, though every byte is as written. */
    step_path(p, "sum", 10, "state.h5");
    step_path(d, "sum", 10, NULL);
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    ds = H5Dopen2(f, "/optim/exp_avg_sq", H5P_DEFAULT);
    assert_true(ds >= 0 && H5Adelete(ds, "xxh64") >= 0);
    H5Dclose(ds);
    H5Fclose(f);
    assert_int_equal(ob_ckpt_verify(d, NULL, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "/optim/exp_avg_sq carries no checksum"));
    free(x);
    free(m);
}

/* Arrays larger than the piece the writer and the verifier work in (1 MiB): the stored XXH64,
 * taken piece by piece, is the one-pass XXH64 of the whole array, and damage in any piece, the
 * last partial one included, is found by the verifier's piecewise read. */
static void test_checksum_pieces(void **state)
{
    (void)state;
    const size_t d = 3 * ((size_t)1 << 18) + 7; /* three whole pieces and 28 bytes */
    float *x = malloc(3 * d * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < 3 * d; i++)
        x[i] = (float)((i * 2654435761u) % 1000003) * 1e-3f;
    ob_ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.format_version = OB_CKPT_FORMAT_VERSION;
    m.step = 10;
    m.freeze_step = -1;
    m.world_size = 1;
    m.num_params = d;
    m.last_ratio = m.train_loss = m.loss_ema = m.loss_at_freeze = m.loss_best = NAN;
    m.refit_scale = 1.0;
    m.ranks_per_node = 1;
    ob_ckpt_arrays a = {x, x + d, x + 2 * d, NULL, 0, NULL, 0};
    char jd[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN], p[OB_CKPT_PATH_LEN], q[OB_CKPT_PATH_LEN];
    job_path(jd, "pieces");
    ob_err err = {0};
    assert_int_equal(ob_ckpt_prepare(jd, 10, dir, &err), OB_OK);
    assert_int_equal(ob_ckpt_write_state(dir, &m, &a, "{}", &err), OB_OK);
    assert_int_equal(ob_ckpt_write_rank(dir, &m, 0, NULL, NULL, NULL, 0, &err), OB_OK);
    assert_int_equal(ob_ckpt_commit(jd, 10, &err), OB_OK);
    step_path(p, "pieces", 10, "state.h5");
    step_path(dir, "pieces", 10, NULL);
    size_t n;
    uint64_t sum;
    float *back = read_array(p, "/optim/exp_avg", &n, &sum);
    assert_int_equal(n, d);
    assert_memory_equal(back, x + d, d * sizeof *x);
    assert_true(sum == ob__ck_sum64(x + d, d * sizeof *x));
    free(back);
    assert_int_equal(ob_ckpt_verify(dir, NULL, &err), OB_OK);

    /* One byte changed in the third piece, then (on a fresh copy) in the partial last one. */
    long where[] = {(long)(2 * ((size_t)1 << 20) + 12345), (long)(d * sizeof *x - 3)};
    snprintf(q, sizeof q, "%s.orig", p);
    copy_file(p, q);
    for (int i = 0; i < 2; i++) {
        copy_file(q, p);
        flip_byte(p, chunk_offset(p, "/optim/exp_avg_sq") + where[i]);
        assert_int_equal(ob_ckpt_verify(dir, NULL, &err), OB_ERR_CORRUPT);
        if (!strstr(err.msg, "/optim/exp_avg_sq: data error detected by its checksum"))
            fail_msg("piece %d: %s", i, err.msg);
    }
    unlink(q);
    free(x);
}

static void test_fallback_truncated_missing_foreign(void **state)
{
    (void)state;
    char p[OB_CKPT_PATH_LEN], q[OB_CKPT_PATH_LEN];
    make_job("trunc", 2);
    step_path(p, "trunc", 20, "state.h5");
    assert_int_equal(truncate(p, file_size(p) / 2), 0);
    check_fallback("trunc", "state.h5", 10);

    make_job("trunc-rank", 2);
    step_path(p, "trunc-rank", 20, "rank-00001.h5");
    assert_int_equal(truncate(p, file_size(p) - 100), 0);
    check_fallback("trunc-rank", "rank-00001.h5", 10);

    make_job("missing", 3);
    step_path(p, "missing", 20, "rank-00002.h5");
    assert_int_equal(unlink(p), 0);
    check_fallback("missing", "rank-00002.h5: missing", 10);

    make_job("empty", 2);
    step_path(p, "empty", 20, "state.h5");
    FILE *fp = fopen(p, "w");
    fclose(fp);
    check_fallback("empty", "not a readable HDF5 file", 10);

    /* A rank file of another step, copied in by mistake. */
    make_job("foreign", 2);
    step_path(p, "foreign", 10, "rank-00001.h5");
    step_path(q, "foreign", 20, "rank-00001.h5");
    copy_file(p, q);
    check_fallback("foreign", "written for step 10", 10);

    /* A .tmp directory newer than everything: never used. */
    make_job("tmp", 2);
    char jd[OB_CKPT_PATH_LEN];
    job_path(jd, "tmp");
    ob_err err = {0};
    assert_int_equal(ob_ckpt_prepare(jd, 30, p, &err), OB_OK);
    check_fallback("tmp", "incomplete", 20);

    /* Nothing usable at all. */
    make_job("none", 1);
    for (long s = 10; s <= 20; s += 10) {
        step_path(p, "none", s, "state.h5");
        assert_int_equal(unlink(p), 0);
    }
    job_path(jd, "none");
    skips s = {0};
    assert_int_equal(ob_ckpt_find_latest(jd, p, NULL, record_skip, &s, &err), OB_ERR_NOT_FOUND);
    assert_int_equal(s.count, 2);
}

/* Rewrites one numeric attribute of a file in place, from *v of memory type mem_type. */
static void set_attr(const char *path, const char *name, hid_t mem_type, const void *v)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(H5Awrite(a, mem_type, v) >= 0);
    H5Aclose(a);
    H5Fclose(f);
}

static void set_attr_i64(const char *path, const char *name, int64_t v)
{
    set_attr(path, name, H5T_NATIVE_INT64, &v);
}

static void set_attr_u64(const char *path, const char *name, uint64_t v)
{
    set_attr(path, name, H5T_NATIVE_UINT64, &v);
}

/* Replaces an attribute by one of n fixed-length strings of `size` bytes (n 0: a scalar). */
static void replace_str_attr(const char *path, const char *name, hsize_t n, size_t size)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    assert_true(H5Adelete(f, name) >= 0);
    hid_t t = H5Tcopy(H5T_C_S1);
    assert_true(H5Tset_size(t, size) >= 0);
    hid_t space = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, t, space, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    size_t bytes = (n ? (size_t)n : 1) * size;
    char *fill = malloc(bytes);
    assert_non_null(fill);
    memset(fill, 'A', bytes);
    assert_true(H5Awrite(a, t, fill) >= 0);
    free(fill);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(t);
    H5Fclose(f);
}

/* Files made to hurt the reader: a string attribute with a million elements (the reader once
 * sized its buffer for one), sizes whose product wraps around 2^64. Each is refused as corrupt
 * before anything is allocated from it. */
static void test_hostile_attributes(void **state)
{
    (void)state;
    char p[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
    ob_err err = {0};
    ob_ckpt_meta m;

    make_job("magic-array", 1);
    step_path(p, "magic-array", 20, "state.h5");
    step_path(dir, "magic-array", 20, NULL);
    replace_str_attr(p, "magic", 1000000, 18);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "attribute 'magic' is not a single string"));

    make_job("spec-array", 1);
    step_path(p, "spec-array", 20, "state.h5");
    step_path(dir, "spec-array", 20, NULL);
    replace_str_attr(p, "spec_json", 3, 4096);
    char *spec = NULL;
    assert_int_equal(ob_ckpt_read_meta(dir, &m, &spec, &err), OB_ERR_CORRUPT);
    assert_null(spec);
    assert_non_null(strstr(err.msg, "attribute 'spec_json' is not a single string"));

    /* A scalar string of 100 MB is refused by size, not read. */
    make_job("spec-huge", 1);
    step_path(p, "spec-huge", 20, "state.h5");
    step_path(dir, "spec-huge", 20, NULL);
    replace_str_attr(p, "spec_json", 0, (size_t)100 << 20);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, &spec, &err), OB_ERR_CORRUPT);
    assert_null(spec);

    /* chunk_size * world_size wraps around 2^64 onto padded_size. */
    make_job("wrap", 2);
    step_path(p, "wrap", 20, "state.h5");
    step_path(dir, "wrap", 20, NULL);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_OK);
    uint64_t wrapped = ((uint64_t)1 << 63) + m.padded_size / 2;
    assert_true(wrapped * 2 == m.padded_size && wrapped % m.block_size == 0);
    set_attr_u64(p, "chunk_size", wrapped);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "inconsistent sizes"));
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_ERR_CORRUPT);

    /* Padding far beyond what the world size and block size can explain. */
    make_job("padding", 1);
    step_path(p, "padding", 20, "state.h5");
    step_path(dir, "padding", 20, NULL);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_OK);
    uint64_t big = m.padded_size + ((uint64_t)1 << 40) * m.block_size;
    set_attr_u64(p, "padded_size", big);
    set_attr_u64(p, "chunk_size", big);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "inconsistent sizes"));
}

/* ---- the tensor index ---------------------------------------------------------------------- */

/* Replaces /model/tensors of the state file at path with rows (a compound type like the one
 * written, whose name member has name_size bytes; extra adds a fifth member). */
static void replace_index(const char *path, const ob_ckpt_tensor *rows, size_t n, size_t name_size,
                          int extra)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    assert_true(H5Ldelete(f, "/model/tensors", H5P_DEFAULT) >= 0);
    hsize_t sdim = OB_CKPT_TENSOR_MAX_DIM, dims = n;
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, name_size);
    hid_t shape = H5Tarray_create2(H5T_NATIVE_UINT64, 1, &sdim);
    size_t size = name_size + 8 + 4 + 8 * OB_CKPT_TENSOR_MAX_DIM + (extra ? 8 : 0);
    hid_t t = H5Tcreate(H5T_COMPOUND, size);
    H5Tinsert(t, "name", 0, str);
    H5Tinsert(t, "offset", name_size, H5T_NATIVE_UINT64);
    H5Tinsert(t, "ndim", name_size + 8, H5T_NATIVE_UINT32);
    H5Tinsert(t, "shape", name_size + 12, shape);
    if (extra) H5Tinsert(t, "extra", size - 8, H5T_NATIVE_UINT64);
    unsigned char *buf = calloc(n ? n : 1, size);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        unsigned char *row = buf + i * size;
        memcpy(row, rows[i].name,
               strlen(rows[i].name) < name_size ? strlen(rows[i].name) : name_size);
        memcpy(row + name_size, &rows[i].offset, 8);
        memcpy(row + name_size + 8, &rows[i].ndim, 4);
        memcpy(row + name_size + 12, rows[i].shape, sizeof rows[i].shape);
    }
    hid_t space = H5Screate_simple(1, &dims, NULL);
    hid_t ds = H5Dcreate2(f, "/model/tensors", t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(ds >= 0);
    assert_true(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    free(buf);
    H5Dclose(ds);
    H5Sclose(space);
    H5Tclose(t);
    H5Tclose(shape);
    H5Tclose(str);
    H5Fclose(f);
}

/* Writes a job with the fixture, replaces its index and expects verify and read_tensors to
 * refuse it as corrupt with a message containing want. */
static void expect_bad_index(const char *job, const ob_ckpt_tensor *rows, size_t n,
                             size_t name_size, int extra, const char *want)
{
    char jd[OB_CKPT_PATH_LEN], p[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
    fixture *f = make_fixture(1, 20);
    job_path(jd, job);
    write_fixture(jd, f);
    free_fixture(f);
    step_path(p, job, 20, "state.h5");
    step_path(dir, job, 20, NULL);
    replace_index(p, rows, n, name_size, extra);
    ob_err err = {0};
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_OK);
    ob_ckpt_tensor *tab = (ob_ckpt_tensor *)1;
    size_t ntab = 7;
    assert_int_equal(ob_ckpt_read_tensors(dir, &m, &tab, &ntab, &err), OB_ERR_CORRUPT);
    assert_null(tab);
    assert_int_equal(ntab, 0);
    if (!strstr(err.msg, want)) fail_msg("'%s' does not contain '%s'", err.msg, want);
    assert_int_equal(ob_ckpt_verify(dir, NULL, &err), OB_ERR_CORRUPT);
    if (!strstr(err.msg, want)) fail_msg("verify: '%s' does not contain '%s'", err.msg, want);
}

/* An index crafted to hurt: offsets past the buffer, shapes whose product wraps around 2^64,
 * gaps, overlaps, a foreign element type. Each is refused before any slice is taken. */
static void test_hostile_index(void **state)
{
    (void)state;
    ob_ckpt_tensor t[NTAB];
    memcpy(t, TABLE, sizeof t);
    /* Untouched, the replacement itself verifies (the helper writes a valid index). */
    {
        char jd[OB_CKPT_PATH_LEN], p[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
        fixture *f = make_fixture(1, 20);
        job_path(jd, "index-ok");
        write_fixture(jd, f);
        free_fixture(f);
        step_path(p, "index-ok", 20, "state.h5");
        step_path(dir, "index-ok", 20, NULL);
        replace_index(p, t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 0);
        ob_err err = {0};
        assert_int_equal(ob_ckpt_verify(dir, NULL, &err), OB_OK);
    }
    t[2].offset = 1u << 30; /* past the end of the 1000 elements */
    expect_bad_index("index-offset", t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 0,
                     "tensor 'output.weight' starts at 1073741824, expected 930");
    memcpy(t, TABLE, sizeof t);
    t[1].shape[0] = 31; /* overlaps the next tensor and runs past the end */
    expect_bad_index("index-overlap", t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 0,
                     "tensor 'output.weight' starts at 930, expected 931");
    memcpy(t, TABLE, sizeof t);
    t[2].shape[0] = 10; /* the last one runs past the buffer: 930 + 100 */
    expect_bad_index("index-past", t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 0, "runs past the buffer");
    memcpy(t, TABLE, sizeof t);
    t[0].shape[0] = (uint64_t)1 << 32; /* (2^32, 2^32): the product wraps to 0 */
    t[0].shape[1] = (uint64_t)1 << 32;
    expect_bad_index("index-wrap", t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 0,
                     "does not fit a buffer of 1000");
    memcpy(t, TABLE, sizeof t);
    t[0].offset = UINT64_MAX; /* offset + size wraps */
    expect_bad_index("index-offset-wrap", t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 0,
                     "starts at 18446744073709551615");
    expect_bad_index("index-short", t + 1, NTAB - 1, OB_CKPT_TENSOR_NAME_LEN, 0, "expected 0");
    memcpy(t, TABLE, sizeof t);
    t[2].ndim = 9;
    expect_bad_index("index-ndim", t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 0, "9 dimensions");
    memcpy(t, TABLE, sizeof t);
    strcpy(t[1].name, "layer0.weight");
    expect_bad_index("index-dup", t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 0,
                     "'layer0.weight' appears twice");
    memcpy(t, TABLE, sizeof t);
    strcpy(t[1].name, "../../etc");
    expect_bad_index("index-chars", t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 0,
                     "tensor 1: the name is empty");
    memcpy(t, TABLE, sizeof t);
    expect_bad_index("index-type", t, NTAB, 200, 0, "/model/tensors has the wrong element type");
    expect_bad_index("index-members", t, NTAB, OB_CKPT_TENSOR_NAME_LEN, 1, "wrong element type");
    expect_bad_index("index-empty", t, 0, OB_CKPT_TENSOR_NAME_LEN, 0, "0 entries");

    /* The checks themselves, on rules a file cannot reach through HDF5's string conversion. */
    ob_err err = {0};
    memcpy(t, TABLE, sizeof t);
    assert_int_equal(ob_ckpt_check_tensors(t, NTAB, D_PARAMS, "x", &err), OB_OK);
    memset(t[0].name, 'a', sizeof t[0].name); /* not terminated */
    assert_int_equal(ob_ckpt_check_tensors(t, NTAB, D_PARAMS, "x", &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "tensor 0: the name"));
    memcpy(t, TABLE, sizeof t);
    t[0].name[0] = '\0';
    assert_int_equal(ob_ckpt_check_tensors(t, NTAB, D_PARAMS, "x", &err), OB_ERR_CORRUPT);
    memcpy(t, TABLE, sizeof t);
    t[1].shape[2] = 5; /* a dimension past ndim */
    assert_int_equal(ob_ckpt_check_tensors(t, NTAB, D_PARAMS, "x", &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "past ndim"));
    memcpy(t, TABLE, sizeof t);
    assert_int_equal(ob_ckpt_check_tensors(t, NTAB, D_PARAMS + 1, "x", &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "cover 1000 of 1001"));

    /* A writer is refused a bad table too, as an invalid argument. */
    fixture *f = make_fixture(1, 20);
    char jd[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
    job_path(jd, "index-write");
    assert_int_equal(ob_ckpt_prepare(jd, 20, dir, &err), OB_OK);
    t[0].ndim = 0;
    ob_ckpt_arrays a = {f->params, f->m, f->v, f->hist, HIST, t, NTAB};
    assert_int_equal(ob_ckpt_write_state(dir, &f->meta, &a, "{}", &err), OB_ERR_INVALID_ARG);
    free_fixture(f);
}

/* A checkpoint written before the index existed still verifies and reads: no index. */
static void test_no_index(void **state)
{
    (void)state;
    char jd[OB_CKPT_PATH_LEN], p[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
    fixture *f = make_fixture(2, 20);
    job_path(jd, "no-index");
    write_fixture(jd, f);
    step_path(p, "no-index", 20, "state.h5");
    step_path(dir, "no-index", 20, NULL);
    hid_t h = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(h >= 0);
    assert_true(H5Ldelete(h, "/model/tensors", H5P_DEFAULT) >= 0);
    H5Fclose(h);
    ob_err err = {0};
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_OK);
    ob_ckpt_tensor *tab = NULL;
    size_t ntab = 3;
    assert_int_equal(ob_ckpt_read_tensors(dir, &m, &tab, &ntab, &err), OB_OK);
    assert_null(tab);
    assert_int_equal(ntab, 0);
    float pp[D_PARAMS], mm[D_PARAMS], v[D_PARAMS];
    double hh[HIST];
    ob_ckpt_arrays a = {pp, mm, v, hh, HIST, NULL, 0};
    assert_int_equal(ob_ckpt_read_state(dir, &m, &a, &err), OB_OK);
    assert_memory_equal(pp, f->params, sizeof pp);

    /* Exported, it is one tensor "params" of shape (d): the safetensors file byte for byte. */
    char out[OB_CKPT_PATH_LEN];
    snprintf(out, sizeof out, "%s/no-index.safetensors", root);
    size_t count = 0;
    assert_int_equal(ob_ckpt_export(dir, OB_CKPT_EXPORT_SAFETENSORS, 0, out, &count, &err), OB_OK);
    assert_int_equal(count, 1);
    const char *want = "{\"__metadata__\":{\"format\":\"onebit\",\"step\":\"20\"},\"params\":"
                       "{\"dtype\":\"F32\",\"shape\":[1000],\"data_offsets\":[0,4000]}}";
    size_t hlen = (strlen(want) + 7) / 8 * 8;
    FILE *fp = fopen(out, "rb");
    assert_non_null(fp);
    unsigned char *buf = malloc(8 + hlen + 4000 + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, 8 + hlen + 4000 + 1, fp), 8 + hlen + 4000);
    fclose(fp);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    assert_int_equal(n, hlen);
    assert_memory_equal(buf + 8, want, strlen(want));
    for (size_t i = strlen(want); i < hlen; i++)
        assert_int_equal(buf[8 + i], ' ');
    assert_memory_equal(buf + 8 + hlen, f->params, 4000);
    free(buf);
    /* An export never leaves a partial file: a directory that does not exist fails cleanly. */
    snprintf(out, sizeof out, "%s/no/such/dir/x.npz", root);
    assert_int_equal(ob_ckpt_export(dir, OB_CKPT_EXPORT_NPZ, 1, out, &count, &err), OB_ERR_IO);
    assert_non_null(strstr(err.msg, "x.npz.tmp"));
    free_fixture(f);
}

static void test_bad_metadata(void **state)
{
    (void)state;
    char p[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
    ob_err err = {0};
    ob_ckpt_meta m;

    make_job("newer", 1);
    step_path(p, "newer", 20, "state.h5");
    step_path(dir, "newer", 20, NULL);
    set_attr_i64(p, "format_version", OB_CKPT_FORMAT_VERSION + 1);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "format version 2, this build reads version 1"));

    make_job("phase", 1);
    step_path(p, "phase", 20, "state.h5");
    step_path(dir, "phase", 20, NULL);
    set_attr_i64(p, "freeze_step", 25); /* after the step */
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "freeze step 25"));

    make_job("world", 2);
    step_path(p, "world", 20, "state.h5");
    step_path(dir, "world", 20, NULL);
    set_attr_i64(p, "world_size", 3); /* sizes no longer add up */
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "inconsistent sizes"));

    /* The divergence guard's loss tracker: a loss is NaN (none yet) or finite and >= 0; the
     * attributes are optional (older checkpoints): absent, they read as NaN. */
    const double bad_loss[] = {-1.0, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad_loss / sizeof *bad_loss; i++) {
        make_job("tracker", 1);
        step_path(p, "tracker", 20, "state.h5");
        step_path(dir, "tracker", 20, NULL);
        set_attr(p,
                 i == 0   ? "loss_ema"
                 : i == 1 ? "loss_at_freeze"
                          : "loss_best",
                 H5T_NATIVE_DOUBLE, &bad_loss[i]);
        assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_ERR_CORRUPT);
        assert_non_null(strstr(err.msg, "is not a loss"));
    }
    make_job("no-tracker", 1);
    step_path(p, "no-tracker", 20, "state.h5");
    step_path(dir, "no-tracker", 20, NULL);
    hid_t fh = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(fh >= 0);
    assert_true(H5Adelete(fh, "loss_ema") >= 0 && H5Adelete(fh, "loss_at_freeze") >= 0 &&
                H5Adelete(fh, "loss_best") >= 0);
    H5Fclose(fh);
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_OK);
    assert_true(isnan(m.loss_ema) && isnan(m.loss_at_freeze) && isnan(m.loss_best));

    /* A refit's scale is in (0, 1]; optional (older checkpoints): absent, it reads as 1. */
    const double bad_scale[] = {0.0, -0.5, 1.5, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_scale / sizeof *bad_scale; i++) {
        make_job("scale", 1);
        step_path(p, "scale", 20, "state.h5");
        step_path(dir, "scale", 20, NULL);
        set_attr(p, "refit_scale", H5T_NATIVE_DOUBLE, &bad_scale[i]);
        assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_ERR_CORRUPT);
        assert_non_null(strstr(err.msg, "refit scale"));
    }
    make_job("no-scale", 1);
    step_path(p, "no-scale", 20, "state.h5");
    step_path(dir, "no-scale", 20, NULL);
    fh = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(fh >= 0);
    assert_true(H5Adelete(fh, "refit_scale") >= 0);
    H5Fclose(fh);
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_OK);
    assert_true(m.refit_scale == 1.0);

    /* Not a checkpoint directory at all. */
    job_path(dir, "nothing-here");
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_ERR_NOT_FOUND);
}

/* The stride of the byte flips: every 7th byte, or every 37th in a sanitizer's build
 * (ONEBIT_TEST_SANITIZED, scripts/test.sh), where each of HDF5's allocations costs a page fault
 * and the uninstrumented run has swept every 7th byte already. */
static long flip_stride(void)
{
    const char *s = getenv("ONEBIT_TEST_SANITIZED");
    return s && *s && strcmp(s, "0") != 0 ? 37 : 7;
}

/* Every byte of a file flipped in turn (a stride through it): the checkpoint either fails to
 * verify or reads back exactly as written. Nothing damaged is ever taken as good. */
static void sweep_file(const char *job, const char *file, const fixture *f, int *detected,
                       int *harmless)
{
    const long stride = flip_stride();
    char p[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN], orig[OB_CKPT_PATH_LEN + 8];
    step_path(p, job, 20, file);
    step_path(dir, job, 20, NULL);
    snprintf(orig, sizeof orig, "%s.orig", p);
    copy_file(p, orig);
    long size = file_size(p);
    size_t D = (size_t)f->meta.padded_size, C = (size_t)f->meta.chunk_size;
    float *we = malloc(D * sizeof *we), *se = malloc(C * sizeof *se);
    for (long off = 0; off < size; off += stride) {
        copy_file(orig, p);
        flip_byte(p, off);
        ob_err err = {0};
        ob_ckpt_meta m;
        if (ob_ckpt_verify(dir, &m, &err) != OB_OK) {
            (*detected)++;
            continue;
        }
        /* It verified: then everything must be exactly what was written. */
        float pp[D_PARAMS], mm[D_PARAMS], v[D_PARAMS];
        double h[HIST];
        char *spec = NULL;
        ob_ckpt_arrays a = {pp, mm, v, h, HIST, NULL, 0};
        assert_int_equal(ob_ckpt_read_meta(dir, &m, &spec, &err), OB_OK);
        assert_int_equal(ob_ckpt_read_state(dir, &m, &a, &err), OB_OK);
        ob_ckpt_tensor *tab = NULL;
        size_t ntab = 0;
        assert_int_equal(ob_ckpt_read_tensors(dir, &m, &tab, &ntab, &err), OB_OK);
        assert_int_equal(ntab, NTAB);
        assert_memory_equal(tab, TABLE, sizeof TABLE);
        free(tab);
        int same = !memcmp(pp, f->params, sizeof pp) && !memcmp(mm, f->m, sizeof mm) &&
                   !memcmp(v, f->v, sizeof v) && !memcmp(h, f->hist, sizeof h) &&
                   !strcmp(spec, "{\"name\":\"t\"}") && m.step == f->meta.step &&
                   m.freeze_step == f->meta.freeze_step && m.bytes_sent == f->meta.bytes_sent &&
                   m.loader_index == f->meta.loader_index &&
                   !memcmp(m.loader_rng, f->meta.loader_rng, sizeof m.loader_rng) &&
                   m.wall_seconds == f->meta.wall_seconds && m.lr == f->meta.lr;
        for (int r = 0; same && r < f->n; r++) {
            assert_int_equal(
                ob_ckpt_read_errors(dir, &m, r, f->n, D, C, f->bounds, f->nseg, we, se, &err),
                OB_OK);
            same = !memcmp(we, f->we + (size_t)r * D, D * sizeof *we) &&
                   !memcmp(se, f->se + (size_t)r * C, C * sizeof *se);
        }
        free(spec);
        if (!same)
            fail_msg("%s: byte %ld flipped, the checkpoint verified with other data", p, off);
        (*harmless)++;
    }
    copy_file(orig, p);
    unlink(orig);
    free(we);
    free(se);
}

static void test_no_silent_corruption(void **state)
{
    (void)state;
    char jd[OB_CKPT_PATH_LEN];
    job_path(jd, "sweep");
    fixture *f = make_fixture(2, 20);
    write_fixture(jd, f);
    int detected = 0, harmless = 0;
    sweep_file("sweep", "state.h5", f, &detected, &harmless);
    sweep_file("sweep", "rank-00001.h5", f, &detected, &harmless);
    print_message("byte flips: %d detected, %d in unused bytes (data read back identical)\n",
                  detected, harmless);
    /* The data chunks alone are most of the files: most flips must be detected. */
    assert_true(detected > 3 * (detected + harmless) / 4);
    free_fixture(f);
}

/* Old world n_old -> new world n_new: the mean worker error and the concatenated server error
 * over the d real elements are preserved exactly; the padding starts at zero. */
static void check_reshard(int n_old, int n_new)
{
    char jd[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN], job[32];
    snprintf(job, sizeof job, "reshard-%d-%d", n_old, n_new);
    job_path(jd, job);
    fixture *f = make_fixture(n_old, 20);
    write_fixture(jd, f);
    step_path(dir, job, 20, NULL);
    ob_err err = {0};
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_OK);

    size_t d = D_PARAMS, Dold = (size_t)m.padded_size, Cold = (size_t)m.chunk_size;
    size_t D = round_up(d, (size_t)n_new * BLOCK), C = D / (size_t)n_new;
    float *we = malloc((size_t)n_new * D * sizeof *we),
          *se = malloc((size_t)n_new * C * sizeof *se);
    for (int r = 0; r < n_new; r++)
        assert_int_equal(ob_ckpt_read_errors(dir, &m, r, n_new, D, C, NULL, 0, we + (size_t)r * D,
                                             se + (size_t)r * C, &err),
                         OB_OK);
    for (size_t i = 0; i < d; i++) {
        double old_mean = 0.0, new_mean = 0.0;
        for (int r = 0; r < n_old; r++)
            old_mean += (double)f->we[(size_t)r * Dold + i];
        for (int r = 0; r < n_new; r++)
            new_mean += (double)we[(size_t)r * D + i];
        float want = (float)(old_mean / n_old);
        double got = new_mean / n_new;
        if ((double)want != got) fail_msg("mean worker error at %zu: %.9g vs %.9g", i, want, got);
        /* Server chunks laid end to end: element i of the old and the new concatenation. */
        float old_s = f->se[(i / Cold) * Cold + i % Cold];
        float new_s = se[(i / C) * C + i % C];
        if (memcmp(&old_s, &new_s, sizeof old_s) != 0)
            fail_msg("server error at %zu: %.9g vs %.9g", i, old_s, new_s);
    }
    for (int r = 0; r < n_new; r++)
        for (size_t i = d; i < D; i++)
            assert_true(we[(size_t)r * D + i] == 0.0f);
    for (size_t i = d; i < D; i++)
        assert_true(se[i] == 0.0f);
    /* Bad targets are refused. */
    assert_int_equal(ob_ckpt_read_errors(dir, &m, n_new, n_new, D, C, NULL, 0, we, se, &err),
                     OB_ERR_INVALID_ARG);
    assert_int_equal(ob_ckpt_read_errors(dir, &m, 0, n_new, D + 1, C, NULL, 0, we, se, &err),
                     OB_ERR_INVALID_ARG);
    free(we);
    free(se);
    free_fixture(f);
}

static void test_reshard(void **state)
{
    (void)state;
    check_reshard(4, 2);
    check_reshard(2, 3);
    check_reshard(3, 5);
    check_reshard(5, 1);
}

/* ---- the server layout ----------------------------------------------------------------------- */

/* Layouts of the fixtures (d = 1000, B = 64): N = 3 gives D = 1152 (N B = 192), N = 2 gives
 * D = 1024 (128), N = 4 gives 1024 (256), N = 5 gives 1280 (320). */
static const size_t LAYOUT3[] = {0, 192, 768, 1152};       /* L = 64, 192, 128 */
static const size_t LAYOUT3_OTHER[] = {0, 576, 960, 1152}; /* L = 192, 128, 64 */
static const size_t LAYOUT2[] = {0, 256, 640, 1024};       /* L = 128, 192, 192 */
static const size_t LAYOUT4[] = {0, 256, 512, 1024};       /* L = 64, 64, 128 */
static const size_t LAYOUT5[] = {0, 320, 1280};            /* L = 64, 192 */
#define NSEG(a) (sizeof(a) / sizeof(a)[0] - 1)             /* segments of a bounds array */

/* 1 when rank file `rank` of checkpoint dir stores /optim/server_segments. */
static int has_segments(const char *dir, int rank)
{
    char p[OB_CKPT_PATH_LEN + 16];
    snprintf(p, sizeof p, "%s/rank-%05d.h5", dir, rank);
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    htri_t ex = H5Lexists(f, "/optim/server_segments", H5P_DEFAULT);
    H5Fclose(f);
    assert_true(ex >= 0);
    return ex > 0;
}

/* Reads the error buffers of every rank of n_new (D for that world size) in the server layout
 * b[0..nseg] from the checkpoint written from f, and checks them against the definition: each
 * server error element holds the value of its position (at the same N and D the padding too,
 * else 0 there); the worker error is the rank's own at the same N and D, else the mean. */
static void check_layout_read(const char *dir, const fixture *f, int n_new, const size_t *b,
                              size_t nseg)
{
    ob_err err = {0};
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_OK);
    size_t d = D_PARAMS, Dold = (size_t)m.padded_size;
    size_t D = round_up(d, (size_t)n_new * BLOCK), C = D / (size_t)n_new;
    int same = n_new == f->n && D == Dold;
    float *we = malloc(D * sizeof *we), *se = malloc(C * sizeof *se);
    size_t *pos = malloc(C * sizeof *pos);
    assert_non_null(we);
    assert_non_null(se);
    assert_non_null(pos);
    for (int r = 0; r < n_new; r++) {
        if (ob_ckpt_read_errors(dir, &m, r, n_new, D, C, b, nseg, we, se, &err) != OB_OK)
            fail_msg("rank %d of %d: %s", r, n_new, err.msg);
        server_positions(b, nseg, D, n_new, r, pos);
        for (size_t k = 0; k < C; k++) {
            float want = same || pos[k] < d ? server_value(pos[k]) : 0.0f;
            if (memcmp(&se[k], &want, sizeof want) != 0)
                fail_msg("%d -> %d, rank %d: server error %zu (position %zu) is %.9g, not %.9g",
                         f->n, n_new, r, k, pos[k], se[k], want);
        }
        if (same) {
            assert_memory_equal(we, f->we + (size_t)r * D, D * sizeof *we);
            continue;
        }
        for (size_t i = 0; i < d; i++) {
            double sum = 0.0;
            for (int o = 0; o < f->n; o++)
                sum += (double)f->we[(size_t)o * Dold + i];
            float want = (float)(sum / f->n);
            if (memcmp(&we[i], &want, sizeof want) != 0)
                fail_msg("rank %d: worker error %zu is %.9g, not the mean %.9g", r, i, we[i], want);
        }
        for (size_t i = d; i < D; i++)
            assert_true(we[i] == 0.0f);
    }
    free(pos);
    free(we);
    free(se);
}

/* Writes fixture f (committed as step 20 of job) and returns its directory in dir. */
static void write_layout_job(const char *job, const fixture *f, char *dir)
{
    char jd[OB_CKPT_PATH_LEN];
    job_path(jd, job);
    write_fixture(jd, f);
    step_path(dir, job, 20, NULL);
}

/* Three ranks in three segments: read back in that layout bit for bit, in one segment and in
 * another three position by position (the worker errors untouched); only files with more than
 * one segment store them. */
static void test_segments_round_trip(void **state)
{
    (void)state;
    char dir[OB_CKPT_PATH_LEN];
    fixture *f = make_layout_fixture(3, 20, LAYOUT3, NSEG(LAYOUT3));
    write_layout_job("seg-roundtrip", f, dir);
    for (int r = 0; r < 3; r++)
        assert_true(has_segments(dir, r));

    ob_err err = {0};
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_OK);
    size_t D = (size_t)m.padded_size, C = (size_t)m.chunk_size;
    float *we = malloc(D * sizeof *we), *se = malloc(C * sizeof *se);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(
            ob_ckpt_read_errors(dir, &m, r, 3, D, C, LAYOUT3, NSEG(LAYOUT3), we, se, &err), OB_OK);
        assert_memory_equal(we, f->we + (size_t)r * D, D * sizeof *we);
        assert_memory_equal(se, f->se + (size_t)r * C, C * sizeof *se);
    }
    free(we);
    free(se);
    check_layout_read(dir, f, 3, NULL, 0);
    check_layout_read(dir, f, 3, LAYOUT3_OTHER, NSEG(LAYOUT3_OTHER));
    free_fixture(f);

    /* One segment, given as bounds or not, writes the files as before: no dataset. */
    static const size_t whole[] = {0, 1152};
    f = make_layout_fixture(3, 20, whole, 1);
    write_layout_job("seg-one", f, dir);
    for (int r = 0; r < 3; r++)
        assert_false(has_segments(dir, r));
    check_layout_read(dir, f, 3, NULL, 0);
    free_fixture(f);
}

/* The same world size and D, another layout: written in one segment and read in three, and
 * written in three and read in one, every position exact. */
static void test_segments_remap(void **state)
{
    (void)state;
    char dir[OB_CKPT_PATH_LEN];
    fixture *f = make_layout_fixture(3, 20, NULL, 0);
    write_layout_job("seg-remap-one", f, dir);
    check_layout_read(dir, f, 3, LAYOUT3, NSEG(LAYOUT3));
    check_layout_read(dir, f, 3, NULL, 0);
    free_fixture(f);

    f = make_layout_fixture(2, 20, LAYOUT2, NSEG(LAYOUT2));
    write_layout_job("seg-remap-two", f, dir);
    check_layout_read(dir, f, 2, NULL, 0);
    check_layout_read(dir, f, 2, LAYOUT2, NSEG(LAYOUT2));
    free_fixture(f);
}

/* Another world size, with segments on both sides: the server error position by position (0
 * at the padding), the worker error the mean. */
static void test_segments_reshard(void **state)
{
    (void)state;
    char dir[OB_CKPT_PATH_LEN];
    fixture *f = make_layout_fixture(3, 20, LAYOUT3, NSEG(LAYOUT3));
    write_layout_job("seg-reshard-3", f, dir);
    check_layout_read(dir, f, 2, LAYOUT2, NSEG(LAYOUT2));
    check_layout_read(dir, f, 5, LAYOUT5, NSEG(LAYOUT5));
    check_layout_read(dir, f, 1, NULL, 0);
    free_fixture(f);

    f = make_layout_fixture(4, 20, LAYOUT4, NSEG(LAYOUT4));
    write_layout_job("seg-reshard-4", f, dir);
    check_layout_read(dir, f, 2, LAYOUT2, NSEG(LAYOUT2)); /* the same D, another N */
    check_layout_read(dir, f, 3, LAYOUT3, NSEG(LAYOUT3));
    check_layout_read(dir, f, 2, NULL, 0);
    free_fixture(f);
}

/* Byte flips in a rank file that stores its layout: detected, or the same data and layout. */
static void test_segments_no_silent_corruption(void **state)
{
    (void)state;
    char dir[OB_CKPT_PATH_LEN];
    fixture *f = make_layout_fixture(2, 20, LAYOUT2, NSEG(LAYOUT2));
    write_layout_job("sweep-seg", f, dir);
    int detected = 0, harmless = 0;
    sweep_file("sweep-seg", "rank-00001.h5", f, &detected, &harmless);
    print_message("byte flips: %d detected, %d in unused bytes\n", detected, harmless);
    assert_true(detected > 3 * (detected + harmless) / 4);
    free_fixture(f);
}

/* Replaces /optim/server_segments of a rank file by n values of file type ftype (from data of
 * memory type mtype); rows 0: one dimension, else (rows, n / rows). */
static void replace_segments(const char *path, hid_t ftype, hid_t mtype, const void *data,
                             hsize_t n, hsize_t rows)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    assert_true(H5Ldelete(f, "/optim/server_segments", H5P_DEFAULT) >= 0);
    hsize_t dims[2] = {rows ? rows : n, rows ? n / rows : 0};
    hid_t space = H5Screate_simple(rows ? 2 : 1, dims, NULL);
    hid_t ds = H5Dcreate2(f, "/optim/server_segments", ftype, space, H5P_DEFAULT, H5P_DEFAULT,
                          H5P_DEFAULT);
    assert_true(ds >= 0);
    assert_true(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(f);
}

/* A three-rank checkpoint in LAYOUT3 whose rank 1 gets the given segments: reading rank 1's
 * errors and verifying both refuse it as corrupt, naming the file and containing want. */
static void expect_bad_segments(hid_t ftype, hid_t mtype, const void *data, hsize_t n, hsize_t rows,
                                const char *want)
{
    static int count;
    char job[32], dir[OB_CKPT_PATH_LEN], p[OB_CKPT_PATH_LEN];
    snprintf(job, sizeof job, "seg-hostile-%d", count++);
    fixture *f = make_layout_fixture(3, 20, LAYOUT3, NSEG(LAYOUT3));
    write_layout_job(job, f, dir);
    step_path(p, job, 20, "rank-00001.h5");
    replace_segments(p, ftype, mtype, data, n, rows);
    ob_err err = {0};
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_OK);
    float *we = malloc(2048 * sizeof *we), *se = malloc(2048 * sizeof *se); /* any N here */
    const struct {
        int rank, world;
        const size_t *b;
        size_t nseg;
    } reads[] = {{1, 3, LAYOUT3, NSEG(LAYOUT3)}, {0, 3, NULL, 0}, {0, 2, NULL, 0}};
    for (size_t i = 0; i < sizeof reads / sizeof *reads; i++) {
        size_t Dn = round_up(D_PARAMS, (size_t)reads[i].world * BLOCK);
        assert_int_equal(ob_ckpt_read_errors(dir, &m, reads[i].rank, reads[i].world, Dn,
                                             Dn / (size_t)reads[i].world, reads[i].b, reads[i].nseg,
                                             we, se, &err),
                         OB_ERR_CORRUPT);
        if (!strstr(err.msg, "rank-00001.h5") || !strstr(err.msg, want))
            fail_msg("read %zu: '%s' does not name rank-00001.h5 with '%s'", i, err.msg, want);
    }
    assert_int_equal(ob_ckpt_verify(dir, NULL, &err), OB_ERR_CORRUPT);
    if (!strstr(err.msg, "rank-00001.h5") || !strstr(err.msg, want))
        fail_msg("verify: '%s' does not name rank-00001.h5 with '%s'", err.msg, want);
    free(we);
    free(se);
    free_fixture(f);
}

static void test_segments_hostile(void **state)
{
    (void)state;
    hid_t u64 = H5T_STD_U64LE, nu64 = H5T_NATIVE_UINT64;
    static const uint64_t late_start[] = {192, 768, 1152};
    static const uint64_t short_end[] = {0, 192, 768};
    static const uint64_t descending[] = {0, 768, 192, 1152};
    static const uint64_t repeated[] = {0, 192, 192, 1152};
    static const uint64_t off_block[] = {0, 96, 768, 1152}; /* a multiple of N, not of N B */
    static const uint64_t too_long[] = {0, 192, 384, 576, 768, 960, 1152, 1152}; /* 8 > 7 */
    static const uint64_t single[] = {0};
    static const uint64_t huge[] = {0, (uint64_t)1 << 63, UINT64_MAX};
    static const uint64_t other[] = {0, 384, 1152}; /* valid, but not rank 0's layout */
    expect_bad_segments(u64, nu64, late_start, 3, 0, "first bound is 192, not 0");
    expect_bad_segments(u64, nu64, short_end, 3, 0, "last bound is 768, not D = 1152");
    expect_bad_segments(u64, nu64, descending, 4, 0, "bound 2 (192) does not follow 768");
    expect_bad_segments(u64, nu64, repeated, 4, 0, "bound 2 (192) does not follow 192");
    expect_bad_segments(u64, nu64, off_block, 4, 0, "bound 1 (96) is not a multiple of 192");
    expect_bad_segments(u64, nu64, too_long, 8, 0, "8 bounds (one dimension, 2 .. 7)");
    expect_bad_segments(u64, nu64, single, 1, 0, "1 bounds");
    expect_bad_segments(u64, nu64, huge, 3, 0, "last bound is 18446744073709551615");
    expect_bad_segments(u64, nu64, descending, 4, 2, "2 dimensions");
    expect_bad_segments(u64, nu64, other, 3, 0, "differs from the other rank files'");
    static const double as_double[] = {0, 192, 768, 1152};
    static const int64_t as_signed[] = {0, 192, 768, 1152};
    static const uint32_t as_u32[] = {0, 192, 768, 1152};
    expect_bad_segments(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, as_double, 4, 0,
                        "not unsigned 64-bit integers");
    expect_bad_segments(H5T_STD_I64LE, H5T_NATIVE_INT64, as_signed, 4, 0,
                        "not unsigned 64-bit integers");
    expect_bad_segments(H5T_STD_U32LE, H5T_NATIVE_UINT32, as_u32, 4, 0,
                        "not unsigned 64-bit integers");
}

/* Layouts that are not one: refused by write_rank (against D, N and B) and as a request by
 * read_errors (against this run's D and N) with OB_ERR_INVALID_ARG, before any file is made. */
static void test_segments_invalid_args(void **state)
{
    (void)state;
    static const size_t off_block[] = {0, 96, 1152}; /* a multiple of N = 3, not of N B */
    static const size_t off_world[] = {0, 100, 1152};
    static const size_t repeated[] = {0, 576, 576, 1152};
    static const size_t late_start[] = {192, 576, 1152};
    static const size_t short_end[] = {0, 576};
    const struct {
        const size_t *b;
        size_t nseg;
        int read_ok; /* a valid request (read_errors knows N only) */
        const char *want;
    } cases[] = {
        {off_block, 2, 1, "bound 1 (96) is not a multiple of 192"},
        {off_world, 2, 0, "bound 1 (100) is not a multiple of"},
        {repeated, 3, 0, "bound 2 (576) does not follow 576"},
        {late_start, 2, 0, "first bound is 192, not 0"},
        {short_end, 1, 0, "last bound is 576, not D = 1152"},
        {LAYOUT3, SIZE_MAX, 0, "18446744073709551615 segments over D = 1152"},
        {LAYOUT3, 385, 0, "385 segments over D = 1152"}, /* > D / N: refused unread */
        {NULL, 2, 0, "2 segments with NULL bounds"},
        {LAYOUT3, 0, 0, "0 segments with non-NULL bounds"},
    };
    char jd[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN], p[OB_CKPT_PATH_LEN + 16];
    fixture *f = make_layout_fixture(3, 20, LAYOUT3, NSEG(LAYOUT3));
    job_path(jd, "seg-args");
    write_fixture(jd, f);
    ob_err err = {0};
    ob_ckpt_meta m;
    char done[OB_CKPT_PATH_LEN];
    step_path(done, "seg-args", 20, NULL);
    assert_int_equal(ob_ckpt_read_meta(done, &m, NULL, &err), OB_OK);
    size_t D = (size_t)m.padded_size, C = (size_t)m.chunk_size;
    float *we = malloc(D * sizeof *we), *se = malloc(C * sizeof *se);
    assert_int_equal(ob_ckpt_prepare(jd, 30, dir, &err), OB_OK);
    snprintf(p, sizeof p, "%s/rank-00000.h5", dir);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ob_status st =
            ob_ckpt_write_rank(dir, &f->meta, 0, f->we, f->se, cases[i].b, cases[i].nseg, &err);
        assert_int_equal(st, OB_ERR_INVALID_ARG);
        if (!strstr(err.msg, cases[i].want))
            fail_msg("write: '%s' does not contain '%s'", err.msg, cases[i].want);
        assert_int_equal(access(p, F_OK), -1);
        st = ob_ckpt_read_errors(done, &m, 0, 3, D, C, cases[i].b, cases[i].nseg, we, se, &err);
        if (cases[i].read_ok) {
            assert_int_equal(st, OB_OK);
            continue;
        }
        assert_int_equal(st, OB_ERR_INVALID_ARG);
        if (!strstr(err.msg, cases[i].want))
            fail_msg("case %zu: '%s' does not contain '%s'", i, err.msg, cases[i].want);
    }
    /* A layout without the compressed allreduce. */
    ob_ckpt_meta plain = f->meta;
    plain.padded_size = plain.chunk_size = plain.block_size = 0;
    assert_int_equal(ob_ckpt_write_rank(dir, &plain, 0, NULL, NULL, LAYOUT3, 3, &err),
                     OB_ERR_INVALID_ARG);
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(ob_ckpt_discard(jd, 30, &err), OB_OK);
    free(we);
    free(se);
    free_fixture(f);
}

static void test_names(void **state)
{
    (void)state;
    char out[OB_CKPT_PATH_LEN];
    ob_err err = {0};
    assert_int_equal(ob_ckpt_step_dir(out, "/a/b", 1200, 0, &err), OB_OK);
    assert_string_equal(out, "/a/b/step-00001200");
    assert_int_equal(ob_ckpt_step_dir(out, "/a/b", 7, 1, &err), OB_OK);
    assert_string_equal(out, "/a/b/step-00000007.tmp");
    assert_int_equal(ob_ckpt_step_dir(out, "", 7, 0, &err), OB_ERR_INVALID_ARG);
    assert_int_equal(ob_ckpt_step_dir(out, "/a", -1, 0, &err), OB_ERR_INVALID_ARG);
    /* A file where a directory should be. */
    char p[OB_CKPT_PATH_LEN];
    job_path(p, "a-file");
    FILE *fp = fopen(p, "w");
    fclose(fp);
    assert_int_equal(ob_ckpt_prepare(p, 1, out, &err), OB_ERR_IO);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/onebit-test-ckpt-XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    /* Every file and object the library (and the tests) opened is closed again, on every error
     * path too: what a leak checker may still report is HDF5's own. */
    ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (open_ids != 0) {
        fprintf(stderr, "%zd HDF5 objects are still open\n", open_ids);
        return -1;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* The worker error across a change of the exchange's shape (ob_ckpt_read_errors_for): flat
 * (4 ranks) -> 2 ranks a node takes the node's mean on the rank's piece, zero elsewhere; back
 * to flat every rank takes its node's error; the total the world owes, the sum over ranks
 * divided by the ranks' share of a node, stays the same. Server errors pass unchanged. */
static void test_exchange_shape_carried(void **state)
{
    (void)state;
    ob_err err = {0};
    fixture *f = make_fixture(4, 60);
    char jd[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
    job_path(jd, "shape");
    write_fixture(jd, f);
    step_path(dir, "shape", 60, NULL);
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_OK);
    assert_int_equal(m.ranks_per_node, 1);
    size_t D = (size_t)m.padded_size, C = (size_t)m.chunk_size;
    float *we = malloc(4 * D * sizeof *we), *se = malloc(C * sizeof *se);
    for (int r = 0; r < 4; r++) {
        float *w = we + (size_t)r * D;
        assert_int_equal(ob_ckpt_read_errors_for(dir, &m, r, 4, D, C, NULL, 0, 2, w, se, &err),
                         OB_OK);
        assert_memory_equal(se, f->se + (size_t)r * C, C * sizeof *se);
        int node = r / 2;
        for (size_t i = 0; i < D; i++) {
            size_t chunk = i / C;
            float mean = 0.5f * f->we[(size_t)(2 * node) * D + i] +
                         0.5f * f->we[(size_t)(2 * node + 1) * D + i];
            float want = (int)(chunk % 2) == r % 2 ? mean : 0.0f;
            if (memcmp(&w[i], &want, sizeof want) != 0)
                fail_msg("rank %d position %zu: %g, want %g", r, i, (double)w[i], (double)want);
        }
    }
    /* Written back hierarchically, read flat: every rank gets its node's whole error. */
    fixture *g = make_fixture(4, 70);
    memcpy(g->we, we, 4 * D * sizeof *we);
    g->meta.ranks_per_node = 2;
    write_fixture(jd, g);
    step_path(dir, "shape", 70, NULL);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_OK);
    assert_int_equal(m.ranks_per_node, 2);
    float *back = malloc(D * sizeof *back);
    double owed_flat = 0.0, owed_back = 0.0;
    for (int r = 0; r < 4; r++) {
        assert_int_equal(ob_ckpt_read_errors_for(dir, &m, r, 4, D, C, NULL, 0, 1, back, se, &err),
                         OB_OK);
        int node = r / 2;
        for (size_t i = 0; i < D; i++) {
            float want = we[(size_t)(2 * node) * D + i] + we[(size_t)(2 * node + 1) * D + i];
            if (memcmp(&back[i], &want, sizeof want) != 0)
                fail_msg("back: rank %d position %zu", r, i);
            owed_back += back[i];
            owed_flat += f->we[(size_t)r * D + i];
        }
    }
    assert_true(fabs(owed_back - owed_flat) <= 1e-6 * (1.0 + fabs(owed_flat)));
    /* The same shape reads the files as they are. */
    assert_int_equal(ob_ckpt_read_errors_for(dir, &m, 1, 4, D, C, NULL, 0, 2, back, se, &err),
                     OB_OK);
    assert_memory_equal(back, g->we + D, D * sizeof *back);
    assert_int_equal(ob_ckpt_read_errors_for(dir, &m, 1, 4, D, C, NULL, 0, 3, back, se, &err),
                     OB_ERR_INVALID_ARG);
    free(we), free(se), free(back);
    free_fixture(f);
    free_fixture(g);
}

/* Per-rank moments: written by every rank, verified, read back per rank, and averaged at
 * another world size; a checkpoint without them says so. */
static void test_local_moments(void **state)
{
    (void)state;
    ob_err err = {0};
    fixture *f = make_fixture(3, 40);
    f->meta.local_moments = 1;
    char jd[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
    job_path(jd, "local");
    size_t d = D_PARAMS, D = (size_t)f->meta.padded_size, C = (size_t)f->meta.chunk_size;
    float *lm = malloc(3 * d * sizeof *lm), *lv = malloc(3 * d * sizeof *lv);
    for (size_t i = 0; i < 3 * d; i++) {
        lm[i] = frand();
        lv[i] = fabsf(lm[i]) + 0.5f;
    }
    ob_ckpt_arrays a = {f->params, f->m, f->v, f->hist, HIST, TABLE, NTAB};
    assert_int_equal(ob_ckpt_prepare(jd, 40, dir, &err), OB_OK);
    assert_int_equal(ob_ckpt_write_state(dir, &f->meta, &a, "{}", &err), OB_OK);
    /* Without the moments a rank file of such a checkpoint is refused. */
    assert_int_equal(ob_ckpt_write_rank(dir, &f->meta, 0, f->we, f->se, NULL, 0, &err),
                     OB_ERR_INVALID_ARG);
    for (int r = 0; r < 3; r++)
        assert_int_equal(ob_ckpt_write_rank_moments(dir, &f->meta, r, f->we + (size_t)r * D,
                                                    f->se + (size_t)r * C, NULL, 0,
                                                    lm + (size_t)r * d, lv + (size_t)r * d, &err),
                         OB_OK);
    assert_int_equal(ob_ckpt_commit(jd, 40, &err), OB_OK);
    step_path(dir, "local", 40, NULL);
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_OK);
    assert_int_equal(m.local_moments, 1);
    float *gm = malloc(d * sizeof *gm), *gv = malloc(d * sizeof *gv);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(ob_ckpt_read_local_moments(dir, &m, r, 3, gm, gv, &err), OB_OK);
        assert_memory_equal(gm, lm + (size_t)r * d, d * sizeof *gm);
        assert_memory_equal(gv, lv + (size_t)r * d, d * sizeof *gv);
    }
    assert_int_equal(ob_ckpt_read_local_moments(dir, &m, 1, 2, gm, gv, &err), OB_OK);
    for (size_t i = 0; i < d; i++) {
        float want = (float)(((double)lm[i] + (double)lm[d + i] + (double)lm[2 * d + i]) / 3.0);
        assert_true(gm[i] == want);
        assert_true(fabsf(gm[i]) <= gv[i]);
    }
    /* A rank file without its moments does not verify. */
    char rank1[OB_CKPT_PATH_LEN];
    step_path(rank1, "local", 40, "rank-00001.h5");
    ob_ckpt_meta plain = f->meta;
    plain.local_moments = 0;
    assert_int_equal(unlink(rank1), 0);
    assert_int_equal(ob_ckpt_write_rank(dir, &plain, 1, f->we + D, f->se + C, NULL, 0, &err),
                     OB_OK);
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "local_exp_avg"));
    fixture *g = make_fixture(2, 50);
    write_fixture(jd, g);
    step_path(dir, "local", 50, NULL);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_OK);
    assert_int_equal(ob_ckpt_read_local_moments(dir, &m, 0, 2, gm, gv, &err), OB_ERR_CORRUPT);
    free(lm), free(lv), free(gm), free(gv);
    free_fixture(f);
    free_fixture(g);
}

/* Variance statistics (track_variance): every rank's 3 d floats written, verified, read back
 * per rank, averaged at another world size; a rank file without them does not verify, a
 * checkpoint without them is refused saying why. */
static void test_track_stats(void **state)
{
    (void)state;
    ob_err err = {0};
    fixture *f = make_fixture(3, 60);
    f->meta.track_stats = 1;
    char jd[OB_CKPT_PATH_LEN], dir[OB_CKPT_PATH_LEN];
    job_path(jd, "track");
    size_t d = D_PARAMS, n = 3 * d, D = (size_t)f->meta.padded_size, C = (size_t)f->meta.chunk_size;
    float *ts = malloc(3 * n * sizeof *ts), *got = malloc(n * sizeof *got);
    for (size_t i = 0; i < 3 * n; i++)
        ts[i] = frand();
    ob_ckpt_arrays a = {f->params, f->m, f->v, f->hist, HIST, TABLE, NTAB};
    assert_int_equal(ob_ckpt_prepare(jd, 60, dir, &err), OB_OK);
    assert_int_equal(ob_ckpt_write_state(dir, &f->meta, &a, "{}", &err), OB_OK);
    /* Without the statistics a rank file of such a checkpoint is refused. */
    assert_int_equal(ob_ckpt_write_rank(dir, &f->meta, 0, f->we, f->se, NULL, 0, &err),
                     OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "variance statistics"));
    for (int r = 0; r < 3; r++) {
        ob_ckpt_rank_arrays ra = {f->we + (size_t)r * D, f->se + (size_t)r * C, NULL, 0, NULL, NULL,
                                  ts + (size_t)r * n};
        assert_int_equal(ob_ckpt_write_rank_arrays(dir, &f->meta, r, &ra, &err), OB_OK);
    }
    assert_int_equal(ob_ckpt_commit(jd, 60, &err), OB_OK);
    step_path(dir, "track", 60, NULL);
    ob_ckpt_meta m;
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_OK);
    assert_int_equal(m.track_stats, 1);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(ob_ckpt_read_track_stats(dir, &m, r, 3, got, &err), OB_OK);
        assert_memory_equal(got, ts + (size_t)r * n, n * sizeof *got);
    }
    assert_int_equal(ob_ckpt_read_track_stats(dir, &m, 3, 4, got, &err), OB_OK);
    for (size_t i = 0; i < n; i++) {
        float want = (float)(((double)ts[i] + (double)ts[n + i] + (double)ts[2 * n + i]) / 3.0);
        assert_true(got[i] == want);
    }
    assert_int_equal(ob_ckpt_read_track_stats(dir, &m, 4, 4, got, &err), OB_ERR_INVALID_ARG);
    /* A rank file without its statistics does not verify. */
    char rank2[OB_CKPT_PATH_LEN];
    step_path(rank2, "track", 60, "rank-00002.h5");
    ob_ckpt_meta plain = f->meta;
    plain.track_stats = 0;
    assert_int_equal(unlink(rank2), 0);
    assert_int_equal(
        ob_ckpt_write_rank(dir, &plain, 2, f->we + 2 * D, f->se + 2 * C, NULL, 0, &err), OB_OK);
    assert_int_equal(ob_ckpt_verify(dir, &m, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "variance_stats"));
    /* A checkpoint written without tracking: refused, saying why. */
    fixture *g = make_fixture(2, 70);
    write_fixture(jd, g);
    step_path(dir, "track", 70, NULL);
    assert_int_equal(ob_ckpt_read_meta(dir, &m, NULL, &err), OB_OK);
    assert_int_equal(m.track_stats, 0);
    assert_int_equal(ob_ckpt_read_track_stats(dir, &m, 0, 2, got, &err), OB_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "track_variance"));
    free(ts), free(got);
    free_fixture(f);
    free_fixture(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_list_and_prune),
        cmocka_unit_test(test_prune_counts_only_verified),
        cmocka_unit_test(test_fallback_flipped_data),
        cmocka_unit_test(test_checksums),
        cmocka_unit_test(test_checksum_pieces),
        cmocka_unit_test(test_prune_written),
        cmocka_unit_test(test_fallback_truncated_missing_foreign),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_hostile_attributes),
        cmocka_unit_test(test_hostile_index),
        cmocka_unit_test(test_no_index),
        cmocka_unit_test(test_no_silent_corruption),
        cmocka_unit_test(test_reshard),
        cmocka_unit_test(test_segments_round_trip),
        cmocka_unit_test(test_segments_remap),
        cmocka_unit_test(test_segments_reshard),
        cmocka_unit_test(test_segments_no_silent_corruption),
        cmocka_unit_test(test_segments_hostile),
        cmocka_unit_test(test_segments_invalid_args),
        cmocka_unit_test(test_exchange_shape_carried),
        cmocka_unit_test(test_local_moments),
        cmocka_unit_test(test_track_stats),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
