/* Clock, secret, file-tree and allocation helpers of onebit/base.h. */
#include "onebit/base.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int64_t ob_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void *ob_calloc_aligned(size_t bytes)
{
    if (bytes == 0 || bytes > SIZE_MAX - 63) return NULL;
    void *p = NULL;
    size_t rounded = ob_round_up(bytes, 64);
    if (posix_memalign(&p, 64, rounded) != 0) return NULL;
    memset(p, 0, rounded);
    return p;
}

void ob_aligned_free(void *p)
{
    free(p);
}

int ob_secret_equal(const char *a, const char *b)
{
    size_t n = strlen(a);
    if (n == 0 || n != strlen(b)) return 0;
    unsigned diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned)(a[i] ^ b[i]);
    return diff == 0;
}

ob_status ob_random_hex(char *out, size_t nbytes, ob_err *err)
{
    unsigned char raw[64];
    if (nbytes > sizeof raw) return OB_ERR(err, OB_ERR_INVALID_ARG, "%zu random bytes", nbytes);
    FILE *f = fopen("/dev/urandom", "rbe");
    size_t got = f ? fread(raw, 1, nbytes, f) : 0;
    if (f) fclose(f);
    if (got != nbytes) return OB_ERR(err, OB_ERR_IO, "reading /dev/urandom");
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    out[2 * nbytes] = '\0';
    return OB_OK;
}

ob_status ob_remove_tree(const char *path, ob_err *err)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return OB_OK;
        return OB_ERR(err, OB_ERR_IO, "stat %s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode)) {
        if (unlink(path) != 0 && errno != ENOENT)
            return OB_ERR(err, OB_ERR_IO, "unlink %s: %s", path, strerror(errno));
        return OB_OK;
    }
    DIR *d = opendir(path);
    if (!d) return OB_ERR(err, OB_ERR_IO, "opendir %s: %s", path, strerror(errno));
    ob_status st = OB_OK;
    struct dirent *e;
    while (st == OB_OK && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char child[4096];
        int n = snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        if (n < 0 || (size_t)n >= sizeof child)
            st = OB_ERR(err, OB_ERR_INVALID_ARG, "path too long: %.200s/%s", path, e->d_name);
        else
            st = ob_remove_tree(child, err);
    }
    closedir(d);
    if (st != OB_OK) return st;
    if (rmdir(path) != 0 && errno != ENOENT)
        return OB_ERR(err, OB_ERR_IO, "rmdir %s: %s", path, strerror(errno));
    return OB_OK;
}
