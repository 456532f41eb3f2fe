/*
 * checkpoint.h - MXNet-compatible checkpoints: PREFIX-symbol.json and
 * PREFIX-NNNN.params holding "arg:NAME" and "aux:NAME" arrays, the layout
 * mx.model.load_checkpoint reads. Every file is written to a temporary
 * name and renamed, so an interrupted save never leaves a torn file.
 */
#ifndef MX_CHECKPOINT_H
#define MX_CHECKPOINT_H

#include "symbol/symbol.h"

/* Arrays with names (borrowed pointers). */
typedef struct mx_named_arrays {
    int count;
    const char *const *names;
    mx_ndarray *const *arrays;
} mx_named_arrays;

/* "PREFIX-NNNN.params" into buf (epoch as %04d); returns buf. */
const char *mx_checkpoint_params_path(const char *prefix, int epoch, char *buf, size_t size);

/* Writes PREFIX-symbol.json (if g is not NULL) and PREFIX-NNNN.params. */
mx_status mx_checkpoint_save(const char *prefix, int epoch, const mx_graph *g, mx_named_arrays args,
                             mx_named_arrays aux);

/* Writes one .params file of arg:NAME, aux:NAME and, verbatim, extra
 * names (any other "kind:" prefix: MXNet's load_checkpoint skips them, so
 * a file can carry training state beside weights MXNet loads). */
mx_status mx_checkpoint_save_file(const char *path, mx_named_arrays args, mx_named_arrays aux, mx_named_arrays extra);
/* Reads such a file: extra (may be NULL: then other prefixes are an error)
 * gets the entries that are neither arg: nor aux:, with their full names. */
mx_status mx_checkpoint_load_file(mx_runtime *rt, const char *path, mx_ndarray_list *args, mx_ndarray_list *aux,
                                  mx_ndarray_list *extra);

/* Loads PREFIX-NNNN.params onto the CPU and splits it at the first ':'
 * into arguments and auxiliary states (names without a prefix count as
 * arguments, as Gluon's files have). *args and *aux own their names and
 * arrays: free with mx_ndarray_list_free. Errors: MX_ERR_IO, MX_ERR_FORMAT
 * (unknown prefix, duplicate names). */
mx_status mx_checkpoint_load(mx_runtime *rt, const char *prefix, int epoch, mx_ndarray_list *args,
                             mx_ndarray_list *aux);

/* The largest N with PREFIX-NNNN.params present, or -1 when none. */
int mx_checkpoint_latest_epoch(const char *prefix);
/* The largest N < below with PREFIX-NNNN.params present, or -1. */
int mx_checkpoint_epoch_before(const char *prefix, int below);

/* Creates PREFIX's directory if needed and checks a file can be written
 * there, so a bad model_prefix is reported before training starts. */
mx_status mx_checkpoint_prepare_dir(const char *prefix);

#endif
