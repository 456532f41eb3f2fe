/*
 * comm.h - the communication layer of distributed training (`mpirun
 * mxtrain`): collectives between the ranks of an MPI job, for the dist_sync,
 * dist_async and two-level (per host, then across hosts) kvstores.
 *
 * One thread owns MPI. mx_comm_create starts a communication thread that
 * calls MPI_Init_thread (asking for MPI_THREAD_FUNNELED: only that thread
 * ever calls MPI), learns the topology, and then serves requests that other
 * threads submit; it also calls MPI_Finalize at mx_comm_free. No other code
 * of the process may call MPI.
 *
 * Besides the collectives, the same thread carries calls: point-to-point
 * requests to a service of one rank (dist_async's parameter server), which
 * run beside the FIFO (see "calls" below).
 *
 * Order. Requests run strictly one after the other in submission order
 * (FIFO), never reordered by readiness: when every rank submits the same
 * requests in the same program order, every rank issues the same
 * collectives in the same order, which is what MPI requires (and what
 * Horovod's coordinator and PyTorch DDP's buckets arrange). A request starts
 * only after the previous one has completed, so requests on the same buffer
 * compose: "allreduce on LOCAL, allreduce on LEADERS, broadcast on LOCAL"
 * submitted back to back sums over all ranks with one cross-host message
 * per host. (Fusing small gradients into buckets is the caller's job.)
 *
 * Completion. Each request completes once with its `done` callback, called
 * on the communication thread with the status and a message ("" on
 * success); an engine op can be completed from there. The callback must be
 * short and must not call the blocking functions below (they fail with
 * MX_ERR_INVALID there); it may submit further requests. The blocking
 * helpers (mx_comm_run, mx_comm_allreduce, ...) submit and wait.
 *
 * Stalls. Collectives are started non-blocking (MPI_Iallreduce, ...) and
 * polled with MPI_Test, so the thread sees a request that does not finish.
 * Under Open MPI, libnbc's choice for in-place sums and under 4 ranks is a
 * binomial tree, twice the time of the blocking MPI_Allreduce for LeNet's
 * 1.7 MB on 2 ranks; Rabenseifner's algorithm
 * (OMPI_MCA_coll_libnbc_iallreduce_algorithm=3, read by MPI_Init_thread)
 * matches it. The library never writes the environment: mxtrain's main
 * sets that default before mx_comm_create (MX_COMM_IALLREDUCE_ENV). Setting
 * it through MPI's tool interface instead made MPI_T_init_thread load UCX,
 * whose memory hooks then stay on every mmap and madvise of the process
 * (and crashed exiting threads under ThreadSanitizer).
 * After `stall_timeout_s` it fails with MX_ERR_RUNTIME, naming the
 * collective, the submitter's name for it and how long it waited, e.g.
 *   allreduce of key 3 (fc1_weight) on world (1024 float32) did not
 *   complete: waited 2.0 s (stall_timeout_s 2); it is collective 5 on world
 *   here; rank 1 on node7 (host 1) is behind: it has started 4 of them (idle)
 * The ranks behind are found through a side channel (a duplicate of
 * MPI_COMM_WORLD): the stalled rank asks every member of the group how many
 * collectives it has started on it; the communication threads answer
 * between polls, also while idle, so the normal path costs one MPI_Iprobe
 * per poll. A rank that does not answer within a second is named as not
 * answering (its process is stopped, gone, or stuck inside MPI).
 * A stall leaves MPI with an unfinished collective that cannot be
 * cancelled, so the comm is then failed: every later request fails at once
 * with the first failure's message. After any failure of a request its
 * buffers may still be in MPI's hands: keep them allocated until
 * mx_comm_free has returned (or the process ends).
 *
 * Ending. mx_comm_free runs what is queued, then finalizes MPI; when the
 * comm failed it does not finalize (MPI_Finalize would wait for the peer
 * that stalled) and returns the failure. A main that failed should end the
 * whole job with mx_comm_abort (MPI_Abort) instead: the library itself never
 * exits. What happens to the other ranks when one ends (Open MPI 4.1,
 * tests/test_comm.c checks it): when a rank exits before MPI_Finalize
 * (normally, with an error, or killed by a signal), mpirun kills the others
 * and exits non-zero; so a dead peer never leaves the survivors waiting, a
 * stuck peer is reported by the stall timeout, and mx_comm_free waits at
 * most `shutdown_timeout_s` for MPI_Finalize.
 *
 * Errors: every MPI call is checked (MPI_ERRORS_RETURN is set on every
 * communicator) and a failure becomes MX_ERR_RUNTIME with the call and MPI's
 * error string. MPI_Init_thread itself may still end the process when the
 * MPI runtime cannot start (Open MPI aborts there, before a handler can be
 * set). MPI can be initialized once per process: one mx_comm per process.
 */
#ifndef MX_COMM_H
#define MX_COMM_H

#include "base/base.h"
#include "profile/profile.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mx_comm mx_comm;

/* Open MPI's variable for the non-blocking allreduce's algorithm, and the
 * value that runs Rabenseifner's (see Stalls above): for mains to set,
 * without overwriting, before mx_comm_create. */
#define MX_COMM_IALLREDUCE_ENV "OMPI_MCA_coll_libnbc_iallreduce_algorithm"
#define MX_COMM_IALLREDUCE_RABENSEIFNER "3"

/* How this process was started, read from the environment without touching
 * MPI: Open MPI's mpirun sets OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,
 * LOCAL_SIZE}; PMIx launchers (srun --mpi=pmix) set PMIX_RANK. */
typedef struct mx_comm_launch {
    bool by_mpirun; /* started by mpirun or another MPI launcher */
    int rank;       /* -1 when unknown */
    int size;
    int local_rank;
    int local_size;
} mx_comm_launch;

/* Whether this process was started by an MPI launcher; *out (may be NULL)
 * gets what the environment says. */
bool mx_comm_launched(mx_comm_launch *out);

/* The communicators a request can run on. */
typedef enum mx_comm_group {
    MX_COMM_WORLD = 0,   /* every rank */
    MX_COMM_LOCAL = 1,   /* the ranks of this host (MPI_COMM_TYPE_SHARED) */
    MX_COMM_LEADERS = 2, /* local rank 0 of every host, in host order; only
                            leaders may submit on it */
    MX_COMM_GROUP_COUNT
} mx_comm_group;

typedef enum mx_comm_dtype {
    MX_COMM_FLOAT32 = 0,
    MX_COMM_FLOAT64 = 1,
    MX_COMM_INT32 = 2,
    MX_COMM_INT64 = 3,
    MX_COMM_BYTE = 4, /* broadcast and allgather only */
    MX_COMM_DTYPE_COUNT
} mx_comm_dtype;

typedef enum mx_comm_op {
    MX_COMM_ALLREDUCE_SUM = 0, /* buf[0..count) summed over the group, in place */
    MX_COMM_BROADCAST = 1,     /* buf[0..count) of `root` copied into every member's buf */
    MX_COMM_ALLGATHER = 2,     /* member i's send[0..count) lands in buf[i*count ..) */
    MX_COMM_BARRIER = 3,       /* returns once every member got there */
    MX_COMM_OP_COUNT
} mx_comm_op;

/* Completion of a request, on the communication thread: MX_OK and "", or
 * the failure and its message (valid during the call only). */
typedef void (*mx_comm_done_fn)(void *user, mx_status status, const char *message);

typedef struct mx_comm_request {
    mx_comm_op op;
    mx_comm_group group;
    mx_comm_dtype dtype;
    void *buf;         /* allreduce, broadcast: count elements, in place;
                          allgather: group size * count elements received */
    const void *send;  /* allgather: this member's count elements */
    size_t count;      /* elements (per member for allgather); 0 is fine */
    int root;          /* broadcast: the root's rank in the group */
    const char *name;  /* what it is, for messages: "key 3 (fc1_weight)"
                          gives "allreduce of key 3 (fc1_weight) on world";
                          copied; NULL: "request N" */
    mx_comm_done_fn done; /* may be NULL (only the blocking helpers wait) */
    void *user;
} mx_comm_request;

typedef struct mx_comm_config {
    /* A request not complete after this many seconds fails (see Stalls);
     * 0 waits forever. */
    double stall_timeout_s;
    /* How long mx_comm_free waits for MPI_Finalize, which returns once
     * every rank has called it; 0 waits forever. */
    double shutdown_timeout_s;
    /* Allreduce and broadcast run in pieces of at most this many bytes
     * (rounded down to whole elements, at most INT_MAX elements, as MPI's
     * counts are int); allgather must fit in one. Every rank must use the
     * same value (the pieces are collectives). */
    size_t max_message_bytes;
} mx_comm_config;

/* stall_timeout_s 300, shutdown_timeout_s 300, max_message_bytes 1 GiB. */
mx_comm_config mx_comm_config_default(void);

/* Starts the communication thread, initializes MPI on it and learns the
 * topology (ranks, hosts, host names, the LOCAL and LEADERS communicators).
 * Collective: every rank of the job calls it. config may be NULL
 * (defaults). Errors: MX_ERR_INVALID (bad config; MPI was already
 * initialized or finalized in this process), MX_ERR_UNSUPPORTED (MPI
 * provides less than MPI_THREAD_FUNNELED), MX_ERR_RUNTIME (an MPI call or
 * the thread start failed), MX_ERR_NOMEM. After a failure past
 * MPI_Init_thread, MPI stays initialized and the process should exit. */
mx_status mx_comm_create(const mx_comm_config *config, mx_comm **out);

/* Runs every request still queued, frees the communicators, finalizes MPI
 * and frees comm. Returns MX_OK, or MX_ERR_RUNTIME when the comm had failed
 * (MPI not finalized: the message says why) or MPI_Finalize did not return
 * within shutdown_timeout_s; in that last case only, the thread is left
 * inside MPI and comm stays allocated, so mx_comm_abort may still be called
 * on it. MX_ERR_INVALID when called on the communication thread. NULL: MX_OK. */
mx_status mx_comm_free(mx_comm *comm);

/* Ends the whole job: MPI_Abort(MPI_COMM_WORLD, code) on the communication
 * thread, or on the caller's when that thread does not take it within a
 * second (it is stuck inside MPI); mpirun then kills every rank and exits
 * non-zero. For cmd/ mains after a failure; does not return unless comm is
 * NULL or MPI is not running, and then the caller should exit itself. */
void mx_comm_abort(mx_comm *comm, int code);

/* Topology, fixed at create. Hosts are numbered in the order of their
 * lowest rank; local ranks follow world ranks within a host. */
int mx_comm_rank(const mx_comm *comm);
int mx_comm_size(const mx_comm *comm);
int mx_comm_local_rank(const mx_comm *comm);
int mx_comm_local_size(const mx_comm *comm);
int mx_comm_host(const mx_comm *comm);      /* this rank's host index */
int mx_comm_num_hosts(const mx_comm *comm);
bool mx_comm_is_leader(const mx_comm *comm); /* local rank 0 */
/* This rank's rank and size within a group (size 0 for LEADERS on a rank
 * that is not a leader; rank -1 there). */
int mx_comm_group_rank(const mx_comm *comm, mx_comm_group group);
int mx_comm_group_size(const mx_comm *comm, mx_comm_group group);
/* Host name and host index of any rank (NULL / -1 when out of range). */
const char *mx_comm_hostname(const mx_comm *comm, int rank);
int mx_comm_host_of(const mx_comm *comm, int rank);
/* "rank 3 on node7 (host 1)" into buf; returns buf. */
const char *mx_comm_rank_str(const mx_comm *comm, int rank, char *buf, size_t size);

/* Queues a request; `done` is called exactly once when MX_OK is returned.
 * Thread-safe. Errors (nothing queued, done not called): MX_ERR_INVALID
 * for a bad op, group, dtype, root or NULL buffer, LEADERS on a rank that
 * is not a leader, an allgather larger than max_message_bytes, or a comm
 * that is shutting down; MX_ERR_NOMEM. The buffers belong to the comm until
 * done is called (and longer after a failure, see Stalls). */
mx_status mx_comm_submit(mx_comm *comm, const mx_comm_request *req);

/* Submits req (its done/user are ignored) and waits for it; returns its
 * status with the message recorded on this thread. */
mx_status mx_comm_run(mx_comm *comm, const mx_comm_request *req);

/* Blocking shorthands for mx_comm_run. `name` as in mx_comm_request. */
mx_status mx_comm_allreduce(mx_comm *comm, mx_comm_group group, mx_comm_dtype dtype, void *buf, size_t count,
                            const char *name);
mx_status mx_comm_broadcast(mx_comm *comm, mx_comm_group group, mx_comm_dtype dtype, void *buf, size_t count,
                            int root, const char *name);
mx_status mx_comm_allgather(mx_comm *comm, mx_comm_group group, mx_comm_dtype dtype, const void *send,
                            void *recv, size_t count, const char *name);
mx_status mx_comm_barrier(mx_comm *comm, mx_comm_group group, const char *name);

/* ------------------------------------------- calls (point to point)
 * The parameter server of dist_async needs messages between two ranks that
 * do not involve the others. A call sends bytes to a service of one rank
 * (this one included) and completes with that service's reply. Calls go
 * through the same communication thread (MPI stays single-threaded) but
 * beside the FIFO of collectives, on a communicator of their own: they
 * start as soon as they are submitted and progress while a collective is in
 * flight, so a rank waiting in a collective still answers calls. Calls
 * from one rank to one service are delivered in the order they were
 * submitted (MPI's non-overtaking rule); calls and collectives are not
 * ordered with each other.
 *
 * Stalls: a call without a reply after stall_timeout_s fails the comm
 * exactly as a stalled collective does (every pending and later request
 * and call fails with its message, MPI is not finalized), naming the call,
 * the callee, and whether the callee still answers the side channel (alive:
 * its service is stuck or overloaded) or not (stopped, gone). mx_comm_free
 * waits for the calls in flight (each bounded by the stall timeout). */
#define MX_COMM_MAX_SERVICES 8

/* The reply of a call, on the communication thread: MX_OK with the
 * reply's bytes (valid during the call only), or the failure (the
 * service's, or the comm's) with its message and no bytes. */
typedef void (*mx_comm_reply_fn)(void *user, mx_status status, const char *message, const void *data,
                                 size_t bytes);

typedef struct mx_comm_call {
    int dest;          /* world rank of the service */
    int service;       /* 0 .. MX_COMM_MAX_SERVICES - 1 */
    const void *head;  /* a small header sent before data (may be NULL), copied */
    size_t head_bytes;
    const void *data;  /* bytes of the request, copied at submit after head */
    size_t bytes;      /* head and data below 2 GiB (one MPI message) */
    const char *name;  /* for messages: "push of key 3"; copied */
    mx_comm_reply_fn done; /* required */
    void *user;
} mx_comm_call;

/* Queues a call; done is called exactly once when MX_OK is returned.
 * Thread-safe. Errors (nothing queued): MX_ERR_INVALID for a bad rank,
 * service, NULL done or too large a message, or a comm shutting down;
 * MX_ERR_NOMEM. */
mx_status mx_comm_call_submit(mx_comm *comm, const mx_comm_call *call);

/* A request for a service, on the communication thread: `data` holds the
 * caller's bytes in an mx_malloc'ed buffer that now belongs to the handler
 * (mx_free it). The handler must be short: it hands the work to another
 * thread, which answers with mx_comm_reply. */
typedef void (*mx_comm_serve_fn)(void *user, int source, uint64_t id, void *data, size_t bytes);

/* Registers the handler of `service` on this rank (fn NULL: unregisters).
 * Requests that arrive while a service has no handler wait for one.
 * Thread-safe. MX_ERR_INVALID for a bad service or one already served. */
mx_status mx_comm_serve(mx_comm *comm, int service, mx_comm_serve_fn fn, void *user);

/* Answers request `id` from rank `source`: status MX_OK sends data[0..bytes)
 * (copied), anything else sends the failure and `message` (the caller's
 * done gets them). Thread-safe; not from a blocking wait on the comm
 * thread. Errors: MX_ERR_INVALID (bad rank, too large, shutting down),
 * MX_ERR_NOMEM. */
mx_status mx_comm_reply(mx_comm *comm, int source, uint64_t id, mx_status status, const char *message,
                        const void *data, size_t bytes);

/* The start-up consistency check, collective on WORLD: every rank passes
 * bytes (its config, or a hash of it) and all get the same answer. MX_OK
 * when all agree; otherwise MX_ERR_INVALID on every rank, one message that
 * names each rank that differs from the majority (ties: from rank 0's
 * group), e.g. "the config differs between ranks: 3 of 4 ranks agree with
 * rank 0 on node1 (host 0); different: rank 2 on node2 (host 1)". `what`
 * names the bytes ("the config"). Compares a 64-bit FNV-1a hash and the
 * length. */
mx_status mx_comm_check_same(mx_comm *comm, const void *bytes, size_t len, const char *what);

/* Records every collective that completes from now on into p (NULL: stop)
 * on the communication thread's track ("MPI thread (rank R)"), category
 * MX_PROFILE_COMM, from the start of its first piece to its completion,
 * named as in messages ("allreduce of keys 0..3 (bucket 5, 4 keys) on world
 * (1234 float32)") with its bytes; and every call (mx_comm_call_submit)
 * that gets its answer, from the start of its send to the answer, on the
 * track "MPI calls (rank R)" (calls overlap), named "call push of key 3 to
 * rank 0" with the bytes both ways. Recorded before the done callback, so
 * a caller may detach p once its own requests and calls completed and
 * nothing else is queued. */
void mx_comm_set_profiler(mx_comm *comm, mx_profiler *p);

/* The profiler set above (NULL: none), for a service that records its own
 * work (kvstore dist_async's server); it must stop recording before the
 * profiler is freed. */
mx_profiler *mx_comm_profiler(mx_comm *comm);

/* Names for messages: "allreduce", "world", "float32", ... */
const char *mx_comm_op_name(mx_comm_op op);
const char *mx_comm_group_name(mx_comm_group group);
const char *mx_comm_dtype_name(mx_comm_dtype dtype);
size_t mx_comm_dtype_size(mx_comm_dtype dtype);

#endif /* MX_COMM_H */
