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

/* Appends an array and its name to a list (taking the array reference). */
static mx_status list_push(mx_ndarray_list *l, const char *name, mx_ndarray *a)
{
    for (int i = 0; i < l->count; i++)
        if (!strcmp(l->names[i], name)) return MX_ERROR(MX_ERR_FORMAT, "'%s' appears twice", name);
    mx_ndarray **arrays = mx_realloc(l->arrays, sizeof(*arrays) * (size_t)(l->count + 1));
    if (!arrays) return MX_ERR_NOMEM;
    l->arrays = arrays;
    char **names = mx_realloc(l->names, sizeof(*names) * (size_t)(l->count + 1));
    if (!names) return MX_ERR_NOMEM;
    l->names = names;
    l->names[l->count] = mx_strdup(name);
    if (!l->names[l->count]) return MX_ERR_NOMEM;
    l->arrays[l->count++] = mx_ndarray_retain(a);
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
    for (int i = 0; i < all.count && s == MX_OK; i++) {
        const char *name = all.names[i];
        const char *colon = strchr(name, ':');
        mx_ndarray_list *dst = args;
        if (colon) {
            size_t kind = (size_t)(colon - name);
            if (kind == 3 && !strncmp(name, "aux", 3)) {
                dst = aux;
                name = colon + 1;
            } else if (kind == 3 && !strncmp(name, "arg", 3)) {
                name = colon + 1;
            } else if (extra) {
                dst = extra;
            } else {
                s = MX_ERROR(MX_ERR_FORMAT, "%s: array '%s' is neither arg: nor aux:", path, name);
                break;
            }
        }
        s = list_push(dst, name, all.arrays[i]);
        if (s != MX_OK) mx_error_prefix(s, "%s", path);
    }
    mx_ndarray_list_free(&all);
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
