/* The REST server's exchanges: reading a request (query arguments, headers, the Accept header,
 * integer parameters, the query checked against its route) and making its answer (text, bytes,
 * JSON, a stream, an error in the one error shape), the same for a request that came on a
 * connection and one handed to ob__rest_handle. See rest_internal.h.
 *
 * Errors: {"error": {"code": <HTTP status>, "status": "<gRPC code name>", "message": "..."}},
 * statuses from the one table in status_map.h. */
#include "rest_internal.h"
#include "onebit/base.h"
#include "onebit/status_map.h"
#include "ui_server.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- exchanges ----------------------------------------------------------------------------- */

const char *ob__rest_arg(const ob__rest_exchange *ex, const char *name)
{
    if (ex->conn) return MHD_lookup_connection_value(ex->conn, MHD_GET_ARGUMENT_KIND, name);
    for (size_t i = 0; i < ex->n_args; i++)
        if (!strcmp(ex->args[2 * i], name)) return ex->args[2 * i + 1];
    return NULL;
}

const char *ob__rest_header(const ob__rest_exchange *ex, const char *name)
{
    if (ex->conn) return MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND, name);
    for (size_t i = 0; i < ex->n_headers; i++)
        if (!strcasecmp(ex->headers[2 * i], name)) return ex->headers[2 * i + 1];
    return NULL;
}

typedef struct each_arg {
    int (*fn)(void *cls, const char *key, const char *value);
    void *cls;
    int ret;
} each_arg;

static enum MHD_Result each_arg_step(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    each_arg *e = cls;
    e->ret = e->fn(e->cls, key, value);
    return e->ret ? MHD_NO : MHD_YES;
}

int ob__rest_each_arg(const ob__rest_exchange *ex,
                      int (*fn)(void *cls, const char *key, const char *value), void *cls)
{
    if (ex->conn) {
        each_arg e = {fn, cls, 0};
        MHD_get_connection_values(ex->conn, MHD_GET_ARGUMENT_KIND, each_arg_step, &e);
        return e.ret;
    }
    for (size_t i = 0; i < ex->n_args; i++) {
        int r = fn(cls, ex->args[2 * i], ex->args[2 * i + 1]);
        if (r) return r;
    }
    return 0;
}

static const char oom_json[] = "{\"error\":{\"code\":503,\"status\":\"RESOURCE_EXHAUSTED\","
                               "\"message\":\"out of memory\"}}";

enum MHD_Result ob__rest_queue_answer(ob__rest_exchange *ex)
{
    struct MHD_Response *r = ex->stream;
    ex->stream = NULL;
    if (ex->drop) return MHD_NO;
    if (!r && ex->text) {
        r = MHD_create_response_from_buffer(ex->text_len, ex->text, MHD_RESPMEM_MUST_FREE);
        if (!r) free(ex->text);
        ex->text = NULL;
        if (!r) return MHD_NO;
    } else if (!r) {
        r = MHD_create_response_from_buffer(ex->fixed_len, (void *)ex->fixed,
                                            MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
    }
    if (ex->type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ex->type);
    for (size_t i = 0; i < OB__REST_EXTRA_HEADERS; i++)
        if (ex->extra[i].name) MHD_add_response_header(r, ex->extra[i].name, ex->extra[i].value);
    if (!ex->bare) ob__rest_security_headers(r);
    enum MHD_Result ret = MHD_queue_response(ex->conn, (unsigned)ex->http, r);
    MHD_destroy_response(r);
    return ret;
}

void ob__rest_exchange_clear(ob__rest_exchange *ex)
{
    free(ex->text);
    ex->text = NULL;
    if (ex->stream) MHD_destroy_response(ex->stream);
    ex->stream = NULL;
}

/* ---- answers ------------------------------------------------------------------------------- */

enum MHD_Result ob__rest_send_bytes(ob__rest_exchange *ex, int http, const char *type, char *data,
                                    size_t len)
{
    free(ex->text);
    ex->text = NULL;
    ex->text_len = 0;
    memset(ex->extra, 0, sizeof ex->extra);
    ex->http = http;
    ex->type = type;
    if (data) {
        ex->text = data;
        ex->text_len = len;
    } else if (len) { /* out of memory */
        ex->http = 503;
        ex->type = "application/json";
        ex->fixed = oom_json;
        ex->fixed_len = sizeof oom_json - 1;
    } else {
        ex->fixed = "";
        ex->fixed_len = 0;
    }
    return MHD_YES;
}

enum MHD_Result ob__rest_send_text(ob__rest_exchange *ex, int http, const char *type, char *text)
{
    return ob__rest_send_bytes(ex, http, type, text, text ? strlen(text) : 1);
}

enum MHD_Result ob__rest_send_stream(ob__rest_exchange *ex, int http, struct MHD_Response *r)
{
    ex->http = http;
    ex->stream = r;
    ex->bare = 1;
    return MHD_YES;
}

enum MHD_Result ob__rest_send_json(ob__rest_exchange *ex, int http, json_t *o)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text) {
        size_t n = strlen(text);
        char *t = realloc(text, n + 2);
        if (t) {
            t[n] = '\n';
            t[n + 1] = '\0';
            text = t;
        }
    }
    return ob__rest_send_text(ex, http, "application/json", text);
}

void ob__rest_add_header(ob__rest_exchange *ex, const char *name, const char *value)
{
    for (size_t i = 0; i < OB__REST_EXTRA_HEADERS; i++) {
        if (ex->extra[i].name) continue;
        ex->extra[i].name = name;
        ob_strlcpy(ex->extra[i].value, value, sizeof ex->extra[i].value);
        return;
    }
}

/* The length of the valid UTF-8 sequence at s (1 to 4), or 0 when there is none: overlong
 * forms, surrogates and code points past U+10FFFF are invalid, as for jansson. */
static size_t utf8_sequence(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

/* Replaces, in place, every byte of s that is not part of valid UTF-8 with '?': an error
 * message quotes what the client sent (a path, a field name), and JSON text is UTF-8 (jansson
 * refuses any other string, which would leave the error without its message). */
static void scrub_utf8(char *s)
{
    unsigned char *u = (unsigned char *)s;
    while (*u) {
        size_t n = utf8_sequence(u);
        if (n == 0) {
            *u++ = '?';
        } else {
            u += n;
        }
    }
}

enum MHD_Result ob__rest_send_error_http(ob__rest_exchange *ex, int http, const char *status,
                                         const char *msg)
{
    json_t *e = json_object();
    json_object_set_new(e, "code", json_integer(http));
    json_object_set_new(e, "status", json_string(status));
    char text[OB_ERR_MSG_LEN];
    ob_status_public_message(msg, text, sizeof text);
    scrub_utf8(text);
    json_object_set_new(e, "message", json_string(text));
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    return ob__rest_send_json(ex, http, o);
}

enum MHD_Result ob__rest_send_error(ob__rest_exchange *ex, ob_status st, const char *msg)
{
    return ob__rest_send_error_http(ex, ob_status_http(st), ob_status_code_name(st), msg);
}

/* ---- request fields ------------------------------------------------------------------------ */

ob_status ob__rest_query_int(const ob__rest_exchange *ex, const char *name, long long lo,
                             long long hi, long long *out, ob_err *err)
{
    *out = 0;
    const char *v = ob__rest_arg(ex, name);
    if (!v || !v[0]) return OB_OK;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno || x < lo || x > hi)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "%s: expected an integer from %lld to %lld, got '%.40s'", name, lo, hi, v);
    *out = x;
    return OB_OK;
}

/* The q of one media range's parameters (";q=0.5;level=1"): 1 when absent, 0 when unreadable. */
static double media_q(const char *params, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (params[i] != ';') continue;
        size_t j = i + 1;
        while (j < len && params[j] == ' ')
            j++;
        if (j + 1 < len && (params[j] == 'q' || params[j] == 'Q') && params[j + 1] == '=') {
            char num[8] = "";
            size_t n = strcspn(params + j + 2, ";, ");
            if (n >= sizeof num || j + 2 + n > len) return 0;
            memcpy(num, params + j + 2, n);
            num[n] = '\0';
            char *end;
            double q = strtod(num, &end);
            return *end || !(q >= 0 && q <= 1) ? 0 : q;
        }
    }
    return 1;
}

int ob__rest_accepts_text(const char *accept)
{
    double q_text = 0, q_json = 0;
    for (const char *p = accept; p && *p;) {
        size_t len = strcspn(p, ",");
        while (len && (*p == ' ' || *p == '\t'))
            p++, len--;
        size_t type_len = strcspn(p, ";, \t");
        if (type_len > len) type_len = len;
        double q = media_q(p + type_len, len - type_len);
        if (type_len == 10 && !strncasecmp(p, "text/plain", 10) && q > q_text) q_text = q;
        if (type_len == 16 && !strncasecmp(p, "application/json", 16) && q > q_json) q_json = q;
        p += len;
        if (*p == ',') p++;
    }
    return q_text > 0 && q_text > q_json;
}

/* ---- the query against its route ----------------------------------------------------------- */

/* Whether the space-separated list has name; its position into *at. */
static int list_has(const char *list, const char *name, size_t *at)
{
    size_t n = strlen(name), i = 0;
    for (const char *p = list; *p; i++) {
        size_t len = strcspn(p, " ");
        if (len == n && !strncmp(p, name, n)) {
            if (at) *at = i;
            return 1;
        }
        p += len;
        while (*p == ' ')
            p++;
    }
    return 0;
}

/* Edit distance of a and b (b of len bytes) in any case, capped at 3. */
static size_t distance(const char *a, const char *b, size_t len)
{
    size_t na = strlen(a);
    if (na > 64 || len > 64) return 3;
    size_t row[65];
    for (size_t j = 0; j <= len; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= len; j++) {
            size_t up = row[j];
            size_t sub =
                diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[len] < 3 ? row[len] : 3;
}

/* Whether known (len bytes) is close to what was given, in any case: at most two edits apart
 * ("page_size" for pageSize), or one holding the other ("label" for labelSelector). */
static int close_to(const char *given, const char *known, size_t len)
{
    size_t n = strlen(given);
    if (distance(given, known, len) <= 2 && n >= 2) return 1;
    if (n < 3) return 0;
    for (size_t i = 0; i + n <= len; i++) /* given inside known */
        if (!strncasecmp(known + i, given, n)) return 1;
    for (size_t i = 0; len >= 3 && i + len <= n; i++) /* known inside given */
        if (!strncasecmp(given + i, known, len)) return 1;
    return 0;
}

/* Appends to buf (cap bytes) the names of list close to given: "; did you mean a or b?".
 * Returns how many it named. */
static int suggest(char *buf, size_t cap, const char *given, const char *list)
{
    size_t used = strlen(buf);
    int found = 0;
    for (const char *p = list; *p && used < cap;) {
        size_t len = strcspn(p, " ");
        if (close_to(given, p, len))
            used += (size_t)snprintf(buf + used, cap - used, "%s%.*s",
                                     found++ ? " or " : "; did you mean ", (int)len, p);
        p += len;
        while (*p == ' ')
            p++;
    }
    if (found && used < cap) snprintf(buf + used, cap - used, "?");
    return found;
}

typedef struct query_check {
    const ob__rest_route *route, *routes;
    size_t n_routes;
    unsigned seen; /* a bit per parameter of the route */
    char msg[OB_ERR_MSG_LEN];
} query_check;

/* The message for key, which the route does not take: the names of the route's parameters
 * close to it, else the route that takes it, else the parameters the route takes. */
static void unknown_param(query_check *q, const char *key)
{
    const ob__rest_route *r = q->route;
    size_t cap = sizeof q->msg;
    snprintf(q->msg, cap, "unknown query parameter '%.60s' for %s %s", key, r->method, r->path);
    if (suggest(q->msg, cap, key, r->params)) return;
    size_t used = strlen(q->msg);
    for (size_t i = 0; i < q->n_routes; i++) {
        const ob__rest_route *o = &q->routes[i];
        if (o != r && list_has(o->params, key, NULL)) {
            snprintf(q->msg + used, cap - used, " (%s %s takes it)", o->method, o->path);
            return;
        }
    }
    char takes[128] = "none";
    size_t k = 0;
    for (const char *p = r->params; *p && k + 3 < sizeof takes; p++) {
        if (*p == ' ') takes[k++] = ',';
        takes[k++] = *p;
        takes[k] = '\0';
    }
    snprintf(q->msg + used, cap - used, " (it takes %s)", takes);
}

static int check_arg(void *cls, const char *key, const char *value)
{
    (void)value;
    query_check *q = cls;
    if (!key[0] && (!value || !value[0])) return 0; /* "a=1&&b=2": nothing between the '&'s */
    size_t at;
    if (!list_has(q->route->params, key, &at)) {
        unknown_param(q, key);
        return 1;
    }
    if (q->seen & (1u << at)) {
        snprintf(q->msg, sizeof q->msg, "query parameter '%s' given more than once; expected once",
                 key);
        return 1;
    }
    q->seen |= 1u << at;
    return 0;
}

int ob__rest_check_query(ob__rest_exchange *ex, const ob__rest_route *r,
                         const ob__rest_route *routes, size_t n)
{
    query_check q = {.route = r, .routes = routes, .n_routes = n};
    if (!ob__rest_each_arg(ex, check_arg, &q)) return 1;
    ob__rest_send_error(ex, OB_ERR_INVALID_ARG, q.msg);
    return 0;
}
