/* More validation sets (--eval-data NAME=DIR[,NAME=DIR...]; the flag may also be given
 * more than once): each is a prepared data directory whose validation split is
 * evaluated beside the run's own, with the same windows rule (eval_batches x batch
 * windows spread over the split), and reported as val_loss_NAME in metrics.jsonl and
 * final_val_losses.NAME in summary.json. For a loss on another domain than the
 * training data (docs/usage.md). */
#ifndef ATOLL_EVAL_SETS_H
#define ATOLL_EVAL_SETS_H

#include "atoll/atoll.h"

#define ATOLL_MAX_EVAL_SETS 8
#define ATOLL_EVAL_NAME_MAX 32

typedef struct {
  char name[ATOLL_EVAL_NAME_MAX + 1];
  char dir[1024];
} atoll_eval_set;

/* Parses the flag's value ("" : none): names of letters, digits, '_' and '-', unique,
 * at most ATOLL_MAX_EVAL_SETS sets; one line naming --eval-data on a bad value. */
int atoll_eval_sets_parse(const char *spec, atoll_eval_set *sets, int *count, atoll_err *err);

#endif
