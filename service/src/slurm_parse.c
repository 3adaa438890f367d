/* Reading Slurm's commands' output (slurm.h): strict, bounded, no I/O. */
#include "onebit/slurm.h"
#include "onebit/base.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    ob_slurm_state state;
} state_names[] = {
    {"PENDING", OB_SLURM_PENDING},
    {"CONFIGURING", OB_SLURM_CONFIGURING},
    {"RUNNING", OB_SLURM_RUNNING},
    {"COMPLETING", OB_SLURM_COMPLETING},
    {"SUSPENDED", OB_SLURM_SUSPENDED},
    {"REQUEUED", OB_SLURM_REQUEUED},
    {"REQUEUE_HOLD", OB_SLURM_REQUEUED},
    {"REQUEUE_FED", OB_SLURM_REQUEUED},
    {"RESIZING", OB_SLURM_RESIZING},
    {"SIGNALING", OB_SLURM_SIGNALING},
    {"STAGE_OUT", OB_SLURM_STAGE_OUT},
    {"STOPPED", OB_SLURM_STOPPED},
    {"SPECIAL_EXIT", OB_SLURM_SPECIAL_EXIT},
    {"RESV_DEL_HOLD", OB_SLURM_RESV_DEL_HOLD},
    {"COMPLETED", OB_SLURM_COMPLETED},
    {"FAILED", OB_SLURM_FAILED},
    {"CANCELLED", OB_SLURM_CANCELLED},
    {"TIMEOUT", OB_SLURM_TIMEOUT},
    {"NODE_FAIL", OB_SLURM_NODE_FAIL},
    {"PREEMPTED", OB_SLURM_PREEMPTED},
    {"BOOT_FAIL", OB_SLURM_BOOT_FAIL},
    {"DEADLINE", OB_SLURM_DEADLINE},
    {"OUT_OF_MEMORY", OB_SLURM_OUT_OF_MEMORY},
    {"REVOKED", OB_SLURM_REVOKED},
};
#define N_STATES (sizeof state_names / sizeof state_names[0])

const char *ob_slurm_state_name(ob_slurm_state s)
{
    for (size_t i = 0; i < N_STATES; i++)
        if (state_names[i].state == s) return state_names[i].name;
    return "UNKNOWN";
}

ob_slurm_state ob_slurm_state_parse(const char *text, size_t len)
{
    /* sacct writes "CANCELLED by 1000": the state is the first word. */
    size_t word = 0;
    while (word < len && text[word] != ' ')
        word++;
    if (word < len && !(len > 13 && !memcmp(text, "CANCELLED by ", 13))) return OB_SLURM_UNKNOWN;
    for (size_t i = 0; i < N_STATES; i++) {
        size_t n = strlen(state_names[i].name);
        if (n == word && !memcmp(text, state_names[i].name, n)) return state_names[i].state;
    }
    return OB_SLURM_UNKNOWN;
}

int ob_slurm_state_final(ob_slurm_state s)
{
    return s >= OB_SLURM_COMPLETED;
}

/* 1 when text[0..len) is 1 to 20 decimal digits. */
static int all_digits(const char *text, size_t len)
{
    if (len == 0 || len >= 21) return 0;
    for (size_t i = 0; i < len; i++)
        if (text[i] < '0' || text[i] > '9') return 0;
    return 1;
}

/* A decimal number of at most max_digits digits up to max; -1 otherwise. */
static long small_number(const char *text, size_t len, size_t max_digits, long max)
{
    if (len == 0 || len > max_digits) return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9') return -1;
        v = v * 10 + (text[i] - '0');
    }
    return v <= max ? v : -1;
}

/* Copies text[0..len) into out[cap] with anything but printable ASCII replaced by '?', cut at
 * cap - 1 bytes: what Slurm says ends up in messages and logs. */
static void copy_printable(char *out, size_t cap, const char *text, size_t len)
{
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < cap; i++)
        out[k++] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
    out[k] = '\0';
}

ob_status ob_slurm_parse_sbatch(const char *out, char id[OB_SLURM_ID_LEN], ob_err *err)
{
    id[0] = '\0';
    if (!out) return OB_ERR(err, OB_ERR_INVALID_ARG, "sbatch printed nothing");
    size_t len = strlen(out);
    while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == '\r'))
        len--;
    size_t digits = strspn(out, "0123456789");
    /* "42" or "42;cluster" on one line, the cluster's name without control characters. */
    int ok = digits > 0 && digits <= 20 && (digits == len || out[digits] == ';');
    for (size_t i = digits; ok && i < len; i++)
        ok = out[i] > 0x20 && out[i] < 0x7f;
    if (!ok) {
        char shown[80];
        copy_printable(shown, sizeof shown, out, len);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "sbatch --parsable printed '%s', not a job id",
                      shown);
    }
    memcpy(id, out, digits);
    id[digits] = '\0';
    return OB_OK;
}

/* Splits line[0..len) at its first `fields - 1` '|' into starts and lengths; the last field is
 * the rest of the line. 0 when there are fewer. */
static int split(const char *line, size_t len, size_t fields, const char **start, size_t *flen)
{
    size_t f = 0, from = 0;
    for (size_t i = 0; i < len && f + 1 < fields; i++) {
        if (line[i] != '|') continue;
        start[f] = line + from;
        flen[f++] = i - from;
        from = i + 1;
    }
    if (f + 1 != fields) return 0;
    start[f] = line + from;
    flen[f] = len - from;
    return 1;
}

/* One squeue line: ID|STATE|REASON|WAITSTATUS|NAME|STDOUT. */
static int squeue_line(const char *line, size_t len, ob_slurm_job *j)
{
    const char *s[6];
    size_t l[6];
    memset(j, 0, sizeof *j);
    if (!split(line, len, 6, s, l)) return 0;
    if (!all_digits(s[0], l[0])) return 0;
    j->state = ob_slurm_state_parse(s[1], l[1]);
    if (j->state == OB_SLURM_UNKNOWN) return 0;
    /* squeue gives the job's wait status as one number: exit status << 8 | signal. */
    long st = small_number(s[3], l[3], 5, 65535);
    if (st < 0 || l[2] >= sizeof j->reason || memchr(s[4], '|', l[4])) return 0;
    memcpy(j->id, s[0], l[0]);
    copy_printable(j->reason, sizeof j->reason, s[2], l[2]);
    j->have_exit = 1;
    j->exit_code = (int)((st >> 8) & 0xff);
    j->term_signal = (int)(st & 0x7f);
    if (l[4] >= sizeof j->name || l[5] >= sizeof j->std_out) return 0;
    copy_printable(j->name, sizeof j->name, s[4], l[4]);
    copy_printable(j->std_out, sizeof j->std_out, s[5], l[5]);
    return 1;
}

ob_status ob_slurm_parse_squeue(const char *out, ob_slurm_job *jobs, size_t cap, size_t *n,
                                size_t *skipped, ob_err *err)
{
    if (!out || !n || (cap && !jobs))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_slurm_parse_squeue: NULL argument");
    *n = 0;
    if (skipped) *skipped = 0;
    for (const char *p = out; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > 0 && p[len - 1] == '\r') len--;
        if (len > 0) {
            ob_slurm_job j;
            if (squeue_line(p, len, &j) && *n < cap)
                jobs[(*n)++] = j;
            else if (skipped)
                (*skipped)++;
        }
        p = nl ? nl + 1 : p + len;
        if (!nl) break;
    }
    return OB_OK;
}

ob_status ob_slurm_parse_sacct(const char *out, const char *id, ob_slurm_job *job, int *found,
                               ob_err *err)
{
    if (!out || !id || !job || !found)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ob_slurm_parse_sacct: NULL argument");
    memset(job, 0, sizeof *job);
    *found = 0;
    size_t idlen = strlen(id);
    if (!all_digits(id, idlen)) return OB_ERR(err, OB_ERR_INVALID_ARG, "not a Slurm job id");
    for (const char *p = out; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > 0 && p[len - 1] == '\r') len--;
        const char *s[3];
        size_t l[3];
        if (split(p, len, 3, s, l) && l[0] == idlen && !memcmp(s[0], id, idlen)) {
            ob_slurm_state st = ob_slurm_state_parse(s[1], l[1]);
            /* ExitCode "E:S": the exit status and the signal. */
            const char *colon = memchr(s[2], ':', l[2]);
            long code = colon ? small_number(s[2], (size_t)(colon - s[2]), 3, 255) : -1;
            long sig =
                colon ? small_number(colon + 1, l[2] - (size_t)(colon - s[2]) - 1, 3, 127) : -1;
            if (st != OB_SLURM_UNKNOWN && code >= 0 && sig >= 0) {
                memcpy(job->id, id, idlen);
                job->state = st;
                job->have_exit = 1;
                job->exit_code = (int)code;
                job->term_signal = (int)sig;
                *found = 1;
                return OB_OK;
            }
        }
        if (!nl) break;
        p = nl + 1;
    }
    return OB_OK;
}

/* What each state means for an attempt: what to tell people, and whether a restart can help. */
static const struct {
    ob_slurm_state state;
    int permanent;
    const char *meaning;
} endings[] = {
    {OB_SLURM_TIMEOUT, 0, "it reached its time limit (sbatch --time)"},
    {OB_SLURM_NODE_FAIL, 0, "a node of its allocation failed"},
    {OB_SLURM_PREEMPTED, 0, "it was preempted"},
    {OB_SLURM_BOOT_FAIL, 0, "a node of its allocation failed to boot"},
    {OB_SLURM_OUT_OF_MEMORY, 1,
     "it ran out of its memory allocation (raise it with --slurm-arg=--mem=...)"},
    {OB_SLURM_DEADLINE, 1, "it passed its deadline"},
    {OB_SLURM_REVOKED, 1, "it was revoked (it runs on another cluster of the federation)"},
    {OB_SLURM_CANCELLED, 1, "it was cancelled outside onebitd (scancel, or an administrator)"},
};

void ob_slurm_exit(const ob_slurm_job *job, ob_launch_exit *ex)
{
    memset(ex, 0, sizeof *ex);
    ex->exit_code = -1;
    int has_reason = job->reason[0] && strcmp(job->reason, "None") != 0;
    if (!ob_slurm_state_final(job->state)) {
        if (job->state != OB_SLURM_RUNNING || has_reason)
            snprintf(ex->reason, sizeof ex->reason, "Slurm job %s %s%s%s%s", job->id,
                     ob_slurm_state_name(job->state), has_reason ? " (" : "",
                     has_reason ? job->reason : "", has_reason ? ")" : "");
        return;
    }
    ex->done = 1;
    /* An exit status counts only for a job that ended by itself: a NODE_FAIL or a TIMEOUT may
     * record 0:0, which must not read as success. */
    if (job->state == OB_SLURM_COMPLETED || job->state == OB_SLURM_FAILED) {
        if (!job->have_exit)
            ex->exit_code = job->state == OB_SLURM_COMPLETED ? 0 : -1;
        else if (job->term_signal)
            ex->term_signal = job->term_signal;
        else if (job->exit_code != 0 || job->state == OB_SLURM_COMPLETED)
            ex->exit_code = job->exit_code;
    } else if (job->have_exit && job->term_signal) {
        ex->term_signal = job->term_signal;
    }
    if (job->state == OB_SLURM_COMPLETED) return;
    if (job->state == OB_SLURM_FAILED) {
        /* The exit status and the workers' own last words say more than "NonZeroExitCode". */
        if (has_reason && strcmp(job->reason, "NonZeroExitCode") != 0)
            snprintf(ex->reason, sizeof ex->reason, "Slurm job %s FAILED (%s)", job->id,
                     job->reason);
        return;
    }
    for (size_t i = 0; i < sizeof endings / sizeof endings[0]; i++) {
        if (endings[i].state != job->state) continue;
        ex->permanent = endings[i].permanent;
        snprintf(ex->reason, sizeof ex->reason, "Slurm job %s %s: %s", job->id,
                 ob_slurm_state_name(job->state), endings[i].meaning);
        return;
    }
    snprintf(ex->reason, sizeof ex->reason, "Slurm job %s %s", job->id,
             ob_slurm_state_name(job->state));
}
