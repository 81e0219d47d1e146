/* A prepared data directory's splits and the deterministic windows drawn from them
 * (src/data/dataset.c). Internal. */
#ifndef ATOLL_DATA_DATASET_H
#define ATOLL_DATA_DATASET_H

#include "data/token_file.h"

/* A run of tokens [begin, end) inside one token file that windows may be drawn from. */
typedef struct {
  int file;
  uint64_t begin, end;
} atoll_token_range;

/* All token files of one split ("train" or "val") in a prepared data directory. */
typedef struct {
  int nfiles;
  atoll_token_file *files;
  uint32_t vocab;
  uint32_t max_token;      /* largest token of any file */
  uint64_t ntokens;
  uint64_t text_bytes;   /* the bytes of text the split was made from (manifest "<split>_bytes"); 0: unknown */
  int nranges;           /* where windows come from: every token file whole, unless restricted */
  atoll_token_range *ranges;
} atoll_dataset;

int atoll_dataset_open(atoll_dataset *ds, const char *dir, const char *split, int seq,
                       atoll_err *err);
void atoll_dataset_close(atoll_dataset *ds);
/* Fails, naming the first token file, if the split's vocabulary (header) is larger
 * than the model's or any token is >= model_vocab: evaluation would index past the
 * embedding table. Opening checks each file alone; this checks the split against the
 * model (train and val alike). */
int atoll_dataset_check_vocab(const atoll_dataset *ds, int model_vocab, atoll_err *err);
/* Restricts windows to token ranges [begins[i], ends[i]) of the split (token files laid end
 * to end), e.g. some of the source files (non-i.i.d. data per DiLoCo island). Fails if
 * no window of seq+1 tokens fits. */
int atoll_dataset_restrict(atoll_dataset *ds, const uint64_t *begins, const uint64_t *ends, int n,
                           int seq, const char *what, atoll_err *err);
/* Writes seq+1 tokens of one training window into out. The window depends only on
 * (seed, step, index): index is the row within the step's global batch, so that a
 * resumed run sees the same batches and ranks can take disjoint slices. */
void atoll_dataset_window(const atoll_dataset *ds, uint64_t seed, uint64_t step, uint64_t index,
                          int seq, int32_t *out);
/* Window number i of a fixed, evenly spaced evaluation set. */
void atoll_dataset_eval_window(const atoll_dataset *ds, uint64_t i, uint64_t count, int seq,
                               int32_t *out);

#endif
