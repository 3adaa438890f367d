/* onebitctl's option tables and verb table: what main.c parses with, and what --help, `onebitctl
 * help`, the completion scripts and the man page (onebitctl --man) are written from. A flag
 * added to a verb's table is parsed, listed in its help and completed. */
#include "ctl.h"

#include <stddef.h>
#include <string.h>

#define F(x) offsetof(opts, x)
#define N(t) (sizeof t / sizeof *t)
#define INT_MAX_ARG (1L << 30) /* the bound of every integer a verb takes */

/* ---- options -----------------------------------------------------------------------------------
 */

/* Every verb takes these, before or after it. */
const ob_opt obctl_global_options[] = {
    {"server", 0, OB_OPT_STRING, F(server), 0, 0, "HOST:PORT",
     "gRPC address of onebitd [127.0.0.1:50051]", "ONEBIT_SERVER", 0, 0, 0},
    {"rest", 0, OB_OPT_STRING, F(rest), 0, 0, "URL",
     "use the REST API at URL instead (e.g. http://127.0.0.1:8080)", NULL, 0, 0, 0},
    {"token", 0, OB_OPT_STRING, F(token), 0, 0, "T", "bearer token", "ONEBIT_TOKEN", 0, 0, 0},
    {"token-file", 0, OB_OPT_STRING, F(token_file), 0, 0, "F",
     "read it from F [the token onebitd made in its state directory,\n"
     "$ONEBIT_STATE_DIR/token or ./var/token]",
     "ONEBIT_TOKEN_FILE", 0, 0, 0},
    {"tls", 0, OB_OPT_FLAG, F(tls), 0, 0, NULL,
     "talk TLS to onebitd (also: --ca, an https:// URL, ONEBIT_TLS=1)", "ONEBIT_TLS", 0, 0, 0},
    {"ca", 0, OB_OPT_STRING, F(ca), 0, 0, "FILE",
     "PEM CA to check onebitd's certificate with [the system's roots]", "ONEBIT_CA", 0, 0, 0},
    {"tls-server-name", 0, OB_OPT_STRING, F(tls_server_name), 0, 0, "N",
     "gRPC: the name the certificate must carry [the --server host]", NULL, 0, 0, 0},
    {"cert", 0, OB_OPT_STRING, F(cert), 0, 0, "F",
     "a client certificate, for onebitd --tls-client-ca (with --key)", NULL, 0, 0, 0},
    {"key", 0, OB_OPT_STRING, F(key), 0, 0, "F", "the client certificate's key", NULL, 0, 0, 0},
    {"output", 'o', OB_OPT_CUSTOM, F(json), 0, 0, "table|json",
     "output for people (default) or scripts (proto3 JSON)", NULL, OPT_OUTPUT, 0, 0},
    {"help", 'h', OB_OPT_ACTION, 0, 0, 0, NULL, "this help, or the verb's", NULL, OPT_HELP, 0, 0},
    {"version", 0, OB_OPT_ACTION, 0, 0, 0, NULL,
     "onebitctl's release (the verb version asks the server too)", NULL, OPT_VERSION, 0, 0},
    {"man", 0, OB_OPT_ACTION, 0, 0, 0, NULL, "the man page, onebitctl(1), in roff", NULL, OPT_MAN,
     0, 1},
};
const size_t obctl_n_global_options = N(obctl_global_options);

static const ob_opt submit_options[] = {
    {"file", 'f', OB_OPT_STRING, F(file), 0, 0, "FILE",
     "job spec, YAML or JSON ('-': standard input)", NULL, 0, 0, 0},
    {"np", 0, OB_OPT_INT, F(np), 0, INT_MAX_ARG, "N",
     "ranks (0: one per GPU of the service's machine, else one) [0]", NULL, 0, 0, 0},
    {"max-restarts", 0, OB_OPT_INT, F(max_restarts), -1, INT_MAX_ARG, "N",
     "restarts after failures (-1: the service default) [-1]", NULL, 0, 0, 0},
    {"watch", 'w', OB_OPT_FLAG, F(watch), 0, 0, NULL,
     "follow the job to its end (exit 0 when it succeeds)", NULL, 0, 0, 0},
    {"request-id", 0, OB_OPT_STRING, F(request_id), 0, 0, "ID",
     "submit at most once: a retry with the same ID answers the same job", NULL, 0, 0, 0},
    {"label", 0, OB_OPT_CUSTOM, F(labels), 0, 0, "K=V",
     "a label of the job (repeatable); onebitctl list --label selects", NULL, OPT_LABEL, 0, 0},
    {"deadline", 0, OB_OPT_DURATION, F(deadline), 0, 0, "D",
     "stop the job if it has not ended D after its first start (90m, 2h,\n"
     "1h30m); it ends FAILED, \"deadline exceeded\", after a checkpoint",
     NULL, 0, 0, 0},
    {"model", 0, OB_OPT_STRING, F(model), 0, 0, "M",
     "without -f: the model (softmax, mlp or transformer)", NULL, 0, 0, 0},
    {"data", 0, OB_OPT_STRING, F(data), 0, 0, "D",
     "without -f: the data set's type (e.g. synthetic_classification)", NULL, 0, 0, 0},
    {"optimizer", 0, OB_OPT_STRING, F(optimizer), 0, 0, "O",
     "adam, onebit_adam, binsgdm (1 bit from the first step) or softsign", NULL, 0, 0, 0},
    {"steps", 0, OB_OPT_LONG, F(steps), 0, INT_MAX_ARG, "N",
     "training steps (with --program: for the progress bar)", NULL, 0, 0, 0},
    {"batch-size", 0, OB_OPT_LONG, F(batch_size), 0, INT_MAX_ARG, "B",
     "without -f: the spec's batch_size", NULL, 0, 0, 0},
    {"lr", 0, OB_OPT_STRING, F(lr), 0, 0, "X", "without -f: the peak learning rate", NULL, 0, 0, 0},
    {"freeze-step", 0, OB_OPT_STRING, F(freeze_step), 0, 0, "N|auto",
     "without -f: the step onebit_adam starts compressing at", NULL, 0, 0, 0},
    {"name", 0, OB_OPT_STRING, F(name), 0, 0, "NAME",
     "the job's name, without -f [cli-job; a program job: the spec's]", NULL, 0, 0, 0},
    {"program", 0, OB_OPT_STRING, F(program), 0, 0, "SCRIPT",
     "a program job: SCRIPT runs on every rank with ARGS (engine/python:\n"
     "import onebit); --steps N for the progress bar. SCRIPT is read\n"
     "here and uploaded with the job (onebitd keeps the copy until the\n"
     "job is deleted; at most its --max-upload-size, 64 MiB by default)",
     NULL, 0, 0, 0},
    {"program-dir", 0, OB_OPT_STRING, F(program_dir), 0, 0, "DIR",
     "upload the tree of DIR, which holds SCRIPT, and run SCRIPT in it:\n"
     "its regular files (no symbolic links; .git and __pycache__ left\n"
     "out), at most 1000",
     NULL, 0, 0, 0},
    {"no-upload", 0, OB_OPT_FLAG, F(no_upload), 0, 0, NULL,
     "SCRIPT is a path on onebitd's machine, under one of its data\n"
     "roots: run it where it lies, in its directory, uploading nothing",
     NULL, 0, 0, 0},
};

static const ob_opt list_options[] = {
    {"state", 0, OB_OPT_STRING, F(state), 0, 0, "S",
     "PENDING, RUNNING, RESTARTING, SUCCEEDED, FAILED or CANCELLED", NULL, 0, 0, 0},
    {"label", 0, OB_OPT_CUSTOM, F(labels), 0, 0, "K=V",
     "only jobs with this label (repeatable: all of them)", NULL, OPT_LABEL, 0, 0},
    {"limit", 0, OB_OPT_INT, F(limit), 0, INT_MAX_ARG, "N", "at most N jobs [all]", NULL, 0, 0, 0},
    {"quiet", 'q', OB_OPT_FLAG, F(quiet), 0, 0, NULL, "only the job ids, one a line", NULL, 0, 0,
     0},
};

static const ob_opt delete_options[] = {
    {"keep-checkpoints", 0, OB_OPT_FLAG, F(keep_checkpoints), 0, 0, NULL,
     "leave its checkpoints (a later job may warm-start from them)", NULL, 0, 0, 0},
};

static const ob_opt logs_options[] = {
    {"tail", 0, OB_OPT_LONG, F(tail), 1, OB_LOG_TAIL_MAX_LINES, "N",
     "only the last N lines of the log (every rank's lines count)", NULL, 0, 0, 0},
    {"since", 0, OB_OPT_STRING, F(since), 0, 0, "D|T",
     "only lines written in the last D (10m, 1h30m) or since the time T\n"
     "(2026-11-23T15:04:05Z), to within about a second",
     NULL, 0, 0, 0},
    {"rank", 0, OB_OPT_LONG, F(rank), 0, INT_MAX_ARG, "R", "only rank R's lines, without the tag",
     NULL, 0, 0, 0},
    {"follow", 'f', OB_OPT_FLAG, F(follow), 0, 0, NULL,
     "go on with new lines as they are written, until the job ends", NULL, 0, 0, 0},
};

/* ---- verbs -------------------------------------------------------------------------------------
 */

const verb obctl_verbs[] = {
    {"submit", obctl_v_submit, 1, submit_options, N(submit_options), OBCTL_ARG_NONE,
     "submit a job (-f FILE, or flags for the common fields); prints its id",
     "usage: onebitctl submit -f FILE [--np N] [--max-restarts N] [--deadline D] [--watch]\n"
     "       onebitctl submit --model M --data D --optimizer O --steps N --batch-size B\n"
     "                        [--lr X] [--freeze-step N|auto] [--name NAME] [--np N] [--watch]\n"
     "       onebitctl submit --program SCRIPT [--program-dir DIR | --no-upload] [--steps N]\n"
     "                        [--name NAME] [--np N] -- ARGS...\n",
     "submits a job from a spec file, from the flags for its common fields, or to run a\n"
     "program; prints the job's id (-o json: the job)\n",
     "onebitctl submit -f examples/fmnist-mlp-onebit.yaml --np 4 --watch\n"
     "onebitctl submit --model mlp --data synthetic_classification --optimizer onebit_adam \\\n"
     "                 --steps 500 --batch-size 32 --freeze-step 100 --np 2\n"
     "onebitctl submit --model mlp --data synthetic_classification --optimizer binsgdm \\\n"
     "                 --steps 500 --batch-size 32 --np 2\n"
     "onebitctl submit -f job.yaml --request-id nightly-2026-11-27 --label team=nlp\n"
     "onebitctl submit --program examples/pytorch/gpt.py --np 4 --watch -- --steps 600\n"
     "onebitctl submit --program train.py --program-dir . --np 4 -- --lr 3e-4\n"
     "onebitctl submit --program /srv/code/train.py --no-upload --np 4\n"},
    {"status", obctl_v_status, 1, NULL, 0, OBCTL_ARG_JOB, "a job in detail",
     "usage: onebitctl status JOB\n",
     "state, attempts, progress, loss, traffic saved, newest checkpoint\n",
     "onebitctl status job-000001\nonebitctl status job-000001 -o json | jq .progress\n"},
    {"list", obctl_v_list, 1, list_options, N(list_options), OBCTL_ARG_NONE, "jobs, newest last",
     "usage: onebitctl list [--state S] [--label K=V]... [--limit N] [-q]\n",
     "the jobs, newest last, in pages from the server\n",
     "onebitctl list --state RUNNING --label team=nlp\n"},
    {"watch", obctl_v_watch, 1, NULL, 0, OBCTL_ARG_JOB,
     "follow a job to its end with a progress bar; exit 0 if it succeeds",
     "usage: onebitctl watch JOB\n",
     "a live progress bar on a terminal (plain lines otherwise, JSON lines with -o json);\n"
     "exits 0 when the job succeeds, 1 when it fails or is cancelled. Ctrl-C stops watching,\n"
     "not the job.\n",
     "onebitctl watch job-000001\n"},
    {"cancel", obctl_v_cancel, 1, NULL, 0, OBCTL_ARG_JOB,
     "cancel a job (its workers checkpoint and stop)", "usage: onebitctl cancel JOB\n",
     "the job's workers finish their step, checkpoint and stop\n", "onebitctl cancel job-000001\n"},
    {"delete", obctl_v_delete, 1, delete_options, N(delete_options), OBCTL_ARG_JOB,
     "remove a job that has ended, with its checkpoints unless kept",
     "usage: onebitctl delete JOB [--keep-checkpoints]\n",
     "removes a job that has ended: its record, events, log and checkpoints\n",
     "onebitctl delete job-000001\n"},
    {"version", obctl_v_version, 1, NULL, 0, OBCTL_ARG_NONE, "onebitctl's release and the server's",
     "usage: onebitctl version\n", "this program's release, then the server's release and API\n",
     NULL},
    {"logs", obctl_v_logs, 1, logs_options, N(logs_options), OBCTL_ARG_JOB,
     "the output of a job's workers (--rank R, -f to follow)",
     "usage: onebitctl logs JOB [--tail N] [--since D|T] [--rank R] [-f]\n",
     "the output of the job's workers, every attempt; lines carry their rank as [job,rank]\n",
     "onebitctl logs job-000001 --tail 100 --since 10m -f\n"
     "onebitctl logs job-000001 --rank 0 -f\nonebitctl logs job-000001 | grep error\n"},
    {"checkpoints", obctl_v_checkpoints, 1, NULL, 0, OBCTL_ARG_JOB,
     "a job's checkpoints, newest first", "usage: onebitctl checkpoints JOB\n",
     "the job's committed checkpoints, newest first\n", "onebitctl checkpoints job-000001\n"},
    {"inspect", obctl_v_inspect, 0, NULL, 0, OBCTL_ARG_DIR,
     "read a checkpoint directory here and verify it (no server needed)",
     "usage: onebitctl inspect CHECKPOINT_DIR\n",
     "reads the HDF5 files here (no server): step, phase, freeze step, sizes, world size,\n"
     "and whether every file verifies; exit 1 when it does not\n",
     "onebitctl inspect var/checkpoints/job-000001/step-00001000\n"},
    {"completion", obctl_v_completion, 0, NULL, 0, OBCTL_ARG_SHELL,
     "print a bash or zsh completion script", "usage: onebitctl completion bash|zsh\n",
     "prints a completion script: verbs, flags, and job ids (from onebitctl list -q with\n"
     "the --server, --rest and --token options already typed)\n",
     "source <(onebitctl completion bash)\n"
     "onebitctl completion zsh > \"${fpath[1]}/_onebitctl\"\n"},
    {"help", obctl_v_help, 0, NULL, 0, OBCTL_ARG_VERB,
     "onebitctl's help, or a verb's (the same as --help)", "usage: onebitctl help [VERB]\n",
     "the options every verb takes and the verbs; with VERB, that verb's usage, options and\n"
     "examples\n",
     "onebitctl help submit\n"},
};
const size_t obctl_n_verbs = N(obctl_verbs);

const verb *obctl_find_verb(const char *name)
{
    for (size_t i = 0; i < obctl_n_verbs; i++)
        if (!strcmp(obctl_verbs[i].name, name)) return &obctl_verbs[i];
    return NULL;
}

/* ---- completion and help -----------------------------------------------------------------------
 */

int obctl_v_completion(obctl_client *c, const opts *o)
{
    (void)c;
    if (o->npos != 1) return obctl_usage_error("completion", "%s", "expected bash or zsh");
    enum { NV = N(obctl_verbs), CAP = 1024 };
    obctl_completion_verb cv[NV];
    char flags[NV][CAP], global[CAP] = "";
    if (ob_opt_completion_flags(global, CAP, obctl_global_options, obctl_n_global_options))
        return EXIT_FAIL;
    for (size_t i = 0; i < NV; i++) {
        const verb *v = &obctl_verbs[i];
        flags[i][0] = '\0';
        if (ob_opt_completion_flags(flags[i], CAP, v->options, v->n_options)) return EXIT_FAIL;
        cv[i] = (obctl_completion_verb){v->name, v->summary, flags[i], v->arg};
    }
    if (obctl_completion_write(stdout, o->positional[0], cv, NV, global) != 0)
        return obctl_usage_error("completion", "no completion for shell '%s': expected bash or zsh",
                                 o->positional[0]);
    return EXIT_OK;
}

int obctl_v_help(obctl_client *c, const opts *o)
{
    (void)c;
    if (o->npos > 1)
        return obctl_usage_error("help", "too many arguments at '%s'", o->positional[1]);
    const verb *v = o->npos ? obctl_find_verb(o->positional[0]) : NULL;
    if (o->npos && !v) return obctl_usage_error("help", "unknown verb '%s'", o->positional[0]);
    obctl_print_help(stdout, v);
    return EXIT_OK;
}

/* Prints text (lines ending in '\n') with indent spaces before each line. */
static void print_indented(FILE *f, const char *text, int indent)
{
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        fprintf(f, "%*s%.*s\n", indent, "", (int)len, p);
        p += len + (p[len] == '\n');
    }
}

void obctl_print_help(FILE *f, const verb *v)
{
    if (v) {
        fputs(v->usage, f);
        print_indented(f, v->about, 2);
        if (v->n_options) {
            fputs("Options:\n", f);
            ob_opt_print_help(f, v->options, v->n_options, 22);
        }
        if (v->examples) {
            fputs(strchr(v->examples, '\n')[1] ? "Examples:\n" : "Example:\n", f);
            print_indented(f, v->examples, 2);
        }
        fprintf(f, "The options every verb takes: onebitctl --help\n");
        return;
    }
    fputs("usage: onebitctl [--server HOST:PORT | --rest URL] [--token T] [--tls --ca FILE]\n"
          "                 [-o table|json] VERB ...\n\nVerbs:\n",
          f);
    for (size_t i = 0; i < obctl_n_verbs; i++)
        fprintf(f, "  %-12s %s\n", obctl_verbs[i].name, obctl_verbs[i].summary);
    fputs("\nOptions (before or after the verb):\n", f);
    ob_opt_print_help(f, obctl_global_options, obctl_n_global_options, 21);
    fputs("\nExit status: 0 ok, 1 refused or job not successful, 2 bad usage, 3 server "
          "unreachable.\n'onebitctl help VERB' (or 'onebitctl VERB --help') shows the verb's "
          "options and examples.\n",
          f);
}

/* ---- the man page ------------------------------------------------------------------------------
 */

static void man_lines(FILE *f, const char *text)
{
    fputs(".nf\n", f);
    ob_opt_roff(f, text);
    fputs(".fi\n", f);
}

void obctl_print_man(FILE *f)
{
    fprintf(f, ".TH ONEBITCTL 1 \"\" \"onebit %s\" \"User Commands\"\n", ONEBIT_VERSION);
    fputs(".SH NAME\nonebitctl \\- the command line for onebitd, the onebit training service\n"
          ".SH SYNOPSIS\n.B onebitctl\n[\\fIOPTIONS\\fR] \\fIVERB\\fR [\\fIARGUMENTS\\fR]\n"
          ".SH DESCRIPTION\n.B onebitctl\nsubmits, lists, follows and cancels the jobs of "
          "\\fBonebitd\\fR(8) over gRPC (the default) or its REST API (\\fB\\-\\-rest\\fR), and "
          "reads checkpoint directories. Options may come before or after the verb.\n"
          ".SH OPTIONS\n",
          f);
    ob_opt_print_man(f, obctl_global_options, obctl_n_global_options);
    fputs(".SH VERBS\n", f);
    for (size_t i = 0; i < obctl_n_verbs; i++) {
        const verb *v = &obctl_verbs[i];
        fprintf(f, ".SS %s\n", v->name);
        man_lines(f, v->usage);
        fputs(".PP\n", f);
        ob_opt_roff(f, v->about);
        if (v->n_options) {
            fputs(".PP\nOptions:\n.RS\n", f);
            ob_opt_print_man(f, v->options, v->n_options);
            fputs(".RE\n", f);
        }
        if (v->examples) {
            fputs(".PP\nExamples:\n.RS\n", f);
            man_lines(f, v->examples);
            fputs(".RE\n", f);
        }
    }
    fputs(".SH ENVIRONMENT\n", f);
    for (size_t i = 0; i < obctl_n_global_options; i++) {
        const ob_opt *o = &obctl_global_options[i];
        if (!o->env) continue;
        fprintf(f, ".TP\n.B %s\nas \\fB\\-\\-", o->env);
        ob_opt_roff(f, o->name);
        fputs("\\fR when it is not given\n", f);
    }
    fputs(
        ".TP\n.B ONEBIT_STATE_DIR\nwhere to find the token of a local onebitd "
        "(\\fI$ONEBIT_STATE_DIR/token\\fR) [./var]\n"
        ".SH EXIT STATUS\n0 success (watch: the job succeeded), 1 the request was refused or "
        "the job did not succeed, 2 bad usage, 3 the server cannot be reached.\n"
        ".SH SEE ALSO\n\\fBonebitd\\fR(8), \\fBonebit\\-worker\\fR(1), \\fBonebit\\-ckpt\\fR(1)\n",
        f);
}
