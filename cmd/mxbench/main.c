/*
 * mxbench - per-layer timing of operators through the registry.
 *
 *   mxbench [--runs N] [--warmup N] [--batch N] [--only SUBSTRING | --index I] [--no-sgemm | --sgemm-only]
 *   mxbench --list
 *
 * For every layer of LeNet, ResNet-20 (32x32), AlexNet and ResNet-18
 * (224x224) that is a Convolution or FullyConnected, times forward and
 * backward (all gradients written) directly on the operator's kernels,
 * median of N runs after the warm-up, and prints one JSON line per layer:
 *   {"net":..., "layer":..., "op":..., "data":[...], "params":{...},
 *    "fwd_ms":..., "bwd_ms":..., "ms":..., "min_ms":..., "gflop":..., "gflops":...}
 * where the times are medians (min_ms the fastest pass) and gflop counts
 * forward + backward multiply-adds as 2 flops each (3x the forward's). It also prints the raw cblas_sgemm GFLOP/s this machine
 * reaches on 1024^3 and on a convolution-shaped product, as
 *   {"sgemm":"MxNxK", "ms":..., "gflops":...}.
 * --list prints the layer table (index, net, layer, op, data, params) as
 * JSON lines for another framework to time the same shapes; --index
 * times only the layer with that index, --only those whose "net layer"
 * contains SUBSTRING; --batch runs every layer at that batch instead of
 * its own (batch 1: prediction's latency).
 * Threads: the kernels split their work on a pool of OMP_NUM_THREADS
 * (default: the cores) with OpenBLAS single-threaded inside, as in the
 * engine; the raw SGEMM figures run on OpenBLAS's own threads (as many).
 * Exit status: 0 on success, 1 on an operator error, 2 on bad usage.
 */
#include "base/base.h"
#include "ops/op.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KV 8

typedef struct layer {
    const char *net, *name, *op;
    int ndim;
    int64_t data[5];
    const char *keys[MAX_KV], *values[MAX_KV];
} layer;

#define CONV(net, name, n, c, h, w, k, s, p, f)                                                          \
    {net, name, "Convolution", 4, {n, c, h, w}, {"kernel", "stride", "pad", "num_filter"}, {k, s, p, f}}
#define FC(net, name, n, in, out) {net, name, "FullyConnected", 2, {n, in}, {"num_hidden"}, {out}}
#define POOL(net, name, n, c, h, w, k, s, p, type)                                                       \
    {net, name, "Pooling", 4, {n, c, h, w}, {"kernel", "stride", "pad", "pool_type"}, {k, s, p, type}}

/* Batch: 64 for the small nets, 16 for AlexNet and ResNet-50 and 8 for ResNet-18. */
static const layer layers[] = {
    CONV("lenet", "conv1", 64, 1, 28, 28, "(5,5)", "(1,1)", "(0,0)", "20"),
    CONV("lenet", "conv2", 64, 20, 12, 12, "(5,5)", "(1,1)", "(0,0)", "50"),
    FC("lenet", "fc1", 64, 800, "500"),
    FC("lenet", "fc2", 64, 500, "10"),
    CONV("resnet20", "stem 3x3", 64, 3, 32, 32, "(3,3)", "(1,1)", "(1,1)", "16"),
    CONV("resnet20", "stage1 3x3", 64, 16, 32, 32, "(3,3)", "(1,1)", "(1,1)", "16"),
    CONV("resnet20", "stage2 3x3/2", 64, 16, 32, 32, "(3,3)", "(2,2)", "(1,1)", "32"),
    CONV("resnet20", "stage2 1x1/2 proj", 64, 16, 32, 32, "(1,1)", "(2,2)", "(0,0)", "32"),
    CONV("resnet20", "stage2 3x3", 64, 32, 16, 16, "(3,3)", "(1,1)", "(1,1)", "32"),
    CONV("resnet20", "stage3 3x3/2", 64, 32, 16, 16, "(3,3)", "(2,2)", "(1,1)", "64"),
    CONV("resnet20", "stage3 3x3", 64, 64, 8, 8, "(3,3)", "(1,1)", "(1,1)", "64"),
    FC("resnet20", "fc", 64, 64, "10"),
    CONV("alexnet", "conv1 11x11/4", 16, 3, 224, 224, "(11,11)", "(4,4)", "(2,2)", "64"),
    CONV("alexnet", "conv2 5x5", 16, 64, 27, 27, "(5,5)", "(1,1)", "(2,2)", "192"),
    CONV("alexnet", "conv3 3x3", 16, 192, 13, 13, "(3,3)", "(1,1)", "(1,1)", "384"),
    CONV("alexnet", "conv4 3x3", 16, 384, 13, 13, "(3,3)", "(1,1)", "(1,1)", "256"),
    CONV("alexnet", "conv5 3x3", 16, 256, 13, 13, "(3,3)", "(1,1)", "(1,1)", "256"),
    FC("alexnet", "fc6", 16, 9216, "4096"),
    FC("alexnet", "fc7", 16, 4096, "4096"),
    FC("alexnet", "fc8", 16, 4096, "1000"),
    CONV("resnet18", "conv1 7x7/2", 8, 3, 224, 224, "(7,7)", "(2,2)", "(3,3)", "64"),
    CONV("resnet18", "layer1 3x3", 8, 64, 56, 56, "(3,3)", "(1,1)", "(1,1)", "64"),
    CONV("resnet18", "layer2 3x3/2", 8, 64, 56, 56, "(3,3)", "(2,2)", "(1,1)", "128"),
    CONV("resnet18", "layer2 1x1/2 proj", 8, 64, 56, 56, "(1,1)", "(2,2)", "(0,0)", "128"),
    CONV("resnet18", "layer2 3x3", 8, 128, 28, 28, "(3,3)", "(1,1)", "(1,1)", "128"),
    CONV("resnet18", "layer3 3x3", 8, 256, 14, 14, "(3,3)", "(1,1)", "(1,1)", "256"),
    CONV("resnet18", "layer4 3x3", 8, 512, 7, 7, "(3,3)", "(1,1)", "(1,1)", "512"),
    FC("resnet18", "fc", 8, 512, "1000"),
    CONV("resnet50", "res2 1x1 64->256", 16, 64, 56, 56, "(1,1)", "(1,1)", "(0,0)", "256"),
    CONV("resnet50", "res2 1x1 256->64", 16, 256, 56, 56, "(1,1)", "(1,1)", "(0,0)", "64"),
    CONV("resnet50", "res3 1x1 128->512", 16, 128, 28, 28, "(1,1)", "(1,1)", "(0,0)", "512"),
    CONV("resnet50", "res3 1x1 512->128", 16, 512, 28, 28, "(1,1)", "(1,1)", "(0,0)", "128"),
    CONV("resnet50", "res4 1x1 256->1024", 16, 256, 14, 14, "(1,1)", "(1,1)", "(0,0)", "1024"),
    CONV("resnet50", "res4 1x1 1024->256", 16, 1024, 14, 14, "(1,1)", "(1,1)", "(0,0)", "256"),
    CONV("resnet50", "res5 1x1 512->2048", 16, 512, 7, 7, "(1,1)", "(1,1)", "(0,0)", "2048"),
    CONV("resnet50", "res5 1x1 2048->512", 16, 2048, 7, 7, "(1,1)", "(1,1)", "(0,0)", "512"),
    CONV("resnet50", "res4a 1x1/2 proj", 16, 512, 28, 28, "(1,1)", "(2,2)", "(0,0)", "1024"),
    CONV("resnet50", "res4 3x3", 16, 256, 14, 14, "(3,3)", "(1,1)", "(1,1)", "256"),
    CONV("resnet50", "res5 3x3", 16, 512, 7, 7, "(3,3)", "(1,1)", "(1,1)", "512"),
    CONV("inception-bn", "conv_2_red 1x1 64->64", 16, 64, 55, 55, "(1,1)", "(1,1)", "(0,0)", "64"),
    CONV("inception-bn", "3b 1x1 256->64", 16, 256, 27, 27, "(1,1)", "(1,1)", "(0,0)", "64"),
    CONV("inception-bn", "3c 1x1 320->128", 16, 320, 27, 27, "(1,1)", "(1,1)", "(0,0)", "128"),
    CONV("inception-bn", "4a 1x1 576->224", 16, 576, 14, 14, "(1,1)", "(1,1)", "(0,0)", "224"),
    CONV("inception-bn", "4e 1x1 608->192", 16, 608, 14, 14, "(1,1)", "(1,1)", "(0,0)", "192"),
    CONV("inception-bn", "5a 1x1 1056->352", 16, 1056, 7, 7, "(1,1)", "(1,1)", "(0,0)", "352"),
    CONV("inception-bn", "5a 1x1 1056->128", 16, 1056, 7, 7, "(1,1)", "(1,1)", "(0,0)", "128"),
    POOL("inception-bn", "pool_1 3x3/2 max", 16, 64, 112, 112, "(3,3)", "(2,2)", "(0,0)", "max"),
    POOL("inception-bn", "pool_2 3x3/2 max", 16, 192, 55, 55, "(3,3)", "(2,2)", "(0,0)", "max"),
    POOL("inception-bn", "max_pool_3c 3x3/2 pad 1", 16, 320, 28, 28, "(3,3)", "(2,2)", "(1,1)", "max"),
    POOL("inception-bn", "avg_pool_3a 3x3/1 pad 1", 16, 192, 27, 27, "(3,3)", "(1,1)", "(1,1)", "avg"),
    POOL("inception-bn", "avg_pool_4a 3x3/1 pad 1", 16, 576, 14, 14, "(3,3)", "(1,1)", "(1,1)", "avg"),
    POOL("inception-bn", "avg_pool_5a 3x3/1 pad 1", 16, 1056, 7, 7, "(3,3)", "(1,1)", "(1,1)", "avg"),
    POOL("resnet18", "pool1 3x3/2 pad 1 max", 8, 64, 112, 112, "(3,3)", "(2,2)", "(1,1)", "max"),
};

#define N_LAYERS ((int)(sizeof(layers) / sizeof(layers[0])))

static int n_kv(const layer *l)
{
    int n = 0;
    while (n < MAX_KV && l->keys[n]) n++;
    return n;
}

static void print_spec(int index, const layer *l)
{
    printf("\"index\":%d,\"net\":\"%s\",\"layer\":\"%s\",\"op\":\"%s\",\"data\":[", index, l->net, l->name, l->op);
    for (int i = 0; i < l->ndim; i++) printf("%s%lld", i ? "," : "", (long long)l->data[i]);
    printf("],\"params\":{");
    for (int i = 0; i < n_kv(l); i++) printf("%s\"%s\":\"%s\"", i ? "," : "", l->keys[i], l->values[i]);
    printf("}");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float *random_floats(int64_t n, uint64_t *state)
{
    float *p = mx_malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!p) return NULL;
    for (int64_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(*state >> 40) / (double)(1ull << 24)) - 0.5f;
    }
    return p;
}

/* Times one layer; prints its JSON line. */
/* Writes `bytes` of `buf` (NULL: nothing), pushing a layer's arrays out of
 * the caches as a network's other layers do between its passes. */
static void evict_caches(char *buf, size_t bytes)
{
    if (buf) memset(buf, (int)(mx_time_seconds() * 1e6) & 0x7f, bytes);
}

static mx_status bench_layer(int index, const layer *l, int runs, int warmup, mx_threadpool *pool, char *evict,
                             size_t evict_bytes)
{
    const mx_op_def *op;
    MX_TRY(mx_op_lookup(l->op, &op));
    void *params = mx_calloc(1, op->params_size);
    if (!params) return MX_ERR_NOMEM;
    mx_status st = mx_op_parse_params(op, l->keys, l->values, n_kv(l), params);
    const char *names[MX_OP_MAX_IO];
    int n_in = op->list_inputs(params, names), n_out = op->list_outputs(params, names);
    mx_shape in_shapes[MX_OP_MAX_IO] = {mx_shape_make(l->ndim, l->data)}, out_shapes[MX_OP_MAX_IO] = {{0}};
    if (st == MX_OK) st = op->infer_shape(params, in_shapes, n_in, out_shapes, n_out);
    if (st != MX_OK) {
        free(params);
        return st;
    }
    mx_tensor in[MX_OP_MAX_IO], grad[MX_OP_MAX_IO], out[MX_OP_MAX_IO], ograd[MX_OP_MAX_IO];
    uint64_t rng = 42;
    for (int i = 0; i < n_in; i++) {
        int64_t n = mx_shape_size(&in_shapes[i]);
        in[i] = (mx_tensor){.data = random_floats(n, &rng), .shape = in_shapes[i], .dtype = MX_FLOAT32,
                            .ctx = mx_cpu()};
        grad[i] = (mx_tensor){.data = random_floats(n, &rng), .shape = in_shapes[i], .dtype = MX_FLOAT32,
                              .ctx = mx_cpu()};
    }
    for (int k = 0; k < n_out; k++) {
        int64_t n = mx_shape_size(&out_shapes[k]);
        out[k] = (mx_tensor){.data = random_floats(n, &rng), .shape = out_shapes[k], .dtype = MX_FLOAT32,
                             .ctx = mx_cpu()};
        ograd[k] = (mx_tensor){.data = random_floats(n, &rng), .shape = out_shapes[k], .dtype = MX_FLOAT32,
                               .ctx = mx_cpu()};
    }
    size_t ws_bytes = 0;
    if (op->workspace) {
        size_t f = op->workspace(params, in_shapes, out_shapes, false);
        size_t b = op->workspace(params, in_shapes, out_shapes, true);
        ws_bytes = f > b ? f : b;
    }
    void *ws = ws_bytes ? mx_malloc(ws_bytes) : NULL;
    if (ws) memset(ws, 0, ws_bytes);
    mx_exec_ctx exec = {.ctx = mx_cpu(), .pool = pool};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true, .workspace = ws, .workspace_bytes = ws_bytes};
    mx_req req[MX_OP_MAX_IO];
    for (int i = 0; i < MX_OP_MAX_IO; i++) req[i] = MX_REQ_WRITE;

    double *tf = mx_malloc(sizeof(double) * (size_t)runs), *tb = mx_malloc(sizeof(double) * (size_t)runs);
    double *tt = mx_malloc(sizeof(double) * (size_t)runs);
    for (int r = -warmup; r < runs && st == MX_OK; r++) {
        evict_caches(evict, evict_bytes);
        double t0 = mx_time_seconds();
        st = op->forward(&ctx, params, in, req, out, NULL);
        double t1 = mx_time_seconds();
        evict_caches(evict, evict_bytes);
        double t1b = mx_time_seconds();
        if (st == MX_OK) st = op->backward(&ctx, params, ograd, in, out, req, grad, NULL);
        double t2 = mx_time_seconds();
        if (r >= 0) {
            tf[r] = t1 - t0;
            tb[r] = t2 - t1b;
            tt[r] = tf[r] + tb[r];
        }
    }
    if (st == MX_OK) {
        /* forward: 2 flops per multiply-add, one per output element and
         * weight element of its output channel; backward twice that. Layers
         * without a weight (pooling) count none. */
        double per_out = n_in > 1 ? (double)mx_shape_size(&in_shapes[1]) / (double)in_shapes[1].dims[0] : 0.0;
        double gflop = 3.0 * 2.0 * (double)mx_shape_size(&out_shapes[0]) * per_out * 1e-9;
        double mf = median(tf, runs), mb = median(tb, runs), mt = median(tt, runs), best = tt[0]; /* sorted */
        printf("{");
        print_spec(index, l);
        printf(",\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,\"ms\":%.4f,\"min_ms\":%.4f,\"gflop\":%.6f,\"gflops\":%.2f}\n",
               mf * 1e3, mb * 1e3, mt * 1e3, best * 1e3, gflop, gflop / mt);
        fflush(stdout);
    }
    free(tf);
    free(tb);
    free(tt);
    free(ws);
    for (int i = 0; i < n_in; i++) {
        free(in[i].data);
        free(grad[i].data);
    }
    for (int k = 0; k < n_out; k++) {
        free(out[k].data);
        free(ograd[k].data);
    }
    free(params);
    return st;
}

/* Raw SGEMM C (m, n) = A (m, k) * B (k, n), row-major, median of runs,
 * on OpenBLAS's own `threads` threads (what OpenBLAS itself reaches). */
static mx_status bench_sgemm(int m, int n, int k, int runs, int warmup, int threads)
{
    openblas_set_num_threads(threads);
    uint64_t rng = 7;
    float *a = random_floats((int64_t)m * k, &rng), *b = random_floats((int64_t)k * n, &rng);
    float *c = random_floats((int64_t)m * n, &rng);
    double *t = mx_malloc(sizeof(double) * (size_t)runs);
    if (!a || !b || !c || !t) {
        free(a), free(b), free(c), free(t);
        return MX_ERR_NOMEM;
    }
    for (int r = -warmup; r < runs; r++) {
        double t0 = mx_time_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
        double t1 = mx_time_seconds();
        if (r >= 0) t[r] = t1 - t0;
    }
    double mt = median(t, runs);
    printf("{\"sgemm\":\"%dx%dx%d\",\"ms\":%.4f,\"gflops\":%.2f}\n", m, n, k, mt * 1e3, 2.0 * m * n * k * 1e-9 / mt);
    fflush(stdout);
    free(a), free(b), free(c), free(t);
    openblas_set_num_threads(1); /* back under the kernel pool */
    return MX_OK;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mxbench [--runs N] [--warmup N] [--batch N] [--evict MB] [--only SUBSTRING | --index I] "
               "[--no-sgemm | --sgemm-only]\n"
               "       mxbench --list\n");
}

int main(int argc, char **argv)
{
    int runs = 5, warmup = 2, index = -1, batch = 0, evict_mb = 0;
    bool list = false, sgemm = true, sgemm_only = false;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--index") && i + 1 < argc) index = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            batch = atoi(argv[++i]);
            if (batch < 1) {
                usage(stderr);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--evict") && i + 1 < argc) {
            evict_mb = atoi(argv[++i]);
            if (evict_mb < 1) {
                usage(stderr);
                return 2;
            }
        } else if (!strcmp(argv[i], "--list")) list = true;
        else if (!strcmp(argv[i], "--no-sgemm")) sgemm = false;
        else if (!strcmp(argv[i], "--sgemm-only")) sgemm_only = true;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (runs < 1 || warmup < 0 || index >= N_LAYERS) {
        usage(stderr);
        return 2;
    }
    /* Kernels split their work on a pool of OMP_NUM_THREADS (default: the
     * cores), as inside mxtrain's engine. */
    int threads = mx_threadpool_default_size();
    mx_threadpool *pool = NULL;
    /* --evict: written before every pass, so each starts as in a network,
     * its arrays out of the caches. */
    const size_t evict_bytes = (size_t)evict_mb << 20;
    char *evict = evict_bytes ? mx_malloc(evict_bytes) : NULL;
    if (evict_bytes && !evict) {
        fprintf(stderr, "mxbench: --evict %d: out of memory\n", evict_mb);
        return 1;
    }
    for (int i = 0; i < N_LAYERS && !sgemm_only; i++) {
        layer at_batch = layers[i];
        if (batch > 0) at_batch.data[0] = batch;
        const layer *l = &at_batch;
        char full[128];
        snprintf(full, sizeof(full), "%s %s", l->net, l->name);
        if ((only && !strstr(full, only)) || (index >= 0 && i != index)) continue;
        if (list) {
            printf("{");
            print_spec(i, l);
            printf("}\n");
            continue;
        }
        if (!pool && mx_threadpool_create(threads, &pool) != MX_OK) {
            fprintf(stderr, "mxbench: %s\n", mx_last_error());
            free(evict);
            return 1;
        }
        if (bench_layer(i, l, runs, warmup, pool, evict, evict_bytes) != MX_OK) {
            fprintf(stderr, "mxbench: %s: %s\n", full, mx_last_error());
            mx_threadpool_free(pool);
            free(evict);
            return 1;
        }
    }
    if (!list && sgemm && index < 0) {
        /* square, and ResNet-18 layer2's forward product for a batch of 8 */
        if (bench_sgemm(1024, 1024, 1024, runs, warmup, threads) != MX_OK ||
            bench_sgemm(128, 6272, 1152, runs, warmup, threads) != MX_OK) {
            fprintf(stderr, "mxbench: sgemm: %s\n", mx_last_error());
            mx_threadpool_free(pool);
            free(evict);
            return 1;
        }
    }
    mx_threadpool_free(pool);
    free(evict);
    return 0;
}
