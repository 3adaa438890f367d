/* Fuzz target: what crosses the wire into onebit's processes. The first byte chooses the
 * decoder, the rest is its input:
 *   0  a worker's progress line (the coordinator reads workers' logs), then its round trip
 *   1  a ReportProgressRequest (any client can send one), decoded as the gRPC server does
 *   2  a job as proto3 JSON (what onebitctl decodes from a REST answer)
 *   3  a job event and a checkpoint listing as proto3 JSON
 *   4  a Job message as protobuf (what onebitctl decodes from a gRPC answer) */
#include "onebit/job_codec.h"
#include "onebit/report.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void progress_line(const char *s, size_t n)
{
    ob_report r, back;
    if (!ob_report_parse_line(s, n, &r)) return;
    char *line = ob_report_to_json(&r);
    if (!line) abort(); /* every parsed kind can be written */
    if (!ob_report_parse_line(line, strlen(line), &back) || back.kind != r.kind) abort();
    free(line);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (ob_report_pack(&r, &buf, &len, NULL) != OB_OK) abort();
    free(buf);
}

static void report_request(const uint8_t *d, size_t n)
{
    Onebit__V1__ReportProgressRequest *q = onebit__v1__report_progress_request__unpack(NULL, n, d);
    if (!q) return;
    ob_report r;
    ob_report_from_pb(q, &r, NULL);
    onebit__v1__report_progress_request__free_unpacked(q, NULL);
}

static void json_decoders(const char *s, size_t n, int which)
{
    json_t *o = json_loadb(s, n, 0, NULL);
    if (!o) return;
    if (which == 2) {
        ob_job j;
        if (ob_job_from_json(o, &j, NULL) == OB_OK) {
            json_t *again = ob_job_to_json(&j);
            json_decref(again);
            ob_job_clear(&j);
        }
    } else {
        ob_job_event e;
        ob_checkpoint_info c;
        ob_job_event_from_json(o, &e, NULL);
        ob_checkpoint_info_from_json(o, &c, NULL);
    }
    json_decref(o);
}

static void job_message(const uint8_t *d, size_t n)
{
    Onebit__V1__Job *m = onebit__v1__job__unpack(NULL, n, d);
    if (!m) return;
    ob_job j;
    if (ob_job_from_pb(m, &j, NULL) == OB_OK) ob_job_clear(&j);
    onebit__v1__job__free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    switch (data[0] % 5) {
    case 0: progress_line((const char *)d, n); break;
    case 1: report_request(d, n); break;
    case 2: json_decoders((const char *)d, n, 2); break;
    case 3: json_decoders((const char *)d, n, 3); break;
    default: job_message(d, n); break;
    }
    return 0;
}
