/* name_index.c - the name -> id hash index (base.h). */
#include "base/base.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint32_t name_hash(const char *s)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

void mx_name_index_init(mx_name_index *x, mx_name_of_fn name_of, const void *ctx)
{
    memset(x, 0, sizeof(*x));
    x->name_of = name_of;
    x->ctx = ctx;
}

void mx_name_index_free(mx_name_index *x)
{
    free(x->slots);
    x->slots = NULL;
    x->cap = x->count = 0;
}

/* The slot holding `name`, or the free slot where it would go. */
static uint32_t find_slot(const mx_name_index *x, const char *name)
{
    uint32_t mask = x->cap - 1;
    for (uint32_t i = name_hash(name) & mask;; i = (i + 1) & mask)
        if (x->slots[i] == MX_NAME_NONE || !strcmp(x->name_of(x->ctx, x->slots[i]), name)) return i;
}

void mx_name_index_put(mx_name_index *x, uint32_t id)
{
    uint32_t i = find_slot(x, x->name_of(x->ctx, id));
    if (x->slots[i] != MX_NAME_NONE) return;
    x->slots[i] = id;
    x->count++;
}

mx_status mx_name_index_reserve(mx_name_index *x, uint32_t n, uint32_t n_existing)
{
    if ((uint64_t)n * 2 < x->cap) return MX_OK;
    uint64_t cap = x->cap ? x->cap : 64;
    while ((uint64_t)n * 2 >= cap) cap *= 2;
    if (cap > ((uint64_t)1 << 31)) return MX_ERROR(MX_ERR_NOMEM, "name index: too many names (%u)", n);
    uint32_t *slots = mx_malloc((size_t)cap * sizeof(*slots));
    if (!slots) return mx_last_status();
    memset(slots, 0xff, (size_t)cap * sizeof(*slots)); /* MX_NAME_NONE everywhere */
    free(x->slots);
    x->slots = slots;
    x->cap = (uint32_t)cap;
    x->count = 0;
    for (uint32_t id = 0; id < n_existing; id++) mx_name_index_put(x, id);
    return MX_OK;
}

/* Backward-shift deletion keeps every probe chain whole without tombstones. */
void mx_name_index_drop(mx_name_index *x, uint32_t id)
{
    if (!x->cap) return;
    uint32_t mask = x->cap - 1;
    uint32_t i = find_slot(x, x->name_of(x->ctx, id));
    if (x->slots[i] != id) return; /* an earlier id owns the name */
    for (uint32_t j = (i + 1) & mask; x->slots[j] != MX_NAME_NONE; j = (j + 1) & mask) {
        uint32_t home = name_hash(x->name_of(x->ctx, x->slots[j])) & mask;
        /* j's entry may fill the hole unless its home lies in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            x->slots[i] = x->slots[j];
            i = j;
        }
    }
    x->slots[i] = MX_NAME_NONE;
    x->count--;
}

uint32_t mx_name_index_find(const mx_name_index *x, const char *name)
{
    if (!x->cap) return MX_NAME_NONE;
    return x->slots[find_slot(x, name)];
}
