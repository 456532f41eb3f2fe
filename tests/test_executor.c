/*
 * test_executor.c - whole networks through bind/forward/backward.
 *
 * Gradients of small networks (MLP, LeNet, a residual block with BatchNorm,
 * an Inception-style block with Concat) are checked against central finite
 * differences of the network's loss, accumulated in double from the float32
 * forward pass (eps 1e-3; the float32 forward bounds the agreement to about
 * 1e-3 relative, hence rtol 2e-2 + atol 2e-3). Smooth activations (tanh,
 * softrelu) keep finite differences off kinks.
 */
#include "executor/executor.h"
#include "optimizer/optimizer.h"
#include "support/graphs.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct net {
    mx_graph *g;
    const char *name;
} net;


static mx_graph *new_graph(uint32_t *data)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    *data = x.node;
    return g;
}

static void finish(mx_graph *g, uint32_t last)
{
    mx_entry x = test_entry(last);
    uint32_t sm = test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &x, 1);
    mx_entry h = test_entry(sm);
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
}

static mx_graph *mlp(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc1", "num_hidden=7", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "act1", "act_type=tanh", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc2", "num_hidden=3", &x, 1));
    finish(g, x.node);
    return g;
}

static mx_graph *lenet(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    x = test_entry(test_graph_op(g, "Convolution", "conv1", "kernel=(3,3);num_filter=4", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "tanh1", "act_type=tanh", &x, 1));
    x = test_entry(test_graph_op(g, "Pooling", "pool1", "kernel=(2,2);stride=(2,2);pool_type=max", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "conv2", "kernel=(3,3);num_filter=6", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "tanh2", "act_type=tanh", &x, 1));
    x = test_entry(test_graph_op(g, "Pooling", "pool2", "kernel=(2,2);stride=(2,2);pool_type=avg", &x, 1));
    x = test_entry(test_graph_op(g, "Flatten", "flatten", NULL, &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc1", "num_hidden=10", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "tanh3", "act_type=tanh", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc2", "num_hidden=4", &x, 1));
    finish(g, x.node);
    return g;
}

static mx_graph *residual(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    mx_entry stem = test_entry(test_graph_op(g, "Convolution", "conv0", "kernel=(3,3);pad=(1,1);num_filter=4", &x, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn1", "fix_gamma=False", &stem, 1));
    x = test_entry(test_graph_op(g, "Activation", "act1", "act_type=softrelu", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "conv1", "kernel=(3,3);pad=(1,1);num_filter=4", &x, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn2", "fix_gamma=False", &x, 1));
    mx_entry sum_in[2] = {x, stem}; /* the shortcut: stem feeds two layers */
    x = test_entry(test_graph_op(g, "ElementWiseSum", "res", "num_args=2", sum_in, 2));
    x = test_entry(test_graph_op(g, "Activation", "act2", "act_type=softrelu", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    finish(g, x.node);
    return g;
}

static mx_graph *inception(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    mx_entry b[3];
    b[0] = test_entry(test_graph_op(g, "Convolution", "b1x1", "kernel=(1,1);num_filter=3", &x, 1));
    mx_entry t = test_entry(test_graph_op(g, "Convolution", "b3x3_reduce", "kernel=(1,1);num_filter=2", &x, 1));
    t = test_entry(test_graph_op(g, "Activation", "b3x3_act", "act_type=tanh", &t, 1));
    b[1] = test_entry(test_graph_op(g, "Convolution", "b3x3", "kernel=(3,3);pad=(1,1);num_filter=3", &t, 1));
    t = test_entry(test_graph_op(g, "Pooling", "bpool", "kernel=(3,3);stride=(1,1);pad=(1,1);pool_type=avg", &x, 1));
    b[2] = test_entry(test_graph_op(g, "Convolution", "bpool_proj", "kernel=(1,1);num_filter=2", &t, 1));
    x = test_entry(test_graph_op(g, "Concat", "concat", "num_args=3;dim=1", b, 3));
    x = test_entry(test_graph_op(g, "Activation", "act", "act_type=tanh", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    finish(g, x.node);
    return g;
}

/* Inception-BN's block: branches ending in BatchNorm joined by a Concat
 * (MXC_CONCAT_IN_PLACE). Written inside the Concat's output when folding
 * is on: b0 (BatchNorm+relu), b1 (a BatchNorm alone, also unfolded) and
 * b3 (pool, convolution, BatchNorm+relu); in prediction b2 too. Not: b2
 * in training (its folded tanh's gradient reads the output), b4 (a max
 * pool) and b5 (two readers: the Concat and a relu feeding a second head,
 * added to the first). Its relus keep it from finite differences (kinks);
 * it is checked bit for bit against the plan that copies. */
static mx_graph *inception_bn(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    mx_entry b[6], t;
    t = test_entry(test_graph_op(g, "Convolution", "c0", "kernel=(1,1);num_filter=3;no_bias=True", &x, 1));
    t = test_entry(test_graph_op(g, "BatchNorm", "bn0", "fix_gamma=False", &t, 1));
    b[0] = test_entry(test_graph_op(g, "Activation", "r0", "act_type=relu", &t, 1));
    t = test_entry(test_graph_op(g, "Convolution", "c1", "kernel=(1,1);num_filter=2", &x, 1));
    b[1] = test_entry(test_graph_op(g, "BatchNorm", "bn1", "fix_gamma=False", &t, 1));
    t = test_entry(test_graph_op(g, "Convolution", "c2", "kernel=(3,3);pad=(1,1);num_filter=2", &x, 1));
    t = test_entry(test_graph_op(g, "BatchNorm", "bn2", "fix_gamma=False", &t, 1));
    b[2] = test_entry(test_graph_op(g, "Activation", "t2", "act_type=tanh", &t, 1));
    t = test_entry(test_graph_op(g, "Pooling", "p3", "kernel=(3,3);stride=(1,1);pad=(1,1);pool_type=avg", &x, 1));
    t = test_entry(test_graph_op(g, "Convolution", "c3", "kernel=(1,1);num_filter=2", &t, 1));
    t = test_entry(test_graph_op(g, "BatchNorm", "bn3", "fix_gamma=False", &t, 1));
    b[3] = test_entry(test_graph_op(g, "Activation", "r3", "act_type=relu", &t, 1));
    b[4] = test_entry(test_graph_op(g, "Pooling", "p4", "kernel=(3,3);stride=(1,1);pad=(1,1);pool_type=max", &x, 1));
    t = test_entry(test_graph_op(g, "Convolution", "c5", "kernel=(1,1);num_filter=2", &x, 1));
    b[5] = test_entry(test_graph_op(g, "BatchNorm", "bn5", "fix_gamma=False", &t, 1));
    mx_entry side = test_entry(test_graph_op(g, "Activation", "r5", "act_type=relu", &b[5], 1));
    side = test_entry(test_graph_op(g, "FullyConnected", "fc_side", "num_hidden=3", &side, 1));
    t = test_entry(test_graph_op(g, "Concat", "concat", "num_args=6;dim=1", b, 6));
    t = test_entry(test_graph_op(g, "BatchNorm", "bn_top", "fix_gamma=False", &t, 1));
    t = test_entry(test_graph_op(g, "Activation", "top", "act_type=softrelu", &t, 1));
    t = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &t, 1));
    mx_entry heads[2] = {t, side};
    t = test_entry(test_graph_op(g, "ElementWiseSum", "sum", "num_args=2", heads, 2));
    finish(g, t.node);
    return g;
}

/* Every kind of producer an Activation or clip folds into (BatchNorm,
 * Convolution through im2col and the depthwise kernel, ElementWiseSum,
 * elemwise_add, FullyConnected), every act_type, a clip, and a BatchNorm
 * whose output has two readers, which must not fold. */
static mx_graph *folding(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    x = test_entry(test_graph_op(g, "Convolution", "c0", "kernel=(3,3);pad=(1,1);num_filter=4;no_bias=True", &x, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn0", "fix_gamma=False", &x, 1));
    mx_entry a0 = test_entry(test_graph_op(g, "Activation", "a0", "act_type=relu", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "c1", "kernel=(3,3);pad=(1,1);num_filter=4", &a0, 1));
    x = test_entry(test_graph_op(g, "Activation", "a1", "act_type=sigmoid", &x, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn1", "fix_gamma=False", &x, 1));
    x = test_entry(test_graph_op(g, "clip", "k1", "a_min=-0.5;a_max=0.5", &x, 1));
    mx_entry sum_in[2] = {x, a0};
    x = test_entry(test_graph_op(g, "ElementWiseSum", "s", "num_args=2", sum_in, 2));
    x = test_entry(test_graph_op(g, "Activation", "a2", "act_type=softsign", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "dw", "kernel=(3,3);pad=(1,1);num_filter=4;num_group=4", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "a3", "act_type=tanh", &x, 1));
    mx_entry b2 = test_entry(test_graph_op(g, "BatchNorm", "bn2", "fix_gamma=False", &x, 1));
    mx_entry two[2];
    two[0] = test_entry(test_graph_op(g, "Activation", "a4", "act_type=relu", &b2, 1));
    two[1] = test_entry(test_graph_op(g, "Pooling", "p", "kernel=(3,3);pad=(1,1);pool_type=avg", &b2, 1));
    x = test_entry(test_graph_op(g, "elemwise_add", "m", NULL, two, 2));
    x = test_entry(test_graph_op(g, "Activation", "a6", "act_type=relu", &x, 1));
    x = test_entry(test_graph_op(g, "Flatten", "flat", NULL, &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc1", "num_hidden=8", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "a5", "act_type=softrelu", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc2", "num_hidden=3", &x, 1));
    finish(g, x.node);
    return g;
}

/* A bound network with host copies of its arguments. */
typedef struct bound {
    mx_runtime *rt;
    mx_graph *g;
    int n_args, n_aux;
    uint32_t ids[256];
    mx_ndarray *args[64], *grads[64], *aux[16];
    mx_executor *ex;
    int label_index, data_index;
    int classes;
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

static void bind_net(bound *b, mx_graph *g, mx_shape data_shape, int classes, bool naive, bool training, uint64_t seed)
{
    memset(b, 0, sizeof(*b));
    rng_state = seed;
    mx_engine_config cfg = mx_engine_config_default();
    cfg.naive = naive;
    cfg.cpu_workers = naive ? 1 : 4;
    ck_assert_int_eq(mx_runtime_create(&cfg, &b->rt), MX_OK);
    b->g = g;
    b->classes = classes;
    mx_graph_shapes sh;
    const char *names[] = {"data"};
    ck_assert_msg(mx_graph_infer_shapes(g, names, &data_shape, 1, &sh) == MX_OK, "%s", mx_last_error());
    b->n_args = mx_graph_list_arguments(g, b->ids);
    b->n_aux = mx_graph_list_aux(g, b->ids + b->n_args);
    for (int i = 0; i < b->n_args + b->n_aux; i++) {
        const mx_shape *s = mx_graph_entry_shape(&sh, test_entry(b->ids[i]));
        const char *name = mx_graph_node(g, b->ids[i])->name;
        mx_ndarray *a;
        ck_assert_int_eq(mx_ndarray_create(b->rt, *s, MX_FLOAT32, mx_cpu(), &a), MX_OK);
        if (i >= b->n_args) {
            /* moving_mean 0, moving_var 1 */
            ck_assert_int_eq(mx_nd_fill(a, strstr(name, "moving_var") ? 1.0 : 0.0), MX_OK);
            b->aux[i - b->n_args] = a;
            continue;
        }
        b->args[i] = a;
        if (!strcmp(name, "softmax_label")) {
            b->label_index = i;
            int64_t n = mx_ndarray_size(a);
            float *lab = malloc(sizeof(float) * (size_t)n);
            for (int64_t k = 0; k < n; k++) lab[k] = (float)(k % classes);
            ck_assert_int_eq(mx_ndarray_from_host(a, lab, sizeof(float) * (size_t)n), MX_OK);
            free(lab);
        } else {
            if (!strcmp(name, "data")) b->data_index = i;
            fill_random(a, -1.0f, 1.0f);
            if (strstr(name, "gamma")) fill_random(a, 0.5f, 1.5f);
            ck_assert_int_eq(mx_ndarray_create(b->rt, *s, MX_FLOAT32, mx_cpu(), &b->grads[i]), MX_OK);
        }
    }
    mx_graph_shapes_free(&sh);
    mx_bind_config bc = {.ctx = mx_cpu(), .args = b->args, .arg_grads = training ? b->grads : NULL, .aux = b->aux,
                         .for_training = training};
    ck_assert_msg(mx_executor_bind(b->rt, g, &bc, &b->ex) == MX_OK, "%s", mx_last_error());
}

static void unbind(bound *b)
{
    mx_executor_free(b->ex);
    for (int i = 0; i < b->n_args; i++) {
        mx_ndarray_free(b->args[i]);
        mx_ndarray_free(b->grads[i]);
    }
    for (int i = 0; i < b->n_aux; i++) mx_ndarray_free(b->aux[i]);
    mx_runtime_free(b->rt);
    mx_graph_free(b->g);
}

/* Cross-entropy of the softmax output against the labels, in double. */
static double loss_of(bound *b)
{
    ck_assert_int_eq(mx_executor_forward(b->ex, true), MX_OK);
    mx_ndarray *out = mx_executor_output(b->ex, 0);
    int64_t n = mx_ndarray_size(out);
    float *p = malloc(sizeof(float) * (size_t)n);
    ck_assert_int_eq(mx_ndarray_to_host(out, p, sizeof(float) * (size_t)n), MX_OK);
    int64_t rows = n / b->classes;
    double loss = 0;
    for (int64_t r = 0; r < rows; r++) loss -= log((double)p[r * b->classes + r % b->classes]);
    free(p);
    return loss;
}

/* eps: 1e-3 where max pooling has kinks to stay off; smooth nets take a
 * larger step, which keeps float32 rounding of the loss (about 18 for the
 * residual block, where the thread count changes the last bits) out of
 * the difference. */
static void check_gradients_eps(mx_graph *g, mx_shape data_shape, int classes, const char *what, double eps)
{
    bound b;
    bind_net(&b, g, data_shape, classes, false, true, 99);
    ck_assert_int_eq(mx_executor_forward(b.ex, true), MX_OK);
    ck_assert_int_eq(mx_executor_backward(b.ex, NULL), MX_OK);
    int checked = 0;
    for (int i = 0; i < b.n_args; i++) {
        if (!b.grads[i]) continue;
        int64_t n = mx_ndarray_size(b.args[i]);
        float *w = malloc(sizeof(float) * (size_t)n), *gr = malloc(sizeof(float) * (size_t)n);
        ck_assert_int_eq(mx_ndarray_to_host(b.grads[i], gr, sizeof(float) * (size_t)n), MX_OK);
        ck_assert_int_eq(mx_ndarray_to_host(b.args[i], w, sizeof(float) * (size_t)n), MX_OK);
        int64_t stride = n > 24 ? n / 24 : 1;
        for (int64_t k = 0; k < n; k += stride) {
            float saved = w[k];
            w[k] = (float)(saved + eps);
            ck_assert_int_eq(mx_ndarray_from_host(b.args[i], w, sizeof(float) * (size_t)n), MX_OK);
            double up = loss_of(&b);
            w[k] = (float)(saved - eps);
            ck_assert_int_eq(mx_ndarray_from_host(b.args[i], w, sizeof(float) * (size_t)n), MX_OK);
            double down = loss_of(&b);
            w[k] = saved;
            double fd = (up - down) / (2 * eps);
            ck_assert_msg(fabs(gr[k] - fd) <= 2e-3 + 2e-2 * fmax(fabs(gr[k]), fabs(fd)),
                          "%s: d loss / d %s[%lld] = %.6g, finite difference %.6g", what,
                          mx_graph_node(g, b.ids[i])->name, (long long)k, gr[k], fd);
            checked++;
        }
        ck_assert_int_eq(mx_ndarray_from_host(b.args[i], w, sizeof(float) * (size_t)n), MX_OK);
        free(w);
        free(gr);
    }
    ck_assert_int_gt(checked, 20);
    unbind(&b);
}

static void check_gradients(mx_graph *g, mx_shape data_shape, int classes, const char *what)
{
    check_gradients_eps(g, data_shape, classes, what, 1e-3);
}

START_TEST(mlp_gradients_match_finite_differences) { check_gradients(mlp(), MX_SHAPE(5, 6), 3, "mlp"); }
END_TEST
START_TEST(lenet_gradients_match_finite_differences) { check_gradients(lenet(), MX_SHAPE(3, 1, 14, 14), 4, "lenet"); }
END_TEST
START_TEST(residual_bn_gradients_match_finite_differences)
{
    check_gradients_eps(residual(), MX_SHAPE(4, 2, 5, 5), 3, "residual", 4e-3);
}
END_TEST
START_TEST(inception_gradients_match_finite_differences)
{
    check_gradients(inception(), MX_SHAPE(2, 3, 6, 6), 3, "inception");
}
END_TEST

/* Outputs and all gradients of one training step, as bytes. */
static size_t run_step(mx_graph *(*make)(void), mx_shape data_shape, int classes, bool naive, float *out)
{
    bound b;
    bind_net(&b, make(), data_shape, classes, naive, true, 7);
    for (int rep = 0; rep < 2; rep++) {
        ck_assert_int_eq(mx_executor_forward(b.ex, true), MX_OK);
        ck_assert_int_eq(mx_executor_backward(b.ex, NULL), MX_OK);
    }
    size_t used = 0;
    mx_ndarray *o = mx_executor_output(b.ex, 0);
    ck_assert_int_eq(mx_ndarray_to_host(o, out, mx_ndarray_nbytes(o)), MX_OK);
    used += (size_t)mx_ndarray_size(o);
    for (int i = 0; i < b.n_args; i++)
        if (b.grads[i]) {
            ck_assert_int_eq(mx_ndarray_to_host(b.grads[i], out + used, mx_ndarray_nbytes(b.grads[i])), MX_OK);
            used += (size_t)mx_ndarray_size(b.grads[i]);
        }
    for (int i = 0; i < b.n_aux; i++) {
        ck_assert_int_eq(mx_ndarray_to_host(b.aux[i], out + used, mx_ndarray_nbytes(b.aux[i])), MX_OK);
        used += (size_t)mx_ndarray_size(b.aux[i]);
    }
    unbind(&b);
    return used;
}

START_TEST(planner_and_engine_modes_are_bit_identical)
{
    struct {
        mx_graph *(*make)(void);
        mx_shape shape;
        int classes;
    } nets[] = {{lenet, MX_SHAPE(3, 1, 14, 14), 4},
                {residual, MX_SHAPE(4, 2, 5, 5), 3},
                {inception, MX_SHAPE(2, 3, 6, 6), 3},
                {folding, MX_SHAPE(3, 2, 6, 6), 3},
                {inception_bn, MX_SHAPE(3, 3, 5, 5), 3}};
    for (size_t k = 0; k < sizeof(nets) / sizeof(nets[0]); k++) {
        float *ref = malloc(sizeof(float) * 100000), *got = malloc(sizeof(float) * 100000);
        setenv("MXNET_EXEC_ENABLE_INPLACE", "0", 1);
        setenv("MXNET_EXEC_ENABLE_COSHARE", "0", 1);
        setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
        size_t n = run_step(nets[k].make, nets[k].shape, nets[k].classes, true, ref);
        const char *modes[][2] = {{"1", "1"}, {"1", "0"}, {"0", "1"}, {"0", "0"}};
        for (int m = 0; m < 4; m++)
            for (int naive = 0; naive <= 1; naive++)
                for (int fold = 0; fold <= 1; fold++) {
                    if (m == 3 && !fold) continue; /* the reference */
                    setenv("MXNET_EXEC_ENABLE_INPLACE", modes[m][0], 1);
                    setenv("MXNET_EXEC_ENABLE_COSHARE", modes[m][1], 1);
                    setenv("MXNET_EXEC_ENABLE_FOLDING", fold ? "1" : "0", 1);
                    ck_assert_int_eq(run_step(nets[k].make, nets[k].shape, nets[k].classes, naive, got), n);
                    ck_assert_msg(memcmp(ref, got, n * sizeof(float)) == 0,
                                  "net %zu differs: inplace %s coshare %s naive %d folding %d", k, modes[m][0],
                                  modes[m][1], naive, fold);
                }
        unsetenv("MXNET_EXEC_ENABLE_INPLACE");
        unsetenv("MXNET_EXEC_ENABLE_COSHARE");
        unsetenv("MXNET_EXEC_ENABLE_FOLDING");
        free(ref);
        free(got);
    }
}
END_TEST

/* Concat inputs written inside the Concat's output, and their gradients
 * read inside its gradient (MXC_CONCAT_IN_PLACE, on by default on CPU):
 * the branches inception_bn names go in place and no other; a training
 * step (outputs, gradients, moving statistics) and a prediction give the
 * same bits as with copies, in every planner and engine mode and with
 * recomputation; the plans shrink. */
static void concat_views_of(bool training, const char *in_place, int *views, int *grad_views, int *inputs,
                            size_t *plan)
{
    setenv("MXC_CONCAT_IN_PLACE", in_place, 1);
    bound b;
    bind_net(&b, inception_bn(), MX_SHAPE(3, 3, 5, 5), 3, false, training, 3);
    mx_memory_plan_stats st;
    mx_executor_memory(b.ex, &st);
    *views = st.n_concat_views;
    *grad_views = st.n_concat_grad_views;
    *inputs = st.n_concat_inputs;
    *plan = st.both;
    unbind(&b);
    unsetenv("MXC_CONCAT_IN_PLACE");
}

START_TEST(concat_inputs_go_inside_the_concat_output)
{
    int views, grad_views, inputs;
    size_t with, without;
    for (int training = 0; training <= 1; training++) {
        concat_views_of(training, "1", &views, &grad_views, &inputs, &with);
        ck_assert_int_eq(views, training ? 3 : 4);
        ck_assert_int_eq(grad_views, training ? 4 : 0); /* b0 to b3: BatchNorm reads its gradient at the stride */
        ck_assert_int_eq(inputs, 6);
        concat_views_of(training, "0", &views, &grad_views, &inputs, &without);
        ck_assert_int_eq(views + grad_views, 0);
        ck_assert_uint_lt(with, without);
    }
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1); /* relus of their own: only bn1 feeds the Concat itself */
    concat_views_of(true, "1", &views, &grad_views, &inputs, &with);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    ck_assert_int_eq(views, 1);
    ck_assert_int_eq(grad_views, 1);

    float *ref = malloc(sizeof(float) * 100000), *got = malloc(sizeof(float) * 100000);
    const char *modes[][3] = {{"1", "1", "0"}, {"1", "0", "0"}, {"0", "1", "0"}, {"0", "0", "0"}, {"1", "1", "1"},
                              {"1", "1", "2"}};
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++)
        for (int naive = 0; naive <= 1; naive++) {
            setenv("MXNET_EXEC_ENABLE_INPLACE", modes[m][0], 1);
            setenv("MXNET_EXEC_ENABLE_COSHARE", modes[m][1], 1);
            setenv("MXNET_BACKWARD_DO_MIRROR", modes[m][2], 1);
            setenv("MXC_CONCAT_IN_PLACE", "0", 1);
            size_t n = run_step(inception_bn, MX_SHAPE(3, 3, 5, 5), 3, naive, ref);
            setenv("MXC_CONCAT_IN_PLACE", "1", 1);
            ck_assert_int_eq(run_step(inception_bn, MX_SHAPE(3, 3, 5, 5), 3, naive, got), n);
            ck_assert_msg(memcmp(ref, got, n * sizeof(float)) == 0,
                          "in place and copied differ: inplace %s coshare %s mirror %s naive %d", modes[m][0],
                          modes[m][1], modes[m][2], naive);
        }
    unsetenv("MXNET_EXEC_ENABLE_INPLACE");
    unsetenv("MXNET_EXEC_ENABLE_COSHARE");
    unsetenv("MXNET_BACKWARD_DO_MIRROR");
    /* Prediction: the output, with and without. */
    size_t bytes = 0;
    for (int k = 0; k < 2; k++) {
        setenv("MXC_CONCAT_IN_PLACE", k ? "1" : "0", 1);
        bound b;
        bind_net(&b, inception_bn(), MX_SHAPE(3, 3, 5, 5), 3, false, false, 11);
        ck_assert_int_eq(mx_executor_forward(b.ex, false), MX_OK);
        mx_ndarray *o = mx_executor_output(b.ex, 0);
        bytes = mx_ndarray_nbytes(o);
        ck_assert_int_eq(mx_ndarray_to_host(o, k ? got : ref, bytes), MX_OK);
        unbind(&b);
    }
    unsetenv("MXC_CONCAT_IN_PLACE");
    ck_assert_int_eq(memcmp(ref, got, bytes), 0);
    free(ref);
    free(got);
}
END_TEST

/* With numeric checks (mx_executor_set_check_numerics), a Concat input
 * inside the Concat's output is scanned over its own channels only: a NaN
 * left in bn1's channels by an unchecked pass is not charged to bn0, which
 * runs first and shares the buffer, but found where bn1 writes it again. */
START_TEST(concat_views_are_checked_over_their_own_channels)
{
    bound b;
    bind_net(&b, inception_bn(), MX_SHAPE(3, 3, 5, 5), 3, false, true, 5);
    int beta = -1;
    for (int i = 0; i < b.n_args; i++)
        if (!strcmp(mx_graph_node(b.g, b.ids[i])->name, "bn1_beta")) beta = i;
    ck_assert_int_ge(beta, 0);
    const float nan2[2] = {NAN, NAN};
    ck_assert_int_eq(mx_ndarray_from_host(b.args[beta], nan2, sizeof(nan2)), MX_OK);
    ck_assert_int_eq(mx_executor_forward(b.ex, true), MX_OK); /* unchecked: NaN in bn1's channels */
    ck_assert_int_eq(mx_executor_set_check_numerics(b.ex, true), MX_OK);
    ck_assert_int_ne(mx_executor_forward(b.ex, true), MX_OK);
    const char *err = mx_last_error();
    const char *want = "bn1: forward output 'bn1_output' has NaN (150 of 150 values, first at index 0)";
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    unbind(&b);
}
END_TEST

/* Gradient sums done by adds (MXNET_EXEC_ENABLE_ADDTO, on by default on
 * CPU): the sum nodes do not run, and the gradients match the sums' within
 * float rounding (an add onto a term is the sum's addition, but a kernel
 * may fold it into its own accumulation); bound with and without in-place
 * and co-sharing, since the terms then share a buffer with other tensors. */
START_TEST(gradient_sums_become_adds)
{
    struct {
        mx_graph *(*make)(void);
        mx_shape shape;
        int classes, sums;
    } nets[] = {{residual, MX_SHAPE(4, 2, 5, 5), 3, 1},
                {inception, MX_SHAPE(2, 3, 6, 6), 3, 0}, /* its one sum is the data's gradient, a bound array */
                {folding, MX_SHAPE(3, 2, 6, 6), 3, 2}};
    for (size_t k = 0; k < sizeof(nets) / sizeof(nets[0]); k++) {
        float *ref = malloc(sizeof(float) * 100000), *got = malloc(sizeof(float) * 100000);
        int f_sum, b_sum, f_add, b_add;
        bound b;
        setenv("MXNET_EXEC_ENABLE_ADDTO", "0", 1);
        size_t n = run_step(nets[k].make, nets[k].shape, nets[k].classes, false, ref);
        bind_net(&b, nets[k].make(), nets[k].shape, nets[k].classes, false, true, 7);
        mx_executor_count_nodes(b.ex, &f_sum, &b_sum);
        unbind(&b);
        setenv("MXNET_EXEC_ENABLE_ADDTO", "1", 1); /* wherever they can: these small plans need not shrink */
        bind_net(&b, nets[k].make(), nets[k].shape, nets[k].classes, false, true, 7);
        mx_executor_count_nodes(b.ex, &f_add, &b_add);
        unbind(&b);
        ck_assert_int_eq(f_add, f_sum);
        ck_assert_msg(b_add == b_sum - nets[k].sums, "net %zu: %d backward nodes with adds, %d with sums", k, b_add,
                      b_sum);
        for (int mode = 0; mode < 2; mode++) {
            setenv("MXNET_EXEC_ENABLE_INPLACE", mode ? "0" : "1", 1);
            setenv("MXNET_EXEC_ENABLE_COSHARE", mode ? "0" : "1", 1);
            ck_assert_int_eq(run_step(nets[k].make, nets[k].shape, nets[k].classes, false, got), n);
            for (size_t i = 0; i < n; i++)
                ck_assert_msg(fabsf(got[i] - ref[i]) <= 1e-5f * (1.0f + fabsf(ref[i])),
                              "net %zu mode %d: value %zu is %.9g with adds, %.9g with sums", k, mode, i, got[i],
                              ref[i]);
        }
        unsetenv("MXNET_EXEC_ENABLE_INPLACE");
        unsetenv("MXNET_EXEC_ENABLE_COSHARE");
        unsetenv("MXNET_EXEC_ENABLE_ADDTO");
        free(ref);
        free(got);
    }
}
END_TEST

/* A 3x3 layer Winograd takes at batch 1 (9 tiles), a 1x1 and a 3x3/2
 * layer for the direct kernels (where the CPU has AVX-512), one for
 * im2col (grouped): every forward path whose weights a fixed bind keeps. */
static mx_graph *conv_paths(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    x = test_entry(test_graph_op(g, "Convolution", "wino", "kernel=(3,3);pad=(1,1);num_filter=16", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "point", "kernel=(1,1);num_filter=12", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "strided", "kernel=(3,3);stride=(2,2);num_filter=8", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "grouped", "kernel=(1,1);num_filter=8;num_group=2", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=4", &x, 1));
    finish(g, x.node);
    return g;
}

/* Weights bound as fixed (a predictor's) are derived once for the forward
 * kernels and kept: the outputs are the bits of a plain bind, pass after
 * pass, as the data changes. */
START_TEST(fixed_weights_give_the_same_bits)
{
    for (int batch = 1; batch <= 5; batch += 4) {
        bound b;
        bind_net(&b, conv_paths(), MX_SHAPE(batch, 8, 12, 12), 4, false, false, 11);
        bool fixed[64];
        for (int i = 0; i < b.n_args; i++) fixed[i] = i != b.data_index;
        mx_bind_config bc = {.ctx = mx_cpu(), .args = b.args, .aux = b.aux, .fixed_args = fixed};
        mx_executor *fx;
        ck_assert_msg(mx_executor_bind(b.rt, b.g, &bc, &fx) == MX_OK, "%s", mx_last_error());
        size_t bytes = (size_t)batch * 4 * sizeof(float);
        float *plain = malloc(bytes), *kept = malloc(bytes), *before = malloc(bytes);
        ck_assert(plain && kept && before);
        for (int pass = 0; pass < 3; pass++) {
            if (pass) fill_random(b.args[b.data_index], -1.0f, 1.0f);
            ck_assert_int_eq(mx_executor_forward(b.ex, false), MX_OK);
            ck_assert_int_eq(mx_executor_forward(fx, false), MX_OK);
            ck_assert_int_eq(mx_ndarray_to_host(mx_executor_output(b.ex, 0), plain, bytes), MX_OK);
            ck_assert_int_eq(mx_ndarray_to_host(mx_executor_output(fx, 0), kept, bytes), MX_OK);
            ck_assert_msg(memcmp(plain, kept, bytes) == 0, "batch %d, pass %d", batch, pass);
            if (pass) ck_assert_msg(memcmp(before, kept, bytes) != 0, "batch %d, pass %d: new data, same output", batch, pass);
            memcpy(before, kept, bytes);
        }
        free(plain);
        free(kept);
        free(before);
        mx_executor_free(fx);
        unbind(&b);
    }
}
END_TEST

START_TEST(prediction_and_feature_extraction_are_pruned)
{
    bound train, pred;
    bind_net(&train, lenet(), MX_SHAPE(3, 1, 14, 14), 4, false, true, 5);
    bind_net(&pred, lenet(), MX_SHAPE(3, 1, 14, 14), 4, false, false, 5);
    int f, bw;
    mx_executor_count_nodes(train.ex, &f, &bw);
    ck_assert_int_eq(f, 8); /* 11 layers, 3 activations folded into conv1, conv2 and fc1 */
    ck_assert_int_gt(bw, 0);
    mx_executor_count_nodes(pred.ex, &f, &bw);
    ck_assert_int_eq(f, 8);
    ck_assert_int_eq(bw, 0);
    mx_memory_plan_stats st_train, st_pred;
    mx_executor_memory(train.ex, &st_train);
    mx_executor_memory(pred.ex, &st_pred);
    ck_assert_uint_lt(st_pred.both, st_train.both);
    ck_assert_uint_le(st_train.both, st_train.inplace);
    ck_assert_uint_le(st_train.both, st_train.coshare);
    ck_assert_uint_lt(st_train.coshare, st_train.naive);
    /* Folded activations have no tensor of their own, so the naive figure
     * shrinks too; unfolded, planning halves it. */
    ck_assert_uint_lt(st_pred.both, st_pred.naive);
    bound unfolded;
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    bind_net(&unfolded, lenet(), MX_SHAPE(3, 1, 14, 14), 4, false, false, 5);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    mx_memory_plan_stats st_unfolded;
    mx_executor_memory(unfolded.ex, &st_unfolded);
    ck_assert_uint_lt(st_unfolded.both * 2, st_unfolded.naive);
    ck_assert_uint_le(st_pred.both, st_unfolded.both);
    ck_assert_uint_lt(st_pred.naive, st_unfolded.naive);
    unbind(&unfolded);

    /* Features at pool1: only conv1, tanh1 and pool1 run; the values equal
     * those seen in a bind that also computes the final output. */
    const char *outs[] = {"pool1_output"};
    mx_bind_config bc = {.ctx = mx_cpu(), .args = pred.args, .aux = pred.aux, .outputs = outs, .n_outputs = 1};
    mx_executor *feat;
    ck_assert_msg(mx_executor_bind(pred.rt, pred.g, &bc, &feat) == MX_OK, "%s", mx_last_error());
    mx_executor_count_nodes(feat, &f, &bw);
    ck_assert_int_eq(f, 2); /* conv1+tanh1, pool1 */
    const char *both_outs[] = {"pool1", "softmax_output"};
    bc.outputs = both_outs;
    bc.n_outputs = 2;
    mx_executor *full;
    ck_assert_msg(mx_executor_bind(pred.rt, pred.g, &bc, &full) == MX_OK, "%s", mx_last_error());
    ck_assert_str_eq(mx_executor_output_name(full, 0), "pool1_output");
    ck_assert_int_eq(mx_executor_forward(feat, false), MX_OK);
    ck_assert_int_eq(mx_executor_forward(full, false), MX_OK);
    mx_ndarray *a = mx_executor_output(feat, 0), *c = mx_executor_output(full, 0);
    size_t bytes = mx_ndarray_nbytes(a);
    ck_assert_uint_eq(bytes, 3 * 4 * 6 * 6 * sizeof(float));
    float *va = malloc(bytes), *vc = malloc(bytes);
    ck_assert_int_eq(mx_ndarray_to_host(a, va, bytes), MX_OK);
    ck_assert_int_eq(mx_ndarray_to_host(c, vc, bytes), MX_OK);
    ck_assert_int_eq(memcmp(va, vc, bytes), 0);
    mx_memory_plan_stats st_feat;
    mx_executor_memory(feat, &st_feat);
    ck_assert_uint_lt(st_feat.naive, st_pred.naive);
    free(va);
    free(vc);
    mx_executor_free(feat);
    mx_executor_free(full);
    const char *typo[] = {"pool1_outptu"};
    bc.outputs = typo;
    bc.n_outputs = 1;
    ck_assert_int_eq(mx_executor_bind(pred.rt, pred.g, &bc, &feat), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "no output or layer named 'pool1_outptu'"));
    unbind(&train);
    unbind(&pred);
}
END_TEST

START_TEST(layer_timing_covers_every_layer)
{
    bound b;
    bind_net(&b, lenet(), MX_SHAPE(3, 1, 14, 14), 4, false, true, 11);
    mx_layer_time *t;
    int n;
    ck_assert_int_eq(mx_executor_time_layers(b.ex, 2, &t, &n), MX_OK);
    ck_assert_int_eq(n, 8); /* every forward layer, folded activations with their producers */
    ck_assert_str_eq(t[0].name, "conv1+tanh1");
    ck_assert_str_eq(t[0].op, "Convolution+Activation");
    ck_assert_str_eq(t[1].name, "pool1");
    for (int i = 0; i < n; i++) {
        ck_assert(t[i].forward_ms > 0.0);
        ck_assert(t[i].backward_ms > 0.0); /* every layer is on the gradient path */
    }
    free(t);
    ck_assert_int_eq(mx_executor_time_layers(b.ex, 0, &t, &n), MX_ERR_INVALID);
    unbind(&b);
}
END_TEST

/* forward(is_train) outputs of a bind of g (fresh graph from make) into out. */
static size_t predict_once(mx_graph *(*make)(void), mx_shape shape, int classes, const char *const *outputs,
                           int n_outputs, int *n_forward, float *out)
{
    bound b;
    bind_net(&b, make(), shape, classes, false, false, 3);
    mx_executor *ex = b.ex;
    if (outputs) {
        mx_bind_config bc = {.ctx = mx_cpu(), .args = b.args, .aux = b.aux, .outputs = outputs,
                             .n_outputs = n_outputs};
        ck_assert_msg(mx_executor_bind(b.rt, b.g, &bc, &ex) == MX_OK, "%s", mx_last_error());
    }
    int bw;
    mx_executor_count_nodes(ex, n_forward, &bw);
    ck_assert_int_eq(mx_executor_forward(ex, false), MX_OK);
    size_t used = 0;
    for (int h = 0; h < mx_executor_num_outputs(ex); h++) {
        mx_ndarray *o = mx_executor_output(ex, h);
        ck_assert_int_eq(mx_ndarray_to_host(o, out + used, mx_ndarray_nbytes(o)), MX_OK);
        used += (size_t)mx_ndarray_size(o);
    }
    if (ex != b.ex) mx_executor_free(ex);
    unbind(&b);
    return used;
}

START_TEST(folding_folds_only_what_nobody_else_reads)
{
    /* Training: a0, a1, k1, a2, a3, a6 and a5 fold; a4 does not (bn2 also
     * feeds the pooling). */
    int f_on, f_off, bw;
    bound b;
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    bind_net(&b, folding(), MX_SHAPE(3, 2, 6, 6), 3, false, true, 5);
    mx_executor_count_nodes(b.ex, &f_off, &bw);
    unbind(&b);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    setenv("MXNET_EXEC_ENABLE_ADDTO", "1", 1); /* adds wherever they can, so no gradient-sum rows below */
    bind_net(&b, folding(), MX_SHAPE(3, 2, 6, 6), 3, false, true, 5);
    unsetenv("MXNET_EXEC_ENABLE_ADDTO");
    mx_executor_count_nodes(b.ex, &f_on, &bw);
    ck_assert_int_eq(f_off, 21);
    ck_assert_int_eq(f_on, 14);
    mx_layer_time *t;
    int n;
    ck_assert_int_eq(mx_executor_time_layers(b.ex, 1, &t, &n), MX_OK);
    ck_assert_int_eq(n, 14); /* the gradient sums of bn0+a0's and bn2's outputs are adds (addto) */
    const char *want[] = {"c0", "bn0+a0", "c1+a1", "bn1+k1", "s+a2", "dw+a3", "bn2", "a4", "p", "m+a6", "flat", "fc1+a5",
                          "fc2", "softmax"};
    for (int i = 0; i < 14; i++) ck_assert_str_eq(t[i].name, want[i]);
    free(t);
    unbind(&b);

    /* Prediction (BatchNorm on its moving statistics): the same bits with
     * and without folding; an Activation asked for as an output does not
     * fold, and has the value it has unfolded. */
    float *ref = malloc(sizeof(float) * 10000), *got = malloc(sizeof(float) * 10000);
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    size_t nr = predict_once(folding, MX_SHAPE(3, 2, 6, 6), 3, NULL, 0, &f_off, ref);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    ck_assert_int_eq(predict_once(folding, MX_SHAPE(3, 2, 6, 6), 3, NULL, 0, &f_on, got), nr);
    ck_assert_int_eq(f_off - f_on, 7);
    ck_assert_int_eq(memcmp(ref, got, nr * sizeof(float)), 0);
    const char *outs[] = {"a0_output", "softmax_output"};
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    nr = predict_once(folding, MX_SHAPE(3, 2, 6, 6), 3, outs, 2, &f_off, ref);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    ck_assert_int_eq(predict_once(folding, MX_SHAPE(3, 2, 6, 6), 3, outs, 2, &f_on, got), nr);
    ck_assert_int_eq(f_off - f_on, 6);
    ck_assert_int_eq(memcmp(ref, got, nr * sizeof(float)), 0);
    free(ref);
    free(got);
}
END_TEST

/* Residual sums of every kind the fold pass meets: an identity block (the
 * sum's relu folds too), a projection block (both inputs BatchNorms: the
 * later takes the sum, the addend the earlier), a sum with no relu, a
 * BatchNorm whose output something else reads too (it stays), and a sum
 * whose other input comes after its BatchNorm (it stays). */
static mx_graph *residual_sums(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    mx_entry stem = test_entry(test_graph_op(g, "Convolution", "c0", "kernel=(3,3);pad=(1,1);num_filter=4", &x, 1));
    /* identity block: c1 -> bn1 (+ stem) -> relu */
    x = test_entry(test_graph_op(g, "Convolution", "c1", "kernel=(3,3);pad=(1,1);num_filter=4", &stem, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn1", "fix_gamma=False", &x, 1));
    mx_entry in1[2] = {x, stem};
    x = test_entry(test_graph_op(g, "ElementWiseSum", "s1", "num_args=2", in1, 2));
    mx_entry b1 = test_entry(test_graph_op(g, "Activation", "r1", "act_type=relu", &x, 1));
    /* projection block: bnp (projection) first, then bn2; the sum lists bnp first */
    x = test_entry(test_graph_op(g, "Convolution", "cp", "kernel=(1,1);num_filter=6", &b1, 1));
    mx_entry proj = test_entry(test_graph_op(g, "BatchNorm", "bnp", "fix_gamma=False", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "c2", "kernel=(3,3);pad=(1,1);num_filter=6", &b1, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn2", "fix_gamma=False", &x, 1));
    mx_entry in2[2] = {proj, x};
    x = test_entry(test_graph_op(g, "ElementWiseSum", "s2", "num_args=2", in2, 2));
    mx_entry b2 = test_entry(test_graph_op(g, "Activation", "r2", "act_type=relu", &x, 1));
    /* no relu after the sum */
    x = test_entry(test_graph_op(g, "Convolution", "c3", "kernel=(3,3);pad=(1,1);num_filter=6", &b2, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn3", "fix_gamma=False", &x, 1));
    mx_entry in3[2] = {b2, x};
    mx_entry b3 = test_entry(test_graph_op(g, "ElementWiseSum", "s3", "num_args=2", in3, 2));
    /* bn4's output also feeds a pooling: stays a BatchNorm */
    x = test_entry(test_graph_op(g, "Convolution", "c4", "kernel=(3,3);pad=(1,1);num_filter=6", &b3, 1));
    mx_entry bn4 = test_entry(test_graph_op(g, "BatchNorm", "bn4", "fix_gamma=False", &x, 1));
    mx_entry p4 = test_entry(test_graph_op(g, "Pooling", "p4", "kernel=(3,3);pad=(1,1);pool_type=avg", &bn4, 1));
    mx_entry in4[2] = {bn4, b3};
    x = test_entry(test_graph_op(g, "ElementWiseSum", "s4", "num_args=2", in4, 2));
    mx_entry in5[2] = {x, p4};
    mx_entry b4 = test_entry(test_graph_op(g, "elemwise_add", "m4", NULL, in5, 2));
    /* bn5 comes before the sum's other input (c6): stays */
    x = test_entry(test_graph_op(g, "Convolution", "c5", "kernel=(1,1);num_filter=6", &b4, 1));
    mx_entry bn5 = test_entry(test_graph_op(g, "BatchNorm", "bn5", "fix_gamma=False", &x, 1));
    mx_entry c6 = test_entry(test_graph_op(g, "Convolution", "c6", "kernel=(1,1);num_filter=6", &b4, 1));
    mx_entry in6[2] = {bn5, c6};
    x = test_entry(test_graph_op(g, "ElementWiseSum", "s6", "num_args=2", in6, 2));
    x = test_entry(test_graph_op(g, "Activation", "r6", "act_type=relu", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    finish(g, x.node);
    return g;
}

/* mx_graph_fold_residual_sums on it: the layers the executor runs, and a
 * training step's outputs, gradients and moving statistics bit for bit
 * those of the unfolded graph, with gradient sums as adds or not (the
 * shortcuts' gradients are written by the folded sums, then added to, or
 * summed), with and without in-place and co-sharing. */
START_TEST(residual_sums_fold_into_batchnorm)
{
    bound b;
    setenv("MXNET_EXEC_ENABLE_ADDTO", "1", 1);
    bind_net(&b, residual_sums(), MX_SHAPE(2, 3, 5, 5), 3, false, true, 9);
    unsetenv("MXNET_EXEC_ENABLE_ADDTO");
    mx_layer_time *t;
    int n;
    ck_assert_int_eq(mx_executor_time_layers(b.ex, 1, &t, &n), MX_OK);
    const char *want[] = {"c0", "c1", "bn1+s1+r1", "cp", "bnp", "c2", "bn2+s2+r2", "c3", "bn3+s3", "c4", "bn4", "p4",
                          "s4", "m4", "c5", "bn5", "c6", "s6+r6", "fc", "softmax"};
    ck_assert_int_eq(n, (int)(sizeof(want) / sizeof(want[0])));
    for (int i = 0; i < n; i++) ck_assert_str_eq(t[i].name, want[i]);
    ck_assert_str_eq(t[2].op, "BatchNorm+ElementWiseSum+Activation");
    ck_assert_str_eq(t[8].op, "BatchNorm+ElementWiseSum");
    free(t);
    unbind(&b);

    float *ref = malloc(sizeof(float) * 100000), *got = malloc(sizeof(float) * 100000);
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    size_t nr = run_step(residual_sums, MX_SHAPE(2, 3, 5, 5), 3, false, ref);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    const char *modes[][3] = {{"1", "1", "1"}, {"1", "1", "0"}, {"0", "1", "1"}, {"1", "0", "0"}};
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        setenv("MXNET_EXEC_ENABLE_INPLACE", modes[m][0], 1);
        setenv("MXNET_EXEC_ENABLE_COSHARE", modes[m][1], 1);
        setenv("MXNET_EXEC_ENABLE_ADDTO", modes[m][2], 1);
        ck_assert_int_eq(run_step(residual_sums, MX_SHAPE(2, 3, 5, 5), 3, false, got), nr);
        ck_assert_msg(memcmp(ref, got, nr * sizeof(float)) == 0, "mode %zu: folded step differs", m);
    }
    unsetenv("MXNET_EXEC_ENABLE_INPLACE");
    unsetenv("MXNET_EXEC_ENABLE_COSHARE");
    unsetenv("MXNET_EXEC_ENABLE_ADDTO");
    free(ref);
    free(got);
}
END_TEST

/* Depthwise layers apply a folded relu, clip or other activation to each
 * output plane right after computing it: the same bits as the unfolded
 * graph in prediction, with both bounds reached. */
static mx_graph *depthwise_folds(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    x = test_entry(test_graph_op(g, "Convolution", "dw0", "kernel=(3,3);pad=(1,1);num_filter=2;num_group=2", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "r0", "act_type=relu", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "dw1", "kernel=(3,3);stride=(2,2);pad=(1,1);num_filter=2;num_group=2",
                                 &x, 1));
    x = test_entry(test_graph_op(g, "clip", "k1", "a_min=-0.05;a_max=0.05", &x, 1));
    x = test_entry(test_graph_op(g, "Convolution", "dw2", "kernel=(3,3);pad=(1,1);num_filter=2;num_group=2", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "t2", "act_type=tanh", &x, 1));
    x = test_entry(test_graph_op(g, "Flatten", "flat", NULL, &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    finish(g, x.node);
    return g;
}

START_TEST(depthwise_folds_give_the_same_bits)
{
    float *ref = malloc(sizeof(float) * 10000), *got = malloc(sizeof(float) * 10000);
    int f_off, f_on;
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    size_t nr = predict_once(depthwise_folds, MX_SHAPE(3, 2, 11, 19), 3, NULL, 0, &f_off, ref);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    ck_assert_int_eq(predict_once(depthwise_folds, MX_SHAPE(3, 2, 11, 19), 3, NULL, 0, &f_on, got), nr);
    ck_assert_int_eq(f_off - f_on, 3);
    ck_assert_int_eq(memcmp(ref, got, nr * sizeof(float)), 0);
    const char *outs[] = {"r0_output", "k1_output", "t2_output"}; /* asked for: nothing folds */
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    nr = predict_once(depthwise_folds, MX_SHAPE(3, 2, 11, 19), 3, outs, 3, &f_off, ref);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    int zeros = 0, clipped = 0;
    for (size_t i = 0; i < nr; i++) zeros += ref[i] == 0.0f, clipped += fabsf(ref[i]) == 0.05f;
    ck_assert_msg(zeros > 0 && clipped > 0, "the test data must reach the relu's and the clip's bounds");
    free(ref);
    free(got);
}
END_TEST

/* Residual sums after convolutions, which prediction folds (with their
 * relus) into the convolutions (mx_graph_fold_conv_sums): a 1x1 (the
 * direct kernels where they lead), a 3x3 (Winograd) with an ElementWiseSum
 * and a tanh, a strided 3x3 beside a strided 1x1 projection (the later,
 * the projection, takes the sum), a depthwise 3x3 (add, then the relu
 * pass), one whose addend is read again later (not in place: copied), and
 * one whose other input comes after it (stays). */
static mx_graph *conv_sums(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    mx_entry r0 = test_entry(test_graph_op(g, "Convolution", "c0", "kernel=(3,3);pad=(1,1);num_filter=16", &x, 1));
    r0 = test_entry(test_graph_op(g, "Activation", "r0", "act_type=relu", &r0, 1));
    mx_entry c1 = test_entry(test_graph_op(g, "Convolution", "c1", "kernel=(1,1);num_filter=16", &r0, 1));
    mx_entry in1[2] = {r0, c1};
    x = test_entry(test_graph_op(g, "elemwise_add", "s1", NULL, in1, 2));
    mx_entry a1 = test_entry(test_graph_op(g, "Activation", "a1", "act_type=relu", &x, 1));
    mx_entry c2 = test_entry(test_graph_op(g, "Convolution", "c2", "kernel=(3,3);pad=(1,1);num_filter=16", &a1, 1));
    mx_entry in2[2] = {a1, c2};
    mx_entry s2 = test_entry(test_graph_op(g, "ElementWiseSum", "s2", "num_args=2", in2, 2));
    s2 = test_entry(test_graph_op(g, "Activation", "t2", "act_type=tanh", &s2, 1)); /* not a relu: a pass after the add */
    mx_entry c3 = test_entry(
        test_graph_op(g, "Convolution", "c3", "kernel=(3,3);stride=(2,2);pad=(1,1);num_filter=32;no_bias=True", &s2, 1));
    mx_entry p3 = test_entry(test_graph_op(g, "Convolution", "p3", "kernel=(1,1);stride=(2,2);num_filter=32", &s2, 1));
    mx_entry in3[2] = {c3, p3};
    x = test_entry(test_graph_op(g, "elemwise_add", "s3", NULL, in3, 2));
    mx_entry a3 = test_entry(test_graph_op(g, "Activation", "a3", "act_type=relu", &x, 1));
    mx_entry dw = test_entry(
        test_graph_op(g, "Convolution", "dw", "kernel=(3,3);pad=(1,1);num_filter=32;num_group=32", &a3, 1));
    mx_entry in4[2] = {a3, dw};
    x = test_entry(test_graph_op(g, "elemwise_add", "s4", NULL, in4, 2));
    mx_entry a4 = test_entry(test_graph_op(g, "Activation", "a4", "act_type=relu", &x, 1));
    mx_entry c5 = test_entry(test_graph_op(g, "Convolution", "c5", "kernel=(1,1);num_filter=32", &a4, 1));
    mx_entry in5[2] = {a4, c5};
    mx_entry s5 = test_entry(test_graph_op(g, "elemwise_add", "s5", NULL, in5, 2));
    mx_entry in5b[2] = {s5, a4}; /* a4 read again: s5 cannot take its memory */
    mx_entry m5 = test_entry(test_graph_op(g, "elemwise_add", "m5", NULL, in5b, 2));
    mx_entry c6 = test_entry(test_graph_op(g, "Convolution", "c6", "kernel=(1,1);num_filter=32", &m5, 1));
    mx_entry q6 = test_entry(test_graph_op(g, "Activation", "q6", "act_type=tanh", &m5, 1));
    mx_entry in6[2] = {c6, q6}; /* q6 comes after c6: the sum stays */
    x = test_entry(test_graph_op(g, "elemwise_add", "s6", NULL, in6, 2));
    x = test_entry(test_graph_op(g, "Flatten", "flat", NULL, &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    finish(g, x.node);
    return g;
}

/* Folded, the sums run inside the convolutions, and prediction gives the
 * unfolded graph's outputs (the direct kernels' the same bits; the paths
 * that add and then run the relu round as the unfolded layers do, but
 * Winograd's and the lowered products may add in another order). */
START_TEST(conv_sums_fold_in_prediction)
{
    bound b;
    bind_net(&b, conv_sums(), MX_SHAPE(3, 5, 12, 14), 3, false, false, 17);
    mx_layer_time *t;
    int n;
    ck_assert_int_eq(mx_executor_time_layers(b.ex, 1, &t, &n), MX_OK);
    const char *want[] = {"c0+r0", "c1+s1+a1", "c2+s2+t2", "c3", "p3+s3+a3", "dw+s4+a4", "c5+s5", "m5", "c6", "q6",
                          "s6", "flat", "fc", "softmax"};
    ck_assert_int_eq(n, (int)(sizeof(want) / sizeof(want[0])));
    for (int i = 0; i < n; i++) ck_assert_str_eq(t[i].name, want[i]);
    ck_assert_str_eq(t[1].op, "Convolution+elemwise_add+Activation");
    ck_assert_str_eq(t[6].op, "Convolution+elemwise_add");
    free(t);
    unbind(&b);

    float *ref = malloc(sizeof(float) * 100000), *got = malloc(sizeof(float) * 100000); /* 6 outputs: 32K floats */
    const char *outs[] = {"a1_output", "t2_output", "a3_output", "a4_output", "m5_output", "s6_output"};
    int f_off, f_on;
    const char *flat[] = {"flat_output"}; /* every fold feeds it */
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    size_t nr = predict_once(conv_sums, MX_SHAPE(3, 5, 12, 14), 3, flat, 1, &f_off, ref);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    ck_assert_int_eq(predict_once(conv_sums, MX_SHAPE(3, 5, 12, 14), 3, flat, 1, &f_on, got), nr);
    ck_assert_int_eq(f_off - f_on, 10); /* 5 activations, 5 sums */
    for (size_t i = 0; i < nr; i++)
        ck_assert_msg(fabsf(ref[i] - got[i]) <= 1e-5f * (1.0f + fabsf(ref[i])), "output %zu: %.8g folded, %.8g not", i,
                      got[i], ref[i]);
    /* The sums' activations asked for as outputs: they stay layers of their
     * own, the sums still fold (without them), and every value asked for
     * is the unfolded one. */
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    nr = predict_once(conv_sums, MX_SHAPE(3, 5, 12, 14), 3, outs, 6, &f_off, ref);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
    ck_assert_int_eq(predict_once(conv_sums, MX_SHAPE(3, 5, 12, 14), 3, outs, 6, &f_on, got), nr);
    ck_assert_int_eq(f_off - f_on, 6); /* r0 into c0; the five sums, without their activations */
    for (size_t i = 0; i < nr; i++)
        ck_assert_msg(fabsf(ref[i] - got[i]) <= 1e-5f * (1.0f + fabsf(ref[i])), "output %zu: %.8g folded, %.8g not", i,
                      got[i], ref[i]);
    int zeros = 0;
    for (size_t i = 0; i < nr; i++) zeros += ref[i] == 0.0f;
    ck_assert_msg(zeros > 0, "the test data must reach the relus' bound");
    free(ref);
    free(got);
}
END_TEST

START_TEST(hidden_outputs_nobody_reads_get_no_memory)
{
    /* conv -> LRN -> fc -> softmax: no op here has an in-place option, so
     * the in-place-only plan is one buffer per materialised tensor. In
     * prediction LRN's tmp_norm is read by nobody: it is counted in the
     * naive figure (an unplanned allocator has it) but gets no buffer. */
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    x = test_entry(test_graph_op(g, "Convolution", "conv", "kernel=(3,3);num_filter=4", &x, 1));
    x = test_entry(test_graph_op(g, "LRN", "lrn", "nsize=3", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    finish(g, x.node);
    const char *names[] = {"data"};
    mx_shape shapes[] = {MX_SHAPE(2, 1, 8, 8)};
    mx_memory_plan_stats pred, train;
    ck_assert_int_eq(mx_executor_plan_memory(g, names, shapes, 1, false, &pred), MX_OK);
    ck_assert_int_eq(mx_executor_plan_memory(g, names, shapes, 1, true, &train), MX_OK);
    size_t act = 2 * 4 * 6 * 6 * sizeof(float), fc = 2 * 3 * sizeof(float);
    ck_assert_uint_eq(pred.naive, 3 * act + fc);   /* conv out, lrn out, tmp_norm, fc out */
    ck_assert_uint_eq(pred.inplace, 2 * act + fc); /* tmp_norm never materialised */
    ck_assert_int_eq(pred.n_internal, 4);
    /* Training keeps tmp_norm for LRN's backward. */
    ck_assert_uint_ge(train.inplace, 3 * act + fc);
    mx_graph_free(g);
}
END_TEST

START_TEST(bind_errors_are_clear)
{
    bound b;
    bind_net(&b, mlp(), MX_SHAPE(5, 6), 3, false, true, 3);
    mx_executor *ex;
    mx_ndarray *saved = b.args[1];
    b.args[1] = NULL;
    mx_bind_config bc = {.ctx = mx_cpu(), .args = b.args, .arg_grads = b.grads, .for_training = true};
    ck_assert_int_eq(mx_executor_bind(b.rt, b.g, &bc, &ex), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "no array for argument 'fc1_weight'"));
    b.args[1] = saved;
    mx_ndarray *wrong;
    ck_assert_int_eq(mx_ndarray_create(b.rt, MX_SHAPE(7, 5), MX_FLOAT32, mx_cpu(), &wrong), MX_OK);
    mx_ndarray *saved_grad = b.grads[1];
    b.grads[1] = wrong;
    ck_assert_int_eq(mx_executor_bind(b.rt, b.g, &bc, &ex), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "gradient array of 'fc1_weight' has shape (7,5)"));
    b.grads[1] = saved_grad;
    b.args[1] = wrong; /* a weight of the wrong shape */
    ck_assert_int_eq(mx_executor_bind(b.rt, b.g, &bc, &ex), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "fc1"));
    b.args[1] = saved;
    mx_ndarray_free(wrong);
    /* Repeated bind/forward/backward/free leaves nothing behind (ASan). */
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(mx_executor_bind(b.rt, b.g, &bc, &ex), MX_OK);
        ck_assert_int_eq(mx_executor_forward(ex, true), MX_OK);
        ck_assert_int_eq(mx_executor_backward(ex, NULL), MX_OK);
        mx_executor_free(ex); /* with work still pending */
    }
    ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(b.rt)), MX_OK);
    unbind(&b);
}
END_TEST

START_TEST(non_loss_heads_take_head_gradients)
{
    /* y = fc(x); dL/dW with head gradient h is h^T x. */
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    uint32_t fc = test_graph_op(g, "FullyConnected", "fc", "num_hidden=2;no_bias=True", &x, 1);
    mx_entry h = test_entry(fc);
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    float xv[6] = {1, 2, 3, 4, 5, 6}, wv[6] = {1, 0, 0, 0, 1, 0}, hv[4] = {1, 2, 3, 4};
    mx_ndarray *args[2], *grads[2] = {NULL, NULL}, *head;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), &args[0]), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), &args[1]), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), &grads[1]), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 2), MX_FLOAT32, mx_cpu(), &head), MX_OK);
    mx_ndarray_from_host(args[0], xv, sizeof(xv));
    mx_ndarray_from_host(args[1], wv, sizeof(wv));
    mx_ndarray_from_host(head, hv, sizeof(hv));
    mx_grad_req reqs[2] = {MX_GRAD_NULL, MX_GRAD_ADD};
    ck_assert_int_eq(mx_nd_fill(grads[1], 100), MX_OK);
    mx_bind_config bc = {.ctx = mx_cpu(), .args = args, .arg_grads = grads, .grad_reqs = reqs, .for_training = true};
    mx_executor *ex;
    ck_assert_msg(mx_executor_bind(rt, g, &bc, &ex) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_executor_forward(ex, true), MX_OK);
    ck_assert_int_eq(mx_executor_backward(ex, &head), MX_OK);
    float y[4], dw[6];
    ck_assert_int_eq(mx_ndarray_to_host(mx_executor_output(ex, 0), y, sizeof(y)), MX_OK);
    ck_assert_int_eq(mx_ndarray_to_host(grads[1], dw, sizeof(dw)), MX_OK);
    float want_y[4] = {1, 2, 4, 5};
    for (int i = 0; i < 4; i++) ck_assert_float_eq(y[i], want_y[i]);
    /* dW = h^T x, added to 100 (grad_req add). */
    float want_dw[6] = {100 + 1 * 1 + 3 * 4, 100 + 1 * 2 + 3 * 5, 100 + 1 * 3 + 3 * 6,
                        100 + 2 * 1 + 4 * 4, 100 + 2 * 2 + 4 * 5, 100 + 2 * 3 + 4 * 6};
    for (int i = 0; i < 6; i++) ck_assert_float_eq(dw[i], want_dw[i]);
    mx_executor_free(ex);
    mx_ndarray_free(args[0]);
    mx_ndarray_free(args[1]);
    mx_ndarray_free(grads[1]);
    mx_ndarray_free(head);
    mx_runtime_free(rt);
    mx_graph_free(g);
}
END_TEST

/* A weight two layers share (its gradient is a sum, and the backward of
 * the first layer still reads it after the second's), and a layer behind
 * BlockGrad, whose gradient is zeros: updates in the backward pass. */
static mx_graph *tied(void)
{
    uint32_t d, w;
    mx_graph *g = new_graph(&d);
    ck_assert_int_eq(mx_graph_add_variable(g, "tied_weight", NULL, 0, &w), MX_OK);
    mx_entry x = test_entry(d);
    mx_entry in[2] = {x, test_entry(w)};
    x = test_entry(test_graph_op(g, "FullyConnected", "fa", "num_hidden=6;no_bias=True", in, 2));
    x = test_entry(test_graph_op(g, "Activation", "ta", "act_type=tanh", &x, 1));
    in[0] = x;
    x = test_entry(test_graph_op(g, "FullyConnected", "fb", "num_hidden=6;no_bias=True", in, 2));
    x = test_entry(test_graph_op(g, "Activation", "tb", "act_type=tanh", &x, 1));
    mx_entry z = test_entry(d);
    z = test_entry(test_graph_op(g, "FullyConnected", "fz", "num_hidden=6", &z, 1));
    z = test_entry(test_graph_op(g, "BlockGrad", "stop", NULL, &z, 1));
    mx_entry two[2] = {x, z};
    x = test_entry(test_graph_op(g, "elemwise_add", "join", NULL, two, 2));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    finish(g, x.node);
    return g;
}

/* Wide fully-connected layers on a small batch, with folded activations
 * (relu: idempotent; sigmoid: not): their weight gradients outweigh what
 * their backward reads, so updates in backward defer them to the end of
 * the pass (the first layer's copy folds itself: its original, with no
 * data gradient to make, does not run). */
static mx_graph *wide(void)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    x = test_entry(test_graph_op(g, "FullyConnected", "w1", "num_hidden=96", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "r1", "act_type=relu", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "w2", "num_hidden=80", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "s2", "act_type=sigmoid", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "w3", "num_hidden=3", &x, 1));
    finish(g, x.node);
    return g;
}

typedef struct update_log {
    mx_optimizer *opt;
    mx_ndarray **seen; /* per argument: a copy of the gradient handed over */
    int calls[64];
} update_log;

static mx_status log_and_update(void *ctx, int arg, mx_ndarray *weight, mx_ndarray *grad)
{
    update_log *log = ctx;
    log->calls[arg]++;
    MX_TRY(mx_nd_copy(log->seen[arg], grad)); /* pushed: reads the gradient before later nodes reuse it */
    return mx_optimizer_update(log->opt, arg, weight, grad);
}

static void host_copy(mx_ndarray *a, float **out, size_t *bytes)
{
    *bytes = mx_ndarray_nbytes(a);
    *out = malloc(*bytes);
    ck_assert_int_eq(mx_ndarray_to_host(a, *out, *bytes), MX_OK);
}

/* Updates handed over inside the backward pass see the gradients a plain
 * bind computes, bit for bit, once each; no node of the pass sees an
 * updated weight (the data gradient, which reads the tied weight last,
 * is the plain one); the weights end as the plain bind's after the same
 * sgd update; and the gradients take memory in the plan, not their own. */
START_TEST(updates_in_backward_see_the_final_gradients)
{
    mx_graph *(*nets[3])(void) = {tied, residual, wide};
    mx_shape shapes[3] = {MX_SHAPE(5, 6), MX_SHAPE(4, 3, 6, 6), MX_SHAPE(2, 40)};
    for (int k = 0; k < 3; k++) {
        bound plain, fused;
        bind_net(&plain, nets[k](), shapes[k], 3, false, true, 21);
        bind_net(&fused, nets[k](), shapes[k], 3, false, true, 21);
        const char *keys[] = {"learning_rate", "momentum", "wd"}, *values[] = {"0.1", "0.9", "0.01"};
        mx_optimizer *plain_opt, *fused_opt;
        ck_assert_int_eq(mx_optimizer_create_kv(plain.rt, "sgd", keys, values, 3, &plain_opt), MX_OK);
        ck_assert_int_eq(mx_optimizer_create_kv(fused.rt, "sgd", keys, values, 3, &fused_opt), MX_OK);
        bool in_backward[64] = {false};
        mx_ndarray *seen[64] = {NULL}, *fused_grads[64] = {NULL};
        update_log log = {.opt = fused_opt, .seen = seen};
        size_t grad_bytes = 0;
        for (int i = 0; i < fused.n_args; i++) {
            if (i == fused.label_index || i == fused.data_index) {
                fused_grads[i] = fused.grads[i];
                continue;
            }
            in_backward[i] = true;
            grad_bytes += mx_ndarray_nbytes(fused.grads[i]);
            ck_assert_int_eq(mx_ndarray_create(fused.rt, *mx_ndarray_shape(fused.grads[i]), MX_FLOAT32, mx_cpu(), &seen[i]),
                             MX_OK);
        }
        mx_grad_req reqs[64] = {MX_GRAD_NULL};
        for (int i = 0; i < fused.n_args; i++) reqs[i] = i == fused.label_index ? MX_GRAD_NULL : MX_GRAD_WRITE;
        if (k == 2) { /* no data gradient: w1's backward has nothing left to make but its weights' */
            reqs[fused.data_index] = MX_GRAD_NULL;
            fused_grads[fused.data_index] = NULL;
        }
        mx_bind_config bc = {.ctx = mx_cpu(), .args = fused.args, .arg_grads = fused_grads, .grad_reqs = reqs,
                             .aux = fused.aux, .for_training = true, .update_in_backward = in_backward,
                             .update = log_and_update, .update_ctx = &log};
        mx_executor *ex;
        ck_assert_msg(mx_executor_bind(fused.rt, fused.g, &bc, &ex) == MX_OK, "%s", mx_last_error());
        mx_memory_plan_stats with, without;
        mx_executor_memory(ex, &with);
        mx_executor_memory(plain.ex, &without);
        ck_assert_msg(with.both >= without.both && with.both < without.both + grad_bytes,
                      "net %d: plan %zu bytes with the gradients inside, %zu without, gradients %zu", k, with.both,
                      without.both, grad_bytes);
        ck_assert_int_eq(with.n_deferred, k == 2 ? 2 : 0); /* w1 and w2; w3's weights are small */
        for (int step = 0; step < 2; step++) {
            ck_assert_int_eq(mx_executor_forward(plain.ex, true), MX_OK);
            ck_assert_int_eq(mx_executor_backward(plain.ex, NULL), MX_OK);
            for (int i = plain.n_args - 1; i >= 0; i--)
                if (in_backward[i]) ck_assert_int_eq(mx_optimizer_update(plain_opt, i, plain.args[i], plain.grads[i]), MX_OK);
            ck_assert_int_eq(mx_executor_forward(ex, true), MX_OK);
            ck_assert_msg(mx_executor_backward(ex, NULL) == MX_OK, "%s", mx_last_error());
            for (int i = 0; i < plain.n_args; i++) {
                if (i == plain.label_index || (k == 2 && i == plain.data_index)) continue;
                const char *name = mx_graph_node(plain.g, plain.ids[i])->name;
                ck_assert_int_eq(log.calls[i], in_backward[i] ? step + 1 : 0);
                float *want, *got;
                size_t n1, n2;
                host_copy(plain.grads[i], &want, &n1);
                host_copy(in_backward[i] ? seen[i] : fused.grads[i], &got, &n2);
                ck_assert_msg(n1 == n2 && memcmp(want, got, n1) == 0, "net %d step %d: gradient of '%s' differs", k,
                              step, name);
                bool zeros = true;
                for (size_t q = 0; q < n1 / sizeof(float); q++) zeros = zeros && want[q] == 0.0f;
                ck_assert_msg(zeros == (k == 0 && !strncmp(name, "fz_", 3)), "net %d: '%s' zero gradient: %d", k,
                              name, zeros);
                free(want);
                free(got);
                host_copy(plain.args[i], &want, &n1);
                host_copy(fused.args[i], &got, &n2);
                ck_assert_msg(memcmp(want, got, n1) == 0, "net %d step %d: '%s' differs after the update", k, step,
                              name);
                free(want);
                free(got);
            }
        }
        mx_executor_free(ex);
        for (int i = 0; i < fused.n_args; i++) mx_ndarray_free(seen[i]);
        mx_optimizer_free(plain_opt);
        mx_optimizer_free(fused_opt);
        unbind(&plain);
        unbind(&fused);
    }
}
END_TEST

/* Arguments updated in backward take grad_req write and no array of
 * their own, on a training bind with an update function. */
/* CUDA graphs (mx_bind_config.cuda_graph) run on GPU binds
 * (test_gpu_executor.c). What keeps a kind of pass from one is decided at
 * bind, the settings and nodes before the device, so a CPU bind shows the
 * node rules too; and a CPU bind with graphs asked for runs as before. */
START_TEST(cuda_graph_refusals_say_why)
{
    uint32_t d;
    mx_graph *g = new_graph(&d);
    mx_entry x = test_entry(d);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc1", "num_hidden=7", &x, 1));
    x = test_entry(test_graph_op(g, "Dropout", "drop1", "p=0.5", &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc2", "num_hidden=3", &x, 1));
    finish(g, x.node);
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_rng *rng;
    ck_assert_int_eq(mx_rng_create(rt, 5, &rng), MX_OK);
    uint32_t ids[16];
    const int n_args = mx_graph_list_arguments(g, ids);
    mx_graph_shapes sh;
    const char *names[] = {"data"};
    const mx_shape data = MX_SHAPE(4, 6);
    ck_assert_int_eq(mx_graph_infer_shapes(g, names, &data, 1, &sh), MX_OK);
    mx_ndarray *args[16], *grads[16];
    for (int i = 0; i < n_args; i++) {
        const mx_shape *s = mx_graph_entry_shape(&sh, test_entry(ids[i]));
        ck_assert_int_eq(mx_ndarray_create(rt, *s, MX_FLOAT32, mx_cpu(), &args[i]), MX_OK);
        ck_assert_int_eq(mx_ndarray_create(rt, *s, MX_FLOAT32, mx_cpu(), &grads[i]), MX_OK);
        ck_assert_int_eq(mx_nd_fill(args[i], 0.25 * (i + 1)), MX_OK);
    }
    mx_graph_shapes_free(&sh);
    struct {
        bool training, cuda_graph;
        const char *infer, *train, *backward;
    } cases[] = {
        {true, true, "not a GPU bind (CUDA graphs are for GPUs)",
         "layer 'drop1' (Dropout) draws new random numbers every pass", "not a GPU bind (CUDA graphs are for GPUs)"},
        {true, false, "CUDA graphs are off for this bind", "CUDA graphs are off for this bind",
         "CUDA graphs are off for this bind"},
        {false, true, "not a GPU bind (CUDA graphs are for GPUs)", "a prediction bind", "a prediction bind"},
    };
    float first[12] = {0};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        mx_bind_config bc = {.ctx = mx_cpu(), .args = args, .arg_grads = cases[c].training ? grads : NULL,
                             .for_training = cases[c].training, .rng = rng, .cuda_graph = cases[c].cuda_graph};
        mx_executor *ex;
        ck_assert_msg(mx_executor_bind(rt, g, &bc, &ex) == MX_OK, "%s", mx_last_error());
        ck_assert_str_eq(mx_executor_graph_refusal(ex, false, false), cases[c].infer);
        ck_assert_str_eq(mx_executor_graph_refusal(ex, false, true), cases[c].train);
        ck_assert_str_eq(mx_executor_graph_refusal(ex, true, true), cases[c].backward);
        /* Passes run node by node all the same. */
        for (int pass = 0; pass < 3; pass++) {
            ck_assert_int_eq(mx_executor_forward(ex, false), MX_OK);
            if (cases[c].training) ck_assert_int_eq(mx_executor_backward(ex, NULL), MX_OK);
        }
        float y[12];
        ck_assert_int_eq(mx_ndarray_to_host(mx_executor_output(ex, 0), y, sizeof(y)), MX_OK);
        if (c == 0) memcpy(first, y, sizeof(y));
        ck_assert_msg(!memcmp(y, first, sizeof(y)), "case %zu gives other outputs", c);
        ck_assert_int_eq(mx_executor_graph_launches(ex), 0);
        if (cases[c].training) {
            ck_assert_int_eq(mx_executor_set_check_numerics(ex, true), MX_OK);
            ck_assert_str_eq(mx_executor_graph_refusal(ex, false, false),
                             cases[c].cuda_graph ? "not a GPU bind (CUDA graphs are for GPUs)"
                                                 : "CUDA graphs are off for this bind");
            ck_assert_int_eq(mx_executor_set_check_numerics(ex, false), MX_OK);
        }
        mx_executor_free(ex);
    }
    for (int i = 0; i < n_args; i++) {
        mx_ndarray_free(args[i]);
        mx_ndarray_free(grads[i]);
    }
    mx_rng_free(rng);
    mx_runtime_free(rt);
    mx_graph_free(g);
}
END_TEST

START_TEST(update_in_backward_binds_are_checked)
{
    bound b;
    bind_net(&b, mlp(), MX_SHAPE(5, 6), 3, false, true, 3);
    bool in_backward[64] = {false};
    for (int i = 0; i < b.n_args; i++) in_backward[i] = i != b.label_index && i != b.data_index;
    mx_grad_req reqs[64];
    for (int i = 0; i < b.n_args; i++) reqs[i] = i == b.label_index ? MX_GRAD_NULL : MX_GRAD_WRITE;
    mx_ndarray *none[64] = {NULL};
    update_log log = {0};
    mx_executor *ex = NULL;
    mx_bind_config bc = {.ctx = mx_cpu(), .args = b.args, .arg_grads = b.grads, .grad_reqs = reqs, .aux = b.aux,
                         .for_training = true, .update_in_backward = in_backward, .update = log_and_update,
                         .update_ctx = &log};
    ck_assert_int_eq(mx_executor_bind(b.rt, b.g, &bc, &ex), MX_ERR_INVALID); /* gradient arrays given */
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "no gradient array"));
    none[b.data_index] = b.grads[b.data_index];
    bc.arg_grads = none;
    bc.update = NULL;
    ck_assert_int_eq(mx_executor_bind(b.rt, b.g, &bc, &ex), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "update function"));
    bc.update = log_and_update;
    for (int i = 0; i < b.n_args; i++) reqs[i] = in_backward[i] ? MX_GRAD_ADD : reqs[i];
    ck_assert_int_eq(mx_executor_bind(b.rt, b.g, &bc, &ex), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "grad_req write") != NULL, "%s", mx_last_error());
    ck_assert_ptr_null(ex);
    unbind(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("executor");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, mlp_gradients_match_finite_differences);
    tcase_add_test(tc, fixed_weights_give_the_same_bits);
    tcase_add_test(tc, lenet_gradients_match_finite_differences);
    tcase_add_test(tc, residual_bn_gradients_match_finite_differences);
    tcase_add_test(tc, inception_gradients_match_finite_differences);
    tcase_add_test(tc, concat_inputs_go_inside_the_concat_output);
    tcase_add_test(tc, concat_views_are_checked_over_their_own_channels);
    tcase_add_test(tc, planner_and_engine_modes_are_bit_identical);
    tcase_add_test(tc, gradient_sums_become_adds);
    tcase_add_test(tc, prediction_and_feature_extraction_are_pruned);
    tcase_add_test(tc, layer_timing_covers_every_layer);
    tcase_add_test(tc, folding_folds_only_what_nobody_else_reads);
    tcase_add_test(tc, depthwise_folds_give_the_same_bits);
    tcase_add_test(tc, conv_sums_fold_in_prediction);
    tcase_add_test(tc, residual_sums_fold_into_batchnorm);
    tcase_add_test(tc, hidden_outputs_nobody_reads_get_no_memory);
    tcase_add_test(tc, bind_errors_are_clear);
    tcase_add_test(tc, non_loss_heads_take_head_gradients);
    tcase_add_test(tc, updates_in_backward_see_the_final_gradients);
    tcase_add_test(tc, update_in_backward_binds_are_checked);
    tcase_add_test(tc, cuda_graph_refusals_say_why);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
