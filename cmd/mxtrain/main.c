/* mxtrain - train a network from a config file (../shared/spec/cli.md). */
#include "config/config.h"
#include "train/trainer.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: mxtrain CONFIG [SECTION.KEY=VALUE ...] [options]\n"
    "\n"
    "Trains the config's network on its [train] iterator, evaluates [val]\n"
    "after every epoch and saves MXNet-compatible checkpoints to\n"
    "fit.model_prefix (PREFIX-symbol.json, PREFIX-NNNN.params, .states).\n"
    "\n"
    "options:\n"
    "  --resume             continue from the newest checkpoint (or fit.load_epoch=N)\n"
    "  --dry-run            print the layer table and the planned memory, then exit\n"
    "  --time N             time every layer's forward and backward over N batches\n"
    "  --metrics-log FILE   append one JSON object per log window and epoch to FILE\n"
    "  -h, --help           this text\n"
    "\n"
    "SIGINT, SIGTERM or SIGUSR1 finishes the batch in flight, saves\n"
    "PREFIX-interrupted.params (weights MXNet loads, plus the training state) and\n"
    "exits 128 + the signal (130, 143, 138); --resume continues from it exactly.\n"
    "A second signal exits at once. Under mpirun send SIGUSR1 to mpirun (it kills\n"
    "the job on SIGINT/SIGTERM): every rank stops at the same step.\n"
    "\n"
    "exit status: 0 trained, 1 failed while training, 2 bad usage or config,\n"
    "130 / 143 / 138 stopped by SIGINT / SIGTERM / SIGUSR1\n";

/* The signal that asked for a stop (0: none). The library polls it. */
static volatile sig_atomic_t stop_signal;
/* Signals received: handlers may run at once on two threads, so the count
 * (a lock-free atomic, safe in a handler) decides which one is second. */
static atomic_int signals_seen;

static void on_stop_signal(int sig)
{
    if (atomic_fetch_add(&signals_seen, 1) > 0) { /* the second one: no more waiting */
        static const char msg[] = "mxtrain: second signal: exiting now, without a checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)w;
        _exit(128 + sig);
    }
    stop_signal = sig;
}

static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT); /* one handler at a time on a thread */
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* mpirun kills the job on SIGINT/SIGTERM but forwards SIGUSR1 to every
     * rank: under mpirun, SIGUSR1 to mpirun is the graceful stop. */
    sigaction(SIGUSR1, &sa, NULL);
}

/* On a terminal a progress bar sits on the last line; log lines clear it
 * and print above it. In a pipeline only the plain log lines appear. */
typedef struct progress_state {
    bool bar_shown;
    double started;
    int epoch;
} progress_state;

static void print_line(void *user, const char *line)
{
    progress_state *ps = user;
    if (ps->bar_shown) fputs("\r\033[K", stderr);
    ps->bar_shown = false;
    fprintf(stderr, "%s\n", line);
}

static void draw_bar(void *user, int epoch, int64_t batch, int64_t per_epoch)
{
    progress_state *ps = user;
    double now = mx_time_seconds();
    if (epoch != ps->epoch || batch == 1) {
        ps->epoch = epoch;
        ps->started = now;
    }
    if (per_epoch <= 0 || (batch % 8 != 0 && batch != per_epoch)) return;
    int width = 30, filled = (int)(width * batch / per_epoch);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[width] = '\0';
    double elapsed = now - ps->started, eta = batch ? elapsed / (double)batch * (double)(per_epoch - batch) : 0;
    fprintf(stderr, "\r\033[KEpoch[%d] [%s] %lld/%lld eta %.0fs", epoch, bar, (long long)batch, (long long)per_epoch, eta);
    fflush(stderr);
    ps->bar_shown = true;
}

static int fail(int code, const char *what)
{
    fprintf(stderr, "mxtrain: %s\n", what);
    return code;
}

/* An error line, naming the rank and host under mpirun. */
static int report(int code, const char *who, const char *what)
{
    if (who[0]) fprintf(stderr, "mxtrain: %s: %s\n", who, what);
    else fprintf(stderr, "mxtrain: %s\n", what);
    return code;
}

/* Every rank must train the same net the same way: the config file's bytes
 * and the overrides are compared between the ranks at start. */
static mx_status check_same_config(mx_comm *comm, const char *path, const char *const *overrides, int n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return MX_ERROR(MX_ERR_IO, "%s: cannot open", path);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    fclose(f);
    for (int i = 0; buf && i < n; i++) {
        size_t l = strlen(overrides[i]) + 1;
        if (len + l > cap) {
            char *grown = realloc(buf, cap = 2 * (len + l));
            if (!grown) free(buf);
            buf = grown;
        }
        if (buf) memcpy(buf + len, overrides[i], l), len += l;
    }
    if (!buf) return MX_ERROR(MX_ERR_NOMEM, "out of memory reading %s", path);
    mx_status s = mx_comm_check_same(comm, buf, len, "the config (file and overrides)");
    free(buf);
    return s;
}

int main(int argc, char **argv)
{
    const char *config_path = NULL, *metrics_log = NULL;
    const char **overrides = calloc((size_t)argc + 1, sizeof(char *));
    int n_overrides = 0, time_batches = 0;
    bool dry_run = false, resume = false;
    if (!overrides) return fail(1, "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            free(overrides);
            return 0;
        } else if (!strcmp(a, "--dry-run")) {
            dry_run = true;
        } else if (!strcmp(a, "--resume")) {
            resume = true;
        } else if (!strcmp(a, "--time") || !strcmp(a, "--metrics-log")) {
            if (i + 1 >= argc) {
                free(overrides);
                fprintf(stderr, "mxtrain: %s needs a value (see --help)\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--metrics-log")) {
                metrics_log = v;
            } else {
                char *end;
                long n = strtol(v, &end, 10);
                if (*end || n < 1 || n > 1000000) {
                    free(overrides);
                    fprintf(stderr, "mxtrain: --time needs a number of batches >= 1, got '%s'\n", v);
                    return 2;
                }
                time_batches = (int)n;
            }
        } else if (a[0] == '-' && a[1]) {
            free(overrides);
            fprintf(stderr, "mxtrain: unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (!config_path) {
            config_path = a;
        } else if (mx_config_is_override(a)) {
            overrides[n_overrides++] = a;
        } else {
            free(overrides);
            fprintf(stderr, "mxtrain: '%s' is neither an option nor SECTION.KEY=VALUE (see --help)\n", a);
            return 2;
        }
    }
    if (!config_path) {
        free(overrides);
        fprintf(stderr, "mxtrain: no config file given (see --help)\n");
        return 2;
    }
    mx_config *cfg;
    if (mx_config_load(config_path, overrides, n_overrides, &cfg) != MX_OK) {
        free(overrides);
        return fail(2, mx_last_error());
    }
    mx_train_settings *settings;
    if (mx_train_settings_load(cfg, &settings) != MX_OK) {
        free(overrides);
        mx_config_free(cfg);
        return fail(2, mx_last_error());
    }
    /* Under mpirun: one communicator for the job, the same config on every
     * rank, one log (rank 0), errors from every rank with its rank and host,
     * and a failure on any rank ends the whole job. */
    mx_comm *comm = NULL;
    char who[512] = "";
    if (mx_comm_launched(NULL)) {
        /* Before MPI starts (it reads its parameters then) and before any
         * thread: Rabenseifner's non-blocking allreduce unless the user
         * chose (lib/comm/comm.h says why). */
        setenv(MX_COMM_IALLREDUCE_ENV, MX_COMM_IALLREDUCE_RABENSEIFNER, 0);
        mx_comm_config cc = mx_comm_config_default();
        cc.stall_timeout_s = settings->fit.stall_timeout;
        int code = 0;
        if (mx_comm_create(&cc, &comm) != MX_OK) code = fail(1, mx_last_error());
        if (!code) mx_comm_rank_str(comm, mx_comm_rank(comm), who, sizeof(who));
        if (!code && check_same_config(comm, config_path, overrides, n_overrides) != MX_OK) {
            fprintf(stderr, "mxtrain: %s: %s\n", who, mx_last_error());
            code = 2;
        }
        if (!code && mx_train_settings_for_rank(settings, mx_comm_local_rank(comm), mx_comm_local_size(comm),
                                                mx_comm_hostname(comm, mx_comm_rank(comm))) != MX_OK) {
            fprintf(stderr, "mxtrain: %s: %s\n", who, mx_last_error());
            code = 2;
        }
        if (code) {
            free(overrides);
            mx_train_settings_free(settings);
            mx_config_free(cfg);
            if (comm) mx_comm_abort(comm, code);
            return code;
        }
    }
    bool quiet = comm && mx_comm_rank(comm) != 0;
    progress_state ps = {.epoch = -1};
    mx_train_options opt = {.log = quiet ? NULL : print_line, .log_user = &ps, .resume = resume,
                            .metrics_log = quiet ? NULL : metrics_log, .time_batches = time_batches,
                            .progress = !quiet && isatty(STDERR_FILENO) ? draw_bar : NULL, .stop = &stop_signal,
                            .comm = comm};
    int code = 0;
    if (dry_run) {
        if (mx_train_dry_run(settings, &opt) != MX_OK) code = report(2, who, mx_last_error());
    } else {
        catch_stop_signals();
        mx_train_result result;
        mx_status s = mx_train_fit(settings, &opt, &result);
        if (ps.bar_shown) fputs("\r\033[K", stderr);
        ps.bar_shown = false;
        /* Problems with the config found while setting up are usage errors. */
        if (s != MX_OK) {
            code = report(s == MX_ERR_INVALID || s == MX_ERR_UNSUPPORTED ? 2 : 1, who, mx_last_error());
        } else if (result.stopped && !quiet) {
            const char *name = stop_signal == SIGTERM ? "SIGTERM" : stop_signal == SIGUSR1 ? "SIGUSR1" : "SIGINT";
            code = 128 + (int)stop_signal;
            if (result.checkpoint[0]) {
                fprintf(stderr, "mxtrain: stopped by %s at epoch %d after batch %lld; saved %s\n", name, result.epoch,
                        (long long)result.batch, result.checkpoint);
                fprintf(stderr, "mxtrain: resume with: %smxtrain %s", comm ? "mpirun ... " : "", config_path);
                for (int i = 0; i < n_overrides; i++) fprintf(stderr, " %s", overrides[i]);
                fprintf(stderr, " --resume\n");
            } else {
                fprintf(stderr,
                        "mxtrain: stopped by %s at epoch %d after batch %lld; nothing saved (no fit.model_prefix)\n",
                        name, result.epoch, (long long)result.batch);
            }
        } else if (result.stopped) {
            code = 128 + (int)stop_signal;
        }
    }
    if (getenv("MX_DEBUG") && code && code < 128) fprintf(stderr, "mxtrain: (at %s)\n", mx_last_error_location());
    free(overrides);
    mx_train_settings_free(settings);
    mx_config_free(cfg);
    if (comm && code && code < 128) mx_comm_abort(comm, code); /* the other ranks must not wait for this one */
    if (comm && mx_comm_free(comm) != MX_OK && !code) code = report(1, who, mx_last_error());
    return code;
}
