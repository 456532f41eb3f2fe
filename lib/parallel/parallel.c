/*
 * parallel.c - the kernel thread pool and per-thread scratch (parallel.h).
 */
#include "parallel/parallel.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* How long a helper keeps polling for the next region before it sleeps:
 * long enough to bridge the gap between the layers of one batch, short
 * enough not to steal a core from the engine's other threads for long. */
#define SPIN_SECONDS 50e-6

struct mx_threadpool {
    int size;
    int n_helpers;        /* started */
    pthread_t *threads;
    atomic_bool taken;    /* a region owns the pool */

    pthread_mutex_t mu;   /* guards everything below but `generation` reads and `next` */
    pthread_cond_t wake;  /* helpers: a region was posted, or stop */
    pthread_cond_t left;  /* caller: the last helper left the region */
    _Atomic uint64_t generation; /* bumped per region, read while spinning */
    bool open;            /* helpers may still join the current region */
    bool stopping;
    bool caller_asleep;   /* the caller waits on `left` */
    atomic_int active;    /* helpers inside the current region (joined under mu) */
    mx_range_fn fn;
    void *arg;
    int64_t n, grain;
    _Atomic int64_t next; /* first item not yet handed out */

    pthread_mutex_t lease_mu; /* guards the leases */
    mx_scratch_lease **leases;
    int n_leases;
};

struct mx_scratch_lease {
    void *buf[MX_SCRATCH_SLOTS];
    size_t bytes[MX_SCRATCH_SLOTS];
    bool busy;
};

typedef struct helper_arg {
    mx_threadpool *pool;
    int worker;
} helper_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Takes pieces until none are left. */
static void run_pieces(mx_threadpool *p, int worker)
{
    for (;;) {
        int64_t lo = atomic_fetch_add_explicit(&p->next, p->grain, memory_order_relaxed);
        if (lo >= p->n) return;
        int64_t hi = lo + p->grain < p->n ? lo + p->grain : p->n;
        p->fn(p->arg, lo, hi, worker);
    }
}

static void *helper_main(void *arg_)
{
    helper_arg ha = *(helper_arg *)arg_;
    free(arg_);
    mx_threadpool *p = ha.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    seen = atomic_load(&p->generation);
    for (;;) {
        /* Wait for a region newer than the last one seen: poll, then sleep. */
        if (atomic_load(&p->generation) == seen && !p->stopping) {
            pthread_mutex_unlock(&p->mu);
            double until = mx_time_seconds() + SPIN_SECONDS;
            for (int i = 0; atomic_load_explicit(&p->generation, memory_order_relaxed) == seen; i++) {
                cpu_relax();
                if ((i & 63) == 63 && mx_time_seconds() > until) break;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->generation) == seen && !p->stopping) pthread_cond_wait(&p->wake, &p->mu);
        }
        if (p->stopping) break;
        seen = atomic_load(&p->generation);
        if (!p->open) continue; /* that region is over already */
        atomic_fetch_add(&p->active, 1);
        pthread_mutex_unlock(&p->mu);
        run_pieces(p, ha.worker);
        bool last = atomic_fetch_sub(&p->active, 1) == 1;
        pthread_mutex_lock(&p->mu);
        if (last && p->caller_asleep) pthread_cond_signal(&p->left);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int mx_threadpool_default_size(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    long n = mx_env_first_count("OMP_NUM_THREADS", cores);
    if (n < 1) n = 1;
    if (n > 256) n = 256;
    return (int)n;
}

mx_status mx_threadpool_create(int size, mx_threadpool **out)
{
    *out = NULL;
    if (size < 1 || size > 1024)
        return MX_ERROR(MX_ERR_INVALID, "thread pool: size must be in [1, 1024], got %d", size);
    mx_threadpool *p = mx_calloc(1, sizeof(*p));
    if (!p) return MX_ERR_NOMEM;
    p->size = size;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->left, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->taken, false);
    atomic_init(&p->active, 0);
    pthread_mutex_init(&p->lease_mu, NULL);
    /* The pool owns the cores: products run one OpenBLAS thread per piece. */
    openblas_set_num_threads(1);
    if (size > 1) {
        p->threads = mx_calloc((size_t)size - 1, sizeof(pthread_t));
        if (!p->threads) {
            mx_threadpool_free(p);
            return MX_ERR_NOMEM;
        }
        for (int i = 1; i < size; i++) {
            helper_arg *ha = mx_malloc(sizeof(*ha));
            if (!ha) {
                mx_threadpool_free(p);
                return MX_ERR_NOMEM;
            }
            *ha = (helper_arg){p, i};
            int e = pthread_create(&p->threads[i - 1], NULL, helper_main, ha);
            if (e != 0) {
                free(ha);
                mx_threadpool_free(p);
                return MX_ERROR(MX_ERR_RUNTIME, "thread pool: cannot start thread %d of %d: %s", i + 1, size,
                                strerror(e));
            }
            p->n_helpers++;
        }
    }
    *out = p;
    return MX_OK;
}

/* Scratch blocks of this size and more are mapped directly, so that the
 * block a buffer gives up when it grows goes back to the system at once.
 * From malloc they came from the heap once glibc had raised its mmap
 * threshold (it does so each time a mapped block is freed, up to 32 MiB),
 * and freed heap blocks stayed resident: 30-36 MiB of a training peak.
 * (Sanitizer builds keep malloc, which they check.) */
#define SCRATCH_MAP_BYTES ((size_t)1 << 20)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SCRATCH_MAPS 0
#else
#define SCRATCH_MAPS 1
#endif

static void *scratch_block_alloc(size_t bytes)
{
    if (SCRATCH_MAPS && bytes >= SCRATCH_MAP_BYTES) {
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return m == MAP_FAILED ? NULL : m;
    }
    void *b = NULL;
    return posix_memalign(&b, 64, bytes) == 0 ? b : NULL;
}

static void scratch_block_free(void *block, size_t bytes)
{
    if (!block) return;
    if (SCRATCH_MAPS && bytes >= SCRATCH_MAP_BYTES) munmap(block, bytes);
    else free(block);
}

void mx_threadpool_free(mx_threadpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_helpers; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->left);
    for (int i = 0; i < p->n_leases; i++) {
        for (int k = 0; k < MX_SCRATCH_SLOTS; k++) scratch_block_free(p->leases[i]->buf[k], p->leases[i]->bytes[k]);
        free(p->leases[i]);
    }
    free(p->leases);
    pthread_mutex_destroy(&p->lease_mu);
    free(p);
}

int mx_threadpool_size(const mx_threadpool *p) { return p ? p->size : 1; }

int64_t mx_parallel_grain(const mx_threadpool *pool, int64_t n, int pieces_per_thread, int64_t min_grain)
{
    int64_t parts = (int64_t)mx_threadpool_size(pool) * (pieces_per_thread < 1 ? 1 : pieces_per_thread);
    int64_t g = (n + parts - 1) / parts;
    if (g < min_grain) g = min_grain;
    return g < 1 ? 1 : g;
}

void mx_parallel_for(mx_threadpool *p, int64_t n, int64_t grain, mx_range_fn fn, void *arg)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    bool expected = false;
    if (!p || p->n_helpers == 0 || n <= grain ||
        !atomic_compare_exchange_strong(&p->taken, &expected, true)) {
        fn(arg, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->grain = grain;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->open = true;
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_pieces(p, 0);

    /* Every piece is handed out; close the region and wait for the helpers
     * still running theirs: polling first (they are usually about done),
     * then asleep. */
    pthread_mutex_lock(&p->mu);
    p->open = false;
    pthread_mutex_unlock(&p->mu);
    if (atomic_load(&p->active) > 0) {
        double until = mx_time_seconds() + SPIN_SECONDS;
        for (int i = 0; atomic_load_explicit(&p->active, memory_order_acquire) > 0; i++) {
            cpu_relax();
            if ((i & 63) == 63 && mx_time_seconds() > until) break;
        }
        pthread_mutex_lock(&p->mu);
        p->caller_asleep = true;
        while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->left, &p->mu);
        p->caller_asleep = false;
        pthread_mutex_unlock(&p->mu);
    }
    atomic_store(&p->taken, false);
}

/* ------------------------------------------------------------- scratch */

typedef struct scratch_set {
    void *buf[MX_SCRATCH_SLOTS];
    size_t bytes[MX_SCRATCH_SLOTS];
} scratch_set;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local scratch_set *thread_scratch;

static void scratch_free(void *p)
{
    scratch_set *s = p;
    for (int i = 0; i < MX_SCRATCH_SLOTS; i++) scratch_block_free(s->buf[i], s->bytes[i]);
    free(s);
}

static void scratch_key_init(void) { (void)pthread_key_create(&scratch_key, scratch_free); }

/* Grows *buf (of *have bytes) to at least `bytes`; NULL when it cannot. */
static void *grow_buffer(void **buf, size_t *have, size_t bytes)
{
    if (*have < bytes || !*buf) {
        size_t want = bytes < 4096 ? 4096 : bytes;
        want = (want + 63) & ~(size_t)63;
        void *b = scratch_block_alloc(want);
        if (!b) {
            MX_ERROR(MX_ERR_NOMEM, "scratch: cannot allocate %zu bytes", want);
            return NULL;
        }
        scratch_block_free(*buf, *have);
        *buf = b;
        *have = want;
    }
    return *buf;
}

void *mx_thread_scratch(int slot, size_t bytes)
{
    if (slot < 0 || slot >= MX_SCRATCH_SLOTS) {
        MX_ERROR(MX_ERR_INVALID, "scratch: slot %d out of range", slot);
        return NULL;
    }
    scratch_set *s = thread_scratch;
    if (!s) {
        pthread_once(&scratch_once, scratch_key_init);
        s = mx_calloc(1, sizeof(*s));
        if (!s) return NULL;
        thread_scratch = s;
        (void)pthread_setspecific(scratch_key, s);
    }
    return grow_buffer(&s->buf[slot], &s->bytes[slot], bytes);
}

static size_t lease_bytes(const mx_scratch_lease *l)
{
    size_t n = 0;
    for (int k = 0; k < MX_SCRATCH_SLOTS; k++) n += l->bytes[k];
    return n;
}

mx_status mx_scratch_take(mx_threadpool *p, mx_scratch_lease **out)
{
    *out = NULL;
    if (!p) return MX_OK;
    pthread_mutex_lock(&p->lease_mu);
    mx_scratch_lease *best = NULL;
    for (int i = 0; i < p->n_leases; i++)
        if (!p->leases[i]->busy && (!best || lease_bytes(p->leases[i]) > lease_bytes(best))) best = p->leases[i];
    mx_status s = MX_OK;
    if (!best) {
        mx_scratch_lease **grown = realloc(p->leases, ((size_t)p->n_leases + 1) * sizeof(*grown));
        if (grown) p->leases = grown;
        best = grown ? mx_calloc(1, sizeof(*best)) : NULL;
        if (best) p->leases[p->n_leases++] = best;
        else s = MX_ERROR(MX_ERR_NOMEM, "scratch: cannot allocate a lease");
    }
    if (best) best->busy = true;
    pthread_mutex_unlock(&p->lease_mu);
    *out = best;
    return s;
}

void *mx_scratch_buffer(mx_threadpool *p, mx_scratch_lease *l, int slot, size_t bytes)
{
    if (!l) return mx_thread_scratch(slot, bytes);
    if (slot < 0 || slot >= MX_SCRATCH_SLOTS) {
        MX_ERROR(MX_ERR_INVALID, "scratch: slot %d out of range", slot);
        return NULL;
    }
    /* Under the lock only for mx_scratch_held_bytes: the lease is ours. */
    pthread_mutex_lock(&p->lease_mu);
    void *b = grow_buffer(&l->buf[slot], &l->bytes[slot], bytes);
    pthread_mutex_unlock(&p->lease_mu);
    return b;
}

void mx_scratch_give(mx_threadpool *p, mx_scratch_lease *l)
{
    if (!p || !l) return;
    pthread_mutex_lock(&p->lease_mu);
    l->busy = false;
    pthread_mutex_unlock(&p->lease_mu);
}

size_t mx_scratch_held_bytes(mx_threadpool *p)
{
    if (!p) return 0;
    pthread_mutex_lock(&p->lease_mu);
    size_t n = 0;
    for (int i = 0; i < p->n_leases; i++) n += lease_bytes(p->leases[i]);
    pthread_mutex_unlock(&p->lease_mu);
    return n;
}
