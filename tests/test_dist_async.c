/*
 * test_dist_async.c - the dist_async parameter server (kvstore_async.c on
 * lib/comm's calls) across real MPI ranks.
 *
 * Unit level: the suite launches this same binary under
 *   timeout mpirun --allow-run-as-root --oversubscribe -np 2 \
 *       test_dist_async --rank-child MODE
 * (main() sees --rank-child before starting Check); each rank checks its
 * own results and prints CHILD-OK, or CHILD-FAIL and ends the job.
 * End to end: mxtrain under mpirun on a LeNet subset (raw idx files cut
 * from Fashion-MNIST here), against dist_sync; resume; a stopped server.
 */
#include "comm/comm.h"
#include "kvstore/kvstore.h"
#include "support/tooltest.h"

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#ifdef __SANITIZE_ADDRESS__
/* Whole stacks for tests/lsan-openmpi.supp (see test_comm.c). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }
#endif

static char self_exe[4096];

/* ===================================================== the ranks' side */

static mx_comm *child_comm;
static int child_rank = -1;

static void child_fail(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void child_fail(int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    printf("CHILD-FAIL rank %d (test_dist_async.c:%d): %s\n", child_rank, line, msg);
    fflush(stdout);
    if (child_comm) mx_comm_abort(child_comm, 1);
    exit(1);
}

#define CHILD_CHECK(cond, ...)                           \
    do {                                                 \
        if (!(cond)) child_fail(__LINE__, __VA_ARGS__); \
    } while (0)
#define CHILD_OK(call) CHILD_CHECK((call) == MX_OK, "%s: %s", #call, mx_last_error())

#define BIG 300000 /* elements of key 0: 1.2 MB, past MPI's eager limit */
#define SMALL 7
#define PUSHES 6

/* Gradient j of push i from rank r: small integers, exact in float32
 * sums, different for every rank, push and element. */
static float grad_value(int r, int i, int64_t j) { return (float)((r + 1) * 100 + i * 10 + (int)(j % 7)); }

/* Both ranks push PUSHES gradients of two keys to the server with plain
 * SGD (lr 1, no momentum: w -= g), without any barrier between them, and
 * pull after each push. Every pull holds at least this rank's own pushes
 * so far; at the end the server's weight is minus the sum of all pushes,
 * exactly, whatever order they arrived in. */
static int child_sum(void)
{
    mx_comm_launch launch;
    CHILD_CHECK(mx_comm_launched(&launch), "not started by mpirun");
    child_rank = launch.rank;
    mx_comm_config cc = mx_comm_config_default();
    cc.stall_timeout_s = 30;
    CHILD_OK(mx_comm_create(&cc, &child_comm));
    int rank = mx_comm_rank(child_comm), size = mx_comm_size(child_comm);
    mx_runtime *rt;
    CHILD_OK(mx_runtime_create(NULL, &rt));
    mx_kvstore_options ko = {.comm = child_comm};
    mx_kvstore *kv;
    CHILD_OK(mx_kvstore_create_opts(rt, "dist_async", &ko, &kv));
    CHILD_CHECK(mx_kvstore_has_server(kv), "dist_async has no server");
    mx_optimizer_params op;
    CHILD_OK(mx_optimizer_defaults("sgd", &op));
    op.learning_rate = 1;
    mx_optimizer *opt;
    CHILD_OK(mx_optimizer_create(rt, "sgd", &op, &opt));
    CHILD_OK(mx_kvstore_set_optimizer(kv, opt));
    const int64_t n[2] = {BIG, SMALL};
    mx_ndarray *w[2], *g[2], *out[2];
    float *host = malloc(sizeof(float) * BIG), *want = malloc(sizeof(float) * BIG);
    CHILD_CHECK(host && want, "out of memory");
    for (int k = 0; k < 2; k++) {
        CHILD_OK(mx_ndarray_create(rt, MX_SHAPE(n[k]), MX_FLOAT32, mx_cpu(), &w[k]));
        CHILD_OK(mx_ndarray_create(rt, MX_SHAPE(n[k]), MX_FLOAT32, mx_cpu(), &g[k]));
        CHILD_OK(mx_ndarray_create(rt, MX_SHAPE(n[k]), MX_FLOAT32, mx_cpu(), &out[k]));
        CHILD_OK(mx_nd_fill(w[k], rank == 0 ? 0.0 : 5.0)); /* rank 0's value wins */
        CHILD_OK(mx_kvstore_init(kv, k, w[k]));
    }
    for (int i = 0; i < PUSHES; i++) {
        for (int k = 0; k < 2; k++) {
            for (int64_t j = 0; j < n[k]; j++) host[j] = grad_value(rank, i, j);
            CHILD_OK(mx_ndarray_from_host(g[k], host, sizeof(float) * (size_t)n[k]));
            CHILD_OK(mx_kvstore_push(kv, k, &g[k], 1, -k));
            CHILD_OK(mx_kvstore_pull(kv, k, &out[k], 1, -k));
        }
        for (int k = 0; k < 2; k++) {
            CHILD_OK(mx_ndarray_to_host(out[k], host, sizeof(float) * (size_t)n[k]));
            for (int64_t j = 0; j < n[k]; j++) {
                double own = 0;
                for (int p = 0; p <= i; p++) own += grad_value(rank, p, j);
                CHILD_CHECK(-host[j] >= own, "push %d of key %d: the pull has %g at %lld, this rank alone pushed %g",
                            i, k, host[j], (long long)j, own);
            }
        }
    }
    CHILD_OK(mx_kvstore_barrier(kv)); /* every rank's pushes answered: applied */
    for (int k = 0; k < 2; k++) {
        for (int64_t j = 0; j < n[k]; j++) {
            double sum = 0;
            for (int r = 0; r < size; r++)
                for (int i = 0; i < PUSHES; i++) sum += grad_value(r, i, j);
            want[j] = (float)-sum;
        }
        CHILD_OK(mx_kvstore_pull(kv, k, &out[k], 1, 0));
        CHILD_OK(mx_ndarray_to_host(out[k], host, sizeof(float) * (size_t)n[k]));
        CHILD_CHECK(!memcmp(host, want, sizeof(float) * (size_t)n[k]),
                    "key %d after %d pushes of %d ranks: pulled %g at 0, want %g", k, PUSHES, size, host[0], want[0]);
        if (rank == 0) { /* the server's own array */
            CHILD_OK(mx_ndarray_to_host(mx_kvstore_stored(kv, k), host, sizeof(float) * (size_t)n[k]));
            CHILD_CHECK(!memcmp(host, want, sizeof(float) * (size_t)n[k]), "key %d: the server holds %g at 0, want %g",
                        k, host[0], want[0]);
            CHILD_CHECK(mx_optimizer_update_count(opt, k) == PUSHES * size, "key %d: %lld updates, want %d", k,
                        (long long)mx_optimizer_update_count(opt, k), PUSHES * size);
        }
    }
    CHILD_OK(mx_kvstore_barrier(kv)); /* nobody leaves while the server is still needed */
    mx_kvstore_free(kv);
    mx_optimizer_free(opt);
    for (int k = 0; k < 2; k++) {
        mx_ndarray_free(w[k]);
        mx_ndarray_free(g[k]);
        mx_ndarray_free(out[k]);
    }
    free(host);
    free(want);
    mx_runtime_free(rt);
    mx_status st = mx_comm_free(child_comm);
    child_comm = NULL;
    CHILD_CHECK(st == MX_OK, "comm free: %s", mx_last_error());
    printf("CHILD-OK rank %d\n", rank);
    return 0;
}

/* ===================================================== the suite's side */

static char tmp[256];

static void setup(void) { tool_tmp_make(tmp, sizeof(tmp), "mx-async"); }
static void teardown(void) { tool_tmp_remove(tmp); }

static const char *tail(const char *out)
{
    size_t n = strlen(out);
    return n > 3000 ? out + n - 3000 : out;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* `timeout limit mpirun ... args`; *out gets stdout then stderr. */
static int mpirun(int np, int limit_s, const char *args, char **out)
{
    char cmd[8192], *o = NULL, *e = NULL;
    snprintf(cmd, sizeof(cmd),
             "-k 5 %d mpirun --allow-run-as-root --oversubscribe -np %d --mca btl self,vader "
             "--mca oob_tcp_if_include lo %s",
             limit_s, np, args);
    int st = tool_run("timeout", cmd, tmp, NULL, &o, &e);
    size_t n = strlen(o) + strlen(e) + 2;
    *out = malloc(n);
    snprintf(*out, n, "%s\n%s", o, e);
    free(o);
    free(e);
    return st;
}

START_TEST(pushes_of_two_ranks_are_each_applied)
{
    char args[4200], *out;
    snprintf(args, sizeof(args), "'%s' --rank-child sum", self_exe);
    int st = mpirun(2, 60, args, &out);
    ck_assert_msg(st == 0 && count(out, "CHILD-OK") == 2, "exit %d:\n%s", st, tail(out));
    free(out);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--rank-child") == 0) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (!strcmp(argv[2], "sum")) return child_sum();
        fprintf(stderr, "test_dist_async --rank-child: unknown mode %s\n", argv[2]);
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    if (n <= 0) {
        perror("test_dist_async: /proc/self/exe");
        return EXIT_FAILURE;
    }
    self_exe[n] = '\0';
    Suite *s = suite_create("dist_async");
    TCase *tc = tcase_create("mpirun");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, pushes_of_two_ranks_are_each_applied);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
