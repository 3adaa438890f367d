/* The job spec's typed-field reader (jobspec_internal.h): integers, sizes, reals, booleans,
 * enums, paths and sections read from the tree with their ranges checked, unknown and misplaced
 * fields found with a "did you mean" hint, every message naming the field by its path. */
#include "jobspec_internal.h"

#include <jansson.h>

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ==== messages ============================================================================ */

/* "sec.key", or "key" at the top level (sec ""). */
const char *ob__spec_join(char *buf, size_t cap, const char *sec, const char *key)
{
    if (sec[0])
        snprintf(buf, cap, "%.100s.%.96s", sec, key);
    else
        snprintf(buf, cap, "%.100s", key);
    return buf;
}

/* A short rendering of a value: its JSON text for scalars ("64" quoted is a string). */
const char *ob__spec_repr(char *buf, size_t cap, const json_t *v)
{
    if (json_is_object(v)) return snprintf(buf, cap, "an object"), buf;
    if (json_is_array(v)) return snprintf(buf, cap, "a list"), buf;
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(10));
    if (!s) return snprintf(buf, cap, "(a value)"), buf;
    if (strlen(s) >= cap)
        snprintf(buf, cap, "%.*s...", (int)cap - 4, s);
    else
        snprintf(buf, cap, "%s", s);
    free(s);
    return buf;
}

/* "<path>: expected <what>, got <value>" */
ob_status ob__spec_bad_value(ob_err *err, const char *sec, const char *key, const char *what,
                             const json_t *v)
{
    char path[PATH_MAX_TEXT], got[72];
    return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: expected %.200s, got %s",
                  ob__spec_join(path, sizeof path, sec, key), what,
                  ob__spec_repr(got, sizeof got, v));
}

ob_status ob__spec_missing(ob_err *err, const char *sec, const char *key, const char *hint)
{
    char path[PATH_MAX_TEXT];
    return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: missing required field%s",
                  ob__spec_join(path, sizeof path, sec, key), hint);
}

/* "a, b or c" */
static void join_names(char *buf, size_t cap, const char *const *names, int n, unsigned mask)
{
    size_t used = 0;
    int total = 0, done = 0;
    for (int i = 0; i < n; i++)
        total += (mask >> i) & 1u;
    buf[0] = '\0';
    for (int i = 0; i < n && used < cap; i++) {
        if (!((mask >> i) & 1u)) continue;
        const char *sep = done == 0 ? "" : done == total - 1 ? " or " : ", ";
        int k = snprintf(buf + used, cap - used, "%s%s", sep, names[i]);
        if (k < 0) break;
        used += (size_t)k;
        done++;
    }
}

/* ==== reading typed fields ================================================================ */

/* Every getter leaves *out unchanged when the field is absent (the default stays). */

static void describe_int(char *buf, size_t cap, long long lo, long long hi)
{
    const char *base = lo == 1 ? "a positive integer" : lo == 0 ? "an integer >= 0" : NULL;
    if (base && hi == NO_LIMIT)
        snprintf(buf, cap, "%s", base);
    else if (base)
        snprintf(buf, cap, "%s <= %lld", base, hi);
    else if (hi == NO_LIMIT)
        snprintf(buf, cap, "an integer >= %lld", lo);
    else
        snprintf(buf, cap, "an integer in [%lld, %lld]", lo, hi);
}

ob_status ob__spec_get_int(const json_t *obj, const char *sec, const char *key, long long lo,
                           long long hi, long long *out, ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        /* A value of another type hears what kind of integer; one out of range, the range. */
        char what[96];
        describe_int(what, sizeof what, lo, json_is_integer(v) ? hi : NO_LIMIT);
        return ob__spec_bad_value(err, sec, key, what, v);
    }
    *out = json_integer_value(v);
    return OB_OK;
}

ob_status ob__spec_get_long(const json_t *obj, const char *sec, const char *key, long lo, long hi,
                            long *out, ob_err *err)
{
    long long x = *out;
    ob_status st = ob__spec_get_int(obj, sec, key, lo, hi, &x, err);
    if (st == OB_OK) *out = (long)x;
    return st;
}

ob_status ob__spec_get_size(const json_t *obj, const char *sec, const char *key, long long lo,
                            long long hi, size_t *out, ob_err *err)
{
    long long x = (long long)*out;
    ob_status st = ob__spec_get_int(obj, sec, key, lo, hi, &x, err);
    if (st == OB_OK) *out = (size_t)x;
    return st;
}

/* A number (integer or real; both formats only produce finite ones). */
ob_status ob__spec_get_number(const json_t *obj, const char *sec, const char *key, double *out,
                              ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    if (!json_is_number(v)) return ob__spec_bad_value(err, sec, key, "a number", v);
    *out = json_number_value(v);
    return OB_OK;
}

/* A number in the interval lo..hi, each end open or closed as the brackets in what say. */
ob_status ob__spec_get_real(const json_t *obj, const char *sec, const char *key, double lo,
                            int lo_open, double hi, int hi_open, const char *what, double *out,
                            ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    int ok = json_is_number(v) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
    if (!ok) return ob__spec_bad_value(err, sec, key, what, v);
    *out = x;
    return OB_OK;
}

ob_status ob__spec_get_bool(const json_t *obj, const char *sec, const char *key, int *out,
                            ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    if (!json_is_boolean(v)) return ob__spec_bad_value(err, sec, key, "true or false", v);
    *out = json_is_true(v);
    return OB_OK;
}

/* A string without NUL bytes. */
const char *ob__spec_plain_string(const json_t *v)
{
    if (!json_is_string(v)) return NULL;
    const char *s = json_string_value(v);
    return strlen(s) == json_string_length(v) ? s : NULL;
}

/* One of names[0..n); *out gets its index. */
ob_status ob__spec_get_enum(const json_t *obj, const char *sec, const char *key,
                            const char *const *names, int n, int *out, ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    const char *s = ob__spec_plain_string(v);
    for (int i = 0; s && i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return OB_OK;
        }
    }
    char what[192];
    int k = snprintf(what, sizeof what, "one of ");
    join_names(what + k, sizeof what - (size_t)k, names, n, ~0u);
    return ob__spec_bad_value(err, sec, key, what, v);
}

/* A required kind field ("type"). */
ob_status ob__spec_get_kind(const json_t *obj, const char *sec, const char *key,
                            const char *const *names, int n, int *out, ob_err *err)
{
    if (!json_object_get(obj, key)) {
        char list[160], hint[192];
        join_names(list, sizeof list, names, n, ~0u);
        snprintf(hint, sizeof hint, " (one of %s)", list);
        return ob__spec_missing(err, sec, key, hint);
    }
    return ob__spec_get_enum(obj, sec, key, names, n, out, err);
}

/* A file-system path: a non-empty string shorter than the buffer. */
ob_status ob__spec_get_path(const json_t *obj, const char *sec, const char *key, int allow_empty,
                            char *buf, size_t cap, ob_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return OB_OK;
    const char *s = ob__spec_plain_string(v);
    if (!s || (!allow_empty && !s[0]) || strlen(s) >= cap) {
        char what[96];
        snprintf(what, sizeof what, "a %spath of at most %zu bytes",
                 allow_empty ? "" : "non-empty ", cap - 1);
        return ob__spec_bad_value(err, sec, key, what, v);
    }
    memcpy(buf, s, strlen(s) + 1);
    return OB_OK;
}

/* A section: an object, or absent (*out NULL) when optional. */
ob_status ob__spec_get_section(const json_t *root, const char *key, int required,
                               const json_t **out, ob_err *err)
{
    const json_t *v = json_object_get(root, key);
    *out = NULL;
    if (!v) return required ? ob__spec_missing(err, "", key, "") : OB_OK;
    if (!json_is_object(v)) return ob__spec_bad_value(err, "", key, "an object (mapping)", v);
    *out = v;
    return OB_OK;
}

/* ==== unknown and misplaced fields ======================================================== */

/* Levenshtein distance, for "did you mean" hints; long strings count as far apart. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[33];
    if (la > 32 || lb > 32) return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Rejects each key of obj that is not in fields ("unknown field", with the nearest name or the
 * section the key belongs in as a hint) or that belongs to another kind ("only for text").
 * kind_names may be NULL when no field of the table depends on a kind. Keys are checked in
 * document order; every one that fails is noted. */
ob_status ob__spec_check_fields(const json_t *obj, const char *sec, const field *fields, int n,
                                const char *const *kind_names, int n_kinds, int kind, spec_errs *E)
{
    ob_status worst = OB_OK;
    for (void *it = json_object_iter((json_t *)obj); it;
         it = json_object_iter_next((json_t *)obj, it)) {
        const char *key = json_object_iter_key(it);
        const field *f = NULL;
        const char *near = NULL;
        size_t near_d = 3;
        for (int i = 0; i < n && !f; i++) {
            if (strcmp(key, fields[i].key) == 0) f = &fields[i];
            size_t d = edit_distance(key, fields[i].key);
            if (d < near_d && d < strlen(fields[i].key)) near = fields[i].key, near_d = d;
        }
        char path[PATH_MAX_TEXT];
        ob__spec_join(path, sizeof path, sec, key);
        const char *home = f ? NULL : ob__spec_home_of(key, sec);
        ob_status st = OB_OK;
        if (!f && (!strcmp(key, "lr") || !strcmp(key, "learning_rate")) && sec[0])
            st = OB_ERR(ONE, OB_ERR_INVALID_ARG,
                        "%s: unknown field (the learning rate is the spec's top-level section lr, "
                        "e.g. lr: {peak: 0.001})",
                        path);
        else if (!f && home && home[0])
            st = OB_ERR(ONE, OB_ERR_INVALID_ARG,
                        "%s: unknown field (%.64s is a field of %s: %s.%.64s)", path, key, home,
                        home, key);
        else if (!f && home)
            st = OB_ERR(ONE, OB_ERR_INVALID_ARG,
                        "%s: unknown field (%.64s is a top-level field of the spec)", path, key);
        else if (!f && near)
            st =
                OB_ERR(ONE, OB_ERR_INVALID_ARG, "%s: unknown field (did you mean %s?)", path, near);
        else if (!f)
            st = OB_ERR(ONE, OB_ERR_INVALID_ARG, "%s: unknown field", path);
        else if (kind_names && !(f->kinds & K(kind))) {
            char owners[160];
            join_names(owners, sizeof owners, kind_names, n_kinds, f->kinds);
            st = OB_ERR(ONE, OB_ERR_INVALID_ARG, "%s: only for %s", path, owners);
        }
        if (ob__spec_note(E, st)) worst = st;
    }
    return worst;
}

/* ==== problems, collected ================================================================= */

void ob__spec_errs_init(spec_errs *E, ob_err *out)
{
    memset(E, 0, sizeof *E);
    E->out = out;
}

/* The length of msg without a trailing source location " (file.c:123)". */
static size_t without_location(const char *msg)
{
    size_t n = strlen(msg), i = n;
    if (n < 8 || msg[n - 1] != ')') return n;
    i = n - 1;
    while (i > 0 && msg[i - 1] >= '0' && msg[i - 1] <= '9')
        i--;
    if (i == n - 1 || i < 4 || msg[i - 1] != ':') return n;
    size_t colon = i - 1, open = colon;
    if (colon < 3 || msg[colon - 2] != '.' || msg[colon - 1] != 'c') return n;
    while (open > 0 && msg[open - 1] != '(' && msg[open - 1] != ' ')
        open--;
    if (open < 2 || msg[open - 1] != '(' || msg[open - 2] != ' ') return n;
    return open - 2;
}

ob_status ob__spec_note(spec_errs *E, ob_status st)
{
    if (st == OB_OK) return OB_OK;
    if (E->code == OB_OK) E->code = st;
    E->n++;
    size_t len = without_location(E->one.msg);
    if (len == 0) len = strlen(strncpy(E->one.msg, ob_strerror(st), sizeof E->one.msg - 1));
    size_t sep = E->shown ? 2 : 0;
    /* Room is kept for the count in front and the "and N more" at the end. */
    if (E->shown < OB_SPEC_MAX_PROBLEMS && E->used + sep + len + 48 < sizeof E->text) {
        if (sep) memcpy(E->text + E->used, "; ", 2);
        memcpy(E->text + E->used + sep, E->one.msg, len);
        E->used += sep + len;
        E->text[E->used] = '\0';
        E->shown++;
    }
    ob_err_clear(&E->one);
    return st;
}

ob_status ob__spec_errs_end(spec_errs *E)
{
    if (E->code == OB_OK || !E->out) return E->code;
    E->out->code = E->code;
    if (E->n == 1)
        snprintf(E->out->msg, sizeof E->out->msg, "%s", E->text);
    else if (E->n == E->shown)
        snprintf(E->out->msg, sizeof E->out->msg, "%d problems: %.*s", E->n,
                 (int)sizeof E->text - 48, E->text);
    else
        snprintf(E->out->msg, sizeof E->out->msg, "%d problems: %.*s; and %d more", E->n,
                 (int)sizeof E->text - 48, E->text, E->n - E->shown);
    return E->code;
}
