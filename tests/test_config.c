/*
 * test_config.c - the net config compiler (lib/config) and the dot writer
 * (lib/viz): every shipped config compiles and infers its shapes; the
 * ImageNet configs have their published parameter counts; typed settings,
 * defaults and overrides; one exact FILE:LINE message per kind of mistake;
 * thousands of random and mutated files never crash; MXNet-written symbol
 * files load, infer and draw.
 *
 * Runs from the repository root (configs/ there); fixtures are under
 * $MX_SHARED_DIR, else ../shared.
 */
#include "config/config.h"
#include "train/settings.h"
#include "viz/dot.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ helpers */

static mx_config *load_ok(const char *path, const char *const *ov, int n)
{
    mx_config *cfg = NULL;
    mx_status st = mx_config_load(path, ov, n, &cfg);
    ck_assert_msg(st == MX_OK, "%s: %s", path, mx_last_error());
    ck_assert_ptr_nonnull(cfg);
    return cfg;
}

static mx_config *parse_ok(const char *text)
{
    mx_config *cfg = NULL;
    mx_status st = mx_config_parse("t.conf", text, strlen(text), NULL, 0, &cfg);
    ck_assert_msg(st == MX_OK, "unexpected error: %s\n--- config:\n%s", mx_last_error(), text);
    return cfg;
}

/* The one-line error of a config that must fail. */
/* The config is loaded as the tools load it: compiled, then every settings
 * section parsed by its owner (lib/train/settings.h). */
static const char *parse_err_len(const char *text, size_t len, const char *const *ov, int n)
{
    mx_config *cfg = (mx_config *)1;
    mx_status st = mx_config_parse("t.conf", text, len, ov, n, &cfg);
    if (st == MX_OK) {
        mx_train_settings *settings = (mx_train_settings *)1;
        st = mx_train_settings_load(cfg, &settings);
        ck_assert_ptr_null(settings);
        mx_config_free(cfg);
        cfg = NULL;
    }
    ck_assert_msg(st == MX_ERR_INVALID, "expected MX_ERR_INVALID, got %d (%s)\n--- config:\n%s", st, mx_last_error(),
                  text);
    ck_assert_ptr_null(cfg);
    const char *msg = mx_last_error();
    ck_assert_msg(msg[0] && !strchr(msg, '\n'), "error must be one non-empty line: '%s'", msg);
    return msg;
}

static const char *parse_err(const char *text) { return parse_err_len(text, strlen(text), NULL, 0); }

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

static const char *shared_path(const char *rel, char *buf, size_t size)
{
    const char *dir = getenv("MX_SHARED_DIR");
    snprintf(buf, size, "%s/%s", dir && *dir ? dir : "../shared", rel);
    return buf;
}

/* Learned parameters: every argument except the data inputs and labels
 * (the variables in a loss layer's label slot). */
static int64_t param_count(const mx_config *cfg, const mx_graph_shapes *gs)
{
    const mx_graph *g = cfg->graph;
    uint32_t *ids = malloc(sizeof(uint32_t) * (size_t)mx_graph_num_nodes(g));
    ck_assert_ptr_nonnull(ids);
    int n = mx_graph_list_arguments(g, ids);
    /* Variables in a label slot are labels. */
    bool *label = calloc((size_t)mx_graph_num_nodes(g), sizeof(bool));
    ck_assert_ptr_nonnull(label);
    for (int i = 0; i < mx_graph_num_nodes(g); i++) {
        const mx_node *op = mx_graph_node(g, (uint32_t)i);
        if (op->kind != MX_NODE_OP) continue;
        const char *slots[MX_OP_MAX_IO];
        int ns = mx_node_input_names(op, slots);
        for (int j = 0; j < ns && j < op->n_inputs; j++)
            if (!strcmp(slots[j], "label")) label[op->inputs[j].node] = true;
    }
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const mx_node *v = mx_graph_node(g, ids[i]);
        bool skip = label[ids[i]];
        for (int k = 0; k < cfg->n_inputs; k++)
            if (!strcmp(v->name, cfg->inputs[k])) skip = true;
        if (!skip) total += mx_shape_size(mx_graph_entry_shape(gs, (mx_entry){ids[i], 0}));
    }
    free(label);
    free(ids);
    return total;
}

static void infer_ok(const mx_config *cfg, mx_shape data, mx_graph_shapes *gs)
{
    const char *names[] = {cfg->inputs[0]};
    mx_status st = mx_config_infer_shapes(cfg, names, &data, 1, gs);
    ck_assert_msg(st == MX_OK, "%s: %s", cfg->path, mx_last_error());
}

static void assert_head_shape(const mx_config *cfg, const mx_graph_shapes *gs, mx_shape want)
{
    ck_assert_int_ge(mx_graph_num_heads(cfg->graph), 1);
    const mx_shape *got = mx_graph_entry_shape(gs, mx_graph_head(cfg->graph, 0));
    char a[64], b[64];
    ck_assert_msg(mx_shape_equal(got, &want), "%s: output %s, want %s", cfg->path, mx_shape_str(got, a, sizeof(a)),
                  mx_shape_str(&want, b, sizeof(b)));
}

static const char *attr_of(const mx_config *cfg, const char *node, const char *key)
{
    uint32_t id = mx_graph_find(cfg->graph, node);
    ck_assert_msg(id != MX_NO_NODE, "no node '%s'", node);
    return mx_graph_get_attr(cfg->graph, id, key);
}

/* ------------------------------------------------------------ shipped configs */

/* The published figures and the exact counts of these configs:
 *  - AlexNet: Krizhevsky et al. 2012 say "60 million"; the two-GPU layout
 *    (conv2/4/5 in two groups) as in Caffe's bvlc_alexnet has 60,965,224.
 *  - VGG-16: Simonyan & Zisserman 2015, Table 2: 138M; 138,357,544.
 *  - ResNet-50: He et al. 2016, v1 with projection shortcuts, convolutions
 *    without bias, BatchNorm gamma and beta counted (moving statistics are
 *    auxiliary states): 25,557,032, the figure torchvision and MXNet Gluon
 *    report for resnet50_v1 ("25.6M").
 *  - ResNet-18: the same form with basic blocks: 11,689,512, torchvision's
 *    resnet18 figure ("11.7M").
 *  - MobileNet v2 (1.0): 3,504,872, torchvision's mobilenet_v2 ("3.5M").
 *  - Inception-BN (MXNet's symbols/inception-bn.py): 11,295,240. */
START_TEST(imagenet_configs_infer_and_have_published_sizes)
{
    static const struct {
        const char *path;
        int64_t params;
    } nets[] = {
        {"configs/alexnet.conf", 60965224},
        {"configs/vgg-16.conf", 138357544},
        {"configs/resnet-50.conf", 25557032},
        {"configs/resnet-18.conf", 11689512},
        {"configs/mobilenet-v2.conf", 3504872},
        {"configs/inception-bn.conf", 11295240},
    };
    for (size_t i = 0; i < sizeof(nets) / sizeof(nets[0]); i++) {
        mx_config *cfg = load_ok(nets[i].path, NULL, 0);
        mx_graph_shapes gs;
        infer_ok(cfg, MX_SHAPE(1, 3, 224, 224), &gs);
        assert_head_shape(cfg, &gs, MX_SHAPE(1, 1000));
        /* Every entry has a shape. */
        for (int e = 0; e < gs.n_entries; e++) ck_assert_int_gt(gs.shapes[e].ndim, 0);
        int64_t n = param_count(cfg, &gs);
        ck_assert_msg(n == nets[i].params, "%s: %lld parameters, want %lld", nets[i].path, (long long)n,
                      (long long)nets[i].params);
        /* The [train] iterator gives the same per-sample shape. */
        mx_train_settings *settings;
        ck_assert_msg(mx_train_settings_load(cfg, &settings) == MX_OK, "%s", mx_last_error());
        mx_shape data, label;
        ck_assert_int_eq(mx_data_iter_spec_shapes(settings->train, &data, &label), MX_OK);
        ck_assert_int_eq(data.ndim, 4);
        ck_assert_int_eq(data.dims[1], 3);
        ck_assert_int_eq(data.dims[2], 224);
        ck_assert_str_eq(mx_data_iter_spec_kind(settings->train)->name, "imagerecord");
        mx_train_settings_free(settings);
        mx_graph_shapes_free(&gs);
        mx_config_free(cfg);
    }
}
END_TEST

START_TEST(small_configs_infer)
{
    /* LeNet: conv 5x5x20 (520), conv 5x5x50 (25,050), fc 800x500 (400,500),
     * fc 500x10 (5,010). MLP: 784x128 (100,480), 128x64 (8,256), 64x10 (650).
     * ResNet-20 (MXNet's pre-activation CIFAR form): 272,544, the paper's
     * "0.27M". */
    static const struct {
        const char *path;
        int64_t params;
        mx_shape out;
    } nets[] = {
        {"configs/lenet.conf", 431080, {2, {64, 10}}},
        {"configs/mlp.conf", 109386, {2, {64, 10}}},
        {"configs/resnet-20.conf", 272544, {2, {128, 10}}},
    };
    for (size_t i = 0; i < sizeof(nets) / sizeof(nets[0]); i++) {
        mx_config *cfg = load_ok(nets[i].path, NULL, 0);
        mx_train_settings *settings;
        ck_assert_msg(mx_train_settings_load(cfg, &settings) == MX_OK, "%s", mx_last_error());
        const char *names[1] = {cfg->inputs[0]};
        mx_shape shapes[1], label;
        ck_assert_msg(mx_data_iter_spec_shapes(settings->train, &shapes[0], &label) == MX_OK, "%s", mx_last_error());
        mx_train_settings_free(settings);
        mx_graph_shapes gs;
        ck_assert_msg(mx_config_infer_shapes(cfg, names, shapes, 1, &gs) == MX_OK, "%s", mx_last_error());
        assert_head_shape(cfg, &gs, nets[i].out);
        ck_assert_int_eq(param_count(cfg, &gs), nets[i].params);
        mx_graph_shapes_free(&gs);
        mx_config_free(cfg);
    }
}
END_TEST

START_TEST(overrides_replace_and_add_keys)
{
    const char *ov[] = {"fit.num_epoch=2",      "optimizer.lr=0.5",         "fit.ctx=gpu:0-3",
                        "train.batch_size=8",   "conv1.num_filter=32",      "layer.fc1.num_hidden=100",
                        "fc1.lr_mult=2",        "val.shuffle=1",            "net.name=small"};
    mx_config *cfg = load_ok("configs/lenet.conf", ov, (int)(sizeof(ov) / sizeof(ov[0])));
    /* Settings overrides are the owners' business (test_settings.c); here
     * they are located as the command line. */
    mx_param_input in;
    mx_config_section_input(cfg, "optimizer", &in);
    ck_assert_int_eq(in.n, 7);
    int k = mx_param_input_find(&in, "lr");
    ck_assert(k >= 0 && !strcmp(in.values[k], "0.5") && !strcmp(in.where[k], "command line: [optimizer] lr"));
    ck_assert_str_eq(cfg->name, "small");
    ck_assert_str_eq(attr_of(cfg, "conv1", "num_filter"), "32");
    ck_assert_str_eq(attr_of(cfg, "fc1", "num_hidden"), "100");
    ck_assert_str_eq(attr_of(cfg, "fc1_weight", "__lr_mult__"), "2");
    char where[256];
    ck_assert_str_eq(mx_config_where(cfg, "fit", "num_epoch", where, sizeof(where)), "command line: [fit] num_epoch");
    mx_graph_shapes gs;
    infer_ok(cfg, MX_SHAPE(8, 1, 28, 28), &gs);
    assert_head_shape(cfg, &gs, MX_SHAPE(8, 10));
    mx_graph_shapes_free(&gs);
    mx_config_free(cfg);

    /* A section the file lacks is created. */
    const char *ov2[] = {"fit.num_epoch=3"};
    mx_config *c2 = NULL;
    const char *text = "[layer fc]\nop = fullc\nnum_hidden = 4\n";
    ck_assert_int_eq(mx_config_parse("t.conf", text, strlen(text), ov2, 1, &c2), MX_OK);
    ck_assert(mx_config_has_section(c2, "fit"));
    ck_assert(!mx_config_has_section(c2, "train"));
    mx_config_section_input(c2, "fit", &in);
    ck_assert(in.n == 1 && !strcmp(in.keys[0], "num_epoch") && !strcmp(in.values[0], "3"));
    ck_assert_str_eq(in.section, "command line: [fit]");
    mx_config_free(c2);

    ck_assert(mx_config_is_override("fit.num_epoch=2"));
    ck_assert(mx_config_is_override("layer.conv1.kernel=3,3"));
    ck_assert(!mx_config_is_override("--shape=data=1,2"));
    ck_assert(!mx_config_is_override("configs/lenet.conf"));
    ck_assert(!mx_config_is_override("x=1"));
}
END_TEST

START_TEST(bad_overrides_say_command_line)
{
    static const struct {
        const char *ov, *want;
    } cases[] = {
        {"fit.num_epoch=abc", "command line: [fit] num_epoch: bad value 'abc': expected an integer"},
        {"conv9.num_filter=3", "command line: 'conv9.num_filter=3': no section or layer 'conv9' (did you mean "
                               "'conv1'?)"},
        {"nonsense", "command line: 'nonsense': expected SECTION.KEY=VALUE (e.g. fit.num_epoch=2)"},
        {"conv1.num_filters=3",
         "command line: [layer conv1] num_filters: unknown key for Convolution (did you mean 'num_filter'?)"},
        {"optimizer.momentom=0.9", "command line: [optimizer] momentom: unknown key (did you mean 'momentum'?)"},
        {"fit.ctx=gpu:0,0", "command line: [fit] ctx: bad context list 'gpu:0,0': a device is listed twice (cpu, "
                            "cpu:0-3, gpu:0, gpu:0-3 or gpu:0,2)"},
    };
    const char *text = "[layer conv1]\nop = Convolution\nkernel = 5,5\nnum_filter = 20\n";
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *msg = parse_err_len(text, strlen(text), &cases[i].ov, 1);
        ck_assert_str_eq(msg, cases[i].want);
    }
}
END_TEST

/* ------------------------------------------------------------ mistakes */

#define BASE "[layer conv1]\nop = Convolution\nkernel = 5,5\nnum_filter = 20\n"

START_TEST(each_mistake_has_its_line)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[layer conv1]\nop = Convolution\nkernel = 5,5\nnum_filters = 20\n",
         "t.conf:4: [layer conv1] num_filters: unknown key for Convolution (did you mean 'num_filter'?)"},
        {BASE "[layer fc]\nop = FullyConnected\nnum_hiden = 10\n",
         "t.conf:7: [layer fc] num_hiden: unknown key for FullyConnected (did you mean 'num_hidden'?)"},
        {"[layer c]\nop = Convolutoin\n", "t.conf:2: [layer c] op: unknown operator 'Convolutoin' (did you mean "
                                          "'Convolution'?)"},
        {"[layer c]\nop = softmaxoutput\n",
         "t.conf:2: [layer c] op: unknown operator 'softmaxoutput' (did you mean 'SoftmaxOutput'?)"},
        {"[layer c]\nop = FullyConn\n", "t.conf:2: [layer c] op: unknown operator 'FullyConn' (did you mean "
                                      "'FullyConnected'?)"},
        {"[layer p]\nop = Pooling\npool_type = avg\n",
         "t.conf:1: [layer p] kernel: required unless global_pool is set"},
        {"[layer c]\nop = max_poling\n", "t.conf:2: [layer c] op: unknown operator 'max_poling' (did you mean "
                                         "'max_pooling'?)"},
        {BASE "[layer r]\nop = relu\ninput = conv2\n",
         "t.conf:7: [layer r] input: unknown input 'conv2' (did you mean 'conv1'?)"},
        {BASE "[layer r]\nop = relu\ninput = fc\n[layer fc]\nop = fullc\nnum_hidden = 10\n",
         "t.conf:7: [layer r] input: cycle: layer 'fc' is defined after this one (line 8); inputs must name "
         "earlier layers"},
        {BASE "[layer r]\nop = relu\ninput = r\n", "t.conf:7: [layer r] input: cycle: 'r' is this layer itself"},
        {BASE "[layer conv1]\nop = relu\n",
         "t.conf:5: [layer conv1]: duplicate layer name 'conv1' (first defined at line 1)"},
        {"[layer conv1]\nop = Convolution\nkernel = 5,x\nnum_filter = 20\n",
         "t.conf:3: [layer conv1] kernel: bad value '5,x': expected a tuple of integers such as (3, 3)"},
        {"[layer conv1]\nop = Convolution\nkernel = 5,5\n",
         "t.conf:1: [layer conv1] num_filter: required by Convolution but missing"},
        {"[layer conv1]\nkernel = 5,5\n", "t.conf:1: [layer conv1] op: required key is missing (e.g. op = "
                                          "Convolution)"},
        {BASE "[trian]\niter = mnist\n", "t.conf:5: [trian]: unknown section (did you mean 'train'?)"},
        {BASE "[layers x]\n", "t.conf:5: [layers x]: unknown section (did you mean 'layer'?)"},
        {"", "t.conf:1: empty config: no sections, no [layer NAME] sections"},
        {"; only a comment\n\n", "t.conf:1: empty config: no sections, no [layer NAME] sections"},
        {"[fit]\nnum_epoch = 3\n", "t.conf:1: no [layer NAME] sections: the config defines no network"},
        {BASE "this is not ini\n", "t.conf:5: expected 'key = value' or '[section]'"},
        {BASE "[layer x\n", "t.conf:5: section header without ']'"},
        {BASE "[layer x] y\n", "t.conf:5: unexpected text after ']' in section header"},
        {BASE "[layer a b]\n", "t.conf:5: [layer a b]: bad layer name 'a b': use letters, digits and _ - . / only"},
        {BASE "[layer]\n", "t.conf:5: [layer]: a layer section needs a name: [layer NAME]"},
        {BASE "[train x]\n", "t.conf:5: [train x]: [train] takes no name"},
        {BASE "[fit]\n[fit]\n", "t.conf:6: [fit]: duplicate section (first at line 5)"},
        {"[layer a]\nop = relu\n\x01\n", "t.conf:3: control character 0x01 at column 1 (not a text file?)"},
        {"[layer a]\nop = \xff\n", "t.conf:2: invalid UTF-8 byte 0xff at column 6 (not a text file?)"},
        {"[layer a]\nop = \xc3\x28\n", "t.conf:2: invalid UTF-8 byte 0xc3 at column 6 (not a text file?)"},
        {"[layer a]\nop = \xed\xa0\x80\n", "t.conf:2: invalid UTF-8 byte 0xed at column 6 (not a text file?)"},
        {BASE "[layer r]\nop = relu\ninput = data\n",
         "t.conf:1: [layer conv1]: its output is not used: no path to the network's outputs (connect it, or list "
         "it in [net] outputs)"},
        {BASE "[layer r]\nop = relu\nact_type = tanh\n",
         "t.conf:7: [layer r] act_type: set to 'relu' by op = relu (use op = Activation to choose it)"},
        {BASE "[layer r]\nop = softmax\nlabel = y\n",
         "t.conf:7: [layer r] label: softmax is the plain function and takes no label (did you mean op = "
         "SoftmaxOutput?)"},
        {BASE "[layer r]\nop = relu\nlabel = y\n", "t.conf:7: [layer r] label: Activation is not a loss layer and "
                                                   "takes no label"},
        {BASE "[layer s]\nop = SoftmaxOutput\nlabel = conv1\n", "t.conf:7: [layer s] label: 'conv1' is the name of "
                                                                "a layer"},
        {BASE "[train]\niter = mnist\nbatch_size = abc\n",
         "t.conf:7: [train] batch_size: bad value 'abc': expected an integer"},
        {BASE "[train]\niter = mnist\nbatch_size = 0\n",
         "t.conf:7: [train] batch_size: bad value '0': must be between 1 and 1e+09"},
        {BASE "[train]\niter = mnist\npath_imgrec = x.rec\n",
         "t.conf:7: [train] path_imgrec: not used with iter = mnist (only with imagerecord)"},
        {BASE "[train]\niter = mnist\nbatchsize = 3\n",
         "t.conf:7: [train] batchsize: unknown key (did you mean 'batch_size'?)"},
        {BASE "[train]\nbatch_size = 3\n",
         "t.conf:5: [train] iter: required key is missing (mnist, csv, imagerecord or synthetic)"},
        {BASE "[val]\niter = mnsit\n", "t.conf:6: [val] iter: bad value 'mnsit' (did you mean 'mnist'?)"},
        {BASE "[train]\niter = mnist\nimage = a\n", "t.conf:5: [train] label: required key is missing (iter = "
                                                    "mnist)"},
        {BASE "[train]\niter = imagerecord\npath_imgrec = a.rec\nbatch_size = 2\n",
         "t.conf:5: [train] data_shape: required key is missing (iter = imagerecord)"},
        {BASE "[train]\niter = imagerecord\npath_imgrec = a.rec\nbatch_size = 2\ndata_shape = 2,32,32\n",
         "t.conf:9: [train] data_shape: expected (C, H, W) with 1, 3 or 4 channels"},
        {BASE "[train]\niter = csv\ndata_csv = a.csv\ndata_shape = 3\nbatch_size = 2\nnum_parts = 2\npart_index = 2\n",
         "t.conf:11: [train] part_index: must be less than num_parts (2)"},
        {BASE "[optimizer]\ntype = adam\nmomentum = 0.9\n",
         "t.conf:7: [optimizer] momentum: not used with type = adam (only with sgd, nag)"},
        {BASE "[optimizer]\ntype = adamw\n", "t.conf:6: [optimizer] type: bad value 'adamw' (did you mean 'adam'?)"},
        {BASE "[optimizer]\nlr = nan\n", "t.conf:6: [optimizer] lr: bad value 'nan': expected a number"},
        {BASE "[optimizer]\nlr_scheduler = multifactor\n",
         "t.conf:5: [optimizer] lr_step_epochs: required key is missing (lr_scheduler = multifactor)"},
        {BASE "[optimizer]\nlr_scheduler = multifactor\nlr_step_epochs = 60,30\n",
         "t.conf:7: [optimizer] lr_step_epochs: epochs must increase"},
        {BASE "[optimizer]\nfinal_lr = 0.001\n",
         "t.conf:6: [optimizer] final_lr: not used with lr_scheduler = none (only with poly, cosine)"},
        {BASE "[fit]\nctx = gpu:3-1\n", "t.conf:6: [fit] ctx: bad context list 'gpu:3-1': bad range (device numbers 0..1023, as low-high) (cpu, "
                                        "cpu:0-3, gpu:0, gpu:0-3 or gpu:0,2)"},
        {BASE "[fit]\nmetric = acc, top5\n",
         "t.conf:6: [fit] metric: unknown metric 'top5' (acc, top_k_acc, ce, mse, mae or rmse)"},
        {BASE "[fit]\nmetric = top_k_acc\n", "t.conf:6: [fit] metric: top_k_acc needs k: top_k_acc:5 or top_k_acc(top_k=5)"},
        {BASE "[fit]\nmetric = top_k_acc:1\n",
         "t.conf:6: [fit] metric: top_k_acc: parameter 'top_k' has bad value '1': must be between 2 and 1e+09"},
        {BASE "[optimizer]\nclip_weights = 1\n",
         "t.conf:6: [optimizer] clip_weights: not used with type = sgd (only with rmsprop)"},
        {BASE "[fit]\nkvstore = dist_snyc\n", "t.conf:6: [fit] kvstore: unknown kvstore 'dist_snyc' (did you mean 'dist_sync'?)"},
        {BASE "[fit]\ninitializer = xavier(sigma=2)\n",
         "t.conf:6: [fit] initializer: xavier: unknown parameter 'sigma' (known: rnd_type, factor_type, magnitude)"},
        {BASE "[fit]\nnum_epochs = 2\n", "t.conf:6: [fit] num_epochs: unknown key (did you mean 'num_epoch'?)"},
        {BASE "[layer fc]\nop = FullyConnected\nnum_hidden = 10\nweight_init = gaussian(sigma=1)\n",
         "t.conf:8: [layer fc] weight_init: unknown initializer 'gaussian' (xavier, msraprelu, uniform, normal, constant, "
         "zero or one)"},
        {BASE "[layer fc]\nop = FullyConnected\nnum_hidden = 10\nno_bias = true\nbias_init = zero\n",
         "t.conf:9: [layer fc] bias_init: unknown key: FullyConnected has no parameter input 'bias'"},
        {BASE "[layer fc]\nop = FullyConnected\nnum_hidden = 10\nwieght_init = zero\n",
         "t.conf:8: [layer fc] wieght_init: unknown key for FullyConnected (did you mean 'weight_init'?)"},
        {BASE "kernel = 3,3\n", "t.conf:5: [layer conv1] kernel: given twice (first at line 3)"},
        {"x = 1\n[layer a]\nop = relu\n",
         "t.conf:1: x: key outside any section (put it under [net], [layer NAME], [train], [val], [optimizer] or "
         "[fit])"},
        {BASE "num-filter = 3\n", "t.conf:5: [layer conv1]: bad key name 'num-filter': use letters, digits and _ only"},
        {BASE "= 3\n", "t.conf:5: missing key name before '='"},
        {BASE "[layer r]\nop = relu\nlr_mult = 2\n",
         "t.conf:7: [layer r] lr_mult: Activation has no parameters to apply it to"},
        {BASE "[layer fc]\nop = fullc\nnum_hidden = 4\nwd_mult = -1\n",
         "t.conf:8: [layer fc] wd_mult: bad value '-1': expected a number >= 0"},
        {BASE "[layer fc]\nop = FullyConnected\ninput = conv1, data\nnum_hidden = 3\n",
         "t.conf:7: [layer fc] input: FullyConnected takes 1 input (data), got 2"},
        {BASE "[layer s]\nop = elemwise_add\n",
         "t.conf:5: [layer s] input: elemwise_add takes 2 inputs (lhs, rhs); name them with input = ..."},
        {BASE "[layer r]\nop = relu\ninput = conv1:1\n",
         "t.conf:7: [layer r] input: layer 'conv1' has one output; 'conv1:1' asks for output 1"},
        {BASE "[layer r]\nop = relu\ninput = conv1:x\n",
         "t.conf:7: [layer r] input: bad output index in 'conv1:x' (LAYER:K with K = 0, 1, ...)"},
        {BASE "[layer r]\nop = relu\ninput = conv1,,conv1\n",
         "t.conf:7: [layer r] input: empty name in the list 'conv1,,conv1'"},
        {BASE "[layer s]\nop = SliceChannel\nnum_outputs = 2\n[layer r]\nop = relu\n",
         "t.conf:8: [layer r] input: required: the previous layer 's' has 2 outputs; name one as input = s:K"},
        {BASE "[layer c]\nop = Concat\ninput = conv1, conv1\nnum_args = 3\n",
         "t.conf:7: [layer c] input: num_args = 3 but 2 inputs given"},
        {BASE "[layer d]\nop = Dropout\np = 2\n", "t.conf:7: [layer d] p: bad value '2': must be between 0 and 1"},
        {BASE "[layer p]\nop = Pooling\npool_type = maxx\n",
         "t.conf:7: [layer p] pool_type: bad value 'maxx': did you mean 'max'? (choices: max, avg, sum, lp)"},
        {"[net]\ninputs = data, extra\n" BASE, "t.conf:2: [net] inputs: input 'extra' is not used by any layer"},
        {"[net]\ninput = data\n" BASE, "t.conf:2: [net] input: unknown key (did you mean 'inputs'?)"},
        {"[net]\ninputs = data, data\n" BASE, "t.conf:2: [net] inputs: 'data' is listed twice"},
        {"[net]\ninputs = conv1\n" BASE, "t.conf:2: [net] inputs: 'conv1' is also the name of a layer (line 3)"},
        {"[net]\noutputs = conv2\n" BASE, "t.conf:2: [net] outputs: unknown layer 'conv2' (did you mean 'conv1'?)"},
        {BASE "[layer conv1_weight]\nop = relu\n",
         "t.conf:5: [layer conv1_weight]: the name is taken by the weight of layer 'conv1'"},
    };
    int wrong = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *msg = parse_err(cases[i].text);
        if (strcmp(msg, cases[i].want)) {
            fprintf(stderr, "case %zu:\n got: %s\nwant: %s\n", i, msg, cases[i].want);
            wrong++;
        }
    }
    ck_assert_msg(!wrong, "%d messages differ (above)", wrong);
    /* NUL bytes and very long lines. */
    static const char nul[] = "[layer a]\nop = re\0lu\n";
    ck_assert_str_eq(parse_err_len(nul, sizeof(nul) - 1, NULL, 0), "t.conf:2: NUL byte at column 8 (not a text file?)");
    char longline[2048];
    int n = snprintf(longline, sizeof(longline), "%s[layer fc]\nop = fullc\nnum_hidden = 1", BASE);
    memset(longline + n, '0', 1000);
    longline[n + 1000] = '\n';
    longline[n + 1001] = '\0';
    ck_assert_str_eq(parse_err(longline), "t.conf:7: line too long (1014 characters; at most 190)");
    /* Comments may be long; so may be their lines. */
    memset(longline, ';', 1000);
    snprintf(longline + 1000, sizeof(longline) - 1000, "\n%s", BASE);
    mx_config *cfg = parse_ok(longline);
    mx_config_free(cfg);
    /* Missing files are I/O errors naming the file. */
    mx_config *none = NULL;
    ck_assert_int_eq(mx_config_load("configs/no-such.conf", NULL, 0, &none), MX_ERR_IO);
    ck_assert_str_eq(mx_last_error(), "configs/no-such.conf: cannot open: No such file or directory");
}
END_TEST

START_TEST(text_conventions)
{
    /* A UTF-8 BOM, CRLF line ends, indentation, ';' and '#' comments,
     * inline comments after blanks, tuples in any of MXNet's spellings and
     * non-ASCII text in comments. */
    const char *text = "\xEF\xBB\xBF; caf\xc3\xa9 net\r\n"
                       "# another comment\r\n"
                       "  [layer conv1]   \r\n"
                       "    op = Convolution ; an inline comment\r\n"
                       "\tkernel = (5, 5)\r\n"
                       "    num_filter = 20;not a comment without a blank before it? no: 20;x is a bad value\r\n";
    const char *msg = parse_err(text);
    ck_assert_str_eq(msg, "t.conf:6: [layer conv1] num_filter: bad value '20;not a comment without a blank before "
                          "it? no: 20;x is a bad value': expected an integer");
    text = "\xEF\xBB\xBF; caf\xc3\xa9 net\r\n"
           "# another comment\r\n"
           "  [layer conv1]   \r\n"
           "    op = Convolution ; an inline comment\r\n"
           "\tkernel = [5,5]\r\n"
           "    num_filter = 20\t; filters\r\n"
           "[layer fc]\r\nop=FullyConnected\r\nnum_hidden=3"; /* no final newline */
    mx_config *cfg = parse_ok(text);
    ck_assert_str_eq(attr_of(cfg, "conv1", "kernel"), "(5, 5)"); /* MXNet's str() form: its parser rejects 5,5 */
    ck_assert_str_eq(attr_of(cfg, "conv1", "num_filter"), "20");
    ck_assert_int_eq(cfg->layers[0].line, 3);
    ck_assert_int_eq(cfg->layers[1].line, 7);
    mx_graph_shapes gs;
    infer_ok(cfg, MX_SHAPE(1, 1, 28, 28), &gs);
    assert_head_shape(cfg, &gs, MX_SHAPE(1, 3));
    mx_graph_shapes_free(&gs);
    mx_config_free(cfg);
}
END_TEST

START_TEST(shape_errors_name_the_layer_line)
{
    const char *text = BASE "[layer fc]\nop = FullyConnected\nnum_hidden = 10\n"
                            "[layer c2]\nop = Convolution\nkernel = 3,3\nnum_filter = 3\n";
    mx_config *cfg = parse_ok(text);
    const char *names[] = {"data"};
    mx_shape s = MX_SHAPE(1, 1, 28, 28);
    mx_graph_shapes gs;
    ck_assert_int_eq(mx_config_infer_shapes(cfg, names, &s, 1, &gs), MX_ERR_INVALID);
    const char *msg = mx_last_error();
    ck_assert_msg(!strncmp(msg, "t.conf:8: [layer c2]: Convolution: ", 35), "got: %s", msg);
    ck_assert_ptr_nonnull(strstr(msg, "(1,10)"));
    ck_assert_ptr_null(strchr(msg, '\n'));
    /* A bad input name. */
    const char *bad[] = {"dat"};
    ck_assert_int_eq(mx_config_infer_shapes(cfg, bad, &s, 1, &gs), MX_ERR_INVALID);
    ck_assert_str_eq(mx_last_error(), "t.conf: no input named 'dat' (did you mean 'data'?)");
    mx_config_free(cfg);
}
END_TEST

/* ------------------------------------------------------------ graph features */

START_TEST(aliases_labels_multipliers_and_initializers)
{
    const char *text = "[layer c]\nop = conv\nkernel = 3,3\nnum_filter = 4\npad = 1,1\n"
                       "[layer r]\nop = relu\n"
                       "[layer p]\nop = max_pooling\nkernel = 2,2\nstride = 2,2\n"
                       "[layer f]\nop = flatten\n"
                       "[layer fc]\nop = fullc\nnum_hidden = 3\nlr_mult = 2\nwd_mult = 0\n"
                       "weight_init = normal(sigma=0.02)\nbias_init = constant(value=0.1)\n"
                       "[layer bn]\nop = batch_norm\ngamma_init = one\n"
                       "[layer out]\nop = SoftmaxOutput\nlabel = y\n";
    mx_config *cfg = parse_ok(text);
    ck_assert_str_eq(mx_config_find_layer(cfg, "c")->op, "Convolution");
    ck_assert_str_eq(mx_config_find_layer(cfg, "r")->op, "Activation");
    ck_assert_str_eq(attr_of(cfg, "r", "act_type"), "relu");
    ck_assert_str_eq(attr_of(cfg, "p", "pool_type"), "max");
    ck_assert_str_eq(mx_config_find_layer(cfg, "f")->op, "Flatten");
    ck_assert_str_eq(mx_config_find_layer(cfg, "bn")->op, "BatchNorm");
    ck_assert_str_eq(attr_of(cfg, "fc_weight", "__lr_mult__"), "2");
    ck_assert_str_eq(attr_of(cfg, "fc_bias", "__wd_mult__"), "0");
    ck_assert_str_eq(attr_of(cfg, "fc_weight", "__init__"), "[\"normal\", {\"sigma\": 0.02}]");
    ck_assert_str_eq(attr_of(cfg, "fc_bias", "__init__"), "[\"constant\", {\"value\": 0.1}]");
    ck_assert_str_eq(attr_of(cfg, "bn_gamma", "__init__"), "[\"one\", {}]");
    ck_assert(mx_graph_find(cfg->graph, "y") != MX_NO_NODE);
    ck_assert(mx_graph_find(cfg->graph, "out_label") == MX_NO_NODE);
    mx_graph_shapes gs;
    infer_ok(cfg, MX_SHAPE(2, 1, 8, 8), &gs);
    assert_head_shape(cfg, &gs, MX_SHAPE(2, 3));
    ck_assert_int_eq(param_count(cfg, &gs), 4 * 9 + 4 + 64 * 3 + 3 + 2 * 3);
    mx_graph_shapes_free(&gs);
    mx_config_free(cfg);
}
END_TEST

START_TEST(dags_multiple_inputs_and_outputs)
{
    const char *text = "[net]\ninputs = data, extra\noutputs = loss_a, loss_b\n"
                       "[layer a]\nop = FullyConnected\nnum_hidden = 4\n"
                       "[layer b]\nop = FullyConnected\ninput = extra\nnum_hidden = 4\n"
                       "[layer sum]\nop = ElementWiseSum\ninput = a, b\n"
                       "[layer cat]\nop = Concat\ninput = a, b, sum\ndim = 1\n"
                       "[layer split]\nop = SliceChannel\nnum_outputs = 3\n"
                       "[layer loss_a]\nop = LinearRegressionOutput\ninput = split:0\nlabel = target\n"
                       "[layer loss_b]\nop = LinearRegressionOutput\ninput = split:2\nlabel = target\n";
    mx_config *cfg = parse_ok(text);
    ck_assert_int_eq(cfg->n_inputs, 2);
    ck_assert_str_eq(cfg->inputs[1], "extra");
    ck_assert_int_eq(mx_graph_num_heads(cfg->graph), 2);
    ck_assert_str_eq(attr_of(cfg, "cat", "num_args"), "3");
    ck_assert_str_eq(attr_of(cfg, "sum", "num_args"), "2");
    const char *names[] = {"data", "extra"};
    mx_shape shapes[] = {MX_SHAPE(5, 7), MX_SHAPE(5, 9)};
    mx_graph_shapes gs;
    ck_assert_msg(mx_config_infer_shapes(cfg, names, shapes, 2, &gs) == MX_OK, "%s", mx_last_error());
    mx_shape want = MX_SHAPE(5, 4);
    ck_assert(mx_shape_equal(mx_graph_entry_shape(&gs, mx_graph_head(cfg->graph, 1)), &want));
    /* One shared label variable. */
    uint32_t target = mx_graph_find(cfg->graph, "target");
    ck_assert(target != MX_NO_NODE);
    int users = 0;
    for (int i = 0; i < mx_graph_num_nodes(cfg->graph); i++) {
        const mx_node *n = mx_graph_node(cfg->graph, (uint32_t)i);
        for (int j = 0; j < n->n_inputs; j++) users += n->inputs[j].node == target;
    }
    ck_assert_int_eq(users, 2);
    mx_graph_shapes_free(&gs);
    mx_config_free(cfg);
}
END_TEST

/* ------------------------------------------------------------ robustness */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int n_tried, n_compiled, n_drawn;

/* Parses text; on success also infers and draws. Never crashes; a failure
 * is one line that says where. */
static void try_config(const char *text, size_t len)
{
    n_tried++;
    mx_config *cfg = NULL;
    mx_status st = mx_config_parse("t.conf", text, len, NULL, 0, &cfg);
    if (st != MX_OK) {
        ck_assert_ptr_null(cfg);
        const char *msg = mx_last_error();
        ck_assert_msg(st == MX_ERR_INVALID, "status %d: %s", st, msg);
        ck_assert_msg(!strncmp(msg, "t.conf", 6) && !strchr(msg, '\n'), "bad message: '%s'", msg);
        return;
    }
    n_compiled++;
    /* The settings sections through their owners: one located line or OK. */
    mx_train_settings *settings = NULL;
    st = mx_train_settings_load(cfg, &settings);
    if (st != MX_OK) {
        const char *msg = mx_last_error();
        ck_assert_msg(st == MX_ERR_INVALID || st == MX_ERR_UNSUPPORTED, "status %d: %s", st, msg);
        ck_assert_msg(!strncmp(msg, "t.conf", 6) && !strchr(msg, '\n'), "bad settings message: '%s'", msg);
    }
    mx_train_settings_free(settings);
    const char *names[] = {cfg->inputs[0]};
    mx_shape s = MX_SHAPE(2, 1, 28, 28);
    mx_graph_shapes gs;
    if (mx_config_infer_shapes(cfg, names, &s, 1, &gs) == MX_OK) {
        char *dot = NULL;
        ck_assert_int_eq(mx_graph_to_dot(cfg->graph, &gs, NULL, &dot, NULL), MX_OK);
        mx_free(dot);
        mx_graph_shapes_free(&gs);
        n_drawn++;
    } else {
        const char *msg = mx_last_error();
        ck_assert_msg(!strncmp(msg, "t.conf", 6) && !strchr(msg, '\n'), "bad shape message: '%s'", msg);
    }
    mx_config_free(cfg);
}

START_TEST(random_bytes_never_crash)
{
    static const char *const words[] = {"[layer ", "[net]", "[train]", "[fit]", "[optimizer]", "]", "op", "=",
                                        " = ", "Convolution", "FullyConnected", "relu", "conv", "input", "data",
                                        "conv1", "fc", ",", ":", ";", "#", "\n", "\n", "kernel", "5,5",
                                        "num_filter", "num_hidden", "10", "label", "SoftmaxOutput", "iter",
                                        "mnist", "ctx", "gpu:0-3", "(", ")", " ", "\t", "\xc3\xa9", "\xff", "0",
                                        "Concat", "ElementWiseSum", "outputs", "inputs", "_init", "weight"};
    const int n_words = (int)(sizeof(words) / sizeof(words[0]));
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    char buf[1200];
    n_tried = n_compiled = n_drawn = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0, target = rng_next(&seed) % 1000;
        bool bytes = iter % 2 == 0;
        while (len < target) {
            if (bytes) {
                buf[len++] = (char)(rng_next(&seed) & 0xFF);
            } else {
                const char *w = words[rng_next(&seed) % (uint64_t)n_words];
                size_t wl = strlen(w);
                if (len + wl >= sizeof(buf)) break;
                memcpy(buf + len, w, wl);
                len += wl;
            }
        }
        buf[len] = '\0';
        try_config(buf, len);
    }
    fprintf(stderr, "random inputs: %d tried, %d compiled, %d inferred and drawn\n", n_tried, n_compiled, n_drawn);
    ck_assert_int_eq(n_tried, 3000);
}
END_TEST

/* Random networks from a menu of layers and parameters, wired to random
 * earlier layers: they exercise the graph builder and shape inference with
 * odd combinations. Layers nobody reads are listed as outputs. (Each
 * format uses the first of the five numbers it is given.) */
START_TEST(random_networks_never_crash)
{
    static const char *const layers[] = {
        "op = Convolution\nkernel = %d,%d\nnum_filter = %d\npad = %d,%d\n",
        "op = conv\nkernel = %d,%d\nnum_filter = %d\nstride = %d,%d\n",
        "op = FullyConnected\nnum_hidden = %d\n",
        "op = relu\n",
        "op = Pooling\nkernel = %d,%d\nstride = %d,%d\npool_type = avg\n",
        "op = max_pooling\nglobal_pool = true\nkernel = %d,%d\n",
        "op = BatchNorm\nfix_gamma = false\n",
        "op = Dropout\np = 0.%d\n",
        "op = Flatten\n",
        "op = SliceChannel\nnum_outputs = %d\n",
        "op = LRN\nnsize = %d\n",
        "op = LeakyReLU\nact_type = prelu\n",
        "op = Reshape\nshape = (0, -1, %d)\n",
        "op = Deconvolution\nkernel = %d,%d\nnum_filter = %d\n",
        "op = softmax\n",
        "op = SoftmaxOutput\n",
        "op = Embedding\ninput_dim = %d\noutput_dim = %d\n",
    };
    static const char *const multi[] = {"Concat", "ElementWiseSum", "elemwise_add"};
    const int n_layers_menu = (int)(sizeof(layers) / sizeof(layers[0]));
    uint64_t seed = 777;
    char *text = malloc(65536);
    ck_assert_ptr_nonnull(text);
    n_tried = n_compiled = n_drawn = 0;
    for (int iter = 0; iter < 1500; iter++) {
        int n = 1 + (int)(rng_next(&seed) % 12);
        bool used[16] = {false};
        size_t len = 0;
        for (int i = 0; i < n; i++) {
            len += (size_t)snprintf(text + len, 65536 - len, "[layer l%d]\n", i);
            if (i > 0 && rng_next(&seed) % 4 == 0) {
                int a = (int)(rng_next(&seed) % (uint64_t)i), b = (int)(rng_next(&seed) % (uint64_t)i);
                used[a] = used[b] = true;
                len += (size_t)snprintf(text + len, 65536 - len, "op = %s\ninput = l%d, l%d%s\n",
                                        multi[rng_next(&seed) % 3], a, b, rng_next(&seed) % 5 ? "" : ":1");
                continue;
            }
            int d[5];
            for (int k = 0; k < 5; k++) d[k] = 1 + (int)(rng_next(&seed) % 6);
            len += (size_t)snprintf(text + len, 65536 - len, layers[rng_next(&seed) % (uint64_t)n_layers_menu], d[0],
                                    d[1], d[2], d[3], d[4]);
            if (i > 0) {
                int a = (int)(rng_next(&seed) % (uint64_t)i);
                used[a] = true;
                len += (size_t)snprintf(text + len, 65536 - len, "input = l%d\n", a);
            } else {
                used[15] = true;
            }
        }
        len += (size_t)snprintf(text + len, 65536 - len, "[net]\noutputs = ");
        bool first = true;
        for (int i = 0; i < n; i++)
            if (!used[i]) {
                len += (size_t)snprintf(text + len, 65536 - len, "%sl%d", first ? "" : ", ", i);
                first = false;
            }
        len += (size_t)snprintf(text + len, 65536 - len, "\n");
        try_config(text, len);
    }
    free(text);
    fprintf(stderr, "random networks: %d tried, %d compiled, %d inferred and drawn\n", n_tried, n_compiled, n_drawn);
    ck_assert_int_gt(n_drawn, 50);
}
END_TEST

START_TEST(mutated_configs_never_crash)
{
    static const char *const files[] = {"configs/lenet.conf", "configs/mlp.conf", "configs/resnet-20.conf"};
    uint64_t seed = 12345;
    n_tried = n_compiled = n_drawn = 0;
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        size_t len;
        char *orig = read_text(files[f], &len);
        /* The big one only a few times: it takes longer. */
        int rounds = f == 2 ? 150 : 1500;
        char *buf = malloc(len + 4096);
        ck_assert_ptr_nonnull(buf);
        for (int r = 0; r < rounds; r++) {
            memcpy(buf, orig, len);
            size_t n = len;
            int edits = 1 + (int)(rng_next(&seed) % 4);
            for (int e = 0; e < edits && n > 0; e++) {
                size_t at = rng_next(&seed) % n;
                switch (rng_next(&seed) % 6) {
                case 0: buf[at] = (char)(rng_next(&seed) & 0xFF); break;           /* flip a byte */
                case 1: memmove(buf + at, buf + at + 1, n - at - 1), n--; break;   /* delete */
                case 2:                                                            /* insert */
                    memmove(buf + at + 1, buf + at, n - at);
                    buf[at] = "=,:[]\n;# x0"[rng_next(&seed) % 11];
                    n++;
                    break;
                case 3: {                                                          /* delete a line */
                    char *nl = memchr(buf + at, '\n', n - at);
                    if (!nl) break;
                    size_t end = (size_t)(nl - buf) + 1;
                    size_t start = at;
                    while (start > 0 && buf[start - 1] != '\n') start--;
                    memmove(buf + start, buf + end, n - end);
                    n -= end - start;
                    break;
                }
                case 4: {                                                          /* duplicate a line */
                    size_t start = at;
                    while (start > 0 && buf[start - 1] != '\n') start--;
                    char *nl = memchr(buf + start, '\n', n - start);
                    size_t end = nl ? (size_t)(nl - buf) + 1 : n;
                    size_t l = end - start;
                    if (n + l > len + 4000) break;
                    memmove(buf + end + l, buf + end, n - end);
                    memcpy(buf + end, buf + start, l);
                    n += l;
                    break;
                }
                case 5: n = at; break;                                             /* truncate */
                }
            }
            try_config(buf, n);
        }
        free(buf);
        free(orig);
    }
    fprintf(stderr, "mutated configs: %d tried, %d compiled, %d inferred and drawn\n", n_tried, n_compiled, n_drawn);
    ck_assert_int_gt(n_drawn, 100); /* the mutations leave many configs valid */
}
END_TEST

/* ------------------------------------------------------------ MXNet files, dot */

START_TEST(mxnet_symbol_files_load_infer_and_draw)
{
    static const struct {
        const char *rel;
        mx_shape data;
        const char *layer;
    } files[] = {
        {"fixtures/mxnet/apache-mxnet/test-symbol.json.ref", {2, {1, 784}}, "fc1"},
        {"fixtures/mxnet/sagemaker-mnist-mlp/model-symbol.json", {4, {1, 1, 28, 28}}, "fullyconnected0"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char path[1024];
        mx_graph *g = NULL;
        ck_assert_msg(mx_graph_load_json(shared_path(files[i].rel, path, sizeof(path)), &g) == MX_OK, "%s: %s", path,
                      mx_last_error());
        const char *names[] = {"data"};
        mx_graph_shapes gs;
        ck_assert_msg(mx_graph_infer_shapes(g, names, &files[i].data, 1, &gs) == MX_OK, "%s", mx_last_error());
        const mx_shape *out = mx_graph_entry_shape(&gs, mx_graph_head(g, 0));
        mx_shape want = MX_SHAPE(1, 10);
        ck_assert(mx_shape_equal(out, &want));
        char *dot = NULL;
        ck_assert_int_eq(mx_graph_to_dot(g, &gs, NULL, &dot, NULL), MX_OK);
        ck_assert_ptr_nonnull(strstr(dot, files[i].layer));
        ck_assert_ptr_nonnull(strstr(dot, "[label=\"1x128\"]"));
        ck_assert_ptr_null(strstr(dot, "_weight"));
        mx_free(dot);
        mx_dot_options opt = {.show_weights = true, .title = "t"};
        ck_assert_int_eq(mx_graph_to_dot(g, &gs, &opt, &dot, NULL), MX_OK);
        ck_assert_ptr_nonnull(strstr(dot, "_weight\\n128x"));
        ck_assert_ptr_nonnull(strstr(dot, "softmax_label"));
        mx_free(dot);
        mx_graph_shapes_free(&gs);
        mx_graph_free(g);
    }
}
END_TEST

START_TEST(dot_has_a_node_per_layer_and_shaped_edges)
{
    mx_config *cfg = load_ok("configs/lenet.conf", NULL, 0);
    mx_graph_shapes gs;
    infer_ok(cfg, MX_SHAPE(64, 1, 28, 28), &gs);
    char *dot = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_graph_to_dot(cfg->graph, &gs, NULL, &dot, &len), MX_OK);
    ck_assert_uint_eq(len, strlen(dot));
    ck_assert(!strncmp(dot, "digraph ", 8));
    /* One box per layer, the data input as an oval, nothing else. */
    int boxes = 0, ovals = 0, edges = 0;
    for (const char *p = dot; (p = strstr(p, " [fillcolor=")); p++) boxes++;
    for (const char *p = dot; (p = strstr(p, "[shape=oval")); p++) ovals++;
    for (const char *p = dot; (p = strstr(p, " -> ")); p++) edges++;
    ck_assert_int_eq(boxes, cfg->n_layers);
    ck_assert_int_eq(ovals, 1);
    ck_assert_int_eq(edges, cfg->n_layers);
    ck_assert_ptr_nonnull(strstr(dot, "label=\"conv1\\nConvolution\\nkernel=5x5, num_filter=20\\n64x20x24x24\""));
    ck_assert_ptr_nonnull(strstr(dot, "[label=\"64x20x24x24\"]"));
    ck_assert_ptr_nonnull(strstr(dot, "[label=\"64x800\"]"));
    mx_free(dot);
    /* Without shapes: no shape labels. */
    ck_assert_int_eq(mx_graph_to_dot(cfg->graph, NULL, NULL, &dot, NULL), MX_OK);
    ck_assert_ptr_null(strstr(dot, "64x"));
    mx_free(dot);
    char buf[32];
    mx_shape s23 = MX_SHAPE(2, 3);
    ck_assert_str_eq(mx_dot_shape_text(&s23, buf, sizeof(buf)), "2x3");
    mx_graph_shapes_free(&gs);
    mx_config_free(cfg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, imagenet_configs_infer_and_have_published_sizes);
    tcase_add_test(tc, small_configs_infer);
    tcase_add_test(tc, overrides_replace_and_add_keys);
    tcase_add_test(tc, bad_overrides_say_command_line);
    tcase_add_test(tc, each_mistake_has_its_line);
    tcase_add_test(tc, text_conventions);
    tcase_add_test(tc, shape_errors_name_the_layer_line);
    tcase_add_test(tc, aliases_labels_multipliers_and_initializers);
    tcase_add_test(tc, dags_multiple_inputs_and_outputs);
    tcase_add_test(tc, random_bytes_never_crash);
    tcase_add_test(tc, random_networks_never_crash);
    tcase_add_test(tc, mutated_configs_never_crash);
    tcase_add_test(tc, mxnet_symbol_files_load_infer_and_draw);
    tcase_add_test(tc, dot_has_a_node_per_layer_and_shaped_edges);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
