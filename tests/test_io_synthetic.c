/*
 * test_io_synthetic.c - the synthetic iterator (MXNet's SyntheticDataIter,
 * fit.py --benchmark 1): shapes, the one batch's values against the
 * project's own generator (mx_rng: xoshiro256** seeded by splitmix64 from
 * seed ^ part_index << 32), determinism, partitioning, the number of
 * batches and the pad of the last one with and without round_batch,
 * epochs through reset(), a pushed copy that outlives the batch, and
 * parameter errors that name the key.
 */
#include "io/io.h"

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(expr)                                                                 \
    do {                                                                         \
        mx_status ok_st_ = (expr);                                               \
        ck_assert_msg(ok_st_ == MX_OK, "%s failed: %s", #expr, mx_last_error()); \
    } while (0)

static mx_runtime *rt_new(void)
{
    mx_runtime *rt = NULL;
    OK(mx_runtime_create(NULL, &rt));
    return rt;
}

/* keys/values as "k=v" strings. */
static mx_status make_iter(mx_runtime *rt, const char *const *kv, int n, mx_data_iter **it)
{
    char *copy[16];
    const char *k[16] = {0}, *v[16] = {0};
    ck_assert_int_le(n, 16);
    for (int i = 0; i < n; i++) {
        copy[i] = strdup(kv[i]);
        ck_assert_ptr_nonnull(copy[i]);
        char *eq = strchr(copy[i], '=');
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        k[i] = copy[i];
        v[i] = eq + 1;
    }
    mx_status s = mx_data_iter_create(rt, "synthetic", k, v, n, it);
    for (int i = 0; i < n; i++) free(copy[i]);
    return s;
}

/* An iterator from a printf-formatted, space-separated "k=v k=v" list. */
static mx_status make_iterf(mx_runtime *rt, mx_data_iter **it, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mx_status make_iterf(mx_runtime *rt, mx_data_iter **it, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    const char *kv[16];
    int n = 0;
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        ck_assert_int_lt(n, 16);
        kv[n++] = tok;
    }
    return make_iter(rt, kv, n, it);
}

/* One batch copied to the host. */
typedef struct host_batch {
    float *data, *label;
    int64_t nd, nl;
    int pad;
    uint64_t *index; /* NULL when the batch had none */
} host_batch;

static void host_batch_free(host_batch *b)
{
    free(b->data);
    free(b->label);
    free(b->index);
    memset(b, 0, sizeof(*b));
}

/* Next batch; false at the end of the epoch. */
static bool next_host(mx_data_iter *it, host_batch *out)
{
    mx_data_batch b;
    bool has;
    OK(mx_data_iter_next(it, &b, &has));
    if (!has) return false;
    out->nd = mx_ndarray_size(b.data);
    out->nl = mx_ndarray_size(b.label);
    out->data = malloc((size_t)out->nd * sizeof(float));
    out->label = malloc((size_t)out->nl * sizeof(float));
    ck_assert(out->data && out->label);
    OK(mx_ndarray_to_host(b.data, out->data, (size_t)out->nd * sizeof(float)));
    OK(mx_ndarray_to_host(b.label, out->label, (size_t)out->nl * sizeof(float)));
    out->pad = b.pad;
    out->index = NULL;
    if (b.index) {
        int64_t bs = mx_ndarray_shape(b.data)->dims[0];
        out->index = malloc((size_t)bs * sizeof(uint64_t));
        ck_assert_ptr_nonnull(out->index);
        memcpy(out->index, b.index, (size_t)bs * sizeof(uint64_t));
    }
    return true;
}

/* The first batch of a fresh iterator. */
static host_batch first_batch(mx_runtime *rt, const char *args)
{
    mx_data_iter *it;
    OK(make_iterf(rt, &it, "%s", args));
    host_batch b;
    ck_assert(next_host(it, &b));
    mx_data_iter_free(it);
    return b;
}

static void expect_msg(const char *needle)
{
    ck_assert_msg(strstr(mx_last_error(), needle) != NULL, "message '%s' lacks '%s'", mx_last_error(), needle);
}

/* ------------------------------------------------------------ the oracle */

typedef struct draw_job {
    mx_rng *rng;
    uint64_t *out;
    int64_t n;
} draw_job;

static mx_status draw_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    draw_job *j = payload;
    for (int64_t i = 0; i < j->n; i++) j->out[i] = mx_rng_next_u64(j->rng);
    return MX_OK;
}

/* The first n raw draws of the project's generator (lib/ndarray/random.c)
 * seeded with key, drawn inside an engine op that writes the generator, as
 * ndarray.h asks. */
static uint64_t *reference_draws(mx_runtime *rt, uint64_t key, int64_t n)
{
    mx_rng *rng;
    OK(mx_rng_create(rt, key, &rng));
    uint64_t *out = malloc((size_t)n * sizeof(uint64_t));
    ck_assert_ptr_nonnull(out);
    draw_job job = {rng, out, n};
    mx_engine_var *writes[1] = {mx_rng_var(rng)};
    mx_engine_op op = {.fn = draw_fn, .payload = &job, .writes = writes, .n_writes = 1, .ctx = mx_cpu(),
                       .name = "reference_draws"};
    mx_engine *e = mx_runtime_engine(rt);
    OK(mx_engine_push(e, &op));
    OK(mx_engine_wait_var(e, mx_rng_var(rng)));
    mx_rng_free(rng);
    return out;
}

/* Checks a batch of nd data and nl labels against the documented draw
 * order: data first, -1 + (u >> 40) * 2^-23; then labels u % num_classes
 * (rejection is taken with probability num_classes / 2^64: never here). */
static void expect_reference(mx_runtime *rt, const host_batch *b, int64_t seed, int64_t part_index,
                             int64_t num_classes)
{
    uint64_t key = (uint64_t)seed ^ ((uint64_t)part_index << 32);
    uint64_t *u = reference_draws(rt, key, b->nd + b->nl);
    for (int64_t i = 0; i < b->nd; i++) {
        float want = (float)((double)(u[i] >> 40) / 8388608.0 - 1.0);
        ck_assert_msg(b->data[i] == want, "seed %lld part %lld: data[%lld] = %.9g, want %.9g", (long long)seed,
                      (long long)part_index, (long long)i, b->data[i], want);
    }
    for (int64_t i = 0; i < b->nl; i++) {
        float want = (float)(u[b->nd + i] % (uint64_t)num_classes);
        ck_assert_msg(b->label[i] == want, "seed %lld part %lld: label[%lld] = %g, want %g", (long long)seed,
                      (long long)part_index, (long long)i, b->label[i], want);
    }
    free(u);
}

/* ------------------------------------------------------------ tests */

START_TEST(test_registered)
{
    ck_assert_ptr_nonnull(mx_data_iter_kind_find("synthetic"));
    const mx_data_iter_kind *k;
    ck_assert_int_eq(mx_data_iter_kind_lookup("synthetc", &k), MX_ERR_INVALID);
    expect_msg("did you mean 'synthetic'");
}
END_TEST

/* The batches live in the runtime's host context: cpu(0) by default,
 * cpu_pinned when the runtime says so (mxtrain does for GPU contexts);
 * pinned arrays are host memory every host path reads. */
START_TEST(test_batches_in_host_context)
{
    for (int pinned = 0; pinned < 2; pinned++) {
        mx_runtime *rt = rt_new();
        if (pinned) OK(mx_runtime_set_host_context(rt, mx_cpu_pinned()));
        ck_assert_int_eq(mx_runtime_set_host_context(rt, mx_gpu(0)), MX_ERR_INVALID);
        mx_data_iter *it;
        OK(make_iterf(rt, &it, "data_shape=(2,3) num_classes=4 num_samples=8 batch_size=4"));
        mx_data_batch batch;
        bool has;
        OK(mx_data_iter_next(it, &batch, &has));
        ck_assert(has);
        ck_assert_int_eq(mx_ndarray_context(batch.data).dev_type, pinned ? MX_DEV_CPU_PINNED : MX_DEV_CPU);
        ck_assert_int_eq(mx_ndarray_context(batch.label).dev_type, pinned ? MX_DEV_CPU_PINNED : MX_DEV_CPU);
        /* Copied to a cpu array and read on the host: the same values. */
        float direct[24], copied[24];
        mx_ndarray *c;
        OK(mx_ndarray_create(rt, *mx_ndarray_shape(batch.data), MX_FLOAT32, mx_cpu(), &c));
        OK(mx_nd_copy(c, batch.data));
        OK(mx_ndarray_to_host(batch.data, direct, sizeof(direct)));
        OK(mx_ndarray_to_host(c, copied, sizeof(copied)));
        ck_assert_int_eq(memcmp(direct, copied, sizeof(direct)), 0);
        mx_ndarray_free(c);
        mx_data_iter_free(it);
        mx_runtime_free(rt);
    }
}
END_TEST

START_TEST(test_shapes)
{
    mx_runtime *rt = rt_new();
    static const struct {
        const char *shape;
        int64_t batch;
        mx_shape data;
    } cases[] = {
        {"(3,4,5)", 6, {4, {6, 3, 4, 5}}},
        {"(7,)", 2, {2, {2, 7}}},
        {"9", 1, {2, {1, 9}}},
        {"(1,1)", 3, {3, {3, 1, 1}}},
        {"(2,1,2,1,2,1,2)", 5, {8, {5, 2, 1, 2, 1, 2, 1, 2}}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        mx_data_iter *it;
        OK(make_iterf(rt, &it, "data_shape=%s num_classes=10 num_samples=100 batch_size=%lld", cases[c].shape,
                      (long long)cases[c].batch));
        mx_shape ds = mx_data_iter_data_shape(it), ls = mx_data_iter_label_shape(it);
        mx_shape wl = MX_SHAPE(cases[c].batch);
        char a[64], b[64];
        ck_assert_msg(mx_shape_equal(&ds, &cases[c].data), "data_shape=%s: got %s, want %s", cases[c].shape,
                      mx_shape_str(&ds, a, sizeof(a)), mx_shape_str(&cases[c].data, b, sizeof(b)));
        ck_assert(mx_shape_equal(&ls, &wl));
        ck_assert_int_eq(mx_data_iter_num_samples(it), 100);
        /* The batch arrays have exactly those shapes. */
        mx_data_batch batch;
        bool has;
        OK(mx_data_iter_next(it, &batch, &has));
        ck_assert(has);
        ck_assert(mx_shape_equal(mx_ndarray_shape(batch.data), &cases[c].data));
        ck_assert(mx_shape_equal(mx_ndarray_shape(batch.label), &wl));
        ck_assert_int_eq(mx_ndarray_dtype(batch.data), MX_FLOAT32);
        ck_assert_int_eq(mx_ndarray_dtype(batch.label), MX_FLOAT32);
        mx_data_iter_free(it);
    }
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_values_in_range_and_as_documented)
{
    mx_runtime *rt = rt_new();
    /* 4000 x 3 values: the range, both halves of it, and the labels. */
    host_batch b = first_batch(rt, "data_shape=(3,) num_classes=7 num_samples=4000 batch_size=4000 seed=5");
    ck_assert_int_eq(b.nd, 12000);
    ck_assert_int_eq(b.nl, 4000);
    double sum = 0, lo = 1, hi = -1;
    for (int64_t i = 0; i < b.nd; i++) {
        ck_assert_msg(b.data[i] >= -1.0f && b.data[i] < 1.0f, "data[%lld] = %.9g", (long long)i, b.data[i]);
        sum += b.data[i];
        lo = fmin(lo, b.data[i]);
        hi = fmax(hi, b.data[i]);
    }
    /* Uniform on [-1, 1): mean 0 (sd of the mean 0.0053), extremes near both ends. */
    ck_assert_msg(fabs(sum / (double)b.nd) < 0.03, "mean %g", sum / (double)b.nd);
    ck_assert_msg(lo < -0.99 && hi > 0.99, "range [%g, %g]", lo, hi);
    int count[7] = {0};
    for (int64_t i = 0; i < b.nl; i++) {
        float l = b.label[i];
        ck_assert_msg(l == floorf(l) && l >= 0 && l < 7, "label[%lld] = %g", (long long)i, l);
        count[(int)l]++;
    }
    for (int c = 0; c < 7; c++) ck_assert_msg(count[c] > 400 && count[c] < 750, "class %d drawn %d times", c, count[c]);
    expect_reference(rt, &b, 5, 0, 7);
    host_batch_free(&b);

    /* The documented generator and key for other seeds and parts. */
    b = first_batch(rt, "data_shape=(2,3) num_classes=1000 num_samples=50 batch_size=8");
    expect_reference(rt, &b, 0, 0, 1000);
    host_batch_free(&b);
    b = first_batch(rt, "data_shape=(5,) num_classes=3 num_samples=90 batch_size=4 seed=4294967295 num_parts=3 "
                        "part_index=2");
    expect_reference(rt, &b, 4294967295, 2, 3);
    host_batch_free(&b);
    b = first_batch(rt, "data_shape=(5,) num_classes=16777216 num_samples=90 batch_size=4 seed=-1");
    expect_reference(rt, &b, -1, 0, 16777216);
    host_batch_free(&b);
    /* One class: every label 0. */
    b = first_batch(rt, "data_shape=(1,) num_classes=1 num_samples=9 batch_size=9 seed=3");
    for (int64_t i = 0; i < b.nl; i++) ck_assert(b.label[i] == 0.0f);
    host_batch_free(&b);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_determinism_and_parts_differ)
{
    mx_runtime *rt = rt_new();
    const char *base = "data_shape=(3,8,8) num_classes=10 num_samples=64 batch_size=4";
    char args[256];
    snprintf(args, sizeof(args), "%s seed=11", base);
    host_batch a = first_batch(rt, args), b = first_batch(rt, args);
    ck_assert_int_eq(a.nd, b.nd);
    ck_assert_int_eq(memcmp(a.data, b.data, (size_t)a.nd * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a.label, b.label, (size_t)a.nl * sizeof(float)), 0);
    snprintf(args, sizeof(args), "%s seed=12", base);
    host_batch c = first_batch(rt, args);
    ck_assert_int_ne(memcmp(a.data, c.data, (size_t)a.nd * sizeof(float)), 0);
    ck_assert_int_ne(memcmp(a.label, c.label, (size_t)a.nl * sizeof(float)), 0);
    /* The default seed is 0. */
    host_batch d = first_batch(rt, base);
    snprintf(args, sizeof(args), "%s seed=0", base);
    host_batch e = first_batch(rt, args);
    ck_assert_int_eq(memcmp(d.data, e.data, (size_t)d.nd * sizeof(float)), 0);
    ck_assert_int_ne(memcmp(a.data, d.data, (size_t)a.nd * sizeof(float)), 0);
    /* Parts differ from each other; part 0 draws what one part draws. */
    host_batch parts[3];
    for (int p = 0; p < 3; p++) {
        snprintf(args, sizeof(args), "%s seed=11 num_parts=3 part_index=%d", base, p);
        parts[p] = first_batch(rt, args);
    }
    ck_assert_int_eq(memcmp(parts[0].data, a.data, (size_t)a.nd * sizeof(float)), 0);
    for (int p = 0; p < 3; p++)
        for (int q = p + 1; q < 3; q++) {
            ck_assert_msg(memcmp(parts[p].data, parts[q].data, (size_t)a.nd * sizeof(float)) != 0,
                          "parts %d and %d have the same data", p, q);
            ck_assert_msg(memcmp(parts[p].label, parts[q].label, (size_t)a.nl * sizeof(float)) != 0,
                          "parts %d and %d have the same labels", p, q);
        }
    host_batch_free(&a);
    host_batch_free(&b);
    host_batch_free(&c);
    host_batch_free(&d);
    host_batch_free(&e);
    for (int p = 0; p < 3; p++) host_batch_free(&parts[p]);
    mx_runtime_free(rt);
}
END_TEST

/* Reads one epoch, checking every batch against `ref` (the same data and
 * labels every time) and recording pads and ids; returns the batch count. */
static int read_epoch(mx_data_iter *it, const host_batch *ref, int *pads, uint64_t *ids, int max_batches)
{
    int nb = 0;
    host_batch b;
    while (next_host(it, &b)) {
        ck_assert_int_lt(nb, max_batches);
        ck_assert_int_eq(b.nd, ref->nd);
        ck_assert_int_eq(memcmp(b.data, ref->data, (size_t)b.nd * sizeof(float)), 0);
        ck_assert_int_eq(memcmp(b.label, ref->label, (size_t)b.nl * sizeof(float)), 0);
        pads[nb] = b.pad;
        ck_assert_ptr_nonnull(b.index);
        memcpy(ids + nb * b.nl, b.index, (size_t)b.nl * sizeof(uint64_t));
        nb++;
        host_batch_free(&b);
    }
    return nb;
}

START_TEST(test_epochs_round_batch)
{
    mx_runtime *rt = rt_new();
    const char *args = "data_shape=(2,) num_classes=5 num_samples=10 batch_size=4 seed=9";
    host_batch ref = first_batch(rt, args);
    mx_data_iter *it;
    OK(make_iterf(rt, &it, "%s", args));
    ck_assert_int_eq(mx_data_iter_num_samples(it), 10);
    /* ceil(10 / 4) = 3 batches, the last padded by 2 with ids wrapping to 0, 1. */
    const uint64_t want_ids[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1};
    for (int epoch = 0; epoch < 3; epoch++) {
        int pads[8];
        uint64_t ids[32];
        ck_assert_int_eq(read_epoch(it, &ref, pads, ids, 8), 3);
        ck_assert_int_eq(pads[0], 0);
        ck_assert_int_eq(pads[1], 0);
        ck_assert_int_eq(pads[2], 2);
        for (int i = 0; i < 12; i++) ck_assert_uint_eq(ids[i], want_ids[i]);
        /* Past the end it stays at the end. */
        host_batch b;
        ck_assert(!next_host(it, &b));
        ck_assert(!next_host(it, &b));
        OK(mx_data_iter_reset(it));
    }
    /* A reset mid-epoch starts the next one from its first batch. */
    host_batch b;
    ck_assert(next_host(it, &b));
    host_batch_free(&b);
    OK(mx_data_iter_reset(it));
    int pads[8];
    uint64_t ids[32];
    ck_assert_int_eq(read_epoch(it, &ref, pads, ids, 8), 3);
    ck_assert_uint_eq(ids[0], 0);
    mx_data_iter_free(it);

    /* A multiple of the batch: no padding. */
    OK(make_iterf(rt, &it, "data_shape=(2,) num_classes=5 num_samples=12 batch_size=4 seed=9"));
    ck_assert_int_eq(read_epoch(it, &ref, pads, ids, 8), 3);
    ck_assert(pads[0] == 0 && pads[1] == 0 && pads[2] == 0);
    mx_data_iter_free(it);

    /* Fewer samples than one batch: one batch, padded, ids wrapping. */
    host_batch small = first_batch(rt, "data_shape=(2,) num_classes=5 num_samples=3 batch_size=8");
    OK(make_iterf(rt, &it, "data_shape=(2,) num_classes=5 num_samples=3 batch_size=8"));
    ck_assert_int_eq(mx_data_iter_num_samples(it), 3);
    ck_assert_int_eq(read_epoch(it, &small, pads, ids, 8), 1);
    ck_assert_int_eq(pads[0], 5);
    const uint64_t wrap[8] = {0, 1, 2, 0, 1, 2, 0, 1};
    for (int i = 0; i < 8; i++) ck_assert_uint_eq(ids[i], wrap[i]);
    mx_data_iter_free(it);
    host_batch_free(&small);
    host_batch_free(&ref);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_epochs_no_round_batch)
{
    mx_runtime *rt = rt_new();
    const char *args = "data_shape=(2,) num_classes=5 num_samples=10 batch_size=4 round_batch=False";
    host_batch ref = first_batch(rt, args);
    mx_data_iter *it;
    OK(make_iterf(rt, &it, "%s", args));
    ck_assert_int_eq(mx_data_iter_num_samples(it), 10);
    for (int epoch = 0; epoch < 2; epoch++) {
        int pads[8];
        uint64_t ids[32];
        /* floor(10 / 4) = 2 full batches; samples 8 and 9 dropped. */
        ck_assert_int_eq(read_epoch(it, &ref, pads, ids, 8), 2);
        ck_assert(pads[0] == 0 && pads[1] == 0);
        for (int i = 0; i < 8; i++) ck_assert_uint_eq(ids[i], (uint64_t)i);
        OK(mx_data_iter_reset(it));
    }
    mx_data_iter_free(it);
    /* round_batch changes only the epoch, not the batch. */
    host_batch rb = first_batch(rt, "data_shape=(2,) num_classes=5 num_samples=10 batch_size=4 round_batch=1");
    ck_assert_int_eq(memcmp(rb.data, ref.data, (size_t)ref.nd * sizeof(float)), 0);
    host_batch_free(&rb);
    /* No full batch: an error at create rather than an empty epoch. */
    ck_assert_int_eq(make_iterf(rt, &it, "data_shape=(2,) num_classes=5 num_samples=3 batch_size=4 round_batch=0"),
                     MX_ERR_INVALID);
    expect_msg("batch_size 4");
    expect_msg("round_batch");
    host_batch_free(&ref);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_partition)
{
    mx_runtime *rt = rt_new();
    for (int round = 0; round < 2; round++)
        for (int parts = 1; parts <= 9; parts++) {
            int seen[23] = {0};
            int64_t total = 0;
            for (int part = 0; part < parts; part++) {
                mx_data_iter *it;
                OK(make_iterf(rt, &it,
                              "data_shape=(1,) num_classes=2 num_samples=23 batch_size=2 num_parts=%d part_index=%d "
                              "round_batch=%d",
                              parts, part, round));
                int64_t n = mx_data_iter_num_samples(it);
                total += n;
                int64_t expect_batches = round ? (n + 1) / 2 : n / 2, nb = 0;
                host_batch b;
                while (next_host(it, &b)) {
                    ck_assert_ptr_nonnull(b.index);
                    for (int64_t i = 0; i < 2 - b.pad; i++) {
                        ck_assert_uint_lt(b.index[i], 23);
                        seen[b.index[i]]++;
                    }
                    nb++;
                    host_batch_free(&b);
                }
                ck_assert_int_eq(nb, expect_batches);
                mx_data_iter_free(it);
            }
            ck_assert_msg(total == 23, "parts=%d: num_samples() sum to %lld", parts, (long long)total);
            /* Every sample once over the parts (round_batch), or all but the
             * odd one of each part (no round_batch). */
            int once = 0;
            for (int i = 0; i < 23; i++) {
                ck_assert_msg(seen[i] <= 1, "parts=%d: sample %d seen %d times", parts, i, seen[i]);
                once += seen[i];
            }
            if (round) ck_assert_int_eq(once, 23);
        }
    mx_runtime_free(rt);
}
END_TEST

/* A consumer's pushed copy of a batch is not changed by later next() and
 * reset() calls (the arrays are never written after create). */
START_TEST(test_pushed_copy_survives)
{
    mx_runtime *rt = rt_new();
    mx_data_iter *it;
    OK(make_iterf(rt, &it, "data_shape=(16,16) num_classes=10 num_samples=40 batch_size=8 seed=2"));
    mx_data_batch b;
    bool has;
    OK(mx_data_iter_next(it, &b, &has));
    ck_assert(has);
    mx_ndarray *copy, *lcopy;
    OK(mx_ndarray_create(rt, *mx_ndarray_shape(b.data), MX_FLOAT32, mx_cpu(), &copy));
    OK(mx_ndarray_create(rt, *mx_ndarray_shape(b.label), MX_FLOAT32, mx_cpu(), &lcopy));
    OK(mx_nd_copy(copy, b.data));
    OK(mx_nd_copy(lcopy, b.label));
    for (int i = 0; i < 20; i++) {
        OK(mx_data_iter_next(it, &b, &has));
        if (!has) OK(mx_data_iter_reset(it));
    }
    float got[2048], want[2048], gl[8], wl[8];
    OK(mx_ndarray_to_host(copy, got, sizeof(got)));
    OK(mx_ndarray_to_host(lcopy, gl, sizeof(gl)));
    mx_ndarray_free(copy);
    mx_ndarray_free(lcopy);
    mx_data_iter_free(it);
    host_batch ref = first_batch(rt, "data_shape=(16,16) num_classes=10 num_samples=40 batch_size=8 seed=2");
    memcpy(want, ref.data, sizeof(want));
    memcpy(wl, ref.label, sizeof(wl));
    ck_assert_int_eq(memcmp(got, want, sizeof(got)), 0);
    ck_assert_int_eq(memcmp(gl, wl, sizeof(gl)), 0);
    host_batch_free(&ref);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_bad_parameters)
{
    mx_runtime *rt = rt_new();
    mx_data_iter *it = NULL;
    static const struct {
        const char *args;
        const char *needles[2];
    } cases[] = {
        {"num_classes=10 num_samples=10 batch_size=2", {"'data_shape' is missing", NULL}},
        {"data_shape=(3,) num_samples=10 batch_size=2", {"'num_classes' is missing", NULL}},
        {"data_shape=(3,) num_classes=10 batch_size=2", {"'num_samples' is missing", NULL}},
        {"data_shape=(3,) num_classes=10 num_samples=10", {"'batch_size' is missing", NULL}},
        {"data_shape=(3,) num_classes=0 num_samples=10 batch_size=2", {"num_classes", "'0'"}},
        {"data_shape=(3,) num_classes=16777217 num_samples=10 batch_size=2", {"num_classes", "16777217"}},
        {"data_shape=(3,) num_classes=10 num_samples=0 batch_size=2", {"num_samples", "'0'"}},
        {"data_shape=(3,) num_classes=10 num_samples=10 batch_size=0", {"batch_size", "'0'"}},
        {"data_shape=(3,0) num_classes=10 num_samples=10 batch_size=2", {"data_shape", "(3,0)"}},
        {"data_shape=() num_classes=10 num_samples=10 batch_size=2", {"'data_shape': ()", "1 to 7"}},
        {"data_shape=(1,1,1,1,1,1,1,1) num_classes=10 num_samples=10 batch_size=2", {"data_shape", "1 to 7"}},
        {"data_shape=(65536,65536) num_classes=10 num_samples=10 batch_size=2", {"data_shape", "too large"}},
        {"data_shape=(3,) num_classes=10 num_samples=10 batch_size=2 num_parts=2 part_index=2",
         {"'part_index': 2", "num_parts 2"}},
        {"data_shape=(3,) num_classes=10 num_samples=10 batch_size=2 num_parts=0", {"num_parts", "'0'"}},
        {"data_shape=(3,) num_classes=10 num_samples=3 batch_size=2 num_parts=4 part_index=0",
         {"no samples", "num_parts 4"}},
        {"data_shape=(3,) num_classes=10 num_samples=10 batch_size=2 seed=4294967296", {"seed", "4294967296"}},
        {"data_shape=(3,) num_classes=10 num_samples=10 batch_size=2 round_batch=maybe", {"round_batch", "maybe"}},
        {"data_shape=(3,) num_classes=10 num_samples=10 batch_size=2 num_class=3", {"'num_class'", "num_classes"}},
        /* No accepted-and-ignored keys. */
        {"data_shape=(3,) num_classes=10 num_samples=10 batch_size=2 prefetch_buffer=4", {"prefetch_buffer", NULL}},
        {"data_shape=(3,) num_classes=10 num_samples=10 batch_size=2 ctx=cpu", {"'ctx'", NULL}},
        {"data_shape=(3,) num_classes=10 num_samples=10 batch_size=2 dtype=float32", {"'dtype'", NULL}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        mx_status s = make_iterf(rt, &it, "%s", cases[c].args);
        ck_assert_msg(s == MX_ERR_INVALID, "'%s': status %d (%s)", cases[c].args, (int)s, mx_last_error());
        ck_assert_ptr_null(it);
        for (int k = 0; k < 2 && cases[c].needles[k]; k++)
            ck_assert_msg(strstr(mx_last_error(), cases[c].needles[k]) != NULL, "'%s': message '%s' lacks '%s'",
                          cases[c].args, mx_last_error(), cases[c].needles[k]);
    }
    mx_runtime_free(rt);
}
END_TEST

/* Through a parsed spec (a config section): shapes() answers before create
 * and matches the iterator, and check() names FILE:LINE of the key. */
START_TEST(test_spec_shapes_and_located_errors)
{
    const char *keys[] = {"data_shape", "num_classes", "num_samples", "batch_size", "num_parts", "part_index"};
    const char *values[] = {"(3,8,8)", "10", "100", "4", "2", "1"};
    const char *where[] = {"a.cfg:2: [train] data_shape", "a.cfg:3: [train] num_classes",
                           "a.cfg:4: [train] num_samples", "a.cfg:5: [train] batch_size",
                           "a.cfg:6: [train] num_parts", "a.cfg:7: [train] part_index"};
    mx_param_input in = {.n = 6, .keys = keys, .values = values, .where = where, .section = "a.cfg:1: [train]"};
    mx_data_iter_spec *spec;
    OK(mx_data_iter_spec_parse_kind("synthetic", &in, &spec));
    mx_shape ds, ls, wd = MX_SHAPE(4, 3, 8, 8), wl = MX_SHAPE(4);
    OK(mx_data_iter_spec_shapes(spec, &ds, &ls));
    ck_assert(mx_shape_equal(&ds, &wd));
    ck_assert(mx_shape_equal(&ls, &wl));
    mx_runtime *rt = rt_new();
    mx_data_iter *it;
    OK(mx_data_iter_create_spec(rt, spec, &it));
    mx_shape ids = mx_data_iter_data_shape(it), ils = mx_data_iter_label_shape(it);
    ck_assert(mx_shape_equal(&ids, &wd));
    ck_assert(mx_shape_equal(&ils, &wl));
    ck_assert_int_eq(mx_data_iter_num_samples(it), 50);
    mx_data_iter_free(it);
    mx_data_iter_spec_free(spec);
    mx_runtime_free(rt);

    values[5] = "2";
    ck_assert_int_eq(mx_data_iter_spec_parse_kind("synthetic", &in, &spec), MX_ERR_INVALID);
    expect_msg("a.cfg:7: [train] part_index: 2 must be less than num_parts 2");
    values[5] = "0";
    values[0] = "()";
    ck_assert_int_eq(mx_data_iter_spec_parse_kind("synthetic", &in, &spec), MX_ERR_INVALID);
    expect_msg("a.cfg:2: [train] data_shape: () has 0 dimensions");
    values[0] = "(3,8,8)";
    values[2] = "1";
    ck_assert_int_eq(mx_data_iter_spec_parse_kind("synthetic", &in, &spec), MX_ERR_INVALID);
    expect_msg("a.cfg:4: [train] num_samples: 1 in num_parts 2 leaves part_index 0 no samples");
}
END_TEST

static Suite *io_synthetic_suite(void)
{
    Suite *s = suite_create("io_synthetic");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_registered);
    tcase_add_test(t, test_shapes);
    tcase_add_test(t, test_batches_in_host_context);
    tcase_add_test(t, test_values_in_range_and_as_documented);
    tcase_add_test(t, test_determinism_and_parts_differ);
    tcase_add_test(t, test_epochs_round_batch);
    tcase_add_test(t, test_epochs_no_round_batch);
    tcase_add_test(t, test_partition);
    tcase_add_test(t, test_pushed_copy_survives);
    tcase_add_test(t, test_bad_parameters);
    tcase_add_test(t, test_spec_shapes_and_located_errors);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(io_synthetic_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
