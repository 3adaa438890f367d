/* Job states by name, and copying and freeing of job records. */
#include "onebit/job.h"
#include "onebit/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char *const state_names[OB_JOB_STATE_COUNT] = {
    "UNSPECIFIED", "PENDING", "RUNNING", "RESTARTING", "SUCCEEDED", "FAILED", "CANCELLED",
};

const char *ob_job_state_name(ob_job_state s)
{
    if ((int)s < 0 || (int)s >= OB_JOB_STATE_COUNT) return "UNSPECIFIED";
    return state_names[s];
}

ob_status ob_job_state_parse(const char *text, ob_job_state *out)
{
    if (!text) return OB_ERR_INVALID_ARG;
    if (!strncasecmp(text, "JOB_STATE_", 10)) text += 10;
    for (int i = 0; i < OB_JOB_STATE_COUNT; i++) {
        if (!strcasecmp(text, state_names[i])) {
            *out = (ob_job_state)i;
            return OB_OK;
        }
    }
    return OB_ERR_INVALID_ARG;
}

int ob_job_state_final(ob_job_state s)
{
    return s == OB_JOB_SUCCEEDED || s == OB_JOB_FAILED || s == OB_JOB_CANCELLED;
}

void ob_job_clear(ob_job *job)
{
    if (!job) return;
    free(job->spec_json);
    free(job->attempts);
    memset(job, 0, sizeof *job);
}

ob_status ob_job_copy(ob_job *dst, const ob_job *src, ob_err *err)
{
    *dst = *src;
    dst->spec_json = NULL;
    dst->attempts = NULL;
    if (src->spec_json && !(dst->spec_json = strdup(src->spec_json))) goto fail;
    if (src->n_attempts) {
        dst->attempts = malloc(src->n_attempts * sizeof *dst->attempts);
        if (!dst->attempts) goto fail;
        memcpy(dst->attempts, src->attempts, src->n_attempts * sizeof *dst->attempts);
    }
    return OB_OK;
fail:
    ob_job_clear(dst);
    return OB_ERR(err, OB_ERR_NOMEM, "copying job %s", src->id);
}

void ob_job_array_free(ob_job *jobs, size_t n)
{
    if (!jobs) return;
    for (size_t i = 0; i < n; i++)
        ob_job_clear(&jobs[i]);
    free(jobs);
}

/* ---- labels ------------------------------------------------------------------------------- */

static int label_char(char c, int key)
{
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')
        return 1;
    return key ? c == '/' : (c >= 'A' && c <= 'Z');
}

typedef struct label {
    char kv[130];
    size_t klen;
} label;

static int by_key(const void *a, const void *b)
{
    const label *x = a, *y = b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = strncmp(x->kv, y->kv, n);
    return c ? c : (x->klen > y->klen) - (x->klen < y->klen);
}

ob_status ob_labels_parse(const char *text, char out[OB_LABELS_LEN], ob_err *err)
{
    out[0] = '\0';
    if (!text || !text[0]) return OB_OK;
    label ls[OB_LABELS_MAX];
    size_t n = 0;
    const char *p = text;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t klen = eq ? (size_t)(eq - p) : 0, vlen = eq ? len - klen - 1 : 0;
        int ok = eq && klen >= 1 && klen <= 63 && vlen <= 63 && label_char(p[0], 0) &&
                 p[0] != '.' && p[0] != '_' && p[0] != '-';
        for (size_t i = 0; ok && i < klen; i++)
            ok = label_char(p[i], 1);
        for (size_t i = 0; ok && i < vlen; i++)
            ok = label_char(eq[1 + i], 0);
        if (!ok)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "label '%.*s': expected key=value, the key 1 to 63 of [a-z0-9._/-] "
                          "(starting with a letter or digit), the value 0 to 63 of "
                          "[A-Za-z0-9._-]",
                          (int)(len > 100 ? 100 : len), p);
        if (n == OB_LABELS_MAX)
            return OB_ERR(err, OB_ERR_INVALID_ARG, "labels: at most %d", OB_LABELS_MAX);
        memcpy(ls[n].kv, p, len);
        ls[n].kv[len] = '\0';
        ls[n].klen = klen;
        n++;
        if (!end) break;
        p = end + 1;
        if (!*p) return OB_ERR(err, OB_ERR_INVALID_ARG, "labels: a trailing comma");
    }
    qsort(ls, n, sizeof *ls, by_key);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i && ls[i].klen == ls[i - 1].klen && !strncmp(ls[i].kv, ls[i - 1].kv, ls[i].klen))
            return OB_ERR(err, OB_ERR_INVALID_ARG, "label key '%.*s' given twice", (int)ls[i].klen,
                          ls[i].kv);
        if (k + (i ? 1 : 0) + strlen(ls[i].kv) >= OB_LABELS_LEN) { /* 16 long pairs do not fit */
            out[0] = '\0';
            return OB_ERR(err, OB_ERR_INVALID_ARG, "labels: longer than %d characters in all",
                          OB_LABELS_LEN - 1);
        }
        k += (size_t)snprintf(out + k, OB_LABELS_LEN - k, "%s%s", i ? "," : "", ls[i].kv);
    }
    return OB_OK;
}

int ob_labels_match(const char *labels, const char *selector)
{
    char have[OB_LABELS_LEN + 2];
    snprintf(have, sizeof have, ",%s,", labels);
    const char *p = selector;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char want[140];
        if (len + 3 > sizeof want) return 0;
        snprintf(want, sizeof want, ",%.*s,", (int)len, p);
        if (!strstr(have, want)) return 0;
        p = end ? end + 1 : NULL;
    }
    return 1;
}

ob_status ob_duration_parse(const char *text, int64_t *ms, ob_err *err)
{
    static const char units[] = "dhms";
    static const int64_t unit_ms[] = {86400000, 3600000, 60000, 1000};
    *ms = 0;
    if (!text || !text[0])
        return OB_ERR(err, OB_ERR_INVALID_ARG, "expected a duration such as 90s, 10m, 2h or 1h30m");
    size_t len = strnlen(text, 64);
    if (len >= 64) return OB_ERR(err, OB_ERR_INVALID_ARG, "a duration of 64 characters or more");
    int64_t total = 0;
    int next_unit = 0; /* units come largest first, each once */
    const char *p = text;
    while (*p) {
        if (*p < '0' || *p > '9')
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "'%s': expected a number at '%.10s' (durations are like 90s, 10m, 2h, "
                          "1h30m)",
                          text, p);
        int64_t v = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9') {
            if (++digits > 9)
                return OB_ERR(err, OB_ERR_INVALID_ARG, "'%s': a number of more than 9 digits",
                              text);
            v = v * 10 + (*p++ - '0');
        }
        const char *u = *p ? strchr(units, *p) : NULL;
        if (!u)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "'%s': expected a unit (d, h, m or s) after %lld", text, (long long)v);
        int k = (int)(u - units);
        if (k < next_unit)
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "'%s': units must come largest first (d, h, m, s), each once", text);
        next_unit = k + 1;
        p++;
        /* v < 1e9 and unit_ms <= 8.64e7: the product fits, and total stays below the limit. */
        total += v * unit_ms[k];
        if (total > OB_DURATION_MAX_MS)
            return OB_ERR(err, OB_ERR_INVALID_ARG, "'%s': longer than 366 days", text);
    }
    if (total == 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "'%s': expected at least 1s", text);
    *ms = total;
    return OB_OK;
}

void ob_duration_format(int64_t ms, char *out, size_t cap)
{
    static const char units[] = "dhms";
    static const int64_t unit_ms[] = {86400000, 3600000, 60000, 1000};
    if (cap == 0) return;
    out[0] = '\0';
    int64_t left = ms < 0 ? 0 : ms;
    size_t used = 0;
    for (int k = 0; k < 4; k++) {
        int64_t v = left / unit_ms[k];
        left -= v * unit_ms[k];
        if (v == 0) continue;
        int n = snprintf(out + used, cap - used, "%lld%c", (long long)v, units[k]);
        if (n < 0 || (size_t)n >= cap - used) return;
        used += (size_t)n;
    }
    if (used == 0) snprintf(out, cap, "0s");
}
