/*
 * test_mxtrain_crash.c - checkpoints that survive any stop: mxtrain is
 * killed with SIGKILL at 12 moments spread over a run (inside a save,
 * between the .params and .states files, between epochs) and every run
 * resumes with --resume and finishes with the weights of an uninterrupted
 * run, bit for bit; the newest checkpoint without its .states is skipped
 * with a message naming it; a save that fails for lack of space (a file
 * size limit: EFBIG, as a full disk gives ENOSPC) is reported, leaves no
 * temporary file and the previous checkpoint intact. And no silent data
 * loss: an epoch whose .rec lost records to corruption ends with a summary
 * line, and more loss than fit.max_skip_fraction is an error. An
 * allocation that fails says what it was for.
 */
#include "image/image.h"
#include "recordio/imrec.h"
#include "recordio/recordio.h"
#include "support/tooltest.h"

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char bin[512];
static char tmp[256];

static void setup(void)
{
    const char *build = getenv("MX_TEST_BUILD");
    snprintf(bin, sizeof(bin), "%s/bin/mxtrain", build && *build ? build : "build");
    tool_tmp_make(tmp, sizeof(tmp), "mxtrain-crash");
}

static void teardown(void) { tool_tmp_remove(tmp); }

/* A net whose checkpoint (256 KiB of weights, fsync'ed) takes a good part
 * of each epoch, so that kills land inside saves. */
static void write_config(const char *dir)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/small.conf", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[net]\ninputs = data\n[layer fc1]\nop = FullyConnected\nnum_hidden = 256\n"
               "[layer softmax]\nop = SoftmaxOutput\n"
               "[train]\niter = synthetic\ndata_shape = 256\nnum_classes = 2\nnum_samples = 64\nbatch_size = 16\n"
               "[optimizer]\ntype = sgd\nlr = 0.1\nmomentum = 0.9\n"
               "[fit]\nnum_epoch = 4\nctx = cpu\nmodel_prefix = %s/net\n",
            dir);
    fclose(f);
}

/* Starts mxtrain in dir (output to dir/log.txt); with fsize_limit > 0 the
 * child's file size limit is that many bytes and SIGXFSZ is ignored, so a
 * write past it fails with EFBIG; with as_limit > 0 its address space is
 * limited to that many bytes (ulimit -v). */
static pid_t start_limited(const char *dir, const char *extra, long fsize_limit, long as_limit)
{
    char conf[400], log[400];
    snprintf(conf, sizeof(conf), "%s/small.conf", dir);
    snprintf(log, sizeof(log), "%s/log.txt", dir);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(127);
        dup2(fd, 1);
        dup2(fd, 2);
        /* A sanitizer build must return NULL for a huge allocation as
         * malloc does, not abort. */
        const char *asan = getenv("ASAN_OPTIONS");
        char opts[1024];
        snprintf(opts, sizeof(opts), "%s%sallocator_may_return_null=1", asan ? asan : "", asan && *asan ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        if (fsize_limit > 0) {
            struct rlimit rl = {(rlim_t)fsize_limit, (rlim_t)fsize_limit};
            signal(SIGXFSZ, SIG_IGN);
            if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(127);
        }
        if (as_limit > 0) {
            struct rlimit rl = {(rlim_t)as_limit, (rlim_t)as_limit};
            if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(127);
        }
        /* extra: arguments separated by single spaces. */
        char words[512];
        char *argv[8] = {bin, conf};
        int argc = 2;
        snprintf(words, sizeof(words), "%s", extra ? extra : "");
        for (char *w = strtok(words, " "); w && argc < 7; w = strtok(NULL, " ")) argv[argc++] = w;
        argv[argc] = NULL;
        execv(bin, argv);
        _exit(127);
    }
    return pid;
}

static pid_t start(const char *dir, const char *extra, long fsize_limit)
{
    return start_limited(dir, extra, fsize_limit, 0);
}

static int finish(pid_t pid)
{
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *log_of(const char *dir)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/log.txt", dir);
    return tool_slurp(path, NULL);
}

static char *file_of(const char *dir, const char *name, size_t *len)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return tool_slurp(path, len);
}

static bool exists(const char *dir, const char *name)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void make_dir(char *dir, size_t size, const char *name)
{
    snprintf(dir, size, "%s/%s", tmp, name);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    write_config(dir);
}

static void assert_same_file(const char *a_dir, const char *b_dir, const char *name)
{
    size_t la, lb;
    char *a = file_of(a_dir, name, &la), *b = file_of(b_dir, name, &lb);
    ck_assert_msg(la == lb && memcmp(a, b, la) == 0, "%s/%s differs from %s/%s", b_dir, name, a_dir, name);
    free(a);
    free(b);
}

START_TEST(incomplete_newest_checkpoint_is_skipped)
{
    char dir[300];
    make_dir(dir, sizeof(dir), "skip");
    ck_assert_int_eq(finish(start(dir, "fit.num_epoch=2", 0)), 0);
    /* A stop between the two files of epoch 2. */
    char path[400];
    snprintf(path, sizeof(path), "%s/net-0002.states", dir);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(finish(start(dir, "--resume", 0)), 0);
    char *log = log_of(dir);
    char want[1024];
    snprintf(want, sizeof(want),
             "skipped the incomplete checkpoint %s/net-0002.params: %s/net-0002.states is missing (the save of epoch 2 "
             "was interrupted)",
             dir, dir);
    ck_assert_msg(strstr(log, want) != NULL, "%s", log);
    ck_assert_msg(strstr(log, "Resumed from epoch 1") != NULL, "%s", log);
    free(log);
    ck_assert(exists(dir, "net-0002.states"));
    ck_assert(exists(dir, "net-0004.states"));
}
END_TEST

START_TEST(sigkill_at_any_moment_then_resume_matches)
{
    char ref[300];
    make_dir(ref, sizeof(ref), "ref");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(finish(start(ref, NULL, 0)), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long run_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
    /* Kill times spread over a whole run, from start-up to the last save. */
    enum { TRIALS = 12 };
    int resumed_from_skip = 0;
    for (int k = 0; k < TRIALS; k++) {
        char dir[300], name[32];
        snprintf(name, sizeof(name), "kill%d", k);
        make_dir(dir, sizeof(dir), name);
        pid_t pid = start(dir, NULL, 0);
        usleep((useconds_t)(run_us * (k + 1) / (TRIALS + 1)));
        kill(pid, SIGKILL);
        (void)finish(pid);
        int rc = finish(start(dir, "--resume", 0));
        char *log = log_of(dir);
        ck_assert_msg(rc == 0, "trial %d: the resumed run failed: %s", k, log);
        if (strstr(log, "skipped the incomplete checkpoint")) resumed_from_skip++;
        free(log);
        assert_same_file(ref, dir, "net-0004.params");
        assert_same_file(ref, dir, "net-0004.states");
        /* No torn file is ever left under a final name. */
        DIR *d = opendir(dir);
        for (struct dirent *e; (e = readdir(d));) {
            size_t n = strlen(e->d_name);
            ck_assert_msg(n < 4 || strcmp(e->d_name + n - 4, ".tmp") != 0, "trial %d left %s", k, e->d_name);
        }
        closedir(d);
    }
    (void)resumed_from_skip; /* timing decides how many hit the gap; the skip test covers it */
}
END_TEST

START_TEST(full_disk_during_save_keeps_the_previous_checkpoint)
{
    char dir[300];
    make_dir(dir, sizeof(dir), "full");
    ck_assert_int_eq(finish(start(dir, "fit.num_epoch=1", 0)), 0);
    size_t lp, ls;
    char *params = file_of(dir, "net-0001.params", &lp), *states = file_of(dir, "net-0001.states", &ls);
    /* Room for the symbol JSON, not for 256 KiB of weights. */
    ck_assert_int_eq(finish(start(dir, "fit.num_epoch=2 --resume", 64 * 1024)), 1);
    char *log = log_of(dir);
    char want[1024];
    snprintf(want, sizeof(want), "mxtrain: saving %s/net-0002.params: %s/net-0002.params.tmp: write failed: File too large",
             dir, dir);
    ck_assert_msg(strstr(log, want) != NULL, "%s", log);
    free(log);
    ck_assert(!exists(dir, "net-0002.params"));
    ck_assert(!exists(dir, "net-0002.params.tmp"));
    size_t lp2, ls2;
    char *params2 = file_of(dir, "net-0001.params", &lp2), *states2 = file_of(dir, "net-0001.states", &ls2);
    ck_assert(lp == lp2 && memcmp(params, params2, lp) == 0);
    ck_assert(ls == ls2 && memcmp(states, states2, ls) == 0);
    free(params);
    free(states);
    free(params2);
    free(states2);
    /* With room again the run goes on from epoch 1. */
    ck_assert_int_eq(finish(start(dir, "fit.num_epoch=2 --resume", 0)), 0);
    log = log_of(dir);
    ck_assert_msg(strstr(log, "Resumed from epoch 1") != NULL, "%s", log);
    free(log);
    ck_assert(exists(dir, "net-0002.states"));
}
END_TEST

/* 50 8x8 grey PNG records, labels k % 2; garbage inserted at an odd
 * offset inside record 10 (one record of 50 lost: 2%). */
static void write_damaged_rec(const char *path)
{
    enum { N = 50 };
    mx_recordio_writer *w;
    ck_assert_int_eq(mx_recordio_writer_open(path, &w), MX_OK);
    uint64_t offs[N];
    for (int k = 0; k < N; k++) {
        mx_image im;
        ck_assert_int_eq(mx_image_create(8, 8, 1, &im), MX_OK);
        for (int i = 0; i < 64; i++) im.data[i] = (uint8_t)(k * 7 + i * 3);
        uint8_t *png, *rec;
        size_t png_size, rec_size;
        ck_assert_int_eq(mx_image_encode_png(&im, 1, &png, &png_size), MX_OK);
        mx_irheader h = {.label = (float)(k % 2), .id = (uint64_t)k};
        ck_assert_int_eq(mx_imrec_pack(&h, NULL, png, png_size, &rec, &rec_size), MX_OK);
        ck_assert_int_eq(mx_recordio_writer_write(w, rec, rec_size, &offs[k]), MX_OK);
        mx_free(im.data);
        mx_free(png);
        mx_free(rec);
    }
    ck_assert_int_eq(mx_recordio_writer_close(w), MX_OK);
    size_t n;
    char *bytes = tool_slurp(path, &n);
    size_t at = (size_t)offs[10] + 41;
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, at, f), at);
    ck_assert_uint_eq(fwrite("\x01\x02\x03\x04\x05", 1, 5, f), 5);
    ck_assert_uint_eq(fwrite(bytes + at, 1, n - at, f), n - at);
    ck_assert_int_eq(fclose(f), 0);
    free(bytes);
}

START_TEST(corrupt_records_are_summed_up_and_heavy_loss_fails)
{
    char dir[300], rec[400], conf[400];
    snprintf(dir, sizeof(dir), "%s/rec", tmp);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(rec, sizeof(rec), "%s/d.rec", dir);
    write_damaged_rec(rec);
    snprintf(conf, sizeof(conf), "%s/small.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[net]\ninputs = data\n[layer fc1]\nop = FullyConnected\nnum_hidden = 2\n"
               "[layer softmax]\nop = SoftmaxOutput\n"
               "[train]\niter = imagerecord\npath_imgrec = %s\ndata_shape = 1,8,8\nbatch_size = 10\n"
               "[fit]\nnum_epoch = 2\nctx = cpu\n",
            rec);
    fclose(f);
    /* 2% lost, 5% allowed: two epochs, each with its summary. */
    ck_assert_int_eq(finish(start(dir, "fit.max_skip_fraction=0.05", 0)), 0);
    char *log = log_of(dir);
    for (int e = 0; e < 2; e++) {
        char want[200];
        snprintf(want, sizeof(want), "Epoch[%d] [train] data skipped as corrupt: 1 of 50 records and 5 of ", e);
        ck_assert_msg(strstr(log, want) != NULL, "%s\nwanted: %s", log, want);
    }
    ck_assert_msg(strstr(log, "(2.00% of the data; latest: ") != NULL, "%s", log);
    free(log);
    /* The default (1%) makes the same loss an error after the first epoch. */
    ck_assert_int_eq(finish(start(dir, NULL, 0)), 1);
    log = log_of(dir);
    char want[600];
    snprintf(want, sizeof(want),
             "%s: [train] 2.00%% of the data was skipped as corrupt (1 of 50 records, 5 of ", conf);
    ck_assert_msg(strstr(log, want) != NULL, "%s\nwanted: %s", log, want);
    ck_assert_msg(strstr(log, "more than fit.max_skip_fraction = 0.01") != NULL, "%s", log);
    ck_assert_msg(strstr(log, "Epoch[1]") == NULL, "%s", log);
    free(log);
}
END_TEST

START_TEST(failed_allocation_names_the_array)
{
    char dir[300], conf[400];
    snprintf(dir, sizeof(dir), "%s/oom", tmp);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(conf, sizeof(conf), "%s/small.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    /* A 2^20 x 2^20 weight: 4 TiB, more than any machine here. */
    fprintf(f, "[net]\ninputs = data\n[layer fc1]\nop = FullyConnected\nnum_hidden = 1048576\n"
               "[layer softmax]\nop = SoftmaxOutput\n"
               "[train]\niter = synthetic\ndata_shape = 1048576\nnum_classes = 2\nnum_samples = 2\nbatch_size = 1\n"
               "[fit]\nnum_epoch = 1\nctx = cpu\n");
    fclose(f);
    ck_assert_int_eq(finish(start(dir, NULL, 0)), 1);
    char *log = log_of(dir);
    ck_assert_msg(strstr(log, "input 'fc1_weight': an array of shape (1048576,1048576) float32: out of host memory "
                              "allocating 4398046511104 bytes") != NULL,
                  "%s", log);
    free(log);
}
END_TEST

/* An address-space limit (ulimit -v) at any level ends a run with an
 * error or lets it train, never hangs it: OpenBLAS retries a failed work
 * buffer allocation forever, so the engine reserves its buffers when it
 * starts (blas.h). Limits from this process's own size (the same
 * libraries) plus 256 MiB up by 96 MiB steps: below that OpenBLAS's own
 * threads, made when the library loads, cannot take their buffers and
 * hang the process's exit, out of our reach (README: OPENBLAS_NUM_THREADS=1
 * avoids them). */
START_TEST(address_space_limits_end_in_an_error_not_a_hang)
{
    if (TOOL_SANITIZED) return; /* the sanitizers reserve terabytes of address space */
    char dir[300];
    make_dir(dir, sizeof(dir), "aslimit");
    long base_kib = 0;
    FILE *st = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(st);
    char line[256];
    while (fgets(line, sizeof(line), st))
        if (sscanf(line, "VmSize: %ld kB", &base_kib) == 1) break;
    fclose(st);
    ck_assert_int_gt(base_kib, 0);
    int blas_errors = 0, trained = 0;
    for (int step = 0; step <= 16; step++) {
        long limit = (base_kib << 10) + (256L << 20) + (long)step * (96L << 20);
        pid_t pid = start_limited(dir, NULL, 0, limit);
        int status = -1;
        for (double waited = 0; waited < 90; waited += 0.05) {
            int st_raw;
            pid_t r = waitpid(pid, &st_raw, WNOHANG);
            if (r == pid) {
                status = WIFEXITED(st_raw) ? WEXITSTATUS(st_raw) : 128 + WTERMSIG(st_raw);
                break;
            }
            usleep(50000);
        }
        if (status < 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        char *log = log_of(dir);
        ck_assert_msg(status >= 0, "mxtrain hung under an address-space limit of %ld MiB:\n%s", limit >> 20, log);
        ck_assert_msg(status == 0 || status == 1 || status == 127,
                      "mxtrain under an address-space limit of %ld MiB: status %d\n%s", limit >> 20, status, log);
        blas_errors += strstr(log, "OpenBLAS needs a") != NULL;
        trained += status == 0;
        free(log);
        if (trained) break;
    }
    printf("address-space limits: %d runs ended in the OpenBLAS error, %d trained, none hung\n", blas_errors, trained);
    ck_assert_msg(blas_errors > 0 && trained > 0, "%d runs ended in the OpenBLAS error, %d trained", blas_errors,
                  trained);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mxtrain_crash");
    TCase *tc = tcase_create("stops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, incomplete_newest_checkpoint_is_skipped);
    tcase_add_test(tc, sigkill_at_any_moment_then_resume_matches);
    tcase_add_test(tc, full_disk_during_save_keeps_the_previous_checkpoint);
    tcase_add_test(tc, corrupt_records_are_summed_up_and_heavy_loss_fails);
    tcase_add_test(tc, failed_allocation_names_the_array);
    tcase_add_test(tc, address_space_limits_end_in_an_error_not_a_hang);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
