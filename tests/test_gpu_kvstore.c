/*
 * test_gpu_kvstore.c - the device store's GPU path (kvstore_device.c,
 * nccl.cu): where a GPU is visible, one GPU's gradients through the
 * store's NCCL reduce and broadcast (a group of one: the lent machines have
 * one GPU) with SGD on the key's home GPU, against the local store on the
 * CPU, and the lists it refuses; everywhere, the NCCL group's checks,
 * which refuse duplicates and GPUs this machine lacks before touching one.
 */
#include "device/device.h"
#include "kvstore/kvstore.h"
#include "support/kvcheck.h"
#include "kvstore/nccl.h"
#include "support/gpucheck.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mx_ndarray *array_f32(mx_runtime *rt, const float *v) { return kv_array_on(rt, mx_cpu(), v); }

START_TEST(nccl_groups_are_checked_before_any_gpu)
{
    kv_expect_error(mx_nccl_check_devices((const int[]){0, 1, 0}, 3), MX_ERR_INVALID, "gpu(0) is named twice");
    kv_expect_error(mx_nccl_check_devices((const int[]){0}, 0), MX_ERR_INVALID, "1 to 64 GPUs, not 0");
    kv_expect_error(mx_nccl_check_devices((const int[]){1, -2}, 2), MX_ERR_INVALID, "cannot take gpu(-2)");
    int many[MX_NCCL_MAX_DEVICES + 1];
    for (int i = 0; i <= MX_NCCL_MAX_DEVICES; i++) many[i] = i;
    kv_expect_error(mx_nccl_check_devices(many, MX_NCCL_MAX_DEVICES + 1), MX_ERR_INVALID, "not 65");
    ck_assert_int_eq(mx_nccl_check_devices(many, MX_NCCL_MAX_DEVICES), MX_OK);
    mx_nccl_group *g = (mx_nccl_group *)1;
    kv_expect_error(mx_nccl_group_create((const int[]){3, 3}, 2, &g), MX_ERR_INVALID, "named twice");
    ck_assert_ptr_null(g);
    /* More GPUs than this machine has: refused cleanly, naming the first
     * missing one (CUDA builds) or the build (CUDA=0). */
    const mx_device_ops *gpu = mx_device_get(MX_DEV_GPU);
    const int visible = gpu ? gpu->count() : 0;
    int devs[2] = {visible, visible + 1};
    ck_assert_int_eq(mx_nccl_group_create(devs, 2, &g), MX_ERR_UNSUPPORTED);
    ck_assert_ptr_null(g);
    char want[80];
    snprintf(want, sizeof(want), "gpu(%d) requested but %d GPU(s) are visible", visible, visible);
    ck_assert_msg(strstr(mx_last_error(), gpu ? want : "built without CUDA"), "%s", mx_last_error());
}
END_TEST

/* Where a GPU is visible: one GPU's gradients through the store's NCCL
 * reduce and broadcast (a group of one), with SGD on the key's home GPU,
 * against the local store on the CPU; a mixed list is refused. */
START_TEST(device_store_sums_gpu_arrays_through_nccl)
{
    mx_runtime *rt = kv_make_runtime();
    const char *k[] = {"learning_rate", "momentum"}, *v[] = {"0.1", "0.9"};
    mx_kvstore *kv[2] = {NULL, NULL};
    mx_optimizer *opt[2] = {NULL, NULL};
    mx_ndarray *w[2], *g[2], *host_out = array_f32(rt, NULL);
    const float w0[KV_N] = {1, -2, 3, -4, 5, -6};
    for (int s = 0; s < 2; s++) { /* 0: local on the CPU, 1: device on gpu(0) */
        ck_assert_int_eq(mx_kvstore_create(rt, s ? "device" : "local", &kv[s]), MX_OK);
        ck_assert_int_eq(mx_optimizer_create_kv(rt, "sgd", k, v, 2, &opt[s]), MX_OK);
        ck_assert_int_eq(mx_kvstore_set_optimizer(kv[s], opt[s]), MX_OK);
        mx_context ctx = s ? mx_gpu(0) : mx_cpu();
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, ctx, &w[s]), MX_OK);
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, ctx, &g[s]), MX_OK);
        ck_assert_int_eq(mx_ndarray_from_host(w[s], w0, sizeof(w0)), MX_OK);
        ck_assert_int_eq(mx_kvstore_init(kv[s], 7, w[s]), MX_OK);
    }
    for (int round = 0; round < 3; round++)
        for (int s = 0; s < 2; s++) {
            float gv[KV_N];
            for (int i = 0; i < KV_N; i++) gv[i] = kv_grad(0, i, round);
            ck_assert_int_eq(mx_ndarray_from_host(g[s], gv, sizeof(gv)), MX_OK);
            ck_assert_msg(mx_kvstore_push(kv[s], 7, &g[s], 1, 0) == MX_OK, "%s", mx_last_error());
            ck_assert_msg(mx_kvstore_pull(kv[s], 7, &w[s], 1, 0) == MX_OK, "%s", mx_last_error());
        }
    ck_assert_int_eq(mx_ndarray_context(mx_kvstore_stored(kv[1], 7)).dev_type, MX_DEV_GPU);
    float want[KV_N], got[KV_N], host[KV_N];
    kv_read(w[0], want);
    kv_read(w[1], got);
    ck_assert_int_eq(mx_kvstore_pull(kv[1], 7, &host_out, 1, 0), MX_OK); /* a host copy: plain copy */
    kv_read(host_out, host);
    for (int i = 0; i < KV_N; i++) {
        ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-6f * (1 + fabsf(want[i])), "[%d] gpu %g cpu %g", i, got[i], want[i]);
        ck_assert_float_eq(host[i], got[i]);
    }
    /* A CPU array beside a GPU one: the local store's job. */
    mx_ndarray *mixed[2] = {g[1], host_out};
    kv_expect_error(mx_kvstore_push(kv[1], 7, mixed, 2, 0), MX_ERR_INVALID, "mixes 1 GPU and 1 CPU arrays");
    kv_expect_error(mx_kvstore_push(kv[1], 7, &host_out, 1, 0), MX_ERR_INVALID, "lives on gpu(0)");
    for (int s = 0; s < 2; s++) {
        mx_kvstore_free(kv[s]);
        mx_optimizer_free(opt[s]);
        mx_ndarray_free(w[s]);
        mx_ndarray_free(g[s]);
    }
    mx_ndarray_free(host_out);
    mx_runtime_free(rt);
}
END_TEST

static void everywhere(TCase *tc) { tcase_add_test(tc, nccl_groups_are_checked_before_any_gpu); }
static void on_gpu(TCase *tc) { tcase_add_test(tc, device_store_sums_gpu_arrays_through_nccl); }

int main(void) { return gpucheck_main("kvstore", everywhere, on_gpu, 120, NULL); }
