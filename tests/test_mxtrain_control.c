/*
 * test_mxtrain_control.c - mxtrain's run control end to end on
 * Fashion-MNIST subsets: fine-tuning from a checkpoint with frozen layers,
 * gradient accumulation against one large batch, a graceful stop by signal
 * resumed bit for bit, NaN tracing to the layer that went non-finite,
 * validation at its own batch size, contexts the machine lacks, and the
 * synthetic iterator.
 */
#include "checkpoint/checkpoint.h"
#include "device/device.h"
#include "support/tooltest.h"

#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char bin[512], predict_bin[512];
static char tmp[256];

static void setup(void)
{
    const char *build = getenv("MX_TEST_BUILD");
    snprintf(bin, sizeof(bin), "%s/bin/mxtrain", build && *build ? build : "build");
    snprintf(predict_bin, sizeof(predict_bin), "%s/bin/mxpredict", build && *build ? build : "build");
    tool_tmp_make(tmp, sizeof(tmp), "mxtrain-ctl");
}

static void teardown(void) { tool_tmp_remove(tmp); }

static int run_prog(const char *prog, const char *args, char **err) { return tool_run(prog, args, tmp, NULL, NULL, err); }

static int run(const char *args, char **err) { return run_prog(bin, args, err); }

static double last_validation_accuracy(const char *log)
{
    double acc = -1;
    for (const char *p = log; (p = strstr(p, "Validation-accuracy=")); p++) acc = atof(p + strlen("Validation-accuracy="));
    return acc;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A named float32 array of a .params file, as host values. */
typedef struct weights {
    mx_runtime *rt;
    mx_ndarray_list args, aux;
} weights;

static void load_weights(const char *path, weights *w)
{
    ck_assert_int_eq(mx_runtime_create(NULL, &w->rt), MX_OK);
    mx_ndarray_list extra;
    ck_assert_msg(mx_checkpoint_load_file(w->rt, path, &w->args, &w->aux, &extra) == MX_OK, "%s", mx_last_error());
    /* Only training state beside the weights ("state:" names). */
    for (int i = 0; i < extra.count; i++)
        ck_assert_msg(!strncmp(extra.names[i], "state:", 6), "%s: unexpected '%s'", path, extra.names[i]);
    mx_ndarray_list_free(&extra);
}

static void free_weights(weights *w)
{
    mx_ndarray_list_free(&w->args);
    mx_ndarray_list_free(&w->aux);
    mx_runtime_free(w->rt);
}

static float *values_of(const weights *w, const char *name, int64_t *n)
{
    for (int i = 0; i < w->args.count; i++)
        if (!strcmp(w->args.names[i], name)) {
            *n = mx_ndarray_size(w->args.arrays[i]);
            float *v = malloc(sizeof(float) * (size_t)*n);
            ck_assert_int_eq(mx_ndarray_to_host(w->args.arrays[i], v, sizeof(float) * (size_t)*n), MX_OK);
            return v;
        }
    ck_abort_msg("no arg:%s", name);
    return NULL;
}

/* max |a - b| / max(1, max |a|) over one array of two files. */
static double rel_diff(const weights *a, const weights *b, const char *name, bool *identical)
{
    int64_t na, nb;
    float *va = values_of(a, name, &na), *vb = values_of(b, name, &nb);
    ck_assert_int_eq(na, nb);
    double diff = 0, mag = 1;
    for (int64_t i = 0; i < na; i++) {
        diff = fmax(diff, fabs((double)va[i] - vb[i]));
        mag = fmax(mag, fabs((double)va[i]));
    }
    *identical = !memcmp(va, vb, sizeof(float) * (size_t)na);
    free(va);
    free(vb);
    return diff / mag;
}

/* ------------------------------------------------------------ fine-tuning */

#define LENET_SUBSET "train.num_parts=24 val.num_parts=10 fit.disp_batches=1000"

START_TEST(finetune_freezes_and_trains_a_new_head)
{
    char *err, args[2048], src[400], conf[400];
    snprintf(args, sizeof(args), "configs/lenet.conf " LENET_SUBSET " fit.num_epoch=1 fit.model_prefix=%s/src", tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    free(err);
    snprintf(src, sizeof(src), "%s/src-0001.params", tmp);

    /* The same net with a new classifier under another name. */
    char *text = tool_slurp("configs/lenet.conf", NULL);
    char *at = strstr(text, "[layer fc2]");
    ck_assert_ptr_nonnull(at);
    size_t len = strlen(text);
    char *edited = malloc(len + 16);
    snprintf(edited, len + 16, "%.*s[layer head]%s", (int)(at - text), text, at + strlen("[layer fc2]"));
    snprintf(conf, sizeof(conf), "%s/ft.conf", tmp);
    write_text(conf, edited);
    free(edited);
    free(text);

    snprintf(args, sizeof(args),
             "%s " LENET_SUBSET " fit.num_epoch=1 fit.finetune_from=%s 'fit.fixed_params=conv*' fit.model_prefix=%s/ft",
             conf, src, tmp);
    char dry[2200];
    snprintf(dry, sizeof(dry), "%s --dry-run", args);
    ck_assert_msg(run(dry, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "  initialized (2): head_weight, head_bias"), "%s", err);
    ck_assert_msg(strstr(err, "  from the file (4): conv1_weight, conv1_bias, conv2_weight, conv2_bias, fc1_weight") ||
                      strstr(err, "  from the file (6): conv1_weight, conv1_bias, conv2_weight, conv2_bias, fc1_weight, "
                                  "fc1_bias"),
                  "%s", err);
    ck_assert_msg(strstr(err, "frozen by fit.fixed_params (4, no gradient computed or applied): conv1_weight, "
                              "conv1_bias, conv2_weight, conv2_bias"),
                  "%s", err);
    free(err);

    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "Fine-tuning from ") && strstr(err, ": 6 arrays loaded, 2 initialized (head_weight, "
                                                                   "head_bias), 2 in the file not used"),
                  "%s", err);
    double acc = last_validation_accuracy(err);
    ck_assert_msg(acc >= 0.5, "validation accuracy %.4f of the fine-tuned head\n%s", acc, err);
    free(err);

    char ft[400];
    snprintf(ft, sizeof(ft), "%s/ft-0001.params", tmp);
    weights a, b;
    load_weights(src, &a);
    load_weights(ft, &b);
    const char *frozen[] = {"conv1_weight", "conv1_bias", "conv2_weight", "conv2_bias"};
    for (int i = 0; i < 4; i++) {
        bool same;
        rel_diff(&a, &b, frozen[i], &same);
        ck_assert_msg(same, "%s changed although frozen", frozen[i]);
    }
    bool same;
    ck_assert_double_gt(rel_diff(&a, &b, "fc1_weight", &same), 0);
    ck_assert_msg(!same, "fc1_weight was not trained");
    int64_t n;
    free(values_of(&b, "head_weight", &n));
    ck_assert_int_eq(n, 10 * 500);
    free_weights(&a);
    free_weights(&b);

    /* A matching name with another shape names the layer and both shapes. */
    snprintf(args, sizeof(args), "%s " LENET_SUBSET " fc1.num_hidden=300 fit.finetune_from=%s fit.model_prefix=", conf,
             src);
    ck_assert_int_eq(run(args, &err), 2);
    ck_assert_msg(strstr(err, "command line: [fit] finetune_from: ") &&
                      strstr(err, "fc1_weight of layer 'fc1' has shape (500,800) in the file, the network needs "
                                  "(300,800)"),
                  "%s", err);
    ck_assert_ptr_null(strstr(err, "Epoch["));
    free(err);
}
END_TEST

/* ------------------------------------------------------------ accumulation */

START_TEST(grad_accum_equals_one_large_batch)
{
    /* 1,000 samples in file order: 25 updates of 4 x 10 against 25 of 40. */
    const char *common = "configs/mlp.conf train.num_parts=60 train.shuffle=0 val.num_parts=10 fit.num_epoch=2 "
                         "fit.disp_batches=1000";
    char *err, args[2048];
    snprintf(args, sizeof(args), "%s train.batch_size=10 fit.grad_accum=4 fit.model_prefix=%s/acc/m", common, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "Epoch[1] Train-accuracy="), "%s", err);
    free(err);
    snprintf(args, sizeof(args), "%s train.batch_size=40 fit.model_prefix=%s/big/m", common, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    free(err);
    char pa[400], pb[400];
    snprintf(pa, sizeof(pa), "%s/acc/m-0002.params", tmp);
    snprintf(pb, sizeof(pb), "%s/big/m-0002.params", tmp);
    weights a, b;
    load_weights(pa, &a);
    load_weights(pb, &b);
    const char *names[] = {"fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "fc3_weight", "fc3_bias"};
    for (int i = 0; i < 6; i++) {
        bool same;
        double d = rel_diff(&a, &b, names[i], &same);
        ck_assert_msg(d < 1e-5, "%s: accumulated and large-batch weights differ by %g", names[i], d);
    }
    /* And they are not the weights of 100 updates of 10 (the check can fail). */
    snprintf(args, sizeof(args), "%s train.batch_size=10 fit.model_prefix=%s/small/m", common, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    free(err);
    snprintf(pa, sizeof(pa), "%s/small/m-0002.params", tmp);
    weights c;
    load_weights(pa, &c);
    bool same;
    ck_assert_double_gt(rel_diff(&c, &b, "fc1_weight", &same), 1e-3);
    free_weights(&a);
    free_weights(&b);
    free_weights(&c);

    /* A last shorter accumulation at the end of an epoch: 1,000 / 10 = 100
     * batches in updates of 3 leave one batch, applied as its own update. */
    snprintf(args, sizeof(args), "%s train.batch_size=10 fit.grad_accum=3 fit.num_epoch=1 --dry-run", common);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "gradient accumulation: 3 batches of 10 per update (30 samples)"), "%s", err);
    free(err);
}
END_TEST

/* ------------------------------------------------------------ signals */

/* Starts mxtrain in the background with stderr to errfile. */
static pid_t spawn(const char *args, const char *errfile)
{
    unlink(errfile); /* never read the previous run's lines */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char cmd[4096];
        snprintf(cmd, sizeof(cmd), "exec %s %s 2>'%s' >/dev/null", bin, args, errfile);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits until path holds `needle` (or the process ended); true if found. */
static bool wait_for_text(const char *path, const char *needle, pid_t pid, double seconds)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            char buf[1 << 16];
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            buf[n] = '\0';
            fclose(f);
            if (strstr(buf, needle)) return true;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return false;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - start.tv_sec) + 1e-9 * (double)(now.tv_nsec - start.tv_nsec) > seconds) return false;
        usleep(2000);
    }
}

static int wait_exit(pid_t pid)
{
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* The epoch-2 checkpoints under tmp/a and tmp/b (net-0002.params and
 * .states) are the same bytes. */
static void assert_epoch_2_same(const char *what)
{
    const char *suffix[] = {"0002.params", "0002.states"};
    for (int k = 0; k < 2; k++) {
        char pa[512], pb[512];
        snprintf(pa, sizeof(pa), "%s/a/net-%s", tmp, suffix[k]);
        snprintf(pb, sizeof(pb), "%s/b/net-%s", tmp, suffix[k]);
        size_t la, lb;
        char *a = tool_slurp(pa, &la), *b = tool_slurp(pb, &lb);
        ck_assert_uint_eq(la, lb);
        ck_assert_msg(memcmp(a, b, la) == 0, "%s differs (%s)", suffix[k], what);
        free(a);
        free(b);
    }
}

START_TEST(signal_stop_and_resume_are_bit_exact)
{
    const char *net = "configs/lenet.conf train.num_parts=24 val.num_parts=20 train.batch_size=16 fit.num_epoch=2 "
                      "fit.disp_batches=10";
    char *err, args[2048], errfile[400];
    snprintf(args, sizeof(args), "%s fit.model_prefix=%s/a/net", net, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    free(err);

    /* Interrupted in the first epoch, after some progress lines. */
    snprintf(args, sizeof(args), "%s fit.model_prefix=%s/b/net", net, tmp);
    snprintf(errfile, sizeof(errfile), "%s/b.err", tmp);
    pid_t pid = spawn(args, errfile);
    ck_assert_msg(wait_for_text(errfile, "Epoch[0] Batch[30]", pid, 300), "no progress line");
    kill(pid, SIGINT);
    ck_assert_int_eq(wait_exit(pid), 130);
    err = tool_slurp(errfile, NULL);
    ck_assert_msg(strstr(err, "mxtrain: stopped by SIGINT at epoch 0 after batch ") &&
                      strstr(err, "-interrupted.params") && strstr(err, "--resume"),
                  "%s", err);
    ck_assert_ptr_null(strstr(err, "Epoch[0] Validation"));
    free(err);
    char path[400];
    snprintf(path, sizeof(path), "%s/b/net-interrupted.params", tmp);
    /* The stop's file is a checkpoint MXNet loads: arg:, aux: and state: names. */
    weights w;
    load_weights(path, &w);
    int64_t n;
    free(values_of(&w, "conv1_weight", &n));
    free_weights(&w);

    snprintf(args, sizeof(args), "%s fit.model_prefix=%s/b/net --resume", net, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "Resumed from ") && strstr(err, "net-interrupted.params (epoch 0, after batch "), "%s",
                  err);
    free(err);
    ck_assert_int_ne(access(path, F_OK), 0); /* superseded by the epoch checkpoints */
    assert_epoch_2_same("after a stop and resume");

    /* SIGTERM: 143; without model_prefix it says nothing was saved. */
    snprintf(args, sizeof(args), "%s fit.model_prefix=", net);
    pid = spawn(args, errfile);
    ck_assert_msg(wait_for_text(errfile, "Epoch[0] Batch[10]", pid, 300), "no progress line");
    kill(pid, SIGTERM);
    ck_assert_int_eq(wait_exit(pid), 143);
    err = tool_slurp(errfile, NULL);
    ck_assert_msg(strstr(err, "stopped by SIGTERM at epoch 0 after batch ") && strstr(err, "nothing saved"), "%s", err);
    free(err);

    /* A second signal does not wait for the batch: both are made pending
     * while the process is stopped (two different signals never merge). */
    pid = spawn(args, errfile);
    ck_assert_msg(wait_for_text(errfile, "Epoch[0] Batch[10]", pid, 300), "no progress line");
    kill(pid, SIGSTOP);
    kill(pid, SIGINT);
    kill(pid, SIGTERM);
    kill(pid, SIGCONT);
    int code = wait_exit(pid);
    ck_assert_msg(code == 130 || code == 143, "exit %d", code); /* 128 + whichever came second */
    err = tool_slurp(errfile, NULL);
    ck_assert_msg(strstr(err, "mxtrain: second signal: exiting now, without a checkpoint"), "%s", err);
    ck_assert_ptr_null(strstr(err, "stopped by"));
    free(err);
}
END_TEST

/* ------------------------------------------------------------ NaN tracing */

START_TEST(nan_is_traced_to_its_layer)
{
    char conf[400];
    snprintf(conf, sizeof(conf), "%s/inf.conf", tmp);
    write_text(conf, "[layer fc1]\nop = FullyConnected\nnum_hidden = 16\n"
                     "[layer big]\nop = _mul_scalar\nscalar = 1e30\n"
                     "[layer bigger]\nop = _mul_scalar\nscalar = 1e30\n"
                     "[layer fc2]\nop = FullyConnected\nnum_hidden = 10\n"
                     "[layer softmax]\nop = SoftmaxOutput\n"
                     "[train]\niter = mnist\nimage = /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz\n"
                     "label = /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz\nbatch_size = 10\nflat = 1\n"
                     "num_parts = 10\n[fit]\nnum_epoch = 1\n");
    char *err, args[1024];
    ck_assert_int_eq(run(conf, &err), 1);
    ck_assert_msg(strstr(err, "re-running from the start of this run with every layer checked") &&
                      strstr(err, "mxtrain: training diverged: the training output became NaN at epoch 0, batch 0; "
                                  "first non-finite value: bigger: forward output has Inf (") &&
                      strstr(err, "); its inputs are finite (epoch 0, batch 0 of the re-run)"),
                  "%s", err);
    free(err);
    snprintf(args, sizeof(args), "%s fit.check_numerics=1", conf);
    ck_assert_int_eq(run(args, &err), 1);
    ck_assert_msg(strstr(err, "mxtrain: training diverged at epoch 0, batch 0: bigger: forward output has Inf (") &&
                      strstr(err, "its inputs are finite"),
                  "%s", err);
    free(err);
    /* check_numerics on a healthy run trains as usual. */
    ck_assert_int_eq(run("configs/mlp.conf train.num_parts=60 val.num_parts=20 fit.num_epoch=1 fit.model_prefix= "
                         "fit.check_numerics=1",
                         &err),
                     0);
    ck_assert_msg(last_validation_accuracy(err) > 0.5, "%s", err);
    free(err);
}
END_TEST

/* ------------------------------------------------------------ [val] batch */

START_TEST(validation_has_its_own_batch_size)
{
    /* 5,000 validation images: whole batches of 50 and of 100 cover the
     * same samples, so the same weights give the same accuracy. */
    const char *net = "configs/mlp.conf train.num_parts=30 val.num_parts=2 fit.num_epoch=1 fit.model_prefix=";
    char *err, args[1024];
    snprintf(args, sizeof(args), "%s val.batch_size=50", net);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    double a = last_validation_accuracy(err);
    free(err);
    snprintf(args, sizeof(args), "%s val.batch_size=100", net);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    double b = last_validation_accuracy(err);
    free(err);
    ck_assert_msg(a > 0.5 && a == b, "accuracy %f at batch 50, %f at batch 100", a, b);
    snprintf(args, sizeof(args), "%s val.batch_size=100 --dry-run", net);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "validation at batch 100: a prediction plan of "), "%s", err);
    free(err);
}
END_TEST

/* ------------------------------------------------------------ contexts */

START_TEST(unavailable_contexts_are_refused)
{
    char *err, args[1024];
    /* On a machine with a GPU (and a CUDA build) gpu:0 trains instead. */
    const mx_device_ops *gpu_dev = mx_device_get(MX_DEV_GPU);
    const bool gpu = gpu_dev && gpu_dev->count() > 0;
    snprintf(args, sizeof(args), "configs/mlp.conf train.num_parts=60 fit.ctx=gpu:0 fit.model_prefix=%s/gpu/m", tmp);
    if (gpu) {
        ck_assert_int_eq(run(args, &err), 0);
        ck_assert_msg(strstr(err, "Epoch[0] Validation-accuracy="), "%s", err);
        free(err);
    } else {
        ck_assert_int_eq(run(args, &err), 2);
        /* A CUDA build on a machine without GPUs, or a CUDA=0 build. */
        ck_assert_msg(strstr(err, "mxtrain: command line: [fit] ctx: ") &&
                          (strstr(err, "gpu(0) requested but 0 GPU(s) are visible") ||
                           strstr(err, "this build has no GPU support (built without CUDA)")),
                      "%s", err);
        ck_assert_ptr_null(strstr(err, "Epoch["));
        free(err);
        char path[400];
        snprintf(path, sizeof(path), "%s/gpu/m-0001.params", tmp);
        ck_assert_int_ne(access(path, F_OK), 0);
    }

    ck_assert_int_eq(run("configs/mlp.conf fit.ctx=cpu:0-1 fit.work_load_list=1,1,1", &err), 2);
    ck_assert_msg(strstr(err, "command line: [fit] work_load_list: 3 shares for 2 contexts (fit.ctx)"), "%s", err);
    free(err);
    ck_assert_int_eq(run("configs/mlp.conf fit.ctx=cpu:0-1 train.batch_size=1 train.num_parts=60", &err), 2);
    ck_assert_msg(strstr(err, "[fit] ctx: a batch of 1 cannot be split over 2 contexts"), "%s", err);
    free(err);
    ck_assert_int_eq(run("configs/mlp.conf fit.ctx=tpu", &err), 2);
    ck_assert_msg(strstr(err, "command line: [fit] ctx: bad context list 'tpu': expected cpu or gpu"), "%s", err);
    free(err);
    ck_assert_int_eq(run("configs/mlp.conf fit.kvstore=dist_sync", &err), 2);
    ck_assert_msg(strstr(err, "[fit] kvstore: kvstore 'dist_sync' spans the ranks of an MPI job: start it with mpirun"),
                  "%s", err);
    ck_assert_ptr_null(strstr(err, "Epoch["));
    free(err);

    /* mxpredict --ctx: the same check before anything is read. */
    if (!gpu) {
        snprintf(args, sizeof(args), "--model %s/none --ctx gpu:0 x.png", tmp);
        ck_assert_int_eq(run_prog(predict_bin, args, &err), 2);
        ck_assert_msg(strstr(err, "GPU(s) are visible") || strstr(err, "built without CUDA"), "%s", err);
        free(err);
    }
}
END_TEST

/* ------------------------------------------------------------ several contexts */

/* Two CPU contexts, each on its rows of every batch, their gradients summed
 * by the store: the same training as one context (MXNet's
 * DataParallelExecutorGroup), also with uneven shares. */
START_TEST(two_cpu_contexts_train_like_one)
{
    const char *common = "configs/mlp.conf train.num_parts=30 train.shuffle=0 val.num_parts=10 fit.num_epoch=2 "
                         "fit.disp_batches=1000";
    /* Then one context with the shipped GPU configs' kvstore = device,
     * which (as MXNet's Module) needs no store at all with one context, and
     * two with it: on CPU arrays it sums as local does. */
    const char *variants[] = {"fit.ctx=cpu", "fit.ctx=cpu:0-1", "fit.ctx=cpu:0-1 fit.work_load_list=1,3",
                              "fit.ctx=cpu fit.kvstore=device", "fit.ctx=cpu:0-1 fit.kvstore=device"};
    enum { N_VARIANTS = 5 };
    weights w[N_VARIANTS];
    for (int v = 0; v < N_VARIANTS; v++) {
        char *err, args[2048], path[400];
        snprintf(args, sizeof(args), "%s %s fit.model_prefix=%s/v%d/m", common, variants[v], tmp, v);
        ck_assert_msg(run(args, &err) == 0, "%s: %s", variants[v], err);
        ck_assert_msg(last_validation_accuracy(err) > 0.6, "%s", err);
        free(err);
        snprintf(path, sizeof(path), "%s/v%d/m-0002.params", tmp, v);
        load_weights(path, &w[v]);
    }
    const char *names[] = {"fc1_weight", "fc1_bias", "fc2_weight", "fc3_weight", "fc3_bias"};
    for (int v = 1; v < N_VARIANTS; v++)
        for (int i = 0; i < 5; i++) {
            bool same;
            double d = rel_diff(&w[0], &w[v], names[i], &same);
            ck_assert_msg(d < 1e-5, "%s: %s differs from one context by %g", variants[v], names[i], d);
            if (v == 3) ck_assert_msg(same, "%s: %s is not bit-identical to 'local'", variants[v], names[i]);
            if (v == 4) {
                rel_diff(&w[1], &w[v], names[i], &same);
                ck_assert_msg(same, "%s: %s is not bit-identical to 'local' on cpu:0-1", variants[v], names[i]);
            }
        }
    for (int v = 0; v < N_VARIANTS; v++) free_weights(&w[v]);
    char *err, args[2048];
    snprintf(args, sizeof(args), "%s fit.ctx=cpu:0-1 fit.work_load_list=1,3 --dry-run", common);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "data-parallel over 2 contexts: cpu(0) 16 rows, cpu(1) 48 rows"), "%s", err);
    free(err);
    /* Where the device store puts each parameter on GPUs (a dry run plans
     * for GPUs this machine may lack): MLP's 6 keys, last layer first. */
    snprintf(args, sizeof(args), "%s fit.ctx=gpu:0-1 fit.kvstore=device --dry-run", common);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "kvstore device: each parameter's gradients summed by NCCL on its home GPU, updated "
                              "there and broadcast back; at home: gpu(0) 32.3 KiB (3), gpu(1) 395.0 KiB (3)"),
                  "%s", err);
    free(err);
}
END_TEST

/* ------------------------------------------------------------ synthetic data */

START_TEST(synthetic_data_trains)
{
    char conf[400];
    snprintf(conf, sizeof(conf), "%s/syn.conf", tmp);
    write_text(conf, "[layer conv]\nop = Convolution\nkernel = 3,3\nnum_filter = 4\n[layer relu]\nop = relu\n"
                     "[layer fc]\nop = FullyConnected\nnum_hidden = 10\n[layer softmax]\nop = SoftmaxOutput\n"
                     "[train]\niter = synthetic\ndata_shape = 3,16,16\nnum_classes = 10\nnum_samples = 640\n"
                     "batch_size = 32\n[fit]\nnum_epoch = 2\ndisp_batches = 10\n");
    char *err;
    ck_assert_int_eq(run(conf, &err), 0);
    ck_assert_msg(strstr(err, "Epoch[1] Batch[20] Speed: ") && strstr(err, "Epoch[1] Train-accuracy="), "%s", err);
    free(err);
    char args[600];
    snprintf(args, sizeof(args), "%s --dry-run", conf);
    ck_assert_int_eq(run(args, &err), 0);
    ck_assert_msg(strstr(err, "conv                     Convolution            (32,4,14,14)"), "%s", err);
    free(err);
}
END_TEST

/* ------------------------------------------------------------ mixed precision */

/* fit.dtype: float16 trains LeNet beside float32 with loss scaling (steps
 * skipped at the first scales), writes the float32 graph and weights, and
 * resumes from an epoch checkpoint bit for bit (the scaler's state rides
 * in .states); bfloat16 scales nothing; bad values are refused. */
START_TEST(mixed_precision_trains_and_resumes_exactly)
{
    const char *net = TOOL_SANITIZED ? "configs/lenet.conf train.num_parts=120 val.num_parts=50 fit.disp_batches=1000"
                                     : "configs/lenet.conf " LENET_SUBSET;
    char *err, args[2048];
    snprintf(args, sizeof(args), "%s fit.num_epoch=2 fit.model_prefix=%s/f32/net", net, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    double acc32 = last_validation_accuracy(err);
    free(err);
    snprintf(args, sizeof(args), "%s fit.num_epoch=2 fit.dtype=float16 fit.model_prefix=%s/a/net", net, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    double acc16 = last_validation_accuracy(err);
    ck_assert_msg(strstr(err, "Mixed precision: layers compute in float16") && strstr(err, "dynamic loss scaling") &&
                      strstr(err, "Gradients overflowed at loss scale 65536: update skipped (1 so far)") &&
                      strstr(err, "Epoch[1] loss scale "),
                  "%s", err);
    free(err);
    /* float16 skips its first updates while the scale comes down (7 of
     * 80 here; of the sanitizer builds' 16 updates too, hence their slack). */
    const double slack = TOOL_SANITIZED ? 0.2 : 0.05;
    ck_assert_msg(acc16 > acc32 - slack, "float16 validation accuracy %.4f, float32's %.4f", acc16, acc32);
    /* What MXNet loads: the config's graph (no Casts) and float32 weights. */
    char path[512];
    snprintf(path, sizeof(path), "%s/a/net-symbol.json", tmp);
    char *json = tool_slurp(path, NULL);
    ck_assert_ptr_null(strstr(json, "Cast"));
    free(json);
    snprintf(path, sizeof(path), "%s/a/net-0002.params", tmp);
    weights w;
    load_weights(path, &w);
    for (int i = 0; i < w.args.count; i++) ck_assert_int_eq(mx_ndarray_dtype(w.args.arrays[i]), MX_FLOAT32);
    free_weights(&w);

    /* One epoch, then the second from its checkpoint: the same bits. */
    snprintf(args, sizeof(args), "%s fit.num_epoch=1 fit.dtype=float16 fit.model_prefix=%s/b/net", net, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    free(err);
    snprintf(args, sizeof(args), "%s fit.num_epoch=2 fit.dtype=float16 fit.model_prefix=%s/b/net --resume", net, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    free(err);
    assert_epoch_2_same("float16, after a resume");

    /* A scaler state no run could write is refused on resume, naming it. */
    char states[512];
    snprintf(states, sizeof(states), "%s/b/net-0002.states", tmp);
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_ndarray_list l;
    ck_assert_msg(mx_ndarray_load(rt, states, &l) == MX_OK, "%s", mx_last_error());
    int at = -1;
    for (int i = 0; i < l.count; i++)
        if (!strcmp(l.names[i], "trainer:loss_scale")) at = i;
    ck_assert_int_ge(at, 0);
    double bad[6] = {-1, 65536, 0, 0, 0, 0};
    ck_assert_int_eq(mx_ndarray_from_host(l.arrays[at], bad, sizeof(bad)), MX_OK);
    ck_assert_int_eq(mx_ndarray_save(states, l.arrays, (const char *const *)l.names, l.count), MX_OK);
    mx_ndarray_list_free(&l);
    mx_runtime_free(rt);
    snprintf(args, sizeof(args), "%s fit.num_epoch=3 fit.dtype=float16 fit.model_prefix=%s/b/net --resume", net, tmp);
    ck_assert_int_ne(run(args, &err), 0);
    ck_assert_msg(strstr(err, "net-0002.states: 'trainer:loss_scale' holds impossible values (scale -1)"), "%s", err);
    free(err);

    /* Two contexts: the overflow check covers both before either pushes. */
    snprintf(args, sizeof(args), "%s fit.num_epoch=2 fit.dtype=float16 fit.ctx=cpu:0-1", net);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "Gradients overflowed at loss scale 65536") && strstr(err, "Epoch[1] loss scale "), "%s",
                  err);
    ck_assert_msg(last_validation_accuracy(err) > acc16 - slack, "two contexts: %s", err);
    free(err);

    snprintf(args, sizeof(args), "%s fit.num_epoch=1 fit.dtype=bfloat16", net);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "layers compute in bfloat16") && !strstr(err, "loss scal"), "%s", err);
    ck_assert_msg(last_validation_accuracy(err) > acc32 / 2 - 0.05, "%s", err); /* one epoch of two */
    free(err);

    /* The dry run plans the float16 graph: its activations take half the
     * bytes (LeNet's plan also holds the weights' float16 copies). */
    ck_assert_int_eq(run("configs/lenet.conf --dry-run", &err), 0);
    const char *row = strstr(err, "  training  ");
    ck_assert_ptr_nonnull(row);
    double both32 = 0, both16 = 0;
    char unit[8];
    ck_assert_int_eq(sscanf(row, " training %*s %*s %*s %*s %lf %7s", &both32, unit), 2);
    ck_assert_str_eq(unit, "MiB");
    free(err);
    ck_assert_int_eq(run("configs/lenet.conf --dry-run fit.dtype=float16", &err), 0);
    ck_assert_msg(strstr(err, "mixed precision: layers compute in float16"), "%s", err);
    row = strstr(err, "  training  ");
    ck_assert_ptr_nonnull(row);
    ck_assert_int_eq(sscanf(row, " training %*s %*s %*s %*s %lf %7s", &both16, unit), 2);
    ck_assert_str_eq(unit, "MiB");
    ck_assert_msg(both16 > 0.4 * both32 && both16 < 0.8 * both32, "float16 plan %.1f MiB, float32 %.1f MiB", both16, both32);
    free(err);

    ck_assert_int_ne(run("configs/lenet.conf fit.dtype=float64", &err), 0);
    ck_assert_msg(strstr(err, "dtype") && strstr(err, "float64") && strstr(err, "bfloat16"), "%s", err);
    free(err);
    ck_assert_int_ne(run("configs/lenet.conf fit.dtype=float16 fit.kvstore=dist_async", &err), 0);
    ck_assert_msg(strstr(err, "float16 with kvstore 'dist_async' is not supported yet") && strstr(err, "bfloat16"), "%s",
                  err);
    free(err);
}
END_TEST

/* ------------------------------------------------------------ memory */

/* Peak RSS of every child waited for so far, in KiB. */
static long children_peak_kib(void)
{
    struct rusage ru;
    ck_assert_int_eq(getrusage(RUSAGE_CHILDREN, &ru), 0);
    return ru.ru_maxrss;
}

/* A checkpoint save writes the weights and the momentum from the live
 * arrays: it used to copy the optimizer state (one more copy of the
 * weights) and the largest array (another) first. One 64 MiB weight:
 * weights, gradients and momentum are 192 MiB either way; the save then
 * took 131 MiB more at its peak, now nothing measurable. */
START_TEST(checkpoint_save_adds_no_copy_of_the_weights)
{
    char conf[400];
    snprintf(conf, sizeof(conf), "%s/big.conf", tmp);
    write_text(conf, "[layer fc1]\nop = FullyConnected\nnum_hidden = 4096\n[layer softmax]\nop = SoftmaxOutput\n"
                     "[train]\niter = synthetic\ndata_shape = 1,64,64\nnum_classes = 4096\nnum_samples = 16\n"
                     "batch_size = 8\n[optimizer]\ntype = sgd\nmomentum = 0.9\n[fit]\nnum_epoch = 1\n");
    char *err, args[800];
    ck_assert_msg(run(conf, &err) == 0, "%s", err);
    free(err);
    long without = children_peak_kib(); /* the same training, no save */
    snprintf(args, sizeof(args), "%s fit.model_prefix=%s/big", conf, tmp);
    ck_assert_msg(run(args, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "Saved checkpoint to"), "%s", err);
    free(err);
    long with = children_peak_kib(); /* the larger of the two runs' peaks */
    const long weight_kib = 4096L * 4096 * 4 / 1024;
    ck_assert_msg(with - without < weight_kib / 2, "saving raised the peak RSS from %ld to %ld KiB (weight: %ld KiB)",
                  without, with, weight_kib);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mxtrain_control");
    TCase *tc = tcase_create("e2e");
    tcase_set_timeout(tc, 900);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, finetune_freezes_and_trains_a_new_head);
    tcase_add_test(tc, grad_accum_equals_one_large_batch);
    tcase_add_test(tc, signal_stop_and_resume_are_bit_exact);
    tcase_add_test(tc, nan_is_traced_to_its_layer);
    tcase_add_test(tc, validation_has_its_own_batch_size);
    tcase_add_test(tc, unavailable_contexts_are_refused);
    tcase_add_test(tc, two_cpu_contexts_train_like_one);
    tcase_add_test(tc, synthetic_data_trains);
    tcase_add_test(tc, mixed_precision_trains_and_resumes_exactly);
    tcase_add_test(tc, checkpoint_save_adds_no_copy_of_the_weights);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
