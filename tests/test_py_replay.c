/* The other half of the Python front end's parity test (tests/python/parity_record.py): the
 * engine's optimizer, built here from its own defaults and the hyper-parameters the recording
 * used, is fed the gradients onebit.torch.OnebitAdam (or Adam) received on each rank, with the
 * same learning rates, from the same initial parameters. Its parameters, m, v, both error
 * buffers and freeze step must equal the recording's bit for bit: the front end adds nothing to
 * and loses nothing of the engine's arithmetic (a wrong hyper-parameter, a stale or misplaced
 * gradient, a missed broadcast or learning rate would all show).
 *
 *   mpirun -np N test_py_replay DIR onebit_adam|adam STEPS */
#include "mpi_harness.h"

#include "onebit/optim.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static int read_file(const char *dir, const char *name, void *buf, size_t bytes)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t got = fread(buf, 1, bytes, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    return got == bytes && !extra ? 0 : -1;
}

/* The recording's settings (parity_record.py), on the engine's defaults. */
static void config(ob_optim_config *c, const char *kind, long steps)
{
    ob_optim_config_default(c, strcmp(kind, "adam") ? OB_OPTIM_ONEBIT_ADAM : OB_OPTIM_ADAM);
    c->beta1 = 0.9;
    c->beta2 = 0.99;
    c->eps = 1e-7;
    c->weight_decay = 0.01;
    if (c->kind != OB_OPTIM_ONEBIT_ADAM) return;
    c->gradient_exchange = OB_EXCHANGE_FP8; /* a job spec's default for onebit_adam */
    c->block_size = 64;
    /* A job spec's freeze_max_fraction (0.15 of the steps, not before two lags). */
    long lag = ob_optim_freeze_lag(c->beta2), at = (long)ceil(0.15 * (double)steps);
    c->freeze_max_step = at > 2 * lag ? at : 2 * lag;
}

static long mismatches(const float *a, const float *b, size_t n, size_t *first)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && bad++ == 0) *first = i;
    return bad;
}

static const char *g_dir, *g_kind;
static long g_steps;

static void replay(mpi_harness *h)
{
    const char *dir = g_dir;
    long steps = g_steps, d = 0, rsteps = 0, freeze = 0, D = 0, C = 0;
    char meta[4200];
    snprintf(meta, sizeof meta, "%s/meta.txt", dir);
    FILE *mf = fopen(meta, "r");
    MH_CHECK(h, mf && fscanf(mf, "%ld %ld %ld %ld %ld", &d, &rsteps, &freeze, &D, &C) == 5,
             "reading %s", meta);
    if (mf) fclose(mf);
    MH_CHECK(h, rsteps == steps && d > 0, "meta: %ld steps of %ld parameters", rsteps, d);
    if (h->failures) return;

    size_t n = (size_t)d;
    float *x = malloc(n * 4), *g = malloc(n * steps * 4), *want = malloc((3 * n + D + C) * 4);
    double *lrs = malloc(steps * sizeof *lrs);
    char name[64];
    snprintf(name, sizeof name, "rank-%d.grads", h->rank);
    MH_CHECK(h, read_file(dir, "init.f32", x, n * 4) == 0, "init.f32");
    MH_CHECK(h, read_file(dir, name, g, n * steps * 4) == 0, "%s", name);
    MH_CHECK(h, read_file(dir, "lrs.f64", lrs, steps * sizeof *lrs) == 0, "lrs.f64");
    snprintf(name, sizeof name, "rank-%d.final", h->rank);
    MH_CHECK(h, read_file(dir, name, want, (3 * n + D + C) * 4) == 0, "%s", name);
    long failed = h->failures; /* every rank goes on only if every rank read its files */
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (failed) {
        free(x), free(g), free(want), free(lrs);
        return;
    }

    ob_comm *comm = NULL;
    ob_optim *opt = NULL;
    ob_optim_config cfg;
    config(&cfg, g_kind, steps);
    ob_err err = {0};
    MH_CHECK(h, ob_comm_create_mpi(&comm, &err) == OB_OK, "%s", err.msg);
    MH_CHECK(h, ob_optim_create(&opt, &cfg, comm, x, n, &err) == OB_OK, "%s", err.msg);
    for (long s = 0; s < steps && !h->failures; s++)
        MH_CHECK(h, ob_optim_step(opt, g + (size_t)s * n, (float)lrs[s], &err) == OB_OK,
                 "step %ld: %s", s + 1, err.msg);
    ob_optim_state st;
    ob_optim_stats stats;
    ob_optim_get_state(opt, &st);
    ob_optim_get_stats(opt, &stats);
    MH_CHECK(h, stats.freeze_step == freeze, "freeze at %ld here, %ld in the recording",
             stats.freeze_step, freeze);
    MH_CHECK(h, (long)st.padded_size == D && (long)st.chunk_size == C,
             "error buffers D %zu C %zu here, %ld %ld recorded", st.padded_size, st.chunk_size, D,
             C);
    struct {
        const char *what;
        const float *have, *want;
        size_t n;
    } arrays[] = {{"parameters", x, want, n},
                  {"m", st.exp_avg, want + n, n},
                  {"v", st.exp_avg_sq, want + 2 * n, n},
                  {"worker error", st.worker_error, want + 3 * n, (size_t)D},
                  {"server error", st.server_error, want + 3 * n + D, (size_t)C}};
    for (size_t k = 0; k < sizeof arrays / sizeof arrays[0] && !h->failures; k++) {
        if (arrays[k].n == 0) continue;
        size_t first = 0;
        long bad = mismatches(arrays[k].have, arrays[k].want, arrays[k].n, &first);
        MH_CHECK(h, bad == 0, "%s: %ld of %zu differ, first at %zu (%.9g here, %.9g recorded)",
                 arrays[k].what, bad, arrays[k].n, first, bad ? arrays[k].have[first] : 0.0,
                 bad ? arrays[k].want[first] : 0.0);
    }
    if (h->rank == 0 && !h->failures)
        printf("%s: %ld steps, %zu parameters, freeze at %ld: identical on %d ranks\n", g_kind,
               steps, n, freeze, h->size);
    ob_optim_destroy(opt);
    ob_comm_destroy(comm);
    free(x);
    free(g);
    free(want);
    free(lrs);
}

int main(int argc, char **argv)
{
    mpi_harness h;
    mpi_harness_init(&h, &argc, &argv);
    if (argc != 4) {
        fprintf(stderr, "usage: test_py_replay DIR onebit_adam|adam STEPS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    g_dir = argv[1];
    g_kind = argv[2];
    g_steps = atol(argv[3]);
    MH_RUN(&h, replay);
    return mpi_harness_finish(&h);
}
