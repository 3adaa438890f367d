/* optimizer.overlap where MPI runs below MPI_THREAD_SERIALIZED (plain MPI_Init): the trainer
 * falls back to exchanging the same buckets after the backward pass, says so in one notice, and
 * trains the same bits as overlap: false. Exits 77 (skipped) if this MPI grants SERIALIZED to
 * MPI_Init anyway. */
#include "onebit/jobspec.h"
#include "onebit/trainer.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPEC                                                                                       \
    "name: t\n"                                                                                    \
    "model: {type: mlp, hidden: [32, 16]}\n"                                                       \
    "data: {type: synthetic_classification, n_train: 256, n_eval: 32, input_dim: 24, "             \
    "num_classes: 3}\n"                                                                            \
    "batch_size: 8\nseed: 4\nsteps: 5\nlog_interval: 100\neval: {interval: 0, max_examples: 8}\n"  \
    "optimizer: {type: adam, bucket_mb: 0.001, overlap: %s}\n"

typedef struct notices {
    int count;
    char last[256];
} notices;

static void on_event(const ob_train_event *ev, void *user)
{
    notices *n = user;
    if (ev->kind != OB_EVENT_NOTICE) return;
    n->count++;
    snprintf(n->last, sizeof n->last, "%s", ev->message ? ev->message : "");
}

/* Trains SPEC with overlap on or off; returns the final parameters (malloc'd) or NULL. */
static float *train(ob_comm *comm, int overlap, notices *n, int *active, size_t *d)
{
    char text[1024];
    snprintf(text, sizeof text, SPEC, overlap ? "true" : "false");
    ob_jobspec spec;
    ob_err err = {0};
    ob_trainer *t = NULL;
    ob_train_summary sum;
    if (ob_jobspec_parse(&spec, text, strlen(text), OB_SPEC_YAML, &err) != OB_OK ||
        ob_trainer_create(&t, &spec, comm, &err) != OB_OK ||
        ob_trainer_run(t, on_event, n, &sum, &err) != OB_OK) {
        fprintf(stderr, "train (overlap %d): %s\n", overlap, err.msg);
        ob_trainer_destroy(t);
        return NULL;
    }
    *d = ob_trainer_num_params(t);
    *active = ob_optim_overlap_active(ob_trainer_optim(t));
    float *x = malloc(*d * sizeof *x);
    if (x) memcpy(x, ob_trainer_params(t), *d * sizeof *x);
    ob_trainer_destroy(t);
    return x;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int level = MPI_THREAD_SINGLE, rank = 0;
    MPI_Query_thread(&level);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (level >= MPI_THREAD_SERIALIZED) {
        if (rank == 0) printf("skipped: MPI_Init granted MPI_THREAD_SERIALIZED\n");
        MPI_Finalize();
        return 77;
    }
    ob_comm *comm = NULL;
    int failures = 0;
    if (ob_comm_create_mpi(&comm, NULL) != OB_OK) {
        MPI_Finalize();
        return 1;
    }
    notices off = {0}, on = {0};
    int active_off = -1, active_on = -1;
    size_t d_off = 0, d_on = 0;
    float *a = train(comm, 0, &off, &active_off, &d_off);
    float *b = train(comm, 1, &on, &active_on, &d_on);
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "[rank %d] check failed: %s: ", rank, #cond);                          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)
    CHECK(!ob_comm_any_thread(comm), "the communicator claims SERIALIZED");
    CHECK(a && b && d_off == d_on && memcmp(a, b, d_on * sizeof *a) == 0,
          "the fallback trains other bits than overlap: false");
    CHECK(active_off == 0 && active_on == 0, "overlap active: %d / %d", active_off, active_on);
    CHECK(off.count == 0, "%d notices without overlap", off.count);
    CHECK(on.count == 1 && strstr(on.last, "optimizer.overlap: MPI runs below "
                                           "MPI_THREAD_SERIALIZED") != NULL,
          "%d notices, last \"%s\"", on.count, on.last);
    free(a);
    free(b);
    ob_comm_destroy(comm);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s\n", all ? "FAILED" : "passed");
    MPI_Finalize();
    return all ? 1 : 0;
}
