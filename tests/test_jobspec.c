/* Tests for the job spec (onebit/jobspec.h): JSON and YAML map onto the same struct with the
 * documented defaults; every model/data/optimizer combination parses; the canonical JSON reads
 * back to a memcmp-identical struct; every class of bad input is rejected with the field's path
 * (or the line) in the message and leaves the output struct untouched; the files in examples/
 * all load. Fixture files go to a mkdtemp directory that the group teardown removes. */
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

static char g_tmp[64];

/* ---- helpers ------------------------------------------------------------------------------- */

static ob_jobspec *new_spec(void)
{
    ob_jobspec *s = malloc(sizeof *s);
    assert_non_null(s);
    return s;
}

/* Parses text, failing the test with the library's message when it does not parse. */
static void parse_ok(ob_jobspec *out, const char *text, ob_spec_format fmt)
{
    ob_err err;
    ob_err_clear(&err);
    ob_status st = ob_jobspec_parse(out, text, strlen(text), fmt, &err);
    if (st != OB_OK) print_error("unexpected failure: %s\n--- spec ---\n%s\n", err.msg, text);
    assert_int_equal(st, OB_OK);
}

/* Parses text expecting `code` and a message containing every non-NULL needle; the output
 * struct, filled with a pattern beforehand, must come back byte for byte unchanged. */
static void expect_error3(ob_spec_format fmt, const char *text, ob_status code, const char *needle,
                          const char *needle2, const char *needle3)
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

static void expect_error(ob_spec_format fmt, const char *text, const char *needle)
{
    expect_error3(fmt, text, OB_ERR_INVALID_ARG, needle, NULL, NULL);
}

/* to_json -> parse -> identical struct, and the canonical text is a fixed point. */
static void check_round_trip(const ob_jobspec *s)
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

static const char *write_tmp(const char *name, const char *text)
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

static const char *min_json = "{\"model\": {\"type\": \"mlp\"}, \"data\": {\"type\": "
                              "\"fashion_mnist\"}, \"optimizer\": {\"type\": \"adam\"}, "
                              "\"batch_size\": 64, \"steps\": 100}";
static const char *min_yaml = "model: {type: mlp}\n"
                              "data:\n"
                              "  type: fashion_mnist\n"
                              "optimizer:\n"
                              "  type: adam\n"
                              "batch_size: 64\n"
                              "steps: 100\n";

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
    assert_int_equal(j->optim.freeze_step, 0);
    assert_true(j->optim.freeze_threshold == 0.96);
    assert_int_equal(j->optim.freeze_min_steps, 0);
    assert_int_equal(j->optim.block_size, 2048);
    assert_int_equal(j->optim.scale, OB_SCALE_L1);
    assert_int_equal(j->optim.lr_warmup_steps, 3); /* from lr.warmup_steps */
    check_round_trip(j);
    free(j);
    free(y);
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

/* A valid YAML spec with one line replaced or added, for the error tests. */
static char *yaml_with(const char *extra)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "model:\n  type: mlp\ndata:\n  type: fashion_mnist\noptimizer:\n  type: onebit_adam\n"
             "batch_size: 64\nsteps: 100\n%s",
             extra);
    return buf;
}

static void test_unknown_fields(void **state)
{
    (void)state;
    expect_error(OB_SPEC_YAML, yaml_with("stepz: 5\n"),
                 "stepz: unknown field (did you mean steps?)");
    expect_error(OB_SPEC_YAML, yaml_with("colour: blue\n"), "colour: unknown field");
    expect_error(OB_SPEC_JSON,
                 "{\"model\": {\"type\": \"mlp\"}, \"data\": {\"type\": \"fashion_mnist\"}, "
                 "\"optimizer\": {\"type\": \"adam\", \"betta1\": 0.9}, \"batch_size\": 1, "
                 "\"steps\": 1}",
                 "optimizer.betta1: unknown field (did you mean beta1?)");
    expect_error(OB_SPEC_YAML,
                 "model:\n  type: mlp\n  hiden: [3]\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "model.hiden: unknown field (did you mean hidden?)");
    expect_error(OB_SPEC_YAML, yaml_with("eval:\n  intervall: 5\n"),
                 "eval.intervall: unknown field (did you mean interval?)");
    expect_error(OB_SPEC_YAML, yaml_with("checkpoint: {keep: 2, dirr: /x}\n"),
                 "checkpoint.dirr: unknown field");
    expect_error(OB_SPEC_YAML, yaml_with("lr: {schedule: constant, shape: 3}\n"),
                 "lr.shape: unknown field");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist, paht: /x}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.paht: unknown field (did you mean path?)");
    /* Misspelled sections are unknown, not "missing". */
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\noptimiser: {type: adam}\n"
                 "batch_size: 1\nsteps: 1\n",
                 "optimiser: unknown field (did you mean optimizer?)");
}

static void test_wrong_types(void **state)
{
    (void)state;
    expect_error(OB_SPEC_JSON,
                 "{\"model\": {\"type\": \"mlp\"}, \"data\": {\"type\": \"fashion_mnist\"}, "
                 "\"optimizer\": {\"type\": \"adam\"}, \"batch_size\": \"64\", \"steps\": 1}",
                 "batch_size: expected a positive integer, got \"64\"");
    /* Quoted YAML scalars are strings too. */
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\noptimizer: {type: adam}\n"
                 "batch_size: \"64\"\nsteps: 1\n",
                 "batch_size: expected a positive integer, got \"64\"");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\noptimizer: {type: adam}\n"
                 "batch_size: 64.0\nsteps: 1\n",
                 "batch_size: expected a positive integer, got 64.0");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\noptimizer: {type: adam}\n"
                 "batch_size: 8\nsteps: ~\n",
                 "steps: expected a positive integer, got null");
    expect_error(OB_SPEC_YAML, yaml_with("lr: {peak: fast}\n"),
                 "lr.peak: expected a number, got \"fast\"");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, bias_correction: yes}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.bias_correction: expected true or false, got \"yes\"");
    expect_error(OB_SPEC_YAML,
                 "model: {type: cnn}\ndata: {type: fashion_mnist}\noptimizer: {type: adam}\n"
                 "batch_size: 1\nsteps: 1\n",
                 "model.type: expected one of softmax, mlp or transformer, got \"cnn\"");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\noptimizer: adam\n"
                 "batch_size: 1\nsteps: 1\n",
                 "optimizer: expected an object (mapping), got \"adam\"");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp, hidden: 128}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "model.hidden: expected a list of 1 to 8 positive integers, got 128");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp, hidden: [64, \"32\"]}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "model.hidden[1]: expected a positive integer <= 16777216, got \"32\"");
    expect_error(OB_SPEC_YAML, yaml_with("name: 12\n"),
                 "name: expected a string of at most 127 characters");
    expect_error(OB_SPEC_YAML, yaml_with("checkpoint: {dir: [a]}\n"),
                 "checkpoint.dir: expected a path");
}

static void test_out_of_range(void **state)
{
    (void)state;
    /* Through ob_optim_config_validate, with the section put in front. */
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, beta1: 1.5}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.beta1 = 1.5: must be in [0, 1)");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: onebit_adam, block_size: 100}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.block_size = 100: must be a positive multiple of 32");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: onebit_adam, freeze_threshold: 0}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.freeze_threshold = 0: must be in (0, 1]");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, eps: 0}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.eps = 0: must be > 0");
    /* Through ob_lr_schedule_validate. */
    expect_error(OB_SPEC_YAML, yaml_with("lr: {peak: -1}\n"), "lr.peak = -1: must be > 0");
    expect_error(OB_SPEC_YAML, yaml_with("lr: {schedule: warmup_step_decay, decay_rate: 1.5}\n"),
                 "lr.decay_rate = 1.5: must be in (0, 1]");
    expect_error(OB_SPEC_YAML, yaml_with("lr: {schedule: cosine, warmup_steps: 100}\n"),
                 "lr.warmup_steps = 100: cosine needs more total steps (100) than warmup");
    /* Our own ranges. */
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\noptimizer: {type: adam}\n"
                 "batch_size: 0\nsteps: 1\n",
                 "batch_size: expected a positive integer <= 16777216, got 0");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\noptimizer: {type: adam}\n"
                 "batch_size: 1\nsteps: -5\n",
                 "steps: expected a positive integer, got -5");
    expect_error(OB_SPEC_YAML, yaml_with("seed: -1\n"), "seed: expected an integer >= 0, got -1");
    expect_error(OB_SPEC_YAML, yaml_with("log_interval: 0\n"),
                 "log_interval: expected a positive integer, got 0");
    expect_error(OB_SPEC_YAML, yaml_with("checkpoint: {keep: 0}\n"),
                 "checkpoint.keep: expected a positive integer <= 2147483647, got 0");
    expect_error(OB_SPEC_YAML, yaml_with("eval: {interval: -1}\n"),
                 "eval.interval: expected an integer >= 0, got -1");
    expect_error(OB_SPEC_YAML, yaml_with("name: has space\n"),
                 "name: expected a string of at most 127 characters from [A-Za-z0-9._-], got "
                 "\"has space\"");
    expect_error(OB_SPEC_YAML,
                 "model: {type: transformer, heads: 3}\ndata: {type: text}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "model.heads: 3 does not divide model.d_model (128)");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp, hidden: [1, 2, 3, 4, 5, 6, 7, 8, 9]}\n"
                 "data: {type: fashion_mnist}\noptimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "model.hidden: expected a list of 1 to 8 positive integers, got a list of 9");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp, hidden: []}\n"
                 "data: {type: fashion_mnist}\noptimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "model.hidden: expected a list of 1 to 8 positive integers, got a list of 0");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp, hidden: [8, 0]}\n"
                 "data: {type: fashion_mnist}\noptimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "model.hidden[1]: expected a positive integer <= 16777216, got 0");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: synthetic_classification, noise: -1}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.noise: expected a number >= 0, got -1");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: synthetic_classification, num_classes: 1}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.num_classes: expected an integer in [2, 16777216], got 1");
    expect_error(OB_SPEC_YAML,
                 "model: {type: transformer}\ndata: {type: text, eval_fraction: 1.0}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.eval_fraction: expected a number in (0, 1), got 1.0");
    expect_error(OB_SPEC_YAML,
                 "model: {type: transformer}\ndata: {type: synthetic_text, alphabet: 65}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.alphabet: expected an integer in [2, 64], got 65");
    expect_error(OB_SPEC_YAML,
                 "model: {type: transformer, context: 64}\n"
                 "data: {type: synthetic_text, train_bytes: 100}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.train_bytes: expected at least 2 * model.context = 128, got 100");
    expect_error(OB_SPEC_YAML,
                 "model: {type: transformer, context: 64}\n"
                 "data: {type: synthetic_text, eval_bytes: 64}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.eval_bytes: expected more than model.context = 64");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist, path: ''}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.path: expected a non-empty path");
    /* Numbers YAML can write but a spec cannot hold. */
    expect_error(OB_SPEC_YAML, yaml_with("lr: {peak: .inf}\n"),
                 "lr.peak: infinities and NaNs are not allowed");
    expect_error(OB_SPEC_YAML, yaml_with("lr: {peak: .nan}\n"), "lr.peak: infinities and NaNs");
    expect_error(OB_SPEC_YAML, yaml_with("lr: {peak: 1e999}\n"), "lr.peak: number out of range");
    expect_error(OB_SPEC_YAML, yaml_with("seed: 99999999999999999999\n"),
                 "seed: integer out of range (line 9");
}

static void test_missing_required(void **state)
{
    (void)state;
    expect_error(OB_SPEC_YAML,
                 "data: {type: fashion_mnist}\noptimizer: {type: adam}\n"
                 "batch_size: 1\nsteps: 1\n",
                 "model: missing required field");
    expect_error(OB_SPEC_YAML,
                 "model: {}\ndata: {type: fashion_mnist}\noptimizer: {type: adam}\n"
                 "batch_size: 1\nsteps: 1\n",
                 "model.type: missing required field (one of softmax, mlp or transformer)");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\noptimizer: {type: adam}\n"
                 "batch_size: 1\nsteps: 1\n",
                 "data: missing required field");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "batch_size: 1\nsteps: 1\n",
                 "optimizer: missing required field");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {lr: 3}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.type: missing required field");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam}\nsteps: 1\n",
                 "batch_size: missing required field");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\n",
                 "steps: missing required field");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: idx}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.path: missing required field");
}

static void test_mismatches(void **state)
{
    (void)state;
    expect_error3(OB_SPEC_YAML,
                  "model: {type: transformer}\ndata: {type: fashion_mnist}\n"
                  "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                  OB_ERR_INVALID_ARG, "model.type: transformer needs text data",
                  "data.type is fashion_mnist", NULL);
    expect_error3(OB_SPEC_YAML,
                  "model: {type: mlp}\ndata: {type: synthetic_text}\n"
                  "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                  OB_ERR_INVALID_ARG, "model.type: mlp needs classification data",
                  "data.type is synthetic_text", NULL);
    /* A field of another optimizer, data, model or schedule type. */
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, compression: off}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.compression: only for onebit_adam");
    expect_error(OB_SPEC_JSON,
                 "{\"model\": {\"type\": \"mlp\"}, \"data\": {\"type\": \"fashion_mnist\"}, "
                 "\"optimizer\": {\"type\": \"adam\", \"freeze_step\": 10}, \"batch_size\": 1, "
                 "\"steps\": 1}",
                 "optimizer.freeze_step: only for onebit_adam");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist, eval_fraction: 0.2}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.eval_fraction: only for text");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: synthetic_classification, path: /x}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.path: only for fashion_mnist, idx or text");
    expect_error(OB_SPEC_YAML,
                 "model: {type: transformer}\ndata: {type: text, normalize: unit}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "data.normalize: only for fashion_mnist or idx");
    expect_error(OB_SPEC_YAML,
                 "model: {type: softmax, hidden: [10]}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "model.hidden: only for mlp");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp, layers: 2}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam}\nbatch_size: 1\nsteps: 1\n",
                 "model.layers: only for transformer");
    expect_error(OB_SPEC_YAML, yaml_with("lr: {min_lr: 0.0001}\n"), "lr.min_lr: only for cosine");
}

static void test_freeze_step(void **state)
{
    (void)state;
    const char *head = "model: {type: mlp}\ndata: {type: fashion_mnist}\nbatch_size: 1\nsteps: 1\n";
    char buf[512];
    snprintf(buf, sizeof buf, "%soptimizer: {type: onebit_adam, freeze_step: never}\n", head);
    expect_error(OB_SPEC_YAML, buf,
                 "optimizer.freeze_step: expected \"auto\" or a positive integer, got \"never\"");
    snprintf(buf, sizeof buf, "%soptimizer: {type: onebit_adam, freeze_step: 0}\n", head);
    expect_error(OB_SPEC_YAML, buf,
                 "optimizer.freeze_step: expected \"auto\" or a positive integer, got 0");
    snprintf(buf, sizeof buf, "%soptimizer: {type: onebit_adam, freeze_step: Auto}\n", head);
    expect_error(OB_SPEC_YAML, buf, "optimizer.freeze_step: expected \"auto\"");
    snprintf(buf, sizeof buf,
             "%soptimizer: {type: onebit_adam, compression: naive, freeze_step: 10}\n", head);
    expect_error(OB_SPEC_YAML, buf, "optimizer.freeze_step: compression naive never freezes v");
    snprintf(buf, sizeof buf, "%soptimizer: {type: onebit_adam, compression: maybe}\n", head);
    expect_error(OB_SPEC_YAML, buf,
                 "optimizer.compression: expected one of on, off or naive, got \"maybe\"");
    /* The quoted "auto" is the same as the plain one. */
    ob_jobspec *s = new_spec();
    snprintf(buf, sizeof buf, "%soptimizer: {type: onebit_adam, freeze_step: \"auto\"}\n", head);
    parse_ok(s, buf, OB_SPEC_YAML);
    assert_int_equal(s->optim.freeze_step, 0);
    free(s);
}

static void test_syntax_errors(void **state)
{
    (void)state;
    /* YAML: line and column of the problem. */
    expect_error(OB_SPEC_YAML, "steps: 10\nbatch_size: 5\nname: a: b\n",
                 "YAML syntax error at line 3, column 8");
    expect_error(OB_SPEC_YAML, "model:\n  type: mlp\n data: [1, 2\n", "YAML syntax error at line");
    /* JSON: jansson's line and column. */
    expect_error(OB_SPEC_JSON, "{\n  \"steps\": 10,\n  \"batch_size\": ,\n}",
                 "JSON syntax error at line 3");
    expect_error(OB_SPEC_AUTO, "{\"steps\": 10,}", "JSON syntax error at line 1");
    /* Duplicate keys in both formats, at any depth. */
    expect_error(OB_SPEC_JSON, "{\"steps\": 1,\n \"steps\": 2}", "duplicate object key");
    expect_error(OB_SPEC_JSON, "{\"optimizer\": {\"type\": \"adam\",\n \"type\": \"adam\"}}",
                 "JSON syntax error at line 2");
    expect_error(OB_SPEC_YAML, yaml_with("steps: 200\n"),
                 "steps: duplicate key (line 9, column 1)");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer:\n  type: adam\n  eps: 1e-6\n  eps: 1e-7\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.eps: duplicate key (line 6, column 3)");
    /* Empty documents and roots that are not mappings. */
    expect_error(OB_SPEC_YAML, "", "job spec: empty document");
    expect_error(OB_SPEC_JSON, " \n\t", "job spec: empty document");
    expect_error(OB_SPEC_AUTO, "", "job spec: empty document");
    expect_error(OB_SPEC_YAML, "# nothing but a comment\n", "job spec: empty document");
    expect_error(OB_SPEC_YAML, "---\n",
                 "expected an object (mapping) at the top level, got nothing");
    expect_error(OB_SPEC_JSON, "[1, 2]",
                 "expected an object (mapping) at the top level, got a list");
    expect_error(OB_SPEC_YAML, "- a\n- b\n",
                 "expected an object (mapping) at the top level, got a list");
    expect_error(OB_SPEC_YAML, "hello\n", "at the top level, got \"hello\"");
    expect_error(OB_SPEC_JSON, "42", "at the top level, got 42");
    /* Multi-document streams, anchors, aliases, tags. */
    char buf[1024];
    snprintf(buf, sizeof buf, "%s---\nsteps: 5\n", min_yaml);
    expect_error(OB_SPEC_YAML, buf, "a second document starts at line 8");
    expect_error(OB_SPEC_YAML, yaml_with("eval: &e {interval: 5}\n"), "eval: YAML anchors");
    expect_error(OB_SPEC_YAML, "steps: *x\n", "steps: YAML aliases");
    expect_error(OB_SPEC_YAML, yaml_with("seed: !!int 5\n"), "seed: YAML tags");
    expect_error(OB_SPEC_YAML, "? [a, b]\n: 1\n", "mapping keys must be plain strings");
    /* Nesting is bounded. */
    char deep[256] = "steps: ";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    for (int i = 0; i < 40; i++)
        strcat(deep, "]");
    expect_error(OB_SPEC_YAML, deep, "nested too deeply");
    /* Over the size limit. */
    size_t big = OB_JOBSPEC_MAX_BYTES + 1;
    char *huge = malloc(big + 1);
    assert_non_null(huge);
    memset(huge, ' ', big);
    huge[big] = '\0';
    expect_error(OB_SPEC_AUTO, huge, "over the limit");
    free(huge);
    /* The wrong explicit format is a syntax error of that format. */
    expect_error(OB_SPEC_JSON, min_yaml, "JSON syntax error at line 1");
}

static void test_yaml_typing(void **state)
{
    (void)state;
    ob_jobspec *a = new_spec(), *b = new_spec();
    /* A flow-style YAML mapping given as YAML, a byte order mark, JSON with leading space. */
    parse_ok(a,
             "{model: {type: mlp}, data: {type: fashion_mnist}, optimizer: {type: adam}, "
             "batch_size: 64, steps: 100}",
             OB_SPEC_YAML);
    parse_ok(b, min_json, OB_SPEC_JSON);
    assert_memory_equal(a, b, sizeof *a);
    char buf[1024];
    snprintf(buf, sizeof buf, "\xEF\xBB\xBF  \n%s", min_json);
    parse_ok(a, buf, OB_SPEC_AUTO);
    assert_memory_equal(a, b, sizeof *a);
    snprintf(buf, sizeof buf, "\xEF\xBB\xBF%s", min_yaml);
    parse_ok(a, buf, OB_SPEC_AUTO);
    assert_memory_equal(a, b, sizeof *a);
    /* Floats in every core-schema spelling; integers accepted where numbers are. */
    parse_ok(a, yaml_with("lr: {peak: .5, warmup_steps: 0}\n"), OB_SPEC_YAML);
    assert_true(a->lr.peak == 0.5);
    parse_ok(a, yaml_with("lr: {peak: 2.}\n"), OB_SPEC_YAML);
    assert_true(a->lr.peak == 2.0);
    parse_ok(a, yaml_with("lr: {peak: 1}\n"), OB_SPEC_YAML);
    assert_true(a->lr.peak == 1.0);
    parse_ok(a, yaml_with("lr: {peak: 5E-4}\n"), OB_SPEC_YAML);
    assert_true(a->lr.peak == 5e-4);
    /* A plain scalar that only looks numeric in YAML 1.1 stays a string. */
    expect_error(OB_SPEC_YAML, yaml_with("seed: 1_000\n"),
                 "seed: expected an integer >= 0, got \"1_000\"");
    expect_error(OB_SPEC_YAML, yaml_with("lr: {peak: 1e}\n"),
                 "lr.peak: expected a number, got \"1e\"");
    free(a);
    free(b);
}

/* checkpoint.async and warm_start: parsed, validated, printed back. */
/* device: cpu by default, cuda for softmax and mlp, refused for the transformer. */
static void test_device(void **state)
{
    (void)state;
    const char *base = "model: {type: mlp, hidden: [8]}\ndata: {type: synthetic_classification}\n"
                       "optimizer: {type: onebit_adam}\nbatch_size: 4\nsteps: 10\n";
    char text[1024];
    ob_jobspec s;
    parse_ok(&s, base, OB_SPEC_YAML);
    assert_int_equal(s.device, OB_DEVICE_CPU);
    snprintf(text, sizeof text, "%sdevice: cuda\n", base);
    parse_ok(&s, text, OB_SPEC_YAML);
    assert_int_equal(s.device, OB_DEVICE_CUDA);
    check_round_trip(&s);
    char *json = NULL;
    assert_int_equal(ob_jobspec_to_json(&s, &json, NULL), OB_OK);
    assert_non_null(strstr(json, ",\"device\":\"cuda\"}"));
    free(json);

    snprintf(text, sizeof text, "%sdevice: gpu\n", base);
    expect_error(OB_SPEC_YAML, text, "device: expected one of cpu or cuda, got \"gpu\"");
    snprintf(text, sizeof text, "%sdevice: 1\n", base);
    expect_error(OB_SPEC_YAML, text, "device: expected one of cpu or cuda, got 1");
    expect_error(OB_SPEC_YAML,
                 "model: {type: transformer}\ndata: {type: synthetic_text}\n"
                 "optimizer: {type: adam}\nbatch_size: 4\nsteps: 10\ndevice: cuda\n",
                 "device: cuda runs the softmax and mlp models; the transformer runs on the cpu");
}

static void test_checkpoint_and_warm_start(void **state)
{
    (void)state;
    const char *base = "model: {type: mlp}\ndata: {type: synthetic_classification}\n"
                       "batch_size: 4\nsteps: 10\n";
    char text[1024];
    ob_jobspec s;
    snprintf(text, sizeof text,
             "%soptimizer: {type: onebit_adam}\ncheckpoint: {dir: /ck, interval: 5, async: true}\n"
             "warm_start: {from: /ck/old/step-00000100, params: true}\n",
             base);
    parse_ok(&s, text, OB_SPEC_YAML);
    assert_int_equal(s.checkpoint_async, 1);
    assert_int_equal(s.checkpoint_interval, 5);
    assert_string_equal(s.warm_start_from, "/ck/old/step-00000100");
    assert_int_equal(s.warm_start_params, 1);
    check_round_trip(&s);
    char *json = NULL;
    assert_int_equal(ob_jobspec_to_json(&s, &json, NULL), OB_OK);
    assert_non_null(strstr(json, "\"warm_start\":{\"from\":\"/ck/old/step-00000100\","
                                 "\"params\":true}"));
    free(json);

    snprintf(text, sizeof text, "%soptimizer: {type: onebit_adam}\nwarm_start: {from: /x}\n", base);
    parse_ok(&s, text, OB_SPEC_YAML);
    assert_int_equal(s.warm_start_params, 0);

    snprintf(text, sizeof text, "%soptimizer: {type: adam}\nwarm_start: {from: /x}\n", base);
    expect_error(OB_SPEC_YAML, text, "warm_start: needs optimizer.type onebit_adam");
    snprintf(text, sizeof text,
             "%soptimizer: {type: onebit_adam, compression: naive}\nwarm_start: {from: /x}\n",
             base);
    expect_error(OB_SPEC_YAML, text, "warm_start: needs optimizer.type onebit_adam");
    snprintf(text, sizeof text, "%soptimizer: {type: onebit_adam}\nwarm_start: {params: true}\n",
             base);
    expect_error(OB_SPEC_YAML, text, "warm_start.from: missing required field");
    snprintf(text, sizeof text, "%soptimizer: {type: onebit_adam}\nwarm_start: {from: \"\"}\n",
             base);
    expect_error(OB_SPEC_YAML, text, "warm_start.from");
    snprintf(text, sizeof text, "%soptimizer: {type: onebit_adam}\nwarm_start: {form: /x}\n", base);
    expect_error(OB_SPEC_YAML, text, "warm_start.form: unknown field");
    snprintf(text, sizeof text, "%soptimizer: {type: adam}\ncheckpoint: {async: 1}\n", base);
    expect_error(OB_SPEC_YAML, text, "checkpoint.async");
}

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
    assert_string_equal(json,
                        "{\"name\":\"by-hand\",\"model\":{\"type\":\"mlp\",\"hidden\":[256,128],"
                        "\"activation\":\"relu\"},\"data\":{\"type\":\"fashion_mnist\",\"path\":"
                        "\"/usr/share/datasets/fashion-mnist\",\"normalize\":\"standardize\"},"
                        "\"optimizer\":{\"type\":\"adam\",\"beta1\":0.9,\"beta2\":0.999,"
                        "\"eps\":1e-8,\"weight_decay\":0.0,\"bias_correction\":true},"
                        "\"batch_size\":16,\"steps\":7,\"lr\":{\"schedule\":\"constant\","
                        "\"peak\":0.001,\"warmup_steps\":0},\"seed\":123,\"eval\":{\"interval\":0,"
                        "\"max_examples\":0},\"log_interval\":10,\"checkpoint\":{\"dir\":\"\","
                        "\"interval\":0,\"keep\":3,\"async\":false},\"device\":\"cpu\"}");
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

/* ---- fixtures ------------------------------------------------------------------------------ */

static int make_tmp(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/test_jobspec.XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int remove_tmp(void **state)
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal_defaults),
        cmocka_unit_test(test_minimal_onebit_defaults),
        cmocka_unit_test(test_full_softmax_fmnist_adam),
        cmocka_unit_test(test_full_mlp_idx_onebit_naive),
        cmocka_unit_test(test_full_mlp_synthetic_onebit_off),
        cmocka_unit_test(test_full_transformer_text_onebit),
        cmocka_unit_test(test_full_transformer_synthetic_text_adam),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_missing_required),
        cmocka_unit_test(test_mismatches),
        cmocka_unit_test(test_freeze_step),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_yaml_typing),
        cmocka_unit_test(test_checkpoint_and_warm_start),
        cmocka_unit_test(test_device),
        cmocka_unit_test(test_to_json),
        cmocka_unit_test(test_specs_build),
        cmocka_unit_test(test_load_files),
        cmocka_unit_test(test_examples),
    };
    return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
