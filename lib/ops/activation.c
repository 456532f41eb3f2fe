/*
 * activation.c - Activation: an element-wise nonlinearity, MXNet's
 * act_type relu, sigmoid, tanh, softrelu (softplus) and softsign.
 * data and output have the same (any) shape.
 *
 * Backward needs only out_grad and the output: every derivative here is a
 * function of y, so forward may overwrite data in place. softsign, whose
 * derivative MXNet computes from the input as 1/(1+|x|)^2, uses the
 * identity 1/(1+|x|) = 1-|y| instead.
 *
 * The kernels run on the widest vector unit the CPU has (simd.h: 16, 8 or
 * 4 floats) and split tensors of more than a few thousand elements across
 * the kernel pool; every element is computed the same way wherever a piece
 * boundary falls.
 */
#include "ops/op.h"
#include "ops/activation.h"
#include "ops/cpu/simd.h"

#include <math.h>
#include <stddef.h>

static const char *const act_types[] = {"relu", "sigmoid", "tanh", "softrelu", "softsign", NULL};

static const mx_param_desc act_param_table[] = {
    {"act_type", MX_PARAM_ENUM, NULL, 1, 0, act_types, offsetof(act_params, act_type),
     "activation function: relu, sigmoid, tanh, softrelu or softsign"},
};

static int act_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int act_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status act_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p;
    (void)n_in;
    (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Activation: the shape of data is unknown");
    out[0] = in[0];
    return MX_OK;
}

/* softrelu(x) = log(1 + exp(x)), returning x itself past 20 where the two
 * agree in float (MXNet's threshold, which also avoids exp overflow). It
 * stays on libm (split across threads, element by element): a vector
 * log1p(exp(-|x|)) + max(x, 0) on Cephes' logf was as accurate (1.6 ulp)
 * and 20x faster, but rounds differently, and the float finite differences
 * of test_executor's residual net, which have no margin to spare at one
 * point, need these exact values. */
static inline float softrelu(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The kernels, one per width (simd.h): forward y = f(x) and backward
 * dx = dy * f'(y) over a range of elements, written or added.
 *   softrelu'   = 1 - exp(-y) = -expm1(-y);
 *   softsign'   = (1 - |y|)^2 (1/(1+|x|) = 1-|y|).
 * relu keeps MXNet's forms: x > 0 ? x : 0 (NaN gives 0) and dy * (y > 0). */
typedef struct act_job {
    int type, level;
    bool add;
    const float *x, *dy; /* forward input / backward out_grad */
    const float *y;      /* backward: forward output */
    float *out;          /* forward output / backward in_grad */
} act_job;

#define ACT_KERNELS(P, W, TARGET)                                                                                   \
    TARGET static void act_forward_##P(const act_job *j, int64_t lo, int64_t hi)                                   \
    {                                                                                                               \
        const float *x = j->x;                                                                                      \
        float *y = j->out;                                                                                          \
        const bool add = j->add;                                                                                    \
        switch (j->type) {                                                                                          \
        case ACT_RELU: MX_SIMD_MAP1(P, W, x, y, lo, hi, add, P##_relu(v)); break;                                  \
        case ACT_SIGMOID: MX_SIMD_MAP1(P, W, x, y, lo, hi, add, P##_sigmoid(v)); break;                             \
        case ACT_TANH: MX_SIMD_MAP1(P, W, x, y, lo, hi, add, P##_tanh(v)); break;                                   \
        case ACT_SOFTRELU:                                                                                          \
            for (int64_t i = lo; i < hi; i++) y[i] = add ? y[i] + softrelu(x[i]) : softrelu(x[i]);                  \
            break;                                                                                                  \
        default: MX_SIMD_MAP1(P, W, x, y, lo, hi, add, v / (1.0f + P##_abs(v))); break;                             \
        }                                                                                                           \
    }                                                                                                               \
    TARGET static void act_backward_##P(const act_job *j, int64_t lo, int64_t hi)                                  \
    {                                                                                                               \
        const float *dy = j->dy, *y = j->y;                                                                         \
        float *dx = j->out;                                                                                         \
        const bool add = j->add;                                                                                    \
        const P##_f zero = P##_splat(0.0f), one = P##_splat(1.0f);                                                  \
        /* v = dy, u = y */                                                                                         \
        switch (j->type) {                                                                                          \
        case ACT_RELU: MX_SIMD_MAP2(P, W, dy, y, dx, lo, hi, add, v * P##_select(u > zero, one, zero)); break;      \
        case ACT_SIGMOID: MX_SIMD_MAP2(P, W, dy, y, dx, lo, hi, add, v * (u * (1.0f - u))); break;                  \
        case ACT_TANH: MX_SIMD_MAP2(P, W, dy, y, dx, lo, hi, add, v * (1.0f - u * u)); break;                       \
        case ACT_SOFTRELU: MX_SIMD_MAP2(P, W, dy, y, dx, lo, hi, add, v * -P##_expm1(-u)); break;                   \
        default: MX_SIMD_MAP2(P, W, dy, y, dx, lo, hi, add, v * ((1.0f - P##_abs(u)) * (1.0f - P##_abs(u)))); break; \
        }                                                                                                           \
    }

MX_SIMD_INSTANTIATE(ACT_KERNELS)

static void act_forward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const act_job *j = arg;
    MX_SIMD_DISPATCH(j->level, act_forward, j, lo, hi);
}

static void act_backward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const act_job *j = arg;
    MX_SIMD_DISPATCH(j->level, act_backward, j, lo, hi);
}

/* Elements per piece when split across the kernel pool: transcendental
 * forwards cost ~10x a memory-bound map. */
#define ACT_PIECE_CHEAP 16384
#define ACT_PIECE_EXP 4096

static int64_t act_piece(int act_type, bool backward)
{
    if (act_type == ACT_RELU || act_type == ACT_SOFTSIGN) return ACT_PIECE_CHEAP;
    if (backward) return act_type == ACT_SOFTRELU ? ACT_PIECE_EXP : ACT_PIECE_CHEAP;
    return act_type == ACT_SOFTRELU ? ACT_PIECE_EXP / 4 : ACT_PIECE_EXP;
}

void mx_activation_fold_rows(int simd_level, int act_type, float *y, int64_t n)
{
    act_job j = {.type = act_type, .level = simd_level, .x = y, .out = y};
    MX_SIMD_DISPATCH(j.level, act_forward, &j, 0, n);
}

void mx_activation_fold_forward(mx_threadpool *pool, int act_type, float *y, int64_t n)
{
    act_job j = {.type = act_type, .level = mx_simd_level(), .x = y, .out = y};
    mx_simd_parallel_for(pool, n, act_piece(act_type, false), act_forward_range, &j);
}

void mx_activation_fold_backward(mx_threadpool *pool, int act_type, float *dy, const float *y, int64_t n)
{
    act_job j = {.type = act_type, .level = mx_simd_level(), .dy = dy, .y = y, .out = dy};
    mx_simd_parallel_for(pool, n, act_piece(act_type, true), act_backward_range, &j);
}

void mx_activation_fold_backward_rows(int simd_level, int act_type, const float *dy, const float *y, float *out,
                                      int64_t n)
{
    act_job j = {.type = act_type, .level = simd_level, .dy = dy, .y = y, .out = out};
    MX_SIMD_DISPATCH(j.level, act_backward, &j, 0, n);
}

static mx_status act_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const act_params *ap = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (ap->act_type < ACT_RELU || ap->act_type > ACT_SOFTSIGN)
        return MX_ERROR(MX_ERR_INVALID, "Activation: unknown act_type %d", ap->act_type);
    act_job j = {.type = ap->act_type, .level = mx_simd_level(), .add = req[0] == MX_REQ_ADD, .x = in[0].data,
                 .out = out[0].data};
    mx_simd_parallel_for(mx_op_pool(ctx), mx_shape_size(&in[0].shape), act_piece(ap->act_type, false),
                         act_forward_range, &j);
    return MX_OK;
}

static mx_status act_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)in;
    (void)aux;
    const act_params *ap = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (ap->act_type < ACT_RELU || ap->act_type > ACT_SOFTSIGN)
        return MX_ERROR(MX_ERR_INVALID, "Activation: unknown act_type %d", ap->act_type);
    act_job j = {.type = ap->act_type, .level = mx_simd_level(), .add = req[0] == MX_REQ_ADD, .dy = out_grad[0].data,
                 .y = out[0].data, .out = in_grad[0].data};
    mx_simd_parallel_for(mx_op_pool(ctx), mx_shape_size(&out[0].shape), act_piece(ap->act_type, true),
                         act_backward_range, &j);
    return MX_OK;
}

static const mx_inplace act_inplace[] = {{0, 0}, {-1, -1}};

MX_OP_GPU_DECLARE(activation);

const mx_op_def mx_op_activation = {
    .name = "Activation",
    .doc = "Applies an activation function element-wise: relu, sigmoid, tanh, softrelu or softsign.",
    .params = act_param_table,
    .n_params = (int)(sizeof(act_param_table) / sizeof(act_param_table[0])),
    .params_size = sizeof(act_params),
    .list_inputs = act_list_inputs,
    .list_outputs = act_list_outputs,
    .infer_shape = act_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_OUT_DATA,
    .forward_inplace = act_inplace,
    .backward_inplace = act_inplace,
    .forward = act_forward,
    .backward = act_backward,
    .gpu = MX_OP_GPU(activation),
};
