/* The REST server's routes in process, through ob__rest_handle (no socket), against a real
 * service (SQLite store in a temporary directory, supervisor not started): regressions found by
 * fuzz_rest, the seam's reading of targets and headers (unescaping, '+', the screening), query
 * parameters checked against their route, the log as text/plain, labels as a JSON object; the
 * connection budget's choice of the waiting connection to close (on socket pairs). */
#include "rest_internal.h"
#include "onebit/job_codec.h"
#include "onebit/launcher.h"
#include "onebit/service.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKEN "t0ken"

typedef struct fixture {
    char dir[64];
    ob_launcher *launcher;
    ob_service *svc;
    ob_rest_server *rest;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    strcpy(f->dir, "/tmp/test_rest.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    static const char *const no_args[] = {NULL};
    ob_local_launcher_config lc = {
        .mpirun = "/bin/false", .worker = "/bin/false", .mpirun_args = no_args};
    ob_err err;
    assert_int_equal(ob_local_launcher_create(&f->launcher, &lc, &err), OB_OK);
    ob_service_config cfg;
    ob_service_config_default(&cfg);
    cfg.state_dir = f->dir;
    cfg.launcher = f->launcher;
    assert_int_equal(ob_service_create(&f->svc, &cfg, &err), OB_OK);
    assert_int_equal(ob__rest_server_create(&f->rest, f->svc, TOKEN, 1, 0, &err), OB_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ob_rest_server_stop(f->rest);
    ob_service_destroy(f->svc);
    ob_launcher_destroy(f->launcher);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0) return -1;
    free(f);
    return 0;
}

/* method target with the usual Host and token (and Content-Type for a body), and the extra
 * header pair h3 (NULL: none); the answer in *a (free with ob__rest_answer_clear). */
static void call(fixture *f, const char *method, const char *target, const char *body,
                 const char *h3, const char *v3, ob__rest_answer *a)
{
    const char *const h[] = {
        "Host",         "localhost",        "authorization",    ("Bearer " TOKEN),
        "Content-Type", "application/json", h3 ? h3 : "X-None", v3 ? v3 : ""};
    ob__rest_request req = {.method = method,
                            .target = target,
                            .headers = h,
                            .n_headers = 4,
                            .body = body,
                            .len = body ? strlen(body) : 0};
    ob_err err;
    assert_int_equal(ob__rest_handle(f->rest, &req, a, &err), OB_OK);
}

/* method target (a JSON body or NULL); the answer's JSON (owned). */
static json_t *request(fixture *f, const char *method, const char *target, const char *body,
                       int *http)
{
    ob__rest_answer a;
    call(f, method, target, body, NULL, NULL, &a);
    *http = a.http;
    json_t *o = json_loads(a.body, 0, NULL);
    if (!o) fail_msg("answer is not JSON: %s", a.body);
    ob__rest_answer_clear(&a);
    return o;
}

/* GET target with the usual Host and token; the answer's JSON (owned). */
static json_t *get(fixture *f, const char *target, int *http)
{
    return request(f, "GET", target, NULL, http);
}

/* The message of an error answer (borrowed from o). */
static const char *message(const json_t *o)
{
    const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    assert_non_null(msg);
    return msg;
}

static const char small_spec[] =
    "{\"name\":\"rest-test\",\"model\":{\"type\":\"mlp\",\"hidden\":[8]},"
    "\"data\":{\"type\":\"synthetic_classification\",\"n_train\":64,\"n_eval\":16,"
    "\"input_dim\":4,\"num_classes\":2},\"optimizer\":{\"type\":\"adam\"},"
    "\"batch_size\":8,\"steps\":4}";

/* A PENDING job (the supervisor is not started); its id into id. */
static void submit_job(fixture *f, char id[OB_JOB_ID_LEN])
{
    ob_submit_req req = {.spec = small_spec, .spec_len = sizeof small_spec - 1, .max_restarts = -1};
    ob_job j;
    ob_err err;
    assert_int_equal(ob_service_submit(f->svc, &req, &j, &err), OB_OK);
    snprintf(id, OB_JOB_ID_LEN, "%s", j.id);
    ob_job_clear(&j);
}

/* fuzz_rest: bytes that are not UTF-8 in a path were quoted in the error's message, jansson
 * refused the string, and the error went out without a message. */
static void test_error_message_not_utf8(void **state)
{
    int http;
    json_t *o = get(*state, "/v1/jobs/\xce\x99\xba\xff/nope", &http);
    assert_int_equal(http, 404);
    const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    assert_non_null(msg);
    assert_string_equal(msg, "no such resource: GET /v1/jobs/\xce\x99?"
                             "?/nope");
    json_decref(o);
}

/* Query arguments are unescaped as libmicrohttpd does: '+' is a space, %HH a byte. */
static void test_query_unescaped(void **state)
{
    int http;
    json_t *o = get(*state, "/v1/jobs?state=NO+PE%21", &http);
    assert_int_equal(http, 400);
    const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    assert_non_null(strstr(msg, "got 'NO PE!'"));
    json_decref(o);
    o = get(*state, "/v1/jobs?pageSize=2&state=PENDING", &http);
    assert_int_equal(http, 200);
    json_decref(o);
}

/* The screening runs as for a connection: no token, another Host. */
static void test_screening(void **state)
{
    fixture *f = *state;
    const char *const h[] = {"Host", "evil.example"};
    ob__rest_request req = {.method = "GET", .target = "/v1/jobs", .headers = h, .n_headers = 1};
    ob__rest_answer a;
    ob_err err;
    assert_int_equal(ob__rest_handle(f->rest, &req, &a, &err), OB_OK);
    assert_int_equal(a.http, 421);
    ob__rest_answer_clear(&a);
    req.headers = (const char *const[]){"Host", "127.0.0.1:8080"};
    assert_int_equal(ob__rest_handle(f->rest, &req, &a, &err), OB_OK);
    assert_int_equal(a.http, 401);
    ob__rest_answer_clear(&a);
}

/* Every route refuses a query parameter it does not take, naming it (and the near one, or the
 * route that takes it), and one given twice; every parameter it takes still works. */
static void test_unknown_query_parameters(void **state)
{
    fixture *f = *state;
    char id[OB_JOB_ID_LEN], t[256];
    submit_job(f, id);
    int http;
    json_t *o = get(f, "/v1/jobs?label=x", &http);
    assert_int_equal(http, 400);
    assert_string_equal(message(o), "unknown query parameter 'label' for GET /v1/jobs; did you "
                                    "mean labelSelector?");
    json_decref(o);
    o = get(f, "/v1/jobs?page_size=2", &http);
    assert_int_equal(http, 400);
    assert_non_null(strstr(message(o), "did you mean pageSize?"));
    json_decref(o);
    snprintf(t, sizeof t, "/v1/jobs/%s/logs?tailLines=5", id);
    o = get(f, t, &http);
    assert_int_equal(http, 400);
    assert_string_equal(message(o), "unknown query parameter 'tailLines' for GET "
                                    "/v1/jobs/{id}/logs (GET /v1/jobs/{id}/logs:stream takes it)");
    json_decref(o);
    o = get(f, "/v1/jobs?pageSize=1&pageSize=2", &http);
    assert_int_equal(http, 400);
    assert_string_equal(message(o),
                        "query parameter 'pageSize' given more than once; expected once");
    json_decref(o);
    o = get(f, "/v1/jobs?state=PENDING&zzz", &http);
    assert_int_equal(http, 400);
    assert_string_equal(message(o), "unknown query parameter 'zzz' for GET /v1/jobs (it takes "
                                    "pageSize, pageToken, state, labelSelector)");
    json_decref(o);
    /* Every route, those without parameters too. */
    static const char *const bad[][2] = {
        {"GET", "/healthz?verbose=1"},
        {"GET", "/metrics?x=1"},
        {"GET", "/v1/version?x"},
        {"GET", "/v1/openapi.json?x=1"},
        {"POST", "/v1/jobs?dryRun=true"},
        {"GET", "/v1/jobs/{id}?view=full"},
        {"DELETE", "/v1/jobs/{id}?keep=1"},
        {"POST", "/v1/jobs/{id}:cancel?force=1"},
        {"GET", "/v1/jobs/{id}/events?after=1"},
        {"GET", "/v1/jobs/{id}/checkpoints?x=1"},
        {"GET", "/v1/jobs/{id}/logs?format=base64&format=text"},
        {"GET", "/v1/jobs/{id}/logs:stream?follow=true&follow=false"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *hole = strstr(bad[i][1], "{id}");
        if (hole)
            snprintf(t, sizeof t, "%.*s%s%s", (int)(hole - bad[i][1]), bad[i][1], id, hole + 4);
        else
            snprintf(t, sizeof t, "%s", bad[i][1]);
        o = request(f, bad[i][0], t, !strcmp(bad[i][0], "POST") ? "{}" : NULL, &http);
        if (http != 400 || !strstr(message(o), "query parameter '"))
            fail_msg("%s %s: %d %s", bad[i][0], t, http, json_dumps(o, 0));
        json_decref(o);
    }
    o = get(f, "/v1/jobs?pageSize=5&pageToken=&state=PENDING&labelSelector=team%3Dnlp", &http);
    assert_int_equal(http, 200);
    json_decref(o);
    snprintf(t, sizeof t, "/v1/jobs/%s/logs?offset=0&maxBytes=100", id);
    o = get(f, t, &http);
    assert_int_equal(http, 200);
    json_decref(o);
    snprintf(t, sizeof t, "/v1/jobs/%s?keepCheckpoints=true", id);
    o = request(f, "DELETE", t, NULL, &http);
    assert_int_equal(http, 409); /* reached: the job has not ended */
    json_decref(o);
    ob__rest_answer a;
    snprintf(t, sizeof t, "/v1/jobs/%s/logs:stream?tailLines=3&sinceUnixMs=1&follow=false", id);
    call(f, "GET", t, NULL, NULL, NULL, &a);
    assert_int_equal(a.http, 200);
    assert_true(a.stream);
    ob__rest_answer_clear(&a);
    snprintf(t, sizeof t, "/v1/jobs/%s/events?afterSeq=1", id);
    call(f, "GET", t, NULL, NULL, NULL, &a);
    assert_int_equal(a.http, 200);
    assert_true(a.stream);
    ob__rest_answer_clear(&a);
}

/* GET /v1/jobs/{id}/logs with Accept: text/plain: the bytes the JSON carries in base64, as
 * they are (a NUL and bytes that are not UTF-8 included), the offsets in headers. */
static void test_logs_as_text(void **state)
{
    fixture *f = *state;
    char id[OB_JOB_ID_LEN], t[256], path[512];
    submit_job(f, id);
    snprintf(path, sizeof path, "%s/jobs/%s", f->dir, id);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/jobs/%s/worker.log", f->dir, id);
    static const char log[] = "[1,0]<stdout>:step 1 loss 0.5\n\xff\x00 x\nlast line\n";
    FILE *w = fopen(path, "wb");
    assert_non_null(w);
    assert_int_equal(fwrite(log, 1, sizeof log - 1, w), sizeof log - 1);
    fclose(w);
    snprintf(t, sizeof t, "/v1/jobs/%s/logs?offset=6&maxBytes=100", id);
    char end[16];
    snprintf(end, sizeof end, "%zu", sizeof log - 1);
    static const char *const accepts[] = {"text/plain", "application/json;q=0.5, text/plain",
                                          "text/plain; charset=utf-8"};
    for (size_t i = 0; i < sizeof accepts / sizeof *accepts; i++) {
        ob__rest_answer a;
        call(f, "GET", t, NULL, "Accept", accepts[i], &a);
        assert_int_equal(a.http, 200);
        assert_string_equal(a.type, "text/plain; charset=utf-8");
        assert_int_equal(a.len, sizeof log - 1 - 6);
        assert_memory_equal(a.body, log + 6, a.len);
        assert_string_equal(a.headers[0].name, "X-Log-Next-Offset");
        assert_string_equal(a.headers[0].value, end);
        assert_string_equal(a.headers[1].name, "X-Log-Size");
        assert_string_equal(a.headers[1].value, end);
        ob__rest_answer_clear(&a);
    }
    /* JSON stays the default, and wins a tie or a higher q. */
    static const char *const json_accepts[] = {NULL,
                                               "application/json",
                                               "*/*",
                                               "text/plain;q=0.5, application/json",
                                               "application/json, text/plain",
                                               "text/plain;q=0"};
    for (size_t i = 0; i < sizeof json_accepts / sizeof *json_accepts; i++) {
        ob__rest_answer a;
        call(f, "GET", t, NULL, json_accepts[i] ? "Accept" : NULL, json_accepts[i], &a);
        assert_int_equal(a.http, 200);
        assert_string_equal(a.type, "application/json");
        json_t *o = json_loads(a.body, 0, NULL);
        assert_non_null(o);
        unsigned char *bytes;
        size_t n;
        ob_err err;
        assert_int_equal(
            ob_base64_decode(json_string_value(json_object_get(o, "data")), &bytes, &n, &err),
            OB_OK);
        assert_int_equal(n, sizeof log - 1 - 6);
        assert_memory_equal(bytes, log + 6, n);
        assert_string_equal(json_string_value(json_object_get(o, "nextOffset")), end);
        assert_null(a.headers[0].name);
        free(bytes);
        json_decref(o);
        ob__rest_answer_clear(&a);
    }
    /* Errors stay JSON. */
    ob__rest_answer a;
    call(f, "GET", "/v1/jobs/job-999999/logs", NULL, "Accept", "text/plain", &a);
    assert_int_equal(a.http, 404);
    assert_string_equal(a.type, "application/json");
    ob__rest_answer_clear(&a);
}

/* Labels are a JSON object in every answer, and a submit takes them as one (or as the string
 * "k=v,k=v" it always took). */
static void test_labels_object(void **state)
{
    fixture *f = *state;
    char body[2048], t[256];
    snprintf(body, sizeof body, "{\"spec\": %s, \"labels\": {\"team\": \"nlp\", \"run\": \"7\"}}",
             small_spec);
    int http;
    json_t *o = request(f, "POST", "/v1/jobs", body, &http);
    assert_int_equal(http, 200);
    char *labels = json_dumps(json_object_get(o, "labels"), JSON_COMPACT);
    assert_string_equal(labels, "{\"run\":\"7\",\"team\":\"nlp\"}");
    free(labels);
    snprintf(t, sizeof t, "/v1/jobs/%s", json_string_value(json_object_get(o, "id")));
    json_decref(o);
    o = get(f, t, &http);
    assert_int_equal(http, 200);
    labels = json_dumps(json_object_get(o, "labels"), JSON_COMPACT);
    assert_string_equal(labels, "{\"run\":\"7\",\"team\":\"nlp\"}");
    free(labels);
    ob_job j;
    ob_err err;
    assert_int_equal(ob_job_from_json(o, &j, &err), OB_OK); /* what onebitctl --rest reads */
    assert_string_equal(j.labels, "run=7,team=nlp");
    ob_job_clear(&j);
    json_decref(o);
    snprintf(body, sizeof body, "{\"spec\": %s, \"labels\": \"team=cv\"}", small_spec);
    o = request(f, "POST", "/v1/jobs", body, &http);
    assert_int_equal(http, 200);
    json_decref(o);
    o = get(f, "/v1/jobs?labelSelector=team%3Dcv", &http);
    assert_int_equal(http, 200);
    json_t *jobs = json_object_get(o, "jobs");
    assert_int_equal(json_array_size(jobs), 1);
    labels = json_dumps(json_object_get(json_array_get(jobs, 0), "labels"), JSON_COMPACT);
    assert_string_equal(labels, "{\"team\":\"cv\"}");
    free(labels);
    json_decref(o);
    /* 16 pairs of the longest key and value are more than a job keeps: refused, as a string
     * too (the canonical form was written past its buffer). */
    char big[2600] = "{", str[2600] = "\"";
    for (int i = 0; i < 16; i++) {
        char k[64], v[64];
        snprintf(k, sizeof k, "k%02d%060d", i, 0);
        snprintf(v, sizeof v, "%063d", i);
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s\"%s\": \"%s\"", i ? ", " : "", k,
                 v);
        snprintf(str + strlen(str), sizeof str - strlen(str), "%s%s=%s", i ? "," : "", k, v);
    }
    strcat(big, "}");
    strcat(str, "\"");
    const char *const longest[] = {big, str};
    for (size_t i = 0; i < 2; i++) {
        char *b = malloc(strlen(longest[i]) + sizeof small_spec + 64);
        assert_non_null(b);
        sprintf(b, "{\"spec\": %s, \"labels\": %s}", small_spec, longest[i]);
        o = request(f, "POST", "/v1/jobs", b, &http);
        free(b);
        assert_int_equal(http, 400);
        assert_string_equal(message(o), "labels: longer than 1099 characters in all");
        json_decref(o);
    }
    static const char *const bad[] = {"{\"team\": 7}", "{\"a=b\": \"c\"}", "{\"team\": \"a,b=c\"}",
                                      "{\"Team\": \"x\"}", "[\"team=nlp\"]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(body, sizeof body, "{\"spec\": %s, \"labels\": %s}", small_spec, bad[i]);
        o = request(f, "POST", "/v1/jobs", body, &http);
        if (http != 400 || !strstr(message(o), "label"))
            fail_msg("labels %s: %d %s", bad[i], http, json_dumps(o, 0));
        json_decref(o);
    }
}

/* ---- the connection budget's choice ------------------------------------------------------ */

typedef struct budget_conn {
    int ours, theirs; /* a socket pair: the budget holds `ours`, the client reads `theirs` */
    void *slot;
} budget_conn;

static void budget_open(ob__rest_conns *c, budget_conn *bc, const char *ip)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    bc->ours = sv[0];
    bc->theirs = sv[1];
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(ip, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, ip, &a->sin6_addr), 1);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, ip, &a->sin_addr), 1);
    }
    bc->slot = ob__rest_conns_open(c, (const struct sockaddr *)&ss, bc->ours);
    assert_non_null(bc->slot);
}

/* Whether the budget shut the connection down: its client reads the end of the stream. */
static int budget_cut(const budget_conn *bc)
{
    char b;
    ssize_t n = recv(bc->theirs, &b, 1, MSG_DONTWAIT);
    return n == 0 ? 1 : (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ? 0 : -1;
}

static void budget_close_all(ob__rest_conns *c, budget_conn *bc, int n)
{
    for (int i = 0; i < n; i++) {
        ob__rest_conns_close(c, bc[i].slot);
        close(bc[i].ours);
        close(bc[i].theirs);
    }
}

/* A budget of 16 slots with room for max_waiting waiting connections, deadlines far off. */
static ob__rest_conns *budget_new(int max_waiting)
{
    ob__rest_conns *c = NULL;
    ob_err err;
    assert_int_equal(ob__rest_conns_create(&c, 16, max_waiting, 60.0, 60.0, &err), OB_OK);
    return c;
}

/* Over the waiting budget, the connection closed is the longest-waiting one of the client
 * holding the most waiting connections, not a newcomer from another address that came first
 * (the health probe among trickling clients: tests/test_slow_clients.sh). */
static void test_budget_cuts_the_busiest_client(void **state)
{
    (void)state;
    ob__rest_conns *c = budget_new(4);
    budget_conn bc[6];
    budget_open(c, &bc[0], "127.0.0.1"); /* the probe, the longest waiting of all */
    budget_open(c, &bc[1], "127.0.0.10");
    budget_open(c, &bc[2], "127.0.0.10");
    budget_open(c, &bc[3], "127.0.0.11");
    for (int i = 0; i < 4; i++)
        assert_int_equal(budget_cut(&bc[i]), 0);
    assert_int_equal(ob__rest_conns_closed(c), 0);
    budget_open(c, &bc[4], "127.0.0.11"); /* 4 waiting: one goes, .10's oldest */
    assert_int_equal(budget_cut(&bc[0]), 0);
    assert_int_equal(budget_cut(&bc[1]), 1);
    assert_int_equal(budget_cut(&bc[2]), 0);
    assert_int_equal(ob__rest_conns_closed(c), 1);
    /* .10 and .11 hold 1 and 2 now, the probe 1: .11's oldest goes. */
    budget_open(c, &bc[5], "127.0.0.12");
    assert_int_equal(budget_cut(&bc[0]), 0);
    assert_int_equal(budget_cut(&bc[3]), 1);
    assert_int_equal(budget_cut(&bc[4]), 0);
    assert_int_equal(ob__rest_conns_closed(c), 2);
    budget_close_all(c, bc, 6);
    ob__rest_conns_destroy(c);
}

/* Clients of one waiting connection each: the longest waiting goes, as with one client; an
 * IPv6 client counts as its /64. */
static void test_budget_oldest_of_equals(void **state)
{
    (void)state;
    ob__rest_conns *c = budget_new(3);
    budget_conn bc[9];
    budget_open(c, &bc[0], "10.0.0.1");
    budget_open(c, &bc[1], "10.0.0.2");
    budget_open(c, &bc[2], "10.0.0.3");
    budget_open(c, &bc[3], "10.0.0.4"); /* 1 each: the oldest goes */
    assert_int_equal(budget_cut(&bc[0]), 1);
    assert_int_equal(budget_cut(&bc[1]), 0);
    assert_int_equal(ob__rest_conns_closed(c), 1);
    budget_close_all(c, bc, 4);
    budget_open(c, &bc[4], "10.0.0.9");
    budget_open(c, &bc[5], "2001:db8:0:1::5");
    budget_open(c, &bc[6], "2001:db8:0:1::6");
    budget_open(c, &bc[7], "10.0.0.8"); /* the /64 holds 2, 10.0.0.9 1: the /64's oldest */
    assert_int_equal(budget_cut(&bc[4]), 0);
    assert_int_equal(budget_cut(&bc[5]), 1);
    assert_int_equal(budget_cut(&bc[6]), 0);
    budget_open(c, &bc[8], "2001:db8:0:2::7"); /* another /64: 1 each, the oldest */
    assert_int_equal(budget_cut(&bc[4]), 1);
    assert_int_equal(budget_cut(&bc[6]), 0);
    assert_int_equal(budget_cut(&bc[7]), 0);
    assert_int_equal(ob__rest_conns_closed(c), 3);
    budget_close_all(c, bc + 4, 5);
    ob__rest_conns_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_error_message_not_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_unescaped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_screening, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_query_parameters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_logs_as_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_labels_object, setup, teardown),
        cmocka_unit_test(test_budget_cuts_the_busiest_client),
        cmocka_unit_test(test_budget_oldest_of_equals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
