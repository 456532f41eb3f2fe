/*
 * comm.c - the communication thread and its FIFO of collective requests
 * (see comm.h for the contract).
 *
 * Threads: the communication thread is the only one that calls MPI. Other
 * threads append requests to a queue under `mu` and wake it with `wake`;
 * it takes the head, starts it as a non-blocking collective and polls
 * MPI_Test until it completes (large buffers: one piece after the other),
 * then calls its callback and takes the next. While a request is in flight
 * and between requests (every IDLE_POLL_S) it also answers progress queries
 * on the side communicator, which is how a stalled rank learns who is
 * behind. Topology fields are written by the thread before mx_comm_create
 * returns (published under `mu`) and are read-only afterwards; the fields
 * marked "thread only" are never touched by other threads.
 */
#include "comm/comm.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define HOSTNAME_MAX 64
#define MESSAGE_MAX 1024
#define TAG_QUERY 1
#define TAG_REPLY 2
#define IDLE_POLL_S 0.01      /* an idle thread answers queries this often */
#define REPLY_TIMEOUT_S 1.0   /* how long a stalled rank waits for answers */
#define ABORT_HANDOFF_S 1.0   /* how long mx_comm_abort waits for the thread */
#define SPIN_S 0.0001         /* poll without sleeping this long, then back off */
#define MAX_POLL_SLEEP_S 0.001
#define MAX_LISTED_RANKS 8    /* ranks named in one message */
#define REPLY_LEN 5           /* started, completed, active group, its number, failed */
#define TAG_CALL 1            /* on the calls' communicator */
#define TAG_ANSWER 2

/* Checked MPI call inside a function returning mx_status: a failure becomes
 * MX_ERR_RUNTIME "MPI_Xxx failed: <MPI's error string>". */
#define MPI_CHECK(call)                                                                    \
    do {                                                                                   \
        int mpi_rc_ = (call);                                                              \
        if (mpi_rc_ != MPI_SUCCESS) return mpi_error(mpi_rc_, #call, __FILE__, __LINE__); \
    } while (0)

static mx_status mpi_error(int rc, const char *call, const char *file, int line)
{
    char what[64];
    size_t n = strcspn(call, "(");
    if (n >= sizeof(what)) n = sizeof(what) - 1;
    memcpy(what, call, n);
    what[n] = '\0';
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof(text), "MPI error code %d", rc);
    return mx_error_set(MX_ERR_RUNTIME, file, line, "%s failed: %s", what, text);
}

/* ---------------------------------------------------------------- tables */

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    [MX_COMM_FLOAT32] = {"float32", 4},
    [MX_COMM_FLOAT64] = {"float64", 8},
    [MX_COMM_INT32] = {"int32", 4},
    [MX_COMM_INT64] = {"int64", 8},
    [MX_COMM_BYTE] = {"byte", 1},
};
_Static_assert(sizeof(dtype_table) / sizeof(dtype_table[0]) == MX_COMM_DTYPE_COUNT, "one row per mx_comm_dtype");

static const char *const group_names[] = {
    [MX_COMM_WORLD] = "world",
    [MX_COMM_LOCAL] = "local",
    [MX_COMM_LEADERS] = "leaders",
};
_Static_assert(sizeof(group_names) / sizeof(group_names[0]) == MX_COMM_GROUP_COUNT, "one name per mx_comm_group");

/* Open MPI's predefined handles are not constant expressions everywhere. */
static MPI_Datatype mpi_dtype(mx_comm_dtype dtype)
{
    switch (dtype) {
    case MX_COMM_FLOAT32: return MPI_FLOAT;
    case MX_COMM_FLOAT64: return MPI_DOUBLE;
    case MX_COMM_INT32: return MPI_INT32_T;
    case MX_COMM_INT64: return MPI_INT64_T;
    default: return MPI_BYTE;
    }
}

const char *mx_comm_dtype_name(mx_comm_dtype dtype)
{
    return (unsigned)dtype < MX_COMM_DTYPE_COUNT ? dtype_table[dtype].name : "unknown dtype";
}

size_t mx_comm_dtype_size(mx_comm_dtype dtype)
{
    return (unsigned)dtype < MX_COMM_DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

const char *mx_comm_group_name(mx_comm_group group)
{
    return (unsigned)group < MX_COMM_GROUP_COUNT ? group_names[group] : "unknown group";
}

/* ------------------------------------------------------------ structures */

typedef struct rank_info { /* gathered from every rank at start, as bytes */
    char host[HOSTNAME_MAX];
    int32_t host_index;
    int32_t local_rank;
} rank_info;

typedef struct comm_req {
    mx_comm_request r;
    char *name;         /* owned copy of r.name, or NULL */
    uint64_t seq;       /* 1-based submission number (all groups) */
    int64_t group_seq;  /* its number among the collectives started on its group */
    size_t offset;      /* elements done (allreduce, broadcast run in pieces) */
    size_t piece;       /* elements of the piece in flight */
    bool in_mpi;        /* an MPI request is outstanding */
    double t_piece;     /* when the piece in flight started */
    int64_t t_start_ns; /* when its first piece started (the timeline) */
    MPI_Request mpi;
    struct comm_req *next;
} comm_req;

/* Calls: every message starts with this header. */
typedef struct wire_header {
    uint64_t id;     /* the call's number on its caller */
    int32_t service; /* a call's service */
    int32_t status;  /* an answer's: MX_OK, or a failure followed by its message */
} wire_header;

/* An outgoing message (a call or an answer) and, for a call, its wait. */
typedef struct p2p_msg {
    void *buf;              /* header + payload */
    size_t bytes;
    int peer, tag;
    uint64_t id;
    MPI_Request mpi;
    double t0;              /* sent at */
    int64_t t_start_ns;     /* sent at, for the timeline (0: not profiled) */
    /* calls */
    char *name;
    mx_comm_reply_fn done;
    void *user;
    bool answered;
    bool in_send;           /* MPI_Isend in flight (in `sending`) */
    struct p2p_msg *next;   /* the outbox, or `sending` */
    struct p2p_msg *next_wait; /* `waiting` */
} p2p_msg;

/* An incoming message being received, or held for a service without a handler. */
typedef struct p2p_in {
    void *buf;
    size_t bytes;
    int source, tag;
    MPI_Request mpi;
    struct p2p_in *next;
} p2p_in;

enum { PHASE_STARTING, PHASE_RUNNING, PHASE_FINISHED };

struct mx_comm {
    mx_comm_config cfg;

    /* Topology: written by the thread before create returns, then read-only. */
    int rank, size, local_rank, local_size, host, n_hosts;
    rank_info *ranks;                          /* [size] */
    int *members[MX_COMM_GROUP_COUNT];         /* world ranks of this rank's groups */
    int n_members[MX_COMM_GROUP_COUNT];
    int group_rank[MX_COMM_GROUP_COUNT];
    pthread_t self;                            /* the communication thread */

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_mutex_t serve_mu; /* held while a service's handler runs */
    pthread_cond_t wake;    /* to the thread: a request, shutdown or abort */
    pthread_cond_t changed; /* from the thread: started or finished */
    /* guarded by mu */
    comm_req *head, *tail;
    uint64_t submitted;
    bool shutting_down;
    bool abort_requested;
    bool abort_taken;       /* the thread is inside MPI_Abort */
    int abort_code;
    int phase;
    double finalize_since;  /* when MPI_Finalize was called (0: not yet) */
    mx_error_state result;  /* a start-up failure, or how the thread ended */
    p2p_msg *outbox, *outbox_tail; /* calls and answers not started yet */
    uint64_t next_call_id;
    struct {
        mx_comm_serve_fn fn;
        void *user;
    } services[MX_COMM_MAX_SERVICES];

    /* thread only */
    MPI_Comm comms[MX_COMM_GROUP_COUNT];
    MPI_Comm side;          /* progress queries (a dup of MPI_COMM_WORLD) */
    bool side_broken;       /* stop answering after a failure there */
    int64_t started[MX_COMM_GROUP_COUNT], completed[MX_COMM_GROUP_COUNT];
    comm_req *active;
    mx_status failed;       /* the first failure; MX_OK while healthy */
    char failed_message[MESSAGE_MAX];
    int32_t query_group[MX_COMM_GROUP_COUNT]; /* constant query payloads */
    _Atomic(mx_profiler *) profiler;          /* the timeline; NULL: off */
    MPI_Comm p2p;           /* calls and answers */
    p2p_msg *sending;       /* started, MPI_Isend not complete */
    p2p_msg *waiting;       /* calls sent, no answer yet (buffers freed) */
    p2p_in *receiving;      /* MPI_Imrecv in flight */
    p2p_in *held;           /* calls for a service without a handler */
    double p2p_last;        /* when a message last moved */
};

static bool on_comm_thread(const mx_comm *c)
{
    return pthread_equal(pthread_self(), c->self);
}

static void sleep_seconds(double s)
{
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Absolute CLOCK_REALTIME deadline `s` seconds ahead, for timed waits. */
static struct timespec deadline_in(double s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double whole = floor(s);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((s - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static size_t append(char *buf, size_t size, size_t len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Appends to buf (size bytes) holding len chars, truncating; returns the new length. */
static size_t append(char *buf, size_t size, size_t len, const char *fmt, ...)
{
    if (len >= size) return len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
    if (n < 0) return len;
    return len + (size_t)n < size ? len + (size_t)n : size - 1;
}

const char *mx_comm_rank_str(const mx_comm *c, int rank, char *buf, size_t size)
{
    if (!c || rank < 0 || rank >= c->size) snprintf(buf, size, "rank %d", rank);
    else snprintf(buf, size, "rank %d on %s (host %d)", rank, c->ranks[rank].host, c->ranks[rank].host_index);
    return buf;
}

/* "allreduce of key 3 (fc1_weight) on world (1024 float32)" */
static void describe(const comm_req *q, char *buf, size_t size)
{
    char fallback[40];
    snprintf(fallback, sizeof(fallback), "request %llu", (unsigned long long)q->seq);
    const char *name = q->name ? q->name : fallback;
    const char *op = mx_comm_op_name(q->r.op), *group = mx_comm_group_name(q->r.group);
    const char *dtype = mx_comm_dtype_name(q->r.dtype);
    switch (q->r.op) {
    case MX_COMM_BARRIER: snprintf(buf, size, "%s of %s on %s", op, name, group); break;
    case MX_COMM_BROADCAST:
        snprintf(buf, size, "%s of %s on %s (%zu %s from group rank %d)", op, name, group, q->r.count, dtype,
                 q->r.root);
        break;
    case MX_COMM_ALLGATHER:
        snprintf(buf, size, "%s of %s on %s (%zu %s per rank)", op, name, group, q->r.count, dtype);
        break;
    default: snprintf(buf, size, "%s of %s on %s (%zu %s)", op, name, group, q->r.count, dtype); break;
    }
}

/* --------------------------------------------------------- the operations */

typedef mx_status (*start_fn)(mx_comm *c, comm_req *q);

static char *piece_ptr(comm_req *q)
{
    return (char *)q->r.buf + q->offset * mx_comm_dtype_size(q->r.dtype);
}

/* The next piece of an allreduce or broadcast: what is left, at most
 * max_message_bytes (and INT_MAX elements). */
static int next_piece(const mx_comm *c, comm_req *q)
{
    size_t max = c->cfg.max_message_bytes / mx_comm_dtype_size(q->r.dtype);
    if (max < 1) max = 1;
    if (max > INT_MAX) max = INT_MAX;
    size_t left = q->r.count - q->offset;
    q->piece = left < max ? left : max;
    return (int)q->piece;
}

static mx_status start_allreduce(mx_comm *c, comm_req *q)
{
    int n = next_piece(c, q);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, piece_ptr(q), n, mpi_dtype(q->r.dtype), MPI_SUM, c->comms[q->r.group],
                             &q->mpi));
    return MX_OK;
}

static mx_status start_broadcast(mx_comm *c, comm_req *q)
{
    int n = next_piece(c, q);
    MPI_CHECK(MPI_Ibcast(piece_ptr(q), n, mpi_dtype(q->r.dtype), q->r.root, c->comms[q->r.group], &q->mpi));
    return MX_OK;
}

static mx_status start_allgather(mx_comm *c, comm_req *q)
{
    q->piece = q->r.count; /* checked at submit to fit one message */
    MPI_Datatype t = mpi_dtype(q->r.dtype);
    MPI_CHECK(MPI_Iallgather(q->r.send, (int)q->r.count, t, q->r.buf, (int)q->r.count, t, c->comms[q->r.group],
                             &q->mpi));
    return MX_OK;
}

static mx_status start_barrier(mx_comm *c, comm_req *q)
{
    q->piece = q->r.count;
    MPI_CHECK(MPI_Ibarrier(c->comms[q->r.group], &q->mpi));
    return MX_OK;
}

static const struct {
    const char *name;
    start_fn start;
} op_table[] = {
    [MX_COMM_ALLREDUCE_SUM] = {"allreduce", start_allreduce},
    [MX_COMM_BROADCAST] = {"broadcast", start_broadcast},
    [MX_COMM_ALLGATHER] = {"allgather", start_allgather},
    [MX_COMM_BARRIER] = {"barrier", start_barrier},
};
_Static_assert(sizeof(op_table) / sizeof(op_table[0]) == MX_COMM_OP_COUNT, "one row per mx_comm_op");

const char *mx_comm_op_name(mx_comm_op op)
{
    return (unsigned)op < MX_COMM_OP_COUNT ? op_table[op].name : "unknown op";
}

/* ------------------------------------------------------ the side channel */

/* Answers every pending progress query: a query names a group, the answer
 * says how far this rank is on it. */
static void serve_queries(mx_comm *c)
{
    while (!c->side_broken) {
        int flag = 0, rc;
        MPI_Status st;
        int32_t group = 0;
        rc = MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, c->side, &flag, &st);
        if (rc == MPI_SUCCESS && !flag) return;
        if (rc == MPI_SUCCESS)
            rc = MPI_Recv(&group, 1, MPI_INT32_T, st.MPI_SOURCE, TAG_QUERY, c->side, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS) {
            int g = group >= 0 && group < MX_COMM_GROUP_COUNT ? group : MX_COMM_WORLD;
            const comm_req *a = c->active;
            int64_t reply[REPLY_LEN] = {c->started[g], c->completed[g], a && a->in_mpi ? (int64_t)a->r.group : -1,
                                        a && a->in_mpi ? a->group_seq : 0, c->failed != MX_OK};
            rc = MPI_Send(reply, REPLY_LEN, MPI_INT64_T, st.MPI_SOURCE, TAG_REPLY, c->side);
        }
        if (rc != MPI_SUCCESS) c->side_broken = true; /* nothing else depends on it */
    }
}

/* Asks every other member of the stalled request's group how many
 * collectives it has started there, and writes who is behind or silent. */
static void diagnose(mx_comm *c, const comm_req *q, char *out, size_t size)
{
    int g = q->r.group, n = c->n_members[g];
    MPI_Request *sreq = calloc((size_t)n, sizeof(*sreq)), *rreq = calloc((size_t)n, sizeof(*rreq));
    int64_t(*reply)[REPLY_LEN] = calloc((size_t)n, sizeof(*reply));
    bool *answered = calloc((size_t)n, sizeof(*answered));
    size_t len = strlen(out);
    if (!sreq || !rreq || !reply || !answered || c->side_broken) {
        append(out, size, len, "; could not ask the other ranks how far they are");
        goto done;
    }
    int pending = 0;
    for (int i = 0; i < n; i++) {
        sreq[i] = rreq[i] = MPI_REQUEST_NULL;
        int m = c->members[g][i];
        if (m == c->rank) continue;
        if (MPI_Isend(&c->query_group[g], 1, MPI_INT32_T, m, TAG_QUERY, c->side, &sreq[i]) != MPI_SUCCESS ||
            MPI_Irecv(reply[i], REPLY_LEN, MPI_INT64_T, m, TAG_REPLY, c->side, &rreq[i]) != MPI_SUCCESS)
            continue; /* counted as not answering */
        pending++;
    }
    double wait = REPLY_TIMEOUT_S, t0 = mx_time_seconds();
    while (pending > 0 && mx_time_seconds() - t0 < wait) {
        for (int i = 0; i < n; i++) {
            int flag = 0;
            if (rreq[i] == MPI_REQUEST_NULL || answered[i]) continue;
            if (MPI_Test(&rreq[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                rreq[i] = MPI_REQUEST_NULL;
                pending--;
            } else if (flag) {
                answered[i] = true;
                pending--;
            }
        }
        serve_queries(c); /* the others may be asking us at the same time */
        sleep_seconds(0.0005);
    }
    /* Withdraw what is left; a failure here only ends the side channel
     * (the comm has failed anyway, this is its one diagnosis). */
    for (int i = 0; i < n; i++) {
        if (rreq[i] != MPI_REQUEST_NULL && !answered[i] &&
            (MPI_Cancel(&rreq[i]) != MPI_SUCCESS || MPI_Wait(&rreq[i], MPI_STATUS_IGNORE) != MPI_SUCCESS))
            c->side_broken = true;
        int flag = 0;
        if (sreq[i] != MPI_REQUEST_NULL && (MPI_Test(&sreq[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) &&
            MPI_Request_free(&sreq[i]) != MPI_SUCCESS) /* its payload lives in the comm */
            c->side_broken = true;
    }

    char who[160];
    int behind = 0, silent = 0;
    for (int i = 0; i < n; i++) {
        int m = c->members[g][i];
        if (m == c->rank) continue;
        if (answered[i] && reply[i][0] >= q->group_seq) continue;
        int listed = behind + silent;
        if (answered[i]) behind++;
        else silent++;
        if (listed == MAX_LISTED_RANKS) len = append(out, size, len, ", ...");
        if (listed >= MAX_LISTED_RANKS) continue;
        len = append(out, size, len, listed == 0 ? "; " : ", ");
        mx_comm_rank_str(c, m, who, sizeof(who));
        if (!answered[i]) {
            len = append(out, size, len, "%s did not answer within %.1f s (stopped, gone or stuck in MPI)", who,
                         wait);
            continue;
        }
        len = append(out, size, len, "%s is behind: it has started %lld of them (", who, (long long)reply[i][0]);
        if (reply[i][4]) len = append(out, size, len, "failed");
        else if (reply[i][2] < 0) len = append(out, size, len, "idle");
        else
            len = append(out, size, len, "in collective %lld on %s", (long long)reply[i][3],
                         mx_comm_group_name((mx_comm_group)reply[i][2]));
        len = append(out, size, len, ")");
    }
    if (behind + silent > MAX_LISTED_RANKS)
        len = append(out, size, len, " (%d ranks behind, %d not answering)", behind, silent);
    if (behind + silent == 0)
        append(out, size, len, "; every other rank of the group has started it (so a rank issued a different "
                               "collective in its place, or the network is failing)");
done:
    free(sreq);
    free(rreq);
    free(reply);
    free(answered);
}

/* --------------------------------------------------------- request flow */

static void comm_track_name(void *user, char *buf, size_t size)
{
    const mx_comm *c = user;
    snprintf(buf, size, "MPI thread (rank %d)", c->rank);
}

/* Before the callback, so that a caller woken by it may detach the
 * profiler. */
static void profile_request(mx_comm *c, const comm_req *q)
{
    mx_profiler *p = atomic_load_explicit(&c->profiler, memory_order_acquire);
    if (!p || !q->t_start_ns) return;
    char what[MESSAGE_MAX / 2];
    describe(q, what, sizeof(what));
    mx_profile_event ev = {.name = what, .cat = MX_PROFILE_COMM, .start_ns = q->t_start_ns,
                           .end_ns = mx_profile_now_ns(),
                           .bytes = (int64_t)(q->r.count * mx_comm_dtype_size(q->r.dtype))};
    mx_profiler_record(p, &ev, comm_track_name, c);
}

void mx_comm_set_profiler(mx_comm *c, mx_profiler *p) { atomic_store(&c->profiler, p); }

mx_profiler *mx_comm_profiler(mx_comm *c) { return atomic_load_explicit(&c->profiler, memory_order_acquire); }

/* A call, from the start of its send to its answer, before the caller's
 * done (as profile_request). Calls overlap one another and the collectives,
 * so they get a track of their own, shared (Chrome draws overlapping
 * events of one track stacked). The bytes are both ways, headers aside. */
static void profile_call(mx_comm *c, const p2p_msg *m, size_t answer_bytes)
{
    mx_profiler *p = atomic_load_explicit(&c->profiler, memory_order_acquire);
    if (!p || !m->t_start_ns || !mx_profiler_active(p)) return;
    char what[MESSAGE_MAX / 2], track[64];
    snprintf(what, sizeof(what), "call %s to rank %d", m->name ? m->name : "", m->peer);
    snprintf(track, sizeof(track), "MPI calls (rank %d)", c->rank);
    mx_profile_event ev = {.name = what, .cat = MX_PROFILE_COMM, .start_ns = m->t_start_ns,
                           .end_ns = mx_profile_now_ns(),
                           .bytes = (int64_t)(m->bytes - sizeof(wire_header) + answer_bytes)};
    mx_profile_track *t = mx_profiler_shared_track(p, track);
    if (t) mx_profiler_record_on(p, t, &ev);
}

static void complete(mx_comm *c, comm_req *q, mx_status status, const char *message)
{
    c->active = NULL;
    if (status == MX_OK) profile_request(c, q);
    if (q->r.done) q->r.done(q->r.user, status, message ? message : "");
    mx_free(q->name);
    mx_free(q);
}

static void fail_comm(mx_comm *c, mx_status status, const char *message)
{
    if (c->failed != MX_OK) return;
    c->failed = status;
    snprintf(c->failed_message, sizeof(c->failed_message), "%s", message);
}

/* The first failure fails the comm: a rank that skipped a collective would
 * leave the others waiting in it, and MPI still owns the buffer. */
static void fail(mx_comm *c, comm_req *q, mx_status status, const char *message)
{
    fail_comm(c, status, message);
    complete(c, q, status, message);
}

/* ------------------------------------------------------------------ calls */

static void p2p_msg_free(p2p_msg *m)
{
    if (!m) return;
    mx_free(m->buf);
    mx_free(m->name);
    mx_free(m);
}

static void p2p_in_free(p2p_in *in)
{
    if (!in) return;
    mx_free(in->buf);
    mx_free(in);
}

/* A call's result: its done, once. The record is freed once its send has
 * completed too (an answer can arrive first: calls to this rank). */
static void call_end(mx_comm *c, p2p_msg *m, mx_status status, const char *message, const void *data, size_t bytes)
{
    c->p2p_last = mx_time_seconds();
    m->answered = true;
    if (status == MX_OK) profile_call(c, m, bytes);
    m->done(m->user, status, message ? message : "", data, bytes);
    if (!m->in_send) p2p_msg_free(m);
}

/* After a failure of the comm: every call waiting for an answer fails with
 * its message, and messages not sent yet are dropped. */
static void p2p_fail_all(mx_comm *c)
{
    char msg[MESSAGE_MAX];
    while (c->waiting) {
        p2p_msg *m = c->waiting;
        c->waiting = m->next_wait;
        append(msg, sizeof(msg), 0, "%s was not answered: the communication failed: %s", m->name ? m->name : "a call",
               c->failed_message);
        call_end(c, m, c->failed, msg, NULL, 0);
    }
    pthread_mutex_lock(&c->mu);
    p2p_msg *fresh = c->outbox;
    c->outbox = c->outbox_tail = NULL;
    pthread_mutex_unlock(&c->mu);
    while (fresh) {
        p2p_msg *m = fresh;
        fresh = m->next;
        if (m->done) {
            append(msg, sizeof(msg), 0, "%s was not sent: the communication failed earlier: %s",
                   m->name ? m->name : "a call", c->failed_message);
            call_end(c, m, c->failed, msg, NULL, 0);
        } else {
            p2p_msg_free(m);
        }
    }
}

static void p2p_fail(mx_comm *c, mx_status status, const char *message)
{
    fail_comm(c, status, message);
    p2p_fail_all(c);
}

/* Asks `rank` on the side channel whether it is alive, for the message of
 * a call it did not answer. */
static void p2p_diagnose(mx_comm *c, int rank, char *out, size_t size)
{
    size_t len = strlen(out);
    char who[160];
    mx_comm_rank_str(c, rank, who, sizeof(who));
    if (rank == c->rank) {
        append(out, size, len, "; %s is this rank: its service is stuck or overloaded", who);
        return;
    }
    if (c->side_broken) {
        append(out, size, len, "; could not ask %s whether it is alive", who);
        return;
    }
    MPI_Request sreq = MPI_REQUEST_NULL, rreq = MPI_REQUEST_NULL;
    int64_t reply[REPLY_LEN];
    bool answered = false;
    if (MPI_Isend(&c->query_group[MX_COMM_WORLD], 1, MPI_INT32_T, rank, TAG_QUERY, c->side, &sreq) == MPI_SUCCESS &&
        MPI_Irecv(reply, REPLY_LEN, MPI_INT64_T, rank, TAG_REPLY, c->side, &rreq) == MPI_SUCCESS) {
        double t0 = mx_time_seconds();
        while (!answered && mx_time_seconds() - t0 < REPLY_TIMEOUT_S) {
            int flag = 0;
            if (MPI_Test(&rreq, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
            answered = flag;
            serve_queries(c);
            sleep_seconds(0.0005);
        }
    }
    if (rreq != MPI_REQUEST_NULL && !answered &&
        (MPI_Cancel(&rreq) != MPI_SUCCESS || MPI_Wait(&rreq, MPI_STATUS_IGNORE) != MPI_SUCCESS))
        c->side_broken = true;
    int flag = 0;
    if (sreq != MPI_REQUEST_NULL && (MPI_Test(&sreq, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) &&
        MPI_Request_free(&sreq) != MPI_SUCCESS)
        c->side_broken = true;
    if (answered)
        append(out, size, len, "; %s answers the side channel (it is alive: its service is stuck or overloaded)", who);
    else
        append(out, size, len, "; %s did not answer within %.1f s (stopped, gone or stuck in MPI)", who,
               REPLY_TIMEOUT_S);
}

/* Starts sending m (a call or an answer). */
static void p2p_start(mx_comm *c, p2p_msg *m)
{
    m->t0 = mx_time_seconds();
    mx_profiler *p = m->done ? atomic_load_explicit(&c->profiler, memory_order_acquire) : NULL;
    if (p && mx_profiler_active(p)) m->t_start_ns = mx_profile_now_ns();
    int rc = MPI_Isend(m->buf, (int)m->bytes, MPI_BYTE, m->peer, m->tag, c->p2p, &m->mpi);
    if (rc != MPI_SUCCESS) {
        char msg[MESSAGE_MAX];
        mpi_error(rc, "MPI_Isend", __FILE__, __LINE__);
        append(msg, sizeof(msg), 0, "%s to rank %d: %s", m->name ? m->name : "an answer", m->peer, mx_last_error());
        if (m->done) call_end(c, m, MX_ERR_RUNTIME, msg, NULL, 0);
        else p2p_msg_free(m);
        p2p_fail(c, MX_ERR_RUNTIME, msg);
        return;
    }
    m->in_send = true;
    m->next = c->sending;
    c->sending = m;
    if (m->done) {
        m->next_wait = NULL;
        p2p_msg **tail = &c->waiting;
        while (*tail) tail = &(*tail)->next_wait;
        *tail = m;
    }
}

/* Hands a received message to its call (an answer) or its service. Returns
 * false when the service has no handler yet (the caller holds it). */
static bool p2p_deliver(mx_comm *c, p2p_in *in)
{
    c->p2p_last = mx_time_seconds();
    wire_header h;
    if (in->bytes < sizeof(h)) { /* not ours: dropped */
        p2p_in_free(in);
        return true;
    }
    memcpy(&h, in->buf, sizeof(h));
    size_t n = in->bytes - sizeof(h);
    char *payload = (char *)in->buf + sizeof(h);
    if (in->tag == TAG_ANSWER) {
        p2p_msg **pp = &c->waiting;
        while (*pp && !((*pp)->id == h.id && (*pp)->peer == in->source)) pp = &(*pp)->next_wait;
        p2p_msg *m = *pp;
        if (m) { /* else it failed already */
            *pp = m->next_wait;
            if (h.status == MX_OK) {
                call_end(c, m, MX_OK, "", payload, n);
            } else {
                char msg[MESSAGE_MAX];
                size_t k = n < sizeof(msg) - 1 ? n : sizeof(msg) - 1;
                memcpy(msg, payload, k);
                msg[k] = '\0';
                call_end(c, m, h.status, msg, NULL, 0);
            }
        }
        p2p_in_free(in);
        return true;
    }
    if (h.service < 0 || h.service >= MX_COMM_MAX_SERVICES) {
        p2p_in_free(in);
        return true;
    }
    /* Under serve_mu, so that a handler is never called after
     * mx_comm_serve has removed it. */
    pthread_mutex_lock(&c->serve_mu);
    pthread_mutex_lock(&c->mu);
    mx_comm_serve_fn fn = c->services[h.service].fn;
    void *user = c->services[h.service].user;
    pthread_mutex_unlock(&c->mu);
    if (!fn) {
        pthread_mutex_unlock(&c->serve_mu);
        return false;
    }
    memmove(in->buf, payload, n);
    void *data = in->buf;
    int source = in->source;
    mx_free(in);
    fn(user, source, h.id, data, n);
    pthread_mutex_unlock(&c->serve_mu);
    return true;
}

/* Whether calls or a service keep the thread polling for messages. */
static bool p2p_busy(mx_comm *c)
{
    if (c->sending || c->waiting || c->receiving || c->held) return true;
    pthread_mutex_lock(&c->mu);
    bool busy = c->outbox != NULL;
    for (int i = 0; i < MX_COMM_MAX_SERVICES && !busy; i++) busy = c->services[i].fn != NULL;
    pthread_mutex_unlock(&c->mu);
    return busy;
}

/* Whether every call and answer has been sent and answered (shutdown). */
static bool p2p_idle(mx_comm *c)
{
    if (c->failed != MX_OK) return c->outbox == NULL; /* MPI keeps what is in flight */
    return !c->outbox && !c->sending && !c->waiting && !c->receiving;
}

/* How long the thread may sleep between polls while calls are about:
 * not at all right after a message moved, then up to 1 ms. */
static double p2p_poll_interval(const mx_comm *c)
{
    double age = mx_time_seconds() - c->p2p_last;
    return age < SPIN_S ? 0 : fmin(MAX_POLL_SLEEP_S, age / 50);
}

/* Moves every call and answer along: starts new ones, completes sends,
 * receives and delivers what arrived (in arrival order), and fails the comm
 * on a call that waited too long. */
static void p2p_progress(mx_comm *c)
{
    if (c->failed != MX_OK) {
        p2p_fail_all(c);
        return;
    }
    char msg[MESSAGE_MAX];
    int rc;
    pthread_mutex_lock(&c->mu);
    p2p_msg *fresh = c->outbox;
    c->outbox = c->outbox_tail = NULL;
    pthread_mutex_unlock(&c->mu);
    while (fresh) {
        p2p_msg *m = fresh;
        fresh = m->next;
        m->next = NULL;
        if (c->failed != MX_OK) { /* an earlier start failed */
            char why[MESSAGE_MAX];
            append(why, sizeof(why), 0, "%s was not sent: the communication failed earlier: %s",
                   m->name ? m->name : "a call", c->failed_message);
            if (m->done) call_end(c, m, c->failed, why, NULL, 0);
            else p2p_msg_free(m);
            continue;
        }
        p2p_start(c, m);
    }
    double now = mx_time_seconds(), limit = c->cfg.stall_timeout_s;
    for (p2p_msg **pp = &c->sending; *pp && c->failed == MX_OK;) {
        p2p_msg *m = *pp;
        int flag = 0;
        if ((rc = MPI_Test(&m->mpi, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
            mpi_error(rc, "MPI_Test", __FILE__, __LINE__);
            append(msg, sizeof(msg), 0, "%s to rank %d: %s", m->name ? m->name : "an answer", m->peer, mx_last_error());
            p2p_fail(c, MX_ERR_RUNTIME, msg);
            return;
        }
        if (!flag) {
            if (limit > 0 && now - m->t0 > limit) {
                char who[160];
                append(msg, sizeof(msg), 0,
                       "sending %s to %s did not complete: waited %.1f s (stall_timeout_s %g)",
                       m->name ? m->name : "an answer", mx_comm_rank_str(c, m->peer, who, sizeof(who)), now - m->t0,
                       limit);
                p2p_diagnose(c, m->peer, msg, sizeof(msg));
                p2p_fail(c, MX_ERR_RUNTIME, msg);
                return;
            }
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        m->in_send = false;
        c->p2p_last = now;
        mx_free(m->buf);
        m->buf = NULL;
        if (!m->done || m->answered) p2p_msg_free(m);
    }
    /* Requests held for a service that has a handler now, oldest first. */
    while (c->held && c->failed == MX_OK) {
        p2p_in *in = c->held;
        c->held = in->next;
        in->next = NULL;
        if (!p2p_deliver(c, in)) {
            in->next = c->held;
            c->held = in;
            break;
        }
    }
    for (;;) {
        int flag = 0, n = 0;
        MPI_Message match;
        MPI_Status st;
        if ((rc = MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->p2p, &flag, &match, &st)) != MPI_SUCCESS ||
            (flag && (rc = MPI_Get_count(&st, MPI_BYTE, &n)) != MPI_SUCCESS)) {
            mpi_error(rc, "MPI_Improbe", __FILE__, __LINE__);
            append(msg, sizeof(msg), 0, "receiving a call or answer: %s", mx_last_error());
            p2p_fail(c, MX_ERR_RUNTIME, msg);
            return;
        }
        if (!flag) break;
        p2p_in *in = mx_calloc(1, sizeof(*in));
        if (in) in->buf = mx_malloc(n > 0 ? (size_t)n : 1);
        if (!in || !in->buf) {
            mx_free(in);
            append(msg, sizeof(msg), 0, "out of memory receiving %d bytes from rank %d", n, st.MPI_SOURCE);
            p2p_fail(c, MX_ERR_NOMEM, msg);
            return;
        }
        in->bytes = (size_t)n;
        in->source = st.MPI_SOURCE;
        in->tag = st.MPI_TAG;
        if ((rc = MPI_Imrecv(in->buf, n, MPI_BYTE, &match, &in->mpi)) != MPI_SUCCESS) {
            mpi_error(rc, "MPI_Imrecv", __FILE__, __LINE__);
            append(msg, sizeof(msg), 0, "receiving %d bytes from rank %d: %s", n, in->source, mx_last_error());
            p2p_fail(c, MX_ERR_RUNTIME, msg);
            return; /* in stays with MPI */
        }
        p2p_in **tail = &c->receiving;
        while (*tail) tail = &(*tail)->next;
        *tail = in;
        c->p2p_last = now;
    }
    /* Delivered in arrival order: stop at the first one still arriving. */
    while (c->receiving && c->failed == MX_OK) {
        p2p_in *in = c->receiving;
        int flag = 0;
        if ((rc = MPI_Test(&in->mpi, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
            mpi_error(rc, "MPI_Test", __FILE__, __LINE__);
            append(msg, sizeof(msg), 0, "receiving %zu bytes from rank %d: %s", in->bytes, in->source, mx_last_error());
            p2p_fail(c, MX_ERR_RUNTIME, msg);
            return;
        }
        if (!flag) break;
        c->receiving = in->next;
        in->next = NULL;
        /* Requests queue behind those already held; answers never wait. */
        if ((in->tag != TAG_ANSWER && c->held) || !p2p_deliver(c, in)) {
            p2p_in **tail = &c->held;
            while (*tail) tail = &(*tail)->next;
            *tail = in;
        }
    }
    for (p2p_msg *m = c->waiting; m && c->failed == MX_OK && limit > 0; m = m->next_wait) {
        if (now - m->t0 <= limit) continue;
        char who[160];
        append(msg, sizeof(msg), 0, "%s got no answer from %s: waited %.1f s (stall_timeout_s %g)",
               m->name ? m->name : "a call", mx_comm_rank_str(c, m->peer, who, sizeof(who)), now - m->t0, limit);
        p2p_diagnose(c, m->peer, msg, sizeof(msg));
        p2p_fail(c, MX_ERR_RUNTIME, msg);
        return;
    }
}

/* One step of the active request: start its next piece, or poll it.
 * Returns true when it is left waiting inside MPI. */
static bool step(mx_comm *c, comm_req *q)
{
    char what[MESSAGE_MAX / 2], msg[MESSAGE_MAX];
    int g = q->r.group;
    if (c->failed != MX_OK) {
        describe(q, what, sizeof(what));
        append(msg, sizeof(msg), 0, "%s was not run: the communication failed earlier: %s", what, c->failed_message);
        complete(c, q, c->failed, msg);
        return false;
    }
    if (!q->in_mpi) {
        if (q->group_seq == 0) q->group_seq = ++c->started[g];
        q->t_piece = mx_time_seconds();
        if (!q->t_start_ns && atomic_load_explicit(&c->profiler, memory_order_acquire))
            q->t_start_ns = mx_profile_now_ns();
        mx_status st = op_table[q->r.op].start(c, q);
        if (st != MX_OK) {
            describe(q, what, sizeof(what));
            append(msg, sizeof(msg), 0, "%s: %s", what, mx_last_error());
            fail(c, q, st, msg);
            return false;
        }
        q->in_mpi = true;
    }
    int flag = 0;
    int rc = MPI_Test(&q->mpi, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        mpi_error(rc, "MPI_Test", __FILE__, __LINE__);
        describe(q, what, sizeof(what));
        append(msg, sizeof(msg), 0, "%s: %s", what, mx_last_error());
        fail(c, q, MX_ERR_RUNTIME, msg);
        return false;
    }
    if (flag) {
        q->in_mpi = false;
        q->offset += q->piece;
        if (q->offset < q->r.count) return false; /* the next piece starts at the next step */
        c->completed[g]++;
        complete(c, q, MX_OK, "");
        return false;
    }
    double waited = mx_time_seconds() - q->t_piece;
    if (c->cfg.stall_timeout_s > 0 && waited > c->cfg.stall_timeout_s) {
        describe(q, what, sizeof(what));
        append(msg, sizeof(msg), 0,
               "%s did not complete: waited %.1f s (stall_timeout_s %g); it is collective %lld on %s here", what,
               waited, c->cfg.stall_timeout_s, (long long)q->group_seq, mx_comm_group_name(q->r.group));
        diagnose(c, q, msg, sizeof(msg));
        fail(c, q, MX_ERR_RUNTIME, msg);
        return false;
    }
    return true;
}

static void thread_loop(mx_comm *c)
{
    for (;;) {
        pthread_mutex_lock(&c->mu);
        if (c->abort_requested) {
            int code = c->abort_code;
            c->abort_requested = false;
            c->abort_taken = true;
            pthread_mutex_unlock(&c->mu);
            MPI_Abort(MPI_COMM_WORLD, code); /* does not return */
            pthread_mutex_lock(&c->mu);
        }
        if (!c->active) {
            if (c->head) {
                c->active = c->head;
                c->head = c->head->next;
                if (!c->head) c->tail = NULL;
            } else if (c->shutting_down && p2p_idle(c)) {
                pthread_mutex_unlock(&c->mu);
                return;
            } else {
                pthread_mutex_unlock(&c->mu);
                /* Calls arrive unannounced: poll for them often while any
                 * are about (a service, or calls in flight). */
                double wait = p2p_busy(c) ? p2p_poll_interval(c) : IDLE_POLL_S;
                pthread_mutex_lock(&c->mu);
                if (wait > 0 && !c->head && !c->abort_requested && !c->outbox) {
                    struct timespec ts = deadline_in(wait);
                    pthread_cond_timedwait(&c->wake, &c->mu, &ts);
                }
                pthread_mutex_unlock(&c->mu);
                if (wait <= 0) sched_yield();
                serve_queries(c);
                p2p_progress(c);
                continue;
            }
        }
        pthread_mutex_unlock(&c->mu);

        comm_req *q = c->active;
        bool waiting = step(c, q);
        serve_queries(c);
        p2p_progress(c);
        if (waiting) {
            /* Spin while a collective is young (as MPI's blocking calls do,
             * yielding to other threads), then poll less often: at most 1 ms
             * and about 2% of the time waited so far (less while calls
             * move). The spin is short: the ranks share the host's cores
             * with their compute threads, and 2 ms of spinning per bucket
             * took cores from the rank still computing (LeNet, 2 ranks on 2
             * cores, 4 alternating pairs: 1.2-2.3x the samples/s at 100 us,
             * while a loop of 1.7 MB allreduces alone got 5% slower). */
            double age = mx_time_seconds() - q->t_piece;
            double nap = fmin(MAX_POLL_SLEEP_S, age / 50);
            if (p2p_busy(c)) nap = fmin(nap, p2p_poll_interval(c));
            if (age < SPIN_S || nap <= 0) sched_yield();
            else sleep_seconds(nap);
        }
    }
}

/* ------------------------------------------------------------ start, end */

static const char *thread_level_name(int level)
{
    if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
    if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
    if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
    if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
    return "an unknown level";
}

static mx_status thread_start(mx_comm *c)
{
    int initialized = 0, finalized = 0, provided = 0;
    MPI_CHECK(MPI_Initialized(&initialized));
    MPI_CHECK(MPI_Finalized(&finalized));
    if (initialized || finalized)
        return MX_ERROR(MX_ERR_INVALID, "MPI was already %s in this process (one mx_comm per process)",
                        finalized ? "finalized" : "initialized");
    MPI_CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (provided < MPI_THREAD_FUNNELED)
        return MX_ERROR(MX_ERR_UNSUPPORTED,
                        "MPI provides only %s; the communication thread needs MPI_THREAD_FUNNELED (one thread, "
                        "not the main one, makes every MPI call)",
                        thread_level_name(provided));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    /* Communicators inherit MPI_ERRORS_RETURN from MPI_COMM_WORLD. */
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->comms[MX_COMM_WORLD]));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->side));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->p2p));
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                                  &c->comms[MX_COMM_LOCAL]));
    MPI_CHECK(MPI_Comm_rank(c->comms[MX_COMM_LOCAL], &c->local_rank));
    MPI_CHECK(MPI_Comm_size(c->comms[MX_COMM_LOCAL], &c->local_size));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c->local_rank == 0 ? 0 : MPI_UNDEFINED, c->rank,
                             &c->comms[MX_COMM_LEADERS]));
    int hosts[2] = {0, 0}; /* this host's index, number of hosts */
    if (c->local_rank == 0) {
        MPI_CHECK(MPI_Comm_rank(c->comms[MX_COMM_LEADERS], &hosts[0]));
        MPI_CHECK(MPI_Comm_size(c->comms[MX_COMM_LEADERS], &hosts[1]));
    }
    MPI_CHECK(MPI_Bcast(hosts, 2, MPI_INT, 0, c->comms[MX_COMM_LOCAL]));
    c->host = hosts[0];
    c->n_hosts = hosts[1];

    rank_info me;
    memset(&me, 0, sizeof(me));
    if (gethostname(me.host, sizeof(me.host) - 1) != 0) snprintf(me.host, sizeof(me.host), "?");
    me.host_index = c->host;
    me.local_rank = c->local_rank;
    c->ranks = mx_calloc((size_t)c->size, sizeof(*c->ranks));
    for (int g = 0; g < MX_COMM_GROUP_COUNT; g++) c->members[g] = mx_calloc((size_t)c->size, sizeof(int));
    if (!c->ranks || !c->members[0] || !c->members[1] || !c->members[2]) return MX_ERR_NOMEM;
    MPI_CHECK(MPI_Allgather(&me, (int)sizeof(me), MPI_BYTE, c->ranks, (int)sizeof(me), MPI_BYTE, MPI_COMM_WORLD));
    for (int r = 0; r < c->size; r++) {
        c->ranks[r].host[HOSTNAME_MAX - 1] = '\0';
        c->members[MX_COMM_WORLD][c->n_members[MX_COMM_WORLD]++] = r;
        if (c->ranks[r].host_index == c->host) c->members[MX_COMM_LOCAL][c->n_members[MX_COMM_LOCAL]++] = r;
        /* leaders in world order, which is host order */
        if (c->ranks[r].local_rank == 0) c->members[MX_COMM_LEADERS][c->n_members[MX_COMM_LEADERS]++] = r;
    }
    c->group_rank[MX_COMM_WORLD] = c->rank;
    c->group_rank[MX_COMM_LOCAL] = c->local_rank;
    c->group_rank[MX_COMM_LEADERS] = c->local_rank == 0 ? c->host : -1;
    if (c->local_rank != 0) c->n_members[MX_COMM_LEADERS] = 0;
    for (int g = 0; g < MX_COMM_GROUP_COUNT; g++) c->query_group[g] = g;
    return MX_OK;
}

/* Frees the communicators and finalizes MPI, unless the comm failed. */
static mx_status thread_finish(mx_comm *c)
{
    if (c->failed != MX_OK)
        return MX_ERROR(c->failed,
                        "MPI was not finalized (it would wait for the rank that stalled); end the job with "
                        "mx_comm_abort. The communication failed with: %s",
                        c->failed_message);
    for (int g = 0; g < MX_COMM_GROUP_COUNT; g++)
        if (c->comms[g] != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&c->comms[g]));
    MPI_CHECK(MPI_Comm_free(&c->side));
    MPI_CHECK(MPI_Comm_free(&c->p2p));
    pthread_mutex_lock(&c->mu);
    c->finalize_since = mx_time_seconds();
    pthread_mutex_unlock(&c->mu);
    MPI_CHECK(MPI_Finalize());
    return MX_OK;
}

static void *thread_main(void *arg)
{
    mx_comm *c = arg;
    c->self = pthread_self();
    /* The polling naps are a few microseconds; Linux's default 50 us timer
     * slack stretched each, a third of lib/comm's time per LeNet allreduce. */
    prctl(PR_SET_TIMERSLACK, 1000UL);
    mx_status st = thread_start(c);
    pthread_mutex_lock(&c->mu);
    if (st != MX_OK) mx_error_save(&c->result);
    c->phase = st == MX_OK ? PHASE_RUNNING : PHASE_FINISHED;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
    if (st != MX_OK) return NULL;

    thread_loop(c);
    mx_error_clear();
    st = thread_finish(c);
    pthread_mutex_lock(&c->mu);
    mx_error_save(&c->result);
    c->result.status = st;
    c->phase = PHASE_FINISHED;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

mx_comm_config mx_comm_config_default(void)
{
    return (mx_comm_config){.stall_timeout_s = 300, .shutdown_timeout_s = 300, .max_message_bytes = (size_t)1 << 30};
}

static void comm_destroy(mx_comm *c)
{
    for (comm_req *q = c->head, *next; q; q = next) {
        next = q->next;
        mx_free(q->name);
        mx_free(q);
    }
    /* Messages still in MPI's hands after a failure (sending, receiving)
     * are left allocated, as a failed collective's buffers are. */
    for (p2p_msg *m = c->outbox, *next; m; m = next) {
        next = m->next;
        p2p_msg_free(m);
    }
    for (p2p_in *in = c->held, *next; in; in = next) {
        next = in->next;
        p2p_in_free(in);
    }
    mx_free(c->ranks);
    for (int g = 0; g < MX_COMM_GROUP_COUNT; g++) mx_free(c->members[g]);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->serve_mu);
    pthread_cond_destroy(&c->wake);
    pthread_cond_destroy(&c->changed);
    mx_free(c);
}

mx_status mx_comm_create(const mx_comm_config *config, mx_comm **out)
{
    if (!out) return MX_ERROR(MX_ERR_INVALID, "mx_comm_create: out is NULL");
    *out = NULL;
    mx_comm_config cfg = config ? *config : mx_comm_config_default();
    if (!(cfg.stall_timeout_s >= 0) || !isfinite(cfg.stall_timeout_s))
        return MX_ERROR(MX_ERR_INVALID, "comm: stall_timeout_s must be >= 0 seconds (0: wait forever), not %g",
                        cfg.stall_timeout_s);
    if (!(cfg.shutdown_timeout_s >= 0) || !isfinite(cfg.shutdown_timeout_s))
        return MX_ERROR(MX_ERR_INVALID, "comm: shutdown_timeout_s must be >= 0 seconds (0: wait forever), not %g",
                        cfg.shutdown_timeout_s);
    if (cfg.max_message_bytes < 8)
        return MX_ERROR(MX_ERR_INVALID, "comm: max_message_bytes must be at least 8 (one element), not %zu",
                        cfg.max_message_bytes);
    mx_comm *c = mx_calloc(1, sizeof(*c));
    if (!c) return MX_ERR_NOMEM;
    c->cfg = cfg;
    for (int g = 0; g < MX_COMM_GROUP_COUNT; g++) c->comms[g] = MPI_COMM_NULL;
    c->side = MPI_COMM_NULL;
    c->p2p = MPI_COMM_NULL;
    c->phase = PHASE_STARTING;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->serve_mu, NULL);
    pthread_cond_init(&c->wake, NULL);
    pthread_cond_init(&c->changed, NULL);
    int e = pthread_create(&c->thread, NULL, thread_main, c);
    if (e != 0) {
        comm_destroy(c);
        return MX_ERROR(MX_ERR_RUNTIME, "comm: cannot start the communication thread: %s", strerror(e));
    }
    pthread_mutex_lock(&c->mu);
    while (c->phase == PHASE_STARTING) pthread_cond_wait(&c->changed, &c->mu);
    bool running = c->phase == PHASE_RUNNING;
    pthread_mutex_unlock(&c->mu);
    if (running) {
        *out = c;
        return MX_OK;
    }
    pthread_join(c->thread, NULL);
    mx_error_state err = c->result;
    comm_destroy(c);
    mx_error_restore(&err);
    return mx_error_prefix(err.status, "starting MPI");
}

mx_status mx_comm_free(mx_comm *c)
{
    if (!c) return MX_OK;
    if (on_comm_thread(c))
        return MX_ERROR(MX_ERR_INVALID, "mx_comm_free called on the communication thread (from a callback)");
    pthread_mutex_lock(&c->mu);
    c->shutting_down = true;
    pthread_cond_signal(&c->wake);
    while (c->phase != PHASE_FINISHED) {
        double limit = c->cfg.shutdown_timeout_s;
        if (limit > 0 && c->finalize_since > 0 && mx_time_seconds() - c->finalize_since > limit) {
            pthread_mutex_unlock(&c->mu);
            pthread_detach(c->thread); /* it stays inside MPI_Finalize; c stays allocated */
            return MX_ERROR(MX_ERR_RUNTIME,
                            "MPI_Finalize did not return within %.0f s: some rank has not reached the end of the "
                            "job (stuck, or still working); end the job with mx_comm_abort",
                            limit);
        }
        struct timespec ts = deadline_in(0.05);
        pthread_cond_timedwait(&c->changed, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    mx_error_state err = c->result;
    comm_destroy(c);
    if (err.status == MX_OK) return MX_OK;
    mx_error_restore(&err);
    return err.status;
}

void mx_comm_abort(mx_comm *c, int code)
{
    if (!c) return;
    if (!on_comm_thread(c)) {
        pthread_mutex_lock(&c->mu);
        if (c->phase == PHASE_RUNNING) {
            c->abort_requested = true;
            c->abort_code = code;
            pthread_cond_signal(&c->wake);
            double t0 = mx_time_seconds();
            /* Once the thread has taken it, MPI_Abort ends this process; a
             * second MPI_Abort beside it would return at once. */
            while (c->phase == PHASE_RUNNING &&
                   mx_time_seconds() - t0 < (c->abort_taken ? 30 * ABORT_HANDOFF_S : ABORT_HANDOFF_S)) {
                struct timespec ts = deadline_in(0.05);
                pthread_cond_timedwait(&c->changed, &c->mu, &ts);
            }
            bool taken = c->abort_taken;
            pthread_mutex_unlock(&c->mu);
            if (taken) return;
        } else {
            pthread_mutex_unlock(&c->mu);
        }
    }
    /* The thread is gone, stuck inside MPI, or this is it: abort here. */
    int initialized = 0, finalized = 0;
    if (MPI_Initialized(&initialized) != MPI_SUCCESS || MPI_Finalized(&finalized) != MPI_SUCCESS) return;
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

/* -------------------------------------------------------------- topology */

int mx_comm_rank(const mx_comm *c) { return c->rank; }
int mx_comm_size(const mx_comm *c) { return c->size; }
int mx_comm_local_rank(const mx_comm *c) { return c->local_rank; }
int mx_comm_local_size(const mx_comm *c) { return c->local_size; }
int mx_comm_host(const mx_comm *c) { return c->host; }
int mx_comm_num_hosts(const mx_comm *c) { return c->n_hosts; }
bool mx_comm_is_leader(const mx_comm *c) { return c->local_rank == 0; }

int mx_comm_group_rank(const mx_comm *c, mx_comm_group group)
{
    return (unsigned)group < MX_COMM_GROUP_COUNT ? c->group_rank[group] : -1;
}

int mx_comm_group_size(const mx_comm *c, mx_comm_group group)
{
    return (unsigned)group < MX_COMM_GROUP_COUNT ? c->n_members[group] : 0;
}

const char *mx_comm_hostname(const mx_comm *c, int rank)
{
    return rank >= 0 && rank < c->size ? c->ranks[rank].host : NULL;
}

int mx_comm_host_of(const mx_comm *c, int rank)
{
    return rank >= 0 && rank < c->size ? c->ranks[rank].host_index : -1;
}

/* -------------------------------------------------------------- requests */

static mx_status check_request(const mx_comm *c, const mx_comm_request *r)
{
    if ((unsigned)r->op >= MX_COMM_OP_COUNT) return MX_ERROR(MX_ERR_INVALID, "comm: unknown op %d", (int)r->op);
    const char *op = mx_comm_op_name(r->op);
    if ((unsigned)r->group >= MX_COMM_GROUP_COUNT)
        return MX_ERROR(MX_ERR_INVALID, "comm: %s on unknown group %d", op, (int)r->group);
    if (r->op == MX_COMM_BARRIER) return MX_OK;
    if ((unsigned)r->dtype >= MX_COMM_DTYPE_COUNT)
        return MX_ERROR(MX_ERR_INVALID, "comm: %s of unknown dtype %d", op, (int)r->dtype);
    if (r->op == MX_COMM_ALLREDUCE_SUM && r->dtype == MX_COMM_BYTE)
        return MX_ERROR(MX_ERR_INVALID, "comm: allreduce sums float32, float64, int32 or int64, not bytes");
    size_t bytes;
    if (!mx_size_mul(r->count, mx_comm_dtype_size(r->dtype), &bytes))
        return MX_ERROR(MX_ERR_INVALID, "comm: %s of %zu elements overflows", op, r->count);
    if (r->count > 0 && !r->buf) return MX_ERROR(MX_ERR_INVALID, "comm: %s of %zu elements into NULL", op, r->count);
    if (r->op == MX_COMM_ALLGATHER) {
        size_t total;
        if (r->count > 0 && !r->send)
            return MX_ERROR(MX_ERR_INVALID, "comm: allgather of %zu elements from NULL", r->count);
        if (!mx_size_mul(bytes, (size_t)c->n_members[r->group], &total) || total > c->cfg.max_message_bytes ||
            r->count * (size_t)c->n_members[r->group] > INT_MAX)
            return MX_ERROR(MX_ERR_INVALID, "comm: allgather of %zu bytes from each of %d ranks is larger than one "
                            "message (max_message_bytes %zu); it is for small records", bytes,
                            c->n_members[r->group], c->cfg.max_message_bytes);
    }
    if (r->op == MX_COMM_BROADCAST && (r->root < 0 || r->root >= c->n_members[r->group]))
        return MX_ERROR(MX_ERR_INVALID, "comm: broadcast root %d is not a rank of the %s group (size %d)", r->root,
                        mx_comm_group_name(r->group), c->n_members[r->group]);
    return MX_OK;
}

mx_status mx_comm_submit(mx_comm *c, const mx_comm_request *req)
{
    if (!c || !req) return MX_ERROR(MX_ERR_INVALID, "mx_comm_submit: comm or request is NULL");
    if (req->group == MX_COMM_LEADERS && c->local_rank != 0) {
        char who[160];
        return MX_ERROR(MX_ERR_INVALID,
                        "comm: %s on leaders from %s, which is not its host's leader (local rank %d of %d); only "
                        "local rank 0 of each host takes part",
                        mx_comm_op_name(req->op), mx_comm_rank_str(c, c->rank, who, sizeof(who)), c->local_rank,
                        c->local_size);
    }
    MX_TRY(check_request(c, req));
    comm_req *q = mx_calloc(1, sizeof(*q));
    if (!q) return MX_ERR_NOMEM;
    q->r = *req;
    if (req->op == MX_COMM_BARRIER) q->r.count = 0;
    if (req->name && !(q->name = mx_strdup(req->name))) {
        mx_free(q);
        return MX_ERR_NOMEM;
    }
    q->r.name = q->name;
    pthread_mutex_lock(&c->mu);
    if (c->shutting_down || c->phase != PHASE_RUNNING) {
        pthread_mutex_unlock(&c->mu);
        mx_free(q->name);
        mx_free(q);
        return MX_ERROR(MX_ERR_INVALID, "comm: %s submitted while the comm shuts down", mx_comm_op_name(req->op));
    }
    q->seq = ++c->submitted;
    if (c->tail) c->tail->next = q;
    else c->head = q;
    c->tail = q;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->mu);
    return MX_OK;
}

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    mx_status status;
    char message[MESSAGE_MAX];
} waiter;

static void waiter_done(void *user, mx_status status, const char *message)
{
    waiter *w = user;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    snprintf(w->message, sizeof(w->message), "%s", message);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

mx_status mx_comm_run(mx_comm *c, const mx_comm_request *req)
{
    if (!c || !req) return MX_ERROR(MX_ERR_INVALID, "mx_comm_run: comm or request is NULL");
    if (on_comm_thread(c))
        return MX_ERROR(MX_ERR_INVALID, "comm: blocking %s called on the communication thread (from a callback); "
                        "it would wait for itself", mx_comm_op_name(req->op));
    waiter w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    mx_comm_request r = *req;
    r.done = waiter_done;
    r.user = &w;
    mx_status st = mx_comm_submit(c, &r);
    if (st == MX_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        st = w.status;
        if (st != MX_OK) mx_error_set_message(st, w.message);
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return st;
}

mx_status mx_comm_allreduce(mx_comm *c, mx_comm_group group, mx_comm_dtype dtype, void *buf, size_t count,
                            const char *name)
{
    mx_comm_request r = {.op = MX_COMM_ALLREDUCE_SUM, .group = group, .dtype = dtype, .buf = buf, .count = count,
                         .name = name};
    return mx_comm_run(c, &r);
}

mx_status mx_comm_broadcast(mx_comm *c, mx_comm_group group, mx_comm_dtype dtype, void *buf, size_t count,
                            int root, const char *name)
{
    mx_comm_request r = {.op = MX_COMM_BROADCAST, .group = group, .dtype = dtype, .buf = buf, .count = count,
                         .root = root, .name = name};
    return mx_comm_run(c, &r);
}

mx_status mx_comm_allgather(mx_comm *c, mx_comm_group group, mx_comm_dtype dtype, const void *send, void *recv,
                            size_t count, const char *name)
{
    mx_comm_request r = {.op = MX_COMM_ALLGATHER, .group = group, .dtype = dtype, .buf = recv, .send = send,
                         .count = count, .name = name};
    return mx_comm_run(c, &r);
}

mx_status mx_comm_barrier(mx_comm *c, mx_comm_group group, const char *name)
{
    mx_comm_request r = {.op = MX_COMM_BARRIER, .group = group, .name = name};
    return mx_comm_run(c, &r);
}

/* -------------------------------------------------- calls: the front end */

/* Queues a message to `peer`: header + payload (copied); a call when done
 * is set (it gets its number here). */
static mx_status p2p_queue(mx_comm *c, int peer, int tag, wire_header h, const void *head, size_t head_bytes,
                           const void *data, size_t bytes, const char *name, mx_comm_reply_fn done, void *user)
{
    if (head_bytes > 0 && !head) return MX_ERROR(MX_ERR_INVALID, "comm: %zu head bytes from NULL", head_bytes);
    if (bytes > SIZE_MAX - head_bytes)
        return MX_ERROR(MX_ERR_INVALID, "comm: a message of %zu + %zu bytes overflows", head_bytes, bytes);
    bytes += head_bytes; /* checked as one payload; copied in two parts */
    if (peer < 0 || peer >= c->size)
        return MX_ERROR(MX_ERR_INVALID, "comm: %s to rank %d: the job has ranks 0 to %d",
                        done ? "call" : "answer", peer, c->size - 1);
    if (bytes > (size_t)INT_MAX - sizeof(h))
        return MX_ERROR(MX_ERR_INVALID, "comm: a %s of %zu bytes is larger than one MPI message (2 GiB)",
                        done ? "call" : "answer", bytes);
    if (bytes > head_bytes && !data) return MX_ERROR(MX_ERR_INVALID, "comm: %zu bytes from NULL", bytes - head_bytes);
    p2p_msg *m = mx_calloc(1, sizeof(*m));
    if (!m) return MX_ERR_NOMEM;
    m->bytes = sizeof(h) + bytes;
    m->buf = mx_malloc(m->bytes);
    if (!m->buf || (name && !(m->name = mx_strdup(name)))) {
        p2p_msg_free(m);
        return MX_ERR_NOMEM;
    }
    if (head_bytes) memcpy((char *)m->buf + sizeof(h), head, head_bytes);
    if (bytes > head_bytes) memcpy((char *)m->buf + sizeof(h) + head_bytes, data, bytes - head_bytes);
    m->peer = peer;
    m->tag = tag;
    m->done = done;
    m->user = user;
    pthread_mutex_lock(&c->mu);
    if (c->shutting_down || c->phase != PHASE_RUNNING) {
        pthread_mutex_unlock(&c->mu);
        p2p_msg_free(m);
        return MX_ERROR(MX_ERR_INVALID, "comm: %s submitted while the comm shuts down", done ? "call" : "answer");
    }
    if (done) h.id = ++c->next_call_id;
    m->id = h.id;
    memcpy(m->buf, &h, sizeof(h));
    if (c->outbox_tail) c->outbox_tail->next = m;
    else c->outbox = m;
    c->outbox_tail = m;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->mu);
    return MX_OK;
}

mx_status mx_comm_call_submit(mx_comm *c, const mx_comm_call *call)
{
    if (!c || !call || !call->done) return MX_ERROR(MX_ERR_INVALID, "mx_comm_call_submit: comm, call or done is NULL");
    if (call->service < 0 || call->service >= MX_COMM_MAX_SERVICES)
        return MX_ERROR(MX_ERR_INVALID, "comm: call to service %d (0 to %d)", call->service, MX_COMM_MAX_SERVICES - 1);
    wire_header h = {.service = call->service, .status = MX_OK};
    return p2p_queue(c, call->dest, TAG_CALL, h, call->head, call->head_bytes, call->data, call->bytes, call->name,
                     call->done, call->user);
}

mx_status mx_comm_reply(mx_comm *c, int source, uint64_t id, mx_status status, const char *message, const void *data,
                        size_t bytes)
{
    if (!c) return MX_ERROR(MX_ERR_INVALID, "mx_comm_reply: comm is NULL");
    wire_header h = {.id = id, .status = status};
    if (status != MX_OK) {
        message = message && *message ? message : "the service failed";
        return p2p_queue(c, source, TAG_ANSWER, h, NULL, 0, message, strlen(message) + 1, NULL, NULL, NULL);
    }
    return p2p_queue(c, source, TAG_ANSWER, h, NULL, 0, data, bytes, NULL, NULL, NULL);
}

mx_status mx_comm_serve(mx_comm *c, int service, mx_comm_serve_fn fn, void *user)
{
    if (!c) return MX_ERROR(MX_ERR_INVALID, "mx_comm_serve: comm is NULL");
    if (service < 0 || service >= MX_COMM_MAX_SERVICES)
        return MX_ERROR(MX_ERR_INVALID, "comm: service %d (0 to %d)", service, MX_COMM_MAX_SERVICES - 1);
    pthread_mutex_lock(&c->serve_mu);
    pthread_mutex_lock(&c->mu);
    bool taken = fn && c->services[service].fn;
    if (!taken) {
        c->services[service].fn = fn;
        c->services[service].user = fn ? user : NULL;
    }
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->serve_mu);
    if (taken) return MX_ERROR(MX_ERR_INVALID, "comm: service %d already has a handler", service);
    return MX_OK;
}

/* ------------------------------------------------- the consistency check */

static uint64_t fnv1a64(const void *bytes, size_t len)
{
    const unsigned char *p = bytes;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

mx_status mx_comm_check_same(mx_comm *c, const void *bytes, size_t len, const char *what)
{
    if (!c || (len > 0 && !bytes)) return MX_ERROR(MX_ERR_INVALID, "mx_comm_check_same: comm or bytes is NULL");
    what = what ? what : "the start-up check";
    int64_t mine[2] = {(int64_t)fnv1a64(bytes, len), (int64_t)len};
    int64_t *all = mx_calloc((size_t)c->size, sizeof(mine));
    if (!all) return MX_ERR_NOMEM;
    char name[200];
    snprintf(name, sizeof(name), "the consistency check of %s", what);
    mx_status st = mx_comm_allgather(c, MX_COMM_WORLD, MX_COMM_INT64, mine, all, 2, name);
    if (st != MX_OK) {
        mx_free(all);
        return st;
    }
    /* The reference: the value most ranks hold (ties: the lowest rank's). */
    int ref = 0, ref_count = 0;
    for (int r = 0; r < c->size; r++) {
        int n = 0;
        for (int s = 0; s < c->size; s++) n += all[2 * s] == all[2 * r] && all[2 * s + 1] == all[2 * r + 1];
        if (n > ref_count) {
            ref = r;
            ref_count = n;
        }
    }
    if (ref_count == c->size) {
        mx_free(all);
        return MX_OK;
    }
    char msg[MESSAGE_MAX], who[160];
    size_t n = (size_t)snprintf(msg, sizeof(msg), "%s differs between ranks: %d of %d ranks agree with %s; different:",
                                what, ref_count, c->size, mx_comm_rank_str(c, ref, who, sizeof(who)));
    int listed = 0;
    for (int r = 0; r < c->size; r++) {
        if (all[2 * r] == all[2 * ref] && all[2 * r + 1] == all[2 * ref + 1]) continue;
        if (listed++ == MAX_LISTED_RANKS) {
            n = append(msg, sizeof(msg), n, " and %d more", c->size - ref_count - MAX_LISTED_RANKS);
            break;
        }
        n = append(msg, sizeof(msg), n, "%s %s", listed > 1 ? "," : "", mx_comm_rank_str(c, r, who, sizeof(who)));
    }
    mx_free(all);
    return MX_ERROR(MX_ERR_INVALID, "%s", msg);
}

/* ------------------------------------------------------------ the launch */

bool mx_comm_launched(mx_comm_launch *out)
{
    mx_comm_launch l = {.by_mpirun = false, .rank = -1, .size = -1, .local_rank = -1, .local_size = -1};
    if (getenv("OMPI_COMM_WORLD_SIZE")) {
        l.by_mpirun = true;
        l.rank = (int)mx_env_long("OMPI_COMM_WORLD_RANK", -1);
        l.size = (int)mx_env_long("OMPI_COMM_WORLD_SIZE", -1);
        l.local_rank = (int)mx_env_long("OMPI_COMM_WORLD_LOCAL_RANK", -1);
        l.local_size = (int)mx_env_long("OMPI_COMM_WORLD_LOCAL_SIZE", -1);
    } else if (getenv("PMIX_RANK")) {
        l.by_mpirun = true;
        l.rank = (int)mx_env_long("PMIX_RANK", -1);
    }
    if (out) *out = l;
    return l.by_mpirun;
}
