/* The gRPC client over the C core: one completion queue per call, used with pluck. */
#include "onebit/rpc_client.h"
#include "onebit/base.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ob_rpc_client {
    grpc_channel *channel;
    char *auth; /* "Bearer TOKEN" or NULL */
};

ob_status ob_rpc_client_create(ob_rpc_client **out, const char *target, const char *token,
                               ob_err *err)
{
    return ob_rpc_client_create_tls(out, target, token, NULL, err);
}

/* The channel to target: plaintext, or TLS checking the server against tls. */
static grpc_channel *make_channel(const char *target, const ob_rpc_tls *tls)
{
    if (!tls) {
        grpc_channel_credentials *creds = grpc_insecure_credentials_create();
        grpc_channel *ch = grpc_channel_create(target, creds, NULL);
        grpc_channel_credentials_release(creds);
        return ch;
    }
    grpc_ssl_pem_key_cert_pair pair = {tls->key_pem, tls->cert_pem};
    grpc_channel_credentials *creds = grpc_ssl_credentials_create(
        tls->ca_pem, tls->cert_pem && tls->key_pem ? &pair : NULL, NULL, NULL);
    if (!creds) return NULL;
    grpc_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.type = GRPC_ARG_STRING;
    arg.key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    arg.value.string = (char *)tls->server_name;
    grpc_channel_args args = {tls->server_name && tls->server_name[0] ? 1u : 0u, &arg};
    grpc_channel *ch = grpc_channel_create(target, creds, &args);
    grpc_channel_credentials_release(creds);
    return ch;
}

ob_status ob_rpc_client_create_tls(ob_rpc_client **out, const char *target, const char *token,
                                   const ob_rpc_tls *tls, ob_err *err)
{
    *out = NULL;
    ob_rpc_client *c = calloc(1, sizeof *c);
    if (!c) return OB_ERR(err, OB_ERR_NOMEM, "allocating a gRPC client");
    grpc_init();
    if (token && token[0]) {
        size_t n = strlen(token) + 8;
        c->auth = malloc(n);
        if (!c->auth) {
            ob_rpc_client_destroy(c);
            return OB_ERR(err, OB_ERR_NOMEM, "allocating a gRPC client");
        }
        snprintf(c->auth, n, "Bearer %s", token);
    }
    c->channel = make_channel(target, tls);
    if (!c->channel) {
        ob_rpc_client_destroy(c);
        return OB_ERR(err, OB_ERR_COMM, "cannot create a gRPC channel to %s", target);
    }
    *out = c;
    return OB_OK;
}

void ob_rpc_client_destroy(ob_rpc_client *c)
{
    if (!c) return;
    if (c->channel) grpc_channel_destroy(c->channel);
    free(c->auth);
    free(c);
    grpc_shutdown();
}

static gpr_timespec deadline_in(int ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static int wait_tag(grpc_completion_queue *cq, void *tag, int ms)
{
    grpc_event ev = grpc_completion_queue_pluck(cq, tag, deadline_in(ms + 5000), NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static void shutdown_cq(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

/* Copies a received message into malloc'd bytes. */
static int take_message(grpc_byte_buffer *bb, void **out, size_t *len)
{
    grpc_byte_buffer_reader rd;
    *out = NULL;
    *len = 0;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) return -1;
    grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    size_t n = GRPC_SLICE_LENGTH(s);
    if (n) {
        *out = malloc(n);
        if (!*out) {
            grpc_slice_unref(s);
            return -1;
        }
        memcpy(*out, GRPC_SLICE_START_PTR(s), n);
    }
    *len = n;
    grpc_slice_unref(s);
    return 0;
}

typedef struct call_state {
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata md;
    int has_md;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    grpc_byte_buffer *req_bb;
} call_state;

static ob_status call_begin(ob_rpc_client *c, call_state *cs, const char *method, const void *req,
                            size_t req_len, int timeout_ms, int with_status, ob_err *err)
{
    memset(cs, 0, sizeof *cs);
    cs->cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice m = grpc_slice_from_copied_string(method);
    cs->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cs->cq, m, NULL,
                                        deadline_in(timeout_ms), NULL);
    grpc_slice_unref(m);
    grpc_metadata_array_init(&cs->initial_md);
    grpc_metadata_array_init(&cs->trailing_md);
    cs->details = grpc_empty_slice();
    grpc_slice body = grpc_slice_from_copied_buffer(req, req_len);
    cs->req_bb = grpc_raw_byte_buffer_create(&body, 1);
    grpc_slice_unref(body);
    if (c->auth) {
        cs->md.key = grpc_slice_from_static_string("authorization");
        cs->md.value = grpc_slice_from_copied_string(c->auth);
        cs->has_md = 1;
    }
    grpc_op ops[5];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].data.send_initial_metadata.count = c->auth ? 1 : 0;
    ops[n].data.send_initial_metadata.metadata = c->auth ? &cs->md : NULL;
    n++;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = cs->req_bb;
    n++;
    ops[n].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    n++;
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n].data.recv_initial_metadata.recv_initial_metadata = &cs->initial_md;
    n++;
    if (grpc_call_start_batch(cs->call, ops, n, cs, NULL) != GRPC_CALL_OK)
        return OB_ERR(err, OB_ERR_COMM, "gRPC %s: cannot start the call", method);
    if (with_status) {
        grpc_op st;
        memset(&st, 0, sizeof st);
        st.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        st.data.recv_status_on_client.trailing_metadata = &cs->trailing_md;
        st.data.recv_status_on_client.status = &cs->status;
        st.data.recv_status_on_client.status_details = &cs->details;
        if (grpc_call_start_batch(cs->call, &st, 1, &cs->status, NULL) != GRPC_CALL_OK)
            return OB_ERR(err, OB_ERR_COMM, "gRPC %s: cannot start the call", method);
    }
    return OB_OK;
}

static void call_end(call_state *cs, ob_rpc_result *res)
{
    if (res) {
        res->code = (int)cs->status;
        size_t n = GRPC_SLICE_LENGTH(cs->details);
        if (n >= sizeof res->details) n = sizeof res->details - 1;
        memcpy(res->details, GRPC_SLICE_START_PTR(cs->details), n);
        res->details[n] = '\0';
    }
    if (cs->call) grpc_call_unref(cs->call);
    grpc_slice_unref(cs->details);
    if (cs->has_md) grpc_slice_unref(cs->md.value);
    grpc_metadata_array_destroy(&cs->initial_md);
    grpc_metadata_array_destroy(&cs->trailing_md);
    if (cs->req_bb) grpc_byte_buffer_destroy(cs->req_bb);
    if (cs->cq) shutdown_cq(cs->cq);
}

ob_status ob_rpc_unary(ob_rpc_client *c, const char *method, const void *req, size_t req_len,
                       void **resp, size_t *resp_len, ob_rpc_result *res, int timeout_ms,
                       ob_err *err)
{
    call_state cs;
    *resp = NULL;
    *resp_len = 0;
    memset(res, 0, sizeof *res);
    ob_status rc = call_begin(c, &cs, method, req, req_len, timeout_ms, 1, err);
    grpc_byte_buffer *bb = NULL;
    if (rc == OB_OK) {
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &bb;
        if (grpc_call_start_batch(cs.call, &op, 1, &bb, NULL) != GRPC_CALL_OK)
            rc = OB_ERR(err, OB_ERR_COMM, "gRPC %s: cannot start the call", method);
        else {
            wait_tag(cs.cq, &cs, timeout_ms);
            wait_tag(cs.cq, &bb, timeout_ms);
            wait_tag(cs.cq, &cs.status, timeout_ms);
        }
    }
    if (rc == OB_OK && bb) {
        if (cs.status == GRPC_STATUS_OK && take_message(bb, resp, resp_len) != 0)
            rc = OB_ERR(err, OB_ERR_NOMEM, "gRPC %s: reading the answer", method);
        grpc_byte_buffer_destroy(bb);
    }
    call_end(&cs, res);
    return rc;
}

ob_status ob_rpc_server_stream(ob_rpc_client *c, const char *method, const void *req,
                               size_t req_len, ob_rpc_on_message on_msg, void *user,
                               ob_rpc_result *res, int timeout_ms, ob_err *err)
{
    call_state cs;
    memset(res, 0, sizeof *res);
    ob_status rc = call_begin(c, &cs, method, req, req_len, timeout_ms, 0, err);
    if (rc == OB_OK) wait_tag(cs.cq, &cs, timeout_ms);
    while (rc == OB_OK) {
        grpc_byte_buffer *bb = NULL;
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &bb;
        if (grpc_call_start_batch(cs.call, &op, 1, &bb, NULL) != GRPC_CALL_OK) break;
        if (!wait_tag(cs.cq, &bb, timeout_ms) || !bb) break;
        void *data = NULL;
        size_t len = 0;
        int stop = take_message(bb, &data, &len) != 0 || on_msg(data, len, user) != 0;
        free(data);
        grpc_byte_buffer_destroy(bb);
        if (stop) {
            grpc_call_cancel(cs.call, NULL);
            break;
        }
    }
    grpc_op st;
    memset(&st, 0, sizeof st);
    st.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    st.data.recv_status_on_client.trailing_metadata = &cs.trailing_md;
    st.data.recv_status_on_client.status = &cs.status;
    st.data.recv_status_on_client.status_details = &cs.details;
    if (cs.call && grpc_call_start_batch(cs.call, &st, 1, &cs.status, NULL) == GRPC_CALL_OK)
        wait_tag(cs.cq, &cs.status, timeout_ms);
    call_end(&cs, res);
    return rc;
}
