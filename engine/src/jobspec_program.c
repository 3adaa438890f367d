/* The program job's section of a job spec (onebit/jobspec.h): the user's own script, which
 * onebit-worker execs on every rank. Checked as strictly as the built-in kinds: every field, its
 * type and bounds, and the environment's names, so that a spec cannot take over what the
 * launcher sets (MPI's, the loader's, onebit's own variables). */
#include "jobspec_internal.h"

#include <limits.h>
#include <string.h>

static const field program_fields[] = {
    {"entrypoint", ALL}, {"args", ALL}, {"workdir", ALL}, {"env", ALL}, {"interpreter", ALL},
};

/* Fields a program job may have beside program: the rest is the program's own. */
static const char *const program_top[] = {"name", "program", "steps", "seed"};

/* A JSON value as compact text into buf (cap bytes); 0 when it does not fit. */
static int dump_into(const json_t *v, char *buf, size_t cap)
{
    size_t n = json_dumpb(v, buf, cap, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (n == 0 || n >= cap) return 0;
    buf[n] = '\0';
    return 1;
}

static ob_status read_args(const json_t *p, ob_program_spec *prog, ob_err *err)
{
    const json_t *v = json_object_get(p, "args");
    if (!v) {
        memcpy(prog->args_json, "[]", 3);
        return OB_OK;
    }
    if (!json_is_array(v) || json_array_size(v) > OB_PROGRAM_MAX_ARGS)
        return ob__spec_bad_value(err, "program", "args", "a list of at most 256 strings", v);
    size_t i;
    const json_t *a;
    json_array_foreach(v, i, a)
    {
        if (!ob__spec_plain_string(a)) {
            char key[32];
            snprintf(key, sizeof key, "args[%zu]", i);
            return ob__spec_bad_value(err, "program", key, "a string", a);
        }
    }
    if (!dump_into(v, prog->args_json, sizeof prog->args_json))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "program.args: more than %d bytes in all",
                      OB_PROGRAM_ARGS_LEN - 1);
    return OB_OK;
}

/* 1 for a variable the launcher or the loader owns. */
static int reserved(const char *name)
{
    static const char *const prefixes[] = {"ONEBIT_", "OMPI_", "PMIX_", "LD_", "OPAL_"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (!strncmp(name, prefixes[i], strlen(prefixes[i]))) return 1;
    return !strcmp(name, "PATH");
}

static int env_name_ok(const char *k)
{
    if (!k[0] || strlen(k) > 128 ||
        !((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_'))
        return 0;
    for (const char *c = k; *c; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              *c == '_'))
            return 0;
    return 1;
}

static ob_status read_env(const json_t *p, ob_program_spec *prog, ob_err *err)
{
    const json_t *v = json_object_get(p, "env");
    if (!v) {
        memcpy(prog->env_json, "{}", 3);
        return OB_OK;
    }
    if (!json_is_object(v) || json_object_size(v) > OB_PROGRAM_MAX_ENV)
        return ob__spec_bad_value(err, "program", "env",
                                  "a mapping of at most 64 variables to strings", v);
    const char *k;
    const json_t *val;
    json_object_foreach((json_t *)v, k, val)
    {
        if (!env_name_ok(k))
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "program.env: '%.64s': a variable name is [A-Za-z_][A-Za-z0-9_]*", k);
        if (reserved(k))
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "program.env.%.64s: set by the launcher, not by a spec (ONEBIT_*, "
                          "OMPI_*, PMIX_*, OPAL_*, LD_* and PATH)",
                          k);
        if (!ob__spec_plain_string(val)) {
            char key[160];
            snprintf(key, sizeof key, "env.%.128s", k);
            return ob__spec_bad_value(err, "program", key, "a string", val);
        }
    }
    if (!dump_into(v, prog->env_json, sizeof prog->env_json))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "program.env: more than %d bytes in all",
                      OB_PROGRAM_ENV_LEN - 1);
    return OB_OK;
}

ob_status ob__spec_read_program(const json_t *root, ob_jobspec *s, spec_errs *E)
{
    int before = E->n;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v)
    {
        int ok = 0;
        for (size_t i = 0; i < sizeof program_top / sizeof program_top[0]; i++)
            ok |= !strcmp(key, program_top[i]);
        /* An unknown key was noted by the top level's check already. */
        if (!ok && ob__spec_is_top(key))
            ob__spec_note(E, OB_ERR(ONE, OB_ERR_INVALID_ARG,
                                    "%.64s: not with program (a program job's model, data, "
                                    "optimizer and checkpoints are the program's own; it may set "
                                    "name, steps and seed)",
                                    key));
    }
    const json_t *p;
    if (ob__spec_note(E, ob__spec_get_section(root, "program", 1, &p, ONE)))
        return OB_ERR_INVALID_ARG;
    ob__spec_check_fields(p, "program", program_fields, COUNT(program_fields), NULL, 0, 0, E);
    ob_program_spec *prog = &s->program;
    if (!json_object_get(p, "entrypoint"))
        ob__spec_note(E, ob__spec_missing(ONE, "program", "entrypoint", " (the script to run)"));
    memcpy(prog->interpreter, OB_PROGRAM_INTERPRETER, sizeof OB_PROGRAM_INTERPRETER);
    long long seed = (long long)s->seed;
    ob__spec_note(E, ob__spec_get_path(p, "program", "entrypoint", 0, prog->entrypoint,
                                       sizeof prog->entrypoint, ONE));
    ob__spec_note(
        E, ob__spec_get_path(p, "program", "workdir", 0, prog->workdir, sizeof prog->workdir, ONE));
    ob__spec_note(E, ob__spec_get_path(p, "program", "interpreter", 0, prog->interpreter,
                                       sizeof prog->interpreter, ONE));
    ob__spec_note(E, read_args(p, prog, ONE));
    ob__spec_note(E, read_env(p, prog, ONE));
    ob__spec_note(E, ob__spec_get_long(root, "", "steps", 0, LONG_MAX, &s->steps, ONE));
    ob__spec_note(E, ob__spec_get_int(root, "", "seed", 0, LLONG_MAX, &seed, ONE));
    s->seed = (uint64_t)seed;
    if (prog->workdir[0] && prog->workdir[0] != '/')
        ob__spec_note(E, ob__spec_bad_value(ONE, "program", "workdir", "an absolute path",
                                            json_object_get(p, "workdir")));
    return E->n > before ? OB_ERR_INVALID_ARG : OB_OK;
}

json_t *ob__spec_program_tree(const ob_jobspec *s)
{
    const ob_program_spec *prog = &s->program;
    json_t *root = json_object(), *p = json_object();
    json_error_t je;
    char buf[OB_JOBSPEC_PATH_LEN];
    if (!root || !p) goto fail;
    snprintf(buf, sizeof buf, "%.*s", (int)sizeof s->name - 1, s->name);
    json_object_set_new(root, "name", json_string(buf));
    snprintf(buf, sizeof buf, "%.*s", (int)sizeof buf - 1, prog->entrypoint);
    json_object_set_new(p, "entrypoint", json_string(buf));
    json_t *args = json_loads(prog->args_json, 0, &je), *env = json_loads(prog->env_json, 0, &je);
    if (!args || !env) {
        json_decref(args);
        json_decref(env);
        goto fail;
    }
    json_object_set_new(p, "args", args);
    if (prog->workdir[0]) {
        snprintf(buf, sizeof buf, "%.*s", (int)sizeof buf - 1, prog->workdir);
        json_object_set_new(p, "workdir", json_string(buf));
    }
    json_object_set_new(p, "env", env);
    snprintf(buf, sizeof buf, "%.*s", (int)sizeof buf - 1, prog->interpreter);
    json_object_set_new(p, "interpreter", json_string(buf));
    json_object_set_new(root, "program", p);
    json_object_set_new(root, "steps", json_integer(s->steps));
    json_object_set_new(root, "seed",
                        json_integer(s->seed > (uint64_t)LLONG_MAX ? -1 : (long long)s->seed));
    return root;
fail:
    json_decref(p);
    json_decref(root);
    return NULL;
}
