/* graphs.c - small symbol graphs for the tests (graphs.h). */
#include "support/graphs.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

uint32_t test_graph_op(mx_graph *g, const char *type, const char *name, const char *params, mx_entry *in, int n_in)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", params ? params : "");
    const char *keys[16], *values[16];
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ";", &save); tok && n < 16; tok = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(tok, '=');
        ck_assert_msg(eq != NULL, "%s: parameter '%s' is not k=v", name, tok);
        *eq = '\0';
        keys[n] = tok;
        values[n++] = eq + 1;
    }
    uint32_t id;
    ck_assert_msg(mx_graph_add_op(g, type, name, keys, values, n, in, n_in, NULL, 0, &id) == MX_OK, "%s: %s", name,
                  mx_last_error());
    return id;
}

mx_graph *test_graph_new(mx_entry *data)
{
    mx_graph *g;
    uint32_t id;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    ck_assert_int_eq(mx_graph_add_variable(g, "data", NULL, 0, &id), MX_OK);
    *data = test_entry(id);
    return g;
}
