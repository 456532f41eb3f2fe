/*
 * initializer.h - MXNet 1.9.1's weight initializers (initializer.py):
 * xavier, msraprelu (alias msra), uniform, normal, constant, zero, one,
 * with MXNet's parameter names and defaults, one registry table.
 *
 * An initializer fills an array according to its variable's name, as
 * MXNet's Initializer.__call__ does:
 *   ...weight        the initializer's pattern (random for xavier etc.)
 *   ...bias          0          ...gamma         1
 *   ...beta          0          ...moving_mean   0
 *   ...moving_var    1          ...moving_inv_var 0
 *   ...moving_avg    0          ...min           0
 *   ...max           1
 * (moving_mean / moving_var reach MXNet's initializer with __init__
 * attributes "zero" / "one" set by BatchNorm; the result is the same.)
 * Any other name is MX_ERR_INVALID, as MXNet refuses it. A variable with an
 * explicit initializer (its __init__ attribute, or a config INPUT_init)
 * takes that initializer's weight pattern whatever its name.
 *
 * Patterns:
 *   xavier     fan_in = shape[1] * prod(shape[2:]), fan_out = shape[0] * prod(shape[2:]);
 *              factor = (fan_in + fan_out)/2 (avg), fan_in (in) or fan_out (out);
 *              scale = sqrt(magnitude / factor); U(-scale, scale) (uniform)
 *              or N(0, scale^2) (gaussian). Needs at least 2 dimensions.
 *   msraprelu  xavier(gaussian, factor_type, magnitude = 2 / (1 + slope^2))
 *   uniform    U(-scale, scale)        normal   N(0, sigma^2)
 *   constant   value                   zero, one: 0, 1
 * Random draws come from an mx_rng (seeded, pushed through the engine), so a
 * seed reproduces the same values with any number of workers. Arrays on a
 * GPU are drawn on the CPU and copied.
 */
#ifndef MX_INITIALIZER_H
#define MX_INITIALIZER_H

#include "ndarray/ndarray.h"
#include "params/params.h"

typedef enum mx_init_rnd_type { MX_INIT_UNIFORM_RND = 0, MX_INIT_GAUSSIAN_RND = 1 } mx_init_rnd_type;
typedef enum mx_init_factor_type { MX_INIT_AVG = 0, MX_INIT_IN = 1, MX_INIT_OUT = 2 } mx_init_factor_type;

/* Parameters of every initializer (MXNet's keyword names); each kind reads
 * its own. */
typedef struct mx_initializer_params {
    int rnd_type;       /* xavier: uniform (mx_init_rnd_type) */
    int factor_type;    /* xavier, msraprelu: avg (mx_init_factor_type) */
    double magnitude;   /* xavier: 3 */
    double slope;       /* msraprelu: 0.25 */
    double scale;       /* uniform: 0.07 */
    double sigma;       /* normal: 0.01 */
    double value;       /* constant: required in the string form (0 in defaults) */
} mx_initializer_params;

typedef struct mx_initializer mx_initializer;

/* What a variable name asks for. */
typedef enum mx_init_pattern {
    MX_INIT_PATTERN_WEIGHT = 0, /* the initializer's own pattern */
    MX_INIT_PATTERN_ZERO,
    MX_INIT_PATTERN_ONE,
} mx_init_pattern;

/* The pattern for a variable name by MXNet's suffix rules (table above);
 * MX_ERR_INVALID for a name none matches. */
mx_status mx_init_pattern_for(const char *name, mx_init_pattern *out);

/* Names: "xavier", "msraprelu" ("msra"), "uniform", "normal", "constant",
 * "zero" ("zeros"), "one" ("ones"); case does not matter. */
mx_status mx_initializer_defaults(const char *name, mx_initializer_params *out);
mx_status mx_initializer_create(const char *name, const mx_initializer_params *params, mx_initializer **out);
mx_status mx_initializer_create_kv(const char *name, const char *const *keys, const char *const *values, int n,
                                   mx_initializer **out);
/* From MXNet's dumps() form, the value of an __init__ attribute:
 * ["xavier", {"rnd_type": "gaussian", "factor_type": "in", "magnitude": 2}]
 * (numbers may be given as numbers or strings). MX_ERR_INVALID otherwise. */
mx_status mx_initializer_create_json(const char *json, mx_initializer **out);
/* The config form: NAME or NAME(key=value, ...), e.g.
 * "xavier(rnd_type=gaussian, factor_type=in, magnitude=2)", "normal(sigma=0.02)",
 * "constant(value=0.1)" (constant needs its value). Each kind's own table
 * checks the arguments. Messages say what is wrong without a location. */
mx_status mx_initializer_parse(const char *text, mx_initializer **out);
void mx_initializer_free(mx_initializer *init);

const char *mx_initializer_name(const mx_initializer *init);
const mx_initializer_params *mx_initializer_get_params(const mx_initializer *init);
/* MXNet's dumps(): the JSON above, into buf; returns buf. */
const char *mx_initializer_dumps(const mx_initializer *init, char *buf, size_t size);
/* The registered names, in table order (NULL past the end). */
const char *mx_initializer_name_at(int i);
/* The parameter table of initializer `name` (for --help output). */
mx_status mx_initializer_param_table(const char *name, const mx_param_desc **table, int *n);

/* Initializes arr for the variable `name`: with `explicit_init` (non-NULL)
 * its weight pattern, else this initializer's by the suffix rules. Pushes
 * the fill or draw and returns. Errors: MX_ERR_INVALID (unknown name
 * pattern, xavier on fewer than 2 dimensions), MX_ERR_UNSUPPORTED (dtypes
 * other than float32/float64 for random patterns). */
mx_status mx_initializer_init(const mx_initializer *init, mx_rng *rng, const char *name,
                              const mx_initializer *explicit_init, mx_ndarray *arr);
/* The weight pattern of init on arr, whatever its name (name is for
 * messages). */
mx_status mx_initializer_init_weight(const mx_initializer *init, mx_rng *rng, const char *name, mx_ndarray *arr);

/* Xavier's fans for a shape (MX_ERR_INVALID below 2 dimensions). */
mx_status mx_init_xavier_fans(const mx_shape *shape, double *fan_in, double *fan_out);

#endif /* MX_INITIALIZER_H */
