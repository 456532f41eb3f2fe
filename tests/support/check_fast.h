/*
 * check_fast.h - included before every test file (Makefile: -include).
 *
 * Check's ck_assert_msg records the location of every assertion that
 * passes (_mark_point: a write(2) to the runner's pipe or temporary file),
 * so a loop asserting on each element of a tensor spent most of its time in
 * the kernel: 84 of 96 s of test_op_pooling. Passing assertions here cost a
 * comparison; a failure reports exactly as before. A test that crashes is
 * reported without the last passed assertion's line (ASan and the core dump
 * give the stack).
 */
#ifndef MX_TEST_CHECK_FAST_H
#define MX_TEST_CHECK_FAST_H

#include <check.h>

#undef ck_assert_msg
#define ck_assert_msg(expr, ...)                                                                                       \
    ((expr) ? (void)0 : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ##__VA_ARGS__))

#endif
