/*
 * base.h - status codes, the thread-local last-error message, checked
 * allocation and small shared helpers used by every module of lib/.
 *
 * Every fallible library function returns an mx_status. On failure it has
 * recorded a message for the user (what went wrong, in their terms) in a
 * thread-local buffer that mx_last_error() returns, and the source file:line
 * that noticed it, which mx_last_error_location() returns (for debugging;
 * tools print it when MX_DEBUG is set). The library never exits or aborts;
 * only cmd/ mains turn a status into an exit code.
 */
#ifndef MX_BASE_H
#define MX_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum mx_status {
    MX_OK = 0,
    MX_ERR_INVALID = 1,     /* bad argument, parameter or shape */
    MX_ERR_NOMEM = 2,       /* an allocation failed */
    MX_ERR_IO = 3,          /* open/read/write/rename failed */
    MX_ERR_FORMAT = 4,      /* malformed or truncated input file */
    MX_ERR_UNSUPPORTED = 5, /* valid request this build cannot serve */
    MX_ERR_RUNTIME = 6,     /* a failure while running an operation */
    MX_ERR_DEVICE = 7,      /* CUDA / device failure */
    MX_STATUS_COUNT
} mx_status;

/* A short name for a status ("invalid argument", ...). Never NULL. */
const char *mx_status_name(mx_status status);

/* Records `status` with a printf-style message and the source location.
 * Returns `status` so callers can write `return MX_ERROR(...)`. */
mx_status mx_error_set(mx_status status, const char *file, int line,
                       const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
mx_status mx_error_setv(mx_status status, const char *file, int line,
                        const char *fmt, va_list ap);

/* Records a message verbatim (already formatted, e.g. carried over from
 * another thread by the engine). Returns `status`. */
mx_status mx_error_set_message(mx_status status, const char *message);

/* Prepends "context: " to the current message, keeping the status; used to
 * add outer context such as a file name on the way up. Returns `status`. */
mx_status mx_error_prefix(mx_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The last error message recorded on this thread ("" if none). */
const char *mx_last_error(void);
/* "file.c:123" where that error was first recorded ("" if unknown). */
const char *mx_last_error_location(void);
/* The status of the last recorded error on this thread (MX_OK if none). */
mx_status mx_last_status(void);
void mx_error_clear(void);

/* A snapshot of this thread's error state, for code that runs other work
 * on the caller's thread (the synchronous engine) and must not clobber it. */
typedef struct mx_error_state {
    mx_status status;
    char message[1024];
    char location[128];
} mx_error_state;
void mx_error_save(mx_error_state *out);
void mx_error_restore(const mx_error_state *state);

#define MX_ERROR(status, ...) mx_error_set((status), __FILE__, __LINE__, __VA_ARGS__)

/* Propagates a failing status from an expression that returns mx_status. */
#define MX_TRY(expr)                                                          \
    do {                                                                      \
        mx_status mx_try_status_ = (expr);                                    \
        if (mx_try_status_ != MX_OK) return mx_try_status_;                   \
    } while (0)

/* Checked allocation: on failure records MX_ERR_NOMEM with the size and the
 * caller's location and returns NULL. Sizes of zero allocate one byte so a
 * NULL result always means failure. */
void *mx_malloc_at(size_t bytes, const char *file, int line);
void *mx_calloc_at(size_t count, size_t size, const char *file, int line);
void *mx_realloc_at(void *ptr, size_t bytes, const char *file, int line);
char *mx_strdup_at(const char *s, const char *file, int line);
#define mx_malloc(bytes) mx_malloc_at((bytes), __FILE__, __LINE__)
#define mx_calloc(count, size) mx_calloc_at((count), (size), __FILE__, __LINE__)
#define mx_realloc(ptr, bytes) mx_realloc_at((ptr), (bytes), __FILE__, __LINE__)
#define mx_strdup(s) mx_strdup_at((s), __FILE__, __LINE__)
void mx_free(void *ptr);

/* Where data lives and operations run. dev_type uses MXNet's codes so
 * contexts round-trip through .params files unchanged. */
typedef enum mx_dev_type {
    MX_DEV_CPU = 1,
    MX_DEV_GPU = 2,
    MX_DEV_CPU_PINNED = 3,
} mx_dev_type;

typedef struct mx_context {
    int32_t dev_type; /* mx_dev_type */
    int32_t dev_id;
} mx_context;

static inline mx_context mx_cpu(void) { return (mx_context){MX_DEV_CPU, 0}; }
static inline mx_context mx_cpu_pinned(void) { return (mx_context){MX_DEV_CPU_PINNED, 0}; }
static inline mx_context mx_gpu(int32_t id) { return (mx_context){MX_DEV_GPU, id}; }
static inline int mx_context_equal(mx_context a, mx_context b)
{
    return a.dev_type == b.dev_type && a.dev_id == b.dev_id;
}
/* "cpu(0)", "gpu(1)", ... into buf (at least 32 bytes); returns buf. */
const char *mx_context_str(mx_context ctx, char *buf, size_t size);

/* Overflow-checked size arithmetic: return 0 on overflow, 1 on success. */
int mx_size_mul(size_t a, size_t b, size_t *out);
int mx_size_add(size_t a, size_t b, size_t *out);

/* Reads an integer environment variable; returns `fallback` when unset or
 * not a valid integer. Read-only: the library never writes the environment. */
long mx_env_long(const char *name, long fallback);
/* The first count of a variable that may hold OpenMP's list ("4,2": 4);
 * `fallback` when unset or unreadable. */
long mx_env_first_count(const char *name, long fallback);
/* Every environment variable the library reads as a number or a word
 * (MXNET_EXEC_ENABLE_FOLDING, OMP_NUM_THREADS, MXNET_ENGINE_TYPE,
 * MX_WINOGRAD_TILE, ...), checked at once: one that is set to a value
 * it cannot take is MX_ERR_INVALID naming it, its value and what it
 * takes (MXNet's dmlc::GetEnv refuses such values too), where reading it
 * would have fallen back to the default in silence. mx_runtime_create
 * calls it, so every tool stops at start-up. */
mx_status mx_env_check(void);
/* MXNET_ENFORCE_DETERMINISM set to a non-zero number (MXNet's switch):
 * GPU kernels use only algorithms that give the same bits every run, and
 * an operation that has none is refused with MX_ERR_UNSUPPORTED. */
bool mx_determinism_enforced(void);

/* Monotonic wall-clock time in seconds, for timings and logs. */
double mx_time_seconds(void);

/* xoshiro256** seeded by splitmix64: the project's one generator. mx_rng
 * (ndarray.h) wraps it as an engine resource; host code that draws outside
 * the engine (the synthetic iterator) uses it directly. */
typedef struct mx_xoshiro {
    uint64_t s[4];
} mx_xoshiro;
void mx_xoshiro_seed(mx_xoshiro *g, uint64_t seed);
uint64_t mx_xoshiro_next(mx_xoshiro *g);

/* Edit distance (case-insensitive), for "did you mean" suggestions. */
int mx_edit_distance(const char *a, const char *b);
/* The candidate closest to `word` if close enough to be a likely typo,
 * else NULL. */
const char *mx_suggest(const char *word, const char *const *candidates, int n);

/* A name -> id index over a table the caller owns (graph nodes, config
 * sections), so that looking a name up is O(1) instead of a scan: open
 * addressing with linear probing, under half full. The index stores ids
 * only; name_of(ctx, id) gives an id's name (ctx must stay valid, the
 * table behind it may move). The first id put under a name wins. */
typedef const char *(*mx_name_of_fn)(const void *ctx, uint32_t id);
typedef struct mx_name_index {
    uint32_t *slots; /* UINT32_MAX: free */
    uint32_t cap;    /* 0 or a power of two */
    uint32_t count;
    mx_name_of_fn name_of;
    const void *ctx;
} mx_name_index;
#define MX_NAME_NONE UINT32_MAX
void mx_name_index_init(mx_name_index *x, mx_name_of_fn name_of, const void *ctx);
void mx_name_index_free(mx_name_index *x);
/* Room for `n` ids in all (rehashing ids 0..n_existing-1 when it grows). */
mx_status mx_name_index_reserve(mx_name_index *x, uint32_t n, uint32_t n_existing);
/* Adds id (reserve first) unless its name is already there. */
void mx_name_index_put(mx_name_index *x, uint32_t id);
/* Removes id if it is the one indexed under its name. */
void mx_name_index_drop(mx_name_index *x, uint32_t id);
/* The id under `name`, or MX_NAME_NONE. */
uint32_t mx_name_index_find(const mx_name_index *x, const char *name);

#endif /* MX_BASE_H */
