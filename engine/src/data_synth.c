/* Seeded synthetic datasets for tests: Gaussian clusters (classification) and an order-2 Markov
 * byte source (text). Each part of a dataset draws from its own generator stream of the seed, so
 * that, say, changing n_eval leaves the centroids and the train split as they were. */
#include "data_internal.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STREAM_MODEL = 1, STREAM_TRAIN = 2, STREAM_EVAL = 3 };

static const char synth_symbols[] =
    "abcdefghijklmnopqrstuvwxyz .ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/* Draws n examples around the centroids (K, D) into new arrays. */
static ob_status draw_examples(ob_dataset *ds, ob_split s, size_t n, const float *centroids,
                               float noise, uint64_t seed, uint64_t stream, ob_err *err)
{
    size_t d = ds->input_dim;
    ds->n[s] = n;
    if (n == 0) return OB_OK;
    ds->feat[s] = malloc(n * d * sizeof(float));
    ds->label[s] = malloc(n * sizeof(int32_t));
    if (!ds->feat[s] || !ds->label[s])
        return OB_ERR(err, OB_ERR_NOMEM, "synthetic: out of memory for %zu examples", n);
    ob_rng rng;
    ob_rng_seed(&rng, seed, stream);
    for (size_t i = 0; i < n; i++) {
        int32_t y = (int32_t)ob_rng_below(&rng, (uint64_t)ds->num_classes);
        const float *c = centroids + (size_t)y * d;
        float *x = ds->feat[s] + i * d;
        for (size_t j = 0; j < d; j++)
            x[j] = c[j] + noise * ob_rng_normal(&rng);
        ds->label[s][i] = y;
    }
    return OB_OK;
}

ob_status ob_dataset_synthetic_classification(ob_dataset **out,
                                              const ob_synth_classification_spec *spec, ob_err *err)
{
    if (!out || !spec) return OB_ERR(err, OB_ERR_INVALID_ARG, "synthetic: NULL argument");
    *out = NULL;
    size_t d = spec->input_dim, k = (size_t)(spec->num_classes > 0 ? spec->num_classes : 0);
    size_t most = spec->n_train > spec->n_eval ? spec->n_train : spec->n_eval;
    if (spec->n_train < 1 || d < 1 || spec->num_classes < 2 || !(spec->noise >= 0.0f) ||
        !isfinite(spec->noise))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "synthetic: need n_train >= 1, input_dim >= 1, num_classes >= 2 and a "
                      "finite noise >= 0");
    if (most > UINT32_MAX || d > SIZE_MAX / sizeof(float) / most || k > SIZE_MAX / d / 4)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "synthetic: %zu x %zu features is too many", most,
                      d);

    char source[160];
    snprintf(source, sizeof source,
             "synthetic classification (n_train=%zu, n_eval=%zu, dim=%zu, classes=%d, seed=%llu)",
             spec->n_train, spec->n_eval, d, spec->num_classes, (unsigned long long)spec->seed);
    ob_dataset *ds = ob__dataset_alloc(OB_DATASET_CLASSIFICATION, source);
    float *centroids = malloc(k * d * sizeof(float));
    ob_status st;
    if (!ds || !centroids) {
        st = OB_ERR(err, OB_ERR_NOMEM, "synthetic: out of memory");
        goto fail;
    }
    ds->input_dim = d;
    ds->num_classes = spec->num_classes;
    ob_rng rng;
    ob_rng_seed(&rng, spec->seed, STREAM_MODEL);
    for (size_t i = 0; i < k * d; i++)
        centroids[i] = ob_rng_normal(&rng);

    st = draw_examples(ds, OB_SPLIT_TRAIN, spec->n_train, centroids, spec->noise, spec->seed,
                       STREAM_TRAIN, err);
    if (st != OB_OK) goto fail;
    st = draw_examples(ds, OB_SPLIT_EVAL, spec->n_eval, centroids, spec->noise, spec->seed,
                       STREAM_EVAL, err);
    if (st != OB_OK) goto fail;
    free(centroids);
    *out = ds;
    return OB_OK;

fail:
    free(centroids);
    ob_dataset_destroy(ds);
    return st;
}

ob_status ob_dataset_synthetic_text(ob_dataset **out, const ob_synth_text_spec *spec, ob_err *err)
{
    if (!out || !spec) return OB_ERR(err, OB_ERR_INVALID_ARG, "synthetic: NULL argument");
    *out = NULL;
    unsigned a = spec->alphabet;
    if (a < 2 || a > sizeof synth_symbols - 1 ||
        !(spec->p_follow >= 0.0 && spec->p_follow <= 1.0) || spec->context < 1)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "synthetic text: need alphabet in [2, %zu], p_follow in [0, 1], context >= 1",
                      sizeof synth_symbols - 1);
    if (spec->train_bytes / 2 < spec->context || spec->eval_bytes > SIZE_MAX - spec->train_bytes)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "synthetic text: train_bytes %zu must be at least 2 x context %zu",
                      spec->train_bytes, spec->context);

    char source[160];
    snprintf(source, sizeof source,
             "synthetic text (train=%zu, eval=%zu, alphabet=%u, p_follow=%g, seed=%llu)",
             spec->train_bytes, spec->eval_bytes, a, spec->p_follow,
             (unsigned long long)spec->seed);
    ob_dataset *ds = ob__dataset_alloc(OB_DATASET_TEXT, source);
    uint8_t *favourite = malloc((size_t)a * a); /* (a, a): successor of each symbol pair */
    ob_status st = OB_OK;
    if (!ds || !favourite) goto nomem;
    ds->context = spec->context;
    ds->text_len[OB_SPLIT_TRAIN] = spec->train_bytes;
    ds->text_len[OB_SPLIT_EVAL] = spec->eval_bytes;
    for (int s = 0; s < 2; s++)
        if (ds->text_len[s] && !(ds->text[s] = malloc(ds->text_len[s]))) goto nomem;

    ob_rng rng;
    ob_rng_seed(&rng, spec->seed, STREAM_MODEL);
    for (size_t i = 0; i < (size_t)a * a; i++)
        favourite[i] = (uint8_t)ob_rng_below(&rng, a);

    /* One chain through both splits, in symbol indices; mapped to bytes as it is stored. */
    ob_rng_seed(&rng, spec->seed, STREAM_TRAIN);
    unsigned prev2 = (unsigned)ob_rng_below(&rng, a), prev1 = (unsigned)ob_rng_below(&rng, a);
    size_t total = spec->train_bytes + spec->eval_bytes;
    for (size_t t = 0; t < total; t++) {
        unsigned sym;
        if (t == 0)
            sym = prev2;
        else if (t == 1)
            sym = prev1;
        else {
            double u = (double)(ob_rng_next(&rng) >> 11) * (1.0 / 9007199254740992.0);
            sym =
                u < spec->p_follow ? favourite[prev2 * a + prev1] : (unsigned)ob_rng_below(&rng, a);
            prev2 = prev1;
            prev1 = sym;
        }
        uint8_t byte = (uint8_t)synth_symbols[sym];
        if (t < spec->train_bytes)
            ds->text[OB_SPLIT_TRAIN][t] = byte;
        else
            ds->text[OB_SPLIT_EVAL][t - spec->train_bytes] = byte;
    }
    free(favourite);
    *out = ds;
    return OB_OK;

nomem:
    st = OB_ERR(err, OB_ERR_NOMEM, "synthetic text: out of memory");
    free(favourite);
    ob_dataset_destroy(ds);
    return st;
}

double ob_synth_text_entropy(const ob_synth_text_spec *spec)
{
    /* The favourite has probability p + (1 - p) / a, each other symbol (1 - p) / a. */
    double a = spec->alphabet, p = spec->p_follow;
    double rest = (1.0 - p) / a, fav = p + rest, h = 0.0;
    if (fav > 0.0) h -= fav * log(fav);
    if (rest > 0.0) h -= (a - 1.0) * rest * log(rest);
    return h;
}
