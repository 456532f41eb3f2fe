/* plan.h - graph preparation and the static memory planner (executor-internal). */
#ifndef MX_EXECUTOR_PLAN_H
#define MX_EXECUTOR_PLAN_H

#include "executor/executor.h"

#include <stdbool.h>

/* What an entry's memory is. */
typedef enum entry_kind {
    ENTRY_UNUSED = 0,  /* not computed, or computed with req null */
    ENTRY_INTERNAL,    /* planned buffer */
    ENTRY_ARG,         /* bound argument */
    ENTRY_AUX,         /* bound auxiliary state */
    ENTRY_HEAD_GRAD,   /* head-gradient variable (executor-owned) */
    ENTRY_OUTPUT,      /* a requested output (executor-owned array) */
    ENTRY_GRAD,        /* gradient of an argument (bound grad array) */
} entry_kind;

#define EXEC_MAX_COLORINGS 3

/* Backward mirroring (MXNET_BACKWARD_DO_MIRROR): none; the cheap layers
 * (1, MXNet's rule); or segments (2, Chen et al. 2016's budgeted
 * checkpoints, below). */
typedef enum exec_mirror { EXEC_MIRROR_NONE = 0, EXEC_MIRROR_CHEAP = 1, EXEC_MIRROR_SEGMENTS = 2 } exec_mirror;

typedef struct exec_graph {
    mx_graph *g;             /* clone, heads = requested outputs, backward appended */
    int n_nodes;
    int n_forward;           /* nodes before the backward pass */
    bool *needed;            /* node runs */
    mx_graph_shapes shapes;
    uint8_t *kind;           /* entry_kind per entry */
    int32_t *arg_index;      /* ARG/GRAD: argument index; AUX: aux index; OUTPUT: output index */
    uint32_t *args, *aux;    /* variable node ids in list order */
    int n_args, n_aux;
    mx_entry *grads;         /* per argument: its gradient entry (node MX_NO_NODE: none) */
    /* Per node, the colour (arena) of each colouring the planner may use:
     * [0] the colours asked for (MXNET_EXEC_NUM_MATCH_COLOR; default 4,
     * 1 with mirroring), then 3 and 2 when none were asked for. */
    int *colorings[EXEC_MAX_COLORINGS];
    int n_colorings;
    int n_mirror;            /* mirror copies that run (backward mirroring) */
    int n_mirror_heavy;      /* of them, copies of convolutions and fully-connected layers */
    /* EXEC_MIRROR_SEGMENTS: the checkpoints kept (of the candidates), the
     * budget that chose them and how many distinct plans were compared. */
    int n_checkpoints, n_checkpoint_candidates, n_segment_plans;
    size_t segment_budget;
    bool *mirrored;          /* per forward node: recomputed in backward (NULL: none) */
    /* Updates inside the backward pass (exec_graph_prepare's updated):
     * per entry, the node after which a reader outside the graph lets go
     * of it (the gradient of an updated argument), -1: none; per argument,
     * that node, -1: not updated or no gradient node (NULL: nothing is
     * updated in backward); per node, for a deferred copy of a backward
     * node (computing only such gradients, at the end of the pass), the
     * node it copies, else -1 (NULL: no copies). */
    int32_t *held_until;
    int32_t *update_after;
    int32_t *deferred_from;
    /* Concat inputs placed inside the Concat's output (memory_plan's
     * batch_stride): set by the caller for CPU binds (MXC_CONCAT_IN_PLACE). */
    bool concat_views;
} exec_graph;

/* A recomputation copy of a forward node, run in the backward pass. */
static inline bool exec_node_is_mirror(const mx_node *n)
{
    return n->kind == MX_NODE_OP && n->forward_node != MX_NO_NODE;
}

/* A gradient sum: one of the ElementWiseSum nodes the gradient pass
 * appends (after the forward nodes, and not a recomputation copy). */
static inline bool exec_node_is_grad_sum(const exec_graph *eg, uint32_t id)
{
    const mx_node *n = mx_graph_node(eg->g, id);
    return (int)id >= eg->n_forward && n->kind == MX_NODE_OP && !exec_node_is_mirror(n);
}

/* Builds the clone, folds activations into their producers when `fold`
 * (mx_graph_fold_activations, before the backward pass), the backward pass (training: with respect to the
 * arguments whose grad_needed is set; NULL: all), marks what runs, infers
 * shapes and classifies entries. mirror: backward mirroring
 * (MXNET_BACKWARD_DO_MIRROR; nodes with __force_mirroring__ are mirrored
 * either way). EXEC_MIRROR_CHEAP recomputes every layer but
 * convolutions, fully-connected layers, Concat and SoftmaxOutput;
 * EXEC_MIRROR_SEGMENTS recomputes every layer except checkpoints, chosen
 * by the paper's rule (walking the layers in order, a layer whose output
 * every later layer's inputs pass through is kept once the outputs since
 * the last one kept exceed a budget B), each segment recomputed once when
 * its backward begins; B is the one whose plan is the smallest, tried
 * from 0 (every such layer kept) up to all the outputs in steps of
 * 2^(1/4); then each convolution or fully-connected layer left to
 * recompute is kept where that does not grow the plan. updated (NULL: none): per argument, updated
 * inside the backward pass (mx_bind_config.update_in_backward): its
 * gradient becomes an internal entry the planner places like any other,
 * held until the node after which the update runs (update_after: the last
 * that writes the gradient or reads the argument, so nothing after it
 * sees the updated weight); and a layer whose updated gradients outweigh
 * what its backward reads (FullyConnected's weights: VGG-16's fc6 411 MB
 * against 1 MB) computes them in a copy of its backward node at the end
 * of the pass, when the activations are gone, instead of at the peak. */
mx_status exec_graph_prepare(const mx_graph *g, const char *const *outputs, int n_outputs, bool for_training,
                             exec_mirror mirror, const bool *grad_needed, const char *const *names, const mx_shape *shapes,
                             int n_shapes, bool fold, const bool *updated, exec_graph *out);
void exec_graph_free(exec_graph *eg);

/* Entries a node reads (per backward deps for backward nodes), or -1-less
 * list; returns the count. */
int exec_node_reads(const exec_graph *eg, uint32_t node, mx_entry *reads);
static inline uint32_t exec_entry_id(const exec_graph *eg, mx_entry e) { return eg->shapes.entry_offset[e.node] + e.index; }
size_t exec_entry_bytes(const exec_graph *eg, uint32_t entry);
/* Float32 copies a CPU node needs of its tensors of other dtypes (those
 * its op's CPU kernels do not compute in: float16, bfloat16, an index
 * input of int32...), in the shared workspace after
 * the op's own (each rounded up to EXEC_SHADOW_ROUND): executor.c's
 * run_shadowed. 0: none. */
#define EXEC_SHADOW_ROUND(bytes) (((bytes) + 63) / 64 * 64)
size_t exec_node_shadow_bytes(const exec_graph *eg, uint32_t id);
/* Whether every entry is float32 (Concat views are planned only then). */
bool exec_graph_all_float32(const exec_graph *eg);

typedef struct memory_plan {
    int32_t *storage;        /* per entry: buffer id, -1 if none */
    size_t *offset;          /* per entry: bytes into its buffer */
    uint8_t *inplace;        /* per entry: written in place over an input */
    uint8_t *addto;          /* per entry: added (MX_REQ_ADD) onto the first term of its gradient sum */
    uint8_t *sum_done;       /* per node: a gradient sum whose terms are added in its output: nothing to run */
    /* Per entry: 0, or the elements from one item of axis 0 to the next of
     * a Concat input written in place inside the Concat's output, or of
     * its gradient read in place inside the Concat's output gradient (its
     * offset is where its first item starts): exec_graph.concat_views. */
    int64_t *batch_stride;
    int n_views, n_grad_views; /* such inputs, and such gradients */
    size_t *buffer_bytes;    /* per buffer */
    int n_buffers;
    size_t workspace;
    int n_colors;            /* colours (arenas) of the colouring it co-shares by; 0: no co-sharing */
} memory_plan;

/* Gradient sums whose terms are each read by the sum alone and made by
 * distinct backward nodes can become one buffer: the earliest term is
 * written there and the others added onto it (MXNet's kAddTo,
 * MXNET_EXEC_ENABLE_ADDTO), and the sum does not run. ADDTO_AUTO does so
 * unless it grows the plan by more than 1% (the adds' buffers can pack
 * worse): a sum is a pass over memory of its own, which the adds save
 * (Inception-BN: its 10 sums 9 ms of a 413 ms step). */
typedef enum plan_addto_mode { ADDTO_NEVER = 0, ADDTO_AUTO, ADDTO_ALWAYS } plan_addto_mode;
mx_status memory_plan_build(const exec_graph *eg, bool enable_inplace, bool enable_coshare, plan_addto_mode addto,
                            memory_plan *out);
void memory_plan_free(memory_plan *p);
size_t memory_plan_total(const memory_plan *p);

#endif
