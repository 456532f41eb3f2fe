/*
 * symbol.h - symbolic graphs (MXNet's Symbol / nnvm Graph) in C.
 *
 * A graph is an arena of nodes in topological order: variables (op NULL)
 * and operator nodes, each operator node holding its parsed parameters, the
 * attributes as the user gave them (what symbol JSON stores), and its
 * inputs as entries (node, output index). `heads` are the symbol's outputs.
 *
 * Composition follows MXNet: inputs an operator needs but was not given
 * (weight, bias, gamma, moving_mean, label...) become new variables named
 * NODE_INPUT that inherit the node's attributes. Auxiliary states are the
 * variables fed into an op's aux slots.
 *
 * Errors name the layer (node name and op) and, for shapes, both shapes.
 */
#ifndef MX_SYMBOL_H
#define MX_SYMBOL_H

#include "ops/op.h"

#include <stdio.h>

#define MX_NO_NODE UINT32_MAX

typedef struct mx_entry {
    uint32_t node;  /* MX_NO_NODE: none (a gradient known to be zero) */
    uint32_t index; /* output index of that node */
} mx_entry;

typedef struct mx_attr {
    char *key, *value;
} mx_attr;

typedef enum mx_node_kind {
    MX_NODE_VARIABLE = 0,
    MX_NODE_OP = 1,       /* forward operator */
    MX_NODE_BACKWARD = 2, /* gradient of a forward op node (see below) */
} mx_node_kind;

typedef struct mx_node {
    mx_node_kind kind;
    const mx_op_def *op;  /* NULL for variables */
    char *name;
    void *params;         /* op->params_size bytes, parsed; NULL for variables */
    mx_attr *attrs;       /* sorted by key (byte order), as JSON stores them */
    int n_attrs;
    mx_entry *inputs;
    int n_inputs;
    int n_outputs;
    /* MX_NODE_BACKWARD: inputs are out_grad[n_outputs of forward], then
     * the forward node's inputs, then its outputs (or, with mirroring,
     * the entries of their recomputation copies); outputs are the
     * gradients of the forward node's non-aux inputs.
     * MX_NODE_OP: forward_node is MX_NO_NODE, or, for a mirror copy
     * (mx_graph_gradient_mirror), the node it recomputes.
     * Head-gradient variables: (forward_node, forward_index) is the head
     * whose gradient they carry (their shape). Else MX_NO_NODE. */
    uint32_t forward_node;
    uint32_t forward_index;
    /* An Activation or clip folded into this op node
     * (mx_graph_fold_activations; kind MX_FOLD_NONE: none); folded_node is
     * that layer, left in the graph with no reader. A BatchNorm+
     * ElementWiseSum node (mx_graph_fold_residual_sums) has the sum's fold,
     * and folded_node is the sum (whose folded_node is its Activation). */
    mx_fold fold;
    uint32_t folded_node;
} mx_node;

typedef struct mx_graph mx_graph;

mx_status mx_graph_create(mx_graph **out);
void mx_graph_free(mx_graph *g);
/* A deep copy (backward nodes included). */
mx_status mx_graph_clone(const mx_graph *g, mx_graph **out);

int mx_graph_num_nodes(const mx_graph *g);
const mx_node *mx_graph_node(const mx_graph *g, uint32_t id);
/* The node id with this name, or MX_NO_NODE. */
uint32_t mx_graph_find(const mx_graph *g, const char *name);

/* Adds a variable (name must be new). attrs may be NULL. */
mx_status mx_graph_add_variable(mx_graph *g, const char *name, const mx_attr *attrs, int n_attrs,
                                uint32_t *out_id);
/* Adds an operator node. `keys/values` are its parameters as strings
 * (parsed and validated now; stored verbatim as attrs). `inputs` gives the
 * first n_inputs inputs in the op's order; the rest are created as
 * variables NAME_INPUT (reusing an existing variable of that name). Extra
 * attributes (reserved "__x__" keys, lr_mult...) may be passed as attrs. */
mx_status mx_graph_add_op(mx_graph *g, const char *op_name, const char *name, const char *const *keys,
                          const char *const *values, int n_params, const mx_entry *inputs, int n_inputs,
                          const mx_attr *extra_attrs, int n_extra, uint32_t *out_id);
/* Sets or replaces an attribute on a node (for example __shape__). */
mx_status mx_graph_set_attr(mx_graph *g, uint32_t node, const char *key, const char *value);
const char *mx_graph_get_attr(const mx_graph *g, uint32_t node, const char *key);

/* The symbol's outputs. */
mx_status mx_graph_set_heads(mx_graph *g, const mx_entry *heads, int n);
int mx_graph_num_heads(const mx_graph *g);
mx_entry mx_graph_head(const mx_graph *g, int i);

/* Names of an op node's inputs and outputs as the op lists them. */
int mx_node_input_names(const mx_node *n, const char **names);
int mx_node_output_names(const mx_node *n, const char **names);
int mx_node_num_aux(const mx_node *n);
int mx_node_num_visible_outputs(const mx_node *n);

/* ---------------------------------------------------------------- lists
 * Each fills ids (capacity mx_graph_num_nodes) and returns the count. */

/* Variables that are arguments (not aux), in node order. */
int mx_graph_list_arguments(const mx_graph *g, uint32_t *ids);
/* Variables fed into aux slots, in node order. */
int mx_graph_list_aux(const mx_graph *g, uint32_t *ids);
/* "NODE_OUTPUT" name of head i into buf; returns buf. */
const char *mx_graph_output_name(const mx_graph *g, int i, char *buf, size_t size);

/* ---------------------------------------------------------------- shapes */

/* Shapes of every entry, indexed by node then output (offsets in
 * entry_offset[node]). */
typedef struct mx_graph_shapes {
    mx_shape *shapes;
    uint32_t *entry_offset; /* n_nodes + 1 */
    int n_entries;
    /* Per entry, its mx_dtype (mx_graph_infer_types); NULL: all float32. */
    int8_t *dtypes;
} mx_graph_shapes;

/* Infers all shapes from the given variable shapes (names/shapes, n).
 * A variable's __shape__ attribute counts as given (0 dims = unknown).
 * Errors: MX_ERR_INVALID naming the layer and shapes, or the variables
 * whose shape could not be inferred. */
mx_status mx_graph_infer_shapes(const mx_graph *g, const char *const *names, const mx_shape *shapes, int n,
                                mx_graph_shapes *out);
void mx_graph_shapes_free(mx_graph_shapes *s);
/* Infers every entry's dtype into s->dtypes (s from mx_graph_infer_shapes
 * on g). A variable's dtype is the caller's (names/dtypes, n), else its
 * __dtype__ attribute (mshadow's flag, as MXNet's JSON stores it), else
 * what its first reader's rule gives it (a Convolution's weight takes its
 * data's dtype; a BatchNorm keeps float32 parameters for half data), else
 * float32. Gradients have their forward inputs' dtypes. Errors:
 * MX_ERR_INVALID naming the layer, the input and both dtypes, or a bad
 * __dtype__. */
mx_status mx_graph_infer_types(const mx_graph *g, const char *const *names, const mx_dtype *dtypes, int n,
                               mx_graph_shapes *s);
static inline mx_dtype mx_graph_entry_dtype(const mx_graph_shapes *s, mx_entry e)
{
    return s->dtypes ? (mx_dtype)s->dtypes[s->entry_offset[e.node] + e.index] : MX_FLOAT32;
}
static inline const mx_shape *mx_graph_entry_shape(const mx_graph_shapes *s, mx_entry e)
{
    return &s->shapes[s->entry_offset[e.node] + e.index];
}

/* ---------------------------------------------------------------- precision */

/* Mixed precision (fit.dtype): a copy of g (a forward graph) computing in
 * float16 or bfloat16, as MXNet's float16 symbols are written: every
 * argument a layer computes with (by its type rule: not BatchNorm's gamma
 * and beta, not labels) goes through one Cast to `dtype` named
 * VAR_float16 (or _bfloat16), and every loss layer's input through a Cast
 * back to float32 named LOSS_input_float32. Variables keep their names
 * and stay float32 (master weights); auxiliary states are left alone.
 * Errors: MX_ERR_INVALID for another dtype or a graph with a backward
 * pass. */
mx_status mx_graph_compute_in(const mx_graph *g, mx_dtype dtype, mx_graph **out);

/* ---------------------------------------------------------------- gradient */

/* Appends the backward graph: gradients of the heads with respect to the
 * variables `wrt` (n_wrt ids), with ElementWiseSum nodes where an entry
 * feeds several consumers. Heads whose op is not a loss layer receive a
 * head-gradient variable named OUTPUT_head_grad (OUTPUT as
 * mx_graph_output_name). grads[i] gets the entry of d heads / d wrt[i]
 * (node MX_NO_NODE when the heads do not depend on it). Nodes not on a path
 * from a wrt variable to a head get no backward node. */
mx_status mx_graph_gradient(mx_graph *g, const uint32_t *wrt, int n_wrt, mx_entry *grads);
/* Whether the backward node of forward op node f reads f's input j (per
 * the op's backward_deps and input mask; aux states always) and its output
 * k (per backward_deps and the output mask; output 0 too when an
 * activation is folded into f, whose derivative is taken from it). */
bool mx_node_backward_reads_input(const mx_node *f, int j);
bool mx_node_backward_reads_output(const mx_node *f, int k);
/* The same with backward mirroring (Chen et al. 2016, MXNet's
 * MXNET_BACKWARD_DO_MIRROR): mirror[i] (per node of g before the call;
 * false for variables) marks forward op nodes whose outputs the backward
 * pass recomputes instead of keeping. Each backward
 * node reads, in place of such a node's outputs, those of a copy: an
 * operator node named _mirror_NAME with NAME's op, parameters and
 * attributes, forward_node = NAME's id, whose inputs are the copies of
 * mirrored nodes and the original entries of the rest. A copy is appended
 * just before the first backward node that reads it (copies of copies
 * before it), so it is computed late and freed early; it is made only
 * when read. A copy made only as the input of other copies serves that
 * request and is made again for a later one, unless keep_copies (then
 * every copy serves all later readers: right where kept checkpoints bound
 * the chains and copies of convolutions are dear). mirror NULL: none
 * (mx_graph_gradient). */
mx_status mx_graph_gradient_mirror(mx_graph *g, const uint32_t *wrt, int n_wrt, const bool *mirror, bool keep_copies,
                                   mx_entry *grads);
/* Appends a copy of backward node `bid` (same forward node, inputs and
 * outputs), named _backward_weights_NAME: the executor computes some of a
 * layer's gradients there, at the end of the pass, and the rest in the
 * original (exec_graph_prepare's deferred weight gradients). */
mx_status mx_graph_append_backward_copy(mx_graph *g, uint32_t bid, uint32_t *out);

/* ---------------------------------------------------------------- folding */

/* One BatchNorm folded into the Convolution before it, for inference:
 * the new graph's convolution reads the new variables new_weight and
 * new_bias, to be given weight * s and (bias - moving_mean) * s + beta per
 * output channel, s = gamma / sqrt(moving_var + eps) (gamma = 1 under
 * fix_gamma; bias = 0 when the convolution had none). The other names are
 * the source graph's variables (valid while it lives). */
typedef struct mx_graph_bn_fold {
    const char *weight, *bias; /* bias NULL: no_bias */
    const char *gamma, *beta, *moving_mean, *moving_var;
    double eps;
    bool fix_gamma;
    char *new_weight, *new_bias;
} mx_graph_bn_fold;

/* A copy of g with every foldable (Convolution -> BatchNorm) pair made one
 * convolution with a bias, and its list of folds; *out NULL (and no folds)
 * when nothing folds. A pair folds when the convolution's output feeds only
 * the BatchNorm, the BatchNorm's mean / var outputs feed nothing, its axis
 * is 1, every parameter is a variable, and `keep` (an output the caller
 * wants, "NAME" or "NAME_output"; may be NULL) names neither layer. The
 * folded BatchNorm's output is the convolution's; variables only folded
 * layers read are left out. Graphs with backward nodes do not fold. */
mx_status mx_graph_fold_batchnorm(const mx_graph *g, const char *keep, mx_graph **out, mx_graph_bn_fold **folds,
                                  int *n_folds);
void mx_graph_bn_folds_free(mx_graph_bn_fold *folds, int n);

/* Operation folding for the executor (MXNET_EXEC_ENABLE_FOLDING): each
 * Activation or clip whose input is output 0 of an op that can apply it
 * (mx_op_def.folds_elementwise) is folded into that op, in place: the op
 * gets `fold`, the folded layer's readers read the op's output 0, and the
 * folded layer is left with no reader (it no longer runs). A pair folds
 * only when the folded layer alone reads that output and neither output is
 * a head, so every value anyone can ask for is still computed. Graphs with
 * backward nodes do not fold (fold first, then append the backward pass).
 * *pairs (when not NULL) gets the folds as (op node, folded node),
 * malloc'ed; *n_pairs their count. */
typedef struct mx_graph_fold_pair {
    uint32_t into, folded; /* the node that took the fold, the layer folded into it */
} mx_graph_fold_pair;
mx_status mx_graph_fold_activations(mx_graph *g, mx_graph_fold_pair **pairs, int *n_pairs);

/* The second folding pass, after mx_graph_fold_activations: a two-input
 * ElementWiseSum whose input is output 0 of a BatchNorm that nothing else
 * reads (its mean / var outputs unread, no output a head, no fold of its
 * own) is folded into that BatchNorm, in place: the node becomes
 * mx_op_batch_norm_add (ops/batch_norm.h) with the sum's other input as
 * its addend and the sum's own fold (its relu), folded_node the sum; the
 * sum's readers read the node's output 0, and the sum is left with no
 * reader. The other input must come before the BatchNorm in the graph
 * (the sum then runs where the BatchNorm did); of two BatchNorms, the
 * later one takes the sum. The sum must not be a head. *pairs (when not
 * NULL) gets (BatchNorm node, sum node), malloc'ed; *n_pairs their
 * count. */
mx_status mx_graph_fold_residual_sums(mx_graph *g, mx_graph_fold_pair **pairs, int *n_pairs);

/* The prediction pass, after the other two (forward-only graphs: the
 * folded op has no backward): a two-input ElementWiseSum or elemwise_add
 * whose input is output 0 of a Convolution that nothing else reads (no
 * fold of its own, not a head, after the other input) is folded into that
 * convolution: the node becomes mx_op_convolution_add (ops/convolution.h),
 * its inputs the sum's other input (the addend) and then its own, with
 * the sum's fold (its relu); the sum's readers read the node's output 0
 * and the sum is left with no reader. Of two convolutions, the later one
 * takes the sum. With BatchNorm folded into the convolutions first
 * (mx_graph_fold_batchnorm), ResNet's residual sums take the place of a
 * pass over their outputs. *pairs as above. */
mx_status mx_graph_fold_conv_sums(mx_graph *g, mx_graph_fold_pair **pairs, int *n_pairs);

/* ---------------------------------------------------------------- JSON */

/* Writes MXNet's symbol JSON (nnvm, version 10901), byte-compatible with
 * what mx.sym.save writes. Backward nodes are not saved. */
mx_status mx_graph_to_json(const mx_graph *g, char **out_json, size_t *out_len);
mx_status mx_graph_save_json(const mx_graph *g, const char *path);
/* Reads MXNet symbol JSON (1.x "attrs", 0.9-1.1 "attr", pre-0.9 "param");
 * errors name the node and the problem. */
mx_status mx_graph_from_json(const char *json, size_t len, mx_graph **out);
mx_status mx_graph_load_json(const char *path, mx_graph **out);

#endif /* MX_SYMBOL_H */
