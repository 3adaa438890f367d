/* Worker resource limits (onebit/launcher.h): parsing --worker-memory-limit, the limit of one
 * attempt from its job's memory estimate, and what a worker's exit status says. The limits
 * themselves are set between fork and exec (exec.c). */
#include "onebit/launcher.h"
#include "onebit/base.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

ob_status ob_worker_memory_limit_parse(const char *text, int64_t *out, ob_err *err)
{
    if (!strcmp(text, "auto")) {
        *out = OB_WORKER_MEMORY_AUTO;
        return OB_OK;
    }
    uint64_t x = 0;
    size_t i = 0;
    for (; text[i] >= '0' && text[i] <= '9'; i++) {
        uint64_t d = (uint64_t)(text[i] - '0');
        if (x > (UINT64_MAX - d) / 10) goto bad; /* 2^70 and the like */
        x = x * 10 + d;
    }
    int shift = 0;
    switch (text[i]) {
    case 'K':
    case 'k':
        shift = 10;
        break;
    case 'M':
    case 'm':
        shift = 20;
        break;
    case 'G':
    case 'g':
        shift = 30;
        break;
    case 'T':
    case 't':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift) i++;
    if (i == 0 || (shift && i == 1) || text[i] || x > ((uint64_t)INT64_MAX >> shift)) goto bad;
    x <<= shift;
    if (x != 0 && x < (uint64_t)OB_WORKER_MEMORY_MIN)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "--worker-memory-limit: %s is below the smallest limit, %lld MiB (a "
                      "rank's libraries, CUDA's included, and OpenBLAS's buffers map about "
                      "400 MiB, and a rank short of them hangs in OpenBLAS); 0 sets none",
                      text, (long long)(OB_WORKER_MEMORY_MIN >> 20));
    *out = (int64_t)x;
    return OB_OK;
bad:
    return OB_ERR(err, OB_ERR_INVALID_ARG,
                  "--worker-memory-limit: expected auto, 0 or a size in bytes with an optional "
                  "K, M, G or T suffix (e.g. 4G), at most 8E, got '%s'",
                  text);
}

uint64_t ob_worker_memory_limit_for(int64_t setting, uint64_t estimate)
{
    if (setting >= 0) return (uint64_t)setting;
    if (setting != OB_WORKER_MEMORY_AUTO || estimate == 0) return 0;
    const uint64_t max = (uint64_t)INT64_MAX;
    if (estimate > (max - OB_WORKER_MEMORY_MARGIN) / OB_WORKER_MEMORY_FACTOR) return max;
    uint64_t v = estimate * OB_WORKER_MEMORY_FACTOR + OB_WORKER_MEMORY_MARGIN;
    return v < (uint64_t)OB_WORKER_MEMORY_MIN ? (uint64_t)OB_WORKER_MEMORY_MIN : v;
}

void ob_worker_exit_judge(int exit_code, int term_signal, uint64_t memory_limit, ob_exit_verdict *v)
{
    memset(v, 0, sizeof *v);
    if (term_signal) return; /* killed ranks, lost nodes: worth a restart */
    switch (exit_code) {
    case 2:
        v->permanent = 1;
        snprintf(v->why, sizeof v->why, "the job spec or the worker's command line is invalid");
        break;
    case 3:
        v->permanent = 1;
        snprintf(v->why, sizeof v->why,
                 "the training diverged (the loss is not finite); a restart from its checkpoint "
                 "would diverge the same way");
        break;
    case 4:
        v->permanent = 1;
        snprintf(v->why, sizeof v->why, "its data, checkpoint or warm-start source cannot be used");
        break;
    case 6: /* a program job (engine/python: onebit's exception hook) */
        v->permanent = 1;
        snprintf(v->why, sizeof v->why,
                 "the program raised before its first step, or the same exception at the same "
                 "step as the attempt before");
        break;
    case 5:
        if (!memory_limit) {
            snprintf(v->cause, sizeof v->cause, "out of memory: an allocation of a rank failed");
            break;
        }
        v->permanent = 1;
        snprintf(v->cause, sizeof v->cause,
                 "out of memory: the ranks exceeded the worker memory limit of %llu MiB per "
                 "process (--worker-memory-limit)",
                 (unsigned long long)((memory_limit + (1u << 20) - 1) >> 20));
        snprintf(v->why, sizeof v->why,
                 "the same job needs the same memory; raise --worker-memory-limit or make the "
                 "job smaller");
        break;
    default:
        break;
    }
}
