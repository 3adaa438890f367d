/* obctl_client: dispatch to the transport's table (client_grpc.c, client_rest.c). */
#define _GNU_SOURCE /* strcasestr */
#include "client_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OBCTL_PEM_MAX ((size_t)1 << 20)

void obctl_client_destroy(obctl_client *c)
{
    if (!c) return;
    c->ops->destroy(c);
    free(c);
}

const char *obctl_client_target(const obctl_client *c)
{
    return c->target;
}

ob_status obctl__unreachable(ob_err *err, const obctl_client *c, const char *detail)
{
    if (err) {
        /* The transport's account ends with the cause ("... Connection refused"): a long one
         * keeps its end, from a word boundary, rather than being cut inside a word. */
        const char *d = detail ? detail : "";
        const char *more = "";
        size_t n = strlen(d);
        if (n > 160) {
            d += n - 160;
            while (*d && *d != ' ')
                d++;
            more = "...";
        }
        err->code = OB_ERR_COMM;
        snprintf(err->msg, sizeof err->msg,
                 "cannot reach onebitd at %.200s (%s%s); is it running? (start it with "
                 "onebitd, or point --server / ONEBIT_SERVER at it)",
                 c->target, more, d);
    }
    return OB_ERR_COMM;
}

ob_status obctl__read_pem(const char *what, const char *path, char **out, ob_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return OB_ERR(err, OB_ERR_IO, "%s %s: %s", what, path, strerror(errno));
    char *buf = malloc(OBCTL_PEM_MAX + 1);
    size_t n = buf ? fread(buf, 1, OBCTL_PEM_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf) return OB_ERR(err, OB_ERR_NOMEM, "%s %s", what, path);
    if (bad || n == 0 || n > OBCTL_PEM_MAX || memchr(buf, '\0', n) ||
        !strstr((buf[n] = '\0', buf), "-----BEGIN ")) {
        free(buf);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s %s: %s", what, path,
                      bad ? "cannot be read" : "not a PEM file");
    }
    *out = buf;
    return OB_OK;
}

/* 1 when detail holds any of the NULL-terminated needles (case-insensitive). */
static int mentions(const char *detail, const char *const *needles)
{
    for (; *needles; needles++)
        if (strcasestr(detail, *needles)) return 1;
    return 0;
}

ob_status obctl__transport_failed(ob_err *err, const obctl_client *c, const char *detail)
{
    static const char *const refused[] = {"refused", "resolve", "Couldn't connect", NULL};
    static const char *const untrusted[] = {"CERTIFICATE_VERIFY_FAILED",
                                            "certificate verify failed",
                                            "SSL certificate problem",
                                            "issuer certificate",
                                            "self-signed",
                                            "self signed",
                                            NULL};
    static const char *const wrong_name[] = {"Peer name", "subject name", "does not match",
                                             "hostname mismatch", NULL};
    const char *fmt = NULL;
    if (mentions(detail, refused)) {
        return obctl__unreachable(err, c, detail);
    } else if (!c->tls) {
        fmt = "onebitd at %.200s did not answer in plaintext (%.200s); if it serves TLS, pass "
              "--tls with --ca CA.pem (REST: an https:// URL)";
    } else if (mentions(detail, wrong_name)) {
        fmt = "the certificate of onebitd at %.200s is not for this name (%.200s): connect by a "
              "name or address it carries, or name one with --tls-server-name (gRPC)";
    } else if (mentions(detail, untrusted)) {
        fmt = "the certificate of onebitd at %.200s is not trusted (%.200s): pass --ca (or "
              "ONEBIT_CA) with the CA that signed it";
    } else {
        fmt = "TLS with onebitd at %.200s failed (%.200s); is it serving TLS? (onebitd without "
              "--tls-cert serves plaintext: then drop --tls)";
    }
    if (err) {
        err->code = OB_ERR_COMM;
        snprintf(err->msg, sizeof err->msg, fmt, c->target, detail);
    }
    return OB_ERR_COMM;
}

ob_status obctl_submit(obctl_client *c, const char *spec, size_t len, int world_size,
                       int max_restarts, const char *request_id, const char *labels,
                       const char *deadline, const obctl_file *files, size_t n_files, ob_job *out,
                       ob_err *err)
{
    return c->ops->submit(c, spec, len, world_size, max_restarts, request_id, labels, deadline,
                          files, n_files, out, err);
}

ob_status obctl_get(obctl_client *c, const char *id, ob_job *out, ob_err *err)
{
    return c->ops->get(c, id, out, err);
}

ob_status obctl_version(obctl_client *c, char version[64], char api[64], ob_err *err)
{
    return c->ops->version(c, version, api, err);
}

ob_status obctl_delete(obctl_client *c, const char *id, int keep_checkpoints, int *deleted,
                       ob_err *err)
{
    return c->ops->del(c, id, keep_checkpoints, deleted, err);
}

ob_status obctl_cancel(obctl_client *c, const char *id, ob_job *out, ob_err *err)
{
    return c->ops->cancel(c, id, out, err);
}

ob_status obctl_list(obctl_client *c, ob_job_state state, const char *selector, int page_size,
                     const char *page_token, ob_job **jobs, size_t *n,
                     char next_token[OB_PAGE_TOKEN_LEN], ob_err *err)
{
    return c->ops->list(c, state, selector, page_size, page_token, jobs, n, next_token, err);
}

ob_status obctl_checkpoints(obctl_client *c, const char *id, ob_checkpoint_info **out, size_t *n,
                            ob_err *err)
{
    return c->ops->checkpoints(c, id, out, n, err);
}

ob_status obctl_watch(obctl_client *c, const char *id, int64_t after_seq, obctl_on_event on_event,
                      void *user, ob_err *err)
{
    return c->ops->watch(c, id, after_seq, on_event, user, err);
}

ob_status obctl_logs(obctl_client *c, const char *id, int64_t offset, int max_bytes, char **data,
                     size_t *len, int64_t *next, int64_t *size, ob_err *err)
{
    *data = NULL;
    *len = 0;
    return c->ops->logs(c, id, offset, max_bytes, data, len, next, size, err);
}

ob_status obctl_stream_logs(obctl_client *c, const char *id, int tail_lines, int64_t since_ms,
                            int follow, obctl_on_log on_log, void *user, ob_err *err)
{
    return c->ops->stream_logs(c, id, tail_lines, since_ms, follow, on_log, user, err);
}
