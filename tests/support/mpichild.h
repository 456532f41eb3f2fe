/*
 * mpichild.h - failing a check inside a rank that a suite started under
 * mpirun: one line "CHILD-FAIL rank R (file:line): why" on stdout (the
 * parent test reads the ranks' output), then the whole job is aborted so
 * no other rank waits forever on it. Header-only, for the suites that link
 * the communication layer (test_comm.c, test_dist_async.c): a support
 * object would pull MPI into every test.
 */
#ifndef MX_TEST_MPICHILD_H
#define MX_TEST_MPICHILD_H

#include "comm/comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static mx_comm *child_comm; /* set once created: what a failure aborts */
static int child_rank = -1;

static void child_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
static void child_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    printf("CHILD-FAIL rank %d (%s:%d): %s\n", child_rank, file, line, msg);
    fflush(stdout);
    if (child_comm) mx_comm_abort(child_comm, 1);
    exit(1);
}

#define CHILD_CHECK(cond, ...)                                     \
    do {                                                           \
        if (!(cond)) child_fail(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define CHILD_OK(call) CHILD_CHECK((call) == MX_OK, "%s: %s", #call, mx_last_error())

#endif /* MX_TEST_MPICHILD_H */
