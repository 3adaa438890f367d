/* What the Slurm launcher reads from Slurm's commands, and how it reads it.
 *
 * The launcher (ob_slurm_launcher_create in launcher.h) submits with `sbatch --parsable`, asks
 * `squeue -h --states=all -O OB_SQUEUE_FORMAT` while the controller remembers a job and
 * `sacct -n -P -X -o OB_SACCT_FORMAT` after that. Their output is untrusted text: these
 * parsers accept only lines of the exact shape asked for, bound every field, and turn a job's
 * record into how an attempt ended (ob_launch_exit) with a reason people can act on. Pure
 * functions, no I/O: the unit tests feed them hostile text. */
#ifndef ONEBIT_SLURM_H
#define ONEBIT_SLURM_H

#include "onebit/launcher.h"
#include "onebit/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* squeue --Format: '|' after every field but the last; Name and StdOut last, since they are the
 * only free text (a '|' in them cannot shift the fields before). */
#define OB_SQUEUE_FORMAT "JobID:|,State:|,Reason:|,exit_code:|,Name:|,STDOUT:"
#define OB_SACCT_FORMAT "JobID,State,ExitCode"

/* A Slurm job state (squeue %T / sacct State). */
typedef enum ob_slurm_state {
    OB_SLURM_UNKNOWN = 0,
    /* not ended */
    OB_SLURM_PENDING,
    OB_SLURM_CONFIGURING,
    OB_SLURM_RUNNING,
    OB_SLURM_COMPLETING,
    OB_SLURM_SUSPENDED,
    OB_SLURM_REQUEUED, /* REQUEUED, REQUEUE_HOLD, REQUEUE_FED */
    OB_SLURM_RESIZING,
    OB_SLURM_SIGNALING,
    OB_SLURM_STAGE_OUT,
    OB_SLURM_STOPPED,
    OB_SLURM_SPECIAL_EXIT,
    OB_SLURM_RESV_DEL_HOLD,
    /* ended */
    OB_SLURM_COMPLETED,
    OB_SLURM_FAILED,
    OB_SLURM_CANCELLED,
    OB_SLURM_TIMEOUT,
    OB_SLURM_NODE_FAIL,
    OB_SLURM_PREEMPTED,
    OB_SLURM_BOOT_FAIL,
    OB_SLURM_DEADLINE,
    OB_SLURM_OUT_OF_MEMORY,
    OB_SLURM_REVOKED,
} ob_slurm_state;

#define OB_SLURM_ID_LEN 32

/* One job's record, as squeue or sacct gave it. */
typedef struct ob_slurm_job {
    char id[OB_SLURM_ID_LEN]; /* decimal digits */
    ob_slurm_state state;
    char reason[64];    /* squeue's reason code ("Resources", "NodeDown"); "" or "None": none */
    int have_exit;      /* the exit status below is known */
    int exit_code;      /* 0..255 */
    int term_signal;    /* the signal that ended it, 0 */
    char name[128];     /* squeue only */
    char std_out[1024]; /* squeue only: the output file as submitted */
} ob_slurm_job;

/* The state's name ("NODE_FAIL"); "UNKNOWN" for anything else. */
const char *ob_slurm_state_name(ob_slurm_state s);

/* The state for a name as squeue or sacct print it ("CANCELLED by 0" reads as CANCELLED);
 * OB_SLURM_UNKNOWN for anything else. */
ob_slurm_state ob_slurm_state_parse(const char *text, size_t len);

/* 1 for the states a job does not leave (COMPLETED, FAILED, ...). */
int ob_slurm_state_final(ob_slurm_state s);

/* The job id in `sbatch --parsable` output ("42\n" or "42;cluster\n") into id[OB_SLURM_ID_LEN].
 * OB_ERR_INVALID_ARG for anything else (an id must be 1 to 20 digits). */
ob_status ob_slurm_parse_sbatch(const char *out, char id[OB_SLURM_ID_LEN], ob_err *err);

/* The jobs in `squeue -h -O OB_SQUEUE_FORMAT` output, one per line, into jobs[cap]; *n
 * receives how many were read. Lines of another shape (a wrong number of fields, an id that
 * is not digits, an unknown state, an exit status that is not a number up to 65535) are
 * skipped and counted in *skipped (may be NULL). Never fails on content; OB_ERR_INVALID_ARG
 * only for NULL arguments. */
ob_status ob_slurm_parse_squeue(const char *out, ob_slurm_job *jobs, size_t cap, size_t *n,
                                size_t *skipped, ob_err *err);

/* The allocation's record of job id in `sacct -n -P -X -o OB_SACCT_FORMAT -j id` output
 * ("42|FAILED|1:0"; steps such as "42.batch" are passed over). *found is 0 when no line of
 * the right shape names the job. */
ob_status ob_slurm_parse_sacct(const char *out, const char *id, ob_slurm_job *job, int *found,
                               ob_err *err);

/* How a job's record reads as an attempt's end: done for an ended state, the exit status,
 * and for anything but a plain exit a reason naming the job, its state and what it means
 * ("Slurm job 42 NODE_FAIL: a node of its allocation failed"); permanent for OUT_OF_MEMORY,
 * DEADLINE, REVOKED and a CANCELLED job (cancelled outside onebitd: a restart would undo
 * someone's decision). While the job runs, reason says what it is doing when that is worth
 * knowing ("Slurm job 42 PENDING (Resources)"), else "". */
void ob_slurm_exit(const ob_slurm_job *job, ob_launch_exit *ex);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_SLURM_H */
