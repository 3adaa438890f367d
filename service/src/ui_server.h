/* The dashboard's routes on the REST server (rest_server.c hands them every request whose path
 * is /ui or starts with /ui/). */
#ifndef ONEBIT_UI_SERVER_H
#define ONEBIT_UI_SERVER_H

#include <microhttpd.h>

/* 1 when url belongs to the dashboard: "/ui" or anything under "/ui/". These paths carry no
 * job data and are served without the API token (a browser cannot send a bearer header when
 * it navigates); the page itself asks for the token and sends it with each API call. */
int ob__ui_path(const char *url);

/* Answers a dashboard request: GET or HEAD of an embedded file (exact match against the table,
 * "/ui/" meaning "/ui/index.html"), a redirect from "/ui" to "/ui/", 404 for any other path and
 * 405 for other methods. Every answer carries the dashboard's security headers. */
enum MHD_Result ob__ui_serve(struct MHD_Connection *conn, const char *method, const char *url);

/* The REST server's URL unescaping (MHD_OPTION_UNESCAPE_CALLBACK): %HH decoded as
 * libmicrohttpd's own does, except %00, kept as the three characters. A decoded NUL would end
 * the path early for every C string comparison after it: "/ui/app.js%00.html" would be served
 * as "/ui/app.js", and an API argument would be cut short without a word. */
size_t ob__rest_unescape(void *cls, struct MHD_Connection *conn, char *s);

/* Adds the headers every REST answer carries (no caching, no sniffing, no framing). */
void ob__rest_security_headers(struct MHD_Response *r);

#endif /* ONEBIT_UI_SERVER_H */
