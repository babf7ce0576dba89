/* test_resize.c - the bias-table resize round trip through the command
 * line: a window_attention model whose table is PyTorch's source table is
 * resized with `relattn resize`, and the file that comes out must hold
 * PyTorch's resized table (F.interpolate bicubic), load as a model of the
 * new window, and run on windows of the new size.
 *   test_resize FIXTURES_DIR RELATTN_BINARY */
#include "check.h"
#include "relattn.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void round_trip(const char *dir, const char *relattn, const char *name, int w1, int w2,
                       int nh) {
    char path[1024], model[1024], out[1024], cmd[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    ra_st_file *f;
    if (ra_st_open(&f, path) != RA_OK) { CHECK(0, "%s: %s", path, ra_last_error()); return; }
    const ra_st_tensor *src = ra_st_find(f, "src"), *dst = ra_st_find(f, "dst");
    /* a small model around the table: dim 2*nh, random projections */
    const int C = 2 * nh;
    float qkv[3 * 6 * 6 * 6], proj[6 * 6 * 6], bias[3 * 6 * 6] = {0};
    for (int i = 0; i < 3 * C * C; i++) qkv[i] = (float)((i * 37 % 11) - 5) / 10;
    for (int i = 0; i < C * C; i++) proj[i] = (float)((i * 17 % 7) - 3) / 10;
    snprintf(model, sizeof model, "/tmp/relattn_resize_%d.model.safetensors", (int)getpid());
    snprintf(out, sizeof out, "/tmp/relattn_resize_%d.out.safetensors", (int)getpid());
    ra_st_writer *w = ra_st_writer_new();
    char num[32];
    ra_st_writer_meta(w, "arch", "window_attention");
    snprintf(num, sizeof num, "%d", C), ra_st_writer_meta(w, "dim", num);
    snprintf(num, sizeof num, "%d", nh), ra_st_writer_meta(w, "num_heads", num);
    snprintf(num, sizeof num, "%d,%d", w1, w1), ra_st_writer_meta(w, "window_size", num);
    ra_st_writer_add(w, "relative_position_bias_table", src->dtype, 2, src->shape, src->data);
    ra_st_writer_add(w, "qkv.weight", RA_DTYPE_F32, 2, (int64_t[]){3 * C, C}, qkv);
    ra_st_writer_add(w, "qkv.bias", RA_DTYPE_F32, 1, (int64_t[]){3 * C}, bias);
    ra_st_writer_add(w, "proj.weight", RA_DTYPE_F32, 2, (int64_t[]){C, C}, proj);
    ra_st_writer_add(w, "proj.bias", RA_DTYPE_F32, 1, (int64_t[]){C}, bias);
    CHECK(ra_st_writer_save(w, model) == RA_OK, "%s", ra_last_error());
    ra_st_writer_free(w);

    snprintf(cmd, sizeof cmd, "'%s' resize '%s' --window %dx%d -o '%s'", relattn, model, w2, w2, out);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    ra_model *m;
    ra_status st = ra_model_load(&m, out);
    CHECK(st == RA_OK, "%s: resized model does not load: %s", name, ra_last_error());
    if (st == RA_OK) {
        const ra_attn_layer *l = ra_model_attn(m);
        CHECK(ra_attn_layer_config(l)->window[0] == w2, "%s: window not updated", name);
        float *want = malloc(sizeof(float) * dst->numel);
        ra_st_to_f32(want, dst);
        const ra_param_info *p = NULL;
        for (int i = 0; i < ra_model_param_count(m); i++)
            if (!strcmp(ra_model_param(m, i)->name, "relative_position_bias_table"))
                p = ra_model_param(m, i);
        CHECK(p && p->numel == dst->numel, "%s: resized table has the wrong size", name);
        if (p && p->numel == dst->numel)
            CHECK_CLOSE(ra_model_weights(m) + p->offset, want, dst->numel, 1e-5, 1e-5, name);
        /* and it runs on windows of the new size */
        const int n = w2 * w2;
        float *x = calloc((size_t)2 * n * C, sizeof(float)), *y = malloc(sizeof(float) * 2 * n * C);
        for (int i = 0; i < 2 * n * C; i++) x[i] = (float)((i * 13 % 9) - 4) / 4;
        CHECK(ra_attn_layer_forward(l, y, NULL, x, NULL, 2, n, n, NULL, 0) == RA_OK,
              "%s: forward at the new window: %s", name, ra_last_error());
        free(x), free(y), free(want);
        ra_model_free(m);
    }
    remove(model), remove(out);
    ra_st_close(f);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_resize FIXTURES_DIR RELATTN_BINARY\n");
        return 2;
    }
    round_trip(argv[1], argv[2], "table_resize_7x7_12x12_h3", 7, 12, 3);
    round_trip(argv[1], argv[2], "table_resize_12x12_7x7_h4", 12, 7, 4);
    return check_done();
}
