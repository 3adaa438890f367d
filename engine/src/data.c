/* Dataset accessors and the per-rank loaders (onebit/data.h).
 *
 * Both loader modes walk a list of items, all ranks in lockstep: step k of an epoch (or pass)
 * covers the items [k*W*B, (k+1)*W*B) and rank r takes the B of them starting at k*W*B + r*B.
 * The position is therefore one global index, identical on every rank. A sampling loader maps
 * an item through the epoch's permutation to an example (classification) or to a window start
 * phase + item * T (text); a pass loader maps item j of N to example floor(j * total / N). */
#include "data_internal.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* The generator stream the epoch permutations use: fixed, so that every rank draws the same
 * permutation from the job seed, and unlike streams other modules derive from the same seed. */
#define OB__DATA_STREAM 0x64617461u /* "data" */

struct ob_loader {
    const ob_dataset *ds; /* borrowed */
    ob_split split;
    int sampling; /* 1: endless shuffled epochs; 0: ordered passes */
    int rank, world;
    size_t batch;
    size_t total; /* examples (or pass windows) in the split */
    size_t items; /* items per epoch (sampling) or pass (N <= total) */

    uint64_t epoch, index; /* see ob_loader_position */
    ob_rng epoch_rng;      /* state at the start of the current epoch */
    ob_rng rng;            /* state after drawing the current epoch */
    uint32_t *perm;        /* (items) sampling only */
    size_t phase;          /* text sampling: start of window 0 in this epoch */

    /* The batch buffers handed out by ob_loader_next. */
    float *x;        /* (batch, input_dim) */
    int32_t *y;      /* (batch) */
    uint8_t *tokens; /* (batch, context + 1) */
};

/* ---- Datasets ------------------------------------------------------------------------------ */

ob_dataset *ob__dataset_alloc(ob_dataset_kind kind, const char *source)
{
    ob_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return NULL;
    ds->kind = kind;
    ds->std = 1.0f;
    for (int v = 0; v < 256; v++)
        ds->lut[v] = (float)v;
    size_t len = strlen(source);
    ds->source = malloc(len + 1);
    if (!ds->source) {
        free(ds);
        return NULL;
    }
    memcpy(ds->source, source, len + 1);
    return ds;
}

void ob_dataset_destroy(ob_dataset *ds)
{
    if (!ds) return;
    for (int s = 0; s < 2; s++) {
        free(ds->pix[s]);
        free(ds->feat[s]);
        free(ds->label[s]);
        free(ds->text[s]);
    }
    free(ds->source);
    free(ds);
}

static int split_ok(ob_split split)
{
    return split == OB_SPLIT_TRAIN || split == OB_SPLIT_EVAL;
}

ob_dataset_kind ob_dataset_get_kind(const ob_dataset *ds)
{
    return ds->kind;
}

const char *ob_dataset_source(const ob_dataset *ds)
{
    return ds->source;
}

size_t ob_dataset_num_examples(const ob_dataset *ds, ob_split split)
{
    if (!split_ok(split)) return 0;
    if (ds->kind == OB_DATASET_CLASSIFICATION) return ds->n[split];
    size_t len = ds->text_len[split];
    return len >= ds->context + 1 ? (len - 1) / ds->context : 0;
}

size_t ob_dataset_input_dim(const ob_dataset *ds)
{
    return ds->kind == OB_DATASET_CLASSIFICATION ? ds->input_dim : 0;
}

int ob_dataset_num_classes(const ob_dataset *ds)
{
    return ds->kind == OB_DATASET_CLASSIFICATION ? ds->num_classes : 256;
}

size_t ob_dataset_context(const ob_dataset *ds)
{
    return ds->kind == OB_DATASET_TEXT ? ds->context : 0;
}

size_t ob_dataset_text_length(const ob_dataset *ds, ob_split split)
{
    return ds->kind == OB_DATASET_TEXT && split_ok(split) ? ds->text_len[split] : 0;
}

const uint8_t *ob_dataset_text(const ob_dataset *ds, ob_split split)
{
    return ds->kind == OB_DATASET_TEXT && split_ok(split) ? ds->text[split] : NULL;
}

void ob_dataset_feature_stats(const ob_dataset *ds, float *mean, float *std)
{
    if (mean) *mean = ds->mean;
    if (std) *std = ds->std;
}

/* ---- Loaders ------------------------------------------------------------------------------- */

/* Items of one sampling epoch: the examples, or the text windows that fit after any phase in
 * [0, T): starts p + k*T with p + k*T + T + 1 <= L for every p < T, i.e. k < L / T - 1. */
static size_t sampling_items(const ob_dataset *ds, ob_split split)
{
    if (ds->kind == OB_DATASET_CLASSIFICATION) return ds->n[split];
    size_t windows = ds->text_len[split] / ds->context;
    return windows >= 1 ? windows - 1 : 0;
}

/* Starts an epoch from the live generator: remember its state (the checkpointed position), then
 * draw the phase and a Fisher-Yates permutation. The permutation is rebuilt from the identity so
 * that it depends on the generator state alone. */
static void start_epoch(ob_loader *ldr)
{
    ldr->epoch_rng = ldr->rng;
    ldr->phase = 0;
    if (ldr->ds->kind == OB_DATASET_TEXT)
        ldr->phase = (size_t)ob_rng_below(&ldr->rng, ldr->ds->context);
    for (size_t i = 0; i < ldr->items; i++)
        ldr->perm[i] = (uint32_t)i;
    for (size_t i = ldr->items; i > 1; i--) {
        size_t j = (size_t)ob_rng_below(&ldr->rng, i);
        uint32_t t = ldr->perm[i - 1];
        ldr->perm[i - 1] = ldr->perm[j];
        ldr->perm[j] = t;
    }
}

/* Checks the arguments both modes share and allocates the loader and its batch buffers;
 * sampling != 0 selects the mode. The caller finishes the mode-specific part. */
static ob_status loader_new(ob_loader **out, const ob_dataset *ds, ob_split split, int rank,
                            int world_size, size_t batch_size, int sampling, ob_err *err)
{
    if (!out) return OB_ERR(err, OB_ERR_INVALID_ARG, "loader: out is NULL");
    *out = NULL;
    if (!ds) return OB_ERR(err, OB_ERR_INVALID_ARG, "loader: dataset is NULL");
    if (!split_ok(split)) return OB_ERR(err, OB_ERR_INVALID_ARG, "loader: bad split %d", split);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "loader: rank %d is not in [0, world_size %d)", rank,
                      world_size);
    if (batch_size < 1 || batch_size > SIZE_MAX / 2 / (size_t)world_size)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "loader: bad batch_size %zu", batch_size);

    ob_loader *ldr = calloc(1, sizeof *ldr);
    if (!ldr) return OB_ERR(err, OB_ERR_NOMEM, "loader: out of memory");
    ldr->ds = ds;
    ldr->split = split;
    ldr->sampling = sampling;
    ldr->rank = rank;
    ldr->world = world_size;
    ldr->batch = batch_size;
    ldr->total = ob_dataset_num_examples(ds, split);
    ldr->items = sampling ? sampling_items(ds, split) : ldr->total;

    ob_status st = OB_ERR_NOMEM;
    if (ds->kind == OB_DATASET_CLASSIFICATION) {
        if (ds->input_dim > SIZE_MAX / sizeof(float) / batch_size) {
            st = OB_ERR(err, OB_ERR_INVALID_ARG, "loader: batch_size %zu too large", batch_size);
            goto fail;
        }
        ldr->x = ob_calloc_aligned(batch_size * ds->input_dim * sizeof(float));
        ldr->y = ob_calloc_aligned(batch_size * sizeof(int32_t));
        if (!ldr->x || !ldr->y) goto nomem;
    } else {
        if (ds->context + 1 > SIZE_MAX / batch_size) {
            st = OB_ERR(err, OB_ERR_INVALID_ARG, "loader: batch_size %zu too large", batch_size);
            goto fail;
        }
        ldr->tokens = ob_calloc_aligned(batch_size * (ds->context + 1));
        if (!ldr->tokens) goto nomem;
    }
    *out = ldr;
    return OB_OK;

nomem:
    st = OB_ERR(err, OB_ERR_NOMEM, "loader: out of memory for %zu-example batches", batch_size);
fail:
    ob_loader_destroy(ldr);
    return st;
}

ob_status ob_loader_create(ob_loader **out, const ob_dataset *ds, ob_split split, int rank,
                           int world_size, size_t batch_size, uint64_t seed, ob_err *err)
{
    if (split == OB_SPLIT_EVAL)
        return ob_loader_create_pass(out, ds, split, rank, world_size, batch_size, 0, err);

    ob_loader *ldr = NULL;
    ob_status st = loader_new(&ldr, ds, split, rank, world_size, batch_size, 1, err);
    if (st != OB_OK) return st;

    size_t step = batch_size * (size_t)world_size;
    if (ldr->items < step) {
        st = OB_ERR(err, OB_ERR_INVALID_ARG,
                    "loader: the train split of %s has %zu %s per epoch, fewer than batch_size "
                    "%zu x world_size %d",
                    ds->source, ldr->items, ds->kind == OB_DATASET_TEXT ? "windows" : "examples",
                    batch_size, world_size);
        goto fail;
    }
    /* The permutation stores 32-bit items to halve its size; no split comes close. */
    if (ldr->items > UINT32_MAX) {
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "loader: %zu items per epoch is too many", ldr->items);
        goto fail;
    }
    ldr->perm = malloc(ldr->items * sizeof *ldr->perm);
    if (!ldr->perm) {
        st = OB_ERR(err, OB_ERR_NOMEM, "loader: out of memory for a %zu-item permutation",
                    ldr->items);
        goto fail;
    }
    ob_rng_seed(&ldr->rng, seed, OB__DATA_STREAM);
    start_epoch(ldr);
    *out = ldr;
    return OB_OK;

fail:
    ob_loader_destroy(ldr);
    return st;
}

ob_status ob_loader_create_pass(ob_loader **out, const ob_dataset *ds, ob_split split, int rank,
                                int world_size, size_t batch_size, size_t max_examples, ob_err *err)
{
    ob_loader *ldr = NULL;
    ob_status st = loader_new(&ldr, ds, split, rank, world_size, batch_size, 0, err);
    if (st != OB_OK) return st;
    if (ldr->total == 0) {
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "loader: the %s split of %s is empty",
                    split == OB_SPLIT_TRAIN ? "train" : "eval", ds->source);
        goto fail;
    }
    /* j * total must fit in 64 bits when mapping subset items (see pass_source). */
    if (ldr->total > UINT32_MAX) {
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "loader: %zu examples is too many", ldr->total);
        goto fail;
    }
    if (max_examples > 0 && max_examples < ldr->total) ldr->items = max_examples;
    *out = ldr;
    return OB_OK;

fail:
    ob_loader_destroy(ldr);
    return st;
}

void ob_loader_destroy(ob_loader *ldr)
{
    if (!ldr) return;
    free(ldr->perm);
    ob_aligned_free(ldr->x);
    ob_aligned_free(ldr->y);
    ob_aligned_free(ldr->tokens);
    free(ldr);
}

/* Copies example e (classification) or the window starting at byte e (text) into batch row i. */
static void fill_row(ob_loader *ldr, size_t i, size_t e)
{
    const ob_dataset *ds = ldr->ds;
    ob_split s = ldr->split;
    if (ds->kind == OB_DATASET_TEXT) {
        size_t row = ds->context + 1;
        memcpy(ldr->tokens + i * row, ds->text[s] + e, row);
        return;
    }
    size_t d = ds->input_dim;
    float *x = ldr->x + i * d;
    if (ds->pix[s]) {
        const uint8_t *p = ds->pix[s] + e * d;
        for (size_t j = 0; j < d; j++)
            x[j] = ds->lut[p[j]];
    } else {
        memcpy(x, ds->feat[s] + e * d, d * sizeof *x);
    }
    ldr->y[i] = ds->label[s][e];
}

/* The example index, or text window start, of pass item j. */
static size_t pass_source(const ob_loader *ldr, size_t j)
{
    size_t k = ldr->items == ldr->total
                   ? j
                   : (size_t)((uint64_t)j * (uint64_t)ldr->total / (uint64_t)ldr->items);
    return ldr->ds->kind == OB_DATASET_TEXT ? k * ldr->ds->context : k;
}

static void set_batch(const ob_loader *ldr, ob_batch *out, size_t n)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (ldr->ds->kind == OB_DATASET_TEXT) {
        out->context = ldr->ds->context;
        out->tokens = ldr->tokens;
    } else {
        out->input_dim = ldr->ds->input_dim;
        out->x = ldr->x;
        out->y = ldr->y;
    }
}

ob_status ob_loader_next(ob_loader *ldr, ob_batch *out, ob_err *err)
{
    if (!ldr || !out) return OB_ERR(err, OB_ERR_INVALID_ARG, "loader_next: NULL argument");
    size_t step = ldr->batch * (size_t)ldr->world;
    size_t first = (size_t)ldr->index + (size_t)ldr->rank * ldr->batch;

    if (ldr->sampling) {
        if (ldr->index + step > ldr->items) {
            ldr->epoch++;
            ldr->index = 0;
            start_epoch(ldr);
            first = (size_t)ldr->rank * ldr->batch;
        }
        for (size_t i = 0; i < ldr->batch; i++) {
            size_t item = ldr->perm[first + i];
            fill_row(ldr, i,
                     ldr->ds->kind == OB_DATASET_TEXT ? ldr->phase + item * ldr->ds->context
                                                      : item);
        }
        ldr->index += step;
        set_batch(ldr, out, ldr->batch);
        return OB_OK;
    }

    if (first >= ldr->items) {
        /* This rank's share of the pass is done: say so once, then start the next pass. */
        ldr->epoch++;
        ldr->index = 0;
        set_batch(ldr, out, 0);
        return OB_OK;
    }
    size_t n = ldr->items - first < ldr->batch ? ldr->items - first : ldr->batch;
    for (size_t i = 0; i < n; i++)
        fill_row(ldr, i, pass_source(ldr, first + i));
    /* Clamped so that a position never points past the pass (set_position checks that). */
    ldr->index = ldr->index + step < ldr->items ? ldr->index + step : ldr->items;
    set_batch(ldr, out, n);
    return OB_OK;
}

void ob_loader_get_position(const ob_loader *ldr, ob_loader_position *pos)
{
    memset(pos, 0, sizeof *pos);
    pos->epoch = ldr->epoch;
    pos->index = ldr->index;
    if (ldr->sampling) pos->rng = ldr->epoch_rng;
}

ob_status ob_loader_set_position(ob_loader *ldr, const ob_loader_position *pos, ob_err *err)
{
    if (!ldr || !pos) return OB_ERR(err, OB_ERR_INVALID_ARG, "loader_set_position: NULL argument");
    if (pos->index > ldr->items)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "loader_set_position: index %llu is past the %zu items of an epoch",
                      (unsigned long long)pos->index, ldr->items);
    if (ldr->sampling) {
        const uint64_t *s = pos->rng.s;
        if ((s[0] | s[1] | s[2] | s[3]) == 0)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "loader_set_position: the rng state is all zero (not a saved position)");
        ldr->rng = pos->rng;
        start_epoch(ldr);
    }
    ldr->epoch = pos->epoch;
    ldr->index = pos->index;
    return OB_OK;
}

void ob_loader_rewind(ob_loader *ldr)
{
    /* The permutation of the current epoch stays as it is: only the index moves. */
    ldr->index = 0;
}

size_t ob_loader_epoch_size(const ob_loader *ldr)
{
    return ldr->items;
}

size_t ob_loader_rank_examples(const ob_loader *ldr)
{
    size_t step = ldr->batch * (size_t)ldr->world;
    if (ldr->sampling) return ldr->items / step * ldr->batch;
    /* Full steps give batch each; the last partial step gives what is left past this rank's
     * offset, capped at batch. */
    size_t full = ldr->items / step, rest = ldr->items % step;
    size_t off = (size_t)ldr->rank * ldr->batch;
    size_t tail = rest > off ? rest - off : 0;
    return full * ldr->batch + (tail < ldr->batch ? tail : ldr->batch);
}
