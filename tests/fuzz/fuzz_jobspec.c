/* Fuzz target: the job spec parser (JSON and YAML), the input every API accepts first.
 * Invariants checked on top of "no crash, no sanitizer report": a spec that parses has a
 * canonical JSON that parses back to the identical struct, and that JSON is a fixed point. */
#include "onebit/jobspec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ob_jobspec a, b; /* large: off the stack */
    if (ob_jobspec_parse(&a, (const char *)data, size, OB_SPEC_AUTO, NULL) != OB_OK) return 0;
    char *json = NULL, *again = NULL;
    if (ob_jobspec_to_json(&a, &json, NULL) != OB_OK) abort();
    memset(&b, 0x5a, sizeof b);
    if (ob_jobspec_parse(&b, json, strlen(json), OB_SPEC_JSON, NULL) != OB_OK) abort();
    if (memcmp(&a, &b, sizeof a) != 0) abort();
    if (ob_jobspec_to_json(&b, &again, NULL) != OB_OK || strcmp(json, again) != 0) abort();
    free(json);
    free(again);
    return 0;
}
