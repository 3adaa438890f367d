/* onebit-worker: trains one job spec data-parallel, one process per MPI rank.
 *
 *   mpirun -np 4 onebit-worker --spec job.yaml [--job-id ID] [--checkpoint-dir DIR] [--resume]
 *
 * Rank 0 prints progress on stdout, one JSON object per line (--format json, the default, read
 * by the coordinator) or as aligned text (--format text); errors go to stderr. Exit status (the
 * same on every rank, so mpirun passes it on; onebitd retries 1, and 5 without a memory limit):
 *   0  success (also after SIGTERM or SIGUSR1: the ranks finish the step, checkpoint and stop)
 *   1  a failure that may pass (I/O, memory, communication, a GPU): worth a restart
 *   2  bad command line or job spec (nothing started)
 *   3  the run diverged (the loss is not finite): a restart from its checkpoint would repeat it
 *   4  bad input found at setup: data, a checkpoint or a warm-start source that cannot be used,
 *      or a resume whose spec does not match
 *   5  out of memory: an allocation failed (OB_ERR_NOMEM); under onebitd's worker memory limit
 *      (RLIMIT_DATA) the same job would fail the same way, so it is not retried there
 *
 * Checkpoints go to <DIR>/<ID>/step-XXXXXXXX/ (DIR: --checkpoint-dir, else the spec's
 * checkpoint.dir; ID: --job-id, else the spec's name, else "job").
 *
 * Fault injection for tests: ONEBIT_FAULT_INJECT=SIG:STEP[:RANK] makes rank RANK (default 0)
 * raise SIGKILL or SIGTERM (SIG = KILL or TERM) right after completing step STEP. */
#define _GNU_SOURCE /* getopt_long */
#include "onebit/comm.h"
#include "onebit/jobspec.h"
#include "onebit/opt.h"
#include "onebit/rpc_client.h"
#include "onebit/trainer.h"
#include "output.h"
#include "program.h"

#include <cblas.h>
#include <getopt.h>
#include <mpi.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct worker_opts {
    const char *spec_path;
    worker_format format;
    int check_only;
    const char *job_id;
    const char *checkpoint_dir;
    int resume;
    const char *report_addr;
    int profile;
} worker_opts;

/* Set by SIGTERM, SIGINT and SIGUSR1; the trainer polls it after every step. A signal handler
 * can only reach a file-scope object. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* The options that parse_args converts itself (ob_opt.id). */
enum { OPT_FORMAT = 1, OPT_HELP, OPT_VERSION };

#define F(x) offsetof(worker_opts, x)
/* The command line: what parse_args reads and usage prints (and the man page is made from). */
static const ob_opt worker_options[] = {
    {"spec", 0, OB_OPT_STRING, F(spec_path), 0, 0, "FILE", "job spec, JSON or YAML (see examples/)",
     NULL, 0, 0, 0},
    {"format", 0, OB_OPT_CUSTOM, F(format), 0, 0, "F", "progress as JSON lines (default) or text",
     NULL, OPT_FORMAT, 0, 0},
    {"check", 0, OB_OPT_FLAG, F(check_only), 0, 0, NULL,
     "validate the spec, print it with defaults filled, and exit", NULL, 0, 0, 0},
    {"job-id", 0, OB_OPT_STRING, F(job_id), 0, 0, "ID",
     "checkpoint sub-directory [the spec's name, else \"job\"]", NULL, 0, 0, 0},
    {"checkpoint-dir", 0, OB_OPT_STRING, F(checkpoint_dir), 0, 0, "DIR",
     "checkpoint root [the spec's checkpoint.dir]", NULL, 0, 0, 0},
    {"resume", 0, OB_OPT_FLAG, F(resume), 0, 0, NULL,
     "continue from the newest valid checkpoint, if any", NULL, 0, 0, 0},
    {"report", 0, OB_OPT_STRING, F(report_addr), 0, 0, "HOST:PORT",
     "also send progress to onebitd's WorkerService", NULL, 0, 0, 0},
    {"profile", 0, OB_OPT_FLAG, F(profile), 0, 0, NULL,
     "split rank 0's step time (data, compute, allreduce,\ncompression, exchange, updates) in the "
     "summary",
     NULL, 0, 0, 0},
    {"help", 'h', OB_OPT_ACTION, 0, 0, 0, NULL, "print this help and exit", NULL, OPT_HELP, 0, 0},
    {"version", 0, OB_OPT_ACTION, 0, 0, 0, NULL, "print the release and exit", NULL, OPT_VERSION, 0,
     0},
};
#undef F
enum { N_WORKER_OPTIONS = sizeof worker_options / sizeof *worker_options };

static void usage(FILE *f)
{
    fprintf(f, "usage: onebit-worker --spec FILE [--format json|text] [--check]\n"
               "                     [--job-id ID] [--checkpoint-dir DIR] [--resume]\n"
               "                     [--report HOST:PORT] [--profile]\n");
    ob_opt_print_help(f, worker_options, N_WORKER_OPTIONS, 23);
    fprintf(f, "SIGTERM, SIGINT or SIGUSR1: finish the step, checkpoint, exit 0.\n");
}

/* Returns 0 to go on, 1 after --help, 2 on a bad command line (message printed by rank 0). */
static int parse_args(int argc, char **argv, worker_opts *o, int rank)
{
    struct option options[N_WORKER_OPTIONS + 1];
    char shortopts[8] = ":";
    size_t n = 0;
    options[0] = (struct option){0};
    ob_opt_getopt(options, &n, N_WORKER_OPTIONS + 1, shortopts, sizeof shortopts, worker_options,
                  N_WORKER_OPTIONS, 256);
    memset(o, 0, sizeof *o);
    opterr = 0; /* our own messages, from rank 0 only */
    int c;
    while ((c = getopt_long(argc, argv, shortopts, options, NULL)) != -1) {
        const ob_opt *r = c >= 256   ? &worker_options[c - 256]
                          : c == 'h' ? ob_opt_find(worker_options, N_WORKER_OPTIONS, "h")
                                     : NULL;
        if (!r) { /* '?' unknown, ':' missing value */
            if (rank == 0) {
                fprintf(stderr, "onebit-worker: unknown or incomplete argument '%s'\n",
                        argv[optind - 1]);
                usage(stderr);
            }
            return 2;
        }
        if (r->kind == OB_OPT_FLAG) {
            *(int *)ob_opt_dest(r, o) = 1;
        } else if (r->kind == OB_OPT_STRING) {
            *(const char **)ob_opt_dest(r, o) = optarg;
        } else if (r->id == OPT_FORMAT) {
            if (strcmp(optarg, "json") && strcmp(optarg, "text")) {
                if (rank == 0)
                    fprintf(stderr, "onebit-worker: --format: expected json or text, got '%s'\n",
                            optarg);
                return 2;
            }
            o->format = strcmp(optarg, "json") ? FORMAT_TEXT : FORMAT_JSON;
        } else { /* --help, --version */
            if (rank == 0 && r->id == OPT_HELP) usage(stdout);
            if (rank == 0 && r->id == OPT_VERSION) printf("onebit-worker %s\n", ONEBIT_VERSION);
            return 1;
        }
    }
    if (optind < argc) {
        if (rank == 0) {
            fprintf(stderr, "onebit-worker: unexpected argument '%s'\n", argv[optind]);
            usage(stderr);
        }
        return 2;
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

enum { EXIT_RETRYABLE = 1, EXIT_USAGE = 2, EXIT_DIVERGED = 3, EXIT_BAD_INPUT = 4, EXIT_NOMEM = 5 };

/* The exit status for a failure with status st (see the top of this file). OB_ERR_STATE is what
 * the ranks that did not fail a collective setup step see: 0, so that the failing rank's class
 * wins the agreement below. */
static int exit_class(ob_status st)
{
    switch (st) {
    case OB_ERR_NUMERIC:
        return EXIT_DIVERGED;
    case OB_ERR_INVALID_ARG:
    case OB_ERR_NOT_FOUND:
    case OB_ERR_CORRUPT:
    case OB_ERR_UNSUPPORTED:
        return EXIT_BAD_INPUT;
    case OB_ERR_NOMEM:
        return EXIT_NOMEM;
    case OB_ERR_STATE:
        return 0;
    default:
        return EXIT_RETRYABLE;
    }
}

/* Setup failures are collective: every rank leaves with the most severe class any rank saw. */
static int agreed_exit(ob_status st)
{
    int mine = exit_class(st), all = mine;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) all = mine;
    return all ? all : EXIT_RETRYABLE;
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

/* This process's rank from the launcher's environment, before MPI starts (0 when none). */
static int launcher_rank(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && v[0]) return atoi(v);
    }
    return 0;
}

/* A program job's spec: its program is exec'd in the worker's place before MPI starts, so that
 * the program's own MPI joins the job (engine/python). Returns -1 for anything else (a
 * built-in job, a command line the main path will explain, --check), else the exit status of a
 * program that could not be started. */
static int run_program(int argc, char **argv)
{
    worker_opts o;
    int rc = parse_args(argc, argv, &o, -1); /* quiet: the main path reports mistakes */
    optind = 0;                              /* GNU getopt starts over for the main path */
    if (rc != 0 || !o.spec_path || o.check_only) return -1;
    ob_jobspec *spec = malloc(sizeof *spec);
    if (!spec) return -1;
    if (ob_jobspec_load(spec, o.spec_path, NULL) != OB_OK || !ob_jobspec_is_program(spec)) {
        free(spec);
        return -1;
    }
    int rank = launcher_rank();
    char job_dir[OB_JOB_PATH_LEN];
    if ((rc = checkpoint_dir(&o, spec, job_dir, sizeof job_dir, rank)) == 0) {
        program_launch l = {
            job_dir,       o.job_id ? o.job_id : (spec->name[0] ? spec->name : "job"),
            o.resume,      o.format == FORMAT_TEXT,
            o.report_addr, rank,
            o.spec_path};
        rc = worker_exec_program(spec, &l);
    }
    free(spec);
    return rc;
}

int main(int argc, char **argv)
{
    int prc = run_program(argc, argv);
    if (prc >= 0) return prc;

    /* SERIALIZED: optimizer.overlap exchanges gradient buckets on a communication thread while
     * the main thread makes no MPI call. Below it the trainer falls back and says so. */
    int provided = MPI_THREAD_SINGLE;
    /* Open MPI's TCP eager limit at 2 MiB unless the environment or mpirun says otherwise. */
    ob_comm_mpi_env_defaults();
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
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
    /* mpirun forwards SIGUSR1 to every rank on every host (SIGTERM it would answer by killing
     * them): the hosts launcher stops a job with it. */
    sigaction(SIGUSR1, &sa, NULL);

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
        /* Every rank read the same file and failed the same way: one message is enough. It
         * names the file already. */
        if (rank == 0) fprintf(stderr, "onebit-worker: %s\n", err.msg);
        MPI_Finalize();
        return 2;
    }
    if (opts.check_only) {
        if (rank == 0) printf("%s\n", spec_json);
        free(spec_json);
        MPI_Finalize();
        return 0;
    }
    char job_dir[OB_JOB_PATH_LEN];
    ob_fault_injection fault;
    if (checkpoint_dir(&opts, &spec, job_dir, sizeof job_dir, rank) != 0 ||
        fault_from_env(&fault, rank) != 0) {
        free(spec_json);
        MPI_Finalize();
        return 2;
    }

    ob_reporter *reporter = NULL;
    if (opts.report_addr && rank == 0) {
        const char *id = opts.job_id ? opts.job_id : (spec.name[0] ? spec.name : "job");
        if (ob_reporter_create(&reporter, opts.report_addr, id, NULL, &err) != OB_OK)
            fprintf(stderr, "onebit-worker: warning: --report: %s (continuing without)\n", err.msg);
    }
    worker_output out = {opts.format, rank, reporter, &stop_requested};
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
        exit_code = agreed_exit(st);
        goto done;
    }
    ob_trainer_set_stop_flag(trainer, &stop_requested);
    ob_trainer_set_fault_injection(trainer, &fault);
    ob_trainer_set_profiling(trainer, opts.profile);
    worker_output_start(&out, &spec, spec_json, world, ob_trainer_num_params(trainer));
    if (job_dir[0]) st = ob_trainer_enable_checkpoints(trainer, job_dir, &err);
    if (st == OB_OK && opts.resume)
        st = ob_trainer_resume(trainer, job_dir, worker_output_event, &out, &resumed, &err);
    if (st == OB_OK && !resumed)
        st = ob_trainer_warm_start(trainer, worker_output_event, &out, &err);
    if (st != OB_OK) {
        /* Collective and agreed: every rank returns; the one that failed says why. */
        if (st != OB_ERR_STATE || world == 1 || rank == 0)
            fprintf(stderr, "onebit-worker[%d]: %s failed: %s\n", rank,
                    opts.resume && !resumed ? "resume" : "warm start", err.msg);
        exit_code = agreed_exit(st);
        goto done;
    }
    st = ob_trainer_run(trainer, worker_output_event, &out, &summary, &err);
    if (st != OB_OK) {
        fprintf(stderr, "onebit-worker[%d]: training failed: %s\n", rank, err.msg);
        /* A non-finite loss is the allreduced one, so every rank fails the same way at the same
         * step and aborts with the same status. Other ranks may be waiting in a collective: end
         * the whole job. */
        exit_code = exit_class(st) ? exit_class(st) : EXIT_RETRYABLE;
        if (world > 1) ob_comm_abort(comm, exit_code);
        goto done;
    }
    worker_output_summary(&out, &summary,
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
