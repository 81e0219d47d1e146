/* Data units of an open run (docs/islands.md, "Open membership"): the coordinator hands
 * out the training data in units, one per inner phase of an island, so that no unit is
 * trained twice while fresh ones remain, and a unit whose contribution never reached a
 * commit (its island left) is handed out again, before any fresh one.
 *
 * A unit is a number u. An island that trains phase (start, end] on unit u draws that
 * phase's windows from the sampler's stream of u (src/train/train.c), so the run's data
 * is the sequence of units, whoever trains them. The table here is a plain function of
 * the events the coordinator passes in (asks, commits, leaves): no sockets, no clock.
 *
 * Life of a unit: fresh (never handed out) or returned -> held by an island for a phase
 * (asked ahead of the phase, then started) -> done (a commit at the phase's end or after
 * included that island) or returned (the island left, or skipped the phase).
 *
 * An ask for a phase that a commit including the island already took in is stale (a
 * question repeated on a slow link, or a process restarted from an older checkpoint):
 * it changes nothing. It is answered with that phase's unit when the phase is one of the
 * island's last ATOLL_UNITS_PAST done ones, else with the unit a fresh ask would get
 * next (its work is discarded when the island joins the committed state). */
#ifndef ATOLL_NET_UNITS_H
#define ATOLL_NET_UNITS_H

#include <stddef.h>
#include <stdint.h>

#define ATOLL_UNITS_ISLANDS 1024 /* island slots (ATOLL_WIRE_MAX_MEMBERS) */
#define ATOLL_UNITS_HELD 8       /* phases an island may hold at once (its own, the next, late ones) */
#define ATOLL_UNITS_RETURNED (ATOLL_UNITS_ISLANDS * ATOLL_UNITS_HELD)
#define ATOLL_UNITS_PAST 2       /* done phases kept per island, to answer a stale ask the same */

typedef struct {
  uint32_t start, end; /* the phase: inner steps (start, end] */
  uint64_t unit;
  int started;         /* the island began the phase (else it was only asked ahead) */
} atoll_unit_hold;

typedef struct {
  uint64_t next;     /* the next fresh unit */
  uint64_t done;     /* units whose phase reached a commit */
  uint64_t again;    /* units handed out again (after their island left or skipped them) */
  uint64_t returned[ATOLL_UNITS_RETURNED]; /* handed out again first, oldest first */
  int nreturned;
  atoll_unit_hold held[ATOLL_UNITS_ISLANDS][ATOLL_UNITS_HELD];
  int nheld[ATOLL_UNITS_ISLANDS];
  uint32_t committed_to[ATOLL_UNITS_ISLANDS]; /* the last commit that included the island (0: none) */
  atoll_unit_hold past[ATOLL_UNITS_ISLANDS][ATOLL_UNITS_PAST]; /* its last done phases, oldest first */
  int npast[ATOLL_UNITS_ISLANDS];
} atoll_units;

/* Island `island` begins phase (start, end] and asks ahead for (next_start, next_end]:
 * the units of both (the same ones as before for a phase it holds). Phases it holds
 * that begin before `start` go back to be handed out again when it never began them,
 * or when they begin at or after `lost_from`: it began them but lost their work (it
 * joined with the committed state, discarding the steps since `lost_from`; without a
 * loss lost_from = start). Phases it began before lost_from are still to be committed
 * (its late contribution, folded into its next exchange) and stay. next_start =
 * next_end = 0: the run's last phase, nothing to ask ahead (*next_unit 0).
 * *again: 1 when a unit was one handed out before (logged by the caller). 1 when the
 * table changed (to be saved), 0 when it did not (a phase asked again, a stale ask), or
 * -1 with a reason (a bad range, or more than ATOLL_UNITS_HELD phases held), the table
 * unchanged. */
int atoll_units_ask(atoll_units *u, uint32_t island, uint32_t start, uint32_t end, uint32_t next_start, uint32_t next_end,
                    uint32_t lost_from, uint64_t *unit, uint64_t *next_unit, int *again, char *why, size_t whysz);

/* A commit of step `step` that included island `island`: the phases it began that end
 * at or before `step` are done (and kept among its past ones). Returns how many. */
int atoll_units_committed(atoll_units *u, uint32_t island, uint32_t step);

/* Island `island` left (silent, or finished): every phase it holds goes back. Returns
 * how many. */
int atoll_units_release(atoll_units *u, uint32_t island);

/* The table as JSON (cJSON object, state file key "units") and back: parse checks
 * every field (numbers in range, at most the limits above, no unit in two places, no
 * phase held twice, done + returned + held = next) and names the file. */
struct cJSON;
struct cJSON *atoll_units_to_json(const atoll_units *u);
int atoll_units_parse(const struct cJSON *o, const char *path, atoll_units *u, char *why, size_t whysz);

#endif
