/* The API types on the wire: jobs, events and checkpoints as proto3 JSON (the REST API, the
 * CLI's -o json) and as protobuf-c messages (the gRPC API), both directions.
 *
 * The REST server and the gRPC server encode with the to_ functions; onebitctl decodes what
 * either API answered with the from_ functions into the same ob_job / ob_job_event structs, so
 * everything after the transport is one code path. JSON follows the proto3 mapping: field names
 * in lowerCamelCase, 64-bit integers as strings (numbers are accepted too), enums by name,
 * non-finite doubles as "NaN" / "Infinity" / "-Infinity". One field is not the proto's: a job's
 * labels, a string "key=value,key=value" in protobuf, are a JSON object {"key": "value"}, as a
 * proto3 map would be (a string is still read, from servers before the object). */
#ifndef ONEBIT_JOB_CODEC_H
#define ONEBIT_JOB_CODEC_H

#include "onebit/job.h"
#include "onebit/v1/jobs.pb-c.h"

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- JSON ---------------------------------------------------------------------------------- */

/* New references owned by the caller (json_decref); NULL when memory runs out. */
json_t *ob_progress_to_json(const ob_progress *p);
json_t *ob_job_to_json(const ob_job *j);
json_t *ob_job_event_to_json(const ob_job_event *e);
json_t *ob_checkpoint_info_to_json(const ob_checkpoint_info *c);

/* A job's labels ("k=v,k=v", borrowed) as an object {"k": "v"}; NULL when memory runs out. */
json_t *ob_labels_to_json(const char *labels);

/* Labels from JSON into out in their canonical form (ob_labels_parse): an object of string
 * values, or a string "k=v,k=v"; NULL or absent is none. OB_ERR_INVALID_ARG names the label
 * that is not one. */
ob_status ob_labels_from_json(const json_t *v, char out[OB_LABELS_LEN], ob_err *err);

/* Decoders: *out (caller-owned) is filled on success; OB_ERR_CORRUPT names the field that is
 * missing or of the wrong type. ob_job_from_json allocates spec_json and attempts
 * (ob_job_clear frees them); on failure *out is left cleared. Missing optional fields are 0. */
ob_status ob_job_from_json(const json_t *o, ob_job *out, ob_err *err);
ob_status ob_job_event_from_json(const json_t *o, ob_job_event *out, ob_err *err);
ob_status ob_checkpoint_info_from_json(const json_t *o, ob_checkpoint_info *out, ob_err *err);

/* Base64 (RFC 4648, with padding), as proto3 JSON writes bytes fields. encode: a NUL-terminated
 * string from malloc (NULL when memory runs out). decode: *out from malloc with *out_len bytes;
 * OB_ERR_CORRUPT for text that is not base64. */
char *ob_base64_encode(const void *data, size_t len);
ob_status ob_base64_decode(const char *text, unsigned char **out, size_t *out_len, ob_err *err);

/* ---- protobuf -------------------------------------------------------------------------------- */

/* A job as a message whose strings point into the ob_job: valid while the job is unchanged;
 * release with ob_job_pb_release (not protobuf_c_message_free_unpacked). */
typedef struct ob_job_pb {
    Onebit__V1__Job job;
    Onebit__V1__Progress progress;
    Onebit__V1__Checkpoint ckpt;
    Onebit__V1__Attempt *attempts;
    Onebit__V1__Attempt **attempt_ptrs;
} ob_job_pb;

ob_status ob_job_to_pb(const ob_job *j, ob_job_pb *pb, ob_err *err);
void ob_job_pb_release(ob_job_pb *pb);
void ob_progress_to_pb(const ob_progress *p, Onebit__V1__Progress *o);
/* The message's progress into *p (zeroed first; a NULL message gives zeros). */
void ob_progress_from_pb(const Onebit__V1__Progress *m, ob_progress *p);

/* Decoders from unpacked messages (borrowed). Strings are copied (cut to the struct's sizes). */
ob_status ob_job_from_pb(const Onebit__V1__Job *m, ob_job *out, ob_err *err);
void ob_job_event_from_pb(const Onebit__V1__JobEvent *m, ob_job_event *out);
void ob_checkpoint_info_from_pb(const Onebit__V1__Checkpoint *m, ob_checkpoint_info *out);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_JOB_CODEC_H */
