/*
 * op.h - the operator interface and registry (MXNet's OperatorProperty, in
 * C). One operator is one file in lib/ops/ defining one `const mx_op_def`
 * and one line in registry.c; its GPU kernel sits beside it as a .cu file
 * behind the same definition.
 *
 * An operator declares, as data:
 *   - its MXNet name and aliases, and a typed parameter table parsed from
 *     strings (params.c) into the op's own params struct;
 *   - the names of its inputs (arguments first, then auxiliary states) and
 *     outputs, which may depend on parameters (no_bias drops "bias");
 *   - pure shape inference, run before anything is allocated;
 *   - which forward tensors backward needs (so the memory planner can free
 *     the others early), in-place options, workspace and RNG requests;
 *   - forward and backward on raw tensors, honouring a write request per
 *     output (null, write, in-place, add).
 *
 * Kernels run inside engine operations pushed by the executor; they get
 * every tensor ready and must not wait on the engine.
 */
#ifndef MX_OP_H
#define MX_OP_H

#include "base/base.h"
#include "ndarray/ndarray.h"
#include "params/params.h"

#include <stdbool.h>

#define MX_OP_MAX_IO 64 /* inputs or outputs of one node (Concat of many) */

/* How an output is to be written (MXNet's OpReqType). */
typedef enum mx_req {
    MX_REQ_NULL = 0,    /* not needed: skip */
    MX_REQ_WRITE = 1,   /* overwrite */
    MX_REQ_INPLACE = 2, /* overwrite; the buffer is also one of the inputs */
    MX_REQ_ADD = 3,     /* accumulate into the existing contents */
} mx_req;

/* A raw view of planned memory: what kernels see. */
typedef struct mx_tensor {
    void *data;
    mx_shape shape;
    mx_dtype dtype;
    mx_context ctx;
    /* Elements from one item of axis 0 to the next; 0: dense (the size
     * of one item). Only a Concat input the executor places inside the
     * Concat's output, or its gradient inside the Concat's output
     * gradient, has another: the producer's output 0 and output gradient 0
     * (where its op's strided_output says so), the Concat's input and
     * input gradient. */
    int64_t batch_stride;
} mx_tensor;

/* ------------------------------------------------------------ contexts */

/* An element-wise layer folded into the op that produces its input
 * (MXNET_EXEC_ENABLE_FOLDING): an Activation or a clip. */
typedef enum mx_fold_kind { MX_FOLD_NONE = 0, MX_FOLD_ACTIVATION, MX_FOLD_CLIP } mx_fold_kind;
typedef struct mx_fold {
    mx_fold_kind kind;
    int act_type;  /* MX_FOLD_ACTIVATION: activation.h's ACT_* */
    float lo, hi;  /* MX_FOLD_CLIP: a_min, a_max */
} mx_fold;

/* A folded layer computed as its own op computes it:
 *   mx_fold_rows: y = f(y) in place on the calling thread, for a
 *     producer's output pass (a row, a chunk, a piece of images);
 *   mx_fold_forward: the same over a whole tensor on `pool`;
 *   mx_fold_backward: dy = dy * f'(y) in place on `pool`, from the folded
 *     layer's output y: its input gradient, handed to the producer's
 *     backward. A clip's derivative is 1 where a_min < y < a_max (clip
 *     itself, which reads its input, also passes the gradient where the
 *     input is exactly a bound). */
void mx_fold_rows(const mx_fold *f, float *y, int64_t n);
/* mx_fold_rows at a SIMD width the caller read once (ops/cpu/simd.h's
 * mx_simd_level) for many short rows: it reads the environment. */
void mx_fold_rows_at(const mx_fold *f, int simd_level, float *y, int64_t n);
void mx_fold_forward(mx_threadpool *pool, const mx_fold *f, float *y, int64_t n);
void mx_fold_backward(mx_threadpool *pool, const mx_fold *f, float *dy, const float *y, int64_t n);
/* out = dy * f'(y) over n elements on the calling thread, at a SIMD width
 * the caller read once (out may be dy or y; kind none copies dy): for a
 * producer whose backward takes the folded layer's gradient a row at a
 * time (mx_op_def.folds_backward). */
void mx_fold_backward_rows_at(const mx_fold *f, int simd_level, const float *dy, const float *y, float *out, int64_t n);
/* Whether f is a relu (an Activation of act_type relu). */
bool mx_fold_is_relu(const mx_fold *f);
/* Whether f's derivative is a mask of where its input lies (relu, clip):
 * what an op with fold_mask_from_inputs takes from its own inputs. */
bool mx_fold_derivative_is_mask(const mx_fold *f);

/* What a kernel is handed besides its tensors. */
typedef struct mx_op_ctx {
    const mx_exec_ctx *exec; /* device, worker, stream */
    bool is_train;
    void *workspace;         /* temp space of the requested size, or NULL */
    size_t workspace_bytes;
    mx_rng *rng;             /* when the op asked for MX_OP_NEEDS_RNG */
    /* The node's instance state slot for device kernels (cuDNN descriptors,
     * the chosen algorithm, cached per shape): NULL at first; a kernel may
     * store what it creates, freed by its kernels' state_free when the
     * executor goes. NULL slot: no caching (the kernel cleans up itself). */
    void **state;
    /* An element-wise layer the executor folded into this node
     * (MXNET_EXEC_ENABLE_FOLDING); kind MX_FOLD_NONE (zero) when none. Only
     * forward kernels of ops with folds_elementwise see it; they apply it
     * to output 0 as they write it (mx_fold_rows, mx_fold_forward). The
     * backward kernels of ops with folds_backward see it too: they take
     * the folded layer's gradient from output 0 and the output gradient
     * themselves (mx_fold_backward_rows_at); other backward kernels get
     * kind none and an output gradient the executor has already taken
     * through it. */
    mx_fold fold;
    /* Bit i: input i is an argument the caller never writes after bind
     * (mx_bind_config.fixed_args: a predictor's weights), so a kernel may
     * keep what it derives from it (packed or transformed weights) in
     * *state across passes. Forward nodes only; 0 elsewhere. */
    uint32_t fixed_inputs;
    /* Loss layers' backward (MX_OP_LOSS) multiplies the gradient it
     * writes by this: dynamic loss scaling (mx_executor_set_loss_scale).
     * 0 means 1 (contexts that never set it). */
    float loss_scale;
} mx_op_ctx;

/* The factor a loss layer's backward applies besides its grad_scale. */
static inline double mx_op_loss_scale(const mx_op_ctx *ctx)
{
    return ctx && ctx->loss_scale > 0.0f ? (double)ctx->loss_scale : 1.0;
}

/* The kernel thread pool to split work on (NULL: run on the calling thread). */
static inline mx_threadpool *mx_op_pool(const mx_op_ctx *ctx) { return ctx && ctx->exec ? ctx->exec->pool : NULL; }

/* Which forward tensors backward reads (MXNet's DeclareBackwardDependency). */
enum {
    MX_BWD_OUT_GRAD = 1u << 0,
    MX_BWD_IN_DATA = 1u << 1,
    MX_BWD_OUT_DATA = 1u << 2,
};

enum {
    MX_OP_NEEDS_RNG = 1u << 0,    /* forward may draw random numbers (Dropout); see uses_rng */
    MX_OP_LOSS = 1u << 1,         /* backward ignores out_grad (SoftmaxOutput) */
};

/* An in-place option: output `out` may reuse input `in`'s buffer (forward),
 * or in_grad `in` may reuse out_grad `out`'s buffer (backward). */
typedef struct mx_inplace {
    int in, out;
} mx_inplace;

typedef struct mx_op_def mx_op_def;

typedef mx_status (*mx_op_forward_fn)(const mx_op_ctx *ctx, const void *params, const mx_tensor *in,
                                      const mx_req *req, mx_tensor *out, mx_tensor *aux);
typedef mx_status (*mx_op_backward_fn)(const mx_op_ctx *ctx, const void *params, const mx_tensor *out_grad,
                                       const mx_tensor *in, const mx_tensor *out, const mx_req *req,
                                       mx_tensor *in_grad, mx_tensor *aux);

/* The kernels of one device (MXNet's FCompute<gpu>): same contract as the
 * CPU forward/backward of mx_op_def, on device memory, launched on the
 * stream of ctx->exec (lib/ops/cuda/cuda_op.h). ctx->workspace is NULL
 * for them: the op's workspace() sizes the CPU kernels' needs, and device
 * kernels take temporary memory from their worker's scratch. */
typedef struct mx_op_kernels {
    mx_op_forward_fn forward;
    mx_op_backward_fn backward;
    void (*state_free)(void *state); /* NULL: kernels keep no state */
    /* Dtypes besides float32 these kernels compute in (MX_DTYPE_BIT). A
     * GPU node of another dtype is refused at bind, naming op and dtype. */
    uint32_t dtypes;
} mx_op_kernels;

/* An operator's GPU kernels, defined in its X.cu as
 * `MX_OP_GPU_KERNELS(x) = {fwd, bwd, state_free};` and named in its
 * mx_op_def as `.gpu = MX_OP_GPU(x)` (NULL in builds without CUDA). */
#ifdef MX_USE_CUDA
#define MX_OP_GPU(x) (&mx_op_gpu_##x)
#define MX_OP_GPU_DECLARE(x) extern const mx_op_kernels mx_op_gpu_##x
#else
#define MX_OP_GPU(x) NULL
#define MX_OP_GPU_DECLARE(x) extern const mx_op_kernels mx_op_gpu_##x /* never defined, never used */
#endif

struct mx_op_def {
    const char *name;                 /* MXNet's name: "Convolution" */
    const char *const *aliases;       /* NULL-terminated or NULL */
    const char *doc;
    const mx_param_desc *params;
    int n_params;
    size_t params_size;               /* sizeof the op's params struct */
    unsigned flags;                   /* MX_OP_* */
    /* Cross-parameter checks after parsing (e.g. kernel and stride ranks
     * agree). NULL: none. Errors name the op, parameter and value. */
    mx_status (*check)(const void *params);

    /* Inputs: arguments then auxiliary states; names without the node
     * prefix ("data", "weight", "moving_mean"). Return the count. */
    int (*list_inputs)(const void *params, const char **names);
    int (*num_aux)(const void *params);  /* trailing inputs that are aux; NULL: 0 */
    int (*list_outputs)(const void *params, const char **names);
    /* Outputs the graph shows; the rest are internal (mask, mean...). NULL:
     * all. An internal output nobody reads (no backward pass, say) gets
     * req MX_REQ_NULL and no memory: forward must honour that. */
    int (*num_visible_outputs)(const void *params);

    /* Fills unknown shapes (ndim 0) of inputs and all outputs from the
     * known ones; errors name the op and the mismatched shapes. Pure. */
    mx_status (*infer_shape)(const void *params, mx_shape *in, int n_in, mx_shape *out, int n_out);
    /* Fills unknown dtypes (-1) of inputs and outputs from the known ones
     * (MXNet's FInferType); errors name the op and both dtypes. NULL:
     * every input and output has one dtype, the first known input's
     * (float32 when none is known: mx_op_infer_type_same). */
    mx_status (*infer_type)(const void *params, int *in, int n_in, int *out, int n_out);
    /* Dtypes other than float32 its CPU kernels compute in themselves
     * (MX_DTYPE_BIT per dtype: Cast). Nodes of other dtypes run their
     * float32 kernels on float32 copies of their tensors (executor.c). */
    uint32_t cpu_dtypes;
    /* Workspace bytes for forward / backward given the inferred shapes.
     * NULL: none. */
    size_t (*workspace)(const void *params, const mx_shape *in, const mx_shape *out, bool backward);

    unsigned backward_deps;           /* MX_BWD_* */
    /* Finer: which inputs (MX_BWD_IN_DATA) and outputs (MX_BWD_OUT_DATA)
     * backward reads, bit i for index i; 0 means all of them. The planner
     * frees what backward does not read as soon as the forward pass is
     * done with it. */
    uint64_t backward_in_mask, backward_out_mask;
    const mx_inplace *forward_inplace;  /* terminated by {-1, -1}; NULL: none */
    const mx_inplace *backward_inplace;

    /* With MX_OP_NEEDS_RNG: whether forward draws in a pass of this kind
     * (Dropout draws in training only, unless mode=always), so prediction
     * binds need no generator and inference passes do not wait on it.
     * NULL: draws in every pass. */
    bool (*uses_rng)(const void *params, bool is_train);

    /* The CPU forward applies ctx->fold to output 0, so the executor may
     * fold an Activation or clip that alone reads that output into this op
     * (backward needs nothing of the op: the executor turns the output
     * gradient into the folded layer's input gradient first). */
    bool folds_elementwise;
    /* With folds_elementwise: the CPU backward kernel takes ctx->fold's
     * gradient itself, in its own pass over the output gradient (one pass
     * over memory fewer than the executor's mx_fold_backward before it),
     * reading output 0; like that pass it may overwrite the output
     * gradient. Device kernels never do: the executor runs the pass for
     * them. */
    bool folds_backward;
    /* With folds_backward: for a folded relu or clip, whose derivative
     * depends only on where the layer's own result z lies (z > 0, or
     * a_min < z < a_max), the CPU backward kernel recomputes z from its
     * inputs with the forward's expression (the same bits, so the same
     * mask) and does not read output 0: that output may go after its last
     * forward reader (Inception's branch outputs, copied into a Concat). */
    bool fold_mask_from_inputs;
    /* Whether the CPU kernels write output 0 (forward) and read it and its
     * gradient (backward) at out[0].batch_stride and out_grad[0].batch_stride
     * from one item of axis 0 to the next, for these params and that output
     * shape: the executor may then place the output inside a Concat's
     * output along axis 1, and its gradient inside the Concat's output
     * gradient (the Concat has nothing left to copy). NULL: never. */
    bool (*strided_output)(const void *params, const mx_shape *out0);

    /* The CPU kernels. */
    mx_op_forward_fn forward;
    /* in_grad[i] is written per req[i]; aux may be read (and is not
     * updated). Tensors not declared in backward_deps may hold garbage. */
    mx_op_backward_fn backward;
    /* Frees what the CPU kernels keep in a node's state slot
     * (mx_op_ctx.state); NULL: they keep nothing. */
    void (*state_free)(void *state);
    /* The GPU kernels (MX_OP_GPU(x)), or NULL: binding the operator on a
     * GPU is then an error naming it (mx_op_kernels_for). */
    const mx_op_kernels *gpu;
};

/* ------------------------------------------------------------ registry */

/* The operator with this MXNet name or alias (exact), or NULL. */
const mx_op_def *mx_op_find(const char *name);
/* Like mx_op_find, but records MX_ERR_INVALID "unknown operator 'X' (did
 * you mean 'Y'?)" when absent. */
mx_status mx_op_lookup(const char *name, const mx_op_def **out);
/* Registry iteration: the i-th operator, NULL past the end. */
const mx_op_def *mx_op_at(int i);
int mx_op_count(void);

/* The kernels that run `op` on `ctx`'s device (CPU: the op's own forward
 * and backward) into *out, or MX_ERR_UNSUPPORTED: "operator 'X' has no
 * kernel for gpu(0)" (or "... in this build without CUDA"). */
mx_status mx_op_kernels_for(const mx_op_def *op, mx_context ctx, mx_op_kernels *out);

/* MXNet's ElemwiseType: every input and output takes the first known
 * input dtype (float32 when none is known); a known one that differs is an
 * error naming `op`, the slot and both dtypes. */
mx_status mx_op_infer_type_same(const char *op, int *in, int n_in, int *out, int n_out);
/* The same over every input but `index_input` (Embedding's data, take's
 * indices, one_hot's, where's condition: MXNet's rules let indices be of
 * any type), which keeps its own dtype (float32 when unknown). */
mx_status mx_op_infer_type_index(const char *op, int index_input, int *in, int n_in, int *out, int n_out);
/* The rule an op node follows: its infer_type, or mx_op_infer_type_same. */
mx_status mx_op_infer_type(const mx_op_def *op, const void *params, int *in, int n_in, int *out, int n_out);

/* Whether the op's backward kernel reads its output k (backward_deps and
 * the output mask). */
static inline bool mx_op_backward_reads_output(const mx_op_def *op, int k)
{
    uint64_t mask = op->backward_out_mask;
    return (op->backward_deps & MX_BWD_OUT_DATA) && (!mask || (k < 64 && (mask >> k) & 1));
}

/* MX_ERR_INVALID, naming `op`, when an element-wise layer folded into it
 * would have to apply to an output that req adds to (the executor never
 * folds such a pair). */
mx_status mx_fold_check_req(const mx_fold *f, mx_req req, const char *op);

/* ------------------------------------------------------------ params */

/* Parses key/value strings into a params struct (params_size bytes at
 * out), applying defaults, ranges and the op's check(). Unknown keys,
 * missing required keys and bad values return MX_ERR_INVALID naming the
 * operator, the key, the value and, for misspellings, the nearest key. */
mx_status mx_op_parse_params(const mx_op_def *op, const char *const *keys, const char *const *values,
                             int n, void *out);
/* Writes a parameter value in MXNet's str() form (see mx_params_format). */
#define mx_op_format_param mx_params_format
/* The parameter descriptor named `key`, or NULL. */
const mx_param_desc *mx_op_param(const mx_op_def *op, const char *key);


/* ------------------------------------------------------------ helpers */

/* Writes `value` to an output element per its request (write or add). */
static inline void mx_req_assign_f32(mx_req req, float *dst, float value)
{
    if (req == MX_REQ_ADD) *dst += value;
    else if (req != MX_REQ_NULL) *dst = value;
}

#endif /* MX_OP_H */
