/* test_engine.c - the dependency engine against sequential execution. */
#include "engine/engine.h"
#include "ndarray/ndarray.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mx_engine *make_engine(bool naive, int workers)
{
    mx_engine_config c = mx_engine_config_default();
    c.naive = naive;
    c.cpu_workers = workers;
    mx_engine *e = NULL;
    ck_assert_int_eq(mx_engine_create(&c, &e), MX_OK);
    return e;
}

/* An engine with `contexts` CPU contexts sharing `workers` compute workers
 * and `kernel_threads` kernel threads in all. */
static mx_engine *make_engine_split(bool naive, int workers, int kernel_threads, int contexts)
{
    mx_engine_config c = mx_engine_config_default();
    c.naive = naive;
    c.cpu_workers = workers;
    c.kernel_threads = kernel_threads;
    c.cpu_contexts = contexts;
    mx_engine *e = NULL;
    ck_assert_msg(mx_engine_create(&c, &e) == MX_OK, "%s", mx_last_error());
    return e;
}

static mx_context cpu_n(int id) { return (mx_context){MX_DEV_CPU, id}; }

/* ------------------------------------------------------------ random ops */

#define N_VARS 24
#define MAX_R 3
#define MAX_W 2

typedef struct rand_world {
    int64_t val[N_VARS];
    atomic_int readers[N_VARS];
    atomic_int writers[N_VARS];
    atomic_int violations;
} rand_world;

typedef struct rand_op {
    rand_world *world;
    int id;
    int reads[MAX_R], n_reads;
    int writes[MAX_W], n_writes;
    bool slow;
} rand_op;

static int64_t mix(int64_t h, int64_t v)
{
    uint64_t x = (uint64_t)h * 0x9E3779B97F4A7C15ull ^ (uint64_t)v;
    x ^= x >> 29;
    return (int64_t)(x * 0xBF58476D1CE4E5B9ull);
}

static bool in_list(const int *list, int n, int v)
{
    for (int i = 0; i < n; i++)
        if (list[i] == v) return true;
    return false;
}

/* The op's effect: every written var becomes a hash of the op id and the
 * old values of everything it touches. */
static void apply(rand_world *w, const rand_op *op)
{
    int64_t h = op->id;
    for (int i = 0; i < op->n_reads; i++) h = mix(h, w->val[op->reads[i]]);
    for (int i = 0; i < op->n_writes; i++) h = mix(h, w->val[op->writes[i]]);
    for (int i = 0; i < op->n_writes; i++) w->val[op->writes[i]] = mix(h, op->writes[i]);
}

static mx_status rand_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    rand_op *op = payload;
    rand_world *w = op->world;
    /* Check exclusivity directly: a writer must be alone, a reader must
     * see no writer. Reads of vars also written count as writes. */
    for (int i = 0; i < op->n_writes; i++) {
        int v = op->writes[i];
        if (atomic_fetch_add(&w->writers[v], 1) != 0 || atomic_load(&w->readers[v]) != 0)
            atomic_fetch_add(&w->violations, 1);
    }
    for (int i = 0; i < op->n_reads; i++) {
        int v = op->reads[i];
        if (in_list(op->writes, op->n_writes, v)) continue;
        atomic_fetch_add(&w->readers[v], 1);
        if (atomic_load(&w->writers[v]) != 0) atomic_fetch_add(&w->violations, 1);
    }
    if (op->slow) usleep(50);
    else sched_yield();
    apply(w, op);
    for (int i = 0; i < op->n_reads; i++)
        if (!in_list(op->writes, op->n_writes, op->reads[i])) atomic_fetch_sub(&w->readers[op->reads[i]], 1);
    for (int i = 0; i < op->n_writes; i++) atomic_fetch_sub(&w->writers[op->writes[i]], 1);
    return MX_OK;
}

static void generate(rand_op *ops, int n, rand_world *w, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < n; i++) {
        rand_op *op = &ops[i];
        memset(op, 0, sizeof(*op));
        op->world = w;
        op->id = i;
        op->n_reads = rand() % (MAX_R + 1);
        for (int r = 0; r < op->n_reads; r++) op->reads[r] = rand() % N_VARS;
        op->n_writes = 1 + rand() % MAX_W;
        for (int k = 0; k < op->n_writes; k++) {
            int v;
            do v = rand() % N_VARS;
            while (in_list(op->writes, k, v));
            op->writes[k] = v;
        }
        op->slow = rand() % 100 == 0;
    }
}

static void run_random(bool naive, int workers, unsigned seed, int n_ops)
{
    rand_world *threaded = calloc(1, sizeof(*threaded));
    rand_world *sequential = calloc(1, sizeof(*sequential));
    rand_op *ops = malloc((size_t)n_ops * sizeof(*ops));
    ck_assert_ptr_nonnull(ops);
    for (int v = 0; v < N_VARS; v++) threaded->val[v] = sequential->val[v] = v;
    generate(ops, n_ops, threaded, seed);
    for (int i = 0; i < n_ops; i++) {
        rand_op seq = ops[i];
        seq.world = sequential;
        apply(sequential, &seq);
    }

    mx_engine *e = make_engine(naive, workers);
    mx_engine_var *vars[N_VARS];
    for (int v = 0; v < N_VARS; v++) ck_assert_ptr_nonnull(vars[v] = mx_engine_new_var(e));
    for (int i = 0; i < n_ops; i++) {
        mx_engine_var *r[MAX_R], *w[MAX_W];
        for (int k = 0; k < ops[i].n_reads; k++) r[k] = vars[ops[i].reads[k]];
        for (int k = 0; k < ops[i].n_writes; k++) w[k] = vars[ops[i].writes[k]];
        mx_engine_op op = {.fn = rand_fn, .payload = &ops[i], .reads = r, .n_reads = ops[i].n_reads,
                           .writes = w, .n_writes = ops[i].n_writes, .ctx = mx_cpu(),
                           .priority = rand() % 5, .lane = (i % 7 == 0) ? MX_LANE_IO : MX_LANE_COMPUTE};
        ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
    }
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    ck_assert_int_eq(mx_engine_pending(e), 0);
    for (int v = 0; v < N_VARS; v++) ck_assert_int_eq(mx_engine_delete_var(e, vars[v]), MX_OK);
    mx_engine_free(e);

    ck_assert_int_eq(atomic_load(&threaded->violations), 0);
    for (int v = 0; v < N_VARS; v++) ck_assert_msg(threaded->val[v] == sequential->val[v],
                                                   "var %d differs (workers %d, seed %u)", v, workers, seed);
    free(ops);
    free(threaded);
    free(sequential);
}

START_TEST(random_ops_match_push_order)
{
    static const int worker_counts[] = {1, 2, 4, 8};
    for (unsigned seed = 1; seed <= 3; seed++)
        for (size_t k = 0; k < sizeof(worker_counts) / sizeof(worker_counts[0]); k++)
            run_random(false, worker_counts[k], seed * 7919 + (unsigned)k, 3000);
}
END_TEST

START_TEST(random_ops_naive_engine)
{
    run_random(true, 1, 42, 3000);
}
END_TEST

/* ------------------------------------------------------------ concurrency */

typedef struct counter_op {
    int64_t *counter;
} counter_op;

static mx_status increment_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    counter_op *c = payload;
    int64_t v = *c->counter; /* deliberately not atomic: writes are exclusive */
    sched_yield();
    *c->counter = v + 1;
    return MX_OK;
}

typedef struct pusher_arg {
    mx_engine *engine;
    mx_engine_var *shared_var, *own_var;
    int64_t *shared_counter, own_counter;
    counter_op shared_op, own_op;
    int n;
    mx_status status;
} pusher_arg;

static void *pusher(void *arg_)
{
    pusher_arg *a = arg_;
    a->shared_op.counter = a->shared_counter;
    a->own_op.counter = &a->own_counter;
    for (int i = 0; i < a->n && a->status == MX_OK; i++) {
        mx_engine_var *w[2] = {a->shared_var, a->own_var};
        bool both = i % 3 == 0;
        mx_engine_op op = {.fn = increment_fn, .payload = both ? &a->shared_op : &a->own_op,
                           .writes = both ? w : w + 1, .n_writes = both ? 2 : 1, .ctx = mx_cpu()};
        a->status = mx_engine_push(a->engine, &op);
    }
    return NULL;
}

START_TEST(many_threads_push_at_once)
{
    enum { THREADS = 6, PER_THREAD = 900 };
    mx_engine *e = make_engine(false, 3);
    int64_t shared = 0;
    mx_engine_var *shared_var = mx_engine_new_var(e);
    pusher_arg args[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (pusher_arg){.engine = e, .shared_var = shared_var, .own_var = mx_engine_new_var(e),
                               .shared_counter = &shared, .n = PER_THREAD};
        ck_assert_int_eq(pthread_create(&th[t], NULL, pusher, &args[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    for (int t = 0; t < THREADS; t++) {
        ck_assert_int_eq(args[t].status, MX_OK);
        ck_assert_int_eq(args[t].own_counter, PER_THREAD - (PER_THREAD + 2) / 3);
    }
    ck_assert_int_eq(shared, THREADS * ((PER_THREAD + 2) / 3));
    mx_engine_free(e);
}
END_TEST

/* ------------------------------------------------------------ errors */

typedef struct flag_op {
    atomic_int *flag;
    int value;
    bool fail;
    useconds_t sleep_us;
} flag_op;

static mx_status flag_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    flag_op *f = payload;
    if (f->sleep_us) usleep(f->sleep_us);
    if (f->fail) return MX_ERROR(MX_ERR_RUNTIME, "boom %d", f->value);
    if (f->flag) atomic_store(f->flag, f->value);
    return MX_OK;
}

static void push_flag(mx_engine *e, flag_op *f, mx_engine_var *read, mx_engine_var *write, const char *name)
{
    mx_engine_op op = {.fn = flag_fn, .payload = f, .reads = &read, .n_reads = read ? 1 : 0,
                       .writes = &write, .n_writes = write ? 1 : 0, .ctx = mx_cpu(), .name = name};
    ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
}

static void check_error_propagation(bool naive)
{
    mx_engine *e = make_engine(naive, 2);
    mx_engine_var *a = mx_engine_new_var(e), *b = mx_engine_new_var(e), *c = mx_engine_new_var(e);
    atomic_int ran_b = 0, ran_c = 0;
    flag_op fail = {.fail = true, .value = 7, .sleep_us = 2000};
    flag_op dep = {.flag = &ran_b, .value = 1};
    flag_op indep = {.flag = &ran_c, .value = 1};
    push_flag(e, &fail, NULL, a, "failing op");
    push_flag(e, &dep, a, b, "dependent");
    push_flag(e, &indep, NULL, c, "independent");

    mx_status s = mx_engine_wait_var(e, b);
    ck_assert_int_eq(s, MX_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "boom 7"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "failing op"));
    ck_assert_int_eq(atomic_load(&ran_b), 0); /* skipped: its input was bad */
    ck_assert_int_eq(mx_engine_wait_var(e, b), MX_OK); /* reported once */
    ck_assert_int_eq(mx_engine_wait_var(e, c), MX_OK);
    ck_assert_int_eq(atomic_load(&ran_c), 1);
    ck_assert_int_eq(mx_engine_wait_var(e, a), MX_ERR_RUNTIME);
    ck_assert_int_eq(mx_engine_wait_var(e, a), MX_OK);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "boom 7"));
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);

    /* The engine keeps working, and a good write makes a var healthy. */
    atomic_int again = 0;
    flag_op ok = {.flag = &again, .value = 5};
    push_flag(e, &ok, a, b, "after");
    ck_assert_int_eq(mx_engine_wait_var(e, b), MX_OK);
    ck_assert_int_eq(atomic_load(&again), 5);
    mx_engine_free(e);
}

START_TEST(errors_surface_at_wait)
{
    check_error_propagation(false);
}
END_TEST

START_TEST(errors_surface_at_wait_naive)
{
    check_error_propagation(true);
}
END_TEST

START_TEST(pure_writes_heal_in_place_updates_propagate)
{
    mx_engine *e = make_engine(false, 2);
    mx_engine_var *a = mx_engine_new_var(e), *b = mx_engine_new_var(e);
    atomic_int ran = 0;
    flag_op fail = {.fail = true, .value = 1};
    push_flag(e, &fail, NULL, a, "fail a");
    push_flag(e, &fail, NULL, b, "fail b");
    /* In-place update of a: listed as read and write, so it is skipped. */
    flag_op inplace = {.flag = &ran, .value = 1};
    mx_engine_op op = {.fn = flag_fn, .payload = &inplace, .reads = &a, .n_reads = 1, .writes = &a,
                       .n_writes = 1, .ctx = mx_cpu()};
    ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
    /* A pure write of b replaces it. */
    flag_op overwrite = {.flag = &ran, .value = 2};
    push_flag(e, &overwrite, NULL, b, "overwrite b");
    ck_assert_int_eq(mx_engine_wait_var(e, a), MX_ERR_RUNTIME);
    ck_assert_int_eq(mx_engine_wait_var(e, b), MX_OK);
    ck_assert_int_eq(atomic_load(&ran), 2);
    mx_engine_free(e);
}
END_TEST

START_TEST(naive_push_keeps_the_callers_error)
{
    mx_engine *e = make_engine(true, 1);
    mx_engine_var *v = mx_engine_new_var(e);
    MX_ERROR(MX_ERR_IO, "the caller's own failure");
    flag_op fail = {.fail = true, .value = 3};
    push_flag(e, &fail, NULL, v, "inline");
    ck_assert_int_eq(mx_last_status(), MX_ERR_IO);
    ck_assert_str_eq(mx_last_error(), "the caller's own failure");
    ck_assert_int_eq(mx_engine_wait_var(e, v), MX_ERR_RUNTIME); /* the op's error is on its var */
    mx_engine_free(e);
}
END_TEST

START_TEST(malformed_push_is_rejected)
{
    mx_engine *e = make_engine(false, 1);
    int freed = 0;
    mx_engine_op op = {.fn = NULL, .ctx = mx_cpu()};
    ck_assert_int_eq(mx_engine_push(e, &op), MX_ERR_INVALID);
    mx_engine_var *nullvar = NULL;
    op = (mx_engine_op){.fn = flag_fn, .payload = &freed, .payload_free = NULL, .reads = &nullvar,
                        .n_reads = 1, .ctx = mx_cpu()};
    ck_assert_int_eq(mx_engine_push(e, &op), MX_ERR_INVALID);
    op = (mx_engine_op){.fn = flag_fn, .ctx = {.dev_type = 9, .dev_id = 0}};
    ck_assert_int_eq(mx_engine_push(e, &op), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "device type 9"));
    mx_engine_config bad = mx_engine_config_default();
    bad.cpu_workers = 0;
    mx_engine *e2 = NULL;
    ck_assert_int_eq(mx_engine_create(&bad, &e2), MX_ERR_INVALID);
    ck_assert_ptr_null(e2);
    mx_engine_free(e);
}
END_TEST

/* ------------------------------------------------------------ waits */

START_TEST(wait_var_waits_for_writes)
{
    mx_engine *e = make_engine(false, 2);
    mx_engine_var *v = mx_engine_new_var(e);
    atomic_int flag = 0;
    flag_op slow = {.flag = &flag, .value = 3, .sleep_us = 30000};
    push_flag(e, &slow, NULL, v, "slow write");
    ck_assert_int_eq(mx_engine_wait_var(e, v), MX_OK);
    ck_assert_int_eq(atomic_load(&flag), 3);
    mx_engine_free(e);
}
END_TEST

START_TEST(wait_var_write_waits_for_reads)
{
    mx_engine *e = make_engine(false, 2);
    mx_engine_var *v = mx_engine_new_var(e);
    atomic_int flag = 0;
    flag_op slow = {.flag = &flag, .value = 4, .sleep_us = 30000};
    push_flag(e, &slow, v, NULL, "slow read");
    ck_assert_int_eq(mx_engine_wait_var_write(e, v), MX_OK);
    ck_assert_int_eq(atomic_load(&flag), 4);
    mx_engine_free(e);
}
END_TEST

START_TEST(delete_var_after_pending_ops)
{
    mx_engine *e = make_engine(false, 2);
    atomic_int flag = 0;
    for (int i = 0; i < 50; i++) {
        mx_engine_var *v = mx_engine_new_var(e);
        flag_op *f = malloc(sizeof(*f));
        *f = (flag_op){.flag = &flag, .value = i, .sleep_us = i % 10 == 0 ? 1000 : 0};
        mx_engine_op op = {.fn = flag_fn, .payload = f, .payload_free = free, .writes = &v, .n_writes = 1,
                           .ctx = mx_cpu()};
        ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
        ck_assert_int_eq(mx_engine_delete_var(e, v), MX_OK); /* while the op may still run */
    }
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    ck_assert_int_eq(mx_engine_pending(e), 0);
    mx_engine_free(e);
}
END_TEST

/* ------------------------------------------------------------ priority */

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open, entered;
} gate;

static mx_status gate_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    gate *g = payload;
    pthread_mutex_lock(&g->mu);
    g->entered = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return MX_OK;
}

typedef struct order_log {
    atomic_int next;
    int order[8];
} order_log;

typedef struct order_op {
    order_log *log;
    int tag;
} order_op;

static mx_status order_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    order_op *o = payload;
    o->log->order[atomic_fetch_add(&o->log->next, 1)] = o->tag;
    return MX_OK;
}

START_TEST(priority_orders_ready_ops)
{
    mx_engine *e = make_engine(false, 1);
    gate g = {.open = false};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    mx_engine_var *gv = mx_engine_new_var(e);
    mx_engine_op block = {.fn = gate_fn, .payload = &g, .writes = &gv, .n_writes = 1, .ctx = mx_cpu()};
    ck_assert_int_eq(mx_engine_push(e, &block), MX_OK);
    pthread_mutex_lock(&g.mu);
    while (!g.entered) pthread_cond_wait(&g.cv, &g.mu); /* the only worker is busy */
    pthread_mutex_unlock(&g.mu);

    order_log log = {0};
    order_op ops[4] = {{&log, 0}, {&log, 1}, {&log, 2}, {&log, 3}};
    int prio[4] = {0, 5, -3, 9};
    for (int i = 0; i < 4; i++) {
        mx_engine_var *v = mx_engine_new_var(e);
        mx_engine_op op = {.fn = order_fn, .payload = &ops[i], .writes = &v, .n_writes = 1, .ctx = mx_cpu(),
                           .priority = prio[i]};
        ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
    }
    ck_assert_int_ge(mx_engine_pending(e), 5); /* pushes returned at once */
    pthread_mutex_lock(&g.mu);
    g.open = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    int expected[4] = {3, 1, 0, 2};
    for (int i = 0; i < 4; i++) ck_assert_int_eq(log.order[i], expected[i]);
    mx_engine_free(e);
}
END_TEST

/* ------------------------------------------------------------ idle waits */

static void gate_wait_entered(gate *g)
{
    pthread_mutex_lock(&g->mu);
    while (!g->entered) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_open(gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

typedef struct opener {
    gate *g;
    atomic_int *opened;
} opener;

static void *open_later(void *arg)
{
    opener *o = arg;
    usleep(30000);
    atomic_store(o->opened, 1);
    gate_open(o->g);
    return NULL;
}

/* Waits on a variable with nothing pending or running return at once,
 * without a worker (the only one is blocked here), still reporting and
 * clearing a recorded error; a running read does not hold up wait_var but
 * does hold up wait_var_write. */
START_TEST(wait_on_idle_var_needs_no_worker)
{
    mx_engine *e = make_engine(false, 1);
    mx_engine_var *blocker = mx_engine_new_var(e), *idle = mx_engine_new_var(e), *bad = mx_engine_new_var(e),
                  *read = mx_engine_new_var(e);
    flag_op fail = {.fail = true, .value = 9};
    push_flag(e, &fail, NULL, bad, "failing op");
    ck_assert_int_eq(mx_engine_wait_all(e), MX_ERR_RUNTIME);

    gate g = {.open = false};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    mx_engine_var *gate_vars[2] = {blocker, read};
    mx_engine_op op = {.fn = gate_fn, .payload = &g, .reads = &gate_vars[1], .n_reads = 1, .writes = &gate_vars[0],
                       .n_writes = 1, .ctx = mx_cpu(), .name = "gate"};
    ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
    gate_wait_entered(&g); /* the one CPU worker is now busy */

    ck_assert_int_eq(mx_engine_wait_var(e, idle), MX_OK);
    ck_assert_int_eq(mx_engine_wait_var_write(e, idle), MX_OK);
    mx_error_clear();
    ck_assert_int_eq(mx_engine_wait_var_write(e, bad), MX_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "boom 9"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "failing op"));
    ck_assert_int_eq(mx_engine_wait_var(e, bad), MX_OK); /* reported once */
    ck_assert_int_eq(mx_engine_wait_var(e, read), MX_OK); /* only read by the running op */

    /* a write-wait on `read` must wait for the gate op */
    atomic_int opened = 0;
    opener o = {&g, &opened};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, open_later, &o), 0);
    ck_assert_int_eq(mx_engine_wait_var_write(e, read), MX_OK);
    ck_assert_int_eq(atomic_load(&opened), 1);
    ck_assert_int_eq(mx_engine_wait_var(e, blocker), MX_OK);
    pthread_join(th, NULL);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    mx_engine_free(e);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
}
END_TEST

START_TEST(config_reads_environment)
{
    setenv("MXNET_ENGINE_TYPE", "NaiveEngine", 1);
    setenv("MXNET_CPU_WORKER_NTHREADS", "3", 1);
    mx_engine_config c = mx_engine_config_default();
    ck_assert(c.naive);
    ck_assert_int_eq(c.cpu_workers, 3);
    setenv("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice", 1);
    setenv("MXNET_CPU_WORKER_NTHREADS", "zero", 1);
    c = mx_engine_config_default();
    ck_assert(!c.naive);
    ck_assert_int_ge(c.cpu_workers, 1);
    /* ... but a runtime is not made with it: the value is named. */
    mx_runtime *rt = NULL;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_ERR_INVALID);
    ck_assert_ptr_null(rt);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "MXNET_CPU_WORKER_NTHREADS='zero'"));
    unsetenv("MXNET_ENGINE_TYPE");
    unsetenv("MXNET_CPU_WORKER_NTHREADS");
}
END_TEST

/* ------------------------------------------------------------ CPU contexts */

typedef struct seen_op {
    mx_threadpool *pool;
    int pool_size;
    mx_context ctx;
} seen_op;

static mx_status seen_fn(void *payload, const mx_exec_ctx *exec)
{
    seen_op *s = payload;
    s->pool = exec->pool;
    s->pool_size = mx_threadpool_size(exec->pool);
    s->ctx = exec->ctx;
    return MX_OK;
}

static void push_seen(mx_engine *e, seen_op *s, mx_context ctx, mx_engine_lane lane)
{
    mx_engine_var *v = mx_engine_new_var(e);
    mx_engine_op op = {.fn = seen_fn, .payload = s, .writes = &v, .n_writes = 1, .ctx = ctx, .lane = lane};
    ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
}

START_TEST(cpu_contexts_get_their_own_kernel_pools)
{
    for (int naive = 0; naive < 2; naive++) {
        mx_engine *e = make_engine_split(naive, 4, 4, 2);
        ck_assert_int_eq(mx_engine_cpu_contexts(e), 2);
        seen_op s0 = {0}, s1 = {0}, pinned = {0}, io1 = {0}, copy1 = {0};
        push_seen(e, &s0, mx_cpu(), MX_LANE_COMPUTE);
        push_seen(e, &s1, cpu_n(1), MX_LANE_COMPUTE);
        push_seen(e, &pinned, (mx_context){MX_DEV_CPU_PINNED, 1}, MX_LANE_COMPUTE);
        push_seen(e, &io1, cpu_n(1), MX_LANE_IO);
        push_seen(e, &copy1, cpu_n(1), MX_LANE_COPY);
        ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
        ck_assert_ptr_nonnull(s0.pool);
        ck_assert_ptr_nonnull(s1.pool);
        ck_assert_ptr_ne(s0.pool, s1.pool);
        ck_assert_int_eq(s0.pool_size, 2); /* 4 kernel threads, 2 contexts */
        ck_assert_int_eq(s1.pool_size, 2);
        ck_assert_ptr_eq(s0.pool, mx_engine_kernel_pool(e));
        ck_assert_ptr_eq(s0.pool, mx_engine_context_kernel_pool(e, mx_cpu()));
        ck_assert_ptr_eq(s1.pool, mx_engine_context_kernel_pool(e, cpu_n(1)));
        ck_assert_ptr_null(mx_engine_context_kernel_pool(e, cpu_n(2)));
        ck_assert_ptr_eq(pinned.pool, s0.pool); /* pinned memory is cpu(0)'s */
        ck_assert_ptr_eq(io1.pool, s1.pool);    /* the shared I/O lane still hands out cpu(1)'s pool */
        ck_assert_ptr_eq(copy1.pool, s1.pool);
        ck_assert(mx_context_equal(s1.ctx, cpu_n(1)));
        ck_assert(mx_context_equal(io1.ctx, cpu_n(1)));
        ck_assert(mx_context_equal(copy1.ctx, cpu_n(1)));
        ck_assert(mx_context_equal(s0.ctx, mx_cpu()));
        mx_engine_free(e);
    }

    /* Shares are rounded down, never below one thread. */
    static const int cases[][3] = {{5, 2, 2}, {3, 2, 1}, {1, 3, 1}, {8, 3, 2}, {6, 1, 6}, {6, 0, 6}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        mx_engine *e = make_engine_split(false, 2, cases[k][0], cases[k][1]);
        int n = cases[k][1] > 1 ? cases[k][1] : 1;
        ck_assert_int_eq(mx_engine_cpu_contexts(e), n);
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(mx_threadpool_size(mx_engine_context_kernel_pool(e, cpu_n(i))), cases[k][2]);
        mx_engine_free(e);
    }
}
END_TEST

static void gate_init(gate *g)
{
    *g = (gate){.open = false};
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
}

static void gate_destroy(gate *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

static void push_gate(mx_engine *e, gate *g, mx_context ctx)
{
    mx_engine_var *v = mx_engine_new_var(e);
    mx_engine_op op = {.fn = gate_fn, .payload = g, .writes = &v, .n_writes = 1, .ctx = ctx, .name = "gate"};
    ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
}

/* 4 workers in all over 2 contexts: cpu(0) runs exactly two ops at once,
 * and cpu(1) keeps running while both of cpu(0)'s workers are blocked. */
START_TEST(cpu_context_workers_are_a_share_of_the_total)
{
    mx_engine *e = make_engine_split(false, 4, 2, 2);
    gate g[2];
    for (int i = 0; i < 2; i++) {
        gate_init(&g[i]);
        push_gate(e, &g[i], mx_cpu());
    }
    for (int i = 0; i < 2; i++) gate_wait_entered(&g[i]); /* two workers on cpu(0) */

    atomic_int third = 0, other = 0;
    flag_op f3 = {.flag = &third, .value = 1}, f1 = {.flag = &other, .value = 1};
    mx_engine_var *v3 = mx_engine_new_var(e), *v1 = mx_engine_new_var(e);
    mx_engine_op op3 = {.fn = flag_fn, .payload = &f3, .writes = &v3, .n_writes = 1, .ctx = mx_cpu()};
    mx_engine_op op1 = {.fn = flag_fn, .payload = &f1, .writes = &v1, .n_writes = 1, .ctx = cpu_n(1)};
    ck_assert_int_eq(mx_engine_push(e, &op3), MX_OK);
    ck_assert_int_eq(mx_engine_push(e, &op1), MX_OK);
    ck_assert_int_eq(mx_engine_wait_var(e, v1), MX_OK); /* cpu(1) is not stuck behind cpu(0) */
    ck_assert_int_eq(atomic_load(&other), 1);
    usleep(20000);
    ck_assert_int_eq(atomic_load(&third), 0); /* no third worker on cpu(0) */
    for (int i = 0; i < 2; i++) gate_open(&g[i]);
    ck_assert_int_eq(mx_engine_wait_var(e, v3), MX_OK);
    ck_assert_int_eq(atomic_load(&third), 1);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    mx_engine_free(e);
    for (int i = 0; i < 2; i++) gate_destroy(&g[i]);
}
END_TEST

typedef struct span_op {
    atomic_int started;
    atomic_int *peer;  /* the other op's `started` */
    double start, end;
    bool saw_peer;
} span_op;

/* Runs until the peer op has started too (or 10 s went by), then a little
 * longer: two such ops overlap exactly when they can run side by side,
 * however loaded the machine is. */
static mx_status span_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    span_op *s = payload;
    s->start = mx_time_seconds();
    atomic_store(&s->started, 1);
    double deadline = s->start + 10.0;
    while (!atomic_load(s->peer) && mx_time_seconds() < deadline) usleep(200);
    s->saw_peer = atomic_load(s->peer) != 0;
    usleep(10000);
    s->end = mx_time_seconds();
    return MX_OK;
}

START_TEST(ops_on_two_cpu_contexts_overlap)
{
    /* 2 workers in all: one per context. Two ops queued on cpu(0) first
     * would take both workers of one shared pool and shut cpu(1)'s op out
     * until they time out; with a pool per context it starts at once. */
    mx_engine *e = make_engine_split(false, 2, 2, 2);
    span_op a = {0}, a2 = {0}, b = {0};
    a.peer = &b.started;
    a2.peer = &b.started;
    b.peer = &a.started;
    span_op *ops[3] = {&a, &a2, &b};
    mx_context ctxs[3] = {mx_cpu(), mx_cpu(), cpu_n(1)};
    for (int i = 0; i < 3; i++) {
        mx_engine_var *v = mx_engine_new_var(e);
        mx_engine_op op = {.fn = span_fn, .payload = ops[i], .writes = &v, .n_writes = 1, .ctx = ctxs[i]};
        ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
    }
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    mx_engine_free(e);
    ck_assert(a.saw_peer);
    ck_assert(b.saw_peer);
    ck_assert_msg(a.start < b.end && b.start < a.end, "cpu(0) op [%f, %f] and cpu(1) op [%f, %f] did not overlap",
                  a.start, a.end, b.start, b.end);
}
END_TEST

static atomic_int payloads_freed;

static void count_free(void *payload)
{
    (void)payload;
    atomic_fetch_add(&payloads_freed, 1);
}

static mx_status async_never_fn(void *payload, const mx_exec_ctx *exec, mx_engine_async *done)
{
    (void)payload;
    (void)exec;
    (void)done;
    return MX_ERROR(MX_ERR_RUNTIME, "must not run");
}

START_TEST(push_for_a_missing_cpu_context_fails)
{
    for (int naive = 0; naive < 2; naive++) {
        mx_engine *e = make_engine_split(naive, 2, 2, 2);
        mx_engine_var *v = mx_engine_new_var(e);
        atomic_store(&payloads_freed, 0);
        mx_engine_op op = {.fn = flag_fn, .payload = &op, .payload_free = count_free, .writes = &v, .n_writes = 1,
                           .ctx = cpu_n(2), .name = "replica step"};
        ck_assert_int_eq(mx_engine_push(e, &op), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "cpu(2)"));
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "replica step"));
        op.ctx = cpu_n(-1);
        ck_assert_int_eq(mx_engine_push(e, &op), MX_ERR_INVALID);
        op.fn = NULL;
        op.async_fn = async_never_fn;
        op.ctx = cpu_n(7);
        ck_assert_int_eq(mx_engine_push_async(e, &op), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "cpu(7)"));
        ck_assert_int_eq(atomic_load(&payloads_freed), 3);
        ck_assert_int_eq(mx_engine_wait_all(e), MX_OK); /* nothing was queued */
        ck_assert_int_eq(mx_engine_wait_var(e, v), MX_OK);
        mx_engine_free(e);
    }

    /* One CPU context (the default): every cpu(i) shares cpu(0)'s pools,
     * as before. */
    mx_engine *e = make_engine(false, 2);
    ck_assert_int_eq(mx_engine_cpu_contexts(e), 1);
    seen_op s0 = {0}, s5 = {0};
    push_seen(e, &s0, mx_cpu(), MX_LANE_COMPUTE);
    push_seen(e, &s5, cpu_n(5), MX_LANE_COMPUTE);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    ck_assert_ptr_eq(s0.pool, s5.pool);
    ck_assert_ptr_eq(s0.pool, mx_engine_kernel_pool(e));
    ck_assert_ptr_eq(mx_engine_context_kernel_pool(e, cpu_n(5)), s0.pool);
    ck_assert(mx_context_equal(s5.ctx, cpu_n(5)));
    mx_engine_free(e);

    mx_engine_config bad = mx_engine_config_default();
    bad.cpu_contexts = -1;
    mx_engine *e2 = NULL;
    ck_assert_int_eq(mx_engine_create(&bad, &e2), MX_ERR_INVALID);
    ck_assert_ptr_null(e2);
}
END_TEST

/* Arrays live on every CPU context of a runtime, each with its own storage
 * pool; one on a context the runtime lacks is refused at creation. */
START_TEST(runtime_with_cpu_contexts)
{
    mx_engine_config c = mx_engine_config_default();
    c.cpu_workers = 2;
    c.cpu_contexts = 2;
    mx_runtime *rt = NULL;
    ck_assert_int_eq(mx_runtime_create(&c, &rt), MX_OK);
    mx_ndarray *a = NULL, *b = NULL, *bad = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(4, 8), MX_FLOAT32, mx_cpu(), &a), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(4, 8), MX_FLOAT32, cpu_n(1), &b), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(4, 8), MX_FLOAT32, cpu_n(2), &bad), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "cpu(2)"));
    ck_assert_ptr_null(bad);
    ck_assert_int_eq(mx_nd_fill(a, 1.5), MX_OK);
    ck_assert_int_eq(mx_nd_copy(b, a), MX_OK);
    ck_assert_int_eq(mx_nd_add(b, b, b), MX_OK); /* pushed for cpu(1) */
    float host[32];
    ck_assert_int_eq(mx_ndarray_to_host(b, host, sizeof(host)), MX_OK);
    for (int i = 0; i < 32; i++) ck_assert_float_eq(host[i], 3.0f);
    mx_storage_stats s0, s1;
    ck_assert_int_eq(mx_runtime_storage_stats(rt, mx_cpu(), &s0), MX_OK);
    ck_assert_int_eq(mx_runtime_storage_stats(rt, cpu_n(1), &s1), MX_OK);
    ck_assert_uint_eq(s0.allocations, 1);
    ck_assert_uint_eq(s1.allocations, 1);
    mx_ndarray_free(a);
    mx_ndarray_free(b);
    mx_runtime_free(rt);
}
END_TEST

/* ------------------------------------------------------------ async ops */

/* A job an async body hands to a thread of its own, which completes it
 * after `delay_us`, once `wait_for` (if any) is set or 10 s went by. */
typedef struct async_job {
    pthread_t thread;
    bool started;
    mx_engine_async *done;
    useconds_t delay_us;
    mx_status status;           /* what to complete with */
    const char *message;
    atomic_int *wait_for;
    bool wait_for_was_set;      /* when completing */
    atomic_int completed;       /* set just before complete is called */
    double t_complete;
    atomic_int freed;           /* payload_free ran */
    bool inline_complete;       /* complete inside the body instead */
    bool body_fails;            /* the body returns this error instead of starting */
    atomic_int body_returned;
    int freed_after_return;     /* body_returned when payload_free ran */
} async_job;

static void *async_job_thread(void *arg)
{
    async_job *j = arg;
    usleep(j->delay_us);
    if (j->wait_for) {
        double deadline = mx_time_seconds() + 10.0;
        while (!atomic_load(j->wait_for) && mx_time_seconds() < deadline) usleep(200);
        j->wait_for_was_set = atomic_load(j->wait_for) != 0;
    }
    mx_engine_async *done = j->done;
    mx_status s = j->status;
    if (s != MX_OK) MX_ERROR(s, "%s", j->message);
    j->t_complete = mx_time_seconds();
    atomic_store(&j->completed, 1);
    mx_engine_async_complete(done, s); /* j may be gone after this */
    return NULL;
}

static mx_status async_job_fn(void *payload, const mx_exec_ctx *exec, mx_engine_async *done)
{
    (void)exec;
    async_job *j = payload;
    if (j->body_fails) return MX_ERROR(j->status, "%s", j->message);
    j->done = done;
    if (j->inline_complete) {
        if (j->status != MX_OK) MX_ERROR(j->status, "%s", j->message);
        atomic_store(&j->completed, 1);
        mx_engine_async_complete(done, j->status);
        /* The payload is still ours until we return. */
        atomic_store(&j->body_returned, 1);
        return MX_OK;
    }
    if (pthread_create(&j->thread, NULL, async_job_thread, j) != 0)
        return MX_ERROR(MX_ERR_RUNTIME, "cannot start the completion thread");
    j->started = true;
    atomic_store(&j->body_returned, 1);
    return MX_OK;
}

static void async_job_free(void *payload)
{
    async_job *j = payload;
    j->freed_after_return = atomic_load(&j->body_returned);
    atomic_fetch_add(&j->freed, 1);
}

static void push_async_job(mx_engine *e, async_job *j, mx_engine_var *read, mx_engine_var *write, const char *name)
{
    mx_engine_op op = {.async_fn = async_job_fn, .payload = j, .payload_free = async_job_free, .reads = &read,
                       .n_reads = read ? 1 : 0, .writes = &write, .n_writes = write ? 1 : 0, .ctx = mx_cpu(),
                       .lane = MX_LANE_IO, .name = name};
    ck_assert_int_eq(mx_engine_push_async(e, &op), MX_OK);
}

static void async_job_join(async_job *j)
{
    if (j->started) pthread_join(j->thread, NULL);
    j->started = false;
}

typedef struct probe_op {
    atomic_int *watch;   /* sampled when the op starts */
    int watch_at_start;
    double start;
    atomic_int ran;
} probe_op;

static mx_status probe_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    probe_op *p = payload;
    p->start = mx_time_seconds();
    p->watch_at_start = p->watch ? atomic_load(p->watch) : 0;
    atomic_store(&p->ran, 1);
    return MX_OK;
}

static void push_probe(mx_engine *e, probe_op *p, mx_engine_var *read, mx_engine_var *write, mx_engine_lane lane)
{
    mx_engine_op op = {.fn = probe_fn, .payload = p, .reads = &read, .n_reads = read ? 1 : 0, .writes = &write,
                       .n_writes = write ? 1 : 0, .ctx = mx_cpu(), .lane = lane, .name = "probe"};
    ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
}

/* The body returns at once, the one worker runs other ops meanwhile, and
 * readers of what the op writes wait for the completion. */
START_TEST(async_op_holds_its_variables_until_complete)
{
    mx_engine_config c = mx_engine_config_default();
    c.cpu_workers = 1;
    c.cpu_io_workers = 1;
    mx_engine *e = NULL;
    ck_assert_int_eq(mx_engine_create(&c, &e), MX_OK);
    for (int lane = 0; lane < 2; lane++) {
        /* The async op on the I/O lane, then on the compute lane: either
         * way the single worker of that lane must be released. */
        mx_engine_lane l = lane ? MX_LANE_COMPUTE : MX_LANE_IO;
        mx_engine_var *a = mx_engine_new_var(e), *b = mx_engine_new_var(e), *x = mx_engine_new_var(e);
        probe_op indep = {0};
        async_job job = {.delay_us = 20000, .status = MX_OK, .wait_for = &indep.ran};
        probe_op dep = {.watch = &job.completed};
        mx_engine_op op = {.async_fn = async_job_fn, .payload = &job, .payload_free = async_job_free, .writes = &a,
                           .n_writes = 1, .ctx = mx_cpu(), .lane = l, .name = "allreduce"};
        ck_assert_int_eq(mx_engine_push_async(e, &op), MX_OK);
        push_probe(e, &dep, a, b, l);     /* reads a */
        push_probe(e, &indep, NULL, x, l); /* touches nothing of the async op */
        ck_assert_int_eq(mx_engine_wait_var(e, a), MX_OK);
        ck_assert_int_eq(atomic_load(&job.completed), 1);
        ck_assert_int_eq(mx_engine_wait_var(e, b), MX_OK);
        ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
        async_job_join(&job);
        ck_assert(job.wait_for_was_set); /* the independent op ran while the async op was in flight */
        ck_assert_int_eq(dep.watch_at_start, 1);
        ck_assert(dep.start >= job.t_complete);
        ck_assert_int_eq(atomic_load(&job.freed), 1);
        ck_assert_int_eq(job.freed_after_return, 1);
        ck_assert_int_eq(mx_engine_pending(e), 0);
    }
    mx_engine_free(e);
}
END_TEST

static void check_async_errors(bool naive)
{
    mx_engine *e = make_engine(naive, 1);
    mx_engine_var *a = mx_engine_new_var(e), *b = mx_engine_new_var(e), *d = mx_engine_new_var(e),
                  *f = mx_engine_new_var(e), *g = mx_engine_new_var(e);

    /* A failure reported by the completion. */
    async_job job = {.delay_us = 5000, .status = MX_ERR_IO, .message = "link down"};
    probe_op dep = {0};
    push_async_job(e, &job, NULL, a, "allreduce");
    if (naive) ck_assert_int_eq(atomic_load(&job.completed), 1); /* push returned after completion */
    push_probe(e, &dep, a, b, MX_LANE_COMPUTE);
    ck_assert_int_eq(mx_engine_wait_var(e, b), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "link down"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "allreduce"));
    ck_assert_int_eq(atomic_load(&dep.ran), 0); /* its input was bad */
    ck_assert_int_eq(mx_engine_wait_var(e, a), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "link down"));
    ck_assert_int_eq(mx_engine_wait_var(e, a), MX_OK); /* reported once */
    ck_assert_int_eq(mx_engine_wait_all(e), MX_ERR_IO);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    async_job_join(&job);
    ck_assert_int_eq(atomic_load(&job.freed), 1);

    /* A body that fails starts nothing and completes the op itself. */
    async_job fails = {.body_fails = true, .status = MX_ERR_INVALID, .message = "cannot start"};
    push_async_job(e, &fails, NULL, d, "broadcast");
    ck_assert_int_eq(mx_engine_wait_var(e, d), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "cannot start"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "broadcast"));
    ck_assert_int_eq(atomic_load(&fails.freed), 1);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_ERR_INVALID);

    /* A completion inside the body, successful and failed. */
    async_job quick = {.inline_complete = true, .status = MX_OK};
    async_job quick_bad = {.inline_complete = true, .status = MX_ERR_RUNTIME, .message = "checksum"};
    push_async_job(e, &quick, NULL, f, "quick");
    push_async_job(e, &quick_bad, f, g, "quick bad");
    ck_assert_int_eq(mx_engine_wait_var(e, f), MX_OK);
    ck_assert_int_eq(mx_engine_wait_var(e, g), MX_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "checksum"));
    ck_assert_int_eq(mx_engine_wait_all(e), MX_ERR_RUNTIME);
    ck_assert_int_eq(atomic_load(&quick.freed), 1);
    ck_assert_int_eq(quick.freed_after_return, 1); /* payload_free waited for the body */
    ck_assert_int_eq(quick_bad.freed_after_return, 1);

    /* An op that skips (bad input) never runs its body. */
    async_job skipped = {.body_fails = true, .status = MX_ERR_RUNTIME, .message = "ran anyway"};
    async_job bad_again = {.inline_complete = true, .status = MX_ERR_IO, .message = "bad again"};
    push_async_job(e, &bad_again, NULL, a, "bad again");
    push_async_job(e, &skipped, a, b, "skipped");
    ck_assert_int_eq(mx_engine_wait_var(e, b), MX_ERR_IO);
    ck_assert_ptr_null(strstr(mx_last_error(), "ran anyway"));
    ck_assert_int_eq(atomic_load(&skipped.freed), 1);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_ERR_IO);

    /* The engine keeps working afterwards. */
    async_job ok = {.delay_us = 1000, .status = MX_OK};
    push_async_job(e, &ok, NULL, a, "ok");
    ck_assert_int_eq(mx_engine_wait_var(e, a), MX_OK);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    async_job_join(&ok);
    mx_engine_free(e);
}

START_TEST(async_errors_surface_at_wait)
{
    check_async_errors(false);
}
END_TEST

START_TEST(async_errors_surface_at_wait_naive)
{
    check_async_errors(true);
}
END_TEST

/* NaiveEngine: push_async returns only once the op has completed, and the
 * caller's own error survives. */
START_TEST(naive_push_async_blocks_until_complete)
{
    mx_engine *e = make_engine(true, 1);
    mx_engine_var *a = mx_engine_new_var(e), *b = mx_engine_new_var(e);
    MX_ERROR(MX_ERR_IO, "the caller's own failure");
    async_job job = {.delay_us = 20000, .status = MX_OK};
    double before = mx_time_seconds();
    push_async_job(e, &job, NULL, a, "slow");
    ck_assert_int_eq(atomic_load(&job.completed), 1);
    ck_assert_int_eq(atomic_load(&job.freed), 1);
    ck_assert(mx_time_seconds() - before >= 0.015);
    ck_assert_int_eq(mx_last_status(), MX_ERR_IO);
    ck_assert_str_eq(mx_last_error(), "the caller's own failure");
    probe_op dep = {.watch = &job.completed};
    push_probe(e, &dep, a, b, MX_LANE_COMPUTE);
    ck_assert_int_eq(atomic_load(&dep.ran), 1);
    ck_assert_int_eq(dep.watch_at_start, 1);
    ck_assert_int_eq(mx_engine_pending(e), 0);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    async_job_join(&job);
    mx_engine_free(e);
}
END_TEST

START_TEST(malformed_async_push_is_rejected)
{
    mx_engine *e = make_engine(false, 1);
    atomic_store(&payloads_freed, 0);
    mx_engine_op op = {.fn = flag_fn, .payload = &op, .payload_free = count_free, .ctx = mx_cpu()};
    ck_assert_int_eq(mx_engine_push_async(e, &op), MX_ERR_INVALID); /* no async body */
    op.async_fn = async_never_fn;
    ck_assert_int_eq(mx_engine_push_async(e, &op), MX_ERR_INVALID); /* both bodies */
    ck_assert_int_eq(mx_engine_push(e, &op), MX_ERR_INVALID);
    op.fn = NULL;
    op.name = "allreduce";
    ck_assert_int_eq(mx_engine_push(e, &op), MX_ERR_INVALID); /* an async op through the sync push */
    ck_assert_str_eq(mx_last_error(), "engine: push of allreduce needs fn and no async_fn");
    ck_assert_int_eq(atomic_load(&payloads_freed), 4);
    ck_assert_int_eq(mx_engine_pending(e), 0);
    mx_engine_free(e);
}
END_TEST

/* Many async ops, mixed with synchronous ones, on random variables; two
 * "communication" threads complete them in random order among those
 * in flight. The result must equal sequential execution and no two
 * conflicting ops may overlap (rand_fn checks while it runs). */

typedef struct completer_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rand_op **ops;
    mx_engine_async **dones;
    int n, cap;
    bool stopping;
} completer_queue;

typedef struct async_rand_op {
    rand_op base;
    completer_queue *queue;
} async_rand_op;

static mx_status async_rand_fn(void *payload, const mx_exec_ctx *exec, mx_engine_async *done)
{
    (void)exec;
    async_rand_op *op = payload;
    completer_queue *q = op->queue;
    pthread_mutex_lock(&q->mu);
    q->ops[q->n] = &op->base;
    q->dones[q->n] = done;
    q->n++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return MX_OK;
}

typedef struct completer_arg {
    completer_queue *queue;
    unsigned seed;
    int completed;
} completer_arg;

static void *completer_main(void *arg_)
{
    completer_arg *arg = arg_;
    completer_queue *q = arg->queue;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->n == 0 && !q->stopping) pthread_cond_wait(&q->cv, &q->mu);
        if (q->n == 0) break;
        int pick = (int)(rand_r(&arg->seed) % (unsigned)q->n); /* any op in flight, not the oldest */
        rand_op *op = q->ops[pick];
        mx_engine_async *done = q->dones[pick];
        q->n--;
        q->ops[pick] = q->ops[q->n];
        q->dones[pick] = q->dones[q->n];
        pthread_mutex_unlock(&q->mu);
        if (rand_r(&arg->seed) % 8 == 0) usleep(rand_r(&arg->seed) % 200);
        rand_fn(op, NULL);
        arg->completed++;
        mx_engine_async_complete(done, MX_OK);
        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void run_random_async(int workers, unsigned seed, int n_ops)
{
    rand_world *threaded = calloc(1, sizeof(*threaded));
    rand_world *sequential = calloc(1, sizeof(*sequential));
    rand_op *ops = malloc((size_t)n_ops * sizeof(*ops));
    async_rand_op *aops = malloc((size_t)n_ops * sizeof(*aops));
    ck_assert_ptr_nonnull(ops);
    ck_assert_ptr_nonnull(aops);
    for (int v = 0; v < N_VARS; v++) threaded->val[v] = sequential->val[v] = v;
    generate(ops, n_ops, threaded, seed);
    for (int i = 0; i < n_ops; i++) {
        rand_op seq = ops[i];
        seq.world = sequential;
        apply(sequential, &seq);
    }

    completer_queue q = {.cap = n_ops};
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.cv, NULL);
    q.ops = calloc((size_t)n_ops, sizeof(*q.ops));
    q.dones = calloc((size_t)n_ops, sizeof(*q.dones));
    completer_arg args[2] = {{&q, seed * 3 + 1, 0}, {&q, seed * 5 + 2, 0}};
    pthread_t th[2];
    for (int t = 0; t < 2; t++) ck_assert_int_eq(pthread_create(&th[t], NULL, completer_main, &args[t]), 0);

    mx_engine *e = make_engine(false, workers);
    mx_engine_var *vars[N_VARS];
    for (int v = 0; v < N_VARS; v++) ck_assert_ptr_nonnull(vars[v] = mx_engine_new_var(e));
    int n_async = 0;
    for (int i = 0; i < n_ops; i++) {
        mx_engine_var *r[MAX_R], *w[MAX_W];
        for (int k = 0; k < ops[i].n_reads; k++) r[k] = vars[ops[i].reads[k]];
        for (int k = 0; k < ops[i].n_writes; k++) w[k] = vars[ops[i].writes[k]];
        bool async = i % 4 != 3;
        aops[i] = (async_rand_op){.base = ops[i], .queue = &q};
        mx_engine_op op = {.payload = async ? (void *)&aops[i] : (void *)&ops[i], .reads = r,
                           .n_reads = ops[i].n_reads, .writes = w, .n_writes = ops[i].n_writes, .ctx = mx_cpu(),
                           .priority = rand() % 5, .lane = (i % 5 == 0) ? MX_LANE_IO : MX_LANE_COMPUTE};
        if (async) {
            op.async_fn = async_rand_fn;
            n_async++;
            ck_assert_int_eq(mx_engine_push_async(e, &op), MX_OK);
        } else {
            op.fn = rand_fn;
            ck_assert_int_eq(mx_engine_push(e, &op), MX_OK);
        }
    }
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    ck_assert_int_eq(mx_engine_pending(e), 0);
    for (int v = 0; v < N_VARS; v++) ck_assert_int_eq(mx_engine_delete_var(e, vars[v]), MX_OK);
    mx_engine_free(e);

    pthread_mutex_lock(&q.mu);
    q.stopping = true;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    ck_assert_int_eq(args[0].completed + args[1].completed, n_async);

    ck_assert_int_eq(atomic_load(&threaded->violations), 0);
    for (int v = 0; v < N_VARS; v++) ck_assert_msg(threaded->val[v] == sequential->val[v],
                                                   "var %d differs (workers %d, seed %u)", v, workers, seed);
    free(q.ops);
    free(q.dones);
    pthread_cond_destroy(&q.cv);
    pthread_mutex_destroy(&q.mu);
    free(aops);
    free(ops);
    free(threaded);
    free(sequential);
}

START_TEST(random_async_ops_match_push_order)
{
    static const int worker_counts[] = {1, 2, 4};
    for (unsigned seed = 1; seed <= 2; seed++)
        for (size_t k = 0; k < sizeof(worker_counts) / sizeof(worker_counts[0]); k++)
            run_random_async(worker_counts[k], seed * 104729 + (unsigned)k, 1500);
}
END_TEST

/* A chain: every op adds to one counter after reading it, completed by
 * two threads; the final value is exact only if each waited for the
 * previous completion. */
START_TEST(async_chain_of_dependencies)
{
    enum { N = 1000 };
    completer_queue q = {.cap = N};
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.cv, NULL);
    q.ops = calloc(N, sizeof(*q.ops));
    q.dones = calloc(N, sizeof(*q.dones));
    completer_arg args[2] = {{&q, 11, 0}, {&q, 23, 0}};
    pthread_t th[2];
    for (int t = 0; t < 2; t++) ck_assert_int_eq(pthread_create(&th[t], NULL, completer_main, &args[t]), 0);

    rand_world *w = calloc(1, sizeof(*w));
    rand_world *seq = calloc(1, sizeof(*seq));
    async_rand_op *ops = calloc(N, sizeof(*ops));
    mx_engine *e = make_engine(false, 2);
    mx_engine_var *var = mx_engine_new_var(e);
    for (int i = 0; i < N; i++) {
        ops[i] = (async_rand_op){.base = {.world = w, .id = i, .reads = {0}, .n_reads = 1, .writes = {0},
                                          .n_writes = 1},
                                 .queue = &q};
        rand_op s = ops[i].base;
        s.world = seq;
        apply(seq, &s);
        mx_engine_op op = {.async_fn = async_rand_fn, .payload = &ops[i], .reads = &var, .n_reads = 1,
                           .writes = &var, .n_writes = 1, .ctx = mx_cpu(), .lane = MX_LANE_IO};
        ck_assert_int_eq(mx_engine_push_async(e, &op), MX_OK);
    }
    ck_assert_int_eq(mx_engine_wait_var(e, var), MX_OK);
    ck_assert(w->val[0] == seq->val[0]);
    ck_assert_int_eq(mx_engine_wait_all(e), MX_OK);
    ck_assert_int_eq(mx_engine_pending(e), 0);
    ck_assert_int_eq(atomic_load(&w->violations), 0);
    mx_engine_free(e);
    pthread_mutex_lock(&q.mu);
    q.stopping = true;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    ck_assert_int_eq(args[0].completed + args[1].completed, N);
    free(ops);
    free(w);
    free(seq);
    free(q.ops);
    free(q.dones);
    pthread_cond_destroy(&q.cv);
    pthread_mutex_destroy(&q.mu);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, random_ops_match_push_order);
    tcase_add_test(tc, random_ops_naive_engine);
    tcase_add_test(tc, many_threads_push_at_once);
    tcase_add_test(tc, errors_surface_at_wait);
    tcase_add_test(tc, errors_surface_at_wait_naive);
    tcase_add_test(tc, pure_writes_heal_in_place_updates_propagate);
    tcase_add_test(tc, naive_push_keeps_the_callers_error);
    tcase_add_test(tc, malformed_push_is_rejected);
    tcase_add_test(tc, wait_var_waits_for_writes);
    tcase_add_test(tc, wait_var_write_waits_for_reads);
    tcase_add_test(tc, wait_on_idle_var_needs_no_worker);
    tcase_add_test(tc, delete_var_after_pending_ops);
    tcase_add_test(tc, priority_orders_ready_ops);
    tcase_add_test(tc, config_reads_environment);
    tcase_add_test(tc, cpu_contexts_get_their_own_kernel_pools);
    tcase_add_test(tc, cpu_context_workers_are_a_share_of_the_total);
    tcase_add_test(tc, ops_on_two_cpu_contexts_overlap);
    tcase_add_test(tc, push_for_a_missing_cpu_context_fails);
    tcase_add_test(tc, runtime_with_cpu_contexts);
    tcase_add_test(tc, async_op_holds_its_variables_until_complete);
    tcase_add_test(tc, async_errors_surface_at_wait);
    tcase_add_test(tc, async_errors_surface_at_wait_naive);
    tcase_add_test(tc, naive_push_async_blocks_until_complete);
    tcase_add_test(tc, malformed_async_push_is_rejected);
    tcase_add_test(tc, random_async_ops_match_push_order);
    tcase_add_test(tc, async_chain_of_dependencies);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
