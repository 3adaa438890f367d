/* Checkpoint directories: naming, atomic commit (fsync, rename, fsync the parent), listing,
 * pruning, and finding the newest checkpoint that verifies. */
#include "ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ob_status ob__ckpt_join(char *out, const char *dir, const char *name, ob_err *err)
{
    int n = snprintf(out, OB_CKPT_PATH_LEN, "%s/%s", dir, name);
    if (n < 0 || n >= OB_CKPT_PATH_LEN)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "path too long: %.200s/%s", dir, name);
    return OB_OK;
}

ob_status ob_ckpt_step_dir(char *out, const char *job_dir, long step, int tmp, ob_err *err)
{
    if (!job_dir || !job_dir[0])
        return OB_ERR(err, OB_ERR_INVALID_ARG, "checkpoint: empty job directory");
    if (step < 0 || step > 999999999L)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "checkpoint: step %ld out of range", step);
    int n = snprintf(out, OB_CKPT_PATH_LEN, "%s/step-%08ld%s", job_dir, step, tmp ? ".tmp" : "");
    if (n < 0 || n >= OB_CKPT_PATH_LEN)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "checkpoint: path too long under %.200s", job_dir);
    return OB_OK;
}

ob_status ob__ckpt_fsync_path(const char *path, int is_dir, ob_err *err)
{
    int fd = open(path, O_RDONLY | (is_dir ? O_DIRECTORY : 0));
    if (fd < 0) return OB_ERR(err, OB_ERR_IO, "open %s for fsync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc != 0) return OB_ERR(err, OB_ERR_IO, "fsync %s: %s", path, strerror(saved));
    return OB_OK;
}

ob_status ob_ckpt_mkdirs(const char *dir, ob_err *err)
{
    char buf[OB_CKPT_PATH_LEN];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof buf)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "checkpoint directory: bad length %zu", len);
    memcpy(buf, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return OB_ERR(err, OB_ERR_IO, "mkdir %s: %s", buf, strerror(errno));
        buf[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return OB_ERR(err, OB_ERR_IO, "%s: not a directory", dir);
    return OB_OK;
}

ob_status ob_ckpt_prepare(const char *job_dir, long step, char *out, ob_err *err)
{
    ob_status st = ob_ckpt_step_dir(out, job_dir, step, 1, err);
    if (st == OB_OK) st = ob_ckpt_mkdirs(job_dir, err);
    if (st == OB_OK) st = ob_remove_tree(out, err);
    if (st != OB_OK) return OB_WRAP(err, st, "preparing checkpoint %ld", step);
    if (mkdir(out, 0755) != 0) return OB_ERR(err, OB_ERR_IO, "mkdir %s: %s", out, strerror(errno));
    return OB_OK;
}

ob_status ob_ckpt_commit(const char *job_dir, long step, ob_err *err)
{
    char tmp[OB_CKPT_PATH_LEN], fin[OB_CKPT_PATH_LEN];
    ob_status st = ob_ckpt_step_dir(tmp, job_dir, step, 1, err);
    if (st == OB_OK) st = ob_ckpt_step_dir(fin, job_dir, step, 0, err);
    if (st == OB_OK) st = ob__ckpt_fsync_path(tmp, 1, err);
    /* A committed checkpoint of the same step (a rerun of that step) is replaced whole. */
    if (st == OB_OK) st = ob_remove_tree(fin, err);
    if (st != OB_OK) return OB_WRAP(err, st, "committing checkpoint %ld", step);
    if (rename(tmp, fin) != 0)
        return OB_ERR(err, OB_ERR_IO, "rename %s -> %s: %s", tmp, fin, strerror(errno));
    st = ob__ckpt_fsync_path(job_dir, 1, err);
    if (st != OB_OK) return OB_WRAP(err, st, "committing checkpoint %ld", step);
    return OB_OK;
}

ob_status ob_ckpt_discard(const char *job_dir, long step, ob_err *err)
{
    char tmp[OB_CKPT_PATH_LEN];
    ob_status st = ob_ckpt_step_dir(tmp, job_dir, step, 1, err);
    if (st == OB_OK) st = ob_remove_tree(tmp, err);
    return st;
}

/* Parses "step-<digits>" or "step-<digits>.tmp". Returns 1 on a match. */
static int parse_name(const char *name, long *step, int *committed)
{
    if (strncmp(name, "step-", 5) != 0) return 0;
    const char *p = name + 5;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (v > 99999999L) return 0;
        v = v * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (digits == 0) return 0;
    if (*p == '\0')
        *committed = 1;
    else if (!strcmp(p, ".tmp"))
        *committed = 0;
    else
        return 0;
    *step = v;
    return 1;
}

static int entry_cmp(const void *a, const void *b)
{
    const ob_ckpt_entry *x = a, *y = b;
    if (x->step != y->step) return x->step > y->step ? -1 : 1;
    return y->committed - x->committed;
}

ob_status ob_ckpt_list(const char *job_dir, ob_ckpt_entry **out, size_t *n, ob_err *err)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(job_dir);
    if (!d) {
        if (errno == ENOENT) return OB_OK;
        return OB_ERR(err, OB_ERR_IO, "opendir %s: %s", job_dir, strerror(errno));
    }
    ob_ckpt_entry *list = NULL;
    size_t count = 0, cap = 0;
    ob_status st = OB_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long step;
        int committed;
        if (!parse_name(e->d_name, &step, &committed)) continue;
        char path[OB_CKPT_PATH_LEN];
        struct stat sb;
        if (ob__ckpt_join(path, job_dir, e->d_name, NULL) != OB_OK) continue;
        if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (count == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            ob_ckpt_entry *nl = realloc(list, ncap * sizeof *nl);
            if (!nl) {
                st = OB_ERR(err, OB_ERR_NOMEM, "listing %s", job_dir);
                break;
            }
            list = nl;
            cap = ncap;
        }
        list[count].step = step;
        list[count].committed = committed;
        memcpy(list[count].path, path, sizeof path);
        count++;
    }
    closedir(d);
    if (st != OB_OK) {
        free(list);
        return st;
    }
    if (count) qsort(list, count, sizeof *list, entry_cmp);
    *out = list;
    *n = count;
    return OB_OK;
}

/* --- checkpoints written by this writer ---------------------------------------------------- */

/* What stat says of a file that changes when the file is replaced or written to. */
typedef struct file_id {
    char name[32]; /* state.h5, rank-NNNNN.h5: longer names are never recorded */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} file_id;

typedef struct written_ckpt {
    long step;
    size_t n;
    file_id *files;
} written_ckpt;

struct ob_ckpt_written {
    written_ckpt ck[OB_CKPT_WRITTEN_MAX];
    size_t n;
};

static int file_id_cmp(const void *a, const void *b)
{
    return strcmp(((const file_id *)a)->name, ((const file_id *)b)->name);
}

/* The identities of every entry of dir, sorted by name; *files malloc'd. A name too long to
 * record or an entry that is not a regular file makes the set unusable (OB_ERR_CORRUPT). */
static ob_status dir_ids(const char *dir, file_id **files, size_t *n, ob_err *err)
{
    *files = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return OB_ERR(err, OB_ERR_IO, "opendir %s: %s", dir, strerror(errno));
    file_id *list = NULL;
    size_t count = 0, cap = 0;
    ob_status st = OB_OK;
    struct dirent *e;
    while (st == OB_OK && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        struct stat sb;
        char path[OB_CKPT_PATH_LEN];
        if (strlen(e->d_name) >= sizeof list->name || ob__ckpt_join(path, dir, e->d_name, NULL) ||
            lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            st = OB_ERR(err, OB_ERR_CORRUPT, "%s: unexpected entry %.64s", dir, e->d_name);
            break;
        }
        if (count == cap) {
            size_t ncap = cap ? 2 * cap : 8;
            file_id *nl = ncap <= ((size_t)1 << 20) ? realloc(list, ncap * sizeof *nl) : NULL;
            if (!nl) {
                st = OB_ERR(err, OB_ERR_NOMEM, "listing %s", dir);
                break;
            }
            list = nl;
            cap = ncap;
        }
        file_id *f = &list[count++];
        memset(f, 0, sizeof *f);
        snprintf(f->name, sizeof f->name, "%s", e->d_name);
        f->dev = sb.st_dev;
        f->ino = sb.st_ino;
        f->size = sb.st_size;
        f->mtime = sb.st_mtim;
        f->ctime = sb.st_ctim;
    }
    closedir(d);
    if (st != OB_OK) {
        free(list);
        return st;
    }
    if (count) qsort(list, count, sizeof *list, file_id_cmp);
    *files = list;
    *n = count;
    return OB_OK;
}

static int same_ids(const file_id *a, const file_id *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(a[i].name, b[i].name) || a[i].dev != b[i].dev || a[i].ino != b[i].ino ||
            a[i].size != b[i].size || a[i].mtime.tv_sec != b[i].mtime.tv_sec ||
            a[i].mtime.tv_nsec != b[i].mtime.tv_nsec || a[i].ctime.tv_sec != b[i].ctime.tv_sec ||
            a[i].ctime.tv_nsec != b[i].ctime.tv_nsec)
            return 0;
    return 1;
}

ob_status ob_ckpt_written_create(ob_ckpt_written **out, ob_err *err)
{
    *out = calloc(1, sizeof **out);
    return *out ? OB_OK : OB_ERR(err, OB_ERR_NOMEM, "checkpoint record");
}

static void forget(ob_ckpt_written *w, size_t i)
{
    free(w->ck[i].files);
    memmove(&w->ck[i], &w->ck[i + 1], (w->n - i - 1) * sizeof w->ck[0]);
    w->n--;
}

void ob_ckpt_written_destroy(ob_ckpt_written *w)
{
    if (!w) return;
    while (w->n)
        forget(w, w->n - 1);
    free(w);
}

static written_ckpt *find_written(ob_ckpt_written *w, long step)
{
    for (size_t i = 0; w && i < w->n; i++)
        if (w->ck[i].step == step) return &w->ck[i];
    return NULL;
}

ob_status ob_ckpt_written_add(ob_ckpt_written *w, const char *job_dir, long step, ob_err *err)
{
    char dir[OB_CKPT_PATH_LEN];
    ob_status st = ob_ckpt_step_dir(dir, job_dir, step, 0, err);
    file_id *files = NULL;
    size_t n = 0;
    if (st == OB_OK) st = dir_ids(dir, &files, &n, err);
    if (st != OB_OK) return st;
    written_ckpt *old = find_written(w, step); /* the same step written again: replaced */
    if (old) forget(w, (size_t)(old - w->ck));
    if (w->n == OB_CKPT_WRITTEN_MAX) forget(w, 0);
    w->ck[w->n++] = (written_ckpt){step, n, files};
    return OB_OK;
}

/* Whether the checkpoint at path counts as verified: its files as w recorded them, or else
 * ob_ckpt_verify. */
static int counts(ob_ckpt_written *w, const ob_ckpt_entry *e)
{
    written_ckpt *c = find_written(w, e->step);
    if (c) {
        file_id *now = NULL;
        size_t n = 0;
        int same =
            dir_ids(e->path, &now, &n, NULL) == OB_OK && n == c->n && same_ids(now, c->files, n);
        free(now);
        if (same) return 1;
    }
    return ob_ckpt_verify(e->path, NULL, NULL) == OB_OK;
}

ob_status ob_ckpt_prune(const char *job_dir, int keep, int *removed, ob_err *err)
{
    return ob_ckpt_prune_written(job_dir, keep, NULL, removed, err);
}

ob_status ob_ckpt_prune_written(const char *job_dir, int keep, ob_ckpt_written *w, int *removed,
                                ob_err *err)
{
    if (removed) *removed = 0;
    if (keep < 1) return OB_ERR(err, OB_ERR_INVALID_ARG, "checkpoint keep %d: must be >= 1", keep);
    ob_ckpt_entry *list;
    size_t n;
    ob_status st = ob_ckpt_list(job_dir, &list, &n, err);
    if (st != OB_OK) return st;
    /* Newest first: the first `keep` committed checkpoints that verify are kept, and only what
     * lies below the last of them goes. A committed checkpoint that does not verify is not
     * counted: above the kept ones it stays (a damaged or foreign directory is for a person to
     * look at, and deleting it could not make a resume better), below them it goes with the
     * rest. So no directory, whatever its name or content, can push a verified checkpoint out,
     * and the newest verified one is never removed. */
    int kept = 0;
    long newest = -1;
    for (size_t i = 0; i < n && st == OB_OK; i++) {
        int below = kept >= keep;
        if (list[i].committed) {
            if (!below) {
                if (counts(w, &list[i])) {
                    if (newest < 0) newest = list[i].step;
                    kept++;
                }
                continue;
            }
            st = ob_remove_tree(list[i].path, err);
            if (st == OB_OK && removed) (*removed)++;
            written_ckpt *c = st == OB_OK ? find_written(w, list[i].step) : NULL;
            if (c) forget(w, (size_t)(c - w->ck));
        } else if (newest >= 0 && list[i].step < newest) {
            st = ob_remove_tree(list[i].path, err); /* a write that never finished */
        }
    }
    free(list);
    if (st == OB_OK) st = ob__ckpt_fsync_path(job_dir, 1, err);
    return st == OB_OK ? OB_OK : OB_WRAP(err, st, "pruning %s", job_dir);
}

ob_status ob_ckpt_find_latest(const char *job_dir, char *out, ob_ckpt_meta *meta,
                              ob_ckpt_skip_fn skip, void *user, ob_err *err)
{
    return ob_ckpt_find_latest_below(job_dir, LONG_MAX, out, meta, skip, user, err);
}

ob_status ob_ckpt_find_latest_below(const char *job_dir, long below, char *out, ob_ckpt_meta *meta,
                                    ob_ckpt_skip_fn skip, void *user, ob_err *err)
{
    ob_ckpt_entry *list;
    size_t n;
    ob_status st = ob_ckpt_list(job_dir, &list, &n, err);
    if (st != OB_OK) return st;
    ob_status found = OB_ERR_NOT_FOUND;
    for (size_t i = 0; i < n; i++) {
        if (list[i].step >= below) continue;
        if (!list[i].committed) {
            if (skip) skip(list[i].path, "incomplete: never committed (.tmp)", user);
            continue;
        }
        ob_err why = {0};
        if (ob_ckpt_verify(list[i].path, meta, &why) != OB_OK) {
            if (skip) skip(list[i].path, why.msg, user);
            continue;
        }
        memcpy(out, list[i].path, OB_CKPT_PATH_LEN);
        found = OB_OK;
        break;
    }
    free(list);
    if (found != OB_OK)
        return OB_ERR(err, OB_ERR_NOT_FOUND, "no usable checkpoint in %s (%zu looked at)", job_dir,
                      n);
    return OB_OK;
}
