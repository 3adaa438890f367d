/* The optimizer's configuration: defaults, validation, the names of its enumerations, and the
 * values derived from it alone (stability bound, freeze factors, lags, a warm start's refit). */
#include "optim_internal.h"

#include <math.h>
#include <string.h>

void ob_optim_config_default(ob_optim_config *cfg, ob_optim_kind kind)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = kind;
    cfg->beta1 = 0.9;
    cfg->beta2 = 0.999;
    cfg->eps = 1e-8;
    cfg->weight_decay = 0.0;
    cfg->bias_correction = kind == OB_OPTIM_ADAM;
    cfg->mode = OB_ONEBIT_COMPRESSED;
    cfg->freeze_step = 0;
    cfg->freeze_threshold = 0.96;
    cfg->freeze_min_steps = 0;
    cfg->freeze_max_step = 0;
    cfg->lr_warmup_steps = 0;
    cfg->block_size = 2048;
    cfg->scale = OB_SCALE_L1;
    cfg->stabilizer = kind == OB_OPTIM_ONEBIT_ADAM ? OB_STABILIZER_ADAM_BOUND : OB_STABILIZER_NONE;
    cfg->stability_bound = 0.0;
    cfg->frozen_step_ratio = 0.0;
    cfg->bucket_bytes = 0;
    cfg->overlap = 0;
    cfg->gradient_exchange = OB_EXCHANGE_FP32;
    cfg->refit_exchange = OB_EXCHANGE_FP8;
    cfg->refresh_steps = 0;
    cfg->seed = 1;
    cfg->max_denominator_step = 0;
    cfg->track_variance = 0;
    cfg->track_factor = 0.0;
    if (kind == OB_OPTIM_BINSGDM) {
        /* Unit signs carry no scale: the block only rounds the padding up (to N B). */
        cfg->block_size = 256;
        cfg->scale = OB_SCALE_UNIT;
    }
}

const char *ob_stabilizer_name(ob_stabilizer s)
{
    switch (s) {
    case OB_STABILIZER_NONE:
        return "none";
    case OB_STABILIZER_ADAM_BOUND:
        return "adam_bound";
    }
    return "unknown";
}

const char *ob_gradient_exchange_name(ob_gradient_exchange x)
{
    switch (x) {
    case OB_EXCHANGE_FP32:
        return "fp32";
    case OB_EXCHANGE_FP16:
        return "fp16";
    case OB_EXCHANGE_FP8:
        return "fp8";
    }
    return "unknown";
}

double ob_optim_stability_bound(const ob_optim_config *cfg)
{
    if (cfg->stabilizer != OB_STABILIZER_ADAM_BOUND) return INFINITY;
    if (cfg->stability_bound > 0.0) return cfg->stability_bound;
    return (1.0 - cfg->beta1) / sqrt(1.0 - cfg->beta2);
}

double ob_optim_track_factor(const ob_optim_config *cfg)
{
    return cfg->track_factor > 0.0 ? cfg->track_factor : OB_TRACK_FACTOR;
}

/* The conditions of the tracked default other than the LR warmup. */
static int track_default_fits(const ob_optim_config *cfg, int warm_start)
{
    if (cfg->kind != OB_OPTIM_ONEBIT_ADAM || cfg->mode != OB_ONEBIT_COMPRESSED) return 0;
    if (cfg->freeze_step != 0 || cfg->precondition || cfg->refresh_steps > 0 || warm_start)
        return 0;
    return cfg->stabilizer == OB_STABILIZER_ADAM_BOUND;
}

long ob_optim_default_track_variance(const ob_optim_config *cfg, int warm_start)
{
    if (!track_default_fits(cfg, warm_start) || cfg->lr_warmup_steps < OB_TRACK_DEFAULT_MIN_WARMUP)
        return 0;
    return OB_TRACK_DEFAULT_INTERVAL;
}

void ob_optim_default_mlp_tracking(ob_optim_config *cfg, int warm_start)
{
    if (!track_default_fits(cfg, warm_start)) return;
    cfg->track_variance = OB_TRACK_DEFAULT_INTERVAL;
    cfg->freeze_step = OB_TRACK_MLP_FREEZE;
    cfg->track_factor = OB_TRACK_MLP_FACTOR;
    cfg->freeze_max_step = 0;
}

void ob_optim_default_transformer_overlap(ob_optim_config *cfg, size_t num_params)
{
    size_t bucket = OB_OVERLAP_TRANSFORMER_BUCKET_BYTES / sizeof(float);
    if (cfg->kind != OB_OPTIM_ONEBIT_ADAM || num_params / 2 < bucket) return;
    cfg->overlap = 1;
    cfg->bucket_bytes = OB_OVERLAP_TRANSFORMER_BUCKET_BYTES;
}

long ob_optim_track_freeze_step(const ob_optim_config *cfg)
{
    long at = cfg->track_variance;
    if (cfg->lr_warmup_steps > at) at = cfg->lr_warmup_steps;
    if (cfg->freeze_min_steps > at) at = cfg->freeze_min_steps;
    return at;
}

double ob_optim_frozen_step_ratio(const ob_optim_config *cfg)
{
    if (cfg->frozen_step_ratio > 0.0) return cfg->frozen_step_ratio;
    return cfg->stabilizer == OB_STABILIZER_ADAM_BOUND ? OB_FROZEN_STEP_RATIO : INFINITY;
}

double ob_optim_freeze_raise(const ob_optim_config *cfg, long t)
{
    double r = ob_optim_frozen_step_ratio(cfg);
    if (cfg->bias_correction || isinf(r) || t < 1) return 1.0;
    double f = 1.0 / (r * r * (1.0 - pow(cfg->beta2, (double)t)));
    return f > 1.0 ? f : 1.0;
}

const char *ob_optim_kind_name(ob_optim_kind kind)
{
    switch (kind) {
    case OB_OPTIM_ADAM:
        return "adam";
    case OB_OPTIM_ONEBIT_ADAM:
        return "onebit_adam";
    case OB_OPTIM_BINSGDM:
        return "binsgdm";
    case OB_OPTIM_SOFTSIGN:
        return "softsign";
    }
    return "unknown";
}

const char *ob_onebit_mode_name(ob_onebit_mode mode)
{
    switch (mode) {
    case OB_ONEBIT_COMPRESSED:
        return "compressed";
    case OB_ONEBIT_UNCOMPRESSED:
        return "uncompressed";
    case OB_ONEBIT_NAIVE:
        return "naive";
    }
    return "unknown";
}

const char *ob_phase_name(ob_phase phase)
{
    return phase == OB_PHASE_COMPRESSION ? "compression" : "warmup";
}

long ob_optim_freeze_delta(double beta2)
{
    /* 1/(1-0.999) is 1000.0000000000009 in binary; shave a relative 1e-9 before ceil. */
    double x = 1.0 / (1.0 - beta2);
    return (long)ceil(x * (1.0 - 1e-9));
}

ob_status ob_optim_config_validate(const ob_optim_config *c, ob_err *err)
{
#define BAD(...) OB_ERR(err, OB_ERR_INVALID_ARG, __VA_ARGS__)
    if (c->kind < OB_OPTIM_ADAM || c->kind > OB_OPTIM_SOFTSIGN)
        return BAD("optimizer: unknown kind %d (expected adam, onebit_adam, binsgdm or softsign)",
                   (int)c->kind);
    if (!(c->beta1 >= 0.0 && c->beta1 < 1.0)) return BAD("beta1 = %g: must be in [0, 1)", c->beta1);
    if (!(c->beta2 >= 0.0 && c->beta2 < 1.0)) return BAD("beta2 = %g: must be in [0, 1)", c->beta2);
    if (!(c->eps > 0.0 && isfinite(c->eps))) return BAD("eps = %g: must be > 0", c->eps);
    if (!(c->weight_decay >= 0.0 && isfinite(c->weight_decay)))
        return BAD("weight_decay = %g: must be >= 0", c->weight_decay);
    if (c->bias_correction != 0 && c->bias_correction != 1)
        return BAD("bias_correction = %d: must be 0 or 1", c->bias_correction);
    if (c->bucket_bytes > OB_OPTIM_MAX_BUCKET_BYTES)
        return BAD("bucket_bytes = %zu: must be at most %zu (1 GiB)", c->bucket_bytes,
                   OB_OPTIM_MAX_BUCKET_BYTES);
    if (c->overlap != 0 && c->overlap != 1) return BAD("overlap = %d: must be 0 or 1", c->overlap);
    if (c->gradient_exchange != OB_EXCHANGE_FP32 && c->gradient_exchange != OB_EXCHANGE_FP16 &&
        c->gradient_exchange != OB_EXCHANGE_FP8)
        return BAD("gradient_exchange = %d: expected fp32, fp16 or fp8", (int)c->gradient_exchange);
    if (c->refit_exchange != OB_EXCHANGE_FP32 && c->refit_exchange != OB_EXCHANGE_FP16 &&
        c->refit_exchange != OB_EXCHANGE_FP8)
        return BAD("refit_exchange = %d: expected fp32, fp16 or fp8", (int)c->refit_exchange);
    if (c->refresh_steps < 0 || c->refresh_steps > OB_OPTIM_MAX_REFRESH_STEPS)
        return BAD("refresh_steps = %ld: must be in [0, %d] (0: never)", c->refresh_steps,
                   OB_OPTIM_MAX_REFRESH_STEPS);
    if ((c->ranks_per_node < 0 && c->ranks_per_node != OB_OPTIM_RANKS_PER_NODE_AUTO) ||
        c->ranks_per_node > OB_OPTIM_MAX_RANKS_PER_NODE)
        return BAD("ranks_per_node = %d: must be in [0, %d] (0: flat) or %d (auto)",
                   c->ranks_per_node, OB_OPTIM_MAX_RANKS_PER_NODE, OB_OPTIM_RANKS_PER_NODE_AUTO);
    if (c->ranks_per_node > 1 && !ob__optim_uses_car(c))
        return BAD("ranks_per_node = %d: only a compressed exchange (onebit_adam with compression "
                   "on or naive, binsgdm) runs hierarchically",
                   c->ranks_per_node);
    if (c->max_denominator_step < 0)
        return BAD("max_denominator_step = %ld: must be >= 0 (0: never)", c->max_denominator_step);
    if (c->max_denominator_step > 0 && c->kind != OB_OPTIM_BINSGDM)
        return BAD("max_denominator_step = %ld: only binsgdm keeps a running maximum",
                   c->max_denominator_step);
    if (c->kind != OB_OPTIM_ONEBIT_ADAM && c->refresh_steps > 0)
        return BAD("refresh_steps = %ld: %s never freezes v; only onebit_adam refreshes it",
                   c->refresh_steps, ob_optim_kind_name(c->kind));
    if (c->track_variance < 0 || c->track_variance > OB_OPTIM_MAX_TRACK_INTERVAL)
        return BAD("track_variance = %ld: must be in [0, %d] (0: off)", c->track_variance,
                   OB_OPTIM_MAX_TRACK_INTERVAL);
    if (!(c->track_factor == 0.0 || (c->track_factor > 0.0 && c->track_factor <= 100.0)))
        return BAD("track_factor = %g: must be 0 (the default) or in (0, 100]", c->track_factor);
    if (c->track_variance > 0 &&
        (c->kind != OB_OPTIM_ONEBIT_ADAM || c->mode != OB_ONEBIT_COMPRESSED))
        return BAD("track_variance = %ld: only onebit_adam with compression on tracks its "
                   "variance",
                   c->track_variance);
    if (c->track_variance > 0 && c->refresh_steps > 0)
        return BAD("track_variance and refresh_steps: both re-estimate v after the freeze; "
                   "choose one");
    if (c->kind == OB_OPTIM_ADAM || c->kind == OB_OPTIM_SOFTSIGN) return OB_OK;
    if (c->kind == OB_OPTIM_BINSGDM) {
        if (c->block_size == 0 || c->block_size % 32 != 0)
            return BAD("block_size = %zu: must be a positive multiple of 32", c->block_size);
        if (c->scale != OB_SCALE_UNIT)
            return BAD("scale %d: binsgdm sends unit signs (no scale)", (int)c->scale);
        if (c->gradient_exchange != OB_EXCHANGE_FP32)
            return BAD("gradient_exchange: binsgdm exchanges no gradients (only its 1-bit "
                       "update); leave it fp32");
        if (c->bias_correction)
            return BAD("bias_correction: binsgdm's m / b needs none (both start at zero with "
                       "the same beta)");
        return OB_OK;
    }

    if (c->mode != OB_ONEBIT_COMPRESSED && c->mode != OB_ONEBIT_UNCOMPRESSED &&
        c->mode != OB_ONEBIT_NAIVE)
        return BAD("mode %d: expected compressed, uncompressed or naive", (int)c->mode);
    if (c->freeze_step < 0) return BAD("freeze_step = %ld: must be >= 0 (0: auto)", c->freeze_step);
    if (c->mode == OB_ONEBIT_NAIVE && c->freeze_step > 0)
        return BAD("freeze_step = %ld: the naive mode never freezes v; leave it 0", c->freeze_step);
    if (c->mode == OB_ONEBIT_NAIVE && c->refresh_steps > 0)
        return BAD("refresh_steps = %ld: the naive mode never freezes v; leave it 0",
                   c->refresh_steps);
    if (!(c->freeze_threshold > 0.0 && c->freeze_threshold <= 1.0))
        return BAD("freeze_threshold = %g: must be in (0, 1]", c->freeze_threshold);
    if (c->freeze_min_steps < 0)
        return BAD("freeze_min_steps = %ld: must be >= 0", c->freeze_min_steps);
    if (c->freeze_max_step < 0)
        return BAD("freeze_max_step = %ld: must be >= 0", c->freeze_max_step);
    if (c->lr_warmup_steps < 0)
        return BAD("lr_warmup_steps = %ld: must be >= 0", c->lr_warmup_steps);
    if (c->block_size == 0 || c->block_size % 32 != 0)
        return BAD("block_size = %zu: must be a positive multiple of 32", c->block_size);
    if (c->scale != OB_SCALE_L1 && c->scale != OB_SCALE_L2)
        return BAD("scale %d: expected l1 or l2", (int)c->scale);
    if (c->precondition != 0 && c->precondition != 1)
        return BAD("precondition = %d: must be 0 or 1", c->precondition);
    if (c->precondition && c->mode != OB_ONEBIT_COMPRESSED)
        return BAD("precondition: only for the compressed mode");
    if (c->stabilizer != OB_STABILIZER_NONE && c->stabilizer != OB_STABILIZER_ADAM_BOUND)
        return BAD("stabilizer = %d: unknown", (int)c->stabilizer);
    if (!(c->stability_bound >= 0.0) || c->stability_bound > 1e6)
        return BAD("stability_bound = %g: must be 0 (derived from the betas) or in (0, 1e6]",
                   c->stability_bound);
    if (!(c->frozen_step_ratio == 0.0 ||
          (c->frozen_step_ratio >= 1.0 && c->frozen_step_ratio <= 1e6)))
        return BAD("frozen_step_ratio = %g: must be 0 (the default) or in [1, 1e6]",
                   c->frozen_step_ratio);
    return OB_OK;
#undef BAD
}

int ob__optim_uses_car(const ob_optim_config *c)
{
    return c->kind == OB_OPTIM_BINSGDM ||
           (c->kind == OB_OPTIM_ONEBIT_ADAM &&
            (c->mode == OB_ONEBIT_COMPRESSED || c->mode == OB_ONEBIT_NAIVE));
}

/* The lag of the auto freeze's ratio: Delta, at most OB_FREEZE_MAX_LAG. */
long ob_optim_freeze_lag(double beta2)
{
    long delta = ob_optim_freeze_delta(beta2);
    return delta > OB_FREEZE_MAX_LAG ? OB_FREEZE_MAX_LAG : delta;
}

const char *ob_warm_state_name(ob_warm_state s)
{
    switch (s) {
    case OB_WARM_NONE:
        return "none";
    case OB_WARM_TAKEN:
        return "taken";
    case OB_WARM_REFIT:
        return "refit";
    case OB_WARM_REFUSED:
        return "refused";
    case OB_WARM_REWARM:
        return "rewarm";
    case OB_WARM_DELAYED:
        return "delayed";
    }
    return "?";
}

long ob_optim_auto_refit_steps(double beta2, ob_warm_source source)
{
    long delta = ob_optim_freeze_delta(beta2);
    switch (source) {
    case OB_WARM_SOURCE_SAME:
        return (delta + 4) / 5;
    case OB_WARM_SOURCE_LARGER_BATCH:
        return (3 * delta + 3) / 4;
    default:
        return (delta + 1) / 2;
    }
}
