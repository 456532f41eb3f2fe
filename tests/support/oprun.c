/* oprun.c - one operator's forward/backward on given values (see oprun.h). */
#include "oprun.h"

#include <stdlib.h>
#include <string.h>

static mx_status setup(const char *op_name, const char *const *keys, const char *const *values, int n_params,
                       const mx_op_def **op, void **params)
{
    MX_TRY(mx_op_lookup(op_name, op));
    *params = calloc(1, (*op)->params_size + 1);
    if (!*params) return MX_ERROR(MX_ERR_NOMEM, "oprun: out of memory");
    mx_status s = mx_op_parse_params(*op, keys, values, n_params, *params);
    if (s != MX_OK) {
        free(*params);
        *params = NULL;
    }
    return s;
}

static void *workspace(const mx_op_def *op, const void *params, const oprun *r, size_t *bytes)
{
    size_t f = op->workspace ? op->workspace(params, r->in_shapes, r->out_shapes, false) : 0;
    size_t b = op->workspace ? op->workspace(params, r->in_shapes, r->out_shapes, true) : 0;
    *bytes = f > b ? f : b;
    return malloc(*bytes ? *bytes : 1);
}

static mx_tensor tensor(const float *data, const mx_shape *s)
{
    mx_tensor t = {.data = (void *)data, .shape = *s, .dtype = MX_FLOAT32, .ctx = mx_cpu()};
    return t;
}

mx_status oprun_forward(oprun *r, const char *op_name, const char *const *keys, const char *const *values,
                        int n_params, int n_given, const mx_shape *in_shapes, const float *const *in)
{
    memset(r, 0, sizeof(*r));
    const mx_op_def *op;
    void *params;
    MX_TRY(setup(op_name, keys, values, n_params, &op, &params));
    const char *names[MX_OP_MAX_IO];
    r->n_in = op->list_inputs(params, names);
    r->n_out = op->list_outputs(params, names);
    for (int i = 0; i < n_given && i < MX_OP_MAX_IO; i++) r->in_shapes[i] = in_shapes[i];
    mx_status s = op->infer_shape(params, r->in_shapes, r->n_in, r->out_shapes, r->n_out);
    if (s == MX_OK && n_given != r->n_in)
        s = MX_ERROR(MX_ERR_INVALID, "oprun: %s takes %d inputs, %d given", op_name, r->n_in, n_given);
    if (s != MX_OK) {
        free(params);
        return s;
    }
    mx_tensor tin[MX_OP_MAX_IO], tout[MX_OP_MAX_IO];
    mx_req req[MX_OP_MAX_IO];
    for (int i = 0; i < r->n_in; i++) tin[i] = tensor(in[i], &r->in_shapes[i]);
    for (int k = 0; k < r->n_out; k++) {
        int64_t n = mx_shape_size(&r->out_shapes[k]);
        r->out[k] = calloc((size_t)(n ? n : 1), sizeof(float));
        tout[k] = tensor(r->out[k], &r->out_shapes[k]);
        req[k] = MX_REQ_WRITE;
    }
    int n_aux = op->num_aux ? op->num_aux(params) : 0;
    size_t ws_bytes;
    void *ws = workspace(op, params, r, &ws_bytes);
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true, .workspace = ws, .workspace_bytes = ws_bytes};
    s = op->forward(&ctx, params, tin, req, tout, n_aux ? &tin[r->n_in - n_aux] : NULL);
    free(ws);
    free(params);
    return s;
}

mx_status oprun_backward(oprun *r, const char *op_name, const char *const *keys, const char *const *values,
                         int n_params, const float *const *in, const float *const *head)
{
    const mx_op_def *op;
    void *params;
    MX_TRY(setup(op_name, keys, values, n_params, &op, &params));
    mx_tensor tin[MX_OP_MAX_IO], tout[MX_OP_MAX_IO], tog[MX_OP_MAX_IO], tig[MX_OP_MAX_IO];
    float *zeros[MX_OP_MAX_IO] = {NULL};
    mx_req req[MX_OP_MAX_IO];
    int n_aux = op->num_aux ? op->num_aux(params) : 0;
    for (int i = 0; i < r->n_in; i++) {
        int64_t n = mx_shape_size(&r->in_shapes[i]);
        tin[i] = tensor(in[i], &r->in_shapes[i]);
        free(r->in_grad[i]);
        r->in_grad[i] = calloc((size_t)(n ? n : 1), sizeof(float));
        tig[i] = tensor(r->in_grad[i], &r->in_shapes[i]);
        req[i] = i < r->n_in - n_aux ? MX_REQ_WRITE : MX_REQ_NULL;
    }
    for (int k = 0; k < r->n_out; k++) {
        int64_t n = mx_shape_size(&r->out_shapes[k]);
        tout[k] = tensor(r->out[k], &r->out_shapes[k]);
        if (head && head[k]) tog[k] = tensor(head[k], &r->out_shapes[k]);
        else tog[k] = tensor(zeros[k] = calloc((size_t)(n ? n : 1), sizeof(float)), &r->out_shapes[k]);
    }
    size_t ws_bytes;
    void *ws = workspace(op, params, r, &ws_bytes);
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true, .workspace = ws, .workspace_bytes = ws_bytes};
    mx_status s = op->backward(&ctx, params, tog, tin, tout, req, tig, n_aux ? &tin[r->n_in - n_aux] : NULL);
    for (int k = 0; k < r->n_out; k++) free(zeros[k]);
    free(ws);
    free(params);
    return s;
}

void oprun_free(oprun *r)
{
    for (int k = 0; k < MX_OP_MAX_IO; k++) {
        free(r->out[k]);
        free(r->in_grad[k]);
    }
    memset(r, 0, sizeof(*r));
}
