/* DiLoCo's outer learning rate when --outer-lr is not given: a table keyed by H.
 * Its own file so that the configuration (src/train/config.c) and its fuzz target can
 * use it without the rest of DiLoCo. */
#include "parallel/outer_lr.h"

#include <stddef.h>

/* The default outer lr by H (Nesterov, momentum 0.9), from bench/diloco/results.md
 * (issue 15, second round; table "Outer lr by H"): 0.84M-parameter GPT-2, K = 4 islands
 * of 1024-token steps, warm-started from data parallel at 20% of the run, final
 * validation loss, seed 1 / seed 2 (rows k4_hH_warm[_olrX][_seed2]):
 *   H = 25:  0.7 1.9164 / 1.9096,  1.0 1.9599 / 1.9376
 *   H = 50:  0.7 2.0189 / 2.0082,  1.0 1.9982 / 1.9826
 *   H = 100: 0.7 2.1076 / 2.0968,  1.0 2.0796 / 2.0685  (seed 1 also 0.4 2.2450,
 *            0.85 2.0843, 1.4 2.3837)
 *   H = 250: 0.7 2.3071,           1.0 2.2043
 * The best value grows with H and switches between H = 25 and 50 on both seeds; below
 * 25 (H = 10 ran only at 0.7) and above 250 the table extends its end values. One model
 * size and island batch: a tuned --outer-lr may still do better elsewhere. */
static const struct {
  int from_h; /* this lr for H >= from_h, up to the next entry */
  float lr;
} OUTER_LR_BY_H[] = {{1, 0.7f}, {50, 1.0f}};

float atoll_diloco_default_outer_lr(int sync_every) {
  float lr = OUTER_LR_BY_H[0].lr;
  for (size_t i = 0; i < sizeof OUTER_LR_BY_H / sizeof OUTER_LR_BY_H[0]; i++)
    if (sync_every >= OUTER_LR_BY_H[i].from_h) lr = OUTER_LR_BY_H[i].lr;
  return lr;
}
