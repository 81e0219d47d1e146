/* Open-addressing hash map from byte strings to values (tokenizer/bytemap.h). */
#include "tokenizer/bytemap.h"

#include <stdlib.h>
#include <string.h>

uint64_t atoll_bytes_hash(const uint8_t *p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ (w * 0xFF51AFD7ED558CCDull)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  memcpy(&w, p, n);
  h = (h ^ (w * 0xFF51AFD7ED558CCDull)) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 32;
  return h;
}

void atoll_bytemap_free(atoll_bytemap *m) {
  free(m->slots);
  free(m->hash);
  free(m->key_off);
  free(m->key_len);
  free(m->val);
  free(m->arena);
  memset(m, 0, sizeof *m);
}

void atoll_bytemap_clear(atoll_bytemap *m) {
  if (m->slots) memset(m->slots, 0, sizeof(uint32_t) * (m->mask + 1));
  m->n = 0;
  m->arena_n = 0;
}

int64_t atoll_bytemap_find(const atoll_bytemap *m, const uint8_t *key, size_t len, uint64_t h) {
  if (!m->slots) return -1;
  for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
    uint32_t s = m->slots[i];
    if (!s) return -1;
    size_t e = s - 1;
    if (m->hash[e] == h && m->key_len[e] == len && memcmp(m->arena + m->key_off[e], key, len) == 0)
      return (int64_t)e;
  }
}

static int grow_slots(atoll_bytemap *m) {
  size_t nslots = m->slots ? 2 * (m->mask + 1) : 1024;
  uint32_t *slots = calloc(nslots, sizeof *slots);
  if (!slots) return -1;
  free(m->slots);
  m->slots = slots;
  m->mask = nslots - 1;
  for (size_t e = 0; e < m->n; e++) {
    size_t i = m->hash[e] & m->mask;
    while (slots[i]) i = (i + 1) & m->mask;
    slots[i] = (uint32_t)(e + 1);
  }
  return 0;
}

static int grow_entries(atoll_bytemap *m) {
  size_t cap = m->cap ? 2 * m->cap : 512;
  uint64_t *h = realloc(m->hash, cap * sizeof *h);
  if (h) m->hash = h;
  uint64_t *ko = realloc(m->key_off, cap * sizeof *ko);
  if (ko) m->key_off = ko;
  uint32_t *kl = realloc(m->key_len, cap * sizeof *kl);
  if (kl) m->key_len = kl;
  int64_t *v = realloc(m->val, cap * sizeof *v);
  if (v) m->val = v;
  if (!h || !ko || !kl || !v) return -1;
  m->cap = cap;
  return 0;
}

int64_t atoll_bytemap_put(atoll_bytemap *m, const uint8_t *key, size_t len, uint64_t h, int64_t init,
                          int *added) {
  if (added) *added = 0;
  int64_t e = atoll_bytemap_find(m, key, len, h);
  if (e >= 0) return e;
  if (len > UINT32_MAX || m->n >= UINT32_MAX - 1) return -1;
  if ((m->n + 1) * 2 > (m->slots ? m->mask + 1 : 0) && grow_slots(m) != 0) return -1;
  if (m->n == m->cap && grow_entries(m) != 0) return -1;
  if (m->arena_n + len > m->arena_cap) {
    size_t cap = m->arena_cap ? m->arena_cap : 4096;
    while (cap < m->arena_n + len) cap *= 2;
    uint8_t *a = realloc(m->arena, cap);
    if (!a) return -1;
    m->arena = a;
    m->arena_cap = cap;
  }
  memcpy(m->arena + m->arena_n, key, len);
  size_t n = m->n++;
  m->hash[n] = h;
  m->key_off[n] = m->arena_n;
  m->key_len[n] = (uint32_t)len;
  m->val[n] = init;
  m->arena_n += len;
  size_t i = h & m->mask;
  while (m->slots[i]) i = (i + 1) & m->mask;
  m->slots[i] = (uint32_t)(n + 1);
  if (added) *added = 1;
  return (int64_t)n;
}
