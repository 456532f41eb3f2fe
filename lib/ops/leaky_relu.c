/*
 * leaky_relu.c - LeakyReLU: MXNet's family of rectifiers, element-wise on
 * data of any shape:
 *   leaky  y = x > 0 ? x : slope*x
 *   prelu  y = x > 0 ? x : gamma[c]*x, gamma (C,) learned per channel
 *          (axis 1) or (1,) shared
 *   elu    y = x > 0 ? x : slope*(exp(x)-1)
 *   selu   y = lambda*(x > 0 ? x : alpha*(exp(x)-1)), SELU's constants
 *   gelu   y = x/2 * (1 + erf(x/sqrt(2)))
 * rrelu (random slopes) is refused with MX_ERR_UNSUPPORTED.
 *
 * Backward reads data (gelu, prelu and the sign tests) and the output, so
 * forward never runs in place; in_grad(data) may reuse out_grad.
 *
 * Vector kernels (simd.h; gelu stays on libm's erff) split large tensors
 * across the kernel pool by element, and prelu's gamma gradient by channel.
 */
#include "ops/op.h"
#include "ops/leaky_relu.h"
#include "ops/cpu/simd.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

static const char *const lrelu_types[] = {"rrelu", "leaky", "prelu", "elu", "selu", "gelu", NULL};

static const mx_param_desc lrelu_param_table[] = {
    {"act_type", MX_PARAM_ENUM, "leaky", 1, 0, lrelu_types, offsetof(lrelu_params, act_type),
     "leaky, prelu, elu, selu or gelu (rrelu is not supported)"},
    {"slope", MX_PARAM_FLOAT, "0.25", 1, 0, NULL, offsetof(lrelu_params, slope),
     "negative-side slope (leaky) or alpha (elu)"},
    {"lower_bound", MX_PARAM_FLOAT, "0.125", 1, 0, NULL, offsetof(lrelu_params, lower_bound),
     "rrelu only: lower bound of the random slope"},
    {"upper_bound", MX_PARAM_FLOAT, "0.334", 1, 0, NULL, offsetof(lrelu_params, upper_bound),
     "rrelu only: upper bound of the random slope"},
};

static mx_status lrelu_check(const void *p)
{
    const lrelu_params *lp = p;
    if (lp->act_type == LR_RRELU)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "LeakyReLU: parameter 'act_type' value 'rrelu' is not supported "
                                            "(use leaky, prelu, elu, selu or gelu)");
    return MX_OK;
}

static int lrelu_list_inputs(const void *p, const char **names)
{
    const lrelu_params *lp = p;
    names[0] = "data";
    if (lp->act_type != LR_PRELU) return 1;
    names[1] = "gamma";
    return 2;
}

static int lrelu_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status lrelu_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in;
    (void)n_out;
    const lrelu_params *lp = p;
    char a[128], b[128], d[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "LeakyReLU: the shape of data is unknown");
    if (lp->act_type == LR_PRELU) {
        int64_t c = in[0].ndim > 1 ? in[0].dims[1] : 1;
        if (in[1].ndim == 0) {
            in[1] = MX_SHAPE(c);
        } else if (in[1].ndim != 1 || (in[1].dims[0] != c && in[1].dims[0] != 1)) {
            mx_shape want = MX_SHAPE(c);
            return MX_ERROR(MX_ERR_INVALID, "LeakyReLU: gamma has shape %s, expected %s or (1) for data shape %s",
                            mx_shape_str(&in[1], a, sizeof(a)), mx_shape_str(&want, b, sizeof(b)),
                            mx_shape_str(&in[0], d, sizeof(d)));
        }
    }
    out[0] = in[0];
    return MX_OK;
}

/* (outer, channels, inner) of data around axis 1. */
static void prelu_dims(const mx_shape *s, int64_t *outer, int64_t *c, int64_t *inner)
{
    *outer = s->dims[0];
    *c = s->ndim > 1 ? s->dims[1] : 1;
    *inner = 1;
    for (int i = 2; i < s->ndim; i++) *inner *= s->dims[i];
}

static inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)); }

/* d gelu / dx = (1 + erf(x/sqrt2))/2 + x * exp(-x^2/2) / sqrt(2 pi). */
static inline float gelu_grad(float x)
{
    return 0.5f * (1.0f + erff(x * (float)M_SQRT1_2)) + x * expf(-0.5f * x * x) * (float)(0.5 * M_2_SQRTPI * M_SQRT1_2);
}

/* One kernel call: forward y = f(x), or backward dx = dy * f'(x, y), over
 * a range of elements, written or added; or prelu's gamma gradient over a
 * range of channels. */
typedef struct lr_job {
    int type, level;
    bool add, shared; /* shared: one gamma for all channels */
    float slope;
    const float *x, *y, *dy, *gamma;
    float *out;           /* forward output / in_grad(data) */
    int64_t outer, c, inner;
    double *dgamma;       /* shared gamma: per channel sums of x * dy over x <= 0 */
    float *dgamma_out;    /* else: gamma's gradient, written per dgamma_req */
    mx_req dgamma_req;
} lr_job;

/* elu / selu take expm1 of the negative side; gelu stays scalar (erff). */
#define LR_KERNELS(P, W, TARGET)                                                                                    \
    TARGET static void lr_forward_##P(const lr_job *j, int64_t lo, int64_t hi)                                     \
    {                                                                                                               \
        const float *x = j->x;                                                                                      \
        float *y = j->out;                                                                                          \
        const bool add = j->add;                                                                                    \
        const P##_f zero = P##_splat(0.0f), sl = P##_splat(j->slope);                                               \
        switch (j->type) {                                                                                          \
        case LR_LEAKY: MX_SIMD_MAP1(P, W, x, y, lo, hi, add, P##_select(v > zero, v, sl * v)); break;              \
        case LR_ELU: MX_SIMD_MAP1(P, W, x, y, lo, hi, add, P##_select(v > zero, v, sl * P##_expm1(v))); break;     \
        case LR_SELU:                                                                                               \
            MX_SIMD_MAP1(P, W, x, y, lo, hi, add,                                                                   \
                         SELU_LAMBDA * P##_select(v > zero, v, SELU_ALPHA * P##_expm1(v)));                         \
            break;                                                                                                  \
        case LR_PRELU:                                                                                              \
            for (int64_t s0 = lo; s0 < hi;) { /* one (outer, channel) segment at a time */                          \
                const int64_t seg = s0 / j->inner, s1 = (seg + 1) * j->inner < hi ? (seg + 1) * j->inner : hi;      \
                const P##_f g = P##_splat(j->gamma[j->shared ? 0 : seg % j->c]);                                    \
                MX_SIMD_MAP1(P, W, x, y, s0, s1, add, P##_select(v > zero, v, g * v));                              \
                s0 = s1;                                                                                            \
            }                                                                                                       \
            break;                                                                                                  \
        default:                                                                                                    \
            for (int64_t i = lo; i < hi; i++) y[i] = add ? y[i] + gelu(x[i]) : gelu(x[i]);                          \
            break;                                                                                                  \
        }                                                                                                           \
    }                                                                                                               \
    /* v = dy, u = x, w = y */                                                                                      \
    TARGET static void lr_backward_##P(const lr_job *j, int64_t lo, int64_t hi)                                    \
    {                                                                                                               \
        const float *x = j->x, *y = j->y, *dy = j->dy;                                                              \
        float *dx = j->out;                                                                                         \
        const bool add = j->add;                                                                                    \
        const P##_f zero = P##_splat(0.0f), one = P##_splat(1.0f), sl = P##_splat(j->slope);                        \
        switch (j->type) {                                                                                          \
        case LR_LEAKY: MX_SIMD_MAP2(P, W, dy, x, dx, lo, hi, add, v * P##_select(u > zero, one, sl)); break;        \
        case LR_ELU: MX_SIMD_MAP3(P, W, dy, x, y, dx, lo, hi, add, v * P##_select(u > zero, one, w + sl)); break;   \
        case LR_SELU:                                                                                               \
            MX_SIMD_MAP3(P, W, dy, x, y, dx, lo, hi, add,                                                           \
                         v * P##_select(u > zero, P##_splat(SELU_LAMBDA), w + SELU_LAMBDA * SELU_ALPHA));           \
            break;                                                                                                  \
        case LR_PRELU:                                                                                              \
            for (int64_t s0 = lo; s0 < hi;) {                                                                       \
                const int64_t seg = s0 / j->inner, s1 = (seg + 1) * j->inner < hi ? (seg + 1) * j->inner : hi;      \
                const P##_f g = P##_splat(j->gamma[j->shared ? 0 : seg % j->c]);                                    \
                MX_SIMD_MAP2(P, W, dy, x, dx, s0, s1, add, v * P##_select(u > zero, one, g));                       \
                s0 = s1;                                                                                            \
            }                                                                                                       \
            break;                                                                                                  \
        default:                                                                                                    \
            for (int64_t i = lo; i < hi; i++) {                                                                     \
                float g = dy[i] * gelu_grad(x[i]);                                                                  \
                dx[i] = add ? dx[i] + g : g;                                                                        \
            }                                                                                                       \
            break;                                                                                                  \
        }                                                                                                           \
    }                                                                                                               \
    /* dgamma[ch] for channels [lo, hi): per (outer, channel) segment a float                                       \
     * sum in W lanes, the segments added in double in outer order. */                                              \
    TARGET static void lr_dgamma_##P(const lr_job *j, int64_t lo, int64_t hi)                                      \
    {                                                                                                               \
        const P##_f zero = P##_splat(0.0f);                                                                         \
        for (int64_t ch = lo; ch < hi; ch++) {                                                                      \
            double acc = 0;                                                                                         \
            for (int64_t o = 0; o < j->outer; o++) {                                                                \
                const int64_t off = (o * j->c + ch) * j->inner, n = j->inner;                                       \
                const float *x = j->x + off, *dy = j->dy + off;                                                     \
                P##_f s = zero;                                                                                     \
                int64_t i = 0;                                                                                      \
                for (; i + W <= n; i += W) {                                                                        \
                    P##_f v = P##_load(x + i);                                                                      \
                    s += P##_select(v > zero, zero, v * P##_load(dy + i));                                          \
                }                                                                                                   \
                if (i < n) {                                                                                        \
                    P##_f v = P##_load_part(x + i, n - i);                                                          \
                    s += P##_select(v > zero, zero, v * P##_load_part(dy + i, n - i));                              \
                }                                                                                                   \
                float lanes[W], part = 0.0f;                                                                        \
                P##_store(lanes, s);                                                                                \
                for (int l = 0; l < W; l++) part += lanes[l];                                                       \
                acc += part;                                                                                        \
            }                                                                                                       \
            if (j->dgamma) j->dgamma[ch] = acc;                                                                     \
            else mx_req_assign_f32(j->dgamma_req, &j->dgamma_out[ch], (float)acc);                                  \
        }                                                                                                           \
    }

MX_SIMD_INSTANTIATE(LR_KERNELS)

static void lr_forward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const lr_job *j = arg;
    MX_SIMD_DISPATCH(j->level, lr_forward, j, lo, hi);
}

static void lr_backward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const lr_job *j = arg;
    MX_SIMD_DISPATCH(j->level, lr_backward, j, lo, hi);
}

static void lr_dgamma_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const lr_job *j = arg;
    MX_SIMD_DISPATCH(j->level, lr_dgamma, j, lo, hi);
}

/* Elements per piece on the kernel pool: maps that only select and
 * multiply are memory-bound; exp and erf cost several times more. */
#define LR_PIECE_CHEAP 16384
#define LR_PIECE_EXP 4096

static int64_t lr_piece(int type, bool backward)
{
    if (type == LR_GELU) return LR_PIECE_EXP / 2;
    return !backward && (type == LR_ELU || type == LR_SELU) ? LR_PIECE_EXP : LR_PIECE_CHEAP;
}

static lr_job lr_job_for(const lrelu_params *lp, const mx_tensor *in)
{
    lr_job j = {.type = lp->act_type, .level = mx_simd_level(), .slope = (float)lp->slope, .x = in[0].data};
    if (lp->act_type == LR_PRELU) {
        prelu_dims(&in[0].shape, &j.outer, &j.c, &j.inner);
        j.gamma = in[1].data;
        j.shared = mx_shape_size(&in[1].shape) == 1;
    }
    return j;
}

static mx_status lrelu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const lrelu_params *lp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (lp->act_type < LR_LEAKY || lp->act_type > LR_GELU)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "LeakyReLU: act_type %d is not supported", lp->act_type);
    lr_job j = lr_job_for(lp, in);
    j.add = req[0] == MX_REQ_ADD;
    j.out = out[0].data;
    int64_t n = mx_shape_size(&in[0].shape);
    if (j.type == LR_PRELU && j.inner == 0) return MX_OK;
    mx_simd_parallel_for(mx_op_pool(ctx), n, lr_piece(j.type, false), lr_forward_range, &j);
    return MX_OK;
}

static mx_status lrelu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)aux;
    const lrelu_params *lp = p;
    if (lp->act_type < LR_LEAKY || lp->act_type > LR_GELU)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "LeakyReLU: act_type %d is not supported", lp->act_type);
    mx_threadpool *pool = mx_op_pool(ctx);
    int64_t n = mx_shape_size(&in[0].shape);
    lr_job j = lr_job_for(lp, in);
    j.y = out[0].data;
    j.dy = out_grad[0].data;
    if (lp->act_type == LR_PRELU && req[1] != MX_REQ_NULL) {
        /* gamma first: in_grad(data) may share out_grad's buffer. Split by
         * channel, each summed whole by one piece: the same sums however
         * the channels are spread over threads (a shared gamma adds the
         * channels' sums afterwards, in order). */
        int64_t per_channel = j.outer * j.inner > 0 ? j.outer * j.inner : 1;
        int64_t grain = (LR_PIECE_CHEAP + per_channel - 1) / per_channel;
        if (j.shared) {
            j.dgamma = mx_calloc(j.c > 0 ? (size_t)j.c : 1, sizeof(double));
            if (!j.dgamma) return MX_ERR_NOMEM;
        } else {
            j.dgamma_out = in_grad[1].data;
            j.dgamma_req = req[1];
        }
        mx_parallel_for(n >= 2 * LR_PIECE_CHEAP ? pool : NULL, j.c, grain, lr_dgamma_range, &j);
        if (j.shared) {
            double total = 0;
            for (int64_t ch = 0; ch < j.c; ch++) total += j.dgamma[ch];
            mx_req_assign_f32(req[1], &((float *)in_grad[1].data)[0], (float)total);
            free(j.dgamma);
        }
    }
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (j.type == LR_PRELU && j.inner == 0) return MX_OK;
    j.add = req[0] == MX_REQ_ADD;
    j.out = in_grad[0].data;
    mx_simd_parallel_for(pool, n, lr_piece(j.type, true), lr_backward_range, &j);
    return MX_OK;
}

MX_OP_GPU_DECLARE(leaky_relu);

static const mx_inplace lrelu_backward_inplace[] = {{0, 0}, {-1, -1}};

const mx_op_def mx_op_leaky_relu = {
    .name = "LeakyReLU",
    .doc = "Leaky rectifiers: leaky, prelu (learned per-channel slope), elu, selu, gelu.",
    .params = lrelu_param_table,
    .n_params = (int)(sizeof(lrelu_param_table) / sizeof(lrelu_param_table[0])),
    .params_size = sizeof(lrelu_params),
    .check = lrelu_check,
    .list_inputs = lrelu_list_inputs,
    .list_outputs = lrelu_list_outputs,
    .infer_shape = lrelu_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA | MX_BWD_OUT_DATA,
    .backward_inplace = lrelu_backward_inplace,
    .forward = lrelu_forward,
    .backward = lrelu_backward,
    .gpu = MX_OP_GPU(leaky_relu),
};
