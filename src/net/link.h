/* An island's network link (docs/islands.md): its session with the coordinator
 * (HELLO, heartbeats from a thread of their own, READY / QUORUM / WAIT, COMMIT /
 * COMMITTED) and the peer-to-peer exchange of outer gradients with the other members.
 *
 * The exchange of (step, fragment) computes the token-weighted mean over the quorum's
 * islands of a vector x; with equal tokens exactly the arithmetic of DiLoCo inside one
 * job (diloco.c, islands_mean), so that K separate jobs end bit-identical to
 * --islands K in one:
 *   x is cut into K pieces of ceil(n / K); the island at position k of the quorum
 *   sends its encoding (quant.h) of piece c, with its tokens, to the island at
 *   position c (phase 1), decodes the K encodings of piece k it holds (its own
 *   included) and sums them in quorum order, each times K t_i / sum t (1 with equal
 *   tokens), divides by K, encodes the mean and sends it to every island (phase 2);
 *   every island decodes all K means into x.
 * Each piece travels in chunks (about 1/16 of it, at most 1 MiB) spread over `streams` CURVE
 * connections per peer (PUSH sockets into the peer's PULL socket), so that one slow
 * TCP stream does not bound a high-latency link. Every wait is bounded by timeout. */
#ifndef ATOLL_NET_LINK_H
#define ATOLL_NET_LINK_H

#include "atoll/atoll.h"
#include "core/quant.h"

#include <stddef.h>
#include <signal.h>
#include <stdint.h>

typedef struct {
  const char *join;            /* coordinator endpoint */
  const char *listen;          /* this island's data endpoint (bound, and told to peers) */
  const char *advertise;       /* NULL or "": peers are told the bound endpoint; else this one */
  const char *key_file;        /* this island's secret key */
  const char *coordinator_key; /* the coordinator's public key file */
  uint32_t island;
  uint32_t islands;            /* the run's island slots (--islands; 0: not known) */
  uint32_t rank, ranks;        /* this rank of the island's job, and its ranks (1: one process) */
  uint64_t layout;             /* fingerprint of this rank's inner layout (slices must line up) */
  uint64_t revision;           /* the revision of the island's global weights (its checkpoint's; 0: fresh):
                                * HELLO and the heartbeats report it */
  const volatile sig_atomic_t *stop; /* NULL, or a stop flag (SIGINT/SIGTERM/SIGHUP) that ends a wait
                                      * for the coordinator, the first one (HELLO) included */
  int streams;
  double timeout;              /* bound of every wait, seconds */
  double wait_timeout;         /* bound of a wait for a quorum below --min-islands */
  double heartbeat;            /* seconds between heartbeats */
  int fail_first_fetch;        /* test hook: the first fetch of the committed state fails */
  int feed_bad_momentum;       /* test hook: the momentum sent to joiners has a bit flipped */
  uint32_t commit_sigstop;     /* test hook: SIGSTOP this process before the COMMIT of this step (0: none) */
  int bye_sigstop;             /* test hook: SIGSTOP this process before its goodbye */
} atoll_link_config;

typedef struct {
  uint64_t wire_bytes;     /* sent by this island: frames, with ZMTP and CURVE overhead */
  uint64_t exchanges;
  uint64_t retries;        /* attempts aborted by the coordinator */
  double exchange_seconds; /* in exchanges and commits, waits included */
  double transfer_seconds; /* of the exchanges applied, each from its QUORUM's arrival to
                            * holding every piece: no READY, DONE/GO or COMMIT waits */
  uint64_t transfer_bytes; /* sent to peers meanwhile (data, framing and CURVE estimated) */
  int members;             /* of the last quorum */
  int members_min, members_max; /* over the exchanges applied */
  uint64_t joins;          /* times this island fetched the committed state and joined */
  uint64_t missed;         /* commits of the run this island skipped by joining */
} atoll_link_stats;

typedef struct atoll_link atoll_link;

/* What atoll_link_mean returns when no exchange can come and the island ends here with
 * a checkpoint (its x untouched, err says why): the run ended (an island finished and
 * none holding the state is left), no island holding the state is registered (they
 * stopped or left), or a stop signal ended the wait. */
enum { ATOLL_LINK_RUN_ENDED = 4, ATOLL_LINK_NO_DONOR = 5, ATOLL_LINK_SIGNALLED = 6 };

int atoll_link_open(atoll_link **out, const atoll_link_config *cfg, atoll_err *err);
void atoll_link_close(atoll_link *l);
/* The island's outer state (global weights, outer momentum, n floats each): what it
 * sends to joining islands, and what it replaces when it joins. */
void atoll_link_bind(atoll_link *l, float *global, float *momentum, size_t n);
/* The step after which this island joined (0: it did not). */
uint32_t atoll_link_joined_step(const atoll_link *l);
/* The revision the island's global weights are (the last it committed or joined), and
 * a resumed island's, from its checkpoint: with the run still at that revision it
 * exchanges at once instead of joining; behind it, it joins as any restarted island. */
uint64_t atoll_link_revision(const atoll_link *l);
void atoll_link_set_revision(atoll_link *l, uint64_t revision);
/* What the heartbeats report: inner steps done, last committed revision and hash. */
void atoll_link_progress(atoll_link *l, uint32_t step);
/* And for the coordinator's status page: the island's tokens per step, its last loss
 * and the bytes this rank sent (atoll_link_get_stats' wire_bytes). */
void atoll_link_report(atoll_link *l, uint64_t tokens_per_step, float loss, uint64_t sent_bytes);
/* A stop flag (SIGINT/SIGTERM/SIGHUP) that ends a wait for the coordinator early. */
void atoll_link_set_stop(atoll_link *l, const volatile sig_atomic_t *stop);
/* Between exchanges: reads what the coordinator sent meanwhile; an ERROR (e.g. this
 * island's ranks or layout do not match the run's) fails with its text; a commit in
 * flight takes its COMMITTED (and fails as atoll_link_settle) or repeats its COMMIT. */
int atoll_link_check(atoll_link *l, atoll_err *err);
/* The mean over the quorum of x[0, n) (see above), in place, this island's x
 * weighing `tokens` (those its outer gradient was trained on). *bad: index of the
 * first NaN or Inf in this island's x, or SIZE_MAX. Returns 0, -1 (err), 2: this
 * island was behind and joined instead: the bound state is the committed one after
 * step atoll_link_joined_step, x is untouched; or 3: it was behind, but the state did
 * not come (its donor died): call again to ask anew. The ranks of an island agree on
 * 2 or 3 (any 3: those that got 2 call atoll_link_unjoin, and all call again), so
 * that the island joins whole or not at all. */
int atoll_link_mean(atoll_link *l, atoll_qtype q, float *x, size_t n, uint64_t tokens, uint32_t step, uint32_t fragment,
                    size_t *bad, atoll_err *err);
/* Takes back a join (after 2) that another rank of the island could not make: the
 * link reports its previous revision again, so it is still behind and asks anew. */
void atoll_link_unjoin(atoll_link *l);
/* After the step's exchanges: every member's hash of its global weights must agree;
 * the coordinator commits the revision. Sends COMMIT and returns: its answer
 * (COMMITTED: the revision; its hash must be this island's) is taken by
 * atoll_link_check as it comes, and awaited by atoll_link_settle, which atoll_link_mean,
 * the next commit and atoll_link_goodbye call first. A wrong or missing answer fails
 * that call and every later one. */
int atoll_link_commit(atoll_link *l, uint32_t step, const uint8_t hash[32], atoll_err *err);
/* Waits for the COMMITTED of a commit in flight (up to 2 x --net-timeout), so that
 * atoll_link_revision is the committed one. 0 (also with none in flight), or -1. */
int atoll_link_settle(atoll_link *l, atoll_err *err);
/* The island finished its run: settles its last commit, then tells the coordinator it
 * leaves (BYE), so that it is not taken for a dead one, and the coordinator ends once
 * every island finished. -1 (err, no BYE): the last commit failed. */
int atoll_link_goodbye(atoll_link *l, atoll_err *err);
atoll_link_stats atoll_link_get_stats(const atoll_link *l);
/* The hash the islands commit and a joiner checks: BLAKE2b-256 of the global weights
 * (n floats) and then the bound outer momentum (the same n floats' worth). */
void atoll_link_state_hash(const atoll_link *l, const float *global, size_t n, uint8_t out[32]);

#endif
