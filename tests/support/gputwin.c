/* gputwin.c - one graph on the CPU and on gpu(0) (gputwin.h). */
#include "support/gputwin.h"
#include "support/graphs.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float uniform(uint64_t *state, float lo, float hi)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return lo + (hi - lo) * (float)((*state >> 11) * 0x1.0p-53);
}

void gputwin_upload(gputwin *t)
{
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < t->n_args + t->n_aux; i++)
            ck_assert_int_eq(mx_ndarray_from_host(t->arr[d][i], t->host[i], sizeof(float) * (size_t)t->size[i]),
                             MX_OK);
}

void gputwin_bind(gputwin *t, mx_graph *g, mx_graph *bound, mx_shape data_shape, int n_classes, bool gpu_graph,
                  uint64_t *rng_state)
{
    memset(t, 0, sizeof(*t));
    ck_assert_int_eq(mx_runtime_create(NULL, &t->rt), MX_OK);
    t->g = g;
    t->bound = bound ? bound : g;
    mx_graph_shapes sh;
    const char *names[] = {"data"};
    ck_assert_msg(mx_graph_infer_shapes(g, names, &data_shape, 1, &sh) == MX_OK, "%s", mx_last_error());
    ck_assert_int_lt(mx_graph_num_nodes(g), GPUTWIN_MAX_INPUTS);
    t->n_args = mx_graph_list_arguments(g, t->ids);
    t->n_aux = mx_graph_list_aux(g, t->ids + t->n_args);
    for (int i = 0; i < t->n_args + t->n_aux; i++) {
        const mx_shape *s = mx_graph_entry_shape(&sh, test_entry(t->ids[i]));
        const char *name = mx_graph_node(g, t->ids[i])->name;
        t->size[i] = mx_shape_size(s);
        t->host[i] = malloc(sizeof(float) * (size_t)t->size[i]);
        /* With unscaled weights LeNet's logits reach tens, and the 1e-4
         * relative error of cuDNN's Winograd and FFT algorithms (which its
         * timing may pick) grew to 2% in a softmax output. */
        const float scale = s->ndim >= 2 && !strstr(name, "data") ? 1.0f / sqrtf((float)(t->size[i] / s->dims[0])) : 1.0f;
        for (int64_t k = 0; k < t->size[i]; k++)
            t->host[i][k] = strstr(name, "label")        ? (float)(k % n_classes)
                            : strstr(name, "moving_var")  ? 1.0f
                            : strstr(name, "moving_mean") ? 0.0f
                            : strstr(name, "gamma")       ? uniform(rng_state, 0.5f, 1.5f)
                                                          : scale * uniform(rng_state, -1.0f, 1.0f);
        for (int d = 0; d < 2; d++) {
            mx_context ctx = d ? mx_gpu(0) : mx_cpu();
            ck_assert_msg(mx_ndarray_create(t->rt, *s, MX_FLOAT32, ctx, &t->arr[d][i]) == MX_OK, "%s",
                          mx_last_error());
            if (i < t->n_args && !strstr(name, "label"))
                ck_assert_int_eq(mx_ndarray_create(t->rt, *s, MX_FLOAT32, ctx, &t->grad[d][i]), MX_OK);
        }
    }
    mx_graph_shapes_free(&sh);
    gputwin_upload(t);
    for (int d = 0; d < 2; d++) {
        mx_bind_config bc = {.ctx = d ? mx_gpu(0) : mx_cpu(), .args = t->arr[d], .arg_grads = t->grad[d],
                             .aux = t->arr[d] + t->n_args, .for_training = true, .cuda_graph = d && gpu_graph};
        ck_assert_msg(mx_executor_bind(t->rt, t->bound, &bc, &t->ex[d]) == MX_OK, "%s", mx_last_error());
    }
}

void gputwin_unbind(gputwin *t)
{
    ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(t->rt)), MX_OK);
    for (int d = 0; d < 2; d++) {
        mx_executor_free(t->ex[d]);
        for (int i = 0; i < t->n_args + t->n_aux; i++) {
            mx_ndarray_free(t->arr[d][i]);
            mx_ndarray_free(t->grad[d][i]);
        }
    }
    for (int i = 0; i < t->n_args + t->n_aux; i++) free(t->host[i]);
    mx_runtime_free(t->rt);
    if (t->bound != t->g) mx_graph_free(t->bound);
    mx_graph_free(t->g);
}
