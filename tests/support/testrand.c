/* testrand.c - see testrand.h. */
#include "testrand.h"

#include <check.h>
#include <stdlib.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void test_rand_seed(uint64_t seed) { rng_state = seed ? seed : 0x9e3779b97f4a7c15ull; }

double test_uniform(double lo, double hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

int64_t test_irand(int64_t lo, int64_t hi) { return lo + (int64_t)(test_uniform(0, 1) * (double)(hi - lo + 1)); }

float *test_rand_floats(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(p);
    for (int64_t i = 0; i < n; i++) p[i] = (float)test_uniform(-1, 1);
    return p;
}
