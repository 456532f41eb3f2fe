/*
 * io.h - data iterators (MXNet's DataIter): one registry of iterator kinds
 * (mnist, csv, imagerecord, ...), each with a typed parameter table parsed
 * by lib/params, producing batches of (data, label) NDArrays on the CPU.
 *
 * Every iterator runs its decoding on background threads and keeps
 * `prefetch_buffer` batches ready, so the trainer never waits when the
 * cores allow. Batches are handed out as arrays owned by the iterator and
 * valid until the next call to next() or reset(); a consumer that needs
 * them longer copies them (mx_nd_copy pushes the copy to the engine, which
 * orders it before the iterator reuses the buffer).
 */
#ifndef MX_IO_H
#define MX_IO_H

#include "ndarray/ndarray.h"
#include "params/params.h"

typedef struct mx_data_iter mx_data_iter;

/* Receives an iterator's warning lines (one line, no newline), on the
 * thread that calls mx_data_iter_next() / mx_data_iter_reset(). */
typedef void (*mx_io_log_fn)(void *user, const char *line);

typedef struct mx_data_batch {
    mx_ndarray *data;  /* (batch_size, ...) float32 */
    mx_ndarray *label; /* (batch_size) or (batch_size, label_width) float32 */
    int pad;           /* trailing samples that are padding (round_batch wrap-around) */
    const uint64_t *index; /* batch_size sample ids (record id / image index), or NULL */
} mx_data_batch;

/* One kind of iterator: adding one is a file and a line in io.c. */
typedef struct mx_data_iter_kind {
    const char *name;                  /* "mnist", "csv", "imagerecord" */
    const mx_param_desc *params;
    int n_params;
    size_t params_size;
    /* Opens the source and starts the background threads. Errors name the
     * file and the problem (MX_ERR_IO, MX_ERR_FORMAT, MX_ERR_INVALID). */
    mx_status (*create)(mx_runtime *rt, const void *params, void **state);
    /* Next batch; *has_batch false at the end of the epoch. Errors raised
     * on a background thread (a corrupt file, say) surface here. */
    mx_status (*next)(void *state, mx_data_batch *batch, bool *has_batch);
    mx_status (*reset)(void *state);    /* start the next epoch (reshuffles) */
    void (*free)(void *state);
    mx_shape (*data_shape)(const void *state);  /* of one batch */
    mx_shape (*label_shape)(const void *state);
    int64_t (*num_samples)(const void *state);  /* in this part, per epoch; -1 unknown */
    /* Optional: sets (fn = NULL clears) where the kind's warnings go (a
     * skipped corrupt record, say). NULL for kinds that never warn. */
    void (*set_log)(void *state, mx_io_log_fn fn, void *user);
} mx_data_iter_kind;

const mx_data_iter_kind *mx_data_iter_kind_find(const char *name);
/* MX_ERR_INVALID "unknown iterator 'x' (did you mean 'y'?)". */
mx_status mx_data_iter_kind_lookup(const char *name, const mx_data_iter_kind **out);

/* Parses keys/values against the kind's table and creates the iterator. */
mx_status mx_data_iter_create(mx_runtime *rt, const char *kind, const char *const *keys, const char *const *values,
                              int n, mx_data_iter **out);
void mx_data_iter_free(mx_data_iter *it);
mx_status mx_data_iter_next(mx_data_iter *it, mx_data_batch *batch, bool *has_batch);
mx_status mx_data_iter_reset(mx_data_iter *it);
mx_shape mx_data_iter_data_shape(const mx_data_iter *it);
mx_shape mx_data_iter_label_shape(const mx_data_iter *it);
int64_t mx_data_iter_num_samples(const mx_data_iter *it);
/* Sends the iterator's warning lines to fn (fn = NULL: only counted, as
 * before the call). Lines already queued (found at creation) arrive at the
 * next next()/reset(). A no-op for kinds without warnings. */
void mx_data_iter_set_log(mx_data_iter *it, mx_io_log_fn fn, void *user);

#endif /* MX_IO_H */
