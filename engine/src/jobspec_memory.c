/* A rank's memory estimate from its job spec (ob_jobspec_memory_estimate): the model's real
 * parameter count and per-example activations (a model is created for one example), the
 * optimizer's buffers as optim.c allocates them, and the data set's size in memory. The
 * coordinator refuses at submit a job whose ranks would not fit. */
#define _XOPEN_SOURCE 700
#include "onebit/jobspec.h"
#include "onebit/f16sum.h"
#include "onebit/model.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* a + b and a * b, saturating at UINT64_MAX. */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* Bytes of the regular files at path: the file itself, or those directly in the directory. */
static uint64_t file_bytes(const char *path)
{
    struct stat st;
    if (!path[0] || stat(path, &st) != 0) return 0;
    if (S_ISREG(st.st_mode)) return (uint64_t)st.st_size;
    if (!S_ISDIR(st.st_mode)) return 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    uint64_t sum = 0;
    struct dirent *e;
    char p[OB_JOBSPEC_PATH_LEN + 256];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) sum = sat_add(sum, (uint64_t)st.st_size);
    }
    closedir(d);
    return sum;
}

/* The model's input and output as the worker fills them in from the data set. */
static void model_io(const ob_jobspec *spec, ob_model_config *cfg)
{
    switch (spec->data.kind) {
    case OB_DATA_SYNTH_CLASSIFICATION:
        cfg->input_dim = spec->data.synth_cls.input_dim;
        cfg->num_classes = (size_t)spec->data.synth_cls.num_classes;
        break;
    case OB_DATA_FASHION_MNIST:
    case OB_DATA_IDX:
        cfg->input_dim = 784;
        cfg->num_classes = 10;
        break;
    default:
        cfg->input_dim = OB_MODEL_VOCAB;
        cfg->num_classes = OB_MODEL_VOCAB;
    }
}

/* The data set in memory: features as floats and a label each; text and IDX files as read. */
static uint64_t data_bytes(const ob_jobspec *spec)
{
    const ob_data_spec *d = &spec->data;
    switch (d->kind) {
    case OB_DATA_SYNTH_CLASSIFICATION:
        return sat_mul((uint64_t)d->synth_cls.n_train + d->synth_cls.n_eval,
                       sat_add(sat_mul(d->synth_cls.input_dim, sizeof(float)), sizeof(int32_t)));
    case OB_DATA_FASHION_MNIST:
        return sat_mul(70000, 784 * sizeof(float) + sizeof(int32_t));
    case OB_DATA_IDX:
        /* one byte per pixel on disk, a float in memory */
        return sat_mul(file_bytes(d->path), sizeof(float));
    case OB_DATA_TEXT: {
        uint64_t b = file_bytes(d->path[0] ? d->path : OB_FORTUNES_DIR);
        return d->max_bytes && b > d->max_bytes ? d->max_bytes : b;
    }
    case OB_DATA_SYNTH_TEXT:
        return sat_add(d->synth_text.train_bytes, d->synth_text.eval_bytes);
    }
    return 0;
}

ob_status ob_jobspec_memory_estimate(const ob_jobspec *spec, int world_size,
                                     ob_memory_estimate *out, ob_err *err)
{
    memset(out, 0, sizeof *out);
    if (world_size < 1)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "world_size: expected >= 1, got %d", world_size);
    if (ob_jobspec_is_program(spec))
        return OB_ERR(err, OB_ERR_UNSUPPORTED, "a program job's memory is its program's own");
    ob_model_config cfg = spec->model;
    model_io(spec, &cfg);
    cfg.max_batch = 1;
    ob_model *m = NULL;
    ob_status rc = ob_model_create(&m, &cfg, err);
    if (rc) return OB_WRAP(err, rc, "estimating the model's memory");
    uint64_t d = ob_model_num_params(m);
    uint64_t act1 = ob_model_activation_bytes(m);
    ob_model_destroy(m);

    uint64_t fl = sizeof(float);
    out->params = sat_mul(2 * fl, d);
    out->optimizer = sat_mul(4 * fl, d);
    /* car.c: the worker error (D), the server error and its average (C each; a device forms
     * the average in registers), unit signs' decode buffer (C), and bits. */
    if (spec->optim.kind == OB_OPTIM_BINSGDM) {
        uint64_t extra = sat_add(sat_mul(fl, d), sat_mul(3 * fl, d / (uint64_t)world_size + 1));
        out->optimizer = sat_add(out->optimizer, sat_add(extra, d / 2));
    }
    if (spec->optim.kind == OB_OPTIM_ONEBIT_ADAM && spec->optim.mode == OB_ONEBIT_COMPRESSED) {
        uint64_t extra = sat_add(sat_mul(fl, d), sat_mul(2 * fl, d / (uint64_t)world_size + 1));
        out->optimizer = sat_add(out->optimizer, sat_add(extra, d / 4));
    }
    /* f16sum.c, per exchange the job uses (the gradients' or a warm start's refit's): three
     * buffers of N encoded chunks (2 bytes an element in fp16, 1 in fp8, chunks padded to whole
     * blocks) and two chunks of floats. */
    const struct {
        ob_gradient_exchange x;
        uint64_t elem;
    } codes[] = {{OB_EXCHANGE_FP16, 2}, {OB_EXCHANGE_FP8, 1}};
    int warm = spec->warm_start_from[0] != '\0';
    uint64_t padded = sat_add(d, sat_mul((uint64_t)world_size, OB_F16SUM_BLOCK));
    uint64_t chunk = padded / (uint64_t)world_size + 1;
    for (size_t i = 0; i < sizeof codes / sizeof *codes && world_size > 1; i++) {
        if (spec->optim.gradient_exchange != codes[i].x &&
            !(warm && spec->optim.refit_exchange == codes[i].x))
            continue;
        uint64_t bufs = sat_add(sat_mul(3 * codes[i].elem, padded), sat_mul(2 * fl, chunk));
        out->optimizer = sat_add(out->optimizer, bufs);
    }
    out->activations = sat_mul(act1, spec->batch_size);
    out->data = data_bytes(spec);
    out->base = OB_MEMORY_BASE_BYTES;
    uint64_t t = sat_add(out->params, out->optimizer);
    t = sat_add(t, out->activations);
    t = sat_add(t, out->data);
    out->total = sat_add(t, out->base);
    return OB_OK;
}
