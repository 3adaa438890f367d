/* Checkpoint write speed against the disk's: a whole job's checkpoint written by every rank at
 * once, next to a plain sequential write of the same bytes to the same directory, alternated in
 * one run. Run under mpirun:
 *
 *   mpirun -np 4 bench_checkpoint_write [--params D] [--block B] [--reps R] [--keep K]
 *                                       [--dir DIR]
 *
 * The state is a 1-bit Adam job's of D parameters (default 100M) over N ranks: rank 0 writes
 * state.h5 (parameters, m, v: 3 D floats) and every rank its rank file (its worker error, the
 * padded size, and its server error, a chunk), as the trainer does, through the same calls:
 * ob_ckpt_prepare, ob_optim_ckpt_write_files on every rank at once, agreement, ob_ckpt_commit.
 * The plain write is rank 0 writing the same number of bytes from the same arrays, in 4 MiB
 * pieces, into one new file, then fsync: the disk's sequential write speed as this machine
 * gives it at that moment. The two alternate (ABBA) over R repetitions, so that a disk whose
 * speed drifts during the run weighs on both. Each repetition's checkpoint is removed after it
 * is timed, except with --keep K, where the retention pass runs after each commit as in a job
 * (ob_ckpt_prune_written, keeping K, with the record of the checkpoints this run committed), and
 * is timed apart.
 *
 * It prints every repetition, the medians and the checkpoint's speed as a share of the plain
 * write's (plain seconds / checkpoint seconds; 1.0 is the disk's speed). */
#include "onebit/checkpoint.h"
#include "onebit/optim_ckpt.h"

#include "bench_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_REPS 64

typedef struct opts {
    uint64_t d, block;
    int reps, keep;
    const char *dir;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    o->d = 100000000;
    o->block = 2048;
    o->reps = 6;
    o->keep = 0;
    o->dir = "bench-checkpoint-write";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return -1;
        if (!strcmp(a, "--params"))
            o->d = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--block"))
            o->block = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--reps"))
            o->reps = atoi(v);
        else if (!strcmp(a, "--keep"))
            o->keep = atoi(v);
        else if (!strcmp(a, "--dir"))
            o->dir = v;
        else
            return -1;
        i++;
    }
    if (o->d < 1 || o->d > ((uint64_t)1 << 32) || o->block < 1 || o->block > ((uint64_t)1 << 24) ||
        o->reps < 1 || o->reps > MAX_REPS || o->keep < 0 || o->keep > 16)
        return -1;
    return 0;
}

static float *filled(size_t n, uint64_t seed)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench_checkpoint_write: out of memory (%zu floats)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (float)((double)(x >> 40) / (double)(1 << 24) - 0.5) * 1e-2f;
    }
    return p;
}

/* Removes dir and the files in it (a checkpoint directory holds no subdirectories). */
static void remove_dir(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *e;
    char path[4300];
    while ((e = readdir(dp))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(dp);
    rmdir(dir);
}

/* Rank 0 writes `bytes` from the arrays (cycled) into a new file of dir in 4 MiB pieces and
 * fsyncs it. */
static void plain_write(const char *dir, uint64_t bytes, float *const *arr, const size_t *len,
                        int narr)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/plain-write.bin", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        fprintf(stderr, "bench_checkpoint_write: %s: %s\n", path, strerror(errno));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const size_t piece = (size_t)4 << 20;
    int k = 0;
    size_t off = 0;
    for (uint64_t left = bytes; left > 0;) {
        size_t avail = len[k] * sizeof(float) - off;
        size_t n = piece < avail ? piece : avail;
        if (n > left) n = (size_t)left;
        if (write(fd, (const char *)arr[k] + off, n) != (ssize_t)n) {
            fprintf(stderr, "bench_checkpoint_write: %s: %s\n", path, strerror(errno));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        left -= n;
        off += n;
        if (off == len[k] * sizeof(float)) off = 0, k = (k + 1) % narr;
    }
    if (fsync(fd) != 0 || close(fd) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
    unlink(path);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    opts o;
    if (parse(argc, argv, &o) != 0) {
        if (rank == 0)
            fprintf(stderr, "usage: bench_checkpoint_write [--params D] [--block B] [--reps R] "
                            "[--keep K] [--dir DIR]\n");
        MPI_Finalize();
        return 2;
    }
    uint64_t nb = (uint64_t)n * o.block;
    uint64_t D = (o.d + nb - 1) / nb * nb, C = D / (uint64_t)n;
    uint64_t bytes = (3 * o.d + (uint64_t)n * (D + C)) * sizeof(float);

    float *params = NULL, *m = NULL, *v = NULL;
    if (rank == 0) {
        params = filled(o.d, 1);
        m = filled(o.d, 2);
        v = filled(o.d, 3);
        for (uint64_t i = 0; i < o.d; i++)
            v[i] = v[i] * v[i];
    }
    float *we = filled(D, 10 + (uint64_t)rank), *se = filled(C, 100 + (uint64_t)rank);

    ob_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.format_version = OB_CKPT_FORMAT_VERSION;
    meta.phase = 1;
    meta.freeze_step = 1;
    meta.world_size = n;
    meta.num_params = o.d;
    meta.padded_size = D;
    meta.chunk_size = C;
    meta.block_size = o.block;
    meta.last_ratio = meta.train_loss = NAN;
    meta.loss_ema = meta.loss_at_freeze = meta.loss_best = NAN;
    meta.refit_scale = 1.0;
    meta.ranks_per_node = 1;
    const char *spec = "{\"name\":\"bench_checkpoint_write\"}";
    ob_ckpt_arrays a = {params, m, v, NULL, 0, NULL, 0};

    if (rank == 0 && mkdir(o.dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_checkpoint_write: %s: %s\n", o.dir, strerror(errno));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0)
        printf("checkpoint of %.1f MB: %" PRIu64 " parameters, 1-bit Adam state of %d ranks "
               "(state.h5 %.1f MB, each rank file %.1f MB), %d repetitions\n\n"
               "%-4s %14s %14s %12s %10s%s\n",
               (double)bytes / 1e6, o.d, n, 12e-6 * (double)o.d, 4e-6 * (double)(D + C), o.reps,
               "rep", "checkpoint s", "plain write s", "share", "slowest",
               o.keep ? "   prune s" : "");

    ob_ckpt_written *written = NULL;
    if (rank == 0 && ob_ckpt_written_create(&written, NULL) != OB_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    double ck[MAX_REPS], pl[MAX_REPS], share[MAX_REPS], pr[MAX_REPS], slow[MAX_REPS];
    int failed = 0;
    for (int r = 0; r < o.reps && !failed; r++) {
        long step = 1000 + r;
        meta.step = step;
        for (int half = 0; half < 2; half++) {
            int plain_now = (half == 0) == (r % 2 == 1); /* ABBA: ckpt, plain, plain, ckpt, ... */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = bench_now();
            if (plain_now) {
                if (rank == 0) {
                    float *arr[5] = {params, m, v, we, se};
                    size_t len[5] = {o.d, o.d, o.d, D, C};
                    plain_write(o.dir, bytes, arr, len, 5);
                }
                MPI_Barrier(MPI_COMM_WORLD);
                pl[r] = bench_now() - t0;
                continue;
            }
            char dir[OB_CKPT_PATH_LEN];
            ob_err err = {0};
            int bad = rank == 0 ? ob_ckpt_prepare(o.dir, step, dir, &err) != OB_OK
                                : ob_ckpt_step_dir(dir, o.dir, step, 1, &err) != OB_OK;
            MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            double tw = bench_now();
            if (!bad)
                bad = ob_optim_ckpt_write_files(dir, &meta, &a, spec, rank, we, se, NULL, 0, NULL,
                                                &err) != OB_OK;
            double mine = bench_now() - tw;
            MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            MPI_Reduce(rank == 0 ? MPI_IN_PLACE : &mine, &mine, 1, MPI_DOUBLE, MPI_MAX, 0,
                       MPI_COMM_WORLD);
            if (rank == 0 && !bad && ob_ckpt_commit(o.dir, step, &err) != OB_OK) bad = 1;
            if (rank == 0 && !bad && ob_ckpt_written_add(written, o.dir, step, &err) != OB_OK)
                bad = 1;
            MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
            ck[r] = bench_now() - t0;
            slow[r] = mine;
            if (bad) {
                if (err.code != OB_OK) fprintf(stderr, "rank %d: %s\n", rank, err.msg);
                failed = 1;
                break;
            }
            pr[r] = 0;
            if (rank == 0) {
                char done[OB_CKPT_PATH_LEN];
                ob_ckpt_step_dir(done, o.dir, step, 0, NULL);
                if (o.keep) {
                    double tp = bench_now();
                    if (ob_ckpt_prune_written(o.dir, o.keep, written, NULL, &err) != OB_OK)
                        fprintf(stderr, "prune: %s\n", err.msg);
                    pr[r] = bench_now() - tp;
                } else {
                    remove_dir(done);
                }
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        if (failed) break;
        share[r] = pl[r] / ck[r];
        if (rank == 0) {
            printf("%-4d %14.3f %14.3f %12.2f %10.3f", r + 1, ck[r], pl[r], share[r], slow[r]);
            if (o.keep) printf(" %10.3f", pr[r]);
            printf("\n");
            fflush(stdout);
        }
    }
    if (rank == 0 && !failed) {
        double mb = (double)bytes / 1e6;
        double c = bench_median(ck, o.reps), p = bench_median(pl, o.reps);
        double s = bench_median(share, o.reps);
        printf("\nmedian: checkpoint %.3f s (%.0f MB/s), plain write %.3f s (%.0f MB/s)\n", c,
               mb / c, p, mb / p);
        printf("checkpoint speed / disk speed: %.2f (median of the repetitions' ratios), "
               "%.2f (ratio of the medians)\n",
               s, p / c);
        if (o.keep)
            printf("retention pass (keep %d): median %.3f s\n", o.keep, bench_median(pr, o.reps));
    }
    if (rank == 0)
        for (int r = 0; r < o.reps; r++) {
            char done[OB_CKPT_PATH_LEN];
            if (ob_ckpt_step_dir(done, o.dir, 1000 + r, 0, NULL) == OB_OK) remove_dir(done);
        }
    ob_ckpt_written_destroy(written);
    free(params);
    free(m);
    free(v);
    free(we);
    free(se);
    MPI_Finalize();
    return failed ? 1 : 0;
}
