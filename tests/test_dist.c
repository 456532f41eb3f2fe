/*
 * test_dist.c - `mpirun mxtrain` end to end (the dist_sync and two-level
 * dist_sync_device stores, lib/comm): N ranks of batch b train like one
 * process of batch N*b over the same samples, on one host and on two
 * "hosts" made of network namespaces (tests/mpi/netns-hosts.sh); ranks
 * that disagree on the config, a rank that dies and a rank that stalls end
 * the job with their message instead of hanging.
 *
 * The data are a CSV written here: each rank reads its own contiguous part
 * (num_parts = ranks, part_index = rank); the single process reads a copy
 * of the rows reordered so that its batch i holds exactly the rows of the
 * ranks' batches i. CI runs this as root: mpirun needs --allow-run-as-root
 * --oversubscribe.
 */
#include "checkpoint/checkpoint.h"
#include "support/tooltest.h"

#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FEATURES 12
#define CLASSES 4

static char bin[512], tmp[256];

static void setup(void)
{
    const char *build = getenv("MX_TEST_BUILD");
    snprintf(bin, sizeof(bin), "%s/bin/mxtrain", build && *build ? build : "build");
    tool_tmp_make(tmp, sizeof(tmp), "mx-dist");
}

static void teardown(void) { tool_tmp_remove(tmp); }

static uint64_t rng = 88172645463325252ull;
static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1.0p-53;
}

/* rows x FEATURES data and labels; rows of class c lean towards feature c. */
static void make_data(int rows, float *x, int *y)
{
    for (int r = 0; r < rows; r++) {
        y[r] = (int)(uniform() * CLASSES);
        for (int f = 0; f < FEATURES; f++) x[r * FEATURES + f] = (float)(uniform() * 2 - 1 + (f == y[r] ? 1.5 : 0));
    }
}

static void write_csv(const char *data_path, const char *label_path, const float *x, const int *y, const int *order,
                      int rows)
{
    FILE *d = fopen(data_path, "w"), *l = fopen(label_path, "w");
    ck_assert(d && l);
    for (int i = 0; i < rows; i++) {
        int r = order[i];
        for (int f = 0; f < FEATURES; f++) fprintf(d, "%s%.9g", f ? "," : "", x[r * FEATURES + f]);
        fprintf(d, "\n");
        fprintf(l, "%d\n", y[r]);
    }
    fclose(d);
    fclose(l);
}

/* A small MLP on a CSV, with momentum: its updates need exact sums. */
static void write_config(const char *path, const char *data, const char *label, int batch)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "[layer fc1]\nop = FullyConnected\nnum_hidden = 16\n[layer relu]\nop = relu\n"
            "[layer fc2]\nop = FullyConnected\nnum_hidden = %d\n[layer softmax]\nop = SoftmaxOutput\n"
            "[train]\niter = csv\ndata_csv = %s\nlabel_csv = %s\ndata_shape = %d\nbatch_size = %d\n"
            "[optimizer]\ntype = sgd\nlr = 0.1\nmomentum = 0.9\nwd = 0.0001\n"
            "[fit]\nnum_epoch = 2\ndisp_batches = 5\nmetric = acc, ce\n",
            CLASSES, data, label, FEATURES, batch);
    fclose(f);
}

/* Runs `cmd` (a shell command) with a time limit; stderr+stdout captured. */
static int run_shell(const char *cmd, int limit_s, char **out)
{
    char full[8192], path[400];
    snprintf(path, sizeof(path), "%s/out.txt", tmp);
    snprintf(full, sizeof(full), "timeout -k 5 %d sh -c '%s' >'%s' 2>&1", limit_s, cmd, path);
    int st = system(full);
    *out = tool_slurp(path, NULL);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* The end of a long output, for failure messages (Check limits them). */
static const char *tail(const char *out)
{
    size_t n = strlen(out);
    return n > 3000 ? out + n - 3000 : out;
}

static const char *mpirun(void) { return "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"; }

/* weights of a .params file */
typedef struct weights {
    mx_runtime *rt;
    mx_ndarray_list args, aux;
} weights;

static void load(const char *path, weights *w)
{
    ck_assert_int_eq(mx_runtime_create(NULL, &w->rt), MX_OK);
    ck_assert_msg(mx_checkpoint_load_file(w->rt, path, &w->args, &w->aux, NULL) == MX_OK, "%s", mx_last_error());
}

static void unload(weights *w)
{
    mx_ndarray_list_free(&w->args);
    mx_ndarray_list_free(&w->aux);
    mx_runtime_free(w->rt);
}

/* max |a - b| / max(1, max |a|) over every array of two files. */
static double max_rel_diff(const weights *a, const weights *b)
{
    ck_assert_int_eq(a->args.count, b->args.count);
    double worst = 0;
    for (int i = 0; i < a->args.count; i++) {
        int k = 0;
        while (k < b->args.count && strcmp(a->args.names[i], b->args.names[k])) k++;
        ck_assert_int_lt(k, b->args.count);
        int64_t n = mx_ndarray_size(a->args.arrays[i]);
        ck_assert_int_eq(n, mx_ndarray_size(b->args.arrays[k]));
        float *va = malloc(sizeof(float) * (size_t)n), *vb = malloc(sizeof(float) * (size_t)n);
        ck_assert_int_eq(mx_ndarray_to_host(a->args.arrays[i], va, sizeof(float) * (size_t)n), MX_OK);
        ck_assert_int_eq(mx_ndarray_to_host(b->args.arrays[k], vb, sizeof(float) * (size_t)n), MX_OK);
        double diff = 0, mag = 1;
        for (int64_t j = 0; j < n; j++) {
            diff = fmax(diff, fabs((double)va[j] - vb[j]));
            mag = fmax(mag, fabs((double)va[j]));
        }
        worst = fmax(worst, diff / mag);
        free(va);
        free(vb);
    }
    return worst;
}

/* The data for `ranks` ranks of batch b over `steps` steps an epoch: the
 * ranks' file (parts in order) and the single process's (batch i = the
 * ranks' batches i). Returns the config paths. */
static void prepare(int ranks, int b, int steps, char *dist_conf, char *single_conf, size_t size)
{
    int rows = ranks * b * steps;
    float *x = malloc(sizeof(float) * (size_t)rows * FEATURES);
    int *y = malloc(sizeof(int) * (size_t)rows), *order = malloc(sizeof(int) * (size_t)rows);
    make_data(rows, x, y);
    char d[400], l[400], sd[400], sl[400];
    snprintf(d, sizeof(d), "%s/d%d.csv", tmp, ranks);
    snprintf(l, sizeof(l), "%s/l%d.csv", tmp, ranks);
    snprintf(sd, sizeof(sd), "%s/sd%d.csv", tmp, ranks);
    snprintf(sl, sizeof(sl), "%s/sl%d.csv", tmp, ranks);
    for (int i = 0; i < rows; i++) order[i] = i;
    write_csv(d, l, x, y, order, rows);
    /* Rank r's part is rows [r*P, (r+1)*P), P = b*steps: its batch i is
     * rows r*P + i*b ..; the single batch i is those of rank 0, 1, ... */
    int part = b * steps, k = 0;
    for (int i = 0; i < steps; i++)
        for (int r = 0; r < ranks; r++)
            for (int j = 0; j < b; j++) order[k++] = r * part + i * b + j;
    write_csv(sd, sl, x, y, order, rows);
    snprintf(dist_conf, size, "%s/dist%d.conf", tmp, ranks);
    snprintf(single_conf, size, "%s/single%d.conf", tmp, ranks);
    write_config(dist_conf, d, l, b);
    write_config(single_conf, sd, sl, b * ranks);
    free(x);
    free(y);
    free(order);
}

static void check_equivalent(int ranks, const char *kvstore, const char *launcher)
{
    char dist[400], single[400], cmd[4096], *out;
    prepare(ranks, 8 / (ranks / 2 ? ranks / 2 : 1), 12, dist, single, sizeof(dist));
    snprintf(cmd, sizeof(cmd), "%s fit.model_prefix=%s/one/m", single, tmp);
    char *err;
    ck_assert_msg(tool_run(bin, cmd, tmp, NULL, NULL, &err) == 0, "%s", err);
    free(err);
    snprintf(cmd, sizeof(cmd), "%s %s fit.kvstore=%s fit.model_prefix=%s/%s%d/m", launcher, dist, kvstore, tmp, kvstore,
             ranks);
    int st = run_shell(cmd, 240, &out);
    if (strstr(out, "SKIPPED:")) {
        printf("%s\n", out);
        free(out);
        return;
    }
    ck_assert_msg(st == 0, "%s exited %d:\n%s", cmd, st, tail(out));
    /* One log: rank 0's, with metrics over the global batch. */
    ck_assert_msg(strstr(out, "Epoch[1] Train-accuracy="), "%s", tail(out));
    const char *first = strstr(out, "Epoch[0] Time cost=");
    ck_assert_msg(first && !strstr(first + 1, "Epoch[0] Time cost="), "more than one rank logs:\n%s", tail(out));
    free(out);
    char pa[400], pb[400];
    snprintf(pa, sizeof(pa), "%s/one/m-0002.params", tmp);
    snprintf(pb, sizeof(pb), "%s/%s%d/m-0002.params", tmp, kvstore, ranks);
    weights a, b;
    load(pa, &a);
    load(pb, &b);
    double d = max_rel_diff(&a, &b);
    ck_assert_msg(d < 1e-5, "%d ranks (%s) differ from one process of the global batch by %g", ranks, kvstore, d);
    unload(&a);
    unload(&b);
}

/* --dry-run under mpirun shows what a step sends; --resume under mpirun
 * continues every rank from rank 0's checkpoint. */
START_TEST(dry_run_plan_and_resume)
{
    char dist[400], single[400], cmd[4096], *out, pa[400], pb[400];
    prepare(2, 8, 12, dist, single, sizeof(dist));
    snprintf(cmd, sizeof(cmd), "%s -np 2 %s %s fit.kvstore=dist_sync_device --dry-run", mpirun(), bin, dist);
    int st = run_shell(cmd, 60, &out);
    ck_assert_msg(st == 0, "%s", tail(out));
    ck_assert_msg(strstr(out, "under mpirun: 2 ranks on 1 hosts, kvstore dist_sync_device") &&
                      strstr(out, "(4 parameters) summed over the ranks in 1 buckets"),
                  "%s", tail(out));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s -np 2 %s %s fit.kvstore=dist_sync fit.model_prefix=%s/a/m", mpirun(), bin, dist, tmp);
    ck_assert_msg(run_shell(cmd, 120, &out) == 0, "%s", tail(out));
    free(out);
    /* fit.fusion_bytes = 64: each parameter its own bucket (fc1_bias's 64
     * bytes fill one), one collective each per step on the timeline, and
     * the same weights (2 ranks: each sum is a + b, however packed). */
    snprintf(cmd, sizeof(cmd),
             "%s -np 2 %s %s fit.kvstore=dist_sync fit.fusion_bytes=64 --dry-run && "
             "%s -np 2 %s %s fit.kvstore=dist_sync fit.fusion_bytes=64 fit.model_prefix=%s/f/m fit.profile=%s/f.json "
             "fit.profile_batches=3-3",
             mpirun(), bin, dist, mpirun(), bin, dist, tmp, tmp);
    ck_assert_msg(run_shell(cmd, 120, &out) == 0, "%s", tail(out));
    ck_assert_msg(strstr(out, "(4 parameters) summed over the ranks in 4 buckets of up to 64"), "%s", tail(out));
    free(out);
    snprintf(pa, sizeof(pa), "%s/f.rank0.json", tmp);
    char *trace = tool_slurp(pa, NULL);
    int collectives = 0;
    for (const char *p = trace; (p = strstr(p, "\"allreduce of key")); p++) collectives++;
    free(trace);
    ck_assert_msg(collectives == 4, "%d gradient collectives in one profiled step, want 4 buckets", collectives);
    snprintf(pa, sizeof(pa), "%s/a/m-0002.params", tmp);
    snprintf(pb, sizeof(pb), "%s/f/m-0002.params", tmp);
    size_t la, lb;
    char *a = tool_slurp(pa, &la), *b = tool_slurp(pb, &lb);
    ck_assert_msg(la == lb && !memcmp(a, b, la), "64-byte buckets: weights differ from 1 MiB buckets");
    free(a);
    free(b);

    snprintf(cmd, sizeof(cmd), "%s -np 2 %s %s fit.kvstore=dist_sync fit.num_epoch=1 fit.model_prefix=%s/b/m", mpirun(),
             bin, dist, tmp);
    ck_assert_msg(run_shell(cmd, 120, &out) == 0, "%s", tail(out));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s -np 2 %s %s fit.kvstore=dist_sync fit.model_prefix=%s/b/m --resume", mpirun(), bin,
             dist, tmp);
    ck_assert_msg(run_shell(cmd, 120, &out) == 0, "%s", tail(out));
    ck_assert_msg(strstr(out, "Resumed from epoch 1") && !strstr(out, "Epoch[0] Train"), "%s", tail(out));
    free(out);
    snprintf(pa, sizeof(pa), "%s/a/m-0002.params", tmp);
    snprintf(pb, sizeof(pb), "%s/b/m-0002.params", tmp);
    a = tool_slurp(pa, &la);
    b = tool_slurp(pb, &lb);
    ck_assert_msg(la == lb && !memcmp(a, b, la), "resumed under mpirun: weights differ from the uninterrupted job");
    free(a);
    free(b);

    /* SIGUSR1 to mpirun (it forwards it; SIGINT/SIGTERM kill the job):
     * every rank stops at the same step, rank 0 saves, and --resume ends
     * with the uninterrupted job's weights. */
    snprintf(cmd, sizeof(cmd), "%s -np 2 %s %s fit.kvstore=dist_sync fit.num_epoch=40 fit.model_prefix=%s/c/m", mpirun(),
             bin, dist, tmp);
    ck_assert_msg(run_shell(cmd, 120, &out) == 0, "%s", tail(out));
    free(out);
    char log[400];
    snprintf(log, sizeof(log), "%s/d.log", tmp);
    snprintf(cmd, sizeof(cmd),
             "%s -np 2 %s %s fit.kvstore=dist_sync fit.num_epoch=40 fit.model_prefix=%s/d/m >%s 2>&1 & "
             "for i in $(seq 600); do grep -q \"Epoch\\[2\\]\" %s && break; sleep 0.05; done; pkill -USR1 -x mpirun; wait $!",
             mpirun(), bin, dist, tmp, log, log);
    st = run_shell(cmd, 120, &out);
    free(out);
    out = tool_slurp(log, NULL);
    ck_assert_msg(st == 138 && strstr(out, "mxtrain: stopped by SIGUSR1 at epoch ") && strstr(out, "-interrupted.params"),
                  "exit %d:\n%s", st, tail(out));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s -np 2 %s %s fit.kvstore=dist_sync fit.num_epoch=40 fit.model_prefix=%s/d/m --resume",
             mpirun(), bin, dist, tmp);
    ck_assert_msg(run_shell(cmd, 120, &out) == 0, "%s", tail(out));
    ck_assert_msg(strstr(out, "Resumed from "), "%s", tail(out));
    free(out);
    snprintf(pa, sizeof(pa), "%s/c/m-0040.params", tmp);
    snprintf(pb, sizeof(pb), "%s/d/m-0040.params", tmp);
    a = tool_slurp(pa, &la);
    b = tool_slurp(pb, &lb);
    ck_assert_msg(la == lb && !memcmp(a, b, la), "stopped and resumed under mpirun: weights differ");
    free(a);
    free(b);
}
END_TEST

START_TEST(dist_sync_2_and_4_ranks_equal_one_process)
{
    char launcher[1024];
    snprintf(launcher, sizeof(launcher), "%s -np 2 %s", mpirun(), bin);
    check_equivalent(2, "dist_sync", launcher);
    snprintf(launcher, sizeof(launcher), "%s -np 4 %s", mpirun(), bin);
    check_equivalent(4, "dist_sync", launcher);
    check_equivalent(4, "dist_sync_device", launcher);
}
END_TEST

/* float16 under mpirun: the ranks agree on every update dynamic loss
 * scaling skips (one allgather of their overflow checks), so their sums
 * stay lined up (ranks skipping different steps would desynchronise the
 * collectives and end the job) and their scalers move together. The first
 * updates overflow (loss scale 65536 on sums of 8 samples), so the skips
 * are exercised. */
START_TEST(float16_ranks_skip_together)
{
    char dist[400], single[400], cmd[4096], *out;
    prepare(2, 8, 12, dist, single, sizeof(dist));
    for (int k = 0; k < 2; k++) {
        const char *kv = k ? "dist_sync_device" : "dist_sync";
        snprintf(cmd, sizeof(cmd), "%s -np 2 %s %s fit.kvstore=%s fit.dtype=float16 fit.model_prefix=%s/h%d/m", mpirun(),
                 bin, dist, kv, tmp, k);
        int st = run_shell(cmd, 240, &out);
        ck_assert_msg(st == 0, "%s exited %d:\n%s", kv, st, tail(out));
        ck_assert_msg(strstr(out, "Gradients overflowed at loss scale 65536: update skipped (1 so far)") &&
                          strstr(out, "Epoch[1] loss scale ") && strstr(out, "Epoch[1] Train-accuracy="),
                      "%s:\n%s", kv, tail(out));
        free(out);
    }
}
END_TEST

/* Two hosts of two ranks each (network namespaces): two-level sums equal
 * the flat ones and one process. */
START_TEST(two_hosts_two_levels)
{
    char launcher[600];
    snprintf(launcher, sizeof(launcher), "tests/mpi/netns-hosts.sh %s", bin);
    check_equivalent(4, "dist_sync_device", launcher);
}
END_TEST

START_TEST(faults_end_the_job)
{
    char dist[400], single[400], cmd[4096], *out;
    prepare(2, 4, 40, dist, single, sizeof(dist));
    /* Ranks that disagree on the config (MPMD: other overrides). */
    snprintf(cmd, sizeof(cmd), "%s -np 1 %s %s fit.kvstore=dist_sync : -np 1 %s %s fit.kvstore=dist_sync fit.num_epoch=3",
             mpirun(), bin, dist, bin, dist);
    int st = run_shell(cmd, 60, &out);
    ck_assert_msg(st != 0 && st != 124, "exit %d:\n%s", st, tail(out));
    ck_assert_msg(strstr(out, "the config (file and overrides) differs between ranks"), "%s", tail(out));
    free(out);
    /* A bad row in rank 1's part: that rank names the file and line, and
     * the whole job ends. */
    char bad_conf[400], bad_data[400], line[64];
    snprintf(bad_data, sizeof(bad_data), "%s/d2.csv", tmp);
    FILE *f = fopen(bad_data, "r+");
    ck_assert_ptr_nonnull(f);
    fseek(f, -40, SEEK_END); /* in the last rows: rank 1's part */
    snprintf(line, sizeof(line), "x,not,a,number");
    fwrite(line, 1, strlen(line), f);
    fclose(f);
    snprintf(bad_conf, sizeof(bad_conf), "%s", dist);
    snprintf(cmd, sizeof(cmd), "%s -np 2 %s %s fit.kvstore=dist_sync", mpirun(), bin, bad_conf);
    time_t start = time(NULL);
    st = run_shell(cmd, 90, &out);
    ck_assert_msg(st != 0 && st != 124, "exit %d:\n%s", st, tail(out));
    ck_assert_msg(strstr(out, "mxtrain: rank 1 on ") && strstr(out, "d2.csv:"), "%s", tail(out));
    ck_assert_int_lt(time(NULL) - start, 30);
    free(out);
    prepare(2, 4, 40, dist, single, sizeof(dist)); /* good data again */
    /* A local store under mpirun is refused. */
    snprintf(cmd, sizeof(cmd), "%s -np 2 %s %s", mpirun(), bin, dist);
    st = run_shell(cmd, 60, &out);
    ck_assert_msg(st != 0 && st != 124, "exit %d:\n%s", st, tail(out));
    ck_assert_msg(strstr(out, "[fit] kvstore: 'local' under mpirun would train 2 independent copies"), "%s", tail(out));
    free(out);
    /* One GPU of fit.ctx per rank of a host: a list of several but fewer
     * than the host's ranks is refused on every rank before anything is
     * read (GPUs or not). */
    snprintf(cmd, sizeof(cmd), "%s -np 3 %s %s fit.kvstore=dist_sync fit.ctx=gpu:0-1", mpirun(), bin, dist);
    st = run_shell(cmd, 60, &out);
    ck_assert_msg(st == 2, "exit %d:\n%s", st, tail(out));
    ck_assert_msg(strstr(out, "[fit] ctx: 'gpu:0-1' lists 2 GPU(s) for the 3 ranks on host ") &&
                      strstr(out, "(list at least 3, e.g. gpu:0-2)"),
                  "%s", tail(out));
    free(out);
    /* dist_sync without mpirun. */
    snprintf(cmd, sizeof(cmd), "%s %s fit.kvstore=dist_sync", bin, dist);
    st = run_shell(cmd, 60, &out);
    ck_assert_msg(st == 2, "exit %d:\n%s", st, tail(out));
    ck_assert_msg(strstr(out, "start it with mpirun"), "%s", tail(out));
    free(out);
    /* A rank that stalls (SIGSTOP): the others name it after the stall
     * timeout and the job ends. The job must outlast the 4 s before the
     * signal (a finished job would leave mpirun as the newest match, and
     * stopping that hangs the test), and the pattern must not match this
     * shell's own command line ("[m]xtrain"). */
    snprintf(cmd, sizeof(cmd),
             "%s -np 2 %s %s fit.kvstore=dist_sync fit.num_epoch=1000000 fit.stall_timeout=3 & "
             "sleep 4; pkill -STOP -f \"[m]xtrain %s\" -n; wait $!",
             mpirun(), bin, dist, dist);
    start = time(NULL);
    st = run_shell(cmd, 90, &out);
    ck_assert_msg(st != 0 && st != 124, "exit %d:\n%s", st, tail(out));
    ck_assert_msg(strstr(out, "did not complete") && strstr(out, "rank "), "%s", tail(out));
    ck_assert_int_lt(time(NULL) - start, 60);
    free(out);
    /* A rank killed with SIGKILL ends the job. */
    snprintf(cmd, sizeof(cmd),
             "%s -np 2 %s %s fit.kvstore=dist_sync fit.num_epoch=1000000 & sleep 4; pkill -KILL -f \"[m]xtrain %s\" -n; "
             "wait $!",
             mpirun(), bin, dist, dist);
    start = time(NULL);
    st = run_shell(cmd, 90, &out);
    ck_assert_msg(st != 0 && st != 124, "exit %d:\n%s", st, tail(out));
    ck_assert_int_lt(time(NULL) - start, 40);
    free(out);
}
END_TEST

int main(void)
{
    tool_asan_whole_stacks(); /* Open MPI leak suppressions need whole stacks */
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("mpirun");
    tcase_set_timeout(tc, 900);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, dist_sync_2_and_4_ranks_equal_one_process);
    tcase_add_test(tc, float16_ranks_skip_together);
    tcase_add_test(tc, two_hosts_two_levels);
    tcase_add_test(tc, dry_run_plan_and_resume);
    tcase_add_test(tc, faults_end_the_job);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
