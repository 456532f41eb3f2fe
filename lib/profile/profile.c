/*
 * profile.c - per-thread event buffers and the Chrome trace writer
 * (profile.h).
 *
 * A track is a list of fixed chunks of events and an atomic count: its
 * owner fills the slot, then publishes it with a release store of the
 * count, so a reader that loads the count with acquire sees whole events,
 * and chunks never move under it.
 */
#include "profile/profile.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_MAX_BYTES 100
#define CHUNK_EVENTS 1024
#define MAX_CHUNKS 4096 /* 4M events a track; later ones are dropped */

typedef struct prof_event {
    int64_t start_ns, end_ns, bytes;
    int32_t cat;
    char name[NAME_MAX_BYTES];
} prof_event;

struct mx_profile_track {
    int tid;
    char name[96];
    bool shared;               /* recorded on under p->mu */
    prof_event *chunks[MAX_CHUNKS];
    atomic_long count;
    atomic_long dropped;
    mx_profile_track *next;
};

struct mx_profiler {
    uint64_t id;               /* tells the thread-local pointers of different profilers apart */
    atomic_bool active;
    int pid;
    char process_name[128];
    pthread_mutex_t mu;        /* the track list; appends to shared tracks */
    mx_profile_track *tracks;
    int next_tid;
};

/* Ids only: a profiler freed and another made at the same address must not
 * inherit the old thread-local track pointers. */
static atomic_uint_least64_t next_profiler_id = 1;

static _Thread_local struct {
    uint64_t id;
    mx_profile_track *track;
} tls;

int64_t mx_profile_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

mx_status mx_profiler_create(int pid, const char *process_name, mx_profiler **out)
{
    *out = NULL;
    mx_profiler *p = mx_calloc(1, sizeof(*p));
    if (!p) return MX_ERR_NOMEM;
    p->id = atomic_fetch_add(&next_profiler_id, 1);
    p->pid = pid;
    snprintf(p->process_name, sizeof(p->process_name), "%s", process_name ? process_name : "mxtrain");
    pthread_mutex_init(&p->mu, NULL);
    atomic_init(&p->active, false);
    *out = p;
    return MX_OK;
}

void mx_profiler_free(mx_profiler *p)
{
    if (!p) return;
    mx_profile_track *t = p->tracks;
    while (t) {
        mx_profile_track *next = t->next;
        for (int c = 0; c < MAX_CHUNKS && t->chunks[c]; c++) free(t->chunks[c]);
        free(t);
        t = next;
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void mx_profiler_set_active(mx_profiler *p, bool active) { atomic_store(&p->active, active); }

bool mx_profiler_active(const mx_profiler *p) { return atomic_load(&((mx_profiler *)p)->active); }

/* A new track, linked in; p->mu must be held. Plain calloc: recording
 * must not touch the calling thread's error state. */
static mx_profile_track *track_new_locked(mx_profiler *p, const char *name, bool shared)
{
    mx_profile_track *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->shared = shared;
    atomic_init(&t->count, 0);
    atomic_init(&t->dropped, 0);
    t->tid = p->next_tid++;
    if (name && *name) snprintf(t->name, sizeof(t->name), "%s", name);
    else snprintf(t->name, sizeof(t->name), "thread %d", t->tid);
    t->next = p->tracks;
    p->tracks = t;
    return t;
}

/* Appends ev; the caller is the track's only writer (its thread, or the
 * holder of p->mu for a shared track). */
static void track_append(mx_profile_track *t, const mx_profile_event *ev)
{
    long n = atomic_load_explicit(&t->count, memory_order_relaxed);
    long c = n / CHUNK_EVENTS;
    if (c >= MAX_CHUNKS) {
        atomic_fetch_add(&t->dropped, 1);
        return;
    }
    if (!t->chunks[c]) {
        prof_event *chunk = malloc(sizeof(prof_event) * CHUNK_EVENTS);
        if (!chunk) {
            atomic_fetch_add(&t->dropped, 1);
            return;
        }
        t->chunks[c] = chunk;
    }
    prof_event *e = &t->chunks[c][n % CHUNK_EVENTS];
    e->start_ns = ev->start_ns;
    e->end_ns = ev->end_ns >= ev->start_ns ? ev->end_ns : ev->start_ns;
    e->bytes = ev->bytes;
    e->cat = (int32_t)ev->cat;
    snprintf(e->name, sizeof(e->name), "%s", ev->name ? ev->name : "?");
    atomic_store_explicit(&t->count, n + 1, memory_order_release);
}

void mx_profiler_record(mx_profiler *p, const mx_profile_event *ev, mx_profile_name_fn name_fn, void *user)
{
    if (!atomic_load_explicit(&p->active, memory_order_relaxed)) return;
    if (tls.id != p->id) {
        char name[96] = "";
        if (name_fn) name_fn(user, name, sizeof(name));
        pthread_mutex_lock(&p->mu);
        mx_profile_track *t = track_new_locked(p, name, false);
        pthread_mutex_unlock(&p->mu);
        if (!t) return;
        tls.id = p->id;
        tls.track = t;
    }
    track_append(tls.track, ev);
}

mx_profile_track *mx_profiler_shared_track(mx_profiler *p, const char *name)
{
    pthread_mutex_lock(&p->mu);
    mx_profile_track *found = NULL;
    for (mx_profile_track *t = p->tracks; t && !found; t = t->next)
        if (t->shared && !strcmp(t->name, name)) found = t;
    if (!found) found = track_new_locked(p, name, true);
    pthread_mutex_unlock(&p->mu);
    return found;
}

void mx_profiler_record_on(mx_profiler *p, mx_profile_track *track, const mx_profile_event *ev)
{
    if (!track || !atomic_load_explicit(&p->active, memory_order_relaxed)) return;
    pthread_mutex_lock(&p->mu);
    track_append(track, ev);
    pthread_mutex_unlock(&p->mu);
}

/* ---------------------------------------------------------------- reading */

typedef struct span {
    int64_t a, b;
} span;

static int span_cmp(const void *x, const void *y)
{
    const span *s = x, *t = y;
    return s->a < t->a ? -1 : s->a > t->a ? 1 : 0;
}

/* Sorts and merges spans in place; returns how many remain. */
static long merge_spans(span *s, long n)
{
    if (n == 0) return 0;
    qsort(s, (size_t)n, sizeof(*s), span_cmp);
    long m = 0;
    for (long i = 1; i < n; i++) {
        if (s[i].a <= s[m].b) {
            if (s[i].b > s[m].b) s[m].b = s[i].b;
        } else {
            s[++m] = s[i];
        }
    }
    return m + 1;
}

static const prof_event *track_event(const mx_profile_track *t, long i)
{
    return &t->chunks[i / CHUNK_EVENTS][i % CHUNK_EVENTS];
}

/* Snapshot of the tracks: the list head (tracks are only prepended) and
 * each count read once, so what is read stays consistent. */
static mx_profile_track *tracks_head(mx_profiler *p)
{
    pthread_mutex_lock(&p->mu);
    mx_profile_track *t = p->tracks;
    pthread_mutex_unlock(&p->mu);
    return t;
}

mx_status mx_profiler_summary(mx_profiler *p, mx_profile_summary *out)
{
    memset(out, 0, sizeof(*out));
    mx_profile_track *head = tracks_head(p);
    long n_comm = 0, n_work = 0;
    for (mx_profile_track *t = head; t; t = t->next) {
        long n = atomic_load_explicit(&t->count, memory_order_acquire);
        out->events += n;
        out->dropped += atomic_load(&t->dropped);
        for (long i = 0; i < n; i++) {
            int cat = track_event(t, i)->cat;
            if (cat == MX_PROFILE_COMM) n_comm++;
            else if (cat == MX_PROFILE_COMPUTE || cat == MX_PROFILE_COPY) n_work++;
        }
    }
    span *comm = mx_malloc(sizeof(span) * (size_t)(n_comm + 1));
    span *work = mx_malloc(sizeof(span) * (size_t)(n_work + 1));
    if (!comm || !work) {
        free(comm);
        free(work);
        return MX_ERR_NOMEM;
    }
    long nc = 0, nw = 0;
    for (mx_profile_track *t = head; t; t = t->next) {
        long n = atomic_load_explicit(&t->count, memory_order_acquire);
        for (long i = 0; i < n; i++) {
            const prof_event *e = track_event(t, i);
            if (e->cat == MX_PROFILE_COMM && nc < n_comm) comm[nc++] = (span){e->start_ns, e->end_ns};
            else if ((e->cat == MX_PROFILE_COMPUTE || e->cat == MX_PROFILE_COPY) && nw < n_work)
                work[nw++] = (span){e->start_ns, e->end_ns};
        }
    }
    nc = merge_spans(comm, nc);
    nw = merge_spans(work, nw);
    /* Both lists are sorted and disjoint: one sweep intersects them. */
    long j = 0;
    for (long i = 0; i < nc; i++) {
        out->comm_ns += comm[i].b - comm[i].a;
        while (j < nw && work[j].b <= comm[i].a) j++;
        for (long k = j; k < nw && work[k].a < comm[i].b; k++) {
            int64_t a = work[k].a > comm[i].a ? work[k].a : comm[i].a;
            int64_t b = work[k].b < comm[i].b ? work[k].b : comm[i].b;
            if (b > a) out->overlap_ns += b - a;
        }
    }
    free(comm);
    free(work);
    return MX_OK;
}

static const char *const cat_names[MX_PROFILE_CAT_COUNT] = {"compute", "copy", "io", "comm"};

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static int event_cmp(const void *x, const void *y)
{
    const prof_event *a = *(const prof_event *const *)x, *b = *(const prof_event *const *)y;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
    return a->end_ns < b->end_ns ? -1 : a->end_ns > b->end_ns ? 1 : 0;
}

mx_status mx_profiler_write(mx_profiler *p, const char *path)
{
    size_t len = strlen(path);
    char *tmp = mx_malloc(len + 16);
    if (!tmp) return MX_ERR_NOMEM;
    snprintf(tmp, len + 16, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        mx_status s = MX_ERROR(MX_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        free(tmp);
        return s;
    }
    mx_status st = MX_OK;
    fprintf(f, "{\"traceEvents\": [\n");
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": ", p->pid);
    json_string(f, p->process_name);
    fprintf(f, "}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": "
               "{\"sort_index\": %d}}",
            p->pid, p->pid);
    mx_profile_track *head = tracks_head(p);
    for (mx_profile_track *t = head; t; t = t->next) {
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ",
                p->pid, t->tid);
        json_string(f, t->name);
        fprintf(f, "}},\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": "
                   "{\"sort_index\": %d}}",
                p->pid, t->tid, t->tid);
    }
    for (mx_profile_track *t = head; t && st == MX_OK; t = t->next) {
        long n = atomic_load_explicit(&t->count, memory_order_acquire);
        if (n == 0) continue;
        /* In start order (events are recorded when they end). */
        const prof_event **order = mx_malloc(sizeof(*order) * (size_t)n);
        if (!order) {
            st = MX_ERR_NOMEM;
            break;
        }
        for (long i = 0; i < n; i++) order[i] = track_event(t, i);
        qsort(order, (size_t)n, sizeof(*order), event_cmp);
        for (long i = 0; i < n; i++) {
            const prof_event *e = order[i];
            fprintf(f, ",\n{\"name\": ");
            json_string(f, e->name);
            fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, \"tid\": %d",
                    cat_names[e->cat], (double)e->start_ns / 1e3, (double)(e->end_ns - e->start_ns) / 1e3, p->pid,
                    t->tid);
            if (e->bytes > 0) fprintf(f, ", \"args\": {\"bytes\": %lld}", (long long)e->bytes);
            fputc('}', f);
        }
        free(order);
    }
    fprintf(f, "\n],\n\"displayTimeUnit\": \"ms\"}\n");
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0) bad = true;
    if (st == MX_OK && bad) st = MX_ERROR(MX_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    if (st == MX_OK && rename(tmp, path) != 0)
        st = MX_ERROR(MX_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (st != MX_OK) remove(tmp);
    free(tmp);
    return st;
}
