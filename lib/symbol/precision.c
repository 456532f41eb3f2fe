/*
 * precision.c - a graph computing in float16 or bfloat16 with float32
 * parameters (fit.dtype, mixed precision), the way MXNet's float16 image
 * symbols are written: a Cast to the compute dtype after every argument a
 * layer computes with (data and weights alike; BatchNorm's gamma and beta,
 * which stay float32 by its type rule, and labels are left alone), and a
 * Cast back to float32 before every loss layer. The variables keep their
 * names and stay float32, so initialisers, optimizers (master weights),
 * stores and checkpoints see the float32 graph's arguments; the Casts'
 * gradients bring each weight's float16 gradient back as float32.
 */
#include "symbol/symbol_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The Cast to `dtype` of variable `var` of out (`old` in the source
 * graph), made once: cache[old]. */
static mx_status cast_of(mx_graph *out, const char *name, uint32_t var, uint32_t old, const char *dtype,
                         uint32_t *cache, uint32_t *id)
{
    if (cache[old] == MX_NO_NODE) {
        const char *keys[] = {"dtype"};
        const char *values[] = {dtype};
        mx_entry in = {var, 0};
        MX_TRY(mx_graph_add_op(out, "Cast", name, keys, values, 1, &in, 1, NULL, 0, &cache[old]));
    }
    *id = cache[old];
    return MX_OK;
}

/* A node name not in g or out: base + suffix, then with a counter. */
static char *fresh_name(const mx_graph *g, const mx_graph *out, const char *base, const char *suffix)
{
    size_t len = strlen(base) + strlen(suffix) + 16;
    char *s = mx_malloc(len);
    for (int k = 0; s; k++) {
        if (k) snprintf(s, len, "%s%s%d", base, suffix, k);
        else snprintf(s, len, "%s%s", base, suffix);
        if (mx_graph_find(g, s) == MX_NO_NODE && mx_graph_find(out, s) == MX_NO_NODE) break;
    }
    return s;
}

mx_status mx_graph_compute_in(const mx_graph *g, mx_dtype dtype, mx_graph **out)
{
    *out = NULL;
    if (dtype != MX_FLOAT16 && dtype != MX_BFLOAT16)
        return MX_ERROR(MX_ERR_INVALID, "mixed precision computes in float16 or bfloat16, not %s", mx_dtype_name(dtype));
    const char *dname = mx_dtype_name(dtype);
    const int n_nodes = g->n_nodes;
    for (int i = 0; i < n_nodes; i++)
        if (g->nodes[i].kind == MX_NODE_BACKWARD) return MX_ERROR(MX_ERR_INVALID, "mixed precision: the graph already has a backward pass");
    bool *aux = graph_aux_mask(g);
    uint32_t *map = mx_malloc(((size_t)n_nodes + 1) * sizeof(uint32_t));
    uint32_t *cast = mx_malloc(((size_t)n_nodes + 1) * sizeof(uint32_t)); /* per variable: its Cast to dtype */
    mx_graph *ng = NULL;
    mx_status s = aux && map && cast ? mx_graph_create(&ng) : MX_ERR_NOMEM;
    for (int i = 0; i < n_nodes + 1 && s == MX_OK; i++) cast[i] = MX_NO_NODE;
    for (int i = 0; i < n_nodes && s == MX_OK; i++) {
        const mx_node *n = &g->nodes[i];
        if (n->kind == MX_NODE_VARIABLE) {
            s = mx_graph_add_variable(ng, n->name, n->attrs, n->n_attrs, &map[i]);
            continue;
        }
        /* What the layer's rule makes of its inputs when its data is in dtype. */
        int in_t[MX_OP_MAX_IO], out_t[MX_OP_MAX_IO];
        for (int j = 0; j < n->n_inputs; j++) in_t[j] = -1;
        for (int k = 0; k < n->n_outputs; k++) out_t[k] = -1;
        in_t[0] = dtype;
        const bool loss = (n->op->flags & MX_OP_LOSS) != 0;
        if (!loss && mx_op_infer_type(n->op, n->params, in_t, n->n_inputs, out_t, n->n_outputs) != MX_OK) {
            mx_error_clear();
            for (int j = 0; j < n->n_inputs; j++) in_t[j] = -1; /* no rule for dtype: inputs as they come */
        }
        mx_entry in[MX_OP_MAX_IO];
        for (int j = 0; j < n->n_inputs && s == MX_OK; j++) {
            const mx_entry src = n->inputs[j];
            const mx_node *sn = &g->nodes[src.node];
            in[j] = (mx_entry){map[src.node], src.index};
            if (loss && j == 0 && sn->kind != MX_NODE_VARIABLE) {
                /* The loss in float32, as MXNet's float16 symbols end. */
                char *name = fresh_name(g, ng, n->name, "_input_float32");
                const char *keys[] = {"dtype"};
                const char *values[] = {"float32"};
                uint32_t id = MX_NO_NODE;
                s = name ? mx_graph_add_op(ng, "Cast", name, keys, values, 1, &in[j], 1, NULL, 0, &id) : MX_ERR_NOMEM;
                free(name);
                in[j] = (mx_entry){id, 0};
            } else if (!loss && sn->kind == MX_NODE_VARIABLE && !aux[src.node] && in_t[j] == (int)dtype) {
                char suffix[32];
                snprintf(suffix, sizeof(suffix), "_%s", dname);
                char *name = cast[src.node] == MX_NO_NODE ? fresh_name(g, ng, sn->name, suffix) : NULL;
                uint32_t id = MX_NO_NODE;
                s = name || cast[src.node] != MX_NO_NODE ? cast_of(ng, name, in[j].node, src.node, dname, cast, &id)
                                                         : MX_ERR_NOMEM;
                free(name);
                in[j] = (mx_entry){id, 0};
            }
        }
        if (s == MX_OK) s = graph_copy_op(ng, n, in, n->n_inputs, NULL, &map[i]);
    }
    if (s == MX_OK) s = graph_copy_heads(ng, g, map);
    free(aux);
    free(map);
    free(cast);
    if (s != MX_OK) {
        mx_graph_free(ng);
        return s;
    }
    *out = ng;
    return MX_OK;
}
