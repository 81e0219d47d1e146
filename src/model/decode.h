/* Generation with a key/value cache (src/model/decode.c): each new token runs the blocks
 * on its own row only, attending to the keys and values of the earlier positions kept
 * per layer. Both archs; the whole model only (one rank). Internal. */
#ifndef ATOLL_MODEL_DECODE_H
#define ATOLL_MODEL_DECODE_H

#include "model/model.h"

typedef struct atoll_decoder atoll_decoder;

/* A cache of up to the model's context positions for model m (which must be whole:
 * no tensor or pipeline cut). Fails with a message when out of memory. */
int atoll_decoder_create(atoll_decoder **out, atoll_model *m, atoll_err *err);
void atoll_decoder_destroy(atoll_decoder *d);
/* Positions already in the cache. */
int atoll_decoder_pos(const atoll_decoder *d);
/* Empties the cache (the next step starts at position 0). */
void atoll_decoder_reset(atoll_decoder *d);
/* Appends n tokens at positions pos .. pos+n-1 (pos = atoll_decoder_pos; pos + n must
 * not exceed the context) and returns the logits [vocab] of the last of them. */
const float *atoll_decoder_step(atoll_decoder *d, const int32_t *tokens, int n);

#endif
