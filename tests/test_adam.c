/* Adam against an independent double-precision reference and closed-form first steps; the
 * optimizer configuration checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "onebit/optim.h"
#include "onebit/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ob_comm *self_comm(void)
{
    ob_comm *c = NULL;
    assert_int_equal(ob_comm_create_self(&c, NULL), OB_OK);
    return c;
}

/* Adam in double from the textbook equations (Kingma & Ba, with decoupled decay). */
static void ref_adam(double *x, double *m, double *v, const double *g, size_t d, int t, double lr,
                     double b1, double b2, double eps, double wd, int bc)
{
    for (size_t i = 0; i < d; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        double mh = bc ? m[i] / (1 - pow(b1, t)) : m[i];
        double vh = bc ? v[i] / (1 - pow(b2, t)) : v[i];
        x[i] -= lr * (mh / (sqrt(vh) + eps) + wd * x[i]);
    }
}

static void run_against_reference(int bias_correction, double wd)
{
    size_t d = 257;
    int T = 30;
    ob_comm *c = self_comm();
    float *x = malloc(d * sizeof(float)), *g = malloc(d * sizeof(float));
    double *rx = malloc(d * sizeof(double)), *rm = calloc(d, sizeof(double));
    double *rv = calloc(d, sizeof(double)), *rg = malloc(d * sizeof(double));
    ob_rng rng;
    ob_rng_seed(&rng, 77, 0);
    for (size_t i = 0; i < d; i++)
        rx[i] = x[i] = ob_rng_normal(&rng);

    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
    cfg.bias_correction = bias_correction;
    cfg.weight_decay = wd;
    cfg.beta2 = 0.99;
    ob_optim *opt = NULL;
    ob_err err = {0};
    assert_int_equal(ob_optim_create(&opt, &cfg, c, x, d, &err), OB_OK);
    for (int t = 1; t <= T; t++) {
        for (size_t i = 0; i < d; i++)
            rg[i] = g[i] = ob_rng_normal(&rng) * (float)(1 + i % 5);
        float lr = 1e-2f * (float)t / (float)T;
        assert_int_equal(ob_optim_step(opt, g, lr, &err), OB_OK);
        ref_adam(rx, rm, rv, rg, d, t, lr, 0.9, 0.99, 1e-8, wd, bias_correction);
    }
    ob_optim_state st;
    ob_optim_get_state(opt, &st);
    for (size_t i = 0; i < d; i++) {
        assert_true(fabs(x[i] - rx[i]) <= 1e-5 * fmax(1.0, fabs(rx[i])));
        /* absolute floors at float resolution of the gradient scale (|g| up to ~15) */
        assert_true(fabs(st.exp_avg[i] - rm[i]) <= 1e-5 * fabs(rm[i]) + 1e-5);
        assert_true(fabs(st.exp_avg_sq[i] - rv[i]) <= 1e-5 * fabs(rv[i]) + 1e-6);
    }
    ob_optim_stats s;
    ob_optim_get_stats(opt, &s);
    assert_int_equal(s.step, T);
    assert_int_equal(s.phase, OB_PHASE_WARMUP);
    assert_int_equal(s.bytes_sent, 0); /* a world of one sends nothing */
    ob_optim_destroy(opt);
    ob_comm_destroy(c);
    free(x);
    free(g);
    free(rx);
    free(rm);
    free(rv);
    free(rg);
}

static void test_adam_bias_corrected(void **state)
{
    run_against_reference(1, 0.0);
}

static void test_adam_no_bias_correction(void **state)
{
    run_against_reference(0, 0.0);
}

static void test_adamw_decay(void **state)
{
    run_against_reference(1, 0.1);
}

/* Closed forms of the first step: with bias correction x1 = x0 - lr*g/(|g|+eps), i.e. a step
 * of lr against the sign; without it the step is lr*(1-b1)/sqrt(1-b2). */
static void test_adam_first_step_closed_form(void **state)
{
    float g[4] = {0.5f, -3.0f, 1e-3f, -40.0f};
    for (int bc = 0; bc <= 1; bc++) {
        ob_comm *c = self_comm();
        float x[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        ob_optim_config cfg;
        ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
        cfg.bias_correction = bc;
        ob_optim *opt = NULL;
        assert_int_equal(ob_optim_create(&opt, &cfg, c, x, 4, NULL), OB_OK);
        assert_int_equal(ob_optim_step(opt, g, 0.01f, NULL), OB_OK);
        for (int i = 0; i < 4; i++) {
            double a = fabs((double)g[i]);
            /* bc: |m_hat| = |g|, sqrt(v_hat) = |g|; no bc: |m| = 0.1|g|, sqrt(v) = sqrt(0.001)|g|
             */
            double step = bc ? a / (a + 1e-8) : 0.1 * a / (sqrt(0.001) * a + 1e-8);
            double want = 1.0 - 0.01 * step * (g[i] > 0 ? 1.0 : -1.0);
            assert_true(fabs(x[i] - want) < 1e-6);
        }
        ob_optim_destroy(opt);
        ob_comm_destroy(c);
    }
}

static void expect_invalid(ob_optim_config cfg, const char *field)
{
    ob_err err = {0};
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, field));
    ob_comm *c = self_comm();
    float x[8] = {0};
    ob_optim *opt = (ob_optim *)0x1;
    assert_int_equal(ob_optim_create(&opt, &cfg, c, x, 8, NULL), OB_ERR_INVALID_ARG);
    assert_null(opt);
    ob_comm_destroy(c);
}

static void test_config_rejected_with_field_named(void **state)
{
    ob_optim_config base;
    ob_optim_config_default(&base, OB_OPTIM_ONEBIT_ADAM);
    assert_int_equal(ob_optim_config_validate(&base, NULL), OB_OK);
    ob_optim_config c;
    c = base, c.beta1 = 1.0, expect_invalid(c, "beta1");
    c = base, c.beta2 = -0.1, expect_invalid(c, "beta2");
    c = base, c.eps = 0.0, expect_invalid(c, "eps");
    c = base, c.weight_decay = -1.0, expect_invalid(c, "weight_decay");
    c = base, c.block_size = 100, expect_invalid(c, "block_size");
    c = base, c.block_size = 0, expect_invalid(c, "block_size");
    c = base, c.freeze_threshold = 1.5, expect_invalid(c, "freeze_threshold");
    c = base, c.freeze_step = -3, expect_invalid(c, "freeze_step");
    c = base, c.mode = OB_ONEBIT_NAIVE, c.freeze_step = 10, expect_invalid(c, "freeze_step");
    c = base, c.lr_warmup_steps = -1, expect_invalid(c, "lr_warmup_steps");
    c = base, c.beta1 = NAN, expect_invalid(c, "beta1");
}

static void test_step_rejects_bad_lr(void **state)
{
    ob_comm *c = self_comm();
    float x[4] = {0}, g[4] = {1, 1, 1, 1};
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
    ob_optim *opt = NULL;
    assert_int_equal(ob_optim_create(&opt, &cfg, c, x, 4, NULL), OB_OK);
    ob_err err = {0};
    assert_int_equal(ob_optim_step(opt, g, NAN, &err), OB_ERR_INVALID_ARG);
    assert_int_equal(ob_optim_step(opt, NULL, 0.1f, &err), OB_ERR_INVALID_ARG);
    ob_optim_stats s;
    ob_optim_get_stats(opt, &s);
    assert_int_equal(s.step, 0); /* rejected steps change nothing */
    assert_true(x[0] == 0.0f);
    ob_optim_destroy(opt);
    ob_comm_destroy(c);
}

static void test_freeze_delta(void **state)
{
    assert_int_equal(ob_optim_freeze_delta(0.999), 1000);
    assert_int_equal(ob_optim_freeze_delta(0.99), 100);
    assert_int_equal(ob_optim_freeze_delta(0.98), 50);
    assert_int_equal(ob_optim_freeze_delta(0.95), 20);
    assert_int_equal(ob_optim_freeze_delta(0.9), 10);
    assert_int_equal(ob_optim_freeze_delta(0.997), 334); /* 333.33.. rounds up */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adam_bias_corrected),
        cmocka_unit_test(test_adam_no_bias_correction),
        cmocka_unit_test(test_adamw_decay),
        cmocka_unit_test(test_adam_first_step_closed_form),
        cmocka_unit_test(test_config_rejected_with_field_named),
        cmocka_unit_test(test_step_rejects_bad_lr),
        cmocka_unit_test(test_freeze_delta),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
