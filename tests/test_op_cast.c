/* test_op_cast.c - Cast: float32 through the reference harness, the other
 * dtypes (saturating integer casts, IEEE half rounding) checked directly. */
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void copy_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = in[0][i];
}

START_TEST(float32_against_reference)
{
    const char *keys[] = {"dtype"}, *values[] = {"float32"};
    mx_shape shapes[] = {MX_SHAPE(4, 7), MX_SHAPE(3, 2, 5), MX_SHAPE(1), MX_SHAPE(600)};
    for (int i = 0; i < 4; i++) {
        opcheck_case c = {.op = "Cast", .keys = keys, .values = values, .n_params = 1, .ref = copy_ref,
                          .seed = 3 + (uint64_t)i};
        c.in_shapes[0] = shapes[i];
        opcheck_run(&c);
    }
}
END_TEST

static mx_status cast(const char *dtype, const void *x, mx_dtype xt, void *y, mx_dtype yt, int64_t n, mx_req r)
{
    const mx_op_def *op = mx_op_find("Cast");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"dtype"}, *v[] = {dtype};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    mx_tensor in = {(void *)x, MX_SHAPE(n), xt, mx_cpu(), 0}, out = {y, MX_SHAPE(n), yt, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {r};
    return op->forward(&ctx, params, &in, req, &out, NULL);
}

enum { NV = 12 };
static const float vals[NV] = {-300.7f, -1.5f, -0.5f, 0.0f, 0.49f, 1.5f, 2.7f, 255.9f, 300.0f, NAN, 1e10f, -1e10f};

START_TEST(to_integers_truncate_and_saturate)
{
    int32_t i32[NV];
    ck_assert_int_eq(cast("int32", vals, MX_FLOAT32, i32, MX_INT32, NV, MX_REQ_WRITE), MX_OK);
    const int32_t want32[NV] = {-300, -1, 0, 0, 0, 1, 2, 255, 300, 0, INT32_MAX, INT32_MIN};
    for (int i = 0; i < NV; i++) ck_assert_msg(i32[i] == want32[i], "int32[%d] = %d, want %d", i, i32[i], want32[i]);
    uint8_t u8[NV];
    ck_assert_int_eq(cast("uint8", vals, MX_FLOAT32, u8, MX_UINT8, NV, MX_REQ_WRITE), MX_OK);
    const uint8_t want8[NV] = {0, 0, 0, 0, 0, 1, 2, 255, 255, 0, 255, 0};
    for (int i = 0; i < NV; i++) ck_assert_msg(u8[i] == want8[i], "uint8[%d] = %d, want %d", i, u8[i], want8[i]);
    int8_t s8[NV];
    ck_assert_int_eq(cast("int8", vals, MX_FLOAT32, s8, MX_INT8, NV, MX_REQ_WRITE), MX_OK);
    const int8_t wants8[NV] = {-128, -1, 0, 0, 0, 1, 2, 127, 127, 0, 127, -128};
    for (int i = 0; i < NV; i++) ck_assert_msg(s8[i] == wants8[i], "int8[%d] = %d, want %d", i, s8[i], wants8[i]);
    int64_t s64[NV];
    ck_assert_int_eq(cast("int64", vals, MX_FLOAT32, s64, MX_INT64, NV, MX_REQ_WRITE), MX_OK);
    ck_assert(s64[0] == -300 && s64[7] == 255 && s64[10] == 10000000000LL && s64[9] == 0);
    /* and back to float: exact for these */
    float back[NV];
    ck_assert_int_eq(cast("float32", i32, MX_INT32, back, MX_FLOAT32, NV, MX_REQ_WRITE), MX_OK);
    ck_assert(back[0] == -300.0f && back[8] == 300.0f);
    double f64[NV];
    ck_assert_int_eq(cast("float64", vals, MX_FLOAT32, f64, MX_FLOAT64, NV, MX_REQ_WRITE), MX_OK);
    for (int i = 0; i < NV; i++) ck_assert(i == 9 ? isnan(f64[i]) : f64[i] == (double)vals[i]);
    /* uint8 images to float32, the common input path */
    const uint8_t pix[4] = {0, 1, 128, 255};
    float fp[4] = {1, 1, 1, 1};
    ck_assert_int_eq(cast("float32", pix, MX_UINT8, fp, MX_FLOAT32, 4, MX_REQ_ADD), MX_OK);
    ck_assert(fp[0] == 1 && fp[1] == 2 && fp[2] == 129 && fp[3] == 256);
}
END_TEST

START_TEST(half_precision_rounds_to_nearest_even)
{
    const float f[] = {1.0f, -2.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 6e-8f, 0.1f, 1.0f / 3, INFINITY, -0.0f,
                       1.00048828125f /* exactly between two halves: to even */, 1.00146484375f /* odd: up */};
    const uint16_t want[] = {0x3c00, 0xc000, 0x7bff, 0x7bff, 0x7c00, 0x0000, 0x0001, 0x2e66, 0x3555, 0x7c00,
                             0x8000, 0x3c00, 0x3c02};
    int n = (int)(sizeof(f) / sizeof(f[0]));
    uint16_t h[16];
    ck_assert_int_eq(cast("float16", f, MX_FLOAT32, h, MX_FLOAT16, n, MX_REQ_WRITE), MX_OK);
    for (int i = 0; i < n; i++) ck_assert_msg(h[i] == want[i], "half(%g) = 0x%04x, want 0x%04x", f[i], h[i], want[i]);
    /* Every finite half survives half -> float -> half. */
    static uint16_t all[65536], again[65536];
    static float wide[65536];
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    ck_assert_int_eq(cast("float32", all, MX_FLOAT16, wide, MX_FLOAT32, 65536, MX_REQ_WRITE), MX_OK);
    ck_assert_int_eq(cast("float16", wide, MX_FLOAT32, again, MX_FLOAT16, 65536, MX_REQ_WRITE), MX_OK);
    for (int i = 0; i < 65536; i++) {
        if ((i & 0x7c00) == 0x7c00 && (i & 0x3ff)) { /* NaN stays NaN */
            ck_assert(isnan(wide[i]) && (again[i] & 0x7c00) == 0x7c00 && (again[i] & 0x3ff));
            continue;
        }
        ck_assert_msg(again[i] == i, "half 0x%04x -> %g -> 0x%04x", i, wide[i], again[i]);
    }
    ck_assert(wide[0x0001] == 0x1p-24f && wide[0x7bff] == 65504.0f && wide[0xbc00] == -1.0f);
}
END_TEST

/* The gradient comes back in the input's type, and accumulates. */
START_TEST(backward_casts_back)
{
    const mx_op_def *op = mx_op_find("Cast");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"dtype"}, *v[] = {"float64"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    double dy[3] = {0.25, -1.5, 3};
    float dx[3] = {1, 1, 1}, x[3] = {0, 0, 0};
    mx_tensor tdy = {dy, MX_SHAPE(3), MX_FLOAT64, mx_cpu(), 0}, tdx = {dx, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), 0};
    mx_tensor tx = {x, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {MX_REQ_ADD};
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, NULL, req, &tdx, NULL), MX_OK);
    ck_assert(dx[0] == 1.25f && dx[1] == -0.5f && dx[2] == 4.0f);
    req[0] = MX_REQ_WRITE;
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, NULL, req, &tdx, NULL), MX_OK);
    ck_assert(dx[0] == 0.25f && dx[1] == -1.5f && dx[2] == 3.0f);
    /* An output tensor of another type than dtype is refused. */
    float y[3];
    ck_assert_int_eq(cast("float64", x, MX_FLOAT32, y, MX_FLOAT32, 3, MX_REQ_WRITE), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Cast: output tensor is float32, expected float64"));
}
END_TEST

START_TEST(parameters)
{
    const mx_op_def *op = mx_op_find("Cast");
    ck_assert_ptr_eq(mx_op_find("cast"), op);
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Cast: required parameter 'dtype' is missing"));
    const char *k[] = {"dtype"}, *v1[] = {"bool"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v1, 1, params), MX_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Cast: parameter 'dtype' value 'bool' is not supported"));
    const char *v2[] = {"float"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v2, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Cast: parameter 'dtype' has bad value 'float'"));
    char buf[32];
    const char *v3[] = {"uint8"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v3, 1, params), MX_OK);
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "dtype"), params, buf, sizeof(buf)), "uint8");
    mx_shape in[1] = {MX_SHAPE(2, 3)}, out[1];
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("Cast", k, v3, 1, in, &n_in, out, &n_out), MX_OK);
    ck_assert(mx_shape_equal(&in[0], &out[0]));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_cast");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, float32_against_reference);
    tcase_add_test(tc, to_integers_truncate_and_saturate);
    tcase_add_test(tc, half_precision_rounds_to_nearest_even);
    tcase_add_test(tc, backward_casts_back);
    tcase_add_test(tc, parameters);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
