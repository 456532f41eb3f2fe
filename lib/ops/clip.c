/*
 * clip.c - clip: out = min(max(x, a_min), a_max) element-wise. The gradient
 * passes where a_min <= x <= a_max and is zero outside (MXNet's clip_grad).
 * On the widest vector unit the CPU has (simd.h), split across the kernel
 * pool; clamping is exact, so every split gives the same bits.
 */
#include "ops/op.h"
#include "ops/clip.h"
#include "ops/cpu/simd.h"

#include <stddef.h>


static const mx_param_desc clip_param_table[] = {
    {"a_min", MX_PARAM_FLOAT, NULL, 1, 0, NULL, offsetof(clip_params, a_min), "minimum value"},
    {"a_max", MX_PARAM_FLOAT, NULL, 1, 0, NULL, offsetof(clip_params, a_max), "maximum value"},
};

/* MXNet accepts a_min > a_max (every value becomes a_max); here it is
 * reported as the mistake it almost surely is. */
static mx_status clip_check(const void *p)
{
    const clip_params *cp = p;
    if (cp->a_min > cp->a_max)
        return MX_ERROR(MX_ERR_INVALID, "clip: parameter 'a_min' (%g) is greater than 'a_max' (%g)", cp->a_min,
                        cp->a_max);
    return MX_OK;
}

static int clip_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int clip_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status clip_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "clip: the shape of data is unknown");
    out[0] = in[0];
    return MX_OK;
}

/* The kernels, one per width (simd.h), over a range of elements:
 * forward y = x > hi ? hi : x < lo ? lo : x (NaN stays NaN), written or
 * added; backward from the input, dx = dy where lo <= x <= hi (MXNet's
 * clip_grad); and, for a clip folded into the op before it, from the
 * output in place: dy = 0 unless lo < y < hi. */
typedef struct clip_job {
    int level;
    bool add;
    float lo, hi;
    const float *x, *dy;
    float *out;
} clip_job;

#define CLIP_KERNELS(P, W, TARGET)                                                                                  \
    TARGET static void clip_forward_##P(const clip_job *j, int64_t lo, int64_t hi)                                 \
    {                                                                                                               \
        const P##_f l = P##_splat(j->lo), h = P##_splat(j->hi);                                                     \
        MX_SIMD_MAP1(P, W, j->x, j->out, lo, hi, j->add, P##_clip(v, l, h));                                        \
    }                                                                                                               \
    TARGET static void clip_backward_##P(const clip_job *j, int64_t lo, int64_t hi)                                \
    {                                                                                                               \
        const P##_f l = P##_splat(j->lo), h = P##_splat(j->hi), zero = P##_splat(0.0f);                             \
        /* v = x, u = dy */                                                                                         \
        MX_SIMD_MAP2(P, W, j->x, j->dy, j->out, lo, hi, j->add, P##_select((v > h) | (v < l), zero, u));            \
    }                                                                                                               \
    TARGET static void clip_fold_backward_##P(const clip_job *j, int64_t lo, int64_t hi)                           \
    {                                                                                                               \
        const P##_f l = P##_splat(j->lo), h = P##_splat(j->hi), zero = P##_splat(0.0f);                             \
        /* v = y, u = dy */                                                                                         \
        MX_SIMD_MAP2(P, W, j->x, j->dy, j->out, lo, hi, false, P##_select((v > l) & (v < h), u, zero));             \
    }

MX_SIMD_INSTANTIATE(CLIP_KERNELS)

static void clip_forward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const clip_job *j = arg;
    MX_SIMD_DISPATCH(j->level, clip_forward, j, lo, hi);
}

static void clip_backward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const clip_job *j = arg;
    MX_SIMD_DISPATCH(j->level, clip_backward, j, lo, hi);
}

static void clip_fold_backward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const clip_job *j = arg;
    MX_SIMD_DISPATCH(j->level, clip_fold_backward, j, lo, hi);
}

#define CLIP_PIECE 16384 /* elements per piece on the kernel pool: a memory-bound map */

void mx_clip_fold_rows(int simd_level, float lo, float hi, float *y, int64_t n)
{
    clip_job j = {.level = simd_level, .lo = lo, .hi = hi, .x = y, .out = y};
    MX_SIMD_DISPATCH(j.level, clip_forward, &j, 0, n);
}

void mx_clip_fold_forward(mx_threadpool *pool, float lo, float hi, float *y, int64_t n)
{
    clip_job j = {.level = mx_simd_level(), .lo = lo, .hi = hi, .x = y, .out = y};
    mx_simd_parallel_for(pool, n, CLIP_PIECE, clip_forward_range, &j);
}

void mx_clip_fold_backward_rows(int simd_level, float lo, float hi, const float *dy, const float *y, float *out,
                                int64_t n)
{
    clip_job j = {.level = simd_level, .lo = lo, .hi = hi, .x = y, .dy = dy, .out = out};
    MX_SIMD_DISPATCH(j.level, clip_fold_backward, &j, 0, n);
}

void mx_clip_fold_backward(mx_threadpool *pool, float lo, float hi, float *dy, const float *y, int64_t n)
{
    clip_job j = {.level = mx_simd_level(), .lo = lo, .hi = hi, .x = y, .dy = dy, .out = dy};
    mx_simd_parallel_for(pool, n, CLIP_PIECE, clip_fold_backward_range, &j);
}

static mx_status clip_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const clip_params *cp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    clip_job j = {.level = mx_simd_level(), .add = req[0] == MX_REQ_ADD, .lo = (float)cp->a_min,
                  .hi = (float)cp->a_max, .x = in[0].data, .out = out[0].data};
    mx_simd_parallel_for(mx_op_pool(ctx), mx_shape_size(&in[0].shape), CLIP_PIECE, clip_forward_range, &j);
    return MX_OK;
}

static mx_status clip_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out, (void)aux;
    const clip_params *cp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    clip_job j = {.level = mx_simd_level(), .add = req[0] == MX_REQ_ADD, .lo = (float)cp->a_min,
                  .hi = (float)cp->a_max, .x = in[0].data, .dy = out_grad[0].data, .out = in_grad[0].data};
    mx_simd_parallel_for(mx_op_pool(ctx), mx_shape_size(&in[0].shape), CLIP_PIECE, clip_backward_range, &j);
    return MX_OK;
}

static const mx_inplace clip_inplace[] = {{0, 0}, {-1, -1}};

MX_OP_GPU_DECLARE(clip);

const mx_op_def mx_op_clip = {
    .name = "clip",
    .doc = "Clips values to [a_min, a_max].",
    .params = clip_param_table,
    .n_params = (int)(sizeof(clip_param_table) / sizeof(clip_param_table[0])),
    .params_size = sizeof(clip_params),
    .check = clip_check,
    .list_inputs = clip_list_inputs,
    .list_outputs = clip_list_outputs,
    .infer_shape = clip_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .forward_inplace = clip_inplace,
    .backward_inplace = clip_inplace,
    .forward = clip_forward,
    .backward = clip_backward,
    .gpu = MX_OP_GPU(clip),
};
