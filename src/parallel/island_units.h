/* An open run's island and its data units (docs/islands.md, "Open membership";
 * src/net/units.h is the coordinator's side): before each inner step the loop calls
 * atoll_island_units_before, which makes sure the unit of that step's phase is known
 * (asked for at the phase's start, and the next phase's ahead of it, so that a phase
 * never waits on the coordinator unless the answer is late), and the windows of a step
 * come from its unit's stream of the sampler (atoll_island_units_window).
 *
 * Each rank of an island asks over a connection of its own (the coordinator answers
 * the same units for the same phase of one island slot). */
#ifndef ATOLL_PARALLEL_ISLAND_UNITS_H
#define ATOLL_PARALLEL_ISLAND_UNITS_H

#include "atoll/atoll.h"
#include "parallel/diloco.h"

#include <signal.h>
#include <stdint.h>

typedef struct atoll_island_units atoll_island_units;

/* phase: --sync-every (a phase is steps (k H, (k+1) H], the last one ends at steps,
 * --steps); timeout: how long a missing
 * answer may take (--net-timeout); diloco: where joins are seen (their lost phases go back). */
int atoll_island_units_create(atoll_island_units **out, const char *join, const char *key_file,
                              const char *coordinator_key, uint32_t rank, int phase, int steps, double timeout,
                              const atoll_diloco *diloco, atoll_err *err);
void atoll_island_units_free(atoll_island_units *u);

/* Before inner step `step` (0-based): its phase's unit known (waiting for it if it must,
 * up to the timeout, or until *stop), answers read. 0, or -1 with one line. */
int atoll_island_units_before(atoll_island_units *u, int step, const volatile sig_atomic_t *stop, atoll_err *err);

/* The sampler's step for the windows of inner step `step` (0-based): unit u's phase
 * steps are u H .. u H + H - 1, whichever steps of the run they are. */
uint64_t atoll_island_units_window(const atoll_island_units *u, int step);

/* The unit of the phase holding inner step `step`, or -1 when not known (metrics). */
int64_t atoll_island_units_of(const atoll_island_units *u, int step);

#endif
