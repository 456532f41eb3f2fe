/* test_optimizer.c - optimizers against scalar references written here,
 * Adam's bias correction, lr_mult / wd_mult, the schedules against
 * hand-computed rates, state save/restore, engine overlap, errors. */
#include "optimizer/optimizer.h"

#include <check.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mx_runtime *make_runtime(void)
{
    mx_engine_config c = mx_engine_config_default();
    c.cpu_workers = 4;
    mx_runtime *rt = NULL;
    ck_assert_int_eq(mx_runtime_create(&c, &rt), MX_OK);
    return rt;
}

static mx_ndarray *array_f32(mx_runtime *rt, int n, const float *v)
{
    mx_ndarray *a = NULL;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(n), MX_FLOAT32, mx_cpu(), &a), MX_OK);
    if (v) ck_assert_int_eq(mx_ndarray_from_host(a, v, sizeof(float) * (size_t)n), MX_OK);
    return a;
}

static void read_f32(mx_ndarray *a, float *out, int n)
{
    ck_assert_int_eq(mx_ndarray_to_host(a, out, sizeof(float) * (size_t)n), MX_OK);
}

static void expect_error(mx_status got, mx_status want, const char *fragment)
{
    ck_assert_int_eq(got, want);
    if (fragment && !strstr(mx_last_error(), fragment))
        ck_abort_msg("error '%s' lacks '%s'", mx_last_error(), fragment);
}

/* ------------------------------------------------------------ references
 * The update rules as MXNet documents them, in double precision. */

typedef struct ref_params {
    double lr, wd, rescale, clip, momentum, beta1, beta2, eps, gamma1, gamma2, clip_w;
    int centered;
} ref_params;

static double clip_ref(double x, double c) { return c > 0 ? (x > c ? c : x < -c ? -c : x) : x; }

static double round_f32(double x) { return (float)x; }

/* MXNet's kernels take their hyper-parameters as float32: with f32_params
 * the reference does too (it matters at float64 precision). */
static void ref_update(const char *name, const ref_params *exact, double lr, double wd, int t, double *w,
                       const double *g, double *s0, double *s1, double *s2, int n, bool f32_params)
{
    ref_params q = *exact;
    if (f32_params) {
        double *f[] = {&q.wd, &q.rescale, &q.clip, &q.momentum, &q.beta1, &q.beta2, &q.eps, &q.gamma1, &q.gamma2, &q.clip_w};
        for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) *f[i] = round_f32(*f[i]);
        if (strcmp(name, "adam")) lr = round_f32(lr);
        else lr = round_f32(lr * sqrt(1 - pow(exact->beta2, t)) / (1 - pow(exact->beta1, t)));
        wd = round_f32(wd);
    } else if (!strcmp(name, "adam")) {
        lr = lr * sqrt(1 - pow(exact->beta2, t)) / (1 - pow(exact->beta1, t));
    }
    const ref_params *p = &q;
    for (int i = 0; i < n; i++) {
        if (!strcmp(name, "sgd")) {
            double mom = p->momentum * s0[i] - lr * wd * w[i] - lr * clip_ref(p->rescale * g[i], p->clip);
            s0[i] = mom;
            w[i] += mom;
        } else if (!strcmp(name, "nag")) {
            double gr = clip_ref(p->rescale * g[i], p->clip);
            if (p->momentum == 0) {
                w[i] -= lr * (gr + wd * w[i]);
            } else {
                double m = p->momentum * s0[i];
                double nw = w[i] - m + (1 + p->momentum) * (m - lr * (gr + wd * w[i]));
                s0[i] = m - lr * (gr + wd * nw); /* MXNet's in-place kernel */
                w[i] = nw;
            }
        } else if (!strcmp(name, "adam")) {
            double gr = clip_ref(p->rescale * g[i] + wd * w[i], p->clip);
            s0[i] = p->beta1 * s0[i] + (1 - p->beta1) * gr;
            s1[i] = p->beta2 * s1[i] + (1 - p->beta2) * gr * gr;
            w[i] -= lr * s0[i] / (sqrt(s1[i]) + p->eps); /* lr bias-corrected above */
        } else if (!strcmp(name, "rmsprop")) {
            double gr = clip_ref(p->rescale * g[i] + wd * w[i], p->clip);
            s0[i] = (1 - p->gamma1) * gr * gr + p->gamma1 * s0[i];
            if (!p->centered) {
                w[i] -= lr * gr / sqrt(s0[i] + p->eps);
            } else {
                s1[i] = (1 - p->gamma1) * gr + p->gamma1 * s1[i];
                s2[i] = p->gamma2 * s2[i] - lr * gr / sqrt(s0[i] - s1[i] * s1[i] + p->eps);
                w[i] += s2[i];
            }
            if (p->clip_w > 0) w[i] = clip_ref(w[i], p->clip_w);
        } else if (!strcmp(name, "adagrad")) {
            double gr = clip_ref(p->rescale * g[i], p->clip);
            s0[i] += gr * gr;
            w[i] -= lr * (gr / sqrt(s0[i] + p->eps) + wd * w[i]);
        } else {
            ck_abort_msg("no reference for %s", name);
        }
    }
}

/* ------------------------------------------------------------ harness */

#define N 9
#define STEPS 6

typedef struct opt_case {
    const char *name;
    ref_params p;
    double lr_mult0;     /* of index 0 ("fc_weight") */
    double wd_mult1;     /* explicit wd_mult of index 1 ("fc_bias"); < 0: the name rule (0) */
    int factor_schedule; /* lr halves every 2 updates */
    bool float64;
} opt_case;

static double grad_value(int i, int t, int idx) { return 1.7 * sin(0.7 * i + 1.3 * t + 2.1 * idx); }

/* Builds MXNet-style keyword arguments from the case. */
static int case_kwargs(const opt_case *c, const char **keys, char vals[][40])
{
    int n = 0;
#define KW(k, v) (keys[n] = (k), snprintf(vals[n], 40, "%.17g", (double)(v)), n++)
    KW("learning_rate", c->p.lr);
    KW("wd", c->p.wd);
    KW("rescale_grad", c->p.rescale);
    KW("clip_gradient", c->p.clip > 0 ? c->p.clip : -1);
    if (!strcmp(c->name, "sgd") || !strcmp(c->name, "nag")) KW("momentum", c->p.momentum);
    if (!strcmp(c->name, "adam")) {
        KW("beta1", c->p.beta1);
        KW("beta2", c->p.beta2);
        KW("epsilon", c->p.eps);
    }
    if (!strcmp(c->name, "rmsprop")) {
        KW("gamma1", c->p.gamma1);
        KW("gamma2", c->p.gamma2);
        KW("epsilon", c->p.eps);
        KW("centered", c->p.centered);
        KW("clip_weights", c->p.clip_w > 0 ? c->p.clip_w : -1);
    }
    if (!strcmp(c->name, "adagrad")) KW("eps", c->p.eps);
#undef KW
    return n;
}

static opt_case with_defaults(opt_case c)
{
    if (!c.p.rescale) c.p.rescale = 1;
    if (!c.p.beta1) c.p.beta1 = 0.9;
    if (!c.p.beta2) c.p.beta2 = 0.999;
    if (!c.p.eps) c.p.eps = !strcmp(c.name, "adagrad") ? 1e-7 : 1e-8;
    if (!c.p.gamma1) c.p.gamma1 = 0.9;
    if (!c.p.gamma2) c.p.gamma2 = 0.9;
    return c;
}

static void run_case(const opt_case *case_in)
{
    const opt_case full = with_defaults(*case_in), *c = &full;
    mx_runtime *rt = make_runtime();
    const char *keys[16];
    char vals[16][40];
    const char *vp[16];
    int nk = case_kwargs(c, keys, vals);
    for (int i = 0; i < nk; i++) vp[i] = vals[i];
    mx_optimizer *opt = NULL;
    ck_assert_msg(mx_optimizer_create_kv(rt, c->name, keys, vp, nk, &opt) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_optimizer_set_param_name(opt, 0, "fc_weight"), MX_OK);
    ck_assert_int_eq(mx_optimizer_set_param_name(opt, 1, "fc_bias"), MX_OK);
    ck_assert_int_eq(mx_optimizer_set_lr_mult(opt, 0, c->lr_mult0), MX_OK);
    if (c->wd_mult1 >= 0) ck_assert_int_eq(mx_optimizer_set_wd_mult(opt, 1, c->wd_mult1), MX_OK);
    if (c->factor_schedule) {
        mx_lr_scheduler *s = NULL;
        const char *sk[] = {"step", "factor"}, *sv[] = {"2", "0.5"};
        ck_assert_int_eq(mx_lr_scheduler_create_kv("factor", sk, sv, 2, &s), MX_OK);
        ck_assert_int_eq(mx_optimizer_set_lr_scheduler(opt, s), MX_OK);
    }
    mx_dtype dt = c->float64 ? MX_FLOAT64 : MX_FLOAT32;
    size_t esz = c->float64 ? 8 : 4;
    mx_ndarray *w[2], *g[2];
    double rw[2][N], rs[2][3][N];
    memset(rs, 0, sizeof(rs));
    for (int idx = 0; idx < 2; idx++) {
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(3, 3), dt, mx_cpu(), &w[idx]), MX_OK);
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(3, 3), dt, mx_cpu(), &g[idx]), MX_OK);
        float wf[N];
        double wd[N];
        for (int i = 0; i < N; i++) {
            wf[i] = (float)(0.3 * (i - 4) + 0.1 * idx);
            wd[i] = rw[idx][i] = wf[i];
        }
        ck_assert_int_eq(mx_ndarray_from_host(w[idx], c->float64 ? (void *)wd : (void *)wf, esz * N), MX_OK);
    }
    for (int t = 0; t < STEPS; t++) {
        for (int idx = 0; idx < 2; idx++) {
            float gf[N];
            double gd[N], gref[N];
            for (int i = 0; i < N; i++) {
                gf[i] = (float)grad_value(i, t, idx);
                gd[i] = grad_value(i, t, idx);
                gref[i] = c->float64 ? gd[i] : gf[i];
            }
            ck_assert_int_eq(mx_ndarray_from_host(g[idx], c->float64 ? (void *)gd : (void *)gf, esz * N), MX_OK);
            ck_assert_msg(mx_optimizer_update(opt, idx, w[idx], g[idx]) == MX_OK, "%s", mx_last_error());
            /* The reference: num_update is t + 1 for both indices. */
            int u = t + 1;
            double lr = c->p.lr * (c->factor_schedule ? pow(0.5, (u - 1) / 2) : 1.0);
            if (idx == 0) lr *= c->lr_mult0;
            double wd = c->p.wd * (idx == 0 ? 1.0 : (c->wd_mult1 >= 0 ? c->wd_mult1 : 0.0));
            ref_update(c->name, &c->p, lr, wd, u, rw[idx], gref, rs[idx][0], rs[idx][1], rs[idx][2], N, c->float64);
        }
    }
    ck_assert_int_eq(mx_optimizer_num_update(opt), STEPS);
    ck_assert_int_eq(mx_optimizer_update_count(opt, 1), STEPS);
    double tol = c->float64 ? 1e-12 : 2e-5;
    for (int idx = 0; idx < 2; idx++) {
        double got[N];
        if (c->float64) {
            ck_assert_int_eq(mx_ndarray_to_host(w[idx], got, sizeof(got)), MX_OK);
        } else {
            float f[N];
            read_f32(w[idx], f, N);
            for (int i = 0; i < N; i++) got[i] = f[i];
        }
        for (int i = 0; i < N; i++)
            ck_assert_msg(fabs(got[i] - rw[idx][i]) <= tol * (1 + fabs(rw[idx][i])),
                          "%s: param %d element %d: got %.9g, reference %.9g", c->name, idx, i, got[i], rw[idx][i]);
        /* The first state matches too (momentum, mean, n, history). */
        mx_ndarray *st[3];
        int ns = mx_optimizer_states(opt, idx, st, NULL);
        if (ns > 0 && !c->float64) {
            float f[N];
            read_f32(st[0], f, N);
            for (int i = 0; i < N; i++)
                ck_assert_msg(fabs(f[i] - rs[idx][0][i]) <= tol * (1 + fabs(rs[idx][0][i])),
                              "%s: state of param %d element %d: got %.9g, reference %.9g", c->name, idx, i, f[i],
                              rs[idx][0][i]);
        }
        mx_ndarray_free(w[idx]);
        mx_ndarray_free(g[idx]);
    }
    mx_optimizer_free(opt);
    mx_runtime_free(rt);
}

/* Fields left 0 take MXNet's defaults (see with_defaults). */
static const opt_case cases[] = {
    {"sgd", {.lr = 0.1, .momentum = 0.9, .wd = 0.01, .rescale = 0.5, .clip = 0.3}, 0.5, -1, 0, false},
    {"sgd", {.lr = 0.1, .momentum = 0.9, .wd = 0.01, .rescale = 0.5}, 0.5, -1, 0, false},
    {"sgd", {.lr = 0.1, .wd = 0.1, .clip = 0.3}, 1.0, -1, 0, false},
    {"sgd", {.lr = 0.05, .momentum = 0.8, .wd = 0.02, .clip = 0.25}, 2.0, 2.0, 1, false},
    {"sgd", {.lr = 0.1, .momentum = 0.9, .wd = 0.01, .clip = 1.0}, 0.5, -1, 1, true},
    {"nag", {.lr = 0.1, .momentum = 0.9, .wd = 0.01, .clip = 0.4, .rescale = 2}, 0.5, -1, 0, false},
    {"nag", {.lr = 0.1, .momentum = 0.9, .wd = 0.05, .rescale = 0.5}, 1.0, 1.0, 0, false},
    {"nag", {.lr = 0.1, .wd = 0.01, .rescale = 0.5}, 1.0, -1, 1, false},
    {"adam", {.lr = 0.01, .wd = 0.01, .clip = 0.5, .rescale = 0.5}, 0.5, -1, 0, false},
    {"adam", {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6}, 1.0, 3.0, 1, false},
    {"adam", {.lr = 0.01, .wd = 0.001}, 1.0, -1, 0, true},
    {"rmsprop", {.lr = 0.01, .wd = 0.01, .clip = 0.5, .clip_w = 1.0}, 0.5, -1, 0, false},
    {"rmsprop", {.lr = 0.01, .wd = 0.01, .centered = 1, .gamma1 = 0.95, .gamma2 = 0.8}, 1.0, 1.0, 0, false},
    {"rmsprop", {.lr = 0.001, .rescale = 2.0}, 1.0, -1, 1, false},
    {"adagrad", {.lr = 0.1, .wd = 0.01, .clip = 0.5, .eps = 1e-6}, 0.5, -1, 0, false},
    {"adagrad", {.lr = 0.1, .rescale = 0.5, .eps = 1e-7}, 1.0, 1.0, 1, false},
};

START_TEST(optimizers_match_references)
{
    run_case(&cases[_i]);
}
END_TEST

/* ------------------------------------------------------------ MXNet's numbers
 * Written by MXNet 1.9.1 (pip mxnet==1.9.1): for each row,
 *   opt = mx.optimizer.create(name, param_idx2name={0: 'fc_weight', 1: 'fc_bias'}, **kwargs)
 *   (with lr_scheduler=FactorScheduler(step=2, factor=0.5, base_lr=lr) when sched)
 *   opt.set_lr_mult({0: 0.5}); upd = mx.optimizer.get_updater(opt)
 *   w[idx] = [(i-3)*0.25 + 0.125*idx for i in range(7)]
 *   for t in range(6): for idx in (0, 1): upd(idx, mx_grad(idx, t), w[idx])
 * with grad[i] = float32(((7i + 3t + 5idx) % 11) - 5) * float32(0.37); the
 * weights printed with %.9g. Our updates must give the same bits. */

typedef struct mxnet_row {
    const char *name;
    int sched;
    int n;
    const char *keys[6], *values[6];
    float want[2][7];
} mxnet_row;

static const mxnet_row mxnet_rows[] = {
    {"sgd", 0, 4, {"learning_rate", "momentum", "wd", "rescale_grad"}, {"0.1", "0.9", "0.01", "0.5"},
     {{-0.504114032f, -0.682124555f, -0.226962149f, -0.07144472f, 0.124099538f, 0.681011975f, 0.643255353f},
      {-0.543050528f, -0.224974975f, 0.00425449014f, -0.163037792f, 0.854874253f, 0.250750899f, 0.916811466f}}},
    {"sgd", 0, 3, {"learning_rate", "wd", "clip_gradient"}, {"0.1", "0.01", "0.3"},
     {{-0.717790306f, -0.51344943f, -0.249258414f, 0.0150149819f, 0.219288379f, 0.513464391f, 0.747760296f},
      {-0.654999971f, -0.344999999f, -0.125f, 0.0949999988f, 0.435000002f, 0.595000029f, 0.875f}}},
    {"sgd", 1, 4, {"learning_rate", "momentum", "wd", "clip_gradient"}, {"0.1", "0.9", "0.01", "0.3"},
     {{-0.648955524f, -0.606010139f, -0.241711363f, -0.0182499066f, 0.152097851f, 0.564953387f, 0.738569021f},
      {-0.677367985f, -0.189564273f, -0.138529688f, 0.1242797f, 0.567935705f, 0.40641436f, 0.888529658f}}},
    {"nag", 0, 4, {"learning_rate", "momentum", "wd", "clip_gradient"}, {"0.1", "0.9", "0.01", "0.4"},
     {{-0.599628329f, -0.626008332f, -0.230742723f, 0.0130831636f, 0.111023873f, 0.604216337f, 0.72206229f},
      {-0.687329531f, -0.185916007f, -0.142096639f, 0.0283625498f, 0.660726011f, 0.36029923f, 0.908340335f}}},
    {"nag", 0, 4, {"learning_rate", "momentum", "wd", "rescale_grad"}, {"0.1", "0.9", "0.01", "0.5"},
     {{-0.462644875f, -0.680137396f, -0.228618279f, -0.0452640057f, 0.0715296715f, 0.716373742f, 0.624247313f},
      {-0.569745421f, -0.221477494f, 0.0468290485f, -0.245234013f, 0.936386883f, 0.25117591f, 0.91263026f}}},
    {"nag", 0, 3, {"learning_rate", "wd", "rescale_grad"}, {"0.1", "0.01", "0.5"},
     {{-0.683122814f, -0.516890883f, -0.249264777f, 0.0185646731f, 0.184542492f, 0.5539186f, 0.720048845f},
      {-0.64350009f, -0.3565f, -0.0694999993f, 0.0139999986f, 0.504500031f, 0.588f, 0.87499994f}}},
    {"adam", 0, 4, {"learning_rate", "wd", "clip_gradient", "rescale_grad"}, {"0.01", "0.01", "0.5", "0.5"},
     {{-0.734081268f, -0.514080167f, -0.243846729f, -0.00474189036f, 0.23726809f, 0.512657225f, 0.743512452f},
      {-0.629508555f, -0.354151577f, -0.130711883f, 0.119879037f, 0.406464279f, 0.596675992f, 0.887078524f}}},
    {"adam", 1, 4, {"learning_rate", "beta1", "beta2", "epsilon"}, {"0.01", "0.8", "0.99", "1e-6"},
     {{-0.738901675f, -0.511365592f, -0.244769379f, -0.00629207212f, 0.240052804f, 0.509795606f, 0.745143473f},
      {-0.628908217f, -0.357925594f, -0.127966717f, 0.124621078f, 0.397196531f, 0.602268815f, 0.88546133f}}},
    {"rmsprop", 0, 4, {"learning_rate", "wd", "clip_gradient", "clip_weights"}, {"0.01", "0.01", "0.5", "0.7"},
     {{-0.685765386f, -0.518386543f, -0.24673298f, 0.00241009239f, 0.222283393f, 0.515996575f, 0.690273941f},
      {-0.644479215f, -0.346510231f, -0.129263237f, 0.111159518f, 0.424049705f, 0.588017046f, 0.674761295f}}},
    {"rmsprop", 0, 5, {"learning_rate", "wd", "centered", "gamma1", "gamma2"}, {"0.01", "0.01", "1", "0.95", "0.8"},
     {{-0.656636536f, -0.629411519f, -0.222213924f, -0.040526174f, 0.116831601f, 0.588091671f, 0.692670822f},
      {-0.667188227f, -0.276487023f, -0.161244452f, 0.0664164647f, 0.560254872f, 0.365308106f, 0.929747343f}}},
    {"adagrad", 0, 4, {"learning_rate", "wd", "clip_gradient", "eps"}, {"0.1", "0.01", "0.5", "1e-6"},
     {{-0.672432899f, -0.557464182f, -0.237694114f, 0.00391914696f, 0.164706945f, 0.549550295f, 0.727582753f},
      {-0.682735682f, -0.284367234f, -0.140278846f, 0.0881630182f, 0.525931776f, 0.506745934f, 0.89822191f}}},
    {"adagrad", 0, 2, {"learning_rate", "rescale_grad"}, {"0.1", "0.5"},
     {{-0.688348055f, -0.564507484f, -0.240443721f, -0.00504792482f, 0.14716424f, 0.560138941f, 0.713670969f},
      {-0.67675519f, -0.327659011f, -0.12928395f, 0.0490072668f, 0.498303771f, 0.495984852f, 0.894112527f}}},
};

START_TEST(matches_mxnet_bit_for_bit)
{
    const mxnet_row *r = &mxnet_rows[_i];
    mx_runtime *rt = make_runtime();
    mx_optimizer *opt = NULL;
    ck_assert_int_eq(mx_optimizer_create_kv(rt, r->name, r->keys, r->values, r->n, &opt), MX_OK);
    if (r->sched) {
        const char *sk[] = {"step", "factor"}, *sv[] = {"2", "0.5"};
        mx_lr_scheduler *s = NULL;
        ck_assert_int_eq(mx_lr_scheduler_create_kv("factor", sk, sv, 2, &s), MX_OK);
        ck_assert_int_eq(mx_optimizer_set_lr_scheduler(opt, s), MX_OK);
    }
    ck_assert_int_eq(mx_optimizer_set_param_name(opt, 0, "fc_weight"), MX_OK);
    ck_assert_int_eq(mx_optimizer_set_param_name(opt, 1, "fc_bias"), MX_OK);
    ck_assert_int_eq(mx_optimizer_set_lr_mult(opt, 0, 0.5), MX_OK);
    mx_ndarray *w[2], *g[2];
    for (int idx = 0; idx < 2; idx++) {
        float w0[7];
        for (int i = 0; i < 7; i++) w0[i] = (float)(i - 3) * 0.25f + 0.125f * (float)idx;
        w[idx] = array_f32(rt, 7, w0);
        g[idx] = array_f32(rt, 7, NULL);
    }
    for (int t = 0; t < 6; t++)
        for (int idx = 0; idx < 2; idx++) {
            float gv[7];
            for (int i = 0; i < 7; i++) gv[i] = (float)(((i * 7 + t * 3 + idx * 5) % 11) - 5) * 0.37f;
            ck_assert_int_eq(mx_ndarray_from_host(g[idx], gv, sizeof(gv)), MX_OK);
            ck_assert_int_eq(mx_optimizer_update(opt, idx, w[idx], g[idx]), MX_OK);
        }
    for (int idx = 0; idx < 2; idx++) {
        float got[7];
        read_f32(w[idx], got, 7);
        for (int i = 0; i < 7; i++)
            ck_assert_msg(got[i] == r->want[idx][i], "%s row %d, param %d element %d: %.9g, MXNet %.9g", r->name,
                          _i, idx, i, got[i], r->want[idx][i]);
        mx_ndarray_free(w[idx]);
        mx_ndarray_free(g[idx]);
    }
    mx_optimizer_free(opt);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(adam_bias_correction)
{
    /* Constant gradient g: m_t = g(1-b1^t), v_t = g^2(1-b2^t), so each step
     * is lr*|g|*s/(|g|*s + eps) with s = sqrt(1-b2^t): about lr, where an
     * uncorrected first step would be lr*0.1*g/sqrt(0.001*g^2) = 3.16*lr. */
    mx_runtime *rt = make_runtime();
    mx_optimizer *opt = NULL;
    const char *k[] = {"learning_rate"}, *v[] = {"0.1"};
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "adam", k, v, 1, &opt), MX_OK);
    float one = 1.0f, half = 0.5f;
    mx_ndarray *w = array_f32(rt, 1, &one), *g = array_f32(rt, 1, &half);
    mx_ndarray *w2 = array_f32(rt, 1, &one), *g2 = array_f32(rt, 1, &half);
    /* MXNet's kernels take beta1/beta2 as float32 (the moments decay with
     * those), its Python corrects lr with the exact doubles. */
    const double b1f = (float)0.9, b2f = (float)0.999;
    double expect = 1.0;
    for (int t = 1; t <= 3; t++) {
        ck_assert_int_eq(mx_optimizer_update(opt, 0, w, g), MX_OK);
        double lr_t = 0.1 * sqrt(1.0 - pow(0.999, t)) / (1.0 - pow(0.9, t));
        double m = 0.5 * (1.0 - pow(b1f, t)), v = 0.25 * (1.0 - pow(b2f, t));
        double step = lr_t * m / (sqrt(v) + 1e-8);
        ck_assert_msg(fabs(step - 0.1) < 1e-5, "t=%d: corrected step %.9g is not about lr", t, step);
        expect -= step;
        float got;
        read_f32(w, &got, 1);
        ck_assert_msg(fabs(got - expect) < 2e-7, "t=%d: %.9g vs %.9g", t, got, expect);
        ck_assert_int_eq(mx_optimizer_update_count(opt, 0), t);
    }
    /* t is per parameter: index 1's first update is a bias-corrected t=1
     * step although num_update is 3. */
    ck_assert_int_eq(mx_optimizer_update(opt, 1, w2, g2), MX_OK);
    float got;
    read_f32(w2, &got, 1);
    double step1 = 0.1 * sqrt(0.001) / 0.1 * (0.5 * (1 - b1f)) / (sqrt(0.25 * (1 - b2f)) + 1e-8);
    ck_assert_msg(fabs(got - (1.0 - step1)) < 2e-7, "index 1: %.9g vs %.9g", got, 1.0 - step1);
    ck_assert_int_eq(mx_optimizer_num_update(opt), 3);
    mx_ndarray_free(w);
    mx_ndarray_free(g);
    mx_ndarray_free(w2);
    mx_ndarray_free(g2);
    mx_optimizer_free(opt);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(multipliers_and_names)
{
    mx_runtime *rt = make_runtime();
    mx_optimizer *opt = NULL;
    mx_optimizer_params p;
    ck_assert_int_eq(mx_optimizer_defaults("sgd", &p), MX_OK);
    p.wd = 0.1;
    ck_assert_int_eq(mx_optimizer_create(rt, "sgd", &p, &opt), MX_OK);
    const char *names[] = {"conv1_weight", "conv1_bias", "bn1_gamma", "bn1_beta", "fc_bias", "embed"};
    for (int i = 0; i < 6; i++) ck_assert_int_eq(mx_optimizer_set_param_name(opt, i, names[i]), MX_OK);
    const double want[] = {1, 0, 1, 0, 0, 0};
    for (int i = 0; i < 6; i++) ck_assert_double_eq(mx_optimizer_wd_mult(opt, i), want[i]);
    ck_assert_double_eq(mx_optimizer_wd_mult(opt, 99), 1.0); /* unnamed */
    ck_assert_int_eq(mx_optimizer_set_wd_mult(opt, 4, 0.5), MX_OK); /* explicit wins */
    ck_assert_double_eq(mx_optimizer_wd_mult(opt, 4), 0.5);
    ck_assert_int_eq(mx_optimizer_set_wd_mult(opt, 0, 0.0), MX_OK);
    ck_assert_double_eq(mx_optimizer_wd_mult(opt, 0), 0.0);
    ck_assert_double_eq(mx_optimizer_lr_mult(opt, 3), 1.0);
    ck_assert_int_eq(mx_optimizer_set_lr_mult(opt, 3, 10), MX_OK);
    ck_assert_double_eq(mx_optimizer_lr_mult(opt, 3), 10.0);
    expect_error(mx_optimizer_set_lr_mult(opt, 3, -1), MX_ERR_INVALID, "lr_mult");
    expect_error(mx_optimizer_set_lr_mult(opt, -1, 1), MX_ERR_INVALID, "index -1");

    /* A bias with wd and lr_mult: w = (1 - 0)*w - lr*10*g. */
    float w0 = 1.0f, g0 = 0.5f, out;
    mx_ndarray *w = array_f32(rt, 1, &w0), *g = array_f32(rt, 1, &g0);
    ck_assert_int_eq(mx_optimizer_update(opt, 3, w, g), MX_OK);
    read_f32(w, &out, 1);
    ck_assert_float_eq_tol(out, 1.0f - 0.01f * 10 * 0.5f, 1e-7f);

    /* learning rate: settable without a schedule, not with one. */
    ck_assert_int_eq(mx_optimizer_set_learning_rate(opt, 0.2), MX_OK);
    ck_assert_double_eq(mx_optimizer_learning_rate(opt), 0.2);
    mx_lr_scheduler *s = NULL;
    const char *sk[] = {"step", "factor"}, *sv[] = {"1", "0.5"};
    ck_assert_int_eq(mx_lr_scheduler_create_kv("factor", sk, sv, 2, &s), MX_OK);
    ck_assert_int_eq(mx_optimizer_set_lr_scheduler(opt, s), MX_OK);
    ck_assert_double_eq(mx_lr_scheduler_get_params(s)->base_lr, 0.2); /* the optimizer's rate */
    expect_error(mx_optimizer_set_learning_rate(opt, 0.3), MX_ERR_INVALID, "lr_scheduler");
    /* num_update is 1: factor(step 1) has not reduced yet. */
    ck_assert_double_eq_tol(mx_optimizer_learning_rate(opt), 0.2, 1e-15);
    mx_ndarray_free(w);
    mx_ndarray_free(g);
    mx_optimizer_free(opt);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(defaults_are_mxnets)
{
    mx_optimizer_params p;
    ck_assert_int_eq(mx_optimizer_defaults("sgd", &p), MX_OK);
    ck_assert_double_eq(p.learning_rate, 0.01);
    ck_assert_double_eq(p.momentum, 0);
    ck_assert_double_eq(p.wd, 0);
    ck_assert_double_eq(p.rescale_grad, 1);
    ck_assert_double_eq(p.clip_gradient, -1);
    ck_assert_int_eq(p.begin_num_update, 0);
    ck_assert_int_eq(mx_optimizer_defaults("NAG", &p), MX_OK);
    ck_assert_double_eq(p.learning_rate, 0.01);
    ck_assert_int_eq(mx_optimizer_defaults("adam", &p), MX_OK);
    ck_assert_double_eq(p.learning_rate, 0.001);
    ck_assert_double_eq(p.beta1, 0.9);
    ck_assert_double_eq(p.beta2, 0.999);
    ck_assert_double_eq(p.epsilon, 1e-8);
    ck_assert_int_eq(mx_optimizer_defaults("rmsprop", &p), MX_OK);
    ck_assert_double_eq(p.learning_rate, 0.001);
    ck_assert_double_eq(p.gamma1, 0.9);
    ck_assert_double_eq(p.gamma2, 0.9);
    ck_assert_double_eq(p.epsilon, 1e-8);
    ck_assert(!p.centered);
    ck_assert_double_eq(p.clip_weights, -1);
    ck_assert_int_eq(mx_optimizer_defaults("adagrad", &p), MX_OK);
    ck_assert_double_eq(p.learning_rate, 0.01);
    ck_assert_double_eq(p.epsilon, 1e-7);
    ck_assert_str_eq(mx_optimizer_name_at(0), "sgd");
    ck_assert_ptr_null(mx_optimizer_name_at(5));

    mx_lr_scheduler_params s;
    ck_assert_int_eq(mx_lr_scheduler_defaults("factor", &s), MX_OK);
    ck_assert_double_eq(s.base_lr, 0.01);
    ck_assert_double_eq(s.factor, 1);
    ck_assert_double_eq(s.stop_factor_lr, 1e-8);
    ck_assert_int_eq(s.warmup_steps, 0);
    ck_assert_int_eq(s.warmup_mode, MX_WARMUP_LINEAR);
    ck_assert_int_eq(mx_lr_scheduler_defaults("poly", &s), MX_OK);
    ck_assert_double_eq(s.pwr, 2);
    ck_assert_double_eq(s.final_lr, 0);
}
END_TEST

START_TEST(bad_names_and_parameters)
{
    mx_runtime *rt = make_runtime();
    mx_optimizer *opt = NULL;
    expect_error(mx_optimizer_create_kv(rt, "adma", NULL, NULL, 0, &opt), MX_ERR_INVALID, "did you mean 'adam'");
    ck_assert_ptr_null(opt);
    expect_error(mx_optimizer_create_kv(rt, "sgdd", NULL, NULL, 0, &opt), MX_ERR_INVALID, "did you mean 'sgd'");
    expect_error(mx_optimizer_create_kv(rt, "lbfgs", NULL, NULL, 0, &opt), MX_ERR_INVALID, "unknown optimizer");
    const char *k1[] = {"momentun"}, *v1[] = {"0.9"};
    expect_error(mx_optimizer_create_kv(rt, "sgd", k1, v1, 1, &opt), MX_ERR_INVALID, "did you mean 'momentum'");
    const char *k2[] = {"momentum"}, *v2[] = {"0.9"};
    expect_error(mx_optimizer_create_kv(rt, "adam", k2, v2, 1, &opt), MX_ERR_INVALID, "unknown parameter 'momentum'");
    const char *k3[] = {"momentum"}, *v3[] = {"1.5"};
    expect_error(mx_optimizer_create_kv(rt, "sgd", k3, v3, 1, &opt), MX_ERR_INVALID, "between 0 and 1");
    const char *k4[] = {"beta1"}, *v4[] = {"1"};
    expect_error(mx_optimizer_create_kv(rt, "adam", k4, v4, 1, &opt), MX_ERR_INVALID, "beta1");
    const char *k5[] = {"centered"}, *v5[] = {"maybe"};
    expect_error(mx_optimizer_create_kv(rt, "rmsprop", k5, v5, 1, &opt), MX_ERR_INVALID, "centered");
    const char *k6[] = {"epsilon"}, *v6[] = {"1e-6"};
    expect_error(mx_optimizer_create_kv(rt, "adagrad", k6, v6, 1, &opt), MX_ERR_INVALID, "unknown parameter 'epsilon'");
    const char *k7[] = {"lr", "wd"}, *v7[] = {"0.5", "-1"};
    expect_error(mx_optimizer_create_kv(rt, "nag", k7, v7, 2, &opt), MX_ERR_INVALID, "'wd'");
    /* "lr" is learning_rate. */
    const char *k8[] = {"lr"}, *v8[] = {"0.5"};
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "nag", k8, v8, 1, &opt), MX_OK);
    ck_assert_double_eq(mx_optimizer_get_params(opt)->learning_rate, 0.5);
    mx_optimizer_free(opt);
    /* Typed form: same checks. */
    mx_optimizer_params p;
    ck_assert_int_eq(mx_optimizer_defaults("sgd", &p), MX_OK);
    p.momentum = -0.1;
    expect_error(mx_optimizer_create(rt, "sgd", &p, &opt), MX_ERR_INVALID, "momentum");
    ck_assert_int_eq(mx_optimizer_defaults("adam", &p), MX_OK);
    p.beta2 = 1.0;
    expect_error(mx_optimizer_create(rt, "adam", &p, &opt), MX_ERR_INVALID, "beta2");

    /* Update arguments. */
    ck_assert_int_eq(mx_optimizer_create_kv(rt, "sgd", NULL, NULL, 0, &opt), MX_OK);
    mx_ndarray *w = array_f32(rt, 4, NULL), *g3 = array_f32(rt, 3, NULL), *wi = NULL, *gi = NULL;
    ck_assert_int_eq(mx_nd_fill(w, 0), MX_OK);
    ck_assert_int_eq(mx_nd_fill(g3, 0), MX_OK);
    expect_error(mx_optimizer_update(opt, 0, w, g3), MX_ERR_INVALID, "differ");
    expect_error(mx_optimizer_update(opt, 0, w, w), MX_ERR_INVALID, "share memory");
    expect_error(mx_optimizer_update(opt, 1 << 24, w, w), MX_ERR_INVALID, "out of range");
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(4), MX_INT32, mx_cpu(), &wi), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(4), MX_INT32, mx_cpu(), &gi), MX_OK);
    expect_error(mx_optimizer_update(opt, 0, wi, gi), MX_ERR_UNSUPPORTED, "int32");
    ck_assert_int_eq(mx_optimizer_update_count(opt, 0), 0); /* nothing counted */
    mx_ndarray_free(w);
    mx_ndarray_free(g3);
    mx_ndarray_free(wi);
    mx_ndarray_free(gi);
    mx_optimizer_free(opt);
    mx_runtime_free(rt);
}
END_TEST

/* ------------------------------------------------------------ schedules */

static mx_lr_scheduler *sched_kv(const char *kind, int n, const char *const *kv)
{
    const char *k[16] = {0}, *v[16] = {0};
    for (int i = 0; i < n; i++) k[i] = kv[2 * i], v[i] = kv[2 * i + 1];
    mx_lr_scheduler *s = NULL;
    ck_assert_msg(mx_lr_scheduler_create_kv(kind, k, v, n, &s) == MX_OK, "%s", mx_last_error());
    return s;
}

static void expect_rates(mx_lr_scheduler *s, int n, const int *updates, const double *rates)
{
    for (int i = 0; i < n; i++) {
        double got = mx_lr_scheduler_lr(s, updates[i]);
        ck_assert_msg(fabs(got - rates[i]) <= 1e-12 * (1 + rates[i]), "%s at update %d: %.17g, expected %.17g",
                      mx_lr_scheduler_kind_name(s), updates[i], got, rates[i]);
    }
}

START_TEST(schedules_match_hand_computed_rates)
{
    /* factor: warm-up 0.01 -> 0.1 over 4 updates, then halve every 5. */
    const char *f[] = {"step", "5", "factor", "0.5", "base_lr", "0.1", "warmup_steps", "4", "warmup_begin_lr", "0.01"};
    mx_lr_scheduler *s = sched_kv("factor", 5, f);
    const int fu[] = {0, 1, 2, 3, 4, 5, 6, 10, 11, 16, 21};
    const double fr[] = {0.01, 0.0325, 0.055, 0.0775, 0.1, 0.1, 0.05, 0.05, 0.025, 0.0125, 0.00625};
    expect_rates(s, 11, fu, fr);
    mx_lr_scheduler_free(s);
    /* factor with a floor. */
    const char *f2[] = {"step", "3", "factor", "0.1", "base_lr", "0.1", "stop_factor_lr", "1e-4"};
    s = sched_kv("FactorScheduler", 4, f2);
    const int f2u[] = {1, 3, 4, 7, 10, 13, 100};
    const double f2r[] = {0.1, 0.1, 0.01, 0.001, 1e-4, 1e-4, 1e-4};
    expect_rates(s, 7, f2u, f2r);
    mx_lr_scheduler_free(s);
    /* multifactor with constant warm-up. */
    const char *m[] = {"step", "[6, 13, 20]", "factor", "0.3", "base_lr", "0.2",
                       "warmup_steps", "5", "warmup_mode", "constant", "warmup_begin_lr", "0.05"};
    s = sched_kv("multifactor", 6, m);
    const int mu[] = {0, 4, 5, 6, 7, 13, 14, 20, 21, 50};
    const double mr[] = {0.05, 0.05, 0.2, 0.2, 0.06, 0.06, 0.018, 0.018, 0.0054, 0.0054};
    expect_rates(s, 10, mu, mr);
    mx_lr_scheduler_free(s);
    /* poly: 0.02 -> 0.1 over 5 updates, then (1 - k/25)^2 to 0.001. */
    const char *p[] = {"max_update", "30", "base_lr", "0.1", "pwr", "2", "final_lr", "0.001",
                       "warmup_steps", "5", "warmup_begin_lr", "0.02"};
    s = sched_kv("poly", 6, p);
    const int pu[] = {0, 1, 5, 15, 25, 30, 35};
    const double pr[] = {0.02, 0.036, 0.1, 0.001 + 0.099 * 0.36, 0.001 + 0.099 * 0.04, 0.001, 0.001};
    expect_rates(s, 7, pu, pr);
    mx_lr_scheduler_free(s);
    /* cosine: linear warm-up from 0 over 6, then half a cosine over 24. */
    const char *c[] = {"max_update", "30", "base_lr", "0.1", "final_lr", "0.01", "warmup_steps", "6"};
    s = sched_kv("cosine", 4, c);
    const int cu[] = {0, 3, 6, 12, 18, 24, 30, 40};
    const double cr[] = {0, 0.05, 0.1, 0.01 + 0.09 * (1 + sqrt(0.5)) / 2, 0.055, 0.01 + 0.09 * (1 - sqrt(0.5)) / 2,
                         0.01, 0.01};
    expect_rates(s, 8, cu, cr);
    mx_lr_scheduler_free(s);

    /* In epochs: steps at epochs 2 and 4 of 10 updates, warm-up half an epoch. */
    const int64_t epochs[] = {2, 4};
    mx_lr_epoch_schedule e = {.kind = "multifactor", .base_lr = 0.1, .factor = 0.1, .step_epochs = epochs,
                              .n_step_epochs = 2, .warmup_epochs = 0.5, .warmup_begin_lr = 0,
                              .updates_per_epoch = 10};
    ck_assert_int_eq(mx_lr_scheduler_create_epochs(&e, &s), MX_OK);
    ck_assert_int_eq(mx_lr_scheduler_get_params(s)->steps[0], 20);
    ck_assert_int_eq(mx_lr_scheduler_get_params(s)->steps[1], 40);
    ck_assert_int_eq(mx_lr_scheduler_get_params(s)->warmup_steps, 5);
    const int eu[] = {1, 5, 20, 21, 41};
    const double er[] = {0.02, 0.1, 0.1, 0.01, 0.001};
    expect_rates(s, 5, eu, er);
    mx_lr_scheduler_free(s);
    e = (mx_lr_epoch_schedule){.kind = "cosine", .base_lr = 0.1, .num_epoch = 3, .updates_per_epoch = 10};
    ck_assert_int_eq(mx_lr_scheduler_create_epochs(&e, &s), MX_OK);
    ck_assert_int_eq(mx_lr_scheduler_get_params(s)->max_update, 30);
    const int cu2[] = {15, 30};
    const double cr2[] = {0.05, 0};
    expect_rates(s, 2, cu2, cr2);
    mx_lr_scheduler_free(s);
    e = (mx_lr_epoch_schedule){.kind = "factor", .base_lr = 0.1, .factor = 0.5, .step_epochs = epochs,
                               .n_step_epochs = 1, .updates_per_epoch = 100};
    ck_assert_int_eq(mx_lr_scheduler_create_epochs(&e, &s), MX_OK);
    ck_assert_int_eq(mx_lr_scheduler_get_params(s)->step, 200);
    mx_lr_scheduler_free(s);
}
END_TEST

START_TEST(schedule_errors)
{
    mx_lr_scheduler *s = NULL;
    expect_error(mx_lr_scheduler_create_kv("cosin", NULL, NULL, 0, &s), MX_ERR_INVALID, "did you mean 'cosine'");
    const char *k1[] = {"stepz"}, *v1[] = {"5"};
    expect_error(mx_lr_scheduler_create_kv("factor", k1, v1, 1, &s), MX_ERR_INVALID, "did you mean 'step'");
    expect_error(mx_lr_scheduler_create_kv("factor", NULL, NULL, 0, &s), MX_ERR_INVALID, "required parameter 'step'");
    const char *k2[] = {"step", "factor"}, *v2[] = {"5", "2"};
    expect_error(mx_lr_scheduler_create_kv("factor", k2, v2, 2, &s), MX_ERR_INVALID, "factor");
    const char *k3[] = {"step"}, *v3[] = {"[10, 5]"};
    expect_error(mx_lr_scheduler_create_kv("multifactor", k3, v3, 1, &s), MX_ERR_INVALID, "increase");
    const char *k4[] = {"max_update", "warmup_steps"}, *v4[] = {"10", "10"};
    expect_error(mx_lr_scheduler_create_kv("cosine", k4, v4, 2, &s), MX_ERR_INVALID, "max_update");
    const char *k5[] = {"max_update", "base_lr", "warmup_begin_lr"}, *v5[] = {"10", "0.1", "0.2"};
    expect_error(mx_lr_scheduler_create_kv("poly", k5, v5, 3, &s), MX_ERR_INVALID, "warmup_begin_lr");
    const char *k6[] = {"max_update", "warmup_mode"}, *v6[] = {"10", "linaer"};
    expect_error(mx_lr_scheduler_create_kv("poly", k6, v6, 2, &s), MX_ERR_INVALID, "did you mean 'linear'");
    ck_assert_ptr_null(s);
    mx_lr_scheduler_params p;
    ck_assert_int_eq(mx_lr_scheduler_defaults("multifactor", &p), MX_OK);
    p.n_steps = 0;
    expect_error(mx_lr_scheduler_create("multifactor", &p, &s), MX_ERR_INVALID, "step");
    const int64_t bad[] = {0};
    mx_lr_epoch_schedule e = {.kind = "multifactor", .base_lr = 0.1, .factor = 0.1, .step_epochs = bad,
                              .n_step_epochs = 1, .updates_per_epoch = 10};
    expect_error(mx_lr_scheduler_create_epochs(&e, &s), MX_ERR_INVALID, "step epoch");
}
END_TEST

/* ------------------------------------------------------------ states */

/* Runs `steps` updates of both parameters with gradients from step `from`. */
static void train(mx_optimizer *opt, mx_ndarray **w, mx_ndarray **g, int from, int steps)
{
    for (int t = from; t < from + steps; t++)
        for (int idx = 0; idx < 2; idx++) {
            float gv[N];
            for (int i = 0; i < N; i++) gv[i] = (float)grad_value(i, t, idx);
            ck_assert_int_eq(mx_ndarray_from_host(g[idx], gv, sizeof(gv)), MX_OK);
            ck_assert_int_eq(mx_optimizer_update(opt, idx, w[idx], g[idx]), MX_OK);
        }
}

static mx_optimizer *make_opt(mx_runtime *rt, const char *name, int nk, const char **k, const char **v, bool sched)
{
    mx_optimizer *opt = NULL;
    ck_assert_int_eq(mx_optimizer_create_kv(rt, name, k, v, nk, &opt), MX_OK);
    if (sched) {
        const char *sk[] = {"step", "factor"}, *sv[] = {"2", "0.5"};
        mx_lr_scheduler *s = NULL;
        ck_assert_int_eq(mx_lr_scheduler_create_kv("factor", sk, sv, 2, &s), MX_OK);
        ck_assert_int_eq(mx_optimizer_set_lr_scheduler(opt, s), MX_OK);
    }
    return opt;
}

static void round_trip(const char *name, int nk, const char **k, const char **v)
{
    mx_runtime *rt = make_runtime();
    mx_optimizer *a = make_opt(rt, name, nk, k, v, true);
    mx_ndarray *wa[2], *wb[2], *g[2];
    for (int idx = 0; idx < 2; idx++) {
        float w0[N];
        for (int i = 0; i < N; i++) w0[i] = (float)(0.2 * i - 0.7);
        wa[idx] = array_f32(rt, N, w0);
        g[idx] = array_f32(rt, N, NULL);
    }
    train(a, wa, g, 0, 3);
    /* Save through a .params buffer and load back. */
    mx_ndarray_list states;
    ck_assert_int_eq(mx_optimizer_get_states(a, &states), MX_OK);
    void *buf = NULL;
    size_t bytes = 0;
    ck_assert_int_eq(mx_ndarray_save_buffer(states.arrays, (const char *const *)states.names, states.count, &buf,
                                            &bytes),
                     MX_OK);
    mx_ndarray_list_free(&states);
    mx_ndarray_list loaded;
    ck_assert_int_eq(mx_ndarray_load_buffer(rt, buf, bytes, &loaded), MX_OK);
    free(buf);
    mx_optimizer *b = make_opt(rt, name, nk, k, v, true);
    ck_assert_msg(mx_optimizer_set_states(b, &loaded) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_optimizer_num_update(b), 3);
    ck_assert_int_eq(mx_optimizer_update_count(b, 1), 3);
    ck_assert_double_eq(mx_optimizer_learning_rate(b), mx_optimizer_learning_rate(a));
    /* Another optimizer refuses them. */
    mx_optimizer *other = make_opt(rt, strcmp(name, "sgd") ? "sgd" : "adam", 0, NULL, NULL, false);
    expect_error(mx_optimizer_set_states(other, &loaded), MX_ERR_FORMAT, "saved by");
    mx_optimizer_free(other);
    mx_ndarray_list_free(&loaded);
    /* Both continue identically, bit for bit. */
    for (int idx = 0; idx < 2; idx++) {
        float cur[N];
        read_f32(wa[idx], cur, N);
        wb[idx] = array_f32(rt, N, cur);
    }
    train(a, wa, g, 3, 3);
    train(b, wb, g, 3, 3);
    {
        mx_ndarray_list states;
        ck_assert_int_eq(mx_optimizer_get_states(a, &states), MX_OK);
        void *buf = NULL;
        size_t bytes = 0;
        ck_assert_int_eq(mx_ndarray_save_buffer(states.arrays, (const char *const *)states.names, states.count, &buf,
                                                &bytes),
                         MX_OK);
        /* The view saves to the same bytes now, and its state arrays are the
         * live ones: after more updates they hold the new state, where the
         * snapshot keeps the old one. */
        mx_ndarray_list view;
        ck_assert_int_eq(mx_optimizer_view_states(a, &view), MX_OK);
        ck_assert_int_eq(view.count, states.count);
        void *vbuf = NULL;
        size_t vbytes = 0;
        ck_assert_int_eq(mx_ndarray_save_buffer(view.arrays, (const char *const *)view.names, view.count, &vbuf, &vbytes),
                         MX_OK);
        ck_assert_uint_eq(vbytes, bytes);
        ck_assert_msg(!memcmp(vbuf, buf, bytes), "%s: view and snapshot save differently", name);
        free(vbuf);
        float *before = calloc((size_t)states.count * N, sizeof(float));
        ck_assert_ptr_nonnull(before);
        for (int i = 0; i < states.count; i++)
            if (strchr(states.names[i], ':') && isdigit((unsigned char)states.names[i][0]))
                read_f32(states.arrays[i], before + i * N, N);
        train(a, wa, g, 6, 1);
        train(b, wb, g, 6, 1);
        mx_ndarray_list now;
        ck_assert_int_eq(mx_optimizer_get_states(a, &now), MX_OK);
        int moved = 0;
        for (int i = 0; i < view.count; i++) {
            if (!strchr(view.names[i], ':') || !isdigit((unsigned char)view.names[i][0])) continue;
            ck_assert_str_eq(view.names[i], now.names[i]);
            float x[N], y[N], z[N];
            read_f32(view.arrays[i], x, N);
            read_f32(now.arrays[i], y, N);
            read_f32(states.arrays[i], z, N);
            ck_assert_msg(!memcmp(x, y, sizeof(x)), "%s: %s is not the live state", name, view.names[i]);
            ck_assert_msg(!memcmp(z, before + i * N, sizeof(z)), "%s: the snapshot %s moved", name, states.names[i]);
            moved += memcmp(x, z, sizeof(x)) != 0;
        }
        ck_assert_msg(moved > 0, "%s: no state array moved in an update", name);
        free(before);
        mx_ndarray_list_free(&now);
        mx_ndarray_list_free(&view);
        mx_ndarray_list_free(&states);
        free(buf);
    }
    for (int idx = 0; idx < 2; idx++) {
        float x[N], y[N];
        read_f32(wa[idx], x, N);
        read_f32(wb[idx], y, N);
        ck_assert_msg(!memcmp(x, y, sizeof(x)), "%s: restored run differs for param %d", name, idx);
        mx_ndarray_free(wa[idx]);
        mx_ndarray_free(wb[idx]);
        mx_ndarray_free(g[idx]);
    }
    mx_optimizer_free(a);
    mx_optimizer_free(b);
    mx_runtime_free(rt);
}

/* mx_optimizer_update_many on host arrays: one update per parameter in
 * list order (the schedule counts each), the same bits as calling
 * mx_optimizer_update in a loop; a NULL weight is an error. */
START_TEST(update_many_equals_a_loop)
{
    mx_runtime *rt = make_runtime();
    const char *k[] = {"learning_rate", "momentum"}, *v[] = {"0.1", "0.9"};
    mx_optimizer *opt[2];
    mx_ndarray *w[2][2], *g[2][2];
    for (int way = 0; way < 2; way++) {
        opt[way] = make_opt(rt, "sgd", 2, k, v, true);
        for (int idx = 0; idx < 2; idx++) {
            float wv[N];
            for (int i = 0; i < N; i++) wv[i] = (float)grad_value(i, 99, idx);
            w[way][idx] = array_f32(rt, N, wv);
            g[way][idx] = array_f32(rt, N, NULL);
        }
    }
    int index[2] = {1, 0};
    for (int t = 0; t < 5; t++) {
        for (int way = 0; way < 2; way++)
            for (int idx = 0; idx < 2; idx++) {
                float gv[N];
                for (int i = 0; i < N; i++) gv[i] = (float)grad_value(i, t, idx);
                ck_assert_int_eq(mx_ndarray_from_host(g[way][idx], gv, sizeof(gv)), MX_OK);
            }
        for (int j = 0; j < 2; j++)
            ck_assert_int_eq(mx_optimizer_update(opt[0], index[j], w[0][index[j]], g[0][index[j]]), MX_OK);
        mx_ndarray *ws[2] = {w[1][1], w[1][0]}, *gs[2] = {g[1][1], g[1][0]};
        ck_assert_int_eq(mx_optimizer_update_many(opt[1], 2, index, ws, gs), MX_OK);
    }
    for (int idx = 0; idx < 2; idx++) {
        float a[N], b[N];
        read_f32(w[0][idx], a, N);
        read_f32(w[1][idx], b, N);
        ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
    }
    mx_ndarray *none[1] = {NULL};
    expect_error(mx_optimizer_update_many(opt[1], 1, index, none, none), MX_ERR_INVALID, "weight is NULL");
    for (int way = 0; way < 2; way++) {
        mx_optimizer_free(opt[way]);
        for (int idx = 0; idx < 2; idx++) mx_ndarray_free(w[way][idx]), mx_ndarray_free(g[way][idx]);
    }
    mx_runtime_free(rt);
}
END_TEST

/* dist_async's server updates on its own thread: the same bits as the
 * engine's update, whose large arrays the kernel pool splits, weights and
 * states, for every optimizer with states. */
START_TEST(update_now_equals_the_engine_update)
{
    enum { BIG = 40000 }; /* above the size the engine's update splits */
    mx_runtime *rt = make_runtime();
    static const char *const names[] = {"sgd", "adam", "rmsprop", "nag"};
    static float wv[BIG], gv[BIG], a[BIG], b[BIG];
    for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
        const char *k[] = {"learning_rate", "wd"}, *v[] = {"0.01", "0.001"};
        mx_optimizer *opt[2] = {make_opt(rt, names[n], 2, k, v, true), make_opt(rt, names[n], 2, k, v, true)};
        if (!strcmp(names[n], "sgd") || !strcmp(names[n], "nag")) { /* momentum: a state */
            mx_optimizer_free(opt[0]), mx_optimizer_free(opt[1]);
            const char *km[] = {"learning_rate", "momentum"}, *vm[] = {"0.1", "0.9"};
            opt[0] = make_opt(rt, names[n], 2, km, vm, true);
            opt[1] = make_opt(rt, names[n], 2, km, vm, true);
        }
        for (int i = 0; i < BIG; i++) wv[i] = (float)grad_value(i, 99, 0);
        mx_ndarray *w[2] = {array_f32(rt, BIG, wv), array_f32(rt, BIG, wv)};
        mx_ndarray *g = array_f32(rt, BIG, NULL);
        for (int t = 0; t < 4; t++) {
            for (int i = 0; i < BIG; i++) gv[i] = (float)grad_value(i, t, 0);
            ck_assert_int_eq(mx_ndarray_from_host(g, gv, sizeof(gv)), MX_OK);
            ck_assert_int_eq(mx_optimizer_update(opt[0], 3, w[0], g), MX_OK);
            ck_assert_int_eq(mx_optimizer_update_now(opt[1], 3, w[1], g), MX_OK);
        }
        read_f32(w[0], a, BIG);
        read_f32(w[1], b, BIG);
        ck_assert_msg(!memcmp(a, b, sizeof(a)), "%s: weights differ", names[n]);
        ck_assert_msg(memcmp(a, wv, sizeof(a)), "%s: nothing was updated", names[n]);
        mx_ndarray *st[2][4];
        int ns = mx_optimizer_states(opt[0], 3, st[0], NULL);
        ck_assert_int_eq(mx_optimizer_states(opt[1], 3, st[1], NULL), ns);
        ck_assert_msg(ns > 0, "%s has no state to compare", names[n]);
        for (int j = 0; j < ns; j++) {
            read_f32(st[0][j], a, BIG);
            read_f32(st[1][j], b, BIG);
            ck_assert_msg(!memcmp(a, b, sizeof(a)), "%s: state %d differs", names[n], j);
        }
        ck_assert_int_eq(mx_optimizer_update_count(opt[1], 3), 4);
        expect_error(mx_optimizer_update_now(opt[1], 3, w[1], w[1]), MX_ERR_INVALID, "share memory");
        mx_optimizer_free(opt[0]), mx_optimizer_free(opt[1]);
        mx_ndarray_free(w[0]), mx_ndarray_free(w[1]), mx_ndarray_free(g);
    }
    mx_runtime_free(rt);
}
END_TEST

START_TEST(states_round_trip_exactly)
{
    const char *ka[] = {"learning_rate", "wd"}, *va[] = {"0.01", "0.01"};
    round_trip("adam", 2, ka, va);
    const char *ks[] = {"learning_rate", "momentum"}, *vs[] = {"0.1", "0.9"};
    round_trip("sgd", 2, ks, vs);
    const char *kr[] = {"centered"}, *vr[] = {"1"};
    round_trip("rmsprop", 1, kr, vr);
    round_trip("adagrad", 0, NULL, NULL);
}
END_TEST

START_TEST(state_errors)
{
    mx_runtime *rt = make_runtime();
    const char *k[] = {"momentum"}, *v[] = {"0.9"};
    mx_optimizer *a = make_opt(rt, "sgd", 1, k, v, true);
    mx_ndarray *w[2], *g[2];
    for (int idx = 0; idx < 2; idx++) {
        w[idx] = array_f32(rt, N, NULL);
        g[idx] = array_f32(rt, N, NULL);
        ck_assert_int_eq(mx_nd_fill(w[idx], 1), MX_OK);
    }
    train(a, w, g, 0, 1);
    mx_ndarray_list states;
    ck_assert_int_eq(mx_optimizer_get_states(a, &states), MX_OK);
    /* Names: meta, counts, schedule, two momenta. */
    ck_assert_int_eq(states.count, 5);
    ck_assert_str_eq(states.names[0], "optimizer:sgd");
    ck_assert_str_eq(states.names[1], "counts");
    ck_assert_str_eq(states.names[2], "lr_scheduler:factor");
    ck_assert_str_eq(states.names[3], "0:mom");
    /* sgd without momentum keeps no state: a 'mom' entry is refused. */
    mx_optimizer *plain = make_opt(rt, "sgd", 0, NULL, NULL, true);
    expect_error(mx_optimizer_set_states(plain, &states), MX_ERR_FORMAT, "not a state");
    /* No schedule attached. */
    mx_optimizer *nosched = make_opt(rt, "sgd", 1, k, v, false);
    expect_error(mx_optimizer_set_states(nosched, &states), MX_ERR_FORMAT, "no lr_scheduler");
    /* A restored state that does not fit the weight is caught at the update. */
    mx_optimizer *b = make_opt(rt, "sgd", 1, k, v, true);
    ck_assert_int_eq(mx_optimizer_set_states(b, &states), MX_OK);
    mx_ndarray *w3 = array_f32(rt, 3, NULL), *g3 = array_f32(rt, 3, NULL);
    ck_assert_int_eq(mx_nd_fill(w3, 0), MX_OK);
    ck_assert_int_eq(mx_nd_fill(g3, 0), MX_OK);
    expect_error(mx_optimizer_update(b, 0, w3, g3), MX_ERR_INVALID, "restored state 'mom'");
    /* Something that is not optimizer state. */
    mx_ndarray_list junk = {.count = 1, .arrays = &w3, .names = (char *[]){"arg:fc_weight"}};
    expect_error(mx_optimizer_set_states(b, &junk), MX_ERR_FORMAT, "unknown entry");
    mx_ndarray_list_free(&states);
    for (int idx = 0; idx < 2; idx++) {
        mx_ndarray_free(w[idx]);
        mx_ndarray_free(g[idx]);
    }
    mx_ndarray_free(w3);
    mx_ndarray_free(g3);
    mx_optimizer_free(a);
    mx_optimizer_free(plain);
    mx_optimizer_free(nosched);
    mx_optimizer_free(b);
    mx_runtime_free(rt);
}
END_TEST

/* ------------------------------------------------------------ engine */

static mx_status slow_fill(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    usleep(300000);
    float *g = mx_ndarray_data(payload);
    for (int i = 0; i < 4; i++) g[i] = 2.0f;
    return MX_OK;
}

START_TEST(updates_are_pushed_to_the_engine)
{
    mx_runtime *rt = make_runtime();
    const char *k[] = {"learning_rate"}, *v[] = {"0.5"};
    mx_optimizer *opt = make_opt(rt, "sgd", 1, k, v, false);
    float one[4] = {1, 1, 1, 1};
    mx_ndarray *w = array_f32(rt, 4, one), *g = array_f32(rt, 4, NULL);
    /* A slow operation produces the gradient. */
    mx_engine_var *writes[1] = {mx_ndarray_var(g)};
    mx_engine_op op = {.fn = slow_fill, .payload = g, .writes = writes, .n_writes = 1, .ctx = mx_cpu(),
                       .name = "slow gradient"};
    double t0 = mx_time_seconds();
    ck_assert_int_eq(mx_engine_push(mx_runtime_engine(rt), &op), MX_OK);
    ck_assert_int_eq(mx_optimizer_update(opt, 0, w, g), MX_OK);
    double pushed = mx_time_seconds() - t0;
    if (!mx_engine_is_naive(mx_runtime_engine(rt))) { /* NaiveEngine runs each push at once */
        ck_assert_msg(pushed < 0.15, "update blocked for %.3f s", pushed);
        ck_assert_int_ge(mx_engine_pending(mx_runtime_engine(rt)), 2);
    }
    float out[4];
    read_f32(w, out, 4);
    ck_assert_msg(mx_time_seconds() - t0 >= 0.29, "the update ran before its gradient");
    for (int i = 0; i < 4; i++) ck_assert_float_eq(out[i], 0.0f); /* 1 - 0.5*2 */
    mx_ndarray_free(w);
    mx_ndarray_free(g);
    mx_optimizer_free(opt);
    mx_runtime_free(rt);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optimizer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, optimizers_match_references, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_loop_test(tc, matches_mxnet_bit_for_bit, 0, (int)(sizeof(mxnet_rows) / sizeof(mxnet_rows[0])));
    tcase_add_test(tc, adam_bias_correction);
    tcase_add_test(tc, multipliers_and_names);
    tcase_add_test(tc, defaults_are_mxnets);
    tcase_add_test(tc, bad_names_and_parameters);
    tcase_add_test(tc, schedules_match_hand_computed_rates);
    tcase_add_test(tc, schedule_errors);
    tcase_add_test(tc, states_round_trip_exactly);
    tcase_add_test(tc, update_many_equals_a_loop);
    tcase_add_test(tc, update_now_equals_the_engine_update);
    tcase_add_test(tc, state_errors);
    tcase_add_test(tc, updates_are_pushed_to_the_engine);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
