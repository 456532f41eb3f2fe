/*
 * section.c - a config's [optimizer] section, read by the tables of the
 * optimizer and the schedule it names (optimizer.h, "config"). The config
 * keeps no copy of these keys: what the tables parse is what
 * mx_optimizer_create_spec hands to the optimizer and its schedule.
 */
#include "optimizer/optimizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which tables have `key` among the optimizers (bit i: mx_optimizer_name_at(i))
 * and among the schedules (bit i: mx_lr_scheduler_name_at(i)). */
static void users_of(const char *key, unsigned *opt_bits, unsigned *sched_bits)
{
    *opt_bits = *sched_bits = 0;
    const mx_param_desc *t;
    int n;
    for (int i = 0; mx_optimizer_name_at(i); i++) {
        if (mx_optimizer_param_table(mx_optimizer_name_at(i), &t, &n) != MX_OK) continue;
        if (mx_params_find(t, n, key) || (!strcmp(key, "lr") && mx_params_find(t, n, "learning_rate")))
            *opt_bits |= 1u << i;
    }
    for (int i = 0; mx_lr_scheduler_name_at(i); i++) {
        if (mx_lr_scheduler_epoch_table(mx_lr_scheduler_name_at(i), &t, &n) != MX_OK) continue;
        if (mx_params_find(t, n, key)) *sched_bits |= 1u << i;
    }
}

/* "sgd, nag" for the set bits of a name list. */
static const char *names_of(unsigned bits, const char *(*name_at)(int), char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; name_at(i) && used < size; i++)
        if (bits & (1u << i)) used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", name_at(i));
    return buf;
}

/* A selector key (type, lr_scheduler): its value among names, or def. */
static mx_status selector(const mx_param_input *in, const char *key, const char *(*name_at)(int), const char *def,
                          const char **out)
{
    int i = mx_param_input_find(in, key);
    *out = def;
    if (i < 0) return MX_OK;
    const char *names[64];
    int n = 0;
    while (n < 64 && name_at(n)) names[n] = name_at(n), n++;
    char v[128];
    snprintf(v, sizeof(v), "%s", in->values[i]);
    for (int k = 0; k < n; k++)
        if (!strcmp(v, names[k])) {
            *out = names[k];
            return MX_OK;
        }
    const char *near = mx_suggest(v, names, n);
    char list[256];
    names_of((1u << n) - 1, name_at, list, sizeof(list));
    if (near) return mx_params_blame(in, "optimizer", key, MX_ERR_INVALID, "bad value '%s' (did you mean '%s'?)", v, near);
    return mx_params_blame(in, "optimizer", key, MX_ERR_INVALID, "bad value '%s' (choices: %s)", v, list);
}

/* The message for a key no chosen table has. */
static mx_status misplaced(const mx_param_input *in, int i, const char *type, const char *sched,
                           const mx_param_desc *ot, int on, const mx_param_desc *st, int sn)
{
    const char *key = in->keys[i];
    unsigned ob, sb;
    users_of(key, &ob, &sb);
    char list[256];
    if (ob) {
        if (sb)
            return mx_params_blame(in, "optimizer", key, MX_ERR_INVALID, "not used with type = %s, lr_scheduler = %s",
                                   type, sched);
        return mx_params_blame(in, "optimizer", key, MX_ERR_INVALID, "not used with type = %s (only with %s)", type,
                               names_of(ob, mx_optimizer_name_at, list, sizeof(list)));
    }
    if (sb)
        return mx_params_blame(in, "optimizer", key, MX_ERR_INVALID, "not used with lr_scheduler = %s (only with %s)",
                               sched, names_of(sb, mx_lr_scheduler_name_at, list, sizeof(list)));
    /* Unknown everywhere: suggest among the keys that apply, else any. */
    const char *cands[128];
    int n = 0;
    cands[n++] = "type";
    cands[n++] = "lr_scheduler";
    cands[n++] = "lr";
    for (int k = 0; k < on && n < 128; k++) cands[n++] = ot[k].name;
    for (int k = 0; k < sn && n < 128; k++) cands[n++] = st[k].name;
    const char *near = mx_suggest(key, cands, n);
    if (!near) {
        const mx_param_desc *t;
        int tn;
        n = 0;
        for (int o = 0; mx_lr_scheduler_name_at(o); o++)
            if (mx_lr_scheduler_epoch_table(mx_lr_scheduler_name_at(o), &t, &tn) == MX_OK)
                for (int k = 0; k < tn && n < 128; k++) cands[n++] = t[k].name;
        for (int o = 0; mx_optimizer_name_at(o); o++)
            if (mx_optimizer_param_table(mx_optimizer_name_at(o), &t, &tn) == MX_OK)
                for (int k = 0; k < tn && n < 128; k++) cands[n++] = t[k].name;
        near = mx_suggest(key, cands, n);
    }
    if (near) return mx_params_blame(in, "optimizer", key, MX_ERR_INVALID, "unknown key (did you mean '%s'?)", near);
    return mx_params_blame(in, "optimizer", key, MX_ERR_INVALID, "unknown key");
}

/* "30, 60" -> increasing positive epochs. */
static mx_status parse_steps(const mx_param_input *in, mx_optimizer_spec *out)
{
    const char *text = out->schedule.lr_step_epochs;
    const char *p = text;
    int n = 0;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || v > 1000000000LL)
            return mx_params_blame(in, "optimizer", "lr_step_epochs", MX_ERR_INVALID,
                                   "bad value '%s': expected positive epoch numbers such as 30,60", text);
        if (n == MX_LR_MAX_STEPS)
            return mx_params_blame(in, "optimizer", "lr_step_epochs", MX_ERR_INVALID, "more than %d steps",
                                   MX_LR_MAX_STEPS);
        if (n && v <= out->step_epochs[n - 1])
            return mx_params_blame(in, "optimizer", "lr_step_epochs", MX_ERR_INVALID, "epochs must increase");
        out->step_epochs[n++] = v;
        p = end;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == ',') {
            p++;
            while (*p == ' ' || *p == '\t') p++;
            if (!*p)
                return mx_params_blame(in, "optimizer", "lr_step_epochs", MX_ERR_INVALID,
                                       "bad value '%s': expected positive epoch numbers such as 30,60", text);
        } else if (*p) {
            return mx_params_blame(in, "optimizer", "lr_step_epochs", MX_ERR_INVALID,
                                   "bad value '%s': expected positive epoch numbers such as 30,60", text);
        }
    }
    if (!n)
        return mx_params_blame(in, "optimizer", "lr_step_epochs", MX_ERR_INVALID,
                               "bad value '': expected positive epoch numbers such as 30,60");
    if (!strcmp(out->lr_scheduler, "factor") && n != 1)
        return mx_params_blame(in, "optimizer", "lr_step_epochs", MX_ERR_INVALID,
                               "lr_scheduler = factor takes one period in epochs");
    out->n_step_epochs = n;
    return MX_OK;
}

mx_status mx_optimizer_spec_parse(const mx_param_input *in, mx_optimizer_spec *out)
{
    memset(out, 0, sizeof(*out));
    const char *type, *sched;
    MX_TRY(selector(in, "type", mx_optimizer_name_at, "sgd", &type));
    MX_TRY(selector(in, "lr_scheduler", mx_lr_scheduler_name_at, "none", &sched));
    const mx_param_desc *ot, *st;
    int on, sn;
    MX_TRY(mx_optimizer_param_table(type, &ot, &on));
    MX_TRY(mx_lr_scheduler_epoch_table(sched, &st, &sn));
    int n = in ? in->n : 0;
    bool *to_opt = mx_calloc((size_t)n + 1, sizeof(bool)), *to_sched = mx_calloc((size_t)n + 1, sizeof(bool));
    bool *given = mx_calloc((size_t)on + 1, sizeof(bool));
    mx_status s = to_opt && to_sched && given ? MX_OK : mx_last_status();
    for (int i = 0; i < n && s == MX_OK; i++) {
        const char *key = in->keys[i];
        if (!strcmp(key, "type") || !strcmp(key, "lr_scheduler")) continue;
        if (mx_params_find(ot, on, key) || !strcmp(key, "lr")) to_opt[i] = true;
        else if (mx_params_find(st, sn, key)) to_sched[i] = true;
        else s = misplaced(in, i, type, sched, ot, on, st, sn);
    }
    char owner[96];
    snprintf(owner, sizeof(owner), in && in->where ? "type = %s" : "%s", type);
    mx_param_subset sub = {0};
    if (s == MX_OK) s = mx_param_input_subset(in, to_opt, &sub);
    for (int i = 0; s == MX_OK && i < sub.in.n; i++)
        if (!strcmp(sub.keys[i], "lr")) sub.keys[i] = "learning_rate";
    if (s == MX_OK) s = mx_params_parse_input(owner, ot, on, sizeof(out->params), &sub.in, &out->params, given);
    mx_param_subset_free(&sub);
    if (s == MX_OK) {
        const mx_param_desc *d = mx_params_find(ot, on, "rescale_grad");
        out->rescale_grad_given = d && given[d - ot];
        out->name = type;
        s = mx_optimizer_check(type, &out->params);
        if (s != MX_OK) s = mx_params_blame(in, "optimizer", "type", s, "%s", mx_last_error());
    }
    if (s == MX_OK && strcmp(sched, "none")) {
        out->lr_scheduler = sched;
        snprintf(owner, sizeof(owner), in && in->where ? "lr_scheduler = %s" : "%s", sched);
        s = mx_param_input_subset(in, to_sched, &sub);
        if (s == MX_OK) s = mx_params_parse_input(owner, st, sn, sizeof(out->schedule), &sub.in, &out->schedule, NULL);
        mx_param_subset_free(&sub);
        if (s == MX_OK && mx_params_find(st, sn, "lr_step_epochs")) s = parse_steps(in, out);
        double lr = out->params.learning_rate;
        if (s == MX_OK && out->schedule.warmup_begin_lr > lr)
            s = mx_params_blame(in, "optimizer", "warmup_begin_lr", MX_ERR_INVALID, "must not exceed lr (%g)", lr);
        if (s == MX_OK && mx_params_find(st, sn, "final_lr") && out->schedule.final_lr > lr)
            s = mx_params_blame(in, "optimizer", "final_lr", MX_ERR_INVALID, "must not exceed lr (%g)", lr);
    }
    free(to_opt);
    free(to_sched);
    free(given);
    return s;
}

mx_status mx_optimizer_create_spec(mx_runtime *rt, const mx_optimizer_spec *spec, const mx_optimizer_run *run,
                                   mx_optimizer **out)
{
    *out = NULL;
    if (run->samples_per_update < 1)
        return MX_ERROR(MX_ERR_INVALID, "optimizer: samples per update must be at least 1, got %lld",
                        (long long)run->samples_per_update);
    mx_optimizer_params p = spec->params;
    if (!spec->rescale_grad_given) p.rescale_grad = 1.0 / (double)run->samples_per_update; /* as MXNet's Module */
    MX_TRY(mx_optimizer_create(rt, spec->name, &p, out));
    if (!spec->lr_scheduler) return MX_OK;
    const mx_lr_epoch_keys *k = &spec->schedule;
    mx_lr_epoch_schedule e = {
        .kind = spec->lr_scheduler, .base_lr = p.learning_rate, .factor = k->lr_factor,
        .step_epochs = spec->step_epochs, .n_step_epochs = spec->n_step_epochs, .num_epoch = run->num_epoch,
        .final_lr = k->final_lr, .pwr = k->pwr, .warmup_epochs = k->warmup_epochs,
        .warmup_begin_lr = k->warmup_begin_lr, .warmup_mode = k->warmup_mode, .stop_factor_lr = k->stop_factor_lr,
        .updates_per_epoch = run->updates_per_epoch > 0 ? run->updates_per_epoch : 1,
    };
    mx_lr_scheduler *sched;
    mx_status s = mx_lr_scheduler_create_epochs(&e, &sched);
    if (s == MX_OK) s = mx_optimizer_set_lr_scheduler(*out, sched);
    if (s != MX_OK) {
        mx_optimizer_free(*out);
        *out = NULL;
    }
    return s;
}
