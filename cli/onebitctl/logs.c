/* onebitctl logs: a job's worker output, streamed (--tail, --since, --rank, -f). */
#define _GNU_SOURCE /* timegm */
#include "ctl.h"
#include "onebit/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The rank of a line tagged by mpirun ("[1,3]<stdout>:...") or srun ("3: ..."), and where its
 * text starts; -1 for an untagged line (the launcher's own messages). */
static long line_rank(const char *line, const char **text)
{
    long r;
    *text = line + ob_log_tag(line, strlen(line), &r, NULL);
    return r;
}

static void print_log_line(const opts *o, const char *line)
{
    const char *text;
    long r = line_rank(line, &text);
    if (o->rank < 0)
        puts(line);
    else if (r == o->rank)
        puts(text);
}

/* --since: a duration back from now ("10m", "1h30m") or an RFC 3339 time
 * ("2026-11-23T15:04:05Z", "2026-11-23T16:04:05.5+01:00"), as Unix ms. */
static int parse_since(const char *text, int64_t *ms)
{
    int64_t d;
    if (ob_duration_parse(text, &d, NULL) == OB_OK) {
        *ms = ob_wall_ms() - d;
        return *ms > 0;
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int used = 0;
    if (sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &used) != 6 ||
        used != 19 || tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
        tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return 0;
    const char *p = text + used;
    int64_t frac_ms = 0;
    if (*p == '.') { /* a fraction of a second: its first three digits count */
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 3) frac_ms = frac_ms * 10 + (*p - '0');
        if (digits == 0 || digits > 9) return 0;
        for (; digits < 3; digits++)
            frac_ms *= 10;
    }
    int64_t offset_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, n = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &n) != 2 || n != 5 || oh > 23 || om > 59) return 0;
        offset_s = (*p == '+' ? 1 : -1) * (int64_t)(oh * 3600 + om * 60);
        p += 6;
    } else {
        return 0;
    }
    if (*p) return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    if (t == (time_t)-1) return 0;
    *ms = ((int64_t)t - offset_s) * 1000 + frac_ms;
    return *ms > 0;
}

/* Prints whole lines of a log stream as they complete (the rank filter needs whole lines). */
typedef struct log_printer {
    const opts *o;
    char *pending; /* a line not finished yet */
    size_t len;
    int failed;
} log_printer;

static int on_log(const char *data, size_t len, void *user)
{
    log_printer *lp = user;
    char *joined = realloc(lp->pending, lp->len + len + 1);
    if (!joined) {
        lp->failed = 1;
        return 1;
    }
    lp->pending = joined;
    memcpy(lp->pending + lp->len, data, len);
    lp->len += len;
    lp->pending[lp->len] = '\0';
    char *start = lp->pending, *nl;
    while ((nl = memchr(start, '\n', lp->len - (size_t)(start - lp->pending))) != NULL) {
        *nl = '\0';
        print_log_line(lp->o, start);
        start = nl + 1;
    }
    lp->len -= (size_t)(start - lp->pending);
    memmove(lp->pending, start, lp->len);
    fflush(stdout);
    return obctl_interrupted;
}

int obctl_v_logs(obctl_client *c, const opts *o)
{
    int rc = obctl_need_job(o, "logs");
    if (rc) return rc;
    int64_t since_ms = 0;
    if (o->since && !parse_since(o->since, &since_ms))
        return obctl_usage_error("logs",
                                 "--since %s: expected a duration (10m, 1h30m) or a time "
                                 "(2026-11-23T15:04:05Z)",
                                 o->since);
    obctl_catch_sigint();
    log_printer lp = {o, NULL, 0, 0};
    ob_err err = {0};
    /* One stream: the server sends what is there, then, with -f, what is written, and ends it
     * once the job has ended. */
    ob_status st = obctl_stream_logs(c, o->positional[0], (int)o->tail, since_ms, o->follow, on_log,
                                     &lp, &err);
    if (lp.len && !lp.failed) {
        lp.pending[lp.len] = '\0';
        print_log_line(o, lp.pending);
    }
    free(lp.pending);
    if (lp.failed) {
        fprintf(stderr, "onebitctl: out of memory\n");
        return EXIT_FAIL;
    }
    if (obctl_interrupted) return EXIT_OK;
    return st == OB_OK ? EXIT_OK : obctl_fail(&err);
}
