/* Checkpoint directories, see docs/formats.md ("Checkpoints").
 *
 * A checkpoint is a directory holding
 *   model.safetensors      the weights, tensor names = layout names, metadata
 *                          {"format": "atoll", "config": "<config JSON as a string>",
 *                           "step": "<step>"}
 *   optimizer.safetensors  AdamW moments "exp_avg.<name>" then "exp_avg_sq.<name>"
 *                          (absent if the checkpoint was saved without moments)
 *   state.json             the training loop's state object plus
 *                          "format": "atoll-checkpoint", "version": 2; "step" (an
 *                          integer >= 0) is required; "file_hashes" (written here)
 *                          holds a hash of each tensor file's data section, checked
 *                          at load (required from version 2 on); "weights_hash",
 *                          when the run had one whole model per rank, is checked
 *                          against the weights loaded; the rest is not interpreted
 *                          here.
 *
 * Checkpoints of a run live in ROOT/step_NNNNNNNN (atoll_ckpt_dirname). Saving is
 * atomic: a kill at any moment leaves either the previous complete checkpoint or the
 * new complete one under the directory's name, plus possibly a hidden
 * ".tmp-<name>-<pid>", ".old-<name>-<pid>" or ".doomed-<name>-<pid>" sibling, which
 * loaders ignore and atoll_ckpt_prune (process gone) or atoll_ckpt_clean removes.
 */
#ifndef ATOLL_CHECKPOINT_H
#define ATOLL_CHECKPOINT_H

#include "atoll/atoll.h"
#include "ckpt/safetensors.h"
#include "model/layout.h"

#include <cjson/cJSON.h>
#include <stddef.h>

#define ATOLL_CKPT_FORMAT "atoll-checkpoint"
/* Version 2 always has "file_hashes"; version 1 (atoll before 2026-12-01 wrote it
 * without them, later ones with them) is still read, unchecked when they are absent. */
#define ATOLL_CKPT_VERSION 2
#define ATOLL_CKPT_VERSION_UNHASHED 1

/* Saves a checkpoint to dir (created, with its parents, if missing; replaced
 * atomically if it exists). params, exp_avg and exp_avg_sq are flat buffers of
 * lay->nparams floats; exp_avg and exp_avg_sq may both be NULL (weights only).
 * state: a JSON object with an integer "step" >= 0; it is copied, with "format" and
 * "version" added. If state holds a "config" item, its JSON text becomes the
 * model.safetensors "config" metadata. On failure an existing checkpoint at dir is
 * left as it was. NaN/Inf in any buffer is an error. */
int atoll_ckpt_save(const char *dir, const atoll_layout *lay, const float *params,
                    const float *exp_avg, const float *exp_avg_sq, const cJSON *state,
                    atoll_err *err);

/* Further tensor files in the same atomic directory (DiLoCo keeps the islands' own
 * weights and moments, and the outer momentum, this way). Each file holds one or
 * more copies of the layout, tensor names prefixed by their buffer's prefix. */
typedef struct {
  const char *file; /* e.g. "outer.safetensors"; a plain name, no slashes */
  const atoll_st_buffer *buffers;
  int nbuffers;
  const char *text; /* instead of buffers (NULL, 0): a text file written as is (tokenizer.json) */
} atoll_ckpt_extra;

int atoll_ckpt_save_ex(const char *dir, const atoll_layout *lay, const float *params,
                       const float *exp_avg, const float *exp_avg_sq, const atoll_ckpt_extra *extras,
                       int nextras, const cJSON *state, atoll_err *err);
/* Reads one extra file written by atoll_ckpt_save_ex into the buffers' data. */
int atoll_ckpt_load_extra(const char *dir, const atoll_layout *lay, const char *file,
                          const atoll_st_read_buffer *buffers, int nbuffers, atoll_err *err);

/* Reads and validates dir/state.json (format, version, step). On success *state is a
 * new object the caller deletes with cJSON_Delete. */
int atoll_ckpt_read_state(const char *dir, cJSON **state, atoll_err *err);

/* Loads the weights, and the AdamW moments unless exp_avg and exp_avg_sq are both
 * NULL. Every tensor must match the layout (a checkpoint of a different model shape
 * fails naming the first tensor whose shape differs), and each file's data section
 * its hash in state.json's "file_hashes" (a checkpoint written before those hashes
 * has none and is not checked). On failure the buffers' contents are unspecified. */
int atoll_ckpt_load(const char *dir, const atoll_layout *lay, float *params, float *exp_avg,
                    float *exp_avg_sq, atoll_err *err);

/* atoll_ckpt_find_latest (public, atoll/atoll.h): a checkpoint directory as is, else its
 * step_NNNNNNNN subdirectory (8 digits or more) with the highest number that holds a
 * state.json. */

/* Removes all but the newest `keep` (>= 1) step_* checkpoints under root, except
 * that the checkpoint of step protect_step (the one just saved; -1: none) is kept
 * whatever its rank, and hidden .tmp-* / .old-* / .doomed-* directories whose
 * process is gone. Each checkpoint is first renamed to a hidden .doomed-* name, so a
 * kill never leaves a partial step_* directory. A missing root is not an error. */
int atoll_ckpt_prune_ex(const char *root, int keep, int protect_step, atoll_err *err);
/* atoll_ckpt_prune_ex with no protected step. */
int atoll_ckpt_prune(const char *root, int keep, atoll_err *err);

/* Cleans what killed saves and prunes left under root, whatever process made it:
 * call once at start, holding the run directory's lock (run_dir.h) so that no other
 * process is saving there. A save killed between its two renames left its checkpoint
 * only as a hidden .tmp-/.old- copy: that copy is renamed back. Every other hidden
 * .tmp-/.old-/.doomed- directory is deleted, and every step_* directory without
 * state.json that holds only a checkpoint's files or nothing. One that holds anything
 * else (an export, the user's files) stays, and the clean fails naming it: a save at its
 * step would fail. A missing root is not an error. */
int atoll_ckpt_clean(const char *root, atoll_err *err);

/* How many step_* checkpoints under root have a step greater than `step` (-1: all
 * of them) into *count, and the greatest such step into *newest (-1 if none). A
 * missing root counts none. */
int atoll_ckpt_newer(const char *root, int step, int *count, int *newest, atoll_err *err);
/* Moves every step_* checkpoint under root with a step greater than `step` into
 * dest_dir (created, with its parents; refused if it exists and is not an empty
 * directory), one rename per checkpoint, so each is whole in one place or the other.
 * dest_dir must be on root's file system. */
int atoll_ckpt_move_aside(const char *root, int step, const char *dest_dir, atoll_err *err);

/* root/step_%08d into out (truncated to outsz). */
void atoll_ckpt_dirname(const char *root, int step, char *out, size_t outsz);

/* Testing only: 0 disables the atomic directory exchange (renameat2
 * RENAME_EXCHANGE) used to replace an existing checkpoint, so that the portable
 * fallback (rename aside, rename in) is exercised. Default 1. */
void atoll_ckpt_set_exchange(int enabled);

#endif
