/* Tests for per-rank loaders (onebit/data.h), part two: shards, determinism, positions that
 * restore exactly, evaluation passes, synthetic data, bad arguments. Examples of the loader
 * tests carry their own index in their pixels (IDX files with 1 x 2 "images" holding i mod 256
 * and i / 256), so a batch says exactly which examples it holds. */
#include "data_fixture.h"

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
