/* Internal to src/ckpt (checkpoint.c, ckpt_dirs.c, ckpt_hash.c): path helpers and
 * the per-file hashes of state.json. Not for other modules. */
#ifndef ATOLL_CKPT_INTERNAL_H
#define ATOLL_CKPT_INTERNAL_H

#include "ckpt/checkpoint.h"
#include "model/layout.h"

#include <stdint.h>

#define ATOLL_CKPT_PATH 4096

/* a/b into out; fails (naming both) if it does not fit. */
int atoll_ckpt_join(char *out, size_t outsz, const char *a, const char *b, atoll_err *err);
/* 1 if path is a directory (symbolic links not followed). */
int atoll_ckpt_is_dir(const char *path);
/* Whether dir holds nothing (besides . and ..) into *empty. */
int atoll_ckpt_dir_empty(const char *dir, int *empty, atoll_err *err);
/* 1 if dir holds a regular file state.json. */
int atoll_ckpt_has_state(const char *dir);

/* The hash of a tensor file's data section: its flat buffers of nparams floats each,
 * in file order (docs/formats.md, "file_hashes"). */
uint64_t atoll_ckpt_buffers_hash(const float *const *bufs, int nbufs, size_t nparams);
/* Adds file's hash (16 hex digits) to the object hashes. */
int atoll_ckpt_record_hash(cJSON *hashes, const char *file, uint64_t hash, atoll_err *err);
/* atoll_st_read_buffers of dir/file, then a check of the file's data section against
 * its entry in state's (the checkpoint's state.json) "file_hashes"; a state without
 * them is refused, except one of version 1 (written before them), read unchecked. */
int atoll_ckpt_read_verified(const char *dir, const char *file, const cJSON *state,
                             const atoll_layout *lay, const atoll_st_read_buffer *buffers, int nbuffers,
                             cJSON **metadata, atoll_err *err);
/* The weights loaded from path (model.safetensors) against state's "weights_hash",
 * where the run that wrote it had one whole model per rank (its config: tp 1, pp 1,
 * no DiLoCo islands; otherwise the hash is of parts, or of an island's own weights,
 * and is not checked here). No "weights_hash": nothing to check. */
int atoll_ckpt_check_weights_hash(const cJSON *state, const atoll_layout *lay, const float *params,
                                  const char *path, atoll_err *err);

#endif
