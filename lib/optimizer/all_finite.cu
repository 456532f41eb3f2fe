/*
 * all_finite.cu - mx_all_finite's GPU scan (MXNet's MultiAllFiniteGPUKernel):
 * one kernel per batch of up to AF_BATCH arrays, their pointers, sizes and
 * dtypes passed by value; block row y scans array y with a grid-stride
 * loop and any thread that meets a non-finite element sets a flag in
 * device memory (a plain store of 1: every writer writes the same value).
 * The flag lives in the worker's scratch, is zeroed on the worker's stream
 * before the kernels, and comes back in one 4-byte copy; then the stream
 * is waited for, so a fault shows here. The bit test is all_finite.c's:
 * with the sign cleared, one unit of the exponent field carries into the
 * sign bit exactly when the exponent is all ones.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "optimizer/loss_scale.h"
}

namespace {

enum { AF_BATCH = 128, AF_MAX_BLOCKS = 2048 };

struct af_batch {
    const void *data[AF_BATCH];
    int64_t size[AF_BATCH];
    int dtype[AF_BATCH];
};

template <typename T>
__device__ __forceinline__ bool any_nonfinite(const T *p, int64_t n, T abs, T one, T sign)
{
    T acc = 0;
    MX_CUDA_FOR(i, n) acc |= (T)((T)(p[i] & abs) + one);
    return (acc & sign) != 0;
}

__global__ void all_finite_kernel(af_batch b, int *flag)
{
    const int k = blockIdx.y;
    const int64_t n = b.size[k];
    bool bad;
    switch (b.dtype[k]) {
    case MX_FLOAT32:
        bad = any_nonfinite<uint32_t>((const uint32_t *)b.data[k], n, 0x7fffffffu, 0x00800000u, 0x80000000u);
        break;
    case MX_FLOAT64:
        bad = any_nonfinite<unsigned long long>((const unsigned long long *)b.data[k], n, 0x7fffffffffffffffull,
                                                0x0010000000000000ull, 0x8000000000000000ull);
        break;
    case MX_FLOAT16:
        bad = any_nonfinite<uint16_t>((const uint16_t *)b.data[k], n, 0x7fff, 0x0400, 0x8000);
        break;
    default: /* MX_BFLOAT16 */
        bad = any_nonfinite<uint16_t>((const uint16_t *)b.data[k], n, 0x7fff, 0x0080, 0x8000);
        break;
    }
    if (bad) *flag = 1;
}

} // namespace

extern "C" mx_status mx_all_finite_gpu(const void *const *data, const int64_t *sizes, const mx_dtype *dtypes, int n,
                                       void *worker, bool *nonfinite)
{
    mx_cuda_worker *w = (mx_cuda_worker *)worker;
    cudaStream_t stream = mx_cuda_worker_stream(w);
    void *scratch;
    MX_TRY(mx_cuda_worker_scratch(w, sizeof(int), &scratch));
    int *flag = (int *)scratch;
    MX_CUDA_TRY(cudaMemsetAsync(flag, 0, sizeof(int), stream));
    for (int first = 0; first < n; first += AF_BATCH) {
        const int count = n - first < AF_BATCH ? n - first : AF_BATCH;
        af_batch b;
        memset(&b, 0, sizeof(b));
        int64_t longest = 0;
        for (int i = 0; i < count; i++) {
            const mx_dtype t = dtypes[first + i];
            if (t != MX_FLOAT32 && t != MX_FLOAT64 && t != MX_FLOAT16 && t != MX_BFLOAT16)
                return MX_ERROR(MX_ERR_INVALID, "all_finite: dtype %s on a GPU", mx_dtype_name(t));
            b.data[i] = data[first + i];
            b.size[i] = sizes[first + i];
            b.dtype[i] = (int)t;
            if (sizes[first + i] > longest) longest = sizes[first + i];
        }
        unsigned blocks = mx_cuda_blocks(longest);
        if (blocks > AF_MAX_BLOCKS) blocks = AF_MAX_BLOCKS; /* the grid-stride loop covers the rest */
        all_finite_kernel<<<dim3(blocks, (unsigned)count), MX_CUDA_THREADS, 0, stream>>>(b, flag);
        MX_CUDA_LAUNCHED();
    }
    int host = 0;
    MX_CUDA_TRY(cudaMemcpyAsync(&host, flag, sizeof(int), cudaMemcpyDeviceToHost, stream));
    MX_TRY(mx_cuda_worker_sync(w));
    *nonfinite = host != 0;
    return MX_OK;
}
