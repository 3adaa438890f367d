/* Writes a small checkpoint that verifies, for tests/fake_worker.sh (the coordinator's tests
 * count only checkpoints that verify): one rank, four parameters, no error buffers, committed
 * atomically as <job dir>/step-NNNNNNNN by the checkpoint library itself.
 *   fake_checkpoint JOB_DIR STEP */
#include "onebit/checkpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fake_checkpoint JOB_DIR STEP\n");
        return 2;
    }
    const char *job_dir = argv[1];
    long step = atol(argv[2]);
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
    ob_err err = {0};
    if (ob_ckpt_prepare(job_dir, step, dir, &err) != OB_OK ||
        ob_ckpt_write_state(dir, &m, &a, "{}", &err) != OB_OK ||
        ob_ckpt_write_rank(dir, &m, 0, NULL, NULL, NULL, 0, &err) != OB_OK ||
        ob_ckpt_commit(job_dir, step, &err) != OB_OK) {
        fprintf(stderr, "fake_checkpoint: %s\n", err.msg);
        return 1;
    }
    return 0;
}
