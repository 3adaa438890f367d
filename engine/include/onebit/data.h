/* Datasets and per-rank data loaders.
 *
 * A dataset is loaded once, is immutable afterwards, and holds two splits: train and eval.
 * Two kinds exist:
 *   - classification: fixed-size float feature vectors with integer labels (IDX image files such
 *     as Fashion-MNIST, or seeded Gaussian clusters for tests);
 *   - text: a byte string per split, cut into sequences of context + 1 bytes for byte-level
 *     language modelling (a file or a directory of text such as Debian's fortunes, or a seeded
 *     order-2 Markov source for tests).
 *
 * A loader iterates one split of a dataset for one rank of a data-parallel job and fills
 * ob_batch records (onebit/batch.h). Two modes:
 *   - sampling (ob_loader_create on the train split): an endless sequence of epochs. Each epoch
 *     is a seeded permutation of the split's items (examples, or text windows: see below) that
 *     every rank computes identically; step k of an epoch hands rank r the items
 *     perm[k*W*B + r*B .. k*W*B + (r+1)*B) (W ranks, batch B), so ranks never share an item
 *     within an epoch and together cover it. The last n mod (W*B) items of each epoch's
 *     permutation are skipped (every batch is full; they differ from epoch to epoch).
 *   - pass (ob_loader_create on the eval split, or ob_loader_create_pass on either): one ordered
 *     walk over the split, or over a fixed evenly spaced subset of it, sharded the same way;
 *     the last batches may be short, and a batch with n == 0 marks the end of this rank's share
 *     of the pass. Summing per-rank results over a pass gives the result of the whole split.
 *
 * Text windows. A text split of L bytes with context T is read as windows of T + 1 bytes
 * (ob_batch.tokens). A pass reads the windows starting at 0, T, 2T, ... ((L - 1) / T of them:
 * every byte but the first is a prediction target exactly once). A sampling epoch draws a random
 * phase p in [0, T) and shuffles the L / T - 1 windows starting at p, p + T, p + 2T, ...: random
 * offsets, yet each byte is read at most once per epoch and ranks stay disjoint.
 *
 * Determinism: everything is a function of (dataset, seed, world_size, rank); a loader position
 * (ob_loader_position) restores the exact stream of later batches. A sampling loader's position
 * is the same on every rank of a job at the same step, so one copy can be checkpointed.
 *
 * Thread safety: a dataset may be read by several loaders and threads at once; a loader is used
 * by one thread at a time. */
#ifndef ONEBIT_DATA_H
#define ONEBIT_DATA_H

#include "onebit/batch.h"
#include "onebit/rng.h"
#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where Debian's packages put the default datasets (dataset-fashion-mnist and fortunes). */
#define OB_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define OB_FORTUNES_DIR "/usr/share/games/fortunes"

typedef struct ob_dataset ob_dataset;
typedef struct ob_loader ob_loader;

typedef enum ob_dataset_kind {
    OB_DATASET_CLASSIFICATION = 1,
    OB_DATASET_TEXT = 2,
} ob_dataset_kind;

typedef enum ob_split {
    OB_SPLIT_TRAIN = 0,
    OB_SPLIT_EVAL = 1,
} ob_split;

/* ---- IDX image/label files (MNIST, Fashion-MNIST) ------------------------------------------ */

/* How pixel bytes become features. */
typedef enum ob_feature_norm {
    /* (pixel / 255 - mean) / std with one scalar mean and std over every pixel of the train
     * split; the eval split uses the train statistics. A scalar (not per-pixel) statistic keeps
     * always-black border pixels at a finite value. The default. */
    OB_FEATURES_STANDARDIZE = 0,
    OB_FEATURES_UNIT = 1, /* pixel / 255, in [0, 1] */
} ob_feature_norm;

typedef struct ob_idx_options {
    /* > 0: every label must be below it (checked); 0: max label over both splits + 1.
     * Default 10. */
    int num_classes;
    ob_feature_norm norm; /* default OB_FEATURES_STANDARDIZE */
} ob_idx_options;

/* Fills opts with the defaults above. */
void ob_idx_options_default(ob_idx_options *opts);

/* Loads a classification dataset from IDX files, each gzip-compressed or plain (detected from
 * the content). Images: magic 0x00000803, dims (n, rows, cols) big-endian, n*rows*cols bytes;
 * labels: magic 0x00000801, dim (n), n bytes. input_dim = rows * cols. The eval pair may both be
 * NULL for a dataset with an empty eval split. Paths are borrowed. opts may be NULL (defaults).
 * Errors, each naming the file: OB_ERR_NOT_FOUND (missing), OB_ERR_IO (unreadable),
 * OB_ERR_CORRUPT (bad magic, zero or implausible dims, truncated data, trailing data, image and
 * label counts that differ, eval image size unlike train, label >= num_classes).
 * On success *out is a new dataset owned by the caller (ob_dataset_destroy). */
ob_status ob_dataset_open_idx(ob_dataset **out, const char *train_images, const char *train_labels,
                              const char *eval_images, const char *eval_labels,
                              const ob_idx_options *opts, ob_err *err);

/* ob_dataset_open_idx on the four standard names in dir: train-images-idx3-ubyte,
 * train-labels-idx1-ubyte (train) and t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (eval),
 * each taken with a ".gz" suffix when that file exists, else without. dir NULL means
 * OB_FASHION_MNIST_DIR. */
ob_status ob_dataset_open_idx_dir(ob_dataset **out, const char *dir, const ob_idx_options *opts,
                                  ob_err *err);

/* ---- Byte-level text ----------------------------------------------------------------------- */

typedef struct ob_text_options {
    size_t context; /* T: bytes a model reads per sequence; default 128 */
    /* Held-out split: the text is cut into chunks of eval_chunk bytes and chunk i goes to eval
     * when floor((i + 1) * f) > floor(i * f), f = eval_fraction: every (1/f)-th chunk, spread
     * over the whole corpus rather than its alphabetically last files. Defaults 0.1 and 4096;
     * f in [0, 1). */
    double eval_fraction;
    size_t eval_chunk;
    size_t max_bytes; /* stop reading after this many bytes in all; 0 = no cap (default) */
} ob_text_options;

/* Fills opts with the defaults above. */
void ob_text_options_default(ob_text_options *opts);

/* Loads text from path (borrowed; NULL means OB_FORTUNES_DIR). A regular file is read whole, as
 * is. A directory is walked depth first, each directory's entries in byte order of their names
 * (strcmp), so the result does not depend on the file system; skipped: names starting with '.',
 * symbolic links (never followed: no cycles, and no duplicates such as fortunes' *.u8 links),
 * anything but regular files and directories, and files with a NUL byte in their first 4 KiB
 * (binary, such as fortunes' *.dat indexes). The files are concatenated without separators and
 * split as ob_text_options says. opts may be NULL (defaults).
 * Errors: OB_ERR_NOT_FOUND (path missing, or a directory holding no text), OB_ERR_IO (a read
 * failed, naming the file), OB_ERR_INVALID_ARG (bad options). On success *out is a new dataset
 * owned by the caller. */
ob_status ob_dataset_open_text(ob_dataset **out, const char *path, const ob_text_options *opts,
                               ob_err *err);

/* ---- Seeded synthetic data for tests ------------------------------------------------------- */

/* Gaussian clusters: num_classes centroids drawn from N(0, I); an example picks a uniform class
 * y and is centroid[y] + noise * N(0, I). Train and eval are independent draws around the same
 * centroids. Features are used as they are (no standardisation). */
typedef struct ob_synth_classification_spec {
    size_t n_train, n_eval; /* n_train >= 1 */
    size_t input_dim;       /* >= 1 */
    int num_classes;        /* >= 2 */
    float noise;            /* >= 0: std of the noise around each centroid (centroids are about
                               sqrt(2 * input_dim) apart) */
    uint64_t seed;
} ob_synth_classification_spec;

/* Builds that dataset (spec borrowed). OB_ERR_INVALID_ARG for a spec out of range. On success
 * *out is a new dataset owned by the caller (ob_dataset_destroy). */
ob_status ob_dataset_synthetic_classification(ob_dataset **out,
                                              const ob_synth_classification_spec *spec,
                                              ob_err *err);

/* An order-2 Markov source over the first `alphabet` symbols of
 * "abcdefghijklmnopqrstuvwxyz .ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789": every pair (a, b) has a
 * seeded favourite successor, taken with probability p_follow; otherwise the next symbol is
 * uniform over the alphabet. One chain of train_bytes + eval_bytes symbols; eval is its tail. */
typedef struct ob_synth_text_spec {
    size_t train_bytes, eval_bytes; /* train_bytes >= 2 * context */
    unsigned alphabet;              /* 2..64 */
    double p_follow;                /* [0, 1] */
    size_t context;                 /* T, >= 1 */
    uint64_t seed;
} ob_synth_text_spec;

/* Builds that dataset (spec borrowed). OB_ERR_INVALID_ARG for a spec out of range. On success
 * *out is a new dataset owned by the caller (ob_dataset_destroy). */
ob_status ob_dataset_synthetic_text(ob_dataset **out, const ob_synth_text_spec *spec, ob_err *err);

/* Entropy rate of that source in nats per byte: the cross-entropy a perfect model reaches
 * (the same for every context, so no stationary distribution is needed). */
double ob_synth_text_entropy(const ob_synth_text_spec *spec);

/* ---- Dataset accessors --------------------------------------------------------------------- */

/* The accessors take a non-NULL dataset; a split other than train or eval reads as empty. */

/* Frees the dataset. Accepts NULL. Every loader over it must be destroyed first. */
void ob_dataset_destroy(ob_dataset *ds);

ob_dataset_kind ob_dataset_get_kind(const ob_dataset *ds);

/* Where the data came from: a path, or "synthetic ...". Borrowed, lives as long as ds. */
const char *ob_dataset_source(const ob_dataset *ds);

/* Examples in a split: classification examples, or for text the windows of one pass,
 * (L - 1) / context (0 when L < context + 1). */
size_t ob_dataset_num_examples(const ob_dataset *ds, ob_split split);

/* Features per example (classification); 0 for text. */
size_t ob_dataset_input_dim(const ob_dataset *ds);

/* Number of classes (classification); 256, the byte vocabulary, for text. */
int ob_dataset_num_classes(const ob_dataset *ds);

/* Sequence length T (text); 0 for classification. */
size_t ob_dataset_context(const ob_dataset *ds);

/* Bytes in a text split; 0 for classification. */
size_t ob_dataset_text_length(const ob_dataset *ds, ob_split split);

/* The bytes of a text split (borrowed, ob_dataset_text_length of them; NULL when empty or for
 * classification), e.g. for prompts when sampling from a model. */
const uint8_t *ob_dataset_text(const ob_dataset *ds, ob_split split);

/* The feature normalisation of an IDX dataset: x = (pixel / 255 - *mean) / *std. For
 * OB_FEATURES_UNIT and synthetic data *mean = 0 and *std = 1. Either pointer may be NULL. */
void ob_dataset_feature_stats(const ob_dataset *ds, float *mean, float *std);

/* ---- Loaders ------------------------------------------------------------------------------- */

/* Creates a loader for rank `rank` of `world_size` (0 <= rank < world_size). On the train split
 * it samples endless shuffled epochs from `seed` (the same seed on every rank: the permutation is
 * shared, the slices differ) and needs batch_size * world_size <= the items per epoch. On the
 * eval split it is ob_loader_create_pass over the whole split (seed unused).
 * ds is borrowed and must outlive the loader. On success *out is owned by the caller. */
ob_status ob_loader_create(ob_loader **out, const ob_dataset *ds, ob_split split, int rank,
                           int world_size, size_t batch_size, uint64_t seed, ob_err *err);

/* Creates a pass loader over a split: items j = 0 .. N-1 in order. With M the split's
 * ob_dataset_num_examples, N = M, or max_examples when 0 < max_examples < M; item j is example
 * (or window) floor(j * M / N): all of them, or a fixed subset spread evenly over the split.
 * Sharded like sampling: step k gives rank r the items [k*W*B + r*B, k*W*B + (r+1)*B) that are
 * < N. The split must not be empty (OB_ERR_INVALID_ARG). ds is borrowed; *out is owned by the
 * caller. */
ob_status ob_loader_create_pass(ob_loader **out, const ob_dataset *ds, ob_split split, int rank,
                                int world_size, size_t batch_size, size_t max_examples,
                                ob_err *err);

/* Frees the loader. Accepts NULL. */
void ob_loader_destroy(ob_loader *ldr);

/* Fills *out with the next batch of this rank. Its pointers are borrowed from the loader and
 * stay valid until the next call on it. Classification fills x, y and input_dim; text fills
 * tokens and context. A sampling loader always returns batch_size examples. A pass loader
 * returns up to batch_size, and n == 0 once this rank's share of the pass is done; the call
 * after that starts the next pass. */
ob_status ob_loader_next(ob_loader *ldr, ob_batch *out, ob_err *err);

/* Where a loader stands, as plain data for checkpoints. */
typedef struct ob_loader_position {
    uint64_t epoch; /* completed epochs (sampling) or passes (pass) */
    /* Items of the current epoch's permutation (or pass) consumed by all ranks together: the
     * same on every rank, and meaningful at another world size. */
    uint64_t index;
    ob_rng rng; /* sampling: generator state at the start of the current epoch; pass: zero */
} ob_loader_position;

/* Copies the loader's position into *pos (caller-owned). */
void ob_loader_get_position(const ob_loader *ldr, ob_loader_position *pos);

/* Moves the loader to a position from ob_loader_get_position on a loader of the same dataset,
 * split and mode; later batches are then exactly those the saved loader would have produced
 * (at another world size: the rest of that epoch, re-sharded). OB_ERR_INVALID_ARG when index
 * exceeds the epoch, or a sampling position has an all-zero rng state; the loader is then
 * unchanged. */
ob_status ob_loader_set_position(ob_loader *ldr, const ob_loader_position *pos, ob_err *err);

/* Pass loaders: back to the start of the current pass (e.g. before each evaluation, so that an
 * earlier partial pass does not matter). Sampling loaders: back to the start of the current
 * epoch. */
void ob_loader_rewind(ob_loader *ldr);

/* Items per epoch or pass, all ranks together (sampling: before skipping the remainder). */
size_t ob_loader_epoch_size(const ob_loader *ldr);

/* Examples this rank receives per epoch (sampling: steps * batch_size) or per pass. */
size_t ob_loader_rank_examples(const ob_loader *ldr);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_DATA_H */
