/* onebitctl: the command line for onebitd.
 *
 *   onebitctl submit -f job.yaml [--np N] [--watch]      onebitctl status JOB
 *   onebitctl list [--state S]                           onebitctl watch JOB
 *   onebitctl cancel JOB                                 onebitctl checkpoints JOB
 *   onebitctl inspect CHECKPOINT_DIR                     onebitctl help [VERB]
 *
 * gRPC by default (--server / ONEBIT_SERVER, 127.0.0.1:50051); --rest URL uses the REST API.
 * --token / ONEBIT_TOKEN; -o table|json. Exit status: 0 success (watch: the job succeeded),
 * 1 the request was refused or the job did not succeed, 2 bad usage, 3 the server cannot be
 * reached.
 *
 * This file parses the command line with the option tables of options.c (which also write
 * --help, the completion scripts and the man page); verbs.c and logs.c run the verbs. */
#define _GNU_SOURCE /* getopt_long */
#include "ctl.h"
#include "onebit/base.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- arguments ------------------------------------------------------------------------------- */

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "onebitctl: %s: expected an integer in [%ld, %ld], got '%s'\n", flag, lo,
                hi, v);
        return 0;
    }
    *out = x;
    return 1;
}

/* The token: --token, ONEBIT_TOKEN, --token-file or ONEBIT_TOKEN_FILE, else the token onebitd
 * made in its state directory ($ONEBIT_STATE_DIR, else ./var) when that file is there. Returns
 * -1 to go on, or an exit status. */
static int find_token(opts *o)
{
    if (!o->token || !o->token[0]) o->token = getenv("ONEBIT_TOKEN");
    if (o->token && o->token[0]) return -1;
    o->token = NULL;
    const char *file = o->token_file ? o->token_file : getenv("ONEBIT_TOKEN_FILE");
    char path[4096];
    if (!file || !file[0]) {
        const char *state = getenv("ONEBIT_STATE_DIR");
        snprintf(path, sizeof path, "%s/token", state && state[0] ? state : "./var");
        file = path;
        if (access(file, F_OK) != 0) return -1; /* no local daemon's token: none */
    }
    ob_err err;
    ob_err_clear(&err);
    if (ob_token_read(file, o->token_buf, sizeof o->token_buf, &err) != OB_OK) {
        fprintf(stderr, "onebitctl: %s\n", err.msg);
        return EXIT_USAGE;
    }
    o->token = o->token_buf;
    return -1;
}

/* TLS is on with --tls, ONEBIT_TLS=1, --ca, --tls-server-name, --cert or an https:// --rest
 * URL; ONEBIT_CA gives the CA when --ca does not. Returns -1 to go on, or an exit status. */
static int tls_settings(opts *o)
{
    const char *e = getenv("ONEBIT_TLS");
    if (e && !strcmp(e, "1")) o->tls = 1;
    if (o->ca || o->tls_server_name || o->cert || o->key) o->tls = 1;
    if (o->rest && !strncasecmp(o->rest, "https://", 8)) o->tls = 1;
    if (o->tls && !o->ca) {
        const char *ca = getenv("ONEBIT_CA");
        if (ca && ca[0]) o->ca = ca;
    }
    if (!o->cert != !o->key)
        return obctl_usage_error(NULL, "%s", "--cert and --key go together (a client certificate)");
    if (o->tls && o->rest && strstr(o->rest, "://") && strncasecmp(o->rest, "https://", 8))
        return obctl_usage_error(NULL, "TLS needs an https:// --rest URL, not '%s'", o->rest);
    if (o->tls_server_name && o->rest)
        return obctl_usage_error(
            NULL, "%s",
            "--tls-server-name is for gRPC; over REST the URL's host is the name "
            "checked");
    return -1;
}

/* Converts the value of option r (as typed: flag) into o. Returns -1 to go on, or an exit
 * status. */
static int set_option(const ob_opt *r, const char *flag, const char *arg, opts *o)
{
    long x;
    void *dest = ob_opt_dest(r, o);
    switch (r->kind) {
    case OB_OPT_FLAG:
        *(int *)dest = 1;
        return -1;
    case OB_OPT_STRING:
    case OB_OPT_DURATION:
        *(const char **)dest = arg;
        return -1;
    case OB_OPT_INT:
    case OB_OPT_LONG:
        if (!parse_long(flag, arg, (long)r->lo, (long)r->hi, &x)) return EXIT_USAGE;
        if (r->kind == OB_OPT_INT)
            *(int *)dest = (int)x;
        else
            *(long *)dest = x;
        return -1;
    default:
        break;
    }
    if (r->id == OPT_OUTPUT) {
        if (strcmp(arg, "json") && strcmp(arg, "table"))
            return obctl_usage_error(NULL, "-o: expected table or json, got '%s'", arg);
        o->json = !strcmp(arg, "json");
    } else if (r->id == OPT_LABEL) {
        size_t used = strlen(o->labels), add = strlen(arg);
        if (used + add + 2 > sizeof o->labels)
            return obctl_usage_error(NULL, "%s", "--label: too many labels");
        snprintf(o->labels + used, sizeof o->labels - used, "%s%s", used ? "," : "", arg);
    }
    return -1;
}

/* The getopt_long arguments of the global options and those of v (NULL: every verb's, for the
 * first pass that only finds the verb). Returns 0, or -1 when an array is too small. */
enum { MAX_LONG = 96, MAX_SHORT = 32 };
static int build_getopt(const verb *v, struct option *longopts, char *shortopts)
{
    size_t n = 0;
    longopts[0] = (struct option){0};
    snprintf(shortopts, MAX_SHORT, ":");
    int rc = ob_opt_getopt(longopts, &n, MAX_LONG, shortopts, MAX_SHORT, obctl_global_options,
                           obctl_n_global_options, 256);
    for (size_t i = 0; i < obctl_n_verbs && !rc; i++) {
        const verb *w = v ? v : &obctl_verbs[i];
        rc = ob_opt_getopt(longopts, &n, MAX_LONG, shortopts, MAX_SHORT, w->options, w->n_options,
                           256 + (int)obctl_n_global_options);
        if (v) break;
    }
    return rc;
}

/* The row getopt_long's c stands for among the global options and v's. */
static const ob_opt *option_row(int c, const verb *v)
{
    int ng = (int)obctl_n_global_options;
    if (c >= 256 + ng) return v ? &v->options[c - 256 - ng] : NULL;
    if (c >= 256) return &obctl_global_options[c - 256];
    char name[2] = {(char)c, '\0'};
    const ob_opt *r = ob_opt_find(obctl_global_options, obctl_n_global_options, name);
    return r || !v ? r : ob_opt_find(v->options, v->n_options, name);
}

/* The verb: the first argument that is not an option, found by a first, quiet pass over a copy
 * of argv with every verb's options (-f is --file for submit and --follow for logs: the options
 * are read once the verb is known). NULL when there is none or it is unknown. */
static const verb *scan_verb(int argc, char **argv, const char **name)
{
    struct option longopts[MAX_LONG];
    char shortopts[MAX_SHORT];
    *name = NULL;
    char **scan = malloc(((size_t)argc + 1) * sizeof *scan);
    if (!scan || build_getopt(NULL, longopts, shortopts)) {
        free(scan);
        return NULL;
    }
    memcpy(scan, argv, ((size_t)argc + 1) * sizeof *scan);
    while (getopt_long(argc, scan, shortopts, longopts, NULL) != -1)
        ;
    if (optind < argc) *name = scan[optind];
    free(scan);
    optind = 0; /* start over (GNU getopt re-initialises on 0) */
    return *name ? obctl_find_verb(*name) : NULL;
}

/* Reads the options (before or after the verb: getopt_long permutes them) for verb v. Sets
 * *action to the ACTION option given (0: none), and problem (capacity 64) and *bad_arg to the
 * first unknown option or missing value, which the caller reports once it knows the verb is
 * one. Returns -1 to go on, or an exit status. */
static int read_options(int argc, char **argv, const verb *v, opts *o, int *action, char *problem,
                        const char **bad_arg)
{
    struct option longopts[MAX_LONG];
    char shortopts[MAX_SHORT];
    if (build_getopt(v, longopts, shortopts))
        return obctl_usage_error(NULL, "%s", "too many options");
    int c, idx = -1;
    while ((c = getopt_long(argc, argv, shortopts, longopts, &idx)) != -1) {
        const ob_opt *r = c == ':' || c == '?' ? NULL : option_row(c, v);
        char flag[40];
        if (idx >= 0)
            snprintf(flag, sizeof flag, "--%s", longopts[idx].name);
        else
            snprintf(flag, sizeof flag, "-%c", c);
        idx = -1;
        if (r && r->kind == OB_OPT_ACTION) {
            if (r->id == OPT_VERSION) { /* this program's release alone */
                printf("onebitctl %s\n", ONEBIT_VERSION);
                return EXIT_OK;
            }
            if (r->id == OPT_MAN) {
                obctl_print_man(stdout);
                return EXIT_OK;
            }
            *action = r->id;
        } else if (r) {
            int rc = set_option(r, flag, optarg, o);
            if (rc >= 0) return rc;
        } else if (!problem[0]) {
            snprintf(problem, 64, c == ':' ? "%%s needs a value" : "unknown option '%%s'");
            *bad_arg = argv[optind - 1];
        }
    }
    return -1;
}

/* Parses the command line into o and *v (the verb). Returns -1 to go on, or an exit status. */
static int parse(int argc, char **argv, opts *o, const verb **v)
{
    memset(o, 0, sizeof *o);
    o->max_restarts = -1;
    o->rank = -1;
    opterr = 0;
    const char *name;
    *v = scan_verb(argc, argv, &name);
    int action = 0;
    char problem[64] = "";
    const char *bad_arg = NULL;
    int rc = read_options(argc, argv, *v, o, &action, problem, &bad_arg);
    if (rc >= 0) return rc;
    if (name && !*v) return obctl_usage_error(NULL, "unknown verb '%s'", name);
    if (problem[0]) return obctl_usage_error(*v ? (*v)->name : NULL, problem, bad_arg);
    if (optind < argc) optind++;                             /* the verb */
    if (*v && !strcmp((*v)->name, "submit") && o->program) { /* the rest is the program's */
        o->prog_args = argv + optind;
        o->nprog_args = argc - optind;
        optind = argc;
    }
    for (; optind < argc; optind++) {
        if (o->npos >= 4)
            return obctl_usage_error((*v)->name, "too many arguments at '%s'", argv[optind]);
        o->positional[o->npos++] = argv[optind];
    }
    if (action == OPT_HELP) {
        obctl_print_help(stdout, *v);
        return EXIT_OK;
    }
    if (!*v) {
        obctl_print_help(stderr, NULL);
        return EXIT_USAGE;
    }
    if (!o->server) o->server = getenv("ONEBIT_SERVER");
    if (!o->server || !o->server[0]) o->server = "127.0.0.1:50051";
    int tls_rc = tls_settings(o);
    return tls_rc >= 0 ? tls_rc : find_token(o);
}

int main(int argc, char **argv)
{
    opts o;
    const verb *v;
    int rc = parse(argc, argv, &o, &v);
    if (rc >= 0) return rc;
    obctl_client *c = NULL;
    if (v->needs_server) {
        ob_err err = {0};
        obctl_tls tls = {o.ca, o.tls_server_name, o.cert, o.key};
        const obctl_tls *t = o.tls ? &tls : NULL;
        ob_status st = o.rest ? obctl_client_rest(&c, o.rest, o.token, t, &err)
                              : obctl_client_grpc(&c, o.server, o.token, t, &err);
        if (st != OB_OK) return obctl_fail(&err);
    }
    rc = v->run(c, &o);
    obctl_client_destroy(c);
    return rc;
}
