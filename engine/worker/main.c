/* onebit-worker: trains one job spec data-parallel, one process per MPI rank.
 *
 *   mpirun -np 4 onebit-worker --spec job.yaml
 *
 * Rank 0 prints progress on stdout, one JSON object per line (--format json, the default, read
 * by the coordinator) or as aligned text (--format text); errors go to stderr. Exit status: 0
 * success, 1 training failure, 2 bad command line or job spec (nothing started). */
#include "onebit/comm.h"
#include "onebit/jobspec.h"
#include "onebit/trainer.h"

#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { FORMAT_JSON, FORMAT_TEXT } out_format;

typedef struct worker_opts {
    const char *spec_path;
    out_format format;
    int check_only;
} worker_opts;

typedef struct printer {
    out_format format;
    int rank;
} printer;

static void usage(FILE *f)
{
    fprintf(f, "usage: onebit-worker --spec FILE [--format json|text] [--check]\n"
               "  --spec FILE     job spec, JSON or YAML (see examples/)\n"
               "  --format F      progress as JSON lines (default) or text\n"
               "  --check         validate the spec, print it with defaults filled, and exit\n");
}

/* Returns 0 on success, 2 on a bad command line (message printed by rank 0). */
static int parse_args(int argc, char **argv, worker_opts *o, int rank)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--spec") && i + 1 < argc) {
            o->spec_path = argv[++i];
        } else if (!strcmp(a, "--format") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "json"))
                o->format = FORMAT_JSON;
            else if (!strcmp(v, "text"))
                o->format = FORMAT_TEXT;
            else {
                if (rank == 0)
                    fprintf(stderr, "onebit-worker: --format: expected json or text, got '%s'\n",
                            v);
                return 2;
            }
        } else if (!strcmp(a, "--check")) {
            o->check_only = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (rank == 0) usage(stdout);
            return 1;
        } else {
            if (rank == 0) {
                fprintf(stderr, "onebit-worker: unknown or incomplete argument '%s'\n", a);
                usage(stderr);
            }
            return 2;
        }
    }
    if (!o->spec_path) {
        if (rank == 0) {
            fprintf(stderr, "onebit-worker: --spec FILE is required\n");
            usage(stderr);
        }
        return 2;
    }
    return 0;
}

/* A number, or null when it is not finite (JSON has no NaN). */
static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static void emit_json(json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        free(s);
    }
    json_decref(obj);
}

static void on_event(const ob_train_event *ev, void *user)
{
    const printer *p = user;
    if (p->rank != 0) return;
    const char *phase = ob_phase_name(ev->phase);
    if (p->format == FORMAT_TEXT) {
        switch (ev->kind) {
        case OB_EVENT_STEP:
            printf("step %6ld/%-6ld %-11s loss %8.4f  lr %.3e  %9.0f samples/s  sent %9.3f MB"
                   "  (%7.1f KB/step)",
                   ev->step, ev->total_steps, phase, ev->loss, ev->lr, ev->samples_per_s,
                   (double)ev->bytes_sent / 1e6, (double)ev->bytes_step / 1e3);
            if (ev->phase == OB_PHASE_WARMUP && isfinite(ev->freeze_ratio))
                printf("  v-ratio %.4f", ev->freeze_ratio);
            printf("\n");
            break;
        case OB_EVENT_EVAL:
            if (ev->is_text)
                printf(
                    "eval @ %ld: loss %.4f nats/byte = %.4f bits/byte, accuracy %.4f (%zu bytes)\n",
                    ev->step, ev->eval_loss, ev->eval_loss / log(2.0), ev->eval_accuracy,
                    ev->eval_count);
            else
                printf("eval @ %ld: loss %.4f, accuracy %.4f (%zu examples)\n", ev->step,
                       ev->eval_loss, ev->eval_accuracy, ev->eval_count);
            break;
        case OB_EVENT_FREEZE:
            printf("freeze @ %ld: variance frozen, compression phase begins (v-ratio %.4f)\n",
                   ev->step, ev->freeze_ratio);
            break;
        }
        fflush(stdout);
        return;
    }
    json_t *o = json_object();
    switch (ev->kind) {
    case OB_EVENT_STEP:
        json_object_set_new(o, "event", json_string("step"));
        json_object_set_new(o, "step", json_integer(ev->step));
        json_object_set_new(o, "phase", json_string(phase));
        json_object_set_new(o, "loss", num(ev->loss));
        json_object_set_new(o, "lr", num(ev->lr));
        json_object_set_new(o, "samples_per_s", num(ev->samples_per_s));
        json_object_set_new(o, "bytes_sent", json_integer((json_int_t)ev->bytes_sent));
        json_object_set_new(o, "bytes_step", json_integer((json_int_t)ev->bytes_step));
        json_object_set_new(o, "freeze_ratio", num(ev->freeze_ratio));
        break;
    case OB_EVENT_EVAL:
        json_object_set_new(o, "event", json_string("eval"));
        json_object_set_new(o, "step", json_integer(ev->step));
        json_object_set_new(o, "eval_loss", num(ev->eval_loss));
        json_object_set_new(o, "eval_accuracy", num(ev->eval_accuracy));
        if (ev->is_text)
            json_object_set_new(o, "eval_bits_per_byte", num(ev->eval_loss / log(2.0)));
        json_object_set_new(o, "eval_count", json_integer((json_int_t)ev->eval_count));
        break;
    case OB_EVENT_FREEZE:
        json_object_set_new(o, "event", json_string("freeze"));
        json_object_set_new(o, "step", json_integer(ev->step));
        json_object_set_new(o, "freeze_ratio", num(ev->freeze_ratio));
        break;
    }
    emit_json(o);
}

static void print_start(const printer *p, const ob_jobspec *spec, const char *spec_json, int world,
                        size_t params)
{
    if (p->rank != 0) return;
    if (p->format == FORMAT_TEXT) {
        printf("onebit-worker: job '%s': %s on %s, %s (%s), %d ranks x batch %zu, %ld steps, "
               "%zu parameters\n",
               spec->name, ob_model_kind_name(spec->model.kind), ob_data_kind_name(spec->data.kind),
               ob_optim_kind_name(spec->optim.kind),
               spec->optim.kind == OB_OPTIM_ONEBIT_ADAM ? ob_onebit_mode_name(spec->optim.mode)
                                                        : "fp32",
               world, spec->batch_size, spec->steps, params);
        fflush(stdout);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string("start"));
    json_object_set_new(o, "world_size", json_integer(world));
    json_object_set_new(o, "num_params", json_integer((json_int_t)params));
    json_t *sj = json_loads(spec_json, 0, NULL);
    json_object_set_new(o, "spec", sj ? sj : json_null());
    emit_json(o);
}

static void print_summary(const printer *p, const ob_train_summary *s, int is_text)
{
    if (p->rank != 0) return;
    if (p->format == FORMAT_TEXT) {
        printf("done: %ld steps in %.1f s (%.0f samples/s); final train loss %.4f; eval loss %.4f",
               s->steps, s->wall_seconds, s->samples_per_s, s->final_train_loss, s->eval_loss);
        if (is_text) printf(" (%.4f bits/byte)", s->eval_loss / log(2.0));
        printf(", accuracy %.4f\n", s->eval_accuracy);
        printf("      freeze step %ld; bytes sent by rank 0: %.3f MB (warmup %.3f MB, "
               "compression %.3f MB)\n",
               s->freeze_step, (double)s->bytes_sent / 1e6, (double)s->bytes_warmup / 1e6,
               (double)s->bytes_compression / 1e6);
        fflush(stdout);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string("summary"));
    json_object_set_new(o, "steps", json_integer(s->steps));
    json_object_set_new(o, "freeze_step",
                        s->freeze_step >= 0 ? json_integer(s->freeze_step) : json_null());
    json_object_set_new(o, "final_train_loss", num(s->final_train_loss));
    json_object_set_new(o, "eval_loss", num(s->eval_loss));
    json_object_set_new(o, "eval_accuracy", num(s->eval_accuracy));
    if (is_text) json_object_set_new(o, "eval_bits_per_byte", num(s->eval_loss / log(2.0)));
    json_object_set_new(o, "bytes_sent", json_integer((json_int_t)s->bytes_sent));
    json_object_set_new(o, "bytes_warmup", json_integer((json_int_t)s->bytes_warmup));
    json_object_set_new(o, "bytes_compression", json_integer((json_int_t)s->bytes_compression));
    json_object_set_new(o, "wall_seconds", num(s->wall_seconds));
    json_object_set_new(o, "samples_per_s", num(s->samples_per_s));
    json_object_set_new(o, "num_params", json_integer((json_int_t)s->num_params));
    emit_json(o);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* Several ranks share a machine's cores: one BLAS thread each unless told otherwise. */
    if (!getenv("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(1);

    worker_opts opts;
    int rc = parse_args(argc, argv, &opts, rank);
    if (rc != 0) {
        MPI_Finalize();
        return rc == 1 ? 0 : 2;
    }

    ob_err err = {0};
    ob_jobspec spec;
    char *spec_json = NULL;
    ob_status st = ob_jobspec_load(&spec, opts.spec_path, &err);
    if (st == OB_OK) st = ob_jobspec_to_json(&spec, &spec_json, &err);
    if (st != OB_OK) {
        /* Every rank read the same file and failed the same way: one message is enough. */
        if (rank == 0) fprintf(stderr, "onebit-worker: %s: %s\n", opts.spec_path, err.msg);
        MPI_Finalize();
        return 2;
    }
    if (opts.check_only) {
        if (rank == 0) printf("%s\n", spec_json);
        free(spec_json);
        MPI_Finalize();
        return 0;
    }

    printer pr = {opts.format, rank};
    ob_comm *comm = NULL;
    ob_trainer *trainer = NULL;
    ob_train_summary summary;
    int exit_code = 0;
    st = ob_comm_create_mpi(&comm, &err);
    if (st == OB_OK) st = ob_trainer_create(&trainer, &spec, comm, &err);
    if (st != OB_OK) {
        /* Setup failures are agreed on by all ranks: each reports its own, then all exit. */
        if (st != OB_ERR_STATE || world == 1 || rank == 0)
            fprintf(stderr, "onebit-worker[%d]: setup failed: %s\n", rank, err.msg);
        exit_code = 1;
        goto done;
    }
    print_start(&pr, &spec, spec_json, world, ob_trainer_num_params(trainer));
    st = ob_trainer_run(trainer, on_event, &pr, &summary, &err);
    if (st != OB_OK) {
        fprintf(stderr, "onebit-worker[%d]: training failed: %s\n", rank, err.msg);
        /* Other ranks may be waiting in a collective: end the whole job. */
        if (world > 1) ob_comm_abort(comm, 1);
        exit_code = 1;
        goto done;
    }
    print_summary(&pr, &summary,
                  ob_dataset_get_kind(ob_trainer_dataset(trainer)) == OB_DATASET_TEXT);
done:
    ob_trainer_destroy(trainer);
    ob_comm_destroy(comm);
    free(spec_json);
    MPI_Finalize();
    return exit_code;
}
