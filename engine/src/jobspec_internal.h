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

/* Rejects a key of obj that is not in fields ("unknown field", with the nearest name as a hint)
 * or that belongs to another kind ("only for text"). kind_names may be NULL when no field of the
 * table depends on a kind. Keys are checked in document order. */
ob_status ob__spec_check_fields(const json_t *obj, const char *sec, const field *fields, int n,
                                const char *const *kind_names, int n_kinds, int kind, ob_err *err);

/* ---- YAML (jobspec_yaml.c) ------------------------------------------------------------- */

/* Reads YAML text into a jansson tree (*out, caller-owned): mappings become objects, sequences
 * arrays, plain scalars typed by the YAML 1.2 core schema. OB_ERR_INVALID_ARG with the line and
 * column of the first problem. */
ob_status ob__spec_yaml_to_tree(const char *text, size_t len, json_t **out, ob_err *err);

/* ---- the validator (jobspec.c) --------------------------------------------------------- */

/* Checks every field of the tree and fills *s (scratch: partly written on failure). */
ob_status ob__spec_validate(const json_t *root, ob_jobspec *s, ob_err *err);

/* ---- program jobs (jobspec_program.c) ----------------------------------------------------- */

/* The fields of a program job's spec (root has "program"; name is read already). */
ob_status ob__spec_read_program(const json_t *root, ob_jobspec *s, ob_err *err);

/* A program job's canonical tree (NULL when memory runs out). */
json_t *ob__spec_program_tree(const ob_jobspec *s);

#endif /* ONEBIT_JOBSPEC_INTERNAL_H */
