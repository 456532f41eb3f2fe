/*
 * metric.h - MXNet 1.9.1's evaluation metrics (metric.py) on host arrays:
 * accuracy, top-k accuracy, cross-entropy, MSE, MAE, RMSE, one registry
 * table with MXNet's names, parameters and display names.
 *
 * A metric accumulates (sum, count) over update() calls, twice: the local
 * pair (reset by mx_metric_reset_local, e.g. at every progress line) and
 * the global one (reset by mx_metric_reset, e.g. every epoch); get()
 * returns sum / count, NaN before any update. Per update, with labels and
 * predictions as float arrays and their shapes:
 *   acc        pred (N, C, ...): argmax over `axis` (first maximum on
 *              ties); a pred shaped like the labels holds class ids. Both
 *              truncate to int32 as MXNet's astype('int32'). sum += matches,
 *              count += N.
 *   top_k_acc  pred (N, C): a sample counts if its label is among the k
 *              highest scores (k = min(top_k, C); ties rank the higher
 *              class index first, as a stable sort). count += N.
 *   ce         -log(pred[i, label_i] + eps) summed; count += N.
 *   mse, mae   mean over the batch of (label - pred)^2 or |label - pred|
 *              (1-D arrays count as (N, 1); an (N, 1) side broadcasts
 *              against (N, K)); sum += that mean, count += 1: the result
 *              averages batch means, as MXNet 1.9.1.
 *   rmse       sum += sqrt(batch mean of (label - pred)^2), count += 1.
 * Sums are kept in double.
 */
#ifndef MX_METRIC_H
#define MX_METRIC_H

#include "ndarray/ndarray.h"
#include "params/params.h"

/* Parameters of every metric (MXNet's keyword names). */
typedef struct mx_metric_params {
    int64_t axis;  /* acc: 1 */
    int64_t top_k; /* top_k_acc: required, >= 2 (MXNet asserts top_k > 1) */
    double eps;    /* ce: 1e-12 */
} mx_metric_params;

typedef struct mx_metric mx_metric;

/* Names: "acc" ("accuracy"), "top_k_acc" ("top_k_accuracy"), "ce"
 * ("cross-entropy", "crossentropy"), "mse", "mae", "rmse". */
mx_status mx_metric_defaults(const char *name, mx_metric_params *out);
mx_status mx_metric_create(const char *name, const mx_metric_params *params, mx_metric **out);
mx_status mx_metric_create_kv(const char *name, const char *const *keys, const char *const *values, int n,
                              mx_metric **out);
void mx_metric_free(mx_metric *m);
/* The parameter table of metric `name` (for --help output). */
mx_status mx_metric_param_table(const char *name, const mx_param_desc **table, int *n);

/* One metric of a config's list: a registered name and its parameters. */
typedef struct mx_metric_spec {
    const char *name;     /* the registry's name ("acc", "top_k_acc", ...) */
    mx_metric_params params;
} mx_metric_spec;

/* A config's metric list, "acc, top_k_acc:5, ce(eps=1e-10)": items
 * NAME, NAME(key=value, ...) or NAME:K for top_k_acc's k; each checked by
 * its kind's table; a metric listed twice with the same parameters is an
 * error. *out is malloc'ed (free()). Messages say what is wrong without a
 * location. */
mx_status mx_metric_parse_list(const char *text, mx_metric_spec **out, int *n);
/* The registered names, in table order (NULL past the end). */
const char *mx_metric_name_at(int i);
const mx_metric_params *mx_metric_get_params(const mx_metric *m);

/* MXNet's display name: "accuracy", "top_k_accuracy_5", "cross-entropy",
 * "mse", "mae", "rmse". */
const char *mx_metric_get_name(const mx_metric *m);

/* One batch: labels (label_shape) and predictions (pred_shape), host
 * float32 data. MX_ERR_INVALID when the shapes do not fit the metric or a
 * label is not a valid class index (ce); nothing is accumulated then. */
mx_status mx_metric_update(mx_metric *m, const float *labels, const mx_shape *label_shape, const float *preds,
                           const mx_shape *pred_shape);
/* The local value (since the last reset or reset_local); returns the name. */
const char *mx_metric_get(const mx_metric *m, double *value);
/* The global value (since the last reset). */
const char *mx_metric_get_global(const mx_metric *m, double *value);
void mx_metric_reset(mx_metric *m);
void mx_metric_reset_local(mx_metric *m);
/* The raw local / global (sum, count). */
void mx_metric_sums(const mx_metric *m, double *sum, double *count, double *global_sum, double *global_count);

#endif /* MX_METRIC_H */
