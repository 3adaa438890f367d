/* Jobs, events and checkpoints to and from proto3 JSON and protobuf-c messages (see
 * onebit/job_codec.h). */
#include "onebit/job_codec.h"
#include "onebit/base.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON out -------------------------------------------------------------------------------- */

static json_t *i64(int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return json_string(buf);
}

static json_t *dbl(double v)
{
    if (isnan(v)) return json_string("NaN");
    if (isinf(v)) return json_string(v > 0 ? "Infinity" : "-Infinity");
    return json_real(v);
}

static json_t *state_json(ob_job_state s)
{
    char buf[48];
    snprintf(buf, sizeof buf, "JOB_STATE_%s", ob_job_state_name(s));
    return json_string(buf);
}

json_t *ob_progress_to_json(const ob_progress *p)
{
    json_t *o = json_object();
    json_object_set_new(o, "step", i64(p->step));
    json_object_set_new(o, "totalSteps", i64(p->total_steps));
    json_object_set_new(o, "loss", dbl(p->loss));
    json_object_set_new(o, "phase", json_string(p->phase));
    json_object_set_new(o, "freezeStep", i64(p->freeze_step));
    json_object_set_new(o, "samplesPerS", dbl(p->samples_per_s));
    json_object_set_new(o, "bytesSent", i64(p->bytes_sent));
    json_object_set_new(o, "bytesUncompressed", i64(p->bytes_uncompressed));
    json_object_set_new(o, "lr", dbl(p->lr));
    json_object_set_new(o, "freezeRatio", dbl(p->freeze_ratio));
    json_object_set_new(o, "evalStep", i64(p->eval_step));
    json_object_set_new(o, "evalLoss", dbl(p->eval_loss));
    json_object_set_new(o, "evalAccuracy", dbl(p->eval_accuracy));
    json_object_set_new(o, "warmStart", json_string(p->warm_start));
    json_object_set_new(o, "workerErrorRatio", dbl(p->worker_error_ratio));
    json_object_set_new(o, "serverErrorRatio", dbl(p->server_error_ratio));
    json_object_set_new(o, "zeroMomentumFraction", dbl(p->zero_momentum_fraction));
    json_object_set_new(o, "rewarms", i64(p->rewarms));
    return o;
}

json_t *ob_labels_to_json(const char *labels)
{
    json_t *o = json_object();
    for (const char *p = labels; o && p && *p;) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        size_t klen = eq ? (size_t)(eq - p) : len;
        char kv[OB_LABELS_LEN];
        if (len >= sizeof kv) break;
        memcpy(kv, p, len);
        kv[len] = '\0';
        kv[klen] = '\0';
        json_object_set_new(o, kv, json_string(eq ? kv + klen + 1 : ""));
        p += len;
        if (*p == ',') p++;
    }
    return o;
}

static json_t *checkpoint_json(int64_t step, const char *path, int64_t ms)
{
    json_t *o = json_object();
    json_object_set_new(o, "step", i64(step));
    json_object_set_new(o, "path", json_string(path));
    json_object_set_new(o, "timeUnixMs", i64(ms));
    return o;
}

json_t *ob_checkpoint_info_to_json(const ob_checkpoint_info *c)
{
    json_t *o = checkpoint_json(c->step, c->path, c->time_ms);
    json_object_set_new(o, "worldSize", json_integer(c->world_size));
    json_object_set_new(o, "phase", json_string(c->phase));
    json_object_set_new(o, "freezeStep", i64(c->freeze_step));
    json_object_set_new(o, "problem", json_string(c->problem));
    return o;
}

json_t *ob_job_to_json(const ob_job *j)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "name", json_string(j->name));
    json_object_set_new(o, "state", state_json(j->state));
    json_object_set_new(o, "specJson", json_string(j->spec_json ? j->spec_json : ""));
    json_object_set_new(o, "worldSize", json_integer(j->world_size));
    json_object_set_new(o, "maxRestarts", json_integer(j->max_restarts));
    json_object_set_new(o, "restarts", json_integer(j->restarts));
    json_object_set_new(o, "progress", ob_progress_to_json(&j->progress));
    if (j->ckpt_step > 0)
        json_object_set_new(o, "lastCheckpoint",
                            checkpoint_json(j->ckpt_step, j->ckpt_path, j->ckpt_ms));
    json_t *att = json_array();
    for (size_t i = 0; i < j->n_attempts; i++) {
        const ob_attempt *a = &j->attempts[i];
        json_t *x = json_object();
        json_object_set_new(x, "number", json_integer(a->number));
        json_object_set_new(x, "startedUnixMs", i64(a->started_ms));
        json_object_set_new(x, "endedUnixMs", i64(a->ended_ms));
        json_object_set_new(x, "startStep", i64(a->start_step));
        json_object_set_new(x, "exitCode", json_integer(a->exit_code));
        json_object_set_new(x, "exitReason", json_string(a->exit_reason));
        if (a->ext_id[0]) json_object_set_new(x, "externalId", json_string(a->ext_id));
        json_array_append_new(att, x);
    }
    json_object_set_new(o, "attempts", att);
    json_object_set_new(o, "createdUnixMs", i64(j->created_ms));
    json_object_set_new(o, "updatedUnixMs", i64(j->updated_ms));
    json_object_set_new(o, "startedUnixMs", i64(j->started_ms));
    json_object_set_new(o, "finishedUnixMs", i64(j->finished_ms));
    json_object_set_new(o, "message", json_string(j->message));
    if (j->request_id[0]) json_object_set_new(o, "requestId", json_string(j->request_id));
    if (j->labels[0]) json_object_set_new(o, "labels", ob_labels_to_json(j->labels));
    if (j->deadline_ms) json_object_set_new(o, "deadlineMs", i64(j->deadline_ms));
    return o;
}

json_t *ob_job_event_to_json(const ob_job_event *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "seq", i64(e->seq));
    json_object_set_new(o, "jobId", json_string(e->job_id));
    json_object_set_new(o, "timeUnixMs", i64(e->time_ms));
    json_object_set_new(o, "kind", json_string(e->kind));
    json_object_set_new(o, "state", state_json(e->state));
    json_object_set_new(o, "message", json_string(e->message));
    json_object_set_new(o, "progress", ob_progress_to_json(&e->progress));
    return o;
}

/* ---- JSON in --------------------------------------------------------------------------------- */

static ob_status bad(ob_err *err, const char *field, const char *want)
{
    return OB_ERR(err, OB_ERR_CORRUPT, "answer field '%s': expected %s", field, want);
}

/* int64: a string of digits or a number; absent: 0. */
static ob_status get_i64(const json_t *o, const char *key, int64_t *out, ob_err *err)
{
    const json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v || json_is_null(v)) return OB_OK;
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return OB_OK;
    }
    if (json_is_string(v)) {
        char *end;
        long long x = strtoll(json_string_value(v), &end, 10);
        if (end != json_string_value(v) && *end == '\0') {
            *out = (int64_t)x;
            return OB_OK;
        }
    }
    return bad(err, key, "a 64-bit integer");
}

static ob_status get_int(const json_t *o, const char *key, int *out, ob_err *err)
{
    int64_t v;
    ob_status st = get_i64(o, key, &v, err);
    *out = (int)v;
    return st;
}

static ob_status get_dbl(const json_t *o, const char *key, double *out, ob_err *err)
{
    const json_t *v = json_object_get(o, key);
    *out = 0.0;
    if (!v || json_is_null(v)) return OB_OK;
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return OB_OK;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcmp(s, "NaN"))
            *out = NAN;
        else if (!strcmp(s, "Infinity"))
            *out = INFINITY;
        else if (!strcmp(s, "-Infinity"))
            *out = -INFINITY;
        else
            return bad(err, key, "a number");
        return OB_OK;
    }
    return bad(err, key, "a number");
}

static ob_status get_str(const json_t *o, const char *key, char *buf, size_t cap, ob_err *err)
{
    const json_t *v = json_object_get(o, key);
    buf[0] = '\0';
    if (!v || json_is_null(v)) return OB_OK;
    if (!json_is_string(v)) return bad(err, key, "a string");
    snprintf(buf, cap, "%s", json_string_value(v));
    return OB_OK;
}

ob_status ob_labels_from_json(const json_t *v, char out[OB_LABELS_LEN], ob_err *err)
{
    out[0] = '\0';
    if (!v || json_is_null(v)) return OB_OK;
    if (json_is_string(v)) return ob_labels_parse(json_string_value(v), out, err);
    if (!json_is_object(v))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "labels: expected an object {\"key\": \"value\", ...} (or a string "
                      "\"key=value,key=value\")");
    if (json_object_size(v) > OB_LABELS_MAX)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "labels: at most %d", OB_LABELS_MAX);
    char text[OB_LABELS_MAX * 128 + 1] = ""; /* 16 pairs of 63 + '=' + 63, and commas */
    size_t used = 0;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        const char *s = json_is_string(val) ? json_string_value(val) : NULL;
        /* '=' and ',' would cut the pair elsewhere; the parse below names any other character
         * a label cannot hold. */
        if (!s || strpbrk(key, "=,") || strpbrk(s, "=,") || strlen(key) > 63 || strlen(s) > 63)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "label '%.63s': expected a string value; the key 1 to 63 of "
                          "[a-z0-9._/-] (starting with a letter or digit), the value 0 to 63 of "
                          "[A-Za-z0-9._-]",
                          key);
        used +=
            (size_t)snprintf(text + used, sizeof text - used, "%s%s=%s", used ? "," : "", key, s);
    }
    return ob_labels_parse(text, out, err);
}

static ob_status get_state(const json_t *o, const char *key, ob_job_state *out, ob_err *err)
{
    const json_t *v = json_object_get(o, key);
    *out = OB_JOB_UNSPECIFIED;
    if (!v || json_is_null(v)) return OB_OK;
    if (json_is_integer(v)) {
        *out = (ob_job_state)json_integer_value(v);
        return OB_OK;
    }
    if (!json_is_string(v) || ob_job_state_parse(json_string_value(v), out) != OB_OK)
        return bad(err, key, "a job state");
    return OB_OK;
}

static ob_status progress_from_json(const json_t *o, ob_progress *p, ob_err *err)
{
    memset(p, 0, sizeof *p);
    if (!o) return OB_OK;
    if (!json_is_object(o)) return bad(err, "progress", "an object");
    ob_status st;
    if ((st = get_i64(o, "step", &p->step, err)) ||
        (st = get_i64(o, "totalSteps", &p->total_steps, err)) ||
        (st = get_dbl(o, "loss", &p->loss, err)) ||
        (st = get_str(o, "phase", p->phase, sizeof p->phase, err)) ||
        (st = get_i64(o, "freezeStep", &p->freeze_step, err)) ||
        (st = get_dbl(o, "samplesPerS", &p->samples_per_s, err)) ||
        (st = get_i64(o, "bytesSent", &p->bytes_sent, err)) ||
        (st = get_i64(o, "bytesUncompressed", &p->bytes_uncompressed, err)) ||
        (st = get_dbl(o, "lr", &p->lr, err)) ||
        (st = get_dbl(o, "freezeRatio", &p->freeze_ratio, err)) ||
        (st = get_i64(o, "evalStep", &p->eval_step, err)) ||
        (st = get_dbl(o, "evalLoss", &p->eval_loss, err)) ||
        (st = get_dbl(o, "evalAccuracy", &p->eval_accuracy, err)) ||
        (st = get_str(o, "warmStart", p->warm_start, sizeof p->warm_start, err)) ||
        (st = get_dbl(o, "workerErrorRatio", &p->worker_error_ratio, err)) ||
        (st = get_dbl(o, "serverErrorRatio", &p->server_error_ratio, err)) ||
        (st = get_dbl(o, "zeroMomentumFraction", &p->zero_momentum_fraction, err)) ||
        (st = get_i64(o, "rewarms", &p->rewarms, err)))
        return st;
    return OB_OK;
}

ob_status ob_checkpoint_info_from_json(const json_t *o, ob_checkpoint_info *c, ob_err *err)
{
    memset(c, 0, sizeof *c);
    if (!json_is_object(o)) return bad(err, "checkpoint", "an object");
    ob_status st;
    if ((st = get_i64(o, "step", &c->step, err)) ||
        (st = get_str(o, "path", c->path, sizeof c->path, err)) ||
        (st = get_i64(o, "timeUnixMs", &c->time_ms, err)) ||
        (st = get_int(o, "worldSize", &c->world_size, err)) ||
        (st = get_str(o, "phase", c->phase, sizeof c->phase, err)) ||
        (st = get_i64(o, "freezeStep", &c->freeze_step, err)) ||
        (st = get_str(o, "problem", c->problem, sizeof c->problem, err)))
        return st;
    return OB_OK;
}

static ob_status attempts_from_json(const json_t *arr, ob_job *j, ob_err *err)
{
    if (!arr || json_is_null(arr)) return OB_OK;
    if (!json_is_array(arr)) return bad(err, "attempts", "an array");
    size_t n = json_array_size(arr);
    if (n == 0) return OB_OK;
    j->attempts = calloc(n, sizeof *j->attempts);
    if (!j->attempts) return OB_ERR(err, OB_ERR_NOMEM, "attempts");
    j->n_attempts = n;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(arr, i);
        ob_attempt *a = &j->attempts[i];
        ob_status st;
        if (!json_is_object(x)) return bad(err, "attempts[]", "an object");
        if ((st = get_int(x, "number", &a->number, err)) ||
            (st = get_i64(x, "startedUnixMs", &a->started_ms, err)) ||
            (st = get_i64(x, "endedUnixMs", &a->ended_ms, err)) ||
            (st = get_i64(x, "startStep", &a->start_step, err)) ||
            (st = get_int(x, "exitCode", &a->exit_code, err)) ||
            (st = get_str(x, "exitReason", a->exit_reason, sizeof a->exit_reason, err)) ||
            (st = get_str(x, "externalId", a->ext_id, sizeof a->ext_id, err)))
            return st;
    }
    return OB_OK;
}

ob_status ob_job_from_json(const json_t *o, ob_job *j, ob_err *err)
{
    memset(j, 0, sizeof *j);
    if (!json_is_object(o)) return bad(err, "job", "an object");
    const json_t *spec = json_object_get(o, "specJson"), *ck = json_object_get(o, "lastCheckpoint");
    ob_status st;
    if ((st = get_str(o, "id", j->id, sizeof j->id, err)) ||
        (st = get_str(o, "name", j->name, sizeof j->name, err)) ||
        (st = get_state(o, "state", &j->state, err)) ||
        (st = get_int(o, "worldSize", &j->world_size, err)) ||
        (st = get_int(o, "maxRestarts", &j->max_restarts, err)) ||
        (st = get_int(o, "restarts", &j->restarts, err)) ||
        (st = progress_from_json(json_object_get(o, "progress"), &j->progress, err)) ||
        (st = get_i64(o, "createdUnixMs", &j->created_ms, err)) ||
        (st = get_i64(o, "updatedUnixMs", &j->updated_ms, err)) ||
        (st = get_i64(o, "startedUnixMs", &j->started_ms, err)) ||
        (st = get_i64(o, "finishedUnixMs", &j->finished_ms, err)) ||
        (st = get_str(o, "message", j->message, sizeof j->message, err)) ||
        (st = get_str(o, "requestId", j->request_id, sizeof j->request_id, err)) ||
        (ob_labels_from_json(json_object_get(o, "labels"), j->labels, NULL) &&
         (st = bad(err, "labels", "an object of labels"))) ||
        (st = get_i64(o, "deadlineMs", &j->deadline_ms, err)))
        goto fail;
    if (ck && json_is_object(ck) &&
        ((st = get_i64(ck, "step", &j->ckpt_step, err)) ||
         (st = get_i64(ck, "timeUnixMs", &j->ckpt_ms, err)) ||
         (st = get_str(ck, "path", j->ckpt_path, sizeof j->ckpt_path, err))))
        goto fail;
    if (spec && !json_is_string(spec)) {
        st = bad(err, "specJson", "a string");
        goto fail;
    }
    j->spec_json = strdup(spec ? json_string_value(spec) : "");
    if (!j->spec_json) {
        st = OB_ERR(err, OB_ERR_NOMEM, "job");
        goto fail;
    }
    if ((st = attempts_from_json(json_object_get(o, "attempts"), j, err))) goto fail;
    return OB_OK;
fail:
    ob_job_clear(j);
    return st;
}

ob_status ob_job_event_from_json(const json_t *o, ob_job_event *e, ob_err *err)
{
    memset(e, 0, sizeof *e);
    if (!json_is_object(o)) return bad(err, "event", "an object");
    ob_status st;
    if ((st = get_i64(o, "seq", &e->seq, err)) ||
        (st = get_str(o, "jobId", e->job_id, sizeof e->job_id, err)) ||
        (st = get_i64(o, "timeUnixMs", &e->time_ms, err)) ||
        (st = get_str(o, "kind", e->kind, sizeof e->kind, err)) ||
        (st = get_state(o, "state", &e->state, err)) ||
        (st = get_str(o, "message", e->message, sizeof e->message, err)) ||
        (st = progress_from_json(json_object_get(o, "progress"), &e->progress, err)))
        return st;
    return OB_OK;
}

/* ---- base64 ---------------------------------------------------------------------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *ob_base64_encode(const void *data, size_t len)
{
    const unsigned char *p = data;
    char *out = malloc(4 * ((len + 2) / 3) + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < len) v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < len) v |= p[i + 2];
        *o++ = b64[(v >> 18) & 63];
        *o++ = b64[(v >> 12) & 63];
        *o++ = i + 1 < len ? b64[(v >> 6) & 63] : '=';
        *o++ = i + 2 < len ? b64[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64, c) : NULL;
    return p ? (int)(p - b64) : -1;
}

ob_status ob_base64_decode(const char *text, unsigned char **out, size_t *out_len, ob_err *err)
{
    size_t n = strlen(text);
    *out = NULL;
    *out_len = 0;
    if (n % 4 != 0)
        return OB_ERR(err, OB_ERR_CORRUPT, "base64: length %zu is not a multiple of 4", n);
    unsigned char *buf = malloc(n / 4 * 3 + 1);
    if (!buf) return OB_ERR(err, OB_ERR_NOMEM, "base64");
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        int a = b64_value(text[i]), b = b64_value(text[i + 1]);
        int c = text[i + 2] == '=' ? -2 : b64_value(text[i + 2]);
        int d = text[i + 3] == '=' ? -2 : b64_value(text[i + 3]);
        int last = i + 4 == n;
        if (a < 0 || b < 0 || c == -1 || d == -1 || (!last && (c < 0 || d < 0)) ||
            (c == -2 && d != -2)) {
            free(buf);
            return OB_ERR(err, OB_ERR_CORRUPT, "base64: bad character near offset %zu", i);
        }
        unsigned v = (unsigned)a << 18 | (unsigned)b << 12 | (unsigned)(c < 0 ? 0 : c) << 6 |
                     (unsigned)(d < 0 ? 0 : d);
        buf[k++] = (unsigned char)(v >> 16);
        if (c >= 0) buf[k++] = (unsigned char)(v >> 8);
        if (d >= 0) buf[k++] = (unsigned char)v;
    }
    *out = buf;
    *out_len = k;
    return OB_OK;
}

/* ---- protobuf ------------------------------------------------------------------------------- */

void ob_progress_to_pb(const ob_progress *p, Onebit__V1__Progress *o)
{
    onebit__v1__progress__init(o);
    o->step = p->step;
    o->total_steps = p->total_steps;
    o->loss = p->loss;
    o->phase = (char *)p->phase;
    o->freeze_step = p->freeze_step;
    o->samples_per_s = p->samples_per_s;
    o->bytes_sent = p->bytes_sent;
    o->bytes_uncompressed = p->bytes_uncompressed;
    o->lr = p->lr;
    o->freeze_ratio = p->freeze_ratio;
    o->eval_step = p->eval_step;
    o->eval_loss = p->eval_loss;
    o->eval_accuracy = p->eval_accuracy;
    o->warm_start = (char *)p->warm_start;
    o->worker_error_ratio = p->worker_error_ratio;
    o->server_error_ratio = p->server_error_ratio;
    o->zero_momentum_fraction = p->zero_momentum_fraction;
    o->rewarms = p->rewarms;
}

ob_status ob_job_to_pb(const ob_job *j, ob_job_pb *pb, ob_err *err)
{
    memset(pb, 0, sizeof *pb);
    Onebit__V1__Job *o = &pb->job;
    onebit__v1__job__init(o);
    o->id = (char *)j->id;
    o->name = (char *)j->name;
    o->state = (Onebit__V1__JobState)j->state;
    o->spec_json = j->spec_json ? j->spec_json : (char *)"";
    o->world_size = j->world_size;
    o->max_restarts = j->max_restarts;
    o->restarts = j->restarts;
    ob_progress_to_pb(&j->progress, &pb->progress);
    o->progress = &pb->progress;
    if (j->ckpt_step > 0) {
        onebit__v1__checkpoint__init(&pb->ckpt);
        pb->ckpt.step = j->ckpt_step;
        pb->ckpt.path = (char *)j->ckpt_path;
        pb->ckpt.time_unix_ms = j->ckpt_ms;
        o->last_checkpoint = &pb->ckpt;
    }
    if (j->n_attempts) {
        pb->attempts = calloc(j->n_attempts, sizeof *pb->attempts);
        pb->attempt_ptrs = calloc(j->n_attempts, sizeof *pb->attempt_ptrs);
        if (!pb->attempts || !pb->attempt_ptrs) {
            ob_job_pb_release(pb);
            return OB_ERR(err, OB_ERR_NOMEM, "encoding job %s", j->id);
        }
        for (size_t i = 0; i < j->n_attempts; i++) {
            const ob_attempt *a = &j->attempts[i];
            Onebit__V1__Attempt *x = &pb->attempts[i];
            onebit__v1__attempt__init(x);
            x->number = a->number;
            x->started_unix_ms = a->started_ms;
            x->ended_unix_ms = a->ended_ms;
            x->start_step = a->start_step;
            x->exit_code = a->exit_code;
            x->exit_reason = (char *)a->exit_reason;
            x->external_id = (char *)a->ext_id;
            pb->attempt_ptrs[i] = x;
        }
        o->n_attempts = j->n_attempts;
        o->attempts = pb->attempt_ptrs;
    }
    o->created_unix_ms = j->created_ms;
    o->updated_unix_ms = j->updated_ms;
    o->started_unix_ms = j->started_ms;
    o->finished_unix_ms = j->finished_ms;
    o->message = (char *)j->message;
    o->request_id = (char *)j->request_id;
    o->labels = (char *)j->labels;
    o->deadline_ms = j->deadline_ms;
    return OB_OK;
}

void ob_job_pb_release(ob_job_pb *pb)
{
    free(pb->attempts);
    free(pb->attempt_ptrs);
    pb->attempts = NULL;
    pb->attempt_ptrs = NULL;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

void ob_progress_from_pb(const Onebit__V1__Progress *m, ob_progress *p)
{
    memset(p, 0, sizeof *p);
    if (!m) return;
    p->step = m->step;
    p->total_steps = m->total_steps;
    p->loss = m->loss;
    copy_str(p->phase, sizeof p->phase, m->phase);
    p->freeze_step = m->freeze_step;
    p->samples_per_s = m->samples_per_s;
    p->bytes_sent = m->bytes_sent;
    p->bytes_uncompressed = m->bytes_uncompressed;
    p->lr = m->lr;
    p->freeze_ratio = m->freeze_ratio;
    p->eval_step = m->eval_step;
    p->eval_loss = m->eval_loss;
    p->eval_accuracy = m->eval_accuracy;
    copy_str(p->warm_start, sizeof p->warm_start, m->warm_start);
    p->worker_error_ratio = m->worker_error_ratio;
    p->server_error_ratio = m->server_error_ratio;
    p->zero_momentum_fraction = m->zero_momentum_fraction;
    p->rewarms = m->rewarms;
}

ob_status ob_job_from_pb(const Onebit__V1__Job *m, ob_job *j, ob_err *err)
{
    memset(j, 0, sizeof *j);
    copy_str(j->id, sizeof j->id, m->id);
    copy_str(j->name, sizeof j->name, m->name);
    j->state = (ob_job_state)m->state;
    j->world_size = m->world_size;
    j->max_restarts = m->max_restarts;
    j->restarts = m->restarts;
    ob_progress_from_pb(m->progress, &j->progress);
    if (m->last_checkpoint) {
        j->ckpt_step = m->last_checkpoint->step;
        j->ckpt_ms = m->last_checkpoint->time_unix_ms;
        copy_str(j->ckpt_path, sizeof j->ckpt_path, m->last_checkpoint->path);
    }
    j->created_ms = m->created_unix_ms;
    j->updated_ms = m->updated_unix_ms;
    j->started_ms = m->started_unix_ms;
    j->finished_ms = m->finished_unix_ms;
    copy_str(j->message, sizeof j->message, m->message);
    copy_str(j->request_id, sizeof j->request_id, m->request_id);
    copy_str(j->labels, sizeof j->labels, m->labels);
    j->deadline_ms = m->deadline_ms;
    j->spec_json = strdup(m->spec_json ? m->spec_json : "");
    if (m->n_attempts) j->attempts = calloc(m->n_attempts, sizeof *j->attempts);
    if (!j->spec_json || (m->n_attempts && !j->attempts)) {
        ob_job_clear(j);
        return OB_ERR(err, OB_ERR_NOMEM, "decoding a job");
    }
    j->n_attempts = m->n_attempts;
    for (size_t i = 0; i < m->n_attempts; i++) {
        const Onebit__V1__Attempt *x = m->attempts[i];
        ob_attempt *a = &j->attempts[i];
        a->number = x->number;
        a->started_ms = x->started_unix_ms;
        a->ended_ms = x->ended_unix_ms;
        a->start_step = x->start_step;
        a->exit_code = x->exit_code;
        copy_str(a->exit_reason, sizeof a->exit_reason, x->exit_reason);
        copy_str(a->ext_id, sizeof a->ext_id, x->external_id);
    }
    return OB_OK;
}

void ob_job_event_from_pb(const Onebit__V1__JobEvent *m, ob_job_event *e)
{
    memset(e, 0, sizeof *e);
    e->seq = m->seq;
    copy_str(e->job_id, sizeof e->job_id, m->job_id);
    e->time_ms = m->time_unix_ms;
    copy_str(e->kind, sizeof e->kind, m->kind);
    e->state = (ob_job_state)m->state;
    copy_str(e->message, sizeof e->message, m->message);
    ob_progress_from_pb(m->progress, &e->progress);
}

void ob_checkpoint_info_from_pb(const Onebit__V1__Checkpoint *m, ob_checkpoint_info *c)
{
    memset(c, 0, sizeof *c);
    c->step = m->step;
    c->time_ms = m->time_unix_ms;
    copy_str(c->path, sizeof c->path, m->path);
    c->world_size = m->world_size;
    copy_str(c->phase, sizeof c->phase, m->phase);
    c->freeze_step = m->freeze_step;
    copy_str(c->problem, sizeof c->problem, m->problem);
}
