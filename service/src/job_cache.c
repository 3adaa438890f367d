/* Reads of single jobs served from memory while the store has not changed (service_internal.h).
 * A job's record is read from SQLite under the service's lock; under load (dashboards and
 * clients polling GET /v1/jobs/{id}, WatchJob streams) most reads ask for a job the store has
 * not touched since the last read, and while a job trains the lock is often held by the
 * supervisor's commits. The cache keeps the last few jobs read with the store's generation at
 * that time (ob_store_generation: it changes with every write), and a read whose generation is
 * unchanged is a copy of the cached record: no SQL, and not the service's lock. */
#include "service_internal.h"

#include <stdlib.h>
#include <string.h>

void ob__job_cache_init(ob__job_cache *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
}

void ob__job_cache_free(ob__job_cache *c)
{
    for (int i = 0; i < OB__JOB_CACHE_SLOTS; i++)
        if (c->slot[i].used) ob_job_clear(&c->slot[i].job);
    pthread_mutex_destroy(&c->mu);
}

int ob__job_cache_get(ob__job_cache *c, const char *id, uint64_t gen, ob_job *out)
{
    int hit = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < OB__JOB_CACHE_SLOTS && !hit; i++) {
        struct ob__job_cache_slot *sl = &c->slot[i];
        if (!sl->used || sl->gen != gen || strcmp(sl->job.id, id)) continue;
        if (ob_job_copy(out, &sl->job, NULL) == OB_OK) {
            sl->tick = ++c->tick;
            hit = 1;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

void ob__job_cache_put(ob__job_cache *c, uint64_t gen, const ob_job *j)
{
    ob_job copy;
    if (ob_job_copy(&copy, j, NULL) != OB_OK) return;
    pthread_mutex_lock(&c->mu);
    /* The job's own slot, else a free one, else the least recently used. */
    struct ob__job_cache_slot *to = NULL;
    for (int i = 0; i < OB__JOB_CACHE_SLOTS; i++) {
        struct ob__job_cache_slot *sl = &c->slot[i];
        if (sl->used && !strcmp(sl->job.id, j->id)) {
            to = sl;
            break;
        }
        if (!to || (to->used && (!sl->used || sl->tick < to->tick))) to = sl;
    }
    if (to->used && to->gen > gen && !strcmp(to->job.id, j->id)) {
        ob_job_clear(&copy); /* a newer read is there already */
    } else {
        if (to->used) ob_job_clear(&to->job);
        to->job = copy;
        to->gen = gen;
        to->used = 1;
        to->tick = ++c->tick;
    }
    pthread_mutex_unlock(&c->mu);
}
