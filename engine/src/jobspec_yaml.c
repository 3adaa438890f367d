/* YAML job specs into the same jansson tree as JSON ones (jobspec_internal.h), with libyaml's
 * event API: scalars typed by the YAML 1.2 core schema, anchors, tags and complex keys refused,
 * nesting bounded. */
#include "jobspec_internal.h"

#include <yaml.h>

#include <jansson.h>

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_DEPTH 32 /* nesting a spec may have (a real one has 2); bounds the YAML recursion */

/* ==== YAML to a jansson tree ============================================================== */

static ob_status yaml_syntax_error(const yaml_parser_t *p, ob_err *err)
{
    const char *problem = p->problem ? p->problem : "malformed YAML";
    if (p->error == YAML_MEMORY_ERROR) return OB_ERR(err, OB_ERR_NOMEM, "YAML parser");
    if (p->error == YAML_READER_ERROR) /* bad encoding: there is only a byte offset */
        return OB_ERR(err, OB_ERR_INVALID_ARG, "YAML syntax error at byte %zu: %s",
                      p->problem_offset, problem);
    if (p->context)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "YAML syntax error at line %zu, column %zu: %s (%s at line %zu)",
                      p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                      p->context_mark.line + 1);
    return OB_ERR(err, OB_ERR_INVALID_ARG, "YAML syntax error at line %zu, column %zu: %s",
                  p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

static ob_status yaml_next(yaml_parser_t *p, yaml_event_t *ev, ob_err *err)
{
    if (!yaml_parser_parse(p, ev)) return yaml_syntax_error(p, err);
    return OB_OK;
}

/* "<path>: <what> (line L, column C)", for errors found on a well-formed event. */
static ob_status yaml_at(ob_err *err, const char *path, const yaml_event_t *ev, const char *what)
{
    return OB_ERR(err, OB_ERR_INVALID_ARG, "%s: %s (line %zu, column %zu)",
                  path[0] ? path : "job spec", what, ev->start_mark.line + 1,
                  ev->start_mark.column + 1);
}

/* Anchors, aliases and tags would let one node stand for several or change its type; a job
 * spec needs neither, so they are rejected rather than half supported. */
static ob_status yaml_check_plain(const yaml_event_t *ev, const char *path, ob_err *err)
{
    const yaml_char_t *anchor = NULL, *tag = NULL;
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        return yaml_at(err, path, ev, "YAML aliases (*name) are not supported in a job spec");
    case YAML_SCALAR_EVENT:
        anchor = ev->data.scalar.anchor;
        tag = ev->data.scalar.tag;
        break;
    case YAML_SEQUENCE_START_EVENT:
        anchor = ev->data.sequence_start.anchor;
        tag = ev->data.sequence_start.tag;
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = ev->data.mapping_start.anchor;
        tag = ev->data.mapping_start.tag;
        break;
    default:
        break;
    }
    if (anchor)
        return yaml_at(err, path, ev, "YAML anchors (&name) are not supported in a job spec");
    if (tag) return yaml_at(err, path, ev, "YAML tags (!tag) are not supported in a job spec");
    return OB_OK;
}

/* The YAML 1.2 core schema's int: [-+]?[0-9]+ | 0o[0-7]+ | 0x[0-9a-fA-F]+. Returns the base
 * and where the digits start, or 0. */
static int core_int(const char *s, const char **digits)
{
    if (s[0] == '0' && s[1] == 'o' && s[2] && strspn(s + 2, "01234567") == strlen(s + 2))
        return *digits = s + 2, 8;
    if (s[0] == '0' && s[1] == 'x' && s[2] &&
        strspn(s + 2, "0123456789abcdefABCDEF") == strlen(s + 2))
        return *digits = s + 2, 16;
    const char *p = s + (s[0] == '-' || s[0] == '+');
    if (*p && strspn(p, "0123456789") == strlen(p)) return *digits = s, 10;
    return 0;
}

/* The core schema's float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int core_float(const char *s)
{
    const char *p = s + (s[0] == '-' || s[0] == '+');
    size_t whole = strspn(p, "0123456789"), frac = 0;
    p += whole;
    if (*p == '.') {
        frac = strspn(p + 1, "0123456789");
        p += 1 + frac;
    }
    if (whole == 0 && frac == 0) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+') p++;
        size_t e = strspn(p, "0123456789");
        if (e == 0) return 0;
        p += e;
    }
    return *p == '\0';
}

static int one_of(const char *s, const char *const *words)
{
    for (; *words; words++)
        if (strcmp(s, *words) == 0) return 1;
    return 0;
}

/* A scalar as the core schema types it: quoted scalars are strings; plain ones may be null,
 * booleans, integers or floats. */
static ob_status yaml_scalar(const yaml_event_t *ev, const char *path, json_t **out, ob_err *err)
{
    const char *s = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    static const char *const specials[] = {".inf",  ".Inf",  ".INF",  "+.inf", "+.Inf",
                                           "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
                                           ".NaN",  ".NAN",  NULL};

    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        *out = json_stringn(s, len);
        if (!*out) return yaml_at(err, path, ev, "a string that is not valid UTF-8");
        return OB_OK;
    }
    const char *digits = NULL;
    int base;
    if (one_of(s, nulls)) {
        *out = json_null();
    } else if (one_of(s, trues)) {
        *out = json_true();
    } else if (one_of(s, falses)) {
        *out = json_false();
    } else if (one_of(s, specials)) {
        return yaml_at(err, path, ev, "infinities and NaNs are not allowed in a job spec");
    } else if ((base = core_int(s, &digits)) != 0) {
        errno = 0;
        long long v = strtoll(digits, NULL, base);
        if (errno == ERANGE) return yaml_at(err, path, ev, "integer out of range");
        *out = json_integer(v);
    } else if (core_float(s)) {
        errno = 0;
        double v = strtod(s, NULL);
        if (!isfinite(v)) return yaml_at(err, path, ev, "number out of range");
        *out = json_real(v);
    } else {
        *out = json_stringn(s, len);
    }
    if (!*out) return OB_ERR(err, OB_ERR_NOMEM, "YAML scalar at %s", path);
    return OB_OK;
}

static ob_status yaml_node(yaml_parser_t *p, yaml_event_t *ev, const char *path, int depth,
                           json_t **out, ob_err *err);

/* One entry of a mapping: the key event *kev (taken: deleted here), then its value. */
static ob_status yaml_entry(yaml_parser_t *p, yaml_event_t *kev, const char *path, int depth,
                            json_t *obj, ob_err *err)
{
    const char *key = NULL;
    char child[PATH_MAX_TEXT] = "";
    ob_status st = yaml_check_plain(kev, path, err);
    if (st == OB_OK && kev->type != YAML_SCALAR_EVENT)
        st = yaml_at(err, path, kev, "mapping keys must be plain strings");
    if (st == OB_OK) {
        key = (const char *)kev->data.scalar.value;
        ob__spec_join(child, sizeof child, path, key);
        if (strlen(key) != kev->data.scalar.length)
            st = yaml_at(err, path, kev, "a key with a NUL byte");
        else if (json_object_get(obj, key))
            st = yaml_at(err, child, kev, "duplicate key");
    }
    yaml_event_t vev;
    json_t *value = NULL;
    if (st == OB_OK) st = yaml_next(p, &vev, err);
    if (st == OB_OK) st = yaml_node(p, &vev, child, depth + 1, &value, err);
    if (st == OB_OK && json_object_set_new(obj, key, value) != 0)
        st = OB_ERR(err, OB_ERR_NOMEM, "YAML mapping at %s", child);
    yaml_event_delete(kev);
    return st;
}

/* Reads the entries of a mapping whose start event was just consumed. */
static ob_status yaml_mapping(yaml_parser_t *p, const char *path, int depth, json_t *obj,
                              ob_err *err)
{
    for (;;) {
        yaml_event_t kev;
        ob_status st = yaml_next(p, &kev, err);
        if (st) return st;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return OB_OK;
        }
        if ((st = yaml_entry(p, &kev, path, depth, obj, err))) return st;
    }
}

/* Reads the items of a sequence whose start event was just consumed. */
static ob_status yaml_sequence(yaml_parser_t *p, const char *path, int depth, json_t *arr,
                               ob_err *err)
{
    for (size_t i = 0;; i++) {
        yaml_event_t ev;
        ob_status st = yaml_next(p, &ev, err);
        if (st) return st;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return OB_OK;
        }
        char child[PATH_MAX_TEXT];
        snprintf(child, sizeof child, "%.180s[%zu]", path, i);
        json_t *value = NULL;
        if ((st = yaml_node(p, &ev, child, depth + 1, &value, err))) return st;
        if (json_array_append_new(arr, value) != 0)
            return OB_ERR(err, OB_ERR_NOMEM, "YAML sequence at %s", child);
    }
}

/* Converts the node that starts with *ev (taken: deleted here) into *out. */
static ob_status yaml_node(yaml_parser_t *p, yaml_event_t *ev, const char *path, int depth,
                           json_t **out, ob_err *err)
{
    *out = NULL;
    ob_status st = yaml_check_plain(ev, path, err);
    if (st == OB_OK && depth > MAX_DEPTH)
        st = yaml_at(err, path, ev, "nested too deeply for a job spec");
    if (st == OB_OK) {
        switch (ev->type) {
        case YAML_SCALAR_EVENT:
            st = yaml_scalar(ev, path, out, err);
            break;
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT: {
            int map = ev->type == YAML_MAPPING_START_EVENT;
            json_t *node = map ? json_object() : json_array();
            if (!node) {
                st = OB_ERR(err, OB_ERR_NOMEM, "YAML node at %s", path);
                break;
            }
            st = map ? yaml_mapping(p, path, depth, node, err)
                     : yaml_sequence(p, path, depth, node, err);
            if (st)
                json_decref(node);
            else
                *out = node;
            break;
        }
        default:
            st = yaml_at(err, path, ev, "unexpected YAML event");
            break;
        }
    }
    yaml_event_delete(ev);
    return st;
}

/* One YAML document into a tree (*out owned by the caller). */
ob_status ob__spec_yaml_to_tree(const char *text, size_t len, json_t **out, ob_err *err)
{
    yaml_parser_t p;
    yaml_event_t ev;
    json_t *root = NULL;
    *out = NULL;
    if (!yaml_parser_initialize(&p)) return OB_ERR(err, OB_ERR_NOMEM, "YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);

    ob_status st = yaml_next(&p, &ev, err); /* stream start */
    if (st) goto done;
    yaml_event_delete(&ev);
    if ((st = yaml_next(&p, &ev, err))) goto done;
    if (ev.type != YAML_DOCUMENT_START_EVENT) { /* stream end: comments or nothing */
        yaml_event_delete(&ev);
        st = OB_ERR(err, OB_ERR_INVALID_ARG, "job spec: empty document");
        goto done;
    }
    yaml_event_delete(&ev);
    if ((st = yaml_next(&p, &ev, err))) goto done;
    if ((st = yaml_node(&p, &ev, "", 0, &root, err))) goto done;
    if ((st = yaml_next(&p, &ev, err))) goto done; /* document end */
    yaml_event_delete(&ev);
    if ((st = yaml_next(&p, &ev, err))) goto done;
    if (ev.type == YAML_DOCUMENT_START_EVENT)
        st = OB_ERR(err, OB_ERR_INVALID_ARG,
                    "YAML: a second document starts at line %zu; a job spec is one document",
                    ev.start_mark.line + 1);
    yaml_event_delete(&ev);
done:
    yaml_parser_delete(&p);
    if (st)
        json_decref(root);
    else
        *out = root;
    return st;
}
