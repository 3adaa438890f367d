/* A tiny harness for tests that run on several MPI ranks.
 *
 * Checks never abort: a failing rank keeps taking part in the collectives (so the others do
 * not hang), records the failure and prints it with its rank. mpi_harness_finish() sums the
 * failures over all ranks; every rank then exits non-zero if any rank failed, and rank 0
 * prints the closing "N passed, N failed" line. */
#ifndef ONEBIT_TEST_MPI_HARNESS_H
#define ONEBIT_TEST_MPI_HARNESS_H

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct mpi_harness {
    int rank, size;
    long checks, failures;
    long cases_passed, cases_failed;
    long case_failures_at_start;
} mpi_harness;

static inline void mpi_harness_init(mpi_harness *h, int *argc, char ***argv)
{
    /* As the worker: a communication thread may run collectives (optimizer.overlap). */
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &h->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &h->size);
    h->checks = h->failures = h->cases_passed = h->cases_failed = 0;
    h->case_failures_at_start = 0;
}

#define MH_CHECK(h, cond, ...)                                                                     \
    do {                                                                                           \
        (h)->checks++;                                                                             \
        if (!(cond)) {                                                                             \
            (h)->failures++;                                                                       \
            if ((h)->failures <= 20) {                                                             \
                fprintf(stderr, "[rank %d] %s:%d: check failed: %s: ", (h)->rank, __FILE__,        \
                        __LINE__, #cond);                                                          \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fputc('\n', stderr);                                                               \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* |a - b| <= rel * max(|a|, |b|) + abs_floor */
static inline int mh_close(double a, double b, double rel, double abs_floor)
{
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + abs_floor;
}

/* Runs one named case on every rank; a case passes when no rank failed a check in it. */
#define MH_RUN(h, fn)                                                                              \
    do {                                                                                           \
        long before_ = (h)->failures;                                                              \
        fn(h);                                                                                     \
        long mine_ = (h)->failures - before_, all_ = 0;                                            \
        MPI_Allreduce(&mine_, &all_, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);                        \
        if (all_ == 0) {                                                                           \
            (h)->cases_passed++;                                                                   \
            if ((h)->rank == 0) printf("[ PASSED ] %s (np=%d)\n", #fn, (h)->size);                 \
        } else {                                                                                   \
            (h)->cases_failed++;                                                                   \
            if ((h)->rank == 0) printf("[ FAILED ] %s (np=%d)\n", #fn, (h)->size);                 \
        }                                                                                          \
        fflush(stdout);                                                                            \
    } while (0)

static inline int mpi_harness_finish(mpi_harness *h)
{
    if (h->rank == 0) {
        printf("%ld passed, %ld failed\n", h->cases_passed, h->cases_failed);
        fflush(stdout);
    }
    int failed = h->cases_failed > 0;
    MPI_Finalize();
    return failed ? 1 : 0;
}

#endif /* ONEBIT_TEST_MPI_HARNESS_H */
