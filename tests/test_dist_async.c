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
#include "support/mpichild.h"

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#ifdef __SANITIZE_ADDRESS__
/* Whole stacks for tests/lsan-openmpi.supp (see test_comm.c). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }
#endif

static char self_exe[4096];

/* ===================================================== the ranks' side */


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

/* Under ASan, for the runs that follow: no leak check at the ranks' exit
 * (a second each, with Open MPI's thousands of suppressed allocations).
 * For a job that ends by MPI_Abort, and for dist_sync's LeNet run, whose
 * paths test_dist checks; every other run here keeps it. Each test runs in
 * a process of its own (Check forks), so the setting ends with the test. */
static void skip_leak_check(void)
{
    const char *asan = getenv("ASAN_OPTIONS");
    if (!TOOL_SANITIZED || !asan) return;
    char opts[1024];
    snprintf(opts, sizeof(opts), "%s:detect_leaks=0", asan);
    setenv("ASAN_OPTIONS", opts, 1);
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

static const char *mxtrain(void)
{
    static char bin[512];
    const char *build = getenv("MX_TEST_BUILD");
    snprintf(bin, sizeof(bin), "%s/bin/mxtrain", build && *build ? build : "build");
    return bin;
}

/* The first n records of a gzip'd idx file (idx3 images or idx1 labels),
 * as a raw idx file with the count set to n. */
static void idx_subset(const char *src, const char *dst, int n)
{
    gzFile in = gzopen(src, "rb");
    ck_assert_msg(in != NULL, "%s: cannot open", src);
    unsigned char head[16];
    ck_assert_int_eq(gzread(in, head, 8), 8);
    bool images = head[3] == 3;
    size_t record = 1;
    if (images) {
        ck_assert_int_eq(gzread(in, head + 8, 8), 8);
        record = (size_t)((head[8] << 24 | head[9] << 16 | head[10] << 8 | head[11]) *
                          (head[12] << 24 | head[13] << 16 | head[14] << 8 | head[15]));
    }
    head[4] = (unsigned char)(n >> 24), head[5] = (unsigned char)(n >> 16);
    head[6] = (unsigned char)(n >> 8), head[7] = (unsigned char)n;
    size_t bytes = record * (size_t)n;
    unsigned char *body = malloc(bytes);
    ck_assert_int_eq(gzread(in, body, (unsigned)bytes), (int)bytes);
    gzclose(in);
    FILE *f = fopen(dst, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(head, 1, images ? 16 : 8, f), images ? 16 : 8);
    ck_assert_int_eq(fwrite(body, 1, bytes, f), bytes);
    fclose(f);
    free(body);
}

/* The last "Epoch[E] Validation-accuracy=" of a log. */
static double last_val_accuracy(const char *out)
{
    const char *key = "Validation-accuracy=", *p = out, *last = NULL;
    while ((p = strstr(p, key))) last = p, p += strlen(key);
    ck_assert_msg(last != NULL, "no validation accuracy:\n%s", tail(out));
    return strtod(last + strlen(key), NULL);
}

#define FMNIST "/usr/share/datasets/fashion-mnist/"

/* LeNet on 512 Fashion-MNIST images (256 per rank), 2 epochs, validated on
 * 512: 2 asynchronous workers reach at least dist_sync's accuracy less 2
 * points, as the mean of five dist_async runs (sync 0.682; single async
 * runs 0.61 to 0.74 over about 40 runs, mean about 0.70, the spread from
 * the order in which pushes meet: three runs' mean failed the bound about
 * one time in fifty; async makes twice the updates). Without momentum, at
 * batch 16 per rank and lr 0.03: two workers pushing gradients from about
 * the same weights step about twice as far as one (kvstore.h: dist_async);
 * at lr 0.05 an unlucky interleaving ended at 0.69 (against sync's 0.72) in
 * 2 of 15 runs of 1024 images, and momentum 0.9 diverges (the README says
 * so). The progress line every 4 batches is a collective, which bounds how
 * far one rank runs ahead of the other (the staleness of its gradients).
 * The sanitizer builds look for memory errors and races, 10x slower: 256
 * images validated on 256 (sync 0.617, async 0.625 to 0.703), and the claim
 * is wider there: both well above chance (0.1), async within 5 points of
 * sync. */
#define LENET_TRAIN (TOOL_SANITIZED ? 256 : 512)
#define LENET_VAL (TOOL_SANITIZED ? 256 : 512)
#define LENET_POINTS (TOOL_SANITIZED ? 0.05 : 0.02)
#define LENET_LEARNED (TOOL_SANITIZED ? 0.4 : 0.5)
START_TEST(lenet_async_is_within_2_points_of_sync)
{
    char ti[400], tl[400], vi[400], vl[400];
    snprintf(ti, sizeof(ti), "%s/ti", tmp);
    snprintf(tl, sizeof(tl), "%s/tl", tmp);
    snprintf(vi, sizeof(vi), "%s/vi", tmp);
    snprintf(vl, sizeof(vl), "%s/vl", tmp);
    idx_subset(FMNIST "train-images-idx3-ubyte.gz", ti, LENET_TRAIN);
    idx_subset(FMNIST "train-labels-idx1-ubyte.gz", tl, LENET_TRAIN);
    idx_subset(FMNIST "t10k-images-idx3-ubyte.gz", vi, LENET_VAL);
    idx_subset(FMNIST "t10k-labels-idx1-ubyte.gz", vl, LENET_VAL);
    /* dist_sync is deterministic; dist_async's result depends on the order
     * in which the ranks' pushes meet at the server, which the machine's load
     * decides (0.61 to 0.74 over about 40 runs here): its mean over five runs
     * is what is compared. */
    enum { RUNS = 6 };
    double acc[RUNS];
    const char *kinds[RUNS] = {"dist_sync", "dist_async", "dist_async", "dist_async", "dist_async", "dist_async"};
    for (int k = 0; k < RUNS; k++) {
        char args[4096], *out;
        const char *asan = getenv("ASAN_OPTIONS");
        char *saved = asan ? strdup(asan) : NULL;
        if (k == 0) skip_leak_check();
        snprintf(args, sizeof(args),
                 "%s configs/lenet.conf train.image=%s train.label=%s val.image=%s val.label=%s "
                 "train.batch_size=16 val.batch_size=64 optimizer.momentum=0 optimizer.lr=0.03 fit.num_epoch=2 "
                 "fit.disp_batches=4 fit.model_prefix=%s/%s%d/m fit.kvstore=%s",
                 mxtrain(), ti, tl, vi, vl, tmp, kinds[k], k, kinds[k]);
        int st = mpirun(2, 120, args, &out);
        if (saved) setenv("ASAN_OPTIONS", saved, 1);
        free(saved);
        ck_assert_msg(st == 0, "%s exited %d:\n%s", kinds[k], st, tail(out));
        ck_assert_msg(count(out, "Epoch[1] Time cost=") == 1, "one log (rank 0's):\n%s", tail(out));
        acc[k] = last_val_accuracy(out);
        free(out);
    }
    const double async_mean = (acc[1] + acc[2] + acc[3] + acc[4] + acc[5]) / 5;
    printf("LeNet on %d images, 2 ranks, 2 epochs: validation accuracy dist_sync %.4f, dist_async %.4f %.4f %.4f %.4f "
           "%.4f\n",
           LENET_TRAIN, acc[0], acc[1], acc[2], acc[3], acc[4], acc[5]);
    ck_assert_msg(async_mean >= acc[0] - LENET_POINTS,
                  "dist_async %.4f %.4f %.4f %.4f %.4f (mean %.4f), dist_sync %.4f: more than %g points apart", acc[1],
                  acc[2], acc[3], acc[4], acc[5], async_mean, acc[0], LENET_POINTS * 100);
    for (int k = 0; k < RUNS; k++)
        ck_assert_msg(acc[k] > LENET_LEARNED, "%s run %d did not learn: %.4f", kinds[k], k, acc[k]);
}
END_TEST

/* A small MLP on a CSV (rows of class c lean towards feature c). */
static void write_mlp(const char *conf, int rows, const char *extra)
{
    char d[400], l[400];
    snprintf(d, sizeof(d), "%s/d.csv", tmp);
    snprintf(l, sizeof(l), "%s/l.csv", tmp);
    FILE *fd = fopen(d, "w"), *fl = fopen(l, "w"), *fc = fopen(conf, "w");
    ck_assert(fd && fl && fc);
    uint64_t x = 88172645463325252ull;
    for (int r = 0; r < rows; r++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int y = (int)(x % 4);
        for (int f = 0; f < 12; f++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            fprintf(fd, "%s%.6f", f ? "," : "", (double)(x >> 11) * 0x1.0p-53 * 2 - 1 + (f == y ? 1.5 : 0));
        }
        fprintf(fd, "\n");
        fprintf(fl, "%d\n", y);
    }
    fprintf(fc,
            "[layer fc1]\nop = FullyConnected\nnum_hidden = 16\n[layer relu]\nop = relu\n"
            "[layer fc2]\nop = FullyConnected\nnum_hidden = 4\n[layer softmax]\nop = SoftmaxOutput\n"
            "[train]\niter = csv\ndata_csv = %s\nlabel_csv = %s\ndata_shape = 12\nbatch_size = 8\n"
            "[optimizer]\ntype = sgd\nlr = 0.1\nmomentum = 0.9\nwd = 0.0001\n"
            "[fit]\nnum_epoch = 2\ndisp_batches = 5\nmetric = acc, ce\n%s",
            d, l, extra);
    fclose(fd);
    fclose(fl);
    fclose(fc);
}

static bool same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = tool_slurp(a, &la), *y = tool_slurp(b, &lb);
    bool same = la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return same;
}

/* The server's weights and optimizer state (momentum) are in rank 0's
 * checkpoints and --resume restores them: with one worker the server
 * applies the pushes in a fixed order, the same updates as the local store
 * of one process, so 1 epoch + resume + 1 epoch ends bit-identical to 2
 * epochs of the local store, weights and optimizer state, which needs the
 * server's momentum restored. The dry run shows the plan. */
START_TEST(resume_restores_the_server)
{
    char conf[400], args[4096], *out, *err, a[400], b[400];
    snprintf(conf, sizeof(conf), "%s/mlp.conf", tmp);
    write_mlp(conf, 192, "");
    const char *tool = mxtrain();
    snprintf(args, sizeof(args), "%s fit.model_prefix=%s/a/m", conf, tmp);
    ck_assert_msg(tool_run(tool, args, tmp, NULL, NULL, &err) == 0, "%s", err);
    free(err);
    snprintf(args, sizeof(args), "%s %s fit.kvstore=dist_async fit.num_epoch=1 fit.model_prefix=%s/b/m", tool, conf, tmp);
    ck_assert_msg(mpirun(1, 60, args, &out) == 0, "%s", tail(out));
    free(out);
    snprintf(args, sizeof(args), "%s %s fit.kvstore=dist_async fit.model_prefix=%s/b/m --resume", tool, conf, tmp);
    ck_assert_msg(mpirun(1, 60, args, &out) == 0, "%s", tail(out));
    ck_assert_msg(strstr(out, "Resumed from epoch 1") && !strstr(out, "Epoch[0] Train"), "%s", tail(out));
    free(out);
    snprintf(a, sizeof(a), "%s/a/m-0002.params", tmp);
    snprintf(b, sizeof(b), "%s/b/m-0002.params", tmp);
    ck_assert_msg(same_file(a, b), "resumed: weights differ from the uninterrupted run");
    snprintf(a, sizeof(a), "%s/a/m-0002.states", tmp);
    snprintf(b, sizeof(b), "%s/b/m-0002.states", tmp);
    ck_assert_msg(same_file(a, b), "resumed: optimizer states differ from the uninterrupted run");

    snprintf(args, sizeof(args), "%s %s fit.kvstore=dist_async --dry-run", tool, conf);
    ck_assert_msg(mpirun(2, 60, args, &out) == 0, "%s", tail(out));
    ck_assert_msg(strstr(out, "under mpirun: 2 ranks on 1 hosts, kvstore dist_async") &&
                      strstr(out, "parameter server: 1 server (a thread of rank 0, which also trains) holds all 4 keys") &&
                      strstr(out, "per step, each rank: 4 pushes"),
                  "%s", tail(out));
    free(out);
}
END_TEST

/* A rank that stops (SIGSTOP) ends the job instead of hanging it, named
 * as not answering. Rank 0, the server: the other worker's call gets no
 * answer within the stall timeout. Rank 1, a worker only: no call waits
 * for it, so the server's rank finds it at the next collective (the
 * progress line's, every disp_batches batches) after the stall timeout.
 * The timeout is short (1 s; 2 s in the sanitizer builds, where a busy
 * rank may take longer to answer): nothing else in this small run waits
 * that long. */
#define STALL_S (TOOL_SANITIZED ? 2 : 1)
static void stopped_rank_ends_the_job(int stopped)
{
    char conf[400], *out;
    snprintf(conf, sizeof(conf), "%s/mlp.conf", tmp);
    write_mlp(conf, 192, "");
    /* Each rank writes its pid, so the test can stop one itself, once
     * training runs: rank 0 logs batch 5 after the progress line's
     * collective with rank 1 (stopped inside MPI_Init, it would hang its
     * peer there: MPI's start-up has no stall detection). */
    char cmd[8192], log[400];
    snprintf(log, sizeof(log), "%s/stop%d.log", tmp, stopped);
    skip_leak_check();
    snprintf(cmd, sizeof(cmd),
             "timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader "
             "--mca oob_tcp_if_include lo sh -c 'echo $$ >%s/pid.$OMPI_COMM_WORLD_RANK; exec %s %s "
             "fit.kvstore=dist_async fit.num_epoch=100000 fit.stall_timeout=%d' >%s 2>&1 & "
             "for i in $(seq 600); do grep -q \"Epoch.0. Batch\" %s && break; sleep 0.05; done; "
             "kill -STOP $(cat %s/pid.%d); wait $!",
             tmp, mxtrain(), conf, STALL_S, log, log, tmp, stopped);
    double t0 = mx_time_seconds();
    int st = system(cmd);
    double took = mx_time_seconds() - t0;
    ck_assert(WIFEXITED(st));
    st = WEXITSTATUS(st);
    out = tool_slurp(log, NULL);
    ck_assert_msg(st != 0 && st != 124, "rank %d stopped: exit %d:\n%s", stopped, st, tail(out));
    /* A call, the send of its request, or a progress line's collective
     * waited past the timeout; the other rank asked the stopped one,
     * which did not answer. */
    char stalled[64], who[32];
    snprintf(stalled, sizeof(stalled), "(stall_timeout_s %d)", STALL_S);
    snprintf(who, sizeof(who), "rank %d on ", stopped);
    ck_assert_msg(strstr(out, stalled) && strstr(out, who) && strstr(out, "did not answer within"),
                  "rank %d stopped:\n%s", stopped, tail(out));
    ck_assert_msg(took < 30, "rank %d stopped: took %.1f s", stopped, took);
    free(out);
}

START_TEST(stopped_server_ends_the_job)
{
    stopped_rank_ends_the_job(0);
}
END_TEST

START_TEST(stopped_worker_ends_the_job)
{
    stopped_rank_ends_the_job(1);
}
END_TEST

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
    tool_asan_whole_stacks(); /* Open MPI leak suppressions need whole stacks */
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    if (n <= 0) {
        perror("test_dist_async: /proc/self/exe");
        return EXIT_FAILURE;
    }
    self_exe[n] = '\0';
    Suite *s = suite_create("dist_async");
    TCase *tc = tcase_create("store");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, pushes_of_two_ranks_are_each_applied);
    suite_add_tcase(s, tc);
    tc = tcase_create("mxtrain");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, resume_restores_the_server);
    tcase_add_test(tc, stopped_server_ends_the_job);
    tcase_add_test(tc, stopped_worker_ends_the_job);
    suite_add_tcase(s, tc);
    tc = tcase_create("lenet");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, lenet_async_is_within_2_points_of_sync);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
