/*
 * fuzz_json.c - the strict JSON reader (lib/json) that symbol JSON and
 * metadata files go through. Any bytes must give a tree or one error; a
 * tree is walked completely (every string's stated length readable).
 */
#include "fuzz.h"
#include "json/json.h"

static size_t walk(const mx_json *v, int depth)
{
    FUZZ_CHECK(depth < 100000, "%s", "depth");
    size_t n = 1;
    switch (v->type) {
    case MX_JSON_STRING: {
        FUZZ_CHECK(v->string != NULL && v->string[v->length] == '\0', "%s", "string not terminated");
        volatile char sink = 0;
        for (size_t i = 0; i < v->length; i++) sink ^= v->string[i];
        (void)sink;
        break;
    }
    case MX_JSON_ARRAY:
    case MX_JSON_OBJECT:
        for (int i = 0; i < v->count; i++) {
            if (v->type == MX_JSON_OBJECT) {
                FUZZ_CHECK(v->keys[i] != NULL, "%s", "null key");
                FUZZ_CHECK(mx_json_get(v, v->keys[i]) != NULL, "key '%s' not found", v->keys[i]);
            }
            n += walk(v->items[i], depth + 1);
        }
        break;
    default:
        break;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mx_json *v = NULL;
    if (mx_json_parse((const char *)data, size, &v) != MX_OK) return 0;
    FUZZ_CHECK(v != NULL, "%s", "no tree");
    (void)walk(v, 0);
    mx_json_free(v);
    return 0;
}
