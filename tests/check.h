/* check.h - the tests' few macros. Each test program counts its checks and
 * ends with the line "N passed, N failed"; it exits 1 if any failed. */
#ifndef RA_CHECK_H
#define RA_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_passed, check_failed;

/* malloc that ends the test (exit 2) when memory runs out. */
static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (cond) { check_passed++; }                                         \
        else {                                                                \
            check_failed++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

/* run(dir, name) for every fixture name listed in dir/list (one per
 * word); the number of names. */
static inline int check_cases(const char *dir, const char *list,
                              void (*run)(const char *dir, const char *name)) {
    char path[1024], name[256];
    snprintf(path, sizeof path, "%s/%s", dir, list);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    int n = 0;
    while (f && fscanf(f, "%255s", name) == 1) {
        run(dir, name);
        n++;
    }
    if (f) fclose(f);
    return n;
}

/* Largest |a-b| / (atol + rtol*|b|) over n values; <= 1 means close.
 * NaN anywhere counts as far. */
static inline double check_err(const float *a, const float *b, long n,
                               double rtol, double atol) {
    double worst = 0;
    for (long i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (atol + rtol * fabs((double)b[i]));
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* Whether the products are relattn's own AVX-512 ones (the CPU has
 * AVX-512F, RELATTN_GEMM is not "blas", the kernel is not the reference):
 * they compute every output row the same way whatever the batch and the
 * threads; OpenBLAS's results may change in the last bits with either. */
static inline int check_own_products(void) {
    const char *g = getenv("RELATTN_GEMM"), *k = getenv("RELATTN_KERNEL");
    return __builtin_cpu_supports("avx512f") && !(g && strcmp(g, "blas") == 0) &&
           !(k && strcmp(k, "ref") == 0);
}

#define CHECK_CLOSE(a, b, n, rtol, atol, what)                                \
    do {                                                                      \
        double e_ = check_err((a), (b), (n), (rtol), (atol));                 \
        CHECK(e_ <= 1.0, "%s: error %.3g x tolerance", (what), e_);           \
    } while (0)

static inline int check_done(void) {
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
