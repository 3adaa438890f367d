/* Writes a small checkpoint that verifies, for tests/fake_worker.sh (the coordinator's tests
 * count only checkpoints that verify): fake_checkpoint.h's, as <job dir>/step-NNNNNNNN.
 *   fake_checkpoint JOB_DIR STEP */
#include "fake_checkpoint.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fake_checkpoint JOB_DIR STEP\n");
        return 2;
    }
    ob_err err = {0};
    if (fake_checkpoint_write(argv[1], atol(argv[2]), &err) != OB_OK) {
        fprintf(stderr, "fake_checkpoint: %s\n", err.msg);
        return 1;
    }
    return 0;
}
