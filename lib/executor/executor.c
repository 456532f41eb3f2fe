/* executor.c - bind, allocate from the plan, push nodes to the engine. */
#include "executor/plan.h"
#include "ndarray/dtype_convert.h"
#include "device/device.h"
#include "ops/batch_norm.h"
#include "ops/concat.h"
#include "ops/convolution.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything a node needs at run time, resolved once at bind. */
typedef struct node_info {
    uint32_t id;
    const mx_node *node;     /* in the executor's graph */
    const mx_op_def *op;
    mx_op_kernels kernels;   /* of the executor's device */
    void *kernel_state;      /* the device kernels' instance state (cuDNN set-up) */
    const void *params;
    bool backward;
    bool mirror;             /* a recomputation copy, run in backward */
    mx_ndarray **scratch;    /* mirror of an op with aux states: states it moves instead (n_aux) */
    int n_in, n_out, n_aux;  /* of the forward op */
    mx_tensor *in, *out;     /* forward: inputs, outputs */
    mx_tensor *out_grad, *in_grad; /* backward */
    mx_req *req;             /* per written tensor */
    mx_engine_var **reads, **writes;
    int n_reads, n_writes;
    bool uses_workspace;
    /* The Activation or clip folded into this node: forward kernels apply
     * it; backward first turns the output gradient into the folded layer's
     * input gradient, in place (it has no other reader), or the backward
     * kernel does (mx_op_def.folds_backward). */
    mx_fold fold;
    char name[128];          /* "conv1", or "bn1+relu1" with a folded Activation */
    char op_name[64];        /* "Convolution", or "BatchNorm+Activation" */
    char label[224];         /* for the timeline: "conv1 (Convolution) fwd" */
    /* Whether forward draws random numbers in training / inference passes;
     * when it may, the rng's variable is the last write, left out of the
     * passes that draw nothing (Dropout at inference). */
    bool rng_train, rng_infer, rng_var;
    uint32_t fixed_inputs;   /* forward: mx_op_ctx.fixed_inputs */
    /* CPU: bytes of float32 copies of the float16/bfloat16 tensors its
     * kernels do not compute in (run_shadowed), after the op's own
     * workspace; 0: none. */
    size_t shadow_bytes, shadow_at;
} node_info;

/* A kind of pass run as a CUDA graph (mx_bind_config.cuda_graph). */
typedef enum pass_kind { PASS_INFER, PASS_TRAIN, PASS_BACKWARD, N_PASS_KINDS } pass_kind;

typedef struct pass_graph {
    int runs;                  /* passes of this kind pushed node by node (the first warms up) */
    atomic_bool off;           /* node by node for good: why says why */
    char why[384];             /* written before off is set */
    mx_device_graph *graph;    /* captured; used by the pass's engine operations only (ordered by its variables) */
    float loss_scale;          /* the one graph's kernels were captured with */
    mx_engine_var **reads, **writes; /* every variable of the pass's nodes, made at its first launch */
    int n_reads, n_writes;
} pass_graph;

struct mx_executor {
    atomic_int refs;             /* the caller's, plus one per pushed job */
    mx_runtime *rt;
    mx_context ctx;
    exec_graph eg;
    memory_plan plan;
    mx_memory_plan_stats stats;
    mx_ndarray **buffers;
    int n_buffers;
    mx_ndarray *workspace;
    mx_ndarray **entry_arrays;   /* per entry (NULL: unused) */
    mx_tensor *entry_tensors;    /* per entry */
    node_info *nodes;            /* per node (only needed op/backward nodes filled) */
    mx_ndarray **outputs;        /* per head */
    char **output_names;
    int n_outputs;
    mx_grad_req *grad_reqs;      /* per argument */
    mx_ndarray **arg_grads;      /* per argument (borrowed; the executor's own zeros at UPDATE_AT_END) */
    mx_rng *rng;
    bool *fixed_args;            /* per argument (NULL: none): mx_bind_config.fixed_args */
    /* Updates inside the backward pass (mx_bind_config.update_in_backward):
     * per argument, the node after which its update is handed over; -1:
     * none; UPDATE_AT_END: at the end of the pass (a gradient of zeros:
     * the outputs do not depend on the argument). */
    int32_t *update_after;
    mx_status (*update)(void *update_ctx, int arg, mx_ndarray *weight, mx_ndarray *grad);
    void *update_ctx;
    bool for_training;
    bool check_numerics;         /* run node by node, stop at the first NaN/Inf */
    uint32_t *finite_pass;       /* per entry: the check pass that found it finite */
    uint32_t check_pass;         /* forward or backward calls with checks on */
    pass_graph graphs[N_PASS_KINDS];
    atomic_llong graph_launches;
    float loss_scale;            /* mx_executor_set_loss_scale (1) */
};

static bool env_flag(const char *name) { return mx_env_long(name, 1) != 0; }

#define UPDATE_AT_END INT32_MAX

/* Gradient sums become adds (plan.h's plan_addto_mode) on CPU binds only:
 * every CPU backward kernel honours MX_REQ_ADD (opcheck tests it for each
 * op). MXNET_EXEC_ENABLE_ADDTO=1: wherever they can, =0: never; unset:
 * where they shrink the plan. */
static plan_addto_mode plans_addto(mx_context ctx)
{
    if (ctx.dev_type != MX_DEV_CPU) return ADDTO_NEVER;
    long v = mx_env_long("MXNET_EXEC_ENABLE_ADDTO", -1);
    return v < 0 ? ADDTO_AUTO : v ? ADDTO_ALWAYS : ADDTO_NEVER;
}

bool mx_executor_folds(mx_context ctx)
{
    return ctx.dev_type == MX_DEV_CPU && env_flag("MXNET_EXEC_ENABLE_FOLDING");
}

/* Concat inputs written in place inside the Concat's output (plan.c's
 * plan_concat_views): CPU binds, unless MXC_CONCAT_IN_PLACE=0 (the GPU
 * kernels take dense tensors only). */
static bool concat_views(mx_context ctx)
{
    return ctx.dev_type == MX_DEV_CPU && env_flag("MXC_CONCAT_IN_PLACE");
}

static mx_tensor tensor_of(mx_ndarray *a, mx_shape shape)
{
    if (!a) return (mx_tensor){.data = NULL, .shape = shape, .dtype = MX_FLOAT32};
    return (mx_tensor){.data = mx_ndarray_data(a), .shape = *mx_ndarray_shape(a), .dtype = mx_ndarray_dtype(a),
                       .ctx = mx_ndarray_context(a)};
}

/* A Concat input inside the Concat's output (plan.h's batch_stride): the
 * flat run of the buffer from its first element to its last, so that the
 * engine variable and the checks see it; kernels get its tensor with the
 * stride (its items lie `stride` elements apart, the other inputs'
 * channels between them). */
static mx_status strided_view(mx_ndarray *buffer, size_t offset, const mx_shape *shape, int64_t stride,
                              mx_ndarray **out)
{
    const int64_t items = shape->ndim > 0 ? shape->dims[0] : 1, item = items > 0 ? mx_shape_size(shape) / items : 0;
    const int64_t first = (int64_t)(offset / sizeof(float)), span = items > 0 ? (items - 1) * stride + item : 0;
    return mx_ndarray_slice(buffer, first, first + span, out);
}

/* Frees for real once the caller and every pushed job let go. */
static void executor_destroy(mx_executor *ex)
{
    int n_entries = ex->eg.shapes.n_entries;
    if (ex->entry_arrays)
        for (int e = 0; e < n_entries; e++) mx_ndarray_free(ex->entry_arrays[e]);
    if (ex->buffers)
        for (int i = 0; i < ex->n_buffers; i++) mx_ndarray_free(ex->buffers[i]);
    if (ex->outputs)
        for (int i = 0; i < ex->n_outputs; i++) mx_ndarray_free(ex->outputs[i]);
    if (ex->output_names)
        for (int i = 0; i < ex->n_outputs; i++) free(ex->output_names[i]);
    if (ex->nodes)
        for (int i = 0; i < ex->eg.n_nodes; i++) {
            node_info *ni = &ex->nodes[i];
            if (ni->kernel_state && ni->kernels.state_free) ni->kernels.state_free(ni->kernel_state);
            for (int j = 0; ni->scratch && j < ni->n_aux; j++) mx_ndarray_free(ni->scratch[j]);
            free(ni->scratch);
            free(ni->in);
            free(ni->out);
            free(ni->out_grad);
            free(ni->in_grad);
            free(ni->req);
            free(ni->reads);
            free(ni->writes);
        }
    for (int i = 0; ex->update_after && i < ex->eg.n_args; i++) /* the zero gradients it made */
        if (ex->update_after[i] == UPDATE_AT_END) mx_ndarray_free(ex->arg_grads[i]);
    for (int k = 0; k < N_PASS_KINDS; k++) {
        mx_device_graph_free(ex->graphs[k].graph);
        free(ex->graphs[k].reads);
        free(ex->graphs[k].writes);
    }
    mx_ndarray_free(ex->workspace);
    free(ex->buffers);
    free(ex->entry_arrays);
    free(ex->entry_tensors);
    free(ex->nodes);
    free(ex->outputs);
    free(ex->output_names);
    free(ex->grad_reqs);
    free(ex->arg_grads);
    free(ex->fixed_args);
    free(ex->update_after);
    free(ex->finite_pass);
    memory_plan_free(&ex->plan);
    exec_graph_free(&ex->eg);
    free(ex);
}

static void executor_release(mx_executor *ex)
{
    if (atomic_fetch_sub(&ex->refs, 1) == 1) executor_destroy(ex);
}

/* Returns at once; jobs still queued keep the executor alive. */
void mx_executor_free(mx_executor *ex)
{
    if (ex) executor_release(ex);
}

static mx_status plan_stats(const exec_graph *eg, const memory_plan *both, mx_memory_plan_stats *st)
{
    memset(st, 0, sizeof(*st));
    /* Naive: a buffer for every output of every node that runs, as an
     * allocator without a plan gives; hidden outputs nobody reads (LRN's
     * tmp_norm in prediction) count, since such an allocator has them. */
    for (int i = 0; i < eg->n_nodes; i++) {
        const mx_node *n = mx_graph_node(eg->g, (uint32_t)i);
        if (!eg->needed[i] || n->kind == MX_NODE_VARIABLE) continue;
        for (int j = 0; j < n->n_outputs; j++) {
            uint32_t e = eg->shapes.entry_offset[i] + (uint32_t)j;
            bool hidden_unused = n->kind == MX_NODE_OP && eg->kind[e] == ENTRY_UNUSED;
            if (eg->kind[e] != ENTRY_INTERNAL && !hidden_unused) continue;
            st->naive += exec_entry_bytes(eg, e);
            st->n_internal++;
        }
    }
    memory_plan p;
    MX_TRY(memory_plan_build(eg, true, false, plans_addto(mx_cpu()), &p));
    st->inplace = memory_plan_total(&p);
    memory_plan_free(&p);
    MX_TRY(memory_plan_build(eg, false, true, plans_addto(mx_cpu()), &p));
    st->coshare = memory_plan_total(&p);
    memory_plan_free(&p);
    st->both = memory_plan_total(both);
    st->n_colors = both->n_colors;
    st->n_buffers = both->n_buffers;
    st->workspace = both->workspace;
    st->n_mirror = eg->n_mirror;
    st->n_mirror_heavy = eg->n_mirror_heavy;
    st->n_checkpoints = eg->n_checkpoints;
    st->n_checkpoint_candidates = eg->n_checkpoint_candidates;
    st->n_segment_plans = eg->n_segment_plans;
    st->segment_budget = eg->segment_budget;
    for (int i = 0; eg->deferred_from && i < eg->n_nodes; i++) st->n_deferred += eg->needed[i] && eg->deferred_from[i] >= 0;
    for (int a = 0; eg->update_after && a < eg->n_args; a++)
        if (eg->update_after[a] >= 0) st->grads_in_plan += exec_entry_bytes(eg, exec_entry_id(eg, eg->grads[a]));
    st->n_concat_views = both->n_views;
    st->n_concat_grad_views = both->n_grad_views;
    for (int i = 0; i < eg->n_forward; i++) {
        const mx_node *n = mx_graph_node(eg->g, (uint32_t)i);
        if (eg->needed[i] && n->kind == MX_NODE_OP && n->op == &mx_op_concat && !exec_node_is_mirror(n))
            st->n_concat_inputs += n->n_inputs;
    }
    for (int i = eg->n_forward; i < eg->n_nodes; i++) {
        if (!eg->needed[i] || !exec_node_is_grad_sum(eg, (uint32_t)i)) continue;
        st->n_sums++;
        st->n_sums_added += both->sum_done[i];
    }
    return MX_OK;
}

static mx_status plan_memory(const mx_graph *g, const char *const *names, const mx_shape *shapes, int n,
                             bool for_training, exec_mirror mirror, const bool *in_backward, mx_memory_plan_stats *out)
{
    exec_graph eg;
    MX_TRY(exec_graph_prepare(g, NULL, 0, for_training, mirror, NULL, names, shapes, n, mx_executor_folds(mx_cpu()),
                              in_backward, &eg));
    eg.concat_views = concat_views(mx_cpu()) && exec_graph_all_float32(&eg);
    memory_plan both;
    mx_status s = memory_plan_build(&eg, true, true, plans_addto(mx_cpu()), &both);
    if (s == MX_OK) s = plan_stats(&eg, &both, out);
    memory_plan_free(&both);
    exec_graph_free(&eg);
    return s;
}

mx_status mx_executor_plan_memory(const mx_graph *g, const char *const *names, const mx_shape *shapes, int n,
                                  bool for_training, mx_memory_plan_stats *out)
{
    return plan_memory(g, names, shapes, n, for_training, EXEC_MIRROR_NONE, NULL, out);
}

mx_status mx_executor_plan_memory_mirror(const mx_graph *g, const char *const *names, const mx_shape *shapes, int n,
                                         int level, mx_memory_plan_stats *out)
{
    if (level != EXEC_MIRROR_CHEAP && level != EXEC_MIRROR_SEGMENTS)
        return MX_ERROR(MX_ERR_INVALID, "mirroring level %d: 1 (cheap layers) or 2 (segments)", level);
    return plan_memory(g, names, shapes, n, true, (exec_mirror)level, NULL, out);
}

mx_status mx_executor_mirror_level(int *level)
{
    const long v = mx_env_long("MXNET_BACKWARD_DO_MIRROR", 0);
    if (v < EXEC_MIRROR_NONE || v > EXEC_MIRROR_SEGMENTS)
        return MX_ERROR(MX_ERR_INVALID, "MXNET_BACKWARD_DO_MIRROR=%ld: 0 (keep every output), 1 (recompute the cheap "
                                        "layers) or 2 (recompute all but the checkpoints)", v);
    *level = (int)v;
    return MX_OK;
}

mx_status mx_executor_plan_memory_updating(const mx_graph *g, const char *const *names, const mx_shape *shapes, int n,
                                           const bool *in_backward, mx_memory_plan_stats *out)
{
    return plan_memory(g, names, shapes, n, true, EXEC_MIRROR_NONE, in_backward, out);
}

void mx_executor_memory(const mx_executor *ex, mx_memory_plan_stats *out) { *out = ex->stats; }

/* Reads and writes of a node, as engine variables. */
static mx_status collect_vars(mx_executor *ex, node_info *ni, const mx_entry *reads, int n_reads, const uint32_t *outs,
                              int n_outs)
{
    int cap = n_reads + n_outs + 4;
    ni->reads = mx_malloc(sizeof(mx_engine_var *) * (size_t)cap);
    ni->writes = mx_malloc(sizeof(mx_engine_var *) * (size_t)cap);
    if (!ni->reads || !ni->writes) return MX_ERR_NOMEM;
    for (int j = 0; j < n_reads; j++) {
        mx_ndarray *a = ex->entry_arrays[exec_entry_id(&ex->eg, reads[j])];
        if (a) ni->reads[ni->n_reads++] = mx_ndarray_var(a);
    }
    for (int j = 0; j < n_outs; j++) {
        mx_ndarray *a = ex->entry_arrays[outs[j]];
        if (a) ni->writes[ni->n_writes++] = mx_ndarray_var(a);
    }
    if (ni->uses_workspace && ex->workspace) ni->writes[ni->n_writes++] = mx_ndarray_var(ex->workspace);
    return MX_OK;
}

static mx_req output_req(const mx_executor *ex, uint32_t e)
{
    switch (ex->eg.kind[e]) {
    case ENTRY_UNUSED: return MX_REQ_NULL;
    case ENTRY_GRAD: return ex->grad_reqs[ex->eg.arg_index[e]] == MX_GRAD_ADD ? MX_REQ_ADD : MX_REQ_WRITE;
    default: return ex->plan.addto[e] ? MX_REQ_ADD : ex->plan.inplace[e] ? MX_REQ_INPLACE : MX_REQ_WRITE;
    }
}

/* A node's layer and op names with what was folded into it: "bn1+relu1"
 * (BatchNorm+Activation), "bn2c+res2a+res2a_relu"
 * (BatchNorm+ElementWiseSum+Activation), "conv3+plus0+relu2"
 * (Convolution+elemwise_add+Activation, in prediction). */
static void folded_names(const mx_graph *g, const mx_node *f, const char *layer, char *name, size_t name_size,
                         char *op_name, size_t op_size)
{
    int at = snprintf(name, name_size, "%s", layer);
    snprintf(op_name, op_size, "%s", f->op->name); /* the fused op's name lists the sum */
    const mx_node *last = f;
    if (f->op == &mx_op_batch_norm_add || f->op == &mx_op_convolution_add) {
        last = mx_graph_node(g, f->folded_node);
        if (at >= 0 && (size_t)at < name_size) at += snprintf(name + at, name_size - (size_t)at, "+%s", last->name);
    }
    if (last->fold.kind == MX_FOLD_NONE) return;
    const mx_node *act = mx_graph_node(g, last->folded_node);
    if (at >= 0 && (size_t)at < name_size) snprintf(name + at, name_size - (size_t)at, "+%s", act->name);
    size_t used = strlen(op_name);
    if (used < op_size) snprintf(op_name + used, op_size - used, "+%s", act->op->name);
}

/* A node's tensors as its kernels get them: inputs, outputs, then for a
 * backward node the output gradients and the input gradients it writes. */
enum { NODE_IN, NODE_OUT, NODE_OUT_GRAD, NODE_IN_GRAD, NODE_LISTS };
static void node_tensor_lists(const node_info *ni, mx_tensor *lists[NODE_LISTS], int counts[NODE_LISTS])
{
    lists[NODE_IN] = ni->in, counts[NODE_IN] = ni->n_in;
    lists[NODE_OUT] = ni->out, counts[NODE_OUT] = ni->n_out;
    lists[NODE_OUT_GRAD] = ni->out_grad, counts[NODE_OUT_GRAD] = ni->backward ? ni->n_out : 0;
    lists[NODE_IN_GRAD] = ni->in_grad, counts[NODE_IN_GRAD] = ni->backward ? ni->node->n_outputs : 0;
}

/* Every tensor of a node in a dtype its kernels compute in: float32, one
 * the kernels list, or on the CPU any (float32 copies: run_shadowed). */
static mx_status check_node_dtypes(const mx_executor *ex, const node_info *ni, const mx_node *f)
{
    if (ex->ctx.dev_type == MX_DEV_CPU) return MX_OK;
    mx_tensor *lists[NODE_LISTS];
    int counts[NODE_LISTS];
    node_tensor_lists(ni, lists, counts);
    uint32_t ok = MX_DTYPE_BIT(MX_FLOAT32) | ni->kernels.dtypes;
    for (int l = 0; l < NODE_LISTS; l++)
        for (int j = 0; j < counts[l]; j++)
            if (!(ok & MX_DTYPE_BIT(lists[l][j].dtype))) {
                char c[32];
                return MX_ERROR(MX_ERR_UNSUPPORTED, "bind: layer '%s' (%s) has no %s kernel on %s", f->name, f->op->name,
                                mx_dtype_name(lists[l][j].dtype), mx_context_str(ex->ctx, c, sizeof(c)));
            }
    return MX_OK;
}

static mx_status setup_node(mx_executor *ex, uint32_t id)
{
    node_info *ni = &ex->nodes[id];
    const mx_node *n = mx_graph_node(ex->eg.g, id);
    const exec_graph *eg = &ex->eg;
    ni->id = id;
    ni->node = n;
    ni->backward = n->kind == MX_NODE_BACKWARD;
    ni->mirror = exec_node_is_mirror(n);
    const mx_node *f = ni->backward ? mx_graph_node(eg->g, n->forward_node) : n;
    uint32_t fid = ni->backward ? n->forward_node : id;
    ni->op = f->op;
    ni->params = n->params;
    mx_status ks = mx_op_kernels_for(f->op, ex->ctx, &ni->kernels);
    if (ks == MX_OK && (ni->backward ? !ni->kernels.backward : !ni->kernels.forward))
        ks = MX_ERROR(MX_ERR_UNSUPPORTED, "operator '%s' has no %s kernel", f->op->name,
                      ni->backward ? "backward" : "forward");
    if (ks != MX_OK) return mx_error_prefix(ks, "bind: layer '%s'", f->name);
    ni->fold = f->fold;
    /* A deferred copy of a backward node (plan.h) reads the output
     * gradient its original turned in place, if that ran and an op does
     * not fold inside its kernel. */
    int32_t original = eg->deferred_from ? eg->deferred_from[id] : -1;
    if (original >= 0 && eg->needed[original] && !f->op->folds_backward) ni->fold = (mx_fold){MX_FOLD_NONE, 0, 0, 0};
    const char *layer = ni->mirror ? mx_graph_node(eg->g, n->forward_node)->name : f->name;
    folded_names(eg->g, f, layer, ni->name, sizeof(ni->name), ni->op_name, sizeof(ni->op_name));
    snprintf(ni->label, sizeof(ni->label), "%s (%s) %s", ni->name, ni->op_name,
             original >= 0 ? "bwd, deferred weights" : ni->backward ? "bwd" : ni->mirror ? "mirror" : "fwd");
    ni->n_in = f->n_inputs;
    ni->n_out = f->n_outputs;
    ni->n_aux = mx_node_num_aux(f);
    for (int j = 0; j < ni->n_in && j < 32 && ex->fixed_args && !ni->backward && !ni->mirror; j++) {
        uint32_t e = exec_entry_id(eg, f->inputs[j]);
        if (eg->kind[e] == ENTRY_ARG && ex->fixed_args[eg->arg_index[e]]) ni->fixed_inputs |= 1u << j;
    }
    ni->in = mx_calloc((size_t)ni->n_in + 1, sizeof(mx_tensor));
    ni->out = mx_calloc((size_t)ni->n_out + 1, sizeof(mx_tensor));
    ni->req = mx_calloc((size_t)(ni->n_in + ni->n_out) + 1, sizeof(mx_req));
    if (!ni->in || !ni->out || !ni->req) return MX_ERR_NOMEM;
    /* A backward node's inputs list the forward tensors it sees (with
     * mirroring, some are the recomputation copies'). */
    for (int j = 0; j < ni->n_in; j++)
        ni->in[j] = ex->entry_tensors[exec_entry_id(eg, ni->backward ? n->inputs[ni->n_out + j] : f->inputs[j])];
    for (int k = 0; k < ni->n_out; k++)
        ni->out[k] = ni->backward ? ex->entry_tensors[exec_entry_id(eg, n->inputs[ni->n_out + ni->n_in + k])]
                                  : ex->entry_tensors[eg->shapes.entry_offset[fid] + (uint32_t)k];
    uint32_t outs[MX_OP_MAX_IO];
    for (int k = 0; k < n->n_outputs; k++) outs[k] = eg->shapes.entry_offset[id] + (uint32_t)k;
    if (ni->backward) {
        ni->out_grad = mx_calloc((size_t)ni->n_out + 1, sizeof(mx_tensor));
        ni->in_grad = mx_calloc((size_t)n->n_outputs + 1, sizeof(mx_tensor));
        if (!ni->out_grad || !ni->in_grad) return MX_ERR_NOMEM;
        for (int k = 0; k < ni->n_out; k++) {
            mx_entry g = n->inputs[k];
            ni->out_grad[k] = g.node == MX_NO_NODE ? tensor_of(NULL, ni->out[k].shape)
                                                   : ex->entry_tensors[exec_entry_id(eg, g)];
            ni->out_grad[k].dtype = ni->out[k].dtype;
        }
        for (int j = 0; j < n->n_outputs; j++) {
            ni->in_grad[j] = ex->entry_tensors[outs[j]];
            ni->req[j] = output_req(ex, outs[j]);
        }
    } else {
        for (int k = 0; k < n->n_outputs; k++) ni->req[k] = output_req(ex, outs[k]);
        if (f->op->flags & MX_OP_NEEDS_RNG) {
            ni->rng_train = !f->op->uses_rng || f->op->uses_rng(n->params, true);
            ni->rng_infer = !f->op->uses_rng || f->op->uses_rng(n->params, false);
        }
        /* A prediction bind needs a generator only for what draws in
         * inference passes (Dropout with mode=always); forward(is_train)
         * on it checks again. */
        bool needed = ni->rng_infer || (ex->for_training && ni->rng_train);
        if (needed && !ex->rng)
            return MX_ERROR(MX_ERR_INVALID, "bind: layer '%s' (%s) draws random numbers%s: give the executor an rng",
                            n->name, f->op->name, ni->rng_infer ? "" : " in training");
    }
    MX_TRY(check_node_dtypes(ex, ni, f));
    if (ex->ctx.dev_type == MX_DEV_CPU) ni->shadow_bytes = exec_node_shadow_bytes(eg, id);
    /* At the workspace's end: the plan sized it for the op's own part,
     * rounded, before them (plan.c's node_workspace). */
    if (ni->shadow_bytes) ni->shadow_at = (ex->plan.workspace - ni->shadow_bytes) / 64 * 64;
    ni->uses_workspace = (f->op->workspace != NULL || ni->shadow_bytes) && ex->workspace;
    mx_entry reads[3 * MX_OP_MAX_IO];
    int n_reads = exec_node_reads(eg, id, reads);
    MX_TRY(collect_vars(ex, ni, reads, n_reads, outs, n->n_outputs));
    /* Ops with auxiliary states update them in training forward. A mirror
     * copy (BatchNorm with batch statistics, plan.c) recomputes the same
     * outputs, so it moves scratch states, the real ones once a step. */
    if (ni->mirror && ni->n_aux) {
        ni->scratch = mx_calloc((size_t)ni->n_aux, sizeof(mx_ndarray *));
        if (!ni->scratch) return MX_ERR_NOMEM;
        for (int j = 0; j < ni->n_aux; j++) {
            int slot = ni->n_in - ni->n_aux + j;
            MX_TRY(mx_ndarray_create(ex->rt, ni->in[slot].shape, ni->in[slot].dtype, ex->ctx, &ni->scratch[j]));
            MX_TRY(mx_nd_fill(ni->scratch[j], 0.0));
            ni->in[slot] = tensor_of(ni->scratch[j], ni->in[slot].shape);
            ni->writes[ni->n_writes++] = mx_ndarray_var(ni->scratch[j]);
        }
    } else if (!ni->backward) {
        for (int j = ni->n_in - ni->n_aux; j < ni->n_in; j++)
            ni->writes[ni->n_writes++] = mx_ndarray_var(ex->entry_arrays[exec_entry_id(eg, f->inputs[j])]);
    }
    /* The folded Activation's backward rewrites the output gradient. */
    if (ni->backward && ni->fold.kind != MX_FOLD_NONE && n->inputs[0].node != MX_NO_NODE) {
        mx_engine_var *dy = mx_ndarray_var(ex->entry_arrays[exec_entry_id(eg, n->inputs[0])]);
        for (int r = 0; r < ni->n_reads; r++)
            if (ni->reads[r] == dy) ni->reads[r--] = ni->reads[--ni->n_reads];
        ni->writes[ni->n_writes++] = dy;
    }
    ni->rng_var = (ni->rng_train || ni->rng_infer) && ex->rng;
    if (ni->rng_var) ni->writes[ni->n_writes++] = mx_rng_var(ex->rng);
    return MX_OK;
}

/* ---------------------------------------------------------------- CUDA graphs */

static void pass_range(const mx_executor *ex, pass_kind k, int *begin, int *end)
{
    *begin = k == PASS_BACKWARD ? ex->eg.n_forward : 0;
    *end = k == PASS_BACKWARD ? ex->eg.n_nodes : ex->eg.n_forward;
}

static void graph_off(pass_graph *pg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void graph_off(pass_graph *pg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pg->why, sizeof(pg->why), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&pg->off, true, memory_order_release);
}

/* What keeps a kind of pass from running as a graph, known at bind: the
 * settings first, then the nodes, then the device (so the node rules show
 * on a CPU bind too). */
static void graph_refusal_at_bind(mx_executor *ex, const mx_bind_config *cfg, pass_kind k)
{
    pass_graph *pg = &ex->graphs[k];
    atomic_init(&pg->off, false);
    const node_info *drawing = NULL;
    int begin, end;
    pass_range(ex, k, &begin, &end);
    for (int i = begin; i < end && !drawing; i++) {
        const node_info *ni = &ex->nodes[i];
        if (ni->op && !ni->backward && (k == PASS_INFER ? ni->rng_infer : ni->rng_train)) drawing = ni;
    }
    if (!cfg->cuda_graph) graph_off(pg, "CUDA graphs are off for this bind");
    else if (k != PASS_INFER && !ex->for_training) graph_off(pg, "a prediction bind");
    else if (k == PASS_BACKWARD && ex->update_after) graph_off(pg, "the updates inside the backward pass");
    else if (drawing)
        graph_off(pg, "layer '%s' (%s) draws new random numbers every pass", drawing->name, drawing->op_name);
    else if (ex->ctx.dev_type != MX_DEV_GPU) graph_off(pg, "not a GPU bind (CUDA graphs are for GPUs)");
}

const char *mx_executor_graph_refusal(const mx_executor *ex, bool backward, bool is_train)
{
    const pass_graph *pg = &ex->graphs[backward ? PASS_BACKWARD : is_train ? PASS_TRAIN : PASS_INFER];
    if (atomic_load_explicit(&pg->off, memory_order_acquire)) return pg->why;
    return ex->check_numerics ? "numerics checks run the nodes one by one" : "";
}

int64_t mx_executor_graph_launches(const mx_executor *ex) { return (int64_t)atomic_load(&ex->graph_launches); }

mx_status mx_executor_bind(mx_runtime *rt, const mx_graph *g, const mx_bind_config *cfg, mx_executor **out)
{
    *out = NULL;
    /* Each node's kernels for this device are resolved in setup_node: an
     * operator without one is a bind error naming the layer and device. */
    MX_TRY(mx_device_check(cfg->ctx));
    uint32_t *ids = mx_malloc(sizeof(uint32_t) * (size_t)(mx_graph_num_nodes(g) + 1));
    if (!ids) return MX_ERR_NOMEM;
    int n_args = mx_graph_list_arguments(g, ids);
    int n_aux_list = mx_graph_list_aux(g, ids + n_args);
    const char **names = mx_malloc(sizeof(char *) * (size_t)(n_args + n_aux_list + 1));
    mx_shape *shapes = mx_malloc(sizeof(mx_shape) * (size_t)(n_args + n_aux_list + 1));
    bool *grad_needed = mx_calloc((size_t)n_args + 1, sizeof(bool));
    mx_executor *ex = mx_calloc(1, sizeof(*ex));
    mx_status s = (names && shapes && grad_needed && ex) ? MX_OK : MX_ERR_NOMEM;
    char c1[32], c2[32];
    for (int i = 0; i < n_args + n_aux_list && s == MX_OK; i++) {
        const mx_node *v = mx_graph_node(g, ids[i]);
        mx_ndarray *a = i < n_args ? cfg->args[i] : (cfg->aux ? cfg->aux[i - n_args] : NULL);
        if (!a) {
            s = MX_ERROR(MX_ERR_INVALID, "bind: no array for %s '%s'", i < n_args ? "argument" : "auxiliary state",
                         v->name);
            break;
        }
        if (!mx_context_equal(mx_ndarray_context(a), cfg->ctx)) {
            s = MX_ERROR(MX_ERR_INVALID, "bind: '%s' is an array on %s; the executor runs on %s", v->name,
                         mx_context_str(mx_ndarray_context(a), c1, sizeof(c1)), mx_context_str(cfg->ctx, c2, sizeof(c2)));
            break;
        }
        names[i] = v->name;
        shapes[i] = *mx_ndarray_shape(a);
    }
    if (s == MX_OK) {
        atomic_init(&ex->refs, 1);
        ex->loss_scale = 1.0f;
        ex->rt = rt;
        ex->ctx = cfg->ctx;
        ex->rng = cfg->rng;
        ex->for_training = cfg->for_training;
        ex->grad_reqs = mx_calloc((size_t)n_args + 1, sizeof(mx_grad_req));
        ex->arg_grads = mx_calloc((size_t)n_args + 1, sizeof(mx_ndarray *));
        if (!ex->grad_reqs || !ex->arg_grads) s = MX_ERR_NOMEM;
        if (s == MX_OK && cfg->fixed_args) {
            ex->fixed_args = mx_malloc((size_t)n_args + 1);
            if (!ex->fixed_args) s = MX_ERR_NOMEM;
            else memcpy(ex->fixed_args, cfg->fixed_args, (size_t)n_args * sizeof(bool));
        }
    }
    bool *updated = NULL; /* per argument: updated inside the backward pass */
    if (s == MX_OK && cfg->update_in_backward) {
        updated = mx_calloc((size_t)n_args + 1, sizeof(bool));
        ex->update_after = mx_malloc(sizeof(int32_t) * ((size_t)n_args + 1));
        if (!updated || !ex->update_after) s = MX_ERR_NOMEM;
        else if (!cfg->for_training || !cfg->update || cfg->ctx.dev_type != MX_DEV_CPU)
            s = MX_ERROR(MX_ERR_INVALID, "bind: updates inside the backward pass need a training bind on the CPU "
                                         "and an update function");
        ex->update = cfg->update;
        ex->update_ctx = cfg->update_ctx;
    }
    for (int i = 0; i < n_args && s == MX_OK && cfg->for_training; i++) {
        mx_ndarray *gr = cfg->arg_grads ? cfg->arg_grads[i] : NULL;
        bool in_backward = cfg->update_in_backward && cfg->update_in_backward[i];
        mx_grad_req req = cfg->grad_reqs ? cfg->grad_reqs[i] : (gr || in_backward ? MX_GRAD_WRITE : MX_GRAD_NULL);
        if (in_backward && req != MX_GRAD_NULL) {
            if (req != MX_GRAD_WRITE || gr) {
                s = MX_ERROR(MX_ERR_INVALID, "bind: argument '%s' is updated inside the backward pass: it takes "
                                             "grad_req write and no gradient array", names[i]);
                break;
            }
            updated[i] = true;
            ex->grad_reqs[i] = req;
            grad_needed[i] = true;
            continue;
        }
        if (req != MX_GRAD_NULL && !gr) {
            s = MX_ERROR(MX_ERR_INVALID, "bind: argument '%s' asks for a gradient but has no gradient array", names[i]);
            break;
        }
        if (gr && req != MX_GRAD_NULL && (!mx_shape_equal(mx_ndarray_shape(gr), &shapes[i]) ||
                                          !mx_context_equal(mx_ndarray_context(gr), cfg->ctx))) {
            char a[160], b[160];
            s = MX_ERROR(MX_ERR_INVALID, "bind: gradient array of '%s' has shape %s, the argument %s", names[i],
                         mx_shape_str(mx_ndarray_shape(gr), a, sizeof(a)), mx_shape_str(&shapes[i], b, sizeof(b)));
            break;
        }
        ex->grad_reqs[i] = req;
        ex->arg_grads[i] = req != MX_GRAD_NULL ? gr : NULL;
        grad_needed[i] = req != MX_GRAD_NULL;
    }
    /* Read once, at bind, as MXNet's graph executor does. */
    int mirror = EXEC_MIRROR_NONE;
    if (s == MX_OK) s = mx_executor_mirror_level(&mirror);
    if (s == MX_OK)
        s = exec_graph_prepare(g, cfg->outputs, cfg->n_outputs, cfg->for_training, mirror, grad_needed, names, shapes,
                               n_args + n_aux_list, !cfg->no_folding && mx_executor_folds(cfg->ctx), updated, &ex->eg);
    if (s == MX_OK) ex->eg.concat_views = concat_views(cfg->ctx) && exec_graph_all_float32(&ex->eg);
    /* The arrays must have the dtypes the graph computes them in. */
    for (int i = 0; i < n_args + n_aux_list && s == MX_OK; i++) {
        const bool is_arg = i < n_args;
        mx_ndarray *a = is_arg ? cfg->args[i] : cfg->aux[i - n_args];
        mx_dtype want = (mx_dtype)ex->eg.shapes.dtypes[ex->eg.shapes.entry_offset[is_arg ? ex->eg.args[i]
                                                                                         : ex->eg.aux[i - n_args]]];
        mx_ndarray *gr = is_arg ? ex->arg_grads[i] : NULL;
        if (mx_ndarray_dtype(a) != want)
            s = MX_ERROR(MX_ERR_INVALID, "bind: '%s' is a %s array; the graph computes it in %s", names[i],
                         mx_dtype_name(mx_ndarray_dtype(a)), mx_dtype_name(want));
        else if (gr && mx_ndarray_dtype(gr) != want)
            s = MX_ERROR(MX_ERR_INVALID, "bind: the gradient array of '%s' is %s; the argument is %s", names[i],
                         mx_dtype_name(mx_ndarray_dtype(gr)), mx_dtype_name(want));
    }
    /* Their gradients join the plan; one the outputs do not depend on is
     * zeros, in an array of the executor's own, handed over at the end. */
    if (s == MX_OK && updated) memcpy(ex->update_after, ex->eg.update_after, sizeof(int32_t) * (size_t)n_args);
    for (int i = 0; i < n_args && s == MX_OK && updated; i++) {
        if (!updated[i] || ex->update_after[i] >= 0) continue;
        ex->update_after[i] = UPDATE_AT_END;
        s = mx_ndarray_create(rt, shapes[i], mx_ndarray_dtype(cfg->args[i]), cfg->ctx, &ex->arg_grads[i]);
        if (s == MX_OK) s = mx_nd_fill(ex->arg_grads[i], 0.0);
    }
    free(ids);
    free(names);
    free(shapes);
    free(grad_needed);
    free(updated);
    if (s != MX_OK) {
        if (ex) exec_graph_free(&ex->eg);
        for (int i = 0; ex && ex->arg_grads && ex->update_after && i < n_args; i++)
            if (ex->update_after[i] == UPDATE_AT_END) mx_ndarray_free(ex->arg_grads[i]);
        free(ex ? ex->grad_reqs : NULL);
        free(ex ? ex->arg_grads : NULL);
        free(ex ? ex->fixed_args : NULL);
        free(ex ? ex->update_after : NULL);
        free(ex);
        return s;
    }

    exec_graph *eg = &ex->eg;
    bool inplace = env_flag("MXNET_EXEC_ENABLE_INPLACE"), coshare = env_flag("MXNET_EXEC_ENABLE_COSHARE");
    s = memory_plan_build(eg, inplace, coshare, plans_addto(cfg->ctx), &ex->plan);
    if (s == MX_OK) s = plan_stats(eg, &ex->plan, &ex->stats);
    int n_entries = eg->shapes.n_entries;
    if (s == MX_OK) {
        ex->n_buffers = ex->plan.n_buffers;
        ex->buffers = mx_calloc((size_t)ex->n_buffers + 1, sizeof(mx_ndarray *));
        ex->entry_arrays = mx_calloc((size_t)n_entries + 1, sizeof(mx_ndarray *));
        ex->entry_tensors = mx_calloc((size_t)n_entries + 1, sizeof(mx_tensor));
        ex->nodes = mx_calloc((size_t)eg->n_nodes + 1, sizeof(node_info));
        ex->n_outputs = mx_graph_num_heads(eg->g);
        ex->outputs = mx_calloc((size_t)ex->n_outputs + 1, sizeof(mx_ndarray *));
        ex->output_names = mx_calloc((size_t)ex->n_outputs + 1, sizeof(char *));
        if (!ex->buffers || !ex->entry_arrays || !ex->entry_tensors || !ex->nodes || !ex->outputs || !ex->output_names)
            s = MX_ERR_NOMEM;
    }
    for (int b = 0; b < ex->n_buffers && s == MX_OK; b++) {
        s = mx_ndarray_create(rt, MX_SHAPE((int64_t)((ex->plan.buffer_bytes[b] + 3) / 4)), MX_FLOAT32, cfg->ctx,
                              &ex->buffers[b]);
        if (s != MX_OK) { /* name the first layer output the buffer holds */
            const char *layer = "?";
            for (int e = 0; e < n_entries && !strcmp(layer, "?"); e++)
                if (ex->plan.storage[e] == b)
                    for (int i = 0; i < eg->n_nodes; i++)
                        if (eg->shapes.entry_offset[i] <= (uint32_t)e && (uint32_t)e < eg->shapes.entry_offset[i + 1]) {
                            layer = mx_graph_node(eg->g, (uint32_t)i)->name;
                            break;
                        }
            mx_error_prefix(s, "binding: internal buffer %d of %d (first for the output of '%s')", b + 1,
                            ex->n_buffers, layer);
        }
    }
    /* The shared workspace is sized by the CPU kernels (im2col and the
     * like); device kernels take theirs from their worker's scratch
     * (cuDNN's choice of algorithm decides how much). */
    if (s == MX_OK && ex->plan.workspace && cfg->ctx.dev_type == MX_DEV_CPU) {
        s = mx_ndarray_create(rt, MX_SHAPE((int64_t)((ex->plan.workspace + 3) / 4)), MX_FLOAT32, cfg->ctx,
                              &ex->workspace);
        if (s != MX_OK) mx_error_prefix(s, "binding: the operators' shared workspace");
    }
    /* Heads first, so an entry that is an output gets the output array. */
    for (int h = 0; h < ex->n_outputs && s == MX_OK; h++) {
        char name[512];
        mx_graph_output_name(eg->g, h, name, sizeof(name));
        ex->output_names[h] = mx_strdup(name);
        uint32_t e = exec_entry_id(eg, mx_graph_head(eg->g, h));
        if (!ex->output_names[h]) s = MX_ERR_NOMEM;
        else if (eg->kind[e] == ENTRY_OUTPUT && !ex->entry_arrays[e]) {
            s = mx_ndarray_create(rt, eg->shapes.shapes[e], (mx_dtype)eg->shapes.dtypes[e], cfg->ctx, &ex->entry_arrays[e]);
            if (s != MX_OK) mx_error_prefix(s, "binding: output '%s'", name);
        }
    }
    for (int e = 0; e < n_entries && s == MX_OK; e++) {
        int32_t k = eg->arg_index[e];
        mx_ndarray **slot = &ex->entry_arrays[e];
        switch (eg->kind[e]) {
        case ENTRY_INTERNAL:
            if (ex->plan.storage[e] >= 0 && ex->plan.batch_stride[e])
                s = strided_view(ex->buffers[ex->plan.storage[e]], ex->plan.offset[e], &eg->shapes.shapes[e],
                                 ex->plan.batch_stride[e], slot);
            else if (ex->plan.storage[e] >= 0)
                s = mx_ndarray_view(ex->buffers[ex->plan.storage[e]], ex->plan.offset[e], eg->shapes.shapes[e],
                                    (mx_dtype)eg->shapes.dtypes[e], slot);
            break;
        case ENTRY_ARG: *slot = mx_ndarray_retain(cfg->args[k]); break;
        case ENTRY_AUX: *slot = mx_ndarray_retain(cfg->aux[k]); break;
        case ENTRY_GRAD: *slot = mx_ndarray_retain(ex->arg_grads[k]); break;
        case ENTRY_HEAD_GRAD:
            s = mx_ndarray_create(rt, eg->shapes.shapes[e], (mx_dtype)eg->shapes.dtypes[e], cfg->ctx, slot);
            break;
        default: break;
        }
        if (s == MX_OK) ex->entry_tensors[e] = tensor_of(*slot, eg->shapes.shapes[e]);
        if (s == MX_OK && eg->kind[e] == ENTRY_INTERNAL && ex->plan.batch_stride[e]) {
            ex->entry_tensors[e].shape = eg->shapes.shapes[e];
            ex->entry_tensors[e].batch_stride = ex->plan.batch_stride[e];
        }
    }
    for (int h = 0; h < ex->n_outputs && s == MX_OK; h++) {
        mx_ndarray *a = ex->entry_arrays[exec_entry_id(eg, mx_graph_head(eg->g, h))];
        ex->outputs[h] = a ? mx_ndarray_retain(a) : NULL;
    }
    for (int i = 0; i < eg->n_nodes && s == MX_OK; i++) {
        const mx_node *n = mx_graph_node(eg->g, (uint32_t)i);
        /* A gradient sum done by adds has nothing to run (op stays NULL). */
        if (eg->needed[i] && n->kind != MX_NODE_VARIABLE && !ex->plan.sum_done[i]) s = setup_node(ex, (uint32_t)i);
    }
    if (s != MX_OK) {
        mx_executor_free(ex);
        return s;
    }
    for (int k = 0; k < N_PASS_KINDS; k++) graph_refusal_at_bind(ex, cfg, (pass_kind)k);
    *out = ex;
    return MX_OK;
}

/* ---------------------------------------------------------------- running */

typedef struct node_job {
    mx_executor *ex;
    node_info *ni;
    bool is_train;
    float loss_scale;        /* mx_executor_set_loss_scale's when pushed */
} node_job;

/* The node's kernels on exec (queued, for a device) over the given
 * tensors (the node's own, or float32 copies of them), its error named by
 * the layer. */
static mx_status run_kernels_on(mx_executor *ex, node_info *ni, bool is_train, float loss_scale, const mx_exec_ctx *exec,
                                mx_tensor *in, mx_tensor *out, mx_tensor *out_grad, mx_tensor *in_grad, const mx_req *req)
{
    /* A backward kernel sees the fold only when it takes its gradient itself
     * (CPU kernels of ops with folds_backward). */
    const bool kernel_folds = !ni->backward || (ni->op->folds_backward && ex->ctx.dev_type == MX_DEV_CPU);
    mx_op_ctx ctx = {.exec = exec, .is_train = is_train, .rng = ex->rng, .state = &ni->kernel_state,
                     .fold = kernel_folds ? ni->fold : (mx_fold){MX_FOLD_NONE, 0, 0, 0},
                     .fixed_inputs = ni->fixed_inputs, .loss_scale = loss_scale};
    if (ni->uses_workspace && ex->workspace) {
        ctx.workspace = mx_ndarray_data(ex->workspace);
        ctx.workspace_bytes = ni->shadow_bytes ? ni->shadow_at : ex->plan.workspace;
    }
    mx_tensor *aux = ni->n_aux ? &in[ni->n_in - ni->n_aux] : NULL;
    if (!kernel_folds && ni->fold.kind != MX_FOLD_NONE && out_grad[0].data)
        mx_fold_backward(mx_op_pool(&ctx), &ni->fold, out_grad[0].data, out[0].data, mx_shape_size(&out[0].shape));
    mx_status s = ni->backward ? ni->kernels.backward(&ctx, ni->params, out_grad, in, out, req, in_grad, aux)
                               : ni->kernels.forward(&ctx, ni->params, in, req, out, aux);
    if (s != MX_OK) mx_error_prefix(s, "layer '%s'", ni->name);
    return s;
}

/* A CPU node with tensors of dtypes its kernels do not compute in
 * (float16/bfloat16 as mshadow's half type runs MXNet's CPU kernels: float
 * arithmetic, half storage; an int32 index input): its float32 kernels run
 * on float32 copies at the workspace's end. What the kernels read is
 * converted before (inputs, aux states, output gradients, forward outputs
 * in backward, outputs they add to), what they write after
 * (mx_dtype_convert's rules: halves round to nearest even, integers
 * truncate and saturate); an in-place output becomes a write into its own
 * copy. */
static mx_status run_shadowed(mx_executor *ex, node_info *ni, bool is_train, float loss_scale, const mx_exec_ctx *exec)
{
    mx_tensor *orig[NODE_LISTS];
    int counts[NODE_LISTS];
    node_tensor_lists(ni, orig, counts);
    /* The kernels' view: the node's tensors and requests, the shadowed ones
     * replaced by their copies. */
    mx_tensor copy[NODE_LISTS][MX_OP_MAX_IO];
    mx_req req[2 * MX_OP_MAX_IO];
    for (int l = 0; l < NODE_LISTS; l++)
        if (counts[l]) memcpy(copy[l], orig[l], sizeof(mx_tensor) * (size_t)counts[l]);
    const int written_list = ni->backward ? NODE_IN_GRAD : NODE_OUT; /* what the requests are for */
    memcpy(req, ni->req, sizeof(mx_req) * (size_t)counts[written_list]);
    char *at = (char *)mx_ndarray_data(ex->workspace) + ni->shadow_at;
    for (int l = 0; l < NODE_LISTS; l++)
        for (int j = 0; j < counts[l]; j++) {
            mx_tensor *t = &copy[l][j];
            if (!t->data || t->dtype == MX_FLOAT32 || (ni->kernels.dtypes & MX_DTYPE_BIT(t->dtype))) continue;
            const int64_t n = mx_shape_size(&t->shape);
            const bool is_output = l == written_list;
            const mx_req r = is_output ? req[j] : MX_REQ_NULL;
            if (!is_output || r == MX_REQ_ADD || (ni->backward && l == NODE_OUT))
                MX_TRY(mx_dtype_convert(ni->name, at, MX_FLOAT32, t->data, t->dtype, n, false));
            if (is_output && r == MX_REQ_INPLACE) req[j] = MX_REQ_WRITE;
            t->data = at;
            t->dtype = MX_FLOAT32;
            at += EXEC_SHADOW_ROUND((size_t)n * sizeof(float));
        }
    MX_TRY(run_kernels_on(ex, ni, is_train, loss_scale, exec, copy[NODE_IN], copy[NODE_OUT], copy[NODE_OUT_GRAD],
                          copy[NODE_IN_GRAD], req));
    /* Back into the node's tensors: the outputs it wrote and, in forward,
     * the aux states it moves. */
    const int first_aux = ni->backward ? ni->n_in : ni->n_in - ni->n_aux;
    for (int l = 0; l < NODE_LISTS; l++)
        for (int j = 0; j < counts[l]; j++) {
            const bool written = (l == written_list && ni->req[j] != MX_REQ_NULL) || (l == NODE_IN && j >= first_aux);
            if (written && copy[l][j].data != orig[l][j].data)
                MX_TRY(mx_dtype_convert(ni->name, orig[l][j].data, orig[l][j].dtype, copy[l][j].data, MX_FLOAT32,
                                        mx_shape_size(&orig[l][j].shape), false));
        }
    return MX_OK;
}

static mx_status run_node_kernels(mx_executor *ex, node_info *ni, bool is_train, float loss_scale,
                                  const mx_exec_ctx *exec)
{
    if (ni->shadow_bytes) return run_shadowed(ex, ni, is_train, loss_scale, exec);
    return run_kernels_on(ex, ni, is_train, loss_scale, exec, ni->in, ni->out, ni->out_grad, ni->in_grad, ni->req);
}

static mx_status node_run(void *payload, const mx_exec_ctx *exec)
{
    node_job *job = payload;
    MX_TRY(run_node_kernels(job->ex, job->ni, job->is_train, job->loss_scale, exec));
    /* Device kernels are queued on the worker's stream. */
    mx_status s = mx_device_op_done(exec);
    if (s != MX_OK) mx_error_prefix(s, "layer '%s'", job->ni->name);
    return s;
}

static void node_job_free(void *payload)
{
    node_job *job = payload;
    executor_release(job->ex);
    free(job);
}

static mx_status push_node(mx_executor *ex, node_info *ni, bool is_train)
{
    node_job *job = mx_malloc(sizeof(*job));
    if (!job) return MX_ERR_NOMEM;
    *job = (node_job){ex, ni, is_train, ex->loss_scale};
    atomic_fetch_add(&ex->refs, 1);
    /* A pass that draws nothing does not wait on (or hold up) the rng. */
    int n_writes = ni->n_writes - (ni->rng_var && !(is_train ? ni->rng_train : ni->rng_infer));
    mx_engine_op op = {.fn = node_run, .payload = job, .payload_free = node_job_free, .reads = ni->reads,
                       .n_reads = ni->n_reads, .writes = ni->writes, .n_writes = n_writes, .ctx = ex->ctx,
                       .lane = MX_LANE_COMPUTE, .name = ni->node->name,
                       .profile_name = ni->label};
    return mx_engine_push(mx_runtime_engine(ex->rt), &op);
}

static mx_status run_checked(mx_executor *ex, int begin, int end, bool is_train);

/* A whole pass as one engine operation (mx_bind_config.cuda_graph): its
 * graph, captured at the first such operation, launched. */
typedef struct pass_job {
    mx_executor *ex;
    pass_kind kind;
    bool is_train;
    float loss_scale;        /* mx_executor_set_loss_scale's when pushed */
} pass_job;

static mx_status run_pass_kernels(void *arg, const mx_exec_ctx *exec)
{
    pass_job *job = arg;
    int begin, end;
    pass_range(job->ex, job->kind, &begin, &end);
    for (int i = begin; i < end; i++)
        if (job->ex->nodes[i].op)
            MX_TRY(run_node_kernels(job->ex, &job->ex->nodes[i], job->is_train, job->loss_scale, exec));
    return MX_OK;
}

static mx_status graph_pass_run(void *payload, const mx_exec_ctx *exec)
{
    pass_job *job = payload;
    pass_graph *pg = &job->ex->graphs[job->kind];
    /* The scratch moved, or (backward: the loss layers' kernel argument)
     * the loss scale changed: capture again. */
    const bool stale_scale = job->kind == PASS_BACKWARD && pg->loss_scale != job->loss_scale;
    if (pg->graph && (!mx_device_graph_current(exec, pg->graph) || stale_scale)) {
        mx_device_graph_free(pg->graph);
        pg->graph = NULL;
    }
    if (!pg->graph) {
        char why[256];
        if (atomic_load_explicit(&pg->off, memory_order_acquire)) {
            /* pushed before an earlier one turned the kind off */
        } else if (!mx_device_graph_possible(exec, why, sizeof(why))) graph_off(pg, "%s", why);
        else if (mx_device_graph_capture(exec, run_pass_kernels, job, &pg->graph) != MX_OK)
            graph_off(pg, "the capture failed: %s", mx_last_error());
        else pg->loss_scale = job->loss_scale;
        if (!pg->graph) { /* nothing ran: this pass node by node, here; the next ones as nodes again */
            MX_TRY(run_pass_kernels(job, exec));
            return mx_device_op_done(exec);
        }
    }
    MX_TRY(mx_device_graph_launch(exec, pg->graph));
    atomic_fetch_add(&job->ex->graph_launches, 1);
    return mx_device_op_done(exec);
}

static void pass_job_free(void *payload)
{
    pass_job *job = payload;
    executor_release(job->ex);
    free(job);
}

static bool has_var(mx_engine_var *const *vars, int n, const mx_engine_var *v)
{
    for (int i = 0; i < n; i++)
        if (vars[i] == v) return true;
    return false;
}

/* Every variable the pass's nodes read and write (written ones only in
 * writes; the rng's left out: a captured pass draws nothing). */
static mx_status collect_pass_vars(mx_executor *ex, pass_kind k, pass_graph *pg)
{
    int begin, end, n_r = 0, n_w = 0;
    pass_range(ex, k, &begin, &end);
    for (int i = begin; i < end; i++) n_r += ex->nodes[i].n_reads, n_w += ex->nodes[i].n_writes;
    pg->reads = mx_malloc(sizeof(*pg->reads) * ((size_t)n_r + 1));
    pg->writes = mx_malloc(sizeof(*pg->writes) * ((size_t)n_w + 1));
    if (!pg->reads || !pg->writes) { /* both or neither: push_graph_pass makes them when reads is NULL */
        free(pg->reads);
        free(pg->writes);
        pg->reads = pg->writes = NULL;
        return MX_ERR_NOMEM;
    }
    for (int i = begin; i < end; i++) {
        const node_info *ni = &ex->nodes[i];
        if (!ni->op) continue;
        for (int w = 0; w < ni->n_writes - ni->rng_var; w++)
            if (!has_var(pg->writes, pg->n_writes, ni->writes[w])) pg->writes[pg->n_writes++] = ni->writes[w];
    }
    for (int i = begin; i < end; i++) {
        const node_info *ni = &ex->nodes[i];
        for (int r = 0; ni->op && r < ni->n_reads; r++)
            if (!has_var(pg->writes, pg->n_writes, ni->reads[r]) && !has_var(pg->reads, pg->n_reads, ni->reads[r]))
                pg->reads[pg->n_reads++] = ni->reads[r];
    }
    return MX_OK;
}

/* The pass as a graph launch when its kind runs as one (after a first
 * pass node by node); false: push the nodes. */
static bool pass_as_graph(const mx_executor *ex, pass_kind k)
{
    const pass_graph *pg = &ex->graphs[k];
    return !ex->check_numerics && !atomic_load_explicit(&pg->off, memory_order_acquire) && pg->runs >= 1;
}

static mx_status push_graph_pass(mx_executor *ex, pass_kind k, bool is_train)
{
    pass_graph *pg = &ex->graphs[k];
    if (!pg->reads) MX_TRY(collect_pass_vars(ex, k, pg));
    pass_job *job = mx_malloc(sizeof(*job));
    if (!job) return MX_ERR_NOMEM;
    *job = (pass_job){ex, k, is_train, ex->loss_scale};
    atomic_fetch_add(&ex->refs, 1);
    const char *name = k == PASS_BACKWARD ? "backward pass (CUDA graph)" : "forward pass (CUDA graph)";
    mx_engine_op op = {.fn = graph_pass_run, .payload = job, .payload_free = pass_job_free, .reads = pg->reads,
                       .n_reads = pg->n_reads, .writes = pg->writes, .n_writes = pg->n_writes, .ctx = ex->ctx,
                       .lane = MX_LANE_COMPUTE, .name = name, .profile_name = name};
    return mx_engine_push(mx_runtime_engine(ex->rt), &op);
}

/* The updates due after node `after` of the backward pass
 * (mx_bind_config.update_in_backward). */
static mx_status hand_over_updates(mx_executor *ex, int32_t after)
{
    const exec_graph *eg = &ex->eg;
    for (int a = 0; ex->update_after && a < eg->n_args; a++) {
        if (ex->update_after[a] != after) continue;
        mx_ndarray *weight = ex->entry_arrays[eg->shapes.entry_offset[eg->args[a]]];
        mx_ndarray *grad = after == UPDATE_AT_END ? ex->arg_grads[a] : ex->entry_arrays[exec_entry_id(eg, eg->grads[a])];
        mx_status s = ex->update(ex->update_ctx, a, weight, grad);
        if (s != MX_OK) return mx_error_prefix(s, "backward: the update of '%s'", mx_graph_node(eg->g, eg->args[a])->name);
    }
    return MX_OK;
}

mx_status mx_executor_forward(mx_executor *ex, bool is_train)
{
    for (int i = 0; i < ex->eg.n_forward && is_train && !ex->rng; i++) {
        const node_info *ni = &ex->nodes[i];
        if (ni->op && ni->rng_train)
            return MX_ERROR(MX_ERR_INVALID, "forward: layer '%s' (%s) draws random numbers in training passes: bind "
                                            "the executor with an rng", ni->node->name, ni->op->name);
    }
    if (ex->check_numerics) return run_checked(ex, 0, ex->eg.n_forward, is_train);
    const pass_kind k = is_train ? PASS_TRAIN : PASS_INFER;
    if (pass_as_graph(ex, k)) return push_graph_pass(ex, k, is_train);
    for (int i = 0; i < ex->eg.n_forward; i++)
        if (ex->nodes[i].op) MX_TRY(push_node(ex, &ex->nodes[i], is_train));
    ex->graphs[k].runs++;
    return MX_OK;
}

mx_status mx_executor_backward(mx_executor *ex, mx_ndarray *const *head_grads)
{
    exec_graph *eg = &ex->eg;
    if (eg->n_forward == eg->n_nodes && eg->n_args > 0) {
        bool any = false;
        for (int i = 0; i < eg->n_args; i++) any = any || ex->grad_reqs[i] != MX_GRAD_NULL;
        if (!any) return MX_ERROR(MX_ERR_INVALID, "backward: the executor was bound without gradients");
    }
    /* Head gradients of non-loss outputs: given, or ones. */
    for (int h = 0; h < mx_graph_num_heads(eg->g); h++) {
        char var[600];
        snprintf(var, sizeof(var), "%s_head_grad", ex->output_names[h]);
        uint32_t id = mx_graph_find(eg->g, var);
        if (id == MX_NO_NODE) continue;
        mx_ndarray *dst = ex->entry_arrays[eg->shapes.entry_offset[id]];
        if (!dst) continue;
        if (head_grads && head_grads[h]) MX_TRY(mx_nd_copy(dst, head_grads[h]));
        else MX_TRY(mx_nd_fill(dst, 1.0));
    }
    /* Arguments the outputs do not depend on have zero gradient. */
    for (int i = 0; i < eg->n_args; i++)
        if (ex->grad_reqs[i] == MX_GRAD_WRITE && eg->grads[i].node == MX_NO_NODE)
            MX_TRY(mx_nd_fill(ex->arg_grads[i], 0.0));
    if (ex->check_numerics) return run_checked(ex, eg->n_forward, eg->n_nodes, true);
    if (pass_as_graph(ex, PASS_BACKWARD)) { /* no updates inside such a pass (graph_refusal_at_bind) */
        MX_TRY(push_graph_pass(ex, PASS_BACKWARD, true));
        return hand_over_updates(ex, UPDATE_AT_END);
    }
    for (int i = eg->n_forward; i < eg->n_nodes; i++) {
        if (ex->nodes[i].op) MX_TRY(push_node(ex, &ex->nodes[i], true));
        MX_TRY(hand_over_updates(ex, i));
    }
    ex->graphs[PASS_BACKWARD].runs++;
    return hand_over_updates(ex, UPDATE_AT_END);
}

mx_status mx_executor_set_loss_scale(mx_executor *ex, float scale)
{
    if (!(scale > 0.0f) || !isfinite(scale))
        return MX_ERROR(MX_ERR_INVALID, "loss scale %g: a positive finite number is needed", (double)scale);
    ex->loss_scale = scale;
    return MX_OK;
}

int mx_executor_num_outputs(const mx_executor *ex) { return ex->n_outputs; }
mx_ndarray *mx_executor_output(const mx_executor *ex, int i) { return ex->outputs[i]; }
const char *mx_executor_output_name(const mx_executor *ex, int i) { return ex->output_names[i]; }

void mx_executor_count_nodes(const mx_executor *ex, int *n_forward, int *n_backward)
{
    *n_forward = *n_backward = 0;
    for (int i = 0; i < ex->eg.n_nodes; i++)
        if (ex->nodes[i].op) (*(i < ex->eg.n_forward ? n_forward : n_backward))++;
}

mx_status mx_executor_time_layers(mx_executor *ex, int n_iter, mx_layer_time **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (n_iter < 1) return MX_ERROR(MX_ERR_INVALID, "time: the number of iterations must be >= 1, got %d", n_iter);
    exec_graph *eg = &ex->eg;
    mx_engine *engine = mx_runtime_engine(ex->rt);
    int *slot = mx_malloc(sizeof(int) * (size_t)eg->n_nodes);
    mx_layer_time *t = mx_calloc((size_t)eg->n_nodes + 1, sizeof(*t));
    if (!slot || !t) {
        free(slot);
        free(t);
        return MX_ERR_NOMEM;
    }
    int n = 0;
    for (int i = 0; i < eg->n_nodes; i++) {
        slot[i] = -1;
        node_info *ni = &ex->nodes[i];
        if (!ni->op) continue;
        if (ni->backward || ni->mirror) { /* recomputation counts as the layer's backward time */
            slot[i] = slot[ni->node->forward_node];
            continue;
        }
        t[n] = (mx_layer_time){.name = ni->name, .op = ni->op_name};
        slot[i] = n++;
    }
    MX_TRY(mx_engine_wait_all(engine));
    mx_status s = MX_OK;
    bool has_backward = eg->n_nodes > eg->n_forward;
    /* Round -1 is untimed. The backward call that fills the head gradients
     * reads arrays nothing has written yet: their pages map the kernel's
     * zero page, and the first write to each then costs a copy-on-write
     * fault with a TLB shootdown to every core (ResNet-50 at batch 16:
     * about 1 GiB of them, which tripled its larger layers' forward times
     * in a 4-round mean). */
    for (int it = -1; it < n_iter && s == MX_OK; it++) {
        if (has_backward) s = mx_executor_backward(ex, NULL); /* fills head gradients */
        if (s == MX_OK) s = mx_engine_wait_all(engine);
        for (int i = 0; i < eg->n_nodes && s == MX_OK; i++) {
            node_info *ni = &ex->nodes[i];
            if (!ni->op) continue;
            double t0 = mx_time_seconds();
            s = push_node(ex, ni, has_backward); /* a prediction executor times inference passes */
            if (s == MX_OK) s = mx_engine_wait_all(engine);
            if (it < 0) continue;
            double ms = (mx_time_seconds() - t0) * 1e3 / n_iter;
            if (ni->backward || ni->mirror) t[slot[i]].backward_ms += ms;
            else t[slot[i]].forward_ms += ms;
        }
    }
    free(slot);
    if (s != MX_OK) {
        free(t);
        return s;
    }
    *out = t;
    *n_out = n;
    return MX_OK;
}

/* ---------------------------------------------------------------- numerics
 * With checks on, forward and backward run one node at a time: the inputs
 * a node reads are scanned before it runs (in-place outputs and aux states
 * overwrite them), its outputs after. An entry found finite in the current
 * pass is not scanned again: everything a checked node wrote in this pass
 * is finite, or the pass has stopped. */

typedef struct nonfinite {
    int64_t n_nan, n_inf;
    int64_t first; /* flat index of the first NaN or Inf, -1: none */
    int64_t size;
} nonfinite;

/* Counts NaN and Inf in a float32 or float64 array after waiting for its
 * writers (other dtypes: none). Device arrays are copied to the host. */
static mx_status scan_array(mx_ndarray *a, nonfinite *r)
{
    *r = (nonfinite){.first = -1};
    mx_dtype dt = mx_ndarray_dtype(a);
    if (dt != MX_FLOAT32 && dt != MX_FLOAT64 && dt != MX_FLOAT16 && dt != MX_BFLOAT16) return MX_OK;
    MX_TRY(mx_ndarray_wait_to_read(a));
    int64_t n = mx_ndarray_size(a);
    const void *data = mx_ndarray_data(a);
    void *host = NULL;
    if (mx_ndarray_context(a).dev_type != MX_DEV_CPU) {
        size_t bytes = mx_ndarray_nbytes(a);
        host = mx_malloc(bytes);
        if (!host) return MX_ERR_NOMEM;
        mx_status s = mx_ndarray_to_host(a, host, bytes);
        if (s != MX_OK) {
            free(host);
            return s;
        }
        data = host;
    }
    r->size = n;
    /* In chunks through the library's conversion (NaN and inf keep their kind). */
    double chunk[256];
    const size_t elem = mx_dtype_size(dt);
    mx_status s = MX_OK;
    for (int64_t at = 0; at < n && s == MX_OK; at += 256) {
        const int64_t m = n - at < 256 ? n - at : 256;
        s = mx_dtype_convert("numerics check", chunk, MX_FLOAT64, (const char *)data + (size_t)at * elem, dt, m, false);
        for (int64_t i = 0; i < m && s == MX_OK; i++) {
            if (isfinite(chunk[i])) continue;
            if (r->first < 0) r->first = at + i;
            if (isnan(chunk[i])) r->n_nan++;
            else r->n_inf++;
        }
    }
    free(host);
    return s;
}

/* An entry's values: scan_array's, but for a Concat input inside the
 * Concat's output (CPU, float32) its own items only, indices as if dense. */
static mx_status scan_entry(const mx_executor *ex, uint32_t e, nonfinite *r)
{
    mx_ndarray *a = ex->entry_arrays[e];
    const int64_t stride = ex->eg.kind[e] == ENTRY_INTERNAL ? ex->plan.batch_stride[e] : 0;
    if (!stride) return scan_array(a, r);
    *r = (nonfinite){.first = -1};
    MX_TRY(mx_ndarray_wait_to_read(a));
    const mx_shape *shape = &ex->eg.shapes.shapes[e];
    const int64_t items = shape->dims[0], item = items > 0 ? mx_shape_size(shape) / items : 0;
    const float *data = mx_ndarray_data(a);
    r->size = items * item;
    for (int64_t o = 0; o < items; o++)
        for (int64_t k = 0; k < item; k++) {
            const float v = data[o * stride + k];
            if (isfinite(v)) continue;
            if (r->first < 0) r->first = o * item + k;
            if (isnan(v)) r->n_nan++;
            else r->n_inf++;
        }
    return MX_OK;
}

/* "NaN (3 of 12 values, first at index 5)", "NaN and Inf (2 NaN, 1 Inf of
 * 12 values, first at index 0)". */
static const char *nonfinite_str(const nonfinite *nf, char *buf, size_t size)
{
    if (nf->n_nan && nf->n_inf)
        snprintf(buf, size, "NaN and Inf (%lld NaN, %lld Inf of %lld values, first at index %lld)",
                 (long long)nf->n_nan, (long long)nf->n_inf, (long long)nf->size, (long long)nf->first);
    else
        snprintf(buf, size, "%s (%lld of %lld values, first at index %lld)", nf->n_nan ? "NaN" : "Inf",
                 (long long)(nf->n_nan + nf->n_inf), (long long)nf->size, (long long)nf->first);
    return buf;
}

/* A forward entry or variable in the user's names: 'fc1_weight',
 * 'fc1_output', 'bn1_var'. */
static const char *entry_name(const mx_executor *ex, mx_entry e, char *buf, size_t size)
{
    const mx_node *n = mx_graph_node(ex->eg.g, e.node);
    if (n->kind == MX_NODE_VARIABLE) {
        snprintf(buf, size, "'%s'", n->name);
        return buf;
    }
    const char *names[MX_OP_MAX_IO];
    mx_node_output_names(n, names);
    snprintf(buf, size, "'%s_%s'", n->name, names[e.index]);
    return buf;
}

/* The forward entry a gradient entry is the gradient of. */
static mx_entry grad_target(const mx_executor *ex, mx_entry e)
{
    const mx_node *n = mx_graph_node(ex->eg.g, e.node);
    if (n->kind == MX_NODE_BACKWARD) return mx_graph_node(ex->eg.g, n->forward_node)->inputs[e.index];
    if (exec_node_is_grad_sum(&ex->eg, e.node)) return grad_target(ex, n->inputs[0]);
    if (n->kind == MX_NODE_VARIABLE && n->forward_node != MX_NO_NODE) /* a head gradient */
        return (mx_entry){n->forward_node, n->forward_index};
    return e;
}

/* What a read is to the node reading it: "input 'fc1_weight'", "output
 * gradient", "input from the backward of 'bn1'". */
static void read_role(const mx_executor *ex, const node_info *ni, mx_entry r, char *buf, size_t size)
{
    const mx_graph *g = ex->eg.g;
    const mx_node *n = ni->node, *src = mx_graph_node(g, r.node);
    char name[300];
    if (ni->backward) {
        const mx_node *f = mx_graph_node(g, n->forward_node);
        for (int k = 0; k < f->n_outputs; k++) {
            if (n->inputs[k].node != r.node || n->inputs[k].index != r.index) continue;
            if (f->n_outputs == 1) snprintf(buf, size, "output gradient");
            else snprintf(buf, size, "output gradient for %s", entry_name(ex, (mx_entry){n->forward_node, (uint32_t)k},
                                                                           name, sizeof(name)));
            return;
        }
        snprintf(buf, size, "%s %s", r.node == n->forward_node ? "output" : "input",
                 entry_name(ex, r, name, sizeof(name)));
        return;
    }
    if (src->kind == MX_NODE_BACKWARD)
        snprintf(buf, size, "input from the backward of '%s'", mx_graph_node(g, src->forward_node)->name);
    else if (exec_node_is_grad_sum(&ex->eg, r.node))
        snprintf(buf, size, "input from gradient sum '%s'", src->name);
    else
        snprintf(buf, size, "input %s", entry_name(ex, r, name, sizeof(name)));
}

/* Runs one node with the checks: returns MX_ERR_RUNTIME naming the layer at
 * the first NaN or Inf it wrote, or the node's own error. */
static mx_status run_node_checked(mx_executor *ex, node_info *ni, bool is_train)
{
    const exec_graph *eg = &ex->eg;
    const mx_node *n = ni->node;
    const mx_node *f = ni->backward ? mx_graph_node(eg->g, n->forward_node) : n;
    char inputs[700] = "", what[320], kind[160];
    nonfinite nf;
    /* Inputs, before the node may overwrite them. */
    mx_entry reads[3 * MX_OP_MAX_IO];
    int n_reads = exec_node_reads(eg, ni->id, reads);
    for (int r = 0; r < n_reads && !inputs[0]; r++) {
        uint32_t e = exec_entry_id(eg, reads[r]);
        mx_ndarray *a = ex->entry_arrays[e];
        if (!a || ex->finite_pass[e] == ex->check_pass) continue;
        MX_TRY(scan_entry(ex, e, &nf));
        if (nf.first < 0) {
            ex->finite_pass[e] = ex->check_pass;
            continue;
        }
        read_role(ex, ni, reads[r], what, sizeof(what));
        snprintf(inputs, sizeof(inputs), "its %s has %s", what, nonfinite_str(&nf, kind, sizeof(kind)));
    }
    /* Gradients added to (grad_req add) hold the earlier sum. */
    uint32_t base = eg->shapes.entry_offset[ni->id];
    for (int j = 0; ni->backward && j < n->n_outputs && !inputs[0]; j++) {
        mx_ndarray *a = ex->entry_arrays[base + (uint32_t)j];
        if (!a || ni->req[j] != MX_REQ_ADD) continue;
        MX_TRY(scan_array(a, &nf));
        if (nf.first < 0) continue;
        snprintf(inputs, sizeof(inputs), "its accumulated gradient of %s has %s",
                 entry_name(ex, f->inputs[j], what, sizeof(what)), nonfinite_str(&nf, kind, sizeof(kind)));
    }
    if (!inputs[0])
        snprintf(inputs, sizeof(inputs), "%s", ni->backward ? "its output gradient and inputs are finite"
                                                            : "its inputs are finite");

    MX_TRY(push_node(ex, ni, is_train));
    mx_engine *engine = mx_runtime_engine(ex->rt);
    mx_status s = MX_OK;
    for (int k = 0; k < ni->n_writes; k++) {
        mx_status w = mx_engine_wait_var(engine, ni->writes[k]);
        if (s == MX_OK) s = w;
    }
    if (s != MX_OK) return s;

    /* Outputs: what the node wrote, then the aux states training moves. */
    char layer[300];
    /* ni->name: the layer, with a folded one ("bn1+relu1"). */
    if (ni->backward) snprintf(layer, sizeof(layer), "%s", ni->name);
    else if (ni->mirror) snprintf(layer, sizeof(layer), "%s (recomputed)", ni->name);
    else if (exec_node_is_grad_sum(&ex->eg, ni->id)) snprintf(layer, sizeof(layer), "%s (gradient sum)", n->name);
    else snprintf(layer, sizeof(layer), "%s", ni->name);
    for (int k = 0; k < n->n_outputs; k++) {
        uint32_t e = base + (uint32_t)k;
        mx_ndarray *a = ex->entry_arrays[e];
        if (!a || ni->req[k] == MX_REQ_NULL) continue;
        MX_TRY(scan_entry(ex, e, &nf));
        if (nf.first < 0) {
            ex->finite_pass[e] = ex->check_pass;
            continue;
        }
        mx_entry target = {ni->id, (uint32_t)k};
        if (ni->backward || exec_node_is_grad_sum(&ex->eg, ni->id)) {
            entry_name(ex, grad_target(ex, target), what, sizeof(what));
            return MX_ERROR(MX_ERR_RUNTIME, "%s: backward gradient of %s has %s; %s", layer, what,
                            nonfinite_str(&nf, kind, sizeof(kind)), inputs);
        }
        if (n->n_outputs == 1) what[0] = '\0';
        else {
            what[0] = ' ';
            entry_name(ex, target, what + 1, sizeof(what) - 1);
        }
        return MX_ERROR(MX_ERR_RUNTIME, "%s: forward output%s has %s; %s", layer, what,
                        nonfinite_str(&nf, kind, sizeof(kind)), inputs);
    }
    for (int j = ni->n_in - ni->n_aux; !ni->backward && !ni->mirror && is_train && j < ni->n_in; j++) {
        uint32_t e = exec_entry_id(eg, f->inputs[j]);
        MX_TRY(scan_array(ex->entry_arrays[e], &nf));
        if (nf.first < 0) {
            ex->finite_pass[e] = ex->check_pass;
            continue;
        }
        return MX_ERROR(MX_ERR_RUNTIME, "%s: forward aux state %s has %s; %s", layer,
                        entry_name(ex, f->inputs[j], what, sizeof(what)), nonfinite_str(&nf, kind, sizeof(kind)),
                        inputs);
    }
    return MX_OK;
}

static mx_status run_checked(mx_executor *ex, int begin, int end, bool is_train)
{
    if (++ex->check_pass == 0) { /* wrapped: forget every stamp */
        memset(ex->finite_pass, 0, sizeof(uint32_t) * (size_t)ex->eg.shapes.n_entries);
        ex->check_pass = 1;
    }
    for (int i = begin; i < end; i++) {
        if (ex->nodes[i].op) MX_TRY(run_node_checked(ex, &ex->nodes[i], is_train));
        if (i >= ex->eg.n_forward) MX_TRY(hand_over_updates(ex, i));
    }
    return end > ex->eg.n_forward ? hand_over_updates(ex, UPDATE_AT_END) : MX_OK;
}

mx_status mx_executor_set_check_numerics(mx_executor *ex, bool on)
{
    if (on && !ex->finite_pass) {
        ex->finite_pass = mx_calloc((size_t)ex->eg.shapes.n_entries + 1, sizeof(uint32_t));
        if (!ex->finite_pass) return MX_ERR_NOMEM;
    }
    ex->check_numerics = on;
    return MX_OK;
}

bool mx_executor_check_numerics(const mx_executor *ex) { return ex->check_numerics; }
