/* The ordered list of strategies; see strategy.h. */
#include "parallel/strategy.h"

#include <stddef.h>

void atoll_strategies_add(atoll_strategy_list *l, atoll_strategy *s) {
  if (s && l->n < ATOLL_MAX_STRATEGIES) l->items[l->n++] = s;
}

void atoll_strategies_begin_step(atoll_strategy_list *l, int step) {
  for (int i = 0; i < l->n; i++)
    if (l->items[i]->ops->begin_step) l->items[i]->ops->begin_step(l->items[i], step);
}

void atoll_strategies_before_backward(atoll_strategy_list *l, int last_micro) {
  for (int i = 0; i < l->n; i++)
    if (l->items[i]->ops->before_backward) l->items[i]->ops->before_backward(l->items[i], last_micro);
}

void atoll_strategies_finish_grads(atoll_strategy_list *l) {
  for (int i = 0; i < l->n; i++)
    if (l->items[i]->ops->finish_grads) l->items[i]->ops->finish_grads(l->items[i]);
}

void atoll_strategies_after_update(atoll_strategy_list *l) {
  for (int i = 0; i < l->n; i++)
    if (l->items[i]->ops->after_update) l->items[i]->ops->after_update(l->items[i]);
}

int atoll_strategies_after_step(atoll_strategy_list *l, int step, int last, double compute_seconds, atoll_err *err) {
  for (int i = 0; i < l->n; i++) {
    atoll_strategy *s = l->items[i];
    if (s->ops->after_step && s->ops->after_step(s, step, last, compute_seconds, err)) return -1;
  }
  return 0;
}

void atoll_strategies_swap_eval_weights(atoll_strategy_list *l) {
  int changed = 0;
  for (int i = 0; i < l->n; i++)
    if (l->items[i]->ops->swap_eval_weights) changed |= l->items[i]->ops->swap_eval_weights(l->items[i]);
  for (int i = 0; changed && i < l->n; i++)
    if (l->items[i]->ops->weights_changed) l->items[i]->ops->weights_changed(l->items[i]);
}

int atoll_strategies_settle(atoll_strategy_list *l, atoll_err *err) {
  for (int i = 0; i < l->n; i++) {
    atoll_strategy *s = l->items[i];
    if (s->ops->settle && s->ops->settle(s, err)) return -1;
  }
  return 0;
}

void atoll_strategies_save(atoll_strategy_list *l, const atoll_ckpt_io *io) {
  for (int i = 0; i < l->n; i++)
    if (l->items[i]->ops->save) l->items[i]->ops->save(l->items[i], io);
}

int atoll_strategies_load(atoll_strategy_list *l, const atoll_ckpt_io *io, int step, atoll_err *err) {
  for (int i = 0; i < l->n; i++) {
    atoll_strategy *s = l->items[i];
    if (s->ops->load && s->ops->load(s, io, step, err)) return -1;
  }
  return 0;
}

void atoll_strategies_destroy(atoll_strategy_list *l) {
  for (int i = l->n - 1; i >= 0; i--)
    if (l->items[i]->ops->destroy) l->items[i]->ops->destroy(l->items[i]);
  l->n = 0;
}
