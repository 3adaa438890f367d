/* The gRPC front end on the gRPC C core.
 *
 * One completion queue, `threads` handler threads blocked in grpc_completion_queue_next. Every
 * method is registered (its request message read with the call); one more generic request
 * catches unknown methods and answers UNIMPLEMENTED. A call is a call_ctx; the tags handed to
 * the core point at small `tag` records inside it, which say which operation completed.
 *
 * Unary calls are answered in the handler thread that received them: decode, call the service
 * function, one batch with the answer and the status. Server-streaming calls (WatchJob,
 * StreamJobLogs, Health.Watch) are kept on a watch list and pumped with one send in flight per
 * call. The handler threads never read the store for a stream: a completed send whose next
 * WatchJob event is already read ahead (grpc_streams.c reads 32 at a time) is sent on at once;
 * otherwise the stream goes on a ready list that two watcher threads pump, reading the store
 * without the server's lock (a stream is pinned while it is read). The first watcher also pumps
 * every stream on new job events and every 200 ms (a log grows without events). So a unary call
 * never waits behind a replay's store reads (256 replaying WatchJob streams held GetJob for
 * seconds; test_grpc_streams.sh). The stream ends with OK
 * after the event that puts the job in a final state (StreamJobLogs: once the log of a job that has
 * ended is sent). Server reflection (grpc.reflection.v1 and v1alpha) is a bidirectional stream
 * answered from the compiled-in descriptor set (reflection.h): receive a request, send its answer,
 * until the client half-closes; it counts against the same limit of open streams. Shutdown: the
 * server stops accepting, every call is cancelled, the queue is shut down once the last call is
 * freed. This file holds the calls' lifetime, the dispatch and the start and stop; the streams are
 * in grpc_streams.c, the unary handlers in grpc_handlers.c. */
#include "grpc_internal.h"
#include "reflection.h"
#include "tls_internal.h"
#include "onebit/protoset.h"
#include "onebit/servers.h"
#include "onebit/status_map.h"
#include "onebit/base.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ThreadSanitizer cannot see the order the completion queue gives: the thread that hands a tag
 * to gRPC (a batch, a requested call, the shutdown) and the handler thread that takes it back
 * from grpc_completion_queue_next synchronise inside gRPC, which is not instrumented. So a tag
 * is released as it is handed over and acquired as it comes back, which is exactly the order
 * gRPC guarantees; no-ops in any other build. */
#if defined(__SANITIZE_THREAD__)
#define OB_TSAN_HANDOFF 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OB_TSAN_HANDOFF 1
#endif
#endif
#ifdef OB_TSAN_HANDOFF
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static void *tag_handed(void *t)
{
    __tsan_release(t);
    return t;
}
static void tag_taken(void *t)
{
    __tsan_acquire(t);
}
#else
static void *tag_handed(void *t)
{
    return t;
}
static void tag_taken(void *t)
{
    (void)t;
}
#endif

/* ---- call lifetime ------------------------------------------------------------------------- */

static void request_next(ob_grpc_server *s, method_id m);

/* Starts a batch on the call with tag t: c is read before the tag is handed over, since a
 * handler thread may take t back (and free c) before grpc_call_start_batch returns. */
grpc_call_error ob__grpc_start_batch(call_ctx *c, const grpc_op *ops, size_t n, tag *t)
{
    grpc_call *call = c->call;
    return grpc_call_start_batch(call, ops, n, tag_handed(t), NULL);
}

/* The methods whose requests arrive on the stream rather than with the call. */
static int is_bidi(method_id m)
{
    return m == M_REFLECTION || m == M_REFLECTION_ALPHA;
}

/* Shuts the queue down once the server has shut down and no call is left. Lock held. */
static void maybe_shutdown_cq(ob_grpc_server *s)
{
    if (s->server_shutdown_done && s->outstanding == 0 && !s->cq_shut) {
        s->cq_shut = 1;
        grpc_completion_queue_shutdown(s->cq);
    }
}

void ob__grpc_ctx_free(call_ctx *c)
{
    ob_grpc_server *s = c->srv;
    if (c->call) grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    grpc_call_details_destroy(&c->details);
    if (c->payload) grpc_byte_buffer_destroy(c->payload);
    if (c->send_bb) grpc_byte_buffer_destroy(c->send_bb);
    if (c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
    free(c->ev_buf);
    if (c->has_status_msg) grpc_slice_unref(c->status_msg);
    free(c);
    pthread_mutex_lock(&s->mu);
    s->outstanding--;
    maybe_shutdown_cq(s);
    pthread_mutex_unlock(&s->mu);
}

static void request_next(ob_grpc_server *s, method_id m)
{
    call_ctx *c = calloc(1, sizeof *c);
    if (!c) return; /* this method then waits for the next re-arm; nothing else to do */
    c->srv = s;
    c->method = m;
    grpc_metadata_array_init(&c->md);
    grpc_call_details_init(&c->details);
    c->t_new = (tag){TAG_NEW, c};
    c->t_done = (tag){TAG_DONE, c};
    c->t_send = (tag){TAG_SEND, c};
    c->t_recv = (tag){TAG_RECV, c};
    c->t_status = (tag){TAG_STATUS, c};
    c->t_close = (tag){TAG_CLOSE, c};
    pthread_mutex_lock(&s->mu);
    if (s->shutting_down) {
        pthread_mutex_unlock(&s->mu);
        grpc_metadata_array_destroy(&c->md);
        grpc_call_details_destroy(&c->details);
        free(c);
        return;
    }
    s->outstanding++;
    pthread_mutex_unlock(&s->mu);
    grpc_call_error e;
    if (m == M_UNKNOWN)
        e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq,
                                     tag_handed(&c->t_new));
    else
        e = grpc_server_request_registered_call(s->server, s->registered[m], &c->call, &c->deadline,
                                                &c->md, is_bidi(m) ? NULL : &c->payload, s->cq,
                                                s->cq, tag_handed(&c->t_new));
    if (e != GRPC_CALL_OK) ob__grpc_ctx_free(c);
}

/* Answers a call with its status (and the answer on success) in one batch. */
void ob__grpc_finish_unary(call_ctx *c, ob_status status, const char *msg, grpc_byte_buffer *bb)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (status == OB_OK && bb) {
        c->send_bb = bb;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
    } else if (bb) {
        grpc_byte_buffer_destroy(bb);
    }
    char text[OB_ERR_MSG_LEN];
    ob_status_public_message(status == OB_OK ? "" : msg, text, sizeof text);
    c->status_msg = grpc_slice_from_copied_string(text);
    c->has_status_msg = 1;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)ob_status_grpc_code(status);
    ops[n++].data.send_status_from_server.status_details = &c->status_msg;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    if (ob__grpc_start_batch(c, ops, n, &c->t_done) != GRPC_CALL_OK) ob__grpc_ctx_free(c);
}

/* The token of the call's "authorization: Bearer TOKEN" header into out ("" when there is
 * none or it does not fit). */
static void bearer_of(const grpc_metadata_array *md, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < md->count; i++) {
        if (grpc_slice_str_cmp(md->metadata[i].key, "authorization") != 0) continue;
        const grpc_slice v = md->metadata[i].value;
        size_t n = GRPC_SLICE_LENGTH(v);
        const char *p = (const char *)GRPC_SLICE_START_PTR(v);
        if (n < 7 || memcmp(p, "Bearer ", 7) != 0 || n - 7 >= cap) return;
        memcpy(out, p + 7, n - 7);
        out[n - 7] = '\0';
        return;
    }
}

static int authorized(const ob_grpc_server *s, const char *bearer)
{
    return !s->token || ob_secret_equal(bearer, s->token);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static void handle_new(ob_grpc_server *s, call_ctx *c)
{
    char msg[OB_ERR_MSG_LEN + 64];
    char bearer[512];
    bearer_of(&c->md, bearer, sizeof bearer);
    /* Workers report with their attempt's credential, which the service checks: the admin
     * token is neither needed nor given to them. grpc.health.v1 says only SERVING or NOT_SERVING
     * and is open to all, so that probes (Kubernetes' gRPC probe sends no credentials) can ask it.
     */
    int open_method =
        c->method == M_REPORT || c->method == M_HEALTH_CHECK || c->method == M_HEALTH_WATCH;
    if (!open_method && !authorized(s, bearer)) {
        ob__grpc_finish_unary(c, OB_ERR_UNAUTHENTICATED, "missing or wrong bearer token", NULL);
        return;
    }
    if (c->method == M_UNKNOWN) {
        char path[256];
        size_t n = GRPC_SLICE_LENGTH(c->details.method);
        if (n >= sizeof path) n = sizeof path - 1;
        memcpy(path, GRPC_SLICE_START_PTR(c->details.method), n);
        path[n] = '\0';
        snprintf(msg, sizeof msg, "unknown method %s", path);
        ob__grpc_finish_unary(c, OB_ERR_UNSUPPORTED, msg, NULL);
        return;
    }
    if (is_bidi(c->method)) {
        ob__grpc_reflect_begin(s, c);
        return;
    }
    const ProtobufCMessageDescriptor *d = ob__grpc_methods[c->method].request;
    if (!c->payload) {
        snprintf(msg, sizeof msg, "missing %s message", d->name);
        ob__grpc_finish_unary(c, OB_ERR_INVALID_ARG, msg, NULL);
        return;
    }
    /* The channel takes a submit's upload; every other request keeps the small limit. */
    if (c->method != M_SUBMIT && grpc_byte_buffer_length(c->payload) > OB_API_MAX_REQUEST) {
        snprintf(msg, sizeof msg, "%s: larger than the limit of %zu bytes", d->name,
                 OB_API_MAX_REQUEST);
        ob__grpc_finish_unary(c, OB_ERR_TOO_LARGE, msg, NULL);
        return;
    }
    const char *why = NULL;
    ProtobufCMessage *m = ob__grpc_unpack(c->payload, d, &why);
    if (!m) {
        snprintf(msg, sizeof msg, "malformed %s message: %s", d->name, why);
        ob__grpc_finish_unary(c, OB_ERR_INVALID_ARG, msg, NULL);
        return;
    }
    if (ob__grpc_methods[c->method].fn) {
        ob__grpc_reply r;
        memset(&r, 0, sizeof r);
        ob_status rc = ob__grpc_methods[c->method].fn(s->svc, m, bearer, &r);
        protobuf_c_message_free_unpacked(m, NULL);
        ob__grpc_finish_unary(c, rc, r.err.msg, r.bb);
        return;
    }
    ob__grpc_stream_open(s, c, m);
}

static void *handler_main(void *arg)
{
    ob_grpc_server *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        tag *t = ev.tag;
        tag_taken(t);
        call_ctx *c = t->ctx;
        switch (t->kind) {
        case TAG_SHUTDOWN:
            pthread_mutex_lock(&s->mu);
            s->server_shutdown_done = 1;
            maybe_shutdown_cq(s);
            pthread_mutex_unlock(&s->mu);
            break;
        case TAG_NEW:
            if (!ev.success) {
                ob__grpc_ctx_free(c);
                break;
            }
            request_next(s, c->method); /* keep one request armed per method */
            handle_new(s, c);
            break;
        case TAG_DONE:
            ob__grpc_ctx_free(c);
            break;
        default:
            if (c->reflecting)
                ob__grpc_reflect_event(s, c, t->kind, ev.success);
            else
                ob__grpc_stream_event(s, c, t->kind, ev.success);
        }
    }
    return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------ */

/* The credentials of the main port: TLS with cfg->tls (and client certificates when it has a
 * client CA), else plaintext. NULL when gRPC cannot make them. */
static grpc_server_credentials *server_credentials(const ob_tls_config *tls)
{
    if (!tls) return grpc_insecure_server_credentials_create();
    grpc_ssl_pem_key_cert_pair pair = {tls->key_pem, tls->cert_pem};
    grpc_ssl_server_certificate_config *config =
        grpc_ssl_server_certificate_config_create(tls->client_ca_pem, &pair, 1);
    if (!config) return NULL;
    grpc_ssl_server_credentials_options *options =
        grpc_ssl_server_credentials_create_options_using_config(
            tls->client_ca_pem ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            config); /* takes config */
    return options ? grpc_ssl_server_credentials_create_with_options(options) : NULL;
}

/* Adds addr with creds (taken) to the server; the port, or 0 with err set. */
static int add_port(grpc_server *server, const char *addr, grpc_server_credentials *creds,
                    const char *what, ob_err *err)
{
    if (!creds) {
        OB_ERR(err, OB_ERR_IO, "gRPC: cannot make the %s credentials", what);
        return 0;
    }
    int port = grpc_server_add_http2_port(server, addr, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) OB_ERR(err, OB_ERR_IO, "gRPC: cannot listen on %s (%s)", addr, what);
    return port;
}

ob_status ob_grpc_server_start(ob_grpc_server **out, ob_service *svc,
                               const ob_grpc_server_config *cfg, int *bound_port, int *plain_port,
                               ob_err *err)
{
    *out = NULL;
    const char *addr = cfg->addr, *token = cfg->token;
    int threads = cfg->threads > 0 ? cfg->threads : 4, max_streams = cfg->max_streams;
    ob_grpc_server *s = calloc(1, sizeof *s);
    if (!s) return OB_ERR(err, OB_ERR_NOMEM, "allocating the gRPC server");
    grpc_init();
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->watch_cv, NULL);
    s->svc = svc;
    s->max_streams = max_streams > 0 ? max_streams : OB_SERVERS_MAX_STREAMS;
    s->t_shutdown = (tag){TAG_SHUTDOWN, NULL};
    if (token && token[0] && !(s->token = strdup(token))) goto oom;
    s->threads = calloc((size_t)threads, sizeof *s->threads);
    s->pinned = calloc((size_t)s->max_streams * OB__GRPC_PUMPERS, sizeof *s->pinned);
    if (!s->threads || !s->pinned) goto oom;
    ob_status rrc = ob__reflection_create(&s->reflection, ob_protoset, ob_protoset_len, err);
    if (rrc != OB_OK) {
        free(s->threads);
        free(s->pinned);
        free(s->token);
        pthread_cond_destroy(&s->watch_cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        grpc_shutdown();
        return OB_WRAP(err, rrc, "gRPC: the compiled-in descriptor set");
    }

    grpc_arg args[2];
    memset(args, 0, sizeof args);
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    size_t max_message = ob_service_max_submit_bytes(svc, 0); /* a submit with its upload */
    args[0].value.integer = max_message > INT_MAX ? INT_MAX : (int)max_message;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[1].value.integer = 0;
    grpc_channel_args ch_args = {2, args};
    s->server = grpc_server_create(&ch_args, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    for (int m = 0; m < M_COUNT; m++) {
        s->registered[m] = grpc_server_register_method(
            s->server, ob__grpc_method_paths[m], NULL,
            is_bidi((method_id)m) ? GRPC_SRM_PAYLOAD_NONE
                                  : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
        if (!s->registered[m]) {
            OB_ERR(err, OB_ERR_IO, "registering %s", ob__grpc_method_paths[m]);
            goto fail_server;
        }
    }
    int port = add_port(s->server, addr, server_credentials(cfg->tls),
                        cfg->tls ? "TLS" : "plaintext", err);
    if (port == 0) goto fail_server;
    if (bound_port) *bound_port = port;
    if (cfg->tls && cfg->plain_addr) {
        int p2 = add_port(s->server, cfg->plain_addr, grpc_insecure_server_credentials_create(),
                          "plaintext, for workers", err);
        if (p2 == 0) goto fail_server;
        if (plain_port) *plain_port = p2;
    }
    grpc_server_start(s->server);
    for (int m = 0; m < M_COUNT; m++)
        request_next(s, (method_id)m);
    request_next(s, M_UNKNOWN);
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&s->threads[i], NULL, handler_main, s) != 0) break;
        s->n_threads++;
    }
    for (int i = 0; i < OB__GRPC_PUMPERS; i++) {
        s->pumpers[i] = (ob__grpc_pumper){s, i};
        if (pthread_create(&s->watchers[i], NULL, ob__grpc_watcher_main, &s->pumpers[i]) != 0)
            break;
        s->watcher_started++;
    }
    if (s->n_threads == 0 || !s->watcher_started) {
        ob_grpc_server_stop(s);
        return OB_ERR(err, OB_ERR_IO, "gRPC: cannot start the handler threads");
    }
    *out = s;
    return OB_OK;
fail_server:
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
    grpc_completion_queue_pluck(s->cq, &s->t_shutdown, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->cq);
    ob__reflection_destroy(s->reflection);
    free(s->threads);
    free(s->pinned);
    free(s->token);
    pthread_cond_destroy(&s->watch_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
    return err ? err->code : OB_ERR_IO;
oom:
    free(s->threads);
    free(s->pinned);
    free(s->token);
    pthread_cond_destroy(&s->watch_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
    return OB_ERR(err, OB_ERR_NOMEM, "allocating the gRPC server");
}

void ob_grpc_server_stop(ob_grpc_server *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->shutting_down = 1;
    s->watch_stop = 1;
    pthread_cond_broadcast(&s->watch_cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->watcher_started; i++)
        pthread_join(s->watchers[i], NULL);
    grpc_server_shutdown_and_notify(s->server, s->cq, tag_handed(&s->t_shutdown));
    grpc_server_cancel_all_calls(s->server);
    for (int i = 0; i < s->n_threads; i++)
        pthread_join(s->threads[i], NULL);
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    ob__reflection_destroy(s->reflection);
    free(s->threads);
    free(s->pinned);
    free(s->token);
    pthread_cond_destroy(&s->watch_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
}
