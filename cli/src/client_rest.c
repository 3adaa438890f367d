/* obctl_client over REST: libcurl requests, proto3 JSON answers decoded with job_codec, and the
 * server-sent event stream of GET /v1/jobs/{id}/events for watch. */
#include "client_internal.h"
#include "onebit/job_codec.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_ANSWER (64u << 20)

typedef struct buffer {
    char *data;
    size_t len, cap;
    int too_large;
} buffer;

static size_t collect(char *p, size_t size, size_t nmemb, void *user)
{
    buffer *b = user;
    size_t n = size * nmemb;
    if (b->len + n + 1 > MAX_ANSWER) {
        b->too_large = 1;
        return 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return 0;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

static ob_status from_http(long http, const buffer *body, ob_err *err)
{
    ob_status st;
    switch (http) {
    case 400:
        st = OB_ERR_INVALID_ARG;
        break;
    case 401:
        st = OB_ERR_UNAUTHENTICATED;
        break;
    case 404:
        st = OB_ERR_NOT_FOUND;
        break;
    case 409:
        st = OB_ERR_STATE;
        break;
    case 413:
        st = OB_ERR_TOO_LARGE;
        break;
    case 501:
        st = OB_ERR_UNSUPPORTED;
        break;
    case 503:
        st = OB_ERR_COMM;
        break;
    default:
        st = OB_ERR_IO;
        break;
    }
    /* {"error": {"code", "status", "message"}} */
    json_t *o = body->data ? json_loads(body->data, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    if (err) {
        err->code = st;
        snprintf(err->msg, sizeof err->msg, "%s", msg ? msg : "the server answered HTTP error");
        if (!msg) snprintf(err->msg, sizeof err->msg, "the server answered HTTP %ld", http);
    }
    json_decref(o);
    return st;
}

typedef struct request {
    const char *method; /* "GET", "POST" or "DELETE" */
    const char *path;   /* after the base URL */
    const char *body;   /* POST body or NULL */
    /* streaming: called with each chunk instead of collecting */
    size_t (*on_data)(char *p, size_t size, size_t nmemb, void *user);
    void *user;
    CURL **handle; /* streaming: set to the transfer's handle, for its status (or NULL) */
} request;

/* Performs a request; on success *out holds the parsed JSON answer (unless streaming). */
static ob_status perform(obctl_client *c, const request *rq, json_t **out, ob_err *err)
{
    if (out) *out = NULL;
    CURL *h = curl_easy_init();
    if (!h) return OB_ERR(err, OB_ERR_NOMEM, "curl_easy_init");
    char url[2048], auth[600];
    snprintf(url, sizeof url, "%s%s", c->target, rq->path);
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (c->token[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->token);
        hdr = curl_slist_append(hdr, auth);
    }
    buffer b = {0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    if (c->tls) {
        /* The URL is https (checked at create; redirects are not followed). */
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
        if (c->ca_file[0]) curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
        if (c->cert_file[0]) curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
        if (c->key_file[0]) curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
    }
    if (!rq->on_data) /* and a large body (a submit's upload) as long as 128 KiB/s needs */
        curl_easy_setopt(h, CURLOPT_TIMEOUT,
                         60L + (long)((rq->body ? strlen(rq->body) : 0) / 131072));
    if (!strcmp(rq->method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
    } else if (strcmp(rq->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
    }
    /* The body is collected for errors even on a stream: the callback sees the status first. */
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, rq->on_data ? rq->on_data : collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, rq->on_data ? rq->user : (void *)&b);
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    if (rq->handle) *rq->handle = h;
    CURLcode rc = curl_easy_perform(h);
    if (rq->handle) *rq->handle = NULL;
    long http = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);

    ob_status st = OB_OK;
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
        rc == CURLE_OPERATION_TIMEDOUT) {
        st = obctl__unreachable(err, c, cerr[0] ? cerr : curl_easy_strerror(rc));
    } else if (http == 0 &&
               (rc == CURLE_GOT_NOTHING || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
                rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION ||
                rc == CURLE_SSL_CACERT_BADFILE || rc == CURLE_SSL_CERTPROBLEM)) {
        /* Plaintext against TLS (nothing comes back), TLS against plaintext, a certificate
         * that does not verify. */
        st = obctl__transport_failed(err, c, cerr[0] ? cerr : curl_easy_strerror(rc));
    } else if (rc == CURLE_WRITE_ERROR && rq->on_data && http == 200) {
        st = OB_OK; /* the stream callback asked to stop */
    } else if (rc != CURLE_OK && http == 0) {
        st = OB_ERR(err, OB_ERR_COMM, "%s %s: %s", rq->method, url,
                    cerr[0] ? cerr : curl_easy_strerror(rc));
    } else if (http != 200) {
        st = from_http(http, &b, err);
    } else if (b.too_large) {
        st = OB_ERR(err, OB_ERR_TOO_LARGE, "%s: the answer is larger than %u bytes", url,
                    MAX_ANSWER);
    } else if (out) {
        json_error_t je;
        *out = json_loads(b.data ? b.data : "", 0, &je);
        if (!*out)
            st = OB_ERR(err, OB_ERR_CORRUPT, "%s: the answer is not JSON (%s)", url, je.text);
    }
    free(b.data);
    return st;
}

static ob_status job_request(obctl_client *c, const char *method, const char *path,
                             const char *body, ob_job *out, ob_err *err)
{
    json_t *o;
    request rq = {method, path, body, NULL, NULL, NULL};
    ob_status st = perform(c, &rq, &o, err);
    if (st != OB_OK) return st;
    st = ob_job_from_json(o, out, err);
    json_decref(o);
    return st;
}

/* An id as a path segment: our ids are [A-Za-z0-9._-]; anything else is escaped. */
static ob_status id_path(char *out, size_t cap, const char *id, const char *suffix, ob_err *err)
{
    char *esc = curl_easy_escape(NULL, id, 0);
    if (!esc) return OB_ERR(err, OB_ERR_NOMEM, "job id");
    int n = snprintf(out, cap, "/v1/jobs/%s%s", esc, suffix);
    curl_free(esc);
    if (n < 0 || (size_t)n >= cap) return OB_ERR(err, OB_ERR_INVALID_ARG, "job id too long");
    return OB_OK;
}

static ob_status r_submit(obctl_client *c, const char *spec, size_t len, int world_size,
                          int max_restarts, const char *request_id, const char *labels,
                          const char *deadline, const obctl_file *files, size_t n_files,
                          ob_job *out, ob_err *err)
{
    json_t *o = json_object();
    if (n_files) { /* proto3 JSON of ProgramFile: bytes as base64 */
        json_t *list = json_array();
        for (size_t i = 0; list && i < n_files; i++) {
            char *b64 = ob_base64_encode(files[i].data, files[i].len);
            json_t *f = b64 ? json_pack("{s:s, s:I, s:s}", "path", files[i].path, "mode",
                                        (json_int_t)files[i].mode, "data", b64)
                            : NULL;
            free(b64);
            if (!f || json_array_append_new(list, f) != 0) {
                json_decref(list);
                list = NULL;
            }
        }
        if (!list) {
            json_decref(o);
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "encoding the upload: out of memory, or a path that is not UTF-8");
        }
        json_object_set_new(o, "files", list);
    }
    json_object_set_new(o, "spec", json_stringn(spec, len));
    json_object_set_new(o, "worldSize", json_integer(world_size));
    json_object_set_new(o, "maxRestarts", json_integer(max_restarts));
    if (request_id && request_id[0]) json_object_set_new(o, "requestId", json_string(request_id));
    if (labels && labels[0]) json_object_set_new(o, "labels", json_string(labels));
    if (deadline && deadline[0]) json_object_set_new(o, "deadline", json_string(deadline));
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!body) return OB_ERR(err, OB_ERR_INVALID_ARG, "the spec is not valid UTF-8 text");
    ob_status st = job_request(c, "POST", "/v1/jobs", body, out, err);
    free(body);
    return st;
}

static ob_status r_get(obctl_client *c, const char *id, ob_job *out, ob_err *err)
{
    char path[512];
    ob_status st = id_path(path, sizeof path, id, "", err);
    return st ? st : job_request(c, "GET", path, NULL, out, err);
}

static ob_status r_cancel(obctl_client *c, const char *id, ob_job *out, ob_err *err)
{
    char path[512];
    ob_status st = id_path(path, sizeof path, id, ":cancel", err);
    return st ? st : job_request(c, "POST", path, "{}", out, err);
}

static ob_status r_version(obctl_client *c, char version[64], char api[64], ob_err *err)
{
    json_t *o = NULL;
    request rq = {"GET", "/v1/version", NULL, NULL, NULL, NULL};
    ob_status st = perform(c, &rq, &o, err);
    if (st != OB_OK) return st;
    ob_strlcpy(version, json_string_value(json_object_get(o, "version")), 64);
    ob_strlcpy(api, json_string_value(json_object_get(o, "api")), 64);
    json_decref(o);
    return OB_OK;
}

static ob_status r_delete(obctl_client *c, const char *id, int keep_checkpoints, int *deleted,
                          ob_err *err)
{
    char path[512], base[480];
    *deleted = 0;
    ob_status st = id_path(base, sizeof base, id, "", err);
    if (st) return st;
    snprintf(path, sizeof path, "%s?keepCheckpoints=%s", base, keep_checkpoints ? "true" : "false");
    json_t *o = NULL;
    request rq = {"DELETE", path, NULL, NULL, NULL, NULL};
    if ((st = perform(c, &rq, &o, err)) != OB_OK) return st;
    json_t *n = json_object_get(o, "checkpointsDeleted");
    *deleted = json_is_integer(n) ? (int)json_integer_value(n) : 0;
    json_decref(o);
    return OB_OK;
}

static ob_status r_list(obctl_client *c, ob_job_state state, const char *selector, int page_size,
                        const char *token, ob_job **jobs, size_t *n, char next[OB_PAGE_TOKEN_LEN],
                        ob_err *err)
{
    char path[1536];
    *jobs = NULL;
    *n = 0;
    next[0] = '\0';
    /* Labels hold only characters that need no escaping in a query ([A-Za-z0-9._/-], = and ,). */
    snprintf(path, sizeof path, "/v1/jobs?pageSize=%d&pageToken=%s%s%s%s%s", page_size,
             token ? token : "", state ? "&state=" : "", state ? ob_job_state_name(state) : "",
             selector && selector[0] ? "&labelSelector=" : "", selector ? selector : "");
    json_t *o;
    request rq = {"GET", path, NULL, NULL, NULL, NULL};
    ob_status st = perform(c, &rq, &o, err);
    if (st != OB_OK) return st;
    const json_t *arr = json_object_get(o, "jobs");
    size_t count = json_array_size(arr), got = 0;
    ob_job *js = count ? calloc(count, sizeof *js) : NULL;
    if (count && !js) st = OB_ERR(err, OB_ERR_NOMEM, "jobs");
    for (; st == OB_OK && got < count; got++)
        st = ob_job_from_json(json_array_get(arr, got), &js[got], err);
    if (st == OB_OK) {
        const char *t = json_string_value(json_object_get(o, "nextPageToken"));
        snprintf(next, OB_PAGE_TOKEN_LEN, "%s", t ? t : "");
        *jobs = js;
        *n = got;
    } else {
        ob_job_array_free(js, got);
    }
    json_decref(o);
    return st;
}

static ob_status r_checkpoints(obctl_client *c, const char *id, ob_checkpoint_info **out, size_t *n,
                               ob_err *err)
{
    char path[512];
    *out = NULL;
    *n = 0;
    ob_status st = id_path(path, sizeof path, id, "/checkpoints", err);
    if (st != OB_OK) return st;
    json_t *o;
    request rq = {"GET", path, NULL, NULL, NULL, NULL};
    if ((st = perform(c, &rq, &o, err)) != OB_OK) return st;
    const json_t *arr = json_object_get(o, "checkpoints");
    size_t count = json_array_size(arr);
    if (count) {
        *out = calloc(count, sizeof **out);
        if (!*out) st = OB_ERR(err, OB_ERR_NOMEM, "checkpoints");
        for (size_t i = 0; st == OB_OK && i < count; i++)
            st = ob_checkpoint_info_from_json(json_array_get(arr, i), &(*out)[i], err);
        if (st == OB_OK)
            *n = count;
        else {
            free(*out);
            *out = NULL;
        }
    }
    json_decref(o);
    return st;
}

/* Server-sent events: "data: <json>" lines, an empty line ends an event. */
typedef struct sse {
    obctl_on_event cb;
    void *user;
    buffer line;
    buffer data;
    int stop;
    int bad;
    buffer error_body; /* a non-200 answer is JSON, not events */
} sse;

static void sse_dispatch(sse *s)
{
    if (!s->data.len) return;
    json_t *o = json_loads(s->data.data, 0, NULL);
    ob_job_event ev;
    if (!o || ob_job_event_from_json(o, &ev, NULL) != OB_OK) {
        s->bad = 1;
        s->stop = 1;
    } else if (s->cb(&ev, s->user)) {
        s->stop = 1;
    }
    json_decref(o);
    s->data.len = 0;
}

static size_t on_sse(char *p, size_t size, size_t nmemb, void *user)
{
    sse *s = user;
    size_t n = size * nmemb;
    collect(p, 1, n < 4096 - s->error_body.len ? n : 0, &s->error_body); /* first bytes only */
    for (size_t i = 0; i < n && !s->stop; i++) {
        if (p[i] != '\n') {
            char ch = p[i];
            if (ch != '\r' && !collect(&ch, 1, 1, &s->line)) return 0;
            continue;
        }
        const char *l = s->line.data ? s->line.data : "";
        if (s->line.len == 0) {
            sse_dispatch(s);
        } else if (!strncmp(l, "data:", 5)) {
            const char *v = l[5] == ' ' ? l + 6 : l + 5;
            if (s->data.len) collect("\n", 1, 1, &s->data);
            collect((char *)v, 1, strlen(v), &s->data);
        }
        s->line.len = 0;
        if (s->line.data) s->line.data[0] = '\0';
    }
    return s->stop ? 0 : n;
}

static ob_status r_watch(obctl_client *c, const char *id, int64_t after_seq, obctl_on_event cb,
                         void *user, ob_err *err)
{
    char path[600], seg[512];
    ob_status st = id_path(seg, sizeof seg, id, "/events", err);
    if (st != OB_OK) return st;
    snprintf(path, sizeof path, "%s?afterSeq=%lld", seg, (long long)after_seq);
    sse s = {.cb = cb, .user = user};
    request rq = {"GET", path, NULL, on_sse, &s, NULL};
    /* perform() reads error bodies from its own buffer; a stream keeps its first bytes. */
    st = perform(c, &rq, NULL, err);
    if (st != OB_OK && st != OB_ERR_COMM && s.error_body.data) {
        /* The answer was an error document: give its message. */
        buffer b = s.error_body;
        json_t *o = json_loads(b.data, 0, NULL);
        const char *m = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
        if (m && err) snprintf(err->msg, sizeof err->msg, "%s", m);
        json_decref(o);
    }
    if (st == OB_OK && !s.stop) sse_dispatch(&s);
    if (st == OB_OK && s.bad)
        st = OB_ERR(err, OB_ERR_CORRUPT, "the event stream sent something that is not an event");
    free(s.line.data);
    free(s.data.data);
    free(s.error_body.data);
    return st;
}

/* The log stream (GET /v1/jobs/{id}/logs:stream): raw bytes on a 200, an error document
 * otherwise. */
typedef struct log_stream {
    obctl_on_log cb;
    void *user;
    CURL *h;
    int stop;
    buffer error_body;
} log_stream;

static size_t on_log_bytes(char *p, size_t size, size_t nmemb, void *user)
{
    log_stream *s = user;
    size_t n = size * nmemb;
    long http = 0;
    if (s->h) curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &http);
    if (http != 200) { /* the first 4 KiB of an error document */
        collect(p, 1, n < 4096 - s->error_body.len ? n : 0, &s->error_body);
        return n;
    }
    if (n && s->cb(p, n, s->user)) {
        s->stop = 1;
        return 0;
    }
    return n;
}

static ob_status r_stream_logs(obctl_client *c, const char *id, int tail_lines, int64_t since_ms,
                               int follow, obctl_on_log cb, void *user, ob_err *err)
{
    char seg[512], path[700];
    ob_status st = id_path(seg, sizeof seg, id, "/logs:stream", err);
    if (st != OB_OK) return st;
    snprintf(path, sizeof path, "%s?tailLines=%d&sinceUnixMs=%lld&follow=%s", seg, tail_lines,
             (long long)since_ms, follow ? "true" : "false");
    log_stream s = {.cb = cb, .user = user};
    request rq = {"GET", path, NULL, on_log_bytes, &s, &s.h};
    st = perform(c, &rq, NULL, err);
    if (st != OB_OK && st != OB_ERR_COMM && s.error_body.data) {
        json_t *o = json_loads(s.error_body.data, 0, NULL);
        const char *m = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
        if (m && err) snprintf(err->msg, sizeof err->msg, "%s", m);
        json_decref(o);
    }
    free(s.error_body.data);
    return st;
}

static ob_status r_logs(obctl_client *c, const char *id, int64_t offset, int max_bytes, char **data,
                        size_t *len, int64_t *next, int64_t *size, ob_err *err)
{
    char seg[512], path[640];
    ob_status st = id_path(seg, sizeof seg, id, "/logs", err);
    if (st != OB_OK) return st;
    snprintf(path, sizeof path, "%s?offset=%lld&maxBytes=%d", seg, (long long)offset, max_bytes);
    json_t *o;
    request rq = {"GET", path, NULL, NULL, NULL, NULL};
    if ((st = perform(c, &rq, &o, err)) != OB_OK) return st;
    const char *b64 = json_string_value(json_object_get(o, "data"));
    const char *nx = json_string_value(json_object_get(o, "nextOffset"));
    const char *sz = json_string_value(json_object_get(o, "size"));
    if (!b64 || !nx || !sz) {
        st = OB_ERR(err, OB_ERR_CORRUPT, "logs: the answer lacks data, nextOffset or size");
    } else {
        unsigned char *bytes = NULL;
        size_t n = 0;
        st = ob_base64_decode(b64, &bytes, &n, err);
        if (st == OB_OK && n == 0) free(bytes);
        if (st == OB_OK && n > 0) {
            *data = (char *)bytes;
            *len = n;
        }
        *next = strtoll(nx, NULL, 10);
        *size = strtoll(sz, NULL, 10);
    }
    json_decref(o);
    return st;
}

static void r_destroy(obctl_client *c)
{
    (void)c;
    curl_global_cleanup();
}

static const obctl_ops rest_ops = {
    .submit = r_submit,
    .get = r_get,
    .cancel = r_cancel,
    .del = r_delete,
    .version = r_version,
    .list = r_list,
    .checkpoints = r_checkpoints,
    .watch = r_watch,
    .logs = r_logs,
    .stream_logs = r_stream_logs,
    .destroy = r_destroy,
};

ob_status obctl_client_rest(obctl_client **out, const char *base_url, const char *token,
                            const obctl_tls *tls, ob_err *err)
{
    *out = NULL;
    size_t len = strlen(base_url);
    if (len == 0 || len >= 500)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "--rest: expected a URL such as http://127.0.0.1:8080");
    int https = !strncasecmp(base_url, "https://", 8);
    if (tls && !https && strstr(base_url, "://"))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "--rest %s: TLS needs an https:// URL (or HOST:PORT alone)", base_url);
    if (https && !tls)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "--rest %s: an https:// URL needs TLS settings",
                      base_url);
    if (tls && tls->server_name)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "--tls-server-name is for gRPC: over REST the URL's host is the name "
                      "checked (--rest https://NAME:PORT)");
    const char *files[3] = {tls ? tls->ca_file : NULL, tls ? tls->cert_file : NULL,
                            tls ? tls->key_file : NULL};
    static const char *const flags[3] = {"--ca", "--cert", "--key"};
    for (int i = 0; i < 3; i++) {
        /* Checked here so that a missing file is named, not reported as a TLS failure. */
        char *pem = NULL;
        if (!files[i]) continue;
        if (strlen(files[i]) >= 512)
            return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: path too long", flags[i]);
        ob_status rc = obctl__read_pem(flags[i], files[i], &pem, err);
        if (pem) memset(pem, 0, strlen(pem));
        free(pem);
        if (rc != OB_OK) return rc;
    }
    obctl_client *c = calloc(1, sizeof *c);
    if (!c) return OB_ERR(err, OB_ERR_NOMEM, "client");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        free(c);
        return OB_ERR(err, OB_ERR_IO, "curl_global_init failed");
    }
    c->ops = &rest_ops;
    c->tls = tls != NULL;
    if (tls) {
        snprintf(c->ca_file, sizeof c->ca_file, "%s", tls->ca_file ? tls->ca_file : "");
        snprintf(c->cert_file, sizeof c->cert_file, "%s", tls->cert_file ? tls->cert_file : "");
        snprintf(c->key_file, sizeof c->key_file, "%s", tls->key_file ? tls->key_file : "");
    }
    /* "host:port" alone means http://host:port (https:// with TLS); a trailing slash is
     * dropped. */
    snprintf(c->target, sizeof c->target, "%s%s",
             strstr(base_url, "://") ? ""
             : tls                   ? "https://"
                                     : "http://",
             base_url);
    size_t tl = strlen(c->target);
    if (tl && c->target[tl - 1] == '/') c->target[tl - 1] = '\0';
    snprintf(c->token, sizeof c->token, "%s", token ? token : "");
    *out = c;
    return OB_OK;
}
