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
/* issue 17: shapes, reductions, normalisation */
extern const mx_op_def mx_op_sum;
extern const mx_op_def mx_op_mean;
extern const mx_op_def mx_op_max;
extern const mx_op_def mx_op_min;
extern const mx_op_def mx_op_prod;
extern const mx_op_def mx_op_norm;
extern const mx_op_def mx_op_layer_norm;
extern const mx_op_def mx_op_group_norm;
extern const mx_op_def mx_op_instance_norm;
extern const mx_op_def mx_op_l2_normalization;
extern const mx_op_def mx_op_expand_dims;
extern const mx_op_def mx_op_squeeze;
extern const mx_op_def mx_op_slice;
extern const mx_op_def mx_op_slice_axis;
extern const mx_op_def mx_op_slice_like;
extern const mx_op_def mx_op_take;
extern const mx_op_def mx_op_one_hot;
extern const mx_op_def mx_op_stack;
extern const mx_op_def mx_op_tile;
extern const mx_op_def mx_op_repeat;
extern const mx_op_def mx_op_batch_dot;
extern const mx_op_def mx_op_pad;
extern const mx_op_def mx_op_upsampling;
/* issue 17: element-wise family */
extern const mx_op_def mx_op_relu;
extern const mx_op_def mx_op_sigmoid;
extern const mx_op_def mx_op_tanh;
extern const mx_op_def mx_op_softsign;
extern const mx_op_def mx_op_exp;
extern const mx_op_def mx_op_expm1;
extern const mx_op_def mx_op_log;
extern const mx_op_def mx_op_log2;
extern const mx_op_def mx_op_log10;
extern const mx_op_def mx_op_log1p;
extern const mx_op_def mx_op_sqrt;
extern const mx_op_def mx_op_rsqrt;
extern const mx_op_def mx_op_cbrt;
extern const mx_op_def mx_op_rcbrt;
extern const mx_op_def mx_op_square;
extern const mx_op_def mx_op_abs;
extern const mx_op_def mx_op_negative;
extern const mx_op_def mx_op_reciprocal;
extern const mx_op_def mx_op_sign;
extern const mx_op_def mx_op_floor;
extern const mx_op_def mx_op_ceil;
extern const mx_op_def mx_op_round;
extern const mx_op_def mx_op_rint;
extern const mx_op_def mx_op_fix;
extern const mx_op_def mx_op_trunc;
extern const mx_op_def mx_op_logical_not;
extern const mx_op_def mx_op_erf;
extern const mx_op_def mx_op_erfinv;
extern const mx_op_def mx_op_gamma;
extern const mx_op_def mx_op_gammaln;
extern const mx_op_def mx_op_sin;
extern const mx_op_def mx_op_cos;
extern const mx_op_def mx_op_tan;
extern const mx_op_def mx_op_arcsin;
extern const mx_op_def mx_op_arccos;
extern const mx_op_def mx_op_arctan;
extern const mx_op_def mx_op_sinh;
extern const mx_op_def mx_op_cosh;
extern const mx_op_def mx_op_arcsinh;
extern const mx_op_def mx_op_arccosh;
extern const mx_op_def mx_op_arctanh;
extern const mx_op_def mx_op_degrees;
extern const mx_op_def mx_op_radians;
extern const mx_op_def mx_op_hard_sigmoid;
extern const mx_op_def mx_op_power_scalar;
extern const mx_op_def mx_op_rpower_scalar;
extern const mx_op_def mx_op_maximum_scalar;
extern const mx_op_def mx_op_minimum_scalar;
extern const mx_op_def mx_op_mod_scalar;
extern const mx_op_def mx_op_rmod_scalar;
extern const mx_op_def mx_op_hypot_scalar;
extern const mx_op_def mx_op_equal_scalar;
extern const mx_op_def mx_op_not_equal_scalar;
extern const mx_op_def mx_op_greater_scalar;
extern const mx_op_def mx_op_greater_equal_scalar;
extern const mx_op_def mx_op_lesser_scalar;
extern const mx_op_def mx_op_lesser_equal_scalar;
extern const mx_op_def mx_op_logical_and_scalar;
extern const mx_op_def mx_op_logical_or_scalar;
extern const mx_op_def mx_op_logical_xor_scalar;
extern const mx_op_def mx_op_smooth_l1;
extern const mx_op_def mx_op_maximum;
extern const mx_op_def mx_op_minimum;
extern const mx_op_def mx_op_power;
extern const mx_op_def mx_op_mod;
extern const mx_op_def mx_op_hypot;
extern const mx_op_def mx_op_equal;
extern const mx_op_def mx_op_not_equal;
extern const mx_op_def mx_op_greater;
extern const mx_op_def mx_op_greater_equal;
extern const mx_op_def mx_op_lesser;
extern const mx_op_def mx_op_lesser_equal;
extern const mx_op_def mx_op_logical_and;
extern const mx_op_def mx_op_logical_or;
extern const mx_op_def mx_op_logical_xor;
extern const mx_op_def mx_op_broadcast_add;
extern const mx_op_def mx_op_broadcast_sub;
extern const mx_op_def mx_op_broadcast_mul;
extern const mx_op_def mx_op_broadcast_div;
extern const mx_op_def mx_op_broadcast_power;
extern const mx_op_def mx_op_broadcast_maximum;
extern const mx_op_def mx_op_broadcast_minimum;
extern const mx_op_def mx_op_broadcast_mod;
extern const mx_op_def mx_op_broadcast_hypot;
extern const mx_op_def mx_op_broadcast_equal;
extern const mx_op_def mx_op_broadcast_not_equal;
extern const mx_op_def mx_op_broadcast_greater;
extern const mx_op_def mx_op_broadcast_greater_equal;
extern const mx_op_def mx_op_broadcast_lesser;
extern const mx_op_def mx_op_broadcast_lesser_equal;
extern const mx_op_def mx_op_broadcast_logical_and;
extern const mx_op_def mx_op_broadcast_logical_or;
extern const mx_op_def mx_op_broadcast_logical_xor;
extern const mx_op_def mx_op_block_grad;
extern const mx_op_def mx_op_copy;
extern const mx_op_def mx_op_identity_with_attr_like_rhs;
extern const mx_op_def mx_op_zeros_like;
extern const mx_op_def mx_op_ones_like;
extern const mx_op_def mx_op_amp_cast;
extern const mx_op_def mx_op_where;

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
    /* issue 17: shapes, reductions, normalisation */
    &mx_op_sum,
    &mx_op_mean,
    &mx_op_max,
    &mx_op_min,
    &mx_op_prod,
    &mx_op_norm,
    &mx_op_layer_norm,
    &mx_op_group_norm,
    &mx_op_instance_norm,
    &mx_op_l2_normalization,
    &mx_op_expand_dims,
    &mx_op_squeeze,
    &mx_op_slice,
    &mx_op_slice_axis,
    &mx_op_slice_like,
    &mx_op_take,
    &mx_op_one_hot,
    &mx_op_stack,
    &mx_op_tile,
    &mx_op_repeat,
    &mx_op_batch_dot,
    &mx_op_pad,
    &mx_op_upsampling,
    /* issue 17: element-wise family */
    &mx_op_relu,
    &mx_op_sigmoid,
    &mx_op_tanh,
    &mx_op_softsign,
    &mx_op_exp,
    &mx_op_expm1,
    &mx_op_log,
    &mx_op_log2,
    &mx_op_log10,
    &mx_op_log1p,
    &mx_op_sqrt,
    &mx_op_rsqrt,
    &mx_op_cbrt,
    &mx_op_rcbrt,
    &mx_op_square,
    &mx_op_abs,
    &mx_op_negative,
    &mx_op_reciprocal,
    &mx_op_sign,
    &mx_op_floor,
    &mx_op_ceil,
    &mx_op_round,
    &mx_op_rint,
    &mx_op_fix,
    &mx_op_trunc,
    &mx_op_logical_not,
    &mx_op_erf,
    &mx_op_erfinv,
    &mx_op_gamma,
    &mx_op_gammaln,
    &mx_op_sin,
    &mx_op_cos,
    &mx_op_tan,
    &mx_op_arcsin,
    &mx_op_arccos,
    &mx_op_arctan,
    &mx_op_sinh,
    &mx_op_cosh,
    &mx_op_arcsinh,
    &mx_op_arccosh,
    &mx_op_arctanh,
    &mx_op_degrees,
    &mx_op_radians,
    &mx_op_hard_sigmoid,
    &mx_op_power_scalar,
    &mx_op_rpower_scalar,
    &mx_op_maximum_scalar,
    &mx_op_minimum_scalar,
    &mx_op_mod_scalar,
    &mx_op_rmod_scalar,
    &mx_op_hypot_scalar,
    &mx_op_equal_scalar,
    &mx_op_not_equal_scalar,
    &mx_op_greater_scalar,
    &mx_op_greater_equal_scalar,
    &mx_op_lesser_scalar,
    &mx_op_lesser_equal_scalar,
    &mx_op_logical_and_scalar,
    &mx_op_logical_or_scalar,
    &mx_op_logical_xor_scalar,
    &mx_op_smooth_l1,
    &mx_op_maximum,
    &mx_op_minimum,
    &mx_op_power,
    &mx_op_mod,
    &mx_op_hypot,
    &mx_op_equal,
    &mx_op_not_equal,
    &mx_op_greater,
    &mx_op_greater_equal,
    &mx_op_lesser,
    &mx_op_lesser_equal,
    &mx_op_logical_and,
    &mx_op_logical_or,
    &mx_op_logical_xor,
    &mx_op_broadcast_add,
    &mx_op_broadcast_sub,
    &mx_op_broadcast_mul,
    &mx_op_broadcast_div,
    &mx_op_broadcast_power,
    &mx_op_broadcast_maximum,
    &mx_op_broadcast_minimum,
    &mx_op_broadcast_mod,
    &mx_op_broadcast_hypot,
    &mx_op_broadcast_equal,
    &mx_op_broadcast_not_equal,
    &mx_op_broadcast_greater,
    &mx_op_broadcast_greater_equal,
    &mx_op_broadcast_lesser,
    &mx_op_broadcast_lesser_equal,
    &mx_op_broadcast_logical_and,
    &mx_op_broadcast_logical_or,
    &mx_op_broadcast_logical_xor,
    &mx_op_block_grad,
    &mx_op_copy,
    &mx_op_identity_with_attr_like_rhs,
    &mx_op_zeros_like,
    &mx_op_ones_like,
    &mx_op_amp_cast,
    &mx_op_where,
};

#define REGISTRY_SIZE ((int)(sizeof(registry) / sizeof(registry[0])))

int mx_op_count(void) { return REGISTRY_SIZE; }

mx_status mx_op_kernels_for(const mx_op_def *op, mx_context ctx, mx_op_kernels *out)
{
    if (ctx.dev_type == MX_DEV_CPU) {
        *out = (mx_op_kernels){op->forward, op->backward, op->state_free, op->cpu_dtypes};
        return MX_OK;
    }
    char name[32];
    mx_context_str(ctx, name, sizeof(name));
    if (ctx.dev_type == MX_DEV_GPU && op->gpu) {
        *out = *op->gpu;
        return MX_OK;
    }
#ifdef MX_USE_CUDA
    return MX_ERROR(MX_ERR_UNSUPPORTED, "operator '%s' has no kernel for %s", op->name, name);
#else
    return MX_ERROR(MX_ERR_UNSUPPORTED, "operator '%s' has no kernel for %s in this build without CUDA", op->name,
                    name);
#endif
}

mx_status mx_op_infer_type_same(const char *op, int *in, int n_in, int *out, int n_out)
{
    int dtype = -1;
    for (int j = 0; j < n_in && dtype < 0; j++) dtype = in[j];
    if (dtype < 0) dtype = MX_FLOAT32;
    for (int j = 0; j < n_in; j++) {
        if (in[j] >= 0 && in[j] != dtype)
            return MX_ERROR(MX_ERR_INVALID, "%s: input %d is %s where the layer computes in %s", op, j,
                            mx_dtype_name((mx_dtype)in[j]), mx_dtype_name((mx_dtype)dtype));
        in[j] = dtype;
    }
    for (int k = 0; k < n_out; k++) {
        if (out[k] >= 0 && out[k] != dtype)
            return MX_ERROR(MX_ERR_INVALID, "%s: output %d is %s where the layer computes in %s", op, k,
                            mx_dtype_name((mx_dtype)out[k]), mx_dtype_name((mx_dtype)dtype));
        out[k] = dtype;
    }
    return MX_OK;
}

mx_status mx_op_infer_type_index(const char *op, int index_input, int *in, int n_in, int *out, int n_out)
{
    int rest[MX_OP_MAX_IO], m = 0;
    for (int j = 0; j < n_in; j++)
        if (j != index_input) rest[m++] = in[j];
    MX_TRY(mx_op_infer_type_same(op, rest, m, out, n_out));
    m = 0;
    for (int j = 0; j < n_in; j++)
        if (j != index_input) in[j] = rest[m++];
    if (index_input < n_in && in[index_input] < 0) in[index_input] = MX_FLOAT32;
    return MX_OK;
}

mx_status mx_op_infer_type(const mx_op_def *op, const void *params, int *in, int n_in, int *out, int n_out)
{
    return op->infer_type ? op->infer_type(params, in, n_in, out, n_out)
                          : mx_op_infer_type_same(op->name, in, n_in, out, n_out);
}

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
