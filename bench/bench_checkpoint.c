/* Checkpoint cost: how long training stands still per checkpoint, synchronous vs async, and
 * how fast the files are written next to a plain sequential write of the same bytes (write()
 * in 4 MiB pieces + fsync) to the same directory, all in one run.
 *
 *   bench_checkpoint [--hidden H] [--checkpoints N] [--interval K] [--dir DIR]
 *
 * One process trains a 1-bit Adam MLP on synthetic data (2 hidden layers of H units: about
 * H^2 + 267 H parameters) for N * K steps three times: without checkpoints (the baseline step time),
 * with a synchronous checkpoint every K steps, and with async ones. The figures are medians
 * over the checkpoints of a run. */
#include "bench_util.h"
#include "onebit/comm.h"
#include "onebit/jobspec.h"
#include "onebit/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CKPT 64

typedef struct record {
    int n;
    double stall[MAX_CKPT], write[MAX_CKPT];
    uint64_t bytes;
    int failed;
} record;

static void on_event(const ob_train_event *ev, void *user)
{
    record *r = user;
    if (ev->kind != OB_EVENT_CHECKPOINT) return;
    if (!ev->ckpt_ok) {
        fprintf(stderr, "bench_checkpoint: checkpoint failed: %s\n", ev->message);
        r->failed = 1;
        return;
    }
    if (r->n < MAX_CKPT) {
        r->stall[r->n] = ev->stall_seconds;
        r->write[r->n] = ev->write_seconds;
        r->n++;
    }
    r->bytes = ev->ckpt_bytes;
}

/* Trains once; returns the wall time, fills *rec. mode: 0 none, 1 sync, 2 async. */
static double train(int hidden, int steps, int interval, const char *dir, int mode, record *rec)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "name: bench\n"
             "model: {type: mlp, hidden: [%d, %d], activation: tanh}\n"
             "data: {type: synthetic_classification, n_train: 2048, n_eval: 64, input_dim: 256,"
             " num_classes: 10}\n"
             "optimizer: {type: onebit_adam, freeze_step: 10}\nlr: {peak: 1e-4}\n"
             "batch_size: 8\nsteps: %d\nlog_interval: 1000000\n"
             "checkpoint: {interval: %d, keep: 2, async: %s}\n",
             hidden, hidden, steps, mode ? interval : 0, mode == 2 ? "true" : "false");
    ob_err err = {0};
    ob_jobspec spec;
    ob_comm *comm = NULL;
    ob_trainer *t = NULL;
    memset(rec, 0, sizeof *rec);
    if (ob_jobspec_parse(&spec, yaml, strlen(yaml), OB_SPEC_YAML, &err) != OB_OK ||
        ob_comm_create_self(&comm, &err) != OB_OK ||
        ob_trainer_create(&t, &spec, comm, &err) != OB_OK ||
        (mode && ob_trainer_enable_checkpoints(t, dir, &err) != OB_OK)) {
        fprintf(stderr, "bench_checkpoint: setup: %s\n", err.msg);
        exit(1);
    }
    ob_train_summary sum;
    double t0 = bench_now();
    if (ob_trainer_run(t, on_event, rec, &sum, &err) != OB_OK) {
        fprintf(stderr, "bench_checkpoint: training: %s\n", err.msg);
        exit(1);
    }
    double wall = bench_now() - t0;
    ob_trainer_destroy(t);
    ob_comm_destroy(comm);
    return wall;
}

/* Writes `bytes` to a file in dir in 4 MiB pieces, fsyncs, removes it; returns seconds. */
static double plain_write(const char *dir, uint64_t bytes)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/plain-write.bin", dir);
    size_t piece = (size_t)4 << 20;
    char *buf = malloc(piece);
    if (!buf) exit(1);
    memset(buf, 0x3c, piece);
    double t0 = bench_now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "bench_checkpoint: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    for (uint64_t left = bytes; left > 0;) {
        size_t n = left < piece ? (size_t)left : piece;
        if (write(fd, buf, n) != (ssize_t)n) exit(1);
        left -= n;
    }
    fsync(fd);
    close(fd);
    double s = bench_now() - t0;
    unlink(path);
    free(buf);
    return s;
}

int main(int argc, char **argv)
{
    int hidden = 1024, checkpoints = 6, interval = 20;
    const char *dir = "bench-checkpoint";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hidden") && i + 1 < argc)
            hidden = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--checkpoints") && i + 1 < argc)
            checkpoints = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--interval") && i + 1 < argc)
            interval = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else {
            fprintf(stderr, "usage: bench_checkpoint [--hidden H] [--checkpoints N] "
                            "[--interval K] [--dir DIR]\n");
            return 2;
        }
    }
    if (hidden < 8 || checkpoints < 1 || checkpoints > MAX_CKPT - 1 || interval < 1) {
        fprintf(stderr, "bench_checkpoint: bad sizes\n");
        return 2;
    }
    mkdir(dir, 0755);
    int steps = checkpoints * interval;

    record none, sync, async;
    double w_none = train(hidden, steps, interval, dir, 0, &none);
    double w_sync = train(hidden, steps, interval, dir, 1, &sync);
    double w_async = train(hidden, steps, interval, dir, 2, &async);
    if (sync.failed || async.failed || sync.n == 0 || async.n == 0) return 1;
    double plain[5];
    for (int i = 0; i < 5; i++)
        plain[i] = plain_write(dir, sync.bytes);
    double plain_s = bench_median(plain, 5);

    double mb = (double)sync.bytes / 1e6, step_ms = 1e3 * w_none / steps;
    /* The last checkpoint of a run is the final one, always synchronous: leave it out of the
     * async figures. */
    int na = async.n > 1 ? async.n - 1 : async.n;
    double s_stall = bench_median(sync.stall, sync.n), s_write = bench_median(sync.write, sync.n);
    double a_stall = bench_median(async.stall, na), a_write = bench_median(async.write, na);
    printf("checkpoint of %.1f MB (MLP with 2 x %d hidden units, 1-bit Adam state), %d per run, "
           "1 rank\n",
           mb, hidden, sync.n);
    printf("training step without checkpoints: %.2f ms\n\n", step_ms);
    printf("%-22s %12s %12s %12s %14s\n", "", "stall/ckpt", "write/ckpt", "write MB/s", "run time");
    printf("%-22s %12s %12s %12s %11.2f s\n", "no checkpoints", "-", "-", "-", w_none);
    printf("%-22s %9.1f ms %9.1f ms %12.0f %11.2f s\n", "synchronous", 1e3 * s_stall, 1e3 * s_write,
           mb / s_write, w_sync);
    printf("%-22s %9.1f ms %9.1f ms %12.0f %11.2f s\n", "async", 1e3 * a_stall, 1e3 * a_write,
           mb / a_write, w_async);
    printf("%-22s %12s %9.1f ms %12.0f\n\n", "plain write + fsync", "-", 1e3 * plain_s,
           mb / plain_s);
    printf("async stall / sync stall:           %.3f\n", a_stall / s_stall);
    printf("checkpoint write / plain write:     %.2f (HDF5 + checksums vs raw bytes)\n",
           s_write / plain_s);
    printf("stall in steps: sync %.1f, async %.1f\n", s_stall * 1e3 / step_ms,
           a_stall * 1e3 / step_ms);
    return 0;
}
