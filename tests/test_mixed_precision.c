/*
 * test_mixed_precision.c - fit.dtype's graph and executor path on the CPU:
 * mx_graph_compute_in's Casts, dtype inference (BatchNorm's float32
 * parameters, the float32 loss), and training passes of float16 and
 * bfloat16 graphs (float32 kernels on float32 copies, half storage between
 * layers) against the float32 graph: the same values to within the
 * format's rounding, and not bit-equal (the half storage really rounds).
 */
#include "executor/executor.h"
#include "predict/predict.h"
#include "support/graphs.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* conv -> BN -> relu -> conv -> BN, + shortcut, relu, pool, concat with a
 * 1x1 branch, flatten, FC, softmax: every layer kind of the shipped nets. */
static mx_graph *small_net(void)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    mx_entry stem = test_entry(test_graph_op(g, "Convolution", "conv0", "kernel=(3,3);pad=(1,1);num_filter=4", &x, 1));
    mx_entry t = test_entry(test_graph_op(g, "BatchNorm", "bn1", "fix_gamma=False", &stem, 1));
    t = test_entry(test_graph_op(g, "Activation", "relu1", "act_type=relu", &t, 1));
    t = test_entry(test_graph_op(g, "Convolution", "conv1", "kernel=(3,3);pad=(1,1);num_filter=4", &t, 1));
    t = test_entry(test_graph_op(g, "BatchNorm", "bn2", "fix_gamma=False", &t, 1));
    mx_entry sum_in[2] = {t, stem};
    t = test_entry(test_graph_op(g, "ElementWiseSum", "res", "num_args=2", sum_in, 2));
    t = test_entry(test_graph_op(g, "Activation", "relu2", "act_type=relu", &t, 1));
    t = test_entry(test_graph_op(g, "Pooling", "pool", "kernel=(2,2);stride=(2,2);pool_type=max", &t, 1));
    mx_entry b = test_entry(test_graph_op(g, "Convolution", "side", "kernel=(1,1);num_filter=2", &t, 1));
    mx_entry cat_in[2] = {t, b};
    t = test_entry(test_graph_op(g, "Concat", "cat", "num_args=2;dim=1", cat_in, 2));
    t = test_entry(test_graph_op(g, "Flatten", "flat", NULL, &t, 1));
    t = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=5", &t, 1));
    t = test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &t, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &t, 1), MX_OK);
    return g;
}

static const mx_shape data_shape = {4, {6, 3, 8, 8}};

static mx_dtype dtype_of(const mx_graph *g, const mx_graph_shapes *sh, const char *node)
{
    uint32_t id = mx_graph_find(g, node);
    ck_assert_msg(id != MX_NO_NODE, "no node %s", node);
    return mx_graph_entry_dtype(sh, test_entry(id));
}

START_TEST(the_graph_casts_arguments_and_losses)
{
    mx_graph *g = small_net(), *h = NULL;
    ck_assert_int_eq(mx_graph_compute_in(g, MX_FLOAT16, &h), MX_OK);
    /* One Cast per computed-with argument, none for BatchNorm's own or the label. */
    const char *cast[] = {"data_float16", "conv0_weight_float16", "conv0_bias_float16", "conv1_weight_float16",
                          "side_weight_float16", "fc_weight_float16", "fc_bias_float16", "softmax_input_float32"};
    for (size_t i = 0; i < sizeof(cast) / sizeof(cast[0]); i++) {
        uint32_t id = mx_graph_find(h, cast[i]);
        ck_assert_msg(id != MX_NO_NODE && !strcmp(mx_graph_node(h, id)->op->name, "Cast"), "no Cast %s", cast[i]);
    }
    ck_assert_uint_eq(mx_graph_find(h, "bn1_gamma_float16"), MX_NO_NODE);
    ck_assert_uint_eq(mx_graph_find(h, "softmax_label_float16"), MX_NO_NODE);
    /* The arguments are the float32 graph's, in the same order. */
    uint32_t a[64], b[64];
    int na = mx_graph_list_arguments(g, a), nb = mx_graph_list_arguments(h, b);
    ck_assert_int_eq(na, nb);
    for (int i = 0; i < na; i++)
        ck_assert_str_eq(mx_graph_node(g, a[i])->name, mx_graph_node(h, b[i])->name);

    mx_graph_shapes sh;
    const char *names[] = {"data"};
    ck_assert_int_eq(mx_graph_infer_shapes(h, names, &data_shape, 1, &sh), MX_OK);
    ck_assert_msg(mx_graph_infer_types(h, NULL, NULL, 0, &sh) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(dtype_of(h, &sh, "data"), MX_FLOAT32);
    ck_assert_int_eq(dtype_of(h, &sh, "conv0_weight"), MX_FLOAT32);
    ck_assert_int_eq(dtype_of(h, &sh, "conv0"), MX_FLOAT16);
    ck_assert_int_eq(dtype_of(h, &sh, "bn1"), MX_FLOAT16);
    ck_assert_int_eq(dtype_of(h, &sh, "bn1_gamma"), MX_FLOAT32);
    ck_assert_int_eq(dtype_of(h, &sh, "bn1_moving_var"), MX_FLOAT32);
    ck_assert_int_eq(dtype_of(h, &sh, "cat"), MX_FLOAT16);
    ck_assert_int_eq(dtype_of(h, &sh, "fc"), MX_FLOAT16);
    ck_assert_int_eq(dtype_of(h, &sh, "softmax"), MX_FLOAT32);
    ck_assert_int_eq(dtype_of(h, &sh, "softmax_label"), MX_FLOAT32);
    mx_graph_shapes_free(&sh);
    mx_graph_free(h);

    ck_assert_int_eq(mx_graph_compute_in(g, MX_INT32, &h), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "float16 or bfloat16"));
    mx_graph_free(g);
}
END_TEST

START_TEST(type_conflicts_name_the_layer)
{
    /* A float16 data variable (its __dtype__, as MXNet's JSON writes it)
     * feeding a layer whose weight says float32. */
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    ck_assert_int_eq(mx_graph_set_attr(g, x.node, "__dtype__", "2"), MX_OK);
    uint32_t w;
    mx_attr wa = {"__dtype__", "0"};
    ck_assert_int_eq(mx_graph_add_variable(g, "fc_weight", &wa, 1, &w), MX_OK);
    mx_entry in[2] = {x, test_entry(w)};
    mx_entry y = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3;no_bias=True", in, 2));
    ck_assert_int_eq(mx_graph_set_heads(g, &y, 1), MX_OK);
    mx_graph_shapes sh;
    const char *names[] = {"data"};
    mx_shape s = MX_SHAPE(2, 4);
    ck_assert_int_eq(mx_graph_infer_shapes(g, names, &s, 1, &sh), MX_OK);
    ck_assert_int_eq(mx_graph_infer_types(g, NULL, NULL, 0, &sh), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "'fc'") && strstr(mx_last_error(), "float32") &&
                      strstr(mx_last_error(), "float16"),
                  "%s", mx_last_error());
    ck_assert_ptr_null(sh.dtypes);
    ck_assert_int_eq(mx_graph_set_attr(g, w, "__dtype__", "99"), MX_OK);
    ck_assert_int_eq(mx_graph_infer_types(g, NULL, NULL, 0, &sh), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "__dtype__ '99'"));
    mx_graph_shapes_free(&sh);
    mx_graph_free(g);
}
END_TEST

typedef struct run {
    mx_runtime *rt;
    mx_rng *rng; /* Dropout's: the same seed for every run */
    mx_executor *ex;
    mx_ndarray *args[32], *grads[32], *aux[32];
    int n_args, n_aux;
    float *out, *grad[32];
} run;

static uint64_t rng = 7;
static float uniform(float lo, float hi)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * 0x1.0p-53);
}

static float *host(mx_ndarray *a)
{
    size_t bytes = mx_ndarray_nbytes(a);
    float *p = malloc(bytes);
    ck_assert_msg(mx_ndarray_to_host(a, p, bytes) == MX_OK, "%s", mx_last_error());
    return p;
}

/* One training step of g (in dtype: the mixed-precision graph) from the
 * same random arguments. */
static void step_on(run *r, mx_graph *g, mx_dtype dtype, mx_shape shape)
{
    memset(r, 0, sizeof(*r));
    rng = 7;
    mx_engine_config cfg = mx_engine_config_default();
    cfg.cpu_workers = 2;
    ck_assert_int_eq(mx_runtime_create(&cfg, &r->rt), MX_OK);
    mx_graph *bound_g = g;
    if (dtype != MX_FLOAT32) ck_assert_int_eq(mx_graph_compute_in(g, dtype, &bound_g), MX_OK);
    mx_graph_shapes sh;
    const char *names[] = {"data"};
    ck_assert_int_eq(mx_graph_infer_shapes(g, names, &shape, 1, &sh), MX_OK);
    uint32_t ids[64];
    r->n_args = mx_graph_list_arguments(g, ids);
    r->n_aux = mx_graph_list_aux(g, ids + r->n_args);
    for (int i = 0; i < r->n_args + r->n_aux; i++) {
        const mx_shape *s = mx_graph_entry_shape(&sh, test_entry(ids[i]));
        const char *name = mx_graph_node(g, ids[i])->name;
        mx_ndarray *a;
        ck_assert_int_eq(mx_ndarray_create(r->rt, *s, MX_FLOAT32, mx_cpu(), &a), MX_OK);
        int64_t n = mx_ndarray_size(a);
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++)
            v[k] = strstr(name, "moving_var") ? 1.0f
                   : strstr(name, "moving_mean") ? 0.0f
                   : strstr(name, "label") ? (float)(k % 5)
                   : strstr(name, "gamma") ? uniform(0.5f, 1.5f)
                                           : uniform(-1.0f, 1.0f);
        ck_assert_int_eq(mx_ndarray_from_host(a, v, sizeof(float) * (size_t)n), MX_OK);
        free(v);
        if (i >= r->n_args) {
            r->aux[i - r->n_args] = a;
            continue;
        }
        r->args[i] = a;
        if (!strstr(name, "label")) ck_assert_int_eq(mx_ndarray_create(r->rt, *s, MX_FLOAT32, mx_cpu(), &r->grads[i]), MX_OK);
    }
    mx_graph_shapes_free(&sh);
    ck_assert_int_eq(mx_rng_create(r->rt, 1, &r->rng), MX_OK);
    mx_bind_config bc = {.ctx = mx_cpu(), .args = r->args, .arg_grads = r->grads, .aux = r->aux, .for_training = true,
                         .rng = r->rng};
    ck_assert_msg(mx_executor_bind(r->rt, bound_g, &bc, &r->ex) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_executor_forward(r->ex, true), MX_OK);
    ck_assert_int_eq(mx_executor_backward(r->ex, NULL), MX_OK);
    ck_assert_int_eq(mx_ndarray_dtype(mx_executor_output(r->ex, 0)), MX_FLOAT32);
    r->out = host(mx_executor_output(r->ex, 0));
    for (int i = 0; i < r->n_args; i++)
        if (r->grads[i]) r->grad[i] = host(r->grads[i]);
    if (bound_g != g) mx_graph_free(bound_g);
}

static void step(run *r, mx_graph *g, mx_dtype dtype) { step_on(r, g, dtype, data_shape); }

static void finish_run(run *r)
{
    mx_executor_free(r->ex);
    for (int i = 0; i < r->n_args; i++) {
        mx_ndarray_free(r->args[i]);
        mx_ndarray_free(r->grads[i]);
        free(r->grad[i]);
    }
    for (int i = 0; i < r->n_aux; i++) mx_ndarray_free(r->aux[i]);
    free(r->out);
    mx_rng_free(r->rng);
    mx_runtime_free(r->rt);
}

/* Largest difference relative to the tensor's largest value, or to
 * `floor` when that is larger (a gradient that is 0 but for rounding:
 * a bias before a BatchNorm). */
static double rel_diff(const float *a, const float *b, int64_t n, double floor, bool *differs)
{
    double scale = floor > 1e-30 ? floor : 1e-30, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(b[i]), "element %lld is not finite", (long long)i);
        scale = fmax(scale, fabs((double)a[i]));
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        *differs |= a[i] != b[i];
    }
    return diff / scale;
}

static void compare_precision(mx_dtype dtype, double tol)
{
    mx_graph *g = small_net();
    run full, half;
    step(&full, g, MX_FLOAT32);
    step(&half, g, dtype);
    bool differs = false;
    double d = rel_diff(full.out, half.out, mx_shape_size(&data_shape) / (3 * 64) * 5, 0, &differs);
    ck_assert_msg(d < tol, "%s: outputs differ by %g of their scale", mx_dtype_name(dtype), d);
    uint32_t ids[64];
    mx_graph_list_arguments(g, ids);
    double largest = 0; /* of any gradient: a hundredth of it is the floor of every scale */
    for (int i = 0; i < full.n_args; i++)
        for (int64_t k = 0; full.grad[i] && k < mx_ndarray_size(full.grads[i]); k++)
            largest = fmax(largest, fabs((double)full.grad[i][k]));
    for (int i = 0; i < full.n_args; i++) {
        if (!full.grad[i]) continue;
        double gd = rel_diff(full.grad[i], half.grad[i], mx_ndarray_size(full.grads[i]), 1e-2 * largest, &differs);
        ck_assert_msg(gd < tol, "%s: gradient of %s differs by %g of its scale", mx_dtype_name(dtype),
                      mx_graph_node(g, ids[i])->name, gd);
    }
    ck_assert_msg(differs, "%s: the half-precision run gave float32's bits: nothing was rounded", mx_dtype_name(dtype));
    finish_run(&full);
    finish_run(&half);
    mx_graph_free(g);
}

/* Every layer kind of the shipped configs (test_gpu_half's cases: the CPU
 * twin its GPU runs are compared with) in float16 and bfloat16 against
 * float32: data -> layer -> Flatten -> SoftmaxOutput. */
typedef struct layer_case {
    const char *op, *params;
    mx_shape data;
} layer_case;

static const layer_case layer_cases[] = {
    {"Convolution", "kernel=(3,3);pad=(1,1);num_filter=8", {4, {4, 3, 8, 8}}},
    {"Convolution", "kernel=(1,1);stride=(2,2);num_filter=6;no_bias=1", {4, {4, 8, 8, 8}}},
    {"Convolution", "kernel=(3,3);pad=(1,1);num_filter=8;num_group=4", {4, {2, 8, 6, 6}}},
    {"Deconvolution", "kernel=(3,3);stride=(2,2);num_filter=4", {4, {2, 3, 5, 5}}},
    {"BatchNorm", "fix_gamma=0", {4, {4, 6, 5, 5}}},
    {"BatchNorm", "use_global_stats=1", {4, {4, 6, 5, 5}}},
    {"Pooling", "pool_type=max;kernel=(3,3);stride=(2,2);pad=(1,1)", {4, {3, 4, 9, 9}}},
    {"Pooling", "pool_type=avg;global_pool=1;kernel=(1,1)", {4, {3, 5, 6, 6}}},
    {"Activation", "act_type=sigmoid", {4, {3, 4, 5, 5}}},
    {"Activation", "act_type=softrelu", {4, {3, 4, 5, 5}}},
    {"clip", "a_min=-0.5;a_max=0.5", {4, {3, 4, 5, 5}}},
    {"FullyConnected", "num_hidden=7", {2, {5, 12}}},
    {"LRN", "nsize=5", {4, {2, 7, 4, 4}}},
    {"Dropout", "p=0.5", {4, {3, 4, 5, 5}}},
};

static mx_graph *one_layer(const layer_case *lc)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    mx_entry y = test_entry(test_graph_op(g, lc->op, "layer", lc->params, &x, 1));
    y = test_entry(test_graph_op(g, "Flatten", "flatten", NULL, &y, 1));
    y = test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &y, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &y, 1), MX_OK);
    return g;
}

START_TEST(every_config_layer_runs_in_half_precision)
{
    const mx_dtype dtypes[2] = {MX_FLOAT16, MX_BFLOAT16};
    const double tol[2] = {1e-2, 6e-2};
    for (size_t c = 0; c < sizeof(layer_cases) / sizeof(layer_cases[0]); c++)
        for (int k = 0; k < 2; k++) {
            const layer_case *lc = &layer_cases[c];
            mx_graph *g = one_layer(lc);
            run full, half;
            step_on(&full, g, MX_FLOAT32, lc->data);
            step_on(&half, g, dtypes[k], lc->data);
            bool differs = false;
            const bool dropout = !strcmp(lc->op, "Dropout"); /* its masks: the same generator, the same draws */
            int64_t n_out = mx_ndarray_size(mx_executor_output(full.ex, 0));
            double d = rel_diff(full.out, half.out, n_out, 0, &differs);
            ck_assert_msg(d < tol[k], "%s %s(%s): outputs differ by %g", mx_dtype_name(dtypes[k]), lc->op, lc->params, d);
            for (int i = 0; i < full.n_args; i++) {
                if (!full.grad[i]) continue;
                const int64_t n = mx_ndarray_size(full.grads[i]);
                double gd = rel_diff(full.grad[i], half.grad[i], n, 0, &differs);
                if (!strcmp(lc->op, "clip") && gd >= tol[k]) {
                    /* An input within a rounding of a bound lands on the
                     * other side of it: its gradient flips between 0 and
                     * dy. Few may; the rest must agree. */
                    double scale = 1e-30;
                    int64_t flips = 0;
                    for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs((double)full.grad[i][e]));
                    for (int64_t e = 0; e < n; e++)
                        flips += fabs((double)full.grad[i][e] - half.grad[i][e]) > tol[k] * scale;
                    ck_assert_msg(flips <= n / 50, "%s clip: %lld of %lld gradients differ", mx_dtype_name(dtypes[k]),
                                  (long long)flips, (long long)n);
                    continue;
                }
                ck_assert_msg(gd < tol[k] || (dropout && gd < 2 * tol[k]), "%s %s(%s): gradient %d differs by %g",
                              mx_dtype_name(dtypes[k]), lc->op, lc->params, i, gd);
            }
            ck_assert_msg(differs, "%s %s(%s): float32's bits", mx_dtype_name(dtypes[k]), lc->op, lc->params);
            finish_run(&full);
            finish_run(&half);
            mx_graph_free(g);
        }
}
END_TEST

START_TEST(float16_training_matches_float32)
{
    compare_precision(MX_FLOAT16, 2e-2);
}
END_TEST

START_TEST(bfloat16_training_matches_float32)
{
    compare_precision(MX_BFLOAT16, 8e-2);
}
END_TEST

/* A power-of-two loss scale multiplies every gradient exactly. */
START_TEST(loss_scale_multiplies_every_gradient)
{
    mx_graph *g = small_net();
    run plain, scaled;
    step(&plain, g, MX_FLOAT32);
    memset(&scaled, 0, sizeof(scaled));
    step(&scaled, g, MX_FLOAT32);
    ck_assert_int_eq(mx_executor_set_loss_scale(scaled.ex, 0.0f), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "positive finite"));
    ck_assert_int_eq(mx_executor_set_loss_scale(scaled.ex, INFINITY), MX_ERR_INVALID);
    ck_assert_int_eq(mx_executor_set_loss_scale(scaled.ex, 1024.0f), MX_OK);
    ck_assert_int_eq(mx_executor_forward(scaled.ex, true), MX_OK);
    ck_assert_int_eq(mx_executor_backward(scaled.ex, NULL), MX_OK);
    int checked = 0;
    for (int i = 0; i < plain.n_args; i++) {
        if (!plain.grad[i]) continue;
        float *v = host(scaled.grads[i]);
        for (int64_t k = 0; k < mx_ndarray_size(plain.grads[i]); k++)
            ck_assert_msg(v[k] == 1024.0f * plain.grad[i][k], "argument %d element %lld: %g, not 1024 x %g", i,
                          (long long)k, (double)v[k], (double)plain.grad[i][k]);
        free(v);
        checked++;
    }
    ck_assert_int_ge(checked, 10);
    finish_run(&plain);
    finish_run(&scaled);
    mx_graph_free(g);
}
END_TEST

/* An index input of another dtype (MXNet's sym.var(dtype='int32') writes
 * __dtype__ 4): Embedding keeps its weight float32 (MXNet's rule), the
 * CPU kernel reads the indices through a float32 copy, and the rows are
 * the float32-index graph's. */
START_TEST(int32_indices_feed_embedding)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    ck_assert_int_eq(mx_graph_set_attr(g, x.node, "__dtype__", "4"), MX_OK);
    mx_entry y = test_entry(test_graph_op(g, "Embedding", "emb", "input_dim=10;output_dim=3", &x, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &y, 1), MX_OK);
    mx_graph_shapes sh;
    const char *names[] = {"data"};
    mx_shape ds = MX_SHAPE(2, 3);
    ck_assert_int_eq(mx_graph_infer_shapes(g, names, &ds, 1, &sh), MX_OK);
    ck_assert_msg(mx_graph_infer_types(g, NULL, NULL, 0, &sh) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(dtype_of(g, &sh, "data"), MX_INT32);
    ck_assert_int_eq(dtype_of(g, &sh, "emb_weight"), MX_FLOAT32);
    ck_assert_int_eq(dtype_of(g, &sh, "emb"), MX_FLOAT32);
    mx_graph_shapes_free(&sh);
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_ndarray *args[2];
    ck_assert_int_eq(mx_ndarray_create(rt, ds, MX_INT32, mx_cpu(), &args[0]), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(10, 3), MX_FLOAT32, mx_cpu(), &args[1]), MX_OK);
    int32_t idx[6] = {0, 9, 4, 4, 7, 1};
    float w[30];
    for (int i = 0; i < 30; i++) w[i] = (float)i * 0.5f - 3.0f;
    ck_assert_int_eq(mx_ndarray_from_host(args[0], idx, sizeof(idx)), MX_OK);
    ck_assert_int_eq(mx_ndarray_from_host(args[1], w, sizeof(w)), MX_OK);
    mx_bind_config bc = {.ctx = mx_cpu(), .args = args};
    mx_executor *ex = NULL;
    ck_assert_msg(mx_executor_bind(rt, g, &bc, &ex) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_executor_forward(ex, false), MX_OK);
    float out[18];
    ck_assert_int_eq(mx_ndarray_to_host(mx_executor_output(ex, 0), out, sizeof(out)), MX_OK);
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < 3; k++) ck_assert_float_eq(out[i * 3 + k], w[idx[i] * 3 + k]);
    mx_executor_free(ex);
    mx_ndarray_free(args[0]);
    mx_ndarray_free(args[1]);
    mx_runtime_free(rt);
    mx_graph_free(g);
}
END_TEST

/* A float16 network MXNet 1.9.1 wrote (scripts/interop/make-fp16-fixture.py:
 * Casts around float16 convolution, BatchNorm with float32 parameters,
 * float16 fully-connected; float16 weights in the .params file) predicts
 * MXNet's float32 probabilities for the same weights to within float16's
 * rounding; an inner float16 layer comes out as float32 values. */
#define FP16_FIXTURE "tests/fixtures/mxnet/fp16-convnet/"

static float *read_floats(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    float *v = malloc(sizeof(float) * n);
    ck_assert_uint_eq(fread(v, sizeof(float), n, f), n);
    fclose(f);
    return v;
}

START_TEST(mxnet_float16_model_predicts)
{
    mx_predictor *p = NULL;
    ck_assert_msg(mx_predictor_load(FP16_FIXTURE "model", 0, &p) == MX_OK, "%s", mx_last_error());
    mx_predictor_bind_opts o = {.ctx = mx_cpu(), .batch_size = 2, .sample = MX_SHAPE(3, 10, 10)};
    ck_assert_msg(mx_predictor_bind(p, &o) == MX_OK, "%s", mx_last_error());
    float *in = read_floats(FP16_FIXTURE "input.f32", 600), *want = read_floats(FP16_FIXTURE "expected.f32", 20);
    float got[20];
    ck_assert_msg(mx_predictor_push(p, in) == MX_OK, "%s", mx_last_error());
    ck_assert_msg(mx_predictor_pull(p, got) == MX_OK, "%s", mx_last_error());
    bool differs = false;
    for (int i = 0; i < 20; i++) {
        ck_assert_msg(fabsf(got[i] - want[i]) < 5e-3f, "probability %d: %g, MXNet's float32 %g", i, (double)got[i],
                      (double)want[i]);
        differs |= got[i] != want[i];
    }
    ck_assert_msg(differs, "float32's bits: the float16 layers did not round");
    /* An inner layer in float16, read as float32. */
    o.layer = "relu1";
    ck_assert_msg(mx_predictor_bind(p, &o) == MX_OK, "%s", mx_last_error());
    mx_shape os = mx_predictor_output_shape(p);
    ck_assert_int_eq(mx_shape_size(&os), 8 * 10 * 10);
    float *relu = malloc(sizeof(float) * 2 * 800);
    ck_assert_msg(mx_predictor_push(p, in) == MX_OK, "%s", mx_last_error());
    ck_assert_msg(mx_predictor_pull(p, relu) == MX_OK, "%s", mx_last_error());
    int positive = 0;
    for (int i = 0; i < 1600; i++) {
        ck_assert(relu[i] >= 0 && isfinite(relu[i]));
        positive += relu[i] > 0;
    }
    ck_assert_int_gt(positive, 400);
    free(relu);
    free(in);
    free(want);
    mx_predictor_free(p);
}
END_TEST

/* Numerics checks read half tensors: a value past float16's range
 * becomes inf at the data's Cast, which the check names. */
START_TEST(numerics_checks_read_half_tensors)
{
    mx_graph *g = small_net();
    run r;
    step(&r, g, MX_FLOAT16);
    float big[6 * 3 * 8 * 8];
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) big[i] = i == 7 ? 1e6f : 0.5f;
    ck_assert_int_eq(mx_ndarray_from_host(r.args[0], big, sizeof(big)), MX_OK); /* data: the first argument */
    ck_assert_int_eq(mx_executor_set_check_numerics(r.ex, true), MX_OK);
    ck_assert_int_eq(mx_executor_forward(r.ex, true), MX_ERR_RUNTIME);
    ck_assert_msg(strstr(mx_last_error(), "data_float16: forward output has Inf (1 of 1152 values, first at index 7)"),
                  "%s", mx_last_error());
    finish_run(&r);
    mx_graph_free(g);
}
END_TEST

START_TEST(arrays_must_have_the_graphs_dtypes)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    mx_entry y = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &y, 1), MX_OK);
    mx_runtime *rt;
    mx_engine_config cfg = mx_engine_config_default();
    ck_assert_int_eq(mx_runtime_create(&cfg, &rt), MX_OK);
    mx_ndarray *args[3];
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 4), MX_FLOAT16, mx_cpu(), &args[0]), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(3, 4), MX_FLOAT32, mx_cpu(), &args[1]), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), &args[2]), MX_OK);
    mx_bind_config bc = {.ctx = mx_cpu(), .args = args};
    mx_executor *ex = NULL;
    ck_assert_int_eq(mx_executor_bind(rt, g, &bc, &ex), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "'data' is a float16 array; the graph computes it in float32"), "%s",
                  mx_last_error());
    ck_assert_ptr_null(ex);
    for (int i = 0; i < 3; i++) mx_ndarray_free(args[i]);
    mx_runtime_free(rt);
    mx_graph_free(g);
}
END_TEST


int main(void)
{
    Suite *s = suite_create("mixed_precision");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, the_graph_casts_arguments_and_losses);
    tcase_add_test(tc, type_conflicts_name_the_layer);
    tcase_add_test(tc, every_config_layer_runs_in_half_precision);
    tcase_add_test(tc, float16_training_matches_float32);
    tcase_add_test(tc, bfloat16_training_matches_float32);
    tcase_add_test(tc, loss_scale_multiplies_every_gradient);
    tcase_add_test(tc, numerics_checks_read_half_tensors);
    tcase_add_test(tc, arrays_must_have_the_graphs_dtypes);
    tcase_add_test(tc, mxnet_float16_model_predicts);
    tcase_add_test(tc, int32_indices_feed_embedding);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
