/* onebit-ckpt: look into checkpoints without training.
 *
 *   onebit-ckpt info DIR            metadata of one checkpoint and whether it verifies
 *   onebit-ckpt verify DIR          verifies one checkpoint (every dataset, the tensor index)
 *   onebit-ckpt tensors DIR         the tensor index: name, shape, offset of every tensor
 *   onebit-ckpt export DIR --format npz|safetensors -o OUT [--optim]
 *                                   the parameters as named tensors (with --optim also the
 *                                   momentum and variance as exp_avg.NAME, exp_avg_sq.NAME)
 *   onebit-ckpt list JOB_DIR        every checkpoint of a job, newest first, verified
 *   onebit-ckpt diff A B [--only LIST]
 *                                   compares two checkpoints array by array, bit for bit
 *                                   (LIST: params,exp_avg,exp_avg_sq,v_norm_history,errors);
 *                                   server errors position by position, whatever layout each
 *                                   checkpoint's ranks stored them in; "errors" also covers
 *                                   every rank's own moments where the optimizer keeps them
 *                                   per rank (binsgdm)
 *
 * DIR is a checkpoint directory (step-00000200: the step in 8 digits), its state.h5, or for verify,
 * tensors and export also a job directory (its newest valid checkpoint).
 *
 * Exit status: 0 (verifies / identical / exported), 1 (does not verify / differs / failed),
 * 2 (bad usage). */
#include "onebit/checkpoint.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: onebit-ckpt info DIR\n"
               "       onebit-ckpt verify DIR\n"
               "       onebit-ckpt tensors DIR\n"
               "       onebit-ckpt export DIR --format npz|safetensors -o OUT [--optim]\n"
               "       onebit-ckpt list JOB_DIR\n"
               "       onebit-ckpt diff A B [--only params,exp_avg,exp_avg_sq,v_norm_history,"
               "errors]\n"
               "       onebit-ckpt --version\n");
}

/* --help: the usage, then what each command does (also the man page's text, onebit-ckpt(1)). */
static void help(void)
{
    usage(stdout);
    fputs("  info DIR       metadata of one checkpoint and whether it verifies\n"
          "  verify DIR     verifies one checkpoint (every dataset, the tensor index)\n"
          "  tensors DIR    the tensor index: name, shape, offset of every tensor\n"
          "  export DIR     the parameters as named tensors, in an .npz or .safetensors file\n"
          "  list JOB_DIR   every checkpoint of a job, newest first, verified\n"
          "  diff A B       compares two checkpoints array by array, bit for bit\n"
          "  --format F     export: npz or safetensors\n"
          "  -o OUT         export: the file written\n"
          "  --optim        export: also the momentum and variance, as exp_avg.NAME and\n"
          "                 exp_avg_sq.NAME\n"
          "  --only LIST    diff: only these arrays (params, exp_avg, exp_avg_sq,\n"
          "                 v_norm_history, errors; errors also covers every rank's own\n"
          "                 moments where the optimizer keeps them per rank)\n"
          "  --version      print the release and the checkpoint format, and exit\n"
          "\n"
          "DIR is a checkpoint directory (step-00000200: the step in 8 digits), its state.h5, or\n"
          "for verify, tensors and export also a job directory (its newest valid checkpoint).\n"
          "\n"
          "Exit status: 0 verifies, identical or exported; 1 does not verify, differs or\n"
          "failed; 2 bad usage.\n",
          stdout);
}

static const char *phase_name(int phase)
{
    return phase == 1 ? "compression" : "warmup";
}

/* The warm-start states of the checkpoint's warm_start attribute (docs/CHECKPOINTS.md). */
static const char *warm_name(int w)
{
    static const char *const names[] = {"none",    "taken as is", "refit",
                                        "refused", "rewarm",      "freeze delayed"};
    return w >= 0 && w < (int)(sizeof names / sizeof *names) ? names[w] : "?";
}

static int cmd_info(const char *dir)
{
    ob_err err = {0};
    ob_ckpt_meta m;
    char *spec = NULL;
    if (ob_ckpt_read_meta(dir, &m, &spec, &err) != OB_OK) {
        fprintf(stderr, "onebit-ckpt: %s\n", err.msg);
        return 1;
    }
    ob_status vst = ob_ckpt_verify(dir, NULL, &err);
    printf("checkpoint      %s\n", dir);
    printf("format version  %u\n", m.format_version);
    printf("step            %ld\n", m.step);
    printf("phase           %s\n", phase_name(m.phase));
    if (m.freeze_step >= 0)
        printf("freeze step     %ld\n", m.freeze_step);
    else
        printf("freeze step     - (not frozen)\n");
    printf("world size      %d\n", m.world_size);
    if (m.local_moments) printf("per-rank m, b   every rank file (binsgdm)\n");
    if (m.track_stats) printf("per-rank u, A, B every rank file (track_variance)\n");
    if (m.ranks_per_node > 1)
        printf("ranks a node    %d (hierarchical exchange)\n", m.ranks_per_node);
    printf("parameters      %llu\n", (unsigned long long)m.num_params);
    if (m.padded_size)
        printf("error buffers   D %llu, C %llu, block %llu\n", (unsigned long long)m.padded_size,
               (unsigned long long)m.chunk_size, (unsigned long long)m.block_size);
    printf("train loss      %.6g (lr %.6g)\n", m.train_loss, m.lr);
    printf("loss guard      average %.6g, at the freeze %.6g, lowest since %.6g, rollbacks %d\n",
           m.loss_ema, m.loss_at_freeze, m.loss_best, m.rollbacks);
    if (m.warm_start)
        printf("warm start      %s, refit until step %ld, refit scale %.9g\n",
               warm_name(m.warm_start), m.refit_end, m.refit_scale);
    printf("bytes sent      %llu (warmup %llu, compression %llu)\n",
           (unsigned long long)m.bytes_sent, (unsigned long long)m.bytes_warmup,
           (unsigned long long)m.bytes_compression);
    printf("spec            %s\n", spec ? spec : "");
    printf("verifies        %s\n", vst == OB_OK ? "yes" : err.msg);
    free(spec);
    return vst == OB_OK ? 0 : 1;
}

static int cmd_list(const char *job_dir)
{
    ob_err err = {0};
    ob_ckpt_entry *list;
    size_t n;
    if (ob_ckpt_list(job_dir, &list, &n, &err) != OB_OK) {
        fprintf(stderr, "onebit-ckpt: %s\n", err.msg);
        return 1;
    }
    printf("%-10s %-12s %-6s %s\n", "STEP", "PHASE", "RANKS", "STATUS");
    for (size_t i = 0; i < n; i++) {
        ob_ckpt_meta m;
        if (!list[i].committed) {
            printf("%-10ld %-12s %-6s incomplete (.tmp, never committed)\n", list[i].step, "-",
                   "-");
            continue;
        }
        ob_status st = ob_ckpt_verify(list[i].path, &m, &err);
        if (st == OB_OK)
            printf("%-10ld %-12s %-6d ok\n", list[i].step, phase_name(m.phase), m.world_size);
        else
            printf("%-10ld %-12s %-6s CORRUPT: %s\n", list[i].step, "-", "-", err.msg);
    }
    free(list);
    return 0;
}

/* Compares n elements bitwise; prints the first difference. Returns 1 when they differ. */
static int differ(const char *what, const void *a, const void *b, size_t n, size_t elem)
{
    if (memcmp(a, b, n * elem) == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem) == 0) continue;
        double x = elem == 4 ? ((const float *)a)[i] : ((const double *)a)[i];
        double y = elem == 4 ? ((const float *)b)[i] : ((const double *)b)[i];
        printf("%s differs first at element %zu: %.9g vs %.9g\n", what, i, x, y);
        break;
    }
    return 1;
}

static int wanted(const char *only, const char *name)
{
    if (!only) return 1;
    size_t len = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += len)
        if ((p == only || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) return 1;
    return 0;
}

typedef struct loaded {
    ob_ckpt_meta m;
    float *params, *mom, *v;
    double *hist;
    size_t hist_len;
} loaded;

static int load(const char *dir, loaded *l)
{
    ob_err err = {0};
    memset(l, 0, sizeof *l);
    if (ob_ckpt_verify(dir, &l->m, &err) != OB_OK) {
        fprintf(stderr, "onebit-ckpt: %s\n", err.msg);
        return 1;
    }
    size_t d = (size_t)l->m.num_params;
    l->params = malloc(d * sizeof(float));
    l->mom = malloc(d * sizeof(float));
    l->v = malloc(d * sizeof(float));
    l->hist_len = (size_t)l->m.v_norm_history_len;
    l->hist = l->hist_len ? malloc(l->hist_len * sizeof(double)) : NULL;
    ob_ckpt_arrays a = {l->params, l->mom, l->v, l->hist, l->hist_len, NULL, 0};
    if (!l->params || !l->mom || !l->v || (l->hist_len && !l->hist) ||
        ob_ckpt_read_state(dir, &l->m, &a, &err) != OB_OK) {
        fprintf(stderr, "onebit-ckpt: %s: %s\n", dir, err.msg[0] ? err.msg : "out of memory");
        return 1;
    }
    return 0;
}

static void unload(loaded *l)
{
    free(l->params);
    free(l->mom);
    free(l->v);
    free(l->hist);
}

static int diff_errors(const char *a, const loaded *la, const char *b, const loaded *lb)
{
    if (la->m.world_size != lb->m.world_size || la->m.padded_size != lb->m.padded_size) {
        printf("error buffers: world size %d vs %d (D %llu vs %llu)\n", la->m.world_size,
               lb->m.world_size, (unsigned long long)la->m.padded_size,
               (unsigned long long)lb->m.padded_size);
        return 1;
    }
    size_t D = (size_t)la->m.padded_size, C = (size_t)la->m.chunk_size;
    if (D == 0) return 0;
    float *wa = malloc(D * sizeof(float)), *wb = malloc(D * sizeof(float));
    float *sa = malloc(C * sizeof(float)), *sb = malloc(C * sizeof(float));
    int diff = 0;
    /* Both read in the one-segment layout (rank r: positions [r C, (r+1) C)), so checkpoints
     * whose ranks stored the server error in other segments compare by position. */
    for (int r = 0; r < la->m.world_size && !diff; r++) {
        ob_err err = {0};
        if (!wa || !wb || !sa || !sb ||
            ob_ckpt_read_errors(a, &la->m, r, la->m.world_size, D, C, NULL, 0, wa, sa, &err) !=
                OB_OK ||
            ob_ckpt_read_errors(b, &lb->m, r, lb->m.world_size, D, C, NULL, 0, wb, sb, &err) !=
                OB_OK) {
            fprintf(stderr, "onebit-ckpt: %s\n", err.msg[0] ? err.msg : "out of memory");
            diff = 1;
            break;
        }
        char what[96];
        snprintf(what, sizeof what, "worker_error of rank %d", r);
        diff |= differ(what, wa, wb, D, sizeof(float));
        snprintf(what, sizeof what, "server_error of rank %d in one segment (positions %zu..%zu)",
                 r, (size_t)r * C, (size_t)(r + 1) * C - 1);
        diff |= differ(what, sa, sb, C, sizeof(float));
    }
    free(wa);
    free(wb);
    free(sa);
    free(sb);
    return diff;
}

/* Reads rank r's per-rank vectors of a checkpoint into out[0 ..]. */
typedef ob_status (*rank_reader)(const char *dir, const ob_ckpt_meta *m, int r, float *const *out,
                                 ob_err *err);

static ob_status read_moments(const char *dir, const ob_ckpt_meta *m, int r, float *const *out,
                              ob_err *err)
{
    return ob_ckpt_read_local_moments(dir, m, r, m->world_size, out[0], out[1], err);
}

static ob_status read_stats(const char *dir, const ob_ckpt_meta *m, int r, float *const *out,
                            ob_err *err)
{
    return ob_ckpt_read_track_stats(dir, m, r, m->world_size, out[0], err);
}

/* Every rank's own vectors (names[0 .. nvec), n floats each) of two checkpoints of the same
 * world size, where `has_a` and `has_b` say whether each holds them at all. */
static int diff_rank_vectors(const char *label, int has_a, int has_b, const char *const *names,
                             int nvec, size_t n, rank_reader read, const char *a, const loaded *la,
                             const char *b, const loaded *lb)
{
    if (has_a != has_b) {
        printf("%s: %s vs %s\n", label, has_a ? "present" : "absent", has_b ? "present" : "absent");
        return 1;
    }
    if (!has_a) return 0;
    float *va[2] = {NULL, NULL}, *vb[2] = {NULL, NULL};
    int ok = 1, diff = 0;
    for (int k = 0; k < nvec; k++) {
        va[k] = malloc(n * sizeof(float));
        vb[k] = malloc(n * sizeof(float));
        ok = ok && va[k] && vb[k];
    }
    for (int r = 0; r < la->m.world_size && !diff; r++) {
        ob_err err = {0};
        if (!ok || read(a, &la->m, r, va, &err) != OB_OK || read(b, &lb->m, r, vb, &err) != OB_OK) {
            fprintf(stderr, "onebit-ckpt: %s\n", err.msg[0] ? err.msg : "out of memory");
            diff = 1;
            break;
        }
        for (int k = 0; k < nvec; k++) {
            char what[64];
            snprintf(what, sizeof what, "%s of rank %d", names[k], r);
            diff |= differ(what, va[k], vb[k], n, sizeof(float));
        }
    }
    for (int k = 0; k < nvec; k++) {
        free(va[k]);
        free(vb[k]);
    }
    return diff;
}

/* Every rank's own moments (checkpoints of an optimizer that keeps them per rank). */
static int diff_local_moments(const char *a, const loaded *la, const char *b, const loaded *lb)
{
    static const char *const names[2] = {"local_exp_avg", "local_exp_avg_sq"};
    return diff_rank_vectors("per-rank moments", la->m.local_moments, lb->m.local_moments, names, 2,
                             (size_t)la->m.num_params, read_moments, a, la, b, lb);
}

/* Every rank's variance statistics (checkpoints of a job with track_variance). */
static int diff_track_stats(const char *a, const loaded *la, const char *b, const loaded *lb)
{
    static const char *const names[1] = {"variance_stats"};
    return diff_rank_vectors("variance statistics", la->m.track_stats, lb->m.track_stats, names, 1,
                             3 * (size_t)la->m.num_params, read_stats, a, la, b, lb);
}

static int cmd_diff(const char *a, const char *b, const char *only)
{
    loaded la, lb;
    if (load(a, &la) != 0) return 1;
    if (load(b, &lb) != 0) {
        unload(&la);
        return 1;
    }
    int diff = 0;
    if (la.m.num_params != lb.m.num_params) {
        printf("parameters: %llu vs %llu\n", (unsigned long long)la.m.num_params,
               (unsigned long long)lb.m.num_params);
        diff = 1;
    } else {
        size_t d = (size_t)la.m.num_params;
        if (wanted(only, "params")) diff |= differ("params", la.params, lb.params, d, 4);
        if (wanted(only, "exp_avg")) diff |= differ("exp_avg", la.mom, lb.mom, d, 4);
        if (wanted(only, "exp_avg_sq")) diff |= differ("exp_avg_sq", la.v, lb.v, d, 4);
        if (wanted(only, "v_norm_history")) {
            if (la.hist_len != lb.hist_len) {
                printf("v_norm_history: %zu vs %zu entries\n", la.hist_len, lb.hist_len);
                diff = 1;
            } else if (la.hist_len) {
                diff |= differ("v_norm_history", la.hist, lb.hist, la.hist_len, 8);
            }
        }
        if (wanted(only, "errors")) diff |= diff_errors(a, &la, b, &lb);
        if (wanted(only, "errors") && la.m.world_size == lb.m.world_size)
            diff |= diff_local_moments(a, &la, b, &lb);
        if (wanted(only, "errors") && la.m.world_size == lb.m.world_size)
            diff |= diff_track_stats(a, &la, b, &lb);
        if (!only && (la.m.step != lb.m.step || la.m.freeze_step != lb.m.freeze_step)) {
            printf("step %ld vs %ld, freeze step %ld vs %ld\n", la.m.step, lb.m.step,
                   la.m.freeze_step, lb.m.freeze_step);
            diff = 1;
        }
        /* The divergence guard's loss tracker decides rollbacks: a resume must carry it on. */
        double ta[3] = {la.m.loss_ema, la.m.loss_at_freeze, la.m.loss_best};
        double tb[3] = {lb.m.loss_ema, lb.m.loss_at_freeze, lb.m.loss_best};
        if (!only && (memcmp(ta, tb, sizeof ta) != 0 || la.m.rollbacks != lb.m.rollbacks)) {
            printf("loss guard: average %.9g vs %.9g, at the freeze %.9g vs %.9g, lowest %.9g vs "
                   "%.9g, rollbacks %d vs %d\n",
                   ta[0], tb[0], ta[1], tb[1], ta[2], tb[2], la.m.rollbacks, lb.m.rollbacks);
            diff = 1;
        }
        /* A resume inside a warm start's refit must freeze as the uninterrupted run does. */
        if (!only && (la.m.warm_start != lb.m.warm_start || la.m.refit_end != lb.m.refit_end ||
                      la.m.refit_scale != lb.m.refit_scale)) {
            printf("warm start: %s vs %s, refit until step %ld vs %ld, scale %.9g vs %.9g\n",
                   warm_name(la.m.warm_start), warm_name(lb.m.warm_start), la.m.refit_end,
                   lb.m.refit_end, la.m.refit_scale, lb.m.refit_scale);
            diff = 1;
        }
    }
    unload(&la);
    unload(&lb);
    printf(diff ? "checkpoints differ\n" : "identical\n");
    return diff;
}

/* Resolves what the user named into a checkpoint directory (out, OB_CKPT_PATH_LEN bytes): a
 * state.h5 file gives its directory, a directory with a state.h5 is taken as is, any other
 * directory is a job directory whose newest valid checkpoint is taken. */
static int resolve(const char *arg, char *out)
{
    struct stat sb;
    ob_err err = {0};
    if (snprintf(out, OB_CKPT_PATH_LEN, "%s", arg) >= OB_CKPT_PATH_LEN) {
        fprintf(stderr, "onebit-ckpt: %s: path too long\n", arg);
        return 1;
    }
    if (stat(arg, &sb) != 0) {
        fprintf(stderr, "onebit-ckpt: %s: no such file or directory\n", arg);
        return 1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        char *slash = strrchr(out, '/');
        if (!slash)
            snprintf(out, OB_CKPT_PATH_LEN, ".");
        else if (slash == out)
            out[1] = '\0';
        else
            *slash = '\0';
        return 0;
    }
    char state[OB_CKPT_PATH_LEN + 16];
    snprintf(state, sizeof state, "%s/state.h5", arg);
    if (stat(state, &sb) == 0) return 0;
    if (ob_ckpt_find_latest(arg, out, NULL, NULL, NULL, &err) != OB_OK) {
        fprintf(stderr, "onebit-ckpt: %s: no checkpoint (%s)\n", arg, err.msg);
        return 1;
    }
    return 0;
}

static int cmd_verify(const char *arg)
{
    char dir[OB_CKPT_PATH_LEN];
    if (resolve(arg, dir) != 0) return 1;
    ob_err err = {0};
    ob_ckpt_meta m;
    ob_ckpt_tensor *t = NULL;
    size_t n = 0;
    if (ob_ckpt_verify(dir, &m, &err) != OB_OK ||
        ob_ckpt_read_tensors(dir, &m, &t, &n, &err) != OB_OK) {
        fprintf(stderr, "onebit-ckpt: %s\n", err.msg);
        printf("%s: does not verify\n", dir);
        return 1;
    }
    free(t);
    if (n)
        printf("%s: ok (step %ld, %llu parameters in %zu tensors, %d rank files)\n", dir, m.step,
               (unsigned long long)m.num_params, n, m.world_size);
    else
        printf("%s: ok (step %ld, %llu parameters, no tensor index, %d rank files)\n", dir, m.step,
               (unsigned long long)m.num_params, m.world_size);
    return 0;
}

static int cmd_tensors(const char *arg)
{
    char dir[OB_CKPT_PATH_LEN];
    if (resolve(arg, dir) != 0) return 1;
    ob_err err = {0};
    ob_ckpt_meta m;
    ob_ckpt_tensor *t = NULL;
    size_t n = 0;
    if (ob_ckpt_read_meta(dir, &m, NULL, &err) != OB_OK ||
        ob_ckpt_read_tensors(dir, &m, &t, &n, &err) != OB_OK) {
        fprintf(stderr, "onebit-ckpt: %s\n", err.msg);
        return 1;
    }
    if (n == 0) {
        printf("no tensor index (written before it existed): one buffer of %llu parameters\n",
               (unsigned long long)m.num_params);
        return 0;
    }
    printf("%-24s %-20s %12s %12s\n", "NAME", "SHAPE", "OFFSET", "NUMEL");
    for (size_t i = 0; i < n; i++) {
        char shape[96] = "(";
        unsigned long long numel = 1;
        for (uint32_t k = 0; k < t[i].ndim; k++) {
            size_t len = strlen(shape);
            snprintf(shape + len, sizeof shape - len, "%s%llu", k ? ", " : "",
                     (unsigned long long)t[i].shape[k]);
            numel *= t[i].shape[k];
        }
        size_t len = strlen(shape);
        snprintf(shape + len, sizeof shape - len, ")");
        printf("%-24s %-20s %12llu %12llu\n", t[i].name, shape, (unsigned long long)t[i].offset,
               numel);
    }
    free(t);
    return 0;
}

static int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {{"format", required_argument, NULL, 'f'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"optim", no_argument, NULL, 'O'},
                                         {NULL, 0, NULL, 0}};
    const char *format = NULL, *out = NULL;
    int with_optim = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:o:", opts, NULL)) != -1) {
        if (c == 'f')
            format = optarg;
        else if (c == 'o')
            out = optarg;
        else if (c == 'O')
            with_optim = 1;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1 || !format || !out) {
        usage(stderr);
        return 2;
    }
    ob_ckpt_export_format fmt;
    if (!strcmp(format, "npz"))
        fmt = OB_CKPT_EXPORT_NPZ;
    else if (!strcmp(format, "safetensors"))
        fmt = OB_CKPT_EXPORT_SAFETENSORS;
    else {
        fprintf(stderr, "onebit-ckpt: unknown format '%s' (npz or safetensors)\n", format);
        return 2;
    }
    char dir[OB_CKPT_PATH_LEN];
    if (resolve(argv[optind], dir) != 0) return 1;
    ob_err err = {0};
    size_t n = 0;
    if (ob_ckpt_export(dir, fmt, with_optim, out, &n, &err) != OB_OK) {
        fprintf(stderr, "onebit-ckpt: %s\n", err.msg);
        return 1;
    }
    printf("%s: %zu tensors from %s\n", out, n, dir);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        help();
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("onebit-ckpt %s (checkpoint format %d)\n", ONEBIT_VERSION, OB_CKPT_FORMAT_VERSION);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "info")) return cmd_info(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "list")) return cmd_list(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "verify")) return cmd_verify(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "tensors")) return cmd_tensors(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "export")) return cmd_export(argc - 1, argv + 1);
    if ((argc == 4 || argc == 6) && !strcmp(argv[1], "diff")) {
        const char *only = NULL;
        if (argc == 6) {
            if (strcmp(argv[4], "--only") != 0) {
                usage(stderr);
                return 2;
            }
            only = argv[5];
        }
        return cmd_diff(argv[2], argv[3], only);
    }
    usage(stderr);
    return 2;
}
