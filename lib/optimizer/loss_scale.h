/*
 * loss_scale.h - the two library pieces of float16 mixed-precision
 * training: MXNet AMP's dynamic loss scaler (pure host logic) and
 * mx_all_finite, MXNet's multi_all_finite (are all gradients finite?).
 *
 * A trainer's step with both (MXNet 1.9.1's amp.scale_loss and
 * Trainer._update):
 *
 *     double scale = mx_loss_scaler_scale(&ls);   // before the forward pass
 *     ... forward, backward with the loss's gradient multiplied by scale ...
 *     bool finite;
 *     MX_TRY(mx_all_finite(grads, n, &finite));
 *     if (mx_loss_scaler_update(&ls, finite))
 *         ... optimizer updates with rescale_grad = rescale / scale ...
 *     else
 *         MX_TRY(mx_loss_scaler_check(&ls));      // stop on a hopeless run
 *
 * ------------------------------------------------------------ loss scaler
 * MXNet 1.9.1, python/mxnet/contrib/amp/loss_scaler.py (LossScaler), whose
 * has_overflow runs once per step after the backward pass:
 *
 *     self._loss_scale = self._next_loss_scale
 *     if has_overflow:
 *         self._next_loss_scale = self._loss_scale / 2.
 *         self._unskipped = 0
 *     else:
 *         self._unskipped += 1
 *     if self._unskipped == self._scale_seq_len:
 *         self._unskipped = 0
 *         self._next_loss_scale = min(self._max_loss_scale, self._loss_scale * 2.)
 *
 * with _loss_scale = _next_loss_scale = 2^16, _max_loss_scale = 2^24,
 * _scale_seq_len = 2000, and the step's update skipped on overflow. The
 * scale the next step's loss is multiplied by is _loss_scale (the
 * loss_scale property). mx_loss_scaler_update does exactly that, in that
 * order, so the scales follow MXNet's step for step, including two
 * consequences of the order that are easy to miss:
 *   - every change takes effect one step late. After an overflow at step k
 *     (scale S), step k+1 still runs at S (the assignment at the top
 *     re-installs the "next" scale decided at step k-1), and the halved
 *     scale S/2 is first used at step k+2; likewise the doubling decided
 *     on the 2000th finite step in a row is first used two steps later.
 *     A second overflow at step k+1 halves again from S/2, so two
 *     overflows in a row give S/4 at step k+3.
 *   - the finite-step counter restarts at 0 on every overflow and on
 *     every growth, also when the growth is capped at max_scale (the
 *     scale then stays at the cap and counting starts over).
 * MXNet has no lower bound: the scale halves on every overflow, below 1
 * and on. We keep that (a legitimate run may need a scale below 1), with
 * two additions of ours, documented here because MXNet has neither:
 *   - the scale never halves below 2^-126 (float32's smallest normal), so
 *     it cannot reach 0 (MXNet's would after about 1075 halvings in a
 *     row; a scale of 0 zeroes every gradient and the unscaling divides by
 *     0). Unreachable with the default stop rule below.
 *   - a stop rule: after max_consecutive_skips (default 32) skipped steps
 *     in a row, mx_loss_scaler_check returns MX_ERR_RUNTIME naming the
 *     scale and the count. Scaling fixes overflow, not a NaN the forward
 *     pass makes at any scale; with NaN gradients on every step the scale
 *     would otherwise fall forever (2^16 to 2^-10 in 27 steps) while the
 *     weights never change. Counting skips in a row, not the scale's
 *     size, tells the two apart: a run that really needs a scale below 1
 *     still has mostly finite steps, and a few skips in a row are normal
 *     at the start (2^16 is usually too large) or after each growth. 32
 *     skips in a row take the scale from its cap 2^24 down to 2^-7.
 *     0 disables the rule (MXNet's behaviour).
 *
 * The struct is public so that a trainer can save and restore it with a
 * checkpoint (every field is state or setting; a resumed run then scales
 * exactly as an uninterrupted one) and log it ("loss scale 32768 (3 steps
 * skipped)": mx_loss_scaler_str).
 *
 * ------------------------------------------------------------ all_finite
 * mx_all_finite waits for the pending writes of the arrays (it is one
 * engine operation per device that reads them) and scans them: float32,
 * float64, float16 and bfloat16, on the CPU (the kernel pool, exponent bit
 * tests, stopping early once a non-finite element is seen) and on GPUs
 * (one kernel over a list of up to 128 arrays per launch, setting a flag
 * in device memory that comes back in one 4-byte copy). Arrays may sit on
 * several devices and have different dtypes in one call: each device gets
 * its own operation, all run concurrently, the call waits for all.
 */
#ifndef MX_LOSS_SCALE_H
#define MX_LOSS_SCALE_H

#include "ndarray/ndarray.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ loss scaler */

/* MXNet's constants. */
#define MX_LOSS_SCALE_INIT 65536.0          /* 2^16 */
#define MX_LOSS_SCALE_MAX 16777216.0        /* 2^24 */
#define MX_LOSS_SCALE_SEQ_LEN 2000
/* Ours (see above): the stop rule's default and the scale's floor. */
#define MX_LOSS_SCALE_MAX_CONSECUTIVE_SKIPS 32
#define MX_LOSS_SCALE_FLOOR 0x1p-126

typedef struct mx_loss_scaler {
    /* Settings (mx_loss_scaler_init). */
    double max_scale;              /* growth stops here (MXNet: 2^24) */
    int64_t scale_seq_len;         /* finite steps in a row that double the scale (2000) */
    int64_t max_consecutive_skips; /* mx_loss_scaler_check fails at this many (32; 0: never) */
    /* State, as MXNet's. */
    double scale;      /* _loss_scale: what the next step's loss is multiplied by */
    double next_scale; /* _next_loss_scale: installed by the next update */
    int64_t unskipped; /* _unskipped: finite steps since the last overflow or growth */
    /* Counters (ours), for logs and the stop rule. */
    int64_t steps;             /* updates so far */
    int64_t skipped;           /* steps with non-finite gradients, in all */
    int64_t consecutive_skips; /* ... in a row up to the last update (0 after a finite one) */
} mx_loss_scaler;

/* MXNet's scaler: initial scale 2^16, cap 2^24, growth after 2000 finite
 * steps, and the stop rule at 32 skipped steps in a row. */
void mx_loss_scaler_init(mx_loss_scaler *s);
/* The same with other settings: init_scale in [2^-126, max_scale], both
 * finite; scale_seq_len >= 1; max_consecutive_skips >= 0 (0: no stop
 * rule). MX_ERR_INVALID naming the value otherwise (s is then untouched). */
mx_status mx_loss_scaler_init_with(mx_loss_scaler *s, double init_scale, double max_scale, int64_t scale_seq_len,
                                   int64_t max_consecutive_skips);

/* The scale to multiply the next step's loss (and so its gradients) by;
 * unscale that step's gradients by its inverse. Read it before the step's
 * backward pass: mx_loss_scaler_update changes it. */
double mx_loss_scaler_scale(const mx_loss_scaler *s);

/* After a step's backward pass: `finite` is whether all its gradients are
 * finite (mx_all_finite). Advances the scale as MXNet's has_overflow (see
 * above) and the counters. Returns whether the step's update applies:
 * `finite` (false: skip the optimizer for this step, as MXNet does). */
bool mx_loss_scaler_update(mx_loss_scaler *s, bool finite);

/* MX_OK, or MX_ERR_RUNTIME once max_consecutive_skips steps in a row had
 * non-finite gradients (never when it is 0), with a message naming the
 * count and the scale. */
mx_status mx_loss_scaler_check(const mx_loss_scaler *s);

/* "loss scale 32768 (3 steps skipped)" into buf; returns buf. */
const char *mx_loss_scaler_str(const mx_loss_scaler *s, char *buf, size_t size);

/* The state a checkpoint keeps (the settings come from the run): scale,
 * next_scale, unskipped, steps, skipped, consecutive_skips. */
#define MX_LOSS_SCALER_STATE 6
void mx_loss_scaler_save(const mx_loss_scaler *s, double out[MX_LOSS_SCALER_STATE]);
/* Puts a saved state back; MX_ERR_INVALID, s untouched, for values no
 * scaler of s's settings holds (a scale outside [MX_LOSS_SCALE_FLOOR,
 * max_scale], a negative count). */
mx_status mx_loss_scaler_restore(mx_loss_scaler *s, const double in[MX_LOSS_SCALER_STATE]);

/* ------------------------------------------------------------ all_finite */

/* *finite = whether every element of every array is finite (neither inf,
 * -inf nor NaN), for float32, float64, float16 and bfloat16 arrays on any
 * devices, after every write pushed to them so far (the call blocks until
 * the scan is done). Each value is tested in its own dtype (MXNet's kernel
 * casts to float32 first, so a float64 value beyond float32's range counts
 * as overflow there, not here). n = 0 and empty arrays are finite. The
 * same array may appear more than once.
 * Errors (*finite is then false): MX_ERR_INVALID for finite NULL, n < 0,
 * arrays NULL with n > 0, a NULL array, another dtype (int32, uint8...),
 * arrays of different runtimes; the error of an earlier operation that
 * wrote one of the arrays (that array keeps it too: its next wait reports
 * it again); MX_ERR_DEVICE for a CUDA failure, which may be an earlier
 * kernel's fault on that stream surfacing here; MX_ERR_NOMEM. */
mx_status mx_all_finite(mx_ndarray *const *arrays, int n, bool *finite);

/* Internal (all_finite.cu): queues the scan of n arrays of GPU memory
 * (data[i]: sizes[i] elements of dtypes[i]; float32, float64, float16 or
 * bfloat16) on the stream of `worker` (the engine worker's mx_cuda_worker)
 * after what is queued there, waits for it and sets *nonfinite. */
#ifdef MX_USE_CUDA
mx_status mx_all_finite_gpu(const void *const *data, const int64_t *sizes, const mx_dtype *dtypes, int n,
                            void *worker, bool *nonfinite);
#endif

#endif /* MX_LOSS_SCALE_H */
