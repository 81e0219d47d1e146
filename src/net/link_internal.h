/* An island's link internals (link.h), shared by its two files: link.c (the control
 * logic with the coordinator and the public API) and link_data.c (the data plane).
 * link.c calls into link_data.c, not the other way. Not part of the library's API. */
#ifndef ATOLL_NET_LINK_INTERNAL_H
#define ATOLL_NET_LINK_INTERNAL_H

#include "net/link.h"
#include "net/keys.h"
#include "net/sock.h"
#include "net/wire.h"
#include "net/zap.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_PEERS 256
#define MAX_STREAMS 64

typedef struct {
  int used;
  uint32_t island;
  uint8_t key[ATOLL_KEY_BYTES];
  char endpoint[ATOLL_WIRE_MAX_ENDPOINT + 1];
  void *push[MAX_STREAMS];
  void *mon[MAX_STREAMS]; /* each stream's socket monitor (link_streams.c) */
  uint8_t up[MAX_STREAMS]; /* its handshake done, not lost since */
  atoll_sender tx;
  int next; /* the stream to try first for its next chunk */
  int broken; /* a send failed: its sockets are made anew before the next use */
  uint64_t qid; /* the last quorum this peer was used in */
  uint8_t again[5]; /* per phase: its sockets were made anew once in this attempt */
} peer;

struct atoll_link {
  atoll_link_config cfg;
  char join[256], listen[256];
  void *ctx, *coord, *pull;
  void *coord_mon; /* while greeting: the monitor of coord (link_hello.c), else NULL */
  atoll_zap *zap;
  atoll_sender coord_tx;
  uint8_t pub[ATOLL_KEY_BYTES], sec[ATOLL_KEY_BYTES], cpub[ATOLL_KEY_BYTES];
  pthread_t hb;
  int hb_started;
  atomic_int hb_stop;
  atomic_uint step;
  atomic_ullong hb_revision; /* what heartbeats report */
  atomic_ullong hb_tokens_per_step, hb_sent; /* and for the status page: atoll_link_report */
  atomic_uint hb_loss;       /* (a float's bits; NaN: none yet) */
  uint64_t revision;
  atoll_link_stats stats;
  uint64_t hb_bytes;
  peer peers[MAX_PEERS];
  atoll_wire_member members[MAX_PEERS];
  uint8_t *rbuf;
  /* exchange scratch, each with its capacity */
  size_t cap_bytes, cap_mine, cap_got, cap_floats;
  uint8_t *send, *recv1, *recv2, *mine2, *got;
  double transfer_s; /* the last attempt's time from QUORUM to holding every piece */
  uint64_t transfer_b; /* and the bytes it sent to its peers meanwhile */
  float *sum, *decoded;
  int waited_told;
  int ended;          /* why a wait for a quorum ended without one (ATOLL_LINK_RUN_ENDED...), else 0 */
  const volatile sig_atomic_t *stop; /* NULL, or the run's stop flag */
  float *global, *momentum; /* the island's outer state (atoll_link_bind) */
  size_t state_n;
  uint32_t joined_step;
  uint64_t joined_from;  /* the revision held before the last join (atoll_link_unjoin) */
  double join_t0;        /* when the failed fetches began (0: none pending) */
  int fetches;           /* fetches begun (the test hook fails the first) */
  uint64_t last_qid; /* this island's previous quorum */
  struct { /* the commit in flight: COMMIT sent, its COMMITTED not read yet (link.c) */
    int pending, failed; /* failed: its answer was wrong or did not come; err says why */
    atoll_wire_msg req;
    double sent;
    char what[64];
    atoll_err err;
  } commit;
};

/* One attempt's state: the exchange of (step, frag) in quorum qid of K members, this
 * island at position k; piece floats per member, qb bytes each, in nch chunks. */
typedef struct {
  atoll_qtype q;
  float *x;
  size_t n;
  uint32_t step, frag;
  uint64_t qid;
  int K, k;
  const char *what;
  size_t piece, qb, CHUNK, nch, lo_k, hi_k;
  peer *peers[MAX_PEERS];
  uint8_t *arrived;           /* per chunk, the members whose phase-1 chunk arrived */
  size_t need, have1, have2, next2;
  int sent2, per_float;
  double t_quorum, last_progress, last_ask;
  uint64_t bytes0;
  uint64_t tokens;                 /* this island's contribution's tokens (sent in phase 1) */
  uint64_t tokens_of[MAX_PEERS];   /* each member's, from its phase-1 frames (valid where known) */
  uint8_t known[MAX_PEERS];
  float weight[MAX_PEERS];         /* K t_i / sum t: 1 each when the tokens are equal */
} xchg;
/* link_data.c: the steps of one attempt, called by link.c's attempt. Set-up: this
 * island's place in the quorum, the peers' sockets and the scratch (0, or -1 with err). */
int atoll_link_attempt_setup(atoll_link *l, xchg *e, atoll_err *err);
/* Phase 1: this island's encoding of each piece to its island. *bad: the first NaN or Inf. */
void atoll_link_send_phase1(atoll_link *l, xchg *e, size_t *bad);
/* Phase 2 as far as phase 1 allows: this island's mean piece to every peer. */
void atoll_link_send_phase2(atoll_link *l, xchg *e);
/* One DATA frame from the data socket, if one comes within 50 ms: checked, then stored
 * and counted, or dropped with one line. */
void atoll_link_receive(atoll_link *l, xchg *e);

/* link_data.c: the state transfer. A joining island fetches the committed state from the
 * donor named in STATE_FROM (0: adopted; 1: did not come, ask again; -1: err). */
int atoll_link_fetch_state(atoll_link *l, const atoll_wire_msg *sf, atoll_err *err);
/* A donor sends its global weights and outer momentum to the joining islands of a FEED. */
int atoll_link_send_state_to(atoll_link *l, const atoll_wire_msg *m, atoll_err *err);

/* link_streams.c: a peer's data streams. Opened (any open ones closed first; 0, or -1),
 * closed, and one message sent on the first stream with room (0, or -1: no connection
 * within 2 s, or no room within 2 x --net-timeout). */
int atoll_link_streams_open(atoll_link *l, peer *p);
void atoll_link_streams_close(peer *p);
int atoll_link_stream_send(atoll_link *l, peer *p, atoll_wire_msg *m);

/* One message from the coordinator, if one arrives within timeout_ms: 1, else 0 (a
 * malformed one is dropped with a line). */
int atoll_link_coord_poll(atoll_link *l, atoll_wire_msg *m, int timeout_ms);

/* link_hello.c: before connecting, watch the coordinator's socket; after the HELLO,
 * wait for WELCOME (0) or fail in one line: ERROR, a refused key, no answer. */
int atoll_link_watch_coord(atoll_link *l, atoll_err *err);
int atoll_link_greet(atoll_link *l, const atoll_wire_msg *hello, atoll_err *err);

#endif
