/* poolhold.c - a kernel pool held busy from another thread (poolhold.h). */
#include "support/poolhold.h"

#include <check.h>
#include <sched.h>

static void hold_piece(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)lo, (void)hi, (void)worker;
    pool_holder *h = arg;
    atomic_store(&h->inside, 1);
    while (!atomic_load(&h->release)) sched_yield();
}

static void *holder_main(void *arg)
{
    pool_holder *h = arg;
    mx_parallel_for(h->pool, 2, 1, hold_piece, h); /* two pieces: the region takes the pool */
    return NULL;
}

void pool_hold(pool_holder *h, mx_threadpool *pool)
{
    h->pool = pool;
    atomic_init(&h->inside, 0);
    atomic_init(&h->release, 0);
    ck_assert_int_eq(pthread_create(&h->thread, NULL, holder_main, h), 0);
    while (!atomic_load(&h->inside)) sched_yield();
}

void pool_release(pool_holder *h)
{
    atomic_store(&h->release, 1);
    pthread_join(h->thread, NULL);
}
