/*
 * params.h - parameters declared as data (MXNet's DMLC_DECLARE_FIELD), and
 * the one parser every table goes through: operators, iterators,
 * optimizers, initializers, metrics. A table lists name, type, default,
 * range, choices and the field's offset in the owner's params struct; the
 * parser applies defaults, checks types and ranges, rejects unknown and
 * duplicate keys with a "did you mean" suggestion, and names the owner,
 * key and value in every error.
 */
#ifndef MX_PARAMS_H
#define MX_PARAMS_H

#include "base/base.h"
#include "ndarray/ndarray.h" /* MX_MAX_NDIM */

#include <stdbool.h>

typedef enum mx_param_type {
    MX_PARAM_INT,    /* int64_t */
    MX_PARAM_FLOAT,  /* double */
    MX_PARAM_BOOL,   /* bool: true/false/1/0/True/False */
    MX_PARAM_TUPLE,  /* mx_tuple: "(3, 3)", "3,3", "[3,3]", "3", "()" */
    MX_PARAM_ENUM,   /* int: index into `choices` */
    MX_PARAM_STRING, /* char[MX_PARAM_STRING_MAX] */
} mx_param_type;

#define MX_PARAM_STRING_MAX 4096 /* file paths are string parameters */

typedef struct mx_tuple {
    int ndim;                 /* -1: None / unset */
    int64_t v[MX_MAX_NDIM];
} mx_tuple;

typedef struct mx_param_desc {
    const char *name;
    mx_param_type type;
    const char *default_value;   /* NULL: required */
    double min, max;             /* inclusive range for INT/FLOAT and each
                                    TUPLE element; min > max: unchecked */
    const char *const *choices;  /* ENUM: NULL-terminated names */
    size_t offset;               /* offsetof(params struct, field) */
    const char *doc;
} mx_param_desc;

/* Parses key/value strings into `out` (size bytes) per `table`, then
 * applies defaults for keys not given. Errors (MX_ERR_INVALID) read
 * "OWNER: unknown parameter 'k' (did you mean 'x'?)",
 * "OWNER: parameter 'k' has bad value 'v': why",
 * "OWNER: required parameter 'k' is missing", "... given twice". */
mx_status mx_params_parse(const char *owner, const mx_param_desc *table, int n_table, size_t size,
                          const char *const *keys, const char *const *values, int n, void *out);
/* Parses one value for one descriptor into its field of `params`. */
mx_status mx_params_parse_one(const char *owner, const mx_param_desc *desc, const char *value, void *params);
/* The descriptor named key in table, or NULL. */
const mx_param_desc *mx_params_find(const mx_param_desc *table, int n_table, const char *key);
/* Writes a field in MXNet's str() form ("(3, 3)", "True", "0.9"). */
const char *mx_params_format(const mx_param_desc *desc, const void *params, char *buf, size_t size);

#endif /* MX_PARAMS_H */
