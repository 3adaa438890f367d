/* Checkpoints of a training run: when to save, which rank writes what, the background writer
 * and the commit protocol (resume, rollback and warm start read them: trainer_resume.c).
 *
 * Protocol for a checkpoint of step s (every rank reaches it at the same step):
 *   1. rank 0 prepares <job>/step-s.tmp/ (removing a leftover), and the ranks agree it worked;
 *   2. every rank writes rank-XXXXX.h5 (rank 0 also state.h5) and fsyncs it, either now
 *      (synchronous) or from a snapshot in a background thread (async: the loop goes on);
 *   3. once every rank reports its files written (synchronous: right away; async: through the
 *      per-step control reduction), rank 0 fsyncs, renames to step-s/, fsyncs the job
 *      directory and prunes old checkpoints (async: in the writer's thread, which the next
 *      flush waits for; retention reads back none of the checkpoints this trainer committed,
 *      ob_ckpt_prune_written). A failed write is discarded and reported; the previous
 *      checkpoint stays the newest.
 * The files are shared: every rank's files land in one directory (a shared file system when
 * ranks run on several hosts). */
#include "trainer_internal.h"
#include "onebit/optim_ckpt.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the background writer -------------------------------------------------------------------- */

struct ob__ckpt_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int have_job, finished, quit;
    ob_status result;
    ob_err err;
    double seconds;
    /* The job: a snapshot owned by the writer. */
    char dir[OB_CKPT_PATH_LEN];
    ob_ckpt_meta meta;
    int rank;
    const char *spec_json;         /* borrowed from the trainer */
    const ob_ckpt_tensor *tensors; /* borrowed from the trainer */
    size_t num_tensors;
    float *params, *m, *v, *we, *se, *ts;
    int local; /* m and v are this rank's own: every rank snapshots and writes them */
    double *hist;
    size_t d, D, C, H, TS;
    const size_t *seg; /* the server layout (the optimizer's, fixed for its life) */
    size_t nseg;
    /* Rank 0: the retention pass after an async commit, run here off the training thread. */
    int have_prune, pruning;
    long prune_step;
    const char *job_dir; /* borrowed from the trainer */
    int keep;
    ob_ckpt_written *written;       /* borrowed from the trainer; touched here only while pruning */
    char prune_msg[OB_ERR_MSG_LEN]; /* a failed pass, for the next flush to tell */
};

/* Records checkpoint `step` as this writer's and runs retention (ob_ckpt_prune_written). */
static ob_status retain(const char *job_dir, int keep, ob_ckpt_written *written, long step,
                        ob_err *err)
{
    /* A failure to remember only makes retention read the checkpoint back. */
    if (written) (void)ob_ckpt_written_add(written, job_dir, step, NULL);
    return ob_ckpt_prune_written(job_dir, keep, written, NULL, err);
}

static void *writer_main(void *arg)
{
    ob__ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->have_job && !w->have_prune && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->have_prune) { /* before quitting too: a commit is never left unpruned */
            w->have_prune = 0;
            w->pruning = 1;
            pthread_mutex_unlock(&w->mu);
            ob_err e = {0};
            ob_status st = retain(w->job_dir, w->keep, w->written, w->prune_step, &e);
            pthread_mutex_lock(&w->mu);
            if (st != OB_OK) snprintf(w->prune_msg, sizeof w->prune_msg, "%s", e.msg);
            w->pruning = 0;
            pthread_cond_broadcast(&w->cv);
            continue;
        }
        if (w->quit) break;
        w->have_job = 0;
        pthread_mutex_unlock(&w->mu);

        double t0 = ob_mono_s();
        ob_ckpt_arrays a = {w->params, w->m, w->v, w->hist, w->H, w->tensors, w->num_tensors};
        ob_err e = {0};
        ob_status st = ob_optim_ckpt_write_files(w->dir, &w->meta, &a, w->spec_json, w->rank, w->we,
                                                 w->se, w->seg, w->nseg, w->ts, &e);

        pthread_mutex_lock(&w->mu);
        w->result = st;
        w->err = e;
        w->seconds = ob_mono_s() - t0;
        w->finished = 1;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Frees the snapshot buffers and the writer itself (the thread is gone or never started). */
static void free_snapshot(ob__ckpt_writer *w)
{
    ob_aligned_free(w->params);
    ob_aligned_free(w->m);
    ob_aligned_free(w->v);
    ob_aligned_free(w->we);
    ob_aligned_free(w->se);
    ob_aligned_free(w->ts);
    free(w->hist);
    free(w);
}

static void writer_destroy(ob__ckpt_writer *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free_snapshot(w);
}

/* Snapshot buffers sized for this trainer (state arrays on rank 0 only), and the thread. */
static ob_status writer_create(ob_trainer *t, ob__ckpt_writer **out, ob_err *err)
{
    ob_optim_state os;
    ob_optim_get_state(t->opt, &os);
    ob__ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) return OB_ERR(err, OB_ERR_NOMEM, "checkpoint writer");
    w->rank = ob_comm_rank(t->comm);
    w->d = t->d;
    w->D = os.padded_size;
    w->C = os.chunk_size;
    w->seg = os.server_segments;
    w->nseg = os.num_server_segments;
    w->H = os.v_norm_history_len;
    w->local = os.local_moments;
    w->TS = os.track_stats_len;
    int ok = 1;
    if (w->TS) {
        w->ts = ob_calloc_aligned(w->TS * sizeof(float));
        ok = w->ts != NULL;
    }
    if (w->rank == 0 || w->local) {
        w->m = ob_calloc_aligned(w->d * sizeof(float));
        w->v = ob_calloc_aligned(w->d * sizeof(float));
        ok = w->m && w->v;
    }
    if (w->rank == 0) {
        w->params = ob_calloc_aligned(w->d * sizeof(float));
        ok = ok && w->params;
        if (w->H) {
            w->hist = calloc(w->H, sizeof(double));
            ok = ok && w->hist;
        }
    }
    if (w->D) {
        w->we = ob_calloc_aligned(w->D * sizeof(float));
        w->se = ob_calloc_aligned(w->C * sizeof(float));
        ok = ok && w->we && w->se;
    }
    if (!ok) {
        free_snapshot(w);
        return OB_ERR(err, OB_ERR_NOMEM, "checkpoint snapshot of %zu parameters", t->d);
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free_snapshot(w);
        return OB_ERR(err, OB_ERR_IO, "checkpoint writer thread: pthread_create failed");
    }
    *out = w;
    return OB_OK;
}

void ob__trainer_ckpt_destroy(ob_trainer *t)
{
    writer_destroy(t->writer);
    t->writer = NULL;
    ob_ckpt_written_destroy(t->written);
    t->written = NULL;
    free(t->tensors);
    t->tensors = NULL;
    t->num_tensors = 0;
}

ob_status ob__trainer_tensor_index(ob_trainer *t, ob_err *err)
{
    size_t n = ob_model_num_tensors(t->model);
    if (n == 0 || n > OB_CKPT_MAX_TENSORS)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "the model has %zu tensors (1 .. %d)", n,
                      OB_CKPT_MAX_TENSORS);
    ob_ckpt_tensor *idx = calloc(n, sizeof *idx);
    if (!idx) return OB_ERR(err, OB_ERR_NOMEM, "tensor index of %zu entries", n);
    for (size_t i = 0; i < n; i++) {
        const ob_model_tensor *mt = ob_model_tensor_at(t->model, i);
        size_t len = strlen(mt->name);
        if (len >= OB_CKPT_TENSOR_NAME_LEN || mt->ndim < 1 || mt->ndim > OB_CKPT_TENSOR_MAX_DIM) {
            free(idx);
            return OB_ERR(err, OB_ERR_INVALID_ARG, "model tensor '%s' does not fit the index",
                          mt->name);
        }
        memcpy(idx[i].name, mt->name, len + 1);
        idx[i].offset = mt->offset;
        idx[i].ndim = (uint32_t)mt->ndim;
        for (size_t k = 0; k < mt->ndim; k++)
            idx[i].shape[k] = mt->shape[k];
    }
    ob_status st = ob_ckpt_check_tensors(idx, n, t->d, "the model's tensor table", err);
    if (st != OB_OK) {
        free(idx);
        return OB_WRAP(err, st, "tensor index");
    }
    t->tensors = idx;
    t->num_tensors = n;
    return OB_OK;
}

/* --- what a checkpoint holds ------------------------------------------------------------------ */

/* The checkpoint's metadata: the optimizer's fields (ob_optim_ckpt_meta) and the trainer's. */
static void fill_meta(ob_trainer *t, ob_ckpt_meta *m)
{
    ob_loader_position pos;
    ob_loader_get_position(t->train, &pos);
    ob_optim_ckpt_meta(t->opt, ob_comm_size(t->comm), m);
    m->seed = t->spec.seed;
    m->bytes_warmup = t->bytes_warmup;
    m->bytes_compression = t->bytes_compression;
    m->lr = t->last_lr;
    m->train_loss = t->last_loss;
    m->loader_epoch = pos.epoch;
    m->loader_index = pos.index;
    memcpy(m->loader_rng, pos.rng.s, sizeof m->loader_rng);
    m->wall_seconds = t->wall_before + (t->t_start > 0 ? ob_mono_s() - t->t_start : 0.0);
    m->rollbacks = t->rollbacks;
    m->loss_ema = t->loss_ema;
    m->loss_at_freeze = t->loss_at_freeze;
    m->loss_best = t->loss_best;
}

static uint64_t ckpt_bytes(const ob_ckpt_meta *m, size_t hist)
{
    uint64_t local =
        (m->local_moments ? 2u : 0u) * m->num_params + (m->track_stats ? 3u : 0u) * m->num_params;
    return 3u * m->num_params * sizeof(float) + hist * sizeof(double) +
           (uint64_t)m->world_size * (m->padded_size + m->chunk_size + local) * sizeof(float);
}

ob_status ob_trainer_enable_checkpoints(ob_trainer *t, const char *job_dir, ob_err *err)
{
    if (!job_dir || !job_dir[0])
        return OB_ERR(err, OB_ERR_INVALID_ARG, "checkpoints: empty job directory");
    if (strlen(job_dir) + 32 >= sizeof t->job_dir)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "checkpoints: directory name too long");
    snprintf(t->job_dir, sizeof t->job_dir, "%s", job_dir);
    return OB_OK;
}

/* Sums a failure flag over the ranks: *nfail ranks failed. */
ob_status ob__trainer_agree(ob_trainer *t, int failed, int *nfail, ob_err *err)
{
    float f = failed ? 1.0f : 0.0f;
    *nfail = 0;
    ob_status st = ob_comm_allreduce_sum_f32(t->comm, &f, 1, err);
    if (st != OB_OK) return OB_WRAP(err, st, "checkpoint agreement");
    *nfail = (int)f;
    return OB_OK;
}

void ob__trainer_emit(ob_trainer *t, ob_train_event *ev, ob_train_callback cb, void *user)
{
    if (!cb) return;
    ob_optim_stats os;
    ob_optim_get_stats(t->opt, &os);
    ev->total_steps = t->spec.steps;
    ev->phase = os.phase;
    ev->freeze_step = os.freeze_step;
    ev->bytes_sent = os.bytes_sent;
    ev->freeze_ratio = os.freeze_ratio;
    ev->is_text = t->is_text;
    cb(ev, user);
}

void ob__trainer_notice(ob_trainer *t, const char *msg, ob_train_callback cb, void *user)
{
    ob_train_event ev = {0};
    ob_optim_stats os;
    ob_optim_get_stats(t->opt, &os);
    ev.kind = OB_EVENT_NOTICE;
    ev.step = os.step;
    ev.message = msg;
    ob__trainer_emit(t, &ev, cb, user);
}

/* Step 3 of the protocol, once every rank is done: rank 0 commits (nfail == 0) or discards,
 * and every rank learns whether the checkpoint exists. Fills the event's outcome. */
static ob_status finish(ob_trainer *t, long step, int nfail, const ob_err *local, int background,
                        ob_train_event *ev, char *msg, size_t msg_cap, ob_err *err)
{
    int rank = ob_comm_rank(t->comm);
    int32_t committed = 0;
    ob_err cerr = {0};
    msg[0] = '\0';
    if (rank == 0) {
        if (nfail == 0) {
            ob_status st = ob_ckpt_commit(t->job_dir, step, &cerr);
            if (st == OB_OK) {
                committed = 1;
                /* Remembered so that retention does not read back what was just written. */
                if (!t->written) (void)ob_ckpt_written_create(&t->written, NULL);
                if (background && t->writer) {
                    ob__ckpt_writer *w = t->writer;
                    pthread_mutex_lock(&w->mu);
                    w->prune_step = step;
                    w->job_dir = t->job_dir;
                    w->keep = t->spec.checkpoint_keep;
                    w->written = t->written;
                    w->have_prune = 1;
                    pthread_cond_broadcast(&w->cv);
                    pthread_mutex_unlock(&w->mu);
                } else if ((st = retain(t->job_dir, t->spec.checkpoint_keep, t->written, step,
                                        &cerr)) != OB_OK) {
                    snprintf(msg, msg_cap, "committed, but pruning: %s", cerr.msg);
                }
            } else {
                snprintf(msg, msg_cap, "%s", cerr.msg);
            }
        } else {
            ob_ckpt_discard(t->job_dir, step, NULL);
        }
    }
    ob_status st = ob_comm_bcast(t->comm, &committed, sizeof committed, 0, err);
    if (st != OB_OK) return OB_WRAP(err, st, "checkpoint commit");
    if (!msg[0] && !committed) {
        if (local && local->code != OB_OK)
            snprintf(msg, msg_cap, "%s", local->msg);
        else if (nfail > 0)
            snprintf(msg, msg_cap, "writing failed on %d rank(s)", nfail);
        else
            snprintf(msg, msg_cap, "the commit failed on rank 0");
    }
    ev->kind = OB_EVENT_CHECKPOINT;
    ev->step = step;
    ev->ckpt_ok = committed;
    ev->message = msg[0] ? msg : NULL;
    if (committed) t->last_ckpt_step = step;
    return OB_OK;
}

/* Rank 0 prepares the temporary directory; every rank gets its path. *ok = 0 when it failed
 * (the event is emitted here). */
static ob_status begin(ob_trainer *t, long step, char *dir, int *ok, ob_train_callback cb,
                       void *user, ob_err *err)
{
    ob_err perr = {0};
    ob_status pst = ob_comm_rank(t->comm) == 0 ? ob_ckpt_prepare(t->job_dir, step, dir, &perr)
                                               : ob_ckpt_step_dir(dir, t->job_dir, step, 1, &perr);
    int nfail = 0;
    ob_status st = ob__trainer_agree(t, pst != OB_OK, &nfail, err);
    if (st != OB_OK) return st;
    *ok = nfail == 0;
    if (!*ok) {
        char msg[OB_ERR_MSG_LEN + 64];
        snprintf(msg, sizeof msg, "%s",
                 pst != OB_OK ? perr.msg : "preparing the directory failed on rank 0");
        ob_train_event ev = {0};
        ev.kind = OB_EVENT_CHECKPOINT;
        ev.step = step;
        ev.message = msg;
        ob__trainer_emit(t, &ev, cb, user);
    }
    return OB_OK;
}

ob_status ob__trainer_checkpoint(ob_trainer *t, int async, ob_train_callback cb, void *user,
                                 ob_err *err)
{
    ob_status st = ob__trainer_ckpt_flush(t, cb, user, err);
    if (st != OB_OK) return st;
    double t0 = ob_mono_s();
    ob_ckpt_meta meta;
    fill_meta(t, &meta);
    int rank = ob_comm_rank(t->comm), ok;
    char dir[OB_CKPT_PATH_LEN];
    st = begin(t, meta.step, dir, &ok, cb, user, err);
    if (st != OB_OK || !ok) return st;
    /* On a device this copies the state to the host first (part of the stall). A failure here
     * is a device failure, not a checkpoint one: training cannot go on either. */
    ob__host_state hs;
    if ((st = ob__trainer_host_state(t, 1, &hs, err)) != OB_OK)
        return OB_WRAP(err, st, "checkpoint of step %ld", meta.step);

    if (async) {
        if (!t->writer && (st = writer_create(t, &t->writer, err)) != OB_OK) return st;
        ob__ckpt_writer *w = t->writer;
        pthread_mutex_lock(&w->mu);
        if (rank == 0 || w->local) {
            memcpy(w->m, hs.m, t->d * sizeof(float));
            memcpy(w->v, hs.v, t->d * sizeof(float));
        }
        if (rank == 0) {
            memcpy(w->params, hs.params, t->d * sizeof(float));
            if (w->H) memcpy(w->hist, hs.hist, w->H * sizeof(double));
        }
        if (w->D) {
            memcpy(w->we, hs.we, w->D * sizeof(float));
            memcpy(w->se, hs.se, w->C * sizeof(float));
        }
        if (w->TS) memcpy(w->ts, hs.ts, w->TS * sizeof(float));
        memcpy(w->dir, dir, sizeof dir);
        w->meta = meta;
        w->spec_json = t->spec_json;
        w->tensors = t->tensors;
        w->num_tensors = t->num_tensors;
        w->finished = 0;
        w->have_job = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        t->pending_step = meta.step;
        t->pending_stall = ob_mono_s() - t0;
        return OB_OK;
    }

    double tw = ob_mono_s();
    ob_ckpt_arrays a = {hs.params, hs.m, hs.v, hs.hist, hs.H, t->tensors, t->num_tensors};
    ob_err werr = {0};
    ob_status wst = ob_optim_ckpt_write_files(dir, &meta, &a, t->spec_json, rank, hs.we, hs.se,
                                              hs.seg, hs.nseg, hs.ts, &werr);
    double write_s = ob_mono_s() - tw;
    int nfail = 0;
    if ((st = ob__trainer_agree(t, wst != OB_OK, &nfail, err)) != OB_OK) return st;
    ob_train_event ev = {0};
    char msg[OB_ERR_MSG_LEN + 64];
    if ((st = finish(t, meta.step, nfail, &werr, 0, &ev, msg, sizeof msg, err)) != OB_OK) return st;
    char path[OB_CKPT_PATH_LEN];
    ob_ckpt_step_dir(path, t->job_dir, meta.step, 0, NULL);
    ev.path = path;
    ev.stall_seconds = ob_mono_s() - t0;
    ev.write_seconds = write_s;
    ev.ckpt_bytes = ckpt_bytes(&meta, hs.H);
    ob__trainer_emit(t, &ev, cb, user);
    return OB_OK;
}

void ob__trainer_ckpt_local_done(ob_trainer *t, float *ok, float *failed)
{
    *ok = *failed = 0.0f;
    if (t->pending_step < 0 || !t->writer) return;
    pthread_mutex_lock(&t->writer->mu);
    if (t->writer->finished) {
        if (t->writer->result == OB_OK)
            *ok = 1.0f;
        else
            *failed = 1.0f;
    }
    pthread_mutex_unlock(&t->writer->mu);
}

ob_status ob__trainer_ckpt_poll(ob_trainer *t, float done_ok, float done_failed,
                                ob_train_callback cb, void *user, ob_err *err)
{
    if (t->pending_step < 0) return OB_OK;
    int n = ob_comm_size(t->comm);
    if ((int)(done_ok + done_failed) < n) return OB_OK; /* still writing somewhere */
    ob__ckpt_writer *w = t->writer;
    long step = t->pending_step;
    t->pending_step = -1;
    ob_err werr = w->err;
    ob_train_event ev = {0};
    char msg[OB_ERR_MSG_LEN + 64];
    double t0 = ob_mono_s();
    ob_status st = finish(t, step, (int)done_failed, &werr, 1, &ev, msg, sizeof msg, err);
    if (st != OB_OK) return st;
    /* The commit runs here, on the training thread (part of the stall); the retention pass
     * goes on in the writer's thread until the next flush. */
    double commit_s = ob_mono_s() - t0;
    char path[OB_CKPT_PATH_LEN];
    ob_ckpt_step_dir(path, t->job_dir, step, 0, NULL);
    ev.path = path;
    ev.ckpt_async = 1;
    ev.stall_seconds = t->pending_stall + commit_s;
    ev.write_seconds = w->seconds;
    ev.ckpt_bytes = ckpt_bytes(&w->meta, w->H);
    ob__trainer_emit(t, &ev, cb, user);
    return OB_OK;
}

/* Waits for the writer's retention pass, if one is running, and tells its failure. */
static void wait_prune(ob_trainer *t, ob_train_callback cb, void *user)
{
    ob__ckpt_writer *w = t->writer;
    if (!w) return;
    char msg[OB_ERR_MSG_LEN + 64] = "";
    pthread_mutex_lock(&w->mu);
    while (w->have_prune || w->pruning)
        pthread_cond_wait(&w->cv, &w->mu);
    if (w->prune_msg[0]) {
        snprintf(msg, sizeof msg, "checkpoint retention: %s", w->prune_msg);
        w->prune_msg[0] = '\0';
    }
    pthread_mutex_unlock(&w->mu);
    if (msg[0]) ob__trainer_notice(t, msg, cb, user);
}

ob_status ob__trainer_ckpt_flush(ob_trainer *t, ob_train_callback cb, void *user, ob_err *err)
{
    if (t->pending_step >= 0) {
        ob__ckpt_writer *w = t->writer;
        pthread_mutex_lock(&w->mu);
        while (!w->finished)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        float done[2];
        ob__trainer_ckpt_local_done(t, &done[0], &done[1]);
        ob_status st = ob_comm_allreduce_sum_f32(t->comm, done, 2, err);
        if (st != OB_OK) return OB_WRAP(err, st, "checkpoint flush");
        if ((st = ob__trainer_ckpt_poll(t, done[0], done[1], cb, user, err)) != OB_OK) return st;
    }
    /* Nothing reads or writes the job directory while retention may be removing from it. */
    wait_prune(t, cb, user);
    return OB_OK;
}
