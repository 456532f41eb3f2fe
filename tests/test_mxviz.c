/*
 * test_mxviz.c - mxviz end to end: runs $MX_TEST_BUILD/bin/mxviz (default
 * build/) from the repository root on the shipped configs, MXNet-written
 * symbol files ($MX_SHARED_DIR, default ../shared) and malformed inputs
 * written to a temporary directory; checks exit status (0 ok, 1 runtime,
 * 2 usage or config error), the one-line error on stderr and the dot text,
 * and renders through Graphviz's dot when it is installed.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256];
static char mxviz[512];
static char shared[512];

static void setup(void)
{
    const char *b = getenv("MX_TEST_BUILD");
    snprintf(mxviz, sizeof(mxviz), "%s/bin/mxviz", b && *b ? b : "build");
    const char *s = getenv("MX_SHARED_DIR");
    snprintf(shared, sizeof(shared), "%s", s && *s ? s : "../shared");
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/mxviz-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return calloc(1, 1);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 > cap) {
            cap = cap ? 2 * cap : 65536;
            buf = realloc(buf, cap + 1);
            ck_assert_ptr_nonnull(buf);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (!got) break;
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

typedef struct result {
    int status; /* exit status, or -1 if it did not exit normally */
    char *out, *err;
} result;

/* Runs `prefix mxviz args` through the shell, capturing stdout and stderr. */
static result run_env(const char *env, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s %s >%s/out 2>%s/err", env ? env : "", mxviz, args, tmpdir, tmpdir);
    int rc = system(cmd);
    result r = {.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1};
    char path[512];
    snprintf(path, sizeof(path), "%s/out", tmpdir);
    r.out = slurp(path, NULL);
    snprintf(path, sizeof(path), "%s/err", tmpdir);
    r.err = slurp(path, NULL);
    return r;
}

static result run(const char *args) { return run_env(NULL, args); }

static void result_free(result *r)
{
    free(r->out);
    free(r->err);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Exit status 2 and exactly the line `want` on stderr. */
static void expect_error(const char *args, int status, const char *want)
{
    result r = run(args);
    ck_assert_msg(r.status == status, "mxviz %s: exit %d, want %d (stderr: %s)", args, r.status, status, r.err);
    ck_assert_msg(count_lines(r.err) == 1, "mxviz %s: stderr must be one line: '%s'", args, r.err);
    char line[2048];
    snprintf(line, sizeof(line), "%s\n", want);
    ck_assert_msg(!strcmp(r.err, line), "mxviz %s:\n got: %s want: %s", args, r.err, line);
    ck_assert_str_eq(r.out, "");
    result_free(&r);
}

static void write_file(const char *name, const char *text, size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static bool have_dot(void) { return system("command -v dot >/dev/null 2>&1") == 0; }

/* ------------------------------------------------------------ tests */

START_TEST(help_and_usage_errors)
{
    result r = run("--help");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: mxviz CONFIG|PREFIX-symbol.json"));
    ck_assert_ptr_nonnull(strstr(r.out, "--show-weights"));
    ck_assert_str_eq(r.err, "");
    result_free(&r);
    expect_error("", 2, "mxviz: no CONFIG or PREFIX-symbol.json given (see mxviz --help)");
    expect_error("--frobnicate configs/lenet.conf", 2, "mxviz: unknown option '--frobnicate' (see mxviz --help)");
    expect_error("configs/lenet.conf --shape data=1,x", 2,
                 "mxviz: bad --shape 'data=1,x': expected NAME=DIMS such as data=1,3,224,224 (see mxviz --help)");
    expect_error("configs/lenet.conf -o graph.jpg", 2,
                 "mxviz: -o 'graph.jpg': the extension must be .svg, .png, .pdf, .dot or .gv (see mxviz --help)");
    expect_error("configs/lenet.conf -o", 2, "mxviz: -o needs a file name (see mxviz --help)");
    expect_error("configs/lenet.conf configs/mlp.conf", 2,
                 "mxviz: unexpected argument 'configs/mlp.conf' (one CONFIG or symbol file; overrides are "
                 "SECTION.KEY=VALUE) (see mxviz --help)");
    expect_error("configs/no-such.conf", 2, "configs/no-such.conf: cannot open: No such file or directory");
    expect_error("configs", 2, "configs: cannot read: Is a directory");
}
END_TEST

START_TEST(every_shipped_config_draws)
{
    static const char *const configs[] = {"lenet", "mlp", "resnet-20", "alexnet", "vgg-16", "inception-bn",
                                          "resnet-50", "resnet-18", "mobilenet-v2"};
    for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
        char args[256];
        snprintf(args, sizeof(args), "configs/%s.conf", configs[i]);
        result r = run(args);
        ck_assert_msg(r.status == 0, "mxviz %s: exit %d: %s", args, r.status, r.err);
        ck_assert_str_eq(r.err, "");
        ck_assert_msg(!strncmp(r.out, "digraph ", 8), "%s: not dot text", args);
        ck_assert_ptr_nonnull(strstr(r.out, "-> "));
        ck_assert_ptr_null(strstr(r.out, "_weight"));
        result_free(&r);
    }
    /* Shapes come from [train]: LeNet's batch is 64. */
    result r = run("configs/lenet.conf");
    ck_assert_ptr_nonnull(strstr(r.out, "label=\"conv1\\nConvolution\\nkernel=5x5, num_filter=20\\n64x20x24x24\""));
    ck_assert_ptr_nonnull(strstr(r.out, "[label=\"64x50x4x4\"]"));
    result_free(&r);
    r = run("configs/resnet-50.conf --shape data=1,3,224,224");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "fc1000\\nFullyConnected\\nnum_hidden=1000\\n1x1000"));
    ck_assert_ptr_nonnull(strstr(r.out, "[label=\"1x2048x7x7\"]"));
    result_free(&r);
}
END_TEST

START_TEST(overrides_shapes_and_weights)
{
    result r = run("configs/lenet.conf train.batch_size=8 conv1.num_filter=6");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "8x6x24x24"));
    result_free(&r);
    r = run("configs/lenet.conf --shape 2,1,28,28 --show-weights");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "conv1_weight\\n20x1x5x5"));
    ck_assert_ptr_nonnull(strstr(r.out, "softmax_label\\n2"));
    ck_assert_ptr_nonnull(strstr(r.out, "[label=\"2x20x24x24\"]"));
    result_free(&r);
    expect_error("configs/lenet.conf fit.num_epoch=x", 2,
                 "command line: [fit] num_epoch: bad value 'x': expected an integer");
    expect_error("configs/lenet.conf --shape dat=1,1,28,28", 2,
                 "configs/lenet.conf: no input named 'dat' (did you mean 'data'?)");
    /* A config without an iterator needs --shape. */
    static const char text[] = "[layer fc]\nop = FullyConnected\nnum_hidden = 10\n";
    write_file("noiter.conf", text, sizeof(text) - 1);
    char args[512], want[1024];
    snprintf(args, sizeof(args), "%s/noiter.conf", tmpdir);
    snprintf(want, sizeof(want),
             "mxviz: %s/noiter.conf: no [train] or [val] iterator gives the input shape; pass --shape data=N,C,H,W",
             tmpdir);
    expect_error(args, 2, want);
    snprintf(args, sizeof(args), "%s/noiter.conf --shape data=4,7", tmpdir);
    r = run(args);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "4x10"));
    result_free(&r);
}
END_TEST

START_TEST(mxnet_symbol_files_draw)
{
    char args[1024];
    snprintf(args, sizeof(args), "%s/fixtures/mxnet/apache-mxnet/test-symbol.json.ref --shape data=1,784", shared);
    result r = run(args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "fc1\\nFullyConnected\\nnum_hidden=128\\n1x128"));
    ck_assert_ptr_nonnull(strstr(r.out, "softmax\\nSoftmaxOutput\\n1x10"));
    result_free(&r);
    snprintf(args, sizeof(args), "%s/fixtures/mxnet/sagemaker-mnist-mlp/model-symbol.json --shape data=1,1,28,28",
             shared);
    r = run(args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "flatten0\\nFlatten\\n1x784"));
    ck_assert_ptr_nonnull(strstr(r.out, "[label=\"1x1x28x28\"]"));
    result_free(&r);
    /* Without a shape the file still loads, but shapes cannot be inferred. */
    snprintf(args, sizeof(args), "%s/fixtures/mxnet/sagemaker-mnist-mlp/model-symbol.json", shared);
    r = run(args);
    ck_assert_int_eq(r.status, 2);
    ck_assert_int_eq(count_lines(r.err), 1);
    ck_assert_ptr_nonnull(strstr(r.err, "pass --shape data="));
    result_free(&r);
    snprintf(args, sizeof(args), "%s/fixtures/mxnet/sagemaker-mnist-mlp/model-symbol.json fit.num_epoch=2", shared);
    expect_error(args, 2,
                 "mxviz: overrides such as 'fit.num_epoch=2' apply to configs, not symbol files (see mxviz --help)");
}
END_TEST

/* Malformed configs: one line naming FILE:LINE, exit status 2. */
START_TEST(malformed_configs_exit_2)
{
    static const struct {
        const char *name, *text, *want; /* want: after "DIR/NAME" */
    } cases[] = {
        {"typo.conf", "[layer conv1]\nop = Convolution\nkernel = 5,5\nnum_filters = 20\n",
         ":4: [layer conv1] num_filters: unknown key for Convolution (did you mean 'num_filter'?)"},
        {"op.conf", "[layer c]\nop = Convolutoin\n",
         ":2: [layer c] op: unknown operator 'Convolutoin' (did you mean 'Convolution'?)"},
        {"input.conf", "[layer relu1]\nop = relu\n[layer b]\nop = relu\ninput = relu2\n",
         ":5: [layer b] input: unknown input 'relu2' (did you mean 'relu1'?)"},
        {"cycle.conf", "[layer a]\nop = relu\ninput = b\n[layer b]\nop = relu\n",
         ":3: [layer a] input: cycle: layer 'b' is defined after this one (line 4); inputs must name earlier layers"},
        {"dup.conf", "[layer a]\nop = relu\n[layer a]\nop = tanh\n",
         ":3: [layer a]: duplicate layer name 'a' (first defined at line 1)"},
        {"value.conf", "[layer f]\nop = FullyConnected\nnum_hidden = ten\n",
         ":3: [layer f] num_hidden: bad value 'ten': expected an integer"},
        {"empty.conf", "", ":1: empty config: no sections, no [layer NAME] sections"},
        {"nolayer.conf", "[fit]\nnum_epoch = 1\n", ":1: no [layer NAME] sections: the config defines no network"},
        {"syntax.conf", "[layer a]\nop relu\n", ":2: expected 'key = value' or '[section]'"},
        {"section.conf", "[layer a]\nop = relu\n[optimiser]\n",
         ":3: [optimiser]: unknown section (did you mean 'optimizer'?)"},
        {"binary.conf", "\x7f" "ELF\x02\x01\x01\0\0\0", ":1: control character 0x7f at column 1 (not a text file?)"},
        {"latin1.conf", "[layer caf\xe9]\n", ":1: invalid UTF-8 byte 0xe9 at column 11 (not a text file?)"},
        {"shape.conf", "[layer f]\nop = FullyConnected\nnum_hidden = 10\n[layer c]\nop = Convolution\nkernel = 3,3\n"
                       "num_filter = 2\n[train]\niter = mnist\nimage = /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz\n"
                       "label = b\nbatch_size = 2\n",
         ":4: [layer c]: Convolution: data has shape (2,10), expected 4 dimensions (N, C, H, W) for kernel (3, 3)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = strlen(cases[i].text);
        if (!strcmp(cases[i].name, "binary.conf")) len = 10;
        write_file(cases[i].name, cases[i].text, len);
        char args[512], want[1024];
        snprintf(args, sizeof(args), "%s/%s", tmpdir, cases[i].name);
        snprintf(want, sizeof(want), "%s/%s%s", tmpdir, cases[i].name, cases[i].want);
        expect_error(args, 2, want);
    }
}
END_TEST

START_TEST(malformed_symbol_files_exit_2)
{
    static const struct {
        const char *name, *text;
    } cases[] = {
        {"garbage-symbol.json", "{\"nodes\": [\x01\x02"},
        {"truncated-symbol.json", "{\"nodes\": [{\"op\": \"null\", \"name\": \"data\", \"inputs\": []}"},
        {"unknown-op-symbol.json",
         "{\"nodes\": [{\"op\": \"null\", \"name\": \"data\", \"inputs\": []}, {\"op\": \"Convolutoin\", \"name\": "
         "\"c\", \"attrs\": {\"kernel\": \"(3, 3)\", \"num_filter\": \"2\"}, \"inputs\": [[0, 0, 0]]}], "
         "\"arg_nodes\": [0], \"heads\": [[1, 0, 0]]}"},
        {"bad-input-symbol.json",
         "{\"nodes\": [{\"op\": \"null\", \"name\": \"data\", \"inputs\": []}, {\"op\": \"Activation\", \"name\": "
         "\"a\", \"attrs\": {\"act_type\": \"relu\"}, \"inputs\": [[5, 0, 0]]}], \"arg_nodes\": [0], \"heads\": [[1, "
         "0, 0]]}"},
        {"empty-symbol.json", ""},
        {"array-symbol.json", "[1, 2, 3]"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file(cases[i].name, cases[i].text, strlen(cases[i].text));
        char args[512], prefix[512];
        snprintf(args, sizeof(args), "%s/%s --shape data=1,3,8,8", tmpdir, cases[i].name);
        snprintf(prefix, sizeof(prefix), "%s/%s: ", tmpdir, cases[i].name);
        result r = run(args);
        ck_assert_msg(r.status == 2, "%s: exit %d (%s)", cases[i].name, r.status, r.err);
        ck_assert_msg(count_lines(r.err) == 1, "%s: stderr must be one line: '%s'", cases[i].name, r.err);
        ck_assert_msg(!strncmp(r.err, prefix, strlen(prefix)), "%s: error must start with the file: '%s'",
                      cases[i].name, r.err);
        ck_assert_str_eq(r.out, "");
        result_free(&r);
    }
}
END_TEST

START_TEST(renders_through_graphviz)
{
    char args[1024], path[512];
    /* -o FILE.dot needs no Graphviz. */
    snprintf(args, sizeof(args), "configs/lenet.conf -o %s/g.dot", tmpdir);
    result r = run(args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_str_eq(r.out, "");
    result_free(&r);
    snprintf(path, sizeof(path), "%s/g.dot", tmpdir);
    char *text = slurp(path, NULL);
    ck_assert(!strncmp(text, "digraph ", 8));
    free(text);
    /* A missing or failing Graphviz is a runtime failure. */
    snprintf(args, sizeof(args), "configs/lenet.conf -o %s/g.svg", tmpdir);
    r = run_env("MXVIZ_DOT=/nonexistent/dot", args);
    ck_assert_int_eq(r.status, 1);
    ck_assert_int_eq(count_lines(r.err), 1);
    ck_assert_ptr_nonnull(strstr(r.err, "mxviz: cannot run '/nonexistent/dot': Graphviz is not installed"));
    result_free(&r);
    r = run_env("MXVIZ_DOT=false", args);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "failed with exit status 1"));
    result_free(&r);

    if (!have_dot()) {
        fprintf(stderr, "test_mxviz: Graphviz 'dot' not installed: rendering checks SKIPPED\n");
        return;
    }
    /* The pipeline of the issue: mxviz configs/resnet-50.conf | dot -Tsvg */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "set -o pipefail; %s configs/resnet-50.conf | dot -Tsvg > %s/resnet.svg", mxviz,
             tmpdir);
    char shell[1200];
    snprintf(shell, sizeof(shell), "bash -c '%s'", cmd);
    ck_assert_int_eq(system(shell), 0);
    snprintf(path, sizeof(path), "%s/resnet.svg", tmpdir);
    size_t len;
    text = slurp(path, &len);
    ck_assert_ptr_nonnull(strstr(text, "<svg"));
    ck_assert_ptr_nonnull(strstr(text, "res5c_branch2c"));
    ck_assert_ptr_nonnull(strstr(text, "</svg>"));
    free(text);
    /* -o x.svg and -o x.png run dot themselves. */
    snprintf(args, sizeof(args), "configs/inception-bn.conf -o %s/g.svg", tmpdir);
    r = run(args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_str_eq(r.out, "");
    result_free(&r);
    snprintf(path, sizeof(path), "%s/g.svg", tmpdir);
    text = slurp(path, NULL);
    ck_assert_ptr_nonnull(strstr(text, "ch_concat_5b_chconcat"));
    free(text);
    snprintf(args, sizeof(args), "configs/mlp.conf -o %s/g.png", tmpdir);
    r = run(args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    result_free(&r);
    snprintf(path, sizeof(path), "%s/g.png", tmpdir);
    text = slurp(path, &len);
    ck_assert_uint_gt(len, 8);
    ck_assert(!memcmp(text, "\x89PNG\r\n\x1a\n", 8));
    free(text);
    /* An output directory that does not exist: dot fails, exit 1. */
    snprintf(args, sizeof(args), "configs/mlp.conf -o %s/missing/dir/g.svg", tmpdir);
    r = run(args);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "mxviz: "));
    result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mxviz");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, help_and_usage_errors);
    tcase_add_test(tc, every_shipped_config_draws);
    tcase_add_test(tc, overrides_shapes_and_weights);
    tcase_add_test(tc, mxnet_symbol_files_draw);
    tcase_add_test(tc, malformed_configs_exit_2);
    tcase_add_test(tc, malformed_symbol_files_exit_2);
    tcase_add_test(tc, renders_through_graphviz);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
