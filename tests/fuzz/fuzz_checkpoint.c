/* Fuzz target: the checkpoint reader on arbitrary bytes, twice.
 *   1. As a checkpoint's state.h5 (a job's folder, a warm-start source, or what
 *      ListCheckpoints reads): its metadata is read and the checkpoint verified.
 *   2. As rank-00000.h5 of a valid one-rank checkpoint (d 10, B 4, D 12, step 1; its state.h5
 *      written once): the checkpoint is verified and the error buffers read in two server
 *      layouts, at its own world size and at 2 (every rank-file dataset, the layout included).
 * Each lives in a private temporary directory. Seed it with real checkpoints
 * (tests/fuzz/README.md). */
#include "onebit/checkpoint.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], rank_dir[64];
static ob_ckpt_meta rank_meta; /* of rank_dir's state.h5 */

static void write_bytes(const char *d, const char *name, const uint8_t *data, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", d, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

/* The one-rank checkpoint whose rank file the input replaces (tests/fuzz/corpus/checkpoint/
 * rank-00000.h5 is a valid one, in the layout {0, 4, 12}). */
static void make_rank_dir(void)
{
    snprintf(rank_dir, sizeof rank_dir, "/tmp/fuzz_checkpoint_rank.XXXXXX"); /* mkdtemp's */
    if (!mkdtemp(rank_dir)) abort();
    ob_ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.format_version = OB_CKPT_FORMAT_VERSION;
    m.step = 1;
    m.freeze_step = -1;
    m.world_size = 1;
    m.num_params = 10;
    m.padded_size = m.chunk_size = 12;
    m.block_size = 4;
    m.last_ratio = m.train_loss = m.loss_ema = m.loss_at_freeze = m.loss_best = NAN;
    m.refit_scale = 1.0;
    float params[10] = {0};
    ob_ckpt_arrays a = {params, params, params, NULL, 0, NULL, 0};
    if (ob_ckpt_write_state(rank_dir, &m, &a, "{}", NULL) != OB_OK ||
        ob_ckpt_read_meta(rank_dir, &rank_meta, NULL, NULL) != OB_OK)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_checkpoint.XXXXXX"); /* template, filled by mkdtemp */
        if (!mkdtemp(dir)) abort();
        make_rank_dir();
    }
    write_bytes(dir, "state.h5", data, size);
    ob_ckpt_meta m;
    char *spec = NULL;
    if (ob_ckpt_read_meta(dir, &m, &spec, NULL) == OB_OK) free(spec);
    ob_ckpt_verify(dir, &m, NULL);

    write_bytes(rank_dir, "rank-00000.h5", data, size);
    ob_ckpt_verify(rank_dir, &m, NULL);
    static const size_t one_rank[] = {0, 4, 12}, two_ranks[] = {0, 8, 16};
    float we[16], se[12];
    ob_ckpt_read_errors(rank_dir, &rank_meta, 0, 1, 12, 12, one_rank, 2, we, se, NULL);
    ob_ckpt_read_errors(rank_dir, &rank_meta, 1, 2, 16, 8, two_ranks, 2, we, se, NULL);
    /* The readers of per-rank moments and of another exchange shape, on the same hostile
     * rank file (the metadata says it holds them, or a hierarchical shape). */
    ob_ckpt_meta local = rank_meta;
    local.local_moments = 1;
    float lm[10], lv[10];
    ob_ckpt_read_local_moments(rank_dir, &local, 0, 1, lm, lv, NULL);
    ob_ckpt_read_local_moments(rank_dir, &local, 0, 2, lm, lv, NULL);
    ob_ckpt_verify(rank_dir, &local, NULL);
    ob_ckpt_read_errors_for(rank_dir, &rank_meta, 0, 1, 12, 12, NULL, 0, 1, we, se, NULL);
    return 0;
}
