/* test_initializer.c - Xavier's fans, sample moments and bounds of every
 * random pattern on a large tensor, MXNet's name-suffix dispatch,
 * reproducibility for a seed, the dumps() JSON form, errors. */
#include "initializer/initializer.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static mx_runtime *make_runtime(int workers)
{
    mx_engine_config c = mx_engine_config_default();
    c.cpu_workers = workers;
    mx_runtime *rt = NULL;
    ck_assert_int_eq(mx_runtime_create(&c, &rt), MX_OK);
    return rt;
}

static mx_ndarray *new_array(mx_runtime *rt, mx_shape shape)
{
    mx_ndarray *a = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, shape, MX_FLOAT32, mx_cpu(), &a), MX_OK);
    return a;
}

static float *read_all(mx_ndarray *a)
{
    float *v = malloc(mx_ndarray_nbytes(a) + 1);
    ck_assert_int_eq(mx_ndarray_to_host(a, v, mx_ndarray_nbytes(a)), MX_OK);
    return v;
}

static void expect_error(mx_status got, mx_status want, const char *fragment)
{
    ck_assert_int_eq(got, want);
    if (fragment && !strstr(mx_last_error(), fragment))
        ck_abort_msg("error '%s' lacks '%s'", mx_last_error(), fragment);
}

static mx_initializer *make(const char *name, int n, const char *const *kv)
{
    const char *k[8] = {0}, *v[8] = {0};
    for (int i = 0; i < n; i++) k[i] = kv[2 * i], v[i] = kv[2 * i + 1];
    mx_initializer *init = NULL;
    ck_assert_msg(mx_initializer_create_kv(name, k, v, n, &init) == MX_OK, "%s", mx_last_error());
    return init;
}

START_TEST(xavier_fans)
{
    double in, out;
    mx_shape conv = MX_SHAPE(64, 32, 3, 3);
    ck_assert_int_eq(mx_init_xavier_fans(&conv, &in, &out), MX_OK);
    ck_assert_double_eq(in, 32 * 9);
    ck_assert_double_eq(out, 64 * 9);
    mx_shape fc = MX_SHAPE(10, 20);
    ck_assert_int_eq(mx_init_xavier_fans(&fc, &in, &out), MX_OK);
    ck_assert_double_eq(in, 20);
    ck_assert_double_eq(out, 10);
    mx_shape c3 = MX_SHAPE(2, 3, 4, 5, 6);
    ck_assert_int_eq(mx_init_xavier_fans(&c3, &in, &out), MX_OK);
    ck_assert_double_eq(in, 3 * 120);
    ck_assert_double_eq(out, 2 * 120);
    mx_shape vec = MX_SHAPE(5);
    expect_error(mx_init_xavier_fans(&vec, &in, &out), MX_ERR_INVALID, "at least 2 dimensions");
}
END_TEST

/* Fills a (256, 128, 3, 3) weight and checks bounds and moments. */
typedef struct moment_case {
    const char *name;
    const char *kv[6];
    int n;
    bool gaussian;
    double scale; /* uniform: bound; gaussian: std */
} moment_case;

/* fan_in = 128*9 = 1152, fan_out = 256*9 = 2304, avg = 1728. */
static const moment_case moment_cases[] = {
    {"xavier", {NULL}, 0, false, 0.041666666666666664 /* sqrt(3/1728) */},
    {"xavier", {"rnd_type", "gaussian", "factor_type", "in", "magnitude", "2"}, 3, true, 0.041666666666666664},
    {"xavier", {"rnd_type", "uniform", "factor_type", "out", "magnitude", "6"}, 3, false, 0.051031036307982884},
    {"msraprelu", {"slope", "0"}, 1, true, 0.034020690871988585 /* sqrt(2/1728) */},
    {"msra", {"factor_type", "in", "slope", "1"}, 2, true, 0.029462782549439476 /* sqrt(1/1152) */},
    {"uniform", {NULL}, 0, false, 0.07},
    {"uniform", {"scale", "0.5"}, 1, false, 0.5},
    {"normal", {NULL}, 0, true, 0.01},
    {"normal", {"sigma", "2"}, 1, true, 2},
};

START_TEST(random_patterns_have_the_right_moments)
{
    const moment_case *c = &moment_cases[_i];
    mx_runtime *rt = make_runtime(4);
    mx_rng *rng = NULL;
    ck_assert_int_eq(mx_rng_create(rt, 7 + (uint64_t)_i, &rng), MX_OK);
    mx_initializer *init = make(c->name, c->n, c->kv);
    mx_ndarray *w = new_array(rt, MX_SHAPE(256, 128, 3, 3));
    ck_assert_int_eq(mx_initializer_init(init, rng, "conv_weight", NULL, w), MX_OK);
    float *v = read_all(w);
    int64_t n = mx_ndarray_size(w);
    double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        sum += v[i];
        sq += (double)v[i] * v[i];
        lo = fmin(lo, v[i]);
        hi = fmax(hi, v[i]);
    }
    double mean = sum / (double)n, var = sq / (double)n - mean * mean;
    double want_var = c->gaussian ? c->scale * c->scale : c->scale * c->scale / 3.0;
    ck_assert_msg(fabs(mean) < 5 * sqrt(want_var / (double)n), "%s: mean %g", c->name, mean);
    ck_assert_msg(fabs(var / want_var - 1) < 0.02, "%s: variance %g, expected %g", c->name, var, want_var);
    if (!c->gaussian) {
        ck_assert_msg(lo >= -c->scale && hi <= c->scale, "%s: [%g, %g] outside +-%g", c->name, lo, hi, c->scale);
        ck_assert_msg(lo < -0.99 * c->scale && hi > 0.99 * c->scale, "%s: [%g, %g] does not fill +-%g", c->name, lo,
                      hi, c->scale);
    } else {
        /* About 0.27% beyond 3 sigma. */
        int64_t beyond = 0;
        for (int64_t i = 0; i < n; i++) beyond += fabs(v[i]) > 3 * c->scale;
        ck_assert_msg(fabs((double)beyond / (double)n - 0.0027) < 0.0006, "%s: %lld beyond 3 sigma", c->name,
                      (long long)beyond);
    }
    free(v);
    mx_ndarray_free(w);
    mx_initializer_free(init);
    mx_rng_free(rng);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(name_suffix_dispatch)
{
    mx_runtime *rt = make_runtime(2);
    mx_rng *rng = NULL;
    ck_assert_int_eq(mx_rng_create(rt, 1, &rng), MX_OK);
    const char *kv[] = {"value", "0.3"};
    mx_initializer *init = make("constant", 1, kv);
    struct {
        const char *name;
        float value;
    } rules[] = {
        {"fc1_weight", 0.3f},     {"fc1_bias", 0},       {"bn1_gamma", 1},         {"bn1_beta", 0},
        {"bn1_moving_mean", 0},   {"bn1_moving_var", 1}, {"bn1_moving_inv_var", 0}, {"x_moving_avg", 0},
        {"quant_min", 0},         {"quant_max", 1},
    };
    for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); r++) {
        mx_ndarray *a = new_array(rt, MX_SHAPE(3, 4));
        ck_assert_int_eq(mx_nd_fill(a, -7), MX_OK);
        ck_assert_msg(mx_initializer_init(init, rng, rules[r].name, NULL, a) == MX_OK, "%s", mx_last_error());
        float *v = read_all(a);
        for (int i = 0; i < 12; i++) ck_assert_msg(v[i] == rules[r].value, "%s: %g", rules[r].name, v[i]);
        free(v);
        mx_ndarray_free(a);
    }
    mx_init_pattern pat;
    ck_assert_int_eq(mx_init_pattern_for("conv0_weight", &pat), MX_OK);
    ck_assert_int_eq(pat, MX_INIT_PATTERN_WEIGHT);
    ck_assert_int_eq(mx_init_pattern_for("bn_moving_var", &pat), MX_OK);
    ck_assert_int_eq(pat, MX_INIT_PATTERN_ONE);
    mx_ndarray *a = new_array(rt, MX_SHAPE(4));
    expect_error(mx_initializer_init(init, rng, "data", NULL, a), MX_ERR_INVALID, "unknown initialization pattern");
    expect_error(mx_initializer_init(init, rng, "embed_table", NULL, a), MX_ERR_INVALID, "embed_table");
    /* An explicit initializer wins over the name, any name. */
    mx_initializer *bias_init = NULL;
    ck_assert_int_eq(mx_initializer_create_json("[\"constant\", {\"value\": 0.1}]", &bias_init), MX_OK);
    ck_assert_int_eq(mx_initializer_init(init, rng, "fc1_bias", bias_init, a), MX_OK);
    float *v = read_all(a);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(v[i], 0.1f);
    free(v);
    ck_assert_int_eq(mx_initializer_init(init, rng, "data", bias_init, a), MX_OK);
    /* Xavier refuses a vector weight, naming it. */
    mx_initializer *xavier = make("xavier", 0, NULL);
    expect_error(mx_initializer_init(xavier, rng, "fc_weight", NULL, a), MX_ERR_INVALID, "fc_weight");
    /* Random patterns need float arrays; fills take any dtype. */
    mx_ndarray *ints = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 2), MX_INT32, mx_cpu(), &ints), MX_OK);
    expect_error(mx_initializer_init(xavier, rng, "i_weight", NULL, ints), MX_ERR_UNSUPPORTED, "int32");
    ck_assert_int_eq(mx_initializer_init(xavier, rng, "i_gamma", NULL, ints), MX_OK);
    int32_t iv[4];
    ck_assert_int_eq(mx_ndarray_to_host(ints, iv, sizeof(iv)), MX_OK);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(iv[i], 1);
    mx_ndarray_free(ints);
    mx_ndarray_free(a);
    mx_initializer_free(bias_init);
    mx_initializer_free(xavier);
    mx_initializer_free(init);
    mx_rng_free(rng);
    mx_runtime_free(rt);
}
END_TEST

/* Initializes three weights with a seed on a runtime of `workers`. */
static void seeded_values(int workers, uint64_t seed, float *out, int64_t n)
{
    mx_runtime *rt = make_runtime(workers);
    mx_rng *rng = NULL;
    ck_assert_int_eq(mx_rng_create(rt, seed, &rng), MX_OK);
    const char *kv[] = {"rnd_type", "gaussian", "magnitude", "2"};
    mx_initializer *init = make("xavier", 2, kv);
    mx_ndarray *w[3];
    for (int k = 0; k < 3; k++) {
        w[k] = new_array(rt, MX_SHAPE(16, 8, 2, 2));
        ck_assert_int_eq(mx_initializer_init(init, rng, "conv_weight", NULL, w[k]), MX_OK);
    }
    int64_t each = n / 3;
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(mx_ndarray_to_host(w[k], out + k * each, sizeof(float) * (size_t)each), MX_OK);
        mx_ndarray_free(w[k]);
    }
    mx_initializer_free(init);
    mx_rng_free(rng);
    mx_runtime_free(rt);
}

START_TEST(seeded_initialization_is_reproducible)
{
    enum { N = 3 * 512 };
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N), *c = malloc(sizeof(float) * N);
    seeded_values(1, 42, a, N);
    seeded_values(8, 42, b, N);
    seeded_values(4, 43, c, N);
    ck_assert(!memcmp(a, b, sizeof(float) * N));
    ck_assert(memcmp(a, c, sizeof(float) * N));
    /* The three weights differ from each other (the stream advances). */
    ck_assert(memcmp(a, a + 512, sizeof(float) * 512));
    free(a);
    free(b);
    free(c);
}
END_TEST

START_TEST(gpu_arrays_are_drawn_on_the_cpu)
{
    mx_runtime *rt = make_runtime(2);
    mx_ndarray *g = NULL;
    if (mx_ndarray_create(rt, MX_SHAPE(32, 16), MX_FLOAT32, mx_gpu(0), &g) != MX_OK) {
        mx_runtime_free(rt);
        return; /* no GPU here */
    }
    mx_ndarray *c = new_array(rt, MX_SHAPE(32, 16)), *back = new_array(rt, MX_SHAPE(32, 16));
    mx_rng *r1 = NULL, *r2 = NULL;
    ck_assert_int_eq(mx_rng_create(rt, 5, &r1), MX_OK);
    ck_assert_int_eq(mx_rng_create(rt, 5, &r2), MX_OK);
    mx_initializer *init = make("xavier", 0, NULL);
    ck_assert_int_eq(mx_initializer_init(init, r1, "fc_weight", NULL, g), MX_OK);
    ck_assert_int_eq(mx_initializer_init(init, r2, "fc_weight", NULL, c), MX_OK);
    ck_assert_int_eq(mx_nd_copy(back, g), MX_OK);
    float *x = read_all(back), *y = read_all(c);
    ck_assert(!memcmp(x, y, 32 * 16 * sizeof(float)));
    free(x);
    free(y);
    mx_ndarray_free(g);
    mx_ndarray_free(c);
    mx_ndarray_free(back);
    mx_initializer_free(init);
    mx_rng_free(r1);
    mx_rng_free(r2);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(json_form_and_defaults)
{
    mx_initializer_params p;
    ck_assert_int_eq(mx_initializer_defaults("xavier", &p), MX_OK);
    ck_assert_int_eq(p.rnd_type, MX_INIT_UNIFORM_RND);
    ck_assert_int_eq(p.factor_type, MX_INIT_AVG);
    ck_assert_double_eq(p.magnitude, 3);
    ck_assert_int_eq(mx_initializer_defaults("MSRAPrelu", &p), MX_OK);
    ck_assert_int_eq(p.factor_type, MX_INIT_AVG);
    ck_assert_double_eq(p.slope, 0.25);
    ck_assert_int_eq(mx_initializer_defaults("uniform", &p), MX_OK);
    ck_assert_double_eq(p.scale, 0.07);
    ck_assert_int_eq(mx_initializer_defaults("normal", &p), MX_OK);
    ck_assert_double_eq(p.sigma, 0.01);

    mx_initializer *init = NULL;
    ck_assert_int_eq(
        mx_initializer_create_json("[\"xavier\", {\"rnd_type\": \"gaussian\", \"factor_type\": \"in\", \"magnitude\": 2}]",
                                   &init),
        MX_OK);
    ck_assert_int_eq(mx_initializer_get_params(init)->rnd_type, MX_INIT_GAUSSIAN_RND);
    ck_assert_int_eq(mx_initializer_get_params(init)->factor_type, MX_INIT_IN);
    ck_assert_double_eq(mx_initializer_get_params(init)->magnitude, 2);
    char buf[256];
    ck_assert_str_eq(mx_initializer_dumps(init, buf, sizeof(buf)),
                     "[\"xavier\", {\"rnd_type\": \"gaussian\", \"factor_type\": \"in\", \"magnitude\": 2}]");
    mx_initializer_free(init);
    ck_assert_int_eq(mx_initializer_create_json("[\"normal\", {\"sigma\": \"0.02\"}]", &init), MX_OK);
    ck_assert_double_eq(mx_initializer_get_params(init)->sigma, 0.02);
    ck_assert_str_eq(mx_initializer_dumps(init, buf, sizeof(buf)), "[\"normal\", {\"sigma\": 0.02}]");
    mx_initializer_free(init);
    ck_assert_int_eq(mx_initializer_create_json("[\"msra\", {\"slope\": 0.1}]", &init), MX_OK);
    ck_assert_str_eq(mx_initializer_name(init), "msraprelu");
    ck_assert_str_eq(mx_initializer_dumps(init, buf, sizeof(buf)), "[\"msraprelu\", {\"factor_type\": \"avg\", \"slope\": 0.1}]");
    mx_initializer_free(init);
    ck_assert_int_eq(mx_initializer_create_json("[\"zero\", {}]", &init), MX_OK);
    ck_assert_str_eq(mx_initializer_dumps(init, buf, sizeof(buf)), "[\"zero\", {}]");
    mx_initializer_free(init);
    ck_assert_int_eq(mx_initializer_create_json("[\"ones\"]", &init), MX_OK);
    ck_assert_str_eq(mx_initializer_name(init), "one");
    mx_initializer_free(init);

    expect_error(mx_initializer_create_json("[\"xavir\", {}]", &init), MX_ERR_INVALID, "did you mean 'xavier'");
    expect_error(mx_initializer_create_json("{\"xavier\": 1}", &init), MX_ERR_INVALID, "expected");
    expect_error(mx_initializer_create_json("[\"xavier\", {\"magnitude\": [1]}]", &init), MX_ERR_INVALID, "magnitude");
    expect_error(mx_initializer_create_json("[\"xavier\", {", &init), MX_ERR_INVALID, NULL);
    const char *k1[] = {"magnitud"}, *v1[] = {"2"};
    expect_error(mx_initializer_create_kv("xavier", k1, v1, 1, &init), MX_ERR_INVALID, "did you mean 'magnitude'");
    const char *k2[] = {"rnd_type"}, *v2[] = {"gausian"};
    expect_error(mx_initializer_create_kv("xavier", k2, v2, 1, &init), MX_ERR_INVALID, "did you mean 'gaussian'");
    expect_error(mx_initializer_create_kv("constant", NULL, NULL, 0, &init), MX_ERR_INVALID, "required parameter 'value'");
    const char *k3[] = {"scale"}, *v3[] = {"-1"};
    expect_error(mx_initializer_create_kv("uniform", k3, v3, 1, &init), MX_ERR_INVALID, "scale");
    ck_assert_int_eq(mx_initializer_defaults("normal", &p), MX_OK);
    p.sigma = -1;
    expect_error(mx_initializer_create("normal", &p, &init), MX_ERR_INVALID, "sigma");
    ck_assert_ptr_null(init);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("initializer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, xavier_fans);
    tcase_add_loop_test(tc, random_patterns_have_the_right_moments, 0,
                        (int)(sizeof(moment_cases) / sizeof(moment_cases[0])));
    tcase_add_test(tc, name_suffix_dispatch);
    tcase_add_test(tc, seeded_initialization_is_reproducible);
    tcase_add_test(tc, gpu_arrays_are_drawn_on_the_cpu);
    tcase_add_test(tc, json_form_and_defaults);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
