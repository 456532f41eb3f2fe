/*
 * poolhold.h - holding a kernel pool busy from another thread, so that
 * regions on it meanwhile run every piece on their caller (as when another
 * engine worker's layer has the pool): for the tests that want the same
 * bits either way.
 */
#ifndef MX_TEST_POOLHOLD_H
#define MX_TEST_POOLHOLD_H

#include "parallel/parallel.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct pool_holder {
    mx_threadpool *pool;
    atomic_int inside, release;
    pthread_t thread;
} pool_holder;

/* Returns once a region on another thread holds `pool`. */
void pool_hold(pool_holder *h, mx_threadpool *pool);
/* Lets it go and joins that thread. */
void pool_release(pool_holder *h);

#endif
