/* The durable job store: jobs, their attempts and their events in one SQLite database in WAL
 * mode, so that a coordinator killed at any point and started again finds every job with its
 * history as of its last committed change.
 *
 * An ob_store is one connection; it is not meant to be shared by threads without a lock (the
 * service holds its lock around every call). Each call is one transaction: it either happens
 * completely or not at all. */
#ifndef ONEBIT_STORE_H
#define ONEBIT_STORE_H

#include "onebit/job.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_store ob_store;

/* Opens (creating if needed) the database at path (borrowed), in WAL mode, and creates the
 * schema when it is missing. *out is owned by the caller (ob_store_close). OB_ERR_IO when SQLite
 * cannot open or set up the file; OB_ERR_CORRUPT when the file is not a onebit store. */
ob_status ob_store_open(ob_store **out, const char *path, ob_err *err);

/* Closes the database. Accepts NULL. */
void ob_store_close(ob_store *s);

/* Inserts a new job. job (borrowed) supplies name, state, spec_json, world_size, max_restarts,
 * message and the times; the store assigns job->seq, and job->id when it is empty
 * ("job-000001" style). A first event (kind "state") records the initial state. */
ob_status ob_store_create_job(ob_store *s, ob_job *job, ob_err *err);

/* Reads the job with this id (borrowed) into *out (caller-owned; ob_job_clear it), attempts
 * included. OB_ERR_NOT_FOUND when there is none. */
ob_status ob_store_get_job(ob_store *s, const char *id, ob_job *out, ob_err *err);

/* Jobs in store order with seq > after_seq, only those in state (OB_JOB_UNSPECIFIED: any)
 * whose labels hold every pair of the canonical selector (NULL or "": any),
 * at most limit of them. *out is a malloc'd array of *n jobs owned by the caller
 * (ob_job_array_free); *more is 1 when further jobs match. */
ob_status ob_store_list_jobs(ob_store *s, ob_job_state state, const char *selector,
                             int64_t after_seq, int limit, ob_job **out, size_t *n, int *more,
                             ob_err *err);

/* Writes every mutable field of job (borrowed: state, counters, times, message, progress,
 * checkpoint) and, when ev is non-NULL, appends ev as the job's next event (ev->seq and
 * ev->job_id are filled in), in one transaction. OB_ERR_NOT_FOUND for an unknown id. */
ob_status ob_store_update_job(ob_store *s, const ob_job *job, ob_job_event *ev, ob_err *err);

/* ob_store_update_job and, in the same transaction, ob_store_put_attempt of a (borrowed; NULL:
 * none): a job moves to RUNNING with its new attempt open, or ends with its attempt closed, in
 * one commit or not at all. */
ob_status ob_store_update_job_attempt(ob_store *s, const ob_job *job, ob_job_event *ev,
                                      const ob_attempt *a, ob_err *err);

/* Inserts or replaces attempt a->number of the job (borrowed). */
/* The id of the job a submit with request_id made into id; OB_ERR_NOT_FOUND when none did. */
ob_status ob_store_find_request(ob_store *s, const char *request_id, char id[OB_JOB_ID_LEN],
                                ob_err *err);

/* Ids of the jobs in a final state that ended (finished_ms) before finished_before_ms, the
 * earliest end first, at most limit of them. *ids is a malloc'd array of *n ids owned by the
 * caller (NULL when none). */
ob_status ob_store_list_ended_before(ob_store *s, int64_t finished_before_ms, int limit,
                                     char (**ids)[OB_JOB_ID_LEN], size_t *n, ob_err *err);

/* Removes the job's row, attempts and events in one transaction. OB_ERR_NOT_FOUND when there is
 * no such job. */
ob_status ob_store_delete_job(ob_store *s, const char *id, ob_err *err);

ob_status ob_store_put_attempt(ob_store *s, const char *job_id, const ob_attempt *a, ob_err *err);

/* Write failures: a full disk is OB_ERR_UNAVAILABLE (SQLITE_FULL; the transaction is rolled
 * back and the store is as it was, so the caller may retry the same write when space comes
 * back); other failures of SQLite are OB_ERR_IO. */

/* Commits a small write (a 'probe' row of the meta table holding now_ms): OB_OK when the store
 * can be written now. */
ob_status ob_store_probe(ob_store *s, int64_t now_ms, ob_err *err);

/* Fault injection for tests: the database may not grow past pages pages (SQLite's
 * max_page_count; writes that need more fail as on a full disk, OB_ERR_UNAVAILABLE); pages <= 0
 * lifts the limit. *pages of ob_store_page_count: the pages it has now. */
ob_status ob_store_set_page_limit(ob_store *s, int64_t pages, ob_err *err);
ob_status ob_store_page_count(ob_store *s, int64_t *pages, ob_err *err);

/* Events of a job with seq > after_seq, oldest first, at most limit. *out is a malloc'd array
 * (free()) of *n events; NULL when there are none. */
ob_status ob_store_list_events(ob_store *s, const char *job_id, int64_t after_seq, int limit,
                               ob_job_event **out, size_t *n, ob_err *err);

/* The number of jobs in each state, indexed by ob_job_state. */
ob_status ob_store_count_states(ob_store *s, int64_t counts[OB_JOB_STATE_COUNT], ob_err *err);

/* The number of jobs in the store. */
ob_status ob_store_count_jobs(ob_store *s, int64_t *n, ob_err *err);

/* A number that changes whenever the store is written (rows inserted, updated or deleted on
 * this connection, committed or not) and never goes back: what was read at one value still
 * holds while it is unchanged. */
uint64_t ob_store_generation(ob_store *s);

/* 1 when ob_store_generation may be called from any thread at any time (SQLite serialises its
 * connections), 0 when only under the lock that guards the store's other calls. */
int ob_store_generation_lockfree(void);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_STORE_H */
