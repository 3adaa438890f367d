/* The REST routes that answer at once (submit, list, get, cancel, delete, checkpoints, a piece
 * of the log, version, health, metrics, the OpenAPI document) and the one route table
 * (`routes`, at the end) that also names the streaming routes of rest_streams.c and the query
 * parameters each route takes. Each route is described in docs/openapi.json, which the server
 * also serves at GET /v1/openapi.json; tests/test_openapi.py keeps the two the same.
 * Thin: decode the request, call the service, encode the answer (see rest_internal.h). */
#include "openapi.h"
#include "rest_internal.h"
#include "onebit/base.h"
#include "onebit/job_codec.h"
#include "onebit/status_map.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- request fields ------------------------------------------------------------------------ */

/* Reads an int32 JSON field: a number, or a string holding one (proto3 JSON accepts both). */
static int json_int32(const json_t *v, int *out)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < INT32_MIN || x > INT32_MAX) return -1;
        *out = (int)x;
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (!s[0] || *end || errno || x < INT32_MIN || x > INT32_MAX) return -1;
        *out = (int)x;
        return 0;
    }
    return -1;
}

static void add_problem(char *buf, size_t cap, const char *text)
{
    size_t len = strlen(buf);
    if (len && len + 2 < cap) {
        strcat(buf, "; ");
        len += 2;
    }
    ob_strlcpy(buf + len, text, cap - len);
}

/* A submit's "files": [{"path", "mode", "data": base64}] (proto3 JSON of ProgramFile) into
 * files[*n] (calloc'd, with each file's bytes from malloc; free_files). A file's bytes are
 * decoded only while the upload stays within the service's limit, which is checked from the
 * base64 text's length before anything is allocated for it. What is wrong goes into
 * problem[cap] (the service checks paths and modes). */
static void free_files(ob_upload_file *files, size_t n)
{
    for (size_t i = 0; files && i < n; i++)
        free((void *)files[i].data);
    free(files);
}

static int read_files(ob_rest_server *s, const json_t *v, ob_upload_file **out, size_t *n,
                      char *problem, size_t cap)
{
    *out = NULL;
    *n = 0;
    if (!json_is_array(v)) {
        snprintf(problem, cap, "files: expected a list of {\"path\", \"mode\", \"data\"}");
        return -1;
    }
    size_t count = json_array_size(v);
    if (count > OB_UPLOAD_MAX_FILES) {
        snprintf(problem, cap, "files: %zu files, more than the limit of %d in one upload", count,
                 OB_UPLOAD_MAX_FILES);
        return -1;
    }
    ob_upload_file *files = count ? calloc(count, sizeof *files) : NULL;
    if (count && !files) {
        snprintf(problem, cap, "files: out of memory");
        return -1;
    }
    uint64_t total = 0, max = (uint64_t)ob_service_max_upload_bytes(s->svc);
    for (size_t i = 0; i < count; i++) {
        const json_t *f = json_array_get(v, i), *path = json_object_get(f, "path");
        const json_t *data = json_object_get(f, "data"), *mode = json_object_get(f, "mode");
        const char *key;
        json_t *x;
        if (json_is_object(f)) json_object_foreach((json_t *)f, key, x)
            {
                if (strcmp(key, "path") && strcmp(key, "mode") && strcmp(key, "data")) {
                    snprintf(problem, cap, "files[%zu].%.64s: unknown field", i, key);
                    goto fail;
                }
            }
        int m = 0;
        if (!json_is_object(f) || !json_is_string(path) ||
            strlen(json_string_value(path)) != json_string_length(path) ||
            (data && !json_is_string(data)) || (mode && json_int32(mode, &m) != 0)) {
            snprintf(problem, cap,
                     "files[%zu]: expected {\"path\": a string, \"mode\": an integer, "
                     "\"data\": base64}",
                     i);
            goto fail;
        }
        files[i].path = json_string_value(path);
        if (m < 0) {
            snprintf(problem, cap, "files[%zu].mode: %d; permission bits (0 to 0777) only", i, m);
            goto fail;
        }
        files[i].mode = (uint32_t)m;
        const char *text = data ? json_string_value(data) : "";
        size_t tl = data ? json_string_length(data) : 0;
        /* The decoded size, exactly, from the text's length and padding: compared first. */
        size_t bytes =
            tl / 4 * 3 - (tl >= 4 && text[tl - 1] == '=') - (tl >= 4 && text[tl - 2] == '=');
        if (tl % 4 == 0 && (bytes > max || total > max - bytes)) {
            snprintf(problem, cap,
                     "files: the upload holds more than the limit of %llu bytes (%.1f MiB) in all "
                     "at files[%zu] '%.200s' of %zu bytes (onebitd --max-upload-size)",
                     (unsigned long long)max, (double)max / 1048576.0, i, files[i].path, bytes);
            goto fail;
        }
        unsigned char *bytes_out = NULL;
        ob_err derr;
        if (tl && ob_base64_decode(text, &bytes_out, &files[i].len, &derr) != OB_OK) {
            char clean[OB_ERR_MSG_LEN];
            ob_status_public_message(derr.msg, clean, sizeof clean);
            snprintf(problem, cap, "files[%zu].data: %.300s", i, clean);
            goto fail;
        }
        files[i].data = bytes_out;
        total += files[i].len;
    }
    *out = files;
    *n = count;
    return 0;
fail:
    free_files(files, count);
    return -1;
}

/* The body's bytes that a submit's "files" (NULL: none) account for, at most len: their paths'
 * and data's text and each entry's framing. */
static size_t files_text(const json_t *files, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; json_is_array(files) && i < json_array_size(files); i++) {
        const json_t *f = json_array_get(files, i), *p = json_object_get(f, "path");
        const json_t *d = json_object_get(f, "data");
        n += 64 + (json_is_string(p) ? 2 * json_string_length(p) : 0) +
             (json_is_string(d) ? json_string_length(d) : 0);
    }
    return n < len ? n : len;
}

/* ---- routes ------------------------------------------------------------------------------- */

static enum MHD_Result do_submit(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    (void)id;
    json_error_t jerr;
    json_t *o =
        json_loadb(ex->rq->body ? ex->rq->body : "", ex->rq->len, JSON_REJECT_DUPLICATES, &jerr);
    char msg[OB_ERR_MSG_LEN];
    if (!o) {
        snprintf(msg, sizeof msg, "body: malformed JSON at line %d column %d: %.300s", jerr.line,
                 jerr.column, jerr.text);
        return ob__rest_send_error(ex, OB_ERR_INVALID_ARG, msg);
    }
    if (!json_is_object(o)) {
        json_decref(o);
        return ob__rest_send_error(ex, OB_ERR_INVALID_ARG, "body: expected a JSON object");
    }
    char problems[OB_ERR_MSG_LEN - 16] = "";
    ob_submit_req req = {.max_restarts = -1};
    char *spec_text = NULL;
    ob_upload_file *files = NULL;
    size_t n_files = 0;
    char labels[OB_LABELS_LEN];
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        char text[300];
        if (!strcmp(key, "spec")) {
            if (json_is_string(v)) {
                req.spec = json_string_value(v);
                req.spec_len = json_string_length(v);
            } else if (json_is_object(v)) {
                spec_text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
                req.spec = spec_text;
                req.spec_len = spec_text ? strlen(spec_text) : 0;
            } else {
                add_problem(problems, sizeof problems,
                            "spec: expected the spec as a string (JSON or YAML) or an object");
            }
        } else if (!strcmp(key, "worldSize") || !strcmp(key, "world_size")) {
            if (json_int32(v, &req.world_size) != 0) {
                snprintf(text, sizeof text, "%.40s: expected an integer", key);
                add_problem(problems, sizeof problems, text);
            }
        } else if (!strcmp(key, "labels")) {
            ob_err lerr;
            if (ob_labels_from_json(v, labels, &lerr) == OB_OK) {
                req.labels = labels;
            } else {
                add_problem(problems, sizeof problems, lerr.msg);
            }
        } else if (!strcmp(key, "deadline")) {
            if (json_is_string(v)) {
                req.deadline = json_string_value(v);
            } else {
                add_problem(problems, sizeof problems,
                            "deadline: expected a string such as \"2h\" or \"1h30m\"");
            }
        } else if (!strcmp(key, "requestId") || !strcmp(key, "request_id")) {
            if (json_is_string(v)) {
                req.request_id = json_string_value(v);
            } else {
                snprintf(text, sizeof text, "%.40s: expected a string", key);
                add_problem(problems, sizeof problems, text);
            }
        } else if (!strcmp(key, "files")) {
            char why[OB_ERR_MSG_LEN - 64];
            if (read_files(s, v, &files, &n_files, why, sizeof why) == 0) {
                req.files = files;
                req.n_files = n_files;
            } else {
                add_problem(problems, sizeof problems, why);
            }
        } else if (!strcmp(key, "maxRestarts") || !strcmp(key, "max_restarts")) {
            if (json_int32(v, &req.max_restarts) != 0) {
                snprintf(text, sizeof text, "%.40s: expected an integer", key);
                add_problem(problems, sizeof problems, text);
            }
        } else {
            snprintf(text, sizeof text, "%.100s: unknown field", key);
            add_problem(problems, sizeof problems, text);
        }
    }
    enum MHD_Result ret;
    size_t rest_len = ex->rq->len - files_text(json_object_get(o, "files"), ex->rq->len);
    if (rest_len > OB_API_MAX_REQUEST) {
        /* The files have their own allowance; the rest of the body has the usual one. */
        snprintf(msg, sizeof msg, "body: larger than the limit of %zu bytes (beside the files)",
                 (size_t)OB_API_MAX_REQUEST);
        ret = ob__rest_send_error(ex, OB_ERR_TOO_LARGE, msg);
    } else if (problems[0]) {
        ret = ob__rest_send_error(ex, OB_ERR_INVALID_ARG, problems);
    } else {
        ob_job j;
        ob_err err;
        ob_status rc = ob_service_submit(s->svc, &req, &j, &err);
        if (rc) {
            ret = ob__rest_send_error(ex, rc, err.msg);
        } else {
            ret = ob__rest_send_json(ex, 200, ob_job_to_json(&j));
            ob_job_clear(&j);
        }
    }
    free(spec_text);
    free_files(files, n_files);
    json_decref(o);
    return ret;
}

static enum MHD_Result do_list(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    (void)id;
    ob_err err;
    long long page_size;
    if (ob__rest_query_int(ex, "pageSize", 0, 1000, &page_size, &err))
        return ob__rest_send_error(ex, OB_ERR_INVALID_ARG, err.msg);
    ob_job_state state = OB_JOB_UNSPECIFIED;
    const char *st = ob__rest_arg(ex, "state");
    if (st && st[0] && ob_job_state_parse(st, &state) != OB_OK) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "state: expected PENDING, RUNNING, RESTARTING, SUCCEEDED, FAILED or CANCELLED, "
                 "got '%.40s'",
                 st);
        return ob__rest_send_error(ex, OB_ERR_INVALID_ARG, msg);
    }
    const char *token = ob__rest_arg(ex, "pageToken");
    ob_job *jobs = NULL;
    size_t n = 0;
    char next[OB_PAGE_TOKEN_LEN];
    const char *selector = ob__rest_arg(ex, "labelSelector");
    ob_status rc =
        ob_service_list(s->svc, state, selector, (int)page_size, token, &jobs, &n, next, &err);
    if (rc) return ob__rest_send_error(ex, rc, err.msg);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, ob_job_to_json(&jobs[i]));
    ob_job_array_free(jobs, n);
    json_t *o = json_object();
    json_object_set_new(o, "jobs", arr);
    json_object_set_new(o, "nextPageToken", json_string(next));
    return ob__rest_send_json(ex, 200, o);
}

static enum MHD_Result do_checkpoints(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    ob_checkpoint_info *ck = NULL;
    size_t n = 0;
    ob_err err;
    ob_status rc = ob_service_checkpoints(s->svc, id, &ck, &n, &err);
    if (rc) return ob__rest_send_error(ex, rc, err.msg);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(arr, ob_checkpoint_info_to_json(&ck[i]));
    }
    free(ck);
    json_t *o = json_object();
    json_object_set_new(o, "checkpoints", arr);
    return ob__rest_send_json(ex, 200, o);
}

static enum MHD_Result wrong_method(ob__rest_exchange *ex, const char *method, const char *url)
{
    char msg[300];
    snprintf(msg, sizeof msg, "method %.10s is not allowed on %.200s", method, url);
    return ob__rest_send_error_http(ex, 405, "UNIMPLEMENTED", msg);
}

/* DELETE /v1/jobs/{id}?keepCheckpoints=true|false: {"id", "checkpointsDeleted"}. */
static enum MHD_Result do_delete(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    ob_err err;
    const char *keep = ob__rest_arg(ex, "keepCheckpoints");
    if (keep && strcmp(keep, "true") && strcmp(keep, "false"))
        return ob__rest_send_error(ex, OB_ERR_INVALID_ARG,
                                   "keepCheckpoints: expected true or false");
    int deleted = 0;
    ob_status rc = ob_service_delete(s->svc, id, keep && !strcmp(keep, "true"), &deleted, &err);
    if (rc) return ob__rest_send_error(ex, rc, err.msg);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "checkpointsDeleted", json_integer(deleted));
    return ob__rest_send_json(ex, 200, o);
}

/* GET /v1/jobs/{id}/logs?offset=N&maxBytes=M: {"data": base64, "nextOffset", "size"}; with
 * "Accept: text/plain" the same bytes as they are, nextOffset and size in X-Log-Next-Offset
 * and X-Log-Size. */
static enum MHD_Result do_logs(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    ob_err err;
    long long offset, max_bytes;
    if (ob__rest_query_int(ex, "offset", 0, INT64_MAX, &offset, &err) ||
        ob__rest_query_int(ex, "maxBytes", 0, OB_LOG_READ_MAX, &max_bytes, &err))
        return ob__rest_send_error(ex, OB_ERR_INVALID_ARG, err.msg);
    char *data = NULL;
    size_t len = 0;
    int64_t size = 0;
    ob_status rc = ob_service_logs(s->svc, id, offset, (int)max_bytes, &data, &len, &size, &err);
    if (rc) return ob__rest_send_error(ex, rc, err.msg);
    if (ob__rest_accepts_text(ob__rest_header(ex, "Accept"))) {
        enum MHD_Result ret = ob__rest_send_bytes(ex, 200, "text/plain; charset=utf-8", data, len);
        char num[32];
        snprintf(num, sizeof num, "%lld", offset + (long long)len);
        ob__rest_add_header(ex, "X-Log-Next-Offset", num);
        snprintf(num, sizeof num, "%lld", (long long)size);
        ob__rest_add_header(ex, "X-Log-Size", num);
        return ret;
    }
    char *b64 = ob_base64_encode(data, len);
    free(data);
    if (!b64) return ob__rest_send_error(ex, OB_ERR_NOMEM, "encoding logs");
    json_t *o = json_object();
    char num[32];
    json_object_set_new(o, "data", json_string(b64));
    snprintf(num, sizeof num, "%lld", offset + (long long)len);
    json_object_set_new(o, "nextOffset", json_string(num));
    snprintf(num, sizeof num, "%lld", (long long)size);
    json_object_set_new(o, "size", json_string(num));
    free(b64);
    return ob__rest_send_json(ex, 200, o);
}

static enum MHD_Result do_version(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    (void)s, (void)id;
    return ob__rest_send_text(
        ex, 200, "application/json",
        strdup("{\"version\":\"" ONEBIT_VERSION "\",\"api\":\"onebit.v1\"}\n"));
}

static enum MHD_Result do_healthz(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    (void)id;
    /* 503 NOT_SERVING while the job store cannot be written; the reason stays in the daemon's
     * log (this answer is open to callers without credentials). */
    if (!ob_service_serving(s->svc, NULL, 0))
        return ob__rest_send_text(ex, 503, "application/json",
                                  strdup("{\"status\":\"NOT_SERVING\"}\n"));
    return ob__rest_send_text(ex, 200, "application/json", strdup("{\"status\":\"SERVING\"}\n"));
}

static enum MHD_Result do_metrics(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    (void)id;
    char *text = NULL;
    ob_err err;
    ob_status rc = ob_service_metrics(s->svc, &text, &err);
    if (rc) return ob__rest_send_error(ex, rc, err.msg);
    return ob__rest_send_text(ex, 200, "text/plain; version=0.0.4", text);
}

/* GET /v1/openapi.json: this API described (docs/openapi.json, compiled in). */
static enum MHD_Result do_openapi(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    (void)s, (void)id;
    ex->http = 200;
    ex->type = "application/json";
    ex->fixed = (const char *)ob_openapi_json;
    ex->fixed_len = ob_openapi_json_len;
    ex->bare = 1; /* as it has always been served */
    return MHD_YES;
}

static enum MHD_Result do_get(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    ob_err err;
    ob_job j;
    ob_status rc = ob_service_get(s->svc, id, &j, &err);
    if (rc) return ob__rest_send_error(ex, rc, err.msg);
    enum MHD_Result ret = ob__rest_send_json(ex, 200, ob_job_to_json(&j));
    ob_job_clear(&j);
    return ret;
}

static enum MHD_Result do_cancel(ob_rest_server *s, ob__rest_exchange *ex, const char *id)
{
    ob_err err;
    ob_job j;
    ob_status rc = ob_service_cancel(s->svc, id, &j, &err);
    if (rc) return ob__rest_send_error(ex, rc, err.msg);
    enum MHD_Result ret = ob__rest_send_json(ex, 200, ob_job_to_json(&j));
    ob_job_clear(&j);
    return ret;
}

/* ---- the route table ------------------------------------------------------------------- */

/* Every route the server has: method, path ("{id}" stands for a job id, which ends at the next
 * '/' or ':'), handler, the query parameters it takes (any other, or one given twice, is
 * answered 400). docs/openapi.json describes each of them; tests/test_openapi.py reads this
 * table and fails when the two differ, or when a handler reads a parameter its row lacks. */
static const ob__rest_route routes[] = {
    {"GET", "/healthz", do_healthz, ""},
    {"GET", "/metrics", do_metrics, ""},
    {"GET", "/v1/version", do_version, ""},
    {"GET", "/v1/openapi.json", do_openapi, ""},
    {"POST", "/v1/jobs", do_submit, ""},
    {"GET", "/v1/jobs", do_list, "pageSize pageToken state labelSelector"},
    {"GET", "/v1/jobs/{id}", do_get, ""},
    {"DELETE", "/v1/jobs/{id}", do_delete, "keepCheckpoints"},
    {"POST", "/v1/jobs/{id}:cancel", do_cancel, ""},
    {"GET", "/v1/jobs/{id}/events", ob__rest_do_events, "afterSeq"},
    {"GET", "/v1/jobs/{id}/checkpoints", do_checkpoints, ""},
    {"GET", "/v1/jobs/{id}/logs", do_logs, "offset maxBytes"},
    {"GET", "/v1/jobs/{id}/logs:stream", ob__rest_do_log_stream,
     "offset tailLines sinceUnixMs follow"},
};

/* Whether url has the route's path; the job id of a "{id}" path into id. *bad_id: the path
 * matched but the id is too long to be one. */
static int path_matches(const char *pattern, const char *url, char *id, size_t cap, int *bad_id)
{
    const char *hole = strstr(pattern, "{id}");
    if (!hole) return !strcmp(pattern, url);
    size_t pre = (size_t)(hole - pattern);
    if (strncmp(pattern, url, pre) != 0) return 0;
    const char *rest = url + pre;
    size_t idlen = strcspn(rest, "/:");
    if (idlen == 0 || strcmp(rest + idlen, hole + 4) != 0) return 0;
    if (idlen >= cap) {
        *bad_id = 1;
        return 1;
    }
    memcpy(id, rest, idlen);
    id[idlen] = '\0';
    return 1;
}

enum MHD_Result ob__rest_route_request(ob_rest_server *s, ob__rest_exchange *ex, const char *url,
                                       const char *method)
{
    char msg[OB_ERR_MSG_LEN];
    if (ex->rq->too_large) {
        snprintf(msg, sizeof msg, "body: larger than the limit of %zu bytes", ex->rq->limit);
        return ob__rest_send_error(ex, OB_ERR_TOO_LARGE, msg);
    }
    int path_known = 0;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        char id[OB_JOB_ID_LEN] = "";
        int bad_id = 0;
        if (!path_matches(routes[i].path, url, id, sizeof id, &bad_id)) continue;
        if (bad_id) {
            const char *rest = url + 9; /* every {id} path starts "/v1/jobs/" */
            size_t idlen = strcspn(rest, "/:");
            snprintf(msg, sizeof msg, "no job with id '%.*s'", (int)(idlen > 64 ? 64 : idlen),
                     rest);
            return ob__rest_send_error(ex, OB_ERR_NOT_FOUND, msg);
        }
        path_known = 1;
        if (strcmp(routes[i].method, method) != 0) continue;
        if (!ob__rest_check_query(ex, &routes[i], routes, sizeof routes / sizeof *routes))
            return MHD_YES;
        return routes[i].fn(s, ex, id);
    }
    if (path_known) return wrong_method(ex, method, url);
    snprintf(msg, sizeof msg, "no such resource: %.10s %.300s", method, url);
    return ob__rest_send_error(ex, OB_ERR_NOT_FOUND, msg);
}
