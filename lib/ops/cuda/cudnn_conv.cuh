/*
 * cudnn_conv.cuh - the cuDNN descriptors of one 2-d convolution call,
 * shared by Convolution (forward = cuDNN's forward) and Deconvolution
 * (forward = cuDNN's backward data): float32 NCHW, cross-correlation,
 * FMA math (no TF32), groups on the descriptor. Made per call and
 * destroyed when the call returns.
 */
#ifndef MX_OPS_CUDA_CUDNN_CONV_CUH
#define MX_OPS_CUDA_CUDNN_CONV_CUH

#include "ops/cuda/cuda_op.h"

struct mx_cudnn_conv {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr; /* conv input, conv output, bias */
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    mx_cudnn_conv() = default;
    mx_cudnn_conv(const mx_cudnn_conv &) = delete;
    mx_cudnn_conv &operator=(const mx_cudnn_conv &) = delete;
    ~mx_cudnn_conv()
    {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (y) cudnnDestroyTensorDescriptor(y);
        if (b) cudnnDestroyTensorDescriptor(b);
        if (w) cudnnDestroyFilterDescriptor(w);
        if (conv) cudnnDestroyConvolutionDescriptor(conv);
    }
};

/* The shapes of the convolution cuDNN computes: input x (n, c, h, w),
 * output y (n, k, oh, ow), filter (k, c / groups, kh, kw), bias (1, bias_c,
 * 1, 1). *fwd gets cuDNN's own output dims for x and the filter, for the
 * caller to check against its inferred shapes. */
struct mx_cudnn_conv_shape {
    int n, c, h, w, k, oh, ow, kh, kw, ph, pw, sh, sw, dh, dw, groups, bias_c;
};

static inline mx_status mx_cudnn_conv_init(mx_cudnn_conv *d, const mx_cudnn_conv_shape &s, int fwd[4])
{
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->x));
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->y));
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->b));
    MX_CUDNN_TRY(cudnnCreateFilterDescriptor(&d->w));
    MX_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&d->conv));
    MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c, s.h, s.w));
    MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.k, s.oh, s.ow));
    MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(d->b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, s.bias_c, 1, 1));
    MX_CUDNN_TRY(
        cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.k, s.c / s.groups, s.kh, s.kw));
    MX_CUDNN_TRY(cudnnSetConvolution2dDescriptor(d->conv, s.ph, s.pw, s.sh, s.sw, s.dh, s.dw, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
    MX_CUDNN_TRY(cudnnSetConvolutionMathType(d->conv, CUDNN_FMA_MATH));
    MX_CUDNN_TRY(cudnnSetConvolutionGroupCount(d->conv, s.groups));
    MX_CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(d->conv, d->x, d->w, &fwd[0], &fwd[1], &fwd[2], &fwd[3]));
    return MX_OK;
}

#endif /* MX_OPS_CUDA_CUDNN_CONV_CUH */
