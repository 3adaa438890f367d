/* Tests for the job spec (onebit/jobspec.h), part one: JSON and YAML map onto the same struct
 * with the documented defaults; every model/data/optimizer combination parses; the canonical
 * JSON reads back to a memcmp-identical struct; files load; the files in examples/ all load.
 * Bad input is test_jobspec_errors.c's. */
#include "jobspec_fixture.h"
#include "onebit/comm.h"
#include "onebit/model.h"
#include "onebit/optim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_minimal_defaults(void **state)
{
    (void)state;
    ob_jobspec *j = new_spec(), *y = new_spec(), *a = new_spec();
    memset(j, 0x11, sizeof *j);
    memset(y, 0x22, sizeof *y);
    parse_ok(j, min_json, OB_SPEC_JSON);
    parse_ok(y, min_yaml, OB_SPEC_YAML);
    parse_ok(a, min_yaml, OB_SPEC_AUTO);
    assert_memory_equal(j, y, sizeof *j);
    assert_memory_equal(j, a, sizeof *j);

    /* The documented defaults, field by field. */
    assert_string_equal(j->name, "");
    assert_int_equal(j->model.kind, OB_MODEL_MLP);
    assert_int_equal(j->model.num_hidden, 2);
    assert_int_equal(j->model.hidden[0], 256);
    assert_int_equal(j->model.hidden[1], 128);
    assert_int_equal(j->model.activation, OB_ACT_RELU);
    assert_int_equal(j->model.input_dim, 0); /* filled by the worker */
    assert_int_equal(j->model.num_classes, 0);
    assert_int_equal(j->model.max_batch, 0);
    assert_int_equal(j->data.kind, OB_DATA_FASHION_MNIST);
    assert_string_equal(j->data.path, OB_FASHION_MNIST_DIR);
    assert_int_equal(j->data.norm, OB_FEATURES_STANDARDIZE);
    assert_int_equal(j->optim.kind, OB_OPTIM_ADAM);
    assert_true(j->optim.beta1 == 0.9 && j->optim.beta2 == 0.999 && j->optim.eps == 1e-8);
    assert_true(j->optim.weight_decay == 0.0);
    assert_int_equal(j->optim.bias_correction, 1);
    assert_int_equal(j->batch_size, 64);
    assert_int_equal(j->steps, 100);
    assert_int_equal(j->lr.kind, OB_LR_CONSTANT);
    assert_true(j->lr.peak == 1e-3);
    assert_int_equal(j->lr.warmup_steps, 0);
    assert_int_equal(j->lr.total_steps, 100);
    assert_int_equal(j->seed, 1);
    assert_int_equal(j->eval_interval, 0);
    assert_int_equal(j->eval_max_examples, 0);
    assert_int_equal(j->log_interval, 10);
    assert_string_equal(j->checkpoint_dir, "");
    assert_int_equal(j->checkpoint_interval, 0);
    assert_int_equal(j->checkpoint_keep, 3);

    /* ob_jobspec_default plus the required fields is the same struct. */
    ob_jobspec_default(a);
    a->batch_size = 64;
    a->steps = 100;
    a->lr.total_steps = 100;
    assert_memory_equal(a, j, sizeof *a);
    check_round_trip(j);
    free(j);
    free(y);
    free(a);
}

static void test_minimal_onebit_defaults(void **state)
{
    (void)state;
    ob_jobspec *j = new_spec(), *y = new_spec();
    parse_ok(j,
             "{\"model\": {\"type\": \"softmax\"}, \"data\": {\"type\": \"idx\", \"path\": "
             "\"/data/mnist\"}, \"optimizer\": {\"type\": \"onebit_adam\"}, \"batch_size\": 8, "
             "\"steps\": 5, \"lr\": {\"warmup_steps\": 3}}",
             OB_SPEC_JSON);
    parse_ok(y,
             "model:\n  type: softmax\ndata:\n  type: idx\n  path: /data/mnist\n"
             "optimizer:\n  type: onebit_adam\nbatch_size: 8\nsteps: 5\nlr:\n  warmup_steps: 3\n",
             OB_SPEC_YAML);
    assert_memory_equal(j, y, sizeof *j);
    assert_int_equal(j->model.kind, OB_MODEL_SOFTMAX);
    assert_int_equal(j->data.kind, OB_DATA_IDX);
    assert_string_equal(j->data.path, "/data/mnist");
    assert_int_equal(j->optim.kind, OB_OPTIM_ONEBIT_ADAM);
    assert_int_equal(j->optim.bias_correction, 0);
    assert_int_equal(j->optim.mode, OB_ONEBIT_COMPRESSED);
    /* A softmax model, whatever its LR warmup: the MLP family's tracked freeze. */
    assert_int_equal(j->optim.freeze_step, OB_TRACK_MLP_FREEZE);
    assert_int_equal(j->optim.track_variance, OB_TRACK_DEFAULT_INTERVAL);
    assert_true(j->optim.track_factor == OB_TRACK_MLP_FACTOR);
    assert_true(j->optim.freeze_threshold == 0.96);
    assert_int_equal(j->optim.freeze_min_steps, 0);
    assert_int_equal(j->optim.block_size, 2048);
    assert_int_equal(j->optim.scale, OB_SCALE_L1);
    assert_int_equal(j->optim.lr_warmup_steps, 3); /* from lr.warmup_steps */
    check_round_trip(j);
    free(j);
    free(y);
}

/* Parses into j a small valid spec whose optimizer section is {type: OPTIMIZER}. */
static void parse_optimizer(ob_jobspec *j, const char *optimizer)
{
    char text[512];
    snprintf(text, sizeof text,
             "model: {type: softmax}\ndata: {type: idx, path: /data/mnist}\nbatch_size: 8\n"
             "steps: 5\noptimizer: {type: %s}\n",
             optimizer);
    parse_ok(j, text, OB_SPEC_YAML);
}

/* Buckets default to one (the whole vector) without overlap, to OB_OPTIM_BUCKET_BYTES with it;
 * an explicit bucket_mb wins either way. */
static void test_bucket_defaults(void **state)
{
    (void)state;
    const struct {
        const char *extra;
        size_t bytes;
        int overlap;
    } cases[] = {
        {"", 0, 0},
        {", overlap: false", 0, 0},
        {", overlap: true", OB_OPTIM_BUCKET_BYTES, 1},
        {", overlap: true, bucket_mb: 0", 0, 1},
        {", bucket_mb: 2", (size_t)2 << 20, 0},
        {", gradient_exchange: fp16", 0, 0},
        {", gradient_exchange: fp8", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char optimizer[128];
        snprintf(optimizer, sizeof optimizer, "adam%s", cases[i].extra);
        ob_jobspec *j = new_spec();
        parse_optimizer(j, optimizer);
        assert_int_equal(j->optim.bucket_bytes, cases[i].bytes);
        assert_int_equal(j->optim.overlap, cases[i].overlap);
        assert_int_equal(j->optim.gradient_exchange,
                         strstr(cases[i].extra, "fp16")  ? OB_EXCHANGE_FP16
                         : strstr(cases[i].extra, "fp8") ? OB_EXCHANGE_FP8
                                                         : OB_EXCHANGE_FP32);
        check_round_trip(j);
        free(j);
    }
}

/* The warmup's gradients: fp8 unless the spec says otherwise for onebit_adam (every mode), fp32
 * for adam and softsign; an explicit value wins. */
static void test_gradient_exchange_defaults(void **state)
{
    (void)state;
    const struct {
        const char *optimizer;
        ob_gradient_exchange want;
    } cases[] = {
        {"onebit_adam", OB_EXCHANGE_FP8},
        {"onebit_adam, compression: \"off\"", OB_EXCHANGE_FP8},
        {"onebit_adam, gradient_exchange: fp32", OB_EXCHANGE_FP32},
        {"onebit_adam, gradient_exchange: fp16", OB_EXCHANGE_FP16},
        {"adam", OB_EXCHANGE_FP32},
        {"softsign", OB_EXCHANGE_FP32},
        {"adam, gradient_exchange: fp8", OB_EXCHANGE_FP8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ob_jobspec *j = new_spec();
        parse_optimizer(j, cases[i].optimizer);
        assert_int_equal(j->optim.gradient_exchange, cases[i].want);
        check_round_trip(j);
        free(j);
    }
}

/* track_variance when the spec names none: OB_TRACK_DEFAULT_INTERVAL for onebit_adam compressed
 * with the auto freeze and an LR warmup of at least OB_TRACK_DEFAULT_MIN_WARMUP steps; 0 with
 * anything the rule
 * leaves out (ob_optim_default_track_variance); an explicit value wins, and the canonical JSON
 * names the value, so a stored job keeps it whatever the default becomes. */
static void test_track_variance_default(void **state)
{
    (void)state;
    const long K = OB_TRACK_DEFAULT_INTERVAL, W = OB_TRACK_DEFAULT_MIN_WARMUP;
    const struct {
        const char *optimizer;
        long lr_warmup, want;
        int warm_start;
    } cases[] = {
        {"onebit_adam", 100, K, 0},
        {"onebit_adam", W, K, 0},
        {"onebit_adam", W - 1, 0, 0},
        {"onebit_adam", K, 0, 0},
        {"onebit_adam", 0, 0, 0},
        {"onebit_adam, freeze_min_steps: 300", 100, K, 0},
        {"onebit_adam, track_variance: 0", 100, 0, 0},
        {"onebit_adam, track_variance: 7", 0, 7, 0},
        {"onebit_adam, precondition: true", 100, 0, 0},
        {"onebit_adam, refresh_steps: 16", 100, 0, 0},
        {"onebit_adam, freeze_step: 120", 100, 0, 0},
        {"onebit_adam, stabilizer: none", 100, 0, 0},
        {"onebit_adam, compression: \"off\"", 100, 0, 0},
        {"onebit_adam, compression: naive", 100, 0, 0},
        {"onebit_adam", 100, 0, 1},
        {"adam", 100, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[640];
        /* The transformer's spec: the MLP family's early freeze (test_mlp_tracking_default)
         * leaves it alone. */
        snprintf(text, sizeof text,
                 "model: {type: transformer}\ndata: {type: synthetic_text}\nbatch_size: 8\n"
                 "steps: 500\nlr: {warmup_steps: %ld}\noptimizer: {type: %s}\n%s",
                 cases[i].lr_warmup, cases[i].optimizer,
                 cases[i].warm_start ? "warm_start: {from: /data/ckpt}\n" : "");
        ob_jobspec *j = new_spec();
        parse_ok(j, text, OB_SPEC_YAML);
        if (j->optim.track_variance != cases[i].want)
            fail_msg("%s, lr warmup %ld%s: track_variance %ld, want %ld", cases[i].optimizer,
                     cases[i].lr_warmup, cases[i].warm_start ? ", warm start" : "",
                     j->optim.track_variance, cases[i].want);
        if (j->optim.kind == OB_OPTIM_ONEBIT_ADAM) {
            char *json = NULL;
            ob_err err = {0};
            assert_int_equal(ob_jobspec_to_json(j, &json, &err), OB_OK);
            char want[64];
            snprintf(want, sizeof want, "\"track_variance\":%ld", cases[i].want);
            if (!strstr(json, want)) fail_msg("%s: canonical JSON without %s: %s",
                                              cases[i].optimizer, want, json);
            free(json);
        }
        check_round_trip(j);
        free(j);
    }
}

/* A model without attention (softmax, mlp) whose optimizer names none of freeze_step,
 * track_variance and track_factor: where the tracked default's conditions but the LR warmup's
 * hold, tracked and frozen at OB_TRACK_MLP_FREEZE with the factor OB_TRACK_MLP_FACTOR, with
 * any LR warmup; named in the canonical JSON. */
static void test_mlp_tracking_default(void **state)
{
    (void)state;
    const long K = OB_TRACK_DEFAULT_INTERVAL, F = OB_TRACK_MLP_FREEZE;
    const double R = OB_TRACK_MLP_FACTOR;
    const struct {
        const char *model, *optimizer;
        long lr_warmup, track, freeze;
        double factor;
        int warm_start;
    } cases[] = {
        {"softmax", "onebit_adam", 100, K, F, R, 0},
        {"mlp, hidden: [16]", "onebit_adam", 100, K, F, R, 0},
        /* Whatever the LR warmup (a transformer's needs OB_TRACK_DEFAULT_MIN_WARMUP). */
        {"mlp, hidden: [16]", "onebit_adam", OB_TRACK_DEFAULT_MIN_WARMUP - 1, K, F, R, 0},
        {"mlp, hidden: [16]", "onebit_adam", 0, K, F, R, 0},
        {"softmax", "onebit_adam", 1, K, F, R, 0},
        {"mlp, hidden: [16]", "onebit_adam, freeze_step: auto", 0, 0, 0, 0.0, 0},
        {"mlp, hidden: [16]", "onebit_adam, stabilizer: none", 0, 0, 0, 0.0, 0},
        {"mlp, hidden: [16]", "onebit_adam, refresh_steps: 16", 0, 0, 0, 0.0, 0},
        {"mlp, hidden: [16]", "onebit_adam", 0, 0, 0, 0.0, 1},
        {"mlp, hidden: [16]", "adam", 0, 0, 0, 0.0, 0},
        {"mlp, hidden: [16]", "onebit_adam, freeze_step: auto", 100, K, 0, 0.0, 0},
        {"mlp, hidden: [16]", "onebit_adam, freeze_step: 40", 100, 0, 40, 0.0, 0},
        {"mlp, hidden: [16]", "onebit_adam, track_variance: 25", 100, K, 0, 0.0, 0},
        {"mlp, hidden: [16]", "onebit_adam, track_factor: 1", 100, K, 0, 1.0, 0},
        {"mlp, hidden: [16]", "onebit_adam, precondition: true", 100, 0, 0, 0.0, 0},
        {"mlp, hidden: [16]", "onebit_adam, compression: naive", 100, 0, 0, 0.0, 0},
        {"mlp, hidden: [16]", "onebit_adam", 100, 0, 0, 0.0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[640];
        snprintf(text, sizeof text,
                 "model: {type: %s}\ndata: {type: idx, path: /data/mnist}\nbatch_size: 8\n"
                 "steps: 500\nlr: {warmup_steps: %ld}\noptimizer: {type: %s}\n%s",
                 cases[i].model, cases[i].lr_warmup, cases[i].optimizer,
                 cases[i].warm_start ? "warm_start: {from: /data/ckpt}\n" : "");
        ob_jobspec *j = new_spec();
        parse_ok(j, text, OB_SPEC_YAML);
        const ob_optim_config *c = &j->optim;
        if (c->track_variance != cases[i].track || c->freeze_step != cases[i].freeze ||
            c->track_factor != cases[i].factor)
            fail_msg("%s, %s: track_variance %ld, freeze_step %ld, track_factor %g; want %ld, "
                     "%ld, %g",
                     cases[i].model, cases[i].optimizer, c->track_variance, c->freeze_step,
                     c->track_factor, cases[i].track, cases[i].freeze, cases[i].factor);
        /* A fixed freeze has no latest one. */
        if (c->freeze_step > 0) assert_int_equal(c->freeze_max_step, 0);
        if (cases[i].freeze == F) {
            char *json = NULL;
            ob_err err = {0};
            char freeze[40];
            snprintf(freeze, sizeof freeze, "\"freeze_step\":%ld,", F);
            assert_int_equal(ob_jobspec_to_json(j, &json, &err), OB_OK);
            if (!strstr(json, freeze) || !strstr(json, "\"track_factor\":1.25"))
                fail_msg("%s: the canonical JSON does not name the early freeze: %s",
                         cases[i].model, json);
            free(json);
        }
        check_round_trip(j);
        free(j);
    }
}

/* A transformer's onebit_adam whose optimizer names neither overlap nor bucket_mb: the overlap
 * in buckets of OB_OVERLAP_TRANSFORMER_BUCKET_BYTES where the model fills at least two of them
 * (its parameters counted by a model built from the spec, so that a wrong count at parse time
 * shows at the edge: 2 x 1 MiB is 524,288 floats); named in the canonical JSON. */
static void test_transformer_overlap_default(void **state)
{
    (void)state;
    const size_t ONE_MIB = (size_t)1 << 20, TF = OB_OVERLAP_TRANSFORMER_BUCKET_BYTES;
    const struct {
        const char *model, *optimizer;
        int overlap;
        size_t bucket;
    } cases[] = {
        /* 636,032 parameters */
        {"transformer, layers: 3, d_model: 128, heads: 4, context: 64", "onebit_adam", 1, TF},
        /* 437,760 */
        {"transformer, layers: 2, d_model: 128, heads: 4, context: 64", "onebit_adam", 0, 0},
        /* 495,104 tied, 527,872 with the output layer of its own */
        {"transformer, layers: 2, d_model: 128, heads: 4, context: 512", "onebit_adam", 0, 0},
        {"transformer, layers: 2, d_model: 128, heads: 4, context: 512, tied_output: false",
         "onebit_adam", 1, TF},
        /* Named: kept as named */
        {"transformer, layers: 3, d_model: 128, heads: 4, context: 64",
         "onebit_adam, overlap: false", 0, 0},
        {"transformer, layers: 3, d_model: 128, heads: 4, context: 64", "onebit_adam, bucket_mb: 2",
         0, 2 * ONE_MIB},
        {"transformer, layers: 3, d_model: 128, heads: 4, context: 64",
         "onebit_adam, overlap: true", 1, OB_OPTIM_BUCKET_BYTES},
        /* Other optimizers and families */
        {"transformer, layers: 3, d_model: 128, heads: 4, context: 64", "adam", 0, 0},
        {"transformer, layers: 3, d_model: 128, heads: 4, context: 64", "binsgdm", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[640];
        snprintf(text, sizeof text,
                 "model: {type: %s}\ndata: {type: synthetic_text}\nbatch_size: 8\n"
                 "steps: 500\nlr: {warmup_steps: 100}\noptimizer: {type: %s}\n",
                 cases[i].model, cases[i].optimizer);
        ob_jobspec *j = new_spec();
        parse_ok(j, text, OB_SPEC_YAML);
        if (j->optim.overlap != cases[i].overlap || j->optim.bucket_bytes != cases[i].bucket)
            fail_msg("%s, %s: overlap %d, bucket_bytes %zu; want %d, %zu", cases[i].model,
                     cases[i].optimizer, j->optim.overlap, j->optim.bucket_bytes, cases[i].overlap,
                     cases[i].bucket);
        if (strcmp(cases[i].optimizer, "onebit_adam") == 0) {
            /* The rule's edge, against the parameters of the model itself. */
            ob_model_config cfg = j->model;
            cfg.input_dim = cfg.num_classes = OB_MODEL_VOCAB;
            cfg.max_batch = 1;
            ob_model *m = NULL;
            ob_err err = {0};
            assert_int_equal(ob_model_create(&m, &cfg, &err), OB_OK);
            size_t d = ob_model_num_params(m);
            ob_model_destroy(m);
            if ((d >= 2 * TF / sizeof(float)) != cases[i].overlap)
                fail_msg("%s: %zu parameters, overlap %d", cases[i].model, d, cases[i].overlap);
            char *json = NULL;
            assert_int_equal(ob_jobspec_to_json(j, &json, &err), OB_OK);
            const char *want = cases[i].overlap ? "\"overlap\":true" : "\"overlap\":false";
            if (!strstr(json, want)) fail_msg("%s: the canonical JSON: %s", cases[i].model, json);
            free(json);
        }
        check_round_trip(j);
        free(j);
    }
}

/* binsgdm and softsign: their defaults, their own fields, and the canonical text round trip
 * (which names only the fields of the kind, or it would not parse back). */
static void test_binsgdm_softsign(void **state)
{
    (void)state;
    ob_jobspec *j = new_spec();
    parse_optimizer(j, "binsgdm");
    assert_int_equal(j->optim.kind, OB_OPTIM_BINSGDM);
    assert_int_equal(j->optim.scale, OB_SCALE_UNIT);
    assert_int_equal(j->optim.block_size, 256);
    assert_int_equal(j->optim.bias_correction, 0);
    assert_int_equal(j->optim.max_denominator_step, 0);
    check_round_trip(j);
    char *json = NULL;
    ob_err err = {0};
    assert_int_equal(ob_jobspec_to_json(j, &json, &err), OB_OK);
    assert_null(strstr(json, "beta2"));
    assert_null(strstr(json, "gradient_exchange"));
    assert_non_null(strstr(json, "\"max_denominator_step\":0"));
    free(json);
    parse_optimizer(
        j, "binsgdm, beta1: 0.95, block_size: 64, max_denominator_step: 300, overlap: true, "
           "ranks_per_node: 8");
    assert_true(j->optim.beta1 == 0.95);
    assert_int_equal(j->optim.block_size, 64);
    assert_int_equal(j->optim.max_denominator_step, 300);
    assert_int_equal(j->optim.overlap, 1);
    assert_int_equal(j->optim.ranks_per_node, 8);
    check_round_trip(j);
    /* ranks_per_node "auto": the shape found where the ranks run; kept as "auto" in the
     * canonical text. Flat stays the default. */
    parse_optimizer(j, "binsgdm, ranks_per_node: auto");
    assert_int_equal(j->optim.ranks_per_node, OB_OPTIM_RANKS_PER_NODE_AUTO);
    check_round_trip(j);
    assert_int_equal(ob_jobspec_to_json(j, &json, &err), OB_OK);
    assert_non_null(strstr(json, "\"ranks_per_node\":\"auto\""));
    free(json);
    parse_optimizer(j, "binsgdm");
    assert_int_equal(j->optim.ranks_per_node, 0);
    /* Nothing to shape without a compressed exchange: "auto" is then flat, not an error. */
    parse_optimizer(j, "onebit_adam, compression: \"off\", ranks_per_node: auto");
    assert_int_equal(j->optim.ranks_per_node, OB_OPTIM_RANKS_PER_NODE_AUTO);
    check_round_trip(j);
    parse_optimizer(j, "softsign, gradient_exchange: fp16, weight_decay: 0.01");
    assert_int_equal(j->optim.kind, OB_OPTIM_SOFTSIGN);
    assert_int_equal(j->optim.gradient_exchange, OB_EXCHANGE_FP16);
    check_round_trip(j);
    free(j);
}

/* ---- full specs for each combination ------------------------------------------------------- */

static void test_full_softmax_fmnist_adam(void **state)
{
    (void)state;
    ob_jobspec *s = new_spec();
    parse_ok(s,
             "{\"name\": \"run-1.a_b\",\n"
             " \"model\": {\"type\": \"softmax\"},\n"
             " \"data\": {\"type\": \"fashion_mnist\", \"path\": \"/srv/fm\", \"normalize\": "
             "\"unit\"},\n"
             " \"optimizer\": {\"type\": \"adam\", \"beta1\": 0.8, \"beta2\": 0.95, \"eps\": 1e-6, "
             "\"weight_decay\": 0.01, \"bias_correction\": false},\n"
             " \"batch_size\": 128, \"steps\": 1000,\n"
             " \"lr\": {\"schedule\": \"cosine\", \"peak\": 0.003, \"warmup_steps\": 100, "
             "\"min_lr\": 1e-5},\n"
             " \"seed\": 9007199254740993,\n"
             " \"eval\": {\"interval\": 250, \"max_examples\": 5000},\n"
             " \"log_interval\": 25,\n"
             " \"checkpoint\": {\"dir\": \"/ckpt/run-1\", \"interval\": 500, \"keep\": 2}}",
             OB_SPEC_AUTO);
    assert_string_equal(s->name, "run-1.a_b");
    assert_int_equal(s->model.kind, OB_MODEL_SOFTMAX);
    assert_string_equal(s->data.path, "/srv/fm");
    assert_int_equal(s->data.norm, OB_FEATURES_UNIT);
    assert_true(s->optim.beta1 == 0.8 && s->optim.beta2 == 0.95 && s->optim.eps == 1e-6);
    assert_true(s->optim.weight_decay == 0.01);
    assert_int_equal(s->optim.bias_correction, 0);
    assert_int_equal(s->batch_size, 128);
    assert_int_equal(s->steps, 1000);
    assert_int_equal(s->lr.kind, OB_LR_COSINE);
    assert_true(s->lr.peak == 0.003 && s->lr.min_lr == 1e-5);
    assert_int_equal(s->lr.warmup_steps, 100);
    assert_int_equal(s->lr.total_steps, 1000);
    assert_int_equal(s->optim.lr_warmup_steps, 100);
    assert_true(s->seed == 9007199254740993ULL); /* not through a double */
    assert_int_equal(s->eval_interval, 250);
    assert_int_equal(s->eval_max_examples, 5000);
    assert_int_equal(s->log_interval, 25);
    assert_string_equal(s->checkpoint_dir, "/ckpt/run-1");
    assert_int_equal(s->checkpoint_interval, 500);
    assert_int_equal(s->checkpoint_keep, 2);
    check_round_trip(s);
    free(s);
}

static void test_full_mlp_idx_onebit_naive(void **state)
{
    (void)state;
    ob_jobspec *s = new_spec();
    parse_ok(s,
             "name: mlp-idx\n"
             "model:\n"
             "  type: mlp\n"
             "  hidden:\n"
             "    - 512\n"
             "    - 256\n"
             "    - 64\n"
             "  activation: gelu\n"
             "data:\n"
             "  type: idx\n"
             "  path: '/data/my idx'\n"
             "optimizer:\n"
             "  type: onebit_adam\n"
             "  compression: naive\n"
             "  scale: l2\n"
             "  block_size: 4096\n"
             "  freeze_threshold: 0.9\n"
             "  freeze_min_steps: 20\n"
             "  bias_correction: true\n"
             "batch_size: 32\n"
             "steps: 0x10\n" /* core-schema hexadecimal */
             "lr:\n"
             "  schedule: warmup_step_decay\n"
             "  peak: 1e-3\n"
             "  warmup_steps: 4\n"
             "  decay_rate: 0.5\n"
             "  decay_every: 3\n"
             "seed: 0o17\n", /* core-schema octal */
             OB_SPEC_YAML);
    assert_int_equal(s->model.kind, OB_MODEL_MLP);
    assert_int_equal(s->model.num_hidden, 3);
    assert_int_equal(s->model.hidden[0], 512);
    assert_int_equal(s->model.hidden[2], 64);
    assert_int_equal(s->model.hidden[3], 0);
    assert_int_equal(s->model.activation, OB_ACT_GELU);
    assert_string_equal(s->data.path, "/data/my idx");
    assert_int_equal(s->data.norm, OB_FEATURES_STANDARDIZE);
    assert_int_equal(s->optim.mode, OB_ONEBIT_NAIVE);
    assert_int_equal(s->optim.scale, OB_SCALE_L2);
    assert_int_equal(s->optim.block_size, 4096);
    assert_true(s->optim.freeze_threshold == 0.9);
    assert_int_equal(s->optim.freeze_min_steps, 20);
    assert_int_equal(s->optim.bias_correction, 1);
    assert_int_equal(s->steps, 16);
    assert_int_equal(s->seed, 15);
    assert_int_equal(s->lr.kind, OB_LR_WARMUP_STEP_DECAY);
    assert_true(s->lr.peak == 0.001 && s->lr.decay_rate == 0.5);
    assert_int_equal(s->lr.decay_every, 3);
    assert_int_equal(s->optim.lr_warmup_steps, 4);
    check_round_trip(s);
    free(s);
}

static void test_full_mlp_synthetic_onebit_off(void **state)
{
    (void)state;
    ob_jobspec *s = new_spec();
    parse_ok(s,
             "model: {type: mlp, hidden: [16], activation: tanh}\n"
             "data:\n"
             "  type: synthetic_classification\n"
             "  n_train: 1000\n"
             "  n_eval: 200\n"
             "  input_dim: 8\n"
             "  num_classes: 3\n"
             "  noise: 0.1\n"
             "optimizer:\n"
             "  type: onebit_adam\n"
             "  compression: off\n" /* a string in YAML 1.2, not a boolean */
             "  freeze_step: 100\n"
             "batch_size: 10\n"
             "steps: 300\n"
             "seed: +42\n",
             OB_SPEC_AUTO);
    assert_int_equal(s->data.kind, OB_DATA_SYNTH_CLASSIFICATION);
    assert_int_equal(s->data.synth_cls.n_train, 1000);
    assert_int_equal(s->data.synth_cls.n_eval, 200);
    assert_int_equal(s->data.synth_cls.input_dim, 8);
    assert_int_equal(s->data.synth_cls.num_classes, 3);
    assert_true(s->data.synth_cls.noise == 0.1f);
    assert_int_equal(s->data.synth_cls.seed, 42); /* drawn from the job's seed */
    assert_string_equal(s->data.path, "");
    assert_int_equal(s->model.activation, OB_ACT_TANH);
    assert_int_equal(s->optim.mode, OB_ONEBIT_UNCOMPRESSED);
    assert_int_equal(s->optim.freeze_step, 100);
    check_round_trip(s);

    /* The float prints in its shortest form, and doubles in the fewest exact digits. */
    char *json = NULL;
    assert_int_equal(ob_jobspec_to_json(s, &json, NULL), OB_OK);
    assert_non_null(strstr(json, "\"noise\":0.1}"));
    assert_non_null(strstr(json, "\"beta2\":0.999,"));
    assert_non_null(strstr(json, "\"eps\":1e-8,"));
    assert_non_null(strstr(json, "\"freeze_step\":100,"));
    free(json);
    free(s);
}

static void test_full_transformer_text_onebit(void **state)
{
    (void)state;
    ob_jobspec *s = new_spec();
    parse_ok(s,
             "{\"model\": {\"type\": \"transformer\", \"layers\": 3, \"heads\": 2, \"d_model\": "
             "64, \"context\": 32, \"tied_output\": false},\n"
             " \"data\": {\"type\": \"text\", \"eval_fraction\": 0.05, \"max_bytes\": 100000},\n"
             " \"optimizer\": {\"type\": \"onebit_adam\", \"compression\": \"on\", "
             "\"freeze_step\": \"auto\", \"beta2\": 0.99},\n"
             " \"batch_size\": 4, \"steps\": 50, \"lr\": {\"warmup_steps\": 10, \"peak\": 3e-4}}",
             OB_SPEC_JSON);
    assert_int_equal(s->model.kind, OB_MODEL_TRANSFORMER);
    assert_int_equal(s->model.n_layer, 3);
    assert_int_equal(s->model.n_head, 2);
    assert_int_equal(s->model.d_model, 64);
    assert_int_equal(s->model.context, 32);
    assert_int_equal(s->model.tied_output, 0);
    assert_int_equal(s->data.kind, OB_DATA_TEXT);
    assert_string_equal(s->data.path, OB_FORTUNES_DIR);
    assert_true(s->data.eval_fraction == 0.05);
    assert_int_equal(s->data.max_bytes, 100000);
    assert_int_equal(s->optim.mode, OB_ONEBIT_COMPRESSED);
    assert_int_equal(s->optim.freeze_step, 0);
    assert_int_equal(s->optim.lr_warmup_steps, 10);
    check_round_trip(s);
    free(s);
}

static void test_full_transformer_synthetic_text_adam(void **state)
{
    (void)state;
    ob_jobspec *s = new_spec();
    parse_ok(s,
             "model:\n"
             "  type: transformer\n"
             "  layers: 1\n"
             "  heads: 4\n"
             "  d_model: 32\n"
             "  context: 16\n"
             "  tied_output: True\n"
             "data:\n"
             "  type: synthetic_text\n"
             "  train_bytes: 4096\n"
             "  eval_bytes: 512\n"
             "  alphabet: 8\n"
             "  p_follow: 0.7\n"
             "optimizer: {type: adam, weight_decay: 0.1}\n"
             "batch_size: 2\n"
             "steps: 20\n"
             "seed: 5\n"
             "eval: {interval: 5}\n",
             OB_SPEC_YAML);
    assert_int_equal(s->data.kind, OB_DATA_SYNTH_TEXT);
    assert_int_equal(s->data.synth_text.train_bytes, 4096);
    assert_int_equal(s->data.synth_text.eval_bytes, 512);
    assert_int_equal(s->data.synth_text.alphabet, 8);
    assert_true(s->data.synth_text.p_follow == 0.7);
    assert_int_equal(s->data.synth_text.context, 16); /* from model.context */
    assert_int_equal(s->data.synth_text.seed, 5);
    assert_int_equal(s->model.tied_output, 1);
    assert_true(s->optim.weight_decay == 0.1);
    assert_int_equal(s->eval_interval, 5);
    check_round_trip(s);
    free(s);
}

/* ---- error classes ------------------------------------------------------------------------- */

static void test_to_json(void **state)
{
    (void)state;
    ob_jobspec *s = new_spec();
    ob_err err;
    ob_err_clear(&err);
    char *json = (char *)1;
    ob_jobspec_default(s); /* steps and batch_size 0: not valid */
    assert_int_equal(ob_jobspec_to_json(s, &json, &err), OB_ERR_INVALID_ARG);
    assert_null(json);
    assert_non_null(strstr(err.msg, "not a valid spec"));
    assert_non_null(strstr(err.msg, "batch_size"));

    /* A struct changed by hand is written out canonically and parses back to itself. */
    s->batch_size = 16;
    s->steps = 7;
    s->lr.total_steps = 7;
    s->seed = 123;
    snprintf(s->name, sizeof s->name, "by-hand");
    check_round_trip(s);
    assert_int_equal(ob_jobspec_to_json(s, &json, &err), OB_OK);
    assert_string_equal(
        json, "{\"name\":\"by-hand\",\"model\":{\"type\":\"mlp\",\"hidden\":[256,128],"
              "\"activation\":\"relu\"},\"data\":{\"type\":\"fashion_mnist\",\"path\":"
              "\"/usr/share/datasets/fashion-mnist\",\"normalize\":\"standardize\"},"
              "\"optimizer\":{\"type\":\"adam\",\"beta1\":0.9,\"beta2\":0.999,"
              "\"eps\":1e-8,\"weight_decay\":0.0,\"bias_correction\":true,"
              "\"bucket_mb\":0.0,\"overlap\":false,\"gradient_exchange\":\"fp32\"},"
              "\"batch_size\":16,\"steps\":7,\"lr\":{\"schedule\":\"constant\","
              "\"peak\":0.001,\"warmup_steps\":0},\"seed\":123,\"eval\":{\"interval\":0,"
              "\"max_examples\":0},\"log_interval\":10,\"checkpoint\":{\"dir\":\"\","
              "\"interval\":0,\"keep\":3,\"async\":false,\"rollbacks\":2,\"loss_rise\":2.0},"
              "\"device\":\"cpu\"}");
    free(json);

    /* An out-of-range enum is refused, not printed as "unknown". */
    s->optim.kind = (ob_optim_kind)7;
    assert_int_equal(ob_jobspec_to_json(s, &json, NULL), OB_ERR_INVALID_ARG);
    assert_null(json);
    free(s);

    assert_string_equal(ob_data_kind_name(OB_DATA_SYNTH_TEXT), "synthetic_text");
    assert_string_equal(ob_data_kind_name(OB_DATA_FASHION_MNIST), "fashion_mnist");
    assert_string_equal(ob_data_kind_name((ob_data_kind)99), "unknown");
}

/* ---- the parsed structs fit the constructors they are meant for ----------------------------- */

/* What the worker does with a spec: build the dataset, fill in the model's data-dependent
 * fields, create the model and the optimizer configuration. */
static void build_from(const char *text)
{
    ob_jobspec *s = new_spec();
    parse_ok(s, text, OB_SPEC_YAML);
    ob_err err;
    ob_err_clear(&err);
    ob_dataset *ds = NULL;
    ob_status st = s->data.kind == OB_DATA_SYNTH_TEXT
                       ? ob_dataset_synthetic_text(&ds, &s->data.synth_text, &err)
                       : ob_dataset_synthetic_classification(&ds, &s->data.synth_cls, &err);
    if (st) print_error("dataset: %s\n", err.msg);
    assert_int_equal(st, OB_OK);
    ob_model_config cfg = s->model;
    cfg.max_batch = s->batch_size;
    cfg.input_dim = ob_dataset_input_dim(ds);
    cfg.num_classes = (size_t)ob_dataset_num_classes(ds);
    ob_model *m = NULL;
    st = ob_model_create(&m, &cfg, &err);
    if (st) print_error("model: %s\n", err.msg);
    assert_int_equal(st, OB_OK);
    assert_int_equal(ob_optim_config_validate(&s->optim, &err), OB_OK);
    assert_int_equal(ob_lr_schedule_validate(&s->lr, &err), OB_OK);
    ob_model_destroy(m);
    ob_dataset_destroy(ds);
    free(s);
}

static void test_specs_build(void **state)
{
    (void)state;
    build_from("model: {type: mlp}\ndata: {type: synthetic_classification}\n"
               "optimizer: {type: onebit_adam}\nbatch_size: 16\nsteps: 10\n");
    build_from("model: {type: softmax}\ndata: {type: synthetic_classification, n_train: 1, "
               "n_eval: 1, input_dim: 1, num_classes: 2, noise: 0}\n"
               "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n");
    build_from("model: {type: transformer}\ndata: {type: synthetic_text}\n"
               "optimizer: {type: adam}\nbatch_size: 2\nsteps: 10\n");
    build_from("model: {type: transformer, layers: 1, heads: 1, d_model: 8, context: 4}\n"
               "data: {type: synthetic_text, train_bytes: 8, eval_bytes: 5, alphabet: 64, "
               "p_follow: 1}\noptimizer: {type: onebit_adam}\nbatch_size: 1\nsteps: 1\n");
}

/* ---- files --------------------------------------------------------------------------------- */

static void test_load_files(void **state)
{
    (void)state;
    ob_jobspec *s = new_spec(), *before = new_spec(), *ref = new_spec();
    ob_err err;
    parse_ok(ref, min_yaml, OB_SPEC_YAML);

    /* Extension decides the format; anything else is detected. */
    const char *p = write_tmp("a.yml", min_yaml);
    assert_int_equal(ob_jobspec_load(s, p, &err), OB_OK);
    assert_memory_equal(s, ref, sizeof *s);
    p = write_tmp("b.JSON", min_json);
    assert_int_equal(ob_jobspec_load(s, p, &err), OB_OK);
    assert_memory_equal(s, ref, sizeof *s);
    p = write_tmp("c.spec", min_json);
    assert_int_equal(ob_jobspec_load(s, p, &err), OB_OK);
    assert_memory_equal(s, ref, sizeof *s);
    p = write_tmp("d.spec", min_yaml);
    assert_int_equal(ob_jobspec_load(s, p, &err), OB_OK);
    assert_memory_equal(s, ref, sizeof *s);
    /* YAML in a .json file is read as JSON, and the message starts with the path. */
    p = write_tmp("e.json", min_yaml);
    memset(s, 0x3C, sizeof *s);
    memcpy(before, s, sizeof *s);
    assert_int_equal(ob_jobspec_load(s, p, &err), OB_ERR_INVALID_ARG);
    assert_int_equal(strncmp(err.msg, p, strlen(p)), 0);
    assert_non_null(strstr(err.msg, ": JSON syntax error at line 1"));
    assert_memory_equal(s, before, sizeof *s);
    /* A validation error names the path and the field. */
    p = write_tmp("f.yaml", yaml_with("lr: {peek: 1}\n"));
    assert_int_equal(ob_jobspec_load(s, p, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "f.yaml: lr.peek: unknown field (did you mean peak?)"));
    assert_memory_equal(s, before, sizeof *s);

    /* Missing files, directories, oversized files. */
    char missing_path[256];
    snprintf(missing_path, sizeof missing_path, "%s/no-such.yaml", g_tmp);
    assert_int_equal(ob_jobspec_load(s, missing_path, &err), OB_ERR_NOT_FOUND);
    assert_int_equal(err.code, OB_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no-such.yaml: no such file"));
    assert_int_equal(ob_jobspec_load(s, g_tmp, &err), OB_ERR_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    char *huge = malloc(OB_JOBSPEC_MAX_BYTES + 2);
    assert_non_null(huge);
    memset(huge, '#', OB_JOBSPEC_MAX_BYTES + 1);
    huge[OB_JOBSPEC_MAX_BYTES + 1] = '\0';
    p = write_tmp("huge.yaml", huge);
    free(huge);
    assert_int_equal(ob_jobspec_load(s, p, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "larger than the limit"));
    assert_memory_equal(s, before, sizeof *s);
    free(s);
    free(before);
    free(ref);
}

static void test_examples(void **state)
{
    (void)state;
    DIR *d = opendir(OB_EXAMPLES_DIR);
    assert_non_null(d);
    int count = 0;
    struct dirent *e;
    ob_jobspec *s = new_spec();
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        int json = n > 5 && strcmp(e->d_name + n - 5, ".json") == 0;
        int yaml = (n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0) ||
                   (n > 4 && strcmp(e->d_name + n - 4, ".yml") == 0);
        if (!json && !yaml) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", OB_EXAMPLES_DIR, e->d_name);
        ob_err err;
        ob_err_clear(&err);
        ob_status st = ob_jobspec_load(s, path, &err);
        if (st != OB_OK) print_error("%s: %s\n", path, err.msg);
        assert_int_equal(st, OB_OK);
        check_round_trip(s);
        count++;
    }
    closedir(d);
    assert_true(count >= 3);

    /* The three named examples say what their names say. */
    ob_err err;
    assert_int_equal(ob_jobspec_load(s, OB_EXAMPLES_DIR "/fmnist-mlp-onebit.yaml", &err), OB_OK);
    assert_int_equal(s->model.kind, OB_MODEL_MLP);
    assert_int_equal(s->data.kind, OB_DATA_FASHION_MNIST);
    assert_int_equal(s->optim.kind, OB_OPTIM_ONEBIT_ADAM);
    assert_int_equal(s->optim.mode, OB_ONEBIT_COMPRESSED);
    assert_int_equal(ob_jobspec_load(s, OB_EXAMPLES_DIR "/fmnist-mlp-adam.json", &err), OB_OK);
    assert_int_equal(s->model.kind, OB_MODEL_MLP);
    assert_int_equal(s->optim.kind, OB_OPTIM_ADAM);
    assert_int_equal(ob_jobspec_load(s, OB_EXAMPLES_DIR "/text-transformer-onebit.yaml", &err),
                     OB_OK);
    assert_int_equal(s->model.kind, OB_MODEL_TRANSFORMER);
    assert_int_equal(s->data.kind, OB_DATA_TEXT);
    assert_string_equal(s->data.path, OB_FORTUNES_DIR);
    assert_int_equal(s->optim.kind, OB_OPTIM_ONEBIT_ADAM);
    assert_int_equal(s->model.n_layer, 2);
    assert_int_equal(s->model.context, 64);
    free(s);
}

/* Resident bytes of this process (/proc/self/statm). */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* ob_jobspec_memory_estimate against what a process that builds the same buffers (data set,
 * model with activations for the batch, parameters and gradients, optimizer) really grows by:
 * within 25 % (the estimate without its fixed process part). */
static void check_estimate(const char *yaml)
{
    ob_jobspec spec;
    ob_err err;
    assert_int_equal(ob_jobspec_parse(&spec, yaml, strlen(yaml), OB_SPEC_YAML, &err), OB_OK);
    ob_memory_estimate est;
    assert_int_equal(ob_jobspec_memory_estimate(&spec, 1, &est, &err), OB_OK);
    assert_int_equal(est.total, est.params + est.optimizer + est.activations + est.data + est.base);

    uint64_t before = rss_bytes();
    ob_dataset *ds = NULL;
    ob_synth_classification_spec sc = spec.data.synth_cls;
    assert_int_equal(ob_dataset_synthetic_classification(&ds, &sc, &err), OB_OK);
    ob_model_config cfg = spec.model;
    cfg.input_dim = sc.input_dim;
    cfg.num_classes = (size_t)sc.num_classes;
    cfg.max_batch = spec.batch_size;
    ob_model *m = NULL;
    assert_int_equal(ob_model_create(&m, &cfg, &err), OB_OK);
    size_t d = ob_model_num_params(m);
    float *params = calloc(2 * d, sizeof(float));
    assert_non_null(params);
    memset(params, 1, 2 * d * sizeof(float));
    ob_comm *comm = NULL;
    assert_int_equal(ob_comm_create_self(&comm, &err), OB_OK);
    ob_optim *opt = NULL;
    assert_int_equal(ob_optim_create(&opt, &spec.optim, comm, params, d, &err), OB_OK);
    /* Touch the activations: a forward and backward pass over one batch. */
    float *x = calloc(spec.batch_size * sc.input_dim, sizeof(float));
    int32_t *y = calloc(spec.batch_size, sizeof(int32_t));
    assert_true(x && y);
    ob_batch b = {.n = spec.batch_size, .input_dim = sc.input_dim, .x = x, .y = y};
    ob_model_result res;
    assert_int_equal(ob_model_forward_backward(m, params, &b, params + d, &res, &err), OB_OK);
    uint64_t grown = rss_bytes() - before;
    uint64_t want = est.total - est.base;
    fprintf(stderr, "estimate %llu bytes, measured growth %llu\n", (unsigned long long)want,
            (unsigned long long)grown);
    assert_true((double)grown >= 0.75 * (double)want && (double)grown <= 1.25 * (double)want);
    free(x);
    free(y);
    ob_optim_destroy(opt);
    ob_comm_destroy(comm);
    free(params);
    ob_model_destroy(m);
    ob_dataset_destroy(ds);
}

static void test_memory_estimate(void **state)
{
    (void)state;
    check_estimate("model: {type: mlp, hidden: [1024, 1024]}\n"
                   "data: {type: synthetic_classification, n_train: 20000, n_eval: 1000, "
                   "input_dim: 512, num_classes: 10}\n"
                   "optimizer: {type: adam}\nbatch_size: 256\nsteps: 1\n");
    check_estimate("model: {type: softmax}\n"
                   "data: {type: synthetic_classification, n_train: 4000, n_eval: 100, "
                   "input_dim: 4096, num_classes: 64}\n"
                   "optimizer: {type: onebit_adam}\nbatch_size: 64\nsteps: 1\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal_defaults),
        cmocka_unit_test(test_memory_estimate),
        cmocka_unit_test(test_minimal_onebit_defaults),
        cmocka_unit_test(test_bucket_defaults),
        cmocka_unit_test(test_gradient_exchange_defaults),
        cmocka_unit_test(test_track_variance_default),
        cmocka_unit_test(test_mlp_tracking_default),
        cmocka_unit_test(test_transformer_overlap_default),
        cmocka_unit_test(test_binsgdm_softsign),
        cmocka_unit_test(test_full_softmax_fmnist_adam),
        cmocka_unit_test(test_full_mlp_idx_onebit_naive),
        cmocka_unit_test(test_full_mlp_synthetic_onebit_off),
        cmocka_unit_test(test_full_transformer_text_onebit),
        cmocka_unit_test(test_full_transformer_synthetic_text_adam),
        cmocka_unit_test(test_to_json),
        cmocka_unit_test(test_specs_build),
        cmocka_unit_test(test_load_files),
        cmocka_unit_test(test_examples),
    };
    return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
