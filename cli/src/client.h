/* onebitctl's view of onebitd: the JobService operations over either API, gRPC (gRPC C core +
 * protobuf-c) or REST (libcurl + jansson), answering the same structs (onebit/job.h).
 *
 * Every call returns OB_OK, or the status the server answered with its message in err
 * (OB_ERR_INVALID_ARG, OB_ERR_NOT_FOUND, OB_ERR_STATE, OB_ERR_UNAUTHENTICATED, ...), or
 * OB_ERR_COMM with a message saying the server could not be reached. */
#ifndef ONEBITCTL_CLIENT_H
#define ONEBITCTL_CLIENT_H

#include "onebit/job.h"

#include <stddef.h>

typedef struct obctl_client obctl_client;

/* TLS to onebitd: files named by the caller (borrowed). A NULL obctl_tls is plaintext. */
typedef struct obctl_tls {
    const char *ca_file;     /* PEM trust roots; NULL: the system's */
    const char *server_name; /* gRPC: the name to check in the certificate [the target's host] */
    const char *cert_file, *key_file; /* a client certificate and key, both or neither */
} obctl_tls;

/* gRPC to target ("host:port"); token (borrowed, may be NULL) as a bearer token; tls (borrowed,
 * may be NULL: plaintext). A CA or client file that cannot be read fails here, naming it. */
ob_status obctl_client_grpc(obctl_client **out, const char *target, const char *token,
                            const obctl_tls *tls, ob_err *err);
/* REST to base_url ("http://host:port", or "https://..." which needs tls); over https the
 * URL's host is the name checked in the certificate (tls->server_name must be NULL). */
ob_status obctl_client_rest(obctl_client **out, const char *base_url, const char *token,
                            const obctl_tls *tls, ob_err *err);
void obctl_client_destroy(obctl_client *c); /* accepts NULL */

/* Where the client talks to, for messages ("127.0.0.1:50051", "http://..."). */
const char *obctl_client_target(const obctl_client *c);

/* One file of a program's upload (SubmitJobRequest.files); everything borrowed. */
typedef struct obctl_file {
    const char *path; /* relative, "/"-separated */
    uint32_t mode;    /* permission bits */
    const unsigned char *data;
    size_t len;
} obctl_file;

/* Submits spec (len bytes) with n_files files (borrowed; NULL with 0: no upload). *out is
 * caller-owned (ob_job_clear). */
ob_status obctl_submit(obctl_client *c, const char *spec, size_t len, int world_size,
                       int max_restarts, const char *request_id, const char *labels,
                       const char *deadline, const obctl_file *files, size_t n_files, ob_job *out,
                       ob_err *err);
ob_status obctl_get(obctl_client *c, const char *id, ob_job *out, ob_err *err);
ob_status obctl_cancel(obctl_client *c, const char *id, ob_job *out, ob_err *err);
/* The server's release and API ("0.1.0", "onebit.v1"). */
ob_status obctl_version(obctl_client *c, char version[64], char api[64], ob_err *err);

/* Deletes a job that has ended; *deleted counts the checkpoints removed with it. */
ob_status obctl_delete(obctl_client *c, const char *id, int keep_checkpoints, int *deleted,
                       ob_err *err);
/* One page; *jobs is caller-owned (ob_job_array_free); next_token "" on the last page. */
ob_status obctl_list(obctl_client *c, ob_job_state state, const char *selector, int page_size,
                     const char *page_token, ob_job **jobs, size_t *n,
                     char next_token[OB_PAGE_TOKEN_LEN], ob_err *err);
/* Newest first; *out is malloc'd (free()). */
ob_status obctl_checkpoints(obctl_client *c, const char *id, ob_checkpoint_info **out, size_t *n,
                            ob_err *err);

/* Up to max_bytes (0: the server's default) of the job's worker log from offset: *data is
 * malloc'd (free(); NULL when *len is 0), *next the offset after it, *size the log's size. */
ob_status obctl_logs(obctl_client *c, const char *id, int64_t offset, int max_bytes, char **data,
                     size_t *len, int64_t *next, int64_t *size, ob_err *err);

/* Called with each piece of a log stream (bytes borrowed, not terminated); nonzero stops it. */
typedef int (*obctl_on_log)(const char *data, size_t len, void *user);

/* The job's log streamed: its last tail_lines lines (0: all) written at or after since_ms (Unix
 * ms; 0: any time), then, with follow, new bytes as they are written until the job has ended
 * and its log is sent, on_log asks to stop, or the connection fails. */
ob_status obctl_stream_logs(obctl_client *c, const char *id, int tail_lines, int64_t since_ms,
                            int follow, obctl_on_log on_log, void *user, ob_err *err);

/* Called for each event; return nonzero to stop watching. */
typedef int (*obctl_on_event)(const ob_job_event *ev, void *user);

/* The job's events after after_seq, then new ones until the job reaches a final state (the
 * stream ends), on_event asks to stop, or the connection fails. */
ob_status obctl_watch(obctl_client *c, const char *id, int64_t after_seq, obctl_on_event on_event,
                      void *user, ob_err *err);

#endif /* ONEBITCTL_CLIENT_H */
