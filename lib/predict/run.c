/*
 * run.c - the prediction loop: fill a batch from the inputs while the
 * previous batch runs on the engine, then write that batch's rows.
 * Two host batches alternate, so reading and decoding overlap the network.
 */
#include "predict/predict.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct host_batch {
    float *data;   /* batch_size * sample floats */
    char **ids;    /* batch_size */
    int n;         /* samples filled */
} host_batch;

typedef struct run_state {
    const mx_predict_run_opts *o;
    mx_predict_stats *stats;
    int64_t batch_size, sample;
    int next_input;
    mx_predict_reader *reader;
    const char *reader_path;
} run_state;

static void report(run_state *st, const char *what, const char *why)
{
    st->stats->failed++;
    /* Library messages name the file already: "PATH: why". */
    size_t n = strlen(what);
    if (!strncmp(why, what, n) && !strncmp(why + n, ": ", 2)) why += n + 2;
    if (st->o->on_failure) st->o->on_failure(st->o->user, what, why);
}

static void batch_clear(host_batch *b, int64_t batch_size)
{
    for (int64_t i = 0; i < batch_size; i++) {
        free(b->ids[i]);
        b->ids[i] = NULL;
    }
    b->n = 0;
}

/* Fills b with up to batch_size readable samples (b->n of them; 0 at the
 * end of the inputs); the rest of the batch is zeroed. */
static mx_status fill(run_state *st, host_batch *b)
{
    batch_clear(b, st->batch_size);
    while (b->n < st->batch_size) {
        if (!st->reader) {
            if (st->next_input >= st->o->n_inputs) break;
            const char *path = st->o->inputs[st->next_input++];
            mx_status s = mx_predict_reader_open(path, &st->o->reader, &st->reader);
            if (s == MX_ERR_NOMEM) return s;
            if (s != MX_OK) {
                report(st, path, mx_last_error());
                mx_error_clear();
                continue;
            }
            st->reader_path = path;
        }
        float *slot = b->data + (size_t)b->n * (size_t)st->sample;
        mx_predict_item item;
        mx_status s = mx_predict_reader_next(st->reader, slot, &item);
        if (s == MX_ERR_NOMEM) return s;
        if (s != MX_OK || !item.got) {
            if (s != MX_OK) { /* the rest of this input is lost */
                report(st, st->reader_path, mx_last_error());
                mx_error_clear();
            }
            mx_predict_reader_free(st->reader);
            st->reader = NULL;
            continue;
        }
        if (!item.ok) {
            report(st, item.id, item.why);
            continue;
        }
        b->ids[b->n] = strdup(item.id);
        if (!b->ids[b->n]) return MX_ERROR(MX_ERR_NOMEM, "out of memory");
        b->n++;
    }
    if (b->n < st->batch_size)
        memset(b->data + (size_t)b->n * (size_t)st->sample, 0,
               (size_t)(st->batch_size - b->n) * (size_t)st->sample * sizeof(float));
    return MX_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* CPU seconds used so far by all threads of this process. */
static double process_cpu_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

mx_status mx_predict_run(mx_predictor *p, mx_predict_writer *w, const mx_predict_run_opts *o, mx_predict_stats *stats)
{
    memset(stats, 0, sizeof(*stats));
    double t0 = mx_time_seconds();
    run_state st = {.o = o, .stats = stats, .batch_size = mx_predictor_batch_size(p),
                    .sample = mx_predict_preproc_size(o->reader.preproc)};
    mx_shape os = mx_predictor_output_shape(p);
    int64_t out_size = mx_shape_size(&os);
    host_batch hb[2] = {{0}};
    /* Per-batch network time (push + pull), for the best and the median. */
    int n_times = 0, cap_times = 1 << 16;
    double *times = malloc(sizeof(double) * (size_t)cap_times);
    float *out = malloc(sizeof(float) * (size_t)(st.batch_size * out_size));
    mx_status s = out && times ? MX_OK : MX_ERROR(MX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < 2 && s == MX_OK; i++) {
        hb[i].data = malloc(sizeof(float) * (size_t)(st.batch_size * st.sample));
        hb[i].ids = calloc((size_t)st.batch_size, sizeof(char *));
        if (!hb[i].data || !hb[i].ids) s = MX_ERROR(MX_ERR_NOMEM, "out of memory");
    }
    if (s == MX_OK) s = mx_predict_writer_begin(w);
    int cur = 0;
    if (s == MX_OK) {
        double t = mx_time_seconds();
        s = fill(&st, &hb[cur]);
        stats->read_seconds += mx_time_seconds() - t;
    }
    /* A batch's network time is one window, from the start of its push to
     * the end of its pull, less the reading of the next batch done inside
     * it (overlap). Timing the push and the pull alone missed what ran
     * between them: with every core busy with the network, the main thread
     * that had pushed often got no core back until the network was done,
     * and the pull then found the output ready (MobileNet v1 at batch 1:
     * "best 0.7 ms" for 4 ms of work, and that CPU time went uncounted). */
    double push_at = 0, push_cpu = 0;
    if (s == MX_OK && hb[cur].n > 0) {
        push_at = mx_time_seconds();
        push_cpu = process_cpu_seconds();
        s = mx_predictor_push(p, hb[cur].data);
    }
    while (s == MX_OK && hb[cur].n > 0) {
        /* The next batch is read while this one runs (unless no_overlap). */
        double t, read = 0, read_cpu = 0;
        if (!o->no_overlap) {
            t = mx_time_seconds();
            double c = process_cpu_seconds();
            s = fill(&st, &hb[1 - cur]);
            read = mx_time_seconds() - t;
            read_cpu = process_cpu_seconds() - c;
            stats->read_seconds += read;
        }
        if (s == MX_OK) s = mx_predictor_pull(p, out);
        const double batch = mx_time_seconds() - push_at - read;
        stats->wait_seconds += batch;
        stats->wait_cpu_seconds += process_cpu_seconds() - push_cpu - read_cpu;
        if (s == MX_OK && n_times < cap_times) times[n_times++] = batch;
        for (int i = 0; i < hb[cur].n && s == MX_OK; i++)
            s = mx_predict_writer_row(w, hb[cur].ids[i], out + (size_t)i * (size_t)out_size);
        if (s != MX_OK) break;
        stats->samples += hb[cur].n;
        stats->batches++;
        stats->seconds = mx_time_seconds() - t0;
        if (o->on_progress) o->on_progress(o->user, stats);
        cur = 1 - cur;
        if (o->no_overlap) {
            t = mx_time_seconds();
            s = fill(&st, &hb[cur]);
            stats->read_seconds += mx_time_seconds() - t;
        }
        if (s == MX_OK && hb[cur].n > 0) {
            push_at = mx_time_seconds();
            push_cpu = process_cpu_seconds();
            s = mx_predictor_push(p, hb[cur].data);
        }
    }
    if (s == MX_OK) s = mx_predict_writer_end(w);
    mx_predict_reader_free(st.reader);
    for (int i = 0; i < 2; i++) {
        if (hb[i].ids) batch_clear(&hb[i], st.batch_size);
        free(hb[i].ids);
        free(hb[i].data);
    }
    free(out);
    if (n_times > 0) {
        qsort(times, (size_t)n_times, sizeof(double), cmp_double);
        stats->batch_best_seconds = times[0];
        stats->batch_median_seconds =
            n_times % 2 ? times[n_times / 2] : 0.5 * (times[n_times / 2 - 1] + times[n_times / 2]);
    }
    free(times);
    stats->seconds = mx_time_seconds() - t0;
    return s;
}
