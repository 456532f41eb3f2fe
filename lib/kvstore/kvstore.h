/*
 * kvstore.h - MXNet's key-value store for data-parallel training: the
 * trainer init()s every parameter under an integer key, push()es each
 * batch's gradients (one array per device; they are summed) and pull()s
 * the weights back. With an updater (an optimizer, usually) the store
 * applies it to its own copy of the weight at every push, so the weights
 * live in the store and the devices only compute gradients.
 *
 * Every step is pushed to the dependency engine with the arrays it reads
 * and writes, and the calls return at once: the sum of a parameter's
 * gradients waits only for those gradients, its update only for the sum,
 * and the pull only for the update, so communication and updates of one
 * layer overlap the backward pass of the next and the next forward pass.
 *
 * Kinds (one row each in kvstore.c's table, behind mx_kvstore_ops):
 *   local       the store and the sums on the CPU (MXNet's KVStoreLocal with
 *               CommCPU): gradients on other devices are copied over first
 *   device      (kvstore_device.c; MXNet's KVStoreLocal with CommDevice) the
 *               sums on the GPUs that made the gradients: one NCCL reduce
 *               per push into the key's home GPU, where the updater runs,
 *               and one NCCL broadcast per pull; CPU arrays as local
 *   dist_sync   (kvstore_dist.c) the ranks of an MPI job (lib/comm): every
 *               push is summed over the devices, then over all ranks, and
 *               the same update is applied on every rank, so all ranks hold
 *               bit-identical weights
 *   dist_sync_device (= dist_device_sync) the same in two levels: summed
 *               over the ranks of each host first, then across hosts among
 *               one leader per host, then handed back within each host
 *   dist_async  (kvstore_async.c) MXNet's asynchronous parameter server:
 *               the weights and the optimizer live on a server; every push
 *               is applied there as it arrives, with no step barrier, and a
 *               pull returns the server's newest weights (see below)
 *
 * dist_async in this build. MXNet runs its servers as separate processes
 * (ps-lite) that shard the keys. Here the server is a thread of rank 0,
 * which is also a worker: one server holds every key, so nothing is
 * sharded (a key's update never waits for another server, and rank 0 holds
 * the whole model and the optimizer state, which it checkpoints). Workers
 * reach it through lib/comm's calls (point-to-point messages carried by the
 * communication thread beside the collectives; rank 0 calls itself the same
 * way). The server applies requests one at a time in arrival order:
 *   push(key, grads)  the devices' gradients are summed on the worker, sent,
 *                     and the server runs the updater (update_on_kvstore:
 *                     the optimizer, which is rank 0's, run on the server
 *                     thread: mx_optimizer_update_now) on its weight, then
 *                     answers with the weight as that update left it; the
 *                     push completes with the answer
 *   pull(key)         after a push of the key by this worker: that push's
 *                     answer, which holds every push the server had applied
 *                     up to and including it, from every worker (no message
 *                     of its own: one round trip per key and step);
 *                     otherwise the server's weight as it is when asked
 * What it guarantees: every push is applied exactly once; a worker's own
 * pushes and pulls of a key are applied in the order it made them; nothing
 * more: workers do not wait for each other (their copies of the weights
 * differ), and a gradient may be computed on weights that other workers
 * have updated since (staleness). The optimizer sees one worker's gradient
 * per update, so it rescales by one worker's batch (MXNet's Module does
 * the same: only the _sync kinds multiply by the number of workers).
 * Ends and faults: the trainer's collectives (metrics, stop agreement, the
 * end of every epoch) come after mx_kvstore_wait_comm, so at each of them
 * every push made so far is applied; a server that does not answer within
 * the comm's stall timeout fails the comm (the job ends), and a worker that
 * stops is found by the next collective.
 * On the timeline (fit.profile: the engine's and the comm's profiler):
 * each worker's push (and a pull that asks the server) is an I/O op
 * "kvstore dist_async push of key 3" with its bytes, and lib/comm's call
 * inside it a communication event "call push of key 3 to rank 0"; the
 * server's handling of each request, its update included, is an I/O event
 * "server push of key 3 from rank 1" on the track "kvstore dist_async
 * server (rank 0)". The server records into the comm's profiler until
 * mx_kvstore_free has stopped it: free the store before the profiler.
 */
#ifndef MX_KVSTORE_H
#define MX_KVSTORE_H

#include "comm/comm.h"
#include "ndarray/ndarray.h"
#include "optimizer/optimizer.h"

typedef struct mx_kvstore mx_kvstore;

/* MXNet's updater(key, recv, local): called on the pushing thread with the
 * summed gradient and the stored weight; it is expected to push its work
 * to the engine (mx_optimizer_update does). A failure is returned by the
 * push that called it. */
typedef mx_status (*mx_kvstore_updater_fn)(int key, mx_ndarray *merged_grad, mx_ndarray *stored, void *user);

typedef struct mx_kvstore_updater {
    mx_kvstore_updater_fn fn; /* NULL: none; a push then replaces the stored value by the sum */
    void *user;
} mx_kvstore_updater;

/* The dist kinds' default bucket size (Horovod's fusion buffer). A bucket
 * is sent only once full or at the end of the round, so it must be small
 * next to the gradients for communication to overlap the backward pass:
 * at 64 MiB LeNet's 1.7 MB went in one bucket after the whole backward pass
 * (0.00 of it hidden, fit.profile); at 1 MiB fc1's weight goes alone while
 * conv2's backward runs (about half hidden), as PyTorch DDP's 1 MB first
 * bucket does. Each bucket costs one collective's latency. */
#define MX_KVSTORE_FUSION_BYTES ((size_t)1 << 20)

/* The bucket rule of the dist_sync kinds, for them and for whoever counts
 * their buckets ahead (mxtrain's dry run): the bucket limit for a
 * configured fusion_bytes (0: MX_KVSTORE_FUSION_BYTES), and whether a push
 * of `bytes` first sends the open bucket of `open_bytes` (a key larger than
 * the limit goes alone). One dtype per bucket is the other rule. */
static inline size_t mx_kvstore_bucket_limit(size_t fusion_bytes)
{
    return fusion_bytes ? fusion_bytes : MX_KVSTORE_FUSION_BYTES;
}
static inline bool mx_kvstore_bucket_full(size_t open_bytes, size_t bytes, size_t limit)
{
    return open_bytes && open_bytes + bytes > limit;
}

/* What some kinds need beyond a runtime. */
typedef struct mx_kvstore_options {
    mx_comm *comm;       /* dist kinds: the job's communicator (borrowed; required) */
    size_t fusion_bytes; /* dist_sync kinds: gradients of consecutive pushes are summed over the
                            ranks in buckets of up to this many bytes (Horovod's tensor
                            fusion); 0: MX_KVSTORE_FUSION_BYTES */
} mx_kvstore_options;

/* Whether kind `type` can take opts (a config check, before any store is
 * made; mx_kvstore_create_opts makes it too): MX_ERR_INVALID for an
 * unknown kind, or fusion_bytes for a kind that sends each key alone
 * (local, dist_async), naming the kinds that take it. */
mx_status mx_kvstore_options_check(const char *type, const mx_kvstore_options *opts);

/* Creates a store of kind `type` ("local"; MX_ERR_INVALID with a
 * suggestion for unknown names, MX_ERR_UNSUPPORTED for kinds this build
 * lacks, MX_ERR_INVALID for a dist kind without a communicator). */
mx_status mx_kvstore_create(mx_runtime *rt, const char *type, mx_kvstore **out);
mx_status mx_kvstore_create_opts(mx_runtime *rt, const char *type, const mx_kvstore_options *opts, mx_kvstore **out);
/* Whether `type` is a kind that spans the ranks of an MPI job. */
bool mx_kvstore_type_is_dist(const char *type);
/* Whether `type` names a kind of store (MX_ERR_INVALID with a suggestion
 * when not), whether or not this build has it: a config check. */
mx_status mx_kvstore_type_check(const char *type);
/* The kind names, in table order (NULL past the end). */
const char *mx_kvstore_type_at(int i);
/* Frees the store; work already pushed completes on its own (it holds
 * references to the arrays it uses). */
void mx_kvstore_free(mx_kvstore *kv);
const char *mx_kvstore_type(const mx_kvstore *kv);

/* Stores a copy of value under key (0 <= key < 2^20). MX_ERR_INVALID for a
 * key given twice. A store is used by one thread at a time. */
mx_status mx_kvstore_init(mx_kvstore *kv, int key, mx_ndarray *value);
/* Sums values[0..n) (same shape as the stored value, float32/float64, any
 * devices) and applies the updater, or replaces the stored value by the sum
 * when there is none. priority orders this key's work among ready
 * operations (MXNet pushes parameter i with priority -i). */
mx_status mx_kvstore_push(mx_kvstore *kv, int key, mx_ndarray *const *values, int n, int priority);
/* Copies the stored value into outs[0..n) (any devices). */
mx_status mx_kvstore_pull(mx_kvstore *kv, int key, mx_ndarray *const *outs, int n, int priority);

/* Sets (or clears, fn NULL) the updater applied at every push. */
mx_status mx_kvstore_set_updater(mx_kvstore *kv, mx_kvstore_updater_fn fn, void *user);
/* The updater that runs opt: mx_optimizer_update(opt, key, stored, grad).
 * The optimizer is borrowed and must outlive the store's use of it. */
mx_status mx_kvstore_set_optimizer(mx_kvstore *kv, mx_optimizer *opt);

/* The stored array of key (borrowed; read it through the engine), or NULL. */
mx_ndarray *mx_kvstore_stored(mx_kvstore *kv, int key);

/* The device store's placement on GPUs, for whoever shows it ahead
 * (mxtrain's dry run): home[i] (0 .. n_gpus-1, in the order the pushes
 * list the GPUs) of each of n keys of bytes[i], pushed in index order, as
 * the store chooses at each key's first push. */
void mx_kvstore_device_homes(const size_t *bytes, int n, int n_gpus, int *home);

/* This process's rank and the number of workers (0 and 1 when local). */
int mx_kvstore_rank(const mx_kvstore *kv);
int mx_kvstore_num_workers(const mx_kvstore *kv);
/* Waits until every worker gets here (returns at once when local). */
mx_status mx_kvstore_barrier(mx_kvstore *kv);
/* Waits until every collective the store has started has completed
 * (returns at once for kinds without any). A caller that issues
 * collectives of its own on the same communicator (metrics summed over the
 * ranks, say) calls this first, so that every rank's communication thread
 * sees them in the same order after the store's. */
mx_status mx_kvstore_wait_comm(mx_kvstore *kv);

/* Whether the weights live on a parameter server (dist_async): workers'
 * copies lag behind it, and on the server's rank (0) mx_kvstore_stored
 * gives the server's arrays, which checkpoints save. */
bool mx_kvstore_has_server(const mx_kvstore *kv);
/* Kinds whose updater runs on another thread (dist_async's server, on its
 * rank) hold it between two requests until unlock, so the caller may use
 * the updater's state (the optimizer: its states, its learning rate) and
 * read or write the stored values. No effect for the other kinds. Calls
 * nest. */
void mx_kvstore_lock_updater(mx_kvstore *kv);
void mx_kvstore_unlock_updater(mx_kvstore *kv);

/* ------------------------------------------------- implementing a kind
 * A kind is a table of these; kvstore.c checks arguments common to all
 * (key range, counts, NULL arrays) before calling them. */
typedef struct mx_kvstore_ops {
    const char *name;
    mx_status (*create)(mx_runtime *rt, const mx_kvstore_options *opts, void **state);
    void (*free)(void *state);
    mx_status (*init)(void *state, int key, mx_ndarray *value);
    mx_status (*push)(void *state, int key, mx_ndarray *const *values, int n, int priority,
                      const mx_kvstore_updater *updater);
    mx_status (*pull)(void *state, int key, mx_ndarray *const *outs, int n, int priority);
    mx_ndarray *(*stored)(void *state, int key);
    int (*rank)(const void *state);
    int (*num_workers)(const void *state);
    mx_status (*barrier)(void *state);
    mx_status (*wait_comm)(void *state); /* NULL: nothing to wait for */
    /* Optional: told of every change of the updater (kinds that apply it
     * away from push, on a server). */
    void (*set_updater)(void *state, const mx_kvstore_updater *updater);
    void (*hold_updater)(void *state, bool hold); /* optional: mx_kvstore_lock_updater */
    bool has_server;
    bool fuses; /* sums gradients in buckets: takes mx_kvstore_options.fusion_bytes */
} mx_kvstore_ops;

extern const mx_kvstore_ops mx_kvstore_local_ops;
extern const mx_kvstore_ops mx_kvstore_device_ops;
extern const mx_kvstore_ops mx_kvstore_dist_sync_ops;
extern const mx_kvstore_ops mx_kvstore_dist_sync_device_ops;
extern const mx_kvstore_ops mx_kvstore_dist_async_ops;

#endif /* MX_KVSTORE_H */
