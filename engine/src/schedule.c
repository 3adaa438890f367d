/* Learning-rate schedules (see onebit/schedule.h). */
#include "onebit/schedule.h"
#include "internal.h"

#include <math.h>

void ob_lr_schedule_default(ob_lr_schedule *s)
{
    s->kind = OB_LR_CONSTANT;
    s->peak = 1e-3;
    s->warmup_steps = 0;
    s->decay_rate = 0.99;
    s->decay_every = 520;
    s->min_lr = 0.0;
    s->total_steps = 0;
}

const char *ob_lr_kind_name(ob_lr_kind kind)
{
    switch (kind) {
    case OB_LR_CONSTANT:
        return "constant";
    case OB_LR_WARMUP_STEP_DECAY:
        return "warmup_step_decay";
    case OB_LR_COSINE:
        return "cosine";
    }
    return "unknown";
}

ob_status ob_lr_schedule_validate(const ob_lr_schedule *s, ob_err *err)
{
#define BAD(...) OB_ERR(err, OB_ERR_INVALID_ARG, __VA_ARGS__)
    if (s->kind != OB_LR_CONSTANT && s->kind != OB_LR_WARMUP_STEP_DECAY && s->kind != OB_LR_COSINE)
        return BAD("lr.schedule: unknown kind %d", (int)s->kind);
    if (!(s->peak > 0.0 && isfinite(s->peak))) return BAD("lr.peak = %g: must be > 0", s->peak);
    if (s->warmup_steps < 0) return BAD("lr.warmup_steps = %ld: must be >= 0", s->warmup_steps);
    if (s->kind == OB_LR_WARMUP_STEP_DECAY) {
        if (!(s->decay_rate > 0.0 && s->decay_rate <= 1.0))
            return BAD("lr.decay_rate = %g: must be in (0, 1]", s->decay_rate);
        if (s->decay_every <= 0) return BAD("lr.decay_every = %ld: must be > 0", s->decay_every);
    }
    if (s->kind == OB_LR_COSINE) {
        if (!(s->min_lr >= 0.0 && s->min_lr <= s->peak))
            return BAD("lr.min_lr = %g: must be in [0, peak]", s->min_lr);
        if (s->total_steps <= s->warmup_steps)
            return BAD("lr.warmup_steps = %ld: cosine needs more total steps (%ld) than warmup",
                       s->warmup_steps, s->total_steps);
    }
    return OB_OK;
#undef BAD
}

double ob_lr_at(const ob_lr_schedule *s, long t)
{
    if (t < 1) t = 1;
    if (t <= s->warmup_steps) return s->peak * (double)t / (double)s->warmup_steps;
    long after = t - s->warmup_steps;
    switch (s->kind) {
    case OB_LR_CONSTANT:
        return s->peak;
    case OB_LR_WARMUP_STEP_DECAY:
        return s->peak * pow(s->decay_rate, (double)(after / s->decay_every));
    case OB_LR_COSINE: {
        double p = (double)after / (double)(s->total_steps - s->warmup_steps);
        if (p > 1.0) p = 1.0;
        return s->min_lr + (s->peak - s->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * p));
    }
    }
    return s->peak;
}
