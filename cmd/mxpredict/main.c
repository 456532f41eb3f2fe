/* mxpredict - run a trained model over images, .rec/.lst files or idx
 * files (../shared/spec/cli.md); the work is in lib/predict. */
#include "config/config.h"
#include "device/device.h"
#include "train/settings.h"
#include "predict/predict.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: mxpredict --model PREFIX [options] INPUT...\n"
    "\n"
    "Loads PREFIX-symbol.json and PREFIX-NNNN.params (the newest epoch unless\n"
    "--epoch), binds the network for prediction only and writes one CSV line\n"
    "per sample, in input order: its id and the top-k classes with their\n"
    "probabilities.\n"
    "\n"
    "INPUT: a JPEG or PNG file, a .rec (MXNet image records; id = record id),\n"
    "a .lst (im2rec list; paths relative to --root), an idx3 file such as\n"
    "MNIST's, raw or gzip'd (id = image index from 0), or - for image paths on\n"
    "standard input, one a line. An input or sample that cannot be read is\n"
    "reported on stderr and gets no line; the others still run.\n"
    "\n"
    "model:\n"
    "  --model PREFIX        checkpoint prefix (default with --config: fit.model_prefix)\n"
    "  --epoch N             load PREFIX-NNNN.params (default: the newest)\n"
    "  --config FILE         the model's config: input shape, preprocessing and\n"
    "                        batch size from its [val] (else [train]) section\n"
    "  --ctx CTX             cpu (default) or gpu(N)\n"
    "  --batch-size N        samples per batch (default 32, or the config's)\n"
    "  --benchmark N         no INPUT: time N batches of random data after 3\n"
    "                        untimed ones (each one pushed and its output read\n"
    "                        back), print images/s and ms a batch on stdout\n"
    "  --dtype T             float32 (default: as saved), or float16 / bfloat16:\n"
    "                        the layers in half precision, weights and the loss\n"
    "                        in float32 (MXNet's amp.convert_model)\n"
    "\n"
    "preprocessing (as the image iterator; options override the config):\n"
    "  --data-shape C,H,W    input of one sample (default: --config, else the\n"
    "                        symbol's data __shape__, else an idx input's size)\n"
    "  --resize N            resize the shorter edge to N before the centre crop\n"
    "  --mean R[,G,B[,A]]    subtracted per channel (default 0)\n"
    "  --std R[,G,B[,A]]     divided per channel (default 1)\n"
    "  --scale S             multiplier after the mean (default 1; idx inputs 1/256)\n"
    "  --root DIR            folder .lst paths are relative to (default: the .lst's)\n"
    "\n"
    "output:\n"
    "  --output FILE         write there instead of standard output\n"
    "  --top-k K             classes per sample (default 5, at most the classes)\n"
    "  --synset FILE         class names, one a line: names instead of indices\n"
    "  --layer NAME          write this layer's output instead (\"fc1\" or\n"
    "                        \"fc1_output\"); only the graph up to it runs\n"
    "  --format csv|raw      --layer output: CSV id,v0,v1,... (default) or raw:\n"
    "                        a line \"MXPREDICT-RAW float32 le shape=(d1,...)\" then\n"
    "                        each sample's float32 values, little-endian\n"
    "  --ids FILE            with --format raw: the rows' ids, one a line\n"
    "  --profile FILE        write a timeline of every layer's run (Chrome trace\n"
    "                        JSON: chrome://tracing, ui.perfetto.dev) to FILE\n"
    "  -v, --verbose         the model, the planned memory and timings on stderr\n"
    "  -q, --quiet           no progress or summary lines\n"
    "  -h, --help            this text\n"
    "\n"
    "exit status: 0 every input predicted, 1 some input could not be read or\n"
    "the run failed, 2 bad usage, config or input shape\n";

typedef struct options {
    const char *model, *config, *output, *synset, *layer, *format, *ids, *root, *ctx, *profile, *dtype;
    const char *data_shape, *mean, *std;
    int epoch;
    long batch_size, top_k, resize, benchmark;
    double scale;
    bool have_scale, verbose, quiet, no_overlap;
    const char **inputs;
    int n_inputs;
} options;

static int usage_error(const char *fmt, const char *arg)
{
    fputs("mxpredict: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs(" (see --help)\n", stderr);
    return 2;
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* "a,b,c" into up to cap floats; returns the count, -1 when malformed. */
static int parse_floats(const char *s, double *v, int cap)
{
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        double d = strtod(p, &end);
        if (end == p || errno || !isfinite(d) || n == cap) return -1;
        v[n++] = d;
        while (*end == ' ') end++;
        if (!*end) return n;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

/* "3,32,32" / "(3, 32, 32)" into a shape. */
static bool parse_shape(const char *s, mx_shape *out)
{
    int64_t dims[MX_MAX_NDIM];
    int n = 0;
    const char *p = s;
    while (*p == '(' || *p == '[' || *p == ' ') p++;
    for (;;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || v > (1LL << 31) || n == MX_MAX_NDIM - 1) return false;
        dims[n++] = v;
        while (*end == ' ') end++;
        if (*end == ',') {
            p = end + 1;
            while (*p == ' ') p++;
            continue;
        }
        while (*end == ')' || *end == ']' || *end == ' ') end++;
        if (*end) return false;
        break;
    }
    *out = mx_shape_make(n, dims);
    return true;
}

/* Parses argv; returns -1 to go on, else an exit code. */
static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof(*o));
    o->epoch = -1;
    o->inputs = calloc((size_t)argc + 1, sizeof(char *));
    if (!o->inputs) {
        fputs("mxpredict: out of memory\n", stderr);
        return 1;
    }
    static const char *const with_value[] = {"--model", "--epoch", "--config", "--ctx", "--batch-size",
                                             "--data-shape", "--resize", "--mean", "--std", "--scale",
                                             "--root", "--output", "--top-k", "--synset", "--layer",
                                             "--format", "--ids", "--profile", "--dtype", "--benchmark", NULL};
    bool only_inputs = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_inputs || a[0] != '-' || !strcmp(a, "-")) {
            o->inputs[o->n_inputs++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_inputs = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->verbose = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(a, "--no-overlap")) {
            o->no_overlap = true;
        } else {
            /* --opt VALUE or --opt=VALUE */
            char name[64];
            const char *eq = strchr(a, '='), *v;
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
            if (len >= sizeof(name)) return usage_error("unknown option '%s'", a);
            memcpy(name, a, len);
            name[len] = '\0';
            int k = 0;
            while (with_value[k] && strcmp(with_value[k], name)) k++;
            if (!with_value[k]) return usage_error("unknown option '%s'", a);
            if (eq) {
                v = eq + 1;
            } else {
                if (i + 1 >= argc) return usage_error("%s needs a value", name);
                v = argv[++i];
            }
            long n;
            if (!strcmp(name, "--model")) o->model = v;
            else if (!strcmp(name, "--config")) o->config = v;
            else if (!strcmp(name, "--ctx")) o->ctx = v;
            else if (!strcmp(name, "--data-shape")) o->data_shape = v;
            else if (!strcmp(name, "--mean")) o->mean = v;
            else if (!strcmp(name, "--std")) o->std = v;
            else if (!strcmp(name, "--root")) o->root = v;
            else if (!strcmp(name, "--output")) o->output = v;
            else if (!strcmp(name, "--synset")) o->synset = v;
            else if (!strcmp(name, "--layer")) o->layer = v;
            else if (!strcmp(name, "--format")) o->format = v;
            else if (!strcmp(name, "--ids")) o->ids = v;
            else if (!strcmp(name, "--profile")) o->profile = v;
            else if (!strcmp(name, "--dtype")) o->dtype = v;
            else if (!strcmp(name, "--epoch")) {
                if (!parse_long(v, 0, 9999, &n)) return usage_error("--epoch needs an epoch number 0..9999, got '%s'", v);
                o->epoch = (int)n;
            } else if (!strcmp(name, "--batch-size")) {
                if (!parse_long(v, 1, 1 << 20, &o->batch_size))
                    return usage_error("--batch-size needs a number >= 1, got '%s'", v);
            } else if (!strcmp(name, "--benchmark")) {
                if (!parse_long(v, 1, 1000000, &o->benchmark))
                    return usage_error("--benchmark needs a number of batches 1..1000000, got '%s'", v);
            } else if (!strcmp(name, "--top-k")) {
                if (!parse_long(v, 1, 1 << 20, &o->top_k)) return usage_error("--top-k needs a number >= 1, got '%s'", v);
            } else if (!strcmp(name, "--resize")) {
                if (!parse_long(v, 1, 65535, &o->resize)) return usage_error("--resize needs a size 1..65535, got '%s'", v);
            } else if (!strcmp(name, "--scale")) {
                double d;
                if (parse_floats(v, &d, 1) != 1 || !(d > 0)) return usage_error("--scale needs a number > 0, got '%s'", v);
                o->scale = d;
                o->have_scale = true;
            }
        }
    }
    if (o->format && strcmp(o->format, "csv") && strcmp(o->format, "raw"))
        return usage_error("--format is csv or raw, not '%s'", o->format);
    if (o->format && !o->layer) return usage_error("%s applies to --layer output", "--format");
    if (o->dtype && strcmp(o->dtype, "float32") && strcmp(o->dtype, "float16") && strcmp(o->dtype, "bfloat16"))
        return usage_error("--dtype is float32, float16 or bfloat16, not '%s'", o->dtype);
    if (o->ids && !(o->format && !strcmp(o->format, "raw"))) return usage_error("%s applies to --format raw", "--ids");
    if (o->layer && (o->top_k || o->synset))
        return usage_error("%s: --layer writes the layer's values, not classes", o->top_k ? "--top-k" : "--synset");
    if (!o->model && !o->config) return usage_error("%s", "no model given: use --model PREFIX");
    if (o->benchmark) {
        /* Random batches, nothing read or written: what would be ignored is refused. */
        const char *extra = o->n_inputs ? o->inputs[0] : o->output ? "--output" : o->top_k ? "--top-k"
                            : o->synset ? "--synset" : o->format ? "--format" : o->profile ? "--profile" : NULL;
        if (extra) return usage_error("--benchmark times random batches: '%s' does not apply", extra);
    } else if (o->n_inputs == 0) {
        return usage_error("%s", "no INPUT given (a .rec, .lst, idx file, images, or -)");
    }
    int stdin_inputs = 0;
    for (int i = 0; i < o->n_inputs; i++) stdin_inputs += !strcmp(o->inputs[i], "-");
    if (stdin_inputs > 1) return usage_error("%s", "'-' (paths on standard input) given more than once");
    return -1;
}

static void on_failure(void *user, const char *what, const char *why)
{
    (void)user;
    fprintf(stderr, "mxpredict: %s: %s\n", what, why);
}

typedef struct progress {
    bool tty, quiet;
    double last;
} progress;

static void on_progress(void *user, const mx_predict_stats *st)
{
    progress *pr = user;
    if (pr->quiet) return;
    double now = st->seconds;
    if (pr->tty) {
        if (now - pr->last < 0.2) return;
        fprintf(stderr, "\rmxpredict: %lld samples, %.1f samples/sec", (long long)st->samples,
                now > 0 ? (double)st->samples / now : 0.0);
    } else {
        if (now - pr->last < 10.0) return;
        fprintf(stderr, "mxpredict: %lld samples, %.1f samples/sec\n", (long long)st->samples,
                now > 0 ? (double)st->samples / now : 0.0);
    }
    pr->last = now;
}

static int fail(int code, const char *what)
{
    fprintf(stderr, "mxpredict: %s\n", what);
    if (getenv("MX_DEBUG")) fprintf(stderr, "mxpredict: (at %s)\n", mx_last_error_location());
    return code;
}

/* --benchmark: N batches of random data in [-1, 1) after 3 untimed ones
 * (the first binds cuDNN's choices and, on a GPU, the second is captured
 * as a CUDA graph), each pushed and its output read back (MXNet's
 * benchmark_score.py: forward, then wait for the output). */
static int benchmark(mx_predictor *pred, const options *o, mx_shape sample, long batch_size, mx_shape out_sample)
{
    const int64_t in_n = mx_shape_size(&sample) * batch_size, out_n = mx_shape_size(&out_sample) * batch_size;
    float *in = malloc(sizeof(float) * (size_t)in_n), *outv = malloc(sizeof(float) * (size_t)out_n);
    if (!in || !outv) {
        free(in);
        free(outv);
        return fail(1, "out of memory for the benchmark's batch");
    }
    uint64_t r = 88172645463325252ull;
    for (int64_t i = 0; i < in_n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        in[i] = (float)((r >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
    }
    mx_status s = MX_OK;
    double start = 0;
    for (long b = 0; b < o->benchmark + 3 && s == MX_OK; b++) {
        if (b == 3) start = mx_time_seconds();
        s = mx_predictor_push(pred, in);
        if (s == MX_OK) s = mx_predictor_pull(pred, outv);
    }
    const double secs = mx_time_seconds() - start;
    free(in);
    free(outv);
    if (s != MX_OK) return fail(1, mx_last_error());
    printf("mxpredict: benchmark: %ld batches of %ld (%s): %.2f images/s, %.3f ms a batch\n", o->benchmark,
           batch_size, o->dtype ? o->dtype : "float32", (double)(o->benchmark * batch_size) / secs,
           1000.0 * secs / (double)o->benchmark);
    return 0;
}


/* Settings from the config's [val] (else [train]) section, as its
 * iterator kind preprocesses images. */
static int apply_config(const options *o, const mx_train_settings *settings, mx_shape *shape, bool *have_shape,
                        mx_predict_preproc *pre, long *batch_size)
{
    const mx_data_iter_spec *spec = settings->val ? settings->val : settings->train;
    if (!spec) return -1;
    mx_shape data, label;
    if (mx_data_iter_spec_shapes(spec, &data, &label) == MX_OK) {
        if (!*have_shape && data.ndim >= 2) {
            *shape = mx_shape_make(data.ndim - 1, data.dims + 1);
            *have_shape = true;
        }
        if (!o->batch_size && data.dims[0] > 0) *batch_size = (long)data.dims[0];
    }
    mx_error_clear();
    mx_data_image_norm norm;
    if (mx_data_iter_spec_image_norm(spec, &norm)) {
        for (int c = 0; c < 4; c++) {
            pre->mean[c] = norm.mean[c];
            pre->std[c] = norm.std[c];
        }
        pre->scale = norm.scale;
        if (norm.resize > 0) pre->resize = norm.resize;
        if (norm.mean_img && *norm.mean_img)
            fprintf(stderr, "mxpredict: warning: %s: mean_img is not applied; give --mean\n", settings->cfg->path);
    }
    return -1;
}

/* Per-channel values: one for all channels or one per channel. */
static int set_channels(const char *opt, const char *text, int channels, float *dst)
{
    double v[4];
    int n = parse_floats(text, v, 4);
    if (n < 1 || (n != 1 && n != channels)) {
        fprintf(stderr, "mxpredict: %s needs 1 or %d numbers, got '%s' (see --help)\n", opt, channels, text);
        return 2;
    }
    for (int c = 0; c < 4; c++) {
        double x = v[n == 1 ? 0 : (c < n ? c : n - 1)];
        if (!strcmp(opt, "--std") && !(x > 0)) {
            fprintf(stderr, "mxpredict: --std values must be > 0, got '%s'\n", text);
            return 2;
        }
        dst[c] = (float)x;
    }
    return -1;
}

int main(int argc, char **argv)
{
    options o;
    int code = parse_args(argc, argv, &o);
    if (code >= 0) {
        free(o.inputs);
        return code;
    }
    mx_config *cfg = NULL;
    mx_train_settings *settings = NULL;
    mx_predictor *pred = NULL;
    mx_predict_writer *writer = NULL;
    char **synset = NULL;
    int n_synset = 0;
    FILE *out = stdout, *ids = NULL;
    mx_predict_preproc pre, cfg_pre;
    memset(&cfg_pre, 0, sizeof(cfg_pre));
    for (int c = 0; c < 4; c++) cfg_pre.std[c] = 1.0f;
    cfg_pre.resize = -1;
    mx_shape shape = {0};
    bool have_shape = false;
    long batch_size = o.batch_size ? o.batch_size : 32;
    mx_context ctx = mx_cpu();

    if (o.ctx) {
        int n = 0;
        mx_context *list = NULL;
        if (mx_device_parse_list(o.ctx, &list, &n) != MX_OK || n != 1) {
            free(list);
            code = usage_error("--ctx needs one device, cpu or gpu(N), got '%s'", o.ctx);
            goto done;
        }
        ctx = list[0];
        free(list);
        if (mx_device_check(ctx) != MX_OK) {
            code = fail(2, mx_last_error());
            goto done;
        }
    }
    if (o.data_shape) {
        if (!parse_shape(o.data_shape, &shape)) {
            code = usage_error("--data-shape needs C,H,W (or D) positive sizes, got '%s'", o.data_shape);
            goto done;
        }
        have_shape = true;
    }
    if (o.config) {
        if (mx_config_load(o.config, NULL, 0, &cfg) != MX_OK || mx_train_settings_load(cfg, &settings) != MX_OK) {
            code = fail(2, mx_last_error());
            goto done;
        }
        apply_config(&o, settings, &shape, &have_shape, &cfg_pre, &batch_size);
        if (!o.model) {
            if (!settings->fit.model_prefix[0]) {
                code = usage_error("%s: no fit.model_prefix: give --model PREFIX", o.config);
                goto done;
            }
            o.model = settings->fit.model_prefix;
        }
    }

    mx_status s = mx_predictor_load(o.model, o.epoch, &pred);
    if (s != MX_OK) {
        code = fail(s == MX_ERR_INVALID ? 2 : 1, mx_last_error());
        goto done;
    }
    if (!have_shape) have_shape = mx_predictor_shape_hint(pred, &shape);
    int32_t idx_rows = 0, idx_cols = 0;
    char input_problem[1200] = ""; /* the first input that could not be looked at */
    for (int i = 0; i < o.n_inputs && !idx_rows && (!have_shape || shape.ndim == 1); i++) {
        /* An idx input gives the image size (and the shape, if nothing else does). */
        mx_predict_input_kind kind;
        uint32_t count;
        mx_status ds = mx_predict_input_detect(o.inputs[i], &kind);
        if (ds == MX_OK && kind == MX_PREDICT_INPUT_IDX) ds = mx_predict_idx_geometry(o.inputs[i], &idx_rows, &idx_cols, &count);
        if (ds == MX_OK && idx_rows && !have_shape) {
            shape = MX_SHAPE(1, idx_rows, idx_cols);
            have_shape = true;
        }
        if (ds != MX_OK && !input_problem[0]) snprintf(input_problem, sizeof(input_problem), "%s", mx_last_error());
        mx_error_clear();
    }
    if (!have_shape && input_problem[0]) {
        /* What is wrong with the input comes first: it is what to fix. */
        char msg[1400];
        snprintf(msg, sizeof(msg), "%s; the model does not record its input shape either (give --data-shape C,H,W)",
                 input_problem);
        code = fail(1, msg);
        goto done;
    }
    if (!have_shape) {
        code = fail(2, "the model does not record its input shape: give --data-shape C,H,W (or --config)");
        goto done;
    }
    if (mx_predict_preproc_init(&pre, shape) != MX_OK) {
        if (shape.ndim == 1 && idx_rows > 0 && (int64_t)idx_rows * idx_cols == shape.dims[0]) {
            pre.channels = 1; /* a flat input fed from idx images */
            pre.height = idx_rows;
            pre.width = idx_cols;
            mx_error_clear();
        } else {
            code = fail(2, mx_last_error());
            goto done;
        }
    } else if (shape.ndim == 1 && idx_rows > 0 && (int64_t)idx_rows * idx_cols == shape.dims[0]) {
        pre.channels = 1;
        pre.height = idx_rows;
        pre.width = idx_cols;
    }
    memcpy(pre.mean, cfg_pre.mean, sizeof(pre.mean));
    memcpy(pre.std, cfg_pre.std, sizeof(pre.std));
    pre.scale = cfg_pre.scale;
    pre.resize = cfg_pre.resize;
    if (o.mean && (code = set_channels("--mean", o.mean, pre.channels, pre.mean)) >= 0) goto done;
    if (o.std && (code = set_channels("--std", o.std, pre.channels, pre.std)) >= 0) goto done;
    if (o.have_scale) pre.scale = (float)o.scale;
    if (o.resize) pre.resize = (int32_t)o.resize;
    code = -1;

    /* A profile shows every layer: no CUDA graphs then. */
    mx_predictor_bind_opts bo = {.sample = shape, .batch_size = batch_size, .layer = o.layer, .ctx = ctx,
                                 .cuda_graph = !o.profile,
                                 .dtype = !o.dtype                         ? MX_FLOAT32
                                          : !strcmp(o.dtype, "float16")   ? MX_FLOAT16
                                          : !strcmp(o.dtype, "bfloat16")  ? MX_BFLOAT16
                                                                          : MX_FLOAT32};
    s = mx_predictor_bind(pred, &bo);
    if (s != MX_OK) {
        code = fail(s == MX_ERR_INVALID ? 2 : 1, mx_last_error());
        goto done;
    }
    mx_shape os = mx_predictor_output_shape(pred);
    if (o.benchmark) {
        code = benchmark(pred, &o, shape, batch_size, os);
        goto done;
    }
    if (o.verbose) {
        char a[160], b[160];
        mx_shape in = shape, on = os;
        fprintf(stderr, "mxpredict: model %s epoch %d: input '%s' %s, output '%s' %s, batch %ld\n", o.model,
                mx_predictor_epoch(pred), mx_predictor_data_name(pred), mx_shape_str(&in, a, sizeof(a)),
                mx_predictor_output_name(pred), mx_shape_str(&on, b, sizeof(b)), batch_size);
        mx_memory_plan_stats ms;
        size_t out_bytes;
        mx_predictor_memory(pred, &ms, &out_bytes);
        fprintf(stderr,
                "mxpredict: planned memory: internal %zu bytes (naive %zu, %d tensors in %d buffers), workspace %zu "
                "bytes, output %zu bytes, total %zu bytes\n",
                ms.both, ms.naive, ms.n_internal, ms.n_buffers, ms.workspace, out_bytes,
                ms.both + ms.workspace + out_bytes);
        if (mx_predictor_folded(pred))
            fprintf(stderr, "mxpredict: %d BatchNorm layers folded into the convolutions before them\n",
                    mx_predictor_folded(pred));
    }

    if (o.synset && mx_predict_synset_load(o.synset, &synset, &n_synset) != MX_OK) {
        code = fail(1, mx_last_error());
        goto done;
    }
    if (o.output && !(out = fopen(o.output, "wb"))) {
        fprintf(stderr, "mxpredict: %s: cannot open for writing: %s\n", o.output, strerror(errno));
        out = NULL;
        code = 1;
        goto done;
    }
    if (o.ids && !(ids = fopen(o.ids, "wb"))) {
        fprintf(stderr, "mxpredict: %s: cannot open for writing: %s\n", o.ids, strerror(errno));
        code = 1;
        goto done;
    }
    int64_t classes = mx_shape_size(&os);
    mx_predict_writer_opts wo = {
        .out = out,
        .features = o.layer != NULL,
        .format = o.format && !strcmp(o.format, "raw") ? MX_PREDICT_FORMAT_RAW : MX_PREDICT_FORMAT_CSV,
        .top_k = o.layer ? 0 : (int)(o.top_k ? o.top_k : (classes < 5 ? classes : 5)),
        .synset = (const char *const *)synset,
        .n_synset = n_synset,
        .ids_file = ids,
    };
    if (!o.layer && o.top_k > classes) {
        fprintf(stderr, "mxpredict: --top-k %ld: the output '%s' has %lld classes\n", o.top_k,
                mx_predictor_output_name(pred), (long long)classes);
        code = 2;
        goto done;
    }
    if ((s = mx_predict_writer_create(&wo, os, &writer)) != MX_OK) {
        code = fail(2, mx_last_error());
        goto done;
    }

    progress pr = {.tty = isatty(fileno(stderr)), .quiet = o.quiet};
    mx_predict_run_opts ro = {.inputs = o.inputs, .n_inputs = o.n_inputs,
                              .reader = {.preproc = &pre, .root = o.root, .paths = stdin},
                              .no_overlap = o.no_overlap, .on_failure = on_failure, .on_progress = on_progress,
                              .user = &pr};
    mx_predict_stats st;
    if (o.profile && (s = mx_predictor_profile_begin(pred)) != MX_OK) {
        code = fail(1, mx_last_error());
        goto done;
    }
    s = mx_predict_run(pred, writer, &ro, &st);
    if (o.profile) {
        mx_status ps = mx_predictor_profile_end(pred, o.profile);
        if (s == MX_OK && ps != MX_OK) s = ps;
        if (ps == MX_OK && o.verbose) fprintf(stderr, "mxpredict: timeline written to %s\n", o.profile);
    }
    if (pr.tty && !o.quiet && pr.last > 0) fputc('\n', stderr);
    if (s != MX_OK) {
        code = fail(1, mx_last_error());
        goto done;
    }
    if (!o.quiet)
        fprintf(stderr, "mxpredict: %lld samples predicted, %lld unreadable, in %.3f s (%.1f samples/sec)\n",
                (long long)st.samples, (long long)st.failed, st.seconds,
                st.seconds > 0 ? (double)st.samples / st.seconds : 0.0);
    if (o.verbose) {
        fprintf(stderr, "mxpredict: time: reading and preprocessing %.3f s, network %s%.3f s, %lld batches\n",
                st.read_seconds, o.no_overlap ? "" : "(not overlapped) ", st.wait_seconds, (long long)st.batches);
        if (o.no_overlap && st.batches > 0)
            fprintf(stderr, "mxpredict: network per batch of %ld: best %.3f ms, median %.3f ms (%.1f samples/sec at "
                            "the best)\n",
                    batch_size, st.batch_best_seconds * 1e3, st.batch_median_seconds * 1e3,
                    st.batch_best_seconds > 0 ? (double)batch_size / st.batch_best_seconds : 0.0);
        if (o.no_overlap && st.samples > 0)
            fprintf(stderr, "mxpredict: network CPU time (all threads): %.3f s, %.3f ms per sample\n",
                    st.wait_cpu_seconds, st.wait_cpu_seconds * 1e3 / (double)st.samples);
    }
    code = st.failed > 0 ? 1 : 0;

done:
    if (out && out != stdout && fclose(out) != 0 && code == 0) code = fail(1, "closing the output file failed");
    if (ids && fclose(ids) != 0 && code == 0) code = fail(1, "closing the ids file failed");
    if (out == stdout && fflush(stdout) != 0 && code == 0) code = fail(1, "writing standard output failed");
    mx_predict_writer_free(writer);
    mx_predict_synset_free(synset, n_synset);
    mx_predictor_free(pred);
    mx_train_settings_free(settings);
    mx_config_free(cfg);
    free(o.inputs);
    return code < 0 ? 0 : code;
}
