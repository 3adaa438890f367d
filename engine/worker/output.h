/* What rank 0 of onebit-worker tells the world: the trainer's events as progress reports, each
 * printed as a JSON line (onebit/report.h, the format onebitd reads) or as aligned text, and sent
 * to onebitd's WorkerService when the worker was given --report. Other ranks print only their
 * own failures (to stderr). */
#ifndef ONEBIT_WORKER_OUTPUT_H
#define ONEBIT_WORKER_OUTPUT_H

#include "onebit/jobspec.h"
#include "onebit/rpc_client.h"
#include "onebit/trainer.h"

#include <signal.h>

typedef enum { FORMAT_JSON, FORMAT_TEXT } worker_format;

typedef struct worker_output {
    worker_format format;
    int rank;
    ob_reporter *reporter;                 /* borrowed; NULL: print only */
    volatile sig_atomic_t *stop_requested; /* set when onebitd answers that it cancels the job */
} worker_output;

/* An ob_train_callback: user is a worker_output. */
void worker_output_event(const ob_train_event *ev, void *user);

/* The start of training: spec_json is the canonical spec (borrowed). */
void worker_output_start(const worker_output *o, const ob_jobspec *spec, const char *spec_json,
                         int world, size_t params);

/* The profile (when one was taken) and the summary of the run. */
void worker_output_summary(const worker_output *o, const ob_train_summary *s, int is_text);

#endif /* ONEBIT_WORKER_OUTPUT_H */
