/* device.c - the device registry and the host (CPU) implementation. */
#include "device/device.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Host blocks are cache-line aligned so vector kernels never straddle. */
#define HOST_ALIGNMENT 64

static int cpu_count(void) { return 1; }

static mx_status cpu_alloc(int dev_id, size_t bytes, void **out)
{
    (void)dev_id;
    size_t rounded;
    if (!mx_size_add(bytes ? bytes : 1, HOST_ALIGNMENT - 1, &rounded))
        return MX_ERROR(MX_ERR_NOMEM, "host allocation of %zu bytes overflows", bytes);
    rounded -= rounded % HOST_ALIGNMENT;
    *out = aligned_alloc(HOST_ALIGNMENT, rounded);
    if (!*out) return MX_ERROR(MX_ERR_NOMEM, "out of host memory allocating %zu bytes", bytes);
    return MX_OK;
}

static void cpu_free(int dev_id, void *ptr)
{
    (void)dev_id;
    free(ptr);
}

static mx_status cpu_copy(void *dst, mx_context dst_ctx, const void *src, mx_context src_ctx,
                          size_t bytes, void *stream)
{
    (void)dst_ctx;
    (void)src_ctx;
    (void)stream;
    if (bytes) memmove(dst, src, bytes);
    return MX_OK;
}

static mx_status cpu_zero(void *dst, int dev_id, size_t bytes, void *stream)
{
    (void)dev_id;
    (void)stream;
    memset(dst, 0, bytes);
    return MX_OK;
}

static mx_status cpu_sync(int dev_id, void *stream)
{
    (void)dev_id;
    (void)stream;
    return MX_OK;
}

static const mx_device_ops device_cpu = {
    .name = "cpu",
    .count = cpu_count,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
};

#ifndef MX_USE_CUDA
mx_status mx_device_workers_create(mx_device_workers **out)
{
    *out = NULL;
    return MX_OK;
}

void mx_device_workers_free(mx_device_workers *workers) { (void)workers; }
#endif

#ifdef MX_USE_CUDA
/* cpu_pinned: host memory the GPU copies from and to without staging. */
static mx_status pinned_alloc(int dev_id, size_t bytes, void **out)
{
    if (mx_cuda_host_alloc(bytes, out) == MX_OK) return MX_OK;
    if (mx_last_status() == MX_ERR_NOMEM) return MX_ERR_NOMEM;
    mx_error_clear();
    return cpu_alloc(dev_id, bytes, out); /* no usable GPU: nothing to pin for */
}

static void pinned_free(int dev_id, void *ptr)
{
    if (!mx_cuda_host_free(ptr)) cpu_free(dev_id, ptr);
}

static const mx_device_ops device_cpu_pinned = {
    .name = "cpu_pinned",
    .count = cpu_count,
    .alloc = pinned_alloc,
    .free = pinned_free,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
};
#endif

#ifndef MX_USE_CUDA
bool mx_device_graph_possible(const mx_exec_ctx *exec, char *why, size_t size)
{
    (void)exec;
    snprintf(why, size, "this build has no GPU support (built without CUDA)");
    return false;
}
mx_status mx_device_graph_capture(const mx_exec_ctx *exec, mx_device_graph_body body, void *arg,
                                  mx_device_graph **out)
{
    (void)exec, (void)body, (void)arg;
    *out = NULL;
    return MX_ERROR(MX_ERR_UNSUPPORTED, "CUDA graphs: this build has no GPU support (built without CUDA)");
}
bool mx_device_graph_current(const mx_exec_ctx *exec, const mx_device_graph *g)
{
    (void)exec, (void)g;
    return false;
}
mx_status mx_device_graph_launch(const mx_exec_ctx *exec, mx_device_graph *g)
{
    (void)exec, (void)g;
    return MX_ERROR(MX_ERR_UNSUPPORTED, "CUDA graphs: this build has no GPU support (built without CUDA)");
}
void mx_device_graph_free(mx_device_graph *g) { (void)g; }
#endif

/* Indexed by mx_dev_type. */
static const mx_device_ops *const device_table[] = {
    [MX_DEV_CPU] = &device_cpu,
#ifdef MX_USE_CUDA
    [MX_DEV_GPU] = &mx_device_cuda,
#else
    [MX_DEV_GPU] = NULL,
#endif
#ifdef MX_USE_CUDA
    [MX_DEV_CPU_PINNED] = &device_cpu_pinned,
#else
    [MX_DEV_CPU_PINNED] = &device_cpu, /* no GPU to pin for */
#endif
};

const mx_device_ops *mx_device_get(int dev_type)
{
    if (dev_type <= 0 || (size_t)dev_type >= sizeof(device_table) / sizeof(device_table[0])) {
        MX_ERROR(MX_ERR_INVALID, "unknown device type %d", dev_type);
        return NULL;
    }
    const mx_device_ops *ops = device_table[dev_type];
    if (!ops) MX_ERROR(MX_ERR_UNSUPPORTED, "this build has no GPU support (built without CUDA)");
    return ops;
}

mx_status mx_device_check(mx_context ctx)
{
    const mx_device_ops *ops = mx_device_get(ctx.dev_type);
    if (!ops) return mx_last_status();
    char name[32];
    if (ctx.dev_id < 0)
        return MX_ERROR(MX_ERR_INVALID, "bad device id in %s", mx_context_str(ctx, name, sizeof(name)));
    if (ctx.dev_type == MX_DEV_GPU) {
        int n = ops->count();
        if (ctx.dev_id >= n)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "%s requested but %d GPU(s) are visible",
                            mx_context_str(ctx, name, sizeof(name)), n);
    }
    return MX_OK;
}

mx_status mx_device_check_list(const mx_context *ctx, int n)
{
    for (int i = 0; i < n; i++) MX_TRY(mx_device_check(ctx[i]));
    return MX_OK;
}

static bool mixes_types(const mx_context *list, int n, mx_context c)
{
    return n > 0 && list[0].dev_type != c.dev_type;
}

static mx_status list_error(const char *text, const char *why)
{
    return MX_ERROR(MX_ERR_INVALID, "bad context list '%s': %s (cpu, cpu:0-3, gpu:0, gpu:0-3 or gpu:0,2)", text, why);
}

/* A device number: digits only, 0..1023. */
static bool parse_id(const char *s, size_t len, int *out)
{
    while (len && isspace((unsigned char)*s)) s++, len--;
    while (len && isspace((unsigned char)s[len - 1])) len--;
    if (!len || len > 4) return false;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i])) return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v > 1023) return false;
    *out = v;
    return true;
}

mx_status mx_device_parse_list(const char *text, mx_context **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    mx_context *list = NULL;
    int n = 0, cap = 0, type = 0; /* type carries over to bare numbers */
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return list_error(text, "empty");
    mx_status s = MX_OK;
    while (*p && s == MX_OK) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && isspace((unsigned char)*p)) p++, len--;
        while (len && isspace((unsigned char)p[len - 1])) len--;
        const char *ids = p;
        size_t ids_len = len;
        if (len >= 3 && !strncmp(p, "cpu", 3)) type = MX_DEV_CPU, ids += 3, ids_len -= 3;
        else if (len >= 3 && !strncmp(p, "gpu", 3)) type = MX_DEV_GPU, ids += 3, ids_len -= 3;
        else if (!type || !len || !isdigit((unsigned char)p[0])) {
            s = list_error(text, len ? "expected cpu or gpu" : "empty item");
            break;
        }
        int lo = 0, hi = 0;
        if (ids != p) { /* after a type name: nothing, ":N", ":A-B" or "(N)" */
            if (ids_len == 0) {
                lo = hi = 0;
            } else if (ids[0] == ':' || ids[0] == '(') {
                const char *num = ids + 1;
                size_t num_len = ids_len - 1;
                if (ids[0] == '(') {
                    if (!num_len || num[num_len - 1] != ')') {
                        s = list_error(text, "missing ')'");
                        break;
                    }
                    num_len--;
                }
                const char *dash = memchr(num, '-', num_len);
                if (dash) {
                    if (!parse_id(num, (size_t)(dash - num), &lo) ||
                        !parse_id(dash + 1, num_len - (size_t)(dash - num) - 1, &hi)) {
                        s = list_error(text, "bad range (device numbers 0..1023, as low-high)");
                        break;
                    }
                } else if (!parse_id(num, num_len, &lo)) {
                    s = list_error(text, "bad device number (0..1023)");
                    break;
                } else {
                    hi = lo;
                }
            } else {
                s = list_error(text, "expected ':' after the device type");
                break;
            }
        } else if (!parse_id(p, len, &lo)) {
            s = list_error(text, "bad device number (0..1023)");
            break;
        } else {
            hi = lo;
        }
        if (hi < lo) {
            s = list_error(text, "bad range (device numbers 0..1023, as low-high)");
            break;
        }
        for (int d = lo; d <= hi && s == MX_OK; d++) {
            mx_context c = {type, d};
            for (int i = 0; i < n; i++)
                if (mx_context_equal(list[i], c)) s = list_error(text, "a device is listed twice");
            if (mixes_types(list, n, c)) s = list_error(text, "mixes cpu and gpu");
            if (s != MX_OK) break;
            if (n == cap) {
                cap = cap ? 2 * cap : 4;
                mx_context *grown = mx_realloc(list, (size_t)cap * sizeof(*grown));
                if (!grown) {
                    s = mx_last_status();
                    break;
                }
                list = grown;
            }
            list[n++] = c;
        }
        if (!end) break;
        p = end + 1;
        if (!*p) s = list_error(text, "empty item");
    }
    if (s != MX_OK) {
        free(list);
        return s;
    }
    *out = list;
    *n_out = n;
    return MX_OK;
}

mx_status mx_device_worker_init(mx_context ctx, mx_engine_lane lane, void **stream, void *user)
{
    const mx_device_ops *ops = mx_device_get(ctx.dev_type);
    if (!ops) return mx_last_status();
    return ops->worker_init ? ops->worker_init(ctx, lane, stream, user) : MX_OK;
}

void mx_device_worker_exit(mx_context ctx, mx_engine_lane lane, void *stream, void *user)
{
    const mx_device_ops *ops = mx_device_get(ctx.dev_type);
    if (ops && ops->worker_exit) ops->worker_exit(ctx, lane, stream, user);
}

mx_status mx_device_op_done(const mx_exec_ctx *exec)
{
    if (exec->ctx.dev_type == MX_DEV_CPU) return MX_OK;
    const mx_device_ops *ops = mx_device_get(exec->ctx.dev_type);
    if (!ops) return mx_last_status();
    return ops->op_done ? ops->op_done(exec->ctx.dev_id, exec->stream) : MX_OK;
}

mx_status mx_device_copy(void *dst, mx_context dst_ctx, const void *src, mx_context src_ctx,
                         size_t bytes, void *stream)
{
    /* A copy touching a GPU is the GPU's to do; host-to-host is the CPU's. */
    int type = dst_ctx.dev_type == MX_DEV_GPU ? MX_DEV_GPU : src_ctx.dev_type;
    const mx_device_ops *ops = mx_device_get(type);
    if (!ops) return mx_last_status();
    return ops->copy(dst, dst_ctx, src, src_ctx, bytes, stream);
}
