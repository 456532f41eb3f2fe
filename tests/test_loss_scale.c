/*
 * test_loss_scale.c - the dynamic loss scaler against scale sequences
 * worked out by hand from MXNet 1.9.1's LossScaler.has_overflow
 * (python/mxnet/contrib/amp/loss_scaler.py) and against a transcription
 * of it on random patterns; mx_all_finite on the CPU for every dtype with
 * inf, -inf and NaN (several bit patterns) planted at the first, middle
 * and last element and in a second array, the largest finite values and
 * subnormals (finite), empty arrays, views, several CPU contexts, arrays
 * long enough to be split across the kernel pool, pending writes that
 * must be waited for, errors of earlier writes, and bad arguments.
 */
#include "optimizer/loss_scale.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ================================================================ scaler */

START_TEST(scaler_defaults_are_mxnets)
{
    mx_loss_scaler s;
    mx_loss_scaler_init(&s);
    ck_assert(mx_loss_scaler_scale(&s) == 65536.0);
    ck_assert(s.next_scale == 65536.0);
    ck_assert(s.max_scale == 16777216.0);
    ck_assert_int_eq(s.scale_seq_len, 2000);
    ck_assert_int_eq(s.max_consecutive_skips, 32);
    ck_assert_int_eq(s.unskipped, 0);
    ck_assert_int_eq(s.steps, 0);
    ck_assert_int_eq(s.skipped, 0);
    ck_assert_int_eq(s.consecutive_skips, 0);
    ck_assert_int_eq(mx_loss_scaler_check(&s), MX_OK);
    char buf[96];
    ck_assert_str_eq(mx_loss_scaler_str(&s, buf, sizeof(buf)), "loss scale 65536 (0 steps skipped)");
}
END_TEST

/* Runs `n` updates with the same finiteness; each returns it. */
static void run(mx_loss_scaler *s, int n, bool finite)
{
    for (int i = 0; i < n; i++) ck_assert(mx_loss_scaler_update(s, finite) == finite);
}

/* Growth: the 2000th finite step in a row decides 2^17, which the step
 * after it installs (MXNet assigns _loss_scale = _next_loss_scale first). */
START_TEST(scaler_grows_after_exactly_2000_finite_steps)
{
    mx_loss_scaler s;
    mx_loss_scaler_init(&s);
    run(&s, 1999, true);
    ck_assert(s.scale == 65536.0 && s.next_scale == 65536.0);
    ck_assert_int_eq(s.unskipped, 1999);
    run(&s, 1, true); /* step 2000 */
    ck_assert(s.scale == 65536.0);
    ck_assert(s.next_scale == 131072.0);
    ck_assert_int_eq(s.unskipped, 0);
    run(&s, 1, true); /* step 2001 installs it: step 2002 runs at 2^17 */
    ck_assert(mx_loss_scaler_scale(&s) == 131072.0);
    ck_assert_int_eq(s.unskipped, 1);
    run(&s, 1998, true); /* 3999 */
    ck_assert(s.next_scale == 131072.0);
    run(&s, 1, true); /* 4000: 2000 finite since the last growth */
    ck_assert(s.next_scale == 262144.0 && s.scale == 131072.0);
    ck_assert_int_eq(s.steps, 4000);
    ck_assert_int_eq(s.skipped, 0);
}
END_TEST

/* An overflow: the step is skipped, the halving reaches the scale one
 * step late, and two in a row halve twice. */
START_TEST(scaler_halves_one_step_late)
{
    mx_loss_scaler s;
    mx_loss_scaler_init(&s);
    ck_assert(!mx_loss_scaler_update(&s, false)); /* step 1 ran at 2^16 */
    ck_assert(s.scale == 65536.0 && s.next_scale == 32768.0);
    ck_assert_int_eq(s.skipped, 1);
    ck_assert_int_eq(s.consecutive_skips, 1);
    char buf[96];
    ck_assert_str_eq(mx_loss_scaler_str(&s, buf, sizeof(buf)), "loss scale 65536 (1 step skipped)");
    ck_assert(mx_loss_scaler_update(&s, true)); /* step 2 ran at 2^16 too */
    ck_assert(mx_loss_scaler_scale(&s) == 32768.0);
    ck_assert_int_eq(s.consecutive_skips, 0);
    ck_assert(mx_loss_scaler_update(&s, true));
    ck_assert(mx_loss_scaler_scale(&s) == 32768.0);

    mx_loss_scaler_init(&s);
    const double want[] = {65536.0, 32768.0, 16384.0}; /* the scale after each update */
    const bool finite[] = {false, false, true};
    for (int i = 0; i < 3; i++) {
        ck_assert(mx_loss_scaler_update(&s, finite[i]) == finite[i]);
        ck_assert_msg(s.scale == want[i], "update %d: scale %g, want %g", i + 1, s.scale, want[i]);
    }
    ck_assert(s.next_scale == 16384.0);
    ck_assert_int_eq(s.skipped, 2);
    ck_assert_str_eq(mx_loss_scaler_str(&s, buf, sizeof(buf)), "loss scale 16384 (2 steps skipped)");
}
END_TEST

/* The finite-step counter restarts at every overflow: 1500 finite steps,
 * one overflow, 1999 finite steps do not grow; the 2000th does. */
START_TEST(scaler_overflow_resets_the_counter)
{
    mx_loss_scaler s;
    mx_loss_scaler_init(&s);
    run(&s, 1500, true);
    ck_assert_int_eq(s.unskipped, 1500);
    run(&s, 1, false);
    ck_assert_int_eq(s.unskipped, 0);
    ck_assert(s.next_scale == 32768.0);
    run(&s, 1999, true);
    ck_assert(s.scale == 32768.0 && s.next_scale == 32768.0);
    ck_assert_int_eq(s.unskipped, 1999);
    run(&s, 1, true);
    ck_assert(s.scale == 32768.0 && s.next_scale == 65536.0);
    ck_assert_int_eq(s.unskipped, 0);
    /* An overflow right after a growth was decided halves from the grown
     * scale that step installs: 2^16 -> next 2^15. */
    run(&s, 1, false);
    ck_assert(s.scale == 65536.0 && s.next_scale == 32768.0);
    ck_assert_int_eq(s.steps, 3502);
    ck_assert_int_eq(s.skipped, 2);
}
END_TEST

/* The cap: 2^16 doubles 8 times to 2^24 and stays; each capped growth
 * still restarts the counter. */
START_TEST(scaler_is_capped_at_its_max)
{
    mx_loss_scaler s;
    mx_loss_scaler_init(&s);
    for (int k = 1; k <= 10; k++) {
        run(&s, 2000, true);
        ck_assert_int_eq(s.unskipped, 0);
        const double want = k <= 8 ? ldexp(1.0, 16 + k) : 16777216.0;
        ck_assert_msg(s.next_scale == want, "growth %d: next %g, want %g", k, s.next_scale, want);
        ck_assert(s.next_scale <= s.max_scale);
    }
    run(&s, 1, true);
    ck_assert(mx_loss_scaler_scale(&s) == 16777216.0);
    ck_assert_int_eq(s.unskipped, 1);
    run(&s, 1, false);
    ck_assert(s.next_scale == 8388608.0);

    /* A cap that is not a power-of-two multiple: 3 -> 6 -> 10 -> 10. */
    ck_assert_int_eq(mx_loss_scaler_init_with(&s, 3.0, 10.0, 2, 0), MX_OK);
    const double want[] = {3, 3, 6, 6, 10, 10, 10, 10};
    for (int i = 0; i < 8; i++) {
        run(&s, 1, true);
        ck_assert_msg(s.scale == want[i], "update %d: scale %g, want %g", i + 1, s.scale, want[i]);
    }
}
END_TEST

/* MXNet has no lower bound; ours stops at 2^-126 so the scale is never 0. */
START_TEST(scaler_goes_below_one_but_never_to_zero)
{
    mx_loss_scaler s;
    mx_loss_scaler_init(&s);
    s.max_consecutive_skips = 0; /* MXNet: no stop */
    run(&s, 27, false);
    ck_assert(s.scale == ldexp(1.0, -10)); /* 2^(17 - 27) */
    ck_assert_int_eq(mx_loss_scaler_check(&s), MX_OK);
    run(&s, 2000, false);
    ck_assert(s.scale == 0x1p-126 && s.next_scale == 0x1p-126);
    ck_assert(s.scale > 0);
    ck_assert_int_eq(mx_loss_scaler_check(&s), MX_OK);
    ck_assert_int_eq(s.consecutive_skips, 2027);
    run(&s, 1, true);
    ck_assert(s.scale == 0x1p-126);

    ck_assert_int_eq(mx_loss_scaler_init_with(&s, 0x1p-125, 1.0, 5, 0), MX_OK);
    run(&s, 1, false);
    ck_assert(s.next_scale == 0x1p-126);
    run(&s, 1, false);
    ck_assert(s.scale == 0x1p-126 && s.next_scale == 0x1p-126);
}
END_TEST

/* NaN gradients on every step: the check fails at the 32nd skip in a row,
 * naming the count and the scale; a finite step clears it. */
START_TEST(scaler_stop_rule)
{
    mx_loss_scaler s;
    mx_loss_scaler_init(&s);
    for (int i = 1; i <= 31; i++) {
        run(&s, 1, false);
        ck_assert_int_eq(mx_loss_scaler_check(&s), MX_OK);
    }
    run(&s, 1, false);
    ck_assert(s.scale == ldexp(1.0, -15));
    ck_assert_int_eq(mx_loss_scaler_check(&s), MX_ERR_RUNTIME);
    ck_assert_msg(strstr(mx_last_error(), "not finite on 32 steps in a row"), "%s", mx_last_error());
    ck_assert_msg(strstr(mx_last_error(), "(2^-15)"), "%s", mx_last_error());
    run(&s, 1, true);
    ck_assert_int_eq(s.consecutive_skips, 0);
    ck_assert_int_eq(mx_loss_scaler_check(&s), MX_OK);
    ck_assert_int_eq(s.skipped, 32);

    /* Interrupted runs of skips do not add up. */
    mx_loss_scaler_init(&s);
    for (int r = 0; r < 10; r++) {
        run(&s, 31, false);
        run(&s, 1, true);
        ck_assert_int_eq(mx_loss_scaler_check(&s), MX_OK);
    }
    ck_assert_int_eq(s.skipped, 310);
}
END_TEST

START_TEST(scaler_settings_are_checked)
{
    mx_loss_scaler s;
    mx_loss_scaler_init(&s);
    const mx_loss_scaler before = s;
    ck_assert_int_eq(mx_loss_scaler_init_with(&s, 0.0, 16.0, 10, 0), MX_ERR_INVALID);
    ck_assert_int_eq(mx_loss_scaler_init_with(&s, -1.0, 16.0, 10, 0), MX_ERR_INVALID);
    ck_assert_int_eq(mx_loss_scaler_init_with(&s, NAN, 16.0, 10, 0), MX_ERR_INVALID);
    ck_assert_int_eq(mx_loss_scaler_init_with(&s, 32.0, 16.0, 10, 0), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "initial scale 32"), "%s", mx_last_error());
    ck_assert_int_eq(mx_loss_scaler_init_with(&s, 1.0, INFINITY, 10, 0), MX_ERR_INVALID);
    ck_assert_int_eq(mx_loss_scaler_init_with(&s, 1.0, 16.0, 0, 0), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "scale_seq_len 0"), "%s", mx_last_error());
    ck_assert_int_eq(mx_loss_scaler_init_with(&s, 1.0, 16.0, 10, -1), MX_ERR_INVALID);
    ck_assert_int_eq(mx_loss_scaler_init_with(NULL, 1.0, 16.0, 10, 1), MX_ERR_INVALID);
    ck_assert(memcmp(&s, &before, sizeof(s)) == 0);
    ck_assert_int_eq(mx_loss_scaler_init_with(&s, 16.0, 16.0, 1, 3), MX_OK);
    ck_assert(s.scale == 16.0 && s.next_scale == 16.0 && s.max_scale == 16.0);
    ck_assert_int_eq(s.scale_seq_len, 1);
    ck_assert_int_eq(s.max_consecutive_skips, 3);
}
END_TEST

/* MXNet's LossScaler transcribed (its own variable names), against the
 * library on random patterns with small seq_len so growth, the cap and
 * halving all happen; also a copy of the struct resumes identically. */
typedef struct ref_scaler {
    double _loss_scale, _next_loss_scale, _max_loss_scale;
    int64_t _scale_seq_len, _unskipped;
} ref_scaler;

static bool ref_has_overflow(ref_scaler *r, bool has_overflow)
{
    r->_loss_scale = r->_next_loss_scale;
    if (has_overflow) {
        r->_next_loss_scale = r->_loss_scale / 2.;
        r->_unskipped = 0;
    } else {
        r->_unskipped += 1;
    }
    if (r->_unskipped == r->_scale_seq_len) {
        r->_unskipped = 0;
        r->_next_loss_scale = fmin(r->_max_loss_scale, r->_loss_scale * 2.);
    }
    return has_overflow;
}

/* A checkpoint's state: a scaler restored from one taken mid-run goes on
 * exactly as the original; impossible values leave it untouched. */
START_TEST(scaler_state_saves_and_restores)
{
    mx_loss_scaler a, b;
    mx_loss_scaler_init(&a);
    mx_loss_scaler_init(&b);
    run(&a, 3, false);
    run(&a, 1500, true);
    double v[MX_LOSS_SCALER_STATE];
    mx_loss_scaler_save(&a, v);
    ck_assert_int_eq(mx_loss_scaler_restore(&b, v), MX_OK);
    for (int i = 0; i < 700; i++) {
        bool finite = i % 301 != 300;
        ck_assert(mx_loss_scaler_update(&a, finite) == mx_loss_scaler_update(&b, finite));
        ck_assert(mx_loss_scaler_scale(&a) == mx_loss_scaler_scale(&b));
    }
    ck_assert(a.skipped == b.skipped && a.steps == b.steps && a.unskipped == b.unskipped);
    mx_loss_scaler_save(&a, v);
    const double bad[][MX_LOSS_SCALER_STATE] = {{-1, 65536, 0, 0, 0, 0},      {0x1p-127, 65536, 0, 0, 0, 0},
                                                 {65536, 0x1p25, 0, 0, 0, 0}, {65536, 65536, -1, 0, 0, 0},
                                                 {65536, 65536, 0, 0, -2, 0}, {NAN, 65536, 0, 0, 0, 0}};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        ck_assert_int_eq(mx_loss_scaler_restore(&b, bad[k]), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "impossible values"));
        double now[MX_LOSS_SCALER_STATE];
        mx_loss_scaler_save(&b, now);
        ck_assert_int_eq(memcmp(now, v, sizeof(v)), 0);
    }
}
END_TEST

START_TEST(scaler_matches_mxnet_transcription)
{
    enum { STEPS = 5000, HALF = 2500 };
    static bool overflow[STEPS];
    uint64_t x = 99;
    bool capped = false, halved = false;
    for (int trial = 0; trial < 20; trial++) {
        const int64_t seq = 1 + trial % 7;
        const double p_overflow = 0.02 + 0.015 * (trial % 5);
        for (int step = 0; step < STEPS; step++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            overflow[step] = (double)(x >> 11) * 0x1p-53 < p_overflow;
        }
        mx_loss_scaler s, resumed;
        ck_assert_int_eq(mx_loss_scaler_init_with(&s, 65536.0, 16777216.0, seq, 0), MX_OK);
        ref_scaler r = {65536.0, 65536.0, 16777216.0, seq, 0};
        int64_t skipped = 0;
        for (int step = 0; step < STEPS; step++) {
            if (step == HALF) resumed = s;
            ck_assert(mx_loss_scaler_update(&s, !overflow[step]) == !ref_has_overflow(&r, overflow[step]));
            skipped += overflow[step];
            capped |= s.scale == 16777216.0;
            halved |= s.scale < 65536.0;
            ck_assert_msg(r._next_loss_scale >= 0x1p-126, "trial %d: the pattern reaches our floor", trial);
            ck_assert_msg(s.scale == r._loss_scale && s.next_scale == r._next_loss_scale &&
                              s.unskipped == r._unskipped,
                          "trial %d step %d: scale %g next %g unskipped %lld, MXNet %g %g %lld", trial, step,
                          s.scale, s.next_scale, (long long)s.unskipped, r._loss_scale, r._next_loss_scale,
                          (long long)r._unskipped);
        }
        ck_assert_int_eq(s.skipped, skipped);
        ck_assert_int_eq(s.steps, STEPS);
        /* A copy of the struct taken half-way (a checkpoint) resumes to
         * the same state. */
        for (int step = HALF; step < STEPS; step++) mx_loss_scaler_update(&resumed, !overflow[step]);
        ck_assert(memcmp(&resumed, &s, sizeof(s)) == 0);
    }
    ck_assert(capped && halved); /* the patterns reach the cap and go below the start */
}
END_TEST

/* =========================================================== all_finite */

static mx_runtime *make_runtime(int cpu_contexts, bool naive)
{
    mx_engine_config c = mx_engine_config_default();
    c.cpu_workers = 4;
    c.kernel_threads = 4;
    c.cpu_contexts = cpu_contexts;
    c.naive = naive;
    mx_runtime *rt = NULL;
    ck_assert_int_eq(mx_runtime_create(&c, &rt), MX_OK);
    return rt;
}

static const mx_dtype dtypes[] = {MX_FLOAT32, MX_FLOAT64, MX_FLOAT16, MX_BFLOAT16};

/* Bit patterns per dtype, in the element's own width. */
typedef struct dt_bits {
    uint64_t one;          /* 1.0 */
    uint64_t bad[6];       /* inf, -inf, quiet NaN, negative NaN, NaN with the lowest payload, all ones */
    uint64_t good[6];      /* largest finite, its negative, smallest subnormal, -0, smallest normal, 1.5 */
} dt_bits;

static dt_bits bits_of(mx_dtype t)
{
    switch (t) {
    case MX_FLOAT32:
        return (dt_bits){0x3f800000u,
                         {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu},
                         {0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000000u, 0x00800000u, 0x3fc00000u}};
    case MX_FLOAT64:
        return (dt_bits){0x3ff0000000000000ull,
                         {0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull,
                          0xfff8000000000000ull, 0x7ff0000000000001ull, 0xffffffffffffffffull},
                         {0x7fefffffffffffffull, 0xffefffffffffffffull, 1ull, 0x8000000000000000ull,
                          0x0010000000000000ull, 0x3ff8000000000000ull}};
    case MX_FLOAT16:
        return (dt_bits){0x3c00, {0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xffff},
                         {0x7bff, 0xfbff, 0x0001, 0x8000, 0x0400, 0x3e00}};
    default: /* bfloat16 */
        return (dt_bits){0x3f80, {0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xffff},
                         {0x7f7f, 0xff7f, 0x0001, 0x8000, 0x0080, 0x3fc0}};
    }
}

static void put(void *buf, mx_dtype t, int64_t i, uint64_t v)
{
    switch (mx_dtype_size(t)) {
    case 2: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    default: ((uint64_t *)buf)[i] = v; break;
    }
}

/* A host buffer of n elements of dtype t, each 1.0 but the finite
 * extremes sprinkled in. */
static void *host_ones(mx_dtype t, int64_t n)
{
    void *buf = malloc((size_t)(n ? n : 1) * mx_dtype_size(t));
    ck_assert_ptr_nonnull(buf);
    const dt_bits b = bits_of(t);
    for (int64_t i = 0; i < n; i++) put(buf, t, i, i % 97 == 5 ? b.good[(i / 97) % 6] : b.one);
    return buf;
}

static mx_ndarray *make_array(mx_runtime *rt, mx_dtype t, int64_t n, mx_context ctx, const void *host)
{
    mx_ndarray *a = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(n), t, ctx, &a), MX_OK);
    if (host && n) ck_assert_int_eq(mx_ndarray_from_host(a, host, (size_t)n * mx_dtype_size(t)), MX_OK);
    return a;
}

static bool all_finite(mx_ndarray *const *a, int n)
{
    bool finite = false;
    ck_assert_msg(mx_all_finite(a, n, &finite) == MX_OK, "%s", mx_last_error());
    return finite;
}

/* Each dtype, each bad pattern at the first, middle and last element of
 * the first or the second of two arrays; the finite extremes pass. */
START_TEST(all_finite_each_dtype_and_position)
{
    const mx_dtype t = dtypes[_i];
    mx_runtime *rt = make_runtime(0, false);
    const int64_t n0 = 1001, n1 = 37;
    void *h0 = host_ones(t, n0), *h1 = host_ones(t, n1);
    const dt_bits b = bits_of(t);
    for (int k = 0; k < 6; k++) put(h1, t, k, b.good[k]); /* every extreme at least once */
    mx_ndarray *a[2] = {make_array(rt, t, n0, mx_cpu(), h0), make_array(rt, t, n1, mx_cpu(), h1)};
    ck_assert_msg(all_finite(a, 2), "%s: finite extremes reported as non-finite", mx_dtype_name(t));
    int cases = 0;
    for (int which = 0; which < 2; which++) {
        const int64_t n = which ? n1 : n0;
        void *h = which ? h1 : h0;
        const int64_t where[3] = {0, n / 2, n - 1};
        for (int p = 0; p < 3; p++)
            for (int k = 0; k < 6; k++) {
                uint64_t keep = 0;
                memcpy(&keep, (char *)h + where[p] * (int64_t)mx_dtype_size(t), mx_dtype_size(t));
                put(h, t, where[p], b.bad[k]);
                ck_assert_int_eq(mx_ndarray_from_host(a[which], h, (size_t)n * mx_dtype_size(t)), MX_OK);
                ck_assert_msg(!all_finite(a, 2), "%s: pattern %#llx at %lld of array %d not found", mx_dtype_name(t),
                              (unsigned long long)b.bad[k], (long long)where[p], which);
                ck_assert_msg(!all_finite(&a[which], 1), "%s alone", mx_dtype_name(t));
                ck_assert(all_finite(&a[1 - which], 1));
                memcpy((char *)h + where[p] * (int64_t)mx_dtype_size(t), &keep, mx_dtype_size(t));
                ck_assert_int_eq(mx_ndarray_from_host(a[which], h, (size_t)n * mx_dtype_size(t)), MX_OK);
                cases++;
            }
    }
    ck_assert(all_finite(a, 2));
    printf("all_finite %s: %d planted non-finite values found, extremes finite\n", mx_dtype_name(t), cases);
    mx_ndarray_free(a[0]), mx_ndarray_free(a[1]);
    free(h0), free(h1);
    mx_runtime_free(rt);
}
END_TEST

/* Mixed dtypes in one call, the same array twice, views. */
START_TEST(all_finite_mixed_dtypes_duplicates_and_views)
{
    mx_runtime *rt = make_runtime(0, false);
    mx_ndarray *a[4];
    void *h[4];
    for (int i = 0; i < 4; i++) {
        h[i] = host_ones(dtypes[i], 300 + i);
        a[i] = make_array(rt, dtypes[i], 300 + i, mx_cpu(), h[i]);
    }
    ck_assert(all_finite(a, 4));
    for (int i = 0; i < 4; i++) {
        put(h[i], dtypes[i], 299, bits_of(dtypes[i]).bad[2]);
        ck_assert_int_eq(mx_ndarray_from_host(a[i], h[i], (size_t)(300 + i) * mx_dtype_size(dtypes[i])), MX_OK);
        ck_assert_msg(!all_finite(a, 4), "NaN in the %s array", mx_dtype_name(dtypes[i]));
        mx_ndarray *twice[3] = {a[i], a[(i + 1) % 4], a[i]};
        ck_assert(!all_finite(twice, 3));
        /* A view of rows [0, 299) leaves the NaN out, [1, 300) takes it. */
        mx_ndarray *v;
        ck_assert_int_eq(mx_ndarray_slice(a[i], 0, 299, &v), MX_OK);
        ck_assert(all_finite(&v, 1));
        mx_ndarray_free(v);
        ck_assert_int_eq(mx_ndarray_slice(a[i], 1, 300, &v), MX_OK);
        ck_assert(!all_finite(&v, 1));
        mx_ndarray_free(v);
        put(h[i], dtypes[i], 299, bits_of(dtypes[i]).one);
        ck_assert_int_eq(mx_ndarray_from_host(a[i], h[i], (size_t)(300 + i) * mx_dtype_size(dtypes[i])), MX_OK);
    }
    ck_assert(all_finite(a, 4));
    for (int i = 0; i < 4; i++) mx_ndarray_free(a[i]), free(h[i]);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(all_finite_empty)
{
    mx_runtime *rt = make_runtime(0, false);
    bool finite = false;
    ck_assert_int_eq(mx_all_finite(NULL, 0, &finite), MX_OK);
    ck_assert(finite);
    mx_ndarray *e[4];
    for (int i = 0; i < 4; i++) e[i] = make_array(rt, dtypes[i], 0, mx_cpu(), NULL);
    ck_assert(all_finite(e, 4));
    mx_ndarray *z;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(3, 0, 2), MX_FLOAT16, mx_cpu(), &z), MX_OK);
    ck_assert(all_finite(&z, 1));
    /* An empty array beside one holding NaN. */
    float v[3] = {1, NAN, 2};
    mx_ndarray *mix[3] = {e[0], make_array(rt, MX_FLOAT32, 3, mx_cpu(), v), e[2]};
    ck_assert(!all_finite(mix, 3));
    for (int i = 0; i < 4; i++) mx_ndarray_free(e[i]);
    mx_ndarray_free(z);
    mx_ndarray_free(mix[1]);
    mx_runtime_free(rt);
}
END_TEST

/* Arrays long enough to be split across the pool (several pieces each),
 * with one bad value anywhere; also through the synchronous engine and
 * with the arrays on two CPU contexts (two operations). */
START_TEST(all_finite_large_arrays)
{
    const int mode = _i; /* 0: threaded, 1: NaiveEngine, 2: cpu(0) and cpu(1) */
    mx_runtime *rt = make_runtime(mode == 2 ? 2 : 0, mode == 1);
    const int64_t n32 = 3000017, n16 = 1000003;
    float *h32 = malloc(sizeof(float) * (size_t)n32);
    uint16_t *h16 = malloc(sizeof(uint16_t) * (size_t)n16);
    for (int64_t i = 0; i < n32; i++) h32[i] = (float)(i % 1000) - 500.0f;
    for (int64_t i = 0; i < n16; i++) h16[i] = (uint16_t)(i % 0x7c00); /* every finite positive half */
    mx_ndarray *a[3] = {make_array(rt, MX_FLOAT32, n32, mx_cpu(), h32),
                        make_array(rt, MX_FLOAT16, n16, mode == 2 ? (mx_context){MX_DEV_CPU, 1} : mx_cpu(), h16),
                        make_array(rt, MX_FLOAT64, 5, mx_cpu(), (double[]){1, 2, 3, 4, 5})};
    ck_assert(all_finite(a, 3));
    const int64_t spots[] = {0, 65535, 65536, 1234567, n32 - 1};
    for (int s = 0; s < 5; s++) {
        const float keep = h32[spots[s]];
        h32[spots[s]] = s % 2 ? -INFINITY : NAN;
        ck_assert_int_eq(mx_ndarray_from_host(a[0], h32, sizeof(float) * (size_t)n32), MX_OK);
        ck_assert_msg(!all_finite(a, 3), "float32 at %lld", (long long)spots[s]);
        h32[spots[s]] = keep;
    }
    ck_assert_int_eq(mx_ndarray_from_host(a[0], h32, sizeof(float) * (size_t)n32), MX_OK);
    h16[n16 - 1] = 0x7c00;
    ck_assert_int_eq(mx_ndarray_from_host(a[1], h16, sizeof(uint16_t) * (size_t)n16), MX_OK);
    ck_assert(!all_finite(a, 3));
    ck_assert(!all_finite(&a[1], 1));
    ck_assert(all_finite(a, 1));
    h16[n16 - 1] = 0x7bff;
    h16[n16 / 3] = 0xfe00;
    ck_assert_int_eq(mx_ndarray_from_host(a[1], h16, sizeof(uint16_t) * (size_t)n16), MX_OK);
    ck_assert(!all_finite(a, 3));
    for (int i = 0; i < 3; i++) mx_ndarray_free(a[i]);
    free(h32), free(h16);
    mx_runtime_free(rt);
}
END_TEST

/* An operation that writes an array after a pause: mx_all_finite pushed
 * after it must see what it wrote. */
typedef struct slow_write {
    mx_ndarray *a;
    double value;
    bool fail;
} slow_write;

static mx_status slow_write_run(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    slow_write *w = payload;
    usleep(30000);
    if (w->fail) return MX_ERROR(MX_ERR_RUNTIME, "planted failure");
    const int64_t last = mx_ndarray_size(w->a) - 1;
    if (mx_ndarray_dtype(w->a) == MX_FLOAT32) ((float *)mx_ndarray_data(w->a))[last] = (float)w->value;
    else ((double *)mx_ndarray_data(w->a))[last] = w->value;
    return MX_OK;
}

static void push_slow_write(mx_ndarray *a, double value, bool fail)
{
    slow_write *w = malloc(sizeof(*w));
    *w = (slow_write){a, value, fail};
    mx_engine_var *var = mx_ndarray_var(a);
    mx_engine_op op = {.fn = slow_write_run, .payload = w, .payload_free = free, .writes = &var, .n_writes = 1,
                       .ctx = mx_cpu(), .lane = MX_LANE_COMPUTE, .name = "slow write"};
    ck_assert_int_eq(mx_engine_push(mx_runtime_engine(mx_ndarray_runtime(a)), &op), MX_OK);
}

START_TEST(all_finite_waits_for_pending_writes)
{
    mx_runtime *rt = make_runtime(0, false);
    mx_ndarray *a = make_array(rt, MX_FLOAT32, 100000, mx_cpu(), NULL);
    mx_ndarray *d = make_array(rt, MX_FLOAT64, 10, mx_cpu(), NULL);
    for (int r = 0; r < 5; r++) {
        ck_assert_int_eq(mx_nd_fill(a, 1.0), MX_OK);
        ck_assert_int_eq(mx_nd_fill(d, 2.0), MX_OK);
        push_slow_write(r % 2 ? d : a, r % 2 ? -INFINITY : NAN, false);
        mx_ndarray *both[2] = {a, d};
        ck_assert_msg(!all_finite(both, 2), "round %d: the pending write was not waited for", r);
        push_slow_write(r % 2 ? d : a, 3.0, false);
        ck_assert_msg(all_finite(both, 2), "round %d", r);
    }
    /* Fills (the library's own pushes) in every dtype. */
    for (int i = 0; i < 4; i++) {
        mx_ndarray *x = make_array(rt, dtypes[i], 4099, mx_cpu(), NULL);
        ck_assert_int_eq(mx_nd_fill(x, 0.5), MX_OK);
        ck_assert(all_finite(&x, 1));
        ck_assert_int_eq(mx_nd_fill(x, INFINITY), MX_OK);
        ck_assert_msg(!all_finite(&x, 1), "%s fill with inf", mx_dtype_name(dtypes[i]));
        ck_assert_int_eq(mx_nd_fill(x, -2.0), MX_OK);
        ck_assert(all_finite(&x, 1));
        ck_assert_int_eq(mx_nd_fill(x, NAN), MX_OK);
        ck_assert(!all_finite(&x, 1));
        mx_ndarray_free(x);
    }
    mx_ndarray_free(a);
    mx_ndarray_free(d);
    mx_runtime_free(rt);
}
END_TEST

/* A failed write of an array is mx_all_finite's error (the array keeps
 * it for its own next wait). */
START_TEST(all_finite_reports_earlier_errors)
{
    mx_runtime *rt = make_runtime(0, false);
    mx_ndarray *a = make_array(rt, MX_FLOAT32, 64, mx_cpu(), NULL), *b = make_array(rt, MX_FLOAT32, 64, mx_cpu(), NULL);
    ck_assert_int_eq(mx_nd_fill(a, 1.0), MX_OK);
    ck_assert_int_eq(mx_nd_fill(b, 1.0), MX_OK);
    push_slow_write(b, 0.0, true);
    mx_ndarray *both[2] = {a, b};
    bool finite = true;
    ck_assert_int_eq(mx_all_finite(both, 2, &finite), MX_ERR_RUNTIME);
    ck_assert(!finite);
    ck_assert_msg(strstr(mx_last_error(), "planted failure"), "%s", mx_last_error());
    ck_assert_int_eq(mx_ndarray_wait_to_read(b), MX_ERR_RUNTIME);
    ck_assert_int_eq(mx_ndarray_wait_to_read(b), MX_OK);
    ck_assert_int_eq(mx_nd_fill(b, 1.0), MX_OK);
    ck_assert(all_finite(both, 2));
    mx_ndarray_free(a), mx_ndarray_free(b);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(all_finite_bad_arguments)
{
    mx_runtime *rt = make_runtime(0, false), *other = make_runtime(0, false);
    mx_ndarray *f = make_array(rt, MX_FLOAT32, 4, mx_cpu(), (float[]){1, 2, 3, 4});
    bool finite = true;
    ck_assert_int_eq(mx_all_finite(&f, 1, NULL), MX_ERR_INVALID);
    ck_assert_int_eq(mx_all_finite(&f, -1, &finite), MX_ERR_INVALID);
    ck_assert(!finite);
    finite = true;
    ck_assert_int_eq(mx_all_finite(NULL, 2, &finite), MX_ERR_INVALID);
    ck_assert(!finite);
    mx_ndarray *with_null[2] = {f, NULL};
    ck_assert_int_eq(mx_all_finite(with_null, 2, &finite), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "array 1 of 2 is NULL"), "%s", mx_last_error());
    const mx_dtype refused[] = {MX_INT32, MX_UINT8, MX_INT8, MX_INT64};
    for (int i = 0; i < 4; i++) {
        mx_ndarray *x = make_array(rt, refused[i], 3, mx_cpu(), NULL);
        mx_ndarray *list[2] = {f, x};
        finite = true;
        ck_assert_int_eq(mx_all_finite(list, 2, &finite), MX_ERR_INVALID);
        ck_assert(!finite);
        char want[64];
        snprintf(want, sizeof(want), "array 1 has dtype %s", mx_dtype_name(refused[i]));
        ck_assert_msg(strstr(mx_last_error(), want), "%s", mx_last_error());
        mx_ndarray_free(x);
    }
    mx_ndarray *g = make_array(other, MX_FLOAT32, 4, mx_cpu(), (float[]){1, 2, 3, 4});
    mx_ndarray *mixed[2] = {f, g};
    ck_assert_int_eq(mx_all_finite(mixed, 2, &finite), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "another runtime"), "%s", mx_last_error());
    mx_ndarray_free(f), mx_ndarray_free(g);
    mx_runtime_free(rt);
    mx_runtime_free(other);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loss_scale");
    TCase *tc = tcase_create("scaler");
    tcase_add_test(tc, scaler_defaults_are_mxnets);
    tcase_add_test(tc, scaler_grows_after_exactly_2000_finite_steps);
    tcase_add_test(tc, scaler_halves_one_step_late);
    tcase_add_test(tc, scaler_overflow_resets_the_counter);
    tcase_add_test(tc, scaler_is_capped_at_its_max);
    tcase_add_test(tc, scaler_goes_below_one_but_never_to_zero);
    tcase_add_test(tc, scaler_stop_rule);
    tcase_add_test(tc, scaler_settings_are_checked);
    tcase_add_test(tc, scaler_state_saves_and_restores);
    tcase_add_test(tc, scaler_matches_mxnet_transcription);
    suite_add_tcase(s, tc);
    TCase *af = tcase_create("all_finite");
    tcase_set_timeout(af, 120);
    tcase_add_loop_test(af, all_finite_each_dtype_and_position, 0, 4);
    tcase_add_test(af, all_finite_mixed_dtypes_duplicates_and_views);
    tcase_add_test(af, all_finite_empty);
    tcase_add_loop_test(af, all_finite_large_arrays, 0, 3);
    tcase_add_test(af, all_finite_waits_for_pending_writes);
    tcase_add_test(af, all_finite_reports_earlier_errors);
    tcase_add_test(af, all_finite_bad_arguments);
    suite_add_tcase(s, af);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
