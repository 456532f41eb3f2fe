/*
 * fold.c - inference-time folding of BatchNorm into the Convolution that
 * feeds it (what MXNet's oneDNN backend and TensorRT do for prediction).
 *
 * At inference BatchNorm is y = (x - mean) * gamma / sqrt(var + eps) + beta
 * per channel, with x = conv(data, W) + b; so it is the convolution with
 * weight W * s and bias (b - mean) * s + beta, s = gamma / sqrt(var + eps).
 * The pass rewrites the graph (a new one: the source is left as it is);
 * the caller computes the new weights from the list of folds it returns.
 * A pair folds only when nothing else can tell: the convolution's output
 * feeds only the BatchNorm, the BatchNorm's mean / var outputs feed
 * nothing, the channel axis is 1, every parameter is a variable, and
 * neither layer is the output the caller keeps.
 */
#include "symbol/symbol_internal.h"

#include "ops/activation.h"
#include "ops/batch_norm.h"
#include "ops/clip.h"
#include "ops/convolution.h"
#include "ops/elementwise_sum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mx_graph_bn_folds_free(mx_graph_bn_fold *folds, int n)
{
    for (int i = 0; folds && i < n; i++) {
        free(folds[i].new_weight);
        free(folds[i].new_bias);
    }
    free(folds);
}

static bool is_op(const mx_node *n, const char *name)
{
    return n->kind == MX_NODE_OP && !strcmp(n->op->name, name);
}

static bool is_variable_input(const mx_graph *g, const mx_node *n, int i)
{
    return i < n->n_inputs && g->nodes[n->inputs[i].node].kind == MX_NODE_VARIABLE;
}

/* keep names node (the layer itself or one of its outputs, "NAME_...")? */
static bool names_layer(const char *keep, const char *node)
{
    if (!keep) return false;
    size_t n = strlen(node);
    return !strncmp(keep, node, n) && (keep[n] == '\0' || keep[n] == '_');
}

/* A name for a new variable: base + suffix, unused in g and among the
 * names made so far. */
static char *new_name(const mx_graph *g, const char *base, const char *suffix, const mx_graph_bn_fold *folds, int n)
{
    size_t len = strlen(base) + strlen(suffix) + 16;
    char *s = mx_malloc(len);
    if (!s) return NULL;
    for (int k = 0;; k++) {
        if (k) snprintf(s, len, "%s%s%d", base, suffix, k);
        else snprintf(s, len, "%s%s", base, suffix);
        bool taken = mx_graph_find(g, s) != MX_NO_NODE;
        for (int i = 0; i < n && !taken; i++)
            taken = !strcmp(folds[i].new_weight, s) || (folds[i].new_bias && !strcmp(folds[i].new_bias, s));
        if (!taken) return s;
    }
}

mx_status graph_copy_op(mx_graph *out, const mx_node *n, const mx_entry *inputs, int n_inputs, const char *no_bias,
                         uint32_t *id)
{
    const char **keys = mx_calloc((size_t)n->n_attrs + 2, sizeof(char *));
    const char **values = mx_calloc((size_t)n->n_attrs + 2, sizeof(char *));
    mx_attr *extra = mx_calloc((size_t)n->n_attrs + 1, sizeof(mx_attr));
    mx_status s = keys && values && extra ? MX_OK : MX_ERR_NOMEM;
    int n_params = 0, n_extra = 0;
    bool replaced = false;
    /* As the JSON reader splits them: parameters, then reserved "__x__". */
    for (int k = 0; k < n->n_attrs && s == MX_OK; k++) {
        const mx_attr *a = &n->attrs[k];
        if (mx_op_param(n->op, a->key) || strncmp(a->key, "__", 2) != 0) {
            keys[n_params] = a->key;
            values[n_params] = a->value;
            if (no_bias && !strcmp(a->key, "no_bias")) values[n_params] = no_bias, replaced = true;
            n_params++;
        } else {
            extra[n_extra++] = *a;
        }
    }
    if (s == MX_OK && no_bias && !replaced) keys[n_params] = "no_bias", values[n_params++] = no_bias;
    if (s == MX_OK)
        s = mx_graph_add_op(out, n->op->name, n->name, keys, values, n_params, inputs, n_inputs, extra, n_extra, id);
    free(keys);
    free(values);
    free(extra);
    return s;
}

mx_status graph_copy_heads(mx_graph *out, const mx_graph *g, const uint32_t *map)
{
    mx_entry *heads = mx_calloc((size_t)g->n_heads + 1, sizeof(mx_entry));
    if (!heads) return MX_ERR_NOMEM;
    for (int h = 0; h < g->n_heads; h++) heads[h] = (mx_entry){map[g->heads[h].node], g->heads[h].index};
    mx_status s = mx_graph_set_heads(out, heads, g->n_heads);
    free(heads);
    if (s == MX_OK) out->mxnet_version = g->mxnet_version;
    return s;
}

mx_status mx_graph_fold_batchnorm(const mx_graph *g, const char *keep, mx_graph **out, mx_graph_bn_fold **folds_out,
                                  int *n_folds_out)
{
    *out = NULL;
    *folds_out = NULL;
    *n_folds_out = 0;
    const int n_nodes = g->n_nodes;
    for (int i = 0; i < n_nodes; i++)
        if (g->nodes[i].kind == MX_NODE_BACKWARD) return MX_OK; /* a training graph: nothing to fold */
    /* uses[node * 3 + k]: consumers of output k (k < 2), of outputs >= 2 (k = 2). */
    int *uses = mx_calloc((size_t)n_nodes * 3 + 1, sizeof(int));
    uint32_t *partner = mx_malloc(((size_t)n_nodes + 1) * sizeof(uint32_t)); /* conv <-> its BatchNorm */
    bool *drop = mx_calloc((size_t)n_nodes + 1, sizeof(bool));               /* variables only folds read */
    uint32_t *map = mx_malloc(((size_t)n_nodes + 1) * sizeof(uint32_t));
    mx_graph_bn_fold *folds = mx_calloc((size_t)n_nodes / 2 + 1, sizeof(*folds));
    int n_folds = 0;
    mx_graph *ng = NULL;
    mx_status s = uses && partner && drop && map && folds ? MX_OK : MX_ERR_NOMEM;
    for (int i = 0; s == MX_OK && i < n_nodes; i++) {
        partner[i] = MX_NO_NODE;
        const mx_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_inputs; j++) {
            mx_entry e = n->inputs[j];
            uses[e.node * 3 + (e.index < 2 ? e.index : 2)]++;
        }
    }
    for (int h = 0; s == MX_OK && h < g->n_heads; h++) {
        mx_entry e = g->heads[h];
        uses[e.node * 3 + (e.index < 2 ? e.index : 2)]++;
    }
    /* The pairs. */
    for (int b = 0; s == MX_OK && b < n_nodes; b++) {
        const mx_node *bn = &g->nodes[b];
        if (!is_op(bn, "BatchNorm") || bn->n_inputs != 5) continue;
        const bn_params *bp = bn->params;
        uint32_t c = bn->inputs[0].node;
        const mx_node *conv = &g->nodes[c];
        if (bp->axis != 1 || bn->inputs[0].index != 0 || !is_op(conv, "Convolution") || partner[c] != MX_NO_NODE)
            continue;
        const conv_params *cp = conv->params;
        int conv_inputs = cp->no_bias ? 2 : 3;
        /* (Every Convolution layout puts channels on axis 1.) */
        if (conv->n_outputs != 1 || conv->n_inputs != conv_inputs || uses[c * 3] != 1 || uses[b * 3 + 1] ||
            uses[b * 3 + 2])
            continue;
        bool vars = true;
        for (int j = 1; j < conv_inputs; j++) vars &= is_variable_input(g, conv, j);
        for (int j = 1; j < 5; j++) vars &= is_variable_input(g, bn, j);
        if (!vars || names_layer(keep, conv->name) || names_layer(keep, bn->name)) continue;
        mx_graph_bn_fold *f = &folds[n_folds];
        f->weight = g->nodes[conv->inputs[1].node].name;
        f->bias = cp->no_bias ? NULL : g->nodes[conv->inputs[2].node].name;
        f->gamma = g->nodes[bn->inputs[1].node].name;
        f->beta = g->nodes[bn->inputs[2].node].name;
        f->moving_mean = g->nodes[bn->inputs[3].node].name;
        f->moving_var = g->nodes[bn->inputs[4].node].name;
        f->eps = bp->eps;
        f->fix_gamma = bp->fix_gamma;
        f->new_weight = new_name(g, conv->name, "_weight_bnfold", folds, n_folds);
        f->new_bias = f->new_weight ? new_name(g, conv->name, "_bias_bnfold", folds, n_folds) : NULL;
        if (!f->new_weight || !f->new_bias) {
            s = MX_ERR_NOMEM;
            break;
        }
        n_folds++;
        partner[c] = (uint32_t)b;
        partner[b] = c;
        /* Parameters read by nothing else are left out of the new graph. */
        for (int j = 1; j < conv_inputs; j++) uses[conv->inputs[j].node * 3]--;
        for (int j = 1; j < 5; j++) uses[bn->inputs[j].node * 3]--;
    }
    if (s != MX_OK || n_folds == 0) goto done;
    /* A variable is dropped when folds were its only readers: its uses
     * fell to zero above while it had some before. */
    for (int f = 0; f < n_folds; f++) {
        const char *names[6] = {folds[f].weight, folds[f].bias, folds[f].gamma, folds[f].beta, folds[f].moving_mean,
                                folds[f].moving_var};
        for (int k = 0; k < 6; k++) {
            if (!names[k]) continue;
            uint32_t v = mx_graph_find(g, names[k]);
            if (v != MX_NO_NODE && uses[v * 3] == 0 && uses[v * 3 + 1] == 0 && uses[v * 3 + 2] == 0) drop[v] = true;
        }
    }
    s = mx_graph_create(&ng);
    int next_fold = 0;
    for (int i = 0; s == MX_OK && i < n_nodes; i++) {
        const mx_node *n = &g->nodes[i];
        map[i] = MX_NO_NODE;
        if (n->kind == MX_NODE_VARIABLE) {
            if (!drop[i]) s = mx_graph_add_variable(ng, n->name, n->attrs, n->n_attrs, &map[i]);
            continue;
        }
        if (partner[i] != MX_NO_NODE && is_op(n, "BatchNorm")) {
            map[i] = map[partner[i]]; /* its output 0 is the folded convolution's */
            continue;
        }
        mx_entry in[MX_OP_MAX_IO];
        for (int j = 0; j < n->n_inputs; j++) in[j] = (mx_entry){map[n->inputs[j].node], n->inputs[j].index};
        if (partner[i] == MX_NO_NODE) {
            s = graph_copy_op(ng, n, in, n->n_inputs, NULL, &map[i]);
            continue;
        }
        /* A folded convolution: its new weight and bias, then itself. */
        mx_graph_bn_fold *f = &folds[next_fold++];
        uint32_t w = MX_NO_NODE, b = MX_NO_NODE;
        s = mx_graph_add_variable(ng, f->new_weight, NULL, 0, &w);
        if (s == MX_OK) s = mx_graph_add_variable(ng, f->new_bias, NULL, 0, &b);
        in[1] = (mx_entry){w, 0};
        in[2] = (mx_entry){b, 0};
        if (s == MX_OK) s = graph_copy_op(ng, n, in, 3, "False", &map[i]);
    }
    if (s == MX_OK) s = graph_copy_heads(ng, g, map);
done:
    if (s == MX_OK && n_folds > 0) {
        *out = ng;
        *folds_out = folds;
        *n_folds_out = n_folds;
    } else {
        mx_graph_free(ng);
        mx_graph_bn_folds_free(folds, n_folds);
    }
    free(uses);
    free(partner);
    free(drop);
    free(map);
    return s;
}

/* ------------------------------------------------- activation folding */

mx_status mx_graph_fold_activations(mx_graph *g, mx_graph_fold_pair **pairs, int *n_pairs)
{
    if (pairs) *pairs = NULL;
    *n_pairs = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == MX_NODE_BACKWARD)
            return MX_ERROR(MX_ERR_INVALID, "folding: the graph already has a backward pass");
    /* Readers of every node's output 0, and which outputs are heads. */
    int *readers = mx_calloc((size_t)g->n_nodes + 1, sizeof(int));
    bool *head0 = mx_calloc((size_t)g->n_nodes + 1, sizeof(bool));
    mx_graph_fold_pair *found = mx_malloc(sizeof(*found) * (size_t)(g->n_nodes + 1));
    if (!readers || !head0 || !found) {
        free(readers);
        free(head0);
        free(found);
        return MX_ERR_NOMEM;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++)
            if (g->nodes[i].inputs[j].index == 0) readers[g->nodes[i].inputs[j].node]++;
    for (int h = 0; h < g->n_heads; h++)
        if (g->heads[h].index == 0) head0[g->heads[h].node] = true;
    int n = 0;
    for (int a = 0; a < g->n_nodes; a++) {
        mx_node *act = &g->nodes[a];
        mx_fold fold = {MX_FOLD_NONE, 0, 0, 0};
        if (is_op(act, "Activation"))
            fold = (mx_fold){.kind = MX_FOLD_ACTIVATION, .act_type = ((const act_params *)act->params)->act_type};
        else if (is_op(act, "clip"))
            fold = (mx_fold){.kind = MX_FOLD_CLIP, .lo = (float)((const clip_params *)act->params)->a_min,
                             .hi = (float)((const clip_params *)act->params)->a_max};
        if (fold.kind == MX_FOLD_NONE || act->n_inputs != 1 || head0[a]) continue;
        mx_entry in = act->inputs[0];
        mx_node *p = &g->nodes[in.node];
        if (in.index != 0 || p->kind != MX_NODE_OP || !p->op->folds_elementwise || p->fold.kind != MX_FOLD_NONE ||
            readers[in.node] != 1 || head0[in.node])
            continue;
        p->fold = fold;
        p->folded_node = (uint32_t)a;
        /* Readers of the folded layer's output now read the op's: they all
         * come after it (topological order). */
        for (int i = a + 1; i < g->n_nodes; i++)
            for (int j = 0; j < g->nodes[i].n_inputs; j++)
                if (g->nodes[i].inputs[j].node == (uint32_t)a) {
                    g->nodes[i].inputs[j] = (mx_entry){in.node, 0};
                    readers[in.node]++;
                }
        readers[in.node]--; /* the folded layer's own read, gone with it */
        readers[a] = 0;
        found[n++] = (mx_graph_fold_pair){in.node, (uint32_t)a};
    }
    free(readers);
    free(head0);
    *n_pairs = n;
    if (pairs) *pairs = found;
    else free(found);
    return MX_OK;
}

/* ------------------------------------------------ residual sum folding */

/* Readers of each node's outputs (any index), and whether any output of a
 * node is a head. */
static mx_status count_readers(const mx_graph *g, int **readers, bool **head)
{
    *readers = mx_calloc((size_t)g->n_nodes + 1, sizeof(int));
    *head = mx_calloc((size_t)g->n_nodes + 1, sizeof(bool));
    if (!*readers || !*head) {
        free(*readers);
        free(*head);
        return MX_ERR_NOMEM;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) (*readers)[g->nodes[i].inputs[j].node]++;
    for (int h = 0; h < g->n_heads; h++) (*head)[g->heads[h].node] = true;
    return MX_OK;
}

/* Whether input `k` of sum node s is a BatchNorm the sum can fold into:
 * its output 0 read by the sum alone, its mean / var outputs by nobody,
 * none of its outputs a head, nothing folded into it yet, and the sum's
 * other input made before it (the sum then runs where the BatchNorm
 * does: everything it reads exists by then). */
static bool foldable_bn(const mx_graph *g, const mx_node *s, int k, const int *readers, const bool *head)
{
    const mx_entry in = s->inputs[k], other = s->inputs[1 - k];
    const mx_node *bn = &g->nodes[in.node];
    return in.index == 0 && is_op(bn, "BatchNorm") && bn->n_inputs == 5 && bn->fold.kind == MX_FOLD_NONE &&
           readers[in.node] == 1 && !head[in.node] && other.node < in.node;
}

/* The same for a Convolution (its only output). */
static bool foldable_conv(const mx_graph *g, const mx_node *s, int k, const int *readers, const bool *head)
{
    const mx_entry in = s->inputs[k], other = s->inputs[1 - k];
    const mx_node *c = &g->nodes[in.node];
    return in.index == 0 && is_op(c, "Convolution") && c->fold.kind == MX_FOLD_NONE && readers[in.node] == 1 &&
           !head[in.node] && other.node < in.node;
}

/* A two-input sum: ElementWiseSum of two, or (with elemwise) elemwise_add. */
static bool two_input_sum(const mx_node *s, bool elemwise)
{
    const bool esum = is_op(s, "ElementWiseSum") && ((const esum_params *)s->params)->num_args == 2;
    return (esum || (elemwise && is_op(s, "elemwise_add"))) && s->n_inputs == 2 &&
           s->inputs[0].node != s->inputs[1].node;
}

/* The node `into` takes the sum s (its input 1 - k the addend): op, the
 * inputs (addend at `at` among its own, which keep their order), the
 * sum's fold; the sum's readers read `into`'s output 0 instead. */
static mx_status absorb_sum(mx_graph *g, uint32_t into, uint32_t si, int k, const mx_op_def *op, int at)
{
    mx_node *n = &g->nodes[into];
    const mx_node *s = &g->nodes[si];
    mx_entry *inputs = mx_malloc(sizeof(mx_entry) * (size_t)(n->n_inputs + 1));
    if (!inputs) return MX_ERR_NOMEM;
    memcpy(inputs, n->inputs, sizeof(mx_entry) * (size_t)at);
    inputs[at] = s->inputs[1 - k];
    memcpy(inputs + at + 1, n->inputs + at, sizeof(mx_entry) * (size_t)(n->n_inputs - at));
    free(n->inputs);
    n->inputs = inputs;
    n->n_inputs++;
    n->op = op;
    n->fold = s->fold; /* the sum's folded relu, if any */
    n->folded_node = si;
    for (uint32_t i = si + 1; i < (uint32_t)g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++)
            if (g->nodes[i].inputs[j].node == si) g->nodes[i].inputs[j] = (mx_entry){into, 0};
    return MX_OK;
}

/* Every two-input sum (elemwise_add too with `elemwise`) one of whose
 * inputs `foldable` accepts goes into that node (the later of two) as
 * `op`, the addend its input `at`. */
static mx_status fold_sums(mx_graph *g, bool elemwise,
                           bool (*foldable)(const mx_graph *, const mx_node *, int, const int *, const bool *),
                           const mx_op_def *op, int at, mx_graph_fold_pair **pairs, int *n_pairs)
{
    if (pairs) *pairs = NULL;
    *n_pairs = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == MX_NODE_BACKWARD)
            return MX_ERROR(MX_ERR_INVALID, "folding: the graph already has a backward pass");
    int *readers;
    bool *head;
    MX_TRY(count_readers(g, &readers, &head));
    mx_graph_fold_pair *found = mx_malloc(sizeof(*found) * (size_t)(g->n_nodes + 1));
    if (!found) {
        free(readers);
        free(head);
        return MX_ERR_NOMEM;
    }
    mx_status st = MX_OK;
    int n = 0;
    for (int si = 0; si < g->n_nodes && st == MX_OK; si++) {
        const mx_node *s = &g->nodes[si];
        if (!two_input_sum(s, elemwise) || head[si]) continue;
        int k = -1;
        for (int c = 0; c < 2; c++)
            if (foldable(g, s, c, readers, head) && (k < 0 || s->inputs[c].node > s->inputs[k].node)) k = c;
        if (k < 0) continue;
        const uint32_t into = s->inputs[k].node;
        st = absorb_sum(g, into, (uint32_t)si, k, op, at);
        readers[si] = 0; /* left with no reader: it no longer runs */
        if (st == MX_OK) found[n++] = (mx_graph_fold_pair){into, (uint32_t)si};
    }
    free(readers);
    free(head);
    if (st != MX_OK) {
        free(found);
        return st;
    }
    *n_pairs = n;
    if (pairs) *pairs = found;
    else free(found);
    return MX_OK;
}

/* BatchNorm+ElementWiseSum's inputs: data, gamma, beta, addend, then the
 * moving statistics. */
mx_status mx_graph_fold_residual_sums(mx_graph *g, mx_graph_fold_pair **pairs, int *n_pairs)
{
    return fold_sums(g, false, foldable_bn, &mx_op_batch_norm_add, 3, pairs, n_pairs);
}

/* Convolution+elemwise_add's inputs: the addend, then the convolution's. */
mx_status mx_graph_fold_conv_sums(mx_graph *g, mx_graph_fold_pair **pairs, int *n_pairs)
{
    return fold_sums(g, true, foldable_conv, &mx_op_convolution_add, 0, pairs, n_pairs);
}
