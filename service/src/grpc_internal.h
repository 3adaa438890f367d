/* Private to the gRPC front end: the methods onebitd serves and their handlers (decode the
 * request, call the service function, encode the answer: grpc_handlers.c), apart from the call
 * machinery: grpc_server.c (completion queue, unary calls, dispatch, start and shutdown) and
 * grpc_streams.c (server streams and the reflection stream), which share the call record and the
 * server below. */
#ifndef ONEBIT_GRPC_INTERNAL_H
#define ONEBIT_GRPC_INTERNAL_H

#include "reflection.h"
#include "onebit/servers.h"
#include "onebit/service.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <pthread.h>
#include <protobuf-c/protobuf-c.h>

typedef enum method_id {
    M_SUBMIT,
    M_GET,
    M_LIST,
    M_CANCEL,
    M_WATCH,
    M_CHECKPOINTS,
    M_LOGS,
    M_STREAM_LOGS,
    M_DELETE,
    M_VERSION,
    M_REPORT,
    M_HEALTH_CHECK,
    M_HEALTH_WATCH,
    M_REFLECTION,       /* grpc.reflection.v1: a bidirectional stream (reflection.h) */
    M_REFLECTION_ALPHA, /* grpc.reflection.v1alpha: the same protocol, the same code */
    M_COUNT,
    M_UNKNOWN = -1,
} method_id;

extern const char *const ob__grpc_method_paths[M_COUNT];

/* What a unary handler answers: the encoded message on success, else the error. */
typedef struct ob__grpc_reply {
    grpc_byte_buffer *bb;
    ob_err err;
} ob__grpc_reply;

/* bearer: the token the call presented ("" for none). Every method but ReportProgress has
 * been checked against the admin token already; ReportProgress takes an attempt's credential,
 * which only the service can check. */
typedef ob_status (*ob__grpc_handler)(ob_service *svc, const ProtobufCMessage *m,
                                      const char *bearer, ob__grpc_reply *r);

/* Per method: its request message and its unary handler (NULL: a server stream). The
 * reflection methods have neither: their requests arrive on the stream. */
typedef struct ob__grpc_method {
    const ProtobufCMessageDescriptor *request;
    ob__grpc_handler fn;
} ob__grpc_method;

extern const ob__grpc_method ob__grpc_methods[M_COUNT];

/* A message as a byte buffer (NULL when memory runs out); the caller unrefs it. */
grpc_byte_buffer *ob__grpc_pack(const ProtobufCMessage *m);

/* Decodes a request of type d; NULL when it does not decode, or when a string field anywhere
 * in it (nested messages and map entries included) holds a NUL byte: C strings would cut it
 * there, and "job-000002\0x" must not name job-000002. *why (may be NULL) says which. */
ProtobufCMessage *ob__grpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
                                  const char **why);

/* "" (the server) and each service onebitd implements: what Health answers SERVING for. */
int ob__grpc_known_service(const char *name);

/* ---- the call machinery (grpc_server.c, grpc_streams.c) -------------------------------------- */

typedef enum tag_kind {
    TAG_NEW,
    TAG_DONE,
    TAG_SEND,
    TAG_RECV,
    TAG_STATUS,
    TAG_CLOSE,
    TAG_SHUTDOWN
} tag_kind;

struct call_ctx;
typedef struct tag {
    tag_kind kind;
    struct call_ctx *ctx;
} tag;

typedef struct call_ctx {
    ob_grpc_server *srv;
    method_id method;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* unknown methods */
    tag t_new, t_done, t_send, t_recv, t_status, t_close;
    int cancelled;
    grpc_slice status_msg;
    int has_status_msg;
    grpc_byte_buffer *send_bb;
    /* streams */
    struct call_ctx *wnext;
    char job_id[OB_JOB_ID_LEN];
    int64_t last_seq;
    int sent_initial, in_flight, finish_after_send, status_started, status_done, closed, broken;
    int health_sent; /* the last status a Health.Watch sent + 1; 0: none yet */
    /* The store is read without the lock: a stream being pumped (pumping) or about to be
     * (pins, the watcher's list) is neither freed nor pumped by another thread; pump_again
     * asks the pumping thread to look once more. */
    int pumping, pump_again, pins;
    /* A send completed (or the stream opened): the watcher pumps it next (handlers never read
     * the store for a stream, so that unary calls never wait behind a replay). */
    int ready;
    struct call_ctx *rnext; /* the next ready stream (the server's ready list) */
    /* WatchJob's read-ahead: events read from the store, not yet sent (ev_i is the next). */
    ob_job_event *ev_buf;
    size_t ev_n, ev_i;
    int64_t log_offset; /* StreamJobLogs: where the next piece starts */
    int log_follow;
    /* reflection (a bidirectional stream) */
    int reflecting;
    grpc_byte_buffer *recv_bb;
} call_ctx;

/* Watcher threads: each pumps the streams that are ready (the first also every stream when
 * there are new job events), with its own part of `pinned`. */
#define OB__GRPC_PUMPERS 2
struct ob_grpc_server;
typedef struct ob__grpc_pumper {
    struct ob_grpc_server *s;
    int index;
} ob__grpc_pumper;

/* Events a WatchJob stream reads from the store at once. */
#define OB__GRPC_READ_AHEAD 32

struct ob_grpc_server {
    ob_service *svc;
    char *token;
    ob__reflection *reflection; /* the answers of server reflection */
    grpc_server *server;
    grpc_completion_queue *cq;
    void *registered[M_COUNT];
    pthread_t *threads;
    int n_threads;
    pthread_t watchers[OB__GRPC_PUMPERS];
    ob__grpc_pumper pumpers[OB__GRPC_PUMPERS];
    int watcher_started; /* watcher threads started */
    pthread_mutex_t mu;  /* everything below, and every call_ctx's stream fields; never held
                          * while the store is read */
    int outstanding;     /* call_ctx objects alive */
    int shutting_down, server_shutdown_done, cq_shut, watch_stop;
    pthread_cond_t watch_cv; /* signalled when a stream is ready or the watcher must stop */
    struct call_ctx *ready_head, *ready_tail; /* streams with ready set, oldest first */
    call_ctx *watches;
    call_ctx **pinned;          /* the watchers': max_streams each (pump_watches) */
    int n_watches, max_streams; /* n_watches counts the reflection streams too */
    tag t_shutdown;
};

/* Starts a batch on the call with tag t: c is read before the tag is handed over, since a
 * handler thread may take t back (and free c) before grpc_call_start_batch returns. */
grpc_call_error ob__grpc_start_batch(call_ctx *c, const grpc_op *ops, size_t n, tag *t);

/* Frees a call record and counts it gone (the queue shuts down after the last one). Takes the
 * server's lock: not to be held by the caller. */
void ob__grpc_ctx_free(call_ctx *c);

/* Answers a call with its status (and bb, taken, the answer on success) in one batch. */
void ob__grpc_finish_unary(call_ctx *c, ob_status status, const char *msg, grpc_byte_buffer *bb);

/* Opens the server stream of a decoded request m (taken): WatchJob, StreamJobLogs or
 * Health.Watch; a request it cannot serve is answered with the reason (grpc_streams.c). */
void ob__grpc_stream_open(ob_grpc_server *s, call_ctx *c, ProtobufCMessage *m);

/* A stream's send, status or close completed. */
void ob__grpc_stream_event(ob_grpc_server *s, call_ctx *c, tag_kind kind, int success);

/* Admits a reflection stream and receives its first request. */
void ob__grpc_reflect_begin(ob_grpc_server *s, call_ctx *c);

/* A reflection stream's receive, send, status or close completed. */
void ob__grpc_reflect_event(ob_grpc_server *s, call_ctx *c, tag_kind kind, int success);

/* The watcher thread (arg: the server): pumps the streams on new events and every 200 ms. */
void *ob__grpc_watcher_main(void *arg);

#endif /* ONEBIT_GRPC_INTERNAL_H */
