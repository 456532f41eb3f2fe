/*
 * test_gpu_optimizer.c - every optimizer's fused GPU update against its
 * CPU kernel: the same weights and gradients, several steps (so the
 * states' updates count too), each parameter combination that changes
 * the formula (momentum or none, clipping, weight decay, centered RMSProp
 * with clipped weights, Adam's bias correction), weights equal within
 * 1e-5 relative after every step. Skips loudly without a GPU.
 */
#include "optimizer/optimizer.h"
#include "support/gpucheck.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct opt_case {
    const char *name;
    const char *keys[6], *values[6];
    int n;
} opt_case;

static const opt_case cases[] = {
    {"sgd", {"learning_rate", "wd"}, {"0.1", "0.01"}, 2},
    {"sgd", {"learning_rate", "momentum", "wd", "rescale_grad"}, {"0.1", "0.9", "0.001", "0.5"}, 4},
    {"sgd", {"learning_rate", "momentum", "clip_gradient"}, {"0.1", "0.9", "0.3"}, 3},
    {"nag", {"learning_rate", "wd", "clip_gradient"}, {"0.1", "0.01", "0.4"}, 3},
    {"nag", {"learning_rate", "momentum", "wd"}, {"0.1", "0.9", "0.01"}, 3},
    {"adam", {"learning_rate", "wd"}, {"0.01", "0.001"}, 2},
    {"adam", {"learning_rate", "beta1", "beta2", "clip_gradient"}, {"0.01", "0.8", "0.99", "0.5"}, 4},
    {"rmsprop", {"learning_rate", "wd"}, {"0.01", "0.01"}, 2},
    {"rmsprop", {"learning_rate", "centered", "clip_weights", "gamma2"}, {"0.01", "1", "0.6", "0.8"}, 4},
    {"adagrad", {"learning_rate", "wd", "clip_gradient"}, {"0.1", "0.01", "0.5"}, 3},
};

static uint64_t state = 4242;
static float uniform(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (float)((state >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

START_TEST(test_updates_match_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    const opt_case *c = &cases[_i];
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    const int64_t n = 70001; /* not a multiple of any block */
    float *w = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) w[i] = uniform();
    mx_optimizer *opt[2];
    mx_ndarray *weight[2], *grad[2];
    for (int d = 0; d < 2; d++) {
        mx_context ctx = d ? mx_gpu(0) : mx_cpu();
        ck_assert_msg(mx_optimizer_create_kv(rt, c->name, c->keys, c->values, c->n, &opt[d]) == MX_OK, "%s",
                      mx_last_error());
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(n), MX_FLOAT32, ctx, &weight[d]), MX_OK);
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(n), MX_FLOAT32, ctx, &grad[d]), MX_OK);
        ck_assert_int_eq(mx_ndarray_from_host(weight[d], w, sizeof(float) * n), MX_OK);
    }
    double worst = 0;
    for (int step = 0; step < 4; step++) {
        for (int64_t i = 0; i < n; i++) g[i] = uniform();
        for (int d = 0; d < 2; d++) {
            ck_assert_int_eq(mx_ndarray_from_host(grad[d], g, sizeof(float) * n), MX_OK);
            ck_assert_msg(mx_optimizer_update(opt[d], 0, weight[d], grad[d]) == MX_OK, "%s", mx_last_error());
        }
        ck_assert_msg(mx_ndarray_to_host(weight[0], a, sizeof(float) * n) == MX_OK, "%s", mx_last_error());
        ck_assert_msg(mx_ndarray_to_host(weight[1], b, sizeof(float) * n) == MX_OK, "%s", mx_last_error());
        for (int64_t i = 0; i < n; i++) {
            double err = fabs((double)a[i] - b[i]), tol = 1e-6 + 1e-5 * fabs(a[i]);
            ck_assert_msg(err <= tol, "%s case %d step %d w[%lld]: gpu %.9g cpu %.9g", c->name, _i, step,
                          (long long)i, b[i], a[i]);
            if (err / tol > worst) worst = err / tol;
        }
        ck_assert_msg(memcmp(a, w, sizeof(float) * 16) != 0, "%s: the update changed nothing", c->name);
    }
    printf("GPU %s (case %d): 4 updates of %lld weights match the CPU (worst %.3g of tolerance)\n", c->name, _i,
           (long long)n, worst);
    for (int d = 0; d < 2; d++) {
        mx_optimizer_free(opt[d]);
        mx_ndarray_free(weight[d]);
        mx_ndarray_free(grad[d]);
    }
    ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(rt)), MX_OK);
    mx_runtime_free(rt);
    free(w), free(g), free(a), free(b);
}
END_TEST

/* Everywhere: a GPU weight with a CPU gradient is an error, not a crash. */
START_TEST(test_mixed_devices_refused)
{
    if (!gpucheck_gpu_visible()) return;
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_optimizer *opt;
    const char *k[] = {"learning_rate"}, *v[] = {"0.1"};
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "sgd", k, v, 1, &opt), MX_OK);
    mx_ndarray *w, *g;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(8), MX_FLOAT32, mx_gpu(0), &w), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(8), MX_FLOAT32, mx_cpu(), &g), MX_OK);
    ck_assert_int_eq(mx_optimizer_update(opt, 0, w, g), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "weight on gpu(0), gradient on cpu(0)"), "%s", mx_last_error());
    mx_optimizer_free(opt);
    mx_ndarray_free(w);
    mx_ndarray_free(g);
    mx_runtime_free(rt);
}
END_TEST

/* mx_optimizer_update_many on one GPU (one engine operation) gives the
 * bits of one mx_optimizer_update per parameter, over several steps, with
 * a learning-rate multiplier per parameter and keys out of list order. */
START_TEST(test_update_many_equals_one_by_one)
{
    if (!gpucheck_gpu_visible()) return;
    const opt_case *c = &cases[_i];
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    enum { PARAMS = 5 };
    const int64_t sizes[PARAMS] = {1, 257, 70001, 3, 4096};
    mx_optimizer *opt[2];
    mx_ndarray *weight[2][PARAMS], *grad[2][PARAMS];
    int index[PARAMS];
    for (int way = 0; way < 2; way++) {
        ck_assert_int_eq(mx_optimizer_create_kv(rt, c->name, c->keys, c->values, c->n, &opt[way]), MX_OK);
        for (int p = 0; p < PARAMS; p++) {
            index[p] = PARAMS - 1 - p; /* keys in another order than the list */
            ck_assert_int_eq(mx_optimizer_set_lr_mult(opt[way], index[p], 1.0 + 0.25 * p), MX_OK);
            ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(sizes[p]), MX_FLOAT32, mx_gpu(0), &weight[way][p]),
                             MX_OK);
            ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(sizes[p]), MX_FLOAT32, mx_gpu(0), &grad[way][p]), MX_OK);
        }
    }
    for (int p = 0; p < PARAMS; p++) {
        float *w = malloc(sizeof(float) * (size_t)sizes[p]);
        for (int64_t i = 0; i < sizes[p]; i++) w[i] = uniform();
        for (int way = 0; way < 2; way++)
            ck_assert_int_eq(mx_ndarray_from_host(weight[way][p], w, sizeof(float) * (size_t)sizes[p]), MX_OK);
        free(w);
    }
    for (int step = 0; step < 3; step++) {
        for (int p = 0; p < PARAMS; p++) {
            float *g = malloc(sizeof(float) * (size_t)sizes[p]);
            for (int64_t i = 0; i < sizes[p]; i++) g[i] = uniform();
            for (int way = 0; way < 2; way++)
                ck_assert_int_eq(mx_ndarray_from_host(grad[way][p], g, sizeof(float) * (size_t)sizes[p]), MX_OK);
            free(g);
        }
        for (int p = 0; p < PARAMS; p++)
            ck_assert_msg(mx_optimizer_update(opt[0], index[p], weight[0][p], grad[0][p]) == MX_OK, "%s",
                          mx_last_error());
        ck_assert_msg(mx_optimizer_update_many(opt[1], PARAMS, index, weight[1], grad[1]) == MX_OK, "%s",
                      mx_last_error());
        for (int p = 0; p < PARAMS; p++) {
            size_t bytes = sizeof(float) * (size_t)sizes[p];
            float *a = malloc(bytes), *b = malloc(bytes);
            ck_assert_int_eq(mx_ndarray_to_host(weight[0][p], a, bytes), MX_OK);
            ck_assert_int_eq(mx_ndarray_to_host(weight[1][p], b, bytes), MX_OK);
            ck_assert_msg(memcmp(a, b, bytes) == 0, "%s case %d step %d parameter %d: update_many differs", c->name,
                          _i, step, p);
            free(a), free(b);
        }
    }
    for (int p = 0; p < PARAMS; p++)
        ck_assert_int_eq(mx_optimizer_update_count(opt[1], index[p]), mx_optimizer_update_count(opt[0], index[p]));
    for (int way = 0; way < 2; way++) {
        mx_optimizer_free(opt[way]);
        for (int p = 0; p < PARAMS; p++) mx_ndarray_free(weight[way][p]), mx_ndarray_free(grad[way][p]);
    }
    mx_runtime_free(rt);
}
END_TEST

static void tests_on_gpu(TCase *tc)
{
    tcase_add_loop_test(tc, test_updates_match_cpu, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, test_mixed_devices_refused);
    tcase_add_loop_test(tc, test_update_many_equals_one_by_one, 0, (int)(sizeof(cases) / sizeof(cases[0])));
}

int main(void)
{
    return gpucheck_main("optimizer", NULL, tests_on_gpu, 120, NULL);
}
