/* test_checkpoint.c - MXNet checkpoint layout, newest epoch, directories. */
#include "checkpoint/checkpoint.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/mx-ckpt-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tree(void)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(save_and_load_split_arg_and_aux)
{
    make_tmpdir();
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    uint32_t d, bn;
    ck_assert_int_eq(mx_graph_add_variable(g, "data", NULL, 0, &d), MX_OK);
    mx_entry x = {d, 0};
    ck_assert_int_eq(mx_graph_add_op(g, "BatchNorm", "bn", NULL, NULL, 0, &x, 1, NULL, 0, &bn), MX_OK);
    mx_entry h = {bn, 0};
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    mx_ndarray *a[4];
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), &a[i]), MX_OK);
        ck_assert_int_eq(mx_nd_fill(a[i], i + 1), MX_OK);
    }
    const char *arg_names[] = {"bn_gamma", "bn_beta"}, *aux_names[] = {"bn_moving_mean", "bn_moving_var"};
    char prefix[400];
    snprintf(prefix, sizeof(prefix), "%s/sub/dir/net", tmpdir);
    ck_assert_int_eq(mx_checkpoint_latest_epoch(prefix), -1);
    ck_assert_int_eq(mx_checkpoint_prepare_dir(prefix), MX_OK);
    mx_named_arrays args = {2, arg_names, a}, aux = {2, aux_names, a + 2};
    ck_assert_int_eq(mx_checkpoint_save(prefix, 3, g, args, aux), MX_OK);
    ck_assert_int_eq(mx_checkpoint_save(prefix, 12, NULL, args, aux), MX_OK);
    ck_assert_int_eq(mx_checkpoint_latest_epoch(prefix), 12);
    char path[512];
    ck_assert_str_eq(mx_checkpoint_params_path(prefix, 3, path, sizeof(path)) + strlen(tmpdir), "/sub/dir/net-0003.params");
    ck_assert_int_eq(access(path, R_OK), 0);
    snprintf(path, sizeof(path), "%s-symbol.json", prefix);
    mx_graph *back;
    ck_assert_int_eq(mx_graph_load_json(path, &back), MX_OK);
    mx_graph_free(back);
    mx_ndarray_list la, lx;
    ck_assert_int_eq(mx_checkpoint_load(rt, prefix, 3, &la, &lx), MX_OK);
    ck_assert_int_eq(la.count, 2);
    ck_assert_int_eq(lx.count, 2);
    ck_assert_str_eq(la.names[0], "bn_gamma");
    ck_assert_str_eq(lx.names[1], "bn_moving_var");
    float v[3];
    ck_assert_int_eq(mx_ndarray_to_host(lx.arrays[1], v, sizeof(v)), MX_OK);
    ck_assert_float_eq(v[2], 4.0f);
    mx_ndarray_list_free(&la);
    mx_ndarray_list_free(&lx);
    ck_assert_int_eq(mx_checkpoint_load(rt, prefix, 7, &la, &lx), MX_ERR_IO);
    for (int i = 0; i < 4; i++) mx_ndarray_free(a[i]);
    mx_graph_free(g);
    mx_runtime_free(rt);
    remove_tree();
}
END_TEST

START_TEST(mxnet_written_checkpoint_loads)
{
    const char *dir = getenv("MX_SHARED_DIR");
    char prefix[512];
    snprintf(prefix, sizeof(prefix), "%s/fixtures/mxnet/sagemaker-mnist-mlp/model", dir && *dir ? dir : "../shared");
    ck_assert_int_eq(mx_checkpoint_latest_epoch(prefix), 0);
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_ndarray_list args, aux;
    ck_assert_msg(mx_checkpoint_load(rt, prefix, 0, &args, &aux) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(args.count, 6);
    ck_assert_int_eq(aux.count, 0);
    ck_assert_str_eq(args.names[0], "fullyconnected0_weight");
    mx_ndarray_list_free(&args);
    mx_ndarray_list_free(&aux);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(bad_names_and_directories_are_errors)
{
    make_tmpdir();
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_ndarray *a;
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2), MX_FLOAT32, mx_cpu(), &a), MX_OK);
    ck_assert_int_eq(mx_nd_fill(a, 0), MX_OK);
    char path[512], prefix[400];
    snprintf(prefix, sizeof(prefix), "%s/bad", tmpdir);
    const char *names[2] = {"opt:w", "arg:w"};
    mx_ndarray *two[2] = {a, a};
    ck_assert_int_eq(mx_ndarray_save(mx_checkpoint_params_path(prefix, 1, path, sizeof(path)), two, names, 1), MX_OK);
    mx_ndarray_list x, y;
    ck_assert_int_eq(mx_checkpoint_load(rt, prefix, 1, &x, &y), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "neither arg: nor aux:"));
    const char *dup[2] = {"arg:w", "w"};
    ck_assert_int_eq(mx_ndarray_save(mx_checkpoint_params_path(prefix, 2, path, sizeof(path)), two, dup, 2), MX_OK);
    ck_assert_int_eq(mx_checkpoint_load(rt, prefix, 2, &x, &y), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "'w' appears twice"));
    /* A directory under a regular file cannot exist. */
    snprintf(prefix, sizeof(prefix), "%s/bad-0001.params/models/net", tmpdir);
    ck_assert_int_eq(mx_checkpoint_prepare_dir(prefix), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "cannot create directory"));
    mx_ndarray_free(a);
    mx_runtime_free(rt);
    remove_tree();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, save_and_load_split_arg_and_aux);
    tcase_add_test(tc, mxnet_written_checkpoint_loads);
    tcase_add_test(tc, bad_names_and_directories_are_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
