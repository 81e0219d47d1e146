/* The islands' wire format: every message between a coordinator and its islands, and
 * between islands, is one ZeroMQ frame of a 24-byte header and a typed payload.
 *
 *   offset size  field
 *   0      4     magic "ATIW"
 *   4      1     version (ATOLL_WIRE_VERSION)
 *   5      1     type (atoll_wire_type)
 *   6      2     reserved, zero
 *   8      8     session: a random number per sending socket (replay check)
 *   16     4     seq: strictly increasing per session (replay check)
 *   20     4     payload length in bytes (the frame is exactly 24 + length)
 *
 * All integers little-endian. Payloads per type are in docs/islands.md. The parser
 * checks the magic, version, type, reserved bits, that the frame length equals
 * 24 + length, the type's size limit (control messages ATOLL_WIRE_MAX_CONTROL, data
 * ATOLL_WIRE_MAX_DATA) and every field of the payload before anything uses it. */
#ifndef ATOLL_NET_WIRE_H
#define ATOLL_NET_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define ATOLL_WIRE_VERSION 6
#define ATOLL_WIRE_HEADER 24
#define ATOLL_WIRE_MAX_CONTROL (64u << 10)
#define ATOLL_WIRE_MAX_DATA (16u << 20)
#define ATOLL_WIRE_HASH 32       /* BLAKE2b-256 of the global weights */
#define ATOLL_WIRE_KEY 32        /* a CURVE public key, binary */
#define ATOLL_WIRE_MAX_ENDPOINT 255
#define ATOLL_WIRE_MAX_MEMBERS 1024
#define ATOLL_WIRE_MAX_TEXT 1024
#define ATOLL_WIRE_MAX_SETTINGS (32u << 10) /* a run's settings, JSON text */
/* The WAIT text for a quorum below --min-islands (islands present, islands needed):
 * written by the coordinator, read back by an island that has fewer slots (--islands)
 * than the coordinator needs, which then stops at once with one line. */
#define ATOLL_WIRE_WAIT_ISLANDS "waiting for islands: %d present, at least %d needed (--min-islands)"
/* The starts of the ERRORs that tell a joining island no commit will come: the run
 * ended (an island finished, none holding the state is left), or every island holding
 * the state stopped or left (the run is paused). The island ends with a checkpoint. */
#define ATOLL_WIRE_RUN_ENDED "the run ended at step "
#define ATOLL_WIRE_NO_DONOR "no commit is coming: "

typedef enum {
  ATOLL_WIRE_HELLO = 1,     /* island -> coordinator: who I am, where I listen, what I hold */
  ATOLL_WIRE_HEARTBEAT = 2, /* island -> coordinator: the same body, periodically */
  ATOLL_WIRE_READY = 3,     /* island -> coordinator: ready for exchange (step, fragment) */
  ATOLL_WIRE_QUORUM = 4,    /* coordinator -> island: the members of that exchange */
  ATOLL_WIRE_WAIT = 5,      /* coordinator -> island: not enough islands yet (text) */
  ATOLL_WIRE_COMMIT = 6,    /* island -> coordinator: exchange done, hash of global weights */
  ATOLL_WIRE_COMMITTED = 7, /* coordinator -> island: every member agrees (revision, hash) */
  ATOLL_WIRE_ERROR = 8,     /* coordinator -> island: the exchange failed (text) */
  ATOLL_WIRE_DATA = 9,      /* island -> island: a range of an encoded outer gradient piece */
  ATOLL_WIRE_DONE = 10,     /* island -> coordinator: it holds every piece of quorum `revision` */
  ATOLL_WIRE_GO = 11,       /* coordinator -> island: every member is done: apply the result */
  ATOLL_WIRE_ABORT = 12,    /* coordinator -> island: a member died or stalled: discard, retry */
  ATOLL_WIRE_FEED = 13,     /* coordinator -> island: send your state to these joining islands */
  ATOLL_WIRE_STATE_FROM = 14, /* coordinator -> joining island: fetch the state from this member */
  ATOLL_WIRE_BYE = 15,      /* island -> coordinator: it finished its run and leaves */
  ATOLL_WIRE_WELCOME = 16,  /* coordinator -> island: its HELLO was taken (text: the run's state) */
  ATOLL_WIRE_ASK = 17,      /* island -> coordinator, before its HELLO: the run's settings and its slot? */
  ATOLL_WIRE_SETTINGS = 18, /* coordinator -> island: the answer */
  ATOLL_WIRE_UNITS = 19,    /* island -> coordinator (open runs): the data units of this phase and the next? */
  ATOLL_WIRE_UNIT = 20,     /* coordinator -> island: the answer */
  ATOLL_WIRE_TYPE_MAX = 20
} atoll_wire_type;

/* HELLO and HEARTBEAT */
typedef struct {
  uint32_t island;   /* the island's slot (--island-id) */
  uint32_t step;     /* inner steps done */
  uint64_t revision; /* last committed outer revision it holds */
  uint8_t hash[ATOLL_WIRE_HASH];
  uint32_t rank, ranks; /* this rank of the island's job, and the job's ranks (1: one process) */
  uint64_t layout;      /* fingerprint of the rank's inner layout: slices must line up */
  char endpoint[ATOLL_WIRE_MAX_ENDPOINT + 1]; /* where its data socket listens */
  /* progress, for the coordinator's status page only (status_http.h): the island's
   * tokens per inner step, its last training loss (NaN: none yet) and the bytes this
   * rank sent so far (frames, with ZMTP and CURVE overhead) */
  uint64_t tokens_per_step;
  float loss;
  uint64_t sent_bytes;
} atoll_wire_hello;

/* READY, COMMIT, COMMITTED, DONE, GO, ABORT, BYE: one exchange is (step, fragment); in
 * DONE, GO and ABORT `revision` holds the quorum's id; rank: the island rank that
 * sends it (or that the coordinator answers) */
typedef struct {
  uint32_t step, fragment;
  uint64_t revision;
  uint8_t hash[ATOLL_WIRE_HASH];
  uint32_t rank;
} atoll_wire_sync;

typedef struct {
  uint32_t island;
  uint8_t key[ATOLL_WIRE_KEY];
  char endpoint[ATOLL_WIRE_MAX_ENDPOINT + 1];
} atoll_wire_member;

/* QUORUM: members in island order (the order of the sum); FEED: the joining islands
 * to send state to; STATE_FROM: the member to fetch it from. hash: the committed
 * global weights' hash of `revision`, after step `step` (FEED, STATE_FROM) */
typedef struct {
  uint32_t step, fragment;
  uint64_t revision;
  uint64_t id;                /* this quorum's number: a retry gets a new one */
  uint8_t hash[ATOLL_WIRE_HASH];
  uint32_t n;
  atoll_wire_member *members; /* points into storage the caller gives (max members) */
} atoll_wire_quorum;

/* DATA: bytes [offset, offset + len) of `total` of piece `piece`, phase 1 (the
 * sender's encoding of the receiver's piece), 2 (the sender's encoded mean of its
 * piece), 3 (a joining island's state: global weights, fp32) or 4 (its outer
 * momentum, fp32) */
typedef struct {
  uint32_t step, fragment;
  uint64_t quorum; /* the quorum's id: data of an aborted attempt is stale */
  uint32_t from;  /* sender's island */
  uint8_t phase;  /* 1 to 4 */
  uint32_t piece;
  uint64_t offset, total;
  uint64_t tokens; /* phase 1: the tokens the sender's outer gradient was trained on (its
                      weight in the mean, docs/islands.md); other phases: 0 */
  uint32_t len;
  const uint8_t *bytes; /* points into the frame */
} atoll_wire_data;

/* ASK: rank (of the asking island's job). SETTINGS: slot, the island slot of the
 * asker's key (its place in the coordinator's allow-list, sorted by file name; in an
 * open run the slot the coordinator gave that key), or ATOLL_WIRE_NO_SLOT; open: 1 in
 * an open run (coordinator --open: slots by key, data in units), else 0; json: the
 * run's settings (--run FILE), len bytes of printable ASCII, tab, CR or LF, pointing
 * into the frame (not NUL-terminated); len 0: none. */
#define ATOLL_WIRE_NO_SLOT 0xffffffffu
typedef struct {
  uint32_t rank, slot, open;
  uint32_t len;
  const char *json;
} atoll_wire_settings;

/* UNITS: island rank `rank` begins phase (start, end] and asks ahead for (next_start,
 * next_end]; lost_from: the phases it began from this step on lost their work (a join;
 * none: start). UNIT: their data units (unit, next_unit), the rest repeated (src/net/units.h) */
typedef struct {
  uint32_t rank, start, end, next_start, next_end, lost_from;
  uint64_t unit, next_unit;
} atoll_wire_units;

typedef struct {
  atoll_wire_type type;
  uint64_t session;
  uint32_t seq;
  union {
    atoll_wire_hello hello;
    atoll_wire_sync sync;
    atoll_wire_quorum quorum;
    atoll_wire_data data;
    atoll_wire_settings settings;
    atoll_wire_units units;
    char text[ATOLL_WIRE_MAX_TEXT + 1];
  } u;
} atoll_wire_msg;

const char *atoll_wire_type_name(int type);

/* Parses one frame. members: storage for a QUORUM's members (max_members of them).
 * Returns 0, or -1 with a one-line reason in why (never reads past len). */
int atoll_wire_parse(const uint8_t *buf, size_t len, atoll_wire_msg *m, atoll_wire_member *members,
                     uint32_t max_members, char *why, size_t whysz);

/* Encodes m into out (capacity cap); returns the frame length, or 0 if it does not fit
 * or a field is out of range. */
size_t atoll_wire_encode(const atoll_wire_msg *m, uint8_t *out, size_t cap);

/* The size a message's encoding takes (upper bound for DATA: header + fixed + len). */
size_t atoll_wire_size(const atoll_wire_msg *m);

#endif
