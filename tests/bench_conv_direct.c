/* bench_conv_direct.c - single-threaded direct strided convolution
 * (lib/ops/cpu/conv_direct.c) vs im2col + SGEMM on the strided layers of the
 * layer benchmark, per thread: half the batch (the caller splits the batch
 * by images across the 2 cores), OpenBLAS at one thread.
 *
 * Not a Check suite (the Makefile ignores it). Build after `make`:
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -fvect-cost-model=dynamic -Wall -Wextra -Werror -pthread -Ilib \
 *       $(pkg-config --cflags openblas) tests/bench_conv_direct.c build/libmx.a \
 *       $(pkg-config --libs openblas libturbojpeg libpng zlib inih) -lm -pthread \
 *       -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudnn -lcublas -lcudart -lstdc++ \
 *       -o build/bench_conv_direct
 *   (the CUDA libraries only when libmx.a has CUDA objects)
 * Run: build/bench_conv_direct [rounds [layer-name-part]]   (default 9, all layers; it
 * restarts itself with OPENBLAS_NUM_THREADS=1 unless that is set)
 *
 * Every method runs once per round, in turn, after a warm-up round; the
 * table gives each method's best round (the machine is shared: other jobs
 * only ever slow a run down). fwd: mx_conv_forward vs mx_direct_pack_weights
 * + mx_direct_forward (bias on both); bwd-data: mx_conv_backward with dw
 * off vs mx_direct_pack_weights_backward + mx_direct_backward_data; wgrad:
 * mx_conv_backward with dx off vs mx_direct_backward_weight (the mx_conv_*
 * calls run with MX_DIRECT_ISA=none, which keeps them on im2col + SGEMM
 * where they would pick the direct kernels themselves). GFLOP/s count
 * 2*F*C*KH*KW*OH*OW per image and direction; "x" = im2col time / direct
 * time. The results are checked against im2col's on the way.
 */
#include "ops/cpu/conv_direct.h"
#include "ops/cpu/im2col.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct layer {
    const char *name;
    int64_t n, c, h, w, k, s, p, f;
} layer;

static const layer layers[] = {
    {"resnet20 stage3 3x3/2", 64, 32, 16, 16, 3, 2, 1, 64},
    {"resnet20 stage2 3x3/2", 64, 16, 32, 32, 3, 2, 1, 32},
    {"resnet18 layer2 3x3/2", 8, 64, 56, 56, 3, 2, 1, 128},
    {"resnet18 layer3 3x3/2", 8, 128, 28, 28, 3, 2, 1, 256},
    {"resnet18 layer2 1x1/2", 8, 64, 56, 56, 1, 2, 0, 128},
    {"resnet20 stage2 1x1/2", 64, 16, 32, 32, 1, 2, 0, 32},
    {"resnet20 stage3 1x1/2", 64, 32, 16, 16, 1, 2, 0, 64},
    {"resnet18 conv1 7x7/2", 8, 3, 224, 224, 7, 2, 3, 64},
    {"alexnet conv1 11x11/4", 16, 3, 224, 224, 11, 4, 2, 64},
    /* for the rule: larger channel counts, and stride 1 */
    {"resnet18 layer4 3x3/2", 8, 256, 14, 14, 3, 2, 1, 512},
    {"resnet18 layer3 1x1/2", 8, 128, 28, 28, 1, 2, 0, 256},
    {"resnet18 layer4 1x1/2", 8, 256, 14, 14, 1, 2, 0, 512},
    {"sweep 3x3/2 c8 f16", 64, 8, 32, 32, 3, 2, 1, 16},
    {"sweep 3x3/2 c4 f8", 64, 4, 32, 32, 3, 2, 1, 8},
    {"sweep 5x5/2 c32 f64", 16, 32, 32, 32, 5, 2, 2, 64},
    {"alexnet conv2 5x5/1", 16, 64, 27, 27, 5, 1, 2, 192},
    {"sweep 3x3/1 c64 f64", 8, 64, 28, 28, 3, 1, 1, 64},
    {"sweep 1x1/1 c64 f256", 8, 64, 56, 56, 1, 1, 0, 256},
    {"sweep 7x7/1 c3 f16", 16, 3, 64, 64, 7, 1, 3, 16},
    {"lenet conv1 5x5/1", 64, 1, 28, 28, 5, 1, 0, 20},
    {"resnet20 stem 3x3/1", 64, 3, 32, 32, 3, 1, 1, 16},
    {"sweep 1x1/1 c16 f32", 64, 16, 32, 32, 1, 1, 0, 32},
    {"sweep 3x3/1 c256 f256 7x7", 8, 256, 7, 7, 3, 1, 1, 256},
    {"sweep 1x1/1 c32 f64", 64, 32, 16, 16, 1, 1, 0, 64},
    {"sweep 1x1/1 c64 f64 28x28", 8, 64, 28, 28, 1, 1, 0, 64},
    {"sweep 1x1/1 c128 f128 14x14", 8, 128, 14, 14, 1, 1, 0, 128},
    {"sweep 3x3/2 c128 f128 56x56", 8, 128, 56, 56, 3, 2, 1, 128},
    {"sweep 3x3/2 c1 f16", 64, 1, 28, 28, 3, 2, 1, 16},
    {"sweep 3x3/2 c64 f64 12x12", 64, 64, 12, 12, 3, 2, 1, 64},
    {"sweep 3x3/2 c64 f64 10x10", 64, 64, 10, 10, 3, 2, 1, 64},
    /* ResNet-50 (v1) at batch 16: its 1x1 layers, stride 1 and 2, carry half
     * of its multiplications */
    {"resnet50 res2 1x1 64->64", 16, 64, 56, 56, 1, 1, 0, 64},
    {"resnet50 res2 1x1 64->256", 16, 64, 56, 56, 1, 1, 0, 256},
    {"resnet50 res2 1x1 256->64", 16, 256, 56, 56, 1, 1, 0, 64},
    {"resnet50 res3a 1x1/2 256->512", 16, 256, 56, 56, 1, 2, 0, 512},
    {"resnet50 res3 1x1 128->512", 16, 128, 28, 28, 1, 1, 0, 512},
    {"resnet50 res3 1x1 512->128", 16, 512, 28, 28, 1, 1, 0, 128},
    {"resnet50 res4 1x1 256->1024", 16, 256, 14, 14, 1, 1, 0, 1024},
    {"resnet50 res4 1x1 1024->256", 16, 1024, 14, 14, 1, 1, 0, 256},
    {"resnet50 res5a 1x1/2 1024->2048", 16, 1024, 14, 14, 1, 2, 0, 2048},
    {"resnet50 res5 1x1 512->2048", 16, 512, 7, 7, 1, 1, 0, 2048},
    {"resnet50 res5 1x1 2048->512", 16, 2048, 7, 7, 1, 1, 0, 512},
    {"resnet50 res5 3x3 512->512", 16, 512, 7, 7, 3, 1, 1, 512},
};

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static float *rand_floats(int64_t n, uint64_t seed)
{
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        p[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2 - 1);
    }
    return p;
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return m > 0 ? d / m : d;
}

enum { FWD_I, FWD_D, BWD_I, BWD_D, WGT_I, WGT_D, N_METHODS };

int main(int argc, char **argv)
{
    /* OpenBLAS starts its thread pool before main; openblas_set_num_threads(1)
     * leaves the idle threads spin-yielding (10-15% of a run in sched_yield,
     * timings off by as much): start again with one thread from the outset. */
    const char *obt = getenv("OPENBLAS_NUM_THREADS");
    if (!obt || strcmp(obt, "1") != 0) {
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "warning: could not restart with OPENBLAS_NUM_THREADS=1\n");
    }
    int rounds = argc > 1 ? atoi(argv[1]) : 9;
    if (rounds < 1) rounds = 1;
    openblas_set_num_threads(1);
    printf("One thread, OpenBLAS 1 thread, half batch, best of %d rounds: ms (GFLOP/s), x = im2col / direct\n\n",
           rounds);
    printf("| layer | per thread | fwd im2col | fwd direct | x | bwd-data im2col | bwd-data direct | x "
           "| wgrad im2col | wgrad direct | x | step x | profitable |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (size_t li = 0; li < sizeof(layers) / sizeof(layers[0]); li++) {
        const layer *L = &layers[li];
        if (argc > 2 && !strstr(L->name, argv[2])) continue;
        const int64_t n = L->n / 2;
        mx_conv_geom g = {.batch = n, .in_c = L->c, .in_h = L->h, .in_w = L->w, .out_c = L->f,
                          .out_h = (L->h + 2 * L->p - L->k) / L->s + 1, .out_w = (L->w + 2 * L->p - L->k) / L->s + 1,
                          .k_h = L->k, .k_w = L->k, .stride_h = L->s, .stride_w = L->s, .dil_h = 1, .dil_w = 1,
                          .pad_h = L->p, .pad_w = L->p, .groups = 1};
        if (!mx_direct_supported(&g)) {
            printf("| %s | not supported (no AVX-512F?) |\n", L->name);
            continue;
        }
        const int64_t nx = n * L->c * L->h * L->w, ny = n * L->f * g.out_h * g.out_w, nw = L->f * L->c * L->k * L->k;
        float *x = rand_floats(nx, 1 + li), *w = rand_floats(nw, 2 + li), *bias = rand_floats(L->f, 3);
        float *dy = rand_floats(ny, 4 + li), *y = rand_floats(ny, 5), *dx = rand_floats(nx, 6);
        float *yd = rand_floats(ny, 7), *dxd = rand_floats(nx, 8), *dw = rand_floats(nw, 9), *dwd = rand_floats(nw, 10);
        size_t wsb = mx_conv_workspace_bytes(&g, mx_conv_chunk(&g, (size_t)1 << 28));
        void *ws = malloc(wsb ? wsb : 1);
        size_t sb = mx_direct_scratch_bytes(&g, n), wgb = mx_direct_wgrad_scratch_bytes(&g, n);
        void *scratch = malloc(sb > wgb ? sb : wgb);
        float *packed = malloc(mx_direct_packed_bytes(&g)), *packed_b = malloc(mx_direct_packed_bytes(&g));
        if (!ws || !scratch || !packed || !packed_b) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        double best[N_METHODS];
        for (int k = 0; k < N_METHODS; k++) best[k] = 1e30;
        for (int r = -1; r < rounds; r++) {
            for (int k = 0; k < N_METHODS; k++) {
                /* mx_conv_* may pick the direct kernels themselves: keep them on im2col + SGEMM */
                if (k == FWD_I || k == BWD_I || k == WGT_I) setenv("MX_DIRECT_ISA", "none", 1);
                else unsetenv("MX_DIRECT_ISA");
                double t0 = now_ms();
                mx_status st = MX_OK;
                switch (k) {
                case FWD_I: st = mx_conv_forward(NULL, &g, x, w, bias, y, MX_REQ_WRITE, ws, wsb); break;
                case FWD_D:
                    mx_direct_pack_weights(&g, w, packed);
                    st = mx_direct_forward(&g, packed, x, n, bias, false, yd, scratch);
                    break;
                case BWD_I:
                    st = mx_conv_backward(NULL, &g, NULL, w, dy, dx, MX_REQ_WRITE, NULL, MX_REQ_NULL, ws, wsb);
                    break;
                case BWD_D:
                    mx_direct_pack_weights_backward(&g, w, packed_b);
                    st = mx_direct_backward_data(&g, packed_b, dy, n, false, dxd, scratch);
                    break;
                case WGT_I:
                    st = mx_conv_backward(NULL, &g, x, NULL, dy, NULL, MX_REQ_NULL, dw, MX_REQ_WRITE, ws, wsb);
                    break;
                case WGT_D: st = mx_direct_backward_weight(&g, x, dy, n, false, dwd, scratch); break;
                }
                double dt = now_ms() - t0;
                if (st != MX_OK) {
                    fprintf(stderr, "%s: method %d failed (%d)\n", L->name, k, (int)st);
                    return 1;
                }
                if (r >= 0 && dt < best[k]) best[k] = dt;
            }
            if (r < 0) {
                double e1 = rel_diff(yd, y, ny), e2 = rel_diff(dxd, dx, nx), e3 = rel_diff(dwd, dw, nw);
                if (!(e1 < 1e-4 && e2 < 1e-4 && e3 < 1e-4)) {
                    fprintf(stderr, "%s: direct differs from im2col: %g %g %g\n", L->name, e1, e2, e3);
                    return 1;
                }
            }
        }
        const double gflop = 2.0 * (double)ny * (double)(L->c * L->k * L->k) * 1e-9;
#define RATE(k) best[k], gflop / (best[k] * 1e-3)
        printf("| %s | (%lld,%lld,%lld,%lld)->%lld | %.3f (%.0f) | %.3f (%.0f) | %.2f | %.3f (%.0f) | %.3f (%.0f) "
               "| %.2f | %.3f (%.0f) | %.3f (%.0f) | %.2f | %.2f | %s |\n",
               L->name, (long long)n, (long long)L->c, (long long)L->h, (long long)L->w, (long long)L->f, RATE(FWD_I),
               RATE(FWD_D), best[FWD_I] / best[FWD_D], RATE(BWD_I), RATE(BWD_D), best[BWD_I] / best[BWD_D],
               RATE(WGT_I), RATE(WGT_D), best[WGT_I] / best[WGT_D],
               (best[FWD_I] + best[BWD_I] + best[WGT_I]) / (best[FWD_D] + best[BWD_D] + best[WGT_D]),
               mx_direct_profitable(&g) ? "yes" : "no");
#undef RATE
        fflush(stdout);
        free(x);
        free(w);
        free(bias);
        free(dy);
        free(y);
        free(dx);
        free(yd);
        free(dxd);
        free(dw);
        free(dwd);
        free(ws);
        free(scratch);
        free(packed);
        free(packed_b);
    }
    return 0;
}
