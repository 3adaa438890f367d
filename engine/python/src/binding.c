/* The C side of the `onebit` Python package (binding.h): the engine's optimizer, communicators,
 * checkpoints and progress reports behind a flat ABI for ctypes. Nothing here computes what the
 * engine computes: every step is ob_optim_step, every file is written by libonebit_checkpoint,
 * every report line by the wire's ob_report_to_json. */
#include "binding.h"

#include "onebit/base.h"
#include "onebit/checkpoint.h"
#include "onebit/compress_cuda.h"
#include "onebit/jobspec.h"
#include "onebit/optim.h"
#include "onebit/optim_ckpt.h"
#include "onebit/report.h"
#include "onebit/rpc_client.h"

#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct obpy_optim {
    ob_optim *opt;
    ob_comm *comm; /* borrowed: the optimizer's (its memory holds params) */
    ob_comm *ctrl; /* borrowed: host memory, the same ranks */
    float *params; /* borrowed */
    size_t d;
    ob_optim_config cfg;
    char *optim_json; /* the canonical optimizer section (the checkpoints' spec) */
    ob_ckpt_tensor *tensors;
    size_t num_tensors;
    uint64_t bytes_warmup, bytes_compression;
    int rollbacks; /* taken by this run, its checkpoints' included (obpy_optim_rolled_back) */
    /* Host mirrors of the state for checkpoints of a device optimizer (NULL on the host). */
    float *h_params, *h_m, *h_v, *h_we, *h_se, *h_ts;
    ob_ckpt_written *written; /* rank 0: the checkpoints it committed (retention reads none) */
};

static int g_initialised_mpi; /* obpy_init called MPI_Init_thread: obpy_finalize may end it */

/* The status, with the message copied out for the caller. */
static int fail(const ob_err *e, ob_status st, char *err, size_t cap)
{
    if (err && cap) snprintf(err, cap, "%s", e->msg[0] ? e->msg : ob_strerror(st));
    return (int)st;
}

#define RET(st_expr)                                                                               \
    do {                                                                                           \
        ob_status st_ = (st_expr);                                                                 \
        return st_ == OB_OK ? 0 : fail(&e, st_, err, cap);                                         \
    } while (0)

int obpy_abi_version(void)
{
    return OBPY_ABI_VERSION;
}
int obpy_cuda_built(void)
{
#ifdef ONEBIT_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}
int obpy_cuda_device_count(void)
{
    return ob_cuda_device_count();
}
const char *obpy_version(void)
{
    return ONEBIT_VERSION;
}
void obpy_free(void *p)
{
    free(p);
}

/* --- the process --------------------------------------------------------------------------- */

int obpy_init(int *rank, int *size, int *local_rank, int *local_size, char *err, size_t cap)
{
    ob_err e = {0};
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) RET(OB_ERR(&e, OB_ERR_STATE, "MPI was finalised: onebit.init() comes first"));
    if (!inited) {
        int provided = 0;
        /* The transport settings onebit-worker starts MPI with (onebit/comm.h). */
        ob_comm_mpi_env_defaults();
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            RET(OB_ERR(&e, OB_ERR_COMM, "MPI_Init_thread failed"));
        g_initialised_mpi = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
        MPI_SUCCESS)
        RET(OB_ERR(&e, OB_ERR_COMM, "MPI_Comm_split_type (the ranks of this node) failed"));
    MPI_Comm_rank(node, local_rank);
    MPI_Comm_size(node, local_size);
    MPI_Comm_free(&node);
    return 0;
}

void obpy_finalize(void)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (g_initialised_mpi && !finalized) MPI_Finalize();
}

void obpy_abort(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
}

/* --- communicators ------------------------------------------------------------------------- */

int obpy_comm_create(ob_comm **out, const char *kind, int device, char *err, size_t cap)
{
    ob_err e = {0};
    *out = NULL;
    if (!strcmp(kind, "mpi")) RET(ob_comm_create_mpi(out, &e));
    if (!strcmp(kind, "self")) RET(ob_comm_create_self(out, &e));
    if (!strcmp(kind, "nccl")) RET(ob_comm_create_nccl(out, device, &e));
    RET(OB_ERR(&e, OB_ERR_INVALID_ARG, "communicator '%s': mpi, self or nccl", kind));
}

void obpy_comm_destroy(ob_comm *comm)
{
    ob_comm_destroy(comm);
}

int obpy_comm_bcast(ob_comm *comm, void *buf, size_t bytes, int root, char *err, size_t cap)
{
    ob_err e = {0};
    RET(ob_comm_bcast(comm, buf, bytes, root, &e));
}

int obpy_comm_sum(ob_comm *comm, double *v, int n, char *err, size_t cap)
{
    ob_err e = {0};
    float f[16];
    if (n < 1 || n > 16) RET(OB_ERR(&e, OB_ERR_INVALID_ARG, "sum of %d values (1 .. 16)", n));
    for (int i = 0; i < n; i++)
        f[i] = (float)v[i];
    ob_status st = ob_comm_allreduce_sum_f32(comm, f, (size_t)n, &e);
    for (int i = 0; st == OB_OK && i < n; i++)
        v[i] = (double)f[i];
    RET(st);
}

int obpy_comm_barrier(ob_comm *comm, char *err, size_t cap)
{
    ob_err e = {0};
    RET(ob_comm_barrier(comm, &e));
}

/* --- the optimizer's spec ------------------------------------------------------------------- */

/* Parses the spec document and takes its optimizer; total_steps 0 lifts the latest freeze. */
static ob_status parse_optim(const char *spec_json, long total_steps, ob_jobspec *spec, ob_err *err)
{
    if (!spec_json) return OB_ERR(err, OB_ERR_INVALID_ARG, "no optimizer spec");
    ob_status st = ob_jobspec_parse(spec, spec_json, strlen(spec_json), OB_SPEC_JSON, err);
    if (st != OB_OK) return st;
    if (total_steps == 0) spec->optim.freeze_max_step = 0;
    return OB_OK;
}

/* The canonical optimizer section of spec, with lr, as a malloc'd JSON string. */
static ob_status optim_json(const ob_jobspec *spec, char **out, ob_err *err)
{
    *out = NULL;
    char *full = NULL;
    ob_status st = ob_jobspec_to_json(spec, &full, err);
    if (st != OB_OK) return st;
    json_error_t je;
    json_t *root = json_loads(full, 0, &je);
    free(full);
    json_t *o = root ? json_object() : NULL;
    if (o) {
        json_object_set(o, "framework", json_string("torch"));
        json_object_set(o, "optimizer", json_object_get(root, "optimizer"));
        json_object_set(o, "lr", json_object_get(root, "lr"));
        *out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    }
    json_decref(o);
    json_decref(root);
    return *out ? OB_OK : OB_ERR(err, OB_ERR_NOMEM, "optimizer spec");
}

int obpy_optim_check(const char *spec_json, long total_steps, char *canon, size_t cap_canon,
                     char *err, size_t cap)
{
    ob_err e = {0};
    ob_jobspec spec;
    ob_status st = parse_optim(spec_json, total_steps, &spec, &e);
    if (st != OB_OK) RET(st);
    if (!canon) return 0;
    char *js = NULL;
    if ((st = optim_json(&spec, &js, &e)) != OB_OK) RET(st);
    if (strlen(js) >= cap_canon)
        st = OB_ERR(&e, OB_ERR_INVALID_ARG, "spec too long");
    else
        memcpy(canon, js, strlen(js) + 1);
    free(js);
    RET(st);
}

/* --- the optimizer -------------------------------------------------------------------------- */

/* The tensor index from the caller's tables, checked as a checkpoint reader checks one. */
static ob_status make_index(obpy_optim *o, const size_t *offsets, const char *names,
                            const uint32_t *ndims, const uint64_t *dims, size_t n, ob_err *err)
{
    if (n == 0 || n > OB_CKPT_MAX_TENSORS)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%zu tensors (1 .. %d)", n, OB_CKPT_MAX_TENSORS);
    o->tensors = calloc(n, sizeof *o->tensors);
    if (!o->tensors) return OB_ERR(err, OB_ERR_NOMEM, "tensor index of %zu entries", n);
    o->num_tensors = n;
    const char *name = names;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        ob_ckpt_tensor *t = &o->tensors[i];
        size_t len = strlen(name);
        if (len >= OB_CKPT_TENSOR_NAME_LEN)
            return OB_ERR(err, OB_ERR_INVALID_ARG, "tensor name '%.64s...' is longer than %d bytes",
                          name, OB_CKPT_TENSOR_NAME_LEN - 1);
        if (ndims[i] < 1 || ndims[i] > OB_CKPT_TENSOR_MAX_DIM)
            return OB_ERR(err, OB_ERR_INVALID_ARG, "tensor '%s' has %u dimensions (1 .. %d)", name,
                          ndims[i], OB_CKPT_TENSOR_MAX_DIM);
        memcpy(t->name, name, len + 1);
        t->offset = offsets[i];
        t->ndim = ndims[i];
        for (uint32_t j = 0; j < ndims[i]; j++)
            t->shape[j] = dims[k++];
        name += len + 1;
    }
    /* A bad table here is the caller's argument, not a damaged file. */
    ob_status st = ob_ckpt_check_tensors(o->tensors, n, o->d, "the parameters", err);
    if (st == OB_ERR_CORRUPT && err) err->code = st = OB_ERR_INVALID_ARG;
    return st;
}

static ob_status make_mirrors(obpy_optim *o, ob_err *err)
{
    if (ob_comm_memory(o->comm) != OB_MEM_DEVICE) return OB_OK;
    ob_optim_state s;
    ob_optim_get_state(o->opt, &s);
    o->h_params = malloc(o->d * sizeof(float));
    o->h_m = malloc(o->d * sizeof(float));
    o->h_v = malloc(o->d * sizeof(float));
    o->h_we = malloc((s.padded_size ? s.padded_size : 1) * sizeof(float));
    o->h_se = malloc((s.chunk_size ? s.chunk_size : 1) * sizeof(float));
    o->h_ts = malloc((s.track_stats_len ? s.track_stats_len : 1) * sizeof(float));
    if (!o->h_params || !o->h_m || !o->h_v || !o->h_we || !o->h_se || !o->h_ts)
        return OB_ERR(err, OB_ERR_NOMEM, "host copies of the optimizer's state (%zu floats)", o->d);
    return OB_OK;
}

int obpy_optim_create(obpy_optim **out, const char *spec_json, long total_steps, ob_comm *comm,
                      ob_comm *ctrl, float *params, size_t d, const size_t *offsets,
                      const char *names, const uint32_t *ndims, const uint64_t *dims, size_t n,
                      char *err, size_t cap)
{
    ob_err e = {0};
    *out = NULL;
    ob_jobspec spec;
    ob_status st = parse_optim(spec_json, total_steps, &spec, &e);
    if (st != OB_OK) RET(st);
    if (ob_comm_memory(ctrl) != OB_MEM_HOST || ob_comm_size(ctrl) != ob_comm_size(comm))
        RET(OB_ERR(&e, OB_ERR_INVALID_ARG,
                   "the control communicator must be a host one of the "
                   "same ranks"));
    obpy_optim *o = calloc(1, sizeof *o);
    if (!o) RET(OB_ERR(&e, OB_ERR_NOMEM, "optimizer"));
    o->comm = comm;
    o->ctrl = ctrl;
    o->params = params;
    o->d = d;
    o->cfg = spec.optim;
    o->cfg.seed = spec.seed; /* binsgdm's draws */
    if ((st = make_index(o, offsets, names, ndims, dims, n, &e)) != OB_OK) goto fail;
    if ((st = optim_json(&spec, &o->optim_json, &e)) != OB_OK) goto fail;
    if ((st = ob_optim_create(&o->opt, &o->cfg, comm, params, d, &e)) != OB_OK) goto fail;
    if (ob_comm_memory(comm) == OB_MEM_HOST &&
        (st = ob_optim_set_tensor_layout(o->opt, offsets, NULL, n, &e)) != OB_OK)
        goto fail;
    if ((st = make_mirrors(o, &e)) != OB_OK) goto fail;
    *out = o;
    return 0;
fail:
    obpy_optim_destroy(o);
    RET(st);
}

void obpy_optim_destroy(obpy_optim *o)
{
    if (!o) return;
    ob_optim_destroy(o->opt);
    free(o->optim_json);
    free(o->tensors);
    free(o->h_params);
    free(o->h_m);
    free(o->h_v);
    free(o->h_we);
    free(o->h_se);
    free(o->h_ts);
    ob_ckpt_written_destroy(o->written);
    free(o);
}

int obpy_optim_set_names(obpy_optim *o, const char *names, size_t n, char *err, size_t cap)
{
    ob_err e = {0};
    if (n != o->num_tensors)
        RET(OB_ERR(&e, OB_ERR_INVALID_ARG, "%zu names for %zu tensors", n, o->num_tensors));
    ob_ckpt_tensor *t = malloc(n * sizeof *t);
    if (!t) RET(OB_ERR(&e, OB_ERR_NOMEM, "tensor index"));
    memcpy(t, o->tensors, n * sizeof *t);
    const char *name = names;
    ob_status st = OB_OK;
    for (size_t i = 0; i < n && st == OB_OK; i++) {
        size_t len = strlen(name);
        if (len >= OB_CKPT_TENSOR_NAME_LEN)
            st = OB_ERR(&e, OB_ERR_INVALID_ARG, "tensor name '%.64s...' is longer than %d bytes",
                        name, OB_CKPT_TENSOR_NAME_LEN - 1);
        else
            memcpy(t[i].name, name, len + 1);
        name += len + 1;
    }
    if (st == OB_OK) st = ob_ckpt_check_tensors(t, n, o->d, "the parameters' names", &e);
    if (st == OB_ERR_CORRUPT) e.code = st = OB_ERR_INVALID_ARG;
    if (st == OB_OK) memcpy(o->tensors, t, n * sizeof *t);
    free(t);
    RET(st);
}

int obpy_optim_step(obpy_optim *o, const float *grad, double lr, void *stream, char *err,
                    size_t cap)
{
    ob_err e = {0};
    ob_optim_stats before;
    ob_optim_get_stats(o->opt, &before);
    int dev = ob_comm_memory(o->comm) == OB_MEM_DEVICE;
    void *own = ob_comm_stream(o->comm);
    ob_status st = OB_OK;
    if (dev && (st = ob_cuda_stream_wait(own, stream, &e)) != OB_OK) RET(st);
    if ((st = ob_optim_step(o->opt, grad, (float)lr, &e)) != OB_OK) RET(st);
    if (dev && (st = ob_cuda_stream_wait(stream, own, &e)) != OB_OK) RET(st);
    ob_optim_stats after;
    ob_optim_get_stats(o->opt, &after);
    if (before.phase == OB_PHASE_WARMUP)
        o->bytes_warmup += after.bytes_last_step;
    else
        o->bytes_compression += after.bytes_last_step;
    return 0;
}

int obpy_optim_overlap_active(const obpy_optim *o)
{
    return ob_optim_overlap_active(o->opt);
}

void obpy_optim_backward_begin(obpy_optim *o, const float *grad)
{
    ob_optim_backward_begin(o->opt, grad);
}

void obpy_optim_grad_ready(obpy_optim *o, size_t tensor)
{
    ob_optim_grad_hook(o->opt, tensor);
}

const char *obpy_optim_exchange_note(const obpy_optim *o)
{
    return ob_optim_exchange_note(o->opt);
}

void obpy_optim_stats(const obpy_optim *o, obpy_stats *out)
{
    ob_optim_stats s;
    ob_optim_get_stats(o->opt, &s);
    memset(out, 0, sizeof *out);
    out->step = s.step;
    out->freeze_step = s.freeze_step;
    out->refit_end = s.refit_end;
    out->bytes_sent = (int64_t)s.bytes_sent;
    out->bytes_last_step = (int64_t)s.bytes_last_step;
    out->bytes_warmup = (int64_t)o->bytes_warmup;
    out->bytes_compression = (int64_t)o->bytes_compression;
    out->phase = (int32_t)s.phase;
    out->warm_start = (int32_t)s.warm_start;
    out->freeze_ratio = s.freeze_ratio;
}

static double norm_ratio(double a, double b)
{
    if (!isfinite(a) || !isfinite(b)) return INFINITY;
    if (b > 0.0) return sqrt(a / b);
    return a > 0.0 ? INFINITY : 0.0;
}

/* As the worker's logged steps: this rank's sums over d, one reduction of four floats. */
int obpy_optim_health(obpy_optim *o, double out[3], char *err, size_t cap)
{
    ob_err e = {0};
    out[0] = out[1] = out[2] = NAN;
    ob_optim_state s;
    ob_optim_get_state(o->opt, &s);
    if (s.padded_size == 0) return 0;
    ob_optim_health_sums h;
    ob_status st = ob_optim_health_sums_local(o->opt, &h, &e);
    if (st != OB_OK) RET(st);
    double d = (double)o->d;
    float v[4] = {(float)(h.worker_error_sq / d), (float)(h.server_error_sq / d),
                  (float)(h.momentum_sq / d), (float)(h.zero_momentum / d)};
    if ((st = ob_comm_allreduce_sum_f32(o->ctrl, v, 4, &e)) != OB_OK) RET(st);
    double n = (double)ob_comm_size(o->ctrl);
    out[0] = norm_ratio((double)v[0], (double)v[2]);
    out[1] = norm_ratio((double)v[1] * n, (double)v[2]);
    out[2] = (double)v[3] / n;
    return 0;
}

/* Copies n floats between host memory and the optimizer's memory, either way (the CUDA runtime
 * tells the direction from the pointers), and waits for the copy. */
static ob_status copy_floats(obpy_optim *o, float *dst, const float *src, size_t n, ob_err *err)
{
    if (n == 0 || dst == src) return OB_OK;
    if (ob_comm_memory(o->comm) == OB_MEM_HOST) {
        memcpy(dst, src, n * sizeof(float));
        return OB_OK;
    }
    void *s = ob_comm_stream(o->comm);
    ob_status st = ob_cuda_memcpy(dst, src, n * sizeof(float), s, err);
    return st != OB_OK ? st : ob_cuda_sync(s, err);
}

int obpy_optim_read(obpy_optim *o, const char *which, float *dst, size_t *len, char *err,
                    size_t cap)
{
    ob_err e = {0};
    ob_optim_state s;
    ob_optim_get_state(o->opt, &s);
    const float *src = NULL;
    size_t n = 0;
    if (!strcmp(which, "exp_avg"))
        src = s.exp_avg, n = s.d;
    else if (!strcmp(which, "exp_avg_sq"))
        src = s.exp_avg_sq, n = s.d;
    else if (!strcmp(which, "worker_error"))
        src = s.worker_error, n = src ? s.padded_size : 0;
    else if (!strcmp(which, "server_error"))
        src = s.server_error, n = src ? s.chunk_size : 0;
    else
        RET(OB_ERR(&e, OB_ERR_INVALID_ARG, "no optimizer array '%s'", which));
    *len = n;
    if (!dst) return 0;
    RET(copy_floats(o, dst, src, n, &e));
}

/* --- checkpoints ------------------------------------------------------------------------------ */

/* Sums a failure flag over the ranks. */
static ob_status agree(obpy_optim *o, int failed, int *nfail, ob_err *err)
{
    float f = failed ? 1.0f : 0.0f;
    ob_status st = ob_comm_allreduce_sum_f32(o->ctrl, &f, 1, err);
    *nfail = (int)f;
    return st;
}

/* The host view of the state: the optimizer's own arrays, or their mirrors filled (download). */
typedef struct host_state {
    float *params, *m, *v, *we, *se, *ts;
    ob_optim_state s;
} host_state;

static ob_status host_state_get(obpy_optim *o, int download, host_state *h, ob_err *err)
{
    ob_optim_get_state(o->opt, &h->s);
    if (ob_comm_memory(o->comm) == OB_MEM_HOST) {
        h->params = o->params;
        h->m = h->s.exp_avg;
        h->v = h->s.exp_avg_sq;
        h->we = h->s.worker_error;
        h->se = h->s.server_error;
        h->ts = h->s.track_stats;
        return OB_OK;
    }
    h->params = o->h_params, h->m = o->h_m, h->v = o->h_v, h->we = o->h_we, h->se = o->h_se;
    h->ts = o->h_ts;
    if (!download) return OB_OK;
    ob_status st;
    if ((st = copy_floats(o, h->params, o->params, o->d, err)) ||
        (st = copy_floats(o, h->m, h->s.exp_avg, o->d, err)) ||
        (st = copy_floats(o, h->v, h->s.exp_avg_sq, o->d, err)) ||
        (st = copy_floats(o, h->we, h->s.worker_error, h->s.padded_size, err)) ||
        (st = copy_floats(o, h->se, h->s.server_error, h->s.chunk_size, err)) ||
        (st = copy_floats(o, h->ts, h->s.track_stats, h->s.track_stats_len, err)))
        return st;
    return OB_OK;
}

/* Writes the uploaded host state back into the optimizer's memory (a device's). */
static ob_status host_state_put(obpy_optim *o, const host_state *h, ob_err *err)
{
    if (ob_comm_memory(o->comm) == OB_MEM_HOST) return OB_OK;
    ob_status st;
    if ((st = copy_floats(o, o->params, h->params, o->d, err)) ||
        (st = copy_floats(o, h->s.exp_avg, h->m, o->d, err)) ||
        (st = copy_floats(o, h->s.exp_avg_sq, h->v, o->d, err)) ||
        (st = copy_floats(o, h->s.worker_error, h->we, h->s.padded_size, err)) ||
        (st = copy_floats(o, h->s.server_error, h->se, h->s.chunk_size, err)) ||
        (st = copy_floats(o, h->s.track_stats, h->ts, h->s.track_stats_len, err)))
        return st;
    return OB_OK;
}

/* The spec attribute: the optimizer's canonical section and the caller's extra object. */
static ob_status spec_with_extra(const obpy_optim *o, const char *extra, char **out, ob_err *err)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loads(o->optim_json, 0, &je);
    json_t *x = extra && extra[0] ? json_loads(extra, JSON_REJECT_DUPLICATES, &je) : json_object();
    if (!root || !x || !json_is_object(x)) {
        json_decref(root);
        json_decref(x);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "extra: not a JSON object (%s)", je.text);
    }
    json_object_set_new(root, "extra", x);
    *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    return *out ? OB_OK : OB_ERR(err, OB_ERR_NOMEM, "checkpoint spec");
}

/* The checkpoint's metadata: the optimizer's fields (ob_optim_ckpt_meta) and the caller's. */
static void fill_meta(const obpy_optim *o, const obpy_ckpt_info *info, ob_ckpt_meta *m)
{
    ob_optim_ckpt_meta(o->opt, ob_comm_size(o->ctrl), m);
    m->seed = info->seed;
    m->bytes_warmup = o->bytes_warmup;
    m->bytes_compression = o->bytes_compression;
    m->lr = info->lr;
    m->train_loss = info->train_loss;
    m->loader_epoch = info->loader_epoch;
    m->loader_index = info->loader_index;
    m->wall_seconds = info->wall_seconds;
    m->rollbacks = o->rollbacks;
    m->loss_ema = m->loss_at_freeze = m->loss_best = NAN;
}

/* This rank's files of checkpoint dir. */
static ob_status write_files(obpy_optim *o, const char *dir, const ob_ckpt_meta *meta,
                             const char *spec, ob_err *err)
{
    host_state h;
    ob_status st = host_state_get(o, 1, &h, err);
    if (st != OB_OK) return st;
    ob_ckpt_arrays a = {h.params,   h.m,           h.v, h.s.v_norm_history, h.s.v_norm_history_len,
                        o->tensors, o->num_tensors};
    return ob_optim_ckpt_write_files(dir, meta, &a, spec, ob_comm_rank(o->ctrl), h.we, h.se,
                                     h.s.server_segments, h.s.num_server_segments, h.ts, err);
}

int obpy_ckpt_save(obpy_optim *o, const char *job_dir, int keep, const obpy_ckpt_info *info,
                   const char *extra_json, char *path, char *err, size_t cap)
{
    ob_err e = {0};
    if (!job_dir || !job_dir[0] || keep < 1)
        RET(OB_ERR(&e, OB_ERR_INVALID_ARG, "checkpoint: a directory and keep >= 1 are needed"));
    char *spec = NULL;
    ob_status st = spec_with_extra(o, extra_json, &spec, &e);
    int nfail = 0;
    ob_status ast = agree(o, st != OB_OK, &nfail, st == OB_OK ? &e : NULL);
    if (st != OB_OK || ast != OB_OK || nfail) {
        free(spec);
        if (st != OB_OK) RET(st);
        RET(ast != OB_OK ? ast : OB_ERR(&e, OB_ERR_INVALID_ARG, "extra: refused on another rank"));
    }
    ob_ckpt_meta meta;
    fill_meta(o, info, &meta);
    char dir[OB_CKPT_PATH_LEN];
    ob_err lerr = {0};
    /* 1: rank 0 prepares the temporary directory; 2: every rank writes its files; 3: rank 0
     * commits what every rank wrote and prunes; the outcome goes to every rank. */
    ob_status lst = ob_comm_rank(o->ctrl) == 0
                        ? ob_ckpt_prepare(job_dir, meta.step, dir, &lerr)
                        : ob_ckpt_step_dir(dir, job_dir, meta.step, 1, &lerr);
    if ((st = agree(o, lst != OB_OK, &nfail, &e)) != OB_OK) goto out;
    if (nfail == 0) lst = write_files(o, dir, &meta, spec, &lerr);
    if (nfail == 0 && (st = agree(o, lst != OB_OK, &nfail, &e)) != OB_OK) goto out;
    int32_t committed = 0;
    if (ob_comm_rank(o->ctrl) == 0) {
        if (nfail == 0 && (lst = ob_ckpt_commit(job_dir, meta.step, &lerr)) == OB_OK) {
            committed = 1;
            if (o->written || ob_ckpt_written_create(&o->written, NULL) == OB_OK)
                (void)ob_ckpt_written_add(o->written, job_dir, meta.step, NULL);
            ob_ckpt_prune_written(job_dir, keep, o->written, NULL, NULL);
        } else if (nfail > 0) {
            ob_ckpt_discard(job_dir, meta.step, NULL);
        }
    }
    if ((st = ob_comm_bcast(o->ctrl, &committed, sizeof committed, 0, &e)) != OB_OK) goto out;
    if (!committed) {
        if (lerr.code != OB_OK) {
            e = lerr;
            st = OB_WRAP(&e, lerr.code, "checkpoint of step %ld", meta.step);
        } else
            st = OB_ERR(&e, OB_ERR_IO, "checkpoint of step %ld: writing failed on %d rank(s)",
                        meta.step, nfail);
    } else if (path) {
        ob_ckpt_step_dir(path, job_dir, meta.step, 0, NULL);
    }
out:
    free(spec);
    RET(st);
}

/* What rank 0 tells the others about the checkpoint it chose. */
typedef struct choice {
    int32_t found, failed;
    char path[OB_CKPT_PATH_LEN];
} choice;

typedef struct notes {
    char *buf;
    size_t cap, len;
} notes;

static void on_skip(const char *path, const char *reason, void *user)
{
    notes *n = user;
    if (!n->buf || n->len + 1 >= n->cap) return;
    int w =
        snprintf(n->buf + n->len, n->cap - n->len, "skipping checkpoint %s: %s\n", path, reason);
    if (w > 0) n->len = n->len + (size_t)w < n->cap ? n->len + (size_t)w : n->cap - 1;
}

static ob_status choose(obpy_optim *o, const char *dir, notes *nt, choice *c, ob_err *err)
{
    memset(c, 0, sizeof *c);
    ob_err lerr = {0};
    if (ob_comm_rank(o->ctrl) == 0) {
        char state[OB_CKPT_PATH_LEN + 16];
        struct stat sb;
        snprintf(state, sizeof state, "%s/state.h5", dir);
        if (stat(state, &sb) == 0) { /* a checkpoint directory itself */
            snprintf(c->path, sizeof c->path, "%s", dir);
            c->found = 1;
        } else {
            ob_status st = ob_ckpt_find_latest(dir, c->path, NULL, on_skip, nt, &lerr);
            if (st == OB_OK)
                c->found = 1;
            else if (st != OB_ERR_NOT_FOUND)
                c->failed = 1;
        }
    }
    ob_status st = ob_comm_bcast(o->ctrl, c, sizeof *c, 0, err);
    if (st != OB_OK) return st;
    if (c->failed) {
        if (ob_comm_rank(o->ctrl) == 0) {
            *err = lerr;
            return lerr.code;
        }
        return OB_ERR(err, OB_ERR_IO, "rank 0 could not read the checkpoints in %s", dir);
    }
    return OB_OK;
}

/* The saved tensor index must be ours, name by name and shape by shape. */
static ob_status check_index(const obpy_optim *o, const char *path, const ob_ckpt_meta *meta,
                             ob_err *err)
{
    ob_ckpt_tensor *t = NULL;
    size_t n = 0;
    ob_status st = ob_ckpt_read_tensors(path, meta, &t, &n, err);
    if (st != OB_OK) return st;
    if (n != o->num_tensors)
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "%s holds %zu tensors; the model has %zu", path, n,
                    o->num_tensors);
    for (size_t i = 0; st == OB_OK && i < n; i++) {
        const ob_ckpt_tensor *a = &t[i], *b = &o->tensors[i];
        if (strcmp(a->name, b->name) || a->ndim != b->ndim ||
            memcmp(a->shape, b->shape, sizeof a->shape))
            st = OB_ERR(err, OB_ERR_INVALID_ARG,
                        "%s: tensor %zu is '%s' (%u dimensions, %llu elements first); the model's "
                        "is '%s' (%u, %llu)",
                        path, i, a->name, a->ndim, (unsigned long long)a->shape[0], b->name,
                        b->ndim, (unsigned long long)b->shape[0]);
    }
    free(t);
    return st;
}

/* The saved optimizer section must equal ours but for the learning-rate schedule. */
static ob_status check_optim(const obpy_optim *o, const char *saved, const char *path, char **extra,
                             ob_err *err)
{
    json_error_t je;
    json_t *a = json_loads(saved ? saved : "", 0, &je), *b = json_loads(o->optim_json, 0, &je);
    ob_status st = OB_OK;
    if (!a || !json_is_object(a) || !json_object_get(a, "framework"))
        st = OB_ERR(err, OB_ERR_INVALID_ARG,
                    "%s was not written by the Python front end (a job's checkpoint: use "
                    "warm_start, or onebit-worker --resume)",
                    path);
    else if (!json_equal(json_object_get(a, "optimizer"), json_object_get(b, "optimizer"))) {
        char *sa = json_dumps(json_object_get(a, "optimizer"), JSON_COMPACT);
        st = OB_ERR(err, OB_ERR_INVALID_ARG,
                    "%s was written by another optimizer: %.300s (the optimizer's settings must "
                    "match to resume)",
                    path, sa ? sa : "?");
        free(sa);
    } else if (extra) {
        json_t *x = json_object_get(a, "extra");
        *extra = json_dumps(x ? x : json_object(), JSON_COMPACT | JSON_REAL_PRECISION(17));
    }
    json_decref(a);
    json_decref(b);
    return st;
}

static ob_status restore(obpy_optim *o, const char *path, ob_ckpt_meta *meta, char **extra,
                         ob_err *err)
{
    char *saved = NULL;
    ob_status st = ob_ckpt_read_meta(path, meta, &saved, err);
    if (st == OB_OK && meta->num_params != o->d)
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "%s holds %llu parameters; the model has %zu", path,
                    (unsigned long long)meta->num_params, o->d);
    if (st == OB_OK) st = check_optim(o, saved, path, extra, err);
    free(saved);
    if (st == OB_OK) st = check_index(o, path, meta, err);
    if (st != OB_OK) return st;
    host_state h;
    if ((st = host_state_get(o, 0, &h, err)) != OB_OK) return st;
    if ((st = ob_optim_ckpt_read(o->opt, path, meta, ob_comm_rank(o->ctrl), ob_comm_size(o->ctrl),
                                 h.params, h.m, h.v, h.we, h.se, h.ts, err)) != OB_OK ||
        (st = host_state_put(o, &h, err)) != OB_OK ||
        (st = ob_optim_ckpt_restore_progress(o->opt, meta, path, err)) != OB_OK)
        return st;
    o->bytes_warmup = meta->bytes_warmup;
    o->bytes_compression = meta->bytes_compression;
    /* A rollback to a checkpoint older than the last rollback keeps its count. */
    if (meta->rollbacks > o->rollbacks) o->rollbacks = meta->rollbacks;
    return OB_OK;
}

int obpy_ckpt_load(obpy_optim *o, const char *job_dir, int *found, obpy_ckpt_info *info,
                   char **extra_json, char *path, int *from_world_size, char *notices,
                   size_t cap_notices, char *err, size_t cap)
{
    ob_err e = {0};
    *found = 0;
    *extra_json = NULL;
    if (notices && cap_notices) notices[0] = '\0';
    notes nt = {notices, cap_notices, 0};
    choice c;
    ob_status st = choose(o, job_dir, &nt, &c, &e);
    if (st != OB_OK || !c.found) RET(st);
    ob_ckpt_meta meta;
    st = restore(o, c.path, &meta, extra_json, &e);
    int nfail = 0;
    ob_status ast = agree(o, st != OB_OK, &nfail, st == OB_OK ? &e : NULL);
    if (st == OB_OK && ast == OB_OK && nfail > 0)
        st = OB_ERR(&e, OB_ERR_STATE, "resume failed on %d other rank(s)", nfail);
    else if (st == OB_OK)
        st = ast;
    if (st != OB_OK) {
        free(*extra_json);
        *extra_json = NULL;
        RET(st);
    }
    *found = 1;
    memset(info, 0, sizeof *info);
    info->seed = meta.seed;
    info->lr = meta.lr;
    info->train_loss = meta.train_loss;
    info->wall_seconds = meta.wall_seconds;
    info->loader_epoch = meta.loader_epoch;
    info->loader_index = meta.loader_index;
    if (path) snprintf(path, OB_CKPT_PATH_LEN, "%s", c.path);
    if (from_world_size) *from_world_size = meta.world_size;
    return 0;
}

int obpy_optim_rollbacks(const obpy_optim *o)
{
    return o->rollbacks;
}

int obpy_optim_rolled_back(obpy_optim *o, long bad_step, const obpy_stats *before, char *err,
                           size_t cap)
{
    ob_err e = {0};
    if (bad_step < 0 || !before)
        RET(OB_ERR(&e, OB_ERR_INVALID_ARG, "rollback: bad_step >= 0 and the stats before"));
    /* What crossed the network before the rollback stays counted. */
    o->bytes_warmup = (uint64_t)before->bytes_warmup;
    o->bytes_compression = (uint64_t)before->bytes_compression;
    o->rollbacks++;
    RET(ob_optim_ckpt_rolled_back(o->opt, &o->cfg, (uint64_t)before->bytes_sent, bad_step, NULL,
                                  &e));
}

int obpy_ckpt_warm_start(obpy_optim *o, const char *from, long refit_steps, int with_params,
                         char *outcome, char *err, size_t cap)
{
    ob_err e = {0};
    if (outcome) outcome[0] = '\0';
    choice c;
    ob_status st = choose(o, from, NULL, &c, &e);
    if (st != OB_OK) RET(st);
    if (!c.found) RET(OB_ERR(&e, OB_ERR_NOT_FOUND, "warm start: no usable checkpoint in %s", from));
    ob_ckpt_meta meta;
    float *v = NULL, *x = NULL;
    st = ob_ckpt_read_meta(c.path, &meta, NULL, &e);
    if (st == OB_OK && meta.num_params != o->d)
        st = OB_ERR(&e, OB_ERR_INVALID_ARG, "%s holds %llu parameters; the model has %zu", c.path,
                    (unsigned long long)meta.num_params, o->d);
    if (st == OB_OK && meta.freeze_step < 0)
        st = OB_ERR(&e, OB_ERR_INVALID_ARG,
                    "%s: its variance was never frozen (step %ld of the "
                    "warmup): nothing to start from",
                    c.path, meta.step);
    if (st == OB_OK) st = check_index(o, c.path, &meta, &e);
    if (st == OB_OK) {
        v = malloc(o->d * sizeof *v);
        x = malloc(o->d * sizeof *x);
        float *m = malloc(o->d * sizeof *m);
        if (!v || !x || !m) st = OB_ERR(&e, OB_ERR_NOMEM, "warm start of %zu floats", o->d);
        ob_ckpt_arrays a = {x, m, v, NULL, 0, NULL, 0};
        if (st == OB_OK) st = ob_ckpt_read_state(c.path, &meta, &a, &e);
        free(m);
    }
    if (st == OB_OK && with_params) st = copy_floats(o, o->params, x, o->d, &e);
    if (st == OB_OK) {
        double b2 = o->cfg.beta2;
        long refit =
            refit_steps >= 0 ? refit_steps : ob_optim_auto_refit_steps(b2, OB_WARM_SOURCE_SAME);
        double fit = refit_steps < 0 ? OB_WARM_FIT_FRACTION : 0.0;
        st = ob_optim_warm_start(o->opt, v, 1.0, 1.0, refit, fit, &e);
        if (st == OB_OK && outcome) {
            if (refit == 0)
                snprintf(outcome, 512, "taken as is from %.400s", c.path);
            else
                snprintf(outcome, 512, "re-estimated over at most %ld steps from %.400s", refit,
                         c.path);
        }
    }
    free(v);
    free(x);
    int nfail = 0;
    ob_status ast = agree(o, st != OB_OK, &nfail, st == OB_OK ? &e : NULL);
    if (st == OB_OK && ast == OB_OK && nfail > 0)
        st = OB_ERR(&e, OB_ERR_STATE, "warm start failed on %d other rank(s)", nfail);
    else if (st == OB_OK)
        st = ast;
    RET(st);
}

/* --- progress reports ------------------------------------------------------------------------- */

static double num(const double *v, int n, int i)
{
    return i < n ? v[i] : 0.0;
}

/* The report of one event from its kind, phase, numbers (OBPY_R_*) and texts; NULL when out of
 * memory. */
static ob_report *build_report(const char *kind, const char *phase, const double *v, int n,
                               const char *text, const char *text2)
{
    ob_report *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->kind = ob_report_kind_parse(kind);
    ob_progress *p = &r->progress;
    p->step = (int64_t)num(v, n, OBPY_R_STEP);
    ob_strlcpy(p->phase, phase ? phase : "", sizeof p->phase);
    p->loss = num(v, n, OBPY_R_LOSS);
    p->lr = num(v, n, OBPY_R_LR);
    p->samples_per_s = num(v, n, OBPY_R_SAMPLES_PER_S);
    p->bytes_sent = (int64_t)num(v, n, OBPY_R_BYTES_SENT);
    r->bytes_step = (int64_t)num(v, n, OBPY_R_BYTES_STEP);
    p->freeze_ratio = num(v, n, OBPY_R_FREEZE_RATIO);
    p->worker_error_ratio = num(v, n, OBPY_R_WORKER_ERROR);
    p->server_error_ratio = num(v, n, OBPY_R_SERVER_ERROR);
    p->zero_momentum_fraction = num(v, n, OBPY_R_ZERO_MOMENTUM);
    r->world_size = (int)num(v, n, OBPY_R_WORLD_SIZE);
    r->num_params = (int64_t)num(v, n, OBPY_R_NUM_PARAMS);
    r->eval_loss = num(v, n, OBPY_R_EVAL_LOSS);
    r->eval_accuracy = num(v, n, OBPY_R_EVAL_ACCURACY);
    r->eval_count = (int64_t)num(v, n, OBPY_R_EVAL_COUNT);
    r->ckpt_step = p->step;
    r->ckpt_failed = num(v, n, OBPY_R_CKPT_FAILED) != 0.0;
    r->from_world_size = (int)num(v, n, OBPY_R_FROM_WORLD_SIZE);
    if (r->kind == OB_REPORT_FREEZE) p->freeze_step = p->step;
    if (r->kind == OB_REPORT_START) r->spec_json = text;
    if ((r->kind == OB_REPORT_CHECKPOINT && !r->ckpt_failed) || r->kind == OB_REPORT_RESUME)
        ob_strlcpy(r->ckpt_path, text ? text : "", sizeof r->ckpt_path);
    else if (text && r->kind != OB_REPORT_START)
        ob_strlcpy(r->message, text, sizeof r->message);
    if (r->kind == OB_REPORT_WARM_START)
        ob_strlcpy(p->warm_start, text2 ? text2 : "", sizeof p->warm_start);
    if (r->kind == OB_REPORT_REWARM) {
        r->ckpt_step = (int64_t)num(v, n, OBPY_R_TO_STEP);
        ob_strlcpy(r->ckpt_path, text2 ? text2 : "", sizeof r->ckpt_path);
    }
    ob_report_summary *s = &r->summary;
    s->steps = p->step;
    s->freeze_step = (int64_t)num(v, n, OBPY_R_FREEZE_STEP);
    s->final_train_loss = p->loss;
    s->eval_loss = r->eval_loss;
    s->eval_accuracy = r->eval_accuracy;
    s->bytes_sent = p->bytes_sent;
    s->bytes_warmup = (int64_t)num(v, n, OBPY_R_BYTES_WARMUP);
    s->bytes_compression = (int64_t)num(v, n, OBPY_R_BYTES_COMPRESSION);
    s->wall_seconds = num(v, n, OBPY_R_WALL_SECONDS);
    s->samples_per_s = p->samples_per_s;
    s->num_params = r->num_params;
    s->first_step = (int64_t)num(v, n, OBPY_R_FIRST_STEP);
    s->stopped = num(v, n, OBPY_R_STOPPED) != 0.0;
    s->last_checkpoint = (int64_t)num(v, n, OBPY_R_LAST_CHECKPOINT);
    return r;
}

int obpy_reporter_create(const char *target, const char *job_id, ob_reporter **out, char *err,
                         size_t cap)
{
    ob_err e;
    ob_err_clear(&e);
    RET(ob_reporter_create(out, target, job_id, NULL, &e));
}

void obpy_reporter_destroy(ob_reporter *r)
{
    ob_reporter_destroy(r);
}

int obpy_report(ob_reporter *reporter, const char *kind, const char *phase, const double *v,
                int n, const char *text, const char *text2, char *out, size_t cap, int *flags,
                char *err, size_t ecap)
{
    if (flags) *flags = 0;
    ob_report *r = build_report(kind, phase, v, n, text, text2);
    if (!r) return OB_ERR_NOMEM;
    if (r->kind == OB_REPORT_NONE) {
        free(r);
        if (err && ecap) snprintf(err, ecap, "report '%s': not a report kind", kind);
        return OB_ERR_INVALID_ARG;
    }
    int rc = 0;
    if (out) {
        char *line = ob_report_to_json(r);
        if (!line) {
            rc = OB_ERR_NOMEM;
        } else if (strlen(line) >= cap) {
            if (err && ecap) snprintf(err, ecap, "report of %zu bytes: no room", strlen(line));
            rc = OB_ERR_INVALID_ARG;
        } else {
            memcpy(out, line, strlen(line) + 1);
        }
        free(line);
    }
    if (rc == 0 && reporter) {
        int cancel = 0;
        ob_err e;
        ob_err_clear(&e);
        if (ob_reporter_send(reporter, r, &cancel, &e) == OB_OK) {
            if (flags) *flags = OBPY_REPORT_SENT | (cancel ? OBPY_REPORT_CANCEL : 0);
        } else if (ob_reporter_failures(reporter) == 1) {
            if (flags) *flags = OBPY_REPORT_FIRST_FAILURE;
            if (err && ecap) snprintf(err, ecap, "%s", e.msg);
        }
    }
    free(r);
    return rc;
}
