/*
 * net.c - compiles [net] and the [layer NAME] sections into a symbol graph:
 * resolves CXXNet aliases, checks every key against the operator's
 * parameter table (errors at the key's line), resolves inputs to earlier
 * layers or declared data inputs (never a silent new variable), creates
 * labels, lr/wd multipliers and per-variable initializers, sets the heads
 * and checks that every layer leads to an output.
 */
#include "config/config_internal.h"
#include "initializer/initializer.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------ aliases */

typedef struct op_alias {
    const char *alias;
    const char *op;
    const char *key, *value; /* a preset parameter, or NULL */
} op_alias;

/* CXXNet's layer type names. `softmax` is not here: it is MXNet's plain
 * softmax function (a loss layer is SoftmaxOutput). */
static const op_alias aliases[] = {
    {"conv", "Convolution", NULL, NULL},
    {"fullc", "FullyConnected", NULL, NULL},
    {"relu", "Activation", "act_type", "relu"},
    {"sigmoid", "Activation", "act_type", "sigmoid"},
    {"tanh", "Activation", "act_type", "tanh"},
    {"softplus", "Activation", "act_type", "softrelu"},
    {"max_pooling", "Pooling", "pool_type", "max"},
    {"avg_pooling", "Pooling", "pool_type", "avg"},
    {"sum_pooling", "Pooling", "pool_type", "sum"},
    {"flatten", "Flatten", NULL, NULL},
    {"dropout", "Dropout", NULL, NULL},
    {"batch_norm", "BatchNorm", NULL, NULL},
    {"lrn", "LRN", NULL, NULL},
    {"concat", "Concat", NULL, NULL},
    {"ch_concat", "Concat", "dim", "1"},
    {"split", "SliceChannel", NULL, NULL},
    {"prelu", "LeakyReLU", "act_type", "prelu"},
    {"elu", "LeakyReLU", "act_type", "elu"},
    {"l2_loss", "LinearRegressionOutput", NULL, NULL},
    {"multi_logistic", "LogisticRegressionOutput", NULL, NULL},
};
#define N_ALIASES ((int)(sizeof(aliases) / sizeof(aliases[0])))

/* Keys of a layer section that are not operator parameters. */
static const char *const layer_keys[] = {"op", "input", "label", "lr_mult", "wd_mult"};
#define N_LAYER_KEYS ((int)(sizeof(layer_keys) / sizeof(layer_keys[0])))

/* Input slots that hold learned parameters or labels, not data. */
static bool param_slot(const char *name)
{
    static const char *const names[] = {"weight", "bias", "gamma", "beta", "moving_mean", "moving_var", "label"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(name, names[i])) return true;
    return false;
}

static bool reserved_key(const char *key)
{
    for (int i = 0; i < N_LAYER_KEYS; i++)
        if (!strcmp(key, layer_keys[i])) return true;
    return false;
}

/* ------------------------------------------------------------ state */

typedef struct net_state {
    mx_config *cfg;
    mx_config_priv *p;
    mx_graph *g;
    const cfg_section **layers; /* in file order */
    int n_layers;
    uint32_t input_node[MX_CONFIG_MAX_INPUTS]; /* MX_NO_NODE until first used */
    int input_line;                            /* [net] inputs line (or the section's) */
    uint32_t *label_nodes;                     /* label variables made so far */
    int n_labels;
    int *refs;       /* layer indices each layer reads, flattened */
    int *ref_start;  /* n_layers + 1 */
    int n_refs, cap_refs;
    mx_name_index layer_names; /* over layers[]: inputs are looked up per layer */
} net_state;

static const char *layer_name_of(const void *st, uint32_t i) { return ((const net_state *)st)->layers[i]->name; }

static int layer_index(const net_state *st, const char *name)
{
    uint32_t i = mx_name_index_find(&st->layer_names, name);
    return i == MX_NAME_NONE ? -1 : (int)i;
}

static int input_index(const net_state *st, const char *name)
{
    for (int i = 0; i < st->cfg->n_inputs; i++)
        if (!strcmp(st->cfg->inputs[i], name)) return i;
    return -1;
}

static bool name_char(int c) { return isalnum(c) || c == '_' || c == '-' || c == '.' || c == '/'; }

/* Splits a comma list into trimmed items (in buf); returns the count or -1
 * on an empty item. */
static int split_list(const char *text, char *buf, size_t size, char **items, int cap)
{
    cfg_trim_copy(text, strlen(text), buf, size);
    int n = 0;
    if (!buf[0]) return 0;
    char *p = buf;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        char *a = p;
        while (isspace((unsigned char)*a)) a++;
        char *e = a + strlen(a);
        while (e > a && isspace((unsigned char)e[-1])) *--e = '\0';
        if (!*a || n == cap) return -1;
        items[n++] = a;
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

/* ------------------------------------------------------------ [net] */

static mx_status compile_net_section(net_state *st, const cfg_section *s)
{
    mx_config *cfg = st->cfg;
    mx_config_priv *p = st->p;
    static const char *const net_keys[] = {"inputs", "outputs", "name"};
    for (int i = 0; s && i < s->n_entries; i++) {
        const cfg_entry *e = &s->entries[i];
        bool ok = false;
        for (int k = 0; k < 3; k++)
            if (!strcmp(e->key, net_keys[k])) ok = true;
        if (ok) continue;
        const char *near = mx_suggest(e->key, net_keys, 3);
        if (near) return cfg_error(p, e->line, "net", e->key, "unknown key (did you mean '%s'?)", near);
        return cfg_error(p, e->line, "net", e->key, "unknown key (keys: inputs, outputs, name)");
    }
    const cfg_entry *name = cfg_find(s, "name");
    if (name) {
        char buf[MX_CONFIG_MAX_LINE + 1];
        cfg_trim_copy(name->value, strlen(name->value), buf, sizeof(buf));
        if (!buf[0]) return cfg_error(p, name->line, "net", "name", "empty name");
        if (!(cfg->name = cfg_keep(p, buf))) return mx_last_status();
    }
    const cfg_entry *in = cfg_find(s, "inputs");
    st->input_line = in ? in->line : s ? s->line : -1;
    if (!in) {
        cfg->inputs[0] = "data";
        cfg->n_inputs = 1;
        return MX_OK;
    }
    char buf[MX_CONFIG_MAX_LINE + 1], *items[MX_CONFIG_MAX_INPUTS + 1];
    int n = split_list(in->value, buf, sizeof(buf), items, MX_CONFIG_MAX_INPUTS + 1);
    if (n < 0) return cfg_error(p, in->line, "net", "inputs", "empty name in the list '%s'", in->value);
    if (n == 0) return cfg_error(p, in->line, "net", "inputs", "no input named (e.g. inputs = data)");
    if (n > MX_CONFIG_MAX_INPUTS)
        return cfg_error(p, in->line, "net", "inputs", "more than %d inputs", MX_CONFIG_MAX_INPUTS);
    for (int i = 0; i < n; i++) {
        for (const char *q = items[i]; *q; q++)
            if (!name_char((unsigned char)*q))
                return cfg_error(p, in->line, "net", "inputs", "bad input name '%s': use letters, digits and _ - . /",
                                 items[i]);
        for (int j = 0; j < i; j++)
            if (!strcmp(items[i], items[j]))
                return cfg_error(p, in->line, "net", "inputs", "'%s' is listed twice", items[i]);
        int li = layer_index(st, items[i]);
        if (li >= 0)
            return cfg_error(p, in->line, "net", "inputs", "'%s' is also the name of a layer (line %d)", items[i],
                             st->layers[li]->line);
        if (!(cfg->inputs[i] = cfg_keep(p, items[i]))) return mx_last_status();
    }
    cfg->n_inputs = n;
    return MX_OK;
}

/* ------------------------------------------------------------ one layer */

static mx_status add_ref(net_state *st, int layer)
{
    if (st->n_refs == st->cap_refs) {
        int cap = st->cap_refs ? 2 * st->cap_refs : 64;
        int *grown = mx_realloc(st->refs, (size_t)cap * sizeof(int));
        if (!grown) return mx_last_status();
        st->refs = grown;
        st->cap_refs = cap;
    }
    st->refs[st->n_refs++] = layer;
    return MX_OK;
}

/* Turns an mx_op_parse_params error into FILE:LINE: [layer X] key: ... */
static mx_status param_error(net_state *st, const cfg_section *s, const mx_op_def *def, const char *const *keys,
                             const int *lines, int n)
{
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", cfg_clean_error((char[1024]){0}, 1024));
    const char *body = msg;
    size_t on = strlen(def->name);
    if (!strncmp(body, def->name, on) && body[on] == ':' && body[on + 1] == ' ') body += on + 2;
    char key[128] = "";
    int line = s->line;
    /* "parameter 'K' has bad value ..." / "required parameter 'K' is missing" */
    const char *q = strstr(body, "parameter '");
    if (q && (q == body || !strncmp(body, "required parameter '", 20))) {
        const char *k = q + 11;
        const char *end = strchr(k, '\'');
        if (end && (size_t)(end - k) < sizeof(key)) {
            memcpy(key, k, (size_t)(end - k));
            key[end - k] = '\0';
            const char *rest = end + 1;
            while (*rest == ' ') rest++;
            if (!strncmp(rest, "has ", 4)) rest += 4;
            else if (!strncmp(rest, "is ", 3)) rest += 3;
            for (int i = 0; i < n; i++)
                if (!strcmp(keys[i], key)) line = lines[i];
            if (!strncmp(body, "required", 8))
                return cfg_error(st->p, line, s->title, key, "required by %s but missing", def->name);
            return cfg_error(st->p, line, s->title, key, "%s", rest);
        }
    }
    /* A cross-parameter check: blame the first key it names. */
    for (const char *t = strchr(body, '\''); t; t = strchr(t + 1, '\'')) {
        const char *end = strchr(t + 1, '\'');
        if (!end) break;
        for (int i = 0; i < n; i++)
            if ((size_t)(end - t - 1) == strlen(keys[i]) && !strncmp(t + 1, keys[i], (size_t)(end - t - 1)))
                return cfg_error(st->p, lines[i], s->title, keys[i], "%s: %s", def->name, body);
        t = end;
    }
    return cfg_error(st->p, line, s->title, NULL, "%s: %s", def->name, body);
}

/* A near miss for an operator name: an MXNet name it begins (FullyConn),
 * else the closest MXNet name, else the closest alias. */
static const char *suggest_op(const char *op)
{
    const char *names[512];
    int n = 0;
    for (int i = 0; i < mx_op_count() && n < 512; i++) names[n++] = mx_op_at(i)->name;
    size_t len = strlen(op);
    if (len >= 4)
        for (int i = 0; i < n; i++)
            if (strlen(names[i]) > len && !strncasecmp(names[i], op, len)) return names[i];
    const char *near = mx_suggest(op, names, n);
    if (near) return near;
    const char *others[512];
    int m = 0;
    for (int i = 0; i < N_ALIASES; i++) others[m++] = aliases[i].alias;
    for (int i = 0; i < mx_op_count() && m < 500; i++)
        for (const char *const *a = mx_op_at(i)->aliases; a && *a && m < 500; a++) others[m++] = *a;
    return mx_suggest(op, others, m);
}

static mx_status unknown_op(net_state *st, const cfg_section *s, const cfg_entry *e, const char *op)
{
    const char *near = suggest_op(op);
    if (near) return cfg_error(st->p, e->line, s->title, "op", "unknown operator '%s' (did you mean '%s'?)", op, near);
    return cfg_error(st->p, e->line, s->title, "op",
                     "unknown operator '%s' (MXNet names such as Convolution, FullyConnected, SoftmaxOutput, or "
                     "aliases such as conv, fullc, relu)",
                     op);
}

/* Resolves one input item "NAME" or "NAME:K" of layer li. */
static mx_status resolve_input(net_state *st, int li, const cfg_section *s, int line, const char *item,
                               mx_entry *out)
{
    mx_config_priv *p = st->p;
    char name[256];
    int64_t k = 0;
    const char *colon = strrchr(item, ':');
    size_t nl = colon ? (size_t)(colon - item) : strlen(item);
    if (nl >= sizeof(name)) return cfg_error(p, line, s->title, "input", "name too long");
    memcpy(name, item, nl);
    name[nl] = '\0';
    if (colon && (!cfg_parse_int(colon + 1, &k) || k < 0 || !isdigit((unsigned char)colon[1])))
        return cfg_error(p, line, s->title, "input", "bad output index in '%s' (LAYER:K with K = 0, 1, ...)", item);
    int ref = layer_index(st, name);
    if (ref == li) return cfg_error(p, line, s->title, "input", "cycle: '%s' is this layer itself", name);
    if (ref > li)
        return cfg_error(p, line, s->title, "input",
                         "cycle: layer '%s' is defined after this one (line %d); inputs must name earlier layers",
                         name, st->layers[ref]->line);
    if (ref >= 0) {
        const mx_config_layer *l = &st->p->layers[ref];
        const mx_node *node = mx_graph_node(st->g, l->node);
        int nv = mx_node_num_visible_outputs(node);
        if (k >= nv) {
            if (nv == 1)
                return cfg_error(p, line, s->title, "input", "layer '%s' has one output; '%s' asks for output %lld",
                                 name, item, (long long)k);
            return cfg_error(p, line, s->title, "input", "layer '%s' has %d outputs (0..%d); '%s' is out of range",
                             name, nv, nv - 1, item);
        }
        *out = (mx_entry){l->node, (uint32_t)k};
        return add_ref(st, ref);
    }
    int di = input_index(st, name);
    if (di >= 0) {
        if (k != 0) return cfg_error(p, line, s->title, "input", "data input '%s' has one output", name);
        if (st->input_node[di] == MX_NO_NODE) {
            if (mx_graph_find(st->g, name) != MX_NO_NODE)
                return cfg_error(p, st->input_line, "net", "inputs",
                                 "data input '%s' has the name of a variable made by an earlier layer", name);
            if (mx_graph_add_variable(st->g, name, NULL, 0, &st->input_node[di]) != MX_OK)
                return cfg_error(p, line, s->title, "input", "%s", cfg_clean_error((char[1024]){0}, 1024));
        }
        *out = (mx_entry){st->input_node[di], 0};
        return MX_OK;
    }
    /* Unknown: suggest among earlier layers and data inputs. */
    const char **cands = mx_calloc((size_t)li + MX_CONFIG_MAX_INPUTS + 1, sizeof(char *));
    if (!cands) return mx_last_status();
    int n = 0;
    for (int i = 0; i < li; i++) cands[n++] = st->layers[i]->name;
    for (int i = 0; i < st->cfg->n_inputs; i++) cands[n++] = st->cfg->inputs[i];
    const char *near = mx_suggest(name, cands, n);
    mx_status rc;
    if (near) rc = cfg_error(p, line, s->title, "input", "unknown input '%s' (did you mean '%s'?)", name, near);
    else if (st->cfg->n_inputs == 1)
        rc = cfg_error(p, line, s->title, "input",
                       "unknown input '%s': not an earlier layer nor the data input '%s' (declare more with [net] "
                       "inputs)",
                       name, st->cfg->inputs[0]);
    else rc = cfg_error(p, line, s->title, "input", "unknown input '%s': not an earlier layer nor a [net] input", name);
    mx_free(cands);
    return rc;
}

#define MAX_KEYS 64

static mx_status compile_layer(net_state *st, int li)
{
    mx_config_priv *p = st->p;
    const cfg_section *s = st->layers[li];
    const char *lname = s->name;
    mx_status rc = MX_OK;

    /* The operator. */
    const cfg_entry *op_e = cfg_find(s, "op");
    if (!op_e) return cfg_error(p, s->line, s->title, "op", "required key is missing (e.g. op = Convolution)");
    char op[MX_CONFIG_MAX_LINE + 1];
    cfg_trim_copy(op_e->value, strlen(op_e->value), op, sizeof(op));
    if (!op[0]) return cfg_error(p, op_e->line, s->title, "op", "empty operator name");
    const op_alias *alias = NULL;
    for (int i = 0; i < N_ALIASES; i++)
        if (!strcmp(aliases[i].alias, op)) alias = &aliases[i];
    const mx_op_def *def = mx_op_find(alias ? alias->op : op);
    if (!def && alias)
        return cfg_error(p, op_e->line, s->title, "op", "alias '%s' stands for %s, which this build lacks", op,
                         alias->op);
    if (!def) return unknown_op(st, s, op_e, op);

    /* Operator parameters, at their lines. */
    const char *keys[MAX_KEYS], *values[MAX_KEYS];
    int lines[MAX_KEYS], nk = 0;
    const cfg_entry *init_keys[MAX_KEYS];
    int n_init = 0;
    for (int i = 0; i < s->n_entries; i++) {
        const cfg_entry *e = &s->entries[i];
        if (reserved_key(e->key)) continue;
        if (alias && alias->key && !strcmp(e->key, alias->key))
            return cfg_error(p, e->line, s->title, e->key, "set to '%s' by op = %s (use op = %s to choose it)",
                             alias->value, alias->alias, def->name);
        if (!mx_op_param(def, e->key)) {
            size_t kl = strlen(e->key);
            if (kl > 5 && !strcmp(e->key + kl - 5, "_init")) {
                if (n_init == MAX_KEYS) return cfg_error(p, e->line, s->title, e->key, "too many keys");
                init_keys[n_init++] = e;
                continue;
            }
            const char *cands[MAX_KEYS + N_LAYER_KEYS];
            int n = 0;
            for (int k = 0; k < def->n_params && n < MAX_KEYS; k++) cands[n++] = def->params[k].name;
            for (int k = 0; k < N_LAYER_KEYS; k++) cands[n++] = layer_keys[k];
            const char *near = mx_suggest(e->key, cands, n);
            if (near)
                return cfg_error(p, e->line, s->title, e->key, "unknown key for %s (did you mean '%s'?)", def->name,
                                 near);
            return cfg_error(p, e->line, s->title, e->key, "unknown key: not a parameter of %s", def->name);
        }
        if (nk == MAX_KEYS - 2) return cfg_error(p, e->line, s->title, e->key, "too many keys");
        keys[nk] = e->key;
        values[nk] = e->value;
        lines[nk++] = e->line;
    }
    if (alias && alias->key) {
        keys[nk] = alias->key;
        values[nk] = alias->value;
        lines[nk++] = op_e->line;
    }

    /* The input list (needed first: variadic ops count it). */
    const cfg_entry *in_e = cfg_find(s, "input");
    char inbuf[MX_CONFIG_MAX_LINE + 1], *items[MX_OP_MAX_IO + 1];
    int n_items = 0;
    if (in_e) {
        n_items = split_list(in_e->value, inbuf, sizeof(inbuf), items, MX_OP_MAX_IO + 1);
        if (n_items < 0) return cfg_error(p, in_e->line, s->title, "input", "empty name in the list '%s'", in_e->value);
        if (n_items == 0) return cfg_error(p, in_e->line, s->title, "input", "no input named");
        if (n_items > MX_OP_MAX_IO)
            return cfg_error(p, in_e->line, s->title, "input", "more than %d inputs", MX_OP_MAX_IO);
    }
    int n_given = in_e ? n_items : 1;
    char num_args[16];
    if (mx_op_param(def, "num_args") && !cfg_find(s, "num_args")) {
        snprintf(num_args, sizeof(num_args), "%d", n_given);
        keys[nk] = "num_args";
        values[nk] = num_args;
        lines[nk++] = in_e ? in_e->line : s->line;
    }

    void *params = mx_calloc(1, def->params_size ? def->params_size : 1);
    if (!params) return mx_last_status();
    if (mx_op_parse_params(def, keys, values, nk, params) != MX_OK) {
        rc = param_error(st, s, def, keys, lines, nk);
        mx_free(params);
        return rc;
    }
    const char *slots[MX_OP_MAX_IO];
    int n_slots = def->list_inputs ? def->list_inputs(params, slots) : 0;
    int n_aux = def->num_aux ? def->num_aux(params) : 0;
    mx_free(params);
    int n_data = 0;
    while (n_data < n_slots - n_aux && !param_slot(slots[n_data])) n_data++;
    int label_slot = -1;
    bool has_params = false;
    for (int i = 0; i < n_slots; i++) {
        if (!strcmp(slots[i], "label")) label_slot = i;
        else if (i >= n_data) has_params = true;
    }

    /* Inputs. */
    int in_line = in_e ? in_e->line : s->line;
    if (n_given != n_data) {
        char list[256] = "";
        for (int i = 0; i < n_data && strlen(list) < 200; i++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", slots[i]);
        }
        if (mx_op_param(def, "num_args"))
            return cfg_error(p, in_line, s->title, "input", "num_args = %d but %d input%s given", n_data, n_given,
                             n_given == 1 ? "" : "s");
        if (!in_e)
            return cfg_error(p, s->line, s->title, "input", "%s takes %d inputs (%s); name them with input = ...",
                             def->name, n_data, list);
        return cfg_error(p, in_line, s->title, "input", "%s takes %d input%s (%s), got %d", def->name, n_data,
                         n_data == 1 ? "" : "s", list, n_given);
    }
    mx_entry inputs[MX_OP_MAX_IO];
    int n_inputs = 0;
    if (in_e) {
        for (int i = 0; i < n_items; i++) MX_TRY(resolve_input(st, li, s, in_e->line, items[i], &inputs[n_inputs++]));
    } else if (li == 0) {
        MX_TRY(resolve_input(st, li, s, s->line, st->cfg->inputs[0], &inputs[n_inputs++]));
    } else {
        const mx_config_layer *prev = &p->layers[li - 1];
        int nv = mx_node_num_visible_outputs(mx_graph_node(st->g, prev->node));
        if (nv != 1)
            return cfg_error(p, s->line, s->title, "input",
                             "required: the previous layer '%s' has %d outputs; name one as input = %s:K", prev->name,
                             nv, prev->name);
        inputs[n_inputs++] = (mx_entry){prev->node, 0};
        MX_TRY(add_ref(st, li - 1));
    }

    /* The label of a loss layer. */
    const cfg_entry *label_e = cfg_find(s, "label");
    if (label_e && label_slot < 0) {
        if (!strcmp(def->name, "softmax"))
            return cfg_error(p, label_e->line, s->title, "label",
                             "softmax is the plain function and takes no label (did you mean op = SoftmaxOutput?)");
        return cfg_error(p, label_e->line, s->title, "label", "%s is not a loss layer and takes no label", def->name);
    }
    if (label_e) {
        if (label_slot != n_inputs)
            return cfg_error(p, label_e->line, s->title, "label", "%s: the label is not its next input", def->name);
        char lab[MX_CONFIG_MAX_LINE + 1];
        cfg_trim_copy(label_e->value, strlen(label_e->value), lab, sizeof(lab));
        if (!lab[0]) return cfg_error(p, label_e->line, s->title, "label", "empty label name");
        for (const char *q = lab; *q; q++)
            if (!name_char((unsigned char)*q))
                return cfg_error(p, label_e->line, s->title, "label", "bad label name '%s'", lab);
        if (layer_index(st, lab) >= 0)
            return cfg_error(p, label_e->line, s->title, "label", "'%s' is the name of a layer", lab);
        uint32_t node = mx_graph_find(st->g, lab);
        bool reusable = false;
        for (int i = 0; i < st->n_labels; i++)
            if (st->label_nodes[i] == node) reusable = true;
        int di = input_index(st, lab);
        if (di >= 0) {
            /* A declared input used as the label. */
            mx_entry e;
            MX_TRY(resolve_input(st, li, s, label_e->line, lab, &e));
            node = e.node;
        } else if (node != MX_NO_NODE && !reusable) {
            return cfg_error(p, label_e->line, s->title, "label", "'%s' is already a variable of another layer", lab);
        } else if (node == MX_NO_NODE) {
            if (mx_graph_add_variable(st->g, lab, NULL, 0, &node) != MX_OK)
                return cfg_error(p, label_e->line, s->title, "label", "%s", cfg_clean_error((char[1024]){0}, 1024));
            uint32_t *grown = mx_realloc(st->label_nodes, (size_t)(st->n_labels + 1) * sizeof(uint32_t));
            if (!grown) return mx_last_status();
            st->label_nodes = grown;
            st->label_nodes[st->n_labels++] = node;
        }
        inputs[n_inputs++] = (mx_entry){node, 0};
    }

    /* Learning-rate and weight-decay multipliers. */
    mx_attr extra[2];
    int n_extra = 0;
    const char *mults[2][2] = {{"lr_mult", "__lr_mult__"}, {"wd_mult", "__wd_mult__"}};
    char mult_text[2][64];
    for (int i = 0; i < 2; i++) {
        const cfg_entry *e = cfg_find(s, mults[i][0]);
        if (!e) continue;
        double v;
        cfg_trim_copy(e->value, strlen(e->value), mult_text[i], sizeof(mult_text[i]));
        if (!cfg_parse_float(mult_text[i], &v) || v < 0)
            return cfg_error(p, e->line, s->title, e->key, "bad value '%s': expected a number >= 0", mult_text[i]);
        if (!has_params)
            return cfg_error(p, e->line, s->title, e->key, "%s has no parameters to apply it to", def->name);
        extra[n_extra].key = (char *)mults[i][1];
        extra[n_extra].value = mult_text[i];
        n_extra++;
    }

    /* Initializer overrides: INPUT_init for a parameter input. */
    char init_json[MAX_KEYS][256];
    for (int i = 0; i < n_init; i++) {
        const cfg_entry *e = init_keys[i];
        size_t kl = strlen(e->key) - 5;
        int slot = -1;
        for (int k = n_data; k < n_slots - n_aux; k++)
            if (strlen(slots[k]) == kl && !strncmp(slots[k], e->key, kl) && strcmp(slots[k], "label")) slot = k;
        if (slot < 0) {
            char cands_buf[MX_OP_MAX_IO][48];
            const char *cands[MX_OP_MAX_IO + MAX_KEYS];
            int n = 0;
            for (int k = n_data; k < n_slots - n_aux; k++) {
                if (!strcmp(slots[k], "label")) continue;
                snprintf(cands_buf[n], sizeof(cands_buf[n]), "%s_init", slots[k]);
                cands[n] = cands_buf[n];
                n++;
            }
            int n_init_cands = n;
            for (int k = 0; k < def->n_params && n < MX_OP_MAX_IO + MAX_KEYS; k++) cands[n++] = def->params[k].name;
            const char *near = mx_suggest(e->key, cands, n);
            if (near)
                return cfg_error(p, e->line, s->title, e->key, "unknown key for %s (did you mean '%s'?)", def->name,
                                 near);
            if (!n_init_cands)
                return cfg_error(p, e->line, s->title, e->key, "unknown key: %s has no parameters to initialize",
                                 def->name);
            return cfg_error(p, e->line, s->title, e->key, "unknown key: %s has no parameter input '%.*s'", def->name,
                             (int)kl, e->key);
        }
        /* Stored as MXNet's __init__ attribute: the initializer's dumps(). */
        mx_initializer *init;
        if (mx_initializer_parse(e->value, &init) != MX_OK) {
            char why[512];
            snprintf(why, sizeof(why), "%s", mx_last_error());
            return cfg_error(p, e->line, s->title, e->key, "%s", why);
        }
        mx_initializer_dumps(init, init_json[i], sizeof(init_json[i]));
        mx_initializer_free(init);
    }

    /* Names the node and its new variables will take must be free. */
    if (mx_graph_find(st->g, lname) != MX_NO_NODE)
        return cfg_error(p, s->line, s->title, NULL, "the name '%s' is already taken by a variable", lname);
    for (int k = n_inputs; k < n_slots; k++) {
        char var[256];
        snprintf(var, sizeof(var), "%s_%s", lname, slots[k]);
        uint32_t node = mx_graph_find(st->g, var);
        if (node == MX_NO_NODE) continue;
        bool is_label = false;
        for (int i = 0; i < st->n_labels; i++)
            if (st->label_nodes[i] == node) is_label = true;
        if (!(is_label && !strcmp(slots[k], "label")))
            return cfg_error(p, s->line, s->title, NULL, "its %s would be named '%s', which is already taken", slots[k],
                             var);
    }
    for (int k = n_inputs; k < n_slots; k++) {
        char var[256];
        snprintf(var, sizeof(var), "%s_%s", lname, slots[k]);
        if (layer_index(st, var) > li)
            return cfg_error(p, st->layers[layer_index(st, var)]->line, st->layers[layer_index(st, var)]->title, NULL,
                             "the name is taken by the %s of layer '%s'", slots[k], lname);
        if (input_index(st, var) >= 0)
            return cfg_error(p, st->input_line, "net", "inputs", "'%s' is the name of layer %s's %s", var, lname,
                             slots[k]);
    }

    uint32_t id;
    if (mx_graph_add_op(st->g, def->name, lname, keys, values, nk, inputs, n_inputs, n_extra ? extra : NULL,
                        n_extra, &id) != MX_OK)
        return cfg_error(p, s->line, s->title, NULL, "%s", cfg_clean_error((char[1024]){0}, 1024));
    if (label_slot >= 0 && !label_e) {
        /* The default NAME_label variable; later loss layers may share it. */
        char var[256];
        snprintf(var, sizeof(var), "%s_label", lname);
        uint32_t node = mx_graph_find(st->g, var);
        if (node != MX_NO_NODE) {
            uint32_t *grown = mx_realloc(st->label_nodes, (size_t)(st->n_labels + 1) * sizeof(uint32_t));
            if (!grown) return mx_last_status();
            st->label_nodes = grown;
            st->label_nodes[st->n_labels++] = node;
        }
    }
    for (int i = 0; i < n_init; i++) {
        char var[256];
        const cfg_entry *e = init_keys[i];
        snprintf(var, sizeof(var), "%s_%.*s", lname, (int)(strlen(e->key) - 5), e->key);
        uint32_t node = mx_graph_find(st->g, var);
        if (node == MX_NO_NODE) return cfg_error(p, e->line, s->title, e->key, "internal: variable '%s' not made", var);
        if (mx_graph_set_attr(st->g, node, "__init__", init_json[i]) != MX_OK)
            return cfg_error(p, e->line, s->title, e->key, "%s", cfg_clean_error((char[1024]){0}, 1024));
    }
    mx_config_layer *l = &p->layers[li];
    l->name = lname;
    l->op = def->name;
    l->line = s->line;
    l->node = id;
    (void)rc;
    return MX_OK;
}

/* ------------------------------------------------------------ heads */

static mx_status set_heads(net_state *st, const cfg_section *net)
{
    mx_config_priv *p = st->p;
    const cfg_entry *out_e = cfg_find(net, "outputs");
    mx_entry heads[MX_OP_MAX_IO];
    int head_layer[MX_OP_MAX_IO];
    int n = 0;
    if (!out_e) {
        const mx_config_layer *last = &p->layers[st->n_layers - 1];
        int nv = mx_node_num_visible_outputs(mx_graph_node(st->g, last->node));
        for (int k = 0; k < nv && n < MX_OP_MAX_IO; k++) {
            head_layer[n] = st->n_layers - 1;
            heads[n++] = (mx_entry){last->node, (uint32_t)k};
        }
    } else {
        char buf[MX_CONFIG_MAX_LINE + 1], *items[MX_OP_MAX_IO + 1];
        int ni = split_list(out_e->value, buf, sizeof(buf), items, MX_OP_MAX_IO + 1);
        if (ni < 0) return cfg_error(p, out_e->line, "net", "outputs", "empty name in the list '%s'", out_e->value);
        if (ni == 0) return cfg_error(p, out_e->line, "net", "outputs", "no output named");
        if (ni > MX_OP_MAX_IO) return cfg_error(p, out_e->line, "net", "outputs", "too many outputs");
        for (int i = 0; i < ni; i++) {
            char name[256];
            const char *colon = strrchr(items[i], ':');
            size_t nl = colon ? (size_t)(colon - items[i]) : strlen(items[i]);
            if (nl >= sizeof(name)) return cfg_error(p, out_e->line, "net", "outputs", "name too long");
            memcpy(name, items[i], nl);
            name[nl] = '\0';
            int li = layer_index(st, name);
            if (li < 0) {
                const char **cands = mx_calloc((size_t)st->n_layers + 1, sizeof(char *));
                if (!cands) return mx_last_status();
                for (int j = 0; j < st->n_layers; j++) cands[j] = st->layers[j]->name;
                const char *near = mx_suggest(name, cands, st->n_layers);
                mx_status rc = near ? cfg_error(p, out_e->line, "net", "outputs",
                                                "unknown layer '%s' (did you mean '%s'?)", name, near)
                                    : cfg_error(p, out_e->line, "net", "outputs", "unknown layer '%s'", name);
                mx_free(cands);
                return rc;
            }
            const mx_config_layer *l = &p->layers[li];
            int nv = mx_node_num_visible_outputs(mx_graph_node(st->g, l->node));
            int64_t lo = 0, hi = nv - 1;
            if (colon) {
                if (!cfg_parse_int(colon + 1, &lo) || lo < 0 || lo >= nv)
                    return cfg_error(p, out_e->line, "net", "outputs", "'%s': layer '%s' has %d output%s", items[i],
                                     name, nv, nv == 1 ? "" : "s");
                hi = lo;
            }
            for (int64_t k = lo; k <= hi; k++) {
                for (int j = 0; j < n; j++)
                    if (heads[j].node == l->node && heads[j].index == (uint32_t)k)
                        return cfg_error(p, out_e->line, "net", "outputs", "'%s' is listed twice", items[i]);
                if (n == MX_OP_MAX_IO) return cfg_error(p, out_e->line, "net", "outputs", "too many outputs");
                head_layer[n] = li;
                heads[n++] = (mx_entry){l->node, (uint32_t)k};
            }
        }
    }
    /* Every layer must lead to an output. */
    bool *live = mx_calloc((size_t)st->n_layers, sizeof(bool));
    if (!live) return mx_last_status();
    for (int i = 0; i < n; i++) live[head_layer[i]] = true;
    for (int li = st->n_layers - 1; li >= 0; li--) {
        if (!live[li]) continue;
        for (int r = st->ref_start[li]; r < st->ref_start[li + 1]; r++) live[st->refs[r]] = true;
    }
    for (int li = 0; li < st->n_layers; li++)
        if (!live[li]) {
            const cfg_section *s = st->layers[li];
            mx_free(live);
            return cfg_error(p, s->line, s->title, NULL,
                             "its output is not used: no path to the network's outputs (connect it, or list it in "
                             "[net] outputs)");
        }
    mx_free(live);
    for (int i = 0; i < st->cfg->n_inputs; i++)
        if (st->input_node[i] == MX_NO_NODE)
            return cfg_error(p, st->input_line, "net", "inputs", "input '%s' is not used by any layer",
                             st->cfg->inputs[i]);
    if (mx_graph_set_heads(st->g, heads, n) != MX_OK)
        return cfg_error(p, -1, NULL, NULL, "%s", cfg_clean_error((char[1024]){0}, 1024));
    return MX_OK;
}

/* ------------------------------------------------------------ the net */

mx_status cfg_compile_net(mx_config *cfg)
{
    mx_config_priv *p = cfg->priv;
    net_state st = {.cfg = cfg, .p = p};
    for (int i = 0; i < MX_CONFIG_MAX_INPUTS; i++) st.input_node[i] = MX_NO_NODE;
    const cfg_section *net = NULL;
    int n_layers = 0;
    for (int i = 0; i < p->n_sections; i++) {
        if (p->sections[i].kind == CFG_LAYER) n_layers++;
        if (p->sections[i].kind == CFG_NET) net = &p->sections[i];
    }
    st.layers = mx_calloc((size_t)n_layers + 1, sizeof(*st.layers));
    p->layers = mx_calloc((size_t)n_layers + 1, sizeof(*p->layers));
    st.ref_start = mx_calloc((size_t)n_layers + 1, sizeof(int));
    mx_status rc = MX_OK;
    if (!st.layers || !p->layers || !st.ref_start) {
        rc = mx_last_status();
        goto done;
    }
    for (int i = 0; i < p->n_sections; i++)
        if (p->sections[i].kind == CFG_LAYER) st.layers[st.n_layers++] = &p->sections[i];
    mx_name_index_init(&st.layer_names, layer_name_of, &st);
    if ((rc = mx_name_index_reserve(&st.layer_names, (uint32_t)st.n_layers, (uint32_t)st.n_layers)) != MX_OK) goto done;
    if ((rc = compile_net_section(&st, net)) != MX_OK) goto done;
    if (!st.n_layers) {
        if (!p->n_sections) rc = cfg_error(p, 1, NULL, NULL, "empty config: no sections, no [layer NAME] sections");
        else rc = cfg_error(p, 1, NULL, NULL, "no [layer NAME] sections: the config defines no network");
        goto done;
    }
    if ((rc = mx_graph_create(&cfg->graph)) != MX_OK) goto done;
    st.g = cfg->graph;
    for (int li = 0; li < st.n_layers; li++) {
        st.ref_start[li] = st.n_refs;
        if ((rc = compile_layer(&st, li)) != MX_OK) goto done;
        p->n_layers = li + 1;
        st.ref_start[li + 1] = st.n_refs;
    }
    cfg->layers = p->layers;
    cfg->n_layers = p->n_layers;
    rc = set_heads(&st, net);
done:
    mx_name_index_free(&st.layer_names);
    mx_free(st.layers);
    mx_free(st.ref_start);
    mx_free(st.refs);
    mx_free(st.label_nodes);
    return rc;
}
