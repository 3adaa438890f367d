/* Helpers shared by the job spec's tests (test_jobspec.c: specs that parse, their defaults and
 * canonical JSON; test_jobspec_errors.c: every class of bad input). Fixture files go to a
 * mkdtemp directory that the group teardown removes. */
#ifndef ONEBIT_TEST_JOBSPEC_FIXTURE_H
#define ONEBIT_TEST_JOBSPEC_FIXTURE_H

#include "onebit/jobspec.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#ifndef OB_EXAMPLES_DIR
#error "OB_EXAMPLES_DIR must name the examples directory (tests/jobspec.cmake sets it)"
#endif

/* Each test program uses a part of these. */
#define OB_TEST_HELPER static __attribute__((unused))
#define OB_TEST_HELPER_DATA static __attribute__((unused))

static char g_tmp[64];

/* ---- helpers ------------------------------------------------------------------------------- */

OB_TEST_HELPER ob_jobspec *new_spec(void)
{
    ob_jobspec *s = malloc(sizeof *s);
    assert_non_null(s);
    return s;
}

/* Parses text, failing the test with the library's message when it does not parse. */
OB_TEST_HELPER void parse_ok(ob_jobspec *out, const char *text, ob_spec_format fmt)
{
    ob_err err;
    ob_err_clear(&err);
    ob_status st = ob_jobspec_parse(out, text, strlen(text), fmt, &err);
    if (st != OB_OK) print_error("unexpected failure: %s\n--- spec ---\n%s\n", err.msg, text);
    assert_int_equal(st, OB_OK);
}

/* Parses text expecting `code` and a message containing every non-NULL needle; the output
 * struct, filled with a pattern beforehand, must come back byte for byte unchanged. */
OB_TEST_HELPER void expect_error3(ob_spec_format fmt, const char *text, ob_status code,
                                  const char *needle, const char *needle2, const char *needle3)
{
    ob_jobspec *out = new_spec(), *before = new_spec();
    memset(out, 0xA5, sizeof *out);
    memcpy(before, out, sizeof *out);
    ob_err err;
    ob_err_clear(&err);
    ob_status st = ob_jobspec_parse(out, text, strlen(text), fmt, &err);
    const char *needles[] = {needle, needle2, needle3};
    int ok = st == code && err.code == code;
    for (int i = 0; i < 3; i++)
        ok = ok && (!needles[i] || strstr(err.msg, needles[i]));
    if (!ok)
        print_error("status %d (want %d), message \"%s\", want \"%s\"%s%s\n--- spec ---\n%s\n",
                    (int)st, (int)code, err.msg, needle, needle2 ? " and more" : "",
                    needle3 ? " and more" : "", text);
    assert_true(ok);
    assert_memory_equal(out, before, sizeof *out);
    /* A NULL error record is allowed and gives the same code. */
    assert_int_equal(ob_jobspec_parse(out, text, strlen(text), fmt, NULL), code);
    assert_memory_equal(out, before, sizeof *out);
    free(out);
    free(before);
}

OB_TEST_HELPER void expect_error(ob_spec_format fmt, const char *text, const char *needle)
{
    expect_error3(fmt, text, OB_ERR_INVALID_ARG, needle, NULL, NULL);
}

/* to_json -> parse -> identical struct, and the canonical text is a fixed point. */
OB_TEST_HELPER void check_round_trip(const ob_jobspec *s)
{
    char *json = NULL, *again = NULL;
    ob_err err;
    ob_err_clear(&err);
    assert_int_equal(ob_jobspec_to_json(s, &json, &err), OB_OK);
    assert_non_null(json);
    ob_jobspec *back = new_spec();
    memset(back, 0x5A, sizeof *back);
    parse_ok(back, json, OB_SPEC_AUTO);
    if (memcmp(back, s, sizeof *s) != 0) print_error("round trip differs for %s\n", json);
    assert_memory_equal(back, s, sizeof *s);
    assert_int_equal(ob_jobspec_to_json(back, &again, &err), OB_OK);
    assert_string_equal(json, again);
    free(json);
    free(again);
    free(back);
}

OB_TEST_HELPER const char *write_tmp(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    return path;
}

/* ---- minimal specs and defaults ------------------------------------------------------------ */

OB_TEST_HELPER_DATA const char *min_json =
    "{\"model\": {\"type\": \"mlp\"}, \"data\": {\"type\": "
    "\"fashion_mnist\"}, \"optimizer\": {\"type\": \"adam\"}, "
    "\"batch_size\": 64, \"steps\": 100}";
OB_TEST_HELPER_DATA const char *min_yaml = "model: {type: mlp}\n"
                                           "data:\n"
                                           "  type: fashion_mnist\n"
                                           "optimizer:\n"
                                           "  type: adam\n"
                                           "batch_size: 64\n"
                                           "steps: 100\n";

/* A valid YAML spec with one line replaced or added, for the error tests. */
OB_TEST_HELPER char *yaml_with(const char *extra)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "model:\n  type: mlp\ndata:\n  type: fashion_mnist\noptimizer:\n  type: onebit_adam\n"
             "batch_size: 64\nsteps: 100\n%s",
             extra);
    return buf;
}

/* ---- fixtures ------------------------------------------------------------------------------ */

OB_TEST_HELPER int make_tmp(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/test_jobspec.XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

OB_TEST_HELPER int remove_tmp(void **state)
{
    (void)state;
    DIR *d = opendir(g_tmp);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", g_tmp, e->d_name);
        unlink(path);
    }
    closedir(d);
    return rmdir(g_tmp);
}

#endif /* ONEBIT_TEST_JOBSPEC_FIXTURE_H */
