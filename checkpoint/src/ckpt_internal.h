/* Private helpers of the checkpoint library: HDF5 error capture and file-system primitives
 * shared by ckpt_h5.c (the files) and ckpt_dir.c (the directories). */
#ifndef ONEBIT_CKPT_INTERNAL_H
#define ONEBIT_CKPT_INTERNAL_H

#include "onebit/checkpoint.h"
#include "onebit/base.h"

#define OB_CKPT_MAGIC "onebit-checkpoint"
#define OB_CKPT_STATE_FILE "state.h5"

/* fsyncs the file or directory at path. */
ob_status ob__ckpt_fsync_path(const char *path, int is_dir, ob_err *err);

/* Joins dir and name into out (OB_CKPT_PATH_LEN bytes). */
ob_status ob__ckpt_join(char *out, const char *dir, const char *name, ob_err *err);

#endif /* ONEBIT_CKPT_INTERNAL_H */
