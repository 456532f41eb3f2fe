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
/* Key/value pairs to parse, and where each came from. A config fills
 * `where` so that messages point at the file and line
 *     "net.conf:12: [train] batch_size: bad value 'x': expected an integer"
 * while a program that builds the pairs itself leaves it NULL and messages
 * name the owner ("mnist: parameter 'batch_size' has bad value 'x': ...").
 * Every module that takes a config section parses it through this, with
 * its own table, so the config keeps no copy of any module's keys. */
typedef struct mx_param_input {
    int n;
    const char *const *keys;
    const char *const *values;
    const char *const *where; /* per pair "FILE:LINE: [section] key", or NULL */
    const char *section;      /* with where: "FILE:LINE: [section]", where a missing key is named */
} mx_param_input;

/* mx_params_parse over an input. Located messages read
 *   "WHERE: bad value 'v': why", "WHERE: unknown key (did you mean 'x'?)",
 *   "SECTION key: required key is missing (OWNER)";
 * plain ones are mx_params_parse's. given (NULL, or n_table flags) tells
 * which rows the input set. */
mx_status mx_params_parse_input(const char *owner, const mx_param_desc *table, int n_table, size_t size,
                                const mx_param_input *in, void *out, bool *given);

/* Records a problem with the value of `key` found after parsing (a check
 * across keys, a structured value its owner rejected): "WHERE: message"
 * when the input is located (the section's location when the key is not
 * among the pairs), else "OWNER: parameter 'key': message". Returns code. */
mx_status mx_params_blame(const mx_param_input *in, const char *owner, const char *key, mx_status code,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The index of key in the input, or -1. */
int mx_param_input_find(const mx_param_input *in, const char *key);

/* The pairs of an input that a caller keeps (keep[i]), in their own arrays
 * (strings still borrowed from the input): for a section whose keys go to
 * several tables (an optimizer and its schedule). */
typedef struct mx_param_subset {
    mx_param_input in;
    const char **keys, **values, **where;
} mx_param_subset;
mx_status mx_param_input_subset(const mx_param_input *in, const bool *keep, mx_param_subset *out);
void mx_param_subset_free(mx_param_subset *s);

/* The call syntax of initializers and metrics in a config,
 * NAME or NAME(key=value, ...), values optionally quoted as in Python
 * ('gaussian'); brackets nest, so values may be tuples. The pieces are
 * copies owned by `out`. Errors (MX_ERR_INVALID) say what is wrong in the
 * text without a location. */
typedef struct mx_param_call {
    char *name;
    int n;
    char **keys, **values;
} mx_param_call;
mx_status mx_param_call_parse(const char *text, mx_param_call *out);
void mx_param_call_free(mx_param_call *c);

/* Parses one value for one descriptor into its field of `params`. */
mx_status mx_params_parse_one(const char *owner, const mx_param_desc *desc, const char *value, void *params);
/* The descriptor named key in table, or NULL. */
const mx_param_desc *mx_params_find(const mx_param_desc *table, int n_table, const char *key);
/* Writes a field in MXNet's str() form ("(3, 3)", "True", "0.9"). */
const char *mx_params_format(const mx_param_desc *desc, const void *params, char *buf, size_t size);

#endif /* MX_PARAMS_H */
