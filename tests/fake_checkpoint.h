/* A small checkpoint that verifies (one rank, four parameters, no error buffers), committed
 * atomically as <job dir>/step-NNNNNNNN by the checkpoint library itself: what the coordinator's
 * tests give it where a worker would have written the state of a step. */
#ifndef ONEBIT_TESTS_FAKE_CHECKPOINT_H
#define ONEBIT_TESTS_FAKE_CHECKPOINT_H

#include "onebit/checkpoint.h"

#include <math.h>
#include <string.h>

static inline ob_status fake_checkpoint_write(const char *job_dir, long step, ob_err *err)
{
    ob_ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.format_version = OB_CKPT_FORMAT_VERSION;
    m.step = step;
    m.freeze_step = -1;
    m.world_size = 1;
    m.num_params = 4;
    m.seed = 1;
    m.last_ratio = m.train_loss = m.loss_ema = m.loss_at_freeze = m.loss_best = NAN;
    m.refit_scale = 1.0;
    float x[4] = {1, 2, 3, 4}, mm[4] = {0}, v[4] = {0};
    ob_ckpt_arrays a = {x, mm, v, NULL, 0, NULL, 0};
    char dir[OB_CKPT_PATH_LEN];
    ob_status rc = ob_ckpt_prepare(job_dir, step, dir, err);
    if (!rc) rc = ob_ckpt_write_state(dir, &m, &a, "{}", err);
    if (!rc) rc = ob_ckpt_write_rank(dir, &m, 0, NULL, NULL, NULL, 0, err);
    if (!rc) rc = ob_ckpt_commit(job_dir, step, err);
    return rc;
}

#endif
