/*
 * plan.c - preparing a graph for execution and planning its memory.
 *
 * The planner simulates the execution order once, with reference counts of
 * the remaining readers of every internal tensor. An output takes over an
 * input's buffer (in-place) when the op allows it and this node is that
 * input's last reader; otherwise it takes the best-fitting free buffer of
 * its node's colour (co-share), growing it if it is smaller, or a new one.
 * A buffer returns to its colour's free list when its last reader ran.
 * Colours come from the longest-path heuristic: the longest chain of
 * not-yet-coloured nodes gets the next colour, and so on; nodes on one
 * chain run one after another, so sharing memory among them costs no
 * parallelism.
 */
#include "executor/plan.h"
#include "ops/batch_norm.h"
#include "ops/concat.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


void exec_graph_free(exec_graph *eg)
{
    mx_graph_free(eg->g);
    mx_graph_shapes_free(&eg->shapes);
    free(eg->needed);
    free(eg->kind);
    free(eg->arg_index);
    free(eg->args);
    free(eg->aux);
    free(eg->grads);
    for (int k = 0; k < EXEC_MAX_COLORINGS; k++) free(eg->colorings[k]);
    free(eg->held_until);
    free(eg->update_after);
    free(eg->deferred_from);
    free(eg->mirrored);
    memset(eg, 0, sizeof(*eg));
}

size_t exec_entry_bytes(const exec_graph *eg, uint32_t entry)
{
    const mx_dtype dt = eg->shapes.dtypes ? (mx_dtype)eg->shapes.dtypes[entry] : MX_FLOAT32;
    return (size_t)mx_shape_size(&eg->shapes.shapes[entry]) * mx_dtype_size(dt);
}

static size_t entry_bytes_of(const mx_graph_shapes *sh, mx_entry e);

/* Every entry's shape and dtype (the dtypes from the graph alone: a bind
 * checks its arrays against them). */
static mx_status infer_entries(const mx_graph *g, const char *const *names, const mx_shape *shapes, int n_shapes,
                               mx_graph_shapes *out)
{
    MX_TRY(mx_graph_infer_shapes(g, names, shapes, n_shapes, out));
    mx_status s = mx_graph_infer_types(g, NULL, NULL, 0, out);
    if (s != MX_OK) mx_graph_shapes_free(out);
    return s;
}

/* Resolves "node", "node_output" or "node_<outname>" to an entry. */
static mx_status resolve_output(const mx_graph *g, const char *name, mx_entry *out)
{
    uint32_t id = mx_graph_find(g, name);
    if (id != MX_NO_NODE) {
        *out = (mx_entry){id, 0};
        return MX_OK;
    }
    for (int i = 0; i < mx_graph_num_nodes(g); i++) {
        const mx_node *n = mx_graph_node(g, (uint32_t)i);
        size_t len = strlen(n->name);
        if (strncmp(name, n->name, len) != 0 || name[len] != '_') continue;
        const char *names[MX_OP_MAX_IO];
        int k = mx_node_output_names(n, names);
        for (int j = 0; j < k; j++)
            if (!strcmp(name + len + 1, names[j])) {
                *out = (mx_entry){(uint32_t)i, (uint32_t)j};
                return MX_OK;
            }
    }
    const char *cands[2048];
    int nc = 0;
    for (int i = 0; i < mx_graph_num_nodes(g) && nc < 2048; i++) cands[nc++] = mx_graph_node(g, (uint32_t)i)->name;
    const char *near = mx_suggest(name, cands, nc);
    if (near) return MX_ERROR(MX_ERR_INVALID, "no output or layer named '%s' (did you mean '%s'?)", name, near);
    return MX_ERROR(MX_ERR_INVALID, "no output or layer named '%s'", name);
}

int exec_node_reads(const exec_graph *eg, uint32_t id, mx_entry *reads)
{
    const mx_node *n = mx_graph_node(eg->g, id);
    int count = 0;
    if (n->kind == MX_NODE_OP) {
        for (int j = 0; j < n->n_inputs; j++) reads[count++] = n->inputs[j];
        return count;
    }
    if (n->kind != MX_NODE_BACKWARD) return 0;
    const mx_node *f = mx_graph_node(eg->g, n->forward_node);
    int n_out = f->n_outputs, n_in = f->n_inputs;
    for (int k = 0; k < n_out; k++)
        if ((f->op->backward_deps & MX_BWD_OUT_GRAD) && n->inputs[k].node != MX_NO_NODE) reads[count++] = n->inputs[k];
    for (int j = 0; j < n_in; j++)
        if (mx_node_backward_reads_input(f, j)) reads[count++] = n->inputs[n_out + j];
    for (int k = 0; k < n_out; k++)
        if (mx_node_backward_reads_output(f, k)) reads[count++] = n->inputs[n_out + n_in + k];
    return count;
}

/* Longest-path colouring over the nodes that run, into eg->colorings[k]. */
static mx_status color_nodes(exec_graph *eg, int n_colors, int k)
{
    int n = eg->n_nodes;
    int *color = eg->colorings[k] = mx_malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *best = mx_malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *prev = mx_malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!color || !best || !prev) {
        free(best);
        free(prev);
        return MX_ERR_NOMEM;
    }
    eg->n_colorings = k + 1;
    for (int i = 0; i < n; i++) color[i] = -1;
    mx_entry reads[3 * MX_OP_MAX_IO];
    for (int c = 0; c < n_colors - 1; c++) {
        int end = -1;
        for (int i = 0; i < n; i++) {
            best[i] = 0;
            prev[i] = -1;
            const mx_node *nd = mx_graph_node(eg->g, (uint32_t)i);
            if (!eg->needed[i] || nd->kind == MX_NODE_VARIABLE || color[i] >= 0) continue;
            best[i] = 1;
            int k = exec_node_reads(eg, (uint32_t)i, reads);
            for (int j = 0; j < k; j++) {
                int u = (int)reads[j].node;
                if (color[u] < 0 && best[u] + 1 > best[i]) {
                    best[i] = best[u] + 1;
                    prev[i] = u;
                }
            }
            if (end < 0 || best[i] > best[end]) end = i;
        }
        if (end < 0) break;
        for (int v = end; v >= 0; v = prev[v]) color[v] = c;
    }
    for (int i = 0; i < n; i++)
        if (color[i] < 0) color[i] = n_colors - 1;
    /* A mirror copy runs just before its first reader and feeds it (or the
     * copy that does): it takes that reader's colour, so that it reuses the
     * buffers the forward pass freed; on a colour of its own it would find
     * none, and mirroring would cost memory instead of saving it. Readers
     * come later, so their colours are final when read back to front. */
    for (int i = 0; i < n; i++) best[i] = -1; /* first reader */
    for (int i = eg->n_forward; i < n && eg->n_mirror; i++) {
        if (!eg->needed[i]) continue;
        int k = exec_node_reads(eg, (uint32_t)i, reads);
        for (int j = 0; j < k; j++) {
            int u = (int)reads[j].node;
            if (best[u] < 0 && exec_node_is_mirror(mx_graph_node(eg->g, (uint32_t)u))) best[u] = i;
        }
    }
    for (int i = n - 1; i >= eg->n_forward; i--)
        if (best[i] >= 0) color[i] = color[best[i]];
    /* A deferred weight-gradient copy (plan.h) takes colour 0, the longest
     * chain, which ends the pass: by then its arena has freed the most,
     * and the arena's variable holds the copy back until the nodes pushed
     * before it have run. On a colour of its own it would run early and
     * find no freed memory, and deferring would cost memory. */
    for (int i = 0; eg->deferred_from && i < n; i++)
        if (eg->deferred_from[i] >= 0) color[i] = 0;
    free(best);
    free(prev);
    return MX_OK;
}

/* Whether the backward pass may recompute node id instead of keeping its
 * outputs: MXNet's need_mirror (graph_executor.cc) — never Dropout (its
 * mask is random), always a node with __force_mirroring__, and with
 * do_mirror every op but Convolution, FullyConnected, Concat and
 * SoftmaxOutput — plus our own limits: a copy redraws random numbers, so
 * no op that draws is mirrored; a copy of an op with aux states would move
 * them again, so only BatchNorm is (its copy moves scratch states instead,
 * executor.c), and only with batch statistics, which make its output
 * independent of the states; a head is kept as an output anyway. With
 * segments every other op may be (the checkpoints are chosen after). */
static bool mirror_wanted(const mx_graph *g, uint32_t id, exec_mirror mode, const bool *is_head)
{
    const mx_node *n = mx_graph_node(g, id);
    if (n->kind != MX_NODE_OP || is_head[id] || (n->op->flags & MX_OP_NEEDS_RNG)) return false;
    const bool batch_norm = !strcmp(n->op->name, "BatchNorm") || n->op == &mx_op_batch_norm_add;
    if (mx_node_num_aux(n) > 0 && (!batch_norm || ((const bn_params *)n->params)->use_global_stats))
        return false;
    const char *force = mx_graph_get_attr(g, id, "__force_mirroring__");
    if (force && (!strcmp(force, "1") || !strcmp(force, "True") || !strcmp(force, "true"))) return true;
    if (mode == EXEC_MIRROR_NONE) return false;
    if (mode == EXEC_MIRROR_SEGMENTS) return true;
    static const char *const kept[] = {"Convolution", "FullyConnected", "Concat", "SoftmaxOutput"};
    for (size_t k = 0; k < sizeof(kept) / sizeof(kept[0]); k++)
        if (!strcmp(n->op->name, kept[k])) return false;
    return true;
}

/* The paper's checkpoints (Chen et al. 2016, section 4.3): walking the
 * forward layers in order, the bytes of the outputs that mirroring would
 * drop add up; a layer whose output every later layer's inputs pass
 * through (no earlier output is read after it: a block output of ResNet, a
 * Concat of Inception, any layer of a chain) is kept once they exceed
 * budget, and the sum restarts. So each segment between checkpoints is
 * recomputed from its first when its backward begins. Unmarks the kept in
 * mark; counts the candidates and the kept; *eligible_bytes: the sum of
 * all (the largest budget worth trying). */
static mx_status choose_checkpoints(const mx_graph *g, const mx_graph_shapes *fs, const bool *is_head, size_t budget,
                                    bool *mark, exec_graph *eg, size_t *eligible_bytes)
{
    int n = mx_graph_num_nodes(g);
    int *last_read = mx_malloc(sizeof(int) * ((size_t)n + 1));
    if (!last_read) return MX_ERR_NOMEM;
    /* Read back to front, by what the heads depend on only: a layer
     * folded into another still lists its inputs, but nothing runs it. */
    for (int i = 0; i < n; i++) last_read[i] = is_head[i] ? n : -1;
    for (int i = n - 1; i >= 0; i--) {
        const mx_node *nd = mx_graph_node(g, (uint32_t)i);
        if (last_read[i] < 0) continue;
        for (int j = 0; j < nd->n_inputs; j++) {
            uint32_t u = nd->inputs[j].node;
            if (last_read[u] < i) last_read[u] = i;
        }
    }
    size_t run = 0;
    int reach = -1; /* the last reader of any op output before i */
    *eligible_bytes = 0;
    for (int i = 0; i < n; i++) {
        const mx_node *nd = mx_graph_node(g, (uint32_t)i);
        if (nd->kind != MX_NODE_OP || last_read[i] < 0) continue; /* folded away: nobody reads it */
        const bool cut = reach <= i;
        if (mark[i]) {
            size_t bytes = 0;
            for (int k = 0; k < nd->n_outputs; k++)
                bytes += entry_bytes_of(fs, (mx_entry){(uint32_t)i, (uint32_t)k});
            run += bytes;
            *eligible_bytes += bytes;
            eg->n_checkpoint_candidates += cut;
            if (cut && run > budget) {
                mark[i] = false;
                eg->n_checkpoints++;
                run = 0;
            }
        } else if (cut) {
            run = 0; /* kept anyway (a random or stateful layer): it bounds a segment too */
        }
        if (last_read[i] > reach) reach = last_read[i];
    }
    free(last_read);
    return MX_OK;
}

/* Segments as exec_graph_prepare tries them: a budget, and layers kept
 * though between checkpoints (per forward node; NULL: none). */
typedef struct segment_choice {
    size_t budget;
    const bool *kept;
} segment_choice;

static bool heavy_layer(const mx_node *n)
{
    return n->kind == MX_NODE_OP && (!strcmp(n->op->name, "Convolution") || !strcmp(n->op->name, "Deconvolution") ||
                                     !strcmp(n->op->name, "FullyConnected"));
}

/* The per-node mirror marks of g (NULL in *out when none is marked); with
 * segments, the checkpoints of this choice unmarked (fs: g's shapes). */
static mx_status mirror_marks(const mx_graph *g, exec_mirror mode, const mx_graph_shapes *fs, segment_choice choice,
                              exec_graph *eg, size_t *eligible_bytes, bool **out)
{
    int n = mx_graph_num_nodes(g);
    bool *is_head = mx_calloc((size_t)n + 1, sizeof(bool));
    bool *mark = mx_calloc((size_t)n + 1, sizeof(bool));
    *out = NULL;
    if (!is_head || !mark) {
        free(is_head);
        free(mark);
        return MX_ERR_NOMEM;
    }
    for (int h = 0; h < mx_graph_num_heads(g); h++) is_head[mx_graph_head(g, h).node] = true;
    for (int i = 0; i < n; i++) mark[i] = mirror_wanted(g, (uint32_t)i, mode, is_head);
    mx_status s = mode == EXEC_MIRROR_SEGMENTS
                      ? choose_checkpoints(g, fs, is_head, choice.budget, mark, eg, eligible_bytes)
                      : MX_OK;
    for (int i = 0; choice.kept && i < n; i++) mark[i] = mark[i] && !choice.kept[i];
    bool any = false;
    for (int i = 0; i < n; i++) any = any || mark[i];
    free(is_head);
    if (any && s == MX_OK) *out = mark;
    else free(mark);
    return s;
}

static mx_status defer_weight_gradients(exec_graph *eg, const bool *updated, const char *const *names,
                                        const mx_shape *shapes, int n_shapes);
static mx_status hold_updated_gradients(exec_graph *eg, const bool *updated);

/* exec_graph_prepare with one segment budget (EXEC_MIRROR_SEGMENTS);
 * *eligible_bytes: the outputs mirroring may drop, summed. */
static mx_status prepare_graph(const mx_graph *src, const char *const *outputs, int n_outputs, bool for_training,
                               exec_mirror mirror, segment_choice choice, const bool *grad_needed, const char *const *names,
                               const mx_shape *shapes, int n_shapes, bool fold, const bool *updated, exec_graph *eg,
                               size_t *eligible_bytes)
{
    memset(eg, 0, sizeof(*eg));
    for (int i = 0; i < mx_graph_num_nodes(src); i++)
        if (mx_graph_node(src, (uint32_t)i)->kind == MX_NODE_BACKWARD)
            return MX_ERROR(MX_ERR_INVALID, "bind: the symbol already contains a backward pass");
    MX_TRY(mx_graph_clone(src, &eg->g));
    mx_status s = MX_OK;
    mx_graph *g = eg->g;
    /* Requested outputs become the heads. */
    if (outputs && n_outputs > 0) {
        mx_entry *heads = mx_malloc(sizeof(mx_entry) * (size_t)n_outputs);
        if (!heads) s = MX_ERR_NOMEM;
        for (int i = 0; i < n_outputs && s == MX_OK; i++) s = resolve_output(g, outputs[i], &heads[i]);
        if (s == MX_OK) s = mx_graph_set_heads(g, heads, n_outputs);
        free(heads);
    }
    if (s == MX_OK && mx_graph_num_heads(g) == 0) s = MX_ERROR(MX_ERR_INVALID, "bind: the symbol has no outputs");
    int n_folded;
    if (s == MX_OK && fold) s = mx_graph_fold_activations(g, NULL, &n_folded);
    if (s == MX_OK && fold) s = mx_graph_fold_residual_sums(g, NULL, &n_folded);
    /* Prediction: the sums BatchNorm left (folded into the convolutions) go
     * into the convolutions. */
    if (s == MX_OK && fold && !for_training) s = mx_graph_fold_conv_sums(g, NULL, &n_folded);
    int n_fwd = mx_graph_num_nodes(g);
    eg->n_forward = n_fwd;
    if (s == MX_OK) {
        eg->args = mx_malloc(sizeof(uint32_t) * (size_t)n_fwd);
        eg->aux = mx_malloc(sizeof(uint32_t) * (size_t)n_fwd);
        eg->grads = mx_malloc(sizeof(mx_entry) * (size_t)n_fwd);
        if (!eg->args || !eg->aux || !eg->grads) s = MX_ERR_NOMEM;
    }
    if (s == MX_OK) {
        eg->n_args = mx_graph_list_arguments(g, eg->args);
        eg->n_aux = mx_graph_list_aux(g, eg->aux);
        for (int i = 0; i < eg->n_args; i++) eg->grads[i] = (mx_entry){MX_NO_NODE, 0};
    }
    if (s == MX_OK && for_training) {
        uint32_t *wrt = mx_malloc(sizeof(uint32_t) * (size_t)(eg->n_args + 1));
        int *which = mx_malloc(sizeof(int) * (size_t)(eg->n_args + 1));
        mx_entry *grads = mx_malloc(sizeof(mx_entry) * (size_t)(eg->n_args + 1));
        int n_wrt = 0;
        if (!wrt || !which || !grads) s = MX_ERR_NOMEM;
        for (int i = 0; i < eg->n_args && s == MX_OK; i++)
            if (!grad_needed || grad_needed[i]) {
                which[n_wrt] = i;
                wrt[n_wrt++] = eg->args[i];
            }
        bool *marks = NULL;
        mx_graph_shapes fs = {0};
        if (s == MX_OK && mirror == EXEC_MIRROR_SEGMENTS) s = infer_entries(g, names, shapes, n_shapes, &fs);
        if (s == MX_OK) s = mirror_marks(g, mirror, &fs, choice, eg, eligible_bytes, &marks);
        if (mirror == EXEC_MIRROR_SEGMENTS) mx_graph_shapes_free(&fs);
        if (s == MX_OK) s = mx_graph_gradient_mirror(g, wrt, n_wrt, marks, mirror == EXEC_MIRROR_SEGMENTS, grads);
        eg->mirrored = marks;
        eg->segment_budget = choice.budget;
        for (int k = 0; k < n_wrt && s == MX_OK; k++) eg->grads[which[k]] = grads[k];
        free(wrt);
        free(which);
        free(grads);
    }
    if (s == MX_OK) {
        eg->n_nodes = mx_graph_num_nodes(g);
        s = infer_entries(g, names, shapes, n_shapes, &eg->shapes);
    }
    if (s == MX_OK && for_training && updated) s = defer_weight_gradients(eg, updated, names, shapes, n_shapes);
    if (s != MX_OK) {
        exec_graph_free(eg);
        return s;
    }

    /* What runs: everything the outputs and the gradients depend on. */
    int n = eg->n_nodes;
    int n_entries = eg->shapes.n_entries;
    eg->needed = mx_calloc((size_t)n, sizeof(bool));
    eg->kind = mx_calloc((size_t)n_entries + 1, 1);
    eg->arg_index = mx_malloc(sizeof(int32_t) * ((size_t)n_entries + 1));
    if (!eg->needed || !eg->kind || !eg->arg_index) {
        exec_graph_free(eg);
        return MX_ERR_NOMEM;
    }
    for (int e = 0; e < n_entries; e++) eg->arg_index[e] = -1;
    for (int h = 0; h < mx_graph_num_heads(g); h++) eg->needed[mx_graph_head(g, h).node] = true;
    for (int i = 0; i < eg->n_args; i++)
        if (eg->grads[i].node != MX_NO_NODE) eg->needed[eg->grads[i].node] = true;
    mx_entry reads[3 * MX_OP_MAX_IO];
    for (int i = n - 1; i >= 0; i--) {
        if (!eg->needed[i]) continue;
        int k = exec_node_reads(eg, (uint32_t)i, reads);
        for (int j = 0; j < k; j++) eg->needed[reads[j].node] = true;
        const mx_node *nd = mx_graph_node(g, (uint32_t)i);
        if (nd->kind == MX_NODE_BACKWARD) eg->needed[nd->forward_node] = true; /* its outputs feed it */
    }

    /* Entry classes: bound variables, outputs, gradients, the rest internal. */
    for (int i = 0; i < n; i++) {
        const mx_node *nd = mx_graph_node(g, (uint32_t)i);
        if (!eg->needed[i]) continue;
        eg->n_mirror += exec_node_is_mirror(nd);
        eg->n_mirror_heavy += exec_node_is_mirror(nd) && heavy_layer(nd);
        for (int j = 0; j < nd->n_outputs; j++) {
            uint32_t e = eg->shapes.entry_offset[i] + (uint32_t)j;
            eg->kind[e] = nd->kind == MX_NODE_VARIABLE ? ENTRY_HEAD_GRAD : ENTRY_INTERNAL;
        }
    }
    for (int i = 0; i < eg->n_args; i++) {
        uint32_t e = eg->shapes.entry_offset[eg->args[i]];
        eg->kind[e] = ENTRY_ARG;
        eg->arg_index[e] = i;
    }
    for (int i = 0; i < eg->n_aux; i++) {
        uint32_t e = eg->shapes.entry_offset[eg->aux[i]];
        eg->kind[e] = ENTRY_AUX;
        eg->arg_index[e] = i;
    }
    for (int i = 0; i < eg->n_args; i++) {
        if (eg->grads[i].node == MX_NO_NODE) continue;
        uint32_t e = exec_entry_id(eg, eg->grads[i]);
        eg->kind[e] = ENTRY_GRAD;
        eg->arg_index[e] = i;
    }
    for (int h = 0; h < mx_graph_num_heads(g); h++) {
        uint32_t e = exec_entry_id(eg, mx_graph_head(g, h));
        if (eg->kind[e] == ENTRY_INTERNAL) {
            eg->kind[e] = ENTRY_OUTPUT;
            eg->arg_index[e] = h;
        }
    }
    /* Backward outputs nobody reads (gradients of data, labels...) and
     * internal forward outputs nobody reads (a mask or batch mean when there
     * is no backward pass) are skipped with req null. */
    int *readers = mx_calloc((size_t)n_entries + 1, sizeof(int));
    if (!readers) {
        exec_graph_free(eg);
        return MX_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        if (!eg->needed[i]) continue;
        int k = exec_node_reads(eg, (uint32_t)i, reads);
        for (int j = 0; j < k; j++) readers[exec_entry_id(eg, reads[j])]++;
    }
    for (int i = 0; i < n; i++) {
        const mx_node *nd = mx_graph_node(g, (uint32_t)i);
        if (nd->kind == MX_NODE_VARIABLE || !eg->needed[i]) continue;
        int first = nd->kind == MX_NODE_BACKWARD ? 0 : mx_node_num_visible_outputs(nd);
        for (int j = first; j < nd->n_outputs; j++) {
            uint32_t e = eg->shapes.entry_offset[i] + (uint32_t)j;
            if (eg->kind[e] == ENTRY_INTERNAL && readers[e] == 0) eg->kind[e] = ENTRY_UNUSED;
        }
    }
    free(readers);
    if (for_training && updated) {
        mx_status hs = hold_updated_gradients(eg, updated);
        if (hs != MX_OK) {
            exec_graph_free(eg);
            return hs;
        }
    }
    /* Backward mirroring trades time for memory, so by default its plans
     * share memory across what could run in parallel too (one colour,
     * one arena): the short-lived recomputed tensors pack better, and
     * branches sharing an arena only run one after the other. */
    const long asked = mx_env_long("MXNET_EXEC_NUM_MATCH_COLOR", -1);
    const long colors = asked >= 0 ? asked : eg->n_mirror > 0 ? 1 : 4;
    mx_status cs = color_nodes(eg, colors < 1 ? 1 : (colors > 64 ? 64 : (int)colors), 0);
    /* Unless the colours were asked for, the planner may also take 3 or 2
     * (smallest_plan). Which branch lands in which arena moves with the
     * graph's longest paths: ResNet-50 with its residual sums folded into
     * the BatchNorms planned 44 MB more on 4 colours than unfolded, 7 MB
     * less on 2 (the same tensors, the same lifetimes). */
    for (int k = 1; cs == MX_OK && asked < 0 && eg->n_mirror == 0 && k < EXEC_MAX_COLORINGS; k++)
        cs = color_nodes(eg, 4 - k, k);
    if (cs != MX_OK) exec_graph_free(eg);
    return cs;
}

/* The graph of another segment choice (in *other, or freed). */
static mx_status segments_graph(const mx_graph *src, const char *const *outputs, int n_outputs,
                                const bool *grad_needed, const char *const *names, const mx_shape *shapes, int n_shapes,
                                bool fold, const bool *updated, segment_choice choice, exec_graph *other)
{
    size_t unused;
    return prepare_graph(src, outputs, n_outputs, true, EXEC_MIRROR_SEGMENTS, choice, grad_needed, names, shapes,
                         n_shapes, fold, updated, other, &unused);
}

/* *other in place of *eg when its plan is smaller than *best, or as small
 * with ties; else freed. */
static mx_status keep_smaller_graph(exec_graph *other, bool ties, exec_graph *eg, size_t *best, int *tried,
                                    bool *taken)
{
    memory_plan p;
    *taken = false;
    mx_status s = memory_plan_build(other, true, true, ADDTO_AUTO, &p);
    if (s != MX_OK) {
        exec_graph_free(other);
        return s;
    }
    (*tried)++;
    const size_t total = memory_plan_total(&p);
    memory_plan_free(&p);
    if (total < *best || (ties && total == *best)) {
        *best = total;
        exec_graph_free(eg);
        *eg = *other;
        *taken = true;
    } else {
        exec_graph_free(other);
    }
    return MX_OK;
}

/* The segments' search (EXEC_MIRROR_SEGMENTS), from *eg as prepared with
 * budget 0 (eligible: the bytes mirroring may drop). */
static mx_status search_segments(const mx_graph *src, const char *const *outputs, int n_outputs,
                                 const bool *grad_needed, const char *const *names, const mx_shape *shapes,
                                 int n_shapes, bool fold, const bool *updated, size_t eligible, exec_graph *eg)
{
    memory_plan p;
    MX_TRY(memory_plan_build(eg, true, true, ADDTO_AUTO, &p));
    size_t best = memory_plan_total(&p);
    memory_plan_free(&p);
    int tried = 1;
    bool taken;
    /* Budgets from 0 (every candidate kept) up to all the outputs, in
     * steps of 2^(1/4) (where the segments change moves with the sizes:
     * steps of sqrt(2) missed ResNet-50's and Inception-BN's smallest);
     * the smallest plan wins (ties: the smaller budget,
     * which keeps more and recomputes less). A plan takes about a
     * millisecond (ResNet-50). A budget that gives the segments of the one
     * before is not planned again. */
    int last[3] = {eg->n_checkpoints, eg->n_mirror, eg->n_nodes};
    for (int k = 80; k >= 0; k--) {
        const segment_choice c = {(size_t)((double)eligible * pow(2.0, -0.25 * k)), NULL};
        if (c.budget == 0) continue;
        exec_graph other;
        MX_TRY(segments_graph(src, outputs, n_outputs, grad_needed, names, shapes, n_shapes, fold, updated, c, &other));
        const int now[3] = {other.n_checkpoints, other.n_mirror, other.n_nodes};
        if (!memcmp(now, last, sizeof(now))) {
            exec_graph_free(&other);
            continue;
        }
        memcpy(last, now, sizeof(now));
        MX_TRY(keep_smaller_graph(&other, false, eg, &best, &tried, &taken));
    }
    /* Then, last layer first, a convolution or fully-connected layer
     * between checkpoints is kept instead where that does not grow the
     * plan (its output is dropped before the peak or picked up after it):
     * recomputing it costs time and saves nothing. */
    const int n_fwd = eg->n_forward;
    bool *kept = mx_calloc((size_t)n_fwd + 1, sizeof(bool));
    if (!kept) return MX_ERR_NOMEM;
    mx_status s = MX_OK;
    for (int i = n_fwd - 1; i >= 0 && s == MX_OK; i--) {
        if (!eg->mirrored || !eg->mirrored[i] || !heavy_layer(mx_graph_node(eg->g, (uint32_t)i))) continue;
        kept[i] = true;
        exec_graph other;
        s = segments_graph(src, outputs, n_outputs, grad_needed, names, shapes, n_shapes, fold, updated,
                           (segment_choice){eg->segment_budget, kept}, &other);
        if (s == MX_OK) s = keep_smaller_graph(&other, true, eg, &best, &tried, &taken);
        kept[i] = s == MX_OK && taken;
    }
    free(kept);
    eg->n_segment_plans = tried;
    return s;
}

mx_status exec_graph_prepare(const mx_graph *src, const char *const *outputs, int n_outputs, bool for_training,
                             exec_mirror mirror, const bool *grad_needed, const char *const *names,
                             const mx_shape *shapes, int n_shapes, bool fold, const bool *updated, exec_graph *eg)
{
    size_t eligible = 0;
    MX_TRY(prepare_graph(src, outputs, n_outputs, for_training, mirror, (segment_choice){0, NULL}, grad_needed, names,
                         shapes, n_shapes, fold, updated, eg, &eligible));
    if (mirror != EXEC_MIRROR_SEGMENTS || !for_training || eg->n_checkpoint_candidates == 0) return MX_OK;
    mx_status s = search_segments(src, outputs, n_outputs, grad_needed, names, shapes, n_shapes, fold, updated,
                                  eligible, eg);
    if (s != MX_OK) exec_graph_free(eg);
    return s;
}

/* Bytes of entry e. */
static size_t entry_bytes_of(const mx_graph_shapes *sh, mx_entry e)
{
    return (size_t)mx_shape_size(mx_graph_entry_shape(sh, e)) * mx_dtype_size(mx_graph_entry_dtype(sh, e));
}

/* exec_graph_prepare's deferral: a backward node whose gradients of
 * updated arguments weigh more than DEFER_RATIO times the tensors it
 * reads (which deferral keeps alive to the end) gets a copy at the end of
 * the pass that computes those gradients; the original keeps the rest
 * (and does not run when nothing is left). Runs on the shapes of the
 * graph as built and infers them again with the copies. */
#define DEFER_RATIO 4

static mx_status defer_weight_gradients(exec_graph *eg, const bool *updated, const char *const *names,
                                        const mx_shape *shapes, int n_shapes)
{
    mx_graph *g = eg->g;
    const int n = eg->n_nodes;
    size_t *moved = mx_calloc((size_t)n + 1, sizeof(size_t));
    if (!moved) return MX_ERR_NOMEM;
    for (int a = 0; a < eg->n_args; a++) {
        const mx_entry ge = eg->grads[a];
        if (!updated[a] || ge.node == MX_NO_NODE || mx_graph_node(g, ge.node)->kind != MX_NODE_BACKWARD) continue;
        moved[ge.node] += entry_bytes_of(&eg->shapes, ge);
    }
    int n_copies = 0;
    mx_status s = MX_OK;
    for (int b = 0; b < n && s == MX_OK; b++) {
        if (!moved[b]) continue;
        const mx_node *bn = mx_graph_node(g, (uint32_t)b);
        size_t kept = 0;
        for (int j = 0; j < bn->n_inputs; j++) {
            const mx_entry in = bn->inputs[j];
            if (in.node != MX_NO_NODE && mx_graph_node(g, in.node)->kind != MX_NODE_VARIABLE)
                kept += entry_bytes_of(&eg->shapes, in);
        }
        if (moved[b] <= DEFER_RATIO * kept) continue;
        uint32_t copy;
        s = mx_graph_append_backward_copy(g, (uint32_t)b, &copy);
        for (int a = 0; a < eg->n_args && s == MX_OK; a++)
            if (updated[a] && eg->grads[a].node == (uint32_t)b) eg->grads[a].node = copy;
        moved[n_copies++] = (size_t)b; /* reused: the copied nodes in order */
    }
    if (s == MX_OK && n_copies > 0) {
        eg->n_nodes = mx_graph_num_nodes(g);
        eg->deferred_from = mx_malloc(sizeof(int32_t) * ((size_t)eg->n_nodes + 1));
        if (!eg->deferred_from) s = MX_ERR_NOMEM;
        for (int i = 0; i < eg->n_nodes && s == MX_OK; i++) eg->deferred_from[i] = i < n ? -1 : (int32_t)moved[i - n];
    }
    free(moved);
    if (s != MX_OK || n_copies == 0) return s;
    mx_graph_shapes_free(&eg->shapes);
    return infer_entries(g, names, shapes, n_shapes, &eg->shapes);
}

static mx_status hold_updated_gradients(exec_graph *eg, const bool *updated)
{
    const int n_entries = eg->shapes.n_entries;
    eg->update_after = mx_malloc(sizeof(int32_t) * ((size_t)eg->n_args + 1));
    eg->held_until = mx_malloc(sizeof(int32_t) * ((size_t)n_entries + 1));
    if (!eg->update_after || !eg->held_until) return MX_ERR_NOMEM;
    int32_t *after = eg->update_after;
    for (int e = 0; e < n_entries; e++) eg->held_until[e] = -1;
    for (int a = 0; a < eg->n_args; a++)
        after[a] = updated[a] && eg->grads[a].node != MX_NO_NODE ? (int32_t)eg->grads[a].node : -1;
    /* The gradient pass appends sums of gradients after every backward
     * node and a layer's mirror copies before its backward, so the
     * gradient's writer is the argument's last reader today; the scan
     * keeps that true whatever the order. */
    mx_entry reads[3 * MX_OP_MAX_IO];
    for (int i = 0; i < eg->n_nodes; i++) {
        if (!eg->needed[i]) continue;
        int k = exec_node_reads(eg, (uint32_t)i, reads);
        for (int j = 0; j < k; j++) {
            uint32_t e = exec_entry_id(eg, reads[j]);
            int32_t a = eg->kind[e] == ENTRY_ARG ? eg->arg_index[e] : -1;
            if (a >= 0 && after[a] >= 0 && after[a] < i) after[a] = i;
        }
    }
    for (int a = 0; a < eg->n_args; a++) {
        if (after[a] < 0) continue;
        uint32_t e = exec_entry_id(eg, eg->grads[a]);
        eg->kind[e] = ENTRY_INTERNAL;
        eg->held_until[e] = after[a];
    }
    return MX_OK;
}

/* ---------------------------------------------------------------- planner */

/* Each colour's tensors live in one arena (one buffer): a tensor takes
 * the best-fitting free range of its colour's arena, split off the
 * front, or the arena grows at its end; a range freed merges with its
 * free neighbours. Unlike whole buffers handed from tensor to tensor, a
 * large freed range serves several smaller tensors and neighbours freed
 * apart serve one larger, so the arena stays close to the most bytes
 * alive at once. Offsets are multiples of 256 bytes, as cudaMalloc aligns
 * (vector loads, cuDNN and cuBLAS on GPU arenas). */
#define ARENA_ALIGN 256

typedef struct free_range {
    size_t off, len;
} free_range;

typedef struct arena {
    int buffer;        /* its buffer id, -1 until the first tensor */
    size_t end;        /* bytes used so far: the buffer's size */
    free_range *free;  /* free ranges below end, by offset */
    int n_free, cap;
} arena;

static size_t arena_round(size_t bytes) { return (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

static size_t arena_take(arena *a, size_t bytes)
{
    int best = -1;
    for (int k = 0; k < a->n_free; k++)
        if (a->free[k].len >= bytes && (best < 0 || a->free[k].len < a->free[best].len)) best = k;
    if (best >= 0) {
        size_t off = a->free[best].off;
        a->free[best].off += bytes;
        a->free[best].len -= bytes;
        if (a->free[best].len == 0) {
            memmove(&a->free[best], &a->free[best + 1], (size_t)(a->n_free - best - 1) * sizeof(free_range));
            a->n_free--;
        }
        return off;
    }
    /* Grow: from the free range at the end, if there is one. */
    if (a->n_free > 0 && a->free[a->n_free - 1].off + a->free[a->n_free - 1].len == a->end) {
        size_t off = a->free[--a->n_free].off;
        a->end = off + bytes;
        return off;
    }
    size_t off = a->end;
    a->end += bytes;
    return off;
}

static mx_status arena_give(arena *a, size_t off, size_t len)
{
    int k = 0;
    while (k < a->n_free && a->free[k].off < off) k++;
    bool join_prev = k > 0 && a->free[k - 1].off + a->free[k - 1].len == off;
    bool join_next = k < a->n_free && off + len == a->free[k].off;
    if (join_prev && join_next) {
        a->free[k - 1].len += len + a->free[k].len;
        memmove(&a->free[k], &a->free[k + 1], (size_t)(a->n_free - k - 1) * sizeof(free_range));
        a->n_free--;
        return MX_OK;
    }
    if (join_prev) {
        a->free[k - 1].len += len;
        return MX_OK;
    }
    if (join_next) {
        a->free[k].off = off;
        a->free[k].len += len;
        return MX_OK;
    }
    if (a->n_free == a->cap) {
        int cap = a->cap ? 2 * a->cap : 16;
        free_range *grown = mx_realloc(a->free, (size_t)cap * sizeof(*grown));
        if (!grown) return MX_ERR_NOMEM;
        a->free = grown;
        a->cap = cap;
    }
    memmove(&a->free[k + 1], &a->free[k], (size_t)(a->n_free - k) * sizeof(free_range));
    a->free[k] = (free_range){off, len};
    a->n_free++;
    return MX_OK;
}

void memory_plan_free(memory_plan *p)
{
    free(p->storage);
    free(p->offset);
    free(p->inplace);
    free(p->addto);
    free(p->sum_done);
    free(p->batch_stride);
    free(p->buffer_bytes);
    memset(p, 0, sizeof(*p));
}

size_t memory_plan_total(const memory_plan *p)
{
    size_t total = 0;
    for (int i = 0; i < p->n_buffers; i++) total += p->buffer_bytes[i];
    return total;
}

size_t exec_node_shadow_bytes(const exec_graph *eg, uint32_t id)
{
    const mx_node *n = mx_graph_node(eg->g, id);
    const mx_node *f = n->kind == MX_NODE_BACKWARD ? mx_graph_node(eg->g, n->forward_node) : n;
    if (f->kind != MX_NODE_OP || !eg->shapes.dtypes) return 0;
    size_t bytes = 0;
    for (int j = 0; j < n->n_inputs + n->n_outputs; j++) {
        mx_entry e = j < n->n_inputs ? n->inputs[j] : (mx_entry){id, (uint32_t)(j - n->n_inputs)};
        if (e.node == MX_NO_NODE) continue;
        const mx_dtype dt = mx_graph_entry_dtype(&eg->shapes, e);
        if (dt != MX_FLOAT32 && !(f->op->cpu_dtypes & MX_DTYPE_BIT(dt)))
            bytes += EXEC_SHADOW_ROUND((size_t)mx_shape_size(mx_graph_entry_shape(&eg->shapes, e)) * sizeof(float));
    }
    return bytes;
}

static size_t node_workspace(const exec_graph *eg, uint32_t id)
{
    const mx_node *n = mx_graph_node(eg->g, id);
    bool backward = n->kind == MX_NODE_BACKWARD;
    const mx_node *f = backward ? mx_graph_node(eg->g, n->forward_node) : n;
    uint32_t fid = backward ? n->forward_node : id;
    if (f->kind != MX_NODE_OP) return 0;
    const size_t shadow = exec_node_shadow_bytes(eg, id);
    if (!f->op->workspace) return shadow;
    mx_shape in[MX_OP_MAX_IO];
    for (int j = 0; j < f->n_inputs; j++) in[j] = *mx_graph_entry_shape(&eg->shapes, f->inputs[j]);
    const mx_shape *out = &eg->shapes.shapes[eg->shapes.entry_offset[fid]];
    const size_t own = f->op->workspace(f->params, in, out, backward);
    return shadow ? EXEC_SHADOW_ROUND(own) + shadow : own;
}

bool exec_graph_all_float32(const exec_graph *eg)
{
    for (int e = 0; eg->shapes.dtypes && e < eg->shapes.n_entries; e++)
        if (eg->shapes.dtypes[e] != MX_FLOAT32) return false;
    return true;
}

/* The op's in-place options for a node: pairs (input slot, output). */
static const mx_inplace *node_inplace(const mx_node *n, const mx_graph *g)
{
    if (n->kind == MX_NODE_OP) return n->op->forward_inplace;
    if (n->kind == MX_NODE_BACKWARD) return mx_graph_node(g, n->forward_node)->op->backward_inplace;
    return NULL;
}

/* The slot of input `src` when an output of `bytes` may be written over it
 * in place: this node is its last reader and nothing else of this node
 * took that memory already; else -1. */
static int reusable_slot(const exec_graph *eg, const int *slot_of, const int *refs, const int *users, mx_entry src,
                         size_t bytes)
{
    uint32_t se = exec_entry_id(eg, src);
    int cand = slot_of[se];
    if (eg->kind[se] != ENTRY_INTERNAL || cand < 0 || refs[se] != 1 || users[cand] != 1 ||
        exec_entry_bytes(eg, se) != bytes)
        return -1;
    return cand;
}

/* The backward of a node with a folded activation reads the forward
 * output only to turn the output gradient into the activation's input
 * gradient: before the op's own backward runs, or, in ops with
 * folds_backward, element by element before writing the same element of
 * the data gradient. The ops that fold do not read that output otherwise:
 * so the data gradient may take its memory when this node is its last
 * reader (as the unfolded activation's backward freed it before the op's).
 * (An op with fold_mask_from_inputs does not read it at all for a relu or
 * clip: it may be gone by then.) Returns that memory's slot, or -1. */
static int folded_output_slot(const exec_graph *eg, const int *slot_of, const mx_node *n, const int *refs,
                              const int *users, size_t bytes)
{
    if (n->kind != MX_NODE_BACKWARD) return -1;
    const mx_node *f = mx_graph_node(eg->g, n->forward_node);
    /* The node reads output 0, and only for its fold. */
    if (mx_op_backward_reads_output(f->op, 0) || !mx_node_backward_reads_output(f, 0)) return -1;
    return reusable_slot(eg, slot_of, refs, users, n->inputs[f->n_outputs + f->n_inputs], bytes);
}

/* Gradient sums that become adds (memory_plan_build's enable_addto): per
 * entry, the entry whose memory it shares (the sum's earliest term), else
 * -1; marks the added terms and the sums that need not run. */
static void plan_addto(const exec_graph *eg, const int *refs, int32_t *join, memory_plan *p)
{
    for (int i = eg->n_forward; i < eg->n_nodes; i++) {
        if (!eg->needed[i] || !exec_node_is_grad_sum(eg, (uint32_t)i)) continue;
        const mx_node *n = mx_graph_node(eg->g, (uint32_t)i);
        const uint32_t es = eg->shapes.entry_offset[i];
        bool ok = eg->kind[es] == ENTRY_INTERNAL && n->n_inputs >= 2;
        int first = -1;
        for (int j = 0; j < n->n_inputs && ok; j++) {
            const mx_entry in = n->inputs[j];
            const uint32_t e = exec_entry_id(eg, in);
            ok = in.node != MX_NO_NODE && eg->kind[e] == ENTRY_INTERNAL && refs[e] == 1 && join[e] < 0 &&
                 mx_graph_node(eg->g, in.node)->kind == MX_NODE_BACKWARD;
            for (int q = 0; q < j && ok; q++) ok = n->inputs[q].node != in.node; /* one term per writer */
            if (first < 0 || in.node < n->inputs[first].node) first = j;
        }
        if (!ok) continue;
        const uint32_t ef = exec_entry_id(eg, n->inputs[first]);
        for (int j = 0; j < n->n_inputs; j++) {
            if (j == first) continue;
            const uint32_t e = exec_entry_id(eg, n->inputs[j]);
            join[e] = (int32_t)ef;
            p->addto[e] = 1;
        }
        join[es] = (int32_t)ef;
        p->sum_done[i] = 1;
    }
}

/* A new slot of `bytes` for colour c: in its arena, or a buffer of its own. */
static void new_slot(memory_plan *p, arena *arenas, bool enable_coshare, int c, size_t bytes, int sid,
                     int *slot_color, size_t *slot_bytes, size_t *slot_off, int *slot_buffer)
{
    slot_color[sid] = c;
    slot_bytes[sid] = arena_round(bytes);
    if (enable_coshare) {
        arena *a = &arenas[c];
        if (a->buffer < 0) a->buffer = p->n_buffers++;
        slot_buffer[sid] = a->buffer;
        slot_off[sid] = arena_take(a, slot_bytes[sid]);
    } else {
        slot_buffer[sid] = p->n_buffers;
        slot_off[sid] = 0;
        p->buffer_bytes[p->n_buffers++] = bytes;
    }
}

/* A Concat input's extent along axis 1. */
static int64_t channels_of(const exec_graph *eg, mx_entry e) { return mx_graph_entry_shape(&eg->shapes, e)->dims[1]; }

/* Whether the backward node of forward node f reads `entry` as its output
 * gradient 0. */
static bool backward_takes_grad(const exec_graph *eg, uint32_t f, uint32_t entry)
{
    for (int i = eg->n_forward; i < eg->n_nodes; i++) {
        const mx_node *b = mx_graph_node(eg->g, (uint32_t)i);
        if (eg->needed[i] && b->kind == MX_NODE_BACKWARD && b->forward_node == f && b->inputs[0].node != MX_NO_NODE &&
            exec_entry_id(eg, b->inputs[0]) == entry)
            return true;
    }
    return false;
}

/* Whether Concat node n joins along axis 1 into entry e (its output, or
 * that output's gradient), planned here: then its elements per item of
 * axis 0, and per channel. */
static bool concat_channels(const exec_graph *eg, const mx_node *n, uint32_t e, int64_t *item, int64_t *inner)
{
    const mx_shape *os = &eg->shapes.shapes[e];
    const concat_params *cp = n->params;
    if (eg->kind[e] != ENTRY_INTERNAL || os->ndim < 2 || os->dims[0] <= 0 || os->dims[1] <= 0 ||
        (cp->dim < 0 ? cp->dim + os->ndim : cp->dim) != 1)
        return false;
    *item = mx_shape_size(os) / os->dims[0];
    *inner = *item / os->dims[1];
    return true;
}

/* Concat inputs written in place inside the Concat's output
 * (exec_graph.concat_views): a Concat along axis 1 of a forward pass whose
 * output is planned here, and an input that is its producer's output 0,
 * read by nothing but this Concat, planned here too, from an op whose CPU
 * kernels write that output at a stride between items (strided_output).
 * The input is then the Concat's channels [c0, c0 + C_i) of every item:
 * per entry, the Concat node whose output it lies in (view_of, else -1) and
 * its first element there (view_at); p->batch_stride gets the Concat
 * output's elements per item. Inception's branches end in BatchNorm (with
 * its relu folded), whose output only the Concat reads: they write their
 * channels of the Concat's output, which has nothing left to copy. */
static void plan_concat_views(const exec_graph *eg, const int *refs, const int32_t *join, int32_t *view_of,
                              int64_t *view_at, memory_plan *p)
{
    for (int i = 0; i < eg->n_forward; i++) {
        const mx_node *n = mx_graph_node(eg->g, (uint32_t)i);
        if (!eg->needed[i] || n->kind != MX_NODE_OP || n->op != &mx_op_concat || exec_node_is_mirror(n)) continue;
        int64_t item, inner, c0 = 0;
        if (!concat_channels(eg, n, eg->shapes.entry_offset[i], &item, &inner)) continue;
        for (int j = 0; j < n->n_inputs; c0 += channels_of(eg, n->inputs[j]), j++) {
            const mx_entry in = n->inputs[j];
            const uint32_t e = exec_entry_id(eg, in);
            const mx_node *f = mx_graph_node(eg->g, in.node);
            if (in.index != 0 || eg->kind[e] != ENTRY_INTERNAL || refs[e] != 1 || view_of[e] >= 0 ||
                f->kind != MX_NODE_OP || exec_node_is_mirror(f) || (int)in.node >= eg->n_forward ||
                !f->op->strided_output || !f->op->strided_output(f->params, &eg->shapes.shapes[e]))
                continue;
            view_of[e] = i;
            view_at[e] = c0 * inner;
            p->batch_stride[e] = item;
            p->n_views++;
        }
    }
    /* The backward: the Concat's input gradient j is its output gradient's
     * channels of input j, where that input's producer (an op whose
     * kernels take the stride) reads it as its own output gradient, when
     * nothing else does (no sum of gradients): the Concat's backward has
     * nothing to copy either. */
    for (int i = eg->n_forward; i < eg->n_nodes; i++) {
        const mx_node *b = mx_graph_node(eg->g, (uint32_t)i);
        if (!eg->needed[i] || b->kind != MX_NODE_BACKWARD) continue;
        const mx_node *n = mx_graph_node(eg->g, b->forward_node);
        if (n->kind != MX_NODE_OP || n->op != &mx_op_concat || b->inputs[0].node == MX_NO_NODE) continue;
        int64_t item, inner, c0 = 0;
        if (!concat_channels(eg, n, exec_entry_id(eg, b->inputs[0]), &item, &inner)) continue;
        for (int j = 0; j < b->n_outputs && j < n->n_inputs; c0 += channels_of(eg, n->inputs[j]), j++) {
            const uint32_t g = eg->shapes.entry_offset[i] + (uint32_t)j;
            const mx_entry in = n->inputs[j];
            const mx_node *f = mx_graph_node(eg->g, in.node);
            if (in.index != 0 || eg->kind[g] != ENTRY_INTERNAL || refs[g] != 1 || join[g] >= 0 || p->addto[g] ||
                f->kind != MX_NODE_OP || !f->op->strided_output ||
                !f->op->strided_output(f->params, mx_graph_entry_shape(&eg->shapes, in)) ||
                !backward_takes_grad(eg, in.node, g))
                continue;
            view_of[g] = i;
            view_at[g] = c0 * inner;
            p->batch_stride[g] = item;
            p->n_grad_views++;
        }
    }
}

static mx_status plan_build(const exec_graph *eg, const int *color, bool enable_inplace, bool enable_coshare,
                            bool enable_addto, memory_plan *p)
{
    memset(p, 0, sizeof(*p));
    int n_entries = eg->shapes.n_entries, n_colors = 1;
    for (int i = 0; i < eg->n_nodes; i++)
        if (color[i] + 1 > n_colors) n_colors = color[i] + 1;
    p->n_colors = enable_coshare ? n_colors : 0;
    p->storage = mx_malloc(sizeof(int32_t) * ((size_t)n_entries + 1));
    p->offset = mx_calloc((size_t)n_entries + 1, sizeof(size_t));
    p->inplace = mx_calloc((size_t)n_entries + 1, 1);
    p->addto = mx_calloc((size_t)n_entries + 1, 1);
    p->sum_done = mx_calloc((size_t)eg->n_nodes + 1, 1);
    p->batch_stride = mx_calloc((size_t)n_entries + 1, sizeof(int64_t));
    int32_t *view_of = mx_malloc(sizeof(int32_t) * ((size_t)n_entries + 1));
    int64_t *view_at = mx_calloc((size_t)n_entries + 1, sizeof(int64_t));
    int32_t *join = mx_malloc(sizeof(int32_t) * ((size_t)n_entries + 1));
    p->buffer_bytes = mx_calloc((size_t)n_entries + (size_t)n_colors + 1, sizeof(size_t));
    int *refs = mx_calloc((size_t)n_entries + 1, sizeof(int));
    /* A slot: the memory of one tensor and of those written in place over
     * it after it (same bytes). */
    int *slot_of = mx_malloc(sizeof(int) * ((size_t)n_entries + 1));
    int *users = mx_calloc((size_t)n_entries + 1, sizeof(int)); /* live entries per slot */
    int *slot_color = mx_malloc(sizeof(int) * ((size_t)n_entries + 1));
    size_t *slot_bytes = mx_malloc(sizeof(size_t) * ((size_t)n_entries + 1));
    size_t *slot_off = mx_malloc(sizeof(size_t) * ((size_t)n_entries + 1));
    int *slot_buffer = mx_malloc(sizeof(int) * ((size_t)n_entries + 1));
    arena *arenas = mx_calloc((size_t)n_colors, sizeof(arena));
    int n_slots = 0;
    mx_status st = MX_OK;
    if (!p->storage || !p->offset || !p->inplace || !p->addto || !p->sum_done || !p->batch_stride || !view_of ||
        !view_at || !join || !p->buffer_bytes || !refs || !slot_of || !users || !slot_color || !slot_bytes ||
        !slot_off || !slot_buffer || !arenas)
        st = MX_ERR_NOMEM;
    for (int e = 0; e < n_entries && st == MX_OK; e++) p->storage[e] = slot_of[e] = join[e] = view_of[e] = -1;
    for (int c = 0; c < n_colors && st == MX_OK; c++) arenas[c].buffer = -1;
    mx_entry reads[3 * MX_OP_MAX_IO];
    for (int i = 0; i < eg->n_nodes && st == MX_OK; i++) {
        if (!eg->needed[i]) continue;
        int k = exec_node_reads(eg, (uint32_t)i, reads);
        for (int j = 0; j < k; j++) refs[exec_entry_id(eg, reads[j])]++;
    }
    /* Entries read outside the graph until a node (plan.h's held_until). */
    uint32_t *held = mx_malloc(sizeof(uint32_t) * ((size_t)n_entries + 1));
    int n_held = 0;
    if (!held) st = MX_ERR_NOMEM;
    for (int e = 0; e < n_entries && st == MX_OK && eg->held_until; e++)
        if (eg->held_until[e] >= 0) {
            held[n_held++] = (uint32_t)e;
            refs[e]++;
        }
    if (st == MX_OK && enable_addto) plan_addto(eg, refs, join, p);
    if (st == MX_OK && eg->concat_views) plan_concat_views(eg, refs, join, view_of, view_at, p);

    for (int i = 0; i < eg->n_nodes && st == MX_OK; i++) {
        const mx_node *n = mx_graph_node(eg->g, (uint32_t)i);
        if (!eg->needed[i] || n->kind == MX_NODE_VARIABLE) continue;
        size_t ws = node_workspace(eg, (uint32_t)i);
        if (ws > p->workspace) p->workspace = ws;
        const mx_inplace *options = enable_inplace ? node_inplace(n, eg->g) : NULL;
        for (int j = 0; j < n->n_outputs; j++) {
            uint32_t e = eg->shapes.entry_offset[i] + (uint32_t)j;
            if (eg->kind[e] != ENTRY_INTERNAL) continue;
            /* A Concat input inside the Concat's output: that output's slot
             * is made with its first input (and held for the Concat from
             * then on, by one user that becomes the output's own). */
            const bool view = view_of[e] >= 0;
            /* the Concat's output, or for a gradient its output gradient */
            const uint32_t ec = !view ? e
                                : n->kind == MX_NODE_BACKWARD ? exec_entry_id(eg, n->inputs[0])
                                                              : eg->shapes.entry_offset[view_of[e]];
            if (view && slot_of[ec] < 0) {
                const int sid = n_slots++;
                new_slot(p, arenas, enable_coshare, color[view_of[e]], exec_entry_bytes(eg, ec), sid, slot_color,
                         slot_bytes, slot_off, slot_buffer);
                slot_of[ec] = sid;
                users[sid]++;
            }
            if (view || slot_of[e] >= 0) { /* a view, or the Concat's output made with its first view */
                const int sid = slot_of[ec];
                p->storage[e] = slot_buffer[sid];
                p->offset[e] = slot_off[sid] + (size_t)view_at[e] * sizeof(float);
                if (view) {
                    slot_of[e] = sid;
                    users[sid]++;
                }
                continue;
            }
            size_t bytes = exec_entry_bytes(eg, e);
            /* A later term of a gradient sum, or the sum: the first term's memory. */
            int sid = join[e] >= 0 ? slot_of[join[e]] : -1;
            if (join[e] >= 0 && sid < 0) { /* plan_addto picks the earliest writer: cannot happen */
                st = MX_ERROR(MX_ERR_INVALID, "memory plan: a gradient sum's first term has no memory");
                break;
            }
            for (const mx_inplace *o = options; o && o->in >= 0 && sid < 0 && join[e] < 0; o++) {
                if (o->out != j || o->in >= n->n_inputs || n->inputs[o->in].node == MX_NO_NODE) continue;
                sid = reusable_slot(eg, slot_of, refs, users, n->inputs[o->in], bytes);
                if (sid >= 0) p->inplace[e] = 1;
            }
            if (sid < 0 && j == 0 && enable_inplace && join[e] < 0) {
                sid = folded_output_slot(eg, slot_of, n, refs, users, bytes);
                if (sid >= 0) p->inplace[e] = 1;
            }
            if (sid < 0) { /* a new slot: in its colour's arena, or a buffer of its own */
                sid = n_slots++;
                new_slot(p, arenas, enable_coshare, color[i], bytes, sid, slot_color, slot_bytes, slot_off,
                         slot_buffer);
            }
            /* In place or not, the slot's memory. */
            p->storage[e] = slot_buffer[sid];
            p->offset[e] = slot_off[sid];
            slot_of[e] = sid;
            users[sid]++;
        }
        /* Release inputs whose last reader this was, then unread outputs. */
        int k = exec_node_reads(eg, (uint32_t)i, reads);
        for (int j = 0; j <= k && st == MX_OK; j++) {
            bool output_pass = j == k;
            int m = output_pass ? n->n_outputs : 1;
            for (int q = 0; q < m && st == MX_OK; q++) {
                uint32_t e = output_pass ? eg->shapes.entry_offset[i] + (uint32_t)q : exec_entry_id(eg, reads[j]);
                if (!output_pass) refs[e]--;
                if (eg->kind[e] != ENTRY_INTERNAL || slot_of[e] < 0 || refs[e] != 0) continue;
                int sid = slot_of[e];
                if (output_pass && users[sid] == 0) continue;
                if (--users[sid] == 0 && enable_coshare)
                    st = arena_give(&arenas[slot_color[sid]], slot_off[sid], slot_bytes[sid]);
                refs[e] = -1; /* released once */
            }
        }
        for (int h = 0; h < n_held && st == MX_OK; h++) {
            uint32_t e = held[h];
            if (eg->held_until[e] != i || --refs[e] != 0 || slot_of[e] < 0) continue;
            int sid = slot_of[e];
            if (--users[sid] == 0 && enable_coshare)
                st = arena_give(&arenas[slot_color[sid]], slot_off[sid], slot_bytes[sid]);
            refs[e] = -1;
        }
    }
    for (int c = 0; c < n_colors && st == MX_OK; c++)
        if (arenas[c].buffer >= 0) p->buffer_bytes[arenas[c].buffer] = arenas[c].end;
    for (int c = 0; arenas && c < n_colors; c++) free(arenas[c].free);
    free(arenas);
    free(refs);
    free(held);
    free(join);
    free(view_of);
    free(view_at);
    free(slot_of);
    free(users);
    free(slot_color);
    free(slot_bytes);
    free(slot_off);
    free(slot_buffer);
    if (st != MX_OK) memory_plan_free(p);
    return st;
}

/* Another plan in place of *p when it is smaller (*p is freed on failure). */
static mx_status keep_smaller(const exec_graph *eg, const int *color, bool enable_inplace, bool enable_coshare,
                              bool enable_addto, memory_plan *p)
{
    memory_plan other;
    mx_status st = plan_build(eg, color, enable_inplace, enable_coshare, enable_addto, &other);
    if (st != MX_OK) {
        memory_plan_free(p);
        return st;
    }
    if (memory_plan_total(&other) < memory_plan_total(p)) {
        memory_plan_free(p);
        *p = other;
    } else {
        memory_plan_free(&other);
    }
    return MX_OK;
}

/* The smallest plan of the strategies allowed, with or without adds. */
static mx_status smallest_plan(const exec_graph *eg, bool enable_inplace, bool enable_coshare, bool enable_addto,
                               memory_plan *p)
{
    MX_TRY(plan_build(eg, eg->colorings[0], enable_inplace, enable_coshare, enable_addto, p));
    if (!enable_coshare) return MX_OK;
    /* Arenas round every tensor up to 256 bytes and can fragment, and an
     * output taken in place can keep a range that co-sharing would have
     * used better: in small nets a buffer per tensor, or co-sharing alone,
     * can come out smaller; so can fewer colours (exec_graph_prepare).
     * Plans are cheap: keep the smallest (results are the same bits
     * whichever runs). */
    MX_TRY(keep_smaller(eg, eg->colorings[0], enable_inplace, false, enable_addto, p));
    if (enable_inplace) MX_TRY(keep_smaller(eg, eg->colorings[0], false, true, enable_addto, p));
    for (int k = 1; k < eg->n_colorings; k++)
        MX_TRY(keep_smaller(eg, eg->colorings[k], enable_inplace, true, enable_addto, p));
    return MX_OK;
}

mx_status memory_plan_build(const exec_graph *eg, bool enable_inplace, bool enable_coshare, plan_addto_mode addto,
                            memory_plan *p)
{
    MX_TRY(smallest_plan(eg, enable_inplace, enable_coshare, addto != ADDTO_NEVER, p));
    if (addto != ADDTO_AUTO) return MX_OK;
    bool any_add = false;
    for (int i = 0; i < eg->n_nodes && !any_add; i++) any_add = p->sum_done[i];
    if (!any_add) return MX_OK;
    memory_plan sums;
    MX_TRY(smallest_plan(eg, enable_inplace, enable_coshare, false, &sums));
    size_t with = memory_plan_total(p), without = memory_plan_total(&sums);
    if (with > without + without / 100) {
        memory_plan_free(p);
        *p = sums;
    } else {
        memory_plan_free(&sums);
    }
    return MX_OK;
}
