/* The worker's JSON progress lines (rank 0's stdout) read into ob_report. */
#include "onebit/report.h"
#include "svc_internal.h"

#include <jansson.h>

static double jnum(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static int64_t jint(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_integer(v)) return json_integer_value(v);
    return json_is_number(v) ? (int64_t)json_number_value(v) : 0;
}

/* Length of mpirun's --tag-output prefix "[1,0]<stdout>:" at the start of line (0: none). */
static size_t tag_length(const char *line, size_t len)
{
    static const char out[] = "<stdout>:";
    size_t i = 0;
    if (len == 0 || line[0] != '[') return 0;
    for (i = 1; i < len && line[i] != ']'; i++)
        if (!(line[i] >= '0' && line[i] <= '9') && line[i] != ',') return 0;
    if (i >= len) return 0;
    i++;
    if (len - i < sizeof out - 1 || memcmp(line + i, out, sizeof out - 1) != 0) return 0;
    return i + sizeof out - 1;
}

int ob_report_parse_line(const char *line, size_t len, ob_report *r)
{
    memset(r, 0, sizeof *r);
    size_t tag = tag_length(line, len);
    line += tag;
    len -= tag;
    if (len < 2 || line[0] != '{') return 0;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
    if (!o) return 0;
    const char *ev = json_string_value(json_object_get(o, "event"));
    int ok = 1;
    if (!ev) {
        ok = 0;
    } else if (!strcmp(ev, "step")) {
        ob_progress *p = &r->progress;
        p->step = jint(o, "step");
        p->loss = jnum(o, "loss");
        ob__strlcpy(p->phase, json_string_value(json_object_get(o, "phase")), sizeof p->phase);
        p->samples_per_s = jnum(o, "samples_per_s");
        p->bytes_sent = jint(o, "bytes_sent");
        p->lr = jnum(o, "lr");
        p->freeze_ratio = jnum(o, "freeze_ratio");
    } else if (!strcmp(ev, "start")) {
        r->num_params = jint(o, "num_params");
        r->world_size = (int)jint(o, "world_size");
    } else if (!strcmp(ev, "freeze")) {
        r->progress.step = r->progress.freeze_step = jint(o, "step");
        r->progress.freeze_ratio = jnum(o, "freeze_ratio");
    } else if (!strcmp(ev, "eval")) {
        r->progress.step = jint(o, "step");
        r->eval_loss = jnum(o, "eval_loss");
        r->eval_accuracy = jnum(o, "eval_accuracy");
    } else if (!strcmp(ev, "checkpoint") || !strcmp(ev, "resume")) {
        r->progress.step = r->ckpt_step = jint(o, "step");
        ob__strlcpy(r->ckpt_path, json_string_value(json_object_get(o, "path")),
                    sizeof r->ckpt_path);
        r->ckpt_failed = json_is_false(json_object_get(o, "ok"));
        ob__strlcpy(r->message, json_string_value(json_object_get(o, "error")), sizeof r->message);
    } else if (!strcmp(ev, "notice")) {
        r->progress.step = jint(o, "step");
        ob__strlcpy(r->message, json_string_value(json_object_get(o, "message")),
                    sizeof r->message);
    } else if (!strcmp(ev, "summary")) {
        r->progress.step = jint(o, "steps");
    } else {
        ok = 0;
    }
    if (ok) ob__strlcpy(r->kind, ev, sizeof r->kind);
    json_decref(o);
    return ok;
}
