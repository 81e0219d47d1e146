/* Deterministic random numbers: xoshiro256** seeded through splitmix64.
 * The whole state is four words, saved in checkpoints so a resumed run continues
 * the same stream. */
#include "atoll/atoll.h"
#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void atoll_rng_seed(atoll_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t atoll_rng_next(atoll_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

float atoll_rng_uniform(atoll_rng *r) { return (float)(atoll_rng_next(r) >> 40) * (1.0f / 16777216.0f); }

float atoll_rng_normal(atoll_rng *r) {
  /* Box-Muller; uses two draws per value so the stream position is predictable. */
  double u1 = ((double)(atoll_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (double)(atoll_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t atoll_hash64(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t x = a;
  uint64_t h = splitmix64(&x);
  x = h ^ b;
  h = splitmix64(&x);
  x = h ^ c;
  h = splitmix64(&x);
  x = h ^ d;
  return splitmix64(&x);
}

uint64_t atoll_hash_floats(const float *p, size_t n) {
  const uint32_t *w = (const uint32_t *)p;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (size_t i = 0; i < n; i++) {
    h ^= w[i];
    h *= 0x100000001B3ull;
    h ^= h >> 29;
  }
  return h;
}
