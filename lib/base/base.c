/* base.c - status names, the thread-local error buffer, checked allocation. */
#include "base/base.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MX_ERROR_CAPACITY 1024

/* Thread-local by design: each thread sees the error of its own last call. */
static _Thread_local char tls_error_message[MX_ERROR_CAPACITY];
static _Thread_local mx_status tls_error_status = MX_OK;
static _Thread_local char tls_error_location[128];

static const char *const status_names[MX_STATUS_COUNT] = {
    [MX_OK] = "ok",
    [MX_ERR_INVALID] = "invalid argument",
    [MX_ERR_NOMEM] = "out of memory",
    [MX_ERR_IO] = "I/O error",
    [MX_ERR_FORMAT] = "format error",
    [MX_ERR_UNSUPPORTED] = "unsupported",
    [MX_ERR_RUNTIME] = "runtime error",
    [MX_ERR_DEVICE] = "device error",
};
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == MX_STATUS_COUNT,
               "status_names must list every mx_status");

const char *mx_status_name(mx_status status)
{
    if ((int)status < 0 || status >= MX_STATUS_COUNT) return "unknown status";
    return status_names[status];
}

mx_status mx_error_setv(mx_status status, const char *file, int line,
                        const char *fmt, va_list ap)
{
    const char *base = file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : file;
    if (base) snprintf(tls_error_location, sizeof(tls_error_location), "%s:%d", base, line);
    else tls_error_location[0] = '\0';
    vsnprintf(tls_error_message, MX_ERROR_CAPACITY, fmt, ap);
    tls_error_status = status;
    return status;
}

mx_status mx_error_set(mx_status status, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mx_error_setv(status, file, line, fmt, ap);
    va_end(ap);
    return status;
}

mx_status mx_error_set_message(mx_status status, const char *message)
{
    snprintf(tls_error_message, MX_ERROR_CAPACITY, "%s", message ? message : "");
    tls_error_location[0] = '\0';
    tls_error_status = status;
    return status;
}

mx_status mx_error_prefix(mx_status status, const char *fmt, ...)
{
    char prefix[MX_ERROR_CAPACITY];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    size_t plen = n < 0 ? 0 : strnlen(prefix, sizeof(prefix) - 1);
    size_t olen = strnlen(tls_error_message, MX_ERROR_CAPACITY - 1);
    /* Shift the old message right, then put "prefix: " in front of it. */
    size_t head = plen + 2;
    if (head >= MX_ERROR_CAPACITY) head = MX_ERROR_CAPACITY - 1;
    if (olen > MX_ERROR_CAPACITY - 1 - head) olen = MX_ERROR_CAPACITY - 1 - head;
    memmove(tls_error_message + head, tls_error_message, olen);
    tls_error_message[head + olen] = '\0';
    memcpy(tls_error_message, prefix, head >= 2 ? head - 2 : 0);
    if (head >= 2) memcpy(tls_error_message + head - 2, ": ", 2);
    tls_error_status = status;
    return status;
}

void mx_error_save(mx_error_state *out)
{
    out->status = tls_error_status;
    memcpy(out->message, tls_error_message, sizeof(out->message));
    memcpy(out->location, tls_error_location, sizeof(out->location));
}

void mx_error_restore(const mx_error_state *state)
{
    tls_error_status = state->status;
    memcpy(tls_error_message, state->message, sizeof(tls_error_message));
    memcpy(tls_error_location, state->location, sizeof(tls_error_location));
}

const char *mx_last_error(void) { return tls_error_message; }
const char *mx_last_error_location(void) { return tls_error_location; }
mx_status mx_last_status(void) { return tls_error_status; }

void mx_error_clear(void)
{
    tls_error_message[0] = '\0';
    tls_error_location[0] = '\0';
    tls_error_status = MX_OK;
}

void *mx_malloc_at(size_t bytes, const char *file, int line)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) mx_error_set(MX_ERR_NOMEM, file, line, "out of memory allocating %zu bytes", bytes);
    return p;
}

void *mx_calloc_at(size_t count, size_t size, const char *file, int line)
{
    size_t total;
    if (!mx_size_mul(count, size, &total)) {
        mx_error_set(MX_ERR_NOMEM, file, line, "allocation of %zu x %zu bytes overflows", count, size);
        return NULL;
    }
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) mx_error_set(MX_ERR_NOMEM, file, line, "out of memory allocating %zu bytes", total);
    return p;
}

void *mx_realloc_at(void *ptr, size_t bytes, const char *file, int line)
{
    void *p = realloc(ptr, bytes ? bytes : 1);
    if (!p) mx_error_set(MX_ERR_NOMEM, file, line, "out of memory reallocating to %zu bytes", bytes);
    return p;
}

char *mx_strdup_at(const char *s, const char *file, int line)
{
    size_t n = strlen(s) + 1;
    char *p = mx_malloc_at(n, file, line);
    if (p) memcpy(p, s, n);
    return p;
}

void mx_free(void *ptr) { free(ptr); }

int mx_size_mul(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

int mx_size_add(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a) return 0;
    *out = a + b;
    return 1;
}

/* The integer variable `name` up to its first character in `stops` (the
 * end of the text always stops it), or `fallback` when unset, empty or
 * not an integer there. */
static long env_leading_long(const char *name, const char *stops, long fallback)
{
    const char *text = getenv(name);
    if (!text || !*text) return fallback;
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || (*end != '\0' && !strchr(stops, *end))) return fallback;
    return value;
}

long mx_env_long(const char *name, long fallback) { return env_leading_long(name, "", fallback); }

/* The variables the library reads as numbers or words. Integers: any
 * value strtol reads whole (switches: 0 off, anything else on, as MXNet's
 * dmlc::GetEnv reads them), at least `min`; OMP_NUM_THREADS may be
 * OpenMP's list of counts ("4,2": the first is ours). Words: one of
 * `words`. Switches read as present or "0" (MX_DEBUG, MX_CUDNN_LOG,
 * MX_GPU_SYNC_OPS) take any value and are not listed. */
typedef struct env_rule {
    const char *name;
    const char *words; /* '|'-separated; NULL: an integer */
    long min;
} env_rule;

static const env_rule env_rules[] = {
    {"MXNET_BACKWARD_DO_MIRROR", "0|1|2", 0},
    {"MXNET_EXEC_ENABLE_ADDTO", NULL, LONG_MIN},
    {"MXNET_EXEC_ENABLE_INPLACE", NULL, LONG_MIN},
    {"MXNET_EXEC_ENABLE_COSHARE", NULL, LONG_MIN},
    {"MXNET_EXEC_ENABLE_FOLDING", NULL, LONG_MIN},
    {"MXNET_EXEC_NUM_MATCH_COLOR", NULL, 1},
    {"MXNET_ENFORCE_DETERMINISM", NULL, LONG_MIN},
    {"MXC_UPDATE_IN_BACKWARD", NULL, LONG_MIN},
    {"MXC_CONCAT_IN_PLACE", NULL, LONG_MIN},
    {"MXNET_CPU_WORKER_NTHREADS", NULL, 1},
    {"MXNET_CPU_IO_NTHREADS", NULL, 1},
    {"MXNET_GPU_WORKER_NTHREADS", NULL, 1},
    {"MXNET_GPU_COPY_NTHREADS", NULL, 1},
    {"OMP_NUM_THREADS", NULL, 1},
    {"MXNET_CUDNN_AUTOTUNE_DEFAULT", "0|1|2", 0},
    {"MXNET_ENGINE_TYPE", "NaiveEngine|ThreadedEngine|ThreadedEnginePerDevice", 0},
    {"MX_CUDNN_GRAPH", "0|1|2", 0},
    {"MX_WINOGRAD_TILE", "2|4|6", 0},
    {"MX_WINOGRAD_ISA", "sse|avx2|avx512", 0},
    {"MX_DIRECT_ISA", "none|avx512", 0},
    {"MX_SIMD", "portable|sse|avx2|avx512", 0},
};

static bool env_word_ok(const char *words, const char *text)
{
    const size_t n = strlen(text);
    for (const char *w = words; *w;) {
        const char *bar = strchr(w, '|');
        const size_t len = bar ? (size_t)(bar - w) : strlen(w);
        if (len == n && strncmp(w, text, n) == 0) return true;
        if (!bar) break;
        w = bar + 1;
    }
    return false;
}

/* text as an integer list (OMP_NUM_THREADS) or one integer: each at least
 * min; false when any is not. */
static bool env_integers_ok(const char *text, long min, bool list)
{
    for (const char *p = text;;) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < min || isspace((unsigned char)*p)) return false;
        if (*end == '\0') return true;
        if (!list || *end != ',') return false;
        p = end + 1;
    }
}

mx_status mx_env_check(void)
{
    for (size_t i = 0; i < sizeof(env_rules) / sizeof(env_rules[0]); i++) {
        const env_rule *r = &env_rules[i];
        const char *text = getenv(r->name);
        if (!text || !*text) continue;
        if (r->words && !env_word_ok(r->words, text)) {
            char list[128];
            size_t k = 0;
            for (const char *c = r->words; *c && k + 3 < sizeof(list); c++) {
                if (*c == '|') {
                    list[k++] = ',';
                    list[k++] = ' ';
                } else {
                    list[k++] = *c;
                }
            }
            list[k] = '\0';
            return MX_ERROR(MX_ERR_INVALID, "environment variable %s='%s': expected one of %s", r->name, text, list);
        }
        const bool list = strcmp(r->name, "OMP_NUM_THREADS") == 0;
        if (!r->words && !env_integers_ok(text, r->min, list)) {
            if (r->min == LONG_MIN)
                return MX_ERROR(MX_ERR_INVALID, "environment variable %s='%s': expected an integer (0: off)", r->name,
                                text);
            return MX_ERROR(MX_ERR_INVALID, "environment variable %s='%s': expected %s of at least %ld", r->name, text,
                            list ? "a count (or OpenMP's comma-separated counts)" : "an integer", r->min);
        }
    }
    return MX_OK;
}

long mx_env_first_count(const char *name, long fallback) { return env_leading_long(name, ",", fallback); }

bool mx_determinism_enforced(void) { return mx_env_long("MXNET_ENFORCE_DETERMINISM", 0) != 0; }

double mx_time_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *mx_context_str(mx_context ctx, char *buf, size_t size)
{
    const char *kind = ctx.dev_type == MX_DEV_GPU          ? "gpu"
                       : ctx.dev_type == MX_DEV_CPU_PINNED ? "cpu_pinned"
                       : ctx.dev_type == MX_DEV_CPU        ? "cpu"
                                                           : "unknown";
    snprintf(buf, size, "%s(%d)", kind, (int)ctx.dev_id);
    return buf;
}

/* ------------------------------------------------------------ suggestions */

int mx_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return (int)(la > lb ? la : lb);
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]) ? 0 : 1;
            int best = diag + cost;
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *mx_suggest(const char *word, const char *const *candidates, int n)
{
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < n; i++) {
        if (!candidates[i]) continue;
        int d = mx_edit_distance(word, candidates[i]);
        if (d < best_d) {
            best_d = d;
            best = candidates[i];
        }
    }
    /* A typo: at most a third of the word wrong, and at least one letter right. */
    size_t len = strlen(word);
    int limit = len <= 3 ? 1 : (int)(len / 3) + 1;
    return best && best_d <= limit && best_d < (int)len ? best : NULL;
}

/* ------------------------------------------------------------ generator */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void mx_xoshiro_seed(mx_xoshiro *g, uint64_t seed)
{
    for (int i = 0; i < 4; i++) g->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t mx_xoshiro_next(mx_xoshiro *g)
{
    uint64_t *s = g->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}
