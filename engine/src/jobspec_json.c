/* The canonical JSON of a job spec (ob_jobspec_to_json): the tree built back from the struct,
 * checked by the same validator, written with the fewest digits that keep every number exact. */
#include "jobspec_internal.h"

#include <jansson.h>

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    put_str(b, o, "type", name_of(ob__spec_model_kinds, COUNT(ob__spec_model_kinds), (int)m->kind));
    if (m->kind == OB_MODEL_MLP) {
        json_t *h = json_array();
        for (size_t i = 0; h && i < m->num_hidden && i < OB_MODEL_MAX_HIDDEN; i++)
            if (json_array_append_new(h, json_integer((long long)m->hidden[i])) != 0) b->failed = 1;
        put(b, o, "hidden", h);
        put_str(b, o, "activation",
                name_of(ob__spec_activations, COUNT(ob__spec_activations), (int)m->activation));
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
    put_str(b, o, "type", name_of(ob__spec_data_kinds, COUNT(ob__spec_data_kinds), (int)d->kind));
    switch (d->kind) {
    case OB_DATA_FASHION_MNIST:
    case OB_DATA_IDX:
        put_str(b, o, "path", d->path);
        put_str(b, o, "normalize", name_of(ob__spec_norms, COUNT(ob__spec_norms), (int)d->norm));
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

static json_t *optim_tree(builder *b, const ob_optim_config *c, double freeze_max_fraction)
{
    json_t *o = json_object();
    /* Only the fields of the kind (the validator refuses the others). */
    int adams = c->kind == OB_OPTIM_ADAM || c->kind == OB_OPTIM_ONEBIT_ADAM;
    put_str(b, o, "type", name_of(ob__spec_optim_kinds, COUNT(ob__spec_optim_kinds), (int)c->kind));
    put_real(b, o, "beta1", c->beta1);
    if (adams) put_real(b, o, "beta2", c->beta2);
    put_real(b, o, "eps", c->eps);
    put_real(b, o, "weight_decay", c->weight_decay);
    if (adams) put(b, o, "bias_correction", json_boolean(c->bias_correction));
    /* Bytes / 2^20 is exact in a double, so the MiB read back give the same bytes. */
    put_real(b, o, "bucket_mb", (double)c->bucket_bytes / (double)(1 << 20));
    put(b, o, "overlap", json_boolean(c->overlap));
    if (c->kind != OB_OPTIM_BINSGDM)
        put_str(b, o, "gradient_exchange",
                name_of(ob__spec_exchanges, COUNT(ob__spec_exchanges), (int)c->gradient_exchange));
    if (c->kind == OB_OPTIM_BINSGDM) {
        put_size(b, o, "block_size", c->block_size);
        put_int(b, o, "max_denominator_step", c->max_denominator_step);
    }
    if ((c->kind == OB_OPTIM_BINSGDM || c->kind == OB_OPTIM_ONEBIT_ADAM) &&
        c->ranks_per_node == OB_OPTIM_RANKS_PER_NODE_AUTO)
        put_str(b, o, "ranks_per_node", "auto");
    else if (c->kind == OB_OPTIM_BINSGDM || c->kind == OB_OPTIM_ONEBIT_ADAM)
        put_int(b, o, "ranks_per_node", c->ranks_per_node);
    if (c->kind != OB_OPTIM_ONEBIT_ADAM) return o;
    put_str(b, o, "compression",
            name_of(ob__spec_compressions, COUNT(ob__spec_compressions), (int)c->mode));
    if (c->freeze_step == 0)
        put_str(b, o, "freeze_step", "auto");
    else
        put_int(b, o, "freeze_step", c->freeze_step);
    put_real(b, o, "freeze_threshold", c->freeze_threshold);
    put_int(b, o, "freeze_min_steps", c->freeze_min_steps);
    put_real(b, o, "freeze_max_fraction", freeze_max_fraction);
    put_size(b, o, "block_size", c->block_size);
    put_str(b, o, "scale", name_of(ob__spec_scales, COUNT(ob__spec_scales), (int)c->scale));
    put(b, o, "precondition", json_boolean(c->precondition));
    put_str(b, o, "stabilizer",
            name_of(ob__spec_stabilizers, COUNT(ob__spec_stabilizers), (int)c->stabilizer));
    put_real(b, o, "stability_bound", c->stability_bound);
    put_real(b, o, "frozen_step_ratio", c->frozen_step_ratio);
    put_int(b, o, "refresh_steps", c->refresh_steps);
    put_int(b, o, "track_variance", c->track_variance);
    put_real(b, o, "track_factor", c->track_factor);
    return o;
}

static json_t *lr_tree(builder *b, const ob_lr_schedule *l)
{
    json_t *o = json_object();
    put_str(b, o, "schedule", name_of(ob__spec_lr_kinds, COUNT(ob__spec_lr_kinds), (int)l->kind));
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
    put(b, root, "optimizer", optim_tree(b, &s->optim, s->freeze_max_fraction));
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
    put_int(b, ck, "rollbacks", s->checkpoint_rollbacks);
    put_real(b, ck, "loss_rise", s->checkpoint_loss_rise);
    put(b, root, "checkpoint", ck);
    if (s->warm_start_from[0]) {
        char from[OB_JOBSPEC_PATH_LEN];
        snprintf(from, sizeof from, "%.*s", (int)sizeof from - 1, s->warm_start_from);
        json_t *ws = json_object();
        put_str(b, ws, "from", from);
        put(b, ws, "params", json_boolean(s->warm_start_params));
        if (s->warm_start_refit_steps < 0)
            put_str(b, ws, "refit_steps", "auto");
        else
            put_int(b, ws, "refit_steps", s->warm_start_refit_steps);
        put_str(
            b, ws, "refit_exchange",
            name_of(ob__spec_exchanges, COUNT(ob__spec_exchanges), (int)s->optim.refit_exchange));
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
    json_t *root = ob_jobspec_is_program(s) ? ob__spec_program_tree(s) : spec_tree(&b, s);
    if (!root) b.failed = 1;
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
    if ((st = ob__spec_validate(root, check, err))) {
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
