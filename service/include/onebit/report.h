/* A progress report from a job's workers, whether it arrives over WorkerService or as one of the
 * JSON lines rank 0 prints, and the parser of those lines. */
#ifndef ONEBIT_REPORT_H
#define ONEBIT_REPORT_H

#include "onebit/job.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A progress report from a job's workers (WorkerService, or a line of their log). */
typedef struct ob_report {
    char job_id[OB_JOB_ID_LEN];
    char kind[16];        /* start, step, freeze, eval, checkpoint, resume, notice, summary */
    ob_progress progress; /* step: every field; others: step (and freeze_step for freeze) */
    int64_t num_params;   /* start */
    int world_size;       /* start */
    int64_t ckpt_step;    /* checkpoint */
    char ckpt_path[OB_JOB_PATH_LEN];
    double eval_loss, eval_accuracy; /* eval */
    char message[256];               /* notice; a failed checkpoint's error */
    int ckpt_failed;                 /* checkpoint: it could not be written */
} ob_report;

/* Parses one line of a worker's JSON progress output into *r (job_id left empty); a leading
 * mpirun --tag-output tag ("[1,0]<stdout>:") is skipped. Returns 1 for a progress event, 0 for
 * anything else (other output, malformed lines). */
int ob_report_parse_line(const char *line, size_t len, ob_report *r);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_REPORT_H */
