/* A program job's uploaded files (ob_submit_req.files): checked as hostile input, written to a
 * staging directory of the service's own (STATE/uploads/), and moved under the job's directory
 * (STATE/jobs/<id>/program/) once the job exists; ob_service_delete removes them with the job's
 * other files, and every attempt runs the program there (ob__svc_pin_paths).
 *
 * Every path is relative, "/"-separated, without ".", ".." or empty parts, of printable bytes;
 * modes are permission bits; the count, each file and the total are bounded, and sizes are
 * compared before anything is allocated or written, without wrapping around. The staging
 * directory is new (mkdtemp, 0700) and only this code creates anything in it, with O_EXCL and
 * O_NOFOLLOW, so a path cannot land outside it, and a duplicate or a file where a directory is
 * (or the reverse) is refused by name. */
#define _XOPEN_SOURCE 700 /* mkdtemp, realpath */
#include "onebit/base.h"
#include "onebit/servers.h"
#include "service_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int64_t ob__upload_limit(const ob_service *svc)
{
    int64_t m = svc->cfg.max_upload_bytes;
    if (m <= 0) return OB_UPLOAD_DEFAULT_MAX;
    return m > OB_UPLOAD_MAX_LIMIT ? OB_UPLOAD_MAX_LIMIT : m;
}

int64_t ob_service_max_upload_bytes(const ob_service *svc)
{
    return ob__upload_limit(svc);
}

size_t ob_service_max_submit_bytes(const ob_service *svc, int base64)
{
    size_t up = (size_t)ob__upload_limit(svc);
    size_t data = base64 ? (up + 2) / 3 * 4 + 4 * (size_t)OB_UPLOAD_MAX_FILES : up;
    /* Each file's path and its framing: JSON's keys and quotes, or protobuf's tags. */
    size_t framing = (size_t)OB_UPLOAD_MAX_FILES * (2 * OB_UPLOAD_PATH_MAX + 64);
    return OB_API_MAX_REQUEST + data + framing;
}

/* Why path is not a path an upload may hold, into why[cap]; 0 when it is fine. */
static int bad_path(const char *path, char *why, size_t cap)
{
    size_t len = strlen(path);
    if (len == 0) {
        snprintf(why, cap, "empty");
        return 1;
    }
    if (len >= OB_UPLOAD_PATH_MAX) {
        snprintf(why, cap, "%zu bytes, more than the limit of %d", len, OB_UPLOAD_PATH_MAX - 1);
        return 1;
    }
    if (path[0] == '/') {
        snprintf(why, cap,
                 "an absolute path; a path in an upload is relative to the program's "
                 "directory");
        return 1;
    }
    for (const unsigned char *c = (const unsigned char *)path; *c; c++)
        if (*c < 0x20 || *c == 0x7f) {
            snprintf(why, cap, "a control character (0x%02x)", *c);
            return 1;
        }
    for (const char *part = path;;) {
        size_t n = strcspn(part, "/");
        if (n == 0 || (n == 1 && part[0] == '.') || (n == 2 && !strncmp(part, "..", 2))) {
            snprintf(why, cap,
                     "a part that is %s; a path in an upload has none of '.', '..' "
                     "or an empty part",
                     n == 0   ? "empty"
                     : n == 1 ? "'.'"
                              : "'..'");
            return 1;
        }
        if (n > NAME_MAX) {
            snprintf(why, cap, "a part of %zu bytes, more than %d", n, NAME_MAX);
            return 1;
        }
        if (!part[n]) break;
        part += n + 1;
    }
    return 0;
}

ob_status ob__upload_check(const ob_upload_file *f, size_t n, int64_t max_bytes, char *problem,
                           size_t cap)
{
    problem[0] = '\0';
    if (n > OB_UPLOAD_MAX_FILES) {
        snprintf(problem, cap, "files: %zu files, more than the limit of %d in one upload", n,
                 OB_UPLOAD_MAX_FILES);
        return OB_ERR_INVALID_ARG;
    }
    uint64_t total = 0, max = (uint64_t)max_bytes;
    for (size_t i = 0; i < n; i++) {
        char why[200];
        const char *p = f[i].path ? f[i].path : "";
        if (bad_path(p, why, sizeof why)) {
            snprintf(problem, cap, "files[%zu].path '%.200s': %s", i, p, why);
            return OB_ERR_INVALID_ARG;
        }
        if (f[i].mode > 0777) {
            snprintf(problem, cap,
                     "files[%zu].mode: %#o for '%.200s'; permission bits (0 to 0777) only", i,
                     (unsigned)f[i].mode, p);
            return OB_ERR_INVALID_ARG;
        }
        if (f[i].len > max || total > max - f[i].len) { /* total + len > max, without wrapping */
            snprintf(problem, cap,
                     "files: the upload holds more than the limit of %llu bytes (%.1f MiB) in all "
                     "at files[%zu] '%.200s' of %zu bytes (onebitd --max-upload-size)",
                     (unsigned long long)max, (double)max / 1048576.0, i, p, f[i].len);
            return OB_ERR_INVALID_ARG;
        }
        total += f[i].len;
    }
    return OB_OK;
}

ob_status ob__upload_room(const ob_service *svc, const ob_upload_file *f, size_t n, ob_err *err)
{
    /* Checked files: n <= OB_UPLOAD_MAX_FILES, the sum within OB_UPLOAD_MAX_LIMIT. A block
     * for each file's tail and its directory entry. */
    uint64_t need = 0;
    for (size_t i = 0; i < n; i++)
        need += f[i].len + 4096;
    int64_t have = ob__svc_free_bytes(svc->state_dir), keep = svc->cfg.store_min_free_bytes;
    if (have < 0) return OB_OK; /* unknown: the writes will say */
    if (keep < 0) keep = 0;
    if ((uint64_t)have >= need + (uint64_t)keep) return OB_OK;
    return OB_ERR(err, OB_ERR_UNAVAILABLE,
                  "the upload needs about %llu bytes and the state directory's file system has "
                  "%lld free, %lld of them kept for the job store: try again later",
                  (unsigned long long)need, (long long)have, (long long)keep);
}

/* Creates the directories above rel (borrowed, checked) inside dir. */
static ob_status make_parents(const char *dir, const char *rel, char *problem, size_t cap)
{
    char path[PATH_MAX];
    size_t base = strlen(dir);
    for (const char *slash = strchr(rel, '/'); slash; slash = strchr(slash + 1, '/')) {
        int n = snprintf(path, sizeof path, "%s/%.*s", dir, (int)(slash - rel), rel);
        if (n < 0 || (size_t)n >= sizeof path) {
            snprintf(problem, cap, "'%.200s': the stored path is too long", rel);
            return OB_ERR_INVALID_ARG;
        }
        struct stat st;
        if (mkdir(path, 0700) == 0) continue;
        if (errno == EEXIST && lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) continue;
        snprintf(problem, cap, "'%.200s': '%.200s' is a file of the upload, not a directory", rel,
                 path + base + 1);
        return OB_ERR_INVALID_ARG;
    }
    return OB_OK;
}

/* Writes one file (checked) under dir. A problem of the upload's (a duplicate, a conflict of a
 * file and a directory) is OB_ERR_INVALID_ARG with problem set; a failed write OB_ERR_IO. */
static ob_status write_one(const char *dir, const ob_upload_file *f, size_t i, char *problem,
                           size_t cap, ob_err *err)
{
    char why[600];
    if (make_parents(dir, f->path, why, sizeof why) != OB_OK) {
        snprintf(problem, cap, "files[%zu].path %.500s", i, why);
        return OB_ERR_INVALID_ARG;
    }
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/%s", dir, f->path);
    if (n < 0 || (size_t)n >= sizeof path) {
        snprintf(problem, cap, "files[%zu].path '%.200s': the stored path is too long", i, f->path);
        return OB_ERR_INVALID_ARG;
    }
    mode_t mode = (f->mode & 0100) ? 0700 : 0600;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) {
        if (errno == EEXIST) {
            snprintf(problem, cap, "files[%zu].path '%.200s': named twice in the upload", i,
                     f->path);
            return OB_ERR_INVALID_ARG;
        }
        return OB_ERR(err, OB_ERR_IO, "storing the upload: open %s: %s", path, strerror(errno));
    }
    size_t done = 0;
    while (done < f->len) {
        ssize_t w = write(fd, f->data + done, f->len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            return OB_ERR(err, OB_ERR_IO, "storing the upload: write %s: %s", path, strerror(e));
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0)
        return OB_ERR(err, OB_ERR_IO, "storing the upload: fsync %s: %s", path, strerror(errno));
    return OB_OK;
}

/* OB_OK when entrypoint (relative) resolves to a regular file inside dir. */
static ob_status entry_in(const char *dir, const char *entrypoint, char *problem, size_t cap)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/%s", dir, entrypoint);
    char *abs = n > 0 && (size_t)n < sizeof path ? realpath(path, NULL) : NULL;
    char *root = realpath(dir, NULL);
    size_t rl = root ? strlen(root) : 0;
    struct stat st;
    int ok = abs && root && !strncmp(abs, root, rl) && abs[rl] == '/' && stat(abs, &st) == 0 &&
             S_ISREG(st.st_mode);
    free(abs);
    free(root);
    if (ok) return OB_OK;
    snprintf(problem, cap, "spec: program.entrypoint '%.200s' is not one of the uploaded files",
             entrypoint);
    return OB_ERR_INVALID_ARG;
}

ob_status ob__upload_stage(const ob_service *svc, const ob_upload_file *f, size_t n,
                           const char *entrypoint, char *staged, size_t scap, char *problem,
                           size_t cap, ob_err *err)
{
    problem[0] = '\0';
    staged[0] = '\0';
    ob_status rc = ob__svc_mkdirs(svc->uploads_dir, err);
    if (rc) return rc;
    /* mkdtemp's template: it replaces the six X's with a unique name. */
    static const char template_name[] = "submit-XXXXXX";
    if (snprintf(staged, scap, "%s/%s", svc->uploads_dir, template_name) >= (int)scap) {
        staged[0] = '\0';
        return OB_ERR(err, OB_ERR_INVALID_ARG, "the state directory's path is too long");
    }
    if (!mkdtemp(staged)) {
        int e = errno;
        staged[0] = '\0';
        return OB_ERR(err, OB_ERR_IO, "storing the upload: mkdtemp in %s: %s", svc->uploads_dir,
                      strerror(e));
    }
    for (size_t i = 0; i < n && rc == OB_OK; i++)
        rc = write_one(staged, &f[i], i, problem, cap, err);
    if (rc == OB_OK) rc = entry_in(staged, entrypoint, problem, cap);
    if (rc) {
        ob__upload_discard(staged);
        staged[0] = '\0';
    }
    return rc;
}

ob_status ob__upload_commit(const ob_service *svc, const char *staged, const char *id, ob_err *err)
{
    char dir[OB_JOB_PATH_LEN], dest[OB_JOB_PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s", svc->jobs_dir, id);
    ob__upload_dir(svc, id, dest, sizeof dest);
    ob_status rc = ob__svc_mkdirs(dir, err);
    if (rc) return rc;
    if (rename(staged, dest) != 0)
        return OB_ERR(err, OB_ERR_IO, "storing the upload: rename %s to %s: %s", staged, dest,
                      strerror(errno));
    /* The job's directory holds it for good once the directory's entry is on disk. */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    return OB_OK;
}

void ob__upload_discard(const char *staged)
{
    if (!staged || !staged[0]) return;
    ob_err ignored;
    ob_err_clear(&ignored);
    (void)ob_remove_tree(staged, &ignored);
}

void ob__upload_dir(const ob_service *svc, const char *id, char *out, size_t cap)
{
    ob__svc_job_path(svc, id, "program", out, cap);
}
