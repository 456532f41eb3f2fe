/* test_kvstore.c - the local and device KVStores: init / push (gradients
 * summed) / pull with and without an updater, the optimizer as updater
 * (the device store on CPU arrays gives local's bits), engine overlap
 * (push returns before the gradient exists), errors; the device store's
 * choice of a key's home GPU (its GPU path: test_gpu_kvstore.c). */
#include "kvstore/kvstore.h"
#include "kvstore/kvstore_internal.h"
#include "support/kvcheck.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mx_ndarray *array_f32(mx_runtime *rt, const float *v) { return kv_array_on(rt, mx_cpu(), v); }

START_TEST(init_push_pull_without_updater)
{
    mx_runtime *rt = kv_make_runtime();
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, "local", &kv), MX_OK);
    ck_assert_str_eq(mx_kvstore_type(kv), "local");
    ck_assert_int_eq(mx_kvstore_rank(kv), 0);
    ck_assert_int_eq(mx_kvstore_num_workers(kv), 1);
    ck_assert_int_eq(mx_kvstore_barrier(kv), MX_OK);
    const float w0[KV_N] = {1, 2, 3, 4, 5, 6};
    mx_ndarray *w = array_f32(rt, w0);
    ck_assert_int_eq(mx_kvstore_init(kv, 3, w), MX_OK);
    /* The store keeps a copy: changing the source does not change it. */
    ck_assert_int_eq(mx_nd_fill(w, -1), MX_OK);
    mx_ndarray *outs[2] = {array_f32(rt, NULL), array_f32(rt, NULL)};
    ck_assert_int_eq(mx_kvstore_pull(kv, 3, outs, 2, 0), MX_OK);
    for (int k = 0; k < 2; k++) {
        float v[KV_N];
        kv_read(outs[k], v);
        ck_assert(!memcmp(v, w0, sizeof(v)));
    }
    /* Three gradients are summed and replace the value. */
    mx_ndarray *g[3];
    float want[KV_N];
    for (int d = 0; d < 3; d++) {
        float v[KV_N];
        for (int i = 0; i < KV_N; i++) v[i] = kv_grad(d, i, 0);
        g[d] = array_f32(rt, v);
    }
    for (int i = 0; i < KV_N; i++) want[i] = (kv_grad(0, i, 0) + kv_grad(1, i, 0)) + kv_grad(2, i, 0);
    ck_assert_int_eq(mx_kvstore_push(kv, 3, g, 3, 0), MX_OK);
    ck_assert_int_eq(mx_kvstore_pull(kv, 3, outs, 1, 0), MX_OK);
    float got[KV_N];
    kv_read(outs[0], got);
    ck_assert(!memcmp(got, want, sizeof(got)));
    /* A single value replaces it as it is. */
    ck_assert_int_eq(mx_kvstore_push(kv, 3, &g[1], 1, 0), MX_OK);
    ck_assert_int_eq(mx_kvstore_pull(kv, 3, &outs[1], 1, 0), MX_OK);
    kv_read(outs[1], got);
    for (int i = 0; i < KV_N; i++) ck_assert_float_eq(got[i], kv_grad(1, i, 0));
    ck_assert_ptr_nonnull(mx_kvstore_stored(kv, 3));
    ck_assert_ptr_null(mx_kvstore_stored(kv, 4));

    /* Errors. */
    kv_expect_error(mx_kvstore_init(kv, 3, w), MX_ERR_INVALID, "twice");
    kv_expect_error(mx_kvstore_push(kv, 4, g, 1, 0), MX_ERR_INVALID, "has not been initialised");
    kv_expect_error(mx_kvstore_pull(kv, 4, outs, 1, 0), MX_ERR_INVALID, "has not been initialised");
    kv_expect_error(mx_kvstore_push(kv, 3, g, 0, 0), MX_ERR_INVALID, "at least one");
    kv_expect_error(mx_kvstore_init(kv, -1, w), MX_ERR_INVALID, "out of range");
    mx_ndarray *small = NULL, *dbl = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(5), MX_FLOAT32, mx_cpu(), &small), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT64, mx_cpu(), &dbl), MX_OK);
    ck_assert_int_eq(mx_nd_fill(small, 0), MX_OK);
    ck_assert_int_eq(mx_nd_fill(dbl, 0), MX_OK);
    mx_ndarray *mixed[2] = {g[0], small};
    kv_expect_error(mx_kvstore_push(kv, 3, mixed, 2, 0), MX_ERR_INVALID, "shape");
    mixed[1] = dbl;
    kv_expect_error(mx_kvstore_push(kv, 3, mixed, 2, 0), MX_ERR_INVALID, "dtype");
    kv_expect_error(mx_kvstore_pull(kv, 3, &small, 1, 0), MX_ERR_INVALID, "shape");
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
    mx_runtime *rt = kv_make_runtime();
    mx_kvstore *kv = NULL;
    kv_expect_error(mx_kvstore_create(rt, "locl", &kv), MX_ERR_INVALID, "did you mean 'local'");
    kv_expect_error(mx_kvstore_create(rt, "nccl", &kv), MX_ERR_INVALID, "unknown kvstore");
    ck_assert_int_eq(mx_kvstore_create(rt, "device", &kv), MX_OK);
    ck_assert_str_eq(mx_kvstore_type(kv), "device");
    ck_assert_int_eq(mx_kvstore_num_workers(kv), 1);
    mx_kvstore_free(kv);
    kv = NULL;
    /* The MPI kinds need the job's communicator (test_dist.c, test_dist_async.c run them). */
    kv_expect_error(mx_kvstore_create(rt, "dist_sync", &kv), MX_ERR_INVALID, "start it with mpirun");
    kv_expect_error(mx_kvstore_create(rt, "dist_sync_device", &kv), MX_ERR_INVALID, "start it with mpirun");
    kv_expect_error(mx_kvstore_create(rt, "dist_async", &kv), MX_ERR_INVALID, "start it with mpirun");
    /* A bucket size is for the kinds that sum in buckets, refused elsewhere. */
    mx_kvstore_options fused = {.fusion_bytes = 4096}, plain = {0};
    ck_assert_int_eq(mx_kvstore_options_check("dist_sync", &fused), MX_OK);
    ck_assert_int_eq(mx_kvstore_options_check("dist_device_sync", &fused), MX_OK);
    ck_assert_int_eq(mx_kvstore_options_check("local", &plain), MX_OK);
    kv_expect_error(mx_kvstore_options_check("dist_async", &fused), MX_ERR_INVALID, "sends each key to its server alone");
    kv_expect_error(mx_kvstore_options_check("local", &fused), MX_ERR_INVALID, "applies to dist_sync and dist_sync_device");
    kv_expect_error(mx_kvstore_create_opts(rt, "local", &fused, &kv), MX_ERR_INVALID, "has no buckets");
    kv_expect_error(mx_kvstore_options_check("dist_snyc", &plain), MX_ERR_INVALID, "did you mean 'dist_sync'");
    ck_assert_ptr_null(kv);
    mx_runtime_free(rt);
}
END_TEST

/* An updater that checks what it gets: w = w - 0.5 * merged. */
typedef struct probe {
    int calls;
    int last_key;
    float merged[KV_N];
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
    mx_runtime *rt = kv_make_runtime();
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, "local", &kv), MX_OK);
    probe pr = {0};
    ck_assert_int_eq(mx_kvstore_set_updater(kv, probe_updater, &pr), MX_OK);
    const float w0[KV_N] = {1, 1, 1, 1, 1, 1};
    mx_ndarray *w = array_f32(rt, w0);
    ck_assert_int_eq(mx_kvstore_init(kv, 7, w), MX_OK);
    mx_ndarray *g[2];
    for (int d = 0; d < 2; d++) {
        float v[KV_N];
        for (int i = 0; i < KV_N; i++) v[i] = kv_grad(d, i, 1);
        g[d] = array_f32(rt, v);
    }
    ck_assert_int_eq(mx_kvstore_push(kv, 7, g, 2, -7), MX_OK);
    ck_assert_int_eq(pr.calls, 1);
    ck_assert_int_eq(pr.last_key, 7);
    for (int i = 0; i < KV_N; i++) ck_assert_float_eq(pr.merged[i], kv_grad(0, i, 1) + kv_grad(1, i, 1));
    ck_assert_int_eq(mx_kvstore_pull(kv, 7, &w, 1, -7), MX_OK);
    float got[KV_N];
    kv_read(w, got);
    for (int i = 0; i < KV_N; i++) ck_assert_float_eq(got[i], 1.0f - 0.5f * (kv_grad(0, i, 1) + kv_grad(1, i, 1)));
    /* An updater's failure is the push's. */
    ck_assert_int_eq(mx_kvstore_set_updater(kv, failing_updater, NULL), MX_OK);
    kv_expect_error(mx_kvstore_push(kv, 7, g, 2, 0), MX_ERR_RUNTIME, "updater refused key 7");
    /* Cleared: back to replacing. */
    ck_assert_int_eq(mx_kvstore_set_updater(kv, NULL, NULL), MX_OK);
    ck_assert_int_eq(mx_kvstore_push(kv, 7, g, 1, 0), MX_OK);
    ck_assert_int_eq(mx_kvstore_pull(kv, 7, &w, 1, 0), MX_OK);
    kv_read(w, got);
    for (int i = 0; i < KV_N; i++) ck_assert_float_eq(got[i], kv_grad(0, i, 1));
    for (int d = 0; d < 2; d++) mx_ndarray_free(g[d]);
    mx_ndarray_free(w);
    mx_kvstore_free(kv);
    mx_runtime_free(rt);
}
END_TEST

static const char *const cpu_kinds[] = {"local", "device"};

START_TEST(optimizer_through_the_store_matches_direct_updates)
{
    /* Several keys, three devices' gradients, several rounds of Adam
     * through the store; the same optimizer applied directly to the sums
     * must give the same bits (the device store on CPU arrays too). */
    enum { KEYS = 5, DEVS = 3, ROUNDS = 4 };
    mx_runtime *rt = kv_make_runtime();
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, cpu_kinds[_i], &kv), MX_OK);
    const char *k[] = {"learning_rate", "wd"}, *v[] = {"0.01", "0.001"};
    mx_optimizer *opt = NULL, *direct = NULL;
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "adam", k, v, 2, &opt), MX_OK);
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "adam", k, v, 2, &direct), MX_OK);
    ck_assert_int_eq(mx_kvstore_set_optimizer(kv, opt), MX_OK);
    mx_ndarray *dev_w[KEYS][DEVS], *grads[KEYS][DEVS], *ref_w[KEYS], *sum = array_f32(rt, NULL);
    for (int key = 0; key < KEYS; key++) {
        float w0[KV_N];
        for (int i = 0; i < KV_N; i++) w0[i] = (float)(0.1 * key - 0.05 * i);
        ref_w[key] = array_f32(rt, w0);
        ck_assert_int_eq(mx_kvstore_init(kv, key, ref_w[key]), MX_OK);
        for (int d = 0; d < DEVS; d++) {
            dev_w[key][d] = array_f32(rt, NULL);
            grads[key][d] = array_f32(rt, NULL);
        }
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (int key = 0; key < KEYS; key++) {
            float s[KV_N] = {0};
            for (int d = 0; d < DEVS; d++) {
                float gv[KV_N];
                for (int i = 0; i < KV_N; i++) {
                    gv[i] = kv_grad(d + key, i, round);
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
        float want[KV_N];
        kv_read(ref_w[key], want);
        for (int d = 0; d < DEVS; d++) {
            float got[KV_N];
            kv_read(dev_w[key][d], got);
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
    for (int i = 0; i < KV_N; i++) g[i] = 1.0f;
    return MX_OK;
}

START_TEST(push_returns_before_the_gradient_exists)
{
    mx_runtime *rt = kv_make_runtime();
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, "local", &kv), MX_OK);
    const char *k[] = {"learning_rate"}, *v[] = {"0.25"};
    mx_optimizer *opt = NULL;
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "sgd", k, v, 1, &opt), MX_OK);
    ck_assert_int_eq(mx_kvstore_set_optimizer(kv, opt), MX_OK);
    const float ones[KV_N] = {1, 1, 1, 1, 1, 1};
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
    float got[KV_N];
    kv_read(w, got);
    ck_assert_msg(mx_time_seconds() - t0 >= 0.29, "the update did not wait for the gradient");
    for (int i = 0; i < KV_N; i++) ck_assert_float_eq(got[i], 0.5f); /* 1 - 0.25 * (1 + 1) */
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
    mx_runtime *rt = kv_make_runtime();
    mx_ndarray *gpu = NULL;
    if (mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, mx_gpu(0), &gpu) != MX_OK) {
        mx_runtime_free(rt);
        return; /* no GPU here */
    }
    mx_kvstore *kv = NULL;
    ck_assert_int_eq(mx_kvstore_create(rt, "local", &kv), MX_OK);
    mx_ndarray *w = array_f32(rt, NULL);
    ck_assert_int_eq(mx_kvstore_init(kv, 0, w), MX_OK);
    float a[KV_N], b[KV_N];
    for (int i = 0; i < KV_N; i++) a[i] = kv_grad(0, i, 0), b[i] = kv_grad(1, i, 0);
    ck_assert_int_eq(mx_ndarray_from_host(gpu, a, sizeof(a)), MX_OK);
    mx_ndarray *cpu = array_f32(rt, b), *vals[2] = {gpu, cpu};
    ck_assert_int_eq(mx_kvstore_push(kv, 0, vals, 2, 0), MX_OK);
    mx_ndarray *out_gpu = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, mx_gpu(0), &out_gpu), MX_OK);
    ck_assert_int_eq(mx_kvstore_pull(kv, 0, &out_gpu, 1, 0), MX_OK);
    float got[KV_N];
    kv_read(out_gpu, got);
    for (int i = 0; i < KV_N; i++) ck_assert_float_eq(got[i], a[i] + b[i]);
    mx_ndarray_free(gpu);
    mx_ndarray_free(cpu);
    mx_ndarray_free(out_gpu);
    mx_ndarray_free(w);
    mx_kvstore_free(kv);
    mx_runtime_free(rt);
}
END_TEST

/* ------------------------------------------------------------ device store */

START_TEST(keys_go_home_to_the_least_loaded_gpu)
{
    size_t bytes[4] = {100, 0, 0, 40};
    ck_assert_int_eq(kv_device_pick_home(bytes, (const int[]){0, 1, 2, 3}, 4), 1); /* first of the ties */
    ck_assert_int_eq(kv_device_pick_home(bytes, (const int[]){2, 1, 0, 3}, 4), 2); /* in pushing order */
    ck_assert_int_eq(kv_device_pick_home(bytes, (const int[]){3, 0}, 2), 3);
    ck_assert_int_eq(kv_device_pick_home(bytes, (const int[]){0}, 1), 0);
    /* The placement shown ahead (mxtrain's dry run) makes the same choices:
     * MLP's keys pushed last layer first, over two GPUs. */
    const size_t mlp[6] = {40, 2560, 256, 32768, 512, 401408};
    int homes[6];
    mx_kvstore_device_homes(mlp, 6, 2, homes);
    const int want[6] = {0, 1, 0, 0, 1, 1};
    for (int i = 0; i < 6; i++) ck_assert_int_eq(homes[i], want[i]);
    /* Equal keys spread round-robin, as the store adds each key's bytes. */
    size_t load[3] = {0, 0, 0};
    for (int key = 0; key < 6; key++) {
        int home = kv_device_pick_home(load, (const int[]){0, 1, 2}, 3);
        ck_assert_int_eq(home, key % 3);
        load[home] += 24;
    }
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
    tcase_add_loop_test(tc, optimizer_through_the_store_matches_direct_updates, 0, 2);
    tcase_add_test(tc, push_returns_before_the_gradient_exists);
    tcase_add_test(tc, gradients_on_a_gpu_are_summed_on_the_cpu);
    tcase_add_test(tc, keys_go_home_to_the_least_loaded_gpu);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
