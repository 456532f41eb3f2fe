/* test_op_softmax_output.c - SoftmaxOutput against a float64 reference:
 * softmax forward, and backward against finite differences of the
 * cross-entropy loss it is the gradient of. */
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const void *field(const void *params, const char *name)
{
    const mx_op_def *op = mx_op_find("SoftmaxOutput");
    return (const char *)params + mx_op_param(op, name)->offset;
}
static double fparam(const void *p, const char *name) { return *(const double *)field(p, name); }
static bool bparam(const void *p, const char *name) { return *(const bool *)field(p, name); }
static int eparam(const void *p, const char *name) { return *(const int *)field(p, name); }

/* The softmax's (outer, k, inner) view of data, as the layer defines it. */
static void geometry(const void *p, const mx_shape *d, int64_t *outer, int64_t *k, int64_t *inner)
{
    int64_t size = mx_shape_size(d);
    if (bparam(p, "multi_output")) {
        *outer = d->dims[0];
        *k = d->dims[1];
        *inner = size / (*outer * *k);
    } else if (bparam(p, "preserve_shape")) {
        *k = d->dims[d->ndim - 1];
        *outer = size / *k;
        *inner = 1;
    } else {
        *outer = d->dims[0];
        *k = size / *outer;
        *inner = 1;
    }
}

static void ref_softmax(const void *p, const double *x, const mx_shape *d, double *y)
{
    int64_t outer, k, inner;
    geometry(p, d, &outer, &k, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t t = 0; t < inner; t++) {
            const double *xr = x + o * k * inner + t;
            double *yr = y + o * k * inner + t;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < k; j++) m = fmax(m, xr[j * inner]);
            for (int64_t j = 0; j < k; j++) s += exp(xr[j * inner] - m);
            for (int64_t j = 0; j < k; j++) yr[j * inner] = exp(xr[j * inner] - m) / s;
        }
}

static void so_ref(const void *p, const double *const *in, const mx_shape *in_shapes, double *const *out,
                   const mx_shape *out_shapes)
{
    (void)out_shapes;
    ref_softmax(p, in[0], &in_shapes[0], out[0]);
}

/* The scalar loss whose gradient SoftmaxOutput's backward returns:
 * scale * sum over kept instances of -sum_j t_j log p_j, t the (smoothed)
 * one-hot target, or the label itself when it has data's shape. */
static double so_loss(const void *p, const double *const *in, const mx_shape *in_shapes)
{
    const mx_shape *d = &in_shapes[0];
    int64_t outer, k, inner, size = mx_shape_size(d);
    geometry(p, d, &outer, &k, &inner);
    double *y = malloc(sizeof(double) * (size_t)size);
    ref_softmax(p, in[0], d, y);
    double loss = 0;
    if (mx_shape_equal(&in_shapes[1], d)) {
        for (int64_t i = 0; i < size; i++) loss -= in[1][i] * log(y[i]);
        free(y);
        return fparam(p, "grad_scale") * loss;
    }
    int64_t n_label = mx_shape_size(&in_shapes[1]);
    int ignore = (int)fparam(p, "ignore_label");
    int norm = eparam(p, "normalization");
    bool multi = bparam(p, "multi_output");
    double valid = 1;
    if (norm == 1) {
        valid = multi ? (double)outer : (double)n_label;
    } else if (norm == 2) {
        valid = 0;
        for (int64_t i = 0; i < n_label; i++) valid += (int)in[1][i] != ignore;
        if (valid == 0) valid = 1;
    }
    double scale = fparam(p, "grad_scale") / valid;
    if (multi && norm != 2) scale /= (double)inner;
    double alpha = fparam(p, "smooth_alpha");
    for (int64_t o = 0; o < outer; o++)
        for (int64_t t = 0; t < inner; t++) {
            int label = (int)in[1][o * inner + t];
            if (bparam(p, "use_ignore") && label == ignore) continue;
            for (int64_t j = 0; j < k; j++) {
                double target = j == label ? 1 - alpha : alpha / (double)(k - 1);
                loss -= scale * target * log(y[o * k * inner + j * inner + t]);
            }
        }
    free(y);
    return loss;
}

/* What the init callback needs to know about the case being run. */
static struct {
    int64_t outer, k, inner;
    bool prob;         /* label = a probability per class */
    int ignore_every;  /* every n-th label is set to ignore_value (0: none) */
    double ignore_value;
} g;

static void so_init(int index, float *data, int64_t n, uint64_t *rng)
{
    if (index == 0) {
        for (int64_t i = 0; i < n; i++) data[i] = (float)opcheck_uniform(rng, -2, 2);
        return;
    }
    if (g.prob) { /* positive, summing to 1 along the class axis */
        for (int64_t i = 0; i < n; i++) data[i] = (float)opcheck_uniform(rng, 0.1, 1);
        for (int64_t o = 0; o < g.outer; o++)
            for (int64_t t = 0; t < g.inner; t++) {
                double s = 0;
                for (int64_t j = 0; j < g.k; j++) s += data[(o * g.k + j) * g.inner + t];
                for (int64_t j = 0; j < g.k; j++) data[(o * g.k + j) * g.inner + t] /= (float)s;
            }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        data[i] = (float)(int64_t)opcheck_uniform(rng, 0, (double)g.k);
        if (g.ignore_every && i % g.ignore_every == g.ignore_every - 1) data[i] = (float)g.ignore_value;
    }
}

static void run(mx_shape data, mx_shape label, const char *const *keys, const char *const *values, int n,
                bool prob, int ignore_every, double ignore_value, uint64_t seed)
{
    const mx_op_def *op = mx_op_find("SoftmaxOutput");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, n, params), MX_OK);
    geometry(params, &data, &g.outer, &g.k, &g.inner);
    g.prob = prob;
    g.ignore_every = ignore_every;
    g.ignore_value = ignore_value;
    opcheck_case c = {.op = "SoftmaxOutput", .keys = keys, .values = values, .n_params = n, .ref = so_ref,
                      .loss = so_loss, .init = so_init, .skip_grad = 2, .seed = seed};
    c.in_shapes[0] = data;
    c.in_shapes[1] = label;
    opcheck_run(&c);
}

START_TEST(rows_against_reference)
{
    const char *k0[] = {"grad_scale"}, *v0[] = {"1"};
    run(MX_SHAPE(4, 7), (mx_shape){0}, k0, v0, 1, false, 0, 0, 1);
    run(MX_SHAPE(1, 1), (mx_shape){0}, k0, v0, 1, false, 0, 0, 2);
    run(MX_SHAPE(17, 33), (mx_shape){0}, k0, v0, 1, false, 0, 0, 3);
    const char *v1[] = {"0.37"};
    run(MX_SHAPE(5, 3), (mx_shape){0}, k0, v1, 1, false, 0, 0, 4);
    /* (N, C, H) flattened to (N, C*H) rows: the label is (N, C) in MXNet, of
     * which the first N entries label the rows. Kept in range here. */
    run(MX_SHAPE(3, 2, 4), (mx_shape){0}, k0, v0, 1, false, 0, 0, 5);
    /* preserve_shape: softmax over the last axis, label (d0, d1). */
    const char *k2[] = {"preserve_shape"}, *v2[] = {"True"};
    run(MX_SHAPE(2, 3, 5), (mx_shape){0}, k2, v2, 1, false, 0, 0, 6);
    run(MX_SHAPE(3, 1, 2, 7), (mx_shape){0}, k2, v2, 1, false, 0, 0, 7);
}
END_TEST

START_TEST(normalization_ignore_and_smoothing)
{
    const char *norms[] = {"null", "batch", "valid"};
    for (int n = 0; n < 3; n++) {
        const char *k[] = {"normalization", "use_ignore", "ignore_label", "grad_scale"};
        const char *v[] = {norms[n], "True", "2", "1.5"};
        run(MX_SHAPE(9, 5), (mx_shape){0}, k, v, 4, false, 3, 2, 10 + (uint64_t)n);
        /* ignore_label counts for 'valid' even without use_ignore (MXNet). */
        const char *v2[] = {norms[n], "False", "2", "1.5"};
        run(MX_SHAPE(9, 5), (mx_shape){0}, k, v2, 4, false, 3, 2, 20 + (uint64_t)n);
        const char *ks[] = {"normalization", "smooth_alpha", "use_ignore", "ignore_label"};
        const char *vs[] = {norms[n], "0.1", "True", "0"};
        run(MX_SHAPE(6, 4), (mx_shape){0}, ks, vs, 4, false, 4, 0, 30 + (uint64_t)n);
    }
    /* Every label ignored: 'valid' divides by 1, not 0. */
    const char *k[] = {"normalization", "use_ignore", "ignore_label"}, *v[] = {"valid", "True", "1"};
    run(MX_SHAPE(1, 3), (mx_shape){0}, k, v, 3, false, 1, 1, 40);
}
END_TEST

START_TEST(multi_output_against_reference)
{
    const char *norms[] = {"null", "batch", "valid"};
    for (int n = 0; n < 3; n++) {
        const char *k[] = {"multi_output", "normalization", "use_ignore", "ignore_label", "grad_scale"};
        const char *v[] = {"True", norms[n], "True", "1", "2"};
        run(MX_SHAPE(2, 4, 3, 5), (mx_shape){0}, k, v, 5, false, 4, 1, 50 + (uint64_t)n);
        run(MX_SHAPE(2, 4, 3, 5), MX_SHAPE(2, 3, 5), k, v, 5, false, 4, 1, 60 + (uint64_t)n);
        run(MX_SHAPE(3, 5, 7), MX_SHAPE(3, 1, 7), k, v, 5, false, 0, 1, 70 + (uint64_t)n);
        const char *ks[] = {"multi_output", "normalization", "smooth_alpha"};
        const char *vs[] = {"True", norms[n], "0.2"};
        run(MX_SHAPE(2, 3, 6), (mx_shape){0}, ks, vs, 3, false, 0, 0, 80 + (uint64_t)n);
    }
    /* (N, C) with multi_output: one position per instance. */
    const char *k[] = {"multi_output"}, *v[] = {"True"};
    run(MX_SHAPE(5, 3), (mx_shape){0}, k, v, 1, false, 0, 0, 90);
}
END_TEST

/* Sizes split across the kernel pool (over 32K elements): rows, and
 * multi_output with several chunks of positions per instance. */
START_TEST(large_shapes_split_across_threads)
{
    const char *k[] = {"grad_scale", "normalization"}, *v[] = {"1", "batch"};
    run(MX_SHAPE(400, 100), (mx_shape){0}, k, v, 2, false, 0, 0, 200);
    const char *km[] = {"multi_output", "use_ignore", "ignore_label"}, *vm[] = {"True", "True", "2"};
    run(MX_SHAPE(4, 10, 1000), (mx_shape){0}, km, vm, 3, false, 7, 2, 201);
}
END_TEST

START_TEST(probability_labels)
{
    const char *k[] = {"grad_scale", "normalization"}, *v[] = {"0.5", "batch"};
    run(MX_SHAPE(4, 6), MX_SHAPE(4, 6), k, v, 2, true, 0, 0, 100);
    const char *k2[] = {"multi_output"}, *v2[] = {"True"};
    run(MX_SHAPE(2, 3, 4), MX_SHAPE(2, 3, 4), k2, v2, 1, true, 0, 0, 101);
}
END_TEST

/* out_grad=True multiplies by the output gradient element-wise, which is no
 * scalar loss's gradient: checked against the formula directly. */
START_TEST(out_grad_multiplies)
{
    const mx_op_def *op = mx_op_find("SoftmaxOutput");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"out_grad", "grad_scale", "use_ignore", "ignore_label"}, *v[] = {"True", "3", "True", "0"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 4, params), MX_OK);
    enum { N = 3, C = 4 };
    float x[N * C], lab[N] = {2, 0, 3}, y[N * C], og[N * C], dx[N * C], dl[N] = {9, 9, 9};
    uint64_t rng = 77;
    for (int i = 0; i < N * C; i++) {
        x[i] = (float)opcheck_uniform(&rng, -1, 1);
        og[i] = (float)opcheck_uniform(&rng, -1, 1);
    }
    mx_tensor in[2] = {{x, MX_SHAPE(N, C), MX_FLOAT32, mx_cpu(), 0}, {lab, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}};
    mx_tensor out = {y, MX_SHAPE(N, C), MX_FLOAT32, mx_cpu(), 0}, ogt = {og, MX_SHAPE(N, C), MX_FLOAT32, mx_cpu(), 0};
    mx_tensor grads[2] = {{dx, MX_SHAPE(N, C), MX_FLOAT32, mx_cpu(), 0}, {dl, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[2] = {MX_REQ_WRITE, MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, &ogt, in, &out, req, grads, NULL), MX_OK);
    for (int r = 0; r < N; r++)
        for (int j = 0; j < C; j++) {
            int i = r * C + j;
            double want = r == 1 ? 0 : 3.0 * ((double)y[i] - (j == (int)lab[r])) * og[i];
            ck_assert_msg(fabs(dx[i] - want) < 1e-5, "dx[%d] = %g, want %g", i, dx[i], want);
        }
    for (int r = 0; r < N; r++) ck_assert(dl[r] == 0.0f);

    /* Probability labels (data's shape) with out_grad: (out - label) * og. */
    float plab[N * C], dpl[N * C];
    for (int i = 0; i < N * C; i++) plab[i] = 1.0f / C;
    in[1] = (mx_tensor){plab, MX_SHAPE(N, C), MX_FLOAT32, mx_cpu(), 0};
    grads[1] = (mx_tensor){dpl, MX_SHAPE(N, C), MX_FLOAT32, mx_cpu(), 0};
    ck_assert_int_eq(op->backward(&ctx, params, &ogt, in, &out, req, grads, NULL), MX_OK);
    for (int i = 0; i < N * C; i++) {
        double want = 3.0 * ((double)y[i] - 1.0 / C) * og[i];
        ck_assert_msg(fabs(dx[i] - want) < 1e-5, "prob dx[%d] = %g, want %g", i, dx[i], want);
    }
}
END_TEST

/* Forward in place (out on data) and with req add give the same softmax. */
START_TEST(forward_in_place_and_add)
{
    const mx_op_def *op = mx_op_find("SoftmaxOutput");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"multi_output"}, *v[] = {"True"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    enum { N = 2, C = 3, S = 300 }; /* S > one chunk of positions */
    static float x[N * C * S], y[N * C * S], lab[N * S];
    uint64_t rng = 5;
    for (int i = 0; i < N * C * S; i++) x[i] = (float)opcheck_uniform(&rng, -3, 3);
    mx_tensor in[2] = {{x, MX_SHAPE(N, C, S), MX_FLOAT32, mx_cpu(), 0}, {lab, MX_SHAPE(N, S), MX_FLOAT32, mx_cpu(), 0}};
    mx_tensor out = {y, MX_SHAPE(N, C, S), MX_FLOAT32, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    /* req add accumulates the same values, strided and in rows */
    static float z[N * C * S];
    for (int rows = 0; rows < 2; rows++) {
        const char *kr[] = {"multi_output"}, *vr[] = {rows ? "False" : "True"};
        ck_assert_int_eq(mx_op_parse_params(op, kr, vr, 1, params), MX_OK);
        req[0] = MX_REQ_WRITE;
        ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
        for (int i = 0; i < N * C * S; i++) z[i] = 2.0f;
        mx_tensor acc = {z, MX_SHAPE(N, C, S), MX_FLOAT32, mx_cpu(), 0};
        req[0] = MX_REQ_ADD;
        ck_assert_int_eq(op->forward(&ctx, params, in, req, &acc, NULL), MX_OK);
        for (int i = 0; i < N * C * S; i++)
            ck_assert_msg(fabsf(z[i] - 2.0f - y[i]) < 1e-6f, "add [%d]: %g vs 2 + %g", i, z[i], y[i]);
    }
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    req[0] = MX_REQ_WRITE;
    ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    out.data = x;
    req[0] = MX_REQ_INPLACE;
    ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    for (int i = 0; i < N * C * S; i++) ck_assert_float_eq(x[i], y[i]);
}
END_TEST

static bool shape_is(const mx_shape *s, mx_shape want) { return mx_shape_equal(s, &want); }

START_TEST(shapes_and_errors)
{
    mx_shape in[2], out[1];
    int n_in, n_out;
    const char *none[] = {NULL};
    in[0] = MX_SHAPE(8, 10);
    in[1] = (mx_shape){0};
    ck_assert_int_eq(opcheck_infer("SoftmaxOutput", none, none, 0, in, &n_in, out, &n_out), MX_OK);
    ck_assert_int_eq(n_in, 2);
    ck_assert(shape_is(&in[1], MX_SHAPE(8)));
    ck_assert(shape_is(&out[0], MX_SHAPE(8, 10)));

    in[1] = MX_SHAPE(7);
    ck_assert_int_eq(opcheck_infer("SoftmaxOutput", none, none, 0, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "SoftmaxOutput: label has shape (7), expected (8)"));

    const char *km[] = {"multi_output"}, *vm[] = {"1"};
    in[0] = MX_SHAPE(2, 5, 3, 4);
    in[1] = (mx_shape){0};
    ck_assert_int_eq(opcheck_infer("SoftmaxOutput", km, vm, 1, in, &n_in, out, &n_out), MX_OK);
    ck_assert(shape_is(&in[1], MX_SHAPE(2, 12)));
    in[1] = MX_SHAPE(2, 3, 5);
    ck_assert_int_eq(opcheck_infer("SoftmaxOutput", km, vm, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "label has shape (2,3,5), expected (2,12) or (2,3,4)"));

    in[0] = MX_SHAPE(5);
    in[1] = (mx_shape){0};
    ck_assert_int_eq(opcheck_infer("SoftmaxOutput", none, none, 0, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "at least 2 dimensions"));

    const mx_op_def *op = mx_op_find("SoftmaxOutput");
    ck_assert_int_eq(op->flags & MX_OP_LOSS, MX_OP_LOSS);
    ck_assert_ptr_eq(mx_op_find("Softmax"), op);      /* MXNet's deprecated name */
    ck_assert_ptr_ne(mx_op_find("softmax"), op);      /* the plain softmax op */
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k1[] = {"normalization"}, *v1[] = {"bach"};
    ck_assert_int_eq(mx_op_parse_params(op, k1, v1, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "SoftmaxOutput: parameter 'normalization' has bad value 'bach'"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'batch'"));
    const char *k2[] = {"smooth_alpha"}, *v2[] = {"1.5"};
    ck_assert_int_eq(mx_op_parse_params(op, k2, v2, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "'smooth_alpha' has bad value '1.5'"));
    const char *k3[] = {"grad_scal"}, *v3[] = {"1"};
    ck_assert_int_eq(mx_op_parse_params(op, k3, v3, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'grad_scale'"));
    char buf[64];
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "normalization"), params, buf, sizeof(buf)), "null");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "ignore_label"), params, buf, sizeof(buf)), "-1");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_softmax_output");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rows_against_reference);
    tcase_add_test(tc, normalization_ignore_and_smoothing);
    tcase_add_test(tc, multi_output_against_reference);
    tcase_add_test(tc, large_shapes_split_across_threads);
    tcase_add_test(tc, probability_labels);
    tcase_add_test(tc, out_grad_multiplies);
    tcase_add_test(tc, forward_in_place_and_add);
    tcase_add_test(tc, shapes_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
