/*
 * symbol_json.c - MXNet symbol JSON, written byte for byte as dmlc's JSON
 * writer does (../shared/spec/mxnet-formats.md section 4.8) and read from
 * every 1.x and older layout (4.7).
 */
#include "json/json.h"
#include "symbol/symbol_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- writer */

typedef struct sbuf {
    char *data;
    size_t len, cap;
    bool failed;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) {
            b->failed = true;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void putf(sbuf *b, const char *fmt, long long v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), fmt, v);
    put(b, tmp, (size_t)n);
}

/* dmlc escapes only \r \n \\ \t and the quote, and writes other control
 * characters raw, which is not JSON (our reader, and Python's, refuse it):
 * those are written as \u00XX, so a graph always reads back. */
static void put_string(sbuf *b, const char *s)
{
    puts_(b, "\"");
    for (; *s; s++) {
        switch (*s) {
        case '\r': puts_(b, "\\r"); break;
        case '\n': puts_(b, "\\n"); break;
        case '\\': puts_(b, "\\\\"); break;
        case '\t': puts_(b, "\\t"); break;
        case '"': puts_(b, "\\\""); break;
        default:
            if ((unsigned char)*s < 0x20) {
                char u[8];
                snprintf(u, sizeof(u), "\\u%04x", (unsigned)(unsigned char)*s);
                puts_(b, u);
            } else {
                put(b, s, 1);
            }
        }
    }
    puts_(b, "\"");
}

static void newline(sbuf *b, int depth)
{
    puts_(b, "\n");
    for (int i = 0; i < depth; i++) puts_(b, "  ");
}

/* Item separator in a multi-line container at `depth`. */
static void ml_item(sbuf *b, int i, int depth)
{
    if (i) puts_(b, ", ");
    newline(b, depth);
}

static void put_entry(sbuf *b, mx_entry e, int version)
{
    putf(b, "[%lld, ", e.node);
    putf(b, "%lld, ", e.index);
    putf(b, "%lld]", version);
}

/* An array of entries or ints: inline up to 10 items, else one a line. */
static void put_list(sbuf *b, int n, int depth, const mx_entry *entries, const int *versions, const long long *ints)
{
    bool multi = n > 10;
    puts_(b, "[");
    for (int i = 0; i < n; i++) {
        if (multi) ml_item(b, i, depth + 1);
        else if (i) puts_(b, ", ");
        if (entries) put_entry(b, entries[i], versions ? versions[i] : 0);
        else putf(b, "%lld", ints[i]);
    }
    if (multi && n) newline(b, depth);
    puts_(b, "]");
}

static void put_attrs(sbuf *b, const mx_attr *attrs, int n, int depth)
{
    puts_(b, "{");
    for (int i = 0; i < n; i++) {
        if (n > 1) ml_item(b, i, depth + 1);
        put_string(b, attrs[i].key);
        puts_(b, ": ");
        put_string(b, attrs[i].value);
    }
    if (n > 1) newline(b, depth);
    puts_(b, "}");
}

mx_status mx_graph_to_json(const mx_graph *g, char **out_json, size_t *out_len)
{
    *out_json = NULL;
    int n = 0; /* forward nodes only */
    while (n < g->n_nodes && g->nodes[n].kind != MX_NODE_BACKWARD) n++;
    for (int i = n; i < g->n_nodes; i++)
        if (g->nodes[i].kind != MX_NODE_BACKWARD && g->nodes[i].kind != MX_NODE_VARIABLE)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "to_json: graph mixes forward nodes into the backward pass");
    sbuf b = {0};
    puts_(&b, "{");
    newline(&b, 1);
    puts_(&b, "\"nodes\": [");
    mx_entry entries[MX_OP_MAX_IO];
    int versions[MX_OP_MAX_IO];
    for (int i = 0; i < n; i++) {
        const mx_node *nd = &g->nodes[i];
        ml_item(&b, i, 2);
        puts_(&b, "{");
        newline(&b, 3);
        puts_(&b, "\"op\": ");
        put_string(&b, nd->kind == MX_NODE_VARIABLE ? "null" : nd->op->name);
        puts_(&b, ", ");
        newline(&b, 3);
        puts_(&b, "\"name\": ");
        put_string(&b, nd->name);
        puts_(&b, ", ");
        if (nd->n_attrs) {
            newline(&b, 3);
            puts_(&b, "\"attrs\": ");
            put_attrs(&b, nd->attrs, nd->n_attrs, 3);
            puts_(&b, ", ");
        }
        newline(&b, 3);
        puts_(&b, "\"inputs\": ");
        int n_aux = mx_node_num_aux(nd);
        for (int j = 0; j < nd->n_inputs; j++) {
            entries[j] = nd->inputs[j];
            versions[j] = j >= nd->n_inputs - n_aux ? 1 : 0; /* mutated aux state */
        }
        put_list(&b, nd->n_inputs, 3, entries, versions, NULL);
        newline(&b, 2);
        puts_(&b, "}");
    }
    newline(&b, 1);
    puts_(&b, "], ");

    long long *ints = mx_malloc(sizeof(long long) * (size_t)(n + 1));
    bool *aux = graph_aux_mask(g);
    if (!ints || !aux) {
        free(ints);
        free(aux);
        free(b.data);
        return MX_ERR_NOMEM;
    }
    int n_args = 0;
    for (int i = 0; i < n; i++)
        if (g->nodes[i].kind == MX_NODE_VARIABLE) ints[n_args++] = i; /* aux included, as MXNet */
    newline(&b, 1);
    puts_(&b, "\"arg_nodes\": ");
    put_list(&b, n_args, 1, NULL, NULL, ints);
    puts_(&b, ", ");
    ints[0] = 0;
    for (int i = 0; i < n; i++) ints[i + 1] = ints[i] + g->nodes[i].n_outputs;
    newline(&b, 1);
    puts_(&b, "\"node_row_ptr\": ");
    put_list(&b, n + 1, 1, NULL, NULL, ints);
    puts_(&b, ", ");
    free(ints);
    free(aux);
    newline(&b, 1);
    puts_(&b, "\"heads\": ");
    mx_entry *heads = mx_malloc(sizeof(mx_entry) * (size_t)(g->n_heads + 1));
    if (!heads) {
        free(b.data);
        return MX_ERR_NOMEM;
    }
    for (int i = 0; i < g->n_heads; i++) heads[i] = g->heads[i];
    put_list(&b, g->n_heads, 1, heads, NULL, NULL);
    free(heads);
    puts_(&b, ", ");
    newline(&b, 1);
    puts_(&b, "\"attrs\": {\"mxnet_version\": [\"int\", ");
    putf(&b, "%lld", g->mxnet_version);
    puts_(&b, "]}");
    newline(&b, 0);
    puts_(&b, "}");
    if (b.failed) {
        free(b.data);
        return MX_ERROR(MX_ERR_NOMEM, "to_json: out of memory");
    }
    *out_json = b.data;
    *out_len = b.len;
    return MX_OK;
}

mx_status mx_graph_save_json(const mx_graph *g, const char *path)
{
    char *json;
    size_t len;
    MX_TRY(mx_graph_to_json(g, &json, &len));
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    mx_status s = MX_OK;
    if (!f) {
        s = MX_ERROR(MX_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        /* Synced before the rename, as .params files are: after a crash the
         * name holds the old file or the whole new one. */
        bool ok = fwrite(json, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
        ok = (fclose(f) == 0) && ok;
        if (!ok) s = MX_ERROR(MX_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        else if (rename(tmp, path) != 0) s = MX_ERROR(MX_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        if (s != MX_OK) remove(tmp);
    }
    free(json);
    return s;
}

/* ---------------------------------------------------------------- reader */

/* The version MXNet writes; older files are upgraded on load as MXNet
 * 1.9.1 does (src/nnvm/legacy_json_util.cc). */
#define MXNET_VERSION 10901

/* Keys old files stored without underscores (4.7, MXNet's kHiddenKeys). */
static const char *const hidden_keys[] = {"ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage"};
#define N_HIDDEN ((int)(sizeof(hidden_keys) / sizeof(hidden_keys[0])))

/* The hidden key `k` is (exact), or ends with after an input name and one
 * separator ("weight_lr_mult": *prefix_len 6); -1: neither. */
static int hidden_key(const char *k, size_t *prefix_len)
{
    size_t kl = strlen(k);
    for (int i = 0; i < N_HIDDEN; i++) {
        size_t hl = strlen(hidden_keys[i]);
        if (kl == hl && !strcmp(k, hidden_keys[i])) {
            *prefix_len = 0;
            return i;
        }
        if (kl > hl + 1 && !strcmp(k + kl - hl, hidden_keys[i])) {
            *prefix_len = kl - hl - 1;
            return i;
        }
    }
    return -1;
}

static mx_status node_error(int i, const char *name, const char *what)
{
    return MX_ERROR(MX_ERR_FORMAT, "symbol json: node %d%s%s%s: %s", i, name ? " ('" : "", name ? name : "",
                    name ? "')" : "", what);
}

/* Collects string attributes of one JSON object into kv arrays. */
static mx_status collect_attrs(int i, const char *name, const mx_json *obj, mx_attr *kv, int *n, int cap)
{
    if (!obj) return MX_OK;
    if (obj->type != MX_JSON_OBJECT) return node_error(i, name, "attributes must be an object");
    for (int k = 0; k < obj->count; k++) {
        if (obj->items[k]->type != MX_JSON_STRING) return node_error(i, name, "attribute values must be strings");
        if (*n == cap) return node_error(i, name, "too many attributes");
        kv[*n] = (mx_attr){obj->keys[k], obj->items[k]->string};
        (*n)++;
    }
    return MX_OK;
}

static mx_status read_entry(const mx_json *e, int i, const char *name, int limit, mx_entry *out)
{
    if (e->type != MX_JSON_ARRAY || e->count < 2 || e->count > 3) return node_error(i, name, "bad input entry");
    for (int k = 0; k < e->count; k++)
        if (e->items[k]->type != MX_JSON_NUMBER || e->items[k]->number < 0 || e->items[k]->number > 1e9)
            return node_error(i, name, "bad input entry");
    double id = e->items[0]->number, idx = e->items[1]->number;
    if (id >= limit) return node_error(i, name, "input refers to a later node (not topologically sorted)");
    *out = (mx_entry){(uint32_t)id, (uint32_t)idx};
    return MX_OK;
}

/* MXNet's UpgradeJSON_FixParsing for an operator node's "INPUT_KEY"
 * attributes (weight_lr_mult): each moves to that input as __KEY__ when
 * the input is a variable given in the file; the others stay (and are
 * then refused as unknown parameters, as MXNet refuses them). Moved
 * entries are removed from kv. */
static mx_status move_input_hidden_keys(mx_graph *g, const mx_op_def *def, int i, const char *nm, mx_attr *kv,
                                        int *n_kv, const mx_entry *in, int n_in)
{
    const char *keys[128], *values[128];
    int n_params = 0;
    for (int k = 0; k < *n_kv; k++) {
        size_t prefix;
        if (hidden_key(kv[k].key, &prefix) >= 0 || !mx_op_param(def, kv[k].key)) continue;
        keys[n_params] = kv[k].key;
        values[n_params++] = kv[k].value;
    }
    /* The input names depend on the parameters (no_bias); a bad value is
     * reported when the node is added. */
    _Alignas(16) char params[16384];
    const char *names[MX_OP_MAX_IO];
    if (def->params_size > sizeof(params) || mx_op_parse_params(def, keys, values, n_params, params) != MX_OK)
        return MX_OK;
    int n_names = def->list_inputs(params, names);
    int out = 0;
    for (int k = 0; k < *n_kv; k++) {
        size_t prefix;
        int h = hidden_key(kv[k].key, &prefix);
        int idx = -1;
        for (int j = 0; h >= 0 && prefix > 0 && j < n_names && j < n_in && idx < 0; j++)
            if (strlen(names[j]) == prefix && !strncmp(kv[k].key, names[j], prefix)) idx = j;
        if (idx >= 0 && mx_graph_node(g, in[idx].node)->kind == MX_NODE_VARIABLE) {
            char key[48];
            snprintf(key, sizeof(key), "__%s__", hidden_keys[h]);
            if (mx_graph_set_attr(g, in[idx].node, key, kv[k].value) != MX_OK)
                return mx_error_prefix(MX_ERR_FORMAT, "symbol json: node %d ('%s')", i, nm);
            continue;
        }
        kv[out++] = kv[k];
    }
    *n_kv = out;
    return MX_OK;
}

static mx_status load_node(mx_graph *g, const mx_json *node, int i, bool legacy, uint32_t *ids)
{
    if (node->type != MX_JSON_OBJECT) return node_error(i, NULL, "not an object");
    const mx_json *op = mx_json_get(node, "op"), *name = mx_json_get(node, "name");
    const mx_json *inputs = mx_json_get(node, "inputs");
    if (!name || name->type != MX_JSON_STRING) return node_error(i, NULL, "missing \"name\"");
    const char *nm = name->string;
    if (!op || op->type != MX_JSON_STRING) return node_error(i, nm, "missing \"op\"");
    if (!inputs || inputs->type != MX_JSON_ARRAY) return node_error(i, nm, "missing \"inputs\"");
    if (inputs->count > MX_OP_MAX_IO) return node_error(i, nm, "too many inputs");

    mx_attr kv[128];
    int n_kv = 0;
    MX_TRY(collect_attrs(i, nm, mx_json_get(node, "attrs"), kv, &n_kv, 128));
    MX_TRY(collect_attrs(i, nm, mx_json_get(node, "attr"), kv, &n_kv, 128));
    MX_TRY(collect_attrs(i, nm, mx_json_get(node, "param"), kv, &n_kv, 128));
    /* Old files: hidden keys gain their double underscores. */
    char renamed[128][48];
    for (int k = 0; k < n_kv && legacy; k++) {
        size_t prefix;
        int h = hidden_key(kv[k].key, &prefix);
        if (h >= 0 && prefix == 0) {
            snprintf(renamed[k], sizeof(renamed[k]), "__%s__", hidden_keys[h]);
            kv[k].key = renamed[k];
        }
    }

    if (!strcmp(op->string, "null")) {
        if (inputs->count) return node_error(i, nm, "a variable has inputs");
        if (mx_graph_add_variable(g, nm, kv, n_kv, &ids[i]) != MX_OK)
            return mx_error_prefix(MX_ERR_FORMAT, "symbol json: node %d", i);
        return MX_OK;
    }
    mx_entry in[MX_OP_MAX_IO];
    for (int k = 0; k < inputs->count; k++) {
        MX_TRY(read_entry(inputs->items[k], i, nm, i, &in[k]));
        in[k].node = ids[in[k].node];
    }
    /* Split op parameters from reserved / extra attributes. */
    const mx_op_def *def;
    if (mx_op_lookup(op->string, &def) != MX_OK) return mx_error_prefix(MX_ERR_FORMAT, "symbol json: node %d ('%s')", i, nm);
    if (legacy) MX_TRY(move_input_hidden_keys(g, def, i, nm, kv, &n_kv, in, inputs->count));
    const char *keys[128], *values[128];
    mx_attr extra[128];
    int n_params = 0, n_extra = 0;
    for (int k = 0; k < n_kv; k++) {
        if (mx_op_param(def, kv[k].key) || strncmp(kv[k].key, "__", 2) != 0) {
            keys[n_params] = kv[k].key;
            values[n_params++] = kv[k].value;
        } else {
            extra[n_extra++] = kv[k];
        }
    }
    if (mx_graph_add_op(g, def->name, nm, keys, values, n_params, in, inputs->count, extra, n_extra, &ids[i]) != MX_OK)
        return mx_error_prefix(MX_ERR_FORMAT, "symbol json: node %d", i);
    return MX_OK;
}

/* attrs.mxnet_version: ["int", N], N a version number MXNet could write
 * (major * 10000 + minor * 100 + patch). Absent: 0.8.0. */
static mx_status read_version(const mx_json *v, int *version)
{
    if (!v) return MX_OK;
    if (v->type != MX_JSON_ARRAY || v->count != 2 || v->items[1]->type != MX_JSON_NUMBER)
        return MX_ERROR(MX_ERR_FORMAT, "symbol json: attrs.mxnet_version must be [\"int\", VERSION]");
    double n = v->items[1]->number;
    if (!(n >= 0 && n <= 999999) || n != (double)(int)n) /* checked before the cast: larger doubles overflow int */
        return MX_ERROR(MX_ERR_FORMAT, "symbol json: attrs.mxnet_version %.17g is not an MXNet version number (an "
                                       "integer from 0 to 999999, e.g. 10901 for 1.9.1)", n);
    *version = (int)n;
    return MX_OK;
}

/* Every operator of the file this build lacks, with the nodes using it,
 * in one error: a user converting a model sees all there is to do. */
static mx_status check_operators(const mx_json *nodes)
{
    enum { MAX_OPS = 32 };
    const char *ops[MAX_OPS];
    int n_nodes[MAX_OPS], n_ops = 0, n_missing = 0;
    bool more = false;
    for (int i = 0; i < nodes->count; i++) {
        const mx_json *op = mx_json_get(nodes->items[i], "op");
        if (!op || op->type != MX_JSON_STRING || !strcmp(op->string, "null") || mx_op_find(op->string)) continue;
        n_missing++;
        int k = 0;
        while (k < n_ops && strcmp(ops[k], op->string)) k++;
        if (k == n_ops && n_ops < MAX_OPS) {
            ops[n_ops] = op->string;
            n_nodes[n_ops++] = 0;
        } else if (k == n_ops) {
            more = true;
        }
        if (k < n_ops) n_nodes[k]++;
    }
    if (n_missing == 0) return MX_OK;
    if (n_ops == 1 && n_nodes[0] == 1) return MX_OK; /* load_node reports it with a suggestion */
    sbuf b = {0};
    char num[32];
    snprintf(num, sizeof(num), "%s%d", more ? "more than " : "", n_ops);
    puts_(&b, num);
    puts_(&b, n_ops == 1 && !more ? " unknown operator: " : " unknown operators: ");
    for (int k = 0; k < n_ops; k++) {
        if (k) puts_(&b, "; ");
        puts_(&b, "'");
        puts_(&b, ops[k]);
        puts_(&b, n_nodes[k] == 1 ? "' (node " : "' (nodes ");
        int shown = 0;
        for (int i = 0; i < nodes->count && shown < 8; i++) {
            const mx_json *op = mx_json_get(nodes->items[i], "op"), *name = mx_json_get(nodes->items[i], "name");
            if (!op || op->type != MX_JSON_STRING || strcmp(op->string, ops[k])) continue;
            if (shown++) puts_(&b, ", ");
            puts_(&b, "'");
            puts_(&b, name && name->type == MX_JSON_STRING ? name->string : "?");
            puts_(&b, "'");
        }
        if (n_nodes[k] > shown) {
            snprintf(num, sizeof(num), " and %d more", n_nodes[k] - shown);
            puts_(&b, num);
        }
        puts_(&b, ")");
    }
    mx_status s = b.failed ? MX_ERR_NOMEM : MX_ERROR(MX_ERR_FORMAT, "symbol json: %s", b.data);
    free(b.data);
    return s;
}

mx_status mx_graph_from_json(const char *json, size_t len, mx_graph **out)
{
    *out = NULL;
    mx_json *root;
    MX_TRY(mx_json_parse(json, len, &root));
    mx_status s = MX_OK;
    mx_graph *g = NULL;
    uint32_t *ids = NULL;
    const mx_json *nodes = mx_json_get(root, "nodes"), *heads = mx_json_get(root, "heads");
    const mx_json *attrs = mx_json_get(root, "attrs");
    if (root->type != MX_JSON_OBJECT || !nodes || nodes->type != MX_JSON_ARRAY)
        s = MX_ERROR(MX_ERR_FORMAT, "symbol json: no \"nodes\" array");
    else if (!heads || heads->type != MX_JSON_ARRAY)
        s = MX_ERROR(MX_ERR_FORMAT, "symbol json: no \"heads\" array");
    int version = 800; /* no version: 0.8 */
    if (s == MX_OK) s = read_version(mx_json_get(attrs, "mxnet_version"), &version);
    if (s == MX_OK) s = check_operators(nodes);
    if (s == MX_OK) s = mx_graph_create(&g);
    if (s == MX_OK) {
        /* Upgraded files are written as MXNet writes them after loading;
         * current ones keep their version, so they re-save byte for byte. */
        g->mxnet_version = version < 900 ? MXNET_VERSION : version;
        ids = mx_calloc((size_t)nodes->count + 1, sizeof(uint32_t));
        if (!ids) s = MX_ERR_NOMEM;
    }
    for (int i = 0; s == MX_OK && i < nodes->count; i++)
        s = load_node(g, nodes->items[i], i, version < MXNET_VERSION, ids);
    mx_entry *hs = NULL;
    if (s == MX_OK) {
        hs = mx_malloc(sizeof(mx_entry) * (size_t)(heads->count + 1));
        if (!hs) s = MX_ERR_NOMEM;
    }
    for (int i = 0; s == MX_OK && i < heads->count; i++) {
        s = read_entry(heads->items[i], -1, NULL, nodes->count, &hs[i]);
        if (s == MX_OK) hs[i].node = ids[hs[i].node];
    }
    if (s == MX_OK && heads->count == 0) s = MX_ERROR(MX_ERR_FORMAT, "symbol json: \"heads\" is empty");
    if (s == MX_OK) s = mx_graph_set_heads(g, hs, heads->count);
    free(hs);
    free(ids);
    mx_json_free(root);
    if (s != MX_OK) {
        mx_graph_free(g);
        return s;
    }
    *out = g;
    return MX_OK;
}

mx_status mx_graph_load_json(const char *path, mx_graph **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return MX_ERROR(MX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > ((size_t)1 << 30)) {
                fclose(f);
                free(buf);
                return MX_ERROR(MX_ERR_FORMAT, "%s: larger than 1 GiB: not a symbol file", path);
            }
            char *grown = realloc(buf, cap);
            if (!grown) {
                fclose(f);
                free(buf);
                return MX_ERROR(MX_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) {
        free(buf);
        return MX_ERROR(MX_ERR_IO, "%s: read failed", path);
    }
    mx_status s = mx_graph_from_json(buf, len, out);
    free(buf);
    if (s != MX_OK) return mx_error_prefix(s, "%s", path);
    return MX_OK;
}
