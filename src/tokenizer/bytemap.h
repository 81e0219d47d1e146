/* A hash map from byte strings to 64-bit values, keys copied into an arena: the
 * vocabulary (token bytes -> id), the trainer's word counts and the encoder's cache. */
#ifndef ATOLL_TOKENIZER_BYTEMAP_H
#define ATOLL_TOKENIZER_BYTEMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t *slots; /* entry index + 1; 0 is empty */
  size_t mask;
  uint64_t *hash;  /* per entry */
  uint64_t *key_off;
  uint32_t *key_len;
  int64_t *val;
  size_t n, cap;
  uint8_t *arena;
  size_t arena_n, arena_cap;
} atoll_bytemap;

uint64_t atoll_bytes_hash(const uint8_t *p, size_t n);
void atoll_bytemap_free(atoll_bytemap *m);
/* Entry index of key, or -1. */
int64_t atoll_bytemap_find(const atoll_bytemap *m, const uint8_t *key, size_t len, uint64_t h);
/* Entry index of key, added with value init when missing (*added = 1); -1 when out of memory. */
int64_t atoll_bytemap_put(atoll_bytemap *m, const uint8_t *key, size_t len, uint64_t h, int64_t init,
                          int *added);
static inline const uint8_t *atoll_bytemap_key(const atoll_bytemap *m, size_t e) {
  return m->arena + m->key_off[e];
}
/* Empties the map, keeping its memory. */
void atoll_bytemap_clear(atoll_bytemap *m);

#endif
