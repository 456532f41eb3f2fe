/*
 * random.c - seeded random fills. The generator (xoshiro256**, seeded with
 * splitmix64) is a resource tagged by its own engine variable: every draw
 * writes that variable, so draws happen in push order and a seed gives the
 * same numbers with any number of workers.
 */
#include "ndarray/ndarray_internal.h"
#include "device/device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct mx_rng {
    mx_runtime *rt;
    mx_engine_var *var;
    mx_xoshiro gen;
};

static void rng_set_seed(mx_rng *rng, uint64_t seed) { mx_xoshiro_seed(&rng->gen, seed); }

uint64_t mx_rng_next_u64(mx_rng *rng) { return mx_xoshiro_next(&rng->gen); }

double mx_rng_next_double(mx_rng *rng) { return (double)(mx_rng_next_u64(rng) >> 11) * 0x1.0p-53; }

mx_status mx_rng_create(mx_runtime *rt, uint64_t seed, mx_rng **out)
{
    *out = NULL;
    mx_rng *rng = mx_calloc(1, sizeof(*rng));
    if (!rng) return MX_ERR_NOMEM;
    rng->rt = rt;
    rng->var = mx_engine_new_var(mx_runtime_engine(rt));
    if (!rng->var) {
        free(rng);
        return MX_ERR_NOMEM;
    }
    rng_set_seed(rng, seed);
    *out = rng;
    return MX_OK;
}

static mx_status rng_free_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)payload;
    (void)exec;
    return MX_OK;
}

void mx_rng_free(mx_rng *rng)
{
    if (!rng) return;
    /* Pending draws still use the state: free it after them. */
    mx_engine *engine = mx_runtime_engine(rng->rt);
    mx_engine_var *writes[1] = {rng->var};
    mx_engine_var *var = rng->var;
    mx_engine_op op = {.fn = rng_free_fn, .payload = rng, .payload_free = free, .writes = writes,
                       .n_writes = 1, .ctx = mx_cpu(), .flags = MX_OP_IGNORE_ERRORS, .name = "rng free"};
    if (mx_engine_push(engine, &op) == MX_OK) mx_engine_delete_var(engine, var);
}

mx_engine_var *mx_rng_var(const mx_rng *rng) { return rng->var; }

typedef enum draw_kind { DRAW_SEED, DRAW_STATE, DRAW_UNIFORM, DRAW_NORMAL } draw_kind;

typedef struct draw_op {
    draw_kind kind;
    mx_rng *rng;
    mx_ndarray *out; /* retained; NULL for a reseed */
    double a, b;     /* low/high or mean/std */
    uint64_t seed;
    uint64_t state[4]; /* DRAW_STATE */
} draw_op;

static void draw_free(void *payload)
{
    draw_op *d = payload;
    mx_ndarray_free(d->out);
    free(d);
}

static mx_status draw_run(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    draw_op *d = payload;
    if (d->kind == DRAW_SEED) {
        rng_set_seed(d->rng, d->seed);
        return MX_OK;
    }
    if (d->kind == DRAW_STATE) {
        memcpy(d->rng->gen.s, d->state, sizeof(d->state));
        return MX_OK;
    }
    int64_t n = mx_ndarray_size(d->out);
    bool f32 = mx_ndarray_dtype(d->out) == MX_FLOAT32;
    /* A GPU array gets the very numbers a CPU array would (drawn here in
     * push order, then copied over): a seed means the same values on any
     * device. */
    mx_context ctx = mx_ndarray_context(d->out);
    void *host = NULL;
    if (ctx.dev_type == MX_DEV_GPU) {
        host = mx_malloc(mx_ndarray_nbytes(d->out) ? mx_ndarray_nbytes(d->out) : 1);
        if (!host) return MX_ERR_NOMEM;
    }
    float *of = host ? host : mx_ndarray_data(d->out);
    double *od = host ? host : mx_ndarray_data(d->out);
    if (d->kind == DRAW_UNIFORM) {
        for (int64_t i = 0; i < n; i++) {
            double v = d->a + (d->b - d->a) * mx_rng_next_double(d->rng);
            if (f32) of[i] = (float)v;
            else od[i] = v;
        }
    } else {
        /* Box-Muller: each pair of uniforms gives two independent normals. */
        for (int64_t i = 0; i < n; i += 2) {
            double u1 = 1.0 - mx_rng_next_double(d->rng); /* (0, 1]: log is finite */
            double u2 = mx_rng_next_double(d->rng);
            double r = sqrt(-2.0 * log(u1));
            double z0 = r * cos(2.0 * M_PI * u2), z1 = r * sin(2.0 * M_PI * u2);
            if (f32) {
                of[i] = (float)(d->a + d->b * z0);
                if (i + 1 < n) of[i + 1] = (float)(d->a + d->b * z1);
            } else {
                od[i] = d->a + d->b * z0;
                if (i + 1 < n) od[i + 1] = d->a + d->b * z1;
            }
        }
    }
    if (host) {
        mx_status s = mx_device_copy(mx_ndarray_data(d->out), ctx, host, mx_cpu(), mx_ndarray_nbytes(d->out), NULL);
        free(host);
        return s;
    }
    return MX_OK;
}

static mx_status draw_push(draw_op proto)
{
    if (proto.out) {
        char c[32];
        mx_context ctx = mx_ndarray_context(proto.out);
        mx_dtype t = mx_ndarray_dtype(proto.out);
        if (ctx.dev_type == MX_DEV_GPU && t != MX_FLOAT32)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "random: dtype %s on %s is not supported (float32)", mx_dtype_name(t),
                            mx_context_str(ctx, c, sizeof(c)));
        if (t != MX_FLOAT32 && t != MX_FLOAT64)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "random: dtype %s is not supported (float32, float64)",
                            mx_dtype_name(t));
        if (mx_ndarray_runtime(proto.out) != proto.rng->rt)
            return MX_ERROR(MX_ERR_INVALID, "random: array and generator belong to different runtimes");
    }
    draw_op *d = mx_malloc(sizeof(*d));
    if (!d) return MX_ERR_NOMEM;
    *d = proto;
    /* The generator state is read-modify-write; so is a partial view. */
    mx_engine_var *writes[2] = {proto.rng->var}, *reads[2] = {proto.rng->var};
    int n_writes = 1, n_reads = 1;
    if (d->out) {
        writes[n_writes++] = mx_ndarray_var(mx_ndarray_retain(d->out));
        if (!nd_covers_storage(d->out)) reads[n_reads++] = mx_ndarray_var(d->out);
    }
    mx_engine_op op = {.fn = draw_run, .payload = d, .payload_free = draw_free, .reads = reads,
                       .n_reads = n_reads, .writes = writes, .n_writes = n_writes, .ctx = mx_cpu(),
                       .lane = MX_LANE_COMPUTE, .name = "random"};
    return mx_engine_push(mx_runtime_engine(proto.rng->rt), &op);
}

mx_status mx_rng_seed(mx_rng *rng, uint64_t seed)
{
    return draw_push((draw_op){.kind = DRAW_SEED, .rng = rng, .seed = seed});
}

void mx_rng_get_state(const mx_rng *rng, uint64_t state[4]) { memcpy(state, rng->gen.s, sizeof(rng->gen.s)); }

mx_status mx_rng_set_state(mx_rng *rng, const uint64_t state[4])
{
    if (!(state[0] | state[1] | state[2] | state[3]))
        return MX_ERROR(MX_ERR_INVALID, "rng: an all-zero state is not a valid xoshiro256 state");
    draw_op d = {.kind = DRAW_STATE, .rng = rng};
    memcpy(d.state, state, sizeof(d.state));
    return draw_push(d);
}

mx_status mx_nd_random_uniform(mx_rng *rng, mx_ndarray *out, double low, double high)
{
    if (!(low <= high)) return MX_ERROR(MX_ERR_INVALID, "random uniform: low %g > high %g", low, high);
    return draw_push((draw_op){.kind = DRAW_UNIFORM, .rng = rng, .out = out, .a = low, .b = high});
}

mx_status mx_nd_random_normal(mx_rng *rng, mx_ndarray *out, double mean, double std)
{
    if (!(std >= 0.0)) return MX_ERROR(MX_ERR_INVALID, "random normal: std %g must be >= 0", std);
    return draw_push((draw_op){.kind = DRAW_NORMAL, .rng = rng, .out = out, .a = mean, .b = std});
}
