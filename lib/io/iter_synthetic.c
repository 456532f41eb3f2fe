/*
 * iter_synthetic.c - synthetic data for benchmarking (MXNet's
 * SyntheticDataIter, example/image-classification/common/fit.py with
 * --benchmark 1): one batch of random data and labels made once at create
 * and handed out as every batch of every epoch, so the iterator costs
 * nothing while the trainer is measured.
 *
 * Semantics:
 *   - parameters: data_shape (the shape of one sample, 1 to 7 dims, each
 *     >= 1), num_classes, num_samples (samples per epoch before
 *     partitioning), batch_size, seed, num_parts / part_index, round_batch;
 *     every one is used (no parameter is accepted and ignored);
 *   - the part: this iterator serves the contiguous slice of
 *     [0, num_samples) given by MXNet's part formula (mx_io_part_range,
 *     prefetch.h), n = its length; num_samples() reports n. part_index >=
 *     num_parts, and a part with no samples (num_samples < num_parts can
 *     leave one empty), are MX_ERR_INVALID at create;
 *   - the batch: data (batch_size, *data_shape) float32 uniform in [-1, 1)
 *     (MXNet: np.random.uniform(-1, 1)), label (batch_size,) float32 holding
 *     integers uniform in [0, num_classes) (MXNet: np.random.randint). Drawn
 *     at create from xoshiro256** seeded by splitmix64, as lib/ndarray/
 *     random.c seeds its generator, but run locally (no engine resource),
 *     from the 64-bit key (uint64)seed ^ (part_index << 32) (seed in
 *     [-2^31, 2^32), part_index < 2^30 by the table): distinct
 *     (seed, part_index) pairs give distinct keys, so parts differ, and part
 *     0 of any num_parts draws what num_parts=1 draws. Data first, one draw
 *     per element in row-major order: the top 24 bits k of the draw give
 *     -1 + k * 2^-23 (exact in float32, so never 1.0); then one draw per
 *     label, reduced to [0, num_classes) by rejection (unbiased).
 *     num_classes is at most 2^24, so every label is exact in float32;
 *   - every batch of every epoch hands out those same two arrays. They are
 *     written once, at create, and never again, so a consumer's pushed copy
 *     (mx_nd_copy) of any batch always reads the same values; the consumer
 *     must not write into them;
 *   - an epoch: round_batch=True (default) has ceil(n / batch_size) batches,
 *     the last with pad = batches * batch_size - n (its data are the same
 *     full batch; pad says how many trailing samples to ignore), so a part
 *     smaller than one batch gives one padded batch; round_batch=False has
 *     floor(n / batch_size) full batches (the rest of the part is dropped,
 *     pad always 0), and n < batch_size is then MX_ERR_INVALID at create
 *     rather than an epoch without batches;
 *   - index: batch_size sample ids, global positions in [0, num_samples):
 *     start + position within the part's epoch; padding slots of the last
 *     batch wrap to the part's first samples (start + position mod n:
 *     start + 0, start + 1, ...), as round_batch does in the other
 *     iterators. Valid, like the arrays, until the next next()/reset();
 *   - next() after the last batch returns has_batch=false (and keeps doing
 *     so); reset() starts the next epoch from batch 0, also mid-epoch.
 *     Epochs are all alike: nothing is reshuffled or redrawn;
 *   - no background thread and no prefetch ring: there is nothing to
 *     prefetch, so there is no prefetch_buffer parameter.
 *
 * Errors: MX_ERR_INVALID naming the parameter and its value: the table's
 * own checks by lib/params, the rest (data_shape's dimensions and size,
 * part_index < num_parts, an empty part, no batch without round_batch) by
 * check(), which needs no data, so a config names FILE:LINE of the key and
 * shapes() can answer before create; MX_ERR_NOMEM.
 */
#include "io/io.h"
#include "io/prefetch.h"

#include <stddef.h>
#include <string.h>

#define MAX_CLASSES 16777216.0             /* 2^24: labels exact in float32 */
#define MAX_BATCH_ELEMS ((int64_t)1 << 31) /* 8 GiB of float32 per batch */

typedef struct synthetic_params {
    mx_tuple data_shape;
    int64_t num_classes;
    int64_t num_samples;
    int64_t batch_size;
    int64_t seed;
    int64_t num_parts;
    int64_t part_index;
    bool round_batch;
} synthetic_params;

#define P(f) offsetof(synthetic_params, f)
static const mx_param_desc synthetic_param_table[] = {
    {"data_shape", MX_PARAM_TUPLE, NULL, 1, 1e9, NULL, P(data_shape), "shape of one sample, 1 to 7 dimensions"},
    {"num_classes", MX_PARAM_INT, NULL, 1, MAX_CLASSES, NULL, P(num_classes),
     "labels are integers drawn uniformly from [0, num_classes)"},
    {"num_samples", MX_PARAM_INT, NULL, 1, 1e15, NULL, P(num_samples),
     "samples per epoch over all parts (before partitioning)"},
    {"batch_size", MX_PARAM_INT, NULL, 1, 1e9, NULL, P(batch_size), "batch size"},
    {"seed", MX_PARAM_INT, "0", -2147483648.0, 4294967295.0, NULL, P(seed),
     "seed of the one batch's data and labels (with part_index)"},
    {"num_parts", MX_PARAM_INT, "1", 1, 1e9, NULL, P(num_parts), "partition num_samples into this many parts"},
    {"part_index", MX_PARAM_INT, "0", 0, 1e9, NULL, P(part_index), "the part to serve"},
    {"round_batch", MX_PARAM_BOOL, "True", 1, 0, NULL, P(round_batch),
     "True: a last partial batch is completed (pad says how many samples are padding); False: it is dropped"},
};
#undef P

#define N_SYNTHETIC_PARAMS ((int)(sizeof(synthetic_param_table) / sizeof(synthetic_param_table[0])))

/* ---------------------------------------------------------------- generator */

/* The project's generator (base.h), run on the host: there is nothing for
 * the engine to order, the batch is drawn once at create. */
typedef mx_xoshiro synth_rng;

static void synth_rng_seed(synth_rng *g, uint64_t key) { mx_xoshiro_seed(g, key); }
static uint64_t synth_rng_next(synth_rng *g) { return mx_xoshiro_next(g); }

/* Uniform in [-1, 1) on the grid -1 + k * 2^-23, k < 2^24 (exact in float32). */
static float synth_rng_uniform(synth_rng *g)
{
    return (float)((double)(synth_rng_next(g) >> 40) * 0x1.0p-23 - 1.0);
}

/* Uniform integer in [0, n), n >= 1, by rejection. */
static uint64_t synth_rng_below(synth_rng *g, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* a multiple of n */
    uint64_t r;
    do r = synth_rng_next(g);
    while (r >= limit);
    return r % n;
}

/* ---------------------------------------------------------------- layout */

/* What the parameters alone determine: shapes, the part, the epoch. */
typedef struct synthetic_layout {
    mx_shape data_shape, label_shape;
    int64_t start, n; /* this part: samples [start, start + n) of num_samples */
    int64_t batches;  /* per epoch */
    int last_pad;     /* pad of the epoch's last batch */
} synthetic_layout;

/* Checks what the table cannot (dimensions, batch size in elements,
 * part_index < num_parts, a part with samples, a batch per epoch) and
 * derives the layout. Errors (MX_ERR_INVALID) through mx_params_blame, so
 * a config section (in, may be NULL) names FILE:LINE of the key. */
static mx_status synthetic_layout_of(const synthetic_params *p, const mx_param_input *in, synthetic_layout *out)
{
    const mx_tuple *t = &p->data_shape;
    char buf[128];
    if (t->ndim < 1 || t->ndim > MX_MAX_NDIM - 1)
        return mx_params_blame(in, "synthetic", "data_shape", MX_ERR_INVALID,
                               "%s has %d dimensions; 1 to %d are supported",
                               mx_params_format(&synthetic_param_table[0], p, buf, sizeof(buf)),
                               t->ndim < 0 ? 0 : t->ndim, MX_MAX_NDIM - 1);
    if (p->part_index >= p->num_parts)
        return mx_params_blame(in, "synthetic", "part_index", MX_ERR_INVALID, "%lld must be less than num_parts %lld",
                               (long long)p->part_index, (long long)p->num_parts);

    int64_t elems = p->batch_size;
    out->data_shape.ndim = t->ndim + 1;
    memset(out->data_shape.dims, 0, sizeof(out->data_shape.dims));
    out->data_shape.dims[0] = p->batch_size;
    for (int i = 0; i < t->ndim; i++) {
        out->data_shape.dims[i + 1] = t->v[i];
        elems *= t->v[i]; /* each factor <= 1e9 and elems <= 2^31: no overflow */
        if (elems > MAX_BATCH_ELEMS)
            return mx_params_blame(in, "synthetic", "data_shape", MX_ERR_INVALID,
                                   "%s with batch_size %lld is too large (more than %lld elements per batch)",
                                   mx_params_format(&synthetic_param_table[0], p, buf, sizeof(buf)),
                                   (long long)p->batch_size, (long long)MAX_BATCH_ELEMS);
    }
    out->label_shape = MX_SHAPE(p->batch_size);

    int64_t end;
    mx_io_part_range(p->num_samples, p->num_parts, p->part_index, &out->start, &end);
    out->n = end - out->start;
    if (out->n == 0)
        return mx_params_blame(in, "synthetic", "num_samples", MX_ERR_INVALID,
                               "%lld in num_parts %lld leaves part_index %lld no samples", (long long)p->num_samples,
                               (long long)p->num_parts, (long long)p->part_index);
    if (p->round_batch) {
        out->batches = (out->n + p->batch_size - 1) / p->batch_size;
        out->last_pad = (int)(out->batches * p->batch_size - out->n);
    } else {
        out->batches = out->n / p->batch_size;
        out->last_pad = 0;
        if (out->batches == 0)
            return mx_params_blame(in, "synthetic", "round_batch", MX_ERR_INVALID,
                                   "False, and num_samples %lld gives %lld samples%s, fewer than batch_size %lld: an "
                                   "epoch would have no batch",
                                   (long long)p->num_samples, (long long)out->n,
                                   p->num_parts > 1 ? " to this part" : "", (long long)p->batch_size);
    }
    return MX_OK;
}

static mx_status synthetic_check(const void *params, const mx_param_input *in)
{
    synthetic_layout l;
    return synthetic_layout_of(params, in, &l);
}

static mx_status synthetic_shapes(const void *params, mx_shape *data, mx_shape *label)
{
    synthetic_layout l;
    MX_TRY(synthetic_layout_of(params, NULL, &l));
    *data = l.data_shape;
    *label = l.label_shape;
    return MX_OK;
}

/* ---------------------------------------------------------------- iterator */

typedef struct synthetic_state {
    synthetic_params p;
    synthetic_layout l;
    int64_t next;             /* the next batch of the epoch */
    mx_ndarray *data, *label; /* written at create only */
    uint64_t *index;          /* batch_size ids of the batch handed out last */
} synthetic_state;

static void synthetic_free(void *state)
{
    synthetic_state *st = state;
    if (!st) return;
    mx_ndarray_free(st->data);
    mx_ndarray_free(st->label);
    mx_free(st->index);
    mx_free(st);
}

/* Draws the one batch (data first, then labels) and writes it into the
 * arrays; the only write they ever get. */
static mx_status synthetic_generate(mx_runtime *rt, synthetic_state *st)
{
    const synthetic_params *p = &st->p;
    MX_TRY(mx_ndarray_create(rt, st->l.data_shape, MX_FLOAT32, mx_runtime_host_context(rt), &st->data));
    MX_TRY(mx_ndarray_create(rt, st->l.label_shape, MX_FLOAT32, mx_runtime_host_context(rt), &st->label));
    st->index = mx_calloc((size_t)p->batch_size, sizeof(uint64_t));
    if (!st->index) return MX_ERR_NOMEM;

    int64_t nd = mx_shape_size(&st->l.data_shape), nl = p->batch_size;
    float *host = mx_malloc((size_t)(nd > nl ? nd : nl) * sizeof(float));
    if (!host) return MX_ERR_NOMEM;
    synth_rng g;
    synth_rng_seed(&g, (uint64_t)p->seed ^ ((uint64_t)p->part_index << 32));
    for (int64_t i = 0; i < nd; i++) host[i] = synth_rng_uniform(&g);
    mx_status s = mx_ndarray_from_host(st->data, host, (size_t)nd * sizeof(float));
    if (s == MX_OK) {
        for (int64_t i = 0; i < nl; i++) host[i] = (float)synth_rng_below(&g, (uint64_t)p->num_classes);
        s = mx_ndarray_from_host(st->label, host, (size_t)nl * sizeof(float));
    }
    mx_free(host);
    return s;
}

static mx_status synthetic_create(mx_runtime *rt, const void *params, void **out)
{
    *out = NULL;
    synthetic_state *st = mx_calloc(1, sizeof(*st));
    if (!st) return MX_ERR_NOMEM;
    st->p = *(const synthetic_params *)params;
    mx_status s = synthetic_layout_of(&st->p, NULL, &st->l);
    if (s == MX_OK) s = synthetic_generate(rt, st);
    if (s != MX_OK) {
        synthetic_free(st);
        return s;
    }
    *out = st;
    return MX_OK;
}

static mx_status synthetic_next(void *state, mx_data_batch *batch, bool *has_batch)
{
    synthetic_state *st = state;
    memset(batch, 0, sizeof(*batch));
    const synthetic_layout *l = &st->l;
    if (st->next >= l->batches) {
        *has_batch = false;
        return MX_OK;
    }
    int64_t bs = st->p.batch_size, first = st->next * bs;
    for (int64_t i = 0; i < bs; i++) {
        int64_t pos = first + i;
        if (pos >= l->n) pos %= l->n; /* padding wraps to the part's first samples */
        st->index[i] = (uint64_t)(l->start + pos);
    }
    batch->data = st->data;
    batch->label = st->label;
    batch->pad = st->next == l->batches - 1 ? l->last_pad : 0;
    batch->index = st->index;
    st->next++;
    *has_batch = true;
    return MX_OK;
}

static mx_status synthetic_reset(void *state)
{
    ((synthetic_state *)state)->next = 0;
    return MX_OK;
}

static mx_shape synthetic_data_shape(const void *state) { return ((const synthetic_state *)state)->l.data_shape; }
static mx_shape synthetic_label_shape(const void *state) { return ((const synthetic_state *)state)->l.label_shape; }
static int64_t synthetic_num_samples(const void *state) { return ((const synthetic_state *)state)->l.n; }

const mx_data_iter_kind mx_iter_synthetic = {
    .name = "synthetic",
    .params = synthetic_param_table,
    .n_params = N_SYNTHETIC_PARAMS,
    .params_size = sizeof(synthetic_params),
    .create = synthetic_create,
    .next = synthetic_next,
    .reset = synthetic_reset,
    .free = synthetic_free,
    .data_shape = synthetic_data_shape,
    .label_shape = synthetic_label_shape,
    .num_samples = synthetic_num_samples,
    .check = synthetic_check,
    .shapes = synthetic_shapes,
};
