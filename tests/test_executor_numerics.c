/*
 * test_executor_numerics.c - mx_executor_set_check_numerics: the first
 * NaN/Inf a layer writes stops forward or backward with a message naming
 * that layer, the direction, the tensor and whether the layer's inputs were
 * finite; unchecked runs neither wait nor fail, and checked runs give
 * bit-identical results.
 *
 * The oracle is arithmetic on chosen values: data of ones and weights of
 * fives make fc1 write 15 everywhere, so 15 * 1e38 overflows float32 in the
 * scaling layer and nowhere before it; the expected counts and first
 * indices follow from the shapes.
 */
#include "executor/executor.h"
#include "support/graphs.h"

#include <check.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static void set_heads(mx_graph *g, mx_entry h) { ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK); }

/* data -> fc1 -> scale (x * scalar) -> fc2 -> SoftmaxOutput */
static mx_graph *scaled_mlp(const char *scalar)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    char p[64];
    snprintf(p, sizeof(p), "scalar=%s", scalar);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc1", "num_hidden=2", &x, 1));
    x = test_entry(test_graph_op(g, "_mul_scalar", "scale", p, &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc2", "num_hidden=3", &x, 1));
    set_heads(g, test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &x, 1)));
    return g;
}

/* data -> fc1 -> fc2, fc2 a non-loss head (backward takes a head gradient). */
static mx_graph *regression_mlp(void)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc1", "num_hidden=2", &x, 1));
    set_heads(g, test_entry(test_graph_op(g, "FullyConnected", "fc2", "num_hidden=2", &x, 1)));
    return g;
}

/* A bound network; arguments and aux states indexed as the graph lists them. */
typedef struct bound {
    mx_runtime *rt;
    mx_graph *g;
    int n_args, n_aux;
    uint32_t ids[128];
    mx_ndarray *args[32], *grads[32], *aux[8];
    mx_executor *ex;
} bound;

static uint64_t rng_state = 1;
static float uniform(float lo, float hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 11) * 0x1.0p-53);
}

static void fill_random(mx_ndarray *a, float lo, float hi)
{
    int64_t n = mx_ndarray_size(a);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = uniform(lo, hi);
    ck_assert_int_eq(mx_ndarray_from_host(a, v, sizeof(float) * (size_t)n), MX_OK);
    free(v);
}

/* Binds g: labels k % 3, every other argument uniform in [-1, 1) (gamma in
 * [0.5, 1.5)), moving mean 0 and var 1; gradients for all but labels when
 * training (grad_req add when `add`). naive: the synchronous engine. */
/* Binds with folding unless the test sets this (numerics tracing binds
 * unfolded: mx_bind_config.no_folding). */
static bool bind_unfolded;

static void bind_opts(bound *b, mx_graph *g, mx_shape data_shape, bool training, bool naive, bool add)
{
    memset(b, 0, sizeof(*b));
    rng_state = 7;
    mx_engine_config cfg = mx_engine_config_default();
    cfg.naive = naive;
    cfg.cpu_workers = naive ? 1 : 2;
    ck_assert_int_eq(mx_runtime_create(&cfg, &b->rt), MX_OK);
    b->g = g;
    mx_graph_shapes sh;
    const char *names[] = {"data"};
    ck_assert_msg(mx_graph_infer_shapes(g, names, &data_shape, 1, &sh) == MX_OK, "%s", mx_last_error());
    b->n_args = mx_graph_list_arguments(g, b->ids);
    b->n_aux = mx_graph_list_aux(g, b->ids + b->n_args);
    mx_grad_req reqs[32] = {0};
    for (int i = 0; i < b->n_args + b->n_aux; i++) {
        const mx_shape *s = mx_graph_entry_shape(&sh, test_entry(b->ids[i]));
        const char *name = mx_graph_node(g, b->ids[i])->name;
        mx_ndarray *a;
        ck_assert_int_eq(mx_ndarray_create(b->rt, *s, MX_FLOAT32, mx_cpu(), &a), MX_OK);
        if (i >= b->n_args) {
            ck_assert_int_eq(mx_nd_fill(a, strstr(name, "moving_var") ? 1.0 : 0.0), MX_OK);
            b->aux[i - b->n_args] = a;
            continue;
        }
        b->args[i] = a;
        if (strstr(name, "label")) {
            int64_t n = mx_ndarray_size(a);
            float *lab = malloc(sizeof(float) * (size_t)n);
            for (int64_t k = 0; k < n; k++) lab[k] = (float)(k % 3);
            ck_assert_int_eq(mx_ndarray_from_host(a, lab, sizeof(float) * (size_t)n), MX_OK);
            free(lab);
            continue;
        }
        fill_random(a, strstr(name, "gamma") ? 0.5f : -1.0f, strstr(name, "gamma") ? 1.5f : 1.0f);
        ck_assert_int_eq(mx_ndarray_create(b->rt, *s, MX_FLOAT32, mx_cpu(), &b->grads[i]), MX_OK);
        ck_assert_int_eq(mx_nd_fill(b->grads[i], 0.0), MX_OK);
        reqs[i] = add ? MX_GRAD_ADD : MX_GRAD_WRITE;
    }
    mx_graph_shapes_free(&sh);
    mx_bind_config bc = {.ctx = mx_cpu(), .args = b->args, .arg_grads = training ? b->grads : NULL,
                         .grad_reqs = training ? reqs : NULL, .aux = b->aux, .for_training = training,
                         .no_folding = bind_unfolded};
    ck_assert_msg(mx_executor_bind(b->rt, g, &bc, &b->ex) == MX_OK, "%s", mx_last_error());
}

static void bind_net(bound *b, mx_graph *g, mx_shape data_shape, bool training)
{
    bind_opts(b, g, data_shape, training, false, false);
}

static void unbind(bound *b)
{
    ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(b->rt)), MX_OK);
    mx_executor_free(b->ex);
    for (int i = 0; i < b->n_args; i++) {
        mx_ndarray_free(b->args[i]);
        mx_ndarray_free(b->grads[i]);
    }
    for (int i = 0; i < b->n_aux; i++) mx_ndarray_free(b->aux[i]);
    mx_runtime_free(b->rt);
    mx_graph_free(b->g);
}

static mx_ndarray *arg(bound *b, const char *name)
{
    for (int i = 0; i < b->n_args; i++)
        if (!strcmp(mx_graph_node(b->g, b->ids[i])->name, name)) return b->args[i];
    ck_abort_msg("no argument %s", name);
    return NULL;
}

static void set_all(mx_ndarray *a, double v) { ck_assert_int_eq(mx_nd_fill(a, v), MX_OK); }

static void set_one(mx_ndarray *a, int64_t index, float v)
{
    int64_t n = mx_ndarray_size(a);
    float *h = malloc(sizeof(float) * (size_t)n);
    ck_assert_int_eq(mx_ndarray_to_host(a, h, sizeof(float) * (size_t)n), MX_OK);
    h[index] = v;
    ck_assert_int_eq(mx_ndarray_from_host(a, h, sizeof(float) * (size_t)n), MX_OK);
    free(h);
}

static int64_t count_nonfinite(mx_ndarray *a)
{
    int64_t n = mx_ndarray_size(a), bad = 0;
    float *h = malloc(sizeof(float) * (size_t)n);
    ck_assert_int_eq(mx_ndarray_to_host(a, h, sizeof(float) * (size_t)n), MX_OK);
    for (int64_t i = 0; i < n; i++) bad += !isfinite(h[i]);
    free(h);
    return bad;
}

/* fc1 writes 15 everywhere. */
static void fifteen(bound *b)
{
    set_all(arg(b, "data"), 1.0);
    set_all(arg(b, "fc1_weight"), 5.0);
    set_all(arg(b, "fc1_bias"), 0.0);
}

static void expect_error(mx_status s, const char *message)
{
    ck_assert_msg(s == MX_ERR_RUNTIME, "status %d (%s), wanted a numerics error", (int)s, mx_last_error());
    ck_assert_str_eq(mx_last_error(), message);
}

/* (a) The layer that overflows is named, with finite inputs; fc2, which
 * reads its Inf, is not (the pass stops there). Both engines, training and
 * prediction binds (prediction runs scale in place over fc1's output). */
START_TEST(test_forward_overflow_names_the_layer)
{
    for (int run = 0; run < 4; run++) {
        bool naive = run & 1, training = run & 2;
        bound b;
        bind_opts(&b, scaled_mlp("1e38"), MX_SHAPE(4, 3), training, naive, false);
        fifteen(&b);
        mx_ndarray *out = mx_executor_output(b.ex, 0);
        set_all(out, 42.0);
        ck_assert(!mx_executor_check_numerics(b.ex));
        ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
        ck_assert(mx_executor_check_numerics(b.ex));
        expect_error(mx_executor_forward(b.ex, true),
                     "scale: forward output has Inf (8 of 8 values, first at index 0); its inputs are finite");
        ck_assert_ptr_null(strstr(mx_last_error(), "fc2"));
        /* Stopped before fc2 and the loss (the output keeps its 42s); no
         * error left behind on the engine. */
        ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(b.rt)), MX_OK);
        float o[12];
        ck_assert_int_eq(mx_ndarray_to_host(out, o, sizeof(o)), MX_OK);
        for (int i = 0; i < 12; i++) ck_assert_float_eq(o[i], 42.0f);
        /* The same again: every call checks. */
        expect_error(mx_executor_forward(b.ex, false),
                     "scale: forward output has Inf (8 of 8 values, first at index 0); its inputs are finite");
        /* Both kinds at once, from a bias that holds both. */
        set_all(arg(&b, "data"), 0.0);
        set_one(arg(&b, "fc1_bias"), 0, INFINITY);
        set_one(arg(&b, "fc1_bias"), 1, NAN);
        expect_error(mx_executor_forward(b.ex, false),
                     "fc1: forward output has NaN and Inf (4 NaN, 4 Inf of 8 values, first at index 0); its input "
                     "'fc1_bias' has NaN and Inf (1 NaN, 1 Inf of 2 values, first at index 0)");
        unbind(&b);
    }
}
END_TEST

/* (b) A non-finite parameter (what a bad update leaves) is named as the
 * input of the layer reading it; likewise bad data. */
START_TEST(test_nan_parameter_is_named_as_input)
{
    bound b;
    bind_net(&b, scaled_mlp("1"), MX_SHAPE(4, 3), true);
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
    ck_assert_msg(mx_executor_forward(b.ex, true) == MX_OK, "%s", mx_last_error());
    /* fc2_weight is (3,2): index 5 is row 2, so output column 2 is NaN. */
    set_one(arg(&b, "fc2_weight"), 5, NAN);
    expect_error(mx_executor_forward(b.ex, true),
                 "fc2: forward output has NaN (4 of 12 values, first at index 2); its input 'fc2_weight' has NaN "
                 "(1 of 6 values, first at index 5)");
    set_one(arg(&b, "fc2_weight"), 5, 0.5f);
    ck_assert_msg(mx_executor_forward(b.ex, true) == MX_OK, "%s", mx_last_error());
    /* data (4,3): index 4 is row 1, so fc1's row 1 is NaN. */
    set_one(arg(&b, "data"), 4, NAN);
    expect_error(mx_executor_forward(b.ex, true),
                 "fc1: forward output has NaN (2 of 8 values, first at index 2); its input 'data' has NaN "
                 "(1 of 12 values, first at index 4)");
    unbind(&b);
}
END_TEST

/* (c) Backward: a huge but finite head gradient overflows fc2's weight
 * gradient (sum over the batch of 1e38 * 15); the data gradient before it
 * (2 * 1e38 * 0.01) stays finite. */
START_TEST(test_backward_overflow_names_the_layer)
{
    bound b;
    bind_net(&b, regression_mlp(), MX_SHAPE(4, 3), true);
    fifteen(&b);
    set_all(arg(&b, "fc2_weight"), 0.01);
    mx_ndarray *hg;
    ck_assert_int_eq(mx_ndarray_create(b.rt, MX_SHAPE(4, 2), MX_FLOAT32, mx_cpu(), &hg), MX_OK);
    set_all(hg, 1e38);
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
    ck_assert_msg(mx_executor_forward(b.ex, true) == MX_OK, "%s", mx_last_error());
    expect_error(mx_executor_backward(b.ex, &hg),
                 "fc2: backward gradient of 'fc2_weight' has Inf (4 of 4 values, first at index 0); its output "
                 "gradient and inputs are finite");
    /* An Inf head gradient is the output gradient's fault: hg[1][1] makes
     * row 1 of the data gradient Inf. */
    set_all(hg, 1.0);
    set_one(hg, 3, INFINITY);
    expect_error(mx_executor_backward(b.ex, &hg),
                 "fc2: backward gradient of 'fc1_output' has Inf (2 of 8 values, first at index 2); its output "
                 "gradient has Inf (1 of 8 values, first at index 3)");
    /* Finite again: backward runs through, gradients as unchecked. */
    set_all(hg, 1.0);
    ck_assert_msg(mx_executor_backward(b.ex, &hg) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(count_nonfinite(b.grads[1]), 0);
    mx_ndarray_free(hg);
    unbind(&b);
}
END_TEST

/* (c) A gradient sum that overflows while both addends are finite: fc1's
 * output feeds both inputs of an add, each gradient 2e38, the sum 4e38. */
START_TEST(test_gradient_sum_is_named)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc1", "num_hidden=2", &x, 1));
    mx_entry twice[2] = {x, x};
    set_heads(g, test_entry(test_graph_op(g, "elemwise_add", "twice", NULL, twice, 2)));
    bound b;
    bind_net(&b, g, MX_SHAPE(4, 3), true);
    mx_ndarray *hg;
    ck_assert_int_eq(mx_ndarray_create(b.rt, MX_SHAPE(4, 2), MX_FLOAT32, mx_cpu(), &hg), MX_OK);
    set_all(hg, 2e38);
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
    ck_assert_msg(mx_executor_forward(b.ex, true) == MX_OK, "%s", mx_last_error());
    expect_error(mx_executor_backward(b.ex, &hg),
                 "_grad_sum_fc1_0 (gradient sum): backward gradient of 'fc1_output' has Inf (8 of 8 values, first at "
                 "index 0); its inputs are finite");
    mx_ndarray_free(hg);
    unbind(&b);
}
END_TEST

/* grad_req add: a gradient array already holding NaN is reported as such. */
START_TEST(test_accumulated_gradient_is_named)
{
    bound b;
    bind_opts(&b, regression_mlp(), MX_SHAPE(4, 3), true, false, true);
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
    ck_assert_msg(mx_executor_forward(b.ex, true) == MX_OK, "%s", mx_last_error());
    ck_assert_msg(mx_executor_backward(b.ex, NULL) == MX_OK, "%s", mx_last_error());
    int w = -1;
    for (int i = 0; i < b.n_args; i++)
        if (!strcmp(mx_graph_node(b.g, b.ids[i])->name, "fc2_weight")) w = i;
    set_one(b.grads[w], 3, NAN);
    expect_error(mx_executor_backward(b.ex, NULL),
                 "fc2: backward gradient of 'fc2_weight' has NaN (1 of 4 values, first at index 3); its accumulated "
                 "gradient of 'fc2_weight' has NaN (1 of 4 values, first at index 3)");
    unbind(&b);
}
END_TEST

/* Aux states are outputs too: a batch variance of 3.6e39 (data +-6e19)
 * moves the float32 moving var to 3.6e38 > FLT_MAX, while the normalised
 * output (+-1) and the saved statistics stay finite. */
START_TEST(test_aux_state_is_checked)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    x = test_entry(test_graph_op(g, "BatchNorm", "bn", NULL, &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    set_heads(g, test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &x, 1)));
    bound b;
    bind_net(&b, g, MX_SHAPE(4, 2), true);
    float data[8] = {6e19f, 0.1f, -6e19f, 0.2f, 6e19f, 0.3f, -6e19f, 0.4f};
    ck_assert_int_eq(mx_ndarray_from_host(arg(&b, "data"), data, sizeof(data)), MX_OK);
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
    /* Prediction mode does not move them (moving var 1: output x/1 finite). */
    ck_assert_msg(mx_executor_forward(b.ex, false) == MX_OK, "%s", mx_last_error());
    expect_error(mx_executor_forward(b.ex, true),
                 "bn: forward aux state 'bn_moving_var' has Inf (1 of 2 values, first at index 0); its inputs are "
                 "finite");
    /* The next training pass sees the bad state as an input. */
    expect_error(mx_executor_forward(b.ex, true),
                 "bn: forward aux state 'bn_moving_var' has Inf (1 of 2 values, first at index 0); its input "
                 "'bn_moving_var' has Inf (1 of 2 values, first at index 0)");
    unbind(&b);
}
END_TEST

/* An op that holds the data array until released (or 10 s pass). */
typedef struct gate {
    atomic_bool open, timed_out;
} gate;

static mx_status gate_run(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    gate *gt = payload;
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 10000 && !atomic_load(&gt->open); i++) nanosleep(&ms, NULL);
    if (!atomic_load(&gt->open)) atomic_store(&gt->timed_out, true);
    return MX_OK;
}

/* (d) Checks off (the default, or switched off again): forward pushes and
 * returns without waiting, no error, and the outputs hold the overflow. */
START_TEST(test_checks_off_cost_nothing)
{
    bound b;
    bind_net(&b, scaled_mlp("1e38"), MX_SHAPE(4, 3), true);
    fifteen(&b);
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, false), MX_OK);
    ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(b.rt)), MX_OK);
    gate gt;
    atomic_init(&gt.open, false);
    atomic_init(&gt.timed_out, false);
    mx_engine_var *v = mx_ndarray_var(arg(&b, "data"));
    mx_engine_op hold = {.fn = gate_run, .payload = &gt, .writes = &v, .n_writes = 1, .ctx = mx_cpu(),
                         .lane = MX_LANE_COMPUTE, .name = "gate"};
    ck_assert_int_eq(mx_engine_push(mx_runtime_engine(b.rt), &hold), MX_OK);
    ck_assert_int_eq(mx_executor_forward(b.ex, true), MX_OK);
    ck_assert_int_eq(mx_executor_backward(b.ex, NULL), MX_OK);
    /* Returned while the gate still holds the data: nothing waited. */
    bool waited = atomic_load(&gt.timed_out);
    long pending = mx_engine_pending(mx_runtime_engine(b.rt));
    atomic_store(&gt.open, true);
    ck_assert_msg(!waited, "forward or backward waited for the nodes with checks off");
    ck_assert_int_ge(pending, 5); /* gate, fc1, scale, fc2, softmax (+ backward) */
    ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(b.rt)), MX_OK);
    ck_assert_int_gt(count_nonfinite(mx_executor_output(b.ex, 0)), 0);
    unbind(&b);
}
END_TEST

/* A network with every kind of node: conv, BatchNorm (aux states), pooling,
 * a shortcut (gradient sum), fully-connected and the loss. */
static mx_graph *convnet(void)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    mx_entry stem = test_entry(test_graph_op(g, "Convolution", "conv0", "kernel=(3,3);pad=(1,1);num_filter=4", &x, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn1", "fix_gamma=False", &stem, 1));
    x = test_entry(test_graph_op(g, "Activation", "act1", "act_type=relu", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "conv1", "kernel=(3,3);pad=(1,1);num_filter=4", &x, 1));
    mx_entry sum_in[2] = {x, stem};
    x = test_entry(test_graph_op(g, "ElementWiseSum", "res", "num_args=2", sum_in, 2));
    x = test_entry(test_graph_op(g, "Pooling", "pool", "kernel=(2,2);stride=(2,2);pool_type=max", &x, 1));
    x = test_entry(test_graph_op(g, "Flatten", "flat", NULL, &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    set_heads(g, test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &x, 1)));
    return g;
}

static void *host_copy(mx_ndarray *a)
{
    size_t bytes = mx_ndarray_nbytes(a);
    void *h = malloc(bytes);
    ck_assert_int_eq(mx_ndarray_to_host(a, h, bytes), MX_OK);
    return h;
}

static void assert_same(mx_ndarray *a, mx_ndarray *b, const char *what)
{
    void *x = host_copy(a), *y = host_copy(b);
    ck_assert_msg(!memcmp(x, y, mx_ndarray_nbytes(a)), "%s differs with checks on", what);
    free(x);
    free(y);
}

/* (e) Finite data: checked and unchecked runs agree bit for bit (outputs,
 * gradients, aux states), over two training steps each. */
START_TEST(test_checked_results_are_identical)
{
    bound plain, checked;
    bind_net(&plain, convnet(), MX_SHAPE(3, 2, 6, 6), true);
    bind_net(&checked, convnet(), MX_SHAPE(3, 2, 6, 6), true);
    ck_assert_int_eq(mx_executor_set_check_numerics(checked.ex, true), MX_OK);
    for (int step = 0; step < 2; step++) {
        ck_assert_int_eq(mx_executor_forward(plain.ex, true), MX_OK);
        ck_assert_int_eq(mx_executor_backward(plain.ex, NULL), MX_OK);
        ck_assert_msg(mx_executor_forward(checked.ex, true) == MX_OK, "%s", mx_last_error());
        ck_assert_msg(mx_executor_backward(checked.ex, NULL) == MX_OK, "%s", mx_last_error());
    }
    assert_same(mx_executor_output(plain.ex, 0), mx_executor_output(checked.ex, 0), "output");
    int n_grads = 0;
    for (int i = 0; i < plain.n_args; i++) {
        if (!plain.grads[i]) continue;
        assert_same(plain.grads[i], checked.grads[i], mx_graph_node(plain.g, plain.ids[i])->name);
        n_grads++;
    }
    ck_assert_int_eq(n_grads, 9); /* data, conv0 w/b, bn1 gamma/beta, conv1 w/b, fc w/b */
    for (int i = 0; i < plain.n_aux; i++) assert_same(plain.aux[i], checked.aux[i], "aux state");
    ck_assert_int_eq(plain.n_aux, 2);
    /* And the gradients are not trivially equal: some are non-zero. */
    float *gw = host_copy(plain.grads[1]);
    double sum = 0;
    for (int64_t k = 0; k < mx_ndarray_size(plain.grads[1]); k++) sum += fabs(gw[k]);
    free(gw);
    ck_assert(sum > 0);
    unbind(&plain);
    unbind(&checked);
}
END_TEST

/* (f) Operation folding hides the intermediate values it does not
 * materialise: bn1's output has NaN in channel 0 (its gamma is NaN), which
 * the folded relu turns into 0, so a folded bind sees the NaN only in
 * bn1's backward; bound unfolded (as mxtrain binds for checked runs), the
 * check names bn1's forward output. */
START_TEST(test_unfolded_bind_names_the_first_layer)
{
    bound b;
    bind_net(&b, convnet(), MX_SHAPE(3, 2, 6, 6), true);
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
    set_one(arg(&b, "bn1_gamma"), 0, NAN);
    ck_assert_msg(mx_executor_forward(b.ex, true) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_executor_backward(b.ex, NULL), MX_ERR_RUNTIME);
    ck_assert_msg(strstr(mx_last_error(), "bn1+act1: backward gradient of "), "%s", mx_last_error());
    unbind(&b);

    bind_unfolded = true;
    bind_net(&b, convnet(), MX_SHAPE(3, 2, 6, 6), true);
    bind_unfolded = false;
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
    set_one(arg(&b, "bn1_gamma"), 0, NAN);
    expect_error(mx_executor_forward(b.ex, true),
                 "bn1: forward output 'bn1_output' has NaN (108 of 432 values, first at index 0); its input 'bn1_gamma' "
                 "has NaN "
                 "(1 of 4 values, first at index 0)");
    unbind(&b);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("executor_numerics");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_forward_overflow_names_the_layer);
    tcase_add_test(tc, test_nan_parameter_is_named_as_input);
    tcase_add_test(tc, test_backward_overflow_names_the_layer);
    tcase_add_test(tc, test_gradient_sum_is_named);
    tcase_add_test(tc, test_accumulated_gradient_is_named);
    tcase_add_test(tc, test_aux_state_is_checked);
    tcase_add_test(tc, test_checks_off_cost_nothing);
    tcase_add_test(tc, test_checked_results_are_identical);
    tcase_add_test(tc, test_unfolded_bind_names_the_first_layer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
