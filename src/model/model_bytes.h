/* The bytes a model part allocates, counted by the allocation code itself
 * (src/model/gpt.c), so that a run can be refused before it allocates.
 * Its declaration belongs with atoll_model_create_part's (the model's header). */
#ifndef ATOLL_MODEL_BYTES_H
#define ATOLL_MODEL_BYTES_H

#include "atoll/atoll.h"

#include <stddef.h>

typedef struct {
  size_t weights; /* the flat parameter buffer */
  size_t grads;   /* the flat gradient buffer */
  size_t acts;    /* activations of every slot and the backward scratch */
} atoll_model_mem;

/* What atoll_model_create_part(s, part, max_batch, max_seq, slots) would allocate;
 * fails on the same bad sizes, without allocating any of it. */
int atoll_model_bytes(const atoll_shape *s, const atoll_part *part, int max_batch, int max_seq, int slots,
                      atoll_model_mem *out, atoll_err *err);

#endif
