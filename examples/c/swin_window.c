/* swin_window.c - Swin window attention through relattn's public API.
 *
 * Makes a window_attention layer (dim 96, 7x7 windows, 3 heads) with
 * weights initialised as PyTorch's constructor does, runs it over 4 windows
 * of random tokens with the shifted-window mask of a 14x14 map, and prints
 * the first row of the relative position index, the shape of y and a
 * checksum. Build against an installed relattn:
 *   cc swin_window.c $(pkg-config --cflags --libs relattn) -o swin_window
 * or with CMake: find_package(relattn) and relattn::relattn (CMakeLists.txt). */
#include <relattn.h>

#include <stdio.h>
#include <stdlib.h>

static int die(ra_status st) {
    fprintf(stderr, "swin_window: %s: %s\n", ra_status_str(st), ra_last_error());
    return 1;
}

int main(void) {
    printf("relattn %s\n", ra_version());

    /* the index: row 0 of a 7x7 window (84 83 ... 0) */
    static int32_t idx[49 * 49];
    int64_t rows;
    ra_status st = ra_relpos_index_2d(idx, 7, 7, &rows);
    if (st) return die(st);
    printf("index row 0:");
    for (int j = 0; j < 49; j++) printf(" %d", idx[j]);
    printf("\ntable rows: %lld\n", (long long)rows);

    /* the layer, as a model file's metadata would describe it */
    const char *meta[] = {"arch", "window_attention", "dim", "96", "window_size", "7,7",
                          "num_heads", "3"};
    ra_model *m = NULL;
    if ((st = ra_model_create(&m, meta, 4, 0))) return die(st);

    /* one 14x14 map shifted by 3: 4 windows of 49 tokens, and their mask */
    ra_window_spec g = {.d = 1, .h = 14, .w = 14, .wd = 1, .wh = 7, .ww = 7, .sh = 3, .sw = 3};
    static float x[4 * 49 * 96], mask[4 * 49 * 49];
    if ((st = ra_window_mask(mask, &g))) return die(st);
    ra_rng rng;
    ra_rng_seed(&rng, 1);
    ra_rng_fill_normal(&rng, x, 4 * 49 * 96, 0.0f, 1.0f);

    ra_tensor in[2] = {{.name = "x", .ndim = 3, .shape = {4, 49, 96}, .data = x},
                       {.name = "mask", .ndim = 3, .shape = {4, 49, 49}, .data = mask}};
    ra_run *r = NULL;
    if ((st = ra_run_create(&r, m, RA_RUN_FORWARD_ATTN, in, 2)) || (st = ra_run_exec(r)))
        return die(st);
    const ra_tensor *y = ra_run_find(r, "y"), *attn = ra_run_find(r, "attn");
    double sum = 0, psum = 0;
    for (int64_t i = 0; i < 4 * 49 * 96; i++) sum += y->data[i];
    for (int64_t i = 0; i < 4 * 3 * 49 * 49; i++) psum += attn->data[i];
    printf("y (%lld, %lld, %lld), sum %.6f; attention rows sum to %.4f each\n",
           (long long)y->shape[0], (long long)y->shape[1], (long long)y->shape[2], sum,
           psum / (4 * 3 * 49));
    ra_run_free(r);
    ra_model_free(m);
    return 0;
}
