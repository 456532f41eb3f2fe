/* registry.c - the table of operators: adding one is a file and a line. */
#include "ops/op.h"

#include <string.h>

extern const mx_op_def mx_op_fully_connected;
extern const mx_op_def mx_op_softmax_output;
extern const mx_op_def mx_op_linear_regression_output;
extern const mx_op_def mx_op_logistic_regression_output;
extern const mx_op_def mx_op_mae_regression_output;
extern const mx_op_def mx_op_softmax;
extern const mx_op_def mx_op_log_softmax;
extern const mx_op_def mx_op_flatten;
extern const mx_op_def mx_op_reshape;
extern const mx_op_def mx_op_concat;
extern const mx_op_def mx_op_slice_channel;
extern const mx_op_def mx_op_transpose;
extern const mx_op_def mx_op_cast;
extern const mx_op_def mx_op_clip;
extern const mx_op_def mx_op_embedding;
extern const mx_op_def mx_op_elementwise_sum;
extern const mx_op_def mx_op_elemwise_add;
extern const mx_op_def mx_op_elemwise_sub;
extern const mx_op_def mx_op_elemwise_mul;
extern const mx_op_def mx_op_elemwise_div;
extern const mx_op_def mx_op_plus_scalar;
extern const mx_op_def mx_op_minus_scalar;
extern const mx_op_def mx_op_rminus_scalar;
extern const mx_op_def mx_op_mul_scalar;
extern const mx_op_def mx_op_div_scalar;
extern const mx_op_def mx_op_rdiv_scalar;
extern const mx_op_def mx_op_pooling;
extern const mx_op_def mx_op_activation;
extern const mx_op_def mx_op_leaky_relu;
extern const mx_op_def mx_op_batch_norm;
extern const mx_op_def mx_op_dropout;
extern const mx_op_def mx_op_lrn;
extern const mx_op_def mx_op_convolution;
extern const mx_op_def mx_op_deconvolution;

static const mx_op_def *const registry[] = {
    &mx_op_fully_connected,
    &mx_op_softmax_output,
    &mx_op_linear_regression_output,
    &mx_op_logistic_regression_output,
    &mx_op_mae_regression_output,
    &mx_op_softmax,
    &mx_op_log_softmax,
    &mx_op_flatten,
    &mx_op_reshape,
    &mx_op_concat,
    &mx_op_slice_channel,
    &mx_op_transpose,
    &mx_op_cast,
    &mx_op_clip,
    &mx_op_embedding,
    &mx_op_elementwise_sum,
    &mx_op_elemwise_add,
    &mx_op_elemwise_sub,
    &mx_op_elemwise_mul,
    &mx_op_elemwise_div,
    &mx_op_plus_scalar,
    &mx_op_minus_scalar,
    &mx_op_rminus_scalar,
    &mx_op_mul_scalar,
    &mx_op_div_scalar,
    &mx_op_rdiv_scalar,
    &mx_op_pooling,
    &mx_op_activation,
    &mx_op_leaky_relu,
    &mx_op_batch_norm,
    &mx_op_dropout,
    &mx_op_lrn,
    &mx_op_convolution,
    &mx_op_deconvolution,
};

#define REGISTRY_SIZE ((int)(sizeof(registry) / sizeof(registry[0])))

int mx_op_count(void) { return REGISTRY_SIZE; }

const mx_op_def *mx_op_at(int i) { return i >= 0 && i < REGISTRY_SIZE ? registry[i] : NULL; }

const mx_op_def *mx_op_find(const char *name)
{
    for (int i = 0; i < REGISTRY_SIZE; i++) {
        if (!strcmp(registry[i]->name, name)) return registry[i];
        for (const char *const *a = registry[i]->aliases; a && *a; a++)
            if (!strcmp(*a, name)) return registry[i];
    }
    return NULL;
}

mx_status mx_op_lookup(const char *name, const mx_op_def **out)
{
    *out = mx_op_find(name);
    if (*out) return MX_OK;
    /* Every name and alias, however many operators there are. */
    int n = 0;
    for (int i = 0; i < REGISTRY_SIZE; i++) {
        n++;
        for (const char *const *a = registry[i]->aliases; a && *a; a++) n++;
    }
    const char **names = mx_malloc(sizeof(*names) * (size_t)(n + 1));
    if (!names) return mx_last_status();
    n = 0;
    for (int i = 0; i < REGISTRY_SIZE; i++) {
        names[n++] = registry[i]->name;
        for (const char *const *a = registry[i]->aliases; a && *a; a++) names[n++] = *a;
    }
    const char *near = mx_suggest(name, names, n);
    mx_free(names);
    if (near) return MX_ERROR(MX_ERR_INVALID, "unknown operator '%s' (did you mean '%s'?)", name, near);
    return MX_ERROR(MX_ERR_INVALID, "unknown operator '%s'", name);
}

const mx_param_desc *mx_op_param(const mx_op_def *op, const char *key)
{
    return mx_params_find(op->params, op->n_params, key);
}

mx_status mx_op_parse_params(const mx_op_def *op, const char *const *keys, const char *const *values, int n, void *out)
{
    MX_TRY(mx_params_parse(op->name, op->params, op->n_params, op->params_size ? op->params_size : 1, keys, values, n,
                           out));
    return op->check ? op->check(out) : MX_OK;
}
