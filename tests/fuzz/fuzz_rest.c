/* Fuzz target: every REST request onebitd accepts, through the REST server's real screening
 * and routes (ob__rest_handle, no socket) against a real service (its SQLite store in a private
 * temporary directory; the supervisor is not started, so nothing is launched).
 *
 * Input, as an HTTP request without the version:
 *     METHOD TARGET\n          e.g. "POST /v1/jobs" or "GET /v1/jobs?pageSize=2&state=PENDING"
 *     Name: value\n            headers, up to an empty line (at most 16)
 *     \n
 *     body                     the rest of the input
 * The server wants a bearer token and is bound to loopback, as onebitd is by default; the
 * harness adds "Host: localhost", the right "Authorization" and, for POST, "Content-Type:
 * application/json" unless the input names that header itself. "{job}" in the target stands
 * for the id of a standing PENDING job (submitted again when the input has deleted it).
 *
 * Invariants beyond "no crash, no report": the status is one of those the API documents and
 * never a 5xx; every answer but /metrics', the streams' and a log asked for as text/plain is
 * JSON; an error is exactly
 * {"error": {"code": <the status>, "status": "<gRPC code name>", "message": "..."}}; a job a
 * submit answered 200 can be read back (same id), cancelled and deleted (which also keeps the
 * store from growing without end). */
#include "rest_internal.h"
#include "onebit/launcher.h"
#include "onebit/service.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TOKEN "fuzz-token"
#define MAX_HEADERS 16

static const char standing_spec[] =
    "{\"name\":\"fuzz-standing\",\"model\":{\"type\":\"mlp\",\"hidden\":[8]},"
    "\"data\":{\"type\":\"synthetic_classification\",\"n_train\":64,\"n_eval\":16,"
    "\"input_dim\":4,\"num_classes\":2},\"optimizer\":{\"type\":\"adam\"},"
    "\"batch_size\":8,\"steps\":4}";

static ob_service *svc;
static ob_rest_server *rest;
static char standing[OB_JOB_ID_LEN];

static void fail(const char *what, const char *method, const char *target, int http,
                 const char *body)
{
    fprintf(stderr, "fuzz_rest: %s\n  request: %s %s\n  answer: %d %s\n", what, method, target,
            http, body ? body : "(none)");
    abort();
}

static void setup(void)
{
    static char dir[64] = "/tmp/fuzz_rest.XXXXXX";
    if (!mkdtemp(dir)) abort();
    static ob_launcher *launcher;
    static const char *const no_args[] = {NULL};
    ob_local_launcher_config lc = {
        .mpirun = "/bin/false", .worker = "/bin/false", .mpirun_args = no_args};
    ob_service_config cfg;
    ob_service_config_default(&cfg);
    cfg.state_dir = dir;
    ob_err err;
    if (ob_local_launcher_create(&launcher, &lc, &err) != OB_OK) fail(err.msg, "", "", 0, NULL);
    cfg.launcher = launcher;
    if (ob_service_create(&svc, &cfg, &err) != OB_OK) fail(err.msg, "", "", 0, NULL);
    if (ob__rest_server_create(&rest, svc, TOKEN, 1, 0, &err) != OB_OK)
        fail(err.msg, "", "", 0, NULL);
}

/* The standing job exists (submitted again when an input deleted it). */
static void ensure_standing(void)
{
    ob_err err;
    ob_job j;
    if (standing[0] && ob_service_get(svc, standing, &j, &err) == OB_OK) {
        ob_job_clear(&j);
        return;
    }
    ob_submit_req req = {
        .spec = standing_spec, .spec_len = sizeof standing_spec - 1, .max_restarts = -1};
    if (ob_service_submit(svc, &req, &j, &err) != OB_OK) fail(err.msg, "", "", 0, NULL);
    snprintf(standing, sizeof standing, "%s", j.id);
    ob_job_clear(&j);
}

static int status_allowed(int http)
{
    static const int ok[] = {200, 400, 401, 404, 405, 409, 413, 415, 421, 429, 501};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (ok[i] == http) return 1;
    return 0;
}

static int grpc_code_name(const char *s)
{
    static const char *const names[] = {"OK",
                                        "CANCELLED",
                                        "UNKNOWN",
                                        "INVALID_ARGUMENT",
                                        "DEADLINE_EXCEEDED",
                                        "NOT_FOUND",
                                        "ALREADY_EXISTS",
                                        "PERMISSION_DENIED",
                                        "RESOURCE_EXHAUSTED",
                                        "FAILED_PRECONDITION",
                                        "ABORTED",
                                        "OUT_OF_RANGE",
                                        "UNIMPLEMENTED",
                                        "INTERNAL",
                                        "UNAVAILABLE",
                                        "DATA_LOSS",
                                        "UNAUTHENTICATED"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(names[i], s)) return 1;
    return 0;
}

/* Checks the answer's invariants; returns its JSON (owned) for a 200 JSON answer, else NULL. */
static json_t *check_answer(const char *method, const char *target, const ob__rest_answer *a)
{
    if (a->http == 0) {
        if (strncmp(target, "/ui", 3) != 0) fail("no answer", method, target, 0, NULL);
        return NULL;
    }
    if (!status_allowed(a->http)) fail("unexpected status", method, target, a->http, a->body);
    if (a->stream) {
        if (a->http != 200 || a->body) fail("stream not 200", method, target, a->http, NULL);
        return NULL;
    }
    if (!a->body) fail("no body", method, target, a->http, NULL);
    if (a->http == 200 && a->type && !strncmp(a->type, "text/plain", 10))
        return NULL; /* metrics, a log as text */
    if (!a->type || strcmp(a->type, "application/json") != 0)
        fail("not application/json", method, target, a->http, a->body);
    json_error_t jerr;
    json_t *o = json_loadb(a->body, a->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) fail("answer is not JSON", method, target, a->http, a->body);
    if (a->http == 200) return o;
    json_t *e = json_object_get(o, "error");
    json_t *code = json_object_get(e, "code"), *st = json_object_get(e, "status");
    json_t *msg = json_object_get(e, "message");
    if (!json_is_object(o) || json_object_size(o) != 1 || !json_is_object(e) ||
        json_object_size(e) != 3 || !json_is_integer(code) || json_integer_value(code) != a->http ||
        !json_is_string(st) || !grpc_code_name(json_string_value(st)) || !json_is_string(msg))
        fail("error is not {\"error\": {code, status, message}}", method, target, a->http, a->body);
    json_decref(o);
    return NULL;
}

/* One request through the seam; aborts on a failed call or a broken invariant. Returns the
 * 200 answer's JSON (owned) or NULL. */
static json_t *call(const char *method, const char *target, const char *const *headers,
                    size_t n_headers, const char *body, size_t len, int *http)
{
    ob__rest_request req = {.method = method,
                            .target = target,
                            .headers = headers,
                            .n_headers = n_headers,
                            .body = body,
                            .len = len};
    ob__rest_answer a;
    ob_err err;
    if (ob__rest_handle(rest, &req, &a, &err) != OB_OK) fail(err.msg, method, target, 0, NULL);
    json_t *o = check_answer(method, target, &a);
    *http = a.http;
    ob__rest_answer_clear(&a);
    return o;
}

/* A job a submit answered: readable by its id, then cancelled and deleted. */
static void follow_submitted(const json_t *job)
{
    const char *id = json_string_value(json_object_get(job, "id"));
    if (!id || !id[0] || strlen(id) >= OB_JOB_ID_LEN)
        fail("submit answered no id", "POST", "/v1/jobs", 200, NULL);
    if (!strcmp(id, standing)) return; /* a request id replayed: the same job */
    const char *const h[] = {"Host",         "localhost",       "Authorization", ("Bearer " TOKEN),
                             "Content-Type", "application/json"};
    char target[128];
    int http;
    snprintf(target, sizeof target, "/v1/jobs/%s", id);
    json_t *o = call("GET", target, h, 3, NULL, 0, &http);
    if (http != 200 || strcmp(json_string_value(json_object_get(o, "id")), id) != 0)
        fail("a submitted job cannot be read back", "GET", target, http, NULL);
    json_decref(o);
    snprintf(target, sizeof target, "/v1/jobs/%s:cancel", id);
    json_decref(call("POST", target, h, 3, NULL, 0, &http));
    if (http != 200) fail("a submitted job cannot be cancelled", "POST", target, http, NULL);
    snprintf(target, sizeof target, "/v1/jobs/%s", id);
    json_decref(call("DELETE", target, h, 3, NULL, 0, &http));
    if (http != 200) fail("a cancelled job cannot be deleted", "DELETE", target, http, NULL);
}

/* The next line of [*p, end) as a NUL-terminated copy (owned); *p moves past it. */
static char *next_line(const char **p, const char *end)
{
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    const char *stop = nl ? nl : end;
    size_t n = (size_t)(stop - *p);
    if (n && stop[-1] == '\r') n--;
    char *line = malloc(n + 1);
    if (!line) abort();
    memcpy(line, *p, n);
    line[n] = '\0';
    *p = nl ? nl + 1 : end;
    return line;
}

/* target with every "{job}" replaced by the standing job's id (owned). */
static char *expand_target(const char *target)
{
    size_t holes = 0;
    for (const char *t = target; (t = strstr(t, "{job}")); t += 5)
        holes++;
    if (holes) ensure_standing();
    char *out = malloc(strlen(target) + holes * OB_JOB_ID_LEN + 1);
    if (!out) abort();
    char *w = out;
    for (const char *t = target; *t;) {
        if (!strncmp(t, "{job}", 5)) {
            w += sprintf(w, "%s", standing);
            t += 5;
        } else {
            *w++ = *t++;
        }
    }
    *w = '\0';
    return out;
}

static int has_header(const char *const *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(h[2 * i], name)) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!svc) setup();
    const char *p = (const char *)data, *end = p + size;
    char *first = next_line(&p, end);
    char *sp = strchr(first, ' ');
    if (!sp) {
        free(first);
        return 0;
    }
    *sp = '\0';
    const char *method = first;
    char *target = expand_target(sp + 1);
    char *lines[MAX_HEADERS];
    const char *h[2 * (MAX_HEADERS + 3)];
    size_t nh = 0, nlines = 0;
    while (p < end && nlines < MAX_HEADERS) {
        char *line = next_line(&p, end);
        if (!line[0]) {
            free(line);
            break;
        }
        lines[nlines++] = line;
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = '\0';
        const char *v = colon + 1;
        while (*v == ' ')
            v++;
        h[2 * nh] = line;
        h[2 * nh + 1] = v;
        nh++;
    }
    if (!has_header(h, nh, "Host")) h[2 * nh] = "Host", h[2 * nh + 1] = "localhost", nh++;
    if (!has_header(h, nh, "Authorization"))
        h[2 * nh] = "Authorization", h[2 * nh + 1] = "Bearer " TOKEN, nh++;
    if (!strcmp(method, "POST") && !has_header(h, nh, "Content-Type"))
        h[2 * nh] = "Content-Type", h[2 * nh + 1] = "application/json", nh++;
    int http;
    json_t *o = call(method, target, h, nh, p, (size_t)(end - p), &http);
    if (o && !strcmp(method, "POST") && !strcmp(target, "/v1/jobs")) follow_submitted(o);
    json_decref(o);
    for (size_t i = 0; i < nlines; i++)
        free(lines[i]);
    free(target);
    free(first);
    return 0;
}
