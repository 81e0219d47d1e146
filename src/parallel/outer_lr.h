/* DiLoCo's outer learning rate when --outer-lr is not given (outer_lr.c). */
#ifndef ATOLL_OUTER_LR_H
#define ATOLL_OUTER_LR_H

/* The outer lr for H = sync_every, from a table measured in bench/diloco (outer_lr.c).
 * The configuration holds a negative outer_lr until it is resolved: the command line
 * resolves it before the run starts, so the header line, state.json and summary.json
 * show the number and a resumed run keeps it; DiLoCo and the saved configuration
 * resolve it too for a library caller that did not. */
float atoll_diloco_default_outer_lr(int sync_every);

#endif
