/* The optimizer's part of a checkpoint (onebit/checkpoint.h's files): the metadata it decides,
 * this rank's files written from host copies of its state, and that state read back. The
 * trainer (onebit/trainer.h) and the Python binding (engine/python) both write and read their
 * checkpoints through these, so that the optimizer's state lands in the same files either way.
 * The commit protocol (prepare, write, agree, commit) stays with each caller. */
#ifndef ONEBIT_OPTIM_CKPT_H
#define ONEBIT_OPTIM_CKPT_H

#include "onebit/checkpoint.h"
#include "onebit/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Zeroes *m and fills the optimizer's fields: format version, step, phase, freeze step,
 * world_size (the caller's, the optimizer's ranks), the number of parameters, the error
 * buffers' sizes and block size (0 without a compressed exchange), the freeze detector's last
 * ratio and norm, bytes sent, the warm start's state, refit end and scale, local moments and
 * ranks per node. The caller adds what it owns: seed, learning rate, train loss, data
 * position, byte totals by phase, wall time, rollbacks and the loss tracker. */
void ob_optim_ckpt_meta(ob_optim *o, int world_size, ob_ckpt_meta *m);

/* Writes this rank's files of a checkpoint into dir (ob_ckpt_prepare's directory): rank 0
 * state.h5 from a (parameters, m, v, the freeze detector's history, the tensor index) with the
 * spec attribute spec_json, then every rank its rank file: the error buffers we
 * (meta->padded_size floats) and se (meta->chunk_size) over the server layout seg[0 .. nseg],
 * and, where meta->local_moments, its own m and v (a's), and where meta->track_stats its
 * variance statistics ts (ob_optim_state.track_stats_len floats). Everything is borrowed host
 * memory.
 * Takes no optimizer, so a background writer can work from a snapshot. */
ob_status ob_optim_ckpt_write_files(const char *dir, const ob_ckpt_meta *meta,
                                    const ob_ckpt_arrays *a, const char *spec_json, int rank,
                                    const float *we, const float *se, const size_t *seg,
                                    size_t nseg, const float *ts, ob_err *err);

/* Reads the optimizer's state of the checkpoint at path (meta: its metadata, read and checked
 * by the caller) into host buffers (borrowed): params, m and v (d floats each; m and v this
 * rank's own where the optimizer keeps them per rank) and the freeze detector's history (the
 * optimizer's own), and this rank's error buffers we and se (ob_optim_state's padded_size and
 * chunk_size floats; unused without a compressed exchange) re-sharded for this optimizer's
 * server layout, rank `rank` of `size`, and with track_variance its statistics ts
 * (track_stats_len floats: this rank's own, or the old ranks' mean at another world size;
 * OB_ERR_CORRUPT from a checkpoint without them). The optimizer's memory is not touched: a device
 * optimizer's caller copies the buffers there, then calls ob_optim_ckpt_restore_progress. */
ob_status ob_optim_ckpt_read(ob_optim *o, const char *path, const ob_ckpt_meta *meta, int rank,
                             int size, float *params, float *m, float *v, float *we, float *se,
                             float *ts, ob_err *err);

/* Restores the optimizer's step, freeze, freeze detector, traffic and warm start from meta
 * (ob_optim_set_progress; after the state is in place: a frozen v gives the denominator).
 * path names the checkpoint in the error. */
ob_status ob_optim_ckpt_restore_progress(ob_optim *o, const ob_ckpt_meta *meta, const char *path,
                                         ob_err *err);

/* After a rollback: the state of a checkpoint restored (ob_optim_ckpt_read, then _restore_progress)
 * because the run diverged at step bad_step. The traffic counter goes back to bytes_sent, what
 * had crossed the network before the rollback; 1-bit Adam (cfg: the optimizer's configuration,
 * compressed or uncompressed mode) re-estimates its variance over
 * ob_optim_auto_refit_steps(cfg->beta2, OB_WARM_SOURCE_OTHER) steps (ob_optim_rewarm), so as not
 * to take the same path to the same divergence; other optimizers go on from the checkpoint as
 * they were. *rewarmed (may be NULL): whether it re-estimates. */
ob_status ob_optim_ckpt_rolled_back(ob_optim *o, const ob_optim_config *cfg, uint64_t bytes_sent,
                                    long bad_step, int *rewarmed, ob_err *err);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_OPTIM_CKPT_H */
