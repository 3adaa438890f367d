/* The web dashboard under /ui/: static files from the table compiled into the binary
 * (ui_assets.h), never from the filesystem, so that no path a client sends can reach a file.
 * The page (service/ui/) reads everything it shows from the token-protected REST API; these
 * routes serve only code and style, the same for every client.
 *
 * Security headers: a Content-Security-Policy that allows scripts, styles and connections from
 * this origin only (no inline script, no eval, no framing, no forms), nosniff, no referrer. */
#include "ui_server.h"
#include "ui_assets.h"

#include <string.h>

#define UI_CSP                                                                                     \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

int ob__ui_path(const char *url)
{
    return !strcmp(url, "/ui") || !strncmp(url, "/ui/", 4);
}

void ob__rest_security_headers(struct MHD_Response *r)
{
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

size_t ob__rest_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    char *w = s;
    for (const char *r = s; *r;) {
        int hi = r[0] == '%' ? hex_value(r[1]) : -1, lo = hi >= 0 ? hex_value(r[2]) : -1;
        if (hi >= 0 && lo >= 0 && (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++; /* not an escape, or %00: kept as text */
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

static void ui_headers(struct MHD_Response *r)
{
    MHD_add_response_header(r, "Content-Security-Policy", UI_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cross-Origin-Opener-Policy", "same-origin");
    MHD_add_response_header(r, "Cross-Origin-Resource-Policy", "same-origin");
    /* Revalidated on every load: a new onebitd serves its own files at once. */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
}

/* Queues a fixed answer (body a string literal, never a client's input). */
static enum MHD_Result answer(struct MHD_Connection *conn, unsigned http, const char *type,
                              const char *body, const char *location)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (location) MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, location);
    if (http == 405) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    ui_headers(r);
    enum MHD_Result ret = MHD_queue_response(conn, http, r);
    MHD_destroy_response(r);
    return ret;
}

static const ob__ui_asset *find(const char *url)
{
    if (!strcmp(url, "/ui/")) url = "/ui/index.html";
    for (size_t i = 0; i < ob__ui_asset_count; i++)
        if (!strcmp(url, ob__ui_assets[i].path)) return &ob__ui_assets[i];
    return NULL;
}

enum MHD_Result ob__ui_serve(struct MHD_Connection *conn, const char *method, const char *url)
{
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return answer(conn, 405, "application/json",
                      "{\"error\":{\"code\":405,\"status\":\"UNIMPLEMENTED\",\"message\":"
                      "\"the dashboard's files are read with GET or HEAD\"}}\n",
                      NULL);
    if (!strcmp(url, "/ui"))
        return answer(conn, 301, "text/plain; charset=utf-8", "see /ui/\n", "/ui/");
    const ob__ui_asset *a = find(url);
    if (!a)
        return answer(conn, 404, "application/json",
                      "{\"error\":{\"code\":404,\"status\":\"NOT_FOUND\",\"message\":"
                      "\"no dashboard file at this path\"}}\n",
                      NULL);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->type);
    ui_headers(r);
    enum MHD_Result ret = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}
