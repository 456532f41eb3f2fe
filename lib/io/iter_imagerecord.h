/*
 * iter_imagerecord.h - what the "imagerecord" iterator (MXNet's
 * ImageRecordIter) offers beyond io.h: its skip report.
 *
 * A corrupt stretch of the .rec, a record that is not an image, an image
 * that does not decode, a record whose labels do not fit label_width: the
 * iterator skips it, counts it and queues one warning line, and every
 * other record is still delivered (the batches close up over the gap).
 * The library never prints, so the lines go to a log callback, called on
 * the thread that calls next() or reset() (never on a decoding thread),
 * one line at a time, before the batch is returned. Without a callback
 * the lines are only counted (the last one is kept in the stats). At most
 * MX_IMAGEREC_MAX_PENDING lines wait for delivery; beyond that they are
 * counted and one line says how many were dropped.
 *
 * Each bad record is reported once: the iterator remembers it and leaves
 * it out of later epochs without decoding it again. An epoch in which no
 * record at all can be used is an error (MX_ERR_FORMAT at next()), so a
 * wrong data_shape or label_width cannot silently train on nothing.
 *
 * Warning lines (PATH is path_imgrec):
 *   imagerecord: 'PATH': skipped bytes [A, B) (N bytes): <RecordIO problem>
 *       (no .idx: found while scanning the part at creation)
 *   imagerecord: 'PATH': skipped the record at offset O[ (image id I)]: <why>
 *       (a record in the .idx whose RecordIO framing is wrong, a payload
 *        that is not an image record, an image that does not decode, a
 *        label count that does not match label_width, an id missing from
 *        path_imglist)
 *
 * Through io.h: mx_data_iter_set_log(it, fn, user) (the kind's set_log
 * hook). The functions below take the iterator kind's state (what
 * mx_iter_imagerecord.create returned) instead, for tests and tools that
 * drive the kind directly.
 */
#ifndef MX_IO_ITER_IMAGERECORD_H
#define MX_IO_ITER_IMAGERECORD_H

#include "io/io.h"

#define MX_IMAGEREC_MAX_PENDING 256

typedef struct mx_imagerecord_stats {
    int64_t records;          /* records in this part (scan, or .idx lines) */
    uint64_t bytes;           /* bytes of this part */
    int64_t skipped_ranges;   /* corrupt byte ranges skipped while scanning (no .idx) */
    uint64_t skipped_bytes;   /* their total size */
    int64_t skipped_records;  /* records skipped when read (each counted once, when found:
                                 the decoding runs up to prefetch_buffer batches ahead) */
    int64_t delivered;        /* samples in the batches next() handed out, pad excluded */
    int64_t warnings;         /* warning lines produced */
    int64_t dropped;          /* of those, not delivered to the callback (queue full) */
    char last_warning[1024];  /* the latest line, "" if none */
} mx_imagerecord_stats;

extern const mx_data_iter_kind mx_iter_imagerecord;

/* Sets (or clears, fn = NULL) the warning callback. Lines queued before
 * the call (the scan at creation) are delivered at the next next()/reset(). */
void mx_imagerecord_set_log(void *state, mx_io_log_fn fn, void *user);

/* The counters so far. Consistent between next() calls; call it on the
 * consumer's thread. */
void mx_imagerecord_get_stats(void *state, mx_imagerecord_stats *out);

#endif /* MX_IO_ITER_IMAGERECORD_H */
