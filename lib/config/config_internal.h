/*
 * config_internal.h - what the parts of the config compiler share: the raw
 * document (sections of key = value entries with their line numbers, as
 * read by inih), error formatting, and the section compilers.
 */
#ifndef MX_CONFIG_INTERNAL_H
#define MX_CONFIG_INTERNAL_H

#include "config/config.h"

typedef enum cfg_kind {
    CFG_NET = 0,
    CFG_LAYER,
    CFG_TRAIN,
    CFG_VAL,
    CFG_OPTIMIZER,
    CFG_FIT,
    CFG_KIND_COUNT
} cfg_kind;

/* One key = value line, or an override (line 0). */
typedef struct cfg_entry {
    char *key;
    char *value;
    int line; /* 0: from the command line */
} cfg_entry;

typedef struct cfg_section {
    cfg_kind kind;
    char *name;  /* layer name; NULL for other kinds */
    char *title; /* "layer conv1", "train": how messages name it */
    int line;    /* header line; 0: created by an override */
    cfg_entry *entries;
    int n_entries, cap_entries;
    /* Settings sections: the entries as located pairs for their owner. */
    const char **keys, **values;
    char **where;
    char *where_section;
} cfg_section;

struct mx_config_priv {
    char *file; /* the name messages use */
    char *absent_where[CFG_KIND_COUNT]; /* "FILE: [fit]" for settings sections the file lacks */
    cfg_section *sections;
    int n_sections, cap_sections;
    mx_name_index section_titles; /* over sections[] by title: one look-up per header */
    char **strings; /* owned strings (names) */
    int n_strings, cap_strings;
    mx_config_layer *layers;
    int n_layers;
};

/* Records "LOC: [title] key: message" as the thread's error and returns
 * MX_ERR_INVALID. LOC is FILE:LINE (line > 0), "command line" (line 0) or
 * FILE (line < 0). title and key may be NULL. */
mx_status cfg_error(const mx_config_priv *p, int line, const char *title, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The entry for key in a section, or NULL. */
const cfg_entry *cfg_find(const cfg_section *s, const char *key);
/* A copy of s owned by the config (freed with it); NULL on no memory. */
const char *cfg_keep(mx_config_priv *p, const char *s);
/* The thread's last error message from another module, without its
 * "file.c:NN: " source prefixes, into buf; returns buf. */
const char *cfg_clean_error(char *buf, size_t size);

/* The network (net.c): [net] and the layers into cfg->graph. */
mx_status cfg_compile_net(mx_config *cfg);

/* Strict number parsing shared by the compilers: the whole text (blanks
 * around allowed) must be the number. */
bool cfg_parse_int(const char *text, int64_t *out);
bool cfg_parse_float(const char *text, double *out);
bool cfg_parse_bool(const char *text, bool *out);
/* "3,224,224", "(3, 224, 224)", "[3,224,224]", "3": up to MX_MAX_NDIM. */
bool cfg_parse_tuple(const char *text, mx_tuple *out);

/* Copies text without surrounding blanks into buf (truncating). */
void cfg_trim_copy(const char *text, size_t len, char *buf, size_t size);

#endif /* MX_CONFIG_INTERNAL_H */
