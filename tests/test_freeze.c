/* The freeze of 1-bit Adam: auto-detection at the predicted step, the LR-warmup and min-step
 * guards, a fixed T_w, bias-corrected v_Tw, warm start, and the compression-phase update. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "onebit/optim.h"
#include "onebit/optim_kernels.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define D 64

typedef struct run {
    ob_comm *comm;
    ob_optim *opt;
    float x[D], g[D];
} run;

static void run_start(run *r, const ob_optim_config *cfg)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(ob_comm_create_self(&r->comm, NULL), OB_OK);
    ob_err err = {0};
    assert_int_equal(ob_optim_create(&r->opt, cfg, r->comm, r->x, D, &err), OB_OK);
}

static void run_end(run *r)
{
    ob_optim_destroy(r->opt);
    ob_comm_destroy(r->comm);
}

static ob_optim_stats stats(run *r)
{
    ob_optim_stats s;
    ob_optim_get_stats(r->opt, &s);
    return s;
}

/* The "checkpoint": a fresh optimizer of cfg in *b holding a's parameters, moments and error
 * feedback; *p is a's progress, which the caller restores (ob_optim_set_progress). */
static void copy_state(run *b, run *a, const ob_optim_config *cfg, ob_optim_progress *p)
{
    run_start(b, cfg);
    memcpy(b->x, a->x, sizeof a->x);
    ob_optim_state sa, sb;
    ob_optim_get_state(a->opt, &sa);
    ob_optim_get_state(b->opt, &sb);
    memcpy(sb.exp_avg, sa.exp_avg, D * sizeof(float));
    memcpy(sb.exp_avg_sq, sa.exp_avg_sq, D * sizeof(float));
    assert_int_equal(sa.padded_size, sb.padded_size);
    if (sa.padded_size) {
        memcpy(sb.worker_error, sa.worker_error, sa.padded_size * sizeof(float));
        memcpy(sb.server_error, sa.server_error, sa.chunk_size * sizeof(float));
    }
    assert_int_equal(sa.track_stats_len, sb.track_stats_len);
    if (sa.track_stats_len)
        memcpy(sb.track_stats, sa.track_stats, sa.track_stats_len * sizeof(float));
    ob_optim_get_progress(a->opt, p);
}

/* With a constant gradient c, v_t = c^2 (1 - b2^t), so the ratio of norms is
 * r_t = (1 - b2^t) / (1 - b2^(t - Delta)): falling towards 1 as t grows. */
static double ratio_const(double b2, long delta, long t)
{
    return (1.0 - pow(b2, (double)t)) / (1.0 - pow(b2, (double)(t - delta)));
}

/* First t >= earliest with t > Delta and r_t <= 1/threshold. */
static long predict(double b2, long delta, double thr, long earliest)
{
    for (long t = 1;; t++)
        if (t >= earliest && t > delta && ratio_const(b2, delta, t) <= 1.0 / thr) return t;
}

/* Steps until the freeze (or limit); checks the phase before it. Returns the freeze step. */
static long step_until_freeze(run *r, long limit)
{
    for (long t = 1; t <= limit; t++) {
        assert_int_equal(stats(r).phase, OB_PHASE_WARMUP);
        assert_int_equal(ob_optim_step(r->opt, r->g, 1e-4f, NULL), OB_OK);
        ob_optim_stats s = stats(r);
        if (s.phase == OB_PHASE_COMPRESSION) {
            assert_int_equal(s.freeze_step, t);
            return t;
        }
    }
    return -1;
}

static void test_auto_freeze_at_predicted_step(void **state)
{
    double b2 = 0.99, thr = 0.9;
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.beta2 = b2;
    cfg.freeze_threshold = thr;
    long delta = ob_optim_freeze_delta(b2);
    assert_int_equal(delta, 100);
    long want = predict(b2, delta, thr, 0);
    /* The prediction is not on a knife edge, so float rounding cannot move it. */
    assert_true(1.0 / thr - ratio_const(b2, delta, want) > 1e-4);
    assert_true(ratio_const(b2, delta, want - 1) - 1.0 / thr > 1e-4);

    run r;
    run_start(&r, &cfg);
    for (int i = 0; i < D; i++)
        r.g[i] = (i % 2) ? 0.5f : -0.5f;
    long got = step_until_freeze(&r, 2000);
    assert_int_equal(got, want);
    ob_optim_stats s = stats(&r);
    assert_true(fabs(s.freeze_ratio - ratio_const(b2, delta, want)) < 1e-4);
    run_end(&r);
}

/* beta2 0.999 (Delta 1000): the lag is OB_FREEZE_MAX_LAG and the test is on v_hat, with or
 * without bias correction. With a constant gradient v_hat is the same at every step, so the
 * ratio is 1 and the freeze comes right after the lag; on the uncorrected v over Delta (the rule
 * before) it could not come before step 1000 and came only once (1 - b2^t) / (1 - b2^(t -
 * 1000)) <= 1/thr. With beta2 0.99 (Delta 100 <= the longest lag) nothing changes (above). */
static void test_auto_freeze_beta2_999(void **state)
{
    double b2 = 0.999, thr = 0.96;
    assert_int_equal(ob_optim_freeze_delta(b2), 1000);
    assert_int_equal(ob_optim_freeze_lag(b2), OB_FREEZE_MAX_LAG);
    assert_int_equal(ob_optim_freeze_lag(0.99), 100);
    assert_true(predict(b2, 1000, thr, 0) > 1000);
    for (int bc = 0; bc < 2; bc++) {
        ob_optim_config cfg;
        ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
        cfg.beta2 = b2;
        cfg.freeze_threshold = thr;
        cfg.bias_correction = bc;
        cfg.lr_warmup_steps = 100;
        run r;
        run_start(&r, &cfg);
        for (int i = 0; i < D; i++)
            r.g[i] = (i % 3) ? 0.5f : -0.25f;
        long got = step_until_freeze(&r, 5000);
        assert_int_equal(got, OB_FREEZE_MAX_LAG + 1);
        ob_optim_stats s = stats(&r);
        assert_true(fabs(s.freeze_ratio - 1.0) < 1e-3); /* v is summed in float */
        run_end(&r);
    }
}

static void test_no_freeze_before_lr_warmup_or_min_steps(void **state)
{
    double b2 = 0.99, thr = 0.9;
    long delta = 100, stable = predict(b2, delta, thr, 0);
    for (int guard = 0; guard < 2; guard++) {
        ob_optim_config cfg;
        ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
        cfg.beta2 = b2;
        cfg.freeze_threshold = thr;
        if (guard == 0)
            cfg.lr_warmup_steps = stable + 57;
        else
            cfg.freeze_min_steps = stable + 31;
        run r;
        run_start(&r, &cfg);
        for (int i = 0; i < D; i++)
            r.g[i] = 0.25f;
        long got = step_until_freeze(&r, 2000);
        assert_int_equal(got, guard == 0 ? stable + 57 : stable + 31);
        run_end(&r);
    }
}

/* Shrinking gradients: ||v|| keeps falling, the ratio stays below the band, no freeze. */
static void test_no_freeze_while_variance_falls(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.beta2 = 0.95; /* Delta 20 */
    /* Precondition, in double: with g_t = 0.5^t the ratio never enters [0.96, 1/0.96]. */
    double v[301] = {0};
    for (long t = 1; t <= 300; t++) {
        double g = pow(0.5, (double)t);
        v[t] = 0.95 * v[t - 1] + 0.05 * g * g;
        if (t > 20) assert_true(v[t] / v[t - 20] < 0.9);
    }
    run r;
    run_start(&r, &cfg);
    for (long t = 1; t <= 300; t++) {
        float mag = (float)pow(0.5, (double)t);
        for (int i = 0; i < D; i++)
            r.g[i] = mag;
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-4f, NULL), OB_OK);
        assert_int_equal(stats(&r).phase, OB_PHASE_WARMUP);
    }
    assert_true(stats(&r).freeze_ratio < 0.96);
    run_end(&r);

    /* The same with freeze_max_step 120 (and the floor at 130): frozen at 130 all the same. */
    cfg.freeze_max_step = 120;
    cfg.freeze_min_steps = 130;
    run_start(&r, &cfg);
    for (long t = 1; t <= 130; t++) {
        float mag = (float)pow(0.5, (double)t);
        for (int i = 0; i < D; i++)
            r.g[i] = mag;
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-4f, NULL), OB_OK);
        assert_int_equal(stats(&r).phase, t < 130 ? OB_PHASE_WARMUP : OB_PHASE_COMPRESSION);
    }
    assert_int_equal(stats(&r).freeze_step, 130);
    assert_true(stats(&r).freeze_ratio < 0.96); /* the rule's ratio, which did not pass */
    run_end(&r);
    cfg.freeze_max_step = -1;
    assert_int_equal(ob_optim_config_validate(&cfg, NULL), OB_ERR_INVALID_ARG);
}

static void test_fixed_freeze_and_bias_corrected_v(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.freeze_step = 7;
    cfg.bias_correction = 1;
    cfg.mode = OB_ONEBIT_UNCOMPRESSED;
    run r;
    run_start(&r, &cfg);
    double vref[D] = {0}, mref[D] = {0};
    for (long t = 1; t <= 7; t++) {
        for (int i = 0; i < D; i++) {
            r.g[i] = (float)((i + 1) * (t % 3 + 1)) * 0.01f;
            mref[i] = 0.9 * mref[i] + 0.1 * r.g[i];
            vref[i] = 0.999 * vref[i] + 0.001 * (double)r.g[i] * r.g[i];
        }
        assert_int_equal(stats(&r).phase, OB_PHASE_WARMUP);
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
    }
    ob_optim_stats s = stats(&r);
    assert_int_equal(s.phase, OB_PHASE_COMPRESSION);
    assert_int_equal(s.freeze_step, 7);
    ob_optim_state st;
    ob_optim_get_state(r.opt, &st);
    double c2 = 1.0 / (1.0 - pow(0.999, 7));
    for (int i = 0; i < D; i++)
        assert_true(fabs(st.exp_avg_sq[i] - vref[i] * c2) <= 1e-5 * vref[i] * c2);

    /* Compression phase (one rank, fp32 exchange): x -= lr * m / (sqrt(v_Tw) + eps), v fixed. */
    float x_before[D];
    memcpy(x_before, r.x, sizeof x_before);
    for (int i = 0; i < D; i++)
        r.g[i] = 0.3f;
    assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
    for (int i = 0; i < D; i++) {
        double m = 0.9 * mref[i] + 0.1 * 0.3;
        double want = x_before[i] - 1e-3 * m / (sqrt(vref[i] * c2) + 1e-8);
        assert_true(fabs(r.x[i] - want) <= 1e-5 * fmax(1.0, fabs(want)));
        assert_true(fabs(st.exp_avg_sq[i] - vref[i] * c2) <= 1e-5 * vref[i] * c2);
    }
    run_end(&r);
}

/* Without bias correction v_Tw is v raised to at least v_hat / r^2 (one factor for every
 * coordinate): r = OB_FROZEN_STEP_RATIO by default, frozen_step_ratio when set, the paper's v
 * under stabilizer none; a freeze late enough that (1 - b2^t) r^2 >= 1 keeps v. */
static void test_frozen_step_ratio(void **state)
{
    struct {
        double beta2, ratio;
        ob_stabilizer stab;
        long at;
        double want_r; /* 0: v kept */
    } cases[] = {
        {0.999, 0.0, OB_STABILIZER_ADAM_BOUND, 7, OB_FROZEN_STEP_RATIO},
        {0.999, 2.0, OB_STABILIZER_ADAM_BOUND, 7, 2.0},
        {0.999, 1.0, OB_STABILIZER_NONE, 7, 1.0},
        {0.999, 0.0, OB_STABILIZER_NONE, 7, 0.0},
        {0.9, 0.0, OB_STABILIZER_ADAM_BOUND, 30, 0.0},
    };
    assert_true(
        isinf(ob_optim_frozen_step_ratio(&(ob_optim_config){.stabilizer = OB_STABILIZER_NONE})));
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ob_optim_config cfg;
        ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
        cfg.beta2 = cases[c].beta2;
        cfg.frozen_step_ratio = cases[c].ratio;
        cfg.stabilizer = cases[c].stab;
        cfg.freeze_step = cases[c].at;
        cfg.mode = OB_ONEBIT_UNCOMPRESSED;
        assert_int_equal(ob_optim_config_validate(&cfg, NULL), OB_OK);
        run r;
        run_start(&r, &cfg);
        double vref[D] = {0};
        for (long t = 1; t <= cases[c].at; t++) {
            for (int i = 0; i < D; i++) {
                r.g[i] = (float)((i + 1) * (t % 3 + 1)) * 0.01f;
                vref[i] = cfg.beta2 * vref[i] + (1.0 - cfg.beta2) * (double)r.g[i] * r.g[i];
            }
            assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
        }
        assert_int_equal(stats(&r).freeze_step, cases[c].at);
        double corr = 1.0 - pow(cfg.beta2, (double)cases[c].at), f = 1.0;
        if (cases[c].want_r > 0.0) {
            f = 1.0 / (cases[c].want_r * cases[c].want_r * corr);
            assert_true(f > 1.0);
        } else if (cases[c].stab == OB_STABILIZER_ADAM_BOUND) {
            assert_true(OB_FROZEN_STEP_RATIO * OB_FROZEN_STEP_RATIO * corr >= 1.0);
        }
        ob_optim_state st;
        ob_optim_get_state(r.opt, &st);
        for (int i = 0; i < D; i++)
            assert_true(fabs(st.exp_avg_sq[i] - vref[i] * f) <= 1e-5 * vref[i] * f);
        run_end(&r);
    }
    ob_optim_config bad;
    ob_optim_config_default(&bad, OB_OPTIM_ONEBIT_ADAM);
    double refused[] = {0.5, -1.0, NAN, 2e6};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        bad.frozen_step_ratio = refused[i];
        assert_int_equal(ob_optim_config_validate(&bad, NULL), OB_ERR_INVALID_ARG);
    }
}

static void test_warm_start(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    run r;
    run_start(&r, &cfg);
    float v[D];
    for (int i = 0; i < D; i++)
        v[i] = 1e-4f * (float)(i + 1);
    ob_err err = {0};
    v[3] = -1.0f;
    assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 0, 0.0, &err), OB_ERR_CORRUPT);
    assert_int_equal(stats(&r).phase, OB_PHASE_WARMUP); /* rejected: nothing changed */
    v[3] = NAN;
    assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 0, 0.0, &err), OB_ERR_CORRUPT);
    v[3] = 4e-4f;
    assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 0, 0.0, &err), OB_OK);
    ob_optim_stats s = stats(&r);
    assert_int_equal(s.phase, OB_PHASE_COMPRESSION);
    assert_int_equal(s.freeze_step, 0);
    /* First step is a compression step with the given variance. */
    for (int i = 0; i < D; i++)
        r.g[i] = 1.0f;
    assert_int_equal(ob_optim_step(r.opt, r.g, 1e-2f, NULL), OB_OK);
    ob_optim_state st;
    ob_optim_get_state(r.opt, &st);
    assert_true(st.exp_avg_sq[10] == v[10]);
    assert_non_null(st.worker_error);
    run_end(&r);

    ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
    run_start(&r, &cfg);
    assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 0, 0.0, &err), OB_ERR_INVALID_ARG);
    run_end(&r);
}

/* A refit warm start: Adam steps carrying on from the borrowed v (no bias correction of v even
 * when bias_correction is on), the check at step 1, the freeze at the end of refit_steps. */
static void test_warm_start_refit(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.bias_correction = 1;
    run r;
    run_start(&r, &cfg);
    float v[D];
    double vref[D];
    for (int i = 0; i < D; i++)
        vref[i] = v[i] = 1e-2f * (float)(i + 1);
    ob_err err = {0};
    assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, -1, 0.0, &err), OB_ERR_INVALID_ARG);
    assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 3, 0.0, &err), OB_OK);
    ob_optim_stats s = stats(&r);
    assert_int_equal(s.warm_start, OB_WARM_REFIT);
    assert_int_equal(s.phase, OB_PHASE_WARMUP);
    assert_int_equal(s.refit_end, 3);
    assert_true(isnan(s.warm_check_fraction));
    /* Before any step a second call replaces the first; after a step it is refused (below). */
    assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 3, 0.0, &err),
                     OB_OK); /* still step 0 */
    for (long t = 1; t <= 3; t++) {
        for (int i = 0; i < D; i++)
            r.g[i] = 0.2f;
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
        for (int i = 0; i < D; i++)
            vref[i] = 0.999 * vref[i] + 0.001 * 0.04;
        s = stats(&r);
        assert_int_equal(s.phase, t < 3 ? OB_PHASE_WARMUP : OB_PHASE_COMPRESSION);
        /* 0.2 > 10 sqrt(v) only where v < 4e-4: none of these coordinates */
        assert_true(s.warm_check_fraction == 0.0);
        assert_true(s.bytes_last_step == 0); /* one rank: nothing crosses a network */
    }
    assert_int_equal(s.freeze_step, 3);
    assert_int_equal(s.warm_start, OB_WARM_REFIT);
    assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 3, 0.0, &err), OB_ERR_INVALID_ARG);
    ob_optim_state st;
    ob_optim_get_state(r.opt, &st);
    for (int i = 0; i < D; i++) /* v carried on from v_Tw, not from zero, and was not rescaled */
        assert_true(fabs(st.exp_avg_sq[i] - vref[i]) <= 1e-5 * vref[i]);
    ob_optim_progress p;
    ob_optim_get_progress(r.opt, &p);
    assert_int_equal(p.warm_start, OB_WARM_REFIT);
    assert_int_equal(p.refit_end, 3);
    run_end(&r);
}

/* The check compares the gradient with the variance the source estimated: its v_Tw divided by
 * the factor its freeze raised it by (frozen_step_ratio). 3 of 64 coordinates above 10 sqrt(v)
 * pass (4.7 %); with v raised 4x, 6 are above 10 sqrt(v / 4) (9.4 %): refused. */
static void test_warm_check_raised(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    float v[D];
    for (int i = 0; i < D; i++)
        v[i] = 1.0f;
    double raised[] = {1.0, 4.0};
    ob_warm_state want[] = {OB_WARM_REFIT, OB_WARM_REFUSED};
    for (int c = 0; c < 2; c++) {
        run r;
        run_start(&r, &cfg);
        ob_err err = {0};
        assert_int_equal(ob_optim_warm_start(r.opt, v, 0.5, 1.0, 10, 0.0, &err),
                         OB_ERR_INVALID_ARG);
        assert_int_equal(ob_optim_warm_start(r.opt, v, NAN, 1.0, 10, 0.0, &err),
                         OB_ERR_INVALID_ARG);
        assert_int_equal(ob_optim_warm_start(r.opt, v, raised[c], 1.0, 10, 0.0, &err), OB_OK);
        for (int i = 0; i < D; i++)
            r.g[i] = i < 3 ? 12.0f : i < 6 ? 7.0f : 1.0f;
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
        ob_optim_stats s = stats(&r);
        assert_int_equal(s.warm_start, want[c]);
        assert_true(fabs(s.warm_check_fraction - (c ? 6.0 : 3.0) / D) < 1e-12);
        run_end(&r);
    }
    /* The refit starts from v / raised (the source's estimate); taken as is, v keeps the raise. */
    for (long refit = 0; refit <= 10; refit += 10) {
        run r;
        run_start(&r, &cfg);
        ob_err err = {0};
        assert_int_equal(ob_optim_warm_start(r.opt, v, 4.0, 1.0, refit, 0.0, &err), OB_OK);
        ob_optim_state st;
        ob_optim_get_state(r.opt, &st);
        for (int i = 0; i < D; i++)
            assert_true(st.exp_avg_sq[i] == (refit ? 0.25f : 1.0f));
        run_end(&r);
    }
    /* The factor of a freeze: max(1, 1 / (r^2 (1 - b2^t))), 1 with bias correction. */
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.beta2 = 0.999;
    double r = OB_FROZEN_STEP_RATIO, want_f = 1.0 / (r * r * (1.0 - pow(0.999, 400.0)));
    assert_true(fabs(ob_optim_freeze_raise(&cfg, 400) - want_f) < 1e-12);
    assert_true(ob_optim_freeze_raise(&cfg, 2000) == 1.0);
    cfg.bias_correction = 1;
    assert_true(ob_optim_freeze_raise(&cfg, 400) == 1.0);
}

/* A refit's freeze multiplies v by the source's factor (scale): the refit's steps are those of
 * an unscaled refit bit for bit, the frozen v is theirs times scale, and the frozen steps
 * follow it; a checkpoint inside the refit keeps the scale. The factor of a source frozen at
 * step s: (1 - b2^s) times its raise, so max(1 - b2^s, 1 / r^2); 1 with bias correction. */
static void test_warm_refit_scale(void **state)
{
    (void)state;
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.mode = OB_ONEBIT_UNCOMPRESSED;
    float v[D];
    for (int i = 0; i < D; i++)
        v[i] = 0.5f + 0.01f * (float)i;
    run a, b, c;
    run_start(&a, &cfg);
    run_start(&b, &cfg);
    ob_err err = {0};
    const double bad[] = {0.0, -0.5, 1.5, NAN};
    for (int k = 0; k < 4; k++) {
        assert_int_equal(ob_optim_warm_start(b.opt, v, 1.0, bad[k], 3, 0.0, &err),
                         OB_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "scale"));
    }
    assert_int_equal(ob_optim_warm_start(a.opt, v, 1.0, 1.0, 3, 0.0, &err), OB_OK);
    assert_int_equal(ob_optim_warm_start(b.opt, v, 1.0, 0.625, 3, 0.0, &err), OB_OK);
    ob_optim_progress p;
    for (long t = 1; t <= 5; t++) {
        for (int i = 0; i < D; i++)
            a.g[i] = b.g[i] = 0.3f * sinf(0.7f * (float)(i + 3 * t));
        if (t == 3) { /* a checkpoint of b inside the refit, restored into c */
            copy_state(&c, &b, &cfg, &p);
            assert_true(p.refit_scale == 0.625);
            assert_int_equal(ob_optim_set_progress(c.opt, &p, &err), OB_OK);
        }
        if (t >= 3) memcpy(c.g, b.g, sizeof b.g);
        assert_int_equal(ob_optim_step(a.opt, a.g, 1e-3f, NULL), OB_OK);
        assert_int_equal(ob_optim_step(b.opt, b.g, 1e-3f, NULL), OB_OK);
        if (t >= 3) assert_int_equal(ob_optim_step(c.opt, c.g, 1e-3f, NULL), OB_OK);
        ob_optim_state sa, sb, sc;
        ob_optim_get_state(a.opt, &sa);
        ob_optim_get_state(b.opt, &sb);
        for (int i = 0; i < D; i++) {
            if (t < 3) {
                assert_true(sb.exp_avg_sq[i] == sa.exp_avg_sq[i]);
                assert_true(b.x[i] == a.x[i]);
            } else {
                assert_true(sb.exp_avg_sq[i] == sa.exp_avg_sq[i] * 0.625f);
            }
        }
        if (t >= 3) {
            ob_optim_get_state(c.opt, &sc);
            assert_memory_equal(sc.exp_avg_sq, sb.exp_avg_sq, D * sizeof(float));
            assert_memory_equal(c.x, b.x, sizeof b.x);
        }
    }
    /* After the freeze the smaller v takes larger steps than the unscaled one. */
    assert_int_equal(stats(&b).freeze_step, 3);
    double da = 0, db = 0;
    float xa[D], xb[D];
    memcpy(xa, a.x, sizeof xa);
    memcpy(xb, b.x, sizeof xb);
    for (int i = 0; i < D; i++)
        a.g[i] = b.g[i] = 0.1f;
    assert_int_equal(ob_optim_step(a.opt, a.g, 1e-3f, NULL), OB_OK);
    assert_int_equal(ob_optim_step(b.opt, b.g, 1e-3f, NULL), OB_OK);
    for (int i = 0; i < D; i++) {
        da += fabs((double)a.x[i] - xa[i]);
        db += fabs((double)b.x[i] - xb[i]);
    }
    assert_true(db > 1.2 * da && db < 1.3 * da); /* 1 / sqrt(0.625) = 1.26 */
    run_end(&a);
    run_end(&b);
    run_end(&c);

    /* A refused warm start, a rewarm and a v taken as is carry no scale. */
    run_start(&a, &cfg);
    assert_int_equal(ob_optim_warm_start(a.opt, v, 1.0, 0.5, 0, 0.0, &err), OB_OK);
    ob_optim_get_progress(a.opt, &p);
    assert_true(p.refit_scale == 1.0);
    run_end(&a);
    run_start(&a, &cfg);
    assert_int_equal(ob_optim_warm_start(a.opt, v, 1.0, 0.5, 3, 0.0, &err), OB_OK);
    for (int i = 0; i < D; i++)
        a.g[i] = 100.0f;
    assert_int_equal(ob_optim_step(a.opt, a.g, 1e-3f, NULL), OB_OK);
    ob_optim_get_progress(a.opt, &p);
    assert_int_equal(p.warm_start, OB_WARM_REFUSED);
    assert_true(p.refit_scale == 1.0);
    p.refit_scale = 0.0; /* a hostile restore */
    assert_int_equal(ob_optim_set_progress(a.opt, &p, &err), OB_ERR_INVALID_ARG);
    run_end(&a);

    cfg.beta2 = 0.999;
    double r = OB_FROZEN_STEP_RATIO;
    assert_true(fabs(ob_optim_frozen_scale(&cfg, 400) - 1.0 / (r * r)) < 1e-12);
    assert_true(fabs(ob_optim_frozen_scale(&cfg, 2000) - (1.0 - pow(0.999, 2000.0))) < 1e-12);
    assert_true(ob_optim_frozen_scale(&cfg, 0) == 1.0);
    cfg.bias_correction = 1;
    assert_true(ob_optim_frozen_scale(&cfg, 400) == 1.0);
}

/* refit_steps auto: a fifth of Delta on the source's own setting, half on another learning rate
 * or a smaller global batch, three quarters from a larger global batch (whose v_Tw underestimates
 * the job's gradient noise). */
static void test_auto_refit_steps(void **state)
{
    (void)state;
    assert_int_equal(ob_optim_auto_refit_steps(0.99, OB_WARM_SOURCE_SAME), 20);
    assert_int_equal(ob_optim_auto_refit_steps(0.99, OB_WARM_SOURCE_OTHER), 50);
    assert_int_equal(ob_optim_auto_refit_steps(0.99, OB_WARM_SOURCE_LARGER_BATCH), 75);
    assert_int_equal(ob_optim_auto_refit_steps(0.999, OB_WARM_SOURCE_SAME), 200);
    assert_int_equal(ob_optim_auto_refit_steps(0.999, OB_WARM_SOURCE_OTHER), 500);
    assert_int_equal(ob_optim_auto_refit_steps(0.999, OB_WARM_SOURCE_LARGER_BATCH), 750);
    /* Delta 3 (beta2 2/3): ceil(3/5) = 1, ceil(3/2) = 2, ceil(9/4) = 3 */
    assert_int_equal(ob_optim_auto_refit_steps(2.0 / 3.0, OB_WARM_SOURCE_SAME), 1);
    assert_int_equal(ob_optim_auto_refit_steps(2.0 / 3.0, OB_WARM_SOURCE_OTHER), 2);
    assert_int_equal(ob_optim_auto_refit_steps(2.0 / 3.0, OB_WARM_SOURCE_LARGER_BATCH), 3);
}

/* fit_fraction: a check that finds at most that fraction of coordinates off ends the refit at
 * step 1 (frozen there); one coordinate off of 64 (1.6 %), or fit_fraction 0, keeps the refit's
 * length. Fractions outside [0, OB_WARM_REFUSE_FRACTION] are refused. */
static void test_warm_fit_ends_refit(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    float v[D];
    for (int i = 0; i < D; i++)
        v[i] = 1.0f;
    struct {
        int off;
        double fit;
        long want_end, want_freeze;
    } c[] = {{0, OB_WARM_FIT_FRACTION, 1, 1}, {1, OB_WARM_FIT_FRACTION, 10, -1}, {0, 0.0, 10, -1}};
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        run r;
        run_start(&r, &cfg);
        ob_err err = {0};
        assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 10, -0.1, &err),
                         OB_ERR_INVALID_ARG);
        assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 10, 0.06, &err),
                         OB_ERR_INVALID_ARG);
        assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 10, NAN, &err),
                         OB_ERR_INVALID_ARG);
        assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 10, c[k].fit, &err), OB_OK);
        for (int i = 0; i < D; i++)
            r.g[i] = i < c[k].off ? 12.0f : 1.0f;
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
        ob_optim_stats s = stats(&r);
        assert_int_equal(s.warm_start, OB_WARM_REFIT);
        assert_int_equal(s.refit_end, c[k].want_end);
        assert_int_equal(s.freeze_step, c[k].want_freeze);
        assert_true(fabs(s.warm_check_fraction - (double)c[k].off / D) < 1e-12);
        run_end(&r);
    }
}

/* A borrowed v that the first gradients do not fit (zero where the gradient is not) is refused:
 * the run is then the same, bit for bit, as one that never had a warm start. */
static void test_warm_start_refused_is_scratch(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.freeze_step = 5;
    run warm, cold;
    run_start(&warm, &cfg);
    run_start(&cold, &cfg);
    float v[D];
    for (int i = 0; i < D; i++)
        v[i] = i < D / 2 ? 0.0f : 1.0f; /* half the coordinates: far too small */
    ob_err err = {0};
    assert_int_equal(ob_optim_warm_start(warm.opt, v, 1.0, 1.0, 20, 0.0, &err), OB_OK);
    for (long t = 1; t <= 8; t++) {
        for (int i = 0; i < D; i++)
            warm.g[i] = cold.g[i] = 0.1f * (float)((i * 5 + t) % 7) + 0.05f;
        assert_int_equal(ob_optim_step(warm.opt, warm.g, 1e-2f, NULL), OB_OK);
        assert_int_equal(ob_optim_step(cold.opt, cold.g, 1e-2f, NULL), OB_OK);
        assert_memory_equal(warm.x, cold.x, sizeof warm.x);
    }
    ob_optim_stats s = stats(&warm);
    assert_int_equal(s.warm_start, OB_WARM_REFUSED);
    assert_true(s.warm_check_fraction >= 0.5 && s.warm_check_fraction <= 0.5 + 1e-9);
    assert_int_equal(s.freeze_step, 5); /* the spec's own rule, not the refit's 20 */
    ob_optim_state a, b;
    ob_optim_get_state(warm.opt, &a);
    ob_optim_get_state(cold.opt, &b);
    assert_memory_equal(a.exp_avg_sq, b.exp_avg_sq, D * sizeof(float));
    run_end(&warm);
    run_end(&cold);
}

/* The refit survives a checkpoint: a run restored mid-refit freezes where the original does and
 * ends with the same bits; progress that does not fit is refused. */
static void test_warm_start_refit_resume(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.mode = OB_ONEBIT_UNCOMPRESSED;
    run a, b;
    run_start(&a, &cfg);
    float v[D];
    for (int i = 0; i < D; i++)
        v[i] = 1e-3f * (float)(i + 1);
    ob_err err = {0};
    assert_int_equal(ob_optim_warm_start(a.opt, v, 1.0, 1.0, 4, 0.0, &err), OB_OK);
    for (long t = 1; t <= 10; t++) {
        for (int i = 0; i < D; i++)
            a.g[i] = 0.01f * (float)((i * 3 + t) % 5) - 0.02f;
        assert_int_equal(ob_optim_step(a.opt, a.g, 1e-2f, NULL), OB_OK);
        if (t != 2) continue;
        ob_optim_progress p;
        copy_state(&b, &a, &cfg, &p);
        ob_optim_progress bad = p;
        bad.refit_end = 2; /* a refit that should have frozen already */
        assert_int_equal(ob_optim_set_progress(b.opt, &bad, &err), OB_ERR_INVALID_ARG);
        bad = p;
        bad.warm_start = (ob_warm_state)7;
        assert_int_equal(ob_optim_set_progress(b.opt, &bad, &err), OB_ERR_INVALID_ARG);
        assert_int_equal(ob_optim_set_progress(b.opt, &p, &err), OB_OK);
    }
    for (long t = 3; t <= 10; t++) {
        for (int i = 0; i < D; i++)
            b.g[i] = 0.01f * (float)((i * 3 + t) % 5) - 0.02f;
        assert_int_equal(ob_optim_step(b.opt, b.g, 1e-2f, NULL), OB_OK);
    }
    assert_int_equal(stats(&b).freeze_step, 4);
    assert_int_equal(stats(&a).freeze_step, 4);
    assert_memory_equal(a.x, b.x, sizeof a.x);
    run_end(&a);
    run_end(&b);
}

/* After a rollback: a frozen optimizer goes back to Adam from its v_Tw for the given steps,
 * with zeroed error feedback, and freezes again; progress carries the state. */
static void test_rewarm(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.freeze_step = 2;
    cfg.block_size = 32;
    run r;
    run_start(&r, &cfg);
    ob_err err = {0};
    /* Not frozen, the bad step already behind the delay: nothing. */
    assert_int_equal(ob_optim_rewarm(r.opt, 3, -5, &err), OB_OK);
    assert_int_equal(stats(&r).warm_start, OB_WARM_NONE);
    for (long t = 1; t <= 5; t++) {
        for (int i = 0; i < D; i++)
            r.g[i] = 0.1f * (float)((i + t) % 3) - 0.1f;
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-2f, NULL), OB_OK);
    }
    assert_int_equal(stats(&r).freeze_step, 2);
    ob_optim_state st;
    ob_optim_get_state(r.opt, &st);
    int nonzero = 0;
    for (size_t i = 0; i < st.padded_size; i++)
        nonzero += st.worker_error[i] != 0.0f;
    assert_true(nonzero > 0); /* the 1-bit exchange left errors behind */
    assert_int_equal(ob_optim_rewarm(r.opt, 0, 5, &err), OB_ERR_INVALID_ARG);
    assert_int_equal(ob_optim_rewarm(r.opt, 3, 5, &err), OB_OK);
    ob_optim_stats s = stats(&r);
    assert_int_equal(s.phase, OB_PHASE_WARMUP);
    assert_int_equal(s.warm_start, OB_WARM_REWARM);
    assert_int_equal(s.refit_end, 8);
    for (size_t i = 0; i < st.padded_size; i++)
        assert_true(st.worker_error[i] == 0.0f);
    ob_optim_progress p;
    ob_optim_get_progress(r.opt, &p);
    assert_int_equal(p.warm_start, OB_WARM_REWARM);
    for (long t = 6; t <= 8; t++) {
        assert_int_equal(stats(&r).phase, OB_PHASE_WARMUP);
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-2f, NULL), OB_OK);
    }
    s = stats(&r);
    assert_int_equal(s.phase, OB_PHASE_COMPRESSION);
    assert_int_equal(s.freeze_step, 8);
    run_end(&r);

    ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
    run_start(&r, &cfg);
    assert_int_equal(ob_optim_rewarm(r.opt, 3, 1, &err), OB_ERR_INVALID_ARG);
    run_end(&r);
}

/* A rollback into the warmup (the checkpoint predates the freeze): the same path would freeze
 * at the same step and diverge the same way, so the freeze moves to the bad step plus the
 * rewarm length, for a fixed freeze step and for the auto rule; the delay survives a
 * checkpoint (progress) and a restore that claims none is refused. */
static void test_rewarm_in_warmup_delays_the_freeze(void **state)
{
    for (int fixed = 0; fixed < 2; fixed++) {
        ob_optim_config cfg;
        ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
        cfg.beta2 = 0.9; /* Delta 10 */
        cfg.freeze_step = fixed ? 4 : 0;
        cfg.block_size = 32;
        run r;
        run_start(&r, &cfg);
        for (int i = 0; i < D; i++)
            r.g[i] = 0.25f;
        ob_err err = {0};
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
        /* diverged at step 6 (after a freeze at 4 or so), back to step 1 */
        assert_int_equal(ob_optim_rewarm(r.opt, 5, 6, &err), OB_OK);
        ob_optim_stats s = stats(&r);
        assert_int_equal(s.warm_start, OB_WARM_DELAYED);
        assert_int_equal(s.refit_end, 11);
        ob_optim_progress p;
        ob_optim_get_progress(r.opt, &p);
        assert_int_equal(p.warm_start, OB_WARM_DELAYED);
        assert_int_equal(p.refit_end, 11);
        /* A shrinking gradient: the auto rule alone would never pass (the ratio stays below
         * its band) and the fixed one would freeze at 4; either way the freeze is at 11. */
        long got = -1;
        for (long t = 2; t <= 40 && got < 0; t++) {
            for (int i = 0; i < D; i++)
                r.g[i] = 0.25f * powf(0.7f, (float)t);
            assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
            if (stats(&r).phase == OB_PHASE_COMPRESSION) got = t;
        }
        assert_int_equal(got, 11);
        run_end(&r);

        run_start(&r, &cfg);
        p.step = 3;
        p.freeze_step = -1;
        p.refit_end = 0;
        assert_int_equal(ob_optim_set_progress(r.opt, &p, &err), OB_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "delayed"));
        p.refit_end = 11;
        assert_int_equal(ob_optim_set_progress(r.opt, &p, &err), OB_OK);
        assert_int_equal(stats(&r).warm_start, OB_WARM_DELAYED);
        run_end(&r);
    }
}

/* The naive mode never freezes and keeps updating v from the compressed gradient. */
static void test_naive_never_freezes(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.mode = OB_ONEBIT_NAIVE;
    cfg.block_size = 32;
    run r;
    run_start(&r, &cfg);
    ob_optim_state st;
    ob_optim_get_state(r.opt, &st);
    float v_prev = 0.0f;
    for (long t = 1; t <= 50; t++) {
        for (int i = 0; i < D; i++)
            r.g[i] = (float)((i * 7 + t) % 11) - 5.0f;
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
        assert_int_equal(stats(&r).phase, OB_PHASE_WARMUP);
        assert_true(st.exp_avg_sq[0] != v_prev);
        v_prev = st.exp_avg_sq[0];
    }
    /* v moves with the compressed gradient: every element of a block shares |g| = scale, so
     * v is the same across a block whose gradient history had equal scales. */
    assert_true(st.exp_avg_sq[0] == st.exp_avg_sq[1]);
    run_end(&r);
}

/* A coordinate with tiny v_Tw: the 1-bit code hands it +-s of its block, so the paper's
 * compressed step moves it by about lr * s / sqrt(v) -- far beyond any Adam step -- while the
 * preconditioned variant keeps every step near lr, and the default stabiliser bounds every
 * step by c lr. Returns the largest step of coordinate 0 after the freeze, in units of lr. */
static double max_tiny_step(int precondition, ob_stabilizer stabilizer)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.freeze_step = 20;
    cfg.block_size = 64;
    cfg.precondition = precondition;
    cfg.stabilizer = stabilizer;
    run r;
    run_start(&r, &cfg);
    double worst = 0.0;
    float lr = 1e-3f;
    for (long t = 1; t <= 40; t++) {
        for (int i = 0; i < D; i++)
            r.g[i] = ((i + t) % 2 ? 1.0f : -1.0f) * (i == 0 ? 1e-6f : 1.0f);
        float before = r.x[0];
        assert_int_equal(ob_optim_step(r.opt, r.g, lr, NULL), OB_OK);
        if (t > 20) worst = fmax(worst, fabs((double)r.x[0] - before));
    }
    run_end(&r);
    return worst / lr;
}

static void test_precondition_bounds_tiny_variance_steps(void **state)
{
    double plain = max_tiny_step(0, OB_STABILIZER_NONE), pre = max_tiny_step(1, OB_STABILIZER_NONE);
    assert_true(plain > 1000.0); /* the failure mode of the paper's exact form exists */
    assert_true(pre < 10.0);     /* and the option removes it */
    /* The default: no step beyond c = (1 - beta1) / sqrt(1 - beta2) = 3.16 lr, either form. */
    ob_optim_config def;
    ob_optim_config_default(&def, OB_OPTIM_ONEBIT_ADAM);
    assert_int_equal(def.stabilizer, OB_STABILIZER_ADAM_BOUND);
    double c = ob_optim_stability_bound(&def);
    assert_true(fabs(c - 0.1 / sqrt(0.001)) < 1e-12);
    double bounded = max_tiny_step(0, OB_STABILIZER_ADAM_BOUND);
    double bounded_pre = max_tiny_step(1, OB_STABILIZER_ADAM_BOUND);
    if (!(bounded <= c * 1.001 && bounded > 0.5 * c)) fail_msg("bounded step %g lr", bounded);
    assert_true(bounded_pre <= c * 1.001);

    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.precondition = 1;
    cfg.mode = OB_ONEBIT_NAIVE;
    ob_err err = {0};
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "precondition"));
}

/* The gradient of step t in the refresh tests: varies with t and the coordinate. */
static void refresh_grad(float *g, long t)
{
    for (int i = 0; i < D; i++)
        g[i] = 0.01f * (float)((i * 7 + t * 3) % 11) - 0.05f + 0.001f * (float)t;
}

/* The v frozen at step s over Adam's v_hat: (1 - b2^s) times the freeze's raise. */
static double frozen_scale_ref(const ob_optim_config *cfg, long s)
{
    return (1.0 - pow(cfg->beta2, (double)s)) * ob_optim_freeze_raise(cfg, s);
}

/* refresh_steps = R after a freeze at T = 4: compression steps 5..8 (max(T, R) of them), then
 * steps 9..10 re-estimate v to w v_hat_T + (1 - w) mean(g^2) (w = b2^(4 + 2)), raised as a
 * freeze at step 10, which becomes the freeze step: the next refresh is steps 21..22. v is
 * untouched between refreshes; the phase stays compression. */
static void test_refresh_schedule_and_variance(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.mode = OB_ONEBIT_UNCOMPRESSED;
    cfg.freeze_step = 4;
    cfg.refresh_steps = 2;
    run r;
    run_start(&r, &cfg);
    ob_optim_state st;
    ob_optim_get_state(r.opt, &st);
    float v_frozen[D];
    double sq[2][D];
    for (long t = 1; t <= 22; t++) {
        refresh_grad(r.g, t);
        if (t == 9 || t == 10)
            for (int i = 0; i < D; i++)
                sq[t - 9][i] = (double)r.g[i] * r.g[i];
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
        ob_optim_stats s = stats(&r);
        long want = t < 4 ? -1 : t < 10 ? 4 : t < 22 ? 10 : 22;
        assert_int_equal(s.freeze_step, want);
        assert_int_equal(s.phase, t < 4 ? OB_PHASE_WARMUP : OB_PHASE_COMPRESSION);
        if (t == 4) memcpy(v_frozen, st.exp_avg_sq, sizeof v_frozen);
        if (t > 4 && t < 9) assert_memory_equal(st.exp_avg_sq, v_frozen, sizeof v_frozen);
        if (t != 10) continue;
        double w = pow(cfg.beta2, 6.0), share = (1.0 - w) / 2.0;
        double l1 = share / (1.0 - share), l2 = share;
        for (int i = 0; i < D; i++) {
            double V = v_frozen[i] / frozen_scale_ref(&cfg, 4);
            V = (1.0 - l1) * V + l1 * sq[0][i];
            V = (1.0 - l2) * V + l2 * sq[1][i];
            double want_v = V * frozen_scale_ref(&cfg, 10);
            assert_true(fabs(st.exp_avg_sq[i] - want_v) <= 1e-5 * want_v);
        }
        memcpy(v_frozen, st.exp_avg_sq, sizeof v_frozen);
    }
    run_end(&r);
}

/* After a warm start's refit (frozen at its end, v carried on without correction or raise)
 * the refresh starts from that v as v_hat, not from v over a freeze's scale. */
static void test_refresh_after_refit(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.mode = OB_ONEBIT_UNCOMPRESSED;
    cfg.refresh_steps = 2;
    run r;
    run_start(&r, &cfg);
    float v[D], v_frozen[D];
    double sq[2][D];
    for (int i = 0; i < D; i++)
        v[i] = 1e-3f * (float)(i + 1);
    ob_err err = {0};
    assert_int_equal(ob_optim_warm_start(r.opt, v, 1.0, 1.0, 2, 0.0, &err), OB_OK);
    ob_optim_state st;
    ob_optim_get_state(r.opt, &st);
    for (long t = 1; t <= 6; t++) {
        refresh_grad(r.g, t);
        if (t >= 5)
            for (int i = 0; i < D; i++)
                sq[t - 5][i] = (double)r.g[i] * r.g[i];
        assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
        if (t == 2) memcpy(v_frozen, st.exp_avg_sq, sizeof v_frozen);
    }
    assert_int_equal(stats(&r).freeze_step, 6); /* refit to 2, compressed 3..4, refresh 5..6 */
    double w = pow(cfg.beta2, 4.0), share = (1.0 - w) / 2.0;
    double l1 = share / (1.0 - share), l2 = share;
    for (int i = 0; i < D; i++) {
        double V = (1.0 - l1) * v_frozen[i] + l1 * sq[0][i];
        V = (1.0 - l2) * V + l2 * sq[1][i];
        double want_v = V * frozen_scale_ref(&cfg, 6);
        assert_true(fabs(st.exp_avg_sq[i] - want_v) <= 1e-5 * want_v);
    }
    run_end(&r);
}

/* A checkpoint inside a refresh (after its first step) resumes bit for bit: v, m, the error
 * feedback and the freeze step hold all of it (compressed mode, precondition). */
static void test_refresh_resume(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.freeze_step = 3;
    cfg.refresh_steps = 4;
    cfg.precondition = 1;
    cfg.block_size = 32;
    run a, b;
    run_start(&a, &cfg);
    ob_err err = {0};
    for (long t = 1; t <= 40; t++) {
        refresh_grad(a.g, t);
        assert_int_equal(ob_optim_step(a.opt, a.g, 1e-2f, NULL), OB_OK);
        if (t != 8) continue; /* refresh steps 8..11 (the gap is max(3, 4) = 4) */
        ob_optim_progress p;
        copy_state(&b, &a, &cfg, &p);
        assert_int_equal(p.freeze_step, 3);
        assert_int_equal(ob_optim_set_progress(b.opt, &p, &err), OB_OK);
    }
    for (long t = 9; t <= 40; t++) {
        refresh_grad(b.g, t);
        assert_int_equal(ob_optim_step(b.opt, b.g, 1e-2f, NULL), OB_OK);
    }
    /* refreshes at 8..11 and 23..26 (gap 11), frozen at 26 since */
    assert_int_equal(stats(&a).freeze_step, 26);
    assert_int_equal(stats(&b).freeze_step, 26);
    assert_memory_equal(a.x, b.x, sizeof a.x);
    ob_optim_state sa, sb;
    ob_optim_get_state(a.opt, &sa);
    ob_optim_get_state(b.opt, &sb);
    assert_memory_equal(sa.exp_avg, sb.exp_avg, D * sizeof(float));
    assert_memory_equal(sa.exp_avg_sq, sb.exp_avg_sq, D * sizeof(float));
    run_end(&a);
    run_end(&b);
}

/* The step whose freeze scale a checkpoint's v carries: the freeze step, or inside a refresh
 * (after 1..R-1 of its steps) the checkpoint's step. */
static void test_refresh_scaled_at(void **state)
{
    ob_optim_config cfg;
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.refresh_steps = 6;
    /* frozen at 10: compressed 11..20, refresh 21..26 */
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_NONE, 0, 10, 10), 10);
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_NONE, 0, 10, 20), 10);
    for (long s = 21; s <= 25; s++)
        assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_NONE, 0, 10, s), s);
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_NONE, 0, 26, 26),
                     26); /* the refresh done: frozen at 26 */
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_NONE, 0, 2, 9),
                     9); /* gap max(2, 6): refresh 9..14 */
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_NONE, 0, 0, 7),
                     7); /* a v taken as is: 7..12 */
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_NONE, 0, -1, 30), -1); /* not frozen */
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_NONE, 0, LONG_MAX - 1, LONG_MAX),
                     LONG_MAX - 1);
    /* No freeze scaled a v taken as is, or frozen at a refit's end; a refresh after them did. */
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_TAKEN, 0, 0, 3), 0);
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_REFIT, 20, 20, 30), 0);
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_REWARM, 20, 20, 30), 0);
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_REFIT, 20, 46, 50), 46);
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_DELAYED, 20, 20, 30), 20);
    assert_int_equal(ob_optim_next_refresh(&cfg, 10), 21);
    assert_int_equal(ob_optim_next_refresh(&cfg, 2), 9);
    assert_int_equal(ob_optim_next_refresh(&cfg, -1), 0);
    assert_int_equal(ob_optim_next_refresh(&cfg, LONG_MAX - 1), 0);
    cfg.refresh_steps = 0;
    assert_int_equal(ob_optim_v_scaled_at(&cfg, OB_WARM_NONE, 0, 10, 23), 10);
    assert_int_equal(ob_optim_next_refresh(&cfg, 10), 0);
}

/* refresh_steps is onebit_adam's, not the naive mode's; in range. */
static void test_refresh_config(void **state)
{
    ob_optim_config cfg;
    ob_err err = {0};
    ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
    cfg.refresh_steps = 4;
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "refresh_steps"));
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.mode = OB_ONEBIT_NAIVE;
    cfg.refresh_steps = 4;
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    ob_optim_config_default(&cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg.refresh_steps = -1;
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    cfg.refresh_steps = OB_OPTIM_MAX_REFRESH_STEPS + 1;
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    cfg.refresh_steps = OB_OPTIM_MAX_REFRESH_STEPS;
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_OK);
}

/* --- tracked variance (track_variance) --------------------------------------------------- */

static void track_config(ob_optim_config *cfg, long K, double factor)
{
    ob_optim_config_default(cfg, OB_OPTIM_ONEBIT_ADAM);
    cfg->track_variance = K;
    cfg->track_factor = factor;
    cfg->block_size = 32;
}

/* One rank: alpha = 1, beta = 0, so the estimate is Adam's bias-corrected v_hat of the rank's
 * gradients (the EMA of g^2 over 1 - b2^t) times the factor, at every K-th step after the
 * freeze, which comes at step K (no LR warmup); v is untouched in between, and den follows.
 * With bias correction v is v_hat itself; without it (the default) v_hat is put in the
 * warmup's scale, times 1 - b2^t: the EMA of g^2 itself. */
static void test_track_one_rank_is_adam_v(void **state)
{
    const long K = 4;
    for (int f = 0; f < 4; f++) {
        double factor = f & 1 ? OB_TRACK_FACTOR : 1.25;
        ob_optim_config cfg;
        track_config(&cfg, K, f & 1 ? 0.0 : 1.25); /* 0: the default factor */
        cfg.bias_correction = f >> 1;
        run r;
        run_start(&r, &cfg);
        ob_optim_state st;
        ob_optim_get_state(r.opt, &st);
        assert_int_equal(st.track_stats_len, 3 * D);
        double A[D] = {0};
        float v_before[D];
        for (long t = 1; t <= 13; t++) {
            refresh_grad(r.g, t);
            for (int i = 0; i < D; i++)
                A[i] = cfg.beta2 * A[i] + (1.0 - cfg.beta2) * (double)r.g[i] * r.g[i];
            memcpy(v_before, st.exp_avg_sq, sizeof v_before);
            assert_int_equal(ob_optim_step(r.opt, r.g, 1e-3f, NULL), OB_OK);
            ob_optim_stats s = stats(&r);
            assert_int_equal(s.freeze_step, t < K ? -1 : K);
            if (t <= K) continue;
            if ((t - K) % K != 0) {
                assert_memory_equal(st.exp_avg_sq, v_before, sizeof v_before);
                continue;
            }
            double c2 = 1.0 - pow(cfg.beta2, (double)t);
            double scale = cfg.bias_correction ? 1.0 : c2;
            for (int i = 0; i < D; i++) {
                double want = factor * scale * A[i] / c2;
                assert_true(fabs(st.exp_avg_sq[i] - want) <= 2e-6 * want);
            }
        }
        run_end(&r);
    }
}

/* The three statistics per element against their definitions (u, A, B as EMAs of g, g^2 and
 * the bias-corrected u^2), the share's clamp, and a zero sum keeping v. */
static void test_track_kernels(void **state)
{
    float u[D] = {0}, a[D] = {0}, b[D] = {0}, g[D], e[D], v[D], den[D], s[D];
    double U[D] = {0}, A[D] = {0}, B[D] = {0};
    const double b1 = 0.9, b2 = 0.99;
    for (long t = 1; t <= 5; t++) {
        refresh_grad(g, t);
        double cu = 1.0 / (1.0 - pow(b1, (double)t));
        ob_track_update(u, a, b, g, D, (float)b1, (float)(1.0 - b1), (float)b2, (float)(1.0 - b2),
                        (float)cu);
        for (int i = 0; i < D; i++) {
            U[i] = b1 * U[i] + (1.0 - b1) * g[i];
            A[i] = b2 * A[i] + (1.0 - b2) * (double)g[i] * g[i];
            B[i] = b2 * B[i] + (1.0 - b2) * (U[i] * cu) * (U[i] * cu);
        }
    }
    for (int i = 0; i < D; i++) {
        assert_true(fabs(u[i] - U[i]) <= 1e-6 * fabs(U[i]) + 1e-9);
        assert_true(fabs(a[i] - A[i]) <= 1e-5 * A[i]);
        assert_true(fabs(b[i] - B[i]) <= 1e-5 * B[i] + 1e-12);
    }
    /* N = 4: beta = (3/4) / (1 - k), k = 0.1 / 1.9; the clamp at A_hat / 4. */
    double k = (1.0 - b1) / (1.0 + b1), beta = 0.75 / (1.0 - k), alpha = 1.0 - beta, c2 = 2.0;
    ob_track_share(e, a, b, D, (float)c2, (float)alpha, (float)beta, 0.25f);
    for (int i = 0; i < D; i++) {
        double want = alpha * A[i] * c2 + beta * B[i] * c2;
        if (want < A[i] * c2 / 4.0) want = A[i] * c2 / 4.0;
        assert_true(fabs(e[i] - want) <= 1e-5 * want);
    }
    a[0] = 1.0f, b[0] = 0.0f; /* B far below A: the clamp */
    ob_track_share(e, a, b, 1, 1.0f, (float)alpha, (float)beta, 0.25f);
    assert_true(e[0] == 0.25f);
    for (int i = 0; i < D; i++)
        v[i] = 7.0f, s[i] = i == 3 ? 0.0f : (float)(i + 1);
    ob_track_set(v, den, s, D, 0.5f, 1e-8f);
    for (int i = 0; i < D; i++) {
        float want = i == 3 ? 7.0f : 0.5f * (float)(i + 1);
        assert_true(v[i] == want);
        assert_true(den[i] == sqrtf(want) + 1e-8f);
    }
    /* The same with the ratio den_old / den_new left in s (1 where v was kept). */
    float den_old[D];
    for (int i = 0; i < D; i++)
        s[i] = i == 5 ? 0.0f : 2.0f * (float)(i + 1), den_old[i] = den[i];
    ob_track_set_ratio(v, den, s, D, 0.5f, 1e-8f);
    for (int i = 0; i < D; i++) {
        float want = i == 5 ? (i == 3 ? 7.0f : 0.5f * (float)(i + 1)) : (float)(i + 1);
        assert_true(v[i] == want);
        assert_true(den[i] == sqrtf(want) + 1e-8f);
        assert_true(s[i] == den_old[i] / den[i]);
        if (i == 5) assert_true(s[i] == 1.0f);
    }
}

/* A checkpoint between two estimates resumes bit for bit when it holds the statistics; the
 * same resume without them (zeros) ends elsewhere: the statistics are state. With and without
 * precondition (whose error buffers each estimate moves to the new denominator). */
static void track_resume(int precondition)
{
    ob_optim_config cfg;
    track_config(&cfg, 5, 0.0);
    cfg.precondition = precondition;
    run a, b, c;
    run_start(&a, &cfg);
    ob_err err = {0};
    for (long t = 1; t <= 40; t++) {
        refresh_grad(a.g, t);
        assert_int_equal(ob_optim_step(a.opt, a.g, 1e-2f, NULL), OB_OK);
        if (t != 12) continue; /* frozen at 5, estimates at 10, 15, ... */
        ob_optim_progress p;
        copy_state(&b, &a, &cfg, &p);
        assert_int_equal(ob_optim_set_progress(b.opt, &p, &err), OB_OK);
        copy_state(&c, &a, &cfg, &p);
        ob_optim_state sc;
        ob_optim_get_state(c.opt, &sc);
        memset(sc.track_stats, 0, sc.track_stats_len * sizeof(float));
        assert_int_equal(ob_optim_set_progress(c.opt, &p, &err), OB_OK);
    }
    for (long t = 13; t <= 40; t++) {
        refresh_grad(b.g, t);
        refresh_grad(c.g, t);
        assert_int_equal(ob_optim_step(b.opt, b.g, 1e-2f, NULL), OB_OK);
        assert_int_equal(ob_optim_step(c.opt, c.g, 1e-2f, NULL), OB_OK);
    }
    assert_memory_equal(a.x, b.x, sizeof a.x);
    ob_optim_state sa, sb;
    ob_optim_get_state(a.opt, &sa);
    ob_optim_get_state(b.opt, &sb);
    assert_memory_equal(sa.exp_avg_sq, sb.exp_avg_sq, D * sizeof(float));
    assert_memory_equal(sa.track_stats, sb.track_stats, 3 * D * sizeof(float));
    assert_true(memcmp(a.x, c.x, sizeof a.x) != 0);
    run_end(&a);
    run_end(&b);
    run_end(&c);
}

static void test_track_resume(void **state)
{
    for (int pre = 0; pre < 2; pre++)
        track_resume(pre);
}

/* The freeze of a tracked job: at max(lr_warmup_steps, freeze_min_steps, K), not by the
 * ratio rule; a fixed freeze_step stays the user's. */
static void test_track_freeze_step(void **state)
{
    ob_optim_config cfg;
    track_config(&cfg, 25, 0.0);
    assert_int_equal(ob_optim_track_freeze_step(&cfg), 25);
    cfg.lr_warmup_steps = 75;
    assert_int_equal(ob_optim_track_freeze_step(&cfg), 75);
    cfg.freeze_min_steps = 90;
    assert_int_equal(ob_optim_track_freeze_step(&cfg), 90);
    track_config(&cfg, 3, 0.0);
    cfg.lr_warmup_steps = 7;
    run r;
    run_start(&r, &cfg);
    for (int i = 0; i < D; i++)
        r.g[i] = (i % 2) ? 0.5f : -0.5f;
    assert_int_equal(step_until_freeze(&r, 100), 7);
    run_end(&r);
    track_config(&cfg, 3, 0.0);
    cfg.freeze_step = 11;
    run_start(&r, &cfg);
    assert_int_equal(step_until_freeze(&r, 100), 11);
    run_end(&r);
}

/* track_variance is the compressed onebit_adam's, in range, not with refreshes; with
 * precondition; the factor in range. */
static void test_track_config(void **state)
{
    ob_optim_config cfg;
    ob_err err = {0};
    ob_optim_config_default(&cfg, OB_OPTIM_ADAM);
    cfg.track_variance = 4;
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "track_variance"));
    ob_optim_config_default(&cfg, OB_OPTIM_BINSGDM);
    cfg.track_variance = 4;
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    for (int mode = OB_ONEBIT_UNCOMPRESSED; mode <= OB_ONEBIT_NAIVE; mode++) {
        track_config(&cfg, 4, 0.0);
        cfg.mode = (ob_onebit_mode)mode;
        assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "compression on"));
    }
    track_config(&cfg, 4, 0.0);
    cfg.refresh_steps = 2;
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "refresh_steps"));
    track_config(&cfg, 4, 0.0);
    cfg.precondition = 1; /* the error buffers follow each new denominator */
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_OK);
    track_config(&cfg, -1, 0.0);
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    track_config(&cfg, OB_OPTIM_MAX_TRACK_INTERVAL + 1, 0.0);
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
    track_config(&cfg, OB_OPTIM_MAX_TRACK_INTERVAL, 0.0);
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_OK);
    double bad[] = {-1.0, 100.5, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        track_config(&cfg, 4, bad[i]);
        assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "track_factor"));
    }
    track_config(&cfg, 4, 0.5);
    assert_int_equal(ob_optim_config_validate(&cfg, &err), OB_OK);
    assert_true(ob_optim_track_factor(&cfg) == 0.5);
    cfg.track_factor = 0.0;
    assert_true(ob_optim_track_factor(&cfg) == OB_TRACK_FACTOR);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_freeze_at_predicted_step),
        cmocka_unit_test(test_auto_freeze_beta2_999),
        cmocka_unit_test(test_rewarm_in_warmup_delays_the_freeze),
        cmocka_unit_test(test_no_freeze_before_lr_warmup_or_min_steps),
        cmocka_unit_test(test_no_freeze_while_variance_falls),
        cmocka_unit_test(test_fixed_freeze_and_bias_corrected_v),
        cmocka_unit_test(test_frozen_step_ratio),
        cmocka_unit_test(test_warm_check_raised),
        cmocka_unit_test(test_warm_refit_scale),
        cmocka_unit_test(test_auto_refit_steps),
        cmocka_unit_test(test_warm_fit_ends_refit),
        cmocka_unit_test(test_warm_start),
        cmocka_unit_test(test_warm_start_refit),
        cmocka_unit_test(test_warm_start_refused_is_scratch),
        cmocka_unit_test(test_warm_start_refit_resume),
        cmocka_unit_test(test_rewarm),
        cmocka_unit_test(test_naive_never_freezes),
        cmocka_unit_test(test_precondition_bounds_tiny_variance_steps),
        cmocka_unit_test(test_refresh_schedule_and_variance),
        cmocka_unit_test(test_refresh_after_refit),
        cmocka_unit_test(test_refresh_resume),
        cmocka_unit_test(test_refresh_scaled_at),
        cmocka_unit_test(test_refresh_config),
        cmocka_unit_test(test_track_one_rank_is_adam_v),
        cmocka_unit_test(test_track_kernels),
        cmocka_unit_test(test_track_resume),
        cmocka_unit_test(test_track_freeze_step),
        cmocka_unit_test(test_track_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
