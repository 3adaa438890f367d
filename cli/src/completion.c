/* The completion scripts of onebitctl (completion.h). A flag written "--np=" in a verb's flag
 * list takes a value; the scripts skip that value when they look for the verb and complete it
 * (file names, fixed words) or leave it alone. */
#include "completion.h"

#include <string.h>

static const char *const states = "PENDING RUNNING RESTARTING SUCCEEDED FAILED CANCELLED";

/* Prints the flags of list (space-separated; "=" marks one that takes a value) that take a value
 * (values = 1) or every flag without its mark (values = -1), separated by sep. Returns how
 * many. */
static int print_flags(FILE *out, const char *list, int values, const char *sep, int first)
{
    int n = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, " ");
        int takes = len > 0 && p[len - 1] == '=';
        if (len > 0 && (values < 0 || takes)) {
            fprintf(out, "%s%.*s", first && n == 0 ? "" : sep, (int)(len - (size_t)takes), p);
            n++;
        }
        p += len;
        while (*p == ' ')
            p++;
    }
    return n;
}

/* Prints the names of the verbs whose argument is kind, joined by sep. */
static int print_verbs_of(FILE *out, const obctl_completion_verb *v, size_t n, obctl_arg_kind kind,
                          const char *sep)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].arg == kind) fprintf(out, "%s%s", k++ ? sep : "", v[i].name);
    return k;
}

/* 1 when some verb's argument is kind. */
static int has_kind(const obctl_completion_verb *v, size_t n, obctl_arg_kind kind)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].arg == kind) return 1;
    return 0;
}

/* Prints the verb names, separated by sep. */
static void print_names(FILE *out, const obctl_completion_verb *v, size_t n, const char *sep)
{
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s%s", i ? sep : "", v[i].name);
}

/* The value-taking flags of every verb and the global ones, as one case pattern. */
static void print_value_pattern(FILE *out, const obctl_completion_verb *v, size_t n,
                                const char *global)
{
    int k = print_flags(out, global, 1, "|", 1);
    for (size_t i = 0; i < n; i++)
        k += print_flags(out, v[i].flags, 1, "|", k == 0);
}

static void write_bash(FILE *out, const obctl_completion_verb *v, size_t n, const char *global)
{
    fputs("# bash completion for onebitctl. Load it with\n"
          "#   source <(onebitctl completion bash)\n"
          "# or save it as ~/.local/share/bash-completion/completions/onebitctl\n"
          "_onebitctl() {\n"
          "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
          "    local verb=\"\" w i\n"
          "    local -a conn=()\n"
          "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
          "        w=${COMP_WORDS[i]}\n"
          "        case $w in\n"
          "        --server|--rest|--token|--token-file)\n"
          "            conn+=(\"$w\" \"${COMP_WORDS[i+1]}\"); i=$((i + 1)) ;;\n"
          "        --server=*|--rest=*|--token=*|--token-file=*) conn+=(\"$w\") ;;\n"
          "        -f) [ \"$verb\" = logs ] || i=$((i + 1)) ;;\n",
          out);
    fputs("        ", out);
    print_value_pattern(out, v, n, global);
    fputs(") i=$((i + 1)) ;;\n"
          "        -*) ;;\n"
          "        *) [ -z \"$verb\" ] && verb=$w ;;\n"
          "        esac\n"
          "    done\n"
          "    case $prev in\n"
          "    -o|--output) COMPREPLY=($(compgen -W \"table json\" -- \"$cur\")); return ;;\n",
          out);
    fprintf(out, "    --state) COMPREPLY=($(compgen -W \"%s\" -- \"$cur\")); return ;;\n", states);
    fputs("    --token-file) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
          "    -f|--file)\n"
          "        if [ \"$verb\" != logs ]; then COMPREPLY=($(compgen -f -- \"$cur\")); return; "
          "fi ;;\n"
          "    ",
          out);
    print_value_pattern(out, v, n, global);
    fputs(") return ;; # a value of the user's own\n"
          "    esac\n"
          "    local global=\"",
          out);
    print_flags(out, global, -1, " ", 1);
    fputs("\"\n    if [ -z \"$verb\" ]; then\n"
          "        if [[ $cur == -* ]]; then\n"
          "            COMPREPLY=($(compgen -W \"$global\" -- \"$cur\"))\n"
          "        else\n"
          "            COMPREPLY=($(compgen -W \"",
          out);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s%s", i ? " " : "", v[i].name);
    fputs("\" -- \"$cur\"))\n"
          "        fi\n"
          "        return\n"
          "    fi\n"
          "    local flags=\"\"\n"
          "    case $verb in\n",
          out);
    for (size_t i = 0; i < n; i++) {
        if (!v[i].flags[0]) continue;
        fprintf(out, "    %s) flags=\"", v[i].name);
        print_flags(out, v[i].flags, -1, " ", 1);
        fputs("\" ;;\n", out);
    }
    fputs("    esac\n"
          "    if [[ $cur == -* ]]; then\n"
          "        COMPREPLY=($(compgen -W \"$flags $global\" -- \"$cur\"))\n"
          "        return\n"
          "    fi\n"
          "    case $verb in\n    ",
          out);
    print_verbs_of(out, v, n, OBCTL_ARG_JOB, "|");
    fputs(")\n"
          "        COMPREPLY=($(compgen -W \"$(\"${COMP_WORDS[0]}\" \"${conn[@]}\" list -q "
          "2>/dev/null)\" -- \"$cur\")) ;;\n    ",
          out);
    if (print_verbs_of(out, v, n, OBCTL_ARG_DIR, "|"))
        fputs(") COMPREPLY=($(compgen -d -- \"$cur\")) ;;\n    ", out);
    if (print_verbs_of(out, v, n, OBCTL_ARG_SHELL, "|"))
        fputs(") COMPREPLY=($(compgen -W \"bash zsh\" -- \"$cur\")) ;;\n", out);
    if (has_kind(v, n, OBCTL_ARG_VERB)) {
        fputs("    ", out);
        print_verbs_of(out, v, n, OBCTL_ARG_VERB, "|");
        fputs(") COMPREPLY=($(compgen -W \"", out);
        print_names(out, v, n, " ");
        fputs("\" -- \"$cur\")) ;;\n", out);
    }
    fputs("    esac\n"
          "}\n"
          "complete -F _onebitctl onebitctl\n",
          out);
}

/* zsh: words and CURRENT (1-based), compadd and _describe; works sourced (compdef at the end)
 * and as a #compdef file in $fpath (then the function is called). */
static void write_zsh(FILE *out, const obctl_completion_verb *v, size_t n, const char *global)
{
    fputs("#compdef onebitctl\n"
          "# zsh completion for onebitctl. Load it with\n"
          "#   source <(onebitctl completion zsh)     (after compinit)\n"
          "# or save it as _onebitctl in a directory of $fpath\n"
          "_onebitctl() {\n"
          "    local verb=\"\" w i\n"
          "    local -a conn verbs\n"
          "    for ((i = 2; i < CURRENT; i++)); do\n"
          "        w=$words[i]\n"
          "        case $w in\n"
          "        --server|--rest|--token|--token-file) conn+=($w $words[i+1]); ((i++)) ;;\n"
          "        --server=*|--rest=*|--token=*|--token-file=*) conn+=($w) ;;\n"
          "        -f) [[ $verb == logs ]] || ((i++)) ;;\n"
          "        ",
          out);
    print_value_pattern(out, v, n, global);
    fputs(") ((i++)) ;;\n"
          "        -*) ;;\n"
          "        *) [[ -z $verb ]] && verb=$w ;;\n"
          "        esac\n"
          "    done\n"
          "    case $words[CURRENT-1] in\n"
          "    -o|--output) compadd -- table json; return ;;\n",
          out);
    fprintf(out, "    --state) compadd -- %s; return ;;\n", states);
    fputs("    --token-file) _files; return ;;\n"
          "    -f|--file) if [[ $verb != logs ]]; then _files; return; fi ;;\n"
          "    ",
          out);
    print_value_pattern(out, v, n, global);
    fputs(") return ;;\n"
          "    esac\n"
          "    local -a global\n"
          "    global=(",
          out);
    print_flags(out, global, -1, " ", 1);
    fputs(")\n"
          "    if [[ -z $verb ]]; then\n"
          "        if [[ $PREFIX == -* ]]; then compadd -- $global; return; fi\n"
          "        verbs=(",
          out);
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "%s'%s:", i ? " " : "", v[i].name);
        for (const char *p = v[i].summary; *p; p++) {
            if (*p == '\'')
                fputs("'\\''", out);
            else if (*p == ':')
                fputs("\\:", out);
            else
                fputc(*p, out);
        }
        fputc('\'', out);
    }
    fputs(")\n"
          "        _describe -t verbs 'onebitctl verb' verbs\n"
          "        return\n"
          "    fi\n"
          "    local -a flags\n"
          "    case $verb in\n",
          out);
    for (size_t i = 0; i < n; i++) {
        if (!v[i].flags[0]) continue;
        fprintf(out, "    %s) flags=(", v[i].name);
        print_flags(out, v[i].flags, -1, " ", 1);
        fputs(") ;;\n", out);
    }
    fputs("    esac\n"
          "    if [[ $PREFIX == -* ]]; then compadd -- $flags $global; return; fi\n"
          "    case $verb in\n    ",
          out);
    print_verbs_of(out, v, n, OBCTL_ARG_JOB, "|");
    fputs(") compadd -- ${(f)\"$($words[1] $conn list -q 2>/dev/null)\"} ;;\n    ", out);
    if (print_verbs_of(out, v, n, OBCTL_ARG_DIR, "|")) fputs(") _files -/ ;;\n    ", out);
    if (print_verbs_of(out, v, n, OBCTL_ARG_SHELL, "|")) fputs(") compadd -- bash zsh ;;\n", out);
    if (has_kind(v, n, OBCTL_ARG_VERB)) {
        fputs("    ", out);
        print_verbs_of(out, v, n, OBCTL_ARG_VERB, "|");
        fputs(") compadd -- ", out);
        print_names(out, v, n, " ");
        fputs(" ;;\n", out);
    }
    fputs("    esac\n"
          "}\n"
          "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n"
          "    _onebitctl \"$@\"\n"
          "else\n"
          "    compdef _onebitctl onebitctl\n"
          "fi\n",
          out);
}

int obctl_completion_write(FILE *out, const char *shell, const obctl_completion_verb *verbs,
                           size_t n, const char *global_flags)
{
    if (!strcmp(shell, "bash"))
        write_bash(out, verbs, n, global_flags);
    else if (!strcmp(shell, "zsh"))
        write_zsh(out, verbs, n, global_flags);
    else
        return -1;
    return 0;
}
