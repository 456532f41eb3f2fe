/*
 * predict.h - what mxpredict does, as a library: load a checkpoint
 * (PREFIX-symbol.json + PREFIX-NNNN.params), bind it for prediction only
 * (no backward pass; the prediction memory plan; an inner layer's output
 * stops the graph there), read samples from image files, .rec, .lst, idx
 * files or a list of paths, preprocess them as the iterators do, run them
 * in batches and format the results (top-k CSV, features as CSV or raw
 * float32).
 *
 * The library never prints: per-sample failures and progress go to
 * callbacks, and every function returns an mx_status with mx_last_error()
 * set.
 */
#ifndef MX_PREDICT_H
#define MX_PREDICT_H

#include "executor/executor.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---------------------------------------------------------------- preprocessing
 *
 * One sample becomes the network's input in the order of MXNet's
 * ImageRecordIter without augmentation (mxnet-formats.md 3.2):
 *   1. decode: C=1 grey, C=3 RGB, C=4 RGBA (EXIF orientation applied);
 *   2. resize > 0: the shorter edge becomes `resize`, the other
 *      long * resize / short (integer division), bilinear as OpenCV;
 *   3. an image still smaller than H x W is scaled up, aspect kept, until
 *      both sides fit (MXNet 1.x aborts there instead);
 *   4. centre crop to H x W at ((rows - H) / 2, (cols - W) / 2);
 *   5. out[c][y][x] = (pixel - mean[c]) * scale / std[c], channels R,G,B,A.
 * idx (MNIST) images skip 1-4 (their size must be H x W, one channel) and
 * use scale 1/256 unless one is given, so a model trained on MNISTIter
 * (byte / 256) sees exactly what it saw in validation.
 */
typedef struct mx_predict_preproc {
    mx_shape sample;        /* the network's input for one sample: (C,H,W), or (D,) = C*H*W flat */
    int32_t channels, height, width; /* image geometry (C,H,W); C in 1, 3, 4 */
    int32_t resize;         /* shorter edge before the crop; <= 0: off */
    float mean[4];          /* per output channel (R,G,B,A); 0 */
    float std[4];           /* 1 */
    float scale;            /* 0: 1 for encoded images, 1/256 for idx files */
} mx_predict_preproc;

/* Defaults for a per-sample input shape: (C,H,W) as is (C must be 1, 3 or
 * 4); a flat (D,) reads images as D = H*W grey or 3*H*W colour squares.
 * MX_ERR_INVALID when the shape gives no image geometry (then set
 * channels/height/width yourself). */
mx_status mx_predict_preproc_init(mx_predict_preproc *p, mx_shape sample);

/* Floats per sample. */
int64_t mx_predict_preproc_size(const mx_predict_preproc *p);

/* Decodes a JPEG/PNG file held in memory and writes the sample (size
 * floats) to out. Errors: MX_ERR_FORMAT (not an image, corrupt data),
 * MX_ERR_UNSUPPORTED (too large), MX_ERR_NOMEM. */
mx_status mx_predict_preproc_image(const mx_predict_preproc *p, const void *bytes, size_t size, float *out);

/* An 8-bit grey image of rows x cols (an idx sample). MX_ERR_INVALID when
 * its size is not the geometry's H x W with C = 1. */
mx_status mx_predict_preproc_pixels(const mx_predict_preproc *p, const uint8_t *pixels, int32_t rows, int32_t cols,
                                    float *out);

/* ---------------------------------------------------------------- inputs */

typedef enum mx_predict_input_kind {
    MX_PREDICT_INPUT_IMAGE = 0, /* one JPEG or PNG file; id = its path */
    MX_PREDICT_INPUT_REC,       /* RecordIO of image records; id = IRHeader id */
    MX_PREDICT_INPUT_LST,       /* im2rec list; id = the path as listed */
    MX_PREDICT_INPUT_IDX,       /* idx3 images, raw or gzip'd; id = sample index from 0 */
    MX_PREDICT_INPUT_PATHS,     /* "-": image paths on standard input, one a line */
} mx_predict_input_kind;

const char *mx_predict_input_kind_name(mx_predict_input_kind kind); /* "image", "rec", ... */

/* What `path` is: "-" is PATHS; else by content (JPEG/PNG magic, RecordIO
 * magic, idx3 magic, gzip'd idx3), then a ".lst" name. MX_ERR_IO when it
 * cannot be opened; MX_ERR_FORMAT naming what it looks like otherwise (a
 * RecordIO .idx index: "pass the .rec"). */
mx_status mx_predict_input_detect(const char *path, mx_predict_input_kind *kind);

/* The image size an idx3 file holds (for a default data shape). */
mx_status mx_predict_idx_geometry(const char *path, int32_t *rows, int32_t *cols, uint32_t *count);

typedef struct mx_predict_reader mx_predict_reader;

typedef struct mx_predict_reader_opts {
    const mx_predict_preproc *preproc;
    const char *root;       /* .lst: paths are relative to this; NULL: the .lst's folder */
    FILE *paths;            /* PATHS: where the paths come from; NULL: stdin */
} mx_predict_reader_opts;

/* Opens one input. Errors: MX_ERR_IO / MX_ERR_FORMAT naming the path. */
mx_status mx_predict_reader_open(const char *path, const mx_predict_reader_opts *opts, mx_predict_reader **out);
void mx_predict_reader_free(mx_predict_reader *r);

/* One sample read. On *got = 1: id is set; *ok = 1 and out holds the
 * preprocessed sample, or *ok = 0 and `why` says why this sample cannot be
 * used (the caller reports it and goes on). *got = 0 at the end. A
 * returned error means the rest of the input cannot be read (an I/O
 * error, a truncated idx file, a corrupt gzip stream). id and why are
 * valid until the next call. */
typedef struct mx_predict_item {
    int got, ok;
    const char *id;
    const char *why;
} mx_predict_item;
mx_status mx_predict_reader_next(mx_predict_reader *r, float *out, mx_predict_item *item);

/* ---------------------------------------------------------------- model */

typedef struct mx_predictor mx_predictor;

/* Loads PREFIX-symbol.json and PREFIX-NNNN.params (epoch < 0: the newest
 * present) onto the CPU, without binding. The data input is the argument
 * that is neither in the params file nor the label of a loss layer ("data"
 * when several). Errors: MX_ERR_IO (missing files), MX_ERR_FORMAT (bad
 * files), MX_ERR_INVALID (no data input, several). */
mx_status mx_predictor_load(const char *prefix, int epoch, mx_predictor **out);
void mx_predictor_free(mx_predictor *p);

/* A Chrome-trace timeline (profile/profile.h: chrome://tracing, Perfetto)
 * of every operation the predictor's engine runs between the two calls:
 * each layer's forward pass (folded layers under their joint name), the
 * copies in and out. end waits for the engine, writes the file and stops
 * recording; free stops it too, writing nothing. Errors: MX_ERR_INVALID
 * (begin twice, end without begin), MX_ERR_NOMEM, MX_ERR_IO (the file). */
mx_status mx_predictor_profile_begin(mx_predictor *p);
mx_status mx_predictor_profile_end(mx_predictor *p, const char *path);

int mx_predictor_epoch(const mx_predictor *p);
const char *mx_predictor_data_name(const mx_predictor *p);
const mx_graph *mx_predictor_graph(const mx_predictor *p);
/* The data variable's __shape__ without its batch axis, if the symbol has
 * one (returns false otherwise). */
bool mx_predictor_shape_hint(const mx_predictor *p, mx_shape *sample);

typedef struct mx_predictor_bind_opts {
    mx_shape sample;        /* the data input of one sample, without the batch axis */
    int64_t batch_size;
    const char *layer;      /* NULL: the symbol's first output; else "fc1", "fc1_output"... */
    mx_context ctx;
    /* false (the default): each BatchNorm that only rescales one
     * convolution's output is folded into that convolution's weights and
     * bias (mx_graph_fold_batchnorm), one pass over the data fewer; true:
     * the graph as saved (the same results up to float rounding). */
    bool keep_batchnorm;
    /* GPU: from the second batch on, each forward pass is one CUDA graph
     * launch (mx_bind_config.cuda_graph). mxpredict sets it unless
     * --profile asks for every layer on the timeline. */
    bool cuda_graph;
    /* MX_FLOAT32 (0, the default): the symbol as saved; MX_FLOAT16 or
     * MX_BFLOAT16: the mixed-precision graph of it (mx_graph_compute_in,
     * as MXNet's amp.convert_model: half layers, float32 weights,
     * BatchNorm statistics and loss). */
    mx_dtype dtype;
} mx_predictor_bind_opts;

/* Infers shapes, checks every parameter against the file, binds for
 * prediction (inference passes: Dropout is the identity, as in MXNet,
 * except with mode=always, which draws from a generator seeded with 0
 * when the predictor is first bound). May be called again to rebind. Errors: MX_ERR_INVALID
 * naming the layer and shapes, or the unknown layer (with a suggestion);
 * MX_ERR_FORMAT for a parameter missing from the file. */
mx_status mx_predictor_bind(mx_predictor *p, const mx_predictor_bind_opts *opts);

/* After bind: per-sample output shape and its name ("softmax_output"). */
mx_shape mx_predictor_output_shape(const mx_predictor *p);
const char *mx_predictor_output_name(const mx_predictor *p);
int64_t mx_predictor_batch_size(const mx_predictor *p);
/* BatchNorm layers folded into convolutions by the last bind. */
int mx_predictor_folded(const mx_predictor *p);
/* The plan of the bound executor, plus the bytes of its output. */
void mx_predictor_memory(const mx_predictor *p, mx_memory_plan_stats *plan, size_t *output_bytes);

/* Copies a batch (batch_size * sample floats) in and pushes the forward
 * pass; returns without waiting, so the caller can prepare the next batch
 * meanwhile. */
mx_status mx_predictor_push(mx_predictor *p, const float *batch);
/* Waits for the pushed batch and copies its output (batch_size * output
 * floats) to out. */
mx_status mx_predictor_pull(mx_predictor *p, float *out);

/* ---------------------------------------------------------------- results */

/* The k largest of n values, largest first; equal values in index order
 * (so index[0] is the first maximum, the argmax the accuracy metric
 * takes). NaN ranks below every number. k <= n. */
void mx_predict_top_k(const float *values, int64_t n, int k, int64_t *index);

typedef enum mx_predict_format {
    MX_PREDICT_FORMAT_CSV = 0,
    MX_PREDICT_FORMAT_RAW = 1,
} mx_predict_format;

/*
 * Output formats:
 *   top-k CSV:   id,top1,prob1,...,topK,probK   (classes as indices, or
 *                names from the synset with name1 instead of top1);
 *                probabilities as %.6g;
 *   feature CSV: id,v0,v1,...  (the layer's output flattened, %.9g, which
 *                reads back as the same float32);
 *   raw:         one text line "MXPREDICT-RAW float32 le shape=(d1,d2,...)\n"
 *                (the shape of one sample), then each sample's float32
 *                values little-endian, row-major, in input order; the ids
 *                are not in the file (see ids_file).
 * CSV fields with a comma, quote or line break are quoted as RFC 4180.
 */
typedef struct mx_predict_writer_opts {
    FILE *out;
    bool features;                /* a layer's values instead of top-k */
    mx_predict_format format;     /* features only */
    int top_k;                    /* top-k only, 1..classes */
    const char *const *synset;    /* NULL, or n_synset class names */
    int n_synset;
    FILE *ids_file;               /* raw: one id a line; may be NULL */
} mx_predict_writer_opts;

typedef struct mx_predict_writer mx_predict_writer;

/* `sample` is the per-sample output shape. MX_ERR_INVALID for a synset
 * whose size is not the number of classes, a bad top_k. */
mx_status mx_predict_writer_create(const mx_predict_writer_opts *opts, mx_shape sample, mx_predict_writer **out);
/* Writes the header (CSV) or header line (raw). */
mx_status mx_predict_writer_begin(mx_predict_writer *w);
/* One sample's output (size of the per-sample shape floats). MX_ERR_IO on a
 * write failure. */
mx_status mx_predict_writer_row(mx_predict_writer *w, const char *id, const float *values);
/* Flushes; MX_ERR_IO when the data could not be written. */
mx_status mx_predict_writer_end(mx_predict_writer *w);
void mx_predict_writer_free(mx_predict_writer *w);

/* Reads a synset: one class name a line (MXNet's synset.txt; the whole
 * line, trailing CR/LF removed). Free with mx_predict_synset_free. */
mx_status mx_predict_synset_load(const char *path, char ***names, int *n);
void mx_predict_synset_free(char **names, int n);

/* ---------------------------------------------------------------- the run */

typedef struct mx_predict_stats {
    int64_t samples;         /* written */
    int64_t failed;          /* samples or whole inputs reported unreadable */
    int64_t batches;
    double seconds;          /* the whole run */
    double read_seconds;     /* reading and preprocessing */
    double wait_seconds;     /* copying in, waiting for the network, copying out: per
                                batch from the start of its push to the end of its
                                pull, less the next batch's reading done meanwhile (the
                                network's whole time with no_overlap) */
    double batch_best_seconds;   /* the same per batch (the first 65536 batches): */
    double batch_median_seconds; /* the fastest and the median */
    double wait_cpu_seconds;     /* CPU time of the whole process (all threads) during
                                    wait_seconds: the network's CPU cost with no_overlap,
                                    a figure that other jobs on the machine barely change */
} mx_predict_stats;

typedef struct mx_predict_run_opts {
    const char *const *inputs;
    int n_inputs;
    mx_predict_reader_opts reader;
    /* Read the next batch only after the current one has run (no overlap),
     * so wait_seconds is the network's time alone: for timing. */
    bool no_overlap;
    /* A sample or input that could not be used: `what` is its id or path. */
    void (*on_failure)(void *user, const char *what, const char *why);
    /* Called after every batch. */
    void (*on_progress)(void *user, const mx_predict_stats *stats);
    void *user;
} mx_predict_run_opts;

/* Reads every input in order, batches the samples (the last batch padded,
 * its padding not written), runs them and writes one row per readable
 * sample in input order. Unreadable samples and inputs go to on_failure
 * and are counted in stats->failed; the run goes on. Returns an error only
 * for what stops the whole run (the network failed, the output cannot be
 * written). */
mx_status mx_predict_run(mx_predictor *p, mx_predict_writer *w, const mx_predict_run_opts *opts,
                         mx_predict_stats *stats);

#endif /* MX_PREDICT_H */
