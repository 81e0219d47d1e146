/* atoll sample: text generation from a checkpoint. */
#ifndef ATOLL_SAMPLE_H
#define ATOLL_SAMPLE_H

#include "atoll/atoll.h"

#include <stdio.h>

typedef struct {
  const char *ckpt;   /* checkpoint directory (or a run directory: its latest) */
  const char *prompt; /* bytes fed before generation ("" starts from a newline) */
  int tokens;         /* tokens to generate */
  float temperature;  /* 0: greedy */
  int top_k;          /* 0: the whole vocabulary */
  uint64_t seed;
} atoll_sample_opts;

/* Writes the prompt followed by the generated text to out. */
int atoll_sample(const atoll_sample_opts *o, FILE *out, atoll_err *err);

#endif
