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

/* How a kind turns a decoded image into a sample: out = (pixel - mean[c])
 * * scale / std[c], after resizing the shorter side to `resize` (-1: off)
 * and a centre crop. For tools that preprocess images themselves the way
 * training did (mxpredict). */
typedef struct mx_data_image_norm {
    float mean[4], std[4], scale;
    int32_t resize;
    const char *mean_img; /* a mean image file ("" none), borrowed from the parameters */
} mx_data_image_norm;

/* What an iterator left out of its data so far (corrupt stretches and
 * records): the same records are left out of every epoch. */
typedef struct mx_data_skip_stats {
    int64_t records;          /* records it knows of (in its part) */
    int64_t skipped_records;  /* of those, left out */
    uint64_t bytes;           /* bytes of its part */
    uint64_t skipped_bytes;   /* corrupt stretches between records, left out */
    char why[1024];           /* the latest reason, "" if none */
} mx_data_skip_stats;

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
    /* Optional: what it skipped so far (NULL for kinds that never skip). */
    void (*skip_stats)(void *state, mx_data_skip_stats *out);
    /* Checks across parameters that need no file (part_index < num_parts,
     * a data_shape's channels, parameters this build lacks), run before
     * create; problems are reported through mx_params_blame(in, ...) so a
     * config names the file and line. May be NULL. */
    mx_status (*check)(const void *params, const mx_param_input *in);
    /* The batch shapes create() will produce, from the parameters (a kind
     * may read a file's header, never the data). */
    mx_status (*shapes)(const void *params, mx_shape *data, mx_shape *label);
    /* Optional: the image preprocessing of the parameters (NULL for kinds
     * that do not read images). */
    void (*image_norm)(const void *params, mx_data_image_norm *out);
} mx_data_iter_kind;

const mx_data_iter_kind *mx_data_iter_kind_find(const char *name);
/* MX_ERR_INVALID "unknown iterator 'x' (did you mean 'y'?)". */
mx_status mx_data_iter_kind_lookup(const char *name, const mx_data_iter_kind **out);

/* The registered kinds, in table order (NULL past the end). */
const mx_data_iter_kind *mx_data_iter_kind_at(int i);

/* A parsed iterator section: the kind and the parameters its own table
 * parsed, checked, ready for create. A config's [train] / [val] become one
 * of these once; what create receives is these parameters. */
typedef struct mx_data_iter_spec mx_data_iter_spec;

/* A config section: `iter` names the kind, every other key goes to that
 * kind's table; a key only other kinds have is an error that names them
 * ("not used with iter = mnist (only with imagerecord)"). */
mx_status mx_data_iter_spec_parse(const mx_param_input *in, mx_data_iter_spec **out);
/* The same with the kind given by the caller (no `iter` key). */
mx_status mx_data_iter_spec_parse_kind(const char *kind, const mx_param_input *in, mx_data_iter_spec **out);
void mx_data_iter_spec_free(mx_data_iter_spec *spec);
const mx_data_iter_kind *mx_data_iter_spec_kind(const mx_data_iter_spec *spec);
/* The parsed parameter struct (the kind's own layout). */
const void *mx_data_iter_spec_params(const mx_data_iter_spec *spec);
/* Whether the section set `key` (rather than its default taking effect). */
bool mx_data_iter_spec_given(const mx_data_iter_spec *spec, const char *key);
/* A parameter's value in MXNet's str() form into buf (NULL for a key the
 * kind does not have). */
const char *mx_data_iter_spec_format(const mx_data_iter_spec *spec, const char *key, char *buf, size_t size);
/* Sets one parameter after parsing (a run that decides partitions, say),
 * through the kind's table and checks. */
mx_status mx_data_iter_spec_set(mx_data_iter_spec *spec, const char *key, const char *value);
/* A copy of a spec (to set parameters the run decides, such as the part
 * under mpirun, without touching the parsed one). */
mx_status mx_data_iter_spec_clone(const mx_data_iter_spec *spec, mx_data_iter_spec **out);
/* The kind's shapes() of the parameters: (batch, ...) data and label. */
mx_status mx_data_iter_spec_shapes(const mx_data_iter_spec *spec, mx_shape *data, mx_shape *label);
/* The kind's image_norm(); false when the kind reads no images. */
bool mx_data_iter_spec_image_norm(const mx_data_iter_spec *spec, mx_data_image_norm *out);
mx_status mx_data_iter_create_spec(mx_runtime *rt, const mx_data_iter_spec *spec, mx_data_iter **out);

/* Parses keys/values against the kind's table and creates the iterator. */
mx_status mx_data_iter_create(mx_runtime *rt, const char *kind, const char *const *keys, const char *const *values,
                              int n, mx_data_iter **out);
void mx_data_iter_free(mx_data_iter *it);
mx_status mx_data_iter_next(mx_data_iter *it, mx_data_batch *batch, bool *has_batch);
mx_status mx_data_iter_reset(mx_data_iter *it);
mx_shape mx_data_iter_data_shape(const mx_data_iter *it);
mx_shape mx_data_iter_label_shape(const mx_data_iter *it);
int64_t mx_data_iter_num_samples(const mx_data_iter *it);
/* Batches per epoch: num_samples / batch, rounded up when the kind has
 * round_batch set (the last batch is completed and padded), down otherwise
 * (the remainder is dropped, as MNISTIter does); -1 when unknown. */
int64_t mx_data_iter_num_batches(const mx_data_iter *it);
/* Sends the iterator's warning lines to fn (fn = NULL: only counted, as
 * before the call). Lines already queued (found at creation) arrive at the
 * next next()/reset(). A no-op for kinds without warnings. */
void mx_data_iter_set_log(mx_data_iter *it, mx_io_log_fn fn, void *user);
/* What the iterator skipped so far; false (and *out zeroed) for kinds that
 * never skip data. */
bool mx_data_iter_skip_stats(mx_data_iter *it, mx_data_skip_stats *out);

#endif /* MX_IO_H */
