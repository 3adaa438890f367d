/* The progress report's wire forms (onebit/report.h): every kind survives a JSON line and comes
 * out of a ReportProgressRequest as the coordinator reads it from the log; JSON lines keep the
 * exact text the worker has always printed. And the worker's report credential read from a
 * file. */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "onebit/report.h"
#include "onebit/rpc_client.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One report of each kind with every field it writes set to something distinctive. */
static ob_report sample(ob_report_kind kind)
{
    ob_report r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    ob_progress *p = &r.progress;
    switch (kind) {
    case OB_REPORT_START:
        r.world_size = 4;
        r.num_params = 235146;
        break;
    case OB_REPORT_STEP:
        p->step = 120;
        strcpy(p->phase, "compression");
        p->loss = 0.40625;
        p->lr = 0.001;
        p->samples_per_s = 5123.5;
        p->bytes_sent = 1234567;
        r.bytes_step = 2456;
        p->freeze_ratio = 0.96875;
        p->worker_error_ratio = 1.375;
        p->server_error_ratio = 0.625;
        p->zero_momentum_fraction = 0.0078125;
        break;
    case OB_REPORT_EVAL:
        p->step = 500;
        r.eval_loss = 1.5;
        r.eval_accuracy = 0.75;
        r.eval_count = 10000;
        r.is_text = 1;
        break;
    case OB_REPORT_FREEZE:
        p->step = p->freeze_step = 179;
        p->freeze_ratio = 0.9765625;
        break;
    case OB_REPORT_CHECKPOINT:
        p->step = r.ckpt_step = 1000;
        strcpy(r.ckpt_path, "/ck/job/step-00001000");
        r.ckpt_async = 1;
        r.ckpt_bytes = 26500000;
        r.stall_seconds = 0.0025;
        r.write_seconds = 0.0625;
        break;
    case OB_REPORT_RESUME:
        p->step = r.ckpt_step = 80;
        strcpy(r.ckpt_path, "/ck/job/step-00000080");
        strcpy(p->phase, "warmup");
        r.from_world_size = 3;
        break;
    case OB_REPORT_NOTICE:
        p->step = 7;
        strcpy(r.message, "skipping step-00000120: \"data error\" detected by Fletcher32");
        break;
    case OB_REPORT_WARM_START:
        p->step = 1;
        strcpy(p->warm_start, "re-estimated until step 20 (0.89% of coordinates off)");
        strcpy(r.message, "warm start check passed: 0.89% of the coordinates ...");
        break;
    case OB_REPORT_REWARM:
        p->step = 159;
        r.ckpt_step = 150;
        strcpy(r.ckpt_path, "/ck/job/step-00000150");
        strcpy(r.message, "the loss is not finite at step 159 ...");
        break;
    case OB_REPORT_PROFILE:
        r.profile = (ob_report_profile){.steps = 1500,
                                        .ms_per_step = 3.5,
                                        .data_ms = 0.0625,
                                        .compute_ms = 1.25,
                                        .allreduce_ms = 0.375,
                                        .compress_ms = 0.1875,
                                        .exchange_ms = 1.5,
                                        .update_ms = 0.125,
                                        .wait_ms = 0.25};
        break;
    case OB_REPORT_SUMMARY:
        p->step = 1500;
        r.summary = (ob_report_summary){.steps = 1500,
                                        .freeze_step = 179,
                                        .final_train_loss = 0.25,
                                        .eval_loss = 0.3125,
                                        .eval_accuracy = 0.875,
                                        .bytes_sent = 99,
                                        .bytes_warmup = 80,
                                        .bytes_compression = 19,
                                        .wall_seconds = 9.5,
                                        .samples_per_s = 40000,
                                        .num_params = 235146,
                                        .first_step = 1,
                                        .stopped = 0,
                                        .last_checkpoint = 1500};
        break;
    case OB_REPORT_NONE:
        break;
    }
    return r;
}

/* Field by field (padding bytes are not part of a report). */
static int same(const ob_report *a, const ob_report *b)
{
    const ob_progress *p = &a->progress, *q = &b->progress;
    const ob_report_summary *s = &a->summary, *t = &b->summary;
    return a->kind == b->kind && p->step == q->step && p->total_steps == q->total_steps &&
           p->loss == q->loss && !strcmp(p->phase, q->phase) && p->freeze_step == q->freeze_step &&
           p->samples_per_s == q->samples_per_s && p->bytes_sent == q->bytes_sent &&
           p->lr == q->lr && p->freeze_ratio == q->freeze_ratio && a->bytes_step == b->bytes_step &&
           p->worker_error_ratio == q->worker_error_ratio &&
           p->server_error_ratio == q->server_error_ratio &&
           p->zero_momentum_fraction == q->zero_momentum_fraction &&
           a->world_size == b->world_size && a->num_params == b->num_params &&
           a->eval_loss == b->eval_loss && a->eval_accuracy == b->eval_accuracy &&
           a->eval_count == b->eval_count && a->is_text == b->is_text &&
           a->ckpt_step == b->ckpt_step && !strcmp(a->ckpt_path, b->ckpt_path) &&
           a->ckpt_failed == b->ckpt_failed && a->ckpt_async == b->ckpt_async &&
           a->ckpt_bytes == b->ckpt_bytes && a->stall_seconds == b->stall_seconds &&
           a->write_seconds == b->write_seconds && a->from_world_size == b->from_world_size &&
           !strcmp(a->message, b->message) && !strcmp(p->warm_start, q->warm_start) &&
           !memcmp(&a->profile, &b->profile, sizeof a->profile) && s->steps == t->steps &&
           s->freeze_step == t->freeze_step && s->final_train_loss == t->final_train_loss &&
           s->eval_loss == t->eval_loss && s->eval_accuracy == t->eval_accuracy &&
           s->bytes_sent == t->bytes_sent && s->bytes_warmup == t->bytes_warmup &&
           s->bytes_compression == t->bytes_compression && s->wall_seconds == t->wall_seconds &&
           s->samples_per_s == t->samples_per_s && s->num_params == t->num_params &&
           s->first_step == t->first_step && s->stopped == t->stopped &&
           s->last_checkpoint == t->last_checkpoint;
}

static void test_kind_names(void **state)
{
    (void)state;
    for (int k = 1; k < OB_REPORT_KIND_COUNT; k++) {
        const char *name = ob_report_kind_name((ob_report_kind)k);
        assert_true(name[0] != '\0');
        assert_int_equal(ob_report_kind_parse(name), k);
    }
    assert_string_equal(ob_report_kind_name(OB_REPORT_NONE), "");
    assert_string_equal(ob_report_kind_name((ob_report_kind)99), "");
    assert_int_equal(ob_report_kind_parse("party"), OB_REPORT_NONE);
    assert_int_equal(ob_report_kind_parse(NULL), OB_REPORT_NONE);
    assert_int_equal(ob_report_kind_parse(""), OB_REPORT_NONE);
}

/* Writing then reading gives back every field a kind writes. */
static void test_json_round_trip(void **state)
{
    (void)state;
    for (int k = 1; k < OB_REPORT_KIND_COUNT; k++) {
        ob_report in = sample((ob_report_kind)k), out;
        char *line = ob_report_to_json(&in);
        assert_non_null(line);
        assert_int_equal(ob_report_parse_line(line, strlen(line), &out), 1);
        if (k == OB_REPORT_START) {
            /* The spec is written, never read back. */
            assert_int_equal(out.world_size, 4);
            assert_int_equal(out.num_params, 235146);
        } else if (!same(&in, &out)) {
            fail_msg("kind %d: %s", k, line);
        }
        free(line);
    }
}

/* The exact lines onebit-worker has printed since the first release: scripts parse them. */
static void test_json_text(void **state)
{
    (void)state;
    ob_report r = sample(OB_REPORT_STEP);
    r.progress.freeze_ratio = NAN;       /* not computed: null */
    r.progress.worker_error_ratio = NAN; /* no error feedback (adam): no health keys */
    char *line = ob_report_to_json(&r);
    assert_string_equal(line, "{\"event\":\"step\",\"step\":120,\"phase\":\"compression\","
                              "\"loss\":0.40625,\"lr\":0.001,\"samples_per_s\":5123.5,"
                              "\"bytes_sent\":1234567,\"bytes_step\":2456,\"freeze_ratio\":null}");
    free(line);
    /* 1-bit Adam: the compression health follows, an infinite ratio (an error without
     * momentum) as null. */
    r = sample(OB_REPORT_STEP);
    r.progress.server_error_ratio = INFINITY;
    line = ob_report_to_json(&r);
    assert_string_equal(line, "{\"event\":\"step\",\"step\":120,\"phase\":\"compression\","
                              "\"loss\":0.40625,\"lr\":0.001,\"samples_per_s\":5123.5,"
                              "\"bytes_sent\":1234567,\"bytes_step\":2456,\"freeze_ratio\":0.96875,"
                              "\"worker_error_ratio\":1.375,\"server_error_ratio\":null,"
                              "\"zero_momentum_fraction\":0.0078125}");
    ob_report back;
    assert_int_equal(ob_report_parse_line(line, strlen(line), &back), 1);
    assert_true(back.progress.worker_error_ratio == 1.375);
    assert_true(back.progress.server_error_ratio == 0.0);
    assert_true(back.progress.zero_momentum_fraction == 0.0078125);
    free(line);
    r = sample(OB_REPORT_CHECKPOINT);
    r.ckpt_failed = 1;
    strcpy(r.message, "disk full");
    line = ob_report_to_json(&r);
    assert_string_equal(line, "{\"event\":\"checkpoint\",\"step\":1000,\"ok\":false,"
                              "\"error\":\"disk full\"}");
    free(line);
    r = sample(OB_REPORT_START);
    r.spec_json = "{\"name\":\"x\",\"steps\":3}";
    line = ob_report_to_json(&r);
    assert_string_equal(line, "{\"event\":\"start\",\"world_size\":4,\"num_params\":235146,"
                              "\"spec\":{\"name\":\"x\",\"steps\":3}}");
    free(line);
    r = sample(OB_REPORT_SUMMARY);
    r.summary.freeze_step = -1;
    r.summary.last_checkpoint = -1;
    line = ob_report_to_json(&r);
    assert_non_null(strstr(line, "\"freeze_step\":null,"));
    assert_non_null(strstr(line, "\"last_checkpoint\":null}"));
    assert_int_equal(ob_report_parse_line(line, strlen(line), &back), 1);
    assert_int_equal(back.summary.freeze_step, -1);
    assert_int_equal(back.summary.last_checkpoint, -1);
    free(line);
    r = sample(OB_REPORT_WARM_START);
    line = ob_report_to_json(&r);
    assert_string_equal(line, "{\"event\":\"warm_start\",\"step\":1,\"outcome\":\"re-estimated "
                              "until step 20 (0.89% of coordinates off)\",\"message\":\"warm start "
                              "check passed: 0.89% of the coordinates ...\"}");
    free(line);
    r.kind = OB_REPORT_NONE;
    assert_null(ob_report_to_json(&r));
}

/* What the coordinator keeps of a report is the same whether it came over gRPC or from the
 * log, non-finite numbers included (they read as 0 both ways). */
static void test_pb_matches_log(void **state)
{
    (void)state;
    for (int k = 1; k < OB_REPORT_KIND_COUNT; k++) {
        ob_report in = sample((ob_report_kind)k), from_log, from_pb;
        in.progress.loss = NAN;
        in.progress.freeze_ratio = INFINITY;
        in.progress.server_error_ratio = INFINITY;
        strcpy(in.job_id, "job-000042");
        char *line = ob_report_to_json(&in);
        assert_int_equal(ob_report_parse_line(line, strlen(line), &from_log), 1);
        free(line);
        uint8_t *buf = NULL;
        size_t len = 0;
        ob_err err;
        assert_int_equal(ob_report_pack(&in, &buf, &len, &err), OB_OK);
        Onebit__V1__ReportProgressRequest *q =
            onebit__v1__report_progress_request__unpack(NULL, len, buf);
        assert_non_null(q);
        assert_int_equal(ob_report_from_pb(q, &from_pb, &err), OB_OK);
        onebit__v1__report_progress_request__free_unpacked(q, NULL);
        free(buf);
        assert_string_equal(from_pb.job_id, "job-000042");
        assert_int_equal(from_pb.kind, k);
        const ob_progress *a = &from_log.progress, *b = &from_pb.progress;
        assert_int_equal(a->step, b->step);
        assert_true(a->loss == b->loss && b->loss == 0.0);
        assert_true(a->freeze_ratio == b->freeze_ratio);
        assert_true(a->worker_error_ratio == b->worker_error_ratio);
        assert_true(a->server_error_ratio == b->server_error_ratio && b->server_error_ratio == 0.0);
        assert_true(a->zero_momentum_fraction == b->zero_momentum_fraction);
        if (k == OB_REPORT_STEP) assert_true(b->worker_error_ratio == 1.375);
        assert_true(a->lr == b->lr && a->samples_per_s == b->samples_per_s);
        assert_int_equal(a->bytes_sent, b->bytes_sent);
        assert_string_equal(a->phase, b->phase);
        assert_int_equal(from_log.ckpt_step, from_pb.ckpt_step);
        assert_string_equal(from_log.ckpt_path, from_pb.ckpt_path);
        assert_int_equal(from_log.ckpt_failed, from_pb.ckpt_failed);
        assert_true(from_log.eval_loss == from_pb.eval_loss);
        assert_true(from_log.eval_accuracy == from_pb.eval_accuracy);
        assert_string_equal(from_log.message, from_pb.message);
        if (k == OB_REPORT_START) assert_int_equal(from_pb.num_params, 235146);
        if (k == OB_REPORT_FREEZE) assert_int_equal(from_pb.progress.freeze_step, 179);
    }
}

static void test_pb_refusals(void **state)
{
    (void)state;
    Onebit__V1__ReportProgressRequest q = ONEBIT__V1__REPORT_PROGRESS_REQUEST__INIT;
    ob_report r;
    ob_err err;
    q.job_id = "job-000001";
    q.kind = "party";
    assert_int_equal(ob_report_from_pb(&q, &r, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "kind: unknown progress kind 'party'"));
    char long_id[200];
    memset(long_id, 'a', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    q.job_id = long_id;
    q.kind = "step";
    assert_int_equal(ob_report_from_pb(&q, &r, &err), OB_ERR_NOT_FOUND);
}

static void test_parse_rejects(void **state)
{
    (void)state;
    ob_report r;
    const char *bad[] = {"",
                         "hello",
                         "{\"event\":\"party\"}",
                         "{\"event\":",
                         "[1]",
                         "{\"step\":3}",
                         "{\"event\":\"step\",\"event\":\"eval\"}",
                         "[1,3]<stderr>:{\"event\":\"step\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(ob_report_parse_line(bad[i], strlen(bad[i]), &r), 0);
    /* Wrong types read as 0 (or "") rather than failing the line. */
    const char *odd = "{\"event\":\"step\",\"step\":\"12\",\"phase\":7,\"loss\":true}";
    assert_int_equal(ob_report_parse_line(odd, strlen(odd), &r), 1);
    assert_int_equal(r.progress.step, 0);
    assert_string_equal(r.progress.phase, "");
    assert_true(r.progress.loss == 0.0);
    /* Reals beyond int64 where a count belongs (found by fuzz_wire): read as missing. */
    const char *huge = "{\"event\":\"freeze\",\"step\":1E47,\"freeze_ratio\":0.99686}";
    assert_int_equal(ob_report_parse_line(huge, strlen(huge), &r), 1);
    assert_int_equal(r.progress.step, 0);
    const char *huge2 = "{\"event\":\"summary\",\"steps\":5,\"freeze_step\":-1e300}";
    assert_int_equal(ob_report_parse_line(huge2, strlen(huge2), &r), 1);
    assert_int_equal(r.summary.freeze_step, -1);
    /* A message longer than the struct holds is cut, terminated. */
    char line[4096];
    int n = snprintf(line, sizeof line, "{\"event\":\"notice\",\"step\":1,\"message\":\"");
    memset(line + n, 'x', 3000);
    strcpy(line + n + 3000, "\"}");
    assert_int_equal(ob_report_parse_line(line, strlen(line), &r), 1);
    assert_int_equal(strlen(r.message), OB_REPORT_MSG_LEN - 1);
}

/* The credential file the Kubernetes launcher mounts: its content with one trailing newline
 * dropped; refused when missing, empty, too long or not printable ASCII, and the refusal never
 * quotes it. */
static void test_token_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/ob-token-XXXXXX"; /* mkdtemp template */
    assert_non_null(mkdtemp(dir));
    char path[64], out[80];
    snprintf(path, sizeof path, "%s/token", dir);
    const struct {
        const char *content;
        int ok;
        const char *want;
    } cases[] = {
        {"0123abcd\n", 1, "0123abcd"},
        {"0123abcd", 1, "0123abcd"},
        {"", 0, NULL},
        {"\n", 0, NULL},
        {"secret with space", 0, NULL},
        {"secret\n\n", 0, NULL},
        {"s3cret\x01", 0, NULL},
        /* 78 characters fit (cap 80 less the newline's and the terminator's room) */
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", 1,
         NULL},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0,
         NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fputs(cases[i].content, f);
        fclose(f);
        ob_err err = {0};
        ob_status st = ob_report_token_read(path, out, sizeof out, &err);
        if (cases[i].ok) {
            assert_int_equal(st, OB_OK);
            if (cases[i].want) assert_string_equal(out, cases[i].want);
        } else {
            assert_int_equal(st, OB_ERR_INVALID_ARG);
            assert_null(strstr(err.msg, "secret"));
            assert_string_equal(out, "");
        }
    }
    unlink(path);
    ob_err err = {0};
    assert_int_equal(ob_report_token_read(path, out, sizeof out, &err), OB_ERR_IO);
    assert_non_null(strstr(err.msg, "No such file"));
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kind_names),  cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_json_text),   cmocka_unit_test(test_pb_matches_log),
        cmocka_unit_test(test_pb_refusals), cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_token_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
