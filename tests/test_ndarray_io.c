/*
 * test_ndarray_io.c - MXNet NDArray list files (.params): writer and reader
 * checked against hand-built bytes from the spec (mxnet-formats.md 5), the
 * real MXNet-written fixtures in ../shared/fixtures/mxnet, truncation and
 * corruption of valid files, file-system failures, and (when
 * MX_INTEROP_DIR is set, see scripts/interop/mxnet-params.sh) files written
 * and read by MXNet 1.9.1 itself.
 *
 * Fixtures are found under $MX_SHARED_DIR, else ../shared (tests run from
 * the repository root with the shared folder beside the repository).
 */
#include "ndarray/ndarray.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static mx_runtime *rt;

static void setup(void) { ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK); }

static void teardown(void)
{
    mx_runtime_free(rt);
    rt = NULL;
}

/* ---------------------------------------------------------------- helpers */

/* A growable byte buffer for building files by hand, little-endian. */
typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes;

static void put(bytes *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_i32(bytes *b, int32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_i64(bytes *b, int64_t v) { put(b, &v, 8); }
static void put_name(bytes *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void put_list_header(bytes *b, uint64_t n)
{
    put_u64(b, 0x112);
    put_u64(b, 0);
    put_u64(b, n);
}
/* A dense V2 array header: magic, stype, ndim, dims, cpu(0), dtype. */
static void put_v2_head(bytes *b, int ndim, const int64_t *dims, int32_t flag)
{
    put_u32(b, 0xF993FAC9u);
    put_i32(b, 0);
    put_i32(b, ndim);
    for (int i = 0; i < ndim; i++) put_i64(b, dims[i]);
    put_i32(b, 1);
    put_i32(b, 0);
    put_i32(b, flag);
}

static char *shared_path(const char *rel)
{
    const char *dir = getenv("MX_SHARED_DIR");
    if (!dir || !*dir) dir = "../shared";
    static char buf[4096];
    snprintf(buf, sizeof(buf), "%s/%s", dir, rel);
    return buf;
}

/* Whole file into a malloc'ed buffer; fails the test if it cannot. */
static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "cannot open %s: %s (set MX_SHARED_DIR?)", path, strerror(errno));
    ck_assert_int_eq(fseek(fp, 0, SEEK_END), 0);
    long n = ftell(fp);
    ck_assert_int_ge(n, 0);
    ck_assert_int_eq(fseek(fp, 0, SEEK_SET), 0);
    uint8_t *p = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, fp), (size_t)n);
    ck_assert_int_eq(fclose(fp), 0);
    *len = (size_t)n;
    return p;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static mx_ndarray *make_array(mx_shape shape, mx_dtype dtype, const void *data)
{
    mx_ndarray *a = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, shape, dtype, mx_cpu(), &a), MX_OK);
    if (data) ck_assert_int_eq(mx_ndarray_from_host(a, data, mx_ndarray_nbytes(a)), MX_OK);
    return a;
}

/* Copies an array's contents out (caller frees). */
static uint8_t *host_bytes(mx_ndarray *a)
{
    size_t n = mx_ndarray_nbytes(a);
    uint8_t *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(mx_ndarray_to_host(a, p, n), MX_OK);
    return p;
}

static void assert_same_array(mx_ndarray *got, mx_ndarray *want)
{
    char g[128], w[128];
    ck_assert_msg(mx_shape_equal(mx_ndarray_shape(got), mx_ndarray_shape(want)), "shape %s != %s",
                  mx_shape_str(mx_ndarray_shape(got), g, sizeof(g)),
                  mx_shape_str(mx_ndarray_shape(want), w, sizeof(w)));
    ck_assert_int_eq(mx_ndarray_dtype(got), mx_ndarray_dtype(want));
    ck_assert_uint_eq(mx_ndarray_nbytes(got), mx_ndarray_nbytes(want));
    ck_assert(mx_context_equal(mx_ndarray_context(got), mx_cpu()));
    uint8_t *a = host_bytes(got), *b = host_bytes(want);
    ck_assert_int_eq(memcmp(a, b, mx_ndarray_nbytes(got)), 0);
    free(a);
    free(b);
}

static void assert_list_zeroed(const mx_ndarray_list *l)
{
    ck_assert_int_eq(l->count, 0);
    ck_assert_ptr_null(l->arrays);
    ck_assert_ptr_null(l->names);
}

/* Loads a buffer that must be rejected with MX_ERR_FORMAT and a message
 * containing `needle` (NULL: any). */
static void expect_format_error(const bytes *b, const char *needle)
{
    mx_ndarray_list l;
    memset(&l, 0xab, sizeof(l));
    mx_status st = mx_ndarray_load_buffer(rt, b->p, b->len, &l);
    ck_assert_msg(st == MX_ERR_FORMAT, "expected a format error, got %s: %s", mx_status_name(st),
                  mx_last_error());
    assert_list_zeroed(&l);
    if (needle)
        ck_assert_msg(strstr(mx_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"",
                      mx_last_error(), needle);
}

static float f32_from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Seven arrays, one per dtype, various ranks (1-D to 6-D); freed by caller. */
#define MIXED_N 7
static const char *const mixed_names[MIXED_N] = {
    "arg:conv_weight", "arg:fc_bias", "aux:half", "aux:mask", "arg:idx32", "arg:i8", "arg:i64",
};
static void make_mixed(mx_ndarray *arrays[MIXED_N])
{
    float f32[2 * 3 * 2 * 2];
    for (int i = 0; i < 24; i++) f32[i] = (float)i * 0.25f - 3.0f;
    double f64[5] = {1.0 / 3.0, -2.5, 1e300, -0.0, 7.0};
    uint16_t f16[6] = {0x3c00, 0xc100, 0x3555, 0x7bff, 0x0001, 0x8000};
    uint8_t u8[64];
    for (int i = 0; i < 64; i++) u8[i] = (uint8_t)(i * 37 + 11);
    int32_t i32[6] = {0, -1, INT32_MAX, INT32_MIN, 123456, -654321};
    int8_t i8[3] = {-128, 0, 127};
    int64_t i64[2] = {INT64_MIN, (int64_t)1 << 40};
    arrays[0] = make_array(MX_SHAPE(2, 3, 2, 2), MX_FLOAT32, f32);
    arrays[1] = make_array(MX_SHAPE(5), MX_FLOAT64, f64);
    arrays[2] = make_array(MX_SHAPE(2, 3), MX_FLOAT16, f16);
    arrays[3] = make_array(MX_SHAPE(2, 2, 2, 2, 2, 2), MX_UINT8, u8);
    arrays[4] = make_array(MX_SHAPE(1, 6, 1), MX_INT32, i32);
    arrays[5] = make_array(MX_SHAPE(3), MX_INT8, i8);
    arrays[6] = make_array(MX_SHAPE(2), MX_INT64, i64);
}

static void free_arrays(mx_ndarray **arrays, int n)
{
    for (int i = 0; i < n; i++) mx_ndarray_free(arrays[i]);
}

/* The spec's 5.7 worked example (V1), or the same file in V2 layout. */
static bytes spec_example(bool v2)
{
    static const uint8_t head[] = {0x12, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                   2, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t a0[] = {2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
                                 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                 0x00, 0x00, 0x80, 0x3f, 0xd5, 0xff, 0xff, 0x3f};
    static const uint8_t a1[] = {1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                                 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0x6c, 0x26, 0x36};
    static const uint8_t v1_magic[] = {0xc8, 0xfa, 0x93, 0xf9};
    static const uint8_t v2_magic[] = {0xc9, 0xfa, 0x93, 0xf9, 0, 0, 0, 0};
    bytes b = {0};
    put(&b, head, sizeof(head));
    put(&b, v2 ? v2_magic : v1_magic, v2 ? sizeof(v2_magic) : sizeof(v1_magic));
    put(&b, a0, sizeof(a0));
    put(&b, v2 ? v2_magic : v1_magic, v2 ? sizeof(v2_magic) : sizeof(v1_magic));
    put(&b, a1, sizeof(a1));
    put_u64(&b, 2);
    put_name(&b, "arg:fc1_weight");
    put_name(&b, "arg:fc1_bias");
    return b;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A fresh scratch directory under /tmp; each test removes what it made. */
static void make_tmpdir(char *dir, size_t size)
{
    snprintf(dir, size, "/tmp/mx_test_io_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* ---------------------------------------------------------------- round trips */

START_TEST(test_roundtrip_named)
{
    mx_ndarray *arrays[MIXED_N];
    make_mixed(arrays);
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(arrays, mixed_names, MIXED_N, &buf, &len), MX_OK);
    /* Size from the layout: header 24 + per array 24 + 8*ndim + data,
     * names count 8 + per name 8 + len. */
    size_t want = 24 + 8;
    for (int i = 0; i < MIXED_N; i++)
        want += 24 + 8 * (size_t)mx_ndarray_shape(arrays[i])->ndim + mx_ndarray_nbytes(arrays[i]) +
                8 + strlen(mixed_names[i]);
    ck_assert_uint_eq(len, want);

    mx_ndarray_list l;
    ck_assert_int_eq(mx_ndarray_load_buffer(rt, buf, len, &l), MX_OK);
    ck_assert_int_eq(l.count, MIXED_N);
    ck_assert_ptr_nonnull(l.names);
    for (int i = 0; i < MIXED_N; i++) {
        ck_assert_str_eq(l.names[i], mixed_names[i]);
        assert_same_array(l.arrays[i], arrays[i]);
    }
    /* Saving what was loaded reproduces the bytes. */
    void *again = NULL;
    size_t again_len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(l.arrays, (const char *const *)l.names, l.count, &again,
                                            &again_len),
                     MX_OK);
    ck_assert_uint_eq(again_len, len);
    ck_assert_int_eq(memcmp(again, buf, len), 0);
    mx_ndarray_list_free(&l);
    assert_list_zeroed(&l);
    mx_free(again);
    mx_free(buf);
    free_arrays(arrays, MIXED_N);
}
END_TEST

/* float16 (flag 2) and bfloat16 (flag 12), every bit pattern, NaNs
 * included: 2 bytes an element, the flag in the header, back unchanged. */
START_TEST(test_roundtrip_half_types)
{
    static uint16_t all[65536];
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)(i * 7919); /* every pattern, shuffled */
    mx_ndarray *arrays[2] = {make_array(MX_SHAPE(256, 256), MX_FLOAT16, all),
                             make_array(MX_SHAPE(4, 128, 128), MX_BFLOAT16, all)};
    const char *names[2] = {"arg:h", "arg:b"};
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(arrays, names, 2, &buf, &len), MX_OK);
    ck_assert_uint_eq(len, 24 + 2 * 24 + 8 * (2 + 3) + 2 * 2 * 65536 + 8 + 2 * (8 + 5));
    /* V2 array: magic, stype, ndim, dims, dev_type, dev_id, flag */
    int32_t flag0, flag1;
    memcpy(&flag0, (const char *)buf + 24 + 4 + 4 + 4 + 2 * 8 + 4 + 4, 4);
    memcpy(&flag1, (const char *)buf + 24 + 24 + 2 * 8 + 2 * 65536 + 4 + 4 + 4 + 3 * 8 + 4 + 4, 4);
    ck_assert_int_eq(flag0, 2);
    ck_assert_int_eq(flag1, 12);
    mx_ndarray_list l;
    ck_assert_int_eq(mx_ndarray_load_buffer(rt, buf, len, &l), MX_OK);
    ck_assert_int_eq(l.count, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(mx_ndarray_dtype(l.arrays[i]), mx_ndarray_dtype(arrays[i]));
        assert_same_array(l.arrays[i], arrays[i]);
    }
    mx_ndarray_list_free(&l);
    mx_free(buf);
    free_arrays(arrays, 2);
}
END_TEST

START_TEST(test_roundtrip_unnamed)
{
    mx_ndarray *arrays[MIXED_N];
    make_mixed(arrays);
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(arrays, NULL, MIXED_N, &buf, &len), MX_OK);
    uint64_t k;
    memcpy(&k, (uint8_t *)buf + len - 8, 8);
    ck_assert_uint_eq(k, 0); /* name count K = 0 ends the file */
    mx_ndarray_list l;
    ck_assert_int_eq(mx_ndarray_load_buffer(rt, buf, len, &l), MX_OK);
    ck_assert_int_eq(l.count, MIXED_N);
    ck_assert_ptr_null(l.names);
    for (int i = 0; i < MIXED_N; i++) assert_same_array(l.arrays[i], arrays[i]);
    mx_ndarray_list_free(&l);
    mx_free(buf);
    free_arrays(arrays, MIXED_N);
}
END_TEST

START_TEST(test_roundtrip_empty_list)
{
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(NULL, NULL, 0, &buf, &len), MX_OK);
    static const uint8_t want[32] = {0x12, 1};
    ck_assert_uint_eq(len, 32);
    ck_assert_int_eq(memcmp(buf, want, 32), 0);
    mx_ndarray_list l;
    ck_assert_int_eq(mx_ndarray_load_buffer(rt, buf, len, &l), MX_OK);
    ck_assert_int_eq(l.count, 0);
    ck_assert_ptr_null(l.names);
    mx_ndarray_list_free(&l);
    mx_free(buf);
}
END_TEST

/* Zero-size arrays keep their shape; 0-d arrays are saved as (1,). */
START_TEST(test_zero_size_and_scalar)
{
    int32_t nothing = 0;
    float v = 42.5f;
    mx_ndarray *arrays[2] = {make_array(MX_SHAPE(2, 0, 3), MX_INT32, &nothing),
                             make_array(mx_shape_make(0, NULL), MX_FLOAT32, &v)};
    ck_assert_uint_eq(mx_ndarray_nbytes(arrays[0]), 0);
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(arrays, NULL, 2, &buf, &len), MX_OK);
    bytes want = {0};
    put_list_header(&want, 2);
    put_v2_head(&want, 3, (int64_t[]){2, 0, 3}, MX_INT32);
    put_v2_head(&want, 1, (int64_t[]){1}, MX_FLOAT32);
    put(&want, &v, 4);
    put_u64(&want, 0);
    ck_assert_uint_eq(len, want.len);
    ck_assert_int_eq(memcmp(buf, want.p, len), 0);

    mx_ndarray_list l;
    ck_assert_int_eq(mx_ndarray_load_buffer(rt, buf, len, &l), MX_OK);
    ck_assert_int_eq(l.count, 2);
    assert_same_array(l.arrays[0], arrays[0]);
    mx_shape one = MX_SHAPE(1);
    ck_assert(mx_shape_equal(mx_ndarray_shape(l.arrays[1]), &one));
    float got;
    ck_assert_int_eq(mx_ndarray_to_host(l.arrays[1], &got, 4), MX_OK);
    ck_assert(got == 42.5f);
    mx_ndarray_list_free(&l);
    mx_free(buf);
    free(want.p);
    free_arrays(arrays, 2);
}
END_TEST

/* ---------------------------------------------------------------- spec bytes */

/* Our writer must produce the spec 5.7 example, converted to V2, exactly. */
START_TEST(test_writer_matches_spec_v2)
{
    uint32_t w_bits[2] = {0x3f800000u, 0x3fffffd5u}, b_bits = 0x36266c0cu;
    mx_ndarray *arrays[2] = {make_array(MX_SHAPE(1, 2), MX_FLOAT32, w_bits),
                             make_array(MX_SHAPE(1), MX_FLOAT32, &b_bits)};
    const char *names[2] = {"arg:fc1_weight", "arg:fc1_bias"};
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(arrays, names, 2, &buf, &len), MX_OK);
    bytes want = spec_example(true);
    ck_assert_uint_eq(want.len, 158); /* 150 + two 4-byte storage types */
    ck_assert_uint_eq(len, want.len);
    for (size_t i = 0; i < len; i++)
        ck_assert_msg(((uint8_t *)buf)[i] == want.p[i], "byte 0x%zx: got %02x want %02x", i,
                      ((uint8_t *)buf)[i], want.p[i]);
    mx_free(buf);
    free(want.p);
    free_arrays(arrays, 2);
}
END_TEST

static void check_spec_example_values(const mx_ndarray_list *l)
{
    ck_assert_int_eq(l->count, 2);
    ck_assert_ptr_nonnull(l->names);
    ck_assert_str_eq(l->names[0], "arg:fc1_weight");
    ck_assert_str_eq(l->names[1], "arg:fc1_bias");
    mx_shape s0 = MX_SHAPE(1, 2), s1 = MX_SHAPE(1);
    ck_assert(mx_shape_equal(mx_ndarray_shape(l->arrays[0]), &s0));
    ck_assert(mx_shape_equal(mx_ndarray_shape(l->arrays[1]), &s1));
    ck_assert_int_eq(mx_ndarray_dtype(l->arrays[0]), MX_FLOAT32);
    float w[2], b;
    ck_assert_int_eq(mx_ndarray_to_host(l->arrays[0], w, sizeof(w)), MX_OK);
    ck_assert_int_eq(mx_ndarray_to_host(l->arrays[1], &b, sizeof(b)), MX_OK);
    ck_assert(w[0] == 1.0f);
    ck_assert(w[1] == f32_from_bits(0x3fffffd5u));
    ck_assert_double_eq_tol(w[1], 1.99999, 1e-5);
    ck_assert_double_eq_tol(b, 2.48e-6, 1e-8);
}

START_TEST(test_load_spec_v1_example)
{
    bytes v1 = spec_example(false);
    ck_assert_uint_eq(v1.len, 150);
    mx_ndarray_list l;
    ck_assert_int_eq(mx_ndarray_load_buffer(rt, v1.p, v1.len, &l), MX_OK);
    check_spec_example_values(&l);
    mx_ndarray_list_free(&l);
    bytes v2 = spec_example(true);
    ck_assert_int_eq(mx_ndarray_load_buffer(rt, v2.p, v2.len, &l), MX_OK);
    check_spec_example_values(&l);
    mx_ndarray_list_free(&l);
    free(v1.p);
    free(v2.p);
}
END_TEST

/* Empty / none entries in every version, and a V3 scalar. */
START_TEST(test_empty_entries_and_v3)
{
    bytes b = {0};
    put_list_header(&b, 7);
    put_u32(&b, 0);                 /* V0, ndim 0: empty */
    put_u32(&b, 0xF993FAC8u);       /* V1, ndim 0: empty */
    put_i32(&b, 0);
    put_u32(&b, 0xF993FAC9u);       /* V2, dense, ndim 0: empty */
    put_i32(&b, 0);
    put_i32(&b, 0);
    put_u32(&b, 0xF993FAC9u);       /* V2 none array (MXNet >= 1.5) */
    put_i32(&b, -1);
    put_i32(&b, -1);
    put_u32(&b, 0xF993FACAu);       /* V3 none */
    put_i32(&b, 0);
    put_i32(&b, -1);
    put_u32(&b, 0xF993FACAu);       /* V3 scalar: ndim 0, one float64 */
    put_i32(&b, 0);
    put_i32(&b, 0);
    put_i32(&b, 1);
    put_i32(&b, 0);
    put_i32(&b, MX_FLOAT64);
    double scalar = -6.25;
    put(&b, &scalar, 8);
    put_u32(&b, 0xF993FACAu);       /* V3 (2,2) int8 */
    put_i32(&b, 0);
    put_i32(&b, 2);
    put_i64(&b, 2);
    put_i64(&b, 2);
    put_i32(&b, 2);                 /* gpu(3): the context is ignored */
    put_i32(&b, 3);
    put_i32(&b, MX_INT8);
    int8_t q[4] = {-1, 2, -3, 4};
    put(&b, q, 4);
    put_u64(&b, 0);

    mx_ndarray_list l;
    ck_assert_msg(mx_ndarray_load_buffer(rt, b.p, b.len, &l) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(l.count, 7);
    mx_shape empty = MX_SHAPE(0);
    for (int i = 0; i < 5; i++) {
        ck_assert_msg(mx_shape_equal(mx_ndarray_shape(l.arrays[i]), &empty), "entry %d", i);
        ck_assert_int_eq(mx_ndarray_size(l.arrays[i]), 0);
    }
    ck_assert_int_eq(mx_ndarray_shape(l.arrays[5])->ndim, 0);
    ck_assert_int_eq(mx_ndarray_dtype(l.arrays[5]), MX_FLOAT64);
    double got;
    ck_assert_int_eq(mx_ndarray_to_host(l.arrays[5], &got, 8), MX_OK);
    ck_assert(got == -6.25);
    mx_shape s22 = MX_SHAPE(2, 2);
    ck_assert(mx_shape_equal(mx_ndarray_shape(l.arrays[6]), &s22));
    ck_assert(mx_context_equal(mx_ndarray_context(l.arrays[6]), mx_cpu()));
    int8_t gq[4];
    ck_assert_int_eq(mx_ndarray_to_host(l.arrays[6], gq, 4), MX_OK);
    ck_assert_int_eq(memcmp(gq, q, 4), 0);
    mx_ndarray_list_free(&l);
    free(b.p);
}
END_TEST

/* ---------------------------------------------------------------- fixtures */

START_TEST(test_fixture_legacy_v0)
{
    const char *path = shared_path("fixtures/mxnet/apache-mxnet/legacy_ndarray.v0");
    mx_ndarray_list l;
    mx_status st = mx_ndarray_load(rt, path, &l);
    ck_assert_msg(st == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(l.count, 6);
    ck_assert_ptr_null(l.names);
    mx_shape s = MX_SHAPE(128);
    for (int i = 0; i < 6; i++) {
        ck_assert(mx_shape_equal(mx_ndarray_shape(l.arrays[i]), &s));
        ck_assert_int_eq(mx_ndarray_dtype(l.arrays[i]), MX_FLOAT32);
        float v[128];
        ck_assert_int_eq(mx_ndarray_to_host(l.arrays[i], v, sizeof(v)), MX_OK);
        for (int j = 0; j < 128; j++) ck_assert_msg(v[j] == (float)j, "array %d [%d] = %g", i, j, v[j]);
    }
    mx_ndarray_list_free(&l);
}
END_TEST

static const char *const sm_names[6] = {
    "arg:fullyconnected0_weight", "arg:fullyconnected0_bias", "arg:fullyconnected1_weight",
    "arg:fullyconnected1_bias",   "arg:fullyconnected2_weight", "arg:fullyconnected2_bias",
};
static const int64_t sm_dims[6][2] = {{128, 784}, {128, 0}, {64, 128}, {64, 0}, {10, 64}, {10, 0}};

START_TEST(test_fixture_sagemaker_v2)
{
    const char *path = shared_path("fixtures/mxnet/sagemaker-mnist-mlp/model-0000.params");
    size_t len;
    uint8_t *file = read_all(path, &len);
    ck_assert_uint_eq(len, 437990);
    mx_ndarray_list l;
    mx_status st = mx_ndarray_load(rt, path, &l);
    ck_assert_msg(st == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(l.count, 6);
    ck_assert_ptr_nonnull(l.names);
    for (int i = 0; i < 6; i++) {
        ck_assert_str_eq(l.names[i], sm_names[i]);
        mx_shape want = sm_dims[i][1] ? MX_SHAPE(sm_dims[i][0], sm_dims[i][1])
                                      : MX_SHAPE(sm_dims[i][0]);
        ck_assert(mx_shape_equal(mx_ndarray_shape(l.arrays[i]), &want));
        ck_assert_int_eq(mx_ndarray_dtype(l.arrays[i]), MX_FLOAT32);
    }
    float *w = (float *)host_bytes(l.arrays[0]);
    ck_assert_double_eq_tol(w[0], 0.00097627, 1e-8);
    free(w);
    /* MXNet 1.4 wrote this as V2 cpu(0): our writer reproduces every byte. */
    void *buf = NULL;
    size_t blen = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(l.arrays, (const char *const *)l.names, l.count, &buf, &blen),
                     MX_OK);
    ck_assert_uint_eq(blen, len);
    ck_assert_int_eq(memcmp(buf, file, len), 0);
    mx_free(buf);
    mx_ndarray_list_free(&l);
    free(file);
}
END_TEST

/* ---------------------------------------------------------------- damage */

/* Loads bytes [0, cut) from an exact-size heap copy, so that ASan sees any
 * read past the end; the load must fail with MX_ERR_FORMAT. */
static void expect_truncated(const uint8_t *data, size_t cut, bool exact_copy)
{
    uint8_t *copy = NULL;
    const uint8_t *p = data;
    if (exact_copy) {
        copy = malloc(cut ? cut : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, data, cut);
        p = copy;
    }
    mx_ndarray_list l;
    mx_status st = mx_ndarray_load_buffer(rt, p, cut, &l);
    ck_assert_msg(st == MX_ERR_FORMAT, "cut at %zu: got %s (%s)", cut, mx_status_name(st),
                  mx_last_error());
    ck_assert_msg(strstr(mx_last_error(), "byte offset") != NULL &&
                      strstr(mx_last_error(), "truncated") != NULL,
                  "cut at %zu: message \"%s\"", cut, mx_last_error());
    assert_list_zeroed(&l);
    free(copy);
}

START_TEST(test_truncation_saved)
{
    mx_ndarray *arrays[MIXED_N];
    make_mixed(arrays);
    for (int named = 0; named < 2; named++) {
        void *buf = NULL;
        size_t len = 0;
        ck_assert_int_eq(mx_ndarray_save_buffer(arrays, named ? mixed_names : NULL, MIXED_N, &buf, &len),
                         MX_OK);
        for (size_t cut = 0; cut < len; cut++) expect_truncated(buf, cut, true);
        mx_free(buf);
    }
    bytes v1 = spec_example(false);
    for (size_t cut = 0; cut < v1.len; cut++) expect_truncated(v1.p, cut, true);
    free(v1.p);
    free_arrays(arrays, MIXED_N);
}
END_TEST

START_TEST(test_truncation_fixtures)
{
    size_t len;
    uint8_t *file = read_all(shared_path("fixtures/mxnet/sagemaker-mnist-mlp/model-0000.params"), &len);
    /* Every prefix against the same buffer (cheap: the reader validates the
     * structure before copying any data)... */
    for (size_t cut = 0; cut < len; cut++) expect_truncated(file, cut, false);
    /* ...and exact-size copies for the header, the first array's header,
     * array boundaries, the names, and a sample of the rest. */
    /* Each array: magic, stype, ndim (12) + 8 per dim + context, dtype (12)
     * + data; boundaries[i] is where array i ends. */
    size_t boundaries[6], at = 24;
    for (int i = 0; i < 6; i++) {
        int nd = sm_dims[i][1] ? 2 : 1;
        size_t n = (size_t)sm_dims[i][0] * (size_t)(sm_dims[i][1] ? sm_dims[i][1] : 1);
        at += 24 + 8 * (size_t)nd + 4 * n;
        boundaries[i] = at;
    }
    size_t names_len = 8;
    for (int i = 0; i < 6; i++) names_len += 8 + strlen(sm_names[i]);
    ck_assert_uint_eq(boundaries[5] + names_len, len);
    for (size_t cut = 0; cut < 256; cut++) expect_truncated(file, cut, true);
    for (int i = 0; i < 6; i++)
        for (size_t d = 0; d < 80; d++) expect_truncated(file, boundaries[i] - 40 + d, true);
    for (size_t cut = boundaries[5]; cut < len; cut++) expect_truncated(file, cut, true);
    for (size_t cut = 256; cut < len; cut += 4099) expect_truncated(file, cut, true);
    free(file);

    file = read_all(shared_path("fixtures/mxnet/apache-mxnet/legacy_ndarray.v0"), &len);
    for (size_t cut = 0; cut < len; cut++) expect_truncated(file, cut, true);
    free(file);
}
END_TEST

/* Random byte damage: an error or a valid list, never a crash, a leak or a
 * huge allocation (run under ASan: make sanitize). */
static void corrupt_many(const uint8_t *good, size_t len, size_t lo, size_t hi, int rounds)
{
    uint8_t *p = malloc(len);
    ck_assert_ptr_nonnull(p);
    static const uint8_t special[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0x09, 0xfa, 0x12};
    int ok = 0, failed = 0;
    for (int r = 0; r < rounds; r++) {
        memcpy(p, good, len);
        int flips = 1 + (int)(rng_next() % 4);
        for (int f = 0; f < flips; f++) {
            size_t at = lo + (size_t)(rng_next() % (hi - lo));
            p[at] = rng_next() % 2 ? special[rng_next() % sizeof(special)] : (uint8_t)rng_next();
        }
        mx_ndarray_list l;
        mx_status st = mx_ndarray_load_buffer(rt, p, len, &l);
        if (st == MX_OK) {
            ok++;
            mx_ndarray_list_free(&l);
        } else {
            failed++;
            ck_assert_msg(st == MX_ERR_FORMAT, "round %d: %s: %s", r, mx_status_name(st), mx_last_error());
            assert_list_zeroed(&l);
        }
    }
    ck_assert_int_eq(ok + failed, rounds);
    ck_assert_int_gt(failed, 0); /* the damage did reach the structure */
    free(p);
}

START_TEST(test_corruption)
{
    mx_ndarray *arrays[MIXED_N];
    make_mixed(arrays);
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(arrays, mixed_names, MIXED_N, &buf, &len), MX_OK);
    corrupt_many(buf, len, 0, len, 5000);
    mx_free(buf);
    free_arrays(arrays, MIXED_N);

    size_t flen;
    uint8_t *file = read_all(shared_path("fixtures/mxnet/sagemaker-mnist-mlp/model-0000.params"), &flen);
    corrupt_many(file, flen, 0, 80, 300);           /* list and first array headers */
    corrupt_many(file, flen, flen - 300, flen, 300); /* last arrays and the names */
    free(file);
}
END_TEST

START_TEST(test_format_errors)
{
    float one = 1.0f;
    bytes b = {0};

    put_u64(&b, 0x113); /* bad list magic */
    put_u64(&b, 0);
    put_u64(&b, 0);
    put_u64(&b, 0);
    expect_format_error(&b, "not an NDArray list file");

    for (int32_t stype = 1; stype <= 2; stype++) {
        for (uint32_t magic = 0xF993FAC9u; magic <= 0xF993FACAu; magic++) {
            b.len = 0;
            put_list_header(&b, 1);
            put_u32(&b, magic);
            put_i32(&b, stype);
            put_i32(&b, 1);
            put_i64(&b, 1);
            expect_format_error(&b, "sparse arrays are not supported");
        }
    }
    b.len = 0;
    put_list_header(&b, 1);
    put_u32(&b, 0xF993FAC9u);
    put_i32(&b, 5);
    expect_format_error(&b, "unknown storage type 5");

    int32_t bad_flags[] = {7, 11, 13, -1, 99}; /* 12 is bfloat16 */
    for (size_t i = 0; i < sizeof(bad_flags) / sizeof(bad_flags[0]); i++) {
        b.len = 0;
        put_list_header(&b, 1);
        put_v2_head(&b, 1, (int64_t[]){1}, bad_flags[i]);
        put(&b, &one, 4);
        put_u64(&b, 0);
        char needle[32];
        snprintf(needle, sizeof(needle), "dtype flag %d", (int)bad_flags[i]);
        expect_format_error(&b, needle);
    }

    /* Name count must be 0 or N. */
    b.len = 0;
    put_list_header(&b, 2);
    put_v2_head(&b, 1, (int64_t[]){1}, 0);
    put(&b, &one, 4);
    put_v2_head(&b, 1, (int64_t[]){1}, 0);
    put(&b, &one, 4);
    size_t names_at = b.len;
    put_u64(&b, 1);
    put_name(&b, "a");
    expect_format_error(&b, "name count 1");
    b.len = names_at;
    put_u64(&b, 3);
    put_name(&b, "a");
    put_name(&b, "b");
    put_name(&b, "c");
    expect_format_error(&b, "name count 3");
    b.len = names_at;
    put_u64(&b, 2);
    put_name(&b, "a");
    put_u64(&b, (uint64_t)1 << 62); /* absurd name length */
    expect_format_error(&b, "name of array 1");
    b.len = names_at;
    put_u64(&b, 2);
    put_name(&b, "a");
    put_u64(&b, 3);
    put(&b, "x\0y", 3);
    expect_format_error(&b, "NUL");
    b.len = names_at;
    put_u64(&b, 0);
    put(&b, "!", 1); /* trailing garbage */
    expect_format_error(&b, "trailing");

    /* Shapes: too many dims, negative dims, sizes beyond the input. */
    b.len = 0;
    put_list_header(&b, 1);
    put_u32(&b, 0xF993FAC9u);
    put_i32(&b, 0);
    put_i32(&b, MX_MAX_NDIM + 1);
    for (int i = 0; i <= MX_MAX_NDIM; i++) put_i64(&b, 1);
    expect_format_error(&b, "ndim 9");
    b.len = 0;
    put_list_header(&b, 1);
    put_v2_head(&b, 2, (int64_t[]){3, -2}, 0);
    expect_format_error(&b, "negative dimension");
    b.len = 0;
    put_list_header(&b, 1);
    put_v2_head(&b, 3, (int64_t[]){INT64_MAX, INT64_MAX, 2}, 0);
    expect_format_error(&b, "overflows");
    b.len = 0;
    put_list_header(&b, 1);
    put_v2_head(&b, 2, (int64_t[]){(int64_t)1 << 20, (int64_t)1 << 20}, MX_FLOAT64); /* 8 TiB */
    put(&b, &one, 4);
    put_u64(&b, 0);
    expect_format_error(&b, "data of array 0");
    b.len = 0;
    put_list_header(&b, 1);
    put_u32(&b, 0xF993FACAu);
    put_i32(&b, 0);
    put_i32(&b, -2);
    expect_format_error(&b, "invalid ndim -2");
    b.len = 0;
    put_list_header(&b, 1);
    put_u32(&b, 0xF993FAC9u);
    put_i32(&b, -1);
    put_i32(&b, 1);
    put_i64(&b, 1);
    expect_format_error(&b, "undefined storage type");
    b.len = 0;
    put_list_header(&b, 1);
    put_u32(&b, 0x12345u); /* not a magic, and too large for a V0 ndim */
    expect_format_error(&b, "unknown array magic 0x00012345");

    /* Absurd counts are refused before anything is sized from them. */
    uint64_t counts[] = {(uint64_t)1 << 60, (uint64_t)INT_MAX + 1, 1000};
    for (size_t i = 0; i < 3; i++) {
        b.len = 0;
        put_list_header(&b, counts[i]);
        put_u64(&b, 0);
        expect_format_error(&b, "array count");
    }
    free(b.p);
}
END_TEST

/* ---------------------------------------------------------------- files */

START_TEST(test_file_roundtrip_and_atomic_replace)
{
    char dir[64], path[128], tmp[160];
    make_tmpdir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/model-0001.params", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    mx_ndarray *arrays[MIXED_N];
    make_mixed(arrays);

    ck_assert_int_eq(mx_ndarray_save(path, arrays, mixed_names, MIXED_N), MX_OK);
    ck_assert(!file_exists(tmp));
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(arrays, mixed_names, MIXED_N, &buf, &len), MX_OK);
    size_t flen;
    uint8_t *file = read_all(path, &flen);
    ck_assert_uint_eq(flen, len);
    ck_assert_int_eq(memcmp(file, buf, len), 0);
    free(file);
    mx_free(buf);

    mx_ndarray_list l;
    ck_assert_int_eq(mx_ndarray_load(rt, path, &l), MX_OK);
    ck_assert_int_eq(l.count, MIXED_N);
    for (int i = 0; i < MIXED_N; i++) {
        ck_assert_str_eq(l.names[i], mixed_names[i]);
        assert_same_array(l.arrays[i], arrays[i]);
    }
    mx_ndarray_list_free(&l);

    /* Saving again replaces the file. */
    ck_assert_int_eq(mx_ndarray_save(path, arrays + 1, NULL, 2), MX_OK);
    ck_assert_int_eq(mx_ndarray_load(rt, path, &l), MX_OK);
    ck_assert_int_eq(l.count, 2);
    ck_assert_ptr_null(l.names);
    assert_same_array(l.arrays[0], arrays[1]);
    assert_same_array(l.arrays[1], arrays[2]);
    mx_ndarray_list_free(&l);

    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    free_arrays(arrays, MIXED_N);
}
END_TEST

START_TEST(test_file_errors)
{
    char dir[64], path[256], tmp[320];
    make_tmpdir(dir, sizeof(dir));
    float v = 1.0f;
    mx_ndarray *a = make_array(MX_SHAPE(1), MX_FLOAT32, &v);

    /* Missing directory: cannot even create the temporary file. */
    snprintf(path, sizeof(path), "%s/missing/x.params", dir);
    ck_assert_int_eq(mx_ndarray_save(path, &a, NULL, 1), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), path));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), strerror(ENOENT)));

    /* The target is a directory: the write succeeds, the rename fails, and
     * the temporary file must be removed. */
    snprintf(path, sizeof(path), "%s/isdir", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(mx_ndarray_save(path, &a, NULL, 1), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), path));
    ck_assert(!file_exists(tmp));
    ck_assert_int_eq(rmdir(path), 0);

    /* A read-only directory (meaningless as root, who may write anyway). */
    if (geteuid() != 0) {
        snprintf(path, sizeof(path), "%s/ro", dir);
        ck_assert_int_eq(mkdir(path, 0500), 0);
        char inside[300];
        snprintf(inside, sizeof(inside), "%s/x.params", path);
        ck_assert_int_eq(mx_ndarray_save(inside, &a, NULL, 1), MX_ERR_IO);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), strerror(EACCES)));
        snprintf(tmp, sizeof(tmp), "%s.tmp", inside);
        ck_assert(!file_exists(tmp));
        ck_assert_int_eq(rmdir(path), 0);
    }

    /* Loading a missing file, a directory, an empty file. */
    mx_ndarray_list l;
    snprintf(path, sizeof(path), "%s/nope.params", dir);
    ck_assert_int_eq(mx_ndarray_load(rt, path, &l), MX_ERR_IO);
    assert_list_zeroed(&l);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), path));
    ck_assert_int_eq(mx_ndarray_load(rt, dir, &l), MX_ERR_IO);
    assert_list_zeroed(&l);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "not a regular file"));
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(fclose(fp), 0);
    ck_assert_int_eq(mx_ndarray_load(rt, path, &l), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), path));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "list magic"));
    ck_assert_int_eq(unlink(path), 0);

    ck_assert_int_eq(rmdir(dir), 0);
    mx_ndarray_free(a);
}
END_TEST

START_TEST(test_invalid_arguments)
{
    float v = 1.0f;
    mx_ndarray *a = make_array(MX_SHAPE(1), MX_FLOAT32, &v);
    mx_ndarray *with_null[2] = {a, NULL};
    const char *names[2] = {"a", NULL};
    void *buf = (void *)1;
    size_t len = 7;
    ck_assert_int_eq(mx_ndarray_save_buffer(&a, NULL, -1, &buf, &len), MX_ERR_INVALID);
    ck_assert_ptr_null(buf);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(mx_ndarray_save_buffer(NULL, NULL, 1, &buf, &len), MX_ERR_INVALID);
    ck_assert_int_eq(mx_ndarray_save_buffer(with_null, NULL, 2, &buf, &len), MX_ERR_INVALID);
    mx_ndarray *two[2] = {a, a};
    ck_assert_int_eq(mx_ndarray_save_buffer(two, names, 2, &buf, &len), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "name 1"));
    ck_assert_int_eq(mx_ndarray_save("/tmp/x", with_null, NULL, 2), MX_ERR_INVALID);
    ck_assert_int_eq(mx_ndarray_save(NULL, &a, NULL, 1), MX_ERR_INVALID);
    mx_ndarray_list l;
    ck_assert_int_eq(mx_ndarray_load_buffer(rt, NULL, 10, &l), MX_ERR_INVALID);
    ck_assert_int_eq(mx_ndarray_load_buffer(NULL, &v, 4, &l), MX_ERR_INVALID);
    mx_ndarray_list_free(NULL);
    mx_ndarray_free(a);
}
END_TEST

/* ---------------------------------------------------------------- engine */

typedef struct delayed_write {
    mx_ndarray *a;
    bool fail;
} delayed_write;

/* Sleeps, then overwrites the array with 0,1,2,... or fails. */
static mx_status delayed_write_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    delayed_write *w = payload;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (w->fail) return MX_ERROR(MX_ERR_RUNTIME, "injected failure");
    float *p = mx_ndarray_data(w->a);
    for (int64_t i = 0; i < mx_ndarray_size(w->a); i++) p[i] = (float)i;
    return MX_OK;
}

static void push_delayed_write(delayed_write *w)
{
    mx_engine_var *writes[1] = {mx_ndarray_var(w->a)};
    mx_engine_op op = {.fn = delayed_write_fn, .payload = w, .writes = writes, .n_writes = 1,
                       .ctx = mx_cpu(), .lane = MX_LANE_COMPUTE, .name = "delayed_write"};
    ck_assert_int_eq(mx_engine_push(mx_runtime_engine(rt), &op), MX_OK);
}

/* Saving waits for pending writes and returns their errors; a failed save
 * leaves the previous file untouched and no temporary file. */
START_TEST(test_save_waits_for_engine)
{
    float zeros[6] = {0};
    mx_ndarray *a = make_array(MX_SHAPE(2, 3), MX_FLOAT32, zeros);
    delayed_write w = {a, false};
    push_delayed_write(&w);
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(&a, NULL, 1, &buf, &len), MX_OK);
    float got[6];
    ck_assert_uint_eq(len, 24 + (24 + 8 * 2) + 24 + 8);
    memcpy(got, (uint8_t *)buf + len - 8 - 24, 24);
    for (int i = 0; i < 6; i++) ck_assert(got[i] == (float)i);
    mx_free(buf);

    char dir[64], path[128], tmp[160];
    make_tmpdir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/a.params", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    ck_assert_int_eq(mx_ndarray_save(path, &a, NULL, 1), MX_OK);
    size_t before_len;
    uint8_t *before = read_all(path, &before_len);

    delayed_write bad = {a, true};
    push_delayed_write(&bad);
    ck_assert_int_eq(mx_ndarray_save(path, &a, NULL, 1), MX_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "injected failure"));
    ck_assert(!file_exists(tmp));
    size_t after_len;
    uint8_t *after = read_all(path, &after_len);
    ck_assert_uint_eq(after_len, before_len);
    ck_assert_int_eq(memcmp(after, before, before_len), 0);

    push_delayed_write(&bad);
    buf = (void *)1;
    ck_assert_int_eq(mx_ndarray_save_buffer(&a, NULL, 1, &buf, &len), MX_ERR_RUNTIME);
    ck_assert_ptr_null(buf);

    free(before);
    free(after);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    mx_ndarray_free(a);
}
END_TEST

/* A GPU array is read back through the engine and saved as cpu(0), so the
 * bytes equal those of the same data on the CPU. Skipped without a GPU. */
START_TEST(test_save_gpu_array)
{
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)i - 5.5f;
    mx_ndarray *g = NULL;
    mx_status st = mx_ndarray_create(rt, MX_SHAPE(3, 4), MX_FLOAT32, mx_gpu(0), &g);
    if (st != MX_OK) {
        printf("gpu: no usable GPU (%s), skipped\n", mx_status_name(st));
        return;
    }
    ck_assert_int_eq(mx_ndarray_from_host(g, v, sizeof(v)), MX_OK);
    mx_ndarray *c = make_array(MX_SHAPE(3, 4), MX_FLOAT32, v);
    const char *name = "arg:w";
    void *gb = NULL, *cb = NULL;
    size_t gl = 0, cl = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(&g, &name, 1, &gb, &gl), MX_OK);
    ck_assert_int_eq(mx_ndarray_save_buffer(&c, &name, 1, &cb, &cl), MX_OK);
    ck_assert_uint_eq(gl, cl);
    ck_assert_int_eq(memcmp(gb, cb, gl), 0);
    mx_free(gb);
    mx_free(cb);
    mx_ndarray_free(g);
    mx_ndarray_free(c);
}
END_TEST

/* ---------------------------------------------------------------- interop */

/* Checks OUR loader against one MXNet-written file. The sidecar NAME.txt
 * (written by scripts/interop/mxnet-params.sh with numpy) holds
 *   "<count> named|unnamed" then per array "<name|-> <dtype flag> <ndim> <dims...>"
 * and NAME.raw the arrays' bytes back to back, C order. */
static void interop_check_mxnet_file(const char *dir, const char *name)
{
    char path[4096], txt[4200], raw[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(txt, sizeof(txt), "%s.txt", path);
    snprintf(raw, sizeof(raw), "%s.raw", path);
    size_t raw_len;
    uint8_t *expect = read_all(raw, &raw_len);
    FILE *fp = fopen(txt, "r");
    ck_assert_msg(fp != NULL, "cannot open %s: %s", txt, strerror(errno));

    mx_ndarray_list l;
    mx_status st = mx_ndarray_load(rt, path, &l);
    ck_assert_msg(st == MX_OK, "%s", mx_last_error());
    int count;
    char kind[16];
    ck_assert_int_eq(fscanf(fp, "%d %15s", &count, kind), 2);
    ck_assert_int_eq(l.count, count);
    bool named = strcmp(kind, "named") == 0;
    ck_assert(named ? l.names != NULL : l.names == NULL);
    size_t off = 0;
    for (int i = 0; i < count; i++) {
        char aname[256];
        int flag, ndim;
        ck_assert_int_eq(fscanf(fp, "%255s %d %d", aname, &flag, &ndim), 3);
        ck_assert(ndim >= 0 && ndim <= MX_MAX_NDIM);
        int64_t dims[MX_MAX_NDIM];
        for (int d = 0; d < ndim; d++) {
            long long v;
            ck_assert_int_eq(fscanf(fp, "%lld", &v), 1);
            dims[d] = v;
        }
        mx_shape want = mx_shape_make(ndim, dims);
        int j = i;
        if (named) {
            /* MXNet keeps dict order, but match by name to not depend on it. */
            for (j = 0; j < l.count && strcmp(l.names[j], aname) != 0; j++) continue;
            ck_assert_msg(j < l.count, "%s: no array named %s", name, aname);
        }
        char g[128], w[128];
        ck_assert_msg(mx_shape_equal(mx_ndarray_shape(l.arrays[j]), &want), "%s %s: shape %s != %s",
                      name, aname, mx_shape_str(mx_ndarray_shape(l.arrays[j]), g, sizeof(g)),
                      mx_shape_str(&want, w, sizeof(w)));
        ck_assert_int_eq(mx_ndarray_dtype(l.arrays[j]), flag);
        size_t n = mx_ndarray_nbytes(l.arrays[j]);
        ck_assert_uint_le(off + n, raw_len);
        uint8_t *got = host_bytes(l.arrays[j]);
        ck_assert_msg(memcmp(got, expect + off, n) == 0, "%s %s: values differ", name, aname);
        free(got);
        off += n;
    }
    ck_assert_uint_eq(off, raw_len);
    ck_assert_int_eq(fclose(fp), 0);
    mx_ndarray_list_free(&l);
    free(expect);
    printf("interop: %s: %d arrays match MXNet's values\n", name, count);
}

/* Known values for MXNet to verify (mirrored in the interop script):
 * element i of each array, in C order. */
static void interop_write_ours(const char *dir)
{
    enum { N = 9 };
    float w[4 * 3 * 2 * 2];
    for (int i = 0; i < 48; i++) w[i] = (float)(i - 20) * 0.125f;
    double b[4];
    for (int i = 0; i < 4; i++) b[i] = i / 3.0;
    float fc[15];
    for (int i = 0; i < 15; i++) fc[i] = (float)(i * 3 - 7) / 8.0f;
    int32_t mean[24];
    for (int i = 0; i < 24; i++) mean[i] = i * 1000003 - 5000000;
    uint8_t mask[64];
    for (int i = 0; i < 64; i++) mask[i] = (uint8_t)((i * 37 + 11) % 256);
    int64_t idx[3];
    for (int i = 0; i < 3; i++) idx[i] = ((int64_t)1 << 40) + i * 7 - 3;
    int8_t q[5];
    for (int i = 0; i < 5; i++) q[i] = (int8_t)(i * 50 - 100);
    uint16_t half[3] = {0x3c00, 0xc100, 0x3555};
    float scalar = 42.5f;
    mx_ndarray *arrays[N] = {
        make_array(MX_SHAPE(4, 3, 2, 2), MX_FLOAT32, w),
        make_array(MX_SHAPE(4), MX_FLOAT64, b),
        make_array(MX_SHAPE(3, 5), MX_FLOAT32, fc),
        make_array(MX_SHAPE(2, 3, 4), MX_INT32, mean),
        make_array(MX_SHAPE(2, 2, 2, 2, 2, 2), MX_UINT8, mask),
        make_array(MX_SHAPE(3), MX_INT64, idx),
        make_array(MX_SHAPE(5), MX_INT8, q),
        make_array(MX_SHAPE(3), MX_FLOAT16, half),
        make_array(mx_shape_make(0, NULL), MX_FLOAT32, &scalar),
    };
    const char *names[N] = {"arg:conv0_weight", "arg:conv0_bias", "arg:fc_weight",
                            "aux:bn_mean",      "aux:mask",       "arg:idx",
                            "arg:q",            "arg:half",       "arg:scalar"};
    char path[4096];
    snprintf(path, sizeof(path), "%s/from_us.params", dir);
    mx_status st = mx_ndarray_save(path, arrays, names, N);
    ck_assert_msg(st == MX_OK, "%s", mx_last_error());
    /* An unnamed list: the first and fourth arrays. */
    mx_ndarray *pair[2] = {arrays[0], arrays[3]};
    snprintf(path, sizeof(path), "%s/from_us_list.params", dir);
    st = mx_ndarray_save(path, pair, NULL, 2);
    ck_assert_msg(st == MX_OK, "%s", mx_last_error());
    free_arrays(arrays, N);
    printf("interop: wrote from_us.params and from_us_list.params\n");
}

START_TEST(test_interop_mxnet)
{
    const char *dir = getenv("MX_INTEROP_DIR");
    if (!dir || !*dir) {
        printf("interop: MX_INTEROP_DIR not set, skipped\n");
        return;
    }
    interop_check_mxnet_file(dir, "from_mxnet.params");
    interop_check_mxnet_file(dir, "from_mxnet_list.params");
    interop_check_mxnet_file(dir, "from_mxnet_np.params");
    interop_write_ours(dir);
    printf("interop: C side done\n");
    fflush(stdout);
}
END_TEST

/* ---------------------------------------------------------------- suite */

static Suite *ndarray_io_suite(void)
{
    Suite *s = suite_create("ndarray_io");
    TCase *tc = tcase_create("format");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_roundtrip_named);
    tcase_add_test(tc, test_roundtrip_unnamed);
    tcase_add_test(tc, test_roundtrip_half_types);
    tcase_add_test(tc, test_roundtrip_empty_list);
    tcase_add_test(tc, test_zero_size_and_scalar);
    tcase_add_test(tc, test_writer_matches_spec_v2);
    tcase_add_test(tc, test_load_spec_v1_example);
    tcase_add_test(tc, test_empty_entries_and_v3);
    tcase_add_test(tc, test_format_errors);
    tcase_add_test(tc, test_invalid_arguments);
    suite_add_tcase(s, tc);

    tc = tcase_create("fixtures");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_fixture_legacy_v0);
    tcase_add_test(tc, test_fixture_sagemaker_v2);
    suite_add_tcase(s, tc);

    tc = tcase_create("damage");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_truncation_saved);
    tcase_add_test(tc, test_truncation_fixtures);
    tcase_add_test(tc, test_corruption);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_file_roundtrip_and_atomic_replace);
    tcase_add_test(tc, test_file_errors);
    tcase_add_test(tc, test_save_waits_for_engine);
    tcase_add_test(tc, test_save_gpu_array);
    suite_add_tcase(s, tc);

    /* Run alone by scripts/interop/mxnet-params.sh (CK_RUN_CASE=interop). */
    tc = tcase_create("interop");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_interop_mxnet);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ndarray_io_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
