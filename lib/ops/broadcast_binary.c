/*
 * broadcast_binary.c - MXNet's broadcast_* operators: lhs OP rhs with
 * NumPy broadcasting, on binary_math.h's element math (shared with the
 * equal-shape _maximum, ... and the scalar ops):
 *   broadcast_add (broadcast_plus), broadcast_sub (broadcast_minus),
 *   broadcast_mul, broadcast_div, broadcast_power, broadcast_maximum
 *   (_npi_maximum), broadcast_minimum (_npi_minimum), broadcast_mod,
 *   broadcast_hypot, and with zero gradients broadcast_equal, _not_equal,
 *   _greater, _greater_equal, _lesser, _lesser_equal, broadcast_logical_and,
 *   _or, _xor.
 *
 * Shapes (MXNet 1.9.1's BinaryBroadcastShape): aligned from the right, the
 * shorter padded with leading 1s; per axis the sizes must be equal or one
 * of them 1, and the output takes the larger: (2,1,3) and (1,4,1) give
 * (2,4,3), (3,) and (2,3) give (2,3). Anything else is an error naming both
 * shapes.
 *
 * The kernels walk a collapsed view: axes of size 1 dropped and neighbours
 * merged where both operands broadcast (or not) alike, so (N,C,H,W) + (1,C,1,1)
 * is three axes and a bias add over rows is one inner loop with a scalar
 * operand. Backward reduces dy * df/d(operand) over the axes that operand
 * was broadcast along (a row's sum is taken in double); an operand that
 * was not broadcast gets its gradient element-wise. Work splits across the
 * kernel pool except where gradients are reduced.
 */
#include "ops/op.h"
#include "ops/binary_math.h"
#include "ops/cpu/simd.h"

#include <string.h>

static int bc_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "lhs";
    names[1] = "rhs";
    return 2;
}

static int bc_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status bc_infer(const char *name, mx_shape *in, mx_shape *out)
{
    char a[128], b[128];
    if (in[0].ndim == 0 || in[1].ndim == 0)
        return MX_ERROR(MX_ERR_INVALID, "%s: the shape of %s is unknown", name, in[0].ndim == 0 ? "lhs" : "rhs");
    int nd = in[0].ndim > in[1].ndim ? in[0].ndim : in[1].ndim;
    mx_shape o = {.ndim = nd};
    for (int k = 0; k < nd; k++) {
        int kl = k - (nd - in[0].ndim), kr = k - (nd - in[1].ndim);
        int64_t l = kl >= 0 ? in[0].dims[kl] : 1, r = kr >= 0 ? in[1].dims[kr] : 1;
        if (l != r && l != 1 && r != 1)
            return MX_ERROR(MX_ERR_INVALID,
                            "%s: operands could not be broadcast together: lhs %s, rhs %s (axis %d from the right: "
                            "%lld vs %lld; sizes must match or one be 1)",
                            name, mx_shape_str(&in[0], a, sizeof(a)), mx_shape_str(&in[1], b, sizeof(b)), nd - k,
                            (long long)l, (long long)r);
        o.dims[k] = l == 1 ? r : l;
    }
    out[0] = o;
    return MX_OK;
}

/* The collapsed iteration space: output axes (outermost first) and each
 * operand's element stride along them, 0 where it is broadcast. */
typedef struct bc_plan {
    int nd;
    int64_t dims[MX_MAX_NDIM], ls[MX_MAX_NDIM], rs[MX_MAX_NDIM];
    int64_t n;                 /* output elements */
    bool l_reduced, r_reduced; /* an operand smaller than the output */
} bc_plan;

static void bc_make_plan(const mx_shape *l, const mx_shape *r, const mx_shape *o, bc_plan *p)
{
    memset(p, 0, sizeof(*p));
    p->n = mx_shape_size(o);
    p->l_reduced = mx_shape_size(l) != p->n;
    p->r_reduced = mx_shape_size(r) != p->n;
    bool lb[MX_MAX_NDIM], rb[MX_MAX_NDIM];
    for (int k = 0; k < o->ndim; k++) {
        int kl = k - (o->ndim - l->ndim), kr = k - (o->ndim - r->ndim);
        int64_t d = o->dims[k];
        if (d == 1) continue;
        bool bl = (kl >= 0 ? l->dims[kl] : 1) != d, br = (kr >= 0 ? r->dims[kr] : 1) != d;
        if (p->nd > 0 && lb[p->nd - 1] == bl && rb[p->nd - 1] == br) {
            p->dims[p->nd - 1] *= d;
        } else {
            lb[p->nd] = bl;
            rb[p->nd] = br;
            p->dims[p->nd++] = d;
        }
    }
    if (p->nd == 0) { /* one element */
        lb[0] = rb[0] = false;
        p->dims[p->nd++] = 1;
    }
    int64_t sl = 1, sr = 1;
    for (int k = p->nd - 1; k >= 0; k--) {
        p->ls[k] = lb[k] ? 0 : sl;
        p->rs[k] = rb[k] ? 0 : sr;
        if (!lb[k]) sl *= p->dims[k];
        if (!rb[k]) sr *= p->dims[k];
    }
}

/* A row: n output elements along the innermost axis, operands at a and b
 * with strides sa, sb (1, or 0 when broadcast). */
typedef struct bc_row {
    const float *a, *b, *dy;
    float *y;              /* forward output / NULL */
    float *dl, *dr;        /* backward gradients at the operands' offsets, or NULL */
    int64_t sa, sb, n;
    bool add;
    bool set_l, set_r;     /* backward: overwrite (operand not reduced, req write) instead of add */
} bc_row;

typedef void (*bc_row_fn)(const bc_row *r);

typedef struct bc_job {
    const bc_plan *plan;
    bc_row_fn fn;
    const float *a, *b, *dy;
    float *y, *dl, *dr;
    bool add, set_l, set_r;
} bc_job;

/* Runs fn over the rows covering output elements [lo, hi). */
static void bc_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const bc_job *j = arg;
    const bc_plan *p = j->plan;
    int nd = p->nd, in = nd - 1;
    int64_t idx[MX_MAX_NDIM], rem = lo, ao = 0, bo = 0;
    for (int k = nd - 1; k >= 0; k--) {
        idx[k] = rem % p->dims[k];
        rem /= p->dims[k];
        ao += idx[k] * p->ls[k];
        bo += idx[k] * p->rs[k];
    }
    for (int64_t pos = lo; pos < hi;) {
        int64_t n = p->dims[in] - idx[in];
        if (n > hi - pos) n = hi - pos;
        bc_row r = {.a = j->a ? j->a + ao : NULL, .b = j->b ? j->b + bo : NULL,
                    .dy = j->dy ? j->dy + pos : NULL, .y = j->y ? j->y + pos : NULL,
                    .dl = j->dl ? j->dl + ao : NULL, .dr = j->dr ? j->dr + bo : NULL, .sa = p->ls[in],
                    .sb = p->rs[in], .n = n, .add = j->add, .set_l = j->set_l, .set_r = j->set_r};
        j->fn(&r);
        pos += n;
        idx[in] += n;
        ao += n * p->ls[in];
        bo += n * p->rs[in];
        for (int k = in; k > 0 && idx[k] == p->dims[k]; k--) {
            ao += p->ls[k - 1] - idx[k] * p->ls[k];
            bo += p->rs[k - 1] - idx[k] * p->rs[k];
            idx[k] = 0;
            idx[k - 1]++;
        }
    }
}

/* Backward's partial derivatives at operand elements ia, ib. add and sub
 * keep no operands for backward (their pointers are NULL): the constant
 * condition leaves them unread. */
#define BC_A(K, i) (MX_BIN_GRAD_READS_INPUTS(K) ? pa[i] : 0.0f)
#define BC_B(K, i) (MX_BIN_GRAD_READS_INPUTS(K) ? pb[i] : 0.0f)
#define BC_DA(K, ia, ib) mx_bin_da(K, BC_A(K, ia), BC_B(K, ib))
#define BC_DB(K, ia, ib) mx_bin_db(K, BC_A(K, ia), BC_B(K, ib))

/* Forward loops over i in [0, n) of a row; A and B are the operand
 * expressions. */
#define BC_FWD_SET(KIND, A, B) for (int64_t i = 0; i < n; i++) y[i] = mx_bin_f(KIND, A, B)
#define BC_FWD_ADD(KIND, A, B) for (int64_t i = 0; i < n; i++) y[i] += mx_bin_f(KIND, A, B)

#define BC_ROWS(id, KIND)                                                                                           \
    static void id##_frow(const bc_row *r)                                                                         \
    {                                                                                                               \
        float *y = r->y;                                                                                            \
        const float *pa = r->a, *pb = r->b;                                                                         \
        const int64_t n = r->n;                                                                                     \
        const float a0 = pa[0], b0 = pb[0];                                                                         \
        if (r->add) {                                                                                               \
            if (r->sa && r->sb) BC_FWD_ADD(KIND, pa[i], pb[i]);                                                     \
            else if (r->sa) BC_FWD_ADD(KIND, pa[i], b0);                                                            \
            else if (r->sb) BC_FWD_ADD(KIND, a0, pb[i]);                                                            \
            else BC_FWD_ADD(KIND, a0, b0);                                                                          \
        } else {                                                                                                    \
            if (r->sa && r->sb) BC_FWD_SET(KIND, pa[i], pb[i]);                                                     \
            else if (r->sa) BC_FWD_SET(KIND, pa[i], b0);                                                            \
            else if (r->sb) BC_FWD_SET(KIND, a0, pb[i]);                                                            \
            else BC_FWD_SET(KIND, a0, b0);                                                                          \
        }                                                                                                           \
    }                                                                                                               \
    static void id##_brow(const bc_row *r)                                                                         \
    {                                                                                                               \
        const float *pa = r->a, *pb = r->b, *dy = r->dy;                                                            \
        const int64_t n = r->n;                                                                                     \
        if (r->dl) {                                                                                                \
            float *dl = r->dl;                                                                                      \
            if (r->sa) {                                                                                            \
                if (r->set_l && r->sb) for (int64_t i = 0; i < n; i++) dl[i] = dy[i] * BC_DA(KIND, i, i);           \
                else if (r->set_l) for (int64_t i = 0; i < n; i++) dl[i] = dy[i] * BC_DA(KIND, i, 0);               \
                else if (r->sb) for (int64_t i = 0; i < n; i++) dl[i] += dy[i] * BC_DA(KIND, i, i);                 \
                else for (int64_t i = 0; i < n; i++) dl[i] += dy[i] * BC_DA(KIND, i, 0);                            \
            } else {                                                                                                \
                double acc = 0;                                                                                     \
                if (r->sb) for (int64_t i = 0; i < n; i++) acc += dy[i] * BC_DA(KIND, 0, i);                        \
                else for (int64_t i = 0; i < n; i++) acc += dy[i] * BC_DA(KIND, 0, 0);                              \
                dl[0] += (float)acc;                                                                                \
            }                                                                                                       \
        }                                                                                                           \
        if (r->dr) {                                                                                                \
            float *dr = r->dr;                                                                                      \
            if (r->sb) {                                                                                            \
                if (r->set_r && r->sa) for (int64_t i = 0; i < n; i++) dr[i] = dy[i] * BC_DB(KIND, i, i);           \
                else if (r->set_r) for (int64_t i = 0; i < n; i++) dr[i] = dy[i] * BC_DB(KIND, 0, i);               \
                else if (r->sa) for (int64_t i = 0; i < n; i++) dr[i] += dy[i] * BC_DB(KIND, i, i);                 \
                else for (int64_t i = 0; i < n; i++) dr[i] += dy[i] * BC_DB(KIND, 0, i);                            \
            } else {                                                                                                \
                double acc = 0;                                                                                     \
                if (r->sa) for (int64_t i = 0; i < n; i++) acc += dy[i] * BC_DB(KIND, i, 0);                        \
                else for (int64_t i = 0; i < n; i++) acc += dy[i] * BC_DB(KIND, 0, 0);                              \
                dr[0] += (float)acc;                                                                                \
            }                                                                                                       \
        }                                                                                                           \
        (void)pa, (void)pb;                                                                                         \
    }

/* Elements per piece on the kernel pool. */
#define BC_PIECE 8192

static mx_status bc_forward(const mx_op_ctx *ctx, bc_row_fn fn, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    bc_plan plan;
    bc_make_plan(&in[0].shape, &in[1].shape, &out[0].shape, &plan);
    if (plan.n == 0) return MX_OK;
    bc_job j = {.plan = &plan, .fn = fn, .a = in[0].data, .b = in[1].data, .y = out[0].data,
                .add = req[0] == MX_REQ_ADD};
    mx_simd_parallel_for(mx_op_pool(ctx), plan.n, BC_PIECE, bc_range, &j);
    return MX_OK;
}

static void bc_zero(float *p, const mx_shape *s) { memset(p, 0, sizeof(float) * (size_t)mx_shape_size(s)); }

/* A reduced operand's gradient is summed into in_grad (zeroed first for
 * req = write): rows land on the same elements. One that was not
 * broadcast maps one to one and is written directly. */
static mx_status bc_backward(const mx_op_ctx *ctx, bc_row_fn fn, bool no_grad, bool reads_inputs,
                             const mx_tensor *out_grad, const mx_tensor *in, const mx_req *req, mx_tensor *in_grad)
{
    float *d[2] = {NULL, NULL};
    bool set[2] = {false, false};
    bc_plan plan;
    bc_make_plan(&in_grad[0].shape, &in_grad[1].shape, &out_grad[0].shape, &plan);
    bool reduced[2] = {plan.l_reduced, plan.r_reduced};
    for (int k = 0; k < 2; k++) {
        if (req[k] == MX_REQ_NULL) continue;
        d[k] = in_grad[k].data;
        if (req[k] == MX_REQ_ADD) continue;
        if (no_grad || reduced[k]) bc_zero(d[k], &in_grad[k].shape);
        else set[k] = true;
    }
    if (no_grad || (!d[0] && !d[1]) || plan.n == 0) return MX_OK;
    bc_job j = {.plan = &plan, .fn = fn, .dy = out_grad[0].data, .dl = d[0], .dr = d[1], .set_l = set[0],
                .set_r = set[1]};
    if (reads_inputs) j.a = in[0].data, j.b = in[1].data; /* else not kept for backward */
    bool reduce = (d[0] && reduced[0]) || (d[1] && reduced[1]);
    mx_simd_parallel_for(reduce ? NULL : mx_op_pool(ctx), plan.n, BC_PIECE, bc_range, &j);
    return MX_OK;
}

static const mx_inplace bc_forward_inplace[] = {{0, 0}, {1, 0}, {-1, -1}};

#define A(...) ((const char *const[]){__VA_ARGS__ NULL})
/* id, MXNet name, aliases, binary_math kind, doc. */
#define BC_OPS(X)                                                                                                   \
    X(broadcast_add, "broadcast_add", A("broadcast_plus", "_sparse_broadcast_add", "_sparse_broadcast_plus", ),    \
      MX_BIN_ADD, "lhs + rhs with broadcasting.")                                                                   \
    X(broadcast_sub, "broadcast_sub", A("broadcast_minus", "_sparse_broadcast_sub", "_sparse_broadcast_minus", ),  \
      MX_BIN_SUB, "lhs - rhs with broadcasting.")                                                                   \
    X(broadcast_mul, "broadcast_mul", A("_sparse_broadcast_mul", ), MX_BIN_MUL, "lhs * rhs with broadcasting.")    \
    X(broadcast_div, "broadcast_div", A("_sparse_broadcast_div", ), MX_BIN_DIV, "lhs / rhs with broadcasting.")    \
    X(broadcast_power, "broadcast_power", A(), MX_BIN_POWER, "lhs ^ rhs with broadcasting.")                       \
    X(broadcast_maximum, "broadcast_maximum", A("_npi_maximum", ), MX_BIN_MAXIMUM,                                  \
      "max(lhs, rhs) with broadcasting.")                                                                           \
    X(broadcast_minimum, "broadcast_minimum", A("_npi_minimum", ), MX_BIN_MINIMUM,                                  \
      "min(lhs, rhs) with broadcasting.")                                                                           \
    X(broadcast_mod, "broadcast_mod", A(), MX_BIN_MOD, "lhs mod rhs (Python's %) with broadcasting.")              \
    X(broadcast_hypot, "broadcast_hypot", A(), MX_BIN_HYPOT, "sqrt(lhs^2 + rhs^2) with broadcasting.")             \
    X(broadcast_equal, "broadcast_equal", A(), MX_BIN_EQUAL, "1 where lhs == rhs (broadcasting), else 0.")         \
    X(broadcast_not_equal, "broadcast_not_equal", A(), MX_BIN_NOT_EQUAL,                                            \
      "1 where lhs != rhs (broadcasting), else 0.")                                                                 \
    X(broadcast_greater, "broadcast_greater", A(), MX_BIN_GREATER, "1 where lhs > rhs (broadcasting), else 0.")    \
    X(broadcast_greater_equal, "broadcast_greater_equal", A(), MX_BIN_GREATER_EQUAL,                                \
      "1 where lhs >= rhs (broadcasting), else 0.")                                                                 \
    X(broadcast_lesser, "broadcast_lesser", A(), MX_BIN_LESSER, "1 where lhs < rhs (broadcasting), else 0.")       \
    X(broadcast_lesser_equal, "broadcast_lesser_equal", A(), MX_BIN_LESSER_EQUAL,                                   \
      "1 where lhs <= rhs (broadcasting), else 0.")                                                                 \
    X(broadcast_logical_and, "broadcast_logical_and", A(), MX_BIN_LOGICAL_AND,                                      \
      "1 where lhs and rhs are non-zero (broadcasting).")                                                           \
    X(broadcast_logical_or, "broadcast_logical_or", A(), MX_BIN_LOGICAL_OR,                                         \
      "1 where lhs or rhs is non-zero (broadcasting).")                                                             \
    X(broadcast_logical_xor, "broadcast_logical_xor", A(), MX_BIN_LOGICAL_XOR,                                      \
      "1 where exactly one of lhs and rhs is non-zero (broadcasting).")

#define BC_DEF(id, opname, aliases_, KIND, docstr)                                                                  \
    BC_ROWS(bc_##id, KIND)                                                                                          \
    static mx_status bc_##id##_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)        \
    {                                                                                                               \
        (void)p, (void)n_in, (void)n_out;                                                                           \
        return bc_infer(opname, in, out);                                                                           \
    }                                                                                                               \
    static mx_status bc_##id##_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in,                   \
                                       const mx_req *req, mx_tensor *out, mx_tensor *aux)                           \
    {                                                                                                               \
        (void)p, (void)aux;                                                                                         \
        return bc_forward(ctx, bc_##id##_frow, in, req, out);                                                       \
    }                                                                                                               \
    static mx_status bc_##id##_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,            \
                                        const mx_tensor *in, const mx_tensor *out, const mx_req *req,               \
                                        mx_tensor *in_grad, mx_tensor *aux)                                         \
    {                                                                                                               \
        (void)p, (void)out, (void)aux;                                                                              \
        return bc_backward(ctx, bc_##id##_brow, mx_bin_no_grad(KIND), MX_BIN_GRAD_READS_INPUTS(KIND), out_grad, in,  \
                           req, in_grad);                                                                           \
    }                                                                                                               \
    MX_OP_GPU_DECLARE(id);                                                                                          \
    const mx_op_def mx_op_##id = {                                                                                  \
        .name = opname,                                                                                             \
        .aliases = aliases_,                                                                                        \
        .doc = docstr,                                                                                              \
        .params_size = 1,                                                                                           \
        .list_inputs = bc_list_inputs,                                                                              \
        .list_outputs = bc_list_outputs,                                                                            \
        .infer_shape = bc_##id##_infer_shape,                                                                       \
        .backward_deps = MX_BWD_OUT_GRAD | (MX_BIN_GRAD_READS_INPUTS(KIND) ? MX_BWD_IN_DATA : 0),                   \
        .forward_inplace = bc_forward_inplace,                                                                      \
        .forward = bc_##id##_forward,                                                                               \
        .backward = bc_##id##_backward,                                                                             \
        .gpu = MX_OP_GPU(id),                                                                                       \
    };

BC_OPS(BC_DEF)
