/* opcheck.c - forward vs float64 reference, backward vs finite differences. */
#include "opcheck.h"

#include "support/poolhold.h"

#include <check.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double opcheck_uniform(uint64_t *s, double lo, double hi)
{
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return lo + (hi - lo) * (double)(x >> 11) * 0x1.0p-53;
}

mx_status opcheck_infer(const char *op_name, const char *const *keys, const char *const *values, int n_params,
                        mx_shape *in_shapes, int *n_in, mx_shape *out_shapes, int *n_out)
{
    const mx_op_def *op;
    MX_TRY(mx_op_lookup(op_name, &op));
    void *params = calloc(1, op->params_size + 1);
    mx_status s = mx_op_parse_params(op, keys, values, n_params, params);
    if (s == MX_OK) {
        const char *names[MX_OP_MAX_IO];
        *n_in = op->list_inputs(params, names);
        *n_out = op->list_outputs(params, names);
        s = op->infer_shape(params, in_shapes, *n_in, out_shapes, *n_out);
    }
    free(params);
    return s;
}

static mx_tensor make_tensor(const mx_shape *shape)
{
    int64_t n = mx_shape_size(shape);
    mx_tensor t = {.data = calloc((size_t)(n ? n : 1), sizeof(float)), .shape = *shape, .dtype = MX_FLOAT32,
                   .ctx = mx_cpu()};
    ck_assert_ptr_nonnull(t.data);
    return t;
}

/* A tensor holding `value` everywhere: outputs and gradients start as
 * garbage, so a kernel that accumulates where it should overwrite fails. */
static mx_tensor make_filled(const mx_shape *shape, float value)
{
    mx_tensor t = make_tensor(shape);
    int64_t n = mx_shape_size(shape);
    for (int64_t i = 0; i < n; i++) ((float *)t.data)[i] = value;
    return t;
}

static double *to_double(const mx_tensor *t)
{
    int64_t n = mx_shape_size(&t->shape);
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) d[i] = ((const float *)t->data)[i];
    return d;
}

/* L = sum over visible outputs of out .* head (or the case's loss). */
static double objective(const opcheck_case *c, const void *params, double **in, const mx_shape *in_shapes,
                        int n_out_vis, double **ref_out, const mx_shape *out_shapes, double *const *head)
{
    if (c->loss) return c->loss(params, (const double *const *)in, in_shapes);
    c->ref(params, (const double *const *)in, in_shapes, ref_out, out_shapes);
    double l = 0;
    for (int k = 0; k < n_out_vis; k++) {
        int64_t n = mx_shape_size(&out_shapes[k]);
        for (int64_t i = 0; i < n; i++) l += ref_out[k][i] * head[k][i];
    }
    return l;
}

/* The finite differences of one case, in the order they are taken: both
 * runs of a case see the same inputs, so the second run reuses the first
 * run's values (they cost two float64 reference passes each). */
typedef struct fd_values {
    double *v;
    int64_t n, pos;
    bool filled;
} fd_values;

static double fd_value(fd_values *fd, const opcheck_case *c, const void *params, double **din, int input, int64_t j,
                       double eps, const mx_shape *in_shapes, int n_vis, double **ref_out, const mx_shape *out_shapes,
                       double *const *head)
{
    if (fd->filled) {
        ck_assert_msg(fd->pos < fd->n, "%s: the second run takes more finite differences than the first", c->op);
        return fd->v[fd->pos++];
    }
    double saved = din[input][j];
    din[input][j] = saved + eps;
    double lp = objective(c, params, din, in_shapes, n_vis, ref_out, out_shapes, head);
    din[input][j] = saved - eps;
    double lm = objective(c, params, din, in_shapes, n_vis, ref_out, out_shapes, head);
    din[input][j] = saved;
    double value = (lp - lm) / (2 * eps);
    if (fd->n % 256 == 0) {
        fd->v = realloc(fd->v, sizeof(double) * (size_t)(fd->n + 256));
        ck_assert_ptr_nonnull(fd->v);
    }
    fd->v[fd->n++] = value;
    return value;
}

/* What a run wrote: forward outputs and written gradients, to compare a
 * run on a busy pool with one on the same pool free (`have`: compare). */
typedef struct run_bits {
    bool have;
    float *out[MX_OP_MAX_IO], *grad[MX_OP_MAX_IO];
} run_bits;

/* Records a (n floats) into *slot, or with bits->have compares them. */
static void same_bits(const opcheck_case *c, const run_bits *bits, float **slot, const float *a, int64_t n,
                      const char *what, int index)
{
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    if (!bits->have) {
        *slot = malloc(bytes);
        ck_assert_ptr_nonnull(*slot);
        if (n > 0) memcpy(*slot, a, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&(*slot)[i], &a[i], sizeof(float)) == 0,
                      "%s %s %d [%lld]: %.9g on a busy pool, %.9g with the pool free (a kernel's result may depend "
                      "only on the pool's size)",
                      c->op, what, index, (long long)i, a[i], (*slot)[i]);
}

/* One full check with kernels splitting their work on `pool` (NULL: on
 * the calling thread); bits (NULL: none) records or compares what it wrote. */
static void opcheck_run_on(const opcheck_case *c, mx_threadpool *pool, fd_values *fdv, run_bits *bits)
{
    const mx_op_def *op = c->op_def;
    if (!op) ck_assert_msg(mx_op_lookup(c->op, &op) == MX_OK, "%s", mx_last_error());
    void *params = calloc(1, op->params_size + 1);
    ck_assert_msg(mx_op_parse_params(op, c->keys, c->values, c->n_params, params) == MX_OK, "%s", mx_last_error());
    const char *names[MX_OP_MAX_IO], *out_names[MX_OP_MAX_IO];
    int n_in = op->list_inputs(params, names);
    int n_out = op->list_outputs(params, out_names);
    int n_aux = op->num_aux ? op->num_aux(params) : 0;
    int n_vis = op->num_visible_outputs ? op->num_visible_outputs(params) : n_out;
    mx_shape in_shapes[MX_OP_MAX_IO], out_shapes[MX_OP_MAX_IO];
    memcpy(in_shapes, c->in_shapes, sizeof(in_shapes));
    memset(out_shapes, 0, sizeof(out_shapes));
    ck_assert_msg(op->infer_shape(params, in_shapes, n_in, out_shapes, n_out) == MX_OK, "%s: %s", c->op,
                  mx_last_error());

    uint64_t rng = c->seed ? c->seed : 12345;
    mx_tensor in[MX_OP_MAX_IO], out[MX_OP_MAX_IO], in_grad[MX_OP_MAX_IO], out_grad[MX_OP_MAX_IO];
    for (int i = 0; i < n_in; i++) {
        in[i] = make_tensor(&in_shapes[i]);
        int64_t n = mx_shape_size(&in_shapes[i]);
        if (c->init) c->init(i, in[i].data, n, &rng);
        else for (int64_t k = 0; k < n; k++) ((float *)in[i].data)[k] = (float)opcheck_uniform(&rng, -1, 1);
        in_grad[i] = make_filled(&in_shapes[i], 12345.0f);
    }
    for (int k = 0; k < n_out; k++) {
        out[k] = make_filled(&out_shapes[k], 12345.0f);
        out_grad[k] = make_tensor(&out_shapes[k]);
        int64_t n = mx_shape_size(&out_shapes[k]);
        for (int64_t i = 0; i < n; i++) ((float *)out_grad[k].data)[i] = (float)opcheck_uniform(&rng, -1, 1);
    }
    mx_tensor *aux = n_aux ? &in[n_in - n_aux] : NULL;
    mx_exec_ctx exec = {.ctx = mx_cpu(), .pool = pool};
    size_t ws_bytes = op->workspace ? op->workspace(params, in_shapes, out_shapes, false) : 0;
    size_t ws_bwd = op->workspace ? op->workspace(params, in_shapes, out_shapes, true) : 0;
    if (ws_bwd > ws_bytes) ws_bytes = ws_bwd;
    void *ws = ws_bytes ? malloc(ws_bytes) : NULL;
    mx_op_ctx ctx = {.exec = &exec, .is_train = c->is_train, .workspace = ws, .workspace_bytes = ws_bytes};

    /* Forward against the reference. */
    mx_req req[MX_OP_MAX_IO];
    for (int k = 0; k < MX_OP_MAX_IO; k++) req[k] = MX_REQ_WRITE;
    ck_assert_msg(op->forward(&ctx, params, in, req, out, aux) == MX_OK, "%s forward: %s", c->op, mx_last_error());
    double *din[MX_OP_MAX_IO], *ref_out[MX_OP_MAX_IO], *head[MX_OP_MAX_IO];
    for (int i = 0; i < n_in; i++) din[i] = to_double(&in[i]);
    for (int k = 0; k < n_out; k++) {
        int64_t n = mx_shape_size(&out_shapes[k]);
        ref_out[k] = calloc((size_t)(n ? n : 1), sizeof(double));
        head[k] = to_double(&out_grad[k]);
    }
    for (int k = 0; k < n_out && bits; k++)
        same_bits(c, bits, &bits->out[k], out[k].data, mx_shape_size(&out_shapes[k]), "forward output", k);
    double frtol = c->fwd_rtol ? c->fwd_rtol : 1e-4, fatol = c->fwd_atol ? c->fwd_atol : 1e-5;
    c->ref(params, (const double *const *)din, in_shapes, ref_out, out_shapes);
    for (int k = 0; k < n_vis; k++) {
        int64_t n = mx_shape_size(&out_shapes[k]);
        for (int64_t i = 0; i < n; i++) {
            double got = ((float *)out[k].data)[i], want = ref_out[k][i];
            ck_assert_msg(fabs(got - want) <= fatol + frtol * fabs(want),
                          "%s forward: output %d [%lld] = %.8g, reference %.8g", c->op, k, (long long)i, got, want);
        }
    }

    /* Backward against central differences of the reference objective. */
    for (int i = 0; i < n_in; i++) req[i] = (i >= n_in - n_aux) ? MX_REQ_NULL : MX_REQ_WRITE;
    ck_assert_msg(op->backward(&ctx, params, out_grad, in, out, req, in_grad, aux) == MX_OK, "%s backward: %s",
                  c->op, mx_last_error());
    for (int i = 0; i < n_in && bits; i++)
        if (req[i] == MX_REQ_WRITE) same_bits(c, bits, &bits->grad[i], in_grad[i].data, mx_shape_size(&in_shapes[i]),
                                              "gradient of input", i);
    double eps = c->eps ? c->eps : 1e-6;
    double grtol = c->grad_rtol ? c->grad_rtol : 1e-4, gatol = c->grad_atol ? c->grad_atol : 1e-5;
    int max_points = c->max_points ? c->max_points : 256;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* The sanitizer builds look for memory errors and races, which every
     * point finds alike; the plain build checks all the points. */
    if (max_points > 32) max_points = 32;
#endif
    for (int i = 0; i < n_in - n_aux; i++) {
        if (c->skip_grad & (1ull << i)) continue;
        int64_t n = mx_shape_size(&in_shapes[i]);
        int64_t stride = n > max_points ? n / max_points : 1;
        for (int64_t j = 0; j < n; j += stride) {
            double fd = fd_value(fdv, c, params, din, i, j, eps, in_shapes, n_vis, ref_out, out_shapes, head);
            double got = ((float *)in_grad[i].data)[j];
            ck_assert_msg(fabs(got - fd) <= gatol + grtol * fmax(fabs(got), fabs(fd)),
                          "%s backward: d%s[%lld] = %.8g, finite difference %.8g", c->op, names[i], (long long)j, got,
                          fd);
        }
    }

    /* req = add accumulates onto what is there. */
    mx_tensor again[MX_OP_MAX_IO];
    for (int i = 0; i < n_in; i++) {
        again[i] = make_tensor(&in_shapes[i]);
        int64_t n = mx_shape_size(&in_shapes[i]);
        for (int64_t j = 0; j < n; j++) ((float *)again[i].data)[j] = 0.5f;
        req[i] = (i >= n_in - n_aux || (c->skip_grad & (1ull << i))) ? MX_REQ_NULL : MX_REQ_ADD;
    }
    ck_assert_msg(op->backward(&ctx, params, out_grad, in, out, req, again, aux) == MX_OK, "%s backward add: %s",
                  c->op, mx_last_error());
    for (int i = 0; i < n_in; i++) {
        if (req[i] != MX_REQ_ADD) continue;
        int64_t n = mx_shape_size(&in_shapes[i]);
        for (int64_t j = 0; j < n; j++) {
            float want = 0.5f + ((float *)in_grad[i].data)[j], got = ((float *)again[i].data)[j];
            ck_assert_msg(fabsf(got - want) <= 1e-5f + 1e-5f * fabsf(want), "%s backward add: d%s[%lld] = %g, want %g",
                          c->op, names[i], (long long)j, got, want);
        }
        free(again[i].data);
    }
    for (int i = 0; i < n_in; i++) {
        if (req[i] != MX_REQ_ADD) free(again[i].data);
        free(in[i].data);
        free(in_grad[i].data);
        free(din[i]);
    }
    for (int k = 0; k < n_out; k++) {
        free(out[k].data);
        free(out_grad[k].data);
        free(ref_out[k]);
        free(head[k]);
    }
    free(ws);
    free(params);
}

void opcheck_run(const opcheck_case *c)
{
    fd_values fd = {0};
    opcheck_run_on(c, NULL, &fd, NULL);
    /* Three threads: batches split into uneven pieces, and products and
     * lowering shared across threads, take their parallel paths. */
    fd.filled = true;
    mx_threadpool *pool;
    ck_assert_msg(mx_threadpool_create(3, &pool) == MX_OK, "%s", mx_last_error());
    run_bits bits = {0};
    opcheck_run_on(c, pool, &fd, &bits);
    ck_assert_msg(fd.pos == fd.n, "%s: the second run takes fewer finite differences than the first", c->op);
    /* The same pool busy with another region: every piece on the caller,
     * the same bits (results may depend on the pool's size, never on how
     * its pieces were handed out). */
    pool_holder h;
    pool_hold(&h, pool);
    fd.pos = 0;
    bits.have = true;
    opcheck_run_on(c, pool, &fd, &bits);
    pool_release(&h);
    for (int k = 0; k < MX_OP_MAX_IO; k++) {
        free(bits.out[k]);
        free(bits.grad[k]);
    }
    mx_threadpool_free(pool);
    free(fd.v);
}
