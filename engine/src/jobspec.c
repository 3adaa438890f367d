/* The job spec (onebit/jobspec.h). JSON is read by jansson; YAML is read with libyaml's event
 * API into the same jansson tree (scalars typed by the YAML 1.2 core schema); then one validator
 * walks the tree and fills a scratch ob_jobspec, which is copied out only when every check has
 * passed. Every message names the field by its path ("optimizer.beta1") so that a user can find
 * it in either format. ob_jobspec_to_json builds the canonical tree back from a struct and runs
 * the same validator on it, so its output always parses.
 *
 * This file: defaults, the validator and parse/load; the field reader, the YAML converter and
 * the JSON writer are files of their own (jobspec_internal.h). */
#include "jobspec_internal.h"
#include "model_internal.h"

#include <jansson.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Upper bounds that match the model's and the data's own limits (model.c, data_synth.c). */
#define MAX_BATCH ((long long)1 << 24)
#define MAX_FEATURES ((long long)1 << 24)
#define MAX_LAYERS 1024LL
#define MAX_D_MODEL ((long long)1 << 16)
#define MAX_CONTEXT ((long long)1 << 16)
#define MAX_BLOCK ((long long)1 << 30)

/* Spec names, indexed by the enum values they stand for. */
const char *const ob__spec_model_kinds[] = {"softmax", "mlp", "transformer"};
const char *const ob__spec_activations[] = {"relu", "tanh", "gelu"};
const char *const ob__spec_data_kinds[] = {"fashion_mnist", "idx", "text",
                                           "synthetic_classification", "synthetic_text"};
const char *const ob__spec_norms[] = {"standardize", "unit"};
const char *const ob__spec_optim_kinds[] = {"adam", "onebit_adam", "binsgdm", "softsign"};
const char *const ob__spec_compressions[] = {"on", "off", "naive"}; /* = ob_onebit_mode */
const char *const ob__spec_scales[] = {"l1", "l2"};
const char *const ob__spec_stabilizers[] = {"none", "adam_bound"}; /* = ob_stabilizer */
const char *const ob__spec_exchanges[] = {"fp32", "fp16", "fp8"};  /* = ob_gradient_exchange */
const char *const ob__spec_lr_kinds[] = {"constant", "warmup_step_decay", "cosine"};
const char *const ob__spec_devices[] = {"cpu", "cuda"}; /* index = ob_device */

const char *ob_data_kind_name(ob_data_kind kind)
{
    return (int)kind >= 0 && (int)kind < COUNT(ob__spec_data_kinds) ? ob__spec_data_kinds[kind]
                                                                    : "unknown";
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
    s->checkpoint_rollbacks = 2;
    s->checkpoint_loss_rise = 2.0;
    s->warm_start_refit_steps = -1;
}

static const field top_fields[] = {
    {"name", ALL},       {"model", ALL},        {"data", ALL},       {"optimizer", ALL},
    {"batch_size", ALL}, {"steps", ALL},        {"lr", ALL},         {"seed", ALL},
    {"eval", ALL},       {"log_interval", ALL}, {"checkpoint", ALL}, {"warm_start", ALL},
    {"device", ALL},     {"program", ALL},
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
#define BIN K(OB_OPTIM_BINSGDM)
#define ADAMS (K(OB_OPTIM_ADAM) | OB1) /* the optimizers with a second moment v */
static const field optim_fields[] = {
    {"type", ALL},
    {"beta1", ALL},
    {"beta2", ADAMS},
    {"eps", ALL},
    {"weight_decay", ALL},
    {"bias_correction", ADAMS},
    {"compression", OB1},
    {"freeze_step", OB1},
    {"freeze_threshold", OB1},
    {"freeze_min_steps", OB1},
    {"freeze_max_fraction", OB1},
    {"block_size", OB1 | BIN},
    {"max_denominator_step", BIN},
    {"ranks_per_node", OB1 | BIN},
    {"scale", OB1},
    {"precondition", OB1},
    {"stabilizer", OB1},
    {"stability_bound", OB1},
    {"frozen_step_ratio", OB1},
    {"refresh_steps", OB1},
    {"track_variance", OB1},
    {"track_factor", OB1},
    {"bucket_mb", ALL},
    {"overlap", ALL},
    {"gradient_exchange", ~BIN},
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
static const field checkpoint_fields[] = {{"dir", ALL},   {"interval", ALL},  {"keep", ALL},
                                          {"async", ALL}, {"rollbacks", ALL}, {"loss_rise", ALL}};
static const field warm_start_fields[] = {
    {"from", ALL}, {"params", ALL}, {"refit_steps", ALL}, {"refit_exchange", ALL}};

/* The sections whose fields a misplaced key is looked up in, for the hint. */
static const struct {
    const char *sec;
    const field *fields;
    int n;
} sections[] = {
    {"model", model_fields, COUNT(model_fields)},
    {"data", data_fields, COUNT(data_fields)},
    {"optimizer", optim_fields, COUNT(optim_fields)},
    {"lr", lr_fields, COUNT(lr_fields)},
    {"eval", eval_fields, COUNT(eval_fields)},
    {"checkpoint", checkpoint_fields, COUNT(checkpoint_fields)},
    {"warm_start", warm_start_fields, COUNT(warm_start_fields)},
};

static int has_field(const field *fields, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(fields[i].key, key)) return 1;
    return 0;
}

int ob__spec_is_top(const char *key)
{
    return has_field(top_fields, COUNT(top_fields), key);
}

const char *ob__spec_home_of(const char *key, const char *not_in)
{
    /* "type" is every section's: no hint names one of them. */
    if (!strcmp(key, "type")) return NULL;
    if (not_in[0] && ob__spec_is_top(key)) return "";
    for (int i = 0; i < COUNT(sections); i++)
        if (strcmp(sections[i].sec, not_in) && has_field(sections[i].fields, sections[i].n, key))
            return sections[i].sec;
    return NULL;
}

/* ==== the validator ======================================================================= */

/* Every reader notes each problem it finds in E and goes on with the next field; it stops early
 * only where what failed decides what comes next (a section's type, its list of fields), and
 * checks across fields run only when the fields they read were valid. A reader returns the
 * first failure (OB_OK: its fields are all valid). */

/* The status of the problems noted since E held `before` of them. */
static ob_status since(const spec_errs *E, int before)
{
    return E->n > before ? OB_ERR_INVALID_ARG : OB_OK;
}

static ob_status read_name(const json_t *root, ob_jobspec *s, spec_errs *E)
{
    const json_t *v = json_object_get(root, "name");
    if (!v) return OB_OK;
    const char *name = ob__spec_plain_string(v);
    int ok = name && strlen(name) < sizeof s->name;
    for (const char *c = name; ok && *c; c++) {
        ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
             *c == '.' || *c == '_' || *c == '-';
    }
    if (!ok)
        return ob__spec_note(
            E, ob__spec_bad_value(ONE, "", "name",
                                  "a string of at most 127 characters from [A-Za-z0-9._-]", v));
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
                      OB_MODEL_MAX_HIDDEN,
                      json_is_array(v) ? got : ob__spec_repr(got, sizeof got, v));
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *w = json_array_get(v, i);
        if (!json_is_integer(w) || json_integer_value(w) < 1 ||
            json_integer_value(w) > MAX_FEATURES) {
            char got[72];
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "model.hidden[%zu]: expected a positive integer <= %lld, got %s", i,
                          MAX_FEATURES, ob__spec_repr(got, sizeof got, w));
        }
        cfg->hidden[i] = (size_t)json_integer_value(w);
    }
    for (size_t i = n; i < OB_MODEL_MAX_HIDDEN; i++)
        cfg->hidden[i] = 0;
    cfg->num_hidden = n;
    return OB_OK;
}

/* The transformer's sizes and how they fit together and with the batch. */
static ob_status read_transformer(const json_t *m, ob_jobspec *s, spec_errs *E)
{
    ob_model_config *cfg = &s->model;
    int before = E->n;
    ob__spec_note(E, ob__spec_get_size(m, "model", "layers", 1, MAX_LAYERS, &cfg->n_layer, ONE));
    ob__spec_note(E, ob__spec_get_size(m, "model", "heads", 1, MAX_D_MODEL, &cfg->n_head, ONE));
    ob__spec_note(E, ob__spec_get_size(m, "model", "d_model", 1, MAX_D_MODEL, &cfg->d_model, ONE));
    ob__spec_note(E, ob__spec_get_size(m, "model", "context", 1, MAX_CONTEXT, &cfg->context, ONE));
    ob__spec_note(E, ob__spec_get_bool(m, "model", "tied_output", &cfg->tied_output, ONE));
    if (since(E, before)) return OB_ERR_INVALID_ARG;
    if (cfg->d_model % cfg->n_head != 0)
        return ob__spec_note(E, OB_ERR(ONE, OB_ERR_INVALID_ARG,
                                       "model.heads: %zu does not divide model.d_model (%zu)",
                                       cfg->n_head, cfg->d_model));
    /* batch * context is the row count of the model's sgemm calls, which take an int. */
    if (s->batch_size > (size_t)INT_MAX / cfg->context)
        return ob__spec_note(E, OB_ERR(ONE, OB_ERR_INVALID_ARG,
                                       "batch_size: %zu sequences of model.context %zu bytes "
                                       "exceed %d tokens per step",
                                       s->batch_size, cfg->context, INT_MAX));
    return OB_OK;
}

static ob_status read_model(const json_t *m, ob_jobspec *s, spec_errs *E)
{
    int kind = 0;
    if (ob__spec_note(E, ob__spec_get_kind(m, "model", "type", ob__spec_model_kinds,
                                           COUNT(ob__spec_model_kinds), &kind, ONE)))
        return OB_ERR_INVALID_ARG;
    ob_model_config *cfg = &s->model;
    model_default(cfg, (ob_model_kind)kind);
    int before = E->n;
    ob__spec_check_fields(m, "model", model_fields, COUNT(model_fields), ob__spec_model_kinds,
                          COUNT(ob__spec_model_kinds), kind, E);
    if (kind == OB_MODEL_MLP) {
        int act = (int)cfg->activation;
        ob__spec_note(E, read_hidden(m, cfg, ONE));
        ob__spec_note(E, ob__spec_get_enum(m, "model", "activation", ob__spec_activations,
                                           COUNT(ob__spec_activations), &act, ONE));
        cfg->activation = (ob_activation)act;
    }
    if (kind == OB_MODEL_TRANSFORMER) read_transformer(m, s, E);
    return since(E, before);
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
                      ob__spec_data_kinds[s->data.kind]);
    if (!lm && text)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "model.type: %s needs classification data (data.type fashion_mnist, idx or "
                      "synthetic_classification), but data.type is %s",
                      ob__spec_model_kinds[s->model.kind], ob__spec_data_kinds[s->data.kind]);
    return OB_OK;
}

static ob_status read_synth_cls(const json_t *d, ob_jobspec *s, spec_errs *E)
{
    ob_synth_classification_spec *c = &s->data.synth_cls;
    long long classes = c->num_classes;
    double noise = c->noise;
    int before = E->n;
    ob__spec_note(E, ob__spec_get_size(d, "data", "n_train", 1, UINT32_MAX, &c->n_train, ONE));
    ob__spec_note(E, ob__spec_get_size(d, "data", "n_eval", 1, UINT32_MAX, &c->n_eval, ONE));
    ob__spec_note(E,
                  ob__spec_get_size(d, "data", "input_dim", 1, MAX_FEATURES, &c->input_dim, ONE));
    ob__spec_note(E, ob__spec_get_int(d, "data", "num_classes", 2, MAX_FEATURES, &classes, ONE));
    ob__spec_note(
        E, ob__spec_get_real(d, "data", "noise", 0.0, 0, FLT_MAX, 0, "a number >= 0", &noise, ONE));
    c->num_classes = (int)classes;
    c->noise = (float)noise;
    c->seed = s->seed;
    return since(E, before);
}

/* model_ok: the model section was valid (its context bounds the text's sizes). */
static ob_status read_synth_text(const json_t *d, ob_jobspec *s, int model_ok, spec_errs *E)
{
    ob_synth_text_spec *t = &s->data.synth_text;
    long long alphabet = t->alphabet;
    int before = E->n;
    ob__spec_note(E,
                  ob__spec_get_size(d, "data", "train_bytes", 1, NO_LIMIT, &t->train_bytes, ONE));
    ob__spec_note(E, ob__spec_get_size(d, "data", "eval_bytes", 1, NO_LIMIT, &t->eval_bytes, ONE));
    ob__spec_note(E, ob__spec_get_int(d, "data", "alphabet", 2, 64, &alphabet, ONE));
    ob__spec_note(E, ob__spec_get_real(d, "data", "p_follow", 0.0, 0, 1.0, 0, "a number in [0, 1]",
                                       &t->p_follow, ONE));
    t->alphabet = (unsigned)alphabet;
    t->context = s->model.context;
    t->seed = s->seed;
    if (since(E, before) || !model_ok) return since(E, before);
    if (t->train_bytes / 2 < t->context)
        return ob__spec_note(
            E, OB_ERR(ONE, OB_ERR_INVALID_ARG,
                      "data.train_bytes: expected at least 2 * model.context = %zu, got %zu",
                      2 * t->context, t->train_bytes));
    if (t->eval_bytes <= t->context)
        return ob__spec_note(E, OB_ERR(ONE, OB_ERR_INVALID_ARG,
                                       "data.eval_bytes: expected more than model.context = %zu "
                                       "(one window), got %zu",
                                       t->context, t->eval_bytes));
    if (t->eval_bytes > SIZE_MAX - t->train_bytes)
        return ob__spec_note(E, OB_ERR(ONE, OB_ERR_INVALID_ARG, "data.eval_bytes: too large"));
    return OB_OK;
}

static ob_status read_data(const json_t *d, ob_jobspec *s, int model_ok, spec_errs *E)
{
    int kind = 0;
    if (ob__spec_note(E, ob__spec_get_kind(d, "data", "type", ob__spec_data_kinds,
                                           COUNT(ob__spec_data_kinds), &kind, ONE)))
        return OB_ERR_INVALID_ARG;
    ob_data_spec *ds = &s->data;
    data_default(ds, (ob_data_kind)kind);
    int before = E->n;
    if (model_ok) ob__spec_note(E, check_pairing(s, ONE));
    ob__spec_check_fields(d, "data", data_fields, COUNT(data_fields), ob__spec_data_kinds,
                          COUNT(ob__spec_data_kinds), kind, E);

    int norm = (int)ds->norm;
    switch (ds->kind) {
    case OB_DATA_IDX:
        if (!json_object_get(d, "path"))
            ob__spec_note(E, ob__spec_missing(ONE, "data", "path",
                                              " (idx needs the directory of the IDX files)"));
        /* fall through */
    case OB_DATA_FASHION_MNIST:
        ob__spec_note(E, ob__spec_get_path(d, "data", "path", 0, ds->path, sizeof ds->path, ONE));
        ob__spec_note(E, ob__spec_get_enum(d, "data", "normalize", ob__spec_norms,
                                           COUNT(ob__spec_norms), &norm, ONE));
        ds->norm = (ob_feature_norm)norm;
        break;
    case OB_DATA_TEXT:
        ob__spec_note(E, ob__spec_get_path(d, "data", "path", 0, ds->path, sizeof ds->path, ONE));
        ob__spec_note(E, ob__spec_get_real(d, "data", "eval_fraction", 0.0, 1, 1.0, 1,
                                           "a number in (0, 1)", &ds->eval_fraction, ONE));
        ob__spec_note(E,
                      ob__spec_get_size(d, "data", "max_bytes", 0, NO_LIMIT, &ds->max_bytes, ONE));
        break;
    case OB_DATA_SYNTH_CLASSIFICATION:
        read_synth_cls(d, s, E);
        break;
    case OB_DATA_SYNTH_TEXT:
        read_synth_text(d, s, model_ok, E);
        break;
    }
    return since(E, before);
}

/* steps_ok: the top-level steps were valid (the schedule's length). */
static ob_status read_lr(const json_t *l, ob_jobspec *s, int steps_ok, spec_errs *E)
{
    ob_lr_schedule *lr = &s->lr;
    ob_lr_schedule_default(lr);
    lr->total_steps = s->steps;
    int before = E->n;
    if (l) {
        int kind = (int)lr->kind;
        if (ob__spec_note(E, ob__spec_get_enum(l, "lr", "schedule", ob__spec_lr_kinds,
                                               COUNT(ob__spec_lr_kinds), &kind, ONE)))
            return OB_ERR_INVALID_ARG;
        lr->kind = (ob_lr_kind)kind;
        ob__spec_check_fields(l, "lr", lr_fields, COUNT(lr_fields), ob__spec_lr_kinds,
                              COUNT(ob__spec_lr_kinds), kind, E);
        ob__spec_note(E, ob__spec_get_number(l, "lr", "peak", &lr->peak, ONE));
        ob__spec_note(
            E, ob__spec_get_long(l, "lr", "warmup_steps", 0, LONG_MAX, &lr->warmup_steps, ONE));
        ob__spec_note(E, ob__spec_get_number(l, "lr", "decay_rate", &lr->decay_rate, ONE));
        ob__spec_note(
            E, ob__spec_get_long(l, "lr", "decay_every", 1, LONG_MAX, &lr->decay_every, ONE));
        ob__spec_note(E, ob__spec_get_number(l, "lr", "min_lr", &lr->min_lr, ONE));
        if (since(E, before)) return OB_ERR_INVALID_ARG;
    }
    /* Its messages already name the fields as "lr.<field>". */
    return steps_ok ? ob__spec_note(E, ob_lr_schedule_validate(lr, ONE)) : since(E, before);
}

static ob_status read_freeze_step(const json_t *o, long *out, ob_err *err)
{
    const json_t *v = json_object_get(o, "freeze_step");
    if (!v) return OB_OK;
    const char *s = ob__spec_plain_string(v);
    if (s && strcmp(s, "auto") == 0) {
        *out = 0;
        return OB_OK;
    }
    if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= LONG_MAX) {
        *out = (long)json_integer_value(v);
        return OB_OK;
    }
    return ob__spec_bad_value(err, "optimizer", "freeze_step", "\"auto\" or a positive integer", v);
}

/* overlap and bucket_mb (MiB, a real in [0, 1024]: 0 is one bucket). Buckets pay only when
 * they overlap the backward pass (alone they add rounds to the exchange), so bucket_mb defaults
 * to OB_OPTIM_BUCKET_BYTES with overlap and to one bucket without. And gradient_exchange, how
 * those buckets cross the network (fp32, fp16 or fp8): a job's onebit_adam sends its warmup's
 * gradients in fp8 unless it says otherwise (on the robustness suite's 31 jobs it ends where
 * fp32 does, median +0.02 %, in 2.1-3.5x fewer bytes over the run: docs/robustness), every
 * other type in fp32. */
static void read_buckets(const json_t *o, ob_optim_config *c, spec_errs *E)
{
    ob__spec_note(E, ob__spec_get_bool(o, "optimizer", "overlap", &c->overlap, ONE));
    double mb = c->overlap ? (double)OB_OPTIM_BUCKET_BYTES / (double)(1 << 20) : 0.0;
    if (!ob__spec_note(E,
                       ob__spec_get_real(o, "optimizer", "bucket_mb", 0.0, 0, 1024.0, 0,
                                         "a number of MiB in [0, 1024] (0: one bucket)", &mb, ONE)))
        c->bucket_bytes = (size_t)llround(mb * (double)(1 << 20));
    int ex = c->kind == OB_OPTIM_ONEBIT_ADAM ? (int)OB_EXCHANGE_FP8 : (int)c->gradient_exchange;
    ob__spec_note(E, ob__spec_get_enum(o, "optimizer", "gradient_exchange", ob__spec_exchanges,
                                       COUNT(ob__spec_exchanges), &ex, ONE));
    c->gradient_exchange = (ob_gradient_exchange)ex;
}

/* optimizer.freeze_max_fraction (after the optimizer's config is valid and the LR warmup is
 * known): the latest auto freeze, optim.freeze_max_step. */
static ob_status read_freeze_max(const json_t *o, ob_jobspec *s, ob_err *err)
{
    ob_optim_config *c = &s->optim;
    s->freeze_max_fraction =
        c->stabilizer == OB_STABILIZER_ADAM_BOUND ? OB_FREEZE_MAX_FRACTION : 0.0;
    ob_status st =
        ob__spec_get_number(o, "optimizer", "freeze_max_fraction", &s->freeze_max_fraction, err);
    if (st) return st;
    if (!(s->freeze_max_fraction >= 0.0 && s->freeze_max_fraction <= 1.0))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "optimizer.freeze_max_fraction = %g: must be in [0, 1] (0: no limit)",
                      s->freeze_max_fraction);
    c->freeze_max_step = 0;
    if (s->freeze_max_fraction == 0.0 || c->freeze_step != 0 || c->mode == OB_ONEBIT_NAIVE)
        return OB_OK;
    long floor =
        c->lr_warmup_steps > c->freeze_min_steps ? c->lr_warmup_steps : c->freeze_min_steps;
    long lag = ob_optim_freeze_lag(c->beta2);
    long at = (long)ceil(s->freeze_max_fraction * (double)s->steps);
    long earliest = floor <= LONG_MAX - 2 * lag ? floor + 2 * lag : LONG_MAX;
    c->freeze_max_step = at > earliest ? at : earliest;
    return OB_OK;
}

/* 1-bit Adam's own fields. */
static void read_onebit_fields(const json_t *o, ob_optim_config *c, spec_errs *E)
{
    int mode = (int)c->mode, scale = (int)c->scale, stab = (int)c->stabilizer;
    ob__spec_note(E, ob__spec_get_enum(o, "optimizer", "compression", ob__spec_compressions,
                                       COUNT(ob__spec_compressions), &mode, ONE));
    ob__spec_note(E, read_freeze_step(o, &c->freeze_step, ONE));
    ob__spec_note(
        E, ob__spec_get_number(o, "optimizer", "freeze_threshold", &c->freeze_threshold, ONE));
    ob__spec_note(E, ob__spec_get_long(o, "optimizer", "freeze_min_steps", 0, LONG_MAX,
                                       &c->freeze_min_steps, ONE));
    ob__spec_note(
        E, ob__spec_get_size(o, "optimizer", "block_size", 1, MAX_BLOCK, &c->block_size, ONE));
    ob__spec_note(E, ob__spec_get_enum(o, "optimizer", "scale", ob__spec_scales,
                                       COUNT(ob__spec_scales), &scale, ONE));
    ob__spec_note(E, ob__spec_get_bool(o, "optimizer", "precondition", &c->precondition, ONE));
    ob__spec_note(E, ob__spec_get_enum(o, "optimizer", "stabilizer", ob__spec_stabilizers,
                                       COUNT(ob__spec_stabilizers), &stab, ONE));
    ob__spec_note(E,
                  ob__spec_get_number(o, "optimizer", "stability_bound", &c->stability_bound, ONE));
    ob__spec_note(
        E, ob__spec_get_number(o, "optimizer", "frozen_step_ratio", &c->frozen_step_ratio, ONE));
    ob__spec_note(E, ob__spec_get_long(o, "optimizer", "refresh_steps", 0,
                                       OB_OPTIM_MAX_REFRESH_STEPS, &c->refresh_steps, ONE));
    ob__spec_note(E, ob__spec_get_long(o, "optimizer", "track_variance", 0,
                                       OB_OPTIM_MAX_TRACK_INTERVAL, &c->track_variance, ONE));
    ob__spec_note(E, ob__spec_get_number(o, "optimizer", "track_factor", &c->track_factor, ONE));
    c->stabilizer = (ob_stabilizer)stab;
    c->mode = (ob_onebit_mode)mode;
    c->scale = (ob_scale_kind)scale;
    if (c->mode == OB_ONEBIT_NAIVE && c->freeze_step > 0)
        ob__spec_note(E, OB_ERR(ONE, OB_ERR_INVALID_ARG,
                                "optimizer.freeze_step: compression naive never freezes v; leave "
                                "freeze_step \"auto\""));
}

/* optimizer.ranks_per_node: "auto" (OB_OPTIM_RANKS_PER_NODE_AUTO) or an integer in [0,
 * OB_OPTIM_MAX_RANKS_PER_NODE]. */
static ob_status read_ranks_per_node(const json_t *o, int *out, ob_err *err)
{
    const json_t *v = json_object_get(o, "ranks_per_node");
    if (!v) return OB_OK;
    const char *s = ob__spec_plain_string(v);
    if (s && strcmp(s, "auto") == 0) {
        *out = OB_OPTIM_RANKS_PER_NODE_AUTO;
        return OB_OK;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) <= OB_OPTIM_MAX_RANKS_PER_NODE) {
        *out = (int)json_integer_value(v);
        return OB_OK;
    }
    return ob__spec_bad_value(err, "optimizer", "ranks_per_node",
                              "\"auto\" or an integer in [0, 4096] (0: flat)", v);
}

/* optimizer is the section, warm_start whether the job has one (for the default of
 * track_variance). */
static ob_status read_optim(const json_t *o, ob_jobspec *s, int warm_start, spec_errs *E)
{
    int kind = 0;
    if (ob__spec_note(E, ob__spec_get_kind(o, "optimizer", "type", ob__spec_optim_kinds,
                                           COUNT(ob__spec_optim_kinds), &kind, ONE)))
        return OB_ERR_INVALID_ARG;
    ob_optim_config *c = &s->optim;
    ob_optim_config_default(c, (ob_optim_kind)kind);
    c->lr_warmup_steps = s->lr.warmup_steps;
    int before = E->n;
    ob__spec_check_fields(o, "optimizer", optim_fields, COUNT(optim_fields), ob__spec_optim_kinds,
                          COUNT(ob__spec_optim_kinds), kind, E);
    ob__spec_note(E, ob__spec_get_number(o, "optimizer", "beta1", &c->beta1, ONE));
    ob__spec_note(E, ob__spec_get_number(o, "optimizer", "beta2", &c->beta2, ONE));
    ob__spec_note(E, ob__spec_get_number(o, "optimizer", "eps", &c->eps, ONE));
    ob__spec_note(E, ob__spec_get_number(o, "optimizer", "weight_decay", &c->weight_decay, ONE));
    ob__spec_note(E,
                  ob__spec_get_bool(o, "optimizer", "bias_correction", &c->bias_correction, ONE));
    read_buckets(o, c, E);
    if (kind == OB_OPTIM_BINSGDM || kind == OB_OPTIM_ONEBIT_ADAM)
        ob__spec_note(E, read_ranks_per_node(o, &c->ranks_per_node, ONE));
    if (kind == OB_OPTIM_BINSGDM) {
        ob__spec_note(
            E, ob__spec_get_size(o, "optimizer", "block_size", 1, MAX_BLOCK, &c->block_size, ONE));
        ob__spec_note(E, ob__spec_get_long(o, "optimizer", "max_denominator_step", 0, LONG_MAX,
                                           &c->max_denominator_step, ONE));
    }
    if (kind == OB_OPTIM_ONEBIT_ADAM) read_onebit_fields(o, c, E);
    if (since(E, before)) return OB_ERR_INVALID_ARG;
    if (kind == OB_OPTIM_ONEBIT_ADAM && !json_object_get(o, "track_variance")) {
        if (s->model.kind != OB_MODEL_TRANSFORMER && !json_object_get(o, "freeze_step") &&
            !json_object_get(o, "track_factor"))
            ob_optim_default_mlp_tracking(c, warm_start);
        else
            c->track_variance = ob_optim_default_track_variance(c, warm_start);
    }
    ob_status st = ob_optim_config_validate(c, ONE);
    if (st) {
        /* Its messages start with the field's name ("beta1 = 1.5: must be in [0, 1)"); put
         * the section in front so that the message names the spec path. */
        char inner[OB_ERR_MSG_LEN];
        memcpy(inner, E->one.msg, sizeof inner);
        snprintf(E->one.msg, sizeof E->one.msg, "optimizer.%.*s", (int)sizeof inner - 16, inner);
        return ob__spec_note(E, st);
    }
    /* The latest freeze depends on beta2's lag: only once beta2 is known to be in [0, 1). */
    if (c->kind == OB_OPTIM_ONEBIT_ADAM) return ob__spec_note(E, read_freeze_max(o, s, ONE));
    return OB_OK;
}

/* checkpoint.loss_rise: 0 (off) or a factor in [1.5, 1000]. */
static ob_status read_loss_rise(const json_t *ck, double *out, ob_err *err)
{
    const json_t *v = json_object_get(ck, "loss_rise");
    if (!v) return OB_OK;
    double x;
    ob_status st = ob__spec_get_number(ck, "checkpoint", "loss_rise", &x, err);
    if (st != OB_OK) return st;
    if (x != 0.0 && !(x >= 1.5 && x <= 1000.0))
        return ob__spec_bad_value(err, "checkpoint", "loss_rise", "0 or a number in [1.5, 1000]",
                                  v);
    *out = x;
    return OB_OK;
}

static void read_eval_ckpt(const json_t *ev, const json_t *ck, ob_jobspec *s, spec_errs *E)
{
    long long keep = s->checkpoint_keep, rollbacks = s->checkpoint_rollbacks;
    if (ev) {
        ob__spec_check_fields(ev, "eval", eval_fields, COUNT(eval_fields), NULL, 0, 0, E);
        ob__spec_note(
            E, ob__spec_get_long(ev, "eval", "interval", 0, LONG_MAX, &s->eval_interval, ONE));
        ob__spec_note(E, ob__spec_get_size(ev, "eval", "max_examples", 0, NO_LIMIT,
                                           &s->eval_max_examples, ONE));
    }
    if (ck) {
        ob__spec_check_fields(ck, "checkpoint", checkpoint_fields, COUNT(checkpoint_fields), NULL,
                              0, 0, E);
        ob__spec_note(E, ob__spec_get_path(ck, "checkpoint", "dir", 1, s->checkpoint_dir,
                                           sizeof s->checkpoint_dir, ONE));
        ob__spec_note(E, ob__spec_get_long(ck, "checkpoint", "interval", 0, LONG_MAX,
                                           &s->checkpoint_interval, ONE));
        ob__spec_note(E, ob__spec_get_int(ck, "checkpoint", "keep", 1, INT_MAX, &keep, ONE));
        ob__spec_note(E, ob__spec_get_bool(ck, "checkpoint", "async", &s->checkpoint_async, ONE));
        ob__spec_note(E, ob__spec_get_int(ck, "checkpoint", "rollbacks", 0, 100, &rollbacks, ONE));
        ob__spec_note(E, read_loss_rise(ck, &s->checkpoint_loss_rise, ONE));
    }
    s->checkpoint_keep = (int)keep;
    s->checkpoint_rollbacks = (int)rollbacks;
}

/* device: where the model and the optimizer run. The GPU path has the softmax and MLP models.
 * The checks against the optimizer and the model run when those were valid (*_ok). */
static void read_device(const json_t *root, ob_jobspec *s, int model_ok, int optim_ok, spec_errs *E)
{
    int dev = (int)s->device;
    if (ob__spec_note(E, ob__spec_get_enum(root, "", "device", ob__spec_devices,
                                           COUNT(ob__spec_devices), &dev, ONE)))
        return;
    s->device = (ob_device)dev;
    if (optim_ok && s->device == OB_DEVICE_CUDA && s->optim.overlap)
        ob__spec_note(E, OB_ERR(ONE, OB_ERR_INVALID_ARG,
                                "optimizer.overlap: not with device: cuda (the NCCL path "
                                "exchanges the gradient after the backward pass); leave it "
                                "false"));
    if (model_ok && s->device == OB_DEVICE_CUDA && s->model.kind == OB_MODEL_TRANSFORMER)
        ob__spec_note(E, OB_ERR(ONE, OB_ERR_INVALID_ARG,
                                "device: cuda runs the softmax and mlp models; the transformer "
                                "runs on the cpu (device: cpu)"));
}

/* warm_start.refit_steps: "auto" (-1) or an integer in [0, OB_JOBSPEC_MAX_REFIT]. */
static ob_status read_refit_steps(const json_t *ws, long *out, ob_err *err)
{
    const json_t *v = json_object_get(ws, "refit_steps");
    if (!v) return OB_OK;
    const char *s = ob__spec_plain_string(v);
    if (s && strcmp(s, "auto") == 0) {
        *out = -1;
        return OB_OK;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) <= OB_JOBSPEC_MAX_REFIT) {
        *out = (long)json_integer_value(v);
        return OB_OK;
    }
    return ob__spec_bad_value(err, "warm_start", "refit_steps",
                              "\"auto\" or an integer in [0, 1000000]", v);
}

/* warm_start: the variance v_Tw (and optionally the parameters) of an earlier checkpoint; the
 * optimizer must be onebit_adam with a variance to freeze (checked when it was valid). */
static void read_warm_start(const json_t *ws, ob_jobspec *s, int optim_ok, spec_errs *E)
{
    if (!ws) return;
    ob__spec_check_fields(ws, "warm_start", warm_start_fields, COUNT(warm_start_fields), NULL, 0, 0,
                          E);
    if (!json_object_get(ws, "from"))
        ob__spec_note(E, ob__spec_missing(ONE, "warm_start", "from", ""));
    ob__spec_note(E, ob__spec_get_path(ws, "warm_start", "from", 0, s->warm_start_from,
                                       sizeof s->warm_start_from, ONE));
    ob__spec_note(E, ob__spec_get_bool(ws, "warm_start", "params", &s->warm_start_params, ONE));
    ob__spec_note(E, read_refit_steps(ws, &s->warm_start_refit_steps, ONE));
    int ex = (int)s->optim.refit_exchange;
    ob__spec_note(E, ob__spec_get_enum(ws, "warm_start", "refit_exchange", ob__spec_exchanges,
                                       COUNT(ob__spec_exchanges), &ex, ONE));
    s->optim.refit_exchange = (ob_gradient_exchange)ex;
    if (optim_ok && (s->optim.kind != OB_OPTIM_ONEBIT_ADAM || s->optim.mode == OB_ONEBIT_NAIVE))
        ob__spec_note(E, OB_ERR(ONE, OB_ERR_INVALID_ARG,
                                "warm_start: needs optimizer.type onebit_adam with compression "
                                "on or off (it borrows a frozen variance)"));
}

/* The top-level scalars a built-in job has. */
static ob_status read_top(const json_t *root, ob_jobspec *s, spec_errs *E)
{
    int before = E->n;
    if (!json_object_get(root, "batch_size"))
        ob__spec_note(E, ob__spec_missing(ONE, "", "batch_size", ""));
    if (!json_object_get(root, "steps")) ob__spec_note(E, ob__spec_missing(ONE, "", "steps", ""));
    long long seed = (long long)s->seed;
    read_name(root, s, E);
    ob__spec_note(E, ob__spec_get_size(root, "", "batch_size", 1, MAX_BATCH, &s->batch_size, ONE));
    ob__spec_note(E, ob__spec_get_long(root, "", "steps", 1, LONG_MAX, &s->steps, ONE));
    ob__spec_note(E, ob__spec_get_int(root, "", "seed", 0, LLONG_MAX, &seed, ONE));
    ob__spec_note(E,
                  ob__spec_get_long(root, "", "log_interval", 1, LONG_MAX, &s->log_interval, ONE));
    s->seed = (uint64_t)seed;
    return since(E, before);
}

/* Fills s (scratch) from the tree, noting every problem in E. */
static void validate(const json_t *root, ob_jobspec *s, spec_errs *E)
{
    ob__spec_check_fields(root, "", top_fields, COUNT(top_fields), NULL, 0, 0, E);
    if (json_object_get(root, "program")) {
        read_name(root, s, E);
        ob__spec_read_program(root, s, E);
        return;
    }
    const json_t *model, *data, *optim, *lr, *ev, *ck, *ws;
    ob__spec_note(E, ob__spec_get_section(root, "model", 1, &model, ONE));
    ob__spec_note(E, ob__spec_get_section(root, "data", 1, &data, ONE));
    ob__spec_note(E, ob__spec_get_section(root, "optimizer", 1, &optim, ONE));
    ob__spec_note(E, ob__spec_get_section(root, "lr", 0, &lr, ONE));
    ob__spec_note(E, ob__spec_get_section(root, "eval", 0, &ev, ONE));
    ob__spec_note(E, ob__spec_get_section(root, "checkpoint", 0, &ck, ONE));
    ob__spec_note(E, ob__spec_get_section(root, "warm_start", 0, &ws, ONE));
    int top_ok = read_top(root, s, E) == OB_OK;
    /* A section that is missing or is not a mapping was noted above; its readers are skipped,
     * and so are the checks across sections that depend on it. */
    int model_ok = model && read_model(model, s, E) == OB_OK;
    if (data) read_data(data, s, model_ok, E);
    read_lr(lr, s, top_ok, E);
    int optim_ok = optim && read_optim(optim, s, ws != NULL, E) == OB_OK;
    read_eval_ckpt(ev, ck, s, E);
    read_warm_start(ws, s, optim_ok, E);
    read_device(root, s, model_ok, optim_ok, E);
    /* A transformer (on the CPU) whose optimizer names neither overlap nor bucket_mb. */
    if (model_ok && optim_ok && s->model.kind == OB_MODEL_TRANSFORMER &&
        s->device == OB_DEVICE_CPU && !json_object_get(optim, "overlap") &&
        !json_object_get(optim, "bucket_mb"))
        ob_optim_default_transformer_overlap(&s->optim, ob__tf_num_params(&s->model));
}

ob_status ob__spec_validate(const json_t *root, ob_jobspec *s, ob_err *err)
{
    ob_jobspec_default(s);
    if (!json_is_object(root)) {
        char got[72];
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "job spec: expected an object (mapping) at the top level, got %s",
                      json_is_null(root) ? "nothing (null)" : ob__spec_repr(got, sizeof got, root));
    }
    spec_errs *E = malloc(sizeof *E);
    if (!E) return OB_ERR(err, OB_ERR_NOMEM, "job spec");
    ob__spec_errs_init(E, err);
    validate(root, s, E);
    ob_status st = ob__spec_errs_end(E);
    free(E);
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
                                       : ob__spec_yaml_to_tree(text, len, &root, err);
    if (st) return st;
    ob_jobspec *tmp = malloc(sizeof *tmp);
    if (!tmp) {
        json_decref(root);
        return OB_ERR(err, OB_ERR_NOMEM, "job spec");
    }
    st = ob__spec_validate(root, tmp, err);
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
