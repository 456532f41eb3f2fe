/*
 * settings.h - what mxtrain runs with besides the network: a config's
 * [train] and [val] (parsed by lib/io's iterator kinds), [optimizer]
 * (lib/optimizer's optimizer and schedule tables) and [fit] (the table
 * below, owned here; its structured values are read by their modules:
 * contexts by lib/device, the kvstore name by lib/kvstore, the initializer
 * by lib/initializer, metrics by lib/metric). Each section is parsed once,
 * by its owner, and the result is what that owner later runs with.
 *
 * [fit] keys (defaults in brackets):
 *   num_epoch [10], ctx [cpu], kvstore [local], model_prefix [""],
 *   save_period [1], initializer [xavier(rnd_type=gaussian, factor_type=in,
 *   magnitude=2)], metric [acc], seed [0], disp_batches [20],
 *   load_epoch [-1], finetune_from [""], fixed_params [""],
 *   grad_accum [1], check_numerics [0], dtype [float32], cuda_graph [1] (GPU), work_load_list [""],
 *   stall_timeout [60] (under mpirun), fusion_bytes [0: 1 MiB] (dist_sync
 *   kinds), profile [""], profile_batches [""],
 *   max_skip_fraction [0.01].
 *
 * fit.profile = FILE.json writes a Chrome-trace timeline of every engine
 * operation and MPI collective (lib/profile) of the batches named by
 * fit.profile_batches: "A-B" is batches A to B inclusive, "N" the first N
 * (batches 0 to N-1), "" every batch; batches are numbered from 0 over the
 * whole run (epoch after epoch), as this run trains them. Under mpirun
 * every rank writes its own file, FILE with ".rankR" before its extension
 * (prof.json: prof.rank0.json, prof.rank1.json), pid = R in each.
 */
#ifndef MX_TRAIN_SETTINGS_H
#define MX_TRAIN_SETTINGS_H

#include "config/config.h"
#include "initializer/initializer.h"
#include "io/io.h"
#include "metric/metric.h"
#include "optimizer/optimizer.h"

/* [fit] as its table parses it. */
typedef struct mx_fit_params {
    int64_t num_epoch;
    char ctx[MX_PARAM_STRING_MAX];          /* lib/device's context list */
    char kvstore[MX_PARAM_STRING_MAX];      /* a lib/kvstore kind */
    char model_prefix[MX_PARAM_STRING_MAX]; /* "": no checkpoints */
    int64_t save_period;                    /* epochs between checkpoints */
    char initializer[MX_PARAM_STRING_MAX];  /* lib/initializer's NAME(k=v, ...) */
    char metric[MX_PARAM_STRING_MAX];       /* lib/metric's list */
    int64_t seed;                           /* initialization and Dropout */
    int64_t disp_batches;                   /* batches per progress line */
    int64_t load_epoch;                     /* -1: from scratch */
    char finetune_from[MX_PARAM_STRING_MAX]; /* PREFIX-NNNN.params to start from ("" none) */
    char fixed_params[MX_PARAM_STRING_MAX];  /* glob patterns of frozen parameters */
    int64_t grad_accum;                     /* batches summed into one update */
    bool check_numerics;                    /* check every layer every batch */
    int dtype;                              /* compute type: index of float32, float16, bfloat16 */
    bool cuda_graph;                        /* GPU: passes as CUDA graphs where they can be captured */
    char work_load_list[MX_PARAM_STRING_MAX]; /* share of each context in a batch ("" equal) */
    double stall_timeout;                   /* mpirun: seconds a rank may be missing from a collective */
    int64_t fusion_bytes;                   /* dist_sync kinds' bucket size (0: the kvstore's default) */
    char profile[MX_PARAM_STRING_MAX];      /* timeline file ("" none) */
    char profile_batches[MX_PARAM_STRING_MAX]; /* "A-B", "N" or "" (all) */
    double max_skip_fraction;               /* corrupt data an iterator may skip before it is an error */
} mx_fit_params;

/* The [fit] table (for --help output and the tests that walk every key). */
const mx_param_desc *mx_fit_param_table(int *n);

typedef struct mx_train_settings {
    const mx_config *cfg;            /* borrowed: the network and locations */
    mx_data_iter_spec *train, *val;  /* NULL when the section is absent */
    mx_optimizer_spec optimizer;
    mx_fit_params fit;
    mx_context *ctx;                 /* fit.ctx */
    int n_ctx;
    double *work_load;               /* fit.work_load_list, one per context; NULL: equal shares */
    mx_initializer *initializer;     /* fit.initializer */
    mx_metric_spec *metrics;         /* fit.metric */
    int n_metrics;
    char **fixed;                    /* fit.fixed_params, one pattern each */
    int n_fixed;
    int64_t profile_first, profile_last; /* fit.profile_batches: batches first..last (last -1: to the end) */
} mx_train_settings;

/* Parses every settings section of cfg through its owner. Errors are
 * MX_ERR_INVALID (or MX_ERR_UNSUPPORTED for a value this build cannot
 * serve) with the file, line, section and key. Availability (a GPU this
 * machine lacks) is checked when training starts, so a config for another
 * machine can still be drawn and dry-run. */
mx_status mx_train_settings_load(const mx_config *cfg, mx_train_settings **out);
void mx_train_settings_free(mx_train_settings *s);

/* Under mpirun with several ranks on this rank's host (local_size > 1)
 * and several GPUs in fit.ctx, each rank trains on one of them: the one at
 * its local rank (fit.ctx = gpu:0-3 with 4 ranks a host: local rank r
 * takes gpu(r), Horovod's pinning), so s->ctx becomes that one context. A
 * list of several GPUs but fewer than the host's ranks, or
 * fit.work_load_list (shares of several contexts of one process), is
 * MX_ERR_INVALID naming the host. Left as they are: CPU contexts, a single
 * GPU (every rank takes it: with a per-rank CUDA_VISIBLE_DEVICES, as
 * cluster schedulers set it, its own), and a rank alone on its host (which
 * keeps every listed GPU, as MXNet's dist_device_sync workers do). */
mx_status mx_train_settings_for_rank(mx_train_settings *s, int local_rank, int local_size, const char *host);

/* Whether a parameter name is frozen by fit.fixed_params. */
bool mx_train_settings_fixed(const mx_train_settings *s, const char *name);

/* fit.dtype: MX_FLOAT32, MX_FLOAT16 or MX_BFLOAT16. */
mx_dtype mx_train_settings_dtype(const mx_train_settings *s);
/* Whether training updates each parameter inside the backward pass, as
 * soon as its gradient is final, with the gradient in the executor's plan
 * instead of an array held through the step (mx_bind_config's
 * update_in_backward): one CPU context, no dist store (the weights are
 * updated in place), one batch per update (grad_accum 1), no float16 (its
 * loss scaling checks every gradient before any update) and
 * MXC_UPDATE_IN_BACKWARD not 0. Otherwise *why_not (if given) says why. */
bool mx_train_settings_update_in_backward(const mx_train_settings *s, const char **why_not);

/* The iterator to take input shapes from: [train], else [val], or NULL. */
const mx_data_iter_spec *mx_train_settings_shape_source(const mx_train_settings *s);

#endif /* MX_TRAIN_SETTINGS_H */
