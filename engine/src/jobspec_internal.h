/* Private to the job spec's four files (jobspec.c: defaults, validator, parse and load;
 * jobspec_fields.c: the typed-field reader; jobspec_yaml.c: YAML to a tree;
 * jobspec_json.c: the canonical JSON writer). Specs of either format become one jansson tree;
 * every reader names a field by its path ("optimizer.beta1") in its message. */
#ifndef ONEBIT_JOBSPEC_INTERNAL_H
#define ONEBIT_JOBSPEC_INTERNAL_H

#include "onebit/jobspec.h"
#include "internal.h"

#include <jansson.h>
#include <limits.h>

#define PATH_MAX_TEXT 200 /* field paths in messages are cut here */
#define NO_LIMIT LLONG_MAX
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Spec names, indexed by the enum values they stand for (defined in jobspec.c). */
extern const char *const ob__spec_model_kinds[3];  /* ob_model_kind */
extern const char *const ob__spec_activations[3];  /* ob_activation */
extern const char *const ob__spec_data_kinds[5];   /* ob_data_kind */
extern const char *const ob__spec_norms[2];        /* ob_normalize */
extern const char *const ob__spec_optim_kinds[4];  /* ob_optim_kind */
extern const char *const ob__spec_compressions[3]; /* ob_onebit_mode */
extern const char *const ob__spec_scales[2];       /* ob_scale */
extern const char *const ob__spec_stabilizers[2];  /* ob_stabilizer */
extern const char *const ob__spec_exchanges[3];    /* ob_gradient_exchange */
extern const char *const ob__spec_lr_kinds[3];     /* ob_lr_kind */
extern const char *const ob__spec_devices[2];      /* ob_device */

/* ---- problems, collected (jobspec_fields.c) ---------------------------------------------- */

/* A spec's problems, gathered so that one reply names every invalid field (at most
 * OB_SPEC_MAX_PROBLEMS messages, then a count). Each check writes its failure into the slot ONE
 * and hands its status to ob__spec_note, which moves the message (without its source location)
 * into the list; ob__spec_errs_end writes "N problems: a; b; c" (or the one message) to out. */
#define OB_SPEC_MAX_PROBLEMS 8
typedef struct spec_errs {
    ob_err one;     /* the slot each check writes its failure to */
    ob_err *out;    /* where the collected message goes (NULL: only the status) */
    ob_status code; /* the first failure's code (OB_OK: none) */
    int n, shown;   /* failures noted; those whose message is in text */
    size_t used;    /* bytes of text */
    char text[OB_ERR_MSG_LEN];
} spec_errs;
#define ONE (&E->one)

void ob__spec_errs_init(spec_errs *E, ob_err *out);

/* Notes st's failure (its message in E->one) and returns st: a caller that cannot go on
 * without what failed returns; one that can checks the next field. */
ob_status ob__spec_note(spec_errs *E, ob_status st);

/* Writes the collected message to E->out; returns the first failure's code (OB_OK: none). */
ob_status ob__spec_errs_end(spec_errs *E);

/* The section a misplaced key belongs to ("optimizer" for beta2, "" for a top-level field such
 * as lr or steps), or NULL when no section has it (jobspec.c). */
const char *ob__spec_home_of(const char *key, const char *not_in);

/* 1 when key is a field of the spec's top level. */
int ob__spec_is_top(const char *key);

/* ---- the typed-field reader (jobspec_fields.c) ----------------------------------------- */

/* "sec.key", or "key" at the top level (sec ""), into buf (cut at cap). Returns buf. */
const char *ob__spec_join(char *buf, size_t cap, const char *sec, const char *key);

/* A field a section may have, and the kinds (of model, data, optimizer, ...) it applies to. */
typedef struct field {
    const char *key;
    unsigned kinds; /* bit k: the field applies to kind k */
} field;

#define ALL 0xffffffffu
#define K(x) (1u << (x))

/* A short rendering of a value: its JSON text for scalars ("64" quoted is a string). */
const char *ob__spec_repr(char *buf, size_t cap, const json_t *v);

/* "<path>: expected <what>, got <value>" */
ob_status ob__spec_bad_value(ob_err *err, const char *sec, const char *key, const char *what,
                             const json_t *v);

ob_status ob__spec_missing(ob_err *err, const char *sec, const char *key, const char *hint);

ob_status ob__spec_get_int(const json_t *obj, const char *sec, const char *key, long long lo,
                           long long hi, long long *out, ob_err *err);

ob_status ob__spec_get_long(const json_t *obj, const char *sec, const char *key, long lo, long hi,
                            long *out, ob_err *err);

ob_status ob__spec_get_size(const json_t *obj, const char *sec, const char *key, long long lo,
                            long long hi, size_t *out, ob_err *err);

/* A number (integer or real; both formats only produce finite ones). */
ob_status ob__spec_get_number(const json_t *obj, const char *sec, const char *key, double *out,
                              ob_err *err);

/* A number in the interval lo..hi, each end open or closed as the brackets in what say. */
ob_status ob__spec_get_real(const json_t *obj, const char *sec, const char *key, double lo,
                            int lo_open, double hi, int hi_open, const char *what, double *out,
                            ob_err *err);

ob_status ob__spec_get_bool(const json_t *obj, const char *sec, const char *key, int *out,
                            ob_err *err);

/* A string without NUL bytes. */
const char *ob__spec_plain_string(const json_t *v);

/* One of names[0..n); *out gets its index. */
ob_status ob__spec_get_enum(const json_t *obj, const char *sec, const char *key,
                            const char *const *names, int n, int *out, ob_err *err);

/* A required kind field ("type"). */
ob_status ob__spec_get_kind(const json_t *obj, const char *sec, const char *key,
                            const char *const *names, int n, int *out, ob_err *err);

/* A file-system path: a non-empty string shorter than the buffer. */
ob_status ob__spec_get_path(const json_t *obj, const char *sec, const char *key, int allow_empty,
                            char *buf, size_t cap, ob_err *err);

/* A section: an object, or absent (*out NULL) when optional. */
ob_status ob__spec_get_section(const json_t *root, const char *key, int required,
                               const json_t **out, ob_err *err);

/* Notes each key of obj that is not in fields ("unknown field", with the nearest name or the
 * section it belongs in as a hint) or that belongs to another kind ("only for text"); returns
 * the failure when any. kind_names may be NULL when no field of the table depends on a kind. */
ob_status ob__spec_check_fields(const json_t *obj, const char *sec, const field *fields, int n,
                                const char *const *kind_names, int n_kinds, int kind, spec_errs *E);

/* ---- YAML (jobspec_yaml.c) ------------------------------------------------------------- */

/* Reads YAML text into a jansson tree (*out, caller-owned): mappings become objects, sequences
 * arrays, plain scalars typed by the YAML 1.2 core schema. OB_ERR_INVALID_ARG with the line and
 * column of the first problem. */
ob_status ob__spec_yaml_to_tree(const char *text, size_t len, json_t **out, ob_err *err);

/* ---- the validator (jobspec.c) --------------------------------------------------------- */

/* Checks every field of the tree and fills *s (scratch: partly written on failure); err gets
 * every problem found (bounded), not only the first. */
ob_status ob__spec_validate(const json_t *root, ob_jobspec *s, ob_err *err);

/* ---- program jobs (jobspec_program.c) ----------------------------------------------------- */

/* The fields of a program job's spec (root has "program"; name is read already); its problems
 * go to E. */
ob_status ob__spec_read_program(const json_t *root, ob_jobspec *s, spec_errs *E);

/* A program job's canonical tree (NULL when memory runs out). */
json_t *ob__spec_program_tree(const ob_jobspec *s);

#endif /* ONEBIT_JOBSPEC_INTERNAL_H */
