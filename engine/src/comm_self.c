/* A world of one process: every collective is the identity (or a local copy) and sends
 * nothing. Lets single-process tools and tests run the same code paths without MPI. */
#include "comm_internal.h"
#include "internal.h"

#include <string.h>

static ob_status self_allreduce(ob_comm *c, float *buf, size_t count, uint64_t *sent, ob_err *err)
{
    return OB_OK;
}

static ob_status self_copy(ob_comm *c, const void *send, void *recv, size_t bytes, uint64_t *sent,
                           ob_err *err)
{
    if (send != recv) memmove(recv, send, bytes);
    return OB_OK;
}

static ob_status self_bcast(ob_comm *c, void *buf, size_t bytes, int root, uint64_t *sent,
                            ob_err *err)
{
    return OB_OK;
}

static ob_status self_barrier(ob_comm *c, ob_err *err)
{
    return OB_OK;
}

static void self_abort(ob_comm *c, int code)
{
    /* Nobody else to stop: the caller's own error handling ends the process. */
}

/* A world of one: the values are their own sums. */
static ob_status self_control(ob_comm *c, ob_err *err)
{
    return OB_OK;
}

static ob_status self_split(ob_comm *c, int color, int key, ob_comm **out, ob_err *err)
{
    (void)c, (void)color, (void)key;
    return ob_comm_create_self(out, err);
}

static ob_status self_node(ob_comm *c, int *node, const char **source, ob_err *err)
{
    (void)c, (void)err;
    *node = 0;
    *source = "self";
    return OB_OK;
}

static const ob__comm_ops self_ops = {
    .allreduce_sum_f32 = self_allreduce,
    .alltoall = self_copy,
    .allgather = self_copy,
    .shift = self_copy,
    .bcast = self_bcast,
    .barrier = self_barrier,
    .control_start = self_control,
    .control_finish = self_control,
    .split = self_split,
    .node = self_node,
    .abort = self_abort,
    .destroy = NULL,
};

ob_status ob_comm_create_self(ob_comm **out, ob_err *err)
{
    *out = ob__comm_alloc(&self_ops, "self", OB_MEM_HOST);
    if (!*out) return OB_ERR(err, OB_ERR_NOMEM, "self communicator");
    (*out)->any_thread = 1; /* it makes no MPI calls */
    return OB_OK;
}

#ifndef ONEBIT_HAVE_CUDA
ob_status ob_comm_create_nccl(ob_comm **out, int device, ob_err *err)
{
    *out = NULL;
    return OB_ERR(err, OB_ERR_UNSUPPORTED,
                  "the NCCL communicator needs a build with CUDA (configure with ONEBIT_CUDA=ON)");
}
#endif

#ifndef ONEBIT_HAVE_CUDA
ob_status ob_comm_local_device(int *device, ob_err *err)
{
    *device = -1;
    return OB_ERR(err, OB_ERR_UNSUPPORTED,
                  "device: cuda needs a build with CUDA (configure with ONEBIT_CUDA=ON)");
}
#endif
