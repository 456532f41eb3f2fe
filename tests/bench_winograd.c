/* bench_winograd.c - single-threaded Winograd vs im2col + SGEMM on the 3x3
 * layers of the layer benchmark (docs/benchmarks.md), per thread: half the
 * batch, OpenBLAS at one thread (as under the data-parallel pool).
 *
 * Not a Check suite (the Makefile ignores it). Build after `make build/libmx.a`:
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -fvect-cost-model=dynamic -Wall -Wextra -Werror -pthread -Ilib \
 *       $(pkg-config --cflags openblas) tests/bench_winograd.c build/libmx.a \
 *       $(pkg-config --libs openblas libturbojpeg libpng zlib inih) -lm -pthread -o build/bench_winograd
 *   (add -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudnn -lcublas -lcudart when
 *   libmx.a has CUDA objects)
 * Run: build/bench_winograd [rounds [layer-name-part]]   (default 7, all layers)
 *
 * Every method runs once per round, in turn, after a warm-up round; the
 * table gives each method's best round (the machine is shared: other jobs
 * only ever slow a run down). Columns: im2col = mx_conv_forward /
 * mx_conv_backward (data gradient only); wino = mx_winograd_forward with
 * the tile mx_winograd_tile() picks (F2/F4/F6: each tile forced); filter =
 * mx_winograd_transform_filter (+ _backward), needed once per weight update;
 * fwd+bwd-data step speedup = (im2col fwd + bwd-data) / (wino fwd + bwd-data
 * + half the filter transforms), a thread's share of one training step when
 * the two threads split the transforms; wgrad = the weight gradient alone
 * (mx_conv_backward with dx off / mx_winograd_backward_weight), full step =
 * all three products (+ half the filter transforms). The bias gradient is
 * the same either way and left out.
 */
#include "ops/cpu/im2col.h"
#include "ops/cpu/winograd.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct layer {
    const char *name;
    int64_t n, c, f, h, w;
} layer;

static const layer layers[] = {
    {"alexnet conv3", 16, 192, 384, 13, 13},  {"alexnet conv4", 16, 384, 256, 13, 13},
    {"alexnet conv5", 16, 256, 256, 13, 13},  {"resnet18 layer1", 8, 64, 64, 56, 56},
    {"resnet18 layer2", 8, 128, 128, 28, 28}, {"resnet18 layer3", 8, 256, 256, 14, 14},
    {"resnet18 layer4", 8, 512, 512, 7, 7},   {"resnet20 stage1", 64, 16, 16, 32, 32},
    {"resnet20 stage2", 64, 32, 32, 16, 16},  {"resnet20 stage3", 64, 64, 64, 8, 8},
    /* the small-channel end, for the crossover */
    {"resnet20 stem", 64, 3, 16, 32, 32},     {"sweep c1 f1", 64, 1, 1, 32, 32},
    {"sweep c2 f2", 64, 2, 2, 32, 32},        {"sweep c4 f4", 64, 4, 4, 32, 32},
    {"sweep c8 f8", 64, 8, 8, 32, 32},        {"sweep c16 f4", 64, 16, 4, 32, 32},
    {"sweep c4 f16", 64, 4, 16, 32, 32},      {"sweep c8 f8 56x56", 8, 8, 8, 56, 56},
    {"sweep c8 f8 8x8", 64, 8, 8, 8, 8},      {"sweep c16 f16 4x4", 64, 16, 16, 4, 4},
    {"sweep c32 f32 2x2", 64, 32, 32, 2, 2},  {"sweep c256 f256 3x3", 16, 256, 256, 3, 3},
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

static void set_tile(int m)
{
    if (m == 0) {
        unsetenv("MX_WINOGRAD_TILE");
        return;
    }
    char s[2] = {(char)('0' + m), 0};
    setenv("MX_WINOGRAD_TILE", s, 1);
}

enum {
    FWD_IM2COL, BWD_IM2COL, FWD_W, BWD_W, FWD_T2, BWD_T2, FWD_T4, BWD_T4, FWD_T6, BWD_T6, FILTER,
    WGT_IM2COL, WGT_W, N_METHODS
};

typedef struct tiled {
    float *u, *ub;
} tiled;

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    if (rounds < 1) rounds = 1;
    openblas_set_num_threads(1);
    printf("Single thread, OpenBLAS 1 thread, half batch per thread, best of %d rounds (ms)\n\n", rounds);
    printf("| layer | shape (per thread) | tile | fwd im2col | fwd wino | fwd speedup | bwd-data im2col "
           "| bwd-data wino | bwd speedup | fwd F2 / F4 / F6 | bwd F2 / F4 / F6 | filter transforms "
           "| fwd+bwd-data step speedup "
           "| wgrad im2col | wgrad wino | wgrad speedup | full step speedup | im2col fwd GFLOP/s | u + u_b MB "
           "| scratch MB | wgrad scratch MB |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t li = 0; li < sizeof(layers) / sizeof(layers[0]); li++) {
        const layer *L = &layers[li];
        if (argc > 2 && !strstr(L->name, argv[2])) continue;
        int64_t n = L->n / 2;
        mx_conv_geom g = {.batch = n, .in_c = L->c, .in_h = L->h, .in_w = L->w, .out_c = L->f,
                          .out_h = L->h, .out_w = L->w, .k_h = 3, .k_w = 3, .stride_h = 1, .stride_w = 1,
                          .dil_h = 1, .dil_w = 1, .pad_h = 1, .pad_w = 1, .groups = 1};
        mx_conv_geom gb;
        mx_winograd_backward_geom(&g, &gb);
        int64_t nx = n * L->c * L->h * L->w, ny = n * L->f * L->h * L->w;
        float *x = rand_floats(nx, 1 + li), *w = rand_floats(L->f * L->c * 9, 2 + li), *bias = rand_floats(L->f, 3);
        float *dy = rand_floats(ny, 4 + li), *y = rand_floats(ny, 5), *dx = rand_floats(nx, 6);
        size_t wsb = mx_conv_workspace_bytes(&g, mx_conv_chunk(&g, (size_t)1 << 28));
        void *ws = malloc(wsb ? wsb : 1);
        /* filters and scratch for each tile size, and for the default */
        tiled t[7];
        size_t sb = 0;
        int def = mx_winograd_tile(&g);
        for (int m = 2; m <= 6; m += 2) {
            set_tile(m);
            /* 64-byte aligned: large transforms then stream past the caches */
            t[m].u = aligned_alloc(64, (mx_winograd_filter_bytes(&g) + 63) / 64 * 64);
            t[m].ub = aligned_alloc(64, (mx_winograd_filter_bytes(&gb) + 63) / 64 * 64);
            mx_winograd_transform_filter(&g, w, t[m].u);
            mx_winograd_transform_filter_backward(&g, w, t[m].ub);
            size_t a = mx_winograd_scratch_bytes(&g, n), b = mx_winograd_scratch_bytes(&gb, n);
            if (a > sb) sb = a;
            if (b > sb) sb = b;
        }
        set_tile(0);
        size_t fb = mx_winograd_filter_bytes(&g), fbb = mx_winograd_filter_bytes(&gb);
        size_t sb_def = mx_winograd_scratch_bytes(&g, n), sbb_def = mx_winograd_scratch_bytes(&gb, n);
        if (sbb_def > sb_def) sb_def = sbb_def;
        void *scratch = malloc(sb), *wscratch = malloc(mx_winograd_wgrad_scratch_bytes(&g, n));
        float *dw = malloc((size_t)(L->f * L->c * 9) * sizeof(float));
        if (!ws || !scratch || !wscratch || !dw) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        double best[N_METHODS];
        for (int k = 0; k < N_METHODS; k++) best[k] = 1e30;
        for (int r = -1; r < rounds; r++) {
            for (int k = 0; k < N_METHODS; k++) {
                bool dflt = k == FWD_W || k == BWD_W || k == FILTER || k >= WGT_IM2COL;
                int m = dflt ? def : k < FWD_T4 ? 2 : k < FWD_T6 ? 4 : 6;
                set_tile(dflt ? 0 : m);
                double t0 = now_ms();
                mx_status st = MX_OK;
                switch (k) {
                case FWD_IM2COL: st = mx_conv_forward(NULL, &g, x, w, bias, y, MX_REQ_WRITE, ws, wsb); break;
                case BWD_IM2COL:
                    st = mx_conv_backward(NULL, &g, NULL, w, dy, dx, MX_REQ_WRITE, NULL, MX_REQ_NULL, ws, wsb);
                    break;
                case WGT_IM2COL:
                    st = mx_conv_backward(NULL, &g, x, NULL, dy, NULL, MX_REQ_NULL, dw, MX_REQ_WRITE, ws, wsb);
                    break;
                case WGT_W: st = mx_winograd_backward_weight(&g, x, dy, n, false, dw, wscratch); break;
                case FILTER:
                    mx_winograd_transform_filter(&g, w, t[m].u);
                    mx_winograd_transform_filter_backward(&g, w, t[m].ub);
                    break;
                default:
                    if ((k - FWD_W) % 2 == 0) st = mx_winograd_forward(&g, t[m].u, x, n, bias, false, y, scratch);
                    else st = mx_winograd_forward(&gb, t[m].ub, dy, n, NULL, false, dx, scratch);
                }
                double dt = now_ms() - t0;
                if (st != MX_OK) {
                    fprintf(stderr, "%s: method %d failed (%d)\n", L->name, k, (int)st);
                    return 1;
                }
                if (r >= 0 && dt < best[k]) best[k] = dt;
            }
        }
        set_tile(0);
        double gflop = 2.0 * (double)ny * (double)L->c * 9 * 1e-9;
        printf("| %s | (%lld,%lld,%lld,%lld) -> %lld | F%d | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx | %.2f / %.2f / "
               "%.2f | %.2f / %.2f / %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx | %.2fx | %.1f | %.1f | %.1f | %.1f |\n",
               L->name, (long long)n, (long long)L->c, (long long)L->h, (long long)L->w, (long long)L->f, def,
               best[FWD_IM2COL], best[FWD_W], best[FWD_IM2COL] / best[FWD_W], best[BWD_IM2COL], best[BWD_W],
               best[BWD_IM2COL] / best[BWD_W], best[FWD_T2], best[FWD_T4], best[FWD_T6], best[BWD_T2], best[BWD_T4],
               best[BWD_T6], best[FILTER],
               (best[FWD_IM2COL] + best[BWD_IM2COL]) / (best[FWD_W] + best[BWD_W] + best[FILTER] / 2),
               best[WGT_IM2COL], best[WGT_W], best[WGT_IM2COL] / best[WGT_W],
               (best[FWD_IM2COL] + best[BWD_IM2COL] + best[WGT_IM2COL]) /
                   (best[FWD_W] + best[BWD_W] + best[WGT_W] + best[FILTER] / 2),
               gflop / (best[FWD_IM2COL] * 1e-3), (double)(fb + fbb) / 1048576.0, (double)sb_def / 1048576.0,
               (double)mx_winograd_wgrad_scratch_bytes(&g, n) / 1048576.0);
        fflush(stdout);
        for (int m = 2; m <= 6; m += 2) {
            free(t[m].u);
            free(t[m].ub);
        }
        free(scratch);
        free(wscratch);
        free(dw);
        free(ws);
        free(x);
        free(w);
        free(bias);
        free(dy);
        free(y);
        free(dx);
    }
    return 0;
}
