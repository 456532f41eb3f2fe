/*
 * tooltest.h - what the suites that run the tools (mxtrain, mxpredict)
 * share: a scratch directory per test, reading a file whole, and running a
 * tool with its output captured.
 */
#ifndef MX_TEST_TOOLTEST_H
#define MX_TEST_TOOLTEST_H

#include <stdbool.h>
#include <stddef.h>

/* True in the sanitizer builds (ASan + UBSan, TSan): suites that train
 * then use smaller subsets there, since those builds look for memory errors
 * and races; the plain build makes the full-size claims. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TOOL_SANITIZED true
#else
#define TOOL_SANITIZED false
#endif

/* A new directory /tmp/STEM-XXXXXX into dir (size bytes). */
void tool_tmp_make(char *dir, size_t size, const char *stem);
/* rm -rf of that directory. */
void tool_tmp_remove(const char *dir);
/* A file's bytes, NUL-terminated, malloc'ed; *len (may be NULL) gets the
 * size. Fails the test when the file cannot be read. */
char *tool_slurp(const char *path, size_t *len);
/* Runs `prog args` (a shell word list) with stdin from stdin_path (NULL:
 * /dev/null); stdout and stderr go through files in dir. out and err (each
 * may be NULL) get them, malloc'ed. Returns the exit status (the test fails
 * when the tool did not exit normally). */
int tool_run(const char *prog, const char *args, const char *dir, const char *stdin_path, char **out, char **err);

/* For suites whose children run Open MPI under ASan: their leaks are
 * suppressed by library name (tests/lsan-openmpi.supp), which needs whole
 * stacks, so ASAN_OPTIONS (when set) gains fast_unwind_on_malloc=0 for
 * every process started from here on. */
void tool_asan_whole_stacks(void);

#endif /* MX_TEST_TOOLTEST_H */
