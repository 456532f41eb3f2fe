/*
 * graphs.h - building small symbol graphs in the tests that bind whole
 * networks (executor suites).
 */
#ifndef MX_TEST_GRAPHS_H
#define MX_TEST_GRAPHS_H

#include "symbol/symbol.h"

/* Adds operator `type` named `name` with params "k=v;k=v" (NULL: none) over
 * n_in inputs; fails the test on error. Returns the node. */
uint32_t test_graph_op(mx_graph *g, const char *type, const char *name, const char *params, mx_entry *in, int n_in);

static inline mx_entry test_entry(uint32_t node) { return (mx_entry){node, 0}; }

/* A new graph holding one variable, "data" (*data: its entry). */
mx_graph *test_graph_new(mx_entry *data);

#endif /* MX_TEST_GRAPHS_H */
