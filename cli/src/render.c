/* Rendering of jobs, checkpoints and events for onebitctl (see render.h). */
#include "render.h"
#include "onebit/base.h"
#include "onebit/job_codec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void obctl_fmt_bytes(char *out, size_t cap, double b)
{
    const char *unit[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (b >= 1000.0 && u < 4) {
        b /= 1000.0;
        u++;
    }
    snprintf(out, cap, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

void obctl_fmt_age(char *out, size_t cap, int64_t ms, int64_t now_ms)
{
    if (ms <= 0) {
        snprintf(out, cap, "-");
        return;
    }
    int64_t s = (now_ms - ms) / 1000;
    if (s < 0) s = 0;
    if (s < 60)
        snprintf(out, cap, "%llds", (long long)s);
    else if (s < 3600)
        snprintf(out, cap, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
    else if (s < 86400)
        snprintf(out, cap, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
    else
        snprintf(out, cap, "%lldd%02lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
}

static void fmt_time(char *out, size_t cap, int64_t ms)
{
    if (ms <= 0) {
        snprintf(out, cap, "-");
        return;
    }
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/* "24.1 MB sent per rank instead of 312.5 MB (12.96x less)" */
static void fmt_saved(char *out, size_t cap, const ob_progress *p)
{
    char a[32], b[32];
    obctl_fmt_bytes(a, sizeof a, (double)p->bytes_sent);
    obctl_fmt_bytes(b, sizeof b, (double)p->bytes_uncompressed);
    double ratio = p->bytes_sent > 0 ? (double)p->bytes_uncompressed / (double)p->bytes_sent : 0;
    if (ratio >= 1.005)
        snprintf(out, cap, "%s sent per rank, %s with an fp32 allreduce (%.2fx less)", a, b, ratio);
    else
        snprintf(out, cap, "%s sent per rank (as much as an fp32 allreduce)", a);
}

static int percent(const ob_progress *p)
{
    return p->total_steps > 0 ? (int)(100 * p->step / p->total_steps) : 0;
}

void obctl_print_job(FILE *f, const ob_job *j)
{
    const ob_progress *p = &j->progress;
    char buf[256], t[64], age[32];
    int64_t now = ob_wall_ms();
    fprintf(f, "Job:         %s%s%s%s\n", j->id, j->name[0] ? " (" : "", j->name,
            j->name[0] ? ")" : "");
    fprintf(f, "State:       %s", ob_job_state_name(j->state));
    if (j->n_attempts)
        fprintf(f, "  (attempt %zu, %d restart%s of %d allowed)", j->n_attempts, j->restarts,
                j->restarts == 1 ? "" : "s", j->max_restarts);
    fprintf(f, "\n");
    fprintf(f, "Ranks:       %d\n", j->world_size);
    if (j->labels[0]) fprintf(f, "Labels:      %s\n", j->labels);
    if (j->request_id[0]) fprintf(f, "Request id:  %s\n", j->request_id);
    if (j->deadline_ms) {
        char limit[32];
        ob_duration_format(j->deadline_ms, limit, sizeof limit);
        if (j->started_ms) {
            char at[64];
            fmt_time(at, sizeof at, j->started_ms + j->deadline_ms);
            fprintf(f, "Deadline:    %s after the first start (%s)\n", limit, at);
        } else {
            fprintf(f, "Deadline:    %s after the first start\n", limit);
        }
    }
    if (p->total_steps > 0) {
        fprintf(f, "Progress:    %lld/%lld steps (%d%%)", (long long)p->step,
                (long long)p->total_steps, percent(p));
        if (p->phase[0]) fprintf(f, ", %s phase", p->phase);
        if (p->freeze_step > 0 && p->freeze_step >= p->total_steps)
            fprintf(f, " (variance frozen at the last step: no step compressed)");
        else if (p->freeze_step > 0)
            fprintf(f, " (variance frozen at step %lld)", (long long)p->freeze_step);
        fprintf(f, "\n");
        if (p->step > 0)
            fprintf(f, "Loss:        %.5g   lr %.3g   %.0f samples/s\n", p->loss, p->lr,
                    p->samples_per_s);
        if (p->eval_step > 0)
            fprintf(f, "Eval:        loss %.5g, accuracy %.4f (at step %lld)\n", p->eval_loss,
                    p->eval_accuracy, (long long)p->eval_step);
        if (p->step > 0 || p->bytes_sent > 0) {
            fmt_saved(buf, sizeof buf, p);
            fprintf(f, "Traffic:     %s\n", buf);
        }
        if (p->warm_start[0]) fprintf(f, "Warm start:  %s\n", p->warm_start);
        if (!strcmp(p->phase, "compression"))
            fprintf(f,
                    "Compression: error/momentum norm worker %.3g, server %.3g; momentum exactly 0 "
                    "at %.2f%% of coordinates\n",
                    p->worker_error_ratio, p->server_error_ratio,
                    100.0 * p->zero_momentum_fraction);
        if (p->rewarms > 0)
            fprintf(f,
                    "Rewarms:     %lld (a loss that was not finite after the freeze, rolled back "
                    "and re-warmed)\n",
                    (long long)p->rewarms);
    }
    if (j->ckpt_step > 0)
        fprintf(f, "Checkpoint:  step %lld  %s\n", (long long)j->ckpt_step, j->ckpt_path);
    for (size_t i = 0; i < j->n_attempts; i++) {
        const ob_attempt *a = &j->attempts[i];
        fprintf(f, "%s #%d from step %lld%s%s: ", i ? "            " : "Attempts:   ", a->number,
                (long long)a->start_step, a->ext_id[0] ? ", id " : "", a->ext_id);
        if (a->ended_ms > 0)
            fprintf(f, "exit %d%s%s\n", a->exit_code, a->exit_reason[0] ? ", " : "",
                    a->exit_reason);
        else
            fprintf(f, "running\n");
    }
    fmt_time(t, sizeof t, j->created_ms);
    obctl_fmt_age(age, sizeof age, j->created_ms, now);
    fprintf(f, "Created:     %s (%s ago)\n", t, age);
    if (j->finished_ms > 0) {
        fmt_time(t, sizeof t, j->finished_ms);
        fprintf(f, "Finished:    %s\n", t);
    }
    if (j->message[0]) fprintf(f, "Message:     %s\n", j->message);
}

void obctl_print_jobs(FILE *f, const ob_job *jobs, size_t n)
{
    int64_t now = ob_wall_ms();
    fprintf(f, "%-14s %-24s %-11s %-15s %-12s %-9s %-8s %s\n", "ID", "NAME", "STATE", "STEP",
            "PHASE", "LOSS", "RESTARTS", "AGE");
    for (size_t i = 0; i < n; i++) {
        const ob_job *j = &jobs[i];
        char step[40], loss[24], age[32];
        snprintf(step, sizeof step, "%lld/%lld", (long long)j->progress.step,
                 (long long)j->progress.total_steps);
        if (j->progress.step > 0)
            snprintf(loss, sizeof loss, "%.4f", j->progress.loss);
        else
            snprintf(loss, sizeof loss, "-");
        obctl_fmt_age(age, sizeof age, j->created_ms, now);
        fprintf(f, "%-14s %-24.24s %-11s %-15s %-12s %-9s %-8d %s\n", j->id,
                j->name[0] ? j->name : "-", ob_job_state_name(j->state), step,
                j->progress.phase[0] ? j->progress.phase : "-", loss, j->restarts, age);
    }
}

void obctl_print_checkpoints(FILE *f, const ob_checkpoint_info *c, size_t n)
{
    int64_t now = ob_wall_ms();
    fprintf(f, "%-10s %-12s %-12s %-6s %-10s %s\n", "STEP", "PHASE", "FROZEN AT", "RANKS", "AGE",
            "PATH");
    for (size_t i = 0; i < n; i++) {
        char age[32], frozen[24];
        obctl_fmt_age(age, sizeof age, c[i].time_ms, now);
        snprintf(frozen, sizeof frozen, "%lld", (long long)c[i].freeze_step);
        fprintf(f, "%-10lld %-12s %-12s %-6d %-10s %s", (long long)c[i].step,
                c[i].phase[0] ? c[i].phase : "-", c[i].freeze_step > 0 ? frozen : "-",
                c[i].world_size, age, c[i].path);
        if (c[i].problem[0]) fprintf(f, "  (%s)", c[i].problem);
        fprintf(f, "\n");
    }
}

void obctl_print_summary(FILE *f, const ob_job *j)
{
    const ob_progress *p = &j->progress;
    char saved[256];
    if (p->step > 0)
        fprintf(f, "%s %s after %lld/%lld steps", j->id, ob_job_state_name(j->state),
                (long long)p->step, (long long)p->total_steps);
    else
        fprintf(f, "%s %s before its first step", j->id, ob_job_state_name(j->state));
    if (p->step > 0) fprintf(f, "; final train loss %.5g", p->loss);
    if (p->eval_step > 0)
        fprintf(f, "; eval loss %.5g, accuracy %.4f", p->eval_loss, p->eval_accuracy);
    if (p->freeze_step > 0 && p->freeze_step >= p->total_steps)
        fprintf(f, "; variance frozen at the last step (%lld): no step compressed",
                (long long)p->freeze_step);
    else if (p->freeze_step > 0)
        fprintf(f, "; variance frozen at step %lld", (long long)p->freeze_step);
    if (j->restarts) fprintf(f, "; %d restart%s", j->restarts, j->restarts == 1 ? "" : "s");
    fprintf(f, "\n");
    if (p->step > 0 || p->bytes_sent > 0) {
        fmt_saved(saved, sizeof saved, p);
        fprintf(f, "communication: %s\n", saved);
    }
    if (j->message[0] && j->state != OB_JOB_SUCCEEDED) fprintf(f, "reason: %s\n", j->message);
}

static void dump(FILE *f, json_t *o, size_t flags)
{
    char *s = o ? json_dumps(o, flags | JSON_PRESERVE_ORDER) : NULL;
    if (s) fprintf(f, "%s\n", s);
    free(s);
    json_decref(o);
}

void obctl_print_job_json(FILE *f, const ob_job *j)
{
    dump(f, ob_job_to_json(j), JSON_INDENT(2));
}

void obctl_print_jobs_json(FILE *f, const ob_job *jobs, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, ob_job_to_json(&jobs[i]));
    json_t *o = json_object();
    json_object_set_new(o, "jobs", arr);
    dump(f, o, JSON_INDENT(2));
}

void obctl_print_checkpoints_json(FILE *f, const ob_checkpoint_info *c, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, ob_checkpoint_info_to_json(&c[i]));
    json_t *o = json_object();
    json_object_set_new(o, "checkpoints", arr);
    dump(f, o, JSON_INDENT(2));
}

void obctl_print_event_json(FILE *f, const ob_job_event *e)
{
    dump(f, ob_job_event_to_json(e), JSON_COMPACT);
    fflush(f);
}

void obctl_print_event_line(FILE *f, const ob_job_event *e)
{
    char t[64];
    fmt_time(t, sizeof t, e->time_ms);
    const ob_progress *p = &e->progress;
    fprintf(f, "%s  %-10s ", t, e->kind);
    if (!strcmp(e->kind, "step")) {
        char saved[256];
        fmt_saved(saved, sizeof saved, p);
        fprintf(f, "step %lld/%lld %s loss %.4f %.0f samples/s; %s\n", (long long)p->step,
                (long long)p->total_steps, p->phase, p->loss, p->samples_per_s, saved);
    } else if (!strcmp(e->kind, "state")) {
        const char *name = ob_job_state_name(e->state), *msg = e->message;
        size_t nl = strlen(name);
        if (!strncmp(msg, name, nl) && msg[nl] == ':') msg += nl + 1 + (msg[nl + 1] == ' ');
        if (!strcmp(msg, name)) msg = "";
        fprintf(f, "%s%s%s\n", name, msg[0] ? ": " : "", msg);
    } else {
        fprintf(f, "%s\n", e->message);
    }
    fflush(f);
}

/* "357k" style rate. */
static void fmt_rate(char *out, size_t cap, double r)
{
    if (r >= 1e6)
        snprintf(out, cap, "%.1fM", r / 1e6);
    else if (r >= 1e3)
        snprintf(out, cap, "%.0fk", r / 1e3);
    else
        snprintf(out, cap, "%.0f", r);
}

void obctl_draw_bar(FILE *f, const ob_job_event *e, const char *job_id, int restarts, int width)
{
    const ob_progress *p = &e->progress;
    char line[512], rate[16], bars[32];
    int bar = 20;
    int filled = p->total_steps > 0 ? (int)(bar * p->step / p->total_steps) : 0;
    for (int i = 0; i < bar; i++)
        bars[i] = i < filled ? '#' : '-';
    bars[bar] = '\0';
    fmt_rate(rate, sizeof rate, p->samples_per_s);
    int n =
        snprintf(line, sizeof line, "%s %s [%s] %lld/%lld %d%% %s loss %.4f %s/s", job_id,
                 ob_job_state_name(e->state), bars, (long long)p->step, (long long)p->total_steps,
                 percent(p), p->phase[0] ? p->phase : "-", p->loss, rate);
    if (p->bytes_sent > 0 && p->bytes_uncompressed > p->bytes_sent && n > 0 && n < 400)
        n += snprintf(line + n, sizeof line - (size_t)n, " comm %.2fx less",
                      (double)p->bytes_uncompressed / (double)p->bytes_sent);
    if (restarts && n > 0 && n < 400)
        snprintf(line + n, sizeof line - (size_t)n, " restarts %d", restarts);
    if (width > 10 && (int)strlen(line) > width - 1) line[width - 1] = '\0';
    fprintf(f, "\r%s\033[K", line);
    fflush(f);
}
