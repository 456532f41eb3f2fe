/*
 * fold.c - element-wise layers folded into the op before them (op.h's
 * mx_fold_*): each kind computed by its own operator's kernels.
 */
#include "ops/op.h"
#include "ops/activation.h"
#include "ops/clip.h"
#include "ops/cpu/simd.h"

#include <string.h>

void mx_fold_rows_at(const mx_fold *f, int simd_level, float *y, int64_t n)
{
    switch (f->kind) {
    case MX_FOLD_ACTIVATION: mx_activation_fold_rows(simd_level, f->act_type, y, n); break;
    case MX_FOLD_CLIP: mx_clip_fold_rows(simd_level, f->lo, f->hi, y, n); break;
    case MX_FOLD_NONE: break;
    }
}

void mx_fold_rows(const mx_fold *f, float *y, int64_t n)
{
    if (f->kind != MX_FOLD_NONE) mx_fold_rows_at(f, mx_simd_level(), y, n);
}

void mx_fold_forward(mx_threadpool *pool, const mx_fold *f, float *y, int64_t n)
{
    switch (f->kind) {
    case MX_FOLD_ACTIVATION: mx_activation_fold_forward(pool, f->act_type, y, n); break;
    case MX_FOLD_CLIP: mx_clip_fold_forward(pool, f->lo, f->hi, y, n); break;
    case MX_FOLD_NONE: break;
    }
}

void mx_fold_backward(mx_threadpool *pool, const mx_fold *f, float *dy, const float *y, int64_t n)
{
    switch (f->kind) {
    case MX_FOLD_ACTIVATION: mx_activation_fold_backward(pool, f->act_type, dy, y, n); break;
    case MX_FOLD_CLIP: mx_clip_fold_backward(pool, f->lo, f->hi, dy, y, n); break;
    case MX_FOLD_NONE: break;
    }
}

void mx_fold_backward_rows_at(const mx_fold *f, int simd_level, const float *dy, const float *y, float *out, int64_t n)
{
    switch (f->kind) {
    case MX_FOLD_ACTIVATION: mx_activation_fold_backward_rows(simd_level, f->act_type, dy, y, out, n); break;
    case MX_FOLD_CLIP: mx_clip_fold_backward_rows(simd_level, f->lo, f->hi, dy, y, out, n); break;
    case MX_FOLD_NONE:
        if (out != dy) memmove(out, dy, (size_t)n * sizeof(float));
        break;
    }
}

bool mx_fold_is_relu(const mx_fold *f) { return f->kind == MX_FOLD_ACTIVATION && f->act_type == ACT_RELU; }

bool mx_fold_derivative_is_mask(const mx_fold *f) { return mx_fold_is_relu(f) || f->kind == MX_FOLD_CLIP; }

mx_status mx_fold_check_req(const mx_fold *f, mx_req req, const char *op)
{
    if (f && f->kind != MX_FOLD_NONE && req == MX_REQ_ADD)
        return MX_ERROR(MX_ERR_INVALID, "%s: a folded activation cannot add to its output", op);
    return MX_OK;
}
