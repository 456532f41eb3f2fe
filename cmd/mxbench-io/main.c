/*
 * mxbench-io - throughput of the imagerecord iterator against the raw
 * TurboJPEG decode rate of the same images, measured in the same run.
 *
 *   mxbench-io --rec FILE [--data-shape C,H,W] [--batch N] [--threads 1,2]
 *              [--rounds R] [--epochs E] [--label NAME] [--yuv] [KEY=VALUE ...]
 *
 * Loads every image payload of FILE into memory, then for each thread
 * count T and each of R rounds (interleaved, so drift hits both sides):
 *   raw   T threads each decode a share of the payloads with tjDecompress2
 *         (one handle and one output buffer per thread, reused; grey for
 *         C = 1, RGB for C = 3; image sizes read before timing, so the
 *         timed loop is one tjDecompress2 per image): decode only; E
 *         passes, the best counts;
 *   iter  the imagerecord iterator with preprocess_threads=T over the same
 *         file, E epochs after one warm-up epoch, the best counts, rand_crop=1
 *         rand_mirror=1 mean/std normalisation by default (KEY=VALUE
 *         arguments are added to / override its parameters), the consumer
 *         touching every batch.
 *   store one thread writing just the float32 samples (C*H*W floats per
 *         image) into a ring of batch buffers: the memory-bandwidth floor
 *         of any iterator producing float32, for reference;
 *   yuv   with --yuv (colour only), the raw side again but decoding to the
 *         YCbCr planes (tjDecompressToYUV2: no upsampling or colour
 *         conversion), the decode step of the iterator's fast path.
 * Prints one markdown table row per T with the best pass of each side
 * (images per second) and their ratio, and the CPU time per image of each
 * (process user + system time over the pass: all of the iterator's
 * threads, consumer included), which a shared machine disturbs much less
 * than wall-clock rates; then a JSON line per T on stderr.
 * Exit status: 0 done, 1 a failure, 2 bad usage.
 */
#include "io/io.h"
#include "recordio/imrec.h"
#include "recordio/recordio.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <turbojpeg.h>

#define MAX_KV 48

typedef struct payloads {
    uint8_t **data;
    size_t *size;
    int *width, *height; /* read once here, so the timed loop only decodes */
    size_t n, max_pixels, max_yuv;
} payloads;

typedef struct raw_job {
    const payloads *p;
    size_t lo, hi;
    int gray;
    int yuv; /* decode to YCbCr planes instead */
    int failed;
    uint64_t checksum;
} raw_job;

static int usage(void)
{
    fputs("usage: mxbench-io --rec FILE [--data-shape C,H,W] [--batch N] [--threads 1,2] [--rounds R]\n"
          "                  [--epochs E] [--label NAME] [--yuv] [KEY=VALUE ...]\n"
          "Throughput of the imagerecord iterator (decode + crop + mirror + normalise) beside the raw\n"
          "TurboJPEG decode rate of the same images. KEY=VALUE: extra iterator parameters.\n"
          "exit status: 0 done, 1 a failure, 2 bad usage\n",
          stderr);
    return 2;
}

static int load_payloads(const char *path, payloads *out)
{
    mx_recordio_reader *r;
    if (mx_recordio_reader_open(path, &r) != MX_OK) {
        fprintf(stderr, "mxbench-io: %s\n", mx_last_error());
        return 1;
    }
    size_t cap = 0;
    memset(out, 0, sizeof(*out));
    tjhandle tj = tjInitDecompress();
    if (!tj) return 1;
    for (;;) {
        mx_recordio_record rec;
        int got = 0;
        if (mx_recordio_reader_next(r, &rec, &got) != MX_OK) {
            fprintf(stderr, "mxbench-io: %s: %s\n", path, mx_last_error());
            mx_recordio_reader_free(r);
            return 1;
        }
        if (!got) break;
        mx_imrec ir;
        if (mx_imrec_parse(rec.data, rec.size, &ir) != MX_OK) continue;
        if (out->n == cap) {
            cap = cap ? cap * 2 : 4096;
            out->data = realloc(out->data, cap * sizeof(*out->data));
            out->size = realloc(out->size, cap * sizeof(*out->size));
            out->width = realloc(out->width, cap * sizeof(*out->width));
            out->height = realloc(out->height, cap * sizeof(*out->height));
            if (!out->data || !out->size || !out->width || !out->height) return 1;
        }
        int w, h, sub, cs;
        if (tjDecompressHeader3(tj, ir.image, (unsigned long)ir.image_size, &w, &h, &sub, &cs) != 0) {
            fprintf(stderr, "mxbench-io: %s: record at offset %llu is not a JPEG TurboJPEG can read\n", path,
                    (unsigned long long)rec.offset);
            return 1;
        }
        out->width[out->n] = w;
        out->height[out->n] = h;
        if ((size_t)w * (size_t)h > out->max_pixels) out->max_pixels = (size_t)w * (size_t)h;
        unsigned long yb = tjBufSizeYUV2(w, 1, h, sub);
        if (yb != (unsigned long)-1 && yb > out->max_yuv) out->max_yuv = yb;
        out->data[out->n] = malloc(ir.image_size);
        if (!out->data[out->n]) return 1;
        memcpy(out->data[out->n], ir.image, ir.image_size);
        out->size[out->n++] = ir.image_size;
    }
    mx_recordio_reader_free(r);
    tjDestroy(tj);
    return out->n ? 0 : 1;
}

static void *raw_main(void *arg)
{
    raw_job *j = arg;
    tjhandle tj = tjInitDecompress();
    size_t bytes = j->yuv ? j->p->max_yuv : j->p->max_pixels * (j->gray ? 1 : 3);
    uint8_t *buf = malloc(bytes);
    if (!tj || !buf) {
        j->failed = 1;
        free(buf);
        if (tj) tjDestroy(tj);
        return NULL;
    }
    uint64_t sum = 0; /* local: the jobs share cache lines */
    for (size_t i = j->lo; i < j->hi; i++) {
        int w = j->p->width[i], h = j->p->height[i];
        int rc = j->yuv ? tjDecompressToYUV2(tj, j->p->data[i], (unsigned long)j->p->size[i], buf, w, 1, h,
                                             TJFLAG_ACCURATEDCT)
                        : tjDecompress2(tj, j->p->data[i], (unsigned long)j->p->size[i], buf, w, 0, h,
                                        j->gray ? TJPF_GRAY : TJPF_RGB, TJFLAG_ACCURATEDCT);
        if (rc != 0) {
            j->failed = 1;
            break;
        }
        sum += buf[(size_t)w * (size_t)h / 2];
    }
    j->checksum = sum;
    free(buf);
    tjDestroy(tj);
    return NULL;
}

/* CPU seconds (user + system) this process has used, all threads. */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Images per second of T threads decoding every payload once; *cpu = CPU
 * seconds per image. */
static double raw_rate(const payloads *p, int threads, int gray, int yuv, double *cpu)
{
    raw_job jobs[64];
    pthread_t th[64];
    double c0 = cpu_seconds(), t0 = mx_time_seconds();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (raw_job){p, p->n * (size_t)i / (size_t)threads, p->n * (size_t)(i + 1) / (size_t)threads, gray, yuv,
                            0, 0};
        if (pthread_create(&th[i], NULL, raw_main, &jobs[i]) != 0) return -1;
    }
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        failed |= jobs[i].failed;
    }
    double dt = mx_time_seconds() - t0;
    *cpu = (cpu_seconds() - c0) / (double)p->n;
    if (failed) {
        fprintf(stderr, "mxbench-io: TurboJPEG could not decode a payload (are the images JPEG?)\n");
        return -1;
    }
    return (double)p->n / dt;
}

/* Images per second of writing just the float32 output samples (C*H*W
 * floats each) into a ring of 5 batch buffers, as the iterator must: the
 * memory-bandwidth floor under any decode + normalise. */
static double store_rate(int64_t sample, int64_t batch, size_t n_images, int threads)
{
    size_t ring = (size_t)(5 * batch * sample);
    float *buf = malloc(ring * sizeof(float));
    if (!buf) return -1;
    memset(buf, 0, ring * sizeof(float));
    double t0 = mx_time_seconds();
    size_t at = 0;
    for (size_t i = 0; i < n_images; i++) {
        float *d = buf + at;
        for (int64_t k = 0; k < sample; k++) d[k] = (float)k;
        at += (size_t)sample;
        if (at + (size_t)sample > ring) at = 0;
    }
    double dt = mx_time_seconds() - t0;
    free(buf);
    return (double)n_images / dt * threads;
}

/* Images per second of the iterator: its best of `epochs` epochs, each
 * timed alone, after a warm-up epoch. */
static double iter_rate(const char *const *keys, const char *const *values, int n, int epochs, double *checksum,
                        double *cpu)
{
    mx_runtime *rt = NULL;
    mx_data_iter *it = NULL;
    if (mx_runtime_create(NULL, &rt) != MX_OK || mx_data_iter_create(rt, "imagerecord", keys, values, n, &it) != MX_OK) {
        fprintf(stderr, "mxbench-io: %s\n", mx_last_error());
        mx_runtime_free(rt);
        return -1;
    }
    double best = 0;
    *cpu = 1e30;
    for (int e = 0; e <= epochs; e++) {
        if (e > 0 && mx_data_iter_reset(it) != MX_OK) break;
        double t0 = mx_time_seconds(), c0 = cpu_seconds(), samples = 0;
        for (;;) {
            mx_data_batch b;
            bool has = false;
            if (mx_data_iter_next(it, &b, &has) != MX_OK) {
                fprintf(stderr, "mxbench-io: %s\n", mx_last_error());
                mx_data_iter_free(it);
                mx_runtime_free(rt);
                return -1;
            }
            if (!has) break;
            const mx_shape *sh = mx_ndarray_shape(b.data);
            const float *d = mx_ndarray_data(b.data);
            int64_t per = mx_shape_size(sh) / sh->dims[0];
            for (int64_t i = 0; i < sh->dims[0]; i++) *checksum += d[i * per + per / 2];
            samples += (double)(sh->dims[0] - b.pad);
        }
        double rate = samples / (mx_time_seconds() - t0), c = (cpu_seconds() - c0) / samples;
        if (e > 0 && rate > best) best = rate;
        if (e > 0 && c < *cpu) *cpu = c;
    }
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    return best;
}

int main(int argc, char **argv)
{
    const char *rec = NULL, *shape = "1,24,24", *batch = "128", *label = NULL;
    int thread_list[16] = {1, 2}, n_threads = 2, rounds = 3, epochs = 2, yuv = 0;
    const char *xkeys[MAX_KV], *xvalues[MAX_KV];
    int nx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--rec") && v) {
            rec = v;
            i++;
        } else if (!strcmp(a, "--data-shape") && v) {
            shape = v;
            i++;
        } else if (!strcmp(a, "--batch") && v) {
            batch = v;
            i++;
        } else if (!strcmp(a, "--yuv")) {
            yuv = 1;
        } else if (!strcmp(a, "--label") && v) {
            label = v;
            i++;
        } else if (!strcmp(a, "--rounds") && v) {
            rounds = atoi(v);
            i++;
        } else if (!strcmp(a, "--epochs") && v) {
            epochs = atoi(v);
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            n_threads = 0;
            char buf[128];
            snprintf(buf, sizeof(buf), "%s", v);
            for (char *t = strtok(buf, ","); t && n_threads < 16; t = strtok(NULL, ",")) thread_list[n_threads++] = atoi(t);
            i++;
        } else if (strchr(a, '=') && a[0] != '-' && nx < MAX_KV) {
            char *kv = strdup(a);
            if (!kv) return 1;
            char *eq = strchr(kv, '=');
            *eq = '\0';
            xkeys[nx] = kv;
            xvalues[nx++] = eq + 1;
        } else {
            fprintf(stderr, "mxbench-io: bad argument '%s'\n", a);
            return usage();
        }
    }
    if (!rec || rounds < 1 || epochs < 1 || n_threads < 1) return usage();
    for (int i = 0; i < n_threads; i++)
        if (thread_list[i] < 1 || thread_list[i] > 64) return usage();
    int gray = shape[0] == '1';
    if (gray) yuv = 0;

    payloads p;
    if (load_payloads(rec, &p) != 0) return 1;

    /* the iterator's parameters: defaults, then the caller's */
    const char *keys[MAX_KV + 16], *values[MAX_KV + 16];
    int n = 0;
    static const char *const defaults[][2] = {
        {"rand_crop", "1"}, {"rand_mirror", "1"}, {"mean_r", "123.68"}, {"mean_g", "116.779"}, {"mean_b", "103.939"},
        {"std_r", "58.393"}, {"std_g", "57.12"},   {"std_b", "57.375"},  {"round_batch", "0"},
    };
    keys[n] = "path_imgrec", values[n++] = rec;
    keys[n] = "data_shape", values[n++] = shape;
    keys[n] = "batch_size", values[n++] = batch;
    int threads_at = n;
    keys[n] = "preprocess_threads", values[n++] = "1";
    for (size_t d = 0; d < sizeof(defaults) / sizeof(defaults[0]); d++) {
        bool given = false;
        for (int x = 0; x < nx; x++) given |= !strcmp(xkeys[x], defaults[d][0]);
        if (!given) keys[n] = defaults[d][0], values[n++] = defaults[d][1];
    }
    for (int x = 0; x < nx; x++) keys[n] = xkeys[x], values[n++] = xvalues[x];

    char params[1024] = "";
    for (int i = 0; i < n; i++)
        if (i != threads_at && strcmp(keys[i], "path_imgrec"))
            snprintf(params + strlen(params), sizeof(params) - strlen(params), "%s%s=%s", params[0] ? " " : "",
                     keys[i], values[i]);
    printf("%s: %zu images; iterator: %s\n\n", label ? label : rec, p.n, params);
    int64_t dims[3] = {0, 0, 0};
    if (sscanf(shape, "%" SCNd64 ",%" SCNd64 ",%" SCNd64, &dims[0], &dims[1], &dims[2]) != 3) return usage();
    int64_t sample = dims[0] * dims[1] * dims[2], batch_n = atoll(batch);
    printf("| threads | raw TurboJPEG decode (img/s) | iterator (img/s) | iterator / raw | raw CPU (us/img) | iterator CPU "
           "(us/img) | raw CPU / iterator CPU | float32 output writes alone, 1 thread (img/s) |%s\n",
           yuv ? " raw decode to YCbCr planes (img/s) |" : "");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|%s\n", yuv ? "---:|" : "");
    double checksum = 0;
    for (int t = 0; t < n_threads; t++) {
        char tbuf[16];
        snprintf(tbuf, sizeof(tbuf), "%d", thread_list[t]);
        values[threads_at] = tbuf;
        double best_raw = 0, best_iter = 0, best_store = 0, best_yuv = 0, cpu_raw = 1e30, cpu_iter = 1e30;
        for (int r = 0; r < rounds; r++) {
            for (int e = 0; e < epochs; e++) { /* as many passes as the iterator's timed epochs */
                double c, x = raw_rate(&p, thread_list[t], gray, 0, &c);
                if (x < 0) return 1;
                if (x > best_raw) best_raw = x;
                if (c < cpu_raw) cpu_raw = c;
            }
            for (int e = 0; yuv && e < epochs; e++) {
                double c, x = raw_rate(&p, thread_list[t], gray, 1, &c);
                if (x < 0) return 1;
                if (x > best_yuv) best_yuv = x;
            }
            double c, b = iter_rate(keys, values, n, epochs, &checksum, &c);
            if (b < 0) return 1;
            if (b > best_iter) best_iter = b;
            if (c < cpu_iter) cpu_iter = c;
            double w = store_rate(sample, batch_n, p.n, 1);
            if (w < 0) return 1;
            if (w > best_store) best_store = w;
        }
        printf("| %d | %.0f | %.0f | %.0f%% | %.2f | %.2f | %.0f%% | %.0f |", thread_list[t], best_raw, best_iter,
               100.0 * best_iter / best_raw, cpu_raw * 1e6, cpu_iter * 1e6, 100.0 * cpu_raw / cpu_iter, best_store);
        if (yuv) printf(" %.0f |", best_yuv);
        printf("\n");
        fflush(stdout);
        fprintf(stderr,
                "{\"data\": \"%s\", \"threads\": %d, \"raw_img_s\": %.0f, \"iter_img_s\": %.0f, \"ratio\": %.3f, "
                "\"raw_cpu_us\": %.3f, \"iter_cpu_us\": %.3f}\n",
                label ? label : rec, thread_list[t], best_raw, best_iter, best_iter / best_raw, cpu_raw * 1e6,
                cpu_iter * 1e6);
    }
    fprintf(stderr, "(checksum %.3f)\n", checksum);
    for (size_t i = 0; i < p.n; i++) free(p.data[i]);
    free(p.data);
    free(p.size);
    free(p.width);
    free(p.height);
    for (int x = 0; x < nx; x++) free((char *)xkeys[x]);
    return 0;
}
