/* The job spec (onebit/jobspec.h). JSON is read by jansson; YAML is read with libyaml's event
 * API into the same jansson tree (scalars typed by the YAML 1.2 core schema); then one validator
 * walks the tree and fills a scratch ob_jobspec, which is copied out only when every check has
 * passed. Every message names the field by its path ("optimizer.beta1") so that a user can find
 * it in either format. ob_jobspec_to_json builds the canonical tree back from a struct and runs
 * the same validator on it, so its output always parses. */
#include "onebit/jobspec.h"
#include "internal.h"

#include <jansson.h>
#include <yaml.h>

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_DEPTH 32 /* nesting a spec may have (a real one has 2); bounds the YAML recursion */
#define PATH_MAX_TEXT 200 /* field paths in messages are cut here */

/* Upper bounds that match the model's and the data's own limits (model.c, data_synth.c). */
#define MAX_BATCH ((long long)1 << 24)
#define MAX_FEATURES ((long long)1 << 24)
#define MAX_LAYERS 1024LL
#define MAX_D_MODEL ((long long)1 << 16)
#define MAX_CONTEXT ((long long)1 << 16)
#define MAX_BLOCK ((long long)1 << 30)
#define NO_LIMIT LLONG_MAX

/* Spec names, indexed by the enum values they stand for. */
static const char *const model_kinds[] = {"softmax", "mlp", "transformer"};
static const char *const activations[] = {"relu", "tanh", "gelu"};
static const char *const data_kinds[] = {"fashion_mnist", "idx", "text", "synthetic_classification",
                                         "synthetic_text"};
static const char *const norms[] = {"standardize", "unit"};
static const char *const optim_kinds[] = {"adam", "onebit_adam"};
static const char *const compressions[] = {"on", "off", "naive"}; /* = ob_onebit_mode */
static const char *const scales[] = {"l1", "l2"};
static const char *const lr_kinds[] = {"constant", "warmup_step_decay", "cosine"};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *ob_data_kind_name(ob_data_kind kind)
{
    return (int)kind >= 0 && (int)kind < COUNT(data_kinds) ? data_kinds[kind] : "unknown";
}

/* ==== defaults ============================================================================ */

/* Only the fields that apply to kind are set; the others stay 0, so equal specs compare equal. */
static void data_default(ob_data_spec *d, ob_data_kind kind)
{
    memset(d, 0, sizeof *d);
    d->kind = kind;
    switch (kind) {
    case OB_DATA_FASHION_MNIST:
        snprintf(d->path, sizeof d->path, "%s", OB_FASHION_MNIST_DIR);
        d->norm = OB_FEATURES_STANDARDIZE;
        break;
    case OB_DATA_IDX:
        d->norm = OB_FEATURES_STANDARDIZE;
        break;
    case OB_DATA_TEXT:
        snprintf(d->path, sizeof d->path, "%s", OB_FORTUNES_DIR);
        d->eval_fraction = 0.1;
        d->max_bytes = 0;
        break;
    case OB_DATA_SYNTH_CLASSIFICATION:
        d->synth_cls.n_train = 4096;
        d->synth_cls.n_eval = 1024;
        d->synth_cls.input_dim = 32;
        d->synth_cls.num_classes = 4;
        d->synth_cls.noise = 1.0f;
        break;
    case OB_DATA_SYNTH_TEXT:
        d->synth_text.train_bytes = 200000;
        d->synth_text.eval_bytes = 20000;
        d->synth_text.alphabet = 16;
        d->synth_text.p_follow = 0.8;
        break;
    }
}

/* The model's defaults for kind, less the three fields the worker fills in from the data. */
static void model_default(ob_model_config *m, ob_model_kind kind)
{
    ob_model_config_default(m, kind);
    m->max_batch = 0;
    m->input_dim = 0;
    m->num_classes = 0;
}

void ob_jobspec_default(ob_jobspec *s)
{
    memset(s, 0, sizeof *s);
    model_default(&s->model, OB_MODEL_MLP);
    data_default(&s->data, OB_DATA_FASHION_MNIST);
    ob_optim_config_default(&s->optim, OB_OPTIM_ADAM);
    ob_lr_schedule_default(&s->lr);
    s->seed = 1;
    s->log_interval = 10;
    s->checkpoint_keep = 3;
}

/* ==== messages ============================================================================ */

/* "sec.key", or "key" at the top level (sec ""). */
static const char *join(char *buf, size_t cap, const char *sec, const char *key)
{
    if (sec[0])
        snprintf(buf, cap, "%.100s.%.96s", sec, key);
    else
        snprintf(buf, cap, "%.100s", key);
    return buf;
}

/* A short rendering of a value: its JSON text for scalars ("64" quoted is a string). */
static const char *repr(char *buf, size_t cap, const json_t *v)
{
    if (json_is_object(v)) return snprintf(buf, cap, "an object"), buf;
    if (json_is_array(v)) return snprintf(buf, cap, "a list"), buf;
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(10));
    if (!s) return snprintf(buf, cap, "(a value)"), buf;
    if (strlen(s) >= cap)
        snprintf(buf, cap, "%.*s...", (int)cap - 4, s);
    else
        snprintf(buf, cap, "%s", s);
    free(s);
    return buf;
}

/* "<path>: expected <what>, got <value>" */
static ob_status bad_value(ob_err *err, const char *sec, const char *key, const char *what,
                           const json_t *v)
{
    char path[PATH_MAX_TEXT], got[72];
    return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: expected %.200s, got %s",
                  join(path, sizeof path, sec, key), what, repr(got, sizeof got, v));
}

static ob_status missing(ob_err *err, const char *sec, const char *key, const char *hint)
{
    char path[PATH_MAX_TEXT];
    return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: missing required field%s",
                  join(path, sizeof path, sec, key), hint);
}

/* "a, b or c" */
static void join_names(char *buf, size_t cap, const char *const *names, int n, unsigned mask)
{
    size_t used = 0;
    int total = 0, done = 0;
    for (int i = 0; i < n; i++)
        total += (mask >> i) & 1u;
    buf[0] = '\0';
    for (int i = 0; i < n && used < cap; i++) {
        if (!((mask >> i) & 1u)) continue;
        const char *sep = done == 0 ? "" : done == total - 1 ? " or " : ", ";
        int k = snprintf(buf + used, cap - used, "%s%s", sep, names[i]);
        if (k < 0) break;
        used += (size_t)k;
        done++;
    }
}

/* ==== reading typed fields ================================================================ */

/* Every getter leaves *out unchanged when the field is absent (the default stays). */

static void describe_int(char *buf, size_t cap, long long lo, long long hi)
{
    const char *base = lo == 1 ? "a positive integer" : lo == 0 ? "an integer >= 0" : NULL;
    if (base && hi == NO_LIMIT)
        snprintf(buf, cap, "%s", base);
    else if (base)
        snprintf(buf, cap, "%s <= %lld", base, hi);
    else if (hi == NO_LIMIT)
        snprintf(buf, cap, "an integer >= %lld", lo);
    else
        snprintf(buf, cap, "an integer in [%lld, %lld]", lo, hi);
}

static ob_status get_int(const json_t *obj, const char *sec, const char *key, long long lo,
                         long long hi, long long *out, ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        /* A value of another type hears what kind of integer; one out of range, the range. */
        char what[96];
        describe_int(what, sizeof what, lo, json_is_integer(v) ? hi : NO_LIMIT);
        return bad_value(err, sec, key, what, v);
    }
    *out = json_integer_value(v);
    return OB_OK;
}

static ob_status get_long(const json_t *obj, const char *sec, const char *key, long lo, long hi,
                          long *out, ob_err *err)
{
    long long x = *out;
    ob_status st = get_int(obj, sec, key, lo, hi, &x, err);
    if (st == OB_OK) *out = (long)x;
    return st;
}

static ob_status get_size(const json_t *obj, const char *sec, const char *key, long long lo,
                          long long hi, size_t *out, ob_err *err)
{
    long long x = (long long)*out;
    ob_status st = get_int(obj, sec, key, lo, hi, &x, err);
    if (st == OB_OK) *out = (size_t)x;
    return st;
}

/* A number (integer or real; both formats only produce finite ones). */
static ob_status get_number(const json_t *obj, const char *sec, const char *key, double *out,
                            ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    if (!json_is_number(v)) return bad_value(err, sec, key, "a number", v);
    *out = json_number_value(v);
    return OB_OK;
}

/* A number in the interval lo..hi, each end open or closed as the brackets in what say. */
static ob_status get_real(const json_t *obj, const char *sec, const char *key, double lo,
                          int lo_open, double hi, int hi_open, const char *what, double *out,
                          ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    int ok = json_is_number(v) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
    if (!ok) return bad_value(err, sec, key, what, v);
    *out = x;
    return OB_OK;
}

static ob_status get_bool(const json_t *obj, const char *sec, const char *key, int *out,
                          ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    if (!json_is_boolean(v)) return bad_value(err, sec, key, "true or false", v);
    *out = json_is_true(v);
    return OB_OK;
}

/* A string without NUL bytes. */
static const char *plain_string(const json_t *v)
{
    if (!json_is_string(v)) return NULL;
    const char *s = json_string_value(v);
    return strlen(s) == json_string_length(v) ? s : NULL;
}

/* One of names[0..n); *out gets its index. */
static ob_status get_enum(const json_t *obj, const char *sec, const char *key,
                          const char *const *names, int n, int *out, ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    const char *s = plain_string(v);
    for (int i = 0; s && i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return OB_OK;
        }
    }
    char what[192];
    int k = snprintf(what, sizeof what, "one of ");
    join_names(what + k, sizeof what - (size_t)k, names, n, ~0u);
    return bad_value(err, sec, key, what, v);
}

/* A required kind field ("type"). */
static ob_status get_kind(const json_t *obj, const char *sec, const char *key,
                          const char *const *names, int n, int *out, ob_err *err)
{
    if (!json_object_get(obj, key)) {
        char list[160], hint[192];
        join_names(list, sizeof list, names, n, ~0u);
        snprintf(hint, sizeof hint, " (one of %s)", list);
        return missing(err, sec, key, hint);
    }
    return get_enum(obj, sec, key, names, n, out, err);
}

/* A file-system path: a non-empty string shorter than the buffer. */
static ob_status get_path(const json_t *obj, const char *sec, const char *key, int allow_empty,
                          char *buf, size_t cap, ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    const char *s = plain_string(v);
    if (!s || (!allow_empty && !s[0]) || strlen(s) >= cap) {
        char what[96];
        snprintf(what, sizeof what, "a %spath of at most %zu bytes",
                 allow_empty ? "" : "non-empty ", cap - 1);
        return bad_value(err, sec, key, what, v);
    }
    memcpy(buf, s, strlen(s) + 1);
    return OB_OK;
}

/* A section: an object, or absent (*out NULL) when optional. */
static ob_status get_section(const json_t *root, const char *key, int required, const json_t **out,
                             ob_err *err)
{
    const json_t *v = json_object_get(root, key);
    *out = NULL;
    if (!v) return required ? missing(err, "", key, "") : OB_OK;
    if (!json_is_object(v)) return bad_value(err, "", key, "an object (mapping)", v);
    *out = v;
    return OB_OK;
}

/* ==== unknown and misplaced fields ======================================================== */

typedef struct field {
    const char *key;
    unsigned kinds; /* bit k: the field applies to kind k */
} field;

#define ALL 0xffffffffu
#define K(x) (1u << (x))

static const field top_fields[] = {
    {"name", ALL},       {"model", ALL},        {"data", ALL},       {"optimizer", ALL},
    {"batch_size", ALL}, {"steps", ALL},        {"lr", ALL},         {"seed", ALL},
    {"eval", ALL},       {"log_interval", ALL}, {"checkpoint", ALL}, {"warm_start", ALL},
    {"device", ALL},
};
#define MLP K(OB_MODEL_MLP)
#define TF K(OB_MODEL_TRANSFORMER)
static const field model_fields[] = {
    {"type", ALL}, {"hidden", MLP}, {"activation", MLP}, {"layers", TF},
    {"heads", TF}, {"d_model", TF}, {"context", TF},     {"tied_output", TF},
};
#define FM K(OB_DATA_FASHION_MNIST)
#define IDX K(OB_DATA_IDX)
#define TXT K(OB_DATA_TEXT)
#define SC K(OB_DATA_SYNTH_CLASSIFICATION)
#define ST K(OB_DATA_SYNTH_TEXT)
static const field data_fields[] = {
    {"type", ALL},          {"path", FM | IDX | TXT}, {"normalize", FM | IDX},
    {"eval_fraction", TXT}, {"max_bytes", TXT},       {"n_train", SC},
    {"n_eval", SC},         {"input_dim", SC},        {"num_classes", SC},
    {"noise", SC},          {"train_bytes", ST},      {"eval_bytes", ST},
    {"alphabet", ST},       {"p_follow", ST},
};
#define OB1 K(OB_OPTIM_ONEBIT_ADAM)
static const field optim_fields[] = {
    {"type", ALL},
    {"beta1", ALL},
    {"beta2", ALL},
    {"eps", ALL},
    {"weight_decay", ALL},
    {"bias_correction", ALL},
    {"compression", OB1},
    {"freeze_step", OB1},
    {"freeze_threshold", OB1},
    {"freeze_min_steps", OB1},
    {"block_size", OB1},
    {"scale", OB1},
    {"precondition", OB1},
};
static const field lr_fields[] = {
    {"schedule", ALL},
    {"peak", ALL},
    {"warmup_steps", ALL},
    {"decay_rate", K(OB_LR_WARMUP_STEP_DECAY)},
    {"decay_every", K(OB_LR_WARMUP_STEP_DECAY)},
    {"min_lr", K(OB_LR_COSINE)},
};
static const field eval_fields[] = {{"interval", ALL}, {"max_examples", ALL}};
static const field checkpoint_fields[] = {
    {"dir", ALL}, {"interval", ALL}, {"keep", ALL}, {"async", ALL}};
static const field warm_start_fields[] = {{"from", ALL}, {"params", ALL}};

/* Levenshtein distance, for "did you mean" hints; long strings count as far apart. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[33];
    if (la > 32 || lb > 32) return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Rejects a key of obj that is not in fields ("unknown field", with the nearest name as a hint)
 * or that belongs to another kind ("only for text"). kind_names may be NULL when no field of the
 * table depends on a kind. Keys are checked in document order. */
static ob_status check_fields(const json_t *obj, const char *sec, const field *fields, int n,
                              const char *const *kind_names, int n_kinds, int kind, ob_err *err)
{
    for (void *it = json_object_iter((json_t *)obj); it;
         it = json_object_iter_next((json_t *)obj, it)) {
        const char *key = json_object_iter_key(it);
        const field *f = NULL;
        const char *near = NULL;
        size_t near_d = 3;
        for (int i = 0; i < n && !f; i++) {
            if (strcmp(key, fields[i].key) == 0) f = &fields[i];
            size_t d = edit_distance(key, fields[i].key);
            if (d < near_d && d < strlen(fields[i].key)) near = fields[i].key, near_d = d;
        }
        char path[PATH_MAX_TEXT];
        join(path, sizeof path, sec, key);
        if (!f && near)
            return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: unknown field (did you mean %s?)", path,
                          near);
        if (!f) return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: unknown field", path);
        if (kind_names && !(f->kinds & K(kind))) {
            char owners[160];
            join_names(owners, sizeof owners, kind_names, n_kinds, f->kinds);
            return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: only for %s", path, owners);
        }
    }
    return OB_OK;
}

/* ==== the validator ======================================================================= */

static ob_status read_name(const json_t *root, ob_jobspec *s, ob_err *err)
{
    const json_t *v = json_object_get(root, "name");
    if (!v) return OB_OK;
    const char *name = plain_string(v);
    int ok = name && strlen(name) < sizeof s->name;
    for (const char *c = name; ok && *c; c++) {
        ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
             *c == '.' || *c == '_' || *c == '-';
    }
    if (!ok)
        return bad_value(err, "", "name", "a string of at most 127 characters from [A-Za-z0-9._-]",
                         v);
    memcpy(s->name, name, strlen(name) + 1);
    return OB_OK;
}

static ob_status read_hidden(const json_t *m, ob_model_config *cfg, ob_err *err)
{
    const json_t *v = json_object_get(m, "hidden");
    if (!v) return OB_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (n < 1 || n > OB_MODEL_MAX_HIDDEN) {
        char got[72];
        if (json_is_array(v)) snprintf(got, sizeof got, "a list of %zu entries", n);
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "model.hidden: expected a list of 1 to %d positive integers, got %s",
                      OB_MODEL_MAX_HIDDEN, json_is_array(v) ? got : repr(got, sizeof got, v));
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *w = json_array_get(v, i);
        if (!json_is_integer(w) || json_integer_value(w) < 1 ||
            json_integer_value(w) > MAX_FEATURES) {
            char got[72];
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "model.hidden[%zu]: expected a positive integer <= %lld, got %s", i,
                          MAX_FEATURES, repr(got, sizeof got, w));
        }
        cfg->hidden[i] = (size_t)json_integer_value(w);
    }
    for (size_t i = n; i < OB_MODEL_MAX_HIDDEN; i++)
        cfg->hidden[i] = 0;
    cfg->num_hidden = n;
    return OB_OK;
}

static ob_status read_model(const json_t *m, ob_jobspec *s, ob_err *err)
{
    int kind = 0;
    ob_status st = get_kind(m, "model", "type", model_kinds, COUNT(model_kinds), &kind, err);
    if (st) return st;
    ob_model_config *cfg = &s->model;
    model_default(cfg, (ob_model_kind)kind);
    st = check_fields(m, "model", model_fields, COUNT(model_fields), model_kinds,
                      COUNT(model_kinds), kind, err);
    if (st) return st;

    if (kind == OB_MODEL_MLP) {
        int act = (int)cfg->activation;
        if ((st = read_hidden(m, cfg, err))) return st;
        if ((st = get_enum(m, "model", "activation", activations, COUNT(activations), &act, err)))
            return st;
        cfg->activation = (ob_activation)act;
    }
    if (kind == OB_MODEL_TRANSFORMER) {
        if ((st = get_size(m, "model", "layers", 1, MAX_LAYERS, &cfg->n_layer, err)) ||
            (st = get_size(m, "model", "heads", 1, MAX_D_MODEL, &cfg->n_head, err)) ||
            (st = get_size(m, "model", "d_model", 1, MAX_D_MODEL, &cfg->d_model, err)) ||
            (st = get_size(m, "model", "context", 1, MAX_CONTEXT, &cfg->context, err)) ||
            (st = get_bool(m, "model", "tied_output", &cfg->tied_output, err)))
            return st;
        if (cfg->d_model % cfg->n_head != 0)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "model.heads: %zu does not divide model.d_model (%zu)", cfg->n_head,
                          cfg->d_model);
        /* batch * context is the row count of the model's sgemm calls, which take an int. */
        if (s->batch_size > (size_t)INT_MAX / cfg->context)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "batch_size: %zu sequences of model.context %zu bytes exceed %d tokens "
                          "per step",
                          s->batch_size, cfg->context, INT_MAX);
    }
    return OB_OK;
}

/* The transformer reads text; the classifiers read feature vectors. */
static ob_status check_pairing(const ob_jobspec *s, ob_err *err)
{
    int text = s->data.kind == OB_DATA_TEXT || s->data.kind == OB_DATA_SYNTH_TEXT;
    int lm = s->model.kind == OB_MODEL_TRANSFORMER;
    if (lm && !text)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "model.type: transformer needs text data (data.type text or "
                      "synthetic_text), but data.type is %s",
                      data_kinds[s->data.kind]);
    if (!lm && text)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "model.type: %s needs classification data (data.type fashion_mnist, idx or "
                      "synthetic_classification), but data.type is %s",
                      model_kinds[s->model.kind], data_kinds[s->data.kind]);
    return OB_OK;
}

static ob_status read_synth_cls(const json_t *d, ob_jobspec *s, ob_err *err)
{
    ob_synth_classification_spec *c = &s->data.synth_cls;
    long long classes = c->num_classes;
    double noise = c->noise;
    ob_status st;
    if ((st = get_size(d, "data", "n_train", 1, UINT32_MAX, &c->n_train, err)) ||
        (st = get_size(d, "data", "n_eval", 1, UINT32_MAX, &c->n_eval, err)) ||
        (st = get_size(d, "data", "input_dim", 1, MAX_FEATURES, &c->input_dim, err)) ||
        (st = get_int(d, "data", "num_classes", 2, MAX_FEATURES, &classes, err)) ||
        (st = get_real(d, "data", "noise", 0.0, 0, FLT_MAX, 0, "a number >= 0", &noise, err)))
        return st;
    c->num_classes = (int)classes;
    c->noise = (float)noise;
    c->seed = s->seed;
    return OB_OK;
}

static ob_status read_synth_text(const json_t *d, ob_jobspec *s, ob_err *err)
{
    ob_synth_text_spec *t = &s->data.synth_text;
    long long alphabet = t->alphabet;
    ob_status st;
    if ((st = get_size(d, "data", "train_bytes", 1, NO_LIMIT, &t->train_bytes, err)) ||
        (st = get_size(d, "data", "eval_bytes", 1, NO_LIMIT, &t->eval_bytes, err)) ||
        (st = get_int(d, "data", "alphabet", 2, 64, &alphabet, err)) ||
        (st = get_real(d, "data", "p_follow", 0.0, 0, 1.0, 0, "a number in [0, 1]", &t->p_follow,
                       err)))
        return st;
    t->alphabet = (unsigned)alphabet;
    t->context = s->model.context;
    t->seed = s->seed;
    if (t->train_bytes / 2 < t->context)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "data.train_bytes: expected at least 2 * model.context = %zu, got %zu",
                      2 * t->context, t->train_bytes);
    if (t->eval_bytes <= t->context)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "data.eval_bytes: expected more than model.context = %zu (one window), got "
                      "%zu",
                      t->context, t->eval_bytes);
    if (t->eval_bytes > SIZE_MAX - t->train_bytes)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "data.eval_bytes: too large");
    return OB_OK;
}

static ob_status read_data(const json_t *d, ob_jobspec *s, ob_err *err)
{
    int kind = 0;
    ob_status st = get_kind(d, "data", "type", data_kinds, COUNT(data_kinds), &kind, err);
    if (st) return st;
    ob_data_spec *ds = &s->data;
    data_default(ds, (ob_data_kind)kind);
    if ((st = check_pairing(s, err))) return st;
    st = check_fields(d, "data", data_fields, COUNT(data_fields), data_kinds, COUNT(data_kinds),
                      kind, err);
    if (st) return st;

    int norm = (int)ds->norm;
    switch (ds->kind) {
    case OB_DATA_IDX:
        if (!json_object_get(d, "path"))
            return missing(err, "data", "path", " (idx needs the directory of the IDX files)");
        /* fall through */
    case OB_DATA_FASHION_MNIST:
        if ((st = get_path(d, "data", "path", 0, ds->path, sizeof ds->path, err)) ||
            (st = get_enum(d, "data", "normalize", norms, COUNT(norms), &norm, err)))
            return st;
        ds->norm = (ob_feature_norm)norm;
        return OB_OK;
    case OB_DATA_TEXT:
        if ((st = get_path(d, "data", "path", 0, ds->path, sizeof ds->path, err)) ||
            (st = get_real(d, "data", "eval_fraction", 0.0, 1, 1.0, 1, "a number in (0, 1)",
                           &ds->eval_fraction, err)) ||
            (st = get_size(d, "data", "max_bytes", 0, NO_LIMIT, &ds->max_bytes, err)))
            return st;
        return OB_OK;
    case OB_DATA_SYNTH_CLASSIFICATION:
        return read_synth_cls(d, s, err);
    case OB_DATA_SYNTH_TEXT:
        return read_synth_text(d, s, err);
    }
    return OB_OK;
}

static ob_status read_lr(const json_t *l, ob_jobspec *s, ob_err *err)
{
    ob_lr_schedule *lr = &s->lr;
    ob_lr_schedule_default(lr);
    lr->total_steps = s->steps;
    ob_status st = OB_OK;
    if (l) {
        int kind = (int)lr->kind;
        if ((st = get_enum(l, "lr", "schedule", lr_kinds, COUNT(lr_kinds), &kind, err))) return st;
        lr->kind = (ob_lr_kind)kind;
        if ((st = check_fields(l, "lr", lr_fields, COUNT(lr_fields), lr_kinds, COUNT(lr_kinds),
                               kind, err)) ||
            (st = get_number(l, "lr", "peak", &lr->peak, err)) ||
            (st = get_long(l, "lr", "warmup_steps", 0, LONG_MAX, &lr->warmup_steps, err)) ||
            (st = get_number(l, "lr", "decay_rate", &lr->decay_rate, err)) ||
            (st = get_long(l, "lr", "decay_every", 1, LONG_MAX, &lr->decay_every, err)) ||
            (st = get_number(l, "lr", "min_lr", &lr->min_lr, err)))
            return st;
    }
    /* Its messages already name the fields as "lr.<field>". */
    return ob_lr_schedule_validate(lr, err);
}

static ob_status read_freeze_step(const json_t *o, long *out, ob_err *err)
{
    const json_t *v = json_object_get(o, "freeze_step");
    if (!v) return OB_OK;
    const char *s = plain_string(v);
    if (s && strcmp(s, "auto") == 0) {
        *out = 0;
        return OB_OK;
    }
    if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= LONG_MAX) {
        *out = (long)json_integer_value(v);
        return OB_OK;
    }
    return bad_value(err, "optimizer", "freeze_step", "\"auto\" or a positive integer", v);
}

static ob_status read_optim(const json_t *o, ob_jobspec *s, ob_err *err)
{
    int kind = 0;
    ob_status st = get_kind(o, "optimizer", "type", optim_kinds, COUNT(optim_kinds), &kind, err);
    if (st) return st;
    ob_optim_config *c = &s->optim;
    ob_optim_config_default(c, (ob_optim_kind)kind);
    c->lr_warmup_steps = s->lr.warmup_steps;
    if ((st = check_fields(o, "optimizer", optim_fields, COUNT(optim_fields), optim_kinds,
                           COUNT(optim_kinds), kind, err)) ||
        (st = get_number(o, "optimizer", "beta1", &c->beta1, err)) ||
        (st = get_number(o, "optimizer", "beta2", &c->beta2, err)) ||
        (st = get_number(o, "optimizer", "eps", &c->eps, err)) ||
        (st = get_number(o, "optimizer", "weight_decay", &c->weight_decay, err)) ||
        (st = get_bool(o, "optimizer", "bias_correction", &c->bias_correction, err)))
        return st;
    if (kind == OB_OPTIM_ONEBIT_ADAM) {
        int mode = (int)c->mode, scale = (int)c->scale;
        if ((st = get_enum(o, "optimizer", "compression", compressions, COUNT(compressions), &mode,
                           err)) ||
            (st = read_freeze_step(o, &c->freeze_step, err)) ||
            (st = get_number(o, "optimizer", "freeze_threshold", &c->freeze_threshold, err)) ||
            (st = get_long(o, "optimizer", "freeze_min_steps", 0, LONG_MAX, &c->freeze_min_steps,
                           err)) ||
            (st = get_size(o, "optimizer", "block_size", 1, MAX_BLOCK, &c->block_size, err)) ||
            (st = get_enum(o, "optimizer", "scale", scales, COUNT(scales), &scale, err)) ||
            (st = get_bool(o, "optimizer", "precondition", &c->precondition, err)))
            return st;
        c->mode = (ob_onebit_mode)mode;
        c->scale = (ob_scale_kind)scale;
        if (c->mode == OB_ONEBIT_NAIVE && c->freeze_step > 0)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "optimizer.freeze_step: compression naive never freezes v; leave "
                          "freeze_step \"auto\"");
    }
    st = ob_optim_config_validate(c, err);
    if (st && err) {
        /* Its messages start with the field's name ("beta1 = 1.5: must be in [0, 1)"); put
         * the section in front so that the message names the spec path. */
        char inner[OB_ERR_MSG_LEN];
        memcpy(inner, err->msg, sizeof inner);
        snprintf(err->msg, sizeof err->msg, "optimizer.%.480s", inner);
    }
    return st;
}

static ob_status read_eval_ckpt(const json_t *ev, const json_t *ck, ob_jobspec *s, ob_err *err)
{
    ob_status st;
    long long keep = s->checkpoint_keep;
    if (ev &&
        ((st = check_fields(ev, "eval", eval_fields, COUNT(eval_fields), NULL, 0, 0, err)) ||
         (st = get_long(ev, "eval", "interval", 0, LONG_MAX, &s->eval_interval, err)) ||
         (st = get_size(ev, "eval", "max_examples", 0, NO_LIMIT, &s->eval_max_examples, err))))
        return st;
    if (ck &&
        ((st = check_fields(ck, "checkpoint", checkpoint_fields, COUNT(checkpoint_fields), NULL, 0,
                            0, err)) ||
         (st = get_path(ck, "checkpoint", "dir", 1, s->checkpoint_dir, sizeof s->checkpoint_dir,
                        err)) ||
         (st = get_long(ck, "checkpoint", "interval", 0, LONG_MAX, &s->checkpoint_interval, err)) ||
         (st = get_int(ck, "checkpoint", "keep", 1, INT_MAX, &keep, err)) ||
         (st = get_bool(ck, "checkpoint", "async", &s->checkpoint_async, err))))
        return st;
    s->checkpoint_keep = (int)keep;
    return OB_OK;
}

/* warm_start: the variance v_Tw (and optionally the parameters) of an earlier checkpoint; the
 * optimizer must be onebit_adam with a variance to freeze. */
static const char *const devices[] = {"cpu", "cuda"}; /* index = ob_device */

/* device: where the model and the optimizer run. The GPU path has the softmax and MLP models. */
static ob_status read_device(const json_t *root, ob_jobspec *s, ob_err *err)
{
    int dev = (int)s->device;
    ob_status st = get_enum(root, "", "device", devices, COUNT(devices), &dev, err);
    if (st) return st;
    s->device = (ob_device)dev;
    if (s->device == OB_DEVICE_CUDA && s->model.kind == OB_MODEL_TRANSFORMER)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "device: cuda runs the softmax and mlp models; the transformer runs on the "
                      "cpu (device: cpu)");
    return OB_OK;
}

static ob_status read_warm_start(const json_t *ws, ob_jobspec *s, ob_err *err)
{
    if (!ws) return OB_OK;
    ob_status st;
    if ((st = check_fields(ws, "warm_start", warm_start_fields, COUNT(warm_start_fields), NULL, 0,
                           0, err)))
        return st;
    if (!json_object_get(ws, "from")) return missing(err, "warm_start", "from", "");
    if ((st = get_path(ws, "warm_start", "from", 0, s->warm_start_from, sizeof s->warm_start_from,
                       err)) ||
        (st = get_bool(ws, "warm_start", "params", &s->warm_start_params, err)))
        return st;
    if (s->optim.kind != OB_OPTIM_ONEBIT_ADAM || s->optim.mode == OB_ONEBIT_NAIVE)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "warm_start: needs optimizer.type onebit_adam with compression on or off "
                      "(it starts in the compression phase with a frozen variance)");
    return OB_OK;
}

/* Fills s (scratch) from the tree; the first failure ends the walk. */
static ob_status validate(const json_t *root, ob_jobspec *s, ob_err *err)
{
    ob_jobspec_default(s);
    if (!json_is_object(root)) {
        char got[72];
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "job spec: expected an object (mapping) at the top level, got %s",
                      json_is_null(root) ? "nothing (null)" : repr(got, sizeof got, root));
    }
    ob_status st = check_fields(root, "", top_fields, COUNT(top_fields), NULL, 0, 0, err);
    if (st) return st;

    const json_t *model, *data, *optim, *lr, *ev, *ck, *ws;
    if ((st = get_section(root, "model", 1, &model, err)) ||
        (st = get_section(root, "data", 1, &data, err)) ||
        (st = get_section(root, "optimizer", 1, &optim, err)) ||
        (st = get_section(root, "lr", 0, &lr, err)) ||
        (st = get_section(root, "eval", 0, &ev, err)) ||
        (st = get_section(root, "checkpoint", 0, &ck, err)) ||
        (st = get_section(root, "warm_start", 0, &ws, err)))
        return st;
    if (!json_object_get(root, "batch_size")) return missing(err, "", "batch_size", "");
    if (!json_object_get(root, "steps")) return missing(err, "", "steps", "");
    long long seed = (long long)s->seed;
    if ((st = read_name(root, s, err)) ||
        (st = get_size(root, "", "batch_size", 1, MAX_BATCH, &s->batch_size, err)) ||
        (st = get_long(root, "", "steps", 1, LONG_MAX, &s->steps, err)) ||
        (st = get_int(root, "", "seed", 0, LLONG_MAX, &seed, err)) ||
        (st = get_long(root, "", "log_interval", 1, LONG_MAX, &s->log_interval, err)))
        return st;
    s->seed = (uint64_t)seed;

    if ((st = read_model(model, s, err)) || (st = read_data(data, s, err)) ||
        (st = read_lr(lr, s, err)) || (st = read_optim(optim, s, err)) ||
        (st = read_eval_ckpt(ev, ck, s, err)) || (st = read_warm_start(ws, s, err)) ||
        (st = read_device(root, s, err)))
        return st;
    return OB_OK;
}

/* ==== YAML to a jansson tree ============================================================== */

static ob_status yaml_syntax_error(const yaml_parser_t *p, ob_err *err)
{
    const char *problem = p->problem ? p->problem : "malformed YAML";
    if (p->error == YAML_MEMORY_ERROR) return OB_ERR(err, OB_ERR_NOMEM, "YAML parser");
    if (p->error == YAML_READER_ERROR) /* bad encoding: there is only a byte offset */
        return OB_ERR(err, OB_ERR_INVALID_ARG, "YAML syntax error at byte %zu: %s",
                      p->problem_offset, problem);
    if (p->context)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "YAML syntax error at line %zu, column %zu: %s (%s at line %zu)",
                      p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                      p->context_mark.line + 1);
    return OB_ERR(err, OB_ERR_INVALID_ARG, "YAML syntax error at line %zu, column %zu: %s",
                  p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

static ob_status yaml_next(yaml_parser_t *p, yaml_event_t *ev, ob_err *err)
{
    if (!yaml_parser_parse(p, ev)) return yaml_syntax_error(p, err);
    return OB_OK;
}

/* "<path>: <what> (line L, column C)", for errors found on a well-formed event. */
static ob_status yaml_at(ob_err *err, const char *path, const yaml_event_t *ev, const char *what)
{
    return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: %s (line %zu, column %zu)",
                  path[0] ? path : "job spec", what, ev->start_mark.line + 1,
                  ev->start_mark.column + 1);
}

/* Anchors, aliases and tags would let one node stand for several or change its type; a job
 * spec needs neither, so they are rejected rather than half supported. */
static ob_status yaml_check_plain(const yaml_event_t *ev, const char *path, ob_err *err)
{
    const yaml_char_t *anchor = NULL, *tag = NULL;
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        return yaml_at(err, path, ev, "YAML aliases (*name) are not supported in a job spec");
    case YAML_SCALAR_EVENT:
        anchor = ev->data.scalar.anchor;
        tag = ev->data.scalar.tag;
        break;
    case YAML_SEQUENCE_START_EVENT:
        anchor = ev->data.sequence_start.anchor;
        tag = ev->data.sequence_start.tag;
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = ev->data.mapping_start.anchor;
        tag = ev->data.mapping_start.tag;
        break;
    default:
        break;
    }
    if (anchor)
        return yaml_at(err, path, ev, "YAML anchors (&name) are not supported in a job spec");
    if (tag) return yaml_at(err, path, ev, "YAML tags (!tag) are not supported in a job spec");
    return OB_OK;
}

/* The YAML 1.2 core schema's int: [-+]?[0-9]+ | 0o[0-7]+ | 0x[0-9a-fA-F]+. Returns the base
 * and where the digits start, or 0. */
static int core_int(const char *s, const char **digits)
{
    if (s[0] == '0' && s[1] == 'o' && s[2] && strspn(s + 2, "01234567") == strlen(s + 2))
        return *digits = s + 2, 8;
    if (s[0] == '0' && s[1] == 'x' && s[2] &&
        strspn(s + 2, "0123456789abcdefABCDEF") == strlen(s + 2))
        return *digits = s + 2, 16;
    const char *p = s + (s[0] == '-' || s[0] == '+');
    if (*p && strspn(p, "0123456789") == strlen(p)) return *digits = s, 10;
    return 0;
}

/* The core schema's float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int core_float(const char *s)
{
    const char *p = s + (s[0] == '-' || s[0] == '+');
    size_t whole = strspn(p, "0123456789"), frac = 0;
    p += whole;
    if (*p == '.') {
        frac = strspn(p + 1, "0123456789");
        p += 1 + frac;
    }
    if (whole == 0 && frac == 0) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+') p++;
        size_t e = strspn(p, "0123456789");
        if (e == 0) return 0;
        p += e;
    }
    return *p == '\0';
}

static int one_of(const char *s, const char *const *words)
{
    for (; *words; words++)
        if (strcmp(s, *words) == 0) return 1;
    return 0;
}

/* A scalar as the core schema types it: quoted scalars are strings; plain ones may be null,
 * booleans, integers or floats. */
static ob_status yaml_scalar(const yaml_event_t *ev, const char *path, json_t **out, ob_err *err)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    static const char *const specials[] = {".inf",  ".Inf",  ".INF",  "+.inf", "+.Inf",
                                           "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
                                           ".NaN",  ".NAN",  NULL};

    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        *out = json_stringn(s, len);
        if (!*out) return yaml_at(err, path, ev, "a string that is not valid UTF-8");
        return OB_OK;
    }
    const char *digits = NULL;
    int base;
    if (one_of(s, nulls)) {
        *out = json_null();
    } else if (one_of(s, trues)) {
        *out = json_true();
    } else if (one_of(s, falses)) {
        *out = json_false();
    } else if (one_of(s, specials)) {
        return yaml_at(err, path, ev, "infinities and NaNs are not allowed in a job spec");
    } else if ((base = core_int(s, &digits)) != 0) {
        errno = 0;
        long long v = strtoll(digits, NULL, base);
        if (errno == ERANGE) return yaml_at(err, path, ev, "integer out of range");
        *out = json_integer(v);
    } else if (core_float(s)) {
        errno = 0;
        double v = strtod(s, NULL);
        if (!isfinite(v)) return yaml_at(err, path, ev, "number out of range");
        *out = json_real(v);
    } else {
        *out = json_stringn(s, len);
    }
    if (!*out) return OB_ERR(err, OB_ERR_NOMEM, "YAML scalar at %s", path);
    return OB_OK;
}

static ob_status yaml_node(yaml_parser_t *p, yaml_event_t *ev, const char *path, int depth,
                           json_t **out, ob_err *err);

/* One entry of a mapping: the key event *kev (taken: deleted here), then its value. */
static ob_status yaml_entry(yaml_parser_t *p, yaml_event_t *kev, const char *path, int depth,
                            json_t *obj, ob_err *err)
{
    const char *key = NULL;
    char child[PATH_MAX_TEXT] = "";
    ob_status st = yaml_check_plain(kev, path, err);
    if (st == OB_OK && kev->type != YAML_SCALAR_EVENT)
        st = yaml_at(err, path, kev, "mapping keys must be plain strings");
    if (st == OB_OK) {
        key = (const char *)kev->data.scalar.value;
        join(child, sizeof child, path, key);
        if (strlen(key) != kev->data.scalar.length)
            st = yaml_at(err, path, kev, "a key with a NUL byte");
        else if (json_object_get(obj, key))
            st = yaml_at(err, child, kev, "duplicate key");
    }
    yaml_event_t vev;
    json_t *value = NULL;
    if (st == OB_OK) st = yaml_next(p, &vev, err);
    if (st == OB_OK) st = yaml_node(p, &vev, child, depth + 1, &value, err);
    if (st == OB_OK && json_object_set_new(obj, key, value) != 0)
        st = OB_ERR(err, OB_ERR_NOMEM, "YAML mapping at %s", child);
    yaml_event_delete(kev);
    return st;
}

/* Reads the entries of a mapping whose start event was just consumed. */
static ob_status yaml_mapping(yaml_parser_t *p, const char *path, int depth, json_t *obj,
                              ob_err *err)
{
    for (;;) {
        yaml_event_t kev;
        ob_status st = yaml_next(p, &kev, err);
        if (st) return st;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return OB_OK;
        }
        if ((st = yaml_entry(p, &kev, path, depth, obj, err))) return st;
    }
}

/* Reads the items of a sequence whose start event was just consumed. */
static ob_status yaml_sequence(yaml_parser_t *p, const char *path, int depth, json_t *arr,
                               ob_err *err)
{
    for (size_t i = 0;; i++) {
        yaml_event_t ev;
        ob_status st = yaml_next(p, &ev, err);
        if (st) return st;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return OB_OK;
        }
        char child[PATH_MAX_TEXT];
        snprintf(child, sizeof child, "%.180s[%zu]", path, i);
        json_t *value = NULL;
        if ((st = yaml_node(p, &ev, child, depth + 1, &value, err))) return st;
        if (json_array_append_new(arr, value) != 0)
            return OB_ERR(err, OB_ERR_NOMEM, "YAML sequence at %s", child);
    }
}

/* Converts the node that starts with *ev (taken: deleted here) into *out. */
static ob_status yaml_node(yaml_parser_t *p, yaml_event_t *ev, const char *path, int depth,
                           json_t **out, ob_err *err)
{
    *out = NULL;
    ob_status st = yaml_check_plain(ev, path, err);
    if (st == OB_OK && depth > MAX_DEPTH)
        st = yaml_at(err, path, ev, "nested too deeply for a job spec");
    if (st == OB_OK) {
        switch (ev->type) {
        case YAML_SCALAR_EVENT:
            st = yaml_scalar(ev, path, out, err);
            break;
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT: {
            int map = ev->type == YAML_MAPPING_START_EVENT;
            json_t *node = map ? json_object() : json_array();
            if (!node) {
                st = OB_ERR(err, OB_ERR_NOMEM, "YAML node at %s", path);
                break;
            }
            st = map ? yaml_mapping(p, path, depth, node, err)
                     : yaml_sequence(p, path, depth, node, err);
            if (st)
                json_decref(node);
            else
                *out = node;
            break;
        }
        default:
            st = yaml_at(err, path, ev, "unexpected YAML event");
            break;
        }
    }
    yaml_event_delete(ev);
    return st;
}

/* One YAML document into a tree (*out owned by the caller). */
static ob_status yaml_to_tree(const char *text, size_t len, json_t **out, ob_err *err)
{
    yaml_parser_t p;
    yaml_event_t ev;
    json_t *root = NULL;
    *out = NULL;
    if (!yaml_parser_initialize(&p)) return OB_ERR(err, OB_ERR_NOMEM, "YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);

    ob_status st = yaml_next(&p, &ev, err); /* stream start */
    if (st) goto done;
    yaml_event_delete(&ev);
    if ((st = yaml_next(&p, &ev, err))) goto done;
    if (ev.type != YAML_DOCUMENT_START_EVENT) { /* stream end: comments or nothing */
        yaml_event_delete(&ev);
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "job spec: empty document");
        goto done;
    }
    yaml_event_delete(&ev);
    if ((st = yaml_next(&p, &ev, err))) goto done;
    if ((st = yaml_node(&p, &ev, "", 0, &root, err))) goto done;
    if ((st = yaml_next(&p, &ev, err))) goto done; /* document end */
    yaml_event_delete(&ev);
    if ((st = yaml_next(&p, &ev, err))) goto done;
    if (ev.type == YAML_DOCUMENT_START_EVENT)
        st = OB_ERR(err, OB_ERR_INVALID_ARG,
                    "YAML: a second document starts at line %zu; a job spec is one document",
                    ev.start_mark.line + 1);
    yaml_event_delete(&ev);
done:
    yaml_parser_delete(&p);
    if (st)
        json_decref(root);
    else
        *out = root;
    return st;
}

/* ==== parse, load ========================================================================= */

static ob_status json_to_tree(const char *text, size_t len, json_t **out, ob_err *err)
{
    json_error_t jerr;
    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!*out)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "JSON syntax error at line %d, column %d: %s",
                      jerr.line, jerr.column, jerr.text);
    return OB_OK;
}

ob_status ob_jobspec_parse(ob_jobspec *out, const char *text, size_t len, ob_spec_format fmt,
                           ob_err *err)
{
    if (!out || (!text && len > 0))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_jobspec_parse: NULL argument");
    if (len > OB_JOBSPEC_MAX_BYTES)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "job spec: %zu bytes is over the limit of %zu", len,
                      OB_JOBSPEC_MAX_BYTES);
    if (fmt != OB_SPEC_AUTO && fmt != OB_SPEC_JSON && fmt != OB_SPEC_YAML)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_jobspec_parse: unknown format %d", (int)fmt);
    /* A UTF-8 byte order mark: libyaml reads it, jansson does not. */
    size_t bom = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0, i = bom;
    while (i < len && text[i] && strchr(" \t\r\n", text[i]))
        i++;
    if (i == len) return OB_ERR(err, OB_ERR_INVALID_ARG, "job spec: empty document");
    if (fmt == OB_SPEC_AUTO) fmt = text[i] == '{' ? OB_SPEC_JSON : OB_SPEC_YAML;

    json_t *root = NULL;
    ob_status st = fmt == OB_SPEC_JSON ? json_to_tree(text + bom, len - bom, &root, err)
                                       : yaml_to_tree(text, len, &root, err);
    if (st) return st;
    ob_jobspec *tmp = malloc(sizeof *tmp);
    if (!tmp) {
        json_decref(root);
        return OB_ERR(err, OB_ERR_NOMEM, "job spec");
    }
    st = validate(root, tmp, err);
    json_decref(root);
    if (st == OB_OK) memcpy(out, tmp, sizeof *tmp);
    free(tmp);
    return st;
}

/* The format a file name implies. */
static ob_spec_format format_of(const char *path)
{
    const char *dot = strrchr(path, '.');
    if (dot && strchr(dot, '/') == NULL) {
        if (strcasecmp(dot, ".json") == 0) return OB_SPEC_JSON;
        if (strcasecmp(dot, ".yaml") == 0 || strcasecmp(dot, ".yml") == 0) return OB_SPEC_YAML;
    }
    return OB_SPEC_AUTO;
}

/* Reads the whole file (at most OB_JOBSPEC_MAX_BYTES) into *buf (malloc'd, caller frees). */
static ob_status read_file(const char *path, char **buf, size_t *len, ob_err *err)
{
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT) return OB_ERR(err, OB_ERR_NOT_FOUND, "no such file");
    if (!f) return OB_ERR(err, OB_ERR_IO, "cannot open: %s", strerror(errno));
    ob_status st = OB_OK;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        st = OB_ERR(err, OB_ERR_IO, "stat failed: %s", strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = OB_ERR(err, OB_ERR_IO, "not a regular file");
        goto done;
    }
    /* One byte more than the limit tells a file that is too large (even one that grew). */
    *buf = malloc(OB_JOBSPEC_MAX_BYTES + 1);
    if (!*buf) {
        st = OB_ERR(err, OB_ERR_NOMEM, "buffer for the job spec");
        goto done;
    }
    *len = fread(*buf, 1, OB_JOBSPEC_MAX_BYTES + 1, f);
    if (ferror(f))
        st = OB_ERR(err, OB_ERR_IO, "read failed");
    else if (*len > OB_JOBSPEC_MAX_BYTES)
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "larger than the limit of %zu bytes",
                    OB_JOBSPEC_MAX_BYTES);
done:
    fclose(f);
    if (st) {
        free(*buf);
        *buf = NULL;
    }
    return st;
}

ob_status ob_jobspec_load(ob_jobspec *out, const char *path, ob_err *err)
{
    if (!out || !path) return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_jobspec_load: NULL argument");
    char *buf = NULL;
    size_t len = 0;
    ob_status st = read_file(path, &buf, &len, err);
    if (st == OB_OK) st = ob_jobspec_parse(out, buf, len, format_of(path), err);
    free(buf);
    if (st) return OB_WRAP(err, st, "%s", path);
    return OB_OK;
}

/* ==== canonical JSON ====================================================================== */

typedef struct builder {
    int failed; /* an allocation failed somewhere */
} builder;

static void put(builder *b, json_t *obj, const char *key, json_t *v)
{
    if (!obj || !v || json_object_set_new(obj, key, v) != 0) b->failed = 1;
}

static void put_int(builder *b, json_t *obj, const char *key, long long v)
{
    put(b, obj, key, json_integer(v));
}

/* Sizes beyond the integer range cannot be valid; -1 makes the validator say so. */
static void put_size(builder *b, json_t *obj, const char *key, size_t v)
{
    put_int(b, obj, key, v > (size_t)LLONG_MAX ? -1 : (long long)v);
}

static void put_str(builder *b, json_t *obj, const char *key, const char *v)
{
    put(b, obj, key, json_string(v));
}

static void put_real(builder *b, json_t *obj, const char *key, double v)
{
    put(b, obj, key, json_real(v));
}

/* A float as the double of its shortest decimal that reads back as the same float, so that
 * 0.1f prints as 0.1 rather than 0.10000000149011612. */
static double float_as_double(float f)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

static const char *name_of(const char *const *names, int n, int i)
{
    return i >= 0 && i < n ? names[i] : "unknown";
}

static json_t *model_tree(builder *b, const ob_model_config *m)
{
    json_t *o = json_object();
    put_str(b, o, "type", name_of(model_kinds, COUNT(model_kinds), (int)m->kind));
    if (m->kind == OB_MODEL_MLP) {
        json_t *h = json_array();
        for (size_t i = 0; h && i < m->num_hidden && i < OB_MODEL_MAX_HIDDEN; i++)
            if (json_array_append_new(h, json_integer((long long)m->hidden[i])) != 0) b->failed = 1;
        put(b, o, "hidden", h);
        put_str(b, o, "activation", name_of(activations, COUNT(activations), (int)m->activation));
    } else if (m->kind == OB_MODEL_TRANSFORMER) {
        put_size(b, o, "layers", m->n_layer);
        put_size(b, o, "heads", m->n_head);
        put_size(b, o, "d_model", m->d_model);
        put_size(b, o, "context", m->context);
        put(b, o, "tied_output", json_boolean(m->tied_output));
    }
    return o;
}

static json_t *data_tree(builder *b, const ob_data_spec *d)
{
    json_t *o = json_object();
    put_str(b, o, "type", name_of(data_kinds, COUNT(data_kinds), (int)d->kind));
    switch (d->kind) {
    case OB_DATA_FASHION_MNIST:
    case OB_DATA_IDX:
        put_str(b, o, "path", d->path);
        put_str(b, o, "normalize", name_of(norms, COUNT(norms), (int)d->norm));
        break;
    case OB_DATA_TEXT:
        put_str(b, o, "path", d->path);
        put_real(b, o, "eval_fraction", d->eval_fraction);
        put_size(b, o, "max_bytes", d->max_bytes);
        break;
    case OB_DATA_SYNTH_CLASSIFICATION:
        put_size(b, o, "n_train", d->synth_cls.n_train);
        put_size(b, o, "n_eval", d->synth_cls.n_eval);
        put_size(b, o, "input_dim", d->synth_cls.input_dim);
        put_int(b, o, "num_classes", d->synth_cls.num_classes);
        put_real(b, o, "noise", float_as_double(d->synth_cls.noise));
        break;
    case OB_DATA_SYNTH_TEXT:
        put_size(b, o, "train_bytes", d->synth_text.train_bytes);
        put_size(b, o, "eval_bytes", d->synth_text.eval_bytes);
        put_int(b, o, "alphabet", d->synth_text.alphabet);
        put_real(b, o, "p_follow", d->synth_text.p_follow);
        break;
    }
    return o;
}

static json_t *optim_tree(builder *b, const ob_optim_config *c)
{
    json_t *o = json_object();
    put_str(b, o, "type", name_of(optim_kinds, COUNT(optim_kinds), (int)c->kind));
    put_real(b, o, "beta1", c->beta1);
    put_real(b, o, "beta2", c->beta2);
    put_real(b, o, "eps", c->eps);
    put_real(b, o, "weight_decay", c->weight_decay);
    put(b, o, "bias_correction", json_boolean(c->bias_correction));
    if (c->kind != OB_OPTIM_ONEBIT_ADAM) return o;
    put_str(b, o, "compression", name_of(compressions, COUNT(compressions), (int)c->mode));
    if (c->freeze_step == 0)
        put_str(b, o, "freeze_step", "auto");
    else
        put_int(b, o, "freeze_step", c->freeze_step);
    put_real(b, o, "freeze_threshold", c->freeze_threshold);
    put_int(b, o, "freeze_min_steps", c->freeze_min_steps);
    put_size(b, o, "block_size", c->block_size);
    put_str(b, o, "scale", name_of(scales, COUNT(scales), (int)c->scale));
    put(b, o, "precondition", json_boolean(c->precondition));
    return o;
}

static json_t *lr_tree(builder *b, const ob_lr_schedule *l)
{
    json_t *o = json_object();
    put_str(b, o, "schedule", name_of(lr_kinds, COUNT(lr_kinds), (int)l->kind));
    put_real(b, o, "peak", l->peak);
    put_int(b, o, "warmup_steps", l->warmup_steps);
    if (l->kind == OB_LR_WARMUP_STEP_DECAY) {
        put_real(b, o, "decay_rate", l->decay_rate);
        put_int(b, o, "decay_every", l->decay_every);
    }
    if (l->kind == OB_LR_COSINE) put_real(b, o, "min_lr", l->min_lr);
    return o;
}

static json_t *spec_tree(builder *b, const ob_jobspec *s)
{
    json_t *root = json_object();
    char name[OB_JOBSPEC_NAME_LEN], dir[OB_JOBSPEC_PATH_LEN];
    /* The struct's strings may lack a terminator; the validator rejects what is cut here. */
    snprintf(name, sizeof name, "%.*s", (int)sizeof name - 1, s->name);
    snprintf(dir, sizeof dir, "%.*s", (int)sizeof dir - 1, s->checkpoint_dir);
    put_str(b, root, "name", name);
    put(b, root, "model", model_tree(b, &s->model));
    put(b, root, "data", data_tree(b, &s->data));
    put(b, root, "optimizer", optim_tree(b, &s->optim));
    put_size(b, root, "batch_size", s->batch_size);
    put_int(b, root, "steps", s->steps);
    put(b, root, "lr", lr_tree(b, &s->lr));
    put_int(b, root, "seed", s->seed > (uint64_t)LLONG_MAX ? -1 : (long long)s->seed);
    json_t *ev = json_object();
    put_int(b, ev, "interval", s->eval_interval);
    put_size(b, ev, "max_examples", s->eval_max_examples);
    put(b, root, "eval", ev);
    put_int(b, root, "log_interval", s->log_interval);
    json_t *ck = json_object();
    put_str(b, ck, "dir", dir);
    put_int(b, ck, "interval", s->checkpoint_interval);
    put_int(b, ck, "keep", s->checkpoint_keep);
    put(b, ck, "async", json_boolean(s->checkpoint_async));
    put(b, root, "checkpoint", ck);
    if (s->warm_start_from[0]) {
        char from[OB_JOBSPEC_PATH_LEN];
        snprintf(from, sizeof from, "%.*s", (int)sizeof from - 1, s->warm_start_from);
        json_t *ws = json_object();
        put_str(b, ws, "from", from);
        put(b, ws, "params", json_boolean(s->warm_start_params));
        put(b, root, "warm_start", ws);
    }
    put_str(b, root, "device", s->device == OB_DEVICE_CUDA ? "cuda" : "cpu");
    if (!root) b->failed = 1;
    return root;
}

/* Whether every real in the tree prints back exactly with p significant digits. */
static int reals_exact(const json_t *v, int p)
{
    if (json_is_real(v)) {
        char buf[40];
        snprintf(buf, sizeof buf, "%.*g", p, json_real_value(v));
        return strtod(buf, NULL) == json_real_value(v);
    }
    for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it))
        if (!reals_exact(json_object_iter_value(it), p)) return 0;
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!reals_exact(json_array_get(v, i), p)) return 0;
    return 1;
}

ob_status ob_jobspec_to_json(const ob_jobspec *s, char **out, ob_err *err)
{
    if (!out) return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_jobspec_to_json: NULL argument");
    *out = NULL;
    if (!s) return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_jobspec_to_json: NULL argument");
    builder b = {0};
    json_t *root = spec_tree(&b, s);
    ob_status st = OB_OK;
    ob_jobspec *check = NULL;
    if (b.failed) {
        st = OB_ERR(err, OB_ERR_NOMEM, "job spec JSON");
        goto done;
    }
    check = malloc(sizeof *check);
    if (!check) {
        st = OB_ERR(err, OB_ERR_NOMEM, "job spec JSON");
        goto done;
    }
    if ((st = validate(root, check, err))) {
        OB_WRAP(err, st, "ob_jobspec_to_json: not a valid spec");
        goto done;
    }
    /* The fewest digits that keep every number exact: 0.9 rather than 0.90000000000000002. */
    int p = 1;
    while (p < 17 && !reals_exact(root, p))
        p++;
    *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(p));
    if (!*out) st = OB_ERR(err, OB_ERR_NOMEM, "job spec JSON");
done:
    free(check);
    json_decref(root);
    return st;
}
