/* A progress report of a job's workers: the one struct for every event rank 0 tells the world
 * (start, step, eval, freeze, checkpoint, resume, notice, profile, summary), and its two wire
 * forms, both written and read here and nowhere else:
 *
 *   - a JSON line, what onebit-worker prints on stdout ({"event":"step","step":20,...}); the
 *     coordinator reads these lines from the workers' log when they do not report over gRPC;
 *   - a onebit.v1.ReportProgressRequest, what the worker sends to WorkerService (ob_reporter in
 *     onebit/rpc_client.h) and the gRPC server decodes.
 *
 * The worker fills one ob_report per event and hands the same struct to both; nobody parses
 * our own text back in the process that wrote it. */
#ifndef ONEBIT_REPORT_H
#define ONEBIT_REPORT_H

#include "onebit/job.h"
#include "onebit/status.h"
#include "onebit/v1/worker.pb-c.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ob_report_kind {
    OB_REPORT_NONE = 0,
    OB_REPORT_START,      /* the ranks are set up */
    OB_REPORT_STEP,       /* a logged step */
    OB_REPORT_EVAL,       /* an evaluation on the held-out split */
    OB_REPORT_FREEZE,     /* the variance was frozen: compression begins */
    OB_REPORT_CHECKPOINT, /* a checkpoint was committed, or failed */
    OB_REPORT_RESUME,     /* training resumed from a checkpoint */
    OB_REPORT_NOTICE,     /* something a person should know (a skipped checkpoint, ...) */
    OB_REPORT_PROFILE,    /* where rank 0's step time went (--profile) */
    OB_REPORT_SUMMARY,    /* the run ended */
    OB_REPORT_WARM_START, /* what a warm start did: progress.warm_start, message */
    OB_REPORT_REWARM,     /* a divergence rolled back: step, ckpt_step, ckpt_path, message */
} ob_report_kind;

#define OB_REPORT_KIND_COUNT 12
#define OB_REPORT_MSG_LEN 1024

/* "step", "eval", ... (the "event" of a JSON line, the kind of a ReportProgressRequest); ""
 * for OB_REPORT_NONE and anything out of range. Static string. */
const char *ob_report_kind_name(ob_report_kind kind);

/* The kind named text; OB_REPORT_NONE for anything else. */
ob_report_kind ob_report_kind_parse(const char *text);

/* Where rank 0's time per step went, in milliseconds (OB_REPORT_PROFILE). wait_ms: with the
 * compression phase overlapped, what the steps waited for segments still in flight (compress_ms
 * and exchange_ms then ran beside the compute); 0 otherwise. */
typedef struct ob_report_profile {
    int64_t steps; /* steps timed */
    double ms_per_step, data_ms, compute_ms, allreduce_ms, compress_ms, exchange_ms, update_ms;
    double wait_ms;
} ob_report_profile;

/* The end of a run (OB_REPORT_SUMMARY). */
typedef struct ob_report_summary {
    int64_t steps;
    int64_t freeze_step; /* -1: never froze */
    double final_train_loss, eval_loss, eval_accuracy;
    int64_t bytes_sent, bytes_warmup, bytes_compression; /* rank 0's optimizer traffic */
    double wall_seconds, samples_per_s;
    int64_t num_params;
    int64_t first_step;      /* > 1 after a resume */
    int stopped;             /* a stop request (signal, cancel) ended the run early */
    int64_t last_checkpoint; /* -1: none */
} ob_report_summary;

typedef struct ob_report {
    char job_id[OB_JOB_ID_LEN]; /* whose report; set by the sender, not part of a JSON line */
    ob_report_kind kind;
    /* STEP: step, phase, loss, lr, samples_per_s, bytes_sent, freeze_ratio, and the compression
     * health (worker_error_ratio, server_error_ratio, zero_momentum_fraction; NaN when not
     * computed: the keys are left out of the JSON line, and read back as 0); FREEZE: step =
     * freeze_step, freeze_ratio; RESUME: step, phase; every other kind: step. */
    ob_progress progress;
    int64_t bytes_step; /* STEP: this rank's traffic in the step */
    /* START */
    int world_size;
    int64_t num_params;
    const char *spec_json; /* the canonical spec, borrowed; written, never read back (NULL) */
    /* EVAL (and is_text for SUMMARY): loss per example, or per byte for text (then also in
     * bits per byte) */
    double eval_loss, eval_accuracy;
    int64_t eval_count;
    int is_text;
    /* CHECKPOINT and RESUME */
    int64_t ckpt_step;
    char ckpt_path[OB_JOB_PATH_LEN];
    int ckpt_failed; /* CHECKPOINT: it could not be written; message says why */
    int ckpt_async;
    int64_t ckpt_bytes;
    double stall_seconds, write_seconds;
    int from_world_size; /* RESUME: the world size that wrote the checkpoint */
    /* NOTICE and WARM_START: the text; a failed CHECKPOINT: the error */
    char message[OB_REPORT_MSG_LEN];
    ob_report_profile profile; /* PROFILE */
    ob_report_summary summary; /* SUMMARY */
} ob_report;

/* ---- JSON lines --------------------------------------------------------------------------- */

/* The report as one compact JSON object without a newline, keys in a fixed order, numbers with
 * 7 significant digits, non-finite numbers as null. Returns a malloc'd string (free()), NULL
 * when memory runs out or the kind is not a report kind. */
char *ob_report_to_json(const ob_report *r);

/* The rank tag a launcher puts before every line of the workers' log: mpirun --tag-output's
 * "[1,3]<stdout>:" or "[1,3]<stderr>:", or srun --label's "3: " (the rank right-aligned with
 * spaces; srun does not say which stream). */
typedef enum ob_log_stream {
    OB_LOG_UNTAGGED = 0, /* no tag: the launcher's own lines, onebitd's attempt banners */
    OB_LOG_STDOUT,
    OB_LOG_STDERR,
    OB_LOG_ANY, /* srun: stdout or stderr */
} ob_log_stream;

/* Reads the tag at the start of line[0..len): returns its length (0 when the line has none),
 * with the rank in *rank (-1 without a tag) and the stream in *stream; both may be NULL. The
 * one reader of this format: the supervisor, the report parser and onebitctl logs use it. */
size_t ob_log_tag(const char *line, size_t len, long *rank, ob_log_stream *stream);

/* Parses one line of a worker's output into *r (job_id left empty, spec_json NULL); a leading
 * rank tag (ob_log_tag) is skipped, and lines tagged as stderr are not reports. Returns 1 for a
 * report, 0 for anything else (other output, malformed lines, unknown events). Missing or null
 * numbers read as 0, except the summary's freeze_step and last_checkpoint, which read as -1. */
int ob_report_parse_line(const char *line, size_t len, ob_report *r);

/* ---- protobuf ------------------------------------------------------------------------------ */

/* The report as a packed ReportProgressRequest for r->job_id. *buf is malloc'd (free()). */
ob_status ob_report_pack(const ob_report *r, uint8_t **buf, size_t *len, ob_err *err);

/* Decodes a request (borrowed). A job id too long to exist is OB_ERR_NOT_FOUND; an unknown kind
 * OB_ERR_INVALID_ARG ("kind: ..."). */
ob_status ob_report_from_pb(const Onebit__V1__ReportProgressRequest *q, ob_report *out,
                            ob_err *err);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_REPORT_H */
