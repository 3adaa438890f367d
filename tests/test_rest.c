/* The REST server's routes in process, through ob__rest_handle (no socket), against a real
 * service (SQLite store in a temporary directory, supervisor not started): regressions found by
 * fuzz_rest, and the seam's reading of targets and headers (unescaping, '+', the screening). */
#include "rest_internal.h"
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

/* GET target with the usual Host and token; the answer's JSON (owned). */
static json_t *get(fixture *f, const char *target, int *http)
{
    const char *const h[] = {"Host", "localhost", "authorization", ("Bearer " TOKEN)};
    ob__rest_request req = {.method = "GET", .target = target, .headers = h, .n_headers = 2};
    ob__rest_answer a;
    ob_err err;
    assert_int_equal(ob__rest_handle(f->rest, &req, &a, &err), OB_OK);
    *http = a.http;
    json_t *o = json_loads(a.body, 0, NULL);
    if (!o) fail_msg("answer is not JSON: %s", a.body);
    ob__rest_answer_clear(&a);
    return o;
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_error_message_not_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_unescaped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_screening, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
