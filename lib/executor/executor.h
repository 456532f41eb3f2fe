/*
 * executor.h - binds a symbol to arrays and runs it (MXNet paper, 3.1).
 *
 * Binding copies the graph, keeps only what the requested outputs need
 * (prediction has no backward pass; an internal output stops the graph
 * there), appends the backward pass for training, infers every shape and
 * plans memory once:
 *   - in-place: an op writes its output into an input's buffer when it is
 *     the last reader of that input and the op allows it;
 *   - co-share: tensors whose lifetimes do not overlap share memory: each
 *     colour of the longest-path colouring (MXNet's heuristic) is one arena
 *     in which a tensor takes the best-fitting free range and gives it back
 *     after its last reader, so branches that can run in parallel keep
 *     separate memory; the smallest of the in-place + co-share, in-place
 *     and co-share plans is kept;
 *   - one workspace for every op's temporary space, tagged by its own
 *     engine variable.
 * Forward and backward push one engine operation per node, with the tags of
 * what it reads and writes, so independent branches run in parallel and
 * parameter updates pushed between iterations overlap the next forward.
 *
 * Operation folding (MXNET_EXEC_ENABLE_FOLDING=0 turns it off): before
 * the backward pass is appended, an Activation or clip that alone reads
 * output 0 of an op that can apply it (BatchNorm, Convolution,
 * FullyConnected, ElementWiseSum, elemwise_add/sub/mul/div) runs inside
 * that layer (mx_graph_fold_activations): the layer's forward applies it
 * as it writes, its backward first turns the output gradient into the
 * Activation's input gradient in place. Same bits as unfolded; one pass
 * over the tensor and one engine operation fewer each way. CPU only.
 *
 * Backward mirroring (Chen et al. 2016, MXNet's MXNET_BACKWARD_DO_MIRROR=1,
 * read at bind): the backward pass recomputes the outputs of cheap nodes
 * (every op but Convolution, FullyConnected, Concat, SoftmaxOutput and
 * those that draw random numbers; BatchNorm too, unlike MXNet) from the
 * nearest kept tensors just before it reads them, so the forward pass
 * frees them after their last forward reader; results are bit-identical.
 * Nodes with the attribute __force_mirroring__ are mirrored either way.
 *
 * Environment: MXNET_EXEC_ENABLE_INPLACE=0 turns in-place off,
 * MXNET_EXEC_ENABLE_COSHARE=0 turns co-sharing off (each internal tensor
 * gets its own buffer), MXNET_EXEC_NUM_MATCH_COLOR (default 4) sets the
 * number of colours, MXNET_EXEC_ENABLE_ADDTO=0 keeps gradient sums as sum
 * nodes, =1 does every sum it can by adds into one buffer (on CPU binds, a
 * sum whose terms come from distinct backward nodes and are read by it
 * alone), unset: unless that grows the plan by more than 1% (plan.h's
 * plan_addto_mode).
 */
#ifndef MX_EXECUTOR_H
#define MX_EXECUTOR_H

#include "symbol/symbol.h"

typedef enum mx_grad_req { MX_GRAD_NULL = 0, MX_GRAD_WRITE = 1, MX_GRAD_ADD = 3 } mx_grad_req;

typedef struct mx_bind_config {
    mx_context ctx;
    /* One per mx_graph_list_arguments() entry, in that order. */
    mx_ndarray **args;
    mx_ndarray **arg_grads;   /* NULL, or per argument (NULL entries: no gradient) */
    const mx_grad_req *grad_reqs; /* per argument; NULL: WRITE where a grad array is given */
    /* One per mx_graph_list_aux() entry. */
    mx_ndarray **aux;
    /* Outputs to compute: names of heads' outputs or internal outputs
     * ("fc1_output", "relu1_output" or a node name for its output 0).
     * NULL: the graph's heads. */
    const char *const *outputs;
    int n_outputs;
    bool for_training;        /* build the backward pass */
    /* For random ops (Dropout). A training bind needs it where an op draws
     * in training; a prediction bind only where one draws at inference
     * (Dropout mode=always), as MXNet runs Dropout as the identity there.
     * Inference passes of either never wait on it when nothing draws. */
    mx_rng *rng;
    /* Every layer runs as written, no operation folding: for numerics
     * tracing, which checks every intermediate value (a folded one is
     * never materialised; relu of a NaN is 0). */
    bool no_folding;
    /* NULL, or per argument: true where the caller never writes that
     * argument after bind (a predictor's weights, not its data). Kernels
     * then keep what they derive from it (a convolution's packed or
     * Winograd-transformed weights) from the first pass on instead of
     * redoing it every pass, at the memory that costs. A write to such an
     * argument after bind goes unseen: rebind instead. */
    const bool *fixed_args;
    /* NULL, or per argument: the caller updates this argument from its
     * gradient inside the backward pass (an optimizer's update pushed as
     * soon as the gradient is final), so the gradient needs no array of
     * its own: it lives in the executor's planned memory, beside tensors
     * alive at other times, instead of through the whole step. Such an
     * argument takes grad_req WRITE (or NULL: no gradient, no update) and
     * no arg_grads entry. CPU binds only. */
    const bool *update_in_backward;
    /* Called by mx_executor_backward, on its thread, once per such
     * argument and pass, after the last node that writes the gradient or
     * reads the argument was pushed (so the pass never sees the new
     * weight). It must push engine work that reads `grad` (its variable:
     * later nodes reuse the memory after that work, in push order) and
     * may write `weight`. An error stops the pass and is returned. */
    mx_status (*update)(void *update_ctx, int arg, mx_ndarray *weight, mx_ndarray *grad);
    void *update_ctx;
    /* CUDA graphs (GPU binds): from the second pass of a kind on (forward
     * in training, forward in inference, backward; the first chooses
     * cuDNN's algorithms and sizes the scratch), the pass is captured once
     * and pushed as one engine operation that launches the graph: one
     * launch instead of one per kernel. Passes that cannot be captured run
     * node by node, for a reason mx_executor_graph_refusal gives: an op
     * that draws random numbers in the pass (Dropout in training),
     * numerics checks, updates inside the backward pass, a stream that
     * does not alone order its GPU, or a capture that failed. */
    bool cuda_graph;
} mx_bind_config;

typedef struct mx_executor mx_executor;

/* Errors: MX_ERR_INVALID naming the argument and shapes, unknown outputs. */
mx_status mx_executor_bind(mx_runtime *rt, const mx_graph *g, const mx_bind_config *config, mx_executor **out);
void mx_executor_free(mx_executor *ex);

/* Pushes the forward pass. is_train selects training behaviour (Dropout,
 * BatchNorm batch statistics). Returns at once; read outputs to wait
 * (with numerics checks on, below: returns when done, with the error of
 * the first failing node). MX_ERR_INVALID, naming the layer, for a
 * training pass of an executor bound without the rng it needs. */
mx_status mx_executor_forward(mx_executor *ex, bool is_train);
/* Pushes the backward pass; head_grads gives one array per non-loss output
 * (NULL for all-ones), ignored for loss outputs. */
mx_status mx_executor_backward(mx_executor *ex, mx_ndarray *const *head_grads);

/* Numerics checking, the building block of NaN/Inf tracing. When on,
 * forward and backward run the nodes one at a time in execution order and
 * return only when they have finished: each node's inputs are read before
 * it runs (in-place outputs and aux updates overwrite them) and what it
 * wrote after (forward: its outputs and, in training, the aux states it
 * moves; backward: the gradients it produced, parameter gradients in the
 * bound arrays included); floating-point tensors only. The first NaN or Inf
 * stops the pass with MX_ERR_RUNTIME and one line naming the layer (for
 * backward, the forward layer it differentiates; gradient sums by their
 * own name), the tensor, how many values (flat index of the first), and
 * whether the node's inputs were finite, which tells a layer that
 * overflows from bad data or a parameter a bad update wrote (each one line):
 *   scale: forward output has Inf (8 of 8 values, first at index 0); its inputs are finite
 *   fc2: forward output has NaN (4 of 12 values, first at index 2); its input
 *     'fc2_weight' has NaN (1 of 6 values, first at index 5)
 *   fc2: backward gradient of 'fc2_weight' has Inf (4 of 4 values, first at index 0);
 *     its output gradient and inputs are finite
 *   _grad_sum_fc1_0 (gradient sum): backward gradient of 'fc1_output' has Inf
 *     (8 of 8 values, first at index 0); its inputs are finite
 *   bn: forward aux state 'bn_moving_var' has Inf (1 of 2 values, first at index 0); its inputs are finite
 * Results are bit-identical to unchecked runs, only slower (no overlap of
 * branches, every tensor read once more). Off (the default) costs
 * nothing: nodes are pushed as before and nothing waits. Errors:
 * MX_ERR_NOMEM. */
mx_status mx_executor_set_check_numerics(mx_executor *ex, bool on);
bool mx_executor_check_numerics(const mx_executor *ex);

/* Why passes of this kind (backward, or forward with is_train) do not
 * run as CUDA graphs (mx_bind_config.cuda_graph), or "" when they do from
 * their second run on. A capture that fails turns its kind off for good,
 * with the failure as the reason. */
const char *mx_executor_graph_refusal(const mx_executor *ex, bool backward, bool is_train);
/* Passes pushed as one graph launch so far, of all kinds. */
int64_t mx_executor_graph_launches(const mx_executor *ex);

/* Dynamic loss scaling (float16 training): the backward passes pushed from
 * now on multiply the gradient every loss layer (SoftmaxOutput, the
 * regression outputs) starts them with by `scale` (1 at bind), so small
 * gradients survive float16; the caller divides them back (the
 * optimizer's rescale_grad). A pass captured as a CUDA graph is captured
 * again when the scale changed. MX_ERR_INVALID: not positive and finite. */
mx_status mx_executor_set_loss_scale(mx_executor *ex, float scale);

int mx_executor_num_outputs(const mx_executor *ex);
mx_ndarray *mx_executor_output(const mx_executor *ex, int i);
const char *mx_executor_output_name(const mx_executor *ex, int i);

/* Operator nodes the executor runs in forward and in backward. */
void mx_executor_count_nodes(const mx_executor *ex, int *n_forward, int *n_backward);

/* Per-layer timing (as `caffe time`): runs forward (and backward when the
 * executor has one) n_iter times after one untimed round, one node at a
 * time with a wait after each, and reports the mean milliseconds per
 * forward layer. Backward
 * time is attributed to the layer it differentiates; gradient sums are
 * reported under their own names. *out is malloc'ed (free with free()). */
typedef struct mx_layer_time {
    const char *name;     /* borrowed from the executor: "conv1", "bn1+relu1" (folded) */
    const char *op;       /* "Convolution", "BatchNorm+Activation" */
    double forward_ms, backward_ms;
} mx_layer_time;
mx_status mx_executor_time_layers(mx_executor *ex, int n_iter, mx_layer_time **out, int *n);

/* Internal memory of a plan, in bytes, as the paper counts it: everything
 * but arguments, their gradients and the outputs. */
typedef struct mx_memory_plan_stats {
    size_t naive;       /* every output of every node that runs its own buffer */
    size_t inplace;     /* in-place only */
    size_t coshare;     /* co-share only */
    size_t both;        /* in-place and co-share */
    size_t workspace;   /* the shared temporary space */
    int n_internal;     /* internal tensors */
    int n_buffers;      /* buffers with both strategies */
    int n_mirror;       /* recomputation copies in the backward pass (mirroring) */
    int n_sums, n_sums_added; /* gradient sums, and those done by adds (MXNET_EXEC_ENABLE_ADDTO) */
    int n_concat_views, n_concat_inputs; /* Concat inputs written inside the Concat's output (MXC_CONCAT_IN_PLACE),
                                            of all Concat inputs */
    int n_concat_grad_views;             /* their gradients read inside the Concat's output gradient */
    size_t grads_in_plan; /* gradients of the arguments updated in backward, planned inside */
    int n_deferred;       /* backward nodes whose updated gradients run at the end of the pass */
    int n_colors;         /* colours of the kept plan's co-sharing (0: none) */
    /* Mirroring: copies of convolutions and fully-connected layers among
     * n_mirror; with segments (level 2) the checkpoints kept of the
     * candidates, the budget that chose them and the plans compared. */
    int n_mirror_heavy;
    int n_checkpoints, n_checkpoint_candidates, n_segment_plans;
    size_t segment_budget;
} mx_memory_plan_stats;

/* Whether binds on ctx fold activations into the layers before them
 * (MXNET_EXEC_ENABLE_FOLDING, default on; CPU kernels only so far). */
bool mx_executor_folds(mx_context ctx);

/* Plans a bind of g with the given input shapes without allocating
 * anything (folding as on the CPU): for --dry-run, mxviz and
 * docs/memory.md. */
mx_status mx_executor_plan_memory(const mx_graph *g, const char *const *names, const mx_shape *shapes, int n,
                                  bool for_training, mx_memory_plan_stats *out);
/* The training plan with backward mirroring, as a bind with
 * MXNET_BACKWARD_DO_MIRROR=level (1 or 2) makes it. */
mx_status mx_executor_plan_memory_mirror(const mx_graph *g, const char *const *names, const mx_shape *shapes, int n,
                                         int level, mx_memory_plan_stats *out);
/* MXNET_BACKWARD_DO_MIRROR as binds read it: 0 (unset: none), 1 or 2;
 * anything else is an error naming the values. */
mx_status mx_executor_mirror_level(int *level);
/* The training plan when the arguments marked in in_backward (per
 * mx_graph_list_arguments entry) are updated inside the backward pass
 * (mx_bind_config.update_in_backward): their gradients in the plan. */
mx_status mx_executor_plan_memory_updating(const mx_graph *g, const char *const *names, const mx_shape *shapes, int n,
                                           const bool *in_backward, mx_memory_plan_stats *out);
/* The plan of a bound executor. */
void mx_executor_memory(const mx_executor *ex, mx_memory_plan_stats *out);

#endif /* MX_EXECUTOR_H */
