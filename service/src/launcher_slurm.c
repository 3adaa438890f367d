/* The Slurm launcher: every attempt is one batch job.
 *
 *   sbatch --parsable --job-name=onebit-<job>-<attempt> --ntasks=N --output=<worker.log>
 *          --open-mode=append --chdir=<job dir> --export=ALL [--partition=P] [args...]
 *          <job dir>/onebit-batch.sh  srun --mpi=pmix --kill-on-bad-exit=1 --label
 *          onebit-worker --spec ... --job-id ... --checkpoint-dir ... [--resume] [--report ...]
 *
 * The batch script is fixed text (`exec "$@"`): the command travels as its arguments, never as
 * shell text. srun starts the ranks as the tasks of one step, each line of their output tagged
 * with the rank ("1: ..."), appended to the job's log by Slurm itself (the log must be on storage
 * the batch node writes, like the checkpoints). A rank that dies takes the step down
 * (--kill-on-bad-exit), so the batch job ends FAILED with srun's status.
 *
 * Watching: `squeue -h --states=all -j ID -O OB_SQUEUE_FORMAT` at most every poll interval per
 * attempt, and `sacct` once the controller no longer knows the job. Stopping: `scancel
 * --signal=TERM ID` reaches the step's tasks (the ranks) but not the batch shell, so the ranks
 * checkpoint and exit 0 and srun with them; a kill is `scancel ID`. Re-attaching: the job's id
 * (kept in the store) or, when a coordinator died before it learnt the id, its name and output
 * file. Every command is run with an argument vector (exec.h) and a time limit. */
#include "onebit/launcher.h"
#include "exec.h"
#include "onebit/base.h"
#include "onebit/slurm.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_SIZE 64
#define OUT_CAP 65536
#define MAX_SBATCH_ARGS 32

/* The newest answer about one Slurm job. */
typedef struct cached {
    char id[OB_SLURM_ID_LEN];
    int64_t at_ms; /* when it was asked; 0: empty */
    int vanished;  /* neither squeue nor sacct knows the job */
    ob_slurm_job job;
} cached;

typedef struct slurm_launcher {
    ob_launcher base;
    char *worker, *sbatch, *squeue, *scancel, *sacct, *srun, *mpi_arg, *partition_arg;
    char **sbatch_args; /* NULL-terminated */
    size_t n_sbatch_args;
    int poll_ms, timeout_ms;
    cached cache[CACHE_SIZE];
    char out[OUT_CAP], errout[4096]; /* the last command's output */
} slurm_launcher;

/* Name of the batch job of attempt a of job_id. */
static void job_name(const ob_launch_req *req, char *out, size_t cap)
{
    snprintf(out, cap, "onebit-%s-%d", req->job_id, req->attempt);
}

/* Runs a Slurm command. OB_ERR_COMM when it cannot be started, times out, or fails without the
 * answer "no such job" (*no_such_job, may be NULL, is set for that one). */
static ob_status run_cmd(slurm_launcher *sl, const char *const *argv, int *no_such_job, ob_err *err)
{
    ob__exec_result res;
    if (no_such_job) *no_such_job = 0;
    ob_status rc = ob__exec(argv, NULL, sl->timeout_ms, sl->out, sizeof sl->out, sl->errout,
                            sizeof sl->errout, &res, err);
    if (rc) return OB_WRAP(err, OB_ERR_COMM, "%s", argv[0]);
    if (res.timed_out)
        return OB_ERR(err, OB_ERR_COMM, "%s gave no answer within %d ms", argv[0], sl->timeout_ms);
    if (res.exit_code == 0) return OB_OK;
    if (no_such_job && strstr(sl->errout, "Invalid job id")) {
        *no_such_job = 1;
        return OB_OK;
    }
    char line[200];
    ob__first_line(sl->errout[0] ? sl->errout : sl->out, line, sizeof line);
    if (res.term_signal)
        return OB_ERR(err, OB_ERR_COMM, "%s: killed by signal %d", argv[0], res.term_signal);
    return OB_ERR(err, OB_ERR_COMM, "%s: exit code %d: %s", argv[0], res.exit_code, line);
}

static cached *cache_slot(slurm_launcher *sl, const char *id)
{
    cached *oldest = &sl->cache[0];
    for (size_t i = 0; i < CACHE_SIZE; i++) {
        if (sl->cache[i].at_ms && !strcmp(sl->cache[i].id, id)) return &sl->cache[i];
        if (sl->cache[i].at_ms < oldest->at_ms) oldest = &sl->cache[i];
    }
    memset(oldest, 0, sizeof *oldest);
    ob_strlcpy(oldest->id, id, sizeof oldest->id);
    return oldest;
}

/* What Slurm knows of job id now, at most poll_ms old unless fresh is set. */
static ob_status query(slurm_launcher *sl, const char *id, int fresh, cached **out, ob_err *err)
{
    cached *c = cache_slot(sl, id);
    *out = c;
    int64_t now = ob_wall_ms();
    if (c->at_ms && !fresh && now - c->at_ms < sl->poll_ms) return OB_OK;
    const char *argv[] = {sl->squeue, "-h", "--states=all", "-j", id, "-O", OB_SQUEUE_FORMAT, NULL};
    int gone = 0;
    ob_status rc = run_cmd(sl, argv, &gone, err);
    if (rc) return rc;
    ob_slurm_job jobs[4];
    size_t n = 0;
    if (!gone) ob_slurm_parse_squeue(sl->out, jobs, 4, &n, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(jobs[i].id, id) != 0) continue;
        c->job = jobs[i];
        c->vanished = 0;
        c->at_ms = now;
        return OB_OK;
    }
    if (!gone && sl->out[0])
        return OB_ERR(err, OB_ERR_COMM, "squeue's answer about job %s does not parse", id);
    /* The controller has forgotten the job (MinJobAge): accounting may remember it. */
    if (sl->sacct[0]) {
        const char *sargv[] = {sl->sacct, "-n", "-P", "-X", "-o", OB_SACCT_FORMAT, "-j", id, NULL};
        int found = 0;
        if (run_cmd(sl, sargv, NULL, NULL) == OB_OK &&
            ob_slurm_parse_sacct(sl->out, id, &c->job, &found, NULL) == OB_OK && found) {
            c->vanished = 0;
            c->at_ms = now;
            return OB_OK;
        }
    }
    memset(&c->job, 0, sizeof c->job);
    ob_strlcpy(c->job.id, id, sizeof c->job.id);
    c->vanished = 1;
    c->at_ms = now;
    return OB_OK;
}

static ob_status slurm_poll(ob_launcher *l, const ob_launch_handle *h, ob_launch_exit *ex,
                            ob_err *err)
{
    slurm_launcher *sl = (slurm_launcher *)l;
    memset(ex, 0, sizeof *ex);
    ex->exit_code = -1;
    if (!h->ext_id[0]) {
        ex->done = 1;
        snprintf(ex->reason, sizeof ex->reason, "the attempt has no Slurm job id");
        return OB_OK;
    }
    cached *c;
    ob_err qerr;
    ob_err_clear(&qerr);
    if (query(sl, h->ext_id, 0, &c, &qerr) != OB_OK) {
        /* Not an end: the controller may be restarting. Said while it lasts. */
        snprintf(ex->reason, sizeof ex->reason, "Slurm cannot be asked about job %.30s: %.150s",
                 h->ext_id, qerr.msg);
        return OB_OK;
    }
    if (c->vanished) {
        ex->done = 1;
        snprintf(ex->reason, sizeof ex->reason,
                 "Slurm has no record of job %s any more (the controller forgets ended jobs "
                 "after MinJobAge; sacct has none either)",
                 h->ext_id);
        return OB_OK;
    }
    (void)err;
    ob_slurm_exit(&c->job, ex);
    return OB_OK;
}

static ob_status slurm_signal(ob_launcher *l, const ob_launch_handle *h, int sig, ob_err *err)
{
    slurm_launcher *sl = (slurm_launcher *)l;
    if (!h->ext_id[0]) return OB_OK;
    cached *c = NULL;
    int pending = 0;
    if (query(sl, h->ext_id, 1, &c, NULL) == OB_OK) {
        if (c->vanished || ob_slurm_state_final(c->job.state)) return OB_OK;
        pending = c->job.state == OB_SLURM_PENDING;
    }
    char sigopt[32];
    snprintf(sigopt, sizeof sigopt, "--signal=%d", sig);
    /* SIGTERM reaches the step's tasks, the ranks, which checkpoint and exit; a job that has not
     * started has nothing to save and is cancelled outright, as is any SIGKILL. */
    int plain = sig == SIGKILL || pending;
    const char *argv[] = {sl->scancel, plain ? h->ext_id : sigopt, plain ? NULL : h->ext_id, NULL};
    int gone = 0;
    ob_status rc = run_cmd(sl, argv, &gone, err);
    if (c) c->at_ms = 0; /* ask again at the next poll */
    return rc;
}

static int slurm_alive(ob_launcher *l, const ob_launch_handle *h)
{
    slurm_launcher *sl = (slurm_launcher *)l;
    if (!h->ext_id[0]) return 0;
    cached *c;
    if (query(sl, h->ext_id, 0, &c, NULL) != OB_OK) return 1; /* cannot tell: assume so */
    return !c->vanished && !ob_slurm_state_final(c->job.state);
}

/* The job of req's attempt by its name and output file, for an attempt whose id was never
 * stored. OB_ERR_NOT_FOUND when there is none. */
static ob_status find_by_name(slurm_launcher *sl, const ob_launch_req *req, char *id, size_t cap,
                              ob_err *err)
{
    char name[160], name_opt[180];
    job_name(req, name, sizeof name);
    snprintf(name_opt, sizeof name_opt, "--name=%s", name);
    const char *argv[] = {sl->squeue, "-h", "--states=all", name_opt, "-O", OB_SQUEUE_FORMAT, NULL};
    ob_status rc = run_cmd(sl, argv, NULL, err);
    if (rc) return rc;
    ob_slurm_job jobs[16];
    size_t n = 0;
    ob_slurm_parse_squeue(sl->out, jobs, 16, &n, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(jobs[i].name, name) != 0 || !req->log_path ||
            strcmp(jobs[i].std_out, req->log_path) != 0)
            continue;
        ob_strlcpy(id, jobs[i].id, cap);
        return OB_OK;
    }
    return OB_ERR(err, OB_ERR_NOT_FOUND, "Slurm has no job %s writing to %s", name,
                  req->log_path ? req->log_path : "?");
}

static ob_status slurm_attach(ob_launcher *l, ob_launch_handle *h, const ob_launch_req *req,
                              ob_err *err)
{
    slurm_launcher *sl = (slurm_launcher *)l;
    h->pid = h->pgid = 0;
    if (req->spec_path) ob_strlcpy(h->spec_path, req->spec_path, sizeof h->spec_path);
    if (!h->ext_id[0]) return find_by_name(sl, req, h->ext_id, sizeof h->ext_id, err);
    cached *c;
    ob_err qerr;
    ob_err_clear(&qerr);
    /* The controller cannot be asked now: keep watching the id, poll will tell. */
    if (query(sl, h->ext_id, 1, &c, &qerr) != OB_OK) return OB_OK;
    if (c->vanished)
        return OB_ERR(err, OB_ERR_NOT_FOUND, "Slurm has no record of job %s any more", h->ext_id);
    /* sacct's record has no name; squeue's must be the attempt's. */
    char name[160];
    job_name(req, name, sizeof name);
    if (c->job.name[0] && strcmp(c->job.name, name) != 0)
        return OB_ERR(err, OB_ERR_NOT_FOUND, "Slurm job %s is '%s', not %s", h->ext_id, c->job.name,
                      name);
    return OB_OK;
}

static void slurm_stop_stale(ob_launcher *l, const ob_launch_handle *h, const ob_launch_req *req)
{
    slurm_launcher *sl = (slurm_launcher *)l;
    ob_launch_handle mine = *h;
    if (slurm_attach(l, &mine, req, NULL) != OB_OK || !mine.ext_id[0]) return;
    if (slurm_alive(l, &mine)) {
        const char *argv[] = {sl->scancel, mine.ext_id, NULL};
        run_cmd(sl, argv, NULL, NULL);
    }
}

/* Paths sbatch reads as file name patterns ("%j", "\\") or that would break a line. */
static int pattern_free(const char *p)
{
    return p && !strpbrk(p, "%\\\n\r");
}

static const char batch_script[] =
    "#!/bin/sh\n"
    "# Written by onebitd: the batch script of every attempt of this job. Its arguments are\n"
    "# the command (srun ... onebit-worker ...); nothing of the job is written into it.\n"
    "exec \"$@\"\n";

static ob_status slurm_start(ob_launcher *l, const ob_launch_req *req, ob_launch_handle *h,
                             ob_err *err)
{
    slurm_launcher *sl = (slurm_launcher *)l;
    if (!pattern_free(req->log_path) || !pattern_free(req->spec_path) ||
        !pattern_free(req->checkpoint_dir))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "job %s: its paths contain '%%', '\\' or a line break, which sbatch would "
                      "read as file name patterns; choose a state directory without them",
                      req->job_id);
    char dir[1024], script[1100];
    const char *slash = strrchr(req->spec_path, '/');
    size_t dlen = slash ? (size_t)(slash - req->spec_path) : 0;
    if (!slash || dlen == 0 || dlen >= sizeof dir)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "job %s: spec path %s has no directory", req->job_id,
                      req->spec_path);
    memcpy(dir, req->spec_path, dlen);
    dir[dlen] = '\0';
    snprintf(script, sizeof script, "%s/onebit-batch.sh", dir);
    /* The batch script next to the job's spec. */
    ob_status rc = ob__write_file_atomic(script, batch_script, err);
    if (rc) return rc;

    char name[160], name_opt[180], ntasks[32], out_opt[1100], chdir_opt[1100];
    job_name(req, name, sizeof name);
    snprintf(name_opt, sizeof name_opt, "--job-name=%s", name);
    snprintf(ntasks, sizeof ntasks, "--ntasks=%d", req->world_size);
    snprintf(out_opt, sizeof out_opt, "--output=%s", req->log_path);
    snprintf(chdir_opt, sizeof chdir_opt, "--chdir=%s", dir);
    const char *argv[96];
    size_t a = 0;
    argv[a++] = sl->sbatch;
    argv[a++] = "--parsable";
    argv[a++] = name_opt;
    argv[a++] = ntasks;
    argv[a++] = out_opt;
    argv[a++] = "--open-mode=append";
    argv[a++] = chdir_opt;
    argv[a++] = "--export=ALL";
    if (sl->partition_arg) argv[a++] = sl->partition_arg;
    for (size_t i = 0; i < sl->n_sbatch_args; i++)
        argv[a++] = sl->sbatch_args[i];
    argv[a++] = script;
    argv[a++] = sl->srun;
    argv[a++] = sl->mpi_arg;
    argv[a++] = "--kill-on-bad-exit=1";
    argv[a++] = "--label";
    a = ob__worker_argv(argv, a, sl->worker, req);

    /* The job takes sbatch's environment (--export=ALL): ours without the admin token, with the
     * attempt's report credential. */
    char report_var[160] = "";
    if (req->report_token && req->report_token[0] &&
        (size_t)snprintf(report_var, sizeof report_var, "ONEBIT_REPORT_TOKEN=%s",
                         req->report_token) >= sizeof report_var)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "job %s: report credential too long", req->job_id);
    char **env = ob__child_env(report_var);
    if (!env) return OB_ERR(err, OB_ERR_NOMEM, "environment for job %s", req->job_id);
    ob__exec_result res;
    rc = ob__exec(argv, env, sl->timeout_ms, sl->out, sizeof sl->out, sl->errout, sizeof sl->errout,
                  &res, err);
    free(env);
    if (rc) return OB_WRAP(err, rc, "job %s", req->job_id);
    if (res.timed_out || res.exit_code != 0) {
        char line[240];
        ob__first_line(sl->errout[0] ? sl->errout : sl->out, line, sizeof line);
        return OB_ERR(err, OB_ERR_IO, "sbatch for job %s failed (%s %d): %s", req->job_id,
                      res.timed_out ? "timed out after ms" : "exit code",
                      res.timed_out ? sl->timeout_ms : res.exit_code, line);
    }
    char id[OB_SLURM_ID_LEN];
    if ((rc = ob_slurm_parse_sbatch(sl->out, id, err)))
        return OB_WRAP(err, rc, "job %s", req->job_id);
    memset(h, 0, sizeof *h);
    ob_strlcpy(h->spec_path, req->spec_path, sizeof h->spec_path);
    ob_strlcpy(h->ext_id, id, sizeof h->ext_id);
    return OB_OK;
}

static void slurm_destroy(ob_launcher *l)
{
    slurm_launcher *sl = (slurm_launcher *)l;
    if (!sl) return;
    char **strs[] = {&sl->worker, &sl->sbatch, &sl->squeue,  &sl->scancel,
                     &sl->sacct,  &sl->srun,   &sl->mpi_arg, &sl->partition_arg};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        free(*strs[i]);
    for (size_t i = 0; i < sl->n_sbatch_args; i++)
        free(sl->sbatch_args[i]);
    free(sl->sbatch_args);
    free(sl);
}

static const ob_launcher_ops slurm_ops = {
    .ext_id_kind = "Slurm job",
    .start = slurm_start,
    .poll = slurm_poll,
    .signal = slurm_signal,
    .alive = slurm_alive,
    .stop_stale = slurm_stop_stale,
    .attach = slurm_attach,
    .destroy = slurm_destroy,
};

static char *dup_or(const char *v, const char *def)
{
    return strdup(v ? v : def);
}

ob_status ob_slurm_launcher_create(ob_launcher **out, const ob_slurm_launcher_config *cfg,
                                   ob_err *err)
{
    *out = NULL;
    size_t n = 0;
    while (cfg->sbatch_args && cfg->sbatch_args[n])
        n++;
    if (n > MAX_SBATCH_ARGS)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "at most %d extra sbatch arguments, got %zu",
                      MAX_SBATCH_ARGS, n);
    for (size_t i = 0; i < n; i++) {
        const char *s = cfg->sbatch_args[i];
        /* Options only: a bare word would become the batch script. */
        if (strncmp(s, "--", 2) != 0 || strlen(s) < 3 || strlen(s) > 1000 || strpbrk(s, "\n\r"))
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "sbatch argument '%.100s': expected a long option (--time=1:00:00)", s);
    }
    const char *mpi = cfg->mpi ? cfg->mpi : "pmix";
    if (!mpi[0] || strlen(mpi) > 32 ||
        strspn(mpi, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(mpi))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "srun --mpi: '%.40s' is not an MPI plugin name",
                      mpi);
    if (cfg->partition &&
        (!cfg->partition[0] || strlen(cfg->partition) > 200 || strpbrk(cfg->partition, " \t\n\r")))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "partition '%.100s' is not a partition name",
                      cfg->partition);
    slurm_launcher *sl = calloc(1, sizeof *sl);
    if (!sl) return OB_ERR(err, OB_ERR_NOMEM, "allocating the Slurm launcher");
    sl->base.ops = &slurm_ops;
    sl->poll_ms = cfg->poll_interval_ms > 0 ? cfg->poll_interval_ms : 1000;
    sl->timeout_ms = cfg->command_timeout_ms > 0 ? cfg->command_timeout_ms : 20000;
    sl->worker = dup_or(cfg->worker, "onebit-worker");
    sl->sbatch = dup_or(cfg->sbatch, "sbatch");
    sl->squeue = dup_or(cfg->squeue, "squeue");
    sl->scancel = dup_or(cfg->scancel, "scancel");
    sl->sacct = dup_or(cfg->sacct, "sacct");
    sl->srun = dup_or(cfg->srun, "srun");
    size_t cap = strlen(mpi) + 8;
    sl->mpi_arg = malloc(cap);
    if (sl->mpi_arg) snprintf(sl->mpi_arg, cap, "--mpi=%s", mpi);
    if (cfg->partition) {
        cap = strlen(cfg->partition) + 16;
        sl->partition_arg = malloc(cap);
        if (sl->partition_arg) snprintf(sl->partition_arg, cap, "--partition=%s", cfg->partition);
    }
    sl->sbatch_args = calloc(n + 1, sizeof *sl->sbatch_args);
    if (!sl->worker || !sl->sbatch || !sl->squeue || !sl->scancel || !sl->sacct || !sl->srun ||
        !sl->mpi_arg || (cfg->partition && !sl->partition_arg) || !sl->sbatch_args)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (!(sl->sbatch_args[i] = strdup(cfg->sbatch_args[i]))) goto fail;
        sl->n_sbatch_args++;
    }
    *out = &sl->base;
    return OB_OK;
fail:
    slurm_destroy(&sl->base);
    return OB_ERR(err, OB_ERR_NOMEM, "allocating the Slurm launcher");
}
