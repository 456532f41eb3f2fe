/*
 * config.h - the net config compiler: one INI file (../shared/spec/config.md)
 * parsed with inih into sections of located key = value pairs, overrides
 * applied, and the network compiled into a symbol graph. mxtrain,
 * mxpredict and mxviz all load configs through mx_config_load.
 *
 * The settings sections ([train], [val], [optimizer], [fit]) are not typed
 * here: each belongs to the module that uses it and is parsed by that
 * module's own table from mx_config_section_input() (lib/io's iterator
 * kinds, lib/optimizer's optimizers and schedules, lib/train's [fit]), so
 * no key can be accepted here and lost on its way there.
 *
 * Every mistake is reported as one line
 *     FILE:LINE: [section] key: what is wrong (did you mean 'x'?)
 * or, for a SECTION.KEY=VALUE override, "command line: [section] key: ...".
 * The library never prints: the line is the thread's mx_last_error().
 *
 * Syntax decisions (the README documents the same):
 *   - Comments: a line starting with ';' or '#', or ';' after whitespace.
 *     Indentation is ignored (no multi-line values). A key=value line may
 *     hold at most MX_CONFIG_MAX_LINE characters after comments are cut.
 *   - Sections: [net], [layer NAME] (NAME: letters, digits, _ - . /),
 *     [train], [val], [optimizer], [fit]. Each at most once; layer names
 *     are unique. Keys are unique within a section.
 *   - [net]: inputs = data, extra (data inputs; default "data");
 *     outputs = LAYER[:K], ... (the symbol's heads; default: the last
 *     layer). A layer that does not lead to an output is an error.
 *   - [layer NAME]: op (an MXNet operator name or a CXXNet alias, below),
 *     input = LAYER, LAYER:K, DATA (default: the previous layer, or the
 *     first data input for the first layer), label = VAR (loss layers only;
 *     default NAME_label), lr_mult, wd_mult (stored as __lr_mult__ /
 *     __wd_mult__ on the layer, inherited by its weights as in MXNet),
 *     INPUT_init = INITIALIZER for any parameter input of the op
 *     (weight_init, bias_init, gamma_init, beta_init...; stored as the
 *     variable's __init__ in MXNet's JSON form). Every other key is an
 *     operator parameter checked against the op's table. Variadic ops
 *     (Concat, ElementWiseSum) get num_args from the input count.
 *   - Aliases (CXXNet names): conv, fullc, relu, sigmoid, tanh, softplus,
 *     max_pooling, avg_pooling, sum_pooling, flatten, dropout, batch_norm,
 *     lrn, concat, ch_concat, split, prelu, elu, l2_loss,
 *     multi_logistic. An alias may preset parameters (relu is Activation
 *     with act_type=relu); presets cannot be overridden in the section.
 *     `softmax` is MXNet's plain softmax function, not an alias of
 *     SoftmaxOutput.
 *   - INPUT_init values are lib/initializer's config form, NAME or
 *     NAME(key=value, ...) (mx_initializer_parse).
 *   - [train], [val], [optimizer], [fit]: read by their owners (above);
 *     this file checks only the INI structure, names and overrides.
 *   - Overrides: "SECTION.KEY=VALUE" with SECTION one of net, train, val,
 *     optimizer, fit, or a layer as "layer.NAME.KEY=VALUE" or
 *     "NAME.KEY=VALUE" (when NAME is not one of those section names). An
 *     override replaces the file's value or adds the key; a section it names
 *     that the file lacks is created (train, val, optimizer, fit, net) or is
 *     an error (layers).
 */
#ifndef MX_CONFIG_H
#define MX_CONFIG_H

#include "params/params.h"
#include "symbol/symbol.h"

#include <stdbool.h>

#define MX_CONFIG_MAX_LINE 190    /* characters of a key = value line */
#define MX_CONFIG_MAX_BYTES (16u << 20)
#define MX_CONFIG_MAX_INPUTS 16   /* [net] inputs */

/* ------------------------------------------------------------ the config */

typedef struct mx_config_layer {
    const char *name;
    const char *op;     /* the MXNet operator name (aliases resolved) */
    int line;           /* line of its [layer NAME] header; 0: none */
    uint32_t node;      /* its node in the graph */
} mx_config_layer;

typedef struct mx_config_priv mx_config_priv;

typedef struct mx_config {
    const char *path;                 /* as given to mx_config_load */
    mx_graph *graph;                  /* the network; heads = [net] outputs */
    const char *name;                 /* [net] name, or the file's base name */
    const char *inputs[MX_CONFIG_MAX_INPUTS]; /* [net] inputs: "data" */
    int n_inputs;
    const mx_config_layer *layers;    /* in file order */
    int n_layers;
    mx_config_priv *priv;
} mx_config;

/* Loads and compiles a config; overrides are "SECTION.KEY=VALUE" strings
 * (n may be 0). On failure *out is NULL and the one-line message is in
 * mx_last_error(): MX_ERR_IO when the file cannot be read, MX_ERR_INVALID
 * for every mistake in it. */
mx_status mx_config_load(const char *path, const char *const *overrides, int n_overrides, mx_config **out);
/* The same from memory; `name` stands for the file name in messages. The
 * text may hold any bytes (NULs, binary garbage): those are errors. */
mx_status mx_config_parse(const char *name, const char *text, size_t len, const char *const *overrides,
                          int n_overrides, mx_config **out);
void mx_config_free(mx_config *cfg);

/* The layer with this name, or NULL. */
const mx_config_layer *mx_config_find_layer(const mx_config *cfg, const char *name);

/* "FILE:LINE: [section] key" (or "command line: [section] key", or
 * "FILE: [section] key" when the key is absent) into buf, for callers that
 * report a problem with a setting later (an unreadable data file). section
 * is "train", "fit", "layer conv1"... Returns buf. */
const char *mx_config_where(const mx_config *cfg, const char *section, const char *key, char *buf, size_t size);

/* Whether the file (or an override) has the settings section ("train",
 * "val", "optimizer", "fit"). */
bool mx_config_has_section(const mx_config *cfg, const char *section);

/* A settings section's keys as written (overrides applied), in file order,
 * values trimmed, each with its location ("net.conf:12: [train]
 * batch_size", "command line: [fit] num_epoch"), for the parser of the
 * module that owns the section (lib/io for [train] and [val], lib/optimizer
 * for [optimizer], lib/train for [fit]). An absent section gives no pairs
 * and the location "FILE: [section]". The arrays live as long as cfg. */
void mx_config_section_input(const mx_config *cfg, const char *section, mx_param_input *out);

/* mx_graph_infer_shapes on the config's graph; an error is reported at the
 * failing layer's header line: "FILE:LINE: [layer conv2]: <why>". */
mx_status mx_config_infer_shapes(const mx_config *cfg, const char *const *names, const mx_shape *shapes, int n,
                                 mx_graph_shapes *out);

/* True when `arg` looks like an override "SECTION.KEY=VALUE" (a dotted key
 * before '=', not starting with '-'), for tools that take overrides among
 * other arguments. */
bool mx_config_is_override(const char *arg);

#endif /* MX_CONFIG_H */
