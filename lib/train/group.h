/*
 * group.h - the data-parallel executor group of the trainer (MXNet's
 * DataParallelExecutorGroup), internal to lib/train: one executor per
 * context, each computing its rows of every batch with its own copy of the
 * parameters, gradients and auxiliary states. The trainer sums the
 * gradients of all devices through the KVStore and pulls the same weights
 * back into every device, so the copies stay identical. One context is the
 * single-device case with no extra cost.
 */
#ifndef MX_TRAIN_GROUP_H
#define MX_TRAIN_GROUP_H

#include "executor/executor.h"

typedef struct train_device {
    mx_context ctx;
    int64_t offset, rows;     /* its slice of the batch */
    mx_ndarray **args;        /* per argument (graph list order), on ctx */
    mx_ndarray **grads;       /* per argument; NULL where no gradient or updated in backward */
    mx_ndarray **aux;         /* per auxiliary state */
    mx_executor *ex;
} train_device;

typedef struct train_group {
    int n;
    train_device *dev;
    int n_args, n_aux;
} train_group;

typedef struct train_group_config {
    mx_runtime *rt;
    const mx_graph *g;
    const mx_context *ctx;      /* n_ctx contexts */
    int n_ctx;
    const double *work_load;    /* relative share of each context; NULL: equal */
    const char *data_name, *label_name;
    mx_shape data_shape, label_shape; /* of the whole batch */
    const mx_grad_req *reqs;    /* per argument; NULL_REQ arguments get no gradient array */
    mx_rng *rng;
    bool no_folding;            /* mx_bind_config's (numerics tracing) */
    bool cuda_graph;            /* mx_bind_config's */
    /* mx_bind_config's (one context): arguments updated inside the
     * backward pass get no gradient array. */
    const bool *update_in_backward;
    mx_status (*update)(void *update_ctx, int arg, mx_ndarray *weight, mx_ndarray *grad);
    void *update_ctx;
} train_group_config;

/* MXNet's _split_input_slice: rows of each context for a batch, by
 * work_load (NULL: equal), rounded, the remainder to the last. Errors
 * (MX_ERR_INVALID) when a context would get no rows. */
mx_status train_group_slices(int64_t batch, const double *work_load, int n, int64_t *offsets, int64_t *rows);

/* Binds one training executor per context. Parameters are created
 * uninitialized; the trainer initializes device 0 and broadcasts. */
mx_status train_group_bind(const train_group_config *c, train_group *out);
void train_group_free(train_group *g);

/* Copies each device's rows of a batch into its data and label inputs. */
mx_status train_group_load(train_group *g, int data_arg, int label_arg, mx_ndarray *data, mx_ndarray *label);
mx_status train_group_forward(train_group *g, bool is_train);
mx_status train_group_backward(train_group *g);
mx_status train_group_set_check_numerics(train_group *g, bool on);
bool train_group_check_numerics(const train_group *g);
/* Each device's output 0 into its rows of out (shaped as the whole batch's output). */
mx_status train_group_gather(train_group *g, mx_ndarray *out);
/* Copies device 0's argument i (or aux state, aux true) to every other device. */
mx_status train_group_broadcast(train_group *g, int i, bool aux);

#endif /* MX_TRAIN_GROUP_H */
