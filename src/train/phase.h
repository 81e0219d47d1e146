/* An island's inner phase (docs/islands.md, "Phases in tokens or seconds").
 *
 * An island of a networked run (--join) syncs after the same steps as every other
 * island: the run's schedule (--sync-every H, --steps) names the exchanges. With
 * --phase-tokens or --phase-seconds it takes only the first steps of each phase that
 * fit its budget and skips the rest: a skipped step computes nothing (no batch, no
 * optimizer step) but keeps the schedule, so the island reaches the phase's sync when
 * its budget is spent instead of after H steps of its own speed. Its outer gradient
 * then carries the tokens of the steps it took, and the mean over the islands is
 * token-weighted, so a slow island weighs in by what it trained (Async Local-SGD's
 * dynamic local updates: H per island in proportion to its speed).
 *
 * The rule is a plain function of the phase so far: the loop owns the state, keeps
 * it in checkpoints, and resets it where a phase begins (after a sync, a join). */
#ifndef ATOLL_TRAIN_PHASE_H
#define ATOLL_TRAIN_PHASE_H

#include "atoll/atoll.h"

#include <cjson/cJSON.h>
#include <stdint.h>

typedef struct {
  uint64_t tokens;          /* --phase-tokens: the phase's budget in tokens (0: none) */
  double seconds;           /* --phase-seconds: in seconds of inner steps (0: none) */
  uint64_t tokens_per_step; /* the island's */
} atoll_phase_rule;

typedef struct {
  int taken;      /* inner steps taken in the phase so far */
  double seconds; /* their compute seconds */
  double last;    /* the last one's: the estimate of the next one's */
} atoll_phase;

/* Whether the rule bounds anything. */
int atoll_phase_on(const atoll_phase_rule *rule);
/* Whether the phase's next step is taken: always its first one; then while the
 * tokens after it stay within the token budget and the seconds so far plus the last
 * step's stay within the seconds budget. */
int atoll_phase_takes(const atoll_phase_rule *rule, const atoll_phase *p);
/* A step was taken, in `seconds` of compute. */
void atoll_phase_took(atoll_phase *p, double seconds);
/* A phase begins (the run's start, after a sync or a join): nothing taken yet. The
 * last step's time is kept as the estimate of the next phase's steps. */
void atoll_phase_begin(atoll_phase *p);

/* state.json's "island_phase" (docs/formats.md): the phase so far, the steps skipped
 * since the last sync, and the steps taken and skipped in the whole run. Written into
 * `state` (0: out of memory); read back with every field checked (one line naming
 * dir's state.json). */
int atoll_phase_to_json(cJSON *state, const atoll_phase *p, int skipped_since_sync, uint64_t taken, uint64_t skipped);
/* (`sync_every`: no phase or time since a sync spans more steps) */
int atoll_phase_from_json(const cJSON *state, const char *dir, int step, int sync_every, atoll_phase *p,
                          int *skipped_since_sync, uint64_t *taken, uint64_t *skipped, atoll_err *err);

#endif
