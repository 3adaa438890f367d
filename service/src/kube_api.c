/* The Kubernetes API client (kube_api.h) and loading a connection (onebit/kubernetes.h): the
 * in-cluster service account, or the minimal subset of a kubeconfig. Every file read is bounded;
 * the kubeconfig is YAML, read with libyaml into a jansson tree and then type-checked. */
#include "kube_api.h"
#include "onebit/base.h"

#include <jansson.h>
#include <yaml.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_FILE (1u << 20) /* kubeconfig, token, CA */

/* Reads a whole small file into a NUL-terminated buffer (owned by the caller). */
static ob_status read_small(const char *path, char **out, size_t *len, ob_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return OB_ERR(err, OB_ERR_IO, "opening %s: %s", path, strerror(errno));
    char *buf = malloc(MAX_FILE + 1);
    if (!buf) {
        fclose(f);
        return OB_ERR(err, OB_ERR_NOMEM, "reading %s", path);
    }
    size_t n = fread(buf, 1, MAX_FILE + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > MAX_FILE) {
        free(buf);
        return bad ? OB_ERR(err, OB_ERR_IO, "reading %s", path)
                   : OB_ERR(err, OB_ERR_TOO_LARGE, "%s: larger than %u bytes", path, MAX_FILE);
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return OB_OK;
}

/* The token of a file, without surrounding white space, into out[cap]. */
static ob_status read_token(const char *path, char *out, size_t cap, ob_err *err)
{
    char *t;
    size_t n;
    ob_status rc = read_small(path, &t, &n, err);
    if (rc) return rc;
    size_t b = strspn(t, " \t\r\n");
    while (n > b && strchr(" \t\r\n", t[n - 1]))
        n--;
    size_t len = n - b;
    int ok = len > 0 && len < cap;
    for (size_t i = b; ok && i < n; i++)
        ok = (unsigned char)t[i] > 0x20 && (unsigned char)t[i] < 0x7f;
    if (ok) {
        memcpy(out, t + b, len);
        out[len] = '\0';
    }
    free(t);
    return ok ? OB_OK : OB_ERR(err, OB_ERR_CORRUPT, "%s: not a bearer token", path);
}

/* ---- YAML to a jansson tree (scalars become strings) ------------------------------------ */

static json_t *yaml_node_json(yaml_document_t *doc, yaml_node_t *n, int depth)
{
    if (!n || depth > 32) return NULL;
    if (n->type == YAML_SCALAR_NODE)
        return json_stringn((const char *)n->data.scalar.value, n->data.scalar.length);
    if (n->type == YAML_SEQUENCE_NODE) {
        json_t *a = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             a && it < n->data.sequence.items.top; it++) {
            json_t *v = yaml_node_json(doc, yaml_document_get_node(doc, *it), depth + 1);
            if (!v || json_array_append_new(a, v)) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    if (n->type == YAML_MAPPING_NODE) {
        json_t *o = json_object();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; o && p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE) continue;
            json_t *v = yaml_node_json(doc, yaml_document_get_node(doc, p->value), depth + 1);
            if (!v || json_object_set_new(o, (const char *)k->data.scalar.value, v)) {
                json_decref(o);
                return NULL;
            }
        }
        return o;
    }
    return NULL;
}

static ob_status yaml_to_json(const char *text, size_t len, const char *what, json_t **out,
                              ob_err *err)
{
    yaml_parser_t p;
    yaml_document_t doc;
    *out = NULL;
    if (!yaml_parser_initialize(&p)) return OB_ERR(err, OB_ERR_NOMEM, "a YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &doc)) {
        ob_status rc = OB_ERR(err, OB_ERR_CORRUPT, "%s: not YAML: %s at line %zu", what,
                              p.problem ? p.problem : "?", p.problem_mark.line + 1);
        yaml_parser_delete(&p);
        return rc;
    }
    *out = yaml_node_json(&doc, yaml_document_get_root_node(&doc), 0);
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return OB_ERR(err, OB_ERR_CORRUPT, "%s: not a mapping", what);
    }
    return OB_OK;
}

/* ---- kubeconfig ------------------------------------------------------------------------- */

/* The entry named name in the list key of root ("clusters": [{name, cluster: {...}}]): its
 * inner object (field inner), or NULL. */
static json_t *named(json_t *root, const char *key, const char *inner, const char *name)
{
    json_t *list = json_object_get(root, key);
    size_t i;
    json_t *e;
    if (!json_is_array(list)) return NULL;
    json_array_foreach(list, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        json_t *v = json_object_get(e, inner);
        if (n && !strcmp(n, name) && json_is_object(v)) return v;
    }
    return NULL;
}

static const char *str_of(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* Relative paths in a kubeconfig are relative to its directory. */
static void resolve(const char *kubeconfig, const char *p, char *out, size_t cap)
{
    const char *slash = strrchr(kubeconfig, '/');
    if (p[0] == '/' || !slash)
        snprintf(out, cap, "%s", p);
    else
        snprintf(out, cap, "%.*s/%s", (int)(slash - kubeconfig), kubeconfig, p);
}

static ob_status b64_decode(const char *in, char **out, size_t *out_len)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in);
    char *o = malloc(n / 4 * 3 + 4);
    if (!o) return OB_ERR_NOMEM;
    uint32_t acc = 0;
    int bits = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = in[i];
        if (ch == '=' || ch == '\n' || ch == '\r' || ch == ' ') continue;
        const char *pos = strchr(tbl, ch);
        if (!pos || !ch) {
            free(o);
            return OB_ERR_CORRUPT;
        }
        acc = (acc << 6) | (uint32_t)(pos - tbl);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (char)((acc >> bits) & 0xff);
        }
    }
    o[k] = '\0';
    *out = o;
    *out_len = k;
    return OB_OK;
}

static ob_status load_kubeconfig(ob_kube_conn *c, const char *path, ob_err *err)
{
    char *text;
    size_t len;
    ob_status rc = read_small(path, &text, &len, err);
    if (rc) return OB_WRAP(err, rc, "kubeconfig");
    json_t *root;
    rc = yaml_to_json(text, len, path, &root, err);
    free(text);
    if (rc) return rc;
    const char *ctx_name = str_of(root, "current-context");
    json_t *ctx = ctx_name ? named(root, "contexts", "context", ctx_name) : NULL;
    if (!ctx) {
        rc =
            OB_ERR(err, OB_ERR_INVALID_ARG, "%s: no current-context, or it names no context", path);
        goto done;
    }
    const char *cl_name = str_of(ctx, "cluster"), *user_name = str_of(ctx, "user");
    json_t *cl = cl_name ? named(root, "clusters", "cluster", cl_name) : NULL;
    json_t *user = user_name ? named(root, "users", "user", user_name) : NULL;
    if (!cl) {
        rc = OB_ERR(err, OB_ERR_INVALID_ARG, "%s: context %.100s names no cluster", path, ctx_name);
        goto done;
    }
    const char *ns = str_of(ctx, "namespace");
    if (ns) ob_strlcpy(c->namespace_, ns, sizeof c->namespace_);
    const char *server = str_of(cl, "server");
    if (!server || strncmp(server, "https://", 8) != 0 || strlen(server) >= sizeof c->server ||
        strpbrk(server, " \t\r\n")) {
        rc = OB_ERR(err, OB_ERR_INVALID_ARG, "%s: cluster %.100s: server must be an https:// URL",
                    path, cl_name);
        goto done;
    }
    ob_strlcpy(c->server, server, sizeof c->server);
    size_t sl = strlen(c->server);
    while (sl > 8 && c->server[sl - 1] == '/')
        c->server[--sl] = '\0';
    const char *unsupported_cl[] = {"insecure-skip-tls-verify", "proxy-url", "tls-server-name"};
    for (size_t i = 0; i < 3; i++)
        if (json_object_get(cl, unsupported_cl[i]) &&
            strcmp(str_of(cl, unsupported_cl[i]) ? str_of(cl, unsupported_cl[i]) : "", "false")) {
            rc = OB_ERR(err, OB_ERR_UNSUPPORTED, "%s: cluster %.100s: %s is not supported", path,
                        cl_name, unsupported_cl[i]);
            goto done;
        }
    const char *ca = str_of(cl, "certificate-authority");
    const char *ca_data = str_of(cl, "certificate-authority-data");
    if (ca_data) {
        if (b64_decode(ca_data, &c->ca_pem, &c->ca_pem_len) != OB_OK) {
            rc = OB_ERR(err, OB_ERR_CORRUPT,
                        "%s: cluster %.100s: certificate-authority-data is not base64", path,
                        cl_name);
            goto done;
        }
    } else if (ca) {
        resolve(path, ca, c->ca_file, sizeof c->ca_file);
    }
    if (user) {
        const char *unsupported[] = {"client-certificate",
                                     "client-certificate-data",
                                     "client-key",
                                     "client-key-data",
                                     "exec",
                                     "auth-provider",
                                     "username",
                                     "password"};
        for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
            if (json_object_get(user, unsupported[i])) {
                rc = OB_ERR(err, OB_ERR_UNSUPPORTED,
                            "%s: user %.100s: %s is not supported; give the user a bearer token "
                            "(token or tokenFile)",
                            path, user_name, unsupported[i]);
                goto done;
            }
        const char *tok = str_of(user, "token"), *tf = str_of(user, "tokenFile");
        if (tok) {
            if (strlen(tok) >= sizeof c->token || strpbrk(tok, " \t\r\n")) {
                rc = OB_ERR(err, OB_ERR_INVALID_ARG, "%s: user %.100s: token is not a bearer token",
                            path, user_name);
                goto done;
            }
            ob_strlcpy(c->token, tok, sizeof c->token);
        } else if (tf) {
            resolve(path, tf, c->token_file, sizeof c->token_file);
            if ((rc = read_token(c->token_file, c->token, sizeof c->token, err))) goto done;
        }
    }
done:
    json_decref(root);
    return rc;
}

static ob_status load_in_cluster(ob_kube_conn *c, const char *sa_dir, ob_err *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !host[0] || !port || !port[0])
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) and no kubeconfig "
                      "given (--kubeconfig)");
    if (strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 || strpbrk(host, "/@ \t"))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "KUBERNETES_SERVICE_HOST/PORT: not a host and port");
    if (strchr(host, ':'))
        snprintf(c->server, sizeof c->server, "https://[%s]:%s", host, port);
    else
        snprintf(c->server, sizeof c->server, "https://%s:%s", host, port);
    const char *d = sa_dir ? sa_dir : DEFAULT_SA_DIR;
    snprintf(c->token_file, sizeof c->token_file, "%s/token", d);
    snprintf(c->ca_file, sizeof c->ca_file, "%s/ca.crt", d);
    ob_status rc = read_token(c->token_file, c->token, sizeof c->token, err);
    if (rc) return OB_WRAP(err, rc, "the service account's token");
    char path[1100], *ns = NULL;
    snprintf(path, sizeof path, "%s/namespace", d);
    if (read_small(path, &ns, NULL, NULL) == OB_OK) {
        ns[strcspn(ns, " \r\n")] = '\0';
        if (ob_k8s_dns_label(ns)) ob_strlcpy(c->namespace_, ns, sizeof c->namespace_);
        free(ns);
    }
    return OB_OK;
}

ob_status ob_kube_conn_load(ob_kube_conn *c, const char *kubeconfig, const char *sa_dir,
                            ob_err *err)
{
    memset(c, 0, sizeof *c);
    ob_status rc = kubeconfig && kubeconfig[0] ? load_kubeconfig(c, kubeconfig, err)
                                               : load_in_cluster(c, sa_dir, err);
    if (rc) ob_kube_conn_clear(c);
    return rc;
}

void ob_kube_conn_clear(ob_kube_conn *c)
{
    if (!c) return;
    free(c->ca_pem);
    memset(c, 0, sizeof *c);
}

int ob_k8s_dns_label(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > 63 || s[0] == '-' || s[n - 1] == '-') return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

ob_status ob_k8s_attempt_name(const char *job_id, int attempt, char *out, size_t cap, ob_err *err)
{
    char name[128];
    int n = snprintf(name, sizeof name, "onebit-%s-%d", job_id ? job_id : "", attempt);
    if (attempt < 1 || n < 0 || (size_t)n > OB_K8S_NAME_MAX || !ob_k8s_dns_label(name) ||
        !ob_k8s_dns_label(job_id))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "job %.80s attempt %d: 'onebit-<job id>-<attempt>' is not a DNS-1123 label "
                      "of at most %d characters (lower-case letters, digits and '-')",
                      job_id ? job_id : "", attempt, OB_K8S_NAME_MAX);
    if ((size_t)n >= cap) return OB_ERR(err, OB_ERR_INVALID_ARG, "name buffer too small");
    memcpy(out, name, (size_t)n + 1);
    return OB_OK;
}

/* ---- requests ------------------------------------------------------------------------- */

typedef struct body_buf {
    char *data;
    size_t len, cap;
    int too_large;
} body_buf;

static size_t collect(char *p, size_t size, size_t n, void *user)
{
    body_buf *b = user;
    size_t add = size * n;
    if (b->len + add > OB__KUBE_MAX_BODY) {
        b->too_large = 1;
        return 0; /* aborts the transfer */
    }
    if (b->len + add + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 16384;
        while (nc < b->len + add + 1)
            nc *= 2;
        char *d = realloc(b->data, nc);
        if (!d) return 0;
        b->data = d;
        b->cap = nc;
    }
    memcpy(b->data + b->len, p, add);
    b->len += add;
    b->data[b->len] = '\0';
    return add;
}

/* The token to send now: re-read from its file when there is one (projected tokens rotate). */
static ob_status current_token(const ob_kube_conn *c, char *out, size_t cap, ob_err *err)
{
    if (c->token_file[0]) {
        ob_status rc = read_token(c->token_file, out, cap, err);
        if (rc == OB_OK || !c->token[0]) return rc;
    }
    ob_strlcpy(out, c->token, cap);
    return OB_OK;
}

static CURL *easy_for(const ob_kube_conn *c, const char *path, struct curl_slist **headers,
                      ob_err *err)
{
    *headers = NULL;
    char url[4096];
    if ((size_t)snprintf(url, sizeof url, "%s%s", c->server, path) >= sizeof url) {
        OB_ERR(err, OB_ERR_INVALID_ARG, "URL too long: %.100s", path);
        return NULL;
    }
    char token[8192];
    if (current_token(c, token, sizeof token, err) != OB_OK) return NULL;
    CURL *h = curl_easy_init();
    if (!h) {
        OB_ERR(err, OB_ERR_NOMEM, "a curl handle");
        return NULL;
    }
    char auth[8300];
    struct curl_slist *hl = curl_slist_append(NULL, "Accept: application/json");
    if (hl && token[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        struct curl_slist *t = curl_slist_append(hl, auth);
        if (!t) {
            curl_slist_free_all(hl);
            hl = NULL;
        } else {
            hl = t;
        }
        memset(auth, 0, sizeof auth);
    }
    memset(token, 0, sizeof token);
    if (!hl) {
        curl_easy_cleanup(h);
        OB_ERR(err, OB_ERR_NOMEM, "request headers");
        return NULL;
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (c->ca_pem) {
        struct curl_blob blob = {.data = c->ca_pem, .len = c->ca_pem_len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    } else if (c->ca_file[0]) {
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    }
    *headers = hl;
    return h;
}

CURL *ob__kube_stream(const ob_kube_conn *c, const char *path, struct curl_slist **headers,
                      ob_err *err)
{
    return easy_for(c, path, headers, err);
}

ob_status ob__kube_request(const ob_kube_conn *c, const char *method, const char *path,
                           const char *body, int timeout_ms, long *status, char **out, ob_err *err)
{
    *out = NULL;
    *status = 0;
    struct curl_slist *hl;
    CURL *h = easy_for(c, path, &hl, err);
    if (!h) return err ? err->code : OB_ERR_COMM;
    if (body) {
        struct curl_slist *t = curl_slist_append(hl, "Content-Type: application/json");
        if (t) hl = t;
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    }
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_ms > 0 ? timeout_ms : 10000));
    body_buf b = {0};
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    if (b.too_large) {
        free(b.data);
        return OB_ERR(err, OB_ERR_TOO_LARGE, "%s %s: answer larger than %u bytes", method, path,
                      OB__KUBE_MAX_BODY);
    }
    if (cc != CURLE_OK) {
        free(b.data);
        return OB_ERR(err, OB_ERR_COMM, "%s %s%.200s: %s", method, c->server, path,
                      errbuf[0] ? errbuf : curl_easy_strerror(cc));
    }
    *out = b.data;
    return OB_OK;
}

void ob__kube_status_message(const char *body, char *out, size_t cap)
{
    if (!cap) return;
    out[0] = '\0';
    if (!body) return;
    json_t *j = json_loads(body, JSON_REJECT_DUPLICATES, NULL);
    const char *m = json_string_value(json_object_get(j, "message"));
    const char *src = m ? m : body;
    size_t k = 0;
    for (; *src && *src != '\n' && k + 1 < cap; src++)
        out[k++] = (unsigned char)*src < 0x20 || *src == 0x7f ? ' ' : *src;
    out[k] = '\0';
    json_decref(j);
}

int ob__kube_query_escape(const char *s, char *out, size_t cap)
{
    size_t k = strlen(out);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        int plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || strchr("-._~", ch);
        size_t need = plain ? 1 : 3;
        if (k + need + 1 > cap) return 0;
        if (plain)
            out[k++] = (char)ch;
        else
            k += (size_t)snprintf(out + k, cap - k, "%%%02X", ch);
    }
    out[k] = '\0';
    return 1;
}
