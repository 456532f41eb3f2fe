/*
 * ndarray.h - n-dimensional arrays on a device, evaluated lazily through the
 * dependency engine (MXNet paper, section 2.2).
 *
 * An array is a view (shape, dtype, byte offset) of a reference-counted
 * storage block taken from the runtime's pooled allocator. The storage
 * carries one engine variable: every imperative operation below is pushed to
 * the engine with the variables it reads and writes and returns at once;
 * reading values out (mx_ndarray_to_host) waits. Views made by slicing share
 * storage and variable with their base, as in MXNet.
 *
 * Memory is released when the last array referring to a storage block is
 * freed, after every operation pushed on it has finished.
 */
#ifndef MX_NDARRAY_H
#define MX_NDARRAY_H

#include "base/base.h"
#include "engine/engine.h"
#include "storage/storage.h"

#include <stdbool.h>

#define MX_MAX_NDIM 8

/* mshadow's type flags, as stored in .params files. */
typedef enum mx_dtype {
    MX_FLOAT32 = 0,
    MX_FLOAT64 = 1,
    MX_FLOAT16 = 2,
    MX_UINT8 = 3,
    MX_INT32 = 4,
    MX_INT8 = 5,
    MX_INT64 = 6,
    MX_BFLOAT16 = 12, /* flags 7-11 (bool, int16, uint16, uint32, uint64) are not supported */
    MX_DTYPE_COUNT
} mx_dtype;

#define MX_DTYPE_BIT(d) (1u << (unsigned)(d))
#define MX_HALF_DTYPES (MX_DTYPE_BIT(MX_FLOAT16) | MX_DTYPE_BIT(MX_BFLOAT16))

bool mx_dtype_valid(int dtype);
size_t mx_dtype_size(mx_dtype dtype);   /* bytes per element; 0 if invalid */
const char *mx_dtype_name(mx_dtype dtype); /* "float32", ... */

typedef struct mx_shape {
    int ndim;                    /* 0 .. MX_MAX_NDIM */
    int64_t dims[MX_MAX_NDIM];
} mx_shape;

/* Builds a shape; dims beyond ndim are zeroed. */
mx_shape mx_shape_make(int ndim, const int64_t *dims);
#define MX_SHAPE(...)                                                         \
    mx_shape_make((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                  (int64_t[]){__VA_ARGS__})
int64_t mx_shape_size(const mx_shape *shape); /* product of dims (1 for ndim 0) */
bool mx_shape_equal(const mx_shape *a, const mx_shape *b);
/* "(2,3,4)" into buf; returns buf. */
const char *mx_shape_str(const mx_shape *shape, char *buf, size_t size);

/* ---------------------------------------------------------------- runtime */

/* The engine plus one pooled allocator per device (per CPU context when
 * the engine config has cpu_contexts > 1): what arrays live in. */
typedef struct mx_runtime mx_runtime;

/* config NULL = mx_engine_config_default(). */
mx_status mx_runtime_create(const mx_engine_config *config, mx_runtime **out);
/* Waits for all work, then frees. Every array must have been freed first. */
void mx_runtime_free(mx_runtime *rt);
mx_engine *mx_runtime_engine(mx_runtime *rt);
/* Where the data iterators of this runtime put their batches: cpu(0) by
 * default; cpu_pinned when the batches are bound for a GPU (mxtrain sets
 * it for fit.ctx = gpu:...), so their copies to the device run at the
 * DMA's speed. Set before the iterators are made. */
mx_context mx_runtime_host_context(const mx_runtime *rt);
mx_status mx_runtime_set_host_context(mx_runtime *rt, mx_context ctx);

/* Allocator statistics for one context (storage.h). */
mx_status mx_runtime_storage_stats(mx_runtime *rt, mx_context ctx, mx_storage_stats *out);
/* Gives cached blocks of every device back to the system. */
void mx_runtime_release_cached(mx_runtime *rt);

/* ---------------------------------------------------------------- arrays */

typedef struct mx_ndarray mx_ndarray;

/* A new array with uninitialised contents. Errors: MX_ERR_INVALID (bad
 * shape, dtype or context), MX_ERR_UNSUPPORTED (a GPU this build or
 * machine does not have), MX_ERR_NOMEM / MX_ERR_DEVICE. */
mx_status mx_ndarray_create(mx_runtime *rt, mx_shape shape, mx_dtype dtype,
                            mx_context ctx, mx_ndarray **out);
/* Adds a reference; returns a. */
mx_ndarray *mx_ndarray_retain(mx_ndarray *a);
/* Drops a reference (NULL is fine). */
void mx_ndarray_free(mx_ndarray *a);

const mx_shape *mx_ndarray_shape(const mx_ndarray *a);
mx_dtype mx_ndarray_dtype(const mx_ndarray *a);
mx_context mx_ndarray_context(const mx_ndarray *a);
int64_t mx_ndarray_size(const mx_ndarray *a);   /* elements */
size_t mx_ndarray_nbytes(const mx_ndarray *a);
mx_runtime *mx_ndarray_runtime(const mx_ndarray *a);
/* The engine variable guarding this array's storage. */
mx_engine_var *mx_ndarray_var(const mx_ndarray *a);
/* Raw pointer to the first element (device memory for GPU arrays). Only
 * valid inside an engine op that declared the array's variable, or after
 * a wait. */
void *mx_ndarray_data(const mx_ndarray *a);

/* Rows [begin, end) along the first axis: a view sharing storage and
 * variable. Errors: MX_ERR_INVALID for ndim 0 or an out-of-range slice. */
mx_status mx_ndarray_slice(mx_ndarray *a, int64_t begin, int64_t end, mx_ndarray **out);
/* The same storage seen with another shape of equal size. */
mx_status mx_ndarray_reshape(mx_ndarray *a, mx_shape shape, mx_ndarray **out);

/* The bytes of `a` from `offset` on seen as an array of another shape and
 * dtype (an executor's planned buffer holding tensors of several types). */
mx_status mx_ndarray_view(mx_ndarray *a, size_t offset, mx_shape shape, mx_dtype dtype, mx_ndarray **out);

/* Waits until every pushed write to a has finished; returns (and clears)
 * an error raised by one of them. */
mx_status mx_ndarray_wait_to_read(mx_ndarray *a);
/* Waits until every pushed read and write of a has finished. */
mx_status mx_ndarray_wait_to_write(mx_ndarray *a);

/* Blocking copy of the whole array to host memory; bytes must equal
 * mx_ndarray_nbytes(a). Returns an error raised while computing a. */
mx_status mx_ndarray_to_host(mx_ndarray *a, void *dst, size_t bytes);
/* Blocking copy from host memory into the whole array. If an earlier op
 * writing `a` failed, the copy still happens and that error is returned. */
mx_status mx_ndarray_from_host(mx_ndarray *a, const void *src, size_t bytes);

/* ------------------------------------------------- imperative operations
 * Each checks its arguments at once (MX_ERR_INVALID naming the shapes),
 * pushes one engine operation and returns. `out` may be one of the inputs
 * (in-place update). Arithmetic is float32 (and float64); fill and copy
 * take every dtype. */

/* dst = src, converting dtype and crossing devices as needed. */
mx_status mx_nd_copy(mx_ndarray *dst, mx_ndarray *src);
mx_status mx_nd_fill(mx_ndarray *dst, double value);

typedef enum mx_binary_op { MX_OP_ADD, MX_OP_SUB, MX_OP_MUL, MX_OP_DIV } mx_binary_op;
/* out = a OP b, element-wise on equal shapes. */
mx_status mx_nd_binary(mx_binary_op op, mx_ndarray *out, mx_ndarray *a, mx_ndarray *b);
/* out = a OP s, or s OP a when scalar_first. */
mx_status mx_nd_binary_scalar(mx_binary_op op, mx_ndarray *out, mx_ndarray *a, double s,
                              bool scalar_first);
static inline mx_status mx_nd_add(mx_ndarray *o, mx_ndarray *a, mx_ndarray *b) { return mx_nd_binary(MX_OP_ADD, o, a, b); }
static inline mx_status mx_nd_sub(mx_ndarray *o, mx_ndarray *a, mx_ndarray *b) { return mx_nd_binary(MX_OP_SUB, o, a, b); }
static inline mx_status mx_nd_mul(mx_ndarray *o, mx_ndarray *a, mx_ndarray *b) { return mx_nd_binary(MX_OP_MUL, o, a, b); }
static inline mx_status mx_nd_div(mx_ndarray *o, mx_ndarray *a, mx_ndarray *b) { return mx_nd_binary(MX_OP_DIV, o, a, b); }

/* out(M,N) = op(a) * op(b) for 2-D float32 arrays through BLAS SGEMM, op
 * being the transpose when asked. out must not alias a or b. */
mx_status mx_nd_dot(mx_ndarray *out, mx_ndarray *a, mx_ndarray *b, bool transpose_a,
                    bool transpose_b);

/* ---------------------------------------------------------------- random */

/* A random generator whose state is an engine-tagged resource: draws from
 * one generator run in push order, so a seed gives the same numbers however
 * many workers run. */
typedef struct mx_rng mx_rng;
mx_status mx_rng_create(mx_runtime *rt, uint64_t seed, mx_rng **out);
void mx_rng_free(mx_rng *rng);
/* Pushes a reseed (ordered after earlier draws). */
mx_status mx_rng_seed(mx_rng *rng, uint64_t seed);
mx_engine_var *mx_rng_var(const mx_rng *rng);
/* Next raw 64 bits / uniform double in [0,1); only inside an engine op that
 * writes mx_rng_var(rng). */
uint64_t mx_rng_next_u64(mx_rng *rng);
double mx_rng_next_double(mx_rng *rng);

/* The generator's whole state (4 words), for exact resume: read it after
 * waiting (mx_engine_wait_var on mx_rng_var) or inside an op that writes
 * the generator; set_state is pushed like a reseed. */
void mx_rng_get_state(const mx_rng *rng, uint64_t state[4]);
mx_status mx_rng_set_state(mx_rng *rng, const uint64_t state[4]);

/* out ~ U[low, high) / N(mean, std^2), float32 or float64 arrays. */
mx_status mx_nd_random_uniform(mx_rng *rng, mx_ndarray *out, double low, double high);
mx_status mx_nd_random_normal(mx_rng *rng, mx_ndarray *out, double mean, double std);

/* ---------------------------------------------------------------- files */

/* A named list of arrays, as in MXNet's .params / mx.nd.save files. */
typedef struct mx_ndarray_list {
    int count;
    mx_ndarray **arrays;
    char **names;   /* NULL when the file stored no names */
} mx_ndarray_list;

/* Saves arrays (names may be NULL for an unnamed list) in MXNet's V2
 * format, writing path.tmp first and renaming it over path. */
mx_status mx_ndarray_save(const char *path, mx_ndarray *const *arrays,
                          const char *const *names, int count);
/* Same, into a malloc'ed buffer (*out_bytes long). */
mx_status mx_ndarray_save_buffer(mx_ndarray *const *arrays, const char *const *names,
                                 int count, void **out, size_t *out_bytes);
/* Loads V0, V1, V2 and V3 dense files onto the CPU. Errors name the
 * problem and the byte offset: MX_ERR_IO, MX_ERR_FORMAT (bad magic,
 * truncation, sparse storage, unknown dtype, absurd sizes). */
mx_status mx_ndarray_load(mx_runtime *rt, const char *path, mx_ndarray_list *out);
mx_status mx_ndarray_load_buffer(mx_runtime *rt, const void *data, size_t bytes,
                                 mx_ndarray_list *out);
void mx_ndarray_list_free(mx_ndarray_list *list);

#endif /* MX_NDARRAY_H */
