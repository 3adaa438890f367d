/* Front end of the communicator interface: argument checks, byte counters, dispatch. */
#include "comm_internal.h"
#include "internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

ob_comm *ob__comm_alloc(const ob__comm_ops *ops, const char *backend, ob_mem_kind mem)
{
    ob_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ops = ops;
    c->backend = backend;
    c->mem = mem;
    c->size = 1;
    if (pthread_mutex_init(&c->count_mu, NULL) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

void ob_comm_destroy(ob_comm *comm)
{
    if (!comm) return;
    if (comm->ops && comm->ops->destroy) comm->ops->destroy(comm);
    pthread_mutex_destroy(&comm->count_mu);
    free(comm);
}

int ob_comm_rank(const ob_comm *comm)
{
    return comm->rank;
}

int ob_comm_size(const ob_comm *comm)
{
    return comm->size;
}

const char *ob_comm_backend(const ob_comm *comm)
{
    return comm->backend;
}

ob_mem_kind ob_comm_memory(const ob_comm *comm)
{
    return comm->mem;
}

void *ob_comm_stream(const ob_comm *comm)
{
    return comm->stream;
}

int ob_comm_any_thread(const ob_comm *comm)
{
    return comm->any_thread;
}

/* The counters may be read on one thread while another communicates (the optimizer's
 * communication thread): every access holds count_mu. Reading is logically const. */
static pthread_mutex_t *count_lock(const ob_comm *c)
{
    pthread_mutex_t *mu = (pthread_mutex_t *)&c->count_mu;
    pthread_mutex_lock(mu);
    return mu;
}

static ob_status count(ob_comm *c, ob_comm_op op, uint64_t bytes, ob_status st)
{
    if (st != OB_OK) return st;
    for (; c; c = c->parent) { /* a split communicator's traffic is its source's too */
        pthread_mutex_t *mu = count_lock(c);
        c->counters.bytes_sent += bytes;
        c->counters.op_bytes[op] += bytes;
        c->counters.op_calls[op] += 1;
        pthread_mutex_unlock(mu);
    }
    return OB_OK;
}

ob_status ob_comm_allreduce_sum_f32(ob_comm *comm, float *buf, size_t n, ob_err *err)
{
    if (n > 0 && !buf) return OB_ERR(err, OB_ERR_INVALID_ARG, "allreduce: NULL buffer");
    uint64_t sent = 0;
    ob_status st = n ? comm->ops->allreduce_sum_f32(comm, buf, n, &sent, err) : OB_OK;
    return count(comm, OB_COMM_ALLREDUCE, sent, st);
}

ob_status ob_comm_alltoall(ob_comm *comm, const void *send, void *recv, size_t bytes_per_peer,
                           ob_err *err)
{
    if (bytes_per_peer > 0 && (!send || !recv))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "alltoall: NULL buffer");
    uint64_t sent = 0;
    ob_status st =
        bytes_per_peer ? comm->ops->alltoall(comm, send, recv, bytes_per_peer, &sent, err) : OB_OK;
    return count(comm, OB_COMM_ALLTOALL, sent, st);
}

ob_status ob_comm_allgather(ob_comm *comm, const void *send, void *recv, size_t bytes_per_peer,
                            ob_err *err)
{
    if (bytes_per_peer > 0 && (!send || !recv))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "allgather: NULL buffer");
    uint64_t sent = 0;
    ob_status st =
        bytes_per_peer ? comm->ops->allgather(comm, send, recv, bytes_per_peer, &sent, err) : OB_OK;
    return count(comm, OB_COMM_ALLGATHER, sent, st);
}

ob_status ob_comm_shift(ob_comm *comm, const void *send, void *recv, size_t bytes, ob_err *err)
{
    if (bytes > 0 && (!send || !recv)) return OB_ERR(err, OB_ERR_INVALID_ARG, "shift: NULL buffer");
    uint64_t sent = 0;
    ob_status st = bytes ? comm->ops->shift(comm, send, recv, bytes, &sent, err) : OB_OK;
    return count(comm, OB_COMM_SHIFT, sent, st);
}

ob_status ob_comm_bcast(ob_comm *comm, void *buf, size_t bytes, int root, ob_err *err)
{
    if (root < 0 || root >= comm->size)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "bcast: root %d outside [0, %d)", root, comm->size);
    if (bytes > 0 && !buf) return OB_ERR(err, OB_ERR_INVALID_ARG, "bcast: NULL buffer");
    uint64_t sent = 0;
    ob_status st = bytes ? comm->ops->bcast(comm, buf, bytes, root, &sent, err) : OB_OK;
    return count(comm, OB_COMM_BCAST, sent, st);
}

ob_status ob_comm_split(ob_comm *comm, int color, int key, ob_comm **out, ob_err *err)
{
    *out = NULL;
    if (color < 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "communicator split: color %d", color);
    if (!comm->ops->split)
        return OB_ERR(err, OB_ERR_UNSUPPORTED, "the %s communicator cannot be split",
                      comm->backend);
    ob_status st = comm->ops->split(comm, color, key, out, err);
    if (st == OB_OK) (*out)->parent = comm;
    return st;
}

/* Rank r's node under OB_COMM_NODES_ENV = text ("M" or "M1,M2,..."; see ob_comm_node_map):
 * the first rank of the node that holds r, of n ranks. */
static ob_status node_from_env(const char *text, int r, int n, int *node, ob_err *err)
{
    long first = 0, m = 0, sum = 0;
    int count = 0, found = 0;
    for (const char *p = text;; p++) {
        size_t len = strspn(p, "0123456789");
        if (len == 0 || len > 5 || (p[len] != ',' && p[len] != '\0') || (m = atol(p)) < 1)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "%s=%.40s: expected the ranks a node (\"2\") or those of each node "
                          "in rank order (\"3,1\"), each at least 1",
                          OB_COMM_NODES_ENV, text);
        if (!found && r < sum + m) {
            first = sum;
            found = 1;
        }
        sum += m;
        count++;
        p += len;
        if (!*p) break;
    }
    if (count == 1) { /* one size for every node */
        *node = (int)((long)r / m * m);
        return OB_OK;
    }
    if (sum != n)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "%s=%.40s: nodes of %ld ranks in all, not the %d ranks of the job",
                      OB_COMM_NODES_ENV, text, sum, n);
    *node = (int)first;
    return OB_OK;
}

ob_status ob_comm_node_map(ob_comm *comm, int *node, const char **source, ob_err *err)
{
    const char *env = comm->parent ? NULL : getenv(OB_COMM_NODES_ENV), *src = NULL;
    int mine = 0;
    ob_status st;
    if (env && env[0]) {
        src = OB_COMM_NODES_ENV;
        st = node_from_env(env, comm->rank, comm->size, &mine, err);
    } else if (comm->ops->node) {
        st = comm->ops->node(comm, &mine, &src, err);
    } else {
        return OB_ERR(err, OB_ERR_UNSUPPORTED, "the %s communicator cannot say where its ranks run",
                      comm->backend);
    }
    /* Every rank learns every rank's own answer: they agree even where one saw another
     * environment. */
    if (st == OB_OK) st = ob_comm_allgather(comm, &mine, node, sizeof mine, err);
    if (st == OB_OK && source) *source = src;
    return st;
}

ob_status ob_comm_barrier(ob_comm *comm, ob_err *err)
{
    return count(comm, OB_COMM_BARRIER, 0, comm->ops->barrier(comm, err));
}

void ob_comm_get_counters(const ob_comm *comm, ob_comm_counters *out)
{
    pthread_mutex_t *mu = count_lock(comm);
    *out = comm->counters;
    pthread_mutex_unlock(mu);
}

uint64_t ob_comm_bytes_sent(const ob_comm *comm)
{
    pthread_mutex_t *mu = count_lock(comm);
    uint64_t bytes = comm->counters.bytes_sent;
    pthread_mutex_unlock(mu);
    return bytes;
}

ob_status ob_comm_set_timeout(ob_comm *comm, double seconds, ob_err *err)
{
    if (!(seconds >= 0.0) || !isfinite(seconds))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "communicator timeout %g: must be >= 0 seconds",
                      seconds);
    if (!comm->ops->set_timeout)
        return OB_ERR(err, OB_ERR_UNSUPPORTED, "the %s communicator has no collective timeout",
                      comm->backend);
    return comm->ops->set_timeout(comm, seconds, err);
}

void ob_comm_abort(ob_comm *comm, int code)
{
    comm->ops->abort(comm, code);
}

ob_status ob_comm_control_start(ob_comm *comm, const int32_t *values, int n, ob_err *err)
{
    if (!comm->ops->control_start)
        return OB_ERR(err, OB_ERR_UNSUPPORTED, "control reductions: not on the %s backend",
                      comm->backend);
    if (comm->ctl_pending)
        return OB_ERR(err, OB_ERR_STATE, "control reduction: one is already in flight");
    if (n < 1 || n > OB_COMM_CONTROL_MAX || !values)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "control reduction: %d values (1 .. %d)", n,
                      OB_COMM_CONTROL_MAX);
    memcpy(comm->ctl_buf, values, (size_t)n * sizeof *values);
    comm->ctl_n = n;
    ob_status st = count(comm, OB_COMM_CONTROL, 0, comm->ops->control_start(comm, err));
    if (st == OB_OK) comm->ctl_pending = 1;
    return st;
}

ob_status ob_comm_control_finish(ob_comm *comm, int32_t *sums, ob_err *err)
{
    if (!comm->ctl_pending) return OB_ERR(err, OB_ERR_STATE, "control reduction: none in flight");
    comm->ctl_pending = 0;
    ob_status st = comm->ops->control_finish(comm, err);
    if (st == OB_OK && sums) memcpy(sums, comm->ctl_buf, (size_t)comm->ctl_n * sizeof *sums);
    return st;
}

int ob_comm_control_pending(const ob_comm *comm)
{
    return comm->ctl_pending;
}
