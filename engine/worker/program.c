/* onebit-worker's program jobs (program.h): the spec's script is exec'd on every rank in the
 * worker's place, so that every launcher that starts workers (mpirun locally or across hosts,
 * Slurm, Kubernetes MPIJobs) starts programs the same way, under the same supervision. */
#define _XOPEN_SOURCE 700 /* setenv, execvp */
#include "program.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int say(const program_launch *l, int code, const char *fmt, const char *a, const char *b)
{
    if (l->rank == 0) {
        fprintf(stderr, "onebit-worker: program: ");
        fprintf(stderr, fmt, a, b);
        fputc('\n', stderr);
    }
    return code;
}

/* The spec's variables, then the job's (which a spec cannot name: the validator refuses
 * ONEBIT_*). */
static int set_env(const ob_jobspec *spec, const program_launch *l)
{
    json_error_t je;
    json_t *env = json_loads(spec->program.env_json, 0, &je);
    if (!env) return -1;
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(env, k, v)
    {
        if (setenv(k, json_string_value(v), 1) != 0) rc = -1;
    }
    json_decref(env);
    char num[32];
    if (l->job_dir && l->job_dir[0]) rc |= setenv("ONEBIT_CHECKPOINT_DIR", l->job_dir, 1);
    rc |= setenv("ONEBIT_JOB_ID", l->job_id, 1);
    rc |= setenv("ONEBIT_RESUME", l->resume ? "1" : "0", 1);
    snprintf(num, sizeof num, "%ld", spec->steps);
    rc |= setenv("ONEBIT_STEPS", num, 1);
    snprintf(num, sizeof num, "%llu", (unsigned long long)spec->seed);
    rc |= setenv("ONEBIT_SEED", num, 1);
    rc |= setenv("ONEBIT_PROGRESS", l->text_format ? "text" : "json", 1);
    if (l->report_addr) rc |= setenv("ONEBIT_REPORT_ADDR", l->report_addr, 1);
    /* The launcher's mark of the attempt's processes: a worker names its spec among its
     * arguments, and so the launcher finds it; the program that replaces it does not, and is
     * found by this instead (launcher_local.c). */
    if (l->spec_path) rc |= setenv("ONEBIT_JOB_SPEC", l->spec_path, 1);
    /* Progress lines reach the log as they are printed, not when a buffer fills. */
    rc |= setenv("PYTHONUNBUFFERED", "1", 0);
    return rc;
}

int worker_exec_program(const ob_jobspec *spec, const program_launch *l)
{
    const ob_program_spec *p = &spec->program;
    if (p->workdir[0] && chdir(p->workdir) != 0)
        return say(l, 4, "program.workdir %s: %s", p->workdir, strerror(errno));
    struct stat st;
    if (stat(p->entrypoint, &st) != 0)
        return say(l, 4, "program.entrypoint %s: %s", p->entrypoint, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return say(l, 4, "program.entrypoint %s: %s", p->entrypoint, "not a regular file");
    json_error_t je;
    json_t *args = json_loads(p->args_json, 0, &je);
    size_t n = args ? json_array_size(args) : 0;
    char **argv = calloc(n + 3, sizeof *argv);
    if (!args || !argv || set_env(spec, l) != 0) {
        json_decref(args);
        free(argv);
        return say(l, 2, "%s%s", "cannot set up the program's arguments and environment", "");
    }
    argv[0] = (char *)p->interpreter;
    argv[1] = (char *)p->entrypoint;
    for (size_t i = 0; i < n; i++)
        argv[2 + i] = (char *)json_string_value(json_array_get(args, i));
    fflush(NULL);
    execvp(p->interpreter, argv);
    int e = errno;
    json_decref(args);
    free(argv);
    return say(l, 2, "cannot run %s: %s", p->interpreter, strerror(e));
}
