/* test_op_pooling.c - Pooling against a float64 reference. */
#include "parallel/parallel.h"
#include "support/opcheck.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Parameters read back through the registry's own table. */
static const void *field(const void *params, const char *name)
{
    const mx_op_def *op = mx_op_find("Pooling");
    return (const char *)params + mx_op_param(op, name)->offset;
}

/* Naive pooling in double, one output at a time, following MXNet's
 * definition: window [o*s - p, o*s - p + k) clipped to the input; the
 * avg divisor is the window clipped to the padded input (count_include_pad)
 * or to the input. */
static void pool_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    const mx_tuple *kernel = field(params, "kernel"), *stride = field(params, "stride"), *pad = field(params, "pad");
    int type = *(const int *)field(params, "pool_type");
    bool global = *(const bool *)field(params, "global_pool");
    bool incl = *(const bool *)field(params, "count_include_pad");
    const mx_shape *d = &in_shapes[0], *o = &out_shapes[0];
    int nsp = d->ndim - 2;
    int64_t k[3], s[3], p[3], X[3], O[3], in_plane = 1, out_plane = 1;
    for (int a = 0; a < nsp; a++) {
        X[a] = d->dims[2 + a];
        O[a] = o->dims[2 + a];
        k[a] = global ? X[a] : kernel->v[a];
        s[a] = global || stride->ndim == 0 ? 1 : stride->v[a];
        p[a] = global || pad->ndim == 0 ? 0 : pad->v[a];
        in_plane *= X[a];
        out_plane *= O[a];
    }
    for (int64_t pl = 0; pl < d->dims[0] * d->dims[1]; pl++)
        for (int64_t oi = 0; oi < out_plane; oi++) {
            int64_t idx[3] = {0}, rem = oi, lo[3] = {0}, hi[3] = {0}, size_incl = 1, size_excl = 1;
            for (int a = nsp - 1; a >= 0; a--) {
                idx[a] = rem % O[a];
                rem /= O[a];
            }
            for (int a = 0; a < nsp; a++) {
                int64_t start = idx[a] * s[a] - p[a];
                int64_t end = start + k[a] < X[a] + p[a] ? start + k[a] : X[a] + p[a];
                lo[a] = start < 0 ? 0 : start;
                hi[a] = end < X[a] ? end : X[a];
                size_incl *= end - start;
                size_excl *= hi[a] - lo[a];
            }
            double acc = type == 0 ? -FLT_MAX : 0;
            int64_t cur[3] = {lo[0], nsp > 1 ? lo[1] : 0, nsp > 2 ? lo[2] : 0};
            bool empty = false;
            for (int a = 0; a < nsp; a++) empty |= lo[a] >= hi[a];
            while (!empty) {
                int64_t flat = 0;
                for (int a = 0; a < nsp; a++) flat = flat * X[a] + cur[a];
                double v = in[0][pl * in_plane + flat];
                if (type == 0) acc = v > acc ? v : acc;
                else acc += v;
                int a = nsp - 1;
                while (a >= 0 && ++cur[a] == hi[a]) {
                    cur[a] = lo[a];
                    a--;
                }
                if (a < 0) break;
            }
            if (type == 1) {
                int64_t size = incl ? size_incl : size_excl;
                acc = size == 0 ? NAN : acc / (double)size;
            }
            out[0][pl * out_plane + oi] = acc;
        }
}

/* Distinct values spaced at least ~2/n apart, in random order, so that no
 * max-pooling window has a near tie a finite difference could straddle. */
static void distinct_values(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) data[i] = (float)(-1.0 + 2.0 * (double)i / (double)n);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)opcheck_uniform(rng, 0, (double)(i + 1));
        if (j > i) j = i;
        float t = data[i];
        data[i] = data[j];
        data[j] = t;
    }
}

/* keys/values: alternating NULL-terminated list. */
static void run_case(mx_shape data, const char *const *kv, uint64_t seed)
{
    const char *keys[16], *values[16];
    int n = 0;
    for (; kv[2 * n]; n++) {
        keys[n] = kv[2 * n];
        values[n] = kv[2 * n + 1];
    }
    opcheck_case c = {.op = "Pooling", .keys = keys, .values = values, .n_params = n, .ref = pool_ref,
                      .init = distinct_values, .seed = seed};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(pooling_1d)
{
    const char *types[] = {"max", "avg", "sum"};
    for (int t = 0; t < 3; t++) {
        run_case(MX_SHAPE(2, 3, 9), (const char *[]){"kernel", "3", "pool_type", types[t], NULL}, 1 + (uint64_t)t);
        run_case(MX_SHAPE(2, 3, 10),
                 (const char *[]){"kernel", "(2,)", "stride", "2", "pad", "1", "pool_type", types[t], NULL},
                 5 + (uint64_t)t);
        run_case(MX_SHAPE(1, 2, 8),
                 (const char *[]){"kernel", "3", "stride", "2", "pooling_convention", "full", "pool_type", types[t],
                                  NULL},
                 9 + (uint64_t)t);
        run_case(MX_SHAPE(3, 2, 7), (const char *[]){"global_pool", "True", "pool_type", types[t], NULL},
                 13 + (uint64_t)t);
    }
    run_case(MX_SHAPE(2, 3, 10),
             (const char *[]){"kernel", "3", "stride", "2", "pad", "2", "pool_type", "avg", "count_include_pad",
                              "False", NULL},
             17);
}
END_TEST

START_TEST(pooling_2d)
{
    const char *types[] = {"max", "avg", "sum"};
    for (int t = 0; t < 3; t++) {
        uint64_t sd = 100 + 10 * (uint64_t)t;
        run_case(MX_SHAPE(2, 3, 7, 9),
                 (const char *[]){"kernel", "(3, 3)", "stride", "(2, 2)", "pad", "(1, 1)", "pool_type", types[t], NULL},
                 sd + 1);
        run_case(MX_SHAPE(1, 2, 8, 8), (const char *[]){"kernel", "(2,2)", "stride", "(2,2)", "pool_type", types[t],
                                                        NULL},
                 sd + 2);
        run_case(MX_SHAPE(2, 2, 8, 7),
                 (const char *[]){"kernel", "(3,2)", "stride", "(2,3)", "pooling_convention", "full", "pool_type",
                                  types[t], NULL},
                 sd + 3);
        run_case(MX_SHAPE(1, 3, 5, 6), (const char *[]){"kernel", "(2,2)", "global_pool", "1", "pool_type", types[t],
                                                        NULL},
                 sd + 4);
        run_case(MX_SHAPE(3, 2, 11, 13),
                 (const char *[]){"kernel", "(3,5)", "stride", "(2,3)", "pad", "(1,2)", "pool_type", types[t],
                                  "layout", "NCHW", NULL},
                 sd + 5);
        run_case(MX_SHAPE(2, 1, 6, 5), (const char *[]){"kernel", "(3,3)", "pool_type", types[t], NULL}, sd + 6);
        /* Windows wider than the output row (the per-window loop order),
         * padded, in 2-D and 1-D. */
        run_case(MX_SHAPE(2, 2, 5, 7),
                 (const char *[]){"kernel", "(2,5)", "stride", "(1,2)", "pad", "(0,2)", "pool_type", types[t], NULL},
                 sd + 7);
        run_case(MX_SHAPE(2, 3, 6),
                 (const char *[]){"kernel", "5", "stride", "3", "pad", "2", "pool_type", types[t], NULL}, sd + 8);
    }
    /* avg divisor without padding counted, and the full convention's
     * windows clipped at the far edge (divisor clipped to the padded input). */
    run_case(MX_SHAPE(2, 3, 7, 9),
             (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,2)", "pool_type", "avg",
                              "count_include_pad", "False", NULL},
             150);
    run_case(MX_SHAPE(1, 2, 9, 8),
             (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)", "pool_type", "avg",
                              "pooling_convention", "full", NULL},
             151);
    run_case(MX_SHAPE(1, 2, 9, 8),
             (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)", "pool_type", "avg",
                              "pooling_convention", "full", "count_include_pad", "False", NULL},
             152);
}
END_TEST

START_TEST(pooling_3d)
{
    const char *types[] = {"max", "avg", "sum"};
    for (int t = 0; t < 3; t++) {
        run_case(MX_SHAPE(1, 2, 5, 6, 7),
                 (const char *[]){"kernel", "(2,3,3)", "stride", "(2,2,1)", "pad", "(0,1,1)", "pool_type", types[t],
                                  NULL},
                 200 + (uint64_t)t);
        run_case(MX_SHAPE(2, 1, 3, 4, 5), (const char *[]){"global_pool", "True", "pool_type", types[t], NULL},
                 210 + (uint64_t)t);
    }
}
END_TEST

/* The reference backward in double, from the kernel's own float output:
 * max gives each output's gradient to the first element of its window (in
 * raster order) equal to it, avg / sum spread it (divided) over the window. */
static void pool_ref_backward(const void *params, const float *x, const float *y, const float *dy, const mx_shape *d,
                              const mx_shape *o, double *dx)
{
    const mx_tuple *kernel = field(params, "kernel"), *stride = field(params, "stride"), *pad = field(params, "pad");
    int type = *(const int *)field(params, "pool_type");
    bool global = *(const bool *)field(params, "global_pool");
    bool incl = *(const bool *)field(params, "count_include_pad");
    int nsp = d->ndim - 2;
    int64_t k[3], s[3], p[3], X[3], O[3], in_plane = 1, out_plane = 1;
    for (int a = 0; a < nsp; a++) {
        X[a] = d->dims[2 + a];
        O[a] = o->dims[2 + a];
        k[a] = global ? X[a] : kernel->v[a];
        s[a] = global || stride->ndim == 0 ? 1 : stride->v[a];
        p[a] = global || pad->ndim == 0 ? 0 : pad->v[a];
        in_plane *= X[a];
        out_plane *= O[a];
    }
    int64_t planes = d->dims[0] * d->dims[1];
    memset(dx, 0, sizeof(double) * (size_t)(planes * in_plane));
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t oi = 0; oi < out_plane; oi++) {
            int64_t idx[3] = {0}, rem = oi, lo[3] = {0}, hi[3] = {0}, size_incl = 1, size_excl = 1;
            for (int a = nsp - 1; a >= 0; a--) {
                idx[a] = rem % O[a];
                rem /= O[a];
            }
            bool empty = false;
            for (int a = 0; a < nsp; a++) {
                int64_t start = idx[a] * s[a] - p[a];
                int64_t end = start + k[a] < X[a] + p[a] ? start + k[a] : X[a] + p[a];
                lo[a] = start < 0 ? 0 : start;
                hi[a] = end < X[a] ? end : X[a];
                size_incl *= end - start;
                size_excl *= hi[a] - lo[a];
                empty |= lo[a] >= hi[a];
            }
            double g = dy[pl * out_plane + oi];
            if (type == 1) {
                int64_t size = incl ? size_incl : size_excl;
                g = size == 0 ? 0 : g / (double)size;
            }
            int64_t cur[3] = {lo[0], nsp > 1 ? lo[1] : 0, nsp > 2 ? lo[2] : 0};
            while (!empty) {
                int64_t flat = 0;
                for (int a = 0; a < nsp; a++) flat = flat * X[a] + cur[a];
                int64_t i = pl * in_plane + flat;
                if (type != 0) {
                    dx[i] += g;
                } else if (x[i] == y[pl * out_plane + oi]) {
                    dx[i] += g;
                    break;
                }
                int a = nsp - 1;
                while (a >= 0 && ++cur[a] == hi[a]) {
                    cur[a] = lo[a];
                    a--;
                }
                if (a < 0) break;
            }
        }
}

/* Forward then backward (req write) on `pool`; returns y followed by dx
 * (*ny and *nx floats). The workspace is whatever the op asks for. */
static float *run_on_pool(const void *params, mx_shape d, const float *x, const float *dy_src, mx_threadpool *pool,
                          int64_t *ny, int64_t *nx)
{
    const mx_op_def *op = mx_op_find("Pooling");
    mx_shape in_s[1] = {d}, out_s[1];
    ck_assert_int_eq(op->infer_shape(params, in_s, 1, out_s, 1), MX_OK);
    *ny = mx_shape_size(&out_s[0]);
    *nx = mx_shape_size(&d);
    float *r = malloc(sizeof(float) * (size_t)(*ny + *nx));
    for (int64_t i = 0; i < *ny + *nx; i++) r[i] = 12345.0f; /* garbage the kernels must overwrite */
    size_t wb = op->workspace(params, in_s, out_s, false), wb2 = op->workspace(params, in_s, out_s, true);
    void *ws = malloc((wb > wb2 ? wb : wb2) + 1);
    mx_exec_ctx exec = {.ctx = mx_cpu(), .pool = pool};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true, .workspace = ws, .workspace_bytes = wb > wb2 ? wb : wb2};
    mx_tensor tx = {.data = (void *)x, .shape = d}, ty = {.data = r, .shape = out_s[0]};
    mx_tensor tdy = {.data = (void *)dy_src, .shape = out_s[0]}, tdx = {.data = r + *ny, .shape = d};
    mx_req req[1] = {MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, &tx, req, &ty, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, req, &tdx, NULL), MX_OK);
    free(ws);
    return r;
}

static const char *const widths[] = {"portable", "avx2", "avx512"};

/* One geometry through every path the kernels pick for it: opcheck (on
 * the calling thread and 3 threads), the whole gradient against the
 * reference backward, and bit-identical results on 1, 2 and 3 threads;
 * on every vector width. */
static void run_big_init(mx_shape data, const char *const *kv, uint64_t seed, bool ties)
{
    const char *keys[16], *values[16];
    int n = 0;
    for (; kv[2 * n]; n++) {
        keys[n] = kv[2 * n];
        values[n] = kv[2 * n + 1];
    }
    const mx_op_def *op = mx_op_find("Pooling");
    _Alignas(16) char params[16384];
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, n, params), MX_OK);
    mx_shape in_s[1] = {data}, out_s[1];
    ck_assert_int_eq(op->infer_shape(params, in_s, 1, out_s, 1), MX_OK);
    int64_t nx = mx_shape_size(&data), ny = mx_shape_size(&out_s[0]);
    float *x = malloc(sizeof(float) * (size_t)nx), *dy = malloc(sizeof(float) * (size_t)ny);
    double *want = malloc(sizeof(double) * (size_t)nx);
    uint64_t rng = seed;
    distinct_values(0, x, nx, &rng);
    if (ties) /* a few levels: windows full of ties, max must pick the first */
        for (int64_t i = 0; i < nx; i++) x[i] = (float)((int)(opcheck_uniform(&rng, 0, 3)) - 1);
    for (int64_t i = 0; i < ny; i++) dy[i] = (float)opcheck_uniform(&rng, -1, 1);
    double *xd = malloc(sizeof(double) * (size_t)nx), *yd = malloc(sizeof(double) * (size_t)ny);
    for (int64_t i = 0; i < nx; i++) xd[i] = x[i];
    pool_ref(params, (const double *const[]){xd}, &data, (double *const[]){yd}, &out_s[0]);
    mx_threadpool *p2, *p3;
    ck_assert_int_eq(mx_threadpool_create(2, &p2), MX_OK);
    ck_assert_int_eq(mx_threadpool_create(3, &p3), MX_OK);
    for (int w = 0; w < 3; w++) {
        setenv("MX_SIMD", widths[w], 1);
        opcheck_case c = {.op = "Pooling", .keys = keys, .values = values, .n_params = n, .ref = pool_ref,
                          .init = distinct_values, .seed = seed + (uint64_t)w, .max_points = w == 0 ? 24 : 4};
        c.in_shapes[0] = data;
        /* Finite differences need no ties. Every width's dx is checked
         * below against the reference backward on every element, so the
         * wider widths take only a few points here (req = add still). */
        if (!ties) opcheck_run(&c);
        int64_t a, b;
        float *r1 = run_on_pool(params, data, x, dy, NULL, &a, &b);
        float *r2 = run_on_pool(params, data, x, dy, p2, &a, &b), *r3 = run_on_pool(params, data, x, dy, p3, &a, &b);
        ck_assert_msg(!memcmp(r1, r2, sizeof(float) * (size_t)(ny + nx)) &&
                          !memcmp(r1, r3, sizeof(float) * (size_t)(ny + nx)),
                      "%s: results differ with the thread count", widths[w]);
        for (int64_t i = 0; i < ny; i++)
            ck_assert_msg(fabs(r1[i] - yd[i]) <= 1e-5 + 1e-5 * fabs(yd[i]), "%s: y[%lld] = %.8g, want %.8g", widths[w],
                          (long long)i, r1[i], yd[i]);
        pool_ref_backward(params, x, r1, dy, &data, &out_s[0], want);
        for (int64_t i = 0; i < nx; i++)
            ck_assert_msg(fabs(r3[ny + i] - want[i]) <= 1e-6 + 1e-5 * fabs(want[i]), "%s: dx[%lld] = %.8g, want %.8g",
                          widths[w], (long long)i, r3[ny + i], want[i]);
        free(r1), free(r2), free(r3);
    }
    unsetenv("MX_SIMD");
    mx_threadpool_free(p2);
    mx_threadpool_free(p3);
    free(x), free(dy), free(want), free(xd), free(yd);
}

static void run_big(mx_shape data, const char *const *kv, uint64_t seed)
{
    run_big_init(data, kv, seed, false);
    run_big_init(data, kv, seed, true);
}

/* Every kernel variant, with sizes that are not multiples of the vector
 * width and big enough (over 32K elements) to be split across threads. */
START_TEST(specialised_kernels_odd_sizes_and_threads)
{
    const char *types[] = {"max", "avg", "sum"};
    for (int t = 0; t < 3; t++) {
        uint64_t sd = 1000 + 100 * (uint64_t)t;
        /* LeNet's 2x2/2: short rows written directly; and 2x2/2 on odd sizes
         * (a remainder row and column no window covers). */
        run_big(MX_SHAPE(8, 20, 24, 24), (const char *[]){"kernel", "(2,2)", "stride", "(2,2)", "pool_type", types[t],
                                                          NULL}, sd + 1);
        run_big(MX_SHAPE(4, 9, 25, 27), (const char *[]){"kernel", "(2,2)", "stride", "(2,2)", "pool_type", types[t],
                                                         NULL}, sd + 2);
        /* ...with the full convention: the last window clipped, not tiling. */
        run_big(MX_SHAPE(4, 9, 25, 27), (const char *[]){"kernel", "(2,2)", "stride", "(2,2)", "pooling_convention",
                                                         "full", "pool_type", types[t], NULL}, sd + 3);
        /* 3x3/2 valid (AlexNet) and 3x3/1, short rows; 3x3/2 pad 1 (ResNet)
         * with a border column; odd output widths around 16 and 32. */
        run_big(MX_SHAPE(4, 9, 27, 29), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pool_type", types[t],
                                                         NULL}, sd + 4);
        run_big(MX_SHAPE(4, 8, 21, 19), (const char *[]){"kernel", "(3,3)", "stride", "(1,1)", "pool_type", types[t],
                                                         NULL}, sd + 5);
        run_big(MX_SHAPE(4, 8, 30, 34), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)",
                                                         "pool_type", types[t], NULL}, sd + 6);
        run_big(MX_SHAPE(2, 8, 30, 67), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)",
                                                         "pooling_convention", "full", "pool_type", types[t], NULL},
                sd + 7);
        /* Other kernel widths and strides: (3,2)/(2,1) short rows, stride 3
         * (the scalar path), 3-D with stride 2 along x. */
        run_big(MX_SHAPE(4, 8, 20, 21), (const char *[]){"kernel", "(3,2)", "stride", "(2,1)", "pool_type", types[t],
                                                         NULL}, sd + 8);
        run_big(MX_SHAPE(4, 8, 25, 26), (const char *[]){"kernel", "(3,3)", "stride", "(3,3)", "pad", "(1,1)",
                                                         "pool_type", types[t], NULL}, sd + 9);
        run_big(MX_SHAPE(2, 3, 5, 12, 29), (const char *[]){"kernel", "(2,3,3)", "stride", "(2,2,2)", "pad", "(0,1,1)",
                                                            "pool_type", types[t], NULL}, sd + 10);
        /* Long rows in several chunks: 2x2/2 and 3x3/2 pad 1 full over 600
         * columns, and stride 1 (the box-filtered avg / sum backward). */
        run_big(MX_SHAPE(2, 3, 11, 600), (const char *[]){"kernel", "(2,2)", "stride", "(2,2)", "pool_type", types[t],
                                                          NULL}, sd + 11);
        run_big(MX_SHAPE(2, 3, 9, 601), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)",
                                                         "pooling_convention", "full", "pool_type", types[t], NULL},
                sd + 12);
        run_big(MX_SHAPE(2, 4, 9, 531), (const char *[]){"kernel", "(3,5)", "stride", "(1,1)", "pad", "(1,2)",
                                                         "pool_type", types[t], NULL}, sd + 13);
        run_big(MX_SHAPE(4, 8, 31, 37), (const char *[]){"kernel", "(3,3)", "stride", "(1,1)", "pad", "(1,1)",
                                                         "pool_type", types[t], "count_include_pad", "False", NULL},
                sd + 14);
        /* Stride 1 on small planes (the box path of avg / sum): Inception's
         * 3x3/1 pad 1 on 14x14 and 7x7, and uneven kernels and pads. */
        run_big(MX_SHAPE(4, 9, 14, 14), (const char *[]){"kernel", "(3,3)", "stride", "(1,1)", "pad", "(1,1)",
                                                         "pool_type", types[t], NULL}, sd + 16);
        run_big(MX_SHAPE(5, 7, 7, 7), (const char *[]){"kernel", "(3,3)", "stride", "(1,1)", "pad", "(1,1)",
                                                       "pool_type", types[t], NULL}, sd + 17);
        run_big(MX_SHAPE(3, 5, 12, 9), (const char *[]){"kernel", "(4,3)", "stride", "(1,1)", "pad", "(1,2)",
                                                        "pool_type", types[t], "count_include_pad", "False", NULL},
                sd + 18);
        run_big(MX_SHAPE(2, 3, 40, 70), (const char *[]){"kernel", "(5,7)", "stride", "(1,1)", "pad", "(2,3)",
                                                         "pooling_convention", "full", "pool_type", types[t], NULL},
                sd + 19);
        /* Padding on short rows (max: the -inf padded planes): Inception's
         * 3x3/2 pad 1 on 28x28 and 14x14, full convention on 13x13, pads
         * wider than the kernel's reach. */
        run_big(MX_SHAPE(2, 16, 28, 28), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)",
                                                          "pool_type", types[t], NULL}, sd + 20);
        run_big(MX_SHAPE(3, 20, 14, 14), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)",
                                                          "pool_type", types[t], NULL}, sd + 21);
        run_big(MX_SHAPE(3, 20, 13, 13), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)",
                                                          "pooling_convention", "full", "pool_type", types[t], NULL},
                sd + 22);
        run_big(MX_SHAPE(4, 20, 9, 11), (const char *[]){"kernel", "(2,3)", "stride", "(1,2)", "pad", "(1,2)",
                                                         "pool_type", types[t], NULL}, sd + 23);
        /* 3x3/2 on long rows (the s2max path): ResNet's stem pool (pad 1,
         * 112x112), Inception-BN's (no pad: the last column and row
         * unread, 112 -> 55) and an odd width, full convention. */
        run_big(MX_SHAPE(1, 3, 112, 112), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)",
                                                           "pool_type", types[t], NULL}, sd + 24);
        run_big(MX_SHAPE(1, 3, 112, 112), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pool_type", types[t],
                                                           NULL}, sd + 25);
        run_big(MX_SHAPE(2, 3, 19, 75), (const char *[]){"kernel", "(3,3)", "stride", "(2,2)", "pad", "(1,1)",
                                                         "pooling_convention", "full", "pool_type", types[t], NULL},
                sd + 26);
        /* Global pooling over planes that are not a multiple of 16. */
        run_big(MX_SHAPE(6, 7, 31, 33), (const char *[]){"global_pool", "True", "pool_type", types[t], NULL}, sd + 15);
    }
}
END_TEST

/* Runs forward then backward directly on small arrays. */
static void run_direct(const char *const *keys, const char *const *values, int n, mx_shape dshape, const float *x,
                       float *y, const float *dy, float *dx, mx_req fwd_req, mx_req bwd_req)
{
    const mx_op_def *op = mx_op_find("Pooling");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, n, params), MX_OK);
    mx_shape in_s[1] = {dshape}, out_s[1];
    ck_assert_int_eq(op->infer_shape(params, in_s, 1, out_s, 1), MX_OK);
    size_t ws = op->workspace(params, in_s, out_s, false);
    float *w = malloc(ws);
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true, .workspace = w, .workspace_bytes = ws};
    mx_tensor tx = {.data = (void *)x, .shape = dshape, .ctx = mx_cpu()};
    mx_tensor ty = {.data = y, .shape = out_s[0], .ctx = mx_cpu()};
    mx_tensor tdy = {.data = (void *)dy, .shape = out_s[0], .ctx = mx_cpu()};
    mx_tensor tdx = {.data = dx, .shape = dshape, .ctx = mx_cpu()};
    mx_req rf[1] = {fwd_req}, rb[1] = {bwd_req};
    ck_assert_int_eq(op->forward(&ctx, params, &tx, rf, &ty, NULL), MX_OK);
    if (dx) ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, rb, &tdx, NULL), MX_OK);
    free(w);
}

/* Ties: MXNet's CPU kernel gives the gradient to the first maximum of the
 * window in raster order, and only to it. */
/* 1x1 windows at stride 1 tile the input, so backward writes every input
 * gradient once; a write request must not add onto what dx held (it did
 * on rows too wide for the short-row path, and in 3-D). */
START_TEST(unit_windows_write_not_add)
{
    const char *types[] = {"avg", "sum"};
    const mx_shape shapes[] = {MX_SHAPE(1, 1, 3, 40), MX_SHAPE(1, 2, 2, 3, 20)};
    const char *kernels[] = {"(1,1)", "(1,1,1)"};
    const mx_op_def *op = mx_op_find("Pooling");
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 2; s++) {
            const char *keys[] = {"kernel", "stride", "pool_type"}, *values[] = {kernels[s], kernels[s], types[t]};
            void *params = calloc(1, op->params_size);
            ck_assert_int_eq(mx_op_parse_params(op, keys, values, 3, params), MX_OK);
            const int64_t n = mx_shape_size(&shapes[s]);
            float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *dy = malloc(sizeof(float) * n);
            float *dx = malloc(sizeof(float) * n);
            for (int64_t i = 0; i < n; i++) x[i] = (float)i, y[i] = (float)i, dy[i] = 0.5f + (float)i, dx[i] = 77.0f;
            mx_tensor tx = {x, shapes[s], MX_FLOAT32, mx_cpu(), 0}, ty = {y, shapes[s], MX_FLOAT32, mx_cpu(), 0};
            mx_tensor tdy = {dy, shapes[s], MX_FLOAT32, mx_cpu(), 0}, tdx = {dx, shapes[s], MX_FLOAT32, mx_cpu(), 0};
            mx_exec_ctx exec = {.ctx = mx_cpu()};
            mx_op_ctx ctx = {.exec = &exec, .is_train = true};
            mx_req req = MX_REQ_WRITE;
            ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, &req, &tdx, NULL), MX_OK);
            for (int64_t i = 0; i < n; i++)
                ck_assert_msg(dx[i] == dy[i], "%s %dd: dx[%lld] = %g, want %g", types[t], s + 2, (long long)i, dx[i],
                              dy[i]);
            free(x), free(y), free(dy), free(dx), free(params);
        }
}
END_TEST

START_TEST(max_ties_route_to_first_maximum)
{
    const char *k1[] = {"kernel", "stride"}, *v1[] = {"(1,2)", "(1,1)"};
    float x[4] = {1, 3, 3, 2}, y[3], dy[3] = {1, 10, 100}, dx[4];
    run_direct(k1, v1, 2, MX_SHAPE(1, 1, 1, 4), x, y, dy, dx, MX_REQ_WRITE, MX_REQ_WRITE);
    ck_assert(y[0] == 3 && y[1] == 3 && y[2] == 3);
    ck_assert(dx[0] == 0 && dx[1] == 11 && dx[2] == 100 && dx[3] == 0);

    const char *k2[] = {"kernel"}, *v2[] = {"(2,2)"};
    float x2[4] = {5, 5, 5, 1}, y2[1], dy2[1] = {2}, dx2[4];
    run_direct(k2, v2, 1, MX_SHAPE(1, 1, 2, 2), x2, y2, dy2, dx2, MX_REQ_WRITE, MX_REQ_WRITE);
    ck_assert(y2[0] == 5 && dx2[0] == 2 && dx2[1] == 0 && dx2[2] == 0 && dx2[3] == 0);

    /* req = add accumulates, forward and backward. */
    float y3[1] = {1}, dx3[4] = {1, 1, 1, 1};
    run_direct(k2, v2, 1, MX_SHAPE(1, 1, 2, 2), x2, y3, dy2, NULL, MX_REQ_ADD, MX_REQ_ADD);
    ck_assert(y3[0] == 6);
    run_direct(k2, v2, 1, MX_SHAPE(1, 1, 2, 2), x2, y3, dy2, dx3, MX_REQ_WRITE, MX_REQ_ADD);
    ck_assert(y3[0] == 5 && dx3[0] == 3 && dx3[1] == 1 && dx3[2] == 1 && dx3[3] == 1);
}
END_TEST

/* pad >= kernel makes windows that hold only padding: max gives -FLT_MAX
 * (MXNet's lowest float), avg gives 0 counting padding and NaN without. */
START_TEST(windows_of_only_padding)
{
    float x[1] = {7}, y[3], dy[3] = {1, 1, 1}, dx[1];
    const char *k[] = {"kernel", "pad", "pool_type", "count_include_pad"};
    const char *vmax[] = {"1", "1", "max", "True"};
    run_direct(k, vmax, 3, MX_SHAPE(1, 1, 1), x, y, dy, dx, MX_REQ_WRITE, MX_REQ_WRITE);
    ck_assert(y[0] == -FLT_MAX && y[1] == 7 && y[2] == -FLT_MAX);
    ck_assert(dx[0] == 1);
    const char *vavg[] = {"1", "1", "avg", "True"};
    run_direct(k, vavg, 4, MX_SHAPE(1, 1, 1), x, y, dy, dx, MX_REQ_WRITE, MX_REQ_WRITE);
    ck_assert(y[0] == 0 && y[1] == 7 && y[2] == 0);
    ck_assert(dx[0] == 1);
    const char *vex[] = {"1", "1", "avg", "False"};
    run_direct(k, vex, 4, MX_SHAPE(1, 1, 1), x, y, dy, dx, MX_REQ_WRITE, MX_REQ_WRITE);
    ck_assert(isnan(y[0]) && y[1] == 7 && isnan(y[2]));
    ck_assert(dx[0] == 1);
}
END_TEST

/* Global max over planes of negative values whose size is not a multiple
 * of any vector width: padding lanes must not take part (a 0 would win). */
START_TEST(global_max_of_negative_planes)
{
    const char *k[] = {"global_pool", "pool_type"}, *v[] = {"True", "max"};
    for (int w = 0; w < 3; w++) {
        setenv("MX_SIMD", widths[w], 1);
        for (int n = 1; n <= 37; n += 4) {
            float x[2 * 37], y[2], dy[2] = {1, 2}, dx[2 * 37];
            for (int i = 0; i < 2 * n; i++) x[i] = -1.0f - (float)((i * 7) % (2 * n));
            run_direct(k, v, 2, MX_SHAPE(1, 2, n), x, y, dy, dx, MX_REQ_WRITE, MX_REQ_WRITE);
            for (int p = 0; p < 2; p++) {
                float m = -FLT_MAX;
                int at = -1;
                for (int i = 0; i < n; i++)
                    if (x[p * n + i] > m) m = x[p * n + i], at = i;
                ck_assert_msg(y[p] == m, "%s, plane of %d: max %g, want %g", widths[w], n, y[p], m);
                for (int i = 0; i < n; i++) ck_assert(dx[p * n + i] == (i == at ? dy[p] : 0.0f));
            }
        }
    }
    unsetenv("MX_SIMD");
}
END_TEST

static mx_shape infer_ok(mx_shape data, const char *const *keys, const char *const *values, int n)
{
    mx_shape in[1] = {data}, out[1];
    int n_in, n_out;
    ck_assert_msg(opcheck_infer("Pooling", keys, values, n, in, &n_in, out, &n_out) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(n_in, 1);
    ck_assert_int_eq(n_out, 1);
    return out[0];
}

START_TEST(output_shapes_follow_mxnet_formulas)
{
    mx_shape s;
    const char *k[] = {"kernel", "stride", "pooling_convention"};
    const char *valid[] = {"(3,3)", "(2,2)", "valid"}, *full[] = {"(3,3)", "(2,2)", "full"};
    s = infer_ok(MX_SHAPE(2, 3, 10, 11), k, valid, 3);
    ck_assert(s.ndim == 4 && s.dims[0] == 2 && s.dims[1] == 3 && s.dims[2] == 4 && s.dims[3] == 5);
    s = infer_ok(MX_SHAPE(2, 3, 10, 11), k, full, 3);
    ck_assert(s.dims[2] == 5 && s.dims[3] == 5);
    const char *kp[] = {"kernel", "pad"}, *vp[] = {"3", "1"};
    s = infer_ok(MX_SHAPE(1, 1, 5), kp, vp, 2); /* stride defaults to 1 */
    ck_assert(s.ndim == 3 && s.dims[2] == 5);
    const char *kg[] = {"global_pool"}, *vg[] = {"True"};
    s = infer_ok(MX_SHAPE(4, 8, 7, 9), kg, vg, 1); /* no kernel needed */
    ck_assert(s.ndim == 4 && s.dims[0] == 4 && s.dims[1] == 8 && s.dims[2] == 1 && s.dims[3] == 1);
    s = infer_ok(MX_SHAPE(4, 8, 3, 7, 9), kg, vg, 1);
    ck_assert(s.ndim == 5 && s.dims[2] == 1 && s.dims[3] == 1 && s.dims[4] == 1);
    ck_assert_ptr_null(mx_op_find("max_pooling")); /* the alias is the lead's call */
}
END_TEST

static void expect_param_error(mx_status want, const char *const *keys, const char *const *values, int n,
                               const char *msg)
{
    const mx_op_def *op = mx_op_find("Pooling");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, n, params), want);
    ck_assert_msg(strstr(mx_last_error(), msg), "error '%s' lacks '%s'", mx_last_error(), msg);
}

static void expect_infer_error(mx_shape data, const char *const *keys, const char *const *values, int n,
                               const char *msg)
{
    mx_shape in[1] = {data}, out[1];
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("Pooling", keys, values, n, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), msg), "error '%s' lacks '%s'", mx_last_error(), msg);
}

START_TEST(bad_parameters_name_op_key_and_value)
{
    expect_param_error(MX_ERR_INVALID, (const char *[]){"kernel"}, (const char *[]){"(-1, 2)"}, 1,
                       "Pooling: parameter 'kernel' has bad value '(-1, 2)'");
    expect_param_error(MX_ERR_INVALID, (const char *[]){"kernel", "stride"}, (const char *[]){"(2,2)", "(0,1)"}, 2,
                       "Pooling: parameter 'stride' has bad value '(0,1)'");
    expect_param_error(MX_ERR_INVALID, (const char *[]){"pool_type"}, (const char *[]){"max"}, 1,
                       "Pooling: parameter 'kernel' is required unless global_pool is set");
    expect_param_error(MX_ERR_INVALID, (const char *[]){"kernel", "stride"}, (const char *[]){"(2,2)", "(2,2,2)"}, 2,
                       "Pooling: parameter 'stride' has bad value '(2, 2, 2)'");
    expect_param_error(MX_ERR_INVALID, (const char *[]){"kernel", "pad"}, (const char *[]){"(2,2)", "1"}, 2,
                       "Pooling: parameter 'pad' has bad value '(1,)'");
    expect_param_error(MX_ERR_INVALID, (const char *[]){"kernel"}, (const char *[]){"(2,2,2,2)"}, 1,
                       "Pooling: parameter 'kernel' has bad value '(2, 2, 2, 2)'");
    expect_param_error(MX_ERR_UNSUPPORTED, (const char *[]){"kernel", "pool_type"}, (const char *[]){"2", "lp"}, 2,
                       "Pooling: parameter 'pool_type' value 'lp' is not supported");
    expect_param_error(MX_ERR_UNSUPPORTED, (const char *[]){"kernel", "pooling_convention"},
                       (const char *[]){"2", "same"}, 2, "'pooling_convention' value 'same' is not supported");
    expect_param_error(MX_ERR_UNSUPPORTED, (const char *[]){"kernel", "layout"}, (const char *[]){"(2,2)", "NHWC"}, 2,
                       "Pooling: parameter 'layout' value 'NHWC' is not supported");
    expect_param_error(MX_ERR_INVALID, (const char *[]){"kernel", "layout"}, (const char *[]){"(2,2)", "NCW"}, 2,
                       "Pooling: parameter 'layout' has bad value 'NCW'");
    expect_param_error(MX_ERR_INVALID, (const char *[]){"kernel", "pool_type"}, (const char *[]){"2", "mean"}, 2,
                       "Pooling: parameter 'pool_type' has bad value 'mean'");
    expect_param_error(MX_ERR_INVALID, (const char *[]){"kernal"}, (const char *[]){"2"}, 1,
                       "unknown parameter 'kernal' (did you mean 'kernel'?)");

    const char *k[] = {"kernel"}, *v2[] = {"(3,3)"};
    expect_infer_error(MX_SHAPE(1, 1, 2, 8), k, v2, 1, "Pooling: kernel size (3) exceeds input (2 padded to 2)");
    expect_infer_error(MX_SHAPE(1, 8), k, v2, 1, "Pooling: data has shape (1,8)");
    expect_infer_error(MX_SHAPE(1, 1, 8), k, v2, 1, "Pooling: kernel (3, 3) needs 4-D data, got data shape (1,1,8)");
    expect_infer_error((mx_shape){0}, k, v2, 1, "Pooling: the shape of data is unknown");
    const char *kl[] = {"global_pool", "layout"}, *vl[] = {"True", "NCHW"};
    expect_infer_error(MX_SHAPE(1, 1, 8), kl, vl, 2, "Pooling: layout NCHW does not match data shape (1,1,8)");
}
END_TEST

START_TEST(param_defaults_are_mxnet_style)
{
    const mx_op_def *op = mx_op_find("Pooling");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    char buf[64];
    const char *k[] = {"kernel"}, *v[] = {"2,2"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "kernel"), params, buf, sizeof(buf)), "(2, 2)");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "pool_type"), params, buf, sizeof(buf)), "max");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "pooling_convention"), params, buf, sizeof(buf)), "valid");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "global_pool"), params, buf, sizeof(buf)), "False");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "count_include_pad"), params, buf, sizeof(buf)), "True");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_pooling");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, pooling_1d);
    tcase_add_test(tc, pooling_2d);
    tcase_add_test(tc, pooling_3d);
    tcase_add_test(tc, specialised_kernels_odd_sizes_and_threads);
    tcase_add_test(tc, max_ties_route_to_first_maximum);
    tcase_add_test(tc, windows_of_only_padding);
    tcase_add_test(tc, unit_windows_write_not_add);
    tcase_add_test(tc, global_max_of_negative_planes);
    tcase_add_test(tc, output_shapes_follow_mxnet_formulas);
    tcase_add_test(tc, bad_parameters_name_op_key_and_value);
    tcase_add_test(tc, param_defaults_are_mxnet_style);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
