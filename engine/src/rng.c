/* xoshiro256** generator, seeded with splitmix64 (public-domain algorithms by Blackman & Vigna). */
#include "onebit/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void ob_rng_seed(ob_rng *rng, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x);
}

uint64_t ob_rng_next(ob_rng *rng)
{
    uint64_t *s = rng->s;
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

uint64_t ob_rng_below(ob_rng *rng, uint64_t n)
{
    /* Rejection sampling: discard draws from the incomplete top interval. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do {
        r = ob_rng_next(rng);
    } while (r >= limit);
    return r % n;
}

float ob_rng_uniform(ob_rng *rng)
{
    return (float)(ob_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}

float ob_rng_normal(ob_rng *rng)
{
    double u1 = ((double)(ob_rng_next(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(ob_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
