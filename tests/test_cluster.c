/* The cluster launchers' parsers on real and hostile text: sbatch --parsable, squeue -O and
 * sacct -P output, how each Slurm state reads as an attempt's end, --hosts lists and the
 * hostfile made from them, and the rank tags of mpirun and srun in the workers' log. */
#include "onebit/launcher.h"
#include "onebit/report.h"
#include "onebit/slurm.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_sbatch(void **state)
{
    (void)state;
    char id[OB_SLURM_ID_LEN];
    ob_err err;
    assert_int_equal(ob_slurm_parse_sbatch("42\n", id, &err), OB_OK);
    assert_string_equal(id, "42");
    assert_int_equal(ob_slurm_parse_sbatch("1234567;cluster-a\n", id, &err), OB_OK);
    assert_string_equal(id, "1234567");
    const char *bad[] = {"",
                         "\n",
                         "Submitted batch job 42\n",
                         "42 \n",
                         "-42\n",
                         "42\n43\n",
                         "42;\x01x\n",
                         "123456789012345678901\n", /* 21 digits */
                         "sbatch: error: Batch job submission failed\n",
                         "42;clu ster\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ob_err_clear(&err);
        assert_int_equal(ob_slurm_parse_sbatch(bad[i], id, &err), OB_ERR_INVALID_ARG);
        assert_string_equal(id, "");
        assert_non_null(strstr(err.msg, "not a job id"));
    }
}

static void test_squeue(void **state)
{
    (void)state;
    ob_slurm_job jobs[8];
    size_t n = 0, skipped = 0;
    ob_err err;
    /* Real output of squeue -h --states=all -O OB_SQUEUE_FORMAT (Slurm 22.05). */
    const char *out = "5|FAILED|NonZeroExitCode|35072|onebit-job-000002-1|/srv/var/jobs/job-000002/"
                      "worker.log\n"
                      "6|COMPLETED|None|0|onebit-job-000003-1|/srv/a dir|with bar/worker.log\n"
                      "7|PENDING|Resources|0|onebit-job-000004-1|/srv/x.log\n"
                      "2|CANCELLED|None|15|wrap|/dev/null\n";
    assert_int_equal(ob_slurm_parse_squeue(out, jobs, 8, &n, &skipped, &err), OB_OK);
    assert_int_equal(n, 4);
    assert_int_equal(skipped, 0);
    assert_string_equal(jobs[0].id, "5");
    assert_int_equal(jobs[0].state, OB_SLURM_FAILED);
    assert_int_equal(jobs[0].exit_code, 137);
    assert_int_equal(jobs[0].term_signal, 0);
    assert_string_equal(jobs[0].name, "onebit-job-000002-1");
    /* The output file is the rest of the line: a '|' in it does not shift anything. */
    assert_string_equal(jobs[1].std_out, "/srv/a dir|with bar/worker.log");
    assert_int_equal(jobs[2].state, OB_SLURM_PENDING);
    assert_string_equal(jobs[2].reason, "Resources");
    assert_int_equal(jobs[3].state, OB_SLURM_CANCELLED);
    assert_int_equal(jobs[3].term_signal, 15);

    /* Hostile lines are skipped, each counted; good lines around them still count. */
    const char *hostile = "x1|RUNNING|None|0|n|o\n"                    /* id not digits */
                          "8|RUNNING|None|0|n\n"                       /* a field short */
                          "9|RUNNIN|None|0|n|o\n"                      /* unknown state */
                          "10|RUNNING|None|65536|n|o\n"                /* status beyond 16 bits */
                          "11|RUNNING|None|-1|n|o\n"                   /* negative status */
                          "12|RUNNING|None|0x10|n|o\n"                 /* not decimal */
                          "|RUNNING|None|0|n|o\n"                      /* empty id */
                          "123456789012345678901|RUNNING|None|0|n|o\n" /* 21-digit id */
                          "13|running|None|0|n|o\n"                    /* states are upper case */
                          "14|RUNNING|None|0|n\x01\x7f|/o\n" /* control bytes: shown as ? */
                          "\n\n"
                          "15|RUNNING|None|0|n|o"; /* no final newline */
    assert_int_equal(ob_slurm_parse_squeue(hostile, jobs, 8, &n, &skipped, &err), OB_OK);
    assert_int_equal(n, 2);
    assert_int_equal(skipped, 9);
    assert_string_equal(jobs[0].id, "14");
    assert_string_equal(jobs[0].name, "n??");
    assert_string_equal(jobs[1].id, "15");

    /* A reason longer than the field, and more jobs than room: skipped, never overflowed. */
    char longline[600];
    memset(longline, 'R', sizeof longline);
    memcpy(longline, "16|PENDING|", 11);
    strcpy(longline + 500, "|0|n|o\n");
    assert_int_equal(ob_slurm_parse_squeue(longline, jobs, 8, &n, &skipped, &err), OB_OK);
    assert_int_equal(n, 0);
    assert_int_equal(skipped, 1);
    assert_int_equal(ob_slurm_parse_squeue(out, jobs, 2, &n, &skipped, &err), OB_OK);
    assert_int_equal(n, 2);
    assert_int_equal(skipped, 2);
    assert_int_equal(ob_slurm_parse_squeue(NULL, jobs, 2, &n, NULL, &err), OB_ERR_INVALID_ARG);
}

static void test_sacct(void **state)
{
    (void)state;
    ob_slurm_job j;
    int found = 0;
    ob_err err;
    const char *out = "41|COMPLETED|0:0\n"
                      "42.batch|FAILED|1:0\n"
                      "42|CANCELLED by 1000|0:15\n";
    assert_int_equal(ob_slurm_parse_sacct(out, "42", &j, &found, &err), OB_OK);
    assert_int_equal(found, 1);
    assert_int_equal(j.state, OB_SLURM_CANCELLED);
    assert_int_equal(j.term_signal, 15);
    assert_int_equal(ob_slurm_parse_sacct("42|NODE_FAIL|0:0\n", "42", &j, &found, &err), OB_OK);
    assert_int_equal(j.state, OB_SLURM_NODE_FAIL);
    assert_int_equal(ob_slurm_parse_sacct("42|OUT_OF_MEMORY|0:125\n", "42", &j, &found, &err),
                     OB_OK);
    assert_int_equal(j.state, OB_SLURM_OUT_OF_MEMORY);
    /* Lines of another job, a step, another shape or a bad exit code do not count. */
    const char *bad[] = {"",
                         "4|FAILED|1:0\n",
                         "420|FAILED|1:0\n",
                         "42.0|FAILED|1:0\n",
                         "42|FAILED\n",
                         "42|FAILED|1\n",
                         "42|FAILED|256:0\n",
                         "42|FAILED|1:200\n",
                         "42|FAILED|a:0\n",
                         "42|WHATEVER|1:0\n",
                         "42|CANCELLED by|0:15\n",
                         "42|FAILED|1:0|extra\n",
                         "Slurm accounting storage is disabled\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ob_slurm_parse_sacct(bad[i], "42", &j, &found, &err), OB_OK);
        assert_int_equal(found, 0);
    }
    assert_int_equal(ob_slurm_parse_sacct(out, "4x", &j, &found, &err), OB_ERR_INVALID_ARG);
}

static ob_slurm_job job_in(ob_slurm_state st, int code, int sig, const char *reason)
{
    ob_slurm_job j;
    memset(&j, 0, sizeof j);
    strcpy(j.id, "42");
    j.state = st;
    j.have_exit = 1;
    j.exit_code = code;
    j.term_signal = sig;
    snprintf(j.reason, sizeof j.reason, "%s", reason);
    return j;
}

static void test_slurm_exit(void **state)
{
    (void)state;
    ob_launch_exit ex;
    ob_slurm_job j = job_in(OB_SLURM_RUNNING, 0, 0, "None");
    ob_slurm_exit(&j, &ex);
    assert_int_equal(ex.done, 0);
    assert_string_equal(ex.reason, "");
    j = job_in(OB_SLURM_PENDING, 0, 0, "Resources");
    ob_slurm_exit(&j, &ex);
    assert_int_equal(ex.done, 0);
    assert_string_equal(ex.reason, "Slurm job 42 PENDING (Resources)");

    j = job_in(OB_SLURM_COMPLETED, 0, 0, "None");
    ob_slurm_exit(&j, &ex);
    assert_true(ex.done && ex.exit_code == 0 && !ex.permanent && !ex.reason[0]);

    /* The worker's exit status passes through: 4 stays 4 (the supervisor does not retry it). */
    j = job_in(OB_SLURM_FAILED, 4, 0, "NonZeroExitCode");
    ob_slurm_exit(&j, &ex);
    assert_true(ex.done && ex.exit_code == 4 && !ex.permanent && !ex.reason[0]);
    j = job_in(OB_SLURM_FAILED, 0, 9, "NonZeroExitCode");
    ob_slurm_exit(&j, &ex);
    assert_true(ex.done && ex.exit_code == -1 && ex.term_signal == 9);
    /* FAILED with 0:0 (a launch failure) is not a success. */
    j = job_in(OB_SLURM_FAILED, 0, 0, "launch_failed");
    ob_slurm_exit(&j, &ex);
    assert_true(ex.done && ex.exit_code != 0);
    assert_non_null(strstr(ex.reason, "launch_failed"));

    /* Ends that recorded 0:0 never read as success; each says what happened. */
    const struct {
        ob_slurm_state st;
        int permanent;
        const char *words;
    } cases[] = {
        {OB_SLURM_NODE_FAIL, 0, "NODE_FAIL: a node of its allocation failed"},
        {OB_SLURM_PREEMPTED, 0, "PREEMPTED"},
        {OB_SLURM_TIMEOUT, 0, "TIMEOUT: it reached its time limit"},
        {OB_SLURM_BOOT_FAIL, 0, "BOOT_FAIL"},
        {OB_SLURM_OUT_OF_MEMORY, 1, "OUT_OF_MEMORY: it ran out of its memory allocation"},
        {OB_SLURM_DEADLINE, 1, "DEADLINE"},
        {OB_SLURM_CANCELLED, 1, "cancelled outside onebitd"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        j = job_in(cases[i].st, 0, 0, "None");
        ob_slurm_exit(&j, &ex);
        assert_int_equal(ex.done, 1);
        assert_int_not_equal(ex.exit_code, 0);
        assert_int_equal(ex.permanent, cases[i].permanent);
        assert_non_null(strstr(ex.reason, "Slurm job 42"));
        assert_non_null(strstr(ex.reason, cases[i].words));
    }
    assert_int_equal(ob_slurm_state_parse("CANCELLED by 0", 14), OB_SLURM_CANCELLED);
    assert_int_equal(ob_slurm_state_parse("RUNNING ", 8), OB_SLURM_UNKNOWN);
    assert_int_equal(ob_slurm_state_parse("RUN", 3), OB_SLURM_UNKNOWN);
    assert_string_equal(ob_slurm_state_name(OB_SLURM_NODE_FAIL), "NODE_FAIL");
}

static void test_hosts_good(void **state)
{
    (void)state;
    ob_host_list l;
    ob_err err;
    assert_int_equal(ob_host_list_parse(&l, "a:4,b-2.example.org:8,10.0.0.7:1", &err), OB_OK);
    assert_int_equal(l.n, 3);
    assert_int_equal(l.total_slots, 13);
    assert_string_equal(l.hosts[1].name, "b-2.example.org");
    assert_int_equal(l.hosts[2].slots, 1);
    char hf[256];
    assert_int_equal(ob_host_list_hostfile(&l, hf, sizeof hf, &err), OB_OK);
    assert_string_equal(hf, "a slots=4\nb-2.example.org slots=8\n10.0.0.7 slots=1\n");
    assert_int_equal(ob_host_list_hostfile(&l, hf, 20, &err), OB_ERR_TOO_LARGE);
    ob_host_list_clear(&l);
    ob_host_list_clear(NULL);
    char name[300];
    memset(name, 'a', 63);
    strcpy(name + 63, ":4096");
    assert_int_equal(ob_host_list_parse(&l, name, &err), OB_OK);
    assert_int_equal(l.total_slots, 4096);
    ob_host_list_clear(&l);
}

static void test_hosts_hostile(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        "a",
        "a:",
        ":4",
        "a:0",
        "a:-1",
        "a:+4",
        "a:04",
        "a:4097",
        "a:99999999999999999999",
        "a:4,",
        ",a:4",
        "a:4,,b:4",
        "a :4",
        "a: 4",
        "a:4 ",
        "a:4,A:4", /* the same host twice (names are case-insensitive) */
        "-a:4",
        "a-:4",
        "a..b:4",
        ".a:4",
        "a.:4",
        "a_b:4",
        "a;rm -rf /:4",
        "$(reboot):4",
        "a\nb:4",
        "a:4\n",
        "256.1.1.1:4",
        "1.2.3:4",
        "01.2.3.4:4",
        "1.2.3.4.5:4",
        "a:4:5",
        "[::1]:4",
        "a:4x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ob_host_list l;
        ob_err err;
        ob_err_clear(&err);
        assert_int_equal(ob_host_list_parse(&l, bad[i], &err), OB_ERR_INVALID_ARG);
        assert_null(l.hosts);
        assert_non_null(strstr(err.msg, "--hosts"));
    }
    /* A label of 64 characters, a name over 253, too many hosts, too many slots in all. */
    char buf[20000];
    memset(buf, 'a', 64);
    strcpy(buf + 64, ":1");
    ob_host_list l;
    ob_err err;
    assert_int_equal(ob_host_list_parse(&l, buf, &err), OB_ERR_INVALID_ARG);
    size_t k = 0;
    for (int i = 0; i < 5; i++) {
        memset(buf + k, 'b', 60);
        k += 60;
        buf[k++] = '.';
    }
    strcpy(buf + k - 1, ":1");
    assert_int_equal(ob_host_list_parse(&l, buf, &err), OB_ERR_INVALID_ARG);
    k = 0;
    for (int i = 0; i <= OB_HOSTS_MAX; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%sh%d:1", i ? "," : "", i);
    assert_int_equal(ob_host_list_parse(&l, buf, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "at most"));
}

/* --mpi-net: CIDRs and interface names pass; anything a shell or Open MPI would read otherwise
 * is refused with the entry named. */
static void test_mpi_net(void **state)
{
    (void)state;
    const char *good[] = {"10.0.0.0/24", "eth0",           "10.231.88.0/24,ib0",
                          "0.0.0.0/0",   "192.168.1.7/32", "enp3s0f1.100",
                          "br_ob-1",     "abcdefghijklmno"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ob_err err;
        ob_err_clear(&err);
        assert_int_equal(ob_hosts_net_check(good[i], &err), OB_OK);
    }
    const char *bad[] = {"",
                         ",",
                         "eth0,",
                         ",eth0",
                         "eth0,,eth1",
                         "10.0.0.0/33",
                         "10.0.0.0/",
                         "10.0.0.0/024",
                         "10.0.0/24",
                         "256.0.0.0/8",
                         "10.0.0.0/2x",
                         "/24",
                         "-eth0",
                         "eth0 eth1",
                         "eth0;reboot",
                         "$(reboot)",
                         "eth0\n",
                         "abcdefghijklmnop", /* 16 characters: longer than IFNAMSIZ allows */
                         "fe80::/64"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ob_err err;
        ob_err_clear(&err);
        assert_int_equal(ob_hosts_net_check(bad[i], &err), OB_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "--mpi-net"));
    }
    char longer[300];
    memset(longer, 'e', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    for (size_t i = 3; i < sizeof longer - 1; i += 4)
        longer[i] = ',';
    ob_err err;
    assert_int_equal(ob_hosts_net_check(longer, &err), OB_ERR_INVALID_ARG);
}

static void test_log_tags(void **state)
{
    (void)state;
    long rank;
    ob_log_stream s;
    const char *l = "[1,3]<stdout>:{\"event\":\"step\"}";
    assert_int_equal(ob_log_tag(l, strlen(l), &rank, &s), 14);
    assert_int_equal(rank, 3);
    assert_int_equal(s, OB_LOG_STDOUT);
    l = "[12,0]<stderr>:onebit-worker: boom";
    assert_int_equal(ob_log_tag(l, strlen(l), &rank, &s), 15);
    assert_int_equal(s, OB_LOG_STDERR);
    l = "[1,123456789]<stdout>:x";
    assert_int_equal(ob_log_tag(l, strlen(l), &rank, &s), 22);
    assert_int_equal(rank, 123456789);
    l = " 7: text";
    assert_int_equal(ob_log_tag(l, strlen(l), &rank, &s), 4);
    assert_int_equal(rank, 7);
    assert_int_equal(s, OB_LOG_ANY);
    const char *untagged[] = {"== onebitd: attempt 1", "[1,3]<stdin>:x", "[1]<stdout>:x",
                              "[a,1]<stdout>:x", "7:x", "7 : x", ": x", "12345678: x",
                              "srun: error: task 1: Killed", "", "[1,3]<stdout>",
                              /* a rank too long to be one (it overflowed a long) */
                              "[,2222220222022222220222]<stdout>:x", "[1,1234567890]<stdout>:x"};
    for (size_t i = 0; i < sizeof untagged / sizeof untagged[0]; i++) {
        assert_int_equal(ob_log_tag(untagged[i], strlen(untagged[i]), &rank, &s), 0);
        assert_int_equal(rank, -1);
        assert_int_equal(s, OB_LOG_UNTAGGED);
    }
    /* Progress lines parse behind either tag, never from stderr. */
    ob_report r;
    l = "0: {\"event\":\"step\",\"step\":20,\"loss\":1.0}";
    assert_int_equal(ob_report_parse_line(l, strlen(l), &r), 1);
    assert_int_equal(r.progress.step, 20);
    l = "[1,0]<stderr>:{\"event\":\"step\",\"step\":20,\"loss\":1.0}";
    assert_int_equal(ob_report_parse_line(l, strlen(l), &r), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sbatch),     cmocka_unit_test(test_squeue),
        cmocka_unit_test(test_sacct),      cmocka_unit_test(test_slurm_exit),
        cmocka_unit_test(test_hosts_good), cmocka_unit_test(test_hosts_hostile),
        cmocka_unit_test(test_mpi_net),    cmocka_unit_test(test_log_tags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
