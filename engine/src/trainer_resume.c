/* Reading checkpoints back into a training run (trainer_ckpt.c writes them): resume from the
 * newest that verifies and fits the job (with re-sharding at another world size), the rollback
 * after a divergence, and a warm start from another job's frozen variance. */
#include "jobspec_internal.h"
#include "trainer_internal.h"
#include "onebit/compress_cuda.h"
#include "onebit/optim_ckpt.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --- resume -------------------------------------------------------------------------------- */

/* Fields a resumed job may change: they do not alter what the saved state means. */
static const char *const resumable_changes[] = {"name",       "steps",      "eval",  "log_interval",
                                                "checkpoint", "warm_start", "device"};

/* optimizer.overlap changes nothing but timing (the same bits either way): a run may be resumed
 * with it switched. A spec saved before bucket_mb existed (the whole vector in one exchange) is
 * taken with the current bucket_mb: with one bucket, which the default of 4 MiB is for models
 * up to that size, the steps are the same bits; beyond, only the rounding of the sums over more
 * than two ranks differs. A spec saved before gradient_exchange existed exchanged in fp32 (an
 * optimizer without one, binsgdm, has none either way). One
 * saved before frozen_step_ratio or freeze_max_fraction existed is taken with the current
 * ones: after the freeze the checkpoint holds v_Tw as it was raised then; before it, the freeze
 * to come follows the rules in force now. */
static void optimizer_fields_for_resume(json_t *saved, json_t *current)
{
    json_t *so = json_object_get(saved, "optimizer"), *co = json_object_get(current, "optimizer");
    /* The exchange's shape, not what the state means: a run may change both (the error
     * buffers are carried across a change of ranks_per_node, ob__trainer_host_state). */
    static const char *const shape[] = {"overlap", "ranks_per_node"};
    for (size_t i = 0; i < sizeof shape / sizeof *shape; i++) {
        if (json_is_object(so)) json_object_del(so, shape[i]);
        if (json_is_object(co)) json_object_del(co, shape[i]);
    }
    if (json_is_object(so) && !json_object_get(so, "bucket_mb") && json_is_object(co) &&
        json_object_get(co, "bucket_mb"))
        json_object_set(so, "bucket_mb", json_object_get(co, "bucket_mb"));
    if (json_is_object(so) && !json_object_get(so, "gradient_exchange") && json_is_object(co) &&
        json_object_get(co, "gradient_exchange"))
        json_object_set_new(so, "gradient_exchange", json_string("fp32"));
    static const char *const newer[] = {"frozen_step_ratio", "freeze_max_fraction"};
    for (size_t i = 0; i < sizeof newer / sizeof *newer; i++)
        if (json_is_object(so) && !json_object_get(so, newer[i]) && json_is_object(co) &&
            json_object_get(co, newer[i]))
            json_object_set(so, newer[i], json_object_get(co, newer[i]));
}

static ob_status check_spec(const char *saved, const char *current, const char *path, ob_err *err)
{
    json_t *a = json_loads(saved, 0, NULL), *b = json_loads(current, 0, NULL);
    ob_status st = OB_OK;
    if (!json_is_object(a) || !json_is_object(b)) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: the saved job spec is not valid JSON", path);
        goto done;
    }
    for (size_t i = 0; i < sizeof resumable_changes / sizeof *resumable_changes; i++) {
        json_object_del(a, resumable_changes[i]);
        json_object_del(b, resumable_changes[i]);
    }
    optimizer_fields_for_resume(a, b);
    const char *key;
    json_t *va;
    json_object_foreach(a, key, va)
    {
        json_t *vb = json_object_get(b, key);
        if (!vb || !json_equal(va, vb)) {
            char *sa = json_dumps(va, JSON_COMPACT | JSON_PRESERVE_ORDER);
            st = OB_ERR(err, OB_ERR_INVALID_ARG,
                        "%s was written by a different job: '%s' differs (saved: %.200s)", path,
                        key, sa ? sa : "?");
            free(sa);
            goto done;
        }
    }
    if (json_object_size(a) != json_object_size(b))
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "%s was written by a different job spec", path);
done:
    json_decref(a);
    json_decref(b);
    return st;
}

typedef ob_status (*spec_check)(const char *saved, const char *current, const char *path,
                                ob_err *err);

/* Reads the metadata of the checkpoint at path and checks that it fits this trainer: its spec
 * (check: the whole spec for a resume, the model for a warm start) and its size. */
static ob_status read_fitting_meta(ob_trainer *t, const char *path, spec_check check,
                                   ob_ckpt_meta *meta, ob_err *err)
{
    char *saved = NULL;
    ob_status st = ob_ckpt_read_meta(path, meta, &saved, err);
    if (st == OB_OK) st = check(saved, t->spec_json, path, err);
    free(saved);
    if (st == OB_OK && meta->num_params != t->d)
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "%s holds %llu parameters; the model has %zu", path,
                    (unsigned long long)meta->num_params, t->d);
    return st;
}

/* Restores this rank's state from the checkpoint at path. */
static ob_status restore(ob_trainer *t, const char *path, ob_ckpt_meta *meta, ob_err *err)
{
    ob_status st = read_fitting_meta(t, path, check_spec, meta, err);
    if (st != OB_OK) return st;
    ob__host_state hs;
    if ((st = ob__trainer_host_state(t, 0, &hs, err)) != OB_OK) return st;
    st = ob_optim_ckpt_read(t->opt, path, meta, ob_comm_rank(t->comm), ob_comm_size(t->comm),
                            hs.params, hs.m, hs.v, hs.we, hs.se, hs.ts, err);
    if (st == OB_OK) st = ob__trainer_upload_state(t, &hs, err);
    if (st == OB_OK) st = ob_optim_ckpt_restore_progress(t->opt, meta, path, err);
    if (st != OB_OK) return st;
    ob_loader_position pos;
    memset(&pos, 0, sizeof pos);
    pos.epoch = meta->loader_epoch;
    pos.index = meta->loader_index;
    memcpy(pos.rng.s, meta->loader_rng, sizeof pos.rng.s);
    if ((st = ob_loader_set_position(t->train, &pos, err)) != OB_OK)
        return OB_WRAP(err, st, "%s: data position", path);
    t->bytes_warmup = meta->bytes_warmup;
    t->bytes_compression = meta->bytes_compression;
    t->wall_before = meta->wall_seconds;
    t->last_loss = meta->train_loss;
    t->last_lr = meta->lr;
    t->last_ckpt_step = meta->step;
    if (meta->rollbacks > t->rollbacks) t->rollbacks = meta->rollbacks;
    t->loss_ema = meta->loss_ema;
    t->loss_at_freeze = meta->loss_at_freeze;
    t->loss_best = meta->loss_best;
    return OB_OK;
}

typedef struct skip_ctx {
    ob_trainer *t;
    ob_train_callback cb;
    void *user;
} skip_ctx;

static void on_skip(const char *path, const char *reason, void *user)
{
    skip_ctx *c = user;
    char msg[OB_CKPT_PATH_LEN + OB_ERR_MSG_LEN + 32];
    snprintf(msg, sizeof msg, "skipping checkpoint %s: %s", path, reason);
    ob__trainer_notice(c->t, msg, c->cb, c->user);
}

/* What rank 0 tells the others about the checkpoint it chose. */
typedef struct choice {
    int32_t found;  /* 1: path names a checkpoint */
    int32_t failed; /* 1: rank 0 could not look (err on rank 0 says why) */
    char path[OB_CKPT_PATH_LEN];
} choice;

/* Rank 0 picks the checkpoint (the newest that verifies among the steps below `below`, on rank 0
 * only) and broadcasts the choice. */
static ob_status choose(ob_trainer *t, const char *dir, int direct_ok, long below, choice *c,
                        ob_train_callback cb, void *user, ob_err *err)
{
    memset(c, 0, sizeof *c);
    ob_err lerr = {0};
    if (ob_comm_rank(t->comm) == 0) {
        char state[OB_CKPT_PATH_LEN + 16];
        struct stat sb;
        snprintf(state, sizeof state, "%s/state.h5", dir);
        if (direct_ok && stat(state, &sb) == 0) { /* a checkpoint directory itself */
            snprintf(c->path, sizeof c->path, "%s", dir);
            c->found = 1;
        } else {
            skip_ctx sc = {t, cb, user};
            ob_status st =
                ob_ckpt_find_latest_below(dir, below, c->path, NULL, on_skip, &sc, &lerr);
            if (st == OB_OK)
                c->found = 1;
            else if (st != OB_ERR_NOT_FOUND)
                c->failed = 1;
        }
    }
    ob_status st = ob_comm_bcast(t->comm, c, sizeof *c, 0, err);
    if (st != OB_OK) return OB_WRAP(err, st, "checkpoint choice");
    if (c->failed) {
        if (ob_comm_rank(t->comm) == 0) {
            if (err) *err = lerr;
            return lerr.code;
        }
        return OB_ERR(err, OB_ERR_IO, "rank 0 could not read the checkpoints in %s", dir);
    }
    return OB_OK;
}

/* Agrees on the outcome of a restore step like ob_trainer_create does. */
static ob_status agree_outcome(ob_trainer *t, ob_status st, const char *what, ob_err *err)
{
    int nfail = 0;
    ob_status ast = ob__trainer_agree(t, st != OB_OK, &nfail, st == OB_OK ? err : NULL);
    if (st == OB_OK && ast != OB_OK) return ast;
    if (st == OB_OK && nfail > 0)
        return OB_ERR(err, OB_ERR_STATE, "%s failed on %d other rank(s)", what, nfail);
    return st;
}

/* The step in a checkpoint directory's name (".../step-00001200"); 0 when it has none. */
static long step_of(const char *path)
{
    const char *s = strrchr(path, '/');
    s = s ? s + 1 : path;
    return strncmp(s, "step-", 5) == 0 ? strtol(s + 5, NULL, 10) : 0;
}

/* One checkpoint refused by restore: the notice a person reads, and its step, below which the
 * next candidate is looked for. */
static void refused(ob_trainer *t, const char *path, const ob_err *why, ob_train_callback cb,
                    void *user)
{
    char msg[OB_CKPT_PATH_LEN + OB_ERR_MSG_LEN + 64];
    snprintf(msg, sizeof msg,
             "skipping checkpoint %s: it verifies, but resuming from it failed: %s", path,
             why->msg);
    ob__trainer_notice(t, msg, cb, user);
}

ob_status ob_trainer_resume(ob_trainer *t, const char *job_dir, ob_train_callback cb, void *user,
                            int *resumed, ob_err *err)
{
    *resumed = 0;
    choice c;
    ob_ckpt_meta meta;
    ob_err first = {0};
    long below = LONG_MAX;
    /* Newest first; a checkpoint that verifies but that restore refuses (a field out of range
     * for this job's data, a spec that differs) is passed over like a damaged one, and the one
     * before it tried. Every restore writes all of the state it restores, so a refused attempt
     * leaves nothing behind once another succeeds. */
    for (;;) {
        ob_status st = choose(t, job_dir, 0, below, &c, cb, user, err);
        if (st != OB_OK) return st;
        if (!c.found) break;
        ob_err why = {0};
        st = agree_outcome(t, restore(t, c.path, &meta, &why), "resume", &why);
        if (st == OB_OK) {
            *resumed = 1;
            ob_train_event ev = {0};
            ev.kind = OB_EVENT_RESUME;
            ev.step = meta.step;
            ev.path = c.path;
            ev.from_world_size = meta.world_size;
            ob__trainer_emit(t, &ev, cb, user);
            return OB_OK;
        }
        if (st == OB_ERR_NOMEM || st == OB_ERR_CUDA || st == OB_ERR_COMM) {
            if (err) *err = why;
            return st; /* the process, not the checkpoint */
        }
        if (first.code == OB_OK) first = why;
        refused(t, c.path, &why, cb, user);
        below = step_of(c.path);
    }
    if (first.code != OB_OK) { /* every checkpoint there was refused: say why the newest was */
        if (err) *err = first;
        return first.code;
    }
    char msg[OB_CKPT_PATH_LEN + 64];
    snprintf(msg, sizeof msg, "no checkpoint in %s: starting from step 0", job_dir);
    ob__trainer_notice(t, msg, cb, user);
    return OB_OK;
}

/* --- rollback after a divergence -------------------------------------------------------------- */

int ob__trainer_can_roll_back(const ob_trainer *t)
{
    return t->job_dir[0] && t->rollbacks < t->spec.checkpoint_rollbacks;
}

ob_status ob__trainer_roll_back(ob_trainer *t, long bad_step, const char *why, long *step,
                                ob_train_callback cb, void *user, ob_err *err)
{
    ob_status st = ob__trainer_ckpt_flush(t, cb, user, err);
    if (st != OB_OK) return st;
    choice c;
    if ((st = choose(t, t->job_dir, 0, LONG_MAX, &c, cb, user, err)) != OB_OK) return st;
    if (!c.found)
        return OB_ERR(err, OB_ERR_NUMERIC,
                      "step %ld: %s and there is no checkpoint to roll back to", bad_step, why);
    /* The traffic already sent stays counted: the statistics say what crossed the network. */
    ob_optim_progress before;
    ob_optim_get_progress(t->opt, &before);
    uint64_t bw = t->bytes_warmup, bc = t->bytes_compression;
    ob_ckpt_meta meta;
    st = agree_outcome(t, restore(t, c.path, &meta, err), "rollback", err);
    if (st != OB_OK) return st;
    t->bytes_warmup = bw;
    t->bytes_compression = bc;
    t->rollbacks++;
    int freezes = 0;
    if ((st = ob_optim_ckpt_rolled_back(t->opt, &t->spec.optim, before.bytes_sent, bad_step,
                                        &freezes, err)) != OB_OK)
        return OB_WRAP(err, st, "rollback to %s", c.path);
    ob_optim_stats os;
    ob_optim_get_stats(t->opt, &os);
    /* Back in the warmup: the guard watches again from the next freeze. */
    if (os.phase == OB_PHASE_WARMUP) t->loss_at_freeze = t->loss_best = NAN;
    char msg[OB_CKPT_PATH_LEN + 400];
    if (os.warm_start == OB_WARM_REWARM)
        snprintf(msg, sizeof msg,
                 "%s at step %ld: rolled back to %s (rollback %d of at most %d); v is "
                 "re-estimated by Adam until step %ld, then frozen again",
                 why, bad_step, c.path, t->rollbacks, t->spec.checkpoint_rollbacks, os.refit_end);
    else if (os.warm_start == OB_WARM_DELAYED)
        snprintf(msg, sizeof msg,
                 "%s at step %ld: rolled back to %s (rollback %d of at most %d), still in the "
                 "warmup; v is frozen again at step %ld",
                 why, bad_step, c.path, t->rollbacks, t->spec.checkpoint_rollbacks, os.refit_end);
    else if (freezes)
        snprintf(msg, sizeof msg,
                 "%s at step %ld: rolled back to %s (rollback %d of at most %d), still in the "
                 "warmup",
                 why, bad_step, c.path, t->rollbacks, t->spec.checkpoint_rollbacks);
    else
        snprintf(msg, sizeof msg, "%s at step %ld: rolled back to %s (rollback %d of at most %d)",
                 why, bad_step, c.path, t->rollbacks, t->spec.checkpoint_rollbacks);
    ob_train_event ev = {0};
    ev.kind = OB_EVENT_REWARM;
    ev.step = bad_step;
    ev.to_step = meta.step;
    ev.path = c.path;
    ev.message = msg;
    ob__trainer_emit(t, &ev, cb, user);
    *step = meta.step;
    return OB_OK;
}

/* --- warm start ---------------------------------------------------------------------------- */

/* The "model" sections of two spec JSONs must be equal for the variance to mean the same. */
static ob_status check_model(const char *saved, const char *current, const char *path, ob_err *err)
{
    json_t *a = json_loads(saved, 0, NULL), *b = json_loads(current, 0, NULL);
    ob_status st = OB_OK;
    json_t *ma = json_object_get(a, "model"), *mb = json_object_get(b, "model");
    if (!ma || !mb) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "%s: the saved job spec has no model", path);
    } else if (!json_equal(ma, mb)) {
        char *sa = json_dumps(ma, JSON_COMPACT | JSON_PRESERVE_ORDER);
        st = OB_ERR(err, OB_ERR_INVALID_ARG,
                    "warm_start.from: %s was written for another model (%.200s)", path,
                    sa ? sa : "?");
        free(sa);
    }
    json_decref(a);
    json_decref(b);
    return st;
}

/* From the source's saved spec, the factor its own freeze raised its v by (*raised,
 * ob_optim_freeze_raise) and the factor between its frozen v and its v_hat (*scale,
 * ob_optim_frozen_scale): both 1 for a spec saved before frozen_step_ratio existed (the paper's
 * v); for a v frozen at the end of a refit (a warm start's or a rollback's re-estimate, not
 * raised) the refit's own factor (meta->refit_scale). */
static void saved_freeze(const json_t *spec, const ob_ckpt_meta *meta, double *raised,
                         double *scale)
{
    const json_t *o = json_object_get(spec, "optimizer");
    const json_t *r = json_object_get(o, "frozen_step_ratio");
    const json_t *b2 = json_object_get(o, "beta2");
    const char *stab = json_string_value(json_object_get(o, "stabilizer"));
    *raised = *scale = 1.0;
    if (!json_is_number(r) || !json_is_number(b2) || !stab) return;
    ob_optim_config c;
    ob_optim_config_default(&c, OB_OPTIM_ONEBIT_ADAM);
    c.frozen_step_ratio = json_number_value(r);
    c.beta2 = json_number_value(b2);
    c.bias_correction = json_is_true(json_object_get(o, "bias_correction"));
    c.stabilizer = strcmp(stab, "none") == 0 ? OB_STABILIZER_NONE : OB_STABILIZER_ADAM_BOUND;
    /* Inside a variance refresh v is scaled as frozen at the checkpoint's step. */
    const json_t *rs = json_object_get(o, "refresh_steps");
    if (json_is_integer(rs) && json_integer_value(rs) > 0 &&
        json_integer_value(rs) <= OB_OPTIM_MAX_REFRESH_STEPS)
        c.refresh_steps = (long)json_integer_value(rs);
    if (ob_optim_config_validate(&c, NULL) != OB_OK) return;
    /* 0 where no freeze raised v: taken as is, or frozen at the end of a refit. */
    long at = ob_optim_v_scaled_at(&c, (ob_warm_state)meta->warm_start, meta->refit_end,
                                   meta->freeze_step, meta->step);
    *raised = ob_optim_freeze_raise(&c, at);
    *scale = at > 0 ? ob_optim_frozen_scale(&c, at) : meta->refit_scale;
}

/* From the source's saved spec: its global batch (batch_size x world size) and peak learning
 * rate (each 0 when the spec does not say) and its freeze's factors (saved_freeze). */
static void saved_source(const char *path, const ob_ckpt_meta *meta, long long *gb, double *lr,
                         double *raised, double *scale)
{
    ob_ckpt_meta again;
    char *saved = NULL;
    *gb = 0;
    *lr = 0;
    *raised = *scale = 1.0;
    if (ob_ckpt_read_meta(path, &again, &saved, NULL) == OB_OK) {
        json_t *o = json_loads(saved, 0, NULL);
        json_t *b = json_object_get(o, "batch_size");
        if (json_is_integer(b) && json_integer_value(b) > 0 && json_integer_value(b) <= INT32_MAX)
            *gb = (long long)json_integer_value(b) * meta->world_size;
        json_t *p = json_object_get(json_object_get(o, "lr"), "peak");
        if (json_is_number(p) && isfinite(json_number_value(p)) && json_number_value(p) > 0)
            *lr = json_number_value(p);
        saved_freeze(o, meta, raised, scale);
        json_decref(o);
    }
    free(saved);
}

/* How the source ran against this job (t->warm_source, which sets refit_steps "auto") and why
 * its v_Tw fits this job less than a rerun's would (t->warm_differs, a static string for the
 * notice; NULL on the same setting): its global batch gb (the noise part of v scales with its
 * inverse; a larger one underestimates this job's noise) or its peak learning rate lr (v is
 * measured along another trajectory). An unknown one, 0, differs. */
static void warm_source_differs(ob_trainer *t, long long gb, double lr)
{
    long long job = (long long)t->spec.batch_size * ob_comm_size(t->comm);
    if (gb > job) {
        t->warm_source = OB_WARM_SOURCE_LARGER_BATCH;
        t->warm_differs = "the source's global batch is larger than this job's";
    } else if (gb != job) {
        t->warm_source = OB_WARM_SOURCE_OTHER;
        t->warm_differs = "the source's global batch differs from this job's";
    } else if (lr != t->spec.lr.peak) {
        t->warm_source = OB_WARM_SOURCE_OTHER;
        t->warm_differs = "the source's peak learning rate differs from this job's";
    } else {
        t->warm_source = OB_WARM_SOURCE_SAME;
        t->warm_differs = NULL;
    }
}

/* warm_start.refit_steps in force, "auto" resolved against the source (t->warm_source). */
static long warm_refit_steps(const ob_trainer *t)
{
    long r = t->spec.warm_start_refit_steps;
    if (r >= 0) return r;
    return ob_optim_auto_refit_steps(t->spec.optim.beta2, t->warm_source);
}

static ob_status load_warm(ob_trainer *t, const char *path, ob_ckpt_meta *meta, ob_err *err)
{
    ob_status st = read_fitting_meta(t, path, check_model, meta, err);
    if (st != OB_OK) return st;
    if (meta->freeze_step < 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "warm_start.from: %s has no frozen variance (step %ld is still in the "
                      "warmup phase)",
                      path, meta->step);
    float *params = ob_calloc_aligned(t->d * sizeof(float));
    float *m = ob_calloc_aligned(t->d * sizeof(float));
    float *v = ob_calloc_aligned(t->d * sizeof(float));
    if (!params || !m || !v) {
        st = OB_ERR(err, OB_ERR_NOMEM, "warm start buffers");
    } else {
        ob_ckpt_arrays a = {params, m, v, NULL, 0, NULL, 0};
        st = ob_ckpt_read_state(path, meta, &a, err);
        long long gb = 0;
        double lr = 0, raised = 1.0, scale = 1.0;
        saved_source(path, meta, &gb, &lr, &raised, &scale);
        warm_source_differs(t, gb, lr);
        /* A larger global batch's v_Tw underestimates this job's gradient noise, so the refit's
         * v, part borrowed, already errs towards longer steps: frozen as is. */
        if (t->warm_source == OB_WARM_SOURCE_LARGER_BATCH) scale = 1.0;
        /* An auto refit on the source's own setting ends at step 1 when v fits that well. */
        double fit = t->spec.warm_start_refit_steps < 0 && t->warm_source == OB_WARM_SOURCE_SAME
                         ? OB_WARM_FIT_FRACTION
                         : 0.0;
        if (st == OB_OK)
            st = ob_optim_warm_start(t->opt, v, raised, scale, warm_refit_steps(t), fit, err);
        if (st == OB_OK && t->spec.warm_start_params) {
            void *stream = t->dev ? ob_comm_stream(t->dcomm) : NULL;
            st = ob__mem_copy(t->dev, t->params, params, t->d * sizeof(float), stream, err);
            if (st == OB_OK && t->dev) st = ob_cuda_sync(stream, err);
        }
    }
    ob_aligned_free(params);
    ob_aligned_free(m);
    ob_aligned_free(v);
    return st;
}

static void warm_event(ob_trainer *t, const char *outcome, const char *msg, ob_train_callback cb,
                       void *user)
{
    ob_train_event ev = {0};
    ob_optim_stats os;
    ob_optim_get_stats(t->opt, &os);
    ev.kind = OB_EVENT_WARM_START;
    ev.step = os.step;
    ev.warm_start = outcome;
    ev.message = msg;
    ob__trainer_emit(t, &ev, cb, user);
}

ob_status ob_trainer_warm_start(ob_trainer *t, ob_train_callback cb, void *user, ob_err *err)
{
    const char *from = t->spec.warm_start_from;
    if (!from[0]) return OB_OK;
    choice c;
    ob_status st = choose(t, from, 1, LONG_MAX, &c, cb, user, err);
    if (st != OB_OK) return OB_WRAP(err, st, "warm_start.from");
    if (!c.found)
        return OB_ERR(err, OB_ERR_NOT_FOUND, "warm_start.from: no usable checkpoint in %s", from);
    ob_ckpt_meta meta;
    st = agree_outcome(t, load_warm(t, c.path, &meta, err), "warm start", err);
    if (st != OB_OK) return st;
    char msg[OB_CKPT_PATH_LEN + 480];
    long refit = warm_refit_steps(t);
    char because[96] = "", tail[320];
    ob_optim_progress p;
    ob_optim_get_progress(t->opt, &p);
    char frozen[128] = "then frozen";
    if (p.refit_scale < 1.0)
        snprintf(frozen, sizeof frozen,
                 "then frozen at %.3g times its estimate, as the source's freeze kept its own",
                 p.refit_scale);
    else if (t->warm_source == OB_WARM_SOURCE_LARGER_BATCH)
        snprintf(frozen, sizeof frozen,
                 "then frozen unscaled (its borrowed part already errs towards longer steps)");
    if (t->spec.warm_start_refit_steps < 0 && t->warm_differs)
        snprintf(because, sizeof because, " (%s)", t->warm_differs);
    if (refit == 0)
        snprintf(tail, sizeof tail, " as is; the compression phase starts now");
    else
        snprintf(tail, sizeof tail,
                 "; it is checked against the first gradients and re-estimated by Adam until "
                 "step %ld%s, %s; the refit's gradients cross in %s",
                 refit, because, frozen, ob__spec_exchanges[t->spec.optim.refit_exchange]);
    snprintf(msg, sizeof msg, "warm start from %s (step %ld, frozen at step %ld): v_Tw%s taken%s",
             c.path, meta.step, meta.freeze_step,
             t->spec.warm_start_params ? " and parameters" : "", tail);
    if (refit == 0)
        warm_event(t, "taken as is", msg, cb, user);
    else
        ob__trainer_notice(t, msg, cb, user);
    return OB_OK;
}

void ob__trainer_warm_checked(ob_trainer *t, const ob_optim_stats *os, ob_train_callback cb,
                              void *user)
{
    char msg[320], outcome[128];
    double pct = 100.0 * os->warm_check_fraction;
    /* The check ended a longer auto refit at step 1 (OB_WARM_FIT_FRACTION). */
    int fits = os->warm_start == OB_WARM_REFIT && os->refit_end == 1 && warm_refit_steps(t) > 1;
    if (os->warm_start == OB_WARM_REFUSED)
        snprintf(msg, sizeof msg,
                 "warm start refused: %.2f%% of the coordinates have gradients above %g sqrt(v_Tw) "
                 "(the limit is %g%%); the borrowed variance is discarded and the job warms up as "
                 "from scratch",
                 pct, OB_WARM_CHECK_FACTOR, 100.0 * OB_WARM_REFUSE_FRACTION);
    else if (fits)
        snprintf(msg, sizeof msg,
                 "warm start check passed: %.2f%% of the coordinates have gradients above %g "
                 "sqrt(v_Tw), at most %g%%: v_Tw fits this job as it fitted its own, so it is "
                 "frozen at the end of step 1 instead of step %ld",
                 pct, OB_WARM_CHECK_FACTOR, 100.0 * OB_WARM_FIT_FRACTION, warm_refit_steps(t));
    else
        snprintf(msg, sizeof msg,
                 "warm start check passed: %.2f%% of the coordinates have gradients above %g "
                 "sqrt(v_Tw) (the limit is %g%%); re-estimating v until step %ld",
                 pct, OB_WARM_CHECK_FACTOR, 100.0 * OB_WARM_REFUSE_FRACTION, os->refit_end);
    if (os->warm_start == OB_WARM_REFUSED)
        snprintf(outcome, sizeof outcome,
                 "refused (%.2f%% of coordinates off), warmed up from scratch", pct);
    else if (fits)
        snprintf(outcome, sizeof outcome, "fits: frozen at step 1 (%.2f%% of coordinates off)",
                 pct);
    else
        snprintf(outcome, sizeof outcome, "re-estimated until step %ld (%.2f%% of coordinates off)",
                 os->refit_end, pct);
    warm_event(t, outcome, msg, cb, user);
}
