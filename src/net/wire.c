/* The islands' wire format (wire.h; payloads in docs/islands.md). The reader is a
 * bounds-checked cursor: every read checks what is left before it copies. */
#include "net/wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *NAMES[] = {"?", "HELLO", "HEARTBEAT", "READY", "QUORUM", "WAIT", "COMMIT",
                              "COMMITTED", "ERROR", "DATA", "DONE", "GO", "ABORT", "FEED", "STATE_FROM", "BYE", "WELCOME", "ASK", "SETTINGS", "UNITS", "UNIT"};

const char *atoll_wire_type_name(int type) {
  return type >= 1 && type <= ATOLL_WIRE_TYPE_MAX ? NAMES[type] : "unknown";
}

/* ----------------------------------------------------------------- reading --- */

typedef struct {
  const uint8_t *p;
  size_t left;
  int bad;
} rd;

static int take(rd *r, void *out, size_t n) {
  if (r->bad || r->left < n) {
    r->bad = 1;
    if (out) memset(out, 0, n);
    return -1;
  }
  if (out) memcpy(out, r->p, n);
  r->p += n;
  r->left -= n;
  return 0;
}

static uint64_t get_le(rd *r, int bytes) {
  uint8_t b[8] = {0};
  take(r, b, (size_t)bytes);
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static int fail(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (why && n) vsnprintf(why, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* A length-prefixed string of printable ASCII: 1..max bytes (endpoints) or 0..max (text). */
static int get_str(rd *r, char *out, size_t max, int allow_empty) {
  size_t n = (size_t)get_le(r, 2);
  if (r->bad || n > max || (n == 0 && !allow_empty) || r->left < n) return -1;
  for (size_t i = 0; i < n; i++)
    if (r->p[i] < 0x20 || r->p[i] > 0x7e) return -1;
  take(r, out, n);
  out[n] = 0;
  return 0;
}

static void get_sync(rd *r, atoll_wire_sync *s) {
  s->step = (uint32_t)get_le(r, 4);
  s->fragment = (uint32_t)get_le(r, 4);
  s->revision = get_le(r, 8);
  take(r, s->hash, ATOLL_WIRE_HASH);
  s->rank = (uint32_t)get_le(r, 4);
}

/* The header: magic, version, type, reserved bits, the type's size limit and that the
 * header's payload length is the frame's. Leaves r at the payload. */
static int parse_header(const uint8_t *buf, size_t len, atoll_wire_msg *m, rd *r, char *why, size_t whysz) {
  if (len < ATOLL_WIRE_HEADER) return fail(why, whysz, "truncated: %zu bytes, shorter than the %d-byte header", len, ATOLL_WIRE_HEADER);
  if (memcmp(buf, "ATIW", 4) != 0) return fail(why, whysz, "not an atoll islands message (bad magic)");
  if (buf[4] != ATOLL_WIRE_VERSION)
    return fail(why, whysz, "wire version %u, this build speaks %d", buf[4], ATOLL_WIRE_VERSION);
  int type = buf[5];
  if (type < 1 || type > ATOLL_WIRE_TYPE_MAX) return fail(why, whysz, "unknown message type %d", type);
  if (buf[6] || buf[7]) return fail(why, whysz, "%s: reserved header bits set", atoll_wire_type_name(type));
  *r = (rd){buf + 8, len - 8, 0};
  m->type = (atoll_wire_type)type;
  m->session = get_le(r, 8);
  m->seq = (uint32_t)get_le(r, 4);
  uint64_t plen = get_le(r, 4);
  size_t limit = type == ATOLL_WIRE_DATA ? ATOLL_WIRE_MAX_DATA : ATOLL_WIRE_MAX_CONTROL;
  if (plen + ATOLL_WIRE_HEADER > limit || len > limit)
    return fail(why, whysz, "%s: oversized (%llu bytes; at most %zu)", atoll_wire_type_name(type),
                (unsigned long long)(plen + ATOLL_WIRE_HEADER > len ? plen + ATOLL_WIRE_HEADER : len), limit);
  if (plen != r->left)
    return fail(why, whysz, "%s: %s (header says %llu payload bytes, frame has %zu)", atoll_wire_type_name(type),
                plen > r->left ? "truncated" : "trailing bytes", (unsigned long long)plen, r->left);
  return 0;
}

static int parse_hello(rd *r, atoll_wire_hello *h, const char *name, char *why, size_t whysz) {
  h->island = (uint32_t)get_le(r, 4);
  h->step = (uint32_t)get_le(r, 4);
  h->revision = get_le(r, 8);
  take(r, h->hash, ATOLL_WIRE_HASH);
  h->rank = (uint32_t)get_le(r, 4);
  h->ranks = (uint32_t)get_le(r, 4);
  h->layout = get_le(r, 8);
  if (get_str(r, h->endpoint, ATOLL_WIRE_MAX_ENDPOINT, 0)) return fail(why, whysz, "%s: bad endpoint", name);
  h->tokens_per_step = get_le(r, 8);
  uint32_t loss_bits = (uint32_t)get_le(r, 4);
  memcpy(&h->loss, &loss_bits, 4);
  h->sent_bytes = get_le(r, 8);
  if (h->island >= ATOLL_WIRE_MAX_MEMBERS) return fail(why, whysz, "%s: island %u out of range", name, h->island);
  if (h->ranks < 1 || h->ranks > ATOLL_WIRE_MAX_MEMBERS || h->rank >= h->ranks)
    return fail(why, whysz, "%s: rank %u of %u out of range", name, h->rank, h->ranks);
  return 0;
}

/* QUORUM, FEED and STATE_FROM: the members go into `members` (max_members of them). */
static int parse_quorum(rd *r, atoll_wire_quorum *q, atoll_wire_member *members, uint32_t max_members, const char *name,
                        char *why, size_t whysz) {
  q->step = (uint32_t)get_le(r, 4);
  q->fragment = (uint32_t)get_le(r, 4);
  q->revision = get_le(r, 8);
  q->id = get_le(r, 8);
  take(r, q->hash, ATOLL_WIRE_HASH);
  q->n = (uint32_t)get_le(r, 4);
  if (r->bad) return 0; /* (reported as truncated) */
  if (q->n < 1 || q->n > max_members || q->n > ATOLL_WIRE_MAX_MEMBERS)
    return fail(why, whysz, "%s: %u members (1 to %u allowed)", name, q->n, max_members);
  q->members = members;
  for (uint32_t i = 0; i < q->n; i++) {
    atoll_wire_member *mb = &members[i];
    mb->island = (uint32_t)get_le(r, 4);
    take(r, mb->key, ATOLL_WIRE_KEY);
    if (get_str(r, mb->endpoint, ATOLL_WIRE_MAX_ENDPOINT, 0)) return fail(why, whysz, "%s: member %u: bad endpoint", name, i);
    if (mb->island >= ATOLL_WIRE_MAX_MEMBERS || (i > 0 && mb->island <= members[i - 1].island))
      return fail(why, whysz, "%s: member islands must increase (member %u is island %u)", name, i, mb->island);
  }
  return 0;
}

/* DATA: the bytes stay where they are (d->bytes points into the frame). */
static int parse_data(rd *r, atoll_wire_data *d, const char *name, char *why, size_t whysz) {
  d->step = (uint32_t)get_le(r, 4);
  d->fragment = (uint32_t)get_le(r, 4);
  d->quorum = get_le(r, 8);
  d->from = (uint32_t)get_le(r, 4);
  d->phase = (uint8_t)get_le(r, 1);
  d->piece = (uint32_t)get_le(r, 4);
  d->offset = get_le(r, 8);
  d->total = get_le(r, 8);
  d->tokens = get_le(r, 8);
  d->len = (uint32_t)get_le(r, 4);
  if (r->bad) return 0; /* (reported as truncated) */
  if (d->phase < 1 || d->phase > 4) return fail(why, whysz, "%s: phase %u", name, d->phase);
  if (d->tokens > ((uint64_t)1 << 53) || (d->phase != 1 && d->tokens != 0))
    return fail(why, whysz, "%s: tokens %llu in phase %u", name, (unsigned long long)d->tokens, d->phase);
  if (d->from >= ATOLL_WIRE_MAX_MEMBERS || d->piece >= ATOLL_WIRE_MAX_MEMBERS)
    return fail(why, whysz, "%s: island %u / piece %u out of range", name, d->from, d->piece);
  /* no chunk is empty (a sender sends none of an empty piece): so offset < total */
  if (d->len == 0) return fail(why, whysz, "%s: empty range at %llu of %llu bytes", name, (unsigned long long)d->offset,
                               (unsigned long long)d->total);
  if (d->total > ((uint64_t)1 << 40) || d->offset > d->total || d->len > d->total - d->offset)
    return fail(why, whysz, "%s: range [%llu, +%u) outside %llu bytes", name, (unsigned long long)d->offset, d->len,
                (unsigned long long)d->total);
  if (d->len != r->left) return fail(why, whysz, "%s: %u data bytes announced, %zu present", name, d->len, r->left);
  d->bytes = r->p;
  take(r, NULL, d->len);
  return 0;
}

/* SETTINGS: the text stays in the frame (json points there). */
static int parse_settings(rd *r, atoll_wire_settings *s, const char *name, char *why, size_t whysz) {
  s->slot = (uint32_t)get_le(r, 4);
  s->open = (uint32_t)get_le(r, 4);
  s->len = (uint32_t)get_le(r, 4);
  if (r->bad) return 0; /* (reported as truncated) */
  if (s->slot >= ATOLL_WIRE_MAX_MEMBERS && s->slot != ATOLL_WIRE_NO_SLOT) return fail(why, whysz, "%s: slot %u out of range", name, s->slot);
  if (s->open > 1) return fail(why, whysz, "%s: open must be 0 or 1, not %u", name, s->open);
  if (s->len > ATOLL_WIRE_MAX_SETTINGS || s->len != r->left)
    return fail(why, whysz, "%s: %u bytes of settings announced, %zu present (at most %u)", name, s->len, r->left,
                ATOLL_WIRE_MAX_SETTINGS);
  for (uint32_t i = 0; i < s->len; i++)
    if ((r->p[i] < 0x20 || r->p[i] > 0x7e) && r->p[i] != '\t' && r->p[i] != '\n' && r->p[i] != '\r')
      return fail(why, whysz, "%s: byte %u of the settings is not printable ASCII", name, i);
  s->json = (const char *)r->p;
  take(r, NULL, s->len);
  return 0;
}

/* The payload of m->type. */
static int parse_payload(rd *r, atoll_wire_msg *m, atoll_wire_member *members, uint32_t max_members, char *why, size_t whysz) {
  const char *name = atoll_wire_type_name(m->type);
  switch (m->type) {
  case ATOLL_WIRE_HELLO:
  case ATOLL_WIRE_HEARTBEAT: return parse_hello(r, &m->u.hello, name, why, whysz);
  case ATOLL_WIRE_READY:
  case ATOLL_WIRE_COMMIT:
  case ATOLL_WIRE_COMMITTED:
  case ATOLL_WIRE_DONE:
  case ATOLL_WIRE_GO:
  case ATOLL_WIRE_ABORT:
  case ATOLL_WIRE_BYE:
    get_sync(r, &m->u.sync);
    if (!r->bad && m->u.sync.rank >= ATOLL_WIRE_MAX_MEMBERS) return fail(why, whysz, "%s: rank %u out of range", name, m->u.sync.rank);
    return 0;
  case ATOLL_WIRE_QUORUM:
  case ATOLL_WIRE_FEED:
  case ATOLL_WIRE_STATE_FROM: return parse_quorum(r, &m->u.quorum, members, max_members, name, why, whysz);
  case ATOLL_WIRE_WAIT:
  case ATOLL_WIRE_WELCOME:
  case ATOLL_WIRE_ERROR:
    if (get_str(r, m->u.text, ATOLL_WIRE_MAX_TEXT, 1)) return fail(why, whysz, "%s: bad text", name);
    return 0;
  case ATOLL_WIRE_DATA: return parse_data(r, &m->u.data, name, why, whysz);
  case ATOLL_WIRE_ASK:
    m->u.settings.rank = (uint32_t)get_le(r, 4);
    if (!r->bad && m->u.settings.rank >= ATOLL_WIRE_MAX_MEMBERS) return fail(why, whysz, "%s: rank %u out of range", name, m->u.settings.rank);
    return 0;
  case ATOLL_WIRE_SETTINGS: return parse_settings(r, &m->u.settings, name, why, whysz);
  case ATOLL_WIRE_UNITS:
  case ATOLL_WIRE_UNIT: {
    atoll_wire_units *u = &m->u.units;
    u->rank = (uint32_t)get_le(r, 4), u->start = (uint32_t)get_le(r, 4), u->end = (uint32_t)get_le(r, 4);
    u->next_start = (uint32_t)get_le(r, 4), u->next_end = (uint32_t)get_le(r, 4), u->lost_from = (uint32_t)get_le(r, 4);
    u->unit = get_le(r, 8), u->next_unit = get_le(r, 8);
    if (!r->bad && u->rank >= ATOLL_WIRE_MAX_MEMBERS) return fail(why, whysz, "%s: rank %u out of range", name, u->rank);
    return 0;
  }
  }
  return 0;
}

int atoll_wire_parse(const uint8_t *buf, size_t len, atoll_wire_msg *m, atoll_wire_member *members,
                     uint32_t max_members, char *why, size_t whysz) {
  memset(m, 0, sizeof *m);
  rd r;
  if (parse_header(buf, len, m, &r, why, whysz) || parse_payload(&r, m, members, max_members, why, whysz)) return -1;
  const char *name = atoll_wire_type_name(m->type);
  if (r.bad) return fail(why, whysz, "%s: truncated payload", name);
  if (r.left) return fail(why, whysz, "%s: %zu trailing bytes", name, r.left);
  return 0;
}

/* ----------------------------------------------------------------- writing --- */

typedef struct {
  uint8_t *p;
  size_t left;
  int bad;
} wr;

static void put(wr *w, const void *src, size_t n) {
  if (w->bad || w->left < n) {
    w->bad = 1;
    return;
  }
  if (n == 0) return; /* memcpy wants real pointers even for 0 bytes */
  memcpy(w->p, src, n);
  w->p += n;
  w->left -= n;
}

static void put_le(wr *w, uint64_t v, int bytes) {
  uint8_t b[8];
  for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
  put(w, b, (size_t)bytes);
}

static void put_str(wr *w, const char *s, size_t max) {
  size_t n = strlen(s);
  if (n > max) {
    w->bad = 1;
    return;
  }
  put_le(w, n, 2);
  put(w, s, n);
}

static void put_sync(wr *w, const atoll_wire_sync *s) {
  put_le(w, s->step, 4);
  put_le(w, s->fragment, 4);
  put_le(w, s->revision, 8);
  put(w, s->hash, ATOLL_WIRE_HASH);
  put_le(w, s->rank, 4);
}

size_t atoll_wire_size(const atoll_wire_msg *m) {
  switch (m->type) {
  case ATOLL_WIRE_DATA: return ATOLL_WIRE_HEADER + 53 + m->u.data.len;
  case ATOLL_WIRE_SETTINGS: return ATOLL_WIRE_HEADER + 12 + m->u.settings.len;
  case ATOLL_WIRE_QUORUM:
  case ATOLL_WIRE_FEED:
  case ATOLL_WIRE_STATE_FROM: return ATOLL_WIRE_HEADER + 28 + ATOLL_WIRE_HASH + (size_t)m->u.quorum.n * (4 + ATOLL_WIRE_KEY + 2 + ATOLL_WIRE_MAX_ENDPOINT);
  default: return ATOLL_WIRE_HEADER + 50 + ATOLL_WIRE_MAX_TEXT + 2;
  }
}

size_t atoll_wire_encode(const atoll_wire_msg *m, uint8_t *out, size_t cap) {
  wr w = {out, cap, 0};
  uint8_t head[8] = {'A', 'T', 'I', 'W', ATOLL_WIRE_VERSION, (uint8_t)m->type, 0, 0};
  put(&w, head, 8);
  put_le(&w, m->session, 8);
  put_le(&w, m->seq, 4);
  uint8_t *len_at = w.p;
  put_le(&w, 0, 4);
  switch (m->type) {
  case ATOLL_WIRE_HELLO:
  case ATOLL_WIRE_HEARTBEAT:
    put_le(&w, m->u.hello.island, 4);
    put_le(&w, m->u.hello.step, 4);
    put_le(&w, m->u.hello.revision, 8);
    put(&w, m->u.hello.hash, ATOLL_WIRE_HASH);
    put_le(&w, m->u.hello.rank, 4);
    put_le(&w, m->u.hello.ranks, 4);
    put_le(&w, m->u.hello.layout, 8);
    put_str(&w, m->u.hello.endpoint, ATOLL_WIRE_MAX_ENDPOINT);
    put_le(&w, m->u.hello.tokens_per_step, 8);
    uint32_t loss_bits;
    memcpy(&loss_bits, &m->u.hello.loss, 4);
    put_le(&w, loss_bits, 4);
    put_le(&w, m->u.hello.sent_bytes, 8);
    break;
  case ATOLL_WIRE_READY:
  case ATOLL_WIRE_COMMIT:
  case ATOLL_WIRE_COMMITTED:
  case ATOLL_WIRE_DONE:
  case ATOLL_WIRE_GO:
  case ATOLL_WIRE_ABORT:
  case ATOLL_WIRE_BYE: put_sync(&w, &m->u.sync); break;
  case ATOLL_WIRE_QUORUM:
  case ATOLL_WIRE_FEED:
  case ATOLL_WIRE_STATE_FROM:
    put_le(&w, m->u.quorum.step, 4);
    put_le(&w, m->u.quorum.fragment, 4);
    put_le(&w, m->u.quorum.revision, 8);
    put_le(&w, m->u.quorum.id, 8);
    put(&w, m->u.quorum.hash, ATOLL_WIRE_HASH);
    put_le(&w, m->u.quorum.n, 4);
    for (uint32_t i = 0; i < m->u.quorum.n; i++) {
      put_le(&w, m->u.quorum.members[i].island, 4);
      put(&w, m->u.quorum.members[i].key, ATOLL_WIRE_KEY);
      put_str(&w, m->u.quorum.members[i].endpoint, ATOLL_WIRE_MAX_ENDPOINT);
    }
    break;
  case ATOLL_WIRE_WAIT:
  case ATOLL_WIRE_WELCOME:
  case ATOLL_WIRE_ERROR: put_str(&w, m->u.text, ATOLL_WIRE_MAX_TEXT); break;
  case ATOLL_WIRE_DATA:
    put_le(&w, m->u.data.step, 4);
    put_le(&w, m->u.data.fragment, 4);
    put_le(&w, m->u.data.quorum, 8);
    put_le(&w, m->u.data.from, 4);
    put_le(&w, m->u.data.phase, 1);
    put_le(&w, m->u.data.piece, 4);
    put_le(&w, m->u.data.offset, 8);
    put_le(&w, m->u.data.total, 8);
    put_le(&w, m->u.data.tokens, 8);
    put_le(&w, m->u.data.len, 4);
    put(&w, m->u.data.bytes, m->u.data.len);
    break;
  case ATOLL_WIRE_ASK: put_le(&w, m->u.settings.rank, 4); break;
  case ATOLL_WIRE_SETTINGS:
    if (m->u.settings.len > ATOLL_WIRE_MAX_SETTINGS) return 0;
    put_le(&w, m->u.settings.slot, 4);
    put_le(&w, m->u.settings.open, 4);
    put_le(&w, m->u.settings.len, 4);
    put(&w, m->u.settings.json, m->u.settings.len);
    break;
  case ATOLL_WIRE_UNITS:
  case ATOLL_WIRE_UNIT: {
    const atoll_wire_units *u = &m->u.units;
    put_le(&w, u->rank, 4), put_le(&w, u->start, 4), put_le(&w, u->end, 4);
    put_le(&w, u->next_start, 4), put_le(&w, u->next_end, 4), put_le(&w, u->lost_from, 4);
    put_le(&w, u->unit, 8), put_le(&w, u->next_unit, 8);
    break;
  }
  default: return 0;
  }
  if (w.bad) return 0;
  size_t n = cap - w.left, plen = n - ATOLL_WIRE_HEADER;
  for (int i = 0; i < 4; i++) len_at[i] = (uint8_t)(plen >> (8 * i));
  return n;
}
