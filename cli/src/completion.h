/* Shell completion scripts for onebitctl (`onebitctl completion bash|zsh`), written from the
 * same verb table the command line parses with, so that a new verb or flag completes without a
 * second list to keep. The scripts complete verbs, each verb's flags, the values of -o, --state
 * and the completion shells, file names after -f and --token-file, directories for inspect,
 * verbs after help, and job ids for the verbs that take one: those come from `onebitctl list
 * -q` run with the --server, --rest, --token and --token-file options already on the command
 * line. */
#ifndef ONEBITCTL_COMPLETION_H
#define ONEBITCTL_COMPLETION_H

#include <stddef.h>
#include <stdio.h>

/* What a verb's positional argument is, for completion. */
typedef enum obctl_arg_kind {
    OBCTL_ARG_NONE,
    OBCTL_ARG_JOB,   /* a job id */
    OBCTL_ARG_DIR,   /* a directory */
    OBCTL_ARG_SHELL, /* bash or zsh */
    OBCTL_ARG_VERB,  /* a verb's name (help) */
} obctl_arg_kind;

typedef struct obctl_completion_verb {
    const char *name;
    const char *summary; /* one line, for zsh's descriptions */
    const char *flags;   /* space-separated, e.g. "--rank -f --follow" */
    obctl_arg_kind arg;
} obctl_completion_verb;

/* Writes the completion script of shell ("bash" or "zsh") for the n verbs (borrowed) and the
 * options every verb takes (global_flags, space-separated) to out. Returns 0, or -1 for a shell
 * it has no script for (nothing written). */
int obctl_completion_write(FILE *out, const char *shell, const obctl_completion_verb *verbs,
                           size_t n, const char *global_flags);

#endif /* ONEBITCTL_COMPLETION_H */
