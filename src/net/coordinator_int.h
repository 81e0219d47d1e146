/* The coordinator's internals (coordinator.h), shared by its files: coordinator.c (the
 * loop and message handling), coordinator_members.c (membership, heartbeats, sends),
 * coordinator_quorum.c (quorum and exchange), coordinator_commit.c (commits and state
 * joins) and coordinator_state.c (the state file). Not part of the library's API. */
#ifndef ATOLL_NET_COORDINATOR_INT_H
#define ATOLL_NET_COORDINATOR_INT_H

#include "net/coordinator.h"
#include "net/keys.h"
#include "net/sock.h"
#include "net/units.h"
#include "net/wire.h"
#include "net/zap.h"

#include <stddef.h>
#include <stdint.h>

#define MAX_MEMBERS 256
#define SESSIONS 8  /* live sessions per member (replays: coordinator_members.c) */
#define RETIRED 64  /* and the retired ones still checked */

typedef struct {
  uint8_t rid[256];
  size_t rid_len;
  int fd; /* the connection it came on (-1: unknown): see member.closed_at */
} route;

typedef struct {
  int used;
  uint8_t key[ATOLL_KEY_BYTES];
  char keyz[ATOLL_KEY_Z85 + 1];
  uint32_t island, step;
  uint32_t rank, ranks;   /* a rank of the island's job, of ranks (docs/islands.md, "Islands of several ranks") */
  uint64_t layout;
  char endpoint[ATOLL_WIRE_MAX_ENDPOINT + 1];
  double last_heard;
  int fds[2];             /* the connections its last messages came on (its heartbeat's, its control's): */
  char peers[2][64];      /* descriptor and peer (atoll_sock_peer), which a later connection given the
                             same descriptor does not share */
  double closed_at;       /* when one of them closed with nothing heard since (0: not): a killed island
                             leaves CLOSED_GRACE later, not after --island-timeout */
  uint64_t sessions[SESSIONS]; /* its senders' sessions, last seq and when heard (0: free) */
  uint32_t seqs[SESSIONS];
  double heard[SESSIONS];
  uint64_t retired[RETIRED];   /* sessions silent for --island-timeout, and their last seq */
  uint32_t retired_seqs[RETIRED];
  int next_retired;
  int ready;              /* READY for (ready_step, ready_frag) */
  uint32_t ready_step, ready_frag;
  route ready_to;
  int committed;          /* COMMIT for commit_step */
  uint32_t commit_step;
  uint8_t commit_hash[ATOLL_WIRE_HASH];
  route commit_to;
  int waiting_told;       /* told to wait for this READY */
  uint64_t gen;           /* registration number: a slot reused by another island differs */
  int joining;            /* 1: behind, fetches the state at the next commit; 2: told where */
  uint64_t hello_session; /* the session of its HELLO: another one is a restarted process */
  double state_sent;      /* when it was told where to fetch the state (joining 2) */
  uint64_t held;          /* the status page's (coordinator_status.c), from its heartbeats: */
  uint64_t tokens_per_step, sent_bytes; /* the revision it holds, its progress and loss */
  float loss;
  int probing, probe_fd;  /* its data endpoint's probe (coordinator_probe.c; 1 connecting, 2 reading the
                             greeting): the WELCOME waits for it */
  uint8_t probe_buf[10];
  int probe_got;
  double probe_t0;
  char welcome[200];
  route welcome_to;
} member;

/* A set of members (slot and registration), in island order. */
typedef struct {
  int slot[MAX_MEMBERS];
  uint64_t gen[MAX_MEMBERS];
  uint32_t island[MAX_MEMBERS]; /* and rank: kept after a member left (an open run's commit marks its units */
  uint32_t rank[MAX_MEMBERS];   /* done; a member that registers again takes its entry back) */
  int done[MAX_MEMBERS];
  int n;
  uint32_t step, frag;
  uint64_t id;
  double opened;
  int open;
  int rebuilt; /* the commit group was rebuilt from COMMITs (a restarted coordinator), not from a GO */
} group;

/* A line repeated for the same key is said once per 10 s (retrying peers and
 * heartbeats repeat their cause): the last keys said, and when. */
#define SAID_KEYS 16
typedef struct {
  char key[SAID_KEYS][ATOLL_KEY_Z85 + 1];
  double at[SAID_KEYS];
} said_lately;

typedef struct {
  const atoll_coordinator_config *cfg;
  char state_path[4200];
  void *ctx, *sock;
  atoll_zap *zap;
  atoll_sender tx;
  member m[MAX_MEMBERS];
  uint64_t revision;
  uint8_t hash[ATOLL_WIRE_HASH];
  uint32_t last_step;
  group xq;        /* the exchange in flight (open: waiting for DONE from every member) */
  group cq;        /* the members that applied the last exchange: they commit its step */
  uint64_t next_id, go_id;
  uint64_t gens;
  int last_members; /* islands in the last exchange applied */
  int restored_members; /* members in the state file: wait for them (or the grace) after a restart */
  double started;
  double first_ready; /* when the first island became ready for the next exchange (0: none yet) */
  atoll_wire_member qmem[MAX_MEMBERS]; /* the open exchange's members, resent on a repeated READY */
  uint32_t qrank[MAX_MEMBERS];         /* their ranks: rank r's QUORUM lists the rank-r members */
  uint32_t ranks;                      /* ranks per island in this run (0: none registered yet) */
  uint64_t layouts[MAX_MEMBERS];       /* the inner layout's fingerprint of each rank */
  int layout_set[MAX_MEMBERS];
  uint8_t rank_hash[MAX_MEMBERS][ATOLL_WIRE_HASH]; /* the committed hash of each rank's slice */
  /* membership changes of the run (state file "counts"; restored after a restart):
   * members that registered, left (silent or stalled) or restarted, and islands that
   * joined with the committed state */
  uint64_t n_registered, n_left, n_restarted, n_state_joins, n_finished;
  int unconfirmed;  /* restored at a revision > 0, and no island of that run seen yet */
  int refused_run;  /* islands of another run were refused (logged once) */
  int finished_here; /* members that said goodbye (BYE) to this process */
  uint64_t bye_sessions[RETIRED]; /* the sessions of members that said goodbye: a heartbeat */
  int next_bye;                   /* of theirs still in flight is not a new member */
  int lock_fd;      /* the state file's lock (-1: none) */
  said_lately refused; /* a refused layout */
  said_lately unreg;   /* messages from an allowed key that is not a member */
  said_lately refused_units; /* refused UNITS (an island asks again every second) */
  said_lately held_by;       /* HELLOs for an island that another key holds */
  said_lately full;    /* HELLOs refused with MAX_MEMBERS members (any island: one key, "full") */
  uint64_t n_full;     /* and how many */
  char slots[MAX_MEMBERS][ATOLL_KEY_Z85 + 1]; /* the allow-list's keys, by file name: slot i (ASK); in an
                                                 open run, the keys in the order of their first ASK */
  int nslots;
  atoll_units units;     /* an open run's data units (units.h) */
  double slot_heard[MAX_MEMBERS]; /* when an island of that slot was last a member or asked (0: not since the start) */
  char allowed[4200];    /* the allow-list directory (an open run reads it again for new keys) */
  double allowed_read;   /* when it was last read */
  int state_dirty;       /* a change to write within a second (atoll_coord_save_state_soon) */
  double state_saved;    /* when atoll_coord_save_state_due last wrote it */
  char allowed_said[600]; /* the trouble last said reading it again ("": none) */
  struct coord_view *view; /* the status page (coordinator_status.c; NULL: none) */
  uint8_t buf[ATOLL_WIRE_MAX_DATA + 1];
} coord;

/* coordinator_settings.c: the allow-list's keys in file-name order (slots), and the
 * answer to an ASK */
int atoll_coord_load_slots(coord *c, const char *allowed, atoll_err *err);
void atoll_coord_on_ask(coord *c, const route *from, const char *keyz, const char *who, uint32_t rank);

/* coordinator_open.c: an open run (--open 1; docs/islands.md, "Open membership"): slots
 * given to keys at their first ASK, the data units, and the allow-list read again */
int atoll_coord_open_slot(coord *c, const char *keyz); /* the key's slot (a new one at its first ASK); -1: none left */
int atoll_coord_slot_of(const coord *c, const char *keyz); /* the key's slot, or -1 */
void atoll_coord_on_units(coord *c, const route *from, const char *keyz, const char *who, const atoll_wire_units *u);
void atoll_coord_units_committed(coord *c, uint32_t island, uint32_t step);
void atoll_coord_units_left(coord *c, uint32_t island);
/* coordinator_members.c: a connection closed (monitor.h): the members last heard on it
 * leave CLOSED_GRACE later unless heard again */
void atoll_coord_connection_closed(coord *c, int fd, const char *peer);
void atoll_coord_heard_on(member *m, int fd); /* after a member of it left: its units go back when none is left */
void atoll_coord_reread_allowed(coord *c);          /* every 2 s: keys added to allowed/ meanwhile are allowed,
                                                       and the units of islands gone for --island-timeout go back */

/* coordinator_probe.c: the WELCOME to a HELLO (text) goes once the island's data
 * endpoint answered a TCP connect, or did not within 2 s, and says which */
void atoll_coord_probe_start(coord *c, member *m, const route *from, const char *text);
void atoll_coord_probe_poll(coord *c); /* each turn of the loop */

/* coordinator_members.c */
void atoll_coord_hex(const uint8_t *h, char out[17]); /* the first 8 bytes of a hash, in hex */
int atoll_coord_say(said_lately *s, const char *keyz); /* 1: log it now (and it is noted) */
int atoll_coord_live(const coord *c);
void atoll_coord_name_of(const coord *c, const char *keyz, const char *addr, char *out, size_t n);
member *atoll_coord_by_key(coord *c, const char *keyz, uint32_t rank);
int atoll_coord_island_whole(const coord *c, uint32_t island);
int atoll_coord_island_ranks(const coord *c, uint32_t island);
void atoll_coord_send_to(coord *c, const route *r, atoll_wire_msg *msg);
void atoll_coord_send_text(coord *c, const route *r, atoll_wire_type type, const char *text);
void atoll_coord_send_sync(coord *c, const route *r, atoll_wire_type type, uint32_t step, uint32_t frag, uint64_t v,
                           const uint8_t *hash);
int atoll_coord_in_group(const coord *c, const group *g, const member *m);
member *atoll_coord_group_member(coord *c, const group *g, int j);
/* 0: take the message; 1: replayed; 2: a new session while SESSIONS are live */
int atoll_coord_replayed(member *m, uint64_t session, uint32_t seq, double now, double window);
member *atoll_coord_register_island(coord *c, const char *keyz, const atoll_wire_hello *h, const route *from, const char *addr);
void atoll_coord_forget_reshaped(coord *c, const char *keyz, const atoll_wire_hello *h);
void atoll_coord_expire(coord *c);

/* coordinator_quorum.c */
void atoll_coord_abort_exchange(coord *c, const char *why);
void atoll_coord_mark_behind(coord *c, member *m, uint32_t step);
void atoll_coord_send_quorum(coord *c, member *m);
void atoll_coord_try_quorum(coord *c);
void atoll_coord_try_go(coord *c);

/* coordinator_commit.c */
void atoll_coord_try_commit(coord *c);
/* Joining islands fetch the last committed state now when too few islands are left
 * for the next exchange (coordinator_commit.c); 1 when some were told where. */
int atoll_coord_feed_waiting(coord *c);

/* coordinator_status.c: the status page (--status-listen, status_http.h); each a no-op without one */
int atoll_coord_status_start(coord *c, atoll_err *err);
void atoll_coord_status_publish(coord *c); /* after each event of the loop */
void atoll_coord_status_bye(coord *c, const member *m, uint32_t step);
void atoll_coord_status_commit(coord *c, group *g); /* after revision c->revision was committed */
void atoll_coord_status_linger(coord *c, const volatile sig_atomic_t *stop);
void atoll_coord_status_stop(coord *c);

/* coordinator_state.c */
#define COORD_COUNTS 5 /* counts: registered, left, restarted, state_joins, finished */
typedef struct {
  uint64_t revision;
  uint32_t step, ranks;
  uint8_t hash[ATOLL_WIRE_HASH];
  uint8_t rank_hash[MAX_MEMBERS][ATOLL_WIRE_HASH];
  uint64_t counts[COORD_COUNTS];
  int members;
  char slots[MAX_MEMBERS][ATOLL_KEY_Z85 + 1]; /* an open run's (absent: none) */
  int nslots;
  int has_units;
  atoll_units units;
} coord_saved;
/* Parses a state file's text (path names it in errors): 0, or -1 with one line. */
int atoll_coord_state_parse(const char *text, size_t len, const char *path, coord_saved *out, atoll_err *err);
void atoll_coord_save_state(coord *c);
/* A registration's change: written within a second (atoll_coord_save_state_due, from the
 * loop), not at once: a crowd of islands joining writes the file once a second, not once
 * each (a member missing from it after a crash registers again by its heartbeat). */
void atoll_coord_save_state_soon(coord *c); /* (coordinator_members.c) */
void atoll_coord_save_state_due(coord *c);
int atoll_coord_load_state(coord *c, atoll_err *err);
int atoll_coord_lock_state(coord *c, atoll_err *err);

#endif
