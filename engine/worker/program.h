/* Program jobs (onebit/jobspec.h, program:): the worker runs the user's script in its own place. */
#ifndef ONEBIT_WORKER_PROGRAM_H
#define ONEBIT_WORKER_PROGRAM_H

#include "onebit/jobspec.h"

/* What the program is told of its job. */
typedef struct program_launch {
    const char *job_dir;     /* its checkpoint directory, "" for none: $ONEBIT_CHECKPOINT_DIR */
    const char *job_id;      /* $ONEBIT_JOB_ID */
    int resume;              /* $ONEBIT_RESUME=1: a restart, load the newest checkpoint */
    int text_format;         /* $ONEBIT_PROGRESS=text instead of json */
    const char *report_addr; /* $ONEBIT_REPORT_ADDR, NULL for none */
    int rank;                /* this process's rank (messages come from rank 0) */
    const char *spec_path;   /* the spec as the launcher named it: $ONEBIT_JOB_SPEC */
} program_launch;

/* Execs the program of spec in place of this process (before MPI starts, so that it joins the
 * job's MPI world itself): chdir to program.workdir, the spec's variables and those above in the
 * environment, `interpreter entrypoint args...`. Returns only when that fails, with the exit
 * status the worker ends with: 4 when the working directory or the entrypoint cannot be used, 2
 * when the interpreter cannot be run (rank 0 says why on stderr). */
int worker_exec_program(const ob_jobspec *spec, const program_launch *l);

#endif /* ONEBIT_WORKER_PROGRAM_H */
