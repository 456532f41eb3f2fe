/* checkpoint.c - MXNet checkpoint files. */
#include "checkpoint/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *mx_checkpoint_params_path(const char *prefix, int epoch, char *buf, size_t size)
{
    snprintf(buf, size, "%s-%04d.params", prefix, epoch);
    return buf;
}

mx_status mx_checkpoint_save_file(const char *path, mx_named_arrays args, mx_named_arrays aux, mx_named_arrays extra)
{
    int n = args.count + aux.count + extra.count;
    char **names = mx_calloc((size_t)(n ? n : 1), sizeof(char *));
    mx_ndarray **arrays = mx_calloc((size_t)(n ? n : 1), sizeof(mx_ndarray *));
    mx_status s = (names && arrays) ? MX_OK : MX_ERR_NOMEM;
    for (int i = 0; i < n && s == MX_OK; i++) {
        const char *kind = i < args.count ? "arg:" : i < args.count + aux.count ? "aux:" : "";
        const mx_named_arrays *from = i < args.count ? &args : i < args.count + aux.count ? &aux : &extra;
        int k = i < args.count ? i : i < args.count + aux.count ? i - args.count : i - args.count - aux.count;
        size_t len = strlen(from->names[k]) + 5;
        names[i] = mx_malloc(len);
        if (!names[i]) {
            s = MX_ERR_NOMEM;
            break;
        }
        snprintf(names[i], len, "%s%s", kind, from->names[k]);
        arrays[i] = from->arrays[k];
    }
    if (s == MX_OK) s = mx_ndarray_save(path, arrays, (const char *const *)names, n);
    for (int i = 0; i < n && names; i++) free(names[i]);
    free(names);
    free(arrays);
    return s;
}

mx_status mx_checkpoint_save(const char *prefix, int epoch, const mx_graph *g, mx_named_arrays args,
                             mx_named_arrays aux)
{
    char path[4096];
    if (g) {
        snprintf(path, sizeof(path), "%s-symbol.json", prefix);
        MX_TRY(mx_graph_save_json(g, path));
    }
    mx_named_arrays none = {0, NULL, NULL};
    return mx_checkpoint_save_file(mx_checkpoint_params_path(prefix, epoch, path, sizeof(path)), args, aux, none);
}

static const char *list_name_of(const void *l, uint32_t i) { return ((const mx_ndarray_list *)l)->names[i]; }

/* A list being filled: room for `cap` entries and its names indexed, so
 * that the duplicate check stays O(1) per array in a file of 100,000. */
typedef struct list_fill {
    mx_ndarray_list *l;
    mx_name_index index;
} list_fill;

static mx_status fill_init(list_fill *f, mx_ndarray_list *l, int cap)
{
    f->l = l;
    mx_name_index_init(&f->index, list_name_of, l);
    l->arrays = mx_calloc((size_t)cap + 1, sizeof(*l->arrays));
    l->names = mx_calloc((size_t)cap + 1, sizeof(*l->names));
    if (!l->arrays || !l->names) return mx_last_status();
    return mx_name_index_reserve(&f->index, (uint32_t)cap, 0);
}

/* Appends an array and its name (taking the array reference). */
static mx_status list_push(list_fill *f, const char *name, mx_ndarray *a)
{
    mx_ndarray_list *l = f->l;
    if (mx_name_index_find(&f->index, name) != MX_NAME_NONE) return MX_ERROR(MX_ERR_FORMAT, "'%s' appears twice", name);
    l->names[l->count] = mx_strdup(name);
    if (!l->names[l->count]) return MX_ERR_NOMEM;
    l->arrays[l->count++] = mx_ndarray_retain(a);
    mx_name_index_put(&f->index, (uint32_t)(l->count - 1));
    return MX_OK;
}

mx_status mx_checkpoint_load_file(mx_runtime *rt, const char *path, mx_ndarray_list *args, mx_ndarray_list *aux,
                                  mx_ndarray_list *extra)
{
    memset(args, 0, sizeof(*args));
    memset(aux, 0, sizeof(*aux));
    if (extra) memset(extra, 0, sizeof(*extra));
    mx_ndarray_list all;
    MX_TRY(mx_ndarray_load(rt, path, &all));
    mx_status s = MX_OK;
    if (all.count > 0 && !all.names) s = MX_ERROR(MX_ERR_FORMAT, "%s: the arrays have no names", path);
    list_fill fills[3] = {0};
    if (s == MX_OK) s = fill_init(&fills[0], args, all.count);
    if (s == MX_OK) s = fill_init(&fills[1], aux, all.count);
    if (s == MX_OK && extra) s = fill_init(&fills[2], extra, all.count);
    for (int i = 0; i < all.count && s == MX_OK; i++) {
        const char *name = all.names[i];
        const char *colon = strchr(name, ':');
        list_fill *dst = &fills[0];
        if (colon) {
            size_t kind = (size_t)(colon - name);
            if (kind == 3 && !strncmp(name, "aux", 3)) {
                dst = &fills[1];
                name = colon + 1;
            } else if (kind == 3 && !strncmp(name, "arg", 3)) {
                name = colon + 1;
            } else if (extra) {
                dst = &fills[2];
            } else {
                s = MX_ERROR(MX_ERR_FORMAT, "%s: array '%s' is neither arg: nor aux:", path, name);
                break;
            }
        }
        s = list_push(dst, name, all.arrays[i]);
        if (s != MX_OK) mx_error_prefix(s, "%s", path);
    }
    mx_ndarray_list_free(&all);
    for (int k = 0; k < 3; k++) mx_name_index_free(&fills[k].index);
    if (s != MX_OK) {
        mx_ndarray_list_free(args);
        mx_ndarray_list_free(aux);
        if (extra) mx_ndarray_list_free(extra);
    }
    return s;
}

mx_status mx_checkpoint_load(mx_runtime *rt, const char *prefix, int epoch, mx_ndarray_list *args,
                             mx_ndarray_list *aux)
{
    char path[4096];
    return mx_checkpoint_load_file(rt, mx_checkpoint_params_path(prefix, epoch, path, sizeof(path)), args, aux, NULL);
}

int mx_checkpoint_latest_epoch(const char *prefix) { return mx_checkpoint_epoch_before(prefix, 1000001); }

int mx_checkpoint_epoch_before(const char *prefix, int below)
{
    const char *slash = strrchr(prefix, '/');
    char dir[4096];
    const char *base = prefix;
    if (slash) {
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - prefix), prefix);
        if (!dir[0]) snprintf(dir, sizeof(dir), "/");
        base = slash + 1;
    } else {
        snprintf(dir, sizeof(dir), ".");
    }
    DIR *d = opendir(dir);
    if (!d) return -1;
    size_t blen = strlen(base);
    int best = -1;
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) != 0 || n[blen] != '-') continue;
        char *end;
        long epoch = strtol(n + blen + 1, &end, 10);
        if (end == n + blen + 1 || strcmp(end, ".params") != 0 || epoch < 0 || epoch > 1000000) continue;
        if (end - (n + blen + 1) < 4) continue; /* MXNet pads to 4 digits */
        if (epoch > best && epoch < below) best = (int)epoch;
    }
    closedir(d);
    return best;
}

mx_status mx_checkpoint_prepare_dir(const char *prefix)
{
    char dir[4096];
    const char *slash = strrchr(prefix, '/');
    if (!slash) snprintf(dir, sizeof(dir), ".");
    else snprintf(dir, sizeof(dir), "%.*s", (int)(slash - prefix), prefix);
    if (!dir[0]) snprintf(dir, sizeof(dir), "/");
    /* mkdir -p */
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return MX_ERROR(MX_ERR_IO, "cannot create directory %s: %s", dir, strerror(errno));
        *p = '/';
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return MX_ERROR(MX_ERR_IO, "cannot create directory %s: %s", dir, strerror(errno));
    char probe[4200];
    snprintf(probe, sizeof(probe), "%s/.mxtrain-write-test-%ld", dir, (long)getpid());
    FILE *f = fopen(probe, "wb");
    if (!f) return MX_ERROR(MX_ERR_IO, "checkpoint directory %s is not writable: %s", dir, strerror(errno));
    fclose(f);
    remove(probe);
    return MX_OK;
}
