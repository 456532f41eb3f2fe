/*
 * vector_rate.c - the 512-bit FMA rate probe (vector_rate.h).
 */
#include "ops/cpu/vector_rate.h"

#include <immintrin.h>
#include <pthread.h>
#include <time.h>

#define CHAINS 12        /* independent accumulators (a0..a11): latency 4 x 2 pipes, with room */
#define PROBE_STEPS 4096 /* FMAs per chain and round: tens of microseconds */
#define PROBE_ROUNDS 7

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CHAINS accumulators spelled out (an array indexed in a loop can stay in
 * memory and time the store-to-load path instead). The sums go back to
 * the caller so the loop cannot be dropped; the multiplier keeps every
 * value finite. */
#define CHAIN_STEP(V, FMA) \
    a0 = FMA(a0, m, c); a1 = FMA(a1, m, c); a2 = FMA(a2, m, c); a3 = FMA(a3, m, c); \
    a4 = FMA(a4, m, c); a5 = FMA(a5, m, c); a6 = FMA(a6, m, c); a7 = FMA(a7, m, c); \
    a8 = FMA(a8, m, c); a9 = FMA(a9, m, c); a10 = FMA(a10, m, c); a11 = FMA(a11, m, c)
#define CHAIN_BODY(V, SET1, FMA, ADD)                                                                    \
    const V m = SET1(0.999f), c = SET1(1e-3f);                                                           \
    V a0 = SET1(0.f), a1 = SET1(1.f), a2 = SET1(2.f), a3 = SET1(3.f), a4 = SET1(4.f), a5 = SET1(5.f);   \
    V a6 = SET1(6.f), a7 = SET1(7.f), a8 = SET1(8.f), a9 = SET1(9.f), a10 = SET1(10.f), a11 = SET1(11.f); \
    for (int s = 0; s < steps; s++) {                                                                    \
        CHAIN_STEP(V, FMA);                                                                              \
    }                                                                                                    \
    V sum = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                           \
    sum = ADD(sum, ADD(ADD(a8, a9), ADD(a10, a11)))

__attribute__((target("avx512f"), noinline)) static float fma_chains_512(int steps)
{
    CHAIN_BODY(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps);
    return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"), noinline)) static float fma_chains_256(int steps)
{
    CHAIN_BODY(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps);
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return lanes[0] + lanes[7];
}

static double measured_rate;
static pthread_once_t measured_once = PTHREAD_ONCE_INIT;

static void measure(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return;
    /* Rounds alternate the widths, so a frequency change or a neighbour's
     * burst touches both; the first of each warms the core's wide units. */
    volatile float sink = 0;
    double best512 = 1e30, best256 = 1e30;
    for (int r = 0; r <= PROBE_ROUNDS; r++) {
        double t0 = now_s();
        sink += fma_chains_512(PROBE_STEPS);
        double t1 = now_s();
        sink += fma_chains_256(PROBE_STEPS);
        double t2 = now_s();
        if (r == 0) continue;
        if (t1 - t0 < best512) best512 = t1 - t0;
        if (t2 - t1 < best256) best256 = t2 - t1;
    }
    (void)sink;
    /* Twice the floats per instruction: rate = 2 * t256 / t512. */
    if (best512 > 0) measured_rate = 2.0 * best256 / best512;
}

double mx_avx512_fma_rate(void)
{
    pthread_once(&measured_once, measure);
    return measured_rate;
}

bool mx_avx512_full_width(void) { return mx_avx512_fma_rate() >= 1.5; }
