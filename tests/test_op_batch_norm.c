/* test_op_batch_norm.c - BatchNorm against a float64 reference, through the
 * batch statistics in training mode. */
#include "support/opcheck.h"
#include "ops/activation.h"
#include "ops/batch_norm.h"
#include "ops/elementwise_sum.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const void *field(const void *params, const char *name)
{
    const mx_op_def *op = mx_op_find("BatchNorm");
    return (const char *)params + mx_op_param(op, name)->offset;
}

/* The reference has no context: the case being run says whether it is a
 * training pass (one test process runs one case at a time). */
static bool ref_is_train;

static void bn_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                   const mx_shape *out_shapes)
{
    (void)out_shapes;
    double eps = *(const double *)field(params, "eps");
    bool fix_gamma = *(const bool *)field(params, "fix_gamma");
    bool global = *(const bool *)field(params, "use_global_stats");
    int64_t axis = *(const int64_t *)field(params, "axis");
    const mx_shape *d = &in_shapes[0];
    int ax = (int)(axis < 0 ? axis + d->ndim : axis);
    int64_t outer = 1, inner = 1, C = d->dims[ax];
    for (int i = 0; i < ax; i++) outer *= d->dims[i];
    for (int i = ax + 1; i < d->ndim; i++) inner *= d->dims[i];
    for (int64_t c = 0; c < C; c++) {
        double mean, var;
        if (ref_is_train && !global) {
            double s = 0, ss = 0;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++) s += in[0][(o * C + c) * inner + i];
            mean = s / (double)(outer * inner);
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++) {
                    double v = in[0][(o * C + c) * inner + i] - mean;
                    ss += v * v;
                }
            var = ss / (double)(outer * inner);
        } else {
            mean = in[3][c];
            var = in[4][c];
        }
        double invstd = 1 / sqrt(var + eps), g = fix_gamma ? 1 : in[1][c];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = (o * C + c) * inner + i;
                out[0][k] = (in[0][k] - mean) * invstd * g + in[2][c];
            }
        out[1][c] = mean;
        out[2][c] = invstd;
    }
}

/* data, gamma, beta, moving_mean in [-1, 1); moving_var in [0.5, 1.5). */
static void init(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++)
        data[i] = (float)(index == 4 ? opcheck_uniform(rng, 0.5, 1.5) : opcheck_uniform(rng, -1, 1));
}

typedef struct bn_case {
    mx_shape data;
    const char *axis, *fix_gamma, *use_global_stats, *eps;
    bool is_train;
} bn_case;

static void run_case(bn_case bc, uint64_t seed)
{
    const char *keys[] = {"axis", "fix_gamma", "use_global_stats", "eps", "momentum"};
    const char *values[] = {bc.axis, bc.fix_gamma, bc.use_global_stats, bc.eps ? bc.eps : "0.001", "0.9"};
    ref_is_train = bc.is_train;
    opcheck_case c = {.op = "BatchNorm", .keys = keys, .values = values, .n_params = 5, .ref = bn_ref,
                      .init = init, .is_train = bc.is_train, .seed = seed};
    c.in_shapes[0] = bc.data;
    opcheck_run(&c);
}

START_TEST(training_through_batch_statistics)
{
    mx_shape shapes[] = {MX_SHAPE(4, 3), MX_SHAPE(2, 3, 4, 5), MX_SHAPE(3, 7, 5, 3), MX_SHAPE(5, 2, 3, 3),
                         MX_SHAPE(6, 4, 7)};
    const char *fix[] = {"True", "False"};
    for (int s = 0; s < 5; s++)
        for (int f = 0; f < 2; f++)
            run_case((bn_case){shapes[s], "1", fix[f], "False", NULL, true}, 100 + 10 * (uint64_t)s + (uint64_t)f);
    /* Other channel axes: last, first, negative, and a larger eps. */
    run_case((bn_case){MX_SHAPE(3, 4, 5), "-1", "False", "False", NULL, true}, 201);
    run_case((bn_case){MX_SHAPE(3, 4, 5), "2", "False", "False", "0.1", true}, 202);
    run_case((bn_case){MX_SHAPE(5, 4, 3), "0", "False", "False", NULL, true}, 203);
    run_case((bn_case){MX_SHAPE(2, 3, 5, 2), "-2", "False", "False", "1e-5", true}, 204);
}
END_TEST

START_TEST(moving_statistics_paths)
{
    const char *fix[] = {"True", "False"};
    mx_shape shapes[] = {MX_SHAPE(4, 3), MX_SHAPE(2, 3, 4, 5), MX_SHAPE(3, 7, 5, 3)};
    for (int s = 0; s < 3; s++)
        for (int f = 0; f < 2; f++) {
            uint64_t seed = 300 + 10 * (uint64_t)s + (uint64_t)f;
            /* use_global_stats in a training pass */
            run_case((bn_case){shapes[s], "1", fix[f], "True", NULL, true}, seed);
            /* inference */
            run_case((bn_case){shapes[s], "1", fix[f], "False", NULL, false}, seed + 5);
        }
    run_case((bn_case){MX_SHAPE(3, 4, 5), "-1", "False", "True", NULL, true}, 399);
}
END_TEST

/* output_mean_var shows mean and the inverse std (MXNet's CPU kernel's
 * "var"); their gradients are ignored, so only forward is compared. */
START_TEST(output_mean_var_shows_three_outputs)
{
    const char *keys[] = {"output_mean_var", "fix_gamma"}, *values[] = {"True", "False"};
    ref_is_train = true;
    opcheck_case c = {.op = "BatchNorm", .keys = keys, .values = values, .n_params = 2, .ref = bn_ref,
                      .init = init, .is_train = true, .seed = 77, .skip_grad = 0x7};
    c.in_shapes[0] = MX_SHAPE(3, 4, 2, 5);
    opcheck_run(&c);
    ref_is_train = false;
    c.is_train = false;
    opcheck_run(&c);

    const mx_op_def *op = mx_op_find("BatchNorm");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, 2, params), MX_OK);
    ck_assert_int_eq(op->num_visible_outputs(params), 3);
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    ck_assert_int_eq(op->num_visible_outputs(params), 1);
    ck_assert_int_eq(op->num_aux(params), 2);
    const char *names[8];
    ck_assert_int_eq(op->list_inputs(params, names), 5);
    ck_assert_str_eq(names[3], "moving_mean");
    ck_assert_str_eq(names[4], "moving_var");
    ck_assert_int_eq(op->list_outputs(params, names), 3);
}
END_TEST

/* BatchNorm's inputs (data, gamma, beta, moving mean and variance) and
 * outputs (y, saved mean and inverse std) over (N, C, S) arrays. */
typedef struct bn_io {
    mx_tensor in[5], out[3];
} bn_io;

static bn_io bn_tensors(int64_t n, int64_t c, int64_t s, float *x, float *gamma, float *beta, float *mm, float *mv,
                        float *y, float *mean, float *invstd)
{
    return (bn_io){.in = {{.data = x, .shape = MX_SHAPE(n, c, s)},
                          {.data = gamma, .shape = MX_SHAPE(c)},
                          {.data = beta, .shape = MX_SHAPE(c)},
                          {.data = mm, .shape = MX_SHAPE(c)},
                          {.data = mv, .shape = MX_SHAPE(c)}},
                   .out = {{.data = y, .shape = MX_SHAPE(n, c, s)},
                           {.data = mean, .shape = MX_SHAPE(c)},
                           {.data = invstd, .shape = MX_SHAPE(c)}}};
}

/* A training forward moves the aux states by the batch mean and biased
 * variance; inference and use_global_stats leave them alone. */
START_TEST(training_forward_updates_moving_statistics)
{
    const mx_op_def *op = mx_op_find("BatchNorm");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *keys[] = {"momentum"}, *values[] = {"0.75"};
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, 1, params), MX_OK);
    enum { N = 3, C = 2, S = 4 };
    float x[N * C * S], gamma[C] = {1, 1}, beta[C] = {0, 0}, mm[C] = {0.5f, -1}, mv[C] = {2, 0.25f};
    float y[N * C * S], mean[C], invstd[C];
    uint64_t rng = 5;
    for (int i = 0; i < N * C * S; i++) x[i] = (float)opcheck_uniform(&rng, -2, 3);
    bn_io t = bn_tensors(N, C, S, x, gamma, beta, mm, mv, y, mean, invstd);
    mx_tensor *in = t.in, *out = t.out;
    mx_req req[3] = {MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, out, &in[3]), MX_OK);
    const float mm0[C] = {0.5f, -1}, mv0[C] = {2, 0.25f};
    for (int c = 0; c < C; c++) {
        double s = 0, ss = 0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < S; i++) s += x[(n * C + c) * S + i];
        double mu = s / (N * S);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < S; i++) ss += (x[(n * C + c) * S + i] - mu) * (x[(n * C + c) * S + i] - mu);
        double var = ss / (N * S);
        ck_assert(fabs(mm[c] - (mm0[c] * 0.75 + mu * 0.25)) < 1e-6);
        ck_assert(fabs(mv[c] - (mv0[c] * 0.75 + var * 0.25)) < 1e-6);
        ck_assert(fabs(mean[c] - mu) < 1e-6);
        ck_assert(fabs(invstd[c] - 1 / sqrt(var + 1e-3)) < 1e-5);
    }
    float mm1[C], mv1[C];
    memcpy(mm1, mm, sizeof(mm));
    memcpy(mv1, mv, sizeof(mv));
    ctx.is_train = false;
    ck_assert_int_eq(op->forward(&ctx, params, in, req, out, &in[3]), MX_OK);
    ck_assert(!memcmp(mm, mm1, sizeof(mm)) && !memcmp(mv, mv1, sizeof(mv)));
    const char *k2[] = {"use_global_stats"}, *v2[] = {"True"};
    ck_assert_int_eq(mx_op_parse_params(op, k2, v2, 1, params), MX_OK);
    ctx.is_train = true;
    ck_assert_int_eq(op->forward(&ctx, params, in, req, out, &in[3]), MX_OK);
    ck_assert(!memcmp(mm, mm1, sizeof(mm)) && !memcmp(mv, mv1, sizeof(mv)));
}
END_TEST

/* Forward splits channels across the kernel pool on large inputs: the
 * outputs and moving statistics are bit for bit those of one thread, in
 * training and in inference. */
/* One thread on the portable width, one on AVX2, three threads on AVX-512
 * (MX_SIMD caps the width; each cap falls back to what the CPU has): the
 * statistics' 8-lane sums in double, and so every output, are the same
 * bits. */
static const char *const widths[] = {"portable", "avx2", "avx512"};

START_TEST(threaded_forward_matches_serial)
{
    const mx_op_def *op = mx_op_find("BatchNorm");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    enum { N = 2, C = 5, S = 64 * 64 + 3 }; /* 40990 elements: above the parallel threshold; 8-lane tails */
    static float x[N * C * S], y[3][N * C * S];
    float gamma[C], beta[C], mm[3][C], mv[3][C], mean[3][C], invstd[3][C];
    uint64_t rng = 11;
    for (int i = 0; i < N * C * S; i++) x[i] = (float)opcheck_uniform(&rng, -2, 3);
    for (int c = 0; c < C; c++) {
        gamma[c] = (float)opcheck_uniform(&rng, 0.5, 2);
        beta[c] = (float)opcheck_uniform(&rng, -1, 1);
    }
    mx_threadpool *pool;
    ck_assert_int_eq(mx_threadpool_create(3, &pool), MX_OK);
    for (int train = 0; train < 2; train++) {
        for (int k = 0; k < 3; k++) {
            setenv("MX_SIMD", widths[k], 1);
            for (int c = 0; c < C; c++) {
                mm[k][c] = 0.1f * (float)c;
                mv[k][c] = 1.0f + 0.5f * (float)c;
            }
            mx_tensor in[5] = {{.data = x, .shape = MX_SHAPE(N, C, S)}, {.data = gamma, .shape = MX_SHAPE(C)},
                               {.data = beta, .shape = MX_SHAPE(C)}, {.data = mm[k], .shape = MX_SHAPE(C)},
                               {.data = mv[k], .shape = MX_SHAPE(C)}};
            mx_tensor out[3] = {{.data = y[k], .shape = MX_SHAPE(N, C, S)}, {.data = mean[k], .shape = MX_SHAPE(C)},
                                {.data = invstd[k], .shape = MX_SHAPE(C)}};
            mx_req req[3] = {MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE};
            mx_exec_ctx exec = {.ctx = mx_cpu(), .pool = k == 2 ? pool : NULL};
            mx_op_ctx ctx = {.exec = &exec, .is_train = train};
            ck_assert_int_eq(op->forward(&ctx, params, in, req, out, &in[3]), MX_OK);
        }
        unsetenv("MX_SIMD");
        for (int k = 1; k < 3; k++) {
            ck_assert_msg(!memcmp(y[0], y[k], sizeof(y[0])), "%s", widths[k]);
            ck_assert(!memcmp(mm[0], mm[k], sizeof(mm[0])) && !memcmp(mv[0], mv[k], sizeof(mv[0])));
            ck_assert(!memcmp(mean[0], mean[k], sizeof(mean[0])) && !memcmp(invstd[0], invstd[k], sizeof(invstd[0])));
        }
    }
    mx_threadpool_free(pool);
}
END_TEST

/* Outputs of 4 MB or more go past the caches (non-temporal stores of the
 * whole vectors on aligned lines): with and without a folded relu, and
 * through BatchNorm+ElementWiseSum, every width gives the portable width's
 * bits (which stores plainly). Rows of 65544 floats start on 64-byte lines
 * and 32 bytes off them by turns, and end in an 8-float tail. */
START_TEST(large_outputs_stream_the_same_bits)
{
    const mx_op_def *ops[] = {mx_op_find("BatchNorm"), &mx_op_batch_norm_add};
    enum { N = 2, C = 8, S = 65536 + 8 }; /* 4.2 MB */
    const size_t bytes = (size_t)N * C * S * sizeof(float);
    float *x = aligned_alloc(64, bytes), *a = aligned_alloc(64, bytes), *y[3];
    ck_assert(x && a);
    uint64_t rng = 13;
    for (int64_t i = 0; i < (int64_t)N * C * S; i++) {
        x[i] = (float)opcheck_uniform(&rng, -2, 3);
        a[i] = (float)opcheck_uniform(&rng, -1, 1);
    }
    float gamma[C], beta[C], mm[C], mv[C], mean[C], invstd[C];
    for (int c = 0; c < C; c++) {
        gamma[c] = (float)opcheck_uniform(&rng, 0.5, 2);
        beta[c] = (float)opcheck_uniform(&rng, -1, 1);
    }
    for (int k = 0; k < 3; k++) {
        y[k] = aligned_alloc(64, bytes);
        ck_assert_ptr_nonnull(y[k]);
    }
    const mx_fold relu = {.kind = MX_FOLD_ACTIVATION, .act_type = ACT_RELU}, none = {0};
    for (int op_i = 0; op_i < 2; op_i++)
        for (int f = 0; f < 2; f++) {
            const mx_op_def *op = ops[op_i];
            _Alignas(16) char params[16384];
            ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
            for (int k = 0; k < 3; k++) {
                setenv("MX_SIMD", widths[k], 1);
                for (int c = 0; c < C; c++) mm[c] = 0.0f, mv[c] = 1.0f;
                memset(y[k], 0xff, bytes);
                const mx_tensor data = {.data = x, .shape = MX_SHAPE(N, C, S)};
                const mx_tensor g = {.data = gamma, .shape = MX_SHAPE(C)}, b = {.data = beta, .shape = MX_SHAPE(C)};
                const mx_tensor m0 = {.data = mm, .shape = MX_SHAPE(C)}, v0 = {.data = mv, .shape = MX_SHAPE(C)};
                mx_tensor in[6] = {data, g, b, m0, v0};
                if (op_i == 1) {
                    in[3] = (mx_tensor){.data = a, .shape = MX_SHAPE(N, C, S)};
                    in[4] = m0;
                    in[5] = v0;
                }
                mx_tensor out[3] = {{.data = y[k], .shape = MX_SHAPE(N, C, S)},
                                    {.data = mean, .shape = MX_SHAPE(C)},
                                    {.data = invstd, .shape = MX_SHAPE(C)}};
                mx_req req[3] = {MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE};
                mx_exec_ctx exec = {.ctx = mx_cpu()};
                mx_op_ctx ctx = {.exec = &exec, .is_train = 1, .fold = f ? relu : none};
                ck_assert_int_eq(op->forward(&ctx, params, in, req, out, &in[op_i ? 4 : 3]), MX_OK);
            }
            unsetenv("MX_SIMD");
            for (int k = 1; k < 3; k++)
                ck_assert_msg(!memcmp(y[0], y[k], bytes), "%s, fold %d: %s", ops[op_i]->name, f, widths[k]);
        }
    for (int k = 0; k < 3; k++) free(y[k]);
    free(x);
    free(a);
}
END_TEST

/* Backward splits channels the same way: dx, dgamma and dbeta are bit for
 * bit those of one thread, with batch statistics and with global ones. */
START_TEST(threaded_backward_matches_serial)
{
    const mx_op_def *op = mx_op_find("BatchNorm");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k_fix[] = {"fix_gamma"}, *v_fix[] = {"False"};
    ck_assert_int_eq(mx_op_parse_params(op, k_fix, v_fix, 1, params), MX_OK);
    enum { N = 2, C = 5, S = 64 * 64 + 3 }; /* 40990 elements: above the parallel threshold; 8-lane tails */
    static float x[N * C * S], dy[N * C * S], y[N * C * S], dx[3][N * C * S];
    float gamma[C], beta[C], mm[C], mv[C], mean[C], invstd[C], dg[3][C], db[3][C];
    uint64_t rng = 12;
    for (int i = 0; i < N * C * S; i++) {
        x[i] = (float)opcheck_uniform(&rng, -2, 3);
        dy[i] = (float)opcheck_uniform(&rng, -1, 1);
    }
    for (int c = 0; c < C; c++) {
        gamma[c] = (float)opcheck_uniform(&rng, 0.5, 2);
        beta[c] = (float)opcheck_uniform(&rng, -1, 1);
        mm[c] = 0.1f * (float)c;
        mv[c] = 1.0f + 0.5f * (float)c;
    }
    mx_threadpool *pool;
    ck_assert_int_eq(mx_threadpool_create(3, &pool), MX_OK);
    mx_tensor in[5] = {{.data = x, .shape = MX_SHAPE(N, C, S)}, {.data = gamma, .shape = MX_SHAPE(C)},
                       {.data = beta, .shape = MX_SHAPE(C)}, {.data = mm, .shape = MX_SHAPE(C)},
                       {.data = mv, .shape = MX_SHAPE(C)}};
    mx_tensor out[3] = {{.data = y, .shape = MX_SHAPE(N, C, S)}, {.data = mean, .shape = MX_SHAPE(C)},
                        {.data = invstd, .shape = MX_SHAPE(C)}};
    mx_tensor og[1] = {{.data = dy, .shape = MX_SHAPE(N, C, S)}};
    mx_req req[3] = {MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE};
    for (int train = 0; train < 2; train++) {
        mx_exec_ctx exec0 = {.ctx = mx_cpu()};
        mx_op_ctx ctx0 = {.exec = &exec0, .is_train = train};
        ck_assert_int_eq(op->forward(&ctx0, params, in, req, out, &in[3]), MX_OK); /* the saved statistics */
        for (int k = 0; k < 3; k++) {
            setenv("MX_SIMD", widths[k], 1);
            mx_tensor ig[3] = {{.data = dx[k], .shape = MX_SHAPE(N, C, S)}, {.data = dg[k], .shape = MX_SHAPE(C)},
                               {.data = db[k], .shape = MX_SHAPE(C)}};
            mx_exec_ctx exec = {.ctx = mx_cpu(), .pool = k == 2 ? pool : NULL};
            mx_op_ctx ctx = {.exec = &exec, .is_train = train};
            ck_assert_int_eq(op->backward(&ctx, params, og, in, out, req, ig, &in[3]), MX_OK);
        }
        unsetenv("MX_SIMD");
        for (int k = 1; k < 3; k++) {
            ck_assert_msg(!memcmp(dx[0], dx[k], sizeof(dx[0])), "%s", widths[k]);
            ck_assert(!memcmp(dg[0], dg[k], sizeof(dg[0])) && !memcmp(db[0], db[k], sizeof(db[0])));
        }
        ck_assert(dg[0][1] != 0.0f && db[0][1] != 0.0f);
    }
    mx_threadpool_free(pool);
}
END_TEST

/* A folded relu's or clip's gradient is taken from the input, not the
 * output (fold_mask_from_inputs): with the output overwritten by NaN before
 * backward, dx, dgamma and dbeta are the bits of the fold's own backward on
 * the true output followed by an unfolded BatchNorm backward, with batch
 * statistics and with global ones. */
START_TEST(folded_gradient_ignores_the_output)
{
    const mx_op_def *op = mx_op_find("BatchNorm");
    ck_assert(op->folds_backward && op->fold_mask_from_inputs);
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k_fix[] = {"fix_gamma"}, *v_fix[] = {"False"};
    ck_assert_int_eq(mx_op_parse_params(op, k_fix, v_fix, 1, params), MX_OK);
    enum { N = 2, C = 3, S = 7 * 9 };
    static float x[N * C * S], dy[N * C * S], y[N * C * S], poisoned[N * C * S], dz[N * C * S];
    static float dx_ref[N * C * S], dx[N * C * S];
    float gamma[C], beta[C], mm[C], mv[C], mean[C], invstd[C], dg_ref[C], db_ref[C], dg[C], db[C];
    uint64_t rng = 21;
    for (int i = 0; i < N * C * S; i++) {
        x[i] = (float)opcheck_uniform(&rng, -2, 3);
        dy[i] = (float)opcheck_uniform(&rng, -1, 1);
        poisoned[i] = NAN;
    }
    for (int c = 0; c < C; c++) {
        gamma[c] = (float)opcheck_uniform(&rng, 0.5, 2);
        beta[c] = (float)opcheck_uniform(&rng, -1, 1);
        mm[c] = 0.1f * (float)c;
        mv[c] = 1.0f + 0.5f * (float)c;
    }
    const mx_fold folds[] = {{.kind = MX_FOLD_ACTIVATION, .act_type = ACT_RELU},
                             {.kind = MX_FOLD_CLIP, .lo = -0.5f, .hi = 0.5f}};
    mx_tensor in[5] = {{.data = x, .shape = MX_SHAPE(N, C, S)}, {.data = gamma, .shape = MX_SHAPE(C)},
                       {.data = beta, .shape = MX_SHAPE(C)}, {.data = mm, .shape = MX_SHAPE(C)},
                       {.data = mv, .shape = MX_SHAPE(C)}};
    mx_req req[3] = {MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE};
    for (size_t f = 0; f < sizeof(folds) / sizeof(folds[0]); f++)
        for (int train = 0; train < 2; train++) {
            mx_exec_ctx exec = {.ctx = mx_cpu()};
            mx_op_ctx folded = {.exec = &exec, .is_train = train, .fold = folds[f]};
            mx_op_ctx plain = {.exec = &exec, .is_train = train};
            mx_tensor out[3] = {{.data = y, .shape = MX_SHAPE(N, C, S)}, {.data = mean, .shape = MX_SHAPE(C)},
                                {.data = invstd, .shape = MX_SHAPE(C)}};
            ck_assert_int_eq(op->forward(&folded, params, in, req, out, &in[3]), MX_OK);
            /* the reference: the fold's backward from y, then BatchNorm's */
            mx_fold_backward_rows_at(&folds[f], 0, dy, y, dz, N * C * S);
            int zeros = 0;
            for (int i = 0; i < N * C * S; i++) zeros += dz[i] == 0.0f;
            ck_assert_int_gt(zeros, 0);
            ck_assert_int_lt(zeros, N * C * S);
            mx_tensor og_ref[1] = {{.data = dz, .shape = MX_SHAPE(N, C, S)}};
            mx_tensor ig_ref[3] = {{.data = dx_ref, .shape = MX_SHAPE(N, C, S)}, {.data = dg_ref, .shape = MX_SHAPE(C)},
                                   {.data = db_ref, .shape = MX_SHAPE(C)}};
            ck_assert_int_eq(op->backward(&plain, params, og_ref, in, out, req, ig_ref, &in[3]), MX_OK);
            /* folded, with the output gone */
            out[0].data = poisoned;
            mx_tensor og[1] = {{.data = dy, .shape = MX_SHAPE(N, C, S)}};
            mx_tensor ig[3] = {{.data = dx, .shape = MX_SHAPE(N, C, S)}, {.data = dg, .shape = MX_SHAPE(C)},
                               {.data = db, .shape = MX_SHAPE(C)}};
            ck_assert_int_eq(op->backward(&folded, params, og, in, out, req, ig, &in[3]), MX_OK);
            ck_assert_msg(!memcmp(dx, dx_ref, sizeof(dx)), "fold %zu, train %d: dx", f, train);
            ck_assert_msg(!memcmp(dg, dg_ref, sizeof(dg)) && !memcmp(db, db_ref, sizeof(db)), "fold %zu, train %d", f,
                          train);
        }
}
END_TEST

/* BatchNorm+ElementWiseSum (the executor's fold of a residual sum): out =
 * BatchNorm(data) + addend, the reference BatchNorm's plus the addend; its
 * backward through finite differences, with batch statistics and with the
 * moving ones. */
static void bn_add_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                       const mx_shape *out_shapes)
{
    const double *bn_in[5] = {in[0], in[1], in[2], in[4], in[5]};
    const mx_shape bn_shapes[5] = {in_shapes[0], in_shapes[1], in_shapes[2], in_shapes[4], in_shapes[5]};
    bn_ref(params, bn_in, bn_shapes, out, out_shapes);
    for (int64_t i = 0; i < mx_shape_size(&in_shapes[0]); i++) out[0][i] += in[3][i];
}

/* data, gamma, beta, addend in [-1, 1); moving_var (input 5) in [0.5, 1.5). */
static void bn_add_init(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++)
        data[i] = (float)(index == 5 ? opcheck_uniform(rng, 0.5, 1.5) : opcheck_uniform(rng, -1, 1));
}

START_TEST(batch_norm_add_through_finite_differences)
{
    const char *keys[] = {"fix_gamma", "eps"};
    const char *values[] = {"False", "0.001"};
    const mx_shape shapes[] = {MX_SHAPE(2, 3, 4, 5), MX_SHAPE(3, 4, 7), MX_SHAPE(4, 2)};
    for (int s = 0; s < 3; s++)
        for (int train = 0; train < 2; train++) {
            ref_is_train = train;
            opcheck_case c = {.op = "BatchNorm+ElementWiseSum", .op_def = &mx_op_batch_norm_add, .keys = keys,
                              .values = values, .n_params = 2, .ref = bn_add_ref, .init = bn_add_init,
                              .is_train = train, .seed = 300 + 10 * (uint64_t)s + (uint64_t)train};
            c.in_shapes[0] = shapes[s];
            opcheck_run(&c);
        }
}
END_TEST

/* With the sum's relu folded in, BatchNorm+ElementWiseSum gives the bits of
 * the unfolded layers: BatchNorm, then ElementWiseSum with the relu folded
 * (its gradient to both inputs), then BatchNorm's backward; for every req
 * of the addend's gradient (written, added, not wanted) and of dx, with
 * batch and moving statistics, and with the addend first or second in the
 * sum. */
START_TEST(batch_norm_add_gives_the_unfolded_bits)
{
    const mx_op_def *bn = mx_op_find("BatchNorm"), *sum = mx_op_find("ElementWiseSum");
    const mx_op_def *fused = &mx_op_batch_norm_add;
    _Alignas(16) char params[16384], sum_params[16384];
    const char *k_fix[] = {"fix_gamma"}, *v_fix[] = {"False"};
    const char *k_sum[] = {"num_args"}, *v_sum[] = {"2"};
    ck_assert_int_eq(mx_op_parse_params(bn, k_fix, v_fix, 1, params), MX_OK);
    ck_assert_int_eq(mx_op_parse_params(sum, k_sum, v_sum, 1, sum_params), MX_OK);
    enum { N = 3, C = 4, S = 5 * 7, T = N * C * S };
    static float x[T], a[T], dy[T], z[T], y_ref[T], y[T], g_ref[T], dx_ref[T], da_ref[T], dy_work[T];
    static float dx[T], da[T], da0[T];
    float gamma[C], beta[C], mm[C], mv[C], mm2[C], mv2[C], mean[C], invstd[C], dg_ref[C], db_ref[C], dg[C], db[C];
    uint64_t rng = 33;
    for (int i = 0; i < T; i++) {
        x[i] = (float)opcheck_uniform(&rng, -2, 3);
        a[i] = (float)opcheck_uniform(&rng, -1.5, 1.5);
        dy[i] = (float)opcheck_uniform(&rng, -1, 1);
        da0[i] = (float)opcheck_uniform(&rng, -1, 1);
    }
    for (int c = 0; c < C; c++) {
        gamma[c] = (float)opcheck_uniform(&rng, 0.5, 2);
        beta[c] = (float)opcheck_uniform(&rng, -1, 1);
        mm[c] = 0.1f * (float)c;
        mv[c] = 1.0f + 0.5f * (float)c;
    }
    const mx_fold relu = {.kind = MX_FOLD_ACTIVATION, .act_type = ACT_RELU};
    const mx_req a_reqs[] = {MX_REQ_WRITE, MX_REQ_ADD, MX_REQ_NULL}, x_reqs[] = {MX_REQ_WRITE, MX_REQ_NULL};
    for (int train = 0; train < 2; train++)
        for (int first = 0; first < 2; first++) {
            mx_exec_ctx exec = {.ctx = mx_cpu()};
            mx_op_ctx plain = {.exec = &exec, .is_train = train}, folded = {.exec = &exec, .is_train = train, .fold = relu};
            /* unfolded: BatchNorm, then the sum (addend first or second) with the relu */
            memcpy(mm2, mm, sizeof(mm));
            memcpy(mv2, mv, sizeof(mv));
            mx_tensor in[5] = {{.data = x, .shape = MX_SHAPE(N, C, S)}, {.data = gamma, .shape = MX_SHAPE(C)},
                               {.data = beta, .shape = MX_SHAPE(C)}, {.data = mm2, .shape = MX_SHAPE(C)},
                               {.data = mv2, .shape = MX_SHAPE(C)}};
            mx_tensor out[3] = {{.data = z, .shape = MX_SHAPE(N, C, S)}, {.data = mean, .shape = MX_SHAPE(C)},
                                {.data = invstd, .shape = MX_SHAPE(C)}};
            mx_req w3[4] = {MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE};
            ck_assert_int_eq(bn->forward(&plain, params, in, w3, out, &in[3]), MX_OK);
            mx_tensor s_in[2] = {{.data = first ? a : z, .shape = MX_SHAPE(N, C, S)},
                                 {.data = first ? z : a, .shape = MX_SHAPE(N, C, S)}};
            mx_tensor s_out[1] = {{.data = y_ref, .shape = MX_SHAPE(N, C, S)}};
            ck_assert_int_eq(sum->forward(&folded, sum_params, s_in, w3, s_out, NULL), MX_OK);
            int zeros = 0;
            for (int i = 0; i < T; i++) zeros += y_ref[i] == 0.0f;
            ck_assert_msg(zeros > 0 && zeros < T, "the relu must cut some outputs and pass others");
            /* the sum's backward: its relu's gradient to both inputs */
            mx_tensor s_og[1] = {{.data = dy, .shape = MX_SHAPE(N, C, S)}};
            mx_tensor s_ig[2] = {{.data = first ? da_ref : g_ref, .shape = MX_SHAPE(N, C, S)},
                                 {.data = first ? g_ref : da_ref, .shape = MX_SHAPE(N, C, S)}};
            ck_assert_int_eq(sum->backward(&folded, sum_params, s_og, s_in, s_out, w3, s_ig, NULL), MX_OK);
            mx_tensor og_ref[1] = {{.data = g_ref, .shape = MX_SHAPE(N, C, S)}};
            mx_tensor ig_ref[3] = {{.data = dx_ref, .shape = MX_SHAPE(N, C, S)}, {.data = dg_ref, .shape = MX_SHAPE(C)},
                                   {.data = db_ref, .shape = MX_SHAPE(C)}};
            ck_assert_int_eq(bn->backward(&plain, params, og_ref, in, out, w3, ig_ref, &in[3]), MX_OK);

            /* folded */
            memcpy(mm2, mm, sizeof(mm));
            memcpy(mv2, mv, sizeof(mv));
            mx_tensor fin[6] = {in[0], in[1], in[2], {.data = a, .shape = MX_SHAPE(N, C, S)}, in[3], in[4]};
            mx_tensor fout[3] = {{.data = y, .shape = MX_SHAPE(N, C, S)}, out[1], out[2]};
            ck_assert_int_eq(fused->forward(&folded, params, fin, w3, fout, &fin[4]), MX_OK);
            ck_assert_msg(!memcmp(y, y_ref, sizeof(y)), "train %d, addend first %d: output", train, first);
            for (size_t ra = 0; ra < sizeof(a_reqs) / sizeof(a_reqs[0]); ra++)
                for (size_t rx = 0; rx < sizeof(x_reqs) / sizeof(x_reqs[0]); rx++) {
                    memcpy(dy_work, dy, sizeof(dy)); /* the kernel may take the relu's gradient over dy */
                    memcpy(da, da0, sizeof(da));
                    for (int i = 0; i < T; i++) dx[i] = NAN;
                    mx_req req[4] = {x_reqs[rx], MX_REQ_WRITE, MX_REQ_WRITE, a_reqs[ra]};
                    mx_tensor og[1] = {{.data = dy_work, .shape = MX_SHAPE(N, C, S)}};
                    mx_tensor ig[4] = {{.data = dx, .shape = MX_SHAPE(N, C, S)}, {.data = dg, .shape = MX_SHAPE(C)},
                                       {.data = db, .shape = MX_SHAPE(C)}, {.data = da, .shape = MX_SHAPE(N, C, S)}};
                    ck_assert_int_eq(fused->backward(&folded, params, og, fin, fout, req, ig, &fin[4]), MX_OK);
                    if (x_reqs[rx] == MX_REQ_WRITE)
                        ck_assert_msg(!memcmp(dx, dx_ref, sizeof(dx)), "train %d, req %zu/%zu: dx", train, ra, rx);
                    ck_assert_msg(!memcmp(dg, dg_ref, sizeof(dg)) && !memcmp(db, db_ref, sizeof(db)),
                                  "train %d, req %zu/%zu: dgamma, dbeta", train, ra, rx);
                    for (int i = 0; i < T; i++) {
                        float want = a_reqs[ra] == MX_REQ_WRITE ? da_ref[i]
                                     : a_reqs[ra] == MX_REQ_ADD ? da_ref[i] + da0[i]
                                                               : da0[i];
                        ck_assert_msg(!memcmp(&da[i], &want, sizeof(float)), "train %d, req %zu/%zu: daddend[%d]",
                                      train, ra, rx, i);
                    }
                }
        }
}
END_TEST

/* The statistics come from one pass over x (sums of x - k and its squares,
 * k the channel's first value): data far from zero keeps its variance (a
 * mean 10^4 times the spread), and a constant channel has variance 0. */
START_TEST(one_pass_statistics_keep_the_variance)
{
    const mx_op_def *op = mx_op_find("BatchNorm");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    enum { N = 3, C = 2, S = 1000 };
    static float x[N * C * S], y[N * C * S];
    float gamma[C] = {1, 1}, beta[C] = {0, 0}, mm[C] = {0, 0}, mv[C] = {1, 1}, mean[C], invstd[C];
    uint64_t rng = 31;
    for (int o = 0; o < N; o++)
        for (int i = 0; i < S; i++) {
            x[(o * C + 0) * S + i] = (float)(1e4 + opcheck_uniform(&rng, -1, 1));
            x[(o * C + 1) * S + i] = -3.25f;
        }
    double s = 0, ss = 0;
    for (int o = 0; o < N; o++)
        for (int i = 0; i < S; i++) s += x[o * C * S + i];
    const double ref_mean = s / (N * S);
    for (int o = 0; o < N; o++)
        for (int i = 0; i < S; i++) ss += (x[o * C * S + i] - ref_mean) * (x[o * C * S + i] - ref_mean);
    const double eps = 1e-3, ref_invstd = 1 / sqrt(ss / (N * S) + eps); /* eps: the default */
    bn_io t = bn_tensors(N, C, S, x, gamma, beta, mm, mv, y, mean, invstd);
    mx_req req[3] = {MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true};
    ck_assert_int_eq(op->forward(&ctx, params, t.in, req, t.out, &t.in[3]), MX_OK);
    ck_assert_float_eq(mean[0], (float)ref_mean);
    ck_assert_double_le(fabs(invstd[0] - ref_invstd) / ref_invstd, 1e-6);
    ck_assert_float_eq(mean[1], -3.25f);
    ck_assert_float_eq(invstd[1], (float)(1 / sqrt(eps)));
}
END_TEST

START_TEST(fix_gamma_writes_zero_gamma_gradient)
{
    const mx_op_def *op = mx_op_find("BatchNorm");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    float x[4] = {1, 2, 3, 5}, gamma[1] = {3}, beta[1] = {0.5f}, mm[1] = {0}, mv[1] = {1};
    float y[4], mean[1], invstd[1], dy[4] = {1, -1, 2, 0.5f}, dx[4], dg[1] = {7}, db[1];
    mx_tensor in[5] = {{.data = x, .shape = MX_SHAPE(4, 1)}, {.data = gamma, .shape = MX_SHAPE(1)},
                       {.data = beta, .shape = MX_SHAPE(1)}, {.data = mm, .shape = MX_SHAPE(1)},
                       {.data = mv, .shape = MX_SHAPE(1)}};
    mx_tensor out[3] = {{.data = y, .shape = MX_SHAPE(4, 1)}, {.data = mean, .shape = MX_SHAPE(1)},
                        {.data = invstd, .shape = MX_SHAPE(1)}};
    mx_tensor og[3] = {{.data = dy, .shape = MX_SHAPE(4, 1)}};
    mx_tensor ig[3] = {{.data = dx, .shape = MX_SHAPE(4, 1)}, {.data = dg, .shape = MX_SHAPE(1)},
                       {.data = db, .shape = MX_SHAPE(1)}};
    mx_req req[5] = {MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_NULL, MX_REQ_NULL};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, out, &in[3]), MX_OK);
    ck_assert(gamma[0] == 3); /* gamma itself is left as it is */
    double s = 0;
    for (int i = 0; i < 4; i++) s += y[i];
    ck_assert(fabs(s / 4 - 0.5) < 1e-6); /* gamma taken as 1: mean beta */
    ck_assert_int_eq(op->backward(&ctx, params, og, in, out, req, ig, &in[3]), MX_OK);
    ck_assert(dg[0] == 0);
    ck_assert(fabs(db[0] - 2.5) < 1e-6);
}
END_TEST

START_TEST(bad_parameters_name_op_key_and_value)
{
    const mx_op_def *op = mx_op_find("BatchNorm");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k1[] = {"momentum"}, *v1[] = {"1.5"};
    ck_assert_int_eq(mx_op_parse_params(op, k1, v1, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "BatchNorm: parameter 'momentum' has bad value '1.5'"));
    const char *k2[] = {"eps"}, *v2[] = {"-1"};
    ck_assert_int_eq(mx_op_parse_params(op, k2, v2, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "BatchNorm: parameter 'eps' has bad value '-1'"));
    const char *k3[] = {"fix_gama"}, *v3[] = {"True"};
    ck_assert_int_eq(mx_op_parse_params(op, k3, v3, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'fix_gamma'"));

    int n_in, n_out;
    const char *k4[] = {"axis"}, *v4[] = {"3"};
    mx_shape in[5] = {MX_SHAPE(2, 3, 4)}, out[3];
    ck_assert_int_eq(opcheck_infer("BatchNorm", k4, v4, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "BatchNorm: parameter 'axis' has bad value '3' for data shape (2,3,4)"));
    mx_shape in2[5] = {MX_SHAPE(2, 3, 4), MX_SHAPE(4)};
    ck_assert_int_eq(opcheck_infer("BatchNorm", NULL, NULL, 0, in2, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "BatchNorm: gamma has shape (4), expected (3)"));
    mx_shape in3[5] = {MX_SHAPE(2, 3, 4), {0}, {0}, {0}, MX_SHAPE(2)};
    ck_assert_int_eq(opcheck_infer("BatchNorm", NULL, NULL, 0, in3, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "BatchNorm: moving_var has shape (2), expected (3)"));
    mx_shape in4[5] = {MX_SHAPE(2, 3, 4)};
    ck_assert_int_eq(opcheck_infer("BatchNorm", NULL, NULL, 0, in4, &n_in, out, &n_out), MX_OK);
    ck_assert(in4[1].dims[0] == 3 && in4[4].dims[0] == 3 && out[1].dims[0] == 3 && mx_shape_equal(&out[0], &in4[0]));
}
END_TEST

START_TEST(param_defaults_are_mxnet_style)
{
    const mx_op_def *op = mx_op_find("BatchNorm");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    char buf[64];
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "eps"), params, buf, sizeof(buf)), "0.001");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "momentum"), params, buf, sizeof(buf)), "0.9");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "fix_gamma"), params, buf, sizeof(buf)), "True");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "use_global_stats"), params, buf, sizeof(buf)), "False");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "axis"), params, buf, sizeof(buf)), "1");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_batch_norm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, training_through_batch_statistics);
    tcase_add_test(tc, moving_statistics_paths);
    tcase_add_test(tc, output_mean_var_shows_three_outputs);
    tcase_add_test(tc, training_forward_updates_moving_statistics);
    tcase_add_test(tc, threaded_forward_matches_serial);
    tcase_add_test(tc, large_outputs_stream_the_same_bits);
    tcase_add_test(tc, threaded_backward_matches_serial);
    tcase_add_test(tc, folded_gradient_ignores_the_output);
    tcase_add_test(tc, batch_norm_add_through_finite_differences);
    tcase_add_test(tc, batch_norm_add_gives_the_unfolded_bits);
    tcase_add_test(tc, one_pass_statistics_keep_the_variance);
    tcase_add_test(tc, fix_gamma_writes_zero_gamma_gradient);
    tcase_add_test(tc, bad_parameters_name_op_key_and_value);
    tcase_add_test(tc, param_defaults_are_mxnet_style);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
