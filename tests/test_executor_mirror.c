/*
 * test_executor_mirror.c - backward mirroring (MXNET_BACKWARD_DO_MIRROR).
 *
 * The reference is the same network bound without mirroring: from the same
 * weights and data, several SGD steps must give the same outputs,
 * gradients, moving statistics and weights bit for bit (a recomputation
 * runs the same kernels on the same inputs), while the planner's internal
 * memory shrinks. The graph pass is checked node by node.
 */
#include "executor/executor.h"
#include "support/graphs.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* conv -> BN -> relu -> max pool, two residual blocks with identity
 * shortcuts (conv-BN-relu-conv-BN + shortcut, relu), global average
 * pooling, flatten, FC, SoftmaxOutput. */
static mx_graph *resnet_like(void)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    x = test_entry(test_graph_op(g, "Convolution", "conv0", "kernel=(3,3);pad=(1,1);num_filter=6;no_bias=True", &x, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn0", "fix_gamma=False", &x, 1));
    x = test_entry(test_graph_op(g, "Activation", "relu0", "act_type=relu", &x, 1));
    x = test_entry(test_graph_op(g, "Pooling", "pool0", "kernel=(3,3);stride=(2,2);pad=(1,1);pool_type=max", &x, 1));
    for (int b = 1; b <= 2; b++) {
        char name[32];
        mx_entry shortcut = x;
        snprintf(name, sizeof(name), "b%d_conv1", b);
        x = test_entry(test_graph_op(g, "Convolution", name, "kernel=(3,3);pad=(1,1);num_filter=6;no_bias=True", &x, 1));
        snprintf(name, sizeof(name), "b%d_bn1", b);
        x = test_entry(test_graph_op(g, "BatchNorm", name, "fix_gamma=False", &x, 1));
        snprintf(name, sizeof(name), "b%d_relu1", b);
        x = test_entry(test_graph_op(g, "Activation", name, "act_type=relu", &x, 1));
        snprintf(name, sizeof(name), "b%d_conv2", b);
        x = test_entry(test_graph_op(g, "Convolution", name, "kernel=(3,3);pad=(1,1);num_filter=6;no_bias=True", &x, 1));
        snprintf(name, sizeof(name), "b%d_bn2", b);
        x = test_entry(test_graph_op(g, "BatchNorm", name, "fix_gamma=False", &x, 1));
        mx_entry sum_in[2] = {x, shortcut};
        snprintf(name, sizeof(name), "b%d_sum", b);
        x = test_entry(test_graph_op(g, "ElementWiseSum", name, "num_args=2", sum_in, 2));
        snprintf(name, sizeof(name), "b%d_relu2", b);
        x = test_entry(test_graph_op(g, "Activation", name, "act_type=relu", &x, 1));
    }
    x = test_entry(test_graph_op(g, "Pooling", "gpool", "kernel=(1,1);global_pool=True;pool_type=avg", &x, 1));
    x = test_entry(test_graph_op(g, "Flatten", "flatten", NULL, &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=5", &x, 1));
    uint32_t sm = test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &x, 1);
    mx_entry h = test_entry(sm);
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    return g;
}

static const mx_shape data_shape = {4, {8, 3, 10, 10}};
#define CLASSES 5

typedef struct bound {
    mx_runtime *rt;
    mx_graph *g;
    int n_args, n_aux;
    uint32_t ids[128];
    mx_ndarray *args[64], *grads[64], *aux[32];
    mx_executor *ex;
} bound;

/* Weights and data from a fixed xorshift stream: both binds start equal. */
static void fill(mx_ndarray *a, uint64_t *state, float lo, float hi)
{
    int64_t n = mx_ndarray_size(a);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        v[i] = lo + (hi - lo) * (float)((*state >> 11) * 0x1.0p-53);
    }
    ck_assert_int_eq(mx_ndarray_from_host(a, v, sizeof(float) * (size_t)n), MX_OK);
    free(v);
}

/* Binds g (taken over) for training with mirroring on or off. */
/* level: MXNET_BACKWARD_DO_MIRROR (0 none, 1 cheap layers, 2 segments). */
static void bind_net(bound *b, mx_graph *g, int level)
{
    memset(b, 0, sizeof(*b));
    mx_engine_config cfg = mx_engine_config_default();
    cfg.cpu_workers = 4;
    ck_assert_int_eq(mx_runtime_create(&cfg, &b->rt), MX_OK);
    b->g = g;
    mx_graph_shapes sh;
    const char *names[] = {"data"};
    ck_assert_msg(mx_graph_infer_shapes(g, names, &data_shape, 1, &sh) == MX_OK, "%s", mx_last_error());
    b->n_args = mx_graph_list_arguments(g, b->ids);
    b->n_aux = mx_graph_list_aux(g, b->ids + b->n_args);
    uint64_t state = 12345;
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
        if (!strcmp(name, "softmax_label")) {
            float lab[8];
            for (int k = 0; k < 8; k++) lab[k] = (float)(k % CLASSES);
            ck_assert_int_eq(mx_ndarray_from_host(a, lab, sizeof(lab)), MX_OK);
            continue;
        }
        if (strstr(name, "gamma")) fill(a, &state, 0.5f, 1.5f);
        else fill(a, &state, -1.0f, 1.0f);
        if (strcmp(name, "data") != 0)
            ck_assert_int_eq(mx_ndarray_create(b->rt, *s, MX_FLOAT32, mx_cpu(), &b->grads[i]), MX_OK);
    }
    mx_graph_shapes_free(&sh);
    static const char *const levels[] = {"0", "1", "2"};
    setenv("MXNET_BACKWARD_DO_MIRROR", levels[level], 1);
    mx_bind_config bc = {.ctx = mx_cpu(), .args = b->args, .arg_grads = b->grads, .aux = b->aux, .for_training = true};
    ck_assert_msg(mx_executor_bind(b->rt, g, &bc, &b->ex) == MX_OK, "%s", mx_last_error());
    unsetenv("MXNET_BACKWARD_DO_MIRROR");
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

/* Appends a to out[*used...] (host copy). */
static void take(mx_ndarray *a, float *out, size_t *used)
{
    ck_assert_int_eq(mx_ndarray_to_host(a, out + *used, mx_ndarray_nbytes(a)), MX_OK);
    *used += (size_t)mx_ndarray_size(a);
}

/* One step: forward, backward, w -= 0.1 * grad on the host. Writes the
 * output, every gradient, the moving statistics and the new weights. */
static size_t step(bound *b, float *out)
{
    ck_assert_int_eq(mx_executor_forward(b->ex, true), MX_OK);
    ck_assert_int_eq(mx_executor_backward(b->ex, NULL), MX_OK);
    size_t used = 0;
    take(mx_executor_output(b->ex, 0), out, &used);
    for (int i = 0; i < b->n_args; i++)
        if (b->grads[i]) take(b->grads[i], out, &used);
    for (int i = 0; i < b->n_aux; i++) take(b->aux[i], out, &used);
    for (int i = 0; i < b->n_args; i++) {
        if (!b->grads[i]) continue;
        size_t n = (size_t)mx_ndarray_size(b->args[i]);
        float *w = malloc(n * sizeof(float)), *gr = malloc(n * sizeof(float));
        ck_assert_int_eq(mx_ndarray_to_host(b->args[i], w, n * sizeof(float)), MX_OK);
        ck_assert_int_eq(mx_ndarray_to_host(b->grads[i], gr, n * sizeof(float)), MX_OK);
        for (size_t k = 0; k < n; k++) w[k] -= 0.1f * gr[k];
        ck_assert_int_eq(mx_ndarray_from_host(b->args[i], w, n * sizeof(float)), MX_OK);
        free(w);
        free(gr);
    }
    for (int i = 0; i < b->n_args; i++)
        if (b->grads[i]) take(b->args[i], out, &used);
    return used;
}

#define CAP 200000

/* Loop index bit 0: with operation folding (the default) or without;
 * bit 1: the cheap layers mirrored (level 1) or segments (level 2). */
START_TEST(mirrored_training_is_bit_identical_and_smaller)
{
    const bool folding = !(_i & 1);
    const int level = 1 + (_i >> 1);
    setenv("MXNET_EXEC_ENABLE_FOLDING", folding ? "1" : "0", 1);
    bound plain, mirrored;
    bind_net(&plain, resnet_like(), 0);
    bind_net(&mirrored, resnet_like(), level);
    float *ref = malloc(sizeof(float) * CAP), *got = malloc(sizeof(float) * CAP);
    for (int s = 0; s < 4; s++) {
        /* The last step with numerics checks on: the node-by-node path runs
         * the copies too. */
        if (s == 3) ck_assert_int_eq(mx_executor_set_check_numerics(mirrored.ex, true), MX_OK);
        size_t n = step(&plain, ref);
        ck_assert_int_lt(n, CAP);
        ck_assert_uint_eq(step(&mirrored, got), n);
        size_t diff = 0;
        while (diff < n && memcmp(&ref[diff], &got[diff], sizeof(float)) == 0) diff++;
        ck_assert_msg(diff == n, "step %d: value %zu of %zu differs: %.9g mirrored, %.9g plain", s, diff, n,
                      diff < n ? got[diff] : 0.0, diff < n ? ref[diff] : 0.0);
    }
    free(ref);
    free(got);

    mx_memory_plan_stats p, m;
    mx_executor_memory(plain.ex, &p);
    mx_executor_memory(mirrored.ex, &m);
    int pf, pb, mf, mb;
    mx_executor_count_nodes(plain.ex, &pf, &pb);
    mx_executor_count_nodes(mirrored.ex, &mf, &mb);
    fprintf(stderr, "internal memory (both), folding %s, level %d: %zu plain, %zu mirrored; %d copies (%d heavy), "
                    "%d of %d checkpoints\n",
            folding ? "on" : "off", level, p.both, m.both, m.n_mirror, m.n_mirror_heavy, m.n_checkpoints,
            m.n_checkpoint_candidates);
    ck_assert_int_eq(p.n_mirror, 0);
    ck_assert_int_gt(m.n_mirror, 0);
    ck_assert_int_eq(mf, pf);
    ck_assert_int_eq(mb, pb + m.n_mirror);
    /* The plain plan keeps the BN/relu output of every conv besides the
     * conv output that BN's backward reads; mirroring keeps the latter
     * only (95,232 -> 81,920 bytes with folding, 77,312 without, when
     * this was written). */
    ck_assert_uint_lt(m.both, p.both);
    ck_assert_uint_le(m.both * 100, p.both * 90);
    /* The stand-alone plan agrees with the bound one. */
    mx_memory_plan_stats planned;
    const char *names[] = {"data"};
    ck_assert_int_eq(mx_executor_plan_memory_mirror(mirrored.g, names, &data_shape, 1, level, &planned), MX_OK);
    ck_assert_uint_eq(planned.both, m.both);
    ck_assert_int_eq(planned.n_mirror, m.n_mirror);
    if (level == 2) {
        /* Possible checkpoints, outputs every later layer reads through:
         * conv0, bn0, relu0, pool0, each block's sum and relu2, gpool,
         * flatten, fc (11); folded, relu0 and the sums and their relus
         * run inside bn0 and the blocks' bn2 (8). Convolutions between
         * checkpoints are recomputed, the same bits as above. */
        ck_assert_int_eq(m.n_checkpoint_candidates, folding ? 8 : 11);
        ck_assert_int_gt(m.n_checkpoints, 0);
        ck_assert_int_lt(m.n_checkpoints, m.n_checkpoint_candidates);
        ck_assert_int_gt(m.n_mirror_heavy, 0);
        ck_assert_int_gt(m.n_segment_plans, 1);
        ck_assert_int_eq(planned.n_checkpoints, m.n_checkpoints);
        ck_assert_uint_eq(planned.segment_budget, m.segment_budget);
        /* The budget search reaches segments that beat level 1 here
         * (58,368 against 67,840 and 77,312 bytes when written; a grid
         * anchored on a wrong total planned 74,496 folded). */
        mx_memory_plan_stats cheap;
        ck_assert_int_eq(mx_executor_plan_memory_mirror(mirrored.g, names, &data_shape, 1, 1, &cheap), MX_OK);
        ck_assert_uint_lt(m.both, cheap.both);
    } else {
        ck_assert_int_eq(m.n_mirror_heavy, 0);
        ck_assert_int_eq(m.n_checkpoint_candidates, 0);
    }
    unbind(&plain);
    unbind(&mirrored);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
}
END_TEST

START_TEST(recomputation_is_timed_as_the_layers_backward)
{
    bound plain, mirrored;
    bind_net(&plain, resnet_like(), 0);
    bind_net(&mirrored, resnet_like(), 1);
    mx_layer_time *tp, *tm;
    int np, nm;
    ck_assert_int_eq(mx_executor_time_layers(plain.ex, 1, &tp, &np), MX_OK);
    ck_assert_int_eq(mx_executor_time_layers(mirrored.ex, 1, &tm, &nm), MX_OK);
    ck_assert_int_eq(nm, np); /* no rows of their own for the copies */
    for (int i = 0; i < nm; i++) {
        ck_assert_str_eq(tm[i].name, tp[i].name);
        if (strncmp(tm[i].name, "_grad_sum_", 10) != 0) ck_assert(tm[i].backward_ms > 0.0); /* sums: forward column */
    }
    free(tp);
    free(tm);
    unbind(&plain);
    unbind(&mirrored);
}
END_TEST

/* fc -> act -> act2 -> fc2 -> softmax, with the gradient pass run with
 * act and act2 mirrored (keep_copies as given); *n_fwd: the forward
 * nodes. */
static mx_graph *mirrored_chain(bool keep_copies, uint32_t *fc, uint32_t *act, uint32_t *act2, int *n_fwd)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    *fc = test_graph_op(g, "FullyConnected", "fc", "num_hidden=4", &x, 1);
    x = test_entry(*fc);
    *act = test_graph_op(g, "Activation", "act", "act_type=relu", &x, 1);
    x = test_entry(*act);
    *act2 = test_graph_op(g, "Activation", "act2", "act_type=tanh", &x, 1);
    x = test_entry(*act2);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc2", "num_hidden=3", &x, 1));
    mx_entry h = test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &x, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    *n_fwd = mx_graph_num_nodes(g);
    bool *mirror = calloc((size_t)*n_fwd, sizeof(bool));
    mirror[*act] = mirror[*act2] = true;
    uint32_t wrt[1] = {mx_graph_find(g, "fc_weight")};
    mx_entry grads[1];
    ck_assert_msg(mx_graph_gradient_mirror(g, wrt, 1, mirror, keep_copies, grads) == MX_OK, "%s", mx_last_error());
    free(mirror);
    return g;
}

static int copies_in(const mx_graph *g, int n_fwd)
{
    int copies = 0;
    for (int i = n_fwd; i < mx_graph_num_nodes(g); i++) copies += !strncmp(mx_graph_node(g, (uint32_t)i)->name, "_mirror_", 8);
    return copies;
}

START_TEST(copies_are_made_just_before_their_first_reader)
{
    uint32_t fc, act, act2;
    int n_fwd;
    mx_graph *g = mirrored_chain(false, &fc, &act, &act2, &n_fwd);
    uint32_t m_act = mx_graph_find(g, "_mirror_act"), m_act2 = mx_graph_find(g, "_mirror_act2");
    uint32_t b_fc2 = mx_graph_find(g, "_backward_fc2"), b_act2 = mx_graph_find(g, "_backward_act2");
    uint32_t b_act = mx_graph_find(g, "_backward_act");
    ck_assert_uint_ne(m_act, MX_NO_NODE);
    ck_assert_uint_ne(b_fc2, MX_NO_NODE);
    /* fc2's backward reads act2's output: act2's copy (after the copy of
     * act it reads) is made right before it, after softmax's backward. */
    ck_assert_uint_eq(m_act2, b_fc2 - 1);
    ck_assert_uint_eq(m_act, m_act2 - 1);
    ck_assert_uint_eq(mx_graph_find(g, "_backward_softmax"), m_act - 1);
    const mx_node *n = mx_graph_node(g, m_act);
    ck_assert_int_eq(n->kind, MX_NODE_OP);
    ck_assert_uint_eq(n->forward_node, act);
    ck_assert_uint_eq(n->inputs[0].node, fc); /* fc is kept: the chain starts there */
    n = mx_graph_node(g, m_act2);
    ck_assert_uint_eq(n->forward_node, act2);
    ck_assert_uint_eq(n->inputs[0].node, m_act);
    /* Backward nodes read the copies: inputs out_grad, in_data, out_data. */
    ck_assert_uint_eq(mx_graph_node(g, b_fc2)->inputs[1].node, m_act2);
    ck_assert_uint_eq(mx_graph_node(g, b_act2)->inputs[2].node, m_act2);
    /* act's first copy only fed act2's: act's backward, later, gets a
     * fresh one right before it rather than keeping that one alive. */
    uint32_t m_act_again = mx_graph_node(g, b_act)->inputs[2].node;
    ck_assert_uint_eq(m_act_again, b_act - 1);
    ck_assert_str_eq(mx_graph_node(g, m_act_again)->name, "_mirror_act");
    ck_assert_uint_eq(mx_graph_node(g, m_act_again)->forward_node, act);
    /* ... and their forward_node stays the original. */
    ck_assert_uint_eq(mx_graph_node(g, b_act)->forward_node, act);
    ck_assert_int_eq(copies_in(g, n_fwd), 3);
    mx_graph_free(g);
}
END_TEST

/* The same chain with keep_copies (segments): act's copy, made as the
 * input of act2's, serves act's backward too. */
START_TEST(kept_copies_serve_every_reader)
{
    uint32_t fc, act, act2;
    int n_fwd;
    mx_graph *g = mirrored_chain(true, &fc, &act, &act2, &n_fwd);
    uint32_t m_act = mx_graph_find(g, "_mirror_act"), m_act2 = mx_graph_find(g, "_mirror_act2");
    ck_assert_uint_eq(m_act, m_act2 - 1);
    ck_assert_uint_eq(mx_graph_node(g, m_act)->inputs[0].node, fc);
    ck_assert_uint_eq(mx_graph_node(g, m_act2)->inputs[0].node, m_act);
    ck_assert_uint_eq(mx_graph_node(g, mx_graph_find(g, "_backward_act"))->inputs[2].node, m_act);
    ck_assert_int_eq(copies_in(g, n_fwd), 2);
    mx_graph_free(g);
}
END_TEST

/* Which nodes the executor mirrors: counted by the planner. */
/* conv 1x1 -> BatchNorm (bn_params) -> fc -> softmax. */
static mx_graph *conv_bn_fc(const char *bn_params)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    x = test_entry(test_graph_op(g, "Convolution", "conv", "kernel=(1,1);num_filter=3", &x, 1));
    x = test_entry(test_graph_op(g, "BatchNorm", "bn", bn_params, &x, 1));
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=3", &x, 1));
    mx_entry h = test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &x, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    return g;
}

static int copies_planned(mx_graph *g, const mx_shape *shape)
{
    const char *names[] = {"data"};
    mx_memory_plan_stats st;
    ck_assert_msg(mx_executor_plan_memory_mirror(g, names, shape, 1, 1, &st) == MX_OK, "%s", mx_last_error());
    mx_memory_plan_stats off;
    ck_assert_int_eq(mx_executor_plan_memory(g, names, shape, 1, true, &off), MX_OK);
    ck_assert_int_eq(off.n_mirror, 0);
    return st.n_mirror;
}

START_TEST(mirror_policy)
{
    /* fc -> relu -> Dropout -> fc2 -> softmax: relu's backward reads a
     * copy; fc2's backward reads Dropout's output and Dropout's its mask,
     * both kept: a copy would draw another mask. */
    mx_shape shape = MX_SHAPE(4, 6);
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=5", &x, 1));
    uint32_t relu = test_graph_op(g, "Activation", "relu", "act_type=relu", &x, 1);
    x = test_entry(relu);
    uint32_t drop = test_graph_op(g, "Dropout", "drop", "p=0.5", &x, 1);
    x = test_entry(drop);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc2", "num_hidden=3", &x, 1));
    mx_entry h = test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &x, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    /* Folded into fc (which is kept), relu has nothing left to mirror; the
     * rest of this test is about single layers, unfolded. */
    ck_assert_int_eq(copies_planned(g, &shape), 0);
    setenv("MXNET_EXEC_ENABLE_FOLDING", "0", 1);
    ck_assert_int_eq(copies_planned(g, &shape), 1); /* relu, read by its own backward */
    ck_assert_int_eq(mx_graph_set_attr(g, drop, "__force_mirroring__", "True"), MX_OK);
    ck_assert_int_eq(copies_planned(g, &shape), 1); /* forced or not, Dropout stays */
    mx_graph_free(g);

    /* BatchNorm with global statistics reads the moving states that the
     * copy would not see: kept. With batch statistics: mirrored. */
    mx_shape img = MX_SHAPE(2, 3, 4, 4);
    g = conv_bn_fc("use_global_stats=True");
    ck_assert_int_eq(copies_planned(g, &img), 0);
    mx_graph_free(g);
    g = conv_bn_fc(NULL);
    ck_assert_int_eq(copies_planned(g, &img), 1);
    /* Levels are 1 and 2; a bind reads MXNET_BACKWARD_DO_MIRROR the same
     * way (0 too). */
    const char *data_name[] = {"data"};
    mx_memory_plan_stats bad;
    ck_assert_int_ne(mx_executor_plan_memory_mirror(g, data_name, &img, 1, 3, &bad), MX_OK);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "1 (cheap layers) or 2 (segments)"));
    int level = -1;
    setenv("MXNET_BACKWARD_DO_MIRROR", "3", 1);
    ck_assert_int_ne(mx_executor_mirror_level(&level), MX_OK);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "MXNET_BACKWARD_DO_MIRROR=3: 0 (keep every output)"));
    setenv("MXNET_BACKWARD_DO_MIRROR", "2", 1);
    ck_assert_int_eq(mx_executor_mirror_level(&level), MX_OK);
    ck_assert_int_eq(level, 2);
    unsetenv("MXNET_BACKWARD_DO_MIRROR");
    ck_assert_int_eq(mx_executor_mirror_level(&level), MX_OK);
    ck_assert_int_eq(level, 0);
    mx_graph_free(g);

    /* Without MXNET_BACKWARD_DO_MIRROR only __force_mirroring__ nodes are
     * copied (MXNet's rule). */
    g = test_graph_new(&x);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=5", &x, 1));
    relu = test_graph_op(g, "Activation", "relu", "act_type=relu", &x, 1);
    x = test_entry(relu);
    x = test_entry(test_graph_op(g, "FullyConnected", "fc2", "num_hidden=3", &x, 1));
    h = test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &x, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    const char *names[] = {"data"};
    mx_memory_plan_stats st;
    ck_assert_int_eq(mx_executor_plan_memory(g, names, &shape, 1, true, &st), MX_OK);
    ck_assert_int_eq(st.n_mirror, 0);
    ck_assert_int_eq(mx_graph_set_attr(g, relu, "__force_mirroring__", "True"), MX_OK);
    ck_assert_int_eq(mx_executor_plan_memory(g, names, &shape, 1, true, &st), MX_OK);
    ck_assert_int_eq(st.n_mirror, 1);
    mx_graph_free(g);
    unsetenv("MXNET_EXEC_ENABLE_FOLDING");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("executor_mirror");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, copies_are_made_just_before_their_first_reader);
    tcase_add_test(tc, kept_copies_serve_every_reader);
    tcase_add_test(tc, mirror_policy);
    tcase_add_loop_test(tc, mirrored_training_is_bit_identical_and_smaller, 0, 4);
    tcase_add_test(tc, recomputation_is_timed_as_the_layers_backward);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
