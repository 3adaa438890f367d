/* Learning-rate schedules. Steps are numbered from 1 (the step being taken). Every schedule
 * starts with an optional linear warmup over warmup_steps (lr = peak * t / warmup_steps), then:
 *   constant            lr = peak
 *   warmup_step_decay   lr = peak * decay_rate ^ floor((t - warmup_steps) / decay_every)
 *                       (the paper's BERT schedule: 12.5k warmup, x0.99 every 520 steps)
 *   cosine              lr = min_lr + (peak - min_lr) * (1 + cos(pi * p)) / 2,
 *                       p = (t - warmup_steps) / (total_steps - warmup_steps), clamped to [0, 1] */
#ifndef ONEBIT_SCHEDULE_H
#define ONEBIT_SCHEDULE_H

#include "onebit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ob_lr_kind {
    OB_LR_CONSTANT = 0,
    OB_LR_WARMUP_STEP_DECAY = 1,
    OB_LR_COSINE = 2,
} ob_lr_kind;

typedef struct ob_lr_schedule {
    ob_lr_kind kind;
    double peak;       /* > 0 */
    long warmup_steps; /* >= 0 */
    double decay_rate; /* warmup_step_decay: (0, 1], default 0.99 */
    long decay_every;  /* warmup_step_decay: > 0, default 520 */
    double min_lr;     /* cosine: [0, peak], default 0 */
    long total_steps;  /* cosine: > warmup_steps (the job's steps) */
} ob_lr_schedule;

/* Defaults: constant, peak 1e-3, no warmup, decay 0.99 every 520, min_lr 0, total 0. */
void ob_lr_schedule_default(ob_lr_schedule *s);

/* Checks the fields; the message names the first offending one. */
ob_status ob_lr_schedule_validate(const ob_lr_schedule *s, ob_err *err);

/* Learning rate for step t (t >= 1). */
double ob_lr_at(const ob_lr_schedule *s, long t);

const char *ob_lr_kind_name(ob_lr_kind kind); /* "constant", "warmup_step_decay", "cosine" */

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_SCHEDULE_H */
