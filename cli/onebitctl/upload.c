/* submit --program's upload: the script, or the tree of --program-dir, read into memory as the
 * files of a SubmitJobRequest. Only regular files travel (a symbolic link or a device is refused
 * by name; ".git" and "__pycache__" directories are left out), in a sorted walk, and the count
 * and the bytes are bounded by onebitd's hard limits before anything is read, so that a wrong
 * directory (a home, a data set) is refused at once instead of filling memory. onebitd checks
 * again, against its own, possibly smaller, --max-upload-size. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "ctl.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct pack {
    obctl_upload *up;
    const char *flag;  /* the option named in messages */
    const char *local; /* the directory as the user named it */
} pack;

static int add_file(pack *p, const char *full, const char *rel, const struct stat *st)
{
    obctl_upload *up = p->up;
    if (up->n >= OBCTL_UPLOAD_MAX_FILES) {
        fprintf(stderr,
                "onebitctl: %s %s: more than %d files (onebitd takes at most %d in one "
                "upload)\n",
                p->flag, p->local, OBCTL_UPLOAD_MAX_FILES, OBCTL_UPLOAD_MAX_FILES);
        return EXIT_USAGE;
    }
    uint64_t size = (uint64_t)st->st_size;
    if (size > OBCTL_UPLOAD_MAX_BYTES || up->total > OBCTL_UPLOAD_MAX_BYTES - size) {
        fprintf(stderr,
                "onebitctl: %s %s: more than %d MiB in all at %s (onebitd takes at most "
                "its --max-upload-size, 64 MiB by default)\n",
                p->flag, p->local, (int)(OBCTL_UPLOAD_MAX_BYTES >> 20), rel);
        return EXIT_USAGE;
    }
    FILE *f = fopen(full, "rb");
    unsigned char *data = size ? malloc((size_t)size) : NULL;
    char *path = strdup(rel);
    size_t got = f && data ? fread(data, 1, (size_t)size, f) : 0;
    int ok = f && path && (!size || data) && got == (size_t)size && !ferror(f);
    int e = errno;
    if (f) fclose(f);
    if (!ok) {
        fprintf(stderr, "onebitctl: %s: %s\n", full, f ? "changed while it was read" : strerror(e));
        free(data);
        free(path);
        return EXIT_FAIL;
    }
    obctl_file *fl = &up->files[up->n++];
    *fl = (obctl_file){
        .path = path, .mode = (uint32_t)(st->st_mode & 0777), .data = data, .len = (size_t)size};
    up->total += size;
    return EXIT_OK;
}

static int skipped_dir(const char *name)
{
    return !strcmp(name, ".git") || !strcmp(name, "__pycache__");
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds every regular file under full (rel: its path in the upload, "" at the top). */
static int walk(pack *p, const char *full, const char *rel, int depth)
{
    if (depth > 64) {
        fprintf(stderr, "onebitctl: %s %s: directories nested deeper than 64\n", p->flag, p->local);
        return EXIT_USAGE;
    }
    DIR *d = opendir(full);
    if (!d) {
        fprintf(stderr, "onebitctl: %s: %s\n", full, strerror(errno));
        return EXIT_FAIL;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = EXIT_OK;
    for (struct dirent *e; rc == EXIT_OK && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown)
                rc = EXIT_FAIL;
            else
                names = grown;
        }
        if (rc == EXIT_OK && !(names[n++] = strdup(e->d_name))) rc = EXIT_FAIL;
    }
    closedir(d);
    if (rc == EXIT_OK && n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; rc == EXIT_OK && i < n; i++) {
        char cfull[PATH_MAX], crel[PATH_MAX];
        if (snprintf(cfull, sizeof cfull, "%s/%s", full, names[i]) >= (int)sizeof cfull ||
            snprintf(crel, sizeof crel, "%s%s%s", rel, rel[0] ? "/" : "", names[i]) >=
                (int)sizeof crel) {
            fprintf(stderr, "onebitctl: %s/%s: path too long\n", full, names[i]);
            rc = EXIT_USAGE;
            break;
        }
        struct stat st;
        if (lstat(cfull, &st) != 0) {
            fprintf(stderr, "onebitctl: %s: %s\n", cfull, strerror(errno));
            rc = EXIT_FAIL;
        } else if (S_ISDIR(st.st_mode)) {
            if (!skipped_dir(names[i])) rc = walk(p, cfull, crel, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            rc = add_file(p, cfull, crel, &st);
        } else {
            fprintf(stderr, "onebitctl: %s %s: %s is %s; an upload holds regular files only\n",
                    p->flag, p->local, crel,
                    S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file");
            rc = EXIT_USAGE;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

void obctl_upload_free(obctl_upload *up)
{
    for (size_t i = 0; i < up->n; i++) {
        free((void *)up->files[i].path);
        free((void *)up->files[i].data);
    }
    free(up->files);
    memset(up, 0, sizeof *up);
}

int obctl_upload_pack(const char *program, const char *dir, obctl_upload *up, char *entry,
                      size_t cap)
{
    memset(up, 0, sizeof *up);
    up->files = calloc(OBCTL_UPLOAD_MAX_FILES, sizeof *up->files);
    if (!up->files) return EXIT_FAIL;
    char *prog = realpath(program, NULL);
    if (!prog) {
        fprintf(stderr, "onebitctl: --program %s: %s\n", program, strerror(errno));
        obctl_upload_free(up);
        return EXIT_USAGE;
    }
    struct stat st;
    int rc = EXIT_OK;
    if (stat(prog, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "onebitctl: --program %s: not a regular file\n", program);
        rc = EXIT_USAGE;
    } else if (!dir) { /* the script alone, under its own name */
        const char *base = strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog;
        pack p = {.up = up, .flag = "--program", .local = program};
        snprintf(entry, cap, "%s", base);
        rc = add_file(&p, prog, base, &st);
    } else { /* the tree, with the script somewhere in it */
        char *top = realpath(dir, NULL);
        size_t tl = top ? strlen(top) : 0;
        if (!top || stat(top, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "onebitctl: --program-dir %s: %s\n", dir,
                    top ? "not a directory" : strerror(errno));
            rc = EXIT_USAGE;
        } else if (strncmp(prog, top, tl) != 0 || (tl > 1 && prog[tl] != '/')) {
            fprintf(stderr, "onebitctl: --program %s: not inside --program-dir %s\n", program, dir);
            rc = EXIT_USAGE;
        } else {
            pack p = {.up = up, .flag = "--program-dir", .local = dir};
            snprintf(entry, cap, "%s", prog + tl + (tl > 1));
            rc = walk(&p, top, "", 0);
        }
        free(top);
    }
    free(prog);
    if (rc != EXIT_OK) obctl_upload_free(up);
    return rc;
}
