/* The progress report's two wire forms (onebit/report.h): the worker's JSON lines, written and
 * read, and the WorkerService request, packed and decoded. */
#include "onebit/report.h"
#include "onebit/base.h"
#include "onebit/job_codec.h"

#include <jansson.h>
#include <math.h>
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

static void set_int(json_t *o, const char *key, int64_t v)
{
    set(o, key, json_integer((json_int_t)v));
}

/* An integer, or null when it is negative ("none"). */
static void set_int_or_null(json_t *o, const char *key, int64_t v)
{
    set(o, key, v >= 0 ? json_integer((json_int_t)v) : json_null());
}

static void write_eval(json_t *o, double loss, double accuracy, int is_text)
{
    set(o, "eval_loss", num(loss));
    set(o, "eval_accuracy", num(accuracy));
    if (is_text) set(o, "eval_bits_per_byte", num(loss / log(2.0)));
}

static void write_summary(json_t *o, const ob_report *r)
{
    const ob_report_summary *s = &r->summary;
    set_int(o, "steps", s->steps);
    set_int_or_null(o, "freeze_step", s->freeze_step);
    set(o, "final_train_loss", num(s->final_train_loss));
    write_eval(o, s->eval_loss, s->eval_accuracy, r->is_text);
    set_int(o, "bytes_sent", s->bytes_sent);
    set_int(o, "bytes_warmup", s->bytes_warmup);
    set_int(o, "bytes_compression", s->bytes_compression);
    set(o, "wall_seconds", num(s->wall_seconds));
    set(o, "samples_per_s", num(s->samples_per_s));
    set_int(o, "num_params", s->num_params);
    set_int(o, "first_step", s->first_step);
    set(o, "stopped", json_boolean(s->stopped));
    set_int_or_null(o, "last_checkpoint", s->last_checkpoint);
}

static void write_profile(json_t *o, const ob_report_profile *f)
{
    set_int(o, "steps", f->steps);
    set(o, "ms_per_step", num(f->ms_per_step));
    set(o, "data_ms", num(f->data_ms));
    set(o, "compute_ms", num(f->compute_ms));
    set(o, "allreduce_ms", num(f->allreduce_ms));
    set(o, "compress_ms", num(f->compress_ms));
    set(o, "exchange_ms", num(f->exchange_ms));
    set(o, "update_ms", num(f->update_ms));
    set(o, "wait_ms", num(f->wait_ms));
}

static void write_fields(json_t *o, const ob_report *r)
{
    const ob_progress *p = &r->progress;
    switch (r->kind) {
    case OB_REPORT_START: {
        set(o, "world_size", json_integer(r->world_size));
        set_int(o, "num_params", r->num_params);
        json_t *spec = r->spec_json ? json_loads(r->spec_json, 0, NULL) : NULL;
        set(o, "spec", spec ? spec : json_null());
        break;
    }
    case OB_REPORT_STEP:
        set_int(o, "step", p->step);
        set(o, "phase", json_string(p->phase));
        set(o, "loss", num(p->loss));
        set(o, "lr", num(p->lr));
        set(o, "samples_per_s", num(p->samples_per_s));
        set_int(o, "bytes_sent", p->bytes_sent);
        set_int(o, "bytes_step", r->bytes_step);
        set(o, "freeze_ratio", num(p->freeze_ratio));
        if (!isnan(p->worker_error_ratio)) { /* NaN: no error feedback, no keys */
            set(o, "worker_error_ratio", num(p->worker_error_ratio));
            set(o, "server_error_ratio", num(p->server_error_ratio));
            set(o, "zero_momentum_fraction", num(p->zero_momentum_fraction));
        }
        break;
    case OB_REPORT_EVAL:
        set_int(o, "step", p->step);
        write_eval(o, r->eval_loss, r->eval_accuracy, r->is_text);
        set_int(o, "eval_count", r->eval_count);
        break;
    case OB_REPORT_FREEZE:
        set_int(o, "step", p->step);
        set(o, "freeze_ratio", num(p->freeze_ratio));
        break;
    case OB_REPORT_CHECKPOINT:
        set_int(o, "step", r->ckpt_step);
        set(o, "ok", json_boolean(!r->ckpt_failed));
        if (r->ckpt_failed) {
            set(o, "error", json_string(r->message[0] ? r->message : "failed"));
            break;
        }
        set(o, "path", json_string(r->ckpt_path));
        set(o, "async", json_boolean(r->ckpt_async));
        set_int(o, "bytes", r->ckpt_bytes);
        set(o, "stall_seconds", num(r->stall_seconds));
        set(o, "write_seconds", num(r->write_seconds));
        break;
    case OB_REPORT_RESUME:
        set_int(o, "step", r->ckpt_step);
        set(o, "path", json_string(r->ckpt_path));
        set(o, "from_world_size", json_integer(r->from_world_size));
        set(o, "phase", json_string(p->phase));
        break;
    case OB_REPORT_NOTICE:
        set_int(o, "step", p->step);
        set(o, "message", json_string(r->message));
        break;
    case OB_REPORT_WARM_START:
        set_int(o, "step", p->step);
        set(o, "outcome", json_string(p->warm_start));
        set(o, "message", json_string(r->message));
        break;
    case OB_REPORT_REWARM:
        set_int(o, "step", p->step);
        set_int(o, "to_step", r->ckpt_step);
        set(o, "path", json_string(r->ckpt_path));
        set(o, "message", json_string(r->message));
        break;
    case OB_REPORT_PROFILE:
        write_profile(o, &r->profile);
        break;
    case OB_REPORT_SUMMARY:
        write_summary(o, r);
        break;
    case OB_REPORT_NONE:
        break;
    }
}

char *ob_report_to_json(const ob_report *r)
{
    if (r->kind <= OB_REPORT_NONE || r->kind >= OB_REPORT_KIND_COUNT) return NULL;
    json_t *o = json_object();
    if (!o) return NULL;
    set(o, "event", json_string(kind_names[r->kind]));
    write_fields(o, r);
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

static void read_summary(const json_t *o, ob_report *r)
{
    ob_report_summary *s = &r->summary;
    r->progress.step = s->steps = jint(o, "steps");
    s->freeze_step = jint_or(o, "freeze_step", -1);
    s->final_train_loss = jnum(o, "final_train_loss");
    s->eval_loss = jnum(o, "eval_loss");
    s->eval_accuracy = jnum(o, "eval_accuracy");
    r->is_text = json_object_get(o, "eval_bits_per_byte") != NULL;
    s->bytes_sent = jint(o, "bytes_sent");
    s->bytes_warmup = jint(o, "bytes_warmup");
    s->bytes_compression = jint(o, "bytes_compression");
    s->wall_seconds = jnum(o, "wall_seconds");
    s->samples_per_s = jnum(o, "samples_per_s");
    s->num_params = jint(o, "num_params");
    s->first_step = jint(o, "first_step");
    s->stopped = json_is_true(json_object_get(o, "stopped"));
    s->last_checkpoint = jint_or(o, "last_checkpoint", -1);
}

static void read_profile(const json_t *o, ob_report_profile *f)
{
    f->steps = jint(o, "steps");
    f->ms_per_step = jnum(o, "ms_per_step");
    f->data_ms = jnum(o, "data_ms");
    f->compute_ms = jnum(o, "compute_ms");
    f->allreduce_ms = jnum(o, "allreduce_ms");
    f->compress_ms = jnum(o, "compress_ms");
    f->exchange_ms = jnum(o, "exchange_ms");
    f->update_ms = jnum(o, "update_ms");
    f->wait_ms = jnum(o, "wait_ms"); /* 0 from a worker that does not report it */
}

static void read_fields(const json_t *o, ob_report *r)
{
    ob_progress *p = &r->progress;
    switch (r->kind) {
    case OB_REPORT_START:
        r->num_params = jint(o, "num_params");
        r->world_size = (int)jint(o, "world_size");
        break;
    case OB_REPORT_STEP:
        p->step = jint(o, "step");
        p->loss = jnum(o, "loss");
        ob_strlcpy(p->phase, jstr(o, "phase"), sizeof p->phase);
        p->samples_per_s = jnum(o, "samples_per_s");
        p->bytes_sent = jint(o, "bytes_sent");
        r->bytes_step = jint(o, "bytes_step");
        p->lr = jnum(o, "lr");
        p->freeze_ratio = jnum(o, "freeze_ratio");
        p->worker_error_ratio = jnum(o, "worker_error_ratio");
        p->server_error_ratio = jnum(o, "server_error_ratio");
        p->zero_momentum_fraction = jnum(o, "zero_momentum_fraction");
        break;
    case OB_REPORT_EVAL:
        p->step = jint(o, "step");
        r->eval_loss = jnum(o, "eval_loss");
        r->eval_accuracy = jnum(o, "eval_accuracy");
        r->eval_count = jint(o, "eval_count");
        r->is_text = json_object_get(o, "eval_bits_per_byte") != NULL;
        break;
    case OB_REPORT_FREEZE:
        p->step = p->freeze_step = jint(o, "step");
        p->freeze_ratio = jnum(o, "freeze_ratio");
        break;
    case OB_REPORT_CHECKPOINT:
    case OB_REPORT_RESUME:
        p->step = r->ckpt_step = jint(o, "step");
        ob_strlcpy(r->ckpt_path, jstr(o, "path"), sizeof r->ckpt_path);
        r->ckpt_failed = json_is_false(json_object_get(o, "ok"));
        r->ckpt_async = json_is_true(json_object_get(o, "async"));
        r->ckpt_bytes = jint(o, "bytes");
        r->stall_seconds = jnum(o, "stall_seconds");
        r->write_seconds = jnum(o, "write_seconds");
        r->from_world_size = (int)jint(o, "from_world_size");
        ob_strlcpy(r->message, jstr(o, "error"), sizeof r->message);
        if (r->kind == OB_REPORT_RESUME) ob_strlcpy(p->phase, jstr(o, "phase"), sizeof p->phase);
        break;
    case OB_REPORT_NOTICE:
        p->step = jint(o, "step");
        ob_strlcpy(r->message, jstr(o, "message"), sizeof r->message);
        break;
    case OB_REPORT_WARM_START:
        p->step = jint(o, "step");
        ob_strlcpy(p->warm_start, jstr(o, "outcome"), sizeof p->warm_start);
        ob_strlcpy(r->message, jstr(o, "message"), sizeof r->message);
        break;
    case OB_REPORT_REWARM:
        p->step = jint(o, "step");
        r->ckpt_step = jint(o, "to_step");
        ob_strlcpy(r->ckpt_path, jstr(o, "path"), sizeof r->ckpt_path);
        ob_strlcpy(r->message, jstr(o, "message"), sizeof r->message);
        break;
    case OB_REPORT_PROFILE:
        read_profile(o, &r->profile);
        break;
    case OB_REPORT_SUMMARY:
        read_summary(o, r);
        break;
    case OB_REPORT_NONE:
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
    if (r->kind != OB_REPORT_NONE) read_fields(o, r);
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
