/* HDF5 checkpoints of a data-parallel job: write, commit atomically, list, verify, read, and
 * re-shard the error-feedback buffers for another world size.
 *
 * A job's checkpoints live in one directory (the "job directory", <root>/<job-id>), one
 * sub-directory per checkpoint:
 *
 *   <job dir>/step-00001200/state.h5        rank 0: parameters, m, v (v_Tw after the freeze),
 *                                           the tensor index (name, shape, offset of each
 *                                           tensor in the flat buffers), freeze-detector
 *                                           history, the job spec, metadata
 *   <job dir>/step-00001200/rank-00000.h5   every rank: its worker error (D) and the server
 *   <job dir>/step-00001200/rank-00001.h5   error it owns (C), with the server layout when it
 *                                           has more than one segment
 *
 * The server layout says which positions of the padded vector (D = N C floats, N ranks, block
 * size B) each rank's server error holds. It cuts [0, D) into n >= 1 segments at bounds
 * b[0] = 0 < b[1] < ... < b[n] = D, every bound a multiple of N B. Segment s splits evenly:
 * with L_s = (b[s+1] - b[s]) / N, rank j holds positions [b[s] + j L_s, b[s] + (j+1) L_s), and
 * its server error is these pieces laid end to end in segment order (sum of L_s = C). One
 * segment [0, D) (bounds NULL, num_segments 0) is the plain layout: rank j holds
 * [j C, (j+1) C). The worker error is indexed by position and has no layout.
 *
 * Files are written under step-XXXXXXXX.tmp/, each fsynced, then the directory is fsynced,
 * renamed to step-XXXXXXXX/ and the job directory fsynced: a checkpoint either exists whole or
 * not at all, and only renamed directories count. Every dataset is chunked with HDF5's
 * Fletcher32 filter and the files use the HDF5 1.10 format, whose object headers (and so the
 * attributes) carry checksums too: a flipped byte fails the read. docs/CHECKPOINTS.md gives the
 * schema; `h5dump -A state.h5` shows it.
 *
 * This library knows nothing of MPI: the caller (the trainer) decides which rank writes what
 * and when to commit. Errors are ob_status codes with messages naming the file and the check
 * that failed (OB_ERR_CORRUPT for anything that does not verify, OB_ERR_NOT_FOUND for a
 * missing file, OB_ERR_IO for a failed system call). All functions are thread-safe. */
#ifndef ONEBIT_CHECKPOINT_H
#define ONEBIT_CHECKPOINT_H

#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OB_CKPT_FORMAT_VERSION 1
#define OB_CKPT_PATH_LEN 4096 /* path buffers, terminator included */

/* Everything about a checkpoint except the large arrays: the attributes of state.h5. */
typedef struct ob_ckpt_meta {
    uint32_t format_version; /* OB_CKPT_FORMAT_VERSION when written by this build */
    long step;               /* completed optimizer steps */
    int phase;               /* ob_phase of the next step: 0 warmup, 1 compression */
    long freeze_step;        /* T_w, -1 while in warmup */
    int world_size;          /* ranks that wrote it: one rank file each */
    uint64_t num_params;     /* d */
    uint64_t padded_size;    /* D, 0 when the optimizer has no compressed allreduce */
    uint64_t chunk_size;     /* C = D / world_size, 0 likewise */
    uint64_t block_size;     /* B of the compressed allreduce, 0 likewise */
    uint64_t seed;           /* the job's seed */
    /* Freeze detector and statistics: restored so that a resumed run reports what the
     * uninterrupted run would have. */
    double last_ratio;   /* last ||v_t||_1 / ||v_{t-Delta}||_1, NaN when never computed */
    double last_norm;    /* last ||v_t||_1 */
    uint64_t bytes_sent; /* optimizer traffic of rank 0 so far */
    uint64_t bytes_warmup, bytes_compression;
    double lr;         /* learning rate of the last step (the schedule is a function of step) */
    double train_loss; /* mean train loss of the last logged window, NaN when none */
    /* Train loader position (ob_loader_position): shared by every rank. */
    uint64_t loader_epoch, loader_index;
    uint64_t loader_rng[4];
    double wall_seconds; /* training time before this checkpoint, all attempts */
    /* A warm start's state (ob_warm_state of onebit/optim.h: 0 none, 1 taken, 2 refit,
     * 3 refused, 4 re-warming after a rollback, 5 the freeze delayed after a rollback into the
     * warmup) and the step its refit (or delay) ends; optional
     * attributes, 0 when absent. */
    int warm_start;
    long refit_end;
    /* The factor a refit's freeze multiplies v by (ob_optim_warm_start), in (0, 1]; optional,
     * 1 when absent. */
    double refit_scale;
    /* Rollbacks after a divergence so far (optional attribute, 0 when absent). */
    int rollbacks;
    /* The divergence guard's loss tracker (optional attributes, NaN when absent): the moving
     * average of the train loss over every rank, its level at the freeze and its lowest value
     * since (NaN while in the warmup). */
    double loss_ema, loss_at_freeze, loss_best;
    /* 1: every rank file also holds that rank's own m and second moment (an optimizer that
     * keeps them per rank: BinSGDM's m and b), /optim/local_exp_avg and
     * /optim/local_exp_avg_sq, d floats each; state.h5's exp_avg and exp_avg_sq are then rank
     * 0's. Optional attribute, 0 when absent. */
    int local_moments;
    /* 1: every rank file also holds that rank's tracked-variance statistics u, A and B
     * (ob_optim_config.track_variance) as /optim/variance_stats, 3 d floats. Optional
     * attribute, 0 when absent. */
    int track_stats;
    /* The compressed exchange's ranks a node (onebit/car.h, ob_car_create_hier): > 1, every
     * rank file's worker error is its node's error on the rank's piece (zero elsewhere); 1:
     * flat. Optional attribute, 1 when absent; divides world_size. */
    int ranks_per_node;
    uint64_t v_norm_history_len; /* read only: entries of /optim/v_norm_history (0: none) */
} ob_ckpt_meta;

/* The tensor index of state.h5 (/model/tensors): where each named tensor of the model lies in
 * the flat parameter buffer (and so in exp_avg and exp_avg_sq, which share its layout). */
#define OB_CKPT_TENSOR_NAME_LEN 64 /* name bytes, terminator included */
#define OB_CKPT_TENSOR_MAX_DIM 4
#define OB_CKPT_MAX_TENSORS 65536

typedef struct ob_ckpt_tensor {
    char name[OB_CKPT_TENSOR_NAME_LEN];     /* [A-Za-z0-9_.-]+, NUL-terminated */
    uint64_t offset;                        /* first element in the flat buffer */
    uint32_t ndim;                          /* 1 .. OB_CKPT_TENSOR_MAX_DIM */
    uint64_t shape[OB_CKPT_TENSOR_MAX_DIM]; /* row-major; entries past ndim are 0 */
} ob_ckpt_tensor;

/* The arrays of state.h5. Pointers are borrowed (written: read from; read: written into, each
 * with room for the sizes in the meta). v_norm_history may be NULL with length 0. tensors is
 * only written (NULL with num_tensors 0: no index); read the index with ob_ckpt_read_tensors. */
typedef struct ob_ckpt_arrays {
    float *params;     /* (d) */
    float *exp_avg;    /* (d) m */
    float *exp_avg_sq; /* (d) v; v_Tw after the freeze */
    double *v_norm_history;
    size_t v_norm_history_len;     /* Delta, or 0 */
    const ob_ckpt_tensor *tensors; /* the layout of params, in buffer order, or NULL */
    size_t num_tensors;
} ob_ckpt_arrays;

/* --- Names and directories ------------------------------------------------------------------ */

/* Writes "<job_dir>/step-XXXXXXXX" (tmp = 0) or ".../step-XXXXXXXX.tmp" (tmp = 1) into out
 * (OB_CKPT_PATH_LEN bytes). OB_ERR_INVALID_ARG when it does not fit or step is out of range. */
ob_status ob_ckpt_step_dir(char *out, const char *job_dir, long step, int tmp, ob_err *err);

/* Creates dir and its missing parents (mode 0755). An existing directory is fine. */
ob_status ob_ckpt_mkdirs(const char *dir, ob_err *err);

/* Prepares the temporary directory of checkpoint `step` in job_dir (creating job_dir if
 * needed): a leftover one from an earlier attempt is removed first. Call on one rank, before
 * any rank writes into it; the path goes to out (OB_CKPT_PATH_LEN bytes). */
ob_status ob_ckpt_prepare(const char *job_dir, long step, char *out, ob_err *err);

/* Commits checkpoint `step`: fsyncs its temporary directory, renames it to step-XXXXXXXX
 * (replacing an older checkpoint of the same step), fsyncs job_dir. Call on one rank after
 * every rank's files are written and synced. */
ob_status ob_ckpt_commit(const char *job_dir, long step, ob_err *err);

/* Removes the temporary directory of checkpoint `step` (a failed write). */
ob_status ob_ckpt_discard(const char *job_dir, long step, ob_err *err);

/* Keeps the newest `keep` (>= 1) committed checkpoints of job_dir that verify (ob_ckpt_verify)
 * and removes every committed checkpoint older than the last of them, along with temporary
 * directories of steps before the newest verified one. A committed directory that does not
 * verify is not counted toward `keep`: newer than the kept ones it is left in place, older it
 * is removed. So the newest verified checkpoint is never removed, whatever other directories
 * hold. *removed (may be NULL) receives the number of checkpoints removed. Verifies at most
 * `keep` checkpoints plus the damaged ones above them. */
ob_status ob_ckpt_prune(const char *job_dir, int keep, int *removed, ob_err *err);

/* The checkpoints a writer committed itself, so that its retention pass need not read them
 * back: re-reading a checkpoint just written mostly reads the page cache, which proves nothing
 * about the disk and stalls the training for as long as it takes (1.5 s for a 3.2 GB state).
 * For each checkpoint it records the identity (device, inode, size, modification and change
 * times) of every file in its directory. Owned by one writer; not thread-safe. */
typedef struct ob_ckpt_written ob_ckpt_written;

ob_status ob_ckpt_written_create(ob_ckpt_written **out, ob_err *err);
/* Accepts NULL. */
void ob_ckpt_written_destroy(ob_ckpt_written *w);
/* Records committed checkpoint `step` of job_dir (call right after ob_ckpt_commit). At most
 * OB_CKPT_WRITTEN_MAX checkpoints are remembered; the oldest is forgotten first. */
ob_status ob_ckpt_written_add(ob_ckpt_written *w, const char *job_dir, long step, ob_err *err);
#define OB_CKPT_WRITTEN_MAX 64

/* ob_ckpt_prune, except that a committed checkpoint recorded in w (may be NULL: ob_ckpt_prune)
 * whose files are exactly the ones recorded, unchanged, counts as verified without being read.
 * Any difference (a file added, removed, replaced or written to) and it is verified in full
 * like any other. Checkpoints removed are forgotten by w. */
ob_status ob_ckpt_prune_written(const char *job_dir, int keep, ob_ckpt_written *w, int *removed,
                                ob_err *err);

/* One entry of a job directory. */
typedef struct ob_ckpt_entry {
    long step;
    int committed; /* 0: a step-XXXXXXXX.tmp directory (incomplete, never used) */
    char path[OB_CKPT_PATH_LEN];
} ob_ckpt_entry;

/* Lists the checkpoint directories of job_dir, newest step first (for one step, the committed
 * one before its .tmp). Other names are ignored. *out is malloc'd, owned by the caller (free());
 * NULL with *n = 0 when there are none. A missing job_dir gives an empty list. */
ob_status ob_ckpt_list(const char *job_dir, ob_ckpt_entry **out, size_t *n, ob_err *err);

/* --- Writing -------------------------------------------------------------------------------- */

/* Writes <dir>/state.h5 (dir from ob_ckpt_prepare) with the metadata, the arrays (sizes from
 * meta->num_params and arrays->v_norm_history_len) and the job spec (spec_json: NUL-terminated
 * canonical JSON, borrowed), and fsyncs it. Everything is borrowed. */
ob_status ob_ckpt_write_state(const char *dir, const ob_ckpt_meta *meta,
                              const ob_ckpt_arrays *arrays, const char *spec_json, ob_err *err);

/* Writes <dir>/rank-XXXXX.h5 for `rank` of meta->world_size: the worker error (padded_size
 * floats) and the server error (chunk_size floats) in the server layout seg_bounds
 * (num_segments + 1 bounds; NULL with num_segments 0: one segment), and fsyncs it. The layout
 * must be one over meta's padded_size, world_size and block_size (OB_ERR_INVALID_ARG naming
 * the rule otherwise); with more than one segment it is stored as /optim/server_segments, with
 * one the file is as without it. With padded_size 0 (no compressed allreduce) the file holds
 * only the step and rank, and marks the rank as done. Arrays are borrowed; the error buffers
 * may be NULL when padded_size is 0. */
ob_status ob_ckpt_write_rank(const char *dir, const ob_ckpt_meta *meta, int rank,
                             const float *worker_error, const float *server_error,
                             const size_t *seg_bounds, size_t num_segments, ob_err *err);

/* ob_ckpt_write_rank for a checkpoint with meta->local_moments: also this rank's own moments
 * local_m and local_v (d floats each, borrowed; required then, NULL otherwise). */
ob_status ob_ckpt_write_rank_moments(const char *dir, const ob_ckpt_meta *meta, int rank,
                                     const float *worker_error, const float *server_error,
                                     const size_t *seg_bounds, size_t num_segments,
                                     const float *local_m, const float *local_v, ob_err *err);

/* Everything a rank file holds, for ob_ckpt_write_rank_arrays: the error buffers and their
 * server layout (as ob_ckpt_write_rank), the per-rank moments (meta->local_moments, else
 * NULL) and the variance statistics (meta->track_stats: 3 d floats, else NULL). Borrowed. */
typedef struct ob_ckpt_rank_arrays {
    const float *worker_error, *server_error;
    const size_t *seg_bounds;
    size_t num_segments;
    const float *local_m, *local_v;
    const float *track_stats;
} ob_ckpt_rank_arrays;

ob_status ob_ckpt_write_rank_arrays(const char *dir, const ob_ckpt_meta *meta, int rank,
                                    const ob_ckpt_rank_arrays *arrays, ob_err *err);

/* --- Reading -------------------------------------------------------------------------------- */

/* Reads the metadata of <dir>/state.h5 into *meta and, if spec_json is non-NULL, the spec (a
 * NUL-terminated string from malloc, owned by the caller). Checks the magic, the format version
 * and that the sizes are consistent; reads no large array. */
ob_status ob_ckpt_read_meta(const char *dir, ob_ckpt_meta *meta, char **spec_json, ob_err *err);

/* Reads the arrays of <dir>/state.h5 into arrays (caller-owned buffers of the sizes meta
 * gives; v_norm_history is read when non-NULL, and then its length must match). Fletcher32
 * is checked on every chunk. */
ob_status ob_ckpt_read_state(const char *dir, const ob_ckpt_meta *meta,
                             const ob_ckpt_arrays *arrays, ob_err *err);

/* Checks a tensor index against a buffer of d elements, as every reader must before using it:
 * 1 .. OB_CKPT_MAX_TENSORS entries, each name non-empty, terminated within
 * OB_CKPT_TENSOR_NAME_LEN bytes and made of [A-Za-z0-9_.-] only, names distinct, ndim in
 * 1 .. OB_CKPT_TENSOR_MAX_DIM with every dimension >= 1 and unused ones 0, and the entries in
 * buffer order, each starting where the previous one ends (products and sums computed without
 * wrapping), the last ending at d. OB_ERR_CORRUPT naming the entry and the rule otherwise;
 * what (borrowed) starts the message. */
ob_status ob_ckpt_check_tensors(const ob_ckpt_tensor *t, size_t n, uint64_t d, const char *what,
                                ob_err *err);

/* Reads the tensor index of <dir>/state.h5 (/model/tensors) and checks it with
 * ob_ckpt_check_tensors against meta->num_params. *out is malloc'd (free()), owned by the
 * caller; a checkpoint without an index (written before it existed) gives *out NULL, *n 0 and
 * OB_OK. The dataset's type is checked member by member before it is read. */
ob_status ob_ckpt_read_tensors(const char *dir, const ob_ckpt_meta *meta, ob_ckpt_tensor **out,
                               size_t *n, ob_err *err);

/* Verifies a committed checkpoint completely: the metadata, every dataset of state.h5 and of
 * each of its world_size rank files (presence, step, sizes, checksums, a server layout valid
 * for the checkpoint's D, N and B and the same in every rank file). On success *meta (may be
 * NULL) receives the metadata. The message of a failure names the file and the reason. */
ob_status ob_ckpt_verify(const char *dir, ob_ckpt_meta *meta, ob_err *err);

/* Called by ob_ckpt_find_latest for every checkpoint it passes over, newest first: path, and
 * why (a message). user is passed through. */
typedef void (*ob_ckpt_skip_fn)(const char *path, const char *reason, void *user);

/* Finds the newest checkpoint of job_dir that verifies: its directory goes to out
 * (OB_CKPT_PATH_LEN bytes) and its metadata to *meta (may be NULL). Incomplete (.tmp) and
 * failing checkpoints are passed over, each reported through skip (may be NULL).
 * OB_ERR_NOT_FOUND when there is none. */
ob_status ob_ckpt_find_latest(const char *job_dir, char *out, ob_ckpt_meta *meta,
                              ob_ckpt_skip_fn skip, void *user, ob_err *err);

/* The same among the checkpoints of steps below `below`: the next candidate after one that
 * verified but that its reader refused (a resume falls back to it). */
ob_status ob_ckpt_find_latest_below(const char *job_dir, long below, char *out, ob_ckpt_meta *meta,
                                    ob_ckpt_skip_fn skip, void *user, ob_err *err);

/* Reads the error-feedback buffers that rank `rank` of `world_size` needs from the checkpoint
 * at dir, whose metadata is *meta, with the server error in the requested server layout
 * seg_bounds (num_segments + 1 bounds over this run's padded_size and world_size, borrowed;
 * NULL with num_segments 0: one segment). Each rank file gives its own layout (one segment
 * when it stores none), and they must agree.
 *   - the same world size and D, and the file's layout: this rank's own file, bit for bit;
 *   - the same world size and D, another layout: the worker error is this rank's own file bit
 *     for bit, the server error is gathered position by position from every old rank's, exactly
 *     (the padding included);
 *   - another world size or D: worker_error = the element-wise mean of the old ranks' worker
 *     errors (what the server averages), server_error = this rank's positions in the requested
 *     layout taken from the old ranks' server errors; elements at positions >= d (the padding)
 *     are set to 0 in both.
 * padded_size and chunk_size are this run's D and C (d = meta->num_params, and D = C *
 * world_size >= d). The requested bounds must run from 0 to D, strictly ascending, each a
 * multiple of world_size (the caller keeps them multiples of N B too): OB_ERR_INVALID_ARG
 * otherwise. worker_error gets D floats, server_error C floats (caller-owned). */
ob_status ob_ckpt_read_errors(const char *dir, const ob_ckpt_meta *meta, int rank, int world_size,
                              size_t padded_size, size_t chunk_size, const size_t *seg_bounds,
                              size_t num_segments, float *worker_error, float *server_error,
                              ob_err *err);

/* Reads the per-rank moments (meta->local_moments; OB_ERR_CORRUPT when the checkpoint has
 * none) that rank `rank` of `world_size` resumes from into local_m and local_v (d floats each,
 * caller-owned): at the checkpoint's world size, this rank's own bit for bit; at another, the
 * element-wise mean of every old rank's. */
ob_status ob_ckpt_read_local_moments(const char *dir, const ob_ckpt_meta *meta, int rank,
                                     int world_size, float *local_m, float *local_v, ob_err *err);

/* Reads the variance statistics (meta->track_stats; OB_ERR_CORRUPT, saying so, when the
 * checkpoint has none) that rank `rank` of `world_size` resumes from into stats (3 d floats,
 * caller-owned): at the checkpoint's world size this rank's own bit for bit, at another the
 * element-wise mean of every old rank's. */
ob_status ob_ckpt_read_track_stats(const char *dir, const ob_ckpt_meta *meta, int rank,
                                   int world_size, float *stats, ob_err *err);

/* ob_ckpt_read_errors for a run whose compressed exchange has ranks_per_node m (1 or 0: flat;
 * onebit/car.h), from a checkpoint written with any (meta->ranks_per_node). The same shape:
 * ob_ckpt_read_errors itself. Another: the server errors as ob_ckpt_read_errors gives them
 * (both shapes serve chunk r on rank r), the worker error carried so that the error the whole
 * world owes is the same: a flat rank takes its own error (from a hierarchical checkpoint:
 * its node's), a hierarchical rank the mean of its node's ranks' on its piece, zero elsewhere;
 * at another world size or D, from the mean of every stored buffer, scaled by the stored
 * ranks a node. */
ob_status ob_ckpt_read_errors_for(const char *dir, const ob_ckpt_meta *meta, int rank,
                                  int world_size, size_t padded_size, size_t chunk_size,
                                  const size_t *seg_bounds, size_t num_segments, int ranks_per_node,
                                  float *worker_error, float *server_error, ob_err *err);

/* --- Export --------------------------------------------------------------------------------- */

typedef enum ob_ckpt_export_format {
    OB_CKPT_EXPORT_NPZ = 0,         /* a zip of .npy files (stored), for numpy.load */
    OB_CKPT_EXPORT_SAFETENSORS = 1, /* safetensors: u64 LE header size, JSON header, raw data */
} ob_ckpt_export_format;

/* Writes the parameters of the verified checkpoint at dir as named float32 tensors to out_path
 * (written to out_path.tmp, fsynced, renamed). Names and shapes come from the tensor index; a
 * checkpoint without one exports a single tensor "params" of shape (d). With with_optim the
 * momentum and the variance follow as "exp_avg.<name>" and "exp_avg_sq.<name>". The npz form
 * holds at most 4 GiB per file and in total (no zip64): larger is OB_ERR_UNSUPPORTED. *count
 * (may be NULL) receives the number of tensors written. */
ob_status ob_ckpt_export(const char *dir, ob_ckpt_export_format format, int with_optim,
                         const char *out_path, size_t *count, ob_err *err);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_CHECKPOINT_H */
