/* test_kvstore.c - the local KVStore: init / push (gradients summed) /
 * pull with and without an updater, the optimizer as updater, engine
 * overlap (push returns before the gradient exists), errors. */
#include "kvstore/kvstore.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 6

static mx_runtime *make_runtime(void)
{
    mx_engine_config c = mx_engine_config_default();
    c.cpu_workers = 4;
    mx_runtime *rt = NULL;
    ck_assert_int_eq(mx_runtime_create(&c, &rt), MX_OK);
    return rt;
}

static mx_ndarray *array_f32(mx_runtime *rt, const float *v)
{
    mx_ndarray *a = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), &a), MX_OK);
    if (v) ck_assert_int_eq(mx_ndarray_from_host(a, v, sizeof(float) * N), MX_OK);
    else ck_assert_int_eq(mx_nd_fill(a, 0), MX_OK);
    return a;
}

static void read_f32(mx_ndarray *a, float *out)
{
    ck_assert_int_eq(mx_ndarray_to_host(a, out, sizeof(float) * N), MX_OK);
}

static void expect_error(mx_status got, mx_status want, const char *fragment)
{
    ck_assert_int_eq(got, want);
    if (fragment && !strstr(mx_last_error(), fragment))
        ck_abort_msg("error '%s' lacks '%s'", mx_last_error(), fragment);
}

static float gval(int dev, int i, int round) { return (float)(0.5 * sin(1.1 * dev + 0.3 * i + 0.7 * round) + 0.1 * dev); }

START_TEST(init_push_pull_without_updater)
{
    mx_runtime *rt = make_runtime();
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, "local", &kv), MX_OK);
    ck_assert_str_eq(mx_kvstore_type(kv), "local");
    ck_assert_int_eq(mx_kvstore_rank(kv), 0);
    ck_assert_int_eq(mx_kvstore_num_workers(kv), 1);
    ck_assert_int_eq(mx_kvstore_barrier(kv), MX_OK);
    const float w0[N] = {1, 2, 3, 4, 5, 6};
    mx_ndarray *w = array_f32(rt, w0);
    ck_assert_int_eq(mx_kvstore_init(kv, 3, w), MX_OK);
    /* The store keeps a copy: changing the source does not change it. */
    ck_assert_int_eq(mx_nd_fill(w, -1), MX_OK);
    mx_ndarray *outs[2] = {array_f32(rt, NULL), array_f32(rt, NULL)};
    ck_assert_int_eq(mx_kvstore_pull(kv, 3, outs, 2, 0), MX_OK);
    for (int k = 0; k < 2; k++) {
        float v[N];
        read_f32(outs[k], v);
        ck_assert(!memcmp(v, w0, sizeof(v)));
    }
    /* Three gradients are summed and replace the value. */
    mx_ndarray *g[3];
    float want[N];
    for (int d = 0; d < 3; d++) {
        float v[N];
        for (int i = 0; i < N; i++) v[i] = gval(d, i, 0);
        g[d] = array_f32(rt, v);
    }
    for (int i = 0; i < N; i++) want[i] = (gval(0, i, 0) + gval(1, i, 0)) + gval(2, i, 0);
    ck_assert_int_eq(mx_kvstore_push(kv, 3, g, 3, 0), MX_OK);
    ck_assert_int_eq(mx_kvstore_pull(kv, 3, outs, 1, 0), MX_OK);
    float got[N];
    read_f32(outs[0], got);
    ck_assert(!memcmp(got, want, sizeof(got)));
    /* A single value replaces it as it is. */
    ck_assert_int_eq(mx_kvstore_push(kv, 3, &g[1], 1, 0), MX_OK);
    ck_assert_int_eq(mx_kvstore_pull(kv, 3, &outs[1], 1, 0), MX_OK);
    read_f32(outs[1], got);
    for (int i = 0; i < N; i++) ck_assert_float_eq(got[i], gval(1, i, 0));
    ck_assert_ptr_nonnull(mx_kvstore_stored(kv, 3));
    ck_assert_ptr_null(mx_kvstore_stored(kv, 4));

    /* Errors. */
    expect_error(mx_kvstore_init(kv, 3, w), MX_ERR_INVALID, "twice");
    expect_error(mx_kvstore_push(kv, 4, g, 1, 0), MX_ERR_INVALID, "has not been initialised");
    expect_error(mx_kvstore_pull(kv, 4, outs, 1, 0), MX_ERR_INVALID, "has not been initialised");
    expect_error(mx_kvstore_push(kv, 3, g, 0, 0), MX_ERR_INVALID, "at least one");
    expect_error(mx_kvstore_init(kv, -1, w), MX_ERR_INVALID, "out of range");
    mx_ndarray *small = NULL, *dbl = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(5), MX_FLOAT32, mx_cpu(), &small), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT64, mx_cpu(), &dbl), MX_OK);
    ck_assert_int_eq(mx_nd_fill(small, 0), MX_OK);
    ck_assert_int_eq(mx_nd_fill(dbl, 0), MX_OK);
    mx_ndarray *mixed[2] = {g[0], small};
    expect_error(mx_kvstore_push(kv, 3, mixed, 2, 0), MX_ERR_INVALID, "shape");
    mixed[1] = dbl;
    expect_error(mx_kvstore_push(kv, 3, mixed, 2, 0), MX_ERR_INVALID, "dtype");
    expect_error(mx_kvstore_pull(kv, 3, &small, 1, 0), MX_ERR_INVALID, "shape");
    mx_ndarray_free(small);
    mx_ndarray_free(dbl);
    for (int d = 0; d < 3; d++) mx_ndarray_free(g[d]);
    mx_ndarray_free(outs[0]);
    mx_ndarray_free(outs[1]);
    mx_ndarray_free(w);
    mx_kvstore_free(kv);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(kinds)
{
    mx_runtime *rt = make_runtime();
    mx_kvstore *kv = NULL;
    expect_error(mx_kvstore_create(rt, "locl", &kv), MX_ERR_INVALID, "did you mean 'local'");
    expect_error(mx_kvstore_create(rt, "nccl", &kv), MX_ERR_INVALID, "unknown kvstore");
    expect_error(mx_kvstore_create(rt, "device", &kv), MX_ERR_UNSUPPORTED, "not in this build");
    /* The MPI kinds need the job's communicator (test_dist.c, test_dist_async.c run them). */
    expect_error(mx_kvstore_create(rt, "dist_sync", &kv), MX_ERR_INVALID, "start it with mpirun");
    expect_error(mx_kvstore_create(rt, "dist_sync_device", &kv), MX_ERR_INVALID, "start it with mpirun");
    expect_error(mx_kvstore_create(rt, "dist_async", &kv), MX_ERR_INVALID, "start it with mpirun");
    /* A bucket size is for the kinds that sum in buckets, refused elsewhere. */
    mx_kvstore_options fused = {.fusion_bytes = 4096}, plain = {0};
    ck_assert_int_eq(mx_kvstore_options_check("dist_sync", &fused), MX_OK);
    ck_assert_int_eq(mx_kvstore_options_check("dist_device_sync", &fused), MX_OK);
    ck_assert_int_eq(mx_kvstore_options_check("local", &plain), MX_OK);
    expect_error(mx_kvstore_options_check("dist_async", &fused), MX_ERR_INVALID, "sends each key to its server alone");
    expect_error(mx_kvstore_options_check("local", &fused), MX_ERR_INVALID, "applies to dist_sync and dist_sync_device");
    expect_error(mx_kvstore_create_opts(rt, "local", &fused, &kv), MX_ERR_INVALID, "has no buckets");
    expect_error(mx_kvstore_options_check("dist_snyc", &plain), MX_ERR_INVALID, "did you mean 'dist_sync'");
    ck_assert_ptr_null(kv);
    mx_runtime_free(rt);
}
END_TEST

/* An updater that checks what it gets: w = w - 0.5 * merged. */
typedef struct probe {
    int calls;
    int last_key;
    float merged[N];
} probe;

static mx_status probe_updater(int key, mx_ndarray *merged, mx_ndarray *stored, void *user)
{
    probe *p = user;
    p->calls++;
    p->last_key = key;
    MX_TRY(mx_ndarray_to_host(merged, p->merged, sizeof(p->merged)));
    mx_ndarray *step = NULL;
    MX_TRY(mx_ndarray_create(mx_ndarray_runtime(stored), *mx_ndarray_shape(stored), MX_FLOAT32, mx_cpu(), &step));
    mx_status s = mx_nd_binary_scalar(MX_OP_MUL, step, merged, 0.5, false);
    if (s == MX_OK) s = mx_nd_sub(stored, stored, step);
    mx_ndarray_free(step);
    return s;
}

static mx_status failing_updater(int key, mx_ndarray *merged, mx_ndarray *stored, void *user)
{
    (void)merged, (void)stored, (void)user;
    return MX_ERROR(MX_ERR_RUNTIME, "updater refused key %d", key);
}

START_TEST(push_applies_the_updater)
{
    mx_runtime *rt = make_runtime();
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, "local", &kv), MX_OK);
    probe pr = {0};
    ck_assert_int_eq(mx_kvstore_set_updater(kv, probe_updater, &pr), MX_OK);
    const float w0[N] = {1, 1, 1, 1, 1, 1};
    mx_ndarray *w = array_f32(rt, w0);
    ck_assert_int_eq(mx_kvstore_init(kv, 7, w), MX_OK);
    mx_ndarray *g[2];
    for (int d = 0; d < 2; d++) {
        float v[N];
        for (int i = 0; i < N; i++) v[i] = gval(d, i, 1);
        g[d] = array_f32(rt, v);
    }
    ck_assert_int_eq(mx_kvstore_push(kv, 7, g, 2, -7), MX_OK);
    ck_assert_int_eq(pr.calls, 1);
    ck_assert_int_eq(pr.last_key, 7);
    for (int i = 0; i < N; i++) ck_assert_float_eq(pr.merged[i], gval(0, i, 1) + gval(1, i, 1));
    ck_assert_int_eq(mx_kvstore_pull(kv, 7, &w, 1, -7), MX_OK);
    float got[N];
    read_f32(w, got);
    for (int i = 0; i < N; i++) ck_assert_float_eq(got[i], 1.0f - 0.5f * (gval(0, i, 1) + gval(1, i, 1)));
    /* An updater's failure is the push's. */
    ck_assert_int_eq(mx_kvstore_set_updater(kv, failing_updater, NULL), MX_OK);
    expect_error(mx_kvstore_push(kv, 7, g, 2, 0), MX_ERR_RUNTIME, "updater refused key 7");
    /* Cleared: back to replacing. */
    ck_assert_int_eq(mx_kvstore_set_updater(kv, NULL, NULL), MX_OK);
    ck_assert_int_eq(mx_kvstore_push(kv, 7, g, 1, 0), MX_OK);
    ck_assert_int_eq(mx_kvstore_pull(kv, 7, &w, 1, 0), MX_OK);
    read_f32(w, got);
    for (int i = 0; i < N; i++) ck_assert_float_eq(got[i], gval(0, i, 1));
    for (int d = 0; d < 2; d++) mx_ndarray_free(g[d]);
    mx_ndarray_free(w);
    mx_kvstore_free(kv);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(optimizer_through_the_store_matches_direct_updates)
{
    /* Several keys, three devices' gradients, several rounds of Adam
     * through the store; the same optimizer applied directly to the sums
     * must give the same bits. */
    enum { KEYS = 5, DEVS = 3, ROUNDS = 4 };
    mx_runtime *rt = make_runtime();
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, "local", &kv), MX_OK);
    const char *k[] = {"learning_rate", "wd"}, *v[] = {"0.01", "0.001"};
    mx_optimizer *opt = NULL, *direct = NULL;
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "adam", k, v, 2, &opt), MX_OK);
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "adam", k, v, 2, &direct), MX_OK);
    ck_assert_int_eq(mx_kvstore_set_optimizer(kv, opt), MX_OK);
    mx_ndarray *dev_w[KEYS][DEVS], *grads[KEYS][DEVS], *ref_w[KEYS], *sum = array_f32(rt, NULL);
    for (int key = 0; key < KEYS; key++) {
        float w0[N];
        for (int i = 0; i < N; i++) w0[i] = (float)(0.1 * key - 0.05 * i);
        ref_w[key] = array_f32(rt, w0);
        ck_assert_int_eq(mx_kvstore_init(kv, key, ref_w[key]), MX_OK);
        for (int d = 0; d < DEVS; d++) {
            dev_w[key][d] = array_f32(rt, NULL);
            grads[key][d] = array_f32(rt, NULL);
        }
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (int key = 0; key < KEYS; key++) {
            float s[N] = {0};
            for (int d = 0; d < DEVS; d++) {
                float gv[N];
                for (int i = 0; i < N; i++) {
                    gv[i] = gval(d + key, i, round);
                    s[i] = d ? s[i] + gv[i] : gv[i];
                }
                ck_assert_int_eq(mx_ndarray_from_host(grads[key][d], gv, sizeof(gv)), MX_OK);
            }
            ck_assert_int_eq(mx_kvstore_push(kv, key, grads[key], DEVS, -key), MX_OK);
            ck_assert_int_eq(mx_kvstore_pull(kv, key, dev_w[key], DEVS, -key), MX_OK);
            ck_assert_int_eq(mx_ndarray_from_host(sum, s, sizeof(s)), MX_OK);
            ck_assert_int_eq(mx_optimizer_update(direct, key, ref_w[key], sum), MX_OK);
        }
    }
    for (int key = 0; key < KEYS; key++) {
        float want[N];
        read_f32(ref_w[key], want);
        for (int d = 0; d < DEVS; d++) {
            float got[N];
            read_f32(dev_w[key][d], got);
            ck_assert_msg(!memcmp(got, want, sizeof(got)), "key %d device %d differs", key, d);
            mx_ndarray_free(dev_w[key][d]);
            mx_ndarray_free(grads[key][d]);
        }
        ck_assert_int_eq(mx_optimizer_update_count(opt, key), ROUNDS);
        mx_ndarray_free(ref_w[key]);
    }
    mx_ndarray_free(sum);
    mx_kvstore_free(kv);
    mx_optimizer_free(opt);
    mx_optimizer_free(direct);
    mx_runtime_free(rt);
}
END_TEST

static mx_status slow_gradient(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    usleep(300000);
    float *g = mx_ndarray_data(payload);
    for (int i = 0; i < N; i++) g[i] = 1.0f;
    return MX_OK;
}

START_TEST(push_returns_before_the_gradient_exists)
{
    mx_runtime *rt = make_runtime();
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, "local", &kv), MX_OK);
    const char *k[] = {"learning_rate"}, *v[] = {"0.25"};
    mx_optimizer *opt = NULL;
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "sgd", k, v, 1, &opt), MX_OK);
    ck_assert_int_eq(mx_kvstore_set_optimizer(kv, opt), MX_OK);
    const float ones[N] = {1, 1, 1, 1, 1, 1};
    mx_ndarray *w = array_f32(rt, ones), *g[2] = {array_f32(rt, NULL), array_f32(rt, ones)};
    ck_assert_int_eq(mx_kvstore_init(kv, 0, w), MX_OK);
    ck_assert_int_eq(mx_ndarray_wait_to_read(w), MX_OK);
    /* The backward pass is still computing g[0]. */
    mx_engine_var *writes[1] = {mx_ndarray_var(g[0])};
    mx_engine_op op = {.fn = slow_gradient, .payload = g[0], .writes = writes, .n_writes = 1, .ctx = mx_cpu(),
                       .name = "slow backward"};
    double t0 = mx_time_seconds();
    ck_assert_int_eq(mx_engine_push(mx_runtime_engine(rt), &op), MX_OK);
    ck_assert_int_eq(mx_kvstore_push(kv, 0, g, 2, 0), MX_OK);
    ck_assert_int_eq(mx_kvstore_pull(kv, 0, &w, 1, 0), MX_OK);
    double pushed = mx_time_seconds() - t0;
    if (!mx_engine_is_naive(mx_runtime_engine(rt))) { /* NaiveEngine runs each push at once */
        ck_assert_msg(pushed < 0.15, "push + pull blocked for %.3f s", pushed);
        ck_assert_int_ge(mx_engine_pending(mx_runtime_engine(rt)), 3); /* gradient, sum, update, copy */
    }
    float got[N];
    read_f32(w, got);
    ck_assert_msg(mx_time_seconds() - t0 >= 0.29, "the update did not wait for the gradient");
    for (int i = 0; i < N; i++) ck_assert_float_eq(got[i], 0.5f); /* 1 - 0.25 * (1 + 1) */
    mx_ndarray_free(g[0]);
    mx_ndarray_free(g[1]);
    mx_ndarray_free(w);
    mx_kvstore_free(kv);
    mx_optimizer_free(opt);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(gradients_on_a_gpu_are_summed_on_the_cpu)
{
    mx_runtime *rt = make_runtime();
    mx_ndarray *gpu = NULL;
    if (mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, mx_gpu(0), &gpu) != MX_OK) {
        mx_runtime_free(rt);
        return; /* no GPU here */
    }
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, "local", &kv), MX_OK);
    mx_ndarray *w = array_f32(rt, NULL);
    ck_assert_int_eq(mx_kvstore_init(kv, 0, w), MX_OK);
    float a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = gval(0, i, 0), b[i] = gval(1, i, 0);
    ck_assert_int_eq(mx_ndarray_from_host(gpu, a, sizeof(a)), MX_OK);
    mx_ndarray *cpu = array_f32(rt, b), *vals[2] = {gpu, cpu};
    ck_assert_int_eq(mx_kvstore_push(kv, 0, vals, 2, 0), MX_OK);
    mx_ndarray *out_gpu = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, mx_gpu(0), &out_gpu), MX_OK);
    ck_assert_int_eq(mx_kvstore_pull(kv, 0, &out_gpu, 1, 0), MX_OK);
    float got[N];
    read_f32(out_gpu, got);
    for (int i = 0; i < N; i++) ck_assert_float_eq(got[i], a[i] + b[i]);
    mx_ndarray_free(gpu);
    mx_ndarray_free(cpu);
    mx_ndarray_free(out_gpu);
    mx_ndarray_free(w);
    mx_kvstore_free(kv);
    mx_runtime_free(rt);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kvstore");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, init_push_pull_without_updater);
    tcase_add_test(tc, kinds);
    tcase_add_test(tc, push_applies_the_updater);
    tcase_add_test(tc, optimizer_through_the_store_matches_direct_updates);
    tcase_add_test(tc, push_returns_before_the_gradient_exists);
    tcase_add_test(tc, gradients_on_a_gpu_are_summed_on_the_cpu);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
