/* Option tables (onebit/opt.h): the getopt_long arrays, --help, man pages and completion flag
 * lists, all read from the same rows. */
#define _GNU_SOURCE /* getopt_long's struct option */
#include "onebit/opt.h"

#include <getopt.h>
#include <string.h>

int ob_opt_takes_value(const ob_opt *o)
{
    switch (o->kind) {
    case OB_OPT_FLAG:
        return 0;
    case OB_OPT_ACTION:
    case OB_OPT_CUSTOM:
        return o->metavar != NULL;
    default:
        return 1;
    }
}

void *ob_opt_dest(const ob_opt *o, void *base)
{
    return (char *)base + o->field;
}

const ob_opt *ob_opt_find(const ob_opt *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (name[0] && !name[1] ? t[i].short_name == name[0] : !strcmp(t[i].name, name))
            return &t[i];
    }
    return NULL;
}

int ob_opt_getopt(struct option *longopts, size_t *nlong, size_t cap, char *shortopts, size_t scap,
                  const ob_opt *t, size_t n, int first_val)
{
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < *nlong && strcmp(longopts[j].name, t[i].name) != 0)
            j++;
        if (j == *nlong) {
            if (*nlong + 1 >= cap) return -1;
            longopts[(*nlong)++] = (struct option){
                t[i].name, ob_opt_takes_value(&t[i]) ? required_argument : no_argument, NULL,
                first_val + (int)i};
            longopts[*nlong] = (struct option){0};
        }
        if (t[i].short_name && !strchr(shortopts, t[i].short_name)) {
            size_t len = strlen(shortopts);
            if (len + 3 > scap) return -1;
            shortopts[len++] = t[i].short_name;
            if (ob_opt_takes_value(&t[i])) shortopts[len++] = ':';
            shortopts[len] = '\0';
        }
    }
    return 0;
}

/* "-f, --file FILE" or "--np N": the option as help and man pages show it. */
static int format_name(char *buf, size_t cap, const ob_opt *o)
{
    char sh[8] = "";
    if (o->short_name) snprintf(sh, sizeof sh, "-%c, ", o->short_name);
    return snprintf(buf, cap, "%s--%s%s%s", sh, o->name, o->metavar ? " " : "",
                    o->metavar ? o->metavar : "");
}

void ob_opt_print_help(FILE *f, const ob_opt *t, size_t n, int col)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i].hidden) continue;
        char name[128];
        int len = format_name(name, sizeof name, &t[i]);
        fprintf(f, "  %s", name);
        /* A name too long for the column puts its help on the next line. */
        if (len + 4 > col)
            fprintf(f, "\n%*s", col, "");
        else
            fprintf(f, "%*s", col - 2 - len, "");
        for (const char *p = t[i].help; *p;) {
            size_t line = strcspn(p, "\n");
            fprintf(f, "%.*s\n", (int)line, p);
            p += line;
            if (*p == '\n' && *++p) fprintf(f, "%*s", col, "");
        }
        if (t[i].env) fprintf(f, "%*s(environment: %s)\n", col, "", t[i].env);
    }
}

void ob_opt_roff(FILE *f, const char *text)
{
    int bol = 1;
    for (const char *p = text; *p; p++) {
        if (bol && (*p == '.' || *p == '\'')) fputs("\\&", f);
        if (*p == '\\')
            fputs("\\e", f);
        else if (*p == '-')
            fputs("\\-", f);
        else
            fputc(*p, f);
        bol = *p == '\n';
    }
}

void ob_opt_print_man(FILE *f, const ob_opt *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i].hidden) continue;
        fputs(".TP\n", f);
        if (t[i].short_name) fprintf(f, "\\fB\\-%c\\fR, ", t[i].short_name);
        fputs("\\fB\\-\\-", f);
        ob_opt_roff(f, t[i].name);
        fputs("\\fR", f);
        if (t[i].metavar) {
            fputs(" \\fI", f);
            ob_opt_roff(f, t[i].metavar);
            fputs("\\fR", f);
        }
        fputs("\n", f);
        /* The help's lines are one paragraph: filled, not broken where --help breaks them. */
        for (const char *p = t[i].help; *p;) {
            size_t line = strcspn(p, "\n");
            const char *s = p;
            while (*s == ' ' && s < p + line)
                s++;
            char buf[512];
            snprintf(buf, sizeof buf, "%.*s", (int)(line - (size_t)(s - p)), s);
            ob_opt_roff(f, buf);
            fputs("\n", f);
            p += line;
            if (*p == '\n') p++;
        }
        if (t[i].env) {
            fputs(".br\nEnvironment: \\fB", f);
            ob_opt_roff(f, t[i].env);
            fputs("\\fR.\n", f);
        }
    }
}

int ob_opt_completion_flags(char *buf, size_t cap, const ob_opt *t, size_t n)
{
    size_t len = strlen(buf);
    for (size_t i = 0; i < n; i++) {
        if (t[i].hidden) continue;
        const char *mark = ob_opt_takes_value(&t[i]) ? "=" : "";
        int w = 0;
        if (t[i].short_name)
            w = snprintf(buf + len, cap - len, "%s-%c%s", len ? " " : "", t[i].short_name, mark);
        if (w < 0 || (size_t)w >= cap - len) return -1;
        len += (size_t)w;
        w = snprintf(buf + len, cap - len, "%s--%s%s", len ? " " : "", t[i].name, mark);
        if (w < 0 || (size_t)w >= cap - len) return -1;
        len += (size_t)w;
    }
    return 0;
}
