/* Fuzz target: the checkpoint reader on arbitrary bytes as a checkpoint's state.h5 (a job's
 * folder, a warm-start source, or what ListCheckpoints reads). The file is written into a
 * private temporary directory, then its metadata is read and the checkpoint verified. Seed it
 * with real checkpoints (tests/fuzz/README.md). */
#include "onebit/checkpoint.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_checkpoint.XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    char path[128];
    snprintf(path, sizeof path, "%s/state.h5", dir);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    ob_ckpt_meta m;
    char *spec = NULL;
    if (ob_ckpt_read_meta(dir, &m, &spec, NULL) == OB_OK) free(spec);
    ob_ckpt_verify(dir, &m, NULL);
    return 0;
}
