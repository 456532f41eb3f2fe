/* test_op_dropout.c - Dropout: identity at inference through the harness;
 * training passes run directly with a seeded generator. */
#include "support/opcheck.h"

#include "executor/executor.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void identity_ref(const void *params, const double *const *in, const mx_shape *in_shapes,
                         double *const *out, const mx_shape *out_shapes)
{
    (void)params;
    (void)out_shapes;
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = in[0][i];
}

START_TEST(inference_is_identity)
{
    const char *keys[] = {"p"};
    const char *ps[] = {"0.5", "0.1", "0.9", "0", "1"};
    mx_shape shapes[] = {MX_SHAPE(4, 7), MX_SHAPE(3, 2, 5, 3), MX_SHAPE(1), MX_SHAPE(17, 33)};
    for (int i = 0; i < 5; i++)
        for (int s = 0; s < 4; s++) {
            const char *values[] = {ps[i]};
            opcheck_case c = {.op = "Dropout", .keys = keys, .values = values, .n_params = 1, .ref = identity_ref,
                              .is_train = false, .seed = 1 + (uint64_t)(i * 4 + s)};
            c.in_shapes[0] = shapes[s];
            opcheck_run(&c);
        }
}
END_TEST

/* One forward + backward pass run by hand with a real generator. */
typedef struct drop_run {
    int64_t n;
    float *x, *y, *mask, *dy, *dx;
} drop_run;

static drop_run drop_alloc(int64_t n, uint64_t seed)
{
    drop_run r = {.n = n};
    r.x = malloc((size_t)n * sizeof(float));
    r.y = malloc((size_t)n * sizeof(float));
    r.mask = malloc((size_t)n * sizeof(float));
    r.dy = malloc((size_t)n * sizeof(float));
    r.dx = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        r.x[i] = (float)opcheck_uniform(&seed, 0.5, 2); /* never 0: a zero output means dropped */
        r.dy[i] = (float)opcheck_uniform(&seed, -1, 1);
        r.dx[i] = 0.5f;
    }
    return r;
}

static void drop_free(drop_run *r)
{
    free(r->x);
    free(r->y);
    free(r->mask);
    free(r->dy);
    free(r->dx);
}

static mx_status drop_pass(const char *p, const char *mode, bool is_train, mx_rng *rng, drop_run *r, mx_req fwd,
                           mx_req bwd)
{
    const mx_op_def *op = mx_op_find("Dropout");
    ck_assert_ptr_nonnull(op);
    ck_assert(op->flags & MX_OP_NEEDS_RNG);
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *keys[] = {"p", "mode"}, *values[] = {p, mode};
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, 2, params), MX_OK);
    mx_shape s = MX_SHAPE(r->n);
    mx_tensor in[1] = {{.data = r->x, .shape = s}};
    mx_tensor out[2] = {{.data = r->y, .shape = s}, {.data = r->mask, .shape = s}};
    mx_tensor og[2] = {{.data = r->dy, .shape = s}};
    mx_tensor ig[1] = {{.data = r->dx, .shape = s}};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .is_train = is_train, .rng = rng};
    mx_req rf[2] = {fwd, MX_REQ_WRITE}, rb[1] = {bwd};
    MX_TRY(op->forward(&ctx, params, in, rf, out, NULL));
    return op->backward(&ctx, params, og, in, out, rb, ig, NULL);
}

START_TEST(training_drops_and_scales)
{
    mx_runtime *rt;
    mx_rng *rng;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    ck_assert_int_eq(mx_rng_create(rt, 42, &rng), MX_OK);
    const double ps[] = {0.5, 0.2, 0.9};
    const char *pstr[] = {"0.5", "0.2", "0.9"};
    for (int k = 0; k < 3; k++) {
        const int64_t n = 20000;
        drop_run r = drop_alloc(n, 7 + (uint64_t)k);
        ck_assert_int_eq(drop_pass(pstr[k], "training", true, rng, &r, MX_REQ_WRITE, MX_REQ_WRITE), MX_OK);
        const float scale = (float)(1.0 / (1.0 - ps[k]));
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) {
            ck_assert(r.mask[i] == 0.0f || r.mask[i] == scale);
            kept += r.mask[i] != 0.0f;
            ck_assert(fabsf(r.y[i] - r.x[i] * r.mask[i]) <= 1e-6f * fabsf(r.y[i]));
            ck_assert(fabsf(r.dx[i] - r.dy[i] * r.mask[i]) <= 1e-6f * fabsf(r.dx[i]) + 1e-7f);
        }
        /* Kept fraction within 5 standard deviations of 1-p. */
        double frac = (double)kept / (double)n, sd = sqrt(ps[k] * (1 - ps[k]) / (double)n);
        ck_assert_msg(fabs(frac - (1 - ps[k])) < 5 * sd, "p=%g kept %g", ps[k], frac);
        drop_free(&r);
    }
    mx_rng_free(rng);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(same_seed_same_mask_and_req_add)
{
    mx_runtime *rt;
    mx_rng *a, *b;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    ck_assert_int_eq(mx_rng_create(rt, 9, &a), MX_OK);
    ck_assert_int_eq(mx_rng_create(rt, 9, &b), MX_OK);
    drop_run r1 = drop_alloc(1000, 3), r2 = drop_alloc(1000, 3);
    ck_assert_int_eq(drop_pass("0.3", "training", true, a, &r1, MX_REQ_WRITE, MX_REQ_WRITE), MX_OK);
    for (int64_t i = 0; i < r2.n; i++) r2.y[i] = 1.0f;
    ck_assert_int_eq(drop_pass("0.3", "training", true, b, &r2, MX_REQ_ADD, MX_REQ_ADD), MX_OK);
    ck_assert(!memcmp(r1.mask, r2.mask, 1000 * sizeof(float)));
    for (int64_t i = 0; i < r2.n; i++) {
        ck_assert(fabsf(r2.y[i] - (1.0f + r1.y[i])) < 1e-5f);
        ck_assert(fabsf(r2.dx[i] - (0.5f + r1.dx[i])) < 1e-5f);
    }
    drop_free(&r1);
    drop_free(&r2);
    mx_rng_free(a);
    mx_rng_free(b);
    mx_runtime_free(rt);
}
END_TEST

/* mode=always drops at inference too; p=1 drops everything; p=0 and
 * mode=training at inference are the identity, gradient included. */
START_TEST(modes_and_extreme_rates)
{
    mx_runtime *rt;
    mx_rng *rng;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    ck_assert_int_eq(mx_rng_create(rt, 1, &rng), MX_OK);
    drop_run r = drop_alloc(4000, 11);
    ck_assert_int_eq(drop_pass("0.5", "always", false, rng, &r, MX_REQ_WRITE, MX_REQ_WRITE), MX_OK);
    int64_t zeros = 0;
    for (int64_t i = 0; i < r.n; i++) zeros += r.y[i] == 0.0f;
    ck_assert(zeros > 1500 && zeros < 2500);

    ck_assert_int_eq(drop_pass("1", "training", true, rng, &r, MX_REQ_WRITE, MX_REQ_WRITE), MX_OK);
    for (int64_t i = 0; i < r.n; i++) ck_assert(r.y[i] == 0.0f && r.dx[i] == 0.0f && r.mask[i] == 0.0f);

    ck_assert_int_eq(drop_pass("0", "training", true, rng, &r, MX_REQ_WRITE, MX_REQ_WRITE), MX_OK);
    for (int64_t i = 0; i < r.n; i++) ck_assert(r.y[i] == r.x[i] && r.dx[i] == r.dy[i]);

    ck_assert_int_eq(drop_pass("0.5", "training", false, NULL, &r, MX_REQ_WRITE, MX_REQ_WRITE), MX_OK);
    for (int64_t i = 0; i < r.n; i++) ck_assert(r.y[i] == r.x[i] && r.dx[i] == r.dy[i]);

    /* Dropping without a generator is an error, not a crash. */
    ck_assert_int_eq(drop_pass("0.5", "training", true, NULL, &r, MX_REQ_WRITE, MX_REQ_WRITE), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Dropout: no random generator"));

    /* In place: output over data, in_grad over out_grad. */
    memcpy(r.y, r.x, (size_t)r.n * sizeof(float));
    memcpy(r.dx, r.dy, (size_t)r.n * sizeof(float));
    float *x0 = malloc((size_t)r.n * sizeof(float)), *g0 = malloc((size_t)r.n * sizeof(float));
    memcpy(x0, r.x, (size_t)r.n * sizeof(float));
    memcpy(g0, r.dy, (size_t)r.n * sizeof(float));
    drop_run alias = r;
    alias.y = r.x;
    alias.dx = r.dy;
    ck_assert_int_eq(drop_pass("0.25", "training", true, rng, &alias, MX_REQ_INPLACE, MX_REQ_INPLACE), MX_OK);
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert(r.x[i] == x0[i] * r.mask[i]);
        ck_assert(r.dy[i] == g0[i] * r.mask[i]);
    }
    free(x0);
    free(g0);
    drop_free(&r);
    mx_rng_free(rng);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(bad_parameters_name_op_key_and_value)
{
    const mx_op_def *op = mx_op_find("Dropout");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    char buf[64];
    const char *k1[] = {"p"}, *v1[] = {"1.5"};
    ck_assert_int_eq(mx_op_parse_params(op, k1, v1, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Dropout: parameter 'p' has bad value '1.5'"));
    const char *k2[] = {"mode"}, *v2[] = {"train"};
    ck_assert_int_eq(mx_op_parse_params(op, k2, v2, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Dropout: parameter 'mode' has bad value 'train'"));
    const char *k3[] = {"axes"}, *v3[] = {"(2,3)"};
    ck_assert_int_eq(mx_op_parse_params(op, k3, v3, 1, params), MX_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Dropout: parameter 'axes'"));

    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "p"), params, buf, sizeof(buf)), "0.5");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "mode"), params, buf, sizeof(buf)), "training");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "axes"), params, buf, sizeof(buf)), "()");
    ck_assert_int_eq(op->num_visible_outputs(params), 1);
    const char *names[4];
    ck_assert_int_eq(op->list_outputs(params, names), 2);
    ck_assert_str_eq(names[1], "mask");

    mx_shape in[1] = {{0}}, out[2];
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("Dropout", NULL, NULL, 0, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Dropout: the shape of data is unknown"));
}
END_TEST

/* data -> Dropout(p=0.5, mode) bound through the executor. */
typedef struct drop_bind {
    mx_runtime *rt;
    mx_graph *g;
    mx_ndarray *x;
    mx_executor *ex;
} drop_bind;

enum { BIND_N = 2000 };

static mx_status drop_bind_make(drop_bind *b, const char *mode, bool for_training, mx_rng *rng)
{
    const char *keys[] = {"p", "mode"}, *values[] = {"0.5", mode};
    uint32_t data, drop;
    ck_assert_int_eq(mx_graph_add_variable(b->g, "data", NULL, 0, &data), MX_OK);
    mx_entry in = {data, 0};
    ck_assert_int_eq(mx_graph_add_op(b->g, "Dropout", "drop0", keys, values, 2, &in, 1, NULL, 0, &drop), MX_OK);
    mx_entry head = {drop, 0};
    ck_assert_int_eq(mx_graph_set_heads(b->g, &head, 1), MX_OK);
    mx_bind_config bc = {.ctx = mx_cpu(), .args = &b->x, .for_training = for_training, .rng = rng};
    return mx_executor_bind(b->rt, b->g, &bc, &b->ex);
}

/* Zeros in the output of one forward pass (inputs are all 1); the rest
 * must equal `kept` (1 for the identity, 1/(1-p) = 2 when dropping). */
static int64_t drop_forward_zeros(drop_bind *b, bool is_train, float kept)
{
    ck_assert_int_eq(mx_executor_forward(b->ex, is_train), MX_OK);
    mx_ndarray *y = mx_executor_output(b->ex, 0);
    ck_assert_int_eq(mx_ndarray_wait_to_read(y), MX_OK);
    const float *v = mx_ndarray_data(y);
    int64_t zeros = 0;
    for (int64_t i = 0; i < BIND_N; i++) {
        ck_assert(v[i] == 0.0f || v[i] == kept);
        zeros += v[i] == 0.0f;
    }
    return zeros;
}

static void drop_bind_init(drop_bind *b)
{
    memset(b, 0, sizeof(*b));
    ck_assert_int_eq(mx_runtime_create(NULL, &b->rt), MX_OK);
    ck_assert_int_eq(mx_graph_create(&b->g), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(b->rt, MX_SHAPE(BIND_N), MX_FLOAT32, mx_cpu(), &b->x), MX_OK);
    ck_assert_int_eq(mx_nd_fill(b->x, 1.0), MX_OK);
}

static void drop_bind_free(drop_bind *b, mx_rng *rng)
{
    mx_executor_free(b->ex);
    mx_ndarray_free(b->x);
    mx_rng_free(rng); /* its variable lives in the runtime's engine */
    mx_graph_free(b->g);
    mx_runtime_free(b->rt);
}

/* MXNet's prediction: a prediction bind of mode=training Dropout needs no
 * generator and is the identity; a training pass on it asks for one;
 * mode=always needs one at bind and drops at inference. */
START_TEST(prediction_binds_need_no_rng)
{
    drop_bind b;
    drop_bind_init(&b);
    ck_assert_int_eq(drop_bind_make(&b, "training", false, NULL), MX_OK);
    ck_assert_int_eq(drop_forward_zeros(&b, false, 1.0f), 0);
    ck_assert_int_eq(mx_executor_forward(b.ex, true), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "forward: layer 'drop0' (Dropout) draws random numbers in training "
                                                  "passes: bind the executor with an rng"));
    drop_bind_free(&b, NULL);

    /* Training binds need the generator at bind. */
    drop_bind_init(&b);
    ck_assert_int_eq(drop_bind_make(&b, "training", true, NULL), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "bind: layer 'drop0' (Dropout) draws random numbers in training: "
                                                  "give the executor an rng"));
    drop_bind_free(&b, NULL);

    drop_bind_init(&b);
    ck_assert_int_eq(drop_bind_make(&b, "always", false, NULL), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "bind: layer 'drop0' (Dropout) draws random numbers: give the "
                                                  "executor an rng"));
    drop_bind_free(&b, NULL);

    /* mode=always with a generator: drops about half at inference. */
    drop_bind_init(&b);
    mx_rng *rng;
    ck_assert_int_eq(mx_rng_create(b.rt, 5, &rng), MX_OK);
    ck_assert_int_eq(drop_bind_make(&b, "always", false, rng), MX_OK);
    int64_t zeros = drop_forward_zeros(&b, false, 2.0f);
    ck_assert(zeros > 800 && zeros < 1200);
    drop_bind_free(&b, rng);

    /* A training bind with a generator: inference passes are the identity,
     * training passes drop. */
    drop_bind_init(&b);
    ck_assert_int_eq(mx_rng_create(b.rt, 6, &rng), MX_OK);
    ck_assert_int_eq(drop_bind_make(&b, "training", false, rng), MX_OK);
    ck_assert_int_eq(drop_forward_zeros(&b, false, 1.0f), 0);
    zeros = drop_forward_zeros(&b, true, 2.0f);
    ck_assert(zeros > 800 && zeros < 1200);
    ck_assert_int_eq(drop_forward_zeros(&b, false, 1.0f), 0);
    drop_bind_free(&b, rng);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_dropout");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, inference_is_identity);
    tcase_add_test(tc, training_drops_and_scales);
    tcase_add_test(tc, same_seed_same_mask_and_req_add);
    tcase_add_test(tc, modes_and_extreme_rates);
    tcase_add_test(tc, bad_parameters_name_op_key_and_value);
    tcase_add_test(tc, prediction_binds_need_no_rng);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
