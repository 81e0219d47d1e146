/* An island's data plane (link.h): moving an exchange's bytes between islands, apart
 * from the control logic with the coordinator (link.c, which calls in here through
 * link_internal.h):
 *   - peers: `streams` CURVE PUSH sockets each (link_streams.c), made anew when broken
 *     (peer_for);
 *   - sending: a piece cut into chunks (chunk_of) spread over the streams, sent again
 *     once on fresh sockets when a send fails (send_chunks, send_piece);
 *   - an attempt's two phases: its set-up and scratch (atoll_link_attempt_setup, grow),
 *     phase 1 (atoll_link_send_phase1), phase 2 (atoll_link_send_phase2, sum_chunk);
 *   - receipt: one DATA frame at a time, each checked against the exchange before it
 *     writes anything (atoll_link_receive, take_data, chunk_at);
 *   - the state transfer: a joining island's fetch (atoll_link_fetch_state) and its
 *     donor's send (atoll_link_send_state_to). */
#include "net/link_internal.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define MAX_CHUNK (1u << 20)

/* Chunk size of a piece of qb bytes: about a sixteenth of it (so that even small
 * pieces spread over the streams), whole 4 KiB (at least one: a rank of a multi-rank
 * island may hold nothing of a fragment, qb = 0), at most 1 MiB. Sender and receiver
 * derive it alike. */
static size_t chunk_of(size_t qb) {
  size_t c = ((qb + 15) / 16 + 4095) / 4096 * 4096;
  return c < 4096 ? 4096 : c < MAX_CHUNK ? c : MAX_CHUNK;
}

/* ---------------------------------------------------------------- exchange --- */

static peer *peer_for(atoll_link *l, const atoll_wire_member *mb, atoll_err *err) {
  peer *free_slot = NULL;
  for (int i = 0; i < MAX_PEERS; i++) {
    peer *p = &l->peers[i];
    if (p->used && p->island == mb->island) {
      if (!p->broken && memcmp(p->key, mb->key, ATOLL_KEY_BYTES) == 0 && strcmp(p->endpoint, mb->endpoint) == 0) return p;
      atoll_link_streams_close(p);
      p->used = 0;
    }
    if (!p->used && !free_slot) free_slot = p;
  }
  peer *p = free_slot;
  if (!p) {
    atoll_fail(err, "too many peers");
    return NULL;
  }
  uint64_t bytes = p->tx.bytes;
  memset(p, 0, sizeof *p);
  p->island = mb->island;
  memcpy(p->key, mb->key, ATOLL_KEY_BYTES);
  snprintf(p->endpoint, sizeof p->endpoint, "%s", mb->endpoint);
  atoll_sender_init(&p->tx);
  p->tx.bytes = bytes;
  if (atoll_link_streams_open(l, p)) {
    atoll_fail(err, "island %u: cannot connect to %s: %s", p->island, p->endpoint, zmq_strerror(zmq_errno()));
    atoll_link_streams_close(p);
    return NULL;
  }
  p->used = 1;
  return p;
}

/* Scratch for an exchange of K pieces of qb bytes (piece floats, nch chunks each);
 * each buffer grows on its own (K changes between exchanges). */
static int grow(atoll_link *l, size_t qb, int members, size_t piece, size_t nch) {
  size_t need = qb * (size_t)members + 1, gotn = 2 * (size_t)members * nch + nch + 1, fl = sizeof(float) * (piece + 1);
  if (need <= l->cap_bytes && qb + 1 <= l->cap_mine && gotn <= l->cap_got && fl <= l->cap_floats) return 0;
  free(l->send), free(l->recv1), free(l->recv2), free(l->mine2), free(l->got), free(l->sum), free(l->decoded);
  size_t nb = need > l->cap_bytes ? need : l->cap_bytes, nm = qb + 1 > l->cap_mine ? qb + 1 : l->cap_mine;
  size_t ng = gotn > l->cap_got ? gotn : l->cap_got, nf = fl > l->cap_floats ? fl : l->cap_floats;
  l->send = malloc(nb), l->recv1 = malloc(nb), l->recv2 = malloc(nb), l->mine2 = malloc(nm), l->got = malloc(ng);
  l->sum = malloc(nf), l->decoded = malloc(nf);
  l->cap_bytes = l->cap_mine = l->cap_got = l->cap_floats = 0;
  if (!l->send || !l->recv1 || !l->recv2 || !l->mine2 || !l->got || !l->sum || !l->decoded) return -1;
  l->cap_bytes = nb, l->cap_mine = nm, l->cap_got = ng, l->cap_floats = nf;
  return 0;
}

/* Sends chunks [c0, c1) of a piece of qb bytes (chunk_of(qb) each), each on the first
 * stream with room (link_streams.c). */
static void send_chunks(atoll_link *l, peer *p, uint32_t step, uint32_t frag, uint64_t qid, uint8_t phase, uint32_t piece,
                        const uint8_t *bytes, size_t qb, size_t c0, size_t c1, uint64_t tokens) {
  size_t CHUNK = chunk_of(qb);
  if (!p || p->broken || qb == 0) return;
  for (size_t c = c0; c < c1; c++) {
    size_t off = c * CHUNK;
    atoll_wire_msg m = {.type = ATOLL_WIRE_DATA};
    size_t len = qb - off < CHUNK ? qb - off : CHUNK;
    m.u.data = (atoll_wire_data){step, frag, qid, l->cfg.island, phase, piece, off, qb, tokens, (uint32_t)len, bytes + off};
    /* A peer that cannot take data has no connection and will not get one: its peer
     * died, or refused the handshake (link_streams.c). The data is lost (the
     * coordinator aborts the attempt), and the peer's sockets are made anew for the
     * next attempt. */
    if (atoll_link_stream_send(l, p, &m)) {
      /* Once per phase of an attempt, fresh sockets and the piece again, from its first
       * chunk: the usual cause is a handshake the peer refused because its QUORUM,
       * which allows this island's key, came a moment after this island's (chunks that
       * did get through arrive twice, and the receiver skips identical copies). */
      if (!p->again[phase]++ && atoll_link_streams_open(l, p) == 0) {
        c = (size_t)0 - 1; /* the loop's increment brings it to 0 */
        continue;
      }
      fprintf(stderr, "island %u: cannot send to island %u (%s): no connection; reconnecting for the next attempt\n",
              l->cfg.island, p->island, p->endpoint);
      p->broken = 1;
      return;
    }
  }
}

static void send_piece(atoll_link *l, peer *p, uint32_t step, uint32_t frag, uint64_t qid, uint8_t phase, uint32_t piece,
                       const uint8_t *bytes, size_t qb, uint64_t tokens) {
  if (p) p->again[phase] = 0;
  send_chunks(l, p, step, frag, qid, phase, piece, bytes, qb, 0, (qb + chunk_of(qb) - 1) / chunk_of(qb), tokens);
}

/* Each member's weight in the mean, K t_i / sum t (docs/islands.md, "Token-weighted
 * mean"): exactly 1 when the tokens are equal, so that such a sum is the plain one, bit
 * for bit. Every member's tokens are known once one chunk of each arrived. */
static void weigh(xchg *e) {
  double total = 0;
  for (int i = 0; i < e->K; i++) total += (double)e->tokens_of[i];
  for (int i = 0; i < e->K; i++)
    e->weight[i] = total > 0 ? (float)((double)e->K * (double)e->tokens_of[i] / total) : 1.0f;
}

/* Phase 2 of chunk c of this island's piece (fp32 and bf16 only: their encoding is
 * per float, so a chunk of bytes is a range of floats): the sum, in quorum order, of
 * the K encodings' floats in that range, each times its member's weight, divided by K, encoded into mine2 (the same
 * arithmetic as the whole piece at once) and sent to every peer. */
static void sum_chunk(atoll_link *l, xchg *x, size_t c) {
  atoll_qtype q = x->q;
  int K = x->K, k = x->k;
  size_t qb = x->qb, len = x->hi_k - x->lo_k;
  size_t e = q == ATOLL_Q_FP32 ? 4 : 2, CHUNK = chunk_of(qb), end = (c + 1) * CHUNK < qb ? (c + 1) * CHUNK : qb;
  size_t a = c * CHUNK / e, b = end / e < len ? end / e : len;
  if (a < b) {
    weigh(x);
    memset(l->sum + a, 0, sizeof(float) * (b - a));
    for (int i = 0; i < K; i++) {
      const uint8_t *src = i == k ? l->send + qb * (size_t)k : l->recv1 + qb * (size_t)i;
      atoll_q_decode(q, src + a * e, b - a, l->decoded + a);
      for (size_t t = a; t < b; t++) l->sum[t] += x->weight[i] * l->decoded[t];
    }
    for (size_t t = a; t < b; t++) l->sum[t] /= (float)K;
    atoll_q_encode(q, l->sum + a, b - a, l->mine2 + a * e);
  }
  for (int i = 0; i < K; i++)
    if (i != k) send_chunks(l, x->peers[i], x->step, x->frag, x->qid, 2, (uint32_t)k, l->mine2, qb, c, c + 1, 0);
}

/* This island's place in the quorum, the peers' sockets and the scratch. 0, or -1. */
int atoll_link_attempt_setup(atoll_link *l, xchg *e, atoll_err *err) {
  e->k = -1;
  for (int i = 0; i < e->K; i++) {
    if (l->members[i].island == l->cfg.island && memcmp(l->members[i].key, l->pub, ATOLL_KEY_BYTES) == 0) {
      e->k = i;
      continue;
    }
    if (atoll_zap_allow(l->zap, l->members[i].key)) return atoll_fail(err, "%s: out of memory for the allow-list", e->what);
  }
  if (e->k < 0) return atoll_fail(err, "%s: this island is not in the quorum the coordinator sent", e->what);
  e->t_quorum = atoll_net_now(); /* net.transfer_seconds counts from here */
  /* A peer that was not in this island's previous quorum may be a restarted process
   * at the same endpoint, whose handshake with the old sockets was refused while it
   * did not know this island yet (ZeroMQ then gives up on that connection): its
   * sockets are made anew. Members of consecutive quorums keep their connections. */
  e->piece = (e->n + (size_t)e->K - 1) / (size_t)e->K, e->qb = atoll_q_bytes(e->q, e->piece), e->CHUNK = chunk_of(e->qb);
  for (int i = 0; i < MAX_PEERS; i++)
    if (l->peers[i].used && l->peers[i].qid != l->last_qid) l->peers[i].broken = 1;
  /* a rank of a multi-rank island that holds nothing of this fragment (qb = 0) sends
   * nothing and makes no sockets: connections it would never use could be refused
   * unnoticed, then trusted at the next exchange; the next one makes them anew */
  for (int i = 0; i < e->K && e->qb > 0; i++) {
    if (i == e->k) continue;
    if (!(e->peers[i] = peer_for(l, &l->members[i], err))) return -1;
    e->peers[i]->qid = e->qid;
  }
  l->last_qid = e->qid;
  l->stats.members = e->K;
  e->nch = (e->qb + e->CHUNK - 1) / e->CHUNK;
  if (grow(l, e->qb, e->K, e->piece, e->nch)) return atoll_fail(err, "%s: out of memory", e->what);
  e->lo_k = (size_t)e->k * e->piece < e->n ? (size_t)e->k * e->piece : e->n;
  e->hi_k = e->lo_k + e->piece < e->n ? e->lo_k + e->piece : e->n;
  e->per_float = e->q == ATOLL_Q_FP32 || e->q == ATOLL_Q_BF16;
  e->need = (size_t)(e->K - 1) * e->nch;
  memset(e->known, 0, sizeof e->known);
  e->tokens_of[e->k] = e->tokens, e->known[e->k] = 1;
  return 0;
}

/* Phase 1: my encoding of piece c to island c (as diloco.c's islands_mean), each
 * queued as soon as it is encoded, this island's own last, so that the link starts at
 * once. *bad: the first NaN or Inf. */
void atoll_link_send_phase1(atoll_link *l, xchg *e, size_t *bad) {
  *bad = SIZE_MAX;
  e->bytes0 = 0;
  for (int i = 0; i < e->K; i++)
    if (e->peers[i]) e->bytes0 += e->peers[i]->tx.bytes, e->peers[i]->again[1] = e->peers[i]->again[2] = 0;
  size_t qb = e->qb;
  for (int j = 1; j <= e->K; j++) {
    int c = (e->k + j) % e->K;
    size_t lo = (size_t)c * e->piece < e->n ? (size_t)c * e->piece : e->n, hi = lo + e->piece < e->n ? lo + e->piece : e->n, b;
    /* fp32 and bf16 write every byte of their encoding: only the rest of the piece's
     * qb bytes is zeroed; int8 leaves a zero block's values as they were */
    size_t used = e->per_float ? atoll_q_bytes(e->q, hi - lo) : 0;
    memset(l->send + qb * (size_t)c + used, 0, qb - used);
    if (atoll_q_encode_checked(e->q, e->x + lo, hi - lo, l->send + qb * (size_t)c, &b) && (*bad == SIZE_MAX || lo + b < *bad))
      *bad = lo + b;
    if (c != e->k) send_piece(l, e->peers[c], e->step, e->frag, e->qid, 1, (uint32_t)c, l->send + qb * (size_t)c, qb, e->tokens);
  }
  /* got: per phase and member, a flag per chunk; then `arrived` */
  memset(l->got, 0, 2 * (size_t)e->K * e->nch + e->nch);
  e->arrived = l->got + 2 * (size_t)e->K * e->nch;
  memset(l->mine2, 0, qb);
  e->last_progress = e->last_ask = atoll_net_now();
}

/* Phase 2 as far as phase 1 allows: fp32 and bf16 per chunk, as soon as every
 * member's phase-1 chunk is here (in chunk order), so that the sum overlaps the
 * transfer and the link does not idle between the phases; block-scaled types the
 * whole piece once all of phase 1 is here, summed in quorum order. */
void atoll_link_send_phase2(atoll_link *l, xchg *e) {
  size_t qb = e->qb;
  while (e->per_float && e->next2 < e->nch && e->arrived[e->next2] == (uint8_t)(e->K - 1))
    sum_chunk(l, e, e->next2++);
  if (!e->sent2 && e->per_float && e->next2 == e->nch) {
    memcpy(l->recv2 + qb * (size_t)e->k, l->mine2, qb);
    e->sent2 = 1;
  }
  if (e->have1 != e->need || e->sent2) return;
  size_t len = e->hi_k - e->lo_k;
  memset(l->sum, 0, sizeof(float) * (len + 1));
  weigh(e);
  for (int i = 0; i < e->K; i++) {
    atoll_q_decode(e->q, i == e->k ? l->send + qb * (size_t)e->k : l->recv1 + qb * (size_t)i, len, l->decoded);
    for (size_t t = 0; t < len; t++) l->sum[t] += e->weight[i] * l->decoded[t];
  }
  for (size_t t = 0; t < len; t++) l->sum[t] /= (float)e->K;
  atoll_q_encode(e->q, l->sum, len, l->mine2);
  for (int c = 0; c < e->K; c++)
    if (c != e->k) send_piece(l, e->peers[c], e->step, e->frag, e->qid, 2, (uint32_t)e->k, l->mine2, qb, 0);
  memcpy(l->recv2 + qb * (size_t)e->k, l->mine2, qb);
  e->sent2 = 1;
}

/* The chunk that a DATA frame's range is, in a piece of qb bytes cut into CHUNK-byte
 * chunks: its index (below the piece's chunk count), or -1 when the range is not
 * exactly one of them (another total, an offset inside or past the piece, another
 * length). Every place and flag a frame writes is indexed through this. */
static long chunk_at(const atoll_wire_data *w, size_t qb, size_t CHUNK) {
  if (w->total != qb || w->offset >= qb || w->offset % CHUNK) return -1;
  size_t want = qb - w->offset < CHUNK ? qb - w->offset : CHUNK;
  return w->len == want ? (long)(w->offset / CHUNK) : -1;
}

/* A parsed DATA frame from key `keyz`: stored in its place and counted, or a reason
 * in why (empty: used, or expected and ignored). *from: the member it comes from. */
static void take_data(atoll_link *l, xchg *e, const atoll_wire_data *w, const char *keyz, int *from, char *why, size_t whysz) {
  uint8_t key[ATOLL_KEY_BYTES];
  size_t qb = e->qb, CHUNK = e->CHUNK;
  for (int i = 0; i < e->K; i++)
    if (l->members[i].island == w->from) *from = i;
  if (w->quorum < e->qid) return; /* an aborted attempt's data, still in flight: expected */
  if (*from < 0 || *from == e->k) snprintf(why, whysz, "island %u is not a peer of this exchange", w->from);
  else if (!zmq_z85_decode(key, keyz) || memcmp(key, l->members[*from].key, ATOLL_KEY_BYTES) != 0)
    snprintf(why, whysz, "claims to be island %u, whose key differs", w->from);
  else if (w->step != e->step || w->fragment != e->frag || w->quorum != e->qid)
    snprintf(why, whysz, "not of this exchange (step %u, fragment %u, quorum %llu)", w->step, w->fragment,
             (unsigned long long)w->quorum);
  else if (w->phase > 2) /* (a joining island's state: its rows are not in got) */
    snprintf(why, whysz, "phase %u is not sent in an exchange", w->phase);
  else if (w->piece != (w->phase == 1 ? (uint32_t)e->k : (uint32_t)*from) || chunk_at(w, qb, CHUNK) < 0)
    snprintf(why, whysz, "piece %u range [%llu, +%u) of %llu does not fit this exchange", w->piece,
             (unsigned long long)w->offset, w->len, (unsigned long long)w->total);
  else if (w->phase == 1 && e->known[*from] && w->tokens != e->tokens_of[*from])
    snprintf(why, whysz, "tokens %llu, but its earlier chunks said %llu", (unsigned long long)w->tokens,
             (unsigned long long)e->tokens_of[*from]);
  else {
    if (w->phase == 1) e->tokens_of[*from] = w->tokens, e->known[*from] = 1;
    size_t c = (size_t)chunk_at(w, qb, CHUNK);
    uint8_t *seen = &l->got[((size_t)(w->phase - 1) * e->K + *from) * e->nch + c];
    uint8_t *place = (w->phase == 1 ? l->recv1 : l->recv2) + qb * (size_t)*from + w->offset;
    if (*seen && memcmp(place, w->bytes, w->len) != 0)
      snprintf(why, whysz, "replayed (phase %u, offset %llu already received, different bytes)", w->phase,
               (unsigned long long)w->offset);
    else if (!*seen) { /* (seen with the same bytes: a resent chunk, send_chunks' second try) */
      *seen = 1;
      memcpy(place, w->bytes, w->len);
      if (w->phase == 1) e->have1++, e->arrived[c]++;
      else e->have2++;
      e->last_progress = atoll_net_now();
    }
  }
}

/* One frame from the data socket, if one comes within 50 ms; a frame that is not
 * usable is dropped with one line naming its sender. */
void atoll_link_receive(atoll_link *l, xchg *e) {
  char keyz[64], addr[64], why[200] = "";
  zmq_msg_t fr;
  long len = atoll_sock_recv_msg(l->pull, &fr, keyz, addr, 50);
  if (len == -1) return;
  atoll_wire_msg d;
  int from = -1;
  if (len < 0 || len > (long)ATOLL_WIRE_MAX_DATA)
    snprintf(why, sizeof why, "%s", len < 0 ? "more than one frame" : "oversized");
  else if (atoll_wire_parse(zmq_msg_data(&fr), (size_t)len, &d, NULL, 0, why, sizeof why) == 0) {
    why[0] = 0;
    if (d.type != ATOLL_WIRE_DATA) snprintf(why, sizeof why, "%s is not sent between islands", atoll_wire_type_name(d.type));
    else take_data(l, e, &d.u.data, keyz, &from, why, sizeof why);
  }
  if (len >= 0) zmq_msg_close(&fr);
  if (why[0])
    fprintf(stderr, "island %u: dropped a data message from %s (key %.8s..., %s): %s\n", l->cfg.island,
            from >= 0 ? "a member" : "a peer", keyz, addr, why);
}

/* A joining island fetches the committed state (global weights, outer momentum) from
 * the member named in STATE_FROM, checks its hash and adopts it. */
int atoll_link_fetch_state(atoll_link *l, const atoll_wire_msg *sf, atoll_err *err) {
  const atoll_wire_member *donor = &sf->u.quorum.members[0];
  uint32_t step = sf->u.quorum.step;
  uint64_t id = sf->u.quorum.id;
  uint8_t want[ATOLL_WIRE_HASH], key[ATOLL_KEY_BYTES];
  memcpy(want, sf->u.quorum.hash, ATOLL_WIRE_HASH);
  if (atoll_zap_allow(l->zap, donor->key)) return atoll_fail(err, "joining at step %u: out of memory for the allow-list", step);
  size_t qb = l->state_n * sizeof(float), CHUNK = chunk_of(qb), nch = (qb + CHUNK - 1) / CHUNK;
  uint8_t *buf = malloc(2 * qb + 1), *got = calloc(2 * nch + 1, 1);
  if (!buf || !got) {
    free(buf), free(got);
    return atoll_fail(err, "out of memory for the joining state");
  }
  fprintf(stderr, "island %u: joining at step %u: fetching revision %llu from island %u\n", l->cfg.island, step,
          (unsigned long long)sf->u.quorum.revision, donor->island);
  if (l->cfg.fail_first_fetch && l->fetches++ == 0) {
    free(buf), free(got);
    fprintf(stderr, "island %u rank %u: test hook: this first fetch fails (as if the donor died)\n", l->cfg.island, l->cfg.rank);
    return 1;
  }
  size_t have = 0;
  double last = atoll_net_now();
  while (have < 2 * nch) {
    if (atoll_net_now() - last > 2 * l->cfg.timeout) {
      free(buf), free(got);
      fprintf(stderr, "island %u: joining at step %u: no state from island %u for %g s; asking again\n", l->cfg.island, step,
              donor->island, 2 * l->cfg.timeout);
      return 1;
    }
    char keyz[64], addr[64], why[200];
    long len = atoll_sock_recv(l->pull, l->rbuf, ATOLL_WIRE_MAX_DATA, NULL, NULL, keyz, addr, 100);
    if (len == -1) continue;
    atoll_wire_msg d;
    if (len < 0 || len > (long)ATOLL_WIRE_MAX_DATA || atoll_wire_parse(l->rbuf, (size_t)len, &d, NULL, 0, why, sizeof why))
      continue; /* the exchange's checks name such peers; here only the donor's state counts */
    const atoll_wire_data *w = &d.u.data;
    if (d.type != ATOLL_WIRE_DATA || w->phase < 3 || w->quorum != id || w->step != step) continue; /* earlier traffic */
    long c = chunk_at(w, qb, CHUNK);
    if (!zmq_z85_decode(key, keyz) || memcmp(key, donor->key, ATOLL_KEY_BYTES) || w->from != donor->island || c < 0) {
      fprintf(stderr, "island %u: dropped a state message from key %.8s... (%s): not the donor's, or the model's size differs\n",
              l->cfg.island, keyz, addr);
      continue;
    }
    uint8_t *seen = &got[(size_t)(w->phase - 3) * nch + (size_t)c];
    if (*seen) continue;
    *seen = 1;
    memcpy(buf + (size_t)(w->phase - 3) * qb + w->offset, w->bytes, w->len);
    have++;
    last = atoll_net_now();
  }
  uint8_t hash[ATOLL_WIRE_HASH]; /* of the global weights and the momentum, as committed */
  crypto_generichash(hash, sizeof hash, buf, 2 * qb, NULL, 0);
  if (memcmp(hash, want, ATOLL_WIRE_HASH) != 0) {
    free(buf), free(got);
    return atoll_fail(err, "joining at step %u: the weights and outer momentum fetched from island %u do not match the quorum's hash; refusing them",
                      step, donor->island);
  }
  memcpy(l->global, buf, qb);
  memcpy(l->momentum, buf + qb, qb);
  free(buf), free(got);
  l->joined_from = l->revision;
  l->revision = sf->u.quorum.revision;
  atomic_store(&l->hb_revision, l->revision);
  l->joined_step = step;
  l->stats.joins++;
  l->stats.missed += l->revision - l->joined_from;
  fprintf(stderr, "island %u: joined at step %u (revision %llu, hash checked)\n", l->cfg.island, step,
          (unsigned long long)l->revision);
  return 0;
}

/* Sends this island's global weights and outer momentum to the joining islands of a
 * FEED: after a commit, or while it waits for an exchange that too few islands are
 * left for (the coordinator then feeds the joiners the last commit's state). The
 * joiners check the hash; so does this island first, since after a fragment's sync
 * its state is no longer the committed one. */
int atoll_link_send_state_to(atoll_link *l, const atoll_wire_msg *m, atoll_err *err) {
  size_t qb = l->state_n * sizeof(float);
  uint8_t hash[ATOLL_WIRE_HASH];
  atoll_link_state_hash(l, l->global, l->state_n, hash);
  if (memcmp(hash, m->u.quorum.hash, ATOLL_WIRE_HASH) != 0) {
    fprintf(stderr, "island %u: asked to send the state of step %u, but this island's differs from it; not sent\n",
            l->cfg.island, m->u.quorum.step);
    return 0;
  }
  for (uint32_t i = 0; i < m->u.quorum.n; i++) {
    for (int j = 0; j < MAX_PEERS; j++) /* a joining island is a new process: no stale connection */
      if (l->peers[j].used && l->peers[j].island == m->u.quorum.members[i].island) {
        atoll_link_streams_close(&l->peers[j]);
        l->peers[j].used = 0;
      }
    peer *p = peer_for(l, &m->u.quorum.members[i], err);
    if (!p) return -1;
    send_piece(l, p, m->u.quorum.step, 0, m->u.quorum.id, 3, 0, (const uint8_t *)l->global, qb, 0);
    if (l->cfg.feed_bad_momentum && qb) ((uint8_t *)l->momentum)[0] ^= 1; /* test hook: a damaged momentum */
    send_piece(l, p, m->u.quorum.step, 0, m->u.quorum.id, 4, 0, (const uint8_t *)l->momentum, qb, 0);
    if (l->cfg.feed_bad_momentum && qb) ((uint8_t *)l->momentum)[0] ^= 1;
    fprintf(stderr, "island %u: sent the state of step %u to joining island %u\n", l->cfg.island, m->u.quorum.step,
            m->u.quorum.members[i].island);
  }
  return 0;
}
