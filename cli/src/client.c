/* obctl_client: dispatch to the transport's table (client_grpc.c, client_rest.c). */
#include "client_internal.h"

#include <stdio.h>
#include <stdlib.h>

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
        err->code = OB_ERR_COMM;
        snprintf(err->msg, sizeof err->msg,
                 "cannot reach onebitd at %.200s (%.120s); is it running? (start it with "
                 "onebitd, or point --server / ONEBIT_SERVER at it)",
                 c->target, detail);
    }
    return OB_ERR_COMM;
}

ob_status obctl_submit(obctl_client *c, const char *spec, size_t len, int world_size,
                       int max_restarts, const char *request_id, const char *labels,
                       const char *deadline, ob_job *out, ob_err *err)
{
    return c->ops->submit(c, spec, len, world_size, max_restarts, request_id, labels, deadline, out,
                          err);
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
