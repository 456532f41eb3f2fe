/* test_ndarray.c - arrays, imperative ops, laziness, RNG, the allocator. */
#include "base/half.h"
#include "ndarray/ndarray.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static mx_runtime *make_runtime(bool naive, int workers)
{
    mx_engine_config c = mx_engine_config_default();
    c.naive = naive;
    c.cpu_workers = workers;
    mx_runtime *rt = NULL;
    ck_assert_int_eq(mx_runtime_create(&c, &rt), MX_OK);
    return rt;
}

static mx_ndarray *new_array(mx_runtime *rt, mx_shape shape, mx_dtype dtype)
{
    mx_ndarray *a = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, shape, dtype, mx_cpu(), &a), MX_OK);
    return a;
}

static mx_ndarray *array_from(mx_runtime *rt, mx_shape shape, const float *values)
{
    mx_ndarray *a = new_array(rt, shape, MX_FLOAT32);
    ck_assert_int_eq(mx_ndarray_from_host(a, values, mx_ndarray_nbytes(a)), MX_OK);
    return a;
}

static float *read_floats(mx_ndarray *a)
{
    float *out = malloc(mx_ndarray_nbytes(a) + 1);
    ck_assert_int_eq(mx_ndarray_to_host(a, out, mx_ndarray_nbytes(a)), MX_OK);
    return out;
}

START_TEST(shapes_and_dtypes)
{
    mx_shape s = MX_SHAPE(2, 3, 4);
    ck_assert_int_eq(s.ndim, 3);
    ck_assert_int_eq(mx_shape_size(&s), 24);
    char buf[64];
    ck_assert_str_eq(mx_shape_str(&s, buf, sizeof(buf)), "(2,3,4)");
    mx_shape scalar = mx_shape_make(0, NULL);
    ck_assert_int_eq(mx_shape_size(&scalar), 1);
    ck_assert_int_eq(mx_dtype_size(MX_FLOAT32), 4);
    ck_assert_int_eq(mx_dtype_size(MX_INT64), 8);
    ck_assert_int_eq(mx_dtype_size(MX_UINT8), 1);
    ck_assert_str_eq(mx_dtype_name(MX_INT32), "int32");
    ck_assert(mx_dtype_valid(MX_BFLOAT16));
    ck_assert_int_eq(mx_dtype_size(MX_BFLOAT16), 2);
    ck_assert_str_eq(mx_dtype_name(MX_BFLOAT16), "bfloat16");
    ck_assert(!mx_dtype_valid(7) && !mx_dtype_valid(11) && !mx_dtype_valid(13) && !mx_dtype_valid(-1));

    mx_runtime *rt = make_runtime(false, 2);
    mx_ndarray *a = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, -1), MX_FLOAT32, mx_cpu(), &a), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "negative"));
    mx_shape too_many = {.ndim = 9};
    ck_assert_int_eq(mx_ndarray_create(rt, too_many, MX_FLOAT32, mx_cpu(), &a), MX_ERR_INVALID);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(1 << 30, 1 << 30, 1 << 30), MX_FLOAT32, mx_cpu(), &a),
                     MX_ERR_INVALID);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2), (mx_dtype)42, mx_cpu(), &a), MX_ERR_INVALID);
    ck_assert_ptr_null(a);
    /* A GPU this build or machine cannot serve is refused, not crashed on. */
    mx_status gs = mx_ndarray_create(rt, MX_SHAPE(4), MX_FLOAT32, mx_gpu(0), &a);
    if (gs == MX_OK) {
        /* On a GPU machine: round trip through the device. */
        float in[4] = {1, 2, 3, 4}, out[4] = {0};
        ck_assert_int_eq(mx_ndarray_from_host(a, in, sizeof(in)), MX_OK);
        mx_ndarray *back = new_array(rt, MX_SHAPE(4), MX_FLOAT32);
        ck_assert_int_eq(mx_nd_copy(back, a), MX_OK);
        ck_assert_int_eq(mx_ndarray_to_host(back, out, sizeof(out)), MX_OK);
        for (int i = 0; i < 4; i++) ck_assert_float_eq(out[i], in[i]);
        mx_ndarray_free(back);
        mx_ndarray_free(a);
    } else {
        ck_assert_int_eq(gs, MX_ERR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "GPU"));
    }
    mx_runtime_free(rt);
}
END_TEST

START_TEST(fill_every_dtype)
{
    mx_runtime *rt = make_runtime(false, 2);
    const mx_dtype types[] = {MX_FLOAT32, MX_FLOAT64, MX_UINT8, MX_INT32, MX_INT8, MX_INT64, MX_FLOAT16, MX_BFLOAT16};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        mx_ndarray *a = new_array(rt, MX_SHAPE(3, 5), types[t]);
        ck_assert_int_eq(mx_nd_fill(a, 7), MX_OK);
        mx_ndarray *f = new_array(rt, MX_SHAPE(3, 5), MX_FLOAT32);
        ck_assert_int_eq(mx_nd_copy(f, a), MX_OK); /* cast to float32 */
        float *v = read_floats(f);
        for (int i = 0; i < 15; i++) ck_assert_float_eq(v[i], 7.0f);
        free(v);
        mx_ndarray_free(f);
        mx_ndarray_free(a);
    }
    mx_runtime_free(rt);
}
END_TEST

START_TEST(cast_copies_convert_values)
{
    mx_runtime *rt = make_runtime(false, 2);
    uint8_t pixels[6] = {0, 1, 127, 128, 254, 255};
    mx_ndarray *u8 = new_array(rt, MX_SHAPE(2, 3), MX_UINT8);
    ck_assert_int_eq(mx_ndarray_from_host(u8, pixels, sizeof(pixels)), MX_OK);
    mx_ndarray *f = new_array(rt, MX_SHAPE(6), MX_FLOAT32); /* same size, other shape */
    ck_assert_int_eq(mx_nd_copy(f, u8), MX_OK);
    float *v = read_floats(f);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(v[i], (float)pixels[i]);
    free(v);
    int32_t labels[6];
    mx_ndarray *i32 = new_array(rt, MX_SHAPE(6), MX_INT32);
    ck_assert_int_eq(mx_nd_binary_scalar(MX_OP_ADD, f, f, 0.75, false), MX_OK);
    ck_assert_int_eq(mx_nd_copy(i32, f), MX_OK); /* truncates toward zero, as C */
    ck_assert_int_eq(mx_ndarray_to_host(i32, labels, sizeof(labels)), MX_OK);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(labels[i], pixels[i]);
    mx_ndarray *wrong = new_array(rt, MX_SHAPE(5), MX_FLOAT32);
    ck_assert_int_eq(mx_nd_copy(wrong, u8), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "(5)"));
    mx_ndarray_free(wrong);
    mx_ndarray_free(i32);
    mx_ndarray_free(f);
    mx_ndarray_free(u8);
    mx_runtime_free(rt);
}
END_TEST

/* Copies to and from float16 / bfloat16: rounding to nearest even at ties,
 * overflow to inf (65520), subnormals, -0, inf and NaN, hand-worked; every
 * pattern of both formats back unchanged through float32 and float64;
 * integers saturating; fills of any value. */
START_TEST(half_copies_convert_values)
{
    mx_runtime *rt = make_runtime(false, 2);
    enum { N = 14 };
    const uint32_t fbits[N] = {0x3f800000, 0x477fef00, 0x477ff000, 0xc77ff000, 0x33000000, 0x33c00000, 0x387fe000,
                               0x3f801000, 0x3f803000, 0x3f808000, 0x3f818000, 0x80000000, 0x7f800000, 0xffc00000};
    const uint16_t want_h[N] = {0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x0000, 0x0002, 0x0400,
                                0x3c00, 0x3c02, 0x3c04, 0x3c0c, 0x8000, 0x7c00, 0xfe00};
    const uint16_t want_b[N] = {0x3f80, 0x4780, 0x4780, 0xc780, 0x3300, 0x33c0, 0x3880,
                                0x3f80, 0x3f80, 0x3f80, 0x3f82, 0x8000, 0x7f80, 0xffc0};
    float f[N];
    memcpy(f, fbits, sizeof(f));
    mx_ndarray *src = array_from(rt, MX_SHAPE(2, 7), f);
    mx_ndarray *h = new_array(rt, MX_SHAPE(N), MX_FLOAT16), *b = new_array(rt, MX_SHAPE(N), MX_BFLOAT16);
    ck_assert_int_eq(mx_nd_copy(h, src), MX_OK);
    ck_assert_int_eq(mx_nd_copy(b, src), MX_OK);
    uint16_t got[N];
    ck_assert_int_eq(mx_ndarray_to_host(h, got, sizeof(got)), MX_OK);
    for (int i = 0; i < N; i++) ck_assert_msg(got[i] == want_h[i], "half(0x%08x) = 0x%04x", fbits[i], got[i]);
    ck_assert_int_eq(mx_ndarray_to_host(b, got, sizeof(got)), MX_OK);
    for (int i = 0; i < N; i++) ck_assert_msg(got[i] == want_b[i], "bfloat16(0x%08x) = 0x%04x", fbits[i], got[i]);
    /* float16 -> bfloat16 -> float16 of these: through float32 */
    mx_ndarray *hb = new_array(rt, MX_SHAPE(N), MX_BFLOAT16);
    ck_assert_int_eq(mx_nd_copy(hb, h), MX_OK);
    ck_assert_int_eq(mx_ndarray_to_host(hb, got, sizeof(got)), MX_OK);
    for (int i = 0; i < N; i++)
        ck_assert_msg(got[i] == mx_float_to_bfloat16(mx_half_to_float(want_h[i])), "bfloat16(half 0x%04x) = 0x%04x",
                      want_h[i], got[i]);
    mx_ndarray_free(hb), mx_ndarray_free(src), mx_ndarray_free(h), mx_ndarray_free(b);

    /* every pattern through float32 and float64 and back */
    static uint16_t all[65536], again[65536];
    static float wide[65536];
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    const mx_dtype halves[2] = {MX_FLOAT16, MX_BFLOAT16}, wides[2] = {MX_FLOAT32, MX_FLOAT64};
    for (int t = 0; t < 2; t++)
        for (int w = 0; w < 2; w++) {
            uint16_t exp = t ? 0x7f80 : 0x7c00;
            mx_ndarray *a = new_array(rt, MX_SHAPE(256, 256), halves[t]);
            mx_ndarray *x = new_array(rt, MX_SHAPE(65536), wides[w]);
            mx_ndarray *back = new_array(rt, MX_SHAPE(65536), halves[t]);
            ck_assert_int_eq(mx_ndarray_from_host(a, all, sizeof(all)), MX_OK);
            ck_assert_int_eq(mx_nd_copy(x, a), MX_OK);
            ck_assert_int_eq(mx_nd_copy(back, x), MX_OK);
            ck_assert_int_eq(mx_ndarray_to_host(back, again, sizeof(again)), MX_OK);
            if (w == 0) {
                ck_assert_int_eq(mx_ndarray_to_host(x, wide, sizeof(wide)), MX_OK);
                ck_assert(wide[0x3c00] == 1.0f || t == 1);
                ck_assert(t == 0 || wide[0x3f80] == 1.0f);
                ck_assert(t == 1 || (wide[0x0001] == 0x1p-24f && wide[0x7bff] == 65504.0f && signbit(wide[0x8000])));
            }
            for (int i = 0; i < 65536; i++) {
                bool nan = (i & exp) == exp && (i & ~(exp | 0x8000));
                if (nan) ck_assert_msg((again[i] & exp) == exp && (again[i] & ~(exp | 0x8000)), "NaN 0x%04x", i);
                else ck_assert_msg(again[i] == i, "%s 0x%04x -> %s -> 0x%04x", mx_dtype_name(halves[t]), i,
                                   mx_dtype_name(wides[w]), again[i]);
            }
            mx_ndarray_free(a), mx_ndarray_free(x), mx_ndarray_free(back);
        }

    /* to integers: truncated and saturated, NaN 0 */
    const uint16_t hv[5] = {0x7c00, 0xfc00, 0x7e00, 0xc0b0 /* -2.34375 */, 0x5bf8 /* 255 */};
    mx_ndarray *h5 = new_array(rt, MX_SHAPE(5), MX_FLOAT16), *i8 = new_array(rt, MX_SHAPE(5), MX_INT8);
    mx_ndarray *u8 = new_array(rt, MX_SHAPE(5), MX_UINT8);
    ck_assert_int_eq(mx_ndarray_from_host(h5, hv, sizeof(hv)), MX_OK);
    ck_assert_int_eq(mx_nd_copy(i8, h5), MX_OK);
    ck_assert_int_eq(mx_nd_copy(u8, h5), MX_OK);
    int8_t gi[5];
    uint8_t gu[5];
    ck_assert_int_eq(mx_ndarray_to_host(i8, gi, sizeof(gi)), MX_OK);
    ck_assert_int_eq(mx_ndarray_to_host(u8, gu, sizeof(gu)), MX_OK);
    ck_assert(gi[0] == 127 && gi[1] == -128 && gi[2] == 0 && gi[3] == -2 && gi[4] == 127);
    ck_assert(gu[0] == 255 && gu[1] == 0 && gu[2] == 0 && gu[3] == 0 && gu[4] == 255);

    /* fills: any value, rounded like a copy */
    const double fills[4] = {1.5, 65520.0, 0x1p-25 * 3.0, -1e-9};
    const uint16_t fill_h[4] = {0x3e00, 0x7c00, 0x0002, 0x8000}, fill_b[4] = {0x3fc0, 0x4780, 0x33c0, 0xb089};
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(mx_nd_fill(h5, fills[k]), MX_OK);
        ck_assert_int_eq(mx_ndarray_to_host(h5, got, 5 * sizeof(uint16_t)), MX_OK);
        for (int i = 0; i < 5; i++) ck_assert_msg(got[i] == fill_h[k], "fill %g: 0x%04x", fills[k], got[i]);
        mx_ndarray *b5 = new_array(rt, MX_SHAPE(5), MX_BFLOAT16);
        ck_assert_int_eq(mx_nd_fill(b5, fills[k]), MX_OK);
        ck_assert_int_eq(mx_ndarray_to_host(b5, got, 5 * sizeof(uint16_t)), MX_OK);
        for (int i = 0; i < 5; i++) ck_assert_msg(got[i] == fill_b[k], "bfloat16 fill %g: 0x%04x", fills[k], got[i]);
        mx_ndarray_free(b5);
    }
    ck_assert_int_eq(mx_nd_fill(i8, 300), MX_OK); /* saturates */
    ck_assert_int_eq(mx_ndarray_to_host(i8, gi, sizeof(gi)), MX_OK);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(gi[i], 127);
    /* a conversion between views of one storage block is refused */
    mx_ndarray *view;
    ck_assert_int_eq(mx_ndarray_view(u8, 0, MX_SHAPE(5), MX_INT8, &view), MX_OK);
    ck_assert_int_eq(mx_nd_copy(view, h5), MX_OK); /* other storage: fine */
    mx_ndarray_free(view);
    ck_assert_int_eq(mx_ndarray_view(h5, 0, MX_SHAPE(5), MX_UINT8, &view), MX_OK);
    ck_assert_int_eq(mx_nd_copy(view, h5), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "copy: dtype conversion between views of one array"));
    mx_ndarray_free(view);
    /* page-locked host arrays convert on the host too */
    mx_ndarray *pf, *ph;
    if (mx_ndarray_create(rt, MX_SHAPE(5), MX_FLOAT32, mx_cpu_pinned(), &pf) == MX_OK) {
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(5), MX_FLOAT16, mx_cpu_pinned(), &ph), MX_OK);
        ck_assert_int_eq(mx_nd_fill(pf, 65519.0), MX_OK);
        ck_assert_int_eq(mx_nd_copy(ph, pf), MX_OK);
        ck_assert_int_eq(mx_nd_copy(h5, ph), MX_OK);
        ck_assert_int_eq(mx_ndarray_to_host(h5, got, 5 * sizeof(uint16_t)), MX_OK);
        for (int i = 0; i < 5; i++) ck_assert_int_eq(got[i], 0x7bff);
        mx_ndarray_free(pf), mx_ndarray_free(ph);
    }
    mx_ndarray_free(h5), mx_ndarray_free(i8), mx_ndarray_free(u8);
    mx_runtime_free(rt);
}
END_TEST

static double apply_ref(mx_binary_op k, double a, double b)
{
    switch (k) {
    case MX_OP_ADD: return a + b;
    case MX_OP_SUB: return a - b;
    case MX_OP_MUL: return a * b;
    case MX_OP_DIV: return a / b;
    }
    return NAN;
}

START_TEST(elementwise_matches_reference)
{
    mx_runtime *rt = make_runtime(false, 2);
    enum { N = 37 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i - 18) * 0.37f;
        y[i] = (float)(i + 1) * 0.11f;
    }
    mx_ndarray *a = array_from(rt, MX_SHAPE(N), x), *b = array_from(rt, MX_SHAPE(N), y);
    mx_ndarray *o = new_array(rt, MX_SHAPE(N), MX_FLOAT32);
    for (int k = MX_OP_ADD; k <= MX_OP_DIV; k++) {
        ck_assert_int_eq(mx_nd_binary((mx_binary_op)k, o, a, b), MX_OK);
        float *v = read_floats(o);
        for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], (float)apply_ref((mx_binary_op)k, x[i], y[i]));
        free(v);
        for (int first = 0; first <= 1; first++) {
            ck_assert_int_eq(mx_nd_binary_scalar((mx_binary_op)k, o, b, 2.5, first), MX_OK);
            v = read_floats(o);
            for (int i = 0; i < N; i++) {
                float want = first ? (float)apply_ref((mx_binary_op)k, 2.5f, y[i])
                                   : (float)apply_ref((mx_binary_op)k, y[i], 2.5f);
                ck_assert_float_eq(v[i], want);
            }
            free(v);
        }
    }
    mx_ndarray *c = new_array(rt, MX_SHAPE(N + 1), MX_FLOAT32);
    ck_assert_int_eq(mx_nd_add(o, a, c), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "(37) and (38)"));
    mx_ndarray *ints = new_array(rt, MX_SHAPE(N), MX_INT32);
    ck_assert_int_eq(mx_nd_add(ints, ints, ints), MX_ERR_UNSUPPORTED);
    mx_ndarray_free(ints);
    mx_ndarray_free(c);
    mx_ndarray_free(o);
    mx_ndarray_free(b);
    mx_ndarray_free(a);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(dot_matches_naive_product)
{
    mx_runtime *rt = make_runtime(false, 2);
    mx_rng *rng;
    ck_assert_int_eq(mx_rng_create(rt, 5, &rng), MX_OK);
    const int M = 7, K = 13, N = 5;
    for (int ta = 0; ta <= 1; ta++)
        for (int tb = 0; tb <= 1; tb++) {
            mx_ndarray *a = new_array(rt, ta ? MX_SHAPE(K, M) : MX_SHAPE(M, K), MX_FLOAT32);
            mx_ndarray *b = new_array(rt, tb ? MX_SHAPE(N, K) : MX_SHAPE(K, N), MX_FLOAT32);
            mx_ndarray *o = new_array(rt, MX_SHAPE(M, N), MX_FLOAT32);
            ck_assert_int_eq(mx_nd_random_normal(rng, a, 0, 1), MX_OK);
            ck_assert_int_eq(mx_nd_random_normal(rng, b, 0, 1), MX_OK);
            ck_assert_int_eq(mx_nd_dot(o, a, b, ta, tb), MX_OK);
            float *va = read_floats(a), *vb = read_floats(b), *vo = read_floats(o);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double ref = 0;
                    for (int k = 0; k < K; k++)
                        ref += (double)(ta ? va[k * M + i] : va[i * K + k]) * (tb ? vb[j * K + k] : vb[k * N + j]);
                    ck_assert_double_eq_tol(vo[i * N + j], ref, 1e-4 * (1 + fabs(ref)));
                }
            free(va);
            free(vb);
            free(vo);
            ck_assert_int_eq(mx_nd_dot(o, a, a, ta, tb), MX_ERR_INVALID); /* K x K mismatch */
            mx_ndarray_free(a);
            mx_ndarray_free(b);
            mx_ndarray_free(o);
        }
    mx_ndarray *sq = new_array(rt, MX_SHAPE(3, 3), MX_FLOAT32);
    ck_assert_int_eq(mx_nd_dot(sq, sq, sq, false, false), MX_ERR_INVALID); /* aliasing */
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "share memory"));
    mx_ndarray_free(sq);
    mx_rng_free(rng);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(slices_share_storage)
{
    mx_runtime *rt = make_runtime(false, 2);
    mx_ndarray *a = new_array(rt, MX_SHAPE(5, 3), MX_FLOAT32);
    ck_assert_int_eq(mx_nd_fill(a, 1), MX_OK);
    mx_ndarray *rows = NULL;
    ck_assert_int_eq(mx_ndarray_slice(a, 1, 3, &rows), MX_OK);
    ck_assert_int_eq(mx_ndarray_shape(rows)->dims[0], 2);
    ck_assert_int_eq(mx_ndarray_shape(rows)->dims[1], 3);
    ck_assert_int_eq(mx_nd_fill(rows, 9), MX_OK);
    mx_ndarray_free(a); /* the view keeps the storage alive */
    ck_assert_int_eq(mx_ndarray_slice(rows, 0, 3, &a), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "[0, 3)"));
    mx_ndarray *flat = NULL;
    ck_assert_int_eq(mx_ndarray_reshape(rows, MX_SHAPE(6), &flat), MX_OK);
    float *v = read_floats(flat);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(v[i], 9.0f);
    free(v);
    ck_assert_int_eq(mx_ndarray_reshape(rows, MX_SHAPE(7), &a), MX_ERR_INVALID);
    mx_ndarray_free(flat);
    mx_ndarray_free(rows);
    mx_runtime_free(rt);

    rt = make_runtime(false, 2);
    a = new_array(rt, MX_SHAPE(4, 2), MX_FLOAT32);
    ck_assert_int_eq(mx_nd_fill(a, 0), MX_OK);
    ck_assert_int_eq(mx_ndarray_slice(a, 2, 4, &rows), MX_OK);
    ck_assert_int_eq(mx_nd_fill(rows, 3), MX_OK);
    v = read_floats(a);
    for (int i = 0; i < 8; i++) ck_assert_float_eq(v[i], i < 4 ? 0.0f : 3.0f);
    free(v);
    mx_ndarray_free(rows);

    /* Typed views of raw bytes (the executor's planned buffers): the second
     * row's 8 bytes as 4 float16s, the same storage; past the end refused. */
    mx_ndarray *half = NULL;
    ck_assert_int_eq(mx_ndarray_view(a, 8, MX_SHAPE(2, 2), MX_FLOAT16, &half), MX_OK);
    ck_assert_int_eq(mx_ndarray_dtype(half), MX_FLOAT16);
    ck_assert_int_eq(mx_nd_fill(half, 1.5), MX_OK);
    uint16_t bits[8];
    ck_assert_int_eq(mx_ndarray_to_host(half, bits, sizeof(uint16_t) * 4), MX_OK);
    for (int i = 0; i < 4; i++) ck_assert_uint_eq(bits[i], 0x3e00); /* 1.5 */
    v = read_floats(a);
    ck_assert_float_eq(v[0], 0.0f);
    ck_assert(v[2] != 0.0f && v[4] == 3.0f); /* row 1 rewritten, row 2 untouched */
    free(v);
    mx_ndarray_free(half);
    ck_assert_int_eq(mx_ndarray_view(a, 30, MX_SHAPE(2), MX_FLOAT32, &half), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "does not fit in 32 bytes"), "%s", mx_last_error());
    ck_assert_ptr_null(half);
    ck_assert_int_eq(mx_ndarray_view(a, 40, MX_SHAPE(1), MX_FLOAT16, &half), MX_ERR_INVALID);
    ck_assert_int_eq(mx_ndarray_view(a, 0, MX_SHAPE(2), (mx_dtype)9, &half), MX_ERR_INVALID);
    mx_ndarray_free(a);
    mx_runtime_free(rt);
}
END_TEST

/* An op that holds the array's variable until the test opens the gate, so
 * everything pushed behind it provably waits (laziness). */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
} gate;

static mx_status gate_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    gate *g = payload;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return MX_OK;
}

/* The paper's w -= eta * g loop for a quadratic: g = w - target. */
START_TEST(lazy_update_loop_matches_eager)
{
    enum { N = 1000, STEPS = 60 };
    const float eta = 0.05f;
    float w0[N], target[N];
    for (int i = 0; i < N; i++) {
        w0[i] = sinf((float)i);
        target[i] = cosf((float)i * 0.5f);
    }
    /* Eager reference: the same float operations in the same order. */
    float w_ref[N];
    memcpy(w_ref, w0, sizeof(w_ref));
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < N; i++) {
            float g = w_ref[i] - target[i];
            float step = g * eta;
            w_ref[i] = w_ref[i] - step;
        }

    for (int naive = 0; naive <= 1; naive++) {
        mx_runtime *rt = make_runtime(naive, 2);
        mx_ndarray *w = array_from(rt, MX_SHAPE(N), w0), *t = array_from(rt, MX_SHAPE(N), target);
        mx_ndarray *g = new_array(rt, MX_SHAPE(N), MX_FLOAT32);
        gate gt = {.open = naive};
        pthread_mutex_init(&gt.mu, NULL);
        pthread_cond_init(&gt.cv, NULL);
        mx_engine_var *wv = mx_ndarray_var(w);
        mx_engine_op hold = {.fn = gate_fn, .payload = &gt, .writes = &wv, .n_writes = 1, .ctx = mx_cpu()};
        ck_assert_int_eq(mx_engine_push(mx_runtime_engine(rt), &hold), MX_OK);
        for (int s = 0; s < STEPS; s++) {
            ck_assert_int_eq(mx_nd_sub(g, w, t), MX_OK);
            ck_assert_int_eq(mx_nd_binary_scalar(MX_OP_MUL, g, g, eta, false), MX_OK);
            ck_assert_int_eq(mx_nd_sub(w, w, g), MX_OK);
        }
        if (!naive) {
            /* Nothing ran yet: every push returned while w was held. */
            ck_assert_int_ge(mx_engine_pending(mx_runtime_engine(rt)), 3 * STEPS + 1);
            pthread_mutex_lock(&gt.mu);
            gt.open = true;
            pthread_cond_broadcast(&gt.cv);
            pthread_mutex_unlock(&gt.mu);
        }
        float *v = read_floats(w);
        for (int i = 0; i < N; i++) ck_assert_msg(v[i] == w_ref[i], "w[%d] %g != %g", i, v[i], w_ref[i]);
        free(v);
        mx_ndarray_free(g);
        mx_ndarray_free(t);
        mx_ndarray_free(w);
        mx_runtime_free(rt);
    }
}
END_TEST

static void draw_sequence(bool naive, int workers, uint64_t seed, float *out, int n_arrays, int n)
{
    mx_runtime *rt = make_runtime(naive, workers);
    mx_rng *rng;
    ck_assert_int_eq(mx_rng_create(rt, seed, &rng), MX_OK);
    mx_ndarray *arrays[8];
    for (int k = 0; k < n_arrays; k++) {
        arrays[k] = new_array(rt, MX_SHAPE(n), MX_FLOAT32);
        if (k % 2) ck_assert_int_eq(mx_nd_random_normal(rng, arrays[k], 1, 2), MX_OK);
        else ck_assert_int_eq(mx_nd_random_uniform(rng, arrays[k], -1, 3), MX_OK);
    }
    for (int k = 0; k < n_arrays; k++) {
        ck_assert_int_eq(mx_ndarray_to_host(arrays[k], out + (size_t)k * n, (size_t)n * sizeof(float)), MX_OK);
        mx_ndarray_free(arrays[k]);
    }
    mx_rng_free(rng);
    mx_runtime_free(rt);
}

START_TEST(random_is_reproducible_and_distributed)
{
    enum { ARRAYS = 6, N = 20001 };
    float *a = malloc(sizeof(float) * ARRAYS * N), *b = malloc(sizeof(float) * ARRAYS * N);
    draw_sequence(false, 4, 1234, a, ARRAYS, N);
    draw_sequence(true, 1, 1234, b, ARRAYS, N);
    ck_assert_int_eq(memcmp(a, b, sizeof(float) * ARRAYS * N), 0);
    draw_sequence(false, 2, 1235, b, ARRAYS, N);
    ck_assert_int_ne(memcmp(a, b, sizeof(float) * ARRAYS * N), 0);
    /* Moments: U(-1,3) has mean 1, var 4/3; N(1, 2^2) mean 1, var 4. */
    for (int k = 0; k < 2; k++) {
        double sum = 0, sq = 0, lo = 1e9, hi = -1e9;
        for (int i = 0; i < N; i++) {
            double x = a[k * N + i];
            sum += x;
            sq += x * x;
            lo = fmin(lo, x);
            hi = fmax(hi, x);
        }
        double mean = sum / N, var = sq / N - mean * mean;
        ck_assert_double_eq_tol(mean, 1.0, 0.05);
        ck_assert_double_eq_tol(var, k == 0 ? 4.0 / 3.0 : 4.0, k == 0 ? 0.05 : 0.15);
        if (k == 0) {
            ck_assert(lo >= -1.0 && hi < 3.0);
        }
    }
    free(a);
    free(b);
}
END_TEST

START_TEST(reseed_restarts_the_sequence)
{
    mx_runtime *rt = make_runtime(false, 2);
    mx_rng *rng;
    ck_assert_int_eq(mx_rng_create(rt, 99, &rng), MX_OK);
    mx_ndarray *x = new_array(rt, MX_SHAPE(64), MX_FLOAT32), *y = new_array(rt, MX_SHAPE(64), MX_FLOAT32);
    ck_assert_int_eq(mx_nd_random_uniform(rng, x, 0, 1), MX_OK);
    ck_assert_int_eq(mx_rng_seed(rng, 99), MX_OK);
    ck_assert_int_eq(mx_nd_random_uniform(rng, y, 0, 1), MX_OK);
    float *vx = read_floats(x), *vy = read_floats(y);
    ck_assert_int_eq(memcmp(vx, vy, 64 * sizeof(float)), 0);
    free(vx);
    free(vy);
    /* Saving and restoring the state replays the same numbers. */
    uint64_t state[4];
    ck_assert_int_eq(mx_engine_wait_var(mx_runtime_engine(rt), mx_rng_var(rng)), MX_OK);
    mx_rng_get_state(rng, state);
    ck_assert_int_eq(mx_nd_random_uniform(rng, x, 0, 1), MX_OK);
    ck_assert_int_eq(mx_rng_set_state(rng, state), MX_OK);
    ck_assert_int_eq(mx_nd_random_uniform(rng, y, 0, 1), MX_OK);
    vx = read_floats(x);
    vy = read_floats(y);
    ck_assert_int_eq(memcmp(vx, vy, 64 * sizeof(float)), 0);
    free(vx);
    free(vy);
    uint64_t zero[4] = {0, 0, 0, 0};
    ck_assert_int_eq(mx_rng_set_state(rng, zero), MX_ERR_INVALID);
    ck_assert_int_eq(mx_nd_random_uniform(rng, x, 2, 1), MX_ERR_INVALID);
    ck_assert_int_eq(mx_nd_random_normal(rng, x, 0, -1), MX_ERR_INVALID);
    mx_ndarray_free(x);
    mx_ndarray_free(y);
    mx_rng_free(rng);
    mx_runtime_free(rt);
}
END_TEST

static mx_status failing_kernel(void *payload, const mx_exec_ctx *exec)
{
    (void)payload;
    (void)exec;
    return MX_ERROR(MX_ERR_RUNTIME, "kernel exploded");
}

START_TEST(worker_errors_surface_on_the_array)
{
    mx_runtime *rt = make_runtime(false, 2);
    mx_ndarray *a = new_array(rt, MX_SHAPE(8), MX_FLOAT32), *b = new_array(rt, MX_SHAPE(8), MX_FLOAT32);
    mx_ndarray *c = new_array(rt, MX_SHAPE(8), MX_FLOAT32);
    ck_assert_int_eq(mx_nd_fill(b, 1), MX_OK);
    mx_engine_var *av = mx_ndarray_var(a);
    mx_engine_op bad = {.fn = failing_kernel, .writes = &av, .n_writes = 1, .ctx = mx_cpu(), .name = "mykernel"};
    ck_assert_int_eq(mx_engine_push(mx_runtime_engine(rt), &bad), MX_OK);
    ck_assert_int_eq(mx_nd_add(c, a, b), MX_OK); /* push succeeds: the failure is not known yet */
    float out[8];
    ck_assert_int_eq(mx_ndarray_to_host(c, out, sizeof(out)), MX_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "kernel exploded"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "mykernel"));
    ck_assert_int_eq(mx_ndarray_to_host(b, out, sizeof(out)), MX_OK); /* unaffected */
    ck_assert_float_eq(out[3], 1.0f);
    /* Rewriting the array heals it. */
    ck_assert_int_eq(mx_nd_fill(a, 2), MX_OK);
    ck_assert_int_eq(mx_nd_add(c, a, b), MX_OK);
    ck_assert_int_eq(mx_ndarray_to_host(c, out, sizeof(out)), MX_OK);
    ck_assert_float_eq(out[0], 3.0f);
    ck_assert_int_eq(mx_ndarray_to_host(c, out, 4), MX_ERR_INVALID);
    mx_ndarray_free(a);
    mx_ndarray_free(b);
    mx_ndarray_free(c);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(pool_reuses_freed_blocks)
{
    mx_runtime *rt = make_runtime(false, 2);
    for (int i = 0; i < 100; i++) {
        mx_ndarray *a = new_array(rt, MX_SHAPE(1000, 3), MX_FLOAT32);
        ck_assert_int_eq(mx_nd_fill(a, i), MX_OK);
        mx_ndarray_free(a); /* freed while the fill may still be pending */
        ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(rt)), MX_OK);
    }
    mx_storage_stats st;
    ck_assert_int_eq(mx_runtime_storage_stats(rt, mx_cpu(), &st), MX_OK);
    ck_assert_int_eq(st.allocations, 100);
    ck_assert_int_ge(st.reuses, 99);
    ck_assert_int_eq(st.bytes_in_use, 0);
    ck_assert_int_eq(st.bytes_peak, 12288); /* 12000 rounded up to 3 pages */
    ck_assert_int_eq(st.bytes_cached, 12288);
    mx_runtime_release_cached(rt);
    ck_assert_int_eq(mx_runtime_storage_stats(rt, mx_cpu(), &st), MX_OK);
    ck_assert_int_eq(st.bytes_cached, 0);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(many_arrays_many_ops_threaded)
{
    /* Independent chains on several arrays through a 4-worker engine. */
    mx_runtime *rt = make_runtime(false, 4);
    enum { ARRAYS = 16, N = 257, STEPS = 40 };
    mx_ndarray *x[ARRAYS];
    for (int k = 0; k < ARRAYS; k++) {
        x[k] = new_array(rt, MX_SHAPE(N), MX_FLOAT32);
        ck_assert_int_eq(mx_nd_fill(x[k], k), MX_OK);
    }
    for (int s = 0; s < STEPS; s++)
        for (int k = 0; k < ARRAYS; k++) {
            mx_ndarray *next = x[(k + 1) % ARRAYS];
            ck_assert_int_eq(mx_nd_binary_scalar(MX_OP_MUL, x[k], x[k], 0.5, false), MX_OK);
            ck_assert_int_eq(mx_nd_add(x[k], x[k], next), MX_OK);
        }
    /* Same recurrence on scalars. */
    double ref[ARRAYS];
    for (int k = 0; k < ARRAYS; k++) ref[k] = k;
    for (int s = 0; s < STEPS; s++)
        for (int k = 0; k < ARRAYS; k++) ref[k] = (double)((float)((float)ref[k] * 0.5f) + (float)ref[(k + 1) % ARRAYS]);
    for (int k = 0; k < ARRAYS; k++) {
        float *v = read_floats(x[k]);
        for (int i = 0; i < N; i++) ck_assert_float_eq(v[i], (float)ref[k]);
        free(v);
        mx_ndarray_free(x[k]);
    }
    mx_runtime_free(rt);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ndarray");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, shapes_and_dtypes);
    tcase_add_test(tc, fill_every_dtype);
    tcase_add_test(tc, cast_copies_convert_values);
    tcase_add_test(tc, half_copies_convert_values);
    tcase_add_test(tc, elementwise_matches_reference);
    tcase_add_test(tc, dot_matches_naive_product);
    tcase_add_test(tc, slices_share_storage);
    tcase_add_test(tc, lazy_update_loop_matches_eager);
    tcase_add_test(tc, random_is_reproducible_and_distributed);
    tcase_add_test(tc, reseed_restarts_the_sequence);
    tcase_add_test(tc, worker_errors_surface_on_the_array);
    tcase_add_test(tc, pool_reuses_freed_blocks);
    tcase_add_test(tc, many_arrays_many_ops_threaded);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
