/* test_op_cast.c - Cast: float32 through the reference harness, the other
 * dtypes (saturating integer casts, IEEE half rounding) checked directly.
 * Float16 and bfloat16: base/half.h's helpers, Cast and amp_cast against
 * hand-worked bits and a brute-force rounding reference (the nearest of
 * the neighbouring halves, computed in double), every half bit pattern
 * round-tripped; in CUDA builds the GPU kernels' element code (run on the
 * host) against the CPU's, bit for bit, for every dtype pair. */
#include "base/half.h"
#include "ndarray/dtype_convert.h"
#include "ops/cast.h"
#include "support/opcheck.h"

#include <check.h>
#include <float.h>
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

/* ------------------------------------------------------------ half precision */

static float bits_f(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

/* Hand-worked: a float, its float16 and its bfloat16 (nearest, ties to
 * even; overflow to inf; NaN quiet, of its sign). */
typedef struct half_case {
    uint32_t f;
    uint16_t h, b;
} half_case;

static const half_case half_cases[] = {
    {0x3f800000, 0x3c00, 0x3f80}, /* 1 */
    {0xc0000000, 0xc000, 0xc000}, /* -2 */
    {0x477fe000, 0x7bff, 0x4780}, /* 65504: the largest half; bfloat16 rounds up to 65536 */
    {0x477fef00, 0x7bff, 0x4780}, /* 65519 */
    {0x477ff000, 0x7c00, 0x4780}, /* 65520: past the largest half by half a step: inf */
    {0xc77ff000, 0xfc00, 0xc780}, /* -65520 */
    {0x322bcc77, 0x0000, 0x322c}, /* 1e-8: below half the smallest subnormal */
    {0xb22bcc77, 0x8000, 0xb22c}, /* -1e-8: negative zero */
    {0x33000000, 0x0000, 0x3300}, /* 2^-25: tie between 0 and 2^-24, to even 0 */
    {0x33400000, 0x0001, 0x3340}, /* 3*2^-26 */
    {0x33800000, 0x0001, 0x3380}, /* 2^-24: the smallest subnormal */
    {0x33c00000, 0x0002, 0x33c0}, /* 1.5*2^-24: tie, to even 2 */
    {0x34200000, 0x0002, 0x3420}, /* 2.5*2^-24: tie, to even 2 */
    {0x387fc000, 0x03ff, 0x3880}, /* 1023*2^-24: the largest subnormal */
    {0x387fe000, 0x0400, 0x3880}, /* 1023.5*2^-24: tie, to even: the smallest normal */
    {0x38800000, 0x0400, 0x3880}, /* 2^-14 */
    {0x3f801000, 0x3c00, 0x3f80}, /* 1 + 2^-11: tie, to even */
    {0x3f803000, 0x3c02, 0x3f80}, /* 1 + 3*2^-11: tie, up to even */
    {0x3f808000, 0x3c04, 0x3f80}, /* 1 + 2^-8: bfloat16 tie, to even */
    {0x3f818000, 0x3c0c, 0x3f82}, /* 1 + 3*2^-8: bfloat16 tie, up to even */
    {0x3dcccccd, 0x2e66, 0x3dcd}, /* 0.1 */
    {0x7f800000, 0x7c00, 0x7f80}, /* inf */
    {0xff800000, 0xfc00, 0xff80}, /* -inf */
    {0x80000000, 0x8000, 0x8000}, /* -0 */
    {0x00000000, 0x0000, 0x0000}, /* 0 */
    {0x7f7fffff, 0x7c00, 0x7f80}, /* FLT_MAX: bfloat16 rounds to inf */
    {0x7f7f7fff, 0x7c00, 0x7f7f}, /* just below bfloat16's rounding to inf */
    {0x00000001, 0x0000, 0x0000}, /* the smallest float subnormal */
    {0x00018000, 0x0000, 0x0002}, /* a float subnormal at a bfloat16 tie, up to even */
    {0x7fc00000, 0x7e00, 0x7fc0}, /* NaN */
    {0xffc00000, 0xfe00, 0xffc0}, /* -NaN */
    {0x7f800001, 0x7e00, 0x7fc0}, /* signalling NaN: quiet */
    {0x7fa12345, 0x7e00, 0x7fe1}, /* NaN with a payload: bfloat16 keeps its top */
};
enum { N_HALF_CASES = (int)(sizeof(half_cases) / sizeof(half_cases[0])) };

/* The positive finite values of a 16-bit format, ascending by bit pattern
 * and computed with ldexp (no bit tricks): `man_bits` mantissa bits and
 * exponent bias `bias`, plus one more entry, the value the pattern after
 * the largest would have (the overflow threshold's upper neighbour). */
static double *format_values(int man_bits, int bias, int count)
{
    double *v = malloc(sizeof(double) * (size_t)(count + 1));
    for (int k = 0; k <= count; k++) {
        int e = k >> man_bits, m = k & ((1 << man_bits) - 1);
        v[k] = e == 0 ? ldexp(m, 1 - bias - man_bits) : ldexp((1 << man_bits) + m, e - bias - man_bits);
    }
    return v;
}

/* The nearest of vals[0..count] to f, ties to the even pattern; count (the
 * entry past the largest finite) means inf. NaN: quiet NaN of f's sign
 * (nan_bits). */
static uint16_t ref_round(float f, const double *vals, int count, uint16_t sign_bit, uint16_t inf_bits,
                          uint16_t nan_bits)
{
    uint16_t sign = signbit(f) ? sign_bit : 0;
    if (isnan(f)) return (uint16_t)(sign | nan_bits);
    double a = fabs((double)f);
    if (a >= vals[count]) return (uint16_t)(sign | inf_bits);
    int lo = 0, hi = count; /* vals[lo] <= a < vals[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (vals[mid] <= a) lo = mid;
        else hi = mid;
    }
    int k = lo;
    if (vals[lo] != a) {
        double dl = a - vals[lo], dh = vals[hi] - a;
        k = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    }
    return (uint16_t)(sign | (k == count ? inf_bits : k));
}

static double *half_vals, *bf16_vals;
static uint16_t ref_half(float f) { return ref_round(f, half_vals, 0x7c00, 0x8000, 0x7c00, 0x7e00); }
static uint16_t ref_bf16(float f)
{
    if (isnan(f)) return (uint16_t)((f_bits(f) >> 16) | 0x40);
    return ref_round(f, bf16_vals, 0x7f80, 0x8000, 0x7f80, 0);
}

static void make_tables(void)
{
    if (!half_vals) half_vals = format_values(10, 15, 0x7c00);
    if (!bf16_vals) bf16_vals = format_values(7, 127, 0x7f80);
}

/* Floats that stress rounding: the hand cases, every midpoint between two
 * neighbouring halves and bfloat16s and the floats just beside it, and
 * random bit patterns. *n gets the count. */
static float *rounding_inputs(int *n)
{
    make_tables();
    int cap = N_HALF_CASES + 6 * 0x7c00 + 6 * 0x7f80 + 400000, k = 0;
    float *f = malloc(sizeof(float) * (size_t)cap);
    for (int i = 0; i < N_HALF_CASES; i++) f[k++] = bits_f(half_cases[i].f);
    for (int t = 0; t < 2; t++) {
        const double *v = t ? bf16_vals : half_vals;
        int count = t ? 0x7f80 : 0x7c00;
        for (int i = 0; i < count; i++) {
            float mid = (float)((v[i] + v[i + 1]) / 2); /* exact: 12 (9) significant bits */
            for (int s = 0; s < 2; s++) {
                float m = s ? -mid : mid;
                f[k++] = m;
                f[k++] = nextafterf(m, INFINITY);
                f[k++] = nextafterf(m, -INFINITY);
            }
        }
    }
    uint64_t r = 88172645463325252ull;
    while (k < cap) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        f[k++] = bits_f((uint32_t)(r >> 16));
    }
    *n = k;
    return f;
}

START_TEST(half_helpers_round_to_nearest_even)
{
    make_tables();
    for (int i = 0; i < N_HALF_CASES; i++) {
        float f = bits_f(half_cases[i].f);
        ck_assert_msg(mx_float_to_half(f) == half_cases[i].h, "half(0x%08x) = 0x%04x, want 0x%04x", half_cases[i].f,
                      mx_float_to_half(f), half_cases[i].h);
        ck_assert_msg(mx_float_to_bfloat16(f) == half_cases[i].b, "bfloat16(0x%08x) = 0x%04x, want 0x%04x",
                      half_cases[i].f, mx_float_to_bfloat16(f), half_cases[i].b);
        /* the hand-worked bits agree with the brute-force reference */
        ck_assert_msg(ref_half(f) == half_cases[i].h && ref_bf16(f) == half_cases[i].b, "reference at 0x%08x",
                      half_cases[i].f);
    }
    int n;
    float *f = rounding_inputs(&n);
    for (int i = 0; i < n; i++) {
        uint16_t h = mx_float_to_half(f[i]), b = mx_float_to_bfloat16(f[i]);
        ck_assert_msg(h == ref_half(f[i]), "half(%a = 0x%08x) = 0x%04x, want 0x%04x", f[i], f_bits(f[i]), h,
                      ref_half(f[i]));
        ck_assert_msg(b == ref_bf16(f[i]), "bfloat16(%a = 0x%08x) = 0x%04x, want 0x%04x", f[i], f_bits(f[i]), b,
                      ref_bf16(f[i]));
    }
    free(f);
}
END_TEST

/* The bulk conversions (mx_dtype_convert: F16C and AVX2 blocks of 8
 * where the CPU has them) give the scalar helpers' bits for every input of
 * the rounding set (NaNs of every payload among them) and every half
 * pattern, at every alignment of a block. */
START_TEST(bulk_conversions_give_the_helpers_bits)
{
    make_tables();
    int n;
    float *f = rounding_inputs(&n);
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n + 2);
    float *back = malloc(sizeof(float) * (size_t)n + 4);
    const mx_dtype types[2] = {MX_FLOAT16, MX_BFLOAT16};
    for (int t = 0; t < 2; t++)
        for (int skew = 0; skew < 3; skew++) { /* blocks of 8 starting off the inputs' alignment */
            ck_assert_int_eq(mx_dtype_convert("test", h, types[t], f + skew, MX_FLOAT32, n - skew, false), MX_OK);
            for (int i = 0; i < n - skew; i++) {
                uint16_t want = t ? mx_float_to_bfloat16(f[i + skew]) : mx_float_to_half(f[i + skew]);
                ck_assert_msg(h[i] == want, "%s of 0x%08x: 0x%04x, the helper's 0x%04x", mx_dtype_name(types[t]),
                              f_bits(f[i + skew]), h[i], want);
            }
        }
    free(f);
    free(h);
    free(back);
    static uint16_t all[65536 + 3];
    static float wide[65536 + 3];
    for (int i = 0; i < 65536 + 3; i++) all[i] = (uint16_t)(i * 40503u);
    for (int t = 0; t < 2; t++)
        for (int skew = 0; skew < 3; skew++) {
            ck_assert_int_eq(mx_dtype_convert("test", wide, MX_FLOAT32, all + skew, types[t], 65536, false), MX_OK);
            for (int i = 0; i < 65536; i++) {
                float want = t ? mx_bfloat16_to_float(all[i + skew]) : mx_half_to_float(all[i + skew]);
                ck_assert_msg(f_bits(wide[i]) == f_bits(want), "%s 0x%04x: 0x%08x, the helper's 0x%08x",
                              mx_dtype_name(types[t]), all[i + skew], f_bits(wide[i]), f_bits(want));
            }
        }
}
END_TEST

/* Every one of the 65536 patterns of each format: to float the exact value
 * (the ldexp table), back the same bits; a NaN stays a NaN. */
START_TEST(half_helpers_every_pattern)
{
    make_tables();
    for (int i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float hf = mx_half_to_float(h), bf = mx_bfloat16_to_float(h);
        int hk = i & 0x7fff;
        if (hk > 0x7c00) {
            ck_assert_msg(isnan(hf) && (mx_float_to_half(hf) & 0x7c00) == 0x7c00 && (mx_float_to_half(hf) & 0x3ff),
                          "half NaN 0x%04x", i);
        } else {
            double want = hk == 0x7c00 ? INFINITY : half_vals[hk];
            ck_assert_msg((double)hf == (i & 0x8000 ? -want : want) && !signbit(hf) == !(i & 0x8000),
                          "half 0x%04x -> %a", i, hf);
            ck_assert_msg(mx_float_to_half(hf) == h, "half 0x%04x -> %a -> 0x%04x", i, hf, mx_float_to_half(hf));
        }
        int bk = i & 0x7fff;
        if (bk > 0x7f80) {
            ck_assert_msg(isnan(bf) && mx_float_to_bfloat16(bf) == (h | 0x40), "bfloat16 NaN 0x%04x", i);
        } else {
            double want = bk == 0x7f80 ? INFINITY : bf16_vals[bk];
            ck_assert_msg((double)bf == (i & 0x8000 ? -want : want) && !signbit(bf) == !(i & 0x8000),
                          "bfloat16 0x%04x -> %a", i, bf);
            ck_assert_msg(mx_float_to_bfloat16(bf) == h, "bfloat16 0x%04x -> %a -> 0x%04x", i, bf,
                          mx_float_to_bfloat16(bf));
        }
    }
}
END_TEST

/* Cast float32 -> float16 / bfloat16 rounds as the reference, and every
 * pattern survives the trip through float32 and float64. */
START_TEST(cast_half_types_against_reference)
{
    int n;
    float *f = rounding_inputs(&n);
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n), *b = malloc(sizeof(uint16_t) * (size_t)n);
    ck_assert_int_eq(cast("float16", f, MX_FLOAT32, h, MX_FLOAT16, n, MX_REQ_WRITE), MX_OK);
    ck_assert_int_eq(cast("bfloat16", f, MX_FLOAT32, b, MX_BFLOAT16, n, MX_REQ_WRITE), MX_OK);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(h[i] == ref_half(f[i]), "Cast half(0x%08x) = 0x%04x, want 0x%04x", f_bits(f[i]), h[i],
                      ref_half(f[i]));
        ck_assert_msg(b[i] == ref_bf16(f[i]), "Cast bfloat16(0x%08x) = 0x%04x, want 0x%04x", f_bits(f[i]), b[i],
                      ref_bf16(f[i]));
    }
    free(f), free(h), free(b);
    static uint16_t all[65536], again[65536];
    static float wide[65536];
    static double wider[65536];
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    const char *names[2] = {"float16", "bfloat16"};
    const mx_dtype types[2] = {MX_FLOAT16, MX_BFLOAT16};
    for (int t = 0; t < 2; t++) {
        uint16_t exp = t ? 0x7f80 : 0x7c00;
        ck_assert_int_eq(cast("float32", all, types[t], wide, MX_FLOAT32, 65536, MX_REQ_WRITE), MX_OK);
        ck_assert_int_eq(cast(names[t], wide, MX_FLOAT32, again, types[t], 65536, MX_REQ_WRITE), MX_OK);
        for (int i = 0; i < 65536; i++) {
            bool nan = (i & exp) == exp && (i & ~(exp | 0x8000));
            if (nan) ck_assert_msg(isnan(wide[i]) && (again[i] & exp) == exp && (again[i] & ~(exp | 0x8000)),
                                   "%s NaN 0x%04x", names[t], i);
            else ck_assert_msg(again[i] == i, "%s 0x%04x -> %a -> 0x%04x", names[t], i, wide[i], again[i]);
        }
        ck_assert_int_eq(cast("float64", all, types[t], wider, MX_FLOAT64, 65536, MX_REQ_WRITE), MX_OK);
        ck_assert_int_eq(cast(names[t], wider, MX_FLOAT64, again, types[t], 65536, MX_REQ_WRITE), MX_OK);
        for (int i = 0; i < 65536; i++) {
            bool nan = (i & exp) == exp && (i & ~(exp | 0x8000));
            ck_assert_msg(nan ? isnan(wider[i]) && (again[i] & exp) == exp : again[i] == i && wider[i] == wide[i],
                          "%s 0x%04x through float64", names[t], i);
        }
    }
}
END_TEST

/* Between the half types and the others: integers saturate, float16 and
 * bfloat16 convert through float32; float64 is rounded to float32 first
 * (as MXNet's half_t(double)), so a value just above a float16 tie that
 * float32 cannot hold lands on the tie and goes to even. */
START_TEST(cast_half_types_to_and_from_others)
{
    const uint16_t h[6] = {0x7c00, 0xfc00, 0x7e00, 0x7bff, 0xc0b0 /* -2.34375 */, 0x3bff /* 0.99951171875 */};
    int32_t i32[6];
    ck_assert_int_eq(cast("int32", h, MX_FLOAT16, i32, MX_INT32, 6, MX_REQ_WRITE), MX_OK);
    const int32_t w32[6] = {INT32_MAX, INT32_MIN, 0, 65504, -2, 0};
    for (int i = 0; i < 6; i++) ck_assert_msg(i32[i] == w32[i], "int32[%d] = %d", i, i32[i]);
    uint8_t u8[6];
    ck_assert_int_eq(cast("uint8", h, MX_FLOAT16, u8, MX_UINT8, 6, MX_REQ_WRITE), MX_OK);
    const uint8_t w8[6] = {255, 0, 0, 255, 0, 0};
    for (int i = 0; i < 6; i++) ck_assert_msg(u8[i] == w8[i], "uint8[%d] = %d", i, u8[i]);
    const uint16_t b[4] = {0x7f7f /* 3.39e38 */, 0x5f00 /* 2^63 */, 0xdf00 /* -2^63 */, 0x4b00 /* 2^23 */};
    int64_t i64[4];
    ck_assert_int_eq(cast("int64", b, MX_BFLOAT16, i64, MX_INT64, 4, MX_REQ_WRITE), MX_OK);
    ck_assert(i64[0] == INT64_MAX && i64[1] == INT64_MAX && i64[2] == INT64_MIN && i64[3] == 8388608);
    /* integers to halves: 2049 is not a float16 (tie between 2048 and 2050, to even 2048) */
    const int32_t ints[5] = {2049, 2051, 70000, -70000, 257};
    uint16_t hi[5], bi[5];
    ck_assert_int_eq(cast("float16", ints, MX_INT32, hi, MX_FLOAT16, 5, MX_REQ_WRITE), MX_OK);
    ck_assert_int_eq(cast("bfloat16", ints, MX_INT32, bi, MX_BFLOAT16, 5, MX_REQ_WRITE), MX_OK);
    const uint16_t whi[5] = {0x6800, 0x6802, 0x7c00, 0xfc00, 0x5c04}, wbi[5] = {0x4500, 0x4500, 0x4789, 0xc789, 0x4380};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(hi[i] == whi[i] && bi[i] == wbi[i], "%d -> 0x%04x 0x%04x", ints[i], hi[i], bi[i]);
    /* float16 <-> bfloat16 */
    const uint16_t hb[3] = {0x3555 /* 0.333251953125 */, 0x0001, 0x7bff};
    uint16_t bh[3], back[3];
    ck_assert_int_eq(cast("bfloat16", hb, MX_FLOAT16, bh, MX_BFLOAT16, 3, MX_REQ_WRITE), MX_OK);
    ck_assert(bh[0] == 0x3eab && bh[1] == 0x3380 && bh[2] == 0x4780);
    ck_assert_int_eq(cast("float16", bh, MX_BFLOAT16, back, MX_FLOAT16, 3, MX_REQ_WRITE), MX_OK);
    ck_assert(back[0] == 0x3558 && back[1] == 0x0001 && back[2] == 0x7c00);
    /* float64 through float32 */
    const double d[2] = {1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-11 + 0x1p-20};
    uint16_t dh[2];
    ck_assert_int_eq(cast("float16", d, MX_FLOAT64, dh, MX_FLOAT16, 2, MX_REQ_WRITE), MX_OK);
    ck_assert_msg(dh[0] == 0x3c00 && dh[1] == 0x3c01, "0x%04x 0x%04x", dh[0], dh[1]);
    /* accumulating into a half gradient: the sum rounded once more */
    uint16_t acc[2] = {0x3c00, 0x7bff};
    const float g[2] = {0x1p-11f, 16.0f};
    ck_assert_int_eq(cast("float16", g, MX_FLOAT32, acc, MX_FLOAT16, 2, MX_REQ_ADD), MX_OK);
    ck_assert_msg(acc[0] == 0x3c00 && acc[1] == 0x7c00, "0x%04x 0x%04x", acc[0], acc[1]);
}
END_TEST

/* In place between types of different sizes (the executor may give an
 * output the input's buffer): widening runs from the end. */
START_TEST(convert_in_place)
{
    enum { N = 1000 };
    static union {
        float f[N];
        uint16_t h[2 * N];
        double d[N / 2];
    } buf;
    static uint16_t want[N];
    for (int i = 0; i < N; i++) buf.f[i] = (float)i * 0.37f - 100.0f, want[i] = mx_float_to_half(buf.f[i]);
    ck_assert_int_eq(mx_dtype_convert("test", buf.h, MX_FLOAT16, buf.f, MX_FLOAT32, N, false), MX_OK);
    ck_assert(memcmp(buf.h, want, sizeof(want)) == 0);
    ck_assert_int_eq(mx_dtype_convert("test", buf.f, MX_FLOAT32, buf.h, MX_FLOAT16, N, false), MX_OK);
    for (int i = 0; i < N; i++) ck_assert(buf.f[i] == mx_half_to_float(want[i]));
    /* through double, chunk by chunk: int8 <-> float64 */
    int8_t *b = (int8_t *)buf.d;
    for (int i = 0; i < N / 2; i++) b[i] = (int8_t)(i % 256 - 128);
    ck_assert_int_eq(mx_dtype_convert("test", buf.d, MX_FLOAT64, b, MX_INT8, N / 2, false), MX_OK);
    for (int i = 0; i < N / 2; i++) ck_assert(buf.d[i] == (double)(i % 256 - 128));
    ck_assert_int_eq(mx_dtype_convert("test", b, MX_INT8, buf.d, MX_FLOAT64, N / 2, false), MX_OK);
    for (int i = 0; i < N / 2; i++) ck_assert(b[i] == (int8_t)(i % 256 - 128));
    ck_assert_int_eq(mx_dtype_convert("test", b, (mx_dtype)9, buf.d, MX_FLOAT64, 1, false), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "test: bad dtype"));
}
END_TEST

/* amp_cast: float32 / float16 / bfloat16 data to dtype, other data passes
 * through (MXNet's AMPCastType); the gradient goes back to data's type. */
START_TEST(amp_cast_converts_like_cast)
{
    const mx_op_def *op = mx_op_find("amp_cast");
    _Alignas(16) char params[64];
    const char *k[] = {"dtype"}, *v[] = {"float16"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    int in_t[1] = {MX_FLOAT32}, out_t[1] = {-1};
    ck_assert_int_eq(op->infer_type(params, in_t, 1, out_t, 1), MX_OK);
    ck_assert_int_eq(out_t[0], MX_FLOAT16);
    int in64[1] = {MX_FLOAT64}, out64[1] = {-1};
    ck_assert_int_eq(op->infer_type(params, in64, 1, out64, 1), MX_OK);
    ck_assert_int_eq(out64[0], MX_FLOAT64);
    int bad[1] = {MX_FLOAT32};
    ck_assert_int_eq(op->infer_type(params, in_t, 1, bad, 1), MX_ERR_INVALID);
    const float x[4] = {1.0f, 65520.0f, 0x1p-25f, -0.1f};
    uint16_t y[4];
    mx_tensor in = {(void *)x, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0}, out = {y, MX_SHAPE(4), MX_FLOAT16, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, &in, req, &out, NULL), MX_OK);
    ck_assert(y[0] == 0x3c00 && y[1] == 0x7c00 && y[2] == 0x0000 && y[3] == 0xae66);
    /* a float32 output for float16 dtype is refused, not ignored */
    float wrong[4];
    mx_tensor tw = {wrong, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0};
    ck_assert_int_eq(op->forward(&ctx, params, &in, req, &tw, NULL), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "amp_cast: output tensor is float32, expected float16"));
    /* float64 data passes through */
    const double xd[2] = {0.1, -3.0};
    double yd[2];
    mx_tensor ind = {(void *)xd, MX_SHAPE(2), MX_FLOAT64, mx_cpu(), 0}, outd = {yd, MX_SHAPE(2), MX_FLOAT64, mx_cpu(), 0};
    ck_assert_int_eq(op->forward(&ctx, params, &ind, req, &outd, NULL), MX_OK);
    ck_assert(yd[0] == 0.1 && yd[1] == -3.0);
    /* backward: the float16 gradient into float32, written then added */
    const uint16_t dy[4] = {0x3c00, 0xc000, 0x0001, 0x7c00};
    float dx[4] = {9, 9, 9, 9};
    mx_tensor tdy = {(void *)dy, MX_SHAPE(4), MX_FLOAT16, mx_cpu(), 0}, tdx = {dx, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0};
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &in, &out, req, &tdx, NULL), MX_OK);
    ck_assert(dx[0] == 1.0f && dx[1] == -2.0f && dx[2] == 0x1p-24f && isinf(dx[3]));
    req[0] = MX_REQ_ADD;
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &in, &out, req, &tdx, NULL), MX_OK);
    ck_assert(dx[0] == 2.0f && dx[1] == -4.0f && dx[2] == 0x1p-23f && isinf(dx[3]));
    /* bfloat16 */
    const char *vb[] = {"bfloat16"};
    ck_assert_int_eq(mx_op_parse_params(op, k, vb, 1, params), MX_OK);
    out.dtype = MX_BFLOAT16;
    req[0] = MX_REQ_WRITE;
    ck_assert_int_eq(op->forward(&ctx, params, &in, req, &out, NULL), MX_OK);
    ck_assert(y[0] == 0x3f80 && y[1] == 0x4780 && y[2] == 0x3300 && y[3] == 0xbdcd);
}
END_TEST

START_TEST(cast_bfloat16_parameter_and_type)
{
    const mx_op_def *op = mx_op_find("Cast");
    _Alignas(16) char params[64];
    const char *k[] = {"dtype"}, *v[] = {"bfloat16"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    int in_t[1] = {-1}, out_t[1] = {-1};
    ck_assert_int_eq(op->infer_type(params, in_t, 1, out_t, 1), MX_OK);
    ck_assert(in_t[0] == MX_FLOAT32 && out_t[0] == MX_BFLOAT16);
    int in16[1] = {MX_FLOAT16}, out32[1] = {MX_FLOAT32};
    ck_assert_int_eq(op->infer_type(params, in16, 1, out32, 1), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Cast: output is float32, but dtype is bfloat16"));
    ck_assert(op->cpu_dtypes & MX_DTYPE_BIT(MX_BFLOAT16));
}
END_TEST

#ifdef MX_USE_CUDA
/* Inputs of every dtype: float types the rounding inputs (plus float64
 * values beyond float32), integer types random bits. */
static void *source_values(mx_dtype t, int n, const float *f)
{
    size_t size = mx_dtype_size(t);
    void *p = malloc(size * (size_t)n);
    uint64_t r = 0x9e3779b97f4a7c15ull ^ (uint64_t)t;
    for (int i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        switch (t) {
        case MX_FLOAT32: ((float *)p)[i] = f[i]; break;
        case MX_FLOAT64: ((double *)p)[i] = i % 7 == 3 ? (double)f[i] * (1.0 + 0x1p-40) : i % 7 == 5 ? (double)f[i] * 1e300 : f[i]; break;
        case MX_FLOAT16: ((uint16_t *)p)[i] = i < 65536 ? (uint16_t)i : (uint16_t)r; break;
        case MX_BFLOAT16: ((uint16_t *)p)[i] = i < 65536 ? (uint16_t)i : (uint16_t)r; break;
        default: memcpy((char *)p + size * (size_t)i, &r, size); break;
        }
    }
    return p;
}

static bool is_nan_elem(const void *p, mx_dtype t, int i)
{
    switch (t) {
    case MX_FLOAT32: return isnan(((const float *)p)[i]);
    case MX_FLOAT64: return isnan(((const double *)p)[i]);
    case MX_FLOAT16: return (((const uint16_t *)p)[i] & 0x7fff) > 0x7c00;
    case MX_BFLOAT16: return (((const uint16_t *)p)[i] & 0x7fff) > 0x7f80;
    default: return false;
    }
}

/* The GPU kernels' element code (dtype_convert.cu, run on the host) gives
 * the CPU's bits for every dtype pair; accumulating, the same values (a
 * NaN's payload aside). */
START_TEST(gpu_element_code_matches_cpu)
{
    const mx_dtype types[] = {MX_FLOAT32, MX_FLOAT64, MX_FLOAT16, MX_BFLOAT16, MX_UINT8, MX_INT32, MX_INT8, MX_INT64};
    const int nt = (int)(sizeof(types) / sizeof(types[0]));
    int n;
    float *f = rounding_inputs(&n);
    void *dst_init[8];
    for (int b = 0; b < nt; b++) dst_init[b] = source_values(types[b], n, f + 17);
    for (int a = 0; a < nt; a++) {
        void *src = source_values(types[a], n, f);
        for (int b = 0; b < nt; b++) {
            size_t bytes = mx_dtype_size(types[b]) * (size_t)(n - 17);
            void *cpu = malloc(bytes), *gpu = malloc(bytes);
            for (int add = 0; add < 2; add++) {
                memcpy(cpu, dst_init[b], bytes);
                memcpy(gpu, dst_init[b], bytes);
                ck_assert_int_eq(mx_dtype_convert("test", cpu, types[b], src, types[a], n - 17, add), MX_OK);
                ck_assert_int_eq(mx_dtype_convert_gpu_emulate(gpu, types[b], src, types[a], n - 17, add), MX_OK);
                if (!add) {
                    if (memcmp(cpu, gpu, bytes) == 0) continue;
                } 
                size_t size = mx_dtype_size(types[b]);
                for (int i = 0; i < n - 17; i++) {
                    const char *c = (const char *)cpu + size * (size_t)i, *g = (const char *)gpu + size * (size_t)i;
                    if (memcmp(c, g, size) == 0 || (add && is_nan_elem(cpu, types[b], i) && is_nan_elem(gpu, types[b], i)))
                        continue;
                    uint64_t cv = 0, gv = 0;
                    memcpy(&cv, c, size), memcpy(&gv, g, size);
                    ck_abort_msg("%s -> %s%s [%d]: GPU code 0x%llx, CPU 0x%llx", mx_dtype_name(types[a]),
                                 mx_dtype_name(types[b]), add ? " (add)" : "", i, (unsigned long long)gv,
                                 (unsigned long long)cv);
                }
            }
            free(cpu), free(gpu);
        }
        free(src);
    }
    for (int b = 0; b < nt; b++) free(dst_init[b]);
    free(f);
}
END_TEST
#endif

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
    const char *vb[] = {"bfloat16"};
    ck_assert_int_eq(mx_op_parse_params(op, k, vb, 1, params), MX_OK);
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
    tcase_add_test(tc, half_helpers_round_to_nearest_even);
    tcase_add_test(tc, half_helpers_every_pattern);
    tcase_add_test(tc, bulk_conversions_give_the_helpers_bits);
    tcase_add_test(tc, cast_half_types_against_reference);
    tcase_add_test(tc, cast_half_types_to_and_from_others);
    tcase_add_test(tc, convert_in_place);
    tcase_add_test(tc, amp_cast_converts_like_cast);
    tcase_add_test(tc, cast_bfloat16_parameter_and_type);
#ifdef MX_USE_CUDA
    tcase_add_test(tc, gpu_element_code_matches_cpu);
#endif
    tcase_add_test(tc, backward_casts_back);
    tcase_add_test(tc, parameters);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
