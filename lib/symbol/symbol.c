/* symbol.c - graph construction, listing, shape inference, gradients. */
#include "symbol/symbol_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

static mx_status set_attrs(mx_node *n, const mx_attr *attrs, int count);

static const char *node_name(const void *g, uint32_t id) { return ((const mx_graph *)g)->nodes[id].name; }

/* a + b + c in a new string (names of any length: a fixed buffer would cut
 * a long one and give the node a wrong, maybe clashing, name). NULL when
 * out of memory. */
static char *join3(const char *a, const char *b, const char *c)
{
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *s = mx_malloc(la + lb + lc + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb);
    memcpy(s + la + lb, c, lc + 1);
    return s;
}

/* Whether var is "layer_slot". */
static bool is_joined(const char *var, const char *layer, const char *slot)
{
    size_t n = strlen(layer);
    return !strncmp(var, layer, n) && var[n] == '_' && !strcmp(var + n + 1, slot);
}

mx_status mx_graph_create(mx_graph **out)
{
    *out = mx_calloc(1, sizeof(**out));
    if (!*out) return MX_ERR_NOMEM;
    (*out)->mxnet_version = 10901;
    mx_name_index_init(&(*out)->index, node_name, *out);
    return MX_OK;
}

static void node_clear(mx_node *n)
{
    free(n->name);
    free(n->params);
    for (int i = 0; i < n->n_attrs; i++) {
        free(n->attrs[i].key);
        free(n->attrs[i].value);
    }
    free(n->attrs);
    free(n->inputs);
}

void mx_graph_free(mx_graph *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_nodes; i++) node_clear(&g->nodes[i]);
    free(g->nodes);
    free(g->heads);
    mx_name_index_free(&g->index);
    free(g);
}

mx_status mx_graph_clone(const mx_graph *g, mx_graph **out)
{
    MX_TRY(mx_graph_create(out));
    mx_graph *c = *out;
    c->mxnet_version = g->mxnet_version;
    c->nodes = mx_calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(mx_node));
    c->heads = mx_malloc(sizeof(mx_entry) * (size_t)(g->n_heads ? g->n_heads : 1));
    if (!c->nodes || !c->heads) goto nomem;
    c->cap_nodes = g->n_nodes ? g->n_nodes : 1;
    if (g->n_heads) memcpy(c->heads, g->heads, sizeof(mx_entry) * (size_t)g->n_heads); /* a graph without heads has none */
    c->n_heads = g->n_heads;
    for (int i = 0; i < g->n_nodes; i++) {
        const mx_node *src = &g->nodes[i];
        mx_node *dst = &c->nodes[i];
        *dst = *src;
        dst->name = NULL;
        dst->params = NULL;
        dst->attrs = NULL;
        dst->inputs = NULL;
        dst->n_attrs = 0;
        c->n_nodes = i + 1;
        dst->name = mx_strdup(src->name);
        if (!dst->name) goto nomem;
        if (src->params) {
            size_t size = src->op->params_size ? src->op->params_size : 1;
            if (!(dst->params = mx_malloc(size))) goto nomem;
            memcpy(dst->params, src->params, size);
        }
        if (src->n_inputs) {
            if (!(dst->inputs = mx_malloc(sizeof(mx_entry) * (size_t)src->n_inputs))) goto nomem;
            memcpy(dst->inputs, src->inputs, sizeof(mx_entry) * (size_t)src->n_inputs);
        }
        if (set_attrs(dst, src->attrs, src->n_attrs) != MX_OK) goto nomem;
    }
    if (mx_name_index_reserve(&c->index, (uint32_t)c->n_nodes, (uint32_t)c->n_nodes) != MX_OK) goto nomem;
    return MX_OK;
nomem:
    mx_graph_free(c);
    *out = NULL;
    return MX_ERR_NOMEM;
}

int mx_graph_num_nodes(const mx_graph *g) { return g->n_nodes; }
const mx_node *mx_graph_node(const mx_graph *g, uint32_t id) { return id < (uint32_t)g->n_nodes ? &g->nodes[id] : NULL; }

uint32_t mx_graph_find(const mx_graph *g, const char *name)
{
    return mx_name_index_find(&g->index, name); /* MX_NAME_NONE is MX_NO_NODE */
}

/* A new zeroed node at the end; its pointer is valid until the next add. */
static mx_status push_node(mx_graph *g, const char *name, mx_node **out)
{
    MX_TRY(mx_name_index_reserve(&g->index, (uint32_t)g->n_nodes + 1, (uint32_t)g->n_nodes));
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        mx_node *grown = mx_realloc(g->nodes, (size_t)cap * sizeof(*grown));
        if (!grown) return MX_ERR_NOMEM;
        g->nodes = grown;
        g->cap_nodes = cap;
    }
    mx_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof(*n));
    n->name = mx_strdup(name);
    if (!n->name) return MX_ERR_NOMEM;
    n->forward_node = MX_NO_NODE;
    g->n_nodes++;
    mx_name_index_put(&g->index, (uint32_t)(g->n_nodes - 1));
    *out = n;
    return MX_OK;
}

/* Drops the last node (after a failure while filling it). */
static void pop_node(mx_graph *g)
{
    mx_name_index_drop(&g->index, (uint32_t)(g->n_nodes - 1));
    node_clear(&g->nodes[g->n_nodes - 1]);
    g->n_nodes--;
}

static int attr_cmp(const void *a, const void *b)
{
    return strcmp(((const mx_attr *)a)->key, ((const mx_attr *)b)->key);
}

/* Copies attrs into n, sorted; duplicate keys are an error. */
static mx_status set_attrs(mx_node *n, const mx_attr *attrs, int count)
{
    if (count == 0) return MX_OK;
    n->attrs = mx_calloc((size_t)count, sizeof(*n->attrs));
    if (!n->attrs) return MX_ERR_NOMEM;
    for (int i = 0; i < count; i++) {
        n->attrs[i].key = mx_strdup(attrs[i].key);
        n->attrs[i].value = mx_strdup(attrs[i].value);
        n->n_attrs = i + 1;
        if (!n->attrs[i].key || !n->attrs[i].value) return MX_ERR_NOMEM;
    }
    qsort(n->attrs, (size_t)count, sizeof(*n->attrs), attr_cmp);
    for (int i = 1; i < count; i++)
        if (!strcmp(n->attrs[i].key, n->attrs[i - 1].key))
            return MX_ERROR(MX_ERR_INVALID, "'%s': attribute '%s' given twice", n->name, n->attrs[i].key);
    return MX_OK;
}

mx_status mx_graph_set_attr(mx_graph *g, uint32_t id, const char *key, const char *value)
{
    if (id >= (uint32_t)g->n_nodes) return MX_ERROR(MX_ERR_INVALID, "set_attr: no node %u", id);
    mx_node *n = &g->nodes[id];
    for (int i = 0; i < n->n_attrs; i++)
        if (!strcmp(n->attrs[i].key, key)) {
            char *v = mx_strdup(value);
            if (!v) return MX_ERR_NOMEM;
            free(n->attrs[i].value);
            n->attrs[i].value = v;
            return MX_OK;
        }
    mx_attr *grown = mx_realloc(n->attrs, (size_t)(n->n_attrs + 1) * sizeof(*grown));
    if (!grown) return MX_ERR_NOMEM;
    n->attrs = grown;
    n->attrs[n->n_attrs].key = mx_strdup(key);
    n->attrs[n->n_attrs].value = mx_strdup(value);
    n->n_attrs++;
    if (!n->attrs[n->n_attrs - 1].key || !n->attrs[n->n_attrs - 1].value) return MX_ERR_NOMEM;
    qsort(n->attrs, (size_t)n->n_attrs, sizeof(*n->attrs), attr_cmp);
    return MX_OK;
}

const char *mx_graph_get_attr(const mx_graph *g, uint32_t id, const char *key)
{
    if (id >= (uint32_t)g->n_nodes) return NULL;
    const mx_node *n = &g->nodes[id];
    for (int i = 0; i < n->n_attrs; i++)
        if (!strcmp(n->attrs[i].key, key)) return n->attrs[i].value;
    return NULL;
}

mx_status mx_graph_add_variable(mx_graph *g, const char *name, const mx_attr *attrs, int n_attrs, uint32_t *out_id)
{
    if (!name || !*name) return MX_ERROR(MX_ERR_INVALID, "a variable needs a name");
    if (mx_graph_find(g, name) != MX_NO_NODE) return MX_ERROR(MX_ERR_INVALID, "name '%s' is already used", name);
    mx_node *n;
    MX_TRY(push_node(g, name, &n));
    n->kind = MX_NODE_VARIABLE;
    n->n_outputs = 1;
    mx_status s = set_attrs(n, attrs, n_attrs);
    if (s != MX_OK) {
        pop_node(g);
        return s;
    }
    if (out_id) *out_id = (uint32_t)(g->n_nodes - 1);
    return MX_OK;
}

/* ---------------------------------------------------------------- op info */

int mx_node_input_names(const mx_node *n, const char **names)
{
    if (n->kind == MX_NODE_VARIABLE) return 0;
    return n->op->list_inputs(n->params, names);
}

int mx_node_output_names(const mx_node *n, const char **names)
{
    if (n->kind == MX_NODE_VARIABLE) {
        names[0] = "output";
        return 1;
    }
    return n->op->list_outputs(n->params, names);
}

int mx_node_num_aux(const mx_node *n)
{
    if (n->kind != MX_NODE_OP || !n->op->num_aux) return 0;
    return n->op->num_aux(n->params);
}

int mx_node_num_visible_outputs(const mx_node *n)
{
    if (n->kind != MX_NODE_OP || !n->op->num_visible_outputs) return n->n_outputs;
    return n->op->num_visible_outputs(n->params);
}

/* MXNet gives BatchNorm-style moving statistics an initializer attribute. */
static const char *aux_init_attr(const char *input_name)
{
    if (!strcmp(input_name, "moving_mean")) return "[\"zero\", {}]";
    if (!strcmp(input_name, "moving_var")) return "[\"one\", {}]";
    return NULL;
}

static mx_status check_entry(const mx_graph *g, const char *layer, mx_entry e)
{
    if (e.node >= (uint32_t)g->n_nodes)
        return MX_ERROR(MX_ERR_INVALID, "layer '%s': input refers to node %u, which does not exist yet", layer, e.node);
    if (e.index >= (uint32_t)g->nodes[e.node].n_outputs)
        return MX_ERROR(MX_ERR_INVALID, "layer '%s': input '%s' has no output %u (it has %d)", layer,
                        g->nodes[e.node].name, e.index, g->nodes[e.node].n_outputs);
    return MX_OK;
}

mx_status mx_graph_add_op(mx_graph *g, const char *op_name, const char *name, const char *const *keys,
                          const char *const *values, int n_params, const mx_entry *inputs, int n_inputs,
                          const mx_attr *extra_attrs, int n_extra, uint32_t *out_id)
{
    if (!name || !*name) return MX_ERROR(MX_ERR_INVALID, "an operator node needs a name");
    const mx_op_def *op;
    if (mx_op_lookup(op_name, &op) != MX_OK) return mx_error_prefix(MX_ERR_INVALID, "layer '%s'", name);
    if (mx_graph_find(g, name) != MX_NO_NODE) return MX_ERROR(MX_ERR_INVALID, "layer name '%s' is already used", name);
    for (int i = 0; i < n_inputs; i++) MX_TRY(check_entry(g, name, inputs[i]));

    void *params = mx_calloc(1, op->params_size ? op->params_size : 1);
    if (!params) return MX_ERR_NOMEM;
    if (mx_op_parse_params(op, keys, values, n_params, params) != MX_OK) {
        free(params);
        return mx_error_prefix(MX_ERR_INVALID, "layer '%s'", name);
    }
    const char *in_names[MX_OP_MAX_IO], *out_names[MX_OP_MAX_IO];
    int n_expected = op->list_inputs(params, in_names);
    int n_out = op->list_outputs(params, out_names);
    int n_aux = op->num_aux ? op->num_aux(params) : 0;
    if (n_expected > MX_OP_MAX_IO || n_out > MX_OP_MAX_IO) {
        free(params);
        return MX_ERROR(MX_ERR_UNSUPPORTED, "layer '%s' (%s): more than %d inputs or outputs", name, op->name,
                        MX_OP_MAX_IO);
    }
    if (n_inputs > n_expected) {
        free(params);
        return MX_ERROR(MX_ERR_INVALID, "layer '%s' (%s) takes %d input%s, got %d", name, op->name, n_expected,
                        n_expected == 1 ? "" : "s", n_inputs);
    }

    /* Attributes: the parameters as given, then the extras. Tuples, bools
     * and ints are written in MXNet's str() form ("(5, 5)", "True"): its
     * parser rejects "5,5". Floats, enums and strings stay as written. */
    int n_attrs = n_params + n_extra;
    mx_attr *attrs = mx_calloc((size_t)(n_attrs ? n_attrs : 1), sizeof(*attrs));
    char (*canon)[96] = mx_calloc((size_t)(n_params ? n_params : 1), sizeof(*canon));
    if (!attrs || !canon) {
        free(attrs);
        free(canon);
        free(params);
        return MX_ERR_NOMEM;
    }
    for (int i = 0; i < n_params; i++) {
        const mx_param_desc *d = mx_op_param(op, keys[i]);
        const char *v = values[i];
        if (d && (d->type == MX_PARAM_TUPLE || d->type == MX_PARAM_BOOL || d->type == MX_PARAM_INT))
            v = mx_params_format(d, params, canon[i], sizeof(canon[i]));
        attrs[i] = (mx_attr){(char *)keys[i], (char *)v};
    }
    for (int i = 0; i < n_extra; i++) attrs[n_params + i] = extra_attrs[i];

    /* Missing inputs become variables NAME_INPUT carrying the node's attrs. */
    mx_entry all_inputs[MX_OP_MAX_IO];
    memcpy(all_inputs, inputs, (size_t)n_inputs * sizeof(*inputs));
    mx_status s = MX_OK;
    for (int i = n_inputs; i < n_expected && s == MX_OK; i++) {
        char *vname = join3(name, "_", in_names[i]);
        if (!vname) {
            s = MX_ERR_NOMEM;
            break;
        }
        uint32_t id = mx_graph_find(g, vname);
        if (id != MX_NO_NODE) {
            if (g->nodes[id].kind != MX_NODE_VARIABLE)
                s = MX_ERROR(MX_ERR_INVALID, "layer '%s': implicit input '%s' clashes with a layer of that name", name,
                             vname);
        } else {
            s = mx_graph_add_variable(g, vname, attrs, n_attrs, &id);
            const char *init = i >= n_expected - n_aux ? aux_init_attr(in_names[i]) : NULL;
            if (s == MX_OK && init && !mx_graph_get_attr(g, id, "__init__")) s = mx_graph_set_attr(g, id, "__init__", init);
        }
        free(vname);
        all_inputs[i] = (mx_entry){id, 0};
    }
    mx_node *n = NULL;
    if (s == MX_OK) s = push_node(g, name, &n);
    if (s != MX_OK) {
        free(attrs);
        free(canon);
        free(params);
        return s;
    }
    n->kind = MX_NODE_OP;
    n->op = op;
    n->params = params;
    n->n_outputs = n_out;
    n->n_inputs = n_expected;
    n->inputs = mx_malloc((size_t)(n_expected ? n_expected : 1) * sizeof(mx_entry));
    s = n->inputs ? set_attrs(n, attrs, n_attrs) : MX_ERR_NOMEM;
    free(attrs);
    free(canon);
    if (s != MX_OK) {
        pop_node(g);
        return s;
    }
    memcpy(n->inputs, all_inputs, (size_t)n_expected * sizeof(mx_entry));
    if (out_id) *out_id = (uint32_t)(g->n_nodes - 1);
    return MX_OK;
}

mx_status mx_graph_set_heads(mx_graph *g, const mx_entry *heads, int n)
{
    for (int i = 0; i < n; i++) MX_TRY(check_entry(g, "(output)", heads[i]));
    mx_entry *h = mx_malloc((size_t)(n ? n : 1) * sizeof(*h));
    if (!h) return MX_ERR_NOMEM;
    memcpy(h, heads, (size_t)n * sizeof(*h));
    free(g->heads);
    g->heads = h;
    g->n_heads = n;
    return MX_OK;
}

int mx_graph_num_heads(const mx_graph *g) { return g->n_heads; }
mx_entry mx_graph_head(const mx_graph *g, int i) { return g->heads[i]; }

/* ---------------------------------------------------------------- lists */

/* is_aux[v] for every node: a variable fed into some op's aux slot. */
bool *graph_aux_mask(const mx_graph *g)
{
    bool *aux = mx_calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(bool));
    if (!aux) return NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        const mx_node *n = &g->nodes[i];
        int n_aux = mx_node_num_aux(n);
        for (int j = n->n_inputs - n_aux; j < n->n_inputs; j++) aux[n->inputs[j].node] = true;
    }
    return aux;
}

static int list_vars(const mx_graph *g, uint32_t *ids, bool want_aux)
{
    bool *aux = graph_aux_mask(g);
    if (!aux) return -1;
    int count = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == MX_NODE_VARIABLE && aux[i] == want_aux) ids[count++] = (uint32_t)i;
    free(aux);
    return count;
}

int mx_graph_list_arguments(const mx_graph *g, uint32_t *ids) { return list_vars(g, ids, false); }
int mx_graph_list_aux(const mx_graph *g, uint32_t *ids) { return list_vars(g, ids, true); }

const char *mx_graph_output_name(const mx_graph *g, int i, char *buf, size_t size)
{
    mx_entry e = g->heads[i];
    const mx_node *n = &g->nodes[e.node];
    if (n->kind == MX_NODE_VARIABLE) {
        snprintf(buf, size, "%s", n->name);
        return buf;
    }
    const char *names[MX_OP_MAX_IO];
    mx_node_output_names(n, names);
    snprintf(buf, size, "%s_%s", n->name, names[e.index]);
    return buf;
}

/* ---------------------------------------------------------------- shapes */

void mx_graph_shapes_free(mx_graph_shapes *s)
{
    free(s->dtypes);
    free(s->shapes);
    free(s->entry_offset);
    memset(s, 0, sizeof(*s));
}

/* "(10, 0, 5, 5)" -> shape; dims of 0 make it unknown (ndim 0). */
static bool parse_shape_attr(const char *text, mx_shape *out)
{
    mx_shape s = {0};
    const char *p = text;
    while (*p == ' ' || *p == '(' || *p == '[') p++;
    while (*p && *p != ')' && *p != ']') {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || s.ndim == MX_MAX_NDIM) return false;
        s.dims[s.ndim++] = v;
        p = end;
        while (*p == ' ' || *p == ',') p++;
    }
    for (int i = 0; i < s.ndim; i++)
        if (s.dims[i] <= 0) s.ndim = 0;
    *out = s;
    return true;
}

static const char *shape_text(const mx_shape *s, char *buf, size_t size) { return mx_shape_str(s, buf, size); }

mx_status mx_graph_infer_shapes(const mx_graph *g, const char *const *names, const mx_shape *given, int n_given,
                                mx_graph_shapes *out)
{
    memset(out, 0, sizeof(*out));
    out->entry_offset = mx_calloc((size_t)g->n_nodes + 1, sizeof(uint32_t));
    if (!out->entry_offset) return MX_ERR_NOMEM;
    for (int i = 0; i < g->n_nodes; i++) out->entry_offset[i + 1] = out->entry_offset[i] + (uint32_t)g->nodes[i].n_outputs;
    out->n_entries = (int)out->entry_offset[g->n_nodes];
    out->shapes = mx_calloc((size_t)(out->n_entries ? out->n_entries : 1), sizeof(mx_shape));
    if (!out->shapes) {
        mx_graph_shapes_free(out);
        return MX_ERR_NOMEM;
    }
    mx_status s = MX_OK;
    /* Variables: __shape__ attributes, then the caller's shapes. */
    for (int i = 0; i < g->n_nodes; i++) {
        const char *attr = g->nodes[i].kind == MX_NODE_VARIABLE ? mx_graph_get_attr(g, (uint32_t)i, "__shape__") : NULL;
        if (attr && !parse_shape_attr(attr, &out->shapes[out->entry_offset[i]]))
            s = MX_ERROR(MX_ERR_INVALID, "variable '%s': bad __shape__ '%s'", g->nodes[i].name, attr);
    }
    for (int k = 0; k < n_given && s == MX_OK; k++) {
        uint32_t id = mx_graph_find(g, names[k]);
        if (id == MX_NO_NODE || g->nodes[id].kind != MX_NODE_VARIABLE) {
            const char *cands[1024];
            int nc = 0;
            for (int i = 0; i < g->n_nodes && nc < 1024; i++)
                if (g->nodes[i].kind == MX_NODE_VARIABLE) cands[nc++] = g->nodes[i].name;
            const char *near = mx_suggest(names[k], cands, nc);
            s = near ? MX_ERROR(MX_ERR_INVALID, "no input named '%s' (did you mean '%s'?)", names[k], near)
                     : MX_ERROR(MX_ERR_INVALID, "no input named '%s'", names[k]);
            break;
        }
        out->shapes[out->entry_offset[id]] = given[k];
    }
    for (int i = 0; i < g->n_nodes && s == MX_OK; i++) {
        const mx_node *n = &g->nodes[i];
        mx_shape *outs = &out->shapes[out->entry_offset[i]];
        if (n->kind == MX_NODE_VARIABLE) {
            /* A head gradient has its head's shape. */
            if (n->forward_node != MX_NO_NODE && outs[0].ndim == 0)
                outs[0] = *mx_graph_entry_shape(out, (mx_entry){n->forward_node, n->forward_index});
            continue;
        }
        if (n->kind == MX_NODE_BACKWARD) {
            /* Gradients have the shapes of the forward inputs. */
            const mx_node *f = &g->nodes[n->forward_node];
            for (int j = 0; j < n->n_outputs; j++) outs[j] = *mx_graph_entry_shape(out, f->inputs[j]);
            continue;
        }
        mx_shape in[MX_OP_MAX_IO], before[MX_OP_MAX_IO];
        for (int j = 0; j < n->n_inputs; j++) before[j] = in[j] = *mx_graph_entry_shape(out, n->inputs[j]);
        s = n->op->infer_shape(n->params, in, n->n_inputs, outs, n->n_outputs);
        if (s != MX_OK) {
            /* Blame an input variable nobody gave a shape, if there is one
             * that is not this layer's own (inferable) parameter. */
            const char *names_in[MX_OP_MAX_IO];
            mx_node_input_names(n, names_in);
            bool blamed = false;
            for (int j = 0; j < n->n_inputs && !blamed; j++) {
                const mx_node *src = &g->nodes[n->inputs[j].node];
                if (before[j].ndim == 0 && src->kind == MX_NODE_VARIABLE && !is_joined(src->name, n->name, names_in[j])) {
                    s = MX_ERROR(MX_ERR_INVALID, "layer '%s' (%s): the shape of input '%s' (variable '%s') is unknown",
                                 n->name, n->op->name, names_in[j], src->name);
                    blamed = true;
                }
            }
            if (!blamed) mx_error_prefix(s, "layer '%s' (%s)", n->name, n->op->name);
            break;
        }
        for (int j = 0; j < n->n_inputs; j++) {
            mx_shape *slot = &out->shapes[out->entry_offset[n->inputs[j].node] + n->inputs[j].index];
            char a[160], b[160];
            if (before[j].ndim == 0) *slot = in[j];
            else if (!mx_shape_equal(&before[j], &in[j])) {
                s = MX_ERROR(MX_ERR_INVALID, "layer '%s' (%s): input %d has shape %s but the layer needs %s", n->name,
                             n->op->name, j, shape_text(&before[j], a, sizeof(a)), shape_text(&in[j], b, sizeof(b)));
                break;
            }
        }
    }
    /* Back from readers: a layer that left an input unknown (a Cast of a
     * weight) learns it from its output, which a later layer gave. */
    for (int i = g->n_nodes - 1; i >= 0 && s == MX_OK; i--) {
        const mx_node *n = &g->nodes[i];
        if (n->kind != MX_NODE_OP) continue;
        bool unknown = false;
        mx_shape in[MX_OP_MAX_IO];
        for (int j = 0; j < n->n_inputs; j++) {
            in[j] = *mx_graph_entry_shape(out, n->inputs[j]);
            unknown |= in[j].ndim == 0;
        }
        if (!unknown) continue;
        s = n->op->infer_shape(n->params, in, n->n_inputs, &out->shapes[out->entry_offset[i]], n->n_outputs);
        if (s != MX_OK) mx_error_prefix(s, "layer '%s' (%s)", n->name, n->op->name);
        for (int j = 0; j < n->n_inputs && s == MX_OK; j++) {
            mx_shape *slot = &out->shapes[out->entry_offset[n->inputs[j].node] + n->inputs[j].index];
            if (slot->ndim == 0) *slot = in[j];
        }
    }
    for (int i = 0; i < g->n_nodes && s == MX_OK; i++)
        for (int k = 0; k < g->nodes[i].n_outputs; k++)
            if (out->shapes[out->entry_offset[i] + (uint32_t)k].ndim == 0 && g->nodes[i].kind == MX_NODE_VARIABLE) {
                s = MX_ERROR(MX_ERR_INVALID, "cannot infer the shape of variable '%s': give it with its shape",
                             g->nodes[i].name);
                break;
            }
    if (s != MX_OK) mx_graph_shapes_free(out);
    return s;
}

mx_status mx_graph_infer_types(const mx_graph *g, const char *const *names, const mx_dtype *given, int n_given,
                               mx_graph_shapes *s)
{
    free(s->dtypes);
    s->dtypes = mx_malloc((size_t)(s->n_entries ? s->n_entries : 1));
    if (!s->dtypes) return MX_ERR_NOMEM;
    memset(s->dtypes, -1, (size_t)s->n_entries);
    int8_t *dt = s->dtypes;
    mx_status st = MX_OK;
    for (int i = 0; i < g->n_nodes && st == MX_OK; i++) {
        const char *attr = g->nodes[i].kind == MX_NODE_VARIABLE ? mx_graph_get_attr(g, (uint32_t)i, "__dtype__") : NULL;
        if (!attr) continue;
        char *end;
        long flag = strtol(attr, &end, 10);
        if (end == attr || *end || !mx_dtype_valid((int)flag))
            st = MX_ERROR(MX_ERR_INVALID, "variable '%s': __dtype__ '%s' is not a supported dtype flag", g->nodes[i].name,
                          attr);
        else dt[s->entry_offset[i]] = (int8_t)flag;
    }
    for (int k = 0; k < n_given && st == MX_OK; k++) {
        uint32_t id = mx_graph_find(g, names[k]);
        if (id == MX_NO_NODE || g->nodes[id].kind != MX_NODE_VARIABLE)
            st = MX_ERROR(MX_ERR_INVALID, "no input named '%s'", names[k]);
        else if (!mx_dtype_valid((int)given[k]))
            st = MX_ERROR(MX_ERR_INVALID, "input '%s': unknown dtype %d", names[k], (int)given[k]);
        else dt[s->entry_offset[id]] = (int8_t)given[k];
    }
    for (int i = 0; i < g->n_nodes && st == MX_OK; i++) {
        const mx_node *n = &g->nodes[i];
        int8_t *outs = &dt[s->entry_offset[i]];
        if (n->kind == MX_NODE_VARIABLE) {
            if (n->forward_node != MX_NO_NODE && outs[0] < 0)
                outs[0] = dt[s->entry_offset[n->forward_node] + n->forward_index];
            continue;
        }
        if (n->kind == MX_NODE_BACKWARD) {
            const mx_node *f = &g->nodes[n->forward_node];
            for (int j = 0; j < n->n_outputs; j++) outs[j] = dt[s->entry_offset[f->inputs[j].node] + f->inputs[j].index];
            continue;
        }
        int in[MX_OP_MAX_IO], out[MX_OP_MAX_IO];
        for (int j = 0; j < n->n_inputs; j++) in[j] = dt[s->entry_offset[n->inputs[j].node] + n->inputs[j].index];
        for (int k = 0; k < n->n_outputs; k++) out[k] = outs[k];
        int before[MX_OP_MAX_IO];
        memcpy(before, in, sizeof(int) * (size_t)n->n_inputs);
        st = mx_op_infer_type(n->op, n->params, in, n->n_inputs, out, n->n_outputs);
        if (st != MX_OK) {
            mx_error_prefix(st, "layer '%s'", n->name);
            break;
        }
        for (int j = 0; j < n->n_inputs && st == MX_OK; j++) {
            int8_t *slot = &dt[s->entry_offset[n->inputs[j].node] + n->inputs[j].index];
            if (before[j] < 0) *slot = (int8_t)in[j];
            else if (before[j] != in[j]) {
                const char *names_in[MX_OP_MAX_IO];
                mx_node_input_names(n, names_in);
                st = MX_ERROR(MX_ERR_INVALID, "layer '%s' (%s): input '%s' is %s but the layer needs %s", n->name,
                              n->op->name, names_in[j], mx_dtype_name((mx_dtype)before[j]),
                              mx_dtype_name((mx_dtype)in[j]));
            }
        }
        for (int k = 0; k < n->n_outputs; k++) outs[k] = (int8_t)(out[k] < 0 ? MX_FLOAT32 : out[k]);
    }
    for (int e = 0; e < s->n_entries && st == MX_OK; e++)
        if (dt[e] < 0) dt[e] = MX_FLOAT32; /* a variable nobody reads */
    if (st != MX_OK) {
        free(s->dtypes);
        s->dtypes = NULL;
    }
    return st;
}

/* ---------------------------------------------------------------- gradient */

typedef struct grad_list {
    mx_entry *items;
    int count, cap;
} grad_list;

static mx_status grad_add(grad_list *l, mx_entry e)
{
    if (l->count == l->cap) {
        int cap = l->cap ? l->cap * 2 : 2;
        mx_entry *grown = mx_realloc(l->items, (size_t)cap * sizeof(*grown));
        if (!grown) return MX_ERR_NOMEM;
        l->items = grown;
        l->cap = cap;
    }
    l->items[l->count++] = e;
    return MX_OK;
}

/* One entry for the sum of the contributions: none, the single one, or an
 * ElementWiseSum node over all of them. */
static mx_status grad_total(mx_graph *g, const char *base, uint32_t index, grad_list *l, mx_entry *out)
{
    if (l->count == 0) {
        *out = (mx_entry){MX_NO_NODE, 0};
        return MX_OK;
    }
    if (l->count == 1) {
        *out = l->items[0];
        return MX_OK;
    }
    if (l->count > MX_OP_MAX_IO) return MX_ERROR(MX_ERR_UNSUPPORTED, "'%s' feeds more than %d layers", base, MX_OP_MAX_IO);
    char suffix[16], count[16];
    snprintf(suffix, sizeof(suffix), "_%u", index);
    snprintf(count, sizeof(count), "%d", l->count);
    char *name = join3("_grad_sum_", base, suffix);
    if (!name) return MX_ERR_NOMEM;
    const char *k[] = {"num_args"}, *v[] = {count};
    uint32_t id;
    mx_status s = mx_graph_add_op(g, "ElementWiseSum", name, k, v, 1, l->items, l->count, NULL, 0, &id);
    free(name);
    MX_TRY(s);
    *out = (mx_entry){id, 0};
    return MX_OK;
}

bool mx_node_backward_reads_input(const mx_node *f, int j)
{
    uint64_t mask = f->op->backward_in_mask;
    return ((f->op->backward_deps & MX_BWD_IN_DATA) && (!mask || (j < 64 && (mask >> j) & 1))) ||
           j >= f->n_inputs - mx_node_num_aux(f);
}

bool mx_node_backward_reads_output(const mx_node *f, int k)
{
    return mx_op_backward_reads_output(f->op, k) ||
           (k == 0 && f->fold.kind != MX_FOLD_NONE &&
            !(f->op->fold_mask_from_inputs && mx_fold_derivative_is_mask(&f->fold)));
}

/* Copies made for the backward nodes that read them are kept for the later
 * backward readers of the same entries (cached); copies made only as
 * inputs of other copies (a chain through ResNet's identity shortcuts)
 * serve that one request (temp) and are made again when needed, so that
 * a chain does not hold a whole stage of recomputed tensors alive; unless
 * keep_all (segments bounded by kept checkpoints, where a copy made again
 * could be a convolution made again). */
typedef struct mirror_state {
    const bool *mirror;
    bool keep_all;
    uint32_t *cached, *temp; /* per forward node: its copy, MX_NO_NODE: none */
    uint32_t *stack, *touched; /* n_fwd slots each: a DAG puts a node on the stack at most once */
} mirror_state;

static uint32_t copy_of(const mirror_state *ms, uint32_t node)
{
    return ms->cached[node] != MX_NO_NODE ? ms->cached[node] : ms->temp[node];
}


/* A node made from forward node `id` (its backward, or a recomputation
 * copy): named PREFIX + its name, with its op and a copy of its params, and
 * room for n_inputs inputs (filled by the caller); *out is valid until the
 * next node is added. */
static mx_status push_derived(mx_graph *g, const char *prefix, uint32_t id, mx_node_kind kind, int n_inputs,
                              int n_outputs, mx_node **out)
{
    char *name = join3(prefix, g->nodes[id].name, "");
    mx_status s = name ? push_node(g, name, out) : MX_ERR_NOMEM;
    free(name);
    if (s != MX_OK) return s;
    mx_node *m = *out;
    const mx_node *f = &g->nodes[id]; /* after push_node, which may move nodes */
    m->kind = kind;
    m->op = f->op;
    m->forward_node = id;
    m->n_inputs = n_inputs;
    m->n_outputs = n_outputs;
    m->params = mx_malloc(f->op->params_size ? f->op->params_size : 1);
    m->inputs = mx_malloc(sizeof(mx_entry) * (size_t)(n_inputs ? n_inputs : 1));
    if (!m->params || !m->inputs) {
        pop_node(g);
        return MX_ERR_NOMEM;
    }
    memcpy(m->params, f->params, f->op->params_size);
    return MX_OK;
}
mx_status mx_graph_append_backward_copy(mx_graph *g, uint32_t bid, uint32_t *out)
{
    if (bid >= (uint32_t)g->n_nodes || g->nodes[bid].kind != MX_NODE_BACKWARD)
        return MX_ERROR(MX_ERR_INVALID, "backward copy: node %u is not a backward node", bid);
    const uint32_t fid = g->nodes[bid].forward_node;
    mx_node *m;
    MX_TRY(push_derived(g, "_backward_weights_", fid, MX_NODE_BACKWARD, g->nodes[bid].n_inputs,
                        g->nodes[bid].n_outputs, &m));
    memcpy(m->inputs, g->nodes[bid].inputs, sizeof(mx_entry) * (size_t)m->n_inputs);
    *out = (uint32_t)(g->n_nodes - 1);
    return MX_OK;
}

/* The recomputation copy of forward node `root` (made first for the
 * mirrored nodes it reads, so that a chain recomputes from the nearest
 * kept tensor), appended now so that it runs just before the backward node
 * about to be appended. */
static mx_status mirror_node(mx_graph *g, mirror_state *ms, uint32_t root)
{
    int top = 0, n_touched = 0;
    mx_status s = MX_OK;
    ms->stack[top++] = root;
    while (top > 0 && s == MX_OK) {
        uint32_t t = ms->stack[top - 1];
        if (copy_of(ms, t) != MX_NO_NODE) {
            top--;
            continue;
        }
        bool ready = true;
        for (int j = 0; j < g->nodes[t].n_inputs && ready; j++) {
            uint32_t u = g->nodes[t].inputs[j].node;
            if (ms->mirror[u] && copy_of(ms, u) == MX_NO_NODE) {
                ms->stack[top++] = u;
                ready = false;
            }
        }
        if (!ready) continue;
        mx_node *m;
        s = push_derived(g, "_mirror_", t, MX_NODE_OP, g->nodes[t].n_inputs, g->nodes[t].n_outputs, &m);
        if (s != MX_OK) break;
        const mx_node *f = &g->nodes[t];
        m->fold = f->fold; /* recomputes what the node computes */
        m->folded_node = f->folded_node;
        if (set_attrs(m, f->attrs, f->n_attrs) != MX_OK) {
            pop_node(g);
            s = MX_ERR_NOMEM;
            break;
        }
        for (int j = 0; j < f->n_inputs; j++) {
            mx_entry e = f->inputs[j];
            m->inputs[j] = ms->mirror[e.node] ? (mx_entry){copy_of(ms, e.node), e.index} : e;
        }
        if (t == root || ms->keep_all) {
            ms->cached[t] = (uint32_t)(g->n_nodes - 1);
        } else {
            ms->temp[t] = (uint32_t)(g->n_nodes - 1);
            ms->touched[n_touched++] = t;
        }
        top--;
    }
    for (int k = 0; k < n_touched; k++) ms->temp[ms->touched[k]] = MX_NO_NODE;
    return s;
}

mx_status mx_graph_gradient(mx_graph *g, const uint32_t *wrt, int n_wrt, mx_entry *grads)
{
    return mx_graph_gradient_mirror(g, wrt, n_wrt, NULL, false, grads);
}

mx_status mx_graph_gradient_mirror(mx_graph *g, const uint32_t *wrt, int n_wrt, const bool *mirror, bool keep_copies,
                                   mx_entry *grads)
{
    int n_fwd = g->n_nodes;
    for (int i = 0; i < n_fwd; i++)
        if (g->nodes[i].kind == MX_NODE_BACKWARD) return MX_ERROR(MX_ERR_INVALID, "the graph already has a backward pass");
    bool *from_wrt = mx_calloc((size_t)n_fwd + 1, sizeof(bool));
    bool *to_head = mx_calloc((size_t)n_fwd + 1, sizeof(bool));
    uint32_t *offset = mx_calloc((size_t)n_fwd + 1, sizeof(uint32_t));
    grad_list *lists = NULL;
    mirror_state ms = {.mirror = mirror, .keep_all = keep_copies};
    uint32_t *ms_buf = mirror ? mx_malloc(4 * sizeof(uint32_t) * ((size_t)n_fwd + 1)) : NULL;
    mx_status s = (from_wrt && to_head && offset && (!mirror || ms_buf)) ? MX_OK : MX_ERR_NOMEM;
    if (ms_buf) {
        ms.cached = ms_buf;
        ms.temp = ms.cached + n_fwd + 1;
        ms.stack = ms.temp + n_fwd + 1;
        ms.touched = ms.stack + n_fwd + 1;
        for (int i = 0; i < n_fwd; i++) ms.cached[i] = ms.temp[i] = MX_NO_NODE;
    }
    for (int i = 0; i < n_fwd && s == MX_OK; i++) offset[i + 1] = offset[i] + (uint32_t)g->nodes[i].n_outputs;
    if (s == MX_OK) {
        lists = mx_calloc((size_t)offset[n_fwd] + 1, sizeof(grad_list));
        if (!lists) s = MX_ERR_NOMEM;
    }
    /* Nodes on a path from a wrt variable to a head. */
    for (int i = 0; i < n_wrt && s == MX_OK; i++) {
        if (wrt[i] >= (uint32_t)n_fwd || g->nodes[wrt[i]].kind != MX_NODE_VARIABLE)
            s = MX_ERROR(MX_ERR_INVALID, "gradient: node %u is not a variable", wrt[i]);
        else from_wrt[wrt[i]] = true;
    }
    for (int i = 0; i < n_fwd && s == MX_OK; i++)
        for (int j = 0; j < g->nodes[i].n_inputs && !from_wrt[i]; j++)
            if (from_wrt[g->nodes[i].inputs[j].node]) from_wrt[i] = true;
    for (int h = 0; h < g->n_heads && s == MX_OK; h++) to_head[g->heads[h].node] = true;
    for (int i = n_fwd - 1; i >= 0 && s == MX_OK; i--)
        if (to_head[i])
            for (int j = 0; j < g->nodes[i].n_inputs; j++) to_head[g->nodes[i].inputs[j].node] = true;

    /* Seeds: head gradients (loss layers make their own). */
    for (int h = 0; h < g->n_heads && s == MX_OK; h++) {
        mx_entry e = g->heads[h];
        const mx_node *n = &g->nodes[e.node];
        if (n->kind == MX_NODE_OP && (n->op->flags & MX_OP_LOSS)) continue;
        const char *outs[MX_OP_MAX_IO];
        if (n->kind != MX_NODE_VARIABLE) mx_node_output_names(n, outs);
        char *out_name = n->kind == MX_NODE_VARIABLE ? join3(n->name, "", "") : join3(n->name, "_", outs[e.index]);
        char *var = out_name ? join3(out_name, "_head_grad", "") : NULL;
        uint32_t id;
        s = var ? mx_graph_add_variable(g, var, NULL, 0, &id) : MX_ERR_NOMEM;
        free(out_name);
        free(var);
        if (s == MX_OK) {
            g->nodes[id].forward_node = e.node;
            g->nodes[id].forward_index = e.index;
            s = grad_add(&lists[offset[e.node] + e.index], (mx_entry){id, 0});
        }
    }

    for (int i = n_fwd - 1; i >= 0 && s == MX_OK; i--) {
        if (g->nodes[i].kind != MX_NODE_OP || !from_wrt[i] || !to_head[i]) continue;
        int n_out = g->nodes[i].n_outputs, n_in = g->nodes[i].n_inputs;
        int n_aux = mx_node_num_aux(&g->nodes[i]);
        mx_entry ins[3 * MX_OP_MAX_IO];
        for (int k = 0; k < n_out && s == MX_OK; k++)
            s = grad_total(g, g->nodes[i].name, (uint32_t)k, &lists[offset[i] + (uint32_t)k], &ins[k]);
        if (s != MX_OK) break;
        for (int j = 0; j < n_in; j++) ins[n_out + j] = g->nodes[i].inputs[j];
        for (int k = 0; k < n_out; k++) ins[n_out + n_in + k] = (mx_entry){(uint32_t)i, (uint32_t)k};
        /* What this backward node reads of mirrored nodes it reads from
         * their copies (made now, unless an earlier reader made them). */
        for (int j = 0; j < n_in + n_out && mirror && s == MX_OK; j++) {
            mx_entry *e = &ins[n_out + j];
            bool read = j < n_in ? mx_node_backward_reads_input(&g->nodes[i], j) : mx_node_backward_reads_output(&g->nodes[i], j - n_in);
            if (!read || !mirror[e->node]) continue;
            s = mirror_node(g, &ms, e->node);
            e->node = ms.cached[e->node];
        }
        if (s != MX_OK) break;
        mx_node *b;
        s = push_derived(g, "_backward_", (uint32_t)i, MX_NODE_BACKWARD, 2 * n_out + n_in, n_in - n_aux, &b);
        if (s != MX_OK) break;
        memcpy(b->inputs, ins, sizeof(mx_entry) * (size_t)b->n_inputs);
        uint32_t bid = (uint32_t)(g->n_nodes - 1);
        for (int j = 0; j < n_in - n_aux && s == MX_OK; j++) {
            mx_entry src = g->nodes[i].inputs[j];
            if (from_wrt[src.node]) s = grad_add(&lists[offset[src.node] + src.index], (mx_entry){bid, (uint32_t)j});
        }
    }
    for (int i = 0; i < n_wrt && s == MX_OK; i++)
        s = grad_total(g, g->nodes[wrt[i]].name, 0, &lists[offset[wrt[i]]], &grads[i]);
    if (lists)
        for (uint32_t k = 0; k < offset[n_fwd]; k++) free(lists[k].items);
    free(lists);
    free(offset);
    free(from_wrt);
    free(to_head);
    free(ms_buf);
    return s;
}
