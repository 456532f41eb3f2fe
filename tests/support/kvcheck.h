/*
 * kvcheck.h - what the KVStore suites share (test_kvstore.c,
 * test_gpu_kvstore.c): a runtime, small float32 arrays of KV_N values,
 * gradients that differ per device, index and round, and an error check.
 */
#ifndef MX_TEST_KVCHECK_H
#define MX_TEST_KVCHECK_H

#include "kvstore/kvstore.h"

#include <check.h>
#include <math.h>
#include <string.h>

#define KV_N 6 /* values of every test array: shape (2, 3) */

static inline mx_runtime *kv_make_runtime(void)
{
    mx_engine_config c = mx_engine_config_default();
    c.cpu_workers = 4;
    mx_runtime *rt = NULL;
    ck_assert_int_eq(mx_runtime_create(&c, &rt), MX_OK);
    return rt;
}

/* A (2, 3) float32 array on ctx holding v, or zeros when v is NULL. */
static inline mx_ndarray *kv_array_on(mx_runtime *rt, mx_context ctx, const float *v)
{
    mx_ndarray *a = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, ctx, &a), MX_OK);
    if (v) ck_assert_int_eq(mx_ndarray_from_host(a, v, sizeof(float) * KV_N), MX_OK);
    else ck_assert_int_eq(mx_nd_fill(a, 0), MX_OK);
    return a;
}

static inline void kv_read(mx_ndarray *a, float *out)
{
    ck_assert_int_eq(mx_ndarray_to_host(a, out, sizeof(float) * KV_N), MX_OK);
}

static inline void kv_expect_error(mx_status got, mx_status want, const char *fragment)
{
    ck_assert_int_eq(got, want);
    if (fragment && !strstr(mx_last_error(), fragment))
        ck_abort_msg("error '%s' lacks '%s'", mx_last_error(), fragment);
}

/* Device dev's gradient value i in round `round`. */
static inline float kv_grad(int dev, int i, int round)
{
    return (float)(0.5 * sin(1.1 * dev + 0.3 * i + 0.7 * round) + 0.1 * dev);
}

#endif
