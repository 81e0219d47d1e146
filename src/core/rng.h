/* Deterministic random numbers and hashes (src/core/rng.c). */
#ifndef ATOLL_CORE_RNG_H
#define ATOLL_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>


/* Deterministic 64-bit generator (splitmix64 seeding, xoshiro256** core). */
typedef struct {
  uint64_t s[4];
} atoll_rng;

void atoll_rng_seed(atoll_rng *r, uint64_t seed);
uint64_t atoll_rng_next(atoll_rng *r);
float atoll_rng_uniform(atoll_rng *r); /* [0, 1) */
float atoll_rng_normal(atoll_rng *r);  /* standard normal */
/* A stateless hash of several integers, used to derive independent streams. */
uint64_t atoll_hash64(uint64_t a, uint64_t b, uint64_t c, uint64_t d);
/* A 64-bit hash of n floats' bits: ranks and islands compare weights with it. */
uint64_t atoll_hash_floats(const float *p, size_t n);

#endif
