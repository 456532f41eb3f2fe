/*
 * profile.h - a timeline of what the engine and the communication thread
 * run (MXNet's profiler, Horovod's timeline), written as Chrome trace JSON
 * (chrome://tracing, https://ui.perfetto.dev):
 *   {"traceEvents": [{"name": "conv1 (Convolution) fwd", "cat": "compute",
 *     "ph": "X", "ts": 12.5, "dur": 80.25, "pid": 0, "tid": 3,
 *     "args": {...}}, ...]}
 * ts and dur are microseconds; ts is CLOCK_MONOTONIC, so the files of the
 * ranks of one host share one time axis. pid is the MPI rank (0 outside
 * mpirun); each tid is one track: a worker thread of the engine (named
 * "cpu(0) compute worker 1", ...), the asynchronous operations of a lane,
 * or the MPI thread (lib/comm).
 *
 * Recording. Every thread records into a track of its own, found through a
 * thread-local pointer: appending takes no lock and never moves what was
 * recorded (fixed-size chunks), so the writer may read while others still
 * append. Shared tracks (operations that end on another thread than the one
 * that started them) take a lock. Nothing is recorded while inactive;
 * callers keep the profiler pointer NULL when profiling is off, so the
 * cost then is one branch.
 *
 * Overlap. The summary measures how much of the communication (events of
 * category "comm": the collectives of the MPI thread, from start to
 * completion, and its calls, from send to answer) ran while at least one
 * computation (categories "compute" and "copy") ran on any track:
 * overlap_ns / comm_ns.
 */
#ifndef MX_PROFILE_H
#define MX_PROFILE_H

#include "base/base.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mx_profiler mx_profiler;
typedef struct mx_profile_track mx_profile_track;

typedef enum mx_profile_cat {
    MX_PROFILE_COMPUTE = 0, /* kernels (the engine's compute lane) */
    MX_PROFILE_COPY = 1,    /* the copy lane */
    MX_PROFILE_IO = 2,      /* the I/O lane: data, the kvstore's collectives and calls as engine
                               operations; dist_async's server handling a request */
    MX_PROFILE_COMM = 3,    /* MPI collectives on the communication thread, and its calls */
    MX_PROFILE_CAT_COUNT
} mx_profile_cat;

/* One finished operation. name is copied (truncated to 99 bytes). */
typedef struct mx_profile_event {
    const char *name;
    mx_profile_cat cat;
    int64_t start_ns, end_ns; /* mx_profile_now_ns() */
    int64_t bytes;            /* > 0: shown as args.bytes */
} mx_profile_event;

/* Names the calling thread's track when it records for the first time. */
typedef void (*mx_profile_name_fn)(void *user, char *buf, size_t size);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t mx_profile_now_ns(void);

/* A profiler for process `pid` (the rank), shown as process_name
 * (copied; e.g. "rank 1 on node3"). Starts inactive. MX_ERR_NOMEM. */
mx_status mx_profiler_create(int pid, const char *process_name, mx_profiler **out);
/* Frees every track. Nobody may record any more. NULL is fine. */
void mx_profiler_free(mx_profiler *p);

void mx_profiler_set_active(mx_profiler *p, bool active);
bool mx_profiler_active(const mx_profiler *p);

/* Records ev on the calling thread's track (created on first use, named by
 * name_fn, or "thread N" when name_fn is NULL). Does nothing while
 * inactive; an event that finds no memory is counted as dropped. */
void mx_profiler_record(mx_profiler *p, const mx_profile_event *ev, mx_profile_name_fn name_fn, void *user);

/* A track any thread may record on (under a lock), found by name and made
 * on first use; NULL when out of memory. Valid until mx_profiler_free. */
mx_profile_track *mx_profiler_shared_track(mx_profiler *p, const char *name);
void mx_profiler_record_on(mx_profiler *p, mx_profile_track *track, const mx_profile_event *ev);

typedef struct mx_profile_summary {
    int64_t events;   /* recorded */
    int64_t dropped;  /* lost to a failed allocation */
    int64_t comm_ns;  /* union of the communication events */
    int64_t overlap_ns; /* the part of comm_ns during which computation ran */
} mx_profile_summary;

/* Counts and the overlap of what was recorded so far. MX_ERR_NOMEM. */
mx_status mx_profiler_summary(mx_profiler *p, mx_profile_summary *out);

/* Writes the Chrome trace of what was recorded so far to path (through a
 * temporary file, renamed). MX_ERR_IO naming the path, MX_ERR_NOMEM. */
mx_status mx_profiler_write(mx_profiler *p, const char *path);

#endif /* MX_PROFILE_H */
