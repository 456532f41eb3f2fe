/*
 * test_comm.c - lib/comm across real MPI ranks. The suite itself runs
 * without mpirun; each test launches this same binary under
 *   timeout mpirun --allow-run-as-root --oversubscribe -np N \
 *       test_comm --rank-child MODE ARGS...
 * (main() sees --rank-child before starting Check) and asserts on mpirun's
 * exit status and on the lines the ranks print. Each rank checks its own
 * results against closed-form sums (integers held exactly in floats) and
 * prints CHILD-OK, or CHILD-FAIL and ends the job with mx_comm_abort.
 *
 * Two hosts: tests/mpi/netns-hosts.sh runs the netns mode on two network
 * namespaces (it prints SKIPPED: and passes where namespaces cannot be
 * made). Single-host runs keep MPI off the network: --mca btl self,vader
 * and the out-of-band channel on loopback only.
 */
#include "comm/comm.h"
#include "support/tooltest.h"
#include "support/mpichild.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char self_exe[4096];
static char hostname[64];

#ifdef __SANITIZE_ADDRESS__
/* Open MPI's libraries have no frame pointers and unload their components
 * at MPI_Finalize, so LSan's fast unwinder leaves their allocations with
 * one unnamed frame. The slow unwinder records the whole stack, whose
 * libmpi / libopen-rte / ... frames tests/lsan-openmpi.supp names (`make
 * sanitize` passes it in LSAN_OPTIONS; by hand:
 * LSAN_OPTIONS=suppressions=$PWD/tests/lsan-openmpi.supp). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }
#endif

/* ===================================================== the ranks' side */


static void child_start(double stall_timeout_s, size_t max_message_bytes)
{
    mx_comm_launch launch;
    CHILD_CHECK(mx_comm_launched(&launch), "not seen as started by mpirun");
    child_rank = launch.rank;
    mx_comm_config cfg = mx_comm_config_default();
    cfg.stall_timeout_s = stall_timeout_s;
    if (max_message_bytes) cfg.max_message_bytes = max_message_bytes;
    CHILD_CHECK(mx_comm_create(&cfg, &child_comm) == MX_OK, "create: %s", mx_last_error());
    CHILD_CHECK(mx_comm_rank(child_comm) == launch.rank && mx_comm_size(child_comm) == launch.size,
                "rank %d/%d, environment says %d/%d", mx_comm_rank(child_comm), mx_comm_size(child_comm),
                launch.rank, launch.size);
}

static int child_end(void)
{
    mx_status st = mx_comm_free(child_comm);
    child_comm = NULL;
    CHILD_CHECK(st == MX_OK, "free: %s", mx_last_error());
    printf("CHILD-OK rank %d\n", child_rank);
    return 0;
}

/* Completions of asynchronous requests, in the order they arrive. */
#define MAX_TICKETS 1024
typedef struct tracker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_done, n_failed;
    int order[MAX_TICKETS];
    char first_error[1024];
} tracker;

typedef struct ticket {
    tracker *t;
    int index;
} ticket;

static tracker tickets_tracker = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, {0}, {0}};
static ticket tickets[MAX_TICKETS];

static void on_done(void *user, mx_status status, const char *message)
{
    ticket *k = user;
    tracker *t = k->t;
    pthread_mutex_lock(&t->mu);
    if (t->n_done < MAX_TICKETS) t->order[t->n_done] = k->index;
    t->n_done++;
    if (status != MX_OK && t->n_failed++ == 0) snprintf(t->first_error, sizeof(t->first_error), "%s", message);
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static int n_submitted;

static void submit(mx_comm_request r)
{
    CHILD_CHECK(n_submitted < MAX_TICKETS, "too many requests");
    ticket *k = &tickets[n_submitted];
    k->t = &tickets_tracker;
    k->index = n_submitted++;
    r.done = on_done;
    r.user = k;
    CHILD_CHECK(mx_comm_submit(child_comm, &r) == MX_OK, "submit: %s", mx_last_error());
}

/* Waits for everything submitted; completions must come in submission order. */
static void wait_all(const char *what)
{
    tracker *t = &tickets_tracker;
    pthread_mutex_lock(&t->mu);
    while (t->n_done < n_submitted) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    CHILD_CHECK(t->n_failed == 0, "%s: %d requests failed, first: %s", what, t->n_failed, t->first_error);
    for (int i = 0; i < n_submitted; i++)
        CHILD_CHECK(t->order[i] == i, "%s: completion %d was request %d (not FIFO)", what, i, t->order[i]);
    t->n_done = 0;
    n_submitted = 0;
}

static mx_comm_request allreduce_req(mx_comm_group g, mx_comm_dtype dtype, void *buf, size_t count, const char *name)
{
    return (mx_comm_request){.op = MX_COMM_ALLREDUCE_SUM, .group = g, .dtype = dtype, .buf = buf, .count = count,
                             .name = name};
}

static mx_comm_request broadcast_req(mx_comm_group g, mx_comm_dtype dtype, void *buf, size_t count, int root)
{
    return (mx_comm_request){.op = MX_COMM_BROADCAST, .group = g, .dtype = dtype, .buf = buf, .count = count,
                             .root = root, .name = "a broadcast"};
}

static void check_topology_one_host(mx_comm *c, int r, int n)
{
    char who[200], expect[200];
    CHILD_CHECK(mx_comm_local_rank(c) == r && mx_comm_local_size(c) == n, "local %d/%d on one host of %d ranks",
                mx_comm_local_rank(c), mx_comm_local_size(c), n);
    CHILD_CHECK(mx_comm_num_hosts(c) == 1 && mx_comm_host(c) == 0, "host %d of %d", mx_comm_host(c),
                mx_comm_num_hosts(c));
    CHILD_CHECK(mx_comm_is_leader(c) == (r == 0), "leader flag %d", mx_comm_is_leader(c));
    CHILD_CHECK(mx_comm_group_size(c, MX_COMM_WORLD) == n && mx_comm_group_size(c, MX_COMM_LOCAL) == n &&
                    mx_comm_group_size(c, MX_COMM_LEADERS) == (r == 0 ? 1 : 0),
                "group sizes %d %d %d", mx_comm_group_size(c, MX_COMM_WORLD), mx_comm_group_size(c, MX_COMM_LOCAL),
                mx_comm_group_size(c, MX_COMM_LEADERS));
    CHILD_CHECK(mx_comm_group_rank(c, MX_COMM_LEADERS) == (r == 0 ? 0 : -1), "leaders rank %d",
                mx_comm_group_rank(c, MX_COMM_LEADERS));
    for (int i = 0; i < n; i++) {
        CHILD_CHECK(strcmp(mx_comm_hostname(c, i), hostname) == 0 && mx_comm_host_of(c, i) == 0,
                    "rank %d's host %s (%d), expected %s", i, mx_comm_hostname(c, i), mx_comm_host_of(c, i),
                    hostname);
    }
    CHILD_CHECK(mx_comm_hostname(c, n) == NULL && mx_comm_host_of(c, -1) == -1, "out-of-range rank answered");
    snprintf(expect, sizeof(expect), "rank %d on %s (host 0)", n - 1, hostname);
    CHILD_CHECK(strcmp(mx_comm_rank_str(c, n - 1, who, sizeof(who)), expect) == 0, "rank_str %s", who);
}

/* Rank r holds (r+1) * pattern(i); the sum is S * pattern(i), S = n(n+1)/2,
 * exact in float32 while below 2^24. */
static double pattern(size_t i) { return (double)(i % 251 + 1); }

static void fill(void *buf, mx_comm_dtype dtype, size_t count, double scale)
{
    for (size_t i = 0; i < count; i++) {
        double v = scale * pattern(i);
        switch (dtype) {
        case MX_COMM_FLOAT32: ((float *)buf)[i] = (float)v; break;
        case MX_COMM_FLOAT64: ((double *)buf)[i] = v; break;
        case MX_COMM_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
        case MX_COMM_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
        default: ((uint8_t *)buf)[i] = (uint8_t)v; break;
        }
    }
}

static void expect_filled(const void *buf, mx_comm_dtype dtype, size_t count, double scale, const char *what)
{
    for (size_t i = 0; i < count; i++) {
        double v = 0, want = scale * pattern(i);
        switch (dtype) {
        case MX_COMM_FLOAT32: v = ((const float *)buf)[i]; break;
        case MX_COMM_FLOAT64: v = ((const double *)buf)[i]; break;
        case MX_COMM_INT32: v = ((const int32_t *)buf)[i]; break;
        case MX_COMM_INT64: v = (double)((const int64_t *)buf)[i]; break;
        default: v = ((const uint8_t *)buf)[i]; want = (uint8_t)want; break;
        }
        CHILD_CHECK(v == want, "%s (%s, %zu elements): element %zu is %.17g, expected %.17g", what,
                    mx_comm_dtype_name(dtype), count, i, v, want);
    }
}

typedef struct cb_probe {
    mx_comm *comm;
    mx_status blocking_status;
} cb_probe;

static void call_blocking_from_callback(void *user, mx_status status, const char *message)
{
    (void)status, (void)message;
    cb_probe *p = user;
    p->blocking_status = mx_comm_barrier(p->comm, MX_COMM_WORLD, "inside a callback");
}

/* Everything a healthy job does: exact sums of every dtype, FIFO
 * completion over hundreds of mixed requests, 1 element to 4 MiB,
 * broadcast from every root, allgather, the two-level chain, argument
 * errors. argv[0] (optional): max_message_bytes, to run in pieces. */
static int child_collectives(int argc, char **argv)
{
    /* argv[1] "rabenseifner": the non-blocking allreduce mxtrain selects
     * (ring below one element per rank: the 1-3 element sums below). */
    if (argc > 1 && !strcmp(argv[1], "rabenseifner"))
        setenv(MX_COMM_IALLREDUCE_ENV, MX_COMM_IALLREDUCE_RABENSEIFNER, 1);
    child_start(30, argc > 0 ? strtoull(argv[0], NULL, 10) : 0);
    mx_comm *c = child_comm;
    int r = mx_comm_rank(c), n = mx_comm_size(c);
    double S = n * (n + 1) / 2.0;
    check_topology_one_host(c, r, n);

    /* Exact sums, blocking, every dtype. */
    for (int d = MX_COMM_FLOAT32; d <= MX_COMM_INT64; d++) {
        size_t count = 1000;
        void *buf = malloc(count * 8);
        fill(buf, (mx_comm_dtype)d, count, r + 1);
        CHILD_CHECK(mx_comm_allreduce(c, MX_COMM_WORLD, (mx_comm_dtype)d, buf, count, "exact sum") == MX_OK,
                    "allreduce: %s", mx_last_error());
        expect_filled(buf, (mx_comm_dtype)d, count, S, "blocking allreduce");
        free(buf);
    }

    /* Mixed sizes, asynchronous, alternating groups and dtypes. */
    static const size_t sizes[] = {1, 2, 3, 17, 1000, 4099, 65536 + 3, 262144, 1 << 20};
    enum { N_SIZES = sizeof(sizes) / sizeof(sizes[0]) };
    void *bufs[2 * N_SIZES];
    for (int k = 0; k < 2 * N_SIZES; k++) {
        size_t count = sizes[k % N_SIZES];
        mx_comm_dtype d = k < N_SIZES ? MX_COMM_FLOAT32 : MX_COMM_FLOAT64;
        bufs[k] = malloc(count * mx_comm_dtype_size(d));
        fill(bufs[k], d, count, r + 1);
        submit(allreduce_req(k % 2 ? MX_COMM_LOCAL : MX_COMM_WORLD, d, bufs[k], count, "mixed sizes"));
    }
    wait_all("mixed sizes");
    for (int k = 0; k < 2 * N_SIZES; k++) {
        expect_filled(bufs[k], k < N_SIZES ? MX_COMM_FLOAT32 : MX_COMM_FLOAT64, sizes[k % N_SIZES], S, "mixed sizes");
        free(bufs[k]);
    }

    /* FIFO: 400 requests of every kind in flight at once; callbacks must
     * come in order, and 20 allreduces of one buffer must compose. */
    double chain = r + 1;
    enum { N_FIFO = 400 };
    float *small = calloc(N_FIFO, 4 * sizeof(float));
    int64_t *gathered = calloc(N_FIFO, (size_t)n * sizeof(int64_t));
    int64_t *mine = calloc(N_FIFO, sizeof(int64_t));
    for (int k = 0; k < N_FIFO; k++) {
        float *b = small + 4 * k;
        switch (k % 5) {
        case 0: submit(allreduce_req(MX_COMM_WORLD, MX_COMM_FLOAT64, &chain, 1, "the chain")); break;
        case 1:
            for (int j = 0; j < 4; j++) b[j] = (float)((r + 1) * (k + j));
            submit(allreduce_req(MX_COMM_LOCAL, MX_COMM_FLOAT32, b, 4, "fifo"));
            break;
        case 2:
            for (int j = 0; j < 4; j++) b[j] = (float)(r * 1000 + k + j);
            submit(broadcast_req(MX_COMM_WORLD, MX_COMM_FLOAT32, b, 4, k % n));
            break;
        case 3:
            mine[k] = r * 100000 + k;
            submit((mx_comm_request){.op = MX_COMM_ALLGATHER, .group = MX_COMM_WORLD, .dtype = MX_COMM_INT64,
                                     .send = &mine[k], .buf = gathered + (size_t)k * n, .count = 1,
                                     .name = "fifo gather"});
            break;
        default:
            submit((mx_comm_request){.op = MX_COMM_BARRIER, .group = k % 2 ? MX_COMM_WORLD : MX_COMM_LOCAL});
            break;
        }
    }
    wait_all("fifo");
    double want_chain = S;
    for (int k = 1; k < N_FIFO / 5; k++) want_chain *= n;
    CHILD_CHECK(chain == want_chain, "chain of %d allreduces: %.17g, expected %.17g", N_FIFO / 5, chain, want_chain);
    for (int k = 0; k < N_FIFO; k++) {
        const float *b = small + 4 * k;
        for (int j = 0; j < 4 && k % 5 == 1; j++)
            CHILD_CHECK(b[j] == (float)(S * (k + j)), "fifo allreduce %d: %g", k, b[j]);
        for (int j = 0; j < 4 && k % 5 == 2; j++)
            CHILD_CHECK(b[j] == (float)((k % n) * 1000 + k + j), "fifo broadcast %d: %g", k, b[j]);
        for (int s = 0; s < n && k % 5 == 3; s++)
            CHILD_CHECK(gathered[(size_t)k * n + s] == s * 100000 + k, "fifo allgather %d from %d: %lld", k, s,
                        (long long)gathered[(size_t)k * n + s]);
    }
    free(small);
    free(gathered);
    free(mine);

    /* Broadcast 1 MiB + 1 bytes from every root. */
    size_t nb = (1 << 20) + 1;
    uint8_t *bytes = malloc(nb);
    for (int root = 0; root < n; root++) {
        for (size_t i = 0; i < nb; i++) bytes[i] = (uint8_t)(i * 7 + (size_t)r * 13);
        CHILD_CHECK(mx_comm_broadcast(c, MX_COMM_WORLD, MX_COMM_BYTE, bytes, nb, root, "a MiB") == MX_OK,
                    "broadcast: %s", mx_last_error());
        for (size_t i = 0; i < nb; i++)
            CHILD_CHECK(bytes[i] == (uint8_t)(i * 7 + (size_t)root * 13), "broadcast from %d: byte %zu", root, i);
    }
    free(bytes);

    /* Two levels, submitted back to back on one buffer: sum on the host,
     * sum across host leaders, broadcast on the host. */
    size_t n2 = 100000;
    float *two = malloc(n2 * sizeof(float));
    fill(two, MX_COMM_FLOAT32, n2, r + 1);
    submit(allreduce_req(MX_COMM_LOCAL, MX_COMM_FLOAT32, two, n2, "two-level, on the host"));
    if (mx_comm_is_leader(c)) submit(allreduce_req(MX_COMM_LEADERS, MX_COMM_FLOAT32, two, n2, "two-level, leaders"));
    submit(broadcast_req(MX_COMM_LOCAL, MX_COMM_FLOAT32, two, n2, 0));
    wait_all("two-level");
    expect_filled(two, MX_COMM_FLOAT32, n2, S, "two-level sum");
    free(two);

    /* The start-up check passes when every rank agrees. */
    CHILD_CHECK(mx_comm_check_same(c, "same config", 11, "the config") == MX_OK, "check_same: %s", mx_last_error());

    /* Argument errors are refused at submit, and nothing is queued. */
    float f = 0;
    mx_comm_request bad = allreduce_req(MX_COMM_WORLD, MX_COMM_BYTE, &f, 1, NULL);
    CHILD_CHECK(mx_comm_submit(c, &bad) == MX_ERR_INVALID && strstr(mx_last_error(), "not bytes"), "byte allreduce: %s",
                mx_last_error());
    bad = allreduce_req(MX_COMM_WORLD, MX_COMM_FLOAT32, NULL, 1, NULL);
    CHILD_CHECK(mx_comm_submit(c, &bad) == MX_ERR_INVALID, "NULL buffer accepted");
    bad = broadcast_req(MX_COMM_WORLD, MX_COMM_FLOAT32, &f, 1, n);
    CHILD_CHECK(mx_comm_submit(c, &bad) == MX_ERR_INVALID && strstr(mx_last_error(), "root"), "root %d: %s", n,
                mx_last_error());
    bad = allreduce_req(MX_COMM_LEADERS, MX_COMM_FLOAT32, &f, 1, NULL);
    if (r != 0)
        CHILD_CHECK(mx_comm_submit(c, &bad) == MX_ERR_INVALID && strstr(mx_last_error(), "not its host's leader"),
                    "leaders from a non-leader: %s", mx_last_error());
    char big[8];
    bad = (mx_comm_request){.op = MX_COMM_ALLGATHER, .group = MX_COMM_WORLD, .dtype = MX_COMM_BYTE, .send = big,
                            .buf = big, .count = (size_t)1 << 40};
    CHILD_CHECK(mx_comm_submit(c, &bad) == MX_ERR_INVALID && strstr(mx_last_error(), "small records"),
                "huge allgather: %s", mx_last_error());

    /* A blocking call inside a callback would wait for itself: refused. */
    cb_probe probe = {c, MX_OK};
    mx_comm_request b = {.op = MX_COMM_BARRIER, .group = MX_COMM_WORLD, .done = call_blocking_from_callback,
                         .user = &probe};
    CHILD_CHECK(mx_comm_submit(c, &b) == MX_OK, "submit: %s", mx_last_error());
    CHILD_CHECK(mx_comm_barrier(c, MX_COMM_WORLD, "after the probe") == MX_OK, "barrier: %s", mx_last_error());
    CHILD_CHECK(probe.blocking_status == MX_ERR_INVALID, "blocking call in a callback returned %d",
                probe.blocking_status);

    /* Speed, for the log: 4 MiB float32 on WORLD. */
    size_t nt = 1 << 20;
    float *t = calloc(nt, sizeof(float));
    double t0 = mx_time_seconds();
    for (int k = 0; k < 5; k++)
        CHILD_CHECK(mx_comm_allreduce(c, MX_COMM_WORLD, MX_COMM_FLOAT32, t, nt, "timing") == MX_OK, "timing: %s",
                    mx_last_error());
    if (r == 0) printf("TIME allreduce of 4 MiB float32 on %d ranks: %.2f ms\n", n, (mx_time_seconds() - t0) / 5 * 1e3);
    free(t);
    return child_end();
}

/* The ranks listed in argv[0] ("2,3") pass different bytes to the check. */
static int child_mismatch(int argc, char **argv)
{
    child_start(30, 0);
    int r = mx_comm_rank(child_comm);
    char differs[64], bytes[64];
    snprintf(differs, sizeof(differs), ",%s,", argc > 0 ? argv[0] : "");
    char me[16];
    snprintf(me, sizeof(me), ",%d,", r);
    if (strstr(differs, me)) snprintf(bytes, sizeof(bytes), "config of rank %d", r);
    else snprintf(bytes, sizeof(bytes), "the shared config");
    mx_status st = mx_comm_check_same(child_comm, bytes, strlen(bytes), "the config");
    CHILD_CHECK(st == MX_ERR_INVALID, "check_same returned %d: %s", st, mx_last_error());
    printf("MISMATCH rank %d: %s\n", r, mx_last_error());
    return child_end();
}

/* Rank argv[0] sleeps argv[1] seconds before joining an allreduce (or
 * stops itself with SIGSTOP when argv[1] is "stop"); the others have a 2 s
 * stall timeout, report, and end the job with code 3. */
static int child_stall(int argc, char **argv)
{
    CHILD_CHECK(argc >= 2, "stall needs RANK SECONDS");
    child_start(2.0, 0);
    int r = mx_comm_rank(child_comm), sleeper = atoi(argv[0]);
    float buf[1024] = {0};
    if (r == sleeper && strcmp(argv[1], "stop") == 0) raise(SIGSTOP);
    else if (r == sleeper) sleep((unsigned)atoi(argv[1]));
    double t0 = mx_time_seconds();
    mx_status st = mx_comm_allreduce(child_comm, MX_COMM_WORLD, MX_COMM_FLOAT32, buf, 1024, "key 3 (fc1_weight)");
    printf("STALL rank %d after %.1f s: %s\n", r, mx_time_seconds() - t0, st == MX_OK ? "ok" : mx_last_error());
    if (st != MX_OK) {
        /* The comm has failed: the next request fails at once. */
        t0 = mx_time_seconds();
        st = mx_comm_barrier(child_comm, MX_COMM_WORLD, "the next one");
        printf("NEXT rank %d after %.1f s: %s\n", r, mx_time_seconds() - t0, st == MX_OK ? "ok" : mx_last_error());
    }
    fflush(stdout);
    mx_comm_abort(child_comm, 3);
    return 2; /* not reached */
}

/* Rank argv[0] dies (argv[1]: "kill" = SIGKILL, "exit" = exit(0) without
 * finalizing) after a first barrier; the others keep reducing with a 60 s
 * stall timeout, so only mpirun can end them. */
static int child_die(int argc, char **argv)
{
    CHILD_CHECK(argc >= 2, "die needs RANK HOW");
    child_start(60, 0);
    int r = mx_comm_rank(child_comm);
    CHILD_CHECK(mx_comm_barrier(child_comm, MX_COMM_WORLD, "start") == MX_OK, "barrier: %s", mx_last_error());
    if (r == atoi(argv[0])) {
        printf("DIE rank %d: %s\n", r, argv[1]);
        fflush(stdout);
        if (strcmp(argv[1], "kill") == 0) raise(SIGKILL);
        exit(0);
    }
    float x = 1;
    for (;;) CHILD_CHECK(mx_comm_allreduce(child_comm, MX_COMM_WORLD, MX_COMM_FLOAT32, &x, 1, "forever") == MX_OK,
                         "allreduce: %s", mx_last_error());
}

/* Two hosts of two ranks (tests/mpi/netns-hosts.sh). */
static int child_netns(int argc, char **argv)
{
    (void)argc, (void)argv;
    child_start(30, 0);
    mx_comm *c = child_comm;
    int r = mx_comm_rank(c), n = mx_comm_size(c);
    CHILD_CHECK(n == 4, "size %d", n);
    CHILD_CHECK(mx_comm_local_size(c) == 2 && mx_comm_local_rank(c) == r % 2, "local %d/%d", mx_comm_local_rank(c),
                mx_comm_local_size(c));
    CHILD_CHECK(mx_comm_num_hosts(c) == 2 && mx_comm_host(c) == r / 2, "host %d/%d", mx_comm_host(c),
                mx_comm_num_hosts(c));
    CHILD_CHECK(mx_comm_group_size(c, MX_COMM_LEADERS) == (r % 2 == 0 ? 2 : 0), "leaders size %d",
                mx_comm_group_size(c, MX_COMM_LEADERS));
    for (int i = 0; i < n; i++) CHILD_CHECK(mx_comm_host_of(c, i) == i / 2, "host of %d", i);
    double leader_sum = 0;
    if (mx_comm_is_leader(c)) {
        leader_sum = mx_comm_host(c) + 1;
        CHILD_CHECK(mx_comm_allreduce(c, MX_COMM_LEADERS, MX_COMM_FLOAT64, &leader_sum, 1, "leaders") == MX_OK,
                    "leaders allreduce: %s", mx_last_error());
        CHILD_CHECK(leader_sum == 3, "leaders sum %g, expected 3", leader_sum);
    }
    size_t count = 300000;
    float *buf = malloc(count * sizeof(float));
    fill(buf, MX_COMM_FLOAT32, count, r + 1);
    CHILD_CHECK(mx_comm_allreduce(c, MX_COMM_WORLD, MX_COMM_FLOAT32, buf, count, "world") == MX_OK, "world: %s",
                mx_last_error());
    expect_filled(buf, MX_COMM_FLOAT32, count, 10, "world sum");
    fill(buf, MX_COMM_FLOAT32, count, r + 1);
    submit(allreduce_req(MX_COMM_LOCAL, MX_COMM_FLOAT32, buf, count, "two-level, on the host"));
    if (mx_comm_is_leader(c)) submit(allreduce_req(MX_COMM_LEADERS, MX_COMM_FLOAT32, buf, count, "two-level"));
    submit(broadcast_req(MX_COMM_LOCAL, MX_COMM_FLOAT32, buf, count, 0));
    wait_all("two-level");
    expect_filled(buf, MX_COMM_FLOAT32, count, 10, "two-level sum");
    free(buf);
    printf("NETNS rank %d: local %d/%d host %d/%d on %s, leaders sum %g\n", r, mx_comm_local_rank(c),
           mx_comm_local_size(c), mx_comm_host(c), mx_comm_num_hosts(c), mx_comm_hostname(c, r), leader_sum);
    return child_end();
}

static const struct {
    const char *mode;
    int (*run)(int argc, char **argv);
} child_modes[] = {
    {"collectives", child_collectives}, {"mismatch", child_mismatch}, {"stall", child_stall},
    {"die", child_die},                 {"netns", child_netns},
};

static int child_main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < sizeof(child_modes) / sizeof(child_modes[0]); i++)
        if (strcmp(argv[0], child_modes[i].mode) == 0) return child_modes[i].run(argc - 1, argv + 1);
    fprintf(stderr, "test_comm --rank-child: unknown mode %s\n", argv[0]);
    return 2;
}

/* ===================================================== the suite's side */

typedef struct ranks_run {
    int status;     /* mpirun's (124: killed by timeout) */
    double seconds;
    char *out;      /* stdout then stderr */
} ranks_run;

static ranks_run run_command(const char *prog, const char *args)
{
    char dir[256];
    tool_tmp_make(dir, sizeof(dir), "mxc-comm");
    char *out = NULL, *err = NULL;
    double t0 = mx_time_seconds();
    ranks_run run;
    run.status = tool_run(prog, args, dir, NULL, &out, &err);
    run.seconds = mx_time_seconds() - t0;
    size_t n = strlen(out) + strlen(err) + 2;
    run.out = malloc(n);
    snprintf(run.out, n, "%s\n%s", out, err);
    free(out);
    free(err);
    tool_tmp_remove(dir);
    fprintf(stderr, "-- %s %s: exit %d after %.1f s\n%s\n", prog, args, run.status, run.seconds, run.out);
    return run;
}

/* mpirun -np np <this binary> --rank-child mode_args, on this host only,
 * ended by `timeout` after limit_s. */
static ranks_run run_ranks(int np, int limit_s, const char *mode_args)
{
    char args[8192];
    snprintf(args, sizeof(args),
             "-k 5 %d mpirun --allow-run-as-root --oversubscribe -np %d --mca btl self,vader "
             "--mca oob_tcp_if_include lo '%s' --rank-child %s",
             limit_s, np, self_exe, mode_args);
    return run_command("timeout", args);
}

/* The end of an output, for assertion messages (Check cannot carry a
 * whole sanitizer report; run_command printed it all already). */
static const char *tail(const char *text)
{
    size_t n = strlen(text);
    return n > 3000 ? text + n - 3000 : text;
}

static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void expect_all_ok(const ranks_run *run, int np)
{
    ck_assert_msg(run->status == 0, "mpirun exited %d:\n%s", run->status, tail(run->out));
    ck_assert_msg(count_lines(run->out, "CHILD-OK rank") == np, "not every rank passed:\n%s", tail(run->out));
    ck_assert_msg(!strstr(run->out, "CHILD-FAIL"), "%s", tail(run->out));
}

START_TEST(collectives_2_ranks_in_pieces)
{
    /* 256 KiB pieces: the 4 MiB buffers run as 16 collectives each. */
    ranks_run run = run_ranks(2, 60, "collectives 262144");
    expect_all_ok(&run, 2);
    free(run.out);
}
END_TEST

START_TEST(collectives_4_ranks)
{
    ranks_run run = run_ranks(4, 60, "collectives");
    expect_all_ok(&run, 4);
    free(run.out);
    run = run_ranks(4, 60, "collectives 0 rabenseifner");
    expect_all_ok(&run, 4);
    free(run.out);
}
END_TEST

START_TEST(mismatched_check_names_the_ranks)
{
    ranks_run run = run_ranks(4, 60, "mismatch 2,3");
    expect_all_ok(&run, 4);
    char want[512];
    snprintf(want, sizeof(want),
             ": the config differs between ranks: 2 of 4 ranks agree with rank 0 on %s (host 0); different: rank 2 "
             "on %s (host 0), rank 3 on %s (host 0)\n",
             hostname, hostname, hostname);
    ck_assert_msg(count_lines(run.out, want) == 4, "every rank should report '%s':\n%s", want, tail(run.out));
    free(run.out);
}
END_TEST

START_TEST(stall_fails_with_the_collective_named)
{
    ranks_run run = run_ranks(3, 40, "stall 1 6");
    ck_assert_msg(run.status != 0 && run.status != 124, "mpirun exited %d:\n%s", run.status, tail(run.out));
    ck_assert_msg(run.seconds < 12, "took %.1f s", run.seconds);
    char want[512];
    snprintf(want, sizeof(want),
             " s (stall_timeout_s 2); it is collective 1 on world here; rank 1 on %s (host 0) is behind: it has "
             "started 0 of them (idle)\n",
             hostname);
    for (int r = 0; r <= 2; r += 2) {
        char head[64];
        snprintf(head, sizeof(head), "STALL rank %d after ", r);
        const char *p = strstr(run.out, head);
        ck_assert_msg(p, "rank %d did not report:\n%s", r, tail(run.out));
        size_t len = strcspn(p, "\n") + 1;
        char *line = strndup(p, len);
        double t = atof(line + strlen(head));
        ck_assert_msg(t >= 2.0 && t < 5.0, "rank %d failed after %.1f s, not after the 2 s stall timeout", r, t);
        ck_assert_msg(strstr(line, " s: allreduce of key 3 (fc1_weight) on world (1024 float32) did not complete: "
                                   "waited "),
                      "rank %d should name the collective: %s", r, line);
        ck_assert_msg(strstr(line, want), "rank %d should name rank 1 as behind with '%s': %s", r, want, line);
        free(line);
    }
    snprintf(want, sizeof(want), "NEXT rank 0 after 0.0 s: barrier of the next one on world was not run: the "
                                 "communication failed earlier: allreduce of key 3 (fc1_weight)");
    ck_assert_msg(strstr(run.out, want), "the next request should fail at once:\n%s", tail(run.out));
    free(run.out);
}
END_TEST

START_TEST(stopped_rank_is_named_as_not_answering)
{
    ranks_run run = run_ranks(2, 40, "stall 1 stop");
    ck_assert_msg(run.status != 0 && run.status != 124, "mpirun exited %d:\n%s", run.status, tail(run.out));
    ck_assert_msg(run.seconds < 15, "took %.1f s", run.seconds);
    char want[512];
    snprintf(want, sizeof(want),
             " s (stall_timeout_s 2); it is collective 1 on world here; rank 1 on %s (host 0) did not answer within "
             "1.0 s (stopped, gone or stuck in MPI)\n",
             hostname);
    ck_assert_msg(strstr(run.out, want), "rank 0 should name rank 1 as silent with '%s':\n%s", want, tail(run.out));
    free(run.out);
}
END_TEST

static void expect_job_ends(const char *mode_args)
{
    ranks_run run = run_ranks(3, 40, mode_args);
    ck_assert_msg(run.status != 0 && run.status != 124, "mpirun exited %d:\n%s", run.status, tail(run.out));
    ck_assert_msg(run.seconds < 15, "took %.1f s", run.seconds);
    ck_assert_msg(strstr(run.out, "DIE rank 1"), "%s", tail(run.out));
    ck_assert_msg(!strstr(run.out, "CHILD-FAIL"), "%s", tail(run.out));
    free(run.out);
}

START_TEST(killed_rank_ends_the_job)
{
    expect_job_ends("die 1 kill");
}
END_TEST

START_TEST(rank_exiting_without_finalize_ends_the_job)
{
    expect_job_ends("die 1 exit");
}
END_TEST

START_TEST(two_hosts_in_network_namespaces)
{
    char args[8192];
    snprintf(args, sizeof(args), "tests/mpi/netns-hosts.sh '%s' --rank-child netns", self_exe);
    ranks_run run = run_command("timeout -k 5 60", args);
    if (strstr(run.out, "SKIPPED:")) {
        fprintf(stderr, "\n*** test_comm: two-host test SKIPPED (see the line above) ***\n\n");
        ck_assert_int_eq(run.status, 0);
        free(run.out);
        return;
    }
    expect_all_ok(&run, 4);
    for (int r = 0; r < 4; r++) {
        char want[128];
        snprintf(want, sizeof(want), "NETNS rank %d: local %d/2 host %d/2", r, r % 2, r / 2);
        ck_assert_msg(strstr(run.out, want), "missing '%s':\n%s", want, tail(run.out));
    }
    free(run.out);
}
END_TEST

/* ------------------------------------------------- without mpirun */

START_TEST(launch_is_read_from_the_environment)
{
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    mx_comm_launch l;
    ck_assert(!mx_comm_launched(&l));
    ck_assert(!l.by_mpirun);
    ck_assert_int_eq(l.rank, -1);
    ck_assert(!mx_comm_launched(NULL));
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    ck_assert(mx_comm_launched(&l));
    ck_assert_int_eq(l.size, 4);
    ck_assert_int_eq(l.rank, 2);
    ck_assert_int_eq(l.local_rank, 0);
    ck_assert_int_eq(l.local_size, 2);
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("PMIX_RANK", "5", 1);
    ck_assert(mx_comm_launched(&l));
    ck_assert_int_eq(l.rank, 5);
    ck_assert_int_eq(l.size, -1);
    unsetenv("PMIX_RANK");
}
END_TEST

START_TEST(bad_config_is_refused)
{
    mx_comm *c = NULL;
    mx_comm_config cfg = mx_comm_config_default();
    ck_assert(cfg.stall_timeout_s > 0 && cfg.shutdown_timeout_s > 0 && cfg.max_message_bytes >= 8);
    cfg.stall_timeout_s = -1;
    ck_assert_int_eq(mx_comm_create(&cfg, &c), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "stall_timeout_s"));
    cfg = mx_comm_config_default();
    cfg.max_message_bytes = 4;
    ck_assert_int_eq(mx_comm_create(&cfg, &c), MX_ERR_INVALID);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(mx_comm_free(NULL), MX_OK);
    mx_comm_abort(NULL, 1); /* returns */
}
END_TEST

/* One process on its own (an MPI singleton, in Check's forked child). */
START_TEST(singleton_without_mpirun)
{
    setenv("OMPI_MCA_ess_singleton_isolated", "1", 1); /* no helper daemon */
    setenv("OMPI_MCA_btl", "self", 1);
    setenv("OMPI_MCA_oob_tcp_if_include", "lo", 1);
    mx_comm *c = NULL;
    ck_assert_msg(mx_comm_create(NULL, &c) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_comm_size(c), 1);
    ck_assert_int_eq(mx_comm_num_hosts(c), 1);
    ck_assert(mx_comm_is_leader(c));
    double x[3] = {1, 2, 3};
    ck_assert_int_eq(mx_comm_allreduce(c, MX_COMM_LEADERS, MX_COMM_FLOAT64, x, 3, "alone"), MX_OK);
    ck_assert(x[0] == 1 && x[1] == 2 && x[2] == 3);
    ck_assert_int_eq(mx_comm_check_same(c, "abc", 3, "the config"), MX_OK);
    mx_comm_request bad = {.op = MX_COMM_OP_COUNT};
    ck_assert_int_eq(mx_comm_submit(c, &bad), MX_ERR_INVALID);
    bad = (mx_comm_request){.op = MX_COMM_BARRIER, .group = MX_COMM_GROUP_COUNT};
    ck_assert_int_eq(mx_comm_submit(c, &bad), MX_ERR_INVALID);
    ck_assert_int_eq(mx_comm_free(c), MX_OK);
    /* MPI starts once per process. */
    ck_assert_int_eq(mx_comm_create(NULL, &c), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "already finalized"), "%s", mx_last_error());
}
END_TEST

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--rank-child") == 0) {
        gethostname(hostname, sizeof(hostname) - 1);
        return child_main(argc - 2, argv + 2);
    }
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    if (n <= 0) {
        perror("test_comm: /proc/self/exe");
        return EXIT_FAILURE;
    }
    self_exe[n] = '\0';
    gethostname(hostname, sizeof(hostname) - 1);

    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("local");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, launch_is_read_from_the_environment);
    tcase_add_test(tc, bad_config_is_refused);
    tcase_add_test(tc, singleton_without_mpirun);
    suite_add_tcase(s, tc);
    tc = tcase_create("mpirun");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, collectives_2_ranks_in_pieces);
    tcase_add_test(tc, collectives_4_ranks);
    tcase_add_test(tc, mismatched_check_names_the_ranks);
    tcase_add_test(tc, stall_fails_with_the_collective_named);
    tcase_add_test(tc, stopped_rank_is_named_as_not_answering);
    tcase_add_test(tc, killed_rank_ends_the_job);
    tcase_add_test(tc, rank_exiting_without_finalize_ends_the_job);
    tcase_add_test(tc, two_hosts_in_network_namespaces);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
