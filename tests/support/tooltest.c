/* tooltest.c - running the tools from the suites (tooltest.h). */
#include "support/tooltest.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

void tool_tmp_make(char *dir, size_t size, const char *stem)
{
    snprintf(dir, size, "/tmp/%s-XXXXXX", stem);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

void tool_tmp_remove(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

char *tool_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "missing %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

int tool_run(const char *prog, const char *args, const char *dir, const char *stdin_path, char **out, char **err)
{
    char cmd[16384], out_path[600], err_path[600];
    snprintf(out_path, sizeof(out_path), "%s/stdout.txt", dir);
    snprintf(err_path, sizeof(err_path), "%s/stderr.txt", dir);
    snprintf(cmd, sizeof(cmd), "%s %s <'%s' >'%s' 2>'%s'", prog, args, stdin_path ? stdin_path : "/dev/null", out_path,
             err_path);
    int st = system(cmd);
    ck_assert_msg(WIFEXITED(st), "%s did not exit normally", prog);
    if (out) *out = tool_slurp(out_path, NULL);
    if (err) *err = tool_slurp(err_path, NULL);
    return WEXITSTATUS(st);
}

void tool_asan_whole_stacks(void)
{
    const char *asan = getenv("ASAN_OPTIONS");
    if (!asan) return;
    char opts[1024];
    snprintf(opts, sizeof(opts), "%s:fast_unwind_on_malloc=0", asan);
    setenv("ASAN_OPTIONS", opts, 1);
}
