/* The progress report's two wire forms (onebit/report.h): the worker's JSON lines, written and
 * read, and the WorkerService request, packed and decoded. */
#include "onebit/report.h"
#include "onebit/base.h"
#include "onebit/job_codec.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

static const char *const kind_names[OB_REPORT_KIND_COUNT] = {
    [OB_REPORT_NONE] = "",
    [OB_REPORT_START] = "start",
    [OB_REPORT_STEP] = "step",
    [OB_REPORT_EVAL] = "eval",
    [OB_REPORT_FREEZE] = "freeze",
    [OB_REPORT_CHECKPOINT] = "checkpoint",
    [OB_REPORT_RESUME] = "resume",
    [OB_REPORT_NOTICE] = "notice",
    [OB_REPORT_PROFILE] = "profile",
    [OB_REPORT_SUMMARY] = "summary",
    [OB_REPORT_WARM_START] = "warm_start",
    [OB_REPORT_REWARM] = "rewarm",
};

const char *ob_report_kind_name(ob_report_kind kind)
{
    return kind > OB_REPORT_NONE && kind < OB_REPORT_KIND_COUNT ? kind_names[kind] : "";
}

ob_report_kind ob_report_kind_parse(const char *text)
{
    if (!text) return OB_REPORT_NONE;
    for (int k = 1; k < OB_REPORT_KIND_COUNT; k++)
        if (!strcmp(text, kind_names[k])) return (ob_report_kind)k;
    return OB_REPORT_NONE;
}

/* ---- the fields of a JSON line ---------------------------------------------------------- */

/* How a field is held in ob_report and written in JSON. */
typedef enum field_type {
    F_INT,         /* int64_t */
    F_INT_OR_NULL, /* int64_t; negative ("none") written as null; missing or null read as -1 */
    F_INT32,       /* int */
    F_NUM,         /* double; not finite written as null (JSON has no NaN) */
    F_STR,         /* char[size] */
    F_BOOL,        /* int, a JSON boolean */
    F_FAILED, /* int ckpt_failed, as "ok": true when written; read: failed when "ok" is false */
    F_BITS,   /* double loss per byte, written in bits (loss / ln 2) for text models (is_text)
                 only; read: the key's presence sets is_text */
    F_SPEC,   /* const char *spec_json, written as the JSON object it holds (null if none);
                 never read */
    F_ERROR,  /* char message[size], written (or "failed") for a failed checkpoint only */
} field_type;

/* When a field is written (it is read whenever the line has it). */
typedef enum field_when {
    W_ALWAYS,
    W_ERROR_FEEDBACK, /* the compression health: only when computed (worker_error_ratio not NaN) */
    W_CKPT_OK,        /* only for a checkpoint that was written */
    W_READ_ONLY,      /* never: a key the reader takes from the line, as it always has */
} field_when;

typedef struct field {
    const char *name; /* the JSON key */
    field_type type;
    size_t offset, size; /* of the member in ob_report */
    field_when when;
    size_t also; /* F_INT read: the value also goes to this int64_t member (0: nowhere;
                    offset 0, job_id, never is one) */
} field;

#define FIELD(key, t, member)                                                                      \
    .name = key, .type = t, .offset = offsetof(ob_report, member),                                 \
    .size = sizeof(((ob_report *)0)->member)
#define ALSO(member) .also = offsetof(ob_report, member)

/* Each kind's keys, in the order a line has them after "event". */
static const field start_fields[] = {
    {FIELD("world_size", F_INT32, world_size)},
    {FIELD("num_params", F_INT, num_params)},
    {FIELD("spec", F_SPEC, spec_json)},
};
static const field step_fields[] = {
    {FIELD("step", F_INT, progress.step)},
    {FIELD("phase", F_STR, progress.phase)},
    {FIELD("loss", F_NUM, progress.loss)},
    {FIELD("lr", F_NUM, progress.lr)},
    {FIELD("samples_per_s", F_NUM, progress.samples_per_s)},
    {FIELD("bytes_sent", F_INT, progress.bytes_sent)},
    {FIELD("bytes_step", F_INT, bytes_step)},
    {FIELD("freeze_ratio", F_NUM, progress.freeze_ratio)},
    {FIELD("worker_error_ratio", F_NUM, progress.worker_error_ratio), .when = W_ERROR_FEEDBACK},
    {FIELD("server_error_ratio", F_NUM, progress.server_error_ratio), .when = W_ERROR_FEEDBACK},
    {FIELD("zero_momentum_fraction", F_NUM, progress.zero_momentum_fraction),
     .when = W_ERROR_FEEDBACK},
};
static const field eval_fields[] = {
    {FIELD("step", F_INT, progress.step)},
    {FIELD("eval_loss", F_NUM, eval_loss)},
    {FIELD("eval_accuracy", F_NUM, eval_accuracy)},
    {FIELD("eval_bits_per_byte", F_BITS, eval_loss)},
    {FIELD("eval_count", F_INT, eval_count)},
};
static const field freeze_fields[] = {
    {FIELD("step", F_INT, progress.step), ALSO(progress.freeze_step)},
    {FIELD("freeze_ratio", F_NUM, progress.freeze_ratio)},
};
static const field checkpoint_fields[] = {
    {FIELD("step", F_INT, ckpt_step), ALSO(progress.step)},
    {FIELD("ok", F_FAILED, ckpt_failed)},
    {FIELD("error", F_ERROR, message)},
    {FIELD("path", F_STR, ckpt_path), .when = W_CKPT_OK},
    {FIELD("async", F_BOOL, ckpt_async), .when = W_CKPT_OK},
    {FIELD("bytes", F_INT, ckpt_bytes), .when = W_CKPT_OK},
    {FIELD("stall_seconds", F_NUM, stall_seconds), .when = W_CKPT_OK},
    {FIELD("write_seconds", F_NUM, write_seconds), .when = W_CKPT_OK},
    {FIELD("from_world_size", F_INT32, from_world_size), .when = W_READ_ONLY},
};
static const field resume_fields[] = {
    {FIELD("step", F_INT, ckpt_step), ALSO(progress.step)},
    {FIELD("path", F_STR, ckpt_path)},
    {FIELD("from_world_size", F_INT32, from_world_size)},
    {FIELD("phase", F_STR, progress.phase)},
    {FIELD("ok", F_FAILED, ckpt_failed), .when = W_READ_ONLY},
    {FIELD("async", F_BOOL, ckpt_async), .when = W_READ_ONLY},
    {FIELD("bytes", F_INT, ckpt_bytes), .when = W_READ_ONLY},
    {FIELD("stall_seconds", F_NUM, stall_seconds), .when = W_READ_ONLY},
    {FIELD("write_seconds", F_NUM, write_seconds), .when = W_READ_ONLY},
    {FIELD("error", F_ERROR, message), .when = W_READ_ONLY},
};
static const field notice_fields[] = {
    {FIELD("step", F_INT, progress.step)},
    {FIELD("message", F_STR, message)},
};
static const field warm_start_fields[] = {
    {FIELD("step", F_INT, progress.step)},
    {FIELD("outcome", F_STR, progress.warm_start)},
    {FIELD("message", F_STR, message)},
};
static const field rewarm_fields[] = {
    {FIELD("step", F_INT, progress.step)},
    {FIELD("to_step", F_INT, ckpt_step)},
    {FIELD("path", F_STR, ckpt_path)},
    {FIELD("message", F_STR, message)},
};
static const field profile_fields[] = {
    {FIELD("steps", F_INT, profile.steps)},
    {FIELD("ms_per_step", F_NUM, profile.ms_per_step)},
    {FIELD("data_ms", F_NUM, profile.data_ms)},
    {FIELD("compute_ms", F_NUM, profile.compute_ms)},
    {FIELD("allreduce_ms", F_NUM, profile.allreduce_ms)},
    {FIELD("compress_ms", F_NUM, profile.compress_ms)},
    {FIELD("exchange_ms", F_NUM, profile.exchange_ms)},
    {FIELD("update_ms", F_NUM, profile.update_ms)},
    {FIELD("wait_ms", F_NUM, profile.wait_ms)}, /* 0 from a worker that does not report it */
};
static const field summary_fields[] = {
    {FIELD("steps", F_INT, summary.steps), ALSO(progress.step)},
    {FIELD("freeze_step", F_INT_OR_NULL, summary.freeze_step)},
    {FIELD("final_train_loss", F_NUM, summary.final_train_loss)},
    {FIELD("eval_loss", F_NUM, summary.eval_loss)},
    {FIELD("eval_accuracy", F_NUM, summary.eval_accuracy)},
    {FIELD("eval_bits_per_byte", F_BITS, summary.eval_loss)},
    {FIELD("bytes_sent", F_INT, summary.bytes_sent)},
    {FIELD("bytes_warmup", F_INT, summary.bytes_warmup)},
    {FIELD("bytes_compression", F_INT, summary.bytes_compression)},
    {FIELD("wall_seconds", F_NUM, summary.wall_seconds)},
    {FIELD("samples_per_s", F_NUM, summary.samples_per_s)},
    {FIELD("num_params", F_INT, summary.num_params)},
    {FIELD("first_step", F_INT, summary.first_step)},
    {FIELD("stopped", F_BOOL, summary.stopped)},
    {FIELD("last_checkpoint", F_INT_OR_NULL, summary.last_checkpoint)},
};

#define FIELDS(t)                                                                                  \
    {                                                                                              \
        t, sizeof t / sizeof t[0]                                                                  \
    }
static const struct {
    const field *f;
    size_t n;
} kind_fields[OB_REPORT_KIND_COUNT] = {
    [OB_REPORT_START] = FIELDS(start_fields),
    [OB_REPORT_STEP] = FIELDS(step_fields),
    [OB_REPORT_EVAL] = FIELDS(eval_fields),
    [OB_REPORT_FREEZE] = FIELDS(freeze_fields),
    [OB_REPORT_CHECKPOINT] = FIELDS(checkpoint_fields),
    [OB_REPORT_RESUME] = FIELDS(resume_fields),
    [OB_REPORT_NOTICE] = FIELDS(notice_fields),
    [OB_REPORT_PROFILE] = FIELDS(profile_fields),
    [OB_REPORT_SUMMARY] = FIELDS(summary_fields),
    [OB_REPORT_WARM_START] = FIELDS(warm_start_fields),
    [OB_REPORT_REWARM] = FIELDS(rewarm_fields),
};

/* ---- writing a JSON line ------------------------------------------------------------------ */

/* A number, or null when it is not finite (JSON has no NaN). */
static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static void set(json_t *o, const char *key, json_t *v)
{
    json_object_set_new(o, key, v);
}

static int written(const ob_report *r, const field *f)
{
    switch (f->when) {
    case W_ALWAYS:
        break;
    case W_ERROR_FEEDBACK:
        return !isnan(r->progress.worker_error_ratio);
    case W_CKPT_OK:
        return !r->ckpt_failed;
    case W_READ_ONLY:
        return 0;
    }
    switch (f->type) {
    case F_BITS:
        return r->is_text;
    case F_ERROR:
        return r->ckpt_failed;
    default:
        return 1;
    }
}

static void write_field(json_t *o, const ob_report *r, const field *f)
{
    const char *at = (const char *)r + f->offset;
    switch (f->type) {
    case F_INT:
        set(o, f->name, json_integer((json_int_t)(*(const int64_t *)at)));
        break;
    case F_INT_OR_NULL: {
        int64_t v = *(const int64_t *)at;
        set(o, f->name, v >= 0 ? json_integer((json_int_t)v) : json_null());
        break;
    }
    case F_INT32:
        set(o, f->name, json_integer(*(const int *)at));
        break;
    case F_NUM:
        set(o, f->name, num(*(const double *)at));
        break;
    case F_STR:
        set(o, f->name, json_string(at));
        break;
    case F_BOOL:
        set(o, f->name, json_boolean(*(const int *)at));
        break;
    case F_FAILED:
        set(o, f->name, json_boolean(!*(const int *)at));
        break;
    case F_BITS:
        set(o, f->name, num(*(const double *)at / log(2.0)));
        break;
    case F_SPEC: {
        const char *spec = *(const char *const *)at;
        json_t *j = spec ? json_loads(spec, 0, NULL) : NULL;
        set(o, f->name, j ? j : json_null());
        break;
    }
    case F_ERROR:
        set(o, f->name, json_string(at[0] ? at : "failed"));
        break;
    }
}

char *ob_report_to_json(const ob_report *r)
{
    if (r->kind <= OB_REPORT_NONE || r->kind >= OB_REPORT_KIND_COUNT) return NULL;
    json_t *o = json_object();
    if (!o) return NULL;
    set(o, "event", json_string(kind_names[r->kind]));
    for (size_t i = 0; i < kind_fields[r->kind].n; i++) {
        const field *f = &kind_fields[r->kind].f[i];
        if (written(r, f)) write_field(o, r, f);
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
    json_decref(o);
    return s;
}

/* ---- reading a JSON line ------------------------------------------------------------------ */

static double jnum(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static int64_t jint_or(const json_t *o, const char *key, int64_t missing)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_integer(v)) return json_integer_value(v);
    if (!json_is_number(v)) return missing;
    /* A real beyond int64 (1e47, say) is no count: converting it would be undefined. */
    double x = json_number_value(v);
    return x >= -9.2e18 && x <= 9.2e18 ? (int64_t)x : missing;
}

static int64_t jint(const json_t *o, const char *key)
{
    return jint_or(o, key, 0);
}

static const char *jstr(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* mpirun --tag-output: "[JOB,RANK]<stdout>:" or "<stderr>:". */
static size_t mpirun_tag(const char *line, size_t len, long *rank, ob_log_stream *stream)
{
    static const char *const names[] = {"<stdout>:", "<stderr>:"};
    size_t i = 1, comma = 0;
    if (len == 0 || line[0] != '[') return 0;
    for (; i < len && line[i] != ']' && i < 24; i++) {
        if (line[i] == ',' && !comma)
            comma = i;
        else if (line[i] < '0' || line[i] > '9')
            return 0;
    }
    /* A rank of at most 9 digits: longer ones are no tag (and would overflow). */
    if (i >= len || line[i] != ']' || !comma || comma + 1 == i || i - comma - 1 > 9) return 0;
    long r = 0;
    for (size_t k = comma + 1; k < i; k++)
        r = r * 10 + (line[k] - '0');
    i++;
    for (int s = 0; s < 2; s++) {
        size_t n = strlen(names[s]);
        if (len - i >= n && memcmp(line + i, names[s], n) == 0) {
            *rank = r;
            *stream = s == 0 ? OB_LOG_STDOUT : OB_LOG_STDERR;
            return i + n;
        }
    }
    return 0;
}

/* srun --label: the task number right-aligned with spaces, then ": " ("  3: text"). */
static size_t srun_tag(const char *line, size_t len, long *rank, ob_log_stream *stream)
{
    size_t i = 0;
    while (i < len && i < 8 && line[i] == ' ')
        i++;
    size_t digits = i;
    long r = 0;
    while (i < len && line[i] >= '0' && line[i] <= '9' && i - digits < 7)
        r = r * 10 + (line[i++] - '0');
    if (i == digits || i + 1 >= len || line[i] != ':' || line[i + 1] != ' ') return 0;
    *rank = r;
    *stream = OB_LOG_ANY;
    return i + 2;
}

size_t ob_log_tag(const char *line, size_t len, long *rank, ob_log_stream *stream)
{
    long r = -1;
    ob_log_stream s = OB_LOG_UNTAGGED;
    size_t n = mpirun_tag(line, len, &r, &s);
    if (n == 0) n = srun_tag(line, len, &r, &s);
    if (rank) *rank = n ? r : -1;
    if (stream) *stream = n ? s : OB_LOG_UNTAGGED;
    return n;
}

static void read_field(const json_t *o, ob_report *r, const field *f)
{
    char *at = (char *)r + f->offset;
    const json_t *v = json_object_get(o, f->name);
    switch (f->type) {
    case F_INT: {
        int64_t x = jint(o, f->name);
        *(int64_t *)at = x;
        if (f->also) *(int64_t *)((char *)r + f->also) = x;
        break;
    }
    case F_INT_OR_NULL:
        *(int64_t *)at = jint_or(o, f->name, -1);
        break;
    case F_INT32:
        *(int *)at = (int)jint(o, f->name);
        break;
    case F_NUM:
        *(double *)at = jnum(o, f->name);
        break;
    case F_STR:
    case F_ERROR:
        ob_strlcpy(at, jstr(o, f->name), f->size);
        break;
    case F_BOOL:
        *(int *)at = json_is_true(v);
        break;
    case F_FAILED:
        *(int *)at = json_is_false(v);
        break;
    case F_BITS:
        r->is_text = v != NULL;
        break;
    case F_SPEC:
        break;
    }
}

int ob_report_parse_line(const char *line, size_t len, ob_report *r)
{
    memset(r, 0, sizeof *r);
    ob_log_stream stream;
    size_t tag = ob_log_tag(line, len, NULL, &stream);
    if (stream == OB_LOG_STDERR) return 0;
    line += tag;
    len -= tag;
    if (len < 2 || line[0] != '{') return 0;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
    if (!o) return 0;
    r->kind = ob_report_kind_parse(jstr(o, "event"));
    for (size_t i = 0; r->kind != OB_REPORT_NONE && i < kind_fields[r->kind].n; i++)
        read_field(o, r, &kind_fields[r->kind].f[i]);
    json_decref(o);
    return r->kind != OB_REPORT_NONE;
}

/* ---- protobuf ----------------------------------------------------------------------------- */

ob_status ob_report_pack(const ob_report *r, uint8_t **buf, size_t *len, ob_err *err)
{
    *buf = NULL;
    *len = 0;
    /* A number that is not finite travels as 0, as a JSON line's null reads: both paths give
     * the coordinator the same report. */
    ob_progress prog = r->progress;
    double *nums[] = {&prog.loss,
                      &prog.samples_per_s,
                      &prog.lr,
                      &prog.freeze_ratio,
                      &prog.worker_error_ratio,
                      &prog.server_error_ratio,
                      &prog.zero_momentum_fraction};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (!isfinite(*nums[i])) *nums[i] = 0.0;
    Onebit__V1__Progress p;
    ob_progress_to_pb(&prog, &p);
    Onebit__V1__Checkpoint ck = ONEBIT__V1__CHECKPOINT__INIT;
    ck.step = r->ckpt_step;
    ck.path = (char *)r->ckpt_path;
    Onebit__V1__ReportProgressRequest q = ONEBIT__V1__REPORT_PROGRESS_REQUEST__INIT;
    q.job_id = (char *)r->job_id;
    q.kind = (char *)ob_report_kind_name(r->kind);
    q.progress = &p;
    q.checkpoint = &ck;
    q.num_params = r->num_params;
    q.world_size = r->world_size;
    q.eval_loss = isfinite(r->eval_loss) ? r->eval_loss : 0.0;
    q.eval_accuracy = isfinite(r->eval_accuracy) ? r->eval_accuracy : 0.0;
    q.message = (char *)r->message;
    q.checkpoint_failed = r->ckpt_failed;
    size_t n = onebit__v1__report_progress_request__get_packed_size(&q);
    *buf = malloc(n ? n : 1);
    if (!*buf) return OB_ERR(err, OB_ERR_NOMEM, "packing a progress report");
    *len = onebit__v1__report_progress_request__pack(&q, *buf);
    return OB_OK;
}

ob_status ob_report_from_pb(const Onebit__V1__ReportProgressRequest *q, ob_report *out, ob_err *err)
{
    memset(out, 0, sizeof *out);
    if (strlen(q->job_id) >= sizeof out->job_id)
        return OB_ERR(err, OB_ERR_NOT_FOUND, "no job with id '%.64s...'", q->job_id);
    ob_strlcpy(out->job_id, q->job_id, sizeof out->job_id);
    out->kind = ob_report_kind_parse(q->kind);
    if (out->kind == OB_REPORT_NONE)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "kind: unknown progress kind '%.32s'", q->kind);
    ob_progress_from_pb(q->progress, &out->progress);
    if (q->checkpoint) {
        out->ckpt_step = q->checkpoint->step;
        ob_strlcpy(out->ckpt_path, q->checkpoint->path, sizeof out->ckpt_path);
    }
    out->num_params = q->num_params;
    out->world_size = q->world_size;
    out->eval_loss = q->eval_loss;
    out->eval_accuracy = q->eval_accuracy;
    ob_strlcpy(out->message, q->message, sizeof out->message);
    out->ckpt_failed = q->checkpoint_failed;
    return OB_OK;
}
