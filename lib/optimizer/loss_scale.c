/*
 * loss_scale.c - MXNet AMP's dynamic loss scaler (loss_scale.h gives the
 * MXNet source it follows and what we add): host arithmetic only, no
 * global state.
 */
#include "optimizer/loss_scale.h"

#include <math.h>
#include <stdio.h>

void mx_loss_scaler_init(mx_loss_scaler *s)
{
    *s = (mx_loss_scaler){.max_scale = MX_LOSS_SCALE_MAX,
                          .scale_seq_len = MX_LOSS_SCALE_SEQ_LEN,
                          .max_consecutive_skips = MX_LOSS_SCALE_MAX_CONSECUTIVE_SKIPS,
                          .scale = MX_LOSS_SCALE_INIT,
                          .next_scale = MX_LOSS_SCALE_INIT};
}

mx_status mx_loss_scaler_init_with(mx_loss_scaler *s, double init_scale, double max_scale, int64_t scale_seq_len,
                                   int64_t max_consecutive_skips)
{
    if (!s) return MX_ERROR(MX_ERR_INVALID, "loss scaler: NULL scaler");
    if (!isfinite(max_scale) || max_scale < MX_LOSS_SCALE_FLOOR)
        return MX_ERROR(MX_ERR_INVALID, "loss scaler: max_scale %g must be finite and at least 2^-126", max_scale);
    if (!isfinite(init_scale) || init_scale < MX_LOSS_SCALE_FLOOR || init_scale > max_scale)
        return MX_ERROR(MX_ERR_INVALID, "loss scaler: initial scale %g must be in [2^-126, max_scale %g]", init_scale,
                        max_scale);
    if (scale_seq_len < 1)
        return MX_ERROR(MX_ERR_INVALID, "loss scaler: scale_seq_len %lld must be at least 1",
                        (long long)scale_seq_len);
    if (max_consecutive_skips < 0)
        return MX_ERROR(MX_ERR_INVALID, "loss scaler: max_consecutive_skips %lld must be >= 0 (0: no limit)",
                        (long long)max_consecutive_skips);
    mx_loss_scaler_init(s);
    s->max_scale = max_scale;
    s->scale_seq_len = scale_seq_len;
    s->max_consecutive_skips = max_consecutive_skips;
    s->scale = s->next_scale = init_scale;
    return MX_OK;
}

double mx_loss_scaler_scale(const mx_loss_scaler *s) { return s->scale; }

bool mx_loss_scaler_update(mx_loss_scaler *s, bool finite)
{
    s->steps++;
    /* MXNet's LossScaler.has_overflow, line for line. */
    s->scale = s->next_scale;
    if (!finite) {
        double half = s->scale / 2.0;
        s->next_scale = half < MX_LOSS_SCALE_FLOOR ? MX_LOSS_SCALE_FLOOR : half; /* ours: never 0 */
        s->unskipped = 0;
        s->skipped++;
        s->consecutive_skips++;
    } else {
        s->unskipped++;
        s->consecutive_skips = 0;
    }
    if (s->unskipped == s->scale_seq_len) {
        s->unskipped = 0;
        double twice = s->scale * 2.0;
        s->next_scale = twice < s->max_scale ? twice : s->max_scale;
    }
    return finite;
}

mx_status mx_loss_scaler_check(const mx_loss_scaler *s)
{
    if (s->max_consecutive_skips <= 0 || s->consecutive_skips < s->max_consecutive_skips) return MX_OK;
    return MX_ERROR(MX_ERR_RUNTIME,
                    "loss scaling: the gradients were not finite on %lld steps in a row (every update skipped, "
                    "%lld of %lld steps in all); the loss scale fell to %g (2^%d) without helping, so the "
                    "non-finite values do not come from overflow: look for a NaN or inf in the forward pass or "
                    "the data",
                    (long long)s->consecutive_skips, (long long)s->skipped, (long long)s->steps, s->scale,
                    ilogb(s->scale));
}

const char *mx_loss_scaler_str(const mx_loss_scaler *s, char *buf, size_t size)
{
    snprintf(buf, size, "loss scale %.17g (%lld step%s skipped)", s->scale, (long long)s->skipped,
             s->skipped == 1 ? "" : "s");
    return buf;
}

void mx_loss_scaler_save(const mx_loss_scaler *s, double out[MX_LOSS_SCALER_STATE])
{
    out[0] = s->scale;
    out[1] = s->next_scale;
    out[2] = (double)s->unskipped;
    out[3] = (double)s->steps;
    out[4] = (double)s->skipped;
    out[5] = (double)s->consecutive_skips;
}

mx_status mx_loss_scaler_restore(mx_loss_scaler *s, const double in[MX_LOSS_SCALER_STATE])
{
    if (!(in[0] >= MX_LOSS_SCALE_FLOOR && in[0] <= s->max_scale && in[1] >= MX_LOSS_SCALE_FLOOR &&
          in[1] <= s->max_scale && in[2] >= 0 && in[3] >= 0 && in[4] >= 0 && in[5] >= 0))
        return MX_ERROR(MX_ERR_INVALID, "loss scaler state: impossible values (scale %g)", in[0]);
    s->scale = in[0];
    s->next_scale = in[1];
    s->unskipped = (int64_t)in[2];
    s->steps = (int64_t)in[3];
    s->skipped = (int64_t)in[4];
    s->consecutive_skips = (int64_t)in[5];
    return MX_OK;
}
