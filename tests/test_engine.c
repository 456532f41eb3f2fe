/* test_engine.c - the dependency engine against sequential execution. */
#include "engine/engine.h"

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
    unsetenv("MXNET_ENGINE_TYPE");
    unsetenv("MXNET_CPU_WORKER_NTHREADS");
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
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
