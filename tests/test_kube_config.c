/* The Kubernetes launcher's inputs that need no API server: DNS-1123 names of attempts, the
 * kubeconfig subset (tokens, token files, CA files and CA data, relative paths, namespaces),
 * what is refused with a message naming the field, hostile kubeconfigs, and in-cluster
 * credentials from a service-account directory. */
#include "onebit/kubernetes.h"

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

static char dir[256];

static void write_file(const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static ob_status load(const char *text, ob_kube_conn *c, ob_err *err)
{
    write_file("kubeconfig", text);
    char p[512];
    snprintf(p, sizeof p, "%s/kubeconfig", dir);
    ob_err_clear(err);
    return ob_kube_conn_load(c, p, NULL, err);
}

#define HEAD                                                                                       \
    "apiVersion: v1\nkind: Config\ncurrent-context: dev\n"                                         \
    "contexts:\n- name: other\n  context: {cluster: x, user: y}\n"                                 \
    "- name: dev\n  context: {cluster: c1, user: u1, namespace: ml}\n"

static void test_names(void **state)
{
    (void)state;
    assert_true(ob_k8s_dns_label("onebit-job-000001-1"));
    assert_true(ob_k8s_dns_label("a"));
    const char *bad[] = {
        "",    "-a",       "a-",
        "A",   "a_b",      "a.b",
        "a b", "\xc3\xa9", "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(ob_k8s_dns_label(bad[i]));
    char name[64];
    ob_err err;
    assert_int_equal(ob_k8s_attempt_name("job-000042", 3, name, sizeof name, &err), OB_OK);
    assert_string_equal(name, "onebit-job-000042-3");
    const char *bad_ids[] = {"Job-1",
                             "job_1",
                             "job.1",
                             "job/1",
                             "job\n1",
                             "",
                             "a-very-long-job-identifier-that-is-too-long"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        ob_err_clear(&err);
        assert_int_equal(ob_k8s_attempt_name(bad_ids[i], 1, name, sizeof name, &err),
                         OB_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "DNS-1123"));
    }
    assert_int_equal(ob_k8s_attempt_name("job-1", 0, name, sizeof name, &err), OB_ERR_INVALID_ARG);
    assert_int_equal(ob_k8s_attempt_name("job-1", 1, name, 8, &err), OB_ERR_INVALID_ARG);
}

static void test_kubeconfig_token_and_ca_data(void **state)
{
    (void)state;
    ob_kube_conn c;
    ob_err err;
    /* "-----BEGIN X-----\n" in base64 */
    assert_int_equal(load(HEAD "clusters:\n- name: c1\n  cluster:\n"
                               "    server: https://10.0.0.1:6443/\n"
                               "    certificate-authority-data: LS0tLS1CRUdJTiBYLS0tLS0K\n"
                               "users:\n- name: u1\n  user: {token: abc.def-123}\n",
                          &c, &err),
                     OB_OK);
    assert_string_equal(c.server, "https://10.0.0.1:6443");
    assert_string_equal(c.token, "abc.def-123");
    assert_string_equal(c.namespace_, "ml");
    assert_int_equal(c.ca_pem_len, 18);
    assert_memory_equal(c.ca_pem, "-----BEGIN X-----\n", 18);
    assert_string_equal(c.ca_file, "");
    ob_kube_conn_clear(&c);
    assert_null(c.ca_pem);
}

static void test_kubeconfig_files(void **state)
{
    (void)state;
    ob_kube_conn c;
    ob_err err;
    write_file("tok", "  file-token\n");
    assert_int_equal(load(HEAD "clusters:\n- name: c1\n  cluster:\n"
                               "    server: https://api.example:443\n"
                               "    certificate-authority: ca.crt\n"
                               "users:\n- name: u1\n  user: {tokenFile: tok}\n",
                          &c, &err),
                     OB_OK);
    char want[512];
    snprintf(want, sizeof want, "%s/ca.crt", dir);
    assert_string_equal(c.ca_file, want);
    assert_string_equal(c.token, "file-token");
    snprintf(want, sizeof want, "%s/tok", dir);
    assert_string_equal(c.token_file, want);
    ob_kube_conn_clear(&c);
}

static void test_kubeconfig_refused(void **state)
{
    (void)state;
    ob_kube_conn c;
    ob_err err;
    const char *cl = "clusters:\n- name: c1\n  cluster: {server: 'https://a:1'}\n";
    struct {
        const char *users;
        const char *field;
    } unsupported[] = {
        {"users:\n- name: u1\n  user: {client-certificate-data: eA==, client-key-data: eA==}\n",
         "client-"},
        {"users:\n- name: u1\n  user:\n    exec: {command: aws}\n", "exec"},
        {"users:\n- name: u1\n  user:\n    auth-provider: {name: gcp}\n", "auth-provider"},
        {"users:\n- name: u1\n  user: {username: a, password: b}\n", "username"},
    };
    char text[1024];
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        snprintf(text, sizeof text, HEAD "%s%s", cl, unsupported[i].users);
        assert_int_equal(load(text, &c, &err), OB_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, unsupported[i].field));
        assert_non_null(strstr(err.msg, "not supported"));
    }
    assert_int_equal(load(HEAD "clusters:\n- name: c1\n  cluster: {server: 'https://a:1', "
                               "insecure-skip-tls-verify: true}\n",
                          &c, &err),
                     OB_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "insecure-skip-tls-verify"));
    const char *invalid[] = {
        HEAD "clusters:\n- name: c1\n  cluster: {server: 'http://a:1'}\n",  /* not https */
        HEAD "clusters:\n- name: c2\n  cluster: {server: 'https://a:1'}\n", /* no such cluster */
        "current-context: nope\ncontexts: []\n",
        "current-context: [1, 2]\n",
        "- a list\n",
        "{unclosed: [\n",
        HEAD "clusters:\n- name: c1\n  cluster: {server: 'https://a:1 b'}\n",
        HEAD "clusters:\n- name: c1\n  cluster: {server: 'https://a:1', "
             "certificate-authority-data: '!!!'}\n",
        HEAD "clusters:\n- name: c1\n  cluster: {server: 'https://a:1'}\nusers:\n- name: u1\n"
             "  user: {token: 'two words'}\n",
        HEAD "clusters: {c1: {server: 'https://a:1'}}\n",
    };
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        ob_status rc = load(invalid[i], &c, &err);
        assert_true(rc != OB_OK);
        assert_true(err.msg[0] != '\0');
        assert_string_equal(c.server, ""); /* nothing half-loaded */
    }
    /* A file that is not there, and one too large. */
    ob_err_clear(&err);
    assert_int_equal(ob_kube_conn_load(&c, "/nonexistent/kubeconfig", NULL, &err), OB_ERR_IO);
    char *big = malloc((2u << 20) + 1);
    assert_non_null(big);
    memset(big, '#', 2u << 20);
    big[2u << 20] = '\0';
    assert_int_equal(load(big, &c, &err), OB_ERR_TOO_LARGE);
    free(big);
}

static void test_in_cluster(void **state)
{
    (void)state;
    ob_kube_conn c;
    ob_err err;
    write_file("token", "sa-token\n");
    write_file("namespace", "training\n");
    write_file("ca.crt", "x");
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    ob_err_clear(&err);
    assert_int_equal(ob_kube_conn_load(&c, NULL, dir, &err), OB_OK);
    assert_string_equal(c.server, "https://10.96.0.1:443");
    assert_string_equal(c.token, "sa-token");
    assert_string_equal(c.namespace_, "training");
    ob_kube_conn_clear(&c);
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    assert_int_equal(ob_kube_conn_load(&c, "", dir, &err), OB_OK);
    assert_string_equal(c.server, "https://[fd00::1]:443");
    ob_kube_conn_clear(&c);
    setenv("KUBERNETES_SERVICE_PORT", "443/evil", 1);
    assert_int_equal(ob_kube_conn_load(&c, NULL, dir, &err), OB_ERR_INVALID_ARG);
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(ob_kube_conn_load(&c, NULL, dir, &err), OB_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "--kubeconfig"));
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_kube_config.XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_kubeconfig_token_and_ca_data),
        cmocka_unit_test(test_kubeconfig_files),
        cmocka_unit_test(test_kubeconfig_refused),
        cmocka_unit_test(test_in_cluster),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    const char *names[] = {"kubeconfig", "tok", "token", "namespace", "ca.crt"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return rc;
}
