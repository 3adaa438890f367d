/* The two transports behind obctl_client: one table of operations each. */
#ifndef ONEBITCTL_CLIENT_INTERNAL_H
#define ONEBITCTL_CLIENT_INTERNAL_H

#include "client.h"
#include "onebit/base.h"

typedef struct obctl_ops {
    ob_status (*submit)(obctl_client *c, const char *spec, size_t len, int world_size,
                        int max_restarts, const char *request_id, const char *labels,
                        const char *deadline, const obctl_file *files, size_t n_files, ob_job *out,
                        ob_err *err);
    ob_status (*get)(obctl_client *c, const char *id, ob_job *out, ob_err *err);
    ob_status (*cancel)(obctl_client *c, const char *id, ob_job *out, ob_err *err);
    ob_status (*del)(obctl_client *c, const char *id, int keep_checkpoints, int *deleted,
                     ob_err *err);
    ob_status (*version)(obctl_client *c, char version[64], char api[64], ob_err *err);
    ob_status (*list)(obctl_client *c, ob_job_state state, const char *selector, int page_size,
                      const char *token, ob_job **jobs, size_t *n, char next[OB_PAGE_TOKEN_LEN],
                      ob_err *err);
    ob_status (*checkpoints)(obctl_client *c, const char *id, ob_checkpoint_info **out, size_t *n,
                             ob_err *err);
    ob_status (*watch)(obctl_client *c, const char *id, int64_t after_seq, obctl_on_event cb,
                       void *user, ob_err *err);
    ob_status (*logs)(obctl_client *c, const char *id, int64_t offset, int max_bytes, char **data,
                      size_t *len, int64_t *next, int64_t *size, ob_err *err);
    ob_status (*stream_logs)(obctl_client *c, const char *id, int tail_lines, int64_t since_ms,
                             int follow, obctl_on_log cb, void *user, ob_err *err);
    void (*destroy)(obctl_client *c);
} obctl_ops;

struct obctl_client {
    const obctl_ops *ops;
    char target[512];
    char token[512];
    int tls;                            /* the transport is TLS */
    char ca_file[512];                  /* REST over TLS: CURLOPT_CAINFO ("" the system's) */
    char cert_file[512], key_file[512]; /* REST: a client certificate ("" none) */
    void *impl;
};

/* Reads the PEM file path (what names the flag) into *out (malloc'd, NUL-terminated). */
ob_status obctl__read_pem(const char *what, const char *path, char **out, ob_err *err);

/* The message for a call that failed in the transport: unreachable, or a TLS failure
 * (plaintext against TLS, TLS against plaintext, an untrusted certificate, a wrong name), each
 * with what to change. detail is the transport's own text. Returns OB_ERR_COMM. */
ob_status obctl__transport_failed(ob_err *err, const obctl_client *c, const char *detail);

/* Message for a server that cannot be reached, the same for both transports. */
ob_status obctl__unreachable(ob_err *err, const obctl_client *c, const char *detail);

#endif /* ONEBITCTL_CLIENT_INTERNAL_H */
