/*
 * iter_imagerecord.c - MXNet's ImageRecordIter (mxnet-formats.md 1.5, 1.7,
 * 3.1, 3.2): image records from a .rec file, decoded and augmented on
 * `preprocess_threads` threads straight into the batch buffers of the
 * prefetch ring, `prefetch_buffer` batches ahead of the consumer.
 *
 * Records of the part:
 *   - without path_imgidx the part is MXNet's byte range (spec 1.5: step =
 *     ceil(size / num_parts) rounded up to 4, both ends moved forward to
 *     the next record head), and its records are found at creation by
 *     walking the record headers of the memory-mapped file (8 bytes per
 *     part read, payloads skipped). Corrupt stretches are skipped as the
 *     RecordIO reader's resync does (spec 1.4), with one warning each;
 *   - with path_imgidx the .idx offsets, sorted ascending, are the records
 *     (keys ignored, as dmlc); part k of n gets [k*step, min((k+1)*step,
 *     N)), step = ceil(N / n) (spec 1.7). Each record's extent runs to the
 *     next offset; its framing is checked when it is read.
 *   In both cases the parts of every part_index cover each record once.
 *
 * Order: without shuffle, file order. With shuffle, a permutation of the
 * whole part (with or without .idx; MXNet only shuffles inside read
 * chunks without .idx) drawn by Fisher-Yates from MT19937 seeded once with
 * 111 + seed (MXNet's kRandMagic); every epoch draws the next permutation
 * from the same generator, so the epochs are fixed by the seed.
 *
 * Batches: record i of the epoch's order goes to the next free row; rows
 * of records that turn out bad are closed up, so a batch always holds the
 * next batch_size good records in order, whatever the thread count.
 * At the end of an epoch a partial batch is, with round_batch=1, completed
 * from the start of the next epoch's order (the next permutation), with
 * pad = the number of such samples, and the next epoch then starts after
 * them (MXNet: they are not repeated); a reset in the middle of an epoch
 * starts the next one at its top. With round_batch=0 the partial batch
 * comes with pad = missing rows, which hold zeros, label 0 and index
 * UINT64_MAX (MXNet leaves stale data). With round_batch=1 a part with
 * fewer records than batch_size is an error at creation (MXNet aborts).
 * batch.index holds the IRHeader id of every sample.
 *
 * Per image: augment.h (decode, resize, pad, cover, crop, mirror,
 * normalise). The random choices of a sample are keyed by (seed_aug, or
 * seed when seed_aug is -1; epoch pass; position in that pass's order).
 * Labels: from path_imglist by IRHeader id when given (MXNet's
 * ImageLabelMap: per line an index, then label_width numbers; the path is
 * ignored; the later line of a repeated id wins), else the IRHeader's
 * flag floats (flag must equal label_width), else its label (label_width
 * must be 1). label is (batch,) for label_width 1, else (batch,
 * label_width).
 * mean_img: loaded when the file exists (one float32 (C, H, W) array),
 * else computed once at creation over the part in file order with the
 * configured crop/mirror and no normalisation, and saved under the name
 * "mean_img" as MXNet does (MXNet averages values already multiplied by
 * scale / std; the two agree for scale = std = 1, the usual setting).
 *
 * Threads: the prefetch producer fills batch k; it hands the rows out to
 * itself and preprocess_threads - 1 helper threads, which take rows one at
 * a time (an atomic counter), read the record from the mapping, decode and
 * write floats into the slot's row. Helpers touch only their rows; the
 * producer waits for all, then closes gaps and reports bad rows.
 *
 * Skips: iter_imagerecord.h (warnings queued for a log callback that runs
 * on the consumer's thread, counters).
 *
 * Not implemented (MX_ERR_UNSUPPORTED when set to anything but their
 * defaults): rotation, shear, aspect and scale jitter, crop-size ranges,
 * random_resized_crop, brightness/contrast/saturation, PCA noise, HSL
 * shifts, min/max_img_size, inter_method other than 1 (bilinear), dtype
 * other than float32, directories and ';' lists in path_imgrec,
 * shuffle_chunk_size / shuffle_chunk_seed (the shuffle is global: use
 * shuffle = 1). verbose = 0 keeps the skip warnings from the log callback
 * (they are still counted). Accepted without effect: ctx (MXNet's hint of
 * where batches go; they are made on the host).
 * The file is memory-mapped: it must not shrink while the iterator lives.
 */
#include "io/iter_imagerecord.h"

#include "io/augment.h"
#include "io/prefetch.h"
#include "ndarray/ndarray.h"
#include "recordio/imrec.h"
#include "recordio/recordio.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROW_MSG 400
#define RAND_MAGIC 111 /* MXNet's kRandMagic: the shuffle generator is seeded with 111 + seed */

/* ---------------------------------------------------------------- params */

typedef struct ir_params {
    char path_imgrec[MX_PARAM_STRING_MAX];
    char path_imgidx[MX_PARAM_STRING_MAX];
    char path_imglist[MX_PARAM_STRING_MAX];
    char mean_img[MX_PARAM_STRING_MAX];
    mx_tuple data_shape;
    int64_t label_width;
    int64_t batch_size;
    bool round_batch;
    bool shuffle;
    int64_t seed;
    int64_t num_parts, part_index;
    int64_t preprocess_threads;
    int64_t prefetch_buffer;
    int64_t resize;
    bool rand_crop, rand_mirror, mirror;
    double mean_r, mean_g, mean_b, mean_a;
    double std_r, std_g, std_b, std_a;
    double scale;
    double max_random_contrast, max_random_illumination;
    int64_t inter_method;
    int64_t pad, fill_value;
    int dtype;
    int ctx;
    bool verbose;
    int64_t shuffle_chunk_size, shuffle_chunk_seed;
    int64_t seed_aug;
    int64_t max_rotate_angle, rotate, max_crop_size, min_crop_size;
    double max_aspect_ratio, min_aspect_ratio, max_shear_ratio;
    double max_random_scale, min_random_scale, max_random_area, min_random_area;
    bool random_resized_crop;
    double brightness, contrast, saturation, pca_noise;
    int64_t random_h, random_s, random_l;
    double max_img_size, min_img_size;
} ir_params;

static const char *const dtype_choices[] = {"None", "float32", "uint8", "int8", NULL};
static const char *const ctx_choices[] = {"cpu", "gpu", NULL};

#define P(f) offsetof(ir_params, f)
#define NOR 1, 0 /* no range */
static const mx_param_desc ir_param_table[] = {
    {"path_imgrec", MX_PARAM_STRING, "", NOR, NULL, P(path_imgrec), "the .rec file"},
    {"path_imgidx", MX_PARAM_STRING, "", NOR, NULL, P(path_imgidx),
     ".idx file: index-based partition (spec 1.7); \"\" = byte-based (1.5)"},
    {"path_imglist", MX_PARAM_STRING, "", NOR, NULL, P(path_imglist),
     ".lst file: labels by image id (index, label_width numbers, path)"},
    {"mean_img", MX_PARAM_STRING, "", NOR, NULL, P(mean_img),
     "mean image (NDArray file, one (C,H,W) array); computed and saved when missing"},
    {"data_shape", MX_PARAM_TUPLE, NULL, 1, 65535, NULL, P(data_shape), "(C, H, W) of one sample, C in 1, 3, 4"},
    {"label_width", MX_PARAM_INT, "1", 1, 1e6, NULL, P(label_width), "labels per image"},
    {"batch_size", MX_PARAM_INT, NULL, 1, 1e7, NULL, P(batch_size), "batch size"},
    {"round_batch", MX_PARAM_BOOL, "True", NOR, NULL, P(round_batch),
     "complete the last batch from the next epoch's start (pad reports how many)"},
    {"shuffle", MX_PARAM_BOOL, "False", NOR, NULL, P(shuffle), "a new permutation of the part every epoch"},
    {"seed", MX_PARAM_INT, "0", -2147483648.0, 4294967295.0, NULL, P(seed),
     "shuffle seed (MT19937 seeded with 111 + seed); also the augmentation seed unless seed_aug is set"},
    {"num_parts", MX_PARAM_INT, "1", 1, 1e6, NULL, P(num_parts), "partition the data into this many parts"},
    {"part_index", MX_PARAM_INT, "0", 0, 1e6, NULL, P(part_index), "the part to read"},
    {"preprocess_threads", MX_PARAM_INT, "4", 1, 1024, NULL, P(preprocess_threads), "decoding threads"},
    {"prefetch_buffer", MX_PARAM_INT, "4", 1, 1e6, NULL, P(prefetch_buffer), "batches prefetched"},
    {"resize", MX_PARAM_INT, "-1", -1, 65535, NULL, P(resize), "resize the shorter side to this first (-1: off)"},
    {"rand_crop", MX_PARAM_BOOL, "False", NOR, NULL, P(rand_crop), "random instead of centre crop"},
    {"rand_mirror", MX_PARAM_BOOL, "False", NOR, NULL, P(rand_mirror), "mirror with probability 0.5"},
    {"mirror", MX_PARAM_BOOL, "False", NOR, NULL, P(mirror), "always mirror"},
    {"mean_r", MX_PARAM_FLOAT, "0", NOR, NULL, P(mean_r), "mean of plane 0 (R, or grey)"},
    {"mean_g", MX_PARAM_FLOAT, "0", NOR, NULL, P(mean_g), "mean of plane 1 (G)"},
    {"mean_b", MX_PARAM_FLOAT, "0", NOR, NULL, P(mean_b), "mean of plane 2 (B)"},
    {"mean_a", MX_PARAM_FLOAT, "0", NOR, NULL, P(mean_a), "mean of plane 3 (A)"},
    {"std_r", MX_PARAM_FLOAT, "1", 1e-30, 1e30, NULL, P(std_r), "divisor of plane 0"},
    {"std_g", MX_PARAM_FLOAT, "1", 1e-30, 1e30, NULL, P(std_g), "divisor of plane 1"},
    {"std_b", MX_PARAM_FLOAT, "1", 1e-30, 1e30, NULL, P(std_b), "divisor of plane 2"},
    {"std_a", MX_PARAM_FLOAT, "1", 1e-30, 1e30, NULL, P(std_a), "divisor of plane 3"},
    {"scale", MX_PARAM_FLOAT, "1", NOR, NULL, P(scale), "multiplier: out = (pixel - mean) * scale / std"},
    {"max_random_contrast", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(max_random_contrast),
     "contrast factor uniform in [1 - v, 1 + v]"},
    {"max_random_illumination", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(max_random_illumination),
     "illumination offset uniform in [-v, v]"},
    {"inter_method", MX_PARAM_INT, "1", 0, 10, NULL, P(inter_method), "interpolation: only 1 (bilinear)"},
    {"pad", MX_PARAM_INT, "0", 0, 65535, NULL, P(pad), "border added before cropping"},
    {"fill_value", MX_PARAM_INT, "255", 0, 255, NULL, P(fill_value), "value of the border"},
    {"dtype", MX_PARAM_ENUM, "None", NOR, dtype_choices, P(dtype), "output type: None (float32) or float32"},
    {"ctx", MX_PARAM_ENUM, "gpu", NOR, ctx_choices, P(ctx), "accepted; batches are produced on the CPU"},
    {"verbose", MX_PARAM_BOOL, "True", NOR, NULL, P(verbose), "send skip warnings to the log (0: only count them)"},
    {"shuffle_chunk_size", MX_PARAM_INT, "0", 0, 1e12, NULL, P(shuffle_chunk_size),
     "not supported: the shuffle is global"},
    {"shuffle_chunk_seed", MX_PARAM_INT, "0", -1e18, 1e18, NULL, P(shuffle_chunk_seed),
     "not supported: the shuffle is global"},
    {"seed_aug", MX_PARAM_INT, "-1", -1, 4294967295.0, NULL, P(seed_aug),
     "augmentation seed; -1: use seed"},
    {"max_rotate_angle", MX_PARAM_INT, "0", 0, 360, NULL, P(max_rotate_angle), "not supported"},
    {"rotate", MX_PARAM_INT, "-1", -1, 360, NULL, P(rotate), "not supported"},
    {"max_crop_size", MX_PARAM_INT, "-1", -1, 1e6, NULL, P(max_crop_size), "not supported"},
    {"min_crop_size", MX_PARAM_INT, "-1", -1, 1e6, NULL, P(min_crop_size), "not supported"},
    {"max_aspect_ratio", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(max_aspect_ratio), "not supported"},
    {"min_aspect_ratio", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(min_aspect_ratio), "not supported"},
    {"max_shear_ratio", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(max_shear_ratio), "not supported"},
    {"max_random_scale", MX_PARAM_FLOAT, "1", 0, 1e30, NULL, P(max_random_scale), "not supported"},
    {"min_random_scale", MX_PARAM_FLOAT, "1", 0, 1e30, NULL, P(min_random_scale), "not supported"},
    {"max_random_area", MX_PARAM_FLOAT, "1", 0, 1, NULL, P(max_random_area), "not supported"},
    {"min_random_area", MX_PARAM_FLOAT, "1", 0, 1, NULL, P(min_random_area), "not supported"},
    {"random_resized_crop", MX_PARAM_BOOL, "False", NOR, NULL, P(random_resized_crop), "not supported"},
    {"brightness", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(brightness), "not supported"},
    {"contrast", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(contrast), "not supported"},
    {"saturation", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(saturation), "not supported"},
    {"pca_noise", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(pca_noise), "not supported"},
    {"random_h", MX_PARAM_INT, "0", 0, 180, NULL, P(random_h), "not supported"},
    {"random_s", MX_PARAM_INT, "0", 0, 255, NULL, P(random_s), "not supported"},
    {"random_l", MX_PARAM_INT, "0", 0, 255, NULL, P(random_l), "not supported"},
    {"max_img_size", MX_PARAM_FLOAT, "1e10", 0, 1e30, NULL, P(max_img_size), "not supported"},
    {"min_img_size", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, P(min_img_size), "not supported"},
};
#undef P
#undef NOR

#define N_IR_PARAMS ((int)(sizeof(ir_param_table) / sizeof(ir_param_table[0])))

/* ---------------------------------------------------------------- state */

typedef enum { ROW_OK = 0, ROW_BAD, ROW_ABORTED } row_state;

typedef struct ir_state ir_state;

/* One decoding thread's scratch (index 0: the producer). */
typedef struct ir_worker {
    ir_state *st;
    mx_aug_scratch aug; /* decoder state */
    uint8_t *buf;       /* multi-part records are reassembled here */
    size_t cap;
    pthread_t thread;
    bool started;
} ir_worker;

/* The rows being decoded now. */
typedef struct ir_job {
    const mx_aug_params *aug;
    float *data;     /* (rows, C, H, W) */
    float *label;    /* (rows, label_width) */
    uint64_t *index; /* (rows) */
    int64_t hi;
    atomic_llong next; /* next row to take */
} ir_job;

struct ir_state {
    ir_params p;
    mx_aug_params aug;
    mx_shape data_shape, label_shape;
    int64_t B, label_width, sample_size;
    uint64_t aug_seed;

    /* the mapped file and the part's records */
    const uint8_t *map;
    uint64_t size;
    int64_t n;
    uint64_t *off, *ext; /* record heads and extents (bytes up to the next record) */
    uint8_t *bad;        /* 1: known bad, left out (producer thread) */

    /* path_imglist: sorted ids and their label_width labels */
    int64_t n_list;
    int64_t *list_ids;
    float *list_labels;
    float *mean_img;

    /* epochs: set between stop and start, read by the producer */
    mx_mt19937 rng;
    uint32_t *cur, *nxt; /* NULL when not shuffling: the identity */
    bool nxt_ready;
    int64_t pass;  /* epochs so far: the augmentation keys' pass */
    int64_t first; /* where this epoch starts in cur */
    /* producer */
    int64_t pos, wrap_end, epoch_good;
    bool ended;
    /* consumer */
    bool last_wrapped;

    /* rows of the batch being filled */
    int64_t *row_rec;
    uint64_t *row_key;
    uint8_t *row_state;
    char (*row_msg)[ROW_MSG];

    /* decoding threads */
    int n_workers;
    ir_worker *workers;
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_go, pool_done;
    uint64_t pool_gen;
    int pool_busy;
    bool pool_quit;
    ir_job job;

    /* warnings and counters */
    pthread_mutex_t log_mu;
    mx_io_log_fn log_fn;
    void *log_user;
    char *pending[MX_IMAGEREC_MAX_PENDING];
    int n_pending;
    int64_t dropped_undelivered; /* dropped since the last "not shown" line */
    mx_imagerecord_stats stats;

    mx_prefetch *pf;
    bool mutexes;
};

/* ---------------------------------------------------------------- warnings */

static void warn(ir_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(ir_state *st, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&st->log_mu);
    st->stats.warnings++;
    snprintf(st->stats.last_warning, sizeof(st->stats.last_warning), "%s", line);
    char *copy = st->n_pending < MX_IMAGEREC_MAX_PENDING ? strdup(line) : NULL;
    if (copy) {
        st->pending[st->n_pending++] = copy;
    } else {
        st->stats.dropped++;
        st->dropped_undelivered++;
    }
    pthread_mutex_unlock(&st->log_mu);
}

/* Hands queued lines to the callback, on the caller's thread. */
static void deliver_warnings(ir_state *st)
{
    char *lines[MX_IMAGEREC_MAX_PENDING];
    pthread_mutex_lock(&st->log_mu);
    int n = st->n_pending;
    memcpy(lines, st->pending, (size_t)n * sizeof(char *));
    st->n_pending = 0;
    int64_t dropped = st->dropped_undelivered;
    st->dropped_undelivered = 0;
    mx_io_log_fn fn = st->p.verbose ? st->log_fn : NULL; /* verbose = 0: counted only */
    void *user = st->log_user;
    pthread_mutex_unlock(&st->log_mu);
    for (int i = 0; i < n; i++) {
        if (fn) fn(user, lines[i]);
        free(lines[i]);
    }
    if (fn && dropped > 0) {
        char line[MX_PARAM_STRING_MAX + 128];
        snprintf(line, sizeof(line), "imagerecord: '%s': %lld more warnings not shown (queue full)",
                 st->p.path_imgrec, (long long)dropped);
        fn(user, line);
    }
}

void mx_imagerecord_set_log(void *state, mx_io_log_fn fn, void *user)
{
    ir_state *st = state;
    pthread_mutex_lock(&st->log_mu);
    st->log_fn = fn;
    st->log_user = user;
    pthread_mutex_unlock(&st->log_mu);
}

void mx_imagerecord_get_stats(void *state, mx_imagerecord_stats *out)
{
    ir_state *st = state;
    pthread_mutex_lock(&st->log_mu);
    *out = st->stats;
    pthread_mutex_unlock(&st->log_mu);
}

static void ir_skip_stats(void *state, mx_data_skip_stats *out)
{
    mx_imagerecord_stats s;
    mx_imagerecord_get_stats(state, &s);
    out->records = s.records;
    out->skipped_records = s.skipped_records;
    out->bytes = s.bytes;
    out->skipped_bytes = s.skipped_bytes;
    snprintf(out->why, sizeof(out->why), "%s", s.last_warning);
}

/* ---------------------------------------------------------------- RecordIO on the mapping */

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t pad4(uint64_t n) { return (n + 3u) & ~(uint64_t)3u; }

typedef struct walk {
    uint64_t end;         /* the record's extent ends here */
    uint32_t parts;
    uint64_t resync_from; /* on failure: where to look for the next head */
    char why[256];
} walk;

/* Follows the parts of the record whose head is at pos, within [0, limit):
 * the RecordIO reader's checks (recordio.c), on memory. */
static bool walk_record(const uint8_t *map, uint64_t limit, uint64_t pos, walk *w)
{
    uint64_t at = pos;
    w->parts = 0;
    for (;;) {
        if (at >= limit || limit - at < 8) {
            if (w->parts == 0)
                snprintf(w->why, sizeof(w->why), "RecordIO data truncated: part header at offset %llu has only %llu of 8 bytes",
                         (unsigned long long)at, (unsigned long long)(limit > at ? limit - at : 0));
            else
                snprintf(w->why, sizeof(w->why),
                         "RecordIO record at offset %llu is cut short: the data ends at offset %llu where its next "
                         "part should start",
                         (unsigned long long)pos, (unsigned long long)limit);
            w->resync_from = limit;
            return false;
        }
        uint32_t magic = rd32(map + at), lrec = rd32(map + at + 4);
        if (magic != MX_RECORDIO_MAGIC) {
            snprintf(w->why, sizeof(w->why), "corrupt RecordIO data: bad magic 0x%08x at offset %llu%s", magic,
                     (unsigned long long)at, w->parts ? " (continuation of the record)" : "");
            w->resync_from = at + 4;
            return false;
        }
        uint32_t cflag = mx_recordio_cflag(lrec), plen = mx_recordio_length(lrec);
        if (cflag > 3) {
            snprintf(w->why, sizeof(w->why), "corrupt RecordIO data: invalid cflag %u at offset %llu", cflag,
                     (unsigned long long)at);
            w->resync_from = at + 8;
            return false;
        }
        if (w->parts == 0 && cflag >= 2) {
            snprintf(w->why, sizeof(w->why),
                     "corrupt RecordIO data: continuation part (cflag %u) at offset %llu where a record should start",
                     cflag, (unsigned long long)at);
            w->resync_from = at + 8;
            return false;
        }
        if (w->parts > 0 && cflag <= 1) {
            snprintf(w->why, sizeof(w->why),
                     "corrupt RecordIO data: the record at offset %llu is unfinished: the part at offset %llu has "
                     "cflag %u, expected a continuation (2 or 3)",
                     (unsigned long long)pos, (unsigned long long)at, cflag);
            w->resync_from = at;
            return false;
        }
        uint64_t padded = pad4(plen);
        if (padded > limit - at - 8) {
            snprintf(w->why, sizeof(w->why),
                     "RecordIO data truncated: the part at offset %llu claims %u payload bytes but only %llu remain",
                     (unsigned long long)at, plen, (unsigned long long)(limit - at - 8));
            w->resync_from = at + 8;
            return false;
        }
        at += 8 + padded;
        w->parts++;
        if (cflag == 0 || cflag == 3) break;
    }
    w->end = at;
    return true;
}

/* Spec 1.4 on memory: the first record head at or after p (a multiple of
 * 4): a magic word followed by a word with cflag 0/1; size if none. */
static uint64_t find_head(const uint8_t *map, uint64_t size, uint64_t p)
{
    while (p < size && size - p >= 8) {
        if (rd32(map + p) == MX_RECORDIO_MAGIC) {
            if (mx_recordio_cflag(rd32(map + p + 4)) <= 1) return p;
            p += 8;
        } else {
            p += 4;
        }
    }
    return size;
}

/* After corruption: the first offset at or after p, at any byte (inserted
 * garbage shifts records off the 4-byte grid), where a record starts that
 * walk_record accepts and that ends at the end of the data or at another
 * magic word (a magic word alone is weak evidence: the writer escapes it
 * only at aligned payload offsets); size if none. */
static uint64_t resync_head(const uint8_t *map, uint64_t size, uint64_t p)
{
    for (; p < size && size - p >= 8; p++) {
        if (map[p] != 0x0A || rd32(map + p) != MX_RECORDIO_MAGIC || mx_recordio_cflag(rd32(map + p + 4)) > 1)
            continue;
        walk w;
        if (!walk_record(map, size, p, &w)) continue;
        if (w.end == size || (size - w.end >= 4 && rd32(map + w.end) == MX_RECORDIO_MAGIC)) return p;
    }
    return size;
}

/* The payload of record `rec` (validated here: with an .idx nothing was
 * checked before). Multi-part records are reassembled in w->buf. */
static mx_status record_payload(ir_state *st, ir_worker *w, int64_t rec, const uint8_t **data, size_t *len)
{
    uint64_t off = st->off[rec], ext = st->ext[rec];
    if (off >= st->size)
        return MX_ERROR(MX_ERR_FORMAT, "the offset is beyond the end of the file (%llu bytes)",
                        (unsigned long long)st->size);
    if (ext == 0) return MX_ERROR(MX_ERR_FORMAT, "the .idx lists this offset more than once");
    walk wk;
    if (!walk_record(st->map, off + ext, off, &wk)) return MX_ERROR(MX_ERR_FORMAT, "%s", wk.why);
    if (wk.parts == 1) {
        *data = st->map + off + 8;
        *len = mx_recordio_length(rd32(st->map + off + 4));
        return MX_OK;
    }
    /* part1 | magic | part2 | ... : at most the extent's size */
    size_t need = (size_t)(wk.end - off);
    if (need > w->cap) {
        uint8_t *nb = mx_realloc(w->buf, need);
        if (!nb) return MX_ERR_NOMEM;
        w->buf = nb;
        w->cap = need;
    }
    size_t n = 0;
    for (uint64_t at = off; at < wk.end;) {
        uint32_t lrec = rd32(st->map + at + 4), plen = mx_recordio_length(lrec), cflag = mx_recordio_cflag(lrec);
        if (at != off) {
            static const uint8_t magic[4] = {0x0A, 0x23, 0xD7, 0xCE};
            memcpy(w->buf + n, magic, 4);
            n += 4;
        }
        memcpy(w->buf + n, st->map + at + 8, plen);
        n += plen;
        at += 8 + pad4(plen);
        if (cflag == 0 || cflag == 3) break;
    }
    *data = w->buf;
    *len = n;
    return MX_OK;
}

/* ---------------------------------------------------------------- one row */

static const float *list_find(const ir_state *st, uint64_t id)
{
    int64_t lo = 0, hi = st->n_list;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)st->list_ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    if (lo < st->n_list && (uint64_t)st->list_ids[lo] == id) return st->list_labels + lo * st->label_width;
    return NULL;
}

/* Reads, decodes and writes row r of the current job. */
static mx_status process_row(ir_state *st, ir_worker *w, int64_t r)
{
    const ir_job *job = &st->job;
    const uint8_t *payload = NULL;
    size_t len = 0;
    MX_TRY(record_payload(st, w, st->row_rec[r], &payload, &len));
    mx_imrec ir;
    mx_status s = mx_imrec_parse(payload, len, &ir);
    if (s != MX_OK) return mx_error_prefix(s, "not an image record");
    float *lab = job->label + r * st->label_width;
    const int64_t lw = st->label_width;
    if (st->n_list) {
        const float *l = list_find(st, ir.header.id);
        if (!l)
            return MX_ERROR(MX_ERR_FORMAT, "image id %llu is not in path_imglist '%s'",
                            (unsigned long long)ir.header.id, st->p.path_imglist);
        memcpy(lab, l, (size_t)lw * sizeof(float));
    } else if (ir.num_labels > 0) {
        if ((int64_t)ir.num_labels != lw)
            return MX_ERROR(MX_ERR_FORMAT, "the record has %u labels (IRHeader flag) but label_width is %lld",
                            ir.num_labels, (long long)lw);
        for (int64_t j = 0; j < lw; j++) lab[j] = mx_imrec_label(&ir, (uint32_t)j);
    } else {
        if (lw != 1)
            return MX_ERROR(MX_ERR_FORMAT, "the record has 1 label but label_width is %lld", (long long)lw);
        lab[0] = ir.header.label;
    }
    MX_TRY(mx_aug_process(job->aug, &w->aug, ir.image, ir.image_size, st->row_key[r], job->data + r * st->sample_size,
                          NULL));
    job->index[r] = ir.header.id;
    return MX_OK;
}

static void run_rows(ir_state *st, ir_worker *w)
{
    ir_job *job = &st->job;
    bool stopping = false;
    for (;;) {
        long long r = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (r >= job->hi) break;
        /* Asked to stop (reset, free)? Checked every 16 rows: the check
         * takes the prefetcher's lock, which the consumer also uses. */
        if ((r & 15) == 0 && st->pf && mx_prefetch_stopping(st->pf)) stopping = true;
        if (stopping) {
            st->row_state[r] = ROW_ABORTED;
            continue;
        }
        mx_status s = process_row(st, w, r);
        if (s == MX_OK) {
            st->row_state[r] = ROW_OK;
        } else {
            st->row_state[r] = ROW_BAD;
            const char *m = mx_last_error();
            snprintf(st->row_msg[r], ROW_MSG, "%s", m && *m ? m : mx_status_name(s));
        }
    }
}

static void *helper_main(void *arg)
{
    ir_worker *w = arg;
    ir_state *st = w->st;
    uint64_t seen = 0;
    pthread_mutex_lock(&st->pool_mu);
    for (;;) {
        while (!st->pool_quit && st->pool_gen == seen) pthread_cond_wait(&st->pool_go, &st->pool_mu);
        if (st->pool_quit) break;
        seen = st->pool_gen;
        pthread_mutex_unlock(&st->pool_mu);
        run_rows(st, w);
        pthread_mutex_lock(&st->pool_mu);
        if (--st->pool_busy == 0) pthread_cond_signal(&st->pool_done);
    }
    pthread_mutex_unlock(&st->pool_mu);
    return NULL;
}

/* Decodes rows [lo, hi) of the job on every worker; returns when all are done. */
static void run_job(ir_state *st, int64_t lo, int64_t hi)
{
    atomic_store(&st->job.next, lo);
    st->job.hi = hi;
    int helpers = st->n_workers - 1;
    if (helpers > 0 && hi - lo > 1) {
        pthread_mutex_lock(&st->pool_mu);
        st->pool_busy = helpers;
        st->pool_gen++;
        pthread_cond_broadcast(&st->pool_go);
        pthread_mutex_unlock(&st->pool_mu);
        run_rows(st, &st->workers[0]);
        pthread_mutex_lock(&st->pool_mu);
        while (st->pool_busy > 0) pthread_cond_wait(&st->pool_done, &st->pool_mu);
        pthread_mutex_unlock(&st->pool_mu);
    } else {
        run_rows(st, &st->workers[0]);
    }
}

/* ---------------------------------------------------------------- batches */

static int64_t order_at(const uint32_t *perm, int64_t i) { return perm ? (int64_t)perm[i] : i; }

static void gen_next(ir_state *st)
{
    if (st->nxt_ready || !st->p.shuffle) {
        st->nxt_ready = true;
        return;
    }
    memcpy(st->nxt, st->cur, (size_t)st->n * sizeof(uint32_t));
    mx_io_shuffle_u32(st->nxt, (size_t)st->n, &st->rng);
    st->nxt_ready = true;
}

static void move_row(ir_state *st, const ir_job *job, int64_t to, int64_t from)
{
    memmove(job->data + to * st->sample_size, job->data + from * st->sample_size,
            (size_t)st->sample_size * sizeof(float));
    memmove(job->label + to * st->label_width, job->label + from * st->label_width,
            (size_t)st->label_width * sizeof(float));
    job->index[to] = job->index[from];
}

/* Fills rows [*filled, B) with the next good records of `perm` from *pos
 * (pass `pass` for the augmentation keys), closing up over bad records.
 * Returns false when the fill was abandoned (stopping). */
static bool fill_rows(ir_state *st, const uint32_t *perm, int64_t pass, int64_t *pos, int64_t *filled)
{
    const ir_job *job = &st->job;
    while (*filled < st->B && *pos < st->n) {
        int64_t lo = *filled, hi = lo;
        while (hi < st->B && *pos < st->n) {
            int64_t rec = order_at(perm, *pos);
            if (!st->bad[rec]) {
                st->row_rec[hi] = rec;
                st->row_key[hi] = mx_aug_key(st->aug_seed, (uint64_t)pass, (uint64_t)*pos);
                hi++;
            }
            (*pos)++;
        }
        if (hi == lo) break;
        run_job(st, lo, hi);
        int64_t to = lo;
        for (int64_t r = lo; r < hi; r++) {
            if (st->row_state[r] == ROW_ABORTED) return false;
            if (st->row_state[r] == ROW_BAD) {
                int64_t rec = st->row_rec[r];
                st->bad[rec] = 1;
                pthread_mutex_lock(&st->log_mu);
                st->stats.skipped_records++;
                pthread_mutex_unlock(&st->log_mu);
                warn(st, "imagerecord: '%s': skipped the record at offset %llu: %s", st->p.path_imgrec,
                     (unsigned long long)st->off[rec], st->row_msg[r]);
                continue;
            }
            if (to != r) {
                st->row_rec[to] = st->row_rec[r];
                move_row(st, job, to, r);
            }
            to++;
        }
        *filled = to;
    }
    return true;
}

static mx_status ir_fill(void *user, int64_t k, mx_prefetch_slot *slot, bool *produced)
{
    ir_state *st = user;
    *produced = false;
    if (k == 0) {
        st->pos = st->first;
        st->ended = false;
        st->epoch_good = 0;
    }
    if (st->ended) return MX_OK;
    st->job.aug = &st->aug;
    st->job.data = slot->data;
    st->job.label = slot->label;
    st->job.index = slot->index;
    int64_t filled = 0;
    if (!fill_rows(st, st->cur, st->pass, &st->pos, &filled)) return MX_OK;
    st->epoch_good += filled;
    if (filled == 0) {
        st->ended = true;
        if (st->epoch_good == 0)
            return MX_ERROR(MX_ERR_FORMAT, "imagerecord: '%s': no record of this epoch could be used (%lld records, "
                            "all skipped; last warning: %s)",
                            st->p.path_imgrec, (long long)st->n, st->stats.last_warning);
        return MX_OK;
    }
    if (filled < st->B) {
        st->ended = true;
        slot->pad = (int)(st->B - filled);
        if (st->p.round_batch) {
            gen_next(st);
            int64_t wpos = 0;
            if (!fill_rows(st, st->p.shuffle ? st->nxt : NULL, st->pass + 1, &wpos, &filled)) return MX_OK;
            st->wrap_end = wpos;
        }
        if (filled < st->B) {
            memset(st->job.data + filled * st->sample_size, 0,
                   (size_t)((st->B - filled) * st->sample_size) * sizeof(float));
            memset(st->job.label + filled * st->label_width, 0,
                   (size_t)((st->B - filled) * st->label_width) * sizeof(float));
            for (int64_t r = filled; r < st->B; r++) st->job.index[r] = UINT64_MAX;
        }
    }
    *produced = true;
    return MX_OK;
}

/* ---------------------------------------------------------------- set-up */

static mx_status map_file(ir_state *st)
{
    const char *path = st->p.path_imgrec;
    if (!path[0]) return MX_ERROR(MX_ERR_INVALID, "imagerecord: path_imgrec is required");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT && strchr(path, ';'))
            return MX_ERROR(MX_ERR_UNSUPPORTED, "imagerecord: path_imgrec '%s': ';'-separated lists of files are not "
                            "supported (give one .rec file)", path);
        return MX_ERROR(MX_ERR_IO, "imagerecord: cannot open path_imgrec '%s': %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return MX_ERROR(MX_ERR_IO, "imagerecord: cannot stat '%s': %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return MX_ERROR(MX_ERR_UNSUPPORTED, "imagerecord: path_imgrec '%s' is a directory: give one .rec file", path);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return MX_ERROR(MX_ERR_UNSUPPORTED, "imagerecord: path_imgrec '%s' is not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return MX_ERROR(MX_ERR_FORMAT, "imagerecord: '%s' is empty", path);
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return MX_ERROR(MX_ERR_IO, "imagerecord: cannot map '%s': %s", path, strerror(e));
    st->map = m;
    st->size = (uint64_t)sb.st_size;
    return MX_OK;
}

static mx_status add_record(ir_state *st, int64_t *cap, uint64_t off, uint64_t ext)
{
    if (st->n == *cap) {
        int64_t nc = *cap ? *cap * 2 : 1024;
        uint64_t *a = mx_realloc(st->off, (size_t)nc * sizeof(uint64_t));
        if (!a) return MX_ERR_NOMEM;
        st->off = a;
        uint64_t *b = mx_realloc(st->ext, (size_t)nc * sizeof(uint64_t));
        if (!b) return MX_ERR_NOMEM;
        st->ext = b;
        *cap = nc;
    }
    st->off[st->n] = off;
    st->ext[st->n] = ext;
    st->n++;
    return MX_OK;
}

/* Spec 1.5: this part's byte range, then its records by a header walk. */
static mx_status scan_part(ir_state *st)
{
    uint64_t begin, end;
    MX_TRY(mx_recordio_partition_nominal(st->size, (uint32_t)st->p.num_parts, (uint32_t)st->p.part_index, &begin,
                                         &end));
    if (begin == end) return MX_OK;
    if (end != st->size) end = find_head(st->map, st->size, end);
    if (begin != 0) begin = find_head(st->map, st->size, begin);
    st->stats.bytes = end - begin;
    int64_t cap = 0;
    uint64_t pos = begin;
    while (pos < end) {
        walk w;
        if (walk_record(st->map, st->size, pos, &w)) {
            MX_TRY(add_record(st, &cap, pos, w.end - pos));
            pos = w.end;
            continue;
        }
        uint64_t head = resync_head(st->map, st->size, pos + 1);
        /* Garbage that frames a record (a magic word, a small length) would
         * swallow the real heads after it: when the error comes right after
         * the last record and a head lies inside that record, it was no
         * record. */
        if (st->n > 0 && st->off[st->n - 1] + st->ext[st->n - 1] == pos) {
            uint64_t inner = resync_head(st->map, st->size, st->off[st->n - 1] + 1);
            if (inner < pos) {
                st->n--;
                pos = st->off[st->n];
                head = inner;
            }
        }
        uint64_t stop = head < end ? head : end;
        st->stats.skipped_ranges++;
        st->stats.skipped_bytes += stop - pos;
        warn(st, "imagerecord: '%s': skipped bytes [%llu, %llu) (%llu bytes): %s", st->p.path_imgrec,
             (unsigned long long)pos, (unsigned long long)stop, (unsigned long long)(stop - pos), w.why);
        pos = head;
    }
    return MX_OK;
}

/* Spec 1.7: the sorted .idx offsets, part k of n. */
static mx_status index_part(ir_state *st)
{
    mx_recordio_index *idx = NULL;
    mx_status s = mx_recordio_index_read(st->p.path_imgidx, &idx);
    if (s != MX_OK) return mx_error_prefix(s, "imagerecord: path_imgidx '%s'", st->p.path_imgidx);
    size_t total = 0;
    (void)mx_recordio_index_entries(idx, &total);
    uint64_t *offs = NULL;
    if (total == 0)
        s = MX_ERROR(MX_ERR_FORMAT, "imagerecord: path_imgidx '%s' lists no records", st->p.path_imgidx);
    if (s == MX_OK) s = mx_recordio_index_sorted_offsets(idx, &offs);
    mx_recordio_index_free(idx);
    size_t first = 0, count = 0;
    if (s == MX_OK)
        s = mx_recordio_index_partition(total, (uint32_t)st->p.num_parts, (uint32_t)st->p.part_index, &first, &count);
    if (s == MX_OK && count > 0) {
        st->off = mx_malloc(count * sizeof(uint64_t));
        st->ext = mx_malloc(count * sizeof(uint64_t));
        if (!st->off || !st->ext) s = MX_ERR_NOMEM;
    }
    /* An .idx that no longer matches its .rec (rewritten, garbage inserted,
     * the index of another file) would make every misplaced offset a
     * skipped record: check each offset holds a record head whose record
     * ends by the next offset. When any does not, one part reads the .rec
     * by scanning instead (every intact record, corrupt stretches skipped
     * and counted); with several parts that would change which records
     * each part holds, so the pair is refused. */
    size_t bad = 0;
    char first_bad[600] = "";
    for (size_t i = 0; s == MX_OK && i < count; i++) {
        uint64_t o = offs[first + i];
        uint64_t next = first + i + 1 < total ? offs[first + i + 1] : st->size;
        if (next > st->size) next = st->size;
        st->off[i] = o;
        st->ext[i] = o < next ? next - o : 0;
        st->stats.bytes += st->ext[i];
        walk w;
        const char *why = NULL;
        if (o >= st->size) why = "beyond the end of the file";
        else if (st->ext[i] == 0) why = "listed twice";
        else if (!walk_record(st->map, st->size, o, &w)) why = w.why;
        else if (w.end > next) why = "its record runs past the next offset";
        if (why && bad++ == 0) snprintf(first_bad, sizeof(first_bad), "offset %llu: %s", (unsigned long long)o, why);
    }
    if (s == MX_OK && bad && st->p.num_parts == 1) {
        warn(st,
             "imagerecord: path_imgidx '%s' does not match path_imgrec '%s': %zu of %zu offsets are not record heads "
             "(first: %s); reading the .rec by scanning instead",
             st->p.path_imgidx, st->p.path_imgrec, bad, count, first_bad);
        mx_free(offs);
        mx_free(st->off);
        mx_free(st->ext);
        st->off = st->ext = NULL;
        st->n = 0;
        st->stats.bytes = 0;
        return scan_part(st);
    }
    if (s == MX_OK && bad)
        s = MX_ERROR(MX_ERR_FORMAT,
                     "imagerecord: path_imgidx '%s' does not match path_imgrec '%s': %zu of %zu offsets%s are not "
                     "record heads (first: %s); rebuild the .idx with im2rec or set "
                     "path_imgidx = \"\" to read the .rec by scanning",
                     st->p.path_imgidx, st->p.path_imgrec, bad, count, st->p.num_parts > 1 ? " in this part" : "",
                     first_bad);
    if (s == MX_OK) st->n = (int64_t)count;
    mx_free(offs);
    return s;
}

static int cmp_list_entry(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1]; /* file order: the later line wins */
}

/* path_imglist as MXNet's ImageLabelMap reads it: per line an integer
 * index, then label_width numbers, separated by blanks; the rest (the
 * path) is ignored. */
static mx_status load_list(ir_state *st)
{
    const char *path = st->p.path_imglist;
    FILE *f = fopen(path, "r");
    if (!f) return MX_ERROR(MX_ERR_IO, "imagerecord: cannot open path_imglist '%s': %s", path, strerror(errno));
    const int64_t lw = st->label_width;
    int64_t cap = 0, n = 0, lineno = 0;
    int64_t *pairs = NULL; /* (id, line) */
    float *labels = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    mx_status s = MX_OK;
    while (s == MX_OK && getline(&line, &line_cap, f) > 0) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
        if (!*p) continue;
        if (n == cap) {
            int64_t nc = cap ? cap * 2 : 1024;
            int64_t *np = mx_realloc(pairs, (size_t)nc * 2 * sizeof(int64_t));
            if (np) pairs = np;
            float *nl = np ? mx_realloc(labels, (size_t)(nc * lw) * sizeof(float)) : NULL;
            if (nl) labels = nl;
            if (!np || !nl) {
                s = MX_ERR_NOMEM;
                break;
            }
            cap = nc;
        }
        char *e;
        errno = 0;
        long long id = strtoll(p, &e, 10);
        if (e == p || errno || (*e != ' ' && *e != '\t')) {
            s = MX_ERROR(MX_ERR_FORMAT, "imagerecord: path_imglist '%s':%lld: expected an integer index first", path,
                         (long long)lineno);
            break;
        }
        p = e;
        for (int64_t j = 0; j < lw; j++) {
            float v = strtof(p, &e);
            if (e == p) {
                s = MX_ERROR(MX_ERR_FORMAT, "imagerecord: path_imglist '%s':%lld: expected %lld labels after the index",
                             path, (long long)lineno, (long long)lw);
                break;
            }
            labels[n * lw + j] = v;
            p = e;
        }
        pairs[2 * n] = id;
        pairs[2 * n + 1] = n;
        n++;
    }
    free(line);
    fclose(f);
    if (s == MX_OK && n == 0) s = MX_ERROR(MX_ERR_FORMAT, "imagerecord: path_imglist '%s' has no lines", path);
    if (s == MX_OK) {
        qsort(pairs, (size_t)n, 2 * sizeof(int64_t), cmp_list_entry);
        st->list_ids = mx_malloc((size_t)n * sizeof(int64_t));
        st->list_labels = mx_malloc((size_t)(n * lw) * sizeof(float));
        if (!st->list_ids || !st->list_labels) s = MX_ERR_NOMEM;
    }
    if (s == MX_OK) {
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++) {
            if (i + 1 < n && pairs[2 * (i + 1)] == pairs[2 * i]) continue; /* a later line has this id */
            st->list_ids[m] = pairs[2 * i];
            memcpy(st->list_labels + m * lw, labels + pairs[2 * i + 1] * lw, (size_t)lw * sizeof(float));
            m++;
        }
        st->n_list = m;
    }
    mx_free(pairs);
    mx_free(labels);
    return s;
}

/* ---------------------------------------------------------------- mean image */

/* Loads mean_img, or computes it over one pass of the part (file order,
 * the configured augmentation, no normalisation) and saves it as MXNet
 * does (one array named "mean_img"). */
static mx_status setup_mean(mx_runtime *rt, ir_state *st)
{
    const char *path = st->p.mean_img;
    const mx_shape want = MX_SHAPE(st->aug.channels, st->aug.height, st->aug.width);
    st->mean_img = mx_malloc((size_t)st->sample_size * sizeof(float));
    if (!st->mean_img) return MX_ERR_NOMEM;
    if (access(path, F_OK) == 0) {
        mx_ndarray_list list = {0};
        mx_status s = mx_ndarray_load(rt, path, &list);
        if (s != MX_OK) return mx_error_prefix(s, "imagerecord: mean_img '%s'", path);
        if (list.count != 1) {
            s = MX_ERROR(MX_ERR_FORMAT, "imagerecord: mean_img '%s' holds %d arrays, expected one", path, list.count);
        } else {
            const mx_shape *sh = mx_ndarray_shape(list.arrays[0]);
            char a[96], b[96];
            if (mx_ndarray_dtype(list.arrays[0]) != MX_FLOAT32 || !mx_shape_equal(sh, &want))
                s = MX_ERROR(MX_ERR_FORMAT, "imagerecord: mean_img '%s' is a %s %s array, expected float32 %s", path,
                             mx_dtype_name(mx_ndarray_dtype(list.arrays[0])), mx_shape_str(sh, a, sizeof(a)),
                             mx_shape_str(&want, b, sizeof(b)));
            if (s == MX_OK) s = mx_ndarray_wait_to_read(list.arrays[0]);
            if (s == MX_OK)
                memcpy(st->mean_img, mx_ndarray_data(list.arrays[0]), (size_t)st->sample_size * sizeof(float));
        }
        mx_ndarray_list_free(&list);
        return s;
    }
    /* Compute: decode every record of the part once, unnormalised. */
    mx_aug_params raw = st->aug;
    for (int c = 0; c < 4; c++) {
        raw.mean[c] = 0.0f;
        raw.std[c] = 1.0f;
    }
    raw.scale = 1.0f;
    raw.max_random_contrast = raw.max_random_illumination = 0.0f;
    raw.mean_img = NULL;
    MX_TRY(mx_aug_prepare(&raw));
    size_t nbuf = (size_t)st->B * (size_t)st->sample_size;
    float *data = mx_malloc(nbuf * sizeof(float));
    float *label = mx_malloc((size_t)(st->B * st->label_width) * sizeof(float));
    uint64_t *index = mx_malloc((size_t)st->B * sizeof(uint64_t));
    double *sum = mx_calloc((size_t)st->sample_size, sizeof(double));
    mx_status s = data && label && index && sum ? MX_OK : MX_ERR_NOMEM;
    int64_t count = 0, pos = 0;
    st->job.aug = &raw;
    st->job.data = data;
    st->job.label = label;
    st->job.index = index;
    while (s == MX_OK && pos < st->n) {
        int64_t filled = 0;
        fill_rows(st, NULL, -1, &pos, &filled);
        for (int64_t r = 0; r < filled; r++)
            for (int64_t i = 0; i < st->sample_size; i++) sum[i] += data[r * st->sample_size + i];
        count += filled;
    }
    if (s == MX_OK && count == 0)
        s = MX_ERROR(MX_ERR_FORMAT, "imagerecord: cannot compute mean_img: no record of '%s' could be used",
                     st->p.path_imgrec);
    if (s == MX_OK) {
        for (int64_t i = 0; i < st->sample_size; i++) st->mean_img[i] = (float)(sum[i] / (double)count);
        mx_ndarray *arr = NULL;
        s = mx_ndarray_create(rt, want, MX_FLOAT32, mx_cpu(), &arr);
        if (s == MX_OK) s = mx_ndarray_wait_to_write(arr);
        if (s == MX_OK) {
            memcpy(mx_ndarray_data(arr), st->mean_img, (size_t)st->sample_size * sizeof(float));
            const char *name = "mean_img";
            s = mx_ndarray_save(path, &arr, &name, 1);
            if (s != MX_OK) mx_error_prefix(s, "imagerecord: saving mean_img");
        }
        mx_ndarray_free(arr);
    }
    mx_free(data);
    mx_free(label);
    mx_free(index);
    mx_free(sum);
    return s;
}

/* ---------------------------------------------------------------- create / free */

static void ir_free(void *state)
{
    ir_state *st = state;
    if (!st) return;
    mx_prefetch_free(st->pf); /* stops the producer first */
    if (st->mutexes) {
        pthread_mutex_lock(&st->pool_mu);
        st->pool_quit = true;
        pthread_cond_broadcast(&st->pool_go);
        pthread_mutex_unlock(&st->pool_mu);
    }
    for (int i = 0; st->workers && i < st->n_workers; i++) {
        if (st->workers[i].started) pthread_join(st->workers[i].thread, NULL);
        mx_free(st->workers[i].buf);
        mx_aug_scratch_free(&st->workers[i].aug);
    }
    mx_free(st->workers);
    if (st->map) munmap((void *)st->map, (size_t)st->size);
    mx_free(st->off);
    mx_free(st->ext);
    mx_free(st->bad);
    mx_free(st->cur);
    mx_free(st->nxt);
    mx_free(st->list_ids);
    mx_free(st->list_labels);
    mx_free(st->mean_img);
    mx_free(st->row_rec);
    mx_free(st->row_key);
    mx_free(st->row_state);
    mx_free(st->row_msg);
    if (st->mutexes) {
        for (int i = 0; i < st->n_pending; i++) free(st->pending[i]);
        pthread_cond_destroy(&st->pool_go);
        pthread_cond_destroy(&st->pool_done);
        pthread_mutex_destroy(&st->pool_mu);
        pthread_mutex_destroy(&st->log_mu);
    }
    mx_free(st);
}

/* Parameters this implementation does not have: an error when set. */
static mx_status check_unsupported(const ir_params *p, const mx_param_input *in)
{
    struct {
        const char *name;
        bool set;
    } const knobs[] = {
        {"max_rotate_angle", p->max_rotate_angle != 0},
        {"rotate", p->rotate > 0},
        {"max_crop_size", p->max_crop_size != -1},
        {"min_crop_size", p->min_crop_size != -1},
        {"max_aspect_ratio", p->max_aspect_ratio != 0},
        {"min_aspect_ratio", p->min_aspect_ratio != 0},
        {"max_shear_ratio", p->max_shear_ratio != 0},
        {"max_random_scale", p->max_random_scale != 1},
        {"min_random_scale", p->min_random_scale != 1},
        {"max_random_area", p->max_random_area != 1},
        {"min_random_area", p->min_random_area != 1},
        {"random_resized_crop", p->random_resized_crop},
        {"brightness", p->brightness != 0},
        {"contrast", p->contrast != 0},
        {"saturation", p->saturation != 0},
        {"pca_noise", p->pca_noise != 0},
        {"random_h", p->random_h != 0},
        {"random_s", p->random_s != 0},
        {"random_l", p->random_l != 0},
        {"max_img_size", p->max_img_size != 1e10},
        {"min_img_size", p->min_img_size != 0},
        {"shuffle_chunk_size", p->shuffle_chunk_size != 0},
        {"shuffle_chunk_seed", p->shuffle_chunk_seed != 0},
    };
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
        if (knobs[i].set)
            return mx_params_blame(in, "imagerecord", knobs[i].name, MX_ERR_UNSUPPORTED,
                                   "not supported (implemented: resize, pad, rand_crop, rand_mirror, mirror, "
                                   "mean/std/scale, mean_img, max_random_contrast, max_random_illumination)");
    if (p->inter_method != 1)
        return mx_params_blame(in, "imagerecord", "inter_method", MX_ERR_UNSUPPORTED,
                               "%lld is not supported (only 1, bilinear)", (long long)p->inter_method);
    if (p->dtype > 1)
        return mx_params_blame(in, "imagerecord", "dtype", MX_ERR_UNSUPPORTED,
                               "'%s' is not supported (batches are float32)", dtype_choices[p->dtype]);
    return MX_OK;
}

/* Everything about the parameters that needs no file. */
static mx_status ir_check(const void *params, const mx_param_input *in)
{
    const ir_params *p = params;
    MX_TRY(check_unsupported(p, in));
    if (!p->path_imgrec[0]) return mx_params_blame(in, "imagerecord", "path_imgrec", MX_ERR_INVALID, "is required");
    if (p->part_index >= p->num_parts)
        return mx_params_blame(in, "imagerecord", "part_index", MX_ERR_INVALID, "must be less than num_parts (%lld)",
                               (long long)p->num_parts);
    if (p->data_shape.ndim != 3 || !(p->data_shape.v[0] == 1 || p->data_shape.v[0] == 3 || p->data_shape.v[0] == 4))
        return mx_params_blame(in, "imagerecord", "data_shape", MX_ERR_INVALID, "expected (C, H, W) with 1, 3 or 4 channels");
    mx_aug_params a = {.channels = (int32_t)p->data_shape.v[0], .height = (int32_t)p->data_shape.v[1],
                       .width = (int32_t)p->data_shape.v[2], .resize = (int32_t)p->resize, .pad = (int32_t)p->pad};
    const double stds[4] = {p->std_r, p->std_g, p->std_b, p->std_a};
    for (int c = 0; c < 4; c++) a.std[c] = (float)stds[c];
    if (mx_aug_prepare(&a) != MX_OK) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", mx_last_error());
        const char *key = !strncmp(msg, "pad", 3) ? "pad" : !strncmp(msg, "resize", 6) ? "resize"
                          : !strncmp(msg, "std", 3) ? "std_r" : "data_shape";
        return mx_params_blame(in, "imagerecord", key, MX_ERR_INVALID, "%s", msg);
    }
    return MX_OK;
}

static mx_status ir_shapes(const void *params, mx_shape *data, mx_shape *label)
{
    const ir_params *p = params;
    MX_TRY(ir_check(params, NULL));
    *data = MX_SHAPE(p->batch_size, p->data_shape.v[0], p->data_shape.v[1], p->data_shape.v[2]);
    *label = p->label_width == 1 ? MX_SHAPE(p->batch_size) : MX_SHAPE(p->batch_size, p->label_width);
    return MX_OK;
}

static void ir_image_norm(const void *params, mx_data_image_norm *out)
{
    const ir_params *p = params;
    *out = (mx_data_image_norm){
        .mean = {(float)p->mean_r, (float)p->mean_g, (float)p->mean_b, (float)p->mean_a},
        .std = {(float)p->std_r, (float)p->std_g, (float)p->std_b, (float)p->std_a},
        .scale = (float)p->scale,
        .resize = (int32_t)p->resize,
        .mean_img = p->mean_img,
    };
}

static mx_status setup(mx_runtime *rt, ir_state *st)
{
    const ir_params *p = &st->p;
    MX_TRY(ir_check(p, NULL));
    mx_aug_params *a = &st->aug;
    a->channels = (int32_t)p->data_shape.v[0];
    a->height = (int32_t)p->data_shape.v[1];
    a->width = (int32_t)p->data_shape.v[2];
    a->resize = (int32_t)p->resize;
    a->pad = (int32_t)p->pad;
    a->fill_value = (uint8_t)p->fill_value;
    a->rand_crop = p->rand_crop;
    a->rand_mirror = p->rand_mirror;
    a->mirror = p->mirror;
    const double means[4] = {p->mean_r, p->mean_g, p->mean_b, p->mean_a};
    const double stds[4] = {p->std_r, p->std_g, p->std_b, p->std_a};
    for (int c = 0; c < 4; c++) {
        a->mean[c] = (float)means[c];
        a->std[c] = (float)stds[c];
    }
    a->scale = (float)p->scale;
    a->max_random_contrast = (float)p->max_random_contrast;
    a->max_random_illumination = (float)p->max_random_illumination;
    mx_status s = mx_aug_prepare(a);
    if (s != MX_OK) return mx_error_prefix(s, "imagerecord");

    st->B = p->batch_size;
    st->label_width = p->label_width;
    st->sample_size = (int64_t)a->channels * a->height * a->width;
    st->data_shape = MX_SHAPE(st->B, a->channels, a->height, a->width);
    st->label_shape = st->label_width == 1 ? MX_SHAPE(st->B) : MX_SHAPE(st->B, st->label_width);
    st->aug_seed = (uint64_t)(p->seed_aug >= 0 ? p->seed_aug : p->seed);

    MX_TRY(map_file(st));
    MX_TRY(p->path_imgidx[0] ? index_part(st) : scan_part(st));
    st->stats.records = st->n;
    const char *in_part = p->num_parts > 1 ? " in this part" : "";
    if (st->n == 0)
        return MX_ERROR(MX_ERR_INVALID, "imagerecord: '%s' has no records%s", p->path_imgrec, in_part);
    if (st->n > (int64_t)UINT32_MAX)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "imagerecord: '%s' has more than 2^32 records%s", p->path_imgrec, in_part);
    if (p->round_batch && st->n < st->B)
        return MX_ERROR(MX_ERR_INVALID,
                        "imagerecord: '%s' has %lld records%s, fewer than batch_size %lld (round_batch needs at "
                        "least one full batch)",
                        p->path_imgrec, (long long)st->n, in_part, (long long)st->B);
    if (p->path_imglist[0]) MX_TRY(load_list(st));

    /* rows, order, workers */
    st->bad = mx_calloc((size_t)st->n, 1);
    st->row_rec = mx_malloc((size_t)st->B * sizeof(int64_t));
    st->row_key = mx_malloc((size_t)st->B * sizeof(uint64_t));
    st->row_state = mx_malloc((size_t)st->B);
    st->row_msg = mx_malloc((size_t)st->B * ROW_MSG);
    if (!st->bad || !st->row_rec || !st->row_key || !st->row_state || !st->row_msg) return MX_ERR_NOMEM;
    mx_mt19937_seed(&st->rng, (uint32_t)(RAND_MAGIC + p->seed));
    if (p->shuffle) {
        st->cur = mx_malloc((size_t)st->n * sizeof(uint32_t));
        st->nxt = mx_malloc((size_t)st->n * sizeof(uint32_t));
        if (!st->cur || !st->nxt) return MX_ERR_NOMEM;
        for (int64_t i = 0; i < st->n; i++) st->cur[i] = (uint32_t)i;
        mx_io_shuffle_u32(st->cur, (size_t)st->n, &st->rng);
    }
    st->n_workers = (int)p->preprocess_threads;
    st->workers = mx_calloc((size_t)st->n_workers, sizeof(ir_worker));
    if (!st->workers) return MX_ERR_NOMEM;
    for (int i = 0; i < st->n_workers; i++) st->workers[i].st = st;
    for (int i = 1; i < st->n_workers; i++) {
        int rc = pthread_create(&st->workers[i].thread, NULL, helper_main, &st->workers[i]);
        if (rc != 0)
            return MX_ERROR(MX_ERR_RUNTIME, "imagerecord: cannot start decoding thread %d: %s", i, strerror(rc));
        st->workers[i].started = true;
    }

    if (p->mean_img[0]) {
        MX_TRY(setup_mean(rt, st));
        st->aug.mean_img = st->mean_img;
    }

    mx_prefetch_config cfg = {
        .data_shape = st->data_shape,
        .data_dtype = MX_FLOAT32,
        .label_shape = st->label_shape,
        .capacity = (int)p->prefetch_buffer,
        .ctx = mx_runtime_host_context(rt), /* pinned when bound for a GPU */
        .fill = ir_fill,
        .user = st,
    };
    MX_TRY(mx_prefetch_create(rt, &cfg, &st->pf));
    return mx_prefetch_start(st->pf);
}

static mx_status ir_create(mx_runtime *rt, const void *params, void **out)
{
    *out = NULL;
    ir_state *st = mx_calloc(1, sizeof(*st));
    if (!st) return MX_ERR_NOMEM;
    st->p = *(const ir_params *)params;
    pthread_mutex_init(&st->pool_mu, NULL);
    pthread_cond_init(&st->pool_go, NULL);
    pthread_cond_init(&st->pool_done, NULL);
    pthread_mutex_init(&st->log_mu, NULL);
    st->mutexes = true;
    mx_status s = setup(rt, st);
    if (s != MX_OK) {
        ir_free(st);
        return s;
    }
    *out = st;
    return MX_OK;
}

static mx_status ir_next(void *state, mx_data_batch *batch, bool *has_batch)
{
    ir_state *st = state;
    mx_status s = mx_prefetch_next(st->pf, batch, has_batch);
    /* the warnings of this batch (and earlier ones) first */
    deliver_warnings(st);
    if (s == MX_OK && *has_batch) {
        st->last_wrapped = st->p.round_batch && batch->pad > 0;
        pthread_mutex_lock(&st->log_mu);
        st->stats.delivered += st->B - batch->pad;
        pthread_mutex_unlock(&st->log_mu);
    }
    return s;
}

static mx_status ir_reset(void *state)
{
    ir_state *st = state;
    mx_prefetch_stop(st->pf);
    deliver_warnings(st);
    /* The next permutation (drawn now unless the producer already drew it
     * for a wrap), started after the records a wrapped last batch took. */
    gen_next(st);
    if (st->p.shuffle) {
        uint32_t *t = st->cur;
        st->cur = st->nxt;
        st->nxt = t;
    }
    st->nxt_ready = false;
    st->pass++;
    st->first = st->last_wrapped ? st->wrap_end : 0;
    if (st->first >= st->n) st->first = 0; /* the wrap used up a permutation (few good records) */
    st->last_wrapped = false;
    return mx_prefetch_start(st->pf);
}

static mx_shape ir_data_shape(const void *state) { return ((const ir_state *)state)->data_shape; }
static mx_shape ir_label_shape(const void *state) { return ((const ir_state *)state)->label_shape; }
static int64_t ir_num_samples(const void *state) { return ((const ir_state *)state)->n; }

const mx_data_iter_kind mx_iter_imagerecord = {
    .name = "imagerecord",
    .params = ir_param_table,
    .n_params = N_IR_PARAMS,
    .params_size = sizeof(ir_params),
    .create = ir_create,
    .next = ir_next,
    .reset = ir_reset,
    .free = ir_free,
    .data_shape = ir_data_shape,
    .label_shape = ir_label_shape,
    .num_samples = ir_num_samples,
    .set_log = mx_imagerecord_set_log,
    .skip_stats = ir_skip_stats,
    .check = ir_check,
    .shapes = ir_shapes,
    .image_norm = ir_image_norm,
};
