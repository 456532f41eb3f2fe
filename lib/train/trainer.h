/*
 * trainer.h - what mxtrain does: fit a config's network on its [train]
 * iterator, evaluate [val], checkpoint and resume; plus --dry-run and
 * --time. Everything it runs with comes from mx_train_settings (each
 * section parsed by its owner). The library never prints: progress lines
 * go to a log callback.
 */
#ifndef MX_TRAINER_H
#define MX_TRAINER_H

#include "comm/comm.h"
#include "executor/executor.h"
#include "train/settings.h"

#include <signal.h>

typedef void (*mx_log_fn)(void *user, const char *line);

typedef struct mx_train_options {
    mx_log_fn log;            /* one line at a time, no newline; may be NULL */
    void *log_user;
    /* Called after every training batch (for a progress bar): batches done
     * in this epoch, batches per epoch (-1 unknown). May be NULL. */
    void (*progress)(void *user, int epoch, int64_t batch, int64_t per_epoch);
    bool resume;              /* continue from the newest checkpoint */
    const char *metrics_log;  /* JSON lines file, or NULL */
    int time_batches;         /* --time N */
    /* When *stop becomes non-zero (a signal handler sets it), training
     * finishes the batch in flight (with grad_accum, the update in flight),
     * saves PREFIX-interrupted.params and returns with result->stopped.
     * May be NULL. */
    volatile sig_atomic_t *stop;
    /* Under mpirun: the job's communicator (dist kvstores, each rank's part
     * of the data, metrics summed over the ranks, checkpoints by rank 0,
     * stop requests agreed between the ranks). NULL: one process. */
    mx_comm *comm;
} mx_train_options;

/* How a run ended. */
typedef struct mx_train_result {
    bool stopped;             /* by *stop */
    int epoch;                /* the epoch it stopped in */
    int64_t batch;            /* batches of that epoch done */
    char checkpoint[MX_PARAM_STRING_MAX + 64]; /* the file written at the stop ("" none: no model_prefix) */
} mx_train_result;

/* The interrupted-run checkpoint of a prefix: one file holding the
 * weights (arg:, aux:, which MXNet's load_checkpoint reads) and, under
 * "state:", the optimizer and trainer state, so it is complete or absent. */
const char *mx_train_interrupted_path(const char *prefix, char *buf, size_t size);

/* Memory plans of the config's network at its [train] batch size. */
typedef struct mx_train_report {
    int64_t batch_size;
    mx_memory_plan_stats train, predict;
    mx_memory_plan_stats train_mirror; /* training with backward mirroring (MXNET_BACKWARD_DO_MIRROR=1) */
    mx_memory_plan_stats train_segments; /* recomputing all but checkpoints (MXNET_BACKWARD_DO_MIRROR=2) */
    /* Training with every learnable parameter updated inside the backward
     * pass (mx_train_settings_update_in_backward): its gradients in the plan. */
    mx_memory_plan_stats train_updating;
} mx_train_report;
mx_status mx_train_plan_report(const mx_train_settings *s, mx_train_report *out);

/* Logs the layer table (output shapes, parameter counts), what
 * fine-tuning loads and freezes, and the memory report for training and
 * prediction. Reads no data. */
mx_status mx_train_dry_run(const mx_train_settings *s, const mx_train_options *opt);

/* Trains (or, with time_batches > 0, times every layer and returns).
 * Errors: MX_ERR_INVALID / MX_ERR_UNSUPPORTED for configuration problems
 * found at set-up (no loss layer, a context this machine lacks, an
 * unwritable model_prefix), else the failing step's status (MX_ERR_RUNTIME
 * when training diverges, naming the first layer that went non-finite).
 * result (may be NULL) says whether a stop request ended the run. */
mx_status mx_train_fit(const mx_train_settings *s, const mx_train_options *opt, mx_train_result *result);

#endif
