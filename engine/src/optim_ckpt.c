/* The optimizer's part of a checkpoint (onebit/optim_ckpt.h): the metadata it decides, this
 * rank's files, and its state read back; shared by the trainer and the Python binding. */
#include "onebit/optim_ckpt.h"
#include "optim_internal.h"

#include <string.h>

void ob_optim_ckpt_meta(ob_optim *o, int world_size, ob_ckpt_meta *m)
{
    ob_optim_progress p;
    ob_optim_state s;
    ob_optim_stats stats;
    ob_optim_get_progress(o, &p);
    ob_optim_get_state(o, &s);
    ob_optim_get_stats(o, &stats);
    memset(m, 0, sizeof *m);
    m->format_version = OB_CKPT_FORMAT_VERSION;
    m->step = p.step;
    m->phase = (int)stats.phase;
    m->freeze_step = p.freeze_step;
    m->world_size = world_size;
    m->num_params = o->d;
    m->padded_size = s.padded_size;
    m->chunk_size = s.chunk_size;
    m->block_size = s.padded_size ? o->cfg.block_size : 0;
    m->last_ratio = p.last_ratio;
    m->last_norm = p.last_norm;
    m->bytes_sent = p.bytes_sent;
    m->warm_start = (int)p.warm_start;
    m->refit_end = p.refit_end;
    m->refit_scale = p.refit_scale;
    m->local_moments = s.local_moments;
    m->track_stats = s.track_stats != NULL;
    m->ranks_per_node = s.ranks_per_node > 1 ? s.ranks_per_node : 1;
}

ob_status ob_optim_ckpt_write_files(const char *dir, const ob_ckpt_meta *meta,
                                    const ob_ckpt_arrays *a, const char *spec_json, int rank,
                                    const float *we, const float *se, const size_t *seg,
                                    size_t nseg, const float *ts, ob_err *err)
{
    ob_status st = OB_OK;
    if (rank == 0) st = ob_ckpt_write_state(dir, meta, a, spec_json, err);
    /* Every rank's own m and b where the optimizer keeps them per rank (binsgdm), and its
     * variance statistics (track_variance). */
    ob_ckpt_rank_arrays ra = {we,
                              se,
                              seg,
                              nseg,
                              meta->local_moments ? a->exp_avg : NULL,
                              meta->local_moments ? a->exp_avg_sq : NULL,
                              meta->track_stats ? ts : NULL};
    if (st == OB_OK) st = ob_ckpt_write_rank_arrays(dir, meta, rank, &ra, err);
    return st;
}

ob_status ob_optim_ckpt_read(ob_optim *o, const char *path, const ob_ckpt_meta *meta, int rank,
                             int size, float *params, float *m, float *v, float *we, float *se,
                             float *ts, ob_err *err)
{
    ob_optim_state s;
    ob_optim_get_state(o, &s);
    ob_ckpt_arrays a = {params, m, v, s.v_norm_history, s.v_norm_history_len, NULL, 0};
    ob_status st = ob_ckpt_read_state(path, meta, &a, err);
    if (st == OB_OK && s.padded_size > 0)
        st = ob_ckpt_read_errors_for(path, meta, rank, size, s.padded_size, s.chunk_size,
                                     s.server_segments, s.num_server_segments, s.ranks_per_node, we,
                                     se, err);
    if (st == OB_OK && s.local_moments)
        st = ob_ckpt_read_local_moments(path, meta, rank, size, m, v, err);
    /* A tracked variance needs every rank's statistics: a checkpoint without them (a job
     * that did not track) is refused rather than resumed from zeros. */
    if (st == OB_OK && s.track_stats)
        st = ob_ckpt_read_track_stats(path, meta, rank, size, ts, err);
    return st;
}

ob_status ob_optim_ckpt_restore_progress(ob_optim *o, const ob_ckpt_meta *meta, const char *path,
                                         ob_err *err)
{
    ob_optim_progress p = {meta->step,      meta->freeze_step, meta->last_ratio,
                           meta->last_norm, meta->bytes_sent,  (ob_warm_state)meta->warm_start,
                           meta->refit_end, meta->refit_scale};
    ob_status st = ob_optim_set_progress(o, &p, err);
    return st == OB_OK ? OB_OK : OB_WRAP(err, st, "%s", path);
}

ob_status ob_optim_ckpt_rolled_back(ob_optim *o, const ob_optim_config *cfg, uint64_t bytes_sent,
                                    long bad_step, int *rewarmed, ob_err *err)
{
    int freezes = cfg->kind == OB_OPTIM_ONEBIT_ADAM && cfg->mode != OB_ONEBIT_NAIVE;
    if (rewarmed) *rewarmed = freezes;
    ob_optim_progress p;
    ob_optim_get_progress(o, &p);
    p.bytes_sent = bytes_sent;
    ob_status st = ob_optim_set_progress(o, &p, err);
    if (st != OB_OK || !freezes) return st;
    return ob_optim_rewarm(o, ob_optim_auto_refit_steps(cfg->beta2, OB_WARM_SOURCE_OTHER), bad_step,
                           err);
}
