/* The rank files, as ckpt_h5.c's verification needs them. Private to the checkpoint library. */
#ifndef ONEBIT_CKPT_RANK_H
#define ONEBIT_CKPT_RANK_H

#include "onebit/checkpoint.h"

/* Verifies every rank file of the checkpoint at dir (metadata m): presence, step, sizes,
 * checksums, the server layout (valid, and the same in every file), a rank's own moments where
 * m says the files hold them. */
ob_status ob__ckpt_verify_ranks(const char *dir, const ob_ckpt_meta *m, ob_err *err);

#endif /* ONEBIT_CKPT_RANK_H */
