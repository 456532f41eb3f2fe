/*
 * testrand.h - reproducible random numbers for the tests (xorshift64): one
 * stream per test process (Check runs each test in its own process), which
 * a test reseeds when it wants a fixed draw of shapes.
 */
#ifndef MX_TEST_TESTRAND_H
#define MX_TEST_TESTRAND_H

#include <stdint.h>

void test_rand_seed(uint64_t seed);
/* Uniform in [lo, hi), 53 random bits. */
double test_uniform(double lo, double hi);
/* Uniform integer in [lo, hi]. */
int64_t test_irand(int64_t lo, int64_t hi);
/* n floats uniform in [-1, 1), malloc'ed (at least one element); the caller frees. */
float *test_rand_floats(int64_t n);

#endif /* MX_TEST_TESTRAND_H */
