/*
 * kvstore.c - the table of store kinds and the front end: argument checks
 * shared by every kind, the updater, and the optimizer as updater.
 */
#include "kvstore/kvstore.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_kind_row {
    const char *name;
    const mx_kvstore_ops *ops; /* NULL: known but not in this build */
    const char *missing;       /* why, when ops is NULL */
} kv_kind_row;

/* The table of kinds: adding one is a file and a line. */
static const kv_kind_row kinds[] = {
    {"local", &mx_kvstore_local_ops, NULL},
    {"device", &mx_kvstore_device_ops, NULL},
    {"dist_sync", &mx_kvstore_dist_sync_ops, NULL},
    {"dist_async", &mx_kvstore_dist_async_ops, NULL},
    {"dist_sync_device", &mx_kvstore_dist_sync_device_ops, NULL},
    {"dist_device_sync", &mx_kvstore_dist_sync_device_ops, NULL},
};
#define N_KINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))

#define MAX_KEY (1 << 20)

struct mx_kvstore {
    const mx_kvstore_ops *ops;
    void *state;
    mx_kvstore_updater updater;
};

static mx_status find_row(const char *type, const kv_kind_row **out)
{
    *out = NULL;
    if (!type) return MX_ERROR(MX_ERR_INVALID, "kvstore: no type given");
    for (int i = 0; i < N_KINDS; i++)
        if (!strcmp(type, kinds[i].name)) *out = &kinds[i];
    if (*out) return MX_OK;
    const char *names[N_KINDS];
    for (int i = 0; i < N_KINDS; i++) names[i] = kinds[i].name;
    const char *near = mx_suggest(type, names, N_KINDS);
    if (near) return MX_ERROR(MX_ERR_INVALID, "unknown kvstore '%s' (did you mean '%s'?)", type, near);
    return MX_ERROR(MX_ERR_INVALID, "unknown kvstore '%s' (local, device, dist_sync, dist_async or dist_sync_device)",
                    type);
}

mx_status mx_kvstore_type_check(const char *type)
{
    const kv_kind_row *row;
    return find_row(type, &row);
}

const char *mx_kvstore_type_at(int i) { return i >= 0 && i < N_KINDS ? kinds[i].name : NULL; }

bool mx_kvstore_type_is_dist(const char *type) { return type && !strncmp(type, "dist_", 5); }

mx_status mx_kvstore_options_check(const char *type, const mx_kvstore_options *opts)
{
    const kv_kind_row *row;
    MX_TRY(find_row(type, &row));
    if (opts && opts->fusion_bytes && !(row->ops && row->ops->fuses))
        return MX_ERROR(MX_ERR_INVALID, "a fusion size applies to dist_sync and dist_sync_device, which sum "
                                        "gradients over the ranks in buckets; kvstore '%s' %s",
                        type, row->ops && row->ops->has_server ? "sends each key to its server alone"
                                                               : "has no buckets");
    return MX_OK;
}

mx_status mx_kvstore_create(mx_runtime *rt, const char *type, mx_kvstore **out)
{
    return mx_kvstore_create_opts(rt, type, NULL, out);
}

mx_status mx_kvstore_create_opts(mx_runtime *rt, const char *type, const mx_kvstore_options *opts, mx_kvstore **out)
{
    *out = NULL;
    mx_kvstore_options none = {0};
    if (!opts) opts = &none;
    if (!rt) return MX_ERROR(MX_ERR_INVALID, "kvstore: runtime is NULL");
    const kv_kind_row *row;
    MX_TRY(mx_kvstore_options_check(type, opts));
    MX_TRY(find_row(type, &row));
    if (!row->ops) return MX_ERROR(MX_ERR_UNSUPPORTED, "kvstore '%s': %s", type, row->missing);
    mx_kvstore *kv = mx_calloc(1, sizeof(*kv));
    if (!kv) return MX_ERR_NOMEM;
    kv->ops = row->ops;
    mx_status s = row->ops->create(rt, opts, &kv->state);
    if (s != MX_OK) {
        free(kv);
        return s;
    }
    *out = kv;
    return MX_OK;
}

void mx_kvstore_free(mx_kvstore *kv)
{
    if (!kv) return;
    kv->ops->free(kv->state);
    free(kv);
}

const char *mx_kvstore_type(const mx_kvstore *kv) { return kv->ops->name; }

static mx_status check_key(const mx_kvstore *kv, const char *what, int key)
{
    if (key < 0 || key >= MAX_KEY)
        return MX_ERROR(MX_ERR_INVALID, "kvstore %s: %s: key %d out of range (0 to %d)", kv->ops->name, what, key,
                        MAX_KEY - 1);
    return MX_OK;
}

static mx_status check_list(const mx_kvstore *kv, const char *what, int key, mx_ndarray *const *arrays, int n)
{
    MX_TRY(check_key(kv, what, key));
    if (n < 1 || !arrays)
        return MX_ERROR(MX_ERR_INVALID, "kvstore %s: %s of key %d needs at least one array", kv->ops->name, what, key);
    for (int i = 0; i < n; i++)
        if (!arrays[i]) return MX_ERROR(MX_ERR_INVALID, "kvstore %s: %s of key %d: array %d is NULL", kv->ops->name, what, key, i);
    return MX_OK;
}

mx_status mx_kvstore_init(mx_kvstore *kv, int key, mx_ndarray *value)
{
    MX_TRY(check_list(kv, "init", key, &value, 1));
    return kv->ops->init(kv->state, key, value);
}

mx_status mx_kvstore_push(mx_kvstore *kv, int key, mx_ndarray *const *values, int n, int priority)
{
    MX_TRY(check_list(kv, "push", key, values, n));
    return kv->ops->push(kv->state, key, values, n, priority, &kv->updater);
}

mx_status mx_kvstore_pull(mx_kvstore *kv, int key, mx_ndarray *const *outs, int n, int priority)
{
    MX_TRY(check_list(kv, "pull", key, outs, n));
    return kv->ops->pull(kv->state, key, outs, n, priority);
}

mx_status mx_kvstore_set_updater(mx_kvstore *kv, mx_kvstore_updater_fn fn, void *user)
{
    kv->updater.fn = fn;
    kv->updater.user = fn ? user : NULL;
    if (kv->ops->set_updater) kv->ops->set_updater(kv->state, &kv->updater);
    return MX_OK;
}

static mx_status optimizer_updater(int key, mx_ndarray *merged_grad, mx_ndarray *stored, void *user)
{
    return mx_optimizer_update(user, key, stored, merged_grad);
}

/* A server thread (dist_async's) applies the update itself and answers at
 * once, instead of waiting for an engine worker that rank 0's own training
 * keeps busy. */
static mx_status optimizer_updater_now(int key, mx_ndarray *merged_grad, mx_ndarray *stored, void *user)
{
    return mx_optimizer_update_now(user, key, stored, merged_grad);
}

mx_status mx_kvstore_set_optimizer(mx_kvstore *kv, mx_optimizer *opt)
{
    if (!opt) return MX_ERROR(MX_ERR_INVALID, "kvstore %s: optimizer is NULL", kv->ops->name);
    return mx_kvstore_set_updater(kv, kv->ops->has_server ? optimizer_updater_now : optimizer_updater, opt);
}

mx_ndarray *mx_kvstore_stored(mx_kvstore *kv, int key)
{
    return key < 0 || key >= MAX_KEY ? NULL : kv->ops->stored(kv->state, key);
}

int mx_kvstore_rank(const mx_kvstore *kv) { return kv->ops->rank(kv->state); }
int mx_kvstore_num_workers(const mx_kvstore *kv) { return kv->ops->num_workers(kv->state); }
mx_status mx_kvstore_barrier(mx_kvstore *kv) { return kv->ops->barrier(kv->state); }
mx_status mx_kvstore_wait_comm(mx_kvstore *kv) { return kv->ops->wait_comm ? kv->ops->wait_comm(kv->state) : MX_OK; }

bool mx_kvstore_has_server(const mx_kvstore *kv) { return kv->ops->has_server; }

void mx_kvstore_lock_updater(mx_kvstore *kv)
{
    if (kv->ops->hold_updater) kv->ops->hold_updater(kv->state, true);
}

void mx_kvstore_unlock_updater(mx_kvstore *kv)
{
    if (kv->ops->hold_updater) kv->ops->hold_updater(kv->state, false);
}
