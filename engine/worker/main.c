/* onebit-worker: trains one job spec data-parallel, one process per MPI rank.
 *
 *   mpirun -np 4 onebit-worker --spec job.yaml [--job-id ID] [--checkpoint-dir DIR] [--resume]
 *
 * Rank 0 prints progress on stdout, one JSON object per line (--format json, the default, read
 * by the coordinator) or as aligned text (--format text); errors go to stderr. Exit status: 0
 * success (also after SIGTERM: the ranks finish the step, checkpoint and stop), 1 training
 * failure, 2 bad command line or job spec (nothing started).
 *
 * Checkpoints go to <DIR>/<ID>/step-XXXXXXXX/ (DIR: --checkpoint-dir, else the spec's
 * checkpoint.dir; ID: --job-id, else the spec's name, else "job").
 *
 * Fault injection for tests: ONEBIT_FAULT_INJECT=SIG:STEP[:RANK] makes rank RANK (default 0)
 * raise SIGKILL or SIGTERM (SIG = KILL or TERM) right after completing step STEP. */
#include "onebit/comm.h"
#include "onebit/jobspec.h"
#include "onebit/rpc_client.h"
#include "onebit/trainer.h"

#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { FORMAT_JSON, FORMAT_TEXT } out_format;

typedef struct worker_opts {
    const char *spec_path;
    out_format format;
    int check_only;
    const char *job_id;
    const char *checkpoint_dir;
    int resume;
    const char *report_addr;
    int profile;
} worker_opts;

/* Set by SIGTERM and SIGINT; the trainer polls it after every step. A signal handler can only
 * reach a file-scope object. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* Rank 0's progress reports to the coordinator (--report), next to the lines it prints; NULL
 * without --report. File scope like stop_requested: emit_json is the one place that sends. */
static ob_reporter *reporter;

typedef struct printer {
    out_format format;
    int rank;
} printer;

static void usage(FILE *f)
{
    fprintf(f, "usage: onebit-worker --spec FILE [--format json|text] [--check]\n"
               "                     [--job-id ID] [--checkpoint-dir DIR] [--resume]\n"
               "                     [--report HOST:PORT] [--profile]\n"
               "  --spec FILE          job spec, JSON or YAML (see examples/)\n"
               "  --format F           progress as JSON lines (default) or text\n"
               "  --check              validate the spec, print it with defaults filled, and exit\n"
               "  --job-id ID          checkpoint sub-directory [the spec's name, else \"job\"]\n"
               "  --checkpoint-dir DIR checkpoint root [the spec's checkpoint.dir]\n"
               "  --resume             continue from the newest valid checkpoint, if any\n"
               "  --report HOST:PORT   also send progress to onebitd's WorkerService\n"
               "  --profile            split rank 0's step time (data, compute, allreduce,\n"
               "                       compression, exchange, updates) in the summary\n"
               "SIGTERM or SIGINT: finish the step, checkpoint, exit 0.\n");
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
        } else if (!strcmp(a, "--job-id") && i + 1 < argc) {
            o->job_id = argv[++i];
        } else if (!strcmp(a, "--checkpoint-dir") && i + 1 < argc) {
            o->checkpoint_dir = argv[++i];
        } else if (!strcmp(a, "--resume")) {
            o->resume = 1;
        } else if (!strcmp(a, "--report") && i + 1 < argc) {
            o->report_addr = argv[++i];
        } else if (!strcmp(a, "--profile")) {
            o->profile = 1;
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
        int cancel = 0; /* the coordinator cancels: stop as on SIGTERM (failures not fatal) */
        if (reporter && ob_reporter_send_line(reporter, s, &cancel, NULL) == OB_OK && cancel)
            stop_requested = 1;
        free(s);
    }
    json_decref(obj);
}

static void on_event(const ob_train_event *ev, void *user)
{
    const printer *p = user;
    if (p->rank != 0) {
        /* Rank 0 reports for everyone, except a checkpoint this rank may have failed. */
        if (ev->kind == OB_EVENT_CHECKPOINT && !ev->ckpt_ok && ev->message)
            fprintf(stderr, "onebit-worker[%d]: checkpoint of step %ld failed: %s\n", p->rank,
                    ev->step, ev->message);
        return;
    }
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
        case OB_EVENT_CHECKPOINT:
            if (ev->ckpt_ok)
                printf("checkpoint @ %ld: %s (%.1f MB, %s, loop stalled %.3f s, write %.3f s)\n",
                       ev->step, ev->path, (double)ev->ckpt_bytes / 1e6,
                       ev->ckpt_async ? "async" : "sync", ev->stall_seconds, ev->write_seconds);
            else
                printf("checkpoint @ %ld FAILED: %s\n", ev->step, ev->message);
            break;
        case OB_EVENT_RESUME:
            printf("resume: continuing after step %ld from %s (written by %d ranks)\n", ev->step,
                   ev->path, ev->from_world_size);
            break;
        case OB_EVENT_NOTICE:
            printf("note: %s\n", ev->message);
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
    case OB_EVENT_CHECKPOINT:
        json_object_set_new(o, "event", json_string("checkpoint"));
        json_object_set_new(o, "step", json_integer(ev->step));
        json_object_set_new(o, "ok", json_boolean(ev->ckpt_ok));
        if (ev->ckpt_ok) {
            json_object_set_new(o, "path", json_string(ev->path));
            json_object_set_new(o, "async", json_boolean(ev->ckpt_async));
            json_object_set_new(o, "bytes", json_integer((json_int_t)ev->ckpt_bytes));
            json_object_set_new(o, "stall_seconds", num(ev->stall_seconds));
            json_object_set_new(o, "write_seconds", num(ev->write_seconds));
        } else {
            json_object_set_new(o, "error", json_string(ev->message ? ev->message : "failed"));
        }
        break;
    case OB_EVENT_RESUME:
        json_object_set_new(o, "event", json_string("resume"));
        json_object_set_new(o, "step", json_integer(ev->step));
        json_object_set_new(o, "path", json_string(ev->path));
        json_object_set_new(o, "from_world_size", json_integer(ev->from_world_size));
        json_object_set_new(o, "phase", json_string(phase));
        break;
    case OB_EVENT_NOTICE:
        json_object_set_new(o, "event", json_string("notice"));
        json_object_set_new(o, "step", json_integer(ev->step));
        json_object_set_new(o, "message", json_string(ev->message ? ev->message : ""));
        break;
    }
    emit_json(o);
}

static void print_start(const printer *p, const ob_jobspec *spec, const char *spec_json, int world,
                        size_t params)
{
    if (p->rank != 0) return;
    if (p->format == FORMAT_TEXT) {
        printf("onebit-worker: job '%s': %s on %s, %s (%s), %d ranks x batch %zu on %s, %ld "
               "steps, %zu parameters\n",
               spec->name, ob_model_kind_name(spec->model.kind), ob_data_kind_name(spec->data.kind),
               ob_optim_kind_name(spec->optim.kind),
               spec->optim.kind == OB_OPTIM_ONEBIT_ADAM ? ob_onebit_mode_name(spec->optim.mode)
                                                        : "fp32",
               world, spec->batch_size,
               spec->device == OB_DEVICE_CUDA ? "cuda (nccl)" : "cpu (mpi)", spec->steps, params);
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

/* The profile as milliseconds per step: the optimizer's time net of its parts is "update". */
static void print_profile(const printer *p, const ob_train_profile *f)
{
    if (f->steps <= 0) return;
    double k = 1e3 / (double)f->steps;
    double update = f->optim_s - f->allreduce_s - f->compress_s - f->exchange_s;
    double total = f->data_s + f->compute_s + f->optim_s;
    if (p->format == FORMAT_TEXT) {
        printf("      time per step (rank 0, %ld steps): %.3f ms = data %.3f + compute %.3f + fp32 "
               "allreduce %.3f + compress %.3f + exchange %.3f + update %.3f\n",
               f->steps, total * k, f->data_s * k, f->compute_s * k, f->allreduce_s * k,
               f->compress_s * k, f->exchange_s * k, update * k);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string("profile"));
    json_object_set_new(o, "steps", json_integer(f->steps));
    json_object_set_new(o, "ms_per_step", num(total * k));
    json_object_set_new(o, "data_ms", num(f->data_s * k));
    json_object_set_new(o, "compute_ms", num(f->compute_s * k));
    json_object_set_new(o, "allreduce_ms", num(f->allreduce_s * k));
    json_object_set_new(o, "compress_ms", num(f->compress_s * k));
    json_object_set_new(o, "exchange_ms", num(f->exchange_s * k));
    json_object_set_new(o, "update_ms", num(update * k));
    emit_json(o);
}

static void print_summary(const printer *p, const ob_train_summary *s, int is_text)
{
    if (p->rank != 0) return;
    print_profile(p, &s->profile);
    if (p->format == FORMAT_TEXT && s->stopped) {
        printf("stopped after step %ld (signal); last checkpoint: step %ld\n", s->steps,
               s->last_checkpoint);
        fflush(stdout);
        return;
    }
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
    json_object_set_new(o, "first_step", json_integer(s->first_step));
    json_object_set_new(o, "stopped", json_boolean(s->stopped));
    json_object_set_new(o, "last_checkpoint",
                        s->last_checkpoint >= 0 ? json_integer(s->last_checkpoint) : json_null());
    emit_json(o);
}

/* A job id names a directory: [A-Za-z0-9._-], 1..127 characters, not "." or "..". */
static int valid_job_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 127 || !strcmp(id, ".") || !strcmp(id, "..")) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Resolves <root>/<job id> into job_dir ("" when the job keeps no checkpoints). Returns 0, or 2
 * with a message (printed by rank 0) for a bad combination. */
static int checkpoint_dir(const worker_opts *o, const ob_jobspec *spec, char *job_dir, size_t cap,
                          int rank)
{
    const char *root = o->checkpoint_dir ? o->checkpoint_dir : spec->checkpoint_dir;
    const char *id = o->job_id ? o->job_id : (spec->name[0] ? spec->name : "job");
    const char *problem = NULL;
    job_dir[0] = '\0';
    if (!root[0]) {
        if (spec->checkpoint_interval > 0)
            problem = "checkpoint.interval is set but there is no checkpoint directory (set "
                      "checkpoint.dir or --checkpoint-dir)";
        else if (o->resume)
            problem = "--resume needs a checkpoint directory (checkpoint.dir or "
                      "--checkpoint-dir)";
    } else if (!valid_job_id(id)) {
        problem = "--job-id: use 1 to 127 characters from [A-Za-z0-9._-]";
    } else if ((size_t)snprintf(job_dir, cap, "%s/%s", root, id) >= cap - 32) {
        problem = "checkpoint directory name too long";
    }
    if (problem) {
        if (rank == 0) fprintf(stderr, "onebit-worker: %s\n", problem);
        return 2;
    }
    return 0;
}

/* ONEBIT_FAULT_INJECT=SIG:STEP[:RANK]; returns 0 when unset or valid, 2 when malformed. */
static int fault_from_env(ob_fault_injection *f, int rank)
{
    memset(f, 0, sizeof *f);
    const char *v = getenv("ONEBIT_FAULT_INJECT");
    if (!v || !v[0]) return 0;
    char sig[8] = {0};
    long step = 0;
    int target = 0, n = sscanf(v, "%7[A-Z]:%ld:%d", sig, &step, &target);
    if (n < 2 || step <= 0 || target < 0 || (strcmp(sig, "KILL") && strcmp(sig, "TERM"))) {
        if (rank == 0)
            fprintf(stderr,
                    "onebit-worker: ONEBIT_FAULT_INJECT='%s': expected KILL|TERM:STEP[:RANK]\n", v);
        return 2;
    }
    f->step = step;
    f->rank = target;
    f->signal = strcmp(sig, "KILL") ? SIGTERM : SIGKILL;
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* Several ranks share a machine's cores: one BLAS thread each unless told otherwise. */
    if (!getenv("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(1);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

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
    char job_dir[4096];
    ob_fault_injection fault;
    if (checkpoint_dir(&opts, &spec, job_dir, sizeof job_dir, rank) != 0 ||
        fault_from_env(&fault, rank) != 0) {
        free(spec_json);
        MPI_Finalize();
        return 2;
    }

    if (opts.report_addr && rank == 0) {
        const char *id = opts.job_id ? opts.job_id : (spec.name[0] ? spec.name : "job");
        if (ob_reporter_create(&reporter, opts.report_addr, id, NULL, &err) != OB_OK)
            fprintf(stderr, "onebit-worker: --report: %s (continuing without)\n", err.msg);
    }
    printer pr = {opts.format, rank};
    ob_comm *comm = NULL;
    ob_trainer *trainer = NULL;
    ob_train_summary summary;
    int exit_code = 0, resumed = 0;
    st = ob_comm_create_mpi(&comm, &err);
    if (st == OB_OK) st = ob_trainer_create(&trainer, &spec, comm, &err);
    if (st != OB_OK) {
        /* Setup failures are agreed on by all ranks: each reports its own, then all exit. */
        if (st != OB_ERR_STATE || world == 1 || rank == 0)
            fprintf(stderr, "onebit-worker[%d]: setup failed: %s\n", rank, err.msg);
        exit_code = 1;
        goto done;
    }
    ob_trainer_set_stop_flag(trainer, &stop_requested);
    ob_trainer_set_fault_injection(trainer, &fault);
    ob_trainer_set_profiling(trainer, opts.profile);
    print_start(&pr, &spec, spec_json, world, ob_trainer_num_params(trainer));
    if (job_dir[0]) st = ob_trainer_enable_checkpoints(trainer, job_dir, &err);
    if (st == OB_OK && opts.resume)
        st = ob_trainer_resume(trainer, job_dir, on_event, &pr, &resumed, &err);
    if (st == OB_OK && !resumed) st = ob_trainer_warm_start(trainer, on_event, &pr, &err);
    if (st != OB_OK) {
        /* Collective and agreed: every rank returns; the one that failed says why. */
        if (st != OB_ERR_STATE || world == 1 || rank == 0)
            fprintf(stderr, "onebit-worker[%d]: %s failed: %s\n", rank,
                    opts.resume && !resumed ? "resume" : "warm start", err.msg);
        exit_code = 1;
        goto done;
    }
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
    if (job_dir[0] && summary.last_checkpoint != summary.steps) {
        /* The state of the last step is not on disk: a supervisor must not take this run as
         * complete. */
        if (rank == 0)
            fprintf(stderr, "onebit-worker: the checkpoint of step %ld could not be written\n",
                    summary.steps);
        exit_code = 1;
    }
done:
    ob_reporter_destroy(reporter);
    ob_trainer_destroy(trainer);
    ob_comm_destroy(comm);
    free(spec_json);
    MPI_Finalize();
    return exit_code;
}
