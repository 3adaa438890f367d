/* Where a read of a job's log starts (ob_service_log_start): its last N lines, or the lines
 * written since a time. The log (jobs/<id>/worker.log) is only ever appended to, by the
 * launcher's processes, and holds no times; so while an attempt runs, the supervisor notes the
 * log's size with the time, at most once a second and only when it grew, in jobs/<id>/log.index:
 * 16-byte records of two little-endian int64s, (time in Unix ms, size in bytes), both never
 * decreasing. Bytes past the size of one note were written after its time. */
#include "onebit/base.h"
#include "onebit/store.h"
#include "service_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NOTE_BYTES 16
#define NOTE_EVERY_MS 1000
/* Notes read at most (a year of a note a second would be more; the newest are kept). */
#define NOTES_MAX ((int64_t)4 << 20)

static void put_le64(uint8_t *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(u >> (8 * i));
}

static int64_t get_le64(const uint8_t *p)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u |= (uint64_t)p[i] << (8 * i);
    return (int64_t)u;
}

void ob__svc_log_note(ob_service *svc, ob__run *r, int64_t now, int force)
{
    if (!force && now - r->log_noted_ms < NOTE_EVERY_MS) return;
    char path[OB_JOB_PATH_LEN];
    ob__svc_job_path(svc, r->job_id, "worker.log", path, sizeof path);
    struct stat st;
    if (stat(path, &st) != 0 || (int64_t)st.st_size <= r->log_noted_size) return;
    ob__svc_job_path(svc, r->job_id, "log.index", path, sizeof path);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return; /* the notes are a help to --since, not the log: go on without */
    uint8_t rec[NOTE_BYTES];
    put_le64(rec, now);
    put_le64(rec + 8, (int64_t)st.st_size);
    if (write(fd, rec, sizeof rec) == (ssize_t)sizeof rec) {
        r->log_noted_ms = now;
        r->log_noted_size = (int64_t)st.st_size;
    }
    close(fd);
}

/* The offset of the first byte written after since_ms, from the notes: the size of the last
 * note older than since_ms (0 when there is none, or no notes at all). */
static int64_t since_offset(const char *index_path, int64_t since_ms, int64_t log_size)
{
    FILE *f = fopen(index_path, "rb");
    if (!f) return 0;
    int64_t start = 0;
    uint8_t rec[NOTE_BYTES];
    if (fseeko(f, 0, SEEK_END) == 0) {
        int64_t n = (int64_t)ftello(f) / NOTE_BYTES;
        int64_t first = n > NOTES_MAX ? n - NOTES_MAX : 0;
        if (fseeko(f, (off_t)(first * NOTE_BYTES), SEEK_SET) != 0) n = first;
        for (int64_t i = first; i < n && fread(rec, 1, sizeof rec, f) == sizeof rec; i++) {
            int64_t t = get_le64(rec), size = get_le64(rec + 8);
            if (t >= since_ms) break;
            if (size >= start && size <= log_size) start = size; /* a torn note is skipped */
        }
    }
    fclose(f);
    return start;
}

/* The offset where the last `lines` lines of f (size bytes) start, scanning back at most
 * OB_LOG_TAIL_SCAN_MAX bytes. A last line without its newline counts. */
static int64_t tail_offset(FILE *f, int64_t size, int lines)
{
    char buf[64 << 10];
    int64_t pos = size, floor = size > OB_LOG_TAIL_SCAN_MAX ? size - OB_LOG_TAIL_SCAN_MAX : 0;
    int skip_last_newline = 1;
    while (pos > floor) {
        size_t n = pos - floor < (int64_t)sizeof buf ? (size_t)(pos - floor) : sizeof buf;
        if (fseeko(f, (off_t)(pos - (int64_t)n), SEEK_SET) != 0 || fread(buf, 1, n, f) != n)
            return pos; /* shrunk under us: it is only appended to, so never */
        for (size_t i = n; i-- > 0;) {
            if (buf[i] != '\n') {
                skip_last_newline = 0;
                continue;
            }
            if (skip_last_newline) { /* the newline that ends the last line */
                skip_last_newline = 0;
                continue;
            }
            if (--lines == 0) return pos - (int64_t)n + (int64_t)i + 1;
        }
        pos -= (int64_t)n;
    }
    return floor;
}

/* offset moved forward to the start of a line (it is when the byte before it is a newline). */
static int64_t line_start(FILE *f, int64_t offset, int64_t size)
{
    char buf[64 << 10];
    int64_t pos = offset - 1;
    while (pos >= 0 && pos < size) {
        size_t n = size - pos < (int64_t)sizeof buf ? (size_t)(size - pos) : sizeof buf;
        if (fseeko(f, (off_t)pos, SEEK_SET) != 0 || fread(buf, 1, n, f) != n) return offset;
        const char *nl = memchr(buf, '\n', n);
        if (nl) return pos + (int64_t)(nl - buf) + 1;
        pos += (int64_t)n;
        if (pos - offset > OB_LOG_TAIL_SCAN_MAX) return offset; /* a line without end */
    }
    return offset < size ? offset : size;
}

ob_status ob_service_log_start(ob_service *svc, const char *id, int tail_lines, int64_t since_ms,
                               int64_t *offset, ob_err *err)
{
    *offset = 0;
    if (tail_lines < 0 || tail_lines > OB_LOG_TAIL_MAX)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "tail_lines: expected 0 to %d, got %d",
                      OB_LOG_TAIL_MAX, tail_lines);
    if (since_ms < 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "since: expected a time after 1970, got %lld ms",
                      (long long)since_ms);
    ob_job j;
    pthread_mutex_lock(&svc->mu);
    ob_status rc = ob_store_get_job(svc->store, id, &j, err);
    pthread_mutex_unlock(&svc->mu);
    if (rc) return rc;
    ob_job_clear(&j);
    char path[OB_JOB_PATH_LEN];
    ob__svc_job_path(svc, id, "worker.log", path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) return OB_OK; /* no attempt yet: the log starts at 0 */
    if (fseeko(f, 0, SEEK_END) != 0) {
        fclose(f);
        return OB_ERR(err, OB_ERR_IO, "%s: %s", path, strerror(errno));
    }
    int64_t size = (int64_t)ftello(f), start = 0;
    if (tail_lines > 0) start = tail_offset(f, size, tail_lines);
    if (since_ms > 0) {
        ob__svc_job_path(svc, id, "log.index", path, sizeof path);
        int64_t s = line_start(f, since_offset(path, since_ms, size), size);
        if (s > start) start = s;
    }
    fclose(f);
    *offset = start;
    return OB_OK;
}
