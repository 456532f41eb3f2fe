/* symbol_internal.h - the graph layout shared by the symbol module's files. */
#ifndef MX_SYMBOL_INTERNAL_H
#define MX_SYMBOL_INTERNAL_H

#include "symbol/symbol.h"

#include <stdbool.h>

struct mx_graph {
    mx_node *nodes;   /* topological order */
    int n_nodes, cap_nodes;
    mx_entry *heads;
    int n_heads;
    int mxnet_version; /* written to / read from JSON attrs */
    /* Name -> first node of that name, so that adding a node stays O(1)
     * and a 100,000-layer graph builds in linear time. */
    mx_name_index index;
};

/* is_aux[node] for every node (malloc'ed; NULL on allocation failure). */
bool *graph_aux_mask(const mx_graph *g);

/* Adds a copy of op node `n` (of another graph) to out with remapped
 * inputs; `no_bias` (when not NULL) replaces that parameter. */
mx_status graph_copy_op(mx_graph *out, const mx_node *n, const mx_entry *inputs, int n_inputs, const char *no_bias,
                        uint32_t *id);

/* out's heads: g's, each node mapped (map[old id] = its copy in out), and
 * g's MXNet version. */
mx_status graph_copy_heads(mx_graph *out, const mx_graph *g, const uint32_t *map);

#endif
