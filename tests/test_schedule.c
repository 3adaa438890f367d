/* Learning-rate schedules against hand-computed values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "onebit/schedule.h"

#include <math.h>
#include <string.h>

#define NEAR(a, b) assert_true(fabs((a) - (b)) <= 1e-12 * fmax(1.0, fabs(b)))

static void test_constant_with_warmup(void **state)
{
    ob_lr_schedule s;
    ob_lr_schedule_default(&s);
    s.peak = 2e-3;
    NEAR(ob_lr_at(&s, 1), 2e-3);
    NEAR(ob_lr_at(&s, 100000), 2e-3);
    s.warmup_steps = 4;
    NEAR(ob_lr_at(&s, 1), 0.5e-3);
    NEAR(ob_lr_at(&s, 3), 1.5e-3);
    NEAR(ob_lr_at(&s, 4), 2e-3);
    NEAR(ob_lr_at(&s, 5), 2e-3);
}

/* The paper's BERT schedule: linear to the peak over 12.5k steps, then x0.99 every 520. */
static void test_warmup_step_decay(void **state)
{
    ob_lr_schedule s;
    ob_lr_schedule_default(&s);
    s.kind = OB_LR_WARMUP_STEP_DECAY;
    s.peak = 4e-4;
    s.warmup_steps = 12500;
    NEAR(ob_lr_at(&s, 6250), 2e-4);
    NEAR(ob_lr_at(&s, 12500), 4e-4);
    NEAR(ob_lr_at(&s, 12500 + 519), 4e-4);
    NEAR(ob_lr_at(&s, 12500 + 520), 4e-4 * 0.99);
    NEAR(ob_lr_at(&s, 12500 + 5 * 520 + 3), 4e-4 * pow(0.99, 5));
}

static void test_cosine(void **state)
{
    ob_lr_schedule s;
    ob_lr_schedule_default(&s);
    s.kind = OB_LR_COSINE;
    s.peak = 1e-3;
    s.min_lr = 1e-4;
    s.warmup_steps = 10;
    s.total_steps = 110;
    NEAR(ob_lr_at(&s, 10), 1e-3);
    NEAR(ob_lr_at(&s, 60), 1e-4 + 0.9e-3 * 0.5); /* half way: cos(pi/2) = 0 */
    NEAR(ob_lr_at(&s, 110), 1e-4);
    NEAR(ob_lr_at(&s, 500), 1e-4); /* past the end: stays at min_lr */
    assert_true(ob_lr_at(&s, 30) > ob_lr_at(&s, 31));
}

static void expect_bad(ob_lr_schedule s, const char *field)
{
    ob_err err = {0};
    assert_int_equal(ob_lr_schedule_validate(&s, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, field));
}

static void test_validation_names_fields(void **state)
{
    ob_lr_schedule b;
    ob_lr_schedule_default(&b);
    assert_int_equal(ob_lr_schedule_validate(&b, NULL), OB_OK);
    ob_lr_schedule s;
    s = b, s.peak = 0.0, expect_bad(s, "lr.peak");
    s = b, s.peak = NAN, expect_bad(s, "lr.peak");
    s = b, s.warmup_steps = -1, expect_bad(s, "lr.warmup_steps");
    s = b, s.kind = OB_LR_WARMUP_STEP_DECAY, s.decay_rate = 1.5, expect_bad(s, "lr.decay_rate");
    s = b, s.kind = OB_LR_WARMUP_STEP_DECAY, s.decay_every = 0, expect_bad(s, "lr.decay_every");
    s = b, s.kind = OB_LR_COSINE, s.total_steps = 100, s.min_lr = 1.0, expect_bad(s, "lr.min_lr");
    s = b, s.kind = OB_LR_COSINE, s.total_steps = 10, s.warmup_steps = 10,
    expect_bad(s, "lr.warmup_steps");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant_with_warmup),
        cmocka_unit_test(test_warmup_step_decay),
        cmocka_unit_test(test_cosine),
        cmocka_unit_test(test_validation_names_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
