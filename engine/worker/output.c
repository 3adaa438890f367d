/* onebit-worker's output (output.h): one progress report per trainer event, printed as a JSON
 * line or as text and sent to onebitd. */
#include "output.h"

#include "onebit/base.h"
#include "onebit/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints the report as a JSON line (in JSON format) and sends it to onebitd (with --report). A
 * report that cannot be sent is not fatal: training goes on and the coordinator reads the log. */
static void emit(const worker_output *o, const ob_report *rep)
{
    if (o->format == FORMAT_JSON) {
        char *line = ob_report_to_json(rep);
        if (line) {
            fputs(line, stdout);
            fputc('\n', stdout);
            fflush(stdout);
            free(line);
        }
    }
    if (!o->reporter) return;
    int cancel = 0;
    ob_err err;
    ob_err_clear(&err);
    if (ob_reporter_send(o->reporter, rep, &cancel, &err) == OB_OK) {
        if (cancel) *o->stop_requested = 1; /* onebitd cancels: stop as on SIGTERM */
    } else if (ob_reporter_failures(o->reporter) == 1) {
        /* Said once: training goes on, and the coordinator reads the printed lines instead. */
        fprintf(stderr,
                "onebit-worker: warning: --report: %s (continuing; progress stays in the log)\n",
                err.msg);
    }
}

static void report_from_event(const ob_train_event *ev, ob_report *r)
{
    memset(r, 0, sizeof *r);
    ob_progress *p = &r->progress;
    p->step = ev->step;
    ob_strlcpy(p->phase, ob_phase_name(ev->phase), sizeof p->phase);
    switch (ev->kind) {
    case OB_EVENT_STEP:
        r->kind = OB_REPORT_STEP;
        p->loss = ev->loss;
        p->lr = ev->lr;
        p->samples_per_s = ev->samples_per_s;
        p->bytes_sent = (int64_t)ev->bytes_sent;
        r->bytes_step = (int64_t)ev->bytes_step;
        p->freeze_ratio = ev->freeze_ratio;
        p->worker_error_ratio = ev->worker_error_ratio;
        p->server_error_ratio = ev->server_error_ratio;
        p->zero_momentum_fraction = ev->zero_momentum_fraction;
        break;
    case OB_EVENT_EVAL:
        r->kind = OB_REPORT_EVAL;
        r->eval_loss = ev->eval_loss;
        r->eval_accuracy = ev->eval_accuracy;
        r->eval_count = (int64_t)ev->eval_count;
        r->is_text = ev->is_text;
        break;
    case OB_EVENT_FREEZE:
        r->kind = OB_REPORT_FREEZE;
        p->freeze_step = ev->step;
        p->freeze_ratio = ev->freeze_ratio;
        break;
    case OB_EVENT_CHECKPOINT:
        r->kind = OB_REPORT_CHECKPOINT;
        r->ckpt_step = ev->step;
        r->ckpt_failed = !ev->ckpt_ok;
        if (ev->ckpt_ok) {
            ob_strlcpy(r->ckpt_path, ev->path, sizeof r->ckpt_path);
            r->ckpt_async = ev->ckpt_async;
            r->ckpt_bytes = (int64_t)ev->ckpt_bytes;
            r->stall_seconds = ev->stall_seconds;
            r->write_seconds = ev->write_seconds;
        } else {
            ob_strlcpy(r->message, ev->message ? ev->message : "failed", sizeof r->message);
        }
        break;
    case OB_EVENT_RESUME:
        r->kind = OB_REPORT_RESUME;
        r->ckpt_step = ev->step;
        ob_strlcpy(r->ckpt_path, ev->path, sizeof r->ckpt_path);
        r->from_world_size = ev->from_world_size;
        break;
    case OB_EVENT_NOTICE:
        r->kind = OB_REPORT_NOTICE;
        ob_strlcpy(r->message, ev->message, sizeof r->message);
        break;
    case OB_EVENT_REWARM:
        r->kind = OB_REPORT_REWARM;
        r->ckpt_step = ev->to_step;
        ob_strlcpy(r->ckpt_path, ev->path, sizeof r->ckpt_path);
        ob_strlcpy(r->message, ev->message, sizeof r->message);
        break;
    case OB_EVENT_WARM_START:
        r->kind = OB_REPORT_WARM_START;
        ob_strlcpy(r->progress.warm_start, ev->warm_start, sizeof r->progress.warm_start);
        ob_strlcpy(r->message, ev->message, sizeof r->message);
        break;
    }
}

static void print_event_text(const ob_train_event *ev)
{
    const char *phase = ob_phase_name(ev->phase);
    switch (ev->kind) {
    case OB_EVENT_STEP:
        printf("step %6ld/%-6ld %-11s loss %8.4f  lr %.3e  %9.0f samples/s  sent %9.3f MB"
               "  (%7.1f KB/step)",
               ev->step, ev->total_steps, phase, ev->loss, ev->lr, ev->samples_per_s,
               (double)ev->bytes_sent / 1e6, (double)ev->bytes_step / 1e3);
        if (ev->phase == OB_PHASE_WARMUP && isfinite(ev->freeze_ratio))
            printf("  v-ratio %.4f", ev->freeze_ratio);
        if (ev->phase == OB_PHASE_COMPRESSION && !isnan(ev->worker_error_ratio))
            printf("  error/|m| worker %.3g server %.3g, m=0 %.2f%%", ev->worker_error_ratio,
                   ev->server_error_ratio, 100.0 * ev->zero_momentum_fraction);
        printf("\n");
        break;
    case OB_EVENT_EVAL:
        if (ev->is_text)
            printf("eval @ %ld: loss %.4f nats/byte = %.4f bits/byte, accuracy %.4f (%zu bytes)\n",
                   ev->step, ev->eval_loss, ev->eval_loss / log(2.0), ev->eval_accuracy,
                   ev->eval_count);
        else
            printf("eval @ %ld: loss %.4f, accuracy %.4f (%zu examples)\n", ev->step, ev->eval_loss,
                   ev->eval_accuracy, ev->eval_count);
        break;
    case OB_EVENT_FREEZE:
        /* No ratio where none decided the freeze (a warm start's refit, a fixed freeze_step). */
        printf("freeze @ %ld: variance frozen, compression phase begins", ev->step);
        if (isfinite(ev->freeze_ratio)) printf(" (v-ratio %.4f)", ev->freeze_ratio);
        printf("\n");
        break;
    case OB_EVENT_CHECKPOINT:
        if (ev->ckpt_ok)
            printf("checkpoint @ %ld: %s (%.1f MB, %s, loop stalled %.3f s, write %.3f s)\n",
                   ev->step, ev->path, (double)ev->ckpt_bytes / 1e6,
                   ev->ckpt_async ? "async" : "sync", ev->stall_seconds, ev->write_seconds);
        else
            printf("checkpoint @ %ld FAILED: %s\n", ev->step, ev->message);
        break;
    case OB_EVENT_RESUME:
        printf("resume: continuing after step %ld from %s (written by %d ranks)\n", ev->step,
               ev->path, ev->from_world_size);
        break;
    case OB_EVENT_NOTICE:
        printf("note: %s\n", ev->message);
        break;
    case OB_EVENT_WARM_START:
        printf("warm start: %s\n", ev->message);
        break;
    case OB_EVENT_REWARM:
        printf("rewarm: %s\n", ev->message);
        break;
    }
    fflush(stdout);
}

void worker_output_event(const ob_train_event *ev, void *user)
{
    const worker_output *o = user;
    if (o->rank != 0) {
        /* Rank 0 reports for everyone, except a checkpoint this rank may have failed. */
        if (ev->kind == OB_EVENT_CHECKPOINT && !ev->ckpt_ok && ev->message)
            fprintf(stderr, "onebit-worker[%d]: checkpoint of step %ld failed: %s\n", o->rank,
                    ev->step, ev->message);
        return;
    }
    if (o->format == FORMAT_TEXT) print_event_text(ev);
    ob_report rep;
    report_from_event(ev, &rep);
    emit(o, &rep);
}

void worker_output_start(const worker_output *o, const ob_jobspec *spec, const char *spec_json,
                         int world, size_t params)
{
    if (o->rank != 0) return;
    if (o->format == FORMAT_TEXT) {
        printf("onebit-worker: job '%s': %s on %s, %s (%s), %d ranks x batch %zu on %s, %ld "
               "steps, %zu parameters\n",
               spec->name, ob_model_kind_name(spec->model.kind), ob_data_kind_name(spec->data.kind),
               ob_optim_kind_name(spec->optim.kind),
               spec->optim.kind == OB_OPTIM_ONEBIT_ADAM ? ob_onebit_mode_name(spec->optim.mode)
               : spec->optim.kind == OB_OPTIM_BINSGDM
                   ? "1-bit from the first step"
                   : ob_gradient_exchange_name(spec->optim.gradient_exchange),
               world, spec->batch_size,
               spec->device == OB_DEVICE_CUDA ? "cuda (nccl)" : "cpu (mpi)", spec->steps, params);
        fflush(stdout);
    }
    ob_report rep;
    memset(&rep, 0, sizeof rep);
    rep.kind = OB_REPORT_START;
    rep.world_size = world;
    rep.num_params = (int64_t)params;
    rep.spec_json = spec_json;
    emit(o, &rep);
}

/* The profile as milliseconds per step: the optimizer's time net of its parts is "update". */
static void output_profile(const worker_output *o, const ob_train_profile *f)
{
    if (f->steps <= 0) return;
    double k = 1e3 / (double)f->steps;
    /* With the compression phase overlapped, compress and exchange ran on the communication
     * thread: the step's part is the wait. */
    int overlapped = f->wait_s > 0.0;
    double update =
        f->optim_s - f->allreduce_s - (overlapped ? f->wait_s : f->compress_s + f->exchange_s);
    double total = f->data_s + f->compute_s + f->optim_s;
    if (o->format == FORMAT_TEXT && !overlapped)
        printf("      time per step (rank 0, %ld steps): %.3f ms = data %.3f + compute %.3f + fp32 "
               "allreduce %.3f + compress %.3f + exchange %.3f + update %.3f\n",
               f->steps, total * k, f->data_s * k, f->compute_s * k, f->allreduce_s * k,
               f->compress_s * k, f->exchange_s * k, update * k);
    else if (o->format == FORMAT_TEXT)
        printf("      time per step (rank 0, %ld steps): %.3f ms = data %.3f + compute %.3f + fp32 "
               "allreduce %.3f + wait for segments %.3f + update %.3f (compress %.3f and "
               "exchange %.3f ran beside the compute)\n",
               f->steps, total * k, f->data_s * k, f->compute_s * k, f->allreduce_s * k,
               f->wait_s * k, update * k, f->compress_s * k, f->exchange_s * k);
    ob_report rep;
    memset(&rep, 0, sizeof rep);
    rep.kind = OB_REPORT_PROFILE;
    rep.profile = (ob_report_profile){
        .steps = f->steps,
        .ms_per_step = total * k,
        .data_ms = f->data_s * k,
        .compute_ms = f->compute_s * k,
        .allreduce_ms = f->allreduce_s * k,
        .compress_ms = f->compress_s * k,
        .exchange_ms = f->exchange_s * k,
        .update_ms = update * k,
        .wait_ms = f->wait_s * k,
    };
    emit(o, &rep);
}

static void print_summary_text(const ob_train_summary *s, int is_text)
{
    if (s->stopped) {
        printf("stopped after step %ld (signal); last checkpoint: step %ld\n", s->steps,
               s->last_checkpoint);
        fflush(stdout);
        return;
    }
    printf("done: %ld steps in %.1f s (%.0f samples/s); final train loss %.5g; eval loss %.5g",
           s->steps, s->wall_seconds, s->samples_per_s, s->final_train_loss, s->eval_loss);
    if (is_text) printf(" (%.4f bits/byte)", s->eval_loss / log(2.0));
    printf(", accuracy %.4f\n", s->eval_accuracy);
    if (s->freeze_step > 0)
        printf("      freeze step %ld; ", s->freeze_step);
    else
        printf("      variance not frozen; ");
    printf("bytes sent by rank 0: %.3f MB (warmup %.3f MB, compression %.3f MB)\n",
           (double)s->bytes_sent / 1e6, (double)s->bytes_warmup / 1e6,
           (double)s->bytes_compression / 1e6);
    fflush(stdout);
}

void worker_output_summary(const worker_output *o, const ob_train_summary *s, int is_text)
{
    if (o->rank != 0) return;
    output_profile(o, &s->profile);
    if (o->format == FORMAT_TEXT) print_summary_text(s, is_text);
    ob_report rep;
    memset(&rep, 0, sizeof rep);
    rep.kind = OB_REPORT_SUMMARY;
    rep.progress.step = s->steps;
    rep.is_text = is_text;
    rep.summary = (ob_report_summary){
        .steps = s->steps,
        .freeze_step = s->freeze_step >= 0 ? s->freeze_step : -1,
        .final_train_loss = s->final_train_loss,
        .eval_loss = s->eval_loss,
        .eval_accuracy = s->eval_accuracy,
        .bytes_sent = (int64_t)s->bytes_sent,
        .bytes_warmup = (int64_t)s->bytes_warmup,
        .bytes_compression = (int64_t)s->bytes_compression,
        .wall_seconds = s->wall_seconds,
        .samples_per_s = s->samples_per_s,
        .num_params = (int64_t)s->num_params,
        .first_step = s->first_step,
        .stopped = s->stopped,
        .last_checkpoint = s->last_checkpoint >= 0 ? s->last_checkpoint : -1,
    };
    emit(o, &rep);
}
