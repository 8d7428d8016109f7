/* The tests' deterministic random numbers (xoshiro256** seeded by splitmix64, Box-Muller
 * normals): reproducible on every libc, one generator state per test program. Plus the two
 * one-word generators older tests draw their data from, so that those data stay what they were:
 * a step of xorshift64 and of Knuth's MMIX LCG on a state the caller keeps. (tests/tiny_model.c
 * has its own splitmix64: it defines the tiny models' bytes.) */
#ifndef WK_TEST_RNG_H
#define WK_TEST_RNG_H

#include <math.h>
#include <stdint.h>

static uint64_t rs[4];
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static inline uint64_t rng_u64(void) {
    uint64_t r = rotl(rs[1] * 5, 7) * 9, t = rs[1] << 17;
    rs[2] ^= rs[0];
    rs[3] ^= rs[1];
    rs[1] ^= rs[2];
    rs[0] ^= rs[3];
    rs[2] ^= t;
    rs[3] = rotl(rs[3], 45);
    return r;
}
static inline void rng_seed(uint64_t s) {
    for (int i = 0; i < 4; i++) { /* splitmix64 */
        s += 0x9E3779B97F4A7C15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        rs[i] = z ^ (z >> 31);
    }
}
/* Uniform in (0, 1), never 0 (safe for log). */
static inline double rng_unit(void) { return ((double)(rng_u64() >> 11) + 0.5) * 0x1.0p-53; }
/* Standard normal; the second value of each Box-Muller pair is kept for the next call. */
static inline double rng_gauss(void) {
    static int have;
    static double spare;
    if (have) {
        have = 0;
        return spare;
    }
    double u = rng_unit(), v = rng_unit(), r = sqrt(-2.0 * log(u));
    spare = r * sin(2.0 * M_PI * v);
    have = 1;
    return r * cos(2.0 * M_PI * v);
}

/* xorshift64 (13, 7, 17): the new state, which is also the draw. A zero state stays zero. */
static inline uint64_t rng_xorshift64(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Knuth's MMIX LCG: the new state; its high bits are the good ones. */
static inline uint64_t rng_lcg64(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s;
}

#endif
