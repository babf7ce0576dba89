/* test_safetensors.c - the safetensors reader, writer and conversions:
 * a writer round trip, known dtype conversions, and malformed files that
 * must all be refused with RA_ERR_FORMAT and a reason. */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "relattn.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A file in memory: length prefix n, then hdr (hlen bytes), then data. */
static ra_status open_raw(uint64_t n, const char *hdr, size_t hlen,
                          const void *data, size_t dlen) {
    unsigned char *buf = malloc(8 + hlen + dlen + 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    if (hlen) memcpy(buf + 8, hdr, hlen);
    if (dlen) memcpy(buf + 8 + hlen, data, dlen);
    ra_st_file *f = NULL;
    ra_status s = ra_st_open_memory(&f, buf, 8 + hlen + dlen);
    ra_st_close(f);
    free(buf);
    return s;
}

/* The common case: the prefix is the header's true length. */
static ra_status open_hdr(const char *hdr, const void *data, size_t dlen) {
    return open_raw(strlen(hdr), hdr, strlen(hdr), data, dlen);
}

#define BAD(s, what)                                                          \
    do {                                                                      \
        ra_status s_ = (s);                                                   \
        CHECK(s_ == RA_ERR_FORMAT && ra_last_error()[0] != '\0',              \
              "%s: status %d, error '%s'", (what), (int)s_, ra_last_error()); \
    } while (0)

#define T_(name, body) "\"" name "\":{" body "}"
#define F32_4 "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"

static void test_malformed(void) {
    unsigned char z[64] = {0};
    ra_st_file *f = NULL;

    /* the length prefix */
    BAD(ra_st_open_memory(&f, z, 0), "empty buffer");
    BAD(ra_st_open_memory(&f, z, 5), "truncated length prefix");
    BAD(open_raw(100, "{}", 2, NULL, 0), "header length larger than the file");
    BAD(open_raw(100000001, "{}", 2, NULL, 0), "header length > 100 MB");
    BAD(open_raw(UINT64_MAX, "{}", 2, NULL, 0), "header length 2^64-1");
    BAD(open_raw(0, "", 0, NULL, 0), "zero header length");

    /* the JSON itself */
    BAD(open_hdr("{not json}", NULL, 0), "non-JSON");
    BAD(open_hdr("[1, 2]", NULL, 0), "JSON array");
    BAD(open_hdr("\"str\"", NULL, 0), "JSON string");
    BAD(open_hdr(" {}", NULL, 0), "leading whitespace");
    BAD(open_hdr("{} x", NULL, 0), "trailing garbage after the JSON");
    BAD(open_hdr("{\"a\":{" F32_4 "},\"a\":{" F32_4 "}}", z, 4), "duplicate tensor name");
    BAD(open_hdr("{\"a\":{" F32_4 ",\"dtype\":\"F32\"}}", z, 4), "duplicate key in an entry");
    BAD(open_raw(9, "{\"a\xff\":1}", 9, NULL, 0), "invalid UTF-8");
    BAD(open_hdr("{\"a\\u0000b\":{" F32_4 "}}", z, 4), "NUL in a name");

    /* tensor entries */
    BAD(open_hdr("{\"\":{" F32_4 "}}", z, 4), "empty name");
    BAD(open_hdr("{\"a\":[1]}", NULL, 0), "entry not an object");
    BAD(open_hdr("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", z, 4), "missing dtype");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", z, 4), "missing shape");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", z, 4), "missing data_offsets");
    BAD(open_hdr("{\"a\":{" F32_4 ",\"offsets\":[0,4]}}", z, 4), "extra key");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", z, 1),
        "unknown dtype");
    BAD(open_hdr("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", z, 4),
        "dtype not a string");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", z, 4),
        "negative shape");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", z, 4),
        "non-integer shape");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", z, 4),
        "string shape entry");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", z, 4),
        "shape not an array");
    BAD(open_hdr("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
                 z, 1), "too many dims");
    BAD(open_hdr("{\"a\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904,8,0],"
                 "\"data_offsets\":[0,0]}}", NULL, 0), "shape overflow");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387903],"
                 "\"data_offsets\":[0,4]}}", z, 4), "byte count overflow");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", z, 4),
        "offsets reversed");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", z, 4),
        "negative offset");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", z, 8),
        "three offsets");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", z, 4),
        "offsets outside the data");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,12]}}", z, 12),
        "byte count mismatch");
    BAD(open_hdr("{\"a\":{\"dtype\":\"U8\",\"shape\":[7],"
                 "\"data_offsets\":[9223372036854775800,9223372036854775807]}}", z, 7),
        "huge offsets");
    BAD(open_hdr("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
                 "\"data_offsets\":[0,18446744073709551615]}}", z, 1), "offset beyond int64");

    /* the tiling of the data section */
    BAD(open_hdr("{" T_("a", F32_4) ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[2,10]}}", z, 10), "overlap");
    BAD(open_hdr("{" T_("a", F32_4) ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[8,12]}}", z, 12), "gap");
    BAD(open_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", z, 8),
        "data not starting at 0");
    BAD(open_hdr("{" T_("a", F32_4) "}", z, 8), "trailing bytes after the last tensor");
    BAD(open_hdr("{}", z, 1), "data without tensors");
    BAD(open_hdr("{" T_("a", F32_4) "}", NULL, 0), "no data at all");

    /* metadata */
    BAD(open_hdr("{\"__metadata__\":{\"k\":1}}", NULL, 0), "metadata non-string value");
    BAD(open_hdr("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", NULL, 0), "metadata nested object");
    BAD(open_hdr("{\"__metadata__\":[\"k\"]}", NULL, 0), "metadata not an object");
    BAD(open_hdr("{\"__metadata__\":\"k\"}", NULL, 0), "metadata a string");
    BAD(open_hdr("{\"__metadata__\":null}", NULL, 0), "metadata null");

    /* and the ones that are fine */
    CHECK(open_hdr("{}", NULL, 0) == RA_OK, "empty header: %s", ra_last_error());
    CHECK(open_hdr("{}      ", NULL, 0) == RA_OK, "padded header: %s", ra_last_error());
    CHECK(open_hdr("{" T_("b", F32_4) ",\"a\":{\"dtype\":\"U8\",\"shape\":[0],"
                   "\"data_offsets\":[4,4]}}\n \t", z, 4) == RA_OK,
          "unsorted header, 0-byte tensor at the end: %s", ra_last_error());

    /* the reason names the tensor and the numbers */
    open_hdr("{\"qkv.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,12]}}", z, 12);
    CHECK(strstr(ra_last_error(), "'qkv.weight'") && strstr(ra_last_error(), "[3, 2]") &&
          strstr(ra_last_error(), "24"), "message: %s", ra_last_error());
}

static void test_conversions(void) {
    /* F16: 1, -2.5, 65504, 2^-24, 1023*2^-24, 2^-14, inf, -inf, NaN, -0 */
    const uint16_t h[] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x0400,
                          0x7C00, 0xFC00, 0x7E00, 0x8000};
    unsigned char hb[sizeof h * 2 + 1];
    for (size_t i = 0; i < 10; i++) { hb[1 + 2 * i] = (unsigned char)h[i]; hb[2 + 2 * i] = (unsigned char)(h[i] >> 8); }
    ra_st_tensor t = {.name = "h", .dtype = RA_DTYPE_F16, .ndim = 1, .shape = {10},
                      .numel = 10, .data = hb + 1, .nbytes = 20};   /* unaligned */
    float out[16];
    CHECK(ra_st_to_f32(out, &t) == RA_OK, "f16: %s", ra_last_error());
    const float hv[] = {1.0f, -2.5f, 65504.0f, 0x1p-24f, 1023 * 0x1p-24f, 0x1p-14f};
    for (int i = 0; i < 6; i++) CHECK(out[i] == hv[i], "f16[%d] = %g, want %g", i, out[i], hv[i]);
    CHECK(isinf(out[6]) && out[6] > 0, "f16 inf: %g", out[6]);
    CHECK(isinf(out[7]) && out[7] < 0, "f16 -inf: %g", out[7]);
    CHECK(isnan(out[8]), "f16 nan: %g", out[8]);
    CHECK(out[9] == 0 && signbit(out[9]), "f16 -0: %g", out[9]);

    /* BF16 is the top half of an F32: conversion is exact, so the bf16
     * neighbours of 1 stay distinct and 3.140625 is not rounded to pi. */
    const uint16_t b[] = {0x3F80, 0xC020, 0x3F81, 0x3F7F, 0x4049, 0x7F80, 0x7FC0};
    unsigned char bb[14];
    for (int i = 0; i < 7; i++) { bb[2 * i] = (unsigned char)b[i]; bb[2 * i + 1] = (unsigned char)(b[i] >> 8); }
    t = (ra_st_tensor){.name = "b", .dtype = RA_DTYPE_BF16, .ndim = 1, .shape = {7},
                       .numel = 7, .data = bb, .nbytes = 14};
    CHECK(ra_st_to_f32(out, &t) == RA_OK, "bf16: %s", ra_last_error());
    const float bv[] = {1.0f, -2.5f, 1.0f + 0x1p-7f, 1.0f - 0x1p-8f, 3.140625f};
    for (int i = 0; i < 5; i++) CHECK(out[i] == bv[i], "bf16[%d] = %.9g, want %.9g", i, out[i], bv[i]);
    CHECK(isinf(out[5]) && isnan(out[6]), "bf16 inf/nan: %g %g", out[5], out[6]);

    /* F64 rounds to nearest (ties to even), overflows to inf. */
    const double d[] = {1.0, -2.5, 1.0 + 0x1p-24, 1.0 + 0x1p-24 + 0x1p-40, 1.0 + 3 * 0x1p-24,
                        1e300, 1e-60, NAN, 0.1};
    const float dv[] = {1.0f, -2.5f, 1.0f, 1.0f + 0x1p-23f, 1.0f + 0x1p-22f, INFINITY, 0.0f, 0, 0.1f};
    unsigned char db[sizeof d + 3];
    memcpy(db + 3, d, sizeof d);   /* host is little-endian; data unaligned */
    t = (ra_st_tensor){.name = "d", .dtype = RA_DTYPE_F64, .ndim = 1, .shape = {9},
                       .numel = 9, .data = db + 3, .nbytes = sizeof d};
    CHECK(ra_st_to_f32(out, &t) == RA_OK, "f64: %s", ra_last_error());
    for (int i = 0; i < 9; i++)
        if (i != 7) CHECK(out[i] == dv[i], "f64[%d] = %.9g, want %.9g", i, out[i], dv[i]);
    CHECK(isnan(out[7]), "f64 nan: %g", out[7]);

    /* integers: sign extension from every width */
    const unsigned char i8[] = {0xFF, 0x80, 0x7F};
    const unsigned char i16[] = {0x00, 0x80, 0xFF, 0x7F, 0xFE, 0xFF};
    const unsigned char i32[] = {0x00, 0x00, 0x00, 0x80, 0x01, 0x02, 0x03, 0x04};
    const unsigned char i64[] = {0, 0, 0, 0, 0, 0, 0, 0x80, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    const unsigned char bl[] = {0, 1, 2};
    int64_t o[4];
    t = (ra_st_tensor){.name = "i", .dtype = RA_DTYPE_I8, .ndim = 1, .shape = {3}, .numel = 3, .data = i8};
    CHECK(ra_st_to_i64(o, &t) == RA_OK && o[0] == -1 && o[1] == -128 && o[2] == 127, "i8");
    t.dtype = RA_DTYPE_U8;
    CHECK(ra_st_to_i64(o, &t) == RA_OK && o[0] == 255 && o[1] == 128 && o[2] == 127, "u8");
    t.dtype = RA_DTYPE_I16; t.data = i16;
    CHECK(ra_st_to_i64(o, &t) == RA_OK && o[0] == -32768 && o[1] == 32767 && o[2] == -2, "i16");
    t.dtype = RA_DTYPE_I32; t.data = i32; t.numel = 2;
    CHECK(ra_st_to_i64(o, &t) == RA_OK && o[0] == INT32_MIN && o[1] == 0x04030201, "i32");
    t.dtype = RA_DTYPE_I64; t.data = i64;
    CHECK(ra_st_to_i64(o, &t) == RA_OK && o[0] == INT64_MIN && o[1] == -1, "i64");
    t.dtype = RA_DTYPE_BOOL; t.data = bl; t.numel = 3;
    CHECK(ra_st_to_i64(o, &t) == RA_OK && o[0] == 0 && o[1] == 1 && o[2] == 1, "bool");
    CHECK(ra_st_to_f32(out, &t) == RA_ERR_SHAPE, "bool -> f32 refused");
    t.dtype = RA_DTYPE_F32;
    CHECK(ra_st_to_i64(o, &t) == RA_ERR_SHAPE, "f32 -> i64 refused");
}

static int no_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int ok = d != NULL;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) ok = 0;
    if (d) closedir(d);
    return ok;
}

static void test_roundtrip(const char *dir) {
    char path[512], bad[600];
    snprintf(path, sizeof path, "%s/rt.safetensors", dir);
    float f32[6] = {1, -2, 3.5f, 0, 1e-30f, -7};
    uint16_t f16[4] = {0x3C00, 0xC100, 0x7BFF, 0x0001};
    uint16_t bf16[3] = {0x3F80, 0xC020, 0x4049};
    double f64[2] = {0.1, -1e300};
    int64_t i64[3] = {INT64_MIN, -1, INT64_MAX};
    int32_t i32[4] = {1, -2, 3, -4};
    int16_t i16[1] = {-300};
    int8_t i8[5] = {-128, -1, 0, 1, 127};
    uint8_t u8[3] = {0, 128, 255}, bl[4] = {1, 0, 0, 1};
    float scalar = 42.0f;
    struct { const char *name; ra_dtype dt; int nd; int64_t shape[3]; const void *data; size_t nb; } in[] = {
        {"qkv.weight", RA_DTYPE_F32, 2, {2, 3}, f32, sizeof f32},
        {"half", RA_DTYPE_F16, 1, {4}, f16, sizeof f16},
        {"brain", RA_DTYPE_BF16, 1, {3}, bf16, sizeof bf16},
        {"double", RA_DTYPE_F64, 2, {2, 1}, f64, sizeof f64},
        {"i64", RA_DTYPE_I64, 1, {3}, i64, sizeof i64},
        {"i32", RA_DTYPE_I32, 2, {2, 2}, i32, sizeof i32},
        {"i16", RA_DTYPE_I16, 3, {1, 1, 1}, i16, sizeof i16},
        {"i8", RA_DTYPE_I8, 1, {5}, i8, sizeof i8},
        {"u8", RA_DTYPE_U8, 1, {3}, u8, sizeof u8},
        {"mask", RA_DTYPE_BOOL, 2, {2, 2}, bl, sizeof bl},
        {"empty", RA_DTYPE_F32, 2, {0, 3}, NULL, 0},
        {"scalar", RA_DTYPE_F32, 0, {0}, &scalar, 4},
        {"\xc3\xa9t\xc3\xa9", RA_DTYPE_U8, 1, {1}, u8, 1},   /* UTF-8 name */
    };
    const int nin = (int)(sizeof in / sizeof in[0]);
    ra_st_writer *w = ra_st_writer_new();
    CHECK(w != NULL, "writer");
    for (int i = 0; i < nin; i++)
        CHECK(ra_st_writer_add(w, in[i].name, in[i].dt, in[i].nd, in[i].shape, in[i].data) == RA_OK,
              "add %s: %s", in[i].name, ra_last_error());
    CHECK(ra_st_writer_meta(w, "arch", "window_attention") == RA_OK, "meta");
    CHECK(ra_st_writer_meta(w, "window_size", "6,6") == RA_OK, "meta");
    CHECK(ra_st_writer_meta(w, "window_size", "7,7") == RA_OK, "meta replace");

    /* the writer's refusals */
    CHECK(ra_st_writer_add(w, "i8", RA_DTYPE_I8, 1, in[7].shape, i8) == RA_ERR_ARG, "duplicate name");
    CHECK(ra_st_writer_add(w, "", RA_DTYPE_I8, 1, in[7].shape, i8) == RA_ERR_ARG, "empty name");
    CHECK(ra_st_writer_add(w, "__metadata__", RA_DTYPE_I8, 1, in[7].shape, i8) == RA_ERR_ARG,
          "reserved name");
    CHECK(ra_st_writer_add(w, "x", RA_DTYPE_INVALID, 1, in[7].shape, i8) == RA_ERR_ARG, "bad dtype");
    CHECK(ra_st_writer_add(w, "x", RA_DTYPE_I8, 9, in[7].shape, i8) == RA_ERR_ARG, "too many dims");
    int64_t neg[1] = {-1}, huge[2] = {INT64_MAX / 2, 4};
    CHECK(ra_st_writer_add(w, "x", RA_DTYPE_I8, 1, neg, i8) == RA_ERR_ARG, "negative dim");
    CHECK(ra_st_writer_add(w, "x", RA_DTYPE_I8, 2, huge, i8) == RA_ERR_NOMEM, "overflowing shape");
    CHECK(ra_st_writer_add(w, "x\xff", RA_DTYPE_I8, 1, in[7].shape, i8) == RA_ERR_ARG, "bad UTF-8");

    CHECK(ra_st_writer_save(w, path) == RA_OK, "save: %s", ra_last_error());
    CHECK(no_tmp_files(dir), "temporary file left after save");

    /* the header is padded so that the data starts 8-byte aligned */
    FILE *fp = fopen(path, "rb");
    unsigned char pre[8] = {0};
    CHECK(fp && fread(pre, 1, 8, fp) == 8, "read prefix");
    if (fp) fclose(fp);
    uint64_t hn = 0;
    for (int i = 0; i < 8; i++) hn |= (uint64_t)pre[i] << (8 * i);
    CHECK(hn % 8 == 0 && hn > 0, "header length %llu not a multiple of 8", (unsigned long long)hn);

    ra_st_file *f = NULL;
    CHECK(ra_st_open(&f, path) == RA_OK, "open: %s", ra_last_error());
    if (f) {
        CHECK(ra_st_count(f) == nin, "count %d", ra_st_count(f));
        /* file order is name order, as the writer sorted them */
        for (int i = 1; i < ra_st_count(f); i++)
            CHECK(strcmp(ra_st_at(f, i - 1)->name, ra_st_at(f, i)->name) < 0, "order at %d", i);
        for (int i = 0; i < nin; i++) {
            const ra_st_tensor *t = ra_st_find(f, in[i].name);
            CHECK(t != NULL, "find %s", in[i].name);
            if (!t) continue;
            int same = t->dtype == in[i].dt && t->ndim == in[i].nd && t->nbytes == in[i].nb &&
                       strcmp(t->name, in[i].name) == 0;
            for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == in[i].shape[d];
            CHECK(same, "%s: dtype/shape/nbytes differ", in[i].name);
            CHECK(in[i].nb == 0 || memcmp(t->data, in[i].data, in[i].nb) == 0, "%s: bytes", in[i].name);
        }
        CHECK(ra_st_find(f, "nope") == NULL && ra_st_find(f, "qkv") == NULL, "find missing");
        CHECK(ra_st_at(f, -1) == NULL && ra_st_at(f, nin) == NULL, "at out of range");
        const ra_st_tensor *sc = ra_st_find(f, "scalar");
        CHECK(sc && sc->ndim == 0 && sc->numel == 1, "scalar shape []");
        const ra_st_tensor *em = ra_st_find(f, "empty");
        CHECK(em && em->numel == 0 && em->nbytes == 0, "0-element tensor");
        float got[6];
        CHECK(ra_st_to_f32(got, ra_st_find(f, "qkv.weight")) == RA_OK, "to_f32");
        CHECK_CLOSE(got, f32, 6, 1e-7, 1e-38, "f32 values");
        int64_t gi[4];
        CHECK(ra_st_to_i64(gi, ra_st_find(f, "i32")) == RA_OK && gi[3] == -4, "i32 values");
        CHECK(ra_st_meta_count(f) == 2, "meta count %d", ra_st_meta_count(f));
        CHECK(ra_st_meta(f, "arch") && strcmp(ra_st_meta(f, "arch"), "window_attention") == 0, "arch");
        CHECK(ra_st_meta(f, "window_size") && strcmp(ra_st_meta(f, "window_size"), "7,7") == 0,
              "replaced value");
        CHECK(ra_st_meta(f, "nope") == NULL && ra_st_meta_key(f, 2) == NULL, "meta missing");
        int seen = 0;
        for (int i = 0; i < ra_st_meta_count(f); i++)
            seen += strcmp(ra_st_meta_key(f, i), "arch") == 0 || strcmp(ra_st_meta_key(f, i), "window_size") == 0;
        CHECK(seen == 2, "meta keys");
    }
    ra_st_close(f);

    /* a file this process read is never replaced (ra_output_check): by any
     * spelling of its path, until the program forgets it */
    struct stat before, after;
    CHECK(stat(path, &before) == 0, "stat");
    CHECK(ra_output_check(path) == RA_ERR_WRITE && strstr(ra_last_error(), "an input"),
          "output check of a file read: %s", ra_last_error());
    CHECK(ra_st_writer_save(w, path) == RA_ERR_WRITE && strstr(ra_last_error(), path),
          "save over a file read: %s", ra_last_error());
    CHECK(stat(path, &after) == 0 && after.st_ino == before.st_ino &&
          after.st_mtime == before.st_mtime, "the file read was replaced");
    ra_input_forget(path);
    CHECK(ra_output_check(path) == RA_OK, "forgotten: %s", ra_last_error());
    /* saving over an existing file replaces it */
    CHECK(ra_st_writer_save(w, path) == RA_OK, "save again: %s", ra_last_error());

    /* failures leave nothing behind */
    snprintf(bad, sizeof bad, "%s/missing/x.safetensors", dir);
    CHECK(ra_st_writer_save(w, bad) == RA_ERR_WRITE && ra_last_error()[0], "save into missing dir");
    struct stat st;
    CHECK(stat(bad, &st) != 0, "file created in missing dir");
    snprintf(bad, sizeof bad, "%s/adir", dir);
    CHECK(mkdir(bad, 0755) == 0, "mkdir");
    CHECK(ra_st_writer_save(w, bad) == RA_ERR_WRITE, "save onto a directory");
    CHECK(no_tmp_files(dir), "temporary file left after a failed save");
    ra_st_writer_free(w);

    /* an empty writer gives a valid empty file */
    w = ra_st_writer_new();
    snprintf(bad, sizeof bad, "%s/empty.safetensors", dir);
    CHECK(ra_st_writer_save(w, bad) == RA_OK, "save empty: %s", ra_last_error());
    f = NULL;
    CHECK(ra_st_open(&f, bad) == RA_OK && ra_st_count(f) == 0 && ra_st_meta_count(f) == 0,
          "open empty: %s", ra_last_error());
    ra_st_close(f);
    ra_st_writer_free(w);
    unlink(bad);

    /* opening: missing, directory, empty and malformed files */
    f = NULL;
    snprintf(bad, sizeof bad, "%s/does-not-exist", dir);
    CHECK(ra_st_open(&f, bad) == RA_ERR_IO && f == NULL && ra_last_error()[0], "missing path");
    CHECK(ra_st_open(&f, dir) == RA_ERR_IO, "directory");
    snprintf(bad, sizeof bad, "%s/zero", dir);
    fp = fopen(bad, "wb");
    if (fp) fclose(fp);
    CHECK(ra_st_open(&f, bad) == RA_ERR_FORMAT, "empty file");
    fp = fopen(bad, "wb");
    if (fp) { fwrite("\x40\0\0\0\0\0\0\0{}", 1, 10, fp); fclose(fp); }
    CHECK(ra_st_open(&f, bad) == RA_ERR_FORMAT && strstr(ra_last_error(), bad),
          "short header file: %s", ra_last_error());
    unlink(bad);
    snprintf(bad, sizeof bad, "%s/adir", dir);
    rmdir(bad);
    unlink(path);
}

/* ra_st_read_f32 / _i64 read through the file what ra_st_to_f32 / _i64
 * convert from the mapping, bit for bit, for every dtype and for tensors of
 * more than one slice and page; they refuse a tensor of another file and
 * the wrong kind of dtype; a file opened from memory converts; and a file
 * cut short after it was opened is RA_ERR_FORMAT with a reason, whatever
 * is read from it (a model too), never a SIGBUS. */
static void test_read(const char *dir, const char *fixtures) {
    char path[512];
    snprintf(path, sizeof path, "%s/read.safetensors", dir);
    enum { N = 20011 };   /* > one slice of 4096, several pages, odd */
    float *f32 = malloc(N * sizeof *f32);
    uint16_t *f16 = malloc(N * sizeof *f16), *bf16 = malloc(N * sizeof *bf16);
    double *f64 = malloc(N * sizeof *f64);
    int64_t *i64 = malloc(N * sizeof *i64);
    int32_t *i32 = malloc(N * sizeof *i32);
    uint8_t *u8 = malloc(N);
    for (int i = 0; i < N; i++) {
        f32[i] = (float)i * 0.37f - 900.0f, f64[i] = -(double)i / 7.0;
        f16[i] = (uint16_t)(i * 13), bf16[i] = (uint16_t)(i * 31 + 7);
        i64[i] = (int64_t)i * -123456789, i32[i] = i * -3, u8[i] = (uint8_t)i;
    }
    const struct { const char *name; ra_dtype dt; const void *data; int is_float; } in[] = {
        {"a.f32", RA_DTYPE_F32, f32, 1}, {"b.f16", RA_DTYPE_F16, f16, 1},
        {"c.bf16", RA_DTYPE_BF16, bf16, 1}, {"d.f64", RA_DTYPE_F64, f64, 1},
        {"e.i64", RA_DTYPE_I64, i64, 0}, {"f.i32", RA_DTYPE_I32, i32, 0},
        {"g.u8", RA_DTYPE_U8, u8, 0}, {"h.f32", RA_DTYPE_F32, f32 + 1, 1},
    };
    const int nin = (int)(sizeof in / sizeof in[0]);
    ra_st_writer *w = ra_st_writer_new();
    for (int i = 0; i < nin; i++)
        CHECK(ra_st_writer_add(w, in[i].name, in[i].dt, 1, (int64_t[]){N - i}, in[i].data) == RA_OK,
              "add %s: %s", in[i].name, ra_last_error());
    CHECK(ra_st_writer_save(w, path) == RA_OK, "save: %s", ra_last_error());
    ra_st_writer_free(w);

    ra_st_file *f = NULL, *g = NULL;
    CHECK(ra_st_open(&f, path) == RA_OK, "open: %s", ra_last_error());
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    int64_t *c = malloc(N * sizeof *c), *d = malloc(N * sizeof *d);
    for (int i = 0; f && i < nin; i++) {
        const ra_st_tensor *t = ra_st_find(f, in[i].name);
        if (in[i].is_float) {
            CHECK(ra_st_to_f32(a, t) == RA_OK && ra_st_read_f32(b, f, t) == RA_OK &&
                  memcmp(a, b, (size_t)t->numel * sizeof *a) == 0,
                  "%s: read_f32 differs from to_f32 (%s)", t->name, ra_last_error());
            CHECK(ra_st_read_i64(c, f, t) == RA_ERR_SHAPE, "%s: read_i64 refused", t->name);
        } else {
            CHECK(ra_st_to_i64(c, t) == RA_OK && ra_st_read_i64(d, f, t) == RA_OK &&
                  memcmp(c, d, (size_t)t->numel * sizeof *c) == 0,
                  "%s: read_i64 differs from to_i64 (%s)", t->name, ra_last_error());
            CHECK(ra_st_read_f32(a, f, t) == RA_ERR_SHAPE, "%s: read_f32 refused", t->name);
        }
    }
    /* from memory: the same bytes, converted */
    FILE *fp = fopen(path, "rb");
    unsigned char *bytes = malloc(4 << 20);
    const size_t len = fp ? fread(bytes, 1, 4 << 20, fp) : 0;
    if (fp) fclose(fp);
    CHECK(ra_st_open_memory(&g, bytes, len) == RA_OK, "open_memory: %s", ra_last_error());
    if (f && g) {
        const ra_st_tensor *t = ra_st_find(g, "d.f64");
        CHECK(ra_st_read_f32(a, g, t) == RA_OK && ra_st_read_f32(b, f, ra_st_find(f, "d.f64")) ==
              RA_OK && memcmp(a, b, (size_t)t->numel * sizeof *a) == 0, "read_f32 from memory");
        CHECK(ra_st_read_f32(a, f, t) == RA_ERR_ARG, "a tensor of another file refused");
        CHECK(ra_st_read_f32(NULL, f, t) == RA_ERR_ARG && ra_st_read_i64(c, NULL, t) == RA_ERR_ARG,
              "NULL arguments refused");
    }
    /* the file cut short under the open handle: the last tensors are gone */
    CHECK(truncate(path, (off_t)(len / 2)) == 0, "truncate");
    if (f) {
        const ra_st_tensor *t = ra_st_find(f, "h.f32");
        ra_status st = ra_st_read_f32(a, f, t);
        CHECK(st == RA_ERR_FORMAT && strstr(ra_last_error(), "ended early"),
              "truncated: status %d, '%s'", (int)st, ra_last_error());
        st = ra_st_read_i64(c, f, ra_st_find(f, "g.u8"));
        CHECK(st == RA_ERR_FORMAT, "truncated i64: status %d, '%s'", (int)st, ra_last_error());
    }
    ra_st_close(f), ra_st_close(g);

    /* a model whose file shrinks between ra_st_open and ra_model_from_file */
    char src[512];
    snprintf(src, sizeof src, "%s/swin_7x7.model.safetensors", fixtures);
    fp = fopen(src, "rb");
    const size_t mlen = fp ? fread(bytes, 1, 4 << 20, fp) : 0;
    if (fp) fclose(fp);
    fp = fopen(path, "wb");
    CHECK(fp && fwrite(bytes, 1, mlen, fp) == mlen && fclose(fp) == 0, "copy %s", src);
    ra_model *m = NULL;
    CHECK(ra_st_open(&f, path) == RA_OK && ra_model_from_file(&m, f) == RA_OK,
          "the model loads: %s", ra_last_error());
    ra_model_free(m), m = NULL;
    CHECK(truncate(path, (off_t)(mlen - 4)) == 0, "truncate the model");
    ra_status st = ra_model_from_file(&m, f);
    CHECK(st == RA_ERR_FORMAT && m == NULL && strstr(ra_last_error(), "ended early"),
          "a model cut short: status %d, '%s'", (int)st, ra_last_error());
    ra_st_close(f);
    unlink(path);
    free(f32), free(f16), free(bf16), free(f64), free(i64), free(i32), free(u8);
    free(a), free(b), free(c), free(d), free(bytes);
}

int main(int argc, char **argv) {
    const char *fixtures = argc > 1 ? argv[1] : "tests/fixtures";
    char dir[] = "/tmp/relattn_st_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_malformed();
    test_conversions();
    test_roundtrip(dir);
    test_read(dir, fixtures);
    ra_st_close(NULL);
    ra_st_writer_free(NULL);
    rmdir(dir);
    return check_done();
}
