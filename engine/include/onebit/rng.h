/* A small deterministic random number generator (xoshiro256** seeded through splitmix64).
 *
 * The state is a plain struct so that it can be copied, stored in a checkpoint and restored:
 * the same seed gives the same stream on every machine. */
#ifndef ONEBIT_RNG_H
#define ONEBIT_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_rng {
    uint64_t s[4];
} ob_rng;

/* Seeds the generator; distinct (seed, stream) pairs give independent-looking streams, e.g.
 * stream = rank to give each rank its own sequence from one job seed. */
void ob_rng_seed(ob_rng *rng, uint64_t seed, uint64_t stream);

/* Next 64 random bits. */
uint64_t ob_rng_next(ob_rng *rng);

/* Uniform integer in [0, n) without modulo bias; n > 0. */
uint64_t ob_rng_below(ob_rng *rng, uint64_t n);

/* Uniform float in [0, 1). */
float ob_rng_uniform(ob_rng *rng);

/* Standard normal sample (Box-Muller; the second value of each pair is discarded so that the
 * state alone determines the stream). */
float ob_rng_normal(ob_rng *rng);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_RNG_H */
