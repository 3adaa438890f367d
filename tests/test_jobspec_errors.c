/* Tests for the job spec (onebit/jobspec.h), part two: every class of bad input is rejected with
 * the field's path (or the line) in the message and leaves the output struct untouched. */
#include "jobspec_fixture.h"

/* Program jobs: what a program spec holds, its canonical form, and what it may not hold. */
static void test_program(void **state)
{
    (void)state;
    ob_jobspec *s = new_spec();
    parse_ok(s,
             "name: gpt\nprogram:\n  entrypoint: train.py\n  workdir: /srv/code\n"
             "  args: [--lr, \"3e-4\", \"a b\"]\n  env: {HF_HOME: /tmp/hf, Z_1: \"\"}\n"
             "steps: 600\nseed: 7\n",
             OB_SPEC_YAML);
    assert_true(ob_jobspec_is_program(s));
    assert_string_equal(s->program.entrypoint, "train.py");
    assert_string_equal(s->program.workdir, "/srv/code");
    assert_string_equal(s->program.interpreter, "python3");
    assert_string_equal(s->program.args_json, "[\"--lr\",\"3e-4\",\"a b\"]");
    assert_string_equal(s->program.env_json, "{\"HF_HOME\":\"/tmp/hf\",\"Z_1\":\"\"}");
    assert_int_equal(s->steps, 600);
    assert_int_equal(s->seed, 7);
    check_round_trip(s);
    parse_ok(s, "{\"program\": {\"entrypoint\": \"/x/t.py\"}}", OB_SPEC_JSON);
    assert_string_equal(s->program.args_json, "[]");
    assert_string_equal(s->program.env_json, "{}");
    assert_int_equal(s->steps, 0);
    check_round_trip(s);
    free(s);
    expect_error(OB_SPEC_YAML, "program: {args: [a]}\n", "program.entrypoint: missing");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py}\nmodel: {type: mlp}\n",
                 "model: not with program");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py}\nbatch_size: 8\n",
                 "batch_size: not with program");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py, argz: [a]}\n",
                 "program.argz: unknown field (did you mean args?)");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py, args: [1]}\n",
                 "program.args[0]: expected a string");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py, args: a}\n",
                 "program.args: expected a list of at most 256 strings");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py, workdir: rel/dir}\n",
                 "program.workdir: expected an absolute path");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py, env: {LD_PRELOAD: /x.so}}\n",
                 "program.env.LD_PRELOAD: set by the launcher");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py, env: {ONEBIT_CHECKPOINT_DIR: /}}\n",
                 "program.env.ONEBIT_CHECKPOINT_DIR: set by the launcher");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py, env: {PATH: /x}}\n",
                 "program.env.PATH: set by the launcher");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py, env: {\"A-B\": x}}\n",
                 "a variable name is");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py, env: {A: 1}}\n",
                 "program.env.A: expected a string");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: \"\"}\n", "program.entrypoint: expected");
    expect_error(OB_SPEC_YAML, "program: {entrypoint: t.py}\nsteps: -1\n", "steps:");
    /* At most 256 arguments. */
    char *big = malloc(4096);
    size_t n = (size_t)snprintf(big, 4096, "program: {entrypoint: t.py, args: [");
    for (int i = 0; i < 257; i++)
        n += (size_t)snprintf(big + n, 4096 - n, "%sa", i ? ", " : "");
    snprintf(big + n, 4096 - n, "]}\n");
    expect_error(OB_SPEC_YAML, big, "program.args: expected a list of at most 256 strings");
    free(big);
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

/* The fields of one optimizer are refused on another, by name. */
static void test_optimizer_kinds(void **state)
{
    (void)state;
    const char *base = "model: {type: mlp}\ndata: {type: fashion_mnist}\nbatch_size: 1\n"
                       "steps: 1\noptimizer: {%s}\n";
    const struct {
        const char *optim, *needle;
    } cases[] = {
        {"type: binsgdm, beta2: 0.99", "optimizer.beta2: only for adam or onebit_adam"},
        {"type: binsgdm, gradient_exchange: fp16",
         "optimizer.gradient_exchange: only for adam, onebit_adam or softsign"},
        {"type: binsgdm, bias_correction: true",
         "optimizer.bias_correction: only for adam or onebit_adam"},
        {"type: binsgdm, freeze_step: 10", "optimizer.freeze_step: only for onebit_adam"},
        {"type: softsign, beta2: 0.99", "optimizer.beta2: only for adam or onebit_adam"},
        {"type: softsign, block_size: 64", "optimizer.block_size: only for onebit_adam or binsgdm"},
        {"type: adam, max_denominator_step: 5", "optimizer.max_denominator_step: only for binsgdm"},
        {"type: binsgdm, block_size: 48", "block_size = 48: must be a positive multiple of 32"},
        {"type: binsgdm, max_denominator_step: -1", "optimizer.max_denominator_step"},
        {"type: binsgd", "optimizer.type"},
        {"type: adam, ranks_per_node: 2",
         "optimizer.ranks_per_node: only for onebit_adam or binsgdm"},
        {"type: onebit_adam, compression: off, ranks_per_node: 2",
         "ranks_per_node = 2: only a compressed exchange"},
        {"type: binsgdm, ranks_per_node: 5000",
         "optimizer.ranks_per_node: expected \"auto\" or an integer in [0, 4096] (0: flat), got "
         "5000"},
        {"type: binsgdm, ranks_per_node: -1", "optimizer.ranks_per_node: expected \"auto\""},
        {"type: onebit_adam, ranks_per_node: Auto", "optimizer.ranks_per_node: expected \"auto\""},
        {"type: onebit_adam, ranks_per_node: 2.5", "optimizer.ranks_per_node: expected \"auto\""},
        {"type: adam, ranks_per_node: auto",
         "optimizer.ranks_per_node: only for onebit_adam or binsgdm"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[512];
        snprintf(text, sizeof text, base, cases[i].optim);
        expect_error(OB_SPEC_YAML, text, cases[i].needle);
    }
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
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, gradient_exchange: int8}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.gradient_exchange: expected one of fp32, fp16 or fp8, got \"int8\"");
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
    expect_error(
        OB_SPEC_YAML,
        "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
        "optimizer: {type: onebit_adam, frozen_step_ratio: 0.5}\nbatch_size: 1\nsteps: 1\n",
        "optimizer.frozen_step_ratio = 0.5: must be 0 (the default) or in [1, 1e6]");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, frozen_step_ratio: 1.2}\nbatch_size: 1\nsteps: 1\n",
                 "frozen_step_ratio");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, refresh_steps: 8}\nbatch_size: 1\nsteps: 1\n",
                 "refresh_steps");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: onebit_adam, refresh_steps: -1}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.refresh_steps");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: onebit_adam, compression: naive, refresh_steps: 8}\n"
                 "batch_size: 1\nsteps: 1\n",
                 "optimizer.refresh_steps = 8: the naive mode never freezes v");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: onebit_adam, freeze_threshold: 0}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.freeze_threshold = 0: must be in (0, 1]");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, eps: 0}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.eps = 0: must be > 0");
    /* The gradient buckets and the overlap. */
    expect_error(
        OB_SPEC_YAML,
        "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
        "optimizer: {type: adam, bucket_mb: -1}\nbatch_size: 1\nsteps: 1\n",
        "optimizer.bucket_mb: expected a number of MiB in [0, 1024] (0: one bucket), got -1");
    expect_error(
        OB_SPEC_YAML,
        "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
        "optimizer: {type: adam, bucket_mb: 2000}\nbatch_size: 1\nsteps: 1\n",
        "optimizer.bucket_mb: expected a number of MiB in [0, 1024] (0: one bucket), got 2000");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, bucket_mb: four}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.bucket_mb: expected a number of MiB in [0, 1024] (0: one bucket), got "
                 "\"four\"");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: onebit_adam, overlap: 1}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.overlap: expected true or false, got 1");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: adam, overlap: true}\nbatch_size: 1\nsteps: 1\n"
                 "device: cuda\n",
                 "optimizer.overlap: not with device: cuda (the NCCL path exchanges the gradient "
                 "after the backward pass); leave it false");
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

/* optimizer.freeze_max_fraction: the latest auto freeze, max(ceil(fraction * steps), floor +
 * 2 lags); 0.15 under adam_bound, none under stabilizer none, a fixed freeze_step or 0. */
static void test_freeze_max_fraction(void **state)
{
    (void)state;
    struct {
        const char *optim;
        long steps;
        double fraction;
        long want;
    } cases[] = {
        {"{type: onebit_adam, freeze_step: auto, beta2: 0.999}", 3000, OB_FREEZE_MAX_FRACTION, 500},
        {"{type: onebit_adam, freeze_step: auto, beta2: 0.999}", 10000, OB_FREEZE_MAX_FRACTION,
         1500},
        {"{type: onebit_adam, freeze_step: auto, beta2: 0.99}", 1500, OB_FREEZE_MAX_FRACTION, 300},
        {"{type: onebit_adam, freeze_step: auto, beta2: 0.99, freeze_max_fraction: 0.5}", 1501, 0.5,
         751},
        {"{type: onebit_adam, freeze_step: auto, freeze_max_fraction: 0}", 5000, 0.0, 0},
        {"{type: onebit_adam, stabilizer: none}", 5000, 0.0, 0},
        {"{type: onebit_adam, freeze_step: 300}", 5000, OB_FREEZE_MAX_FRACTION, 0},
        /* An MLP's default freeze (ob_optim_default_mlp_tracking) is fixed: no latest one. */
        {"{type: onebit_adam, beta2: 0.99}", 1500, OB_FREEZE_MAX_FRACTION, 0},
        {"{type: adam}", 5000, 0.0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "model: {type: mlp}\ndata: {type: synthetic_classification}\nbatch_size: 4\n"
                 "steps: %ld\nlr: {warmup_steps: 100}\noptimizer: %s\n",
                 cases[i].steps, cases[i].optim);
        ob_jobspec s;
        parse_ok(&s, text, OB_SPEC_YAML);
        assert_true(s.freeze_max_fraction == cases[i].fraction);
        assert_int_equal(s.optim.freeze_max_step, cases[i].want);
        check_round_trip(&s);
    }
    expect_error(
        OB_SPEC_YAML,
        "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
        "optimizer: {type: onebit_adam, freeze_max_fraction: 1.5}\nbatch_size: 1\nsteps: 1\n",
        "optimizer.freeze_max_fraction = 1.5: must be in [0, 1] (0: no limit)");
    /* A beta2 out of range is refused before the latest freeze is computed from its lag (1.5
     * gave a lag of -1 and an overflow in that sum, found by fuzz_jobspec). */
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: onebit_adam, beta2: 1.5}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.beta2 = 1.5: must be in [0, 1)");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: fashion_mnist}\n"
                 "optimizer: {type: onebit_adam, beta2: 1}\nbatch_size: 1\nsteps: 1\n",
                 "optimizer.beta2 = 1: must be in [0, 1)");
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
                                 "\"params\":true,\"refit_steps\":\"auto\","
                                 "\"refit_exchange\":\"fp8\"}"));
    free(json);
    assert_int_equal(s.optim.refit_exchange, OB_EXCHANGE_FP8);
    snprintf(text, sizeof text,
             "%soptimizer: {type: onebit_adam}\nwarm_start: {from: /x, refit_exchange: fp32}\n",
             base);
    parse_ok(&s, text, OB_SPEC_YAML);
    assert_int_equal(s.optim.refit_exchange, OB_EXCHANGE_FP32);
    check_round_trip(&s);
    snprintf(text, sizeof text,
             "%soptimizer: {type: onebit_adam}\nwarm_start: {from: /x, refit_exchange: fp16}\n",
             base);
    parse_ok(&s, text, OB_SPEC_YAML);
    assert_int_equal(s.optim.refit_exchange, OB_EXCHANGE_FP16);
    check_round_trip(&s);
    snprintf(text, sizeof text,
             "%soptimizer: {type: onebit_adam}\nwarm_start: {from: /x, refit_exchange: int8}\n",
             base);
    expect_error(OB_SPEC_YAML, text, "warm_start.refit_exchange");

    snprintf(text, sizeof text, "%soptimizer: {type: onebit_adam}\nwarm_start: {from: /x}\n", base);
    parse_ok(&s, text, OB_SPEC_YAML);
    assert_int_equal(s.warm_start_params, 0);
    assert_int_equal(s.warm_start_refit_steps, -1);
    snprintf(text, sizeof text,
             "%soptimizer: {type: onebit_adam}\nwarm_start: {from: /x, refit_steps: 0}\n", base);
    parse_ok(&s, text, OB_SPEC_YAML);
    assert_int_equal(s.warm_start_refit_steps, 0);
    check_round_trip(&s);
    const char *bad_refit[] = {"-1", "1000001", "1.5", "\"soon\"", "[]"};
    for (size_t i = 0; i < sizeof bad_refit / sizeof *bad_refit; i++) {
        snprintf(text, sizeof text,
                 "%soptimizer: {type: onebit_adam}\nwarm_start: {from: /x, refit_steps: %s}\n",
                 base, bad_refit[i]);
        expect_error(OB_SPEC_YAML, text, "warm_start.refit_steps");
    }

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

    /* checkpoint.loss_rise: 2 by default, 0 turns the rise test off, else in [1.5, 1000]. */
    snprintf(text, sizeof text, "%soptimizer: {type: onebit_adam}\n", base);
    parse_ok(&s, text, OB_SPEC_YAML);
    assert_true(s.checkpoint_loss_rise == 2.0);
    const char *good_rise[] = {"0", "1.5", "4", "1000"};
    const double good_val[] = {0.0, 1.5, 4.0, 1000.0};
    for (size_t i = 0; i < sizeof good_rise / sizeof *good_rise; i++) {
        snprintf(text, sizeof text,
                 "%soptimizer: {type: onebit_adam}\ncheckpoint: {loss_rise: %s}\n", base,
                 good_rise[i]);
        parse_ok(&s, text, OB_SPEC_YAML);
        assert_true(s.checkpoint_loss_rise == good_val[i]);
        check_round_trip(&s);
    }
    const char *bad_rise[] = {"1", "1.49", "-2", "1000.5", "\"high\"", "[]", ".nan"};
    for (size_t i = 0; i < sizeof bad_rise / sizeof *bad_rise; i++) {
        snprintf(text, sizeof text,
                 "%soptimizer: {type: onebit_adam}\ncheckpoint: {loss_rise: %s}\n", base,
                 bad_rise[i]);
        expect_error(OB_SPEC_YAML, text, "checkpoint.loss_rise");
    }
}

/* A spec with several problems names every one of them in one message, without source
 * locations, bounded; checks across sections are skipped when a section they read is bad. */
static void test_every_problem(void **state)
{
    (void)state;
    const char *three = "model: {type: mlpp}\ndata: {type: synthetic_classification}\n"
                        "optimizer: {type: onebit_adam, betta2: 0.99}\nbatch_size: \"64\"\n"
                        "steps: 10\n";
    expect_error3(OB_SPEC_YAML, three, OB_ERR_INVALID_ARG, "3 problems: ",
                  "model.type: expected one of softmax, mlp or transformer, got \"mlpp\"",
                  "optimizer.betta2: unknown field (did you mean beta2?)");
    expect_error(OB_SPEC_YAML, three, "batch_size: expected a positive integer, got \"64\"");
    /* Every unknown field of one section, in document order. */
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: synthetic_classification}\n"
                 "optimizer: {type: adam, betta1: 0.9, epss: 1e-8}\nbatch_size: 8\nsteps: 10\n",
                 "2 problems: optimizer.betta1: unknown field (did you mean beta1?); "
                 "optimizer.epss: unknown field (did you mean eps?)");
    /* Misplaced fields hear where they belong. */
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: synthetic_classification}\n"
                 "optimizer: {type: adam, lr: 0.1}\nbatch_size: 8\nsteps: 10\n",
                 "optimizer.lr: unknown field (the learning rate is the spec's top-level section "
                 "lr, e.g. lr: {peak: 0.001})");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: synthetic_classification}\n"
                 "optimizer: {type: adam}\nbatch_size: 8\nsteps: 10\nbeta2: 0.9\n",
                 "beta2: unknown field (beta2 is a field of optimizer: optimizer.beta2)");
    expect_error(OB_SPEC_YAML,
                 "model: {type: mlp}\ndata: {type: synthetic_classification}\n"
                 "optimizer: {type: adam, steps: 10}\nbatch_size: 8\nsteps: 10\n",
                 "optimizer.steps: unknown field (steps is a top-level field of the spec)");
    /* A bad model type: no complaint about its pairing with the data or the device. */
    ob_jobspec *s = new_spec();
    ob_err err;
    ob_err_clear(&err);
    const char *bad_model = "model: {type: transformr}\ndata: {type: synthetic_classification}\n"
                            "optimizer: {type: adam}\nbatch_size: 8\nsteps: 10\ndevice: cuda\n";
    assert_int_equal(ob_jobspec_parse(s, bad_model, strlen(bad_model), OB_SPEC_YAML, &err),
                     OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "model.type: expected one of"));
    assert_null(strstr(err.msg, "problems"));
    assert_null(strstr(err.msg, "needs"));
    /* No message carries where in the source it was made. */
    ob_err_clear(&err);
    assert_int_equal(ob_jobspec_parse(s, three, strlen(three), OB_SPEC_YAML, &err),
                     OB_ERR_INVALID_ARG);
    assert_null(strstr(err.msg, ".c:"));
    /* Bounded: twelve unknown fields give eight messages and a count. */
    char many[1024];
    size_t n = (size_t)snprintf(many, sizeof many,
                                "model: {type: mlp}\ndata: {type: synthetic_classification}\n"
                                "optimizer: {type: adam}\nbatch_size: 8\nsteps: 10\n");
    for (int i = 0; i < 12; i++)
        n += (size_t)snprintf(many + n, sizeof many - n, "zz_unknown_%02d: 1\n", i);
    ob_err_clear(&err);
    assert_int_equal(ob_jobspec_parse(s, many, strlen(many), OB_SPEC_YAML, &err),
                     OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "12 problems: zz_unknown_00: unknown field"));
    assert_non_null(strstr(err.msg, "zz_unknown_07: unknown field; and 4 more"));
    assert_null(strstr(err.msg, "zz_unknown_08"));
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_program),
        cmocka_unit_test(test_every_problem),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_optimizer_kinds),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_missing_required),
        cmocka_unit_test(test_mismatches),
        cmocka_unit_test(test_freeze_step),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_yaml_typing),
        cmocka_unit_test(test_device),
        cmocka_unit_test(test_freeze_max_fraction),
        cmocka_unit_test(test_checkpoint_and_warm_start),
    };
    return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
