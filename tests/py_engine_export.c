/* What onebit-worker's classification job starts from, written out for a torch model to start
 * from the same place (tests/python/mlp_curves.py, bench/python/mlp_curves.sh): the initial
 * parameters, the tensor table, and every batch each of N ranks would train on and evaluate.
 * The trainer is built from the spec on one process (the parameters do not depend on the world
 * size: every rank draws them from the seed); the loaders are the trainer's, one per rank of N.
 *
 *   py_engine_export SPEC NRANKS OUT
 *
 * Writes to OUT (an existing directory):
 *   params.f32         the parameters before the first step (d floats, the engine's layout)
 *   tensors.txt        one line per tensor: name offset numel ndim shape...
 *   meta.txt           d input_dim num_classes batch_size steps eval_interval
 *   spec.json          the spec with every default filled in (onebit-worker --check's)
 *   rank-R.train.x     steps batches of rank R: (batch_size, input_dim) float32 each
 *   rank-R.train.y     their labels, (batch_size) int32 each
 *   rank-R.eval.x/.y   rank R's share of one evaluation pass, in order
 * Exit 0 on success, 1 with a message on stderr otherwise. */
#include "onebit/comm.h"
#include "onebit/data.h"
#include "onebit/jobspec.h"
#include "onebit/model.h"
#include "onebit/trainer.h"

#include <stdio.h>
#include <stdlib.h>

/* Opens OUT/name for writing; NULL with a message on failure. */
static FILE *open_out(const char *dir, const char *name, int rank)
{
    char path[4200];
    if (rank >= 0)
        snprintf(path, sizeof path, "%s/rank-%d.%s", dir, rank, name);
    else
        snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) perror(path);
    return f;
}

static int put(FILE *f, const void *p, size_t size, size_t n)
{
    return n == 0 || fwrite(p, size, n, f) == n ? 0 : -1;
}

/* Writes `steps` batches of loader l (steps < 0: until the pass ends) to x and y. */
static ob_status write_batches(ob_loader *l, long steps, FILE *x, FILE *y, ob_err *err)
{
    for (long s = 0; steps < 0 || s < steps; s++) {
        ob_batch b;
        ob_status st = ob_loader_next(l, &b, err);
        if (st != OB_OK) return st;
        if (b.n == 0) break;
        if (put(x, b.x, sizeof(float), b.n * b.input_dim) || put(y, b.y, sizeof(int32_t), b.n))
            return OB_ERR(err, OB_ERR_IO, "writing batch %ld", s);
    }
    return OB_OK;
}

static ob_status export_rank(const ob_jobspec *s, const ob_dataset *ds, int rank, int n,
                             const char *dir, ob_err *err)
{
    ob_loader *train = NULL, *eval = NULL;
    FILE *f[4] = {open_out(dir, "train.x", rank), open_out(dir, "train.y", rank),
                  open_out(dir, "eval.x", rank), open_out(dir, "eval.y", rank)};
    ob_status st = OB_ERR_IO;
    for (int i = 0; i < 4; i++)
        if (!f[i]) {
            OB_ERR(err, st, "cannot write rank %d's batches under %s", rank, dir);
            goto fail;
        }
    /* As the trainer makes them (trainer.c: build). */
    st = ob_loader_create(&train, ds, OB_SPLIT_TRAIN, rank, n, s->batch_size, s->seed, err);
    if (st == OB_OK) st = write_batches(train, s->steps, f[0], f[1], err);
    if (st == OB_OK && ob_dataset_num_examples(ds, OB_SPLIT_EVAL) > 0) {
        st = ob_loader_create_pass(&eval, ds, OB_SPLIT_EVAL, rank, n, s->batch_size,
                                   s->eval_max_examples, err);
        if (st == OB_OK) st = write_batches(eval, -1, f[2], f[3], err);
    }
fail:
    for (int i = 0; i < 4; i++)
        if (f[i] && fclose(f[i]) != 0 && st == OB_OK)
            st = OB_ERR(err, OB_ERR_IO, "closing rank %d's batches", rank);
    ob_loader_destroy(train);
    ob_loader_destroy(eval);
    return st;
}

static ob_status export_model(ob_trainer *t, const ob_jobspec *s, const char *dir, ob_err *err)
{
    ob_model *m = ob_trainer_model(t);
    const ob_dataset *ds = ob_trainer_dataset(t);
    size_t d = ob_trainer_num_params(t);
    FILE *p = open_out(dir, "params.f32", -1), *tt = open_out(dir, "tensors.txt", -1),
         *meta = open_out(dir, "meta.txt", -1);
    int bad = !p || !tt || !meta;
    if (!bad) bad = put(p, ob_trainer_params(t), sizeof(float), d) != 0;
    for (size_t i = 0; !bad && i < ob_model_num_tensors(m); i++) {
        const ob_model_tensor *e = ob_model_tensor_at(m, i);
        fprintf(tt, "%s %zu %zu %zu", e->name, e->offset, e->numel, e->ndim);
        for (size_t k = 0; k < e->ndim; k++)
            fprintf(tt, " %zu", e->shape[k]);
        fprintf(tt, "\n");
    }
    if (!bad)
        fprintf(meta, "%zu %zu %d %zu %ld %ld\n", d, ob_dataset_input_dim(ds),
                ob_dataset_num_classes(ds), s->batch_size, s->steps, s->eval_interval);
    char *json = NULL;
    FILE *js = open_out(dir, "spec.json", -1);
    if (!bad && (!js || ob_jobspec_to_json(s, &json, err) != OB_OK || fputs(json, js) < 0)) bad = 1;
    free(json);
    FILE *fs[4] = {p, tt, meta, js};
    for (int i = 0; i < 4; i++)
        if (fs[i] && fclose(fs[i]) != 0) bad = 1;
    return bad ? OB_ERR(err, OB_ERR_IO, "cannot write the model under %s", dir) : OB_OK;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: py_engine_export SPEC NRANKS OUT\n");
        return 1;
    }
    int n = atoi(argv[2]);
    ob_err err = {0};
    ob_jobspec spec;
    ob_comm *self = NULL;
    ob_trainer *t = NULL;
    ob_status st = ob_jobspec_load(&spec, argv[1], &err);
    if (st == OB_OK && n < 1) st = OB_ERR(&err, OB_ERR_INVALID_ARG, "NRANKS must be >= 1");
    if (st == OB_OK) st = ob_comm_create_self(&self, &err);
    if (st == OB_OK) st = ob_trainer_create(&t, &spec, self, &err);
    if (st == OB_OK) st = export_model(t, &spec, argv[3], &err);
    for (int r = 0; st == OB_OK && r < n; r++)
        st = export_rank(&spec, ob_trainer_dataset(t), r, n, argv[3], &err);
    ob_trainer_destroy(t);
    ob_comm_destroy(self);
    if (st != OB_OK) {
        fprintf(stderr, "py_engine_export: %s\n", err.msg);
        return 1;
    }
    return 0;
}
