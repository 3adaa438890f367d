/* How onebitctl shows jobs: tables for people, proto3 JSON for scripts, a live progress bar on
 * a terminal and plain lines elsewhere. Everything writes to the FILE it is given. */
#ifndef ONEBITCTL_RENDER_H
#define ONEBITCTL_RENDER_H

#include "onebit/job.h"

#include <stdio.h>

/* "1.23 MB", "512 B", ... */
void obctl_fmt_bytes(char *out, size_t cap, double bytes);
/* "3m12s ago" style age of a Unix-ms time; "-" for 0. */
void obctl_fmt_age(char *out, size_t cap, int64_t ms, int64_t now_ms);

/* The job in detail (status). */
void obctl_print_job(FILE *f, const ob_job *j);
/* One table of jobs (list); header included. */
void obctl_print_jobs(FILE *f, const ob_job *jobs, size_t n);
void obctl_print_checkpoints(FILE *f, const ob_checkpoint_info *c, size_t n);
/* The closing summary of a job: state, steps, loss, freeze step, communication saved. */
void obctl_print_summary(FILE *f, const ob_job *j);

/* JSON (one document, indented) of a job, a list of jobs, checkpoints, an event. */
void obctl_print_job_json(FILE *f, const ob_job *j);
void obctl_print_jobs_json(FILE *f, const ob_job *jobs, size_t n);
void obctl_print_checkpoints_json(FILE *f, const ob_checkpoint_info *c, size_t n);
void obctl_print_event_json(FILE *f, const ob_job_event *e); /* compact, one line */

/* A plain line for an event (watch when not on a terminal). */
void obctl_print_event_line(FILE *f, const ob_job_event *e);

/* The live bar: redraws one line with \r (width columns). */
void obctl_draw_bar(FILE *f, const ob_job_event *e, const char *job_id, int restarts, int width);

#endif /* ONEBITCTL_RENDER_H */
