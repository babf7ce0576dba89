/* test_index.c - relative position indices against the tables printed in
 * docs/reference.md (section 1.2), PyTorch's own (fixtures), a brute-force definition, and every
 * invalid configuration. */
#include "check.h"
#include "relattn.h"

#include <stdint.h>
#include <string.h>

/* The definition of docs/reference.md, section 1.2, written out per entry, for any 3-D case
 * (d1 = d2 = 1 is the 2-D index). */
static int32_t brute(int i, int j, int d1, int s, int wh, int ww) {
    int n = wh * ww;
    int qd = i / n, qh = i % n / ww, qw = i % ww;
    int kd = j / n * s, kh = j % n / ww, kw = j % ww;
    return (qd - kd + d1 - 1) * (2 * wh - 1) * (2 * ww - 1) + (qh - kh + wh - 1) * (2 * ww - 1) +
           (qw - kw + ww - 1);
}

static void seeds(void) {
    int32_t idx[49 * 49];
    int64_t rows;
    /* the 2x2 window, whole (docs/reference.md, section 1.2) */
    static const int32_t two[16] = {4, 3, 1, 0, 5, 4, 2, 1, 7, 6, 4, 3, 8, 7, 5, 4};
    CHECK(ra_relpos_index_2d(idx, 2, 2, &rows) == RA_OK && rows == 9, "2x2");
    CHECK(memcmp(idx, two, sizeof two) == 0, "2x2 index differs from docs/reference.md's");
    /* the 7x7 window: first row (as docs/reference.md prints it), second row start, last row */
    static const int32_t first[49] = {
        84, 83, 82, 81, 80, 79, 78, 71, 70, 69, 68, 67, 66, 65, 58, 57, 56,
        55, 54, 53, 52, 45, 44, 43, 42, 41, 40, 39, 32, 31, 30, 29, 28, 27,
        26, 19, 18, 17, 16, 15, 14, 13, 6,  5,  4,  3,  2,  1,  0};
    static const int32_t last[49] = {
        168, 167, 166, 165, 164, 163, 162, 155, 154, 153, 152, 151, 150, 149, 142, 141, 140,
        139, 138, 137, 136, 129, 128, 127, 126, 125, 124, 123, 116, 115, 114, 113, 112, 111,
        110, 103, 102, 101, 100, 99,  98,  97,  90,  89,  88,  87,  86,  85,  84};
    CHECK(ra_relpos_index_2d(idx, 7, 7, &rows) == RA_OK && rows == 169, "7x7");
    CHECK(memcmp(idx, first, sizeof first) == 0, "7x7 first row differs from the official Swin's");
    CHECK(memcmp(idx + 48 * 49, last, sizeof last) == 0, "7x7 last row differs from the official Swin's");
    CHECK(idx[49] == 85 && idx[50] == 84, "7x7 second row starts 85 84, got %d %d", idx[49], idx[50]);
    int32_t lo = 1 << 30, hi = -1;
    for (int e = 0; e < 49 * 49; e++) lo = idx[e] < lo ? idx[e] : lo, hi = idx[e] > hi ? idx[e] : hi;
    CHECK(lo == 0 && hi == 168, "7x7 spans %d..%d, seed says 0..168", lo, hi);
}

/* Random valid configurations against the brute-force definition. */
static void brute_force(void) {
    static int32_t idx[1 << 15];   /* largest case: 150 x 150 */
    for (int wh = 1; wh <= 5; wh++)
        for (int ww = 1; ww <= 5; ww++)
            for (int d1 = 1; d1 <= 6; d1++)
                for (int d2 = 1; d2 <= d1 + 1; d2++) {
                    int s = (d1 + 1) / d2, nkv = (d1 + s - 1) / s;
                    int64_t rows;
                    ra_status st = ra_relpos_index_3d(idx, d1, d2, wh, ww, &rows);
                    if (nkv != d2) {
                        CHECK(st == RA_ERR_ARG && *ra_last_error(),
                              "d1=%d d2=%d must be refused", d1, d2);
                        continue;
                    }
                    CHECK(st == RA_OK, "d1=%d d2=%d %dx%d: %s", d1, d2, wh, ww, ra_last_error());
                    CHECK(rows == (int64_t)(2 * d1 - 1) * (2 * wh - 1) * (2 * ww - 1), "rows");
                    int n1 = d1 * wh * ww, n2 = d2 * wh * ww, bad = 0;
                    for (int i = 0; i < n1; i++)
                        for (int j = 0; j < n2; j++)
                            bad += idx[i * n2 + j] != brute(i, j, d1, s, wh, ww);
                    CHECK(bad == 0, "3-D d1=%d d2=%d %dx%d: %d entries differ", d1, d2, wh, ww, bad);
                }
    for (int n = 1; n <= 9; n++)
        for (int k = 0; k <= 10; k++) {
            CHECK(ra_relpos_index_clip(idx, n, k) == RA_OK, "clip");
            int bad = 0;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) {
                    int d = j - i, c = d < -k ? -k : d > k ? k : d;
                    bad += idx[i * n + j] != c + k;
                }
            CHECK(bad == 0, "clip n=%d k=%d: %d entries differ", n, k, bad);
        }
}

/* PyTorch's relative_position_index, written by tools/make_fixtures.py. */
static void fixtures(const char *dir) {
    char path[1024], name[256];
    snprintf(path, sizeof path, "%s/indices.txt", dir);
    FILE *list = fopen(path, "r");
    CHECK(list != NULL, "cannot open %s", path);
    if (!list) return;
    int cases = 0;
    while (fscanf(list, "%255s", name) == 1) {
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
        ra_st_file *f;
        if (ra_st_open(&f, path) != RA_OK) {
            CHECK(0, "%s: %s", path, ra_last_error());
            continue;
        }
        const ra_st_tensor *t = ra_st_find(f, "index");
        const char *kind = ra_st_meta(f, "kind");
        CHECK(t && kind && t->ndim == 2, "%s: no index", name);
        if (!t || !kind || t->ndim != 2) { ra_st_close(f); continue; }
        int64_t n1 = t->shape[0], n2 = t->shape[1], *want = malloc(sizeof(int64_t) * n1 * n2);
        int32_t *got = malloc(sizeof(int32_t) * n1 * n2);
        ra_st_to_i64(want, t);
        ra_status st;
        if (!strcmp(kind, "clip"))
            st = ra_relpos_index_clip(got, atoi(ra_st_meta(f, "n")), atoi(ra_st_meta(f, "k")));
        else if (!strcmp(kind, "3d"))
            st = ra_relpos_index_3d(got, atoi(ra_st_meta(f, "d1")), atoi(ra_st_meta(f, "d2")),
                                    atoi(ra_st_meta(f, "wh")), atoi(ra_st_meta(f, "ww")), NULL);
        else
            st = ra_relpos_index_2d(got, atoi(ra_st_meta(f, "wh")), atoi(ra_st_meta(f, "ww")), NULL);
        int bad = 0;
        for (int64_t e = 0; st == RA_OK && e < n1 * n2; e++) bad += got[e] != want[e];
        CHECK(st == RA_OK && bad == 0, "%s: %d of %lld entries differ from PyTorch (%s)", name,
              bad, (long long)(n1 * n2), ra_last_error());
        cases++;
        free(want), free(got);
        ra_st_close(f);
    }
    fclose(list);
    CHECK(cases >= 10, "only %d index fixtures", cases);
}

static void invalid(void) {
    int32_t idx[64];
    int64_t rows;
    const struct { int d1, d2, wh, ww; } bad3[] = {
        {7, 5, 2, 2},   /* stride 1 gives 7 frames, not 5 */
        {3, 5, 2, 2},   /* stride (3+1)/5 = 0 */
        {0, 1, 2, 2}, {1, 0, 2, 2}, {2, 2, 0, 2}, {2, 2, 2, -1}, {-3, 1, 2, 2},
        {5000, 1, 1, 1}, {1, 1, 5000, 1}};
    for (size_t i = 0; i < sizeof bad3 / sizeof bad3[0]; i++) {
        ra_status st = ra_relpos_index_3d(idx, bad3[i].d1, bad3[i].d2, bad3[i].wh, bad3[i].ww, &rows);
        CHECK(st == RA_ERR_ARG && *ra_last_error(), "3-D case %zu accepted", i);
    }
    CHECK(ra_relpos_index_2d(idx, 0, 3, &rows) == RA_ERR_ARG, "0x3");
    CHECK(ra_relpos_index_2d(idx, 3, -2, &rows) == RA_ERR_ARG, "3x-2");
    CHECK(ra_relpos_index_2d(NULL, 4096, 4096, &rows) == RA_ERR_ARG, "huge window must be refused");
    CHECK(ra_relpos_index_clip(idx, 0, 1) == RA_ERR_ARG, "length 0");
    CHECK(ra_relpos_index_clip(idx, 3, -1) == RA_ERR_ARG, "clip -1");
    CHECK(ra_relpos_index_clip(NULL, 1 << 20, 1) == RA_ERR_ARG, "huge length");
    ra_relpos_axes ax = {.naxes = 0};
    CHECK(ra_relpos_index(idx, NULL, NULL, &rows, &ax) == RA_ERR_ARG, "0 axes");
    CHECK(ra_relpos_index(idx, NULL, NULL, &rows, NULL) == RA_ERR_ARG, "NULL axes");
    int q[2] = {0, 3}, k[2] = {0, 1};   /* coordinate 3 outside extent 3 */
    ax = (ra_relpos_axes){.naxes = 1, .extent = {3}, .qn = {2}, .kn = {2},
                          .qcoord = {q}, .kcoord = {k}};
    CHECK(ra_relpos_index(idx, NULL, NULL, &rows, &ax) == RA_ERR_ARG, "coordinate outside");
    /* sizes only: no index written */
    int64_t n1, n2;
    q[1] = 2;
    CHECK(ra_relpos_index(NULL, &n1, &n2, &rows, &ax) == RA_OK && n1 == 2 && n2 == 2 && rows == 5,
          "sizes");
}

/* Bias-table resizing against PyTorch's bicubic interpolation (the Swin
 * authors' fine-tuning recipe), written by tools/make_table_fixtures.py. */
static void table_resize(const char *dir) {
    char path[1024], name[256];
    snprintf(path, sizeof path, "%s/table_resize.txt", dir);
    FILE *list = fopen(path, "r");
    CHECK(list != NULL, "cannot open %s", path);
    int cases = 0;
    while (list && fscanf(list, "%255s", name) == 1) {
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
        ra_st_file *f;
        if (ra_st_open(&f, path) != RA_OK) { CHECK(0, "%s: %s", path, ra_last_error()); continue; }
        int w1h, w1w, w2h, w2w;
        sscanf(ra_st_meta(f, "from"), "%d,%d", &w1h, &w1w);
        sscanf(ra_st_meta(f, "to"), "%d,%d", &w2h, &w2w);
        const ra_st_tensor *ts = ra_st_find(f, "src"), *td = ra_st_find(f, "dst");
        const int nh = (int)ts->shape[1];
        float *src = malloc(sizeof(float) * ts->numel), *want = malloc(sizeof(float) * td->numel);
        float *got = malloc(sizeof(float) * td->numel);
        ra_st_to_f32(src, ts), ra_st_to_f32(want, td);
        CHECK(ra_bias_table_resize(got, src, nh, 2 * w1h - 1, 2 * w1w - 1, 2 * w2h - 1,
                                   2 * w2w - 1) == RA_OK, "%s: %s", name, ra_last_error());
        /* O(1) values summed in another order than PyTorch: 1e-5 absolute */
        CHECK_CLOSE(got, want, td->numel, 1e-5, 1e-5, name);
        free(src), free(want), free(got);
        ra_st_close(f);
        cases++;
    }
    if (list) fclose(list);
    CHECK(cases >= 5, "only %d table resize fixtures", cases);
    /* the same size is the identity (the taps land on the grid) */
    float t[9 * 2], u[9 * 2];
    for (int i = 0; i < 18; i++) t[i] = (float)(i * 7 % 5) - 2;
    CHECK(ra_bias_table_resize(u, t, 2, 3, 3, 3, 3) == RA_OK && memcmp(t, u, sizeof t) == 0,
          "resizing to the same size must be the identity");
    CHECK(ra_bias_table_resize(u, t, 0, 3, 3, 3, 3) == RA_ERR_ARG, "0 heads");
}

int main(int argc, char **argv) {
    seeds();
    brute_force();
    fixtures(argc > 1 ? argv[1] : "tests/fixtures");
    invalid();
    table_resize(argc > 1 ? argv[1] : "tests/fixtures");
    return check_done();
}
