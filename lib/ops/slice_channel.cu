/*
 * slice_channel.cu - SliceChannel's CUDA kernels: part i of data is, per
 * row before the axis, the i-th of num_outputs equal slabs. Writes are 2-D
 * copies (any dtype); adds (float32 / float64, as on the CPU) are one
 * thread per element. Backward joins the parts back the same way.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/slice_channel.h"
}

/* dst[o * dst_pitch + k] += src[o * src_pitch + k], o < rows, k < width. */
template <typename T>
__global__ void sc_add_kernel(const T *src, int64_t src_pitch, T *dst, int64_t dst_pitch, int64_t rows,
                              int64_t width)
{
    MX_CUDA_FOR(i, rows * width)
    {
        const int64_t o = i / width, k = i % width;
        dst[o * dst_pitch + k] += src[o * src_pitch + k];
    }
}

/* rows x width elements from src (pitch in elements) to dst, per req. */
static mx_status sc_copy(const mx_op_ctx *ctx, void *dst, int64_t dst_pitch, const void *src, int64_t src_pitch,
                         int64_t rows, int64_t width, mx_dtype dtype, mx_req req)
{
    if (req == MX_REQ_NULL || rows == 0 || width == 0) return MX_OK;
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const size_t es = mx_dtype_size(dtype);
    if (req != MX_REQ_ADD) {
        MX_CUDA_TRY(cudaMemcpy2DAsync(dst, (size_t)dst_pitch * es, src, (size_t)src_pitch * es, (size_t)width * es,
                                      (size_t)rows, cudaMemcpyDeviceToDevice, stream));
        return MX_OK;
    }
    if (dtype == MX_FLOAT32) {
        sc_add_kernel<float><<<mx_cuda_blocks(rows * width), MX_CUDA_THREADS, 0, stream>>>(
            (const float *)src, src_pitch, (float *)dst, dst_pitch, rows, width);
    } else if (dtype == MX_FLOAT64) {
        sc_add_kernel<double><<<mx_cuda_blocks(rows * width), MX_CUDA_THREADS, 0, stream>>>(
            (const double *)src, src_pitch, (double *)dst, dst_pitch, rows, width);
    } else {
        return MX_ERROR(MX_ERR_UNSUPPORTED, "SliceChannel: accumulating (req add) into %s is not supported",
                        mx_dtype_name(dtype));
    }
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

/* Rows before the axis, and the elements of one part's slab in a row. */
static int64_t sc_geometry(const slice_params *sp, const mx_shape *d, int64_t *slab)
{
    const int axis = (int)(sp->axis < 0 ? sp->axis + d->ndim : sp->axis);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++) outer *= d->dims[k];
    for (int k = axis + 1; k < d->ndim; k++) inner *= d->dims[k];
    *slab = d->dims[axis] / sp->num_outputs * inner;
    return outer;
}

static mx_status sc_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const slice_params *sp = (const slice_params *)p;
    const int n = (int)sp->num_outputs;
    int64_t slab;
    const int64_t outer = sc_geometry(sp, &in[0].shape, &slab);
    const size_t es = mx_dtype_size(in[0].dtype);
    const char *x = (const char *)in[0].data;
    for (int i = 0; i < n; i++)
        MX_TRY(sc_copy(ctx, out[i].data, slab, x + (size_t)(i * slab) * es, n * slab, outer, slab, in[0].dtype,
                       req[i]));
    return MX_OK;
}

static mx_status sc_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    const slice_params *sp = (const slice_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const int n = (int)sp->num_outputs;
    int64_t slab;
    const int64_t outer = sc_geometry(sp, &in_grad[0].shape, &slab);
    const size_t es = mx_dtype_size(in_grad[0].dtype);
    char *dx = (char *)in_grad[0].data;
    for (int i = 0; i < n; i++)
        MX_TRY(sc_copy(ctx, dx + (size_t)(i * slab) * es, n * slab, out_grad[i].data, slab, outer, slab,
                       in_grad[0].dtype, req[0]));
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_slice_channel = {sc_gpu_forward, sc_gpu_backward, NULL, 0};
