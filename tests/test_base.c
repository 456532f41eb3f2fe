/* test_base.c - status codes, the thread-local error, checked helpers. */
#include "base/base.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static mx_status fails_deep(int depth)
{
    if (depth == 0) return MX_ERROR(MX_ERR_FORMAT, "bad magic 0x%x at offset %d", 0xdead, 16);
    MX_TRY(fails_deep(depth - 1));
    return MX_OK;
}

START_TEST(error_message_names_place_and_propagates)
{
    mx_error_clear();
    ck_assert_int_eq(mx_last_status(), MX_OK);
    ck_assert_str_eq(mx_last_error(), "");
    ck_assert_int_eq(fails_deep(3), MX_ERR_FORMAT);
    ck_assert_int_eq(mx_last_status(), MX_ERR_FORMAT);
    const char *msg = mx_last_error();
    ck_assert_str_eq(msg, "bad magic 0xdead at offset 16");
    ck_assert(strncmp(mx_last_error_location(), "test_base.c:", 12) == 0);
    ck_assert_int_eq(mx_error_prefix(MX_ERR_IO, "model.params"), MX_ERR_IO);
    ck_assert_str_eq(mx_last_error(), "model.params: bad magic 0xdead at offset 16");
    ck_assert(strncmp(mx_last_error_location(), "test_base.c:", 12) == 0); /* kept */
    ck_assert_int_eq(mx_last_status(), MX_ERR_IO);
    ck_assert_str_eq(mx_status_name(MX_ERR_NOMEM), "out of memory");
    ck_assert_str_eq(mx_status_name((mx_status)99), "unknown status");
}
END_TEST

START_TEST(long_messages_are_truncated_safely)
{
    char big[4000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    MX_ERROR(MX_ERR_INVALID, "%s", big);
    ck_assert_int_lt(strlen(mx_last_error()), 1024);
    mx_error_prefix(MX_ERR_INVALID, "%s", big);
    ck_assert_int_lt(strlen(mx_last_error()), 1024);
    mx_error_set_message(MX_ERR_RUNTIME, big);
    ck_assert_int_eq(strlen(mx_last_error()), 1023);
}
END_TEST

static void *other_thread(void *arg)
{
    (void)arg;
    MX_ERROR(MX_ERR_DEVICE, "from the other thread");
    return NULL;
}

START_TEST(errors_are_thread_local)
{
    MX_ERROR(MX_ERR_IO, "mine");
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(mx_last_status(), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "mine"));
}
END_TEST

START_TEST(checked_sizes_and_allocation)
{
    size_t out = 0;
    ck_assert(mx_size_mul(1u << 20, 1u << 10, &out));
    ck_assert_uint_eq(out, (size_t)1 << 30);
    ck_assert(!mx_size_mul(SIZE_MAX / 2 + 1, 2, &out));
    ck_assert(!mx_size_add(SIZE_MAX, 1, &out));
    ck_assert_ptr_null(mx_calloc(SIZE_MAX / 4, 8));
    ck_assert_int_eq(mx_last_status(), MX_ERR_NOMEM);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "overflows"));
    void *p = mx_malloc(0); /* never NULL on success */
    ck_assert_ptr_nonnull(p);
    mx_free(p);
    char *s = mx_strdup("lenet");
    ck_assert_str_eq(s, "lenet");
    mx_free(s);
}
END_TEST

START_TEST(environment_and_contexts)
{
    setenv("MX_TEST_NUMBER", "42", 1);
    ck_assert_int_eq(mx_env_long("MX_TEST_NUMBER", 7), 42);
    setenv("MX_TEST_NUMBER", "4x", 1);
    ck_assert_int_eq(mx_env_long("MX_TEST_NUMBER", 7), 7);
    unsetenv("MX_TEST_NUMBER");
    ck_assert_int_eq(mx_env_long("MX_TEST_NUMBER", 7), 7);
    /* MXNet's MXNET_ENFORCE_DETERMINISM: a non-zero number turns it on. */
    const char *saved = getenv("MXNET_ENFORCE_DETERMINISM");
    char *keep = saved ? strdup(saved) : NULL;
    unsetenv("MXNET_ENFORCE_DETERMINISM");
    ck_assert(!mx_determinism_enforced());
    setenv("MXNET_ENFORCE_DETERMINISM", "1", 1);
    ck_assert(mx_determinism_enforced());
    setenv("MXNET_ENFORCE_DETERMINISM", "0", 1);
    ck_assert(!mx_determinism_enforced());
    if (keep) setenv("MXNET_ENFORCE_DETERMINISM", keep, 1);
    else unsetenv("MXNET_ENFORCE_DETERMINISM");
    free(keep);
    char buf[32];
    ck_assert_str_eq(mx_context_str(mx_gpu(3), buf, sizeof(buf)), "gpu(3)");
    ck_assert_str_eq(mx_context_str(mx_cpu(), buf, sizeof(buf)), "cpu(0)");
    ck_assert(mx_context_equal(mx_gpu(1), mx_gpu(1)));
    ck_assert(!mx_context_equal(mx_gpu(1), mx_gpu(2)));
    double t0 = mx_time_seconds(), t1 = mx_time_seconds();
    ck_assert(t1 >= t0);
}
END_TEST

/* Every variable the library reads as a number or a word is checked at
 * once: a value it cannot take names the variable, its value and what it
 * takes; good values, unset ones and OpenMP's count lists pass. */
typedef struct env_case {
    const char *name, *value;
    bool ok;
    const char *says; /* in the message when refused */
} env_case;

START_TEST(environment_is_checked)
{
    static const env_case cases[] = {
        {"MXNET_EXEC_ENABLE_FOLDING", "0", true, NULL},
        {"MXNET_EXEC_ENABLE_FOLDING", "yes", false, "expected an integer (0: off)"},
        {"MXNET_BACKWARD_DO_MIRROR", "1 ", false, "MXNET_BACKWARD_DO_MIRROR='1 '"},
        {"MXNET_BACKWARD_DO_MIRROR", "2", true, NULL},
        {"MXNET_BACKWARD_DO_MIRROR", "3", false, "expected one of 0, 1, 2"},
        {"MXNET_CPU_WORKER_NTHREADS", "zero", false, "at least 1"},
        {"MXNET_CPU_WORKER_NTHREADS", "0", false, "at least 1"},
        {"MXNET_CPU_WORKER_NTHREADS", "3", true, NULL},
        {"OMP_NUM_THREADS", "4,2", true, NULL},
        {"OMP_NUM_THREADS", "4,", false, "OpenMP's comma-separated counts"},
        {"OMP_NUM_THREADS", "", true, NULL},
        {"MXNET_ENGINE_TYPE", "ThreadedEngine", true, NULL},
        {"MXNET_ENGINE_TYPE", "Naive", false, "expected one of NaiveEngine, ThreadedEngine, ThreadedEnginePerDevice"},
        {"MX_WINOGRAD_TILE", "3", false, "expected one of 2, 4, 6"},
        {"MX_WINOGRAD_ISA", "avx2", true, NULL},
        {"MX_SIMD", "avx1024", false, "MX_SIMD='avx1024'"},
        {"MXNET_CUDNN_AUTOTUNE_DEFAULT", "3", false, "expected one of 0, 1, 2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const env_case *c = &cases[i];
        const char *saved = getenv(c->name);
        char *keep = saved ? strdup(saved) : NULL;
        setenv(c->name, c->value, 1);
        mx_status s = mx_env_check();
        if (keep) setenv(c->name, keep, 1);
        else unsetenv(c->name);
        free(keep);
        if (c->ok) {
            ck_assert_msg(s == MX_OK, "%s='%s' refused: %s", c->name, c->value, mx_last_error());
            continue;
        }
        ck_assert_msg(s == MX_ERR_INVALID, "%s='%s' passed", c->name, c->value);
        ck_assert_msg(strstr(mx_last_error(), c->says) != NULL, "%s='%s': '%s' lacks '%s'", c->name, c->value,
                      mx_last_error(), c->says);
    }
    setenv("OMP_NUM_THREADS", "3,1", 1);
    ck_assert_int_eq(mx_env_first_count("OMP_NUM_THREADS", 9), 3);
    unsetenv("OMP_NUM_THREADS");
    ck_assert_int_eq(mx_env_first_count("OMP_NUM_THREADS", 9), 9);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("base");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, error_message_names_place_and_propagates);
    tcase_add_test(tc, long_messages_are_truncated_safely);
    tcase_add_test(tc, errors_are_thread_local);
    tcase_add_test(tc, checked_sizes_and_allocation);
    tcase_add_test(tc, environment_and_contexts);
    tcase_add_test(tc, environment_is_checked);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
