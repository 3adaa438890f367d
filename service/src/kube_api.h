/* The Kubernetes API client under the Kubernetes launcher: requests over HTTPS with libcurl
 * (bounded bodies, a time limit, the bearer token re-read from its file for every connection)
 * and the easy handles of long-lived streams (watches, pod logs) for the launcher's thread to
 * drive with a curl multi handle. */
#ifndef ONEBIT_KUBE_API_H
#define ONEBIT_KUBE_API_H

#include "onebit/kubernetes.h"

#include <curl/curl.h>
#include <stddef.h>

/* Bodies of API answers (lists, objects) larger than this are refused. */
#define OB__KUBE_MAX_BODY (8u << 20)

/* One request: method ("GET", "POST", "DELETE"), path ("/apis/..."), body JSON or NULL. On
 * OB_OK *status is the HTTP status and *out (owned by the caller, NUL-terminated, may be NULL
 * when empty) the answer. OB_ERR_COMM when the server cannot be reached or does not answer
 * within timeout_ms; OB_ERR_TOO_LARGE for an answer over OB__KUBE_MAX_BODY. */
ob_status ob__kube_request(const ob_kube_conn *c, const char *method, const char *path,
                           const char *body, int timeout_ms, long *status, char **out, ob_err *err);

/* An easy handle for a stream at path (GET), with the server's CA, the token and a connect
 * timeout set; *headers (owned by the caller, curl_slist_free_all after the transfer) holds the
 * header list. The caller sets CURLOPT_WRITEFUNCTION/WRITEDATA. NULL when out of memory or the
 * token file cannot be read (err says which). */
CURL *ob__kube_stream(const ob_kube_conn *c, const char *path, struct curl_slist **headers,
                      ob_err *err);

/* The message of a Kubernetes Status answer ({"kind":"Status","message":...}) into out[cap],
 * or the first line of a body that is not one; control characters replaced. */
void ob__kube_status_message(const char *body, char *out, size_t cap);

/* Appends to out[cap] the %-encoding of s for a query parameter. 0 when it did not fit. */
int ob__kube_query_escape(const char *s, char *out, size_t cap);

#endif /* ONEBIT_KUBE_API_H */
