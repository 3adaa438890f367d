/* Option tables: one row per command-line option (its name, kind, destination field, bounds,
 * metavar, help and environment variable) from which a program builds its getopt_long arguments,
 * prints its --help, writes its man page and lists its flags for shell completion, so that
 * none of these can drift from what the parser accepts.
 *
 * The table says where a value goes and what it may be; the program converts it (ob_opt_dest
 * finds the field), so that each program keeps its own error messages. Nothing here prints
 * unless given a FILE. */
#ifndef ONEBIT_OPT_H
#define ONEBIT_OPT_H

#include <stddef.h>
#include <stdio.h>

/* What an option's value is, and the type of its destination field. */
typedef enum ob_opt_kind {
    OB_OPT_FLAG,     /* no value; int, set to 1 */
    OB_OPT_STRING,   /* const char *, borrowed from argv or the environment */
    OB_OPT_INT,      /* int in [lo, hi] */
    OB_OPT_LONG,     /* long in [lo, hi] */
    OB_OPT_SECONDS,  /* double, seconds in [0, hi] */
    OB_OPT_DURATION, /* const char *: 90m, 1h30m (checked where it is used) */
    OB_OPT_SIZE,     /* int64_t bytes: digits with K, M, G or T */
    OB_OPT_LIST,     /* const char *[hi + 1], repeatable, NULL-terminated; count at aux */
    OB_OPT_CUSTOM,   /* the program converts it itself (its id says how) */
    OB_OPT_ACTION,   /* no value; the program acts on it (--help, --version) */
} ob_opt_kind;

typedef struct ob_opt {
    const char *name;    /* long name, without "--" */
    char short_name;     /* one-letter form, 0: none */
    ob_opt_kind kind;    /* OB_OPT_CUSTOM and ACTION with a metavar take a value */
    size_t field;        /* offsetof the destination in the program's options struct */
    long long lo, hi;    /* bounds (INT, LONG, SECONDS: hi; LIST: hi = capacity) */
    const char *metavar; /* the value's name in help (FILE, N); NULL: none */
    const char *help;    /* lines separated by '\n'; the first is the summary */
    const char *env;     /* the environment variable it reads, or NULL */
    int id;              /* the program's tag, for CUSTOM and ACTION */
    size_t aux;          /* offsetof an int: LIST's count, or set to 1 when given; 0: none */
    int hidden;          /* accepted, but not in help, man pages or completion */
} ob_opt;

/* 1 when o takes a value. */
int ob_opt_takes_value(const ob_opt *o);

/* The destination of o in the struct at base. */
void *ob_opt_dest(const ob_opt *o, void *base);

/* The row of t (n rows) named name (a long name) or, with name[1] == 0, the short name
 * name[0]; NULL when none. */
const ob_opt *ob_opt_find(const ob_opt *t, size_t n, const char *name);

/* Prints the rows of t that are not hidden as "  --name METAVAR   help", the help from column
 * col, its other lines beneath it, then the environment variable. */
void ob_opt_print_help(FILE *f, const ob_opt *t, size_t n, int col);

/* Prints the rows of t that are not hidden as a man page's tagged paragraphs (.TP). */
void ob_opt_print_man(FILE *f, const ob_opt *t, size_t n);

/* Prints text for a man page: '\', '-' and a '.' or '\'' at the start of a line escaped. */
void ob_opt_roff(FILE *f, const char *text);

struct option; /* <getopt.h> */

/* Adds the rows of t to a getopt_long option array: long[*nlong] on (cap rows in all, the last
 * left zero), each row's val first_val + its index in t; shortopts (capacity scap) gets each
 * short name, with ':' when it takes a value. A name already in long is skipped (a union of
 * tables). Returns 0, or -1 when an array is too small. */
int ob_opt_getopt(struct option *longopts, size_t *nlong, size_t cap, char *shortopts, size_t scap,
                  const ob_opt *t, size_t n, int first_val);

/* Appends the flags of t that are not hidden, space-separated, to buf (capacity cap, NUL
 * terminated), those that take a value marked with a trailing "=" ("-f= --file= --watch");
 * the short form first. Returns 0, or -1 when buf is too small. */
int ob_opt_completion_flags(char *buf, size_t cap, const ob_opt *t, size_t n);

#endif /* ONEBIT_OPT_H */
