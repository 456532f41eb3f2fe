/*
 * unary_math.cu - the element-wise math of unary_math.c on the GPU: one
 * templated kernel per direction, one functor per op. The plain ops take
 * f and f' from the table in unary_math.h (the CPU's own expressions; the
 * helpers there are host and device code); the six vector ops of the CPU
 * (relu, sigmoid, tanh, softsign, exp, expm1) use CUDA's float libm with
 * the CPU's formulas and gradient conventions (relu keeps NaN; gradients
 * from y). Rounding, sign and comparison ops write zeros for write
 * requests and leave add requests alone, as the CPU does. Each element is
 * read before it is written, so the in-place options hold.
 */
#include "ops/cuda/cuda_op.h"
#include "ops/unary_math.h"

/* ------------------------------------------------------------ functors */

/* f(a) = y; g(a, o) = dy/dx given a = x and/or o = y. */
struct unf_relu {
    static __device__ float f(float a) { return a != a ? a : (a > 0.0f ? a : 0.0f); }
    static __device__ float g(float, float o) { return o != o ? o : (o > 0.0f ? 1.0f : 0.0f); }
};
struct unf_sigmoid {
    static __device__ float f(float a) { return 1.0f / (1.0f + expf(-a)); }
    static __device__ float g(float, float o) { return o * (1.0f - o); }
};
struct unf_tanh {
    static __device__ float f(float a) { return tanhf(a); }
    static __device__ float g(float, float o) { return 1.0f - o * o; }
};
struct unf_softsign {
    static __device__ float f(float a) { return a / (1.0f + fabsf(a)); }
    static __device__ float g(float, float o) { return (1.0f - fabsf(o)) * (1.0f - fabsf(o)); }
};
struct unf_exp {
    static __device__ float f(float a) { return expf(a); }
    static __device__ float g(float, float o) { return o; }
};
struct unf_expm1 {
    static __device__ float f(float a) { return expm1f(a); }
    static __device__ float g(float, float o) { return o + 1.0f; }
};

#define UN_FUNCTOR(id, opname, aliases_, gkind, FWD, GRAD, docstr)                                                \
    struct unf_##id {                                                                                              \
        static __device__ float f(float a) { return FWD; }                                                        \
        static __device__ float g(float a, float o)                                                               \
        {                                                                                                         \
            (void)a, (void)o;                                                                                     \
            return GRAD;                                                                                          \
        }                                                                                                         \
    };
UNARY_PLAIN(UN_FUNCTOR)

/* ------------------------------------------------------------ kernels */

template <class F> __global__ void un_fwd_k(int64_t n, const float *x, float *y, mx_req req)
{
    MX_CUDA_FOR(i, n) mx_cuda_assign(req, &y[i], F::f(x[i]));
}

/* G: UG_IN (reads x), UG_OUT (reads y), UG_CONST (neither). */
template <class F, int G> __global__ void un_bwd_k(int64_t n, const float *dy, const float *x, const float *y,
                                                   float *dx, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float v;
        if constexpr (G == UG_IN) v = dy[i] * F::g(x[i], 0.0f);
        else if constexpr (G == UG_OUT) v = dy[i] * F::g(0.0f, y[i]);
        else v = dy[i] * F::g(0.0f, 0.0f);
        mx_cuda_assign(req, &dx[i], v);
    }
}

__global__ void un_zero_k(int64_t n, float *dx)
{
    MX_CUDA_FOR(i, n) dx[i] = 0.0f;
}

template <class F>
static mx_status un_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)p, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    if (n <= 0) return MX_OK;
    un_fwd_k<F><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(n, (const float *)in[0].data,
                                                                                   (float *)out[0].data, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

template <class F, int G>
static mx_status un_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                 const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)p, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in_grad[0].shape);
    if (n <= 0) return MX_OK;
    cudaStream_t st = mx_cuda_op_stream(ctx);
    if constexpr (G == UG_ZERO) {
        if (req[0] == MX_REQ_ADD) return MX_OK; /* adds zero */
        un_zero_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, st>>>(n, (float *)in_grad[0].data);
    } else {
        /* Only what backward_deps keeps alive is read. */
        const float *x = G == UG_IN ? (const float *)in[0].data : NULL;
        const float *y = G == UG_OUT ? (const float *)out[0].data : NULL;
        un_bwd_k<F, G><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, st>>>(n, (const float *)out_grad[0].data, x, y,
                                                                      (float *)in_grad[0].data, req[0]);
    }
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

#define UN_GPU(id, G) \
    extern "C" const mx_op_kernels mx_op_gpu_##id = {un_gpu_forward<unf_##id>, un_gpu_backward<unf_##id, G>, NULL, 0};

UN_GPU(relu, UG_OUT)
UN_GPU(sigmoid, UG_OUT)
UN_GPU(tanh, UG_OUT)
UN_GPU(softsign, UG_OUT)
UN_GPU(exp, UG_OUT)
UN_GPU(expm1, UG_OUT)

#define UN_GPU_PLAIN(id, opname, aliases_, gkind, FWD, GRAD, docstr) UN_GPU(id, gkind)
UNARY_PLAIN(UN_GPU_PLAIN)

/* ------------------------------------------------------------ hard_sigmoid */

/* alpha x + beta without FMA contraction, as the CPU computes it (the
 * gradient's bounds test depends on the exact value). */
__device__ __forceinline__ float hsig_lin(float al, float be, float x) { return __fadd_rn(__fmul_rn(al, x), be); }

__global__ void hsig_fwd_k(int64_t n, const float *x, float *y, float al, float be, mx_req req)
{
    MX_CUDA_FOR(i, n) mx_cuda_assign(req, &y[i], fminf(fmaxf(hsig_lin(al, be, x[i]), 0.0f), 1.0f));
}

__global__ void hsig_bwd_k(int64_t n, const float *dy, const float *x, float *dx, float al, float be, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float t = hsig_lin(al, be, x[i]);
        mx_cuda_assign(req, &dx[i], t > 0.0f && t < 1.0f ? dy[i] * al : 0.0f);
    }
}

static mx_status hsig_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const hsig_params *hp = (const hsig_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    if (n <= 0) return MX_OK;
    hsig_fwd_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, (const float *)in[0].data, (float *)out[0].data, (float)hp->alpha, (float)hp->beta, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status hsig_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                   mx_tensor *aux)
{
    (void)out, (void)aux;
    const hsig_params *hp = (const hsig_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in_grad[0].shape);
    if (n <= 0) return MX_OK;
    hsig_bwd_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, (const float *)out_grad[0].data, (const float *)in[0].data, (float *)in_grad[0].data, (float)hp->alpha,
        (float)hp->beta, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_hard_sigmoid = {hsig_gpu_forward, hsig_gpu_backward, NULL, 0};
