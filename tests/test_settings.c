/*
 * test_settings.c - the settings sections of a config reach their owners
 * (lib/train/settings.h): [train]/[val] through lib/io's iterator kinds,
 * [optimizer] through lib/optimizer's optimizer and schedule tables, [fit]
 * through lib/train's table and the modules of its structured values.
 *
 * The central test walks every row of every one of those tables: a config
 * that sets the key to a value other than its default must change what
 * the owning module receives (the iterator's parameters, the optimizer's
 * and the schedule's parameters as created, the initializer and metrics as
 * created, the trainer's [fit] values). A key that a module accepts and
 * then drops on the way fails it, and a key added later is covered without
 * a new test.
 */
#include "config/config.h"
#include "device/device.h"
#include "train/settings.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NET "[layer fc]\nop = FullyConnected\nnum_hidden = 4\n[layer sm]\nop = SoftmaxOutput\n"

/* A config and its settings, or NULL with the error in mx_last_error(). */
typedef struct loaded {
    mx_config *cfg;
    mx_train_settings *s;
} loaded;

static bool load_text(const char *text, loaded *out)
{
    out->cfg = NULL;
    out->s = NULL;
    if (mx_config_parse("t.conf", text, strlen(text), NULL, 0, &out->cfg) != MX_OK) return false;
    if (mx_train_settings_load(out->cfg, &out->s) != MX_OK) {
        mx_config_free(out->cfg);
        out->cfg = NULL;
        return false;
    }
    return true;
}

static void unload(loaded *l)
{
    mx_train_settings_free(l->s);
    mx_config_free(l->cfg);
    l->s = NULL;
    l->cfg = NULL;
}

static loaded load_ok_text(const char *text)
{
    loaded l;
    ck_assert_msg(load_text(text, &l), "unexpected error: %s\n--- config:\n%s", mx_last_error(), text);
    return l;
}

static loaded load_ok_file(const char *path, const char *const *ov, int n)
{
    loaded l = {0};
    ck_assert_msg(mx_config_load(path, ov, n, &l.cfg) == MX_OK, "%s: %s", path, mx_last_error());
    ck_assert_msg(mx_train_settings_load(l.cfg, &l.s) == MX_OK, "%s: %s", path, mx_last_error());
    return l;
}

static const char *spec_value(const mx_data_iter_spec *spec, const char *key)
{
    static char buf[8][256];
    static int slot;
    char *b = buf[slot++ % 8];
    ck_assert_ptr_nonnull(spec);
    ck_assert_msg(mx_data_iter_spec_format(spec, key, b, 256) != NULL, "no key '%s'", key);
    return b;
}

/* ------------------------------------------------------------ shipped configs */

START_TEST(lenet_settings)
{
    loaded l = load_ok_file("configs/lenet.conf", NULL, 0);
    const mx_train_settings *s = l.s;
    ck_assert_str_eq(mx_data_iter_spec_kind(s->train)->name, "mnist");
    ck_assert_str_eq(spec_value(s->train, "batch_size"), "64");
    ck_assert_str_eq(spec_value(s->train, "shuffle"), "True");
    ck_assert_str_eq(spec_value(s->val, "shuffle"), "False");
    ck_assert_str_eq(spec_value(s->train, "image"), "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
    ck_assert_str_eq(spec_value(s->val, "label"), "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
    ck_assert(mx_data_iter_spec_given(s->train, "shuffle"));
    ck_assert(!mx_data_iter_spec_given(s->train, "num_parts"));
    mx_shape d, lb;
    ck_assert_int_eq(mx_data_iter_spec_shapes(s->train, &d, &lb), MX_OK);
    mx_shape want = MX_SHAPE(64, 1, 28, 28), want_l = MX_SHAPE(64);
    ck_assert(mx_shape_equal(&d, &want) && mx_shape_equal(&lb, &want_l));

    ck_assert_str_eq(s->optimizer.name, "sgd");
    ck_assert_double_eq(s->optimizer.params.learning_rate, 0.05);
    ck_assert_double_eq(s->optimizer.params.momentum, 0.9);
    ck_assert_double_eq(s->optimizer.params.wd, 0.0001);
    ck_assert(!s->optimizer.rescale_grad_given);
    ck_assert_str_eq(s->optimizer.lr_scheduler, "multifactor");
    ck_assert_int_eq(s->optimizer.n_step_epochs, 2);
    ck_assert_int_eq(s->optimizer.step_epochs[0], 5);
    ck_assert_int_eq(s->optimizer.step_epochs[1], 8);
    ck_assert_double_eq(s->optimizer.schedule.lr_factor, 0.1);

    ck_assert_int_eq(s->fit.num_epoch, 10);
    ck_assert_int_eq(s->n_ctx, 1);
    ck_assert(mx_context_equal(s->ctx[0], mx_cpu()));
    ck_assert_str_eq(s->fit.kvstore, "local");
    ck_assert_str_eq(s->fit.model_prefix, "models/lenet");
    char json[256];
    ck_assert_str_eq(mx_initializer_dumps(s->initializer, json, sizeof(json)),
                     "[\"xavier\", {\"rnd_type\": \"gaussian\", \"factor_type\": \"in\", \"magnitude\": 2}]");
    ck_assert_int_eq(s->n_metrics, 2);
    ck_assert_str_eq(s->metrics[0].name, "acc");
    ck_assert_str_eq(s->metrics[1].name, "ce");
    ck_assert_int_eq(s->fit.disp_batches, 100);
    ck_assert_int_eq(s->fit.load_epoch, -1);
    ck_assert_int_eq(s->fit.grad_accum, 1);
    ck_assert(!s->fit.check_numerics);

    /* The located pairs the owners parse: file order, the selector kept. */
    mx_param_input in;
    mx_config_section_input(l.cfg, "train", &in);
    ck_assert_int_eq(in.n, 5);
    ck_assert_str_eq(in.keys[0], "iter");
    ck_assert_str_eq(in.keys[3], "batch_size");
    ck_assert_str_eq(in.values[3], "64");
    ck_assert_str_eq(in.where[1], "configs/lenet.conf:65: [train] image");
    ck_assert_str_eq(in.section, "configs/lenet.conf:63: [train]");
    mx_config_section_input(l.cfg, "nosuch", &in);
    ck_assert_int_eq(in.n, 0);
    unload(&l);
}
END_TEST

START_TEST(imagenet_settings)
{
    loaded l = load_ok_file("configs/resnet-50.conf", NULL, 0);
    const mx_train_settings *s = l.s;
    ck_assert_str_eq(mx_data_iter_spec_kind(s->train)->name, "imagerecord");
    ck_assert_str_eq(spec_value(s->train, "path_imgrec"), "data/imagenet/train.rec");
    ck_assert_str_eq(spec_value(s->train, "data_shape"), "(3, 224, 224)");
    ck_assert_str_eq(spec_value(s->train, "rand_crop"), "True");
    ck_assert_str_eq(spec_value(s->train, "mirror"), "False");
    ck_assert_str_eq(spec_value(s->train, "mean_r"), "123.68");
    ck_assert_str_eq(spec_value(s->val, "resize"), "256");
    ck_assert_str_eq(spec_value(s->train, "round_batch"), "True");
    mx_data_image_norm norm;
    ck_assert(mx_data_iter_spec_image_norm(s->val, &norm));
    ck_assert_int_eq(norm.resize, 256);
    ck_assert_float_eq_tol(norm.mean[0], 123.68f, 1e-4);
    ck_assert_str_eq(s->optimizer.lr_scheduler, "multifactor");
    ck_assert_int_eq(s->optimizer.n_step_epochs, 3);
    ck_assert_int_eq(s->optimizer.step_epochs[2], 80);
    ck_assert(mx_context_equal(s->ctx[0], mx_gpu(0)));
    ck_assert_str_eq(s->fit.kvstore, "device");
    ck_assert_int_eq(s->n_metrics, 3);
    ck_assert_str_eq(s->metrics[1].name, "top_k_acc");
    ck_assert_int_eq(s->metrics[1].params.top_k, 5);
    ck_assert_str_eq(mx_initializer_name(s->initializer), "msraprelu");
    unload(&l);
}
END_TEST

START_TEST(defaults_of_absent_sections)
{
    loaded l = load_ok_text(NET);
    const mx_train_settings *s = l.s;
    ck_assert_ptr_null(s->train);
    ck_assert_ptr_null(s->val);
    ck_assert_ptr_null(mx_train_settings_shape_source(s));
    ck_assert_str_eq(s->optimizer.name, "sgd");
    ck_assert_double_eq(s->optimizer.params.learning_rate, 0.01);
    ck_assert_double_eq(s->optimizer.params.momentum, 0);
    ck_assert_double_eq(s->optimizer.params.clip_gradient, -1);
    ck_assert_ptr_null(s->optimizer.lr_scheduler);
    ck_assert_int_eq(s->fit.num_epoch, 10);
    ck_assert(s->n_ctx == 1 && mx_context_equal(s->ctx[0], mx_cpu()));
    ck_assert_str_eq(s->fit.model_prefix, "");
    ck_assert_int_eq(s->fit.save_period, 1);
    ck_assert(s->n_metrics == 1 && !strcmp(s->metrics[0].name, "acc"));
    ck_assert_int_eq(s->fit.disp_batches, 20);
    ck_assert_str_eq(mx_initializer_name(s->initializer), "xavier");
    unload(&l);

    /* Each optimizer's own defaults (MXNet's): adam's rate and epsilon. */
    l = load_ok_text(NET "[optimizer]\ntype = adam\n[train]\niter = mnist\nimage = a\nlabel = b\n");
    ck_assert_double_eq(l.s->optimizer.params.learning_rate, 0.001);
    ck_assert_double_eq(l.s->optimizer.params.beta2, 0.999);
    ck_assert_double_eq(l.s->optimizer.params.epsilon, 1e-8);
    ck_assert_str_eq(spec_value(l.s->train, "batch_size"), "128"); /* MXNet's MNISTIter default */
    ck_assert_str_eq(spec_value(l.s->train, "shuffle"), "True");
    unload(&l);
}
END_TEST

START_TEST(overrides_reach_the_owners)
{
    const char *ov[] = {"fit.num_epoch=2", "optimizer.lr=0.5", "fit.ctx=gpu:0-3", "train.batch_size=8",
                        "val.shuffle=1",   "fit.grad_accum=4", "optimizer.rescale_grad=0.25"};
    loaded l = load_ok_file("configs/lenet.conf", ov, (int)(sizeof(ov) / sizeof(ov[0])));
    ck_assert_int_eq(l.s->fit.num_epoch, 2);
    ck_assert_double_eq(l.s->optimizer.params.learning_rate, 0.5);
    ck_assert(l.s->optimizer.rescale_grad_given);
    ck_assert_int_eq(l.s->n_ctx, 4);
    for (int i = 0; i < 4; i++) ck_assert(mx_context_equal(l.s->ctx[i], mx_gpu(i)));
    ck_assert_str_eq(spec_value(l.s->train, "batch_size"), "8");
    ck_assert_str_eq(spec_value(l.s->val, "shuffle"), "True");
    ck_assert_int_eq(l.s->fit.grad_accum, 4);
    mx_param_input in;
    mx_config_section_input(l.cfg, "fit", &in);
    int k = mx_param_input_find(&in, "num_epoch");
    ck_assert_int_ge(k, 0);
    ck_assert_str_eq(in.where[k], "command line: [fit] num_epoch");
    unload(&l);
}
END_TEST

/* Under mpirun with several ranks a host, each rank takes the GPU of
 * fit.ctx at its local rank (cmd/mxtrain calls this with lib/comm's
 * topology); a rank alone on its host and CPU contexts keep the list. */
START_TEST(ranks_of_a_host_take_one_gpu_each)
{
    loaded l;
    ck_assert(load_text(NET "[fit]\nctx = gpu:0-3\n", &l));
    ck_assert_int_eq(mx_train_settings_for_rank(l.s, 0, 1, "node7"), MX_OK); /* alone: all four */
    ck_assert_int_eq(l.s->n_ctx, 4);
    ck_assert_int_eq(mx_train_settings_for_rank(l.s, 2, 4, "node7"), MX_OK);
    ck_assert(l.s->n_ctx == 1 && mx_context_equal(l.s->ctx[0], mx_gpu(2)));
    unload(&l);
    ck_assert(load_text(NET "[fit]\nctx = gpu:0,2,5\n", &l));
    ck_assert_int_eq(mx_train_settings_for_rank(l.s, 2, 3, "node7"), MX_OK);
    ck_assert(l.s->n_ctx == 1 && mx_context_equal(l.s->ctx[0], mx_gpu(5)));
    unload(&l);
    ck_assert(load_text(NET "[fit]\nctx = gpu:1\n", &l)); /* one GPU: every rank takes it as given */
    ck_assert_int_eq(mx_train_settings_for_rank(l.s, 3, 4, "node7"), MX_OK);
    ck_assert(l.s->n_ctx == 1 && mx_context_equal(l.s->ctx[0], mx_gpu(1)));
    unload(&l);
    ck_assert(load_text(NET "[fit]\nctx = gpu:0-3\n", &l));
    ck_assert_int_eq(mx_train_settings_for_rank(l.s, 0, 8, "node7"), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "[fit] ctx: 'gpu:0-3' lists 4 GPU(s) for the 8 ranks on host node7") &&
                      strstr(mx_last_error(), "(list at least 8, e.g. gpu:0-7)"),
                  "%s", mx_last_error());
    unload(&l);
    ck_assert(load_text(NET "[fit]\nctx = gpu:0-1\nwork_load_list = 1, 3\n", &l));
    ck_assert_int_eq(mx_train_settings_for_rank(l.s, 1, 2, "node7"), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "[fit] work_load_list: shares of several contexts of one process"), "%s",
                  mx_last_error());
    unload(&l);
    ck_assert(load_text(NET "[fit]\nctx = cpu:0-1\n", &l));
    ck_assert_int_eq(mx_train_settings_for_rank(l.s, 1, 2, "node7"), MX_OK);
    ck_assert_int_eq(l.s->n_ctx, 2);
    unload(&l);
}
END_TEST

START_TEST(structured_values)
{
    mx_context *ctx = NULL;
    int n = 0;
    ck_assert_int_eq(mx_device_parse_list("gpu:0,2", &ctx, &n), MX_OK);
    ck_assert(n == 2 && mx_context_equal(ctx[0], mx_gpu(0)) && mx_context_equal(ctx[1], mx_gpu(2)));
    free(ctx);
    ck_assert_int_eq(mx_device_parse_list("gpu(1)", &ctx, &n), MX_OK);
    ck_assert(n == 1 && mx_context_equal(ctx[0], mx_gpu(1)));
    free(ctx);
    ck_assert_int_eq(mx_device_parse_list(" gpu ", &ctx, &n), MX_OK);
    ck_assert(n == 1 && mx_context_equal(ctx[0], mx_gpu(0)));
    free(ctx);
    ck_assert_int_eq(mx_device_parse_list("cpu:0-3", &ctx, &n), MX_OK);
    ck_assert(n == 4 && mx_context_equal(ctx[3], (mx_context){MX_DEV_CPU, 3}));
    free(ctx);
    ck_assert_int_eq(mx_device_parse_list("gpu:0-3,5", &ctx, &n), MX_OK);
    ck_assert(n == 5 && mx_context_equal(ctx[4], mx_gpu(5)));
    free(ctx);
    const char *bad[] = {"", "tpu", "gpu:1-0", "cpu,gpu:0", "gpu:0,0", "gpu:x", "gpu:", "gpu(1", "gpu:0,", "cpu:0,0",
                         "gpu:99999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ctx = NULL;
        ck_assert_msg(mx_device_parse_list(bad[i], &ctx, &n) == MX_ERR_INVALID, "'%s' accepted", bad[i]);
        ck_assert_ptr_null(ctx);
    }

    static const struct {
        const char *text, *json;
    } inits[] = {
        {"xavier", "[\"xavier\", {\"rnd_type\": \"uniform\", \"factor_type\": \"avg\", \"magnitude\": 3}]"},
        {"Xavier(rnd_type='gaussian', factor_type=\"out\", magnitude=2.5)",
         "[\"xavier\", {\"rnd_type\": \"gaussian\", \"factor_type\": \"out\", \"magnitude\": 2.5}]"},
        {"msra", "[\"msraprelu\", {\"factor_type\": \"avg\", \"slope\": 0.25}]"},
        {"uniform(scale=0.1)", "[\"uniform\", {\"scale\": 0.1}]"},
        {"zero()", "[\"zero\", {}]"},
        {"constant(value=-1.5)", "[\"constant\", {\"value\": -1.5}]"},
    };
    for (size_t i = 0; i < sizeof(inits) / sizeof(inits[0]); i++) {
        mx_initializer *init = NULL;
        ck_assert_msg(mx_initializer_parse(inits[i].text, &init) == MX_OK, "%s: %s", inits[i].text, mx_last_error());
        char json[256];
        ck_assert_str_eq(mx_initializer_dumps(init, json, sizeof(json)), inits[i].json);
        mx_initializer_free(init);
    }
    const char *bad_init[] = {"xavier(", "xavier(magnitude)", "normal(sigma=-1)", "normal(sigma=1, sigma=2)",
                              "constant(value=x)", "constant", "zero(value=1)", "xavier(rnd_type=normal)", "nope", "",
                              "xavier(magnitude=2) x", "(sigma=1)"};
    for (size_t i = 0; i < sizeof(bad_init) / sizeof(bad_init[0]); i++) {
        mx_initializer *init = NULL;
        ck_assert_msg(mx_initializer_parse(bad_init[i], &init) == MX_ERR_INVALID, "'%s' accepted", bad_init[i]);
        ck_assert_ptr_null(init);
    }

    mx_metric_spec *m = NULL;
    ck_assert_int_eq(mx_metric_parse_list("acc, top_k_acc:5, ce(eps=1e-10), top_k_acc(top_k=3)", &m, &n), MX_OK);
    ck_assert_int_eq(n, 4);
    ck_assert(!strcmp(m[1].name, "top_k_acc") && m[1].params.top_k == 5);
    ck_assert_double_eq(m[2].params.eps, 1e-10);
    ck_assert_int_eq(m[3].params.top_k, 3);
    free(m);
    const char *bad_metric[] = {"", "acc,", "acc, acc", "top_k_acc", "top_k_acc:1", "acc:5", "top5", "ce(eps=2)",
                                "acc(axis=x)"};
    for (size_t i = 0; i < sizeof(bad_metric) / sizeof(bad_metric[0]); i++) {
        m = NULL;
        ck_assert_msg(mx_metric_parse_list(bad_metric[i], &m, &n) == MX_ERR_INVALID, "'%s' accepted", bad_metric[i]);
        ck_assert_ptr_null(m);
    }
}
END_TEST

/* ------------------------------------------------------------ every key */

/* The sections' other keys that make a config valid, per owner. */
typedef struct base_key {
    const char *key, *value;
} base_key;

/* Candidate values other than `def` for a row, in MXNet's syntax. */
static int candidates(const mx_param_desc *d, const char *def, char out[][256], int cap)
{
    int n = 0;
    bool ranged = d->min <= d->max;
#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if (n < cap) snprintf(out[n++], 256, __VA_ARGS__);                                                            \
    } while (0)
    switch (d->type) {
    case MX_PARAM_INT: {
        long long v = def ? strtoll(def, NULL, 10) : 1;
        long long c[] = {v + 1, v + 2, v - 1, 2, 3, 7, 100};
        for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
            if ((!def || c[i] != v) && (!ranged || (c[i] >= d->min && c[i] <= d->max))) ADD("%lld", c[i]);
        if (ranged && d->min > -1e15 && (!def || (long long)d->min != v)) ADD("%lld", (long long)d->min);
        break;
    }
    case MX_PARAM_FLOAT: {
        double v = def ? strtod(def, NULL) : 1;
        double c[] = {v * 0.5, v + 0.25, 0.3, 0.7, v * 2, 2.5, 1e-3};
        for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
            if ((!def || c[i] != v) && (!ranged || (c[i] >= d->min && c[i] <= d->max))) ADD("%.17g", c[i]);
        break;
    }
    case MX_PARAM_BOOL: {
        bool v = def && (!strcmp(def, "1") || !strcasecmp(def, "true"));
        ADD("%s", v ? "0" : "1");
        break;
    }
    case MX_PARAM_ENUM:
        for (int i = 0; d->choices[i]; i++)
            if (!def || strcmp(def, d->choices[i])) ADD("%s", d->choices[i]);
        break;
    case MX_PARAM_TUPLE: {
        const char *c[] = {"(3, 32, 32)", "(1, 28, 28)", "(4, 8, 8)", "(2, 3)", "(5,)"};
        for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
            if (!def || strcmp(def, c[i])) ADD("%s", c[i]);
        break;
    }
    case MX_PARAM_STRING: {
        /* Values with a structure of their own, else any text. */
        static const base_key known[] = {
            {"ctx", "cpu:3"},           {"kvstore", "device"},     {"initializer", "normal(sigma=0.5)"},
            {"metric", "ce"},           {"fixed_params", "fc_*"},  {"lr_step_epochs", "2, 3"},
            {"lr_step_epochs", "4"},    {"data_csv", "other.csv"}, {"work_load_list", "2"},
            {"profile_batches", "3-5"},
        };
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            if (!strcmp(d->name, known[i].key) && (!def || strcmp(def, known[i].value))) ADD("%s", known[i].value);
        if (!def || strcmp(def, "x")) ADD("x");
        ADD("data/some file.rec");
        break;
    }
    }
#undef ADD
    return n;
}

/* The config text: NET, then [section] with the base keys (key itself
 * replaced by value, or added). value NULL: the base alone. */
static void compose(char *buf, size_t size, const char *section, const base_key *base, int n_base, const char *key,
                    const char *value)
{
    int used = snprintf(buf, size, NET "[%s]\n", section);
    bool placed = false;
    for (int i = 0; i < n_base; i++) {
        if (key && !strcmp(base[i].key, key)) {
            used += snprintf(buf + used, size - (size_t)used, "%s = %s\n", key, value);
            placed = true;
        } else {
            used += snprintf(buf + used, size - (size_t)used, "%s = %s\n", base[i].key, base[i].value);
        }
    }
    if (key && !placed) snprintf(buf + used, size - (size_t)used, "%s = %s\n", key, value);
}

/* What the owner of a section received, for one row: filled by a probe. */
typedef struct received {
    char text[4096];
} received;

typedef void (*probe_fn)(const loaded *l, const mx_param_desc *d, received *out);

static void field_text(const mx_param_desc *d, const void *params, received *out)
{
    mx_params_format(d, params, out->text, sizeof(out->text));
}

/* Iterators: the parameters mx_data_iter_create_spec hands to create. */
static void probe_iter(const loaded *l, const mx_param_desc *d, received *out)
{
    field_text(d, mx_data_iter_spec_params(l->s->train), out);
}

/* The optimizer as created for a run, and its schedule. */
static void probe_optimizer(const loaded *l, const mx_param_desc *d, received *out)
{
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_optimizer_run run = {.samples_per_update = 64, .updates_per_epoch = 10, .num_epoch = 5};
    mx_optimizer *opt;
    ck_assert_msg(mx_optimizer_create_spec(rt, &l->s->optimizer, &run, &opt) == MX_OK, "%s", mx_last_error());
    if (d) {
        field_text(d, mx_optimizer_get_params(opt), out);
    } else { /* a schedule key: the whole schedule as created */
        mx_lr_scheduler *sched = mx_optimizer_lr_scheduler(opt);
        ck_assert_ptr_nonnull(sched);
        const mx_lr_scheduler_params *p = mx_lr_scheduler_get_params(sched);
        int used = snprintf(out->text, sizeof(out->text), "%s base %.17g step %lld factor %.17g stop %.17g max %lld "
                                                          "pwr %.17g final %.17g warm %lld from %.17g mode %d steps",
                            mx_lr_scheduler_kind_name(sched), p->base_lr, (long long)p->step, p->factor,
                            p->stop_factor_lr, (long long)p->max_update, p->pwr, p->final_lr,
                            (long long)p->warmup_steps, p->warmup_begin_lr, p->warmup_mode);
        for (int i = 0; i < p->n_steps; i++)
            used += snprintf(out->text + used, sizeof(out->text) - (size_t)used, " %lld", (long long)p->steps[i]);
    }
    mx_optimizer_free(opt);
    mx_runtime_free(rt);
}

/* [fit]: the trainer reads its values; structured ones as their modules
 * parsed them. */
static void probe_fit(const loaded *l, const mx_param_desc *d, received *out)
{
    const mx_train_settings *s = l->s;
    int used = 0;
    if (!strcmp(d->name, "ctx")) {
        for (int i = 0; i < s->n_ctx; i++)
            used += snprintf(out->text + used, sizeof(out->text) - (size_t)used, "%d:%d ", s->ctx[i].dev_type,
                             s->ctx[i].dev_id);
    } else if (!strcmp(d->name, "initializer")) {
        mx_initializer_dumps(s->initializer, out->text, sizeof(out->text));
    } else if (!strcmp(d->name, "metric")) {
        for (int i = 0; i < s->n_metrics; i++)
            used += snprintf(out->text + used, sizeof(out->text) - (size_t)used, "%s(%lld,%lld,%g) ", s->metrics[i].name,
                             (long long)s->metrics[i].params.axis, (long long)s->metrics[i].params.top_k,
                             s->metrics[i].params.eps);
    } else if (!strcmp(d->name, "work_load_list")) {
        for (int i = 0; s->work_load && i < s->n_ctx; i++)
            used += snprintf(out->text + used, sizeof(out->text) - (size_t)used, "%g ", s->work_load[i]);
    } else if (!strcmp(d->name, "profile_batches")) {
        snprintf(out->text, sizeof(out->text), "%lld..%lld", (long long)s->profile_first, (long long)s->profile_last);
    } else if (!strcmp(d->name, "fixed_params")) {
        for (int i = 0; i < s->n_fixed; i++)
            used += snprintf(out->text + used, sizeof(out->text) - (size_t)used, "%s;", s->fixed[i]);
        used += snprintf(out->text + used, sizeof(out->text) - (size_t)used, "fc_weight frozen: %d",
                         mx_train_settings_fixed(s, "fc_weight"));
    } else {
        field_text(d, &s->fit, out);
    }
}

/* Initializer and metric arguments: the object created from fit's value. */
static void probe_initializer(const loaded *l, const mx_param_desc *d, received *out)
{
    field_text(d, mx_initializer_get_params(l->s->initializer), out);
}

static void probe_metric(const loaded *l, const mx_param_desc *d, received *out)
{
    mx_metric *m;
    ck_assert_int_eq(mx_metric_create(l->s->metrics[0].name, &l->s->metrics[0].params, &m), MX_OK);
    field_text(d, mx_metric_get_params(m), out);
    mx_metric_free(m);
}

static int rows_checked, rows_refused;

/* For every row of `table` in `section` (config form "key = value", or,
 * with call_name, "fit_key = call_name(key=value)"): some non-default
 * value is accepted and changes what probe() sees. */
static void check_table(const char *owner, const char *section, const base_key *base, int n_base,
                        const mx_param_desc *table, int n_table, probe_fn probe, bool whole_schedule,
                        const char *call_key, const char *call_name, const char *call_base)
{
    char text[16384], value[512];
    for (int r = 0; r < n_table; r++) {
        const mx_param_desc *d = &table[r];
        const mx_param_desc *pd = whole_schedule ? NULL : d;
        /* The baseline: the base alone (a required row takes its base value). */
        const char *def = d->default_value;
        for (int i = 0; i < n_base; i++)
            if (!strcmp(base[i].key, d->name) && !call_key) def = base[i].value;
        loaded l;
        received before, after;
        if (call_key) {
            base_key b[8];
            int nb = 0;
            for (int i = 0; i < n_base; i++) b[nb++] = base[i];
            b[nb++] = (base_key){call_key, call_base};
            compose(text, sizeof(text), section, b, nb, NULL, NULL);
        } else {
            compose(text, sizeof(text), section, base, n_base, NULL, NULL);
        }
        ck_assert_msg(load_text(text, &l), "%s: the base config fails: %s\n%s", owner, mx_last_error(), text);
        probe(&l, pd, &before);
        unload(&l);
        char cands[16][256];
        int nc = candidates(d, def, cands, 16);
        bool changed = false, all_unsupported = nc > 0;
        char last_error[8192] = "no candidate value";
        for (int c = 0; c < nc && !changed; c++) {
            if (call_key) {
                /* top_k_acc needs its top_k: keep the base arguments. */
                const char *open = strchr(call_base, '(');
                char args[256] = "";
                if (open && strncmp(open + 1, d->name, strlen(d->name))) {
                    snprintf(args, sizeof(args), "%.*s, ", (int)(strlen(open + 1) - 1), open + 1);
                }
                snprintf(value, sizeof(value), "%s(%s%s=%s)", call_name, args, d->name, cands[c]);
                base_key b[8];
                int nb = 0;
                for (int i = 0; i < n_base; i++) b[nb++] = base[i];
                b[nb++] = (base_key){call_key, value};
                compose(text, sizeof(text), section, b, nb, NULL, NULL);
            } else {
                compose(text, sizeof(text), section, base, n_base, d->name, cands[c]);
            }
            if (!load_text(text, &l)) {
                snprintf(last_error, sizeof(last_error), "%s", mx_last_error());
                all_unsupported = all_unsupported && mx_last_status() == MX_ERR_UNSUPPORTED;
                continue;
            }
            all_unsupported = false;
            probe(&l, pd, &after);
            unload(&l);
            if (strcmp(before.text, after.text)) changed = true;
            else snprintf(last_error, sizeof(last_error), "'%s' accepted but the owner got '%s' as before", cands[c],
                          after.text);
        }
        /* A key this build only has at its default says so for every other
         * value (MX_ERR_UNSUPPORTED): refused, never silently dropped. */
        if (!changed && all_unsupported) {
            rows_refused++;
            rows_checked++;
            continue;
        }
        ck_assert_msg(changed, "%s: key '%s' does not reach its owner: %s", owner, d->name, last_error);
        rows_checked++;
    }
}

START_TEST(every_key_reaches_its_owner)
{
    rows_checked = rows_refused = 0;
    int total = 0;
    /* Iterator kinds: [train] iter = KIND. */
    for (int k = 0; mx_data_iter_kind_at(k); k++) {
        const mx_data_iter_kind *kind = mx_data_iter_kind_at(k);
        base_key base[8] = {{"iter", kind->name}};
        int nb = 1;
        if (!strcmp(kind->name, "mnist")) {
            base[nb++] = (base_key){"image", "a.gz"};
            base[nb++] = (base_key){"label", "b.gz"};
        } else if (!strcmp(kind->name, "imagerecord")) {
            base[nb++] = (base_key){"path_imgrec", "a.rec"};
            base[nb++] = (base_key){"data_shape", "(3, 16, 16)"};
            base[nb++] = (base_key){"batch_size", "4"};
        } else if (!strcmp(kind->name, "csv")) {
            base[nb++] = (base_key){"data_csv", "a.csv"};
            base[nb++] = (base_key){"data_shape", "(3,)"};
            base[nb++] = (base_key){"batch_size", "4"};
        } else if (!strcmp(kind->name, "synthetic")) {
            base[nb++] = (base_key){"data_shape", "(3, 8, 8)"};
            base[nb++] = (base_key){"num_classes", "10"};
            base[nb++] = (base_key){"num_samples", "100"};
            base[nb++] = (base_key){"batch_size", "4"};
        } else {
            ck_abort_msg("iterator kind '%s' needs its required keys here", kind->name);
        }
        /* part_index needs parts to choose from. */
        if (mx_params_find(kind->params, kind->n_params, "num_parts")) base[nb++] = (base_key){"num_parts", "4"};
        char owner[64];
        snprintf(owner, sizeof(owner), "iter = %s", kind->name);
        check_table(owner, "train", base, nb, kind->params, kind->n_params, probe_iter, false, NULL, NULL, NULL);
        total += kind->n_params;
    }
    /* Optimizers: [optimizer] type = KIND. */
    for (int k = 0; mx_optimizer_name_at(k); k++) {
        const mx_param_desc *t;
        int n;
        ck_assert_int_eq(mx_optimizer_param_table(mx_optimizer_name_at(k), &t, &n), MX_OK);
        base_key base[1] = {{"type", mx_optimizer_name_at(k)}};
        check_table(mx_optimizer_name_at(k), "optimizer", base, 1, t, n, probe_optimizer, false, NULL, NULL, NULL);
        total += n;
    }
    /* Schedules: [optimizer] lr_scheduler = KIND, keys in epochs. */
    for (int k = 1; mx_lr_scheduler_name_at(k); k++) {
        const char *kind = mx_lr_scheduler_name_at(k);
        const mx_param_desc *t;
        int n;
        ck_assert_int_eq(mx_lr_scheduler_epoch_table(kind, &t, &n), MX_OK);
        base_key base[3] = {{"lr_scheduler", kind}, {"lr", "0.1"}};
        int nb = 2;
        if (mx_params_find(t, n, "lr_step_epochs")) base[nb++] = (base_key){"lr_step_epochs", "3"};
        check_table(kind, "optimizer", base, nb, t, n, probe_optimizer, true, NULL, NULL, NULL);
        total += n;
    }
    /* [fit]. */
    int n_fit;
    const mx_param_desc *fit = mx_fit_param_table(&n_fit);
    /* fusion_bytes is for the kvstores that sum in buckets. */
    base_key fit_base[1] = {{"kvstore", "dist_sync"}};
    check_table("fit", "fit", fit_base, 1, fit, n_fit, probe_fit, false, NULL, NULL, NULL);
    total += n_fit;
    /* Initializer arguments: fit.initializer = KIND(key=value). */
    for (int k = 0; mx_initializer_name_at(k); k++) {
        const char *kind = mx_initializer_name_at(k);
        const mx_param_desc *t;
        int n;
        ck_assert_int_eq(mx_initializer_param_table(kind, &t, &n), MX_OK);
        const char *base_call = !strcmp(kind, "constant") ? "constant(value=1)" : kind;
        check_table(kind, "fit", NULL, 0, t, n, probe_initializer, false, "initializer", kind, base_call);
        total += n;
    }
    /* Metric arguments: fit.metric = KIND(key=value). */
    for (int k = 0; mx_metric_name_at(k); k++) {
        const char *kind = mx_metric_name_at(k);
        const mx_param_desc *t;
        int n;
        ck_assert_int_eq(mx_metric_param_table(kind, &t, &n), MX_OK);
        const char *base_call = !strcmp(kind, "top_k_acc") ? "top_k_acc(top_k=2)" : kind;
        check_table(kind, "fit", NULL, 0, t, n, probe_metric, false, "metric", kind, base_call);
        total += n;
    }
    ck_assert_int_eq(rows_checked, total);
    ck_assert_int_gt(total, 100);
    printf("every_key_reaches_its_owner: %d keys reach their owners; %d more are refused as unsupported when set\n",
           rows_checked - rows_refused, rows_refused);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("settings");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, lenet_settings);
    tcase_add_test(tc, imagenet_settings);
    tcase_add_test(tc, defaults_of_absent_sections);
    tcase_add_test(tc, overrides_reach_the_owners);
    tcase_add_test(tc, structured_values);
    tcase_add_test(tc, ranks_of_a_host_take_one_gpu_each);
    tcase_add_test(tc, every_key_reaches_its_owner);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
