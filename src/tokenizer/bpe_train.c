/* The BPE trainer. Words (pre-tokens, pretokenize.c) are counted once; then each
 * merge takes the most frequent adjacent pair of tokens over all words (weighted by
 * the words' counts). Ties go to the smaller left id, then the smaller right id (ids
 * are given in creation order: bytes 0..255, then merges), so training is
 * deterministic.
 *
 * Incremental: every pair keeps its count and the list of words it occurs in; a merge
 * rewrites only the words of its pair and adjusts the counts of the pairs in them.
 * The most frequent pair comes from a max-heap with lazy deletion: an entry whose
 * count is no longer its pair's is dropped (and pushed again with the current count
 * when that is lower); a pair whose count grows is pushed anew. */
#include "core/clock.h"
#include "text/text_input.h"
#include "tokenizer/text_pieces.h"
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int32_t a, b;
  int64_t count;
  int32_t *words; /* words that held the pair at some point (may repeat) */
  uint32_t nwords, capwords;
  int32_t last_word; /* the last word appended, to skip immediate repeats */
  int32_t stamp;     /* the merge that last touched the pair */
  int64_t before;    /* its count before that merge */
} pair;

typedef struct {
  int64_t count;
  int32_t a, b;
} heap_entry;

typedef struct {
  /* words */
  int32_t *sym;      /* every word's symbols, word w at sym[off[w]], len[w] of them */
  uint64_t *off;
  uint32_t *len;
  int64_t *wcount;
  int32_t *stamp;    /* the merge that last rewrote the word */
  size_t nwords;
  /* pairs */
  pair *pairs;
  size_t npairs, cappairs;
  uint64_t *pkeys;
  int32_t *pidx;
  size_t pmask;
  /* heap */
  heap_entry *heap;
  size_t nheap, capheap;
  /* pairs touched by the current merge */
  int32_t *touched;
  size_t ntouched, captouched;
  /* vocabulary */
  atoll_bytemap vocab; /* token bytes -> id */
  uint32_t *tok_off;
  uint8_t *tok_bytes;
  size_t nbytes, capbytes;
  int ntok;
  int32_t *ml, *mr, *mres;
  int nmerges, capmerges;
} trainer;

static inline int heap_before(heap_entry x, heap_entry y) {
  if (x.count != y.count) return x.count > y.count;
  if (x.a != y.a) return x.a < y.a;
  return x.b < y.b;
}

static int heap_push(trainer *tr, heap_entry x) {
  if (tr->nheap == tr->capheap) {
    size_t cap = tr->capheap ? 2 * tr->capheap : 4096;
    heap_entry *h = realloc(tr->heap, cap * sizeof *h);
    if (!h) return -1;
    tr->heap = h;
    tr->capheap = cap;
  }
  size_t i = tr->nheap++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!heap_before(x, tr->heap[p])) break;
    tr->heap[i] = tr->heap[p];
    i = p;
  }
  tr->heap[i] = x;
  return 0;
}

static heap_entry heap_pop(trainer *tr) {
  heap_entry *h = tr->heap, top = h[0], x = h[--tr->nheap];
  size_t i = 0, n = tr->nheap;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && heap_before(h[c + 1], h[c])) c++;
    if (!heap_before(h[c], x)) break;
    h[i] = h[c];
    i = c;
  }
  if (n) h[i] = x;
  return top;
}

static inline size_t pslot(uint64_t key, size_t mask) { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & mask; }

static int grow_pairs(trainer *tr) {
  size_t slots = tr->pkeys ? 2 * (tr->pmask + 1) : 1 << 16;
  uint64_t *keys = malloc(slots * sizeof *keys);
  int32_t *idx = malloc(slots * sizeof *idx);
  if (!keys || !idx) {
    free(keys);
    free(idx);
    return -1;
  }
  memset(keys, 0xFF, slots * sizeof *keys);
  for (size_t p = 0; p < tr->npairs; p++) {
    uint64_t key = ((uint64_t)(uint32_t)tr->pairs[p].a << 32) | (uint32_t)tr->pairs[p].b;
    size_t i = pslot(key, slots - 1);
    while (keys[i] != ATOLL_PAIR_EMPTY) i = (i + 1) & (slots - 1);
    keys[i] = key;
    idx[i] = (int32_t)p;
  }
  free(tr->pkeys);
  free(tr->pidx);
  tr->pkeys = keys;
  tr->pidx = idx;
  tr->pmask = slots - 1;
  return 0;
}

/* The index of pair (a, b), created with count 0 when missing; -1 when out of memory. */
static int32_t pair_get(trainer *tr, int32_t a, int32_t b) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  if (!tr->pkeys || 2 * (tr->npairs + 1) > tr->pmask + 1)
    if (grow_pairs(tr) != 0) return -1;
  size_t i = pslot(key, tr->pmask);
  for (; tr->pkeys[i] != ATOLL_PAIR_EMPTY; i = (i + 1) & tr->pmask)
    if (tr->pkeys[i] == key) return tr->pidx[i];
  if (tr->npairs == tr->cappairs) {
    size_t cap = tr->cappairs ? 2 * tr->cappairs : 4096;
    pair *p = realloc(tr->pairs, cap * sizeof *p);
    if (!p) return -1;
    tr->pairs = p;
    tr->cappairs = cap;
  }
  int32_t n = (int32_t)tr->npairs++;
  tr->pairs[n] = (pair){.a = a, .b = b, .last_word = -1, .stamp = -1};
  tr->pkeys[i] = key;
  tr->pidx[i] = n;
  return n;
}

static int pair_add_word(pair *p, int32_t w) {
  if (p->last_word == w) return 0;
  if (p->nwords == p->capwords) {
    uint32_t cap = p->capwords ? 2 * p->capwords : 4;
    int32_t *ws = realloc(p->words, cap * sizeof *ws);
    if (!ws) return -1;
    p->words = ws;
    p->capwords = cap;
  }
  p->words[p->nwords++] = w;
  p->last_word = w;
  return 0;
}

/* Adds delta to pair (a, b)'s count for the current merge (stamp), remembering its
 * count before; with word >= 0, also lists the word under the pair. */
static int pair_change(trainer *tr, int32_t a, int32_t b, int64_t delta, int32_t word, int32_t stamp) {
  int32_t pi = pair_get(tr, a, b);
  if (pi < 0) return -1;
  pair *p = &tr->pairs[pi];
  if (p->stamp != stamp) {
    p->stamp = stamp;
    p->before = p->count;
    if (tr->ntouched == tr->captouched) {
      size_t cap = tr->captouched ? 2 * tr->captouched : 1024;
      int32_t *t = realloc(tr->touched, cap * sizeof *t);
      if (!t) return -1;
      tr->touched = t;
      tr->captouched = cap;
    }
    tr->touched[tr->ntouched++] = pi;
  }
  p->count += delta;
  return word >= 0 ? pair_add_word(p, word) : 0;
}

static int add_token(trainer *tr, const uint8_t *b, size_t n, int *added) {
  int64_t e = atoll_bytemap_put(&tr->vocab, b, n, atoll_bytes_hash(b, n), tr->ntok, added);
  if (e < 0) return -1;
  if (!*added) return (int)tr->vocab.val[e];
  if (tr->nbytes + n > tr->capbytes) {
    size_t cap = tr->capbytes ? 2 * tr->capbytes : 65536;
    while (cap < tr->nbytes + n) cap *= 2;
    uint8_t *nb = realloc(tr->tok_bytes, cap);
    if (!nb) return -1;
    tr->tok_bytes = nb;
    tr->capbytes = cap;
  }
  memcpy(tr->tok_bytes + tr->nbytes, b, n);
  tr->nbytes += n;
  tr->tok_off[tr->ntok + 1] = (uint32_t)tr->nbytes;
  return tr->ntok++;
}

/* Rewrites word w with (a, b) -> x, left to right. Its pairs are taken out before and
 * put back after (a pair that did not change nets zero); the new pairs, those with x,
 * list the word. */
static int merge_in_word(trainer *tr, int32_t w, int32_t a, int32_t b, int32_t x, int32_t stamp) {
  int32_t *s = tr->sym + tr->off[w];
  uint32_t n = tr->len[w], k = 0;
  int64_t c = tr->wcount[w];
  for (uint32_t i = 0; i + 1 < n; i++)
    if (pair_change(tr, s[i], s[i + 1], -c, -1, stamp) != 0) return -1;
  for (uint32_t i = 0; i < n;) {
    if (i + 1 < n && s[i] == a && s[i + 1] == b) {
      s[k++] = x;
      i += 2;
    } else {
      s[k++] = s[i++];
    }
  }
  tr->len[w] = k;
  for (uint32_t i = 0; i + 1 < k; i++)
    if (pair_change(tr, s[i], s[i + 1], c, s[i] == x || s[i + 1] == x ? w : -1, stamp) != 0) return -1;
  return 0;
}

static int contains(const trainer *tr, int32_t w, int32_t a, int32_t b) {
  const int32_t *s = tr->sym + tr->off[w];
  for (uint32_t i = 0; i + 1 < tr->len[w]; i++)
    if (s[i] == a && s[i + 1] == b) return 1;
  return 0;
}

/* One merge: the best pair (a, b) becomes token x in every word that holds it. */
static int do_merge(trainer *tr, int32_t pi, int32_t x) {
  int32_t a = tr->pairs[pi].a, b = tr->pairs[pi].b, stamp = tr->nmerges;
  if (tr->nmerges == tr->capmerges) { /* a merge that remakes an existing token adds none */
    int cap = 2 * tr->capmerges;
    int32_t *l = realloc(tr->ml, (size_t)cap * sizeof *l);
    if (l) tr->ml = l;
    int32_t *r = realloc(tr->mr, (size_t)cap * sizeof *r);
    if (r) tr->mr = r;
    int32_t *x2 = realloc(tr->mres, (size_t)cap * sizeof *x2);
    if (x2) tr->mres = x2;
    if (!l || !r || !x2) return -1;
    tr->capmerges = cap;
  }
  tr->ml[stamp] = a;
  tr->mr[stamp] = b;
  tr->mres[stamp] = x;
  tr->nmerges++;
  tr->ntouched = 0;
  /* the list may grow while we walk it (a == b == x cannot happen: x is new bytes) */
  int32_t *words = tr->pairs[pi].words;
  uint32_t nw = tr->pairs[pi].nwords;
  tr->pairs[pi].words = NULL;
  tr->pairs[pi].nwords = tr->pairs[pi].capwords = 0;
  tr->pairs[pi].last_word = -1;
  int rc = 0;
  for (uint32_t i = 0; i < nw && rc == 0; i++) {
    int32_t w = words[i];
    if (tr->stamp[w] == stamp || !contains(tr, w, a, b)) continue;
    tr->stamp[w] = stamp;
    rc = merge_in_word(tr, w, a, b, x, stamp);
  }
  free(words);
  for (size_t t = 0; t < tr->ntouched && rc == 0; t++) {
    pair *p = &tr->pairs[tr->touched[t]];
    if (p->count > p->before) rc = heap_push(tr, (heap_entry){p->count, p->a, p->b});
  }
  return rc;
}

/* ------------------------------------------------------------ counting --- */

/* Counts the pre-token words of text into words (bytes -> count). */
static int count_words(atoll_bytemap *words, const uint8_t *text, size_t n) {
  for (size_t pos = 0; pos < n;) {
    size_t end = atoll_pretoken_end(text, n, pos);
    int64_t e = atoll_bytemap_put(words, text + pos, end - pos, atoll_bytes_hash(text + pos, end - pos), 0, NULL);
    if (e < 0) return -1;
    words->val[e]++;
    pos = end;
  }
  return 0;
}

/* Text read but not counted yet (text_pieces.h): counted in pieces of about COUNT_PIECE
 * bytes, each ending at a safe cut, so the words are those of the whole text while
 * memory stays bounded (as prepare encodes). */
#define COUNT_PIECE ((size_t)1 << 20)

static int count_piece(void *words, const uint8_t *text, size_t n) { return count_words(words, text, n); }

/* Counts the words of one scanned source, read as prepare reads it (text_input.h):
 * a JSON Lines document ends a text (its words are counted apart, as prepare encodes
 * each document apart), so does the source's end. */
static int count_source(atoll_bytemap *words, atoll_text_pieces *h, const atoll_text_source *s, const char *field,
                        atoll_bpe_train_stats *st, atoll_err *err) {
  atoll_text_reader *r = NULL;
  if (atoll_text_reader_open(&r, s, field, err) != 0) return -1;
  int rc = 0, oom = 0;
  for (;;) {
    const uint8_t *p;
    size_t n;
    int doc_end = 0;
    double t0 = atoll_seconds();
    rc = s->jsonl ? atoll_text_reader_next_doc(r, &p, &n, &doc_end, err) : atoll_text_reader_next(r, &p, &n, err);
    double t1 = atoll_seconds();
    st->read_s += t1 - t0;
    if (rc != 0 || (n == 0 && !doc_end)) break;
    st->bytes += n;
    oom = atoll_text_pieces_add(h, p, n, count_piece, words) != 0 || (doc_end && atoll_text_pieces_end(h, count_piece, words) != 0);
    st->count_s += atoll_seconds() - t1;
    if (oom) break;
  }
  atoll_text_reader_close(r);
  double t1 = atoll_seconds();
  if (rc == 0 && !oom) oom = atoll_text_pieces_end(h, count_piece, words) != 0;
  st->count_s += atoll_seconds() - t1;
  h->n = h->scanned = 0;
  if (rc == 0 && oom) rc = atoll_fail(err, "%s: out of memory counting words", s->path);
  return rc;
}

/* Every source scanned (and so checked, as prepare checks them) before any is counted;
 * input without text is refused, as prepare refuses it. *src holds nfiles sources. */
static int scan_all(atoll_text_source **src, const char *const *files, int nfiles, const char *field,
                    atoll_err *err) {
  *src = calloc(nfiles > 0 ? (size_t)nfiles : 1, sizeof **src);
  if (!*src) return atoll_fail(err, "tokenizer train: out of memory");
  uint64_t total = 0;
  for (int i = 0; i < nfiles; i++) {
    if (atoll_text_scan(&(*src)[i], files[i], field, NULL, NULL, err) != 0) return -1;
    total += (*src)[i].text_bytes;
  }
  if (total == 0 && nfiles <= 1)
    return atoll_fail(err, "%s: input is empty (0 bytes of text): nothing to train on",
                      nfiles ? files[0] : "tokenizer train");
  if (total == 0)
    return atoll_fail(err, "%s and %d other file(s): input is empty (0 bytes of text): nothing to train on",
                      files[0], nfiles - 1);
  return 0;
}

/* Words as symbol arrays (bytes' ids are the byte values) and the first pair counts. */
static int load_words(trainer *tr, const atoll_bytemap *words) {
  size_t n = words->n, total = words->arena_n;
  tr->nwords = n;
  tr->sym = malloc((total + 1) * sizeof *tr->sym);
  tr->off = malloc((n + 1) * sizeof *tr->off);
  tr->len = malloc((n + 1) * sizeof *tr->len);
  tr->wcount = malloc((n + 1) * sizeof *tr->wcount);
  tr->stamp = malloc((n + 1) * sizeof *tr->stamp);
  if (!tr->sym || !tr->off || !tr->len || !tr->wcount || !tr->stamp) return -1;
  size_t at = 0;
  for (size_t w = 0; w < n; w++) {
    const uint8_t *k = atoll_bytemap_key(words, w);
    tr->off[w] = at;
    tr->len[w] = words->key_len[w];
    tr->wcount[w] = words->val[w];
    tr->stamp[w] = -1;
    for (uint32_t i = 0; i < tr->len[w]; i++) tr->sym[at + i] = k[i];
    for (uint32_t i = 0; i + 1 < tr->len[w]; i++)
      if (pair_change(tr, k[i], k[i + 1], tr->wcount[w], (int32_t)w, -2) != 0) return -1;
    at += tr->len[w];
  }
  for (size_t p = 0; p < tr->npairs; p++)
    if (heap_push(tr, (heap_entry){tr->pairs[p].count, tr->pairs[p].a, tr->pairs[p].b}) != 0) return -1;
  return 0;
}

static void trainer_free(trainer *tr) {
  free(tr->sym);
  free(tr->off);
  free(tr->len);
  free(tr->wcount);
  free(tr->stamp);
  for (size_t p = 0; p < tr->npairs; p++) free(tr->pairs[p].words);
  free(tr->pairs);
  free(tr->pkeys);
  free(tr->pidx);
  free(tr->heap);
  free(tr->touched);
  atoll_bytemap_free(&tr->vocab);
  free(tr->tok_off);
  free(tr->tok_bytes);
  free(tr->ml);
  free(tr->mr);
  free(tr->mres);
}

/* The merges, until vocab_size tokens or no pair is left. */
static int merge_all(trainer *tr, int vocab_size) {
  uint8_t *buf = NULL;
  size_t bufcap = 0;
  int rc = 0;
  while (tr->ntok < vocab_size && tr->nheap > 0 && rc == 0) {
    heap_entry top = heap_pop(tr);
    int32_t pi = pair_get(tr, top.a, top.b);
    if (pi < 0) {
      rc = -1;
      break;
    }
    int64_t now = tr->pairs[pi].count;
    if (now != top.count) { /* stale: the pair's count fell since */
      if (now > 0 && now < top.count) rc = heap_push(tr, (heap_entry){now, top.a, top.b});
      continue;
    }
    if (now <= 0) continue;
    size_t la = tr->tok_off[top.a + 1] - tr->tok_off[top.a], lb = tr->tok_off[top.b + 1] - tr->tok_off[top.b];
    if (la + lb > bufcap) {
      bufcap = 2 * (la + lb);
      uint8_t *nb = realloc(buf, bufcap);
      if (!nb) {
        rc = -1;
        break;
      }
      buf = nb;
    }
    memcpy(buf, tr->tok_bytes + tr->tok_off[top.a], la);
    memcpy(buf + la, tr->tok_bytes + tr->tok_off[top.b], lb);
    int added;
    int x = add_token(tr, buf, la + lb, &added);
    if (x < 0) rc = -1;
    else rc = do_merge(tr, pi, x);
  }
  free(buf);
  return rc;
}

int atoll_bpe_train(atoll_tokenizer **out, const char *const *files, int nfiles, int vocab_size,
                    atoll_bpe_train_stats *stats, atoll_err *err) {
  return atoll_bpe_train_inputs(out, files, nfiles, NULL, vocab_size, stats, err);
}

int atoll_bpe_train_inputs(atoll_tokenizer **out, const char *const *files, int nfiles, const char *jsonl_field,
                           int vocab_size, atoll_bpe_train_stats *stats, atoll_err *err) {
  *out = NULL;
  atoll_bpe_train_stats st = {0};
  if (vocab_size < 256 || vocab_size > ATOLL_TOKENIZER_MAX_VOCAB)
    return atoll_fail(err, "--vocab-size %d: must be in [256, %d] (256 byte tokens plus merges)", vocab_size,
                      ATOLL_TOKENIZER_MAX_VOCAB);
  const char *field = jsonl_field ? jsonl_field : "text";
  atoll_bytemap words = {0};
  trainer tr = {0};
  atoll_text_pieces held = {.piece = COUNT_PIECE};
  atoll_text_source *src = NULL;
  int rc = -1;
  double ts = atoll_seconds();
  int scanned = scan_all(&src, files, nfiles, field, err);
  st.read_s += atoll_seconds() - ts;
  if (scanned != 0) goto done;
  for (int i = 0; i < nfiles; i++)
    if (count_source(&words, &held, &src[i], field, &st, err) != 0) goto done;
  st.words = words.n;
  double t0 = atoll_seconds();
  int cap = vocab_size + 1;
  tr.tok_off = calloc((size_t)cap + 1, sizeof *tr.tok_off);
  tr.ml = malloc((size_t)cap * sizeof *tr.ml);
  tr.mr = malloc((size_t)cap * sizeof *tr.mr);
  tr.mres = malloc((size_t)cap * sizeof *tr.mres);
  tr.capmerges = cap;
  int oom = !tr.tok_off || !tr.ml || !tr.mr || !tr.mres;
  for (int b = 0; b < 256 && !oom; b++) {
    uint8_t byte = (uint8_t)b;
    int added;
    oom = add_token(&tr, &byte, 1, &added) < 0;
  }
  if (oom || load_words(&tr, &words) != 0 || merge_all(&tr, vocab_size) != 0) {
    atoll_fail(err, "tokenizer train: out of memory");
    goto done;
  }
  st.merge_s = atoll_seconds() - t0;
  atoll_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    atoll_fail(err, "tokenizer train: out of memory");
    goto done;
  }
  t->vocab = tr.ntok;
  t->tok_off = tr.tok_off;
  t->tok_bytes = tr.tok_bytes;
  t->nmerges = tr.nmerges;
  t->merge_left = tr.ml;
  t->merge_right = tr.mr;
  t->merge_result = tr.mres;
  tr.tok_off = NULL;
  tr.tok_bytes = NULL;
  tr.ml = tr.mr = tr.mres = NULL;
  if (atoll_tokenizer_finish(t, "tokenizer train", err) != 0) {
    atoll_tokenizer_free(t);
    goto done;
  }
  *out = t;
  rc = 0;
done:
  atoll_text_pieces_free(&held);
  free(src);
  atoll_bytemap_free(&words);
  trainer_free(&tr);
  if (stats) *stats = st;
  return rc;
}
