/*
 * mxviz - draws a network as a Graphviz graph.
 *
 *   mxviz CONFIG [SECTION.KEY=VALUE ...] [--shape NAME=DIMS ...] [--show-weights] [-o FILE]
 *   mxviz PREFIX-symbol.json [--shape NAME=DIMS ...] [--show-weights] [-o FILE]
 *
 * Writes dot text to stdout, or renders it through Graphviz's `dot` to
 * FILE by its extension (.svg, .png, .pdf; .dot/.gv write the text).
 * Shapes come from --shape, else from the config's [train] (then [val])
 * iterator. Exit status: 0 success, 1 runtime failure (Graphviz missing or
 * failing, output not writable), 2 usage, config or symbol file error.
 */
#include "config/config.h"
#include "train/settings.h"
#include "viz/dot.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SHAPES 16
#define MAX_OVERRIDES 256

static const char usage_text[] =
    "usage: mxviz CONFIG|PREFIX-symbol.json [SECTION.KEY=VALUE ...] [--shape NAME=DIMS ...]\n"
    "             [--show-weights] [-o FILE]\n"
    "\n"
    "Draws the network as a Graphviz graph: a node per layer with its operator,\n"
    "the parameters it was given and its output shape; edges labelled with\n"
    "tensor shapes; weights, biases and labels hidden unless --show-weights.\n"
    "\n"
    "  CONFIG              a net config (configs/*.conf); SECTION.KEY=VALUE\n"
    "                      arguments override its keys as in mxtrain\n"
    "  PREFIX-symbol.json  an MXNet symbol file\n"
    "  --shape NAME=DIMS   input shape, e.g. --shape data=1,3,224,224 (repeatable;\n"
    "                      a bare DIMS names the first input). Default for a\n"
    "                      config: [train] batch_size and its sample shape\n"
    "  --show-weights      also draw weights, biases, BatchNorm statistics, labels\n"
    "  -o, --output FILE   render to FILE through Graphviz's dot by extension:\n"
    "                      .svg .png .pdf; .dot or .gv write the dot text\n"
    "                      (default: dot text on stdout)\n"
    "  -h, --help          this text\n"
    "\n"
    "Environment: MXVIZ_DOT names the Graphviz program (default: dot).\n"
    "Exit status: 0 ok, 1 runtime failure (Graphviz missing or failing),\n"
    "2 usage, config or symbol file error.\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "mxviz: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see mxviz --help)\n");
    return 2;
}

/* The thread's last error without "file.c:NN: " source prefixes. */
static const char *clean_error(char *buf, size_t size)
{
    const char *msg = mx_last_error();
    size_t o = 0;
    for (size_t i = 0; msg[i] && o + 1 < size;) {
        if (i == 0 || msg[i - 1] == ' ') {
            size_t j = i;
            while (isalnum((unsigned char)msg[j]) || msg[j] == '_' || msg[j] == '-') j++;
            if (j > i && msg[j] == '.' && (msg[j + 1] == 'c' || msg[j + 1] == 'h')) {
                size_t k = j + 2;
                if (msg[j + 1] == 'c' && msg[k] == 'u') k++;
                if (msg[k] == ':' && isdigit((unsigned char)msg[k + 1])) {
                    k++;
                    while (isdigit((unsigned char)msg[k])) k++;
                    if (msg[k] == ':' && msg[k + 1] == ' ') {
                        i = k + 2;
                        continue;
                    }
                }
            }
        }
        buf[o++] = msg[i++];
    }
    buf[o] = '\0';
    return buf;
}

/* A symbol file: named .json, or its text starts with '{'. */
static bool looks_like_json(const char *path)
{
    if (strlen(path) >= 5 && !strcasecmp(path + strlen(path) - 5, ".json")) return true;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    size_t i = 0;
    if (n >= 3 && buf[0] == 0xEF && buf[1] == 0xBB && buf[2] == 0xBF) i = 3;
    while (i < n && isspace(buf[i])) i++;
    return i < n && buf[i] == '{';
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcasecmp(s + n - m, suffix);
}

/* "data=1,3,224,224", "1x3x224x224", "(1, 3, 224, 224)". */
static bool parse_shape_arg(const char *arg, char *name, size_t name_size, mx_shape *out)
{
    const char *eq = strchr(arg, '=');
    const char *dims = arg;
    name[0] = '\0';
    if (eq) {
        size_t n = (size_t)(eq - arg);
        if (n == 0 || n >= name_size) return false;
        memcpy(name, arg, n);
        name[n] = '\0';
        dims = eq + 1;
    }
    mx_shape s = {.ndim = 0};
    const char *p = dims;
    while (isspace((unsigned char)*p)) p++;
    bool paren = *p == '(' || *p == '[';
    if (paren) p++;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!isdigit((unsigned char)*p)) return false;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || v <= 0 || v > (1LL << 40) || s.ndim == MX_MAX_NDIM) return false;
        s.dims[s.ndim++] = v;
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',' || *p == 'x' || *p == 'X') {
            p++;
            continue;
        }
        break;
    }
    if (paren) {
        if (*p != ')' && *p != ']') return false;
        p++;
    }
    while (isspace((unsigned char)*p)) p++;
    if (*p) return false;
    *out = s;
    return true;
}

/* Runs `dot -TFMT -o FILE` with the text on its stdin. 0 ok, 1 failure. */
static int render(const char *text, size_t len, const char *format, const char *path)
{
    const char *prog = getenv("MXVIZ_DOT");
    if (!prog || !*prog) prog = "dot";
    char tflag[32];
    snprintf(tflag, sizeof(tflag), "-T%s", format);
    int data[2], err[2];
    if (pipe(data) != 0) {
        fprintf(stderr, "mxviz: pipe: %s\n", strerror(errno));
        return 1;
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
        fprintf(stderr, "mxviz: pipe: %s\n", strerror(errno));
        close(data[0]);
        close(data[1]);
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "mxviz: fork: %s\n", strerror(errno));
        close(data[0]), close(data[1]), close(err[0]), close(err[1]);
        return 1;
    }
    if (pid == 0) {
        close(data[1]);
        close(err[0]);
        if (dup2(data[0], STDIN_FILENO) < 0) _exit(127);
        close(data[0]);
        execlp(prog, prog, tflag, "-o", path, (char *)NULL);
        int e = errno;
        ssize_t w = write(err[1], &e, sizeof(e));
        (void)w;
        _exit(127);
    }
    close(data[0]);
    close(err[1]);
    /* Did exec work? The error pipe closes on exec or carries errno. */
    int child_errno = 0;
    ssize_t got;
    do got = read(err[0], &child_errno, sizeof(child_errno));
    while (got < 0 && errno == EINTR);
    close(err[0]);
    bool write_failed = false;
    if (got == (ssize_t)sizeof(child_errno)) {
        close(data[1]);
    } else {
        size_t off = 0;
        while (off < len) {
            ssize_t w = write(data[1], text + off, len - off);
            if (w < 0) {
                if (errno == EINTR) continue;
                write_failed = true;
                break;
            }
            off += (size_t)w;
        }
        close(data[1]);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "mxviz: waitpid: %s\n", strerror(errno));
            return 1;
        }
    if (got == (ssize_t)sizeof(child_errno)) {
        if (child_errno == ENOENT)
            fprintf(stderr,
                    "mxviz: cannot run '%s': Graphviz is not installed (install graphviz, e.g. "
                    "scripts/install-deps.sh), or write dot text with -o FILE.dot\n",
                    prog);
        else fprintf(stderr, "mxviz: cannot run '%s': %s\n", prog, strerror(child_errno));
        return 1;
    }
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "mxviz: '%s %s' was killed by signal %d\n", prog, tflag, WTERMSIG(status));
        return 1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "mxviz: '%s %s -o %s' failed with exit status %d\n", prog, tflag, path,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 1;
    }
    if (write_failed) {
        fprintf(stderr, "mxviz: '%s' stopped reading its input\n", prog);
        return 1;
    }
    return 0;
}

static int write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "mxviz: %s: cannot open for writing: %s\n", path, strerror(errno));
        return 1;
    }
    size_t w = fwrite(text, 1, len, f);
    int failed = w != len || ferror(f);
    if (fclose(f) != 0) failed = 1;
    if (failed) {
        fprintf(stderr, "mxviz: %s: write error\n", path);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *input = NULL, *output = NULL;
    const char *overrides[MAX_OVERRIDES];
    int n_overrides = 0;
    char shape_names[MAX_SHAPES][128];
    mx_shape shapes[MAX_SHAPES];
    int n_shapes = 0;
    bool show_weights = false;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(a, "--show-weights")) {
            show_weights = true;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) return usage_error("%s needs a file name", a);
            if (output) return usage_error("%s given twice", a);
            output = argv[++i];
        } else if (!strncmp(a, "--output=", 9)) {
            if (output) return usage_error("%s given twice", "--output");
            output = a + 9;
        } else if (!strcmp(a, "--shape") || !strncmp(a, "--shape=", 8)) {
            const char *v = a[7] == '=' ? a + 8 : NULL;
            if (!v) {
                if (i + 1 >= argc) return usage_error("%s needs NAME=DIMS, e.g. --shape data=1,3,224,224", a);
                v = argv[++i];
            }
            if (n_shapes == MAX_SHAPES) return usage_error("more than %s --shape options", "16");
            if (!parse_shape_arg(v, shape_names[n_shapes], sizeof(shape_names[0]), &shapes[n_shapes]))
                return usage_error("bad --shape '%s': expected NAME=DIMS such as data=1,3,224,224", v);
            n_shapes++;
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown option '%s'", a);
        } else if (!input) {
            input = a;
        } else if (mx_config_is_override(a)) {
            if (n_overrides == MAX_OVERRIDES) return usage_error("more than %s overrides", "256");
            overrides[n_overrides++] = a;
        } else {
            return usage_error("unexpected argument '%s' (one CONFIG or symbol file; overrides are SECTION.KEY=VALUE)",
                               a);
        }
    }
    if (!input) return usage_error("%s", "no CONFIG or PREFIX-symbol.json given");

    const char *format = NULL; /* NULL: dot text */
    if (output) {
        if (ends_with(output, ".svg")) format = "svg";
        else if (ends_with(output, ".png")) format = "png";
        else if (ends_with(output, ".pdf")) format = "pdf";
        else if (!ends_with(output, ".dot") && !ends_with(output, ".gv"))
            return usage_error("-o '%s': the extension must be .svg, .png, .pdf, .dot or .gv", output);
    }

    bool is_json = looks_like_json(input);
    if (is_json && n_overrides)
        return usage_error("overrides such as '%s' apply to configs, not symbol files", overrides[0]);

    char err[1024];
    mx_config *cfg = NULL;
    mx_train_settings *settings = NULL;
    mx_graph *json_graph = NULL;
    const mx_graph *g;
    const char *title;
    if (is_json) {
        if (mx_graph_load_json(input, &json_graph) != MX_OK) {
            const char *msg = clean_error(err, sizeof(err));
            if (!strncmp(msg, input, strlen(input))) fprintf(stderr, "%s\n", msg);
            else fprintf(stderr, "%s: %s\n", input, msg);
            return 2;
        }
        g = json_graph;
        title = strrchr(input, '/') ? strrchr(input, '/') + 1 : input;
    } else {
        if (mx_config_load(input, overrides, n_overrides, &cfg) != MX_OK ||
            mx_train_settings_load(cfg, &settings) != MX_OK) {
            fprintf(stderr, "%s\n", mx_last_error());
            mx_train_settings_free(settings);
            mx_config_free(cfg);
            return 2;
        }
        g = cfg->graph;
        title = cfg->name;
    }

    /* Shapes: --shape, else the config's iterator. */
    const char *names[MAX_SHAPES];
    for (int i = 0; i < n_shapes; i++) {
        if (!shape_names[i][0]) snprintf(shape_names[i], sizeof(shape_names[i]), "%s", cfg ? cfg->inputs[0] : "data");
        names[i] = shape_names[i];
    }
    int n = n_shapes;
    if (!n && cfg) {
        const mx_data_iter_spec *spec = mx_train_settings_shape_source(settings);
        mx_shape label;
        if (!spec) {
            fprintf(stderr,
                    "mxviz: %s: no [train] or [val] iterator gives the input shape; pass --shape %s=N,C,H,W\n",
                    input, cfg->inputs[0]);
            mx_train_settings_free(settings);
            mx_config_free(cfg);
            return 2;
        }
        if (mx_data_iter_spec_shapes(spec, &shapes[0], &label) != MX_OK) {
            fprintf(stderr, "mxviz: %s: [%s]: %s; pass --shape %s=N,C,H,W\n", input,
                    spec == settings->train ? "train" : "val", clean_error(err, sizeof(err)), cfg->inputs[0]);
            mx_train_settings_free(settings);
            mx_config_free(cfg);
            return 2;
        }
        names[0] = cfg->inputs[0];
        n = 1;
    }
    mx_graph_shapes gs;
    mx_status st = cfg ? mx_config_infer_shapes(cfg, names, shapes, n, &gs)
                       : mx_graph_infer_shapes(g, names, shapes, n, &gs);
    if (st != MX_OK) {
        if (cfg) fprintf(stderr, "%s\n", mx_last_error());
        else if (!n_shapes)
            fprintf(stderr, "%s: %s; pass --shape data=N,C,H,W\n", input, clean_error(err, sizeof(err)));
        else fprintf(stderr, "%s: %s\n", input, clean_error(err, sizeof(err)));
        mx_train_settings_free(settings);
        mx_config_free(cfg);
        mx_graph_free(json_graph);
        return st == MX_ERR_INVALID ? 2 : 1;
    }

    mx_dot_options opt = {.show_weights = show_weights, .title = title};
    char *text = NULL;
    size_t len = 0;
    st = mx_graph_to_dot(g, &gs, &opt, &text, &len);
    mx_graph_shapes_free(&gs);
    mx_train_settings_free(settings);
    mx_config_free(cfg);
    mx_graph_free(json_graph);
    if (st != MX_OK) {
        fprintf(stderr, "mxviz: %s\n", clean_error(err, sizeof(err)));
        return 1;
    }

    int rc = 0;
    signal(SIGPIPE, SIG_IGN);
    if (!output) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
            fprintf(stderr, "mxviz: writing to stdout: %s\n", strerror(errno));
            rc = 1;
        }
    } else if (!format) {
        rc = write_file(output, text, len);
    } else {
        rc = render(text, len, format, output);
    }
    mx_free(text);
    return rc;
}
