/*
 * test_profile.c - the timeline (lib/profile, fit.profile): the overlap of
 * communication and computation measured on events whose answer is known;
 * the Chrome trace of a small training run read back with lib/json (every
 * layer's forward and backward in the profiled batches only, tracks whose
 * events never overlap, in time order, the optimizer's updates with their
 * bytes); and under mpirun (2 ranks,
 * dist_sync) a file per rank tagged with its rank, holding the MPI
 * thread's collectives with their bytes, and the overlap line; under
 * dist_async, the pushes, pulls, calls and the server's requests.
 */
#include "json/json.h"
#include "profile/profile.h"
#include "support/tooltest.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char bin[512], tmp[256];

static void setup(void)
{
    const char *build = getenv("MX_TEST_BUILD");
    snprintf(bin, sizeof(bin), "%s/bin/mxtrain", build && *build ? build : "build");
    tool_tmp_make(tmp, sizeof(tmp), "mx-profile");
}

static void teardown(void) { tool_tmp_remove(tmp); }

#define MS 1000000LL

typedef struct recorder {
    mx_profiler *p;
    mx_profile_cat cat;
    int64_t a, b; /* two events: [a, a+10ms) and [b, b+10ms) */
} recorder;

static void *record_two(void *arg)
{
    recorder *r = arg;
    mx_profile_event e = {.name = r->cat == MX_PROFILE_COMM ? "allreduce \"x\"" : "conv1 (Convolution) fwd",
                          .cat = r->cat, .start_ns = r->a, .end_ns = r->a + 10 * MS, .bytes = 4096};
    mx_profiler_record(r->p, &e, NULL, NULL);
    e.start_ns = r->b;
    e.end_ns = r->b + 10 * MS;
    mx_profiler_record(r->p, &e, NULL, NULL);
    return NULL;
}

/* Computation on two threads: [0,10) [20,30) and [5,15) [40,50) ms, so
 * computation runs during [0,15) [20,30) [40,50); communication [10,20)
 * and [25,35): hidden [10,15) and [25,30), 10 of 20 ms. */
START_TEST(overlap_of_known_events)
{
    mx_profiler *p;
    ck_assert_int_eq(mx_profiler_create(3, "rank 3", &p), MX_OK);
    recorder before = {p, MX_PROFILE_COMPUTE, 0, 20 * MS};
    record_two(&before);
    mx_profile_summary s;
    ck_assert_int_eq(mx_profiler_summary(p, &s), MX_OK);
    ck_assert_int_eq(s.events, 0); /* inactive: nothing recorded */
    mx_profiler_set_active(p, true);
    recorder r[3] = {{p, MX_PROFILE_COMPUTE, 0, 20 * MS},
                     {p, MX_PROFILE_COMPUTE, 5 * MS, 40 * MS},
                     {p, MX_PROFILE_COMM, 10 * MS, 25 * MS}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, record_two, &r[i]), 0);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    mx_profile_event io = {.name = "kvstore allreduce", .cat = MX_PROFILE_IO, .start_ns = 0, .end_ns = 60 * MS};
    mx_profiler_record_on(p, mx_profiler_shared_track(p, "cpu(0) io async ops"), &io);
    ck_assert_int_eq(mx_profiler_summary(p, &s), MX_OK);
    ck_assert_int_eq(s.events, 7);
    ck_assert_int_eq(s.dropped, 0);
    ck_assert_int_eq(s.comm_ns, 20 * MS);
    ck_assert_int_eq(s.overlap_ns, 10 * MS);

    /* The file: valid JSON, 4 tracks named, pid 3, names escaped. */
    char path[400];
    snprintf(path, sizeof(path), "%s/t.json", tmp);
    ck_assert_int_eq(mx_profiler_write(p, path), MX_OK);
    size_t len;
    char *text = tool_slurp(path, &len);
    mx_json *doc;
    ck_assert_msg(mx_json_parse(text, len, &doc) == MX_OK, "%s", mx_last_error());
    const mx_json *ev = mx_json_get(doc, "traceEvents");
    ck_assert_ptr_nonnull(ev);
    int threads = 0, x = 0, escaped = 0;
    for (int i = 0; i < ev->count; i++) {
        const mx_json *e = ev->items[i];
        ck_assert_int_eq((int)mx_json_get(e, "pid")->number, 3);
        const char *ph = mx_json_get(e, "ph")->string, *name = mx_json_get(e, "name")->string;
        if (!strcmp(ph, "M") && !strcmp(name, "thread_name")) threads++;
        if (!strcmp(ph, "X")) {
            x++;
            if (!strcmp(name, "allreduce \"x\"")) {
                escaped++;
                ck_assert_str_eq(mx_json_get(e, "cat")->string, "comm");
                ck_assert_int_eq((int)mx_json_get(mx_json_get(e, "args"), "bytes")->number, 4096);
                ck_assert_int_eq((int)mx_json_get(e, "dur")->number, 10000); /* microseconds */
            }
        }
    }
    ck_assert_int_eq(threads, 4);
    ck_assert_int_eq(x, 7);
    ck_assert_int_eq(escaped, 2);
    mx_json_free(doc);
    free(text);
    snprintf(path, sizeof(path), "%s/no/such/dir/t.json", tmp);
    ck_assert_int_eq(mx_profiler_write(p, path), MX_ERR_IO);
    mx_profiler_free(p);
}
END_TEST

/* ------------------------------------------------------------ mxtrain */

#define ROWS 96
#define FEATURES 6

/* A CSV of ROWS rows and a small MLP of batch 8 (12 batches an epoch). */
static void write_run(const char *conf)
{
    char d[400], l[400];
    snprintf(d, sizeof(d), "%s/d.csv", tmp);
    snprintf(l, sizeof(l), "%s/l.csv", tmp);
    FILE *fd = fopen(d, "w"), *fl = fopen(l, "w"), *fc = fopen(conf, "w");
    ck_assert(fd && fl && fc);
    for (int r = 0; r < ROWS; r++) {
        for (int f = 0; f < FEATURES; f++) fprintf(fd, "%s%g", f ? "," : "", (double)((r * 7 + f * 3) % 11) / 11.0);
        fprintf(fd, "\n");
        fprintf(fl, "%d\n", r % 3);
    }
    fprintf(fc,
            "[layer fc1]\nop = FullyConnected\nnum_hidden = 16\n[layer relu1]\nop = relu\n"
            "[layer fc2]\nop = FullyConnected\nnum_hidden = 3\n[layer softmax]\nop = SoftmaxOutput\n"
            "[train]\niter = csv\ndata_csv = %s\nlabel_csv = %s\ndata_shape = %d\nbatch_size = 8\n"
            "[optimizer]\ntype = sgd\nlr = 0.1\nmomentum = 0.9\n"
            "[fit]\nnum_epoch = 2\ndisp_batches = 4\n",
            d, l, FEATURES);
    fclose(fd);
    fclose(fl);
    fclose(fc);
}

/* relu1 runs inside fc1 (operation folding). */
static const char *const layers[] = {"fc1+relu1 (FullyConnected+Activation)", "fc2 (FullyConnected)",
                                     "softmax (SoftmaxOutput)"};
#define N_LAYERS 3

/* Checks one trace file of `batches` profiled batches: pid, every layer's
 * fwd and bwd exactly `batches` times, tracks in time order without
 * overlap. Returns the communication events (cat comm) seen. */
static int check_trace(const char *path, int pid, int batches)
{
    size_t len;
    char *text = tool_slurp(path, &len);
    mx_json *doc;
    ck_assert_msg(mx_json_parse(text, len, &doc) == MX_OK, "%s: %s", path, mx_last_error());
    const mx_json *ev = mx_json_get(doc, "traceEvents");
    ck_assert_ptr_nonnull(ev);
    int count[N_LAYERS][2] = {{0}}, comm = 0, kv = 0, updates = 0;
    enum { MAX_TID = 64 };
    double last_end[MAX_TID];
    for (int t = 0; t < MAX_TID; t++) last_end[t] = -1;
    for (int i = 0; i < ev->count; i++) {
        const mx_json *e = ev->items[i];
        ck_assert_int_eq((int)mx_json_get(e, "pid")->number, pid);
        if (strcmp(mx_json_get(e, "ph")->string, "X")) continue;
        const char *name = mx_json_get(e, "name")->string, *cat = mx_json_get(e, "cat")->string;
        int tid = (int)mx_json_get(e, "tid")->number;
        double ts = mx_json_get(e, "ts")->number, dur = mx_json_get(e, "dur")->number;
        ck_assert_int_lt(tid, MAX_TID);
        ck_assert(dur >= 0);
        /* In time order per track, one after the other (the writer rounds
         * to nanoseconds). */
        ck_assert_msg(ts >= last_end[tid] - 0.0015, "%s: tid %d: '%s' at %.3f starts before %.3f", path, tid, name, ts,
                      last_end[tid]);
        last_end[tid] = ts + dur;
        for (int k = 0; k < N_LAYERS; k++) {
            size_t n = strlen(layers[k]);
            if (strncmp(name, layers[k], n)) continue;
            ck_assert_str_eq(cat, "compute");
            if (!strcmp(name + n, " fwd")) count[k][0]++;
            else if (!strcmp(name + n, " bwd")) count[k][1]++;
            else ck_abort_msg("%s: unexpected event '%s'", path, name);
        }
        if (!strcmp(cat, "comm")) {
            comm++;
            ck_assert_msg(strstr(name, "allreduce") || strstr(name, "allgather") || strstr(name, "broadcast") ||
                              strstr(name, "barrier"),
                          "%s", name);
            if (strstr(name, "allreduce of key")) ck_assert(mx_json_get(mx_json_get(e, "args"), "bytes")->number > 0);
        }
        if (!strncmp(name, "sgd update of key ", 18)) {
            updates++;
            ck_assert(mx_json_get(mx_json_get(e, "args"), "bytes")->number > 0);
        }
        if (strstr(name, "kvstore allreduce key")) {
            kv++;
            ck_assert_str_eq(cat, "io");
            ck_assert(mx_json_get(mx_json_get(e, "args"), "bytes")->number > 0);
        }
    }
    for (int k = 0; k < N_LAYERS; k++)
        for (int d = 0; d < 2; d++)
            ck_assert_msg(count[k][d] == batches, "%s: '%s %s' %d times, profiled batches %d", path, layers[k],
                          d ? "bwd" : "fwd", count[k][d], batches);
    /* 4 learnable parameters: fc1 and fc2's weight and bias. */
    ck_assert_msg(updates == 4 * batches, "%s: %d updates for %d batches", path, updates, batches);
    if (comm) ck_assert_msg(kv == batches, "%s: %d kvstore allreduce ops for %d batches", path, kv, batches);
    mx_json_free(doc);
    free(text);
    return comm;
}

/* Batches 3-6 of epoch 0 and, with "14-15", batches 2-3 of epoch 1. */
START_TEST(training_run_writes_the_batches_asked_for)
{
    char conf[400], cmd[1600], path[400], *err;
    snprintf(conf, sizeof(conf), "%s/mlp.conf", tmp);
    write_run(conf);
    snprintf(path, sizeof(path), "%s/p.json", tmp);
    snprintf(cmd, sizeof(cmd), "%s fit.profile=%s fit.profile_batches=3-6", conf, path);
    ck_assert_msg(tool_run(bin, cmd, tmp, NULL, NULL, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "Profile: ") && strstr(err, "no communication in the profiled batches"), "%s", err);
    check_trace(path, 0, 4);
    free(err);
    snprintf(cmd, sizeof(cmd), "%s fit.profile=%s fit.profile_batches=14-15", conf, path);
    ck_assert_msg(tool_run(bin, cmd, tmp, NULL, NULL, &err) == 0, "%s", err);
    check_trace(path, 0, 2);
    free(err);
    /* "N": the first N batches; a window past the run says so. */
    snprintf(cmd, sizeof(cmd), "%s fit.profile=%s fit.profile_batches=1", conf, path);
    ck_assert_msg(tool_run(bin, cmd, tmp, NULL, NULL, &err) == 0, "%s", err);
    check_trace(path, 0, 1);
    free(err);
    snprintf(cmd, sizeof(cmd), "%s fit.profile=%s/late.json fit.profile_batches=30-40", conf, tmp);
    ck_assert_msg(tool_run(bin, cmd, tmp, NULL, NULL, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "the run ended before batch 30: nothing recorded"), "%s", err);
    free(err);
    /* Bad values are config errors. */
    snprintf(cmd, sizeof(cmd), "%s fit.profile=%s fit.profile_batches=6-3", conf, path);
    ck_assert_int_eq(tool_run(bin, cmd, tmp, NULL, NULL, &err), 2);
    ck_assert_msg(strstr(err, "[fit] profile_batches: bad value '6-3'"), "%s", err);
    free(err);
    snprintf(cmd, sizeof(cmd), "%s fit.profile=%s/none/p.json", conf, tmp);
    ck_assert_int_eq(tool_run(bin, cmd, tmp, NULL, NULL, &err), 2);
    ck_assert_msg(strstr(err, "[fit] profile: cannot write"), "%s", err);
    free(err);
}
END_TEST

/* The end of a long output, for failure messages (Check limits them). */
static const char *tail(const char *out)
{
    size_t n = strlen(out);
    return n > 3000 ? out + n - 3000 : out;
}

/* Two ranks, dist_sync: a file per rank, pid = rank, the MPI thread's
 * collectives, and the fraction of communication hidden. */
START_TEST(mpirun_ranks_and_overlap)
{
    char conf[400], cmd[2000], out_path[400], path[400];
    snprintf(conf, sizeof(conf), "%s/mlp.conf", tmp);
    write_run(conf);
    snprintf(out_path, sizeof(out_path), "%s/out.txt", tmp);
    snprintf(cmd, sizeof(cmd),
             "timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 %s %s "
             "fit.kvstore=dist_sync fit.num_epoch=1 fit.profile=%s/p.json fit.profile_batches=1-3 >%s 2>&1",
             bin, conf, tmp, out_path);
    int st = system(cmd);
    char *out = tool_slurp(out_path, NULL);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", tail(out));
    const char *line = strstr(out, "Profile: communication hidden behind computation: ");
    ck_assert_msg(line, "%s", tail(out));
    double f = atof(line + strlen("Profile: communication hidden behind computation: "));
    ck_assert_msg(f >= 0 && f <= 1, "%s", line);
    ck_assert_msg(strstr(line, "(rank 0 ") && strstr(line, ", rank 1 "), "%s", line);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof(path), "%s/p.rank%d.json", tmp, r);
        ck_assert_msg(check_trace(path, r, 3) >= 3, "%s: no communication events", path);
    }
    free(out);
}
END_TEST

/* Counts a trace's complete events whose name starts with `prefix`; each
 * must have category `cat` and bytes > 0 (the events of dist_async's
 * pushes, pulls, calls and server). */
static int count_named(const mx_json *ev, const char *prefix, const char *cat)
{
    int n = 0;
    for (int i = 0; i < ev->count; i++) {
        const mx_json *e = ev->items[i];
        const char *name = mx_json_get(e, "name")->string;
        if (strcmp(mx_json_get(e, "ph")->string, "X") || strncmp(name, prefix, strlen(prefix))) continue;
        n++;
        ck_assert_msg(!strcmp(mx_json_get(e, "cat")->string, cat), "'%s': category %s, want %s", name,
                      mx_json_get(e, "cat")->string, cat);
        ck_assert_msg(mx_json_get(mx_json_get(e, "args"), "bytes")->number > 0, "'%s': no bytes", name);
    }
    return n;
}

/* Two ranks, dist_async: each rank's pushes of the 4 keys as I/O ops and
 * lib/comm's calls to the server as communication, every profiled batch,
 * and no pull op or call (each push's answer holds the weight); rank 0's
 * file also holds the server's requests (from both ranks: at least its
 * own, recorded before their answers), each with the update it applies
 * on the server thread (no engine op). */
START_TEST(mpirun_dist_async_calls_and_server)
{
    char conf[400], cmd[2000], out_path[400], path[400];
    snprintf(conf, sizeof(conf), "%s/mlp.conf", tmp);
    write_run(conf);
    snprintf(out_path, sizeof(out_path), "%s/out.txt", tmp);
    snprintf(cmd, sizeof(cmd),
             "timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 %s %s "
             "fit.kvstore=dist_async fit.num_epoch=1 fit.profile=%s/p.json fit.profile_batches=1-3 >%s 2>&1",
             bin, conf, tmp, out_path);
    int st = system(cmd);
    char *out = tool_slurp(out_path, NULL);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", tail(out));
    ck_assert_msg(strstr(out, "Profile: communication hidden behind computation: "), "%s", tail(out));
    free(out);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof(path), "%s/p.rank%d.json", tmp, r);
        size_t len;
        char *text = tool_slurp(path, &len);
        mx_json *doc;
        ck_assert_msg(mx_json_parse(text, len, &doc) == MX_OK, "%s: %s", path, mx_last_error());
        const mx_json *ev = mx_json_get(doc, "traceEvents");
        ck_assert_ptr_nonnull(ev);
        /* 3 batches of 4 keys; the window opens after a wait_all, so
         * every call is recorded whole. */
        ck_assert_int_eq(count_named(ev, "kvstore dist_async push of key ", "io"), 12);
        ck_assert_int_eq(count_named(ev, "kvstore dist_async pull of key ", "io"), 0);
        ck_assert_int_eq(count_named(ev, "call push of key ", "comm"), 12);
        ck_assert_int_eq(count_named(ev, "call pull of key ", "comm"), 0);
        int served = count_named(ev, "server push of key ", "io");
        if (r == 0) ck_assert_msg(served >= 12, "%s: %d pushes applied", path, served);
        else ck_assert_int_eq(served, 0);
        ck_assert_int_eq(count_named(ev, "server pull of key ", "io"), 0);
        ck_assert_int_eq(count_named(ev, "sgd update of key ", "compute"), 0);
        mx_json_free(doc);
        free(text);
    }
}
END_TEST

int main(void)
{
    tool_asan_whole_stacks(); /* Open MPI leak suppressions need whole stacks */
    Suite *s = suite_create("profile");
    TCase *tc = tcase_create("profile");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, overlap_of_known_events);
    tcase_add_test(tc, training_run_writes_the_batches_asked_for);
    tcase_add_test(tc, mpirun_ranks_and_overlap);
    tcase_add_test(tc, mpirun_dist_async_calls_and_server);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
