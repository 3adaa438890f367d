/* The ob_status -> gRPC / HTTP table: every code the service returns maps to the documented
 * pair, and an unknown code maps to UNKNOWN / 500 rather than to success. */
#include "onebit/status_map.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

static void test_table(void **state)
{
    (void)state;
    struct {
        ob_status s;
        int grpc, http;
        const char *name;
    } want[] = {
        {OB_OK, 0, 200, "OK"},
        {OB_ERR_INVALID_ARG, 3, 400, "INVALID_ARGUMENT"},
        {OB_ERR_NOT_FOUND, 5, 404, "NOT_FOUND"},
        {OB_ERR_STATE, 9, 409, "FAILED_PRECONDITION"},
        {OB_ERR_UNAUTHENTICATED, 16, 401, "UNAUTHENTICATED"},
        {OB_ERR_TOO_LARGE, 8, 413, "RESOURCE_EXHAUSTED"},
        {OB_ERR_UNSUPPORTED, 12, 501, "UNIMPLEMENTED"},
        {OB_ERR_IO, 13, 500, "INTERNAL"},
        {OB_ERR_COMM, 14, 503, "UNAVAILABLE"},
        {OB_ERR_UNAVAILABLE, 14, 503, "UNAVAILABLE"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(ob_status_grpc_code(want[i].s), want[i].grpc);
        assert_int_equal(ob_status_http(want[i].s), want[i].http);
        assert_string_equal(ob_status_code_name(want[i].s), want[i].name);
    }
}

static void test_unknown(void **state)
{
    (void)state;
    assert_int_equal(ob_status_grpc_code((ob_status)-999), 2);
    assert_int_equal(ob_status_http((ob_status)-999), 500);
    assert_string_equal(ob_strerror(OB_ERR_UNAUTHENTICATED), "unauthenticated");
    assert_string_equal(ob_strerror(OB_ERR_UNAVAILABLE), "unavailable");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
