/* onebitctl's private header: the parsed command line, the verb table and the helpers the verbs
 * share. main.c parses (from the option tables of options.c), verbs.c and logs.c run the
 * verbs. */
#ifndef ONEBITCTL_CTL_H
#define ONEBITCTL_CTL_H

#include "client.h"
#include "completion.h"
#include "onebit/opt.h"
#include "onebit/report.h"
#include "onebit/token.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* logs --tail: the server's limit (OB_LOG_TAIL_MAX in service.h, not linked here). */
#define OB_LOG_TAIL_MAX_LINES 100000

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

typedef struct opts {
    const char *server, *rest, *token, *token_file, *request_id, *deadline, *since;
    /* --tls (or ONEBIT_TLS=1), --ca (ONEBIT_CA), --tls-server-name, --cert, --key */
    int tls;
    const char *ca, *tls_server_name, *cert, *key;
    long tail;                    /* logs --tail: the last N lines; 0: all */
    char token_buf[OB_TOKEN_MAX]; /* a token read from a file */
    char labels[OB_LABELS_LEN];   /* --label k=v, repeated, joined by commas */
    int json;
    /* verb arguments */
    const char *file, *state, *name;
    int np, max_restarts, watch, limit, follow, keep_checkpoints, quiet;
    long rank; /* logs --rank, -1: every rank */
    const char *model, *data, *optimizer, *lr, *freeze_step;
    long steps, batch_size;
    const char *program;     /* submit --program FILE */
    const char *program_dir; /* submit --program-dir DIR: the tree uploaded with it */
    int no_upload;           /* submit --no-upload: FILE is a path on onebitd's machine */
    char *const *prog_args;  /* submit --program FILE ... -- ARGS: the program's arguments */
    int nprog_args;
    const char *positional[4];
    int npos;
} opts;

/* onebitd's hard limits on an upload (OB_UPLOAD_MAX_FILES, OB_UPLOAD_MAX_LIMIT in service.h,
 * not linked here); its configured --max-upload-size may be smaller, and it says so. */
#define OBCTL_UPLOAD_MAX_FILES 1000
#define OBCTL_UPLOAD_MAX_BYTES ((uint64_t)1 << 30)

/* A program's files read for upload (upload.c); owns its paths and bytes. */
typedef struct obctl_upload {
    obctl_file *files;
    size_t n;
    uint64_t total;
} obctl_upload;

/* Reads program (a local script) alone, or with dir the tree of dir (which must hold program),
 * into *up (obctl_upload_free); entry[cap] gets the script's path in the upload. EXIT_OK, or
 * the exit status after a message on stderr. */
int obctl_upload_pack(const char *program, const char *dir, obctl_upload *up, char *entry,
                      size_t cap);
void obctl_upload_free(obctl_upload *up);

/* The options the program converts itself (ob_opt.id of their rows). */
enum { OPT_HELP = 1, OPT_VERSION, OPT_MAN, OPT_OUTPUT, OPT_LABEL };

/* A verb: its name, what it does, its own options and its help. */
typedef struct verb {
    const char *name;
    int (*run)(obctl_client *c, const opts *o);
    int needs_server;
    const ob_opt *options; /* the verb's own options (n_options rows) */
    size_t n_options;
    obctl_arg_kind arg;  /* its argument, for completion */
    const char *summary; /* one line, for the verb list and zsh */
    const char *usage;   /* "usage: onebitctl VERB ..." lines */
    const char *about;   /* what it does, before the options */
    const char *examples;
} verb;

/* options.c: the tables. */
extern const verb obctl_verbs[];
extern const size_t obctl_n_verbs;
extern const ob_opt obctl_global_options[];
extern const size_t obctl_n_global_options;
const verb *obctl_find_verb(const char *name);
/* The help of v (NULL: the program's) on f. */
void obctl_print_help(FILE *f, const verb *v);
/* The man page, onebitctl(1), on f. */
void obctl_print_man(FILE *f);

/* "onebitctl: <fmt with arg>" and a pointer to the verb's help; returns EXIT_USAGE. */
int obctl_usage_error(const char *verb_name, const char *fmt, const char *arg);
/* Prints err; returns EXIT_UNREACHABLE for a transport failure, else EXIT_FAIL. */
int obctl_fail(const ob_err *err);
/* EXIT_OK when o has one positional argument (a job id), else EXIT_USAGE with a message. */
int obctl_need_job(const opts *o, const char *verb_name);

/* Set by SIGINT once obctl_catch_sigint ran: the watching verbs stop, the job goes on. */
extern volatile sig_atomic_t obctl_interrupted;
void obctl_catch_sigint(void);

/* The verbs (verbs.c, logs.c). */
int obctl_v_submit(obctl_client *c, const opts *o);
int obctl_v_status(obctl_client *c, const opts *o);
int obctl_v_list(obctl_client *c, const opts *o);
int obctl_v_watch(obctl_client *c, const opts *o);
int obctl_v_cancel(obctl_client *c, const opts *o);
int obctl_v_version(obctl_client *c, const opts *o);
int obctl_v_delete(obctl_client *c, const opts *o);
int obctl_v_checkpoints(obctl_client *c, const opts *o);
int obctl_v_logs(obctl_client *c, const opts *o);
int obctl_v_inspect(obctl_client *c, const opts *o);
int obctl_v_completion(obctl_client *c, const opts *o);
int obctl_v_help(obctl_client *c, const opts *o);

#endif /* ONEBITCTL_CTL_H */
