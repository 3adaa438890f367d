/* A small gRPC client on the gRPC C core: unary and server-streaming calls carrying messages
 * the caller has already encoded (protobuf-c), with an optional bearer token.
 *
 * Workers use it to report progress (ob_reporter, below); the tests use it to drive onebitd
 * over the wire, including with bytes that are not a valid message. One client may be used by
 * one thread at a time. grpc_init is called by create and grpc_shutdown by destroy. */
#ifndef ONEBIT_RPC_CLIENT_H
#define ONEBIT_RPC_CLIENT_H

#include "onebit/report.h"
#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_rpc_client ob_rpc_client;

/* Connects (lazily) to target ("host:port"), borrowed. token (borrowed, may be NULL or "") is
 * sent as "authorization: Bearer TOKEN" on every call. *out is owned by the caller. */
ob_status ob_rpc_client_create(ob_rpc_client **out, const char *target, const char *token,
                               ob_err *err);

/* TLS for a client: what the server's certificate is checked against, and the client's own
 * certificate when the server requires one. All PEM text (not paths), borrowed for the call. */
typedef struct ob_rpc_tls {
    const char *ca_pem;      /* trust roots; NULL: gRPC's default roots (the system's) */
    const char *server_name; /* the name the certificate must carry; NULL: the target's host */
    const char *cert_pem, *key_pem; /* client certificate chain and key; both NULL: none */
} ob_rpc_tls;

/* Like ob_rpc_client_create, over TLS when tls is not NULL. A certificate that does not verify
 * makes calls fail in the transport (ob_rpc_unary's res->code 14, UNAVAILABLE, with gRPC's
 * handshake message). */
ob_status ob_rpc_client_create_tls(ob_rpc_client **out, const char *target, const char *token,
                                   const ob_rpc_tls *tls, ob_err *err);

/* Closes the channel. Accepts NULL. */
void ob_rpc_client_destroy(ob_rpc_client *c);

/* The outcome of a call that reached the server (or failed in the transport). */
typedef struct ob_rpc_result {
    int code;          /* grpc_status_code: 0 OK, 3 INVALID_ARGUMENT, ... */
    char details[512]; /* the status message */
} ob_rpc_result;

/* Unary call of method ("/pkg.Service/Method") with req_len bytes at req (borrowed). On return
 * *res holds the status; when it is OK, *resp (malloc'd, caller frees; may be NULL for an
 * empty message) holds resp_len bytes of the answer. Returns OB_OK whenever a status was
 * received (check res->code); OB_ERR_COMM when the call could not be made. */
ob_status ob_rpc_unary(ob_rpc_client *c, const char *method, const void *req, size_t req_len,
                       void **resp, size_t *resp_len, ob_rpc_result *res, int timeout_ms,
                       ob_err *err);

/* Called for every message of a stream with its bytes (borrowed); return nonzero to stop
 * reading (the call is then cancelled). */
typedef int (*ob_rpc_on_message)(const void *data, size_t len, void *user);

/* Server-streaming call: sends req, then calls on_msg for each message until the stream ends,
 * on_msg asks to stop, or timeout_ms passes (then res->code is DEADLINE_EXCEEDED, 4). */
ob_status ob_rpc_server_stream(ob_rpc_client *c, const char *method, const void *req,
                               size_t req_len, ob_rpc_on_message on_msg, void *user,
                               ob_rpc_result *res, int timeout_ms, ob_err *err);

/* ---- progress reports (WorkerService) ----------------------------------------------------- */

typedef struct ob_reporter ob_reporter;

/* A reporter for job_id (copied) to the coordinator at target; token (borrowed) is the
 * attempt's report credential, NULL: ONEBIT_REPORT_TOKEN from the environment (where the local,
 * hosts and Slurm launchers put it), else the file named by ONEBIT_REPORT_TOKEN_FILE (the
 * Kubernetes launcher mounts the attempt's Secret there), else none. */
ob_status ob_reporter_create(ob_reporter **out, const char *target, const char *job_id,
                             const char *token, ob_err *err);

/* Reads a credential file: at most cap - 1 bytes of printable ASCII, one trailing newline
 * allowed. OB_ERR_IO when it cannot be read, OB_ERR_INVALID_ARG when it is empty, too long or
 * holds anything else (the message never quotes the content). */
ob_status ob_report_token_read(const char *path, char *out, size_t cap, ob_err *err);

/* Sends a report (borrowed; its job_id is replaced by the reporter's) as a ReportProgress call,
 * waiting at most a second. Failures are not fatal to training: they are counted and returned,
 * and the caller goes on. *cancel_requested (may be NULL) is set when the coordinator is
 * cancelling the job. */
ob_status ob_reporter_send(ob_reporter *r, const ob_report *rep, int *cancel_requested,
                           ob_err *err);

/* Number of reports that failed so far. */
int ob_reporter_failures(const ob_reporter *r);

/* Accepts NULL. */
void ob_reporter_destroy(ob_reporter *r);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_RPC_CLIENT_H */
