/* The strategy interface: one object per way of spreading a training step over ranks
 * (data parallel / ZeRO, tensor parallel, the pipeline schedule, DiLoCo). The loop
 * (src/train/train.c) keeps them in an ordered list and calls the same few entry
 * points on each, in list order; an object leaves out (NULL) what it does not need.
 * Hooks inside forward and backward go through the model's seams
 * (atoll_model_set_hooks, atoll_model_set_tp), installed by the object at creation.
 * docs/architecture.md walks one step through them. */
#ifndef ATOLL_STRATEGY_H
#define ATOLL_STRATEGY_H

#include "atoll/atoll.h"

typedef struct atoll_strategy atoll_strategy;

/* Checkpoint access for an object with state of its own (src/train/train_ckpt.c
 * implements it). A buffer is of this rank's part of the model, holding its values from
 * part offset `begin` on; the checkpoint stores the whole model's, in its layout. */
typedef struct {
  void *ctx;
  /* save, collective: island `island`'s copy of the buffer becomes tensors
   * "<prefix><name>" of `file`; file NULL: the checkpoint's model weights */
  void (*put)(void *ctx, const char *file, const char *prefix, int island, const float *src, size_t begin);
  /* load: this rank's values [begin, end) of what put stored, into dst[0, end - begin) */
  int (*get)(void *ctx, const char *file, const char *prefix, float *dst, size_t begin, size_t end, atoll_err *err);
} atoll_ckpt_io;

typedef struct {
  const char *name;
  /* before the step's first forward (step: 0-based index of the step) */
  void (*begin_step)(atoll_strategy *s, int step);
  /* before each backward pass; last_micro: the step's last micro-batch of this pass's
   * layers (the one whose gradients are final) */
  void (*before_backward)(atoll_strategy *s, int last_micro);
  /* after the step's last backward: make this rank's gradients final */
  void (*finish_grads)(atoll_strategy *s);
  /* after the optimizer changed this rank's shard of the weights */
  void (*after_update)(atoll_strategy *s);
  /* after the step (1-based count of steps done; last: the run's final step);
   * compute_seconds: the step's time so far */
  int (*after_step)(atoll_strategy *s, int step, int last, double compute_seconds, atoll_err *err);
  /* swaps the weight buffer with the model that evaluation and checkpoints see (DiLoCo's
   * global weights); called twice to swap back. Returns 1 if it changed the weights. */
  int (*swap_eval_weights)(atoll_strategy *s);
  /* before evaluation and checkpoints read the state: finish work in the background
   * (DiLoCo's outer exchange in flight) */
  int (*settle)(atoll_strategy *s, atoll_err *err);
  /* another object rewrote the weight buffer: drop cached copies (ZeRO-3 units) */
  void (*weights_changed)(atoll_strategy *s);
  /* checkpoints: save is collective, after the loop's own state; load runs after the
   * loop's own state was read, for a checkpoint taken after `step` steps */
  void (*save)(atoll_strategy *s, const atoll_ckpt_io *io);
  int (*load)(atoll_strategy *s, const atoll_ckpt_io *io, int step, atoll_err *err);
  void (*destroy)(atoll_strategy *s);
} atoll_strategy_ops;

/* Each object's struct starts with this member. */
struct atoll_strategy {
  const atoll_strategy_ops *ops;
};

#define ATOLL_MAX_STRATEGIES 8

typedef struct {
  atoll_strategy *items[ATOLL_MAX_STRATEGIES];
  int n;
} atoll_strategy_list;

/* Appends s (NULL is skipped). The list owns it: atoll_strategies_destroy frees it. */
void atoll_strategies_add(atoll_strategy_list *l, atoll_strategy *s);
void atoll_strategies_begin_step(atoll_strategy_list *l, int step);
void atoll_strategies_before_backward(atoll_strategy_list *l, int last_micro);
void atoll_strategies_finish_grads(atoll_strategy_list *l);
void atoll_strategies_after_update(atoll_strategy_list *l);
int atoll_strategies_after_step(atoll_strategy_list *l, int step, int last, double compute_seconds, atoll_err *err);
void atoll_strategies_swap_eval_weights(atoll_strategy_list *l);
int atoll_strategies_settle(atoll_strategy_list *l, atoll_err *err);
void atoll_strategies_save(atoll_strategy_list *l, const atoll_ckpt_io *io);
int atoll_strategies_load(atoll_strategy_list *l, const atoll_ckpt_io *io, int step, atoll_err *err);
void atoll_strategies_destroy(atoll_strategy_list *l);

#endif
